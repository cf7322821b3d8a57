/* Collectives in two levels for a group whose members span nodes: inside
 * each node through the node-local sub-group's shared-memory tiles, between
 * nodes over UCX with every local rank carrying its own shard at once.
 * Reduce-scatter and allgather route blocks instead (below), broadcast and
 * reduce run a chain of nodes (below). The allreduce of count elements:
 *
 *   1. reduce-scatter inside the node: the node's k members cut the vector
 *      into k balanced parts (ucx_part); local rank q gets the node's
 *      partial result of part q (the tiles fold the members in local rank
 *      order);
 *   2. across the nodes: the vector is cut at every part boundary of every
 *      node's count (uneven nodes cut it differently), so that each segment
 *      lies in one part on every node, owned there by one local rank. The
 *      owners of a segment (one per node) reduce-scatter it among
 *      themselves directly: segment t's sub-piece m (ucx_part over the N
 *      nodes) goes from every owner to node m's, which folds the nodes'
 *      partials in node order 0 .. N-1; then each sends its folded sub-piece
 *      to the others (allgather). Each node sends and receives 2(N-1)/N of
 *      the vector, spread over all its local ranks;
 *   3. allgather inside the node: every member gets every part.
 *
 * Fold order, and so the bits: for every element, the nodes' partials in
 * node order (nodes numbered by ascending node id), each the node's members
 * in local rank order (ascending group rank). Every element is folded by one
 * rank and copied to the others, so every rank gets the same bits. MSR_OP_AVG
 * sums at both levels and divides once at the end by the group's size.
 *
 * A node with one member skips the shared-memory steps. The segment of a
 * message names its tag's phase (2t, 2t + 1), and there are at most as many
 * segments as the distinct members-per-node counts add up to: a group where
 * that is more than UCX_HIER_MAX_SEGS runs the flat algorithms. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "comm/reduce.h"
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

/* ---- the sub-groups ---- */

static int int_cmp(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return a < b ? -1 : a > b;
}

void ucx_hier_free(ucx_comm_t *uc)
{
    struct ucx_hier *h = uc->hier;
    if (h == NULL)
        return;
    msr_comm_destroy(h->local);
    msr_free(h->node_first);
    msr_free(h->by_node);
    msr_free(h->kvals);
    msr_free(h->node_of);
    msr_free(h->lidx);
    msr_free(h);
    uc->hier = NULL;
}

/* Orders the members by node: the answer every member computes alike. */
static msr_status_t hier_layout(ucx_comm_t *uc, struct ucx_hier *h)
{
    int n = uc->comm->size, me = uc->comm->rank;
    int *ids = msr_calloc((size_t)n, sizeof *ids);
    h->by_node = msr_calloc((size_t)n, sizeof *h->by_node);
    h->node_first = msr_calloc((size_t)n + 1, sizeof *h->node_first);
    h->kvals = msr_calloc((size_t)n, sizeof *h->kvals);
    h->node_of = msr_calloc((size_t)n, sizeof *h->node_of);
    h->lidx = msr_calloc((size_t)n, sizeof *h->lidx);
    if (ids == NULL || h->by_node == NULL || h->node_first == NULL || h->kvals == NULL ||
        h->node_of == NULL || h->lidx == NULL) {
        msr_free(ids);
        return MSR_ERR_NO_MEMORY;
    }
    for (int i = 0; i < n; i++)
        ids[i] = uc->peer[i]->node;
    qsort(ids, (size_t)n, sizeof *ids, int_cmp);
    int nn = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || ids[i] != ids[i - 1])
            ids[nn++] = ids[i];
    h->nnodes = nn;
    int pos = 0;
    for (int m = 0; m < nn; m++) {
        h->node_first[m] = pos;
        for (int i = 0; i < n; i++) {
            if (uc->peer[i]->node != ids[m])
                continue;
            if (i == me) {
                h->node = m;
                h->local_rank = pos - h->node_first[m];
            }
            h->node_of[i] = m;
            h->lidx[i] = pos - h->node_first[m];
            h->by_node[pos++] = i;
        }
        int k = pos - h->node_first[m], seen = 0;
        for (int j = 0; j < h->nk; j++)
            seen |= h->kvals[j] == k;
        if (!seen)
            h->kvals[h->nk++] = k;
    }
    h->node_first[nn] = pos;
    h->k = h->node_first[h->node + 1] - h->node_first[h->node];
    msr_free(ids);
    return MSR_OK;
}

msr_status_t ucx_hier_setup(ucx_comm_t *uc,
                            msr_status_t (*split)(msr_comm_t *comm, int color, int key,
                                                  unsigned flags, msr_comm_t **newcomm_p))
{
    msr_comm_t *comm = uc->comm;
    uc->hier = NULL;
    if (comm->size < 3 || uc->shm != NULL || !uc->tune.hier)
        return MSR_OK;
    /* The same answer on every member: all on one node (whose segment then
     * failed: nothing to gain), or every node one member. */
    int multi = 0, paired = 0;
    for (int i = 0; i < comm->size; i++) {
        multi |= uc->peer[i]->node != uc->peer[0]->node;
        for (int j = 0; j < i && !paired; j++)
            paired = uc->peer[i]->node == uc->peer[j]->node;
    }
    if (!multi || !paired)
        return MSR_OK;
    struct ucx_hier *h = msr_calloc(1, sizeof *h);
    msr_status_t st = h == NULL ? MSR_ERR_NO_MEMORY : hier_layout(uc, h);
    int32_t ok = st == MSR_OK;
    int sum = 0;
    for (int j = 0; ok && j < h->nk; j++)
        sum += h->kvals[j];
    ok = ok && sum <= UCX_HIER_MAX_SEGS;
    /* collective from here: every member splits, whatever its ok */
    msr_comm_t *local = NULL;
    msr_status_t sst = split(comm, uc->peer[comm->rank]->node, comm->rank, 0, &local);
    if (h != NULL)
        h->local = local;
    else
        msr_comm_destroy(local);
    if (sst != MSR_OK) {
        ucx_comm_t tmp = {.hier = h};
        ucx_hier_free(&tmp);
        return sst;
    }
    if (ok && h->k > 1) {
        ucx_comm_t *lc = h->local->be;
        ok = lc->shm != NULL && lc->shm_tile != 0;
    }
    int32_t all = 0;
    st = msr_comm_allreduce(comm, &ok, &all, 1, MSR_DTYPE_I32, MSR_OP_MIN);
    if (st != MSR_OK || !all) {
        if (h != NULL) {
            ucx_comm_t tmp = {.hier = h};
            ucx_hier_free(&tmp);
        }
        return st;
    }
    uc->hier = h;
    MSR_DEBUG("comm %u: %d nodes%s, %d of %d members on this one: two levels", uc->id, h->nnodes,
              uc->one_host ? " on this machine" : "", h->k, comm->size);
    return MSR_OK;
}

