/* ZeRO-3 for the experts (see train.h, ez): each rank keeps its shard of
 * every held MoE block's experts in its replica group; a block's experts
 * are all-gathered over that group around each use (dp's hooks call
 * here) and their gradients reduce-scattered into the shard at the end of
 * the block's backward; the experts' optimizer updates the shards. */
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "model/err_call.h"
#include "model/moe.h"
#include "parallel/train_impl.h"

/* The place in the store of the MoE block segment s runs, or -1 (a dense
 * segment, or a block held elsewhere). */
static int held_block(const msr_trainer_t *tr, int s)
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

/* Gathers block k's experts into ez_full (and, for a backward, points
 * their gradients at ez_gfull, zeroed). */
static msr_status_t ez_acquire(void *arg, int s, msr_gpt_pass_t pass)
{
    msr_trainer_t *tr = arg;
    int k = held_block(tr, s);
    if (k < 0)
        return MSR_OK;
    if (tr->ez_at >= 0) {
        return msr_err(MSR_ERR_STATE,
                       "train: MoE block %d's experts acquired while block %d's are gathered", k,
                       tr->ez_at);
    }
    size_t blk = tr->ez_blk, all = blk * (size_t)tr->rep_size;
    float *mine = tr->ez_full + (size_t)tr->rep_rank * blk;
    memcpy(mine, tr->ez_params + (size_t)k * tr->ez_n, tr->ez_n * sizeof(float));
    memset(mine + tr->ez_n, 0, (blk - tr->ez_n) * sizeof(float));
    msr_status_t st =
        msr_comm_allgather(tr->rep_comm, MSR_IN_PLACE, tr->ez_full, blk, MSR_DTYPE_F32);
    if (st != MSR_OK)
        return msr_err_call(st, "train: the allgather of MoE block %d's experts", k);
    float *g = NULL;
    if (pass == MSR_GPT_BACKWARD) {
        memset(tr->ez_gfull, 0, all * sizeof(float));
        g = tr->ez_gfull;
    }
    msr_moe_set_block(tr->model->moe, k, tr->ez_full, g);
    tr->ez_at = k;
    return MSR_OK;
}

/* After block k's backward: its gradients summed over the replica group,
 * this rank's shard added to ez_grads; the block's pointers dropped. */
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
    float *g = tr->ez_grads + (size_t)k * tr->ez_n;
    for (size_t i = 0; i < tr->ez_n; i++)
        g[i] += mine[i];
    return MSR_OK;
}

msr_status_t msr_train_experts_shard(msr_trainer_t *tr)
{
    msr_moe_t *moe = tr->model->moe;
    int held = msr_moe_held(moe);
    size_t per = (size_t)msr_moe_local_experts(moe) * msr_moe_expert_count(&tr->cfg.model);
    tr->ez = 1;
    tr->ez_at = -1;
    tr->ez_per = per;
    tr->ez_blk = (per + (size_t)tr->rep_size - 1) / (size_t)tr->rep_size;
    tr->ez_lo = MSR_MIN(per, (size_t)tr->rep_rank * tr->ez_blk);
    tr->ez_n = MSR_MIN(per, tr->ez_lo + tr->ez_blk) - tr->ez_lo;
    size_t shard = (size_t)held * tr->ez_n, all = tr->ez_blk * (size_t)tr->rep_size;
    tr->eshard_lo = 0; /* the optimizer's shard space: the shards, block after block */
    tr->eshard_hi = shard;
    msr_status_t st = msr_moe_store_external(moe);
    if (st != MSR_OK)
        return st;
    tr->ez_params = msr_calloc(shard + 1, sizeof(float));
    tr->ez_grads = msr_calloc(shard + 1, sizeof(float));
    tr->ez_full = msr_calloc(all, sizeof(float));
    tr->ez_gfull = msr_calloc(all, sizeof(float));
    msr_adamw_range_t *own = msr_calloc((size_t)held + 1, sizeof *own);
    if (tr->ez_params == NULL || tr->ez_grads == NULL || tr->ez_full == NULL ||
        tr->ez_gfull == NULL || own == NULL) {
        msr_free(own);
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for %zu expert elements' shards",
                       shard);
    }
    for (int k = 0; k < held; k++) {
        size_t lo = (size_t)k * per + tr->ez_lo;
        msr_moe_init_range(moe, tr->cfg.seed, lo, tr->ez_n, tr->ez_params + (size_t)k * tr->ez_n);
        own[k] = (msr_adamw_range_t){lo, lo + tr->ez_n};
    }
    msr_dp_extra_t x = {ez_acquire, ez_release, tr};
    msr_dp_set_extra(tr->dp, &x);
    int n;
    const msr_gpt_tensor_t *t = msr_moe_tensors(moe, &n);
    st = msr_adamw_create_ranges(&tr->cfg.adamw, t, n, own, tr->ez_n > 0 ? held : 0, &tr->eopt);
    msr_free(own);
    return st;
}

void msr_train_experts_zero(msr_trainer_t *tr)
{
    memset(tr->ez_grads, 0, (tr->eshard_hi - tr->eshard_lo) * sizeof(float));
}

void msr_train_experts_norm(msr_trainer_t *tr)
{
    double sumsq = 0.0; /* every element in exactly one replica's shard */
    for (size_t i = 0; i < tr->eshard_hi - tr->eshard_lo; i++)
        sumsq += (double)tr->ez_grads[i] * tr->ez_grads[i];
    tr->dp->extra_sumsq = sumsq;
}

void msr_train_experts_free(msr_trainer_t *tr)
{
    msr_free(tr->ez_params);
    msr_free(tr->ez_grads);
    msr_free(tr->ez_full);
    msr_free(tr->ez_gfull);
}

msr_train_expert_bytes_t msr_trainer_expert_bytes(const msr_trainer_t *tr)
{
    msr_train_expert_bytes_t b = {0, 0, 0, 0};
    if (tr->model->moe == NULL)
        return b;
    size_t f = sizeof(float), shard = tr->eshard_hi - tr->eshard_lo;
    size_t resident = tr->ez ? shard : msr_moe_count(tr->model->moe);
    b.params = b.grads = resident * f;
    b.optim = 2 * shard * f;
    b.work = msr_moe_work_bytes(tr->model->moe);
    if (tr->ez) /* one block's parameters and gradients gathered */
        b.work += 2 * tr->ez_blk * (size_t)tr->rep_size * f;
    else if (tr->escratch != NULL) /* the store's blocks, reduced and gathered */
        b.work += tr->eblk * (size_t)tr->rep_size * f;
    return b;
}

msr_status_t msr_trainer_experts_whole(msr_trainer_t *tr, float *out)
{
    msr_moe_t *moe = tr->model->moe;
    if (!tr->ez) {
        memcpy(out, msr_moe_params(moe), msr_moe_count(moe) * sizeof(float));
        return MSR_OK;
    }
    for (int s = 0; s < tr->model->num_segments; s++) { /* each held block is one's */
        int k = held_block(tr, s);
        if (k < 0)
            continue;
        msr_status_t st = ez_acquire(tr, s, MSR_GPT_FORWARD);
        if (st != MSR_OK)
            return st;
        memcpy(out + (size_t)k * tr->ez_per, tr->ez_full, tr->ez_per * sizeof(float));
        if ((st = ez_release(tr, s, MSR_GPT_FORWARD)) != MSR_OK)
            return st;
    }
    return MSR_OK;
}
