/* Data parallel with the blocks' parameters in a file (dp_params.c):
 * the step's AdamW a block at a time (read ahead, written back behind),
 * ZeRO 1-2 completing each block from its owners, and the moments'
 * chunks (dp_offload.c) walking the blocks in flat order. */
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "parallel/dp_impl.h"

/* AdamW over flat elements [lo, lo + n), resident. */
static void update_flat(msr_dp_t *dp, size_t lo, size_t n)
{
    if (n > 0)
        msr_adamw_update_range(dp->opt, lo, n, dp->model->params + lo, dp->model->grads + lo);
}

/* ZeRO 1-2: AdamW over this rank's owned elements of flat elements
 * [lo, hi), whose parameters are at base (element lo at base[0]). */
static void update_owned(msr_dp_t *dp, size_t lo, size_t hi, float *base)
{
    for (int k = 0; k < dp->num_units; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        size_t a = MSR_MAX(lo, u->own_lo), b = MSR_MIN(hi, u->own_lo + u->own_n);
        if (a < b)
            msr_adamw_update_range(dp->opt, u->shard_off + (a - u->own_lo), b - a, base + (a - lo),
                                   msr_dp_grad_at(dp, u) + (a - u->own_lo));
    }
}

/* Rank j's elements of the sharded units in [lo, hi), in unit order,
 * counted into *count_p and, with buf, packed into (pack 1: host to
 * device) or out of (pack 0: device to host) buf, from or into base (the
 * host's: a store buffer or the flat buffer). The copies are queued on
 * dp's device: msr_dp_sync before either side is read. */
static msr_status_t pieces(msr_dp_t *dp, int j, size_t lo, size_t hi, float *base, float *buf,
                           int pack, size_t *count_p)
{
    size_t c = 0;
    msr_status_t st = MSR_OK;
    for (int k = 0; k < dp->num_units && st == MSR_OK; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        size_t a, e;
        if (u->replicated)
            continue;
        msr_dp_block_of(u, j, &a, &e);
        a = MSR_MAX(lo, u->lo + a);
        e = MSR_MIN(hi, u->lo + e);
        if (a >= e)
            continue;
        if (buf != NULL && pack)
            st = msr_dp_xfer(dp, buf + c, base + (a - lo), e - a, MSR_DEVICE_H2D);
        else if (buf != NULL)
            st = msr_dp_xfer(dp, base + (a - lo), buf + c, e - a, MSR_DEVICE_D2H);
        c += e - a;
    }
    *count_p = c;
    return st;
}

/* The most elements of [lo, hi) any rank owns (gather_range's buffer
 * holds that many of each rank's). */
static size_t gather_most(msr_dp_t *dp, size_t lo, size_t hi)
{
    size_t most = 0, c = 0;
    for (int j = 0; j < dp->size; j++) {
        (void)pieces(dp, j, lo, hi, NULL, NULL, 0, &c); /* only counts: no copy to fail */
        most = MSR_MAX(most, c);
    }
    return most;
}

size_t msr_dp_params_gather_floats(msr_dp_t *dp, size_t lo, size_t hi)
{
    if (dp->comm == NULL || dp->size == 1 || hi <= lo)
        return 0;
    return (size_t)dp->size * gather_most(dp, lo, hi);
}

/* ZeRO 1-2: the other ranks' updated elements of [lo, hi) into base, from
 * their owners: one allgather of every rank's pieces (the flat allgather
 * of dp_step.c would write the blocks' dropped part of the flat buffer). */
