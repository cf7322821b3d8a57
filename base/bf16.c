/* bfloat16 conversions of arrays: scalar, and AVX2 chosen at run time. */
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
    msr_f32_from_bf16_n_scalar(dst + i, src + i, n - i);
}

/* AVX2 where the CPU has it and MSRUN_CPU_DISABLE leaves it (a malformed
 * MSRUN_CPU_DISABLE, already logged, means the scalar loop). */
static int use_avx2(void)
{
    unsigned f = 0;
    return msr_cpu_features_get(&f) == MSR_OK && (f & MSR_CPU_AVX2);
}
#endif

void msr_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n)
{
#ifdef MSR_BF16_X86
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
