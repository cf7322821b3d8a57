/* The whole model: its parameter layout, initialisation, the gradient of
 * the loss against finite differences (of an independent double-precision
 * forward built from the f64 kernels), the hooks' order and contracts, and
 * refusals of bad input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/alloc.h"
#include "layout/layout.h"
#include "model/gpt.h"
#include "model/layers.h"
#include "model/rng.h"
#include "tests/parallel/fd_check.h"
#include "tests/runner.h"

static const msr_gpt_config_t tiny = {MSR_GPT_VOCAB, 8, 2, 2, 16}; /* V maxT L NH C */
enum { TB = 2 };

static msr_gpt_t *tiny_model(uint64_t seed)
{
    msr_gpt_t *m = NULL;
    MSR_CHECK_OK(msr_gpt_create(&tiny, TB, &m));
    msr_gpt_init_params(m, seed);
    return m;
}

static void tiny_batch(uint64_t seed, int *inp, int *tgt, int n)
{
    for (int i = 0; i < n; i++) {
        inp[i] = (int)msr_rng_below(msr_rng_u64(seed, 1, (uint64_t)i), MSR_GPT_VOCAB);
        tgt[i] = (int)msr_rng_below(msr_rng_u64(seed, 2, (uint64_t)i), MSR_GPT_VOCAB);
    }
}

/* ---- layout ---- */

static void test_layout(void)
{
    msr_gpt_t *m = tiny_model(1);
    size_t C = 16, V = 256, maxT = 8, L = 2;
    MSR_CHECK_EQ(m->num_params, V * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C);
    MSR_CHECK_EQ(m->num_tensors, 2 + 12 * 2 + 2);
    MSR_CHECK_EQ(m->num_segments, 4);
    size_t off = 0;
    for (int k = 0; k < m->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &m->tensors[k];
        MSR_CHECK_EQ(t->offset, off);
        MSR_CHECK_EQ(t->count, (size_t)t->shape[0] * (size_t)t->shape[1]);
        MSR_CHECK_EQ(t->decay, t->ndim == 2);
        const msr_gpt_segment_t *s = &m->segments[t->segment];
        MSR_CHECK(t->offset >= s->offset && t->offset + t->count <= s->offset + s->count);
        off += t->count;
    }
    MSR_CHECK_EQ(off, m->num_params);
    off = 0;
    for (int s = 0; s < m->num_segments; s++) {
        MSR_CHECK_EQ(m->segments[s].offset, off);
        MSR_CHECK(m->segments[s].params == m->params + off);
        MSR_CHECK(m->segments[s].grads == m->grads + off);
        off += m->segments[s].count;
    }
    MSR_CHECK_EQ(off, m->num_params);
    MSR_CHECK_STR(m->tensors[0].name, "wte");
    MSR_CHECK_STR(m->tensors[1].name, "wpe");
    MSR_CHECK_STR(m->tensors[2 + 12 + 2].name, "h1.qkvw");
    MSR_CHECK_EQ(m->tensors[2 + 12 + 2].shape[0], 3 * 16);
    MSR_CHECK_STR(m->tensors[27].name, "lnfb");
    /* the pointer table of block 1 agrees with the tensor table */
    msr_gpt_block_params_t p;
    msr_gpt_block_point(&m->cfg, m->segments[2].params, &p);
    MSR_CHECK(p.ln1w == m->params + m->tensors[14].offset);
    MSR_CHECK(p.fcw == m->params + m->tensors[14 + MSR_GPT_FCW].offset);
    MSR_CHECK(p.fcprojb == m->params + m->tensors[14 + MSR_GPT_FCPROJB].offset);
    msr_gpt_destroy(m);
    msr_gpt_destroy(NULL);
}

