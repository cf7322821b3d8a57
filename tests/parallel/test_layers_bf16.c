/* The layers' products context (model/layers.h): fp32 is cblas_sgemm
 * bitwise; bf16 on the blas path is, bitwise, the fp32 kernel run on
 * operands rounded to bf16 first (it widens them exactly and calls the
 * same sgemm); on another path (onednn), which sums in its own order,
 * it is within fp32's summation bound of that (same_product); either
 * differs from fp32 on operands that are not bf16 numbers;
 * attention in bf16 stays within a bound derived from bf16's rounding;
 * a failed product's status sticks, every allocation failing in turn
 * included; the precision names parse; the layernorm and GELU (forward,
 * and GELU's backward for its output gradient) that round their output
 * for the next product give the separate passes' bits, and that product
 * takes the operand only when it is its own; a weight kept
 * for a step is rounded once, between weights_begin and _end only and
 * only inside the parameters given, and counted in the scratch bytes. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/bf16.h"
#include "model/gemm_bf16.h"
#include "model/layers.h"
#include "model/rng.h"
#include "tests/runner.h"

/* n values in [-1, 1) from stream s, not bf16 numbers (almost surely) */
static void random_floats_into(float *x, size_t n, uint64_t s)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2.0 * msr_rng_open01(msr_rng_u64(42, s, i)) - 1.0);
}

static float *random_floats(size_t n, uint64_t s)
{
    float *x = malloc(n * sizeof *x);
    random_floats_into(x, n, s);
    return x;
}

static float *rounded(const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++)
        y[i] = msr_f32_from_bf16(msr_bf16_from_f32(x[i]));
    return y;
}

static float *magnitudes(const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++)
        y[i] = fabsf(x[i]);
    return y;
}

/* The path the bf16 products context takes here (MSRUN_BF16_GEMM, the
 * CPU); blas when it cannot be made */
static msr_gemm_bf16_path_t bf16_path(void)
{
    msr_gemm_bf16_t *g = NULL;
    if (msr_gemm_bf16_create(MSR_GEMM_BF16_AUTO, &g) != MSR_OK)
        return MSR_GEMM_BF16_BLAS;
    msr_gemm_bf16_path_t path = msr_gemm_bf16_path(g);
    msr_gemm_bf16_destroy(g);
    return path;
}

/* got is the bf16 product of operands whose fp32-kernel result on the
 * rounded operands is want; mag is that kernel's result on their absolute
 * values (sum |a_k b_k| plus |c| and |bias|), n_terms the terms summed
 * (K plus c and the bias). The blas path must be bitwise; another path
 * multiplies the same bf16 numbers exactly in fp32 and sums them in its
 * own order: each result is within gamma_n = n u / (1 - n u) (u = 2^-24)
 * of the exact sum times mag, so the two within 2 gamma_n mag, plus
 * n 2^-126 for vdpbf16ps's flushing of subnormals. */
static int same_product(const float *got, const float *want, const float *mag, size_t n,
                        int n_terms)
{
    if (bf16_path() == MSR_GEMM_BF16_BLAS)
        return memcmp(got, want, n * sizeof *got) == 0;
    double u = ldexp(1.0, -24), gamma = n_terms * u / (1 - n_terms * u);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (d > 2 * gamma * (double)mag[i] + n_terms * ldexp(1.0, -126)) {
            fprintf(stderr, "element %zu: |%g - %g| past the bound\n", i, (double)got[i],
                    (double)want[i]);
            return 0;
        }
    }
    return 1;
}

