/* The Llama model (model/gpt.h with arch MSR_GPT_ARCH_LLAMA): its kernels'
 * backwards against central finite differences in double, grouped-query
 * attention against multi-head attention on repeated key/value heads, the
 * parameter layout, the whole model's gradient of every tensor against
 * finite differences of an independent double forward (with kv heads
 * fewer than and equal to the heads), the hooks' order, generation's
 * cached logits against a full forward's, and the limits of the
 * configuration, each at its bound and one past. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/gpt.h"
#include "model/gpt_generate.h"
#include "model/layers.h"
#include "model/rng.h"
#include "parallel/mp.h"
#include "tests/parallel/fd_check.h"
#include "tests/runner.h"

static double *vec(uint64_t seed, size_t n, double scale)
{
    double *x = malloc(n * sizeof *x + 1);
    MSR_CHECK(x != NULL);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * msr_rng_normal(seed, 7, i);
    return x;
}

/* ---- kernels ---- */

enum { KN = 5, KC = 6, KF = 4 };

typedef struct kctx {
    double *x, *w, *out, *rstd, *dout;
} kctx_t;

static double rms_objective(void *arg)
{
    kctx_t *c = arg;
    msr_rmsnorm_forward_f64(c->out, c->rstd, c->x, c->w, KN, KC);
    return fd_dot(c->out, c->dout, KN * KC);
}

static void test_rmsnorm(void)
{
    kctx_t c = {vec(1, KN * KC, 1), vec(2, KC, 1), vec(3, KN * KC, 0), vec(4, KN, 0),
                vec(5, KN * KC, 1)};
    rms_objective(&c);
    /* a row's mean square after the norm (weights 1) is 1 - eps/(ms + eps) */
    double *ones = vec(0, KC, 0);
    for (int i = 0; i < KC; i++)
        ones[i] = 1.0;
    msr_rmsnorm_forward_f64(c.out, c.rstd, c.x, ones, KN, KC);
    double ms = fd_dot(c.x, c.x, KC) / KC;
    MSR_CHECK(fabs(fd_dot(c.out, c.out, KC) / KC - ms / (ms + MSR_RMSNORM_EPS)) < 1e-12);
    double *dx = vec(0, KN * KC, 0), *dw = vec(0, KC, 0);
    rms_objective(&c);
    msr_rmsnorm_backward_f64(dx, dw, c.dout, c.x, c.w, c.rstd, KN, KC);
    fd_check_grad("rmsnorm dx", rms_objective, &c, c.x, dx, KN * KC);
    fd_check_grad("rmsnorm dw", rms_objective, &c, c.w, dw, KC);
    free(ones), free(dx), free(dw);
    free(c.x), free(c.w), free(c.out), free(c.rstd), free(c.dout);
}

static double swiglu_objective(void *arg)
{
    kctx_t *c = arg;
    msr_swiglu_forward_f64(c->out, c->x, KN, KF);
    return fd_dot(c->out, c->dout, KN * KF);
}

static void test_swiglu(void)
{
    kctx_t c = {vec(6, KN * 2 * KF, 2), NULL, vec(0, KN * KF, 0), NULL, vec(7, KN * KF, 1)};
    swiglu_objective(&c);
    /* silu(a) * u, written out for one element */
    double a = c.x[2 * KF + 1], u = c.x[2 * KF + KF + 1];
    MSR_CHECK(fabs(c.out[KF + 1] - a / (1 + exp(-a)) * u) < 1e-15);
    double *dx = vec(0, KN * 2 * KF, 0);
    msr_swiglu_backward_f64(dx, c.x, c.dout, KN, KF);
    fd_check_grad("swiglu", swiglu_objective, &c, c.x, dx, KN * 2 * KF);
    free(dx), free(c.x), free(c.out), free(c.dout);
}

enum { RB = 2, RT = 5, RH = 3, RHS = 4, RLD = RH * RHS + 2 };

static double rope_objective(void *arg)
{
    kctx_t *c = arg;
    memcpy(c->out, c->x, RB * RT * RLD * sizeof *c->out);
    msr_rope_forward_f64(c->out, RLD, RB, RT, 0, RH, RHS, 10000.0, 1);
    return fd_dot(c->out, c->dout, RB * RT * RLD);
}

