/* LayerNorm and RMSNorm in float (layers.h), their row sums in 16 fp32
 * lanes. One body per kernel, written with GCC's generic vectors of 16
 * floats, is compiled three times: for any x86-64 CPU (the compiler splits
 * each 16-lane operation into four of SSE2), with AVX2 (two of 8) and with
 * AVX-512F (one of 16). Lane l of a row sum adds elements l, l + 16, ... in
 * order; the lanes fold in a fixed order (l with l + 8, then + 4, + 2, + 1)
 * and the elements past the last whole 16 are added after, in order. The
 * per-element operations are the same IEEE operations on every path, and
 * this file is compiled without contracting a multiply and an add into a
 * fused one (model/CMakeLists.txt), so every path gives the same bits, and
 * a row's results depend neither on the CPU nor on the rows around it. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "base/cpu_features.h"
#include "model/layers.h"

#define LANES 16
typedef float v16 __attribute__((vector_size(LANES * sizeof(float))));

/* unaligned loads and stores (rows start anywhere) */
#define LOAD(v, p)  memcpy(&(v), (p), sizeof(v16))
#define STORE(p, v) memcpy((p), &(v), sizeof(v16))

#define BODY static inline __attribute__((always_inline))

/* The lanes of *acc folded into one sum, always in the same order. */
static float fold(const v16 *acc)
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

/* out = (x - mean) * rstd * weight + bias, one row */
BODY void layernorm_forward_row(float *o, float *mean, float *rstd, const float *x,
                                const float *weight, const float *bias, int C)
{
    int cv = body_len(C);
    v16 acc = {0}, v, w, b;
    for (int c = 0; c < cv; c += LANES) {
        LOAD(v, x + c);
        acc += v;
    }
    float m = fold(&acc);
    for (int c = cv; c < C; c++)
        m += x[c];
    m = m / (float)C;
    acc = (v16){0};
    for (int c = 0; c < cv; c += LANES) {
        LOAD(v, x + c);
        v -= m;
        acc += v * v;
    }
    float var = fold(&acc);
    for (int c = cv; c < C; c++) {
        float d = x[c] - m;
        var += d * d;
    }
    var = var / (float)C;
    float s = 1.0f / sqrtf(var + (float)MSR_LAYERNORM_EPS);
    for (int c = 0; c < cv; c += LANES) {
        LOAD(v, x + c);
        LOAD(w, weight + c);
        LOAD(b, bias + c);
        v = (v - m) * s * w + b;
        STORE(o + c, v);
    }
    for (int c = cv; c < C; c++)
        o[c] = (x[c] - m) * s * weight[c] + bias[c];
    *mean = m;
    *rstd = s;
}

/* With xhat = (x - mean) * rstd and g = dout * weight:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); one row, dweight and
 * dbias += its share. */
BODY void layernorm_backward_row(float *dx, float *dweight, float *dbias, const float *d,
                                 const float *x, const float *weight, float m, float s, int C)
{
    int cv = body_len(C);
    v16 ga = {0}, gxa = {0}, v, dv, w, g, xhat, t;
    for (int c = 0; c < cv; c += LANES) {
        LOAD(v, x + c);
        LOAD(dv, d + c);
        LOAD(w, weight + c);
        xhat = (v - m) * s;
        g = dv * w;
        ga += g;
        gxa += g * xhat;
    }
    float gmean = fold(&ga), gxmean = fold(&gxa);
    for (int c = cv; c < C; c++) {
        float xh = (x[c] - m) * s, gc = d[c] * weight[c];
        gmean += gc;
        gxmean += gc * xh;
    }
    gmean = gmean / (float)C;
    gxmean = gxmean / (float)C;
    for (int c = 0; c < cv; c += LANES) {
        LOAD(v, x + c);
        LOAD(dv, d + c);
        LOAD(w, weight + c);
        xhat = (v - m) * s;
        g = dv * w;
        LOAD(t, dbias + c);
        t += dv;
        STORE(dbias + c, t);
        LOAD(t, dweight + c);
        t += xhat * dv;
        STORE(dweight + c, t);
        LOAD(t, dx + c);
        t += s * (g - gmean - xhat * gxmean);
        STORE(dx + c, t);
    }
    for (int c = cv; c < C; c++) {
        float xh = (x[c] - m) * s, gc = d[c] * weight[c];
        dbias[c] += d[c];
        dweight[c] += xh * d[c];
        dx[c] += s * (gc - gmean - xh * gxmean);
    }
}

