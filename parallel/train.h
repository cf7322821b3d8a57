/* The training step: micro-batches from the sampler, forward and backward
 * with gradient accumulation, data parallel and ZeRO (parallel/dp.h),
 * global gradient-norm clipping, AdamW; and the trainer's checkpoint shard.
 *
 * A step's global batch is micro_batch x grad_accum x dp sequences, rows
 * [0, G) of the step in the sampler's numbering; dp rank r's micro-batch m
 * reads rows [(r * grad_accum + m) * micro_batch, ... + micro_batch). Each
 * micro-batch's backward adds 1/(G*T) of its token losses' gradient, so the
 * gradients summed over micro-batches and ranks are those of the mean loss
 * over the global batch however the batch is split: the ranks' buckets are
 * summed (not averaged), and the result equals one process training the
 * whole global batch up to the order of the additions.
 *
 * Not thread-safe: one thread drives a trainer. */
#ifndef MSR_PARALLEL_TRAIN_H
#define MSR_PARALLEL_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "msrun/comm.h"
#include "msrun/store.h"
#include "model/adamw.h"
#include "parallel/ckpt.h"
#include "parallel/ckpt_map.h"
#include "model/data.h"
#include "parallel/dp.h"
#include "model/gpt.h"
#include "parallel/mesh.h"
#include "parallel/mp.h"

typedef struct msr_train_config {
    msr_gpt_config_t model; /* model.max_seq is the sequence length T */
    int micro_batch;        /* B: sequences per forward/backward */
    int grad_accum;         /* micro-batches per step on each dp rank */
    int dp;                 /* data-parallel ranks: the communicator's size (1 alone) */
    int dp_rank;            /* this rank's index in [0, dp) */
    uint64_t seed;          /* parameter initialisation and the sampler */
    float lr;               /* peak learning rate */
    int warmup;             /* steps of linear warm-up to lr (0: none) */
    float grad_clip;        /* global gradient-norm limit (0: none) */
    msr_adamw_config_t adamw;
    msr_dp_config_t par; /* ZeRO stage, buckets; par.device is the MoE
                          * state's too (mp.device on the model-parallel
                          * path when named: msr_moe_layout_t.device) */
    /* model parallel (parallel/mp.h): tp, pp and cp degrees (1: none) and
     * the rest of its settings (sp, schedule, chunks, recompute,
     * stage_layers; cp, micro_batch, micros and zero are filled in from the
     * fields above and below). Under cp every cp rank of a dp rank reads the
     * same sequences (dp_rank is the dp index, not the dp x cp one).
     * mp.stage_layers is read while the trainer is made (tr->cfg's then
     * points at the model's copy) */
    int tp, pp, cp;
    msr_mp_config_t mp;
    int mp_always; /* run through parallel/mp.h even when nothing asks for it (tracing) */
    /* expert parallel (model/moe.h): the MoE blocks' experts are
     * computed by ep ranks of the data-parallel group, dp ranks [k * ep,
     * (k + 1) * ep) forming group k; 0 or 1: every rank computes them all.
     * With model parallel the groups are cut from the dp group of this
     * rank's (pp, cp, tp) coordinate, a rank holds the experts of its
     * stages' MoE blocks only, and the tp ranks share out their ep rank's
     * experts (model/moe.h); under cp every cp rank holds them too and
     * the capacity is the micro-batch's. Needs model.moe.experts > 0
     * divisible by ep x tp and ep dividing dp */
    int ep;
    /* mixed precision (docs/model.md "bf16 training"): the matrix products'
     * operands in precision (MSR_PRECISION_FP32, the zero value, or bf16;
     * model/layers.h), the fp32 parameters being the master weights that
     * AdamW updates. (Gradients reduced in bf16: par.grad_bf16.) */
    msr_precision_t precision;
    /* the kernels the model's blocks run, on either path (model/kernels.h;
     * not owned, outliving the trainer): NULL is the CPU's, the only table
     * whose buffers dp and mp accept yet (host memory) */
    const struct msr_kernels *kernels;
} msr_train_config_t;

/* Whether cfg runs through parallel/mp.h (tp, pp or cp > 1, sp, chunks,
 * recompute, the chunked head, or mp_always). */
int msr_train_uses_mp(const msr_train_config_t *cfg);

/* cfg->par with the defaults: stage 0, 25 MiB buckets (the first 1 MiB),
 * segments under 64 KiB replicated, overlap on; tp = pp = 1, no sp, 1F1B,
 * one chunk, no recompute. */
