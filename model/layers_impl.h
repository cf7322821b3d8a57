/* The body of the layer kernels (documented in layers.h), written once for
 * the scalar type `real`. layers.c includes this file twice: with real =
 * float and LAYER(name) = msr_name, and with real = double and LAYER(name) =
 * msr_name_f64. GEMM(pr, ...) is msr_products_sgemm (the products context
 * pr picks fp32 or bf16 operands) or cblas_dgemm (pr dropped); PRODUCTS is
 * the float kernels' leading `msr_products_t *pr,` parameter and nothing in
 * double. OPERAND and OPERAND_AGAIN are msr_products_operand and _again
 * (NULL and nothing in double), ROUND(dst, at, src, n) rounds src's n
 * elements into dst + at unless dst is NULL (nothing in double): a kernel
 * rounds what it writes for the product that reads it next. HOLD and
 * RELEASE are msr_products_hold and _release (nothing in double). The math
 * functions come from <tgmath.h>, so exp(x) is expf(x) for a float x;
 * constants are cast to real (R(...)) so no expression silently widens to
 * double in the float build.
 *
 * No include guard: meant to be included more than once. */

/* out[b,t,:] = wte[inp[b,t],:] + wpe[t,:] */
void LAYER(encoder_forward)(real *out, const int *inp, const real *wte, const real *wpe, int B,
                            int T, int C)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            real *o = out + ((size_t)b * T + t) * C;           /* (C) */
            const real *we = wte + (size_t)inp[b * T + t] * C; /* (C) */
            const real *pe = wpe + (size_t)t * C;              /* (C) */
            for (int c = 0; c < C; c++)
                o[c] = we[c] + pe[c];
        }
    }
}

void LAYER(encoder_backward)(real *dwte, real *dwpe, const real *dout, const int *inp, int B, int T,
                             int C)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const real *d = dout + ((size_t)b * T + t) * C; /* (C) */
            real *dwe = dwte + (size_t)inp[b * T + t] * C;  /* (C) */
            real *dpe = dwpe + (size_t)t * C;               /* (C) */
            for (int c = 0; c < C; c++) {
                dwe[c] += d[c];
                dpe[c] += d[c];
            }
        }
    }
}

