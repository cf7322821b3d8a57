/* Model parallel's context-parallel side (see mp.h): the layout of a
 * rank's positions and ring attention over the cp group. */
#include <math.h>

#include "base/status.h"
#include "base/time.h"
#include "model/kernels.h"
#include "model/layers.h"
#include "parallel/mp_impl.h"

/* Messages on the cp communicator: each attention call completes its own
 * before it returns, and every rank of the ring makes the same calls in
 * the same order (same stage, same schedule), so three tags suffice. */
enum { TAG_KV_FORWARD = 1, TAG_KV_BACKWARD = 2, TAG_DKV = 3 };

int msr_mp_cp_position(int cp, int chunk, int r, int t)
{
    /* rank r's first chunk is chunk r, its second chunk 2 cp - 1 - r */
    return t < chunk ? r * chunk + t : (2 * cp - 1 - r) * chunk + (t - chunk);
}

void msr_mp_cp_select(const msr_mp_t *mp, const int *full, int *local)
{
    const dims_t *d = &mp->d;
    const int *pos = mp->cp_pos + (size_t)mp->cr * d->T;
    size_t Tg = (size_t)d->T * (size_t)d->cp;
    for (int b = 0; b < d->B; b++)
        for (int t = 0; t < d->T; t++)
            local[(size_t)b * d->T + t] = full[(size_t)b * Tg + (size_t)pos[t]];
}

/* The global index of cp rank j's local chunk k (0 or 1). */
static int chunk_of(int cp, int j, int k)
{
    return k == 0 ? j : 2 * cp - 1 - j;
}

/* The width KV of qkv's k (and of its v) columns: Cl, or a Llama's KVl =
 * NKVl heads (grouped-query attention); qkv is (N, Cl + 2 KV). */
static size_t kv_width(const msr_mp_t *mp)
{
    return mp->blk.llama ? (size_t)mp->blk.NKVl * (size_t)(mp->d.Cl / mp->d.NHl) : (size_t)mp->d.Cl;
}

/* The K and V columns of qkv packed as (N, 2KV): what travels; copies
 * within the device, synced before the ring sends or computes on them. */
static msr_status_t pack_kv(msr_mp_t *mp, const float *qkv, float *kv)
{
    size_t Cl = (size_t)mp->d.Cl, KV = kv_width(mp);
    msr_status_t st = MSR_OK;
    for (size_t n = 0; n < mp->d.N && st == MSR_OK; n++)
        st = msr_mp_copy(mp, kv + n * 2 * KV, qkv + n * (Cl + 2 * KV) + Cl, 2 * KV, MSR_DEVICE_D2D);
    return st == MSR_OK ? msr_mp_sync(mp) : st;
}

/* Grouped-query attention: S rows of kv (2KV wide) with each kv head
 * repeated for its NHl/NKVl query heads into x (S, 2Cl), what the ring
 * kernels take. */
static msr_status_t expand_kv(msr_mp_t *mp, const float *kv, float *x, int S)
{
    size_t Cl = (size_t)mp->d.Cl, KV = kv_width(mp), HS = Cl / (size_t)mp->d.NHl;
    size_t G = (size_t)(mp->d.NHl / mp->blk.NKVl);
    msr_status_t st = MSR_OK;
    for (size_t n = 0; n < (size_t)S && st == MSR_OK; n++)
        for (size_t h = 0; h < (size_t)mp->d.NHl && st == MSR_OK; h++)
            for (size_t part = 0; part < 2 && st == MSR_OK; part++)
                st = msr_mp_copy(mp, x + n * 2 * Cl + part * Cl + h * HS,
                                 kv + n * 2 * KV + part * KV + h / G * HS, HS, MSR_DEVICE_D2D);
    return st == MSR_OK ? msr_mp_sync(mp) : st; /* the ring kernels read x next */
}

/* Its backward: dkv (S, 2KV) += the sum of each group's columns of dx
 * (the table's ring_fold_kv). */
