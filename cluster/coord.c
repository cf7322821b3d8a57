/* The coordinator's core (coord.h): its entry points, the store core
 * (rendezvous/store_core.h) bound to it, and the Status call. What it does
 * lives by concern: nodes and heartbeats in members.c, the job's
 * generations in generation.c, answers and retried writes in answer.c,
 * the state file in persist.c. Owned by one thread; waits are held calls
 * (rendezvous/held.h) with timers, not threads. */
#include "cluster/coord.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/err.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/list.h"
#include "base/log.h"
#include "base/map.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/coord_internal.h"

/* ---- the store (rendezvous/store_core.c) and how it answers here ---- */

static void s_reply(void *ctx, void *call, const ProtobufCMessage *resp)
{
    msr_coord_reply(ctx, call, resp);
}

static void s_reply_blob(void *ctx, void *call, msr_blob_t *blob)
{
    msr_coord_answer_blob(ctx, call, blob);
}

static int s_request_seen(void *ctx, void *call, msr_rpc_method_t method, uint64_t client_id,
                          uint64_t request_id)
{
    return msr_coord_request_seen(ctx, call, method, client_id, request_id);
}

static void s_reply_write(void *ctx, void *call, msr_rpc_method_t method, uint64_t client_id,
                          uint64_t request_id, const ProtobufCMessage *resp)
{
    msr_coord_reply_write(ctx, call, method, client_id, request_id, resp);
}

static int s_request_value(void *ctx, uint64_t client_id, uint64_t request_id, int64_t *value_p)
{
    return msr_coord_request_value(ctx, client_id, request_id, value_p);
}

static void s_request_note(void *ctx, msr_rpc_method_t method, uint64_t client_id,
                           uint64_t request_id, const ProtobufCMessage *resp)
{
    msr_coord_request_note(ctx, method, client_id, request_id, resp);
}

void msr_coord_key_changed(msr_coord_t *c, const char *key)
{
    if (!msr_coord_persisting(c) || msr_map_get(&c->dirty_keys, key) != NULL)
        return;
    if (msr_map_put(&c->dirty_keys, key, (void *)1, NULL) != MSR_OK)
        c->need_snapshot = 1; /* the next save writes everything instead */
}

static void s_key_changed(void *ctx, const char *key)
{
    msr_coord_key_changed(ctx, key);
}

static int s_generation(void *ctx)
{
    return ((msr_coord_t *)ctx)->generation;
}

/* The most participants a barrier or allgather may have: the ranks of the
 * running generation (the job's world size before it first forms). When no
 * node ever joined (workers that reach the coordinator directly, started by
 * another launcher) the job's size is unknown: then only the store's byte
 * limit bounds an allgather. */
static uint32_t s_participants_max(void *ctx)
{
    const msr_coord_t *c = ctx;
    int n = world_size(c) > 0 ? world_size(c) : c->worker_num;
    return n > 0 ? (uint32_t)n : UINT32_MAX;
}

static const msr_store_ops_t store_ops = {
    .reply = s_reply,
    .reply_blob = s_reply_blob,
    .request_seen = s_request_seen,
    .reply_write = s_reply_write,
    .request_value = s_request_value,
    .request_note = s_request_note,
    .key_changed = s_key_changed,
    .generation = s_generation,
    .participants_max = s_participants_max,
};

/* Fails every waiting store call and empties the store: a new generation
 * starts from nothing. */
void msr_coord_store_reset(msr_coord_t *c, const char *why)
{
    msr_store_core_reset(c->store, why);
    msr_map_cleanup(&c->dirty_keys, NULL);
    msr_coord_requests_clear(c);
    c->store_cleared = 1;
}

/* ---- the job's status ---- */

/* The ranks' progress in this generation, for `msrun status`: how many
 * reported, the highest step, the mean of their latest losses. */
