/* ZeRO-3 for the experts (see train.h, ez): each rank keeps its shard of
 * every held MoE block's experts in its replica group; a block's experts
 * are all-gathered over that group around each use (dp's hooks call
 * here) and their gradients reduce-scattered into the shard at the end of
 * the block's backward; the experts' optimizer updates the shards. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "model/err_call.h"
#include "model/moe.h"
#include "parallel/train_impl.h"

int msr_train_experts_held_block(const msr_trainer_t *tr, int s)
{
    const msr_gpt_t *m = tr->model;
    int l = m->segments[s].layer;
    if (l < 0 || !msr_gpt_layer_is_moe(&m->cfg, l))
        return -1;
    size_t b = (size_t)((l + 1) / m->cfg.moe.every - 1);
    size_t whole = (size_t)m->cfg.moe.experts * msr_moe_expert_count(&m->cfg);
    for (int k = 0; k < msr_moe_held(m->moe); k++)
        if (msr_moe_global_lo(m->moe, k) / whole == b) /* its experts start in block b */
            return k;
    return -1;
}

static int held_block(const msr_trainer_t *tr, int s)
{
    return msr_train_experts_held_block(tr, s);
}

int msr_train_experts_next_in_chunk(const msr_trainer_t *tr, int s, int dir)
{
    const msr_gpt_segment_t *seg = tr->model->segments;
    for (int t = s + dir; t >= 0 && t < tr->model->num_segments; t += dir) {
        if (seg[t].group != seg[s].group)
            return -1;
        int k = held_block(tr, t);
        if (k >= 0)
            return k;
    }
    return -1;
}

int msr_train_experts_block_seg(const msr_trainer_t *tr, int k)
{
    for (int s = 0; s < tr->model->num_segments; s++)
        if (held_block(tr, s) == k)
            return s;
    return -1;
}

/* The device of the experts' buffers (msr_moe_device): the shards, the
 * gathered blocks and the gathered gradients are its memory, the copies
 * and zeroing between them its work (synced before a communicator or the
 * host reads them). */
static const msr_device_t *ez_dev(const msr_trainer_t *tr)
{
    return tr->model != NULL && tr->model->moe != NULL ? msr_moe_device(tr->model->moe)
                                                       : msr_device_cpu();
}

/* n floats of the experts' device, zeroed (synced); NULL when out of
 * memory or the device failed. */
static float *ez_alloc(const msr_trainer_t *tr, size_t n)
{
    const msr_device_t *dev = ez_dev(tr);
    void *p = NULL;
    return msr_device_alloc_zero(dev, (n > 0 ? n : 1) * sizeof(float), &p) == MSR_OK ? p : NULL;
}

/* The device's status st of what, its text naming the device. */
static msr_status_t ez_check(const msr_trainer_t *tr, msr_status_t st, const char *what)
{
    if (st != MSR_OK)
        return msr_err_call(st, "train: device %s: %s", msr_device_name(ez_dev(tr)), what);
    return MSR_OK;
}

/* ---- the gathered blocks (train.h's ez_slot) ---- */

/* Hands a span of the experts' gathers to the trace, named apart from
 * dp's segment gathers: "experts gather K" (the start of a gather the
 * acquire needs now), "experts prefetch K" (one started ahead), "experts
 * wait K" (the wait the step sees). */
static void ez_span(const msr_trainer_t *tr, const char *what, int k, uint64_t a)
{
    char name[28];
    snprintf(name, sizeof name, "experts %s %d", what, k);
    msr_moe_trace(tr->model->moe, name, a, msr_now_ns());
}

static int slot_of(const msr_trainer_t *tr, int k)
{
    for (int i = 0; i < MSR_TRAIN_EZ_SLOTS; i++)
        if (tr->ez_slot_k[i] == k)
            return i;
    return -1;
}

/* This rank's share of block k into mine (ez_n floats): from the shards
 * in memory, or from their file (tr->epf), whose block k + dir starts
 * reading (dir: the pass's direction, where the next gather goes) when
 * the pass reaches it inside k's model chunk. */
