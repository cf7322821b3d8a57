/* The store proxy's upstream side: each worker call forwarded to the
 * coordinator (sent again after a coordinator restart while its deadline
 * allows), and a node's barrier and allgather participants collected into
 * one upstream call. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "base/util.h"
#include "launcher/proxy_impl.h"

/* Gives a store write that has no request id one of the proxy's own. */
void msr_proxy_stamp_request(msr_proxy_t *p, msr_rpc_method_t method, ProtobufCMessage *req)
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

uint64_t msr_proxy_request_keeps(const ProtobufCMessage *req)
{
    return req ? 4 * (uint64_t)protobuf_c_message_get_packed_size(req) : 0;
}

static int method_writes(msr_rpc_method_t method)
{
    return method == MSR_RPC_SET || method == MSR_RPC_ADD || method == MSR_RPC_COMPARE_SET ||
           method == MSR_RPC_DELETE;
}

held_t *msr_proxy_held_new(msr_proxy_t *p, msr_rpc_call_t *call, msr_rpc_method_t method,
                           uint64_t keeps)
{
    const msr_held_limits_t *l = &p->held_limits;
    uint64_t bytes = sizeof(held_t) + keeps + MSR_HELD_CALL_OVERHEAD;
    if (!method_writes(method) && p->held_calls >= l->client_calls) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED,
                          "held calls of this node's workers (msrun's proxy): %" PRIu64
                          " at most (--held_calls_max)",
                          l->client_calls);
        return NULL;
    }
    if (!method_writes(method) &&
        (bytes > l->client_bytes || p->held_bytes > l->client_bytes - bytes)) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED,
                          "held bytes of this node's workers (msrun's proxy): %" PRIu64
                          " at most (%" PRIu64 " held, this call keeps %" PRIu64
                          "; --held_bytes_max)",
                          l->client_bytes, p->held_bytes, bytes);
        return NULL;
    }
    held_t *h = msr_calloc(1, sizeof *h);
    if (h == NULL) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "msrun's proxy is out of memory");
        return NULL;
    }
    h->proxy = p;
    h->bytes = bytes;
    p->held_calls++;
    p->held_bytes += bytes;
    return h;
}

void msr_proxy_held_free(msr_rpc_call_t *call)
{
    held_t *h = msr_rpc_call_get_data(call);
    if (h != NULL) {
        h->proxy->held_calls--;
        h->proxy->held_bytes -= h->bytes;
    }
    msr_free(h);
    msr_rpc_call_set_data(call, NULL);
}

void msr_proxy_group_free(msr_proxy_t *p, group_t *g)
{
    msr_heap_remove(&p->timers, &g->timer);
    if (!g->sent)
        msr_map_remove(&p->groups, g->key);
    msr_free(g->calls);
    msr_free(g->reqs);
    msr_free(g);
}

/* ---- upstream ---- */

msr_rpc_channel_t *msr_proxy_store_channel(msr_proxy_t *p, int *via_relay_p)
{
    pthread_mutex_lock(&p->up_lock);
    msr_rpc_channel_t *relay = p->relay_failed ? NULL : p->relay;
    pthread_mutex_unlock(&p->up_lock);
    *via_relay_p = relay != NULL;
    return relay ? relay : msr_proxy_up(p);
}

int msr_proxy_relay_gave_up(msr_proxy_t *p, int via_relay, const msr_rpc_async_t *a)
{
    if (!via_relay || a->status == MSR_OK || atomic_load(&p->stop))
        return 0;
    if (a->grpc_code != MSR_RPC_UNAVAILABLE && a->grpc_code != MSR_RPC_UNIMPLEMENTED)
        return 0;
    if (!p->relay_failed)
        MSR_WARN("no answer from the relay at %s to a worker's %s (%s): the store's calls go to "
                 "the coordinator directly",
                 msr_rpc_channel_target(p->relay), msr_rpc_methods[a->method].name, a->err);
    p->relay_failed = 1;
    return 1;
}

