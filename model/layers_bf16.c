/* The layers' products context (layers.h): fp32 products, or bf16 operands
 * rounded into scratch and multiplied by msr_gemm_bf16 with fp32 sums; and
 * the layernorm and GELU (forward and backward) that hand it their output
 * already rounded. */
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
    const float *held;     /* the operand whose handed rounding the last product took and */
    size_t held_n;         /* left in a (msr_products_operand_again); NULL: none */
    msr_status_t status;   /* the first failure (MSR_OK: none) */
    /* the weights' roundings kept for a step (msr_products_keep_weights) */
    const float *w_base; /* the parameters whose weights may be kept; NULL: none */
    size_t w_n;          /* their elements */
    uint16_t *w16;       /* (w_n) the kept roundings, where w_kept says */
    bool w_on;           /* between msr_products_weights_begin and _end */
    struct kept {
        size_t off, n; /* w16[off, off + n) holds w_base[off, off + n) rounded */
    } * w_kept;
    size_t w_kept_n, w_kept_cap;
    /* operands rounded once for several products (msr_products_hold) */
    struct hold {
        const float *src; /* the held fp32 operand; NULL: the slot is free */
        size_t n;         /* its elements */
        uint16_t *buf;    /* (cap) its rounding, element for element */
        size_t cap;       /* grown to the largest held, kept until destroy */
    } holds[MSR_PRODUCTS_HOLDS];
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
    msr_free(p->w16);
    msr_free(p->w_kept);
    for (int i = 0; i < MSR_PRODUCTS_HOLDS; i++)
        msr_free(p->holds[i].buf);
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
    if (p == NULL)
        return 0;
    size_t n = p->a_cap + p->b_cap + p->w_n;
    for (int i = 0; i < MSR_PRODUCTS_HOLDS; i++)
        n += p->holds[i].cap;
    return n * sizeof(uint16_t);
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

/* a and b hold at least na and nb elements; false (recorded) when they
 * cannot grow */
static bool reserve_both(msr_products_t *p, size_t na, size_t nb)
{
    msr_status_t st = reserve(&p->a, &p->a_cap, na);
    if (st == MSR_OK)
        st = reserve(&p->b, &p->b_cap, nb);
    if (st != MSR_OK)
        fail(p, st);
    return st == MSR_OK;
}

msr_status_t msr_products_keep_weights(msr_products_t *p, const float *params, size_t n)
{
    if (p == NULL || p->precision != MSR_PRECISION_BF16)
        return MSR_OK;
    uint16_t *w16 = NULL;
    if (params != NULL && n > 0 && (w16 = msr_malloc(n * sizeof *w16)) == NULL) {
        MSR_ERROR("products: cannot allocate %zu bytes for the weights' bf16 copies",
                  n * sizeof *w16);
        return MSR_ERR_NO_MEMORY;
    }
    msr_free(p->w16);
    p->w16 = w16;
    p->w_base = w16 != NULL ? params : NULL;
    p->w_n = w16 != NULL ? n : 0;
    p->w_on = false;
    p->w_kept_n = 0;
    return MSR_OK;
}

void msr_products_weights_begin(msr_products_t *p)
{
    if (p == NULL)
        return;
    p->w_kept_n = 0;
    p->w_on = p->w16 != NULL;
}

void msr_products_weights_end(msr_products_t *p)
{
    if (p == NULL)
        return;
    p->w_kept_n = 0;
    p->w_on = false;
}

/* Notes w16[off, off + n) as kept; false when the list cannot grow */
static bool add_kept(msr_products_t *p, size_t off, size_t n)
{
    if (p->w_kept_n == p->w_kept_cap) {
        size_t cap = p->w_kept_cap > 0 ? 2 * p->w_kept_cap : 64;
        struct kept *k = msr_realloc(p->w_kept, cap * sizeof *k);
        if (k == NULL)
            return false;
        p->w_kept = k;
        p->w_kept_cap = cap;
    }
    p->w_kept[p->w_kept_n++] = (struct kept){off, n};
    return true;
}

/* The bf16 operand of the weight w (rows, cols) packed: during a step, for
 * a weight among the kept parameters, its kept rounding (made the first
 * time); otherwise w rounded into b, which holds rows * cols elements */
static const uint16_t *weight_operand(msr_products_t *p, const float *w, int rows, int cols)
{
    size_t n = (size_t)rows * (size_t)cols;
    uintptr_t at = (uintptr_t)w, base = (uintptr_t)p->w_base;
    if (p->w_on && at >= base && (at - base) % sizeof *w == 0 && n <= p->w_n &&
        (at - base) / sizeof *w <= p->w_n - n) {
        size_t off = (at - base) / sizeof *w;
        for (size_t i = 0; i < p->w_kept_n; i++)
            if (p->w_kept[i].off == off && p->w_kept[i].n == n)
                return p->w16 + off;
        if (add_kept(p, off, n)) {
            msr_bf16_from_f32_n(p->w16 + off, w, n);
            return p->w16 + off;
        }
    }
    round_rows(p->b, w, cols, rows, cols);
    return p->b;
}

