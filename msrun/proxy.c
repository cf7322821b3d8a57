/* The node's store proxy, on a thread of its own: one completion queue for
 * the workers' calls and the upstream calls. */
#include "msrun/proxy.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/heap.h"
#include "base/list.h"
#include "base/log.h"
#include "base/map.h"
#include "base/time.h"
#include "base/util.h"
#include "rendezvous/rpc.h"

/* A node's participants of one barrier or allgather, collected until all
 * local_count of them are here, then sent upstream as one call. */
typedef struct group {
    msr_proxy_t *proxy;
    char key[MSR_KEY_MAX + 48];
    msr_rpc_method_t method;
    int generation;
    uint32_t count, local_count;
    uint32_t arrived; /* participants (barrier weights, allgather entries) */
    msr_rpc_call_t **calls;
    ProtobufCMessage **reqs; /* the calls' requests, alive while held */
    uint32_t ncalls;
    msr_timer_t timer;
    int sent;
    char name[MSR_KEY_MAX + 1];
} group_t;

/* One upstream call, answering one worker's call or a whole group. */
typedef struct fwd {
    msr_rpc_async_t async;
    msr_proxy_t *proxy;
    msr_rpc_call_t *call;  /* a single forward; NULL once its client is gone */
    ProtobufCMessage *req; /* its request (the call's, alive while held) */
    group_t *group;        /* or a group */
    uint64_t deadline;
    msr_timer_t retry; /* armed while waiting to send again */
    msr_list_t link;
} fwd_t;

/* What the proxy knows about a held worker call (msr_rpc_call_set_data). */
typedef struct held {
    fwd_t *fwd;     /* forwarded alone */
    group_t *group; /* or waiting in a group */
} held_t;

struct msr_proxy {
    msr_rpc_loop_t *loop;
    msr_rpc_server_t *server;
    msr_rpc_channel_t *up;
    uint32_t local_workers; /* the most participants a node's group may have */
    char socket_path[256];
    pthread_t thread;
    atomic_int stop;
    pthread_mutex_t stop_lock; /* held while another thread starts the shutdown */
    msr_map_t groups;
    msr_heap_t timers;  /* groups' deadlines */
    msr_heap_t retries; /* upstream calls to send again */
    msr_list_t fwds;    /* upstream calls in flight */
    pthread_mutex_t beats_lock;
    struct beat_entry {
        int rank, pid;
        msr_beat_info_t info;
    } * beats;
    size_t nbeats, beats_cap;
    _Atomic uint64_t calls_in, calls_up;
    /* ids for store writes that come without (the proxy thread's only):
     * retries upstream then apply them once too */
    uint64_t client_id, request_seq;
};

/* Gives a store write that has no request id one of the proxy's own. */
static void stamp_request(msr_proxy_t *p, msr_rpc_method_t method, ProtobufCMessage *req)
{
    uint64_t *client = NULL, *id = NULL;
    switch (method) {
    case MSR_RPC_SET:
        client = &((Msr__SetRequest *)req)->client_id;
        id = &((Msr__SetRequest *)req)->request_id;
        break;
    case MSR_RPC_ADD:
        client = &((Msr__AddRequest *)req)->client_id;
        id = &((Msr__AddRequest *)req)->request_id;
        break;
    case MSR_RPC_COMPARE_SET:
        client = &((Msr__CompareSetRequest *)req)->client_id;
        id = &((Msr__CompareSetRequest *)req)->request_id;
        break;
    case MSR_RPC_DELETE:
        client = &((Msr__DeleteRequest *)req)->client_id;
        id = &((Msr__DeleteRequest *)req)->request_id;
        break;
    default:
        return;
    }
    if (*client != 0 && *id != 0)
        return;
    *client = p->client_id;
    *id = ++p->request_seq;
}

static void held_free(msr_rpc_call_t *call)
{
    msr_free(msr_rpc_call_get_data(call));
    msr_rpc_call_set_data(call, NULL);
}

static void group_free(msr_proxy_t *p, group_t *g)
{
    msr_heap_remove(&p->timers, &g->timer);
    if (!g->sent)
        msr_map_remove(&p->groups, g->key);
    msr_free(g->calls);
    msr_free(g->reqs);
    msr_free(g);
}

