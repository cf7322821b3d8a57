/* The NCCL backend: the unique id through the store, the non-blocking
 * NCCL communicator's initialization polled against the deadline, each
 * operation queued on its stream (and its completion event recorded), and
 * the communicator's orderly close. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "base/util.h"
#include "comm/nccl/gpu_impl.h"
#include "base/err.h"

/* What member 0 stores: its status making the id, then the id. */
typedef struct id_msg {
    int32_t status;
    unsigned char id[MSR_GPU_ID_BYTES];
} id_msg_t;

/* Member 0 makes the unique id and stores it; the others read it. */
static msr_status_t share_id(gpu_comm_t *gc, const char *key, unsigned char id[MSR_GPU_ID_BYTES])
{
    msr_ctx_t *ctx = gc->comm->ctx;
    const msr_gpu_api_t *api = gc->api;
    if (gc->comm->rank == 0) {
        id_msg_t m = {0};
        msr_status_t st = api->unique_id(api, m.id);
        char why[200] = "";
        if (st != MSR_OK)
            snprintf(why, sizeof why, "%s", msr_last_error());
        m.status = st;
        /* stored either way, so the others learn of a failure at once */
        msr_status_t sst = msr_store_set(ctx, key, &m, sizeof m);
        if (st != MSR_OK) {
            msr_err_set("nccl: member 0 cannot make the unique id: %s", why);
            return st;
        }
        if (sst != MSR_OK)
            return sst;
        memcpy(id, m.id, sizeof m.id);
        return MSR_OK;
    }
    void *v = NULL;
    size_t len = 0;
    int64_t ms = atomic_load(&gc->comm->timeout_ms);
    msr_status_t st = msr_store_get(ctx, key, ms < 0 ? -1 : (ms > 0 ? ms : 1), &v, &len);
    if (st != MSR_OK)
        return st;
    id_msg_t m;
    if (len != sizeof m) {
        msr_err_set("nccl: '%s' holds %zu bytes, expected %zu", key, len, sizeof m);
        free(v);
        return MSR_ERR_PROTOCOL;
    }
    memcpy(&m, v, sizeof m);
    free(v);
    if (m.status != MSR_OK) {
        msr_err_set("nccl: member 0 could not make the unique id (%s)",
                    msr_status_name((msr_status_t)m.status));
        return (msr_status_t)m.status;
    }
    memcpy(id, m.id, sizeof m.id);
    return MSR_OK;
}

msr_status_t gpu_nccl_attach(gpu_comm_t *gc, int64_t key)
{
    char name[96];
    snprintf(name, sizeof name, "msr/comm/gpu/%lld/nccl-id", (long long)key);
    unsigned char id[MSR_GPU_ID_BYTES];
    msr_status_t st = share_id(gc, name, id);
    if (st != MSR_OK)
        return st;
    const msr_gpu_api_t *api = gc->api;
    uint64_t deadline = msr_deadline_in_ms(atomic_load(&gc->comm->timeout_ms));
    pthread_mutex_lock(&gc->lock);
    st = api->set_device(api, gc->device);
    void *nc = NULL;
    if (st == MSR_OK)
        st = api->comm_init(api, &nc, gc->comm->size, id, gc->comm->rank);
    if (st == MSR_IN_PROGRESS || st == MSR_OK) {
        gc->nc = nc; /* aborted by gpu_comm_fail if the wait below fails */
        if (st == MSR_IN_PROGRESS)
            st = gpu_settle(gc, nc, deadline);
        if (st != MSR_OK) {
            char why[200];
            snprintf(why, sizeof why, "%s", msr_last_error());
            gpu_comm_fail(gc, st, 1, "ncclCommInitRankConfig of %d ranks: %s", gc->comm->size, why);
            msr_err_set("ncclCommInitRankConfig of %d ranks: %s", gc->comm->size, why);
        }
    }
    pthread_mutex_unlock(&gc->lock);
    if (st == MSR_OK)
        MSR_DEBUG("comm: nccl communicator of %d ranks on GPU %d ready (id from '%s')",
                  gc->comm->size, gc->device, name);
    return st;
}

void gpu_nccl_close(gpu_comm_t *gc)
{
    const msr_gpu_api_t *api = gc->api;
    void *nc = gc->nc;
    gc->nc = NULL;
    if (msr_comm_status(gc->comm) != MSR_OK) {
        api->comm_abort(api, nc);
        return;
    }
    uint64_t deadline = msr_deadline_in_ms(msr_env_i64("MSR_COMM_CLOSE_MS", 1000, 0, 600000));
    msr_status_t st = api->comm_finalize(api, nc);
    while (st == MSR_IN_PROGRESS && !msr_deadline_passed(deadline)) {
        st = api->comm_async_error(api, nc);
        if (st == MSR_IN_PROGRESS)
            sched_yield();
    }
    if (st == MSR_OK) {
        st = api->comm_destroy(api, nc);
        if (st == MSR_OK)
            return;
        /* ncclCommDestroy freed it, failed or not */
        MSR_DEBUG("comm: ncclCommDestroy: %s", msr_last_error());
        return;
    }
    MSR_DEBUG("comm: ncclCommFinalize did not finish (%s): aborting the communicator",
              st == MSR_IN_PROGRESS ? "MSR_COMM_CLOSE_MS passed" : msr_last_error());
    api->comm_abort(api, nc);
}

