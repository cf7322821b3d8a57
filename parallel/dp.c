/* Data parallel and ZeRO: buckets, shards, the hooks and the step's end
 * (see dp.h). */
#include "parallel/dp.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "model/err_call.h"

#define COVER_PARAMS  1u
#define COVER_MOMENTS 2u

unsigned msr_dp_model_flags(int zero)
{
    if (zero >= 3)
        return MSR_GPT_NO_PARAMS | MSR_GPT_NO_GRADS;
    return zero == 2 ? MSR_GPT_NO_GRADS : 0u;
}

/* ---- temporary buffers, counted ---- */

/* Page-backed (base/alloc.h): ZeRO-2/3 allocate segments' gradients,
 * buckets and gathers of several sizes every micro-batch; from malloc's
 * heap their freed pages would stay resident past the peak counted. A
 * freed one is kept and serves the next request it fits with little to
 * spare, so that a step's requests find their buffers again and fault no
 * page in after the first step. Both counts, the live (transient) and
 * the kept, are of the bytes asked for, so that what the model counts
 * bounds them (a buffer's own size is a page or an eighth more at most). */
static void tmp_evict(msr_dp_t *dp, int i)
{
    dp->cached_bytes -= dp->cache[i].n;
    msr_pages_free(dp->cache[i].p);
    dp->cache[i] = dp->cache[--dp->cached];
}

static float *tmp_alloc(msr_dp_t *dp, size_t n, int zeroed)
{
    size_t bytes = (n > 0 ? n : 1) * sizeof(float);
    float *p = NULL;
    int best = -1;
    for (int i = 0; i < dp->cached; i++) {
        size_t cap = msr_pages_size(dp->cache[i].p);
        if (cap >= bytes && cap - bytes <= bytes / 8 + 4096 &&
            (best < 0 || cap < msr_pages_size(dp->cache[best].p)))
            best = i;
    }
    if (best >= 0) {
        p = dp->cache[best].p;
        dp->cached_bytes -= dp->cache[best].n;
        dp->cache[best] = dp->cache[--dp->cached];
        if (zeroed)
            memset(p, 0, bytes);
    } else {
        /* the kept and the live together stay within the peak so far and
         * a quarter: ZeRO-3's gathers and gradients need buffers of the
         * same sizes in changing company, and within the peak alone a
         * step evicted what it then faulted in again (ZeRO-3 on 4 ranks
         * 15% slower) */
        size_t limit = MSR_MAX(dp->transient_peak, dp->transient + bytes);
        while (dp->cached > 0 && dp->cached_bytes + dp->transient + bytes > limit + limit / 4)
            tmp_evict(dp, dp->cached - 1);
        p = msr_pages_alloc(bytes);
    }
    if (p == NULL) {
        msr_err_set("dp: out of memory for a temporary buffer of %zu floats", n);
        return NULL;
    }
    dp->transient += n * sizeof(float);
    if (dp->transient > dp->transient_peak)
        dp->transient_peak = dp->transient;
    return p;
}

static void tmp_free(msr_dp_t *dp, float **p, size_t n)
{
    if (*p == NULL)
        return;
    /* every step allocates its buckets again (ZeRO-2/3 every micro-batch,
     * with the segments' gradients) */
    if (dp->cached < MSR_DP_TMP_CACHE) {
        dp->cache[dp->cached].p = *p;
        dp->cache[dp->cached++].n = n * sizeof(float);
        dp->cached_bytes += n * sizeof(float);
    } else {
        msr_pages_free(*p);
    }
    *p = NULL;
    dp->transient -= n * sizeof(float);
}

/* The communicator's failure st, with what failed in front of its text. */
static msr_status_t comm_failed(const char *what, int index, msr_status_t st)
{
    return msr_err_call(st, "dp: %s %d", what, index);
}

/* Elements [a, e) of a sharded unit that belong to rank j's block. */
static void block_of(const msr_dp_unit_t *u, int j, size_t *a_p, size_t *e_p)
{
    uint64_t a, e;
    msr_layout_block_of(u->n, u->blk, j, &a, &e);
    *a_p = (size_t)a;
    *e_p = (size_t)e;
}

/* ---- layout ---- */

static size_t seg_count(const msr_dp_t *dp, int s)
{
    return dp->model->segments[s].count;
}

/* The elements of segment s of the model (arg), for the unit walk. */
static uint64_t model_seg_count(const void *arg, int s)
{
    return ((const msr_gpt_t *)arg)->segments[s].count;
}

/* Units: the flat buffer cut at every segment and bucket boundary, in
 * flat order (layout/layout.h's walk); each one's owner (this rank's block
 * of a sharded unit, all of a replicated one) and its place in the shard
 * space. */
static void cut_units(msr_dp_t *dp)
{
    msr_gpt_t *m = dp->model;
    msr_layout_units_t it;
    msr_layout_unit_t lu;
    msr_layout_units_init(&it, m->num_params, m->num_segments, model_seg_count, m, dp->size,
                          dp->cfg.bucket_bytes, dp->cfg.first_bucket_bytes, dp->cfg.zero_min_bytes);
    int nu = 0;
    size_t S = 0, rep = 0;
    while (msr_layout_units_next(&it, 0, &lu)) {
        msr_dp_unit_t *u = &dp->units[nu++];
        uint64_t a, e;
        msr_layout_unit_own(&lu, dp->rank, &a, &e);
        u->lo = (size_t)lu.lo;
        u->n = (size_t)lu.n;
        u->seg = lu.seg;
        u->bucket = (int)lu.bucket;
        u->replicated = lu.replicated;
        u->blk = (size_t)lu.blk;
        u->own_lo = u->lo + (size_t)a;
        u->own_n = (size_t)(e - a);
        u->shard_off = S;
        S += u->own_n;
        rep += u->replicated ? u->n : 0;
    }
    dp->num_units = nu;
    dp->shard_count = S;
    dp->rep_count = rep;
}

