/* The collective algorithms of the UCX backend, each a step function that
 * posts tagged messages, returns MSR_IN_PROGRESS while they fly and resumes
 * where it stopped.
 *
 *   allreduce       direct (small, small groups), recursive doubling, ring
 *   reduce_scatter  direct, ring
 *   allgather       direct, ring
 *   broadcast       binomial tree, pipelined chain
 *   reduce          binomial tree, pipelined chain
 *   alltoall(v)     pairwise exchange, a window of steps in flight
 *   barrier         dissemination
 *
 * The state that lives from one step to the next is the algorithm's struct
 * in the request (ucx_impl.h). The pipelined ones (ring, chains, alltoall)
 * do all they can at each step from their counters; the others keep where
 * they resume in their struct's phase, jump there first and set it before
 * each wait:
 *
 *     switch (x->phase) { case X_START: break; case X_WAIT: goto wait; }
 *     ... post ...
 *     x->phase = X_WAIT;
 * wait:
 *     st = ops_wait(r);
 *     if (st != MSR_OK)
 *         return st;  (MSR_IN_PROGRESS, or the failure)
 *     ... use what arrived ...
 *
 * Every reduction combines operands in an order fixed by the ranks alone
 * (never by arrival), so results are bitwise reproducible. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/shm_defaults.h"
#include "base/util.h"
#include "comm/reduce.h"
#include "comm/ucx/ucx_impl.h"

/* ---- messages ---- */

static msr_status_t map_ucs(ucx_req_t *r, ucs_status_t s, const char *what, int peer)
{
    msr_status_t st;
    switch (s) {
    case UCS_OK:
        return MSR_OK;
    case UCS_ERR_MESSAGE_TRUNCATED:
        st = MSR_ERR_TRUNCATED;
        break;
    case UCS_ERR_CANCELED:
        st = MSR_ERR_CANCELED;
        break;
    case UCS_ERR_NO_MEMORY:
        st = MSR_ERR_NO_MEMORY;
        break;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NOT_IMPLEMENTED:
        st = MSR_ERR_BACKEND;
        break;
    default: /* transport errors: the peer went away */
        st = MSR_ERR_PEER_LOST;
        break;
    }
    snprintf(r->pub.error, sizeof r->pub.error, "%s: %s with rank %d: %s", r->algo, what, peer,
             ucs_status_string(s));
    return st;
}

static ucx_op_t *next_op(ucx_req_t *r)
{
    return &r->ops[r->nops++];
}

static msr_status_t peer_ep(ucx_req_t *r, int peer, ucp_ep_h *ep_p)
{
    ucx_peer_t *p = r->uc->peer[peer];
    if (p->dead) {
        snprintf(r->pub.error, sizeof r->pub.error, "%s: rank %d (job rank %d) is lost", r->algo,
                 peer, p->world_rank);
        return MSR_ERR_PEER_LOST;
    }
    *ep_p = ucx_engine_ep(r->uc->engine, p);
    if (*ep_p == NULL) {
        snprintf(r->pub.error, sizeof r->pub.error, "%s: cannot connect to rank %d", r->algo, peer);
        return MSR_ERR_BACKEND;
    }
    return MSR_OK;
}

static uint64_t coll_low(const ucx_req_t *r, unsigned phase)
{
    return ((uint64_t)r->seq << 6) | (phase & (UCX_TAG_PHASES - 1));
}

static msr_status_t post_send_tag(ucx_req_t *r, ucx_op_t *op, int peer, const void *buf, size_t len,
                                  uint64_t tag)
{
    ucp_ep_h ep;
    op->h = NULL;
    op->recv = 0;
    msr_status_t st = peer_ep(r, peer, &ep);
    if (st != MSR_OK)
        return st;
    ucp_request_param_t prm = {.op_attr_mask = 0};
    void *h = ucp_tag_send_nbx(ep, buf, len, tag, &prm);
    if (UCS_PTR_IS_ERR(h))
        return map_ucs(r, UCS_PTR_STATUS(h), "send", peer);
    op->h = h;
    return MSR_OK;
}

static msr_status_t post_recv_tag(ucx_req_t *r, ucx_op_t *op, int peer, void *buf, size_t len,
                                  uint64_t tag)
{
    op->h = NULL;
    op->recv = 1;
    op->len = len;
    if (r->uc->peer[peer]->dead) {
        snprintf(r->pub.error, sizeof r->pub.error, "%s: rank %d is lost", r->algo, peer);
        return MSR_ERR_PEER_LOST;
    }
    /* No UCP_OP_ATTR_FIELD_RECV_INFO: UCX 1.13 does not fill it in when a
     * receive completes at once, and the length must be checked. */
    ucp_request_param_t prm = {.op_attr_mask = 0};
    void *h = ucp_tag_recv_nbx(r->uc->engine->worker, buf, len, tag, UCX_TAG_MASK_FULL, &prm);
    if (UCS_PTR_IS_ERR(h))
        return map_ucs(r, UCS_PTR_STATUS(h), "receive", peer);
    op->h = h;
    return MSR_OK;
}

static msr_status_t post_send(ucx_req_t *r, ucx_op_t *op, int peer, const void *buf, size_t len,
                              unsigned phase)
{
    return post_send_tag(r, op, peer, buf, len,
                         ucx_tag(UCX_TAG_COLL, r->uc->id, r->me, coll_low(r, phase)));
}

static msr_status_t post_recv(ucx_req_t *r, ucx_op_t *op, int peer, void *buf, size_t len,
                              unsigned phase)
{
    return post_recv_tag(r, op, peer, buf, len,
                         ucx_tag(UCX_TAG_COLL, r->uc->id, peer, coll_low(r, phase)));
}

/* 1 once op is finished (r->err says how), 0 while it runs. */
static int op_test(ucx_req_t *r, ucx_op_t *op)
{
    if (op->h == NULL)
        return 1;
    ucs_status_t s;
    size_t got = op->len;
    if (op->recv) {
        ucp_tag_recv_info_t info;
        s = ucp_tag_recv_request_test(op->h, &info);
        got = info.length;
    } else {
        s = ucp_request_check_status(op->h);
    }
    if (s == UCS_INPROGRESS)
        return 0;
    ucp_request_free(op->h);
    op->h = NULL;
    if (s != UCS_OK && r->err == MSR_OK) {
        r->err = map_ucs(r, s, op->recv ? "receive" : "send", -1);
    } else if (op->recv && got != op->len && r->err == MSR_OK) {
        snprintf(r->pub.error, sizeof r->pub.error, "%s: received %zu bytes, %zu expected", r->algo,
                 got, op->len);
        r->err = MSR_ERR_TRUNCATED;
    }
    return 1;
}

/* 1 when every posted op is finished (or one failed). */
static int ops_done(ucx_req_t *r)
{
    int all = 1;
    for (int i = 0; i < r->nops; i++)
        if (!op_test(r, &r->ops[i]))
            all = 0;
    if (r->err != MSR_OK)
        return 1;
    if (all)
        r->nops = 0;
    return all;
}

/* MSR_OK once every operation posted so far is finished, MSR_IN_PROGRESS
 * while one runs, or the failure of one. */
static msr_status_t ops_wait(ucx_req_t *r)
{
    if (!ops_done(r))
        return MSR_IN_PROGRESS;
    return r->err;
}

void ucx_req_drop_ops(ucx_req_t *r)
{
    if (r->ops != r->inline_ops)
        msr_free(r->ops);
    r->ops = r->inline_ops;
    r->cap_ops = UCX_INLINE_OPS;
    r->nops = 0;
}

