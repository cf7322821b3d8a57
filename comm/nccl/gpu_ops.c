/* The two device backends' ops tables and the entries they share: posting,
 * waiting and testing requests, the blocking run, waiting on a stream,
 * split (and dup), close and release (gpu_comm.c holds the communicator,
 * its progress and its failures). */

#include <sched.h>
#include <stdio.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "base/util.h"
#include "comm/nccl/gpu_impl.h"
#include "base/err.h"

/* ---- requests ---- */

/* This member cannot take part in an operation it was called for: out of
 * memory before the operation's place in the order was taken. The others
 * would wait for it until their deadline: the communicator breaks with st
 * and tells them now (gpu_comm_fail: NCCL aborted, the host communicator
 * failed naming this rank). msr_last_error() keeps this member's reason.
 * Lock held. */
static void give_up_locked(gpu_comm_t *gc, msr_status_t st)
{
    char why[160];
    snprintf(why, sizeof why, "%s", msr_last_error());
    gpu_comm_fail(gc, st, 1, "%s", why);
    msr_err_set("%s", why);
}

msr_status_t gpu_op_post(msr_comm_t *comm, msr_comm_req_t **req_p, const msr_coll_args_t *a,
                         uint64_t deadline)
{
    gpu_comm_t *gc = comm->be;
    if ((a->coll == MSR_COLL_SEND || a->coll == MSR_COLL_RECV) && a->tag != 0) {
        msr_err_set("%s: tag %d on a device communicator (device messages match by "
                    "order: the tag must be 0)",
                    a->coll == MSR_COLL_SEND ? "send" : "recv", a->tag);
        return MSR_ERR_UNSUPPORTED;
    }
    gpu_req_t *r = msr_calloc(1, sizeof *r);
    if (r == NULL) {
        msr_err_set("%s: out of memory for a request", comm->ops->name);
        pthread_mutex_lock(&gc->lock);
        give_up_locked(gc, MSR_ERR_NO_MEMORY);
        pthread_mutex_unlock(&gc->lock);
        return MSR_ERR_NO_MEMORY;
    }
    r->gc = gc;
    r->pub.comm = comm;
    r->pub.args = *a;
    r->pub.status = MSR_IN_PROGRESS;
    r->pub.deadline = deadline == MSR_DEADLINE_LAZY
                          ? msr_deadline_in_ms(atomic_load(&comm->timeout_ms))
                          : deadline;
    r->stream = a->stream ? a->stream : comm->own_stream;
    msr_list_init(&r->link);
    pthread_mutex_lock(&gc->lock);
    msr_status_t st = msr_comm_check_usable(comm, comm->ops->name);
    if (st != MSR_OK)
        goto err_unlock;
    st = gc->api->set_device(gc->api, gc->device);
    if (st != MSR_OK)
        goto err_unlock;
    st = gpu_event_get(gc, &r->event);
    if (st != MSR_OK)
        goto err_give_up;
    msr_list_push_back(&gc->active, &r->link);
    st = gc->kind == GPU_KIND_NCCL ? gpu_nccl_start(r) : gpu_staged_start(r);
    if (r->pub.status == MSR_IN_PROGRESS && st != MSR_OK) {
        /* not started: the request goes; a refused argument leaves the
         * communicator usable, a lack of memory gives up on it */
        gpu_req_leave(r);
        gpu_req_release(r);
        goto err_give_up;
    }
    /* a deferred send or receive whose peer's length is already here is
     * queued now rather than at the next wait or test */
    if (r->deferred)
        gpu_progress(gc);
    pthread_mutex_unlock(&gc->lock);
    *req_p = &r->pub;
    return MSR_OK;

err_give_up:
    if (st == MSR_ERR_NO_MEMORY)
        give_up_locked(gc, st);
err_unlock:
    pthread_mutex_unlock(&gc->lock);
    msr_free(r);
    return st;
}

/* Waits: polls for spin_ns, then naps (lock released) from 10 us doubling
 * to 1 ms; never past the request's deadline, which gpu_progress checks. */
