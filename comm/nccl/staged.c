/* The staged backend, for members that share a GPU: an operation copies its
 * device input to a pinned host block on its stream, runs the same operation
 * on the host communicator (UCX) in that block once the copies are done, and
 * copies the result back on the stream. Each step is polled by
 * gpu_progress. Host collectives run one at a time, in the order the
 * requests were posted, so every member starts them in the same order (and
 * the host communicator never has two in flight: comm/ucx's shared-memory
 * allreduce mixes up the data of three or more in flight on one
 * communicator; see docs/comm.md). Point-to-point transfers start in their
 * order too but run side by side (a receive must not hold up the send its
 * peer waits for). Copies of later requests overlap them. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "comm/nccl/gpu_impl.h"
#include "base/err.h"

/* The extents of alltoallv's send and receive parts, in bytes. */
static void v_extents(const gpu_req_t *r, size_t es, size_t *send_p, size_t *recv_p)
{
    const uint64_t *v = r->pub.args.v;
    size_t s = 0, q = 0;
    for (int j = 0; j < r->gc->comm->size; j++) {
        if (v[4 * j] && (v[4 * j + 1] + v[4 * j]) * es > s)
            s = (size_t)(v[4 * j + 1] + v[4 * j]) * es;
        if (v[4 * j + 2] && (v[4 * j + 3] + v[4 * j + 2]) * es > q)
            q = (size_t)(v[4 * j + 3] + v[4 * j + 2]) * es;
    }
    *send_p = s;
    *recv_p = q;
}

/* Bytes of host memory r needs. */
static size_t block_len(const gpu_req_t *r)
{
    const msr_coll_args_t *a = &r->pub.args;
    size_t es = msr_dtype_size(a->dtype), n = (size_t)r->gc->comm->size;
    size_t b = (size_t)a->count * es;
    switch (a->coll) {
    case MSR_COLL_REDUCE_SCATTER:
    case MSR_COLL_ALLGATHER:
    case MSR_COLL_ALLTOALL:
        return n * b;
    case MSR_COLL_ALLTOALLV: {
        size_t s, q;
        v_extents(r, es, &s, &q);
        return s + q;
    }
    case MSR_COLL_BARRIER:
        return 0;
    default:
        return b;
    }
}

/* A pinned block for r: the communicator's cached one when it is free
 * (grown as needed), else one of its own. Lock held. */
static msr_status_t get_block(gpu_req_t *r, size_t len)
{
    gpu_comm_t *gc = r->gc;
    const msr_gpu_api_t *api = gc->api;
    if (len == 0)
        return MSR_OK;
    if (!gc->pinned_busy) {
        if (gc->pinned_len < len) {
            size_t want = (len + GPU_STAGED_UNIT - 1) & ~(GPU_STAGED_UNIT - 1);
            void *p = NULL;
            msr_status_t st = api->host_alloc(api, want, &p);
            if (st != MSR_OK)
                return st;
            if (gc->pinned)
                api->host_free(api, gc->pinned);
            gc->pinned = p;
            gc->pinned_len = want;
        }
        gc->pinned_busy = 1;
        r->pinned = gc->pinned;
        r->pinned_len = len;
        r->pinned_cached = 1;
        return MSR_OK;
    }
    void *p = NULL;
    msr_status_t st = api->host_alloc(api, len, &p);
    if (st != MSR_OK)
        return st;
    r->pinned = p;
    r->pinned_len = len;
    return MSR_OK;
}

static msr_status_t copy(gpu_req_t *r, void *dst, const void *src, size_t bytes,
                         msr_gpu_copy_t kind)
{
    if (bytes == 0)
        return MSR_OK;
    return r->gc->api->copy_async(r->gc->api, dst, src, bytes, kind, r->stream);
}

/* The copies into the host block (D2H) or out of it (H2D); *any_p tells
 * whether there were any. */
