/* The node's store proxy, on a thread of its own: one completion queue for
 * the workers' calls and the upstream calls. */
#include "launcher/proxy_impl.h"

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
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "rendezvous/rpc.h"

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
        if (e->pid != r->pid)
            e->info.peer_lost = 0; /* a new process of the rank */
        if (r->peer_lost)
            e->info.peer_lost = 1;
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

/* ---- progress reports ---- */

/* A worker's reports into the run's history, if kept: one record a step
 * (a worker's call carries the time of each step since its last, and the
 * scalars of the latest). Under progress_lock. */
static void history_report(msr_proxy_t *p, const Msr__StepReport *s)
{
    if (p->history == NULL)
        return;
    const char *names[MSR_PROGRESS_SCALARS];
    double values[MSR_PROGRESS_SCALARS];
    size_t n = 0;
    for (size_t i = 0; i < s->n_scalars && n < MSR_PROGRESS_SCALARS; i++, n++) {
        names[n] = s->scalars[i]->name;
        values[n] = s->scalars[i]->value;
    }
    msr_history_rec_t rec = {.generation = p->generation,
                             .node_rank = p->node_rank,
                             .rank = s->rank,
                             .time = s->time,
                             .names = names,
                             .values = values};
    for (size_t i = 0; i + 1 < s->n_step_times; i++) {
        rec.step = s->step - (int64_t)(s->n_step_times - 1 - i);
        rec.step_time = s->step_times[i];
        msr_history_add(p->history, &rec);
    }
    rec.step = s->step;
    rec.step_time = s->n_step_times ? s->step_times[s->n_step_times - 1] : s->step_time;
    rec.n = n;
    msr_history_add(p->history, &rec);
}

void msr_proxy_set_history(msr_proxy_t *p, msr_history_t *history)
{
    pthread_mutex_lock(&p->progress_lock);
    p->history = history;
    pthread_mutex_unlock(&p->progress_lock);
}

/* A worker's reports: kept for the next send upstream, answered at once. */
static void on_progress(msr_proxy_t *p, msr_rpc_call_t *call, const Msr__ProgressRequest *r)
{
    pthread_mutex_lock(&p->progress_lock);
    if (p->generation < 0 || r->generation == p->generation) {
        for (size_t i = 0; i < r->n_steps; i++) {
            msr_progress_batch_merge(&p->progress, r->steps[i]);
            history_report(p, r->steps[i]);
        }
    }
    p->progress.dropped += r->dropped;
    pthread_mutex_unlock(&p->progress_lock);
    Msr__ProgressResponse resp = MSR__PROGRESS_RESPONSE__INIT;
    msr_rpc_call_reply(call, &resp.base);
}

void msr_proxy_set_member(msr_proxy_t *p, const char *node_id, int node_rank, int generation)
{
    pthread_mutex_lock(&p->progress_lock);
    if (generation != p->generation) {
        /* a new generation's ranks start over */
        msr_progress_batch_cleanup(&p->progress);
        msr_progress_batch_init(&p->progress);
    }
    snprintf(p->node_id, sizeof p->node_id, "%s", node_id);
    p->node_rank = node_rank;
    p->generation = generation;
    pthread_mutex_unlock(&p->progress_lock);
}

void msr_proxy_report_line(msr_proxy_t *p, int rank, const msr_metric_line_t *m, double time)
{
    const char *names[MSR_PROGRESS_SCALARS];
    for (size_t i = 0; i < m->n; i++)
        names[i] = m->names[i];
    pthread_mutex_lock(&p->progress_lock);
    msr_progress_batch_add(&p->progress, rank, m->step, m->step_time, time, names, m->values, m->n);
    msr_history_rec_t rec = {.generation = p->generation,
                             .node_rank = p->node_rank,
                             .rank = rank,
                             .step = m->step,
                             .step_time = m->step_time,
                             .time = time,
                             .n = m->n,
                             .names = names,
                             .values = m->values};
    msr_history_add(p->history, &rec);
    pthread_mutex_unlock(&p->progress_lock);
}

