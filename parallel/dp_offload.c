/* Data parallel's optimizer with its moments in a file (parallel/offload.h):
 * the step's AdamW a chunk of the shard space at a time, and the moments
 * streamed for checkpoints, or held whole for ZeRO 0's restore (see dp.h). */
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "parallel/dp_impl.h"

msr_status_t msr_dp_offload_attach(msr_dp_t *dp)
{
    if (dp->cfg.offload.mode != MSR_OFFLOAD_DISK)
        return MSR_OK;
    msr_status_t st = msr_offload_create(&dp->cfg.offload, dp->opt->count, &dp->offload);
    if (st != MSR_OK)
        return st;
    /* the optimizer's own arrays were never touched: their pages go back */
    msr_free(dp->opt->m);
    msr_free(dp->opt->v);
    dp->opt->m = dp->opt->v = NULL;
    dp->cfg.offload.dir = NULL; /* the store keeps its copy */
    MSR_INFO("offload: the moments of %zu elements in %s (chunks of %zu bytes, %s)", dp->opt->count,
             msr_offload_path(dp->offload), msr_offload_chunk_bytes(dp->offload),
             msr_offload_engine(dp->offload));
    return MSR_OK;
}

/* AdamW over shard elements [off, off + n), whose moments are m and v:
 * stage 0's shard space is the flat buffer; under ZeRO the units' pieces
 * that fall in the chunk, each where its parameters and gradients are. */
