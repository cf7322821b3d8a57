/* The Mixture-of-Experts MLP (model/moe.h) against a straightforward
 * reference written token by token in double: the forward (routing, the
 * capacity's drop order, the experts, the combine, the load-balancing loss)
 * and the backward against central finite differences of that reference;
 * then a MoE model (model/gpt.h) against finite differences of its own
 * loss. */
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

enum { TC = 4, TH = 4 * TC, TE = 4, TK = 2, TN = 12, TL = 1 };

/* One MoE layer's inputs and parameters, in double. */
typedef struct ref {
    msr_gpt_moe_t cfg;
    double x[TN * TC];
    double routerw[TE * TC];
    double experts[TE * (8 * TC * TC + 5 * TC)];
    double w[TN * TC]; /* the objective: sum(w * y) + aw * aux */
    double aw;
    /* what the reference's last run found */
    int choice[TN * TK], pos[TN * TK];
    int dropped;
    double y[TN * TC], aux;
} ref_t;

/* The floats of a GPT expert of C channels. */
static size_t ec_of(int C)
{
    msr_gpt_config_t cfg = {MSR_GPT_VOCAB, 6, 2, 2, C, {4, 2, 1, 1.0, 0.0}};
    return msr_moe_expert_count(&cfg);
}

static double gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* The MoE layer as its documentation says, one token at a time; returns
 * the objective. */
static double ref_run(ref_t *r)
{
    /* the capacity as documented, not the code's own function */
    double want_cap = ceil(r->cfg.capacity_factor * TN * r->cfg.top_k / r->cfg.experts);
    int cap = want_cap < 1 ? 1 : (int)want_cap, count[TE] = {0};
    double probs[TN * TE], frac[TE] = {0}, P[TE] = {0};
    size_t ec = ec_of(TC);
    for (int t = 0; t < TN; t++) {
        double mx = -1e300, sum = 0.0, *p = probs + t * TE;
        for (int e = 0; e < TE; e++) {
            p[e] = 0.0;
            for (int c = 0; c < TC; c++)
                p[e] += r->x[t * TC + c] * r->routerw[e * TC + c];
            mx = fmax(mx, p[e]);
        }
        for (int e = 0; e < TE; e++)
            sum += (p[e] = exp(p[e] - mx));
        for (int e = 0; e < TE; e++) {
            p[e] /= sum;
            P[e] += p[e] / TN;
        }
        int used[TE] = {0};
        for (int j = 0; j < TK; j++) {
            int best = -1;
            for (int e = 0; e < TE; e++)
                if (!used[e] && (best < 0 || p[e] > p[best]))
                    best = e;
            used[best] = 1;
            r->choice[t * TK + j] = best;
            frac[best] += 1.0 / (TN * TK);
        }
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
    for (int t = 0; t < TN; t++) {
        for (int c = 0; c < TC; c++)
            r->y[t * TC + c] = 0.0;
        for (int j = 0; j < TK; j++) {
            if (r->pos[t * TK + j] < 0)
                continue;
            int e = r->choice[t * TK + j];
            const double *fcw = r->experts + e * ec, *fcb = fcw + TH * TC, *pw = fcb + TH,
                         *pb = pw + TC * TH;
            double h[TH];
            for (int k = 0; k < TH; k++) {
                double a = fcb[k];
                for (int c = 0; c < TC; c++)
                    a += fcw[k * TC + c] * r->x[t * TC + c];
                h[k] = gelu(a);
            }
            for (int c = 0; c < TC; c++) {
                double o = pb[c];
                for (int k = 0; k < TH; k++)
                    o += pw[c * TH + k] * h[k];
                r->y[t * TC + c] += probs[t * TE + e] * o;
            }
        }
        for (int c = 0; c < TC; c++)
            obj += r->w[t * TC + c] * r->y[t * TC + c];
    }
    r->aux = 0.0;
    for (int e = 0; e < TE; e++)
        r->aux += r->cfg.aux_loss * TE * frac[e] * P[e];
    return obj + r->aw * r->aux;
}

static void ref_init(ref_t *r, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    /* capacity ceil(0.75 * 12 * 2 / 4) = 5 of the 24 choices: some drop */
    r->cfg = (msr_gpt_moe_t){TE, TK, 1, 0.75, 0.3};
    uint64_t n = 0;
    for (int i = 0; i < TN * TC; i++) {
        r->x[i] = msr_rng_normal(seed, 1, n++);
        r->w[i] = msr_rng_normal(seed, 1, n++);
    }
    for (int i = 0; i < TE * TC; i++) /* a strong router: uneven loads */
        r->routerw[i] = 1.5 * msr_rng_normal(seed, 1, n++);
    size_t ec = ec_of(TC);
    for (size_t i = 0; i < TE * ec; i++)
        r->experts[i] = 0.5 * msr_rng_normal(seed, 1, n++);
    r->aw = 0.7;
}

static void to_float(float *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)src[i];
}