void msr_train_config_defaults(msr_train_config_t *cfg);

/* ZeRO-3's experts: the gathered blocks kept at once (the one in use and
 * the next one's prefetch), what --report and the planner count. */
#define MSR_TRAIN_EZ_SLOTS 2

/* A cursor over a store of the experts' blocks (train_experts_disk.c):
 * the block it holds (-1: none), its buffer, whether it changed. */
typedef struct msr_train_ecur {
    int k;
    float *buf;
    int dirty;
} msr_train_ecur_t;

/* What the validations did (msr_trainer_eval, parallel/eval.h), which
 * dp's and the stores' own counters count beside the steps'. */
typedef struct msr_train_eval_stats {
    uint64_t runs;         /* msr_trainer_eval calls */
    uint64_t gathers;      /* ZeRO-3's gathers started */
    uint64_t param_reads;  /* blocks read from the parameters' file */
    uint64_t expert_reads; /* blocks read from the experts' file */
} msr_train_eval_stats_t;

typedef struct msr_trainer {
    msr_train_config_t cfg;
    msr_gpt_t *model;
    msr_dp_t *dp;              /* buckets, shards, the optimizer (dp->opt) */
    const msr_dataset_t *data; /* borrowed */
    msr_sampler_t sampler;     /* position: the first sample of the next step */
    uint64_t step;             /* optimizer steps done */
    int *inputs;               /* (B, T) */
    int *targets;              /* (B, T) */
    double last_grad_norm;     /* before clipping, of the last step */
    const msr_mesh_t *mesh;    /* borrowed; NULL: data parallel only */
    msr_mp_t *mp;              /* model parallel; NULL: the whole model */
    msr_comm_t *ep_comm;       /* the expert-parallel group (owned); NULL: ep 1 */
    /* the dp ranks with this rank's ep index, which hold the same experts
     * and reduce their gradients (owned; NULL: dp = ep), and the experts'
     * optimizer (NULL: a dense model) */
    msr_comm_t *rep_comm;
    int rep_rank, rep_size; /* in the replica group */
    msr_adamw_t *eopt;
    /* the experts' moments in a file of their own under the optimizer's
     * disk offload (cfg.par.offload; eopt->m and eopt->v are then NULL,
     * train_experts.c), and the first failure of a restore's writes into
     * it (eload_st) */
    msr_offload_t *eoff;
    msr_status_t eload_st;
    /* the store elements [eshard_lo, eshard_hi) the experts' optimizer
     * updates here: all at ZeRO 0; under ZeRO >= 1 this rank's block of
     * eblk elements in the replica group, reduced and gathered through
     * escratch (eblk * rep_size floats) */
    size_t eshard_lo, eshard_hi, eblk;
    float *escratch;
    /* ZeRO-3 with replicas (ez 1): the experts' store sharded per MoE
     * block (model/moe.h msr_moe_store_external). Of each held block's
     * ez_per floats this rank keeps [ez_lo, ez_lo + ez_n) (ez_blk =
     * ceil(ez_per / rep_size), ez_lo = min(ez_per, rep_rank * ez_blk)),
     * the blocks' shards one after another in ez_params and ez_grads (the
     * optimizer's shard space, [eshard_lo, eshard_hi) = [0, held * ez_n));
     * a block's parameters are all-gathered into one of the
     * MSR_TRAIN_EZ_SLOTS slots ez_slot (ez_blk * rep_size floats each) for
     * its uses: the block in use and the next one, whose gather
     * (ez_req, one in flight at most) runs while the current one
     * computes; ez_slot_k: the block a slot holds or gathers (-1: none),
     * kept until the slot is needed or the shards change. In its backward
     * a block's gradients go to ez_gfull (as many), which the block's
     * release reduce-scatters into ez_grads. ez_at: the block in use now
     * (-1: none). Under the parameters' disk offload the shards are in
     * store epf instead (ez_params NULL; train_experts_disk.c), ez_guess
     * the block it reads ahead at a pass's end for the next pass's first
     * gather, not taken yet (-1: none) */
    int ez, ez_at, ez_guess;
    size_t ez_per, ez_blk, ez_lo, ez_n;
    float *ez_params, *ez_grads, *ez_gfull;
    float *ez_slot[MSR_TRAIN_EZ_SLOTS];
    int ez_slot_k[MSR_TRAIN_EZ_SLOTS];
    msr_comm_req_t *ez_req[MSR_TRAIN_EZ_SLOTS];
    /* The experts' parameters in a file under the parameters' disk offload
     * (cfg.par.params_offload; train_experts_disk.c): each held MoE
     * block's ed_per floats are block k of store epf, read for the
     * block's passes through dp's hooks (ed_at: the block in use, its
     * buffer ed_buf) and a block at a time by the update, a checkpoint
     * and a restore (through cursor ed_pc); the gradients stay resident
     * in ed_grads (held * ed_per floats; the store's own are freed:
     * msr_moe_store_external), or under the gradients' disk offload
     * (cfg.par.grads_offload; under ZeRO 2 with replicas each block's
     * owned parts reduced into it after the step's backward,
     * msr_train_experts_disk_reduce; under ZeRO 3 the rank's shares,
     * ez_grads NULL, each share's block read, added to and written back
     * by ez_release), in store
     * egf (ed_grads NULL): read and written back around each backward of
     * the block (ed_gbuf; ed_fresh[k]: block k's are this step's zeros,
     * not read yet), read by the norm and the update (cursor ed_gc).
     * ed_hold: the whole parameters, read for an in-memory snapshot (NULL
     * but then). Under ZeRO 1-2 with replicas (eblk > 0) the store holds
     * the whole blocks as above and ed_grads is eblk * rep_size floats
     * (the tail zero), reduce-scattered in place: this rank's block of
     * the sums at rep_rank * eblk; the update walks the shard [eshard_lo,
     * eshard_hi) through the cursor and every block gets the other
     * replicas' owned elements in turn (blocks below ed_gk done) through
     * ed_gath (rep_size * min(eblk, ed_per) floats), in place of
     * escratch (NULL) */
    msr_params_t *epf, *egf;
    size_t ed_per;
    float *ed_grads, *ed_buf, *ed_gbuf, *ed_hold, *ed_gath;
    int ed_gk;
    uint8_t *ed_fresh;
    int ed_at;
    msr_train_ecur_t ed_pc, ed_gc;
    /* set by the caller: msr_trainer_snapshot leaves the pieces' CRCs to
     * msr_tckpt_seal (a thread that writes the payload seals it) */
    int unsealed_snapshots;
    /* set by the caller (NULL: none): called with state_gate_arg before a
     * step's update, a restore or msr_trainer_init_params writes the
     * parameters or moments, so that a payload another thread is copying
     * from them (msr_trainer_snap_copy) is whole first */
    void (*state_gate)(void *arg);
    void *state_gate_arg;
    msr_train_eval_stats_t eval_stats;
} msr_trainer_t;