static void test_names(void)
{
    msr_precision_t p = MSR_PRECISION_BF16;
    MSR_CHECK_OK(msr_precision_parse("fp32", &p));
    MSR_CHECK_EQ(p, MSR_PRECISION_FP32);
    MSR_CHECK_OK(msr_precision_parse("bf16", &p));
    MSR_CHECK_EQ(p, MSR_PRECISION_BF16);
    const char *bad[] = {"", "BF16", "bf17", "fp16", "fp32 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        MSR_CHECK_STATUS(msr_precision_parse(bad[i], &p), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_precision_parse(NULL, &p), MSR_ERR_INVALID_ARG);
    MSR_CHECK_EQ(p, MSR_PRECISION_BF16); /* untouched by the failures */
    MSR_CHECK_STR(msr_precision_name(MSR_PRECISION_FP32), "fp32");
    MSR_CHECK_STR(msr_precision_name(MSR_PRECISION_BF16), "bf16");
    MSR_CHECK_STR(msr_precision_name((msr_precision_t)7), "?");
    msr_products_t *q = NULL;
    MSR_CHECK_STATUS(msr_products_create((msr_precision_t)7, &q), MSR_ERR_INVALID_ARG);
    MSR_CHECK(q == NULL);
    MSR_CHECK_EQ(msr_products_precision(NULL), MSR_PRECISION_FP32);
    msr_products_destroy(NULL);
}

enum { N = 37, IC = 45, OC = 29 }; /* odd, so no size is a kernel's multiple */

/* out (N,OC) of matmul_forward through prod on inp, w, b */
static float *forward(msr_products_t *prod, const float *inp, const float *w, const float *b)
{
    float *out = malloc((size_t)N * OC * sizeof *out);
    msr_matmul_forward(prod, out, inp, w, b, N, IC, OC);
    return out;
}

static void test_fp32_is_sgemm(void)
{
    float *inp = random_floats((size_t)N * IC, 1), *w = random_floats((size_t)OC * IC, 2);
    msr_products_t *p32 = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_FP32, &p32));
    float *a = forward(NULL, inp, w, NULL), *b = forward(p32, inp, w, NULL);
    float *c = calloc((size_t)N * OC, sizeof *c);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC, 1.0f, c,
                OC);
    MSR_CHECK(memcmp(a, c, (size_t)N * OC * sizeof *a) == 0);
    MSR_CHECK(memcmp(b, c, (size_t)N * OC * sizeof *b) == 0);
    MSR_CHECK_OK(msr_products_status(p32));
    msr_products_destroy(p32);
    free(inp), free(w), free(a), free(b), free(c);
}

static void test_bf16_matmul(void)
{
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = random_floats(ni, 3), *w = random_floats(nw, 4), *bias = random_floats(OC, 5);
    float *dout = random_floats(no, 6);
    float *rinp = rounded(inp, ni), *rw = rounded(w, nw), *rdout = rounded(dout, no);
    msr_products_t *p = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    MSR_CHECK_EQ(msr_products_precision(p), MSR_PRECISION_BF16);
    /* forward: the fp32 kernel on rounded operands, bitwise; not fp32's */
    float *got = forward(p, inp, w, bias), *want = forward(NULL, rinp, rw, bias);
    float *f32 = forward(NULL, inp, w, bias);
    float *ainp = magnitudes(rinp, ni), *aw = magnitudes(rw, nw), *abias = magnitudes(bias, OC);
    float *mag = forward(NULL, ainp, aw, abias);
    MSR_CHECK(same_product(got, want, mag, no, IC + 1));
    MSR_CHECK(memcmp(got, f32, no * sizeof *got) != 0);
    /* backward, both products accumulating into non-zero gradients (the
     * bias's column sums are fp32 either way: left out) */
    float *dinp = random_floats(ni, 7), *dw = random_floats(nw, 8);
    float *dinp2 = malloc(ni * sizeof *dinp2), *dw2 = malloc(nw * sizeof *dw2);
    memcpy(dinp2, dinp, ni * sizeof *dinp);
    memcpy(dw2, dw, nw * sizeof *dw);
    float *mdinp = magnitudes(dinp, ni), *mdw = magnitudes(dw, nw), *adout = magnitudes(rdout, no);
    msr_matmul_backward(NULL, dinp2, dw2, NULL, rdout, rinp, rw, N, IC, OC);
    msr_matmul_backward(NULL, mdinp, mdw, NULL, adout, ainp, aw, N, IC, OC);
    msr_matmul_backward(p, dinp, dw, NULL, dout, inp, w, N, IC, OC);
    MSR_CHECK(same_product(dinp, dinp2, mdinp, ni, OC + 1));
    MSR_CHECK(same_product(dw, dw2, mdw, nw, N + 1));
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p);
    free(inp), free(w), free(bias), free(dout), free(rinp), free(rw), free(rdout);
    free(got), free(want), free(f32), free(dinp), free(dw), free(dinp2), free(dw2);
    free(ainp), free(aw), free(abias), free(mag), free(mdinp), free(mdw), free(adout);
}

/* The bias folded into the product (msr_products_linear): against the
 * unfolded form (out filled with the bias, then the product accumulated
 * with beta 1) on the same rounded operands through a bf16 context of the
 * same path, at column counts around the vector widths (16 floats, and 32),
 * with out holding NaN beforehand (never read); no bias is a plain
 * product; fp32 stays bitwise the fill and sgemm. */
