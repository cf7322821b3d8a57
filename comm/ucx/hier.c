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
 * that is more than UCX_HIER_MAX_SEGS runs the flat algorithms.
 *
 * This file makes the sub-groups, holds what the operations share and
 * starts them; the allreduce's exchange between nodes is in
 * hier_allreduce.c, reduce-scatter and allgather in hier_route.c,
 * broadcast and reduce in hier_chain.c (their state: hier_impl.h). */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "comm/ucx/hier_impl.h"

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
void ucx_hier_segments(const struct ucx_hier *h, ucx_hier_op_t *x)
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
int ucx_hier_seg_owner(const struct ucx_hier *h, const ucx_hier_op_t *x, int t, int m)
{
    uint64_t k = (uint64_t)(h->node_first[m + 1] - h->node_first[m]);
    uint64_t base = x->count / k, extra = x->count % k, e = x->bounds[t];
    uint64_t q = e < extra * (base + 1) ? e / (base + 1) : extra + (e - extra * (base + 1)) / base;
    return h->by_node[h->node_first[m] + (int)q];
}

/* Whether segment t is in this rank's part. */
int ucx_hier_seg_mine(const ucx_hier_op_t *x, int t)
{
    return x->bounds[t] >= x->my_off && x->bounds[t] < x->my_off + x->my_len;
}

/* A shared-memory sub-operation on the node's group, numbered now (every
 * member starts the parent's operations in the same order). */
void ucx_hier_sub_init_root(ucx_req_t *r, ucx_req_t *s, msr_coll_t coll, const void *send,
                            void *recv, int in_place, int root)
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
void ucx_hier_sub_init(ucx_req_t *r, ucx_req_t *s, msr_coll_t coll, const void *send, void *recv,
                       int in_place)
{
    ucx_hier_sub_init_root(r, s, coll, send, recv, in_place, 0);
}

/* Whether r is counted among the engine's shared-memory operations (which
 * keep it polling instead of sleeping on its events). */
void ucx_hier_shm_count(ucx_req_t *r, int on)
{
    if (r->shm != on) {
        r->shm = on;
        r->uc->engine->shm_active += on ? 1 : -1;
    }
}

/* Room for n ops, all idle and all counted in r->nops (so that a failed
 * request cancels whichever are posted). */
msr_status_t ucx_hier_ops_idle(ucx_req_t *r, int n)
{
    msr_status_t st = ucx_ops_reserve(r, n > 0 ? n : 1);
    if (st != MSR_OK)
        return st;
    r->nops = n;
    for (int i = 0; i < n; i++)
        r->ops[i].h = NULL;
    return MSR_OK;
}

/* Whether ops[first + j * stride] for j in [0, count) are finished. */
int ucx_hier_ops_finished(ucx_req_t *r, int first, int stride, int count)
{
    int all = 1;
    for (int j = 0; j < count; j++)
        all &= ucx_op_test(r, &r->ops[first + j * stride]);
    return all;
}

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
        return ucx_hier_route_ag_start(r);
    if (a->coll == MSR_COLL_REDUCE_SCATTER)
        return ucx_hier_route_rs_start(r);
    if (a->coll == MSR_COLL_BROADCAST || a->coll == MSR_COLL_REDUCE)
        return ucx_hier_chain_start(r);
    r->algo = "allreduce(hier)";
    x->count = a->count;
    x->full = a->recvbuf;
    ucx_hier_segments(h, x);
    ucx_part(x->count, (uint64_t)h->k, (uint64_t)h->local_rank, &x->my_off, &x->my_len);
    /* Our segments in units of about nnodes messages of hier_chunk bytes,
     * and at least HIER_MIN_UNITS of them while a message stays over
     * HIER_MIN_MSG bytes, so that small vectors pipeline too: the count of
     * a segment's units depends only on its length, alike on every node. */
    for (int t = 0; t < x->nseg; t++)
        if (ucx_hier_seg_mine(x, t))
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
        if (!ucx_hier_seg_mine(x, t))
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
    st = ucx_hier_ops_idle(r, x->window * x->per_unit);
    if (st != MSR_OK)
        return st;
    r->step = ucx_hier_step;
    if (h->k > 1) {
        /* in place, our part of the input is our part of the output */
        ucx_hier_sub_init(r, &x->rs, MSR_COLL_REDUCE_SCATTER, x->input,
                          x->full + (size_t)x->my_off * x->es, x->input == x->full);
        ucx_hier_sub_init(r, &x->ag, MSR_COLL_ALLGATHER, x->full + (size_t)x->my_off * x->es,
                          x->full, 1);
        ucx_hier_shm_count(r, 1);
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