static void test_rope(void)
{
    kctx_t c = {vec(8, RB * RT * RLD, 1), NULL, vec(0, RB * RT * RLD, 0), NULL,
                vec(9, RB * RT * RLD, 1)};
    rope_objective(&c);
    /* Hugging Face's rotate_half pairing, written out: element i with
     * i + HS/2 at angle t * theta^(-2i/HS); position 0 and the columns past
     * the H heads are left alone */
    int b = 1, t = 3, h = 2, i = 1;
    const double *x = c.x + ((size_t)b * RT + t) * RLD + h * RHS;
    const double *o = c.out + ((size_t)b * RT + t) * RLD + h * RHS;
    double ang = t * pow(10000.0, -2.0 * i / RHS);
    MSR_CHECK(fabs(o[i] - (x[i] * cos(ang) - x[i + RHS / 2] * sin(ang))) < 1e-14);
    MSR_CHECK(fabs(o[i + RHS / 2] - (x[i + RHS / 2] * cos(ang) + x[i] * sin(ang))) < 1e-14);
    for (int k = 0; k < RLD; k++)
        MSR_CHECK(c.out[k] == c.x[k]); /* b 0, t 0 */
    MSR_CHECK(c.out[RLD - 1] == c.x[RLD - 1] && c.out[3 * RLD - 2] == c.x[3 * RLD - 2]);
    /* backward: the gradient turned back (dir -1) */
    double *dx = vec(0, RB * RT * RLD, 0);
    memcpy(dx, c.dout, RB * RT * RLD * sizeof *dx);
    msr_rope_forward_f64(dx, RLD, RB, RT, 0, RH, RHS, 10000.0, -1);
    fd_check_grad("rope", rope_objective, &c, c.x, dx, RB * RT * RLD);
    free(dx), free(c.x), free(c.out), free(c.dout);
}

enum { AB = 2, AT = 4, AC = 8, ANH = 4, AKV = 2 };
#define AW (AC + 2 * AKV * (AC / ANH)) /* the GQA qkv width */

typedef struct gctx {
    double *qkv, *out, *att, *w;
} gctx_t;

static double gqa_objective(void *arg)
{
    gctx_t *c = arg;
    msr_attention_gqa_forward_f64(c->out, c->att, c->qkv, AB, AT, AC, ANH, AKV);
    return fd_dot(c->out, c->w, AB * AT * AC);
}

/* Grouped-query attention is multi-head attention with each key/value
 * head repeated for its NH/KVH query heads (repeat_kv). */
static void test_attention_gqa(void)
{
    int HS = AC / ANH, G = ANH / AKV;
    gctx_t c = {vec(10, AB * AT * AW, 1), vec(0, AB * AT * AC, 0), vec(0, AB * ANH * AT * AT, 0),
                vec(11, AB * AT * AC, 1)};
    gqa_objective(&c);
    double *full = vec(0, AB * AT * 3 * AC, 0), *out = vec(0, AB * AT * AC, 0);
    double *att = vec(0, AB * ANH * AT * AT, 0);
    for (int n = 0; n < AB * AT; n++) {
        const double *src = c.qkv + (size_t)n * AW;
        double *dst = full + (size_t)n * 3 * AC;
        memcpy(dst, src, AC * sizeof *dst);
        for (int h = 0; h < ANH; h++) {
            memcpy(dst + AC + h * HS, src + AC + (h / G) * HS, HS * sizeof *dst);
            memcpy(dst + 2 * AC + h * HS, src + AC + AKV * HS + (h / G) * HS, HS * sizeof *dst);
        }
    }
    msr_attention_forward_f64(out, att, full, AB, AT, AC, ANH);
    for (int i = 0; i < AB * AT * AC; i++)
        MSR_CHECK(fabs(out[i] - c.out[i]) < 1e-14);
    double *dqkv = vec(0, AB * AT * AW, 0), *scratch = vec(0, AT * AT, 0);
    msr_attention_gqa_backward_f64(dqkv, scratch, c.w, c.qkv, c.att, AB, AT, AC, ANH, AKV);
    fd_check_grad("gqa dqkv", gqa_objective, &c, c.qkv, dqkv, AB * AT * AW);
    /* the float kernel agrees with the double one */
    float *fq = malloc(AB * AT * AW * sizeof *fq), *fo = malloc(AB * AT * AC * sizeof *fo);
    float *fa = malloc(AB * ANH * AT * AT * sizeof *fa), *fs = malloc(AT * AT * sizeof *fs);
    float *fd = malloc(AB * AT * AC * sizeof *fd), *fdq = calloc(AB * AT * AW, sizeof *fdq);
    for (int i = 0; i < AB * AT * AW; i++)
        fq[i] = (float)c.qkv[i];
    for (int i = 0; i < AB * AT * AC; i++)
        fd[i] = (float)c.w[i];
    msr_attention_gqa_forward(NULL, fo, fa, fq, AB, AT, AC, ANH, AKV);
    msr_attention_gqa_backward(NULL, fdq, fs, fd, fq, fa, AB, AT, AC, ANH, AKV);
    for (int i = 0; i < AB * AT * AC; i++)
        MSR_CHECK(fabs(fo[i] - c.out[i]) < 1e-5);
    for (int i = 0; i < AB * AT * AW; i++)
        MSR_CHECK(fabs(fdq[i] - dqkv[i]) < 1e-5 * (1 + fabs(dqkv[i])));
    free(fq), free(fo), free(fa), free(fs), free(fd), free(fdq);
    free(full), free(out), free(att), free(dqkv), free(scratch);
    free(c.qkv), free(c.out), free(c.att), free(c.w);
}

