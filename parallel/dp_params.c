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
            if ((st = msr_dp_xfer(dp, tmp, sh, msr_dp_z3_count(dp, k), MSR_DEVICE_D2H)) == MSR_OK &&
                (st = msr_dp_sync(dp)) == MSR_OK)
                st = msr_params_put(dp->params_off, k, tmp);
        } else if ((st = msr_params_get(dp->params_off, k, tmp)) == MSR_OK) {
            /* tmp is filled again next: the copy must have read it */
            if ((st = msr_dp_xfer(dp, sh, tmp, msr_dp_z3_count(dp, k), MSR_DEVICE_H2D)) == MSR_OK)
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

/* The direction in which to read ahead after segment s's block in the
 * pass (dp->pdir): the next block's when the pass reaches it, 0 past its
 * model chunk's end (an interleaved pipeline's next pass is often another
 * chunk's, which the runtime reads ahead itself, mp_run.c). */
static int next_dir(const msr_dp_t *dp, int s)
{
    int t = s + dp->pdir;
    const msr_gpt_segment_t *seg = dp->model->segments;
    return msr_dp_pf_seg(dp, t) >= 0 && seg[t].group == seg[s].group ? dp->pdir : 0;
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
    if (dp->params_off == NULL || dp->pflat || msr_dp_pf_seg(dp, s) < 0)
        return MSR_OK;
    return msr_params_prefetch(dp->params_off, (size_t)msr_dp_pf_seg(dp, s));
}

msr_status_t msr_dp_params_shard_begin(msr_dp_t *dp, int s, const float **src_p, size_t *off_p)
{
    *src_p = dp->pshard;
    *off_p = 0;
    if (dp->pz_off == NULL || dp->pflat || msr_dp_pf_seg(dp, s) < 0)
        return MSR_OK;
    size_t k = (size_t)msr_dp_pf_seg(dp, s);
    float *buf;
    msr_status_t st = msr_params_acquire(dp->params_off, k, next_dir(dp, s), &buf);
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
    size_t k = (size_t)msr_dp_pf_seg(dp, s);
    msr_status_t st = msr_params_release(dp->params_off, k, buf, 0);
    return st == MSR_OK ? z3_turn(dp, k) : st;
}

msr_status_t msr_dp_params_replicated(msr_dp_t *dp, int s, float **params_p)
{
    *params_p = dp->pshard + dp->units[dp->segs[s].u0].shard_off;
    if (dp->pz_off == NULL || dp->pflat || msr_dp_pf_seg(dp, s) < 0)
        return MSR_OK;
    if (dp->pheld[s] == NULL) {
        msr_status_t st = msr_params_acquire(dp->params_off, (size_t)msr_dp_pf_seg(dp, s),
                                             next_dir(dp, s), &dp->pheld[s]);
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
    int L = layers(dp), k = msr_dp_pf_seg(dp, s);
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
    st = msr_params_acquire(dp->params_off, (size_t)k, next_dir(dp, s), &buf);
    if (st != MSR_OK)
        return st;
    dp->pheld[s] = dp->model->segments[s].params = buf;
    return MSR_OK;
}

msr_status_t msr_dp_params_release(msr_dp_t *dp, int s)
{
    if (dp->params_off == NULL || dp->pflat || msr_dp_pf_seg(dp, s) < 0 || dp->pheld[s] == NULL)
        return MSR_OK;
    float *buf = dp->pheld[s];
    size_t k = (size_t)msr_dp_pf_seg(dp, s);
    dp->pheld[s] = dp->model->segments[s].params = NULL;
    msr_status_t st = msr_params_release(dp->params_off, k, buf, 0);
    return st == MSR_OK && dp->pz_off != NULL ? z3_turn(dp, k) : st;
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