static void test_init(void)
{
    msr_gpt_t *m = tiny_model(7), *m2 = tiny_model(7), *m3 = tiny_model(8);
    MSR_CHECK(memcmp(m->params, m2->params, m->num_params * sizeof(float)) == 0);
    MSR_CHECK(memcmp(m->params, m3->params, m->num_params * sizeof(float)) != 0);
    /* any slicing gives the same numbers (a ZeRO-3 shard initialises alone) */
    float *pieces = malloc(m->num_params * sizeof(float));
    size_t cut1 = 1234, cut2 = 7777;
    msr_gpt_init_range(m, 7, 0, cut1, pieces);
    msr_gpt_init_range(m, 7, cut1, cut2, pieces + cut1);
    msr_gpt_init_range(m, 7, cut2, m->num_params, pieces + cut2);
    MSR_CHECK(memcmp(m->params, pieces, m->num_params * sizeof(float)) == 0);
    for (int k = 0; k < m->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &m->tensors[k];
        double s, sd = fd_tensor_sd(m, k, &s), mean = s / t->count;
        const char *kind = strchr(t->name, '.') ? strchr(t->name, '.') + 1 : t->name;
        if (strcmp(kind, "wte") == 0 || strcmp(kind, "qkvw") == 0 || strcmp(kind, "fcw") == 0)
            MSR_CHECK_MSG(fabs(sd - 0.02) < 0.002 && fabs(mean) < 0.002, "%s sd %g", t->name, sd);
        else if (strcmp(kind, "attprojw") == 0 || strcmp(kind, "fcprojw") == 0)
            MSR_CHECK_MSG(fabs(sd - 0.01) < 0.0015, "%s sd %g", t->name, sd); /* 0.02/sqrt(2L) */
        else if (strcmp(kind, "wpe") == 0)
            MSR_CHECK_MSG(fabs(sd - 0.01) < 0.002, "%s sd %g", t->name, sd);
        else if (kind[strlen(kind) - 1] == 'w')
            MSR_CHECK_MSG(mean == 1.0 && sd == 0.0, "%s", t->name); /* norm weights */
        else
            MSR_CHECK_MSG(mean == 0.0 && sd == 0.0, "%s", t->name); /* biases */
    }
    free(pieces);
    msr_gpt_destroy(m);
    msr_gpt_destroy(m2);
    msr_gpt_destroy(m3);
}

/* ---- an independent forward in double ---- */

/* The loss of the model in double, from parameters p laid out as gpt.h
 * documents (offsets computed here, not taken from the model). */
static double ref_loss(const double *p, const int *inp, const int *tgt, int B, int T)
{
    const int V = tiny.vocab, C = tiny.channels, NH = tiny.heads, L = tiny.layers;
    const int maxT = tiny.max_seq, N = B * T;
    const double *wte = p, *wpe = p + V * C;
    const double *q = wpe + maxT * C;
    double *x = calloc((size_t)N * C, sizeof *x), *ln = calloc((size_t)N * C, sizeof *ln);
    double *mean = calloc(N, sizeof *mean), *rstd = calloc(N, sizeof *rstd);
    double *qkv = calloc((size_t)N * 3 * C, sizeof *qkv), *y = calloc((size_t)N * C, sizeof *y);
    double *att = calloc((size_t)B * NH * T * T, sizeof *att);
    double *proj = calloc((size_t)N * C, sizeof *proj);
    double *h = calloc((size_t)N * 4 * C, sizeof *h), *hg = calloc((size_t)N * 4 * C, sizeof *hg);
    double *logits = calloc((size_t)N * V, sizeof *logits);
    msr_encoder_forward_f64(x, inp, wte, wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        const double *ln1w = q, *ln1b = ln1w + C, *qkvw = ln1b + C, *qkvb = qkvw + 3 * C * C;
        const double *apw = qkvb + 3 * C, *apb = apw + C * C, *ln2w = apb + C, *ln2b = ln2w + C;
        const double *fcw = ln2b + C, *fcb = fcw + 4 * C * C, *fpw = fcb + 4 * C;
        const double *fpb = fpw + 4 * C * C;
        q = fpb + C;
        msr_layernorm_forward_f64(ln, mean, rstd, x, ln1w, ln1b, N, C);
        msr_matmul_forward_f64(qkv, ln, qkvw, qkvb, N, C, 3 * C);
        msr_attention_forward_f64(y, att, qkv, B, T, C, NH);
        msr_matmul_forward_f64(proj, y, apw, apb, N, C, C);
        for (int i = 0; i < N * C; i++)
            x[i] += proj[i];
        msr_layernorm_forward_f64(ln, mean, rstd, x, ln2w, ln2b, N, C);
        msr_matmul_forward_f64(h, ln, fcw, fcb, N, C, 4 * C);
        msr_gelu_forward_f64(hg, h, (size_t)N * 4 * C);
        msr_matmul_forward_f64(proj, hg, fpw, fpb, N, 4 * C, C);
        for (int i = 0; i < N * C; i++)
            x[i] += proj[i];
    }
    msr_layernorm_forward_f64(ln, mean, rstd, x, q, q + C, N, C);
    msr_matmul_forward_f64(logits, ln, wte, NULL, N, C, V);
    double loss = fd_mean_crossentropy(logits, tgt, N, V);
    free(x), free(ln), free(mean), free(rstd), free(qkv), free(y), free(att), free(proj);
    free(h), free(hg), free(logits);
    return loss;
}

