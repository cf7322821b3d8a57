/* Data parallel and ZeRO for the reference model: how the flat buffers are
 * cut into gradient buckets and rank shards, the model hooks that reduce
 * gradients bucket by bucket while backward runs (and, under ZeRO-3, gather
 * each segment's parameters just before it is used), and the end of a step:
 * global gradient norm, AdamW on this rank's shard, parameter allgather.
 *
 * Buckets. The flat gradient buffer is cut from its end into buckets of
 * bucket_bytes (the first one, at the very end, of first_bucket_bytes, as
 * PyTorch DDP's 1 MiB first bucket: it is ready first, so communication
 * starts early). Bucket boundaries need not fall between layers. Backward
 * finishes segments from the end of the buffer to its start, so bucket b is
 * complete when grads_ready fires for the segment holding its first element,
 * and buckets complete in index order; its reduction starts right then and
 * is driven by msr_comm_test from every later hook, so it overlaps the rest
 * of backward (UCX has no background progress). overlap = 0 starts every
 * bucket after backward instead (for measuring what the overlap hides).
 * Progress is also driven between the kernels of a block (the model's poll
 * hook), so a bucket's messages move every few milliseconds of compute.
 *
 * Units and shards. The buffer is cut at every bucket and segment boundary
 * into units. A unit is either sharded: rank j owns its block j of
 * ceil(n / dp) elements (the last blocks may be short or empty); or, when
 * its segment is smaller than zero_min_bytes, replicated: every rank owns
 * all of it, its gradient is allreduced, and each rank updates it alike.
 * A rank's owned elements, unit after unit, form its "shard space", where
 * AdamW's moments (ZeRO >= 1), the gradient shard (ZeRO >= 2) and the
 * parameter shard (ZeRO-3) live. Collectives work on packed buffers: a
 * bucket's gradients as dp rank-major blocks (block j: every sharded unit's
 * block j, zero-padded) followed by its replicated units; a reduce-scatter
 * in place leaves this rank's reduced block where its own block was.
 *
 * Stages (fp32; P parameters, S ~ P/dp owned; bytes per rank):
 *   0  allreduce each bucket in place           params 4P  grads 4P  adam 8P
 *   1  reduce-scatter each bucket, update the   params 4P  grads 4P  adam 8S
 *      own shard in the full parameter buffer,
 *      allgather the parameters per bucket
 *   2  as 1, but a segment's gradient lives in  params 4P  grads 4S  adam 8S
 *      a temporary buffer from its first
 *      backward touch until grads_ready packs
 *      it into its buckets
 *   3  as 2, and parameters live only in the    params 4S  grads 4S  adam 8S
 *      shard: acquire all-gathers a segment
 *      (the next one is prefetched), release
 *      frees it
 * plus temporary buffers (at most MSR_DP_MAX_PACKED packed buckets, and
 * under ZeRO-2/3 the gradient of the segments in backward, under ZeRO-3 the
 * gathered segments: the current one and the prefetched next), counted in
 * msr_dp_memory_t.transient_peak.
 *
 * Gradient accumulation: stages 0 and 1 accumulate micro-batches in the
 * full gradient buffer and communicate only during the last micro-batch's
 * backward. Stages 2 and 3 have no full gradient to accumulate into, so
 * every micro-batch's buckets are reduce-scattered and added into the
 * gradient shard (DeepSpeed's stage 2 does the same).
 *
 * The gradient norm for clipping is global: each rank sums the squares of
 * its owned elements (replicated units on rank 0 only) in shard order, in
 * double, and one allreduce adds the ranks' sums; the same partition is used
 * in every stage, so the norm does not depend on the stage.
 *
 * Without a communicator (comm NULL) everything runs with dp = 1 and every
 * collective is the identity, so the ZeRO paths run in one process too.
 *
 * Ordering: every rank makes the same collective calls in the same order
 * (the hooks fire in the same order everywhere). Not thread-safe: the
 * thread that drives the model drives this. */
