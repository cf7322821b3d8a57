/* Forwards alone on a rank's part of the model (see mp.h, msr_mp_eval):
 * the validation loss of a model-parallel job computed on the trainer's
 * own part, no whole model gathered. */
#include "base/err.h"
#include "parallel/mp_impl.h"

/* Every frame given back, every send landed: what a step starts from. */
static msr_status_t settle(msr_mp_t *mp)
{
    msr_status_t st = msr_mp_sends_wait(mp);
    for (size_t k = 0; k < (size_t)mp->cfg.micros * (size_t)mp->cfg.chunks; k++)
        msr_mp_frame_close(mp, &mp->frames[k]);
    return st;
}

/* Micro-batch m through this rank's chunks in order: each chunk's forward
 * (its input received, its output sent on), its send landed, its frame
 * given back (the frame holds what is sent). */
static msr_status_t forward_micro(msr_mp_t *mp, int m)
{
    msr_status_t st = MSR_OK;
    for (int c = 0; c < mp->cfg.chunks && st == MSR_OK; c++) {
        st = msr_mp_run_forward(mp, m, c);
        msr_status_t sst = settle(mp);
        st = st != MSR_OK ? st : sst;
    }
    return st;
}

msr_status_t msr_mp_eval(msr_mp_t *mp, msr_dp_t *dp, const int *inputs, const int *targets,
                         int micros, double *loss_p)
{
    if (mp->model->moe != NULL && (mp->cfg.micro_batch != 1 || mp->cp > 1))
        return msr_err(MSR_ERR_STATE,
                       "mp: forwards alone of a MoE model in micro-batches of more than one "
                       "sequence");
    if (micros < 1 || micros > mp->cfg.micros)
        return msr_err(MSR_ERR_INVALID_ARG, "mp: %d micro-batches to evaluate (1 to %d)", micros,
                       mp->cfg.micros);
    msr_status_t st = settle(mp);
    if (st != MSR_OK)
        return st;
    if (mp->cp > 1) {
        /* this rank's positions of every micro-batch, as a step's */
        size_t Ng = mp->d.N * (size_t)mp->cp;
        for (int m = 0; m < micros; m++) {
            msr_mp_cp_select(mp, inputs + (size_t)m * Ng, mp->cp_in + (size_t)m * mp->d.N);
            msr_mp_cp_select(mp, targets + (size_t)m * Ng, mp->cp_tgt + (size_t)m * mp->d.N);
        }
        inputs = mp->cp_in;
        targets = mp->cp_tgt;
    }
    int tracing = mp->tracing;
    mp->tracing = 0; /* the step's trace is the step's */
    mp->evaluating = 1;
    mp->inputs = inputs;
    mp->targets = targets;
    mp->dp = dp;
    mp->loss_sum = 0.0;
    mp->aux_sum = 0.0;
    (void)msr_dp_eval_begin(dp); /* a step's forward hooks are mp's own */
    for (int m = 0; m < micros && st == MSR_OK; m++)
        st = forward_micro(mp, m);
    msr_status_t est = msr_dp_eval_end(dp);
    mp->tracing = tracing;
    mp->evaluating = 0;
    if ((st = st != MSR_OK ? st : est) != MSR_OK)
        return st;
    /* as msr_mp_run's: a MoE model's load-balancing losses from every stage */
    *loss_p = mp->tr != 0 ? 0.0 : (mp->pr == mp->pp - 1 ? mp->loss_sum : 0.0) + mp->aux_sum;
    return MSR_OK;
}
