/* AdamW against hand computations, sharded updates against whole ones,
 * the vector path against the scalar one, gradient-norm clipping. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/adamw.h"
#include "model/rng.h"
#include "tests/runner.h"

static const msr_adamw_config_t cfg = {0.9, 0.95, 1e-8, 0.1};

/* Two tensors: a decaying matrix of 4 and a bias of 2. */
static void two_tensors(msr_gpt_tensor_t t[2])
{
    memset(t, 0, 2 * sizeof *t);
    t[0] = (msr_gpt_tensor_t){"w", 0, 2, {2, 2}, 0, 4, 1};
    t[1] = (msr_gpt_tensor_t){"b", 0, 1, {2, 1}, 4, 2, 0};
}

static void test_first_step_by_hand(void)
{
    msr_gpt_tensor_t t[2];
    two_tensors(t);
    msr_adamw_t *opt = NULL;
    MSR_CHECK_OK(msr_adamw_create(&cfg, t, 2, 0, 6, &opt));
    MSR_CHECK_EQ(opt->num_spans, 2);
    float p[6] = {1, 1, -2, 0.5f, 1, 1};
    float g[6] = {0.5f, -0.5f, 2, 0, 0.5f, -3};
    msr_adamw_update(opt, p, g, 0.1f, 1.0f);
    MSR_CHECK_EQ(opt->t, 1);
    /* step 1: m = 0.1 g, v = 0.05 g^2, so m/(1-0.9) = g and sqrt(v/(1-0.95)) = |g|:
     * p = p (1 - lr wd) - lr g / (|g| + eps)  (decay only on the matrix) */
    MSR_CHECK(fabsf(p[0] - (0.99f - 0.1f)) < 1e-6f);  /* 0.89 */
    MSR_CHECK(fabsf(p[1] - (0.99f + 0.1f)) < 1e-6f);  /* 1.09 */
    MSR_CHECK(fabsf(p[2] - (-1.98f - 0.1f)) < 1e-6f); /* -2.08 */
    MSR_CHECK(fabsf(p[3] - 0.495f) < 1e-7f);          /* g = 0: decay alone */
    MSR_CHECK(fabsf(p[4] - 0.9f) < 1e-6f);            /* bias: no decay */
    MSR_CHECK(fabsf(p[5] - 1.1f) < 1e-6f);
    MSR_CHECK(fabsf(opt->m[5] - (-0.3f)) < 1e-7f);
    MSR_CHECK(fabsf(opt->v[5] - 0.45f) < 1e-6f);
    msr_adamw_destroy(opt);
    msr_adamw_destroy(NULL);
}

/* Several steps against the formula written out in double. */
static void test_steps_against_formula(void)
{
    msr_gpt_tensor_t t[2];
    two_tensors(t);
    msr_adamw_t *opt = NULL;
    MSR_CHECK_OK(msr_adamw_create(&cfg, t, 2, 0, 6, &opt));
    float p[6];
    double P[6], M[6] = {0}, V[6] = {0};
    for (int i = 0; i < 6; i++)
        P[i] = p[i] = (float)msr_rng_normal(1, 0, i);
    for (int step = 1; step <= 5; step++) {
        float g[6], lr = 0.01f * step, scale = step == 3 ? 0.5f : 1.0f;
        for (int i = 0; i < 6; i++)
            g[i] = (float)msr_rng_normal(2, step, i);
        msr_adamw_update(opt, p, g, lr, scale);
        for (int i = 0; i < 6; i++) {
            double gg = (double)g[i] * scale, wd = i < 4 ? 0.1 : 0.0;
            M[i] = 0.9 * M[i] + 0.1 * gg;
            V[i] = 0.95 * V[i] + 0.05 * gg * gg;
            double mhat = M[i] / (1 - pow(0.9, step)), vhat = V[i] / (1 - pow(0.95, step));
            P[i] = P[i] * (1 - lr * wd) - lr * mhat / (sqrt(vhat) + 1e-8);
        }
    }
    for (int i = 0; i < 6; i++)
        MSR_CHECK_MSG(fabs(p[i] - P[i]) < 1e-6 * (1 + fabs(P[i])), "p[%d] %.9g want %.9g", i,
                      (double)p[i], P[i]);
    msr_adamw_destroy(opt);
}