static msr_status_t share_in(msr_trainer_t *tr, int k, int dir, float *mine)
{
    if (tr->epf == NULL)
        return msr_device_copy(ez_dev(tr), mine, tr->ez_params + (size_t)k * tr->ez_n,
                               tr->ez_n * sizeof(float), MSR_DEVICE_D2D, NULL);
    float *buf;
    if (tr->ez_guess == k)
        tr->ez_guess = -1;
    msr_status_t st = msr_train_experts_cursor_end(tr); /* a restore's, if left */
    int seg = msr_train_experts_block_seg(tr, k);
    if (seg < 0 || msr_train_experts_next_in_chunk(tr, seg, dir) != k + dir)
        dir = 0;
    if (st == MSR_OK && (st = msr_params_acquire(tr->epf, (size_t)k, dir, &buf)) == MSR_OK) {
        memcpy(mine, buf, tr->ez_n * sizeof(float));
        st = msr_params_release(tr->epf, (size_t)k, buf, 0);
    }
    if (st != MSR_OK)
        return msr_err_call(
            st, "train: this rank's share of MoE block %d's experts from their file", k);
    return MSR_OK;
}

/* Starts gathering block k into slot i: this rank's shard copied in,
 * padded to ez_blk, the allgather over the replica group started (ahead:
 * a prefetch, for the trace; dir: the pass's direction). */
static msr_status_t slot_start(msr_trainer_t *tr, int i, int k, int ahead, int dir)
{
    size_t blk = tr->ez_blk;
    const msr_device_t *dev = ez_dev(tr);
    float *mine = tr->ez_slot[i] + (size_t)tr->rep_rank * blk;
    msr_status_t st = share_in(tr, k, dir, mine);
    if (st != MSR_OK && tr->epf != NULL) {
        tr->ez_slot_k[i] = -1;
        return st;
    }
    if (st == MSR_OK)
        st = msr_device_memset(dev, mine + tr->ez_n, 0, (blk - tr->ez_n) * sizeof(float), NULL);
    if (st == MSR_OK)
        st = msr_device_stream_sync(dev, NULL);
    if (st != MSR_OK) {
        tr->ez_slot_k[i] = -1;
        return ez_check(tr, st, "a shard of the experts into its gather");
    }
    uint64_t a = msr_now_ns();
    st = msr_comm_iallgather(tr->rep_comm, MSR_IN_PLACE, tr->ez_slot[i], blk, MSR_DTYPE_F32,
                             &tr->ez_req[i]);
    if (st != MSR_OK) {
        tr->ez_slot_k[i] = -1;
        return msr_err_call(st, "train: the start of the gather of MoE block %d's experts", k);
    }
    tr->ez_slot_k[i] = k;
    ez_span(tr, ahead ? "prefetch" : "gather", k, a);
    return MSR_OK;
}

/* Finishes slot i's gather if one is in flight; a failed one empties it. */
static msr_status_t slot_wait(msr_trainer_t *tr, int i)
{
    if (tr->ez_req[i] == NULL)
        return MSR_OK;
    int k = tr->ez_slot_k[i];
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_comm_wait(tr->ez_req[i]);
    tr->ez_req[i] = NULL;
    ez_span(tr, "wait", k, a);
    if (st != MSR_OK) {
        tr->ez_slot_k[i] = -1;
        return msr_err_call(st, "train: the gather of MoE block %d's experts", k);
    }
    return MSR_OK;
}

/* A slot to gather into, not block keep's (the one in use): an empty one
 * first, else one gathered, else one in flight (a prefetch the schedule
 * did not take: finished first, as every rank of the group started it). */
static msr_status_t slot_take(msr_trainer_t *tr, int keep, int *i_p)
{
    int best = -1, best_rank = 3;
    for (int i = 0; i < MSR_TRAIN_EZ_SLOTS; i++) {
        if (keep >= 0 && tr->ez_slot_k[i] == keep)
            continue;
        int rank = tr->ez_slot_k[i] < 0 ? 0 : tr->ez_req[i] == NULL ? 1 : 2;
        if (rank < best_rank) {
            best = i;
            best_rank = rank;
        }
    }
    msr_status_t st = slot_wait(tr, best);
    tr->ez_slot_k[best] = -1;
    *i_p = best;
    return st;
}