#ifndef MSR_PARALLEL_DP_H
#define MSR_PARALLEL_DP_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "msrun/comm.h"
#include "msrun/device.h"
#include "model/adamw.h"
#include "model/gpt.h"
#include "layout/layout.h"
#include "parallel/offload.h"
#include "parallel/offload_grads.h"
#include "parallel/offload_params.h"

#define MSR_DP_TMP_CACHE 64 /* freed temporaries kept for reuse */

typedef struct msr_dp_config {
    int zero;                  /* ZeRO stage, 0..3 */
    size_t bucket_bytes;       /* gradient bucket size (>= 4) */
    size_t first_bucket_bytes; /* the first bucket's size (capped at bucket_bytes) */
    size_t zero_min_bytes;     /* segments smaller than this stay replicated */
    int overlap;               /* 1: a bucket starts when ready; 0: after backward */
    int measure;               /* also measure the exposed wait (one more allreduce per step) */
    /* 1: each bucket's gradients are rounded to bf16 and summed by the
     * communicator's MSR_DTYPE_BF16 sum (each combining step in fp32,
     * rounded to bf16; docs/comm.md), then widened back; ZeRO 0 only
     * (refused otherwise): ZeRO's reduce-scatters keep fp32 */
    int grad_bf16;
    /* where the optimizer's moments live (parallel/offload.h): MSR_OFFLOAD_DISK
     * streams them from a file of this rank's in each msr_dp_update */
    msr_offload_config_t offload;
    /* where the blocks' parameters live (parallel/offload_params.h):
     * MSR_OFFLOAD_DISK keeps them in a file of this rank's, each block read
     * ahead of its forward and its backward and dropped after, the update a
     * block at a time (dp_params.c); under ZeRO-3 the file holds this
     * rank's shard of each block, read ahead of the gather that needs it;
     * a whole dense model whose blocks ZeRO-3 shards (msr_dp_create
     * refuses the rest: MSR_ERR_CONFIG) */
    msr_offload_config_t params_offload;
    /* where the gradient shard lives (parallel/offload_grads.h):
     * MSR_OFFLOAD_DISK keeps it in a file of this rank's, each bucket's
     * reduce-scatter result put there as it finishes, read back a chunk at
     * a time by the norm and the update (dp_offload.c); ZeRO 2-3 with the
     * moments on disk (cfg.offload), without model parallel (msr_dp_create
     * refuses the rest: MSR_ERR_CONFIG) */
    msr_offload_config_t grads_offload;
    /* msr_dp_create leaves the parameters it holds zero (the flat buffer,
     * under ZeRO-3 the owned elements), for a resume whose load overwrites
     * them; msr_dp_init_params sets them when there is nothing to resume.
     * Not with params_offload, whose store is filled from them at create
     * (msr_dp_init_left) */
    int init_later;
    /* where dp's buffers live and its copies run (msrun/device.h): the
     * gradient buckets, the ZeRO shards and gathers. NULL: the CPU. Only a
     * device with host memory is accepted until the model's kernels and
     * the optimizer run on devices (MSR_ERR_UNSUPPORTED otherwise) */
    const msr_device_t *device;
} msr_dp_config_t;

/* The model flags (msr_gpt_create_ex) a stage needs. */
unsigned msr_dp_model_flags(int zero);

typedef struct msr_dp_unit {
    size_t lo, n;         /* flat elements [lo, lo + n) */
    int seg, bucket;      /* the segment and bucket it lies in */
    int replicated;       /* allreduced and held whole by every rank */
    size_t blk;           /* a rank's block: ceil(n / dp); n when replicated */
    size_t own_lo, own_n; /* this rank's flat elements [own_lo, own_lo + own_n) */
    size_t shard_off;     /* where they start in the shard space */
    size_t bpack, spack;  /* offset in its bucket's / segment's packed block */
} msr_dp_unit_t;

typedef struct msr_dp_bucket {
    size_t lo, hi;          /* flat elements [lo, hi) */
    int u0, u1;             /* its units [u0, u1) */
    int low_seg;            /* the segment of element lo: ready with it */
    size_t blk;             /* per-rank block of the packed buffer (sharded units) */
    size_t rep;             /* elements of replicated units after the dp blocks */
    float *packed;          /* (dp * blk + rep) while in use */
    msr_comm_req_t *req[2]; /* reduce-scatter (or allreduce) and allreduce */
    int started;            /* its reduction was started this micro-batch */
    int finished;           /* ... and its results were moved into place */
} msr_dp_bucket_t;

