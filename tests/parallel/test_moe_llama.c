/* A Llama's MoE MLP (model/moe.h: Mixtral's SwiGLU experts and gates)
 * against a reference written token by token in double from the
 * documentation: the forward (softmax router, top-K, the K gates
 * renormalised, capacity drops, w2(silu(w1 x) * w3 x), no biases, the
 * load-balancing loss), its backward against central finite differences
 * of that reference, the experts' tensor table; then a Llama MoE model
 * (RMSNorm before the router) against finite differences of its loss. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "model/gpt.h"
#include "model/moe.h"
#include "model/rng.h"
#include "tests/parallel/fd_check.h"
#include "tests/runner.h"

enum { TC = 4, TF = 6, TE = 4, TK = 2, TN = 12, EC = 3 * TF * TC };

/* One MoE layer's inputs and parameters, in double; an expert is w1 (F,C),
 * w3 (F,C), w2 (C,F). */
typedef struct ref {
    msr_gpt_moe_t moe;
    double x[TN * TC];
    double routerw[TE * TC];
    double experts[TE * EC];
    double w[TN * TC]; /* the objective: sum(w * y) + aw * aux */
    double aw;
    int choice[TN * TK], pos[TN * TK];
    int dropped;
    double y[TN * TC], gate[TN * TK], aux;
} ref_t;

static double silu(double a)
{
    return a / (1.0 + exp(-a));
}

/* Token t's router: probabilities, its K choices (most probable first,
 * ties the lower index) and Mixtral's gates, p over the K chosen p's sum. */
static void ref_route(ref_t *r, int t, double *p)
{
    double mx = -1e300, sum = 0.0, chosen = 0.0;
    for (int e = 0; e < TE; e++) {
        p[e] = 0.0;
        for (int c = 0; c < TC; c++)
            p[e] += r->x[t * TC + c] * r->routerw[e * TC + c];
        mx = fmax(mx, p[e]);
    }
    for (int e = 0; e < TE; e++)
        sum += (p[e] = exp(p[e] - mx));
    for (int e = 0; e < TE; e++)
        p[e] /= sum;
    int used[TE] = {0};
    for (int j = 0; j < TK; j++) {
        int best = -1;
        for (int e = 0; e < TE; e++)
            if (!used[e] && (best < 0 || p[e] > p[best]))
                best = e;
        used[best] = 1;
        r->choice[t * TK + j] = best;
        chosen += p[best];
    }
    for (int j = 0; j < TK; j++)
        r->gate[t * TK + j] = p[r->choice[t * TK + j]] / chosen;
}

/* Expert e on token t, added to y with weight g. */
static void ref_expert(ref_t *r, int e, int t, double g)
{
    const double *w1 = r->experts + e * EC, *w3 = w1 + TF * TC, *w2 = w3 + TF * TC;
    double h[TF];
    for (int k = 0; k < TF; k++) {
        double a = 0.0, b = 0.0;
        for (int c = 0; c < TC; c++) {
            a += w1[k * TC + c] * r->x[t * TC + c];
            b += w3[k * TC + c] * r->x[t * TC + c];
        }
        h[k] = silu(a) * b;
    }
    for (int c = 0; c < TC; c++) {
        double o = 0.0;
        for (int k = 0; k < TF; k++)
            o += w2[c * TF + k] * h[k];
        r->y[t * TC + c] += g * o;
    }
}

/* The layer as documented; returns the objective. */
static double ref_run(ref_t *r)
{
    double want_cap = ceil(r->moe.capacity_factor * TN * TK / TE);
    int cap = want_cap < 1 ? 1 : (int)want_cap, count[TE] = {0};
    double probs[TN * TE], frac[TE] = {0}, P[TE] = {0};
    for (int t = 0; t < TN; t++) {
        ref_route(r, t, probs + t * TE);
        for (int e = 0; e < TE; e++)
            P[e] += probs[t * TE + e] / TN;
        for (int j = 0; j < TK; j++)
            frac[r->choice[t * TK + j]] += 1.0 / (TN * TK);
    }
    r->dropped = 0;
    for (int j = 0; j < TK; j++) {
        for (int t = 0; t < TN; t++) {
            int e = r->choice[t * TK + j];
            r->pos[t * TK + j] = count[e] < cap ? count[e]++ : -1;
            r->dropped += r->pos[t * TK + j] < 0;
        }
    }
    double obj = 0.0;
    memset(r->y, 0, sizeof r->y);
    for (int t = 0; t < TN; t++) {
        for (int j = 0; j < TK; j++)
            if (r->pos[t * TK + j] >= 0)
                ref_expert(r, r->choice[t * TK + j], t, r->gate[t * TK + j]);
        for (int c = 0; c < TC; c++)
            obj += r->w[t * TC + c] * r->y[t * TC + c];
    }
    r->aux = 0.0;
    for (int e = 0; e < TE; e++)
        r->aux += r->moe.aux_loss * TE * frac[e] * P[e];
    return obj + r->aw * r->aux;
}