static void test_bias_folded(void)
{
    const int cols[] = {15, 16, 17, 31, 32, 33}, rows[] = {1, 5, 37};
    msr_products_t *p = NULL;
    msr_gemm_bf16_t *g = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    MSR_CHECK_OK(msr_gemm_bf16_create(MSR_GEMM_BF16_AUTO, &g));
    for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                int n = rows[ri], oc = cols[ci];
                size_t no = (size_t)n * oc, ni = (size_t)n * IC, nw = (size_t)oc * IC;
                float *inp = random_floats(ni, 20 + ci), *w = random_floats(nw, 30 + ri);
                float *bias = with_bias ? random_floats((size_t)oc, 40 + ci) : NULL;
                uint16_t *i16 = malloc(ni * sizeof *i16), *w16 = malloc(nw * sizeof *w16);
                msr_bf16_from_f32_n(i16, inp, ni);
                msr_bf16_from_f32_n(w16, w, nw);
                float *got = malloc(no * sizeof *got), *want = malloc(no * sizeof *want);
                float *mag = malloc(no * sizeof *mag);
                for (size_t i = 0; i < no; i++) {
                    got[i] = NAN;
                    want[i] = bias != NULL ? bias[i % (size_t)oc] : 0.0f;
                    mag[i] = bias != NULL ? fabsf(bias[i % (size_t)oc]) + (float)IC : (float)IC;
                }
                msr_matmul_forward(p, got, inp, w, bias, n, IC, oc);
                MSR_CHECK_OK(msr_gemm_bf16(g, false, true, n, oc, IC, 1.0f, i16, IC, w16, IC, 1.0f,
                                           want, oc));
                MSR_CHECK_MSG(same_product(got, want, mag, no, IC + 1), "%d x %d, bias %d", n, oc,
                              with_bias);
                free(inp), free(w), free(bias), free(i16), free(w16), free(got), free(want);
                free(mag);
            }
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p);
    msr_gemm_bf16_destroy(g);
}

/* The linear backward with dout rounded once (msr_products_linear_backward)
 * is bitwise the two products through msr_products_sgemm, on every path
 * (the same bf16 operands into the same products), at 15-17 and 31-33
 * output columns and rows; gradients accumulate into non-zero values. */
static void test_backward_once(void)
{
    const int cols[] = {15, 16, 17, 31, 32, 33};
    msr_products_t *p = NULL, *q = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &q));
    for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
        int n = cols[(ci + 2) % 6], oc = cols[ci];
        size_t no = (size_t)n * oc, ni = (size_t)n * IC, nw = (size_t)oc * IC;
        float *dout = random_floats(no, 50 + ci), *inp = random_floats(ni, 60 + ci);
        float *w = random_floats(nw, 70 + ci);
        float *dinp = random_floats(ni, 80 + ci), *dw = random_floats(nw, 90 + ci);
        float *dinp2 = malloc(ni * sizeof *dinp2), *dw2 = malloc(nw * sizeof *dw2);
        memcpy(dinp2, dinp, ni * sizeof *dinp);
        memcpy(dw2, dw, nw * sizeof *dw);
        msr_matmul_backward(p, dinp, dw, NULL, dout, inp, w, n, IC, oc);
        msr_products_sgemm(q, 0, 0, n, IC, oc, 1.0f, dout, oc, w, IC, 1.0f, dinp2, IC);
        msr_products_sgemm(q, 1, 0, oc, IC, n, 1.0f, dout, oc, inp, IC, 1.0f, dw2, IC);
        MSR_CHECK_MSG(memcmp(dinp, dinp2, ni * sizeof *dinp) == 0, "dinp, %d x %d", n, oc);
        MSR_CHECK_MSG(memcmp(dw, dw2, nw * sizeof *dw) == 0, "dweight, %d x %d", n, oc);
        free(dout), free(inp), free(w), free(dinp), free(dw), free(dinp2), free(dw2);
    }
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p);
    msr_products_destroy(q);
}

/* Causal attention, q, k, v in [-1, 1), head size HS. bf16 moves each
 * score q.k/sqrt(HS) by at most delta = (2u + u^2) HS / sqrt(HS) (each
 * operand within u = 2^-8 of its value, |q_c k_c| <= 1), plus fp32's
 * HS 2^-24 (in the slack); a softmax row's probabilities then move by a
 * factor within exp(+-2 delta), so by at most exp(2 delta) - 1 in sum, and
 * a.v, with a and v rounded once more (2u + u^2), by at most
 * (exp(2 delta) - 1 + 2u + u^2) max|v| <= that (|v| < 1). */