/* Checks a configuration: the model's shape, positive batch sizes that fit,
 * dp_rank < dp, a data set longer than T, sane hyperparameters, a ZeRO
 * stage 0..3 and a bucket of at least one float. On failure sets the error
 * text (base/err.h: a one-line reason) and returns MSR_ERR_CONFIG. */
msr_status_t msr_train_config_check(const msr_train_config_t *cfg, const msr_dataset_t *data);

/* Creates a trainer at step 0 with freshly initialised parameters, data
 * parallel over comm (NULL: alone, cfg->dp must be 1; else cfg->dp and
 * cfg->dp_rank must be comm's size and rank). data and comm must outlive
 * it. Collective over comm: it ends with one agreement on every rank's
 * outcome, so that when one rank fails (out of memory) every rank fails
 * at once, the failed one with its own error, the others with its status,
 * naming it (docs/model.md "Out of memory while a trainer is made").
 * Errors: MSR_ERR_CONFIG (the reason in the error text, base/err.h),
 * MSR_ERR_NO_MEMORY, the communicator's. */
msr_status_t msr_trainer_create(const msr_train_config_t *cfg, const msr_dataset_t *data,
                                msr_comm_t *comm, msr_trainer_t **tr_p);

/* Creates a trainer on a mesh (parallel/mesh.h): this rank's part of the
 * model (cfg->tp, cfg->pp, cfg->cp, cfg->dp must be the mesh's degrees and
 * cfg->dp_rank its dp rank), data parallel over the mesh's dp x cp group, model
 * parallel as cfg->mp says when msr_train_uses_mp. mesh must outlive it.
 * Collective over the mesh's world, with the same agreement at its end
 * (then the tied embedding's first send over the pipeline).
 * Errors: as msr_trainer_create, and the pipeline's first communication. */
msr_status_t msr_trainer_create_mesh(const msr_train_config_t *cfg, const msr_dataset_t *data,
                                     const msr_mesh_t *mesh, msr_trainer_t **tr_p);