/* ref_loss's arguments but the parameters, for fd_check_model_grad */
typedef struct ref_args {
    const int *inp, *tgt;
    int B, T;
} ref_args_t;

static double ref_loss_at(void *arg, const double *p)
{
    const ref_args_t *a = arg;
    return ref_loss(p, a->inp, a->tgt, a->B, a->T);
}

static void test_gradient(void)
{
    /* a bigger init than GPT-2's so that every path carries a visible gradient */
    msr_gpt_t *m = tiny_model(3);
    for (size_t i = 0; i < m->num_params; i++)
        m->params[i] += 0.1f * (float)msr_rng_normal(99, 0, i);
    int T = tiny.max_seq, N = TB * T;
    int inp[TB * 8], tgt[TB * 8];
    tiny_batch(5, inp, tgt, N);
    /* the loss, then per tensor the largest-gradient elements and a spread
     * of others */
    ref_args_t args = {inp, tgt, TB, T};
    fd_check_model_grad("", m, inp, tgt, TB, T, ref_loss_at, &args);
    msr_gpt_destroy(m);
}

/* ---- determinism and accumulation ---- */

static void test_deterministic(void)
{
    msr_gpt_t *a = tiny_model(4), *b = tiny_model(4);
    int inp[TB * 8], tgt[TB * 8];
    tiny_batch(6, inp, tgt, TB * 8);
    double la, lb;
    MSR_CHECK_OK(msr_gpt_forward(a, inp, tgt, TB, 8, NULL, &la));
    MSR_CHECK_OK(msr_gpt_backward(a, 0.5f, NULL));
    MSR_CHECK_OK(msr_gpt_forward(b, inp, tgt, TB, 8, NULL, &lb));
    MSR_CHECK_OK(msr_gpt_backward(b, 0.5f, NULL));
    MSR_CHECK(la == lb);
    MSR_CHECK(memcmp(a->grads, b->grads, a->num_params * sizeof(float)) == 0);
    /* a second backward adds the same again (BLAS adds into the existing
     * sums blockwise, so the doubling is not bitwise); zero_grad clears */
    MSR_CHECK_OK(msr_gpt_backward(b, 0.5f, NULL));
    float gmax = 0;
    for (size_t i = 0; i < a->num_params; i++)
        gmax = fmaxf(gmax, fabsf(a->grads[i]));
    for (size_t i = 0; i < a->num_params; i++)
        MSR_CHECK_MSG(fabsf(b->grads[i] - 2.0f * a->grads[i]) <= 1e-5f * gmax,
                      "grads[%zu]: %g after two backwards, %g after one (largest %g)", i,
                      (double)b->grads[i], (double)a->grads[i], (double)gmax);
    msr_gpt_zero_grad(b);
    for (size_t i = 0; i < b->num_params; i++)
        MSR_CHECK(b->grads[i] == 0.0f);
    /* a shorter batch (T < maxT, B < max) runs; targets NULL gives the same logits */
    MSR_CHECK_OK(msr_gpt_forward(a, inp, tgt, 1, 5, NULL, &la));
    float first = a->acts.logits[4 * 256 + 17];
    a->acts.logits[4 * 256 + 17] = -1.0f;
    lb = 0.5;
    MSR_CHECK_OK(msr_gpt_forward(a, inp, NULL, 1, 5, NULL, &lb));
    MSR_CHECK(a->acts.logits[4 * 256 + 17] == first);
    MSR_CHECK(lb == 0.5);                                             /* no loss without targets */
    MSR_CHECK_STATUS(msr_gpt_backward(a, 1.0f, NULL), MSR_ERR_STATE); /* nothing to go back on */
    msr_gpt_destroy(a);
    msr_gpt_destroy(b);
}

