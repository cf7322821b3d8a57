/* The model's ends where tensor parallel splits the vocabulary, or
 * sequence or context parallel the sequence (see layers.h): the position
 * rows added to a rank's rows, the gradient rows of a vocabulary slice,
 * and the softmax cross-entropy over a split vocabulary in the pieces
 * between which the ranks sum their rows' maxima and sums. */
#include <math.h>
#include <string.h>

#include "model/layers.h"

/* the position of row t */
static int pos_of(const int *pos, int t0, int t)
{
    return pos != NULL ? pos[t] : t0 + t;
}

void msr_positions_forward(float *out, const float *x, const float *wpe, const int *pos, int t0,
                           int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *r = x + ((size_t)b * T + t) * C;
            const float *pe = wpe + (size_t)pos_of(pos, t0, t) * C;
            for (int c = 0; c < C; c++)
                o[c] = r[c] + pe[c];
        }
}

void msr_positions_backward(float *dwpe, const float *dout, const int *pos, int t0, int B, int T,
                            int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *pe = dwpe + (size_t)pos_of(pos, t0, t) * C;
            for (int c = 0; c < C; c++)
                pe[c] += d[c];
        }
}

void msr_embedding_backward_rows(float *dwte, const float *dout, const int *inp, int lo, int V,
                                 size_t N, int C)
{
    for (size_t n = 0; n < N; n++) {
        int v = inp[n] - lo;
        if (v < 0 || v >= V)
            continue;
        float *row = dwte + (size_t)v * C;
        const float *d = dout + n * C;
        for (int c = 0; c < C; c++)
            row[c] += d[c];
    }
}

void msr_vocab_max(float *rmax, const float *logits, size_t N, int V)
{
    for (size_t n = 0; n < N; n++) {
        const float *l = logits + n * (size_t)V;
        float mx = l[0];
        for (int i = 1; i < V; i++)
            mx = l[i] > mx ? l[i] : mx;
        rmax[n] = mx;
    }
}

void msr_vocab_exp_sums(float *probs, float *red, const float *logits, const float *rmax,
                        const int *targets, int lo, size_t N, int V)
{
    for (size_t n = 0; n < N; n++) {
        const float *l = logits + n * (size_t)V;
        float *p = probs + n * (size_t)V;
        memcpy(p, l, (size_t)V * sizeof *p);
        float sum = msr_softmax_exp_sum(p, rmax[n], (size_t)V); /* as one process's */
        int v = targets[n] - lo;
        red[n] = sum;
        red[N + n] = v >= 0 && v < V ? l[v] : 0.0f;
    }
}

void msr_vocab_loss(float *probs, float *losses, const float *rmax, const float *red, size_t N,
                    int V)
{
    for (size_t n = 0; n < N; n++) {
        float *p = probs + n * (size_t)V, inv = 1.0f / red[n];
        for (int i = 0; i < V; i++)
            p[i] *= inv;
        losses[n] = rmax[n] + logf(red[n]) - red[N + n];
    }
}

void msr_vocab_fold(float *M, float *S, float *Z, const float *m, const float *red, size_t N,
                    int first)
{
    const float *s = red, *z = red + N;
    for (size_t n = 0; n < N; n++) {
        if (first) {
            M[n] = m[n];
            S[n] = s[n];
            Z[n] = z[n];
        } else if (m[n] > M[n]) {
            S[n] = S[n] * expf(M[n] - m[n]) + s[n];
            M[n] = m[n];
            Z[n] += z[n];
        } else {
            S[n] += s[n] * expf(m[n] - M[n]);
            Z[n] += z[n];
        }
    }
}

void msr_vocab_crossentropy_backward(float *dlogits, const float *probs, const int *targets, int lo,
                                     float dloss, size_t N, int V)
{
    for (size_t n = 0; n < N; n++) {
        const float *p = probs + n * (size_t)V;
        float *dl = dlogits + n * (size_t)V;
        for (int i = 0; i < V; i++)
            dl[i] += p[i] * dloss;
        int v = targets[n] - lo;
        if (v >= 0 && v < V)
            dl[v] -= dloss;
    }
}