/* Each bucket's and segment's units, and where they pack. */
static void pack_units(msr_dp_t *dp)
{
    for (int k = 0; k < dp->num_buckets; k++)
        dp->buckets[k].u0 = -1;
    for (int k = 0; k < dp->num_segs; k++)
        dp->segs[k].u0 = -1;
    for (int k = 0; k < dp->num_units; k++) {
        msr_dp_unit_t *u = &dp->units[k];
        msr_dp_bucket_t *B = &dp->buckets[u->bucket];
        msr_dp_seg_t *G = &dp->segs[u->seg];
        if (B->u0 < 0)
            B->u0 = k;
        B->u1 = k + 1;
        if (G->u0 < 0)
            G->u0 = k;
        G->u1 = k + 1;
        if (u->replicated) {
            u->bpack = B->rep;
            B->rep += u->n;
            G->replicated = 1;
        } else {
            u->bpack = B->blk;
            B->blk += u->blk;
            u->spack = G->blk;
            G->blk += u->blk;
        }
    }
    for (int k = 0; k < dp->num_buckets; k++)
        dp->buckets[k].low_seg = dp->units[dp->buckets[k].u0].seg;
    for (int k = 0; k < dp->num_segs; k++) {
        msr_dp_seg_t *G = &dp->segs[k];
        G->direct =
            !G->replicated && G->u1 - G->u0 == 1 && dp->units[G->u0].n % (size_t)dp->size == 0;
    }
}

/* The buckets, units, segments and ZeRO-3 visits over the model's flat
 * buffer (dp.h). */
static msr_status_t build_layout(msr_dp_t *dp)
{
    msr_gpt_t *m = dp->model;
    size_t P = m->num_params;
    uint64_t bb, fb;
    msr_layout_bucket_elems(dp->cfg.bucket_bytes, dp->cfg.first_bucket_bytes, &bb, &fb);

    /* buckets, cut from the end (layout/layout.h) */
    int nb = (int)msr_layout_num_buckets(P, fb, bb);
    dp->num_segs = m->num_segments;
    dp->buckets = msr_calloc((size_t)nb, sizeof *dp->buckets);
    dp->units = msr_calloc((size_t)nb + (size_t)dp->num_segs, sizeof *dp->units);
    dp->segs = msr_calloc((size_t)dp->num_segs, sizeof *dp->segs);
    dp->visits = msr_calloc((size_t)MSR_LAYOUT_ZERO3_VISITS(m->cfg.layers), sizeof *dp->visits);
    if (dp->buckets == NULL || dp->units == NULL || dp->segs == NULL || dp->visits == NULL)
        return MSR_ERR_NO_MEMORY;
    dp->num_buckets = nb;
    for (int b = 0; b < nb; b++) {
        uint64_t lo, hi;
        msr_layout_bucket_range(P, fb, bb, (uint64_t)b, &lo, &hi);
        dp->buckets[b].lo = (size_t)lo;
        dp->buckets[b].hi = (size_t)hi;
    }

    cut_units(dp);
    pack_units(dp);
    msr_layout_zero3_visits(m->cfg.layers, dp->visits); /* the order of acquires */
    dp->num_visits = MSR_LAYOUT_ZERO3_VISITS(m->cfg.layers);
    return MSR_OK;
}

/* Where a unit's owned parameters and gradients are. */
static float *param_at(const msr_dp_t *dp, const msr_dp_unit_t *u)
{
    return dp->cfg.zero >= 3 ? dp->pshard + u->shard_off : dp->model->params + u->own_lo;
}

static float *grad_at(const msr_dp_t *dp, const msr_dp_unit_t *u)
{
    return dp->cfg.zero >= 2 ? dp->gshard + u->shard_off : dp->model->grads + u->own_lo;
}

/* Where a unit's owned moments start in the optimizer (flat in stage 0). */
static size_t moment_off(const msr_dp_t *dp, const msr_dp_unit_t *u)
{
    return dp->cfg.zero == 0 ? u->own_lo : u->shard_off;
}

/* ---- progress ---- */

static void bucket_finish(msr_dp_t *dp, int b);

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
                return comm_failed("reduction of bucket", b, st);
        }
        if (!B->finished)
            bucket_finish(dp, b);
    }
    for (int s = 0; s < dp->num_segs; s++) {
        msr_comm_req_t **req = &dp->segs[s].req;
        if (*req == NULL)
            continue;
        msr_status_t st = msr_comm_test(req);
        if (st == MSR_IN_PROGRESS)
            return MSR_OK;
        if (st != MSR_OK)
            return comm_failed("parameter gather of segment", s, st);
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
                return comm_failed("reduction of bucket", oldest, st);
        }
        bucket_finish(dp, oldest);
    }
}

