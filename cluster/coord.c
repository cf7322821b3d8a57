/* The coordinator's core: membership, generations, failures and the store,
 * owned by one thread; waits are held as records with timers, not threads. */
#include "cluster/coord.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/err.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/heap.h"
#include "base/list.h"
#include "base/log.h"
#include "base/map.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/coord_internal.h"

/* ---- small helpers ---- */

/* ---- answers: given now, or held until what they may reflect is saved ---- */

/* Whether answers must wait for a save: something changed since the last
 * one (an answer given now could tell of a change a crash would undo), or
 * earlier answers wait (answers leave in order). */
static int must_hold(const msr_coord_t *c)
{
    return !c->closing && (msr_coord_persist_pending(c) || !msr_list_empty(&c->answers));
}

static answer_t *hold(msr_coord_t *c, void *call, msr_blob_t *blob, msr_rpc_code_t code,
                      const char *message)
{
    size_t mlen = message ? strlen(message) : 0;
    msr_held_t *h = msr_held_new(&c->held, sizeof(answer_t) + mlen + 1, MSR_HELD_ANSWER, call, NULL,
                                 &c->answers);
    if (h == NULL)
        return NULL;
    answer_t *a = MSR_CONTAINER_OF(h, answer_t, held);
    a->blob = blob;
    a->code = code;
    memcpy(a->message, message ? message : "", mlen + 1);
    return a;
}

static void answer_fail(msr_coord_t *c, void *call, msr_rpc_code_t code, const char *message)
{
    if (must_hold(c) && hold(c, call, NULL, code, message) != NULL)
        return;
    c->responder.fail(call, code, message);
}

/* Out of memory while holding an answer: it cannot wait, and it cannot be
 * given before the save, so the call fails (the change stays and is saved;
 * a retry with the same request id learns its outcome). */
static void answer_blob(msr_coord_t *c, void *call, msr_blob_t *blob)
{
    if (!must_hold(c)) {
        c->responder.reply_blob(call, blob);
        return;
    }
    atomic_fetch_add(&blob->refs, 1);
    if (hold(c, call, blob, 0, NULL) == NULL) {
        msr_blob_unref(blob);
        c->responder.fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
    }
}

static void reply(msr_coord_t *c, void *call, const ProtobufCMessage *resp)
{
    if (!must_hold(c)) {
        c->responder.reply(call, resp);
        return;
    }
    msr_blob_t *blob = msr_blob_pack(resp);
    if (blob == NULL || hold(c, call, blob, 0, NULL) == NULL) {
        msr_blob_unref(blob);
        c->responder.fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
    }
}

/* Sends every held answer; after a failed save (why != NULL) fails them
 * instead, saying why. */
static void release_held(msr_coord_t *c, const char *why)
{
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &c->answers)
    {
        answer_t *a = MSR_CONTAINER_OF(pos, answer_t, held.link);
        void *call = a->held.call;
        msr_held_take(&c->held, &a->held);
        if (why)
            c->responder.fail(call, MSR_RPC_INTERNAL, why);
        else if (a->blob)
            c->responder.reply_blob(call, a->blob);
        else
            c->responder.fail(call, a->code, a->message);
        msr_blob_unref(a->blob);
        msr_free(a);
    }
}

/* Saves what changed and releases the answers that waited for it. */
static void commit(msr_coord_t *c)
{
    msr_status_t st = msr_coord_persist_save(c);
    if (st != MSR_OK)
        c->retry_save_at = msr_now_ns() + 100 * 1000000ull; /* not a busy loop */
    else
        c->retry_save_at = 0;
    release_held(c, st == MSR_OK ? NULL : msr_err_msg());
}

/* ---- request records: a retried write is answered, not applied again ---- */

void msr_coord_request_key(uint64_t client_id, uint64_t request_id, char out[40])
{
    snprintf(out, 40, "%016" PRIx64 ":%016" PRIx64, client_id, request_id);
}

static void request_drop(msr_coord_t *c, request_rec_t *r)
{
    char key[40];
    msr_coord_request_key(r->client_id, r->request_id, key);
    msr_map_remove(&c->request_map, key);
    msr_list_remove(&r->link);
    c->request_bytes -= r->len;
    msr_free(r);
}

msr_status_t msr_coord_request_add(msr_coord_t *c, uint64_t client_id, uint64_t request_id,
                                   uint32_t method, const uint8_t *response, size_t len, int saved)
{
    if (len > MSR_REQUESTS_BYTES_MAX)
        return MSR_ERR_INVALID_ARG;
    request_rec_t *r = msr_malloc(sizeof *r + len);
    if (r == NULL)
        return MSR_ERR_NO_MEMORY;
    r->client_id = client_id;
    r->request_id = request_id;
    r->method = method;
    r->saved = saved;
    r->len = len;
    if (len)
        memcpy(r->response, response, len);
    char key[40];
    msr_coord_request_key(client_id, request_id, key);
    void *old = NULL;
    if (msr_map_put(&c->request_map, key, r, &old) != MSR_OK) {
        msr_free(r);
        return MSR_ERR_NO_MEMORY;
    }
    if (old) { /* the same id again (a replayed log): the newer answer */
        request_rec_t *o = old;
        msr_list_remove(&o->link);
        c->request_bytes -= o->len;
        msr_free(o);
    }
    msr_list_push_back(&c->requests, &r->link);
    c->request_bytes += len;
    if (!saved && msr_coord_persisting(c))
        c->new_requests++; /* to be saved with the next save */
    /* Oldest first out: a retry comes within seconds, not thousands of
     * writes later. */
    while (c->requests.next != &r->link &&
           (c->request_map.count > MSR_REQUESTS_MAX || c->request_bytes > MSR_REQUESTS_BYTES_MAX))
        request_drop(c, MSR_CONTAINER_OF(c->requests.next, request_rec_t, link));
    return MSR_OK;
}