/* ---- upstream ---- */

static int fwd_wanted(const fwd_t *f)
{
    if (f->group == NULL)
        return f->call != NULL;
    for (uint32_t i = 0; i < f->group->ncalls; i++)
        if (f->group->calls[i])
            return 1;
    return 0;
}

/* Answers the workers waiting on f with its outcome (the last attempt's,
 * when it ends without a new one) and frees f. */
static void fwd_finish(fwd_t *f)
{
    msr_proxy_t *p = f->proxy;
    msr_rpc_async_t *a = &f->async;
    msr_list_remove(&f->link);
    if (f->group) {
        group_t *g = f->group;
        for (uint32_t i = 0; i < g->ncalls; i++) {
            if (g->calls[i]) {
                held_free(g->calls[i]);
                msr_rpc_call_forward(g->calls[i], a);
            }
        }
        group_free(p, g);
    } else if (f->call) {
        held_free(f->call);
        msr_rpc_call_forward(f->call, a);
    }
    msr_rpc_async_cleanup(a);
    msr_free(f);
}

static void fwd_done(msr_rpc_async_t *a)
{
    fwd_t *f = MSR_CONTAINER_OF(a, fwd_t, async);
    msr_proxy_t *p = f->proxy;
    if (a->status == MSR_ERR_UNREACHABLE && !atomic_load(&p->stop) && fwd_wanted(f) &&
        msr_deadline_left_ms(f->deadline) > 100) {
        /* The coordinator went away mid-call (it may be restarting): send
         * again shortly; the workers keep waiting within their deadline. */
        msr_rpc_async_cleanup(a);
        if (msr_heap_push(&p->retries, &f->retry, msr_deadline_in_ms(50)) == MSR_OK)
            return;
    }
    fwd_finish(f);
}