static void test_bf16_attention(void)
{
    enum { B = 2, T = 11, C = 24, NH = 3, HS = C / NH };
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = random_floats(nq, 9);
    float *o16 = malloc(no * sizeof *o16), *o32 = malloc(no * sizeof *o32);
    float *a16 = malloc(na * sizeof *a16), *a32 = malloc(na * sizeof *a32);
    msr_products_t *p = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    msr_attention_forward(p, o16, a16, qkv, B, T, C, NH);
    msr_attention_forward(NULL, o32, a32, qkv, B, T, C, NH);
    double u = ldexp(1.0, -8), delta = (2 * u + u * u) * HS / sqrt((double)HS);
    double bound = exp(2 * delta) - 1 + 2 * u + u * u, worst = 0;
    for (size_t i = 0; i < no; i++)
        worst = fmax(worst, fabs((double)o16[i] - (double)o32[i]));
    MSR_CHECK_MSG(worst <= bound, "attention bf16 vs fp32: %g > bound %g", worst, bound);
    MSR_CHECK(worst > 0);
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p);
    free(qkv), free(o16), free(o32), free(a16), free(a32);
}

/* A failed product's status sticks, later good products do not clear it;
 * fp32 contexts go straight to BLAS and have nothing to record. */
static void test_sticky_status(void)
{
    msr_products_t *p = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {0};
    msr_products_sgemm(p, 0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
    MSR_CHECK_OK(msr_products_status(p));
    MSR_CHECK(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4); /* small integers: exact */
    msr_products_sgemm(p, 0, 0, 2, -1, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
    MSR_CHECK_STATUS(msr_products_status(p), MSR_ERR_INVALID_ARG);
    msr_products_sgemm(p, 0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
    MSR_CHECK_STATUS(msr_products_status(p), MSR_ERR_INVALID_ARG);
    msr_products_destroy(p);
}

/* Every allocation of a bf16 context and its first product failing in
 * turn: creation fails cleanly (nothing written), a product records
 * MSR_ERR_NO_MEMORY; the first run that meets no failure is exact. */
static void test_no_memory(void)
{
    float *inp = random_floats((size_t)N * IC, 10), *w = random_floats((size_t)OC * IC, 11);
    float *ri = rounded(inp, (size_t)N * IC), *rw = rounded(w, (size_t)OC * IC);
    float *want = forward(NULL, ri, rw, NULL);
    float *ai = magnitudes(ri, (size_t)N * IC), *aw = magnitudes(rw, (size_t)OC * IC);
    float *mag = forward(NULL, ai, aw, NULL);
    for (long i = 0;; i++) {
        msr_products_t *p = NULL;
        msr_alloc_fail_at(i);
        msr_status_t st = msr_products_create(MSR_PRECISION_BF16, &p);
        float *got = st == MSR_OK ? forward(p, inp, w, NULL) : NULL;
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        if (st != MSR_OK) {
            MSR_CHECK_STATUS(st, MSR_ERR_NO_MEMORY);
            MSR_CHECK(p == NULL);
        } else if (failed) {
            MSR_CHECK_STATUS(msr_products_status(p), MSR_ERR_NO_MEMORY);
        } else {
            MSR_CHECK_OK(msr_products_status(p));
            MSR_CHECK(same_product(got, want, mag, (size_t)N * OC, IC + 1));
            MSR_CHECK(i >= 3); /* the context and its two operands' scratch */
        }
        msr_products_destroy(p);
        free(got);
        if (!failed)
            break;
    }
    free(inp), free(w), free(ri), free(rw), free(want), free(ai), free(aw), free(mag);
}

/* ---- the layernorm and GELU that round their output for the next
 * product (msr_products_operand) ---- */

/* n values of x rounded by the scalar loop: the independent rounding */
static uint16_t *rounded16(const float *x, size_t n)
{
    uint16_t *y = malloc((n > 0 ? n : 1) * sizeof *y);
    msr_bf16_from_f32_n_scalar(y, x, n);
    return y;
}

/* The fused kernels against the separate passes, bitwise: out, mean and
 * rstd as the fp32 kernels', out16 as the scalar rounding of that out, on
 * sizes around the vector widths (8 and 16 floats) and GELU's 2048-element
 * block; no element past the end written. GELU's inputs include values
 * it returns unchanged that lie halfway between two bf16 numbers (ties
 * to even), a NaN and infinities. */
static void check_fused_kernels(void)
{
    const int Cs[] = {1, 7, 8, 9, 15, 16, 17, 45, 384};
    for (size_t k = 0; k < sizeof Cs / sizeof Cs[0]; k++) {
        int C = Cs[k], Nr = 3;
        size_t n = (size_t)Nr * C;
        float *x = random_floats(n, 20 + k), *w = random_floats((size_t)C, 40 + k);
        float *b = random_floats((size_t)C, 60 + k);
        float *o1 = malloc(n * sizeof *o1), *o2 = malloc(n * sizeof *o2);
        float m1[3], r1[3], m2[3], r2[3];
        uint16_t *o16 = malloc((n + 1) * sizeof *o16);
        o16[n] = 0xabcd;
        msr_layernorm_forward(o1, m1, r1, x, w, b, Nr, C);
        msr_layernorm_forward_bf16(o2, o16, m2, r2, x, w, b, Nr, C);
        uint16_t *want = rounded16(o1, n);
        MSR_CHECK(memcmp(o1, o2, n * sizeof *o1) == 0);
        MSR_CHECK(memcmp(m1, m2, sizeof m1) == 0 && memcmp(r1, r2, sizeof r1) == 0);
        MSR_CHECK(memcmp(o16, want, n * sizeof *o16) == 0);
        MSR_CHECK_EQ(o16[n], 0xabcd);
        msr_layernorm_forward_bf16(o2, NULL, m2, r2, x, w, b, Nr, C); /* fp32 alone */
        MSR_CHECK(memcmp(o1, o2, n * sizeof *o1) == 0);
        free(x), free(w), free(b), free(o1), free(o2), free(o16), free(want);
    }
    const size_t ns[] = {0, 1, 7, 8, 9, 17, 2047, 2048, 2049, 4096 + 13};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        size_t n = ns[k];
        float *x = random_floats(n + 1, 80 + k);
        for (size_t i = 0; i < n; i++)
            x[i] *= 8.0f;
        if (n >= 9) {
            x[1] = 16.0625f; /* gelu(x) = x, between 16 and 16.125: to 16 */
            x[2] = 16.1875f; /* between 16.125 and 16.25: to 16.25 */
            x[3] = NAN;
            x[4] = INFINITY;
            x[5] = -INFINITY;
            x[n - 1] = 16.0625f; /* the last, in the scalar tail */
        }
        float *o1 = malloc((n + 1) * sizeof *o1), *o2 = malloc((n + 1) * sizeof *o2);
        uint16_t *o16 = malloc((n + 1) * sizeof *o16);
        o16[n] = 0xabcd;
        msr_gelu_forward(o1, x, n);
        msr_gelu_forward_bf16(o2, o16, x, n);
        uint16_t *want = rounded16(o1, n);
        MSR_CHECK(memcmp(o1, o2, n * sizeof *o1) == 0);
        MSR_CHECK(memcmp(o16, want, n * sizeof *o16) == 0);
        MSR_CHECK_EQ(o16[n], 0xabcd);
        if (n >= 9)
            MSR_CHECK(o16[1] == 0x4180 && o16[2] == 0x4182 && o16[n - 1] == 0x4180);
        /* backward: dinp accumulates onto what it held, then is rounded */
        float *d = random_floats(n + 1, 100 + k), *g1 = random_floats(n + 1, 120 + k);
        memcpy(o2, g1, (n + 1) * sizeof *o2);
        o16[n] = 0xabcd;
        msr_gelu_backward(g1, x, d, n);
        msr_gelu_backward_bf16(o2, o16, x, d, n);
        uint16_t *gwant = rounded16(g1, n);
        MSR_CHECK(memcmp(g1, o2, (n + 1) * sizeof *o2) == 0);
        MSR_CHECK(memcmp(o16, gwant, n * sizeof *o16) == 0);
        MSR_CHECK_EQ(o16[n], 0xabcd);
        msr_gelu_backward_bf16(o2, NULL, x, d, n); /* fp32 alone */
        msr_gelu_backward(g1, x, d, n);
        MSR_CHECK(memcmp(g1, o2, n * sizeof *o2) == 0);
        free(x), free(o1), free(o2), free(o16), free(want), free(d), free(g1), free(gwant);
    }
}

static void test_fused_kernels(void)
{
    check_fused_kernels();
}

/* as a CPU without AVX-512 (CI's), then without AVX2 too (the scalar
 * GELU and rounding) */
static void test_fused_kernels_avx2(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx512_bf16,avx512f", 1);
    check_fused_kernels();
}

static void test_fused_kernels_scalar(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx2,avx512_bf16,avx512f", 1);
    check_fused_kernels();
}

/* The handover: a layernorm that writes its product's operand gives that
 * product bitwise the output of the separate passes; the operand grows
 * the scratch to n elements, as the product reading it would (n at what
 * the scratch holds: no growth; one past: one element more), and is never
 * offered by fp32 or NULL contexts, nor for n 0;
 * a product of another input, of another size, or after another product
 * rounds its own input (the buffer handed over is filled with garbage to
 * tell). */
static void check_handover(void)
{
    size_t ni = (size_t)N * IC, no = (size_t)N * OC;
    float *x = random_floats(ni, 30), *lw = random_floats(IC, 31), *lb = random_floats(IC, 32);
    float *w = random_floats((size_t)OC * IC, 33), *bias = random_floats(OC, 34);
    float *ln = malloc(ni * sizeof *ln), *other = random_floats(ni, 35), mean[N], rstd[N];
    msr_products_t *p = NULL, *p32 = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_FP32, &p32));
    MSR_CHECK(msr_products_operand(NULL, ln, ni) == NULL);
    MSR_CHECK(msr_products_operand(p32, ln, ni) == NULL);
    MSR_CHECK_EQ(msr_products_scratch_bytes(p32), 0);
    MSR_CHECK(msr_products_operand(p, ln, 0) == NULL);
    msr_layernorm_forward(ln, mean, rstd, x, lw, lb, N, IC);
    float *want = malloc(no * sizeof *want), *got = malloc(no * sizeof *got);
    msr_matmul_forward(p, want, ln, w, bias, N, IC, OC); /* the separate passes */
    float *want_other = malloc(no * sizeof *want_other);
    msr_matmul_forward(p, want_other, other, w, bias, N, IC, OC);
    size_t bytes = msr_products_scratch_bytes(p);
    MSR_CHECK(msr_products_operand(p, ln, ni) != NULL); /* the product's A: held already */
    MSR_CHECK_EQ(msr_products_scratch_bytes(p), bytes);
    MSR_CHECK(msr_products_operand(p, ln, ni + 1) != NULL);
    MSR_CHECK_EQ(msr_products_scratch_bytes(p), bytes + sizeof(uint16_t));
    bytes += sizeof(uint16_t);
    uint16_t *o16 = msr_products_operand(p, ln, ni);
    MSR_CHECK(o16 != NULL);
    memset(ln, 0, ni * sizeof *ln);
    msr_layernorm_forward_bf16(ln, o16, mean, rstd, x, lw, lb, N, IC);
    msr_matmul_forward(p, got, ln, w, bias, N, IC, OC);
    MSR_CHECK(memcmp(got, want, no * sizeof *got) == 0);
    /* not for another input, nor for ln of another size */
    memset(msr_products_operand(p, ln, ni), 0x7f, ni * sizeof(uint16_t));
    msr_matmul_forward(p, got, other, w, bias, N, IC, OC);
    MSR_CHECK(memcmp(got, want_other, no * sizeof *got) == 0);
    memset(msr_products_operand(p, ln, ni - IC), 0x7f, ni * sizeof(uint16_t));
    msr_matmul_forward(p, got, ln, w, bias, N, IC, OC);
    MSR_CHECK(memcmp(got, want, no * sizeof *got) == 0);
    /* nor after another product (a 1 x 1 one, rounding one element) */
    float one = 1.0f, c = 0.0f;
    memset(msr_products_operand(p, ln, ni), 0x7f, ni * sizeof(uint16_t));
    msr_products_sgemm(p, 0, 0, 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1);
    MSR_CHECK(c == 1.0f);
    msr_matmul_forward(p, got, ln, w, bias, N, IC, OC);
    MSR_CHECK(memcmp(got, want, no * sizeof *got) == 0);
    MSR_CHECK_EQ(msr_products_scratch_bytes(p), bytes);
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p), msr_products_destroy(p32);
    free(x), free(lw), free(lb), free(w), free(bias), free(ln), free(other);
    free(want), free(got), free(want_other);
}

