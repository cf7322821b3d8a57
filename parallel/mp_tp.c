/* Model parallel's tensor-parallel side (see mp.h): the collectives
 * between the layers (sequence parallel's included), the blocks' view of
 * them, and the vocabulary-parallel embeddings and head. */
#include <stdio.h>

#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "model/kernels.h"
#include "model/layers.h"
#include "parallel/mp_impl.h"

/* ---- tensor-parallel communication ---- */

msr_status_t msr_mp_tp_allreduce(msr_mp_t *mp, void *x, size_t n, msr_dtype_t t, msr_op_t op,
                                 const char *what)
{
    if (mp->mesh->tp_comm == NULL)
        return MSR_OK;
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_comm_allreduce(mp->mesh->tp_comm, MSR_IN_PLACE, x, n, t, op);
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "allreduce %s", what);
    return st != MSR_OK ? msr_mp_failed(what, st) : MSR_OK;
}

/* The rows of B sequences from the sequence-parallel layout perm (rank
 * r's (B, T/tp, C) at r B T/tp C) into full (B, T, C) (dir 1), or back
 * (dir -1): copies within the device, synced before the communicator or
 * the block reads them. */
msr_status_t msr_mp_seq_permute(msr_mp_t *mp, int B, float *perm, float *full, int dir)
{
    const dims_t *d = &mp->d;
    size_t row = (size_t)d->Tl * (size_t)d->C, blk = (size_t)B * row;
    msr_status_t st = MSR_OK;
    for (int r = 0; r < d->tp && st == MSR_OK; r++)
        for (int b = 0; b < B && st == MSR_OK; b++) {
            float *p = perm + (size_t)r * blk + (size_t)b * row;
            float *f = full + ((size_t)b * d->T + (size_t)r * d->Tl) * d->C;
            st = msr_mp_copy(mp, dir > 0 ? f : p, dir > 0 ? p : f, row, MSR_DEVICE_D2D);
        }
    return st == MSR_OK ? msr_mp_sync(mp) : st;
}

/* full (B, T, C) on every rank from each rank's local (B, T/tp, C), for
 * the micro-batch's B sequences or a copy's B/2 (through perm, (B T, C)). */
msr_status_t msr_mp_seq_gather(msr_mp_t *mp, int B, float *perm, const float *local, float *full)
{
    size_t blk = (size_t)B * mp->d.Tl * (size_t)mp->d.C;
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_comm_allgather(mp->mesh->tp_comm, local, perm, blk, MSR_DTYPE_F32);
    if (st != MSR_OK)
        return msr_mp_failed("sequence allgather", st);
    st = msr_mp_seq_permute(mp, B, perm, full, 1);
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "allgather seq");
    return st;
}

/* local (B, T/tp, C) = this rank's positions of the sum over ranks of full
 * (B, T, C). full is left unspecified. */
msr_status_t msr_mp_seq_scatter(msr_mp_t *mp, int B, float *perm, float *full, float *local)
{
    size_t blk = (size_t)B * mp->d.Tl * (size_t)mp->d.C;
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_mp_seq_permute(mp, B, perm, full, -1);
    if (st != MSR_OK)
        return st;
    st = msr_comm_reduce_scatter(mp->mesh->tp_comm, perm, local, blk, MSR_DTYPE_F32, MSR_OP_SUM);
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "reduce-scatter seq");
    return st != MSR_OK ? msr_mp_failed("sequence reduce-scatter", st) : MSR_OK;
}

/* The sum over tp of full (N, C) partial results, this rank's rows of it
 * (Nl, C): in place (an allreduce) without sp, into local with sp. */
static msr_status_t tp_reduce(msr_mp_t *mp, float *full, float *local, float **out_p)
{
    if (mp->d.sp) {
        *out_p = local;
        return msr_mp_seq_scatter(mp, mp->d.B, mp->w.perm, full, local);
    }
    *out_p = full;
    return msr_mp_tp_allreduce(mp, full, mp->d.N * (size_t)mp->d.C, MSR_DTYPE_F32, MSR_OP_SUM,
                               "tp");
}

/* The input of a column-parallel layer: x (Nl, C) itself, or gathered. */
static msr_status_t tp_enter(msr_mp_t *mp, const float *x, float *gbuf, const float **out_p)
{
    if (!mp->d.sp) {
        *out_p = x;
        return MSR_OK;
    }
    *out_p = gbuf;
    return msr_mp_seq_gather(mp, mp->d.B, mp->w.perm, x, gbuf);
}

