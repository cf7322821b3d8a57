/* The layer kernels: every backward against central finite differences of
 * its forward, in double (msr_*_f64, the same source as the float kernels),
 * where differences of h = 1e-5 are exact to ~1e-10; then the float kernels
 * against the double ones on the same inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "model/rng.h"
#include "tests/parallel/fd_check.h"
#include "tests/runner.h"

/* ---- helpers ---- */

typedef struct rng {
    uint64_t seed, n;
} rng_t;

static double rnd(rng_t *r)
{
    return msr_rng_normal(r->seed, 7, r->n++);
}

static double *vec(rng_t *r, size_t n, double scale)
{
    double *x = malloc(n * sizeof *x);
    MSR_CHECK(x != NULL);
    for (size_t i = 0; i < n; i++)
        x[i] = r != NULL ? scale * rnd(r) : 0.0;
    return x;
}

/* max |a - b| / max(|b|) between a float and a double array */
static double rel_diff(const float *a, const double *b, size_t n)
{
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return num / den;
}

static float *to_float(const double *x, size_t n)
{
    float *f = malloc(n * sizeof *f);
    MSR_CHECK(f != NULL);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)x[i];
    return f;
}

/* ---- encoder ---- */

enum { EB = 2, ET = 3, EC = 4, EV = 5, EMAXT = 4 };

typedef struct enc_ctx {
    int inp[EB * ET];
    double *wte, *wpe, *out, *w;
} enc_ctx_t;

static double enc_objective(void *p)
{
    enc_ctx_t *c = p;
    msr_encoder_forward_f64(c->out, c->inp, c->wte, c->wpe, EB, ET, EC);
    return fd_dot(c->out, c->w, EB * ET * EC);
}

static void test_encoder(void)
{
    rng_t r = {1, 0};
    enc_ctx_t c = {{1, 3, 1, 0, 1, 4}, NULL, NULL, NULL, NULL}; /* token 1 repeats */
    c.wte = vec(&r, EV * EC, 1);
    c.wpe = vec(&r, EMAXT * EC, 1);
    c.out = vec(NULL, EB * ET * EC, 0);
    c.w = vec(&r, EB * ET * EC, 1);
    double *dwte = vec(NULL, EV * EC, 0), *dwpe = vec(NULL, EMAXT * EC, 0);
    msr_encoder_forward_f64(c.out, c.inp, c.wte, c.wpe, EB, ET, EC);
    MSR_CHECK(c.out[(1 * ET + 2) * EC + 3] == c.wte[4 * EC + 3] + c.wpe[2 * EC + 3]);
    msr_encoder_backward_f64(dwte, dwpe, c.w, c.inp, EB, ET, EC);
    fd_check_grad("dwte", enc_objective, &c, c.wte, dwte, EV * EC);
    fd_check_grad("dwpe", enc_objective, &c, c.wpe, dwpe, EMAXT * EC);
    /* a token that never occurs and a position past T get no gradient */
    for (int k = 0; k < EC; k++) {
        MSR_CHECK(dwte[2 * EC + k] == 0.0);
        MSR_CHECK(dwpe[3 * EC + k] == 0.0);
    }
    free(dwte), free(dwpe), free(c.wte), free(c.wpe), free(c.out), free(c.w);
}

/* ---- layernorm ---- */

enum { LN = 3, LC = 7 };

typedef struct ln_ctx {
    double *inp, *weight, *bias, *out, *mean, *rstd, *w;
} ln_ctx_t;

static double ln_objective(void *p)
{
    ln_ctx_t *c = p;
    msr_layernorm_forward_f64(c->out, c->mean, c->rstd, c->inp, c->weight, c->bias, LN, LC);
    return fd_dot(c->out, c->w, LN * LC);
}

