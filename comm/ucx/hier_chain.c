/* The two-level broadcast and reduce: the node's tiles inside each node and
 * a chain of nodes from the root's between them, every member carrying its
 * own part (hier.c starts them; the state is in hier_impl.h). */
#include <string.h>

#include "base/alloc.h"
#include "comm/reduce.h"
#include "comm/ucx/hier_impl.h"

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
    return ucx_hier_seg_owner(h, x, t, (root_node + v) % h->nnodes);
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

msr_status_t ucx_hier_chain_start(ucx_req_t *r)
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
    ucx_hier_segments(h, x);
    ucx_part(x->count, (uint64_t)h->k, (uint64_t)h->local_rank, &x->my_off, &x->my_len);
    for (int t = 0; t < x->nseg; t++)
        if (ucx_hier_seg_mine(x, t))
            x->nunits += chain_units(r, x->bounds[t + 1] - x->bounds[t]);
    if (x->nunits > 0) {
        x->units = msr_calloc((size_t)x->nunits, sizeof *x->units);
        if (x->units == NULL)
            return MSR_ERR_NO_MEMORY;
    }
    uint64_t u = 0, most = 0;
    for (int t = 0; t < x->nseg; t++) {
        if (!ucx_hier_seg_mine(x, t))
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
    st = ucx_hier_ops_idle(r, x->window * x->per_unit);
    if (st != MSR_OK)
        return st;
    if (h->k > 1) {
        char *part = x->full + (size_t)x->my_off * x->es;
        if (bcast && x->vnode == 0)
            ucx_hier_sub_init_root(r, &x->rs, MSR_COLL_BROADCAST, NULL, x->full, 1,
                                   h->lidx[a->root]);
        if (!bcast) /* in place, our part of the input is our part of the output */
            ucx_hier_sub_init(r, &x->rs, MSR_COLL_REDUCE_SCATTER, x->input, part,
                              x->input == x->full);
        if (bcast != (x->vnode == 0))
            ucx_hier_sub_init(r, &x->ag, MSR_COLL_ALLGATHER, part, x->full, 1);
        ucx_hier_shm_count(r, 1);
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
    ucx_hier_shm_count(r, r->uc->hier->k > 1 &&
                              (!s->rs_done || (!s->ag_done && x->ag.tiles.ready > 0)));
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