/* ---- an operation ---- */

int ucx_hier_nodes(const ucx_comm_t *uc)
{
    return uc->hier ? uc->hier->nnodes : 0;
}

int ucx_hier_fits(const ucx_req_t *r)
{
    msr_coll_t c = r->pub.args.coll;
    return r->uc->hier != NULL && r->pub.args.count > 0 &&
           (c == MSR_COLL_ALLREDUCE || c == MSR_COLL_REDUCE_SCATTER || c == MSR_COLL_REDUCE ||
            c == MSR_COLL_ALLGATHER || c == MSR_COLL_BROADCAST);
}

/* The segments of count elements: every part boundary of every node's
 * members-per-node count, ascending, without repeats. */
static void hier_segments(const struct ucx_hier *h, ucx_hier_op_t *x)
{
    uint64_t off, len;
    int nb = 0;
    for (int j = 0; j < h->nk; j++)
        for (int q = 0; q < h->kvals[j]; q++) {
            ucx_part(x->count, (uint64_t)h->kvals[j], (uint64_t)q, &off, &len);
            x->bounds[nb++] = off;
        }
    /* insertion sort: at most UCX_HIER_MAX_SEGS */
    for (int i = 1; i < nb; i++)
        for (int j = i; j > 0 && x->bounds[j - 1] > x->bounds[j]; j--) {
            uint64_t t = x->bounds[j];
            x->bounds[j] = x->bounds[j - 1];
            x->bounds[j - 1] = t;
        }
    int u = 0;
    for (int i = 0; i < nb; i++)
        if (x->bounds[i] < x->count && (u == 0 || x->bounds[i] != x->bounds[u - 1]))
            x->bounds[u++] = x->bounds[i];
    x->bounds[u] = x->count;
    x->nseg = u;
}

/* The group rank that holds segment t's elements on node m: the part of
 * node m's count containing the segment's first element. */
static int seg_owner(const struct ucx_hier *h, const ucx_hier_op_t *x, int t, int m)
{
    uint64_t k = (uint64_t)(h->node_first[m + 1] - h->node_first[m]);
    uint64_t base = x->count / k, extra = x->count % k, e = x->bounds[t];
    uint64_t q = e < extra * (base + 1) ? e / (base + 1) : extra + (e - extra * (base + 1)) / base;
    return h->by_node[h->node_first[m] + (int)q];
}

/* Whether segment t is in this rank's part. */
static int seg_mine(const ucx_hier_op_t *x, int t)
{
    return x->bounds[t] >= x->my_off && x->bounds[t] < x->my_off + x->my_len;
}

/* A shared-memory sub-operation on the node's group, numbered now (every
 * member starts the parent's operations in the same order). */
static void sub_init_root(ucx_req_t *r, ucx_req_t *s, msr_coll_t coll, const void *send, void *recv,
                          int in_place, int root)
{
    const struct ucx_hier *h = r->uc->hier;
    ucx_hier_op_t *x = r->hier_op;
    ucx_comm_t *lc = h->local->be;
    memset(s, 0, sizeof *s);
    s->uc = lc;
    s->algo = r->algo;
    s->n = h->k;
    s->me = h->local_rank;
    s->es = x->es;
    s->pub.comm = h->local;
    s->pub.status = MSR_IN_PROGRESS;
    s->pub.args = (msr_coll_args_t){
        .coll = coll,
        .sendbuf = send,
        .recvbuf = recv,
        .count = (x->count + (uint64_t)h->k - 1) / (uint64_t)h->k,
        .dtype = x->dt,
        .op = x->op == MSR_OP_AVG ? MSR_OP_SUM : x->op,
        .root = root,
        .in_place = in_place,
    };
    s->tiles.parts = x->count;
    if (coll == MSR_COLL_BROADCAST) { /* the whole vector from the root */
        s->pub.args.count = x->count;
        s->tiles.parts = 0;
    }
    s->bytes = (size_t)s->pub.args.count * s->es;
    s->tiles.seq = ucx_shm_number(lc);
    ucx_shm_tiled_init(s);
}

/* The parts' reduce-scatter and allgather through the node's tiles. */
static void sub_init(ucx_req_t *r, ucx_req_t *s, msr_coll_t coll, const void *send, void *recv,
                     int in_place)
{
    sub_init_root(r, s, coll, send, recv, in_place, 0);
}

/* Whether r is counted among the engine's shared-memory operations (which
 * keep it polling instead of sleeping on its events). */
static void shm_count(ucx_req_t *r, int on)
{
    if (r->shm != on) {
        r->shm = on;
        r->uc->engine->shm_active += on ? 1 : -1;
    }
}

/* ---- reduce-scatter and allgather: blocks routed through the nodes ----
 *
 * Rank t's block has one agent on every node: the member whose place there
 * is t's place in its own node modulo that node's size (on t's own node, t
 * itself), so the agents of a node's blocks are spread over its members.
 *
 * allgather: every rank sends its block to the members of its node and to
 * its agent on every other node, which passes it on to the members of its
 * node as soon as it is in (in ascending block order, the order its
 * neighbours post their receives in). Every block crosses into each other
 * node once: (N-1)/N of the whole over each node's link.
 *
 * reduce-scatter: every rank sends its input's block t to t's agent on its
 * own node, which folds the node's contributions in place order (the node's
 * members in group rank order) as soon as they are in and sends the node's
 * partial to t; t folds the nodes' partials in node order, as the allreduce
 * does, so the bits are those of the two-level allreduce. Each node's link
 * carries (N-1)/N of the whole.
 *
 * Tag phases: 0 a block (or contribution) to an agent, 1 a rank's own block
 * to its node (allgather) or a node's partial (reduce-scatter), 2 a relayed
 * block (allgather). Between two ranks each phase carries one message, or
 * messages posted in ascending block order on both sides. */

