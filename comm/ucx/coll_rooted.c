/* The rooted UCX collectives, broadcast and reduce, each by a binomial
 * tree (small vectors) or a pipelined chain of segments (large ones, over
 * coll_ring.c's segment pipeline). Ranks are taken relative to the root
 * (vr); the reduce folds in an order fixed by the ranks. */
#include <string.h>

#include "comm/reduce.h"
#include "comm/ucx/coll_impl.h"

/* ---- broadcast ---- */

static int vreal(const ucx_req_t *r, int vr)
{
    return ucx_mod(vr + r->pub.args.root, r->n);
}

msr_status_t ucx_step_bcast_binomial(ucx_req_t *r)
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
        st = ucx_op_recv(r, ucx_next_op(r), vreal(r, t->vr - t->mask), a->recvbuf, r->bytes, 0);
        if (st != MSR_OK)
            return st;
        t->phase = UCX_TREE_FROM_PARENT;
    from_parent:
        st = ucx_ops_wait(r);
        if (st != MSR_OK)
            return st;
    }
    /* the children: vr plus each lower bit */
    for (t->mask >>= 1; t->mask > 0; t->mask >>= 1) {
        if (t->vr + t->mask < r->n) {
            st = ucx_op_send(r, ucx_next_op(r), vreal(r, t->vr + t->mask), a->recvbuf, r->bytes, 0);
            if (st != MSR_OK)
                return st;
        }
    }
    t->phase = UCX_TREE_TO_CHILDREN;
to_children:
    return ucx_ops_wait(r);
}

/* Chain vr 0 -> 1 -> ... -> n-1 in segments, received straight into place
 * and passed on as they arrive. */
static void *bcast_chain_buf(ucx_req_t *r, uint64_t i, uint64_t *len)
{
    uint64_t off;
    ucx_part(r->pub.args.count, r->chain.pipe.nseg, i, &off, len);
    return ucx_at(r->pub.args.recvbuf, off, r->es);
}

static const void *bcast_chain_send_buf(ucx_req_t *r, uint64_t i, uint64_t *len)
{
    return bcast_chain_buf(r, i, len);
}

msr_status_t ucx_step_bcast_chain(ucx_req_t *r)
{
    static const ucx_pipe_kind_t kind = {bcast_chain_buf, bcast_chain_send_buf, NULL};
    ucx_chain_t *c = &r->chain;
    const uint64_t nseg = c->pipe.nseg;
    const int first = c->vr == 0, last = c->vr == r->n - 1;
    ucx_pipe_flow_t f = {vreal(r, c->vr - 1), vreal(r, c->vr + 1), first ? 0 : nseg,
                         last ? 0 : nseg, first ? nseg : 0};
    return ucx_pipe_step(r, &c->pipe, &kind, &f);
}

/* ---- reduce ---- */

msr_status_t ucx_step_reduce_binomial(ucx_req_t *r)
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
            st = ucx_op_send(r, ucx_next_op(r), vreal(r, t->vr - t->mask), acc, r->bytes, 0);
            if (st != MSR_OK)
                return st;
            t->phase = UCX_TREE_TO_PARENT;
        to_parent:
            return ucx_ops_wait(r);
        }
        if (t->vr + t->mask < r->n) {
            st = ucx_op_recv(r, ucx_next_op(r), vreal(r, t->vr + t->mask), tmp, r->bytes, 0);
            if (st != MSR_OK)
                return st;
            t->phase = UCX_TREE_FROM_CHILD;
        from_child:
            st = ucx_ops_wait(r);
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
    return ucx_pipe_slot(r, &r->chain.pipe, i);
}

static const void *reduce_chain_send_buf(ucx_req_t *r, uint64_t i, uint64_t *len)
{
    const msr_coll_args_t *a = &r->pub.args;
    uint64_t off;
    ucx_part(a->count, r->chain.pipe.nseg, i, &off, len);
    const int leaf = r->chain.vr == r->n - 1;
    return leaf ? ucx_at(a->sendbuf, off, r->es) : ucx_at(reduce_chain_partial(r), off, r->es);
}

static void reduce_chain_arrived(ucx_req_t *r, uint64_t i)
{
    const msr_coll_args_t *a = &r->pub.args;
    uint64_t off, len;
    ucx_part(a->count, r->chain.pipe.nseg, i, &off, &len);
    char *partial = ucx_at(reduce_chain_partial(r), off, r->es);
    msr_reduce(a->op, a->dtype, partial, ucx_at(a->sendbuf, off, r->es),
               ucx_pipe_slot(r, &r->chain.pipe, i), len);
    if (r->chain.vr == 0)
        msr_reduce_finish(a->op, a->dtype, partial, len, r->n);
}

msr_status_t ucx_step_reduce_chain(ucx_req_t *r)
{
    static const ucx_pipe_kind_t kind = {reduce_chain_recv_buf, reduce_chain_send_buf,
                                         reduce_chain_arrived};
    ucx_chain_t *c = &r->chain;
    const uint64_t nseg = c->pipe.nseg;
    const int root = c->vr == 0, leaf = c->vr == r->n - 1;
    ucx_pipe_flow_t f = {vreal(r, c->vr + 1), vreal(r, c->vr - 1), leaf ? 0 : nseg, root ? 0 : nseg,
                         leaf ? nseg : 0};
    return ucx_pipe_step(r, &c->pipe, &kind, &f);
}
