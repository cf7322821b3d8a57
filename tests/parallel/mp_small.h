/* The small model the model-parallel runtime's tests in one process train
 * (tests/parallel/test_mp.c, test_mp_device.c): 2 layers of 16 channels,
 * sequence 32, micro-batches of 2, GRAD_ACCUM of them a step, at ZeRO
 * stage ZERO with small buckets so that a step has several. A program
 * includes this once. */
#ifndef MSRUN_TESTS_PARALLEL_MP_SMALL_H
#define MSRUN_TESTS_PARALLEL_MP_SMALL_H

#include "parallel/train.h"

static msr_train_config_t mp_small_config(int grad_accum, int zero)
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

#endif