static void test_layernorm(void)
{
    rng_t r = {2, 0};
    ln_ctx_t c;
    c.inp = vec(&r, LN * LC, 2);
    for (int i = 0; i < LN * LC; i++)
        c.inp[i] += 0.5; /* a non-zero mean */
    c.weight = vec(&r, LC, 1);
    c.bias = vec(&r, LC, 1);
    c.out = vec(NULL, LN * LC, 0);
    c.mean = vec(NULL, LN, 0);
    c.rstd = vec(NULL, LN, 0);
    c.w = vec(&r, LN * LC, 1);
    double *dinp = vec(NULL, LN * LC, 0), *dw = vec(NULL, LC, 0), *db = vec(NULL, LC, 0);
    ln_objective(&c);
    /* with weight 1 and bias 0 a row comes out with mean 0 and variance ~1 */
    double *ones = vec(NULL, LC, 0), *zeros = vec(NULL, LC, 0), *o = vec(NULL, LN * LC, 0);
    for (int i = 0; i < LC; i++)
        ones[i] = 1;
    msr_layernorm_forward_f64(o, c.mean, c.rstd, c.inp, ones, zeros, LN, LC);
    double m = 0, v = 0;
    for (int i = 0; i < LC; i++)
        m += o[i];
    for (int i = 0; i < LC; i++)
        v += (o[i] - m / LC) * (o[i] - m / LC);
    MSR_CHECK(fabs(m / LC) < 1e-12);
    MSR_CHECK(fabs(v / LC - 1) < 1e-4); /* eps 1e-5 shrinks it a little */
    ln_objective(&c);
    msr_layernorm_backward_f64(dinp, dw, db, c.w, c.inp, c.weight, c.mean, c.rstd, LN, LC);
    fd_check_grad("dinp", ln_objective, &c, c.inp, dinp, LN * LC);
    fd_check_grad("dweight", ln_objective, &c, c.weight, dw, LC);
    fd_check_grad("dbias", ln_objective, &c, c.bias, db, LC);

    /* float agrees with double */
    float *fi = to_float(c.inp, LN * LC), *fw = to_float(c.weight, LC), *fb = to_float(c.bias, LC);
    float *fo = malloc(LN * LC * sizeof *fo), fm[LN], fr[LN];
    float *fdi = calloc(LN * LC, sizeof *fdi), *fdw = calloc(LC, sizeof *fdw),
          *fdb = calloc(LC, sizeof *fdb), *fd = to_float(c.w, LN * LC);
    msr_layernorm_forward(fo, fm, fr, fi, fw, fb, LN, LC);
    msr_layernorm_backward(fdi, fdw, fdb, fd, fi, fw, fm, fr, LN, LC);
    ln_objective(&c);
    MSR_CHECK(rel_diff(fo, c.out, LN * LC) < 1e-5);
    MSR_CHECK(rel_diff(fdi, dinp, LN * LC) < 1e-5);
    MSR_CHECK(rel_diff(fdw, dw, LC) < 1e-5);
    MSR_CHECK(rel_diff(fdb, db, LC) < 1e-5);
    free(fi), free(fw), free(fb), free(fo), free(fdi), free(fdw), free(fdb), free(fd);
    free(ones), free(zeros), free(o), free(dinp), free(dw), free(db);
    free(c.inp), free(c.weight), free(c.bias), free(c.out), free(c.mean), free(c.rstd), free(c.w);
}

/* ---- matmul ---- */

enum { MN = 5, MIC = 7, MOC = 3 };

typedef struct mm_ctx {
    double *inp, *weight, *bias, *out, *w;
} mm_ctx_t;

static double mm_objective(void *p)
{
    mm_ctx_t *c = p;
    msr_matmul_forward_f64(c->out, c->inp, c->weight, c->bias, MN, MIC, MOC);
    return fd_dot(c->out, c->w, MN * MOC);
}

static void test_matmul(void)
{
    rng_t r = {3, 0};
    mm_ctx_t c;
    c.inp = vec(&r, MN * MIC, 1);
    c.weight = vec(&r, MOC * MIC, 1);
    c.bias = vec(&r, MOC, 1);
    c.out = vec(NULL, MN * MOC, 0);
    c.w = vec(&r, MN * MOC, 1);
    mm_objective(&c);
    /* out[n][o] = bias[o] + sum_i inp[n][i] weight[o][i] */
    double want = c.bias[2];
    for (int i = 0; i < MIC; i++)
        want += c.inp[4 * MIC + i] * c.weight[2 * MIC + i];
    MSR_CHECK(fabs(c.out[4 * MOC + 2] - want) < 1e-12);
    double *dinp = vec(NULL, MN * MIC, 0), *dw = vec(NULL, MOC * MIC, 0), *db = vec(NULL, MOC, 0);
    msr_matmul_backward_f64(dinp, dw, db, c.w, c.inp, c.weight, MN, MIC, MOC);
    fd_check_grad("dinp", mm_objective, &c, c.inp, dinp, MN * MIC);
    fd_check_grad("dweight", mm_objective, &c, c.weight, dw, MOC * MIC);
    fd_check_grad("dbias", mm_objective, &c, c.bias, db, MOC);

    /* backward accumulates: a second call doubles every gradient */
    double *dinp2 = vec(NULL, MN * MIC, 0), *dw2 = vec(NULL, MOC * MIC, 0),
           *db2 = vec(NULL, MOC, 0);
    msr_matmul_backward_f64(dinp2, dw2, db2, c.w, c.inp, c.weight, MN, MIC, MOC);
    msr_matmul_backward_f64(dinp2, dw2, db2, c.w, c.inp, c.weight, MN, MIC, MOC);
    for (int i = 0; i < MOC * MIC; i++)
        MSR_CHECK(fabs(dw2[i] - 2 * dw[i]) <= 1e-12 * (1 + fabs(dw[i])));
    for (int i = 0; i < MN * MIC; i++)
        MSR_CHECK(fabs(dinp2[i] - 2 * dinp[i]) <= 1e-12 * (1 + fabs(dinp[i])));

    /* no bias: out is the plain product, dbias NULL is allowed */
    c.bias[0] = c.bias[1] = c.bias[2] = 0;
    double *o2 = vec(NULL, MN * MOC, 0);
    msr_matmul_forward_f64(o2, c.inp, c.weight, NULL, MN, MIC, MOC);
    mm_objective(&c);
    for (int i = 0; i < MN * MOC; i++)
        MSR_CHECK(o2[i] == c.out[i]);
    msr_matmul_backward_f64(dinp2, dw2, NULL, c.w, c.inp, c.weight, MN, MIC, MOC);

    float *fi = to_float(c.inp, MN * MIC), *fw = to_float(c.weight, MOC * MIC);
    float *fo = malloc(MN * MOC * sizeof *fo);
    msr_matmul_forward(NULL, fo, fi, fw, NULL, MN, MIC, MOC);
    MSR_CHECK(rel_diff(fo, c.out, MN * MOC) < 1e-5);
    free(fi), free(fw), free(fo), free(o2), free(dinp2), free(dw2), free(db2);
    free(dinp), free(dw), free(db), free(c.inp), free(c.weight), free(c.bias), free(c.out),
        free(c.w);
}

