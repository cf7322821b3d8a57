/* One transformer block, forward and backward (see block.h). */
#include "model/block.h"

#include "model/kernels.h"
#include "model/layers.h"

static msr_status_t enter(const msr_block_t *b, const float *x, float *gbuf, const float **out_p)
{
    if (b->comm == NULL || b->comm->enter == NULL) {
        *out_p = x;
        return MSR_OK;
    }
    return b->comm->enter(b->comm->arg, x, gbuf, out_p);
}

static msr_status_t reduce(const msr_block_t *b, float *full, float *local, float **out_p)
{
    if (b->comm == NULL || b->comm->reduce == NULL) {
        *out_p = full;
        return MSR_OK;
    }
    return b->comm->reduce(b->comm->arg, full, local, out_p);
}

static msr_status_t poll(const msr_block_t *b)
{
    if (b->comm == NULL || b->comm->poll == NULL)
        return MSR_OK;
    return b->comm->poll(b->comm->arg);
}

/* The block's kernels (kernels.h): its own table, or the CPU's. */
static const msr_kernels_t *K(const msr_block_t *b)
{
    return b->k != NULL ? b->k : msr_kernels_cpu();
}

/* out (Nl,C) = x + r, the row-parallel layer's reduced output, plus its
 * bias (in the matmul already at tp = 1). */
static msr_status_t add_residual(const msr_block_t *b, float *out, const float *x, float *r,
                                 const float *bias)
{
    if (b->tp > 1 && bias != NULL)
        K(b)->add_bias(r, bias, b->Nl, b->C);
    K(b)->residual(out, x, r, b->Nl * (size_t)b->C);
    return poll(b);
}

/* out (Nl,C) = x + the row-parallel layer's output in proj (N,C), reduced
 * over tp, plus its bias. */
static msr_status_t residual(const msr_block_t *b, float *out, const float *x, const float *bias)
{
    float *r;
    msr_status_t st = reduce(b, b->proj, b->projl, &r);
    return st != MSR_OK ? st : add_residual(b, out, x, r, bias);
}

/* The width of this rank's q, k and v columns of qkv: 3Cl, or a Llama's
 * Cl + 2 KVl. */
static int qkv_width(const msr_block_t *b)
{
    return b->llama ? b->Cl + 2 * b->NKVl * (b->Cl / b->NHl) : 3 * b->Cl;
}

/* Rotary positions on H heads of qkv's columns x (dir 1) or back (-1):
 * row t of each sequence at pos0 + t, or at pos[t] (context parallel),
 * one call per run of consecutive positions. */
static void rope(const msr_block_t *b, float *x, int H, int dir)
{
    int HS = b->Cl / b->NHl, W = qkv_width(b);
    if (b->pos == NULL) {
        K(b)->rope(x, W, b->B, b->T, b->pos0, H, HS, b->rope_theta, dir);
        return;
    }
    for (int s = 0; s < b->B; s++) {
        for (int t = 0, n; t < b->T; t += n) {
            for (n = 1; t + n < b->T && b->pos[t + n] == b->pos[t] + n; n++)
                ;
            K(b)->rope(x + ((size_t)s * b->T + (size_t)t) * W, W, 1, n, b->pos[t], H, HS,
                       b->rope_theta, dir);
        }
    }
}

/* The Llama's attention on its qkv (N, Cl + 2 KVl), just projected: rotary
 * positions on q and k, then grouped-query attention, or the attend
 * hook's (generation's key/value cache, context parallel's ring). */
static msr_status_t llama_attend(const msr_block_t *b, msr_gpt_block_acts_t *a)
{
    rope(b, a->qkv, b->NHl, 1);
    rope(b, a->qkv + b->Cl, b->NKVl, 1);
    if (b->comm != NULL && b->comm->attend != NULL)
        return b->comm->attend(b->comm->arg, a->atty, a->att, a->qkv);
    K(b)->attention_gqa_forward(b->prod, a->atty, a->att, a->qkv, b->B, b->T, b->Cl, b->NHl,
                                b->NKVl);
    return MSR_OK;
}