static uint32_t wait_left(uint64_t deadline)
{
    int64_t ms = msr_deadline_left_ms(deadline);
    return ms > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

/* Builds the upstream request of f (a group's combined one, or the worker's
 * own) and starts it. */
static msr_status_t fwd_start(fwd_t *f)
{
    msr_proxy_t *p = f->proxy;
    msr_status_t st;
    f->async.deadline = f->deadline;
    f->async.wait_for_ready = 1;
    f->async.done = fwd_done;
    f->async.raw = 1;
    group_t *g = f->group;
    if (g == NULL) {
        st = msr_rpc_call_start(p->up, p->loop, &f->async, f->req);
    } else if (g->method == MSR_RPC_BARRIER) {
        Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
        r.generation = g->generation;
        r.name = g->name;
        r.count = g->count;
        r.weight = g->arrived;
        r.wait_ms = wait_left(f->deadline);
        st = msr_rpc_call_start(p->up, p->loop, &f->async, &r.base);
    } else {
        Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
        Msr__Contribution **entries = msr_calloc(g->arrived, sizeof *entries);
        if (entries == NULL)
            return MSR_ERR_NO_MEMORY;
        size_t n = 0;
        for (uint32_t i = 0; i < g->ncalls; i++) {
            Msr__AllgatherRequest *q = (Msr__AllgatherRequest *)g->reqs[i];
            for (size_t k = 0; k < q->n_entries && n < g->arrived; k++)
                entries[n++] = q->entries[k];
        }
        r.generation = g->generation;
        r.name = g->name;
        r.count = g->count;
        r.n_entries = n;
        r.entries = entries;
        r.wait_ms = wait_left(f->deadline);
        st = msr_rpc_call_start(p->up, p->loop, &f->async, &r.base);
        msr_free(entries);
    }
    if (st == MSR_OK)
        atomic_fetch_add(&p->calls_up, 1);
    return st;
}

/* Sends upstream on behalf of call (single, with its req) or group. */
static msr_status_t send_up(msr_proxy_t *p, msr_rpc_method_t method, ProtobufCMessage *req,
                            uint64_t deadline, msr_rpc_call_t *call, group_t *group)
{
    fwd_t *f = msr_calloc(1, sizeof *f);
    if (f == NULL)
        return MSR_ERR_NO_MEMORY;
    f->proxy = p;
    f->call = call;
    f->req = req;
    f->group = group;
    f->deadline = deadline;
    f->async.method = method;
    msr_timer_init(&f->retry);
    msr_list_push_back(&p->fwds, &f->link);
    msr_status_t st = fwd_start(f);
    if (st != MSR_OK) {
        msr_list_remove(&f->link);
        msr_free(f);
        return st;
    }
    if (call) {
        held_t *h = msr_rpc_call_get_data(call);
        h->fwd = f;
    }
    return MSR_OK;
}

/* ---- groups ---- */

static void group_send(msr_proxy_t *p, group_t *g)
{
    msr_map_remove(&p->groups, g->key);
    msr_heap_remove(&p->timers, &g->timer);
    g->sent = 1;
    /* the last caller's deadline bounds the upstream call */
    uint64_t deadline = msr_rpc_call_deadline(g->calls[g->ncalls - 1]);
    msr_status_t st = send_up(p, g->method, NULL, deadline, NULL, g);
    if (st != MSR_OK) {
        for (uint32_t i = 0; i < g->ncalls; i++) {
            if (g->calls[i]) {
                held_free(g->calls[i]);
                msr_rpc_call_fail(g->calls[i], MSR_RPC_UNAVAILABLE,
                                  "msrun's proxy cannot forward %s '%s': %s",
                                  msr_rpc_methods[g->method].name, g->name, msr_status_str(st));
            }
        }
        group_free(p, g);
    }
}

static void group_add(msr_proxy_t *p, msr_rpc_call_t *call, msr_rpc_method_t method,
                      ProtobufCMessage *req, int generation, const char *name, uint32_t count,
                      uint32_t local_count, uint32_t weight, uint32_t wait_ms)
{
    char key[sizeof((group_t *)0)->key];
    snprintf(key, sizeof key, "%c/%d/%u/%s", method == MSR_RPC_BARRIER ? 'b' : 'a', generation,
             count, name);
    group_t *g = msr_map_get(&p->groups, key);
    if (g == NULL) {
        g = msr_calloc(1, sizeof *g);
        if (g) {
            g->calls = msr_calloc(local_count, sizeof *g->calls);
            g->reqs = msr_calloc(local_count, sizeof *g->reqs);
        }
        if (g == NULL || g->calls == NULL || g->reqs == NULL ||
            msr_map_put(&p->groups, key, g, NULL) != MSR_OK) {
            if (g) {
                msr_free(g->calls);
                msr_free(g->reqs);
            }
            msr_free(g);
            msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "msrun's proxy is out of memory");
            return;
        }
        g->proxy = p;
        snprintf(g->key, sizeof g->key, "%s", key);
        snprintf(g->name, sizeof g->name, "%s", name);
        g->method = method;
        g->generation = generation;
        g->count = count;
        g->local_count = local_count;
        msr_timer_init(&g->timer);
    } else if (g->local_count != local_count) {
        msr_rpc_call_fail(call, MSR_RPC_INVALID_ARGUMENT,
                          "%s '%s': local_count %u differs from the %u given on this node",
                          msr_rpc_methods[method].name, name, local_count, g->local_count);
        return;
    }
    if (weight > g->local_count - g->arrived || g->ncalls == g->local_count) {
        msr_rpc_call_fail(call, MSR_RPC_INVALID_ARGUMENT,
                          "%s '%s': more participants on this node than its local_count of %u",
                          msr_rpc_methods[method].name, name, g->local_count);
        if (g->ncalls == 0)
            group_free(p, g);
        return;
    }
    held_t *h = msr_calloc(1, sizeof *h);
    if (h == NULL) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "msrun's proxy is out of memory");
        if (g->ncalls == 0)
            group_free(p, g);
        return;
    }
    h->group = g;
    msr_rpc_call_set_data(call, h);
    g->calls[g->ncalls] = call;
    g->reqs[g->ncalls] = req;
    g->ncalls++;
    g->arrived += weight;
    /* Answer before the earliest caller's deadline. */
    uint64_t d = msr_rpc_call_deadline(call);
    uint64_t w = wait_ms == UINT32_MAX ? MSR_DEADLINE_NEVER : msr_deadline_in_ms(wait_ms);
    if (w < d)
        d = w;
    if (d != MSR_DEADLINE_NEVER && (!msr_timer_armed(&g->timer) || d < g->timer.deadline))
        msr_heap_push(&p->timers, &g->timer, d);
    if (g->arrived == g->local_count)
        group_send(p, g);
}

