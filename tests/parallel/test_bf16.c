/* bf16 numbers and products (base/bf16.h, model/gemm_bf16.h) and the CPU
 * features they dispatch on (base/cpu_features.h).
 *
 * Conversions: every edge (RNE ties both ways, the largest finite and one
 * past it, infinities, subnormals, NaNs, -0) on the scalar, the array and
 * the dispatched forms (AVX512-BF16 where present, then AVX2 with it masked
 * off; a subnormal alone in a block of normal numbers, which the bf16
 * units' conversion reads as zero), and random bit patterns
 * against an independent reference that picks the nearer neighbour in
 * double: truncation instead of rounding fails both.
 *
 * Products: shapes 1 x N, N x 1, odd, past each block of the blas path,
 * each transpose, beta 0 (over NaN) and 1, alpha 1 and not, against a
 * double reference of the same bf16 inputs, within the bound of an fp32
 * product (the products of two bf16 values are exact in fp32, so the only
 * roundings are the fp32 sums, alpha and beta): for each element
 *
 *   |C - C_ref| <= gamma(K + 2) * (|alpha| sum_k |a_ik b_kj| + |beta c_ij|),
 *   gamma(n) = n u / (1 - n u), u = 2^-24,
 *
 * each term meeting at most K additions and two multiplications (alpha's,
 * and beta's or a block's partial sum scaled by alpha); the double
 * reference's own error, under K 2^-53 of the same sum, is left in the
 * slack of gamma's denominator. And products whose sums are small integers
 * must be exact: a path that summed in bf16 would fail. Each path forced
 * (blas, blas without AVX2, onednn, onednn held to AVX) by
 * MSRUN_CPU_DISABLE and MSRUN_BF16_GEMM, set before the first call in the
 * test's own process. Where oneDNN has no bf16 matmul (a build without
 * it, or a CPU without avx512_core: oneDNN 2.x), its tests check that the
 * path is refused cleanly. oneDNN is loaded on first use: not mapped
 * before the onednn path is asked for, and a library that cannot be
 * loaded (MSR_ONEDNN_LIBRARY) sends AUTO's choice to blas with the reason
 * and refuses the onednn path. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "base/bf16.h"
#include "model/gemm_bf16.h"
#include "model/rng.h"
#include "tests/runner.h"

static uint32_t bits_of(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float float_of(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* The reference rounding, written another way: the two bf16 neighbours of
 * x by truncation toward zero, the nearer in double, ties to the even one;
 * past the largest finite, as RNE rounds, at or beyond its midpoint with
 * infinity (2^128 - 2^119) to infinity; NaN to its quiet top half. */
static uint16_t ref_round(float f)
{
    uint32_t x = bits_of(f);
    if (isnan(f))
        return (uint16_t)((x >> 16) | 0x40);
    if (isinf(f))
        return (uint16_t)(x >> 16);
    uint16_t lo = (uint16_t)(x >> 16), hi = (uint16_t)(lo + 1);
    double d = fabs((double)f), dlo = fabs((double)msr_f32_from_bf16(lo));
    double dhi = (lo & 0x7fff) == 0x7f7f ? ldexp(1.0, 128) : fabs((double)msr_f32_from_bf16(hi));
    if (d - dlo < dhi - d)
        return lo;
    if (d - dlo > dhi - d)
        return hi;
    return (lo & 1) ? hi : lo;
}

/* x through every form: scalar, the scalar loop, the dispatched loop in
 * every lane of two 32-lane blocks (AVX512-BF16), of 8-lane vectors (AVX2)
 * and in the tail; then alone among normal numbers (1.0) at each position
 * of a block, where one lane's subnormal must not pass the others by */