/* Node 0 shows each straggler the coordinator named once. */
static void show_stragglers(msr_proxy_t *p, const Msr__ProgressResponse *r)
{
    for (size_t i = 0; i < r->n_stragglers; i++) {
        const Msr__Straggler *s = r->stragglers[i];
        size_t k = 0;
        while (k < p->nnamed &&
               (p->named[k].generation != s->generation || p->named[k].rank != s->rank))
            k++;
        if (k < p->nnamed)
            continue;
        if (p->nnamed == MSR_ARRAY_SIZE(p->named)) {
            memmove(p->named, p->named + 1, (p->nnamed - 1) * sizeof p->named[0]);
            p->nnamed--;
        }
        p->named[p->nnamed].generation = s->generation;
        p->named[p->nnamed++].rank = s->rank;
        MSR_WARN("rank %d on node %d is %.1fx slower than the median over the last %u steps "
                 "(%.3f s a step, median %.3f s)",
                 s->rank, s->node_rank, s->ratio, s->window, s->step_time, s->median);
    }
}

static void progress_done(msr_rpc_async_t *async)
{
    struct progress_up *u = MSR_CONTAINER_OF(async, struct progress_up, async);
    msr_proxy_t *p = u->proxy;
    if (async->status == MSR_OK && async->resp) {
        pthread_mutex_lock(&p->progress_lock);
        int show = p->node_rank == 0;
        pthread_mutex_unlock(&p->progress_lock);
        if (show)
            show_stragglers(p, (const Msr__ProgressResponse *)async->resp);
    } else if (u->via_relay && !atomic_load(&p->stop)) {
        /* the relay is gone, cannot reach the coordinator or does not
         * serve this node: the coordinator gets this call at once, and the
         * node's progress from now on */
        MSR_WARN("no answer from the relay at %s to the node's progress (%s): sending it to the "
                 "coordinator directly",
                 msr_rpc_channel_target(p->relay), async->err);
        p->relay_failed = 1;
        u->again = u->sent;
        u->again_len = u->sent_len;
        u->sent = NULL;
        p->progress_next = msr_now_ns();
    } else {
        MSR_DEBUG("progress upstream: %s", async->err);
    }
    msr_free(u->sent);
    u->sent = NULL;
    msr_rpc_async_cleanup(async);
    u->busy = 0;
}

/* Starts u's call of req, to the node's relay while it answers, else
 * upstream. */
static void progress_start(msr_proxy_t *p, struct progress_up *u, const ProtobufCMessage *req,
                           uint64_t now)
{
    pthread_mutex_lock(&p->up_lock);
    msr_rpc_channel_t *relay = p->relay_failed ? NULL : p->relay;
    pthread_mutex_unlock(&p->up_lock);
    memset(&u->async, 0, sizeof u->async);
    u->proxy = p;
    u->via_relay = relay != NULL;
    u->sent = NULL;
    if (relay != NULL) { /* kept for the coordinator, should the relay not answer */
        u->sent_len = protobuf_c_message_get_packed_size(req);
        if ((u->sent = msr_malloc(u->sent_len ? u->sent_len : 1)) == NULL)
            return;
        protobuf_c_message_pack(req, u->sent);
    }
    u->async.method = MSR_RPC_PROGRESS;
    u->async.deadline = msr_deadline_in_ms(5000);
    u->async.done = progress_done;
    if (msr_rpc_call_start(relay ? relay : msr_proxy_up(p), p->loop, &u->async, req) == MSR_OK) {
        u->busy = 1;
        p->progress_last = now;
        atomic_fetch_add(&p->calls_up, 1);
    } else {
        msr_free(u->sent);
        u->sent = NULL;
    }
}

/* The call the relay did not answer, sent upstream. */
static void progress_again(msr_proxy_t *p, struct progress_up *u, uint64_t now)
{
    const char *nul = NULL;
    ProtobufCMessage *req =
        msr_rpc_request_unpack_checked(MSR_RPC_PROGRESS, u->again, u->again_len, &nul);
    msr_free(u->again);
    u->again = NULL;
    if (req == NULL)
        return; /* out of memory: these reports are lost, as when the call fails */
    progress_start(p, u, req, now);
    msr_rpc_message_free(req);
}