static msr_status_t update_chunk(void *arg, size_t off, size_t n, float *m, float *v)
{
    msr_dp_t *dp = arg;
    if (dp->params_off != NULL && dp->cfg.zero == 0)
        return msr_dp_params_update_moments(dp, off, off, n, dp->model->grads + off, m, v);
    if (dp->cfg.zero == 0) {
        msr_adamw_update_moments(dp->opt, off, n, dp->model->params + off, dp->model->grads + off,
                                 m, v);
        return MSR_OK;
    }
    /* an offloaded gradient shard's chunk read back: the chunk's elements
     * (the next get, the moments' next chunk's, read ahead as it ends) */
    if (dp->grads_off != NULL) {
        msr_grads_next(dp->grads_off, off + n, n, 1);
        msr_status_t st = msr_grads_get(dp->grads_off, off, n, dp->gchunk);
        if (st != MSR_OK)
            return st;
    }
    for (int k = 0; k < dp->num_units; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        size_t a = MSR_MAX(off, u->shard_off), b = MSR_MIN(off + n, u->shard_off + u->own_n);
        if (u->own_n == 0 || a >= b)
            continue;
        size_t in = a - u->shard_off;
        const float *g =
            dp->grads_off != NULL ? dp->gchunk + (a - off) : msr_dp_grad_at(dp, u) + in;
        msr_status_t st = MSR_OK;
        if (dp->params_off != NULL) /* the blocks' in their buffers */
            st = msr_dp_params_update_moments(dp, a, u->own_lo + in, b - a, g, m + (a - off),
                                              v + (a - off));
        else
            msr_adamw_update_moments(dp->opt, a, b - a, msr_dp_param_at(dp, u) + in, g,
                                     m + (a - off), v + (a - off));
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

msr_status_t msr_dp_offload_update(msr_dp_t *dp)
{
    if (dp->params_off == NULL)
        return msr_offload_step(dp->offload, update_chunk, dp);
    /* the first block read while the chunks of the embeddings update */
    msr_status_t st = msr_params_prefetch(dp->params_off, 0);
    if (st == MSR_OK)
        st = msr_offload_step(dp->offload, update_chunk, dp);
    msr_status_t est = msr_dp_params_cursor_end(dp, st == MSR_OK);
    return st != MSR_OK ? st : est;
}

msr_status_t msr_dp_offload_hold(msr_dp_t *dp, int read, int moments)
{
    msr_status_t pst = msr_dp_params_hold(dp, read);
    if (pst != MSR_OK)
        return pst;
    if (!moments || dp->offload == NULL || dp->opt->m != NULL)
        return MSR_OK;
    size_t n = dp->opt->count + 1;
    dp->opt->m = msr_calloc(n, sizeof(float));
    dp->opt->v = msr_calloc(n, sizeof(float));
    msr_status_t st = MSR_OK;
    if (dp->opt->m == NULL || dp->opt->v == NULL)
        st = msr_err(MSR_ERR_NO_MEMORY,
                     "offload: out of memory holding %zu moments for a "
                     "checkpoint",
                     2 * n);
    else if (read)
        st = msr_offload_read_all(dp->offload, dp->opt->m, dp->opt->v);
    if (st != MSR_OK)
        (void)msr_dp_offload_drop(dp, 0);
    return st;
}

msr_status_t msr_dp_offload_drop(msr_dp_t *dp, int write)
{
    msr_status_t pst = msr_dp_params_drop(dp, write);
    if (pst != MSR_OK)
        return pst;
    if (dp->offload == NULL || dp->opt->m == NULL)
        return MSR_OK;
    msr_status_t st = MSR_OK;
    if (write)
        st = msr_offload_write_all(dp->offload, dp->opt->m, dp->opt->v);
    msr_free(dp->opt->m);
    msr_free(dp->opt->v);
    dp->opt->m = dp->opt->v = NULL;
    return st;
}

msr_status_t msr_dp_moments_get(msr_dp_t *dp, size_t moff, size_t n, float *m, float *v)
{
    if (dp->opt->m == NULL && dp->offload != NULL) /* offloaded, not held */
        return msr_offload_get(dp->offload, moff, n, m, v);
    if (dp->opt->m == NULL || moff > dp->opt->count || n > dp->opt->count - moff)
        return msr_err(MSR_ERR_INVALID_ARG, "dp: moments [%zu, %zu) of %zu held", moff, moff + n,
                       dp->opt->m != NULL ? dp->opt->count : 0);
    memcpy(m, dp->opt->m + moff, n * sizeof(float));
    memcpy(v, dp->opt->v + moff, n * sizeof(float));
    return MSR_OK;
}

/* ---- a checkpoint's save, streamed ---- */

size_t msr_dp_params_block_floats(const msr_dp_t *dp)
{
    return dp->params_off != NULL && !dp->pflat ? dp->pblk_n : 0;
}

size_t msr_dp_params_block_bytes(const msr_dp_t *dp)
{
    return msr_dp_params_block_floats(dp) > 0 ? msr_params_slot_bytes(dp->params_off) : 0;
}

msr_status_t msr_dp_params_flush(msr_dp_t *dp)
{
    return dp->params_off != NULL ? msr_params_flush(dp->params_off) : MSR_OK;
}

/* Under the parameters' offload, where the blocks are in the buffer the
 * owned pieces' parameters point into (the flat buffer; ZeRO-3: the
 * shard): that buffer, its length and the blocks' [lo, hi). */
static const float *blocks_span(const msr_dp_t *dp, size_t *count_p, size_t *lo_p, size_t *hi_p)
{
    size_t L = (size_t)dp->pnb;
    if (dp->pz_off != NULL) {
        *count_p = dp->shard_count;
        *lo_p = dp->pz_off[0];
        *hi_p = dp->pz_off[L];
        return dp->pshard;
    }
    *count_p = dp->model->num_params;
    *lo_p = dp->pf_off[0];
    *hi_p = dp->pf_off[L];
    return dp->model->params;
}

/* The block that element s of blocks_span's buffer is in (its [lo, hi))
 * and where the block starts and ends there. */
static size_t block_at(const msr_dp_t *dp, size_t s, size_t *first_p, size_t *end_p)
{
    const size_t *off = dp->pz_off != NULL ? dp->pz_off : dp->pf_off;
    size_t k = 0;
    while (off[k + 1] <= s)
        k++;
    *first_p = off[k];
    *end_p = off[k + 1];
    return k;
}

msr_status_t msr_dp_params_spans(msr_dp_t *dp, const float *p, size_t n, msr_dp_blk_t *blk,
                                 msr_dp_span_fn fn, void *arg)
{
    if (msr_dp_params_block_floats(dp) == 0)
        return fn(arg, p, n);
    size_t count, lo, hi;
    const float *base = blocks_span(dp, &count, &lo, &hi);
    uintptr_t a = (uintptr_t)base, q = (uintptr_t)p;
    if (q < a || q >= a + count * sizeof(float)) /* not the blocks' buffer: in place */
        return fn(arg, p, n);
    size_t s = (size_t)(p - base), e = s + n;
    msr_status_t st = MSR_OK;
    while (s < e && st == MSR_OK) {
        size_t end = s < lo ? MSR_MIN(e, lo) : e, first = 0;
        if (s < lo || s >= hi) {
            st = fn(arg, base + s, end - s);
            s = end;
            continue;
        }
        size_t last = 0, k = block_at(dp, s, &first, &last);
        end = MSR_MIN(e, last);
        if (blk->k != k) {
            blk->k = SIZE_MAX;
            st = blk->shared ? msr_params_read_shared(dp->params_off, k, blk->buf)
                             : msr_params_get(dp->params_off, k, blk->buf);
            if (st != MSR_OK)
                break;
            blk->k = k;
        }
        st = fn(arg, blk->buf + (s - first), end - s);
        s = end;
    }
    return st;
}

msr_status_t msr_dp_params_spans_end(msr_dp_t *dp, const msr_dp_blk_t *blk)
{
    /* ZeRO-3's next forward reads block 0 first: ahead again, as after a
     * step (the save's reads through the store took the one in flight) */
    if (blk->shared || msr_dp_params_block_floats(dp) == 0 || dp->pz_off == NULL)
        return MSR_OK;
    return msr_params_prefetch(dp->params_off, 0);
}

/* ---- a restore, a block at a time ---- */

msr_status_t msr_dp_params_load_begin(msr_dp_t *dp)
{
    dp->pload_buf = msr_malloc(dp->pblk_n * sizeof(float));
    dp->pload_seen = msr_calloc((size_t)dp->pnb + 1, 1);
    if (dp->pload_buf == NULL || dp->pload_seen == NULL) {
        msr_free(dp->pload_buf);
        msr_free(dp->pload_seen);
        dp->pload_buf = NULL;
        dp->pload_seen = NULL;
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for a block of a restore");
    }
    dp->pload_k = SIZE_MAX;
    dp->pload_reads = dp->pload_writes = 0;
    msr_params_count_restore(dp->params_off, dp->pblk_n * sizeof(float));
    return MSR_OK;
}

/* The block in pload_buf back to its file (write 1; 0: dropped), then
 * block k into it (SIZE_MAX: none). A block the restore enters for the
 * first time is not read: every element of it is loaded or gathered
 * before the restore ends (load_end checks that each rank's were found),
 * so its old parameters are never wanted; its others start as zeros. One
 * entered again is read back (its first part written). The store drops
 * a read ahead of a block it is given to write (msr_params_put). */
static msr_status_t load_switch(msr_dp_t *dp, size_t k, int write)
{
    msr_status_t st = MSR_OK;
    if (dp->pload_k == k)
        return MSR_OK;
    if (dp->pload_k != SIZE_MAX && write) {
        st = msr_params_put(dp->params_off, dp->pload_k, dp->pload_buf);
        dp->pload_writes++;
    }
    dp->pload_k = SIZE_MAX;
    if (st != MSR_OK || k == SIZE_MAX)
        return st;
    if (!dp->pload_seen[k]) {
        memset(dp->pload_buf, 0, dp->pblk_n * sizeof(float));
        dp->pload_seen[k] = 1;
    } else if ((st = msr_params_get(dp->params_off, k, dp->pload_buf)) != MSR_OK) {
        return st;
    } else {
        dp->pload_reads++;
    }
    dp->pload_k = k;
    return MSR_OK;
}

msr_status_t msr_dp_params_load(msr_dp_t *dp, size_t lo, size_t n, const float *src)
{
    size_t blo = dp->pf_off[0], bhi = dp->pf_off[dp->pnb], e = lo + n;
    while (lo < e) {
        size_t end = lo < blo ? MSR_MIN(e, blo) : e;
        float *dst = dp->model->params + lo;
        if (lo >= blo && lo < bhi) { /* in block k */
            size_t k = msr_dp_pf_block(dp, lo);
            msr_status_t st = load_switch(dp, k, 1);
            if (st != MSR_OK)
                return st;
            end = MSR_MIN(e, dp->pf_off[k + 1]);
            dst = dp->pload_buf + (lo - dp->pf_off[k]);
        }
        memcpy(dst, src, (end - lo) * sizeof(float));
        src += end - lo;
        lo = end;
    }
    return MSR_OK;
}

msr_status_t msr_dp_params_fill(msr_dp_t *dp, size_t lo, size_t n, const float *src)
{
    if (dp->pload_buf != NULL && dp->pz_off == NULL)
        return msr_dp_params_load(dp, lo, n, src);
    if (dp->model->params == NULL || lo > dp->model->num_params || n > dp->model->num_params - lo)
        return msr_err(MSR_ERR_INVALID_ARG, "dp: flat parameters [%zu, %zu) of %zu", lo, lo + n,
                       dp->model->params != NULL ? dp->model->num_params : 0);
    memcpy(dp->model->params + lo, src, n * sizeof(float));
    return MSR_OK;
}

msr_status_t msr_dp_params_load_shard(msr_dp_t *dp, size_t s, size_t n, const float *src)
{
    size_t L = (size_t)dp->pnb, lo = dp->pz_off[0], hi = dp->pz_off[L], e = s + n;
    while (s < e) {
        size_t end = s < lo ? MSR_MIN(e, lo) : e;
        float *dst = dp->pshard + s;
        if (s >= lo && s < hi) {
            /* the block whose share holds s: the last one starting at or
             * before it (a block with no share starts where the next does) */
            size_t k = L - 1;
            while (dp->pz_off[k] > s)
                k--;
            msr_status_t st = load_switch(dp, k, 1);
            if (st != MSR_OK)
                return st;
            end = MSR_MIN(e, dp->pz_off[k + 1]);
            dst = dp->pload_buf + (s - dp->pz_off[k]);
        }
        memcpy(dst, src, (end - s) * sizeof(float));
        src += end - s;
        s = end;
    }
    return MSR_OK;
}

msr_status_t msr_dp_params_load_gather(msr_dp_t *dp)
{
    size_t L = (size_t)dp->pnb, lo = dp->pf_off[0], hi = dp->pf_off[L];
    size_t P = dp->model->num_params;
    if (dp->comm == NULL || dp->size == 1) /* nothing to gather */
        return MSR_OK;
    msr_status_t st = load_switch(dp, SIZE_MAX, 1);
    if (st == MSR_OK)
        st = msr_dp_params_gather_range(dp, 0, lo, dp->model->params);
    for (size_t k = 0; k < L && st == MSR_OK; k++) {
        size_t a = dp->pf_off[k], b = dp->pf_off[k + 1];
        /* what the restore holds: this block and the gather's buffer */
        msr_params_count_restore(
            dp->params_off, (dp->pblk_n + msr_dp_params_gather_floats(dp, a, b)) * sizeof(float));
        if ((st = load_switch(dp, k, 1)) == MSR_OK)
            st = msr_dp_params_gather_range(dp, a, b, dp->pload_buf);
    }
    if (st == MSR_OK)
        st = load_switch(dp, SIZE_MAX, 1);
    if (st == MSR_OK)
        st = msr_dp_params_gather_range(dp, hi, P, dp->model->params + hi);
    return st;
}

msr_status_t msr_dp_params_load_end(msr_dp_t *dp, int write)
{
    msr_status_t st = load_switch(dp, SIZE_MAX, write);
    msr_free(dp->pload_buf);
    msr_free(dp->pload_seen);
    dp->pload_buf = NULL;
    dp->pload_seen = NULL;
    return st;
}

/* ---- the gradient shard's file ---- */

/* A moments' chunk's elements: the most update_chunk is given at once. */
static size_t moment_chunk_elems(const msr_dp_t *dp)
{
    return msr_offload_chunk_bytes(dp->offload) / (2 * sizeof(float));
}

msr_status_t msr_dp_grads_attach(msr_dp_t *dp)
{
    msr_offload_config_t cfg = dp->cfg.grads_offload;
    if (cfg.mode == MSR_OFFLOAD_NONE)
        return MSR_OK;
    if (cfg.mode != MSR_OFFLOAD_DISK || dp->cfg.zero < 2 || dp->offload == NULL)
        return msr_err(MSR_ERR_CONFIG,
                       "dp: the gradient shard goes to disk under ZeRO 2 or 3 with the "
                       "optimizer's moments on disk (ZeRO %d, moments %s)",
                       dp->cfg.zero, dp->offload != NULL ? "on disk" : "in memory");
    /* a gradient chunk spans two of the moments' */
    cfg.chunk_bytes = msr_offload_chunk_bytes(dp->offload);
    msr_status_t st = msr_grads_create(&cfg, dp->shard_count, &dp->grads_off);
    if (st != MSR_OK)
        return st;
    if ((dp->gchunk = msr_malloc(moment_chunk_elems(dp) * sizeof(float))) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for a gradient chunk");
    dp->gsq = msr_calloc((size_t)dp->num_units + 1, sizeof *dp->gsq);
    dp->gsq_step = msr_calloc((size_t)dp->num_units + 1, sizeof *dp->gsq_step);
    if (dp->gsq == NULL || dp->gsq_step == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for the units' norms");
    dp->cfg.grads_offload.dir = NULL; /* the store keeps its path */
    MSR_INFO("offload: the gradient shard of %zu elements in %s (chunks of %zu bytes, %s)",
             dp->shard_count, msr_grads_path(dp->grads_off), msr_grads_chunk_bytes(dp->grads_off),
             msr_grads_engine(dp->grads_off));
    return MSR_OK;
}

void msr_dp_grads_detach(msr_dp_t *dp)
{
    msr_grads_destroy(dp->grads_off);
    msr_free(dp->gchunk);
    msr_free(dp->gsq);
    msr_free(dp->gsq_step);
    dp->grads_off = NULL;
    dp->gchunk = NULL;
    dp->gsq = NULL;
    dp->gsq_step = NULL;
}

/* Whether the gradient norm counts unit u on this rank (the replicated
 * ones on rank 0 alone). */
static int norm_counts(const msr_dp_t *dp, const msr_dp_unit_t *u)
{
    return u->own_n > 0 && !(u->replicated && dp->rank != 0);
}

/* The next unit from unit k on, in bucket b on, in the order the buckets
 * finish (0 first, each bucket's units in turn) that holds elements of
 * this rank's shard; NULL: none. */
static const msr_dp_unit_t *next_unit(const msr_dp_t *dp, int b, int k)
{
    for (; b < dp->num_buckets; b++) {
        const msr_dp_bucket_t *B = &dp->buckets[b];
        for (k = MSR_MAX(k, B->u0); k < B->u1; k++)
            if (dp->units[k].own_n > 0)
                return &dp->units[k];
        k = 0;
    }
    return NULL;
}

/* Tells the gradient store what its call after unit u's put is: the next
 * unit's put in this micro-batch (a bucket's units go up, the buckets
 * down the layers, so each bucket's first chunk is a jump no read ahead
 * of the pass foresees), else the next micro-batch's first put (an add),
 * else the update's first get (the moments' first chunk; the norm came
 * from the puts). */
static void grads_then(msr_dp_t *dp, const msr_dp_unit_t *u)
{
    const msr_dp_unit_t *v = next_unit(dp, u->bucket, (int)(u - dp->units) + 1);
    if (v != NULL)
        msr_grads_next(dp->grads_off, v->shard_off, v->own_n, !dp->first_micro);
    else if (!dp->last_micro && (v = next_unit(dp, 0, 0)) != NULL)
        msr_grads_next(dp->grads_off, v->shard_off, v->own_n, 1);
    else
        msr_grads_next(dp->grads_off, 0, moment_chunk_elems(dp), 1);
}

void msr_dp_grads_put(msr_dp_t *dp, const msr_dp_unit_t *u, const float *src)
{
    grads_then(dp, u);
    /* a failure stays with the store: msr_dp_grads_sumsq reports it */
    if (!dp->last_micro || !norm_counts(dp, u)) {
        (void)msr_grads_put(dp->grads_off, u->shard_off, u->own_n, src, !dp->first_micro);
        return;
    }
    /* the step's last: the unit's norm from the sums as they are put */
    double lanes[MSR_SUMSQ_LANES] = {0};
    size_t k = (size_t)(u - dp->units);
    if (msr_grads_put_sumsq(dp->grads_off, u->shard_off, u->own_n, src, !dp->first_micro, lanes) ==
        MSR_OK) {
        dp->gsq[k] = msr_sumsq_fold(lanes);
        dp->gsq_step[k] = dp->gsq_now;
    }
}

msr_status_t msr_dp_grads_sumsq(msr_dp_t *dp, double *sumsq_p)
{
    if (dp->mp_comm[0] != NULL || dp->mp_comm[1] != NULL)
        return msr_err(MSR_ERR_CONFIG, "dp: the gradient shard on disk is for data parallel "
                                       "alone, not under model parallel");
    msr_status_t st = msr_grads_flush(dp->grads_off);
    size_t per = moment_chunk_elems(dp);
    double sum = *sumsq_p;
    for (int k = 0; k < dp->num_units && st == MSR_OK; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        if (!norm_counts(dp, u))
            continue;
        if (dp->gsq_step[k] == dp->gsq_now && dp->gsq_now != 0) { /* as it was put */
            sum += dp->gsq[k];
            continue;
        }
        /* msr_sumsq's order over the whole unit, a chunk at a time */
        double lanes[MSR_SUMSQ_LANES] = {0};
        for (size_t at = 0; at < u->own_n && st == MSR_OK; at += per) {
            size_t c = MSR_MIN(per, u->own_n - at);
            st = msr_grads_get(dp->grads_off, u->shard_off + at, c, dp->gchunk);
            if (st == MSR_OK)
                msr_sumsq_add(lanes, dp->gchunk, c, at);
        }
        sum += msr_sumsq_fold(lanes);
    }
    if (st == MSR_OK)
        *sumsq_p = sum;
    return st;
}

size_t msr_dp_grads_resident(const msr_dp_t *dp)
{
    if (dp->grads_off == NULL)
        return 0;
    return msr_grads_resident(dp->grads_off) + moment_chunk_elems(dp) * sizeof(float);
}
