/* AdamW over a slice of the flat parameter buffer (see adamw.h), its
 * elementwise rule scalar or in AVX2 chosen at run time. */
#include "model/adamw.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define MSR_ADAMW_X86 1
#endif

#include "base/alloc.h"
#include "base/cpu_features.h"
#include "base/err.h"
#include "base/status.h"

msr_status_t msr_adamw_create(const msr_adamw_config_t *cfg, const msr_gpt_tensor_t *tensors, int n,
                              size_t lo, size_t hi, msr_adamw_t **opt_p)
{
    if (lo >= hi) {
        return msr_err(MSR_ERR_INVALID_ARG, "adamw: slice [%zu, %zu) is empty", lo, hi);
    }
    msr_adamw_range_t r = {lo, hi};
    return msr_adamw_create_ranges(cfg, tensors, n, &r, 1, opt_p);
}

msr_status_t msr_adamw_create_ranges(const msr_adamw_config_t *cfg, const msr_gpt_tensor_t *tensors,
                                     int n, const msr_adamw_range_t *ranges, int nranges,
                                     msr_adamw_t **opt_p)
{
    size_t end = n > 0 ? tensors[n - 1].offset + tensors[n - 1].count : 0, count = 0;
    for (int k = 0; k < nranges; k++) {
        if (ranges[k].lo >= ranges[k].hi || ranges[k].hi > end ||
            (k > 0 && ranges[k].lo < ranges[k - 1].hi)) {
            return msr_err(MSR_ERR_INVALID_ARG,
                           "adamw: range %d [%zu, %zu) is empty, out of order or outside the %zu "
                           "parameters",
                           k, ranges[k].lo, ranges[k].hi, end);
        }
        count += ranges[k].hi - ranges[k].lo;
    }
    if (nranges < 0) {
        return msr_err(MSR_ERR_INVALID_ARG, "adamw: %d ranges", nranges);
    }
    if (!(cfg->beta1 >= 0.0 && cfg->beta1 < 1.0) || !(cfg->beta2 >= 0.0 && cfg->beta2 < 1.0) ||
        !(cfg->eps > 0.0) || !(cfg->weight_decay >= 0.0)) {
        return msr_err(MSR_ERR_INVALID_ARG,
                       "adamw: bad hyperparameters beta1 %g beta2 %g eps %g weight decay %g",
                       cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay);
    }
    msr_adamw_t *opt = msr_calloc(1, sizeof *opt);
    if (opt == NULL)
        goto err_no_memory;
    opt->cfg = *cfg;
    opt->lo = nranges > 0 ? ranges[0].lo : 0;
    opt->hi = nranges > 0 ? ranges[nranges - 1].hi : 0;
    opt->count = count;
    /* one extra element, so an owner of nothing still has valid pointers */
    opt->m = msr_calloc(count + 1, sizeof(float));
    opt->v = msr_calloc(count + 1, sizeof(float));
    /* each (tensor, range) overlap is one span at most: fewer than n + nranges */
    opt->spans = msr_calloc((size_t)n + (size_t)nranges + 1, sizeof *opt->spans);
    if (opt->m == NULL || opt->v == NULL || opt->spans == NULL)
        goto err_free;
    /* the tensors' parts inside each range, neighbours with the same flag merged */
    size_t base = 0; /* shard-space position of the range's first element */
    for (int r = 0; r < nranges; r++) {
        size_t lo = ranges[r].lo, hi = ranges[r].hi;
        for (int k = 0; k < n; k++) {
            size_t a = MSR_MAX(lo, tensors[k].offset);
            size_t b = MSR_MIN(hi, tensors[k].offset + tensors[k].count);
            if (a >= b)
                continue;
            size_t sa = base + (a - lo), sb = base + (b - lo);
            msr_adamw_span_t *last = opt->num_spans > 0 ? &opt->spans[opt->num_spans - 1] : NULL;
            if (last != NULL && last->decay == tensors[k].decay && last->end == sa)
                last->end = sb;
            else
                opt->spans[opt->num_spans++] = (msr_adamw_span_t){sa, sb, tensors[k].decay};
        }
        base += hi - lo;
    }
    *opt_p = opt;
    return MSR_OK;

err_free:
    msr_adamw_destroy(opt);
err_no_memory:
    return msr_err(MSR_ERR_NO_MEMORY, "adamw: out of memory for %zu moments", 2 * count);
}