#ifndef LAYERS_OWN_NORM /* float has its own (model/norm.c) */
void LAYER(layernorm_forward)(real *out, real *mean, real *rstd, const real *inp,
                              const real *weight, const real *bias, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * C; /* (C) */
        real *o = out + (size_t)n * C;       /* (C) */
        real m = 0;
        for (int c = 0; c < C; c++)
            m += x[c];
        m = m / (real)C;
        real v = 0;
        for (int c = 0; c < C; c++) {
            real d = x[c] - m;
            v += d * d;
        }
        v = v / (real)C;
        real s = R(1) / sqrt(v + R(MSR_LAYERNORM_EPS));
        for (int c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

/* With xhat = (x - mean) * rstd and g = dout * weight:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). */
void LAYER(layernorm_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                               const real *inp, const real *weight, const real *mean,
                               const real *rstd, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * C;  /* (C) */
        const real *d = dout + (size_t)n * C; /* (C) */
        real *dx = dinp + (size_t)n * C;      /* (C) */
        real m = mean[n], s = rstd[n];
        real gmean = 0, gxmean = 0;
        for (int c = 0; c < C; c++) {
            real xhat = (x[c] - m) * s;
            real g = d[c] * weight[c];
            gmean += g;
            gxmean += g * xhat;
        }
        gmean = gmean / (real)C;
        gxmean = gxmean / (real)C;
        for (int c = 0; c < C; c++) {
            real xhat = (x[c] - m) * s;
            real g = d[c] * weight[c];
            dbias[c] += d[c];
            dweight[c] += xhat * d[c];
            dx[c] += s * (g - gmean - xhat * gxmean);
        }
    }
}
#endif

void LAYER(matmul_forward)(PRODUCTS real *out, const real *inp, const real *weight,
                           const real *bias, int N, int IC, int OC)
{
#ifdef LINEAR /* float: msr_products_linear, the bias folded in on bf16 */
    LINEAR(pr, out, inp, weight, bias, N, IC, OC);
#else
    /* start from the bias (or zero), then out += inp @ weight^T */
    for (int n = 0; n < N; n++) {
        real *o = out + (size_t)n * OC; /* (OC) */
        for (int j = 0; j < OC; j++)
            o[j] = bias != NULL ? bias[j] : R(0);
    }
    GEMM(pr, CblasNoTrans, CblasTrans, N, OC, IC, R(1), inp, IC, weight, IC, R(1), out, OC);
#endif
}

/* dbias (OC) += the column sums of dout (N,OC), each column summed in row
 * order. Row by row, dbias staying in the L1 cache as dout streams past,
 * BIAS_BLOCK columns at a time in a loop of a fixed length over arrays
 * that do not overlap, which the compiler turns into vector adds (a plain
 * loop it would not, for want of a runtime alias check): the same bits as
 * the plain loop, several columns an add. */
#define BIAS_BLOCK 16
static void LAYER(bias_backward)(real *restrict dbias, const real *restrict dout, int N, int OC)
{
    int J = OC - OC % BIAS_BLOCK; /* the whole blocks' columns */
    for (int n = 0; n < N; n++) {
        const real *restrict d = dout + (size_t)n * OC; /* (OC) */
        for (int j0 = 0; j0 < J; j0 += BIAS_BLOCK)
            for (int j = 0; j < BIAS_BLOCK; j++)
                dbias[j0 + j] += d[j0 + j];
        for (int j = J; j < OC; j++)
            dbias[j] += d[j];
    }
}
#undef BIAS_BLOCK

/* matmul_backward with dinp = dout @ weight + beta dinp (beta 1 or 0) */
static void LAYER(linear_backward)(PRODUCTS real beta, real *dinp, real *dweight, real *dbias,
                                   const real *dout, const real *inp, const real *weight, int N,
                                   int IC, int OC)
{
#ifdef LINEAR_BACKWARD /* float: dout rounded once for both on bf16 */
    LINEAR_BACKWARD(pr, beta, dinp, dweight, dout, inp, weight, N, IC, OC);
#else
    /* dinp (N,IC) = dout (N,OC) @ weight (OC,IC) + beta dinp */
    GEMM(pr, CblasNoTrans, CblasNoTrans, N, IC, OC, R(1), dout, OC, weight, IC, beta, dinp, IC);
    /* dweight (OC,IC) += dout^T (OC,N) @ inp (N,IC) */
    GEMM(pr, CblasTrans, CblasNoTrans, OC, IC, N, R(1), dout, OC, inp, IC, R(1), dweight, IC);
#endif
    if (dbias != NULL)
        LAYER(bias_backward)(dbias, dout, N, OC);
}

void LAYER(matmul_backward)(PRODUCTS real *dinp, real *dweight, real *dbias, const real *dout,
                            const real *inp, const real *weight, int N, int IC, int OC)
{
    LAYER(linear_backward)(PASS_PR R(1), dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

#include "model/rows_impl.h" /* the softmax rows' kernels */

/* Per batch row b and head h, with Q the head's (T,HS) column block of qkv
 * and K, V those of its key/value head h / (NH/KVH):
 *   pre = Q K^T / sqrt(HS)          (T,T)
 *   att = softmax over j <= i of pre[i, j], 0 for j > i
 *   out = att V                     (T,HS) into the head's columns of out
 * qkv (B,T,C + 2 KVC) is laid out [q (C) | k (KVC) | v (KVC)], KVC = KVH *
 * HS; KVH = NH is multi-head attention, [q | k | v] of width 3C.
 * The products skip the masked triangle a block of ATT_ROWS rows at a
 * time: rows [r0, r0 + m) of pre and att need keys [0, r0 + m) only, so
 * each block's products run on that rectangle (at T = 4 ATT_ROWS, 5/8 of
 * the square), the part of the diagonal block above it computed and thrown
 * away. The keys left out would add exact zeros (att is 0 there), so the
 * sums are the full square's. */
#define ATT_ROWS 64
/* the keys that row i's block of ATT_ROWS rows reads: [0, this) */
#define ATT_KEYS(i, T) \
    ((i) - (i) % ATT_ROWS + ATT_ROWS < (T) ? (i) - (i) % ATT_ROWS + ATT_ROWS : (T))
void LAYER(attention_gqa_forward)(PRODUCTS real *out, real *att, const real *qkv, int B, int T,
                                  int C, int NH, int KVH)
{
    int HS = C / NH, G = NH / KVH;
    int KVC = KVH * HS, C3 = C + 2 * KVC;
    real scale = R(1) / sqrt((real)HS);
    /* q, k and v rounded once for every head's blocks */
    HOLD(pr, 0, qkv, (size_t)B * T * C3);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const real *row0 = qkv + (size_t)b * T * C3;        /* (T,C3) */
            const real *q = row0 + (size_t)h * HS;              /* (T,HS), row stride C3 */
            const real *k = row0 + C + (size_t)(h / G) * HS;    /* (T,HS), row stride C3 */
            const real *v = k + KVC;                            /* (T,HS), row stride C3 */
            real *a = att + ((size_t)b * NH + h) * T * T;       /* (T,T) */
            real *o = out + (size_t)b * T * C + (size_t)h * HS; /* (T,HS), row stride C */
            for (int r0 = 0; r0 < T; r0 += ATT_ROWS) {
                int m = T - r0 < ATT_ROWS ? T - r0 : ATT_ROWS; /* rows [r0, r0 + m) */
                GEMM(pr, CblasNoTrans, CblasTrans, m, r0 + m, HS, scale, q + (size_t)r0 * C3, C3, k,
                     C3, R(0), a + (size_t)r0 * T, T);
            }
            /* each row rounded as it is finished, for att V's blocks: to
             * the end of its block's keys, all that they read of it */
            uint16_t *a16 = OPERAND(pr, a, (size_t)T * T);
            for (int i = 0; i < T; i++) {
                real *row = a + (size_t)i * T; /* (T) */
                real mx = LAYER(row_max)(row, i + 1);
                real sum = LAYER(row_exp_sum)(row, mx, i + 1);
                LAYER(row_scale)(row, R(1) / sum, i + 1);
                for (int j = i + 1; j < T; j++)
                    row[j] = 0;
                ROUND(a16, (size_t)i * T, row, (size_t)ATT_KEYS(i, T));
            }
            for (int r0 = 0; r0 < T; r0 += ATT_ROWS) {
                int m = T - r0 < ATT_ROWS ? T - r0 : ATT_ROWS;
                if (r0 > 0)
                    OPERAND_AGAIN(pr, a, (size_t)T * T);
                GEMM(pr, CblasNoTrans, CblasNoTrans, m, HS, r0 + m, R(1), a + (size_t)r0 * T, T, v,
                     C3, R(0), o + (size_t)r0 * C, C);
            }
        }
    }
    RELEASE(pr, 0);
}

void LAYER(attention_forward)(PRODUCTS real *out, real *att, const real *qkv, int B, int T, int C,
                              int NH)
{
    LAYER(attention_gqa_forward)(PASS_PR out, att, qkv, B, T, C, NH, NH);
}

/* Backward of the above, per (b, h):
 *   datt  = dout V^T                                   (T,T)
 *   dpre  = att * (datt - rowsum(att * datt))          softmax backward
 *   dQ   += dpre K / sqrt(HS),  dK += dpre^T Q / sqrt(HS),  dV += att^T dout
 * att is zero above the diagonal, so the masked entries of dpre are zero.
 * The NH/KVH query heads of a key/value head add up in its dK and dV.
 * As in forward, the products skip the masked triangle by blocks of
 * ATT_ROWS: datt's and dQ's row blocks need keys [0, r0 + m), dK's and
 * dV's row blocks (keys [c0, c0 + m)) need queries [c0, T).
 * Each block of dQ, and of dK and dV for the first query head of their
 * key/value head, is one product's: with beta 0 there, dqkv is written
 * (its old contents never read), with beta 1 added to. */
static void LAYER(attention_backward_beta)(PRODUCTS real beta, real *dqkv, real *scratch,
                                           const real *dout, const real *qkv, const real *att,
                                           int B, int T, int C, int NH, int KVH)
{
    int HS = C / NH, G = NH / KVH;
    int KVC = KVH * HS, C3 = C + 2 * KVC;
    real scale = R(1) / sqrt((real)HS);
    /* q, k, v and dout rounded once for every head's blocks */
    HOLD(pr, 0, qkv, (size_t)B * T * C3);
    HOLD(pr, 1, dout, (size_t)B * T * C);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            size_t qoff = (size_t)b * T * C3 + (size_t)h * HS;
            size_t koff = (size_t)b * T * C3 + C + (size_t)(h / G) * HS;
            const real *q = qkv + qoff;                                /* (T,HS), stride C3 */
            const real *k = qkv + koff;                                /* (T,HS), stride C3 */
            const real *v = k + KVC;                                   /* (T,HS), stride C3 */
            real *dq = dqkv + qoff;                                    /* (T,HS), stride C3 */
            real *dk = dqkv + koff;                                    /* (T,HS), stride C3 */
            real *dv = dk + KVC;                                       /* (T,HS), stride C3 */
            const real *a = att + ((size_t)b * NH + h) * T * T;        /* (T,T) */
            const real *d = dout + (size_t)b * T * C + (size_t)h * HS; /* (T,HS), stride C */
            real *da = scratch;                                        /* (T,T) */
            real kv_beta = h % G == 0 ? beta : R(1); /* the group's later heads add */
            for (int r0 = 0; r0 < T; r0 += ATT_ROWS) {
                int m = T - r0 < ATT_ROWS ? T - r0 : ATT_ROWS;
                GEMM(pr, CblasNoTrans, CblasTrans, m, r0 + m, HS, R(1), d + (size_t)r0 * C, C, v,
                     C3, R(0), da + (size_t)r0 * T, T);
            }
            /* each row of dpre rounded as it is finished, for both of its
             * products (dQ's, then dK's on its transpose), zeroed above the
             * diagonal and rounded to the end of its block's keys only:
             * dQ's block of rows i reads keys [0, ATT_KEYS(i, T)), dK's
             * block of keys [c0, c0 + m) the rows from c0 on, so no
             * product reads da past a row's ATT_KEYS (the scratch's
             * contents there are left as they were) */
            uint16_t *da16 = OPERAND(pr, da, (size_t)T * T);
            for (int i = 0; i < T; i++) {
                const real *arow = a + (size_t)i * T; /* (T) */
                real *drow = da + (size_t)i * T;      /* (T) */
                real dot = LAYER(row_dot)(arow, drow, i + 1);
                LAYER(row_softmax_grad)(drow, arow, dot, i + 1);
                for (int j = i + 1; j < ATT_KEYS(i, T); j++)
                    drow[j] = 0;
                ROUND(da16, (size_t)i * T, drow, (size_t)ATT_KEYS(i, T));
            }
            for (int r0 = 0; r0 < T; r0 += ATT_ROWS) { /* dQ's rows [r0, r0 + m) */
                int m = T - r0 < ATT_ROWS ? T - r0 : ATT_ROWS;
                if (r0 > 0)
                    OPERAND_AGAIN(pr, da, (size_t)T * T);
                GEMM(pr, CblasNoTrans, CblasNoTrans, m, HS, r0 + m, scale, da + (size_t)r0 * T, T,
                     k, C3, beta, dq + (size_t)r0 * C3, C3);
            }
            for (int c0 = 0; c0 < T; c0 += ATT_ROWS) { /* dK's rows [c0, c0 + m) */
                int m = T - c0 < ATT_ROWS ? T - c0 : ATT_ROWS;
                size_t at = (size_t)c0 * T + (size_t)c0; /* da[c0:, c0:] */
                OPERAND_AGAIN(pr, da, (size_t)T * T);
                GEMM(pr, CblasTrans, CblasNoTrans, m, HS, T - c0, scale, da + at, T,
                     q + (size_t)c0 * C3, C3, kv_beta, dk + (size_t)c0 * C3, C3);
            }
            for (int c0 = 0; c0 < T; c0 += ATT_ROWS) { /* dV's rows [c0, c0 + m) */
                int m = T - c0 < ATT_ROWS ? T - c0 : ATT_ROWS;
                size_t at = (size_t)c0 * T + (size_t)c0; /* att[c0:, c0:] */
                GEMM(pr, CblasTrans, CblasNoTrans, m, HS, T - c0, R(1), a + at, T,
                     d + (size_t)c0 * C, C, kv_beta, dv + (size_t)c0 * C3, C3);
            }
        }
    }
    RELEASE(pr, 1);
    RELEASE(pr, 0);
}