/* Forgets every gathered block (the shards change next), finishing the
 * gathers in flight; the first failure is returned. */
static msr_status_t slots_forget(msr_trainer_t *tr)
{
    msr_status_t st = MSR_OK;
    for (int i = 0; i < MSR_TRAIN_EZ_SLOTS; i++) {
        msr_status_t wst = slot_wait(tr, i);
        st = st != MSR_OK ? st : wst;
        tr->ez_slot_k[i] = -1;
    }
    return st;
}

/* The held block the schedule most likely acquires after segment s's in
 * pass: the next MoE segment's upwards in a forward, downwards in a
 * backward, inside s's model chunk (-1: none; past the chunk's end the
 * runtime names the next pass's first, msr_train_experts_ahead). A wrong
 * guess costs one gather, never a result. */
static int next_block(const msr_trainer_t *tr, int s, msr_gpt_pass_t pass)
{
    return msr_train_experts_next_in_chunk(tr, s, pass == MSR_GPT_FORWARD ? 1 : -1);
}

/* With the shares in their file: at the end of pass's blocks (block k
 * its last), the file's read of the block the next pass most likely
 * gathers first started: the update's first after the step's last
 * backward, else the first one from k the other way that no slot holds
 * (the backward's after a forward: the block under the two gathered; the
 * next micro-batch's forward's after a backward). One such guess is in
 * flight at most (ez_guess), so that a wrong one (a pipeline's next pass
 * going the same way) holds one of the store's buffers at most until a
 * pass or the update takes it: a wrong guess costs a read, never a
 * result. */
static msr_status_t turn_prefetch(msr_trainer_t *tr, int k, msr_gpt_pass_t pass)
{
    if (tr->epf == NULL || tr->ez_guess >= 0)
        return MSR_OK;
    int back = pass == MSR_GPT_FORWARD ? -1 : 1, b = -1;
    if (pass == MSR_GPT_BACKWARD && tr->dp->last_micro)
        b = 0;
    for (int t = k + back; b < 0 && t >= 0 && t < msr_moe_held(tr->model->moe); t += back)
        if (slot_of(tr, t) < 0)
            b = t;
    if (b < 0)
        return MSR_OK;
    tr->ez_guess = b;
    return msr_params_prefetch(tr->epf, (size_t)b);
}

/* Points block k's experts at its gathered slot (gathered now unless it
 * was prefetched or kept) and, for a backward, their gradients at
 * ez_gfull, zeroed; then starts the next block's gather, which runs while
 * this one computes. */
static msr_status_t ez_acquire(void *arg, int s, msr_gpt_pass_t pass)
{
    msr_trainer_t *tr = arg;
    int k = held_block(tr, s), i;
    if (k < 0)
        return MSR_OK;
    if (tr->ez_at >= 0) {
        return msr_err(MSR_ERR_STATE,
                       "train: MoE block %d's experts acquired while block %d's are in use", k,
                       tr->ez_at);
    }
    msr_status_t st = MSR_OK;
    int way = pass == MSR_GPT_FORWARD ? 1 : -1; /* where the file reads ahead */
    if ((i = slot_of(tr, k)) < 0 && (st = slot_take(tr, -1, &i)) == MSR_OK)
        st = slot_start(tr, i, k, 0, way);
    if (st != MSR_OK || (st = slot_wait(tr, i)) != MSR_OK)
        return st;
    float *g = NULL;
    if (pass == MSR_GPT_BACKWARD) {
        const msr_device_t *dev = ez_dev(tr);
        st = msr_device_memset(dev, tr->ez_gfull, 0,
                               tr->ez_blk * (size_t)tr->rep_size * sizeof(float), NULL);
        if (st == MSR_OK)
            st = msr_device_stream_sync(dev, NULL);
        if (st != MSR_OK)
            return ez_check(tr, st, "the experts' gathered gradients zeroed");
        g = tr->ez_gfull;
    }
    msr_moe_set_block(tr->model->moe, k, tr->ez_slot[i], g);
    tr->ez_at = k;
    int next = next_block(tr, s, pass), j;
    if (next < 0)
        return turn_prefetch(tr, k, pass);
    if (slot_of(tr, next) >= 0)
        return MSR_OK;
    if ((st = slot_take(tr, k, &j)) == MSR_OK)
        st = slot_start(tr, j, next, 1, way);
    return st;
}