/* Copies segment s's gradients into the packed buffers of its buckets. */
static msr_status_t pack_grads(msr_dp_t *dp, int s)
{
    msr_dp_seg_t *G = &dp->segs[s];
    size_t soff = dp->model->segments[s].offset;
    const float *base = dp->cfg.zero == 1 ? dp->model->grads + soff : G->grads;
    size_t size = (size_t)dp->size;
    for (int k = G->u0; k < G->u1; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        msr_dp_bucket_t *B = &dp->buckets[u->bucket];
        if (B->packed == NULL) {
            msr_status_t st = make_room(dp);
            if (st != MSR_OK)
                return st;
            if ((B->packed = tmp_alloc(dp, size * B->blk + B->rep, 0)) == NULL)
                return MSR_ERR_NO_MEMORY;
        }
        const float *src = base + (u->lo - soff);
        if (u->replicated) {
            memcpy(B->packed + size * B->blk + u->bpack, src, u->n * sizeof(float));
            continue;
        }
        for (int j = 0; j < dp->size; j++) {
            size_t a, e;
            block_of(u, j, &a, &e);
            float *dst = B->packed + (size_t)j * B->blk + u->bpack;
            memcpy(dst, src + a, (e - a) * sizeof(float));
            memset(dst + (e - a), 0, (u->blk - (e - a)) * sizeof(float));
        }
    }
    return MSR_OK;
}

static msr_status_t bucket_start(msr_dp_t *dp, int b)
{
    msr_dp_bucket_t *B = &dp->buckets[b];
    B->started = 1;
    if (dp->comm == NULL)
        return MSR_OK; /* alone: every reduction is the identity */
    msr_status_t st = MSR_OK;
    if (dp->cfg.zero == 0) {
        st = msr_comm_iallreduce(dp->comm, MSR_IN_PLACE, dp->model->grads + B->lo, B->hi - B->lo,
                                 MSR_DTYPE_F32, MSR_OP_SUM, &B->req[0]);
    } else {
        if (B->blk > 0)
            st =
                msr_comm_ireduce_scatter(dp->comm, B->packed, B->packed + (size_t)dp->rank * B->blk,
                                         B->blk, MSR_DTYPE_F32, MSR_OP_SUM, &B->req[0]);
        if (st == MSR_OK && B->rep > 0)
            st = msr_comm_iallreduce(dp->comm, MSR_IN_PLACE, B->packed + (size_t)dp->size * B->blk,
                                     B->rep, MSR_DTYPE_F32, MSR_OP_SUM, &B->req[1]);
    }
    return st != MSR_OK ? comm_failed("start of bucket", b, st) : MSR_OK;
}

/* Moves a reduced bucket's results into place and frees its buffer. */
static void bucket_finish(msr_dp_t *dp, int b)
{
    msr_dp_bucket_t *B = &dp->buckets[b];
    B->finished = 1;
    dp->stats.buckets++;
    if (dp->cfg.zero == 0)
        return;
    size_t size = (size_t)dp->size;
    for (int k = B->u0; k < B->u1; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        const float *src = u->replicated ? B->packed + size * B->blk + u->bpack
                                         : B->packed + (size_t)dp->rank * B->blk + u->bpack;
        float *dst = grad_at(dp, u);
        if (dp->cfg.zero == 1 || dp->first_micro) {
            memcpy(dst, src, u->own_n * sizeof(float));
        } else {
            for (size_t i = 0; i < u->own_n; i++)
                dst[i] += src[i];
        }
    }
    tmp_free(dp, &B->packed, size * B->blk + B->rep);
}

/* ---- ZeRO-3 gathers ---- */

static msr_status_t gather_start(msr_dp_t *dp, int s)
{
    msr_dp_seg_t *G = &dp->segs[s];
    if (G->replicated || G->full != NULL || G->gathering)
        return MSR_OK;
    size_t size = (size_t)dp->size, count = seg_count(dp, s);
    if (G->direct) {
        if ((G->full = tmp_alloc(dp, count, 0)) == NULL)
            return MSR_ERR_NO_MEMORY;
        G->gbuf = G->full;
    } else if ((G->gbuf = tmp_alloc(dp, size * G->blk, 0)) == NULL) {
        return MSR_ERR_NO_MEMORY;
    }
    for (int k = G->u0; k < G->u1; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        float *dst = G->gbuf + (size_t)dp->rank * G->blk + u->spack;
        memcpy(dst, dp->pshard + u->shard_off, u->own_n * sizeof(float));
        memset(dst + u->own_n, 0, (u->blk - u->own_n) * sizeof(float));
    }
    G->gathering = 1;
    if (dp->comm == NULL)
        return MSR_OK;
    msr_status_t st =
        msr_comm_iallgather(dp->comm, MSR_IN_PLACE, G->gbuf, G->blk, MSR_DTYPE_F32, &G->req);
    return st != MSR_OK ? comm_failed("start of the parameter gather of segment", s, st) : MSR_OK;
}

