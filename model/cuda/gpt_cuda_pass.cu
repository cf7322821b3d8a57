/* The reference model on a CUDA GPU, forward and backward (see
 * gpt_cuda.h; creation and the optimizer are in gpt_cuda.cu): the CPU
 * model's (model/gpt_pass.c, model/layers_impl.h) step for step, with cuBLAS for every matrix
 * product and simple kernels for the rest: one thread per element, or one warp per row where a row
 * is reduced.
 *
 * Matrix products: the CPU code calls row-major cblas_sgemm; gemm_rm below
 * takes the same arguments and calls column-major cuBLAS with the operands
 * swapped (row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T),
 * so each call here reads as its CPU twin. Attention runs per batch row b
 * with the heads as a strided batch: head h's Q, K, V start h*HS columns in,
 * a constant stride.
 *
 * Every reduction over rows that the CPU does in a loop (bias, layernorm
 * weight and position-embedding gradients) is a cuBLAS gemv against a
 * vector of ones; the token-embedding gradient, a scatter, is one thread per
 * channel walking the tokens in order, so no atomics and the same bits every
 * run. Kernels are compiled without FMA contraction (CMake passes
 * --fmad=false) so their roundings follow the CPU code's. */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "base/alloc.h"
#include "base/err.h"
#include "model/cuda/gpt_cuda.h"
#include "model/layers.h"
}
#include "model/cuda/gpt_cuda_impl.cuh"

/* the kernels, after WARP, THREADS and GRID_STRIDE */
#include "model/cuda/kernels.cuh"
/* bf16 attention on the tensor cores, after warp_sum and warp_max */
#include "model/cuda/flash.cuh"

/* ---- host helpers ---- */

