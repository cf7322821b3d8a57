/* Data parallel's work while forward and backward run (see dp.h): the
 * hooks the model calls, which reduce the gradient buckets as they
 * complete (packed, started and driven by tests of the oldest request) and,
 * under ZeRO-3, all-gather each segment's parameters just before it is
 * used and prefetch the next. */
#include <string.h>

#include "base/alloc.h"
#include "base/bf16.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "model/err_call.h"
#include "parallel/dp_impl.h"

/* ---- progress ---- */

/* Tests the oldest request in flight (one test drives the engine's
 * progress for every operation, so later ones move too) and finishes the
 * buckets whose reductions are done, freeing their buffers early. */
static msr_status_t progress(msr_dp_t *dp)
{
    if (dp->comm == NULL)
        return MSR_OK;
    for (int b = 0; b < dp->next_start; b++) {
        msr_dp_bucket_t *B = &dp->buckets[b];
        for (int k = 0; k < 2; k++) {
            if (B->req[k] == NULL)
                continue;
            msr_status_t st = msr_comm_test(&B->req[k]);
            if (st == MSR_IN_PROGRESS)
                return MSR_OK;
            if (st != MSR_OK)
                return msr_dp_comm_failed("reduction of bucket", b, st);
        }
        if (!B->finished) {
            msr_status_t st = msr_dp_bucket_finish(dp, b);
            if (st != MSR_OK)
                return st;
        }
    }
    for (int s = 0; s < dp->num_segs; s++) {
        msr_comm_req_t **req = &dp->segs[s].req;
        if (*req == NULL)
            continue;
        msr_status_t st = msr_comm_test(req);
        if (st == MSR_IN_PROGRESS)
            return MSR_OK;
        if (st != MSR_OK)
            return msr_dp_comm_failed("parameter gather of segment", s, st);
    }
    return MSR_OK;
}

/* ---- buckets ---- */

/* Bounds the packed bucket buffers alive at once (a rank ahead of its
 * peers would otherwise hold every bucket's until they catch up): while
 * MSR_DP_MAX_PACKED are, waits for the oldest started one and finishes it. */
static msr_status_t make_room(msr_dp_t *dp)
{
    for (;;) {
        int alive = 0, oldest = -1;
        for (int b = 0; b < dp->num_buckets; b++) {
            const msr_dp_bucket_t *B = &dp->buckets[b];
            if (B->packed == NULL)
                continue;
            alive++;
            if (oldest < 0 && B->started && !B->finished)
                oldest = b;
        }
        if (alive < MSR_DP_MAX_PACKED || oldest < 0)
            return MSR_OK;
        msr_dp_bucket_t *B = &dp->buckets[oldest];
        for (int k = 0; k < 2; k++) {
            if (B->req[k] == NULL)
                continue;
            msr_status_t st = msr_comm_wait(B->req[k]);
            B->req[k] = NULL;
            if (st != MSR_OK)
                return msr_dp_comm_failed("reduction of bucket", oldest, st);
        }
        msr_status_t st = msr_dp_bucket_finish(dp, oldest);
        if (st != MSR_OK)
            return st;
    }
}

/* Copies segment s's gradients into the packed buffers of its buckets (on
 * the device's stream: msr_dp_bucket_start waits for them). */