/* The bias gradient's column sums past their blocks of 16 columns (two
 * whole blocks and a tail of 3): each column added to its old value in row
 * order, so bitwise the plain loop's, in float and in double. */
static void test_bias_grad_blocks(void)
{
    enum { BN = 5, BIC = 2, BOC = 35 };
    rng_t r = {11, 0};
    double *dout = vec(&r, BN * BOC, 1), *db = vec(&r, BOC, 1), *want = vec(NULL, BOC, 0);
    double *inp = vec(&r, BN * BIC, 1), *w = vec(&r, BOC * BIC, 1);
    double *dinp = vec(NULL, BN * BIC, 0), *dw = vec(NULL, BOC * BIC, 0);
    float *fd = to_float(dout, BN * BOC), *fdb = to_float(db, BOC), *fi = to_float(inp, BN * BIC);
    float *fw = to_float(w, BOC * BIC), *fwant = malloc(BOC * sizeof *fwant);
    float *fdi = calloc(BN * BIC, sizeof *fdi), *fdw = calloc(BOC * BIC, sizeof *fdw);
    for (int j = 0; j < BOC; j++) {
        want[j] = db[j];
        fwant[j] = fdb[j];
        for (int n = 0; n < BN; n++) {
            want[j] += dout[n * BOC + j];
            fwant[j] += fd[n * BOC + j];
        }
    }
    msr_matmul_backward_f64(dinp, dw, db, dout, inp, w, BN, BIC, BOC);
    msr_matmul_backward(NULL, fdi, fdw, fdb, fd, fi, fw, BN, BIC, BOC);
    MSR_CHECK(memcmp(db, want, BOC * sizeof *db) == 0);
    MSR_CHECK(memcmp(fdb, fwant, BOC * sizeof *fdb) == 0);
    free(dout), free(db), free(want), free(inp), free(w), free(dinp), free(dw);
    free(fd), free(fdb), free(fi), free(fw), free(fwant), free(fdi), free(fdw);
}

/* ---- attention ---- */

enum { AB = 2, AT = 5, AC = 8, ANH = 2 };

typedef struct att_ctx {
    double *qkv, *out, *att, *w;
} att_ctx_t;

static double att_objective(void *p)
{
    att_ctx_t *c = p;
    msr_attention_forward_f64(c->out, c->att, c->qkv, AB, AT, AC, ANH);
    return fd_dot(c->out, c->w, AB * AT * AC);
}

static void test_attention(void)
{
    rng_t r = {4, 0};
    att_ctx_t c;
    c.qkv = vec(&r, AB * AT * 3 * AC, 1);
    c.out = vec(NULL, AB * AT * AC, 0);
    c.att = vec(NULL, AB * ANH * AT * AT, 0);
    c.w = vec(&r, AB * AT * AC, 1);
    att_objective(&c);
    /* every row of att is a distribution over the positions up to its own */
    for (int bh = 0; bh < AB * ANH; bh++) {
        for (int i = 0; i < AT; i++) {
            const double *row = c.att + ((size_t)bh * AT + i) * AT;
            double s = 0;
            for (int j = 0; j < AT; j++) {
                MSR_CHECK(row[j] >= 0);
                MSR_CHECK(j <= i || row[j] == 0);
                s += row[j];
            }
            MSR_CHECK(fabs(s - 1) < 1e-12);
        }
    }
    /* position 0 attends only to itself: its output is its own v */
    for (int h = 0; h < ANH; h++)
        for (int k = 0; k < AC / ANH; k++)
            MSR_CHECK(fabs(c.out[h * (AC / ANH) + k] - c.qkv[2 * AC + h * (AC / ANH) + k]) < 1e-12);
    double *dqkv = vec(NULL, AB * AT * 3 * AC, 0), *scratch = vec(NULL, AT * AT, 0);
    msr_attention_backward_f64(dqkv, scratch, c.w, c.qkv, c.att, AB, AT, AC, ANH);
    fd_check_grad("dqkv", att_objective, &c, c.qkv, dqkv, AB * AT * 3 * AC);

    /* causal: changing the last position leaves the earlier outputs alone */
    double *before = vec(NULL, AB * AT * AC, 0);
    memcpy(before, c.out, AB * AT * AC * sizeof *before);
    for (int k = 0; k < 3 * AC; k++)
        c.qkv[(AT - 1) * 3 * AC + k] += 1.0;
    att_objective(&c);
    for (int t = 0; t < AT - 1; t++)
        for (int k = 0; k < AC; k++)
            MSR_CHECK(c.out[t * AC + k] == before[t * AC + k]);
    for (int k = 0; k < 3 * AC; k++)
        c.qkv[(AT - 1) * 3 * AC + k] -= 1.0;
    att_objective(&c);

    float *fq = to_float(c.qkv, AB * AT * 3 * AC), *fo = malloc(AB * AT * AC * sizeof *fo);
    float *fa = malloc(AB * ANH * AT * AT * sizeof *fa), *fs = malloc(AT * AT * sizeof *fs);
    float *fd = to_float(c.w, AB * AT * AC), *fdq = calloc(AB * AT * 3 * AC, sizeof *fdq);
    msr_attention_forward(NULL, fo, fa, fq, AB, AT, AC, ANH);
    msr_attention_backward(NULL, fdq, fs, fd, fq, fa, AB, AT, AC, ANH);
    MSR_CHECK(rel_diff(fo, c.out, AB * AT * AC) < 1e-5);
    MSR_CHECK(rel_diff(fdq, dqkv, AB * AT * 3 * AC) < 1e-5);
    free(fq), free(fo), free(fa), free(fs), free(fd), free(fdq), free(before);
    free(dqkv), free(scratch), free(c.qkv), free(c.out), free(c.att), free(c.w);
}