/* A ZeRO shard updates exactly as the same elements of the whole buffer,
 * wherever the cuts fall (here through both tensors). */
static void test_shards_match_whole(void)
{
    msr_gpt_tensor_t t[2];
    two_tensors(t);
    msr_adamw_t *whole = NULL, *a = NULL, *b = NULL;
    MSR_CHECK_OK(msr_adamw_create(&cfg, t, 2, 0, 6, &whole));
    MSR_CHECK_OK(msr_adamw_create(&cfg, t, 2, 0, 3, &a));
    MSR_CHECK_OK(msr_adamw_create(&cfg, t, 2, 3, 6, &b));
    MSR_CHECK_EQ(a->num_spans, 1);
    MSR_CHECK_EQ(b->num_spans, 2);
    MSR_CHECK_EQ(b->spans[0].end, 1); /* element 3 decays, 4 and 5 do not */
    float p1[6], p2[6];
    for (int i = 0; i < 6; i++)
        p1[i] = p2[i] = (float)msr_rng_normal(3, 0, i);
    for (int step = 0; step < 4; step++) {
        float g[6];
        for (int i = 0; i < 6; i++)
            g[i] = (float)msr_rng_normal(4, step, i);
        msr_adamw_update(whole, p1, g, 0.05f, 0.7f);
        msr_adamw_update(a, p2, g, 0.05f, 0.7f);
        msr_adamw_update(b, p2 + 3, g + 3, 0.05f, 0.7f);
    }
    MSR_CHECK(memcmp(p1, p2, sizeof p1) == 0);
    MSR_CHECK(memcmp(whole->m + 3, b->m, 3 * sizeof(float)) == 0);
    MSR_CHECK(memcmp(whole->v, a->v, 3 * sizeof(float)) == 0);
    msr_adamw_destroy(whole);
    msr_adamw_destroy(a);
    msr_adamw_destroy(b);
}

/* An optimizer over several ranges (a ZeRO rank's pieces of every bucket)
 * updates like the whole, in one call or range by range, and its spans
 * follow the tensors through the gaps. */
static void test_ranges_match_whole(void)
{
    msr_gpt_tensor_t t[2];
    two_tensors(t);
    msr_adamw_t *whole = NULL, *pieces = NULL, *none = NULL;
    MSR_CHECK_OK(msr_adamw_create(&cfg, t, 2, 0, 6, &whole));
    /* owned: [1, 3) (matrix) and [3, 5) (matrix then bias) */
    msr_adamw_range_t r[2] = {{1, 3}, {3, 5}};
    MSR_CHECK_OK(msr_adamw_create_ranges(&cfg, t, 2, r, 2, &pieces));
    MSR_CHECK_EQ(pieces->count, 4);
    MSR_CHECK_EQ(pieces->num_spans, 2); /* [0, 3) decays (merged across ranges), [3, 4) not */
    MSR_CHECK_EQ(pieces->spans[0].end, 3);
    MSR_CHECK_OK(msr_adamw_create_ranges(&cfg, t, 2, NULL, 0, &none));
    MSR_CHECK_EQ(none->count, 0);
    float p1[6], p2[4], g2[4];
    for (int i = 0; i < 6; i++)
        p1[i] = (float)msr_rng_normal(6, 0, i);
    memcpy(p2, p1 + 1, sizeof p2);
    for (int step = 0; step < 4; step++) {
        float g[6];
        for (int i = 0; i < 6; i++)
            g[i] = (float)msr_rng_normal(7, step, i);
        memcpy(g2, g + 1, sizeof g2);
        msr_adamw_update(whole, p1, g, 0.05f, 0.7f);
        if (step % 2 == 0) {
            msr_adamw_update(pieces, p2, g2, 0.05f, 0.7f);
        } else { /* in pieces, out of order */
            msr_adamw_begin(pieces, 0.05f, 0.7f);
            msr_adamw_update_range(pieces, 2, 2, p2 + 2, g2 + 2);
            msr_adamw_update_range(pieces, 0, 2, p2, g2);
        }
        msr_adamw_update(none, NULL, NULL, 0.05f, 0.7f);
    }
    MSR_CHECK(memcmp(p1 + 1, p2, sizeof p2) == 0);
    MSR_CHECK(memcmp(whole->m + 1, pieces->m, 4 * sizeof(float)) == 0);
    MSR_CHECK(memcmp(whole->v + 1, pieces->v, 4 * sizeof(float)) == 0);
    MSR_CHECK_EQ(pieces->t, 4);
    /* out of order, overlapping or empty ranges are refused */
    msr_adamw_t *bad = NULL;
    msr_adamw_range_t overlap[2] = {{0, 3}, {2, 4}}, empty[1] = {{2, 2}}, outside[1] = {{4, 7}};
    MSR_CHECK_STATUS(msr_adamw_create_ranges(&cfg, t, 2, overlap, 2, &bad), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_adamw_create_ranges(&cfg, t, 2, empty, 1, &bad), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_adamw_create_ranges(&cfg, t, 2, outside, 1, &bad), MSR_ERR_INVALID_ARG);
    MSR_CHECK(bad == NULL);
    msr_adamw_destroy(whole);
    msr_adamw_destroy(pieces);
    msr_adamw_destroy(none);
}