/* With cfg->par.init_later (a run about to resume), the create left the
 * parameters unset (msr_dp_init_left), for the restore to write; when
 * there is nothing to resume this sets them as the create would have (the
 * same numbers). Collective with model parallel (the tied embedding);
 * nothing to do without init_later. */
msr_status_t msr_trainer_init_params(msr_trainer_t *tr);

/* Frees tr. After a failed step, destroy the communicator first (see
 * msr_dp_destroy). */
void msr_trainer_destroy(msr_trainer_t *tr);

/* The learning rate of step index `step` (0-based): linear warm-up over
 * cfg.warmup steps, then constant. */
float msr_trainer_lr(const msr_trainer_t *tr, uint64_t step);

/* Runs one optimizer step and writes the mean loss over the step's global
 * batch to *loss_p (the same on every rank). Collective over the
 * communicator. Errors: the model's and the communicator's. */
msr_status_t msr_trainer_step(msr_trainer_t *tr, double *loss_p);

/* The MoE router's choices since the last call, summed over the
 * data-parallel group (with model parallel: over the world, each block's
 * counted once, by its stage's tp rank 0), then reset: for each MoE block i, out[i * (E + 2)
 * ..] = tokens routed, choices dropped for capacity, and each expert's
 * kept choices (E). out holds msr_moe_blocks * (E + 2) entries. Collective
 * over the data-parallel group (the world with model parallel). Errors: MSR_ERR_STATE (a dense
 * model), the communicator's. */
msr_status_t msr_trainer_moe_stats(msr_trainer_t *tr, int64_t *out);

/* The bytes this rank holds for the experts of a MoE model (all 0 for a
 * dense one): their parameters and gradients resident (the store, or
 * under ZeRO-3 with replicas the shards), the optimizer's moments, and the
 * work space (the MoE state's buffers, the ZeRO gather buffers). */
typedef struct msr_train_expert_bytes {
    size_t params, grads, optim, work;
} msr_train_expert_bytes_t;
msr_train_expert_bytes_t msr_trainer_expert_bytes(const msr_trainer_t *tr);

/* This rank's experts' store whole (msr_moe_count floats, the store's
 * order) into out: copied, or under ZeRO-3 with replicas each block
 * all-gathered over the replica group (collective over it: every rank of
 * the group calls it, between steps). Errors: the communicator's. */
msr_status_t msr_trainer_experts_whole(msr_trainer_t *tr, float *out);

/* Under ZeRO-3 with replicas, each held block of this rank's experts
 * all-gathered over the replica group in turn and handed to fn (its
 * first element in the store's order, a host copy of the block, its
 * count) before the next: never the whole store. Collective over the
 * group as msr_trainer_experts_whole; a rank whose fn fails stops there,
 * so fn should note a failure and return MSR_OK where the others go on.
 * Errors: MSR_ERR_INVALID_ARG without such shards, MSR_ERR_NO_MEMORY,
 * fn's, the communicator's. */
msr_status_t msr_trainer_experts_each(msr_trainer_t *tr, msr_dp_seg_fn fn, void *arg);

/* The experts' parameters of elements [s, s + n) (msr_moe_params's
 * layout, below ZeRO-3 with replicas) handed to fn a span at a time, in
 * order: in place, or with them in their file (params=disk) a block's
 * read through its store into blk->buf (block_floats floats, 0 without
 * the file; blk->k SIZE_MAX at first: a block read once for the spans
 * that fall in it). Errors: fn's, the store's (offload_params.h). */
size_t msr_trainer_experts_block_floats(const msr_trainer_t *tr);
msr_status_t msr_trainer_experts_spans(msr_trainer_t *tr, size_t s, size_t n, msr_dp_blk_t *blk,
                                       msr_dp_span_fn fn, void *arg);

/* The blocks' parameters under their disk offload held in the model's
 * buffers (the flat buffer; ZeRO-3: the shard) for a caller that reads
 * them there whole (--export-safetensors): hold reads
 * them from their file, drop writes them back (write 1) and gives the
 * memory back. Nothing without the offload. Errors: the store's
 * (offload_params.h), MSR_ERR_NO_MEMORY. */
msr_status_t msr_trainer_blocks_hold(msr_trainer_t *tr);
msr_status_t msr_trainer_blocks_drop(msr_trainer_t *tr, int write);

