/* Model parallel's step (see mp.h): a block's forward, backward and
 * recompute on this rank's part, the pipeline's frames, sends and
 * receives, the forwards and backwards in the schedule's order, and the
 * step around them (the tied embedding's gradient, sequence parallel's sums, the
 * gradients' hand-over to data parallel, the loss). */
#include <math.h>

#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "layout/layout.h"
#include "model/err_call.h"
#include "model/kernels.h"
#include "model/layers.h"
#include "model/moe.h"
#include "parallel/mp_impl.h"

/* ---- a block ---- */

static int seg_of_layer(const msr_gpt_t *m, int c, int l)
{
    return m->chunk_seg[c] + (l - m->chunk_lo[c]);
}

/* Block l's parameters in segment s (grads: its gradients), a MoE block's
 * router and this rank's experts included. */
static void point_params(msr_mp_t *mp, int s, int l, int grads, msr_gpt_block_params_t *p)
{
    msr_gpt_t *model = mp->model;
    msr_gpt_block_point_tp(&model->cfg, mp->tp,
                           grads ? model->segments[s].grads : model->segments[s].params, p);
    p->routerw = p->experts = NULL;
    if (!msr_gpt_layer_is_moe(&model->cfg, l))
        return;
    p->routerw = p->fcw; /* the router takes the MLP's place after ln2b */
    p->fcw = p->fcb = p->fcprojw = p->fcprojb = NULL;
    p->experts = msr_moe_block_params(model->moe, l, grads);
}

/* A MoE block's MLP (model/moe.h) as the block's MLP: every tp rank
 * gets the whole micro-batch and returns its experts' share of y. */
typedef struct moe_call {
    msr_mp_t *mp;
    int l;
    const msr_gpt_block_params_t *p, *g;
    double aux;
} moe_call_t;

static msr_status_t moe_mlp(void *arg, const float *in, float *out)
{
    moe_call_t *c = arg;
    return msr_moe_forward(c->mp->model->moe, c->l, c->p, in, (int)c->mp->d.N, out, &c->aux);
}

static msr_status_t moe_mlp_backward(void *arg, const float *in, const float *dout, float *din)
{
    moe_call_t *c = arg;
    msr_mp_t *mp = c->mp;
    /* the load-balancing loss counts like the micro-batch's mean loss */
    return msr_moe_backward(mp->model->moe, c->l, c->p, c->g, in, dout, din,
                            mp->dloss * (float)mp->d.N);
}

/* Forward of block l for micro-batch m; a MoE block's load-balancing loss
 * joins the step's unless this is a recompute (count 0), which also
 * leaves the router's counters alone, as msr_mp_eval's forwards do. */
static msr_status_t block_forward(msr_mp_t *mp, int m, int l, const msr_gpt_block_params_t *p,
                                  msr_gpt_block_acts_t *la, const float *x, int count)
{
    if (!msr_gpt_layer_is_moe(&mp->model->cfg, l) && mp->cfg.tp_overlap)
        return msr_mp_block_forward_split(mp, p, la, x);
    if (!msr_gpt_layer_is_moe(&mp->model->cfg, l))
        return msr_block_forward(&mp->blk, p, la, x, NULL);
    moe_call_t c = {mp, l, p, NULL, 0.0};
    msr_block_mlp_t mlp = {moe_mlp, moe_mlp_backward, &c};
    msr_moe_select(mp->model->moe, m, count && !mp->evaluating);
    msr_status_t st = msr_block_forward(&mp->blk, p, la, x, &mlp);
    if (st == MSR_OK && count)
        mp->aux_sum += c.aux;
    return st;
}

static msr_status_t block_backward(msr_mp_t *mp, int m, int l, const msr_gpt_block_params_t *p,
                                   const msr_gpt_block_params_t *g, msr_gpt_block_acts_t *la,
                                   const float *x, float *dres)
{
    if (!msr_gpt_layer_is_moe(&mp->model->cfg, l) && mp->cfg.tp_overlap)
        return msr_mp_block_backward_split(mp, p, g, la, x, dres);
    if (!msr_gpt_layer_is_moe(&mp->model->cfg, l))
        return msr_block_backward(&mp->blk, p, g, la, x, dres, NULL);
    moe_call_t c = {mp, l, p, g, 0.0};
    msr_block_mlp_t mlp = {moe_mlp, moe_mlp_backward, &c};
    msr_moe_select(mp->model->moe, m, 0);
    return msr_block_backward(&mp->blk, p, g, la, x, dres, &mlp);
}

