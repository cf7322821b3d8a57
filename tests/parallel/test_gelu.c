/* The float GELU: its exp against libm's in double, its values against the
 * double GELU, and the vector path (the widest the CPU has: AVX-512F, AVX2
 * or plain 4 lanes) against the scalar one bit for bit; the same for the
 * softmax rows' exponentials and their sum (msr_softmax_exp_sum) and for
 * SwiGLU. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "tests/runner.h"

/* the distance from got to want in units of want's float ulp */
static double ulps(float got, double want)
{
    float w = (float)want;
    if (isinf(w) || w == 0.0f)
        return got == w ? 0.0 : INFINITY;
    double ulp =
        fabsf(w) < FLT_MIN ? 0x1p-149 : (double)(nextafterf(fabsf(w), INFINITY) - fabsf(w));
    return fabs((double)got - want) / ulp;
}

/* Every 509th float from -104 to 89 (normal, subnormal and overflowing
 * results) and the limits themselves. */
static void test_exp_within_an_ulp(void)
{
    double worst = 0.0;
    float worst_x = 0.0f;
    for (uint32_t b = 0; b < 0xffffffffu - 509; b += 509) {
        float x;
        memcpy(&x, &b, sizeof x);
        if (!(x >= -104.0f && x <= 89.0f))
            continue;
        double e = ulps(msr_gelu_exp(x), exp((double)x));
        if (e > worst) {
            worst = e;
            worst_x = x;
        }
    }
    MSR_CHECK_MSG(worst <= 1.0, "exp off by %.3f ulp at %a", worst, (double)worst_x);
    MSR_CHECK(msr_gelu_exp(0.0f) == 1.0f && msr_gelu_exp(-0.0f) == 1.0f);
    MSR_CHECK(msr_gelu_exp(1.0f) == expf(1.0f));
    MSR_CHECK(isinf(msr_gelu_exp(88.8f)) && isinf(msr_gelu_exp(INFINITY)));
    MSR_CHECK(ulps(msr_gelu_exp(88.7f), exp((double)88.7f)) <= 1.0); /* near FLT_MAX, finite */
    MSR_CHECK(!isinf(msr_gelu_exp(88.7f)));
    MSR_CHECK(msr_gelu_exp(-200.0f) == 0.0f && msr_gelu_exp(-INFINITY) == 0.0f);
    MSR_CHECK(msr_gelu_exp(-100.0f) > 0.0f); /* a subnormal, not flushed */
    MSR_CHECK(isnan(msr_gelu_exp(NAN)));
}

/* forward and backward against the double kernels: float's own rounding
 * of u, amplified by exp where gelu is tiny, is what remains (and what
 * underflows past float's range; gelu' crosses zero near -0.75, where the
 * error is absolute) */