void msr_coord_requests_clear(msr_coord_t *c)
{
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &c->requests)
        request_drop(c, MSR_CONTAINER_OF(pos, request_rec_t, link));
    msr_map_cleanup(&c->request_map, NULL);
}

/* A write carrying a request id the core has applied before: answers it as
 * the first time and returns 1. */
static int request_seen(msr_coord_t *c, void *call, msr_rpc_method_t method, uint64_t client_id,
                        uint64_t request_id)
{
    if (client_id == 0 || request_id == 0)
        return 0;
    char key[40];
    msr_coord_request_key(client_id, request_id, key);
    request_rec_t *r = msr_map_get(&c->request_map, key);
    if (r == NULL)
        return 0;
    if (r->method != (uint32_t)method) {
        msr_held_fail(&c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "request id %" PRIu64 " of client %016" PRIx64 " was used by a %s before",
                      request_id, client_id,
                      r->method < MSR_RPC_METHOD_COUNT ? msr_rpc_methods[r->method].name
                                                       : "another call");
        return 1;
    }
    msr_blob_t *b = msr_malloc(sizeof *b + r->len);
    if (b == NULL) {
        msr_held_fail(&c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return 1;
    }
    atomic_init(&b->refs, 1);
    b->len = r->len;
    if (r->len)
        memcpy(b->data, r->response, r->len);
    answer_blob(c, call, b);
    msr_blob_unref(b);
    return 1;
}

/* Answers a write and, when it carries a request id, remembers the answer
 * (saved with the write: a retry after a restart is answered from it). */
static void reply_write(msr_coord_t *c, void *call, msr_rpc_method_t method, uint64_t client_id,
                        uint64_t request_id, const ProtobufCMessage *resp)
{
    if (client_id && request_id) {
        size_t len = protobuf_c_message_get_packed_size(resp);
        uint8_t *buf = len <= MSR_REQUESTS_BYTES_MAX ? msr_malloc(len ? len : 1) : NULL;
        if (buf) {
            protobuf_c_message_pack(resp, buf);
            if (msr_coord_request_add(c, client_id, request_id, (uint32_t)method, buf, len, 0) !=
                MSR_OK)
                MSR_DEBUG("cannot remember request %" PRIu64 ": a retry may apply it again",
                          request_id);
            msr_free(buf);
        }
    }
    reply(c, call, resp);
}

static int state_terminal(Msr__JobState s)
{
    return s == MSR__JOB_STATE__JOB_DONE || s == MSR__JOB_STATE__JOB_FAILED;
}

static int state_forming(Msr__JobState s)
{
    return s == MSR__JOB_STATE__JOB_WAITING || s == MSR__JOB_STATE__JOB_RESTARTING;
}

/* ---- held calls: heartbeats and answers (rendezvous/held.h) ---- */

/* A held call is answered 200 ms before its client's deadline, so the
 * client hears why (MSR_DEADLINE_NEVER when the client set none). */
static uint64_t answer_by(const msr_coord_t *c, void *call)
{
    uint64_t client = c->responder.deadline(call);
    if (client == MSR_DEADLINE_NEVER)
        return MSR_DEADLINE_NEVER;
    uint64_t margin = 200 * 1000000ull;
    uint64_t now = msr_now_ns();
    return client > now + margin ? client - margin : now;
}

/* Holds node n's heartbeat call for up to wait_ms; NULL when out of
 * memory. */
static msr_held_t *heartbeat_hold(msr_coord_t *c, void *call, node_t *n, int64_t wait_ms)
{
    return msr_held_wait(&c->held, sizeof(msr_held_t), MSR_HELD_HEARTBEAT, call, n, NULL, wait_ms);
}

static void heartbeat_reply(msr_coord_t *c, void *call, node_t *n);

/* A held heartbeat is answered at its deadline with the job as it is. */
static void heartbeat_expired(void *ctx, msr_held_t *w)
{
    msr_coord_t *c = ctx;
    void *call = w->call;
    node_t *n = w->owner;
    n->hb = NULL;
    n->last_seen = msr_now_ns();
    msr_held_free(&c->held, w);
    heartbeat_reply(c, call, n);
}

/* The node's long poll ended without an answer: its connection broke (the
 * agent died, or the network). A live agent calls again within a second; a
 * dead one is declared lost after a short grace instead of the whole node
 * timeout. */
static void heartbeat_cancelled(void *ctx, msr_held_t *w)
{
    msr_coord_t *c = ctx;
    node_t *n = w->owner;
    uint64_t now = msr_now_ns();
    int64_t grace = c->config.node_timeout_ms < 1500 ? c->config.node_timeout_ms : 1500;
    n->hb = NULL;
    n->last_seen = now;
    n->suspect_until = now + (uint64_t)grace * 1000000ull;
    msr_held_free(&c->held, w);
}

/* A held answer's client is gone: the change it made is still saved. */
static void answer_cancelled(void *ctx, msr_held_t *h)
{
    answer_t *a = MSR_CONTAINER_OF(h, answer_t, held);
    msr_blob_unref(a->blob);
    msr_held_free(&((msr_coord_t *)ctx)->held, h);
}

/* ---- nodes ---- */

node_t *msr_coord_node_add(msr_coord_t *c, const char *host)
{
    if (c->nnodes == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        node_t **nodes = msr_realloc_array(c->nodes, cap, sizeof *nodes);
        if (nodes == NULL)
            return NULL;
        c->nodes = nodes;
        c->cap = cap;
    }
    node_t *n = msr_calloc(1, sizeof *n);
    if (n == NULL || (n->host = msr_strdup(host)) == NULL) {
        msr_free(n);
        return NULL;
    }
    n->wanted_rank = -1;
    n->rank = -1;
    n->ready_generation = -1;
    c->nodes[c->nnodes++] = n;
    return n;
}

static node_t *node_find(msr_coord_t *c, const char *id)
{
    if (id == NULL || *id == '\0')
        return NULL;
    for (size_t i = 0; i < c->nnodes; i++)
        if (strcmp(c->nodes[i]->id, id) == 0)
            return c->nodes[i];
    return NULL;
}

static int elastic(const msr_coord_t *c)
{
    return c->min_nodes > 0 && c->max_nodes > c->min_nodes;
}

/* The world size of the running generation. */
static int world_size(const msr_coord_t *c)
{
    return c->node_count * c->local_worker_num;
}

static int alive_nodes(const msr_coord_t *c)
{
    int n = 0;
    for (size_t i = 0; i < c->nnodes; i++)
        n += c->nodes[i]->alive;
    return n;
}

static node_t *member_of_rank(const msr_coord_t *c, int rank)
{
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i]->alive && c->nodes[i]->rank == rank)
            return c->nodes[i];
    return NULL;
}