/* The NCCL calls of one operation (a group for alltoallv). */
static msr_status_t issue(gpu_req_t *r)
{
    gpu_comm_t *gc = r->gc;
    const msr_gpu_api_t *api = gc->api;
    const msr_coll_args_t *a = &r->pub.args;
    void *nc = gc->nc, *s = r->stream;
    size_t es = msr_dtype_size(a->dtype);
    int n = gc->comm->size;
    /* The average over one rank is the sum, bit for bit. NCCL before
     * 2.29.7 leaves the last count % blocks elements of a one-rank average
     * unwritten (its one-rank kernel splits the range by floor division;
     * NCCL issue 1950): the first run on a GPU caught it at 4099 doubles. */
    msr_op_t op = n == 1 && a->op == MSR_OP_AVG ? MSR_OP_SUM : a->op;
    switch (a->coll) {
    case MSR_COLL_ALLREDUCE:
        return api->allreduce(api, a->sendbuf, a->recvbuf, a->count, a->dtype, op, nc, s);
    case MSR_COLL_REDUCE_SCATTER:
        return api->reduce_scatter(api, a->sendbuf, a->recvbuf, a->count, a->dtype, op, nc, s);
    case MSR_COLL_ALLGATHER:
        return api->allgather(api, a->sendbuf, a->recvbuf, a->count, a->dtype, nc, s);
    case MSR_COLL_BROADCAST:
        return api->broadcast(api, a->recvbuf, a->recvbuf, a->count, a->dtype, a->root, nc, s);
    case MSR_COLL_REDUCE:
        return api->reduce(api, a->sendbuf, a->recvbuf, a->count, a->dtype, op, a->root, nc, s);
    case MSR_COLL_ALLTOALL: {
        const void *in = a->sendbuf;
        if (a->in_place && a->count) {
            /* NCCL's alltoall is not in place: send from a copy */
            size_t bytes = (size_t)n * a->count * es;
            msr_status_t st = api->device_alloc(api, bytes, &r->tmp);
            if (st != MSR_OK)
                return st;
            st = api->copy_async(api, r->tmp, a->recvbuf, bytes, MSR_GPU_D2D, s);
            if (st != MSR_OK)
                return st;
            in = r->tmp;
        }
        return api->alltoall(api, in, a->recvbuf, a->count, a->dtype, nc, s);
    }
    case MSR_COLL_ALLTOALLV: {
        const uint64_t *v = a->v; /* per rank j: sendcount, sdispl, recvcount, rdispl */
        msr_status_t st = api->group_start(api);
        /* inside the group the calls are only recorded (a non-blocking
         * communicator may still say "in progress"); the group's end
         * queues them */
        for (int j = 0; j < n && (st == MSR_OK || st == MSR_IN_PROGRESS); j++) {
            if (v[4 * j])
                st = api->send(api, (const char *)a->sendbuf + v[4 * j + 1] * es, v[4 * j],
                               a->dtype, j, nc, s);
            if ((st == MSR_OK || st == MSR_IN_PROGRESS) && v[4 * j + 2])
                st = api->recv(api, (char *)a->recvbuf + v[4 * j + 3] * es, v[4 * j + 2], a->dtype,
                               j, nc, s);
        }
        msr_status_t est = api->group_end(api); /* always closes the group */
        return st != MSR_OK && st != MSR_IN_PROGRESS ? st : est;
    }
    case MSR_COLL_BARRIER:
        return api->allreduce(api, gc->scratch, gc->scratch, 1, MSR_DTYPE_F32, MSR_OP_SUM, nc, s);
    case MSR_COLL_SEND:
        return api->send(api, a->sendbuf, a->count, a->dtype, a->root, nc, s);
    case MSR_COLL_RECV:
        return api->recv(api, a->recvbuf, a->count, a->dtype, a->root, nc, s);
    }
    return MSR_ERR_INVALID_ARG;
}

/* Queues r's calls on its stream and records r->event. Returns an
 * argument error or MSR_ERR_NO_MEMORY before anything was queued (r not
 * started), else MSR_OK: r queued, or the communicator failed with r. */