static void check_round(uint32_t x, uint16_t want)
{
    enum { LANES = 75, BLOCK = 32 };
    float in[LANES];
    uint16_t out[LANES];
    MSR_CHECK_MSG(msr_bf16_from_f32(float_of(x)) == want, "0x%08x -> 0x%04x, want 0x%04x", x,
                  msr_bf16_from_f32(float_of(x)), want);
    for (int i = 0; i < LANES; i++)
        in[i] = float_of(x);
    for (int scalar = 0; scalar < 2; scalar++) {
        memset(out, 0xa5, sizeof out);
        if (scalar)
            msr_bf16_from_f32_n_scalar(out, in, LANES);
        else
            msr_bf16_from_f32_n(out, in, LANES);
        for (int i = 0; i < LANES; i++)
            MSR_CHECK_MSG(out[i] == want, "%s loop [%d]: 0x%08x -> 0x%04x, want 0x%04x",
                          scalar ? "scalar" : "dispatched", i, x, out[i], want);
    }
    for (int at = 0; at < BLOCK; at++) {
        for (int i = 0; i < BLOCK; i++)
            in[i] = i == at ? float_of(x) : 1.0f;
        memset(out, 0xa5, sizeof out);
        msr_bf16_from_f32_n(out, in, BLOCK);
        for (int i = 0; i < BLOCK; i++)
            MSR_CHECK_MSG(out[i] == (i == at ? want : 0x3f80),
                          "0x%08x at [%d] among 1.0: [%d] -> 0x%04x", x, at, i, out[i]);
    }
}

static void test_round_edges(void)
{
    static const struct {
        uint32_t in;
        uint16_t want;
    } cases[] = {
        {0x3f800000, 0x3f80},                       /* 1.0 exact */
        {0x3f808000, 0x3f80},                       /* tie, kept part even: down */
        {0x3f818000, 0x3f82},                       /* tie, kept part odd: up */
        {0xbf808000, 0xbf80},                       /* the same, negative */
        {0xbf818000, 0xbf82}, {0x3f807fff, 0x3f80}, /* just below half */
        {0x3f808001, 0x3f81},                       /* just above half: truncation fails here */
        {0x3f80ffff, 0x3f81}, {0x7f7f0000, 0x7f7f}, /* the largest finite bf16 */
        {0x7f7f7fff, 0x7f7f},                       /* just below its midpoint with infinity */
        {0x7f7f8000, 0x7f80},                       /* the midpoint (odd): to infinity */
        {0x7f7fffff, 0x7f80},                       /* FLT_MAX: to infinity */
        {0xff7f7fff, 0xff7f}, {0xff7f8000, 0xff80}, {0x7f800000, 0x7f80}, /* infinities */
        {0xff800000, 0xff80}, {0x00000000, 0x0000},                       /* zeros, sign kept */
        {0x80000000, 0x8000}, {0x00000001, 0x0000}, /* the smallest subnormal: to +0 */
        {0x80000001, 0x8000}, {0x00008000, 0x0000}, /* subnormal tie, even: down */
        {0x00018000, 0x0002},                       /* subnormal tie, odd: up */
        {0x00008001, 0x0001}, {0x00010000, 0x0001}, /* the smallest bf16 subnormal, exact */
        {0x007fffff, 0x0080}, /* the largest fp32 subnormal: to the smallest normal */
        {0x007f7fff, 0x007f}, {0x7fc00000, 0x7fc0}, /* quiet NaN */
        {0x7f800001, 0x7fc0}, /* signalling NaN, payload in the low half: not inf */
        {0xff800001, 0xffc0}, {0x7fa12345, 0x7fe1}, /* payload's top kept, made quiet */
        {0xffffffff, 0xffff},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_round(cases[i].in, cases[i].want);
        MSR_CHECK_MSG(ref_round(float_of(cases[i].in)) == cases[i].want,
                      "the test's reference disagrees on 0x%08x", cases[i].in);
    }
}

/* the same on the AVX2 loop, the bf16 units' conversion masked off (the
 * scalar loop where the CPU has no AVX2) */
static void test_round_edges_avx2(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx512_bf16", 1);
    test_round_edges();
}

/* bf16 -> fp32 of all 65,536 values: exact (the bits shifted up), and
 * back again unchanged for every non-NaN */
static void test_widen_all(void)
{
    uint16_t *h = malloc(65536 * sizeof *h), *back = malloc(65536 * sizeof *back);
    float *f = malloc(65536 * sizeof *f), *g = malloc(65536 * sizeof *g);
    MSR_CHECK(h && back && f && g);
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    msr_f32_from_bf16_n(f, h, 65536);
    msr_f32_from_bf16_n_scalar(g, h, 65536);
    msr_bf16_from_f32_n(back, f, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        MSR_CHECK_MSG(bits_of(f[i]) == i << 16 && bits_of(g[i]) == i << 16,
                      "0x%04x widened to 0x%08x / 0x%08x", i, bits_of(f[i]), bits_of(g[i]));
        if (!isnan(f[i]))
            MSR_CHECK_MSG(back[i] == i, "0x%04x round trip 0x%04x", i, back[i]);
        else
            MSR_CHECK_MSG(back[i] == (i | 0x40), "NaN 0x%04x round trip 0x%04x", i, back[i]);
    }
    free(h);
    free(back);
    free(f);
    free(g);
}