static void test_handover(void)
{
    check_handover();
}

/* the blas path, a CPU without bf16 units */
static void test_handover_blas(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx512_bf16,avx512f", 1);
    check_handover();
}

/* dinp (N,IC) and dweight (OC,IC) of the linear layer's backward from
 * zero, its output gradient dout (N,OC) = gelu'(h) * dg as the GELU's
 * backward writes it into dout's storage (from zero), handing the product
 * dout's rounding (msr_products_operand) when fused; one array. */
static float *gelu_linear_backward(msr_products_t *p, float *dout, const float *h, const float *dg,
                                   const float *inp, const float *w, int fused)
{
    size_t no = (size_t)N * OC, ni = (size_t)N * IC, nw = (size_t)OC * IC;
    float *got = calloc(ni + nw, sizeof *got);
    memset(dout, 0, no * sizeof *dout);
    if (fused)
        msr_gelu_backward_bf16(dout, msr_products_operand(p, dout, no), h, dg, no);
    else
        msr_gelu_backward(dout, h, dg, no);
    msr_matmul_backward(p, got, got + ni, NULL, dout, inp, w, N, IC, OC);
    return got;
}

/* The handover in backward: a GELU backward that writes its product's
 * output gradient gives that product (msr_products_linear_backward)
 * bitwise the separate passes' dinp and dweight; a handover of another
 * array, or of the right one at another size, is not taken (the buffer
 * handed over is filled with garbage to tell). */
