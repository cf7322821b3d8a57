/* Generation with a key/value cache (see gpt_generate.h). */
#include "model/gpt_generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "model/block.h"
#include "model/layers.h"
#include "model/moe.h"
#include "model/rng.h"

/* the stream of the sampler's draws (rng.h): "gen" */
#define GEN_STREAM 0x67656eULL

/* a candidate token, for top-k's order */
typedef struct gen_cand {
    float logit;
    int id;
} gen_cand_t;

struct msr_gpt_gen {
    msr_gpt_t *model;
    int pos;                          /* positions stepped since the last reset */
    int layer;                        /* the block running now (the attend hook's cache) */
    float *mem;                       /* every buffer below */
    float *kcache, *vcache;           /* (L, maxT, C) each (a Llama's key/value heads
                                       * repeated for their query heads) */
    int *kpos;                        /* (maxT) 0, 1, ..., maxT - 1: the keys' positions */
    float *x;                         /* (C) the residual stream between blocks */
    msr_gpt_block_acts_t a;           /* one position's block activations (N = 1) */
    float *proj;                      /* (C) a projection before its residual add */
    float *mx, *sum;                  /* (NH), (NH): the attention's online softmax */
    float *scratch;                   /* (maxT) attention scores */
    float *lnf, *lnf_mean, *lnf_rstd; /* (C), (1), (1) */
    float *logits;                    /* (V) */
    gen_cand_t *cand;                 /* (V) the sampler's candidates */
};

/* The floats of one generator's buffers, carved in one pass: counts when
 * g->mem is NULL. */
static size_t gen_carve(const msr_gpt_config_t *cfg, msr_gpt_gen_t *g)
{
    size_t C = (size_t)cfg->channels, T = (size_t)cfg->max_seq, L = (size_t)cfg->layers,
           NH = (size_t)cfg->heads, V = (size_t)cfg->vocab;
    msr_gpt_carve_t c = {g->mem, 0, 16};
    g->kcache = msr_gpt_carve(&c, L * T * C);
    g->vcache = msr_gpt_carve(&c, L * T * C);
    g->x = msr_gpt_carve(&c, C);
    msr_gpt_block_acts_t *a = &g->a;
    a->ln1 = msr_gpt_carve(&c, C);
    a->ln1_mean = msr_gpt_carve(&c, 1);
    a->ln1_rstd = msr_gpt_carve(&c, 1);
    a->qkv = msr_gpt_carve(&c, 3 * C);
    a->atty = msr_gpt_carve(&c, C);
    a->att = msr_gpt_carve(&c, NH); /* the attend hook's logsumexp (1, NH) */
    a->res2 = msr_gpt_carve(&c, C);
    a->ln2 = msr_gpt_carve(&c, C);
    a->ln2_mean = msr_gpt_carve(&c, 1);
    a->ln2_rstd = msr_gpt_carve(&c, 1);
    /* the GPT's fc (4C), a Llama's gate and up (2F) */
    size_t H = cfg->arch == MSR_GPT_ARCH_LLAMA ? 2 * (size_t)cfg->ffn : 4 * C;
    a->fch = msr_gpt_carve(&c, H);
    a->fch_gelu = msr_gpt_carve(&c, H);
    a->res3 = msr_gpt_carve(&c, C);
    g->proj = msr_gpt_carve(&c, C);
    g->mx = msr_gpt_carve(&c, NH);
    g->sum = msr_gpt_carve(&c, NH);
    g->scratch = msr_gpt_carve(&c, T);
    g->lnf = msr_gpt_carve(&c, C);
    g->lnf_mean = msr_gpt_carve(&c, 1);
    g->lnf_rstd = msr_gpt_carve(&c, 1);
    g->logits = msr_gpt_carve(&c, V);
    return c.used;
}