/* The float layer on r's values (rounded to float, and r set to the
 * rounded values so both see the same inputs). */
typedef struct fl {
    msr_moe_t *moe;
    msr_gpt_config_t cfg;
    float x[TN * TC], dx[TN * TC], y[TN * TC], dy[TN * TC];
    float params[TE * TC + TE * (8 * TC * TC + 5 * TC)];
    float grads[TE * TC + TE * (8 * TC * TC + 5 * TC)];
    msr_gpt_block_params_t p, g;
} fl_t;

static void round_ref(ref_t *r)
{
    double *arrays[] = {r->x, r->routerw, r->experts, r->w};
    size_t sizes[] = {TN * TC, TE * TC, TE * ec_of(TC), TN * TC};
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < sizes[a]; i++)
            arrays[a][i] = (double)(float)arrays[a][i];
}

static void fl_make(fl_t *f, const ref_t *r)
{
    memset(f, 0, sizeof *f);
    f->cfg = (msr_gpt_config_t){MSR_GPT_VOCAB, TN, TL, 1, TC, r->cfg};
    MSR_CHECK_EQ(msr_moe_create(&f->cfg, TN, &f->moe), MSR_OK);
    to_float(f->x, r->x, TN * TC);
    to_float(f->dy, r->w, TN * TC);
    to_float(f->params, r->routerw, TE * TC);
    to_float(f->params + TE * TC, r->experts, TE * ec_of(TC));
    f->p.routerw = f->params;
    f->p.experts = f->params + TE * TC;
    f->g.routerw = f->grads;
    f->g.experts = f->grads + TE * TC;
}

/* Two float layers f and g over one reference of seed, rounded to float. */
static void fl_pair(ref_t *r, uint64_t seed, fl_t *f, fl_t *g)
{
    ref_init(r, seed);
    round_ref(r);
    fl_make(f, r);
    fl_make(g, r);
}

static double max_rel(const float *a, const double *b, size_t n)
{
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs(a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
    }
    return d / (m > 0.0 ? m : 1.0);
}