msr_status_t gpu_op_wait(msr_comm_req_t *pub)
{
    gpu_req_t *r = (gpu_req_t *)pub;
    gpu_comm_t *gc = r->gc;
    uint64_t start = 0;
    long nap_ns = 10000;
    pthread_mutex_lock(&gc->lock);
    gc->api->set_device(gc->api, gc->device);
    while (r->pub.status == MSR_IN_PROGRESS) {
        if (gpu_progress(gc))
            nap_ns = 10000;
        if (r->pub.status != MSR_IN_PROGRESS)
            break;
        pthread_mutex_unlock(&gc->lock);
        uint64_t now = msr_now_ns();
        if (start == 0)
            start = now;
        if (now - start < gc->spin_ns) {
            sched_yield();
        } else {
            struct timespec ts = {0, nap_ns};
            nanosleep(&ts, NULL);
            if (nap_ns < 1000000)
                nap_ns *= 2;
        }
        pthread_mutex_lock(&gc->lock);
    }
    msr_status_t st = r->pub.status;
    pthread_mutex_unlock(&gc->lock);
    return st;
}

msr_status_t gpu_op_test(msr_comm_req_t *pub)
{
    gpu_req_t *r = (gpu_req_t *)pub;
    gpu_comm_t *gc = r->gc;
    pthread_mutex_lock(&gc->lock);
    if (r->pub.status == MSR_IN_PROGRESS) {
        gc->api->set_device(gc->api, gc->device);
        gpu_progress(gc);
    }
    msr_status_t st = r->pub.status;
    pthread_mutex_unlock(&gc->lock);
    return st;
}

void gpu_op_req_free(msr_comm_req_t *pub)
{
    gpu_req_t *r = (gpu_req_t *)pub;
    gpu_comm_t *gc = r->gc;
    pthread_mutex_lock(&gc->lock);
    gpu_req_release(r);
    pthread_mutex_unlock(&gc->lock);
    msr_free(r);
}

/* Blocking: a request of our own, waited for and freed (comm.c's reference
 * counting is not involved: the caller holds comm throughout). */
msr_status_t gpu_op_run(msr_comm_t *comm, const msr_coll_args_t *a, uint64_t deadline)
{
    msr_comm_req_t *req = NULL;
    msr_status_t st = gpu_op_post(comm, &req, a, deadline);
    if (st != MSR_OK)
        return st;
    st = req->status == MSR_IN_PROGRESS ? gpu_op_wait(req) : req->status;
    if (st != MSR_OK)
        msr_err_set("%s", req->error[0] ? req->error : msr_status_str(st));
    req->args.v = NULL; /* the caller's */
    gpu_op_req_free(req);
    return st;
}

/* Whether r's last part is queued on its stream (its event recorded). */
static int on_device(const gpu_req_t *r)
{
    return r->gc->kind == GPU_KIND_STAGED ? r->stage == GPU_STAGE_H2D : !r->deferred;
}

msr_status_t gpu_op_wait_stream(msr_comm_req_t *pub, void *stream)
{
    gpu_req_t *r = (gpu_req_t *)pub;
    gpu_comm_t *gc = r->gc;
    msr_status_t st = MSR_OK;
    /* The staged copies back are queued only once the host part is done,
     * and a deferred NCCL operation once the lengths are told: wait for
     * that here (its deadline bounds it). */
    pthread_mutex_lock(&gc->lock);
    gc->api->set_device(gc->api, gc->device);
    while (r->pub.status == MSR_IN_PROGRESS && !on_device(r)) {
        gpu_progress(gc);
        if (r->pub.status != MSR_IN_PROGRESS || on_device(r))
            break;
        pthread_mutex_unlock(&gc->lock);
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&gc->lock);
    }
    if (r->pub.status != MSR_IN_PROGRESS && r->pub.status != MSR_OK) {
        st = r->pub.status;
        msr_err_set("%s", r->pub.error[0] ? r->pub.error : msr_status_str(st));
    } else if (r->event) {
        st = gc->api->stream_wait_event(gc->api, stream, r->event);
    }
    pthread_mutex_unlock(&gc->lock);
    return st;
}