static msr_status_t queue(gpu_req_t *r)
{
    gpu_comm_t *gc = r->gc;
    const msr_gpu_api_t *api = gc->api;
    msr_status_t st = issue(r);
    if (st == MSR_ERR_INVALID_ARG || st == MSR_ERR_NO_MEMORY)
        return st; /* refused before anything was queued: r not started */
    /* A non-blocking communicator may still be queueing the kernels: wait
     * until it has (no other call may reach it before), then mark the end. */
    if (st == MSR_IN_PROGRESS)
        st = gpu_settle(gc, gc->nc, r->pub.deadline);
    if (st == MSR_OK)
        st = api->event_record(api, r->event, r->stream);
    if (st != MSR_OK && r->pub.status == MSR_IN_PROGRESS) {
        char why[200];
        snprintf(why, sizeof why, "%s", msr_last_error());
        gpu_comm_fail(gc, st, 1, "nccl: queueing an operation: %s", why);
    }
    return MSR_OK;
}

/* A send and its receive tell each other their lengths in bytes over the
 * host communicator (the tags keep the two directions apart; each pair of
 * members matches them in order, as NCCL matches its sends and receives).
 * Lock held. */
static msr_status_t lengths_post(gpu_req_t *r)
{
    gpu_comm_t *gc = r->gc;
    msr_comm_t *h = gc->host;
    const msr_coll_args_t *a = &r->pub.args;
    int send = a->coll == MSR_COLL_SEND;
    r->len_mine = a->count * msr_dtype_size(a->dtype);
    int64_t left =
        r->pub.deadline == MSR_DEADLINE_NEVER ? -1 : msr_deadline_left_ms(r->pub.deadline);
    msr_comm_set_timeout(h, left == 0 ? 1 : left);
    msr_status_t st = msr_comm_isend(h, &r->len_mine, 1, MSR_DTYPE_I64, a->root,
                                     send ? GPU_TAG_LEN_SEND : GPU_TAG_LEN_RECV, &r->host_req);
    if (st != MSR_OK)
        return st;
    st = msr_comm_irecv(h, &r->len_peer, 1, MSR_DTYPE_I64, a->root,
                        send ? GPU_TAG_LEN_RECV : GPU_TAG_LEN_SEND, &r->len_req);
    if (st != MSR_OK) {
        /* eight bytes go out at once, or the host communicator is broken:
         * either way this wait is short */
        char why[200];
        snprintf(why, sizeof why, "%s", msr_last_error());
        msr_comm_wait(r->host_req);
        r->host_req = NULL;
        msr_err_set("%s", why);
    }
    return st;
}

/* MSR_OK once both lengths are known and equal; MSR_ERR_TRUNCATED, saying
 * both, where they differ. Lock held. */
static msr_status_t lengths_check(gpu_req_t *r)
{
    msr_status_t st = MSR_OK;
    if (r->len_req)
        st = msr_comm_test(&r->len_req); /* NULL once finished */
    if (st == MSR_OK && r->host_req)
        st = msr_comm_test(&r->host_req);
    if (st != MSR_OK)
        return st;
    const msr_coll_args_t *a = &r->pub.args;
    unsigned long long mine = r->len_mine, peer = r->len_peer;
    if (mine == peer)
        return MSR_OK;
    if (a->coll == MSR_COLL_SEND)
        msr_err_set("send: rank %d posted a receive of %llu bytes for this message of %llu",
                    a->root, peer, mine);
    else if (peer > mine)
        msr_err_set("recv: the message from rank %d has %llu bytes, more than the buffer's %llu",
                    a->root, peer, mine);
    else
        msr_err_set("recv: the message from rank %d has %llu bytes, fewer than the %llu expected",
                    a->root, peer, mine);
    return MSR_ERR_TRUNCATED;
}

msr_status_t gpu_nccl_start(gpu_req_t *r)
{
    gpu_comm_t *gc = r->gc;
    msr_coll_t c = r->pub.args.coll;
    if (c == MSR_COLL_SEND || c == MSR_COLL_RECV) {
        msr_status_t st = lengths_post(r);
        if (st != MSR_OK)
            return st;
    } else if (gc->deferred == 0) {
        return queue(r);
    }
    r->deferred = 1;
    gc->deferred++;
    return MSR_OK;
}

msr_status_t gpu_nccl_step(gpu_req_t *r, int *may_post)
{
    gpu_comm_t *gc = r->gc;
    const msr_gpu_api_t *api = gc->api;
    if (!r->deferred)
        return api->event_query(api, r->event);
    if (!(*may_post & GPU_POST_COLL))
        return MSR_IN_PROGRESS; /* an earlier request is queued first */
    msr_status_t st = lengths_check(r);
    if (st == MSR_IN_PROGRESS)
        *may_post &= ~GPU_POST_COLL;
    if (st != MSR_OK)
        return st;
    r->deferred = 0;
    gc->deferred--;
    st = queue(r);
    if (st != MSR_OK)
        return st;
    if (r->pub.status != MSR_IN_PROGRESS)
        return r->pub.status; /* the communicator failed with it */
    return api->event_query(api, r->event);
}