int msr_proxy_fwd_wanted(const fwd_t *f)
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
void msr_proxy_fwd_finish(fwd_t *f)
{
    msr_proxy_t *p = f->proxy;
    msr_rpc_async_t *a = &f->async;
    msr_list_remove(&f->link);
    if (a->method == MSR_RPC_PUBLISH && a->status == MSR_OK && a->grpc_code == 0) {
        /* the entries are the store's now: the node's fetches of them need
         * not go up (a cancelled caller's request is gone: not cached) */
        if (f->group) {
            for (uint32_t i = 0; i < f->group->ncalls; i++)
                if (f->group->calls[i])
                    msr_proxy_fetch_published(p, (Msr__PublishRequest *)f->group->reqs[i]);
        } else if (f->call && f->req) {
            msr_proxy_fetch_published(p, (Msr__PublishRequest *)f->req);
        }
    }
    if (f->group) {
        group_t *g = f->group;
        for (uint32_t i = 0; i < g->ncalls; i++) {
            if (g->calls[i]) {
                msr_proxy_held_free(g->calls[i]);
                msr_rpc_call_forward(g->calls[i], a);
            }
        }
        msr_proxy_group_free(p, g);
    } else if (f->call) {
        msr_proxy_held_free(f->call);
        msr_rpc_call_forward(f->call, a);
    }
    msr_rpc_async_cleanup(a);
    msr_free(f);
}

static void fwd_done(msr_rpc_async_t *a)
{
    fwd_t *f = MSR_CONTAINER_OF(a, fwd_t, async);
    msr_proxy_t *p = f->proxy;
    if (msr_proxy_relay_gave_up(p, f->via_relay, a) && msr_proxy_fwd_wanted(f)) {
        /* sent to the coordinator at once (a write carries its ids: one
         * the relay delivered before it died is applied once) */
        msr_rpc_async_cleanup(a);
        if (msr_heap_push(&p->retries, &f->retry, msr_now_ns()) == MSR_OK)
            return;
    } else if (a->status == MSR_ERR_UNREACHABLE && !atomic_load(&p->stop) &&
               msr_proxy_fwd_wanted(f) && msr_deadline_left_ms(f->deadline) > 100) {
        /* The coordinator went away mid-call (it may be restarting): send
         * again shortly; the workers keep waiting within their deadline. */
        msr_rpc_async_cleanup(a);
        if (msr_heap_push(&p->retries, &f->retry, msr_deadline_in_ms(50)) == MSR_OK)
            return;
    }
    msr_proxy_fwd_finish(f);
}