/* Makes segment s's full parameters available and points the model at them. */
static msr_status_t seg_ready(msr_dp_t *dp, int s)
{
    msr_dp_seg_t *G = &dp->segs[s];
    msr_gpt_segment_t *ms = &dp->model->segments[s];
    if (G->replicated) {
        ms->params = dp->pshard + dp->units[G->u0].shard_off;
        return MSR_OK;
    }
    msr_status_t st;
    if (G->full == NULL || G->gathering) {
        if ((st = gather_start(dp, s)) != MSR_OK)
            return st;
        if (G->req != NULL) {
            uint64_t t0 = msr_now_ns();
            st = msr_comm_wait(G->req);
            G->req = NULL;
            dp->stats.gather_ns += msr_now_ns() - t0;
            if (st != MSR_OK)
                return comm_failed("parameter gather of segment", s, st);
        }
        if (!G->direct) {
            size_t soff = ms->offset, count = seg_count(dp, s);
            if ((G->full = tmp_alloc(dp, count, 0)) == NULL)
                return MSR_ERR_NO_MEMORY;
            for (int k = G->u0; k < G->u1; k++) {
                const msr_dp_unit_t *u = &dp->units[k];
                for (int j = 0; j < dp->size; j++) {
                    size_t a, e;
                    block_of(u, j, &a, &e);
                    memcpy(G->full + (u->lo - soff) + a, G->gbuf + (size_t)j * G->blk + u->spack,
                           (e - a) * sizeof(float));
                }
            }
            tmp_free(dp, &G->gbuf, (size_t)dp->size * G->blk);
        }
        G->gbuf = NULL;
        G->gathering = 0;
    }
    ms->params = G->full;
    return MSR_OK;
}

/* Frees segment s's gathered parameters (waiting for a gather in flight). */
static msr_status_t seg_drop(msr_dp_t *dp, int s)
{
    msr_dp_seg_t *G = &dp->segs[s];
    msr_status_t st = MSR_OK;
    if (G->req != NULL) {
        st = msr_comm_wait(G->req);
        G->req = NULL;
    }
    if (dp->cfg.zero >= 3 && !G->replicated) {
        if (G->gbuf != NULL && G->gbuf != G->full)
            tmp_free(dp, &G->gbuf, (size_t)dp->size * G->blk);
        G->gbuf = NULL;
        tmp_free(dp, &G->full, seg_count(dp, s));
        dp->model->segments[s].params = NULL;
    }
    G->gathering = 0;
    return st;
}

/* ---- hooks ---- */

static msr_status_t hook_acquire(void *arg, msr_gpt_t *model, int s, msr_gpt_pass_t pass)
{
    msr_dp_t *dp = arg;
    msr_status_t st = progress(dp);
    if (st != MSR_OK)
        return st;
    if (dp->cfg.zero >= 3) {
        if (dp->vi >= dp->num_visits || dp->visits[dp->vi] != s) {
            return msr_err(MSR_ERR_STATE,
                           "dp: segment %d acquired at visit %d, out of the order ZeRO-3 expects",
                           s, dp->vi);
        }
        if ((st = seg_ready(dp, s)) != MSR_OK)
            return st;
        int next = dp->vi + 1 < dp->num_visits ? dp->visits[dp->vi + 1] : -1;
        if (next >= 0 && next != s && (st = gather_start(dp, next)) != MSR_OK)
            return st;
    }
    if (dp->cfg.zero >= 2 && pass == MSR_GPT_BACKWARD && dp->segs[s].grads == NULL) {
        if ((dp->segs[s].grads = tmp_alloc(dp, seg_count(dp, s), 1)) == NULL)
            return MSR_ERR_NO_MEMORY;
        model->segments[s].grads = dp->segs[s].grads;
    }
    return MSR_OK;
}

static msr_status_t hook_release(void *arg, msr_gpt_t *model, int s, msr_gpt_pass_t pass)
{
    (void)model;
    (void)pass;
    msr_dp_t *dp = arg;
    if (dp->cfg.zero >= 3) {
        dp->vi++;
        /* kept when the next visit is the same segment (the head: the end
         * of forward and the start of backward) */
        if (!(dp->vi < dp->num_visits && dp->visits[dp->vi] == s)) {
            msr_status_t st = seg_drop(dp, s);
            if (st != MSR_OK)
                return comm_failed("parameter gather of segment", s, st);
        }
    }
    return progress(dp);
}

static msr_status_t hook_grads_ready(void *arg, msr_gpt_t *model, int s)
{
    msr_dp_t *dp = arg;
    msr_status_t st;
    if (dp->reduce_now) {
        if (dp->cfg.zero >= 1 && (st = pack_grads(dp, s)) != MSR_OK)
            return st;
        if (dp->cfg.zero >= 2) {
            tmp_free(dp, &dp->segs[s].grads, seg_count(dp, s));
            model->segments[s].grads = NULL;
        }
        /* ready segments are a tail: bucket b is complete once its lowest
         * segment is; buckets complete in index order */
        while (dp->cfg.overlap && dp->next_start < dp->num_buckets &&
               dp->buckets[dp->next_start].low_seg >= s) {
            if ((st = bucket_start(dp, dp->next_start)) != MSR_OK)
                return st;
            dp->next_start++;
        }
    }
    return progress(dp);
}

static msr_status_t hook_poll(void *arg, msr_gpt_t *model)
{
    (void)model;
    return progress(arg);
}

/* ---- create / destroy ---- */

