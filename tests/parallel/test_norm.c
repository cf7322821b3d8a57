/* The float LayerNorm and RMSNorm (model/norm.c): each path the CPU has
 * against the double kernels, every path bit for bit against the base one
 * at widths around the 16 lanes and rows that start anywhere, and a row's
 * results the same whatever rows come with it. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "tests/runner.h"

enum { ROWS = 3, SHIFTS = 4 };

/* The inputs of one case: N rows of C, the row block starting shift floats
 * past an allocation (rows that start off any vector alignment). */
typedef struct norm_case {
    int N, C;
    float *x, *d, *w, *b; /* (N,C), (N,C), (C), (C) */
    void *mem[4];
} norm_case_t;

/* Every output of the four kernels, packed; gradients start non-zero,
 * since backward adds to them. */
typedef struct norm_out {
    float *ln, *mean, *rstd, *ln_dx, *ln_dw, *ln_db; /* (N,C) (N) (N) (N,C) (C) (C) */
    float *rms, *rms_rstd, *rms_dx, *rms_dw;         /* (N,C) (N) (N,C) (C) */
    float *all;
    size_t n;
} norm_out_t;

static uint32_t next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* uniform in [-1, 1) */
static float uni(uint32_t *s)
{
    return (float)next(s) / (float)(1u << 23) - 1.0f;
}

static float *shifted(void **mem, size_t n, int shift)
{
    *mem = malloc((n + SHIFTS) * sizeof(float));
    MSR_CHECK(*mem != NULL);
    return (float *)*mem + shift;
}

static void case_make(norm_case_t *k, int N, int C, int shift, uint32_t seed)
{
    k->N = N, k->C = C;
    size_t nc = (size_t)N * C;
    k->x = shifted(&k->mem[0], nc, shift);
    k->d = shifted(&k->mem[1], nc, shift);
    k->w = shifted(&k->mem[2], C, shift);
    k->b = shifted(&k->mem[3], C, shift);
    for (size_t i = 0; i < nc; i++) {
        k->x[i] = 3.0f + 2.0f * uni(&seed); /* a mean well off zero */
        k->d[i] = uni(&seed);
    }
    for (int c = 0; c < C; c++) {
        k->w[c] = 1.0f + 0.5f * uni(&seed);
        k->b[c] = 0.5f * uni(&seed);
    }
}

static void case_free(norm_case_t *k)
{
    for (int i = 0; i < 4; i++)
        free(k->mem[i]);
}

static void out_make(norm_out_t *o, int N, int C)
{
    size_t nc = (size_t)N * C;
    o->n = 4 * nc + 3 * (size_t)N + 3 * (size_t)C;
    o->all = malloc((o->n + 1) * sizeof(float));
    MSR_CHECK(o->all != NULL);
    float *p = o->all;
    o->ln = p, p += nc;
    o->mean = p, p += N;
    o->rstd = p, p += N;
    o->ln_dx = p, p += nc;
    o->ln_dw = p, p += C;
    o->ln_db = p, p += C;
    o->rms = p, p += nc;
    o->rms_rstd = p, p += N;
    o->rms_dx = p, p += nc;
    o->rms_dw = p;
    for (size_t i = 0; i < o->n; i++)
        o->all[i] = 0.125f * (float)(i % 11) - 0.5f;
}

/* The four kernels of one path on k, backward on its own forward's
 * statistics, as the model runs them. */
static void run(const msr_norm_kernels_t *f, const norm_case_t *k, norm_out_t *o)
{
    out_make(o, k->N, k->C);
    f->layernorm_forward(o->ln, o->mean, o->rstd, k->x, k->w, k->b, k->N, k->C);
    f->layernorm_backward(o->ln_dx, o->ln_dw, o->ln_db, k->d, k->x, k->w, o->mean, o->rstd, k->N,
                          k->C);
    f->rmsnorm_forward(o->rms, o->rms_rstd, k->x, k->w, k->N, k->C);
    f->rmsnorm_backward(o->rms_dx, o->rms_dw, k->d, k->x, k->w, o->rms_rstd, k->N, k->C);
}

