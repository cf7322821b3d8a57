/* The backward kernels that write their input gradient instead of adding
 * to it (model/layers.h): msr_matmul_backward_set against
 * msr_matmul_backward on a zeroed dinp, msr_attention_backward_set
 * against msr_attention_backward on a zeroed dqkv, and
 * msr_gelu_backward_set_bf16 against msr_gelu_backward_bf16 on a zeroed
 * dinp, bitwise, with the gradient holding NaN beforehand (never read),
 * through fp32 (NULL and a context)
 * and bf16 contexts, on the CPU's widest paths and the blas one; the
 * weight and bias gradients still accumulate. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "model/layers.h"
#include "model/rng.h"
#include "tests/runner.h"

enum { IC = 24 };

/* n values in [-1, 1) from stream s */
static float *random_floats(size_t n, uint64_t s)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2.0 * msr_rng_open01(msr_rng_u64(43, s, i)) - 1.0);
    return x;
}

static float *nans(size_t n)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

/* _set against the zeroed dinp's accumulation through context p, at rows
 * and output columns around the vector widths; dweight and dbias start
 * from the same non-zero values in both */
static void check_matmul_set(msr_products_t *p, const char *what)
{
    const int cols[] = {1, 15, 16, 17, 33};
    for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
        int n = cols[(ci + 2) % 5], oc = cols[ci];
        size_t no = (size_t)n * oc, ni = (size_t)n * IC, nw = (size_t)oc * IC;
        float *dout = random_floats(no, ci), *inp = random_floats(ni, 10 + ci);
        float *w = random_floats(nw, 20 + ci), *dw = random_floats(nw, 30 + ci);
        float *db = random_floats((size_t)oc, 40 + ci), *dinp = nans(ni + 1);
        float *dw2 = malloc(nw * sizeof *dw2), *db2 = malloc((size_t)oc * sizeof *db2);
        float *dinp2 = calloc(ni, sizeof *dinp2);
        memcpy(dw2, dw, nw * sizeof *dw);
        memcpy(db2, db, (size_t)oc * sizeof *db);
        msr_matmul_backward_set(p, dinp, dw, db, dout, inp, w, n, IC, oc);
        msr_matmul_backward(p, dinp2, dw2, db2, dout, inp, w, n, IC, oc);
        MSR_CHECK_MSG(memcmp(dinp, dinp2, ni * sizeof *dinp) == 0, "%s dinp, %d x %d", what, n, oc);
        MSR_CHECK_MSG(isnan(dinp[ni]), "%s: past dinp written, %d x %d", what, n, oc);
        MSR_CHECK_MSG(memcmp(dw, dw2, nw * sizeof *dw) == 0, "%s dweight, %d x %d", what, n, oc);
        MSR_CHECK_MSG(memcmp(db, db2, (size_t)oc * sizeof *db) == 0, "%s dbias, %d x %d", what, n,
                      oc);
        free(dout), free(inp), free(w), free(dw), free(db), free(dinp), free(dw2), free(db2);
        free(dinp2);
    }
    MSR_CHECK_OK(msr_products_status(p));
}

/* Attention's _set against the zeroed dqkv's through context p, at
 * sequences around its blocks of 64 rows (every block of dQ, dK and dV
 * written once) */
static void check_attention_set(msr_products_t *p, const char *what)
{
    enum { B = 2, C = 16, NH = 2 };
    const int seqs[] = {1, 63, 64, 65, 130};
    for (size_t k = 0; k < sizeof seqs / sizeof seqs[0]; k++) {
        int T = seqs[k];
        size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
        float *qkv = random_floats(nq, 70 + k), *dout = random_floats(no, 80 + k);
        float *out = malloc(no * sizeof *out), *att = malloc(na * sizeof *att);
        float *scratch = malloc((size_t)T * T * sizeof *scratch);
        float *got = nans(nq + 1), *want = calloc(nq, sizeof *want);
        msr_attention_forward(p, out, att, qkv, B, T, C, NH);
        msr_attention_backward_set(p, got, scratch, dout, qkv, att, B, T, C, NH);
        msr_attention_backward(p, want, scratch, dout, qkv, att, B, T, C, NH);
        MSR_CHECK_MSG(memcmp(got, want, nq * sizeof *got) == 0, "%s, T %d", what, T);
        MSR_CHECK_MSG(isnan(got[nq]), "%s: past dqkv written, T %d", what, T);
        free(qkv), free(dout), free(out), free(att), free(scratch), free(got), free(want);
    }
    MSR_CHECK_OK(msr_products_status(p));
}

/* The GELU backward's _set against the zeroed dinp's, with and without
 * the rounded copy, at lengths around its blocks of 2048 and the vector
 * widths */
static void check_gelu_set(void)
{
    const size_t lens[] = {1, 15, 17, 2047, 2048, 2049, 4096 + 33};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        size_t n = lens[k];
        float *x = random_floats(n, 50 + k), *d = random_floats(n, 60 + k);
        for (size_t i = 0; i < n; i++)
            x[i] *= 4.0f;
        float *got = nans(n + 1), *want = calloc(n, sizeof *want);
        uint16_t *g16 = malloc((n + 1) * sizeof *g16), *w16 = malloc(n * sizeof *w16);
        g16[n] = 0xabcd;
        msr_gelu_backward_set_bf16(got, g16, x, d, n);
        msr_gelu_backward_bf16(want, w16, x, d, n);
        MSR_CHECK_MSG(memcmp(got, want, n * sizeof *got) == 0, "n %zu", n);
        MSR_CHECK_MSG(memcmp(g16, w16, n * sizeof *g16) == 0, "n %zu, rounded", n);
        MSR_CHECK(isnan(got[n]) && g16[n] == 0xabcd);
        for (size_t i = 0; i <= n; i++)
            got[i] = NAN;
        msr_gelu_backward_set_bf16(got, NULL, x, d, n); /* fp32 alone */
        MSR_CHECK_MSG(memcmp(got, want, n * sizeof *got) == 0, "n %zu, fp32", n);
        MSR_CHECK(isnan(got[n]));
        free(x), free(d), free(got), free(want), free(g16), free(w16);
    }
}

static void check_all(void)
{
    msr_products_t *p32 = NULL, *p16 = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_FP32, &p32));
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p16));
    check_matmul_set(NULL, "no context");
    check_matmul_set(p32, "fp32");
    check_matmul_set(p16, "bf16");
    check_attention_set(NULL, "no context");
    check_attention_set(p16, "bf16");
    check_gelu_set();
    msr_products_destroy(p32);
    msr_products_destroy(p16);
}

static void test_set(void)
{
    check_all();
}

/* the blas path of the bf16 products and the GELU's AVX2 path */
static void test_set_blas(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx512_bf16,avx512f", 1);
    check_all();
}

static const msr_test_t tests[] = {
    {"set", test_set, 20},
    {"set_blas", test_set_blas, 20},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