static void test_forward(void)
{
    ref_t r;
    ref_init(&r, 11);
    round_ref(&r);
    fl_t f;
    fl_make(&f, &r);
    ref_run(&r);
    double aux;
    MSR_CHECK_EQ(msr_moe_forward(f.moe, 0, &f.p, f.x, TN, f.y, &aux), MSR_OK);
    MSR_CHECK(max_rel(f.y, r.y, TN * TC) < 1e-5);
    MSR_CHECK(fabs(aux - r.aux) < 1e-6 * (1.0 + fabs(r.aux)));
    const msr_moe_stats_t *s = msr_moe_stats(f.moe, 0);
    MSR_CHECK(r.dropped > 0); /* the case is one that drops */
    MSR_CHECK_EQ(s->dropped, r.dropped);
    MSR_CHECK_EQ(s->tokens, TN);
    int64_t kept = 0;
    for (int e = 0; e < TE; e++) {
        MSR_CHECK(s->load[e] <= msr_moe_capacity(&r.cfg, TN));
        kept += s->load[e];
    }
    MSR_CHECK_EQ(kept + s->dropped, TN * TK);
    /* a token whose every choice was dropped gets zero (the residual
     * carries it); one whose choices were all kept does not */
    int all_dropped = 0;
    for (int t = 0; t < TN; t++) {
        int kept_t = 0;
        for (int j = 0; j < TK; j++)
            kept_t += r.pos[t * TK + j] >= 0;
        double norm = 0.0;
        for (int c = 0; c < TC; c++)
            norm += fabs(f.y[t * TC + c]);
        MSR_CHECK(kept_t == 0 ? norm == 0.0 : norm > 0.0);
        all_dropped += kept_t == 0;
    }
    (void)all_dropped;
    /* the drop order: choice rank first, then token index, so a second
     * choice is never kept at an expert where a first choice was dropped */
    for (int e = 0; e < TE; e++) {
        int first_dropped = 0, second_kept = 0;
        for (int t = 0; t < TN; t++) {
            first_dropped |= r.choice[t * TK] == e && r.pos[t * TK] < 0;
            second_kept |= r.choice[t * TK + 1] == e && r.pos[t * TK + 1] >= 0;
        }
        MSR_CHECK(!(first_dropped && second_kept));
    }
    msr_moe_stats_reset(f.moe);
    MSR_CHECK_EQ(msr_moe_stats(f.moe, 0)->dropped, 0);
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
    round_ref(&r);
    fl_t f;
    fl_make(&f, &r);
    double aux;
    MSR_CHECK_EQ(msr_moe_forward(f.moe, 0, &f.p, f.x, TN, f.y, &aux), MSR_OK);
    MSR_CHECK_EQ(msr_moe_backward(f.moe, 0, &f.p, &f.g, f.x, f.dy, f.dx, (float)r.aw), MSR_OK);
    check_fd("x", &r, r.x, f.dx, TN * TC);
    check_fd("routerw", &r, r.routerw, f.grads, TE * TC);
    check_fd("experts", &r, r.experts, f.grads + TE * TC, TE * ec_of(TC));
    /* backward accumulates: a second one doubles the gradients */
    float once = f.grads[0];
    MSR_CHECK_EQ(msr_moe_backward(f.moe, 0, &f.p, &f.g, f.x, f.dy, f.dx, (float)r.aw), MSR_OK);
    MSR_CHECK(fabsf(f.grads[0] - 2 * once) <= 1e-6f * (1.0f + fabsf(once)));
    msr_moe_destroy(f.moe);
}

static void test_capacity(void)
{
    msr_gpt_moe_t m = {8, 2, 1, 1.25, 0.0};
    MSR_CHECK_EQ(msr_moe_capacity(&m, 64), 20); /* ceil(1.25 * 64 * 2 / 8) */
    /* one token more: 20.3125, rounded up; one fewer: 19.6875 */
    MSR_CHECK_EQ(msr_moe_capacity(&m, 65), 21);
    MSR_CHECK_EQ(msr_moe_capacity(&m, 63), 20);
    /* the reference's 0.75 * 12 * 2 / 4 = 4.5 */
    msr_gpt_moe_t half = {TE, TK, 1, 0.75, 0.3};
    MSR_CHECK_EQ(msr_moe_capacity(&half, TN), 5);
    m.capacity_factor = 0.001;
    MSR_CHECK_EQ(msr_moe_capacity(&m, 64), 1);
}

/* A model with MoE blocks every second layer: its loss's gradient against
 * finite differences of its loss, in a few parameters of each kind. */