static msr_status_t ops_reserve(ucx_req_t *r, int n)
{
    if (n <= r->cap_ops)
        return MSR_OK;
    ucx_op_t *ops = msr_calloc((size_t)n, sizeof *ops);
    if (ops == NULL)
        return MSR_ERR_NO_MEMORY;
    if (r->ops != r->inline_ops)
        msr_free(r->ops);
    r->ops = ops;
    r->cap_ops = n;
    return MSR_OK;
}

msr_status_t ucx_op_send(ucx_req_t *r, ucx_op_t *op, int peer, const void *buf, size_t len,
                         unsigned phase)
{
    return post_send(r, op, peer, buf, len, phase);
}

msr_status_t ucx_op_recv(ucx_req_t *r, ucx_op_t *op, int peer, void *buf, size_t len,
                         unsigned phase)
{
    return post_recv(r, op, peer, buf, len, phase);
}

int ucx_op_test(ucx_req_t *r, ucx_op_t *op)
{
    return op_test(r, op);
}

msr_status_t ucx_ops_reserve(ucx_req_t *r, int n)
{
    return ops_reserve(r, n);
}

/* ---- scratch ---- */

static msr_status_t scratch_get(ucx_req_t *r, size_t len)
{
    ucx_comm_t *uc = r->uc;
    if (len <= sizeof r->inline_scratch) {
        r->scratch = r->inline_scratch;
        r->scratch_from = 0;
    } else if (!uc->cache_busy && uc->cache_len >= len) {
        r->scratch = uc->cache;
        r->scratch_from = 1;
        uc->cache_busy = 1;
    } else {
        r->scratch = msr_malloc(len);
        if (r->scratch == NULL)
            return MSR_ERR_NO_MEMORY;
        r->scratch_from = 2;
    }
    r->scratch_len = len;
    return MSR_OK;
}

msr_status_t ucx_scratch_get(ucx_req_t *r, size_t len)
{
    return scratch_get(r, len);
}

void ucx_req_release_scratch(ucx_req_t *r)
{
    ucx_comm_t *uc = r->uc;
    if (r->scratch_from == 1) {
        uc->cache_busy = 0;
    } else if (r->scratch_from == 2) {
        /* Keep the largest block for the next operation. */
        if (!uc->cache_busy && r->scratch_len > uc->cache_len &&
            r->scratch_len <= ((size_t)256 << 20)) {
            msr_free(uc->cache);
            uc->cache = r->scratch;
            uc->cache_len = r->scratch_len;
        } else {
            msr_free(r->scratch);
        }
    }
    r->scratch = NULL;
    r->scratch_from = 0;
    r->scratch_len = 0;
}

/* ---- geometry ---- */

/* a mod n for a in (-2n, 2n) without a division (the common case), else
 * with one. */
static inline int mod(int64_t a, int n)
{
    if (a >= 0 && a < n)
        return (int)a;
    if (a < 0 && a >= -(int64_t)n)
        return (int)(a + n);
    if (a >= n && a < 2 * (int64_t)n)
        return (int)(a - n);
    int64_t m = a % n;
    return (int)(m < 0 ? m + n : m);
}

static inline char *at(const void *p, uint64_t elems, size_t es)
{
    return (char *)p + elems * es;
}

static uint64_t nsegments(uint64_t elems, size_t es, size_t segment)
{
    uint64_t bytes = elems * es;
    uint64_t n = (bytes + segment - 1) / (segment ? segment : 1);
    if (n == 0)
        n = 1;
    if (n > elems && elems > 0)
        n = elems;
    return n;
}

/* ---- barrier: dissemination, ceil(log2 n) rounds ---- */

