/* What both device backends share: making the communicator (stream, lock,
 * host communicator and its watch), requests and their events, progress,
 * deadlines and failures (abort, news to and from the other members), the
 * wait loop, split, close and release, and the two ops tables. */
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "base/util.h"
#include "comm/nccl/gpu_impl.h"
#include "base/err.h"

const msr_comm_backend_ops_t gpu_nccl_ops;
const msr_comm_backend_ops_t gpu_staged_ops;

/* ---- the watch: news of failures from the other members ---- */

/* Posts a receive on the host communicator that no member ever sends to,
 * without a deadline: it only ends when the host communicator breaks (a
 * member lost, or one that gave up and said so), and then with that
 * status. Lock held or not yet shared. */
static msr_status_t watch_post(gpu_comm_t *gc)
{
    msr_comm_t *h = gc->host;
    int64_t keep = msr_comm_timeout(h);
    msr_comm_set_timeout(h, -1);
    msr_status_t st = msr_comm_irecv(h, gc->watch_buf, 1, MSR_DTYPE_U8, msr_comm_rank(h),
                                     GPU_TAG_WATCH, &gc->watch);
    msr_comm_set_timeout(h, keep);
    return st;
}

/* Tells the other members that this one gave up: a receive that cannot
 * match, with a deadline already passed, fails the host communicator,
 * which sends its members an abort notice (comm/ucx: ucx_comm_fail). */
static void break_host(gpu_comm_t *gc)
{
    msr_comm_t *h = gc->host;
    if (h == NULL || msr_comm_status(h) != MSR_OK)
        return;
    int64_t keep = msr_comm_timeout(h);
    msr_comm_set_timeout(h, 0);
    unsigned char b;
    msr_status_t st = msr_comm_recv(h, &b, 1, MSR_DTYPE_U8, msr_comm_rank(h), GPU_TAG_BREAK);
    msr_comm_set_timeout(h, keep);
    MSR_DEBUG("comm: device communicator: told the members it gave up (%s)", msr_status_name(st));
}

/* The watch ended: the host communicator broke under us. Lock held. */
static void watch_check(gpu_comm_t *gc, uint64_t now)
{
    if (gc->watch == NULL || now < gc->next_watch_ns)
        return;
    gc->next_watch_ns = now + 1000000ull; /* every millisecond at most */
    msr_status_t st = msr_comm_test(&gc->watch);
    if (st == MSR_IN_PROGRESS)
        return;
    /* gc->watch is NULL now (freed by msr_comm_test) */
    if (st == MSR_OK || st == MSR_ERR_CANCELED)
        st = MSR_ERR_PEER_LOST;
    gpu_comm_fail(gc, st, 0, "a member of the device communicator failed: %s", msr_last_error());
}

/* ---- the communicator ---- */