/* random bit patterns, all classes, odd length (the vector loop and its
 * tail), against the reference */
static void test_round_random(void)
{
    const size_t n = (1u << 20) + 5;
    float *x = malloc(n * sizeof *x);
    uint16_t *a = malloc(n * sizeof *a), *s = malloc(n * sizeof *s);
    MSR_CHECK(x && a && s);
    for (size_t i = 0; i < n; i++) {
        uint32_t r = (uint32_t)msr_rng_u64(42, 1, i);
        if (i % 4 == 0) /* ties and near-ties, where the rules differ */
            r = (r & 0xffff0000u) | (0x8000u + (uint32_t)(i / 4 % 3) - 1u);
        x[i] = float_of(r);
    }
    msr_bf16_from_f32_n(a, x, n);
    msr_bf16_from_f32_n_scalar(s, x, n);
    for (size_t i = 0; i < n; i++) {
        uint16_t want = ref_round(x[i]);
        MSR_CHECK_MSG(a[i] == want && s[i] == want,
                      "[%zu] 0x%08x: dispatched 0x%04x, scalar 0x%04x, want 0x%04x", i,
                      bits_of(x[i]), a[i], s[i], want);
    }
    free(x);
    free(a);
    free(s);
}

static void test_round_random_avx2(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx512_bf16", 1);
    test_round_random();
}

/* ---- CPU features ---- */

/* detection agrees with the kernel's flags (which also need OS support) */
static void test_features_detect(void)
{
    unsigned f = msr_cpu_features_detect();
    for (unsigned bit = 1; bit <= MSR_CPU_AMX_BF16; bit <<= 1) {
        int has = msr_test_cpuinfo_has(msr_cpu_feature_name(bit));
        if (has < 0) {
            printf("no flags in /proc/cpuinfo: detection not cross-checked\n");
            return;
        }
        MSR_CHECK_MSG(!!(f & bit) == has, "%s: detected %d, /proc/cpuinfo %d",
                      msr_cpu_feature_name(bit), !!(f & bit), has);
    }
    char line[256];
    size_t n = msr_cpu_features_describe(line, sizeof line);
    MSR_CHECK(n > 4 && n < sizeof line && strncmp(line, "cpu:", 4) == 0);
    printf("%s\n", line);
}

static void test_features_parse(void)
{
    unsigned m = 99;
    MSR_CHECK_OK(msr_cpu_features_parse(NULL, &m));
    MSR_CHECK_EQ(m, 0);
    MSR_CHECK_OK(msr_cpu_features_parse("avx2,fma", &m));
    MSR_CHECK_EQ(m, MSR_CPU_AVX2 | MSR_CPU_FMA);
    MSR_CHECK_OK(msr_cpu_features_parse("all", &m));
    MSR_CHECK_EQ(m, MSR_CPU_ALL);
    MSR_CHECK_OK(msr_cpu_features_parse("amx_bf16,avx512_bf16,avx512f,f16c", &m));
    MSR_CHECK_EQ(m, MSR_CPU_AMX_BF16 | MSR_CPU_AVX512_BF16 | MSR_CPU_AVX512F | MSR_CPU_F16C);
    m = 7;
    MSR_CHECK_STATUS(msr_cpu_features_parse("avx2,avx3", &m), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_cpu_features_parse("avx", &m), MSR_ERR_INVALID_ARG);
    MSR_CHECK_EQ(m, 7);
}

/* the mask takes features away, and says so in the description */
static void test_features_mask(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx2,f16c", 1);
    unsigned f = 0;
    MSR_CHECK_OK(msr_cpu_features_get(&f));
    MSR_CHECK_EQ(f, msr_cpu_features_detect() & ~(unsigned)(MSR_CPU_AVX2 | MSR_CPU_F16C));
    char line[256];
    msr_cpu_features_describe(line, sizeof line);
    if (msr_cpu_features_detect() & MSR_CPU_AVX2)
        MSR_CHECK_MSG(strstr(line, "masked off: avx2") != NULL, "%s", line);
    check_round(0x3f818000, 0x3f82); /* the scalar loop now */
}