uint16_t *msr_products_operand(msr_products_t *p, const float *src, size_t n)
{
    if (p == NULL || p->precision != MSR_PRECISION_BF16 || src == NULL || n == 0)
        return NULL;
    /* a grows to src's size, which the product that reads it all would
     * make it (a product that reads a block of it takes a smaller one) */
    if (n > p->a_cap && reserve(&p->a, &p->a_cap, n) != MSR_OK)
        return NULL;
    p->ready = src;
    p->ready_n = n;
    p->held = NULL; /* a is the caller's to write now */
    return p->a;
}

bool msr_products_operand_again(msr_products_t *p, const float *src, size_t n)
{
    if (p == NULL || p->held == NULL || p->held != src || p->held_n != n)
        return false;
    p->ready = src;
    p->ready_n = n;
    return true;
}

bool msr_products_hold(msr_products_t *p, int slot, const float *src, size_t n)
{
    if (p == NULL || p->precision != MSR_PRECISION_BF16 || slot < 0 || slot >= MSR_PRODUCTS_HOLDS ||
        src == NULL || n == 0)
        return false;
    struct hold *h = &p->holds[slot];
    h->src = NULL;
    if (reserve(&h->buf, &h->cap, n) != MSR_OK)
        return false; /* the products round src themselves, as before */
    msr_bf16_from_f32_n(h->buf, src, n);
    h->src = src;
    h->n = n;
    return true;
}

void msr_products_release(msr_products_t *p, int slot)
{
    if (p != NULL && slot >= 0 && slot < MSR_PRODUCTS_HOLDS)
        p->holds[slot].src = NULL;
}

/* The held rounding of the operand at inp, rows of cols elements ld apart,
 * when all of it lies inside a held operand (its rows then lie ld apart
 * there too); NULL otherwise */
static const uint16_t *held_block(const msr_products_t *p, const float *inp, size_t ld, size_t rows,
                                  size_t cols)
{
    if (inp == NULL || rows == 0 || cols == 0 || ld < cols)
        return NULL;
    uintptr_t at = (uintptr_t)inp;
    size_t extent = (rows - 1) * ld + cols;
    for (int i = 0; i < MSR_PRODUCTS_HOLDS; i++) {
        const struct hold *h = &p->holds[i];
        uintptr_t base = (uintptr_t)h->src;
        if (h->src == NULL || at < base || (at - base) % sizeof *inp != 0)
            continue;
        size_t off = (at - base) / sizeof *inp;
        if (off <= h->n && extent <= h->n - off)
            return h->buf + off;
    }
    return NULL;
}

/* Whether a holds the rounding of the operand at inp, rows of cols
 * elements ld apart (ld >= cols), for this product, and where: then *off_p
 * is inp's offset in the handed-over operand, whose rounding a mirrors
 * element for element, so the rows lie at a + *off_p, ld apart. The
 * handover lasts one product, whichever it is. Every product calls this
 * first: one that takes the handover leaves it in a (held, for
 * msr_products_operand_again), any other overwrites a. */
static bool take_block(msr_products_t *p, const float *inp, size_t ld, size_t rows, size_t cols,
                       size_t *off_p)
{
    uintptr_t at = (uintptr_t)inp, base = (uintptr_t)p->ready;
    bool ready = p->ready != NULL && inp != NULL && rows > 0 && cols > 0 && ld >= cols &&
                 at >= base && (at - base) % sizeof *inp == 0;
    size_t off = ready ? (at - base) / sizeof *inp : 0;
    size_t extent = ready ? (rows - 1) * ld + cols : 0;
    ready = ready && off <= p->ready_n && extent <= p->ready_n - off;
    p->held = ready ? p->ready : NULL;
    p->held_n = ready ? p->ready_n : 0;
    p->ready = NULL;
    if (ready)
        *off_p = off;
    return ready;
}

/* As take_block, for an operand that is all of the handed-over one (inp
 * itself, n elements) or none of it */
static bool take_ready(msr_products_t *p, const float *inp, size_t n)
{
    bool ready = p->ready != NULL && p->ready == inp && p->ready_n == n;
    p->ready = NULL;
    p->held = ready ? inp : NULL;
    p->held_n = ready ? n : 0;
    return ready;
}