/* The same in double, from the same inputs and starting gradients. */
static double *run_f64(const norm_case_t *k)
{
    norm_out_t o;
    out_make(&o, k->N, k->C);
    size_t nc = (size_t)k->N * k->C, C = (size_t)k->C, N = (size_t)k->N;
    double *r = malloc(o.n * sizeof *r), *in = malloc((2 * nc + 2 * C) * sizeof *in);
    MSR_CHECK(r != NULL && in != NULL);
    for (size_t i = 0; i < o.n; i++)
        r[i] = o.all[i];
    double *x = in, *d = x + nc, *w = d + nc, *b = w + C;
    for (size_t i = 0; i < nc; i++)
        x[i] = k->x[i], d[i] = k->d[i];
    for (size_t c = 0; c < C; c++)
        w[c] = k->w[c], b[c] = k->b[c];
    double *ln = r, *mean = ln + nc, *rstd = mean + N, *ldx = rstd + N, *ldw = ldx + nc;
    double *ldb = ldw + C, *rms = ldb + C, *rr = rms + nc, *rdx = rr + N, *rdw = rdx + nc;
    msr_layernorm_forward_f64(ln, mean, rstd, x, w, b, k->N, k->C);
    msr_layernorm_backward_f64(ldx, ldw, ldb, d, x, w, mean, rstd, k->N, k->C);
    msr_rmsnorm_forward_f64(rms, rr, x, w, k->N, k->C);
    msr_rmsnorm_backward_f64(rdx, rdw, d, x, w, rr, k->N, k->C);
    free(o.all), free(in);
    return r;
}

static const char *const path_names[] = {"base", "avx2", "avx512"};

/* Each path the CPU has against the double kernels: at most 1e-5 of the
 * largest magnitude of each output (a sum that drops or repeats one
 * element of 400 is off by about 1e-3). */
static void test_against_double(void)
{
    static const int widths[] = {1, 7, 15, 16, 17, 33, 384, 397};
    const size_t nw = sizeof widths / sizeof widths[0];
    for (int p = MSR_NORM_BASE; p <= MSR_NORM_AVX512; p++) {
        const msr_norm_kernels_t *f = msr_norm_kernels((msr_norm_path_t)p);
        if (f == NULL)
            continue;
        for (size_t wi = 0; wi < nw; wi++) {
            norm_case_t k;
            norm_out_t o;
            case_make(&k, ROWS, widths[wi], 1, 7u + (uint32_t)wi);
            run(f, &k, &o);
            double *r = run_f64(&k);
            /* each output (its offset in all) with its own scale */
            float *parts[] = {o.ln,    o.mean, o.rstd,     o.ln_dx,  o.ln_dw,
                              o.ln_db, o.rms,  o.rms_rstd, o.rms_dx, o.rms_dw};
            size_t np = sizeof parts / sizeof parts[0];
            for (size_t q = 0; q < np; q++) {
                size_t at = (size_t)(parts[q] - o.all);
                size_t end = q + 1 < np ? (size_t)(parts[q + 1] - o.all) : o.n;
                double num = 0, den = 1e-30;
                for (size_t i = at; i < end; i++) {
                    num = fmax(num, fabs((double)o.all[i] - r[i]));
                    den = fmax(den, fabs(r[i]));
                }
                MSR_CHECK_MSG(num / den < 1e-5, "%s C %d output %zu: off by %g of %g",
                              path_names[p], widths[wi], q, num, den);
            }
            free(r), free(o.all);
            case_free(&k);
        }
    }
}

/* Every path the CPU has gives the base path's bits: every width to 70
 * (the 16-lane body and its tail at each bound and one past), 384 and
 * 385, rows starting at 4 different alignments. */
static void test_paths_bitwise(void)
{
    const msr_norm_kernels_t *base = msr_norm_kernels(MSR_NORM_BASE);
    MSR_CHECK(base != NULL);
    int compared = 0;
    for (int C = 1; C <= 72; C++) {
        int width = C <= 70 ? C : 314 + C; /* 71, 72: 385, 386 */
        for (int shift = 0; shift < SHIFTS; shift++) {
            norm_case_t k;
            norm_out_t want;
            case_make(&k, ROWS, width, shift, 100u + (uint32_t)(width * SHIFTS + shift));
            run(base, &k, &want);
            for (int p = MSR_NORM_AVX2; p <= MSR_NORM_AVX512; p++) {
                const msr_norm_kernels_t *f = msr_norm_kernels((msr_norm_path_t)p);
                if (f == NULL)
                    continue;
                norm_out_t got;
                run(f, &k, &got);
                size_t i = 0;
                while (i < want.n && memcmp(&want.all[i], &got.all[i], sizeof(float)) == 0)
                    i++;
                MSR_CHECK_MSG(i == want.n, "%s C %d shift %d: element %zu %a, base %a",
                              path_names[p], width, shift, i, (double)got.all[i],
                              (double)want.all[i]);
                free(got.all);
                compared++;
            }
            free(want.all);
            case_free(&k);
        }
    }
    /* a CPU with AVX2 compared at least that path */
    MSR_CHECK(compared > 0 || msr_norm_kernels(MSR_NORM_AVX2) == NULL);
    fprintf(stderr, "paths_bitwise: %d runs of a vector path matched the base one\n", compared);
}