static int agent_of(const struct ucx_hier *h, int m, int t)
{
    int km = h->node_first[m + 1] - h->node_first[m];
    return h->by_node[h->node_first[m] + h->lidx[t] % km];
}

/* Posts op i, the next in the request's list. */
static msr_status_t route_send(ucx_req_t *r, int *i, int peer, const void *buf, size_t len,
                               unsigned phase)
{
    return ucx_op_send(r, &r->ops[(*i)++], peer, buf, len, phase);
}

static msr_status_t route_recv(ucx_req_t *r, int *i, int peer, void *buf, size_t len,
                               unsigned phase)
{
    return ucx_op_recv(r, &r->ops[(*i)++], peer, buf, len, phase);
}

/* Room for n ops, all idle and all counted in r->nops (so that a failed
 * request cancels whichever are posted). */
static msr_status_t ops_idle(ucx_req_t *r, int n)
{
    msr_status_t st = ucx_ops_reserve(r, n > 0 ? n : 1);
    if (st != MSR_OK)
        return st;
    r->nops = n;
    for (int i = 0; i < n; i++)
        r->ops[i].h = NULL;
    return MSR_OK;
}

static msr_status_t route_ag_step(ucx_req_t *r);
static msr_status_t route_rs_step(ucx_req_t *r);

static msr_status_t route_ag_start(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const struct ucx_hier *h = r->uc->hier;
    ucx_hier_op_t *x = r->hier_op;
    int n = r->n, me = r->me, nn = h->nnodes, k = h->k, my = h->node;
    size_t b = r->bytes;
    char *out = a->recvbuf;
    r->algo = "allgather(hier)";
    if (!a->in_place)
        memcpy(out + (size_t)me * b, a->sendbuf, b);
    x->blocks = msr_calloc((size_t)n, sizeof *x->blocks);
    x->block_op = msr_calloc((size_t)n, sizeof *x->block_op);
    if (x->blocks == NULL || x->block_op == NULL)
        return MSR_ERR_NO_MEMORY;
    for (int s = 0; s < n; s++)
        if (h->node_of[s] != my && agent_of(h, my, s) == me)
            x->blocks[x->nblocks++] = s;
    msr_status_t st = ops_idle(r, (n - 1) + (k - 1) + (nn - 1) + x->nblocks * (k - 1));
    int i = 0;
    /* our block: to our node, and to our agent on every other node */
    for (int j = h->node_first[my]; st == MSR_OK && j < h->node_first[my + 1]; j++)
        if (h->by_node[j] != me)
            st = route_send(r, &i, h->by_node[j], out + (size_t)me * b, b, 1);
    for (int m = 0; st == MSR_OK && m < nn; m++)
        if (m != my)
            st = route_send(r, &i, agent_of(h, m, me), out + (size_t)me * b, b, 0);
    /* every other block: from its rank (on our node, or one we relay), or
     * from the member of our node that relays it */
    for (int s = 0, rel = 0; st == MSR_OK && s < n; s++) {
        if (s == me)
            continue;
        char *dst = out + (size_t)s * b;
        if (h->node_of[s] == my) {
            st = route_recv(r, &i, s, dst, b, 1);
        } else if (agent_of(h, my, s) == me) {
            x->block_op[rel++] = i;
            st = route_recv(r, &i, s, dst, b, 0);
        } else {
            st = route_recv(r, &i, agent_of(h, my, s), dst, b, 2);
        }
    }
    x->first_fwd = i;
    r->step = route_ag_step;
    return st;
}

static msr_status_t route_ag_step(ucx_req_t *r)
{
    const struct ucx_hier *h = r->uc->hier;
    ucx_hier_op_t *x = r->hier_op;
    size_t b = r->bytes;
    char *out = r->pub.args.recvbuf;
    int my = h->node;
    while (x->cursor < x->nblocks && ucx_op_test(r, &r->ops[x->block_op[x->cursor]])) {
        if (r->err != MSR_OK)
            return r->err;
        int s = x->blocks[x->cursor], i = x->first_fwd + x->cursor * (h->k - 1);
        for (int j = h->node_first[my]; j < h->node_first[my + 1]; j++) {
            if (h->by_node[j] == r->me)
                continue;
            msr_status_t st = route_send(r, &i, h->by_node[j], out + (size_t)s * b, b, 2);
            if (st != MSR_OK)
                return st;
        }
        x->cursor++;
    }
    int all = 1;
    for (int i = 0; i < r->nops; i++)
        all &= ucx_op_test(r, &r->ops[i]);
    if (r->err != MSR_OK)
        return r->err;
    return all && x->cursor == x->nblocks ? MSR_OK : MSR_IN_PROGRESS;
}

/* reduce-scatter's slots: per block we fold, the k - 1 others'
 * contributions and the node's partial; then the other nodes' partials of
 * ours */
static char *rs_contrib(const ucx_req_t *r, int blk, int j)
{
    const ucx_hier_op_t *x = r->hier_op;
    return x->slots + ((size_t)blk * (size_t)r->uc->hier->k + (size_t)j) * x->slot;
}

static char *rs_partial(const ucx_req_t *r, int blk)
{
    return rs_contrib(r, blk, r->uc->hier->k - 1);
}

static char *rs_node_partial(const ucx_req_t *r, int m)
{
    const ucx_hier_op_t *x = r->hier_op;
    return x->slots + ((size_t)x->nblocks * (size_t)r->uc->hier->k + (size_t)m) * x->slot;
}

/* Folds pieces[0 .. np) in order into dst. */
static void fold_in_order(const ucx_hier_op_t *x, char *dst, const char *const *pieces, int np,
                          uint64_t count)
{
    if (np == 1) {
        if (dst != pieces[0])
            memcpy(dst, pieces[0], (size_t)count * x->es);
        return;
    }
    msr_reduce(x->op, x->dt, dst, pieces[0], pieces[1], count);
    for (int j = 2; j < np; j++)
        msr_reduce(x->op, x->dt, dst, dst, pieces[j], count);
}

/* Chunk c of a block (elements): every message of a reduce-scatter is one
 * chunk of one block, so that the node's fold and the partial's crossing
 * pipeline. */
static void rs_chunk(const ucx_req_t *r, int c, uint64_t *off, uint64_t *len)
{
    ucx_part(r->pub.args.count, (uint64_t)r->hier_op->nchunks, (uint64_t)c, off, len);
}

