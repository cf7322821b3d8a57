/* The experts' parameters in a file of their own under the parameters'
 * disk offload (train.h's epf): each held MoE block's experts are block k
 * of a parameter store (parallel/offload_params.h), read ahead of the
 * block's forward and backward through dp's hooks and dropped after; the
 * gradients kept resident, or under the gradients' disk offload in a
 * second store (egf), read and written back around each backward of the
 * block. The norm, the update, a checkpoint's save and a restore go over
 * the blocks one at a time through cursors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "model/err_call.h"
#include "model/moe.h"
#include "parallel/train_impl.h"

/* The place in the store of the MoE block segment s runs, or -1 (a dense
 * segment, or a block held elsewhere). */
static int held_block(const msr_trainer_t *tr, int s)
{
    return msr_train_experts_held_block(tr, s);
}

static int held(const msr_trainer_t *tr)
{
    return msr_moe_held(tr->model->moe);
}

/* The experts' gradients kept in memory, in the shard space: ed_grads
 * (under ZeRO 1-2 with replicas this rank's block of their sums), or
 * ZeRO-3's shards (ez_grads) with the shards' parameters in the file. */
static const float *resident_grads(const msr_trainer_t *tr)
{
    return tr->ez ? tr->ez_grads : tr->ed_grads + (size_t)tr->rep_rank * tr->eblk;
}

/* ZeRO 1-2 with replicas: the floats of the per-block gather, a part of
 * each replica's (no rank's owned elements of a block are more), and at
 * least a block (the replicas' parts cover every held block). */
static size_t gath_floats(const msr_trainer_t *tr)
{
    return (size_t)tr->rep_size * MSR_MIN(tr->eblk, tr->ed_per);
}

/* Cursor c over store st at block k (held; k == held: none), the one it
 * held before given back (written back when changed). */
static msr_status_t cur_to(msr_params_t *st, msr_train_ecur_t *c, int k, int held_n)
{
    if (c->k == k)
        return MSR_OK;
    msr_status_t rc = MSR_OK;
    if (c->k >= 0) {
        rc = msr_params_release(st, (size_t)c->k, c->buf, c->dirty);
        c->k = -1;
        c->buf = NULL;
        c->dirty = 0;
    }
    if (rc == MSR_OK && k < held_n &&
        (rc = msr_params_acquire(st, (size_t)k, 1, &c->buf)) == MSR_OK)
        c->k = k;
    return rc;
}

/* The parameters' cursor at block k. */
static msr_status_t cursor_to(msr_trainer_t *tr, int k)
{
    return cur_to(tr->epf, &tr->ed_pc, k, held(tr));
}

/* The gradients' cursor at block k: this step's zeros when the block's
 * backward has not run yet (written back so). */
static msr_status_t gcursor_to(msr_trainer_t *tr, int k)
{
    msr_status_t st = cur_to(tr->egf, &tr->ed_gc, k, held(tr));
    if (st == MSR_OK && k < held(tr) && tr->ed_fresh[k]) {
        memset(tr->ed_gc.buf, 0, tr->ed_per * sizeof(float));
        tr->ed_gc.dirty = 1;
        tr->ed_fresh[k] = 0;
    }
    return st;
}

msr_status_t msr_train_experts_cursor_end(msr_trainer_t *tr)
{
    if (tr->epf == NULL)
        return MSR_OK;
    msr_status_t st = cursor_to(tr, held(tr));
    if (tr->egf != NULL) {
        msr_status_t gst = cur_to(tr->egf, &tr->ed_gc, held(tr), held(tr));
        st = st != MSR_OK ? st : gst;
    }
    return st;
}

/* Reads block k's parameters for a pass (dir +1: a forward, whose next
 * block is read ahead; -1: a backward) and points the block's experts at
 * them and at its gradients: resident, or for a backward read from their
 * file (this step's zeros at its first). */
/* The direction to read ahead in after block k (segment s) in a pass in
 * direction dir: dir when block k + dir is the next MoE block the pass
 * reaches, 0 when the pass ends first (its model chunk's last MoE block:
 * an interleaved pipeline's next pass is often another chunk's, which
 * the runtime reads ahead itself, ed_ahead). */
