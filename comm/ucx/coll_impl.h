/* What the pieces of the UCX collectives share (coll.c chooses and starts,
 * coll_ops.c posts and waits, coll_rounds.c, coll_ring.c and coll_rooted.c
 * hold the algorithms): the geometry helpers, the segment pipeline's
 * interface and the step functions. Private to comm/ucx; the step functions'
 * contract is ucx_step_fn's (ucx_impl.h). */
#ifndef MSRUN_COMM_UCX_COLL_IMPL_H
#define MSRUN_COMM_UCX_COLL_IMPL_H

#include <stdint.h>

#include "comm/ucx/ucx_impl.h"

/* ---- ops (coll_ops.c) ---- */

/* MSR_OK once every operation posted so far is finished, MSR_IN_PROGRESS
 * while one runs, or the failure of one. */
msr_status_t ucx_ops_wait(ucx_req_t *r);
/* A message to or from rank peer of r's group with a whole tag of the
 * caller's (point to point), posted into op; a receive with peer
 * MSR_COMM_PEER_ANY matches the tag from any sender (op->sender_tag says
 * whose once it finished). */
msr_status_t ucx_op_send_tag(ucx_req_t *r, ucx_op_t *op, int peer, const void *buf, size_t len,
                             uint64_t tag);
msr_status_t ucx_op_recv_tag(ucx_req_t *r, ucx_op_t *op, int peer, void *buf, size_t len,
                             uint64_t tag);
/* The next free op slot of r (room reserved by ucx_ops_reserve). */
static inline ucx_op_t *ucx_next_op(ucx_req_t *r)
{
    return &r->ops[r->nops++];
}

/* ---- geometry ---- */

/* a mod n for a in (-2n, 2n) without a division (the common case), else
 * with one. */
static inline int ucx_mod(int64_t a, int n)
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

static inline char *ucx_at(const void *p, uint64_t elems, size_t es)
{
    return (char *)p + elems * es;
}

static inline uint64_t ucx_nsegments(uint64_t elems, size_t es, size_t segment)
{
    uint64_t bytes = elems * es;
    uint64_t n = (bytes + segment - 1) / (segment ? segment : 1);
    if (n == 0)
        n = 1;
    if (n > elems && elems > 0)
        n = elems;
    return n;
}

/* ---- segment pipelines: one loop for the ring and the chains ---- */

/* What a segment pipeline moves: its receives come from one peer and its
 * sends go to another, each a unit (segment) of a stream; send i is ready
 * once i < first_sends + the receives processed (first_sends: the units
 * whose data is this rank's own). The kind names each unit's buffer and
 * processes one that arrived (a reduction, or nothing). */
typedef struct ucx_pipe_kind {
    void *(*recv_buf)(ucx_req_t *r, uint64_t i, uint64_t *len);
    const void *(*send_buf)(ucx_req_t *r, uint64_t i, uint64_t *len);
    void (*arrived)(ucx_req_t *r, uint64_t i); /* NULL: nothing to do */
} ucx_pipe_kind_t;

typedef struct ucx_pipe_flow {
    int from, to;                       /* the peers */
    uint64_t recvs, sends, first_sends; /* units */
} ucx_pipe_flow_t;

/* Sizes p's windows from the tuning and readies its ops (the slots are
 * the caller's: slot_bytes). */
msr_status_t ucx_pipe_setup(ucx_req_t *r, ucx_pipe_t *p);
/* Advances a pipeline as far as it goes without waiting. */
msr_status_t ucx_pipe_step(ucx_req_t *r, ucx_pipe_t *p, const ucx_pipe_kind_t *k,
                           const ucx_pipe_flow_t *f);
/* Receive slot i of p's window, in scratch. */
char *ucx_pipe_slot(const ucx_req_t *r, const ucx_pipe_t *p, uint64_t i);

/* ---- the step functions ---- */

/* coll_rounds.c: the barrier, point to point, the direct exchange,
 * recursive doubling and alltoall(v) */
msr_status_t ucx_step_barrier(ucx_req_t *r);
msr_status_t ucx_step_send(ucx_req_t *r);
msr_status_t ucx_step_recv(ucx_req_t *r);
msr_status_t ucx_step_allreduce_direct(ucx_req_t *r);
msr_status_t ucx_step_reduce_scatter_direct(ucx_req_t *r);
msr_status_t ucx_step_allgather_direct(ucx_req_t *r);
msr_status_t ucx_step_allreduce_rd(ucx_req_t *r);
msr_status_t ucx_step_alltoall(ucx_req_t *r);

/* coll_ring.c: the pipelined ring of allreduce and reduce-scatter (its
 * setup sizes the pipeline and takes the scratch), and allgather's ring */
msr_status_t ucx_ring_setup(ucx_req_t *r);
msr_status_t ucx_step_ring(ucx_req_t *r);
msr_status_t ucx_step_allgather_ring(ucx_req_t *r);

/* coll_rooted.c: broadcast and reduce, by binomial tree or chain */
msr_status_t ucx_step_bcast_binomial(ucx_req_t *r);
msr_status_t ucx_step_bcast_chain(ucx_req_t *r);
msr_status_t ucx_step_reduce_binomial(ucx_req_t *r);
msr_status_t ucx_step_reduce_chain(ucx_req_t *r);

#endif