static msr_status_t route_rs_start(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const struct ucx_hier *h = r->uc->hier;
    ucx_hier_op_t *x = r->hier_op;
    int n = r->n, me = r->me, nn = h->nnodes, k = h->k, my = h->node;
    size_t b = r->bytes, es = r->es;
    const char *in = a->sendbuf;
    r->algo = "reduce_scatter(hier)";
    x->blocks = msr_calloc((size_t)n, sizeof *x->blocks);
    x->pieces = msr_calloc((size_t)(k > nn ? k : nn), sizeof *x->pieces);
    if (x->blocks == NULL || x->pieces == NULL)
        return MSR_ERR_NO_MEMORY;
    /* every rank of the node takes the blocks in one order: the next
     * node's first, this node's last, so that partials cross from the
     * start and the node's own folds fill the time the link takes */
    x->order = msr_calloc((size_t)n, sizeof *x->order);
    if (x->order == NULL)
        return MSR_ERR_NO_MEMORY;
    for (int m = 1, o = 0; m <= nn; m++) {
        int node = (my + m) % nn;
        for (int j = h->node_first[node]; j < h->node_first[node + 1]; j++)
            x->order[o++] = h->by_node[j];
    }
    for (int o = 0; o < n; o++)
        if (agent_of(h, my, x->order[o]) == me)
            x->blocks[x->nblocks++] = x->order[o];
    /* chunks of about hier_chunk bytes, alike on every rank */
    uint64_t chunks = (b + r->uc->tune.hier_chunk - 1) / r->uc->tune.hier_chunk;
    uint64_t cap = (uint64_t)(INT32_MAX / 4) / (uint64_t)(n + 1) / (uint64_t)(k + nn);
    x->nchunks = (int)(chunks < 1 ? 1 : chunks > cap ? cap : chunks);
    int nc = x->nchunks;
    x->slot = (b + 63) / 64 * 64;
    msr_status_t st = ucx_scratch_get(r, ((size_t)x->nblocks * (size_t)k + (size_t)nn) * x->slot);
    if (st != MSR_OK)
        return st;
    x->slots = r->scratch;
    /* sends to the agents, the contributions to ours, our partials out,
     * the other nodes' partials of our block in */
    x->first_contrib = (n - x->nblocks) * nc;
    x->first_part = x->first_contrib + x->nblocks * (k - 1) * nc;
    x->first_cross = x->first_part + (x->nblocks - 1) * nc;
    st = ops_idle(r, x->first_cross + (nn - 1) * nc);
    int i = 0;
    uint64_t off, len;
    /* chunk by chunk, the blocks in order (between two ranks, in the same
     * order on both sides) */
    for (int c = 0; st == MSR_OK && c < nc; c++) {
        rs_chunk(r, c, &off, &len);
        for (int o = 0; st == MSR_OK && o < n; o++) {
            int t = x->order[o], ag = agent_of(h, my, t);
            if (ag != me)
                st = route_send(r, &i, ag, in + (size_t)t * b + off * es, len * es, 0);
        }
    }
    for (int c = 0; st == MSR_OK && c < nc; c++) {
        rs_chunk(r, c, &off, &len);
        for (int blk = 0; st == MSR_OK && blk < x->nblocks; blk++)
            for (int j = 0, slot = 0; st == MSR_OK && j < k; j++) {
                int p = h->by_node[h->node_first[my] + j];
                if (p != me)
                    st = route_recv(r, &i, p, rs_contrib(r, blk, slot++) + off * es, len * es, 0);
            }
    }
    i = x->first_cross;
    for (int c = 0; st == MSR_OK && c < nc; c++) {
        rs_chunk(r, c, &off, &len);
        for (int m = 0; st == MSR_OK && m < nn; m++)
            if (m != my)
                st = route_recv(r, &i, agent_of(h, m, me), rs_node_partial(r, m) + off * es,
                                len * es, 1);
    }
    r->step = route_rs_step;
    return st;
}

/* Whether ops[first + j * stride] for j in [0, count) are finished. */
static int ops_finished(ucx_req_t *r, int first, int stride, int count)
{
    int all = 1;
    for (int j = 0; j < count; j++)
        all &= ucx_op_test(r, &r->ops[first + j * stride]);
    return all;
}

static msr_status_t route_rs_step(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const struct ucx_hier *h = r->uc->hier;
    ucx_hier_op_t *x = r->hier_op;
    int k = h->k, my = h->node, nn = h->nnodes, nc = x->nchunks, me = r->me;
    size_t b = r->bytes, es = r->es;
    const char *in = a->sendbuf;
    uint64_t off, len;
    /* the node's partials of the blocks we fold, chunk by chunk, in block
     * order (cursor: chunk * nblocks + block); ours is the last */
    while (x->cursor < x->nblocks * nc) {
        int c = x->cursor / x->nblocks, blk = x->cursor % x->nblocks, t = x->blocks[blk];
        int done = ops_finished(r, x->first_contrib + x->cursor * (k - 1), 1, k - 1);
        if (r->err != MSR_OK)
            return r->err;
        if (!done)
            break;
        rs_chunk(r, c, &off, &len);
        for (int j = 0, slot = 0; j < k; j++)
            x->pieces[j] = h->by_node[h->node_first[my] + j] == me
                               ? in + (size_t)t * b + off * es
                               : rs_contrib(r, blk, slot++) + off * es;
        char *dst = (t == me ? rs_node_partial(r, my) : rs_partial(r, blk)) + off * es;
        fold_in_order(x, dst, x->pieces, k, len);
        if (t != me) {
            int i = x->first_part + c * (x->nblocks - 1) + blk;
            msr_status_t st = route_send(r, &i, t, dst, len * es, 1);
            if (st != MSR_OK)
                return st;
        }
        x->cursor++;
    }
    /* ours, chunk by chunk once this node's partial and the others' are
     * in: the nodes' partials in node order */
    while (x->done_chunks < nc && x->cursor >= (x->done_chunks + 1) * x->nblocks) {
        int c = x->done_chunks;
        int done = ops_finished(r, x->first_cross + c * (nn - 1), 1, nn - 1);
        if (r->err != MSR_OK)
            return r->err;
        if (!done)
            break;
        rs_chunk(r, c, &off, &len);
        for (int m = 0; m < nn; m++)
            x->pieces[m] = rs_node_partial(r, m) + off * es;
        char *dst = (char *)a->recvbuf + off * es;
        fold_in_order(x, dst, x->pieces, nn, len);
        msr_reduce_finish(x->op, x->dt, dst, len, r->n);
        x->done_chunks++;
    }
    int all = ops_finished(r, 0, 1, r->nops);
    if (r->err != MSR_OK)
        return r->err;
    return all && x->done_chunks == nc ? MSR_OK : MSR_IN_PROGRESS;
}