msr_status_t msr_gpt_gen_create(msr_gpt_t *model, msr_gpt_gen_t **gen_p)
{
    const msr_gpt_config_t *cfg = &model->cfg;
    if (!model->whole || model->params == NULL)
        return msr_err(MSR_ERR_CONFIG, "generate: needs the whole model with its parameters");
    if (cfg->moe.experts > 0 &&
        (model->moe == NULL || msr_moe_count(model->moe) != msr_moe_num_params(cfg))) {
        return msr_err(MSR_ERR_CONFIG, "generate: a MoE model needs all its experts in this "
                                       "process (expert parallel 1)");
    }
    msr_gpt_gen_t *g = msr_calloc(1, sizeof *g);
    if (g == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "generate: out of memory");
    size_t n = gen_carve(cfg, g);
    g->mem = msr_calloc(n, sizeof(float));
    g->kpos = msr_calloc((size_t)cfg->max_seq, sizeof(int));
    g->cand = msr_calloc((size_t)cfg->vocab, sizeof(gen_cand_t));
    if (g->mem == NULL || g->kpos == NULL || g->cand == NULL) {
        msr_gpt_gen_destroy(g);
        return msr_err(MSR_ERR_NO_MEMORY, "generate: out of memory for a cache of %zu floats", n);
    }
    gen_carve(cfg, g);
    for (int t = 0; t < cfg->max_seq; t++)
        g->kpos[t] = t;
    g->model = model;
    *gen_p = g;
    return MSR_OK;
}

void msr_gpt_gen_destroy(msr_gpt_gen_t *gen)
{
    if (gen == NULL)
        return;
    msr_free(gen->mem);
    msr_free(gen->kpos);
    msr_free(gen->cand);
    msr_free(gen);
}

void msr_gpt_gen_reset(msr_gpt_gen_t *gen)
{
    gen->pos = 0;
}

/* The block's attention (block.h's attend hook) through the cache: this
 * position's k and v join layer g->layer's cache, then its query attends
 * to positions 0..pos. out (1,C), lse (1,NH), qkv (1,3C), or a Llama's
 * (1, C + 2 KVC) rotated at its position. */
static msr_status_t gen_attend(void *arg, float *out, float *lse, const float *qkv)
{
    msr_gpt_gen_t *g = arg;
    const msr_gpt_config_t *cfg = &g->model->cfg;
    int C = cfg->channels, NH = cfg->heads, T = cfg->max_seq;
    size_t at = ((size_t)g->layer * (size_t)T + (size_t)g->pos) * (size_t)C;
    float *k = g->kcache + ((size_t)g->layer * (size_t)T) * (size_t)C;
    float *v = g->vcache + ((size_t)g->layer * (size_t)T) * (size_t)C;
    if (cfg->arch == MSR_GPT_ARCH_LLAMA) { /* q (C), then KVH heads of k, of v */
        int HS = C / NH, KVH = cfg->kv_heads, KVC = KVH * HS;
        for (int h = 0; h < NH; h++) { /* query head h reads key/value head h / (NH/KVH) */
            const float *kh = qkv + C + (size_t)(h / (NH / KVH)) * (size_t)HS;
            memcpy(g->kcache + at + (size_t)h * HS, kh, (size_t)HS * sizeof(float));
            memcpy(g->vcache + at + (size_t)h * HS, kh + KVC, (size_t)HS * sizeof(float));
        }
    } else {
        memcpy(g->kcache + at, qkv + C, (size_t)C * sizeof(float));     /* k (C) */
        memcpy(g->vcache + at, qkv + 2 * C, (size_t)C * sizeof(float)); /* v (C) */
    }
    memset(out, 0, (size_t)C * sizeof(float)); /* the sums build up in out: finish works in place */
    for (int h = 0; h < NH; h++) {
        g->mx[h] = -INFINITY;
        g->sum[h] = 0.0f;
    }
    msr_attention_ring_forward(g->model->prod, out, g->mx, g->sum, qkv, 3 * C, &g->pos, 1, k, v, C,
                               g->kpos, g->pos + 1, C, NH, g->scratch);
    msr_attention_ring_finish(out, lse, g->mx, g->sum, 1, C, NH);
    return MSR_OK;
}