static msr_status_t step_barrier(ucx_req_t *r)
{
    ucx_barrier_t *b = &r->barrier;
    msr_status_t st;
    switch (b->phase) {
    case UCX_BARRIER_START:
        break;
    case UCX_BARRIER_ROUND:
        goto round;
    }
    for (b->round = 0, b->dist = 1; b->dist < r->n; b->dist <<= 1, b->round++) {
        st = post_send(r, next_op(r), mod(r->me + b->dist, r->n), NULL, 0, b->round);
        if (st != MSR_OK)
            return st;
        st = post_recv(r, next_op(r), mod(r->me - b->dist, r->n), NULL, 0, b->round);
        if (st != MSR_OK)
            return st;
        b->phase = UCX_BARRIER_ROUND;
    round:
        st = ops_wait(r);
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

/* ---- point to point ---- */

static msr_status_t step_send(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (r->direct.phase == UCX_DIRECT_POST) {
        msr_status_t st = post_send_tag(r, next_op(r), a->root, a->sendbuf, r->bytes,
                                        ucx_tag(UCX_TAG_P2P, r->uc->id, r->me, (uint64_t)a->tag));
        if (st != MSR_OK)
            return st;
        r->direct.phase = UCX_DIRECT_WAIT;
    }
    return ops_wait(r);
}

static msr_status_t step_recv(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (r->direct.phase == UCX_DIRECT_POST) {
        msr_status_t st = post_recv_tag(r, next_op(r), a->root, a->recvbuf, r->bytes,
                                        ucx_tag(UCX_TAG_P2P, r->uc->id, a->root, (uint64_t)a->tag));
        if (st != MSR_OK)
            return st;
        r->direct.phase = UCX_DIRECT_WAIT;
    }
    return ops_wait(r);
}

/* ---- direct: everyone exchanges with everyone in one round ---- */

/* Folds n blocks in rank order into dst: dst = x0 op x1 op ... op x(n-1),
 * where block me is own and the others are in slots (stride bytes). */
static void fold_in_order(ucx_req_t *r, void *dst, const void *own, const char *slots,
                          size_t stride, uint64_t count)
{
    const msr_coll_args_t *a = &r->pub.args;
    const void *x0 = r->me == 0 ? own : slots;
    const void *x1 = r->me == 1 ? own : slots + stride;
    msr_reduce(a->op, a->dtype, dst, x0, x1, count);
    for (int j = 2; j < r->n; j++)
        msr_reduce(a->op, a->dtype, dst, dst, j == r->me ? own : slots + (size_t)j * stride, count);
    msr_reduce_finish(a->op, a->dtype, dst, count, r->n);
}

static msr_status_t step_allreduce_direct(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    msr_status_t st;
    if (r->direct.phase == UCX_DIRECT_POST) {
        /* Sends first: they are what the others wait for. Slot j gets rank
         * j's vector; slot me a copy of ours when in place. */
        for (int d = 1; d < r->n; d++) {
            st = post_send(r, next_op(r), mod(r->me + d, r->n), a->sendbuf, r->bytes, 0);
            if (st != MSR_OK)
                return st;
        }
        for (int d = 1; d < r->n; d++) {
            int j = mod(r->me - d, r->n);
            st = post_recv(r, next_op(r), j, r->scratch + (size_t)j * r->bytes, r->bytes, 0);
            if (st != MSR_OK)
                return st;
        }
        if (a->in_place)
            memcpy(r->scratch + (size_t)r->me * r->bytes, a->recvbuf, r->bytes);
        r->direct.phase = UCX_DIRECT_WAIT;
    }
    st = ops_wait(r);
    if (st != MSR_OK)
        return st;
    fold_in_order(r, a->recvbuf,
                  a->in_place ? (const void *)(r->scratch + (size_t)r->me * r->bytes) : a->sendbuf,
                  r->scratch, r->bytes, a->count);
    return MSR_OK;
}

static msr_status_t step_reduce_scatter_direct(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    msr_status_t st;
    if (r->direct.phase == UCX_DIRECT_POST) {
        for (int d = 1; d < r->n; d++) {
            int j = mod(r->me + d, r->n);
            st = post_send(r, next_op(r), j, at(a->sendbuf, (uint64_t)j * a->count, r->es),
                           r->bytes, 0);
            if (st != MSR_OK)
                return st;
        }
        for (int d = 1; d < r->n; d++) {
            int j = mod(r->me - d, r->n);
            st = post_recv(r, next_op(r), j, r->scratch + (size_t)j * r->bytes, r->bytes, 0);
            if (st != MSR_OK)
                return st;
        }
        if (a->in_place && r->bytes > 0) /* count 0 may come with NULL buffers */
            memcpy(r->scratch + (size_t)r->me * r->bytes, a->recvbuf, r->bytes);
        r->direct.phase = UCX_DIRECT_WAIT;
    }
    st = ops_wait(r);
    if (st != MSR_OK)
        return st;
    fold_in_order(r, a->recvbuf,
                  a->in_place ? (const void *)(r->scratch + (size_t)r->me * r->bytes)
                              : at(a->sendbuf, (uint64_t)r->me * a->count, r->es),
                  r->scratch, r->bytes, a->count);
    return MSR_OK;
}

static msr_status_t step_allgather_direct(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    msr_status_t st;
    if (r->direct.phase == UCX_DIRECT_POST) {
        for (int d = 1; d < r->n; d++) {
            st = post_send(r, next_op(r), mod(r->me + d, r->n), a->sendbuf, r->bytes, 0);
            if (st != MSR_OK)
                return st;
        }
        for (int d = 1; d < r->n; d++) {
            int j = mod(r->me - d, r->n);
            st = post_recv(r, next_op(r), j, at(a->recvbuf, (uint64_t)j * a->count, r->es),
                           r->bytes, 0);
            if (st != MSR_OK)
                return st;
        }
        if (!a->in_place && r->bytes)
            memcpy(at(a->recvbuf, (uint64_t)r->me * a->count, r->es), a->sendbuf, r->bytes);
        r->direct.phase = UCX_DIRECT_WAIT;
    }
    return ops_wait(r);
}

/* ---- allreduce: recursive doubling ----
 * The first 2*rem ranks fold pairwise into rem ranks, the remaining power of
 * two exchange whole vectors log2 times (each pair computes lower op upper,
 * so both get the same bits), and the folded ranks get the result back. */

static int rd_real(const ucx_rd_t *rd, int newrank)
{
    return newrank < rd->rem ? newrank * 2 + 1 : newrank + rd->rem;
}

static msr_status_t step_allreduce_rd(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_rd_t *rd = &r->rd;
    void *acc = a->recvbuf;
    const int folds = r->me < 2 * rd->rem; /* one of a pair folded in and out */
    int peer;
    msr_status_t st;
    switch (rd->phase) {
    case UCX_RD_START:
        break;
    case UCX_RD_FOLD_IN:
        goto fold_in;
    case UCX_RD_EXCHANGE:
        goto exchange;
    case UCX_RD_FOLD_OUT:
        goto fold_out;
    }
    if (!a->in_place && r->bytes)
        memcpy(acc, a->sendbuf, r->bytes);
    if (folds) {
        /* the even one of a pair hands its vector to the odd one */
        if (r->me % 2 == 0) {
            st = post_send(r, next_op(r), r->me + 1, acc, r->bytes, 0);
            rd->newrank = -1;
        } else {
            st = post_recv(r, next_op(r), r->me - 1, r->scratch, r->bytes, 0);
            rd->newrank = r->me / 2;
        }
        if (st != MSR_OK)
            return st;
        rd->phase = UCX_RD_FOLD_IN;
    fold_in:
        st = ops_wait(r);
        if (st != MSR_OK)
            return st;
        if (rd->newrank >= 0)
            msr_reduce(a->op, a->dtype, acc, r->scratch, acc, a->count);
    } else {
        rd->newrank = r->me - rd->rem;
    }
    if (rd->newrank >= 0) {
        for (rd->mask = 1, rd->round = 1; rd->mask < rd->p2; rd->mask <<= 1, rd->round++) {
            peer = rd_real(rd, rd->newrank ^ rd->mask);
            st = post_send(r, next_op(r), peer, acc, r->bytes, rd->round);
            if (st != MSR_OK)
                return st;
            st = post_recv(r, next_op(r), peer, r->scratch, r->bytes, rd->round);
            if (st != MSR_OK)
                return st;
            rd->phase = UCX_RD_EXCHANGE;
        exchange:
            st = ops_wait(r);
            if (st != MSR_OK)
                return st;
            if ((rd->newrank ^ rd->mask) < rd->newrank)
                msr_reduce(a->op, a->dtype, acc, r->scratch, acc, a->count);
            else
                msr_reduce(a->op, a->dtype, acc, acc, r->scratch, a->count);
        }
        msr_reduce_finish(a->op, a->dtype, acc, a->count, r->n);
    }
    if (folds) {
        if (r->me % 2 == 1)
            st = post_send(r, next_op(r), r->me - 1, acc, r->bytes, UCX_TAG_PHASES - 1);
        else
            st = post_recv(r, next_op(r), r->me + 1, acc, r->bytes, UCX_TAG_PHASES - 1);
        if (st != MSR_OK)
            return st;
        rd->phase = UCX_RD_FOLD_OUT;
    fold_out:
        st = ops_wait(r);
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

/* ---- pipelines: the ring and the chains ---- */

/* Sizes p's windows from the tuning and readies its ops (the slots are
 * the caller's: slot_bytes). */
static msr_status_t pipe_setup(ucx_req_t *r, ucx_pipe_t *p)
{
    const ucx_tuning_t *t = &r->uc->tune;
    p->window = (uint64_t)t->window;
    p->send_window = (uint64_t)t->window * 2;
    msr_status_t st = ops_reserve(r, (int)(p->window + p->send_window));
    if (st != MSR_OK)
        return st;
    r->nops = (int)(p->window + p->send_window);
    for (int i = 0; i < r->nops; i++)
        r->ops[i].h = NULL;
    return MSR_OK;
}

/* ---- the pipelined ring: reduce-scatter, then (allreduce) allgather ----
 * The vector is cut into n chunks and each chunk into nseg segments. In
 * reduce-scatter step s (0 .. n-2) a rank sends chunk me-s-1 to its right and
 * receives chunk me-s-2 from its left, adds its own input and forwards the
 * sum at the next step; after n-1 steps it holds chunk me complete. The
 * allgather then passes complete chunks around the ring. Receives and sends
 * are two ordered streams of units (one unit = one segment of one step), so
 * step s+1 of segment j starts as soon as step s of segment j is done: a
 * window of receives in flight (reduce-scatter ones into scratch slots,
 * allgather ones straight into place) and a window of sends (ucx_pipe_t).
 * full: where partial sums live (the output for allreduce, the input in
 * place, scratch after the slots otherwise). */

typedef struct ring_unit {
    int ag;       /* an allgather unit (else reduce-scatter) */
    int64_t step; /* of its half: 0 .. n - 2 */
    int chunk;
    uint64_t off, len; /* elements, in the whole vector */
} ring_unit_t;

static void ring_unit(const ucx_req_t *r, uint64_t count, uint64_t i, ring_unit_t *u)
{
    uint64_t nseg = r->ring.pipe.nseg, per = (uint64_t)(r->n - 1) * nseg;
    u->ag = i >= per;
    if (u->ag)
        i -= per;
    u->step = (int64_t)(i / nseg);
    uint64_t jseg = i % nseg;
    u->chunk = mod(r->me - u->step - (u->ag ? 1 : 2), r->n);
    uint64_t coff, clen, soff;
    ucx_part(count, (uint64_t)r->n, (uint64_t)u->chunk, &coff, &clen);
    ucx_part(clen, nseg, jseg, &soff, &u->len);
    u->off = coff + soff;
}

static char *ring_full(const ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (a->coll == MSR_COLL_ALLREDUCE)
        return a->recvbuf;
    if (a->in_place)
        return (char *)a->sendbuf;
    return r->scratch + r->ring.pipe.window * r->ring.pipe.slot_bytes;
}

/* Where unit i's result lives (its reduced partial, or the received
 * allgather segment). */
static char *ring_dst(const ucx_req_t *r, const ring_unit_t *u)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (a->coll == MSR_COLL_REDUCE_SCATTER && !a->in_place && u->step == r->n - 2 && !u->ag) {
        uint64_t coff, clen;
        ucx_part(a->count * (uint64_t)r->n, (uint64_t)r->n, (uint64_t)r->me, &coff, &clen);
        return at(a->recvbuf, u->off - coff, r->es);
    }
    return at(ring_full(r), u->off, r->es);
}

static uint64_t ring_count(const ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    return a->coll == MSR_COLL_REDUCE_SCATTER ? a->count * (uint64_t)r->n : a->count;
}

/* ---- segment pipelines: one loop for the ring and the chains ---- */

/* What a segment pipeline moves: its receives come from one peer and its
 * sends go to another, each a unit (segment) of a stream; send i is ready
 * once i < first_sends + the receives processed (first_sends: the units
 * whose data is this rank's own). The kind names each unit's buffer and
 * processes one that arrived (a reduction, or nothing). */
typedef struct pipe_kind {
    void *(*recv_buf)(ucx_req_t *r, uint64_t i, uint64_t *len);
    const void *(*send_buf)(ucx_req_t *r, uint64_t i, uint64_t *len);
    void (*arrived)(ucx_req_t *r, uint64_t i); /* NULL: nothing to do */
} pipe_kind_t;

typedef struct pipe_flow {
    int from, to;                       /* the peers */
    uint64_t recvs, sends, first_sends; /* units */
} pipe_flow_t;

/* Advances a pipeline as far as it goes without waiting: receive i in
 * ops[i % window], send i in ops[window + i % send_window]. */
static msr_status_t pipe_step(ucx_req_t *r, ucx_pipe_t *p, const pipe_kind_t *k,
                              const pipe_flow_t *f)
{
    const uint64_t w = p->window, sw = p->send_window;
    uint64_t len;
    msr_status_t st;
    int busy = 1;
    while (busy) {
        busy = 0;
        /* sends whose data is ready */
        while (p->sends_posted < f->sends && p->sends_posted < f->first_sends + p->recvs_done &&
               p->sends_posted - p->sends_done < sw) {
            const void *src = k->send_buf(r, p->sends_posted, &len);
            st = post_send(r, &r->ops[w + p->sends_posted % sw], f->to, src, len * r->es, 0);
            if (st != MSR_OK)
                return st;
            p->sends_posted++;
            busy = 1;
        }
        while (p->sends_done < p->sends_posted && op_test(r, &r->ops[w + p->sends_done % sw])) {
            if (r->err != MSR_OK)
                return r->err;
            p->sends_done++;
            busy = 1;
        }
        /* receives, in stream order (after the sends: those are what the
         * neighbour waits for) */
        while (p->recvs_posted < f->recvs && p->recvs_posted - p->recvs_done < w) {
            void *dst = k->recv_buf(r, p->recvs_posted, &len);
            st = post_recv(r, &r->ops[p->recvs_posted % w], f->from, dst, len * r->es, 0);
            if (st != MSR_OK)
                return st;
            p->recvs_posted++;
        }
        /* the oldest receive, then what it brings */
        if (p->recvs_done < p->recvs_posted && op_test(r, &r->ops[p->recvs_done % w])) {
            if (r->err != MSR_OK)
                return r->err;
            if (k->arrived != NULL)
                k->arrived(r, p->recvs_done);
            p->recvs_done++;
            busy = 1;
        }
    }
    if (p->recvs_done == f->recvs && p->sends_done == f->sends)
        return MSR_OK;
    return MSR_IN_PROGRESS;
}

/* The ring's receive slot i (its window's), in scratch. */
static char *pipe_slot(const ucx_req_t *r, const ucx_pipe_t *p, uint64_t i)
{
    return r->scratch + (i % p->window) * p->slot_bytes;
}

/* The ring: unit i arrives in its slot (reduce-scatter) or in place
 * (allgather); the first nseg sends are this rank's input. */
static void *ring_recv_buf(ucx_req_t *r, uint64_t i, uint64_t *len)
{
    ring_unit_t u;
    ring_unit(r, ring_count(r), i, &u);
    *len = u.len;
    return u.ag ? ring_dst(r, &u) : pipe_slot(r, &r->ring.pipe, i);
}

static const void *ring_send_buf(ucx_req_t *r, uint64_t i, uint64_t *len)
{
    const uint64_t count = ring_count(r), nseg = r->ring.pipe.nseg;
    if (i < nseg) {
        uint64_t coff, clen, soff;
        ucx_part(count, (uint64_t)r->n, (uint64_t)mod(r->me - 1, r->n), &coff, &clen);
        ucx_part(clen, nseg, i, &soff, len);
        return at(r->pub.args.sendbuf, coff + soff, r->es);
    }
    ring_unit_t u;
    ring_unit(r, count, i - nseg, &u);
    *len = u.len;
    return ring_dst(r, &u);
}

static void ring_arrived(ucx_req_t *r, uint64_t i)
{
    const msr_coll_args_t *a = &r->pub.args;
    ring_unit_t u;
    ring_unit(r, ring_count(r), i, &u);
    if (u.ag)
        return;
    char *dst = ring_dst(r, &u);
    msr_reduce(a->op, a->dtype, dst, pipe_slot(r, &r->ring.pipe, i), at(a->sendbuf, u.off, r->es),
               u.len);
    if (u.step == r->n - 2)
        msr_reduce_finish(a->op, a->dtype, dst, u.len, r->n);
}

static msr_status_t step_ring(ucx_req_t *r)
{
    static const pipe_kind_t kind = {ring_recv_buf, ring_send_buf, ring_arrived};
    ucx_ring_t *g = &r->ring;
    pipe_flow_t f = {mod(r->me - 1, r->n), mod(r->me + 1, r->n), g->units, g->sends, g->pipe.nseg};
    return pipe_step(r, &g->pipe, &kind, &f);
}

static msr_status_t ring_setup(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_ring_t *g = &r->ring;
    ucx_pipe_t *p = &g->pipe;
    uint64_t count = ring_count(r);
    uint64_t maxchunk = (count + (uint64_t)r->n - 1) / (uint64_t)r->n;
    uint64_t nseg = nsegments(maxchunk, r->es, r->uc->tune.segment);
    uint64_t seg_elems = (maxchunk + nseg - 1) / nseg;
    uint64_t per = (uint64_t)(r->n - 1) * nseg;
    p->nseg = nseg;
    p->slot_bytes = seg_elems * r->es;
    g->units = a->coll == MSR_COLL_ALLREDUCE ? 2 * per : per;
    /* Sends: the nseg segments of our own input, then one per processed
     * unit except those of the very last step, which send nothing: as many
     * as there are units. */
    g->sends = g->units;
    msr_status_t st = pipe_setup(r, p);
    if (st != MSR_OK)
        return st;
    size_t scratch = (size_t)(p->window * p->slot_bytes);
    if (a->coll == MSR_COLL_REDUCE_SCATTER && !a->in_place)
        scratch += (size_t)(count * r->es); /* partial sums */
    return scratch_get(r, scratch);
}

/* ---- allgather: ring ---- */

static msr_status_t step_allgather_ring(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_ag_ring_t *g = &r->ag_ring;
    const int left = mod(r->me - 1, r->n), right = mod(r->me + 1, r->n);
    msr_status_t st;
    switch (g->phase) {
    case UCX_AG_RING_START:
        break;
    case UCX_AG_RING_SEND:
        goto send;
    case UCX_AG_RING_WAIT:
        goto wait;
    }
    if (!a->in_place && r->bytes)
        memcpy(at(a->recvbuf, (uint64_t)r->me * a->count, r->es), a->sendbuf, r->bytes);
    /* receives: ops[0 .. n-2], step s gets block me-s-1 */
    for (int s = 0; s < r->n - 1; s++) {
        st = post_recv(r, next_op(r), left,
                       at(a->recvbuf, (uint64_t)mod(r->me - s - 1, r->n) * a->count, r->es),
                       r->bytes, 0);
        if (st != MSR_OK)
            return st;
    }
    /* step s sends block me-s: ours, then the one step s-1 received */
    for (g->step = 0; g->step < r->n - 1; g->step++) {
        if (g->step > 0) {
            g->phase = UCX_AG_RING_SEND;
        send:
            if (!op_test(r, &r->ops[g->step - 1]))
                return MSR_IN_PROGRESS;
            if (r->err != MSR_OK)
                return r->err;
        }
        st = post_send(r, next_op(r), right,
                       at(a->recvbuf, (uint64_t)mod(r->me - g->step, r->n) * a->count, r->es),
                       r->bytes, 0);
        if (st != MSR_OK)
            return st;
    }
    g->phase = UCX_AG_RING_WAIT;
wait:
    return ops_wait(r);
}

/* ---- broadcast ---- */

static int vreal(const ucx_req_t *r, int vr)
{
    return mod(vr + r->pub.args.root, r->n);
}

static msr_status_t step_bcast_binomial(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_tree_t *t = &r->tree;
    msr_status_t st;
    switch (t->phase) {
    case UCX_TREE_FROM_PARENT:
        goto from_parent;
    case UCX_TREE_TO_CHILDREN:
        goto to_children;
    default:
        break;
    }
    /* the parent: vr with its lowest set bit cleared */
    for (t->mask = 1; t->mask < r->n; t->mask <<= 1)
        if (t->vr & t->mask)
            break;
    if (t->vr != 0) {
        st = post_recv(r, next_op(r), vreal(r, t->vr - t->mask), a->recvbuf, r->bytes, 0);
        if (st != MSR_OK)
            return st;
        t->phase = UCX_TREE_FROM_PARENT;
    from_parent:
        st = ops_wait(r);
        if (st != MSR_OK)
            return st;
    }
    /* the children: vr plus each lower bit */
    for (t->mask >>= 1; t->mask > 0; t->mask >>= 1) {
        if (t->vr + t->mask < r->n) {
            st = post_send(r, next_op(r), vreal(r, t->vr + t->mask), a->recvbuf, r->bytes, 0);
            if (st != MSR_OK)
                return st;
        }
    }
    t->phase = UCX_TREE_TO_CHILDREN;
to_children:
    return ops_wait(r);
}

/* Chain vr 0 -> 1 -> ... -> n-1 in segments, received straight into place
 * and passed on as they arrive. */
static void *bcast_chain_buf(ucx_req_t *r, uint64_t i, uint64_t *len)
{
    uint64_t off;
    ucx_part(r->pub.args.count, r->chain.pipe.nseg, i, &off, len);
    return at(r->pub.args.recvbuf, off, r->es);
}

static const void *bcast_chain_send_buf(ucx_req_t *r, uint64_t i, uint64_t *len)
{
    return bcast_chain_buf(r, i, len);
}

static msr_status_t step_bcast_chain(ucx_req_t *r)
{
    static const pipe_kind_t kind = {bcast_chain_buf, bcast_chain_send_buf, NULL};
    ucx_chain_t *c = &r->chain;
    const uint64_t nseg = c->pipe.nseg;
    const int first = c->vr == 0, last = c->vr == r->n - 1;
    pipe_flow_t f = {vreal(r, c->vr - 1), vreal(r, c->vr + 1), first ? 0 : nseg, last ? 0 : nseg,
                     first ? nseg : 0};
    return pipe_step(r, &c->pipe, &kind, &f);
}

/* ---- reduce ---- */

static msr_status_t step_reduce_binomial(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_tree_t *t = &r->tree;
    /* acc: the root's output, else scratch; tmp: after it */
    char *acc = t->vr == 0 ? (char *)a->recvbuf : r->scratch;
    char *tmp = r->scratch + (t->vr == 0 ? 0 : r->bytes);
    msr_status_t st;
    switch (t->phase) {
    case UCX_TREE_FROM_CHILD:
        goto from_child;
    case UCX_TREE_TO_PARENT:
        goto to_parent;
    default:
        break;
    }
    if (!a->in_place && r->bytes)
        memcpy(acc, a->sendbuf, r->bytes);
    /* from the children (vr plus each bit below our lowest set one) in
     * order, then to the parent (vr with it cleared) */
    for (t->mask = 1; t->mask < r->n; t->mask <<= 1) {
        if (t->vr & t->mask) {
            st = post_send(r, next_op(r), vreal(r, t->vr - t->mask), acc, r->bytes, 0);
            if (st != MSR_OK)
                return st;
            t->phase = UCX_TREE_TO_PARENT;
        to_parent:
            return ops_wait(r);
        }
        if (t->vr + t->mask < r->n) {
            st = post_recv(r, next_op(r), vreal(r, t->vr + t->mask), tmp, r->bytes, 0);
            if (st != MSR_OK)
                return st;
            t->phase = UCX_TREE_FROM_CHILD;
        from_child:
            st = ops_wait(r);
            if (st != MSR_OK)
                return st;
            msr_reduce(a->op, a->dtype, acc, acc, tmp, a->count);
        }
    }
    msr_reduce_finish(a->op, a->dtype, acc, a->count, r->n); /* the root */
    return MSR_OK;
}

/* Chain vr n-1 -> ... -> 0 in segments: each adds its own input to what
 * comes from above (own first) and passes it down; the root keeps it.
 * Scratch: the receive slots, then the partial sums (but the root's). */
static char *reduce_chain_partial(const ucx_req_t *r)
{
    const ucx_pipe_t *p = &r->chain.pipe;
    return r->chain.vr == 0 ? (char *)r->pub.args.recvbuf : r->scratch + p->window * p->slot_bytes;
}

static void *reduce_chain_recv_buf(ucx_req_t *r, uint64_t i, uint64_t *len)
{
    uint64_t off;
    ucx_part(r->pub.args.count, r->chain.pipe.nseg, i, &off, len);
    return pipe_slot(r, &r->chain.pipe, i);
}

static const void *reduce_chain_send_buf(ucx_req_t *r, uint64_t i, uint64_t *len)
{
    const msr_coll_args_t *a = &r->pub.args;
    uint64_t off;
    ucx_part(a->count, r->chain.pipe.nseg, i, &off, len);
    const int leaf = r->chain.vr == r->n - 1;
    return leaf ? at(a->sendbuf, off, r->es) : at(reduce_chain_partial(r), off, r->es);
}

static void reduce_chain_arrived(ucx_req_t *r, uint64_t i)
{
    const msr_coll_args_t *a = &r->pub.args;
    uint64_t off, len;
    ucx_part(a->count, r->chain.pipe.nseg, i, &off, &len);
    char *partial = at(reduce_chain_partial(r), off, r->es);
    msr_reduce(a->op, a->dtype, partial, at(a->sendbuf, off, r->es),
               pipe_slot(r, &r->chain.pipe, i), len);
    if (r->chain.vr == 0)
        msr_reduce_finish(a->op, a->dtype, partial, len, r->n);
}

static msr_status_t step_reduce_chain(ucx_req_t *r)
{
    static const pipe_kind_t kind = {reduce_chain_recv_buf, reduce_chain_send_buf,
                                     reduce_chain_arrived};
    ucx_chain_t *c = &r->chain;
    const uint64_t nseg = c->pipe.nseg;
    const int root = c->vr == 0, leaf = c->vr == r->n - 1;
    pipe_flow_t f = {vreal(r, c->vr + 1), vreal(r, c->vr - 1), leaf ? 0 : nseg, root ? 0 : nseg,
                     leaf ? nseg : 0};
    return pipe_step(r, &c->pipe, &kind, &f);
}

/* ---- alltoall(v): pairwise, a window of steps in flight ---- */

static void a2a_block(const ucx_req_t *r, int peer, int sending, const char **buf, size_t *len)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (a->coll == MSR_COLL_ALLTOALLV) {
        const uint64_t *v = a->v + 4 * (size_t)peer;
        if (sending) {
            *buf = at(a->sendbuf, v[1], r->es);
            *len = v[0] * r->es;
        } else {
            *buf = at(a->recvbuf, v[3], r->es);
            *len = v[2] * r->es;
        }
        return;
    }
    const void *src = a->in_place ? (const void *)r->scratch : a->sendbuf;
    *buf = at(sending ? src : a->recvbuf, (uint64_t)peer * a->count, r->es);
    *len = r->bytes;
}

static msr_status_t step_alltoall(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_a2a_t *x = &r->a2a;
    const int w = x->window;
    const char *buf;
    size_t len;
    if (!x->started) {
        x->started = 1;
        if (a->in_place && r->bytes != 0)
            memcpy(r->scratch, a->recvbuf, r->bytes * (size_t)r->n);
        const char *src;
        size_t slen, rlen;
        a2a_block(r, r->me, 1, &src, &slen);
        a2a_block(r, r->me, 0, &buf, &rlen);
        if (slen != rlen) {
            snprintf(r->pub.error, sizeof r->pub.error,
                     "alltoallv: sends %zu bytes to itself but expects %zu", slen, rlen);
            return MSR_ERR_INVALID_ARG;
        }
        if (slen && src != buf)
            memmove((char *)buf, src, slen);
        x->posted = x->done = 1;
    }
    int busy = 1;
    while (busy) {
        busy = 0;
        while (x->posted < r->n && x->posted - x->done < w) {
            int to = mod(r->me + x->posted, r->n), from = mod(r->me - x->posted, r->n);
            ucx_op_t *ops = &r->ops[2 * (size_t)(x->posted % w)];
            a2a_block(r, to, 1, &buf, &len);
            msr_status_t st = post_send(r, &ops[1], to, buf, len, 0);
            if (st != MSR_OK)
                return st;
            a2a_block(r, from, 0, &buf, &len);
            st = post_recv(r, &ops[0], from, (char *)buf, len, 0);
            if (st != MSR_OK)
                return st;
            x->posted++;
        }
        if (x->done < x->posted) {
            ucx_op_t *ops = &r->ops[2 * (size_t)(x->done % w)];
            int d0 = op_test(r, &ops[0]), d1 = op_test(r, &ops[1]);
            if (r->err != MSR_OK)
                return r->err;
            if (d0 && d1) {
                x->done++;
                busy = 1;
            }
        }
    }
    return x->done == r->n ? MSR_OK : MSR_IN_PROGRESS;
}

/* ---- choosing ---- */

static const char *const algo_names[] = {"auto",  "direct",   "rd",  "ring", "binomial",
                                         "chain", "pairwise", "shm", "hier"};

static ucx_algo_t parse_algo(const char *var)
{
    const char *v = getenv(var);
    if (v == NULL || *v == '\0')
        return UCX_ALGO_AUTO;
    for (size_t i = 0; i < sizeof algo_names / sizeof algo_names[0]; i++)
        if (strcmp(v, algo_names[i]) == 0)
            return (ucx_algo_t)i;
    MSR_WARN("comm: %s=%s is not an algorithm (auto, direct, rd, ring, binomial, chain, "
             "pairwise, shm, hier): using auto",
             var, v);
    return UCX_ALGO_AUTO;
}

/* never (0), always (1) or auto (2, by measurement: shm.c) */
static int parse_nt(const char *var)
{
    const char *v = getenv(var);
    if (v == NULL || *v == '\0' || strcmp(v, "auto") == 0)
        return 2;
    if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
        return *v - '0';
    MSR_WARN("comm: %s=%s is not 0, 1 or auto: using auto", var, v);
    return 2;
}

static size_t env_bytes(const char *name, size_t def)
{
    return (size_t)msr_env_i64(name, (int64_t)def, 0, INT64_MAX);
}

void ucx_tuning_read(ucx_tuning_t *t, int local_size)
{
    (void)local_size;
    memset(t, 0, sizeof *t);
    t->force[MSR_COLL_ALLREDUCE] = parse_algo("MSR_COMM_ALGO_ALLREDUCE");
    t->force[MSR_COLL_REDUCE_SCATTER] = parse_algo("MSR_COMM_ALGO_REDUCE_SCATTER");
    t->force[MSR_COLL_ALLGATHER] = parse_algo("MSR_COMM_ALGO_ALLGATHER");
    t->force[MSR_COLL_BROADCAST] = parse_algo("MSR_COMM_ALGO_BROADCAST");
    t->force[MSR_COLL_REDUCE] = parse_algo("MSR_COMM_ALGO_REDUCE");
    /* Measured on the 2-core development machine (docs/comm.md). */
    t->allreduce_direct_max = env_bytes("MSR_COMM_ALLREDUCE_DIRECT_MAX", 2048);
    t->allreduce_ring_min = env_bytes("MSR_COMM_ALLREDUCE_RING_MIN", 16384);
    t->allreduce_ring_min_2 = env_bytes("MSR_COMM_ALLREDUCE_RING_MIN_2", 1 << 20);
    t->direct_max_ranks = (int)msr_env_i64("MSR_COMM_DIRECT_MAX_RANKS", 8, 2, 1 << 20);
    t->reduce_scatter_ring_min = env_bytes("MSR_COMM_REDUCE_SCATTER_RING_MIN", 4 << 20);
    t->allgather_ring_min = env_bytes("MSR_COMM_ALLGATHER_RING_MIN", 32 << 20);
    t->bcast_chain_min = env_bytes("MSR_COMM_BCAST_CHAIN_MIN", 8 << 20);
    t->reduce_chain_min = env_bytes("MSR_COMM_REDUCE_CHAIN_MIN", 1024);
    t->segment = env_bytes("MSR_COMM_SEGMENT", 1 << 20);
    if (t->segment < 4096)
        t->segment = 4096;
    t->window = (int)msr_env_i64("MSR_COMM_WINDOW", 2, 1, 256);
    t->alltoall_window = (int)msr_env_i64("MSR_COMM_ALLTOALL_WINDOW", 16, 1, 4096);
    t->shm_max = env_bytes("MSR_COMM_SHM_MAX", MSR_SHM_MAX_BYTES);
    t->shm_tile = env_bytes("MSR_COMM_SHM_TILE", MSR_SHM_TILE_BYTES);
    t->shm_depth = (int)msr_env_i64("MSR_COMM_SHM_TILES", MSR_SHM_TILES, 2, 64);
    t->shm_nt = parse_nt("MSR_COMM_SHM_NT");
    t->shm_nt_min = env_bytes("MSR_COMM_SHM_NT_MIN", 64 << 10);
    t->shm_segment = env_bytes("MSR_COMM_SHM_SEGMENT", MSR_SHM_SEGMENT_BYTES);
    t->shm_spin = (int)msr_env_i64("MSR_COMM_SHM_SPIN", 256, 0, 1 << 20);
    if (t->shm_max > ((size_t)64 << 20))
        t->shm_max = (size_t)64 << 20;
    /* Groups over several nodes (not all on this machine): the two levels
     * from these sizes (bytes of the whole vector; over rate-limited links
     * between network namespaces they won from 16-64 KiB on, docs/comm.md).
     * Broadcast: on 4 nodes 1.9-2x the binomial tree that auto took below
     * the chain's threshold, from 64 KiB; on 2 nodes even. Reduce: as fast
     * as the flat chain auto takes (0.9-1.05x), which it keeps: only when
     * forced or given a size. */
    t->hier = (int)msr_env_i64("MSR_COMM_HIER", 1, 0, 1);
    t->hier_min[MSR_COLL_ALLREDUCE] = env_bytes("MSR_COMM_HIER_ALLREDUCE_MIN", 64 << 10);
    t->hier_min[MSR_COLL_REDUCE_SCATTER] = env_bytes("MSR_COMM_HIER_REDUCE_SCATTER_MIN", 64 << 10);
    t->hier_min[MSR_COLL_ALLGATHER] = env_bytes("MSR_COMM_HIER_ALLGATHER_MIN", 64 << 10);
    t->hier_min[MSR_COLL_REDUCE] = env_bytes("MSR_COMM_HIER_REDUCE_MIN", (size_t)INT64_MAX);
    /* On 2 and 4 nodes of those links the allreduce was 1.03-1.5x the ring
     * at every size from 64 KiB, the allgather 1.07-1.5x (measured no
     * further); the reduce-scatter lost on 4 nodes (0.36-0.82x: the folds
     * in the node on that host's 2 cores). */
    t->hier_max_nodes = (int)msr_env_i64("MSR_COMM_HIER_MAX_NODES", 4, 2, 1 << 20);
    t->hier_rs_max_nodes =
        (int)msr_env_i64("MSR_COMM_HIER_REDUCE_SCATTER_MAX_NODES", 2, 2, 1 << 20);
    /* the exchange between nodes in pipelined units: a message per node of
     * about this size, this many units in flight */
    t->hier_chunk = env_bytes("MSR_COMM_HIER_CHUNK", 256 << 10);
    if (t->hier_chunk < 4096)
        t->hier_chunk = 4096;
    t->hier_window = (int)msr_env_i64("MSR_COMM_HIER_WINDOW", 8, 1, 64);
    t->hier_min[MSR_COLL_BROADCAST] = env_bytes("MSR_COMM_HIER_BROADCAST_MIN", 64 << 10);
}

static ucx_algo_t choose(const ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const ucx_tuning_t *t = &r->uc->tune;
    ucx_algo_t f = t->force[a->coll];
    size_t bytes = r->bytes, total = r->bytes * (size_t)r->n;
    int small_group = r->n <= t->direct_max_ranks;
    /* a group over several nodes: two levels (hier.c), forced or from the
     * op's threshold; a group on one node never has them (forced, it gets
     * what auto gives it) */
    int hier = r->uc->hier && ucx_hier_fits(r);
    if (hier &&
        (f == UCX_ALGO_HIER ||
         (f == UCX_ALGO_AUTO && !r->uc->one_host &&
          ucx_hier_nodes(r->uc) <=
              (a->coll == MSR_COLL_REDUCE_SCATTER ? t->hier_rs_max_nodes : t->hier_max_nodes) &&
          (a->coll == MSR_COLL_REDUCE_SCATTER || a->coll == MSR_COLL_ALLGATHER ? total : bytes) >=
              t->hier_min[a->coll])))
        return UCX_ALGO_HIER;
    if (f == UCX_ALGO_HIER)
        f = UCX_ALGO_AUTO;
    switch (a->coll) {
    case MSR_COLL_ALLREDUCE:
        if (r->uc->shm && (f == UCX_ALGO_AUTO || f == UCX_ALGO_SHM) &&
            (bytes <= r->uc->shm_slot || r->uc->shm_tile))
            return UCX_ALGO_SHM;
        if (f == UCX_ALGO_DIRECT || f == UCX_ALGO_RD || f == UCX_ALGO_RING)
            return f;
        if (r->n == 2) /* direct and recursive doubling are the same exchange */
            return bytes >= t->allreduce_ring_min_2 ? UCX_ALGO_RING : UCX_ALGO_DIRECT;
        if (bytes <= t->allreduce_direct_max && small_group)
            return UCX_ALGO_DIRECT;
        /* the ring needs an element per rank to be worth its 2(n-1) steps */
        return bytes >= t->allreduce_ring_min && a->count >= (uint64_t)r->n ? UCX_ALGO_RING
                                                                            : UCX_ALGO_RD;
    case MSR_COLL_REDUCE_SCATTER:
        if (r->uc->shm && (f == UCX_ALGO_AUTO || f == UCX_ALGO_SHM) &&
            (total <= r->uc->shm_slot || r->uc->shm_tile))
            return UCX_ALGO_SHM;
        if (f == UCX_ALGO_DIRECT || f == UCX_ALGO_RING)
            return f;
        return total < t->reduce_scatter_ring_min && small_group ? UCX_ALGO_DIRECT : UCX_ALGO_RING;
    case MSR_COLL_ALLGATHER:
        if (r->uc->shm && (f == UCX_ALGO_AUTO || f == UCX_ALGO_SHM) &&
            (bytes <= r->uc->shm_slot || r->uc->shm_tile))
            return UCX_ALGO_SHM;
        if (f == UCX_ALGO_DIRECT || f == UCX_ALGO_RING)
            return f;
        return total < t->allgather_ring_min && small_group ? UCX_ALGO_DIRECT : UCX_ALGO_RING;
    case MSR_COLL_BROADCAST:
    case MSR_COLL_REDUCE: {
        /* small vectors: a broadcast through the slots (auto: unless the
         * machine is crowded); a reduce through the tree's messages, which
         * beat the tiles' hand-offs */
        if (r->uc->shm && a->coll == MSR_COLL_BROADCAST && bytes <= r->uc->shm_slot &&
            (f == UCX_ALGO_SHM || (f == UCX_ALGO_AUTO && r->uc->shm_own_cpus)))
            return UCX_ALGO_SHM;
        if (r->uc->shm_tile && (f == UCX_ALGO_SHM || (f == UCX_ALGO_AUTO && bytes > t->shm_max)))
            return UCX_ALGO_SHM;
        if (f == UCX_ALGO_BINOMIAL || f == UCX_ALGO_CHAIN)
            return f;
        /* A chain is n-1 hops deep: in large groups only for large vectors. */
        size_t min = a->coll == MSR_COLL_BROADCAST ? t->bcast_chain_min : t->reduce_chain_min;
        if (!small_group && min < ((size_t)1 << 20))
            min = (size_t)1 << 20;
        return bytes >= min ? UCX_ALGO_CHAIN : UCX_ALGO_BINOMIAL;
    }
    default:
        return UCX_ALGO_PAIRWISE;
    }
}

/* A chain of ranks relative to root: slots, whether it receives into
 * slots in scratch (and keeps its partial sums after them). */
static msr_status_t chain_setup(ucx_req_t *r, int slots)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_chain_t *c = &r->chain;
    ucx_pipe_t *p = &c->pipe;
    uint64_t nseg = nsegments(a->count, r->es, r->uc->tune.segment);
    c->vr = mod(r->me - a->root, r->n);
    p->nseg = nseg;
    p->slot_bytes = ((a->count + nseg - 1) / nseg) * r->es;
    msr_status_t st = pipe_setup(r, p);
    if (st != MSR_OK || !slots)
        return st;
    return scratch_get(r, (size_t)(p->window * p->slot_bytes) + (c->vr == 0 ? 0 : r->bytes));
}

/* The shared-memory paths: the operation's number, counted on every member
 * alike (the choice depends only on arguments all ranks share). */
static uint64_t shm_number(ucx_req_t *r, const char *algo)
{
    r->algo = algo;
    r->shm = 1;
    r->uc->engine->shm_active++;
    return ucx_shm_number(r->uc);
}

uint64_t ucx_shm_number(ucx_comm_t *uc)
{
    return ++uc->shm_seq;
}

/* The slots, for vectors up to a slot (a reduce-scatter's whole input),
 * and the barrier. */
static msr_status_t shm_start(ucx_req_t *r, const char *algo)
{
    r->step = ucx_shm_step;
    r->slots.seq = shm_number(r, algo);
    return MSR_OK;
}

/* The tiled path, for vectors larger than the slots. */
static msr_status_t shm_tiled_start(ucx_req_t *r, const char *algo)
{
    size_t scratch = ucx_shm_tiled_scratch(r);
    if (scratch) {
        msr_status_t st = scratch_get(r, scratch); /* before the operation is numbered */
        if (st != MSR_OK)
            return st;
    }
    r->step = ucx_shm_tiled_step;
    r->tiles.seq = shm_number(r, algo);
    ucx_shm_tiled_init(r);
    return MSR_OK;
}

/* The peer-to-peer calls, the barrier and alltoall(v): no algorithm to
 * choose. */
static msr_status_t start_fixed(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    int n = r->n;
    switch (a->coll) {
    case MSR_COLL_SEND:
        r->step = step_send;
        r->algo = "send";
        return MSR_OK;
    case MSR_COLL_RECV:
        r->step = step_recv;
        r->algo = "recv";
        return MSR_OK;
    case MSR_COLL_BARRIER:
        if (r->uc->shm)
            return shm_start(r, "barrier(shm)");
        r->step = step_barrier;
        r->algo = "barrier";
        return ops_reserve(r, 2);
    default: /* alltoall(v) */
        break;
    }
    r->step = step_alltoall;
    r->algo = a->coll == MSR_COLL_ALLTOALL ? "alltoall" : "alltoallv";
    int w = r->uc->tune.alltoall_window < n ? r->uc->tune.alltoall_window : n;
    r->a2a.window = w;
    msr_status_t st = ops_reserve(r, 2 * w);
    if (st != MSR_OK)
        return st;
    r->nops = 2 * w;
    for (int i = 0; i < r->nops; i++)
        r->ops[i].h = NULL;
    if (a->coll == MSR_COLL_ALLTOALL && a->in_place)
        return scratch_get(r, r->bytes * (size_t)n);
    return MSR_OK;
}

/* The direct exchange of allreduce and reduce-scatter: every block to
 * every peer at once, n copies in scratch. */
static msr_status_t start_direct(ucx_req_t *r, ucx_step_fn step, const char *name)
{
    r->step = step;
    r->algo = name;
    msr_status_t st = ops_reserve(r, 2 * (r->n - 1));
    if (st != MSR_OK)
        return st;
    return scratch_get(r, r->bytes * (size_t)r->n);
}

static msr_status_t start_allreduce(ucx_req_t *r, ucx_algo_t algo)
{
    if (algo == UCX_ALGO_SHM)
        return r->bytes <= r->uc->shm_slot ? shm_start(r, "allreduce(shm)")
                                           : shm_tiled_start(r, "allreduce(shm tiles)");
    if (algo == UCX_ALGO_DIRECT)
        return start_direct(r, step_allreduce_direct, "allreduce(direct)");
    if (algo == UCX_ALGO_RING) {
        r->step = step_ring;
        r->algo = "allreduce(ring)";
        return ring_setup(r);
    }
    r->step = step_allreduce_rd;
    r->algo = "allreduce(rd)";
    for (r->rd.p2 = 1; r->rd.p2 * 2 <= r->n; r->rd.p2 *= 2) {
    }
    r->rd.rem = r->n - r->rd.p2;
    msr_status_t st = ops_reserve(r, 2);
    if (st != MSR_OK)
        return st;
    return scratch_get(r, r->bytes);
}

/* Broadcast and reduce: a chain of segments, or a binomial tree. */
static msr_status_t start_rooted(ucx_req_t *r, ucx_algo_t algo)
{
    const msr_coll_args_t *a = &r->pub.args;
    int reduce = a->coll == MSR_COLL_REDUCE;
    if (algo == UCX_ALGO_SHM && !reduce && r->bytes <= r->uc->shm_slot)
        return shm_start(r, "broadcast(shm)");
    if (algo == UCX_ALGO_SHM)
        return shm_tiled_start(r, reduce ? "reduce(shm tiles)" : "broadcast(shm tiles)");
    if (algo == UCX_ALGO_CHAIN) {
        r->step = reduce ? step_reduce_chain : step_bcast_chain;
        r->algo = reduce ? "reduce(chain)" : "broadcast(chain)";
        return chain_setup(r, reduce);
    }
    r->tree.vr = mod(r->me - a->root, r->n);
    if (!reduce) {
        r->step = step_bcast_binomial;
        r->algo = "broadcast(binomial)";
        return ops_reserve(r, 64);
    }
    r->step = step_reduce_binomial;
    r->algo = "reduce(binomial)";
    msr_status_t st = ops_reserve(r, 2);
    if (st != MSR_OK)
        return st;
    return scratch_get(r, r->tree.vr == 0 ? r->bytes : 2 * r->bytes);
}

msr_status_t ucx_coll_start(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    r->n = r->uc->comm->size;
    r->me = r->uc->comm->rank;
    r->es = msr_dtype_size(a->dtype);
    r->bytes = (size_t)a->count * r->es;
    switch (a->coll) {
    case MSR_COLL_SEND:
    case MSR_COLL_RECV:
    case MSR_COLL_BARRIER:
    case MSR_COLL_ALLTOALL:
    case MSR_COLL_ALLTOALLV:
        return start_fixed(r);
    default:
        break;
    }
    ucx_algo_t algo = choose(r);
    if (algo == UCX_ALGO_HIER)
        return ucx_hier_start(r);
    switch (a->coll) {
    case MSR_COLL_ALLREDUCE:
        return start_allreduce(r, algo);
    case MSR_COLL_REDUCE_SCATTER:
        if (algo == UCX_ALGO_SHM)
            return r->bytes * (size_t)r->n <= r->uc->shm_slot
                       ? shm_start(r, "reduce_scatter(shm)")
                       : shm_tiled_start(r, "reduce_scatter(shm tiles)");
        if (algo == UCX_ALGO_DIRECT)
            return start_direct(r, step_reduce_scatter_direct, "reduce_scatter(direct)");
        r->step = step_ring;
        r->algo = "reduce_scatter(ring)";
        return ring_setup(r);
    case MSR_COLL_ALLGATHER:
        if (algo == UCX_ALGO_SHM)
            return r->bytes <= r->uc->shm_slot ? shm_start(r, "allgather(shm)")
                                               : shm_tiled_start(r, "allgather(shm tiles)");
        r->step = algo == UCX_ALGO_DIRECT ? step_allgather_direct : step_allgather_ring;
        r->algo = algo == UCX_ALGO_DIRECT ? "allgather(direct)" : "allgather(ring)";
        return ops_reserve(r, 2 * (r->n - 1));
    case MSR_COLL_BROADCAST:
    case MSR_COLL_REDUCE:
        return start_rooted(r, algo);
    default:
        return MSR_ERR_INTERNAL;
    }
}