static void fold_dkv(const msr_mp_t *mp, float *dkv, const float *dx, int S)
{
    msr_kernels_or_cpu(mp->model->kernels)
        ->ring_fold_kv(dkv, dx, S, mp->d.Cl, mp->d.NHl, mp->blk.NKVl);
}

/* Starts one transfer of a ring step: out (N, 2Cl) to the next rank, in
 * from the previous one; req[0] the receive, req[1] the send. */
static msr_status_t ring_post(msr_mp_t *mp, const float *out, float *in, int tag,
                              msr_comm_req_t **req)
{
    size_t count = mp->d.N * 2 * kv_width(mp);
    int next = (mp->cr + 1) % mp->cp, prev = (mp->cr - 1 + mp->cp) % mp->cp;
    msr_comm_t *c = mp->mesh->cp_comm;
    msr_status_t st = msr_comm_irecv(c, in, count, MSR_DTYPE_F32, prev, tag, &req[0]);
    if (st == MSR_OK)
        st = msr_comm_isend(c, out, count, MSR_DTYPE_F32, next, tag, &req[1]);
    return st != MSR_OK ? msr_mp_failed("ring attention transfer", st) : MSR_OK;
}

static msr_status_t ring_wait(msr_mp_t *mp, msr_comm_req_t **req, size_t n)
{
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_comm_wait_all(req, n);
    msr_mp_span_add(mp, 1, a, msr_now_ns(), "ring wait");
    return st != MSR_OK ? msr_mp_failed("ring attention transfer", st) : MSR_OK;
}

/* Drives the transfers in flight (UCX moves a large message only when the
 * thread calls in), between the kernels of a step; a finished request is
 * freed and its slot cleared, the first failure (its error text prefixed)
 * kept in *st_p. */
static void ring_poll(msr_comm_req_t **req, int n, msr_status_t *st_p)
{
    for (int i = 0; i < n; i++) {
        if (req[i] == NULL)
            continue;
        msr_status_t st = msr_comm_test(&req[i]);
        if (st != MSR_OK && st != MSR_IN_PROGRESS && *st_p == MSR_OK)
            *st_p = msr_mp_failed("ring attention transfer", st);
    }
}

/* One chunk pair of a ring step: S rows of this rank's queries against S
 * rows of block j's keys and values. */
typedef struct chunk_pair {
    size_t qr, kr;          /* the first row of the query chunk, of the key chunk */
    const int *qpos, *kpos; /* their global positions, S each */
} chunk_pair_t;

typedef msr_status_t (*pair_fn)(msr_mp_t *mp, const chunk_pair_t *p, void *arg);

/* Calls fn(mp, pair, arg) for block j's chunk pairs, batch row by row, and
 * drives the transfers in flight between them (ring_poll); a failure of
 * fn (the device's) goes into *st_p too and ends the calls. A pair whose
 * keys all come after its queries is skipped, which is what balances the
 * causal work across the ring: forward and backward visit the same pairs. */
static void for_each_pair(msr_mp_t *mp, int j, pair_fn fn, void *arg, msr_comm_req_t **req,
                          int nreq, msr_status_t *st_p)
{
    const dims_t *d = &mp->d;
    int S = d->T / 2;
    const int *qpos = mp->cp_pos + (size_t)mp->cr * d->T, *kpos = mp->cp_pos + (size_t)j * d->T;
    for (int b = 0; b < d->B; b++) {
        for (int qc = 0; qc < 2; qc++) {
            for (int kc = 0; kc < 2; kc++) {
                if (chunk_of(mp->cp, j, kc) > chunk_of(mp->cp, mp->cr, qc))
                    continue;
                chunk_pair_t p = {(size_t)b * d->T + (size_t)qc * S,
                                  (size_t)b * d->T + (size_t)kc * S, qpos + qc * S, kpos + kc * S};
                msr_status_t fst = fn(mp, &p, arg);
                if (fst != MSR_OK) {
                    if (*st_p == MSR_OK)
                        *st_p = fst;
                    return;
                }
                ring_poll(req, nreq, st_p);
            }
        }
    }
}