static void status_progress(const msr_coord_t *c, Msr__StatusResponse *r)
{
    double loss_sum = 0;
    if (c->obs.generation != c->generation)
        return; /* no report in this generation yet */
    for (size_t i = 0; i < c->obs.nranks; i++) {
        const rank_obs_t *o = &c->obs.ranks[i];
        if (!o->seen)
            continue;
        if (r->reporting_ranks++ == 0 || o->step > r->step)
            r->step = o->step;
        for (uint32_t k = 0; k < o->nscalars; k++)
            if (strcmp(o->scalars[k].name, "loss") == 0) {
                loss_sum += o->scalars[k].value;
                r->loss_ranks++;
            }
    }
    if (r->loss_ranks > 0)
        r->loss = loss_sum / r->loss_ranks;
}

static void do_status(msr_coord_t *c, void *call)
{
    Msr__StatusResponse r = MSR__STATUS_RESPONSE__INIT;
    Msr__Failure f, hist[MSR_FAILURE_HISTORY], *histp[MSR_FAILURE_HISTORY];
    r.job_id = c->job_id ? c->job_id : "";
    r.state = (Msr__JobState)c->state;
    r.generation = c->generation;
    /* the admitted nodes: an elastic job's size is what formed, not MAX */
    int members = 0;
    for (size_t i = 0; i < c->nnodes; i++)
        members += c->nodes[i]->rank >= 0;
    r.node_count = members;
    r.world_size = members * c->local_worker_num;
    r.local_worker_num = c->local_worker_num;
    if (elastic(c)) {
        r.min_nodes = c->min_nodes;
        r.max_nodes = c->max_nodes;
    }
    if (state_forming(c->state)) {
        r.expected_nodes = elastic(c) ? c->min_nodes : c->node_count;
        for (size_t i = 0; i < c->nnodes; i++)
            r.ready_nodes += ready_for(c, c->nodes[i]);
    }
    r.restart_count = c->restart_count;
    r.max_restarts = c->max_restarts;
    r.store_keys = msr_store_core_keys(c->store);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        r.peak_rss_kb = (uint64_t)ru.ru_maxrss;
    Msr__NodeStatus *ns = msr_calloc(c->nnodes ? c->nnodes : 1, sizeof *ns);
    Msr__NodeStatus **nsp = msr_calloc(c->nnodes ? c->nnodes : 1, sizeof *nsp);
    if (ns == NULL || nsp == NULL) {
        msr_free(ns);
        msr_free(nsp);
        msr_held_fail(&c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return;
    }
    uint64_t now = msr_now_ns();
    for (size_t i = 0; i < c->nnodes; i++) {
        node_t *n = c->nodes[i];
        msr__node_status__init(&ns[i]);
        ns[i].node_id = n->id;
        ns[i].node_rank = n->rank;
        ns[i].host = n->host;
        ns[i].pid = n->pid;
        ns[i].local_worker_num = n->local_worker_num;
        ns[i].alive = n->alive;
        ns[i].last_seen_ms = n->hb ? 0 : (uint32_t)((now - n->last_seen) / 1000000ull);
        ns[i].ready_generation = n->ready_generation;
        ns[i].state = msr_coord_node_state(c, n);
        ns[i].relay = n->relay;
        nsp[i] = &ns[i];
    }
    r.n_nodes = c->nnodes;
    r.nodes = nsp;
    char *names[MSR_RPC_METHOD_COUNT];
    for (int m = 0; m < MSR_RPC_METHOD_COUNT; m++)
        names[m] = (char *)msr_rpc_methods[m].name;
    r.n_call_names = r.n_call_counts = MSR_RPC_METHOD_COUNT;
    r.call_names = names;
    r.call_counts = c->calls;
    if (c->failure.set) {
        msr_failure_to_msg(&c->failure, &f);
        r.failure = &f;
    }
    for (int i = 0; i < c->nhistory; i++) {
        msr_failure_to_msg(&c->history[i], &hist[i]);
        histp[i] = &hist[i];
    }
    r.n_failures = (size_t)c->nhistory;
    r.failures = histp;
    status_progress(c, &r);
    msr_coord_reply(c, call, &r.base);
    msr_free(ns);
    msr_free(nsp);
}

/* ---- entry points ---- */

msr_status_t msr_coord_create(const msr_coord_config_t *config,
                              const msr_coord_responder_t *responder, msr_coord_t **coord_p)
{
    msr_coord_t *c = msr_calloc(1, sizeof *c);
    if (c == NULL)
        return MSR_ERR_NO_MEMORY;
    c->config = *config;
    c->responder = *responder;
    msr_list_init(&c->relay_batches);
    c->relaying = "";
    msr_coord_held_init(c);
    msr_coord_heartbeats_init(c);
    msr_list_init(&c->requests);
    c->log_fd = -1;
    c->obs.generation = -1;
    c->obs.start = msr_wall_time();
    msr_store_ops_t ops = store_ops;
    ops.ctx = c;
    ops.held = &c->held;
    c->job_id = msr_strdup(config->job_id ? config->job_id : "");
    if (c->job_id == NULL ||
        msr_store_core_create(&config->store_limits, &ops, &c->store) != MSR_OK) {
        msr_free(c->job_id);
        msr_free(c);
        return MSR_ERR_NO_MEMORY;
    }
    if (c->config.node_timeout_ms <= 0)
        c->config.node_timeout_ms = 5000;
    if (c->config.join_timeout_ms <= 0)
        c->config.join_timeout_ms = 600000;
    c->worker_num = config->worker_num;
    c->local_worker_num = config->local_worker_num;
    c->max_restarts = config->max_restarts;
    c->min_nodes = config->min_nodes;
    c->max_nodes = config->max_nodes;
    if (c->config.last_call_ms <= 0)
        c->config.last_call_ms = 1000;
    if (c->config.join_hold_ms == 0)
        c->config.join_hold_ms = c->config.join_timeout_ms;
    else if (c->config.join_hold_ms < 0)
        c->config.join_hold_ms = 0;
    if (c->worker_num > 0 && c->local_worker_num > 0 && c->max_restarts >= 0) {
        if (msr_coord_settings_valid(c) != MSR_OK) {
            msr_store_core_destroy(c->store);
            msr_free(c->job_id);
            msr_free(c);
            return MSR_ERR_INVALID_ARG;
        }
        c->configured = 1;
    }
    c->state = MSR_JOB_WAITING;
    msr_status_t st = msr_coord_persist_load(c);
    if (st != MSR_OK && st != MSR_ERR_NOT_FOUND) {
        msr_coord_destroy(c);
        return st;
    }
    /* A resumed job starts a fresh snapshot (no answer waits on it; a
     * failure is logged and the save tried again with the first change). */
    msr_coord_persist_save(c);
    c->form_deadline = state_forming(c->state) ? msr_deadline_in_ms(c->config.join_timeout_ms)
                                               : MSR_DEADLINE_NEVER;
    c->next_check = msr_now_ns();
    *coord_p = c;
    return MSR_OK;
}

void msr_coord_destroy(msr_coord_t *c)
{
    if (c == NULL)
        return;
    msr_coord_flush(c);
    c->closing = 1; /* what is answered from here on changes nothing saved */
    msr_coord_answers_release(c, "coordinator shutting down");
    for (size_t i = 0; i < c->nnodes; i++) {
        node_t *n = c->nodes[i];
        if (n->hb) {
            void *call = n->hb->call;
            msr_held_free(&c->held, n->hb);
            n->hb = NULL;
            msr_held_fail(&c->held, call, MSR_RPC_UNAVAILABLE, "coordinator shutting down");
        }
    }
    msr_coord_store_reset(c, "coordinator shutting down");
    msr_coord_relays_cleanup(c);
    msr_map_cleanup(&c->node_ids, NULL);
    for (size_t i = 0; i < c->nnodes; i++) {
        msr_free(c->nodes[i]->host);
        msr_free(c->nodes[i]);
    }
    msr_free(c->nodes);
    msr_failure_clear(&c->failure);
    msr_map_cleanup(&c->dirty_keys, NULL);
    msr_coord_requests_clear(c);
    msr_coord_persist_close(c);
    msr_store_core_destroy(c->store);
    msr_held_calls_cleanup(&c->held);
    msr_free(c->rank_done);
    msr_free(c->job_id);
    msr_coord_obs_cleanup(c);
    msr_free(c);
}

void msr_coord_call(msr_coord_t *c, void *call, msr_rpc_method_t method,
                    const ProtobufCMessage *req)
{
    if ((unsigned)method >= MSR_RPC_METHOD_COUNT) {
        msr_held_fail(&c->held, call, MSR_RPC_UNIMPLEMENTED, "unknown method");
        return;
    }
    c->calls[method]++;
    if (msr_store_core_method(method)) {
        msr_store_core_call(c->store, call, method, req);
        return;
    }
    switch (method) {
    case MSR_RPC_JOIN:
        msr_coord_join(c, call, (const Msr__JoinRequest *)req);
        break;
    case MSR_RPC_HEARTBEAT:
        msr_coord_heartbeat(c, call, (const Msr__HeartbeatRequest *)req);
        break;
    case MSR_RPC_REPORT:
        msr_coord_report(c, call, (const Msr__ReportRequest *)req);
        break;
    case MSR_RPC_LEAVE:
        msr_coord_leave(c, call, (const Msr__LeaveRequest *)req);
        break;
    case MSR_RPC_STATUS:
        do_status(c, call);
        break;
    case MSR_RPC_BEAT:
        msr_held_fail(&c->held, call, MSR_RPC_UNIMPLEMENTED,
                      "Beat is served by a node's msrun, not by the coordinator");
        break;
    case MSR_RPC_AUTH:
        msr_held_fail(&c->held, call, MSR_RPC_UNIMPLEMENTED,
                      "Auth is answered by the coordinator's server");
        break;
    case MSR_RPC_PROGRESS:
        msr_coord_progress(c, call, (const Msr__ProgressRequest *)req);
        break;
    case MSR_RPC_RELAY:
        msr_coord_relay(c, call, (const Msr__RelayRequest *)req);
        break;
    default:
        msr_held_fail(&c->held, call, MSR_RPC_UNIMPLEMENTED, "unknown method");
    }
}

void msr_coord_cancel(msr_coord_t *c, void *call)
{
    if (msr_coord_relay_cancel(c, call))
        return;
    msr_held_cancel(&c->held, call);
}

void msr_coord_tick(msr_coord_t *c, uint64_t now)
{
    msr_held_tick(&c->held, now); /* the store's waits and the heartbeats */
    msr_coord_check_nodes(c, now);
    msr_coord_check_forming(c, now);
    if ((msr_coord_persist_pending(c) || !msr_list_empty(&c->answers)) &&
        msr_now_ns() >= c->retry_save_at)
        msr_coord_commit(c);
}

void msr_coord_flush(msr_coord_t *c)
{
    if (msr_coord_persist_pending(c) || !msr_list_empty(&c->answers))
        msr_coord_commit(c);
}

uint64_t msr_coord_next_deadline(const msr_coord_t *c)
{
    uint64_t d = c->next_check;
    if ((msr_coord_persist_pending(c) || !msr_list_empty(&c->answers)) && c->retry_save_at < d)
        d = c->retry_save_at;
    if (msr_held_next_deadline(&c->held) < d)
        d = msr_held_next_deadline(&c->held);
    if (state_forming(c->state) && c->form_deadline < d)
        d = c->form_deadline;
    if (c->last_call && c->last_call < d)
        d = c->last_call;
    return d;
}

int msr_coord_finished(const msr_coord_t *c)
{
    return state_terminal(c->state) && alive_nodes(c) == 0;
}

msr_job_state_t msr_coord_state(const msr_coord_t *c)
{
    return c->state;
}

uint64_t msr_coord_calls(const msr_coord_t *c, msr_rpc_method_t method)
{
    return (unsigned)method < MSR_RPC_METHOD_COUNT ? c->calls[method] : 0;
}