#define HIER_MIN_UNITS 8
#define HIER_MIN_MSG   16384

/* Units of a segment of len elements. */
static uint64_t seg_units(const ucx_req_t *r, uint64_t len)
{
    const ucx_hier_op_t *x = r->hier_op;
    uint64_t nn = (uint64_t)r->uc->hier->nnodes, bytes = len * x->es;
    uint64_t by_chunk = (bytes + r->uc->tune.hier_chunk * nn - 1) / (r->uc->tune.hier_chunk * nn);
    uint64_t by_min = bytes / (HIER_MIN_MSG * nn);
    if (by_min > HIER_MIN_UNITS)
        by_min = HIER_MIN_UNITS;
    uint64_t u = by_chunk > by_min ? by_chunk : by_min;
    return u < 1 ? 1 : u;
}

/* ---- broadcast and reduce: a chain of nodes ----
 *
 * The nodes in a chain from the root's: node (root's + v) mod N is link v.
 * Each rank carries the segments of its own part, in units of about
 * hier_chunk bytes (at least HIER_MIN_UNITS per hop while a unit stays over
 * HIER_MIN_MSG bytes), window units in flight: a unit's message goes
 * between the segment's owners on neighbouring links (phase 2t), so every
 * node's link carries the vector once, spread over its members.
 *
 * broadcast: the root's node broadcasts through its tiles; each member
 * there sends the units of its part on to link 1 as soon as the tiles have
 * given it them. A member of link v > 0 receives its part's units from link
 * v - 1, passes each on to link v + 1 as it arrives, and the node's
 * allgather through the tiles stages the parts as they are complete.
 *
 * reduce: every node reduce-scatters through its tiles (local rank q gets
 * the node's partial of part q); the last link sends its partials to link
 * N - 2, each link adds its own partial to what comes (its own first) and
 * passes the sum on, and link 0, the root's node, ends with the result,
 * which its allgather through the tiles brings to the root. The fold
 * order, the flat chain's over nodes: P0 + (P1 + (... + P(N-1))), Pv the
 * partial of link v (its members in group rank order); MSR_OP_AVG divides
 * once, at the end. */

/* Units of a segment of len elements, for the chain: at least
 * HIER_MIN_UNITS per hop of the chain (N - 1 hops deep: it fills in as
 * many units and is busy for the rest). */
static uint64_t chain_units(const ucx_req_t *r, uint64_t len)
{
    const ucx_hier_op_t *x = r->hier_op;
    uint64_t bytes = len * x->es, chunk = r->uc->tune.hier_chunk;
    uint64_t by_chunk = (bytes + chunk - 1) / chunk, by_min = bytes / HIER_MIN_MSG;
    uint64_t floor = HIER_MIN_UNITS * (uint64_t)(r->uc->hier->nnodes - 1);
    if (by_min > floor)
        by_min = floor;
    uint64_t u = by_chunk > by_min ? by_chunk : by_min;
    return u < 1 ? 1 : u;
}

/* The owner of segment t on link v of the chain. */
static int chain_owner(const ucx_req_t *r, int t, int v)
{
    const struct ucx_hier *h = r->uc->hier;
    const ucx_hier_op_t *x = r->hier_op;
    int root_node = h->node_of[r->pub.args.root];
    return seg_owner(h, x, t, (root_node + v) % h->nnodes);
}

/* Elements of our part that are final: those of the first n units. */
static uint64_t units_final(const ucx_hier_op_t *x, uint64_t n)
{
    if (n == x->nunits)
        return UINT64_MAX;
    return n == 0 ? 0 : x->units[n - 1].off + x->units[n - 1].len - x->my_off;
}

static msr_status_t bcast_chain_step(ucx_req_t *r);
static msr_status_t reduce_chain_step(ucx_req_t *r);

static msr_status_t chain_start(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const struct ucx_hier *h = r->uc->hier;
    ucx_hier_op_t *x = r->hier_op;
    int nn = h->nnodes, bcast = a->coll == MSR_COLL_BROADCAST;
    x->vnode = (h->node - h->node_of[a->root] + nn) % nn;
    int own_full = 0; /* full is scratch */
    if (bcast) {
        /* bytes: nothing is folded */
        r->algo = "broadcast(hier)";
        x->dt = MSR_DTYPE_U8;
        x->es = 1;
        x->count = r->bytes;
        x->full = a->recvbuf;
        r->step = bcast_chain_step;
    } else {
        r->algo = "reduce(hier)";
        x->count = a->count;
        own_full = r->me != a->root;
        x->full = a->recvbuf;
        r->step = reduce_chain_step;
    }
    hier_segments(h, x);
    ucx_part(x->count, (uint64_t)h->k, (uint64_t)h->local_rank, &x->my_off, &x->my_len);
    for (int t = 0; t < x->nseg; t++)
        if (seg_mine(x, t))
            x->nunits += chain_units(r, x->bounds[t + 1] - x->bounds[t]);
    if (x->nunits > 0) {
        x->units = msr_calloc((size_t)x->nunits, sizeof *x->units);
        if (x->units == NULL)
            return MSR_ERR_NO_MEMORY;
    }
    uint64_t u = 0, most = 0;
    for (int t = 0; t < x->nseg; t++) {
        if (!seg_mine(x, t))
            continue;
        uint64_t slen = x->bounds[t + 1] - x->bounds[t], nc = chain_units(r, slen), coff;
        for (uint64_t c = 0; c < nc; c++, u++) {
            hier_unit_t *un = &x->units[u];
            ucx_part(slen, nc, c, &coff, &un->len);
            un->t = t;
            un->off = x->bounds[t] + coff;
            if (un->len > most)
                most = un->len;
        }
    }
    x->window = r->uc->tune.hier_window;
    if ((uint64_t)x->window > x->nunits)
        x->window = x->nunits > 0 ? (int)x->nunits : 1;
    /* scratch: the vector where it is not the output (reduce), then a slot
     * per unit in flight for what comes down the chain */
    size_t full_bytes = own_full ? ((size_t)x->count * x->es + 63) / 64 * 64 : 0;
    x->slot = !bcast && x->vnode < nn - 1 ? (size_t)most * x->es : 0;
    msr_status_t st = ucx_scratch_get(r, full_bytes + (size_t)x->window * x->slot);
    if (st != MSR_OK)
        return st;
    if (own_full)
        x->full = r->scratch;
    x->area = r->scratch + full_bytes;
    /* per unit in flight: its receive from the link before, its send on */
    x->per_unit = 2;
    st = ops_idle(r, x->window * x->per_unit);
    if (st != MSR_OK)
        return st;
    if (h->k > 1) {
        char *part = x->full + (size_t)x->my_off * x->es;
        if (bcast && x->vnode == 0)
            sub_init_root(r, &x->rs, MSR_COLL_BROADCAST, NULL, x->full, 1, h->lidx[a->root]);
        if (!bcast) /* in place, our part of the input is our part of the output */
            sub_init(r, &x->rs, MSR_COLL_REDUCE_SCATTER, x->input, part, x->input == x->full);
        if (bcast != (x->vnode == 0))
            sub_init(r, &x->ag, MSR_COLL_ALLGATHER, part, x->full, 1);
        shm_count(r, 1);
    }
    return MSR_OK;
}