/* Its backward: b->dqkv (N, Cl + 2 KVl) += from b->datty; the rotated q
 * and k gradients then turn back to those of the projection's output. */
static msr_status_t llama_attend_backward(const msr_block_t *b, const msr_gpt_block_acts_t *a)
{
    msr_status_t st = MSR_OK;
    if (b->comm != NULL && b->comm->attend_backward != NULL)
        st = b->comm->attend_backward(b->comm->arg, b->dqkv, b->datty, a->qkv, a->atty, a->att);
    else
        K(b)->attention_gqa_backward(b->prod, b->dqkv, b->datt, b->datty, a->qkv, a->att, b->B,
                                     b->T, b->Cl, b->NHl, b->NKVl);
    if (st != MSR_OK)
        return st;
    rope(b, b->dqkv, b->NHl, -1);
    rope(b, b->dqkv + b->Cl, b->NKVl, -1);
    return MSR_OK;
}

/* The bf16 operand of ln's product, for the kernel that writes ln (rows
 * of cols elements) to write beside it, when that product reads ln itself:
 * not gathered first (sequence parallel holds Nl < N rows); NULL
 * otherwise (model/layers.h, msr_products_operand) */
static uint16_t *operand(const msr_block_t *b, const float *ln, size_t rows, int cols)
{
    if (rows != b->N)
        return NULL;
    return K(b)->operand(b->prod, ln, rows * (size_t)cols);
}

/* ln = norm(x): LayerNorm (mean and rstd kept), or a Llama's RMSNorm
 * (rstd kept, no bias); fused: a LayerNorm whose next product is ln's
 * linear layer also hands that its bf16 operand. */
static void norm_forward(const msr_block_t *b, float *ln, float *mean, float *rstd, const float *x,
                         const float *w, const float *bias, int fused)
{
    if (b->llama)
        K(b)->rmsnorm_forward(ln, rstd, x, w, (int)b->Nl, b->C);
    else
        K(b)->layernorm_forward(ln, fused ? operand(b, ln, b->Nl, b->C) : NULL, mean, rstd, x, w,
                                bias, (int)b->Nl, b->C);
}

/* ---- forward in pieces ---- */

/* A pass's state between its pieces (fwd_piece): the block, its
 * parameters, activations and input, and its communication. Split (two
 * copies): a piece starts the communication its output needs and a later
 * piece waits for it, so that the other copy's pieces can run between;
 * else each collective blocks in the piece that needs its result. */
typedef struct fwd {
    const msr_block_t *b;
    const msr_gpt_block_params_t *p;
    msr_gpt_block_acts_t *a;
    const float *x;  /* the block's input (Nl,C) */
    int split;       /* two copies: started and waited for apart */
    void *req;       /* split: the copy's request in flight (or NULL) */
    int gathering;   /* req is an enter's, else a reduction's */
    const float *ln; /* a norm's output (Nl,C), to enter */
    const float *in; /* ... entered (N,C): the column-parallel layer's input */
} fwd_t;

/* The pieces of a pass, each ending where communication starts (or, for
 * the residuals, ending the communication before): msr_block_forward
 * runs them in order, msr_block_forward_split interleaves two copies'. */
enum {
    FWD_LN1,     /* ln1 = norm(x); start entering it */
    FWD_QKV,     /* wait for it; qkv = ln1 qkvw */
    FWD_ATTPROJ, /* attention; proj = atty attprojw; start its reduction */
    FWD_RES2,    /* wait for it; res2 = x + it + attprojb */
    FWD_LN2,     /* ln2 = norm(res2); start entering it */
    FWD_FC,      /* wait for it; fch = ln2 fcw */
    FWD_FCPROJ,  /* gelu (a Llama's swiglu); proj = fch_gelu fcprojw; start its reduction */
    FWD_RES3,    /* wait for it; res3 = res2 + it + fcprojb */
};