static void test_against_double(void)
{
    enum { N = 24 * 64 + 1 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *dx = calloc(N, sizeof *dx);
    float *dy = malloc(N * sizeof *dy);
    double *xd = malloc(N * sizeof *xd), *yd = malloc(N * sizeof *yd);
    double *dxd = calloc(N, sizeof *dxd), *dyd = malloc(N * sizeof *dyd);
    MSR_CHECK(x && y && dx && dy && xd && yd && dxd && dyd);
    for (int i = 0; i < N; i++) {
        xd[i] = x[i] = -12.0f + (float)i / 64.0f; /* [-12, 12] */
        dyd[i] = dy[i] = (float)(i % 7) - 3.0f;
    }
    msr_gelu_forward(y, x, N);
    msr_gelu_backward(dx, x, dy, N);
    msr_gelu_forward_f64(yd, xd, N);
    msr_gelu_backward_f64(dxd, xd, dyd, N);
    for (int i = 0; i < N; i++) {
        MSR_CHECK_MSG(fabs(y[i] - yd[i]) <= 3e-5 * fabs(yd[i]) + 1e-30, "gelu(%g) %.9g want %.9g",
                      (double)x[i], (double)y[i], yd[i]);
        MSR_CHECK_MSG(fabs(dx[i] - dxd[i]) <= 3e-5 * fabs(dxd[i]) + 1e-6 * fabs(dyd[i]),
                      "gelu'(%g) dout %g: %.9g want %.9g", (double)x[i], (double)dy[i],
                      (double)dx[i], dxd[i]);
    }
    MSR_CHECK(y[12 * 64] == 0.0f);                    /* gelu(0) */
    MSR_CHECK(fabsf(y[13 * 64] - 0.841192f) < 1e-6f); /* gelu(1), torch's tanh form */
    free(x), free(y), free(dx), free(dy), free(xd), free(yd), free(dxd), free(dyd);
}

static int same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* Edge inputs (zeros, subnormals, where exp overflows or underflows, x^3
 * overflowing, Inf, NaN) and a sweep, at lengths around the vector width
 * and offsets that move each value between vector body and scalar tail.
 * The vector call runs the widest path the CPU has; the _avx2 and _plain
 * cases mask AVX-512F, then AVX2 too, off (MSRUN_CPU_DISABLE) to run the
 * narrower paths. */
static void check_vector_matches_scalar(void)
{
    enum { N = 96 };
    static const float edge[] = {0.0f,     -0.0f,    1e-40f,    -1e-40f, 1e-20f, -1e-20f,
                                 -9.4f,    -9.5f,    -9.6f,     -11.5f,  -11.6f, -12.0f,
                                 -20.0f,   9.5f,     11.6f,     1e13f,   -1e13f, FLT_MAX,
                                 -FLT_MAX, INFINITY, -INFINITY, NAN,     0.5f,   -0.5f};
    const size_t nedge = sizeof edge / sizeof edge[0];
    float x[N], dy[N], y[2][N], dx[2][N];
    static const size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, N};
    for (size_t shift = 0; shift < 8; shift++) {
        for (size_t i = 0; i < N; i++) {
            x[i] = (i + shift) % 2 == 0 ? edge[(i / 2 + shift) % nedge] : -10.0f + 0.23f * (float)i;
            dy[i] = i % 3 == 0 ? -1.5f : 0.25f * (float)i;
        }
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t n = lens[li];
            for (int path = 0; path < 2; path++) {
                for (size_t i = 0; i < N; i++)
                    y[path][i] = dx[path][i] = 0.125f * (float)i;
            }
            msr_gelu_forward_scalar(y[0], x, n);
            msr_gelu_forward(y[1], x, n);
            msr_gelu_backward_scalar(dx[0], x, dy, n);
            msr_gelu_backward(dx[1], x, dy, n);
            for (size_t i = 0; i < N; i++)
                MSR_CHECK_MSG(same_float(y[0][i], y[1][i]) && same_float(dx[0][i], dx[1][i]),
                              "n %zu x[%zu] %a: scalar %a %a, vector %a %a", n, i, (double)x[i],
                              (double)y[0][i], (double)dx[0][i], (double)y[1][i], (double)dx[1][i]);
        }
    }
}

/* msr_softmax_exp_sum against its scalar form bit for bit (the row and
 * the sum), and against exp and a sum in double, at lengths around the
 * 16 running sums and offsets that move each value between the whole
 * blocks and the tail: rows of softmax scores (x - max <= 0, down to where
 * exp underflows to subnormals and zero), a row holding an Inf or a NaN,
 * and the order of the sum, which a reordered fold would change (a
 * large term in lane 0 beside small ones). */