/* Values rounded to float, so that the reference and the layer see the
 * same inputs. */
static double draw(uint64_t seed, uint64_t i, double scale)
{
    return (double)(float)(scale * msr_rng_normal(seed, 1, i));
}

static void ref_init(ref_t *r, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    /* capacity ceil(0.75 * 12 * 2 / 4) = 5 of the 24 choices: some drop */
    r->moe = (msr_gpt_moe_t){TE, TK, 1, 0.75, 0.3};
    uint64_t n = 0;
    for (int i = 0; i < TN * TC; i++) {
        r->x[i] = draw(seed, n++, 1.0);
        r->w[i] = draw(seed, n++, 1.0);
    }
    for (int i = 0; i < TE * TC; i++) /* a strong router: uneven loads */
        r->routerw[i] = draw(seed, n++, 1.5);
    for (int i = 0; i < TE * EC; i++)
        r->experts[i] = draw(seed, n++, 0.5);
    r->aw = 0.7;
}

/* The float layer on r's values. */
typedef struct fl {
    msr_moe_t *moe;
    msr_gpt_config_t cfg;
    float x[TN * TC], dx[TN * TC], y[TN * TC], dy[TN * TC];
    float params[TE * TC + TE * EC], grads[TE * TC + TE * EC];
    msr_gpt_block_params_t p, g;
} fl_t;

static msr_gpt_config_t llama_cfg(msr_gpt_moe_t moe, int layers)
{
    msr_gpt_config_t cfg = {MSR_GPT_VOCAB, TN, layers, 2, TC, moe};
    cfg.arch = MSR_GPT_ARCH_LLAMA;
    cfg.ffn = TF;
    cfg.kv_heads = 1;
    cfg.rope_theta = 10000.0;
    return cfg;
}

static void to_float(float *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)src[i];
}

static void fl_make(fl_t *f, const ref_t *r)
{
    memset(f, 0, sizeof *f);
    f->cfg = llama_cfg(r->moe, 1);
    MSR_CHECK_EQ(msr_moe_create(&f->cfg, TN, &f->moe), MSR_OK);
    to_float(f->x, r->x, TN * TC);
    to_float(f->dy, r->w, TN * TC);
    to_float(f->params, r->routerw, TE * TC);
    to_float(f->params + TE * TC, r->experts, TE * EC);
    f->p.routerw = f->params;
    f->p.experts = f->params + TE * TC;
    f->g.routerw = f->grads;
    f->g.experts = f->grads + TE * TC;
}

static void test_forward(void)
{
    ref_t r;
    ref_init(&r, 11);
    fl_t f;
    fl_make(&f, &r);
    ref_run(&r);
    double aux, d = 0.0, m = 0.0;
    MSR_CHECK_EQ(msr_moe_forward(f.moe, 0, &f.p, f.x, TN, f.y, &aux), MSR_OK);
    for (int i = 0; i < TN * TC; i++) {
        d = fmax(d, fabs(f.y[i] - r.y[i]));
        m = fmax(m, fabs(r.y[i]));
    }
    MSR_CHECK_MSG(d <= 1e-5 * m, "y differs by %g (scale %g)", d, m);
    MSR_CHECK(fabs(aux - r.aux) < 1e-6 * (1.0 + fabs(r.aux)));
    MSR_CHECK(r.dropped > 0); /* the case is one that drops */
    MSR_CHECK_EQ(msr_moe_stats(f.moe, 0)->dropped, r.dropped);
    /* a token whose choices were all kept: its gates sum to 1 */
    int whole = 0;
    for (int t = 0; t < TN; t++)
        whole += r.pos[t * TK] >= 0 && r.pos[t * TK + 1] >= 0;
    MSR_CHECK(whole > 0);
    msr_moe_destroy(f.moe);
}

