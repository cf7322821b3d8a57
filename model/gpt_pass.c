/* The GPT's forward and backward passes (see gpt.h): the model read top to
 * bottom, block after block, with the hooks (acquire, release,
 * grads_ready, poll) called around each segment. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/util.h"
#include "layout/layout.h"
#include "model/block.h"
#include "model/kernels.h"
#include "model/layers.h"
#include "model/moe.h"
#include "model/rng.h"
#include "model/gpt_impl.h"

/* ---- hooks ---- */

static msr_status_t hook_acquire(const msr_gpt_hooks_t *h, msr_gpt_t *m, int seg, msr_gpt_pass_t p)
{
    return h != NULL && h->acquire != NULL ? h->acquire(h->arg, m, seg, p) : MSR_OK;
}

static msr_status_t hook_release(const msr_gpt_hooks_t *h, msr_gpt_t *m, int seg, msr_gpt_pass_t p)
{
    return h != NULL && h->release != NULL ? h->release(h->arg, m, seg, p) : MSR_OK;
}

static msr_status_t hook_grads_ready(const msr_gpt_hooks_t *h, msr_gpt_t *m, int seg)
{
    return h != NULL && h->grads_ready != NULL ? h->grads_ready(h->arg, m, seg) : MSR_OK;
}

static msr_status_t hook_poll(const msr_gpt_hooks_t *h, msr_gpt_t *m)
{
    return h != NULL && h->poll != NULL ? h->poll(h->arg, m) : MSR_OK;
}

/* ---- forward ---- */

/* The whole model's block (model/block.h): tp = 1, the model's work
 * space, the hooks' poll between the kernels. */
typedef struct block_poll {
    const msr_gpt_hooks_t *hooks;
    msr_gpt_t *model;
} block_poll_t;

static msr_status_t block_poll(void *arg)
{
    block_poll_t *bp = arg;
    return hook_poll(bp->hooks, bp->model);
}

static void whole_block(msr_gpt_t *m, int B, int T, const msr_block_comm_t *comm, msr_block_t *b)
{
    int C = m->cfg.channels;
    size_t N = (size_t)B * (size_t)T;
    const msr_gpt_work_t *w = &m->work;
    *b = (msr_block_t){
        .B = B,
        .T = T,
        .C = C,
        .tp = 1,
        .NHl = m->cfg.heads,
        .Cl = C,
        .Hl = m->cfg.arch == MSR_GPT_ARCH_LLAMA ? m->cfg.ffn : 4 * C,
        .N = N,
        .Nl = N,
        .llama = m->cfg.arch == MSR_GPT_ARCH_LLAMA,
        .NKVl = m->cfg.kv_heads,
        .rope_theta = m->cfg.rope_theta,
        .comm = comm,
        .prod = m->prod,
        .k = m->kernels,
        .proj = m->acts.proj,
        .dln = w->dln,
        .dqkv = w->dqkv,
        .datty = w->datty,
        .dfch = w->dfch,
        .dfch_gelu = w->dfch_gelu,
        .datt = w->datt,
    };
}

/* A MoE block's MLP (model/moe.h) as the block's (block.h): res3 = res2 +
 * moe(ln2(res2)); forward leaves its load-balancing loss in aux, backward
 * takes that loss's gradient as aux_weight. */
typedef struct moe_mlp {
    msr_gpt_t *model;
    int l, N;
    const msr_gpt_block_params_t *p, *g;
    float aux_weight;
    double aux;
} moe_mlp_t;

static msr_status_t moe_mlp_forward(void *arg, const float *in, float *out)
{
    moe_mlp_t *c = arg;
    return msr_moe_forward(c->model->moe, c->l, c->p, in, c->N, out, &c->aux);
}

static msr_status_t moe_mlp_backward(void *arg, const float *in, const float *dout, float *din)
{
    moe_mlp_t *c = arg;
    return msr_moe_backward(c->model->moe, c->l, c->p, c->g, in, dout, din, c->aux_weight);
}

/* Block l on in (B,T,C) (*aux_p += a MoE block's load-balancing loss), or
 * its backward (dres: see msr_block_backward; aux_weight: the gradient of
 * that loss). */
