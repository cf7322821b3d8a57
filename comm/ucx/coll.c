/* The collective algorithms of the UCX backend, each a step function that
 * posts tagged messages, returns MSR_IN_PROGRESS while they fly and resumes
 * where it stopped (a small coroutine: r->pc is the resume point, and the
 * state that lives across yields is in the request).
 *
 *   allreduce       direct (small, small groups), recursive doubling, ring
 *   reduce_scatter  direct, ring
 *   allgather       direct, ring
 *   broadcast       binomial tree, pipelined chain
 *   reduce          binomial tree, pipelined chain
 *   alltoall(v)     pairwise exchange, a window of steps in flight
 *   barrier         dissemination
 *
 * Every reduction combines operands in an order fixed by the ranks alone
 * (never by arrival), so results are bitwise reproducible. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/reduce.h"
#include "comm/ucx/ucx_impl.h"

/* ---- the coroutine ---- */

#define CO_BEGIN     \
    switch (r->pc) { \
    case 0:
#define CO_AWAIT(cond)                \
    do {                              \
        r->pc = __LINE__;             \
        __attribute__((fallthrough)); \
    case __LINE__:                    \
        if (!(cond))                  \
            return MSR_IN_PROGRESS;   \
    } while (0)
#define CO_END \
    }          \
    return MSR_OK
/* Waits for every operation posted so far. */
#define CO_WAIT_OPS()          \
    do {                       \
        CO_AWAIT(ops_done(r)); \
        if (r->err != MSR_OK)  \
            return r->err;     \
    } while (0)
#define TRY(expr)                  \
    do {                           \
        msr_status_t st_ = (expr); \
        if (st_ != MSR_OK)         \
            return st_;            \
    } while (0)

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
    TRY(peer_ep(r, peer, &ep));
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
    CO_BEGIN;
    for (r->k = 0, r->i = 1; r->i < r->n; r->i <<= 1, r->k++) {
        TRY(post_send(r, next_op(r), mod(r->me + r->i, r->n), NULL, 0, (unsigned)r->k));
        TRY(post_recv(r, next_op(r), mod(r->me - r->i, r->n), NULL, 0, (unsigned)r->k));
        CO_WAIT_OPS();
    }
    CO_END;
}

/* ---- point to point ---- */

static msr_status_t step_send(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    CO_BEGIN;
    TRY(post_send_tag(r, next_op(r), a->root, a->sendbuf, r->bytes,
                      ucx_tag(UCX_TAG_P2P, r->uc->id, r->me, (uint64_t)a->tag)));
    CO_WAIT_OPS();
    CO_END;
}

static msr_status_t step_recv(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    CO_BEGIN;
    TRY(post_recv_tag(r, next_op(r), a->root, a->recvbuf, r->bytes,
                      ucx_tag(UCX_TAG_P2P, r->uc->id, a->root, (uint64_t)a->tag)));
    CO_WAIT_OPS();
    CO_END;
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
    CO_BEGIN;
    /* Sends first: they are what the others wait for. Slot j gets rank j's
     * vector; slot me a copy of ours when in place. */
    for (int d = 1; d < r->n; d++)
        TRY(post_send(r, next_op(r), mod(r->me + d, r->n), a->sendbuf, r->bytes, 0));
    for (int d = 1; d < r->n; d++) {
        int j = mod(r->me - d, r->n);
        TRY(post_recv(r, next_op(r), j, r->scratch + (size_t)j * r->bytes, r->bytes, 0));
    }
    if (a->in_place)
        memcpy(r->scratch + (size_t)r->me * r->bytes, a->recvbuf, r->bytes);
    CO_WAIT_OPS();
    fold_in_order(r, a->recvbuf,
                  a->in_place ? (const void *)(r->scratch + (size_t)r->me * r->bytes) : a->sendbuf,
                  r->scratch, r->bytes, a->count);
    CO_END;
}