static void check_exp_sum_matches_scalar(void)
{
    enum { N = 80 };
    float x[N], y[2][N];
    static const size_t lens[] = {0, 1, 15, 16, 17, 31, 32, 33, 47, 48, 49, N};
    for (size_t shift = 0; shift < 5; shift++) {
        for (size_t i = 0; i < N; i++)
            x[i] = (i * 7 + shift * 3) % 11 == 0 ? -0.0f : -0.37f * (float)((i * 13 + shift) % 41);
        x[(shift * 17) % N] = 0.0f;        /* the row's maximum */
        x[(shift * 29 + 5) % N] = -95.0f;  /* exp is subnormal */
        x[(shift * 31 + 9) % N] = -120.0f; /* exp is 0 */
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t n = lens[li];
            memcpy(y[0], x, sizeof x);
            memcpy(y[1], x, sizeof x);
            float s0 = msr_softmax_exp_sum_scalar(y[0], 0.0f, n);
            float s1 = msr_softmax_exp_sum(y[1], 0.0f, n);
            MSR_CHECK_MSG(same_float(s0, s1), "n %zu shift %zu: sum scalar %a vector %a", n, shift,
                          (double)s0, (double)s1);
            double want = 0.0;
            for (size_t i = 0; i < N; i++) {
                MSR_CHECK_MSG(same_float(y[0][i], y[1][i]), "n %zu x[%zu] %a: scalar %a vector %a",
                              n, i, (double)x[i], (double)y[0][i], (double)y[1][i]);
                if (i < n) {
                    want += exp((double)x[i]);
                    MSR_CHECK(ulps(y[0][i], exp((double)x[i])) <= 1.0);
                } else {
                    MSR_CHECK(same_float(y[0][i], x[i])); /* past n: untouched */
                }
            }
            /* n + 15 float adds of terms below 1 each: within (n + 15) u */
            MSR_CHECK_MSG(fabs((double)s0 - want) <= (double)(n + 16) * FLT_EPSILON * want,
                          "n %zu: sum %a, in double %a", n, (double)s0, want);
        }
    }
    /* an Inf or NaN score reaches the row and the sum on every path */
    for (size_t at = 0; at < 40; at += 13) {
        for (int k = 0; k < 2; k++) {
            for (size_t i = 0; i < N; i++)
                y[0][i] = y[1][i] = -0.5f;
            y[0][at] = y[1][at] = k == 0 ? INFINITY : NAN;
            float s0 = msr_softmax_exp_sum_scalar(y[0], 0.0f, 40);
            float s1 = msr_softmax_exp_sum(y[1], 0.0f, 40);
            MSR_CHECK(same_float(s0, s1) && (k == 0 ? isinf(s0) : isnan(s0)));
            MSR_CHECK(same_float(y[0][at], y[1][at]));
        }
    }
    /* the fold's order: 1 in lane 0 and about 2^-25 in lanes 1-15 (below
     * half of 1's ulp) sum to 1 when added after it one by one; a fold
     * that added the small ones first would pass 1 */
    for (size_t i = 0; i < N; i++)
        y[0][i] = y[1][i] = i == 0 ? 0.0f : logf(0x1p-25f);
    float a0 = msr_softmax_exp_sum_scalar(y[0], 0.0f, 16);
    float a1 = msr_softmax_exp_sum(y[1], 0.0f, 16);
    MSR_CHECK_MSG(a0 == 1.0f && a1 == 1.0f, "fold: scalar %a vector %a", (double)a0, (double)a1);
}

/* SwiGLU's vector rows against its scalar ones bit for bit, at the edge
 * values above for the gate (where exp(-a) overflows, underflows, Inf,
 * NaN) and widths around the vector width, over two rows so that each
 * row's tail and the next row's start meet; and against the double
 * kernels within a few float roundings where the values are moderate. */