/* Brings back what the recompute mode dropped, just before backward. */
static msr_status_t recompute(msr_mp_t *mp, int m, int l, const msr_gpt_block_params_t *p,
                              msr_gpt_block_acts_t *la, const float *x)
{
    const dims_t *d = &mp->d;
    if (d->mode == MSR_MP_RECOMPUTE_FULL)
        return block_forward(mp, m, l, p, la, x, 0);
    if (d->mode == MSR_MP_RECOMPUTE_SELECTIVE) {
        /* the attention output is kept; the recomputed copy goes to scratch
         * (under cp the logsumexp was kept: nothing to recompute); a MoE
         * block has no GELU of its own to bring back */
        const msr_kernels_t *k = msr_kernels_or_cpu(mp->blk.k);
        if (d->cp == 1 && mp->blk.llama) /* qkv was kept rotated */
            k->attention_gqa_forward(mp->model->prod, mp->w.datty, la->att, la->qkv, d->B, d->T,
                                     d->Cl, d->NHl, mp->blk.NKVl);
        else if (d->cp == 1)
            k->attention_forward(mp->model->prod, mp->w.datty, la->att, la->qkv, d->B, d->T, d->Cl,
                                 d->NHl);
        if (mp->model->cfg.arch == MSR_GPT_ARCH_LLAMA)
            k->swiglu_forward(la->fch_gelu, la->fch, (int)d->N, d->Hl);
        else if (!msr_gpt_layer_is_moe(&mp->model->cfg, l))
            k->gelu_forward(la->fch_gelu, NULL, la->fch, d->N * (size_t)d->Hl);
    }
    return MSR_OK;
}

/* ---- the pipeline ---- */

static int tag_of(const msr_mp_t *mp, int backward, int m, int j)
{
    return (backward * mp->cfg.micros + m) * mp->nv + j;
}

frame_t *msr_mp_frame_at(msr_mp_t *mp, int m, int c)
{
    return &mp->frames[(size_t)m * mp->cfg.chunks + c];
}

/* Under activation offload a frame keeps the chunk's last output and the
 * head's activations: its input and the other blocks' outputs (the next
 * blocks' inputs) are the store's buffers while they are in memory. */
static void carve_offloaded(msr_mp_t *mp, int layers, int head, frame_t *f)
{
    msr_gpt_carve_t keep = {f->mem, 0, 1};
    f->in = NULL;
    for (int i = 0; i < layers - 1; i++)
        f->layers[i].res3 = NULL;
    f->layers[layers - 1].res3 = msr_gpt_carve(&keep, mp->d.Nl * (size_t)mp->d.C);
    if (head) {
        f->lnf = msr_gpt_carve(&keep, msr_layout_head_act(&mp->d, MSR_ACT_LNF));
        f->lnf_mean = msr_gpt_carve(&keep, msr_layout_head_act(&mp->d, MSR_ACT_LNF_MEAN));
        f->lnf_rstd = msr_gpt_carve(&keep, msr_layout_head_act(&mp->d, MSR_ACT_LNF_RSTD));
        f->probs = msr_gpt_carve(&keep, msr_layout_head_act(&mp->d, MSR_ACT_PROBS));
    }
}

