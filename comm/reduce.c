/* The local reduction kernels: one loop per (type, op), written so that the
 * compiler vectorizes them (this file is built with -O3), with an AVX2/F16C
 * version chosen at run time where the CPU has it. */
#include "comm/reduce.h"

#include "base/bf16.h"
#include "base/cpu_features.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MSR_HAVE_X86 1
#define MSR_CLONES   __attribute__((target_clones("avx2", "default")))
#else
#define MSR_HAVE_X86 0
#define MSR_CLONES
#endif

/* ---- conversions ---- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float msr_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {
        float v = (float)mant * 0x1p-24f; /* zero or subnormal: exact */
        return bits_f32(f32_bits(v) | sign);
    }
    if (exp == 31) /* inf, or NaN made quiet as the hardware does */
        return bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0));
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t msr_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        if (ax > 0x7f800000u)
            return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
        return (uint16_t)(sign | 0x7c00u);
    }
    if (ax >= 0x477ff000u) /* 65520 and above round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {                    /* below 2^-14: subnormal, in units of 2^-24 */
        float scaled = bits_f32(ax) * 0x1p24f; /* exact */
        return (uint16_t)(sign | (uint16_t)lrintf(scaled));
    }
    uint32_t mant = ax & 0x7fffffu;
    uint32_t h = (((ax >> 23) - 112u) << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

/* ---- kernels for the native types ---- */

#define MSR_OP_SUM_(x, y)  ((x) + (y))
#define MSR_OP_PROD_(x, y) ((x) * (y))
#define MSR_OP_MIN_(x, y)  ((x) < (y) ? (x) : (y))
#define MSR_OP_MAX_(x, y)  ((x) > (y) ? (x) : (y))

#define MSR_KERNEL(name, T, OP)                                           \
    MSR_CLONES static void name(T *dst, const T *a, const T *b, size_t n) \
    {                                                                     \
        for (size_t i = 0; i < n; i++)                                    \
            dst[i] = (T)OP(a[i], b[i]);                                   \
    }

/* Signed sums and products wrap: they run on the unsigned type. */
MSR_KERNEL(k_f32_sum, float, MSR_OP_SUM_)
MSR_KERNEL(k_f32_prod, float, MSR_OP_PROD_)
MSR_KERNEL(k_f32_min, float, MSR_OP_MIN_)
MSR_KERNEL(k_f32_max, float, MSR_OP_MAX_)
MSR_KERNEL(k_f64_sum, double, MSR_OP_SUM_)
MSR_KERNEL(k_f64_prod, double, MSR_OP_PROD_)
MSR_KERNEL(k_f64_min, double, MSR_OP_MIN_)
MSR_KERNEL(k_f64_max, double, MSR_OP_MAX_)
MSR_KERNEL(k_u32_sum, uint32_t, MSR_OP_SUM_)
MSR_KERNEL(k_u32_prod, uint32_t, MSR_OP_PROD_)
MSR_KERNEL(k_i32_min, int32_t, MSR_OP_MIN_)
MSR_KERNEL(k_i32_max, int32_t, MSR_OP_MAX_)
MSR_KERNEL(k_u64_sum, uint64_t, MSR_OP_SUM_)
MSR_KERNEL(k_u64_prod, uint64_t, MSR_OP_PROD_)
MSR_KERNEL(k_i64_min, int64_t, MSR_OP_MIN_)
MSR_KERNEL(k_i64_max, int64_t, MSR_OP_MAX_)
MSR_KERNEL(k_u8_sum, uint8_t, MSR_OP_SUM_)
MSR_KERNEL(k_u8_prod, uint8_t, MSR_OP_PROD_)
MSR_KERNEL(k_u8_min, uint8_t, MSR_OP_MIN_)
MSR_KERNEL(k_u8_max, uint8_t, MSR_OP_MAX_)

/* ---- 16-bit floats: computed in f32 a block at a time ---- */

#define HALF_BLOCK 256

static void f32_block(msr_op_t op, float *r, const float *x, const float *y, size_t n)
{
    switch (op) {
    case MSR_OP_PROD:
        k_f32_prod(r, x, y, n);
        break;
    case MSR_OP_MIN:
        k_f32_min(r, x, y, n);
        break;
    case MSR_OP_MAX:
        k_f32_max(r, x, y, n);
        break;
    default:
        k_f32_sum(r, x, y, n);
        break;
    }
}

MSR_CLONES static void bf16_reduce(msr_op_t op, uint16_t *dst, const uint16_t *a, const uint16_t *b,
                                   size_t n)
{
    float x[HALF_BLOCK], y[HALF_BLOCK];
    for (size_t i = 0; i < n; i += HALF_BLOCK) {
        size_t m = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
        for (size_t j = 0; j < m; j++) {
            x[j] = bits_f32((uint32_t)a[i + j] << 16);
            y[j] = bits_f32((uint32_t)b[i + j] << 16);
        }
        f32_block(op, x, x, y, m);
        for (size_t j = 0; j < m; j++)
            dst[i + j] = msr_bf16_from_f32(x[j]);
    }
}

static void f16_reduce_soft(msr_op_t op, uint16_t *dst, const uint16_t *a, const uint16_t *b,
                            size_t n)
{
    float x[HALF_BLOCK], y[HALF_BLOCK];
    for (size_t i = 0; i < n; i += HALF_BLOCK) {
        size_t m = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
        for (size_t j = 0; j < m; j++) {
            x[j] = msr_f16_to_f32(a[i + j]);
            y[j] = msr_f16_to_f32(b[i + j]);
        }
        f32_block(op, x, x, y, m);
        for (size_t j = 0; j < m; j++)
            dst[i + j] = msr_f32_to_f16(x[j]);
    }
}

#if MSR_HAVE_X86
/* F16C converts 8 halves at a time with the same rounding as the software
 * path (nearest even), so every rank gets the same bits either way. */
__attribute__((target("avx2,f16c"))) static void
f16_reduce_f16c(msr_op_t op, uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a + i)));
        __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(b + i)));
        __m256 r;
        switch (op) {
        case MSR_OP_PROD:
            r = _mm256_mul_ps(x, y);
            break;
        case MSR_OP_MIN: /* x < y ? x : y, as the scalar kernels */
            r = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, y, _CMP_LT_OQ));
            break;
        case MSR_OP_MAX:
            r = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, y, _CMP_GT_OQ));
            break;
        default:
            r = _mm256_add_ps(x, y);
            break;
        }
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    if (i < n)
        f16_reduce_soft(op, dst + i, a + i, b + i, n - i);
}
#endif