/* ---- the store (rendezvous/store_core.c) and how it answers here ---- */

static void s_reply(void *ctx, void *call, const ProtobufCMessage *resp)
{
    reply(ctx, call, resp);
}

static void s_reply_blob(void *ctx, void *call, msr_blob_t *blob)
{
    answer_blob(ctx, call, blob);
}

static void s_fail(void *ctx, void *call, msr_rpc_code_t code, const char *message)
{
    answer_fail(ctx, call, code, message);
}

static uint64_t s_deadline(void *ctx, void *call)
{
    return answer_by(ctx, call);
}

static void s_set_data(void *ctx, void *call, void *data)
{
    ((msr_coord_t *)ctx)->responder.set_data(call, data);
}

static void *s_get_data(void *ctx, void *call)
{
    return ((msr_coord_t *)ctx)->responder.get_data(call);
}

static int s_request_seen(void *ctx, void *call, msr_rpc_method_t method, uint64_t client_id,
                          uint64_t request_id)
{
    return request_seen(ctx, call, method, client_id, request_id);
}

static void s_reply_write(void *ctx, void *call, msr_rpc_method_t method, uint64_t client_id,
                          uint64_t request_id, const ProtobufCMessage *resp)
{
    reply_write(ctx, call, method, client_id, request_id, resp);
}

/* Notes a key as changed for the next save (with a state file). */
static void s_key_changed(void *ctx, const char *key)
{
    msr_coord_t *c = ctx;
    if (!msr_coord_persisting(c) || msr_map_get(&c->dirty_keys, key) != NULL)
        return;
    if (msr_map_put(&c->dirty_keys, key, (void *)1, NULL) != MSR_OK)
        c->need_snapshot = 1; /* the next save writes everything instead */
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
    .key_changed = s_key_changed,
    .generation = s_generation,
    .participants_max = s_participants_max,
};

/* Fails every waiting store call and empties the store: a new generation
 * starts from nothing. */
static void store_reset(msr_coord_t *c, const char *why)
{
    msr_store_core_reset(c->store, why);
    msr_map_cleanup(&c->dirty_keys, NULL);
    msr_coord_requests_clear(c);
    c->store_cleared = 1;
}

/* ---- the job ---- */

/* Answers every held heartbeat: the job's state or generation changed. */
static void wake_heartbeats(msr_coord_t *c)
{
    for (size_t i = 0; i < c->nnodes; i++) {
        node_t *n = c->nodes[i];
        if (n->hb == NULL)
            continue;
        msr_held_t *w = n->hb;
        void *call = w->call;
        n->hb = NULL;
        msr_held_free(&c->held, w);
        heartbeat_reply(c, call, n);
    }
}

/* How loud a restart or the job's failure is (see outcome_reported). */
static msr_log_level_t outcome_level(const msr_coord_t *c)
{
    return c->config.outcome_reported ? MSR_LOG_INFO : MSR_LOG_WARN;
}

static void set_state(msr_coord_t *c, Msr__JobState s)
{
    if (c->state != s)
        MSR_INFO("job %s: generation %d %s", c->job_id ? c->job_id : "?", c->generation,
                 msr_job_state_name(s));
    c->state = s;
    if (state_forming(s))
        c->form_deadline = msr_deadline_in_ms(c->config.join_timeout_ms);
    else
        c->form_deadline = MSR_DEADLINE_NEVER;
    MARK_DIRTY(c, 2);
    wake_heartbeats(c);
}

static void start_generation(msr_coord_t *c, int generation, const char *why)
{
    c->generation = generation;
    char msg[640];
    snprintf(msg, sizeof msg, "generation %d ended: %.560s", generation - 1, why);
    store_reset(c, msg);
    for (size_t i = 0; i < c->nnodes; i++)
        c->nodes[i]->rank = -1;
    memset(c->rank_done, 0, (size_t)c->worker_num);
    c->ndone = 0;
    MARK_DIRTY(c, 2);
}

void msr_coord_history_add(msr_coord_t *c, const msr_failure_t *f)
{
    if (c->nhistory == MSR_FAILURE_HISTORY) {
        memmove(&c->history[0], &c->history[1], (MSR_FAILURE_HISTORY - 1) * sizeof c->history[0]);
        c->nhistory--;
    }
    msr_failure_t *h = &c->history[c->nhistory++];
    *h = *f;
    memset(h->tail, 0, sizeof h->tail); /* the tail stays with f */
    h->ntail = 0;
}

/* Ends the running generation after a failure: a new one if restarts remain,
 * else the job fails. Takes the tail strings of f. The generation's first
 * failure is its root cause: the one kept and added to the history. */
