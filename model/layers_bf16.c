/* The layers' products context (layers.h): fp32 products, or bf16 operands
 * rounded into scratch and multiplied by msr_gemm_bf16 with fp32 sums; and
 * the layernorm and GELU that hand it their output already rounded. */
#include <cblas.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/bf16.h"
#include "base/cpu_features.h"
#include "base/log.h"
#include "model/gemm_bf16.h"
#include "model/layers.h"

struct msr_products {
    msr_precision_t precision;
    msr_gemm_bf16_t *gemm; /* bf16 only */
    uint16_t *a, *b;       /* op(A)'s and op(B)'s storage rounded to bf16 */
    size_t a_cap, b_cap;   /* their sizes, in elements */
    const float *ready;    /* the fp32 operand whose rounding a holds for the next product, */
    size_t ready_n;        /* its elements (msr_products_operand); NULL: none */
    msr_status_t status;   /* the first failure (MSR_OK: none) */
};

const char *msr_precision_name(msr_precision_t precision)
{
    switch (precision) {
    case MSR_PRECISION_FP32:
        return "fp32";
    case MSR_PRECISION_BF16:
        return "bf16";
    }
    return "?";
}

msr_status_t msr_precision_parse(const char *text, msr_precision_t *precision_p)
{
    if (text != NULL && strcmp(text, "fp32") == 0)
        *precision_p = MSR_PRECISION_FP32;
    else if (text != NULL && strcmp(text, "bf16") == 0)
        *precision_p = MSR_PRECISION_BF16;
    else
        return MSR_ERR_INVALID_ARG;
    return MSR_OK;
}

/* Once per process (the one-time initialisation the style allows): a CPU
 * without bf16 units runs the products widened to fp32, which is correct
 * but slower than fp32 itself (docs/performance.md). */
static void say_slow_path(void)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    unsigned f = 0;
    if (msr_cpu_features_get(&f) != MSR_OK || (f & MSR_CPU_AVX512_BF16) != 0)
        return;
    if (!atomic_flag_test_and_set(&said))
        MSR_WARN("bf16: this CPU has no bf16 units (avx512_bf16); the bf16 products run on the "
                 "slower path that widens them to fp32 (docs/model.md, \"bf16 products\")");
}

msr_status_t msr_products_create(msr_precision_t precision, msr_products_t **p_p)
{
    if (precision != MSR_PRECISION_FP32 && precision != MSR_PRECISION_BF16) {
        MSR_ERROR("products: unknown precision %d", (int)precision);
        return MSR_ERR_INVALID_ARG;
    }
    msr_products_t *p = msr_calloc(1, sizeof *p);
    if (p == NULL) {
        MSR_ERROR("products: out of memory for a context");
        return MSR_ERR_NO_MEMORY;
    }
    p->precision = precision;
    if (precision == MSR_PRECISION_BF16) {
        msr_status_t st = msr_gemm_bf16_create(MSR_GEMM_BF16_AUTO, &p->gemm);
        if (st != MSR_OK) {
            msr_free(p);
            return st;
        }
        if (msr_gemm_bf16_path(p->gemm) == MSR_GEMM_BF16_BLAS)
            say_slow_path();
    }
    *p_p = p;
    return MSR_OK;
}

void msr_products_destroy(msr_products_t *p)
{
    if (p == NULL)
        return;
    msr_gemm_bf16_destroy(p->gemm);
    msr_free(p->a);
    msr_free(p->b);
    msr_free(p);
}

msr_precision_t msr_products_precision(const msr_products_t *p)
{
    return p != NULL ? p->precision : MSR_PRECISION_FP32;
}

msr_status_t msr_products_status(const msr_products_t *p)
{
    return p != NULL ? p->status : MSR_OK;
}

size_t msr_products_scratch_bytes(const msr_products_t *p)
{
    return p != NULL ? (p->a_cap + p->b_cap) * sizeof(uint16_t) : 0;
}

/* The first failure sticks; later ones are the same story. */
static void fail(msr_products_t *p, msr_status_t st)
{
    if (p->status == MSR_OK)
        p->status = st;
}

