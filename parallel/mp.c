/* Model parallel: tensor, sequence and pipeline parallel forward and
 * backward of a part of the GPT, with recompute and tracing (see mp.h). */
#include "parallel/mp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "parallel/block.h"
#include "parallel/layers.h"

/* ---- names and checks ---- */

static const char *const schedule_names[] = {"gpipe", "1f1b", "interleaved"};
static const char *const recompute_names[] = {"none", "selective", "full"};

int msr_mp_schedule_parse(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, schedule_names[i]) == 0)
            return i;
    return -1;
}

int msr_mp_recompute_parse(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, recompute_names[i]) == 0)
            return i;
    return -1;
}

const char *msr_mp_schedule_name(msr_mp_schedule_t s)
{
    return (unsigned)s < 3 ? schedule_names[s] : "?";
}

const char *msr_mp_recompute_name(msr_mp_recompute_t r)
{
    return (unsigned)r < 3 ? recompute_names[r] : "?";
}

msr_status_t msr_mp_check(const msr_gpt_config_t *model, const msr_mp_config_t *cfg, int pp, int tp)
{
    msr_gpt_part_t part = {tp, 0, pp, 0, cfg->chunks};
    if (msr_gpt_part_check(model, &part) != MSR_OK)
        return MSR_ERR_CONFIG;
    if ((unsigned)cfg->schedule > MSR_MP_INTERLEAVED ||
        (unsigned)cfg->recompute > MSR_MP_RECOMPUTE_FULL || cfg->micro_batch < 1 ||
        cfg->micros < 1) {
        return msr_err(MSR_ERR_CONFIG,
                       "schedule %d, recompute %d, micro-batch %d or %d micro-batches "
                       "out of range",
                       (int)cfg->schedule, (int)cfg->recompute, cfg->micro_batch, cfg->micros);
    }
    if (cfg->sp && tp < 2) {
        return msr_err(MSR_ERR_CONFIG,
                       "sequence parallel splits the sequence over tp ranks: it needs tp > 1");
    }
    if (cfg->sp && model->max_seq % tp != 0) {
        return msr_err(MSR_ERR_CONFIG,
                       "sequence parallel: the sequence of %d does not divide among tp %d ranks",
                       model->max_seq, tp);
    }
    if (cfg->chunks > 1 && cfg->schedule != MSR_MP_INTERLEAVED) {
        return msr_err(MSR_ERR_CONFIG, "%d virtual stages need the interleaved schedule",
                       cfg->chunks);
    }
    if (cfg->schedule == MSR_MP_1F1B && cfg->micros < pp) {
        return msr_err(MSR_ERR_CONFIG,
                       "1F1B needs at least as many micro-batches as stages: %d micro-batches "
                       "(--grad-accum) for %d stages",
                       cfg->micros, pp);
    }
    if (cfg->schedule == MSR_MP_INTERLEAVED && (pp < 2 || cfg->micros % pp != 0)) {
        return msr_err(MSR_ERR_CONFIG,
                       "interleaved 1F1B needs pp > 1 and micro-batches a multiple of the stages: "
                       "%d micro-batches (--grad-accum) for %d stages",
                       cfg->micros, pp);
    }
    if ((tp > 1 || pp > 1) && (cfg->zero < 0 || cfg->zero > 2)) {
        return msr_err(
            MSR_ERR_CONFIG,
            "ZeRO stage %d is not supported with tensor or pipeline parallel (use 0, 1 or 2)",
            cfg->zero);
    }
    if ((int64_t)2 * cfg->micros * pp * cfg->chunks > MSR_COMM_TAG_MAX) {
        return msr_err(MSR_ERR_CONFIG,
                       "%d micro-batches x %d virtual stages are too many for the message tags",
                       cfg->micros, pp * cfg->chunks);
    }
    return MSR_OK;
}

/* ---- sizes ---- */

typedef struct dims {
    int B, T, C, V, tp, sp, mode;
    int Cl, NHl, Hl,
        Vl;       /* this rank's share: channels of its heads, heads, MLP width, vocabulary */
    int Tl;       /* positions held outside the tensor-parallel layers */
    size_t N, Nl; /* token rows: all of them, held outside */
} dims_t;

static dims_t dims_of(const msr_gpt_config_t *m, const msr_mp_config_t *cfg, int tp)
{
    dims_t d;
    d.B = cfg->micro_batch;
    d.T = m->max_seq;
    d.C = m->channels;
    d.V = m->vocab;
    d.tp = tp;
    d.sp = cfg->sp;
    d.mode = (int)cfg->recompute;
    d.Cl = m->channels / tp;
    d.NHl = m->heads / tp;
    d.Hl = 4 * m->channels / tp;
    d.Vl = m->vocab / tp;
    d.Tl = cfg->sp ? d.T / tp : d.T;
    d.N = (size_t)d.B * (size_t)d.T;
    d.Nl = (size_t)d.B * (size_t)d.Tl;
    return d;
}

/* Points la into keep (what the frame keeps) and scr (the shared scratch,
 * overwritten by the next block) as the recompute mode says. */
static void carve_layer(const dims_t *d, msr_gpt_carve_t *keep, msr_gpt_carve_t *scr,
                        msr_gpt_block_acts_t *la)
{
    size_t N = d->N, Nl = d->Nl, C = (size_t)d->C;
    int all = d->mode == MSR_MP_RECOMPUTE_NONE, sel = d->mode == MSR_MP_RECOMPUTE_SELECTIVE;
    msr_gpt_carve_t *k = all || sel ? keep : scr; /* dropped only by full recompute */
    la->ln1 = msr_gpt_carve(k, Nl * C);
    la->ln1_mean = msr_gpt_carve(k, Nl);
    la->ln1_rstd = msr_gpt_carve(k, Nl);
    la->qkv = msr_gpt_carve(k, N * 3 * (size_t)d->Cl);
    la->atty = msr_gpt_carve(k, N * (size_t)d->Cl);
    la->att = msr_gpt_carve(all ? keep : scr,
                            (size_t)d->B * (size_t)d->NHl * (size_t)d->T * (size_t)d->T);
    la->res2 = msr_gpt_carve(k, Nl * C);
    la->ln2 = msr_gpt_carve(k, Nl * C);
    la->ln2_mean = msr_gpt_carve(k, Nl);
    la->ln2_rstd = msr_gpt_carve(k, Nl);
    la->fch = msr_gpt_carve(k, N * (size_t)d->Hl);
    la->fch_gelu = msr_gpt_carve(all ? keep : scr, N * (size_t)d->Hl);
    la->res3 = msr_gpt_carve(keep, Nl * C);
}