msr_status_t gpu_comm_make(msr_ctx_t *ctx, const msr_gpu_api_t *api, gpu_kind_t kind, int device,
                           msr_comm_t *host, void *nc, int64_t timeout_ms, msr_comm_t **comm_p)
{
    int n = msr_comm_size(host);
    int *wr = msr_calloc((size_t)n, sizeof *wr);
    if (wr == NULL)
        return MSR_ERR_NO_MEMORY;
    for (int i = 0; i < n; i++)
        wr[i] = msr_comm_world_rank(host, i);
    msr_comm_t *comm = NULL;
    void *stream = NULL;
    const msr_comm_backend_ops_t *ops = kind == GPU_KIND_NCCL ? &gpu_nccl_ops : &gpu_staged_ops;
    msr_status_t st = msr_comm_alloc(ctx, ops, msr_comm_rank(host), n, wr, timeout_ms, &comm);
    msr_free(wr);
    if (st != MSR_OK)
        return st;
    gpu_comm_t *gc = msr_calloc(1, sizeof *gc);
    if (gc == NULL) {
        st = MSR_ERR_NO_MEMORY;
        goto err_comm;
    }
    gc->comm = comm;
    gc->api = api;
    gc->kind = kind;
    gc->device = device;
    gc->host = host;
    msr_list_init(&gc->active);
    gc->spin_ns = (uint64_t)msr_env_i64("MSR_COMM_GPU_SPIN_US", 2000, 0, INT32_MAX) * 1000;
    if (pthread_mutex_init(&gc->lock, NULL) != 0) {
        msr_err_set("comm: pthread_mutex_init failed");
        st = MSR_ERR_SYSTEM;
        goto err_gc;
    }
    st = api->set_device(api, device);
    if (st != MSR_OK)
        goto err_mutex;
    st = api->stream_create(api, &stream);
    if (st != MSR_OK)
        goto err_mutex;
    if (kind == GPU_KIND_NCCL) {
        st = api->device_alloc(api, 16, &gc->scratch);
        if (st != MSR_OK)
            goto err_stream;
    }
    st = watch_post(gc);
    if (st != MSR_OK)
        goto err_scratch;
    gc->nc = nc;
    comm->be = gc;
    comm->gpu = device;
    comm->own_stream = stream;
    atomic_store(&comm->stream, stream);
    *comm_p = comm;
    return MSR_OK;

err_scratch:
    if (gc->scratch)
        api->device_free(api, gc->scratch);
err_stream:
    api->stream_destroy(api, stream);
err_mutex:
    pthread_mutex_destroy(&gc->lock);
err_gc:
    msr_free(gc);
err_comm:
    msr_comm_free(comm);
    return st;
}

/* Keeps memory that copies in flight may still touch. Lock held. */
static void bury(gpu_comm_t *gc, void *pinned, void *dev, void *event)
{
    if (pinned == NULL && dev == NULL)
        return;
    if (gc->n_grave == gc->cap_grave) {
        int cap = gc->cap_grave ? 2 * gc->cap_grave : 8;
        gpu_grave_t *g = msr_realloc_array(gc->grave, (size_t)cap, sizeof *g);
        if (g == NULL) {
            MSR_WARN("comm: out of memory: leaking a staging block of a failed operation");
            return;
        }
        gc->grave = g;
        gc->cap_grave = cap;
    }
    gc->grave[gc->n_grave++] = (gpu_grave_t){pinned, dev, event};
}

/* A request that ends (done or failed) leaves the list. */
static void req_leave(gpu_req_t *r)
{
    msr_list_remove(&r->link);
}

/* Fails one request: its status and message; what its copies may still
 * touch is kept until release. Lock held. */
static void req_fail(gpu_req_t *r, msr_status_t st, const char *why)
{
    gpu_comm_t *gc = r->gc;
    if (r->pub.status != MSR_IN_PROGRESS)
        return;
    r->pub.status = st;
    snprintf(r->pub.error, sizeof r->pub.error, "%s", why);
    req_leave(r);
    if (r->host_req) {
        /* finished by now if the host communicator broke; else it is
         * waited for within its own deadline */
        msr_comm_wait(r->host_req);
        r->host_req = NULL;
    }
    /* Copies or NCCL kernels queued before the failure may still run: the
     * event tells when they are done. */
    if (r->pinned || r->tmp) {
        if (r->pinned_cached) {
            gc->pinned = NULL; /* the cache forgets it: the grave owns it */
            gc->pinned_len = 0;
            gc->pinned_busy = 0;
        }
        bury(gc, r->pinned, r->tmp, r->event);
        r->pinned = NULL;
        r->pinned_cached = 0;
        r->tmp = NULL;
        r->event = NULL; /* destroyed with the grave */
    }
}