/* After a norm: its output ln (Nl,C) is the next column-parallel layer's
 * input; under sp two copies start gathering it here. */
static msr_status_t fwd_enter_start(fwd_t *f, const float *ln)
{
    const msr_block_comm_t *c = f->b->comm;
    f->ln = ln;
    if (!f->split || c->enter_start == NULL)
        return MSR_OK;
    f->gathering = 1;
    return c->enter_start(c->arg, ln, &f->req);
}

/* f->in = f->ln entered: the gather started for it, else a blocking one
 * (identity without sp). */
static msr_status_t fwd_enter_wait(fwd_t *f)
{
    const msr_block_comm_t *c = f->b->comm;
    void *q = f->req;
    if (q == NULL)
        return enter(f->b, f->ln, f->b->gat, &f->in);
    f->req = NULL;
    return c->enter_wait(c->arg, q, f->b->gat, &f->in);
}

/* The row-parallel projection's output in proj (N,C): split, its
 * reduction started (blocking: in fwd_residual). */
static msr_status_t fwd_reduce_start(fwd_t *f)
{
    const msr_block_comm_t *c = f->b->comm;
    if (!f->split)
        return MSR_OK;
    f->gathering = 0;
    return c->reduce_start(c->arg, f->b->proj, f->b->projl, &f->req);
}

/* out (Nl,C) = x + proj reduced over tp, plus its bias. */
static msr_status_t fwd_residual(fwd_t *f, float *out, const float *x, const float *bias)
{
    const msr_block_t *b = f->b;
    float *r;
    void *q = f->req;
    if (!f->split)
        return residual(b, out, x, bias);
    f->req = NULL;
    msr_status_t st = b->comm->reduce_wait(b->comm->arg, q, b->proj, b->projl, &r);
    return st != MSR_OK ? st : add_residual(b, out, x, r, bias);
}

/* Attention on qkv, just projected: out atty (N,Cl). */
static msr_status_t attend(const msr_block_t *b, msr_gpt_block_acts_t *a)
{
    if (b->llama)
        return llama_attend(b, a);
    if (b->comm != NULL && b->comm->attend != NULL)
        return b->comm->attend(b->comm->arg, a->atty, a->att, a->qkv);
    K(b)->attention_forward(b->prod, a->atty, a->att, a->qkv, b->B, b->T, b->Cl, b->NHl);
    return MSR_OK;
}

/* Piece k of f's pass (the enum above). */
static msr_status_t fwd_piece(fwd_t *f, int k)
{
    const msr_block_t *b = f->b;
    const msr_gpt_block_params_t *p = f->p;
    msr_gpt_block_acts_t *a = f->a;
    int C = b->C, N = (int)b->N, tp1 = b->tp == 1;
    msr_status_t st = MSR_OK;
    switch (k) {
    case FWD_LN1:
        norm_forward(b, a->ln1, a->ln1_mean, a->ln1_rstd, f->x, p->ln1w, p->ln1b, 1);
        return fwd_enter_start(f, a->ln1);
    case FWD_QKV:
        if ((st = fwd_enter_wait(f)) != MSR_OK)
            return st;
        K(b)->matmul_forward(b->prod, a->qkv, f->in, p->qkvw, p->qkvb, N, C, qkv_width(b));
        return poll(b);
    case FWD_ATTPROJ:
        if ((st = attend(b, a)) != MSR_OK || (st = poll(b)) != MSR_OK)
            return st;
        K(b)->matmul_forward(b->prod, b->proj, a->atty, p->attprojw, tp1 ? p->attprojb : NULL, N,
                             b->Cl, C);
        return fwd_reduce_start(f);
    case FWD_RES2:
        return fwd_residual(f, a->res2, f->x, p->attprojb);
    case FWD_LN2:
        norm_forward(b, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, 1);
        return fwd_enter_start(f, a->ln2);
    case FWD_FC:
        if ((st = fwd_enter_wait(f)) != MSR_OK)
            return st;
        /* GELU's fc (N,Hl), or a Llama's gate and up (N,2Hl) */
        K(b)->matmul_forward(b->prod, a->fch, f->in, p->fcw, p->fcb, N, C,
                             b->llama ? 2 * b->Hl : b->Hl);
        return poll(b);
    case FWD_FCPROJ:
        if (b->llama)
            K(b)->swiglu_forward(a->fch_gelu, a->fch, N, b->Hl);
        else
            K(b)->gelu_forward(a->fch_gelu, operand(b, a->fch_gelu, b->N, b->Hl), a->fch,
                               b->N * (size_t)b->Hl);
        /* (two copies: the other copy's gather, started just before this
         * piece, progresses only when tested) */
        if ((st = poll(b)) != MSR_OK)
            return st;
        K(b)->matmul_forward(b->prod, b->proj, a->fch_gelu, p->fcprojw, tp1 ? p->fcprojb : NULL, N,
                             b->Hl, C);
        return fwd_reduce_start(f);
    default: /* FWD_RES3 */
        return fwd_residual(f, a->res3, a->res2, p->fcprojb);
    }
}

