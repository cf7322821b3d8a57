/* The two-level reduce-scatter and allgather: blocks routed through one
 * agent per node, so that every block crosses into each other node once
 * (hier.c starts them; the state is in hier_impl.h). */
#include <string.h>

#include "base/alloc.h"
#include "comm/reduce.h"
#include "comm/ucx/hier_impl.h"

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

static msr_status_t route_ag_step(ucx_req_t *r);
static msr_status_t route_rs_step(ucx_req_t *r);

msr_status_t ucx_hier_route_ag_start(ucx_req_t *r)
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
    msr_status_t st = ucx_hier_ops_idle(r, (n - 1) + (k - 1) + (nn - 1) + x->nblocks * (k - 1));
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

msr_status_t ucx_hier_route_rs_start(ucx_req_t *r)
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
    st = ucx_hier_ops_idle(r, x->first_cross + (nn - 1) * nc);
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
        int done = ucx_hier_ops_finished(r, x->first_contrib + x->cursor * (k - 1), 1, k - 1);
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
        int done = ucx_hier_ops_finished(r, x->first_cross + c * (nn - 1), 1, nn - 1);
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
    int all = ucx_hier_ops_finished(r, 0, 1, r->nops);
    if (r->err != MSR_OK)
        return r->err;
    return all && x->done_chunks == nc ? MSR_OK : MSR_IN_PROGRESS;
}