static msr_status_t step_reduce_scatter_direct(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    CO_BEGIN;
    for (int d = 1; d < r->n; d++) {
        int j = mod(r->me + d, r->n);
        TRY(post_send(r, next_op(r), j, at(a->sendbuf, (uint64_t)j * a->count, r->es), r->bytes,
                      0));
    }
    for (int d = 1; d < r->n; d++) {
        int j = mod(r->me - d, r->n);
        TRY(post_recv(r, next_op(r), j, r->scratch + (size_t)j * r->bytes, r->bytes, 0));
    }
    if (a->in_place && r->bytes > 0) /* count 0 may come with NULL buffers */
        memcpy(r->scratch + (size_t)r->me * r->bytes, a->recvbuf, r->bytes);
    CO_WAIT_OPS();
    fold_in_order(r, a->recvbuf,
                  a->in_place ? (const void *)(r->scratch + (size_t)r->me * r->bytes)
                              : at(a->sendbuf, (uint64_t)r->me * a->count, r->es),
                  r->scratch, r->bytes, a->count);
    CO_END;
}

static msr_status_t step_allgather_direct(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    CO_BEGIN;
    for (int d = 1; d < r->n; d++)
        TRY(post_send(r, next_op(r), mod(r->me + d, r->n), a->sendbuf, r->bytes, 0));
    for (int d = 1; d < r->n; d++) {
        int j = mod(r->me - d, r->n);
        TRY(post_recv(r, next_op(r), j, at(a->recvbuf, (uint64_t)j * a->count, r->es), r->bytes,
                      0));
    }
    if (!a->in_place && r->bytes)
        memcpy(at(a->recvbuf, (uint64_t)r->me * a->count, r->es), a->sendbuf, r->bytes);
    CO_WAIT_OPS();
    CO_END;
}

/* ---- allreduce: recursive doubling ----
 * The first 2*rem ranks fold pairwise into rem ranks, the remaining power of
 * two exchange whole vectors log2 times (each pair computes lower op upper,
 * so both get the same bits), and the folded ranks get the result back. */

static int rd_real(const ucx_req_t *r, int newrank)
{
    return newrank < r->rem ? newrank * 2 + 1 : newrank + r->rem;
}

static msr_status_t step_allreduce_rd(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    void *acc = a->recvbuf;
    CO_BEGIN;
    if (!a->in_place && r->bytes)
        memcpy(acc, a->sendbuf, r->bytes);
    if (r->me < 2 * r->rem) {
        if (r->me % 2 == 0) {
            TRY(post_send(r, next_op(r), r->me + 1, acc, r->bytes, 0));
            CO_WAIT_OPS();
            r->newrank = -1;
        } else {
            TRY(post_recv(r, next_op(r), r->me - 1, r->scratch, r->bytes, 0));
            CO_WAIT_OPS();
            msr_reduce(a->op, a->dtype, acc, r->scratch, acc, a->count);
            r->newrank = r->me / 2;
        }
    } else {
        r->newrank = r->me - r->rem;
    }
    if (r->newrank >= 0) {
        for (r->mask = 1, r->k = 1; r->mask < r->p2; r->mask <<= 1, r->k++) {
            r->peer = rd_real(r, r->newrank ^ r->mask);
            TRY(post_send(r, next_op(r), r->peer, acc, r->bytes, (unsigned)r->k));
            TRY(post_recv(r, next_op(r), r->peer, r->scratch, r->bytes, (unsigned)r->k));
            CO_WAIT_OPS();
            if ((r->newrank ^ r->mask) < r->newrank)
                msr_reduce(a->op, a->dtype, acc, r->scratch, acc, a->count);
            else
                msr_reduce(a->op, a->dtype, acc, acc, r->scratch, a->count);
        }
        msr_reduce_finish(a->op, a->dtype, acc, a->count, r->n);
    }
    if (r->me < 2 * r->rem) {
        if (r->me % 2 == 1)
            TRY(post_send(r, next_op(r), r->me - 1, acc, r->bytes, UCX_TAG_PHASES - 1));
        else
            TRY(post_recv(r, next_op(r), r->me + 1, acc, r->bytes, UCX_TAG_PHASES - 1));
        CO_WAIT_OPS();
    }
    CO_END;
}