/* ---- the model ---- */

enum { V = 64, MAXT = 6, L = 2, NH = 4, C = 16, F = 24, TB = 2 };

static msr_gpt_config_t llama_config(int kv_heads)
{
    msr_gpt_config_t cfg = {V, MAXT, L, NH, C};
    cfg.arch = MSR_GPT_ARCH_LLAMA;
    cfg.ffn = F;
    cfg.kv_heads = kv_heads;
    cfg.rope_theta = 10000.0;
    return cfg;
}

static msr_gpt_t *llama_model(int kv_heads, uint64_t seed)
{
    msr_gpt_config_t cfg = llama_config(kv_heads);
    msr_gpt_t *m = NULL;
    MSR_CHECK_OK(msr_gpt_create(&cfg, TB, &m));
    msr_gpt_init_params(m, seed);
    return m;
}

static void test_layout(void)
{
    msr_gpt_t *m = llama_model(2, 1);
    size_t KVC = 2 * (C / NH), blk = 2 * C * C + 2 * KVC * C + 2 * C + 3 * (size_t)F * C;
    MSR_CHECK_EQ(m->num_params, 2 * V * C + C + L * blk);
    msr_gpt_config_t cfg = llama_config(2);
    MSR_CHECK_EQ(msr_gpt_num_params(&cfg), m->num_params);
    MSR_CHECK_EQ(m->num_tensors, 1 + 9 * L + 2);
    MSR_CHECK_EQ(m->num_segments, L + 2);
    static const char *const names[] = {"wte",   "h0.ln1w", "h0.wq", "h0.wk", "h0.wv",
                                        "h0.wo", "h0.ln2w", "h0.w1", "h0.w3", "h0.w2"};
    for (int k = 0; k < 10; k++)
        MSR_CHECK_STR(m->tensors[k].name, names[k]);
    MSR_CHECK_STR(m->tensors[m->num_tensors - 2].name, "lnfw");
    MSR_CHECK_STR(m->tensors[m->num_tensors - 1].name, "lm_head");
    MSR_CHECK_EQ(m->tensors[m->num_tensors - 1].segment, L + 1);
    MSR_CHECK_EQ(m->tensors[3].shape[0], (int)KVC);
    MSR_CHECK_EQ(m->tensors[9].shape[1], F);
    size_t off = 0;
    for (int k = 0; k < m->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &m->tensors[k];
        MSR_CHECK_EQ(t->offset, off);
        MSR_CHECK_EQ(t->decay, t->ndim == 2);
        MSR_CHECK_EQ(msr_gpt_tensor_full_index(t, t->count - 1), t->offset + t->count - 1);
        const msr_gpt_segment_t *s = &m->segments[t->segment];
        MSR_CHECK(t->offset >= s->offset && t->offset + t->count <= s->offset + s->count);
        off += t->count;
    }
    MSR_CHECK_EQ(off, m->num_params);
    /* the block's pointers: qkvw spans wq, wk, wv; fcw spans w1, w3 */
    msr_gpt_block_params_t p;
    msr_gpt_block_point_layer(&m->cfg, 1, m->segments[2].params, &p);
    MSR_CHECK(p.ln1w == m->params + m->tensors[10].offset);
    MSR_CHECK(p.qkvw == m->params + m->tensors[11].offset);
    MSR_CHECK(p.attprojw == m->params + m->tensors[14].offset);
    MSR_CHECK(p.ln2w == m->params + m->tensors[15].offset);
    MSR_CHECK(p.fcw == m->params + m->tensors[16].offset);
    MSR_CHECK(p.fcprojw == m->params + m->tensors[18].offset);
    MSR_CHECK(p.ln1b == NULL && p.qkvb == NULL && p.fcb == NULL && p.fcprojb == NULL);
    /* initialisation: norms 1, wo and w2 N(0, 0.02/sqrt(2L)), the rest N(0, 0.02) */
    for (int k = 0; k < m->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &m->tensors[k];
        double s, sd = fd_tensor_sd(m, k, &s);
        const char *kind = strchr(t->name, '.') ? strchr(t->name, '.') + 1 : t->name;
        if (t->ndim == 1)
            MSR_CHECK_MSG(s == (double)t->count && sd == 0.0, "%s", t->name);
        else if (strcmp(kind, "wo") == 0 || strcmp(kind, "w2") == 0)
            MSR_CHECK_MSG(fabs(sd - 0.01) < 0.002, "%s sd %g", t->name, sd);
        else
            MSR_CHECK_MSG(fabs(sd - 0.02) < 0.004, "%s sd %g", t->name, sd);
    }
    msr_gpt_destroy(m);
}