typedef struct msr_dp_seg {
    int u0, u1;          /* its units */
    int replicated;      /* all its units are */
    size_t blk;          /* per-rank block of a gather (ZeRO-3) */
    int direct;          /* one unit of n % dp == 0: gather straight into full */
    float *full;         /* ZeRO-3: the gathered parameters (count) */
    float *gbuf;         /* ZeRO-3: the gather buffer (dp * blk), may be full */
    msr_comm_req_t *req; /* ZeRO-3: the gather in flight */
    int gathering;       /* a gather was started and not unpacked yet */
    float *grads;        /* ZeRO-2/3: the segment's gradient during backward (count) */
} msr_dp_seg_t;

/* Bytes this rank holds. */
typedef struct msr_dp_memory {
    size_t params, grads, optim; /* held across steps */
    size_t transient_peak;       /* the most temporary bytes alive at once */
    size_t shard_elems;          /* S: elements this rank owns */
    size_t replicated_elems;     /* elements of replicated units (owned by all) */
} msr_dp_memory_t;

/* Times of the steps so far, for measuring the overlap. */
typedef struct msr_dp_stats {
    uint64_t steps;
    uint64_t forward_ns;  /* in msr_gpt_forward (the trainer adds these two) */
    uint64_t backward_ns; /* in msr_gpt_backward, hooks and their communication included */
    uint64_t wait_ns;     /* waiting for gradient buckets after backward */
    uint64_t exposed_ns;  /* the least wait over the ranks (with measure): the
                           * communication the last rank to finish backward
                           * could not hide behind it */
    uint64_t update_ns;   /* norm, AdamW and the parameter allgather */
    uint64_t gather_ns;   /* ZeRO-3: waiting for parameter gathers in acquire */
    uint64_t gathers;     /* ZeRO-3: segment parameter gathers started */
    uint64_t buckets;     /* bucket reductions done */
} msr_dp_stats_t;

/* Another module's work on segment s, done by dp's hooks: acquire after
 * dp's own (the segment's parameters ready), release before dp's own, in
 * the order the hooks see them (the same on every rank). A failure fails
 * the hook. NULL entries: nothing. */
typedef struct msr_dp_extra {
    msr_status_t (*acquire)(void *arg, int s, msr_gpt_pass_t pass);
    msr_status_t (*release)(void *arg, int s, msr_gpt_pass_t pass);
    void *arg;
    /* a pass in direction dir (+1 forward, -1 backward) starts at
     * segment s: what the module reads first for it (for s or the first
     * of its segments after s in that direction) is read ahead. Called
     * before each pass of the whole model's forwards alone
     * (msr_dp_eval_*: s 0, forward; after the last, for the next step)
     * and before each chunk's pass under model parallel
     * (msr_dp_extra_ahead) */
    msr_status_t (*ahead)(void *arg, int s, int dir);
} msr_dp_extra_t;