/* --init-from's writes, never holding the offloaded blocks whole:
 * fill_begin readies the blocks' restore path (a block of the flat
 * parameters at a time, msr_dp_offload_hold with read 0; ZeRO-3's shard
 * then loads through msr_dp_load_piece as a restore's); fill writes n
 * floats from src over elements [lo, lo + n) of the flat parameters
 * (experts 0, below ZeRO-3) or of the experts' (experts 1, msr_moe_params's
 * layout, but ZeRO-3's shards with replicas): in place, or into the block
 * of their file that holds them, one block held (a block entered for the
 * first time starts as zeros: every element is expected to be written);
 * fill_through says whether they go through a file (for a caller that
 * reads the source into a buffer of its own first); fill_end writes the
 * last blocks back (write 1; 0: they are dropped) and reads ahead what
 * the next forward reads first. Only copies without the offload. Errors:
 * the stores' (offload_params.h), MSR_ERR_NO_MEMORY. */
msr_status_t msr_trainer_fill_begin(msr_trainer_t *tr);
int msr_trainer_fill_through(const msr_trainer_t *tr, int experts);
msr_status_t msr_trainer_fill(msr_trainer_t *tr, int experts, size_t lo, size_t n,
                              const float *src);
msr_status_t msr_trainer_fill_end(msr_trainer_t *tr, int write);

/* All parameters (P floats) into out; collective under ZeRO-3. */
msr_status_t msr_trainer_params(msr_trainer_t *tr, float *out);

/* Under ZeRO-3, each segment's parameters gathered and handed to fn in
 * turn, never the whole model (msr_dp_gather_each); collective. */
msr_status_t msr_trainer_params_each(msr_trainer_t *tr, msr_dp_seg_fn fn, void *arg);

/* This rank's checkpoint payload (ckpt.h) after tr->step steps: the flat
 * elements it owns with their parameters and moments, in the whole model's
 * numbering (parallel/ckpt_map.h: its owned local ranges cut into the
 * whole tensors' ranges, whatever its tp slice and stages; a MoE model's
 * experts after them: the experts this rank holds, at the whole model's
 * flat count + their index in the whole model's expert numbering,
 * model/moe.h), AdamW's step count, the sampler, its world rank and size,
 * and meta, the text a resume must match (the settings that decide the
 * numbers: shape, global batch, seed, hyperparameters, data; not the
 * layout). *buf_p is the caller's (msr_free). Errors: MSR_ERR_NO_MEMORY,
 * MSR_ERR_INVALID_ARG (meta too long). */
msr_status_t msr_trainer_snapshot(msr_trainer_t *tr, const char *meta, void **buf_p, size_t *len_p);

/* msr_trainer_snapshot in two parts, for a thread that copies the state
 * while the next step computes (train_gpt --ckpt-async): snap_take takes
 * now what the payload says of the trainer (its header: the step, AdamW's
 * count, the sampler, meta; its pieces' places in the trainer's memory),
 * and snap_copy (any thread; no communication) encodes the payload from
 * those places later, unsealed (msr_tckpt_seal adds the CRCs), into
 * *buf_p (the caller's, msr_free) and *len_p. In between the parameters
 * and moments must not change: the trainer calls its state_gate before it
 * writes them, and the gate waits for the copy.
 *
 * When the moments or the parameters are offloaded to a file the
 * snapshot is streamed (snap_streamed): not copied but saved by snap_save
 * (any one thread while the trainer's steps compute; collective as
 * msr_trainer_save, with ctx, dir, step and keep as there), which writes
 * the payload a piece at a time as msr_trainer_save does, the moments and
 * the parameters' blocks read from their files (the blocks straight from
 * the file, not through the store the steps read them with: snap_take
 * waits for the last update's blocks to be written), and calls
 * read_done(arg) once, as soon as nothing more of the trainer's state is
 * read (or on a failure before), so that the gate can open then; the
 * file's end and the save's agreement follow. No more than the trainer's
 * state at snap_take is written: the gate must wait for read_done.
 * Errors: snap_take's MSR_ERR_NO_MEMORY, the parameters' store's (a
 * write of the last update that failed); snap_copy's:
 * msr_trainer_snapshot's, MSR_ERR_INVALID_ARG for a streamed one;
 * snap_save's: msr_trainer_save's, MSR_ERR_INVALID_ARG for one that is
 * not streamed. snap_free(NULL) does nothing. */
typedef struct msr_trainer_snap msr_trainer_snap_t;
msr_status_t msr_trainer_snap_take(msr_trainer_t *tr, const char *meta,
                                   msr_trainer_snap_t **snap_p);