/* a name it does not know is an error, never a silently ignored mask */
static void test_features_bad_env(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx2,bogus", 1);
    unsigned f = 12345;
    MSR_CHECK_STATUS(msr_cpu_features_get(&f), MSR_ERR_INVALID_ARG);
    MSR_CHECK_EQ(f, 12345);
    msr_gemm_bf16_t *g = NULL;
    MSR_CHECK_STATUS(msr_gemm_bf16_create(MSR_GEMM_BF16_BLAS, &g), MSR_ERR_INVALID_ARG);
    MSR_CHECK(g == NULL);
    check_round(0x3f808001, 0x3f81); /* conversions still right (scalar) */
}

/* ---- products ---- */

typedef struct shape {
    int M, N, K;
} shape_t;

/* 1 x N, N x 1, odd, the model's K (384), and each of the blas path's
 * blocks (MC 1024, KC 1536, NC 2048) at its bound and one past */
static const shape_t shapes[] = {
    {1, 37, 19},   {41, 1, 23},   {1, 1, 1},      {7, 13, 5},   {31, 29, 1},
    {64, 96, 384}, {1024, 9, 7},  {1025, 9, 17},  {3, 5, 1536}, {3, 5, 1537},
    {5, 2048, 11}, {5, 2049, 11}, {17, 33, 1031},
};

static uint16_t *bf16_random(size_t n, uint64_t stream, double scale)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    MSR_CHECK(h != NULL);
    for (size_t i = 0; i < n; i++)
        h[i] = msr_bf16_from_f32((float)(scale * msr_rng_normal(7, stream, i)));
    return h;
}

/* op(X)[r][c] of a stored row-major matrix */
static double at(const uint16_t *x, int ld, bool trans, int r, int c)
{
    return msr_f32_from_bf16(trans ? x[(size_t)c * ld + r] : x[(size_t)r * ld + c]);
}

/* one product against the double reference, within the bound above */
static void check_product(msr_gemm_bf16_t *g, shape_t s, bool ta, bool tb, float alpha, float beta,
                          uint64_t seed)
{
    int lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 1, ldc = s.N + 2;
    size_t na = (size_t)(ta ? s.K : s.M) * lda, nb = (size_t)(tb ? s.N : s.K) * ldb;
    size_t nc = (size_t)s.M * ldc;
    uint16_t *A = bf16_random(na, seed, 1.0), *B = bf16_random(nb, seed + 1, 1.0);
    float *C = malloc(nc * sizeof *C), *C0 = malloc(nc * sizeof *C0);
    MSR_CHECK(C && C0);
    for (size_t i = 0; i < nc; i++)
        C0[i] = beta == 0.0f ? NAN : (float)msr_rng_normal(7, seed + 2, i);
    memcpy(C, C0, nc * sizeof *C);
    MSR_CHECK_OK(msr_gemm_bf16(g, ta, tb, s.M, s.N, s.K, alpha, A, lda, B, ldb, beta, C, ldc));
    const double u = ldexp(1.0, -24), n = s.K + 2, gamma = n * u / (1 - n * u);
    for (int i = 0; i < s.M; i++)
        for (int j = 0; j < s.N; j++) {
            double sum = 0, mag = 0;
            for (int k = 0; k < s.K; k++) {
                double p = at(A, lda, ta, i, k) * at(B, ldb, tb, k, j);
                sum += p;
                mag += fabs(p);
            }
            double c0 = beta == 0.0f ? 0.0 : (double)C0[(size_t)i * ldc + j];
            double want = alpha * sum + beta * c0;
            double bound = gamma * (fabs(alpha) * mag + fabs(beta * c0));
            double got = C[(size_t)i * ldc + j];
            MSR_CHECK_MSG(fabs(got - want) <= bound,
                          "%s M %d N %d K %d ta %d tb %d alpha %g beta %g: C[%d][%d] %.9g, "
                          "want %.9g (bound %.3g)",
                          msr_gemm_bf16_path_name(msr_gemm_bf16_path(g)), s.M, s.N, s.K, ta, tb,
                          alpha, beta, i, j, got, want, bound);
        }
    for (int i = 0; i < s.M; i++) /* the padding of C untouched */
        for (int j = s.N; j < ldc; j++)
            MSR_CHECK(bits_of(C[(size_t)i * ldc + j]) == bits_of(C0[(size_t)i * ldc + j]));
    free(A);
    free(B);
    free(C);
    free(C0);
}

