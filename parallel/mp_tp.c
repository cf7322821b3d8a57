/* Model parallel's tensor-parallel side (see mp.h): the collectives
 * between the layers (sequence parallel's included), the blocks' view of
 * them, and the vocabulary-parallel embeddings and head. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
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
 * (dir -1). */
static void seq_permute(const msr_mp_t *mp, int B, float *perm, float *full, int dir)
{
    const dims_t *d = &mp->d;
    size_t row = (size_t)d->Tl * (size_t)d->C, blk = (size_t)B * row;
    for (int r = 0; r < d->tp; r++)
        for (int b = 0; b < B; b++) {
            float *p = perm + (size_t)r * blk + (size_t)b * row;
            float *f = full + ((size_t)b * d->T + (size_t)r * d->Tl) * d->C;
            memcpy(dir > 0 ? f : p, dir > 0 ? p : f, row * sizeof(float));
        }
}

/* full (B, T, C) on every rank from each rank's local (B, T/tp, C), for
 * the micro-batch's B sequences or a copy's B/2 (through perm, (B T, C)). */
static msr_status_t seq_gather(msr_mp_t *mp, int B, float *perm, const float *local, float *full)
{
    size_t blk = (size_t)B * mp->d.Tl * (size_t)mp->d.C;
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_comm_allgather(mp->mesh->tp_comm, local, perm, blk, MSR_DTYPE_F32);
    if (st != MSR_OK)
        return msr_mp_failed("sequence allgather", st);
    seq_permute(mp, B, perm, full, 1);
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "allgather seq");
    return MSR_OK;
}

/* local (B, T/tp, C) = this rank's positions of the sum over ranks of full
 * (B, T, C). full is left unspecified. */
static msr_status_t seq_scatter(msr_mp_t *mp, int B, float *perm, float *full, float *local)
{
    size_t blk = (size_t)B * mp->d.Tl * (size_t)mp->d.C;
    uint64_t a = msr_now_ns();
    seq_permute(mp, B, perm, full, -1);
    msr_status_t st =
        msr_comm_reduce_scatter(mp->mesh->tp_comm, perm, local, blk, MSR_DTYPE_F32, MSR_OP_SUM);
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "reduce-scatter seq");
    return st != MSR_OK ? msr_mp_failed("sequence reduce-scatter", st) : MSR_OK;
}

/* The sum over tp of full (N, C) partial results, this rank's rows of it
 * (Nl, C): in place (an allreduce) without sp, into local with sp. */
static msr_status_t tp_reduce(msr_mp_t *mp, float *full, float *local, float **out_p)
{
    if (mp->d.sp) {
        *out_p = local;
        return seq_scatter(mp, mp->d.B, mp->w.perm, full, local);
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
    return seq_gather(mp, mp->d.B, mp->w.perm, x, gbuf);
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

/* ---- tensor-parallel overlap ---- */

/* Copy c's perm: its half of the work space's (N, C) (the other copy's
 * reduce-scatter may be reading the other half). */
static float *copy_perm(const struct msr_mp_copy *c)
{
    return c->mp->w.perm + (size_t)c->i * (c->mp->d.N / 2) * (size_t)c->mp->d.C;
}

/* Starts backward's gather pre.k of a copy's saved norm output (Nl/2, C)
 * into w.proj, laid out by rank (mp_impl.h's pre). */
static msr_status_t pre_start(msr_mp_t *mp)
{
    size_t blk = (size_t)(mp->d.B / 2) * mp->d.Tl * (size_t)mp->d.C;
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_comm_iallgather(mp->mesh->tp_comm, mp->pre.src[mp->pre.k], mp->w.proj,
                                          blk, MSR_DTYPE_F32, &mp->pre.req);
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "start gather");
    if (st != MSR_OK)
        return msr_mp_failed("tp overlap allgather", st);
    mp->pre.live = 1;
    mp->pre.st = MSR_OK;
    return MSR_OK;
}

/* Waits for the gather in flight (the trace's "wait gather": the time
 * exposed) and, gbuf non-NULL, lays it out as (B/2, T, C) there. */
static msr_status_t pre_wait(msr_mp_t *mp, float *gbuf)
{
    uint64_t a = msr_now_ns();
    msr_status_t st = mp->pre.st;
    if (mp->pre.req != NULL)
        st = msr_comm_wait(mp->pre.req);
    mp->pre.req = NULL;
    mp->pre.live = 0;
    if (st == MSR_OK && gbuf != NULL)
        seq_permute(mp, mp->d.B / 2, mp->w.proj, gbuf, 1);
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "wait gather");
    return st != MSR_OK ? msr_mp_failed("tp overlap allgather", st) : MSR_OK;
}