/* The kernels the model calls: a row's results alone are those it gets
 * among others (a layout that cuts the rows differently changes nothing);
 * N 0 touches nothing; a constant row has mean exactly its value, the
 * output the bias, and rstd 1/sqrt(eps). */
static void test_rows_independent(void)
{
    enum { C = 40 };
    norm_case_t k;
    case_make(&k, ROWS, C, 2, 5u);
    norm_out_t all, one;
    out_make(&all, ROWS, C);
    msr_layernorm_forward(all.ln, all.mean, all.rstd, k.x, k.w, k.b, ROWS, C);
    msr_layernorm_backward(all.ln_dx, all.ln_dw, all.ln_db, k.d, k.x, k.w, all.mean, all.rstd, ROWS,
                           C);
    msr_rmsnorm_forward(all.rms, all.rms_rstd, k.x, k.w, ROWS, C);
    msr_rmsnorm_backward(all.rms_dx, all.rms_dw, k.d, k.x, k.w, all.rms_rstd, ROWS, C);
    out_make(&one, ROWS, C);
    for (int n = ROWS - 1; n >= 0; n--) { /* the other order, too */
        size_t r = (size_t)n * C;
        msr_layernorm_forward(one.ln + r, one.mean + n, one.rstd + n, k.x + r, k.w, k.b, 1, C);
        msr_layernorm_backward(one.ln_dx + r, one.ln_dw, one.ln_db, k.d + r, k.x + r, k.w,
                               one.mean + n, one.rstd + n, 1, C);
        msr_rmsnorm_forward(one.rms + r, one.rms_rstd + n, k.x + r, k.w, 1, C);
        msr_rmsnorm_backward(one.rms_dx + r, one.rms_dw, k.d + r, k.x + r, k.w, one.rms_rstd + n, 1,
                             C);
    }
    /* every per-row output bitwise; dweight and dbias sum the rows in
     * another order, so within rounding */
    float *rowwise[] = {all.ln, all.mean, all.rstd, all.ln_dx, all.rms, all.rms_rstd, all.rms_dx};
    size_t lens[] = {ROWS * C, ROWS, ROWS, ROWS * C, ROWS * C, ROWS, ROWS * C};
    for (size_t q = 0; q < sizeof lens / sizeof lens[0]; q++) {
        size_t at = (size_t)(rowwise[q] - all.all);
        MSR_CHECK_MSG(memcmp(all.all + at, one.all + at, lens[q] * sizeof(float)) == 0,
                      "output %zu differs row by row", q);
    }
    for (int c = 0; c < C; c++)
        MSR_CHECK(fabsf(all.ln_dw[c] - one.ln_dw[c]) <= 1e-6f * (1.0f + fabsf(all.ln_dw[c])));

    /* N 0: nothing written */
    norm_out_t none;
    out_make(&none, ROWS, C);
    memcpy(one.all, none.all, none.n * sizeof(float));
    msr_layernorm_forward(none.ln, none.mean, none.rstd, k.x, k.w, k.b, 0, C);
    msr_layernorm_backward(none.ln_dx, none.ln_dw, none.ln_db, k.d, k.x, k.w, none.mean, none.rstd,
                           0, C);
    msr_rmsnorm_forward(none.rms, none.rms_rstd, k.x, k.w, 0, C);
    msr_rmsnorm_backward(none.rms_dx, none.rms_dw, k.d, k.x, k.w, none.rms_rstd, 0, C);
    MSR_CHECK(memcmp(one.all, none.all, none.n * sizeof(float)) == 0);

    /* a constant row: x - mean is exactly 0 on every lane and in the tail */
    for (int c = 0; c < C; c++)
        k.x[c] = 2.5f;
    msr_layernorm_forward(all.ln, all.mean, all.rstd, k.x, k.w, k.b, 1, C);
    MSR_CHECK(all.mean[0] == 2.5f);
    MSR_CHECK(all.rstd[0] == 1.0f / sqrtf((float)MSR_LAYERNORM_EPS));
    MSR_CHECK(memcmp(all.ln, k.b, C * sizeof(float)) == 0);
    free(all.all), free(one.all), free(none.all);
    case_free(&k);
}

static const msr_test_t tests[] = {
    {"against_double", test_against_double, 20},
    {"paths_bitwise", test_paths_bitwise, 30},
    {"rows_independent", test_rows_independent, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