/* small integers: every partial sum is an integer below 2^24, exact in
 * fp32 but not in bf16 (past 256) */
static void check_exact(msr_gemm_bf16_t *g)
{
    enum { M = 9, N = 11, K = 1000 };
    uint16_t *A = malloc(M * K * sizeof *A), *B = malloc(K * N * sizeof *B);
    float *C = malloc(M * N * sizeof *C);
    MSR_CHECK(A && B && C);
    for (int i = 0; i < M * K; i++)
        A[i] = msr_bf16_from_f32((float)(int)msr_rng_below(msr_rng_u64(3, 1, i), 9));
    for (int i = 0; i < K * N; i++)
        B[i] = msr_bf16_from_f32((float)(int)msr_rng_below(msr_rng_u64(3, 2, i), 9) - 4.0f);
    MSR_CHECK_OK(msr_gemm_bf16(g, false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double want = 0;
            for (int k = 0; k < K; k++)
                want += msr_f32_from_bf16(A[i * K + k]) * msr_f32_from_bf16(B[k * N + j]);
            MSR_CHECK_MSG((double)C[i * N + j] == want, "C[%d][%d] %.9g, want exactly %.9g", i, j,
                          C[i * N + j], want);
        }
    free(A);
    free(B);
    free(C);
}

/* oneDNN 2.x's bf16 matmul needs avx512_core (avx512f stands for it) */
static int onednn_expected(void)
{
#ifdef MSR_TEST_HAVE_ONEDNN
    unsigned f = 0;
    return msr_cpu_features_get(&f) == MSR_OK && (f & MSR_CPU_AVX512F);
#else
    return 0;
#endif
}

static void check_path(msr_gemm_bf16_path_t path)
{
    msr_gemm_bf16_t *g = NULL;
    msr_status_t st = msr_gemm_bf16_create(path, &g);
    if (path == MSR_GEMM_BF16_ONEDNN && !onednn_expected()) {
        MSR_CHECK_STATUS(st, MSR_ERR_UNSUPPORTED);
        MSR_CHECK(g == NULL);
        printf("skipped: no oneDNN bf16 matmul in this build or on this CPU (the refusal "
               "checked)\n");
        return;
    }
    MSR_CHECK_OK(st);
    MSR_CHECK_EQ(msr_gemm_bf16_path(g), path);
    uint64_t seed = 100;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int t = 0; t < 4; t++)
            for (int b = 0; b < 2; b++, seed += 3)
                check_product(g, shapes[i], t & 1, t >> 1, b ? 1.0f : 0.5f, b ? 1.0f : 0.0f, seed);
    check_exact(g);
    printf("%s path, implementation %s\n", msr_gemm_bf16_path_name(path), msr_gemm_bf16_impl(g));
    msr_gemm_bf16_destroy(g);
}

static void test_gemm_blas(void)
{
    check_path(MSR_GEMM_BF16_BLAS);
}

static void test_gemm_blas_scalar(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx2", 1);
    check_path(MSR_GEMM_BF16_BLAS);
}

static void test_gemm_onednn(void)
{
    check_path(MSR_GEMM_BF16_ONEDNN);
}

static void test_gemm_onednn_avx(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx2,avx512f,avx512_bf16,amx_bf16", 1);
    check_path(MSR_GEMM_BF16_ONEDNN);
}

/* MSRUN_BF16_GEMM chooses AUTO's path; unset, empty or "auto", the
 * default: onednn where the CPU has avx512_bf16 and the build oneDNN, blas
 * elsewhere (the features passed in, as MSRUN_CPU_DISABLE leaves them);
 * a value it does not know is an error */