static msr_status_t frame_open(msr_mp_t *mp, int m, int c, frame_t *f)
{
    int j = c * mp->pp + mp->pr, layers = mp->model->chunk_hi[c] - mp->model->chunk_lo[c];
    msr_gpt_carve_t keep = {NULL, 0, 1}, scr = {NULL, 0, 1};
    /* sized as a step's frame whatever d is now, so that every buffer of
     * the pool is a step's (a validation's pass of one sequence carves
     * less from it: msr_mp_eval) */
    const dims_t *ds = &mp->d_step;
    msr_mp_carve_frame(ds, layers, j == mp->nv - 1, &keep, &scr, f);
    if (mp->acts != NULL) /* the store holds the chunk's input and all outputs but the last */
        keep.used -= (size_t)layers * ds->Nl * (size_t)ds->C;
    f->mem = NULL;
    for (int k = 0; k < mp->pool_n && f->mem == NULL; k++) {
        if (mp->pool[k].bytes == keep.used * sizeof(float)) {
            f->mem = mp->pool[k].mem;
            mp->pool[k] = mp->pool[--mp->pool_n];
        }
    }
    if (f->mem == NULL) {
        if (msr_mp_buf_alloc(mp, keep.used, 0, &f->mem) != MSR_OK) {
            f->mem = NULL;
            return msr_err(MSR_ERR_NO_MEMORY,
                           "mp: out of memory for the activations of micro-batch %d (%zu bytes)", m,
                           keep.used * sizeof(float));
        }
        mp->stats.frames_held += keep.used * sizeof(float);
    }
    size_t bytes = keep.used * sizeof(float);
    keep.base = mp->acts != NULL ? NULL : f->mem; /* offloaded: carve_offloaded's */
    keep.used = 0;
    scr.base = mp->w.scratch;
    scr.used = 0;
    msr_mp_carve_frame(&mp->d, layers, j == mp->nv - 1, &keep, &scr, f);
    if (mp->acts != NULL)
        carve_offloaded(mp, layers, j == mp->nv - 1, f);
    f->bytes = bytes;
    f->live = 1;
    mp->acts_live += f->bytes;
    if (mp->acts_live > mp->stats.acts_peak)
        mp->stats.acts_peak = mp->acts_live;
    return MSR_OK;
}

void msr_mp_frame_close(msr_mp_t *mp, frame_t *f)
{
    if (!f->live)
        return;
    /* back to the pool (never full: it has a place for every frame) */
    mp->pool[mp->pool_n].mem = f->mem;
    mp->pool[mp->pool_n++].bytes = f->bytes;
    f->mem = NULL;
    f->live = 0;
    mp->acts_live -= f->bytes;
}

static msr_status_t recv_from(msr_mp_t *mp, float *buf, int peer, int tag)
{
    uint64_t a = msr_now_ns();
    msr_status_t st =
        msr_comm_recv(mp->mesh->pp_comm, buf, mp->d.Nl * (size_t)mp->d.C, MSR_DTYPE_F32, peer, tag);
    uint64_t b = msr_now_ns();
    mp->recv_ns += b - a;
    msr_mp_span_add(mp, 1, a, b, "recv from %d", peer);
    return st != MSR_OK ? msr_mp_failed("pipeline receive", st) : MSR_OK;
}

static msr_status_t send_to(msr_mp_t *mp, const float *buf, int peer, int tag, msr_comm_req_t **req)
{
    msr_status_t st = msr_comm_isend(mp->mesh->pp_comm, buf, mp->d.Nl * (size_t)mp->d.C,
                                     MSR_DTYPE_F32, peer, tag, req);
    return st != MSR_OK ? msr_mp_failed("pipeline send", st) : MSR_OK;
}

/* Segment s's hook for pass. Under the parameters' offload a traced step
 * records each block's acquire (the wait for its read, the start of the
 * next one's) as "params block K F" or "... B" on the communication row. */
static msr_status_t call_hook(msr_mp_t *mp, int s, int acquire, msr_gpt_pass_t pass)
{
    const msr_gpt_hooks_t *h = msr_dp_hooks(mp->dp);
    if (!acquire)
        return h->release(h->arg, mp->model, s, pass);
    uint64_t a = mp->tracing ? msr_now_ns() : 0;
    msr_status_t st = h->acquire(h->arg, mp->model, s, pass);
    if (mp->tracing && msr_dp_params_store(mp->dp) != NULL && s != mp->model->seg_embed &&
        s != mp->model->seg_lnf)
        msr_mp_span_add(mp, 1, a, msr_now_ns(), "params block %d %s",
                        s - (mp->model->seg_embed >= 0), pass == MSR_GPT_FORWARD ? "F" : "B");
    return st;
}

static msr_status_t hook(msr_mp_t *mp, int s, int acquire)
{
    return call_hook(mp, s, acquire, MSR_GPT_BACKWARD);
}

/* A forward's hook: under ZeRO-3 segment s's parameters are gathered over
 * dp just before its use (acquire) and freed after (release); under the
 * parameters' offload (dp_params.c) each block is read ahead of its forward
 * and dropped after. Otherwise forward calls no hook. */