/* Attention past the kernels' blocks of 64 rows (T 150: two full blocks
 * and a partial one), which skip the masked triangle block by block,
 * against the plain loops over the full causal square, in double: out,
 * att and every part of dqkv within 1e-12; the float kernels (the same
 * blocks, on cblas_sgemm) within 1e-5 of them. */
enum { BT = 150, BC = 8, BNH = 2, BHS = BC / BNH, BC3 = 3 * BC };

/* out (BT,BC) and dqkv (BT,BC3) of one sequence by the definition */
static void attention_plain(double *out, double *dqkv, const double *qkv, const double *dout)
{
    double scale = 1.0 / sqrt((double)BHS), *a = vec(NULL, BT, 0), *da = vec(NULL, BT, 0);
    memset(dqkv, 0, (size_t)BT * BC3 * sizeof *dqkv);
    for (int h = 0; h < BNH; h++) {
        for (int i = 0; i < BT; i++) {
            const double *q = qkv + (size_t)i * BC3 + h * BHS, *d = dout + (size_t)i * BC + h * BHS;
            double mx = -INFINITY, sum = 0, dot = 0;
            for (int j = 0; j <= i; j++) {
                const double *k = qkv + (size_t)j * BC3 + BC + h * BHS;
                a[j] = 0;
                for (int c = 0; c < BHS; c++)
                    a[j] += q[c] * k[c] * scale;
                mx = fmax(mx, a[j]);
            }
            for (int j = 0; j <= i; j++)
                sum += a[j] = exp(a[j] - mx);
            for (int j = 0; j <= i; j++) {
                const double *v = qkv + (size_t)j * BC3 + 2 * BC + h * BHS;
                a[j] /= sum;
                da[j] = 0;
                for (int c = 0; c < BHS; c++) {
                    out[(size_t)i * BC + h * BHS + c] += a[j] * v[c];
                    da[j] += d[c] * v[c];
                    dqkv[(size_t)j * BC3 + 2 * BC + h * BHS + c] += a[j] * d[c];
                }
                dot += a[j] * da[j];
            }
            for (int j = 0; j <= i; j++) {
                const double *k = qkv + (size_t)j * BC3 + BC + h * BHS;
                double dpre = a[j] * (da[j] - dot) * scale;
                for (int c = 0; c < BHS; c++) {
                    dqkv[(size_t)i * BC3 + h * BHS + c] += dpre * k[c];
                    dqkv[(size_t)j * BC3 + BC + h * BHS + c] += dpre * q[c];
                }
            }
        }
    }
    free(a), free(da);
}