/* *buf_p holds at least n elements; on failure unchanged */
static msr_status_t reserve(uint16_t **buf_p, size_t *cap_p, size_t n)
{
    if (n <= *cap_p)
        return MSR_OK;
    uint16_t *q = msr_malloc(n * sizeof *q);
    if (q == NULL) {
        MSR_ERROR("products: cannot allocate %zu bytes of bf16 scratch", n * sizeof *q);
        return MSR_ERR_NO_MEMORY;
    }
    msr_free(*buf_p);
    *buf_p = q;
    *cap_p = n;
    return MSR_OK;
}

/* dst (rows, cols) packed = src (rows, cols) with row stride ld, rounded */
static void round_rows(uint16_t *dst, const float *src, int ld, int rows, int cols)
{
    for (int r = 0; r < rows; r++)
        msr_bf16_from_f32_n(dst + (size_t)r * cols, src + (size_t)r * ld, (size_t)cols);
}

/* Rounds op(A)'s (ar, ac) and op(B)'s (br, bc) storage into the scratch;
 * false (recorded) when it cannot grow */
static bool round_operands(msr_products_t *p, const float *A, int lda, int ar, int ac,
                           const float *B, int ldb, int br, int bc)
{
    msr_status_t st = reserve(&p->a, &p->a_cap, (size_t)ar * (size_t)ac);
    if (st == MSR_OK)
        st = reserve(&p->b, &p->b_cap, (size_t)br * (size_t)bc);
    if (st != MSR_OK) {
        fail(p, st);
        return false;
    }
    round_rows(p->a, A, lda, ar, ac);
    round_rows(p->b, B, ldb, br, bc);
    return true;
}

uint16_t *msr_products_operand(msr_products_t *p, const float *src, size_t n)
{
    if (p == NULL || p->precision != MSR_PRECISION_BF16 || src == NULL || n == 0 || n > p->a_cap)
        return NULL;
    p->ready = src;
    p->ready_n = n;
    return p->a;
}

/* Whether a holds the rounding of inp (n elements) for this product; the
 * handover lasts one product, whichever it is */
static bool take_ready(msr_products_t *p, const float *inp, size_t n)
{
    bool ready = p->ready != NULL && p->ready == inp && p->ready_n == n;
    p->ready = NULL;
    return ready;
}

void msr_products_sgemm(msr_products_t *p, int trans_a, int trans_b, int M, int N, int K,
                        float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                        float *C, int ldc)
{
    if (p != NULL)
        p->ready = NULL;
    if (p == NULL || p->precision == MSR_PRECISION_FP32) {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
                    ldc);
        return;
    }
    if (M < 0 || N < 0 || K < 0) {
        MSR_ERROR("products: a %d x %d x %d product has a negative size", M, N, K);
        fail(p, MSR_ERR_INVALID_ARG);
        return;
    }
    if (M == 0 || N == 0)
        return;
    /* the stored shapes: A (M,K) or (K,M) when transposed, B (K,N) or (N,K) */
    int ar = trans_a ? K : M, ac = trans_a ? M : K;
    int br = trans_b ? N : K, bc = trans_b ? K : N;
    if (!round_operands(p, A, lda, ar, ac, B, ldb, br, bc))
        return;
    msr_status_t st = msr_gemm_bf16(p->gemm, trans_a != 0, trans_b != 0, M, N, K, alpha, p->a,
                                    ac > 0 ? ac : 1, p->b, bc > 0 ? bc : 1, beta, C, ldc);
    if (st != MSR_OK)
        fail(p, st);
}