/* The block's communication (model/block.h): tp_enter and tp_reduce. */
static msr_status_t block_enter(void *arg, const float *x, float *gbuf, const float **out_p)
{
    return tp_enter(arg, x, gbuf, out_p);
}

static msr_status_t block_reduce(void *arg, float *full, float *local, float **out_p)
{
    return tp_reduce(arg, full, local, out_p);
}

/* The blocks' view of the runtime: this rank's shape, the work space, the
 * tensor-parallel communication (none at tp = 1). */
void msr_mp_point_block(msr_mp_t *mp)
{
    const dims_t *d = &mp->d;
    const work_t *w = &mp->w;
    int tp = d->tp > 1, cp = d->cp > 1, ov = tp && mp->cfg.tp_overlap;
    mp->blk_comm = (msr_block_comm_t){
        mp,
        tp ? block_enter : NULL,
        tp ? block_reduce : NULL,
        ov ? msr_mp_tp_poll : NULL,
        cp ? msr_mp_cp_attend : NULL,
        cp ? msr_mp_cp_attend_backward : NULL,
        NULL,
        NULL,
        NULL,
        NULL,
    };
    if (ov)
        msr_mp_point_copies(mp);
    mp->blk = (msr_block_t){
        .B = d->B,
        .T = d->T,
        .C = d->C,
        .tp = d->tp,
        .NHl = d->NHl,
        .Cl = d->Cl,
        .Hl = d->Hl,
        .N = d->N,
        .Nl = d->Nl,
        .llama = mp->model->cfg.arch == MSR_GPT_ARCH_LLAMA,
        .NKVl = msr_gpt_kv_heads_local(&mp->model->cfg, d->tp),
        .rope_theta = mp->model->cfg.rope_theta,
        .pos = cp ? mp->cp_pos + (size_t)mp->cr * (size_t)d->T : NULL, /* zigzag chunks */
        .comm = tp || cp ? &mp->blk_comm : NULL,
        .prod = mp->model->prod,
        .k = mp->model->kernels,
        .proj = w->proj,
        .projl = w->projl,
        .gat = w->gat,
        .dgat = w->dgat,
        .dln = w->dln,
        .dlnl = w->dlnl,
        .dqkv = w->dqkv,
        .datty = w->datty,
        .dfch = w->dfch,
        .dfch_gelu = w->dfch_gelu,
        .datt = w->datt,
    };
}

/* ---- embeddings and head ---- */

/* The position in the sequence of this rank's local position t (of its
 * d.T: context parallel holds two chunks of it). */
/* The positions of this rank's rows from row t0 of its chunk: context
 * parallel's zigzag chunks' (a table), else NULL (t0 + t). */
static const int *positions(const msr_mp_t *mp, int t0)
{
    return mp->cp > 1 ? mp->cp_pos + (size_t)mp->cr * mp->d.T + (size_t)t0 : NULL;
}

static int is_llama(const msr_mp_t *mp)
{
    return mp->model->cfg.arch == MSR_GPT_ARCH_LLAMA;
}

/* out (Nl, C): this rank's rows of wte[token] + wpe[t] (a Llama: wte's
 * alone; its positions are rotary, in the blocks). */
msr_status_t msr_mp_embed_forward(msr_mp_t *mp, const int *tokens, float *out)
{
    const dims_t *d = &mp->d;
    msr_gpt_t *m = mp->model;
    const float *wte = m->segments[m->seg_embed].params; /* (Vl, C) */
    const float *wpe = wte + (size_t)d->Vl * d->C;       /* (maxT, C) */
    if (d->tp == 1 && is_llama(mp)) {                    /* every row whole here */
        msr_status_t st = MSR_OK;
        for (size_t n = 0; n < d->N && st == MSR_OK; n++)
            st = msr_mp_copy(mp, out + n * d->C, wte + (size_t)tokens[n] * d->C, (size_t)d->C,
                             MSR_DEVICE_H2D);
        return st == MSR_OK ? msr_mp_sync(mp) : st;
    }
    if (d->tp == 1 && d->cp == 1) {
        msr_kernels_or_cpu(m->kernels)->encoder_forward(out, tokens, wte, wpe, d->B, d->T, d->C);
        return MSR_OK;
    }
    int lo = mp->tr * d->Vl;
    float *part = mp->w.proj, *r;
    msr_status_t st = msr_mp_zero(mp, part, d->N * (size_t)d->C);
    if (st != MSR_OK || (st = msr_mp_sync(mp)) != MSR_OK) /* the rows are written next */
        return st;
    /* this rank's rows of the embedding (the host's parameters) */
    for (size_t n = 0; n < d->N && st == MSR_OK; n++) {
        int v = tokens[n] - lo;
        if (v >= 0 && v < d->Vl)
            st = msr_mp_copy(mp, part + n * d->C, wte + (size_t)v * d->C, (size_t)d->C,
                             MSR_DEVICE_H2D);
    }
    if (st != MSR_OK || (st = msr_mp_sync(mp)) != MSR_OK ||
        (st = tp_reduce(mp, part, mp->w.projl, &r)) != MSR_OK)
        return st;
    if (!is_llama(mp)) {
        int t0 = d->sp ? mp->tr * d->Tl : 0;
        msr_kernels_or_cpu(m->kernels)
            ->positions_forward(out, r, wpe, positions(mp, t0), t0, d->B, d->Tl, d->C);
        return MSR_OK;
    }
    /* a Llama has no wpe: the rows as they are */
    if ((st = msr_mp_copy(mp, out, r, d->Nl * (size_t)d->C, MSR_DEVICE_D2D)) != MSR_OK)
        return st;
    return msr_mp_sync(mp);
}