static void group_expired(msr_proxy_t *p, group_t *g)
{
    for (uint32_t i = 0; i < g->ncalls; i++) {
        if (g->calls[i]) {
            held_free(g->calls[i]);
            msr_rpc_call_fail(g->calls[i], MSR_RPC_DEADLINE_EXCEEDED,
                              "%s '%s': %u of %u participants on this node arrived in time",
                              g->method == MSR_RPC_BARRIER ? "barrier" : "allgather", g->name,
                              g->arrived, g->local_count);
        }
    }
    group_free(p, g);
}

/* ---- the worker-facing server ---- */

static void on_beat(msr_proxy_t *p, msr_rpc_call_t *call, const Msr__BeatRequest *r)
{
    uint64_t now = msr_now_ns();
    pthread_mutex_lock(&p->beats_lock);
    struct beat_entry *e = NULL;
    for (size_t i = 0; i < p->nbeats && e == NULL; i++)
        if (p->beats[i].rank == r->rank)
            e = &p->beats[i];
    if (e == NULL && p->nbeats == p->beats_cap) {
        size_t cap = p->beats_cap ? p->beats_cap * 2 : 16;
        struct beat_entry *nb = msr_realloc_array(p->beats, cap, sizeof *nb);
        if (nb) {
            p->beats = nb;
            p->beats_cap = cap;
        }
    }
    if (e == NULL && p->nbeats < p->beats_cap) {
        e = &p->beats[p->nbeats++];
        memset(e, 0, sizeof *e);
        e->rank = r->rank;
    }
    if (e) {
        if (e->pid != r->pid || e->info.progress != r->progress || e->info.progress_ns == 0) {
            e->info.progress = r->progress;
            e->info.progress_ns = now;
        }
        e->pid = r->pid;
        e->info.last_beat_ns = now;
    }
    pthread_mutex_unlock(&p->beats_lock);
    Msr__BeatResponse resp = MSR__BEAT_RESPONSE__INIT;
    msr_rpc_call_reply(call, &resp.base);
}

int msr_proxy_beat_info(msr_proxy_t *p, int rank, int pid, msr_beat_info_t *info_p)
{
    int found = 0;
    pthread_mutex_lock(&p->beats_lock);
    for (size_t i = 0; i < p->nbeats && !found; i++) {
        if (p->beats[i].rank == rank && p->beats[i].pid == pid) {
            *info_p = p->beats[i].info;
            found = 1;
        }
    }
    pthread_mutex_unlock(&p->beats_lock);
    return found;
}