static void test_gemm_env(void)
{
    msr_gemm_bf16_t *g = NULL;
    unsigned f = 0;
    MSR_CHECK_OK(msr_cpu_features_get(&f));
    const char *unset_or[] = {NULL, "", "auto"};
    for (size_t i = 0; i < sizeof unset_or / sizeof unset_or[0]; i++) {
        if (unset_or[i] == NULL)
            unsetenv("MSRUN_BF16_GEMM");
        else
            setenv("MSRUN_BF16_GEMM", unset_or[i], 1);
        int want_onednn = 0;
#ifdef MSR_TEST_HAVE_ONEDNN
        want_onednn = (f & MSR_CPU_AVX512_BF16) != 0;
#endif
        MSR_CHECK_OK(msr_gemm_bf16_create(MSR_GEMM_BF16_AUTO, &g));
        MSR_CHECK_EQ(msr_gemm_bf16_path(g),
                     want_onednn ? MSR_GEMM_BF16_ONEDNN : MSR_GEMM_BF16_BLAS);
        msr_gemm_bf16_destroy(g);
        g = NULL;
        msr_gemm_bf16_path_t path = MSR_GEMM_BF16_AUTO;
        const char *why = NULL;
        MSR_CHECK_OK(msr_gemm_bf16_auto(f & ~MSR_CPU_AVX512_BF16, &path, &why));
        MSR_CHECK_EQ(path, MSR_GEMM_BF16_BLAS);
        MSR_CHECK(why != NULL && strstr(why, "avx512_bf16") != NULL);
        MSR_CHECK_OK(msr_gemm_bf16_auto(f | MSR_CPU_AVX512_BF16, &path, NULL));
#ifdef MSR_TEST_HAVE_ONEDNN
        MSR_CHECK_EQ(path, MSR_GEMM_BF16_ONEDNN);
#else
        MSR_CHECK_EQ(path, MSR_GEMM_BF16_BLAS);
#endif
    }
    setenv("MSRUN_BF16_GEMM", "blas", 1);
    MSR_CHECK_OK(msr_gemm_bf16_create(MSR_GEMM_BF16_AUTO, &g));
    MSR_CHECK_EQ(msr_gemm_bf16_path(g), MSR_GEMM_BF16_BLAS);
    msr_gemm_bf16_path_t forced = MSR_GEMM_BF16_AUTO;
    MSR_CHECK_OK(msr_gemm_bf16_auto(f | MSR_CPU_AVX512_BF16, &forced, NULL));
    MSR_CHECK_EQ(forced, MSR_GEMM_BF16_BLAS);
    msr_gemm_bf16_destroy(g);
    g = NULL;
    setenv("MSRUN_BF16_GEMM", "onednn", 1);
    msr_status_t st = msr_gemm_bf16_create(MSR_GEMM_BF16_AUTO, &g);
    if (onednn_expected()) {
        MSR_CHECK_OK(st);
        MSR_CHECK_EQ(msr_gemm_bf16_path(g), MSR_GEMM_BF16_ONEDNN);
    } else {
        MSR_CHECK_STATUS(st, MSR_ERR_UNSUPPORTED);
    }
    msr_gemm_bf16_destroy(g);
    g = NULL;
    setenv("MSRUN_BF16_GEMM", "mkl", 1);
    MSR_CHECK_STATUS(msr_gemm_bf16_create(MSR_GEMM_BF16_AUTO, &g), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gemm_bf16_auto(f, &forced, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK(g == NULL);
    msr_gemm_bf16_destroy(NULL);
}

/* whether this process has oneDNN's library mapped */
static int onednn_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    MSR_CHECK(f != NULL);
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, "/libdnnl.so") != NULL;
    fclose(f);
    return found;
}

/* oneDNN is loaded when the onednn path is first asked for, not at start:
 * not by the blas path, nor by AUTO's choice on a CPU without bf16 units;
 * by AUTO's choice with them, and a context of the path stays usable */
static void test_gemm_onednn_lazy(void)
{
    unsetenv("MSRUN_BF16_GEMM");
    unsetenv("MSR_ONEDNN_LIBRARY");
    MSR_CHECK(!onednn_mapped());
    msr_gemm_bf16_t *g = NULL;
    MSR_CHECK_OK(msr_gemm_bf16_create(MSR_GEMM_BF16_BLAS, &g));
    msr_gemm_bf16_destroy(g);
    g = NULL;
    unsigned f = 0;
    MSR_CHECK_OK(msr_cpu_features_get(&f));
    msr_gemm_bf16_path_t path = MSR_GEMM_BF16_AUTO;
    MSR_CHECK_OK(msr_gemm_bf16_auto(f & ~MSR_CPU_AVX512_BF16, &path, NULL));
    MSR_CHECK(!onednn_mapped());
    MSR_CHECK_OK(msr_gemm_bf16_auto(f | MSR_CPU_AVX512_BF16, &path, NULL));
#ifdef MSR_TEST_HAVE_ONEDNN
    MSR_CHECK_EQ(path, MSR_GEMM_BF16_ONEDNN);
    MSR_CHECK(onednn_mapped());
    msr_status_t st = msr_gemm_bf16_create(MSR_GEMM_BF16_ONEDNN, &g);
    if (onednn_expected()) {
        MSR_CHECK_OK(st);
        check_exact(g);
        msr_gemm_bf16_destroy(g);
    } else {
        MSR_CHECK_STATUS(st, MSR_ERR_UNSUPPORTED);
    }
#else
    MSR_CHECK_EQ(path, MSR_GEMM_BF16_BLAS);
    MSR_CHECK(!onednn_mapped());
#endif
}