/* res2 + reduce(mlp(enter(ln2(res2)))): the caller's MLP (block.h) */
static msr_status_t hook_forward(const msr_block_t *b, const msr_gpt_block_params_t *p,
                                 msr_gpt_block_acts_t *a, const msr_block_mlp_t *mlp)
{
    const float *in;
    float *r;
    norm_forward(b, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, 0);
    msr_status_t st = enter(b, a->ln2, b->gat, &in);
    if (st != MSR_OK || (st = mlp->forward(mlp->arg, in, b->proj)) != MSR_OK ||
        (st = reduce(b, b->proj, b->projl, &r)) != MSR_OK)
        return st;
    K(b)->residual(a->res3, a->res2, r, b->Nl * (size_t)b->C);
    return poll(b);
}

msr_status_t msr_block_forward(const msr_block_t *b, const msr_gpt_block_params_t *p,
                               msr_gpt_block_acts_t *a, const float *x, const msr_block_mlp_t *mlp)
{
    fwd_t f = {.b = b, .p = p, .a = a, .x = x};
    msr_status_t st = MSR_OK;
    /* the attention half, then the dense MLP's pieces or the caller's */
    for (int k = FWD_LN1; k <= (mlp != NULL ? FWD_RES2 : FWD_RES3) && st == MSR_OK; k++)
        st = fwd_piece(&f, k);
    if (st == MSR_OK && mlp != NULL)
        st = hook_forward(b, p, a, mlp);
    /* a failed product (logged where it failed) spoils the pass */
    return st != MSR_OK ? st : msr_products_status(b->prod);
}

/* ---- two copies (tensor-parallel overlap) ---- */

/* The order of the two copies' pieces (copy A or B, then the piece's
 * number in fwd_piece's enum), each copy's in its own order. Without
 * gathers to start (no sp) each copy runs its attention half, then its
 * MLP, while the other copy's reduction is in flight:
 *   A ln1 qkv attproj | B ln1 qkv attproj | A res2 ln2 fc fcproj |
 *   B res2 ln2 fc fcproj | A res3 | B res3
 * With them a copy's chain alternates collective and compute (gather,
 * attention, reduce-scatter, residual and norm, gather, MLP,
 * reduce-scatter), so the copies alternate at each of its collectives:
 * each of a copy's gathers and reductions runs behind the other copy's
 * next products, all but A's first gather (behind B's ln1 only) and B's
 * last reduction (waited for whole):
 *   A ln1 | B ln1 | A qkv attproj | B qkv | A res2 ln2 | B attproj |
 *   A fc | B res2 ln2 | A fcproj | B fc fcproj | A res3 | B res3 */