/* Sends the node's reports upstream when the interval is up (one call in
 * flight at most: a slow coordinator gets fewer, larger batches). */
static void progress_cron(msr_proxy_t *p, uint64_t now)
{
    if (now < p->progress_next || p->progress_up.busy || atomic_load(&p->stop))
        return;
    p->progress_next = now + MSR_PROXY_PROGRESS_MS * 1000000ull;
    if (p->progress_up.again != NULL) {
        progress_again(p, &p->progress_up, now);
        return;
    }
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    pthread_mutex_lock(&p->progress_lock);
    /* nothing new: only node 0 asks, for stragglers, and only in a job
     * whose ranks report (its own have) */
    if (p->node_id[0] == '\0' ||
        (!msr_progress_batch_pending(&p->progress) &&
         (p->node_rank != 0 || p->progress.n == 0 ||
          now - p->progress_last < MSR_PROXY_PROGRESS_POLL_MS * 1000000ull))) {
        pthread_mutex_unlock(&p->progress_lock);
        return;
    }
    msr_status_t st = msr_progress_batch_take(&p->progress, &req);
    char node_id[64];
    snprintf(node_id, sizeof node_id, "%s", p->node_id);
    req.node_id = node_id;
    req.generation = p->generation;
    req.dropped = p->progress.dropped;
    p->progress.dropped = 0;
    pthread_mutex_unlock(&p->progress_lock);
    if (st == MSR_OK)
        progress_start(p, &p->progress_up, &req.base, now);
    msr_progress_request_cleanup(&req);
}