/* ---- hooks ---- */

enum { EV_ACQUIRE, EV_RELEASE, EV_READY };

typedef struct recorder {
    int events[256][3]; /* kind, segment, pass */
    int n;
    float *snap[8]; /* a segment's gradients when they were declared ready */
    int fail_at;    /* acquire of this segment fails (-1: never) */
} recorder_t;

static msr_status_t rec_acquire(void *arg, msr_gpt_t *m, int seg, msr_gpt_pass_t pass)
{
    recorder_t *r = arg;
    (void)m;
    if (seg == r->fail_at)
        return MSR_ERR_PEER_LOST;
    r->events[r->n][0] = EV_ACQUIRE, r->events[r->n][1] = seg, r->events[r->n++][2] = pass;
    return MSR_OK;
}

static msr_status_t rec_release(void *arg, msr_gpt_t *m, int seg, msr_gpt_pass_t pass)
{
    recorder_t *r = arg;
    (void)m;
    r->events[r->n][0] = EV_RELEASE, r->events[r->n][1] = seg, r->events[r->n++][2] = pass;
    return MSR_OK;
}

static msr_status_t rec_ready(void *arg, msr_gpt_t *m, int seg)
{
    recorder_t *r = arg;
    r->events[r->n][0] = EV_READY, r->events[r->n][1] = seg, r->events[r->n++][2] = 1;
    size_t n = m->segments[seg].count;
    r->snap[seg] = malloc(n * sizeof(float));
    memcpy(r->snap[seg], m->segments[seg].grads, n * sizeof(float));
    return MSR_OK;
}

static void test_hooks_order(void)
{
    msr_gpt_t *m = tiny_model(2);
    recorder_t *r = calloc(1, sizeof *r);
    r->fail_at = -1;
    msr_gpt_hooks_t hooks = {r, rec_acquire, rec_release, rec_ready};
    int inp[TB * 8], tgt[TB * 8];
    tiny_batch(7, inp, tgt, TB * 8);
    double loss;
    MSR_CHECK_OK(msr_gpt_forward(m, inp, tgt, TB, 8, &hooks, &loss));
    /* forward: 0, 1, 2, 3 (= L+1), then 0 again for the head */
    static const int fwd[][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 2, 0},
                                 {1, 2, 0}, {0, 3, 0}, {1, 3, 0}, {0, 0, 0}, {1, 0, 0}};
    MSR_CHECK_EQ(r->n, 10);
    for (int i = 0; i < 10; i++)
        MSR_CHECK(memcmp(r->events[i], fwd[i], sizeof fwd[i]) == 0);
    r->n = 0;
    MSR_CHECK_OK(msr_gpt_backward(m, 1.0f / 16, &hooks));
    static const int bwd[][3] = {{0, 0, 1}, {1, 0, 1}, {0, 3, 1}, {1, 3, 1}, {2, 3, 1},
                                 {0, 2, 1}, {1, 2, 1}, {2, 2, 1}, {0, 1, 1}, {1, 1, 1},
                                 {2, 1, 1}, {0, 0, 1}, {1, 0, 1}, {2, 0, 1}};
    MSR_CHECK_EQ(r->n, 14);
    for (int i = 0; i < 14; i++)
        MSR_CHECK_MSG(memcmp(r->events[i], bwd[i], sizeof bwd[i]) == 0, "event %d: %d %d %d", i,
                      r->events[i][0], r->events[i][1], r->events[i][2]);
    /* gradients declared ready never change afterwards */
    for (int s = 0; s < m->num_segments; s++) {
        MSR_CHECK(memcmp(r->snap[s], m->segments[s].grads, m->segments[s].count * sizeof(float)) ==
                  0);
        free(r->snap[s]);
    }
    /* a failing hook stops the pass with its status */
    r->fail_at = 2;
    MSR_CHECK_STATUS(msr_gpt_forward(m, inp, tgt, TB, 8, &hooks, &loss), MSR_ERR_PEER_LOST);
    MSR_CHECK_STATUS(msr_gpt_backward(m, 1.0f, &hooks), MSR_ERR_STATE); /* forward did not end */
    free(r);
    msr_gpt_destroy(m);
}

/* The poll hook: called inside each block's forward and backward (so
 * between the acquire and release of a block), and a failing poll stops
 * the pass with its status. */