static double ref_objective(void *r)
{
    return ref_run(r);
}

/* analytic (float) against the central difference of the reference's
 * objective in each of n elements of v, the routing unchanged. */
static void check_fd(const char *what, ref_t *r, double *v, const float *analytic, size_t n)
{
    fd_check_routed(what, ref_objective, r, r->choice, r->pos, TN * TK, v, analytic, n);
}

static void test_backward(void)
{
    ref_t r;
    ref_init(&r, 23);
    fl_t f;
    fl_make(&f, &r);
    double aux;
    MSR_CHECK_EQ(msr_moe_forward(f.moe, 0, &f.p, f.x, TN, f.y, &aux), MSR_OK);
    MSR_CHECK_EQ(msr_moe_backward(f.moe, 0, &f.p, &f.g, f.x, f.dy, f.dx, (float)r.aw), MSR_OK);
    check_fd("x", &r, r.x, f.dx, TN * TC);
    check_fd("routerw", &r, r.routerw, f.grads, TE * TC);
    for (int e = 0; e < TE; e++) { /* w1, w3 and w2 of each expert */
        double *w = r.experts + e * EC;
        const float *g = f.grads + TE * TC + e * EC;
        check_fd("w1", &r, w, g, TF * TC);
        check_fd("w3", &r, w + TF * TC, g + TF * TC, TF * TC);
        check_fd("w2", &r, w + 2 * TF * TC, g + 2 * TF * TC, TC * TF);
    }
    msr_moe_destroy(f.moe);
}

/* One choice a token: the gate is 1, so the router learns from the
 * load-balancing loss only (Mixtral's renormalisation at K = 1). */
static void test_top1(void)
{
    ref_t r;
    ref_init(&r, 5);
    fl_t f;
    fl_make(&f, &r);
    double aux;
    MSR_CHECK_EQ(msr_moe_forward(f.moe, 0, &f.p, f.x, TN, f.y, &aux), MSR_OK);
    msr_moe_destroy(f.moe);
    f.cfg.moe.top_k = 1;
    f.cfg.moe.aux_loss = 0.0;
    MSR_CHECK_EQ(msr_moe_create(&f.cfg, TN, &f.moe), MSR_OK);
    MSR_CHECK_EQ(msr_moe_forward(f.moe, 0, &f.p, f.x, TN, f.y, &aux), MSR_OK);
    MSR_CHECK_EQ(msr_moe_backward(f.moe, 0, &f.p, &f.g, f.x, f.dy, f.dx, 0.0f), MSR_OK);
    for (int i = 0; i < TE * TC; i++)
        MSR_CHECK_MSG(fabsf(f.grads[i]) < 1e-6f, "router gradient %g at K = 1", f.grads[i]);
    msr_moe_destroy(f.moe);
}

/* The store's table: w1, w3, w2 of each expert, 3FC floats, the whole
 * model's numbering; the GPT's count unchanged. */
static void test_tensors(void)
{
    msr_gpt_config_t cfg = llama_cfg((msr_gpt_moe_t){TE, TK, 2, 1.0, 0.0}, 4);
    MSR_CHECK_EQ(msr_moe_expert_count(&cfg), (size_t)EC);
    MSR_CHECK_EQ(msr_moe_num_params(&cfg), 2 * TE * (size_t)EC);
    msr_moe_t *moe;
    MSR_CHECK_EQ(msr_moe_create(&cfg, 8, &moe), MSR_OK);
    int n;
    const msr_gpt_tensor_t *t = msr_moe_tensors(moe, &n);
    MSR_CHECK_EQ(n, 2 * TE * 3);
    const char *want[] = {"h1.e0.w1", "h1.e0.w3", "h1.e0.w2", "h1.e1.w1"};
    for (int i = 0; i < 4; i++)
        MSR_CHECK_MSG(strcmp(t[i].name, want[i]) == 0, "%s, want %s", t[i].name, want[i]);
    MSR_CHECK(t[0].shape[0] == TF && t[0].shape[1] == TC && t[2].shape[0] == TC &&
              t[2].shape[1] == TF);
    MSR_CHECK_EQ(t[3].full_offset, (size_t)EC);
    MSR_CHECK_EQ(strcmp(t[n - 1].name, "h3.e3.w2"), 0);
    MSR_CHECK_EQ(t[n - 1].full_offset + t[n - 1].count, msr_moe_num_params(&cfg));
    msr_moe_init_params(moe, 3);
    double s1 = 0.0, s2 = 0.0; /* w2 scaled down by sqrt(2L), as the dense w2 */
    for (size_t i = 0; i < t[0].count; i++)
        s1 += fabs(msr_moe_params(moe)[t[0].offset + i]);
    for (size_t i = 0; i < t[2].count; i++)
        s2 += fabs(msr_moe_params(moe)[t[2].offset + i]);
    MSR_CHECK(s1 > 0.0 && s2 > 0.0 && s2 < s1);
    msr_moe_destroy(moe);
    cfg.arch = MSR_GPT_ARCH_GPT;
    MSR_CHECK_EQ(msr_moe_expert_count(&cfg), 8 * TC * TC + 5 * TC);
}