static void on_call(void *arg, msr_rpc_call_t *call, msr_rpc_method_t method, ProtobufCMessage *req)
{
    msr_proxy_t *p = arg;
    atomic_fetch_add(&p->calls_in, 1);
    if (method == MSR_RPC_BEAT) {
        on_beat(p, call, (const Msr__BeatRequest *)req);
        return;
    }
    if (method == MSR_RPC_PROGRESS) {
        on_progress(p, call, (const Msr__ProgressRequest *)req);
        return;
    }
    if (atomic_load(&p->stop)) {
        msr_rpc_call_fail(call, MSR_RPC_UNAVAILABLE, "msrun is shutting down");
        return;
    }
    if (method == MSR_RPC_FETCH) {
        msr_proxy_fetch(p, call, (const Msr__FetchRequest *)req);
        return;
    }
    if (method == MSR_RPC_PUBLISH && ((Msr__PublishRequest *)req)->local_count > p->local_workers) {
        msr_rpc_call_fail(call, MSR_RPC_INVALID_ARGUMENT,
                          "Publish: local_count %u is more than this node's %u workers",
                          ((Msr__PublishRequest *)req)->local_count, p->local_workers);
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
            msr_proxy_group_add(p, call, method, req, r->generation, r->name, r->count,
                                r->local_count, weight, r->wait_ms);
            return;
        }
    } else if (method == MSR_RPC_ALLGATHER) {
        Msr__AllgatherRequest *r = (Msr__AllgatherRequest *)req;
        if (r->local_count > 1 && msr_rpc_key_valid(r->name) && r->count >= r->local_count &&
            r->n_entries > 0 && r->n_entries <= r->local_count) {
            msr_proxy_group_add(p, call, method, req, r->generation, r->name, r->count,
                                r->local_count, (uint32_t)r->n_entries, r->wait_ms);
            return;
        }
    } else if (method == MSR_RPC_PUBLISH) {
        /* the node's publishers go up as one call; they do not wait for
         * the others of the job, only for those of this node */
        Msr__PublishRequest *r = (Msr__PublishRequest *)req;
        if (r->local_count > 1 && msr_rpc_key_valid(r->name) && r->n_entries > 0 &&
            r->n_entries <= r->local_count) {
            msr_proxy_group_add(p, call, method, req, r->generation, r->name, r->local_count,
                                r->local_count, (uint32_t)r->n_entries, UINT32_MAX);
            return;
        }
    }
    /* Everything else goes up as it is (a write without a request id gets
     * one), and its answer comes back as it is. */
    msr_proxy_stamp_request(p, method, req);
    held_t *h = msr_proxy_held_new(p, call, method, msr_proxy_request_keeps(req));
    if (h == NULL)
        return;
    msr_rpc_call_set_data(call, h);
    msr_status_t st = msr_proxy_send_up(p, method, req, msr_rpc_call_deadline(call), call, NULL);
    if (st != MSR_OK) {
        msr_proxy_held_free(call);
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
    if (h->fetch) {
        msr_proxy_fetch_wait_free(h->fetch);
    } else if (h->fwd) {
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
                              : g->method == MSR_RPC_PUBLISH
                                  ? (uint32_t)((Msr__PublishRequest *)g->reqs[k])->n_entries
                                  : (uint32_t)((Msr__AllgatherRequest *)g->reqs[k])->n_entries;
                k++;
            }
            g->ncalls = k;
            if (k == 0)
                msr_proxy_group_free(p, g);
        }
    }
    msr_proxy_held_free(call);
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
        if (p->progress_next && p->progress_next < deadline)
            deadline = p->progress_next;
        if (msr_rpc_loop_poll(p->loop, deadline) < 0)
            break;
        uint64_t now = msr_now_ns();
        progress_cron(p, now);
        while ((t = msr_heap_top(&p->timers)) != NULL && t->deadline <= now)
            msr_proxy_group_expired(p, MSR_CONTAINER_OF(t, group_t, timer));
        while ((t = msr_heap_top(&p->retries)) != NULL && t->deadline <= now) {
            fwd_t *f = MSR_CONTAINER_OF(t, fwd_t, retry);
            msr_heap_remove(&p->retries, t);
            if (msr_proxy_fwd_wanted(f) && msr_proxy_fwd_start(f) == MSR_OK)
                continue;
            msr_proxy_fwd_finish(f); /* nobody waits any more, or it cannot be sent */
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
        msr_proxy_fwd_finish(MSR_CONTAINER_OF(t, fwd_t, retry)); /* not in gRPC's hands */
    }
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &p->fwds)
    {
        fwd_t *f = MSR_CONTAINER_OF(pos, fwd_t, link);
        msr_rpc_async_cancel(&f->async);
    }
    if (p->progress_up.busy)
        msr_rpc_async_cancel(&p->progress_up.async);
    msr_proxy_fetch_shutdown(p);
    uint64_t limit = msr_deadline_in_ms(5000);
    while ((!msr_list_empty(&p->fwds) || !msr_list_empty(&p->fetch_ups) || p->progress_up.busy) &&
           !msr_deadline_passed(limit))
        msr_rpc_loop_poll(p->loop, msr_deadline_in_ms(100));
    return NULL;
}