static void check_handover_backward(void)
{
    size_t no = (size_t)N * OC, ni = (size_t)N * IC, nw = (size_t)OC * IC;
    float *inp = random_floats(ni, 50), *w = random_floats(nw, 51), *h = random_floats(no, 52);
    float *dg = random_floats(no, 53), *dout = malloc(no * sizeof *dout);
    msr_products_t *p = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    float *want = gelu_linear_backward(p, dout, h, dg, inp, w, 0);
    size_t bytes = msr_products_scratch_bytes(p);
    float *got = gelu_linear_backward(p, dout, h, dg, inp, w, 1);
    MSR_CHECK(memcmp(got, want, (ni + nw) * sizeof *got) == 0);
    free(got);
    float *other = random_floats(no, 54);
    memset(msr_products_operand(p, other, no), 0x7f, no * sizeof(uint16_t));
    got = calloc(ni + nw, sizeof *got);
    msr_matmul_backward(p, got, got + ni, NULL, dout, inp, w, N, IC, OC);
    MSR_CHECK(memcmp(got, want, (ni + nw) * sizeof *got) == 0);
    memset(got, 0, (ni + nw) * sizeof *got);
    memset(msr_products_operand(p, dout, no - OC), 0x7f, no * sizeof(uint16_t));
    msr_matmul_backward(p, got, got + ni, NULL, dout, inp, w, N, IC, OC);
    MSR_CHECK(memcmp(got, want, (ni + nw) * sizeof *got) == 0);
    MSR_CHECK_EQ(msr_products_scratch_bytes(p), bytes);
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p);
    free(inp), free(w), free(h), free(dg), free(dout), free(want), free(got), free(other);
}

