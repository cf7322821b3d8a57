/* bfloat16 numbers: fp32's sign, exponent and top 7 mantissa bits.
 *
 * fp32 -> bf16 rounds to nearest, ties to even; a NaN stays a NaN (made
 * quiet, sign kept), never rounding into infinity; values past the largest
 * finite bf16 (0x7f7f, 3.3895e38) round to infinity as RNE says; subnormals
 * round like any other value (no flush to zero). bf16 -> fp32 is exact.
 * The communicator's bf16 reductions (comm/reduce.c) convert with these.
 *
 * The array forms use AVX2 where msr_cpu_features_get() reports it, and
 * to bf16 the bf16 units' own conversion where it reports avx512f and
 * avx512_bf16 (the build needs no -mavx2 or -mavx512bf16); they give the
 * same bits as the scalar forms on every path. Any thread may call them; dst and src must not
 * overlap. */
#ifndef MSR_BASE_BF16_H
#define MSR_BASE_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t msr_bf16_from_f32(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN, sign kept */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static inline float msr_f32_from_bf16(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* dst[i] = msr_bf16_from_f32(src[i]) for i < n */
void msr_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n);

/* dst[i] = msr_f32_from_bf16(src[i]) for i < n */
void msr_f32_from_bf16_n(float *dst, const uint16_t *src, size_t n);

/* The scalar loops, whatever the CPU has: for tests and benchmarks that
 * compare the paths. */
void msr_bf16_from_f32_n_scalar(uint16_t *dst, const float *src, size_t n);
void msr_f32_from_bf16_n_scalar(float *dst, const uint16_t *src, size_t n);

#endif