typedef struct msr_dp {
    msr_dp_config_t cfg;
    msr_comm_t *comm;        /* borrowed; NULL: alone */
    const msr_device_t *dev; /* borrowed: cfg.device, or the CPU */
    int rank, size;
    msr_gpt_t *model; /* borrowed */
    msr_gpt_hooks_t hooks;

    int num_units;
    msr_dp_unit_t *units;
    int num_buckets; /* bucket 0 is at the end of the buffer */
    msr_dp_bucket_t *buckets;
    int num_segs;
    msr_dp_seg_t *segs;
    size_t shard_count; /* S */
    size_t rep_count;

    float *pshard;    /* ZeRO-3: parameters of the shard space (S) */
    float *gshard;    /* ZeRO-2/3: gradients of the shard space (S) */
    msr_adamw_t *opt; /* stage 0: over [0, P); else over the shard space */
    /* the moments' file under cfg.offload's disk mode (opt->m and opt->v
     * are then NULL but while a checkpoint holds them: dp_offload.c) */
    msr_offload_t *offload;
    /* the blocks' parameters' file under cfg.params_offload (the model's
     * block segments then point at a held buffer or NULL: dp_params.c) */
    msr_params_t *params_off;
    /* the gradient shard's file under cfg.grads_offload (gshard is then
     * NULL) and a moments' chunk's gradients read back for the update */
    msr_grads_t *grads_off;
    float *gchunk;
    /* per unit, its owned gradient's sum of squares as the step's last
     * micro-batch put it (gsq) and the step it was for (gsq_step: gsq_now
     * then), so that the norm reads nothing back */
    double *gsq;
    uint64_t *gsq_step, gsq_now;
    float **pheld; /* [num_segs] a block segment's buffer while acquired */
    int pfirst;    /* forward's first block read ahead already */
    int pflat;     /* a checkpoint holds them in the flat buffer */
    /* block k is the flat buffer's [pf_off[k], pf_off[k + 1]) (pnb + 1
     * entries: the blocks one after another, of any sizes, a MoE block's
     * and a dense one's apart); a store block holds pblk_n floats, the
     * largest block's (ZeRO-3: the largest share, pz_off below) */
    size_t *pf_off, pblk_n;
    int pfb, pnb;    /* the part's first block segment, its blocks */
    float *pcur_buf; /* the block the moments' chunks update (both offloads) */
    size_t pcur;     /* its index, or SIZE_MAX for none */
    /* below ZeRO-3, while a restore loads: the block its pieces fill
     * (pload_k, SIZE_MAX for none), written back to the file as the
     * pieces move past it, never the whole flat buffer (dp_offload.c) */
    float *pload_buf;
    size_t pload_k;
    /* the blocks the restore entered (each read back only when entered
     * again) [pnb]; what it read and wrote back */
    uint8_t *pload_seen;
    uint64_t pload_reads, pload_writes;
    /* ZeRO-3: block k's owned elements are the shard space's
     * [pz_off[k], pz_off[k + 1]) (L + 1 entries), its store block holds
     * them padded to the largest; pz_buf: the block a gather copies from */
    size_t *pz_off;
    float *pz_buf;
    int pdir; /* the pass the hooks run: +1 forward, -1 backward */

    /* the current micro-batch */
    int reduce_now;  /* this backward reduces its buckets */
    int first_micro; /* the first of the step: shards are set, not added to */
    int last_micro;  /* the last of the step: the shards are final after it */
    int next_start;  /* the next bucket to start */
    int *visits;     /* ZeRO-3: the segments in the order acquire sees them */
    int num_visits, vi;
    /* ZeRO-3 under model parallel (msr_dp_set_model_parallel): the runtime
     * acquires in its schedule's order, not the table's; each acquire
     * gathers its segment, each release frees it */
    int any_order;
    /* between msr_dp_eval_begin and _end: the hooks of forwards alone, and
     * the state the step's forward expects, given back at the end */
    msr_gpt_hooks_t eval_hooks;
    int eval_any_order, eval_pfirst;

    size_t transient, transient_peak; /* bytes */
    /* freed temporaries (the device's memory) kept for the next request
     * they fit (a step allocates the same ones every micro-batch; freeing
     * them made each fault its pages in again); with the live ones never
     * past the peak; n: the bytes it was last asked for, cap: allocated */
    struct {
        float *p;
        size_t n, cap;
    } cache[MSR_DP_TMP_CACHE];
    int cached;
    size_t cached_bytes;
    /* the live temporaries' allocated bytes (a device buffer cannot be
     * asked its size), for the cache when they are freed */
    struct msr_dp_live {
        float *p;
        size_t cap;
    } * live;
    int num_live, max_live;
    msr_dp_stats_t stats;
    msr_comm_t *mp_comm[2]; /* tp and pp groups the norm is summed over too */
    int tp_rank;
    /* while loading a checkpoint: the ranges found (dp_pieces.c), one
     * allocation that msr_free frees */
    struct msr_dp_cover *cover;
    /* added to this rank's squared gradient norm by the next msr_dp_update,
     * which resets it: gradients the trainer keeps outside the flat buffers
     * (the MoE experts), counted once over the group by whoever sets it */
    double extra_sumsq;
    /* the trainer's work on the segments it holds outside dp (the experts'
     * shards under ZeRO-3: msr_dp_set_extra) */
    msr_dp_extra_t extra;
} msr_dp_t;