typedef struct poller {
    int acquired; /* the block segment held now, or -1 */
    int polls, polls_outside, fail_after;
} poller_t;

static msr_status_t poll_acquire(void *arg, msr_gpt_t *m, int seg, msr_gpt_pass_t pass)
{
    poller_t *p = arg;
    (void)pass;
    p->acquired = seg >= 1 && seg <= m->cfg.layers ? seg : -1;
    return MSR_OK;
}

static msr_status_t poll_release(void *arg, msr_gpt_t *m, int seg, msr_gpt_pass_t pass)
{
    poller_t *p = arg;
    (void)m, (void)seg, (void)pass;
    p->acquired = -1;
    return MSR_OK;
}

static msr_status_t poll_poll(void *arg, msr_gpt_t *m)
{
    poller_t *p = arg;
    (void)m;
    p->polls++;
    p->polls_outside += p->acquired < 0;
    return p->polls == p->fail_after ? MSR_ERR_TIMEOUT : MSR_OK;
}

static void test_hooks_poll(void)
{
    msr_gpt_t *m = tiny_model(2);
    poller_t p = {-1, 0, 0, -1};
    msr_gpt_hooks_t hooks = {&p, poll_acquire, poll_release, NULL, poll_poll};
    int inp[TB * 8], tgt[TB * 8];
    tiny_batch(7, inp, tgt, TB * 8);
    double loss, plain;
    MSR_CHECK_OK(msr_gpt_forward(m, inp, tgt, TB, 8, &hooks, &loss));
    int fwd = p.polls;
    MSR_CHECK(fwd >= 4 * 2); /* several per block */
    MSR_CHECK_OK(msr_gpt_backward(m, 1.0f / 16, &hooks));
    MSR_CHECK(p.polls - fwd >= 4 * 2);
    MSR_CHECK_EQ(p.polls_outside, 0);
    MSR_CHECK_OK(msr_gpt_forward(m, inp, tgt, TB, 8, NULL, &plain));
    MSR_CHECK(plain == loss); /* polling changes nothing */
    p.polls = 0;
    p.fail_after = 3;
    MSR_CHECK_STATUS(msr_gpt_forward(m, inp, tgt, TB, 8, &hooks, &loss), MSR_ERR_TIMEOUT);
    MSR_CHECK_EQ(p.polls, 3);
    MSR_CHECK_OK(msr_gpt_forward(m, inp, tgt, TB, 8, NULL, &plain));
    p.polls = 0;
    MSR_CHECK_STATUS(msr_gpt_backward(m, 1.0f / 16, &hooks), MSR_ERR_TIMEOUT);
    msr_gpt_destroy(m);
}

/* ZeRO-3's contract: a hook that hands each segment's parameters over in
 * a private copy while acquired and poisons the pointer (NaN) once
 * released, and catches the gradients in private buffers, gives bitwise
 * the same loss and gradients: the model touches a segment only between
 * acquire and release, and only through segments[s]. */
typedef struct redirect {
    float *params[8], *grads[8];
    float *poison, *trash;
    size_t max_count;
} redirect_t;

static msr_status_t red_acquire(void *arg, msr_gpt_t *m, int seg, msr_gpt_pass_t pass)
{
    redirect_t *r = arg;
    (void)pass;
    memcpy(r->params[seg], m->params + m->segments[seg].offset,
           m->segments[seg].count * sizeof(float));
    m->segments[seg].params = r->params[seg];
    m->segments[seg].grads = r->grads[seg];
    return MSR_OK;
}

static msr_status_t red_release(void *arg, msr_gpt_t *m, int seg, msr_gpt_pass_t pass)
{
    redirect_t *r = arg;
    (void)pass;
    for (size_t i = 0; i < m->segments[seg].count; i++)
        r->params[seg][i] = NAN;
    m->segments[seg].params = r->poison;
    m->segments[seg].grads = r->trash;
    return MSR_OK;
}