static ucx_op_t *chain_ops(ucx_req_t *r, uint64_t u)
{
    return &r->ops[(size_t)(u % (uint64_t)r->hier_op->window) * 2];
}

/* The allgather of the parts in the node as they are final (first units). */
static void chain_allgather(ucx_req_t *r, uint64_t final)
{
    ucx_hier_op_t *x = r->hier_op;
    ucx_hier_state_t *s = &r->hier;
    if (s->ag_done)
        return;
    if (r->uc->hier->k > 1) {
        x->ag.tiles.ready = units_final(x, final);
        s->ag_done = ucx_shm_tiled_step(&x->ag) == MSR_OK;
    } else {
        s->ag_done = final == x->nunits;
    }
}

/* Where unit u's input from the chain lands (reduce): its slot. */
static char *chain_slot(const ucx_hier_op_t *x, uint64_t u)
{
    return x->area + (size_t)(u % (uint64_t)x->window) * x->slot;
}

/* The chain's units, in order: receives from link `from` (-1: none) are
 * posted up to window units ahead; a unit whose input is here (the first
 * `ready` elements of our part, and its receive finished) is folded into
 * ours (reduce), finished where the chain ends (reduce, the root's node)
 * and sent on to link `to` (-1: none). A broadcast receives in place. */
static msr_status_t chain_progress(ucx_req_t *r, int from, int to, uint64_t ready)
{
    ucx_hier_op_t *x = r->hier_op;
    ucx_hier_state_t *s = &r->hier;
    int reduce = r->pub.args.coll == MSR_COLL_REDUCE;
    size_t es = x->es;
    msr_status_t st;
    int busy = 1;
    while (busy) {
        busy = 0;
        while (s->started < x->nunits && s->started < s->done + (uint64_t)x->window) {
            const hier_unit_t *un = &x->units[s->started];
            if (from >= 0) {
                char *dst = reduce ? chain_slot(x, s->started) : x->full + un->off * es;
                st = ucx_op_recv(r, &chain_ops(r, s->started)[0], chain_owner(r, un->t, from), dst,
                                 un->len * es, 2u * (unsigned)un->t);
                if (st != MSR_OK)
                    return st;
            }
            s->started++;
            busy = 1;
        }
        while (s->folded < s->started) {
            const hier_unit_t *un = &x->units[s->folded];
            if (un->off + un->len - x->my_off > ready ||
                (from >= 0 && !ucx_op_test(r, &chain_ops(r, s->folded)[0])))
                break;
            if (r->err != MSR_OK)
                return r->err;
            char *dst = x->full + un->off * es;
            if (reduce && from >= 0)
                msr_reduce(x->op, x->dt, dst, dst, chain_slot(x, s->folded), un->len);
            if (reduce && to < 0)
                msr_reduce_finish(x->op, x->dt, dst, un->len, r->n);
            if (to >= 0) {
                st = ucx_op_send(r, &chain_ops(r, s->folded)[1], chain_owner(r, un->t, to), dst,
                                 un->len * es, 2u * (unsigned)un->t);
                if (st != MSR_OK)
                    return st;
            }
            s->folded++;
            busy = 1;
        }
        while (s->done < s->folded && ucx_op_test(r, &chain_ops(r, s->done)[1])) {
            if (r->err != MSR_OK)
                return r->err;
            s->done++;
            busy = 1;
        }
    }
    return MSR_OK;
}

/* Whether the operation is over; while the tiles can move, the engine
 * polls, and waiting for the network alone it sleeps. */
static msr_status_t chain_finished(ucx_req_t *r)
{
    const ucx_hier_op_t *x = r->hier_op;
    const ucx_hier_state_t *s = &r->hier;
    shm_count(r, r->uc->hier->k > 1 && (!s->rs_done || (!s->ag_done && x->ag.tiles.ready > 0)));
    if (!s->rs_done || !s->ag_done || s->done < x->nunits)
        return MSR_IN_PROGRESS;
    return MSR_OK;
}

static msr_status_t bcast_chain_step(ucx_req_t *r)
{
    ucx_hier_op_t *x = r->hier_op;
    ucx_hier_state_t *s = &r->hier;
    int v = x->vnode, last = v == r->uc->hier->nnodes - 1;
    msr_status_t st;
    if (v == 0) {
        /* the root's node: what its tiles have given us, then on */
        if (!s->rs_done)
            s->rs_done = r->uc->hier->k == 1 || ucx_shm_tiled_step(&x->rs) == MSR_OK;
        uint64_t have = x->rs.tiles.copied * x->rs.tiles.tile_elems; /* of the vector */
        uint64_t ready = s->rs_done || r->me == r->pub.args.root ? UINT64_MAX
                         : have > x->my_off                      ? have - x->my_off
                                                                 : 0;
        s->ag_done = 1;
        st = chain_progress(r, -1, 1, ready);
    } else {
        st = chain_progress(r, v - 1, last ? -1 : v + 1, UINT64_MAX);
        s->rs_done = 1;
        chain_allgather(r, s->folded);
    }
    return st != MSR_OK ? st : chain_finished(r);
}

