/* The small GPT trainer the data-parallel workers under msrun start from
 * (dp_worker.c, ep_device_worker.c), the out-of-memory workers'
 * (oom_rounds.h), the checkpoint tests' (ckpt_support.c) and
 * test_train.c's. */
#ifndef MSRUN_TESTS_PARALLEL_WORKER_CONFIG_H
#define MSRUN_TESTS_PARALLEL_WORKER_CONFIG_H

#include "parallel/train.h"

/* 2 blocks of channels with heads heads (sequence 16), micro-batches of
 * 2, accum of them a step, on dp ranks with this one dp_rank rank; seed
 * 7, AdamW with warmup 2 and clipping at 1, the rest the defaults. A
 * worker sets its layout on top. */
static msr_train_config_t worker_config(int heads, int channels, int accum, int dp, int rank)
{
    msr_train_config_t c = {
        .model = {MSR_GPT_VOCAB, 16, 2, heads, channels},
        .micro_batch = 2,
        .grad_accum = accum,
        .dp = dp,
        .dp_rank = rank,
        .seed = 7,
        .lr = 3e-3f,
        .warmup = 2,
        .grad_clip = 1.0f,
        .adamw = {0.9, 0.95, 1e-8, 0.1},
    };
    msr_train_config_defaults(&c);
    return c;
}

#endif