static msr_status_t copies(gpu_req_t *r, msr_gpu_copy_t kind, int *any_p)
{
    const msr_coll_args_t *a = &r->pub.args;
    size_t es = msr_dtype_size(a->dtype), b = (size_t)a->count * es;
    int n = r->gc->comm->size, me = r->gc->comm->rank;
    unsigned char *hb = r->pinned;
    int d2h = kind == MSR_GPU_D2H;
    msr_status_t st = MSR_OK;
    *any_p = 1;
    switch (a->coll) {
    case MSR_COLL_ALLREDUCE:
        st = d2h ? copy(r, hb, a->sendbuf, b, kind) : copy(r, a->recvbuf, hb, b, kind);
        break;
    case MSR_COLL_REDUCE_SCATTER: /* the whole input in, block me out */
        st = d2h ? copy(r, hb, a->sendbuf, (size_t)n * b, kind)
                 : copy(r, a->recvbuf, hb + (size_t)me * b, b, kind);
        break;
    case MSR_COLL_ALLGATHER: /* block me in, everything out */
        st = d2h ? copy(r, hb + (size_t)me * b, a->sendbuf, b, kind)
                 : copy(r, a->recvbuf, hb, (size_t)n * b, kind);
        break;
    case MSR_COLL_ALLTOALL:
        st = d2h ? copy(r, hb, a->sendbuf, (size_t)n * b, kind)
                 : copy(r, a->recvbuf, hb, (size_t)n * b, kind);
        break;
    case MSR_COLL_BROADCAST: /* in at the root, out elsewhere */
        if (d2h == (me == a->root))
            st = d2h ? copy(r, hb, a->recvbuf, b, kind) : copy(r, a->recvbuf, hb, b, kind);
        else
            *any_p = 0;
        break;
    case MSR_COLL_REDUCE: /* in everywhere, out at the root */
        if (d2h)
            st = copy(r, hb, a->sendbuf, b, kind);
        else if (me == a->root)
            st = copy(r, a->recvbuf, hb, b, kind);
        else
            *any_p = 0;
        break;
    case MSR_COLL_ALLTOALLV: {
        const uint64_t *v = a->v;
        size_t s, q;
        v_extents(r, es, &s, &q);
        for (int j = 0; j < n && st == MSR_OK; j++) {
            if (d2h && v[4 * j])
                st = copy(r, hb + v[4 * j + 1] * es, (const char *)a->sendbuf + v[4 * j + 1] * es,
                          v[4 * j] * es, kind);
            else if (!d2h && v[4 * j + 2])
                st = copy(r, (char *)a->recvbuf + v[4 * j + 3] * es, hb + s + v[4 * j + 3] * es,
                          v[4 * j + 2] * es, kind);
        }
        break;
    }
    case MSR_COLL_SEND:
        if (d2h)
            st = copy(r, hb, a->sendbuf, b, kind);
        else
            *any_p = 0;
        break;
    case MSR_COLL_RECV:
        if (!d2h)
            st = copy(r, a->recvbuf, hb, b, kind);
        else
            *any_p = 0;
        break;
    case MSR_COLL_BARRIER:
        *any_p = 0;
        break;
    }
    return st;
}

/* The same operation on the host communicator, in the host block. */
static msr_status_t post_host(gpu_req_t *r)
{
    gpu_comm_t *gc = r->gc;
    msr_comm_t *h = gc->host;
    const msr_coll_args_t *a = &r->pub.args;
    unsigned char *hb = r->pinned;
    uint64_t c = a->count;
    msr_dtype_t dt = a->dtype;
    msr_comm_req_t **q = &r->host_req;
    /* the host operation keeps what is left of the device one's deadline */
    int64_t left =
        r->pub.deadline == MSR_DEADLINE_NEVER ? -1 : msr_deadline_left_ms(r->pub.deadline);
    msr_comm_set_timeout(h, left == 0 ? 1 : left);
    switch (a->coll) {
    case MSR_COLL_ALLREDUCE:
        return msr_comm_iallreduce(h, MSR_IN_PLACE, hb, c, dt, a->op, q);
    case MSR_COLL_REDUCE_SCATTER:
        return msr_comm_ireduce_scatter(h, MSR_IN_PLACE, hb, c, dt, a->op, q);
    case MSR_COLL_ALLGATHER:
        return msr_comm_iallgather(h, MSR_IN_PLACE, hb, c, dt, q);
    case MSR_COLL_BROADCAST:
        return msr_comm_ibroadcast(h, hb, c, dt, a->root, q);
    case MSR_COLL_REDUCE:
        if (gc->comm->rank == a->root)
            return msr_comm_ireduce(h, MSR_IN_PLACE, hb, c, dt, a->op, a->root, q);
        return msr_comm_ireduce(h, hb, NULL, c, dt, a->op, a->root, q);
    case MSR_COLL_ALLTOALL:
        return msr_comm_ialltoall(h, MSR_IN_PLACE, hb, c, dt, q);
    case MSR_COLL_ALLTOALLV: {
        int n = gc->comm->size;
        size_t es = msr_dtype_size(dt), s, qq;
        v_extents(r, es, &s, &qq);
        uint64_t *hv = r->hv; /* sendcounts, sdispls, recvcounts, rdispls */
        for (int j = 0; j < n; j++)
            for (int k = 0; k < 4; k++)
                hv[(size_t)k * (size_t)n + (size_t)j] = a->v[4 * j + k];
        return msr_comm_ialltoallv(h, hb, hv, hv + n, hb ? hb + s : NULL, hv + 2 * n, hv + 3 * n,
                                   dt, q);
    }
    case MSR_COLL_BARRIER:
        return msr_comm_ibarrier(h, q);
    case MSR_COLL_SEND:
        return msr_comm_isend(h, hb, c, dt, a->root, 0, q);
    case MSR_COLL_RECV:
        return msr_comm_irecv(h, hb, c, dt, a->root, 0, q);
    }
    return MSR_ERR_INVALID_ARG;
}