/* A MoE block's MLP on the one position (block.h's mlp hook): its
 * load-balancing loss is not needed. */
typedef struct gen_moe {
    msr_gpt_t *model;
    int l;
    const msr_gpt_block_params_t *p;
} gen_moe_t;

static msr_status_t gen_moe_forward(void *arg, const float *in, float *out)
{
    gen_moe_t *c = arg;
    double aux;
    return msr_moe_forward(c->model->moe, c->l, c->p, in, 1, out, &aux);
}

msr_status_t msr_gpt_gen_step(msr_gpt_gen_t *gen, int token, const float **logits_p)
{
    msr_gpt_t *m = gen->model;
    const msr_gpt_config_t *cfg = &m->cfg;
    int C = cfg->channels, V = cfg->vocab, L = cfg->layers;
    if (token < 0 || token >= V)
        return msr_err(MSR_ERR_INVALID_ARG, "generate: token %d is not in [0, %d)", token, V);
    if (gen->pos >= cfg->max_seq) {
        return msr_err(MSR_ERR_INVALID_ARG, "generate: the cache is full (%d positions)",
                       cfg->max_seq);
    }
    /* embeddings: wte[token] + wpe[pos] (C); a Llama's: wte[token] */
    int llama = cfg->arch == MSR_GPT_ARCH_LLAMA;
    const float *wte = m->segments[0].params;       /* (V, C) */
    const float *wpe = wte + (size_t)V * (size_t)C; /* (maxT, C) */
    if (llama)
        msr_embedding_forward(gen->x, &token, wte, 1, C);
    else
        msr_encoder_forward(gen->x, &token, wte, wpe + (size_t)gen->pos * (size_t)C, 1, 1, C);

    /* the blocks on one position, attention through the cache */
    msr_block_comm_t comm = {.arg = gen, .attend = gen_attend};
    msr_block_t b = {.B = 1,
                     .T = 1,
                     .C = C,
                     .tp = 1,
                     .NHl = cfg->heads,
                     .Cl = C,
                     .Hl = llama ? cfg->ffn : 4 * C,
                     .N = 1,
                     .Nl = 1,
                     .llama = llama,
                     .NKVl = cfg->kv_heads,
                     .rope_theta = cfg->rope_theta,
                     .pos0 = gen->pos,
                     .comm = &comm,
                     .prod = m->prod,
                     .k = m->kernels,
                     .proj = gen->proj};
    for (int l = 0; l < L; l++) {
        msr_gpt_block_params_t p;
        msr_gpt_block_point_layer(cfg, l, m->segments[1 + l].params, &p);
        gen_moe_t moe = {m, l, &p};
        msr_block_mlp_t mlp = {gen_moe_forward, NULL, &moe};
        int is_moe = msr_gpt_layer_is_moe(cfg, l);
        if (is_moe)
            p.experts = msr_moe_block_params(m->moe, l, 0);
        gen->layer = l;
        msr_status_t st = msr_block_forward(&b, &p, &gen->a, gen->x, is_moe ? &mlp : NULL);
        if (st != MSR_OK)
            return st;
        memcpy(gen->x, gen->a.res3, (size_t)C * sizeof(float));
    }

    /* final layernorm and the tied head: logits (V) = lnf (C) @ wte^T; a
     * Llama's final RMSNorm and its head lm_head (V,C) after lnfw */
    const float *lnfw = m->segments[L + 1].params, *lnfb = lnfw + C; /* (C), (C) */
    if (llama)
        msr_rmsnorm_forward(gen->lnf, gen->lnf_rstd, gen->x, lnfw, 1, C);
    else
        msr_layernorm_forward(gen->lnf, gen->lnf_mean, gen->lnf_rstd, gen->x, lnfw, lnfb, 1, C);
    msr_matmul_forward(m->prod, gen->logits, gen->lnf, llama ? lnfb : wte, NULL, 1, C, V);
    msr_status_t st = msr_products_status(m->prod);
    if (st != MSR_OK)
        return st;
    gen->pos++;
    *logits_p = gen->logits;
    return MSR_OK;
}