/* Before a pass in direction dir that starts at segment s (dp's
 * msr_dp_extra_ahead: a model-parallel chunk's pass): with the shares in
 * their file, this rank's share of the first MoE block the pass reaches
 * read ahead for that block's gather, unless a slot holds the block (the
 * gathers' own guesses stay inside a chunk: an interleaved pipeline's
 * next pass is often another chunk's). */
static msr_status_t ez_ahead(void *arg, int s, int dir)
{
    msr_trainer_t *tr = arg;
    int k = held_block(tr, s);
    if (k < 0)
        k = msr_train_experts_next_in_chunk(tr, s, dir);
    if (tr->epf == NULL || k < 0 || slot_of(tr, k) >= 0)
        return MSR_OK;
    return msr_params_prefetch(tr->epf, (size_t)k);
}

/* After block k's backward: its gradients summed over the replica group,
 * this rank's shard added to ez_grads (or to its file's block); the
 * block's pointers dropped. */
static msr_status_t ez_release(void *arg, int s, msr_gpt_pass_t pass)
{
    msr_trainer_t *tr = arg;
    int k = held_block(tr, s);
    if (k < 0 || tr->ez_at != k)
        return MSR_OK;
    msr_moe_set_block(tr->model->moe, k, NULL, NULL);
    tr->ez_at = -1;
    if (pass != MSR_GPT_BACKWARD)
        return MSR_OK;
    size_t blk = tr->ez_blk;
    float *mine = tr->ez_gfull + (size_t)tr->rep_rank * blk;
    msr_status_t st =
        msr_comm_reduce_scatter(tr->rep_comm, tr->ez_gfull, mine, blk, MSR_DTYPE_F32, MSR_OP_SUM);
    if (st != MSR_OK)
        return msr_err_call(st, "train: the reduce-scatter of MoE block %d's expert gradients", k);
    if (tr->egf != NULL) /* in their file */
        return msr_train_experts_disk_add(tr, k, mine);
    float *g = tr->ez_grads + (size_t)k * tr->ez_n;
    for (size_t i = 0; i < tr->ez_n; i++)
        g[i] += mine[i];
    return MSR_OK;
}

/* Allocates and initialises the shards and the gathered blocks and
 * creates the experts' optimizer over the shards; errors: the store's and
 * MSR_ERR_NO_MEMORY (what was allocated left to msr_train_experts_free). */
static msr_status_t shard_make(msr_trainer_t *tr)
{
    msr_moe_t *moe = tr->model->moe;
    int held = msr_moe_held(moe);
    size_t per = tr->ez_per, shard = (size_t)held * tr->ez_n,
           all = tr->ez_blk * (size_t)tr->rep_size;
    msr_status_t st = msr_moe_store_external(moe);
    if (st != MSR_OK)
        return st;
    /* under the parameters' disk offload the shares go to a file */
    int disk = tr->cfg.par.params_offload.mode == MSR_OFFLOAD_DISK && tr->ez_n > 0;
    int gdisk = disk && tr->cfg.par.grads_offload.mode == MSR_OFFLOAD_DISK;
    int slots_ok = 1;
    for (int i = 0; i < MSR_TRAIN_EZ_SLOTS; i++)
        slots_ok &= (tr->ez_slot[i] = ez_alloc(tr, all)) != NULL;
    if (!disk)
        tr->ez_params = ez_alloc(tr, shard + 1);
    if (!gdisk)
        tr->ez_grads = ez_alloc(tr, shard + 1);
    tr->ez_gfull = ez_alloc(tr, all);
    msr_adamw_range_t *own = msr_calloc((size_t)held + 1, sizeof *own);
    if (!slots_ok || (!disk && tr->ez_params == NULL) || (!gdisk && tr->ez_grads == NULL) ||
        tr->ez_gfull == NULL || own == NULL) {
        msr_free(own);
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for %zu expert elements' shards",
                       shard);
    }
    for (int k = 0; k < held; k++) {
        size_t lo = (size_t)k * per + tr->ez_lo;
        if (!disk)
            msr_moe_init_range(moe, tr->cfg.seed, lo, tr->ez_n,
                               tr->ez_params + (size_t)k * tr->ez_n);
        own[k] = (msr_adamw_range_t){lo, lo + tr->ez_n};
    }
    if (disk && (st = msr_train_experts_disk_shards(tr)) != MSR_OK) {
        msr_free(own);
        return st;
    }
    int n;
    const msr_gpt_tensor_t *t = msr_moe_tensors(moe, &n);
    st = msr_adamw_create_ranges(&tr->cfg.adamw, t, n, own, tr->ez_n > 0 ? held : 0, &tr->eopt);
    msr_free(own);
    return st;
}

