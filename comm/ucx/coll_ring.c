/* The pipelined ring of the UCX collectives: allreduce and reduce-scatter
 * as a ring of segments (reduce-scatter, then allgather), allgather's ring,
 * and the windowed segment pipeline (ucx_pipe_step) that the ring and the
 * chains of broadcast and reduce (coll_rooted.c) share. */
#include <string.h>

#include "comm/reduce.h"
#include "comm/ucx/coll_impl.h"

/* ---- pipelines: the ring and the chains ---- */

/* Sizes p's windows from the tuning and readies its ops (the slots are
 * the caller's: slot_bytes). */
msr_status_t ucx_pipe_setup(ucx_req_t *r, ucx_pipe_t *p)
{
    const ucx_tuning_t *t = &r->uc->tune;
    p->window = (uint64_t)t->window;
    p->send_window = (uint64_t)t->window * 2;
    msr_status_t st = ucx_ops_reserve(r, (int)(p->window + p->send_window));
    if (st != MSR_OK)
        return st;
    r->nops = (int)(p->window + p->send_window);
    for (int i = 0; i < r->nops; i++)
        r->ops[i].h = NULL;
    return MSR_OK;
}

/* ---- the pipelined ring: reduce-scatter, then (allreduce) allgather ----
 * The vector is cut into n chunks and each chunk into nseg segments. In
 * reduce-scatter step s (0 .. n-2) a rank sends chunk me-s-1 to its right and
 * receives chunk me-s-2 from its left, adds its own input and forwards the
 * sum at the next step; after n-1 steps it holds chunk me complete. The
 * allgather then passes complete chunks around the ring. Receives and sends
 * are two ordered streams of units (one unit = one segment of one step), so
 * step s+1 of segment j starts as soon as step s of segment j is done: a
 * window of receives in flight (reduce-scatter ones into scratch slots,
 * allgather ones straight into place) and a window of sends (ucx_pipe_t).
 * full: where partial sums live (the output for allreduce, the input in
 * place, scratch after the slots otherwise). */

typedef struct ring_unit {
    int ag;       /* an allgather unit (else reduce-scatter) */
    int64_t step; /* of its half: 0 .. n - 2 */
    int chunk;
    uint64_t off, len; /* elements, in the whole vector */
} ring_unit_t;

static void ring_unit(const ucx_req_t *r, uint64_t count, uint64_t i, ring_unit_t *u)
{
    uint64_t nseg = r->ring.pipe.nseg, per = (uint64_t)(r->n - 1) * nseg;
    u->ag = i >= per;
    if (u->ag)
        i -= per;
    u->step = (int64_t)(i / nseg);
    uint64_t jseg = i % nseg;
    u->chunk = ucx_mod(r->me - u->step - (u->ag ? 1 : 2), r->n);
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
    return r->scratch + r->ring.pipe.window * r->ring.pipe.slot_bytes;
}

/* Where unit i's result lives (its reduced partial, or the received
 * allgather segment). */
static char *ring_dst(const ucx_req_t *r, const ring_unit_t *u)
{
    const msr_coll_args_t *a = &r->pub.args;
    if (a->coll == MSR_COLL_REDUCE_SCATTER && !a->in_place && u->step == r->n - 2 && !u->ag) {
        uint64_t coff, clen;
        ucx_part(a->count * (uint64_t)r->n, (uint64_t)r->n, (uint64_t)r->me, &coff, &clen);
        return ucx_at(a->recvbuf, u->off - coff, r->es);
    }
    return ucx_at(ring_full(r), u->off, r->es);
}

static uint64_t ring_count(const ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    return a->coll == MSR_COLL_REDUCE_SCATTER ? a->count * (uint64_t)r->n : a->count;
}

/* Advances a pipeline as far as it goes without waiting: receive i in
 * ops[i % window], send i in ops[window + i % send_window]. */
msr_status_t ucx_pipe_step(ucx_req_t *r, ucx_pipe_t *p, const ucx_pipe_kind_t *k,
                           const ucx_pipe_flow_t *f)
{
    const uint64_t w = p->window, sw = p->send_window;
    uint64_t len;
    msr_status_t st;
    int busy = 1;
    while (busy) {
        busy = 0;
        /* sends whose data is ready */
        while (p->sends_posted < f->sends && p->sends_posted < f->first_sends + p->recvs_done &&
               p->sends_posted - p->sends_done < sw) {
            const void *src = k->send_buf(r, p->sends_posted, &len);
            st = ucx_op_send(r, &r->ops[w + p->sends_posted % sw], f->to, src, len * r->es, 0);
            if (st != MSR_OK)
                return st;
            p->sends_posted++;
            busy = 1;
        }
        while (p->sends_done < p->sends_posted && ucx_op_test(r, &r->ops[w + p->sends_done % sw])) {
            if (r->err != MSR_OK)
                return r->err;
            p->sends_done++;
            busy = 1;
        }
        /* receives, in stream order (after the sends: those are what the
         * neighbour waits for) */
        while (p->recvs_posted < f->recvs && p->recvs_posted - p->recvs_done < w) {
            void *dst = k->recv_buf(r, p->recvs_posted, &len);
            st = ucx_op_recv(r, &r->ops[p->recvs_posted % w], f->from, dst, len * r->es, 0);
            if (st != MSR_OK)
                return st;
            p->recvs_posted++;
        }
        /* the oldest receive, then what it brings */
        if (p->recvs_done < p->recvs_posted && ucx_op_test(r, &r->ops[p->recvs_done % w])) {
            if (r->err != MSR_OK)
                return r->err;
            if (k->arrived != NULL)
                k->arrived(r, p->recvs_done);
            p->recvs_done++;
            busy = 1;
        }
    }
    if (p->recvs_done == f->recvs && p->sends_done == f->sends)
        return MSR_OK;
    return MSR_IN_PROGRESS;
}