/* out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps), one row */
BODY void rmsnorm_forward_row(float *o, float *rstd, const float *x, const float *weight, int C)
{
    int cv = body_len(C);
    v16 acc = {0}, v, w;
    for (int c = 0; c < cv; c += LANES) {
        LOAD(v, x + c);
        acc += v * v;
    }
    float ss = fold(&acc);
    for (int c = cv; c < C; c++)
        ss += x[c] * x[c];
    float s = 1.0f / sqrtf(ss / (float)C + (float)MSR_RMSNORM_EPS);
    for (int c = 0; c < cv; c += LANES) {
        LOAD(v, x + c);
        LOAD(w, weight + c);
        v = v * s * w;
        STORE(o + c, v);
    }
    for (int c = cv; c < C; c++)
        o[c] = x[c] * s * weight[c];
    *rstd = s;
}

/* With xhat = x * rstd and g = dout * weight:
 * dx = rstd * (g - xhat * mean(g * xhat)); one row, dweight += its share. */
BODY void rmsnorm_backward_row(float *dx, float *dweight, const float *d, const float *x,
                               const float *weight, float s, int C)
{
    int cv = body_len(C);
    v16 acc = {0}, v, dv, w, xhat, t;
    for (int c = 0; c < cv; c += LANES) {
        LOAD(v, x + c);
        LOAD(dv, d + c);
        LOAD(w, weight + c);
        acc += dv * w * v * s;
    }
    float gx = fold(&acc);
    for (int c = cv; c < C; c++)
        gx += d[c] * weight[c] * x[c] * s;
    gx = gx / (float)C;
    for (int c = 0; c < cv; c += LANES) {
        LOAD(v, x + c);
        LOAD(dv, d + c);
        LOAD(w, weight + c);
        xhat = v * s;
        LOAD(t, dweight + c);
        t += xhat * dv;
        STORE(dweight + c, t);
        LOAD(t, dx + c);
        t += s * (dv * w - xhat * gx);
        STORE(dx + c, t);
    }
    for (int c = cv; c < C; c++) {
        float xh = x[c] * s;
        dweight[c] += xh * d[c];
        dx[c] += s * (d[c] * weight[c] - xh * gx);
    }
}

/* The four kernels over N rows, compiled for one path (TARGET: the
 * function attributes that enable its instructions). */
#define NORM_PATH(name, TARGET)                                                                  \
    TARGET static void layernorm_forward_##name(float *out, float *mean, float *rstd,            \
                                                const float *inp, const float *weight,           \
                                                const float *bias, int N, int C)                 \
    {                                                                                            \
        for (int n = 0; n < N; n++) {                                                            \
            size_t r = (size_t)n * (size_t)C;                                                    \
            layernorm_forward_row(out + r, mean + n, rstd + n, inp + r, weight, bias, C);        \
        }                                                                                        \
    }                                                                                            \
    TARGET static void layernorm_backward_##name(                                                \
        float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,          \
        const float *weight, const float *mean, const float *rstd, int N, int C)                 \
    {                                                                                            \
        for (int n = 0; n < N; n++) {                                                            \
            size_t r = (size_t)n * (size_t)C;                                                    \
            layernorm_backward_row(dinp + r, dweight, dbias, dout + r, inp + r, weight, mean[n], \
                                   rstd[n], C);                                                  \
        }                                                                                        \
    }                                                                                            \
    TARGET static void rmsnorm_forward_##name(float *out, float *rstd, const float *inp,         \
                                              const float *weight, int N, int C)                 \
    {                                                                                            \
        for (int n = 0; n < N; n++) {                                                            \
            size_t r = (size_t)n * (size_t)C;                                                    \
            rmsnorm_forward_row(out + r, rstd + n, inp + r, weight, C);                          \
        }                                                                                        \
    }                                                                                            \
    TARGET static void rmsnorm_backward_##name(float *dinp, float *dweight, const float *dout,   \
                                               const float *inp, const float *weight,            \
                                               const float *rstd, int N, int C)                  \
    {                                                                                            \
        for (int n = 0; n < N; n++) {                                                            \
            size_t r = (size_t)n * (size_t)C;                                                    \
            rmsnorm_backward_row(dinp + r, dweight, dout + r, inp + r, weight, rstd[n], C);      \
        }                                                                                        \
    }                                                                                            \
    static const msr_norm_kernels_t kernels_##name = {                                           \
        layernorm_forward_##name, layernorm_backward_##name, rmsnorm_forward_##name,             \
        rmsnorm_backward_##name};

NORM_PATH(base, )
#if defined(__x86_64__)
NORM_PATH(avx2, __attribute__((target("avx2"))))
NORM_PATH(avx512, __attribute__((target("avx512f"))))
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