static double max_abs_diff(const double *a, const double *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

static void test_attention_blocks(void)
{
    rng_t r = {9, 0};
    size_t nq = (size_t)BT * BC3, no = (size_t)BT * BC, na = (size_t)BNH * BT * BT;
    double *qkv = vec(&r, nq, 1), *dout = vec(&r, no, 1), *out = vec(NULL, no, 0);
    double *att = vec(NULL, na, 0), *dqkv = vec(NULL, nq, 0), *scratch = vec(NULL, BT * BT, 0);
    double *want_out = vec(NULL, no, 0), *want_dqkv = vec(NULL, nq, 0);
    attention_plain(want_out, want_dqkv, qkv, dout);
    msr_attention_forward_f64(out, att, qkv, 1, BT, BC, BNH);
    msr_attention_backward_f64(dqkv, scratch, dout, qkv, att, 1, BT, BC, BNH);
    MSR_CHECK_MSG(max_abs_diff(out, want_out, no) < 1e-12, "out %g",
                  max_abs_diff(out, want_out, no));
    MSR_CHECK_MSG(max_abs_diff(dqkv, want_dqkv, nq) < 1e-12, "dqkv %g",
                  max_abs_diff(dqkv, want_dqkv, nq));
    for (int h = 0; h < BNH; h++) /* zero above the diagonal, rows of sum 1 */
        for (int i = 0; i < BT; i++) {
            double sum = 0;
            for (int j = 0; j < BT; j++) {
                double x = att[((size_t)h * BT + i) * BT + j];
                MSR_CHECK(j <= i || x == 0);
                sum += x;
            }
            MSR_CHECK(fabs(sum - 1) < 1e-12);
        }
    float *fq = to_float(qkv, nq), *fd = to_float(dout, no), *fo = malloc(no * sizeof *fo);
    float *fa = malloc(na * sizeof *fa), *fs = malloc((size_t)BT * BT * sizeof *fs);
    float *fdq = calloc(nq, sizeof *fdq);
    msr_attention_forward(NULL, fo, fa, fq, 1, BT, BC, BNH);
    msr_attention_backward(NULL, fdq, fs, fd, fq, fa, 1, BT, BC, BNH);
    MSR_CHECK(rel_diff(fo, out, no) < 1e-5);
    MSR_CHECK(rel_diff(fdq, dqkv, nq) < 1e-5);
    free(fq), free(fd), free(fo), free(fa), free(fs), free(fdq);
    free(qkv), free(dout), free(out), free(att), free(dqkv), free(scratch), free(want_out),
        free(want_dqkv);
}

/* ---- ring attention ---- */

enum { RB = 2, RT = 16, RC = 8, RNH = 2 };

/* Global position of local position t on context-parallel rank r of cp:
 * the sequence in 2 cp chunks, rank r holding chunks r and 2 cp - 1 - r. */
static int ring_pos(int r, int cp, int t)
{
    int S = RT / (2 * cp);
    return t < S ? r * S + t : (2 * cp - 1 - r) * S + (t - S);
}

/* The context-parallel ranks' slices of the sequence and what the ring
 * computes from them, in double (l*) and in float (f*): the queries, keys
 * and values, the output's gradient, the outputs, the gradients; a rank's
 * running max and sum per batch, the log-sum-exps of every rank; scratch.
 * pos: each local position's global one. */
typedef struct ring {
    int cp, Tc, C3;
    size_t nq, no, ns;
    int *pos;
    double *lq, *ld, *lo, *lg, *mx, *sum, *delta, *scratch, *lse_all;
    float *fq, *fd, *fo, *fg, *fmx, *fsum, *flse, *fdelta, *fscr;
} ring_t;

static void ring_alloc(ring_t *rg, int cp)
{
    int Tc = RT / cp, C3 = 3 * RC;
    size_t nq = (size_t)RB * Tc * C3, no = (size_t)RB * Tc * RC, ns = (size_t)Tc * RNH;
    *rg = (ring_t){.cp = cp, .Tc = Tc, .C3 = C3, .nq = nq, .no = no, .ns = ns};
    rg->pos = malloc((size_t)cp * Tc * sizeof *rg->pos);
    rg->lq = vec(NULL, (size_t)cp * nq, 0), rg->ld = vec(NULL, (size_t)cp * no, 0);
    rg->lo = vec(NULL, (size_t)cp * no, 0), rg->lg = vec(NULL, (size_t)cp * nq, 0);
    rg->mx = vec(NULL, RB * ns, 0), rg->sum = vec(NULL, RB * ns, 0);
    rg->delta = vec(NULL, ns, 0), rg->scratch = vec(NULL, 2 * (size_t)Tc * Tc, 0);
    rg->fq = malloc((size_t)cp * nq * sizeof *rg->fq);
    rg->fd = malloc((size_t)cp * no * sizeof *rg->fd);
    rg->fo = calloc((size_t)cp * no, sizeof *rg->fo);
    rg->fg = calloc((size_t)cp * nq, sizeof *rg->fg);
    rg->fmx = malloc(RB * ns * sizeof *rg->fmx), rg->fsum = malloc(RB * ns * sizeof *rg->fsum);
    rg->flse = malloc((size_t)cp * RB * ns * sizeof *rg->flse);
    rg->fdelta = malloc(ns * sizeof *rg->fdelta);
    rg->fscr = malloc(2 * (size_t)Tc * Tc * sizeof *rg->fscr);
    rg->lse_all = vec(NULL, (size_t)cp * RB * ns, 0);
    MSR_CHECK(rg->pos != NULL && rg->fq != NULL && rg->fd != NULL && rg->fo != NULL &&
              rg->fg != NULL && rg->fmx != NULL && rg->fsum != NULL && rg->flse != NULL &&
              rg->fdelta != NULL && rg->fscr != NULL);
}

static void ring_free(ring_t *rg)
{
    free(rg->pos), free(rg->lq), free(rg->ld), free(rg->lo), free(rg->lg), free(rg->mx);
    free(rg->sum), free(rg->delta), free(rg->scratch), free(rg->fq), free(rg->fd), free(rg->fo);
    free(rg->fg), free(rg->fmx), free(rg->fsum), free(rg->flse), free(rg->fdelta), free(rg->fscr);
    free(rg->lse_all);
}

/* Each rank's queries, keys, values and output gradient: its positions'
 * rows of qkv and dout, in double and in float. */
static void ring_scatter(ring_t *rg, const double *qkv, const double *dout)
{
    int cp = rg->cp, Tc = rg->Tc, C3 = rg->C3;
    size_t nq = rg->nq, no = rg->no;
    for (int r = 0; r < cp; r++) {
        for (int t = 0; t < Tc; t++) {
            int g = rg->pos[r * Tc + t] = ring_pos(r, cp, t);
            for (int b = 0; b < RB; b++) {
                memcpy(rg->lq + r * nq + ((size_t)b * Tc + t) * C3, qkv + ((size_t)b * RT + g) * C3,
                       C3 * sizeof *rg->lq);
                memcpy(rg->ld + r * no + ((size_t)b * Tc + t) * RC,
                       dout + ((size_t)b * RT + g) * RC, RC * sizeof *rg->ld);
            }
        }
    }
    for (size_t i = 0; i < (size_t)cp * nq; i++)
        rg->fq[i] = (float)rg->lq[i];
    for (size_t i = 0; i < (size_t)cp * no; i++)
        rg->fd[i] = (float)rg->ld[i];
}

/* Forward: rank r's queries against every block in ring order, then
 * finished into its outputs and log-sum-exps. */
static void ring_forward(ring_t *rg)
{
    int cp = rg->cp, Tc = rg->Tc, C3 = rg->C3, *pos = rg->pos;
    size_t nq = rg->nq, no = rg->no, ns = rg->ns;
    for (int r = 0; r < cp; r++) {
        for (size_t i = 0; i < RB * ns; i++)
            rg->mx[i] = -INFINITY, rg->sum[i] = 0, rg->fmx[i] = -INFINITY, rg->fsum[i] = 0;
        for (int s = 0; s < cp; s++) {
            int j = (r - s + cp) % cp;
            for (int b = 0; b < RB; b++) {
                size_t qo = r * nq + (size_t)b * Tc * C3, ko = j * nq + (size_t)b * Tc * C3;
                size_t oo = r * no + (size_t)b * Tc * RC;
                msr_attention_ring_forward_f64(rg->lo + oo, rg->mx + b * ns, rg->sum + b * ns,
                                               rg->lq + qo, C3, pos + r * Tc, Tc, rg->lq + ko + RC,
                                               rg->lq + ko + 2 * RC, C3, pos + j * Tc, Tc, RC, RNH,
                                               rg->scratch);
                msr_attention_ring_forward(NULL, rg->fo + oo, rg->fmx + b * ns, rg->fsum + b * ns,
                                           rg->fq + qo, C3, pos + r * Tc, Tc, rg->fq + ko + RC,
                                           rg->fq + ko + 2 * RC, C3, pos + j * Tc, Tc, RC, RNH,
                                           rg->fscr);
            }
        }
        for (int b = 0; b < RB; b++) {
            size_t oo = r * no + (size_t)b * Tc * RC, so = ((size_t)r * RB + b) * ns;
            msr_attention_ring_finish_f64(rg->lo + oo, rg->lse_all + so, rg->mx + b * ns,
                                          rg->sum + b * ns, Tc, RC, RNH);
            msr_attention_ring_finish(rg->fo + oo, rg->flse + so, rg->fmx + b * ns,
                                      rg->fsum + b * ns, Tc, RC, RNH);
        }
    }
}

/* Backward: rank r's queries against block j, j's gradients to j. */
static void ring_backward(ring_t *rg)
{
    int cp = rg->cp, Tc = rg->Tc, C3 = rg->C3, *pos = rg->pos;
    size_t nq = rg->nq, no = rg->no, ns = rg->ns;
    double *lq = rg->lq, *lg = rg->lg;
    float *fq = rg->fq, *fg = rg->fg;
    for (int r = 0; r < cp; r++) {
        for (int b = 0; b < RB; b++) {
            size_t qo = r * nq + (size_t)b * Tc * C3, oo = r * no + (size_t)b * Tc * RC;
            size_t so = ((size_t)r * RB + b) * ns;
            msr_attention_ring_delta_f64(rg->delta, rg->ld + oo, rg->lo + oo, Tc, RC, RNH);
            msr_attention_ring_delta(rg->fdelta, rg->fd + oo, rg->fo + oo, Tc, RC, RNH);
            for (int s = 0; s < cp; s++) {
                int j = (r - s + cp) % cp;
                size_t ko = j * nq + (size_t)b * Tc * C3;
                msr_attention_ring_backward_f64(
                    lg + qo, C3, lg + ko + RC, lg + ko + 2 * RC, C3, rg->ld + oo, lq + qo,
                    lq + ko + RC, lq + ko + 2 * RC, rg->lse_all + so, rg->delta, pos + r * Tc, Tc,
                    pos + j * Tc, Tc, RC, RNH, rg->scratch);
                msr_attention_ring_backward(NULL, fg + qo, C3, fg + ko + RC, fg + ko + 2 * RC, C3,
                                            rg->fd + oo, fq + qo, fq + ko + RC, fq + ko + 2 * RC,
                                            rg->flse + so, rg->fdelta, pos + r * Tc, Tc,
                                            pos + j * Tc, Tc, RC, RNH, rg->fscr);
            }
        }
    }
}

/* The ring's outputs and gradients against the full attention's, row by
 * row at the global positions: out and dqkv in double (to rounding), the
 * float kernel's over qkv and dout in float (to 1e-6). */
static void ring_compare(const ring_t *rg, const double *qkv, const double *dout, const double *out,
                         const double *dqkv)
{
    int cp = rg->cp, Tc = rg->Tc, C3 = rg->C3;
    size_t nq = rg->nq, no = rg->no;
    double num = 0, den = 1e-30, fnum = 0, fden = 1e-30, gnum = 0, gden = 1e-30, fgnum = 0,
           fgden = 1e-30;
    float *full_fo = malloc((size_t)RB * RT * RC * sizeof *full_fo);
    float *full_fa = malloc((size_t)RB * RNH * RT * RT * sizeof *full_fa);
    float *full_fq = to_float(qkv, (size_t)RB * RT * C3),
          *full_fd = to_float(dout, (size_t)RB * RT * RC);
    float *full_fg = calloc((size_t)RB * RT * C3, sizeof *full_fg);
    float *full_fs = malloc((size_t)RT * RT * sizeof *full_fs);
    MSR_CHECK(full_fo != NULL && full_fa != NULL && full_fg != NULL && full_fs != NULL);
    msr_attention_forward(NULL, full_fo, full_fa, full_fq, RB, RT, RC, RNH);
    msr_attention_backward(NULL, full_fg, full_fs, full_fd, full_fq, full_fa, RB, RT, RC, RNH);
    for (int r = 0; r < cp; r++) {
        for (int b = 0; b < RB; b++) {
            for (int t = 0; t < Tc; t++) {
                size_t g = (size_t)b * RT + (size_t)rg->pos[r * Tc + t], l = (size_t)b * Tc + t;
                for (int c = 0; c < RC; c++) {
                    double want = out[g * RC + c], fwant = full_fo[g * RC + c];
                    num = fmax(num, fabs(rg->lo[r * no + l * RC + c] - want));
                    den = fmax(den, fabs(want));
                    fnum = fmax(fnum, fabs((double)rg->fo[r * no + l * RC + c] - fwant));
                    fden = fmax(fden, fabs(fwant));
                }
                for (int c = 0; c < C3; c++) {
                    double want = dqkv[g * C3 + c], fwant = full_fg[g * C3 + c];
                    gnum = fmax(gnum, fabs(rg->lg[r * nq + l * C3 + c] - want));
                    gden = fmax(gden, fabs(want));
                    fgnum = fmax(fgnum, fabs((double)rg->fg[r * nq + l * C3 + c] - fwant));
                    fgden = fmax(fgden, fabs(fwant));
                }
            }
        }
    }
    MSR_CHECK_MSG(num / den < 1e-12 && gnum / gden < 1e-12,
                  "cp %d, double: output %.3g, gradient %.3g relative", cp, num / den, gnum / gden);
    MSR_CHECK_MSG(fnum / fden < 1e-6 && fgnum / fgden < 1e-6,
                  "cp %d, float: output %.3g, gradient %.3g relative", cp, fnum / fden,
                  fgnum / fgden);
    free(full_fo), free(full_fa), free(full_fq), free(full_fd), free(full_fg), free(full_fs);
}

/* Every rank's queries against every rank's keys and values, block by
 * block in ring order (rank r sees r, r - 1, ...), forward and backward;
 * the outputs and the gradients (each block's dk, dv summed at its owner)
 * must be the full attention's at the same positions. In double, to
 * rounding; in float, to 1e-6 of the float kernel. */
static void ring_check(int cp, const double *qkv, const double *dout, const double *out,
                       const double *dqkv)
{
    ring_t rg;
    ring_alloc(&rg, cp);
    ring_scatter(&rg, qkv, dout);
    ring_forward(&rg);
    ring_backward(&rg);
    ring_compare(&rg, qkv, dout, out, dqkv);
    ring_free(&rg);
}

static void test_attention_ring(void)
{
    rng_t r = {9, 0};
    double *qkv = vec(&r, (size_t)RB * RT * 3 * RC, 1), *dout = vec(&r, (size_t)RB * RT * RC, 1);
    double *out = vec(NULL, (size_t)RB * RT * RC, 0),
           *att = vec(NULL, (size_t)RB * RNH * RT * RT, 0);
    double *dqkv = vec(NULL, (size_t)RB * RT * 3 * RC, 0), *scratch = vec(NULL, RT * RT, 0);
    msr_attention_forward_f64(out, att, qkv, RB, RT, RC, RNH);
    msr_attention_backward_f64(dqkv, scratch, dout, qkv, att, RB, RT, RC, RNH);
    for (int cp = 1; cp <= 8; cp *= 2)
        ring_check(cp, qkv, dout, out, dqkv);
    free(qkv), free(dout), free(out), free(att), free(dqkv), free(scratch);
}

/* ---- gelu and residual ---- */

enum { GN = 41 };

typedef struct gelu_ctx {
    double *inp, *out, *w;
} gelu_ctx_t;

static double gelu_objective(void *p)
{
    gelu_ctx_t *c = p;
    msr_gelu_forward_f64(c->out, c->inp, GN);
    return fd_dot(c->out, c->w, GN);
}

static void test_gelu(void)
{
    rng_t r = {5, 0};
    gelu_ctx_t c;
    c.inp = vec(NULL, GN, 0);
    for (int i = 0; i < GN; i++)
        c.inp[i] = -5.0 + 0.25 * i; /* [-5, 5] */
    c.out = vec(NULL, GN, 0);
    c.w = vec(&r, GN, 1);
    gelu_objective(&c);
    /* gelu(0) = 0, gelu(x) ~ x for large x, ~0 for very negative x */
    MSR_CHECK(fabs(c.out[20]) < 1e-15);
    MSR_CHECK(fabs(c.out[40] - 5.0) < 1e-5);
    MSR_CHECK(fabs(c.out[0]) < 1e-5);
    /* torch.nn.functional.gelu(torch.tensor(1.0, dtype=float64), approximate="tanh") */
    MSR_CHECK(fabs(c.out[24] - 0.8411919906082768) < 1e-12);
    double *dinp = vec(NULL, GN, 0);
    msr_gelu_backward_f64(dinp, c.inp, c.w, GN);
    fd_check_grad("dinp", gelu_objective, &c, c.inp, dinp, GN);
    float *fi = to_float(c.inp, GN), *fo = malloc(GN * sizeof *fo);
    float *fd = to_float(c.w, GN), *fdi = calloc(GN, sizeof *fdi);
    msr_gelu_forward(fo, fi, GN);
    msr_gelu_backward(fdi, fi, fd, GN);
    gelu_objective(&c); /* check_grad left out computed at a perturbed input */
    MSR_CHECK_MSG(rel_diff(fo, c.out, GN) < 1e-6, "%g", rel_diff(fo, c.out, GN));
    MSR_CHECK_MSG(rel_diff(fdi, dinp, GN) < 1e-6, "%g", rel_diff(fdi, dinp, GN));

    double a[3] = {1, 2, 3}, b[3] = {0.5, -2, 4}, o[3];
    msr_residual_forward_f64(o, a, b, 3);
    MSR_CHECK(o[0] == 1.5 && o[1] == 0 && o[2] == 7);
    free(fi), free(fo), free(fd), free(fdi), free(dinp), free(c.inp), free(c.out), free(c.w);
}

/* ---- softmax cross-entropy ---- */

enum { XN = 4, XV = 6 };

typedef struct xent_ctx {
    double *logits, *probs, *losses;
    int targets[XN];
    double dloss;
} xent_ctx_t;

static double xent_objective(void *p)
{
    xent_ctx_t *c = p;
    msr_crossentropy_forward_f64(c->losses, c->probs, c->logits, c->targets, XN, XV);
    double s = 0;
    for (int n = 0; n < XN; n++)
        s += c->dloss * c->losses[n];
    return s;
}

static void test_crossentropy(void)
{
    rng_t r = {6, 0};
    xent_ctx_t c = {NULL, NULL, NULL, {0, 5, 2, 2}, 0.37};
    c.logits = vec(&r, XN * XV, 3);
    c.probs = vec(NULL, XN * XV, 0);
    c.losses = vec(NULL, XN, 0);
    xent_objective(&c);
    for (int n = 0; n < XN; n++) {
        double z = 0, s = 0;
        for (int i = 0; i < XV; i++) {
            z += exp(c.logits[n * XV + i]);
            s += c.probs[n * XV + i];
        }
        MSR_CHECK(fabs(s - 1) < 1e-12);
        MSR_CHECK(fabs(c.losses[n] - (log(z) - c.logits[n * XV + c.targets[n]])) < 1e-12);
    }
    /* a huge logit neither overflows nor loses the loss */
    c.logits[0] = 1000.0;
    xent_objective(&c);
    MSR_CHECK(isfinite(c.losses[0]) && fabs(c.losses[0]) < 1e-9); /* target 0 has it all */
    c.logits[0] = 0.3;
    double *dlogits = vec(NULL, XN * XV, 0);
    xent_objective(&c);
    msr_crossentropy_backward_f64(dlogits, c.probs, c.targets, c.dloss, XN, XV);
    fd_check_grad("dlogits", xent_objective, &c, c.logits, dlogits, XN * XV);

    float *fl = to_float(c.logits, XN * XV), *fp = malloc(XN * XV * sizeof *fp);
    float fls[XN], *fdl = calloc(XN * XV, sizeof *fdl);
    msr_crossentropy_forward(fls, fp, fl, c.targets, XN, XV);
    msr_crossentropy_backward(fdl, fp, c.targets, (float)c.dloss, XN, XV);
    MSR_CHECK(rel_diff(fls, c.losses, XN) < 1e-6);
    MSR_CHECK(rel_diff(fdl, dlogits, XN * XV) < 1e-6);
    free(fl), free(fp), free(fdl), free(dlogits), free(c.logits), free(c.probs), free(c.losses);
}

static const msr_test_t tests[] = {
    {"encoder", test_encoder, 10},
    {"layernorm", test_layernorm, 10},
    {"matmul", test_matmul, 10},
    {"bias_grad_blocks", test_bias_grad_blocks, 10},
    {"attention", test_attention, 10},
    {"attention_blocks", test_attention_blocks, 10},
    {"attention_ring", test_attention_ring, 10},
    {"gelu", test_gelu, 10},
    {"crossentropy", test_crossentropy, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