static void test_clip_and_norm(void)
{
    float x[4] = {3, 4, 0, 0};
    MSR_CHECK(msr_sumsq(x, 4) == 25.0);
    MSR_CHECK(msr_sumsq(x, 0) == 0.0);
    /* every tail past the eight partial sums, and the fold: 1^2 + ... + n^2
     * is exact in double */
    float ints[20];
    for (int i = 0; i < 20; i++)
        ints[i] = (float)(i + 1);
    for (int n = 0; n <= 20; n++)
        MSR_CHECK_MSG(msr_sumsq(ints, (size_t)n) == n * (n + 1.0) * (2 * n + 1) / 6, "n %d", n);
    /* a value in each partial sum's place alone */
    for (int j = 0; j < 9; j++) {
        float one[9] = {0};
        one[j] = 3.0f;
        MSR_CHECK(msr_sumsq(one, 9) == 9.0);
    }
    MSR_CHECK(fabsf(msr_clip_scale(5.0, 1.0f) - 0.2f) < 1e-7f);
    MSR_CHECK(msr_clip_scale(0.5, 1.0f) == 1.0f);
    MSR_CHECK(msr_clip_scale(1e9, 0.0f) == 1.0f); /* clipping off */
    /* the norm of shards summed equals the norm of the whole */
    float y[1000];
    for (int i = 0; i < 1000; i++)
        y[i] = (float)msr_rng_normal(5, 0, i);
    double whole = msr_sumsq(y, 1000), parts = msr_sumsq(y, 333) + msr_sumsq(y + 333, 667);
    MSR_CHECK(fabs(whole - parts) < 1e-12 * whole);
    /* read in pieces of every length from 1 to 17 (a streamed shard): the
     * same bits as the whole */
    for (size_t piece = 1; piece <= 17; piece++) {
        double lanes[MSR_SUMSQ_LANES] = {0};
        for (size_t at = 0; at < 1000; at += piece)
            msr_sumsq_add(lanes, y + at, at + piece <= 1000 ? piece : 1000 - at, at);
        MSR_CHECK_MSG(msr_sumsq_fold(lanes) == whole, "pieces of %zu", piece);
    }
}

/* The sum of squares in its documented order, written out here: element i
 * into lane i mod 8, each lane in index order, the lanes folded pairwise.
 * Every length to 41 (the vector loop's eight at a time, each tail) and
 * each start offset within a lane's period (a piece of a streamed shard
 * whose first element is not lane 0's), on values whose sums round, so a
 * path that swaps lanes or reorders a lane's adds gives other bits. */