static msr_status_t block_pass(msr_gpt_t *model, int l, const float *in, float *dres, int B, int T,
                               const msr_gpt_hooks_t *hooks, double *aux_p, float aux_weight)
{
    block_poll_t bp = {hooks, model};
    msr_block_comm_t comm = {&bp, NULL, NULL, block_poll};
    msr_block_t b;
    whole_block(model, B, T, &comm, &b);
    const msr_gpt_segment_t *s = &model->segments[1 + l];
    int moe = msr_gpt_layer_is_moe(&model->cfg, l);
    msr_gpt_block_params_t p, g;
    moe_mlp_t c = {model, l, B * T, &p, &g, aux_weight, 0.0};
    msr_block_mlp_t mlp = {moe_mlp_forward, moe_mlp_backward, &c};
    msr_gpt_block_point_layer(&model->cfg, l, s->params, &p);
    if (moe)
        p.experts = msr_moe_block_params(model->moe, l, 0);
    if (dres == NULL) {
        msr_status_t st = msr_block_forward(&b, &p, &model->acts.blocks[l], in, moe ? &mlp : NULL);
        if (st == MSR_OK && moe)
            *aux_p += c.aux;
        return st;
    }
    msr_gpt_block_point_layer(&model->cfg, l, s->grads, &g);
    if (moe)
        g.experts = msr_moe_block_params(model->moe, l, 1);
    return msr_block_backward(&b, &p, &g, &model->acts.blocks[l], in, dres, moe ? &mlp : NULL);
}

/* A chunked head's loss (msr_gpt_create_chunked): each chunk of the
 * head's rows W (V, C) gives its logits (N, n) into acts->logits, their
 * maxima and sums of exponentials (the exponentials into the work space's
 * dlogits), folded into every row's maximum M, sum S and target logit Z
 * (acts->probs: M, S, Z, then the chunk's maxima and its sums and target
 * logits); the losses M + log S - Z into acts->losses. */
static msr_status_t head_chunks(msr_gpt_t *model, const float *W, const int *targets, int N)
{
    const msr_kernels_t *k = msr_kernels_or_cpu(model->kernels);
    msr_gpt_acts_t *a = &model->acts;
    int C = model->cfg.channels, V = model->cfg.vocab, hc = model->head_chunk;
    size_t n_ = (size_t)N;
    float *M = a->probs, *S = M + n_, *Z = S + n_, *rmax = Z + n_, *red = rmax + n_;
    for (int v0 = 0; v0 < V; v0 += hc) {
        int n = V - v0 < hc ? V - v0 : hc;
        k->matmul_forward(model->prod, a->logits, a->lnf, W + (size_t)v0 * (size_t)C, NULL, N, C,
                          n);
        msr_status_t st = msr_products_status(model->prod);
        if (st != MSR_OK)
            return st;
        k->vocab_max(rmax, a->logits, n_, n);
        k->vocab_exp_sums(model->work.dlogits, red, a->logits, rmax, targets, v0, n_, n);
        k->vocab_fold(M, S, Z, rmax, red, n_, v0 == 0);
    }
    k->vocab_loss(model->work.dlogits, a->losses, M, S, n_, 0); /* the losses only */
    return MSR_OK;
}

/* The final norm and the output head: logits (B,T,V) = norm(x) (B,T,C) @
 * head^T, x (N,C) the last block's output (a chunked head: the losses of
 * targets, head_chunks). The GPT's: a layernorm and the head tied to wte
 * (segment 0); a Llama's: an RMSNorm and an untied lm_head, both in
 * segment L+1. */
static msr_status_t head_forward(msr_gpt_t *model, const float *x, int N, const int *targets,
                                 const msr_gpt_hooks_t *hooks)
{
    int C = model->cfg.channels, V = model->cfg.vocab, L = model->cfg.layers;
    int llama = model->cfg.arch == MSR_GPT_ARCH_LLAMA;
    msr_gpt_acts_t *acts = &model->acts;
    const msr_kernels_t *k = msr_kernels_or_cpu(model->kernels);
    msr_status_t st;
    if ((st = hook_acquire(hooks, model, L + 1, MSR_GPT_FORWARD)) != MSR_OK)
        return st;
    const float *lnfw = model->segments[L + 1].params; /* (C) */
    if (llama) {
        k->rmsnorm_forward(acts->lnf, acts->lnf_rstd, x, lnfw, N, C);
    } else {
        /* the head's product takes lnf's bf16 rounding as it is written */
        uint16_t *lnf16 = k->operand(model->prod, acts->lnf, (size_t)N * (size_t)C);
        k->layernorm_forward(acts->lnf, lnf16, acts->lnf_mean, acts->lnf_rstd, x, lnfw, lnfw + C, N,
                             C);
        if ((st = hook_release(hooks, model, L + 1, MSR_GPT_FORWARD)) != MSR_OK ||
            (st = hook_acquire(hooks, model, 0, MSR_GPT_FORWARD)) != MSR_OK)
            return st;
    }
    /* (V, C): a Llama's lm_head after lnfw, the GPT's wte */
    const float *head = llama ? lnfw + C : model->segments[0].params;
    if (model->head_chunk > 0)
        st = head_chunks(model, head, targets, N);
    else
        k->matmul_forward(model->prod, acts->logits, acts->lnf, head, NULL, N, C, V);
    if (st != MSR_OK || (st = msr_products_status(model->prod)) != MSR_OK)
        return st;
    return hook_release(hooks, model, llama ? L + 1 : 0, MSR_GPT_FORWARD);
}

