/* GELU in float (the model's), with its own exp so that a scalar, an AVX2
 * and an AVX-512F path, chosen at run time, give the same bits (layers.h;
 * compiled without fused multiply-adds, model/CMakeLists.txt). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/cpu_features.h"
#include "model/layers.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MSR_GELU_X86 1
#endif

/* gelu(x) = x/2 (1 + tanh(u)) = x * sigmoid(2u), u = S (x + A x^3): one
 * exp instead of a tanh (docs/model.md). */
#define GELU_S  0.7978845608028654f
#define GELU_A  0.044715f
#define GELU_3A (3.0f * GELU_A)

/* exp(x) in float from IEEE adds, multiplies and integer bit moves only, so
 * the vector paths can repeat it operation for operation (no fused
 * multiply-adds: the file is compiled without them): x = n ln2 + r with n
 * the nearest integer to x / ln2 (ln2 in two parts, the first short enough that
 * n * EXP_LN2_HI is exact), exp(r) by a degree-7 polynomial (Cephes's
 * expf's coefficients), scaled by 2^n in two halves so that no step leaves
 * the normal exponents before the last multiply, which rounds to a
 * subnormal, zero or infinity as the true value would. Within 1 ulp of
 * exp (a sweep of every 97th float); x is clamped first to [-104, 89], past which the result is 0
 * or infinity anyway, and a NaN comes back as itself. */
#define EXP_HI      89.0f
#define EXP_LO      -104.0f
#define EXP_LOG2E   1.44269504088896341f
#define EXP_SHIFTER 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer */
#define EXP_LN2_HI  0.693359375f
#define EXP_LN2_LO  -2.12194440e-4f
#define EXP_P0      1.9875691500e-4f
#define EXP_P1      1.3981999507e-3f
#define EXP_P2      8.3334519073e-3f
#define EXP_P3      4.1665795894e-2f
#define EXP_P4      1.6666665459e-1f
#define EXP_P5      5.0000001201e-1f

static float pow2i(int32_t n) /* 2^n for n in the normal exponents */
{
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float msr_gelu_exp(float x)
{
    if (x != x)
        return x;
    /* min then max as the vector instructions do: (a < b) ? a : b */
    float c = x < EXP_HI ? x : EXP_HI;
    c = c > EXP_LO ? c : EXP_LO;
    float n = (c * EXP_LOG2E + EXP_SHIFTER) - EXP_SHIFTER;
    float r = c - n * EXP_LN2_HI;
    r = r - n * EXP_LN2_LO;
    float p = EXP_P0;
    p = p * r + EXP_P1;
    p = p * r + EXP_P2;
    p = p * r + EXP_P3;
    p = p * r + EXP_P4;
    p = p * r + EXP_P5;
    p = (p * (r * r) + r) + 1.0f;
    int32_t ni = (int32_t)n, n1 = ni >> 1; /* an arithmetic shift: floor(n / 2) */
    return (p * pow2i(n1)) * pow2i(ni - n1);
}

void msr_gelu_forward_scalar(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + msr_gelu_exp(-2.0f * u));
    }
}

/* With s = sigmoid(2u): gelu' = s + 2 x s (1 - s) du/dx, since
 * (1 - tanh(u)^2) / 2 = 2 s (1 - s). */
void msr_gelu_backward_scalar(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        float s = 1.0f / (1.0f + msr_gelu_exp(-2.0f * u));
        float du = GELU_S * (1.0f + GELU_3A * x * x);
        float g = s + 2.0f * x * s * (1.0f - s) * du;
        dinp[i] += g * dout[i];
    }
}

#ifdef MSR_GELU_X86
#define V8(c) _mm256_set1_ps(c)

/* msr_gelu_exp on 8 lanes, the same operations in the same order */
__attribute__((target("avx2"))) static __m256 exp8(__m256 x)
{
    __m256 c = _mm256_max_ps(_mm256_min_ps(x, V8(EXP_HI)), V8(EXP_LO));
    __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(c, V8(EXP_LOG2E)), V8(EXP_SHIFTER)),
                             V8(EXP_SHIFTER));
    __m256 r = _mm256_sub_ps(c, _mm256_mul_ps(n, V8(EXP_LN2_HI)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, V8(EXP_LN2_LO)));
    __m256 p = V8(EXP_P0);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), V8(EXP_P1));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), V8(EXP_P2));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), V8(EXP_P3));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), V8(EXP_P4));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), V8(EXP_P5));
    p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), V8(1.0f));
    __m256i ni = _mm256_cvttps_epi32(n), n1 = _mm256_srai_epi32(ni, 1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, n1), bias), 23));
    __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* u = S (x + A x^3) on 8 lanes, as the scalar loops group it */
__attribute__((target("avx2"))) static __m256 gelu_u8(__m256 x)
{
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(V8(GELU_A), x), x), x);
    return _mm256_mul_ps(V8(GELU_S), _mm256_add_ps(x, x3));
}

__attribute__((target("avx2"))) static void forward_avx2(float *out, const float *inp, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(inp + i);
        __m256 e = exp8(_mm256_mul_ps(V8(-2.0f), gelu_u8(x)));
        _mm256_storeu_ps(out + i, _mm256_div_ps(x, _mm256_add_ps(V8(1.0f), e)));
    }
    msr_gelu_forward_scalar(out + i, inp + i, n - i);
}