static const char *const split_order[2] = {
    "A0A1A2B0B1B2A3A4A5A6B3B4B5B6A7B7",
    "A0B0A1A2B1A3A4B2A5B3B4A6B5B6A7B7",
};

msr_status_t msr_block_forward_split(const msr_block_t *h, const msr_gpt_block_params_t *p,
                                     msr_gpt_block_acts_t *a, const float *const *x)
{
    fwd_t f[2];
    for (int i = 0; i < 2; i++)
        f[i] = (fwd_t){.b = &h[i], .p = p, .a = &a[i], .x = x[i], .split = 1};
    msr_status_t st = MSR_OK;
    for (const char *s = split_order[h[0].comm->enter_start != NULL]; *s && st == MSR_OK; s += 2)
        st = fwd_piece(&f[s[0] - 'A'], s[1] - '0');
    /* after a failure, the copies' requests in flight finished; the first
     * failure is what the pass returns */
    for (int i = 0; i < 2; i++) {
        const msr_block_comm_t *c = h[i].comm;
        const float *in;
        float *r;
        if (f[i].req == NULL)
            continue;
        if (f[i].gathering)
            (void)c->enter_wait(c->arg, f[i].req, h[i].gat, &in);
        else
            (void)c->reduce_wait(c->arg, f[i].req, h[i].proj, h[i].projl, &r);
    }
    return st != MSR_OK ? st : msr_products_status(h[0].prod);
}

/* The row-parallel projection's backward: its output gradient dres (Nl,C)
 * enters as is (gathered under sp); din (N,IC) = its input's gradient. */
static msr_status_t proj_backward(const msr_block_t *b, float *din, float *dw, float *db,
                                  const float *dres, const float *in, const float *w, int IC)
{
    const float *dfull;
    msr_status_t st = enter(b, dres, b->dgat, &dfull);
    if (st != MSR_OK)
        return st;
    /* din written, not added to: no pass to zero it first */
    K(b)->matmul_backward_set(b->prod, din, dw, b->tp == 1 ? db : NULL, dfull, in, w, (int)b->N, IC,
                              b->C);
    if (b->tp > 1 && db != NULL) /* a Llama has no biases */
        K(b)->add_colsum(db, dres, b->Nl, b->C);
    return poll(b);
}

/* dres (Nl,C) += the gradient of a norm's input x from dl, its output's
 * reduced gradient. */
static void norm_input_backward(const msr_block_t *b, float *dres, const float *dl, const float *x,
                                const float *lnw, float *dlnw, float *dlnb, const float *mean,
                                const float *rstd)
{
    if (b->llama)
        K(b)->rmsnorm_backward(dres, dlnw, dl, x, lnw, rstd, (int)b->Nl, b->C);
    else
        K(b)->layernorm_backward(dres, dlnw, dlnb, dl, x, lnw, mean, rstd, (int)b->Nl, b->C);
}

/* The column-parallel layer's backward (weight w (OC,C), input ln (Nl,C)
 * gathered), then the layernorm's: dres (Nl,C) += the gradient of the
 * layernorm's input x. */
static msr_status_t norm_backward(const msr_block_t *b, float *dres, const float *dout, int OC,
                                  const float *ln, const float *w, float *dw, float *db,
                                  const float *x, const float *lnw, float *dlnw, float *dlnb,
                                  const float *mean, const float *rstd, void **defer)
{
    const float *in;
    float *dl;
    msr_status_t st = enter(b, ln, b->gat, &in);
    if (st != MSR_OK)
        return st;
    K(b)->matmul_backward_set(b->prod, b->dln, dw, db, dout, in, w, (int)b->N, b->C, OC);
    if ((st = poll(b)) != MSR_OK)
        return st;
    if (defer != NULL) /* two copies: the reduction started, the norm's backward later */
        return b->comm->reduce_start(b->comm->arg, b->dln, b->dlnl, defer);
    if ((st = reduce(b, b->dln, b->dlnl, &dl)) != MSR_OK)
        return st;
    norm_input_backward(b, dres, dl, x, lnw, dlnw, dlnb, mean, rstd);
    return MSR_OK;
}