void msr_adamw_destroy(msr_adamw_t *opt)
{
    if (opt == NULL)
        return;
    msr_free(opt->spans);
    msr_free(opt->v);
    msr_free(opt->m);
    msr_free(opt);
}

void msr_adamw_begin(msr_adamw_t *opt, float lr, float grad_scale)
{
    const msr_adamw_config_t *c = &opt->cfg;
    opt->t++;
    double bc1 = 1.0 - pow(c->beta1, (double)opt->t);
    double bc2 = 1.0 - pow(c->beta2, (double)opt->t);
    opt->step_size = (float)((double)lr / bc1);
    opt->bc2_sqrt = (float)sqrt(bc2);
    opt->decay_keep = (float)(1.0 - (double)lr * c->weight_decay);
    opt->grad_scale = grad_scale;
}

/* The scalar rule, in the order the vector paths keep lane by lane (no
 * fused multiply-adds: the build targets no FMA here), so every path gives
 * the same bits. */
static void kernel_scalar(const msr_adamw_coef_t *k, size_t n, float *p, const float *gr, float *m,
                          float *v)
{
    for (size_t i = 0; i < n; i++) {
        float g = gr[i] * k->grad_scale;
        m[i] = m[i] * k->b1 + k->one_b1 * g;
        v[i] = v[i] * k->b2 + k->one_b2 * g * g;
        float denom = sqrtf(v[i]) / k->bc2_sqrt + k->eps;
        p[i] = p[i] * k->keep - k->step_size * m[i] / denom;
    }
}

#ifdef MSR_ADAMW_X86
/* 8 elements at a time, the scalar rule's operations in its order (IEEE
 * mul, add, sqrt and div round as the scalar ones); the tail scalar. */
__attribute__((target("avx2"))) static void
kernel_avx2(const msr_adamw_coef_t *k, size_t n, float *p, const float *gr, float *m, float *v)
{
    const __m256 scale = _mm256_set1_ps(k->grad_scale), b1 = _mm256_set1_ps(k->b1);
    const __m256 b2 = _mm256_set1_ps(k->b2), one_b1 = _mm256_set1_ps(k->one_b1);
    const __m256 one_b2 = _mm256_set1_ps(k->one_b2), bc2 = _mm256_set1_ps(k->bc2_sqrt);
    const __m256 eps = _mm256_set1_ps(k->eps), keep = _mm256_set1_ps(k->keep);
    const __m256 step = _mm256_set1_ps(k->step_size);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_mul_ps(_mm256_loadu_ps(gr + i), scale);
        __m256 mi =
            _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(one_b1, g));
        __m256 gg = _mm256_mul_ps(_mm256_mul_ps(one_b2, g), g);
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2), gg);
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
        __m256 upd = _mm256_div_ps(_mm256_mul_ps(step, mi), denom);
        __m256 pi = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + i), keep), upd);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, pi);
    }
    kernel_scalar(k, n - i, p + i, gr + i, m + i, v + i);
}
#endif

void msr_adamw_kernel(const msr_adamw_coef_t *k, bool vector, size_t n, float *p, const float *g,
                      float *m, float *v)
{
#ifdef MSR_ADAMW_X86
    unsigned f = 0;
    if (vector && msr_cpu_features_get(&f) == MSR_OK && (f & MSR_CPU_AVX2)) {
        kernel_avx2(k, n, p, g, m, v);
        return;
    }
#else
    (void)vector;
#endif
    kernel_scalar(k, n, p, g, m, v);
}

void msr_adamw_update_moments(msr_adamw_t *opt, size_t off, size_t n, float *params,
                              const float *grads, float *m, float *v)
{
    const msr_adamw_config_t *c = &opt->cfg;
    msr_adamw_coef_t k = {
        .b1 = (float)c->beta1,
        .b2 = (float)c->beta2,
        .one_b1 = (float)(1.0 - c->beta1),
        .one_b2 = (float)(1.0 - c->beta2),
        .eps = (float)c->eps,
        .step_size = opt->step_size,
        .bc2_sqrt = opt->bc2_sqrt,
        .grad_scale = opt->grad_scale,
    };
    size_t end = off + n;
    for (int s = 0; s < opt->num_spans; s++) {
        const msr_adamw_span_t *sp = &opt->spans[s];
        size_t a = MSR_MAX(sp->begin, off), b = MSR_MIN(sp->end, end);
        if (a >= b)
            continue;
        k.keep = sp->decay ? opt->decay_keep : 1.0f;
        msr_adamw_kernel(&k, true, b - a, params + (a - off), grads + (a - off), m + (a - off),
                         v + (a - off));
    }
}