__attribute__((target("avx2"))) static void backward_avx2(float *dinp, const float *inp,
                                                          const float *dout, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(inp + i);
        __m256 e = exp8(_mm256_mul_ps(V8(-2.0f), gelu_u8(x)));
        __m256 s = _mm256_div_ps(V8(1.0f), _mm256_add_ps(V8(1.0f), e));
        __m256 du = _mm256_mul_ps(
            V8(GELU_S), _mm256_add_ps(V8(1.0f), _mm256_mul_ps(_mm256_mul_ps(V8(GELU_3A), x), x)));
        __m256 t = _mm256_mul_ps(_mm256_mul_ps(V8(2.0f), x), s);
        t = _mm256_mul_ps(_mm256_mul_ps(t, _mm256_sub_ps(V8(1.0f), s)), du);
        __m256 g = _mm256_add_ps(s, t);
        __m256 d =
            _mm256_add_ps(_mm256_loadu_ps(dinp + i), _mm256_mul_ps(g, _mm256_loadu_ps(dout + i)));
        _mm256_storeu_ps(dinp + i, d);
    }
    msr_gelu_backward_scalar(dinp + i, inp + i, dout + i, n - i);
}

#define V16(c) _mm512_set1_ps(c)

/* msr_gelu_exp on 16 lanes, the same operations in the same order */
__attribute__((target("avx512f"))) static __m512 exp16(__m512 x)
{
    __m512 c = _mm512_max_ps(_mm512_min_ps(x, V16(EXP_HI)), V16(EXP_LO));
    __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(c, V16(EXP_LOG2E)), V16(EXP_SHIFTER)),
                             V16(EXP_SHIFTER));
    __m512 r = _mm512_sub_ps(c, _mm512_mul_ps(n, V16(EXP_LN2_HI)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, V16(EXP_LN2_LO)));
    __m512 p = V16(EXP_P0);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), V16(EXP_P1));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), V16(EXP_P2));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), V16(EXP_P3));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), V16(EXP_P4));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), V16(EXP_P5));
    p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r), V16(1.0f));
    __m512i ni = _mm512_cvttps_epi32(n), n1 = _mm512_srai_epi32(ni, 1);
    __m512i bias = _mm512_set1_epi32(127);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    __m512 s2 = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, n1), bias), 23));
    __m512 e = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), e, x);
}

/* u = S (x + A x^3) on 16 lanes, as the scalar loops group it */
__attribute__((target("avx512f"))) static __m512 gelu_u16(__m512 x)
{
    __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(V16(GELU_A), x), x), x);
    return _mm512_mul_ps(V16(GELU_S), _mm512_add_ps(x, x3));
}

/* 16 at a time, then the AVX2 loop for the rest (same bits everywhere) */
__attribute__((target("avx512f"))) static void forward_avx512(float *out, const float *inp,
                                                              size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(inp + i);
        __m512 e = exp16(_mm512_mul_ps(V16(-2.0f), gelu_u16(x)));
        _mm512_storeu_ps(out + i, _mm512_div_ps(x, _mm512_add_ps(V16(1.0f), e)));
    }
    forward_avx2(out + i, inp + i, n - i);
}

__attribute__((target("avx512f"))) static void backward_avx512(float *dinp, const float *inp,
                                                               const float *dout, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(inp + i);
        __m512 e = exp16(_mm512_mul_ps(V16(-2.0f), gelu_u16(x)));
        __m512 s = _mm512_div_ps(V16(1.0f), _mm512_add_ps(V16(1.0f), e));
        __m512 du = _mm512_mul_ps(
            V16(GELU_S),
            _mm512_add_ps(V16(1.0f), _mm512_mul_ps(_mm512_mul_ps(V16(GELU_3A), x), x)));
        __m512 t = _mm512_mul_ps(_mm512_mul_ps(V16(2.0f), x), s);
        t = _mm512_mul_ps(_mm512_mul_ps(t, _mm512_sub_ps(V16(1.0f), s)), du);
        __m512 g = _mm512_add_ps(s, t);
        __m512 d =
            _mm512_add_ps(_mm512_loadu_ps(dinp + i), _mm512_mul_ps(g, _mm512_loadu_ps(dout + i)));
        _mm512_storeu_ps(dinp + i, d);
    }
    backward_avx2(dinp + i, inp + i, dout + i, n - i);
}

/* The widest path the CPU has and MSRUN_CPU_DISABLE leaves: 2 AVX-512F,
 * 1 AVX2, 0 the scalar loop (also for a malformed MSRUN_CPU_DISABLE,
 * already logged). */
static int vector_path(void)
{
    unsigned f = 0;
    if (msr_cpu_features_get(&f) != MSR_OK)
        return 0;
    return (f & MSR_CPU_AVX512F) ? 2 : (f & MSR_CPU_AVX2) ? 1 : 0;
}
#endif

void msr_gelu_forward(float *out, const float *inp, size_t n)
{
#ifdef MSR_GELU_X86
    int path = vector_path();
    if (path == 2)
        forward_avx512(out, inp, n);
    else if (path == 1)
        forward_avx2(out, inp, n);
    if (path != 0)
        return;
#endif
    msr_gelu_forward_scalar(out, inp, n);
}

void msr_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
#ifdef MSR_GELU_X86
    int path = vector_path();
    if (path == 2)
        backward_avx512(dinp, inp, dout, n);
    else if (path == 1)
        backward_avx2(dinp, inp, dout, n);
    if (path != 0)
        return;
#endif
    msr_gelu_backward_scalar(dinp, inp, dout, n);
}