void LAYER(attention_gqa_backward)(PRODUCTS real *dqkv, real *scratch, const real *dout,
                                   const real *qkv, const real *att, int B, int T, int C, int NH,
                                   int KVH)
{
    LAYER(attention_backward_beta)(PASS_PR R(1), dqkv, scratch, dout, qkv, att, B, T, C, NH, KVH);
}

#undef ATT_ROWS
#undef ATT_KEYS

void LAYER(attention_backward)(PRODUCTS real *dqkv, real *scratch, const real *dout,
                               const real *qkv, const real *att, int B, int T, int C, int NH)
{
    LAYER(attention_gqa_backward)(PASS_PR dqkv, scratch, dout, qkv, att, B, T, C, NH, NH);
}

/* ---- the Llama block's kernels ---- */

/* out[b,t,:] = wte[inp[b,t],:] (no positions: rotary ones are in attention) */
void LAYER(embedding_forward)(real *out, const int *inp, const real *wte, int N, int C)
{
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, wte + (size_t)inp[n] * C, (size_t)C * sizeof(real));
}

void LAYER(embedding_backward)(real *dwte, const real *dout, const int *inp, int N, int C)
{
    for (int n = 0; n < N; n++) {
        real *dw = dwte + (size_t)inp[n] * C; /* (C) */
        const real *d = dout + (size_t)n * C; /* (C) */
        for (int c = 0; c < C; c++)
            dw[c] += d[c];
    }
}

