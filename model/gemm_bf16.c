/* bf16 products: the context, the checks, and the blas path (blocks
 * widened to fp32, then cblas_sgemm). */
#include "model/gemm_bf16.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "base/log.h"
#include "base/bf16.h"
#include "model/gemm_bf16_impl.h"

#ifndef MSR_HAVE_ONEDNN
const msr_gemm_bf16_ops_t *const msr_gemm_bf16_onednn_ops = NULL;
#endif

/* The blas path's blocks: op(A) (MC, KC) and op(B) (KC, NC) widened to
 * fp32. Each block is one cblas_sgemm, which packs its operands again on
 * every call: blocks as large as the model's products (B*T rows, K up to
 * 4C) keep that to once per product. The buffers grow to what a product
 * needs, never past these bounds (6 + 12 MiB). */
#define BLAS_MC 1024
#define BLAS_KC 1536
#define BLAS_NC 2048

#define MSR_GEMM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define MSR_GEMM_MAX(a, b) ((a) > (b) ? (a) : (b))

struct msr_gemm_bf16 {
    msr_gemm_bf16_path_t path;
    const msr_gemm_bf16_ops_t *ops;
    void *state;
};

const char *msr_gemm_bf16_path_name(msr_gemm_bf16_path_t path)
{
    switch (path) {
    case MSR_GEMM_BF16_AUTO:
        return "auto";
    case MSR_GEMM_BF16_BLAS:
        return "blas";
    case MSR_GEMM_BF16_ONEDNN:
        return "onednn";
    }
    return "?";
}

/* ---- the blas path ---- */

typedef struct blas_state {
    float *a, *b;        /* op(A)'s and op(B)'s widened blocks */
    size_t a_cap, b_cap; /* their sizes, in floats */
} blas_state_t;

static msr_status_t blas_create(unsigned cpu_features, void **state_p)
{
    (void)cpu_features; /* the conversions dispatch on their own */
    blas_state_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        MSR_ERROR("bf16 gemm: out of memory for the blas path's state");
        return MSR_ERR_NO_MEMORY;
    }
    *state_p = s;
    return MSR_OK;
}

/* *buf_p holds at least n floats, *cap_p updated; on failure unchanged */
static msr_status_t reserve(float **buf_p, size_t *cap_p, size_t n)
{
    if (n <= *cap_p)
        return MSR_OK;
    float *p = malloc(n * sizeof *p);
    if (p == NULL) {
        MSR_ERROR("bf16 gemm: cannot allocate a %zu-byte block buffer", n * sizeof *p);
        return MSR_ERR_NO_MEMORY;
    }
    free(*buf_p);
    *buf_p = p;
    *cap_p = n;
    return MSR_OK;
}

static void blas_destroy(void *state)
{
    blas_state_t *s = state;
    if (s == NULL)
        return;
    free(s->a);
    free(s->b);
    free(s);
}

/* Widens the (rows, cols) block of src at (r0, c0), leading dimension ld,
 * into dst (rows, cols), contiguous. */
static void widen_block(float *dst, const uint16_t *src, int ld, int r0, int c0, int rows, int cols)
{
    for (int r = 0; r < rows; r++)
        msr_f32_from_bf16_n(dst + (size_t)r * cols, src + (size_t)(r0 + r) * ld + c0, (size_t)cols);
}

/* For each (K, N) block of op(B), widened once, each (M, K) block of
 * op(A), widened, is multiplied in: beta on the first K block, 1 after. A
 * stored transposed is widened as stored (its block is (kc, mc)) and
 * cblas_sgemm is told so; likewise B. */