/* The loss in double of a Llama with kv heads KVH, from parameters p laid
 * out as gpt.h documents (offsets computed here), with rotary positions
 * and the repetition of key/value heads written here and multi-head
 * attention on the repeated heads. */
static double ref_loss(const double *p, int KVH, const int *inp, const int *tgt, int B, int T)
{
    int N = B * T, HS = C / NH, KVC = KVH * HS, W = C + 2 * KVC, G = NH / KVH;
    double *x = calloc((size_t)N * C, sizeof *x), *ln = calloc((size_t)N * C, sizeof *ln);
    double *rstd = calloc(N, sizeof *rstd), *qkv = calloc((size_t)N * W, sizeof *qkv);
    double *full = calloc((size_t)N * 3 * C, sizeof *full), *y = calloc((size_t)N * C, sizeof *y);
    double *att = calloc((size_t)B * NH * T * T, sizeof *att);
    double *proj = calloc((size_t)N * C, sizeof *proj), *h = calloc((size_t)N * 2 * F, sizeof *h);
    double *act = calloc((size_t)N * F, sizeof *act),
           *logits = calloc((size_t)N * V, sizeof *logits);
    const double *wte = p, *q = p + V * C;
    for (int n = 0; n < N; n++)
        memcpy(x + (size_t)n * C, wte + (size_t)inp[n] * C, C * sizeof *x);
    for (int l = 0; l < L; l++) {
        const double *ln1w = q, *wqkv = ln1w + C, *wo = wqkv + (size_t)W * C, *ln2w = wo + C * C;
        const double *w13 = ln2w + C, *w2 = w13 + 2 * F * C;
        q = w2 + C * F;
        msr_rmsnorm_forward_f64(ln, rstd, x, ln1w, N, C);
        msr_matmul_forward_f64(qkv, ln, wqkv, NULL, N, C, W);
        for (int n = 0; n < N; n++) { /* rotate q and k heads, then repeat k, v */
            int t = n % T;
            double *r = qkv + (size_t)n * W, *f = full + (size_t)n * 3 * C;
            for (int hd = 0; hd < NH + KVH; hd++) {
                double *e = r + hd * HS;
                for (int i = 0; i < HS / 2; i++) {
                    double a = t / pow(10000.0, 2.0 * i / HS), x1 = e[i], x2 = e[i + HS / 2];
                    e[i] = x1 * cos(a) - x2 * sin(a);
                    e[i + HS / 2] = x2 * cos(a) + x1 * sin(a);
                }
            }
            memcpy(f, r, C * sizeof *f);
            for (int hd = 0; hd < NH; hd++) {
                memcpy(f + C + hd * HS, r + C + (hd / G) * HS, HS * sizeof *f);
                memcpy(f + 2 * C + hd * HS, r + C + KVC + (hd / G) * HS, HS * sizeof *f);
            }
        }
        msr_attention_forward_f64(y, att, full, B, T, C, NH);
        msr_matmul_forward_f64(proj, y, wo, NULL, N, C, C);
        for (int i = 0; i < N * C; i++)
            x[i] += proj[i];
        msr_rmsnorm_forward_f64(ln, rstd, x, ln2w, N, C);
        msr_matmul_forward_f64(h, ln, w13, NULL, N, C, 2 * F);
        for (int n = 0; n < N; n++)
            for (int i = 0; i < F; i++) {
                double g = h[(size_t)n * 2 * F + i], u = h[(size_t)n * 2 * F + F + i];
                act[(size_t)n * F + i] = g / (1 + exp(-g)) * u;
            }
        msr_matmul_forward_f64(proj, act, w2, NULL, N, F, C);
        for (int i = 0; i < N * C; i++)
            x[i] += proj[i];
    }
    msr_rmsnorm_forward_f64(ln, rstd, x, q, N, C);
    msr_matmul_forward_f64(logits, ln, q + C, NULL, N, C, V);
    double loss = fd_mean_crossentropy(logits, tgt, N, V);
    free(x), free(ln), free(rstd), free(qkv), free(full), free(y), free(att), free(proj);
    free(h), free(act), free(logits);
    return loss;
}