/* Lays out buckets and shards for model (created with msr_dp_model_flags)
 * on comm (NULL: alone), allocates the shard buffers and the optimizer, and
 * initialises the parameters from seed (the flat buffer, or under ZeRO-3
 * the owned elements: the same numbers). model and comm must outlive dp.
 * Errors: MSR_ERR_CONFIG (a bad stage or size, or the model lacks or has a
 * flat buffer the stage needs; in the error text), MSR_ERR_NO_MEMORY. */
msr_status_t msr_dp_create(const msr_dp_config_t *cfg, msr_comm_t *comm, msr_gpt_t *model,
                           const msr_adamw_config_t *adamw, uint64_t seed, msr_dp_t **dp_p);

/* msr_dp_create communicates with no one: a rank that fails in it (out
 * of memory part way) returns alone, and one that failed before it (its
 * model) never calls it, so an agreement inside it would leave the others
 * waiting. A caller that makes more than dp agrees once at its end (as
 * msr_trainer_create does over the world, with msr_dp_agree); one that
 * makes dp alone over comm calls msr_dp_create_agreed: msr_dp_create,
 * then msr_dp_agree over comm, so that when one rank fails every rank
 * fails at once (the others: "dp: rank R is out of memory creating its
 * data-parallel state"), dp freed on each. Collective over comm. */
msr_status_t msr_dp_create_agreed(const msr_dp_config_t *cfg, msr_comm_t *comm, msr_gpt_t *model,
                                  const msr_adamw_config_t *adamw, uint64_t seed, msr_dp_t **dp_p);

/* The end of a creation over comm (NULL: alone): one allreduce (least) of
 * each rank's outcome st, as rank * 256 + (-status), INT64_MAX for
 * success. A rank that failed returns st with its own error; the others
 * the lowest failed rank's status, the text "AREA: rank R is out of memory
 * creating its THING" (or "... failed creating its THING (STATUS)"); the
 * allreduce's own failure: "AREA: the agreement on the THING's creation". */
msr_status_t msr_dp_agree(msr_comm_t *comm, msr_status_t st, const char *area, const char *thing);

/* Initialises the parameters dp holds from seed (the flat buffer, or
 * under ZeRO-3 the owned elements): what msr_dp_create does unless
 * msr_dp_init_left. */
void msr_dp_init_params(msr_dp_t *dp, uint64_t seed);
/* Whether msr_dp_create leaves the parameters unset for cfg: init_later
 * without the parameters' offload. */
int msr_dp_init_left(const msr_dp_config_t *cfg);

/* Frees dp, first waiting for any request still in flight (after a failed
 * step, destroy the communicator first: its requests then fail at once). */
void msr_dp_destroy(msr_dp_t *dp);

/* Under ZeRO-3: allocates the temporary buffers that gathering segment s
 * takes and keeps them in dp's cache, so that its next gather allocates
 * nothing (a trainer's creation reserves, before its agreement, what its
 * first collective after it needs). Local; MSR_ERR_NO_MEMORY; does
 * nothing at ZeRO 0-2 or for a replicated or gathered segment. */
msr_status_t msr_dp_gather_reserve(msr_dp_t *dp, int s);

/* The hooks to pass to msr_gpt_forward and msr_gpt_backward. */
const msr_gpt_hooks_t *msr_dp_hooks(msr_dp_t *dp);

