/* Generation with a key/value cache (model/gpt_generate.h): the cached
 * one-position passes give a full forward's logits at every position,
 * greedy is the full forward's argmax, the sampler is a function of its
 * seed, and bad requests are refused at their bounds. */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "model/gpt.h"
#include "model/gpt_generate.h"
#include "model/moe.h"
#include "model/rng.h"
#include "tests/runner.h"

/* odd sizes: V maxT L NH C */
static const msr_gpt_config_t shapes[] = {
    {37, 13, 2, 3, 15},
    {50, 9, 1, 1, 8},
    {256, 17, 3, 5, 20},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* A model of cfg with large random weights (N(0, 0.3) everywhere), so
 * that attention is far from uniform and the logits far from 0. */
static msr_gpt_t *model_of(const msr_gpt_config_t *cfg, uint64_t seed)
{
    msr_gpt_t *m = NULL;
    MSR_CHECK_OK(msr_gpt_create(cfg, 1, &m));
    for (size_t i = 0; i < m->num_params; i++)
        m->params[i] = (float)(0.3 * msr_rng_normal(seed, 7, i));
    return m;
}

static void tokens_of(uint64_t seed, int V, int *tok, int n)
{
    for (int i = 0; i < n; i++)
        tok[i] = (int)msr_rng_below(msr_rng_u64(seed, 3, (uint64_t)i), (uint64_t)V);
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* The cached logits of every position against one full forward's, 1e-5
 * relative to the row's largest logit. */
static void test_cached_logits(void)
{
    for (int s = 0; s < NSHAPES; s++) {
        const msr_gpt_config_t *cfg = &shapes[s];
        int T = cfg->max_seq, V = cfg->vocab, tok[32];
        msr_gpt_t *m = model_of(cfg, 11 + (uint64_t)s);
        tokens_of(5 + (uint64_t)s, V, tok, T);
        MSR_CHECK_OK(msr_gpt_forward(m, tok, NULL, 1, T, NULL, NULL));
        msr_gpt_gen_t *g = NULL;
        MSR_CHECK_OK(msr_gpt_gen_create(m, &g));
        double worst = 0.0;
        for (int t = 0; t < T; t++) {
            const float *lg = NULL, *full = m->acts.logits + (size_t)t * (size_t)V;
            MSR_CHECK_OK(msr_gpt_gen_step(g, tok[t], &lg));
            double big = 0.0;
            for (int v = 0; v < V; v++)
                big = fmax(big, fabs(full[v]));
            MSR_CHECK(big > 0.1); /* the comparison means something */
            for (int v = 0; v < V; v++) {
                double rel = fabs((double)lg[v] - (double)full[v]) / big;
                worst = fmax(worst, rel);
                MSR_CHECK_MSG(rel <= 1e-5, "shape %d position %d token %d: %g vs %g", s, t, v,
                              (double)lg[v], (double)full[v]);
            }
        }
        printf("shape %d (V %d T %d L %d NH %d C %d): worst relative difference %.3g\n", s, V, T,
               cfg->layers, cfg->heads, cfg->channels, worst);
        /* the cache is full: one more position is refused */
        const float *lg = NULL;
        MSR_CHECK_STATUS(msr_gpt_gen_step(g, 0, &lg), MSR_ERR_INVALID_ARG);
        msr_gpt_gen_destroy(g);
        msr_gpt_destroy(m);
    }
}

/* Greedy twice gives the same tokens, each the argmax of a full forward
 * over the prompt and the tokens before it; top-k 1 is greedy too. */
static void test_greedy(void)
{
    for (int s = 0; s < NSHAPES; s++) {
        const msr_gpt_config_t *cfg = &shapes[s];
        int T = cfg->max_seq, V = cfg->vocab, P = 3, n = T - P, seq[32], out[32], again[32];
        msr_gpt_t *m = model_of(cfg, 21 + (uint64_t)s);
        msr_gpt_gen_t *g = NULL;
        MSR_CHECK_OK(msr_gpt_gen_create(m, &g));
        tokens_of(9, V, seq, P);
        msr_gpt_sampler_t greedy = {0.0, 0, 1};
        MSR_CHECK_OK(msr_gpt_generate(g, seq, P, n, &greedy, out));
        MSR_CHECK_OK(msr_gpt_generate(g, seq, P, n, &greedy, again));
        MSR_CHECK(memcmp(out, again, (size_t)n * sizeof(int)) == 0);
        msr_gpt_sampler_t top1 = {1.0, 1, 99};
        MSR_CHECK_OK(msr_gpt_generate(g, seq, P, n, &top1, again));
        MSR_CHECK(memcmp(out, again, (size_t)n * sizeof(int)) == 0);
        memcpy(seq + P, out, (size_t)(n - 1) * sizeof(int));
        MSR_CHECK_OK(msr_gpt_forward(m, seq, NULL, 1, T - 1, NULL, NULL));
        for (int i = 0; i < n; i++) {
            const float *full = m->acts.logits + (size_t)(P - 1 + i) * (size_t)V;
            MSR_CHECK_MSG(out[i] == argmax(full, V), "shape %d token %d: %d, argmax %d", s, i,
                          out[i], argmax(full, V));
        }
        msr_gpt_gen_destroy(g);
        msr_gpt_destroy(m);
    }
}

/* Sampling: the same seed the same tokens, another seed other tokens;
 * top-k k draws only among the k largest logits. */
static void test_seed(void)
{
    const msr_gpt_config_t *cfg = &shapes[2];
    int T = cfg->max_seq, V = cfg->vocab, P = 1, n = T - P, prompt[1] = {7};
    int a[32], b[32], c[32];
    msr_gpt_t *m = model_of(cfg, 31);
    msr_gpt_gen_t *g = NULL;
    MSR_CHECK_OK(msr_gpt_gen_create(m, &g));
    msr_gpt_sampler_t s1 = {1.5, 0, 1}, s2 = {1.5, 0, 2};
    MSR_CHECK_OK(msr_gpt_generate(g, prompt, P, n, &s1, a));
    MSR_CHECK_OK(msr_gpt_generate(g, prompt, P, n, &s1, b));
    MSR_CHECK_OK(msr_gpt_generate(g, prompt, P, n, &s2, c));
    MSR_CHECK(memcmp(a, b, (size_t)n * sizeof(int)) == 0);
    MSR_CHECK(memcmp(a, c, (size_t)n * sizeof(int)) != 0);
    /* top-k 3: every token among the 3 largest logits of its position */
    msr_gpt_sampler_t k3 = {5.0, 3, 4};
    MSR_CHECK_OK(msr_gpt_generate(g, prompt, P, n, &k3, a));
    int seq[32];
    seq[0] = prompt[0];
    memcpy(seq + 1, a, (size_t)(n - 1) * sizeof(int));
    MSR_CHECK_OK(msr_gpt_forward(m, seq, NULL, 1, T - 1, NULL, NULL));
    for (int i = 0; i < n; i++) {
        const float *lg = m->acts.logits + (size_t)i * (size_t)V;
        int above = 0;
        for (int v = 0; v < V; v++)
            above += lg[v] > lg[a[i]];
        MSR_CHECK_MSG(above < 3, "token %d: %d logits above the drawn one's", i, above);
    }
    msr_gpt_gen_destroy(g);
    msr_gpt_destroy(m);
}

/* Every limit at its bound and one past. */
static void test_limits(void)
{
    const msr_gpt_config_t *cfg = &shapes[0];
    int T = cfg->max_seq, V = cfg->vocab, prompt[32] = {0}, out[32];
    msr_gpt_t *m = model_of(cfg, 41);
    msr_gpt_gen_t *g = NULL;
    MSR_CHECK_OK(msr_gpt_gen_create(m, &g));
    msr_gpt_sampler_t s = {1.0, 0, 1};
    /* n: 0 and T - P fit, -1 and T - P + 1 do not */
    MSR_CHECK_OK(msr_gpt_generate(g, prompt, 2, 0, &s, out));
    MSR_CHECK_OK(msr_gpt_generate(g, prompt, 2, T - 2, &s, out));
    MSR_CHECK_STATUS(msr_gpt_generate(g, prompt, 2, -1, &s, out), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gpt_generate(g, prompt, 2, T - 1, &s, out), MSR_ERR_INVALID_ARG);
    /* the prompt: 1..T tokens */
    MSR_CHECK_OK(msr_gpt_generate(g, prompt, T, 0, &s, out));
    MSR_CHECK_STATUS(msr_gpt_generate(g, prompt, T + 1, 0, &s, out), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gpt_generate(g, prompt, 0, 1, &s, out), MSR_ERR_INVALID_ARG);
    /* a token: V - 1 is one, V and -1 are not */
    prompt[1] = V - 1;
    MSR_CHECK_OK(msr_gpt_generate(g, prompt, 2, 1, &s, out));
    prompt[1] = V;
    MSR_CHECK_STATUS(msr_gpt_generate(g, prompt, 2, 1, &s, out), MSR_ERR_INVALID_ARG);
    prompt[1] = -1;
    MSR_CHECK_STATUS(msr_gpt_generate(g, prompt, 2, 1, &s, out), MSR_ERR_INVALID_ARG);
    prompt[1] = 0;
    /* temperature >= 0 and finite; top-k in [0, V] */
    msr_gpt_sampler_t bad[] = {
        {-1e-9, 0, 1}, {NAN, 0, 1}, {INFINITY, 0, 1}, {1.0, V + 1, 1}, {1.0, -1, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        MSR_CHECK_STATUS(msr_gpt_generate(g, prompt, 2, 1, &bad[i], out), MSR_ERR_INVALID_ARG);
    msr_gpt_sampler_t edge[] = {{0.0, 0, 1}, {1.0, V, 1}, {1.0, 0, 1}};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        MSR_CHECK_OK(msr_gpt_generate(g, prompt, 2, 1, &edge[i], out));
    msr_gpt_gen_destroy(g);
    msr_gpt_destroy(m);
}

/* A MoE model (every second block, E 4, K 2) generates the logits of a
 * full forward whose capacity drops nothing (F = E: capacity N K); one
 * position a pass never drops (capacity ceil(F K / E) >= 1 per expert). */
static void test_moe(void)
{
    msr_gpt_config_t cfg = shapes[0];
    cfg.moe = (msr_gpt_moe_t){4, 2, 2, 4.0, 0.01};
    int T = cfg.max_seq, V = cfg.vocab, tok[32];
    msr_gpt_t *m = NULL;
    MSR_CHECK_OK(msr_gpt_create(&cfg, 1, &m));
    for (size_t i = 0; i < m->num_params; i++)
        m->params[i] = (float)(0.3 * msr_rng_normal(51, 7, i));
    float *ex = msr_moe_params(m->moe);
    for (size_t i = 0; i < msr_moe_count(m->moe); i++)
        ex[i] = (float)(0.3 * msr_rng_normal(51, 8, i));
    tokens_of(52, V, tok, T);
    MSR_CHECK_OK(msr_gpt_forward(m, tok, NULL, 1, T, NULL, NULL));
    msr_gpt_gen_t *g = NULL;
    MSR_CHECK_OK(msr_gpt_gen_create(m, &g));
    double worst = 0.0;
    for (int t = 0; t < T; t++) {
        const float *lg = NULL, *full = m->acts.logits + (size_t)t * (size_t)V;
        MSR_CHECK_OK(msr_gpt_gen_step(g, tok[t], &lg));
        double big = 0.0;
        for (int v = 0; v < V; v++)
            big = fmax(big, fabs(full[v]));
        for (int v = 0; v < V; v++)
            worst = fmax(worst, fabs((double)lg[v] - (double)full[v]) / big);
    }
    printf("MoE: worst relative difference %.3g\n", worst);
    MSR_CHECK(worst <= 1e-5);
    msr_gpt_gen_destroy(g);
    msr_gpt_destroy(m);
}

/* A part of a model is refused. */
static void test_refusals(void)
{
    msr_gpt_t *m = NULL;
    msr_gpt_gen_t *g = NULL;
    msr_gpt_part_t part = {1, 0, 2, 0, 1, NULL}; /* pp 2's first stage */
    MSR_CHECK_OK(msr_gpt_create_part(&shapes[2], &part, 0, &m));
    MSR_CHECK_STATUS(msr_gpt_gen_create(m, &g), MSR_ERR_CONFIG);
    msr_gpt_destroy(m);
    msr_gpt_gen_destroy(NULL);
}

static const msr_test_t tests[] = {
    {"cached_logits", test_cached_logits, 30},
    {"greedy", test_greedy, 30},
    {"seed", test_seed, 30},
    {"limits", test_limits, 30},
    {"moe", test_moe, 30},
    {"refusals", test_refusals, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