static msr_status_t pack_grads(msr_dp_t *dp, int s)
{
    msr_dp_seg_t *G = &dp->segs[s];
    size_t soff = dp->model->segments[s].offset;
    const float *base = dp->cfg.zero == 1 ? dp->model->grads + soff : G->grads;
    size_t size = (size_t)dp->size;
    msr_status_t st = MSR_OK;
    for (int k = G->u0; k < G->u1 && st == MSR_OK; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        msr_dp_bucket_t *B = &dp->buckets[u->bucket];
        if (B->packed == NULL) {
            if ((st = make_room(dp)) != MSR_OK)
                return st;
            if ((B->packed = msr_dp_tmp_alloc(dp, size * B->blk + B->rep, 0)) == NULL)
                return MSR_ERR_NO_MEMORY;
        }
        const float *src = base + (u->lo - soff);
        if (u->replicated) {
            st = msr_dp_copy(dp, B->packed + size * B->blk + u->bpack, src, u->n);
            continue;
        }
        for (int j = 0; j < dp->size && st == MSR_OK; j++) {
            size_t a, e;
            msr_dp_block_of(u, j, &a, &e);
            float *dst = B->packed + (size_t)j * B->blk + u->bpack;
            if ((st = msr_dp_copy(dp, dst, src + a, e - a)) == MSR_OK)
                st = msr_dp_zero(dp, dst + (e - a), u->blk - (e - a));
        }
    }
    return st;
}

/* Gradients reduced in bf16 (ZeRO 0): the bucket's gradients rounded into
 * its packed buffer (n bf16 in ceil(n/2) floats), allreduced there in
 * bf16, and widened back by msr_dp_bucket_finish. */
static size_t bf16_floats(const msr_dp_bucket_t *B)
{
    return (B->hi - B->lo + 1) / 2;
}

static msr_status_t bf16_start(msr_dp_t *dp, msr_dp_bucket_t *B)
{
    size_t n = B->hi - B->lo;
    msr_status_t st = make_room(dp);
    if (st != MSR_OK)
        return st;
    if ((B->packed = msr_dp_tmp_alloc(dp, bf16_floats(B), 0)) == NULL)
        return MSR_ERR_NO_MEMORY;
    uint16_t *h = (uint16_t *)(void *)B->packed;
    msr_bf16_from_f32_n(h, dp->model->grads + B->lo, n);
    return msr_comm_iallreduce(dp->comm, MSR_IN_PLACE, h, n, MSR_DTYPE_BF16, MSR_OP_SUM,
                               &B->req[0]);
}

msr_status_t msr_dp_bucket_start(msr_dp_t *dp, int b)
{
    msr_dp_bucket_t *B = &dp->buckets[b];
    B->started = 1;
    if (dp->comm == NULL)
        return MSR_OK; /* alone: every reduction is the identity */
    msr_status_t st = MSR_OK;
    if (dp->cfg.zero == 0 && dp->cfg.grad_bf16) {
        st = bf16_start(dp, B);
    } else if (dp->cfg.zero == 0) {
        /* the model's gradients, reduced where they are */
        st = msr_comm_iallreduce(dp->comm, MSR_IN_PLACE, dp->model->grads + B->lo, B->hi - B->lo,
                                 MSR_DTYPE_F32, MSR_OP_SUM, &B->req[0]);
    } else if ((st = msr_dp_sync(dp)) != MSR_OK) { /* the packing's copies */
        return st;
    } else {
        if (B->blk > 0)
            st =
                msr_comm_ireduce_scatter(dp->comm, B->packed, B->packed + (size_t)dp->rank * B->blk,
                                         B->blk, MSR_DTYPE_F32, MSR_OP_SUM, &B->req[0]);
        if (st == MSR_OK && B->rep > 0)
            st = msr_comm_iallreduce(dp->comm, MSR_IN_PLACE, B->packed + (size_t)dp->size * B->blk,
                                     B->rep, MSR_DTYPE_F32, MSR_OP_SUM, &B->req[1]);
    }
    return st != MSR_OK ? msr_dp_comm_failed("start of bucket", b, st) : MSR_OK;
}