msr_status_t msr_train_experts_shard_local(msr_trainer_t *tr)
{
    tr->ez = 1;
    tr->ez_at = tr->ez_guess = -1;
    for (int i = 0; i < MSR_TRAIN_EZ_SLOTS; i++)
        tr->ez_slot_k[i] = -1;
    tr->ez_per =
        (size_t)msr_moe_local_experts(tr->model->moe) * msr_moe_expert_count(&tr->cfg.model);
    tr->ez_blk = (tr->ez_per + (size_t)tr->rep_size - 1) / (size_t)tr->rep_size;
    tr->ez_lo = MSR_MIN(tr->ez_per, (size_t)tr->rep_rank * tr->ez_blk);
    tr->ez_n = MSR_MIN(tr->ez_per, tr->ez_lo + tr->ez_blk) - tr->ez_lo;
    tr->eshard_lo = 0; /* the optimizer's shard space: the shards, block after block */
    tr->eshard_hi = (size_t)msr_moe_held(tr->model->moe) * tr->ez_n;
    msr_status_t st = shard_make(tr);
    if (st != MSR_OK)
        return st;
    msr_dp_extra_t x = {ez_acquire, ez_release, tr, ez_ahead};
    msr_dp_set_extra(tr->dp, &x);
    return MSR_OK;
}

msr_status_t msr_train_experts_shard(msr_trainer_t *tr, msr_comm_t *comm)
{
    msr_status_t st = msr_train_experts_shard_local(tr);
    /* every rank learns the lowest one that failed, so that none goes on
     * to wait in a step for it */
    int me = msr_comm_rank(comm);
    int64_t first = st != MSR_OK ? me : INT64_MAX;
    msr_status_t ast = msr_comm_allreduce(comm, MSR_IN_PLACE, &first, 1, MSR_DTYPE_I64, MSR_OP_MIN);
    if (ast != MSR_OK && st == MSR_OK)
        return msr_err_call(ast, "train: the agreement on the experts' shards");
    if (st != MSR_OK)
        return st;
    if (first != INT64_MAX) {
        return msr_err(MSR_ERR_NO_MEMORY,
                       "train: rank %lld is out of memory for its experts' shards",
                       (long long)first);
    }
    return MSR_OK;
}

msr_status_t msr_train_experts_zero(msr_trainer_t *tr)
{
    const msr_device_t *dev = ez_dev(tr);
    msr_status_t st = MSR_OK; /* in their file: each block's first read is zeros */
    if (tr->ez_grads != NULL &&
        (st = msr_device_memset(dev, tr->ez_grads, 0,
                                (tr->eshard_hi - tr->eshard_lo) * sizeof(float), NULL)) == MSR_OK)
        st = msr_device_stream_sync(dev, NULL);
    msr_status_t fst = slots_forget(tr); /* a load may have changed the shards since */
    return st != MSR_OK ? ez_check(tr, st, "the experts' gradients zeroed") : fst;
}