msr_status_t msr_proxy_start(const char *socket_path, const char *upstream, const char *token,
                             const msr_rpc_tls_t *tls, int local_workers,
                             const msr_held_limits_t *held, msr_proxy_t **proxy_p)
{
    msr_proxy_t *p = msr_calloc(1, sizeof *p);
    if (p == NULL)
        return MSR_ERR_NO_MEMORY;
    p->held_limits = msr_held_limits_resolve(held);
    p->local_workers = local_workers > 0 ? (uint32_t)local_workers : 1;
    msr_list_init(&p->fwds);
    msr_list_init(&p->fetch_waits);
    msr_list_init(&p->fetch_ups);
    pthread_mutex_init(&p->stop_lock, NULL);
    pthread_mutex_init(&p->beats_lock, NULL);
    pthread_mutex_init(&p->up_lock, NULL);
    pthread_mutex_init(&p->progress_lock, NULL);
    msr_progress_batch_init(&p->progress);
    p->node_rank = -1;
    p->generation = -1;
    p->progress_next = msr_now_ns() + MSR_PROXY_PROGRESS_MS * 1000000ull;
    p->tls = tls ? *tls : (msr_rpc_tls_t){0};
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
    p->token = msr_strdup(token ? token : "");
    if (p->token == NULL) {
        st = MSR_ERR_NO_MEMORY;
        goto err_channel;
    }
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
    st = msr_proxy_wchan_start(p, token);
    if (st != MSR_OK) {
        msr_proxy_stop(p);
        return st;
    }
    *proxy_p = p;
    return MSR_OK;

err_server:
    msr_rpc_server_destroy(p->server);
err_channel:
    msr_rpc_channel_destroy(p->up);
    msr_free(p->token);
err_loop:
    msr_rpc_loop_destroy(p->loop);
err_free:
    pthread_mutex_destroy(&p->up_lock);
    pthread_mutex_destroy(&p->progress_lock);
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
    msr_proxy_wchan_stop(p);
    pthread_mutex_lock(&p->stop_lock);
    atomic_store(&p->stop, 1);
    msr_rpc_server_shutdown(p->server); /* wakes the proxy's thread */
    pthread_mutex_unlock(&p->stop_lock);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->stop_lock);
    pthread_mutex_destroy(&p->beats_lock);
    msr_free(p->beats);
    msr_map_cleanup(&p->groups, free_group_value);
    msr_proxy_fetch_cleanup(p);
    msr_heap_cleanup(&p->timers);
    msr_heap_cleanup(&p->retries);
    msr_rpc_channel_destroy(p->up);
    msr_rpc_channel_destroy(p->relay);
    msr_free(p->progress_up.again);
    for (int i = 0; i < p->nold; i++)
        msr_rpc_channel_destroy(p->old[i]);
    msr_free(p->old);
    memset(p->token, 0, strlen(p->token));
    msr_free(p->token);
    pthread_mutex_destroy(&p->up_lock);
    pthread_mutex_destroy(&p->progress_lock);
    msr_progress_batch_cleanup(&p->progress);
    msr_rpc_loop_destroy(p->loop);
    if (unlink(p->socket_path) != 0 && errno != ENOENT)
        MSR_DEBUG("cannot remove %s: %s", p->socket_path, strerror(errno));
    msr_free(p);
}

msr_status_t msr_proxy_set_relay(msr_proxy_t *p, const char *target, const char *server_name)
{
    msr_rpc_tls_t tls = p->tls;
    tls.server_name = server_name;
    msr_rpc_channel_t *ch = NULL;
    if (p->relay != NULL) /* read without the lock: only this thread writes it */
        return MSR_ERR_INVALID_ARG;
    msr_status_t st = msr_rpc_channel_create_tls(target, p->token, &tls, &ch);
    if (st != MSR_OK)
        return st;
    pthread_mutex_lock(&p->up_lock);
    p->relay = ch;
    pthread_mutex_unlock(&p->up_lock);
    return MSR_OK;
}

msr_rpc_channel_t *msr_proxy_up(msr_proxy_t *p)
{
    pthread_mutex_lock(&p->up_lock);
    msr_rpc_channel_t *ch = p->up;
    pthread_mutex_unlock(&p->up_lock);
    return ch;
}

msr_status_t msr_proxy_retarget(msr_proxy_t *p, const char *upstream)
{
    msr_rpc_channel_t *ch = NULL, **old = msr_realloc(p->old, (size_t)(p->nold + 1) * sizeof *old);
    if (old == NULL)
        return MSR_ERR_NO_MEMORY;
    p->old = old;
    msr_status_t st = msr_rpc_channel_create_tls(upstream, p->token, &p->tls, &ch);
    if (st != MSR_OK)
        return st;
    pthread_mutex_lock(&p->up_lock);
    p->old[p->nold++] = p->up;
    p->up = ch;
    pthread_mutex_unlock(&p->up_lock);
    return MSR_OK;
}

uint64_t msr_proxy_calls_in(const msr_proxy_t *p)
{
    return atomic_load(&p->calls_in);
}

void msr_proxy_fetch_stats(const msr_proxy_t *p, uint64_t *hits_p, uint64_t *up_p)
{
    *hits_p = atomic_load(&p->fetch_hits);
    *up_p = atomic_load(&p->fetch_up_calls);
}

uint64_t msr_proxy_calls_up(const msr_proxy_t *p)
{
    return atomic_load(&p->calls_up);
}