/* Forward's buffers: out (N, Cl) and the running max and sum (mp->w) take
 * in this rank's queries (qkv, N x 3Cl) against a block's keys and values
 * kv (N, 2Cl). */
typedef struct fold_fwd {
    float *out;
    const float *qkv, *kv;
} fold_fwd_t;

static msr_status_t pair_forward(msr_mp_t *mp, const chunk_pair_t *p, void *arg)
{
    const fold_fwd_t *f = arg;
    const dims_t *d = &mp->d;
    int S = d->T / 2, KV = (int)kv_width(mp), W = d->Cl + 2 * KV, C2 = 2 * d->Cl, NH = d->NHl;
    const float *kv = f->kv + p->kr * 2 * KV;
    if (KV != d->Cl) { /* grouped-query: the kv heads repeated */
        msr_status_t st = expand_kv(mp, kv, mp->cp_kvx, S);
        if (st != MSR_OK)
            return st;
        kv = mp->cp_kvx;
    }
    msr_kernels_or_cpu(mp->model->kernels)
        ->ring_forward(mp->model->prod, f->out + p->qr * d->Cl, mp->w.rmx + p->qr * NH,
                       mp->w.rsum + p->qr * NH, f->qkv + p->qr * W, W, p->qpos, S, kv, kv + d->Cl,
                       C2, p->kpos, S, d->Cl, NH, mp->w.datt);
    return MSR_OK;
}

msr_status_t msr_mp_cp_attend(void *arg, float *out, float *lse, const float *qkv)
{
    msr_mp_t *mp = arg;
    const dims_t *d = &mp->d;
    work_t *w = &mp->w;
    size_t rows = d->N * (size_t)d->NHl;
    msr_status_t zst = msr_mp_zero(mp, out, d->N * (size_t)d->Cl);
    if (zst != MSR_OK || (zst = pack_kv(mp, qkv, w->kv[0])) != MSR_OK) /* pack_kv syncs */
        return zst;
    for (size_t i = 0; i < rows; i++) {
        w->rmx[i] = -INFINITY;
        w->rsum[i] = 0.0f;
    }
    for (int s = 0; s < mp->cp; s++) {
        /* the next block travels while this one is computed */
        msr_comm_req_t *req[2] = {NULL, NULL};
        uint64_t a = msr_now_ns();
        msr_status_t st = MSR_OK;
        if (s < mp->cp - 1)
            st = ring_post(mp, w->kv[s % 2], w->kv[(s + 1) % 2], TAG_KV_FORWARD, req);
        fold_fwd_t f = {out, qkv, w->kv[s % 2]};
        if (st == MSR_OK)
            for_each_pair(mp, (mp->cr - s + mp->cp) % mp->cp, pair_forward, &f, req, 2, &st);
        msr_mp_span_add(mp, 0, a, msr_now_ns(), "ring fwd %d", s);
        msr_status_t wst = ring_wait(mp, req, 2);
        if (st != MSR_OK || wst != MSR_OK)
            return st != MSR_OK ? st : wst;
    }
    msr_kernels_or_cpu(mp->model->kernels)
        ->ring_finish(out, lse, w->rmx, w->rsum, (int)d->N, d->Cl, d->NHl);
    return MSR_OK;
}

/* Backward's buffers: block j's share of the gradients, dqkv's q columns
 * += for this rank's queries, dkv (N, 2Cl) += for block j's keys and
 * values kv. */
typedef struct fold_bwd {
    float *dqkv, *dkv;
    const float *dout, *qkv, *kv, *lse;
} fold_bwd_t;