/* The dense MLP's backward: dres (Nl,C), the gradient of res3, becomes
 * that of res2. */
static msr_status_t mlp_backward(const msr_block_t *b, const msr_gpt_block_params_t *p,
                                 const msr_gpt_block_params_t *g, const msr_gpt_block_acts_t *a,
                                 float *dres, void **defer)
{
    size_t NH = b->N * (size_t)b->Hl;
    int OC = b->llama ? 2 * b->Hl : b->Hl; /* fc's outputs: a Llama's gate and up */
    /* res3 = res2 + mlp(ln2(res2)): dres reaches res2 unchanged through the
     * skip, and is the gradient of the MLP's output */
    msr_status_t st = proj_backward(b, b->dfch_gelu, g->fcprojw, g->fcprojb, dres, a->fch_gelu,
                                    p->fcprojw, b->Hl);
    if (st != MSR_OK)
        return st;
    if (b->llama) {
        K(b)->zero(b->dfch, b->N * (size_t)OC);
        K(b)->swiglu_backward(b->dfch, a->fch, b->dfch_gelu, (int)b->N, b->Hl);
    } else { /* dfch zeroed a block at a time; fc's backward takes its rounding */
        K(b)->gelu_backward_set(b->dfch, operand(b, b->dfch, b->N, OC), a->fch, b->dfch_gelu, NH);
    }
    return norm_backward(b, dres, b->dfch, OC, a->ln2, p->fcw, g->fcw, g->fcb, a->res2, p->ln2w,
                         g->ln2w, g->ln2b, a->ln2_mean, a->ln2_rstd, defer);
}

/* The attention half's backward: dres (Nl,C), the gradient of res2,
 * becomes that of x. */
static msr_status_t attn_backward(const msr_block_t *b, const msr_gpt_block_params_t *p,
                                  const msr_gpt_block_params_t *g, const msr_gpt_block_acts_t *a,
                                  const float *x, float *dres, void **defer)
{
    /* res2 = x + attn(ln1(x)): dres reaches x through the skip */
    msr_status_t st =
        proj_backward(b, b->datty, g->attprojw, g->attprojb, dres, a->atty, p->attprojw, b->Cl);
    if (st != MSR_OK)
        return st;
    bool own = !b->llama && (b->comm == NULL || b->comm->attend_backward == NULL);
    if (!own) /* they add into dqkv; the causal kernel writes it */
        K(b)->zero(b->dqkv, b->N * (size_t)qkv_width(b));
    if (b->llama)
        st = llama_attend_backward(b, a);
    else if (!own)
        st = b->comm->attend_backward(b->comm->arg, b->dqkv, b->datty, a->qkv, a->atty, a->att);
    else
        K(b)->attention_backward_set(b->prod, b->dqkv, b->datt, b->datty, a->qkv, a->att, b->B,
                                     b->T, b->Cl, b->NHl);
    if (st != MSR_OK || (st = poll(b)) != MSR_OK)
        return st;
    /* dres = d x */
    return norm_backward(b, dres, b->dqkv, qkv_width(b), a->ln1, p->qkvw, g->qkvw, g->qkvb, x,
                         p->ln1w, g->ln1w, g->ln1b, a->ln1_mean, a->ln1_rstd, defer);
}

/* The caller's MLP's backward: dres (Nl,C), the gradient of res3, becomes
 * that of res2. */