msr_status_t msr_train_experts_norm(msr_trainer_t *tr)
{
    msr_status_t st = slots_forget(tr); /* the update changes the shards next */
    double sumsq = 0.0;                 /* every element in exactly one replica's shard */
    if (tr->egf != NULL) {              /* read back a block at a time, in the same order */
        msr_status_t gst = msr_train_experts_disk_sumsq(tr, &sumsq);
        st = st != MSR_OK ? st : gst;
    }
    for (size_t i = 0; tr->ez_grads != NULL && i < tr->eshard_hi - tr->eshard_lo; i++)
        sumsq += (double)tr->ez_grads[i] * tr->ez_grads[i];
    tr->dp->extra_sumsq = sumsq;
    return st;
}

/* ---- the experts' moments offloaded (train.h's eoff) ---- */

msr_status_t msr_train_experts_offload(msr_trainer_t *tr)
{
    const msr_offload_config_t *cfg = &tr->cfg.par.offload;
    if (cfg->mode != MSR_OFFLOAD_DISK || tr->eopt == NULL || tr->eopt->count == 0)
        return MSR_OK;
    if (!msr_device_is_host(ez_dev(tr)))
        return msr_err(MSR_ERR_UNSUPPORTED,
                       "train: the experts' moments offload from host memory, not %s's",
                       msr_device_name(ez_dev(tr)));
    msr_status_t st = msr_offload_create_as(cfg, "experts", tr->eopt->count, &tr->eoff);
    if (st != MSR_OK)
        return st;
    /* the optimizer's own arrays were never touched: their pages go back */
    msr_free(tr->eopt->m);
    msr_free(tr->eopt->v);
    tr->eopt->m = tr->eopt->v = NULL;
    MSR_INFO("offload: the experts' moments of %zu elements in %s (chunks of %zu bytes, %s)",
             tr->eopt->count, msr_offload_path(tr->eoff), msr_offload_chunk_bytes(tr->eoff),
             msr_offload_engine(tr->eoff));
    return MSR_OK;
}

/* One update's arrays, in the shard space. */
typedef struct ez_update {
    msr_adamw_t *opt;
    float *params;
    const float *grads;
} ez_update_t;

/* msr_offload_chunk_fn: shard elements [off, off + n), their moments m and v. */
static msr_status_t update_chunk(void *arg, size_t off, size_t n, float *m, float *v)
{
    ez_update_t *u = arg;
    msr_adamw_update_moments(u->opt, off, n, u->params + off, u->grads + off, m, v);
    return MSR_OK;
}

msr_status_t msr_train_experts_update(msr_trainer_t *tr, float *params, const float *grads,
                                      float lr, float grad_scale)
{
    if (tr->eoff == NULL) {
        msr_adamw_update(tr->eopt, params, grads, lr, grad_scale);
        return MSR_OK;
    }
    msr_adamw_begin(tr->eopt, lr, grad_scale);
    ez_update_t u = {tr->eopt, params, grads};
    return msr_offload_step(tr->eoff, update_chunk, &u); /* its error names the file */
}

void msr_train_experts_free(msr_trainer_t *tr)
{
    msr_train_experts_disk_free(tr);
    msr_offload_destroy(tr->eoff);
    tr->eoff = NULL;
    if (tr->ez)
        (void)slots_forget(tr); /* a failed step's gathers finished: their buffers go */
    const msr_device_t *dev = ez_dev(tr);
    for (int i = 0; i < MSR_TRAIN_EZ_SLOTS; i++) {
        msr_device_free(dev, tr->ez_slot[i]);
        tr->ez_slot[i] = NULL;
    }
    msr_device_free(dev, tr->ez_params);
    msr_device_free(dev, tr->ez_grads);
    msr_device_free(dev, tr->ez_gfull);
    tr->ez_params = tr->ez_grads = tr->ez_gfull = NULL;
}