/* What a micro-batch's chunk keeps between its forward and backward. */
typedef struct frame {
    float *mem;
    size_t bytes;
    int live;
    float *in;                        /* (Nl, C) the chunk's input */
    msr_gpt_block_acts_t *layers;     /* [the chunk's blocks] */
    float *lnf, *lnf_mean, *lnf_rstd; /* head: (Nl, C), (Nl), (Nl) */
    float *probs;                     /* head: (N, Vl) */
} frame_t;

static void carve_frame(const dims_t *d, int layers, int head, msr_gpt_carve_t *keep,
                        msr_gpt_carve_t *scr, frame_t *f)
{
    size_t Nl = d->Nl, C = (size_t)d->C;
    msr_gpt_block_acts_t dummy;
    f->in = msr_gpt_carve(keep, Nl * C);
    for (int i = 0; i < layers; i++) {
        msr_gpt_carve_t s = *scr; /* every block reuses the same scratch */
        carve_layer(d, keep, &s, f->layers != NULL ? &f->layers[i] : &dummy);
        if (i == layers - 1)
            scr->used = s.used;
    }
    f->lnf = f->lnf_mean = f->lnf_rstd = f->probs = NULL;
    if (head) {
        f->lnf = msr_gpt_carve(keep, Nl * C);
        f->lnf_mean = msr_gpt_carve(keep, Nl);
        f->lnf_rstd = msr_gpt_carve(keep, Nl);
        f->probs = msr_gpt_carve(keep, d->N * (size_t)d->Vl);
    }
}

size_t msr_mp_frame_bytes(const msr_gpt_config_t *model, const msr_mp_config_t *cfg, int tp,
                          int layers, int with_head)
{
    dims_t d = dims_of(model, cfg, tp);
    msr_gpt_carve_t keep = {NULL, 0, 1}, scr = {NULL, 0, 1};
    frame_t f = {0};
    carve_frame(&d, layers, with_head, &keep, &scr, &f);
    return keep.used * sizeof(float);
}

/* ---- the runtime ---- */

typedef struct op {
    uint8_t backward;
    int m, c;
} op_t;

typedef struct work {
    float *scratch;             /* the blocks' dropped activations */
    float *gat, *dgat, *perm;   /* (N, C) gathered input, gathered gradient, permutation */
    float *proj, *projl;        /* (N, C) a row-parallel output, (Nl, C) reduced */
    float *dres, *dln, *dlnl;   /* (Nl, C), (N, C), (Nl, C) */
    float *dqkv, *datty;        /* (N, 3 Cl), (N, Cl) */
    float *dfch, *dfch_gelu;    /* (N, Hl) */
    float *datt;                /* (T, T) */
    float *logits, *dlogits;    /* (N, Vl) */
    float *losses, *rmax, *red; /* (N), (N), (2N) */
} work_t;

struct msr_mp {
    msr_mp_config_t cfg;
    const msr_mesh_t *mesh;
    msr_gpt_t *model;
    dims_t d;
    int pp, pr, nv; /* stages, this stage, virtual stages */
    int tp, tr;

    float *wmem;
    work_t w;
    size_t scratch_count;
    msr_block_t blk;           /* the blocks' shape and work space (in w) */
    msr_block_comm_t blk_comm; /* their tensor-parallel communication */

    frame_t *frames;             /* [micros * chunks] */
    float *head_wte, *head_dwte; /* pp > 1, last stage: the tied copy (Vl, C) and its gradient */
    float *gsend;                /* [micros * chunks] (Nl, C) gradients sent back */
    msr_comm_req_t **sreq;       /* [2 * micros * chunks] sends in flight */
    msr_comm_req_t *tied_req;    /* the head's wte gradient on its way to the first stage */
    int overlap;                 /* dp reduces during backward (GPipe, 1F1B; see mp.h) */
    int backwards;               /* backwards run this step (they go in micro-batch order) */
    int last_backward;           /* the running backward is the step's last */

    op_t *ops;
    int num_ops;

    const int *inputs, *targets; /* this step's (micros, B, T) */
    float dloss;
    double loss_sum;
    msr_dp_t *dp;

    size_t acts_live;
    msr_mp_stats_t stats;
    uint64_t recv_ns; /* this step */

    int tracing;
    uint64_t t0;
    msr_mp_span_t *spans;
    int num_spans, cap_spans;
};

static msr_status_t failed(const char *what, msr_status_t st)
{
    MSR_ERROR("mp: %s: %s: %s", what, msr_status_str(st), msr_last_error());
    return st;
}

/* ---- tracing ---- */