static uint32_t wait_left(uint64_t deadline)
{
    int64_t ms = msr_deadline_left_ms(deadline);
    return ms > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

/* Builds the upstream request of f (a group's combined one, or the worker's
 * own) and starts it. */
msr_status_t msr_proxy_fwd_start(fwd_t *f)
{
    msr_proxy_t *p = f->proxy;
    msr_status_t st;
    msr_rpc_channel_t *ch = msr_proxy_store_channel(p, &f->via_relay);
    f->async.deadline = f->deadline;
    /* The coordinator may be restarting: wait for it. A relay that is
     * gone must fail the call at once (UNAVAILABLE), so that it goes to
     * the coordinator: one sent before its death was noticed would wait
     * for the relay's connection until the workers' deadline. */
    f->async.wait_for_ready = !f->via_relay;
    f->async.done = fwd_done;
    f->async.raw = 1;
    group_t *g = f->group;
    if (g == NULL) {
        st = msr_rpc_call_start(ch, p->loop, &f->async, f->req);
    } else if (g->method == MSR_RPC_BARRIER) {
        Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
        r.generation = g->generation;
        r.name = g->name;
        r.count = g->count;
        r.weight = g->arrived;
        r.wait_ms = wait_left(f->deadline);
        /* one id per group: sent again after its relay died, it is
         * answered released when the barrier released it */
        r.client_id = p->client_id;
        r.request_id = g->request_id;
        st = msr_rpc_call_start(ch, p->loop, &f->async, &r.base);
    } else if (g->method == MSR_RPC_PUBLISH) {
        Msr__PublishRequest r = MSR__PUBLISH_REQUEST__INIT;
        Msr__Contribution **entries = msr_calloc(g->arrived, sizeof *entries);
        if (entries == NULL)
            return MSR_ERR_NO_MEMORY;
        size_t n = 0;
        for (uint32_t i = 0; i < g->ncalls; i++) {
            Msr__PublishRequest *q = (Msr__PublishRequest *)g->reqs[i];
            for (size_t k = 0; k < q->n_entries && n < g->arrived; k++)
                entries[n++] = q->entries[k];
        }
        r.generation = g->generation;
        r.name = g->name;
        r.n_entries = n;
        r.entries = entries;
        /* one id per group: a retry after a lost coordinator is applied once */
        r.client_id = p->client_id;
        r.request_id = g->request_id;
        st = msr_rpc_call_start(ch, p->loop, &f->async, &r.base);
        msr_free(entries);
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
        st = msr_rpc_call_start(ch, p->loop, &f->async, &r.base);
        msr_free(entries);
    }
    if (st == MSR_OK)
        atomic_fetch_add(&p->calls_up, 1);
    return st;
}

/* Sends upstream on behalf of call (single, with its req) or group. */
msr_status_t msr_proxy_send_up(msr_proxy_t *p, msr_rpc_method_t method, ProtobufCMessage *req,
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
    msr_status_t st = msr_proxy_fwd_start(f);
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
    msr_status_t st = msr_proxy_send_up(p, g->method, NULL, deadline, NULL, g);
    if (st != MSR_OK) {
        for (uint32_t i = 0; i < g->ncalls; i++) {
            if (g->calls[i]) {
                msr_proxy_held_free(g->calls[i]);
                msr_rpc_call_fail(g->calls[i], MSR_RPC_UNAVAILABLE,
                                  "msrun's proxy cannot forward %s '%s': %s",
                                  msr_rpc_methods[g->method].name, g->name, msr_status_str(st));
            }
        }
        msr_proxy_group_free(p, g);
    }
}

void msr_proxy_group_add(msr_proxy_t *p, msr_rpc_call_t *call, msr_rpc_method_t method,
                         ProtobufCMessage *req, int generation, const char *name, uint32_t count,
                         uint32_t local_count, uint32_t weight, uint32_t wait_ms)
{
    char key[sizeof((group_t *)0)->key];
    snprintf(key, sizeof key, "%c/%d/%u/%s",
             method == MSR_RPC_BARRIER   ? 'b'
             : method == MSR_RPC_PUBLISH ? 'p'
                                         : 'a',
             generation, count, name);
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
        g->request_id = ++p->request_seq;
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
            msr_proxy_group_free(p, g);
        return;
    }
    held_t *h = msr_proxy_held_new(p, call, method, msr_proxy_request_keeps(req));
    if (h == NULL) {
        if (g->ncalls == 0)
            msr_proxy_group_free(p, g);
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

void msr_proxy_group_expired(msr_proxy_t *p, group_t *g)
{
    for (uint32_t i = 0; i < g->ncalls; i++) {
        if (g->calls[i]) {
            msr_proxy_held_free(g->calls[i]);
            msr_rpc_call_fail(g->calls[i], MSR_RPC_DEADLINE_EXCEEDED,
                              "%s '%s': %u of %u participants on this node arrived in time",
                              g->method == MSR_RPC_BARRIER   ? "barrier"
                              : g->method == MSR_RPC_PUBLISH ? "publish"
                                                             : "allgather",
                              g->name, g->arrived, g->local_count);
        }
    }
    msr_proxy_group_free(p, g);
}