/* ---- the pipelined ring: reduce-scatter, then (allreduce) allgather ----
 * The vector is cut into n chunks and each chunk into nseg segments. In
 * reduce-scatter step s (0 .. n-2) a rank sends chunk me-s-1 to its right and
 * receives chunk me-s-2 from its left, adds its own input and forwards the
 * sum at the next step; after n-1 steps it holds chunk me complete. The
 * allgather then passes complete chunks around the ring. Receives and sends
 * are two ordered streams of units (one unit = one segment of one step), so
 * step s+1 of segment j starts as soon as step s of segment j is done: a
 * window of w receives in flight (reduce-scatter ones into scratch slots,
 * allgather ones straight into place) and up to sw sends.
 *
 * state: u[0] nseg, u[1] units, u[2] sends, u[3] allgather?, u[4] w,
 * u[5] sw, u[6] segment slot bytes; i receives posted, j units processed,
 * k sends posted, s sends finished. full: where partial sums live (the
 * output for allreduce, the input in place, scratch otherwise). */

typedef struct ring_unit {
    int ag;
    int64_t s;
    int chunk;
    uint64_t off, len; /* elements, in the whole vector */
} ring_unit_t;

static void ring_unit(const ucx_req_t *r, uint64_t count, uint64_t i, ring_unit_t *u)
{
    uint64_t nseg = r->u[0], per = (uint64_t)(r->n - 1) * nseg;
    u->ag = i >= per;
    if (u->ag)
        i -= per;
    u->s = (int64_t)(i / nseg);
    uint64_t jseg = i % nseg;
    u->chunk = mod(r->me - u->s - (u->ag ? 1 : 2), r->n);
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
    return r->scratch + r->u[4] * r->u[6];
}

/* Where unit i's result lives (its reduced partial, or the received
 * allgather segment). */
