/* Data parallel's optimizer with its moments in a file (parallel/offload.h):
 * the step's AdamW a chunk of the shard space at a time, and the whole
 * moments brought in and out for checkpoints (see dp.h). */
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
    for (int k = 0; k < dp->num_units; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        size_t a = MSR_MAX(off, u->shard_off), b = MSR_MIN(off + n, u->shard_off + u->own_n);
        if (u->own_n == 0 || a >= b)
            continue;
        size_t in = a - u->shard_off;
        msr_status_t st = MSR_OK;
        if (dp->params_off != NULL) /* the blocks' in their buffers */
            st = msr_dp_params_update_moments(dp, a, u->own_lo + in, b - a,
                                              msr_dp_grad_at(dp, u) + in, m + (a - off),
                                              v + (a - off));
        else
            msr_adamw_update_moments(dp->opt, a, b - a, msr_dp_param_at(dp, u) + in,
                                     msr_dp_grad_at(dp, u) + in, m + (a - off), v + (a - off));
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

msr_status_t msr_dp_offload_hold(msr_dp_t *dp, int read)
{
    msr_status_t pst = msr_dp_params_hold(dp, read);
    if (pst != MSR_OK)
        return pst;
    if (dp->offload == NULL || dp->opt->m != NULL)
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