msr_status_t msr_dp_create(const msr_dp_config_t *cfg, msr_comm_t *comm, msr_gpt_t *model,
                           const msr_adamw_config_t *adamw, uint64_t seed, msr_dp_t **dp_p)
{
    if (cfg->zero < 0 || cfg->zero > 3 || cfg->bucket_bytes < sizeof(float)) {
        return msr_err(MSR_ERR_CONFIG,
                       "dp: ZeRO stage %d (0..3) or bucket of %zu bytes (>= 4) out of range",
                       cfg->zero, cfg->bucket_bytes);
    }
    unsigned have = (model->params == NULL ? MSR_GPT_NO_PARAMS : 0u) |
                    (model->grads == NULL ? MSR_GPT_NO_GRADS : 0u);
    if (have != msr_dp_model_flags(cfg->zero)) {
        return msr_err(MSR_ERR_CONFIG, "dp: ZeRO stage %d needs a model made with flags %u, not %u",
                       cfg->zero, msr_dp_model_flags(cfg->zero), have);
    }
    msr_status_t st = MSR_ERR_NO_MEMORY;
    msr_dp_t *dp = msr_calloc(1, sizeof *dp);
    if (dp == NULL)
        goto err_no_memory;
    dp->cfg = *cfg;
    dp->comm = comm;
    dp->rank = comm != NULL ? msr_comm_rank(comm) : 0;
    dp->size = comm != NULL ? msr_comm_size(comm) : 1;
    dp->model = model;
    if ((st = build_layout(dp)) != MSR_OK)
        goto err_free;

    size_t P = model->num_params;
    if (cfg->zero == 0) {
        st = msr_adamw_create(adamw, model->tensors, model->num_tensors, 0, P, &dp->opt);
    } else {
        msr_adamw_range_t *ranges = msr_calloc((size_t)dp->num_units, sizeof *ranges);
        if (ranges == NULL) {
            st = MSR_ERR_NO_MEMORY;
            goto err_free;
        }
        int nr = 0;
        for (int k = 0; k < dp->num_units; k++)
            if (dp->units[k].own_n > 0)
                ranges[nr++] = (msr_adamw_range_t){dp->units[k].own_lo,
                                                   dp->units[k].own_lo + dp->units[k].own_n};
        st = msr_adamw_create_ranges(adamw, model->tensors, model->num_tensors, ranges, nr,
                                     &dp->opt);
        msr_free(ranges);
    }
    if (st != MSR_OK)
        goto err_free;
    st = MSR_ERR_NO_MEMORY;
    if (cfg->zero >= 2 && (dp->gshard = msr_calloc(dp->shard_count + 1, sizeof(float))) == NULL)
        goto err_free;
    if (cfg->zero >= 3) {
        if ((dp->pshard = msr_calloc(dp->shard_count + 1, sizeof(float))) == NULL)
            goto err_free;
        for (int k = 0; k < dp->num_units; k++) {
            const msr_dp_unit_t *u = &dp->units[k];
            msr_gpt_init_range(model, seed, u->own_lo, u->own_lo + u->own_n,
                               dp->pshard + u->shard_off);
        }
    } else {
        msr_gpt_init_params(model, seed);
    }
    dp->hooks = (msr_gpt_hooks_t){dp, hook_acquire, hook_release, hook_grads_ready, hook_poll};
    *dp_p = dp;
    return MSR_OK;

err_free:
    msr_dp_destroy(dp);
    if (st != MSR_ERR_NO_MEMORY)
        return st;
err_no_memory:
    return msr_err(MSR_ERR_NO_MEMORY, "dp: out of memory laying out %zu parameters",
                   model->num_params);
}

/* Waits for whatever is in flight and frees every temporary buffer. */
static msr_status_t drain(msr_dp_t *dp)
{
    msr_status_t first = MSR_OK;
    for (int b = 0; b < dp->num_buckets; b++) {
        msr_dp_bucket_t *B = &dp->buckets[b];
        for (int k = 0; k < 2; k++) {
            if (B->req[k] != NULL) {
                msr_status_t st = msr_comm_wait(B->req[k]);
                B->req[k] = NULL;
                if (first == MSR_OK)
                    first = st;
            }
        }
        tmp_free(dp, &B->packed, (size_t)dp->size * B->blk + B->rep);
    }
    for (int s = 0; s < dp->num_segs; s++) {
        msr_status_t st = seg_drop(dp, s);
        if (first == MSR_OK)
            first = st;
        tmp_free(dp, &dp->segs[s].grads, seg_count(dp, s));
        if (dp->cfg.zero >= 2)
            dp->model->segments[s].grads = NULL;
    }
    return first;
}

void msr_dp_destroy(msr_dp_t *dp)
{
    if (dp == NULL)
        return;
    if (dp->buckets != NULL && dp->segs != NULL)
        drain(dp);
    while (dp->cached > 0)
        tmp_evict(dp, dp->cached - 1);
    msr_free(dp->cover);
    msr_adamw_destroy(dp->opt);
    msr_free(dp->gshard);
    msr_free(dp->pshard);
    msr_free(dp->visits);
    msr_free(dp->segs);
    msr_free(dp->units);
    msr_free(dp->buckets);
    msr_free(dp);
}

const msr_gpt_hooks_t *msr_dp_hooks(msr_dp_t *dp)
{
    return &dp->hooks;
}

/* ---- the step ---- */

msr_status_t msr_dp_micro_begin(msr_dp_t *dp, int first, int last)
{
    dp->first_micro = first;
    dp->reduce_now = dp->cfg.zero >= 2 || last;
    dp->next_start = 0;
    dp->vi = 0;
    for (int b = 0; b < dp->num_buckets; b++)
        dp->buckets[b].started = dp->buckets[b].finished = 0;
    if (first && dp->cfg.zero <= 1)
        msr_gpt_zero_grad(dp->model);
    return MSR_OK;
}