/* ops->give_up: comm.c ran out of memory for an operation's arguments
 * (alltoallv's counts) before the backend saw it. */
static void gpu_op_give_up(msr_comm_t *comm, msr_status_t st, const char *why)
{
    gpu_comm_t *gc = comm->be;
    if (st == MSR_ERR_CANCELED || st == MSR_ERR_INVALID_ARG || st == MSR_ERR_TRUNCATED)
        return;
    char mine[160]; /* why may be msr_last_error()'s own buffer */
    snprintf(mine, sizeof mine, "%s", why);
    pthread_mutex_lock(&gc->lock);
    msr_err_set("%s", mine);
    give_up_locked(gc, st);
    pthread_mutex_unlock(&gc->lock);
}

/* ---- split, close, release ---- */

msr_status_t gpu_op_split(msr_comm_t *comm, int color, int key, unsigned flags,
                          msr_comm_t **newcomm_p)
{
    gpu_comm_t *gc = comm->be;
    const msr_gpu_api_t *api = gc->api;
    msr_comm_t *hnew = NULL;
    /* The host communicator first: it settles membership and ranks (ordered
     * by key, then rank, as ncclCommSplit orders them). */
    msr_status_t st = (flags & MSR_COMM_SPLIT_DUP)
                          ? msr_comm_dup(gc->host, flags & MSR_COMM_OWN_WORKER, &hnew)
                          : msr_comm_split(gc->host, color, key, &hnew);
    if (st != MSR_OK)
        return st;
    void *nnc = NULL;
    msr_status_t mine = MSR_OK;
    char why[256] = "";
    int64_t timeout = atomic_load(&comm->timeout_ms);
    if (gc->kind == GPU_KIND_NCCL) {
        /* ncclCommSplit is collective over the parent, members without a
         * color included. */
        pthread_mutex_lock(&gc->lock);
        uint64_t deadline = msr_deadline_in_ms(timeout);
        mine = msr_comm_status(comm);
        if (mine == MSR_OK)
            mine = api->set_device(api, gc->device);
        if (mine == MSR_OK) {
            int c = (flags & MSR_COMM_SPLIT_DUP) ? 0 : color;
            gc->split_nc = NULL;
            mine = api->comm_split(api, gc->nc, c < 0 ? -1 : c, key, &gc->split_nc);
            /* settled either way: NCCL answers ncclSuccess while the split
             * still runs on its thread (its group's ncclInProgress is not
             * passed on), and the parent tells when it is done */
            if (mine == MSR_OK || mine == MSR_IN_PROGRESS)
                mine = gpu_settle(gc, gc->nc, deadline);
            if (mine == MSR_OK) {
                /* done: stored by now (from NCCL's thread) */
                nnc = __atomic_exchange_n(&gc->split_nc, NULL, __ATOMIC_ACQ_REL);
                if (c >= 0 && nnc == NULL) {
                    msr_err_set("ncclCommSplit finished without a communicator");
                    mine = MSR_ERR_BACKEND;
                }
            }
            if (mine == MSR_OK && nnc)
                mine = gpu_settle(gc, nnc, deadline);
        }
        if (mine != MSR_OK) /* before gpu_comm_fail, whose notice sets another error */
            snprintf(why, sizeof why, "%s", msr_last_error());
        if (mine != MSR_OK && mine != MSR_ERR_INVALID_ARG && msr_comm_status(comm) == MSR_OK)
            gpu_comm_fail(gc, mine, 1, "ncclCommSplit: %s", why);
        pthread_mutex_unlock(&gc->lock);
        if (mine == MSR_OK && nnc && hnew) {
            int nr = -1;
            msr_status_t rs = api->comm_user_rank(api, nnc, &nr);
            if (rs == MSR_OK && nr != msr_comm_rank(hnew)) {
                mine = MSR_ERR_INTERNAL;
                snprintf(why, sizeof why, "ncclCommSplit ranked this member %d, the host split %d",
                         nr, msr_comm_rank(hnew));
            }
        }
    }
    msr_comm_t *dnew = NULL;
    if (mine == MSR_OK && hnew) {
        mine = gpu_comm_make(comm->ctx, api, gc->kind, gc->device, hnew, nnc, timeout, &dnew);
        if (mine == MSR_OK) {
            hnew = NULL; /* dnew's now */
            nnc = NULL;
        } else {
            snprintf(why, sizeof why, "%s", msr_last_error());
        }
    }
    /* Every member of the parent learns whether all succeeded. */
    st = gpu_agree(gc->host, mine);
    if (st == MSR_OK) {
        *newcomm_p = dnew;
        return MSR_OK;
    }
    if (mine != MSR_OK) { /* this member's own failure, not the agreement's echo of it */
        msr_err_set("%s", why);
        st = mine;
    }
    if (dnew)
        msr_comm_destroy(dnew);
    if (nnc)
        api->comm_abort(api, nnc);
    msr_comm_destroy(hnew);
    return st;
}

