/* Data parallel and ZeRO: the model's flags per stage, the counted
 * temporary buffers, the layout of buckets, units and shards, and create
 * and destroy (see dp.h; the hooks are in dp_hooks.c, the step's end in
 * dp_step.c, checkpoint pieces in dp_pieces.c). */
#include "parallel/dp_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "msrun/device.h"
#include "model/err_call.h"

unsigned msr_dp_model_flags(int zero)
{
    if (zero >= 3)
        return MSR_GPT_NO_PARAMS | MSR_GPT_NO_GRADS;
    return zero == 2 ? MSR_GPT_NO_GRADS : 0u;
}

/* ---- temporary buffers, counted ---- */

/* In the device's memory (on the CPU page-backed, base/alloc.h): ZeRO-2/3
 * allocate segments' gradients, buckets and gathers of several sizes every
 * micro-batch; from malloc's heap their freed pages would stay resident
 * past the peak counted. A
 * freed one is kept and serves the next request it fits with little to
 * spare, so that a step's requests find their buffers again and fault no
 * page in after the first step. Both counts, the live (transient) and
 * the kept, are of the bytes asked for, so that what the model counts
 * bounds them (a buffer's own size is a page or an eighth more at most). */
static void tmp_evict(msr_dp_t *dp, int i)
{
    dp->cached_bytes -= dp->cache[i].n;
    msr_device_free(dp->dev, dp->cache[i].p);
    dp->cache[i] = dp->cache[--dp->cached];
}

/* The bytes allocated for a request of bytes: large ones in whole pages
 * (what a page-backed or a device allocation takes anyway), so that a kept
 * buffer serves requests a little larger than its first. */
static size_t tmp_cap(size_t bytes)
{
    return bytes < MSR_PAGES_MIN ? bytes : (bytes + 4095) / 4096 * 4096;
}

static msr_status_t live_add(msr_dp_t *dp, float *p, size_t cap)
{
    if (dp->num_live == dp->max_live) {
        int max = dp->max_live > 0 ? 2 * dp->max_live : 16;
        struct msr_dp_live *l = msr_realloc_array(dp->live, (size_t)max, sizeof *l);
        if (l == NULL) {
            msr_err_set("dp: out of memory for the list of %d temporary buffers", max);
            return MSR_ERR_NO_MEMORY;
        }
        dp->live = l;
        dp->max_live = max;
    }
    dp->live[dp->num_live++] = (struct msr_dp_live){p, cap};
    return MSR_OK;
}

/* The allocated bytes of live temporary p, taken off the list. */
static size_t live_take(msr_dp_t *dp, const float *p, size_t bytes)
{
    for (int i = dp->num_live - 1; i >= 0; i--) {
        if (dp->live[i].p == p) {
            size_t cap = dp->live[i].cap;
            dp->live[i] = dp->live[--dp->num_live];
            return cap;
        }
    }
    return bytes; /* not from msr_dp_tmp_alloc: at least what was asked */
}

float *msr_dp_tmp_alloc(msr_dp_t *dp, size_t n, int zeroed)
{
    size_t bytes = (n > 0 ? n : 1) * sizeof(float), cap = 0;
    float *p = NULL;
    int best = -1;
    for (int i = 0; i < dp->cached; i++) {
        size_t c = dp->cache[i].cap;
        if (c >= bytes && c - bytes <= bytes / 8 + 4096 && (best < 0 || c < dp->cache[best].cap))
            best = i;
    }
    if (best >= 0) {
        p = dp->cache[best].p;
        cap = dp->cache[best].cap;
        dp->cached_bytes -= dp->cache[best].n;
        dp->cache[best] = dp->cache[--dp->cached];
    } else {
        /* the kept and the live together stay within the peak so far and
         * a quarter: ZeRO-3's gathers and gradients need buffers of the
         * same sizes in changing company, and within the peak alone a
         * step evicted what it then faulted in again (ZeRO-3 on 4 ranks
         * 15% slower) */
        size_t limit = MSR_MAX(dp->transient_peak, dp->transient + bytes);
        while (dp->cached > 0 && dp->cached_bytes + dp->transient + bytes > limit + limit / 4)
            tmp_evict(dp, dp->cached - 1);
        void *q = NULL;
        cap = tmp_cap(bytes);
        if (msr_device_alloc(dp->dev, cap, &q) != MSR_OK) {
            msr_err_set("dp: out of memory for a temporary buffer of %zu floats", n);
            return NULL;
        }
        p = q;
    }
    if ((zeroed && msr_dp_zero(dp, p, bytes / sizeof(float)) != MSR_OK) ||
        live_add(dp, p, cap) != MSR_OK) {
        msr_device_free(dp->dev, p);
        return NULL;
    }
    dp->transient += n * sizeof(float);
    if (dp->transient > dp->transient_peak)
        dp->transient_peak = dp->transient;
    return p;
}