void msr_adamw_update_range(msr_adamw_t *opt, size_t off, size_t n, float *params,
                            const float *grads)
{
    msr_adamw_update_moments(opt, off, n, params, grads, opt->m + off, opt->v + off);
}

void msr_adamw_update(msr_adamw_t *opt, float *params, const float *grads, float lr,
                      float grad_scale)
{
    msr_adamw_begin(opt, lr, grad_scale);
    msr_adamw_update_range(opt, 0, opt->count, params, grads);
}

#ifdef MSR_ADAMW_X86
/* The eight lanes' middle loop, eight elements at a time, in two vectors of
 * four doubles held in registers (lanes 0-3 and 4-7): each lane's adds in
 * the same order as the plain loop, so the same bits. Returns the elements
 * it took, a multiple of eight. */
__attribute__((target("avx2"))) static size_t sumsq_avx2(double lanes[MSR_SUMSQ_LANES],
                                                         const float *x, size_t n)
{
    __m256d lo = _mm256_loadu_pd(lanes), hi = _mm256_loadu_pd(lanes + 4);
    size_t i = 0;
    for (; i + MSR_SUMSQ_LANES <= n; i += MSR_SUMSQ_LANES) {
        __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        __m256d b = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        lo = _mm256_add_pd(lo, _mm256_mul_pd(a, a));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(b, b));
    }
    _mm256_storeu_pd(lanes, lo);
    _mm256_storeu_pd(lanes + 4, hi);
    return i;
}
#endif

/* As sumsq_avx2 on any CPU: the lanes in a local array, which the compiler
 * keeps in registers (through the caller's array, each add waited on the
 * store of the one before: 2.7% of a bf16 step of the 10.7M model) */
static size_t sumsq_plain(double lanes[MSR_SUMSQ_LANES], const float *x, size_t n)
{
    double s[MSR_SUMSQ_LANES];
    memcpy(s, lanes, sizeof s);
    size_t i = 0;
    for (; i + MSR_SUMSQ_LANES <= n; i += MSR_SUMSQ_LANES)
        for (int j = 0; j < MSR_SUMSQ_LANES; j++)
            s[j] += (double)x[i + j] * (double)x[i + j];
    memcpy(lanes, s, sizeof s);
    return i;
}

/* Eight partial sums, element i into sum i mod 8, folded pairwise: eight
 * independent chains of adds where one chain waited on each add's latency
 * (2% of a bf16 step of the 10.7M-parameter model), in one fixed order on
 * every CPU and path. A float squared in double is exact, so only the adds
 * round. */
void msr_sumsq_add(double lanes[MSR_SUMSQ_LANES], const float *x, size_t n, size_t at)
{
    size_t i = 0;
    /* up to a multiple of eight in the whole array, then eight at a time */
    for (; i < n && (at + i) % MSR_SUMSQ_LANES != 0; i++)
        lanes[(at + i) % MSR_SUMSQ_LANES] += (double)x[i] * (double)x[i];
#ifdef MSR_ADAMW_X86
    unsigned f = 0;
    if (msr_cpu_features_get(&f) == MSR_OK && (f & MSR_CPU_AVX2))
        i += sumsq_avx2(lanes, x + i, n - i);
    else
        i += sumsq_plain(lanes, x + i, n - i);
#else
    i += sumsq_plain(lanes, x + i, n - i);
#endif
    for (; i < n; i++)
        lanes[(at + i) % MSR_SUMSQ_LANES] += (double)x[i] * (double)x[i];
}

double msr_sumsq_fold(const double s[MSR_SUMSQ_LANES])
{
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

double msr_sumsq(const float *x, size_t n)
{
    double s[MSR_SUMSQ_LANES] = {0};
    msr_sumsq_add(s, x, n, 0);
    return msr_sumsq_fold(s);
}

float msr_clip_scale(double norm, float max_norm)
{
    if (!(max_norm > 0.0f))
        return 1.0f;
    double coef = (double)max_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}
