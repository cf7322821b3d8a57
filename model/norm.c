/* LayerNorm and RMSNorm in float (layers.h), their row sums in 16 fp32
 * lanes. One body per kernel (norm_impl.h), written with GCC's generic
 * vectors, is compiled three times (model/simd_paths.h): for any CPU (four
 * vectors of 4 floats: SSE2 on x86-64), with AVX2 (two of 8) and with
 * AVX-512F (one of 16).
 * Lane l of a row sum adds elements l, l + 16, ... in order; the lanes
 * fold in a fixed order (l with l + 8, then + 4, + 2, + 1) and the
 * elements past the last whole 16 are added after, in order. The
 * per-element operations are the same IEEE operations on every path, and
 * this file is compiled without contracting a multiply and an add into a
 * fused one (model/CMakeLists.txt), so every path gives the same bits, and
 * a row's results depend neither on the CPU nor on the rows around it. */
#include <math.h>
#include <string.h>

#include "model/layers.h"

#define LANES 16

/* The 16 lanes at acc folded into one sum, always in the same order. */
static float fold(const void *acc)
{
    float l[LANES];
    memcpy(l, acc, sizeof l);
    for (int i = 0; i < 8; i++)
        l[i] += l[i + 8];
    for (int i = 0; i < 4; i++)
        l[i] += l[i + 4];
    l[0] += l[2];
    l[1] += l[3];
    return l[0] + l[1];
}

/* The whole 16s of a row of C elements: [0, C - C % 16) */
static inline int body_len(int C)
{
    return C - C % LANES;
}

/* kernels_base, kernels_avx2 and kernels_avx512 */
#define SIMD_IMPL "model/norm_impl.h"
#include "model/simd_paths.h"

const msr_norm_kernels_t *msr_norm_kernels(msr_norm_path_t path)
{
    switch (path) {
    case MSR_NORM_BASE:
        return &kernels_base;
#if defined(__x86_64__)
    case MSR_NORM_AVX2:
        return simd_path_ok(SIMD_AVX2) ? &kernels_avx2 : NULL;
    case MSR_NORM_AVX512:
        return simd_path_ok(SIMD_AVX512) ? &kernels_avx512 : NULL;
#else
    case MSR_NORM_AVX2:
    case MSR_NORM_AVX512:
        return NULL;
#endif
    }
    return NULL;
}

/* The widest path this CPU (less MSRUN_CPU_DISABLE) allows */
static const msr_norm_kernels_t *widest(void)
{
    const msr_norm_kernels_t *k = msr_norm_kernels((msr_norm_path_t)simd_widest());
    return k != NULL ? k : &kernels_base;
}

void msr_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C)
{
    widest()->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
}

void msr_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C)
{
    widest()->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

void msr_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N,
                         int C)
{
    widest()->rmsnorm_forward(out, rstd, inp, weight, N, C);
}

void msr_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                          const float *weight, const float *rstd, int N, int C)
{
    widest()->rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
}
