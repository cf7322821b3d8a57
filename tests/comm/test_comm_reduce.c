/* The reduction kernels and the 16-bit float conversions, against
 * references written independently (the compiler's _Float16, libm). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "comm/reduce.h"
#include "tests/runner.h"

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t h_of(_Float16 h)
{
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

static _Float16 of_h(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, 2);
    return h;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* bf16 by arithmetic: keep 8 significant bits, ties to even. */
static uint16_t bf16_ref(float x)
{
    if (x == 0 || isinf(x))
        return (uint16_t)(fbits(x) >> 16);
    int e = ilogbf(x);
    if (e < -126)
        e = -126; /* subnormals share the minimum exponent */
    double q = ldexp((double)x, 7 - e);
    double r = nearbyint(q); /* default rounding: to nearest even */
    float y = (float)ldexp(r, e - 7);
    return (uint16_t)(fbits(y) >> 16);
}

static void test_f16_all_halves(void)
{
    for (uint32_t u = 0; u < 65536; u++) {
        _Float16 h = of_h((uint16_t)u);
        float want = (float)h;
        float got = msr_f16_to_f32((uint16_t)u);
        if (isnan(want)) {
            MSR_CHECK(isnan(got));
            MSR_CHECK(isnan(msr_f16_to_f32(msr_f32_to_f16(got))));
            continue;
        }
        MSR_CHECK_MSG(fbits(got) == fbits(want), "half 0x%04x: 0x%08x != 0x%08x", u, fbits(got),
                      fbits(want));
        MSR_CHECK_MSG(msr_f32_to_f16(got) == u, "half 0x%04x does not round-trip", u);
    }
}

static void test_f16_rounding(void)
{
    for (int i = 0; i < 2000000; i++) {
        uint32_t x = (uint32_t)rng();
        /* concentrate on the exponents a half can hold, ties included */
        if (i % 2)
            x = (x & 0x80001fffu) | ((uint32_t)(100 + rng() % 50) << 23) |
                ((uint32_t)(rng() % 1024) << 13);
        float f = bitsf(x);
        if (isnan(f))
            continue;
        uint16_t want = h_of((_Float16)f);
        uint16_t got = msr_f32_to_f16(f);
        MSR_CHECK_MSG(got == want, "f32 0x%08x: 0x%04x != 0x%04x", x, got, want);
    }
}

static void test_bf16_rounding(void)
{
    for (int i = 0; i < 2000000; i++) {
        uint32_t x = (uint32_t)rng();
        if (i % 2)
            x = (x & 0xffff0000u) | (i % 4 ? 0x8000u : (uint32_t)(rng() & 0xffffu));
        float f = bitsf(x);
        if (isnan(f) || isinf(f))
            continue;
        if (fabsf(f) > 3.3e38f)
            continue; /* rounds to infinity: checked below */
        uint16_t want = bf16_ref(f);
        uint16_t got = msr_bf16_from_f32(f);
        MSR_CHECK_MSG(got == want, "f32 0x%08x: 0x%04x != 0x%04x", x, got, want);
        MSR_CHECK(fbits(msr_f32_from_bf16(got)) == (uint32_t)got << 16);
    }
    MSR_CHECK(msr_bf16_from_f32(bitsf(0x7f7fffffu)) == 0x7f80u); /* FLT_MAX -> inf */
    MSR_CHECK(isnan(msr_f32_from_bf16(msr_bf16_from_f32(NAN))));
}

/* Element i of a and b (random, equal every 97th) and ref's op of them,
 * computed in dt by a scalar loop. */