/* Moves a reduced bucket's results into place and frees its buffer. */
msr_status_t msr_dp_bucket_finish(msr_dp_t *dp, int b)
{
    msr_dp_bucket_t *B = &dp->buckets[b];
    B->finished = 1;
    dp->stats.buckets++;
    if (dp->cfg.zero == 0 && dp->cfg.grad_bf16 && B->packed != NULL) {
        msr_f32_from_bf16_n(dp->model->grads + B->lo, (const uint16_t *)(void *)B->packed,
                            B->hi - B->lo);
        msr_dp_tmp_free(dp, &B->packed, bf16_floats(B));
    }
    if (dp->cfg.zero == 0)
        return MSR_OK;
    size_t size = (size_t)dp->size;
    msr_status_t st = MSR_OK;
    for (int k = B->u0; k < B->u1 && st == MSR_OK; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        const float *src = u->replicated ? B->packed + size * B->blk + u->bpack
                                         : B->packed + (size_t)dp->rank * B->blk + u->bpack;
        if (dp->grads_off != NULL) { /* into its file (dp_offload.c) */
            msr_dp_grads_put(dp, u, src);
            continue;
        }
        float *dst = msr_dp_grad_at(dp, u);
        if (dp->cfg.zero == 1 || dp->first_micro) {
            st = msr_dp_copy(dp, dst, src, u->own_n);
        } else {
            for (size_t i = 0; i < u->own_n; i++)
                dst[i] += src[i];
        }
    }
    /* the buffer is kept for reuse, and the shard read by the host next */
    msr_status_t sst = msr_dp_sync(dp);
    msr_dp_tmp_free(dp, &B->packed, size * B->blk + B->rep);
    return st != MSR_OK ? st : sst;
}

/* ---- ZeRO-3 gathers ---- */

static msr_status_t gather_start(msr_dp_t *dp, int s)
{
    msr_dp_seg_t *G = &dp->segs[s];
    if (G->replicated || G->full != NULL || G->gathering)
        return MSR_OK;
    size_t size = (size_t)dp->size, count = msr_dp_seg_count(dp, s);
    if (G->direct) {
        if ((G->full = msr_dp_tmp_alloc(dp, count, 0)) == NULL)
            return MSR_ERR_NO_MEMORY;
        G->gbuf = G->full;
    } else if ((G->gbuf = msr_dp_tmp_alloc(dp, size * G->blk, 0)) == NULL) {
        return MSR_ERR_NO_MEMORY;
    }
    const float *src;
    size_t soff;
    msr_status_t st = msr_dp_params_shard_begin(dp, s, &src, &soff);
    if (st != MSR_OK)
        return st;
    for (int k = G->u0; k < G->u1 && st == MSR_OK; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        float *dst = G->gbuf + (size_t)dp->rank * G->blk + u->spack;
        if ((st = msr_dp_copy(dp, dst, src + (u->shard_off - soff), u->own_n)) == MSR_OK)
            st = msr_dp_zero(dp, dst + u->own_n, u->blk - u->own_n);
    }
    /* the shard's source may be given back, and the communicator reads */
    msr_status_t sst = msr_dp_sync(dp);
    msr_status_t est = msr_dp_params_shard_end(dp, s);
    if ((st = st != MSR_OK ? st : sst != MSR_OK ? sst : est) != MSR_OK)
        return st;
    G->gathering = 1;
    dp->stats.gathers++;
    if (dp->comm == NULL)
        return MSR_OK;
    st = msr_comm_iallgather(dp->comm, MSR_IN_PLACE, G->gbuf, G->blk, MSR_DTYPE_F32, &G->req);
    return st != MSR_OK ? msr_dp_comm_failed("start of the parameter gather of segment", s, st)
                        : MSR_OK;
}

/* gather_start's buffer and msr_dp_seg_ready's (direct: one), allocated
 * as they are (the packed one live while the full one is taken) and given
 * back to the cache, where their next requests find them. */
