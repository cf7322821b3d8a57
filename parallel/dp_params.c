/* Data parallel with the blocks' parameters in a file (dp.h,
 * parallel/offload_params.h): each block segment read ahead of its
 * forward and its backward through the hooks and dropped after, the
 * step's AdamW a block at a time, and the whole parameters brought back
 * into the flat buffer for checkpoints. */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "parallel/dp_impl.h"

/* The blocks of the part (a pipeline stage's), their segments
 * pfb .. pfb + pnb - 1. */
static int layers(const msr_dp_t *dp)
{
    return dp->pnb;
}

/* Segment s's block index in the store, or -1 when it is not a block. */
static int block_of(const msr_dp_t *dp, int s)
{
    return s >= dp->pfb && s < dp->pfb + dp->pnb ? s - dp->pfb : -1;
}

/* The blocks' elements of the flat buffer go back to the system (the
 * whole pages inside them); the blocks' segments point nowhere until a
 * hook acquires them. */
static void flat_drop(msr_dp_t *dp)
{
    msr_gpt_t *m = dp->model;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)(m->params + dp->pf_off[0]);
    uintptr_t b = (uintptr_t)(m->params + dp->pf_off[layers(dp)]);
    if (dp->pz_off != NULL) { /* ZeRO-3: the blocks' part of the shard */
        a = (uintptr_t)(dp->pshard + dp->pz_off[0]);
        b = (uintptr_t)(dp->pshard + dp->pz_off[layers(dp)]);
    }
    a = (a + page - 1) / page * page;
    b = b / page * page;
    if (b > a && madvise((void *)a, b - a, MADV_DONTNEED) != 0)
        MSR_WARN("offload: the blocks' parameters stay resident (madvise failed)");
    for (int l = 0; l < layers(dp); l++)
        m->segments[dp->pfb + l].params = NULL;
    dp->pflat = 0;
}

/* A copy of n floats between dp's device memory (the shard, the
 * allgather's buffer) and the host (the offload store's buffers, the
 * model's flat buffer), kind saying which way, on the device's default
 * stream: the host reads or reuses either side only after msr_dp_sync. */
static msr_status_t xfer(msr_dp_t *dp, float *dst, const float *src, size_t n,
                         msr_device_copy_t kind)
{
    return msr_device_copy(dp->dev, dst, src, n * sizeof(float), kind, NULL);
}

/* ZeRO-3: block k's owned elements between the shard buffer (dp's device)
 * and the store (put 1: into the store; 0: back), through a host scratch
 * buffer of the store's block size (the blocks' shares differ by a few
 * elements). */