static void generation_failed(msr_coord_t *c, msr_failure_t *f)
{
    char what[512];
    msr_failure_describe(f, what, sizeof what);
    if (!c->failure.set || c->failure.generation != f->generation) {
        msr_coord_history_add(c, f);
        msr_failure_clear(&c->failure);
        c->failure = *f; /* the tail strings now belong to c->failure */
    } else {
        msr_failure_clear(f);
    }
    if (c->restart_count < c->max_restarts) {
        c->restart_count++;
        snprintf(c->message, sizeof c->message, "restart %d of %d after %s", c->restart_count,
                 c->max_restarts, what);
        MSR_LOG(outcome_level(c), "job %s: %s", c->job_id, c->message);
        start_generation(c, c->generation + 1, what);
        set_state(c, MSR__JOB_STATE__JOB_RESTARTING);
        return;
    }
    if (c->max_restarts > 0)
        snprintf(c->message, sizeof c->message, "%s; no restarts left (%d used)", what,
                 c->restart_count);
    else
        snprintf(c->message, sizeof c->message, "%s", what);
    MSR_LOG(outcome_level(c), "job %s failed: %s", c->job_id, c->message);
    set_state(c, MSR__JOB_STATE__JOB_FAILED);
}

/* Replaces the root cause of the generation that ended (c->failure, which
 * failed after losing a communication peer) with f, the failure that peer
 * loss followed; takes the tail strings of f. */
static void root_cause_found(msr_coord_t *c, msr_failure_t *f)
{
    char was[512], what[512];
    msr_failure_describe(&c->failure, was, sizeof was);
    msr_failure_describe(f, what, sizeof what);
    for (size_t i = c->nhistory; i-- > 0;)
        if (c->history[i].generation == f->generation) {
            c->history[i] = *f;
            memset(c->history[i].tail, 0, sizeof c->history[i].tail);
            c->history[i].ntail = 0;
            break;
        }
    msr_failure_clear(&c->failure);
    c->failure = *f;
    if (c->state == MSR__JOB_STATE__JOB_FAILED && c->max_restarts > 0)
        snprintf(c->message, sizeof c->message, "%s; no restarts left (%d used)", what,
                 c->restart_count);
    else if (c->state == MSR__JOB_STATE__JOB_FAILED)
        snprintf(c->message, sizeof c->message, "%s", what);
    else if (c->generation == f->generation + 1 && c->restart_count > 0)
        snprintf(c->message, sizeof c->message, "restart %d of %d after %s", c->restart_count,
                 c->max_restarts, what);
    MSR_LOG(outcome_level(c), "job %s: generation %d's root cause: %s (then %s)", c->job_id,
            f->generation, what, was);
    MARK_DIRTY(c, 1);
}

static void fail_job(msr_coord_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail_job(msr_coord_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->message, sizeof c->message, fmt, ap);
    va_end(ap);
    MSR_LOG(outcome_level(c), "job %s failed: %s", c->job_id ? c->job_id : "?", c->message);
    set_state(c, MSR__JOB_STATE__JOB_FAILED);
}

static int ready_for(const msr_coord_t *c, const node_t *n)
{
    return n->alive && n->ready_generation >= c->generation;
}

/* Elastic: the members of the next generation in a stable order: the ranks
 * they had, then newcomers by arrival; renumbered from 0. */
static void assign_elastic(msr_coord_t *c, int count)
{
    node_t **order = msr_calloc((size_t)c->nnodes, sizeof *order);
    int n = 0;
    for (size_t i = 0; order && i < c->nnodes; i++)
        if (ready_for(c, c->nodes[i]))
            order[n++] = c->nodes[i];
    for (int a = 1; a < n; a++) /* insertion sort: old rank, then arrival */
        for (int b = a; b > 0; b--) {
            node_t *x = order[b - 1], *y = order[b];
            int xr = x->rank >= 0 ? x->rank : INT32_MAX, yr = y->rank >= 0 ? y->rank : INT32_MAX;
            if (xr < yr || (xr == yr && x->joined_seq <= y->joined_seq))
                break;
            order[b - 1] = y;
            order[b] = x;
        }
    for (size_t i = 0; i < c->nnodes; i++)
        c->nodes[i]->rank = -1;
    for (int k = 0; k < n && k < count; k++)
        order[k]->rank = k;
    msr_free(order);
}

/* Forms the generation once enough nodes are ready for it. Fixed size: all
 * node_count. Elastic: MAX at once; at least MIN once the last call has
 * passed (first generation), or once every live node is ready (after a
 * failure, when who is left is known). */
static void try_form(msr_coord_t *c)
{
    if (!state_forming(c->state) || !c->configured)
        return;
    int ready = 0, alive = 0;
    for (size_t i = 0; i < c->nnodes; i++) {
        ready += ready_for(c, c->nodes[i]);
        alive += c->nodes[i]->alive;
    }
    if (elastic(c)) {
        if (ready < c->min_nodes)
            return;
        uint64_t now = msr_now_ns();
        int all_in = ready == alive && c->state == MSR__JOB_STATE__JOB_RESTARTING;
        if (ready < c->max_nodes && !all_in) {
            if (c->last_call == 0)
                c->last_call = now + (uint64_t)c->config.last_call_ms * 1000000ull;
            if (now < c->last_call)
                return; /* more nodes may come */
        }
        c->last_call = 0;
        c->node_count = ready < c->max_nodes ? ready : c->max_nodes;
        assign_elastic(c, c->node_count);
    } else {
        if (ready < c->node_count)
            return;
        /* Wanted ranks first, then the rest by arrival. */
        for (size_t i = 0; i < c->nnodes; i++) {
            node_t *n = c->nodes[i];
            n->rank = -1;
            if (ready_for(c, n) && n->wanted_rank >= 0)
                n->rank = n->wanted_rank;
        }
        int next = 0;
        for (size_t i = 0; i < c->nnodes; i++) {
            node_t *n = c->nodes[i];
            if (!ready_for(c, n) || n->rank >= 0)
                continue;
            while (member_of_rank(c, next))
                next++;
            n->rank = next;
        }
    }
    node_t *zero = member_of_rank(c, 0);
    snprintf(c->master_addr, sizeof c->master_addr, "%s", zero ? zero->host : "");
    c->master_port = zero ? zero->free_port : 0;
    c->message[0] = '\0';
    MSR_INFO("job %s: generation %d formed with %d nodes (%d workers)", c->job_id, c->generation,
             c->node_count, world_size(c));
    set_state(c, MSR__JOB_STATE__JOB_RUNNING);
}

