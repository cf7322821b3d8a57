/* Forwards alone between two steps on the model dp's hooks serve (see
 * dp.h, msr_dp_eval_begin): the validation loss computed on the
 * trainer's own model, its segments got as a step's forward gets them. */
#include "parallel/dp_impl.h"

const msr_gpt_hooks_t *msr_dp_eval_begin(msr_dp_t *dp)
{
    dp->eval_any_order = dp->any_order;
    dp->eval_pfirst = dp->pfirst;
    /* ZeRO-3's visit table is a step's (forward then backward): forwards
     * alone gather at each acquire and free at each release instead */
    dp->any_order = 1;
    dp->eval_hooks =
        (msr_gpt_hooks_t){dp, msr_dp_hook_acquire, msr_dp_hook_release, NULL, msr_dp_hook_poll};
    return &dp->eval_hooks;
}

/* The other module's first read of the next pass, a forward. */
static msr_status_t extra_ahead(msr_dp_t *dp)
{
    return msr_dp_extra_ahead(dp, 0, 1);
}

msr_status_t msr_dp_eval_forward(msr_dp_t *dp)
{
    /* the pass's first block read now, while the embeddings compute (the
     * embeddings' acquire then starts no read of its own) */
    dp->pfirst = 1;
    msr_status_t st = dp->pnb > 0 ? msr_dp_params_ahead(dp, dp->pfb) : MSR_OK;
    return st != MSR_OK ? st : extra_ahead(dp);
}

msr_status_t msr_dp_eval_end(msr_dp_t *dp)
{
    dp->any_order = dp->eval_any_order;
    dp->pfirst = dp->eval_pfirst;
    /* ZeRO-3's update leaves the next forward's first block read ahead;
     * the passes took it (at ZeRO 0-2 the forward's embeddings start it) */
    msr_status_t st = MSR_OK;
    if (dp->pz_off != NULL && dp->pnb > 0)
        st = msr_dp_params_ahead(dp, dp->pfb);
    return st != MSR_OK ? st : extra_ahead(dp);
}