msr_status_t msr_mp_fwd_hook(msr_mp_t *mp, int s, int acquire)
{
    if (mp->cfg.zero < 3 && msr_dp_params_store(mp->dp) == NULL)
        return MSR_OK;
    return call_hook(mp, s, acquire, MSR_GPT_FORWARD);
}

/* The head reads the final norm's segment and, for a GPT on one stage,
 * the tied wte's (the embedding segment). */
static int head_uses_embed(const msr_mp_t *mp)
{
    return mp->pp == 1 && mp->model->cfg.arch != MSR_GPT_ARCH_LLAMA;
}

static msr_status_t head_forward(msr_mp_t *mp, frame_t *f, const float *x, const int *targets)
{
    msr_gpt_t *model = mp->model;
    msr_status_t st = MSR_OK;
    if (mp->cfg.zero < 3) /* the offload keeps the final norm and wte resident */
        return msr_mp_head_forward(mp, f, x, targets);
    if (head_uses_embed(mp))
        st = msr_mp_fwd_hook(mp, model->seg_embed, 1);
    if (st == MSR_OK && (st = msr_mp_fwd_hook(mp, model->seg_lnf, 1)) == MSR_OK) {
        st = msr_mp_head_forward(mp, f, x, targets);
        msr_status_t rst = msr_mp_fwd_hook(mp, model->seg_lnf, 0);
        st = st != MSR_OK ? st : rst;
    }
    if (head_uses_embed(mp)) {
        msr_status_t rst = msr_mp_fwd_hook(mp, model->seg_embed, 0);
        st = st != MSR_OK ? st : rst;
    }
    return st;
}

/* ---- activation offload (offload_acts.h) ---- */

/* Block i's input of micro-batch m's chunk c: its place in the file. */
static size_t act_key(const msr_mp_t *mp, int m, int c, int i)
{
    return ((size_t)m * mp->cfg.chunks + c) * (size_t)mp->acts_layers + (size_t)i;
}

/* Forward: a store's buffer for block i's output, unless it is the
 * chunk's last (the frame's). */
static msr_status_t acts_out(msr_mp_t *mp, frame_t *f, int i, int layers)
{
    if (mp->acts == NULL || i == layers - 1)
        return MSR_OK;
    return msr_acts_get(mp->acts, &f->layers[i].res3);
}

/* Forward: block i has run; its input goes to the file (written behind
 * while the next block runs), or back to the store unwritten when no
 * backward follows (msr_mp_eval). */
static msr_status_t acts_spill(msr_mp_t *mp, int m, int c, int i, const float *x)
{
    if (mp->acts == NULL)
        return MSR_OK;
    if (mp->evaluating) { /* no backward reads it */
        msr_acts_put(mp->acts, (float *)x);
        return MSR_OK;
    }
    return msr_acts_spill(mp->acts, (float *)x, act_key(mp, m, c, i));
}

/* Backward: starts reading block i's input (nothing for i < 0). */
static msr_status_t acts_ahead(msr_mp_t *mp, int m, int c, int i)
{
    if (mp->acts == NULL || i < 0)
        return MSR_OK;
    return msr_acts_prefetch(mp->acts, act_key(mp, m, c, i));
}

/* Backward of a chunk of `layers` blocks: the last blocks' inputs read
 * while the head's backward or the gradient's receive runs. */
static msr_status_t acts_begin(msr_mp_t *mp, int m, int c, int layers)
{
    msr_status_t st = MSR_OK;
    for (int i = layers - 1; i >= MSR_MAX(layers - MSR_ACTS_AHEAD, 0) && st == MSR_OK; i--)
        st = acts_ahead(mp, m, c, i);
    return st;
}

/* Backward of block i: its input read back into *in_p (the block
 * MSR_ACTS_AHEAD below it read ahead), and its output, which the recompute
 * writes again, in *out_p: block i + 1's input, still held (the last
 * block's is the frame's: NULL). */
static msr_status_t acts_back(msr_mp_t *mp, frame_t *f, int m, int c, int i, float *out,
                              float **in_p)
{
    msr_status_t st = msr_acts_fetch(mp->acts, act_key(mp, m, c, i), in_p);
    if (st == MSR_OK)
        st = acts_ahead(mp, m, c, i - MSR_ACTS_AHEAD);
    if (out != NULL)
        f->layers[i].res3 = out;
    return st;
}