static msr_status_t blas_run(void *state, bool trans_a, bool trans_b, int M, int N, int K,
                             float alpha, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                             float beta, const float *bias, float *C, int ldc)
{
    blas_state_t *s = state;
    if (bias != NULL) { /* C starts as the bias, then the sums come in */
        for (int i = 0; i < M; i++)
            memcpy(C + (size_t)i * ldc, bias, (size_t)N * sizeof *C);
        beta = 1.0f;
    }
    int mb = MSR_GEMM_MIN(BLAS_MC, M), kb = MSR_GEMM_MIN(BLAS_KC, K), nb = MSR_GEMM_MIN(BLAS_NC, N);
    msr_status_t st = reserve(&s->a, &s->a_cap, (size_t)mb * kb);
    if (st == MSR_OK)
        st = reserve(&s->b, &s->b_cap, (size_t)kb * nb);
    if (st != MSR_OK)
        return st;
    CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    for (int n0 = 0; n0 < N; n0 += BLAS_NC) {
        int nc = MSR_GEMM_MIN(BLAS_NC, N - n0);
        for (int k0 = 0; k0 < K; k0 += BLAS_KC) {
            int kc = MSR_GEMM_MIN(BLAS_KC, K - k0);
            if (trans_b) /* B stored (N, K) */
                widen_block(s->b, B, ldb, n0, k0, nc, kc);
            else
                widen_block(s->b, B, ldb, k0, n0, kc, nc);
            float b_eff = k0 == 0 ? beta : 1.0f;
            for (int m0 = 0; m0 < M; m0 += BLAS_MC) {
                int mc = MSR_GEMM_MIN(BLAS_MC, M - m0);
                if (trans_a) /* A stored (K, M) */
                    widen_block(s->a, A, lda, k0, m0, kc, mc);
                else
                    widen_block(s->a, A, lda, m0, k0, mc, kc);
                cblas_sgemm(CblasRowMajor, ta, tb, mc, nc, kc, alpha, s->a, trans_a ? mc : kc, s->b,
                            trans_b ? kc : nc, b_eff, C + (size_t)m0 * ldc + n0, ldc);
            }
        }
    }
    return MSR_OK;
}

static const char *blas_impl(const void *state)
{
    (void)state;
    return "blas";
}

static const msr_gemm_bf16_ops_t blas_ops = {blas_create, blas_destroy, blas_run, blas_impl, NULL};

/* ---- the context ---- */

/* Why the default is not onednn in a build that has it: the library cannot
 * be loaded here (tried once, on the first call; the answer stands for the
 * life of the process), or NULL. */
static pthread_once_t missing_once = PTHREAD_ONCE_INIT;
static char missing_text[640];

static void onednn_missing_once(void)
{
    const char *missing = msr_gemm_bf16_onednn_ops->missing();
    if (missing != NULL)
        snprintf(missing_text, sizeof missing_text,
                 "oneDNN cannot be loaded (%s), so widened to fp32", missing);
}

static const char *onednn_missing_why(void)
{
    pthread_once(&missing_once, onednn_missing_once);
    return missing_text[0] != '\0' ? missing_text : NULL;
}

msr_status_t msr_gemm_bf16_auto(unsigned cpu_features, msr_gemm_bf16_path_t *path_p,
                                const char **why_p)
{
    const char *env = getenv("MSRUN_BF16_GEMM"), *why = NULL, *missing = NULL;
    msr_gemm_bf16_path_t path = MSR_GEMM_BF16_BLAS;
    if (env != NULL && strcmp(env, "blas") == 0)
        why = "MSRUN_BF16_GEMM=blas";
    else if (env != NULL && strcmp(env, "onednn") == 0) {
        path = MSR_GEMM_BF16_ONEDNN;
        why = "MSRUN_BF16_GEMM=onednn";
    } else if (env != NULL && *env != '\0' && strcmp(env, "auto") != 0) {
        MSR_ERROR("MSRUN_BF16_GEMM=\"%s\": not a bf16 product path (auto, blas or onednn)", env);
        return MSR_ERR_INVALID_ARG;
    } else if (!(cpu_features & MSR_CPU_AVX512_BF16))
        why = "the CPU lacks avx512_bf16, so widened to fp32";
    else if (msr_gemm_bf16_onednn_ops == NULL)
        why = "this build has no oneDNN (libdnnl-dev), so widened to fp32";
    else if ((missing = onednn_missing_why()) != NULL)
        why = missing;
    else {
        path = MSR_GEMM_BF16_ONEDNN;
        why = "the CPU has avx512_bf16 and the build oneDNN";
    }
    *path_p = path;
    if (why_p != NULL)
        *why_p = why;
    return MSR_OK;
}