static void batch(uint64_t seed, int *inp, int *tgt, int n)
{
    for (int i = 0; i < n; i++) {
        inp[i] = (int)msr_rng_below(msr_rng_u64(seed, 1, (uint64_t)i), V);
        tgt[i] = (int)msr_rng_below(msr_rng_u64(seed, 2, (uint64_t)i), V);
    }
}

/* ref_loss's arguments but the parameters, for fd_check_model_grad */
typedef struct ref_args {
    int kv_heads;
    const int *inp, *tgt;
    int B, T;
} ref_args_t;

static double ref_loss_at(void *arg, const double *p)
{
    const ref_args_t *a = arg;
    return ref_loss(p, a->kv_heads, a->inp, a->tgt, a->B, a->T);
}

/* Every tensor's gradient (its largest element and a spread of others)
 * against central differences of ref_loss. */
static void check_model_gradient(int kv_heads)
{
    msr_gpt_t *m = llama_model(kv_heads, 3);
    for (size_t i = 0; i < m->num_params; i++) /* bigger than the init: visible gradients */
        m->params[i] += 0.1f * (float)msr_rng_normal(99, 0, i);
    int T = MAXT, N = TB * T, inp[TB * MAXT], tgt[TB * MAXT];
    batch(5, inp, tgt, N);
    ref_args_t args = {kv_heads, inp, tgt, TB, T};
    char what[16];
    snprintf(what, sizeof what, "kv %d: ", kv_heads);
    fd_check_model_grad(what, m, inp, tgt, TB, T, ref_loss_at, &args);
    msr_gpt_destroy(m);
}

static void test_gradient_gqa(void)
{
    check_model_gradient(2); /* two query heads per key/value head */
    check_model_gradient(1); /* multi-query */
}

static void test_gradient_mha(void)
{
    check_model_gradient(NH);
}

/* ---- hooks ---- */

typedef struct recorder {
    int events[64][3]; /* kind (0 acquire, 1 release, 2 ready), segment, pass */
    int n;
} recorder_t;

static msr_status_t rec(recorder_t *r, int kind, int seg, int pass)
{
    MSR_CHECK(r->n < 64);
    r->events[r->n][0] = kind, r->events[r->n][1] = seg, r->events[r->n++][2] = pass;
    return MSR_OK;
}