/* MSR_ONEDNN_LIBRARY naming what cannot be loaded (a missing file, or a
 * library without oneDNN's calls): AUTO's choice falls back to blas and
 * says why, naming the file; the onednn path asked for is refused with
 * MSR_ERR_UNSUPPORTED and nothing made; blas still runs */
static void check_onednn_missing(const char *lib, const char *want_why)
{
    setenv("MSR_ONEDNN_LIBRARY", lib, 1);
    unsetenv("MSRUN_BF16_GEMM");
    unsigned f = 0;
    MSR_CHECK_OK(msr_cpu_features_get(&f));
    msr_gemm_bf16_path_t path = MSR_GEMM_BF16_AUTO;
    const char *why = NULL;
    MSR_CHECK_OK(msr_gemm_bf16_auto(f | MSR_CPU_AVX512_BF16, &path, &why));
    MSR_CHECK_EQ(path, MSR_GEMM_BF16_BLAS);
    MSR_CHECK(why != NULL);
#ifdef MSR_TEST_HAVE_ONEDNN
    MSR_CHECK_MSG(strstr(why, "oneDNN cannot be loaded") != NULL && strstr(why, want_why) != NULL,
                  "why: %s", why);
    msr_gemm_bf16_t *g = NULL;
    MSR_CHECK_STATUS(msr_gemm_bf16_create(MSR_GEMM_BF16_ONEDNN, &g), MSR_ERR_UNSUPPORTED);
    MSR_CHECK(g == NULL);
    /* asked again: the same answer (loaded once a process) */
    setenv("MSRUN_BF16_GEMM", "onednn", 1);
    MSR_CHECK_STATUS(msr_gemm_bf16_create(MSR_GEMM_BF16_AUTO, &g), MSR_ERR_UNSUPPORTED);
    unsetenv("MSRUN_BF16_GEMM");
    MSR_CHECK_OK(msr_gemm_bf16_create(MSR_GEMM_BF16_AUTO, &g));
    MSR_CHECK_EQ(msr_gemm_bf16_path(g), MSR_GEMM_BF16_BLAS);
    check_exact(g);
    msr_gemm_bf16_destroy(g);
    MSR_CHECK(!onednn_mapped());
#else
    (void)want_why;
    MSR_CHECK(strstr(why, "no oneDNN") != NULL);
#endif
}

static void test_gemm_onednn_no_file(void)
{
    check_onednn_missing("/nonexistent/libdnnl.so.2", "/nonexistent/libdnnl.so.2");
}

static void test_gemm_onednn_no_calls(void)
{
    check_onednn_missing("libm.so.6", "dnnl_engine_create");
}