void msr_products_linear(msr_products_t *p, float *out, const float *inp, const float *weight,
                         const float *bias, int N, int IC, int OC)
{
    if (p == NULL || p->precision == MSR_PRECISION_FP32 || N <= 0 || IC <= 0 || OC <= 0) {
        /* out starts as the bias (or zero), then out += inp @ weight^T */
        for (int n = 0; n < N; n++)
            for (int j = 0; j < OC; j++)
                out[(size_t)n * OC + j] = bias != NULL ? bias[j] : 0.0f;
        msr_products_sgemm(p, 0, 1, N, OC, IC, 1.0f, inp, IC, weight, IC, 1.0f, out, OC);
        return;
    }
    /* inp's rounding may already be in a (msr_products_operand) */
    msr_status_t st = MSR_OK;
    if (take_ready(p, inp, (size_t)N * (size_t)IC)) {
        if ((st = reserve(&p->b, &p->b_cap, (size_t)OC * (size_t)IC)) != MSR_OK) {
            fail(p, st);
            return;
        }
        round_rows(p->b, weight, IC, OC, IC);
    } else if (!round_operands(p, inp, IC, N, IC, weight, IC, OC, IC)) {
        return;
    }
    st = msr_gemm_bf16_bias(p->gemm, false, true, N, OC, IC, p->a, IC, p->b, IC, bias, out, OC);
    if (st != MSR_OK)
        fail(p, st);
}

void msr_products_linear_backward(msr_products_t *p, float *dinp, float *dweight, const float *dout,
                                  const float *inp, const float *weight, int N, int IC, int OC)
{
    if (p != NULL)
        p->ready = NULL;
    if (p == NULL || p->precision == MSR_PRECISION_FP32 || N <= 0 || IC <= 0 || OC <= 0) {
        msr_products_sgemm(p, 0, 0, N, IC, OC, 1.0f, dout, OC, weight, IC, 1.0f, dinp, IC);
        msr_products_sgemm(p, 1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
        return;
    }
    /* dout (N,OC) rounded once into a, for both products; b holds the
     * weight (OC,IC), then inp (N,IC) */
    size_t nb = (size_t)(N > OC ? N : OC) * (size_t)IC;
    msr_status_t st = reserve(&p->a, &p->a_cap, (size_t)N * (size_t)OC);
    if (st == MSR_OK)
        st = reserve(&p->b, &p->b_cap, nb);
    if (st != MSR_OK) {
        fail(p, st);
        return;
    }
    round_rows(p->a, dout, OC, N, OC);
    round_rows(p->b, weight, IC, OC, IC);
    st = msr_gemm_bf16(p->gemm, false, false, N, IC, OC, 1.0f, p->a, OC, p->b, IC, 1.0f, dinp, IC);
    if (st == MSR_OK) {
        round_rows(p->b, inp, IC, N, IC);
        st = msr_gemm_bf16(p->gemm, true, false, OC, IC, N, 1.0f, p->a, OC, p->b, IC, 1.0f, dweight,
                           IC);
    }
    if (st != MSR_OK)
        fail(p, st);
}

void msr_layernorm_forward_bf16(float *out, uint16_t *out16, float *mean, float *rstd,
                                const float *inp, const float *weight, const float *bias, int N,
                                int C)
{
    if (out16 == NULL) {
        msr_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
        return;
    }
    /* a row at a time, so that its rounding reads it from the L1 cache:
     * the rows are independent, so the same bits as the whole at once */
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * (size_t)C;
        msr_layernorm_forward(out + o, mean + n, rstd + n, inp + o, weight, bias, 1, C);
        msr_bf16_from_f32_n(out16 + o, out + o, (size_t)C);
    }
}

/* GELU's elements a block at a time (8 KiB of fp32, 4 KiB of bf16: both
 * in the L1 cache when rounded) */
#define GELU_BF16_BLOCK 2048

void msr_gelu_forward_bf16(float *out, uint16_t *out16, const float *inp, size_t n)
{
    if (out16 == NULL) {
        msr_gelu_forward(out, inp, n);
        return;
    }
    for (size_t i = 0; i < n; i += GELU_BF16_BLOCK) {
        size_t m = n - i < GELU_BF16_BLOCK ? n - i : GELU_BF16_BLOCK;
        msr_gelu_forward(out + i, inp + i, m);
        msr_bf16_from_f32_n(out16 + i, out + i, m);
    }
}
