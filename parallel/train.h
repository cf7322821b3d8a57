/* The training step: micro-batches from the sampler, forward and backward
 * with gradient accumulation, global gradient-norm clipping, AdamW; and a
 * trainer's checkpoint shard.
 *
 * A step's global batch is micro_batch x grad_accum x dp sequences, rows
 * [0, G) of the step in the sampler's numbering; dp rank r's micro-batch m
 * reads rows [(r * grad_accum + m) * micro_batch, ... + micro_batch). Each
 * micro-batch's backward adds 1/(G*T) of its token losses' gradient, so the
 * summed gradient is that of the mean loss over the global batch however the
 * batch is split.
 *
 * Where a data-parallel runtime plugs in (phase 2; this file runs dp = 1):
 * the model's hooks (gpt.h) carry bucketed gradient reduction during
 * backward of the LAST micro-batch only and ZeRO's gathers; after backward
 * the step waits for the buckets, sums the loss and the squared gradient
 * norm over the group, updates its own slice [opt_lo, opt_hi) of the flat
 * buffer, and (ZeRO) all-gathers the parameters. Every one of those places
 * is marked "dp:" in train.c.
 *
 * Not thread-safe: one thread drives a trainer. */
#ifndef MSR_PARALLEL_TRAIN_H
#define MSR_PARALLEL_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "parallel/adamw.h"
#include "parallel/ckpt.h"
#include "parallel/data.h"
#include "parallel/gpt.h"

typedef struct msr_train_config {
    msr_gpt_config_t model; /* model.max_seq is the sequence length T */
    int micro_batch;        /* B: sequences per forward/backward */
    int grad_accum;         /* micro-batches per step on each dp rank */
    int dp;                 /* data-parallel ranks (1 in this phase) */
    int dp_rank;            /* this rank's index in [0, dp) */
    uint64_t seed;          /* parameter initialisation and the sampler */
    float lr;               /* peak learning rate */
    int warmup;             /* steps of linear warm-up to lr (0: none) */
    float grad_clip;        /* global gradient-norm limit (0: none) */
    msr_adamw_config_t adamw;
} msr_train_config_t;

typedef struct msr_trainer {
    msr_train_config_t cfg;
    msr_gpt_t *model;
    msr_adamw_t *opt;          /* owns m, v of flat [opt_lo, opt_hi) */
    size_t opt_lo, opt_hi;     /* the whole buffer when dp = 1 */
    const msr_dataset_t *data; /* borrowed */
    msr_sampler_t sampler;     /* position: the first sample of the next step */
    uint64_t step;             /* optimizer steps done */
    int *inputs;               /* (B, T) */
    int *targets;              /* (B, T) */
    double last_grad_norm;     /* before clipping, of the last step */
} msr_trainer_t;

/* Checks a configuration: the model's shape, positive batch sizes that fit,
 * dp_rank < dp, a data set longer than T, sane hyperparameters. On failure
 * writes a one-line reason into why and returns MSR_ERR_CONFIG. */
msr_status_t msr_train_config_check(const msr_train_config_t *cfg, const msr_dataset_t *data,
                                    char *why, size_t why_len);

/* Creates a trainer at step 0 with freshly initialised parameters. data
 * must outlive it. Errors: MSR_ERR_CONFIG (logged with the reason),
 * MSR_ERR_UNSUPPORTED (dp > 1 before the communicators exist),
 * MSR_ERR_NO_MEMORY. */
msr_status_t msr_trainer_create(const msr_train_config_t *cfg, const msr_dataset_t *data,
                                msr_trainer_t **tr_p);
void msr_trainer_destroy(msr_trainer_t *tr);

/* The learning rate of step index `step` (0-based): linear warm-up over
 * cfg.warmup steps, then constant. */
float msr_trainer_lr(const msr_trainer_t *tr, uint64_t step);

/* Runs one optimizer step and writes the mean loss over the step's global
 * batch to *loss_p. Errors: those of the model's hooks. */
msr_status_t msr_trainer_step(msr_trainer_t *tr, double *loss_p);

/* Writes this rank's shard of checkpoint tr->step under dir (see ckpt.h):
 * the parameters, this rank's AdamW moments, the optimizer's step count and
 * the sampler. meta is the text a resume must match (the options that decide
 * the numbers). On success *entry_p is the manifest's entry for this rank;
 * the checkpoint is complete once msr_tckpt_manifest_write ran. */
msr_status_t msr_trainer_save(msr_trainer_t *tr, const char *dir, const char *meta,
                              msr_tckpt_entry_t *entry_p);

/* Restores rank dp_rank's state from complete checkpoint `step` under dir.
 * A checkpoint whose meta differs from `meta`, or whose layout (parameter
 * count, shard ranges) differs from this trainer's, is refused with
 * MSR_ERR_CONFIG, both texts logged. Other errors: msr_tckpt_shard_read's. */
msr_status_t msr_trainer_load(msr_trainer_t *tr, const char *dir, uint64_t step, const char *meta);

#endif