static void fill_element(msr_dtype_t dt, msr_op_t op, unsigned char *a, unsigned char *b,
                         unsigned char *ref, size_t i)
{
    int64_t x = (int64_t)(rng() % 200) - 100, y = (int64_t)(rng() % 200) - 100;
    if (i % 97 == 0)
        y = x; /* equal operands */
    double fx = (double)x / 8, fy = (double)y / 8;
    switch (dt) {
    case MSR_DTYPE_F32: {
        float p = (float)fx, q = (float)fy;
        ((float *)a)[i] = p;
        ((float *)b)[i] = q;
        ((float *)ref)[i] = op == MSR_OP_PROD  ? p * q
                            : op == MSR_OP_MIN ? (p < q ? p : q)
                            : op == MSR_OP_MAX ? (p > q ? p : q)
                                               : p + q;
        break;
    }
    case MSR_DTYPE_F64: {
        double p = fx, q = fy;
        ((double *)a)[i] = p;
        ((double *)b)[i] = q;
        ((double *)ref)[i] = op == MSR_OP_PROD  ? p * q
                             : op == MSR_OP_MIN ? (p < q ? p : q)
                             : op == MSR_OP_MAX ? (p > q ? p : q)
                                                : p + q;
        break;
    }
    case MSR_DTYPE_F16:
    case MSR_DTYPE_BF16: {
        int half = dt == MSR_DTYPE_F16;
        /* operands with all 16 bits random, finite */
        float p = (float)fx * (float)(rng() % 1000) / 7.0f;
        float q = (float)fy * (float)(rng() % 1000) / 7.0f;
        uint16_t hp = half ? h_of((_Float16)p) : bf16_ref(p);
        uint16_t hq = half ? h_of((_Float16)q) : bf16_ref(q);
        float pp = half ? (float)of_h(hp) : bitsf((uint32_t)hp << 16);
        float qq = half ? (float)of_h(hq) : bitsf((uint32_t)hq << 16);
        float r = op == MSR_OP_PROD  ? pp * qq
                  : op == MSR_OP_MIN ? (pp < qq ? pp : qq)
                  : op == MSR_OP_MAX ? (pp > qq ? pp : qq)
                                     : pp + qq;
        ((uint16_t *)a)[i] = hp;
        ((uint16_t *)b)[i] = hq;
        ((uint16_t *)ref)[i] = half ? h_of((_Float16)r) : bf16_ref(r);
        break;
    }
    case MSR_DTYPE_I32: {
        int32_t p = (int32_t)(x * 1000003), q = (int32_t)(y * 7919);
        ((int32_t *)a)[i] = p;
        ((int32_t *)b)[i] = q;
        ((int32_t *)ref)[i] = op == MSR_OP_PROD  ? (int32_t)((uint32_t)p * (uint32_t)q)
                              : op == MSR_OP_MIN ? (p < q ? p : q)
                              : op == MSR_OP_MAX ? (p > q ? p : q)
                                                 : (int32_t)((uint32_t)p + (uint32_t)q);
        break;
    }
    case MSR_DTYPE_I64: {
        int64_t p = x * ((int64_t)1 << 40), q = y * ((int64_t)1 << 30);
        ((int64_t *)a)[i] = p;
        ((int64_t *)b)[i] = q;
        ((int64_t *)ref)[i] = op == MSR_OP_PROD  ? (int64_t)((uint64_t)p * (uint64_t)q)
                              : op == MSR_OP_MIN ? (p < q ? p : q)
                              : op == MSR_OP_MAX ? (p > q ? p : q)
                                                 : (int64_t)((uint64_t)p + (uint64_t)q);
        break;
    }
    case MSR_DTYPE_U8: {
        uint8_t p = (uint8_t)x, q = (uint8_t)y;
        a[i] = p;
        b[i] = q;
        ref[i] = op == MSR_OP_PROD  ? (uint8_t)(p * q)
                 : op == MSR_OP_MIN ? (p < q ? p : q)
                 : op == MSR_OP_MAX ? (p > q ? p : q)
                                    : (uint8_t)(p + q);
        break;
    }
    }
}

/* op over a and b equals ref, out of place and with dst aliasing a and b. */
static void check_reduce(msr_op_t op, msr_dtype_t dt, unsigned char *dst, const unsigned char *a,
                         const unsigned char *b, const unsigned char *ref, size_t n)
{
    size_t es = msr_dtype_size(dt);
    msr_reduce(op, dt, dst, a, b, n);
    MSR_CHECK_MSG(memcmp(dst, ref, n * es) == 0, "%s %s: out of place", msr_dtype_name(dt),
                  msr_op_name(op));
    unsigned char *copy = malloc(n * es);
    memcpy(copy, a, n * es);
    msr_reduce(op, dt, copy, copy, b, n);
    MSR_CHECK_MSG(memcmp(copy, ref, n * es) == 0, "%s %s: dst == a", msr_dtype_name(dt),
                  msr_op_name(op));
    memcpy(copy, b, n * es);
    msr_reduce(op, dt, copy, a, copy, n);
    MSR_CHECK_MSG(memcmp(copy, ref, n * es) == 0, "%s %s: dst == b", msr_dtype_name(dt),
                  msr_op_name(op));
    free(copy);
}

/* Every (dtype, op) against a scalar loop, with dst aliasing a and b. */
static void test_kernels(void)
{
    const size_t n = 1037; /* not a multiple of any vector width */
    for (int d = 0; d < MSR_DTYPE_COUNT; d++) {
        msr_dtype_t dt = (msr_dtype_t)d;
        size_t es = msr_dtype_size(dt);
        unsigned char *a = malloc(n * es), *b = malloc(n * es), *dst = malloc(n * es),
                      *ref = malloc(n * es);
        for (int o = 0; o < MSR_OP_COUNT; o++) {
            msr_op_t op = (msr_op_t)o;
            for (size_t i = 0; i < n; i++)
                fill_element(dt, op, a, b, ref, i);
            check_reduce(op, dt, dst, a, b, ref, n);
        }
        free(a);
        free(b);
        free(dst);
        free(ref);
    }
}