#ifndef LAYERS_OWN_NORM
/* out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps), per row */
void LAYER(rmsnorm_forward)(real *out, real *rstd, const real *inp, const real *weight, int N,
                            int C)
{
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * C; /* (C) */
        real *o = out + (size_t)n * C;       /* (C) */
        real ss = 0;
        for (int c = 0; c < C; c++)
            ss += x[c] * x[c];
        real s = R(1) / sqrt(ss / (real)C + R(MSR_RMSNORM_EPS));
        for (int c = 0; c < C; c++)
            o[c] = x[c] * s * weight[c];
        rstd[n] = s;
    }
}

/* With xhat = x * rstd and g = dout * weight:
 * dx = rstd * (g - xhat * mean(g * xhat)). */
void LAYER(rmsnorm_backward)(real *dinp, real *dweight, const real *dout, const real *inp,
                             const real *weight, const real *rstd, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * C;  /* (C) */
        const real *d = dout + (size_t)n * C; /* (C) */
        real *dx = dinp + (size_t)n * C;      /* (C) */
        real s = rstd[n], gx = 0;
        for (int c = 0; c < C; c++)
            gx += d[c] * weight[c] * x[c] * s;
        gx = gx / (real)C;
        for (int c = 0; c < C; c++) {
            real xhat = x[c] * s;
            dweight[c] += xhat * d[c];
            dx[c] += s * (d[c] * weight[c] - xhat * gx);
        }
    }
}
#endif