static msr_status_t reduce_chain_step(ucx_req_t *r)
{
    ucx_hier_op_t *x = r->hier_op;
    ucx_hier_state_t *s = &r->hier;
    int v = x->vnode, leaf = v == r->uc->hier->nnodes - 1;
    if (!s->rs_done) {
        if (r->uc->hier->k > 1) {
            s->rs_done = ucx_shm_tiled_step(&x->rs) == MSR_OK;
        } else {
            if (x->input != x->full)
                memcpy(x->full, x->input, (size_t)x->count * x->es);
            s->rs_done = 1;
        }
    }
    /* the reduced prefix of our part */
    uint64_t rs_ready = s->rs_done ? UINT64_MAX : x->rs.tiles.reduced * x->rs.tiles.tile_elems;
    msr_status_t st = chain_progress(r, leaf ? -1 : v + 1, v == 0 ? -1 : v - 1, rs_ready);
    if (st != MSR_OK)
        return st;
    if (v == 0)
        chain_allgather(r, s->folded);
    else
        s->ag_done = 1;
    return chain_finished(r);
}

msr_status_t ucx_hier_start(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    const struct ucx_hier *h = r->uc->hier;
    int nn = h->nnodes;
    ucx_hier_op_t *x = msr_calloc(1, sizeof *x);
    if (x == NULL)
        return MSR_ERR_NO_MEMORY;
    r->hier_op = x;
    x->op = a->op;
    x->dt = a->dtype;
    x->es = r->es;
    x->input = a->sendbuf;
    if (a->coll == MSR_COLL_ALLGATHER)
        return route_ag_start(r);
    if (a->coll == MSR_COLL_REDUCE_SCATTER)
        return route_rs_start(r);
    if (a->coll == MSR_COLL_BROADCAST || a->coll == MSR_COLL_REDUCE)
        return chain_start(r);
    r->algo = "allreduce(hier)";
    x->count = a->count;
    x->full = a->recvbuf;
    hier_segments(h, x);
    ucx_part(x->count, (uint64_t)h->k, (uint64_t)h->local_rank, &x->my_off, &x->my_len);
    /* Our segments in units of about nnodes messages of hier_chunk bytes,
     * and at least HIER_MIN_UNITS of them while a message stays over
     * HIER_MIN_MSG bytes, so that small vectors pipeline too: the count of
     * a segment's units depends only on its length, alike on every node. */
    for (int t = 0; t < x->nseg; t++)
        if (seg_mine(x, t))
            x->nunits += seg_units(r, x->bounds[t + 1] - x->bounds[t]);
    if (x->nunits > 0) {
        x->units = msr_calloc((size_t)x->nunits, sizeof *x->units);
        if (x->units == NULL)
            return MSR_ERR_NO_MEMORY;
    }
    /* scratch: the pieces of our units that the other nodes send us */
    size_t area = 0;
    uint64_t u = 0;
    for (int t = 0; t < x->nseg; t++) {
        if (!seg_mine(x, t))
            continue;
        uint64_t slen = x->bounds[t + 1] - x->bounds[t], nc = seg_units(r, slen);
        for (uint64_t c = 0; c < nc; c++, u++) {
            hier_unit_t *un = &x->units[u];
            uint64_t coff, plen, poff;
            ucx_part(slen, nc, c, &coff, &un->len);
            un->t = t;
            un->off = x->bounds[t] + coff;
            un->area = area;
            ucx_part(un->len, (uint64_t)nn, (uint64_t)h->node, &poff, &plen);
            area += (size_t)plen * x->es * (size_t)nn;
        }
    }
    msr_status_t st = ucx_scratch_get(r, area);
    if (st != MSR_OK)
        return st;
    x->area = r->scratch;
    /* per unit in flight: to and from every other node, a partial and a
     * folded piece */
    x->per_unit = 4 * (nn - 1);
    x->window = r->uc->tune.hier_window;
    if ((uint64_t)x->window > x->nunits)
        x->window = x->nunits > 0 ? (int)x->nunits : 1;
    st = ops_idle(r, x->window * x->per_unit);
    if (st != MSR_OK)
        return st;
    r->step = ucx_hier_step;
    if (h->k > 1) {
        /* in place, our part of the input is our part of the output */
        sub_init(r, &x->rs, MSR_COLL_REDUCE_SCATTER, x->input, x->full + (size_t)x->my_off * x->es,
                 x->input == x->full);
        sub_init(r, &x->ag, MSR_COLL_ALLGATHER, x->full + (size_t)x->my_off * x->es, x->full, 1);
        shm_count(r, 1);
    }
    return MSR_OK;
}

void ucx_hier_release(ucx_req_t *r)
{
    if (r->hier_op != NULL) {
        msr_free(r->hier_op->units);
        msr_free(r->hier_op->blocks);
        msr_free(r->hier_op->block_op);
        msr_free(r->hier_op->pieces);
        msr_free(r->hier_op->order);
    }
    msr_free(r->hier_op);
    r->hier_op = NULL;
}

/* The exchange between nodes, unit by unit, window units in flight. Unit
 * u's sub-piece m goes from us, partly reduced over our node, to segment
 * t's owner on node m (phase 2t); the owners' partials of our sub-piece
 * come into the area, and once all are in we fold them in node order and
 * send the result to every other owner (phase 2t + 1), who sends us theirs.
 * Every pair of owners posts its messages of a phase in unit order, so the
 * tags match in order. A unit starts once the reduce-scatter in the node has
 * reduced it (rs_ready elements of our part). */

static ucx_op_t *unit_ops(ucx_req_t *r, uint64_t u)
{
    const ucx_hier_op_t *x = r->hier_op;
    return &r->ops[(size_t)(u % (uint64_t)x->window) * (size_t)x->per_unit];
}

/* ops[4j .. 4j + 3] of a unit: with the j-th other node (ascending) */
static int other_node(const struct ucx_hier *h, int j)
{
    return j < h->node ? j : j + 1;
}