static msr_status_t pair_backward(msr_mp_t *mp, const chunk_pair_t *p, void *arg)
{
    const fold_bwd_t *f = arg;
    const dims_t *d = &mp->d;
    int S = d->T / 2, KV = (int)kv_width(mp), W = d->Cl + 2 * KV, C2 = 2 * d->Cl, NH = d->NHl;
    const float *kv = f->kv + p->kr * 2 * KV;
    float *dkv = f->dkv + p->kr * 2 * KV;
    if (KV != d->Cl) { /* grouped-query: the kv heads repeated, their gradients summed */
        msr_status_t st = msr_mp_zero(mp, mp->cp_dkvx, (size_t)S * (size_t)C2);
        if (st != MSR_OK || (st = expand_kv(mp, kv, mp->cp_kvx, S)) != MSR_OK) /* it syncs */
            return st;
        kv = mp->cp_kvx;
        dkv = mp->cp_dkvx;
    }
    msr_kernels_or_cpu(mp->model->kernels)
        ->ring_backward(mp->model->prod, f->dqkv + p->qr * W, W, dkv, dkv + d->Cl, C2,
                        f->dout + p->qr * d->Cl, f->qkv + p->qr * W, kv, kv + d->Cl,
                        f->lse + p->qr * NH, mp->w.delta + p->qr * NH, p->qpos, S, p->kpos, S,
                        d->Cl, NH, mp->w.datt);
    if (KV != d->Cl)
        fold_dkv(mp, f->dkv + p->kr * 2 * KV, mp->cp_dkvx, S);
    return MSR_OK;
}

/* Backward: at step s this rank holds block j = cr - s with the gradient
 * its previous holders summed, adds its own share and passes both on; the
 * K/V blocks stop after cp - 1 hops, the gradients take one more, home.
 * Each block's gradient is summed in ring order, the same every step. */
msr_status_t msr_mp_cp_attend_backward(void *arg, float *dqkv, const float *dout, const float *qkv,
                                       const float *out, const float *lse)
{
    msr_mp_t *mp = arg;
    const dims_t *d = &mp->d;
    work_t *w = &mp->w;
    size_t KV = kv_width(mp), n2 = d->N * 2 * KV;
    msr_kernels_or_cpu(mp->model->kernels)
        ->ring_delta(w->delta, dout, out, (int)d->N, d->Cl, d->NHl);
    msr_status_t zst = msr_mp_zero(mp, w->dkv[0], n2);
    if (zst != MSR_OK || (zst = pack_kv(mp, qkv, w->kv[0])) != MSR_OK) /* pack_kv syncs */
        return zst;
    for (int s = 0; s < mp->cp; s++) {
        int cur = s % 2, nxt = (s + 1) % 2;
        msr_comm_req_t *req[4] = {NULL, NULL, NULL, NULL};
        uint64_t a = msr_now_ns();
        msr_status_t st = MSR_OK;
        if (s < mp->cp - 1)
            st = ring_post(mp, w->kv[cur], w->kv[nxt], TAG_KV_BACKWARD, req);
        if (st == MSR_OK) {
            fold_bwd_t f = {dqkv, w->dkv[cur], dout, qkv, w->kv[cur], lse};
            for_each_pair(mp, (mp->cr - s + mp->cp) % mp->cp, pair_backward, &f, req, 2, &st);
            msr_mp_span_add(mp, 0, a, msr_now_ns(), "ring bwd %d", s);
            if (st == MSR_OK)
                st = ring_post(mp, w->dkv[cur], w->dkv[nxt], TAG_DKV, req + 2);
        }
        msr_status_t wst = ring_wait(mp, req, 4);
        if (st != MSR_OK || wst != MSR_OK)
            return st != MSR_OK ? st : wst;
    }
    /* after a full turn, this rank's own block's gradient */
    size_t Cl = (size_t)d->Cl;
    msr_kernels_or_cpu(mp->model->kernels)
        ->add_rows(dqkv + Cl, Cl + 2 * KV, w->dkv[mp->cp % 2], 2 * KV, d->N, 2 * KV);
    return MSR_OK;
}