msr_status_t msr_mp_embed_backward(msr_mp_t *mp, const int *tokens, float *dout)
{
    const dims_t *d = &mp->d;
    msr_gpt_t *m = mp->model;
    float *dwte = m->segments[m->seg_embed].grads; /* (Vl, C) */
    float *dwpe = dwte + (size_t)d->Vl * d->C;     /* (maxT, C) */
    const msr_kernels_t *k = msr_kernels_or_cpu(m->kernels);
    if (d->tp == 1 && d->cp == 1) { /* every row whole here */
        if (is_llama(mp))
            k->embedding_backward(dwte, dout, tokens, (int)d->N, d->C);
        else
            k->encoder_backward(dwte, dwpe, dout, tokens, d->B, d->T, d->C);
        return MSR_OK;
    }
    int t0 = d->sp ? mp->tr * d->Tl : 0;
    if (!is_llama(mp))
        k->positions_backward(dwpe, dout, positions(mp, t0), t0, d->B, d->Tl, d->C);
    const float *dfull;
    msr_status_t st = tp_enter(mp, dout, mp->w.dgat, &dfull);
    if (st != MSR_OK)
        return st;
    k->embedding_backward_rows(dwte, dfull, tokens, mp->tr * d->Vl, d->Vl, d->N, d->C);
    return MSR_OK;
}

/* The head's (Vl, C) matrix: the tied wte (the last stage's copy with
 * pp > 1), or a Llama's lm_head after lnfw. */
float *msr_mp_head_weights(msr_mp_t *mp, int grads)
{
    msr_gpt_t *m = mp->model;
    if (is_llama(mp)) {
        msr_gpt_segment_t *s = &m->segments[m->seg_lnf];
        return (grads ? s->grads : s->params) + mp->d.C;
    }
    if (mp->pp > 1)
        return grads ? mp->head_dwte : mp->head_wte;
    return grads ? m->segments[m->seg_embed].grads : m->segments[m->seg_embed].params;
}

/* The whole head's loss rows (w->losses) and probabilities (f->probs)
 * from its logits (w->logits). */
static msr_status_t head_loss(msr_mp_t *mp, frame_t *f, const int *targets)
{
    const dims_t *d = &mp->d;
    work_t *w = &mp->w;
    const msr_kernels_t *k = msr_kernels_or_cpu(mp->model->kernels);
    size_t N = d->N;
    if (d->tp == 1) {
        k->crossentropy_forward(w->losses, f->probs, w->logits, targets, (int)N, d->V);
        return MSR_OK;
    }
    /* the softmax over the split vocabulary: the row maxima, then the
     * sums of exponentials and the target logits, each summed over tp */
    k->vocab_max(w->rmax, w->logits, N, d->Vl);
    msr_status_t st = msr_mp_tp_allreduce(mp, w->rmax, N, MSR_DTYPE_F32, MSR_OP_MAX, "max");
    if (st != MSR_OK)
        return st;
    k->vocab_exp_sums(f->probs, w->red, w->logits, w->rmax, targets, mp->tr * d->Vl, N, d->Vl);
    if ((st = msr_mp_tp_allreduce(mp, w->red, 2 * N, MSR_DTYPE_F32, MSR_OP_SUM, "loss")) != MSR_OK)
        return st;
    k->vocab_loss(f->probs, w->losses, w->rmax, w->red, N, d->Vl);
    return MSR_OK;
}

/* The final norm, the head and the loss of one micro-batch; x (Nl, C) is
 * the last block's output. Adds the mean loss to mp->loss_sum. */