int msr_trainer_snap_streamed(const msr_trainer_snap_t *snap);
msr_status_t msr_trainer_snap_copy(const msr_trainer_snap_t *snap, void **buf_p, size_t *len_p);
msr_status_t msr_trainer_snap_save(const msr_trainer_snap_t *snap, msr_ctx_t *ctx, const char *dir,
                                   int64_t step, int keep, void (*read_done)(void *), void *arg);
void msr_trainer_snap_free(msr_trainer_snap_t *snap);

/* msr_trainer_snapshot's payload saved as this rank's state of step
 * through libmsrun (ctx, dir, step, keep: as msr_ckpt_save; collective
 * alike, every rank calls it), the same bytes, but written a piece at a
 * time (msr_ckpt_writer_t) and never built in memory: what the save adds
 * to the rank's memory is the payload's header and range table (16 bytes
 * a piece of at most MSR_TCKPT_PIECE_MAX elements), one piece's moments
 * (8 MiB at most) when they are offloaded, read from their file, and one
 * block (msr_dp_params_block_floats) when the parameters are, each block
 * read once from its file. Errors: msr_trainer_snapshot's,
 * msr_ckpt_writer_*'s, the offload stores'. */
msr_status_t msr_trainer_save(msr_trainer_t *tr, const char *meta, msr_ctx_t *ctx, const char *dir,
                              int64_t step, int keep);

/* Gives the payload that rank `rank` of the saving world wrote, into *buf_p
 * (msr_free'd by the caller) and *len_p. */
typedef msr_status_t (*msr_trainer_fetch_t)(void *arg, int rank, void **buf_p, size_t *len_p);

/* Restores the state of a checkpoint saved by a world of `world` ranks in
 * any layout (dp, ZeRO 0-3, tp with or without sp, pp with any split and
 * virtual stages, cp, ep): fetch gets the payload of saving rank 0..world-1.
 * The global batch, hence meta, must be the same. When world is this
 * run's world size and this rank's payload holds exactly what it would
 * save, each rank reads only its own payload and the ranks rebuild the rest
 * together; otherwise each rank reads the saved payloads one at a time and
 * keeps the parts that overlap its own elements (ckpt_map.h), checking that
 * every element it needs was found. Collective over the communicator (the
 * world with model parallel): every rank calls it, and all succeed or all
 * fail. Errors: MSR_ERR_CONFIG (meta differs: the error text shows both
 * from their first difference; or another model size), MSR_ERR_CORRUPT
 * (payloads inconsistent, or something missing), the fetch's and
 * communicator's errors. On failure the trainer is to be destroyed. */
msr_status_t msr_trainer_restore(msr_trainer_t *tr, const char *meta, int world,
                                 msr_trainer_fetch_t fetch, void *arg);

/* Reads len bytes at offset of the payload that rank `rank` of the saving
 * world wrote into buf; *total_p (when not NULL) gets the payload's
 * length, and *crc_p (when not NULL) the bytes' CRC, msr_crc32(0, buf,
 * len) (base/crc32.h), best computed as they arrive: the restore checks
 * each piece by combining its chunks' CRCs (msr_crc32_combine) and does
 * not pass over the bytes again. */
typedef msr_status_t (*msr_trainer_read_t)(void *arg, int rank, uint64_t offset, void *buf,
                                           size_t len, uint64_t *total_p, uint32_t *crc_p);

/* msr_trainer_restore, reading the payloads in part where it can (read
 * not NULL): a rank that resumes in another layout or world size reads
 * each saved payload's header and range table, then only the pieces that
 * hold elements of its own, one at a time (its memory: its part plus one
 * piece of at most MSR_TCKPT_PIECE_MAX elements), and checks each against
 * its CRC (MSR_ERR_CORRUPT naming the file, the tensor and the elements).
 * Same layout and world: its own payload's pieces, each checked and
 * loaded as it is read (no copy of the whole state is held). Same
 * contract and errors otherwise, read's included, but one: after a
 * failure with MSR_ERR_CORRUPT (a damaged checkpoint) it may be called
 * again with another checkpoint, on every rank, since a load that
 * succeeds writes every element the rank holds. */
msr_status_t msr_trainer_restore_parts(msr_trainer_t *tr, const char *meta, int world,
                                       msr_trainer_fetch_t fetch, msr_trainer_read_t read,
                                       void *arg);

#endif