static char *ring_dst(const ucx_req_t *r, const ring_unit_t *u)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (a->coll == MSR_COLL_REDUCE_SCATTER && !a->in_place && u->s == r->n - 2 && !u->ag) {
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

static msr_status_t step_ring(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const uint64_t count = ring_count(r), nseg = r->u[0], units = r->u[1], sends = r->u[2];
    const uint64_t w = r->u[4], sw = r->u[5];
    const int left = mod(r->me - 1, r->n), right = mod(r->me + 1, r->n);
    ring_unit_t u;
    int busy = 1;
    while (busy) {
        busy = 0;
        /* sends whose data is ready: the first nseg are our own input */
        while ((uint64_t)r->k < sends && (uint64_t)r->k < nseg + (uint64_t)r->j &&
               (uint64_t)(r->k - r->s) < sw) {
            const char *src;
            uint64_t len;
            if ((uint64_t)r->k < nseg) {
                uint64_t coff, clen, soff;
                ucx_part(count, (uint64_t)r->n, (uint64_t)mod(r->me - 1, r->n), &coff, &clen);
                ucx_part(clen, nseg, (uint64_t)r->k, &soff, &len);
                src = at(a->sendbuf, coff + soff, r->es);
            } else {
                ring_unit(r, count, (uint64_t)r->k - nseg, &u);
                src = ring_dst(r, &u);
                len = u.len;
            }
            TRY(post_send(r, &r->ops[w + (uint64_t)r->k % sw], right, src, len * r->es, 0));
            r->k++;
            busy = 1;
        }
        while (r->s < r->k && op_test(r, &r->ops[w + (uint64_t)r->s % sw])) {
            if (r->err != MSR_OK)
                return r->err;
            r->s++;
            busy = 1;
        }
        /* receives, in stream order (after the sends: those are what the
         * neighbour waits for) */
        while ((uint64_t)r->i < units && (uint64_t)(r->i - r->j) < w) {
            ring_unit(r, count, (uint64_t)r->i, &u);
            void *dst = u.ag ? ring_dst(r, &u) : r->scratch + ((uint64_t)r->i % w) * r->u[6];
            TRY(post_recv(r, &r->ops[(uint64_t)r->i % w], left, dst, u.len * r->es, 0));
            r->i++;
        }
        /* the oldest receive, then its reduction */
        if ((uint64_t)r->j < (uint64_t)r->i && op_test(r, &r->ops[(uint64_t)r->j % w])) {
            if (r->err != MSR_OK)
                return r->err;
            ring_unit(r, count, (uint64_t)r->j, &u);
            if (!u.ag) {
                char *dst = ring_dst(r, &u);
                const char *slot = r->scratch + ((uint64_t)r->j % w) * r->u[6];
                msr_reduce(a->op, a->dtype, dst, slot, at(a->sendbuf, u.off, r->es), u.len);
                if (u.s == r->n - 2)
                    msr_reduce_finish(a->op, a->dtype, dst, u.len, r->n);
            }
            r->j++;
            busy = 1;
        }
    }
    if ((uint64_t)r->j == units && (uint64_t)r->s == sends)
        return MSR_OK;
    return MSR_IN_PROGRESS;
}

static msr_status_t ring_setup(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const ucx_tuning_t *t = &r->uc->tune;
    uint64_t count = ring_count(r);
    uint64_t maxchunk = (count + (uint64_t)r->n - 1) / (uint64_t)r->n;
    uint64_t nseg = nsegments(maxchunk, r->es, t->segment);
    uint64_t seg_elems = (maxchunk + nseg - 1) / nseg;
    int ag = a->coll == MSR_COLL_ALLREDUCE;
    uint64_t per = (uint64_t)(r->n - 1) * nseg;
    r->u[0] = nseg;
    r->u[1] = ag ? 2 * per : per;
    /* Sends: the nseg segments of our own input, then one per processed
     * unit except those of the very last step, which send nothing: as many
     * as there are units. */
    r->u[2] = r->u[1];
    r->u[3] = (uint64_t)ag;
    r->u[4] = (uint64_t)t->window;
    r->u[5] = (uint64_t)t->window * 2;
    r->u[6] = seg_elems * r->es;
    size_t scratch = (size_t)(r->u[4] * r->u[6]);
    if (a->coll == MSR_COLL_REDUCE_SCATTER && !a->in_place)
        scratch += (size_t)(count * r->es); /* partial sums */
    TRY(scratch_get(r, scratch));
    TRY(ops_reserve(r, (int)(r->u[4] + r->u[5])));
    r->nops = (int)(r->u[4] + r->u[5]);
    for (int i = 0; i < r->nops; i++)
        r->ops[i].h = NULL;
    r->i = r->j = r->k = r->s = 0;
    return MSR_OK;
}

/* ---- allgather: ring ---- */

static msr_status_t step_allgather_ring(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const int left = mod(r->me - 1, r->n), right = mod(r->me + 1, r->n);
    CO_BEGIN;
    if (!a->in_place && r->bytes)
        memcpy(at(a->recvbuf, (uint64_t)r->me * a->count, r->es), a->sendbuf, r->bytes);
    /* receives: ops[0 .. n-2], step s gets block me-s-1 */
    for (r->s = 0; r->s < r->n - 1; r->s++)
        TRY(post_recv(r, next_op(r), left,
                      at(a->recvbuf, (uint64_t)mod(r->me - r->s - 1, r->n) * a->count, r->es),
                      r->bytes, 0));
    for (r->s = 0; r->s < r->n - 1; r->s++) {
        if (r->s > 0) {
            CO_AWAIT(op_test(r, &r->ops[r->s - 1]));
            if (r->err != MSR_OK)
                return r->err;
        }
        TRY(post_send(r, next_op(r), right,
                      at(a->recvbuf, (uint64_t)mod(r->me - r->s, r->n) * a->count, r->es), r->bytes,
                      0));
    }
    CO_WAIT_OPS();
    CO_END;
}

/* ---- broadcast ---- */

static int vreal(const ucx_req_t *r, int vr)
{
    return mod(vr + r->pub.args.root, r->n);
}

static msr_status_t step_bcast_binomial(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    CO_BEGIN;
    for (r->mask = 1; r->mask < r->n; r->mask <<= 1)
        if (r->vr & r->mask)
            break;
    if (r->vr != 0) {
        TRY(post_recv(r, next_op(r), vreal(r, r->vr - r->mask), a->recvbuf, r->bytes, 0));
        CO_WAIT_OPS();
    }
    for (r->mask >>= 1; r->mask > 0; r->mask >>= 1)
        if (r->vr + r->mask < r->n)
            TRY(post_send(r, next_op(r), vreal(r, r->vr + r->mask), a->recvbuf, r->bytes, 0));
    CO_WAIT_OPS();
    CO_END;
}

/* Chain vr 0 -> 1 -> ... -> n-1 in segments: u[0] nseg, u[4] w, u[5] sw;
 * i receives posted, j received, k sends posted, s sends done. */
static msr_status_t step_bcast_chain(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const uint64_t nseg = r->u[0], w = r->u[4], sw = r->u[5];
    const int first = r->vr == 0, last = r->vr == r->n - 1;
    uint64_t off, len;
    int busy = 1;
    while (busy) {
        busy = 0;
        while (!first && (uint64_t)r->i < nseg && (uint64_t)(r->i - r->j) < w) {
            ucx_part(a->count, nseg, (uint64_t)r->i, &off, &len);
            TRY(post_recv(r, &r->ops[(uint64_t)r->i % w], vreal(r, r->vr - 1),
                          at(a->recvbuf, off, r->es), len * r->es, 0));
            r->i++;
        }
        if (!first && (uint64_t)r->j < (uint64_t)r->i && op_test(r, &r->ops[(uint64_t)r->j % w])) {
            if (r->err != MSR_OK)
                return r->err;
            r->j++;
            busy = 1;
        }
        uint64_t ready = first ? nseg : (uint64_t)r->j;
        while (!last && (uint64_t)r->k < ready && (uint64_t)(r->k - r->s) < sw) {
            ucx_part(a->count, nseg, (uint64_t)r->k, &off, &len);
            TRY(post_send(r, &r->ops[w + (uint64_t)r->k % sw], vreal(r, r->vr + 1),
                          at(a->recvbuf, off, r->es), len * r->es, 0));
            r->k++;
            busy = 1;
        }
        while (r->s < r->k && op_test(r, &r->ops[w + (uint64_t)r->s % sw])) {
            if (r->err != MSR_OK)
                return r->err;
            r->s++;
            busy = 1;
        }
    }
    if ((first || (uint64_t)r->j == nseg) && (last || (uint64_t)r->s == nseg))
        return MSR_OK;
    return MSR_IN_PROGRESS;
}

/* ---- reduce ---- */

static msr_status_t step_reduce_binomial(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    /* acc: the root's output, else scratch; tmp: after it */
    char *acc = r->vr == 0 ? (char *)a->recvbuf : r->scratch;
    char *tmp = r->scratch + (r->vr == 0 ? 0 : r->bytes);
    CO_BEGIN;
    if (!a->in_place && r->bytes)
        memcpy(acc, a->sendbuf, r->bytes);
    for (r->mask = 1; r->mask < r->n; r->mask <<= 1) {
        if (r->vr & r->mask) {
            TRY(post_send(r, next_op(r), vreal(r, r->vr - r->mask), acc, r->bytes, 0));
            CO_WAIT_OPS();
            break;
        }
        if (r->vr + r->mask < r->n) {
            TRY(post_recv(r, next_op(r), vreal(r, r->vr + r->mask), tmp, r->bytes, 0));
            CO_WAIT_OPS();
            msr_reduce(a->op, a->dtype, acc, acc, tmp, a->count);
        }
    }
    if (r->vr == 0)
        msr_reduce_finish(a->op, a->dtype, acc, a->count, r->n);
    CO_END;
}

/* Chain vr n-1 -> ... -> 0 in segments: each adds its own input to what
 * comes from above (own first) and passes it down; the root keeps it.
 * Scratch: w receive slots of u[6] bytes, then the partial sums (non-root). */
static msr_status_t step_reduce_chain(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const uint64_t nseg = r->u[0], w = r->u[4], sw = r->u[5];
    const int root = r->vr == 0, leaf = r->vr == r->n - 1;
    char *partial = root ? (char *)a->recvbuf : r->scratch + w * r->u[6];
    uint64_t off, len;
    int busy = 1;
    while (busy) {
        busy = 0;
        while (!leaf && (uint64_t)r->i < nseg && (uint64_t)(r->i - r->j) < w) {
            ucx_part(a->count, nseg, (uint64_t)r->i, &off, &len);
            TRY(post_recv(r, &r->ops[(uint64_t)r->i % w], vreal(r, r->vr + 1),
                          r->scratch + ((uint64_t)r->i % w) * r->u[6], len * r->es, 0));
            r->i++;
        }
        if (!leaf && (uint64_t)r->j < (uint64_t)r->i && op_test(r, &r->ops[(uint64_t)r->j % w])) {
            if (r->err != MSR_OK)
                return r->err;
            ucx_part(a->count, nseg, (uint64_t)r->j, &off, &len);
            msr_reduce(a->op, a->dtype, at(partial, off, r->es), at(a->sendbuf, off, r->es),
                       r->scratch + ((uint64_t)r->j % w) * r->u[6], len);
            if (root)
                msr_reduce_finish(a->op, a->dtype, at(partial, off, r->es), len, r->n);
            r->j++;
            busy = 1;
        }
        uint64_t ready = leaf ? nseg : (uint64_t)r->j;
        while (!root && (uint64_t)r->k < ready && (uint64_t)(r->k - r->s) < sw) {
            ucx_part(a->count, nseg, (uint64_t)r->k, &off, &len);
            const char *src = leaf ? at(a->sendbuf, off, r->es) : at(partial, off, r->es);
            TRY(post_send(r, &r->ops[w + (uint64_t)r->k % sw], vreal(r, r->vr - 1), src,
                          len * r->es, 0));
            r->k++;
            busy = 1;
        }
        while (r->s < r->k && op_test(r, &r->ops[w + (uint64_t)r->s % sw])) {
            if (r->err != MSR_OK)
                return r->err;
            r->s++;
            busy = 1;
        }
    }
    if ((leaf || (uint64_t)r->j == nseg) && (root || (uint64_t)r->s == nseg))
        return MSR_OK;
    return MSR_IN_PROGRESS;
}

/* ---- alltoall(v): pairwise, a window of steps in flight ----
 * Step d (1 .. n-1) sends to me+d and receives from me-d. u[4]: window;
 * i steps posted, j steps done. */

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
    const uint64_t w = r->u[4];
    const char *buf;
    size_t len;
    if (r->pc == 0) {
        r->pc = 1;
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
        r->i = r->j = 1;
    }
    int busy = 1;
    while (busy) {
        busy = 0;
        while (r->i < r->n && (uint64_t)(r->i - r->j) < w) {
            int to = mod(r->me + r->i, r->n), from = mod(r->me - r->i, r->n);
            ucx_op_t *ops = &r->ops[2 * ((uint64_t)r->i % w)];
            a2a_block(r, to, 1, &buf, &len);
            TRY(post_send(r, &ops[1], to, buf, len, 0));
            a2a_block(r, from, 0, &buf, &len);
            TRY(post_recv(r, &ops[0], from, (char *)buf, len, 0));
            r->i++;
        }
        if (r->j < r->i) {
            ucx_op_t *ops = &r->ops[2 * ((uint64_t)r->j % w)];
            int d0 = op_test(r, &ops[0]), d1 = op_test(r, &ops[1]);
            if (r->err != MSR_OK)
                return r->err;
            if (d0 && d1) {
                r->j++;
                busy = 1;
            }
        }
    }
    return r->j == r->n ? MSR_OK : MSR_IN_PROGRESS;
}

