/* The messages and memory of a UCX collective request: tagged sends and
 * receives posted into the request's op slots (a failure turned into a
 * status and a sentence in the request), testing and waiting for them, room
 * for more slots, and the request's scratch (inline, the communicator's
 * cached block, or allocated). The algorithms over UCX (coll_*.c, hier*.c)
 * post through these alone. */
#include <stdio.h>

#include "base/alloc.h"
#include "comm/ucx/coll_impl.h"

/* ---- messages ---- */

/* A failed send or receive's status, and its sentence in the request
 * (peer -1: a receive from any source whose sender is unknown). */
static msr_status_t map_ucs(ucx_req_t *r, ucs_status_t s, const char *what, int peer)
{
    msr_status_t st;
    switch (s) {
    case UCS_OK:
        return MSR_OK;
    case UCS_ERR_MESSAGE_TRUNCATED:
        st = MSR_ERR_TRUNCATED;
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
        /* UCX may have let go of the endpoint its messages name (the drain
         * at close leaves them alone) */
        if (peer >= 0 && s != UCS_ERR_CANCELED)
            r->uc->peer[peer]->broke = 1;
        break;
    }
    /* This engine never cancels an operation it still tests (a request
     * that fails orphans its handles first): UCX ended it because the
     * connection under it closed (the peer closed it, or failed), so the
     * peer is lost to it. */
    const char *how =
        s == UCS_ERR_CANCELED ? "ended by UCX, the connection closed" : ucs_status_string(s);
    if (peer < 0)
        snprintf(r->pub.error, sizeof r->pub.error, "%s: %s from any rank: %s", r->algo, what, how);
    else
        snprintf(r->pub.error, sizeof r->pub.error, "%s: %s with rank %d (job rank %d): %s",
                 r->algo, what, peer, r->uc->peer[peer]->world_rank, how);
    return st;
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
        /* A member whose own engine went, because the communicator broke
         * on it, cannot be reached: the notice that broke it, where it
         * came, says why (the same on every member), not this. */
        msr_status_t st = ucx_comm_take_notices(r->uc);
        if (st != MSR_OK)
            return st;
        snprintf(r->pub.error, sizeof r->pub.error, "%s: cannot connect to rank %d (job rank %d)",
                 r->algo, peer, p->world_rank);
        return MSR_ERR_BACKEND;
    }
    return MSR_OK;
}

static uint64_t coll_low(const ucx_req_t *r, unsigned phase)
{
    return ((uint64_t)r->seq << 6) | (phase & (UCX_TAG_PHASES - 1));
}

/* A receive whose message was not the length of its buffer: the error
 * names the sender and both sizes. UCX tells a longer message's length in
 * the receive's information (the eager header's or the rendezvous
 * request's total); got <= want there means it did not. */
static msr_status_t length_error(ucx_req_t *r, int peer, size_t got, size_t want, int longer)
{
    if (longer && got <= want)
        snprintf(r->pub.error, sizeof r->pub.error,
                 "%s: the message from rank %d is longer than the buffer's %zu bytes", r->algo,
                 peer, want);
    else if (longer)
        snprintf(r->pub.error, sizeof r->pub.error,
                 "%s: the message from rank %d has %zu bytes, more than the buffer's %zu", r->algo,
                 peer, got, want);
    else
        snprintf(r->pub.error, sizeof r->pub.error,
                 "%s: the message from rank %d has %zu bytes, fewer than the %zu expected", r->algo,
                 peer, got, want);
    return MSR_ERR_TRUNCATED;
}