static void test_finish_avg(void)
{
    float f[3] = {3.0f, -7.0f, 1.0f};
    msr_reduce_finish(MSR_OP_AVG, MSR_DTYPE_F32, f, 3, 3);
    MSR_CHECK(f[0] == 1.0f && f[1] == -7.0f / 3.0f && f[2] == 1.0f / 3.0f);
    int32_t i[2] = {-7, 8};
    msr_reduce_finish(MSR_OP_AVG, MSR_DTYPE_I32, i, 2, 3);
    MSR_CHECK(i[0] == -2 && i[1] == 2);
    uint16_t h[1] = {h_of((_Float16)5.0f)};
    msr_reduce_finish(MSR_OP_AVG, MSR_DTYPE_F16, h, 1, 3);
    MSR_CHECK(h[0] == h_of((_Float16)(5.0f / 3.0f)));
    msr_reduce_finish(MSR_OP_SUM, MSR_DTYPE_I32, i, 2, 3); /* no-op */
    MSR_CHECK(i[0] == -2 && i[1] == 2);
}

/* A random finite value of any magnitude (every add rounds), or now and
 * then an infinity. */
static double wild(void)
{
    uint64_t r = rng();
    if (r % 61 == 0)
        return r & 64 ? INFINITY : -INFINITY;
    double m = (double)(r >> 11) / 9007199254740992.0 - 0.5;
    return ldexp(m, (int)(r % 120) - 60);
}

/* msr_reduce_few: for sums and averages of f32 and f64 up to
 * MSR_REDUCE_FEW elements, the bits msr_reduce gives (also in place), and
 * not an element more; everything else it leaves to msr_reduce, untouched. */
static void test_reduce_few(void)
{
    enum { CAP = MSR_REDUCE_FEW + 2 };
    for (int d = 0; d < MSR_DTYPE_COUNT; d++) {
        msr_dtype_t dt = (msr_dtype_t)d;
        size_t es = msr_dtype_size(dt);
        for (int o = 0; o < MSR_OP_COUNT; o++) {
            msr_op_t op = (msr_op_t)o;
            int fast = (dt == MSR_DTYPE_F32 || dt == MSR_DTYPE_F64) &&
                       (op == MSR_OP_SUM || op == MSR_OP_AVG);
            for (size_t n = 0; n <= MSR_REDUCE_FEW + 1; n++) {
                for (int round = 0; round < 50; round++) {
                    unsigned char a[CAP * 8], b[CAP * 8], got[CAP * 8], want[CAP * 8];
                    for (size_t i = 0; i < CAP; i++) {
                        float fa = (float)wild(), fb = (float)wild();
                        double da = wild(), db = wild();
                        memcpy(a + i * es, es == 4 ? (void *)&fa : (void *)&da, es);
                        memcpy(b + i * es, es == 4 ? (void *)&fb : (void *)&db, es);
                    }
                    memset(got, 0x5a, sizeof got);
                    memset(want, 0x5a, sizeof want);
                    int did = msr_reduce_few(op, dt, got, a, b, n);
                    MSR_CHECK_EQ(did, fast && n <= MSR_REDUCE_FEW);
                    if (did)
                        msr_reduce(op, dt, want, a, b, n);
                    MSR_CHECK(memcmp(got, want, sizeof got) == 0);
                    if (!did)
                        continue;
                    memcpy(got, a, sizeof a); /* in place: dst is a */
                    memcpy(want, a, sizeof a);
                    MSR_CHECK_EQ(msr_reduce_few(op, dt, got, got, b, n), 1);
                    msr_reduce(op, dt, want, want, b, n);
                    MSR_CHECK(memcmp(got, want, sizeof got) == 0);
                }
            }
        }
    }
}

static void test_names(void)
{
    MSR_CHECK_STR(msr_dtype_name(MSR_DTYPE_BF16), "bf16");
    MSR_CHECK_STR(msr_op_name(MSR_OP_AVG), "avg");
    MSR_CHECK_EQ(msr_dtype_size(MSR_DTYPE_F64), 8);
    MSR_CHECK_EQ(msr_dtype_size((msr_dtype_t)99), 0);
    MSR_CHECK_STR(msr_dtype_name((msr_dtype_t)99), "?");
}

static const msr_test_t tests[] = {
    {"f16_all_halves", test_f16_all_halves, 30},
    {"f16_rounding", test_f16_rounding, 60},
    {"bf16_rounding", test_bf16_rounding, 60},
    {"kernels", test_kernels, 30},
    {"finish_avg", test_finish_avg, 10},
    {"reduce_few", test_reduce_few, 30},
    {"names", test_names, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