/* Copy c's enter: x (Nl/2, C) itself, or its B/2 sequences gathered: the
 * gather in flight when x is the one started ahead for it (then the next
 * is started), else a blocking one. */
static msr_status_t copy_enter(void *arg, const float *x, float *gbuf, const float **out_p)
{
    struct msr_mp_copy *c = arg;
    msr_mp_t *mp = c->mp;
    if (!mp->d.sp) {
        *out_p = x;
        return MSR_OK;
    }
    *out_p = gbuf;
    int k = mp->pre.k;
    if (!mp->pre.live || x != mp->pre.src[k] || gbuf != mp->pre.gbuf[k])
        return seq_gather(mp, mp->d.B / 2, copy_perm(c), x, gbuf);
    msr_status_t st = pre_wait(mp, gbuf);
    if (st == MSR_OK && ++mp->pre.k < 4)
        st = pre_start(mp);
    return st;
}

/* Copy c's blocking reduce (block.h's reduce, for its B/2 sequences). */
static msr_status_t copy_reduce(void *arg, float *full, float *local, float **out_p)
{
    struct msr_mp_copy *c = arg;
    msr_mp_t *mp = c->mp;
    if (mp->d.sp) {
        *out_p = local;
        return seq_scatter(mp, mp->d.B / 2, copy_perm(c), full, local);
    }
    *out_p = full;
    return msr_mp_tp_allreduce(mp, full, mp->d.N / 2 * (size_t)mp->d.C, MSR_DTYPE_F32, MSR_OP_SUM,
                               "tp");
}

/* Whether full and local are copy i's rows of the work space's tables a
 * reduction reads and writes: its half of proj (N, C) and projl (Nl, C),
 * or of dln and dlnl. Rows elsewhere would be another buffer's (or
 * scratch nothing else reads, where a wrong offset goes unnoticed). */
static int copy_rows(const msr_mp_t *mp, int i, const float *full, const float *local)
{
    const work_t *w = &mp->w;
    size_t n = mp->d.N / 2 * (size_t)mp->d.C * i, nl = mp->d.Nl / 2 * (size_t)mp->d.C * i;
    return (full == w->proj + n && local == w->projl + nl) ||
           (full == w->dln + n && local == w->dlnl + nl);
}

/* Starts copy c's reduction of its full (N/2, C): an allreduce in place,
 * or under sp a reduce-scatter into local (Nl/2, C) from its rows laid
 * out by rank in its perm; *req_p: its slot. */
