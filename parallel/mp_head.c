/* The chunked head (train_gpt --head-chunk; layout.h msr_layout_head_chunk):
 * the logits of this rank's Vl vocabulary rows computed hc rows at a time,
 * so that no (N, Vl) buffer is held.
 *
 * Forward: each chunk's logits (N, n) = h · W[v0, v0 + n)^T, its row
 * maxima and sums of exponentials (msr_vocab_max, msr_vocab_exp_sums),
 * folded into the frame's running maximum M, sum S and target logit Z a
 * row (msr_vocab_fold, the online softmax). Under tp each rank folds its
 * slice, then the ranks' maxima are reduced to the largest, each rank's
 * sums rescaled to it and the sums and target logits summed. The loss is
 * M + log S - Z, msr_vocab_loss's.
 *
 * Backward: each chunk's logits again, its probabilities exp(l - M) / S
 * from the frame's M and S (the whole vocabulary's softmax), their
 * gradient (p - onehot) dloss, dh += dlogits · W_c and dW_c += dlogits^T
 * · h (msr_matmul_backward on the chunk's rows of the weights).
 *
 * With one chunk and tp = 1 every number is the whole head's, bitwise
 * (the same kernels in the same order as msr_crossentropy_forward and
 * _backward); with more chunks, the sums of exponentials and the products
 * summed over the vocabulary (dh) are added in another order. */
#include "base/err.h"
#include "model/kernels.h"
#include "parallel/mp_impl.h"

/* Chunk c's first row (this rank's slice) in *v0_p and its rows. */
static int chunk_rows(const dims_t *d, int c, int *v0_p)
{
    int v0 = c * d->hc;
    *v0_p = v0;
    return d->Vl - v0 < d->hc ? d->Vl - v0 : d->hc;
}

/* w->logits (N, n) = g · the head's rows [v0, v0 + n)^T. */
static msr_status_t chunk_logits(msr_mp_t *mp, const float *g, int v0, int n)
{
    const dims_t *d = &mp->d;
    const msr_kernels_t *k = msr_kernels_or_cpu(mp->model->kernels);
    const float *W = msr_mp_head_weights(mp, 0) + (size_t)v0 * (size_t)d->C;
    k->matmul_forward(mp->model->prod, mp->w.logits, g, W, NULL, (int)d->N, d->C, n);
    return msr_products_status(mp->model->prod);
}

/* Under tp: the ranks' folds into one. The frame's M is reduced to the
 * largest of the ranks', each rank's S rescaled to it (a fold of the
 * rank's own M, S and Z into M, 0, 0), then S and Z summed. */
static msr_status_t tp_combine(msr_mp_t *mp, float *M, float *S)
{
    const msr_kernels_t *k = msr_kernels_or_cpu(mp->model->kernels);
    work_t *w = &mp->w;
    size_t N = mp->d.N;
    /* the rank's own in rmax (M) and red (S, Z) */
    k->vocab_fold(w->rmax, w->red, w->red + N, M, S, N, 1);
    msr_status_t st = msr_mp_zero(mp, S, 2 * N);
    if (st != MSR_OK || (st = msr_mp_sync(mp)) != MSR_OK)
        return st;
    if ((st = msr_mp_tp_allreduce(mp, M, N, MSR_DTYPE_F32, MSR_OP_MAX, "max")) != MSR_OK)
        return st;
    k->vocab_fold(M, S, S + N, w->rmax, w->red, N, 0);
    return msr_mp_tp_allreduce(mp, S, 2 * N, MSR_DTYPE_F32, MSR_OP_SUM, "loss");
}

msr_status_t msr_mp_head_chunked_forward(msr_mp_t *mp, frame_t *f, const float *g,
                                         const int *targets)
{
    const dims_t *d = &mp->d;
    const msr_kernels_t *k = msr_kernels_or_cpu(mp->model->kernels);
    work_t *w = &mp->w;
    size_t N = d->N;
    float *M = f->probs, *S = M + N; /* M, S, Z (N each) */
    int chunks = (d->Vl + d->hc - 1) / d->hc, lo = mp->tr * d->Vl;
    msr_status_t st = MSR_OK;
    for (int c = 0; c < chunks; c++) {
        int v0, n = chunk_rows(d, c, &v0);
        if ((st = chunk_logits(mp, g, v0, n)) != MSR_OK)
            return st; /* a failed product, logged where it failed */
        /* w->dlogits holds the chunk's exponentials, unused here */
        k->vocab_max(w->rmax, w->logits, N, n);
        k->vocab_exp_sums(w->dlogits, w->red, w->logits, w->rmax, targets, lo + v0, N, n);
        k->vocab_fold(M, S, S + N, w->rmax, w->red, N, c == 0);
    }
    if (d->tp > 1 && (st = tp_combine(mp, M, S)) != MSR_OK)
        return st;
    k->vocab_loss(w->dlogits, w->losses, M, S, N, 0); /* the losses only */
    return MSR_OK;
}

msr_status_t msr_mp_head_chunked_backward(msr_mp_t *mp, frame_t *f, const float *g,
                                          const int *targets)
{
    const dims_t *d = &mp->d;
    const msr_kernels_t *k = msr_kernels_or_cpu(mp->model->kernels);
    work_t *w = &mp->w;
    size_t N = d->N, C = (size_t)d->C;
    const float *M = f->probs, *S = M + N;
    float *W = msr_mp_head_weights(mp, 0), *dW = msr_mp_head_weights(mp, 1);
    int chunks = (d->Vl + d->hc - 1) / d->hc, lo = mp->tr * d->Vl;
    msr_status_t st = MSR_OK;
    for (int c = 0; c < chunks; c++) {
        int v0, n = chunk_rows(d, c, &v0);
        if ((st = chunk_logits(mp, g, v0, n)) != MSR_OK)
            return st;
        /* p = exp(l - M) / S (w->red and w->losses: scratch) */
        k->vocab_exp_sums(w->dlogits, w->red, w->logits, M, targets, lo + v0, N, n);
        k->vocab_loss(w->dlogits, w->losses, M, S, N, n);
        if ((st = msr_mp_zero(mp, w->logits, N * (size_t)n)) != MSR_OK ||
            (st = msr_mp_sync(mp)) != MSR_OK)
            return st;
        /* w->logits now the chunk's gradient */
        k->vocab_crossentropy_backward(w->logits, w->dlogits, targets, lo + v0, mp->dloss, N, n);
        k->matmul_backward(mp->model->prod, w->dln, dW + (size_t)v0 * C, NULL, w->logits, g,
                           W + (size_t)v0 * C, (int)N, d->C, n);
        if ((st = msr_products_status(mp->model->prod)) != MSR_OK)
            return st;
    }
    return MSR_OK;
}