/* ---- choosing ---- */

static const char *const algo_names[] = {"auto",     "direct", "rd",       "ring",
                                         "binomial", "chain",  "pairwise", "shm"};

static ucx_algo_t parse_algo(const char *var)
{
    const char *v = getenv(var);
    if (v == NULL || *v == '\0')
        return UCX_ALGO_AUTO;
    for (size_t i = 0; i < sizeof algo_names / sizeof algo_names[0]; i++)
        if (strcmp(v, algo_names[i]) == 0)
            return (ucx_algo_t)i;
    MSR_WARN("comm: %s=%s is not an algorithm (auto, direct, rd, ring, binomial, chain, "
             "pairwise, shm): using auto",
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
    t->shm_max = env_bytes("MSR_COMM_SHM_MAX", 16 << 10);
    t->shm_tile = env_bytes("MSR_COMM_SHM_TILE", 256 << 10);
    t->shm_depth = (int)msr_env_i64("MSR_COMM_SHM_TILES", 4, 2, 64);
    t->shm_nt = parse_nt("MSR_COMM_SHM_NT");
    t->shm_nt_min = env_bytes("MSR_COMM_SHM_NT_MIN", 64 << 10);
    t->shm_segment = env_bytes("MSR_COMM_SHM_SEGMENT", 16 << 20);
    if (t->shm_max > ((size_t)64 << 20))
        t->shm_max = (size_t)64 << 20;
}

static ucx_algo_t choose(const ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const ucx_tuning_t *t = &r->uc->tune;
    ucx_algo_t f = t->force[a->coll];
    size_t bytes = r->bytes, total = r->bytes * (size_t)r->n;
    int small_group = r->n <= t->direct_max_ranks;
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
        if (r->uc->shm_tile && (f == UCX_ALGO_AUTO || f == UCX_ALGO_SHM))
            return UCX_ALGO_SHM;
        if (f == UCX_ALGO_DIRECT || f == UCX_ALGO_RING)
            return f;
        return total < t->reduce_scatter_ring_min && small_group ? UCX_ALGO_DIRECT : UCX_ALGO_RING;
    case MSR_COLL_ALLGATHER:
        if (r->uc->shm_tile && (f == UCX_ALGO_AUTO || f == UCX_ALGO_SHM))
            return UCX_ALGO_SHM;
        if (f == UCX_ALGO_DIRECT || f == UCX_ALGO_RING)
            return f;
        return total < t->allgather_ring_min && small_group ? UCX_ALGO_DIRECT : UCX_ALGO_RING;
    case MSR_COLL_BROADCAST:
    case MSR_COLL_REDUCE: {
        /* small vectors: the tree's messages beat the tiles' hand-offs */
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

static msr_status_t chain_setup(ucx_req_t *r, int slots)
{
    const ucx_tuning_t *t = &r->uc->tune;
    const msr_coll_args_t *a = &r->pub.args;
    uint64_t nseg = nsegments(a->count, r->es, t->segment);
    r->u[0] = nseg;
    r->u[4] = (uint64_t)t->window;
    r->u[5] = (uint64_t)t->window * 2;
    r->u[6] = ((a->count + nseg - 1) / nseg) * r->es;
    if (slots)
        TRY(scratch_get(r, (size_t)(r->u[4] * r->u[6]) + (r->vr == 0 ? 0 : r->bytes)));
    TRY(ops_reserve(r, (int)(r->u[4] + r->u[5])));
    r->nops = (int)(r->u[4] + r->u[5]);
    for (int i = 0; i < r->nops; i++)
        r->ops[i].h = NULL;
    r->i = r->j = r->k = r->s = 0;
    return MSR_OK;
}

/* The shared-memory path: the operation's number is counted on every
 * member alike (the choice depends only on arguments all ranks share). */
static msr_status_t shm_start(ucx_req_t *r, const char *algo)
{
    r->step = ucx_shm_step;
    r->algo = algo;
    r->u[0] = ++r->uc->shm_seq;
    r->u[1] = 0;
    r->shm = 1;
    r->uc->engine->shm_active++;
    return MSR_OK;
}

/* The tiled path, for vectors larger than the slots. */
static msr_status_t shm_tiled_start(ucx_req_t *r, const char *algo)
{
    size_t scratch = ucx_shm_tiled_scratch(r);
    if (scratch)
        TRY(scratch_get(r, scratch)); /* before the operation is numbered */
    shm_start(r, algo);
    r->step = ucx_shm_tiled_step;
    ucx_shm_tiled_init(r);
    return MSR_OK;
}

msr_status_t ucx_coll_start(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    r->n = r->uc->comm->size;
    r->me = r->uc->comm->rank;
    r->es = msr_dtype_size(a->dtype);
    r->bytes = (size_t)a->count * r->es;
    r->vr = mod(r->me - a->root, r->n);
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
    case MSR_COLL_ALLTOALL:
    case MSR_COLL_ALLTOALLV: {
        r->step = step_alltoall;
        r->algo = a->coll == MSR_COLL_ALLTOALL ? "alltoall" : "alltoallv";
        int w = r->uc->tune.alltoall_window < n ? r->uc->tune.alltoall_window : n;
        r->u[4] = (uint64_t)w;
        TRY(ops_reserve(r, 2 * w));
        r->nops = 2 * w;
        for (int i = 0; i < r->nops; i++)
            r->ops[i].h = NULL;
        if (a->coll == MSR_COLL_ALLTOALL && a->in_place)
            TRY(scratch_get(r, r->bytes * (size_t)n));
        return MSR_OK;
    }
    default:
        break;
    }
    ucx_algo_t algo = choose(r);
    switch (a->coll) {
    case MSR_COLL_ALLREDUCE:
        if (algo == UCX_ALGO_SHM)
            return r->bytes <= r->uc->shm_slot ? shm_start(r, "allreduce(shm)")
                                               : shm_tiled_start(r, "allreduce(shm tiles)");
        if (algo == UCX_ALGO_DIRECT) {
            r->step = step_allreduce_direct;
            r->algo = "allreduce(direct)";
            TRY(ops_reserve(r, 2 * (n - 1)));
            return scratch_get(r, r->bytes * (size_t)n);
        }
        if (algo == UCX_ALGO_RING) {
            r->step = step_ring;
            r->algo = "allreduce(ring)";
            return ring_setup(r);
        }
        r->step = step_allreduce_rd;
        r->algo = "allreduce(rd)";
        for (r->p2 = 1; r->p2 * 2 <= n; r->p2 *= 2) {
        }
        r->rem = n - r->p2;
        TRY(ops_reserve(r, 2));
        return scratch_get(r, r->bytes);
    case MSR_COLL_REDUCE_SCATTER:
        if (algo == UCX_ALGO_SHM)
            return shm_tiled_start(r, "reduce_scatter(shm tiles)");
        if (algo == UCX_ALGO_DIRECT) {
            r->step = step_reduce_scatter_direct;
            r->algo = "reduce_scatter(direct)";
            TRY(ops_reserve(r, 2 * (n - 1)));
            return scratch_get(r, r->bytes * (size_t)n);
        }
        r->step = step_ring;
        r->algo = "reduce_scatter(ring)";
        return ring_setup(r);
    case MSR_COLL_ALLGATHER:
        if (algo == UCX_ALGO_SHM)
            return shm_tiled_start(r, "allgather(shm tiles)");
        TRY(ops_reserve(r, 2 * (n - 1)));
        if (algo == UCX_ALGO_DIRECT) {
            r->step = step_allgather_direct;
            r->algo = "allgather(direct)";
        } else {
            r->step = step_allgather_ring;
            r->algo = "allgather(ring)";
        }
        return MSR_OK;
    case MSR_COLL_BROADCAST:
        if (algo == UCX_ALGO_SHM)
            return shm_tiled_start(r, "broadcast(shm tiles)");
        if (algo == UCX_ALGO_CHAIN) {
            r->step = step_bcast_chain;
            r->algo = "broadcast(chain)";
            return chain_setup(r, 0);
        }
        r->step = step_bcast_binomial;
        r->algo = "broadcast(binomial)";
        return ops_reserve(r, 64);
    case MSR_COLL_REDUCE:
        if (algo == UCX_ALGO_SHM)
            return shm_tiled_start(r, "reduce(shm tiles)");
        if (algo == UCX_ALGO_CHAIN) {
            r->step = step_reduce_chain;
            r->algo = "reduce(chain)";
            return chain_setup(r, 1);
        }
        r->step = step_reduce_binomial;
        r->algo = "reduce(binomial)";
        TRY(ops_reserve(r, 2));
        return scratch_get(r, r->vr == 0 ? r->bytes : 2 * r->bytes);
    default:
        return MSR_ERR_INTERNAL;
    }
}