static void test_model(void)
{
    msr_gpt_config_t cfg = {MSR_GPT_VOCAB, 6, 2, 2, 8, {4, 2, 2, 1.0, 0.05}};
    msr_gpt_t *m;
    MSR_CHECK_EQ(msr_gpt_create(&cfg, 2, &m), MSR_OK);
    MSR_CHECK_EQ(m->num_params, msr_gpt_num_params(&cfg));
    MSR_CHECK(!msr_gpt_layer_is_moe(&cfg, 0) && msr_gpt_layer_is_moe(&cfg, 1));
    msr_gpt_init_params(m, 5);
    int in[12], tg[12];
    for (int i = 0; i < 12; i++)
        in[i] = (i * 37) % 256, tg[i] = (i * 91 + 3) % 256;
    double loss;
    MSR_CHECK_EQ(msr_gpt_forward(m, in, tg, 2, 6, NULL, &loss), MSR_OK);
    msr_gpt_zero_grad(m);
    MSR_CHECK_EQ(msr_gpt_backward(m, 1.0f / 12, NULL), MSR_OK);
    const char *names[] = {"h1.routerw", "h1.e0.fcw", "h1.e3.fcprojb", "h1.ln2w", "h0.fcw"};
    int ne;
    const msr_gpt_tensor_t *et = msr_moe_tensors(m->moe, &ne);
    MSR_CHECK_EQ(ne, 4 * 4); /* one MoE block of 4 experts */
    MSR_CHECK_EQ(msr_moe_count(m->moe), msr_moe_num_params(&cfg));
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        /* the flat buffers' tensors, or the experts' in the MoE state */
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
        MSR_CHECK(t != NULL);
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

/* Settings out of range are refused with the reason. */
static void test_refused(void)
{
    const struct {
        msr_gpt_moe_t moe;
        const char *why;
    } bad[] = {
        {{4, 5, 1, 1.0, 0.0}, "top-k 5 is not in [1, 4 experts]"},
        {{4, 0, 1, 1.0, 0.0}, "top-k 0 is not in [1, 4 experts]"},
        {{4, 2, 3, 1.0, 0.0}, "moe-every 3 is not in [1, 2 layers]"},
        {{4, 2, 1, 0.0, 0.0}, "capacity factor 0"},
        {{4, 2, 1, 1.0, -1.0}, "aux loss -1"},
        {{MSR_GPT_MAX_EXPERTS + 1, 1, 1, 1.0, 0.0}, "experts 1025 is not in [0, 1024]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msr_gpt_config_t cfg = {MSR_GPT_VOCAB, 6, 2, 2, 8, bad[i].moe};
        MSR_CHECK_STATUS(msr_gpt_config_check(&cfg), MSR_ERR_CONFIG);
        MSR_CHECK_MSG(strstr(msr_err_msg(), bad[i].why) != NULL, "'%s' does not say '%s'",
                      msr_err_msg(), bad[i].why);
    }
}

/* Every allocation of a MoE model failing in turn gives MSR_ERR_NO_MEMORY
 * and leaks nothing (the sanitizer build checks the leaks). The MoE work
 * space and store come from the CPU device, whose allocator is libmsrun's
 * (not this binary's hook): test_moe_device fails those, on a device of
 * this binary's. */
static void test_no_memory(void)
{
    msr_gpt_config_t cfg = {MSR_GPT_VOCAB, 6, 2, 2, 8, {4, 2, 1, 1.0, 0.01}};
    for (long i = 0;; i++) {
        msr_gpt_t *m = NULL;
        msr_alloc_fail_at(i);
        msr_status_t st = msr_gpt_create(&cfg, 2, &m);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        if (!failed) {
            MSR_CHECK_OK(st);
            MSR_CHECK(m->moe != NULL);
            msr_gpt_destroy(m);
            MSR_CHECK(i > 12);
            break;
        }
        MSR_CHECK_STATUS(st, MSR_ERR_NO_MEMORY);
        MSR_CHECK(m == NULL);
    }
}

/* The bounds of a MoE configuration: no experts (or a block every 0
 * layers) has no expert parameters and cannot make a MoE state, nor can
 * 0 tokens or 0 frames; one of each can. */
static void test_bounds(void)
{
    msr_gpt_config_t cfg = {MSR_GPT_VOCAB, 6, 2, 2, 8, {4, 1, 0, 1.0, 0.0}};
    MSR_CHECK_EQ(msr_moe_num_params(&cfg), 0);
    cfg.moe.every = 1;
    MSR_CHECK_EQ(msr_moe_num_params(&cfg), 2 * 4 * ec_of(8));
    cfg.moe.experts = 0;
    MSR_CHECK_EQ(msr_moe_num_params(&cfg), 0);
    msr_moe_t *moe = NULL;
    MSR_CHECK_STATUS(msr_moe_create(&cfg, 4, &moe), MSR_ERR_CONFIG);
    MSR_CHECK(moe == NULL);
    cfg.moe.experts = 1;
    /* no tokens, or no frames: refused; one of each will do */
    MSR_CHECK_STATUS(msr_moe_create(&cfg, 0, &moe), MSR_ERR_CONFIG);
    MSR_CHECK_STATUS(msr_moe_create_frames(&cfg, 4, 0, &moe), MSR_ERR_CONFIG);
    MSR_CHECK(moe == NULL);
    MSR_CHECK_EQ(msr_moe_create_frames(&cfg, 1, 1, &moe), MSR_OK);
    msr_moe_destroy(moe);
    MSR_CHECK_EQ(msr_moe_create(&cfg, 4, &moe), MSR_OK);
    MSR_CHECK_EQ(msr_moe_count(moe), 2 * ec_of(8));
    msr_moe_destroy(moe);
    /* cp: at least 1; a layout's cp group must be the size the state
     * was made for */
    moe = NULL;
    MSR_CHECK_STATUS(msr_moe_create_cp(&cfg, 4, 1, 0, &moe), MSR_ERR_CONFIG);
    MSR_CHECK(moe == NULL);
    MSR_CHECK_EQ(msr_moe_create_cp(&cfg, 4, 1, 2, &moe), MSR_OK);
    MSR_CHECK_STATUS(msr_moe_set_ep(moe, NULL), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(msr_err_msg(), "a cp group of 1 ranks for a state made for cp 2") != NULL);
    msr_moe_destroy(moe);
    MSR_CHECK_EQ(msr_moe_create_cp(&cfg, 4, 1, 1, &moe), MSR_OK);
    MSR_CHECK_EQ(msr_moe_set_ep(moe, NULL), MSR_OK);
    msr_moe_destroy(moe);
}

/* The experts' tensors: each element's index in the full model is its
 * own offset in the tensor (full_cols the tensor's columns), fcw drawn
 * with std 0.02, fcprojw with 0.02 / sqrt(2 L), the biases zero. */
static void test_init(void)
{
    msr_gpt_config_t cfg = {MSR_GPT_VOCAB, 6, 2, 2, 8, {4, 2, 1, 1.0, 0.0}};
    msr_moe_t *moe;
    MSR_CHECK_EQ(msr_moe_create(&cfg, 4, &moe), MSR_OK);
    msr_moe_init_params(moe, 5);
    int n;
    const msr_gpt_tensor_t *t = msr_moe_tensors(moe, &n);
    MSR_CHECK_EQ(n, 2 * 4 * 4);
    const float *params = msr_moe_params(moe);
    for (int k = 0; k < n; k++) {
        const char *kind = strrchr(t[k].name, '.') + 1;
        double sq = 0.0;
        for (size_t i = 0; i < t[k].count; i++) {
            MSR_CHECK_EQ(msr_gpt_tensor_full_index(&t[k], i), t[k].full_offset + i);
            sq += (double)params[t[k].offset + i] * params[t[k].offset + i];
        }
        double rms = sqrt(sq / (double)t[k].count);
        if (strcmp(kind, "fcw") == 0)
            MSR_CHECK_MSG(rms > 0.016 && rms < 0.024, "%s: rms %g", t[k].name, rms);
        else if (strcmp(kind, "fcprojw") == 0)
            MSR_CHECK_MSG(rms > 0.008 && rms < 0.012, "%s: rms %g", t[k].name, rms);
        else
            MSR_CHECK_MSG(rms == 0.0, "%s: rms %g", t[k].name, rms);
    }
    msr_moe_destroy(moe);
}

/* A layout that holds a block whose work space an earlier layout freed is
 * refused; a store that cannot be allocated leaves none (count 0). */
static void test_layout(void)
{
    msr_gpt_config_t cfg = {MSR_GPT_VOCAB, 6, 2, 2, 8, {4, 2, 1, 1.0, 0.0}};
    msr_moe_t *moe;
    MSR_CHECK_EQ(msr_moe_create(&cfg, 4, &moe), MSR_OK);
    const int second[2] = {0, 1}, first[2] = {1, 0};
    msr_moe_layout_t lay = {NULL, NULL, second, 0};
    MSR_CHECK_EQ(msr_moe_set_layout(moe, &lay), MSR_OK);
    MSR_CHECK_EQ(msr_moe_count(moe), ec_of(8) * 4);
    lay.held = first;
    MSR_CHECK_STATUS(msr_moe_set_layout(moe, &lay), MSR_ERR_CONFIG);
    lay.held = NULL;
    MSR_CHECK_STATUS(msr_moe_set_layout(moe, &lay), MSR_ERR_CONFIG);
    lay.held = second;
    msr_alloc_fail_at(0);
    msr_status_t st = msr_moe_set_layout(moe, &lay);
    msr_alloc_fail_at(-1);
    MSR_CHECK_STATUS(st, MSR_ERR_NO_MEMORY);
    MSR_CHECK_EQ(msr_moe_count(moe), 0);
    MSR_CHECK(msr_moe_params(moe) == NULL);
    msr_moe_destroy(moe);
}

/* A store the caller holds (ZeRO-3's shards): no parameters or gradients
 * of its own, the same count and table; each block's pointers are the
 * caller's, and a layout keeps it so; the initial values of any range of
 * the store are the store's own. */
static void test_external(void)
{
    msr_gpt_config_t cfg = {MSR_GPT_VOCAB, 6, 2, 2, 8, {4, 2, 1, 1.0, 0.0}};
    msr_moe_t *own, *ext;
    MSR_CHECK_EQ(msr_moe_create(&cfg, 4, &own), MSR_OK);
    MSR_CHECK_EQ(msr_moe_create(&cfg, 4, &ext), MSR_OK);
    msr_moe_init_params(own, 7);
    MSR_CHECK(msr_moe_block_params(ext, 1, 0) == msr_moe_params(ext) + ec_of(8) * 4);
    MSR_CHECK_EQ(msr_moe_store_external(ext), MSR_OK);
    MSR_CHECK(msr_moe_params(ext) == NULL && msr_moe_grads(ext) == NULL);
    MSR_CHECK_EQ(msr_moe_count(ext), msr_moe_count(own));
    MSR_CHECK(msr_moe_block_params(ext, 0, 0) == NULL && msr_moe_block_params(ext, 1, 1) == NULL);
    msr_moe_init_params(ext, 7); /* nothing to set */
    msr_moe_zero_grad(ext);
    size_t n = msr_moe_count(own), lo = ec_of(8) + 37, len = 2 * ec_of(8) + 11;
    float *buf = msr_calloc(n, sizeof *buf);
    MSR_CHECK(buf != NULL);
    msr_moe_init_range(ext, 7, lo, len, buf);
    MSR_CHECK(memcmp(buf, msr_moe_params(own) + lo, len * sizeof *buf) == 0);
    msr_moe_init_range(ext, 7, 0, n, buf);
    MSR_CHECK(memcmp(buf, msr_moe_params(own), n * sizeof *buf) == 0);
    float g[1];
    msr_moe_set_block(ext, 1, buf, g);
    MSR_CHECK(msr_moe_block_params(ext, 1, 0) == buf && msr_moe_block_params(ext, 1, 1) == g);
    MSR_CHECK(msr_moe_block_params(ext, 0, 0) == NULL);
    const int second[2] = {0, 1};
    msr_moe_layout_t lay = {NULL, NULL, second, 0};
    MSR_CHECK_EQ(msr_moe_set_layout(ext, &lay), MSR_OK);
    MSR_CHECK(msr_moe_params(ext) == NULL && msr_moe_block_params(ext, 1, 0) == NULL);
    MSR_CHECK_EQ(msr_moe_count(ext), ec_of(8) * 4);
    msr_free(buf);
    msr_moe_destroy(ext);
    msr_moe_destroy(own);
}

/* A shared layout (full recompute: every block's backward right after its
 * own forward) keeps every block's state in block 0's slot: the work
 * space of a layout holding one block, and each block's forward and
 * backward give bitwise what a slot per block gives. */
static void test_shared(void)
{
    ref_t r;
    fl_t f, g;
    fl_pair(&r, 29, &f, &g);
    msr_moe_destroy(f.moe);
    msr_moe_destroy(g.moe);
    f.cfg.layers = g.cfg.layers = 3; /* a MoE block in each */
    msr_moe_t *one;
    MSR_CHECK_EQ(msr_moe_create(&f.cfg, TN, &f.moe), MSR_OK);
    MSR_CHECK_EQ(msr_moe_create(&g.cfg, TN, &g.moe), MSR_OK);
    MSR_CHECK_EQ(msr_moe_create(&g.cfg, TN, &one), MSR_OK);
    size_t all = msr_moe_work_bytes(f.moe);
    const int second[3] = {0, 1, 0};
    msr_moe_layout_t lay = {.held = second};
    MSR_CHECK_EQ(msr_moe_set_layout(one, &lay), MSR_OK);
    lay = (msr_moe_layout_t){.shared = 1};
    MSR_CHECK_EQ(msr_moe_set_layout(g.moe, &lay), MSR_OK);
    MSR_CHECK_EQ(msr_moe_work_bytes(g.moe), msr_moe_work_bytes(one));
    MSR_CHECK(msr_moe_work_bytes(g.moe) < all);
    float x[TN * TC];
    for (int l = 0; l < 3; l++) {
        for (int i = 0; i < TN * TC; i++) /* each block its own input */
            x[i] = f.x[i] * (float)(l + 1);
        double fa, ga;
        MSR_CHECK_EQ(msr_moe_forward(f.moe, l, &f.p, x, TN, f.y, &fa), MSR_OK);
        MSR_CHECK_EQ(msr_moe_forward(g.moe, l, &g.p, x, TN, g.y, &ga), MSR_OK);
        MSR_CHECK_EQ(msr_moe_backward(f.moe, l, &f.p, &f.g, x, f.dy, f.dx, 0.5f), MSR_OK);
        MSR_CHECK_EQ(msr_moe_backward(g.moe, l, &g.p, &g.g, x, g.dy, g.dx, 0.5f), MSR_OK);
        MSR_CHECK(fa == ga);
        MSR_CHECK(memcmp(f.y, g.y, sizeof f.y) == 0);
        MSR_CHECK(memcmp(f.dx, g.dx, sizeof f.dx) == 0);
    }
    MSR_CHECK(memcmp(f.grads, g.grads, sizeof f.grads) == 0);
    msr_moe_destroy(one);
    msr_moe_destroy(g.moe);
    msr_moe_destroy(f.moe);
}

/* The load-balancing loss of a micro-batch smaller than an earlier one
 * averages over its own tokens only: the same as a fresh state's. */
static void test_aux_smaller(void)
{
    ref_t r;
    fl_t f, g;
    fl_pair(&r, 11, &f, &g);
    double aux, fresh;
    MSR_CHECK_EQ(msr_moe_forward(f.moe, 0, &f.p, f.x, TN, f.y, &aux), MSR_OK);
    MSR_CHECK_EQ(msr_moe_forward(f.moe, 0, &f.p, f.x, TN / 2, f.y, &aux), MSR_OK);
    MSR_CHECK_EQ(msr_moe_forward(g.moe, 0, &g.p, g.x, TN / 2, g.y, &fresh), MSR_OK);
    MSR_CHECK(fresh > 0.0);
    MSR_CHECK_MSG(aux == fresh, "aux %.17g after a larger batch, %.17g fresh", aux, fresh);
    msr_moe_destroy(f.moe);
    msr_moe_destroy(g.moe);
}

static const msr_test_t tests[] = {
    {"refused", test_refused, 10},         {"no_memory", test_no_memory, 10},
    {"capacity", test_capacity, 10},       {"forward", test_forward, 10},
    {"backward", test_backward, 30},       {"model", test_model, 30},
    {"bounds", test_bounds, 10},           {"init", test_init, 10},
    {"layout", test_layout, 10},           {"external", test_external, 10},
    {"aux_smaller", test_aux_smaller, 10}, {"shared", test_shared, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
