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

/* A MoE model's passes are one sequence each, whatever the layout's
 * micro-batch (a MoE block's capacity depends on the tokens of a pass):
 * d becomes one sequence's for them (the frames' buffers, the work space
 * and the MoE state, sized for the step's, hold less), and tensor
 * parallel's overlap, which splits a micro-batch's sequences in two
 * copies, is off. dir 1 enters, 0 leaves (back to the step's). */
static void one_sequence(msr_mp_t *mp, int dir, int *overlap)
{
    if (dir) {
        msr_mp_config_t one = mp->cfg;
        one.micro_batch = 1;
        mp->d = msr_mp_dims(&mp->model->cfg, &one, mp->tp);
        *overlap = mp->cfg.tp_overlap;
        mp->cfg.tp_overlap = 0;
    } else {
        mp->d = mp->d_step;
        mp->cfg.tp_overlap = *overlap;
    }
    msr_mp_point_block(mp);
}

msr_status_t msr_mp_eval(msr_mp_t *mp, msr_dp_t *dp, const int *inputs, const int *targets,
                         int micros, double *loss_p)
{
    if (micros < 1 || micros > mp->cfg.micros)
        return msr_err(MSR_ERR_INVALID_ARG, "mp: %d micro-batches to evaluate (1 to %d)", micros,
                       mp->cfg.micros);
    msr_status_t st = settle(mp);
    if (st != MSR_OK)
        return st;
    /* passes: the micro-batches, or a MoE model's sequences; each pass
     * runs as micro-batch 0 (its frame, tags and sends), after the last
     * one settled */
    int B = mp->cfg.micro_batch, one = mp->model->moe != NULL && B > 1, overlap = 0;
    int passes = one ? micros * B : micros;
    if (one)
        one_sequence(mp, 1, &overlap);
    size_t N = mp->d.N, Ng = N * (size_t)mp->cp; /* a pass's tokens: this rank's, all */
    if (mp->cp > 1) {
        /* this rank's positions of every pass, as a step's */
        for (int p = 0; p < passes; p++) {
            msr_mp_cp_select(mp, inputs + (size_t)p * Ng, mp->cp_in + (size_t)p * N);
            msr_mp_cp_select(mp, targets + (size_t)p * Ng, mp->cp_tgt + (size_t)p * N);
        }
        inputs = mp->cp_in;
        targets = mp->cp_tgt;
    }
    int tracing = mp->tracing;
    mp->tracing = 0; /* the step's trace is the step's */
    mp->evaluating = 1;
    mp->dp = dp;
    mp->loss_sum = 0.0;
    mp->aux_sum = 0.0;
    (void)msr_dp_eval_begin(dp); /* a step's forward hooks are mp's own */
    for (int p = 0; p < passes && st == MSR_OK; p++) {
        mp->inputs = inputs + (size_t)p * N;
        mp->targets = targets + (size_t)p * N;
        st = forward_micro(mp, 0);
    }
    msr_status_t est = msr_dp_eval_end(dp);
    mp->tracing = tracing;
    mp->evaluating = 0;
    if (one)
        one_sequence(mp, 0, &overlap);
    if ((st = st != MSR_OK ? st : est) != MSR_OK)
        return st;
    /* as msr_mp_run's: a MoE model's load-balancing losses from every
     * stage; a micro-batch's mean is its sequences' mean */
    double sum = (mp->pr == mp->pp - 1 ? mp->loss_sum : 0.0) + mp->aux_sum;
    *loss_p = mp->tr != 0 ? 0.0 : one ? sum / B : sum;
    return MSR_OK;
}