static void on_call(void *arg, msr_rpc_call_t *call, msr_rpc_method_t method, ProtobufCMessage *req)
{
    msr_proxy_t *p = arg;
    atomic_fetch_add(&p->calls_in, 1);
    if (method == MSR_RPC_BEAT) {
        on_beat(p, call, (const Msr__BeatRequest *)req);
        return;
    }
    if (atomic_load(&p->stop)) {
        msr_rpc_call_fail(call, MSR_RPC_UNAVAILABLE, "msrun is shutting down");
        return;
    }
    if ((method == MSR_RPC_BARRIER &&
         ((Msr__BarrierRequest *)req)->local_count > p->local_workers) ||
        (method == MSR_RPC_ALLGATHER &&
         ((Msr__AllgatherRequest *)req)->local_count > p->local_workers)) {
        /* a group is sized by local_count: never more than the node has */
        msr_rpc_call_fail(call, MSR_RPC_INVALID_ARGUMENT,
                          "%s: local_count %u is more than this node's %u workers",
                          msr_rpc_methods[method].name,
                          method == MSR_RPC_BARRIER ? ((Msr__BarrierRequest *)req)->local_count
                                                    : ((Msr__AllgatherRequest *)req)->local_count,
                          p->local_workers);
        return;
    }
    if (method == MSR_RPC_BARRIER) {
        Msr__BarrierRequest *r = (Msr__BarrierRequest *)req;
        uint32_t weight = r->weight ? r->weight : 1;
        if (r->local_count > 1 && msr_rpc_key_valid(r->name) && r->count >= r->local_count) {
            group_add(p, call, method, req, r->generation, r->name, r->count, r->local_count,
                      weight, r->wait_ms);
            return;
        }
    } else if (method == MSR_RPC_ALLGATHER) {
        Msr__AllgatherRequest *r = (Msr__AllgatherRequest *)req;
        if (r->local_count > 1 && msr_rpc_key_valid(r->name) && r->count >= r->local_count &&
            r->n_entries > 0 && r->n_entries <= r->local_count) {
            group_add(p, call, method, req, r->generation, r->name, r->count, r->local_count,
                      (uint32_t)r->n_entries, r->wait_ms);
            return;
        }
    }
    /* Everything else goes up as it is (a write without a request id gets
     * one), and its answer comes back as it is. */
    stamp_request(p, method, req);
    held_t *h = msr_calloc(1, sizeof *h);
    if (h == NULL) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "msrun's proxy is out of memory");
        return;
    }
    msr_rpc_call_set_data(call, h);
    msr_status_t st = send_up(p, method, req, msr_rpc_call_deadline(call), call, NULL);
    if (st != MSR_OK) {
        held_free(call);
        msr_rpc_call_fail(call, MSR_RPC_UNAVAILABLE, "msrun's proxy cannot forward %s: %s",
                          msr_rpc_methods[method].name, msr_status_str(st));
    }
}

static void on_cancel(void *arg, msr_rpc_call_t *call)
{
    msr_proxy_t *p = arg;
    held_t *h = msr_rpc_call_get_data(call);
    if (h == NULL)
        return;
    if (h->fwd) {
        h->fwd->call = NULL;
        h->fwd->req = NULL;
        msr_rpc_async_cancel(&h->fwd->async);
    } else if (h->group) {
        group_t *g = h->group;
        for (uint32_t i = 0; i < g->ncalls; i++)
            if (g->calls[i] == call)
                g->calls[i] = NULL;
        if (!g->sent) {
            /* Its contribution cannot go up without its request: the others
             * will wait for a replacement or time out. */
            uint32_t k = 0;
            g->arrived = 0;
            for (uint32_t i = 0; i < g->ncalls; i++) {
                if (g->calls[i] == NULL)
                    continue;
                g->calls[k] = g->calls[i];
                g->reqs[k] = g->reqs[i];
                g->arrived += g->method == MSR_RPC_BARRIER
                                  ? (((Msr__BarrierRequest *)g->reqs[k])->weight
                                         ? ((Msr__BarrierRequest *)g->reqs[k])->weight
                                         : 1)
                                  : (uint32_t)((Msr__AllgatherRequest *)g->reqs[k])->n_entries;
                k++;
            }
            g->ncalls = k;
            if (k == 0)
                group_free(p, g);
        }
    }
    held_free(call);
}

static void *proxy_thread(void *arg)
{
    msr_proxy_t *p = arg;
    while (!atomic_load(&p->stop)) {
        uint64_t deadline = msr_deadline_in_ms(100);
        msr_timer_t *t = msr_heap_top(&p->timers);
        if (t && t->deadline < deadline)
            deadline = t->deadline;
        t = msr_heap_top(&p->retries);
        if (t && t->deadline < deadline)
            deadline = t->deadline;
        if (msr_rpc_loop_poll(p->loop, deadline) < 0)
            break;
        uint64_t now = msr_now_ns();
        while ((t = msr_heap_top(&p->timers)) != NULL && t->deadline <= now)
            group_expired(p, MSR_CONTAINER_OF(t, group_t, timer));
        while ((t = msr_heap_top(&p->retries)) != NULL && t->deadline <= now) {
            fwd_t *f = MSR_CONTAINER_OF(t, fwd_t, retry);
            msr_heap_remove(&p->retries, t);
            if (fwd_wanted(f) && fwd_start(f) == MSR_OK)
                continue;
            fwd_finish(f); /* nobody waits any more, or it cannot be sent */
        }
    }
    /* Shutting down: once msr_proxy_stop's shutdown call has returned, the
     * server cancels what the workers still hold (the cancel callback
     * forgets them), then the upstream calls end. */
    pthread_mutex_lock(&p->stop_lock);
    pthread_mutex_unlock(&p->stop_lock);
    msr_rpc_server_destroy(p->server);
    p->server = NULL;
    msr_timer_t *t;
    while ((t = msr_heap_top(&p->retries)) != NULL) {
        msr_heap_remove(&p->retries, t);
        fwd_finish(MSR_CONTAINER_OF(t, fwd_t, retry)); /* not in gRPC's hands */
    }
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &p->fwds)
    {
        fwd_t *f = MSR_CONTAINER_OF(pos, fwd_t, link);
        msr_rpc_async_cancel(&f->async);
    }
    uint64_t limit = msr_deadline_in_ms(5000);
    while (!msr_list_empty(&p->fwds) && !msr_deadline_passed(limit))
        msr_rpc_loop_poll(p->loop, msr_deadline_in_ms(100));
    return NULL;
}