/* The head's backward, from w->dlogits: a Llama's (segment L+1: lm_head
 * and the final RMSNorm), or the GPT's (segment 0's wte, then L+1's final
 * layernorm); leaves the gradient of the last block's output in w->dres
 * and calls grads_ready(L+1). */
static msr_status_t head_backward(msr_gpt_t *model, const msr_gpt_hooks_t *hooks)
{
    const msr_gpt_config_t *cfg = &model->cfg;
    int N = model->B * model->T, C = cfg->channels, V = cfg->vocab, L = cfg->layers;
    int llama = cfg->arch == MSR_GPT_ARCH_LLAMA;
    msr_gpt_acts_t *acts = &model->acts;
    msr_gpt_work_t *w = &model->work;
    const msr_kernels_t *k = msr_kernels_or_cpu(model->kernels);
    msr_status_t st;
    if (!llama) { /* dlnf (N,C) += dlogits @ wte, dwte += dlogits^T @ lnf */
        if ((st = hook_acquire(hooks, model, 0, MSR_GPT_BACKWARD)) != MSR_OK)
            return st;
        k->matmul_backward(model->prod, w->dln, model->segments[0].grads, NULL, w->dlogits,
                           acts->lnf, model->segments[0].params, N, C, V);
        if ((st = msr_products_status(model->prod)) != MSR_OK)
            return st;
        if ((st = hook_release(hooks, model, 0, MSR_GPT_BACKWARD)) != MSR_OK)
            return st;
    }
    /* final norm: its input is the last block's output */
    if ((st = hook_acquire(hooks, model, L + 1, MSR_GPT_BACKWARD)) != MSR_OK)
        return st;
    const float *lnfw = model->segments[L + 1].params; /* (C) */
    float *dlnfw = model->segments[L + 1].grads;       /* (C) */
    if (llama) {                                       /* lm_head (V,C) after lnfw */
        k->matmul_backward(model->prod, w->dln, dlnfw + C, NULL, w->dlogits, acts->lnf, lnfw + C, N,
                           C, V);
        if ((st = msr_products_status(model->prod)) != MSR_OK)
            return st;
        k->rmsnorm_backward(w->dres, dlnfw, w->dln, acts->blocks[L - 1].res3, lnfw, acts->lnf_rstd,
                            N, C);
    } else {
        k->layernorm_backward(w->dres, dlnfw, dlnfw + C, w->dln, acts->blocks[L - 1].res3, lnfw,
                              acts->lnf_mean, acts->lnf_rstd, N, C);
    }
    if ((st = hook_release(hooks, model, L + 1, MSR_GPT_BACKWARD)) != MSR_OK)
        return st;
    return hook_grads_ready(hooks, model, L + 1);
}

static msr_status_t check_tokens(const int *tokens, size_t n, int V, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= V) {
            return msr_err(MSR_ERR_INVALID_ARG, "gpt: %s[%zu] = %d is not a token in [0, %d)", what,
                           i, tokens[i], V);
        }
    }
    return MSR_OK;
}