#ifndef LAYERS_OWN_GELU /* float has its own (model/gelu.c) */
/* SwiGLU: out (N,F) = silu(gate) * up, from inp (N,2F) whose rows are
 * [gate (F) | up (F)]; silu(a) = a * sigmoid(a). */
void LAYER(swiglu_forward)(real *out, const real *inp, int N, int F)
{
    for (int n = 0; n < N; n++) {
        const real *a = inp + (size_t)n * 2 * F, *u = a + F; /* (F) each */
        real *o = out + (size_t)n * F;                       /* (F) */
        for (int i = 0; i < F; i++)
            o[i] = a[i] / (R(1) + exp(-a[i])) * u[i];
    }
}

/* dinp (N,2F) += the gradients of gate and up: with s = sigmoid(a),
 * d gate = dout * up * s (1 + a (1 - s)), d up = dout * silu(a). */
void LAYER(swiglu_backward)(real *dinp, const real *inp, const real *dout, int N, int F)
{
    for (int n = 0; n < N; n++) {
        const real *a = inp + (size_t)n * 2 * F, *u = a + F; /* (F) each */
        const real *d = dout + (size_t)n * F;                /* (F) */
        real *da = dinp + (size_t)n * 2 * F, *du = da + F;   /* (F) each */
        for (int i = 0; i < F; i++) {
            real s = R(1) / (R(1) + exp(-a[i]));
            da[i] += d[i] * u[i] * s * (R(1) + a[i] * (R(1) - s));
            du[i] += d[i] * a[i] * s;
        }
    }
}
#endif