/* A Llama of two blocks, the second MoE: its loss's gradient against
 * finite differences in a few parameters of each kind (the block's RMSNorm
 * ahead of the router included). */
static void test_model(void)
{
    msr_gpt_config_t cfg = llama_cfg((msr_gpt_moe_t){TE, TK, 2, 1.0, 0.05}, 2);
    cfg.max_seq = 6;
    msr_gpt_t *m;
    MSR_CHECK_EQ(msr_gpt_create(&cfg, 2, &m), MSR_OK);
    MSR_CHECK_EQ(m->num_params, msr_gpt_num_params(&cfg));
    msr_gpt_init_params(m, 5);
    int in[12], tg[12];
    for (int i = 0; i < 12; i++)
        in[i] = (i * 37) % 256, tg[i] = (i * 91 + 3) % 256;
    double loss;
    MSR_CHECK_EQ(msr_gpt_forward(m, in, tg, 2, 6, NULL, &loss), MSR_OK);
    msr_gpt_zero_grad(m);
    MSR_CHECK_EQ(msr_gpt_backward(m, 1.0f / 12, NULL), MSR_OK);
    const char *names[] = {"h1.routerw", "h1.e0.w1", "h1.e1.w3", "h1.e3.w2", "h1.ln2w", "h0.w1"};
    int ne;
    const msr_gpt_tensor_t *et = msr_moe_tensors(m->moe, &ne);
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const msr_gpt_tensor_t *t = NULL;
        float *params = m->params, *grads = m->grads;
        for (int i = 0; i < m->num_tensors; i++)
            if (strcmp(m->tensors[i].name, names[k]) == 0)
                t = &m->tensors[i];
        for (int i = 0; i < ne && t == NULL; i++) {
            if (strcmp(et[i].name, names[k]) == 0) {
                t = &et[i];
                params = msr_moe_params(m->moe);
                grads = msr_moe_grads(m->moe);
            }
        }
        MSR_CHECK_MSG(t != NULL, "no tensor %s", names[k]);
        size_t at[] = {t->offset, t->offset + t->count / 2, t->offset + t->count - 1};
        for (int a = 0; a < 3; a++) {
            float keep = params[at[a]], h = 1e-3f;
            double up, down;
            params[at[a]] = keep + h;
            MSR_CHECK_EQ(msr_gpt_forward(m, in, tg, 2, 6, NULL, &up), MSR_OK);
            params[at[a]] = keep - h;
            MSR_CHECK_EQ(msr_gpt_forward(m, in, tg, 2, 6, NULL, &down), MSR_OK);
            params[at[a]] = keep;
            double num = (up - down) / (2.0 * (double)h), an = grads[at[a]];
            MSR_CHECK_MSG(fabs(num - an) <= 2e-2 * fabs(num) + 3e-4,
                          "%s[%zu]: analytic %g, finite differences %g", names[k],
                          at[a] - t->offset, an, num);
        }
    }
    msr_gpt_destroy(m);
}

static const msr_test_t tests[] = {
    {"forward", test_forward, 10}, {"backward", test_backward, 30}, {"top1", test_top1, 10},
    {"tensors", test_tensors, 10}, {"model", test_model, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
