/* The small model the model-parallel runtime's tests in one process train
 * (tests/parallel/test_mp.c, test_mp_device.c): 2 layers of 16 channels,
 * sequence 32, micro-batches of 2, GRAD_ACCUM of them a step, at ZeRO
 * stage ZERO with small buckets so that a step has several; and their
 * rounds of failed allocations. A program includes this once. */
#ifndef MSRUN_TESTS_PARALLEL_MP_SMALL_H
#define MSRUN_TESTS_PARALLEL_MP_SMALL_H

#include "base/alloc.h"
#include "parallel/train.h"

static inline msr_train_config_t mp_small_config(int grad_accum, int zero)
{
    msr_train_config_t c = {
        .model = {MSR_GPT_VOCAB, 16, 2, 4, 32},
        .micro_batch = 2,
        .grad_accum = grad_accum,
        .dp = 1,
        .dp_rank = 0,
        .seed = 3,
        .lr = 3e-3f,
        .warmup = 1,
        .grad_clip = 1.0f,
        .adamw = {0.9, 0.95, 1e-8, 0.1},
    };
    msr_train_config_defaults(&c);
    c.par.zero = zero;
    c.par.bucket_bytes = 4000;
    c.par.zero_min_bytes = 1024;
    return c;
}

/* One round of the allocation-failure tests: allocation i from now on
 * fails while a runtime trainer of c alone (tp = pp = 1) on ds is
 * created, traces its spans where trace is set, and takes two steps;
 * everything is freed. Returns the status; *failed_p: whether the
 * allocation failed (there were more than i). */
static inline msr_status_t mp_small_alloc_round(const msr_train_config_t *c, msr_dataset_t *ds,
                                                long i, int trace, int *failed_p)
{
    msr_mesh_t *mesh = NULL;
    msr_trainer_t *tr = NULL;
    msr_alloc_fail_at(i);
    msr_status_t st = msr_mesh_create(NULL, 1, 1, 1, 1, &mesh);
    if (st == MSR_OK)
        st = msr_trainer_create_mesh(c, ds, mesh, &tr);
    if (st == MSR_OK && trace)
        msr_mp_trace(tr->mp, 1);
    double loss;
    for (int k = 0; k < 2 && st == MSR_OK; k++)
        st = msr_trainer_step(tr, &loss);
    *failed_p = msr_alloc_failed();
    msr_alloc_fail_at(-1);
    msr_trainer_destroy(tr);
    msr_mesh_destroy(mesh);
    return st;
}

#endif