static void test_handover_backward(void)
{
    check_handover_backward();
}

static void test_handover_backward_blas(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx512_bf16,avx512f", 1);
    check_handover_backward();
}

/* out (N,OC) of the linear layer through prod with the weight w, then
 * its backward's dinp (N,IC) and dweight (OC,IC), from zero, one array */
static float *linear_want(msr_products_t *prod, const float *inp, const float *w, const float *dout)
{
    size_t no = (size_t)N * OC, ni = (size_t)N * IC, nw = (size_t)OC * IC;
    float *want = calloc(no + ni + nw, sizeof *want);
    msr_matmul_forward(prod, want, inp, w, NULL, N, IC, OC);
    msr_matmul_backward(prod, want + no, want + no + ni, NULL, dout, inp, w, N, IC, OC);
    return want;
}

/* whether linear_want gives want's bits */
static int linear_same(msr_products_t *prod, const float *inp, const float *w, const float *dout,
                       const float *want)
{
    float *got = linear_want(prod, inp, w, dout);
    size_t n = (size_t)N * OC + (size_t)N * IC + (size_t)OC * IC;
    int same = memcmp(got, want, n * sizeof *got) == 0;
    free(got);
    return same;
}

/* The weights kept for a step: params holds a weight at offset 3 and one
 * ending exactly at its end (kept), with room past it for one that starts
 * inside and ends one element past (not kept); a weight is rewritten
 * between products, which a kept one must not notice until weights_end
 * (and only then: outside a step, and after the next begin, the products
 * see the new values); the copy's bytes are in the scratch count. */