static void node_lost(msr_coord_t *c, node_t *n, const char *why)
{
    n->alive = 0;
    if (n->hb) {
        msr_held_t *w = n->hb;
        void *call = w->call;
        n->hb = NULL;
        msr_held_free(&c->held, w);
        msr_held_fail(&c->held, call, MSR_RPC_UNAVAILABLE, "node %s: %s", n->id, why);
    }
    /* A loss that fails the generation is the job's outcome (a node that
     * left because its worker could not be started, say): as loud as the
     * outcome, so the msrun that embeds this coordinator reports it once. */
    int fails = c->state == MSR__JOB_STATE__JOB_RUNNING && n->rank >= 0;
    MSR_LOG(fails ? outcome_level(c) : MSR_LOG_WARN, "job %s: node %d (%s, pid %d) %s", c->job_id,
            n->rank, n->host, n->pid, why);
    if (fails) {
        msr_failure_t f;
        memset(&f, 0, sizeof f);
        f.set = 1;
        f.node_rank = n->rank;
        snprintf(f.host, sizeof f.host, "%s", n->host);
        f.rank = -1;
        f.pid = n->pid;
        f.exit_code = -1;
        f.time = msr_wall_time();
        f.generation = c->generation;
        snprintf(f.reason, sizeof f.reason, "%s", why);
        generation_failed(c, &f);
    } else {
        MARK_DIRTY(c, 2);
    }
}

static void fill_assignment(const msr_coord_t *c, const node_t *n, Msr__Assignment *a)
{
    msr__assignment__init(a);
    a->node_rank = n->rank;
    a->node_count = c->node_count;
    a->world_size = world_size(c);
    a->rank_offset = n->rank * c->local_worker_num;
    a->local_world_size = c->local_worker_num;
    a->master_addr = (char *)c->master_addr;
    a->master_port = c->master_port;
}

static void heartbeat_reply(msr_coord_t *c, void *call, node_t *n)
{
    Msr__HeartbeatResponse r = MSR__HEARTBEAT_RESPONSE__INIT;
    Msr__Assignment a;
    Msr__Failure f;
    char *missing[64];
    char names[64][32];
    size_t nmissing = 0;
    r.generation = c->generation;
    r.state = c->state;
    r.restart_count = c->restart_count;
    r.max_restarts = c->max_restarts;
    r.message = c->message;
    if (c->state == MSR__JOB_STATE__JOB_RUNNING && n->alive && n->rank >= 0) {
        fill_assignment(c, n, &a);
        r.assignment = &a;
    }
    if (state_forming(c->state)) {
        int ready = 0;
        for (size_t i = 0; i < c->nnodes; i++) {
            node_t *m = c->nodes[i];
            if (!m->alive)
                continue;
            if (m->ready_generation >= c->generation) {
                ready++;
            } else if (nmissing < MSR_ARRAY_SIZE(names)) {
                snprintf(names[nmissing], sizeof names[0], "%s (stopping)", m->host);
                missing[nmissing] = names[nmissing];
                nmissing++;
            }
        }
        r.joined_nodes = ready;
        r.expected_nodes = c->node_count;
        int absent = c->node_count - alive_nodes(c);
        if (absent > 0 && nmissing < MSR_ARRAY_SIZE(names)) {
            snprintf(names[nmissing], sizeof names[0], "%d node%s not yet joined", absent,
                     absent == 1 ? "" : "s");
            missing[nmissing] = names[nmissing];
            nmissing++;
        }
        r.n_missing = nmissing;
        r.missing = missing;
    }
    if (c->failure.set) {
        msr_failure_to_msg(&c->failure, &f);
        r.failure = &f;
    }
    int32_t outs[MSR_OUTPUT_ASKS_MAX]; /* ranks whose output the dashboard wants */
    r.n_output_ranks = msr_coord_output_ranks(c, n, outs, MSR_OUTPUT_ASKS_MAX);
    r.output_ranks = outs;
    reply(c, call, &r.base);
}

void msr_coord_wake_node(msr_coord_t *c, node_t *n)
{
    if (n->hb == NULL)
        return; /* its heartbeat is on its way: answered at once when it comes */
    msr_held_t *w = n->hb;
    void *call = w->call;
    n->hb = NULL;
    n->last_seen = msr_now_ns(); /* it was held up to now: the node's next call counts from here */
    msr_held_free(&c->held, w);
    heartbeat_reply(c, call, n);
}

static void job_configure(msr_coord_t *c, const Msr__JoinRequest *req)
{
    if (!c->job_id || !*c->job_id) {
        msr_free(c->job_id);
        c->job_id = msr_strdup(req->job_id ? req->job_id : "");
    }
    if (c->worker_num <= 0)
        c->worker_num = req->worker_num;
    if (c->local_worker_num <= 0)
        c->local_worker_num = req->local_worker_num;
    if (c->max_restarts < 0)
        c->max_restarts = req->max_restarts;
    if (c->min_nodes <= 0 && c->max_nodes <= 0) {
        c->min_nodes = req->min_nodes;
        c->max_nodes = req->max_nodes;
    }
}

msr_status_t msr_coord_settings_valid(msr_coord_t *c)
{
    if (c->worker_num <= 0 || c->local_worker_num <= 0 || c->worker_num % c->local_worker_num)
        return MSR_ERR_INVALID_ARG;
    if (elastic(c) && c->worker_num != c->max_nodes * c->local_worker_num)
        return MSR_ERR_INVALID_ARG;
    c->node_count = c->worker_num / c->local_worker_num;
    if (c->rank_done == NULL) {
        c->rank_done = msr_calloc((size_t)c->worker_num, 1);
        if (c->rank_done == NULL)
            return MSR_ERR_NO_MEMORY;
    }
    return MSR_OK;
}