/* The elements a row-major view spans: rows of cols elements, ld apart. */
static size_t extent(int rows, int cols, int ld)
{
    return (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

/* A product's operand x of n elements in bf16 (--precision bf16): the held
 * operand's rounding where x lies inside it, else x rounded into scratch
 * slot k (0 A's, 1 B's). */
static msr_status_t bf16_operand(msr_cuda_gpt_t *md, int k, const float *x, size_t n,
                                 const __nv_bfloat16 **out)
{
    if (md->hold_src != NULL && x >= md->hold_src && x + n <= md->hold_src + md->hold_n) {
        *out = md->bf_hold + (x - md->hold_src);
        return MSR_OK;
    }
    if (n > md->bf_cap)
        return msr_err(MSR_ERR_STATE,
                       "gpt_cuda: a bf16 operand of %zu elements is over its scratch of %zu", n,
                       md->bf_cap);
    round_bf16_k<<<msr_cuda_gpt_grid_for(n), THREADS, 0, md->stream>>>(md->bf_slot[k], x, n);
    LAUNCHED("round_bf16");
    *out = md->bf_slot[k];
    return MSR_OK;
}

/* Rounds x (n elements) to bf16 once for the products that follow, until
 * release_bf16: each operand inside it takes its rounding from there. A
 * no-op in fp32. */
static msr_status_t hold_bf16(msr_cuda_gpt_t *md, const float *x, size_t n)
{
    if (md->precision != MSR_PRECISION_BF16)
        return MSR_OK;
    if (n > md->bf_hold_cap)
        return msr_err(MSR_ERR_STATE,
                       "gpt_cuda: a held bf16 operand of %zu elements is over its scratch of %zu",
                       n, md->bf_hold_cap);
    round_bf16_k<<<msr_cuda_gpt_grid_for(n), THREADS, 0, md->stream>>>(md->bf_hold, x, n);
    LAUNCHED("round_bf16");
    md->hold_src = x;
    md->hold_n = n;
    return MSR_OK;
}

static void release_bf16(msr_cuda_gpt_t *md)
{
    md->hold_src = NULL;
    md->hold_n = 0;
}

/* Row-major C (M,N) = alpha op(A) op(B) + beta C, arguments as cblas_sgemm's
 * (ta, tb: transpose A, B); in bf16 both operands rounded first. */
static msr_status_t gemm_rm(msr_cuda_gpt_t *md, int ta, int tb, int M, int N, int K, float alpha,
                            const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc)
{
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (md->precision != MSR_PRECISION_BF16) {
        BLAS(cublasSgemm(md->blas, opb, opa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
        return MSR_OK;
    }
    const __nv_bfloat16 *a, *b;
    TRY(bf16_operand(md, 0, A, ta ? extent(K, M, lda) : extent(M, K, lda), &a));
    TRY(bf16_operand(md, 1, B, tb ? extent(N, K, ldb) : extent(K, N, ldb), &b));
    BLAS(cublasGemmEx(md->blas, opb, opa, N, M, K, &alpha, b, CUDA_R_16BF, ldb, a, CUDA_R_16BF, lda,
                      &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return MSR_OK;
}

/* gemm_rm over `batch` problems, operand k's problem b at X + b * sX. */
static msr_status_t gemm_rm_batched(msr_cuda_gpt_t *md, int ta, int tb, int M, int N, int K,
                                    float alpha, const float *A, int lda, long long sA,
                                    const float *B, int ldb, long long sB, float beta, float *C,
                                    int ldc, long long sC, int batch)
{
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (md->precision != MSR_PRECISION_BF16) {
        BLAS(cublasSgemmStridedBatched(md->blas, opb, opa, N, M, K, &alpha, B, ldb, sB, A, lda, sA,
                                       &beta, C, ldc, sC, batch));
        return MSR_OK;
    }
    const __nv_bfloat16 *a, *b;
    size_t na = (size_t)(batch - 1) * (size_t)sA + (ta ? extent(K, M, lda) : extent(M, K, lda));
    size_t nb = (size_t)(batch - 1) * (size_t)sB + (tb ? extent(N, K, ldb) : extent(K, N, ldb));
    TRY(bf16_operand(md, 0, A, na, &a));
    TRY(bf16_operand(md, 1, B, nb, &b));
    BLAS(cublasGemmStridedBatchedEx(md->blas, opb, opa, N, M, K, &alpha, b, CUDA_R_16BF, ldb, sB, a,
                                    CUDA_R_16BF, lda, sA, &beta, C, CUDA_R_32F, ldc, sC, batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return MSR_OK;
}

/* y (cols) += the column sums of row-major X (rows, cols). */
static msr_status_t colsum_add(msr_cuda_gpt_t *md, float *y, const float *X, int rows, int cols)
{
    const float one = 1.0f;
    /* column-major view: X^T (cols, rows), ld cols; y += X^T ones */
    BLAS(cublasSgemv(md->blas, CUBLAS_OP_N, cols, rows, &one, X, cols, md->ones, 1, &one, y, 1));
    return MSR_OK;
}

msr_status_t msr_cuda_gpt_zero(msr_cuda_gpt_t *md, float *p, size_t n)
{
    CU(cudaMemsetAsync(p, 0, n * sizeof(float), md->stream));
    return MSR_OK;
}

/* matmul_forward: out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias */
static msr_status_t matmul_forward(msr_cuda_gpt_t *md, float *out, const float *inp,
                                   const float *weight, const float *bias, int N, int IC, int OC)
{
    if (bias != NULL) {
        bias_fill_k<<<msr_cuda_gpt_grid_for((size_t)N * OC), THREADS, 0, md->stream>>>(
            out, bias, (size_t)N, OC);
        LAUNCHED("bias_fill");
    }
    return gemm_rm(md, 0, 1, N, OC, IC, 1.0f, inp, IC, weight, IC, bias != NULL ? 1.0f : 0.0f, out,
                   OC);
}

/* matmul_backward: dinp += dout @ weight, dweight += dout^T @ inp, dbias +=
 * column sums of dout */
static msr_status_t matmul_backward(msr_cuda_gpt_t *md, float *dinp, float *dweight, float *dbias,
                                    const float *dout, const float *inp, const float *weight, int N,
                                    int IC, int OC)
{
    /* dout is A of both products: rounded once */
    TRY(hold_bf16(md, dout, (size_t)N * OC));
    msr_status_t st = gemm_rm(md, 0, 0, N, IC, OC, 1.0f, dout, OC, weight, IC, 1.0f, dinp, IC);
    if (st == MSR_OK)
        st = gemm_rm(md, 1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
    release_bf16(md);
    TRY(st);
    if (dbias != NULL)
        TRY(colsum_add(md, dbias, dout, N, OC));
    return MSR_OK;
}

static msr_status_t layernorm_forward(msr_cuda_gpt_t *md, float *out, float *mean, float *rstd,
                                      const float *inp, const float *w, const float *b, int N,
                                      int C)
{
    layernorm_forward_k<<<msr_cuda_gpt_grid_rows((size_t)N), THREADS, 0, md->stream>>>(
        out, mean, rstd, inp, w, b, (size_t)N, C);
    LAUNCHED("layernorm_forward");
    return MSR_OK;
}

static msr_status_t layernorm_backward(msr_cuda_gpt_t *md, float *dinp, float *dw, float *db,
                                       const float *dout, const float *inp, const float *w,
                                       const float *mean, const float *rstd, int N, int C)
{
    layernorm_backward_k<<<msr_cuda_gpt_grid_rows((size_t)N), THREADS, 0, md->stream>>>(
        dinp, md->ln_tmp, dout, inp, w, mean, rstd, (size_t)N, C);
    LAUNCHED("layernorm_backward");
    TRY(colsum_add(md, dw, md->ln_tmp, N, C));
    return colsum_add(md, db, dout, N, C);
}

/* attention_forward's products and softmax, per batch row with the heads
 * as a strided batch */
static msr_status_t attention_forward_rows(msr_cuda_gpt_t *md, float *out, float *att,
                                           const float *qkv, int B, int T, int C, int NH)
{
    int HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * C3; /* head h: + h*HS; (T,HS), stride 3C */
        const float *k = q + C;
        float *a = att + (size_t)b * NH * TT; /* head h: + h*T*T; (T,T) */
        TRY(gemm_rm_batched(md, 0, 1, T, T, HS, scale, q, C3, HS, k, C3, HS, 0.0f, a, T, TT, NH));
    }
    size_t rows = (size_t)B * NH * T;
    softmax_causal_k<<<msr_cuda_gpt_grid_rows(rows), THREADS, 0, md->stream>>>(att, rows, T);
    LAUNCHED("softmax_causal");
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * C3 + 2 * (size_t)C;
        const float *a = att + (size_t)b * NH * TT;
        float *o = out + (size_t)b * T * C; /* head h: + h*HS; (T,HS), stride C */
        TRY(gemm_rm_batched(md, 0, 0, T, HS, T, 1.0f, a, T, TT, v, C3, HS, 0.0f, o, C, HS, NH));
    }
    return MSR_OK;
}

/* attention_backward's products and softmax: dqkv += ..., datt scratch of
 * (NH, T, T) */
static msr_status_t attention_backward_rows(msr_cuda_gpt_t *md, float *dqkv, float *datt,
                                            const float *dout, const float *qkv, const float *att,
                                            int B, int T, int C, int NH)
{
    int HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    long long TT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        size_t qoff = (size_t)b * T * C3;
        const float *q = qkv + qoff, *k = q + C, *v = q + 2 * (size_t)C;
        float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * (size_t)C;
        const float *a = att + (size_t)b * NH * TT;
        const float *d = dout + (size_t)b * T * C;
        /* datt = dout V^T */
        TRY(gemm_rm_batched(md, 0, 1, T, T, HS, 1.0f, d, C, HS, v, C3, HS, 0.0f, datt, T, TT, NH));
        size_t rows = (size_t)NH * T;
        softmax_causal_backward_k<<<msr_cuda_gpt_grid_rows(rows), THREADS, 0, md->stream>>>(
            datt, a, rows, T);
        LAUNCHED("softmax_causal_backward");
        /* dq += scale datt K, dk += scale datt^T Q, dv += att^T dout */
        TRY(gemm_rm_batched(md, 0, 0, T, HS, T, scale, datt, T, TT, k, C3, HS, 1.0f, dq, C3, HS,
                            NH));
        TRY(gemm_rm_batched(md, 1, 0, T, HS, T, scale, datt, T, TT, q, C3, HS, 1.0f, dk, C3, HS,
                            NH));
        TRY(gemm_rm_batched(md, 1, 0, T, HS, T, 1.0f, a, T, TT, d, C, HS, 1.0f, dv, C3, HS, NH));
    }
    return MSR_OK;
}

/* ---- bf16 attention on the tensor cores (flash.cuh) ---- */

int msr_cuda_gpt_flash_ok(const msr_cuda_gpt_t *md)
{
    int HS = md->cfg.channels / md->cfg.heads, major = 0;
    cudaFuncAttributes fa;
    if ((HS != 16 && HS != 32 && HS != 64) || (long)md->max_batch * md->cfg.heads > 65535)
        return 0;
    /* the GPU, and the code built for it: the kernels are empty below sm_80 */
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, md->device) !=
            cudaSuccess ||
        cudaFuncGetAttributes(&fa, fa_forward_k<64>) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major >= 8 && fa.binaryVersion >= 80;
}

/* Launches kernel k<HS> on grid (tiles, B NH) with smem bytes of shared memory. */
#define FA_LAUNCH(k, HS, smem, T, BNH, ...)                                                        \
    do {                                                                                           \
        CU(cudaFuncSetAttribute(k<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(smem))); \
        k<HS><<<dim3((unsigned)(((T) + FA_TILE - 1) / FA_TILE), (unsigned)(BNH)), FA_THREADS,      \
                (smem), md->stream>>>(__VA_ARGS__);                                                \
        LAUNCHED(#k);                                                                              \
    } while (0)

template <int HS>
static msr_status_t fa_forward(msr_cuda_gpt_t *md, float *out, float *stats, const float *qkv,
                               int B, int T, int C, int NH)
{
    fa_shape_t sh = {T, C, NH, 1.0f / sqrtf((float)HS)};
    FA_LAUNCH(fa_forward_k, HS, fa_smem(HS, 3, 1, 1), T, B * NH, out, stats, qkv, sh);
    return MSR_OK;
}

template <int HS>
static msr_status_t fa_backward(msr_cuda_gpt_t *md, float *dqkv, const float *dout,
                                const float *qkv, const float *stats, int B, int T, int C, int NH)
{
    fa_shape_t sh = {T, C, NH, 1.0f / sqrtf((float)HS)};
    FA_LAUNCH(fa_dot_k, HS, fa_smem(HS, 4, 0, 2), T, B * NH, md->fa_dot, stats, qkv, dout, sh);
    FA_LAUNCH(fa_dkv_k, HS, fa_smem(HS, 4, 2, 2), T, B * NH, dqkv, stats, md->fa_dot, qkv, dout,
              sh);
    FA_LAUNCH(fa_dq_k, HS, fa_smem(HS, 4, 1, 2), T, B * NH, dqkv, stats, md->fa_dot, qkv, dout, sh);
    return MSR_OK;
}

/* Layer l's row statistics on the tensor-core path; NULL: not on it. */
static float *fa_layer_stats(const msr_cuda_gpt_t *md, int l)
{
    if (md->precision != MSR_PRECISION_BF16 || md->fa_stats == NULL)
        return NULL;
    return md->fa_stats + (size_t)l * 2 * md->max_batch * md->cfg.heads * md->cfg.max_seq;
}

/* Attention's forward and backward: on the tensor-core path where stats
 * (fa_layer_stats) is given; else q, k and v are operands of every batch
 * row's products, so in bf16 qkv is rounded once for the call. */
static msr_status_t attention_forward(msr_cuda_gpt_t *md, float *out, float *att, float *stats,
                                      const float *qkv, int B, int T, int C, int NH)
{
    if (stats != NULL) {
        switch (C / NH) {
        case 16:
            return fa_forward<16>(md, out, stats, qkv, B, T, C, NH);
        case 32:
            return fa_forward<32>(md, out, stats, qkv, B, T, C, NH);
        default:
            return fa_forward<64>(md, out, stats, qkv, B, T, C, NH);
        }
    }
    TRY(hold_bf16(md, qkv, (size_t)B * T * 3 * C));
    msr_status_t st = attention_forward_rows(md, out, att, qkv, B, T, C, NH);
    release_bf16(md);
    return st;
}

static msr_status_t attention_backward(msr_cuda_gpt_t *md, float *dqkv, float *datt,
                                       const float *dout, const float *qkv, const float *att,
                                       const float *stats, int B, int T, int C, int NH)
{
    if (stats != NULL) {
        switch (C / NH) {
        case 16:
            return fa_backward<16>(md, dqkv, dout, qkv, stats, B, T, C, NH);
        case 32:
            return fa_backward<32>(md, dqkv, dout, qkv, stats, B, T, C, NH);
        default:
            return fa_backward<64>(md, dqkv, dout, qkv, stats, B, T, C, NH);
        }
    }
    TRY(hold_bf16(md, qkv, (size_t)B * T * 3 * C));
    msr_status_t st = attention_backward_rows(md, dqkv, datt, dout, qkv, att, B, T, C, NH);
    release_bf16(md);
    return st;
}

/* ---- forward ---- */

static msr_status_t check_tokens(const int *tokens, size_t n, int V, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= V)
            return msr_err(MSR_ERR_INVALID_ARG, "gpt_cuda: %s[%zu] = %d is not a token in [0, %d)",
                           what, i, tokens[i], V);
    }
    return MSR_OK;
}

/* Groups the batch's N positions by token for the token-embedding
 * gradient (encoder_backward_wte_k), a stable counting sort on the host,
 * and queues the groups' copy: pos (N) the positions token by token, start
 * (U + 1) where each of the U distinct tokens' positions begin, id (U) the
 * tokens, one after the other in d_tok. */
static msr_status_t group_tokens(msr_cuda_gpt_t *md, const int *inputs, int N)
{
    int V = md->cfg.vocab;
    int *pos = md->h_tok, *cnt = md->h_tok + 3 * (size_t)md->max_batch * md->cfg.max_seq + 1;
    memset(cnt, 0, ((size_t)V + 1) * sizeof(int));
    for (int n = 0; n < N; n++)
        cnt[inputs[n] + 1]++;
    for (int v = 0; v < V; v++)
        cnt[v + 1] += cnt[v]; /* cnt[v]: where token v's positions begin */
    int U = 0;
    for (int v = 0; v < V; v++)
        U += cnt[v + 1] > cnt[v];
    int *start = pos + N, *id = start + U + 1;
    U = 0;
    for (int v = 0; v < V; v++) {
        if (cnt[v + 1] > cnt[v]) {
            start[U] = cnt[v];
            id[U++] = v;
        }
    }
    start[U] = N;
    for (int n = 0; n < N; n++)
        pos[cnt[inputs[n]]++] = n;
    md->tok_distinct = U;
    /* from pageable memory: staged before the call returns, so the next
     * forward may rewrite h_tok */
    CU(cudaMemcpyAsync(md->d_tok, md->h_tok, ((size_t)N + 2 * (size_t)U + 1) * sizeof(int),
                       cudaMemcpyHostToDevice, md->stream));
    return MSR_OK;
}

static msr_status_t block_forward(msr_cuda_gpt_t *md, int l, const float *in, int B, int T)
{
    int C = md->cfg.channels, NH = md->cfg.heads, N = B * T;
    size_t NC = (size_t)N * C;
    msr_gpt_block_params_t p;
    msr_gpt_block_point(&md->cfg, msr_cuda_gpt_block_at(md, 0, l), &p);
    msr_gpt_block_acts_t *a = &md->acts.blocks[l];
    float *proj = md->acts.proj; /* (N, C) */

    /* x + attn(ln1(x)) */
    TRY(layernorm_forward(md, a->ln1, a->ln1_mean, a->ln1_rstd, in, p.ln1w, p.ln1b, N, C));
    TRY(matmul_forward(md, a->qkv, a->ln1, p.qkvw, p.qkvb, N, C, 3 * C));
    TRY(attention_forward(md, a->atty, a->att, fa_layer_stats(md, l), a->qkv, B, T, C, NH));
    TRY(matmul_forward(md, proj, a->atty, p.attprojw, p.attprojb, N, C, C));
    residual_forward_k<<<msr_cuda_gpt_grid_for(NC), THREADS, 0, md->stream>>>(a->res2, in, proj,
                                                                              NC);
    LAUNCHED("residual_forward");
    /* x + mlp(ln2(x)) */
    TRY(layernorm_forward(md, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p.ln2w, p.ln2b, N, C));
    TRY(matmul_forward(md, a->fch, a->ln2, p.fcw, p.fcb, N, C, 4 * C));
    gelu_forward_k<<<msr_cuda_gpt_grid_for(4 * NC), THREADS, 0, md->stream>>>(a->fch_gelu, a->fch,
                                                                              4 * NC);
    LAUNCHED("gelu_forward");
    TRY(matmul_forward(md, proj, a->fch_gelu, p.fcprojw, p.fcprojb, N, 4 * C, C));
    residual_forward_k<<<msr_cuda_gpt_grid_for(NC), THREADS, 0, md->stream>>>(a->res3, a->res2,
                                                                              proj, NC);
    LAUNCHED("residual_forward");
    return MSR_OK;
}

extern "C" msr_status_t msr_cuda_gpt_forward(msr_cuda_gpt_t *md, const int *inputs,
                                             const int *targets, int B, int T, double *loss_p)
{
    const msr_gpt_config_t *cfg = &md->cfg;
    int C = cfg->channels, V = cfg->vocab, L = cfg->layers;
    if (B < 1 || B > md->max_batch || T < 1 || T > cfg->max_seq)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "gpt_cuda: batch %d x %d does not fit the model's %d x %d", B, T,
                       md->max_batch, cfg->max_seq);
    int N = B * T;
    TRY(check_tokens(inputs, (size_t)N, V, "inputs"));
    if (targets != NULL)
        TRY(check_tokens(targets, (size_t)N, V, "targets"));
    md->B = md->T = 0; /* no backward until this forward completes */
    md->fwd_B = md->fwd_T = 0;
    msr_gpt_acts_t *acts = &md->acts;
    CU(cudaMemcpyAsync(md->d_inputs, inputs, (size_t)N * sizeof(int), cudaMemcpyHostToDevice,
                       md->stream));
    TRY(group_tokens(md, inputs, N));
    /* the targets too, before any kernel: a copy from pageable memory may
     * wait for the stream, which would stall the host behind the forward */
    if (targets != NULL)
        CU(cudaMemcpyAsync(md->d_targets, targets, (size_t)N * sizeof(int), cudaMemcpyHostToDevice,
                           md->stream));

    if (md->host_params != NULL && md->resident_stale) {
        TRY(msr_cuda_gpt_resident_copy(md, 0));
        md->resident_stale = 0;
    }
    const float *wte = md->params;          /* (V, C) */
    const float *wpe = wte + (size_t)V * C; /* (maxT, C) */
    encoder_forward_k<<<msr_cuda_gpt_grid_for((size_t)N * C), THREADS, 0, md->stream>>>(
        acts->encoded, md->d_inputs, wte, wpe, (size_t)N, T, C);
    LAUNCHED("encoder_forward");
    const float *x = acts->encoded; /* (B,T,C) */
    /* with the blocks in host memory, block l + 1's parameters come in
     * while block l computes */
    TRY(msr_cuda_gpt_params_in(md, 0));
    for (int l = 0; l < L; l++) {
        TRY(msr_cuda_gpt_params_in(md, l + 1));
        TRY(msr_cuda_gpt_block_begin(md, l, 0));
        TRY(block_forward(md, l, x, B, T));
        TRY(msr_cuda_gpt_block_end(md, l));
        x = acts->blocks[l].res3;
    }
    const float *lnfw = md->params + md->final_at; /* (C) */
    TRY(layernorm_forward(md, acts->lnf, acts->lnf_mean, acts->lnf_rstd, x, lnfw, lnfw + C, N, C));
    /* the output head, tied to wte: logits (N,V) = lnf (N,C) @ wte^T */
    TRY(matmul_forward(md, acts->logits, acts->lnf, wte, NULL, N, C, V));
    md->fwd_B = B;
    md->fwd_T = T;
    if (targets == NULL) {
        CU(cudaStreamSynchronize(md->stream));
        return MSR_OK;
    }
    crossentropy_forward_k<<<msr_cuda_gpt_grid_rows((size_t)N), THREADS, 0, md->stream>>>(
        acts->losses, acts->probs, acts->logits, md->d_targets, (size_t)N, V);
    LAUNCHED("crossentropy_forward");
    CU(cudaMemcpyAsync(md->h_losses, acts->losses, (size_t)N * sizeof(float),
                       cudaMemcpyDeviceToHost, md->stream));
    CU(cudaStreamSynchronize(md->stream));
    double sum = 0.0;
    for (int i = 0; i < N; i++)
        sum += md->h_losses[i];
    memcpy(md->h_targets, targets, (size_t)N * sizeof(int));
    md->B = B;
    md->T = T;
    *loss_p = sum / N;
    return MSR_OK;
}

extern "C" msr_status_t msr_cuda_gpt_get_logits(msr_cuda_gpt_t *md, float *host)
{
    size_t n = (size_t)md->fwd_B * md->fwd_T * md->cfg.vocab;
    if (n == 0)
        return msr_err(MSR_ERR_STATE, "gpt_cuda: no logits before a forward");
    return msr_cuda_gpt_copy_sync(md, host, md->acts.logits, n * sizeof(float),
                                  cudaMemcpyDeviceToHost);
}

/* ---- backward ---- */

static msr_status_t block_backward(msr_cuda_gpt_t *md, int l, const float *in, float *dres, int B,
                                   int T)
{
    int C = md->cfg.channels, NH = md->cfg.heads, N = B * T;
    size_t NC = (size_t)N * C;
    msr_gpt_block_params_t p, g;
    msr_gpt_block_point(&md->cfg, msr_cuda_gpt_block_at(md, 0, l), &p);
    msr_gpt_block_point(&md->cfg, msr_cuda_gpt_block_at(md, 1, l), &g);
    const msr_gpt_block_acts_t *a = &md->acts.blocks[l];
    msr_gpt_work_t *w = &md->work;
    TRY(msr_cuda_gpt_zero(md, w->dln, NC));
    TRY(msr_cuda_gpt_zero(md, w->dqkv, 3 * NC));
    TRY(msr_cuda_gpt_zero(md, w->datty, NC));
    TRY(msr_cuda_gpt_zero(md, w->dfch, 4 * NC));
    TRY(msr_cuda_gpt_zero(md, w->dfch_gelu, 4 * NC));

    /* the MLP branch: dres is the gradient of its output */
    TRY(matmul_backward(md, w->dfch_gelu, g.fcprojw, g.fcprojb, dres, a->fch_gelu, p.fcprojw, N,
                        4 * C, C));
    gelu_backward_k<<<msr_cuda_gpt_grid_for(4 * NC), THREADS, 0, md->stream>>>(
        w->dfch, a->fch, w->dfch_gelu, 4 * NC);
    LAUNCHED("gelu_backward");
    TRY(matmul_backward(md, w->dln, g.fcw, g.fcb, w->dfch, a->ln2, p.fcw, N, C, 4 * C));
    TRY(layernorm_backward(md, dres, g.ln2w, g.ln2b, w->dln, a->res2, p.ln2w, a->ln2_mean,
                           a->ln2_rstd, N, C));
    /* now dres = d res2; the attention branch */
    TRY(matmul_backward(md, w->datty, g.attprojw, g.attprojb, dres, a->atty, p.attprojw, N, C, C));
    TRY(attention_backward(md, w->dqkv, w->datt, w->datty, a->qkv, a->att, fa_layer_stats(md, l), B,
                           T, C, NH));
    TRY(msr_cuda_gpt_zero(md, w->dln, NC));
    TRY(matmul_backward(md, w->dln, g.qkvw, g.qkvb, w->dqkv, a->ln1, p.qkvw, N, C, 3 * C));
    TRY(layernorm_backward(md, dres, g.ln1w, g.ln1b, w->dln, in, p.ln1w, a->ln1_mean, a->ln1_rstd,
                           N, C));
    return MSR_OK;
}

extern "C" msr_status_t msr_cuda_gpt_backward(msr_cuda_gpt_t *md, float dloss)
{
    return msr_cuda_gpt_backward_ex(md, dloss, NULL, NULL);
}

/* Calls ready(arg, s) if given; leaves the function on its failure. */
#define READY(s)                  \
    do {                          \
        if (ready != NULL)        \
            TRY(ready(arg, (s))); \
    } while (0)

extern "C" msr_status_t msr_cuda_gpt_backward_ex(msr_cuda_gpt_t *md, float dloss,
                                                 msr_cuda_ready_fn ready, void *arg)
{
    if (md->B == 0)
        return msr_err(MSR_ERR_STATE, "gpt_cuda: backward without a forward with targets");
    if (md->host_params != NULL && ready != NULL)
        return msr_err(MSR_ERR_INVALID_ARG, "gpt_cuda: the blocks' gradients go to host memory: "
                                            "no segment is ready on the device");
    const msr_gpt_config_t *cfg = &md->cfg;
    int B = md->B, T = md->T, N = B * T;
    int C = cfg->channels, V = cfg->vocab, L = cfg->layers;
    size_t NC = (size_t)N * C;
    msr_gpt_acts_t *acts = &md->acts;
    msr_gpt_work_t *w = &md->work;

    TRY(msr_cuda_gpt_zero(md, w->dlogits, (size_t)N * V));
    TRY(msr_cuda_gpt_zero(md, w->dres, NC));
    TRY(msr_cuda_gpt_zero(md, w->dln, NC));
    crossentropy_backward_k<<<msr_cuda_gpt_grid_for((size_t)N * V), THREADS, 0, md->stream>>>(
        w->dlogits, acts->probs, md->d_targets, dloss, (size_t)N, V);
    LAUNCHED("crossentropy_backward");
    /* the head: dlnf += dlogits @ wte, dwte += dlogits^T @ lnf */
    TRY(matmul_backward(md, w->dln, md->grads, NULL, w->dlogits, acts->lnf, md->params, N, C, V));
    /* final layernorm, whose input is the last block's output */
    const float *lnfw = md->params + md->final_at;
    float *dlnfw = md->grads + md->final_at;
    TRY(layernorm_backward(md, w->dres, dlnfw, dlnfw + C, w->dln, acts->blocks[L - 1].res3, lnfw,
                           acts->lnf_mean, acts->lnf_rstd, N, C));
    READY(L + 1);
    /* with the blocks in host memory: the last two blocks' gradient slots
     * readied first, then while block l computes, block l - 1's parameters
     * come in; after it, its gradients go out and its slot is readied for
     * block l - 2 */
    TRY(msr_cuda_gpt_params_in(md, L - 1));
    TRY(msr_cuda_gpt_grads_in(md, L - 1));
    TRY(msr_cuda_gpt_grads_in(md, L - 2));
    for (int l = L - 1; l >= 0; l--) {
        const float *in = l == 0 ? acts->encoded : acts->blocks[l - 1].res3;
        TRY(msr_cuda_gpt_params_in(md, l - 1));
        TRY(msr_cuda_gpt_block_begin(md, l, 1));
        TRY(block_backward(md, l, in, w->dres, B, T));
        TRY(msr_cuda_gpt_block_end(md, l));
        TRY(msr_cuda_gpt_grads_out(md, l));
        TRY(msr_cuda_gpt_grads_in(md, l - 2));
        READY(1 + l);
    }
    /* embeddings: dwte gets the rows of dres by token, dwpe (maxT,C) the
     * sum over the batch rows of dres viewed as (B, T*C) */
    float *dwte = md->grads, *dwpe = md->grads + (size_t)V * C;
    size_t U = (size_t)md->tok_distinct;
    const int *pos = md->d_tok, *start = pos + N;
    encoder_backward_wte_k<<<msr_cuda_gpt_grid_for(U * C), THREADS, 0, md->stream>>>(
        dwte, w->dres, pos, start, start + U + 1, U, C);
    LAUNCHED("encoder_backward");
    TRY(colsum_add(md, dwpe, w->dres, B, T * C));
    if (md->host_params != NULL) {
        TRY(msr_cuda_gpt_resident_copy(md, 1));
        md->grads_zero = 0;
    }
    READY(0);
    return MSR_OK;
}

extern "C" void msr_cuda_gpt_segment(const msr_cuda_gpt_t *md, int s, size_t *offset_p,
                                     size_t *count_p)
{
    int L = md->cfg.layers;
    size_t lo = msr_cuda_gpt_seg_offset(md, s);
    size_t hi = s <= L ? msr_cuda_gpt_seg_offset(md, s + 1) : md->num_params;
    *offset_p = lo;
    *count_p = hi - lo;
}

extern "C" msr_status_t msr_cuda_gpt_order(msr_cuda_gpt_t *md, void *stream)
{
    if (md->event == NULL)
        CU(cudaEventCreateWithFlags(&md->event, cudaEventDisableTiming));
    CU(cudaEventRecord(md->event, md->stream));
    CU(cudaStreamWaitEvent((cudaStream_t)stream, md->event, 0));
    return MSR_OK;
}
