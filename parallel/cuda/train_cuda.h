/* The training step on a CUDA GPU: the same step as parallel/train.h
 * (micro-batches from the sampler, gradient accumulation, the global
 * gradient norm and clipping, AdamW with warm-up), with the model on the
 * device (gpt_cuda.h) and the data-parallel gradients summed by a device
 * communicator (msrun/comm.h: NCCL, or staged through host memory where
 * ranks share a GPU) over the device's flat gradient buffer.
 *
 * Data parallel overlaps communication with backward as the CPU trainer
 * does (cfg->par.overlap, bucket_bytes): during the step's last backward,
 * each time the finished segments at the end of the buffer hold a bucket,
 * the device communicator's stream is made to wait for the model's stream
 * (an event) and a non-blocking allreduce of that range starts there, so it
 * runs while backward goes on over the earlier layers; the host waits for
 * all of them after backward. Without overlap, one allreduce of the whole
 * buffer follows backward. Differences from the CPU trainer: ZeRO stage 0
 * only, no smaller first bucket; checkpoints hold a contiguous slice per
 * rank (ckpt_full.h) and restore into and from the CPU trainer's. The numbers
 * are the CPU trainer's up to fp32 rounding order: the same initial
 * parameters (msr_gpt_init_range), samples, loss scaling and optimizer.
 *
 * Not thread-safe: one thread drives a trainer. Built only with CUDA, as a
 * static library (the tests) and as the module libmsrun_train_cuda.so that
 * train_gpt loads with dlopen for --device cuda; the MSR_API functions are
 * the ones it looks up. */
#ifndef MSR_PARALLEL_CUDA_TRAIN_CUDA_H
#define MSR_PARALLEL_CUDA_TRAIN_CUDA_H

#include <stdint.h>

#include "msrun/base.h"
#include "msrun/comm.h"
#include "parallel/ckpt_full.h"
#include "parallel/host_adamw.h"
#include "model/cuda/gpt_cuda.h"
#include "model/data.h"
#include "parallel/train.h"

typedef struct msr_cuda_trainer {
    msr_train_config_t cfg;
    msr_gpt_t *layout;     /* a CPU model without buffers: the tensor table, init */
    msr_cuda_gpt_t *model; /* on the device */
    msr_comm_t *comm;      /* borrowed host communicator (the loss), NULL alone */
    msr_comm_t *dcomm;     /* the device communicator made from comm, NULL alone */
    int device;            /* the CUDA device */
    int fused_attention;   /* bf16 attention on the tensor cores (gpt_cuda.h) */
    const msr_dataset_t *data;
    msr_sampler_t sampler;
    uint64_t step;   /* optimizer steps done */
    uint64_t adam_t; /* AdamW's step count */
    int *inputs;     /* (B, T) */
    int *targets;    /* (B, T) */
    double last_grad_norm;
    /* the gradient buckets of the step in flight */
    msr_comm_req_t **reqs; /* [L + 2], nreqs posted */
    int nreqs;
    size_t pend_lo, pend_hi; /* ready, not yet posted */
    /* --offload optimizer=host: AdamW's moments and the master parameters
     * on the host, the update there (NULL: on the device) */
    msr_device_t *hdev;
    msr_host_adamw_t *hopt;
    /* --offload params=host too: the blocks' parameters are hopt's master
     * copy and their gradients are here (P floats, pinned), the model
     * fetching each block (gpt_cuda.h, msr_cuda_gpt_create_offload); NULL:
     * all on the device */
    float *hgrads;
    size_t device_bytes; /* the model's device memory (msr_cuda_gpt_device_bytes) */
} msr_cuda_trainer_t;

