/* Model parallel's tensor-parallel overlap (--tp-overlap, see mp.h): a
 * micro-batch's blocks as two copies of B/2 sequences, each copy's view of
 * the tp group, its reductions (and under sp forward's gathers) in flight
 * while the other copy computes and, under sp, backward's gathers started
 * ahead. */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "parallel/mp_impl.h"

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
        st = msr_mp_seq_permute(mp, mp->d.B / 2, mp->w.proj, gbuf, 1);
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
        return msr_mp_seq_gather(mp, mp->d.B / 2, copy_perm(c), x, gbuf);
    msr_status_t st = pre_wait(mp, gbuf);
    if (st == MSR_OK && ++mp->pre.k < 4)
        st = pre_start(mp);
    return st;
}

/* Copy i's slot holds the collective just started in its req (gather:
 * forward's allgather, else a reduction on buf); *req_p: the slot. */
static msr_status_t flight_started(msr_mp_t *mp, int i, int gather, float *buf, void **req_p)
{
    mp->flight[i].used = 1;
    mp->flight[i].gather = gather;
    mp->flight[i].st = MSR_OK;
    mp->flight[i].buf = buf;
    *req_p = &mp->flight[i];
    return MSR_OK;
}

/* Waits for what copy i's slot holds (its status if a poll saw it end)
 * and frees the slot. */
static msr_status_t flight_finish(msr_mp_t *mp, int i)
{
    msr_status_t st = mp->flight[i].st;
    if (mp->flight[i].req != NULL)
        st = msr_comm_wait(mp->flight[i].req);
    mp->flight[i].req = NULL;
    mp->flight[i].used = 0;
    return st;
}

/* Starts copy c's forward allgather of x (Nl/2, C), its B/2 sequences'
 * norm output, into its half of w.perm (laid out by rank); *req_p: its
 * slot, which holds one collective at a time. */
static msr_status_t copy_enter_start(void *arg, const float *x, void **req_p)
{
    struct msr_mp_copy *c = arg;
    msr_mp_t *mp = c->mp;
    int i = c->i;
    if (mp->flight[i].used)
        return msr_err(MSR_ERR_INTERNAL, "mp: copy %d's gather with a collective in flight", i);
    size_t blk = (size_t)(mp->d.B / 2) * mp->d.Tl * (size_t)mp->d.C;
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_comm_iallgather(mp->mesh->tp_comm, x, copy_perm(c), blk, MSR_DTYPE_F32,
                                          &mp->flight[i].req);
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "start gather");
    if (st != MSR_OK)
        return msr_mp_failed("tp overlap allgather", st);
    return flight_started(mp, i, 1, NULL, req_p);
}

/* Waits for copy c's forward gather (the trace's "wait gather": the time
 * exposed) and lays its rows out as (B/2, T, C) in gbuf: *out_p. */
static msr_status_t copy_enter_wait(void *arg, void *req, float *gbuf, const float **out_p)
{
    struct msr_mp_copy *c = arg;
    msr_mp_t *mp = c->mp;
    int i = c->i;
    if (req != &mp->flight[i] || !mp->flight[i].gather)
        return msr_err(MSR_ERR_INTERNAL, "mp: copy %d waited for a gather not its own", i);
    uint64_t a = msr_now_ns();
    msr_status_t st = flight_finish(mp, i);
    if (st == MSR_OK)
        st = msr_mp_seq_permute(mp, mp->d.B / 2, copy_perm(c), gbuf, 1);
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "wait gather");
    *out_p = gbuf;
    return st != MSR_OK ? msr_mp_failed("tp overlap allgather", st) : MSR_OK;
}

/* Copy c's blocking reduce (block.h's reduce, for its B/2 sequences). */
static msr_status_t copy_reduce(void *arg, float *full, float *local, float **out_p)
{
    struct msr_mp_copy *c = arg;
    msr_mp_t *mp = c->mp;
    if (mp->d.sp) {
        *out_p = local;
        return msr_mp_seq_scatter(mp, mp->d.B / 2, copy_perm(c), full, local);
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
        if ((st = msr_mp_seq_permute(mp, B, copy_perm(c), full, -1)) != MSR_OK)
            return st;
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
    return flight_started(mp, i, 0, full, req_p);
}

/* Waits for copy c's reduction: the time a rank waits here is tp's
 * exposed communication (the trace's "wait tp"). *out_p: full, or local
 * under sp. */
static msr_status_t copy_reduce_wait(void *arg, void *req, float *full, float *local, float **out_p)
{
    struct msr_mp_copy *c = arg;
    msr_mp_t *mp = c->mp;
    int i = c->i;
    if (req != &mp->flight[i] || mp->flight[i].gather)
        return msr_err(MSR_ERR_INTERNAL, "mp: copy %d waited for a reduction not its own", i);
    uint64_t a = msr_now_ns();
    msr_status_t st = flight_finish(mp, i);
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
msr_status_t msr_mp_tp_poll(void *arg)
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
    return msr_mp_tp_poll(((struct msr_mp_copy *)arg)->mp);
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

/* The two copies' views of the block's communication (mp_impl.h). */
void msr_mp_point_copies(msr_mp_t *mp)
{
    int cp = mp->d.cp > 1, sp = mp->d.sp;
    for (int i = 0; i < 2; i++) {
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
            sp ? copy_enter_start : NULL,
            sp ? copy_enter_wait : NULL,
        };
    }
}