/* Forwards alone between two steps, on the model the hooks serve (the
 * validation's, parallel/eval.c; dp_eval.c): msr_dp_eval_begin gives the
 * hooks to pass (no gradient is touched; under ZeRO-3 each acquire
 * gathers its segment and each release frees it, as under model
 * parallel), msr_dp_eval_forward comes before each msr_gpt_forward (under
 * the parameters' offload the pass's first block is read ahead), and
 * msr_dp_eval_end gives back the state the next step's forward expects
 * (ZeRO-3's first block read ahead again). Under model parallel
 * msr_dp_eval_forward is not called: the runtime reads each chunk's
 * first blocks ahead itself (msr_dp_params_ahead, msr_dp_extra_ahead).
 * msr_dp_eval_forward and _end have the other module's work
 * (msr_dp_set_extra: a MoE model's experts on disk) read ahead what the
 * next pass takes first (the next step's, after the last). Collective
 * as the forwards are under ZeRO-3: every rank makes as many. The
 * parameters are unchanged; the counters (gathers, blocks read) count
 * these passes too. Errors: the stores' (offload_params.h);
 * msr_dp_eval_end's after a failed pass leaves the state as
 * msr_gpt_forward's failure does. */
const msr_gpt_hooks_t *msr_dp_eval_begin(msr_dp_t *dp);
msr_status_t msr_dp_eval_forward(msr_dp_t *dp);
msr_status_t msr_dp_eval_end(msr_dp_t *dp);

/* A step is: msr_dp_micro_begin, forward and backward with the hooks,
 * msr_dp_micro_end, for each micro-batch; then msr_dp_update.
 * micro_begin zeroes the full gradient on the first micro-batch (stages 0,
 * 1); last says whether this backward communicates (always under ZeRO-2/3).
 * micro_end waits for the buckets of a communicating backward and moves
 * their results into place. Errors: the communicator's, its error text
 * prefixed with what failed (base/err.h). */
msr_status_t msr_dp_micro_begin(msr_dp_t *dp, int first, int last);
msr_status_t msr_dp_micro_end(msr_dp_t *dp);

/* Model parallel (parallel/mp.h) runs every micro-batch's backward first
 * and reduces once, after the pipeline flush: msr_dp_micro_begin(dp, 1, 1)
 * before the step's backwards (which call only acquire and release), then
 * msr_dp_reduce_all, which marks every segment ready in order (L+1 .. 0,
 * buckets start as they complete) and waits as msr_dp_micro_end does.
 * Errors: the communicator's, prefixed as above. */
msr_status_t msr_dp_reduce_all(msr_dp_t *dp);

/* Model parallel: msr_dp_update also sums the loss and the squared
 * gradient norm over tp_comm and pp_comm (NULL: no such group), and counts
 * the tensors every tensor-parallel rank holds (tp_replicated) on tp rank 0
 * only, and those several ranks hold (tp_copies) on the first of them
 * (tp_first), so the norm is the whole model's. Under ZeRO-3 the hooks
 * then take acquires in any order (the runtime's schedule decides it):
 * each acquire gathers the segment (no visit table, no prefetch) and
 * each release frees it. */
void msr_dp_set_model_parallel(msr_dp_t *dp, msr_comm_t *tp_comm, int tp_rank, msr_comm_t *pp_comm);

/* Sets the work the hooks do for another module (see msr_dp_extra_t;
 * copied). */
void msr_dp_set_extra(msr_dp_t *dp, const msr_dp_extra_t *x);
/* The other module's ahead (msr_dp_extra_t) for a pass in direction dir
 * starting at segment s; nothing without one. */
msr_status_t msr_dp_extra_ahead(msr_dp_t *dp, int s, int dir);

/* Ends a step: adds loss_local (this rank's sum of micro-batch losses) and
 * the squared gradient norms over the group, clips with max_norm (0: off),
 * runs AdamW with lr on this rank's shard and gathers the parameters
 * (stages 1, 2). *loss_sum_p gets the group's sum of loss_local, *norm_p
 * the global gradient norm before clipping. Errors: the communicator's. */
msr_status_t msr_dp_update(msr_dp_t *dp, float lr, float max_norm, double loss_local,
                           double *loss_sum_p, double *norm_p);

/* All parameters into out (P floats) on every rank; collective under
 * ZeRO-3 (gathers every segment). */
msr_status_t msr_dp_gather_params(msr_dp_t *dp, float *out);

