/* The two-level allreduce's step (hier.c's top comment describes it, and
 * ucx_hier_start sets it up): the node's reduce-scatter through the tiles,
 * the exchange between nodes unit by unit, and the node's allgather, the
 * three overlapping as far as each unit's data allows. */
#include <string.h>

#include "comm/reduce.h"
#include "comm/ucx/hier_impl.h"

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
        int m = other_node(h, j), peer = ucx_hier_seg_owner(h, x, un->t, m);
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
        int peer = ucx_hier_seg_owner(h, x, un->t, other_node(h, j));
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
    return all ? ucx_hier_ops_finished(r, first, 1, x->per_unit)
               : ucx_hier_ops_finished(r, first, 4, x->per_unit / 4);
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
    ucx_hier_shm_count(r, h->k > 1 && !s->ag_done && (!s->rs_done || x->ag.tiles.ready > 0));
    if (!s->ag_done || s->done < x->nunits)
        return MSR_IN_PROGRESS;
    return MSR_OK;
}