/* Backward: block i + 1's input (out) is done with; block i's (in) is
 * block i - 1's output. */
static float *acts_next(msr_mp_t *mp, float *out, float *in)
{
    if (out != NULL)
        msr_acts_put(mp->acts, out);
    return in;
}

static msr_status_t seg_done(msr_mp_t *mp, int s);

/* Under the parameters' offload, the block the pass over chunk c takes
 * first (backward: its last) starts reading before the pass waits for its
 * input from the stage before (or the gradient from the one after) or
 * computes the embeddings (or the head). */
static msr_status_t params_ahead(msr_mp_t *mp, int c, int backward)
{
    const msr_gpt_t *m = mp->model;
    if (m->chunk_hi[c] <= m->chunk_lo[c])
        return MSR_OK;
    int l = backward ? m->chunk_hi[c] - 1 : m->chunk_lo[c], s = seg_of_layer(m, c, l);
    msr_status_t st = msr_dp_params_ahead(mp->dp, s);
    /* a MoE model's experts on disk: the chunk's first MoE block's */
    return st != MSR_OK ? st : msr_dp_extra_ahead(mp->dp, s, backward ? -1 : 1);
}

msr_status_t msr_mp_run_forward(msr_mp_t *mp, int m, int c)
{
    msr_gpt_t *model = mp->model;
    int j = c * mp->pp + mp->pr;
    size_t N = mp->d.N;
    frame_t *f = msr_mp_frame_at(mp, m, c);
    msr_status_t st = frame_open(mp, m, c, f);
    if (st == MSR_OK && mp->acts != NULL)
        st = msr_acts_get(mp->acts, &f->in);
    if (st != MSR_OK || (st = params_ahead(mp, c, 0)) != MSR_OK)
        return st;
    if (j == 0 && (st = msr_mp_fwd_hook(mp, model->seg_embed, 1)) == MSR_OK) {
        st = msr_mp_embed_forward(mp, mp->inputs + (size_t)m * N, f->in);
        msr_status_t rst = msr_mp_fwd_hook(mp, model->seg_embed, 0);
        st = st != MSR_OK ? st : rst;
    } else if (j != 0) {
        st = recv_from(mp, f->in, (j - 1) % mp->pp, tag_of(mp, 0, m, j));
    }
    if (st != MSR_OK)
        return st;
    const float *x = f->in;
    for (int l = model->chunk_lo[c]; l < model->chunk_hi[c]; l++) {
        int i = l - model->chunk_lo[c];
        msr_gpt_block_acts_t *la = &f->layers[i];
        msr_gpt_block_params_t p;
        int s = seg_of_layer(model, c, l);
        if ((st = msr_mp_fwd_hook(mp, s, 1)) != MSR_OK)
            return st;
        point_params(mp, s, l, 0, &p);
        if ((st = acts_out(mp, f, i, model->chunk_hi[c] - model->chunk_lo[c])) != MSR_OK ||
            (st = block_forward(mp, m, l, &p, la, x, 1)) != MSR_OK ||
            (st = acts_spill(mp, m, c, i, x)) != MSR_OK ||
            (st = msr_mp_fwd_hook(mp, s, 0)) != MSR_OK)
            return st;
        x = la->res3;
    }
    if (j == mp->nv - 1)
        return head_forward(mp, f, x, mp->targets + (size_t)m * N);
    return send_to(mp, x, (j + 1) % mp->pp, tag_of(mp, 0, m, j + 1),
                   &mp->sreq[2 * ((size_t)m * mp->cfg.chunks + c)]);
}

/* Overlap path: backwards go in micro-batch order, each one dp
 * micro-batch; this one's starts (the one before ends). */
static msr_status_t dp_micro(msr_mp_t *mp)
{
    if (!mp->overlap)
        return MSR_OK;
    msr_status_t st;
    if (mp->backwards > 0 && (st = msr_dp_micro_end(mp->dp)) != MSR_OK)
        return st;
    mp->last_backward = mp->backwards == mp->cfg.micros - 1;
    st = msr_dp_micro_begin(mp->dp, mp->backwards == 0, mp->last_backward);
    mp->backwards++;
    return st;
}