msr_status_t gpu_staged_start(gpu_req_t *r)
{
    gpu_comm_t *gc = r->gc;
    if (r->pub.args.coll == MSR_COLL_ALLTOALLV) {
        r->hv = msr_calloc(4 * (size_t)gc->comm->size, sizeof *r->hv);
        if (r->hv == NULL) {
            msr_err_set("staged: out of memory for alltoallv's counts");
            return MSR_ERR_NO_MEMORY;
        }
    }
    msr_status_t st = get_block(r, block_len(r));
    if (st != MSR_OK) {
        msr_err_set("staged: no pinned host block of %zu bytes: %s", block_len(r),
                    msr_last_error());
        return st; /* not started */
    }
    int any;
    st = copies(r, MSR_GPU_D2H, &any);
    /* recorded even without copies: the host part starts after the work
     * queued before it on the stream */
    if (st == MSR_OK)
        st = gc->api->event_record(gc->api, r->event, r->stream);
    if (st != MSR_OK) {
        char why[200];
        snprintf(why, sizeof why, "%s", msr_last_error());
        gpu_comm_fail(gc, st, 1, "staged: queueing the copies to host memory: %s", why);
        return MSR_OK;
    }
    r->stage = GPU_STAGE_D2H;
    return MSR_OK;
}

msr_status_t gpu_staged_step(gpu_req_t *r, int *may_post)
{
    gpu_comm_t *gc = r->gc;
    const msr_gpu_api_t *api = gc->api;
    int p2p = r->pub.args.coll == MSR_COLL_SEND || r->pub.args.coll == MSR_COLL_RECV;
    int bit = p2p ? GPU_POST_P2P : GPU_POST_COLL;
    msr_status_t st;
    switch (r->stage) {
    case GPU_STAGE_D2H:
        st = api->event_query(api, r->event);
        if (st != MSR_OK) {
            *may_post &= ~bit; /* later requests of its kind keep their place */
            return st;
        }
        if (!(*may_post & bit))
            return MSR_IN_PROGRESS; /* an earlier request starts its host part first */
        st = post_host(r);
        if (st != MSR_OK)
            return st;
        r->stage = GPU_STAGE_HOST;
        /* fall through */
    case GPU_STAGE_HOST: {
        st = msr_comm_test(&r->host_req); /* sets host_req NULL once finished */
        if (st == MSR_IN_PROGRESS && !p2p)
            *may_post &= ~GPU_POST_COLL; /* one host collective at a time */
        if (st != MSR_OK)
            return st;
        int any;
        st = copies(r, MSR_GPU_H2D, &any);
        if (st != MSR_OK)
            return st;
        if (!any)
            return MSR_OK;
        st = api->event_record(api, r->event, r->stream);
        if (st != MSR_OK)
            return st;
        r->stage = GPU_STAGE_H2D;
        return api->event_query(api, r->event);
    }
    case GPU_STAGE_H2D:
        return api->event_query(api, r->event);
    }
    return MSR_ERR_INTERNAL;
}