msr_status_t msr_mp_head_forward(msr_mp_t *mp, frame_t *f, const float *x, const int *targets)
{
    const dims_t *d = &mp->d;
    msr_gpt_t *m = mp->model;
    work_t *w = &mp->w;
    const msr_kernels_t *k = msr_kernels_or_cpu(m->kernels);
    const float *lnfw = m->segments[m->seg_lnf].params;
    const float *g;
    if (is_llama(mp)) {
        k->rmsnorm_forward(f->lnf, f->lnf_rstd, x, lnfw, (int)d->Nl, d->C);
    } else {
        /* without sp the head's product reads lnf itself: its bf16
         * operand is written as lnf is */
        uint16_t *lnf16 = d->Nl == d->N ? k->operand(m->prod, f->lnf, d->N * (size_t)d->C) : NULL;
        k->layernorm_forward(f->lnf, lnf16, f->lnf_mean, f->lnf_rstd, x, lnfw, lnfw + d->C,
                             (int)d->Nl, d->C);
    }
    msr_status_t st = tp_enter(mp, f->lnf, w->gat, &g);
    if (st != MSR_OK)
        return st;
    size_t N = d->N;
    if (d->hc > 0) {
        st = msr_mp_head_chunked_forward(mp, f, g, targets);
    } else {
        k->matmul_forward(mp->model->prod, w->logits, g, msr_mp_head_weights(mp, 0), NULL,
                          (int)d->N, d->C, d->Vl);
        /* a failed product, logged where it failed */
        if ((st = msr_products_status(mp->model->prod)) == MSR_OK)
            st = head_loss(mp, f, targets);
    }
    if (st != MSR_OK)
        return st;
    double sum = 0.0;
    for (size_t n = 0; n < N; n++)
        sum += w->losses[n];
    /* under cp each rank adds its share of the sequence's mean */
    mp->loss_sum += sum / ((double)N * d->cp);
    return MSR_OK;
}

/* Backward of head_forward: leaves the gradient of x in w->dres. */
msr_status_t msr_mp_head_backward(msr_mp_t *mp, frame_t *f, const float *x, const int *targets)
{
    const dims_t *d = &mp->d;
    msr_gpt_t *m = mp->model;
    work_t *w = &mp->w;
    const msr_kernels_t *k = msr_kernels_or_cpu(m->kernels);
    size_t N = d->N, Vl = (size_t)d->Vl;
    /* a chunked head's backward computes each chunk's gradient itself */
    msr_status_t st = d->hc > 0 ? MSR_OK : msr_mp_zero(mp, w->dlogits, N * Vl);
    if (st != MSR_OK || (st = msr_mp_zero(mp, w->dres, d->Nl * (size_t)d->C)) != MSR_OK ||
        (st = msr_mp_zero(mp, w->dln, N * (size_t)d->C)) != MSR_OK ||
        (st = msr_mp_sync(mp)) != MSR_OK)
        return st;
    if (d->hc == 0 && d->tp == 1) {
        k->crossentropy_backward(w->dlogits, f->probs, targets, mp->dloss, (int)N, d->V);
    } else if (d->hc == 0) {
        k->vocab_crossentropy_backward(w->dlogits, f->probs, targets, mp->tr * d->Vl, mp->dloss, N,
                                       d->Vl);
    }
    const float *g;
    float *dl;
    if ((st = tp_enter(mp, f->lnf, w->gat, &g)) != MSR_OK)
        return st;
    if (d->hc > 0) {
        st = msr_mp_head_chunked_backward(mp, f, g, targets);
    } else {
        k->matmul_backward(mp->model->prod, w->dln, msr_mp_head_weights(mp, 1), NULL, w->dlogits, g,
                           msr_mp_head_weights(mp, 0), (int)N, d->C, d->Vl);
        st = msr_products_status(mp->model->prod);
    }
    if (st != MSR_OK)
        return st;
    if ((st = tp_reduce(mp, w->dln, w->dlnl, &dl)) != MSR_OK)
        return st;
    const float *lnfw = m->segments[m->seg_lnf].params;
    float *dlnfw = m->segments[m->seg_lnf].grads;
    if (is_llama(mp))
        k->rmsnorm_backward(w->dres, dlnfw, dl, x, lnfw, f->lnf_rstd, (int)d->Nl, d->C);
    else
        k->layernorm_backward(w->dres, dlnfw, dlnfw + d->C, dl, x, lnfw, f->lnf_mean, f->lnf_rstd,
                              (int)d->Nl, d->C);
    return MSR_OK;
}