static msr_status_t unit_start(ucx_req_t *r, uint64_t u)
{
    const struct ucx_hier *h = r->uc->hier;
    ucx_hier_op_t *x = r->hier_op;
    const hier_unit_t *un = &x->units[u];
    ucx_op_t *ops = unit_ops(r, u);
    size_t es = x->es;
    unsigned phase = 2u * (unsigned)un->t;
    uint64_t moff, mlen;
    ucx_part(un->len, (uint64_t)h->nnodes, (uint64_t)h->node, &moff, &mlen);
    for (int j = 0; j < h->nnodes - 1; j++) {
        int m = other_node(h, j), peer = seg_owner(h, x, un->t, m);
        uint64_t off, len;
        ucx_part(un->len, (uint64_t)h->nnodes, (uint64_t)m, &off, &len);
        char *piece = x->full + (un->off + off) * es;
        msr_status_t st = ucx_op_recv(r, &ops[4 * j], peer,
                                      x->area + un->area + (size_t)m * mlen * es, mlen * es, phase);
        if (st == MSR_OK)
            st = ucx_op_send(r, &ops[4 * j + 1], peer, piece, len * es, phase);
        /* the result comes back where our partial leaves from: only after
         * the owner has it all */
        if (st == MSR_OK)
            st = ucx_op_recv(r, &ops[4 * j + 2], peer, piece, len * es, phase + 1);
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

/* Folds the nodes' partials of our sub-piece of unit u in node order (ours
 * is in place; a rank on node 2 or later first moves it to its slot, since
 * the fold of nodes 0 and 1 writes where it is) and sends the result. */
static msr_status_t unit_fold(ucx_req_t *r, uint64_t u)
{
    const struct ucx_hier *h = r->uc->hier;
    ucx_hier_op_t *x = r->hier_op;
    const hier_unit_t *un = &x->units[u];
    ucx_op_t *ops = unit_ops(r, u);
    size_t es = x->es;
    int nn = h->nnodes;
    uint64_t off, len;
    ucx_part(un->len, (uint64_t)nn, (uint64_t)h->node, &off, &len);
    char *dst = x->full + (un->off + off) * es, *area = x->area + un->area;
    size_t piece = (size_t)len * es;
    if (h->node >= 2)
        memcpy(area + (size_t)h->node * piece, dst, piece);
    const char *x0 = h->node == 0 ? dst : area;
    const char *x1 = h->node == 1 ? dst : area + piece;
    msr_reduce(x->op, x->dt, dst, x0, x1, len);
    for (int m = 2; m < nn; m++)
        msr_reduce(x->op, x->dt, dst, dst, area + (size_t)m * piece, len);
    msr_reduce_finish(x->op, x->dt, dst, len, r->n);
    for (int j = 0; j < nn - 1; j++) {
        int peer = seg_owner(h, x, un->t, other_node(h, j));
        msr_status_t st =
            ucx_op_send(r, &ops[4 * j + 3], peer, dst, piece, 2u * (unsigned)un->t + 1u);
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

/* Whether unit u's ops are finished: every one (all), or only the
 * receives of the other nodes' partials (ops[4j]). */
static int unit_finished(ucx_req_t *r, uint64_t u, int all)
{
    const ucx_hier_op_t *x = r->hier_op;
    int first = (int)(unit_ops(r, u) - r->ops);
    return all ? ops_finished(r, first, 1, x->per_unit)
               : ops_finished(r, first, 4, x->per_unit / 4);
}

static msr_status_t cross_progress(ucx_req_t *r, uint64_t rs_ready)
{
    ucx_hier_op_t *x = r->hier_op;
    ucx_hier_state_t *s = &r->hier;
    msr_status_t st;
    int busy = 1;
    while (busy) {
        busy = 0;
        while (s->started < x->nunits && s->started < s->done + (uint64_t)x->window) {
            const hier_unit_t *un = &x->units[s->started];
            if (un->off + un->len - x->my_off > rs_ready)
                break;
            st = unit_start(r, s->started);
            if (st != MSR_OK)
                return st;
            s->started++;
            busy = 1;
        }
        while (s->folded < s->started && unit_finished(r, s->folded, 0)) {
            if (r->err != MSR_OK)
                return r->err;
            st = unit_fold(r, s->folded);
            if (st != MSR_OK)
                return st;
            s->folded++;
            busy = 1;
        }
        while (s->done < s->folded && unit_finished(r, s->done, 1)) {
            if (r->err != MSR_OK)
                return r->err;
            s->done++;
            busy = 1;
        }
    }
    return r->err;
}

/* Elements of our part that are final: those of the finished units. */
static uint64_t cross_ready(const ucx_req_t *r)
{
    const ucx_hier_op_t *x = r->hier_op;
    uint64_t d = r->hier.done;
    if (d == x->nunits)
        return UINT64_MAX;
    return d == 0 ? 0 : x->units[d - 1].off + x->units[d - 1].len - x->my_off;
}

msr_status_t ucx_hier_step(ucx_req_t *r)
{
    const struct ucx_hier *h = r->uc->hier;
    ucx_hier_op_t *x = r->hier_op;
    ucx_hier_state_t *s = &r->hier;
    if (!s->rs_done) {
        if (h->k > 1) {
            s->rs_done = ucx_shm_tiled_step(&x->rs) == MSR_OK;
        } else {
            if (x->input != x->full)
                memcpy(x->full, x->input, (size_t)x->count * x->es);
            s->rs_done = 1;
        }
    }
    /* the reduced prefix of our part */
    uint64_t rs_ready = s->rs_done ? UINT64_MAX : x->rs.tiles.reduced * x->rs.tiles.tile_elems;
    msr_status_t st = cross_progress(r, rs_ready);
    if (st != MSR_OK)
        return st;
    if (s->rs_done && !s->ag_done) {
        if (h->k > 1) {
            x->ag.tiles.ready = cross_ready(r);
            s->ag_done = ucx_shm_tiled_step(&x->ag) == MSR_OK;
        } else {
            s->ag_done = s->done == x->nunits;
        }
    }
    /* the shared-memory steps need polling; the exchange alone lets the
     * engine sleep on its events */
    shm_count(r, h->k > 1 && !s->ag_done && (!s->rs_done || x->ag.tiles.ready > 0));
    if (!s->ag_done || s->done < x->nunits)
        return MSR_IN_PROGRESS;
    return MSR_OK;
}