/* Whether a joining node's settings match the job's; refuses the call,
 * naming the first that differs, when one does. */
static int settings_match(msr_coord_t *c, void *call, const Msr__JoinRequest *req)
{
    const struct {
        const char *opt;
        int mine, theirs;
    } checks[] = {
        {"worker_num", c->worker_num, req->worker_num},
        {"local_worker_num", c->local_worker_num, req->local_worker_num},
        {"max_restarts", c->max_restarts, req->max_restarts},
        {"nnodes minimum", c->min_nodes, req->min_nodes},
        {"nnodes maximum", c->max_nodes, req->max_nodes},
    };
    for (size_t i = 0; i < MSR_ARRAY_SIZE(checks); i++) {
        if (checks[i].mine == checks[i].theirs)
            continue;
        MSR_WARN("job %s: refused node %s (pid %d): %s is %d there, %d in the job", c->job_id,
                 req->host, req->pid, checks[i].opt, checks[i].theirs, checks[i].mine);
        msr_held_fail(&c->held, call, MSR_RPC_FAILED_PRECONDITION,
                      "this node's %s is %d but the job's is %d", checks[i].opt, checks[i].theirs,
                      checks[i].mine);
        return 0;
    }
    return 1;
}

static void do_join(msr_coord_t *c, void *call, const Msr__JoinRequest *req)
{
    const char *host = req->host && *req->host ? req->host : "unknown host";
    if (req->protocol_version != MSR_PROTOCOL_VERSION) {
        MSR_WARN("refused node %s (pid %d): protocol version %u, the coordinator speaks %d", host,
                 req->pid, req->protocol_version, MSR_PROTOCOL_VERSION);
        msr_held_fail(
            &c->held, call, MSR_RPC_FAILED_PRECONDITION,
            "this node speaks protocol version %u but the coordinator speaks %d (mixed msrun "
            "versions?)",
            req->protocol_version, MSR_PROTOCOL_VERSION);
        return;
    }
    if (state_terminal(c->state)) {
        msr_held_fail(&c->held, call, MSR_RPC_FAILED_PRECONDITION, "the job has already %s",
                      c->state == MSR__JOB_STATE__JOB_DONE ? "finished" : "failed");
        return;
    }
    if (!c->configured) {
        job_configure(c, req);
        if (msr_coord_settings_valid(c) != MSR_OK) {
            msr_held_fail(&c->held, call, MSR_RPC_INVALID_ARGUMENT,
                          "worker_num %d is not a positive multiple of local_worker_num %d",
                          req->worker_num, req->local_worker_num);
            /* Let a correct node configure the job instead. */
            if (!c->config.worker_num)
                c->worker_num = 0;
            if (!c->config.local_worker_num)
                c->local_worker_num = 0;
            return;
        }
        c->configured = 1;
    }
    const char *jid = req->job_id ? req->job_id : "";
    if (strcmp(jid, c->job_id) != 0) {
        MSR_WARN("job %s: refused node %s (pid %d): its job id is '%s'", c->job_id, host, req->pid,
                 jid);
        msr_held_fail(&c->held, call, MSR_RPC_FAILED_PRECONDITION,
                      "this node's job id is '%.100s' but the coordinator runs job '%.100s'", jid,
                      c->job_id);
        return;
    }
    if (!settings_match(c, call, req))
        return;
    node_t *n = node_find(c, req->node_id);
    if (n == NULL && elastic(c) && req->node_rank >= 0) {
        msr_held_fail(
            &c->held, call, MSR_RPC_INVALID_ARGUMENT,
            "an elastic job (--nnodes %d:%d) assigns node ranks itself: leave --node_rank at -1",
            c->min_nodes, c->max_nodes);
        return;
    }
    if (n == NULL) {
        if (req->node_rank >= c->node_count) {
            msr_held_fail(&c->held, call, MSR_RPC_INVALID_ARGUMENT,
                          "node_rank %d is out of range: the job has %d nodes (0 .. %d)",
                          req->node_rank, c->node_count, c->node_count - 1);
            return;
        }
        for (size_t i = 0; i < c->nnodes; i++) {
            node_t *m = c->nodes[i];
            if (m->alive && req->node_rank >= 0 && m->wanted_rank == req->node_rank) {
                MSR_WARN("job %s: refused node %s (pid %d): node rank %d is taken by %s (pid %d)",
                         c->job_id, host, req->pid, req->node_rank, m->host, m->pid);
                msr_held_fail(&c->held, call, MSR_RPC_FAILED_PRECONDITION,
                              "node rank %d is already taken by %s (pid %d)", req->node_rank,
                              m->host, m->pid);
                return;
            }
        }
        int capacity = elastic(c) ? c->max_nodes : c->node_count;
        if (alive_nodes(c) >= capacity) {
            msr_held_fail(&c->held, call, MSR_RPC_RESOURCE_EXHAUSTED,
                          "the job already has all its %d nodes", capacity);
            return;
        }
        n = msr_coord_node_add(c, host);
        if (n == NULL) {
            msr_held_fail(&c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
            return;
        }
        unsigned char rnd[12];
        msr_random_bytes(rnd, sizeof rnd);
        for (size_t i = 0; i < sizeof rnd; i++)
            snprintf(n->id + 2 * i, 3, "%02x", rnd[i]);
        n->wanted_rank = req->node_rank >= 0 ? req->node_rank : -1;
        n->joined_seq = ++c->join_seq;
        if (elastic(c) && c->state == MSR__JOB_STATE__JOB_RUNNING && c->last_call == 0) {
            /* taken in at the next generation, after a last call for others */
            c->last_call = msr_now_ns() + (uint64_t)c->config.last_call_ms * 1000000ull;
        }
        MSR_INFO("job %s: node %s joined from %s (pid %d, %d workers, %d of %d nodes)", c->job_id,
                 n->id, host, req->pid, req->local_worker_num, alive_nodes(c) + 1, c->node_count);
    }
    n->alive = 1;
    n->pid = req->pid;
    n->local_worker_num = req->local_worker_num;
    n->free_port = req->free_port;
    n->last_seen = msr_now_ns();
    n->suspect_until = 0;
    MARK_DIRTY(c, 1);
    Msr__JoinResponse r = MSR__JOIN_RESPONSE__INIT;
    r.node_id = n->id;
    r.worker_num = c->worker_num;
    r.local_worker_num = c->local_worker_num;
    r.node_count = c->node_count;
    r.max_restarts = c->max_restarts;
    r.generation = c->generation;
    reply(c, call, &r.base);
    /* Held heartbeats are not woken for progress: that would make forming a
     * job of N nodes cost N^2 answers. Agents see progress at their next
     * heartbeat; only a change of state or generation wakes them. */
}

static void do_heartbeat(msr_coord_t *c, void *call, const Msr__HeartbeatRequest *req)
{
    node_t *n = node_find(c, req->node_id);
    if (n == NULL || !n->alive) {
        msr_held_fail(&c->held, call, MSR_RPC_NOT_FOUND,
                      n ? "this node was declared lost; join again"
                        : "unknown node (the coordinator may have restarted); join again");
        return;
    }
    n->last_seen = msr_now_ns();
    n->suspect_until = 0;
    if (n->hb) {
        /* A newer heartbeat replaces the held one. */
        msr_held_t *w = n->hb;
        void *old = w->call;
        n->hb = NULL;
        msr_held_free(&c->held, w);
        heartbeat_reply(c, old, n);
    }
    if (req->ready_generation > n->ready_generation) {
        n->ready_generation = req->ready_generation;
        MARK_DIRTY(c, 1);
        try_form(c);
    }
    if (req->n_outputs)
        msr_coord_output_take(c, n, req);
    if (req->generation != c->generation || req->known_state != c->state || req->wait_ms == 0 ||
        msr_coord_output_unsent(c, n)) {
        heartbeat_reply(c, call, n);
        return;
    }
    int64_t wait = req->wait_ms > 60000 ? 60000 : (int64_t)req->wait_ms;
    msr_held_t *w = heartbeat_hold(c, call, n, wait);
    if (w == NULL) {
        heartbeat_reply(c, call, n);
        return;
    }
    n->hb = w;
}

static void do_report(msr_coord_t *c, void *call, const Msr__ReportRequest *req)
{
    node_t *n = node_find(c, req->node_id);
    Msr__ReportResponse r = MSR__REPORT_RESPONSE__INIT;
    if (n == NULL) {
        msr_held_fail(&c->held, call, MSR_RPC_NOT_FOUND, "unknown node; join again");
        return;
    }
    n->last_seen = msr_now_ns();
    const Msr__Failure *e = req->exit;
    if (e == NULL) {
        msr_held_fail(&c->held, call, MSR_RPC_INVALID_ARGUMENT, "report without an exit");
        return;
    }
    if (req->generation == c->generation && c->state == MSR__JOB_STATE__JOB_RUNNING) {
        if (e->exit_code == 0 && e->signal == 0) {
            if (e->rank >= 0 && e->rank < world_size(c) && e->rank < c->worker_num &&
                !c->rank_done[e->rank]) {
                c->rank_done[e->rank] = 1;
                c->ndone++;
                MARK_DIRTY(c, 1);
                if (c->ndone == world_size(c)) {
                    snprintf(c->message, sizeof c->message, "all %d workers exited 0",
                             world_size(c));
                    set_state(c, MSR__JOB_STATE__JOB_DONE);
                }
            }
        } else {
            msr_failure_t f;
            memset(&f, 0, sizeof f);
            msr_failure_from_msg(&f, e);
            f.node_rank = n->rank;
            snprintf(f.host, sizeof f.host, "%s", n->host);
            f.generation = c->generation;
            generation_failed(c, &f);
        }
    } else if ((e->exit_code != 0 || e->signal != 0) && !e->after_peer_lost && c->failure.set &&
               c->failure.after_peer_lost && c->failure.generation == req->generation) {
        /* the failure that ended the generation followed a lost peer: this
         * one, reported after it, is what the peer lost */
        msr_failure_t f;
        memset(&f, 0, sizeof f);
        msr_failure_from_msg(&f, e);
        /* the node's rank in that generation: the coordinator's may be
         * gone with it */
        f.node_rank = e->node_rank >= 0 ? e->node_rank : n->rank;
        snprintf(f.host, sizeof f.host, "%s", n->host);
        f.generation = req->generation;
        root_cause_found(c, &f);
    }
    r.state = c->state;
    r.generation = c->generation;
    reply(c, call, &r.base);
}

static void do_leave(msr_coord_t *c, void *call, const Msr__LeaveRequest *req)
{
    node_t *n = node_find(c, req->node_id);
    Msr__LeaveResponse r = MSR__LEAVE_RESPONSE__INIT;
    if (n && n->alive) {
        n->left = 1;
        char why[200];
        snprintf(why, sizeof why, "left the job (%.150s)",
                 req->reason && *req->reason ? req->reason : "no reason given");
        if (state_terminal(c->state)) {
            n->alive = 0;
            MSR_INFO("job %s: node %d (%s) left", c->job_id, n->rank, n->host);
        } else {
            node_lost(c, n, why);
        }
    }
    reply(c, call, &r.base);
}

char *msr_coord_node_state(const msr_coord_t *c, const node_t *n)
{
    if (n->left)
        return "left";
    if (!n->alive)
        return "lost";
    if (n->rank >= 0)
        return state_terminal(c->state) ? "finished" : "running";
    if (n->ready_generation >= c->generation)
        return "waiting";
    return n->ready_generation >= 0 ? "stopping" : "joining";
}

static void do_status(msr_coord_t *c, void *call)
{
    Msr__StatusResponse r = MSR__STATUS_RESPONSE__INIT;
    Msr__Failure f, hist[MSR_FAILURE_HISTORY], *histp[MSR_FAILURE_HISTORY];
    r.job_id = c->job_id ? c->job_id : "";
    r.state = c->state;
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
    reply(c, call, &r.base);
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
    msr_list_init(&c->answers);
    msr_held_io_t io = {c, s_set_data, s_get_data, s_deadline, s_fail};
    msr_held_calls_init(&c->held, &io);
    msr_held_handler_t hb = {c, heartbeat_expired, heartbeat_cancelled};
    msr_held_handler_t answer = {c, NULL, answer_cancelled};
    msr_held_calls_handle(&c->held, MSR_HELD_HEARTBEAT, &hb);
    msr_held_calls_handle(&c->held, MSR_HELD_ANSWER, &answer);
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
    if (c->worker_num > 0 && c->local_worker_num > 0 && c->max_restarts >= 0) {
        if (msr_coord_settings_valid(c) != MSR_OK) {
            msr_store_core_destroy(c->store);
            msr_free(c->job_id);
            msr_free(c);
            return MSR_ERR_INVALID_ARG;
        }
        c->configured = 1;
    }
    c->state = MSR__JOB_STATE__JOB_WAITING;
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
    release_held(c, "coordinator shutting down");
    for (size_t i = 0; i < c->nnodes; i++) {
        node_t *n = c->nodes[i];
        if (n->hb) {
            void *call = n->hb->call;
            msr_held_free(&c->held, n->hb);
            n->hb = NULL;
            msr_held_fail(&c->held, call, MSR_RPC_UNAVAILABLE, "coordinator shutting down");
        }
    }
    store_reset(c, "coordinator shutting down");
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
    switch (method) {
    case MSR_RPC_JOIN:
        do_join(c, call, (const Msr__JoinRequest *)req);
        break;
    case MSR_RPC_HEARTBEAT:
        do_heartbeat(c, call, (const Msr__HeartbeatRequest *)req);
        break;
    case MSR_RPC_REPORT:
        do_report(c, call, (const Msr__ReportRequest *)req);
        break;
    case MSR_RPC_LEAVE:
        do_leave(c, call, (const Msr__LeaveRequest *)req);
        break;
    case MSR_RPC_STATUS:
        do_status(c, call);
        break;
    case MSR_RPC_SET:
    case MSR_RPC_GET:
    case MSR_RPC_ADD:
    case MSR_RPC_COMPARE_SET:
    case MSR_RPC_DELETE:
    case MSR_RPC_BARRIER:
    case MSR_RPC_ALLGATHER:
    case MSR_RPC_PUBLISH:
    case MSR_RPC_FETCH:
        msr_store_core_call(c->store, call, method, req);
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
    default:
        msr_held_fail(&c->held, call, MSR_RPC_UNIMPLEMENTED, "unknown method");
    }
}

void msr_coord_cancel(msr_coord_t *c, void *call)
{
    msr_held_cancel(&c->held, call);
}

void msr_coord_tick(msr_coord_t *c, uint64_t now)
{
    msr_held_tick(&c->held, now); /* the store's waits and the heartbeats */
    if (now >= c->next_check) {
        uint64_t limit = (uint64_t)c->config.node_timeout_ms * 1000000ull;
        c->next_check = now + limit / 4;
        for (size_t i = 0; i < c->nnodes; i++) {
            node_t *n = c->nodes[i];
            if (n->alive && n->hb == NULL && n->suspect_until && !state_terminal(c->state)) {
                if (now >= n->suspect_until) {
                    node_lost(c, n, "was lost: its connection broke and it did not call again");
                    continue;
                }
                if (n->suspect_until < c->next_check)
                    c->next_check = n->suspect_until;
            }
            if (n->alive && n->hb == NULL && now > n->last_seen && now - n->last_seen > limit &&
                !state_terminal(c->state)) {
                char why[96];
                snprintf(why, sizeof why, "was lost: no heartbeat for %lld ms",
                         (long long)c->config.node_timeout_ms);
                node_lost(c, n, why);
            }
        }
    }
    if (elastic(c) && c->last_call && now >= c->last_call) {
        if (c->state == MSR__JOB_STATE__JOB_RUNNING && alive_nodes(c) > c->node_count) {
            /* nodes joined a running job: re-form to take them in (a change
             * of membership, not a failure: no restart is counted) */
            int joined = alive_nodes(c) - c->node_count;
            c->last_call = 0;
            snprintf(c->message, sizeof c->message, "%d node%s joined: re-forming with up to %d",
                     joined, joined == 1 ? "" : "s", alive_nodes(c));
            MSR_INFO("job %s: %s", c->job_id, c->message);
            start_generation(c, c->generation + 1, "nodes joined");
            set_state(c, MSR__JOB_STATE__JOB_RESTARTING);
        } else {
            try_form(c);
        }
    }
    if (state_forming(c->state) && c->form_deadline != MSR_DEADLINE_NEVER &&
        now >= c->form_deadline) {
        int ready = 0;
        for (size_t i = 0; i < c->nnodes; i++)
            ready += c->nodes[i]->alive && c->nodes[i]->ready_generation >= c->generation;
        fail_job(c, "generation %d did not form within %g s: %d of %d nodes ready", c->generation,
                 (double)c->config.join_timeout_ms / 1000.0, ready, c->node_count);
    }
    if ((msr_coord_persist_pending(c) || !msr_list_empty(&c->answers)) &&
        msr_now_ns() >= c->retry_save_at)
        commit(c);
}

void msr_coord_flush(msr_coord_t *c)
{
    if (msr_coord_persist_pending(c) || !msr_list_empty(&c->answers))
        commit(c);
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

Msr__JobState msr_coord_state(const msr_coord_t *c)
{
    return c->state;
}

uint64_t msr_coord_calls(const msr_coord_t *c, msr_rpc_method_t method)
{
    return (unsigned)method < MSR_RPC_METHOD_COUNT ? c->calls[method] : 0;
}