static msr_status_t copy_reduce_start(void *arg, float *full, float *local, void **req_p)
{
    struct msr_mp_copy *c = arg;
    msr_mp_t *mp = c->mp;
    msr_comm_t *comm = mp->mesh->tp_comm;
    int i = c->i, B = mp->d.B / 2;
    if (mp->flight[i].used)
        return msr_err(MSR_ERR_INTERNAL, "mp: copy %d's second tp reduction in flight", i);
    if (!copy_rows(mp, i, full, local))
        return msr_err(MSR_ERR_INTERNAL, "mp: copy %d's tp reduction outside its rows", i);
    uint64_t a = msr_now_ns();
    msr_status_t st;
    if (mp->d.sp) {
        seq_permute(mp, B, copy_perm(c), full, -1);
        st = msr_comm_ireduce_scatter(comm, copy_perm(c), local,
                                      (size_t)B * mp->d.Tl * (size_t)mp->d.C, MSR_DTYPE_F32,
                                      MSR_OP_SUM, &mp->flight[i].req);
    } else {
        st = msr_comm_iallreduce(comm, MSR_IN_PLACE, full, mp->d.N / 2 * (size_t)mp->d.C,
                                 MSR_DTYPE_F32, MSR_OP_SUM, &mp->flight[i].req);
    }
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "start tp");
    if (st != MSR_OK)
        return msr_mp_failed("tp overlap reduction", st);
    mp->flight[i].used = 1;
    mp->flight[i].st = MSR_OK;
    mp->flight[i].buf = full;
    *req_p = &mp->flight[i];
    return MSR_OK;
}

/* Waits for copy c's reduction: the time a rank waits here is tp's
 * exposed communication (the trace's "wait tp"). *out_p: full, or local
 * under sp. */
static msr_status_t copy_reduce_wait(void *arg, void *req, float *full, float *local, float **out_p)
{
    struct msr_mp_copy *c = arg;
    msr_mp_t *mp = c->mp;
    int i = c->i;
    if (req != &mp->flight[i])
        return msr_err(MSR_ERR_INTERNAL, "mp: copy %d waited for the other copy's reduction", i);
    uint64_t a = msr_now_ns();
    msr_status_t st = mp->flight[i].st;
    if (mp->flight[i].req != NULL)
        st = msr_comm_wait(mp->flight[i].req);
    mp->flight[i].req = NULL;
    mp->flight[i].used = 0;
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "wait tp");
    *out_p = mp->d.sp ? local : full;
    if (st != MSR_OK)
        return msr_mp_failed("tp overlap reduction", st);
    if (mp->flight[i].buf != full)
        return msr_err(MSR_ERR_INTERNAL, "mp: copy %d waited for another buffer's reduction", i);
    return MSR_OK;
}

/* Between the kernels: drives the allreduces in flight (progress runs
 * only in the thread that tests or waits, include/msrun/comm.h). */
static msr_status_t block_poll(void *arg)
{
    msr_mp_t *mp = arg;
    for (int i = 0; i < 2; i++) {
        if (mp->flight[i].req == NULL)
            continue;
        msr_status_t st = msr_comm_test(&mp->flight[i].req);
        if (st != MSR_IN_PROGRESS)
            mp->flight[i].st = st;
    }
    if (mp->pre.req != NULL) {
        msr_status_t st = msr_comm_test(&mp->pre.req);
        if (st != MSR_IN_PROGRESS)
            mp->pre.st = st;
    }
    return MSR_OK;
}

static msr_status_t copy_poll(void *arg)
{
    return block_poll(((struct msr_mp_copy *)arg)->mp);
}

/* Context parallel's ring attention (mp_cp.c) on copy c's B/2 sequences:
 * the ring reads the micro-batch's shape from mp->d, so for the call its
 * batch is the copy's (the ring finishes inside it; poll reads no shape). */
static void copy_shape(msr_mp_t *mp, int half)
{
    mp->d.B = half ? mp->d.B / 2 : mp->d.B * 2;
    mp->d.N = half ? mp->d.N / 2 : mp->d.N * 2;
}

static msr_status_t copy_attend(void *arg, float *out, float *att, const float *qkv)
{
    msr_mp_t *mp = ((struct msr_mp_copy *)arg)->mp;
    copy_shape(mp, 1);
    msr_status_t st = msr_mp_cp_attend(mp, out, att, qkv);
    copy_shape(mp, 0);
    return st;
}

static msr_status_t copy_attend_backward(void *arg, float *dqkv, const float *dout,
                                         const float *qkv, const float *out, const float *att)
{
    msr_mp_t *mp = ((struct msr_mp_copy *)arg)->mp;
    copy_shape(mp, 1);
    msr_status_t st = msr_mp_cp_attend_backward(mp, dqkv, dout, qkv, out, att);
    copy_shape(mp, 0);
    return st;
}