static void test_hooks_redirect(void)
{
    msr_gpt_t *ref = tiny_model(9), *m = tiny_model(9);
    int inp[TB * 8], tgt[TB * 8];
    tiny_batch(8, inp, tgt, TB * 8);
    double lref, lm;
    MSR_CHECK_OK(msr_gpt_forward(ref, inp, tgt, TB, 8, NULL, &lref));
    MSR_CHECK_OK(msr_gpt_backward(ref, 1.0f / 16, NULL));

    redirect_t r = {{NULL}, {NULL}, NULL, NULL, 0};
    for (int s = 0; s < m->num_segments; s++) {
        r.max_count = m->segments[s].count > r.max_count ? m->segments[s].count : r.max_count;
        r.params[s] = calloc(m->segments[s].count, sizeof(float));
        r.grads[s] = calloc(m->segments[s].count, sizeof(float));
    }
    r.poison = malloc(r.max_count * sizeof(float));
    r.trash = malloc(r.max_count * sizeof(float));
    for (size_t i = 0; i < r.max_count; i++)
        r.poison[i] = NAN, r.trash[i] = 12345.0f;
    for (int s = 0; s < m->num_segments; s++)
        red_release(&r, m, s, MSR_GPT_FORWARD);
    msr_gpt_hooks_t hooks = {&r, red_acquire, red_release, NULL};
    MSR_CHECK_OK(msr_gpt_forward(m, inp, tgt, TB, 8, &hooks, &lm));
    MSR_CHECK_OK(msr_gpt_backward(m, 1.0f / 16, &hooks));
    MSR_CHECK(lm == lref);
    for (int s = 0; s < m->num_segments; s++)
        MSR_CHECK_MSG(memcmp(r.grads[s], ref->grads + ref->segments[s].offset,
                             ref->segments[s].count * sizeof(float)) == 0,
                      "segment %d", s);
    for (size_t i = 0; i < m->num_params; i++)
        MSR_CHECK(m->grads[i] == 0.0f); /* the flat buffer was never used */
    for (size_t i = 0; i < r.max_count; i++)
        MSR_CHECK(r.trash[i] == 12345.0f); /* nothing written after release */
    for (int s = 0; s < m->num_segments; s++) {
        free(r.params[s]);
        free(r.grads[s]);
        msr_gpt_segment_reset(m, s);
    }
    free(r.poison);
    free(r.trash);
    msr_gpt_destroy(ref);
    msr_gpt_destroy(m);
}

/* ---- refusals ---- */

static void test_bad_input(void)
{
    msr_gpt_config_t c = tiny;
    MSR_CHECK_OK(msr_gpt_config_check(&c));
    c.heads = 3;
    MSR_CHECK_STATUS(msr_gpt_config_check(&c), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(msr_err_msg(), "heads") != NULL);
    c = tiny;
    c.layers = 0;
    MSR_CHECK_STATUS(msr_gpt_config_check(&c), MSR_ERR_CONFIG);
    c = tiny;
    c.max_seq = 1 << 20;
    MSR_CHECK_STATUS(msr_gpt_config_check(&c), MSR_ERR_CONFIG);
    msr_gpt_t *m = NULL;
    c = tiny;
    c.channels = -4;
    MSR_CHECK_STATUS(msr_gpt_create(&c, 1, &m), MSR_ERR_CONFIG);
    MSR_CHECK(m == NULL);
    MSR_CHECK_STATUS(msr_gpt_create(&tiny, 0, &m), MSR_ERR_CONFIG);

    m = tiny_model(1);
    int inp[TB * 8], tgt[TB * 8];
    tiny_batch(1, inp, tgt, TB * 8);
    double loss = -1;
    MSR_CHECK_STATUS(msr_gpt_backward(m, 1.0f, NULL), MSR_ERR_STATE);
    MSR_CHECK_STATUS(msr_gpt_forward(m, inp, tgt, TB + 1, 8, NULL, &loss), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gpt_forward(m, inp, tgt, TB, 9, NULL, &loss), MSR_ERR_INVALID_ARG);
    inp[3] = 256;
    MSR_CHECK_STATUS(msr_gpt_forward(m, inp, tgt, TB, 8, NULL, &loss), MSR_ERR_INVALID_ARG);
    inp[3] = 0;
    tgt[5] = -1;
    MSR_CHECK_STATUS(msr_gpt_forward(m, inp, tgt, TB, 8, NULL, &loss), MSR_ERR_INVALID_ARG);
    MSR_CHECK(loss == -1);
    tgt[5] = 0;
    MSR_CHECK_OK(msr_gpt_forward(m, inp, tgt, TB, 8, NULL, &loss));
    /* at initialisation the prediction is nearly uniform: loss ~ ln 256 */
    MSR_CHECK_MSG(fabs(loss - log(256.0)) < 0.05, "initial loss %f", loss);
    msr_gpt_destroy(m);
}