msr_status_t ucx_op_send_tag(ucx_req_t *r, ucx_op_t *op, int peer, const void *buf, size_t len,
                             uint64_t tag)
{
    ucp_ep_h ep;
    op->h = NULL;
    op->recv = 0;
    op->peer = peer;
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

msr_status_t ucx_op_recv_tag(ucx_req_t *r, ucx_op_t *op, int peer, void *buf, size_t len,
                             uint64_t tag)
{
    op->h = NULL;
    op->recv = 1;
    op->len = len;
    op->sender_tag = 0;
    op->peer = peer;
    if (peer >= 0 && r->uc->peer[peer]->dead) {
        snprintf(r->pub.error, sizeof r->pub.error, "%s: rank %d is lost", r->algo, peer);
        return MSR_ERR_PEER_LOST;
    }
    /* A receive that completes at once (a message already there) tells
     * neither its length nor its sender: UCX 1.13 fills no
     * UCP_OP_ATTR_FIELD_RECV_INFO then, and ends a message longer than the
     * buffer with a bare UCS_ERR_MESSAGE_TRUNCATED. So the receives of
     * point to point, whose lengths are the user's to get wrong, and those
     * from any source, which must learn the sender, always get a request
     * and read both from it. A lost member breaks the communicator, which
     * fails the receives from any source too. */
    int p2p = (tag >> 62) == UCX_TAG_P2P;
    ucp_request_param_t prm = {.op_attr_mask =
                                   peer >= 0 && !p2p ? 0u : (uint32_t)UCP_OP_ATTR_FLAG_NO_IMM_CMPL};
    void *h = ucp_tag_recv_nbx(r->uc->engine->worker, buf, len, tag,
                               peer >= 0 ? UCX_TAG_MASK_FULL : UCX_TAG_MASK_ANY_SRC, &prm);
    if (UCS_PTR_IS_ERR(h) && UCS_PTR_STATUS(h) == UCS_ERR_MESSAGE_TRUNCATED)
        return length_error(r, peer, 0, len, 1);
    if (UCS_PTR_IS_ERR(h))
        return map_ucs(r, UCS_PTR_STATUS(h), "receive", peer);
    op->h = h;
    return MSR_OK;
}

msr_status_t ucx_op_send(ucx_req_t *r, ucx_op_t *op, int peer, const void *buf, size_t len,
                         unsigned phase)
{
    return ucx_op_send_tag(r, op, peer, buf, len,
                           ucx_tag(UCX_TAG_COLL, r->uc->id, r->me, coll_low(r, phase)));
}

msr_status_t ucx_op_recv(ucx_req_t *r, ucx_op_t *op, int peer, void *buf, size_t len,
                         unsigned phase)
{
    return ucx_op_recv_tag(r, op, peer, buf, len,
                           ucx_tag(UCX_TAG_COLL, r->uc->id, peer, coll_low(r, phase)));
}

/* 1 once op is finished (r->err says how), 0 while it runs. */
int ucx_op_test(ucx_req_t *r, ucx_op_t *op)
{
    if (op->h == NULL)
        return 1;
    ucs_status_t s;
    ucp_tag_recv_info_t info = {.length = op->len};
    if (op->recv)
        s = ucp_tag_recv_request_test(op->h, &info);
    else
        s = ucp_request_check_status(op->h);
    if (s == UCS_INPROGRESS)
        return 0;
    ucp_request_free(op->h);
    op->h = NULL;
    /* a message matched (whole or cut): its tag names the sender */
    int peer = op->peer;
    if (op->recv && (s == UCS_OK || s == UCS_ERR_MESSAGE_TRUNCATED)) {
        op->sender_tag = info.sender_tag;
        if (peer < 0)
            peer = ucx_tag_src(info.sender_tag);
    }
    if (r->err != MSR_OK)
        return 1;
    if (op->recv && s == UCS_ERR_MESSAGE_TRUNCATED)
        r->err = length_error(r, peer, info.length, op->len, 1);
    else if (s != UCS_OK)
        r->err = map_ucs(r, s, op->recv ? "receive" : "send", peer);
    else if (op->recv && info.length != op->len)
        r->err = length_error(r, peer, info.length, op->len, 0);
    return 1;
}

/* 1 when every posted op is finished (or one failed). */
static int ops_done(ucx_req_t *r)
{
    int all = 1;
    for (int i = 0; i < r->nops; i++)
        if (!ucx_op_test(r, &r->ops[i]))
            all = 0;
    if (r->err != MSR_OK)
        return 1;
    if (all)
        r->nops = 0;
    return all;
}

/* MSR_OK once every operation posted so far is finished, MSR_IN_PROGRESS
 * while one runs, or the failure of one. */
msr_status_t ucx_ops_wait(ucx_req_t *r)
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

msr_status_t ucx_ops_reserve(ucx_req_t *r, int n)
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

msr_status_t ucx_scratch_get(ucx_req_t *r, size_t len)
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