/* A copy's activations: rows [i N/2, (i+1) N/2) of every (N, width)
 * table, [i Nl/2, (i+1) Nl/2) of every (Nl, width) one (sequence
 * parallel's rows are (B, T/tp), so a copy's B/2 sequences are
 * contiguous there too), sequences [i B/2, (i+1) B/2) of att (B, NHl, T,
 * T), or under cp rows of att (N, NHl), the ring's logsumexp. */
static float *rows(float *x, int i, size_t n)
{
    return x != NULL ? x + (size_t)i * n : NULL;
}

static void half_acts(const msr_mp_t *mp, const msr_gpt_block_acts_t *la, int i,
                      msr_gpt_block_acts_t *h)
{
    const dims_t *d = &mp->d;
    size_t N = d->N / 2, Nl = d->Nl / 2, C = (size_t)d->C, Hl = (size_t)d->Hl;
    size_t qkv = mp->blk.llama ? (size_t)d->Cl + 2 * (size_t)mp->blk.NKVl * (d->Cl / d->NHl)
                               : 3 * (size_t)d->Cl;
    size_t fc = mp->blk.llama ? 2 * Hl : Hl;
    *h = (msr_gpt_block_acts_t){
        .ln1 = rows(la->ln1, i, Nl * C),
        .ln1_mean = rows(la->ln1_mean, i, Nl),
        .ln1_rstd = rows(la->ln1_rstd, i, Nl),
        .qkv = rows(la->qkv, i, N * qkv),
        .atty = rows(la->atty, i, N * (size_t)d->Cl),
        .att = rows(la->att, i,
                    d->cp > 1 ? N * (size_t)d->NHl
                              : (size_t)(d->B / 2) * d->NHl * (size_t)d->T * d->T),
        .res2 = rows(la->res2, i, Nl * C),
        .ln2 = rows(la->ln2, i, Nl * C),
        .ln2_mean = rows(la->ln2_mean, i, Nl),
        .ln2_rstd = rows(la->ln2_rstd, i, Nl),
        .fch = rows(la->fch, i, N * fc),
        .fch_gelu = rows(la->fch_gelu, i, N * Hl),
        .res3 = rows(la->res3, i, Nl * C),
    };
}

static void half_blocks(msr_mp_t *mp, msr_block_t *h);

msr_status_t msr_mp_block_forward_split(msr_mp_t *mp, const msr_gpt_block_params_t *p,
                                        msr_gpt_block_acts_t *la, const float *x)
{
    size_t half = mp->d.Nl / 2 * (size_t)mp->d.C; /* a copy's rows of x (Nl, C) */
    msr_block_t h[2];
    msr_gpt_block_acts_t a[2];
    const float *hx[2] = {x, x + half};
    half_blocks(mp, h);
    for (int i = 0; i < 2; i++)
        half_acts(mp, la, i, &a[i]);
    return msr_block_forward_split(h, p, a, hx);
}

/* The two copies' views of the block: halves of the work space's row
 * tables (the (T,T) attention scratch is used by one copy at a time),
 * each copy's communication. */
static void half_blocks(msr_mp_t *mp, msr_block_t *h)
{
    const dims_t *d = &mp->d;
    size_t N = d->N / 2, Nl = d->Nl / 2, C = (size_t)d->C, Hl = (size_t)d->Hl;
    size_t qkv = mp->blk.llama ? (size_t)d->Cl + 2 * (size_t)mp->blk.NKVl * (d->Cl / d->NHl)
                               : 3 * (size_t)d->Cl;
    size_t fc = mp->blk.llama ? 2 * Hl : Hl;
    for (int i = 0; i < 2; i++) {
        h[i] = mp->blk;
        h[i].B /= 2;
        h[i].N /= 2;
        h[i].Nl /= 2;
        h[i].comm = &mp->copy_comm[i];
        h[i].proj += (size_t)i * N * C;
        h[i].projl += (size_t)i * Nl * C;
        h[i].gat = rows(h[i].gat, i, N * C); /* NULL without sp */
        h[i].dgat = rows(h[i].dgat, i, N * C);
        h[i].dln += (size_t)i * N * C;
        h[i].dlnl += (size_t)i * Nl * C;
        h[i].dqkv += (size_t)i * N * qkv;
        h[i].datty += (size_t)i * N * (size_t)d->Cl;
        h[i].dfch += (size_t)i * N * fc;
        h[i].dfch_gelu += (size_t)i * N * Hl;
    }
}

