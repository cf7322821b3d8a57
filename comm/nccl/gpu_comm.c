/* What both device backends share: making the communicator (stream, lock,
 * host communicator and its watch), requests and their events, progress,
 * deadlines and failures (abort, news to and from the other members). The
 * ops tables' entries (post, the wait loop, split, close and release) and
 * the two tables are in gpu_ops.c. */

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "base/util.h"
#include "comm/nccl/gpu_impl.h"
#include "base/err.h"

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

/* Tells the other members that this one gave up, and why: the host
 * communicator fails with st, which sends its members an abort notice
 * naming this rank (comm/ucx: ucx_comm_give_up). A status the host
 * communicator does not give up for (a refused argument) falls back to a
 * receive that cannot match with a deadline already passed: its timeout
 * fails the host communicator and tells the members the same way. */
static void break_host(gpu_comm_t *gc, msr_status_t st, const char *why)
{
    msr_comm_t *h = gc->host;
    if (h == NULL || msr_comm_status(h) != MSR_OK)
        return;
    msr_comm_give_up(h, st, why);
    if (msr_comm_status(h) == MSR_OK) {
        int64_t keep = msr_comm_timeout(h);
        msr_comm_set_timeout(h, 0);
        unsigned char b;
        /* MSR_ERR_TIMEOUT, by construction */
        (void)msr_comm_recv(h, &b, 1, MSR_DTYPE_U8, msr_comm_rank(h), GPU_TAG_BREAK);
        msr_comm_set_timeout(h, keep);
    }
    MSR_DEBUG("comm: device communicator: told the members it gave up (%s)",
              msr_status_name(msr_comm_status(h)));
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
void gpu_req_leave(gpu_req_t *r)
{
    msr_list_remove(&r->link);
}

/* Fails one request: its status and message; what its copies may still
 * touch is kept until release. Lock held. */
void gpu_req_fail(gpu_req_t *r, msr_status_t st, const char *why)
{
    gpu_comm_t *gc = r->gc;
    if (r->pub.status != MSR_IN_PROGRESS)
        return;
    r->pub.status = st;
    snprintf(r->pub.error, sizeof r->pub.error, "%s", why);
    gpu_req_leave(r);
    if (r->host_req) {
        /* finished by now if the host communicator broke; else it is
         * waited for within its own deadline */
        msr_comm_wait(r->host_req);
        r->host_req = NULL;
    }
    if (r->len_req) {
        msr_comm_wait(r->len_req);
        r->len_req = NULL;
    }
    if (r->deferred) {
        r->deferred = 0;
        gc->deferred--;
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
    msr_comm_broken_why(gc->comm, why);
    MSR_DEBUG("comm: %s device communicator broken (%s): %s",
              gc->kind == GPU_KIND_NCCL ? "nccl" : "staged", msr_status_name(st), why);
    if (gc->nc) {
        /* NCCL's kernels stop and its resources go; later calls never
         * reach it (the communicator is broken). */
        gc->api->comm_abort(gc->api, gc->nc);
        gc->nc = NULL;
    }
    if (notify)
        break_host(gc, st, why);
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &gc->active)
    {
        gpu_req_t *r = MSR_CONTAINER_OF(pos, gpu_req_t, link);
        gpu_req_fail(r, st, why);
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
                                                      : gpu_nccl_step(r, &may_post);
        if (r->pub.status != MSR_IN_PROGRESS)
            return 1; /* the step broke the communicator: every request failed */
        if (st == MSR_OK) {
            r->pub.status = MSR_OK;
            gpu_req_leave(r);
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
            /* a receive of the wrong size (staged: the host communicator's
             * receive; nccl: the lengths told, nothing queued), or an
             * argument NCCL refused: the host communicator stays usable,
             * and so does this one */
            gpu_req_fail(r, st, msr_last_error());
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