void msr_products_sgemm(msr_products_t *p, int trans_a, int trans_b, int M, int N, int K,
                        float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                        float *C, int ldc)
{
    /* the stored shapes: A (M,K) or (K,M) when transposed, B (K,N) or (N,K) */
    int ar = trans_a ? K : M, ac = trans_a ? M : K;
    int br = trans_b ? N : K, bc = trans_b ? K : N;
    /* A's rounding may already be in a (msr_products_operand), all of it
     * or the block A is of it, at a + a_off with A's row stride */
    size_t a_off = 0;
    bool ready = p != NULL && M > 0 && N > 0 && K > 0 &&
                 take_block(p, A, (size_t)lda, (size_t)ar, (size_t)ac, &a_off);
    if (p != NULL && !ready)
        take_ready(p, NULL, 0);
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
    /* A: handed over (in a, which must not be reallocated then), held,
     * or rounded packed into a; B: held, or rounded packed into b */
    const uint16_t *a16 =
        ready ? p->a + a_off : held_block(p, A, (size_t)lda, (size_t)ar, (size_t)ac);
    const uint16_t *b16 = held_block(p, B, (size_t)ldb, (size_t)br, (size_t)bc);
    int lda16 = lda, ldb16 = ldb;
    msr_status_t st = MSR_OK;
    if (a16 == NULL && (st = reserve(&p->a, &p->a_cap, (size_t)ar * (size_t)ac)) == MSR_OK) {
        round_rows(p->a, A, lda, ar, ac);
        a16 = p->a;
        lda16 = ac > 0 ? ac : 1;
    }
    if (st == MSR_OK && b16 == NULL &&
        (st = reserve(&p->b, &p->b_cap, (size_t)br * (size_t)bc)) == MSR_OK) {
        round_rows(p->b, B, ldb, br, bc);
        b16 = p->b;
        ldb16 = bc > 0 ? bc : 1;
    }
    if (st != MSR_OK) {
        fail(p, st);
        return;
    }
    st = msr_gemm_bf16(p->gemm, trans_a != 0, trans_b != 0, M, N, K, alpha, a16, lda16, b16, ldb16,
                       beta, C, ldc);
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
    /* inp's rounding may already be in a (msr_products_operand), the
     * weight's kept for the step */
    bool ready = take_ready(p, inp, (size_t)N * (size_t)IC);
    if (!reserve_both(p, (size_t)N * (size_t)IC, (size_t)OC * (size_t)IC))
        return;
    if (!ready)
        round_rows(p->a, inp, IC, N, IC);
    const uint16_t *w = weight_operand(p, weight, OC, IC);
    msr_status_t st =
        msr_gemm_bf16_bias(p->gemm, false, true, N, OC, IC, p->a, IC, w, IC, bias, out, OC);
    if (st != MSR_OK)
        fail(p, st);
}

void msr_products_linear_backward(msr_products_t *p, float beta, float *dinp, float *dweight,
                                  const float *dout, const float *inp, const float *weight, int N,
                                  int IC, int OC)
{
    /* dout's rounding may already be in a (msr_products_operand) */
    bool ready = p != NULL && N > 0 && OC > 0 && take_ready(p, dout, (size_t)N * (size_t)OC);
    if (p == NULL || p->precision == MSR_PRECISION_FP32 || N <= 0 || IC <= 0 || OC <= 0) {
        msr_products_sgemm(p, 0, 0, N, IC, OC, 1.0f, dout, OC, weight, IC, beta, dinp, IC);
        msr_products_sgemm(p, 1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
        return;
    }
    /* dout (N,OC) rounded once into a, for both products (unless handed
     * over: a, already that large, is not reallocated); b holds the weight
     * (OC,IC) unless it is kept, then inp (N,IC) */
    size_t nb = (size_t)(N > OC ? N : OC) * (size_t)IC;
    if (!reserve_both(p, (size_t)N * (size_t)OC, nb))
        return;
    if (!ready)
        round_rows(p->a, dout, OC, N, OC);
    const uint16_t *w = weight_operand(p, weight, OC, IC);
    msr_status_t st =
        msr_gemm_bf16(p->gemm, false, false, N, IC, OC, 1.0f, p->a, OC, w, IC, beta, dinp, IC);
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

/* The GELU backward a block at a time: dinp zeroed first when set, then
 * accumulated, then rounded into dinp16 unless NULL */
static void gelu_backward_blocks(float *dinp, uint16_t *dinp16, const float *inp, const float *dout,
                                 size_t n, bool set)
{
    for (size_t i = 0; i < n; i += GELU_BF16_BLOCK) {
        size_t m = n - i < GELU_BF16_BLOCK ? n - i : GELU_BF16_BLOCK;
        if (set)
            memset(dinp + i, 0, m * sizeof *dinp);
        msr_gelu_backward(dinp + i, inp + i, dout + i, m);
        if (dinp16 != NULL)
            msr_bf16_from_f32_n(dinp16 + i, dinp + i, m);
    }
}

void msr_gelu_backward_bf16(float *dinp, uint16_t *dinp16, const float *inp, const float *dout,
                            size_t n)
{
    if (dinp16 == NULL)
        msr_gelu_backward(dinp, inp, dout, n);
    else
        gelu_backward_blocks(dinp, dinp16, inp, dout, n, false);
}

void msr_gelu_backward_set_bf16(float *dinp, uint16_t *dinp16, const float *inp, const float *dout,
                                size_t n)
{
    gelu_backward_blocks(dinp, dinp16, inp, dout, n, true);
}