static msr_status_t gather_range(msr_dp_t *dp, size_t lo, size_t hi, float *base)
{
    if (dp->comm == NULL || dp->size == 1 || hi <= lo)
        return MSR_OK;
    size_t most = gather_most(dp, lo, hi), size = (size_t)dp->size, c = 0;
    if (most == 0)
        return MSR_OK;
    float *buf = msr_dp_tmp_alloc(dp, size * most, 1);
    if (buf == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_status_t st = pieces(dp, dp->rank, lo, hi, base, buf + (size_t)dp->rank * most, 1, &c);
    if (st == MSR_OK && (st = msr_dp_sync(dp)) == MSR_OK) { /* the communicator reads next */
        st = msr_comm_allgather(dp->comm, MSR_IN_PLACE, buf, (uint64_t)most, MSR_DTYPE_F32);
        if (st != MSR_OK)
            st = msr_dp_comm_failed("parameter allgather of flat element", (int)lo, st);
    }
    for (int j = 0; j < dp->size && st == MSR_OK; j++)
        if (j != dp->rank)
            st = pieces(dp, j, lo, hi, base, buf + (size_t)j * most, 0, &c);
    /* the host reads base next, and buf is kept for reuse */
    msr_status_t sst = msr_dp_sync(dp);
    msr_dp_tmp_free(dp, &buf, size * most);
    return st != MSR_OK ? st : sst;
}

msr_status_t msr_dp_params_gather_range(msr_dp_t *dp, size_t lo, size_t hi, float *base)
{
    return gather_range(dp, lo, hi, base);
}

/* ZeRO 1-2: the resident elements, then the blocks one at a time (read
 * ahead, written back behind), each updated where this rank owns it and
 * gathered from the other ranks before it goes. */
static msr_status_t update_sharded(msr_dp_t *dp)
{
    size_t L = (size_t)dp->pnb, lo = dp->pf_off[0], hi = dp->pf_off[L];
    float *params = dp->model->params;
    update_owned(dp, 0, lo, params);
    msr_status_t st = gather_range(dp, 0, lo, params);
    if (st == MSR_OK)
        st = msr_params_prefetch(dp->params_off, 0);
    for (size_t k = 0; k < L && st == MSR_OK; k++) {
        float *buf;
        if ((st = msr_params_acquire(dp->params_off, k, 1, &buf)) != MSR_OK)
            break;
        update_owned(dp, dp->pf_off[k], dp->pf_off[k + 1], buf);
        st = gather_range(dp, dp->pf_off[k], dp->pf_off[k + 1], buf);
        msr_status_t rst = msr_params_release(dp->params_off, k, buf, st == MSR_OK);
        st = st != MSR_OK ? st : rst;
    }
    if (st != MSR_OK)
        return st;
    update_owned(dp, hi, dp->model->num_params, params + hi);
    return gather_range(dp, hi, dp->model->num_params, params + hi);
}

/* ZeRO-3: AdamW over the owned elements outside the blocks, then over
 * each block's share in turn (read ahead, written back behind); the
 * next forward's first block read ahead. */
static msr_status_t update_shard3(msr_dp_t *dp)
{
    int L = dp->pnb;
    for (int k = 0; k < dp->num_units; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        if (u->own_n > 0 && msr_dp_pf_seg(dp, u->seg) < 0)
            msr_adamw_update_range(dp->opt, u->shard_off, u->own_n, dp->pshard + u->shard_off,
                                   msr_dp_grad_at(dp, u));
    }
    msr_status_t st = msr_params_prefetch(dp->params_off, 0);
    for (int l = 0; l < L && st == MSR_OK; l++) {
        const msr_dp_seg_t *G = &dp->segs[dp->pfb + l];
        float *buf;
        if ((st = msr_params_acquire(dp->params_off, (size_t)l, 1, &buf)) != MSR_OK)
            break;
        for (int k = G->u0; k < G->u1; k++) {
            const msr_dp_unit_t *u = &dp->units[k];
            if (u->own_n > 0)
                msr_adamw_update_range(dp->opt, u->shard_off, u->own_n,
                                       buf + (u->shard_off - dp->pz_off[l]), msr_dp_grad_at(dp, u));
        }
        st = msr_params_release(dp->params_off, (size_t)l, buf, 1);
    }
    return st == MSR_OK ? msr_params_prefetch(dp->params_off, 0) : st;
}

msr_status_t msr_dp_params_update(msr_dp_t *dp)
{
    if (dp->pz_off != NULL)
        return update_shard3(dp);
    if (dp->cfg.zero > 0)
        return update_sharded(dp);
    size_t L = (size_t)dp->pnb, lo = dp->pf_off[0], hi = dp->pf_off[L];
    update_flat(dp, 0, lo);

    msr_status_t st = msr_params_prefetch(dp->params_off, 0);
    for (size_t k = 0; k < L && st == MSR_OK; k++) {
        float *buf;
        if ((st = msr_params_acquire(dp->params_off, k, 1, &buf)) != MSR_OK)
            break;
        msr_adamw_update_range(dp->opt, dp->pf_off[k], msr_dp_pf_count(dp, k), buf,
                               dp->model->grads + dp->pf_off[k]);
        st = msr_params_release(dp->params_off, k, buf, 1);
    }
    update_flat(dp, hi, dp->model->num_params - hi);
    return st;
}

/* With the moments offloaded too (dp_offload.c), their chunks come in the
 * shard space's order, which is the flat buffer's (the units are in flat
 * order): the block a chunk reaches is acquired (the next one read ahead)
 * and kept while the chunks fall in it, then written back behind. At ZeRO
 * 1-2 a block the chunks move past is first completed with the other
 * ranks' elements (gather_range), and so is every block between it and
 * the next one reached, which this rank owns nothing of: every rank
 * gathers every block in order, whatever its shard covers. */
/* ZeRO 1-2 complete each block from the other ranks after its update;
 * ZeRO-3's blocks stay shards (each gather completes them). */
static int gathers(const msr_dp_t *dp)
{
    return dp->cfg.zero == 1 || dp->cfg.zero == 2;
}

static msr_status_t cursor_to(msr_dp_t *dp, size_t k)
{
    if (dp->pcur == k)
        return MSR_OK;
    size_t j = dp->pcur == SIZE_MAX ? 0 : dp->pcur;
    float *buf = dp->pcur_buf;
    dp->pcur = SIZE_MAX;
    dp->pcur_buf = NULL;
    msr_status_t st = MSR_OK;
    for (; j < k && st == MSR_OK; j++, buf = NULL) {
        if (buf == NULL && (st = msr_params_acquire(dp->params_off, j, 1, &buf)) != MSR_OK)
            break;
        if (gathers(dp))
            st = gather_range(dp, dp->pf_off[j], dp->pf_off[j + 1], buf);
        msr_status_t rst = msr_params_release(dp->params_off, j, buf, st == MSR_OK);
        st = st != MSR_OK ? st : rst;
    }
    if (st == MSR_OK && k < (size_t)dp->pnb &&
        (st = msr_params_acquire(dp->params_off, k, 1, &buf)) == MSR_OK) {
        dp->pcur = k;
        dp->pcur_buf = buf;
    }
    return st;
}

/* The chunks done: the last block written back (dirty 0, after an error:
 * given back as it is); at ZeRO 1-2 the blocks after it, then the
 * resident elements, gathered from their owners. */
msr_status_t msr_dp_params_cursor_end(msr_dp_t *dp, int dirty)
{
    if (dp->params_off == NULL || (dp->pcur == SIZE_MAX && (!dirty || !gathers(dp))))
        return MSR_OK;
    if (!dirty) {
        float *buf = dp->pcur_buf;
        size_t k = dp->pcur;
        dp->pcur = SIZE_MAX;
        dp->pcur_buf = NULL;
        return msr_params_release(dp->params_off, k, buf, 0);
    }
    size_t hi = dp->pz_off != NULL ? 0 : dp->pf_off[dp->pnb];
    msr_status_t st = cursor_to(dp, (size_t)dp->pnb);
    if (st == MSR_OK && dp->pz_off != NULL) /* the next forward's first gather reads it */
        return msr_params_prefetch(dp->params_off, 0);
    if (st == MSR_OK && gathers(dp))
        st = gather_range(dp, 0, dp->pf_off[0], dp->model->params);
    if (st == MSR_OK && gathers(dp))
        st = gather_range(dp, hi, dp->model->num_params, dp->model->params + hi);
    return st;
}

/* ZeRO-3: as msr_dp_params_update_moments over shard elements [s, s + n):
 * the blocks' shares in their store buffers, the rest in the shard. */
static msr_status_t update_moments3(msr_dp_t *dp, size_t s, size_t n, const float *g, float *m,
                                    float *v)
{
    size_t L = (size_t)dp->pnb, lo = dp->pz_off[0], hi = dp->pz_off[L], e = s + n;
    size_t k = dp->pcur == SIZE_MAX ? 0 : dp->pcur;
    while (s < e) {
        size_t end = s < lo ? MSR_MIN(e, lo) : e;
        float *p = dp->pshard + s;
        if (s >= lo && s < hi) { /* in block k (the chunks come in order) */
            while (dp->pz_off[k + 1] <= s)
                k++;
            end = MSR_MIN(e, dp->pz_off[k + 1]);
            msr_status_t st = cursor_to(dp, k);
            if (st != MSR_OK)
                return st;
            p = dp->pcur_buf + (s - dp->pz_off[k]);
        }
        msr_adamw_update_moments(dp->opt, s, end - s, p, g, m, v);
        g += end - s;
        m += end - s;
        v += end - s;
        s = end;
    }
    return MSR_OK;
}

msr_status_t msr_dp_params_update_moments(msr_dp_t *dp, size_t s, size_t off, size_t n,
                                          const float *g, float *m, float *v)
{
    if (dp->pz_off != NULL)
        return update_moments3(dp, s, n, g, m, v);
    size_t lo = dp->pf_off[0], hi = dp->pf_off[dp->pnb], e = off + n;
    float *params = dp->model->params;
    while (off < e) {
        size_t end = off < lo ? MSR_MIN(e, lo) : e;
        float *p = params + off;
        if (off >= lo && off < hi) { /* in block k */
            size_t k = msr_dp_pf_block(dp, off);
            end = MSR_MIN(e, dp->pf_off[k + 1]);
            msr_status_t st = cursor_to(dp, k);
            if (st != MSR_OK)
                return st;
            p = dp->pcur_buf + (off - dp->pf_off[k]);
        }
        msr_adamw_update_moments(dp->opt, s, end - off, p, g, m, v);
        s += end - off;
        g += end - off;
        m += end - off;
        v += end - off;
        off = end;
    }
    return MSR_OK;
}