static void check_swiglu_matches_scalar(void)
{
    enum { FMAX = 37, N = 2 };
    static const float edge[] = {0.0f,     -0.0f,    1e-40f,    -1e-40f, -87.0f, -88.5f, -89.0f,
                                 -90.0f,   -104.f,   -105.f,    88.0f,   1e13f,  -1e13f, FLT_MAX,
                                 -FLT_MAX, INFINITY, -INFINITY, NAN,     0.5f,   -0.5f,  3.0f};
    const size_t nedge = sizeof edge / sizeof edge[0];
    static const int widths[] = {1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, FMAX};
    float in[N * 2 * FMAX], dy[N * FMAX], y[2][N * FMAX], dx[2][N * 2 * FMAX];
    for (size_t shift = 0; shift < 6; shift++) {
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
            int F = widths[wi];
            for (size_t i = 0; i < (size_t)N * 2 * F; i++)
                in[i] = (i + shift) % 3 == 0 ? edge[(i / 3 + shift) % nedge]
                                             : -6.0f + 0.37f * (float)(i % 29);
            for (size_t i = 0; i < (size_t)N * F; i++)
                dy[i] = i % 4 == 0 ? -1.25f : 0.125f * (float)i;
            for (int p = 0; p < 2; p++) {
                for (size_t i = 0; i < (size_t)N * F; i++)
                    y[p][i] = 7.0f;
                for (size_t i = 0; i < (size_t)N * 2 * F; i++)
                    dx[p][i] = 0.25f * (float)i;
            }
            msr_swiglu_forward_scalar(y[0], in, N, F);
            msr_swiglu_forward(y[1], in, N, F);
            msr_swiglu_backward_scalar(dx[0], in, dy, N, F);
            msr_swiglu_backward(dx[1], in, dy, N, F);
            for (size_t i = 0; i < (size_t)N * F; i++)
                MSR_CHECK_MSG(same_float(y[0][i], y[1][i]), "F %d out[%zu]: scalar %a vector %a", F,
                              i, (double)y[0][i], (double)y[1][i]);
            for (size_t i = 0; i < (size_t)N * 2 * F; i++)
                MSR_CHECK_MSG(same_float(dx[0][i], dx[1][i]), "F %d dinp[%zu]: scalar %a vector %a",
                              F, i, (double)dx[0][i], (double)dx[1][i]);
        }
    }
    /* against double where the values are moderate (|a|, |u| <= 6) */
    enum { F = 40 };
    double ind[2 * F], dyd[F], yd[F], dxd[2 * F] = {0};
    float inf_[2 * F], dyf[F], yf[F], dxf[2 * F] = {0};
    for (int i = 0; i < 2 * F; i++)
        inf_[i] = -6.0f + 0.3f * (float)i, ind[i] = inf_[i];
    for (int i = 0; i < F; i++)
        dyf[i] = 0.5f - 0.03f * (float)i, dyd[i] = dyf[i];
    msr_swiglu_forward(yf, inf_, 1, F);
    msr_swiglu_backward(dxf, inf_, dyf, 1, F);
    msr_swiglu_forward_f64(yd, ind, 1, F);
    msr_swiglu_backward_f64(dxd, ind, dyd, 1, F);
    for (int i = 0; i < F; i++)
        MSR_CHECK_MSG(fabs(yf[i] - yd[i]) <= 8 * FLT_EPSILON * fabs(yd[i]) + 1e-30,
                      "out[%d] %a, double %a", i, (double)yf[i], yd[i]);
    for (int i = 0; i < 2 * F; i++)
        MSR_CHECK_MSG(fabs(dxf[i] - dxd[i]) <= 16 * FLT_EPSILON * (fabs(dxd[i]) + 1e-3),
                      "dinp[%d] %a, double %a", i, (double)dxf[i], dxd[i]);
}

static void test_vector_matches_scalar(void)
{
    check_vector_matches_scalar();
    check_exp_sum_matches_scalar();
    check_swiglu_matches_scalar();
}

static void test_vector_matches_scalar_avx2(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx512f", 1);
    check_vector_matches_scalar();
    check_exp_sum_matches_scalar();
    check_swiglu_matches_scalar();
}

static void test_vector_matches_scalar_plain(void)
{
    setenv("MSRUN_CPU_DISABLE", "all", 1);
    check_vector_matches_scalar();
    check_exp_sum_matches_scalar();
    check_swiglu_matches_scalar();
}

static const msr_test_t tests[] = {
    {"exp_within_an_ulp", test_exp_within_an_ulp, 60},
    {"against_double", test_against_double, 10},
    {"vector_matches_scalar", test_vector_matches_scalar, 10},
    {"vector_matches_scalar_avx2", test_vector_matches_scalar_avx2, 10},
    {"vector_matches_scalar_plain", test_vector_matches_scalar_plain, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