/* Rotary positions, Hugging Face Llama's "rotate_half" pairing: in each
 * head of width HS, element i < HS/2 turns with element i + HS/2 by the
 * angle t * theta^(-2i/HS), t = t0 + the row's index in its sequence:
 *   x'[i] = x[i] cos - x[i+HS/2] sin,  x'[i+HS/2] = x[i+HS/2] cos + x[i] sin
 * x (B,T, row stride ld) holds H heads from its first column, rotated in
 * place; dir = -1 turns them back (the backward of dir = +1: a rotation's
 * transpose is its inverse). The angles are computed in double. */
void LAYER(rope_forward)(real *x, int ld, int B, int T, int t0, int H, int HS, double theta,
                         int dir)
{
    int half = HS / 2;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            double ang = (double)(t0 + t) * pow(theta, -2.0 * i / HS);
            real cs = (real)cos(ang), sn = (real)(dir * sin(ang));
            for (int b = 0; b < B; b++) {
                real *row = x + ((size_t)b * T + t) * (size_t)ld; /* (ld) */
                for (int h = 0; h < H; h++) {
                    real *p = row + (size_t)h * HS;
                    real x1 = p[i], x2 = p[i + half];
                    p[i] = x1 * cs - x2 * sn;
                    p[i + half] = x2 * cs + x1 * sn;
                }
            }
        }
    }
}

#ifndef LAYERS_OWN_GELU /* float has its own (model/gelu.c) */
/* gelu(x) = x/2 * (1 + tanh(u)), u = sqrt(2/pi) * (x + 0.044715 x^3),
 * computed as x * sigmoid(2u) (the same function: (1 + tanh(u))/2 =
 * 1/(1 + exp(-2u))), which costs one exp instead of a tanh. For very
 * negative x, exp(-2u) overflows to inf and gelu(x) = x/inf = -0. */
#define GELU_S R(0.7978845608028654)
#define GELU_A R(0.044715)

void LAYER(gelu_forward)(real *out, const real *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        real x = inp[i];
        real u = GELU_S * (x + GELU_A * x * x * x);
        out[i] = x / (R(1) + exp(R(-2) * u));
    }
}

/* With s = sigmoid(2u): gelu' = s + 2 x s (1 - s) du/dx, since
 * (1 - tanh(u)^2) / 2 = 2 s (1 - s). */
void LAYER(gelu_backward)(real *dinp, const real *inp, const real *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        real x = inp[i];
        real u = GELU_S * (x + GELU_A * x * x * x);
        real s = R(1) / (R(1) + exp(R(-2) * u));
        real du = GELU_S * (R(1) + R(3) * GELU_A * x * x);
        real g = s + R(2) * x * s * (R(1) - s) * du;
        dinp[i] += g * dout[i];
    }
}

