/* The bf16 products against fp32 sgemm on the 10.7M-parameter GPT's shapes
 * (6 layers, 384 channels, sequence 256, micro-batch 4: B*T = 1024 rows),
 * each path's GFLOP/s beside the core's fp32 FMA peak and, where the CPU
 * has avx512_bf16, its vdpbf16ps peak, each measured by a register-only
 * loop. Run it pinned to one core (bf16_gemm_bench.sh
 * does, with PyTorch's figures beside). Rates are the fastest product's,
 * timed in the thread's CPU time, so that a core shared with other work
 * still gives the products' own rate.
 *
 *   bf16_gemm_bench [--seconds S] [--torch FILE]
 *
 * FILE: lines "name torch_fp32_gflops torch_bf16_gflops", printed in the
 * same table. Exits 1 when a product fails. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cpu_features.h"
#include "base/bf16.h"
#include "model/gemm_bf16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef struct shape {
    const char *name;
    int ta, tb, M, N, K;
} shape_t;

/* the layers' cblas calls (model/layers_impl.h) at B*T 1024, C 384, V 256:
 * forward out = inp . W^T; the fc layer's two backward products */
static const shape_t shapes[] = {
    {"qkv", 0, 1, 1024, 1152, 384},        {"proj", 0, 1, 1024, 384, 384},
    {"fc", 0, 1, 1024, 1536, 384},         {"fc-proj", 0, 1, 1024, 384, 1536},
    {"head", 0, 1, 1024, 256, 384},        {"fc-dinp", 0, 0, 1024, 384, 1536},
    {"fc-dweight", 1, 0, 1536, 384, 1024},
};

/* the CPU time of this thread: on a shared core, the time the products
 * really ran, not the time others held the core */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__x86_64__)
/* 12 independent FMA chains of 8 lanes: enough to cover the FMA latency
 * on two pipes; the registers never touch memory */
__attribute__((target("avx2,fma"), noinline)) static float fma_loop(long iters)
{
    __m256 acc[12];
    const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++)
        acc[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
        /* unrolled, so that acc stays in registers */
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], m, a);
    }
    __m256 s = acc[0];
    for (int i = 1; i < 12; i++)
        s = _mm256_add_ps(s, acc[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}

/* 24 independent vdpbf16ps chains of 16 fp32 lanes, each lane summing 2
 * products per instruction: 64 flops an instruction. Run only where the
 * CPU has avx512_bf16 (bf16_peak checks). */
__attribute__((target("avx512f,avx512bf16"), noinline)) static float dp_loop(long iters)
{
    __m512 acc[24];
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
#pragma GCC unroll 24
    for (int i = 0; i < 24; i++)
        acc[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; n++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++)
            acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    }
    __m512 s = acc[0];
    for (int i = 1; i < 24; i++)
        s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

/* GFLOP/s of loop, which does flops floating-point operations an
 * iteration: the fastest of its runs of 2^20 iterations in seconds */
static double loop_peak(float (*loop)(long), double flops, double seconds)
{
    long iters = 1 << 20;
    double best = 0, t_end = now() + seconds;
    volatile float sink = 0;
    while (now() < t_end) {
        double t0 = now();
        sink += loop(iters);
        double dt = now() - t0, r = flops * (double)iters / dt / 1e9;
        best = r > best ? r : best;
    }
    (void)sink;
    return best;
}

/* GFLOP/s of dp_loop; 0 without avx512_bf16 */
static double bf16_peak(double seconds)
{
    unsigned f = 0;
    if (msr_cpu_features_get(&f) != MSR_OK || !(f & MSR_CPU_AVX512_BF16))
        return 0;
    return loop_peak(dp_loop, 64.0 * 24, seconds);
}

/* GFLOP/s of the loop (2 flops per lane per FMA); 0 without AVX2 and FMA */
static double fma_peak(double seconds)
{
    unsigned f = 0;
    if (msr_cpu_features_get(&f) != MSR_OK || !(f & MSR_CPU_AVX2) || !(f & MSR_CPU_FMA))
        return 0;
    return loop_peak(fma_loop, 2.0 * 8 * 12, seconds);
}
#else
static double fma_peak(double seconds)
{
    (void)seconds;
    return 0;
}

static double bf16_peak(double seconds)
{
    (void)seconds;
    return 0;
}
#endif

typedef struct operands {
    uint16_t *a, *b;
    float *fa, *fb, *c;
} operands_t;

/* g NULL: fp32 sgemm on the widened operands; else g's bf16 product */
static int run_once(const shape_t *s, const operands_t *o, msr_gemm_bf16_t *g)
{
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    if (g == NULL) {
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                    s->tb ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, 1.0f, o->fa, lda, o->fb,
                    ldb, 0.0f, o->c, s->N);
        return 0;
    }
    return msr_gemm_bf16(g, s->ta, s->tb, s->M, s->N, s->K, 1.0f, o->a, lda, o->b, ldb, 0.0f, o->c,
                         s->N) == MSR_OK
               ? 0
               : -1;
}