msr_status_t msr_mp_block_backward_split(msr_mp_t *mp, const msr_gpt_block_params_t *p,
                                         const msr_gpt_block_params_t *g,
                                         const msr_gpt_block_acts_t *la, const float *x,
                                         float *dres)
{
    size_t half = mp->d.Nl / 2 * (size_t)mp->d.C; /* a copy's rows of x (Nl, C) */
    msr_block_t h[2];
    msr_gpt_block_acts_t a[2];
    const float *hx[2] = {x, x + half};
    float *hd[2] = {dres, dres + half};
    half_blocks(mp, h);
    for (int i = 0; i < 2; i++)
        half_acts(mp, la, i, &a[i]);
    if (!mp->d.sp)
        return msr_block_backward_split(h, p, g, a, hx, hd);
    /* the saved norm outputs' gathers, one ahead: ln2's of A then B (the
     * MLPs' backward), ln1's of A then B (attention's) */
    const float *src[4] = {a[0].ln2, a[1].ln2, a[0].ln1, a[1].ln1};
    for (int k = 0; k < 4; k++) {
        mp->pre.src[k] = src[k];
        mp->pre.gbuf[k] = h[k % 2].gat;
    }
    mp->pre.k = 0;
    msr_status_t st = pre_start(mp);
    if (st != MSR_OK)
        return st;
    st = msr_block_backward_split(h, p, g, a, hx, hd);
    if (mp->pre.live)
        (void)pre_wait(mp, NULL);
    if (st == MSR_OK && mp->pre.k < 4)
        return msr_err(MSR_ERR_INTERNAL, "mp: backward entered %d of its 4 gathers started ahead",
                       mp->pre.k);
    return st;
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
        ov ? block_poll : NULL,
        cp ? msr_mp_cp_attend : NULL,
        cp ? msr_mp_cp_attend_backward : NULL,
        NULL,
        NULL,
    };
    for (int i = 0; i < 2 && ov; i++) {
        mp->copy[i] = (struct msr_mp_copy){mp, i};
        mp->copy_comm[i] = (msr_block_comm_t){
            &mp->copy[i],
            copy_enter,
            copy_reduce,
            copy_poll,
            cp ? copy_attend : NULL,
            cp ? copy_attend_backward : NULL,
            copy_reduce_start,
            copy_reduce_wait,
        };
    }
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
static int global_pos(const msr_mp_t *mp, int t)
{
    return mp->cp > 1 ? mp->cp_pos[(size_t)mp->cr * mp->d.T + (size_t)t] : t;
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
        for (size_t n = 0; n < d->N; n++)
            memcpy(out + n * d->C, wte + (size_t)tokens[n] * d->C, (size_t)d->C * sizeof(float));
        return MSR_OK;
    }
    if (d->tp == 1 && d->cp == 1) {
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
            const float *x = r + ((size_t)b * d->Tl + t) * d->C;
            if (is_llama(mp)) { /* no wpe: the rows as they are */
                memcpy(o, x, (size_t)d->C * sizeof(float));
                continue;
            }
            const float *pe = wpe + (size_t)global_pos(mp, t0 + t) * d->C;
            for (int c = 0; c < d->C; c++)
                o[c] = x[c] + pe[c];
        }
    return MSR_OK;
}