msr_status_t msr_gpt_sampler_check(const msr_gpt_sampler_t *s, int V)
{
    if (!(s->temperature >= 0.0) || !isfinite(s->temperature)) {
        return msr_err(MSR_ERR_INVALID_ARG, "generate: temperature %g is not a finite number >= 0",
                       s->temperature);
    }
    if (s->top_k < 0 || s->top_k > V) {
        return msr_err(MSR_ERR_INVALID_ARG, "generate: top-k %d is not in [0, V = %d]", s->top_k,
                       V);
    }
    return MSR_OK;
}

/* larger logits first, the lower id first on ties */
static int cand_cmp(const void *pa, const void *pb)
{
    const gen_cand_t *a = pa, *b = pb;
    if (a->logit != b->logit)
        return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* A token from logits (V) as s says, with the counter-th number of
 * s->seed's stream. */
static int gen_sample(msr_gpt_gen_t *g, const msr_gpt_sampler_t *s, const float *logits, int V,
                      uint64_t counter)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = i;
    if (s->temperature == 0.0 || s->top_k == 1)
        return best;
    int k = s->top_k > 0 ? s->top_k : V;
    for (int i = 0; i < V; i++)
        g->cand[i] = (gen_cand_t){logits[i], i};
    qsort(g->cand, (size_t)V, sizeof *g->cand, cand_cmp);
    double total = 0.0, top = g->cand[0].logit;
    for (int i = 0; i < k; i++)
        total += exp(((double)g->cand[i].logit - top) / s->temperature);
    double u = msr_rng_open01(msr_rng_u64(s->seed, GEN_STREAM, counter)) * total, run = 0.0;
    for (int i = 0; i < k; i++) {
        run += exp(((double)g->cand[i].logit - top) / s->temperature);
        if (u <= run)
            return g->cand[i].id;
    }
    return g->cand[k - 1].id; /* u within rounding of the total */
}

msr_status_t msr_gpt_generate(msr_gpt_gen_t *gen, const int *prompt, int P, int n,
                              const msr_gpt_sampler_t *s, int *out)
{
    const msr_gpt_config_t *cfg = &gen->model->cfg;
    int V = cfg->vocab, T = cfg->max_seq;
    msr_status_t st = msr_gpt_sampler_check(s, V);
    if (st != MSR_OK)
        return st;
    if (P < 1 || n < 0 || P > T || n > T - P) {
        return msr_err(MSR_ERR_INVALID_ARG,
                       "generate: a prompt of %d tokens and %d new ones do not fit the model's "
                       "%d positions (at least 1 prompt token, prompt + new <= %d)",
                       P, n, T, T);
    }
    for (int i = 0; i < P; i++) {
        if (prompt[i] < 0 || prompt[i] >= V) {
            return msr_err(MSR_ERR_INVALID_ARG, "generate: prompt token %d is %d, not in [0, %d)",
                           i, prompt[i], V);
        }
    }
    msr_gpt_gen_reset(gen);
    const float *logits = NULL;
    for (int i = 0; i < P; i++)
        if ((st = msr_gpt_gen_step(gen, prompt[i], &logits)) != MSR_OK)
            return st;
    for (int i = 0; i < n; i++) {
        out[i] = gen_sample(gen, s, logits, V, (uint64_t)(P + i));
        if (i + 1 < n && (st = msr_gpt_gen_step(gen, out[i], &logits)) != MSR_OK)
            return st;
    }
    return MSR_OK;
}