void gpu_comm_fail(gpu_comm_t *gc, msr_status_t st, int notify, const char *fmt, ...)
{
    char why[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (!msr_comm_break(gc->comm, st))
        return; /* broken before: the first failure did the rest */
    MSR_DEBUG("comm: %s device communicator broken (%s): %s",
              gc->kind == GPU_KIND_NCCL ? "nccl" : "staged", msr_status_name(st), why);
    if (gc->nc) {
        /* NCCL's kernels stop and its resources go; later calls never
         * reach it (the communicator is broken). */
        gc->api->comm_abort(gc->api, gc->nc);
        gc->nc = NULL;
    }
    if (notify)
        break_host(gc);
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &gc->active)
    {
        gpu_req_t *r = MSR_CONTAINER_OF(pos, gpu_req_t, link);
        req_fail(r, st, why);
    }
}

/* ---- events ---- */

msr_status_t gpu_event_get(gpu_comm_t *gc, void **event_p)
{
    if (gc->n_events > 0) {
        *event_p = gc->events[--gc->n_events];
        return MSR_OK;
    }
    return gc->api->event_create(gc->api, event_p);
}

static void event_put(gpu_comm_t *gc, void *event)
{
    if (event == NULL)
        return;
    if (gc->n_events == gc->cap_events) {
        int cap = gc->cap_events ? 2 * gc->cap_events : 8;
        void **e = msr_realloc_array(gc->events, (size_t)cap, sizeof *e);
        if (e == NULL) {
            gc->api->event_destroy(gc->api, event);
            return;
        }
        gc->events = e;
        gc->cap_events = cap;
    }
    gc->events[gc->n_events++] = event;
}

void gpu_req_release(gpu_req_t *r)
{
    gpu_comm_t *gc = r->gc;
    event_put(gc, r->event);
    r->event = NULL;
    if (r->pinned_cached)
        gc->pinned_busy = 0;
    else if (r->pinned)
        gc->api->host_free(gc->api, r->pinned);
    r->pinned = NULL;
    r->pinned_cached = 0;
    if (r->tmp)
        gc->api->device_free(gc->api, r->tmp);
    r->tmp = NULL;
    msr_free(r->hv);
    r->hv = NULL;
}

/* ---- progress ---- */

int gpu_progress(gpu_comm_t *gc)
{
    if (msr_comm_status(gc->comm) != MSR_OK)
        return 0;
    uint64_t now = msr_now_ns();
    watch_check(gc, now);
    if (gc->nc) {
        msr_status_t st = gc->api->comm_async_error(gc->api, gc->nc);
        if (st != MSR_OK && st != MSR_IN_PROGRESS) {
            gpu_comm_fail(gc, st, 1, "nccl reports an asynchronous error: %s", msr_last_error());
            return 1;
        }
    }
    int done = 0, may_post = GPU_POST_COLL | GPU_POST_P2P;
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &gc->active)
    {
        gpu_req_t *r = MSR_CONTAINER_OF(pos, gpu_req_t, link);
        msr_status_t st = gc->kind == GPU_KIND_STAGED ? gpu_staged_step(r, &may_post)
                                                      : gc->api->event_query(gc->api, r->event);
        if (st == MSR_OK) {
            r->pub.status = MSR_OK;
            req_leave(r);
            done = 1;
            continue;
        }
        if (st == MSR_IN_PROGRESS) {
            if (now >= r->pub.deadline) {
                gpu_comm_fail(gc, MSR_ERR_TIMEOUT, 1,
                              "%s device operation: deadline passed after %lld ms",
                              gc->kind == GPU_KIND_NCCL ? "nccl" : "staged",
                              (long long)atomic_load(&gc->comm->timeout_ms));
                return 1;
            }
            continue;
        }
        if (st == MSR_ERR_TRUNCATED || st == MSR_ERR_INVALID_ARG) {
            /* a staged receive of the wrong size: the host communicator
             * stays usable, and so does this one */
            req_fail(r, st, msr_last_error());
            done = 1;
            continue;
        }
        gpu_comm_fail(gc, st, 1, "%s", msr_last_error());
        return 1;
    }
    return done;
}