static msr_status_t z3_move(msr_dp_t *dp, int put)
{
    size_t L = (size_t)layers(dp);
    float *tmp = msr_calloc(dp->pblk_n, sizeof(float));
    if (tmp == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory moving a block's shard");
    msr_status_t st = MSR_OK;
    for (size_t k = 0; k < L && st == MSR_OK; k++) {
        float *sh = dp->pshard + dp->pz_off[k];
        if (put) {
            if ((st = xfer(dp, tmp, sh, msr_dp_z3_count(dp, k), MSR_DEVICE_D2H)) == MSR_OK &&
                (st = msr_dp_sync(dp)) == MSR_OK)
                st = msr_params_put(dp->params_off, k, tmp);
        } else if ((st = msr_params_get(dp->params_off, k, tmp)) == MSR_OK) {
            /* tmp is filled again next: the copy must have read it */
            if ((st = xfer(dp, sh, tmp, msr_dp_z3_count(dp, k), MSR_DEVICE_H2D)) == MSR_OK)
                st = msr_dp_sync(dp);
        }
    }
    msr_free(tmp);
    return st;
}

/* Below ZeRO-3: block k's parameters into the store from src, and out of
 * it into dst (msr_dp_pf_count floats either), through tmp (a store
 * block's floats) when the block is shorter than the store's: its
 * elements after the block's are zeros in the file. */
static msr_status_t put_flat(msr_dp_t *dp, size_t k, const float *src, float *tmp)
{
    size_t n = msr_dp_pf_count(dp, k);
    if (n == dp->pblk_n)
        return msr_params_put(dp->params_off, k, src);
    memcpy(tmp, src, n * sizeof(float));
    memset(tmp + n, 0, (dp->pblk_n - n) * sizeof(float));
    return msr_params_put(dp->params_off, k, tmp);
}

static msr_status_t get_flat(msr_dp_t *dp, size_t k, float *dst, float *tmp)
{
    size_t n = msr_dp_pf_count(dp, k);
    if (n == dp->pblk_n)
        return msr_params_get(dp->params_off, k, dst);
    msr_status_t st = msr_params_get(dp->params_off, k, tmp);
    if (st == MSR_OK)
        memcpy(dst, tmp, n * sizeof(float));
    return st;
}

/* A block's scratch buffer for put_flat and get_flat in *tmp_p, where a
 * block is shorter than the store's (else NULL: none is read). */
static msr_status_t block_tmp(const msr_dp_t *dp, float **tmp_p)
{
    size_t L = (size_t)layers(dp);
    *tmp_p = NULL;
    if (dp->pf_off[L] - dp->pf_off[0] == L * dp->pblk_n)
        return MSR_OK;
    if ((*tmp_p = msr_malloc(dp->pblk_n * sizeof(float))) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for a block's parameters");
    return MSR_OK;
}

/* Every block from the flat buffer (ZeRO-3: the shard) into the file. */
static msr_status_t put_all(msr_dp_t *dp)
{
    if (dp->pz_off != NULL)
        return z3_move(dp, 1);
    float *tmp;
    msr_status_t st = block_tmp(dp, &tmp);
    for (int l = 0; l < layers(dp) && st == MSR_OK; l++)
        st = put_flat(dp, (size_t)l, dp->model->params + dp->pf_off[l], tmp);
    msr_free(tmp);
    return st;
}

/* ZeRO-3: each block's owned elements, contiguous in the shard space
 * (the units are in flat order: all of a replicated block's), and the
 * store's block size, the largest share. */
static msr_status_t z3_layout(msr_dp_t *dp)
{
    size_t L = (size_t)layers(dp);
    if ((dp->pz_off = msr_calloc(L + 1, sizeof *dp->pz_off)) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory");
    dp->pblk_n = 1;
    for (size_t k = 0; k < L; k++) {
        const msr_dp_seg_t *G = &dp->segs[dp->pfb + (int)k];
        if (G->u0 < 0)
            return msr_err(MSR_ERR_CONFIG, "dp: block %zu has no parameters", k);
        const msr_dp_unit_t *last = &dp->units[G->u1 - 1];
        dp->pz_off[k] = dp->units[G->u0].shard_off;
        dp->pz_off[k + 1] = last->shard_off + last->own_n;
        dp->pblk_n = MSR_MAX(dp->pblk_n, msr_dp_z3_count(dp, k));
    }
    return MSR_OK;
}

msr_status_t msr_dp_params_attach(msr_dp_t *dp, uint64_t seed)
{
    const msr_offload_config_t *cfg = &dp->cfg.params_offload;
    if (cfg->mode == MSR_OFFLOAD_NONE)
        return MSR_OK;
    msr_gpt_t *m = dp->model;
    int z3 = dp->cfg.zero >= 3, held = z3 ? dp->pshard != NULL : m->params != NULL;
    /* a part's segments: [embeddings] blocks... [final norm] */
    dp->pfb = m->seg_embed >= 0 ? m->seg_embed + 1 : 0;
    dp->pnb = m->num_segments - dp->pfb - (m->seg_lnf >= 0);
    int L = dp->pnb;
    if (cfg->mode != MSR_OFFLOAD_DISK || !held || L < 1 ||
        (m->seg_lnf >= 0 && m->seg_lnf != dp->pfb + L))
        return msr_err(MSR_ERR_CONFIG, "dp: the parameters' offload takes the disk and a "
                                       "model's blocks");
    dp->pcur = SIZE_MAX;
    dp->pdir = 1;
    if ((dp->pf_off = msr_calloc((size_t)L + 1, sizeof *dp->pf_off)) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory");
    dp->pf_off[0] = m->segments[dp->pfb].offset;
    dp->pblk_n = 1;
    for (int l = 0; l < L; l++) {
        const msr_gpt_segment_t *S = &m->segments[dp->pfb + l];
        if (S->offset != dp->pf_off[l] || S->count == 0)
            return msr_err(MSR_ERR_CONFIG, "dp: the parameters' offload needs the blocks one "
                                           "after another in the flat buffer");
        dp->pf_off[l + 1] = S->offset + S->count;
        dp->pblk_n = MSR_MAX(dp->pblk_n, S->count);
    }
    msr_status_t st = z3 ? z3_layout(dp) : MSR_OK;
    if (st != MSR_OK)
        return st;
    if ((dp->pheld = msr_calloc((size_t)m->num_segments, sizeof *dp->pheld)) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory");
    st = msr_params_create(cfg, dp->pblk_n, (size_t)L, &dp->params_off);
    if (st == MSR_OK)
        st = msr_dp_params_seed(dp, seed);
    if (st == MSR_OK && z3) /* the first forward's first gather reads it */
        st = msr_params_prefetch(dp->params_off, 0);
    if (st != MSR_OK)
        return st;
    flat_drop(dp);
    dp->cfg.params_offload.dir = NULL; /* the store keeps its copy */
    MSR_INFO("offload: the parameters of %d blocks of %zu elements%s in %s (%s)", L, dp->pblk_n,
             z3 ? " (this rank's shard)" : "", msr_params_path(dp->params_off),
             msr_params_engine(dp->params_off));
    return MSR_OK;
}

void msr_dp_params_detach(msr_dp_t *dp)
{
    msr_params_destroy(dp->params_off);
    dp->params_off = NULL;
    msr_free(dp->pheld);
    dp->pheld = NULL;
    msr_free(dp->pz_off);
    dp->pz_off = NULL;
    msr_free(dp->pf_off);
    dp->pf_off = NULL;
    msr_free(dp->pload_buf);
    dp->pload_buf = NULL;
}

size_t msr_dp_params_moved(const msr_dp_t *dp)
{
    if (dp->params_off == NULL)
        return 0;
    if (dp->pz_off != NULL)
        return (dp->pz_off[layers(dp)] - dp->pz_off[0]) * sizeof(float);
    return (dp->pf_off[layers(dp)] - dp->pf_off[0]) * sizeof(float);
}

/* ZeRO-3: block k given back; where a pass turns, the block the next
 * pass reads first is read ahead now: forward's last block is
 * backward's first; backward's last (block 0) is the next micro-batch's
 * forward's first, or the update's. */
static msr_status_t z3_turn(msr_dp_t *dp, size_t k)
{
    size_t L = (size_t)layers(dp);
    if ((dp->pdir > 0 && k == L - 1) || (dp->pdir < 0 && k == 0))
        return msr_params_prefetch(dp->params_off, k);
    return MSR_OK;
}

msr_status_t msr_dp_params_ahead(msr_dp_t *dp, int s)
{
    if (dp->params_off == NULL || dp->pflat || block_of(dp, s) < 0)
        return MSR_OK;
    return msr_params_prefetch(dp->params_off, (size_t)block_of(dp, s));
}

msr_status_t msr_dp_params_shard_begin(msr_dp_t *dp, int s, const float **src_p, size_t *off_p)
{
    *src_p = dp->pshard;
    *off_p = 0;
    if (dp->pz_off == NULL || dp->pflat || block_of(dp, s) < 0)
        return MSR_OK;
    size_t k = (size_t)block_of(dp, s);
    float *buf;
    msr_status_t st = msr_params_acquire(dp->params_off, k, dp->pdir, &buf);
    if (st != MSR_OK)
        return st;
    dp->pz_buf = buf;
    *src_p = buf;
    *off_p = dp->pz_off[k];
    return MSR_OK;
}

msr_status_t msr_dp_params_shard_end(msr_dp_t *dp, int s)
{
    if (dp->pz_buf == NULL)
        return MSR_OK;
    float *buf = dp->pz_buf;
    dp->pz_buf = NULL;
    size_t k = (size_t)block_of(dp, s);
    msr_status_t st = msr_params_release(dp->params_off, k, buf, 0);
    return st == MSR_OK ? z3_turn(dp, k) : st;
}

msr_status_t msr_dp_params_replicated(msr_dp_t *dp, int s, float **params_p)
{
    *params_p = dp->pshard + dp->units[dp->segs[s].u0].shard_off;
    if (dp->pz_off == NULL || dp->pflat || block_of(dp, s) < 0)
        return MSR_OK;
    if (dp->pheld[s] == NULL) {
        msr_status_t st =
            msr_params_acquire(dp->params_off, (size_t)block_of(dp, s), dp->pdir, &dp->pheld[s]);
        if (st != MSR_OK)
            return st;
    }
    *params_p = dp->pheld[s];
    return MSR_OK;
}

msr_status_t msr_dp_params_acquire(msr_dp_t *dp, int s, msr_gpt_pass_t pass)
{
    if (dp->params_off == NULL || dp->pflat)
        return MSR_OK;
    dp->pdir = pass == MSR_GPT_FORWARD ? 1 : -1;
    if (dp->pz_off != NULL) /* ZeRO-3: the gathers read the blocks */
        return MSR_OK;
    int L = layers(dp), k = block_of(dp, s);
    const msr_gpt_t *m = dp->model;
    msr_status_t st = MSR_OK;
    /* the pass's first block read while the embeddings (forward) or the
     * head (backward) compute; a forward's visit of the embeddings after
     * its final norm's (the tied head) is not the embeddings', and the
     * model-parallel runtime's forward visits neither; a stage without
     * them reads a pass's first block when the pass asks for it */
    if (pass == MSR_GPT_FORWARD && s == m->seg_embed) {
        if (!dp->pfirst)
            st = msr_params_prefetch(dp->params_off, 0);
        dp->pfirst = 0;
    } else if (pass == MSR_GPT_FORWARD && s == m->seg_lnf) {
        dp->pfirst = 1;
    } else if (pass == MSR_GPT_BACKWARD && s == m->seg_lnf) {
        st = msr_params_prefetch(dp->params_off, (size_t)L - 1);
        dp->pfirst = 0;
    }
    if (st != MSR_OK || k < 0)
        return st;
    float *buf;
    st = msr_params_acquire(dp->params_off, (size_t)k, pass == MSR_GPT_FORWARD ? 1 : -1, &buf);
    if (st != MSR_OK)
        return st;
    dp->pheld[s] = dp->model->segments[s].params = buf;
    return MSR_OK;
}

msr_status_t msr_dp_params_release(msr_dp_t *dp, int s)
{
    if (dp->params_off == NULL || dp->pflat || block_of(dp, s) < 0 || dp->pheld[s] == NULL)
        return MSR_OK;
    float *buf = dp->pheld[s];
    size_t k = (size_t)block_of(dp, s);
    dp->pheld[s] = dp->model->segments[s].params = NULL;
    msr_status_t st = msr_params_release(dp->params_off, k, buf, 0);
    return st == MSR_OK && dp->pz_off != NULL ? z3_turn(dp, k) : st;
}

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
            st = xfer(dp, buf + c, base + (a - lo), e - a, MSR_DEVICE_H2D);
        else if (buf != NULL)
            st = xfer(dp, base + (a - lo), buf + c, e - a, MSR_DEVICE_D2H);
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
    size_t L = (size_t)layers(dp), lo = dp->pf_off[0], hi = dp->pf_off[L];
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
    int L = layers(dp);
    for (int k = 0; k < dp->num_units; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        if (u->own_n > 0 && block_of(dp, u->seg) < 0)
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
    size_t L = (size_t)layers(dp), lo = dp->pf_off[0], hi = dp->pf_off[L];
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
    if (st == MSR_OK && k < (size_t)layers(dp) &&
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
    size_t hi = dp->pz_off != NULL ? 0 : dp->pf_off[layers(dp)];
    msr_status_t st = cursor_to(dp, (size_t)layers(dp));
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
    size_t L = (size_t)layers(dp), lo = dp->pz_off[0], hi = dp->pz_off[L], e = s + n;
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
    size_t lo = dp->pf_off[0], hi = dp->pf_off[layers(dp)], e = off + n;
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

msr_status_t msr_dp_params_gather(msr_dp_t *dp, float *out)
{
    const float *p = dp->model->params;
    size_t L = (size_t)layers(dp), lo = dp->pf_off[0], hi = dp->pf_off[L];
    if (dp->pflat) {
        memcpy(out, p, dp->model->num_params * sizeof(float));
        return MSR_OK;
    }
    memcpy(out, p, lo * sizeof(float));
    memcpy(out + hi, p + hi, (dp->model->num_params - hi) * sizeof(float));
    float *tmp;
    msr_status_t st = block_tmp(dp, &tmp);
    for (size_t k = 0; k < L && st == MSR_OK; k++)
        st = get_flat(dp, k, out + dp->pf_off[k], tmp);
    msr_free(tmp);
    return st;
}

/* For checkpoints (dp_offload.c's hold and drop): the blocks into the
 * flat buffer (read 0, for a restore to fill: below ZeRO-3 never, the
 * restore fills a block at a time, msr_dp_params_load_begin), the
 * segments pointed there; and back into the file. */
msr_status_t msr_dp_params_hold(msr_dp_t *dp, int read)
{
    if (dp->params_off == NULL || dp->pflat || dp->pload_buf != NULL)
        return MSR_OK;
    if (!read) /* a restore: its pieces fill a block at a time */
        return msr_dp_params_load_begin(dp);
    msr_gpt_t *m = dp->model;
    msr_status_t st = MSR_OK;
    if (dp->pz_off != NULL) {
        st = z3_move(dp, 0);
        dp->pflat = 1;
        if (st != MSR_OK)
            flat_drop(dp);
        return st;
    }
    float *tmp;
    if ((st = block_tmp(dp, &tmp)) != MSR_OK)
        return st;
    if (!read)
        msr_params_count_restore(dp->params_off, msr_dp_params_moved(dp));
    for (int l = 0; l < layers(dp) && st == MSR_OK; l++) {
        if (read)
            st = get_flat(dp, (size_t)l, m->params + dp->pf_off[l], tmp);
        msr_gpt_segment_reset(m, dp->pfb + l);
    }
    msr_free(tmp);
    dp->pflat = 1;
    if (st != MSR_OK)
        flat_drop(dp);
    return st;
}

msr_status_t msr_dp_params_drop(msr_dp_t *dp, int write)
{
    if (dp->pload_buf != NULL) {
        msr_status_t st = msr_dp_params_load_end(dp, write);
        if (st == MSR_OK && dp->pz_off != NULL) /* the next forward's first gather reads it */
            st = msr_params_prefetch(dp->params_off, 0);
        return st;
    }
    if (dp->params_off == NULL || !dp->pflat)
        return MSR_OK;
    msr_status_t st = write ? put_all(dp) : MSR_OK;
    flat_drop(dp);
    if (st == MSR_OK && dp->pz_off != NULL) /* the next forward's first gather reads it */
        st = msr_params_prefetch(dp->params_off, 0);
    return st;
}

const msr_params_t *msr_dp_params_store(const msr_dp_t *dp)
{
    return dp->params_off;
}