/* Requests in flight fail with MSR_ERR_CANCELED; an NCCL communicator with
 * operations in flight, or a broken one, is aborted (its kernels stop
 * touching the buffers), a healthy idle one finalized. */
void gpu_op_close(msr_comm_t *comm)
{
    gpu_comm_t *gc = comm->be;
    pthread_mutex_lock(&gc->lock);
    gc->closed = 1;
    gc->api->set_device(gc->api, gc->device);
    if (!msr_list_empty(&gc->active) && gc->nc) {
        gc->api->comm_abort(gc->api, gc->nc);
        gc->nc = NULL;
    }
    /* The host communicator goes first: its requests in flight (the watch,
     * staged transfers) are canceled by that, and finished below without
     * waiting on anyone. */
    msr_comm_destroy(gc->host);
    gc->host = NULL;
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &gc->active)
    {
        gpu_req_t *r = MSR_CONTAINER_OF(pos, gpu_req_t, link);
        gpu_req_fail(r, MSR_ERR_CANCELED, "the communicator was destroyed");
    }
    if (gc->watch) {
        msr_comm_wait(gc->watch);
        gc->watch = NULL;
    }
    if (gc->nc)
        gpu_nccl_close(gc);
    pthread_mutex_unlock(&gc->lock);
}

void gpu_op_release(msr_comm_t *comm)
{
    gpu_comm_t *gc = comm->be;
    const msr_gpu_api_t *api = gc->api;
    api->set_device(api, gc->device);
    for (int i = 0; i < gc->n_grave; i++) {
        gpu_grave_t *g = &gc->grave[i];
        if (g->event && api->event_query(api, g->event) != MSR_OK) {
            MSR_DEBUG("comm: a copy of a failed device operation is still queued: leaving its "
                      "buffers");
            continue;
        }
        api->host_free(api, g->pinned);
        api->device_free(api, g->dev);
        api->event_destroy(api, g->event);
    }
    msr_free(gc->grave);
    for (int i = 0; i < gc->n_events; i++)
        api->event_destroy(api, gc->events[i]);
    msr_free(gc->events);
    if (gc->pinned)
        api->host_free(api, gc->pinned);
    if (gc->scratch)
        api->device_free(api, gc->scratch);
    api->stream_destroy(api, comm->own_stream);
    pthread_mutex_destroy(&gc->lock);
    msr_free(gc);
}

const msr_comm_backend_ops_t gpu_nccl_ops = {
    .name = "nccl",
    .post = gpu_op_post,
    .run = gpu_op_run,
    .wait = gpu_op_wait,
    .test = gpu_op_test,
    .req_free = gpu_op_req_free,
    .split = gpu_op_split,
    .close = gpu_op_close,
    .release = gpu_op_release,
    .wait_stream = gpu_op_wait_stream,
    .give_up = gpu_op_give_up,
};

const msr_comm_backend_ops_t gpu_staged_ops = {
    .name = "staged",
    .post = gpu_op_post,
    .run = gpu_op_run,
    .wait = gpu_op_wait,
    .test = gpu_op_test,
    .req_free = gpu_op_req_free,
    .split = gpu_op_split,
    .close = gpu_op_close,
    .release = gpu_op_release,
    .wait_stream = gpu_op_wait_stream,
    .give_up = gpu_op_give_up,
};