msr_status_t msr_gpt_forward(msr_gpt_t *model, const int *inputs, const int *targets, int B, int T,
                             const msr_gpt_hooks_t *hooks, double *loss_p)
{
    const msr_gpt_config_t *cfg = &model->cfg;
    int C = cfg->channels, V = cfg->vocab, L = cfg->layers;
    if (model->max_batch == 0) {
        return msr_err(MSR_ERR_STATE,
                       "gpt: forward of a part of the model (parallel/mp.h runs those)");
    }
    if (B < 1 || B > model->max_batch || T < 1 || T > cfg->max_seq) {
        return msr_err(MSR_ERR_INVALID_ARG, "gpt: batch %d x %d does not fit the model's %d x %d",
                       B, T, model->max_batch, cfg->max_seq);
    }
    if (model->head_chunk > 0 && targets == NULL) {
        return msr_err(MSR_ERR_STATE, "gpt: a chunked head computes the loss, not the logits: "
                                      "forward needs targets");
    }
    int N = B * T, llama = cfg->arch == MSR_GPT_ARCH_LLAMA;
    msr_status_t st = check_tokens(inputs, (size_t)N, V, "inputs");
    if (st == MSR_OK && targets != NULL)
        st = check_tokens(targets, (size_t)N, V, "targets");
    if (st != MSR_OK)
        return st;
    model->B = model->T = 0; /* no backward until this forward completes */
    msr_gpt_acts_t *acts = &model->acts;
    const msr_kernels_t *k = msr_kernels_or_cpu(model->kernels);

    /* embeddings: (B,T) tokens -> (B,T,C) */
    if ((st = hook_acquire(hooks, model, 0, MSR_GPT_FORWARD)) != MSR_OK)
        return st;
    const float *wte = model->segments[0].params;   /* (V, C) */
    const float *wpe = wte + (size_t)V * (size_t)C; /* (maxT, C); a Llama has none */
    if (llama)
        k->embedding_forward(acts->encoded, inputs, wte, N, C);
    else
        k->encoder_forward(acts->encoded, inputs, wte, wpe, B, T, C);
    if ((st = hook_release(hooks, model, 0, MSR_GPT_FORWARD)) != MSR_OK)
        return st;

    /* the blocks, each reading the previous one's output */
    const float *x = acts->encoded; /* (B,T,C) */
    double aux = 0.0;               /* the MoE blocks' load-balancing losses */
    for (int l = 0; l < L; l++) {
        if ((st = hook_acquire(hooks, model, 1 + l, MSR_GPT_FORWARD)) != MSR_OK)
            return st;
        if ((st = block_pass(model, l, x, NULL, B, T, hooks, &aux, 0.0f)) != MSR_OK)
            return st;
        if ((st = hook_release(hooks, model, 1 + l, MSR_GPT_FORWARD)) != MSR_OK)
            return st;
        x = acts->blocks[l].res3;
    }

    if ((st = head_forward(model, x, N, targets, hooks)) != MSR_OK)
        return st;
    if (targets == NULL)
        return MSR_OK;

    if (model->head_chunk == 0)
        k->crossentropy_forward(acts->losses, acts->probs, acts->logits, targets, N, V);
    double sum = 0.0;
    for (int i = 0; i < N; i++)
        sum += acts->losses[i];
    memcpy(model->inputs, inputs, (size_t)N * sizeof(int));
    memcpy(model->targets, targets, (size_t)N * sizeof(int));
    model->B = B;
    model->T = T;
    *loss_p = sum / N + aux;
    return MSR_OK;
}

/* ---- backward ---- */

msr_status_t msr_gpt_backward(msr_gpt_t *model, float dloss, const msr_gpt_hooks_t *hooks)
{
    if (model->head_chunk > 0) {
        return msr_err(MSR_ERR_STATE, "gpt: backward of a model with a chunked head (its loss "
                                      "only: msr_gpt_create_chunked)");
    }
    if (model->B == 0) {
        return msr_err(MSR_ERR_STATE, "gpt: backward without a forward with targets");
    }
    const msr_gpt_config_t *cfg = &model->cfg;
    int B = model->B, T = model->T, N = B * T;
    int C = cfg->channels, V = cfg->vocab, L = cfg->layers;
    size_t NC = (size_t)N * C;
    msr_gpt_acts_t *acts = &model->acts;
    msr_gpt_work_t *w = &model->work;
    const msr_kernels_t *k = msr_kernels_or_cpu(model->kernels);
    msr_status_t st;

    k->zero(w->dlogits, (size_t)N * V);
    k->zero(w->dres, NC);
    k->zero(w->dln, NC);
    k->crossentropy_backward(w->dlogits, acts->probs, model->targets, dloss, N, V);

    if ((st = head_backward(model, hooks)) != MSR_OK)
        return st;

    for (int l = L - 1; l >= 0; l--) {
        const float *in = l == 0 ? acts->encoded : acts->blocks[l - 1].res3; /* (B,T,C) */
        if ((st = hook_acquire(hooks, model, 1 + l, MSR_GPT_BACKWARD)) != MSR_OK)
            return st;
        if ((st = block_pass(model, l, in, w->dres, B, T, hooks, NULL, dloss * (float)N)) != MSR_OK)
            return st;
        if ((st = hook_release(hooks, model, 1 + l, MSR_GPT_BACKWARD)) != MSR_OK)
            return st;
        if ((st = hook_grads_ready(hooks, model, 1 + l)) != MSR_OK)
            return st;
    }

    /* embeddings: dwte and dwpe get the rows of dres */
    if ((st = hook_acquire(hooks, model, 0, MSR_GPT_BACKWARD)) != MSR_OK)
        return st;
    float *dwte = model->segments[0].grads;     /* (V, C) */
    float *dwpe = dwte + (size_t)V * (size_t)C; /* (maxT, C); a Llama has none */
    if (cfg->arch == MSR_GPT_ARCH_LLAMA)
        k->embedding_backward(dwte, w->dres, model->inputs, N, C);
    else
        k->encoder_backward(dwte, dwpe, w->dres, model->inputs, B, T, C);
    if ((st = hook_release(hooks, model, 0, MSR_GPT_BACKWARD)) != MSR_OK)
        return st;
    return hook_grads_ready(hooks, model, 0);
}
