/* Data parallel's parameters at the start, from the seed: in the flat
 * buffer or the shard (msr_dp_init_params), or with the blocks offloaded
 * straight into their file (msr_dp_params_seed). Every way gives the
 * numbers msr_gpt_init_params gives the whole model. */
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "parallel/dp_impl.h"

void msr_dp_init_params(msr_dp_t *dp, uint64_t seed)
{
    if (dp->cfg.zero < 3) {
        msr_gpt_init_params(dp->model, seed);
        return;
    }
    for (int k = 0; k < dp->num_units; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        msr_gpt_init_range(dp->model, seed, u->own_lo, u->own_lo + u->own_n,
                           dp->pshard + u->shard_off);
    }
}

/* ZeRO 0-2 at the start: the parameters from seed, the blocks' straight
 * into the file through one block's scratch buffer, so that the flat
 * buffer's blocks are never touched and a rank never holds every block,
 * not even at the start (under a memory limit of the parameters' bytes
 * it would not start). The same numbers as msr_gpt_init_params. */
static msr_status_t seed_all(msr_dp_t *dp, uint64_t seed)
{
    msr_gpt_t *m = dp->model;
    size_t L = (size_t)dp->pnb, lo = dp->pf_off[0], hi = dp->pf_off[L];
    msr_gpt_init_range(m, seed, 0, lo, m->params);
    msr_gpt_init_range(m, seed, hi, m->num_params, m->params + hi);
    float *tmp = msr_calloc(dp->pblk_n, sizeof(float));
    if (tmp == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for a block's parameters");
    msr_status_t st = MSR_OK;
    for (size_t l = 0; l < L && st == MSR_OK; l++) {
        /* a block shorter than the store's is put with zeros after it */
        size_t n = msr_dp_pf_count(dp, l);
        msr_gpt_init_range(m, seed, dp->pf_off[l], dp->pf_off[l + 1], tmp);
        memset(tmp + n, 0, (dp->pblk_n - n) * sizeof(float));
        st = msr_params_put(dp->params_off, l, tmp);
    }
    msr_free(tmp);
    return st;
}

/* ZeRO-3 at the start: the rank's shard from seed, as msr_dp_init_params
 * gives it, but each block's share straight into the file through one
 * share's scratch buffer, so that the shard's blocks are never touched
 * (seed_all's way, for the shard: seeding the whole shard first took
 * every page of it, 4 bytes a parameter over dp, before the blocks
 * left). */
static msr_status_t seed_z3(msr_dp_t *dp, uint64_t seed)
{
    msr_gpt_t *m = dp->model;
    size_t L = (size_t)dp->pnb, lo = dp->pz_off[0], hi = dp->pz_off[L];
    for (int k = 0; k < dp->num_units; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        if (u->own_n > 0 && (u->shard_off < lo || u->shard_off >= hi))
            msr_gpt_init_range(m, seed, u->own_lo, u->own_lo + u->own_n, dp->pshard + u->shard_off);
    }
    float *tmp = msr_calloc(dp->pblk_n, sizeof(float));
    if (tmp == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for a block's shard");
    msr_status_t st = MSR_OK;
    for (size_t b = 0; b < L && st == MSR_OK; b++) {
        const msr_dp_seg_t *G = &dp->segs[dp->pfb + (int)b];
        for (int k = G->u0; k < G->u1; k++) {
            const msr_dp_unit_t *u = &dp->units[k];
            msr_gpt_init_range(m, seed, u->own_lo, u->own_lo + u->own_n,
                               tmp + (u->shard_off - dp->pz_off[b]));
        }
        size_t n = msr_dp_z3_count(dp, b);
        memset(tmp + n, 0, (dp->pblk_n - n) * sizeof(float));
        st = msr_params_put(dp->params_off, b, tmp);
    }
    msr_free(tmp);
    return st;
}

msr_status_t msr_dp_params_seed(msr_dp_t *dp, uint64_t seed)
{
    return dp->pz_off != NULL ? seed_z3(dp, seed) : seed_all(dp, seed);
}