/* Creates a trainer at step 0 with the parameters every rank initialises
 * alike from cfg->seed. comm: the data-parallel host communicator of
 * cfg->dp members (cfg->dp_rank its rank), or NULL when this process is
 * alone (cfg->dp 1; it then uses device 0). With comm, collective: a
 * device communicator is made from it (msr_comm_device, which picks the GPU
 * from the local rank: local rank % visible devices, and NCCL or the staged
 * path), whose operations wait for backward through events. cfg->par.zero must be 0.
 * cfg->par.offload.mode MSR_OFFLOAD_HOST puts AdamW on the host
 * (parallel/host_adamw.h: its moments and the master parameters in host
 * memory, the device's moments freed; chunks of chunk_bytes / 4
 * gradients, 0: its default); MSR_OFFLOAD_DISK is refused.
 * cfg->par.params_offload.mode MSR_OFFLOAD_HOST (with the optimizer on
 * the host) keeps the blocks' parameters and gradients in host memory
 * too (msr_cuda_gpt_create_offload): the host optimizer's master copy is
 * what the device fetches a block at a time, and the gradients reach host
 * memory a block at a time during backward; the ranks' gradients are then
 * summed over comm (the host communicator) after the last backward, and
 * the update reads them there (msr_host_adamw_step_host). Alone, the
 * losses and parameters are bitwise those without it; MSR_OFFLOAD_DISK
 * is refused (disk is for CPU ranks).
 * data and comm must outlive the trainer. Errors: MSR_ERR_CONFIG,
 * MSR_ERR_UNSUPPORTED (no usable GPU), MSR_ERR_NO_MEMORY, gpt_cuda's and
 * the communicators'. Every function here that fails leaves the reason in
 * the error text (base/err.h, the one train_gpt reads with msr_last_error)
 * and logs nothing: the caller prints it once. */
/* Gives this copy of the logging state (base/log.h) the caller's identity
 * and MSR_LOG_LEVEL, as msr_log_init: the module links its own copy of the
 * base objects, so train_gpt calls this once after dlopen, before any
 * other function here. Never fails. */
MSR_API void msr_cuda_trainer_log_init(const char *prog, int node, int rank);

MSR_API msr_status_t msr_cuda_trainer_create(const msr_train_config_t *cfg,
                                             const msr_dataset_t *data, msr_comm_t *comm,
                                             msr_cuda_trainer_t **tr_p);

/* Frees tr and its device communicator. */
MSR_API void msr_cuda_trainer_destroy(msr_cuda_trainer_t *tr);

/* The learning rate of step index `step`, as msr_trainer_lr. */
float msr_cuda_trainer_lr(const msr_cuda_trainer_t *tr, uint64_t step);

/* One optimizer step; *loss_p gets the mean loss over the step's global
 * batch (the same on every rank). Collective over the communicators. */
MSR_API msr_status_t msr_cuda_trainer_step(msr_cuda_trainer_t *tr, double *loss_p);

/* This rank's checkpoint payload after tr->step steps (ckpt.h's format):
 * its slice msr_ckpt_slice(dp_rank, dp, P) of the parameters and moments
 * (copied from the device), AdamW's step count, the sampler, and meta (as
 * msr_trainer_snapshot's). The ranks' slices cover the buffers once, so
 * msr_trainer_restore (the CPU trainer) restores it too. *buf_p is the
 * caller's (msr_free). Errors: MSR_ERR_NO_MEMORY, gpt_cuda's, the
 * encoder's. */
MSR_API msr_status_t msr_cuda_trainer_snapshot(msr_cuda_trainer_t *tr, const char *meta,
                                               void **buf_p, size_t *len_p);

/* Restores a checkpoint saved by `world` ranks, of this trainer or of the
 * CPU trainer (any ZeRO stage or layout; the same meta): every rank reads
 * every payload (msr_ckpt_gather) and loads the whole state onto its
 * device. Collective over the host communicator: every rank calls it, and
 * all succeed or all fail. Errors: MSR_ERR_CONFIG (other settings: the
 * text shows both), MSR_ERR_CORRUPT, the fetch's, the communicators',
 * MSR_ERR_NO_MEMORY, gpt_cuda's. On failure the trainer is to be
 * destroyed. */
MSR_API msr_status_t msr_cuda_trainer_restore(msr_cuda_trainer_t *tr, const char *meta, int world,
                                              msr_trainer_fetch_t fetch, void *arg);

#endif