static void check_kept_weights(void)
{
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, total = 3 + 2 * nw + 5;
    float *inp = random_floats(ni, 40), *dout = random_floats((size_t)N * OC, 41);
    float *params = random_floats(total + 1, 42), *fresh = random_floats(total + 1, 43);
    float *first = params + 3, *last = params + total - nw, *past = last + 1;
    msr_products_t *p = NULL, *q = NULL, *p32 = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &q));
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_FP32, &p32));
    MSR_CHECK_OK(msr_products_keep_weights(p32, params, total)); /* nothing for fp32 */
    MSR_CHECK_EQ(msr_products_scratch_bytes(p32), 0);
    MSR_CHECK_OK(msr_products_keep_weights(NULL, params, total));
    MSR_CHECK_OK(msr_products_keep_weights(p, params, total));
    float *old[3], *neu[3], *w[3] = {first, last, past};
    for (int k = 0; k < 3; k++)
        old[k] = linear_want(q, inp, w[k], dout);
    memcpy(params, fresh, (total + 1) * sizeof *params);
    for (int k = 0; k < 3; k++)
        neu[k] = linear_want(q, inp, w[k], dout);
    memcpy(fresh, params, (total + 1) * sizeof *params); /* fresh: the new values */
    random_floats_into(params, total + 1, 42);           /* params: the old ones again */
    /* outside a step every product rounds its weight */
    MSR_CHECK(linear_same(p, inp, first, dout, old[0]));
    memcpy(params, fresh, (total + 1) * sizeof *params);
    MSR_CHECK(linear_same(p, inp, first, dout, neu[0]));
    random_floats_into(params, total + 1, 42);
    /* in a step, the kept ones hold their first rounding */
    msr_products_weights_begin(p);
    for (int k = 0; k < 3; k++)
        MSR_CHECK_MSG(linear_same(p, inp, w[k], dout, old[k]), "weight %d, first", k);
    memcpy(params, fresh, (total + 1) * sizeof *params);
    MSR_CHECK_MSG(linear_same(p, inp, first, dout, old[0]), "at offset 3: kept");
    MSR_CHECK_MSG(linear_same(p, inp, last, dout, old[1]), "ending at the end: kept");
    MSR_CHECK_MSG(linear_same(p, inp, past, dout, neu[2]), "one past the end: not kept");
    msr_products_weights_end(p);
    for (int k = 0; k < 3; k++)
        MSR_CHECK_MSG(linear_same(p, inp, w[k], dout, neu[k]), "weight %d after the step", k);
    /* nor kept after it */
    random_floats_into(params, total + 1, 42);
    MSR_CHECK_MSG(linear_same(p, inp, first, dout, old[0]), "after the step: not kept");
    /* a begin drops what the step before kept, even with no end */
    msr_products_weights_begin(p);
    MSR_CHECK(linear_same(p, inp, first, dout, old[0]));
    memcpy(params, fresh, (total + 1) * sizeof *params);
    msr_products_weights_begin(p);
    for (int k = 0; k < 3; k++)
        MSR_CHECK_MSG(linear_same(p, inp, w[k], dout, neu[k]), "weight %d, next step", k);
    msr_products_weights_end(p);
    /* the copy's bytes, then none once freed */
    MSR_CHECK_EQ(msr_products_scratch_bytes(p), msr_products_scratch_bytes(q) + 2 * total);
    MSR_CHECK_OK(msr_products_keep_weights(p, NULL, 0));
    MSR_CHECK_EQ(msr_products_scratch_bytes(p), msr_products_scratch_bytes(q));
    msr_products_weights_begin(p); /* nothing kept: rounds every time */
    MSR_CHECK(linear_same(p, inp, first, dout, neu[0]));
    random_floats_into(params, total + 1, 42);
    MSR_CHECK(linear_same(p, inp, first, dout, old[0]));
    msr_products_weights_end(p);
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p), msr_products_destroy(q), msr_products_destroy(p32);
    for (int k = 0; k < 3; k++)
        free(old[k]), free(neu[k]);
    free(inp), free(dout), free(params), free(fresh);
}

static void test_kept_weights(void)
{
    check_kept_weights();
}

static void test_kept_weights_blas(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx512_bf16,avx512f", 1);
    check_kept_weights();
}

static const msr_test_t tests[] = {
    {"names", test_names, 10},
    {"fp32_is_sgemm", test_fp32_is_sgemm, 10},
    {"bf16_matmul", test_bf16_matmul, 10},
    {"bias_folded", test_bias_folded, 20},
    {"backward_once", test_backward_once, 20},
    {"bf16_attention", test_bf16_attention, 10},
    {"sticky_status", test_sticky_status, 10},
    {"no_memory", test_no_memory, 10},
    {"fused_kernels", test_fused_kernels, 10},
    {"fused_kernels_avx2", test_fused_kernels_avx2, 10},
    {"fused_kernels_scalar", test_fused_kernels_scalar, 10},
    {"handover", test_handover, 10},
    {"handover_blas", test_handover_blas, 10},
    {"handover_backward", test_handover_backward, 10},
    {"handover_backward_blas", test_handover_backward_blas, 10},
    {"kept_weights", test_kept_weights, 10},
    {"kept_weights_blas", test_kept_weights_blas, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