msr_train_expert_bytes_t msr_trainer_expert_bytes(const msr_trainer_t *tr)
{
    msr_train_expert_bytes_t b = {0, 0, 0, 0};
    if (tr->model->moe == NULL)
        return b;
    size_t f = sizeof(float), shard = tr->eshard_hi - tr->eshard_lo;
    size_t resident = tr->ez ? shard : msr_moe_count(tr->model->moe);
    b.params = b.grads = resident * f;
    if (tr->epf != NULL) /* the store's buffers and table */
        b.params = msr_params_resident(tr->epf);
    if (tr->ed_gath != NULL) /* reduce-scattered in place: padded */
        b.grads = MSR_MAX(resident, tr->eblk * (size_t)tr->rep_size) * f;
    if (tr->egf != NULL)
        b.grads = msr_params_resident(tr->egf);
    b.optim = tr->eoff != NULL ? msr_offload_resident(tr->eoff) : 2 * shard * f;
    b.work = msr_moe_work_bytes(tr->model->moe);
    if (tr->ez) /* the gathered blocks' parameters, one block's gradients */
        b.work += (MSR_TRAIN_EZ_SLOTS + 1) * tr->ez_blk * (size_t)tr->rep_size * f;
    else if (tr->escratch != NULL) /* the store's blocks, reduced and gathered */
        b.work += tr->eblk * (size_t)tr->rep_size * f;
    else if (tr->ed_gath != NULL) /* in their file: a block's parts gathered */
        b.work += (size_t)tr->rep_size * MSR_MIN(tr->eblk, tr->ed_per) * f;
    return b;
}

/* ZeRO-3's experts with replicas a held block at a time: each gathered
 * over the replica group and copied out to the host, to out + k * per
 * (fn NULL: out is the whole store) or to out itself (a block's buffer),
 * then handed to fn. */
static msr_status_t ez_walk(msr_trainer_t *tr, float *out, msr_dp_seg_fn fn, void *arg)
{
    const msr_device_t *dev = ez_dev(tr);
    msr_status_t st = slots_forget(tr); /* a load may have changed the shards */
    for (int s = 0; s < tr->model->num_segments && st == MSR_OK; s++) {
        int k = held_block(tr, s); /* each held block is one segment's */
        if (k < 0)
            continue;
        if ((st = ez_acquire(tr, s, MSR_GPT_FORWARD)) != MSR_OK)
            return st;
        size_t at = (size_t)k * tr->ez_per;
        float *dst = fn != NULL ? out : out + at;
        st = msr_device_copy(dev, dst, tr->ez_slot[slot_of(tr, k)], tr->ez_per * sizeof(float),
                             MSR_DEVICE_D2H, NULL);
        if (st == MSR_OK)
            st = msr_device_stream_sync(dev, NULL);
        msr_status_t rst = ez_release(tr, s, MSR_GPT_FORWARD);
        st = st != MSR_OK ? ez_check(tr, st, "a block of the experts out") : rst;
        if (st == MSR_OK && fn != NULL)
            st = fn(arg, at, dst, tr->ez_per);
    }
    return st;
}

msr_status_t msr_trainer_experts_whole(msr_trainer_t *tr, float *out)
{
    msr_moe_t *moe = tr->model->moe;
    const msr_device_t *dev = ez_dev(tr);
    if (tr->epf != NULL && !tr->ez) { /* out is the host's, and so are the blocks */
        msr_status_t st = msr_train_experts_cursor_end(tr);
        for (int k = 0; k < msr_moe_held(moe) && st == MSR_OK; k++)
            st = msr_params_get(tr->epf, (size_t)k, out + (size_t)k * tr->ed_per);
        return st;
    }
    if (!tr->ez) { /* out is the host's */
        msr_status_t cst =
            msr_device_copy(dev, out, msr_moe_params(moe), msr_moe_count(moe) * sizeof(float),
                            MSR_DEVICE_D2H, NULL);
        if (cst == MSR_OK)
            cst = msr_device_stream_sync(dev, NULL);
        return ez_check(tr, cst, "the experts' parameters out");
    }
    return ez_walk(tr, out, NULL, NULL);
}

msr_status_t msr_trainer_experts_each(msr_trainer_t *tr, msr_dp_seg_fn fn, void *arg)
{
    if (!tr->ez)
        return msr_err(MSR_ERR_INVALID_ARG, "train: the experts are gathered a block at a time "
                                            "under ZeRO-3 with replicas only");
    float *buf = msr_malloc(tr->ez_per * sizeof(float) + 1);
    if (buf == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a block of the experts");
    msr_status_t st = ez_walk(tr, buf, fn, arg);
    msr_free(buf);
    return st;
}