/* Under ZeRO-3, every segment's parameters gathered in turn (an offloaded
 * shard's blocks read in forward's order) and handed to fn with their
 * first flat element, then dropped: the whole model is never held.
 * Collective: every rank of the group calls it, and a rank whose fn fails
 * stops there (so fn should note its failure and return MSR_OK where the
 * others must go on). Errors: MSR_ERR_INVALID_ARG below ZeRO-3, fn's, the
 * communicator's. */
typedef msr_status_t (*msr_dp_seg_fn)(void *arg, size_t offset, const float *p, size_t n);
msr_status_t msr_dp_gather_each(msr_dp_t *dp, msr_dp_seg_fn fn, void *arg);

void msr_dp_memory(const msr_dp_t *dp, msr_dp_memory_t *mem);

/* ---- the optimizer's moments offloaded (dp_offload.c, parallel/offload.h) ----
 * Under cfg.offload's disk mode the moments are in a file and a step
 * streams them. A checkpoint streams them too, a chunk at a time: a save
 * reads each owned piece's (msr_dp_owned gives m NULL and moff;
 * msr_dp_moments_get), a restore writes each piece's into the file
 * (msr_dp_load_piece). msr_dp_offload_hold brings the parameters'
 * offloaded blocks into the flat buffer for a checkpoint (read 1: from
 * their file; 0, for a restore to fill: ZeRO 3's shard buffer, below it
 * none, the pieces' blocks then filled in their file one at a time, at
 * most about two blocks held: dp_offload.c) and, with moments 1,
 * the moments whole into opt->m and opt->v (read 1: from the file; 0:
 * zeros): ZeRO 0's restore, whose load_end may gather them over the
 * replicas. msr_dp_offload_drop writes back what was held (write 1) and
 * frees it. Both do nothing without offload. Errors: the stores'
 * (offload.h, offload_params.h), MSR_ERR_NO_MEMORY. */
msr_status_t msr_dp_offload_hold(msr_dp_t *dp, int read, int moments);
msr_status_t msr_dp_offload_drop(msr_dp_t *dp, int write);
/* n parameters from src over flat elements [lo, lo + n) (below ZeRO-3):
 * in the flat buffer, or after msr_dp_offload_hold with read 0 into the
 * block of their file that holds them, a block at a time as a restore
 * fills them (a block entered for the first time starts as zeros).
 * Errors: the store's (offload_params.h), MSR_ERR_INVALID_ARG for a range
 * outside the flat buffer (or none: ZeRO-3). */
msr_status_t msr_dp_params_fill(msr_dp_t *dp, size_t lo, size_t n, const float *src);
/* The moments of shard elements [moff, moff + n) into m and v (n floats
 * each, the caller's): from the file a chunk at a time when they are
 * offloaded and not held, else from opt->m and opt->v. Errors: the
 * store's (offload.h). */
msr_status_t msr_dp_moments_get(msr_dp_t *dp, size_t moff, size_t n, float *m, float *v);
/* A save that streams its pieces (msr_trainer_save) reads the
 * parameters' offloaded blocks from their file one at a time, never
 * holding them all: msr_dp_params_block_floats is a block's floats, 0
 * when no block is in the file (no offload, or held), and
 * msr_dp_params_block_bytes the buffer the caller gives (msr_dp_blk_t's
 * buf: aligned to MSR_OFFLOAD_ALIGN, as read_shared needs);
 * msr_dp_params_spans hands the n parameters at p (an owned piece's,
 * msr_dp_owned) to fn a span at a time, in order: in place, or a block's
 * read into blk->buf (blk->k the block it holds, SIZE_MAX at first: a
 * block read once for the pieces that fall in it). Through the store
 * (shared 0), after which msr_dp_params_spans_end reads ahead what the
 * next forward reads first; or, shared 1, straight from the file
 * (msr_params_read_shared) by a thread other than the steps', after
 * msr_dp_params_flush on theirs and before their next update writes a
 * block (spans_end then does nothing). Errors: fn's, the store's
 * (offload_params.h). */