void msr_dp_tmp_free(msr_dp_t *dp, float **p, size_t n)
{
    if (*p == NULL)
        return;
    size_t cap = live_take(dp, *p, n * sizeof(float));
    /* every step allocates its buckets again (ZeRO-2/3 every micro-batch,
     * with the segments' gradients) */
    if (dp->cached < MSR_DP_TMP_CACHE) {
        dp->cache[dp->cached].p = *p;
        dp->cache[dp->cached].cap = cap;
        dp->cache[dp->cached++].n = n * sizeof(float);
        dp->cached_bytes += n * sizeof(float);
    } else {
        msr_device_free(dp->dev, *p);
    }
    *p = NULL;
    dp->transient -= n * sizeof(float);
}

msr_status_t msr_dp_copy(msr_dp_t *dp, float *dst, const float *src, size_t n)
{
    return msr_device_copy(dp->dev, dst, src, n * sizeof(float), MSR_DEVICE_D2D, NULL);
}

msr_status_t msr_dp_zero(msr_dp_t *dp, float *dst, size_t n)
{
    return msr_device_memset(dp->dev, dst, 0, n * sizeof(float), NULL);
}

msr_status_t msr_dp_sync(msr_dp_t *dp)
{
    return msr_device_stream_sync(dp->dev, NULL);
}

/* The communicator's failure st, with what failed in front of its text. */
msr_status_t msr_dp_comm_failed(const char *what, int index, msr_status_t st)
{
    return msr_err_call(st, "dp: %s %d", what, index);
}

/* ---- layout ---- */

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
    /* the order of acquires: a Llama's head is untied, in segment L+1 */
    dp->num_visits =
        msr_layout_zero3_visits(m->cfg.layers, m->cfg.arch != MSR_GPT_ARCH_LLAMA, dp->visits);
    return MSR_OK;
}

/* ---- create / destroy ---- */

/* A buffer of the shard space (S floats and one, so never empty) on dp's
 * device, zero: on the CPU device its pages untouched until written (the
 * blocks' part of ZeRO-3's parameter shard under the parameter offload
 * never is). */
static msr_status_t shard_alloc(msr_dp_t *dp, float **p_p)
{
    return msr_device_alloc_zero(dp->dev, (dp->shard_count + 1) * sizeof(float), (void **)p_p);
}