static int ed_next(const msr_trainer_t *tr, int s, int k, int dir)
{
    return msr_train_experts_next_in_chunk(tr, s, dir) == k + dir ? dir : 0;
}

static msr_status_t ed_acquire(void *arg, int s, msr_gpt_pass_t pass)
{
    msr_trainer_t *tr = arg;
    int k = held_block(tr, s);
    if (k < 0)
        return MSR_OK;
    if (tr->ed_at >= 0) {
        return msr_err(MSR_ERR_STATE,
                       "train: MoE block %d's experts acquired while block %d's are in use", k,
                       tr->ed_at);
    }
    msr_status_t st = msr_train_experts_cursor_end(tr); /* a restore's, if left */
    int dir = pass == MSR_GPT_FORWARD ? 1 : -1;
    if (st == MSR_OK && (st = msr_params_acquire(tr->epf, (size_t)k, ed_next(tr, s, k, dir),
                                                 &tr->ed_buf)) != MSR_OK)
        return msr_err_call(st, "train: MoE block %d's experts from their file", k);
    if (st != MSR_OK)
        return st;
    float *g = tr->ed_grads != NULL ? tr->ed_grads + (size_t)k * tr->ed_per : NULL;
    if (tr->egf != NULL && pass == MSR_GPT_BACKWARD) {
        if ((st = msr_params_acquire(tr->egf, (size_t)k, -1, &tr->ed_gbuf)) != MSR_OK) {
            (void)msr_params_release(tr->epf, (size_t)k, tr->ed_buf, 0);
            tr->ed_buf = NULL;
            return msr_err_call(st, "train: MoE block %d's expert gradients from their file", k);
        }
        if (tr->ed_fresh[k]) {
            memset(tr->ed_gbuf, 0, tr->ed_per * sizeof(float));
            tr->ed_fresh[k] = 0;
        }
        g = tr->ed_gbuf;
    }
    msr_moe_set_block(tr->model->moe, k, tr->ed_buf, g);
    tr->ed_at = k;
    return MSR_OK;
}

/* After block k's pass: its parameters dropped (a pass reads them only),
 * its gradients written back after a backward when in their file. The
 * block the next pass most likely starts with is read ahead: after a
 * forward's last block, that one again for the backward (and its
 * gradients); after a backward's first, that one for the next
 * micro-batch's forward or the update (and after the step's last
 * backward, its gradients for the norm); a wrong guess costs a read,
 * never a result. */
static msr_status_t ed_release(void *arg, int s, msr_gpt_pass_t pass)
{
    msr_trainer_t *tr = arg;
    int k = held_block(tr, s), last = held(tr) - 1;
    if (k < 0 || tr->ed_at != k)
        return MSR_OK;
    msr_moe_set_block(tr->model->moe, k, NULL, NULL);
    float *buf = tr->ed_buf, *gbuf = tr->ed_gbuf;
    tr->ed_at = -1;
    tr->ed_buf = tr->ed_gbuf = NULL;
    msr_status_t st = msr_params_release(tr->epf, (size_t)k, buf, 0);
    if (gbuf != NULL) {
        msr_status_t gst = msr_params_release(tr->egf, (size_t)k, gbuf, 1);
        st = st != MSR_OK ? st : gst;
    }
    int turn = pass == MSR_GPT_FORWARD ? k == last : k == 0;
    if (st == MSR_OK && turn)
        st = msr_params_prefetch(tr->epf, (size_t)k);
    /* the gradients: the backward's first after a forward's last; after
     * the step's last backward the norm's first */
    if (st == MSR_OK && turn && tr->egf != NULL && (pass == MSR_GPT_FORWARD || tr->dp->last_micro))
        st = msr_params_prefetch(tr->egf, (size_t)k);
    return st;
}