static msr_status_t hook_backward(const msr_block_t *b, const msr_gpt_block_params_t *p,
                                  const msr_gpt_block_params_t *g, const msr_gpt_block_acts_t *a,
                                  const msr_block_mlp_t *mlp, float *dres)
{
    const float *dfull, *in;
    float *dl;
    /* res3 = res2 + mlp(ln2(res2)): dres reaches res2 through the skip */
    msr_status_t st = enter(b, dres, b->dgat, &dfull);
    if (st != MSR_OK || (st = enter(b, a->ln2, b->gat, &in)) != MSR_OK)
        return st;
    K(b)->zero(b->dln, b->N * (size_t)b->C);
    if ((st = mlp->backward(mlp->arg, in, dfull, b->dln)) != MSR_OK || (st = poll(b)) != MSR_OK ||
        (st = reduce(b, b->dln, b->dlnl, &dl)) != MSR_OK)
        return st;
    norm_input_backward(b, dres, dl, a->res2, p->ln2w, g->ln2w, g->ln2b, a->ln2_mean, a->ln2_rstd);
    return MSR_OK;
}

msr_status_t msr_block_backward(const msr_block_t *b, const msr_gpt_block_params_t *p,
                                const msr_gpt_block_params_t *g, const msr_gpt_block_acts_t *a,
                                const float *x, float *dres, const msr_block_mlp_t *mlp)
{
    /* res3 = res2 + mlp(ln2(res2)), then res2 = x + attn(ln1(x)) */
    msr_status_t st =
        mlp != NULL ? hook_backward(b, p, g, a, mlp, dres) : mlp_backward(b, p, g, a, dres, NULL);
    if (st == MSR_OK)
        st = attn_backward(b, p, g, a, x, dres, NULL);
    return st != MSR_OK ? st : msr_products_status(b->prod);
}

/* Copy i's norm backward once its reduction is in: dres[i] += the gradient
 * of the norm's input (ln2's: res2; ln1's: x[i]). */
static msr_status_t split_norm_backward(const msr_block_t *h, void **req, int i, int ln1,
                                        const msr_gpt_block_params_t *p,
                                        const msr_gpt_block_params_t *g,
                                        const msr_gpt_block_acts_t *a, const float *x, float *dres)
{
    float *dl;
    void *q = req[i];
    req[i] = NULL;
    msr_status_t st = h[i].comm->reduce_wait(h[i].comm->arg, q, h[i].dln, h[i].dlnl, &dl);
    if (st != MSR_OK)
        return st;
    if (ln1)
        norm_input_backward(&h[i], dres, dl, x, p->ln1w, g->ln1w, g->ln1b, a[i].ln1_mean,
                            a[i].ln1_rstd);
    else
        norm_input_backward(&h[i], dres, dl, a[i].res2, p->ln2w, g->ln2w, g->ln2b, a[i].ln2_mean,
                            a[i].ln2_rstd);
    return MSR_OK;
}

msr_status_t msr_block_backward_split(const msr_block_t *h, const msr_gpt_block_params_t *p,
                                      const msr_gpt_block_params_t *g,
                                      const msr_gpt_block_acts_t *a, const float *const *x,
                                      float *const *dres)
{
    void *req[2] = {NULL, NULL};
    msr_status_t st = MSR_OK;
    /* each copy's MLP backward up to ln2's reduction, started; then each
     * copy's ln2 and attention backward while the other's is in flight */
    for (int i = 0; i < 2 && st == MSR_OK; i++)
        st = mlp_backward(&h[i], p, g, &a[i], dres[i], &req[i]);
    for (int i = 0; i < 2 && st == MSR_OK; i++)
        if ((st = split_norm_backward(h, req, i, 0, p, g, a, x[i], dres[i])) == MSR_OK)
            st = attn_backward(&h[i], p, g, &a[i], x[i], dres[i], &req[i]);
    for (int i = 0; i < 2 && st == MSR_OK; i++)
        st = split_norm_backward(h, req, i, 1, p, g, a, x[i], dres[i]);
    if (st != MSR_OK) {
        for (int i = 0; i < 2; i++) {
            float *r;
            if (req[i] != NULL)
                (void)h[i].comm->reduce_wait(h[i].comm->arg, req[i], h[i].dln, h[i].dlnl, &r);
        }
        return st;
    }
    return msr_products_status(h[0].prod);
}