msr_status_t msr_mp_embed_backward(msr_mp_t *mp, const int *tokens, float *dout)
{
    const dims_t *d = &mp->d;
    msr_gpt_t *m = mp->model;
    float *dwte = m->segments[m->seg_embed].grads; /* (Vl, C) */
    float *dwpe = dwte + (size_t)d->Vl * d->C;     /* (maxT, C) */
    if (d->tp == 1 && d->cp == 1 && !is_llama(mp)) {
        msr_encoder_backward(dwte, dwpe, dout, tokens, d->B, d->T, d->C);
        return MSR_OK;
    }
    int t0 = d->sp ? mp->tr * d->Tl : 0;
    for (int b = 0; b < d->B && !is_llama(mp); b++)
        for (int t = 0; t < d->Tl; t++) {
            const float *x = dout + ((size_t)b * d->Tl + t) * d->C;
            float *pe = dwpe + (size_t)global_pos(mp, t0 + t) * d->C;
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

/* The head's (Vl, C) matrix: the tied wte (the last stage's copy with
 * pp > 1), or a Llama's lm_head after lnfw. */
static float *head_wte(msr_mp_t *mp, int grads)
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

/* The final norm, the head and the loss of one micro-batch; x (Nl, C) is
 * the last block's output. Adds the mean loss to mp->loss_sum. */
msr_status_t msr_mp_head_forward(msr_mp_t *mp, frame_t *f, const float *x, const int *targets)
{
    const dims_t *d = &mp->d;
    msr_gpt_t *m = mp->model;
    work_t *w = &mp->w;
    const float *lnfw = m->segments[m->seg_lnf].params;
    const float *g;
    if (is_llama(mp)) {
        msr_rmsnorm_forward(f->lnf, f->lnf_rstd, x, lnfw, (int)d->Nl, d->C);
    } else {
        /* without sp the head's product reads lnf itself: its bf16
         * operand is written as lnf is */
        uint16_t *lnf16 =
            d->Nl == d->N ? msr_products_operand(m->prod, f->lnf, d->N * (size_t)d->C) : NULL;
        msr_layernorm_forward_bf16(f->lnf, lnf16, f->lnf_mean, f->lnf_rstd, x, lnfw, lnfw + d->C,
                                   (int)d->Nl, d->C);
    }
    msr_status_t st = tp_enter(mp, f->lnf, w->gat, &g);
    if (st != MSR_OK)
        return st;
    msr_matmul_forward(mp->model->prod, w->logits, g, head_wte(mp, 0), NULL, (int)d->N, d->C,
                       d->Vl);
    if ((st = msr_products_status(mp->model->prod)) != MSR_OK)
        return st; /* a failed product, logged where it failed */
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
        if ((st = msr_mp_tp_allreduce(mp, w->rmax, N, MSR_DTYPE_F32, MSR_OP_MAX, "max")) != MSR_OK)
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
        if ((st = msr_mp_tp_allreduce(mp, w->red, 2 * N, MSR_DTYPE_F32, MSR_OP_SUM, "loss")) !=
            MSR_OK)
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
    msr_matmul_backward(mp->model->prod, w->dln, head_wte(mp, 1), NULL, w->dlogits, g,
                        head_wte(mp, 0), (int)N, d->C, d->Vl);
    if ((st = msr_products_status(mp->model->prod)) != MSR_OK)
        return st;
    if ((st = tp_reduce(mp, w->dln, w->dlnl, &dl)) != MSR_OK)
        return st;
    const float *lnfw = m->segments[m->seg_lnf].params;
    float *dlnfw = m->segments[m->seg_lnf].grads;
    if (is_llama(mp))
        msr_rmsnorm_backward(w->dres, dlnfw, dl, x, lnfw, f->lnf_rstd, (int)d->Nl, d->C);
    else
        msr_layernorm_backward(w->dres, dlnfw, dlnfw + d->C, dl, x, lnfw, f->lnf_mean, f->lnf_rstd,
                               (int)d->Nl, d->C);
    return MSR_OK;
}