msr_status_t msr_proxy_start(const char *socket_path, const char *upstream, const char *token,
                             const msr_rpc_tls_t *tls, int local_workers, msr_proxy_t **proxy_p)
{
    msr_proxy_t *p = msr_calloc(1, sizeof *p);
    if (p == NULL)
        return MSR_ERR_NO_MEMORY;
    p->local_workers = local_workers > 0 ? (uint32_t)local_workers : 1;
    msr_list_init(&p->fwds);
    pthread_mutex_init(&p->stop_lock, NULL);
    pthread_mutex_init(&p->beats_lock, NULL);
    snprintf(p->socket_path, sizeof p->socket_path, "%s", socket_path);
    do
        msr_random_bytes(&p->client_id, sizeof p->client_id);
    while (p->client_id == 0);
    msr_status_t st = msr_rpc_loop_create(&p->loop);
    if (st != MSR_OK)
        goto err_free;
    st = msr_rpc_channel_create_tls(upstream, token, tls, &p->up);
    if (st != MSR_OK)
        goto err_loop;
    char address[300];
    snprintf(address, sizeof address, "unix:%s", socket_path);
    msr_rpc_server_config_t sc = {
        .address = address,
        .token = token,
        .handler = on_call,
        .cancel = on_cancel,
        .arg = p,
        .log_name = "msrun proxy",
    };
    st = msr_rpc_server_create(p->loop, &sc, NULL, &p->server);
    if (st != MSR_OK) {
        MSR_ERROR("cannot listen on %s for the workers", socket_path);
        goto err_channel;
    }
    if (pthread_create(&p->thread, NULL, proxy_thread, p) != 0) {
        st = MSR_ERR_SYSTEM;
        goto err_server;
    }
    *proxy_p = p;
    return MSR_OK;

err_server:
    msr_rpc_server_destroy(p->server);
err_channel:
    msr_rpc_channel_destroy(p->up);
err_loop:
    msr_rpc_loop_destroy(p->loop);
err_free:
    msr_free(p);
    return st;
}

static void free_group_value(void *v)
{
    group_t *g = v;
    msr_free(g->calls);
    msr_free(g->reqs);
    msr_free(g);
}

void msr_proxy_stop(msr_proxy_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->stop_lock);
    atomic_store(&p->stop, 1);
    msr_rpc_server_shutdown(p->server); /* wakes the proxy's thread */
    pthread_mutex_unlock(&p->stop_lock);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->stop_lock);
    pthread_mutex_destroy(&p->beats_lock);
    msr_free(p->beats);
    msr_map_cleanup(&p->groups, free_group_value);
    msr_heap_cleanup(&p->timers);
    msr_heap_cleanup(&p->retries);
    msr_rpc_channel_destroy(p->up);
    msr_rpc_loop_destroy(p->loop);
    if (unlink(p->socket_path) != 0 && errno != ENOENT)
        MSR_DEBUG("cannot remove %s: %s", p->socket_path, strerror(errno));
    msr_free(p);
}

uint64_t msr_proxy_calls_in(const msr_proxy_t *p)
{
    return atomic_load(&p->calls_in);
}

uint64_t msr_proxy_calls_up(const msr_proxy_t *p)
{
    return atomic_load(&p->calls_up);
}