msr_status_t msr_dp_create(const msr_dp_config_t *cfg, msr_comm_t *comm, msr_gpt_t *model,
                           const msr_adamw_config_t *adamw, uint64_t seed, msr_dp_t **dp_p)
{
    if (cfg->zero < 0 || cfg->zero > 3 || cfg->bucket_bytes < sizeof(float)) {
        return msr_err(MSR_ERR_CONFIG,
                       "dp: ZeRO stage %d (0..3) or bucket of %zu bytes (>= 4) out of range",
                       cfg->zero, cfg->bucket_bytes);
    }
    if (cfg->grad_bf16 && cfg->zero != 0) {
        return msr_err(MSR_ERR_CONFIG,
                       "dp: gradients reduced in bf16 need ZeRO stage 0, not %d (ZeRO's "
                       "reduce-scatters sum in fp32)",
                       cfg->zero);
    }
    unsigned have = (model->params == NULL ? MSR_GPT_NO_PARAMS : 0u) |
                    (model->grads == NULL ? MSR_GPT_NO_GRADS : 0u);
    if (have != msr_dp_model_flags(cfg->zero)) {
        return msr_err(MSR_ERR_CONFIG, "dp: ZeRO stage %d needs a model made with flags %u, not %u",
                       cfg->zero, msr_dp_model_flags(cfg->zero), have);
    }
    const msr_device_t *dev = cfg->device != NULL ? cfg->device : msr_device_cpu();
    if (!msr_device_is_host(dev)) {
        return msr_err(MSR_ERR_UNSUPPORTED,
                       "dp: device %s: the model's kernels and the optimizer run on the host "
                       "only, so data parallel's buffers stay there until they run on devices",
                       msr_device_name(dev));
    }
    msr_status_t st = MSR_ERR_NO_MEMORY;
    msr_dp_t *dp = msr_calloc(1, sizeof *dp);
    if (dp == NULL)
        goto err_no_memory;
    dp->cfg = *cfg;
    dp->dev = dev;
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
    if ((cfg->zero >= 2 && cfg->grads_offload.mode != MSR_OFFLOAD_DISK &&
         (st = shard_alloc(dp, &dp->gshard)) != MSR_OK) ||
        (cfg->zero >= 3 && (st = shard_alloc(dp, &dp->pshard)) != MSR_OK))
        goto err_free;
    /* the parameters' offload seeds the blocks (ZeRO-3: their shares)
     * into its file */
    if (!msr_dp_init_left(cfg) && cfg->params_offload.mode == MSR_OFFLOAD_NONE)
        msr_dp_init_params(dp, seed);
    dp->hooks = (msr_gpt_hooks_t){dp, msr_dp_hook_acquire, msr_dp_hook_release,
                                  msr_dp_hook_grads_ready, msr_dp_hook_poll};
    if ((st = msr_dp_offload_attach(dp)) != MSR_OK || (st = msr_dp_grads_attach(dp)) != MSR_OK ||
        (st = msr_dp_params_attach(dp, seed)) != MSR_OK)
        goto err_free;
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

msr_status_t msr_dp_agree(msr_comm_t *comm, msr_status_t st, const char *area, const char *thing)
{
    if (comm == NULL)
        return st;
    char why[512];
    snprintf(why, sizeof why, "%s", msr_last_error());
    int64_t code = st < 0 && st > -256 ? -(int64_t)st : -(int64_t)MSR_ERR_INTERNAL;
    int64_t v = st != MSR_OK ? (int64_t)msr_comm_rank(comm) * 256 + code : INT64_MAX;
    msr_status_t ast = msr_comm_allreduce(comm, MSR_IN_PLACE, &v, 1, MSR_DTYPE_I64, MSR_OP_MIN);
    if (st != MSR_OK) {
        msr_err_set("%s", why);
        return st;
    }
    if (ast != MSR_OK)
        return msr_err_call(ast, "%s: the agreement on the %s's creation", area, thing);
    if (v == INT64_MAX)
        return MSR_OK;
    msr_status_t worst = (msr_status_t)(-(v % 256));
    if (worst == MSR_ERR_NO_MEMORY)
        return msr_err(worst, "%s: rank %lld is out of memory creating its %s", area,
                       (long long)(v / 256), thing);
    return msr_err(worst, "%s: rank %lld failed creating its %s (%s)", area, (long long)(v / 256),
                   thing, msr_status_str(worst));
}

msr_status_t msr_dp_create_agreed(const msr_dp_config_t *cfg, msr_comm_t *comm, msr_gpt_t *model,
                                  const msr_adamw_config_t *adamw, uint64_t seed, msr_dp_t **dp_p)
{
    msr_dp_t *dp = NULL;
    msr_status_t st = msr_dp_agree(comm, msr_dp_create(cfg, comm, model, adamw, seed, &dp), "dp",
                                   "data-parallel state");
    if (st != MSR_OK) {
        msr_dp_destroy(dp);
        return st;
    }
    *dp_p = dp;
    return MSR_OK;
}

int msr_dp_init_left(const msr_dp_config_t *cfg)
{
    return cfg->init_later && cfg->params_offload.mode == MSR_OFFLOAD_NONE;
}

/* Waits for whatever is in flight and frees every temporary buffer. */
msr_status_t msr_dp_drain(msr_dp_t *dp)
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
        msr_dp_tmp_free(dp, &B->packed, (size_t)dp->size * B->blk + B->rep);
    }
    for (int s = 0; s < dp->num_segs; s++) {
        msr_status_t st = msr_dp_seg_drop(dp, s);
        if (first == MSR_OK)
            first = st;
        msr_dp_tmp_free(dp, &dp->segs[s].grads, msr_dp_seg_count(dp, s));
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
        msr_dp_drain(dp);
    while (dp->cached > 0)
        tmp_evict(dp, dp->cached - 1);
    msr_free(dp->cover);
    msr_offload_destroy(dp->offload);
    msr_dp_grads_detach(dp);
    msr_dp_params_detach(dp);
    msr_adamw_destroy(dp->opt);
    msr_device_free(dp->dev, dp->gshard);
    msr_device_free(dp->dev, dp->pshard);
    msr_free(dp->live);
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