static msr_status_t run_backward(msr_mp_t *mp, int m, int c)
{
    msr_gpt_t *model = mp->model;
    int j = c * mp->pp + mp->pr;
    size_t N = mp->d.N;
    frame_t *f = msr_mp_frame_at(mp, m, c);
    int lo = model->chunk_lo[c], hi = model->chunk_hi[c];
    float *dres = mp->w.dres, *in = NULL, *out = NULL; /* offload: block l's input and output */
    msr_status_t st = acts_begin(mp, m, c, hi - lo);
    if (st != MSR_OK || (st = dp_micro(mp)) != MSR_OK || (st = params_ahead(mp, c, 1)) != MSR_OK)
        return st;
    if (j == mp->nv - 1) {
        if (mp->pp == 1 && (st = hook(mp, model->seg_embed, 1)) != MSR_OK)
            return st;
        if ((st = hook(mp, model->seg_lnf, 1)) != MSR_OK)
            return st;
        st = msr_mp_head_backward(mp, f, f->layers[hi - lo - 1].res3, mp->targets + (size_t)m * N);
        if (st == MSR_OK)
            st = hook(mp, model->seg_lnf, 0);
        if (st == MSR_OK && mp->pp == 1)
            st = hook(mp, model->seg_embed, 0);
        if (st == MSR_OK)
            st = seg_done(mp, model->seg_lnf);
        /* the head's wte gradient is complete after the last backward */
        if (st == MSR_OK && mp->overlap && msr_mp_tied(mp) && mp->last_backward) {
            st =
                msr_comm_isend(mp->mesh->pp_comm, mp->head_dwte, (size_t)mp->d.Vl * (size_t)mp->d.C,
                               MSR_DTYPE_F32, 0, MSR_COMM_TAG_MAX - 1, &mp->tied_req);
            if (st != MSR_OK)
                return msr_mp_failed("sending the tied embedding's gradient", st);
        }
    } else {
        st = recv_from(mp, dres, (j + 1) % mp->pp, tag_of(mp, 1, m, j));
    }
    if (st != MSR_OK)
        return st;
    for (int l = hi - 1; l >= lo; l--) {
        int s = seg_of_layer(model, c, l);
        msr_gpt_block_acts_t *la = &f->layers[l - lo];
        const float *x = l == lo ? f->in : f->layers[l - lo - 1].res3;
        if (mp->acts != NULL && (st = acts_back(mp, f, m, c, l - lo, out, &in)) != MSR_OK)
            return st;
        x = mp->acts != NULL ? in : x;
        if ((st = hook(mp, s, 1)) != MSR_OK)
            return st;
        msr_gpt_block_params_t p, g;
        point_params(mp, s, l, 0, &p);
        point_params(mp, s, l, 1, &g);
        if ((st = recompute(mp, m, l, &p, la, x)) != MSR_OK)
            return st;
        if ((st = block_backward(mp, m, l, &p, &g, la, x, dres)) != MSR_OK)
            return st;
        if ((st = hook(mp, s, 0)) != MSR_OK || (st = seg_done(mp, s)) != MSR_OK)
            return st;
        out = acts_next(mp, out, in);
    }
    (void)acts_next(mp, out, NULL);
    if (j == 0) {
        if ((st = hook(mp, model->seg_embed, 1)) != MSR_OK)
            return st;
        if ((st = msr_mp_embed_backward(mp, mp->inputs + (size_t)m * N, dres)) != MSR_OK)
            return st;
        if ((st = seg_done(mp, model->seg_embed)) != MSR_OK)
            return st;
        st = hook(mp, model->seg_embed, 0);
    } else {
        size_t k = (size_t)m * mp->cfg.chunks + c;
        float *buf = mp->gsend + k * mp->d.Nl * (size_t)mp->d.C;
        /* dres is the work space's, the next backward's: the send's own copy */
        if ((st = msr_mp_copy(mp, buf, dres, mp->d.Nl * (size_t)mp->d.C, MSR_DEVICE_D2D)) ==
                MSR_OK &&
            (st = msr_mp_sync(mp)) == MSR_OK)
            st = send_to(mp, buf, (j - 1 + mp->nv) % mp->pp, tag_of(mp, 1, m, j - 1),
                         &mp->sreq[2 * k + 1]);
    }
    msr_mp_frame_close(mp, f);
    return st;
}