/* sizes at their bounds and one past; empty products; beta over NaN */
static void test_gemm_args(void)
{
    msr_gemm_bf16_t *g = NULL;
    MSR_CHECK_OK(msr_gemm_bf16_create(MSR_GEMM_BF16_BLAS, &g));
    uint16_t A[12] = {0}, B[12] = {0};
    float C[12];
    for (int i = 0; i < 12; i++)
        C[i] = 2.0f;
    /* M 2, N 3, K 4: lda K (4) valid, 3 not; transposed: M (2) valid, 1 not */
    MSR_CHECK_OK(msr_gemm_bf16(g, false, false, 2, 3, 4, 1, A, 4, B, 3, 1, C, 3));
    MSR_CHECK_STATUS(msr_gemm_bf16(g, false, false, 2, 3, 4, 1, A, 3, B, 3, 1, C, 3),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_OK(msr_gemm_bf16(g, true, false, 2, 3, 4, 1, A, 2, B, 3, 1, C, 3));
    MSR_CHECK_STATUS(msr_gemm_bf16(g, true, false, 2, 3, 4, 1, A, 1, B, 3, 1, C, 3),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_OK(msr_gemm_bf16(g, false, true, 2, 3, 4, 1, A, 4, B, 4, 1, C, 3));
    MSR_CHECK_STATUS(msr_gemm_bf16(g, false, true, 2, 3, 4, 1, A, 4, B, 3, 1, C, 3),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gemm_bf16(g, false, false, 2, 3, 4, 1, A, 4, B, 3, 1, C, 2),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gemm_bf16(g, false, false, -1, 3, 4, 1, A, 4, B, 3, 1, C, 3),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gemm_bf16(g, false, false, 2, 3, -1, 1, A, 4, B, 3, 1, C, 3),
                     MSR_ERR_INVALID_ARG);
    for (int i = 0; i < 12; i++)
        MSR_CHECK(C[i] == 2.0f); /* zeros in, beta 1 */
    MSR_CHECK_OK(msr_gemm_bf16(g, false, false, 0, 3, 4, 1, A, 4, B, 3, 0, C, 3));
    MSR_CHECK(C[0] == 2.0f); /* M 0: nothing written */
    MSR_CHECK_OK(msr_gemm_bf16(g, false, false, 2, 3, 0, 1, A, 1, B, 3, 0.5f, C, 3));
    for (int i = 0; i < 6; i++)
        MSR_CHECK(C[i] == 1.0f); /* K 0: C = beta C */
    C[0] = NAN;
    MSR_CHECK_OK(msr_gemm_bf16(g, false, false, 2, 3, 0, 1, A, 1, B, 3, 0.0f, C, 3));
    MSR_CHECK(C[0] == 0.0f); /* beta 0 ignores NaN */
    /* the bias form: the same shape checks; K 0 leaves the bias alone (or
     * zeros over NaN); M 0 writes nothing */
    const float bias[3] = {0.5f, -1.0f, 3.0f};
    MSR_CHECK_STATUS(msr_gemm_bf16_bias(g, false, true, 2, 3, 4, A, 4, B, 3, bias, C, 3),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gemm_bf16_bias(g, false, false, 2, 3, 4, A, 4, B, 3, bias, C, 2),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gemm_bf16_bias(g, false, false, 2, -1, 4, A, 4, B, 3, bias, C, 3),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_OK(msr_gemm_bf16_bias(g, false, false, 0, 3, 4, A, 4, B, 3, bias, C, 3));
    MSR_CHECK(C[0] == 0.0f);
    MSR_CHECK_OK(msr_gemm_bf16_bias(g, false, false, 2, 3, 0, A, 1, B, 3, bias, C, 3));
    for (int i = 0; i < 6; i++)
        MSR_CHECK(C[i] == bias[i % 3]);
    C[4] = NAN;
    MSR_CHECK_OK(msr_gemm_bf16_bias(g, false, false, 2, 3, 0, A, 1, B, 3, NULL, C, 3));
    for (int i = 0; i < 6; i++)
        MSR_CHECK(C[i] == 0.0f);
    msr_gemm_bf16_destroy(g);
}

static const msr_test_t tests[] = {
    {"round_edges", test_round_edges, 10},
    {"widen_all", test_widen_all, 10},
    {"round_random", test_round_random, 20},
    {"round_edges_avx2", test_round_edges_avx2, 10},
    {"round_random_avx2", test_round_random_avx2, 20},
    {"features_detect", test_features_detect, 10},
    {"features_parse", test_features_parse, 10},
    {"features_mask", test_features_mask, 10},
    {"features_bad_env", test_features_bad_env, 10},
    {"gemm_blas", test_gemm_blas, 40},
    {"gemm_blas_scalar", test_gemm_blas_scalar, 40},
    {"gemm_onednn", test_gemm_onednn, 40},
    {"gemm_onednn_avx", test_gemm_onednn_avx, 40},
    {"gemm_env", test_gemm_env, 10},
    {"gemm_onednn_lazy", test_gemm_onednn_lazy, 20},
    {"gemm_onednn_no_file", test_gemm_onednn_no_file, 10},
    {"gemm_onednn_no_calls", test_gemm_onednn_no_calls, 10},
    {"gemm_args", test_gemm_args, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