/* GFLOP/s of the fastest of the products repeated for about seconds
 * (after one warm-up): the best is the least disturbed by other work on
 * the core and its caches; -1 when a product fails */
static double rate(const shape_t *s, const operands_t *o, msr_gemm_bf16_t *g, double seconds)
{
    if (run_once(s, o, g) != 0)
        return -1;
    double best = 1e30, t0 = now(), t = t0;
    while (t - t0 < seconds) {
        double t1 = now();
        if (run_once(s, o, g) != 0)
            return -1;
        t = now();
        best = t - t1 < best ? t - t1 : best;
    }
    return 2.0 * s->M * s->N * s->K / best / 1e9;
}

static void torch_figures(const char *file, const char *name, double *f32, double *bf16)
{
    *f32 = *bf16 = 0;
    FILE *f = file != NULL ? fopen(file, "r") : NULL;
    char n[64];
    double x, y;
    while (f != NULL && fscanf(f, "%63s %lf %lf", n, &x, &y) == 3)
        if (strcmp(n, name) == 0) {
            *f32 = x;
            *bf16 = y;
        }
    if (f != NULL)
        fclose(f);
}

static void cell(double r)
{
    if (r > 0)
        printf(" %8.1f |", r);
    else
        printf(" %8s |", r < 0 ? "failed" : "n/a");
}

int main(int argc, char **argv)
{
    double seconds = 0.5;
    const char *torch = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--torch") == 0 && i + 1 < argc)
            torch = argv[++i];
        else {
            fprintf(stderr, "usage: bf16_gemm_bench [--seconds S] [--torch FILE]\n");
            return 2;
        }
    }
    char line[256];
    msr_cpu_features_describe(line, sizeof line);
    printf("%s\n", line);
    msr_gemm_bf16_t *blas = NULL, *onednn = NULL;
    if (msr_gemm_bf16_create(MSR_GEMM_BF16_BLAS, &blas) != MSR_OK)
        return 1;
    if (msr_gemm_bf16_create(MSR_GEMM_BF16_ONEDNN, &onednn) != MSR_OK)
        printf("onednn path: not available (said above); its column is n/a\n");
    double peak = fma_peak(seconds);
    double peak16 = bf16_peak(seconds);
    printf("fp32 FMA peak of this core (measured, AVX2): %.1f GFLOP/s\n", peak);
    if (peak16 > 0)
        printf("bf16 vdpbf16ps peak of this core (measured, zmm): %.1f GFLOP/s\n\n", peak16);
    else
        printf("bf16 vdpbf16ps peak: n/a (no avx512_bf16)\n\n");
    printf("| product | M x N x K | sgemm fp32 | bf16 blas | bf16 onednn | torch fp32 | "
           "torch bf16 | blas/fp32 peak | onednn/bf16 peak |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    int failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape_t *s = &shapes[i];
        size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N;
        operands_t o = {malloc(na * 2), malloc(nb * 2), malloc(na * 4), malloc(nb * 4),
                        malloc((size_t)s->M * s->N * 4)};
        if (!o.a || !o.b || !o.fa || !o.fb || !o.c) {
            fprintf(stderr, "bf16_gemm_bench: out of memory\n");
            return 1;
        }
        for (size_t k = 0; k < na; k++)
            o.a[k] = msr_bf16_from_f32((float)((k * 7919 % 1000) / 500.0 - 1.0));
        for (size_t k = 0; k < nb; k++)
            o.b[k] = msr_bf16_from_f32((float)((k * 104729 % 1000) / 500.0 - 1.0));
        msr_f32_from_bf16_n(o.fa, o.a, na);
        msr_f32_from_bf16_n(o.fb, o.b, nb);
        double r32 = rate(s, &o, NULL, seconds), rb = rate(s, &o, blas, seconds);
        double ro = onednn != NULL ? rate(s, &o, onednn, seconds) : 0, t32, tb;
        torch_figures(torch, s->name, &t32, &tb);
        printf("| %s%s%s | %d x %d x %d |", s->name, s->ta ? " (A^T)" : "", s->tb ? " (B^T)" : "",
               s->M, s->N, s->K);
        cell(r32);
        cell(rb);
        cell(ro);
        cell(t32);
        cell(tb);
        printf(" %5.0f%% |", peak > 0 ? 100 * rb / peak : 0);
        if (peak16 > 0 && ro > 0)
            printf(" %5.0f%% |\n", 100 * ro / peak16);
        else
            printf(" %6s |\n", "n/a");
        failed |= rb < 0 || ro < 0;
        free(o.a);
        free(o.b);
        free(o.fa);
        free(o.fb);
        free(o.c);
    }
    if (onednn != NULL)
        printf("\nonednn implementation: %s\n", msr_gemm_bf16_impl(onednn));
    msr_gemm_bf16_destroy(blas);
    msr_gemm_bf16_destroy(onednn);
    return failed;
}