msr_status_t msr_dp_gather_reserve(msr_dp_t *dp, int s)
{
    msr_dp_seg_t *G = &dp->segs[s];
    if (dp->cfg.zero < 3 || G->replicated || G->full != NULL || G->gathering)
        return MSR_OK;
    size_t count = msr_dp_seg_count(dp, s), packed = (size_t)dp->size * G->blk;
    float *gbuf = NULL, *full = NULL;
    if (!G->direct && (gbuf = msr_dp_tmp_alloc(dp, packed, 0)) == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_status_t st = (full = msr_dp_tmp_alloc(dp, count, 0)) == NULL ? MSR_ERR_NO_MEMORY : MSR_OK;
    msr_dp_tmp_free(dp, &full, count);
    msr_dp_tmp_free(dp, &gbuf, packed);
    return st;
}

/* Makes segment s's full parameters available and points the model at them. */
msr_status_t msr_dp_seg_ready(msr_dp_t *dp, int s)
{
    msr_dp_seg_t *G = &dp->segs[s];
    msr_gpt_segment_t *ms = &dp->model->segments[s];
    msr_status_t st;
    if (G->replicated)
        return msr_dp_params_replicated(dp, s, &ms->params);
    if (G->full == NULL || G->gathering) {
        if ((st = gather_start(dp, s)) != MSR_OK)
            return st;
        if (G->req != NULL) {
            uint64_t t0 = msr_now_ns();
            st = msr_comm_wait(G->req);
            G->req = NULL;
            dp->stats.gather_ns += msr_now_ns() - t0;
            if (st != MSR_OK)
                return msr_dp_comm_failed("parameter gather of segment", s, st);
        }
        if (!G->direct) {
            size_t soff = ms->offset, count = msr_dp_seg_count(dp, s);
            if ((G->full = msr_dp_tmp_alloc(dp, count, 0)) == NULL)
                return MSR_ERR_NO_MEMORY;
            st = MSR_OK;
            for (int k = G->u0; k < G->u1 && st == MSR_OK; k++) {
                const msr_dp_unit_t *u = &dp->units[k];
                for (int j = 0; j < dp->size && st == MSR_OK; j++) {
                    size_t a, e;
                    msr_dp_block_of(u, j, &a, &e);
                    st = msr_dp_copy(dp, G->full + (u->lo - soff) + a,
                                     G->gbuf + (size_t)j * G->blk + u->spack, e - a);
                }
            }
            /* the model reads the segment next; gbuf is kept for reuse */
            msr_status_t sst = msr_dp_sync(dp);
            msr_dp_tmp_free(dp, &G->gbuf, (size_t)dp->size * G->blk);
            if ((st = st != MSR_OK ? st : sst) != MSR_OK)
                return st;
        }
        G->gbuf = NULL;
        G->gathering = 0;
    }
    ms->params = G->full;
    return MSR_OK;
}

/* Frees segment s's gathered parameters (waiting for a gather in flight). */
msr_status_t msr_dp_seg_drop(msr_dp_t *dp, int s)
{
    msr_dp_seg_t *G = &dp->segs[s];
    msr_status_t st = MSR_OK;
    if (G->req != NULL) {
        st = msr_comm_wait(G->req);
        G->req = NULL;
    }
    if (dp->cfg.zero >= 3 && !G->replicated) {
        if (G->gbuf != NULL && G->gbuf != G->full)
            msr_dp_tmp_free(dp, &G->gbuf, (size_t)dp->size * G->blk);
        G->gbuf = NULL;
        msr_dp_tmp_free(dp, &G->full, msr_dp_seg_count(dp, s));
        dp->model->segments[s].params = NULL;
    } else if (dp->cfg.zero >= 3) { /* an offloaded block's buffer given back */
        msr_status_t pst = msr_dp_params_release(dp, s);
        st = st != MSR_OK ? st : pst;
    }
    G->gathering = 0;
    return st;
}

/* ---- hooks ---- */

msr_status_t msr_dp_hook_acquire(void *arg, msr_gpt_t *model, int s, msr_gpt_pass_t pass)
{
    msr_dp_t *dp = arg;
    msr_status_t st = progress(dp);
    if (st == MSR_OK)
        st = msr_dp_params_acquire(dp, s, pass);
    if (st != MSR_OK)
        return st;
    if (dp->cfg.zero >= 3 && dp->any_order) {
        if ((st = msr_dp_seg_ready(dp, s)) != MSR_OK)
            return st;
    } else if (dp->cfg.zero >= 3) {
        if (dp->vi >= dp->num_visits || dp->visits[dp->vi] != s) {
            return msr_err(MSR_ERR_STATE,
                           "dp: segment %d acquired at visit %d, out of the order ZeRO-3 expects",
                           s, dp->vi);
        }
        if ((st = msr_dp_seg_ready(dp, s)) != MSR_OK)
            return st;
        int next = dp->vi + 1 < dp->num_visits ? dp->visits[dp->vi + 1] : -1;
        if (next >= 0 && next != s && (st = gather_start(dp, next)) != MSR_OK)
            return st;
    }
    if (dp->cfg.zero >= 2 && pass == MSR_GPT_BACKWARD && dp->segs[s].grads == NULL) {
        if ((dp->segs[s].grads = msr_dp_tmp_alloc(dp, msr_dp_seg_count(dp, s), 1)) == NULL)
            return MSR_ERR_NO_MEMORY;
        model->segments[s].grads = dp->segs[s].grads;
    }
    return dp->extra.acquire != NULL ? dp->extra.acquire(dp->extra.arg, s, pass) : MSR_OK;
}

msr_status_t msr_dp_extra_ahead(msr_dp_t *dp, int s, int dir)
{
    return dp->extra.ahead != NULL ? dp->extra.ahead(dp->extra.arg, s, dir) : MSR_OK;
}

msr_status_t msr_dp_hook_release(void *arg, msr_gpt_t *model, int s, msr_gpt_pass_t pass)
{
    (void)model;
    msr_dp_t *dp = arg;
    if (dp->extra.release != NULL) {
        msr_status_t xst = dp->extra.release(dp->extra.arg, s, pass);
        if (xst != MSR_OK)
            return xst;
    }
    msr_status_t pst = msr_dp_params_release(dp, s);
    if (pst != MSR_OK)
        return pst;
    if (dp->cfg.zero >= 3 && dp->any_order) {
        msr_status_t st = msr_dp_seg_drop(dp, s);
        if (st != MSR_OK)
            return msr_dp_comm_failed("parameter gather of segment", s, st);
    } else if (dp->cfg.zero >= 3) {
        dp->vi++;
        /* kept when the next visit is the same segment (the head: the end
         * of forward and the start of backward) */
        if (!(dp->vi < dp->num_visits && dp->visits[dp->vi] == s)) {
            msr_status_t st = msr_dp_seg_drop(dp, s);
            if (st != MSR_OK)
                return msr_dp_comm_failed("parameter gather of segment", s, st);
        }
    }
    return progress(dp);
}

msr_status_t msr_dp_hook_grads_ready(void *arg, msr_gpt_t *model, int s)
{
    msr_dp_t *dp = arg;
    msr_status_t st;
    if (dp->reduce_now) {
        if (dp->cfg.zero >= 1 && (st = pack_grads(dp, s)) != MSR_OK)
            return st;
        if (dp->cfg.zero >= 2) {
            msr_dp_tmp_free(dp, &dp->segs[s].grads, msr_dp_seg_count(dp, s));
            model->segments[s].grads = NULL;
        }
        /* ready segments are a tail: bucket b is complete once its lowest
         * segment is; buckets complete in index order */
        while (dp->cfg.overlap && dp->next_start < dp->num_buckets &&
               dp->buckets[dp->next_start].low_seg >= s) {
            if ((st = msr_dp_bucket_start(dp, dp->next_start)) != MSR_OK)
                return st;
            dp->next_start++;
        }
    }
    return progress(dp);
}

msr_status_t msr_dp_hook_poll(void *arg, msr_gpt_t *model)
{
    (void)model;
    return progress(arg);
}