typedef msr_status_t (*msr_dp_span_fn)(void *arg, const float *p, size_t n);
typedef struct msr_dp_blk {
    float *buf;
    size_t k;
    int shared;
} msr_dp_blk_t;
size_t msr_dp_params_block_floats(const msr_dp_t *dp);
size_t msr_dp_params_block_bytes(const msr_dp_t *dp);
msr_status_t msr_dp_params_flush(msr_dp_t *dp);
msr_status_t msr_dp_params_spans(msr_dp_t *dp, const float *p, size_t n, msr_dp_blk_t *blk,
                                 msr_dp_span_fn fn, void *arg);
msr_status_t msr_dp_params_spans_end(msr_dp_t *dp, const msr_dp_blk_t *blk);
/* The parameter offload's store (counters, file), NULL without it. */
const msr_params_t *msr_dp_params_store(const msr_dp_t *dp);
/* Under the parameters' offload, starts reading segment s's block (a
 * pass's first, while the stage waits for its input); MSR_OK and nothing
 * done for a segment that is no block or without the offload. Errors: the
 * store's (offload_params.h). */
msr_status_t msr_dp_params_ahead(msr_dp_t *dp, int s);

/* ---- checkpoints ----
 * A rank saves the units it owns (msr_dp_owned: params, m, v of each). A
 * restore finds the pieces this rank needs among the pieces of the saved
 * ranks: load_begin; load_piece for each saved piece (any rank's; parts
 * this rank does not need are skipped); load_end checks that everything
 * needed was found. With gather = 1 (every rank loaded exactly its own
 * pieces of a checkpoint saved with this layout), load_end first rebuilds
 * the replicated state from the ranks' shards (collective). */
typedef struct msr_dp_piece {
    size_t lo, n;        /* flat elements */
    const float *params; /* (n) */
    const float *m, *v;  /* (n) AdamW's moments; msr_dp_owned: NULL when they
                          * are in the offload's file (moff says where) */
    size_t moff;         /* msr_dp_owned: the moments' first shard element */
} msr_dp_piece_t;

/* The number of owned pieces (units with own_n > 0) and piece k of them.
 * A restore's load_piece writes offloaded moments (not held) straight
 * into their file; a failed write fails load_end with the store's error. */
int msr_dp_num_owned(const msr_dp_t *dp);
void msr_dp_owned(const msr_dp_t *dp, int k, msr_dp_piece_t *piece);

msr_status_t msr_dp_load_begin(msr_dp_t *dp);
void msr_dp_load_piece(msr_dp_t *dp, const msr_dp_piece_t *piece);
/* Read in place: where flat [lo, lo + n), all of it elements this rank
 * holds (at ZeRO 0 every element of its units, the replica; else its own
 * shard's), lies in this rank's buffers, n floats of each at *params_p,
 * *m_p and *v_p (the caller reads the piece's arrays there), or 0
 * (outputs untouched) when it does not hold them all or they are not
 * contiguous in any of them: then load it through msr_dp_load_piece. Once filled and checked,
 * msr_dp_load_mark marks the range found, as load_piece would have. */
int msr_dp_load_dest(const msr_dp_t *dp, size_t lo, size_t n, float **params_p, float **m_p,
                     float **v_p);
void msr_dp_load_mark(msr_dp_t *dp, size_t lo, size_t n);
/* What msr_dp_load_piece takes of flat [lo, lo + n): fn gets each part,
 * of the parameters (moments 0) or of both moments (1), in units' order
 * (at ZeRO 0 all of it, both kinds; ZeRO 1-2 all the parameters and the
 * own shard's moments; ZeRO 3 the own shard's of both). A reader that
 * reads only those bytes of a piece loads the same. */
typedef void (*msr_dp_need_fn)(void *arg, int moments, size_t lo, size_t n);
void msr_dp_load_needs(const msr_dp_t *dp, size_t lo, size_t n, msr_dp_need_fn fn, void *arg);
/* failed: this rank could not read all it meant to (load_end then fails
 * on every rank). Collective: every rank calls it, even after a failed
 * load_begin, and all succeed or all fail. Errors: MSR_ERR_CORRUPT
 * (something needed is missing on some rank; the error text says what), the communicator's.
 * Frees the load state either way. */
msr_status_t msr_dp_load_end(msr_dp_t *dp, int gather, int failed);

#endif