static msr_status_t rec_acquire(void *arg, msr_gpt_t *m, int seg, msr_gpt_pass_t pass)
{
    (void)m;
    return rec(arg, 0, seg, pass);
}

static msr_status_t rec_release(void *arg, msr_gpt_t *m, int seg, msr_gpt_pass_t pass)
{
    (void)m;
    return rec(arg, 1, seg, pass);
}

static msr_status_t rec_ready(void *arg, msr_gpt_t *m, int seg)
{
    (void)m;
    return rec(arg, 2, seg, 1);
}

/* The head is in segment L+1, untied (layout/'s ZeRO-3 table for an
 * untied head): forward 0, 1..L, L+1; backward L+1, L..1, 0, each
 * declared ready after its visit; no visit to 0 for the head. */
static void test_hooks(void)
{
    msr_gpt_t *m = llama_model(2, 2);
    recorder_t r = {.n = 0};
    msr_gpt_hooks_t hooks = {&r, rec_acquire, rec_release, rec_ready, NULL};
    int inp[TB * MAXT], tgt[TB * MAXT];
    batch(7, inp, tgt, TB * MAXT);
    double loss;
    MSR_CHECK_OK(msr_gpt_forward(m, inp, tgt, TB, MAXT, &hooks, &loss));
    MSR_CHECK_EQ(r.n, 2 * (L + 2));
    for (int s = 0; s < L + 2; s++) {
        MSR_CHECK(r.events[2 * s][0] == 0 && r.events[2 * s][1] == s && r.events[2 * s][2] == 0);
        MSR_CHECK(r.events[2 * s + 1][0] == 1 && r.events[2 * s + 1][1] == s);
    }
    r.n = 0;
    MSR_CHECK_OK(msr_gpt_backward(m, 1.0f / (TB * MAXT), &hooks));
    MSR_CHECK_EQ(r.n, 3 * (L + 2));
    MSR_CHECK(r.events[0][2] == 1); /* the backward pass */
    for (int i = 0; i < L + 2; i++) {
        int s = L + 1 - i, e = 3 * i;
        for (int k = 0; k < 3; k++)
            MSR_CHECK_MSG(r.events[e + k][0] == k && r.events[e + k][1] == s, "event %d: %d %d",
                          e + k, r.events[e + k][0], r.events[e + k][1]);
    }
    msr_gpt_destroy(m);
}

/* Generation's key/value cache (model/gpt_generate.h): the logits of one
 * position at a time, rotated at its own position, against one full
 * forward's at every position, 1e-5 of the row's largest; with kv heads
 * below the heads and equal to them. */
static void test_generate_cached(void)
{
    for (int kv = 1; kv <= NH; kv *= 4) {
        msr_gpt_t *m = llama_model(kv, 12);
        for (size_t i = 0; i < m->num_params; i++) /* logits of some size */
            m->params[i] += 0.1f * (float)msr_rng_normal(98, 0, i);
        int tok[MAXT], tgt[MAXT];
        batch(9, tok, tgt, MAXT);
        MSR_CHECK_OK(msr_gpt_forward(m, tok, NULL, 1, MAXT, NULL, NULL));
        msr_gpt_gen_t *g = NULL;
        MSR_CHECK_OK(msr_gpt_gen_create(m, &g));
        for (int t = 0; t < MAXT; t++) {
            const float *lg = NULL, *full = m->acts.logits + (size_t)t * V;
            MSR_CHECK_OK(msr_gpt_gen_step(g, tok[t], &lg));
            double big = 0.0;
            for (int v = 0; v < V; v++)
                big = fmax(big, fabs(full[v]));
            MSR_CHECK(big > 0.1);
            for (int v = 0; v < V; v++)
                MSR_CHECK_MSG(fabs((double)lg[v] - full[v]) <= 1e-5 * big,
                              "kv %d position %d token %d: %g vs %g", kv, t, v, (double)lg[v],
                              (double)full[v]);
        }
        msr_gpt_gen_destroy(g);
        msr_gpt_destroy(m);
    }
}

/* ---- limits ---- */

static void check_refused(const msr_gpt_config_t *cfg, const char *what)
{
    msr_err_clear();
    MSR_CHECK_STATUS(msr_gpt_config_check(cfg), MSR_ERR_CONFIG);
    MSR_CHECK_MSG(strstr(msr_err_msg(), what) != NULL, "'%s' does not say '%s'", msr_err_msg(),
                  what);
}