static void check_sumsq_lane_order(void)
{
    float y[64];
    for (int i = 0; i < 64; i++)
        y[i] = (float)msr_rng_normal(7, 0, i) * (1.0f + 0.37f * (float)(i % 5));
    for (size_t at = 0; at < MSR_SUMSQ_LANES; at++)
        for (size_t n = 0; n <= 41; n++) {
            double ref[MSR_SUMSQ_LANES] = {0}, lanes[MSR_SUMSQ_LANES] = {0};
            for (size_t i = 0; i < n; i++)
                ref[(at + i) % MSR_SUMSQ_LANES] += (double)y[i] * (double)y[i];
            msr_sumsq_add(lanes, y, n, at);
            for (int j = 0; j < MSR_SUMSQ_LANES; j++)
                MSR_CHECK_MSG(lanes[j] == ref[j], "at %zu n %zu lane %d: %a, not %a", at, n, j,
                              lanes[j], ref[j]);
        }
    double ref[MSR_SUMSQ_LANES] = {0};
    for (size_t i = 0; i < 64; i++)
        ref[i % MSR_SUMSQ_LANES] += (double)y[i] * (double)y[i];
    MSR_CHECK(msr_sumsq(y, 64) ==
              ((ref[0] + ref[1]) + (ref[2] + ref[3])) + ((ref[4] + ref[5]) + (ref[6] + ref[7])));
}

/* The widest path the CPU has (AVX2 on x86-64), then the plain loop (each
 * test runs in a child of its own, so the mask applies from its start) */
static void test_sumsq_lane_order(void)
{
    check_sumsq_lane_order();
}

static void test_sumsq_lane_order_plain(void)
{
    setenv("MSRUN_CPU_DISABLE", "all", 1);
    check_sumsq_lane_order();
}

/* Epsilon is added to sqrt(v-hat), outside the root: with a large eps and
 * gradients of its size, two steps by hand (in double, closed form). */
static void test_eps_outside_the_root(void)
{
    const msr_adamw_config_t big_eps = {0.9, 0.95, 0.01, 0.0};
    msr_gpt_tensor_t t[2];
    two_tensors(t);
    msr_adamw_t *opt = NULL;
    MSR_CHECK_OK(msr_adamw_create(&big_eps, t, 2, 0, 6, &opt));
    float p[6] = {0, 0, 0, 0, 0, 0};
    float g1[6] = {0.01f, -0.01f, 0.03f, 0.001f, -0.02f, 0.005f};
    float g2[6] = {0.02f, 0.01f, -0.01f, 0.0f, -0.02f, 0.04f};
    double P[6] = {0}, M[6] = {0}, V[6] = {0};
    const double lr = 0.1;
    for (int step = 1; step <= 2; step++) {
        const float *g = step == 1 ? g1 : g2;
        msr_adamw_update(opt, p, g, (float)lr, 1.0f);
        /* step 1 in closed form: -lr g / (|g| + eps); element 0 has g = eps */
        if (step == 1)
            MSR_CHECK_MSG(fabsf(p[0] - -0.05f) < 1e-6f, "p[0] %.9g after step 1, want -0.05",
                          (double)p[0]);
        for (int i = 0; i < 6; i++) {
            M[i] = 0.9 * M[i] + 0.1 * g[i];
            V[i] = 0.95 * V[i] + 0.05 * (double)g[i] * g[i];
            double mhat = M[i] / (1 - pow(0.9, step)), vhat = V[i] / (1 - pow(0.95, step));
            P[i] -= lr * mhat / (sqrt(vhat) + 0.01);
        }
        for (int i = 0; i < 6; i++)
            MSR_CHECK_MSG(fabs(p[i] - P[i]) < 1e-6, "step %d p[%d] %.9g want %.9g", step, i,
                          (double)p[i], P[i]);
    }
    msr_adamw_destroy(opt);
}

/* The AVX2 path gives the scalar path's bits on every element, edge
 * values included (zeros, subnormals, squares that underflow or overflow,
 * Inf, NaN), at lengths around the vector width. Where the CPU has no AVX2
 * both calls run the scalar loop. */
