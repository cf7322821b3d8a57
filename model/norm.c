/* LayerNorm and RMSNorm in float (layers.h), their row sums in 16 fp32
 * lanes. One body per kernel (norm_impl.h), written with GCC's generic
 * vectors, is compiled three times: for any CPU (four vectors of 4 floats:
 * SSE2 on x86-64), with AVX2 (two of 8) and with AVX-512F (one of 16).
 * Lane l of a row sum adds elements l, l + 16, ... in order; the lanes
 * fold in a fixed order (l with l + 8, then + 4, + 2, + 1) and the
 * elements past the last whole 16 are added after, in order. The
 * per-element operations are the same IEEE operations on every path, and
 * this file is compiled without contracting a multiply and an add into a
 * fused one (model/CMakeLists.txt), so every path gives the same bits, and
 * a row's results depend neither on the CPU nor on the rows around it. */
#include <math.h>
#include <string.h>

#include "base/cpu_features.h"
#include "model/layers.h"

#define LANES 16

/* unaligned loads and stores of a vector v (rows start anywhere) */
#define LOAD(v, p)  memcpy(&(v), (p), sizeof(v))
#define STORE(p, v) memcpy((p), &(v), sizeof(v))

#define BODY static inline __attribute__((always_inline))

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

/* any CPU: 4 lanes (SSE2 on x86-64) */
typedef float v4 __attribute__((vector_size(4 * sizeof(float))));
#define vec     v4
#define NV      4
#define PATH(f) f##_base
#define TARGET
#include "model/norm_impl.h"
#undef vec
#undef NV
#undef PATH
#undef TARGET

#if defined(__x86_64__)
typedef float v8 __attribute__((vector_size(8 * sizeof(float))));
#define vec     v8
#define NV      2
#define PATH(f) f##_avx2
#define TARGET  __attribute__((target("avx2")))
#include "model/norm_impl.h"
#undef vec
#undef NV
#undef PATH
#undef TARGET

typedef float v16 __attribute__((vector_size(16 * sizeof(float))));
#define vec     v16
#define NV      1
#define PATH(f) f##_avx512
#define TARGET  __attribute__((target("avx512f")))
#include "model/norm_impl.h"
#undef vec
#undef NV
#undef PATH
#undef TARGET
#endif

const msr_norm_kernels_t *msr_norm_kernels(msr_norm_path_t path)
{
    unsigned f = 0;
    /* a malformed MSRUN_CPU_DISABLE (already logged) leaves the base path */
    if (msr_cpu_features_get(&f) != MSR_OK)
        f = 0;
    switch (path) {
    case MSR_NORM_BASE:
        return &kernels_base;
#if defined(__x86_64__)
    case MSR_NORM_AVX2:
        return (f & MSR_CPU_AVX2) != 0 ? &kernels_avx2 : NULL;
    case MSR_NORM_AVX512:
        return (f & MSR_CPU_AVX512F) != 0 ? &kernels_avx512 : NULL;
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
    const msr_norm_kernels_t *k = msr_norm_kernels(MSR_NORM_AVX512);
    if (k == NULL)
        k = msr_norm_kernels(MSR_NORM_AVX2);
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