#undef GELU_S
#undef GELU_A
#endif

void LAYER(residual_forward)(real *out, const real *a, const real *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

/* loss = logsumexp(logits) - logits[target], computed as max + log(sum
 * exp(l - max)) - l[target] so it stays accurate when the target's
 * probability is tiny. The maximum, the exponentials and their sum are
 * the attention softmax's (row_max, row_exp_sum): on the CPU's vectors in
 * float, where a vocabulary of tens of thousands makes this a pass of
 * V exponentials per position. */
void LAYER(crossentropy_forward)(real *losses, real *probs, const real *logits, const int *targets,
                                 int N, int V)
{
    for (int n = 0; n < N; n++) {
        const real *l = logits + (size_t)n * V; /* (V) */
        real *p = probs + (size_t)n * V;        /* (V) */
        real mx = LAYER(row_max)(l, V);
        memcpy(p, l, (size_t)V * sizeof *p);
        real sum = LAYER(row_exp_sum)(p, mx, V);
        real inv = R(1) / sum;
        for (int i = 0; i < V; i++)
            p[i] *= inv;
        losses[n] = mx + log(sum) - l[targets[n]];
    }
}

void LAYER(crossentropy_backward)(real *dlogits, const real *probs, const int *targets, real dloss,
                                  int N, int V)
{
    for (int n = 0; n < N; n++) {
        const real *p = probs + (size_t)n * V; /* (V) */
        real *d = dlogits + (size_t)n * V;     /* (V) */
        for (int i = 0; i < V; i++)
            d[i] += p[i] * dloss;
        d[targets[n]] -= dloss;
    }
}

/* Ring attention, one K/V block at a time (the flash-attention recurrence),
 * per head h with Q, K, V the head's columns:
 *   s    = Q K^T / sqrt(HS), masked where kpos[j] > qpos[i]   (Tq,Tk)
 *   m'   = max(m, max_j s[i,j]);  a = exp(m - m')
 *   sum  = a sum + sum_j exp(s[i,j] - m')
 *   acc  = a acc + exp(s - m') V
 * A row that sees nothing of the block is left as it was. */
void LAYER(attention_ring_forward)(PRODUCTS real *acc, real *mx, real *sum, const real *q, int ldq,
                                   const int *qpos, int Tq, const real *k, const real *v, int ldk,
                                   const int *kpos, int Tk, int C, int NH, real *scratch)
{
    int HS = C / NH;
    real scale = R(1) / sqrt((real)HS);
    real *s = scratch; /* (Tq,Tk) */
    for (int h = 0; h < NH; h++) {
        const real *qh = q + (size_t)h * HS, *kh = k + (size_t)h * HS, *vh = v + (size_t)h * HS;
        real *ah = acc + (size_t)h * HS; /* (Tq,HS), row stride C */
        GEMM(pr, CblasNoTrans, CblasTrans, Tq, Tk, HS, scale, qh, ldq, kh, ldk, R(0), s, Tk);
        for (int i = 0; i < Tq; i++) {
            real *row = s + (size_t)i * Tk; /* (Tk) */
            real *m = mx + (size_t)i * NH + h, *l = sum + (size_t)i * NH + h;
            int seen = 0;
            real bm = 0;
            for (int j = 0; j < Tk; j++) {
                if (kpos[j] <= qpos[i] && (seen == 0 || row[j] > bm))
                    bm = row[j];
                seen += kpos[j] <= qpos[i];
            }
            if (seen == 0) {
                for (int j = 0; j < Tk; j++)
                    row[j] = 0;
                continue;
            }
            real mnew = *m > bm ? *m : bm;
            real a = exp(*m - mnew); /* 0 for the first block a row sees (m = -inf) */
            /* the masked keys' scores to -inf, whose exp is 0 */
            for (int j = 0; j < Tk; j++)
                row[j] = kpos[j] <= qpos[i] ? row[j] : -INFINITY;
            real add = LAYER(row_exp_sum)(row, mnew, Tk);
            *l = a * *l + add;
            *m = mnew;
            real *o = ah + (size_t)i * C;
            for (int c = 0; c < HS; c++)
                o[c] *= a;
        }
        GEMM(pr, CblasNoTrans, CblasNoTrans, Tq, HS, Tk, R(1), s, Tk, vh, ldk, R(1), ah, C);
    }
}

void LAYER(attention_ring_finish)(real *out, real *lse, const real *mx, const real *sum, int Tq,
                                  int C, int NH)
{
    int HS = C / NH;
    for (int i = 0; i < Tq; i++) {
        for (int h = 0; h < NH; h++) {
            real l = sum[(size_t)i * NH + h], inv = R(1) / l;
            real *o = out + (size_t)i * C + (size_t)h * HS;
            for (int c = 0; c < HS; c++)
                o[c] *= inv;
            lse[(size_t)i * NH + h] = mx[(size_t)i * NH + h] + log(l);
        }
    }
}

void LAYER(attention_ring_delta)(real *delta, const real *dout, const real *out, int Tq, int C,
                                 int NH)
{
    int HS = C / NH;
    for (int i = 0; i < Tq; i++) {
        for (int h = 0; h < NH; h++) {
            const real *d = dout + (size_t)i * C + (size_t)h * HS;
            const real *o = out + (size_t)i * C + (size_t)h * HS;
            real x = 0;
            for (int c = 0; c < HS; c++)
                x += d[c] * o[c];
            delta[(size_t)i * NH + h] = x;
        }
    }
}

/* Per head, with P = exp(s - lse) (masked: 0) the probabilities of this
 * block's keys:
 *   dV += P^T dout;  dP = dout V^T;  dS = P * (dP - delta)
 *   dQ += dS K / sqrt(HS);  dK += dS^T Q / sqrt(HS) */
void LAYER(attention_ring_backward)(PRODUCTS real *dq, int ldq, real *dk, real *dv, int ldk,
                                    const real *dout, const real *q, const real *k, const real *v,
                                    const real *lse, const real *delta, const int *qpos, int Tq,
                                    const int *kpos, int Tk, int C, int NH, real *scratch)
{
    int HS = C / NH;
    real scale = R(1) / sqrt((real)HS);
    real *p = scratch, *ds = scratch + (size_t)Tq * Tk; /* (Tq,Tk) each */
    for (int h = 0; h < NH; h++) {
        size_t ho = (size_t)h * HS;
        GEMM(pr, CblasNoTrans, CblasTrans, Tq, Tk, HS, scale, q + ho, ldq, k + ho, ldk, R(0), p,
             Tk);
        GEMM(pr, CblasNoTrans, CblasTrans, Tq, Tk, HS, R(1), dout + ho, C, v + ho, ldk, R(0), ds,
             Tk);
        for (int i = 0; i < Tq; i++) {
            real *prow = p + (size_t)i * Tk, *drow = ds + (size_t)i * Tk;
            real l = lse[(size_t)i * NH + h], dl = delta[(size_t)i * NH + h];
            for (int j = 0; j < Tk; j++) /* the masked keys' exp is 0 */
                prow[j] = kpos[j] <= qpos[i] ? prow[j] : -INFINITY;
            (void)LAYER(row_exp_sum)(prow, l, Tk); /* the exps alone: P = exp(s - lse) */
            for (int j = 0; j < Tk; j++)
                drow[j] = prow[j] * (drow[j] - dl);
        }
        GEMM(pr, CblasTrans, CblasNoTrans, Tk, HS, Tq, R(1), p, Tk, dout + ho, C, R(1), dv + ho,
             ldk);
        GEMM(pr, CblasNoTrans, CblasNoTrans, Tq, HS, Tk, scale, ds, Tk, k + ho, ldk, R(1), dq + ho,
             ldq);
        GEMM(pr, CblasTrans, CblasNoTrans, Tk, HS, Tq, scale, ds, Tk, q + ho, ldq, R(1), dk + ho,
             ldk);
    }
}
