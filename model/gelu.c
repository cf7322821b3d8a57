/* GELU in float (the model's), with its own exp so that the scalar loop
 * and the vector paths (any CPU's 4 lanes, AVX2's 8, AVX-512F's 16: one
 * body, model/gelu_impl.h, compiled per path by model/simd_paths.h),
 * chosen at run time, give the same bits (layers.h; compiled without fused
 * multiply-adds, model/CMakeLists.txt). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "model/layers.h"

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

/* SwiGLU's rows (model/layers.h): silu(a) = a / (1 + exp(-a)), the
 * vector paths' tails */
static void swiglu_forward_row(float *o, const float *a, const float *u, size_t n)
{
    for (size_t i = 0; i < n; i++)
        o[i] = a[i] / (1.0f + msr_gelu_exp(-a[i])) * u[i];
}

static void swiglu_backward_row(float *da, float *du, const float *a, const float *u,
                                const float *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + msr_gelu_exp(-a[i]));
        da[i] += d[i] * u[i] * s * (1.0f + a[i] * (1.0f - s));
        du[i] += d[i] * a[i] * s;
    }
}

void msr_swiglu_forward_scalar(float *out, const float *inp, int N, int F)
{
    for (int n = 0; n < N; n++) {
        const float *a = inp + (size_t)n * 2 * F;
        swiglu_forward_row(out + (size_t)n * F, a, a + F, (size_t)F);
    }
}

void msr_swiglu_backward_scalar(float *dinp, const float *inp, const float *dout, int N, int F)
{
    for (int n = 0; n < N; n++) {
        const float *a = inp + (size_t)n * 2 * F;
        float *da = dinp + (size_t)n * 2 * F;
        swiglu_backward_row(da, da + F, a, a + F, dout + (size_t)n * F, (size_t)F);
    }
}

/* A softmax row's exponentials: 16 running sums, whatever the path's
 * width (16 lanes are one AVX-512 vector, two of AVX2, four of SSE2) */
#define EXP_SUM_LANES 16

/* The lanes' sums added in lane order, then the tail's n exponentials
 * (past the last whole block of 16) in order */
static float exp_sum_fold(const float lane[EXP_SUM_LANES], const float *tail, size_t n)
{
    float sum = 0.0f;
    for (int l = 0; l < EXP_SUM_LANES; l++)
        sum += lane[l];
    for (size_t j = 0; j < n; j++)
        sum += tail[j];
    return sum;
}

float msr_softmax_exp_sum_scalar(float *x, float mx, size_t n)
{
    float lane[EXP_SUM_LANES] = {0};
    size_t i = 0;
    for (; i + EXP_SUM_LANES <= n; i += EXP_SUM_LANES) {
        for (int l = 0; l < EXP_SUM_LANES; l++) {
            x[i + l] = msr_gelu_exp(x[i + l] - mx);
            lane[l] += x[i + l];
        }
    }
    for (size_t j = i; j < n; j++)
        x[j] = msr_gelu_exp(x[j] - mx);
    return exp_sum_fold(lane, x + i, n - i);
}

/* The paths' kernels (model/gelu_impl.h, through model/simd_paths.h) */
typedef struct gelu_kernels {
    void (*forward)(float *out, const float *inp, size_t n);
    void (*backward)(float *dinp, const float *inp, const float *dout, size_t n);
    float (*softmax_exp_sum)(float *x, float mx, size_t n);
    void (*swiglu_forward)(float *out, const float *inp, int N, int F);
    void (*swiglu_backward)(float *dinp, const float *inp, const float *dout, int N, int F);
} gelu_kernels_t;

#define SIMD_IMPL "model/gelu_impl.h"
#include "model/simd_paths.h"

/* The widest path the CPU has and MSRUN_CPU_DISABLE leaves */
static const gelu_kernels_t *widest(void)
{
#if defined(__x86_64__)
    switch (simd_widest()) {
    case SIMD_AVX512:
        return &kernels_avx512;
    case SIMD_AVX2:
        return &kernels_avx2;
    }
#endif
    return &kernels_base;
}

void msr_gelu_forward(float *out, const float *inp, size_t n)
{
    widest()->forward(out, inp, n);
}

void msr_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    widest()->backward(dinp, inp, dout, n);
}

float msr_softmax_exp_sum(float *x, float mx, size_t n)
{
    return widest()->softmax_exp_sum(x, mx, n);
}

void msr_swiglu_forward(float *out, const float *inp, int N, int F)
{
    widest()->swiglu_forward(out, inp, N, F);
}

void msr_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F)
{
    widest()->swiglu_backward(dinp, inp, dout, N, F);
}