/* ---- the step ---- */

/* Whether tensor t's gradient is summed over tp ranks: a tp-replicated
 * tensor's under sp (each rank's is partial: its positions'), a Llama's
 * replicated kv heads' always (each rank's is its query heads' part). */
static int tp_summed(const msr_mp_t *mp, const msr_gpt_tensor_t *t)
{
    return t->tp_replicated ? mp->d.sp : t->tp_copies > 1;
}

/* Sums the gradients tp_summed names of segment s (seg < 0: of every
 * segment) over the ranks holding each: packed into one allreduce over
 * tp, a tensor held by tp / copies groups of ranks in as many slots, each
 * rank's gradient in its group's slot and zeros in the others'. */
static msr_status_t tp_sum(msr_mp_t *mp, int seg)
{
    msr_gpt_t *m = mp->model;
    size_t total = 0;
    for (int k = 0; k < m->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &m->tensors[k];
        if (tp_summed(mp, t) && (seg < 0 || t->segment == seg))
            total += t->count * (size_t)(mp->tp / t->tp_copies);
    }
    if (total == 0)
        return MSR_OK;
    float *buf = NULL;
    msr_status_t st = msr_mp_buf_alloc(mp, total, 1, &buf);
    if (st != MSR_OK)
        return st;
    /* the gradients are the host's, the packed sum the device's */
    for (int pass = 0; pass < 2 && st == MSR_OK; pass++) {
        size_t off = 0;
        for (int k = 0; k < m->num_tensors; k++) {
            const msr_gpt_tensor_t *t = &m->tensors[k];
            if (!tp_summed(mp, t) || (seg >= 0 && t->segment != seg))
                continue;
            const msr_gpt_segment_t *s = &m->segments[t->segment];
            float *g = s->grads + (t->offset - s->offset);
            float *slot = buf + off + (size_t)(mp->tr / t->tp_copies) * t->count;
            if (pass == 0)
                st = msr_mp_copy(mp, slot, g, t->count, MSR_DEVICE_H2D);
            else
                st = msr_mp_copy(mp, g, slot, t->count, MSR_DEVICE_D2H);
            if (st != MSR_OK)
                break;
            off += t->count * (size_t)(mp->tp / t->tp_copies);
        }
        /* the allreduce reads the packing; the host the sums after */
        if (st == MSR_OK)
            st = msr_mp_sync(mp);
        if (pass == 0 && st == MSR_OK)
            st = msr_mp_tp_allreduce(mp, buf, total, MSR_DTYPE_F32, MSR_OP_SUM, "tp grads");
    }
    msr_mp_buf_free(mp, buf);
    return st;
}

/* Reduce-once path (interleaved): at the end of the step's backwards the
 * head's wte gradient joins the first stage's, and the gradients held on
 * several tp ranks are summed over them (tp_sum). */
static msr_status_t finish_grads(msr_mp_t *mp)
{
    msr_gpt_t *m = mp->model;
    msr_status_t st = MSR_OK;
    if (msr_mp_tied(mp) && mp->pr == mp->pp - 1) {
        st = msr_comm_send(mp->mesh->pp_comm, mp->head_dwte, (size_t)mp->d.Vl * (size_t)mp->d.C,
                           MSR_DTYPE_F32, 0, MSR_COMM_TAG_MAX - 1);
        if (st != MSR_OK)
            return msr_mp_failed("sending the tied embedding's gradient", st);
    } else if (msr_mp_tied(mp) && mp->pr == 0) {
        if ((st = hook(mp, m->seg_embed, 1)) == MSR_OK && (st = msr_mp_tied_add(mp)) == MSR_OK)
            st = hook(mp, m->seg_embed, 0);
        if (st != MSR_OK)
            return st;
    }
    return tp_sum(mp, -1);
}

/* Overlap path: segment s is done for this backward. When this backward
 * reduces (the step's last; every one under ZeRO-2), its gradient is made
 * final (tp sum, the tied gradient on the last backward) and handed to dp,
 * whose buckets start as they complete. */