static void span_add(msr_mp_t *mp, int comm, uint64_t a, uint64_t b, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void span_add(msr_mp_t *mp, int comm, uint64_t a, uint64_t b, const char *fmt, ...)
{
    if (!mp->tracing)
        return;
    if (mp->num_spans == mp->cap_spans) {
        int cap = mp->cap_spans > 0 ? 2 * mp->cap_spans : 256;
        msr_mp_span_t *s = msr_realloc(mp->spans, (size_t)cap * sizeof *s);
        if (s == NULL)
            return; /* the trace loses a span, the step goes on */
        mp->spans = s;
        mp->cap_spans = cap;
    }
    msr_mp_span_t *s = &mp->spans[mp->num_spans++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    s->comm = (uint8_t)comm;
    s->start_ns = a > mp->t0 ? a - mp->t0 : 0;
    s->dur_ns = b > a ? b - a : 0;
}

void msr_mp_trace(msr_mp_t *mp, int on)
{
    mp->tracing = on;
}

const msr_mp_span_t *msr_mp_spans(const msr_mp_t *mp, int *n_p)
{
    *n_p = mp->num_spans;
    return mp->spans;
}

const msr_mp_stats_t *msr_mp_stats(const msr_mp_t *mp)
{
    return &mp->stats;
}

/* ---- tensor-parallel communication ---- */

static msr_status_t tp_allreduce(msr_mp_t *mp, void *x, size_t n, msr_dtype_t t, msr_op_t op,
                                 const char *what)
{
    if (mp->mesh->tp_comm == NULL)
        return MSR_OK;
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_comm_allreduce(mp->mesh->tp_comm, MSR_IN_PLACE, x, n, t, op);
    span_add(mp, 1, a, msr_now_ns(), "allreduce %s", what);
    return st != MSR_OK ? failed(what, st) : MSR_OK;
}

/* full (B, T, C) on every rank from each rank's local (B, T/tp, C). */
static msr_status_t seq_gather(msr_mp_t *mp, const float *local, float *full)
{
    const dims_t *d = &mp->d;
    size_t blk = d->Nl * (size_t)d->C, row = (size_t)d->Tl * (size_t)d->C;
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_comm_allgather(mp->mesh->tp_comm, local, mp->w.perm, blk, MSR_DTYPE_F32);
    if (st != MSR_OK)
        return failed("sequence allgather", st);
    for (int r = 0; r < d->tp; r++)
        for (int b = 0; b < d->B; b++)
            memcpy(full + ((size_t)b * d->T + (size_t)r * d->Tl) * d->C,
                   mp->w.perm + (size_t)r * blk + (size_t)b * row, row * sizeof(float));
    span_add(mp, 1, a, msr_now_ns(), "allgather seq");
    return MSR_OK;
}

/* local (B, T/tp, C) = this rank's positions of the sum over ranks of full
 * (B, T, C). full is left unspecified. */
static msr_status_t seq_scatter(msr_mp_t *mp, const float *full, float *local)
{
    const dims_t *d = &mp->d;
    size_t blk = d->Nl * (size_t)d->C, row = (size_t)d->Tl * (size_t)d->C;
    uint64_t a = msr_now_ns();
    for (int r = 0; r < d->tp; r++)
        for (int b = 0; b < d->B; b++)
            memcpy(mp->w.perm + (size_t)r * blk + (size_t)b * row,
                   full + ((size_t)b * d->T + (size_t)r * d->Tl) * d->C, row * sizeof(float));
    msr_status_t st = msr_comm_reduce_scatter(mp->mesh->tp_comm, mp->w.perm, local, blk,
                                              MSR_DTYPE_F32, MSR_OP_SUM);
    span_add(mp, 1, a, msr_now_ns(), "reduce-scatter seq");
    return st != MSR_OK ? failed("sequence reduce-scatter", st) : MSR_OK;
}

/* The sum over tp of full (N, C) partial results, this rank's rows of it
 * (Nl, C): in place (an allreduce) without sp, into local with sp. */
static msr_status_t tp_reduce(msr_mp_t *mp, float *full, float *local, float **out_p)
{
    if (mp->d.sp) {
        *out_p = local;
        return seq_scatter(mp, full, local);
    }
    *out_p = full;
    return tp_allreduce(mp, full, mp->d.N * (size_t)mp->d.C, MSR_DTYPE_F32, MSR_OP_SUM, "tp");
}

/* The input of a column-parallel layer: x (Nl, C) itself, or gathered. */
static msr_status_t tp_enter(msr_mp_t *mp, const float *x, float *gbuf, const float **out_p)
{
    if (!mp->d.sp) {
        *out_p = x;
        return MSR_OK;
    }
    *out_p = gbuf;
    return seq_gather(mp, x, gbuf);
}

/* The block's communication (parallel/block.h): tp_enter and tp_reduce. */
static msr_status_t block_enter(void *arg, const float *x, float *gbuf, const float **out_p)
{
    return tp_enter(arg, x, gbuf, out_p);
}

static msr_status_t block_reduce(void *arg, float *full, float *local, float **out_p)
{
    return tp_reduce(arg, full, local, out_p);
}

/* ---- a block ---- */

static int seg_of_layer(const msr_gpt_t *m, int c, int l)
{
    return m->chunk_seg[c] + (l - m->chunk_lo[c]);
}

/* Brings back what the recompute mode dropped, just before backward. */
static msr_status_t recompute(msr_mp_t *mp, const msr_gpt_block_params_t *p,
                              msr_gpt_block_acts_t *la, const float *x)
{
    const dims_t *d = &mp->d;
    if (d->mode == MSR_MP_RECOMPUTE_FULL)
        return msr_block_forward(&mp->blk, p, la, x);
    if (d->mode == MSR_MP_RECOMPUTE_SELECTIVE) {
        /* the attention output is kept; the recomputed copy goes to scratch */
        msr_attention_forward(mp->w.datty, la->att, la->qkv, d->B, d->T, d->Cl, d->NHl);
        msr_gelu_forward(la->fch_gelu, la->fch, d->N * (size_t)d->Hl);
    }
    return MSR_OK;
}

/* ---- embeddings and head ---- */

/* out (Nl, C): this rank's rows of wte[token] + wpe[t]. */
static msr_status_t embed_forward(msr_mp_t *mp, const int *tokens, float *out)
{
    const dims_t *d = &mp->d;
    msr_gpt_t *m = mp->model;
    const float *wte = m->segments[m->seg_embed].params; /* (Vl, C) */
    const float *wpe = wte + (size_t)d->Vl * d->C;       /* (maxT, C) */
    if (d->tp == 1) {
        msr_encoder_forward(out, tokens, wte, wpe, d->B, d->T, d->C);
        return MSR_OK;
    }
    int lo = mp->tr * d->Vl;
    float *part = mp->w.proj, *r;
    memset(part, 0, d->N * (size_t)d->C * sizeof(float));
    for (size_t n = 0; n < d->N; n++) {
        int v = tokens[n] - lo;
        if (v >= 0 && v < d->Vl)
            memcpy(part + n * d->C, wte + (size_t)v * d->C, (size_t)d->C * sizeof(float));
    }
    msr_status_t st = tp_reduce(mp, part, mp->w.projl, &r);
    if (st != MSR_OK)
        return st;
    int t0 = d->sp ? mp->tr * d->Tl : 0;
    for (int b = 0; b < d->B; b++)
        for (int t = 0; t < d->Tl; t++) {
            float *o = out + ((size_t)b * d->Tl + t) * d->C;
            const float *x = r + ((size_t)b * d->Tl + t) * d->C,
                        *pe = wpe + (size_t)(t0 + t) * d->C;
            for (int c = 0; c < d->C; c++)
                o[c] = x[c] + pe[c];
        }
    return MSR_OK;
}

static msr_status_t embed_backward(msr_mp_t *mp, const int *tokens, float *dout)
{
    const dims_t *d = &mp->d;
    msr_gpt_t *m = mp->model;
    float *dwte = m->segments[m->seg_embed].grads; /* (Vl, C) */
    float *dwpe = dwte + (size_t)d->Vl * d->C;     /* (maxT, C) */
    if (d->tp == 1) {
        msr_encoder_backward(dwte, dwpe, dout, tokens, d->B, d->T, d->C);
        return MSR_OK;
    }
    int t0 = d->sp ? mp->tr * d->Tl : 0;
    for (int b = 0; b < d->B; b++)
        for (int t = 0; t < d->Tl; t++) {
            const float *x = dout + ((size_t)b * d->Tl + t) * d->C;
            float *pe = dwpe + (size_t)(t0 + t) * d->C;
            for (int c = 0; c < d->C; c++)
                pe[c] += x[c];
        }
    const float *dfull;
    msr_status_t st = tp_enter(mp, dout, mp->w.dgat, &dfull);
    if (st != MSR_OK)
        return st;
    int lo = mp->tr * d->Vl;
    for (size_t n = 0; n < d->N; n++) {
        int v = tokens[n] - lo;
        if (v < 0 || v >= d->Vl)
            continue;
        float *row = dwte + (size_t)v * d->C;
        const float *x = dfull + n * d->C;
        for (int c = 0; c < d->C; c++)
            row[c] += x[c];
    }
    return MSR_OK;
}

static float *head_wte(msr_mp_t *mp, int grads)
{
    msr_gpt_t *m = mp->model;
    if (mp->pp > 1)
        return grads ? mp->head_dwte : mp->head_wte;
    return grads ? m->segments[m->seg_embed].grads : m->segments[m->seg_embed].params;
}

/* The final norm, the head and the loss of one micro-batch; x (Nl, C) is
 * the last block's output. Adds the mean loss to mp->loss_sum. */
static msr_status_t head_forward(msr_mp_t *mp, frame_t *f, const float *x, const int *targets)
{
    const dims_t *d = &mp->d;
    msr_gpt_t *m = mp->model;
    work_t *w = &mp->w;
    const float *lnfw = m->segments[m->seg_lnf].params;
    const float *g;
    msr_layernorm_forward(f->lnf, f->lnf_mean, f->lnf_rstd, x, lnfw, lnfw + d->C, (int)d->Nl, d->C);
    msr_status_t st = tp_enter(mp, f->lnf, w->gat, &g);
    if (st != MSR_OK)
        return st;
    msr_matmul_forward(w->logits, g, head_wte(mp, 0), NULL, (int)d->N, d->C, d->Vl);
    size_t N = d->N, Vl = (size_t)d->Vl;
    if (d->tp == 1) {
        msr_crossentropy_forward(w->losses, f->probs, w->logits, targets, (int)N, d->V);
    } else {
        /* the softmax over the split vocabulary: the row maxima, then the
         * sums of exponentials and the target logits, each summed over tp */
        int lo = mp->tr * d->Vl;
        for (size_t n = 0; n < N; n++) {
            const float *l = w->logits + n * Vl;
            float mx = l[0];
            for (size_t i = 1; i < Vl; i++)
                mx = l[i] > mx ? l[i] : mx;
            w->rmax[n] = mx;
        }
        if ((st = tp_allreduce(mp, w->rmax, N, MSR_DTYPE_F32, MSR_OP_MAX, "max")) != MSR_OK)
            return st;
        for (size_t n = 0; n < N; n++) {
            const float *l = w->logits + n * Vl;
            float *p = f->probs + n * Vl, sum = 0.0f;
            for (size_t i = 0; i < Vl; i++) {
                p[i] = expf(l[i] - w->rmax[n]);
                sum += p[i];
            }
            int v = targets[n] - lo;
            w->red[n] = sum;
            w->red[N + n] = v >= 0 && v < d->Vl ? l[v] : 0.0f;
        }
        if ((st = tp_allreduce(mp, w->red, 2 * N, MSR_DTYPE_F32, MSR_OP_SUM, "loss")) != MSR_OK)
            return st;
        for (size_t n = 0; n < N; n++) {
            float *p = f->probs + n * Vl, inv = 1.0f / w->red[n];
            for (size_t i = 0; i < Vl; i++)
                p[i] *= inv;
            w->losses[n] = w->rmax[n] + logf(w->red[n]) - w->red[N + n];
        }
    }
    double sum = 0.0;
    for (size_t n = 0; n < N; n++)
        sum += w->losses[n];
    mp->loss_sum += sum / (double)N;
    return MSR_OK;
}

/* Backward of head_forward: leaves the gradient of x in w->dres. */
static msr_status_t head_backward(msr_mp_t *mp, frame_t *f, const float *x, const int *targets)
{
    const dims_t *d = &mp->d;
    msr_gpt_t *m = mp->model;
    work_t *w = &mp->w;
    size_t N = d->N, Vl = (size_t)d->Vl;
    memset(w->dlogits, 0, N * Vl * sizeof(float));
    memset(w->dres, 0, d->Nl * (size_t)d->C * sizeof(float));
    memset(w->dln, 0, N * (size_t)d->C * sizeof(float));
    if (d->tp == 1) {
        msr_crossentropy_backward(w->dlogits, f->probs, targets, mp->dloss, (int)N, d->V);
    } else {
        int lo = mp->tr * d->Vl;
        for (size_t n = 0; n < N; n++) {
            const float *p = f->probs + n * Vl;
            float *dl = w->dlogits + n * Vl;
            for (size_t i = 0; i < Vl; i++)
                dl[i] += p[i] * mp->dloss;
            int v = targets[n] - lo;
            if (v >= 0 && v < d->Vl)
                dl[v] -= mp->dloss;
        }
    }
    const float *g;
    float *dl;
    msr_status_t st = tp_enter(mp, f->lnf, w->gat, &g);
    if (st != MSR_OK)
        return st;
    msr_matmul_backward(w->dln, head_wte(mp, 1), NULL, w->dlogits, g, head_wte(mp, 0), (int)N, d->C,
                        d->Vl);
    if ((st = tp_reduce(mp, w->dln, w->dlnl, &dl)) != MSR_OK)
        return st;
    const float *lnfw = m->segments[m->seg_lnf].params;
    float *dlnfw = m->segments[m->seg_lnf].grads;
    msr_layernorm_backward(w->dres, dlnfw, dlnfw + d->C, dl, x, lnfw, f->lnf_mean, f->lnf_rstd,
                           (int)d->Nl, d->C);
    return MSR_OK;
}

/* ---- the pipeline ---- */

static int tag_of(const msr_mp_t *mp, int backward, int m, int j)
{
    return (backward * mp->cfg.micros + m) * mp->nv + j;
}

static frame_t *frame_at(msr_mp_t *mp, int m, int c)
{
    return &mp->frames[(size_t)m * mp->cfg.chunks + c];
}

static msr_status_t frame_open(msr_mp_t *mp, int m, int c, frame_t *f)
{
    int j = c * mp->pp + mp->pr, layers = mp->model->chunk_hi[c] - mp->model->chunk_lo[c];
    msr_gpt_carve_t keep = {NULL, 0, 1}, scr = {NULL, 0, 1};
    carve_frame(&mp->d, layers, j == mp->nv - 1, &keep, &scr, f);
    if ((f->mem = msr_malloc(keep.used * sizeof(float))) == NULL) {
        MSR_ERROR("mp: out of memory for the activations of micro-batch %d (%zu bytes)", m,
                  keep.used * sizeof(float));
        return MSR_ERR_NO_MEMORY;
    }
    keep.base = f->mem;
    keep.used = 0;
    scr.base = mp->w.scratch;
    scr.used = 0;
    carve_frame(&mp->d, layers, j == mp->nv - 1, &keep, &scr, f);
    f->bytes = keep.used * sizeof(float);
    f->live = 1;
    mp->acts_live += f->bytes;
    if (mp->acts_live > mp->stats.acts_peak)
        mp->stats.acts_peak = mp->acts_live;
    return MSR_OK;
}

static void frame_close(msr_mp_t *mp, frame_t *f)
{
    if (!f->live)
        return;
    msr_free(f->mem);
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
    span_add(mp, 1, a, b, "recv from %d", peer);
    return st != MSR_OK ? failed("pipeline receive", st) : MSR_OK;
}

static msr_status_t send_to(msr_mp_t *mp, const float *buf, int peer, int tag, msr_comm_req_t **req)
{
    msr_status_t st = msr_comm_isend(mp->mesh->pp_comm, buf, mp->d.Nl * (size_t)mp->d.C,
                                     MSR_DTYPE_F32, peer, tag, req);
    return st != MSR_OK ? failed("pipeline send", st) : MSR_OK;
}

static msr_status_t hook(msr_mp_t *mp, int s, int acquire)
{
    const msr_gpt_hooks_t *h = msr_dp_hooks(mp->dp);
    if (acquire)
        return h->acquire(h->arg, mp->model, s, MSR_GPT_BACKWARD);
    return h->release(h->arg, mp->model, s, MSR_GPT_BACKWARD);
}

static msr_status_t seg_done(msr_mp_t *mp, int s);

static msr_status_t run_forward(msr_mp_t *mp, int m, int c)
{
    msr_gpt_t *model = mp->model;
    int j = c * mp->pp + mp->pr;
    size_t N = mp->d.N;
    frame_t *f = frame_at(mp, m, c);
    msr_status_t st = frame_open(mp, m, c, f);
    if (st != MSR_OK)
        return st;
    if (j == 0)
        st = embed_forward(mp, mp->inputs + (size_t)m * N, f->in);
    else
        st = recv_from(mp, f->in, (j - 1) % mp->pp, tag_of(mp, 0, m, j));
    if (st != MSR_OK)
        return st;
    const float *x = f->in;
    for (int l = model->chunk_lo[c]; l < model->chunk_hi[c]; l++) {
        msr_gpt_block_acts_t *la = &f->layers[l - model->chunk_lo[c]];
        msr_gpt_block_params_t p;
        msr_gpt_block_point_tp(&model->cfg, mp->tp,
                               model->segments[seg_of_layer(model, c, l)].params, &p);
        if ((st = msr_block_forward(&mp->blk, &p, la, x)) != MSR_OK)
            return st;
        x = la->res3;
    }
    if (j == mp->nv - 1)
        return head_forward(mp, f, x, mp->targets + (size_t)m * N);
    return send_to(mp, x, (j + 1) % mp->pp, tag_of(mp, 0, m, j + 1),
                   &mp->sreq[2 * ((size_t)m * mp->cfg.chunks + c)]);
}

static msr_status_t run_backward(msr_mp_t *mp, int m, int c)
{
    msr_gpt_t *model = mp->model;
    int j = c * mp->pp + mp->pr;
    size_t N = mp->d.N;
    frame_t *f = frame_at(mp, m, c);
    int lo = model->chunk_lo[c], hi = model->chunk_hi[c];
    float *dres = mp->w.dres;
    msr_status_t st;
    if (mp->overlap) {
        /* backwards go in micro-batch order: each is one dp micro-batch */
        if (mp->backwards > 0 && (st = msr_dp_micro_end(mp->dp)) != MSR_OK)
            return st;
        mp->last_backward = mp->backwards == mp->cfg.micros - 1;
        st = msr_dp_micro_begin(mp->dp, mp->backwards == 0, mp->last_backward);
        mp->backwards++;
        if (st != MSR_OK)
            return st;
    }
    if (j == mp->nv - 1) {
        if (mp->pp == 1 && (st = hook(mp, model->seg_embed, 1)) != MSR_OK)
            return st;
        if ((st = hook(mp, model->seg_lnf, 1)) != MSR_OK)
            return st;
        st = head_backward(mp, f, f->layers[hi - lo - 1].res3, mp->targets + (size_t)m * N);
        if (st == MSR_OK)
            st = hook(mp, model->seg_lnf, 0);
        if (st == MSR_OK && mp->pp == 1)
            st = hook(mp, model->seg_embed, 0);
        if (st == MSR_OK)
            st = seg_done(mp, model->seg_lnf);
        /* the head's wte gradient is complete after the last backward */
        if (st == MSR_OK && mp->overlap && mp->pp > 1 && mp->last_backward) {
            st =
                msr_comm_isend(mp->mesh->pp_comm, mp->head_dwte, (size_t)mp->d.Vl * (size_t)mp->d.C,
                               MSR_DTYPE_F32, 0, MSR_COMM_TAG_MAX - 1, &mp->tied_req);
            if (st != MSR_OK)
                return failed("sending the tied embedding's gradient", st);
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
        if ((st = hook(mp, s, 1)) != MSR_OK)
            return st;
        msr_gpt_block_params_t p, g;
        msr_gpt_block_point_tp(&model->cfg, mp->tp, model->segments[s].params, &p);
        msr_gpt_block_point_tp(&model->cfg, mp->tp, model->segments[s].grads, &g);
        if ((st = recompute(mp, &p, la, x)) != MSR_OK)
            return st;
        if ((st = msr_block_backward(&mp->blk, &p, &g, la, x, dres)) != MSR_OK)
            return st;
        if ((st = hook(mp, s, 0)) != MSR_OK || (st = seg_done(mp, s)) != MSR_OK)
            return st;
    }
    if (j == 0) {
        if ((st = hook(mp, model->seg_embed, 1)) != MSR_OK)
            return st;
        if ((st = embed_backward(mp, mp->inputs + (size_t)m * N, dres)) != MSR_OK)
            return st;
        if ((st = seg_done(mp, model->seg_embed)) != MSR_OK)
            return st;
        st = hook(mp, model->seg_embed, 0);
    } else {
        size_t k = (size_t)m * mp->cfg.chunks + c;
        float *buf = mp->gsend + k * mp->d.Nl * (size_t)mp->d.C;
        memcpy(buf, dres, mp->d.Nl * (size_t)mp->d.C * sizeof(float));
        st = send_to(mp, buf, (j - 1 + mp->nv) % mp->pp, tag_of(mp, 1, m, j - 1),
                     &mp->sreq[2 * k + 1]);
    }
    frame_close(mp, f);
    return st;
}

/* This rank's order of forwards and backwards (see mp.h). */
static void build_schedule(msr_mp_t *mp)
{
    int M = mp->cfg.micros, p = mp->pp, r = mp->pr, v = mp->cfg.chunks, n = 0;
    op_t *o = mp->ops;
#define PUT(b, mm, cc) (o[n++] = (op_t){(uint8_t)(b), (mm), (cc)})
    if (mp->cfg.schedule == MSR_MP_GPIPE) {
        for (int m = 0; m < M; m++)
            PUT(0, m, 0);
        for (int m = 0; m < M; m++)
            PUT(1, m, 0);
    } else if (mp->cfg.schedule == MSR_MP_1F1B || v == 1) {
        int warm = MSR_MIN(p - r - 1, M);
        for (int m = 0; m < warm; m++)
            PUT(0, m, 0);
        for (int i = 0; i < M - warm; i++) {
            PUT(0, warm + i, 0);
            PUT(1, i, 0);
        }
        for (int m = M - warm; m < M; m++)
            PUT(1, m, 0);
    } else {
        /* Megatron's interleaved order: groups of p micro-batches go through
         * chunk 0, then chunk 1, ...; backward runs the chunks the other way */
        int total = M * v;
        int warm = M == p ? total : MSR_MIN((p - r - 1) * 2 + (v - 1) * p, total);
#define FM(k) (((k) / (p * v)) * p + (k) % p)
#define FC(k) (((k) % (p * v)) / p)
        for (int k = 0; k < warm; k++)
            PUT(0, FM(k), FC(k));
        for (int i = 0; i < total - warm; i++) {
            PUT(0, FM(warm + i), FC(warm + i));
            PUT(1, FM(i), v - 1 - FC(i));
        }
        for (int k = total - warm; k < total; k++)
            PUT(1, FM(k), v - 1 - FC(k));
#undef FM
#undef FC
    }
#undef PUT
    mp->num_ops = n;
}

/* ---- create / destroy ---- */

static void point_work(msr_mp_t *mp, msr_gpt_carve_t *c)
{
    const dims_t *d = &mp->d;
    work_t *w = &mp->w;
    size_t N = d->N, Nl = d->Nl, C = (size_t)d->C;
    w->scratch = msr_gpt_carve(c, mp->scratch_count);
    w->gat = msr_gpt_carve(c, N * C);
    w->dgat = msr_gpt_carve(c, N * C);
    w->perm = msr_gpt_carve(c, N * C);
    w->proj = msr_gpt_carve(c, N * C);
    w->projl = msr_gpt_carve(c, Nl * C);
    w->dres = msr_gpt_carve(c, Nl * C);
    w->dln = msr_gpt_carve(c, N * C);
    w->dlnl = msr_gpt_carve(c, Nl * C);
    w->dqkv = msr_gpt_carve(c, N * 3 * (size_t)d->Cl);
    w->datty = msr_gpt_carve(c, N * (size_t)d->Cl);
    w->dfch = msr_gpt_carve(c, N * (size_t)d->Hl);
    w->dfch_gelu = msr_gpt_carve(c, N * (size_t)d->Hl);
    w->datt = msr_gpt_carve(c, (size_t)d->T * (size_t)d->T);
    w->logits = msr_gpt_carve(c, N * (size_t)d->Vl);
    w->dlogits = msr_gpt_carve(c, N * (size_t)d->Vl);
    w->losses = msr_gpt_carve(c, N);
    w->rmax = msr_gpt_carve(c, N);
    w->red = msr_gpt_carve(c, 2 * N);
}

/* The blocks' view of the runtime: this rank's shape, the work space, the
 * tensor-parallel communication (none at tp = 1). */
static void point_block(msr_mp_t *mp)
{
    const dims_t *d = &mp->d;
    const work_t *w = &mp->w;
    mp->blk_comm = (msr_block_comm_t){mp, block_enter, block_reduce, NULL};
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
        .comm = d->tp > 1 ? &mp->blk_comm : NULL,
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

msr_status_t msr_mp_create(const msr_mp_config_t *cfg, const msr_mesh_t *mesh, msr_gpt_t *model,
                           msr_mp_t **mp_p)
{
    if (msr_mp_check(&model->cfg, cfg, mesh->pp, mesh->tp) != MSR_OK) {
        MSR_ERROR("mp: %s", msr_err_msg());
        return MSR_ERR_CONFIG;
    }
    if (model->part.tp != mesh->tp || model->part.tp_rank != mesh->tp_rank ||
        model->part.pp != mesh->pp || model->part.pp_rank != mesh->pp_rank ||
        model->part.chunks != cfg->chunks) {
        MSR_ERROR("mp: the model part (tp %d/%d pp %d/%d, %d chunks) is not this rank's",
                  model->part.tp_rank, model->part.tp, model->part.pp_rank, model->part.pp,
                  model->part.chunks);
        return MSR_ERR_CONFIG;
    }
    msr_mp_t *mp = msr_calloc(1, sizeof *mp);
    if (mp == NULL)
        goto err_no_memory;
    mp->cfg = *cfg;
    mp->mesh = mesh;
    mp->model = model;
    mp->d = dims_of(&model->cfg, cfg, mesh->tp);
    mp->pp = mesh->pp;
    mp->pr = mesh->pp_rank;
    mp->tp = mesh->tp;
    mp->tr = mesh->tp_rank;
    mp->nv = mesh->pp * cfg->chunks;
    mp->overlap = cfg->schedule != MSR_MP_INTERLEAVED;

    /* the scratch every block shares: everything a fully recomputed block
     * drops (the most any mode drops) */
    dims_t all = mp->d;
    all.mode = MSR_MP_RECOMPUTE_FULL;
    msr_gpt_carve_t keep = {NULL, 0, 1}, scr = {NULL, 0, 1};
    msr_gpt_block_acts_t dummy;
    carve_layer(&all, &keep, &scr, &dummy);
    mp->scratch_count = scr.used;
    msr_gpt_carve_t cw = {NULL, 0, 1};
    point_work(mp, &cw);
    size_t nframes = (size_t)cfg->micros * (size_t)cfg->chunks;
    int max_layers = 0;
    for (int c = 0; c < cfg->chunks; c++)
        max_layers = MSR_MAX(max_layers, model->chunk_hi[c] - model->chunk_lo[c]);
    mp->wmem = msr_calloc(cw.used, sizeof(float));
    mp->frames = msr_calloc(nframes, sizeof *mp->frames);
    mp->sreq = msr_calloc(2 * nframes, sizeof *mp->sreq);
    mp->ops = msr_calloc(2 * nframes, sizeof *mp->ops);
    if (mp->wmem == NULL || mp->frames == NULL || mp->sreq == NULL || mp->ops == NULL)
        goto err_free;
    cw.base = mp->wmem;
    cw.used = 0;
    point_work(mp, &cw);
    point_block(mp);
    for (size_t k = 0; k < nframes; k++)
        if ((mp->frames[k].layers = msr_calloc((size_t)max_layers, sizeof(msr_gpt_block_acts_t))) ==
            NULL)
            goto err_free;
    if (mp->pp > 1 && (mp->pr > 0 || cfg->chunks > 1) &&
        (mp->gsend = msr_calloc(nframes * mp->d.Nl * (size_t)mp->d.C, sizeof(float))) == NULL)
        goto err_free;
    if (mp->pp > 1 && mp->pr == mp->pp - 1) {
        size_t n = (size_t)mp->d.Vl * (size_t)mp->d.C;
        mp->head_wte = msr_calloc(n, sizeof(float));
        mp->head_dwte = msr_calloc(n, sizeof(float));
        if (mp->head_wte == NULL || mp->head_dwte == NULL)
            goto err_free;
    }
    build_schedule(mp);
    for (int c = 0; c < 2; c++) {
        int lay = c == 0 ? max_layers
                         : model->chunk_hi[cfg->chunks - 1] - model->chunk_lo[cfg->chunks - 1];
        mp->stats.frame_bytes[c] = msr_mp_frame_bytes(&model->cfg, cfg, mp->tp, lay, c);
    }
    *mp_p = mp;
    return MSR_OK;

err_free:
    msr_mp_destroy(mp);
err_no_memory:
    MSR_ERROR("mp: out of memory for the runtime of a part of %zu parameters", model->num_params);
    return MSR_ERR_NO_MEMORY;
}

/* Waits for the sends in flight; returns the first failure. */
static msr_status_t sends_wait(msr_mp_t *mp)
{
    size_t n = 2 * (size_t)mp->cfg.micros * (size_t)mp->cfg.chunks;
    msr_status_t st = mp->sreq != NULL ? msr_comm_wait_all(mp->sreq, n) : MSR_OK;
    msr_status_t tst = msr_comm_wait_all(&mp->tied_req, 1);
    if (st == MSR_OK)
        st = tst;
    return st != MSR_OK ? failed("pipeline send", st) : MSR_OK;
}

void msr_mp_destroy(msr_mp_t *mp)
{
    if (mp == NULL)
        return;
    (void)sends_wait(mp);
    size_t nframes = (size_t)mp->cfg.micros * (size_t)mp->cfg.chunks;
    if (mp->frames != NULL) {
        for (size_t k = 0; k < nframes; k++) {
            frame_close(mp, &mp->frames[k]);
            msr_free(mp->frames[k].layers);
        }
    }
    msr_free(mp->frames);
    msr_free(mp->spans);
    msr_free(mp->ops);
    msr_free(mp->sreq);
    msr_free(mp->gsend);
    msr_free(mp->head_wte);
    msr_free(mp->head_dwte);
    msr_free(mp->wmem);
    msr_free(mp);
}

/* ---- the step ---- */

msr_status_t msr_mp_sync_tied(msr_mp_t *mp)
{
    if (mp->pp == 1)
        return MSR_OK;
    size_t n = (size_t)mp->d.Vl * (size_t)mp->d.C;
    msr_status_t st = MSR_OK;
    if (mp->pr == 0)
        st = msr_comm_send(mp->mesh->pp_comm, mp->model->segments[mp->model->seg_embed].params, n,
                           MSR_DTYPE_F32, mp->pp - 1, MSR_COMM_TAG_MAX);
    else if (mp->pr == mp->pp - 1)
        st = msr_comm_recv(mp->mesh->pp_comm, mp->head_wte, n, MSR_DTYPE_F32, 0, MSR_COMM_TAG_MAX);
    return st != MSR_OK ? failed("sending the tied embedding to the last stage", st) : MSR_OK;
}

/* The first stage adds the head's wte gradient (sent by the last stage)
 * to its own; the segment must be acquired. */
static msr_status_t tied_add(msr_mp_t *mp)
{
    msr_gpt_t *m = mp->model;
    size_t n = (size_t)mp->d.Vl * (size_t)mp->d.C;
    float *tmp = mp->w.dln; /* (N, C) is free here; used if it is large enough */
    float *buf = n <= mp->d.N * (size_t)mp->d.C ? tmp : msr_malloc(n * sizeof(float));
    if (buf == NULL)
        return MSR_ERR_NO_MEMORY;
    uint64_t a = msr_now_ns();
    msr_status_t st =
        msr_comm_recv(mp->mesh->pp_comm, buf, n, MSR_DTYPE_F32, mp->pp - 1, MSR_COMM_TAG_MAX - 1);
    if (st == MSR_OK) {
        float *g = m->segments[m->seg_embed].grads;
        for (size_t i = 0; i < n; i++)
            g[i] += buf[i];
    }
    span_add(mp, 1, a, msr_now_ns(), "tied wte grad");
    if (buf != tmp)
        msr_free(buf);
    return st != MSR_OK ? failed("receiving the tied embedding's gradient", st) : MSR_OK;
}

/* Sequence parallel: sums the partial gradients of the tp-replicated
 * tensors of segment s (seg < 0: of every segment) over tp, packed into
 * one allreduce. */
static msr_status_t sp_sum(msr_mp_t *mp, int seg)
{
    msr_gpt_t *m = mp->model;
    size_t total = 0;
    for (int k = 0; k < m->num_tensors; k++)
        if (m->tensors[k].tp_replicated && (seg < 0 || m->tensors[k].segment == seg))
            total += m->tensors[k].count;
    if (total == 0)
        return MSR_OK;
    float *buf = msr_malloc(total * sizeof(float));
    if (buf == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_status_t st = MSR_OK;
    for (int pass = 0; pass < 2 && st == MSR_OK; pass++) {
        size_t off = 0;
        for (int k = 0; k < m->num_tensors; k++) {
            const msr_gpt_tensor_t *t = &m->tensors[k];
            if (!t->tp_replicated || (seg >= 0 && t->segment != seg))
                continue;
            const msr_gpt_segment_t *s = &m->segments[t->segment];
            float *g = s->grads + (t->offset - s->offset);
            if (pass == 0)
                memcpy(buf + off, g, t->count * sizeof(float));
            else
                memcpy(g, buf + off, t->count * sizeof(float));
            off += t->count;
        }
        if (pass == 0)
            st = tp_allreduce(mp, buf, total, MSR_DTYPE_F32, MSR_OP_SUM, "sp grads");
    }
    msr_free(buf);
    return st;
}

/* Reduce-once path (interleaved): at the end of the step's backwards the
 * head's wte gradient joins the first stage's, and under sp the
 * tp-replicated parameters' partial gradients are summed over tp. */
static msr_status_t finish_grads(msr_mp_t *mp)
{
    msr_gpt_t *m = mp->model;
    msr_status_t st = MSR_OK;
    if (mp->pp > 1 && mp->pr == mp->pp - 1) {
        st = msr_comm_send(mp->mesh->pp_comm, mp->head_dwte, (size_t)mp->d.Vl * (size_t)mp->d.C,
                           MSR_DTYPE_F32, 0, MSR_COMM_TAG_MAX - 1);
        if (st != MSR_OK)
            return failed("sending the tied embedding's gradient", st);
    } else if (mp->pp > 1 && mp->pr == 0) {
        if ((st = hook(mp, m->seg_embed, 1)) == MSR_OK && (st = tied_add(mp)) == MSR_OK)
            st = hook(mp, m->seg_embed, 0);
        if (st != MSR_OK)
            return st;
    }
    return mp->d.sp ? sp_sum(mp, -1) : MSR_OK;
}

/* Overlap path: segment s is done for this backward. When this backward
 * reduces (the step's last; every one under ZeRO-2), its gradient is made
 * final (sp sum, the tied gradient on the last backward) and handed to dp,
 * whose buckets start as they complete. */
static msr_status_t seg_done(msr_mp_t *mp, int s)
{
    if (!mp->overlap || !mp->dp->reduce_now)
        return MSR_OK;
    msr_status_t st;
    if (mp->d.sp && (st = sp_sum(mp, s)) != MSR_OK)
        return st;
    if (s == mp->model->seg_embed && mp->pp > 1 && mp->last_backward &&
        (st = tied_add(mp)) != MSR_OK)
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
        return failed("barrier before a traced step", st);
    /* what a failed run may have left: sends in flight, activations */
    if ((st = sends_wait(mp)) != MSR_OK)
        return st;
    for (size_t k = 0; k < (size_t)mp->cfg.micros * (size_t)mp->cfg.chunks; k++)
        frame_close(mp, &mp->frames[k]);
    uint64_t t0 = msr_now_ns();
    mp->t0 = t0;
    mp->inputs = inputs;
    mp->targets = targets;
    mp->dloss = dloss;
    mp->dp = dp;
    mp->loss_sum = 0.0;
    mp->recv_ns = 0;
    if (mp->head_dwte != NULL)
        memset(mp->head_dwte, 0, (size_t)mp->d.Vl * (size_t)mp->d.C * sizeof(float));
    mp->backwards = 0;
    mp->last_backward = 0;
    if (!mp->overlap && (st = msr_dp_micro_begin(dp, 1, 1)) != MSR_OK)
        return st;
    uint64_t busy = 0;
    for (int k = 0; k < mp->num_ops; k++) {
        const op_t *o = &mp->ops[k];
        uint64_t r0 = mp->recv_ns, a = msr_now_ns();
        st = o->backward ? run_backward(mp, o->m, o->c) : run_forward(mp, o->m, o->c);
        uint64_t b = msr_now_ns(), waited = mp->recv_ns - r0;
        busy += (b - a) - waited;
        /* the op's receive comes first: its compute starts after it */
        span_add(mp, 0, a + waited, b, o->backward ? "B%d.%d" : "F%d.%d", o->m, o->c);
        if (st != MSR_OK)
            return st;
    }
    uint64_t a = msr_now_ns();
    if ((st = sends_wait(mp)) != MSR_OK)
        return st;
    if (!mp->overlap && (st = finish_grads(mp)) != MSR_OK)
        return st;
    uint64_t b = msr_now_ns();
    st = mp->overlap ? msr_dp_micro_end(dp) : msr_dp_reduce_all(dp);
    span_add(mp, 1, b, msr_now_ns(), "dp wait");
    (void)a;
    if (st != MSR_OK)
        return st;
    mp->stats.steps++;
    mp->stats.step_ns += msr_now_ns() - t0;
    mp->stats.busy_ns += busy;
    mp->stats.recv_wait_ns += mp->recv_ns;
    *loss_p = mp->pr == mp->pp - 1 && mp->tr == 0 ? mp->loss_sum : 0.0;
    return MSR_OK;
}

void msr_mp_span_update(msr_mp_t *mp, uint64_t a, uint64_t b)
{
    span_add(mp, 0, a, b, "optimizer");
}