/* Before a pass in direction dir that starts at segment s (dp's
 * msr_dp_extra_ahead: a model-parallel chunk's pass, a forward alone):
 * the experts of the first MoE block it reaches read ahead. The guesses
 * of the releases above and of each acquire (the next block in the
 * pass's direction) miss where an interleaved pipeline's next pass is
 * another chunk's, or a forward alone follows a forward; a guess not
 * taken is given up for a later read (offload_params.h). (ZeRO-3 over
 * the replicas reads its shares ahead in train_experts.c's ez_ahead.) */
static msr_status_t ed_ahead(void *arg, int s, int dir)
{
    msr_trainer_t *tr = arg;
    int k = held_block(tr, s);
    if (k < 0)
        k = msr_train_experts_next_in_chunk(tr, s, dir);
    if (k < 0)
        return MSR_OK;
    return msr_params_prefetch(tr->epf, (size_t)k);
}

/* A store of the experts' blocks of ed_per floats, each put first with
 * the parameters' initial values (seed; else zeros): block k's are the
 * store's elements [k * stride + lo, + ed_per) (the whole block's, or
 * under ZeRO-3 with replicas this rank's share of it). */
static msr_status_t store_make(msr_trainer_t *tr, const char *kind, int seed, size_t stride,
                               size_t lo, msr_params_t **st_p)
{
    msr_moe_t *moe = tr->model->moe;
    float *tmp = msr_calloc(tr->ed_per + 1, sizeof(float));
    if (tmp == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a block of the experts");
    msr_status_t st =
        msr_params_create_as(&tr->cfg.par.params_offload, kind, tr->ed_per, (size_t)held(tr), st_p);
    /* seeded a block at a time: the same numbers as the whole store's */
    for (int k = 0; k < held(tr) && st == MSR_OK; k++) {
        if (seed)
            msr_moe_init_range(moe, tr->cfg.seed, (size_t)k * stride + lo, tr->ed_per, tmp);
        st = msr_params_put(*st_p, (size_t)k, tmp);
    }
    msr_free(tmp);
    if (st == MSR_OK) /* the first forward's (or backward's) first block */
        st = msr_params_prefetch(*st_p, seed ? 0 : (size_t)(held(tr) - 1));
    return st;
}

msr_status_t msr_train_experts_disk(msr_trainer_t *tr)
{
    msr_moe_t *moe = tr->model->moe;
    tr->ed_at = tr->ed_pc.k = tr->ed_gc.k = -1;
    if (!msr_device_is_host(msr_moe_device(moe)))
        return msr_err(MSR_ERR_UNSUPPORTED,
                       "train: the experts' parameters offload from host memory, not %s's",
                       msr_device_name(msr_moe_device(moe)));
    tr->ed_per = (size_t)msr_moe_local_experts(moe) * msr_moe_expert_count(&tr->cfg.model);
    msr_status_t st = msr_moe_store_external(moe);
    if (st != MSR_OK)
        return st;
    size_t count = (size_t)held(tr) * tr->ed_per;
    /* the gradients in a file too under their offload (ZeRO 2): each
     * rank's whole blocks, with replicas each block's owned parts summed
     * into them after the step's backward (disk_reduce) */
    int gdisk = tr->cfg.par.grads_offload.mode == MSR_OFFLOAD_DISK;
    if (gdisk) {
        tr->ed_fresh = msr_calloc((size_t)held(tr) + 1, 1);
        if (tr->ed_fresh == NULL)
            return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory");
        memset(tr->ed_fresh, 1, (size_t)held(tr));
    } else {
        /* under ZeRO 1-2 with replicas reduce-scattered in place (the
         * tail past count zero), and gathered a block at a time */
        size_t all = MSR_MAX(count, tr->eblk * (size_t)tr->rep_size);
        if ((tr->ed_grads = msr_calloc(all + 1, sizeof(float))) == NULL)
            return msr_err(MSR_ERR_NO_MEMORY,
                           "train: out of memory for %zu expert elements' gradients", all);
    }
    if (tr->eblk > 0 && (tr->ed_gath = msr_calloc(gath_floats(tr) + 1, sizeof(float))) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for the experts' gather");
    if ((st = store_make(tr, "experts-params", 1, tr->ed_per, 0, &tr->epf)) != MSR_OK)
        return st;
    MSR_INFO("offload: the experts' parameters of %d blocks of %zu elements in %s (%s)", held(tr),
             tr->ed_per, msr_params_path(tr->epf), msr_params_engine(tr->epf));
    if (gdisk) {
        if ((st = store_make(tr, "experts-grads", 0, tr->ed_per, 0, &tr->egf)) != MSR_OK)
            return st;
        MSR_INFO("offload: the experts' gradients in %s", msr_params_path(tr->egf));
    }
    msr_dp_extra_t x = {ed_acquire, ed_release, tr, ed_ahead};
    msr_dp_set_extra(tr->dp, &x);
    return MSR_OK;
}

msr_status_t msr_train_experts_disk_shards(msr_trainer_t *tr)
{
    tr->ed_at = tr->ed_pc.k = tr->ed_gc.k = -1;
    if (!msr_device_is_host(msr_moe_device(tr->model->moe)))
        return msr_err(MSR_ERR_UNSUPPORTED,
                       "train: the experts' parameters offload from host memory, not %s's",
                       msr_device_name(msr_moe_device(tr->model->moe)));
    tr->ed_per = tr->ez_n;
    msr_status_t st = store_make(tr, "experts-params", 1, tr->ez_per, tr->ez_lo, &tr->epf);
    if (st != MSR_OK)
        return st;
    MSR_INFO("offload: this rank's shares of the experts' parameters of %d blocks of %zu "
             "elements in %s (%s)",
             held(tr), tr->ed_per, msr_params_path(tr->epf), msr_params_engine(tr->epf));
    if (tr->cfg.par.grads_offload.mode != MSR_OFFLOAD_DISK)
        return MSR_OK;
    /* the shards of the replicas' sums are this rank's alone: a file too */
    if ((tr->ed_fresh = msr_calloc((size_t)held(tr) + 1, 1)) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory");
    memset(tr->ed_fresh, 1, (size_t)held(tr));
    if ((st = store_make(tr, "experts-grads", 0, tr->ed_per, 0, &tr->egf)) != MSR_OK)
        return st;
    MSR_INFO("offload: this rank's shares of the experts' gradients in %s",
             msr_params_path(tr->egf));
    return MSR_OK;
}

msr_status_t msr_train_experts_disk_add(msr_trainer_t *tr, int k, const float *src)
{
    float *g = NULL;
    msr_status_t st = msr_params_acquire(tr->egf, (size_t)k, -1, &g);
    if (st != MSR_OK)
        return msr_err_call(st, "train: MoE block %d's expert gradients from their file", k);
    if (tr->ed_fresh[k]) { /* read, but this step's zeros */
        memset(g, 0, tr->ed_per * sizeof(float));
        tr->ed_fresh[k] = 0;
    }
    for (size_t i = 0; i < tr->ed_per; i++)
        g[i] += src[i];
    st = msr_params_release(tr->egf, (size_t)k, g, 1);
    /* the backward's end: the next one's first block, or after the
     * step's last the norm's first (the backward reads ahead within) */
    if (st == MSR_OK && k == 0)
        st = msr_params_prefetch(tr->egf, tr->dp->last_micro ? 0 : (size_t)(held(tr) - 1));
    return st;
}

void msr_train_experts_disk_free(msr_trainer_t *tr)
{
    /* each waits for what is in flight: the buffers go with it */
    msr_params_destroy(tr->epf);
    msr_params_destroy(tr->egf);
    tr->epf = tr->egf = NULL;
    tr->ed_buf = tr->ed_gbuf = NULL;
    tr->ed_pc = tr->ed_gc = (msr_train_ecur_t){-1, NULL, 0};
    tr->ed_at = -1;
    msr_free(tr->ed_grads);
    msr_free(tr->ed_hold);
    msr_free(tr->ed_fresh);
    msr_free(tr->ed_gath);
    tr->ed_grads = tr->ed_hold = tr->ed_gath = NULL;
    tr->ed_fresh = NULL;
}

void msr_train_experts_disk_zero(msr_trainer_t *tr)
{
    if (tr->ed_grads != NULL)
        memset(tr->ed_grads, 0, (size_t)held(tr) * tr->ed_per * sizeof(float));
    else if (tr->egf != NULL)
        memset(tr->ed_fresh, 1, (size_t)held(tr));
}

msr_status_t msr_train_experts_disk_sumsq(msr_trainer_t *tr, double *sumsq_p)
{
    double sumsq = 0.0;
    msr_status_t st = MSR_OK;
    for (int k = 0; k < held(tr) && st == MSR_OK; k++) { /* element order, as in memory */
        if ((st = gcursor_to(tr, k)) != MSR_OK)
            break;
        const float *g = tr->ed_gc.buf;
        for (size_t i = 0; i < tr->ed_per; i++)
            sumsq += (double)g[i] * g[i];
    }
    msr_status_t cst = cur_to(tr->egf, &tr->ed_gc, held(tr), held(tr));
    if (st == MSR_OK && cst == MSR_OK) /* the update's first block */
        cst = msr_params_prefetch(tr->egf, 0);
    *sumsq_p = sumsq;
    return st != MSR_OK ? st : cst;
}

/* ---- the update, a block at a time ---- */

/* Replica r's owned elements in block k, [*lo_p, *lo_p + return) in the
 * block (ZeRO 1-2's blocks of eblk elements of the flat experts). */
static size_t owned_in(const msr_trainer_t *tr, int r, int k, size_t *lo_p)
{
    size_t count = (size_t)held(tr) * tr->ed_per, b = (size_t)k * tr->ed_per;
    size_t lo = MSR_MIN(count, (size_t)r * tr->eblk), hi = MSR_MIN(count, lo + tr->eblk);
    lo = MSR_MAX(lo, b);
    hi = MSR_MIN(hi, b + tr->ed_per);
    *lo_p = lo < hi ? lo - b : 0;
    return lo < hi ? hi - lo : 0;
}

/* Blocks [ed_gk, k) get the other replicas' owned elements: each taken
 * by the cursor (read unless it holds it), this rank's part and the
 * others' exchanged through ed_gath, and marked to be written back, in
 * order on every replica (the allgathers in lockstep, whatever the
 * shards cover). */
static msr_status_t gather_to(msr_trainer_t *tr, int k)
{
    size_t m = MSR_MIN(tr->eblk, tr->ed_per), lo;
    msr_status_t st = MSR_OK;
    for (; tr->ed_gath != NULL && tr->ed_gk < k && st == MSR_OK; tr->ed_gk++) {
        int j = tr->ed_gk;
        if ((st = cursor_to(tr, j)) != MSR_OK)
            break;
        float *buf = tr->ed_pc.buf, *mine = tr->ed_gath + (size_t)tr->rep_rank * m;
        size_t n = owned_in(tr, tr->rep_rank, j, &lo);
        memcpy(mine, buf + lo, n * sizeof(float));
        st = msr_comm_allgather(tr->rep_comm, MSR_IN_PLACE, tr->ed_gath, m, MSR_DTYPE_F32);
        if (st != MSR_OK) {
            st = msr_err_call(st, "train: the allgather of MoE block %d's experts", j);
            break;
        }
        for (int r = 0; r < tr->rep_size; r++)
            if (r != tr->rep_rank && (n = owned_in(tr, r, j, &lo)) > 0)
                memcpy(buf + lo, tr->ed_gath + (size_t)r * m, n * sizeof(float));
        tr->ed_pc.dirty = 1;
    }
    return st;
}

/* Block k's sum over the replicas into ed_gath (one allreduce of the
 * block: ed_gath holds the replicas' parts of a block, at least a
 * block), this rank's owned part of it copied back into the block. On
 * one node the allreduce folds in rank order, as the in-memory path's
 * reduce-scatter does, whatever the replica count; each rank writes its
 * block once to the shared segment (a reduce-scatter would need each
 * replica's part padded to a common slot, up to replicas x the block). */
static msr_status_t reduce_block(msr_trainer_t *tr, int k, float *g)
{
    float *sum = tr->ed_gath;
    msr_status_t st =
        msr_comm_allreduce(tr->rep_comm, g, sum, tr->ed_per, MSR_DTYPE_F32, MSR_OP_SUM);
    if (st != MSR_OK)
        return msr_err_call(st, "train: the allreduce of MoE block %d's expert gradients", k);
    size_t lo, n = owned_in(tr, tr->rep_rank, k, &lo);
    memcpy(g + lo, sum + lo, n * sizeof(float));
    return MSR_OK;
}

msr_status_t msr_train_experts_disk_reduce(msr_trainer_t *tr)
{
    double sumsq = 0.0; /* element order, as the reduce-scatter's block */
    msr_status_t st = MSR_OK;
    size_t lo, n;
    for (int k = 0; k < held(tr) && st == MSR_OK; k++) {
        if ((st = gcursor_to(tr, k)) != MSR_OK ||
            (st = reduce_block(tr, k, tr->ed_gc.buf)) != MSR_OK)
            break;
        const float *g = tr->ed_gc.buf;
        if ((n = owned_in(tr, tr->rep_rank, k, &lo)) > 0)
            tr->ed_gc.dirty = 1;
        for (size_t i = 0; i < n; i++)
            sumsq += (double)g[lo + i] * g[lo + i];
    }
    msr_status_t cst = cur_to(tr->egf, &tr->ed_gc, held(tr), held(tr));
    if (st == MSR_OK && cst == MSR_OK) /* the update's first block */
        cst = msr_params_prefetch(tr->egf, tr->eshard_lo / tr->ed_per);
    tr->dp->extra_sumsq = sumsq;
    return st != MSR_OK ? st : cst;
}

msr_status_t msr_train_experts_disk_gather(msr_trainer_t *tr)
{
    tr->ed_gk = 0;
    msr_status_t st = gather_to(tr, held(tr));
    msr_status_t cst = msr_train_experts_cursor_end(tr);
    if (st == MSR_OK && cst == MSR_OK) /* the next forward's first block */
        cst = msr_params_prefetch(tr->epf, 0);
    return st != MSR_OK ? st : cst;
}

/* Shard elements [off, off + n) updated (their moments at m and v, or in
 * the optimizer's arrays when NULL) with the cursors walking the blocks
 * they fall in (the shard's element i is the store's eshard_lo + i),
 * each one's parameters written back when the cursor leaves it, under
 * ZeRO 1-2 with replicas after the blocks before it are gathered. */
static msr_status_t update_span(msr_trainer_t *tr, size_t off, size_t n, float *m, float *v)
{
    msr_adamw_t *opt = tr->eopt;
    size_t per = tr->ed_per, e = off + n;
    msr_status_t st = MSR_OK;
    while (off < e && st == MSR_OK) {
        size_t at = tr->eshard_lo + off; /* in the store */
        int k = (int)(at / per);
        size_t in = at - (size_t)k * per, take = MSR_MIN(e - off, per - in);
        if ((st = gather_to(tr, k)) != MSR_OK || (st = cursor_to(tr, k)) != MSR_OK)
            break;
        if (tr->egf != NULL && (st = gcursor_to(tr, k)) != MSR_OK)
            break;
        const float *g = tr->egf != NULL ? tr->ed_gc.buf + in : resident_grads(tr) + off;
        if (m != NULL)
            msr_adamw_update_moments(opt, off, take, tr->ed_pc.buf + in, g, m, v);
        else
            msr_adamw_update_moments(opt, off, take, tr->ed_pc.buf + in, g, opt->m + off,
                                     opt->v + off);
        tr->ed_pc.dirty = 1;
        if (m != NULL) {
            m += take;
            v += take;
        }
        off += take;
    }
    return st;
}

/* msr_offload_chunk_fn: shard elements [off, off + n), their moments m and v. */
static msr_status_t update_chunk(void *arg, size_t off, size_t n, float *m, float *v)
{
    return update_span(arg, off, n, m, v);
}

msr_status_t msr_train_experts_disk_update(msr_trainer_t *tr, float lr, float grad_scale)
{
    msr_adamw_begin(tr->eopt, lr, grad_scale);
    tr->ez_guess = -1; /* the walk below takes every block's read */
    tr->ed_gk = 0;
    msr_status_t st = tr->eoff != NULL ? msr_offload_step(tr->eoff, update_chunk, tr)
                                       : update_span(tr, 0, tr->eopt->count, NULL, NULL);
    if (st == MSR_OK) /* the blocks past the shard's */
        st = gather_to(tr, held(tr));
    msr_status_t cst = msr_train_experts_cursor_end(tr);
    if (st == MSR_OK && cst == MSR_OK) /* the next forward's first block */
        cst = msr_params_prefetch(tr->epf, 0);
    if (st == MSR_OK && cst == MSR_OK && tr->egf != NULL) /* the next backward's */
        cst = msr_params_prefetch(tr->egf, (size_t)(held(tr) - 1));
    return st != MSR_OK ? st : cst;
}

/* ---- checkpoints ---- */

msr_status_t msr_train_experts_spans(msr_trainer_t *tr, size_t s, size_t n, msr_dp_blk_t *blk,
                                     msr_dp_span_fn fn, void *arg)
{
    size_t per = tr->ed_per, e = s + n;
    msr_status_t st = MSR_OK;
    while (s < e && st == MSR_OK) {
        size_t k = s / per, in = s - k * per, take = MSR_MIN(e - s, per - in);
        if (blk->k != k) {
            blk->k = SIZE_MAX;
            st = blk->shared ? msr_params_read_shared(tr->epf, k, blk->buf)
                             : msr_params_get(tr->epf, k, blk->buf);
            if (st != MSR_OK)
                break;
            blk->k = k;
        }
        st = fn(arg, blk->buf + in, take);
        s += take;
    }
    return st;
}

size_t msr_trainer_experts_block_floats(const msr_trainer_t *tr)
{
    return tr->epf != NULL && !tr->ez ? tr->ed_per : 0;
}

msr_status_t msr_trainer_experts_spans(msr_trainer_t *tr, size_t s, size_t n, msr_dp_blk_t *blk,
                                       msr_dp_span_fn fn, void *arg)
{
    if (tr->epf == NULL)
        return fn(arg, msr_moe_params(tr->model->moe) + s, n);
    return msr_train_experts_spans(tr, s, n, blk, fn, arg);
}

msr_status_t msr_train_experts_disk_load(msr_trainer_t *tr, size_t s, size_t n, const float *src)
{
    size_t per = tr->ed_per, e = s + n;
    msr_status_t st = MSR_OK;
    while (s < e && st == MSR_OK) {
        int k = (int)(s / per);
        size_t in = s - (size_t)k * per, take = MSR_MIN(e - s, per - in);
        if ((st = cursor_to(tr, k)) != MSR_OK)
            break;
        memcpy(tr->ed_pc.buf + in, src, take * sizeof(float));
        tr->ed_pc.dirty = 1;
        src += take;
        s += take;
    }
    return st;
}

msr_status_t msr_train_experts_hold(msr_trainer_t *tr)
{
    if (tr->epf == NULL || tr->ed_hold != NULL)
        return MSR_OK;
    size_t count = (size_t)held(tr) * tr->ed_per;
    msr_status_t st = msr_train_experts_cursor_end(tr);
    if (st != MSR_OK)
        return st;
    if ((tr->ed_hold = msr_malloc(count * sizeof(float) + 1)) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for %zu expert parameters", count);
    for (int k = 0; k < held(tr) && st == MSR_OK; k++)
        st = msr_params_get(tr->epf, (size_t)k, tr->ed_hold + (size_t)k * tr->ed_per);
    if (st != MSR_OK)
        msr_train_experts_drop(tr);
    return st;
}

void msr_train_experts_drop(msr_trainer_t *tr)
{
    msr_free(tr->ed_hold);
    tr->ed_hold = NULL;
}