static void test_limits(void)
{
    msr_gpt_config_t cfg = llama_config(NH);
    MSR_CHECK_OK(msr_gpt_config_check(&cfg));
    cfg.kv_heads = NH + 1;
    check_refused(&cfg, "kv heads");
    cfg.kv_heads = 1;
    MSR_CHECK_OK(msr_gpt_config_check(&cfg));
    cfg.kv_heads = 0;
    check_refused(&cfg, "kv heads");
    cfg.kv_heads = 3; /* does not divide 4 */
    check_refused(&cfg, "do not divide");
    cfg.kv_heads = 2;
    cfg.ffn = 1;
    MSR_CHECK_OK(msr_gpt_config_check(&cfg));
    cfg.ffn = 0;
    check_refused(&cfg, "ffn 0");
    cfg.ffn = 4 * 16384;
    MSR_CHECK_OK(msr_gpt_config_check(&cfg));
    cfg.ffn = 4 * 16384 + 1;
    check_refused(&cfg, "ffn");
    cfg.ffn = F;
    cfg.rope_theta = 1e12;
    MSR_CHECK_OK(msr_gpt_config_check(&cfg));
    cfg.rope_theta = 1.0000001e12;
    check_refused(&cfg, "rope theta");
    cfg.rope_theta = 1.0;
    check_refused(&cfg, "rope theta");
    cfg.rope_theta = 10000.0;
    cfg.heads = 8; /* head width 2: the smallest even */
    cfg.kv_heads = 8;
    MSR_CHECK_OK(msr_gpt_config_check(&cfg));
    cfg.heads = 16; /* width 1: odd */
    cfg.kv_heads = 16;
    check_refused(&cfg, "odd");
    cfg = llama_config(2);
    cfg.moe = (msr_gpt_moe_t){4, 4, 1, 1.25, 0.01}; /* Mixtral's experts, top-k at E */
    MSR_CHECK_OK(msr_gpt_config_check(&cfg));
    cfg.moe.top_k = 5;
    check_refused(&cfg, "top-k 5 is not in [1, 4 experts]");
    cfg = llama_config(2);
    cfg.arch = (msr_gpt_arch_t)2;
    check_refused(&cfg, "architecture 2");
    /* a part: kv heads (2) divide among tp 2 and are replicated over tp 4
     * (2 ranks each, each rank one head); pp and the whole model run */
    cfg = llama_config(2);
    msr_gpt_part_t whole = {1, 0, 1, 0, 1, NULL}, tp = {2, 0, 1, 0, 1, NULL},
                   tp4 = {4, 0, 1, 0, 1, NULL}, pp = {1, 0, 2, 0, 1, NULL};
    MSR_CHECK_OK(msr_gpt_part_check(&cfg, &whole));
    MSR_CHECK_OK(msr_gpt_part_check(&cfg, &tp));
    MSR_CHECK_OK(msr_gpt_part_check(&cfg, &tp4));
    MSR_CHECK_EQ(msr_gpt_kv_heads_local(&cfg, 2), 1);
    MSR_CHECK_EQ(msr_gpt_kv_heads_local(&cfg, 4), 1);
    /* 12 heads on tp 4: kv heads 4 split, 2 replicated (2 ranks each), 3
     * and 6 (neither dividing tp 4 nor divided by it) refused */
    msr_gpt_config_t c12 = cfg;
    c12.heads = 12;
    c12.channels = 24;
    for (int kv = 1; kv <= 12; kv++) {
        if (12 % kv != 0)
            continue;
        c12.kv_heads = kv;
        msr_err_clear();
        if (kv % 4 == 0 || 4 % kv == 0) {
            MSR_CHECK_OK(msr_gpt_part_check(&c12, &tp4));
            MSR_CHECK_EQ(msr_gpt_kv_heads_local(&c12, 4), kv >= 4 ? kv / 4 : 1);
            continue;
        }
        MSR_CHECK_STATUS(msr_gpt_part_check(&c12, &tp4), MSR_ERR_CONFIG);
        MSR_CHECK(strstr(msr_err_msg(), "kv heads neither divide among tp 4") != NULL);
    }
    cfg.ffn = 25;
    MSR_CHECK_STATUS(msr_gpt_part_check(&cfg, &tp), MSR_ERR_CONFIG);
    cfg.ffn = F;
    MSR_CHECK_OK(msr_gpt_part_check(&cfg, &pp));
    /* the runtime: pp 2 and tp 2 run; cp runs while the sequence (6)
     * divides into 2 x cp chunks: cp 3 (chunks of one position) at the
     * bound, cp 4 one past it and cp 2 (not dividing) are refused */
    msr_mp_config_t mc = {.schedule = MSR_MP_1F1B, .chunks = 1, .micro_batch = 1, .micros = 2};
    MSR_CHECK_OK(msr_mp_check(&cfg, &mc, 2, 2));
    mc.cp = 3;
    MSR_CHECK_OK(msr_mp_check(&cfg, &mc, 1, 1));
    for (int cp = 4; cp >= 2; cp -= 2) {
        mc.cp = cp;
        msr_err_clear();
        MSR_CHECK_STATUS(msr_mp_check(&cfg, &mc, 1, 1), MSR_ERR_CONFIG);
        MSR_CHECK(strstr(msr_err_msg(), "does not divide into 2 x cp") != NULL);
    }
    /* the GPT ignores the Llama's fields */
    msr_gpt_config_t gpt = {V, MAXT, L, NH, C};
    gpt.ffn = -5;
    gpt.kv_heads = 3;
    MSR_CHECK_OK(msr_gpt_config_check(&gpt));
}