static msr_status_t seg_done(msr_mp_t *mp, int s)
{
    if (!mp->overlap || !mp->dp->reduce_now)
        return MSR_OK;
    msr_status_t st;
    if ((st = tp_sum(mp, s)) != MSR_OK)
        return st;
    if (s == mp->model->seg_embed && msr_mp_tied(mp) && mp->last_backward &&
        (st = msr_mp_tied_add(mp)) != MSR_OK)
        return st;
    const msr_gpt_hooks_t *h = msr_dp_hooks(mp->dp);
    return h->grads_ready(h->arg, mp->model, s);
}

msr_status_t msr_mp_run(msr_mp_t *mp, msr_dp_t *dp, const int *inputs, const int *targets,
                        float dloss, double *loss_p)
{
    msr_status_t st;
    mp->num_spans = 0;
    if (mp->tracing && mp->mesh->world != NULL &&
        (st = msr_comm_barrier(mp->mesh->world)) != MSR_OK)
        return msr_mp_failed("barrier before a traced step", st);
    /* what a failed run may have left: sends in flight, activations */
    if ((st = msr_mp_sends_wait(mp)) != MSR_OK)
        return st;
    for (size_t k = 0; k < (size_t)mp->cfg.micros * (size_t)mp->cfg.chunks; k++)
        msr_mp_frame_close(mp, &mp->frames[k]);
    uint64_t t0 = msr_now_ns();
    mp->t0 = t0;
    if (mp->cp > 1) {
        /* this rank's positions of every micro-batch: all it computes on */
        size_t Ng = mp->d.N * (size_t)mp->cp;
        for (int m = 0; m < mp->cfg.micros; m++) {
            msr_mp_cp_select(mp, inputs + (size_t)m * Ng, mp->cp_in + (size_t)m * mp->d.N);
            msr_mp_cp_select(mp, targets + (size_t)m * Ng, mp->cp_tgt + (size_t)m * mp->d.N);
        }
        inputs = mp->cp_in;
        targets = mp->cp_tgt;
    }
    mp->inputs = inputs;
    mp->targets = targets;
    mp->dloss = dloss;
    mp->dp = dp;
    mp->loss_sum = 0.0;
    mp->aux_sum = 0.0;
    mp->recv_ns = 0;
    if (mp->head_dwte != NULL &&
        ((st = msr_mp_zero(mp, mp->head_dwte, (size_t)mp->d.Vl * (size_t)mp->d.C)) != MSR_OK ||
         (st = msr_mp_sync(mp)) != MSR_OK))
        return st;
    mp->backwards = 0;
    mp->last_backward = 0;
    if (!mp->overlap && (st = msr_dp_micro_begin(dp, 1, 1)) != MSR_OK)
        return st;
    uint64_t busy = 0;
    for (int k = 0; k < mp->num_ops; k++) {
        const op_t *o = &mp->ops[k];
        uint64_t r0 = mp->recv_ns, a = msr_now_ns();
        st = o->backward ? run_backward(mp, o->m, o->c) : msr_mp_run_forward(mp, o->m, o->c);
        uint64_t b = msr_now_ns(), waited = mp->recv_ns - r0;
        busy += (b - a) - waited;
        /* the op's receive comes first: its compute starts after it */
        msr_mp_span_add(mp, 0, a + waited, b, o->backward ? "B%d.%d" : "F%d.%d", o->m, o->c);
        if (st != MSR_OK)
            return st;
    }
    uint64_t a = msr_now_ns();
    if ((st = msr_mp_sends_wait(mp)) != MSR_OK)
        return st;
    if (!mp->overlap && (st = finish_grads(mp)) != MSR_OK)
        return st;
    uint64_t b = msr_now_ns();
    st = mp->overlap ? msr_dp_micro_end(dp) : msr_dp_reduce_all(dp);
    msr_mp_span_add(mp, 1, b, msr_now_ns(), "dp wait");
    (void)a;
    if (st != MSR_OK)
        return st;
    mp->stats.steps++;
    mp->stats.step_ns += msr_now_ns() - t0;
    mp->stats.busy_ns += busy;
    mp->stats.recv_wait_ns += mp->recv_ns;
    /* the MoE blocks' load-balancing losses of every stage, once per tp group */
    *loss_p = (mp->pr == mp->pp - 1 ? mp->loss_sum : 0.0) + mp->aux_sum;
    if (mp->tr != 0)
        *loss_p = 0.0;
    return MSR_OK;
}
