/* bfloat16 conversions of arrays: scalar, AVX2 and (to bf16) AVX512-BF16,
 * chosen at run time. */
#include "base/bf16.h"

#include "base/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MSR_BF16_X86 1
#endif

void msr_bf16_from_f32_n_scalar(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = msr_bf16_from_f32(src[i]);
}

void msr_f32_from_bf16_n_scalar(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = msr_f32_from_bf16(src[i]);
}

#ifdef MSR_BF16_X86
/* 8 floats at a time, the scalar rule on each lane: RNE by adding 0x7fff
 * plus the kept part's lowest bit, NaN lanes replaced by their quieted top
 * half; the scalar loop finishes the tail. */
__attribute__((target("avx2"))) static void from_f32_avx2(uint16_t *dst, const float *src, size_t n)
{
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
        __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
        r = _mm256_blendv_epi8(r, q, nan);
        __m128i packed =
            _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)(dst + i), packed);
    }
    _mm256_zeroupper(); /* see from_f32_avx512bf16 */
    msr_bf16_from_f32_n_scalar(dst + i, src + i, n - i);
}

/* 32 floats at a time on the bf16 units' own conversion (vcvtne2ps2bf16:
 * RNE, a NaN made quiet with its sign and top half kept, as the scalar
 * rule), except that it reads a subnormal input as zero: a block of 32
 * holding one (exponent 0, mantissa not) goes through the scalar rule
 * instead, as does the tail. */
__attribute__((target("avx512f,avx512bf16"))) static void
from_f32_avx512bf16(uint16_t *dst, const float *src, size_t n)
{
    const __m512i exp = _mm512_set1_epi32(0x7f800000), man = _mm512_set1_epi32(0x007fffff);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i lo = _mm512_loadu_si512((const void *)(src + i));
        __m512i hi = _mm512_loadu_si512((const void *)(src + i + 16));
        __mmask16 sub_lo = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(lo, exp), lo, man);
        __mmask16 sub_hi = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(hi, exp), hi, man);
        if ((sub_lo | sub_hi) != 0) {
            msr_bf16_from_f32_n_scalar(dst + i, src + i, 32);
            continue;
        }
        __m512bh r = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo));
        _mm512_storeu_si512((void *)(dst + i), (__m512i)r);
    }
    /* The upper halves cleared before the tail: GCC leaves them dirty
     * across its tail call to the scalar loop, and the caller's SSE code
     * (a softmax calling this a row at a time) then ran several times
     * slower, libm's expf most of all. */
    _mm256_zeroupper();
    msr_bf16_from_f32_n_scalar(dst + i, src + i, n - i);
}

__attribute__((target("avx2"))) static void to_f32_avx2(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        __m256i x = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(x));
    }
    _mm256_zeroupper(); /* see from_f32_avx512bf16 */
    msr_f32_from_bf16_n_scalar(dst + i, src + i, n - i);
}

/* AVX2 where the CPU has it and MSRUN_CPU_DISABLE leaves it (a malformed
 * MSRUN_CPU_DISABLE, already logged, means the scalar loop). */
static int use_avx2(void)
{
    unsigned f = 0;
    return msr_cpu_features_get(&f) == MSR_OK && (f & MSR_CPU_AVX2);
}

/* The same for the bf16 units' conversion (avx512f and avx512_bf16). */
static int use_avx512bf16(void)
{
    unsigned f = 0, want = MSR_CPU_AVX512F | MSR_CPU_AVX512_BF16;
    return msr_cpu_features_get(&f) == MSR_OK && (f & want) == want;
}
#endif

void msr_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n)
{
#ifdef MSR_BF16_X86
    if (use_avx512bf16()) {
        from_f32_avx512bf16(dst, src, n);
        return;
    }
    if (use_avx2()) {
        from_f32_avx2(dst, src, n);
        return;
    }
#endif
    msr_bf16_from_f32_n_scalar(dst, src, n);
}

void msr_f32_from_bf16_n(float *dst, const uint16_t *src, size_t n)
{
#ifdef MSR_BF16_X86
    if (use_avx2()) {
        to_f32_avx2(dst, src, n);
        return;
    }
#endif
    msr_f32_from_bf16_n_scalar(dst, src, n);
}
