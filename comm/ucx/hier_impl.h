/* The state of the two-level collectives (hier*.c): the group's layout by
 * node, one operation's state, and the helpers the pieces share (hier.c).
 * Private to comm/ucx. */
#ifndef MSRUN_COMM_UCX_HIER_IMPL_H
#define MSRUN_COMM_UCX_HIER_IMPL_H

#include <stdint.h>

#include "comm/ucx/ucx_impl.h"

#define UCX_HIER_MAX_SEGS (UCX_TAG_PHASES / 2)

struct ucx_hier {
    msr_comm_t *local; /* this node's members, in group rank order */
    int nnodes, node;  /* nodes (by ascending node id), this rank's */
    int local_rank, k; /* in the node, and the node's members */
    int *node_first;   /* nnodes + 1: node m's members are by_node[node_first[m] ..] */
    int *by_node;      /* group ranks, by node, then by rank */
    int *kvals, nk;    /* the distinct members-per-node counts */
    int *node_of;      /* n: each member's node */
    int *lidx;         /* n: each member's place in its node */
};

/* One operation's state: the sub-operations on the node's group, the
 * vector the levels run on, the segments. */
typedef struct ucx_hier_op {
    ucx_req_t rs, ag;  /* shared-memory steps (k > 1) */
    char *full;        /* count elements: the result (recvbuf or scratch) */
    const char *input; /* this rank's input, count elements */
    uint64_t count;
    msr_dtype_t dt;          /* the parent's; u8 for a broadcast or an allgather */
    size_t es;               /* bytes of dt */
    msr_op_t op;             /* the parent's: AVG folds as SUM, finished at the end */
    uint64_t my_off, my_len; /* this rank's part of full */
    uint64_t bounds[UCX_HIER_MAX_SEGS + 1];
    int nseg;
    /* the exchange between nodes: our part's segments cut into units */
    struct hier_unit *units;
    uint64_t nunits;
    int window;   /* units in flight */
    int per_unit; /* their ops: 4 (nnodes - 1) */
    char *area;   /* the nodes' partials: per unit, nnodes pieces */
    /* reduce-scatter and allgather: blocks routed through one member per
     * node (route_*) */
    int *blocks;   /* the blocks this rank relays (allgather) or folds (reduce-scatter) */
    int *block_op; /* allgather: the op receiving each */
    int nblocks, cursor;
    int first_fwd;            /* allgather: ops from here forward the relayed blocks */
    int first_part;           /* reduce-scatter: ops from here send our partials */
    int first_cross;          /* ... and from here receive the other nodes' partials of ours */
    int first_contrib;        /* ... and from here receive contributions to the blocks we fold */
    int nchunks, done_chunks; /* ... chunks of a block, and of ours folded */
    char *slots;              /* reduce-scatter: contributions, partials, the nodes' partials */
    const char **pieces;      /* ... what one fold adds up: max(k, nnodes) */
    int *order;               /* ... the blocks in the order this node takes them */
    size_t slot;              /* bytes of a slot (reduce: of a unit coming down the chain) */
    /* broadcast and reduce: the chain of nodes from the root's */
    int vnode; /* this node's place in it: 0 the root's */
} ucx_hier_op_t;

/* Unit of the exchange: elements [off, off + len) of full, chunk c of
 * segment t; sub-piece m (ucx_part over the nodes) is folded on node m. */
typedef struct hier_unit {
    int t;
    uint64_t off, len;
    size_t area; /* bytes into area: the other nodes' partials of our sub-piece */
} hier_unit_t;

/* The units of a segment: at least HIER_MIN_UNITS while a message stays
 * over HIER_MIN_MSG bytes (hier.c's allreduce, hier_chain.c's chain). */
#define HIER_MIN_UNITS 8
#define HIER_MIN_MSG   16384

/* ---- shared by the pieces (hier.c) ---- */

/* The segments of count elements: every part boundary of every node's
 * members-per-node count, ascending, without repeats. */
void ucx_hier_segments(const struct ucx_hier *h, ucx_hier_op_t *x);
/* The group rank that holds segment t's elements on node m. */
int ucx_hier_seg_owner(const struct ucx_hier *h, const ucx_hier_op_t *x, int t, int m);
/* Whether segment t is in this rank's part. */
int ucx_hier_seg_mine(const ucx_hier_op_t *x, int t);
/* A shared-memory sub-operation on the node's group, numbered now; sub_init
 * with root 0. */
void ucx_hier_sub_init_root(ucx_req_t *r, ucx_req_t *s, msr_coll_t coll, const void *send,
                            void *recv, int in_place, int root);
void ucx_hier_sub_init(ucx_req_t *r, ucx_req_t *s, msr_coll_t coll, const void *send, void *recv,
                       int in_place);
/* Whether r is counted among the engine's shared-memory operations. */
void ucx_hier_shm_count(ucx_req_t *r, int on);
/* Room for n ops, all idle and all counted in r->nops. */
msr_status_t ucx_hier_ops_idle(ucx_req_t *r, int n);
/* Whether ops[first + j * stride] for j in [0, count) are finished. */
int ucx_hier_ops_finished(ucx_req_t *r, int first, int stride, int count);

/* ---- the operations' starts (each sets r->step) ---- */

/* hier_route.c: allgather and reduce-scatter, blocks routed through the
 * nodes */
msr_status_t ucx_hier_route_ag_start(ucx_req_t *r);
msr_status_t ucx_hier_route_rs_start(ucx_req_t *r);
/* hier_chain.c: broadcast and reduce, a chain of nodes */
msr_status_t ucx_hier_chain_start(ucx_req_t *r);

#endif