static void f16_reduce(msr_op_t op, uint16_t *dst, const uint16_t *a, const uint16_t *b, size_t n)
{
#if MSR_HAVE_X86
    const unsigned need = MSR_CPU_F16C | MSR_CPU_AVX2;
    unsigned have = 0;
    if (msr_cpu_features_get(&have) == MSR_OK && (have & need) == need) {
        f16_reduce_f16c(op, dst, a, b, n);
        return;
    }
#endif
    f16_reduce_soft(op, dst, a, b, n);
}

void msr_reduce(msr_op_t op, msr_dtype_t dtype, void *dst, const void *a, const void *b,
                size_t count)
{
    if (count == 0)
        return;
    if (op == MSR_OP_AVG)
        op = MSR_OP_SUM;
#define MSR_DISPATCH(T, SUM, PROD, MIN, MAX)                           \
    do {                                                               \
        switch (op) {                                                  \
        case MSR_OP_PROD:                                              \
            PROD((T *)dst, (const T *)a, (const T *)b, count);         \
            break;                                                     \
        case MSR_OP_MIN:                                               \
            MIN((void *)dst, (const void *)a, (const void *)b, count); \
            break;                                                     \
        case MSR_OP_MAX:                                               \
            MAX((void *)dst, (const void *)a, (const void *)b, count); \
            break;                                                     \
        default:                                                       \
            SUM((T *)dst, (const T *)a, (const T *)b, count);          \
            break;                                                     \
        }                                                              \
    } while (0)
    switch (dtype) {
    case MSR_DTYPE_F32:
        MSR_DISPATCH(float, k_f32_sum, k_f32_prod, k_f32_min, k_f32_max);
        break;
    case MSR_DTYPE_F64:
        MSR_DISPATCH(double, k_f64_sum, k_f64_prod, k_f64_min, k_f64_max);
        break;
    case MSR_DTYPE_I32:
        MSR_DISPATCH(uint32_t, k_u32_sum, k_u32_prod, k_i32_min, k_i32_max);
        break;
    case MSR_DTYPE_I64:
        MSR_DISPATCH(uint64_t, k_u64_sum, k_u64_prod, k_i64_min, k_i64_max);
        break;
    case MSR_DTYPE_U8:
        MSR_DISPATCH(uint8_t, k_u8_sum, k_u8_prod, k_u8_min, k_u8_max);
        break;
    case MSR_DTYPE_F16:
        f16_reduce(op, dst, a, b, count);
        break;
    case MSR_DTYPE_BF16:
        bf16_reduce(op, dst, a, b, count);
        break;
    }
#undef MSR_DISPATCH
}

void msr_reduce_finish(msr_op_t op, msr_dtype_t dtype, void *buf, size_t count, int n)
{
    if (op != MSR_OP_AVG || n <= 1)
        return;
    size_t i;
    switch (dtype) {
    case MSR_DTYPE_F32: {
        float *p = buf, d = (float)n;
        for (i = 0; i < count; i++)
            p[i] /= d;
        break;
    }
    case MSR_DTYPE_F64: {
        double *p = buf, d = (double)n;
        for (i = 0; i < count; i++)
            p[i] /= d;
        break;
    }
    case MSR_DTYPE_F16: {
        uint16_t *p = buf;
        for (i = 0; i < count; i++)
            p[i] = msr_f32_to_f16(msr_f16_to_f32(p[i]) / (float)n);
        break;
    }
    case MSR_DTYPE_BF16: {
        uint16_t *p = buf;
        for (i = 0; i < count; i++)
            p[i] = msr_bf16_from_f32(msr_f32_from_bf16(p[i]) / (float)n);
        break;
    }
    case MSR_DTYPE_I32: {
        int32_t *p = buf;
        for (i = 0; i < count; i++)
            p[i] = (int32_t)(p[i] / n);
        break;
    }
    case MSR_DTYPE_I64: {
        int64_t *p = buf;
        for (i = 0; i < count; i++)
            p[i] = p[i] / n;
        break;
    }
    case MSR_DTYPE_U8: {
        uint8_t *p = buf;
        for (i = 0; i < count; i++)
            p[i] = (uint8_t)(p[i] / n);
        break;
    }
    }
}