/* The ring's receive slot i (its window's), in scratch. */
char *ucx_pipe_slot(const ucx_req_t *r, const ucx_pipe_t *p, uint64_t i)
{
    return r->scratch + (i % p->window) * p->slot_bytes;
}

/* The ring: unit i arrives in its slot (reduce-scatter) or in place
 * (allgather); the first nseg sends are this rank's input. */
static void *ring_recv_buf(ucx_req_t *r, uint64_t i, uint64_t *len)
{
    ring_unit_t u;
    ring_unit(r, ring_count(r), i, &u);
    *len = u.len;
    return u.ag ? ring_dst(r, &u) : ucx_pipe_slot(r, &r->ring.pipe, i);
}

static const void *ring_send_buf(ucx_req_t *r, uint64_t i, uint64_t *len)
{
    const uint64_t count = ring_count(r), nseg = r->ring.pipe.nseg;
    if (i < nseg) {
        uint64_t coff, clen, soff;
        ucx_part(count, (uint64_t)r->n, (uint64_t)ucx_mod(r->me - 1, r->n), &coff, &clen);
        ucx_part(clen, nseg, i, &soff, len);
        return ucx_at(r->pub.args.sendbuf, coff + soff, r->es);
    }
    ring_unit_t u;
    ring_unit(r, count, i - nseg, &u);
    *len = u.len;
    return ring_dst(r, &u);
}

static void ring_arrived(ucx_req_t *r, uint64_t i)
{
    const msr_coll_args_t *a = &r->pub.args;
    ring_unit_t u;
    ring_unit(r, ring_count(r), i, &u);
    if (u.ag)
        return;
    char *dst = ring_dst(r, &u);
    msr_reduce(a->op, a->dtype, dst, ucx_pipe_slot(r, &r->ring.pipe, i),
               ucx_at(a->sendbuf, u.off, r->es), u.len);
    if (u.step == r->n - 2)
        msr_reduce_finish(a->op, a->dtype, dst, u.len, r->n);
}

msr_status_t ucx_step_ring(ucx_req_t *r)
{
    static const ucx_pipe_kind_t kind = {ring_recv_buf, ring_send_buf, ring_arrived};
    ucx_ring_t *g = &r->ring;
    ucx_pipe_flow_t f = {ucx_mod(r->me - 1, r->n), ucx_mod(r->me + 1, r->n), g->units, g->sends,
                         g->pipe.nseg};
    return ucx_pipe_step(r, &g->pipe, &kind, &f);
}

msr_status_t ucx_ring_setup(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_ring_t *g = &r->ring;
    ucx_pipe_t *p = &g->pipe;
    uint64_t count = ring_count(r);
    uint64_t maxchunk = (count + (uint64_t)r->n - 1) / (uint64_t)r->n;
    uint64_t nseg = ucx_nsegments(maxchunk, r->es, r->uc->tune.segment);
    uint64_t seg_elems = (maxchunk + nseg - 1) / nseg;
    uint64_t per = (uint64_t)(r->n - 1) * nseg;
    p->nseg = nseg;
    p->slot_bytes = seg_elems * r->es;
    g->units = a->coll == MSR_COLL_ALLREDUCE ? 2 * per : per;
    /* Sends: the nseg segments of our own input, then one per processed
     * unit except those of the very last step, which send nothing: as many
     * as there are units. */
    g->sends = g->units;
    msr_status_t st = ucx_pipe_setup(r, p);
    if (st != MSR_OK)
        return st;
    size_t scratch = (size_t)(p->window * p->slot_bytes);
    if (a->coll == MSR_COLL_REDUCE_SCATTER && !a->in_place)
        scratch += (size_t)(count * r->es); /* partial sums */
    return ucx_scratch_get(r, scratch);
}

/* ---- allgather: ring ---- */

msr_status_t ucx_step_allgather_ring(ucx_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    ucx_ag_ring_t *g = &r->ag_ring;
    const int left = ucx_mod(r->me - 1, r->n), right = ucx_mod(r->me + 1, r->n);
    msr_status_t st;
    switch (g->phase) {
    case UCX_AG_RING_START:
        break;
    case UCX_AG_RING_SEND:
        goto send;
    case UCX_AG_RING_WAIT:
        goto wait;
    }
    if (!a->in_place && r->bytes)
        memcpy(ucx_at(a->recvbuf, (uint64_t)r->me * a->count, r->es), a->sendbuf, r->bytes);
    /* receives: ops[0 .. n-2], step s gets block me-s-1 */
    for (int s = 0; s < r->n - 1; s++) {
        st = ucx_op_recv(
            r, ucx_next_op(r), left,
            ucx_at(a->recvbuf, (uint64_t)ucx_mod(r->me - s - 1, r->n) * a->count, r->es), r->bytes,
            0);
        if (st != MSR_OK)
            return st;
    }
    /* step s sends block me-s: ours, then the one step s-1 received */
    for (g->step = 0; g->step < r->n - 1; g->step++) {
        if (g->step > 0) {
            g->phase = UCX_AG_RING_SEND;
        send:
            if (!ucx_op_test(r, &r->ops[g->step - 1]))
                return MSR_IN_PROGRESS;
            if (r->err != MSR_OK)
                return r->err;
        }
        st = ucx_op_send(
            r, ucx_next_op(r), right,
            ucx_at(a->recvbuf, (uint64_t)ucx_mod(r->me - g->step, r->n) * a->count, r->es),
            r->bytes, 0);
        if (st != MSR_OK)
            return st;
    }
    g->phase = UCX_AG_RING_WAIT;
wait:
    return ucx_ops_wait(r);
}