/* A pipeline stage's tensors (pp 2, uneven and even splits, virtual
 * stages): the first stage holds wte and no head, the last lnfw and
 * lm_head and no wte, and every tensor sits where the whole model's of
 * the same name does, so a checkpoint's logical tensors are the same. */
static void test_pp_parts(void)
{
    msr_gpt_config_t cfg = llama_config(2);
    cfg.layers = 4;
    msr_gpt_t *whole, *part;
    MSR_CHECK_OK(msr_gpt_create_part(&cfg, &(msr_gpt_part_t){1, 0, 1, 0, 1, NULL}, 0, &whole));
    const int uneven[] = {1, 3}, one_each[] = {1, 1, 1, 1};
    const struct {
        const int *split;
        int chunks;
    } cases[] = {{NULL, 1}, {uneven, 1}, {one_each, 2}, {NULL, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int held[64] = {0};
        for (int r = 0; r < 2; r++) {
            msr_gpt_part_t pt = {1, 0, 2, r, cases[c].chunks, cases[c].split};
            MSR_CHECK_OK(msr_gpt_create_part(&cfg, &pt, 0, &part));
            MSR_CHECK((part->seg_embed >= 0) == (r == 0));
            MSR_CHECK((part->seg_lnf >= 0) == (r == 1));
            for (int k = 0; k < part->num_tensors; k++) {
                const msr_gpt_tensor_t *t = &part->tensors[k];
                int found = 0;
                for (int w = 0; w < whole->num_tensors; w++) {
                    const msr_gpt_tensor_t *u = &whole->tensors[w];
                    if (strcmp(u->name, t->name) != 0)
                        continue;
                    found = 1;
                    held[w]++;
                    MSR_CHECK(t->full_offset == u->offset && t->count == u->count);
                }
                MSR_CHECK(found);
            }
            msr_gpt_destroy(part);
        }
        for (int w = 0; w < whole->num_tensors; w++)
            MSR_CHECK(held[w] == 1); /* every tensor on exactly one stage */
    }
    msr_gpt_destroy(whole);
}

static const msr_test_t tests[] = {
    {"rmsnorm", test_rmsnorm, 10},
    {"swiglu", test_swiglu, 10},
    {"rope", test_rope, 10},
    {"attention_gqa", test_attention_gqa, 10},
    {"layout", test_layout, 10},
    {"gradient_gqa", test_gradient_gqa, 60},
    {"gradient_mha", test_gradient_mha, 60},
    {"hooks", test_hooks, 10},
    {"generate_cached", test_generate_cached, 10},
    {"limits", test_limits, 10},
    {"pp_parts", test_pp_parts, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