msr_status_t gpu_settle(gpu_comm_t *gc, void *nc, uint64_t deadline)
{
    for (unsigned i = 0;; i++) {
        msr_status_t st = gc->api->comm_async_error(gc->api, nc);
        if (st != MSR_IN_PROGRESS)
            return st;
        uint64_t now = msr_now_ns();
        if (now >= deadline) {
            msr_err_set("nccl: still in progress at the deadline");
            return MSR_ERR_TIMEOUT;
        }
        watch_check(gc, now);
        st = msr_comm_status(gc->comm);
        if (st != MSR_OK)
            return st;
        if (i > 1000) {
            struct timespec ts = {0, 100000}; /* 0.1 ms */
            nanosleep(&ts, NULL);
        } else {
            sched_yield();
        }
    }
}

msr_status_t gpu_agree(msr_comm_t *host, msr_status_t mine)
{
    int n = msr_comm_size(host);
    int32_t *all = msr_calloc((size_t)n, sizeof *all);
    if (all == NULL) {
        msr_err_set("comm: out of memory for the agreement of %d members", n);
        return MSR_ERR_NO_MEMORY;
    }
    int32_t me = mine;
    msr_status_t st = msr_comm_allgather(host, &me, all, 1, MSR_DTYPE_I32);
    if (st == MSR_OK) {
        for (int i = 0; i < n; i++)
            if (all[i] != MSR_OK) {
                st = (msr_status_t)all[i];
                if (i != msr_comm_rank(host))
                    msr_err_set("member %d of the group failed (%s)", i, msr_status_name(st));
                break;
            }
    }
    msr_free(all);
    return st;
}

/* ---- requests ---- */

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
        msr_err_set("out of memory for a request");
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
    msr_status_t st = msr_comm_status(comm);
    if (st != MSR_OK) {
        msr_err_set("the communicator is broken (%s)", msr_status_str(st));
        goto err_unlock;
    }
    st = gc->api->set_device(gc->api, gc->device);
    if (st != MSR_OK)
        goto err_unlock;
    st = gpu_event_get(gc, &r->event);
    if (st != MSR_OK)
        goto err_unlock;
    msr_list_push_back(&gc->active, &r->link);
    st = gc->kind == GPU_KIND_NCCL ? gpu_nccl_start(r) : gpu_staged_start(r);
    if (r->pub.status == MSR_IN_PROGRESS && st != MSR_OK) {
        /* not started: the request goes, the communicator stays usable */
        req_leave(r);
        gpu_req_release(r);
        goto err_unlock;
    }
    pthread_mutex_unlock(&gc->lock);
    *req_p = &r->pub;
    return MSR_OK;

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

msr_status_t gpu_op_wait_stream(msr_comm_req_t *pub, void *stream)
{
    gpu_req_t *r = (gpu_req_t *)pub;
    gpu_comm_t *gc = r->gc;
    msr_status_t st = MSR_OK;
    if (gc->kind == GPU_KIND_STAGED) {
        /* The copies back are queued only once the host part is done: wait
         * for that here (its deadline bounds it). */
        pthread_mutex_lock(&gc->lock);
        gc->api->set_device(gc->api, gc->device);
        while (r->pub.status == MSR_IN_PROGRESS && r->stage != GPU_STAGE_H2D) {
            gpu_progress(gc);
            if (r->pub.status != MSR_IN_PROGRESS || r->stage == GPU_STAGE_H2D)
                break;
            pthread_mutex_unlock(&gc->lock);
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&gc->lock);
        }
        pthread_mutex_unlock(&gc->lock);
    }
    pthread_mutex_lock(&gc->lock);
    if (r->pub.status != MSR_IN_PROGRESS && r->pub.status != MSR_OK) {
        st = r->pub.status;
        msr_err_set("%s", r->pub.error[0] ? r->pub.error : msr_status_str(st));
    } else if (r->event) {
        gc->api->set_device(gc->api, gc->device);
        st = gc->api->stream_wait_event(gc->api, stream, r->event);
    }
    pthread_mutex_unlock(&gc->lock);
    return st;
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
        req_fail(r, MSR_ERR_CANCELED, "the communicator was destroyed");
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
};