msr_status_t msr_dp_micro_end(msr_dp_t *dp)
{
    msr_status_t st = MSR_OK;
    if (dp->reduce_now) {
        uint64_t t0 = msr_now_ns();
        while (st == MSR_OK && dp->next_start < dp->num_buckets) {
            st = bucket_start(dp, dp->next_start);
            dp->next_start++;
        }
        for (int b = 0; b < dp->num_buckets && st == MSR_OK; b++) {
            msr_dp_bucket_t *B = &dp->buckets[b];
            for (int k = 0; k < 2 && st == MSR_OK; k++) {
                if (B->req[k] == NULL)
                    continue;
                st = msr_comm_wait(B->req[k]);
                B->req[k] = NULL;
                if (st != MSR_OK)
                    comm_failed("reduction of bucket", b, st);
            }
            if (st == MSR_OK && !B->finished)
                bucket_finish(dp, b);
        }
        uint64_t waited = msr_now_ns() - t0;
        dp->stats.wait_ns += waited;
        /* the last rank to finish backward waits only for what its
         * communication still had to do: the exposed part */
        double w[1] = {(double)waited};
        if (st == MSR_OK && dp->cfg.measure && dp->comm != NULL) {
            st = msr_comm_allreduce(dp->comm, MSR_IN_PLACE, w, 1, MSR_DTYPE_F64, MSR_OP_MIN);
            if (st != MSR_OK)
                comm_failed("allreduce of the wait times, rank", dp->rank, st);
        }
        dp->stats.exposed_ns += (uint64_t)w[0];
    }
    /* ZeRO-3 frees every segment as its last visit ends; this catches a
     * pass cut short */
    msr_status_t dst = drain(dp);
    if (st == MSR_OK && dst != MSR_OK)
        return comm_failed("wait for the requests in flight, rank", dp->rank, dst);
    return st;
}

/* Gathers the sharded units of arr (a flat-indexed array: the parameters,
 * or stage 0's moments) from their owners, bucket by bucket, two in flight. */
static msr_status_t allgather_flat(msr_dp_t *dp, float *arr)
{
    if (dp->comm == NULL || dp->size == 1)
        return MSR_OK;
    size_t size = (size_t)dp->size;
    msr_status_t st = MSR_OK;
    int prev = -1;
    for (int b = 0; b <= dp->num_buckets; b++) {
        if (b < dp->num_buckets && st == MSR_OK && dp->buckets[b].blk > 0) {
            msr_dp_bucket_t *B = &dp->buckets[b];
            if ((B->packed = tmp_alloc(dp, size * B->blk, 0)) == NULL) {
                st = MSR_ERR_NO_MEMORY;
            } else {
                for (int k = B->u0; k < B->u1; k++) {
                    const msr_dp_unit_t *u = &dp->units[k];
                    if (u->replicated)
                        continue;
                    float *dst = B->packed + (size_t)dp->rank * B->blk + u->bpack;
                    memcpy(dst, arr + u->own_lo, u->own_n * sizeof(float));
                    memset(dst + u->own_n, 0, (u->blk - u->own_n) * sizeof(float));
                }
                st = msr_comm_iallgather(dp->comm, MSR_IN_PLACE, B->packed, B->blk, MSR_DTYPE_F32,
                                         &B->req[0]);
                if (st != MSR_OK)
                    comm_failed("start of the parameter allgather of bucket", b, st);
            }
            if (st != MSR_OK)
                tmp_free(dp, &B->packed, size * B->blk);
        }
        if (prev >= 0) { /* finish the one before */
            msr_dp_bucket_t *B = &dp->buckets[prev];
            msr_status_t wst = msr_comm_wait(B->req[0]);
            B->req[0] = NULL;
            if (wst != MSR_OK && st == MSR_OK)
                st = comm_failed("parameter allgather of bucket", prev, wst);
            for (int k = B->u0; k < B->u1 && st == MSR_OK; k++) {
                const msr_dp_unit_t *u = &dp->units[k];
                if (u->replicated)
                    continue;
                for (int j = 0; j < dp->size; j++) {
                    size_t a, e;
                    block_of(u, j, &a, &e);
                    if (j != dp->rank)
                        memcpy(arr + u->lo + a, B->packed + (size_t)j * B->blk + u->bpack,
                               (e - a) * sizeof(float));
                }
            }
            tmp_free(dp, &B->packed, size * B->blk);
            prev = -1;
        }
        if (b < dp->num_buckets && dp->buckets[b].req[0] != NULL)
            prev = b;
    }
    return st;
}

msr_status_t msr_dp_reduce_all(msr_dp_t *dp)
{
    dp->reduce_now = 1;
    dp->first_micro = 1;
    dp->next_start = 0;
    for (int b = 0; b < dp->num_buckets; b++)
        dp->buckets[b].started = dp->buckets[b].finished = 0;
    msr_status_t st = MSR_OK;
    for (int s = dp->num_segs - 1; s >= 0 && st == MSR_OK; s--) {
        /* a segment backward never touched has a zero gradient */
        if (dp->cfg.zero >= 2 && dp->segs[s].grads == NULL) {
            if ((dp->segs[s].grads = tmp_alloc(dp, seg_count(dp, s), 1)) == NULL) {
                st = MSR_ERR_NO_MEMORY;
                break;
            }
            dp->model->segments[s].grads = dp->segs[s].grads;
        }
        st = hook_grads_ready(dp, dp->model, s);
    }
    if (st != MSR_OK) {
        /* buckets whose packing failed must not be finished: only wait for
         * what is in flight and free the temporaries */
        (void)drain(dp);
        return st;
    }
    return msr_dp_micro_end(dp);
}