msr_status_t msr_gemm_bf16_create(msr_gemm_bf16_path_t path, msr_gemm_bf16_t **g_p)
{
    unsigned features = 0;
    msr_status_t st = msr_cpu_features_get(&features);
    if (st != MSR_OK)
        return st; /* logged where the environment was read */
    if (path == MSR_GEMM_BF16_AUTO) {
        st = msr_gemm_bf16_auto(features, &path, NULL);
        if (st != MSR_OK)
            return st;
    }
    const msr_gemm_bf16_ops_t *ops = NULL;
    if (path == MSR_GEMM_BF16_BLAS)
        ops = &blas_ops;
    else if (path == MSR_GEMM_BF16_ONEDNN)
        ops = msr_gemm_bf16_onednn_ops;
    else {
        MSR_ERROR("bf16 gemm: unknown path %d", (int)path);
        return MSR_ERR_INVALID_ARG;
    }
    if (ops == NULL) {
        MSR_ERROR("bf16 gemm: the onednn path needs a build with oneDNN (libdnnl-dev)");
        return MSR_ERR_UNSUPPORTED;
    }
    msr_gemm_bf16_t *g = calloc(1, sizeof *g);
    if (g == NULL) {
        MSR_ERROR("bf16 gemm: out of memory for its context");
        return MSR_ERR_NO_MEMORY;
    }
    st = ops->create(features, &g->state);
    if (st != MSR_OK) {
        free(g);
        return st;
    }
    g->path = path;
    g->ops = ops;
    *g_p = g;
    return MSR_OK;
}

void msr_gemm_bf16_destroy(msr_gemm_bf16_t *g)
{
    if (g == NULL)
        return;
    g->ops->destroy(g->state);
    free(g);
}

msr_gemm_bf16_path_t msr_gemm_bf16_path(const msr_gemm_bf16_t *g)
{
    return g->path;
}

const char *msr_gemm_bf16_impl(const msr_gemm_bf16_t *g)
{
    return g->ops->impl(g->state);
}

/* C (M, N) = beta * C, beta 0 writing zeros over anything (NaN included) */
static void scale_c(int M, int N, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++)
            C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
}

static msr_status_t check_shape(bool trans_a, bool trans_b, int M, int N, int K, int lda, int ldb,
                                int ldc)
{
    if (M < 0 || N < 0 || K < 0 || lda < MSR_GEMM_MAX(1, trans_a ? M : K) ||
        ldb < MSR_GEMM_MAX(1, trans_b ? K : N) || ldc < MSR_GEMM_MAX(1, N)) {
        MSR_ERROR("bf16 gemm: bad shape M %d N %d K %d lda %d ldb %d ldc %d (trans %d %d)", M, N, K,
                  lda, ldb, ldc, trans_a, trans_b);
        return MSR_ERR_INVALID_ARG;
    }
    return MSR_OK;
}

msr_status_t msr_gemm_bf16(msr_gemm_bf16_t *g, bool trans_a, bool trans_b, int M, int N, int K,
                           float alpha, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                           float beta, float *C, int ldc)
{
    msr_status_t st = check_shape(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (st != MSR_OK || M == 0 || N == 0)
        return st;
    if (K == 0 || alpha == 0.0f) {
        scale_c(M, N, beta, C, ldc);
        return MSR_OK;
    }
    return g->ops->run(g->state, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, NULL, C,
                       ldc);
}

msr_status_t msr_gemm_bf16_bias(msr_gemm_bf16_t *g, bool trans_a, bool trans_b, int M, int N, int K,
                                const uint16_t *A, int lda, const uint16_t *B, int ldb,
                                const float *bias, float *C, int ldc)
{
    msr_status_t st = check_shape(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (st != MSR_OK || M == 0 || N == 0)
        return st;
    if (K == 0) { /* the bias alone, zeros without one */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = bias != NULL ? bias[j] : 0.0f;
        return MSR_OK;
    }
    return g->ops->run(g->state, trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, bias, C,
                       ldc);
}