/* ---- an uneven split of the layers into pipeline stages ---- */

/* A split parsed, checked, formatted, and its stages' layers. */
static void split_parse(void)
{
    int sp[8], n = -1;
    MSR_CHECK_OK(msr_layout_split_parse("3,5,5,3", sp, 8, &n));
    MSR_CHECK_EQ(n, 4);
    MSR_CHECK(sp[0] == 3 && sp[1] == 5 && sp[2] == 5 && sp[3] == 3);
    MSR_CHECK_OK(msr_layout_split_check(16, 4, sp, n));
    MSR_CHECK(!msr_layout_split_is_even(16, n, sp));
    char buf[32];
    MSR_CHECK_EQ(msr_layout_split_format(sp, n, buf, sizeof buf), 7);
    MSR_CHECK_STR(buf, "3,5,5,3");
    MSR_CHECK_EQ(msr_layout_split_format(sp, n, buf, 4), 7); /* truncated as snprintf */
    MSR_CHECK_STR(buf, "3,5");
    /* the even split of 10 into 4: 2, 3, 2, 3 */
    const int even[] = {2, 3, 2, 3};
    MSR_CHECK(msr_layout_split_is_even(10, 4, even));
    for (int j = 0; j < 4; j++) {
        int lo, hi, elo, ehi;
        msr_layout_split_stage(10, 4, even, j, &lo, &hi);
        msr_layout_split_stage(10, 4, NULL, j, &elo, &ehi);
        MSR_CHECK(lo == elo && hi == ehi);
    }
    int lo = -1, hi = -1;
    msr_layout_split_stage(16, 4, sp, 2, &lo, &hi);
    MSR_CHECK(lo == 8 && hi == 13);
}