void msr_dp_set_model_parallel(msr_dp_t *dp, msr_comm_t *tp_comm, int tp_rank, msr_comm_t *pp_comm)
{
    dp->mp_comm[0] = tp_comm;
    dp->mp_comm[1] = pp_comm;
    dp->tp_rank = tp_rank;
}

/* The squared norm of a unit's owned gradient; on tensor-parallel ranks
 * other than 0 without the tp-replicated tensors (rank 0 counts them). */
static double unit_sumsq(const msr_dp_t *dp, const msr_dp_unit_t *u)
{
    const float *g = grad_at(dp, u);
    if (dp->tp_rank == 0)
        return msr_sumsq(g, u->own_n);
    double sum = 0.0;
    const msr_gpt_t *m = dp->model;
    size_t lo = u->own_lo, hi = u->own_lo + u->own_n;
    for (int k = 0; k < m->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &m->tensors[k];
        size_t a = MSR_MAX(lo, t->offset), b = MSR_MIN(hi, t->offset + t->count);
        if (a < b && !t->tp_replicated)
            sum += msr_sumsq(g + (a - lo), b - a);
    }
    return sum;
}

msr_status_t msr_dp_update(msr_dp_t *dp, float lr, float max_norm, double loss_local,
                           double *loss_sum_p, double *norm_p)
{
    uint64_t t0 = msr_now_ns();
    double sumsq = 0.0;
    for (int k = 0; k < dp->num_units; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        if (u->own_n == 0 || (u->replicated && dp->rank != 0))
            continue;
        sumsq += unit_sumsq(dp, u);
    }
    sumsq += dp->extra_sumsq;
    dp->extra_sumsq = 0.0;
    double red[2] = {loss_local, sumsq};
    if (dp->comm != NULL) {
        msr_status_t st =
            msr_comm_allreduce(dp->comm, MSR_IN_PLACE, red, 2, MSR_DTYPE_F64, MSR_OP_SUM);
        if (st != MSR_OK)
            return comm_failed("allreduce of the loss and gradient norm, step", (int)dp->opt->t + 1,
                               st);
    }
    for (int i = 0; i < 2; i++) {
        if (dp->mp_comm[i] == NULL)
            continue;
        msr_status_t st =
            msr_comm_allreduce(dp->mp_comm[i], MSR_IN_PLACE, red, 2, MSR_DTYPE_F64, MSR_OP_SUM);
        if (st != MSR_OK)
            return comm_failed(i == 0 ? "tensor-parallel allreduce of the loss and norm, step"
                                      : "pipeline allreduce of the loss and norm, step",
                               (int)dp->opt->t + 1, st);
    }
    double norm = sqrt(red[1]);
    float scale = msr_clip_scale(norm, max_norm);
    if (dp->cfg.zero == 0) {
        msr_adamw_update(dp->opt, dp->model->params, dp->model->grads, lr, scale);
    } else {
        msr_adamw_begin(dp->opt, lr, scale);
        for (int k = 0; k < dp->num_units; k++) {
            const msr_dp_unit_t *u = &dp->units[k];
            if (u->own_n > 0)
                msr_adamw_update_range(dp->opt, u->shard_off, u->own_n, param_at(dp, u),
                                       grad_at(dp, u));
        }
    }
    msr_status_t st = MSR_OK;
    if (dp->cfg.zero == 1 || dp->cfg.zero == 2)
        st = allgather_flat(dp, dp->model->params);
    dp->stats.update_ns += msr_now_ns() - t0;
    dp->stats.steps++;
    if (st != MSR_OK)
        return st;
    *loss_sum_p = red[0];
    *norm_p = norm;
    return MSR_OK;
}