static int same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

static void test_vector_matches_scalar(void)
{
    enum { N = 43 };
    static const float edge[] = {0.0f,  -0.0f,  1e-40f, -1e-40f,  1e-20f,    -3e-22f,
                                 1e20f, -4e30f, 3e38f,  INFINITY, -INFINITY, NAN,
                                 1.0f,  -1.0f,  0.5f,   1e-8f,    -2e-5f};
    const int nedge = (int)(sizeof edge / sizeof edge[0]);
    msr_adamw_coef_t k = {0.9f, 0.95f, 0.1f, 0.05f, 1e-8f, 0.013f, 0.31f, 0.7f, 0.999f};
    static const size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 17, N};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        float p[2][N], g[N], m[2][N], v[2][N];
        for (size_t i = 0; i < N; i++) {
            int e = (int)((i * 7 + li) % (size_t)(2 * nedge));
            g[i] = e < nedge ? edge[e] : (float)msr_rng_normal(8, li, i);
            p[0][i] = p[1][i] =
                i % 5 == 0 ? edge[(i + li) % (size_t)nedge] : (float)msr_rng_normal(9, li, i);
            m[0][i] = m[1][i] = (float)msr_rng_normal(10, li, i) * 0.01f;
            /* v >= 0: zero, subnormal or an ordinary square */
            v[0][i] = v[1][i] = i % 4 == 1 ? 0.0f : i % 4 == 2 ? 1e-41f : m[0][i] * m[0][i];
        }
        msr_adamw_kernel(&k, false, n, p[0], g, m[0], v[0]);
        msr_adamw_kernel(&k, true, n, p[1], g, m[1], v[1]);
        for (size_t i = 0; i < N; i++) {
            MSR_CHECK_MSG(same_float(p[0][i], p[1][i]) && same_float(m[0][i], m[1][i]) &&
                              same_float(v[0][i], v[1][i]),
                          "n %zu element %zu: scalar p %a m %a v %a, vector p %a m %a v %a", n, i,
                          (double)p[0][i], (double)m[0][i], (double)v[0][i], (double)p[1][i],
                          (double)m[1][i], (double)v[1][i]);
        }
    }
    /* the elements past n are untouched by either path */
    float p = 2.0f, g = 1.0f, m = 0.0f, v = 0.0f;
    msr_adamw_kernel(&k, true, 0, &p, &g, &m, &v);
    MSR_CHECK(p == 2.0f && m == 0.0f && v == 0.0f);
}

static void test_bad_config(void)
{
    msr_gpt_tensor_t t[2];
    two_tensors(t);
    msr_adamw_t *opt = NULL;
    MSR_CHECK_STATUS(msr_adamw_create(&cfg, t, 2, 3, 3, &opt), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_adamw_create(&cfg, t, 2, 0, 7, &opt), MSR_ERR_INVALID_ARG);
    msr_adamw_config_t bad = cfg;
    bad.beta2 = 1.0;
    MSR_CHECK_STATUS(msr_adamw_create(&bad, t, 2, 0, 6, &opt), MSR_ERR_INVALID_ARG);
    bad = cfg;
    bad.eps = 0;
    MSR_CHECK_STATUS(msr_adamw_create(&bad, t, 2, 0, 6, &opt), MSR_ERR_INVALID_ARG);
    MSR_CHECK(opt == NULL);
}

static const msr_test_t tests[] = {
    {"first_step_by_hand", test_first_step_by_hand, 10},
    {"steps_against_formula", test_steps_against_formula, 10},
    {"shards_match_whole", test_shards_match_whole, 10},
    {"ranges_match_whole", test_ranges_match_whole, 10},
    {"clip_and_norm", test_clip_and_norm, 10},
    {"sumsq_lane_order", test_sumsq_lane_order, 10},
    {"sumsq_lane_order_plain", test_sumsq_lane_order_plain, 10},
    {"eps_outside_the_root", test_eps_outside_the_root, 10},
    {"vector_matches_scalar", test_vector_matches_scalar, 10},
    {"bad_config", test_bad_config, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