/* Refusals, each naming its fault. */
static void split_refusals(void)
{
    int sp[8], n;
    const struct {
        const char *text, *why;
    } bad[] = {
        {"", "entry 1 is empty"},
        {"3,,5", "entry 2 is empty"},
        {"3,5,", "entry 3 is empty"},
        {"3,x", "entry 2 'x' is not a layer count"},
        {"3,-1", "entry 2 '-1' is not a layer count"},
        {"3, 5", "entry 2 ' 5' is not a layer count"},
        {"1,1,1,1,1,1,1,1,1", "more than 8 entries"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = -1;
        MSR_CHECK_STATUS(msr_layout_split_parse(bad[i].text, sp, 8, &n), MSR_ERR_CONFIG);
        MSR_CHECK_MSG(strstr(msr_err_msg(), bad[i].why) != NULL, "'%s': %s", bad[i].text,
                      msr_err_msg());
        MSR_CHECK_EQ(n, -1);
    }
    const int s3[] = {3, 5, 5}, s0[] = {3, 0, 8, 5}, s15[] = {3, 5, 4, 3};
    MSR_CHECK_STATUS(msr_layout_split_check(16, 4, s3, 3), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(msr_err_msg(), "3 entries for 4 virtual stages") != NULL);
    MSR_CHECK_STATUS(msr_layout_split_check(16, 4, s0, 4), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(msr_err_msg(), "virtual stage 1 has 0 layers") != NULL);
    MSR_CHECK_STATUS(msr_layout_split_check(16, 4, s15, 4), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(msr_err_msg(), "sum to 15, not the 16 layers") != NULL);
}

/* A part of a model split unevenly: its chunks, segments and tensors, its
 * own copy of the split; a split that does not sum to the layers refused. */
static void split_part(void)
{
    /* pp 2 x 2 chunks of 8 layers split 1,3,3,1; virtual stage j
     * = c * pp + pp_rank, so rank 0 holds stages 0 and 2: layers 0 and 4..6 */
    msr_gpt_config_t c = {MSR_GPT_VOCAB, 8, 8, 2, 16};
    int split[] = {1, 3, 3, 1};
    msr_gpt_part_t part = {1, 0, 2, 0, 2, split};
    MSR_CHECK_OK(msr_gpt_part_check(&c, &part));
    msr_gpt_t *m = NULL;
    MSR_CHECK_OK(msr_gpt_create_part(&c, &part, 0, &m));
    MSR_CHECK(m->chunk_lo[0] == 0 && m->chunk_hi[0] == 1);
    MSR_CHECK(m->chunk_lo[1] == 4 && m->chunk_hi[1] == 7);
    MSR_CHECK_EQ(m->num_segments, 1 + 1 + 3); /* embeddings, h0, h4..h6 */
    MSR_CHECK_STR(m->tensors[2].name, "h0.ln1w");
    MSR_CHECK_STR(m->tensors[2 + 12].name, "h4.ln1w");
    MSR_CHECK_EQ(m->num_params, msr_gpt_num_params(&c) - 4 * (12 * 16 * 16 + 13 * 16) - 2 * 16);
    /* the model keeps its own copy */
    MSR_CHECK(m->part.stage_layers != split && m->part.stage_layers[1] == 3);
    split[1] = 99;
    MSR_CHECK_EQ(m->part.stage_layers[1], 3);
    split[1] = 3;
    msr_gpt_destroy(m);
    part.pp_rank = 1; /* stages 1 and 3: layers 1..3 and 7, and the final norm */
    MSR_CHECK_OK(msr_gpt_create_part(&c, &part, 0, &m));
    MSR_CHECK(m->chunk_lo[0] == 1 && m->chunk_hi[0] == 4);
    MSR_CHECK(m->chunk_lo[1] == 7 && m->chunk_hi[1] == 8);
    MSR_CHECK(m->seg_embed == -1 && m->seg_lnf == m->num_segments - 1);
    msr_gpt_destroy(m);
    int wrong[] = {1, 3, 4, 1};
    part.stage_layers = wrong;
    MSR_CHECK_STATUS(msr_gpt_part_check(&c, &part), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(msr_err_msg(), "sum to 9, not the 8 layers") != NULL);
    m = NULL;
    MSR_CHECK_STATUS(msr_gpt_create_part(&c, &part, 0, &m), MSR_ERR_CONFIG);
    MSR_CHECK(m == NULL);
}

/* Every allocation of a split part failing in turn, the split's copy
 * included. */
static void split_part_no_memory(void)
{
    msr_gpt_config_t c = {MSR_GPT_VOCAB, 8, 8, 2, 16};
    int split[] = {1, 3, 3, 1};
    msr_gpt_part_t part = {1, 0, 2, 0, 2, split};
    part.pp_rank = 1; /* stages 1 and 3, as split_part's last model */
    msr_gpt_t *m;
    for (long i = 0;; i++) {
        m = NULL;
        msr_alloc_fail_at(i);
        msr_status_t st = msr_gpt_create_part(&c, &part, 0, &m);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        if (!failed) {
            MSR_CHECK_OK(st);
            msr_gpt_destroy(m);
            MSR_CHECK(i > 1);
            break;
        }
        MSR_CHECK_STATUS(st, MSR_ERR_NO_MEMORY);
        MSR_CHECK(m == NULL);
    }
}

static void test_split(void)
{
    split_parse();
    split_refusals();
    split_part();
    split_part_no_memory();
}

/* Every allocation of create failing in turn gives MSR_ERR_NO_MEMORY and
 * leaks nothing (the sanitizer build checks the leaks). */
static void test_no_memory(void)
{
    for (long i = 0;; i++) {
        msr_gpt_t *m = NULL;
        msr_alloc_fail_at(i);
        msr_status_t st = msr_gpt_create(&tiny, TB, &m);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        if (!failed) {
            MSR_CHECK_OK(st);
            msr_gpt_destroy(m);
            MSR_CHECK(i > 5);
            break;
        }
        MSR_CHECK_STATUS(st, MSR_ERR_NO_MEMORY);
        MSR_CHECK(m == NULL);
    }
}

static const msr_test_t tests[] = {
    {"layout", test_layout, 10},           {"init", test_init, 10},
    {"gradient", test_gradient, 60},       {"deterministic", test_deterministic, 10},
    {"hooks_order", test_hooks_order, 10}, {"hooks_redirect", test_hooks_redirect, 10},
    {"hooks_poll", test_hooks_poll, 10},   {"bad_input", test_bad_input, 10},
    {"no_memory", test_no_memory, 10},     {"split", test_split, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