msr_status_t msr_dp_gather_params(msr_dp_t *dp, float *out)
{
    if (dp->cfg.zero <= 2) {
        memcpy(out, dp->model->params, dp->model->num_params * sizeof(float));
        return MSR_OK;
    }
    for (int s = 0; s < dp->num_segs; s++) {
        msr_status_t st = seg_ready(dp, s);
        if (st == MSR_OK)
            memcpy(out + dp->model->segments[s].offset, dp->model->segments[s].params,
                   seg_count(dp, s) * sizeof(float));
        msr_status_t dst = seg_drop(dp, s);
        if (st == MSR_OK && dst != MSR_OK)
            st = comm_failed("parameter gather of segment", s, dst);
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

void msr_dp_memory(const msr_dp_t *dp, msr_dp_memory_t *mem)
{
    size_t P = dp->model->num_params, S = dp->shard_count, f = sizeof(float);
    mem->params = (dp->model->params != NULL ? P * f : 0) + (dp->pshard != NULL ? S * f : 0);
    mem->grads = (dp->model->grads != NULL ? P * f : 0) + (dp->gshard != NULL ? S * f : 0);
    mem->optim = 2 * dp->opt->count * f;
    mem->transient_peak = dp->transient_peak;
    mem->shard_elems = S;
    mem->replicated_elems = dp->rep_count;
}

/* ---- checkpoints ---- */

int msr_dp_num_owned(const msr_dp_t *dp)
{
    int n = 0;
    for (int k = 0; k < dp->num_units; k++)
        n += dp->units[k].own_n > 0;
    return n;
}

void msr_dp_owned(const msr_dp_t *dp, int k, msr_dp_piece_t *piece)
{
    int i = -1;
    for (int u = 0; u < dp->num_units; u++) {
        if (dp->units[u].own_n > 0 && ++i == k) {
            const msr_dp_unit_t *un = &dp->units[u];
            size_t mo = moment_off(dp, un);
            *piece = (msr_dp_piece_t){un->own_lo, un->own_n, param_at(dp, un), dp->opt->m + mo,
                                      dp->opt->v + mo};
            return;
        }
    }
    *piece = (msr_dp_piece_t){0, 0, NULL, NULL, NULL};
}

msr_status_t msr_dp_load_begin(msr_dp_t *dp)
{
    msr_free(dp->cover);
    dp->cover = msr_calloc(dp->model->num_params + 1, 1);
    if (dp->cover == NULL) {
        return msr_err(MSR_ERR_NO_MEMORY, "dp: out of memory loading a checkpoint");
    }
    return MSR_OK;
}

/* Copies the part of src (a piece's array starting at flat element
 * piece->lo) that falls in flat [lo, lo + n) to dst (element lo), and marks
 * it found. */
static void take(msr_dp_t *dp, const msr_dp_piece_t *piece, const float *src, size_t lo, size_t n,
                 float *dst, unsigned bit)
{
    size_t a = MSR_MAX(lo, piece->lo), e = MSR_MIN(lo + n, piece->lo + piece->n);
    if (a >= e)
        return;
    memcpy(dst + (a - lo), src + (a - piece->lo), (e - a) * sizeof(float));
    for (size_t i = a; i < e; i++)
        dp->cover[i] |= (uint8_t)bit;
}

void msr_dp_load_piece(msr_dp_t *dp, const msr_dp_piece_t *piece)
{
    for (int k = 0; k < dp->num_units; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        if (u->lo >= piece->lo + piece->n || u->lo + u->n <= piece->lo)
            continue;
        if (dp->cfg.zero <= 2)
            take(dp, piece, piece->params, u->lo, u->n, dp->model->params + u->lo, COVER_PARAMS);
        else
            take(dp, piece, piece->params, u->own_lo, u->own_n, dp->pshard + u->shard_off,
                 COVER_PARAMS);
        size_t lo = dp->cfg.zero == 0 ? u->lo : u->own_lo;
        size_t n = dp->cfg.zero == 0 ? u->n : u->own_n;
        size_t mo = dp->cfg.zero == 0 ? u->lo : u->shard_off;
        take(dp, piece, piece->m, lo, n, dp->opt->m + mo, 0);
        take(dp, piece, piece->v, lo, n, dp->opt->v + mo, COVER_MOMENTS);
    }
}

/* The first element of flat [lo, lo + n) that lacks bits, or lo + n. */
static size_t first_missing(const msr_dp_t *dp, size_t lo, size_t n, unsigned bits)
{
    for (size_t i = lo; i < lo + n; i++)
        if ((dp->cover[i] & bits) != bits)
            return i;
    return lo + n;
}

msr_status_t msr_dp_load_end(msr_dp_t *dp, int gather, int failed)
{
    size_t missing = SIZE_MAX;
    for (int k = 0; k < dp->num_units && missing == SIZE_MAX && !failed && dp->cover != NULL; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        size_t i = first_missing(dp, u->own_lo, u->own_n, COVER_PARAMS | COVER_MOMENTS);
        if (i < u->own_lo + u->own_n)
            missing = i;
        if (gather || missing != SIZE_MAX)
            continue;
        /* what this rank holds beyond its own elements */
        unsigned bits =
            (dp->cfg.zero <= 2 ? COVER_PARAMS : 0u) | (dp->cfg.zero == 0 ? COVER_MOMENTS : 0u);
        if (bits != 0 && (i = first_missing(dp, u->lo, u->n, bits)) < u->lo + u->n)
            missing = i;
    }
    if (missing != SIZE_MAX)
        msr_err_set("dp: the checkpoint lacks flat element %zu of the %zu parameters (or its "
                    "moments)",
                    missing, dp->model->num_params);
    /* every rank learns whether all found what they need */
    int32_t ok = missing == SIZE_MAX && !failed && dp->cover != NULL;
    msr_free(dp->cover);
    dp->cover = NULL;
    if (dp->comm != NULL) {
        msr_status_t st =
            msr_comm_allreduce(dp->comm, MSR_IN_PLACE, &ok, 1, MSR_DTYPE_I32, MSR_OP_MIN);
        if (st != MSR_OK)
            return comm_failed("agreement on a checkpoint load, rank", dp->rank, st);
    }
    if (!ok) {
        if (missing == SIZE_MAX && !failed)
            msr_err_set("dp: another rank could not load its part of the checkpoint");
        return MSR_ERR_CORRUPT;
    }
    if (!gather)
        return MSR_OK;
    msr_status_t st = MSR_OK;
    if (dp->cfg.zero <= 2)
        st = allgather_flat(dp, dp->model->params);
    if (st == MSR_OK && dp->cfg.zero == 0)
        st = allgather_flat(dp, dp->opt->m);
    if (st == MSR_OK && dp->cfg.zero == 0)
        st = allgather_flat(dp, dp->opt->v);
    return st;
}
