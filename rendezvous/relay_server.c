/* A relay agent's server: its nodes' membership calls relayed to the
 * coordinator in batches, their store calls forwarded one by one over the
 * same connection (relay.h). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <grpc/slice.h>

#include "base/alloc.h"
#include "base/list.h"
#include "base/log.h"
#include "base/time.h"
#include "rendezvous/held.h"
#include "rendezvous/relay.h"
#include "rendezvous/relay_server_impl.h"

/* A node's store call forwarded upstream alone (its answer is its own: a
 * Get or a Barrier may wait long, which would hold a batch). head.method
 * is the call's; head.call is NULL once the node gave up. */
typedef struct forward {
    node_call_t head;
    msr_rpc_async_t async;
    msr_list_t link;
    /* a Publish's request, packed: its entries kept once answered OK */
    uint8_t *publish;
    size_t publish_len;
} forward_t;

/* A lower relay's batch being relayed: its calls queued on this relay,
 * answered when all of them are. */
typedef struct child_batch child_batch_t;

typedef struct child_slot {
    child_batch_t *batch;
    int code;
    char *message;
    uint8_t *resp;
    size_t len;
} child_slot_t;

struct child_batch {
    node_call_t head; /* the lower relay's Relay call */
    msr_relay_server_t *server;
    char relay_id[MSR_RELAY_ID_MAX + 1];
    size_t n, pending;
    child_slot_t slots[];
};

/* The node of nc's call counts under its node id once its first Join is
 * answered, and no longer once a call of its fails (it calls the
 * coordinator now, or is gone) or it leaves. */
static void node_recount(node_call_t *nc, int code, const uint8_t *resp, size_t len)
{
    msr_relay_server_t *s = nc->server;
    int first_join = strncmp(nc->key, "hp:", 3) == 0;
    if (code != 0 || first_join || nc->method == MSR_RPC_LEAVE)
        msr_relay_cover_drop_node(&s->cover, nc->key);
    if (code != 0 || !first_join)
        return;
    Msr__JoinResponse *j = msr__join_response__unpack(NULL, len, resp);
    char key[256], why[400];
    snprintf(key, sizeof key, "id:%.200s", j && j->node_id ? j->node_id : "");
    if (j != NULL && *j->node_id &&
        msr_relay_cover_node(&s->cover, s->me, s->subtree, key, why, sizeof why) != 0)
        MSR_WARN("%s: node %s joined but is not counted: %s", s->me, j->node_id, why);
    if (j != NULL)
        msr__join_response__free_unpacked(j, NULL);
}

static void node_answered(void *arg, int code, const char *message, const uint8_t *resp, size_t len)
{
    node_call_t *nc = arg;
    if (nc->call != NULL) {
        node_recount(nc, code, resp, len);
        msr_rpc_call_set_data(nc->call, NULL);
        if (code == 0) {
            grpc_slice s = grpc_slice_from_copied_buffer((const char *)resp, len);
            msr_rpc_call_reply_slice(nc->call, &s);
            grpc_slice_unref(s);
        } else {
            msr_rpc_call_fail(nc->call, code, "%s", message);
        }
    }
    msr_free(nc);
}

/* ---- how long a lower relay counts ---- */

/* A lower relay counts in the cover until one of its Relay calls breaks,
 * or once it has had no batch in flight here for LOWER_IDLE_MS: one killed
 * between two batches ends no call (its nodes fall back to the
 * coordinator, which this relay does not see), and a live one always has
 * a batch in flight but for the moment its nodes call again; it counts
 * again with its next batch. */
#define LOWER_IDLE_MS 3000

typedef struct lower_use {
    uint32_t batches; /* in flight here */
    uint64_t idle_since;
} lower_use_t;

static void lower_busy(msr_relay_server_t *s, const char *relay_id, int delta)
{
    lower_use_t *u = msr_map_get(&s->lower_use, relay_id);
    if (u == NULL && delta > 0) {
        if ((u = msr_calloc(1, sizeof *u)) == NULL ||
            msr_map_put(&s->lower_use, relay_id, u, NULL) != MSR_OK) {
            msr_free(u);
            return; /* it counts until one of its calls breaks, as before */
        }
    }
    if (u == NULL)
        return;
    u->batches += (uint32_t)delta;
    if (u->batches == 0)
        u->idle_since = msr_now_ns();
}

typedef struct reclaim {
    uint64_t now;
    char ids[16][MSR_RELAY_ID_MAX + 1];
    int n;
} reclaim_t;

static void reclaim_one(const char *key, void *value, void *arg)
{
    reclaim_t *r = arg;
    const lower_use_t *u = value;
    if (u->batches == 0 && r->now - u->idle_since >= (uint64_t)LOWER_IDLE_MS * 1000000ull &&
        r->n < 16)
        snprintf(r->ids[r->n++], sizeof r->ids[0], "%s", key);
}

/* Drops the lower relays idle past LOWER_IDLE_MS (16 at most a call): how
 * many. */
static int lower_reclaim(msr_relay_server_t *s)
{
    reclaim_t r = {.now = msr_now_ns()};
    msr_map_foreach(&s->lower_use, reclaim_one, &r);
    for (int k = 0; k < r.n; k++) {
        MSR_INFO("%s: lower relay %s sent nothing for %d ms: no longer counted", s->me, r.ids[k],
                 LOWER_IDLE_MS);
        msr_free(msr_map_remove(&s->lower_use, r.ids[k]));
        msr_relay_cover_drop_relay(&s->cover, r.ids[k]);
    }
    return r.n;
}

/* msr_relay_cover_check, again once the idle lower relays were dropped. */
static int cover_check(msr_relay_server_t *s, const Msr__RelayRequest *req, char *why, size_t wlen)
{
    if (msr_relay_cover_check(&s->cover, s->me, s->subtree, req, why, wlen) == 0)
        return 0;
    if (strcmp(why, MSR_RELAY_NO_MEMORY) == 0 || lower_reclaim(s) == 0)
        return -1;
    return msr_relay_cover_check(&s->cover, s->me, s->subtree, req, why, wlen);
}

/* Every call of a lower relay's batch answered: one RelayResponse. */
static void child_finish(child_batch_t *cb)
{
    msr_rpc_call_t *call = cb->head.call;
    Msr__RelayAnswer *ans = call ? msr_calloc(cb->n, sizeof *ans) : NULL;
    Msr__RelayAnswer **ansp = call ? msr_calloc(cb->n, sizeof *ansp) : NULL;
    if (call != NULL)
        msr_rpc_call_set_data(call, NULL);
    if (call != NULL && (ans == NULL || ansp == NULL)) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
    } else if (call != NULL) {
        for (size_t k = 0; k < cb->n; k++) {
            msr__relay_answer__init(&ans[k]);
            ans[k].code = cb->slots[k].code;
            ans[k].message = cb->slots[k].message ? cb->slots[k].message : "";
            ans[k].response.data = cb->slots[k].resp;
            ans[k].response.len = cb->slots[k].len;
            ansp[k] = &ans[k];
        }
        Msr__RelayResponse r = MSR__RELAY_RESPONSE__INIT;
        r.n_answers = cb->n;
        r.answers = ansp;
        msr_rpc_call_reply(call, &r.base);
    }
    msr_free(ans);
    msr_free(ansp);
    for (size_t k = 0; k < cb->n; k++) {
        msr_free(cb->slots[k].message);
        msr_free(cb->slots[k].resp);
    }
    lower_busy(cb->server, cb->relay_id, -1);
    msr_free(cb);
}

static void child_answered(void *arg, int code, const char *message, const uint8_t *resp,
                           size_t len)
{
    child_slot_t *slot = arg;
    child_batch_t *cb = slot->batch;
    slot->code = code;
    if (code != 0) {
        slot->message = msr_strdup(message ? message : "");
    } else if ((slot->resp = msr_malloc(len ? len : 1)) != NULL) {
        if (len > 0) /* an empty answer (a Leave's, a Progress's) may come as NULL */
            memcpy(slot->resp, resp, len);
        slot->len = len;
    } else {
        slot->code = MSR_RPC_RESOURCE_EXHAUSTED;
    }
    if (--cb->pending == 0)
        child_finish(cb);
}

/* A lower relay's batch: checked as the coordinator would (its subtree
 * within this relay's, its calls crossing this relay too), and with the
 * other relays under this one (their subtrees together within this
 * relay's), its calls queued with this relay's own. */
static void on_child_batch(msr_relay_server_t *s, msr_rpc_call_t *call,
                           const Msr__RelayRequest *req)
{
    char why[400];
    ProtobufCMessage **reqs = msr_calloc(req->n_calls ? req->n_calls : 1, sizeof *reqs);
    child_batch_t *cb = NULL;
    if (reqs == NULL) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
        return;
    }
    if (msr_relay_batch_check(req, s->subtree, 1, reqs, why, sizeof why) != 0 ||
        cover_check(s, req, why, sizeof why) != 0) {
        int no_mem = strcmp(why, MSR_RELAY_NO_MEMORY) == 0;
        if (!no_mem)
            MSR_WARN("relay %s: refused a lower relay's batch: %s", msr_relay_id(s->relay), why);
        msr_rpc_call_fail(call, no_mem ? MSR_RPC_RESOURCE_EXHAUSTED : MSR_RPC_INVALID_ARGUMENT,
                          "%s", why);
        goto out;
    }
    if ((cb = msr_calloc(1, sizeof *cb + req->n_calls * sizeof(child_slot_t))) == NULL) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
        goto out;
    }
    cb->head.call = call;
    cb->head.method = MSR_RPC_RELAY;
    cb->server = s;
    snprintf(cb->relay_id, sizeof cb->relay_id, "%s", req->relay_id);
    lower_busy(s, cb->relay_id, 1);
    cb->n = req->n_calls;
    cb->pending = req->n_calls + 1; /* + 1: held until every call is queued */
    msr_rpc_call_set_data(call, cb);
    for (size_t k = 0; k < req->n_calls; k++) {
        cb->slots[k].batch = cb;
        msr_rpc_method_t m = (msr_rpc_method_t)req->calls[k]->method;
        if (msr_relay_submit_from(s->relay, m, reqs[k], req->depth + 1, child_answered,
                                  &cb->slots[k]) != MSR_OK)
            child_answered(&cb->slots[k], MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory", NULL,
                           0);
    }
    if (--cb->pending == 0)
        child_finish(cb);
out:
    for (size_t k = 0; k < req->n_calls; k++)
        msr_rpc_message_free(reqs[k]);
    msr_free(reqs);
}

/* The entries of a forwarded Publish (packed) the coordinator took. */
static void fetch_keep(msr_relay_server_t *s, const uint8_t *packed, size_t len)
{
    Msr__PublishRequest *r = msr__publish_request__unpack(NULL, len, packed);
    if (r == NULL)
        return;
    msr_relay_fetch_published(s, r);
    msr__publish_request__free_unpacked(r, NULL);
}

/* The key a store write names, and its generation; NULL for the others. */
static const char *written_key(msr_rpc_method_t method, const ProtobufCMessage *req,
                               int32_t *generation)
{
    switch (method) {
    case MSR_RPC_SET:
        *generation = ((const Msr__SetRequest *)req)->generation;
        return ((const Msr__SetRequest *)req)->key;
    case MSR_RPC_COMPARE_SET:
        *generation = ((const Msr__CompareSetRequest *)req)->generation;
        return ((const Msr__CompareSetRequest *)req)->key;
    case MSR_RPC_ADD:
        *generation = ((const Msr__AddRequest *)req)->generation;
        return ((const Msr__AddRequest *)req)->key;
    case MSR_RPC_DELETE:
        *generation = ((const Msr__DeleteRequest *)req)->generation;
        return ((const Msr__DeleteRequest *)req)->key;
    default:
        return NULL;
    }
}

/* The coordinator's answer to a forwarded store call, handed to the node
 * unchanged (bytes, or code and message). A call the relay's stop
 * cancelled is answered UNAVAILABLE, as when the relay is gone: the node
 * sends it to the coordinator itself. */
static void forward_done(msr_rpc_async_t *a)
{
    forward_t *f = MSR_CONTAINER_OF(a, forward_t, async);
    msr_relay_server_t *s = f->head.server;
    msr_list_remove(&f->link);
    atomic_fetch_sub(&s->nforwards, 1);
    /* kept before the node hears it: its next fetch finds them */
    if (f->publish != NULL && a->status == MSR_OK && !s->stopping)
        fetch_keep(s, f->publish, f->publish_len);
    if (f->head.call != NULL) {
        msr_rpc_call_set_data(f->head.call, NULL);
        if (s->stopping && a->status == MSR_ERR_CANCELED)
            msr_rpc_call_fail(f->head.call, MSR_RPC_UNAVAILABLE, "%s is shutting down", s->me);
        else
            msr_rpc_call_forward(f->head.call, a);
    }
    msr_rpc_async_cleanup(a);
    msr_free(f->publish);
    msr_free(f);
}

/* A node's store call sent upstream alone over the relay's connection,
 * with the node's deadline; the coordinator checks it as a direct call. */
static void forward_start(msr_relay_server_t *s, msr_rpc_call_t *call, msr_rpc_method_t method,
                          const ProtobufCMessage *req)
{
    int32_t generation = 0;
    const char *key = written_key(method, req, &generation);
    if (key != NULL)
        msr_relay_fetch_written(s, generation, key);
    if (method == MSR_RPC_PUBLISH)
        msr_relay_fetch_publishing(s, (const Msr__PublishRequest *)req);
    if (method == MSR_RPC_FETCH && msr_relay_fetch_answer(s, call, (const Msr__FetchRequest *)req))
        return;
    uint64_t max = atomic_load(&s->forward_max);
    if ((uint64_t)atomic_load(&s->nforwards) >= max) {
        /* as the coordinator's bound of held calls: the node's worker
         * hears it, nothing is sent upstream */
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED,
                          "%s forwards at most %llu store calls at once, and %llu are "
                          "unanswered: %s refused",
                          s->me, (unsigned long long)max,
                          (unsigned long long)atomic_load(&s->nforwards),
                          msr_rpc_methods[method].name);
        return;
    }
    if (method == MSR_RPC_BARRIER && msr_relay_merge_add(s, call, (const Msr__BarrierRequest *)req))
        return;
    if (method == MSR_RPC_ADD && msr_relay_add_merge(s, call, (const Msr__AddRequest *)req))
        return;
    if (method == MSR_RPC_PUBLISH &&
        msr_relay_publish_merge(s, call, (const Msr__PublishRequest *)req))
        return;
    msr_relay_forward_alone(s, call, method, req);
}

void msr_relay_forward_alone(msr_relay_server_t *s, msr_rpc_call_t *call, msr_rpc_method_t method,
                             const ProtobufCMessage *req)
{
    forward_t *f = msr_calloc(1, sizeof *f);
    if (f == NULL) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
        return;
    }
    f->head.call = call;
    f->head.server = s;
    f->head.method = method;
    f->async.method = method;
    f->async.deadline = msr_rpc_call_deadline(call);
    f->async.raw = 1;
    f->async.done = forward_done;
    if (method == MSR_RPC_PUBLISH) {
        /* kept to answer the subtree's fetches once the coordinator took
         * it; not kept when there is no memory for the copy */
        f->publish_len = protobuf_c_message_get_packed_size(req);
        if ((f->publish = msr_malloc(f->publish_len ? f->publish_len : 1)) != NULL)
            protobuf_c_message_pack(req, f->publish);
    }
    msr_rpc_call_set_data(call, f);
    if (msr_rpc_call_start(s->up, s->loop, &f->async, req) != MSR_OK) {
        msr_rpc_call_set_data(call, NULL);
        msr_free(f->publish);
        msr_free(f);
        msr_rpc_call_fail(call, MSR_RPC_UNAVAILABLE, "%s cannot forward %s upstream", s->me,
                          msr_rpc_methods[method].name);
        return;
    }
    msr_list_push_back(&s->forwards, &f->link);
    atomic_fetch_add(&s->nforwards, 1);
    s->forwarded++;
}

static void on_call(void *arg, msr_rpc_call_t *call, msr_rpc_method_t method, ProtobufCMessage *req)
{
    msr_relay_server_t *s = arg;
    if (s->stopping) {
        /* a call that arrived as the server stops: its relay may be gone
         * already; the node (or lower relay) calls elsewhere */
        msr_rpc_call_fail(call, MSR_RPC_UNAVAILABLE, "the relay is shutting down");
        return;
    }
    if (method == MSR_RPC_RELAY) {
        on_child_batch(s, call, (const Msr__RelayRequest *)req);
        return;
    }
    if (msr_relay_method_forwarded(method)) {
        forward_start(s, call, method, req);
        return;
    }
    if (!msr_relay_method_relayed(method)) {
        msr_rpc_call_fail(call, MSR_RPC_UNIMPLEMENTED,
                          "a relay serves Join, Heartbeat, Report, Leave, Progress, the store's "
                          "calls and a lower relay's Relay; call the coordinator for %s",
                          msr_rpc_methods[method].name);
        return;
    }
    node_call_t *nc = msr_calloc(1, sizeof *nc);
    if (nc == NULL) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
        return;
    }
    nc->call = call;
    nc->server = s;
    nc->method = method;
    msr_relay_call_key(method, req, nc->key, sizeof nc->key);
    char why[400];
    if (msr_relay_cover_node(&s->cover, s->me, s->subtree, nc->key, why, sizeof why) != 0) {
        int no_mem = strcmp(why, MSR_RELAY_NO_MEMORY) == 0;
        msr_free(nc);
        if (no_mem)
            msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
        else
            msr_rpc_call_fail(call, MSR_RPC_FAILED_PRECONDITION, "%s", why);
        return;
    }
    msr_rpc_call_set_data(call, nc);
    if (msr_relay_submit(s->relay, method, req, node_answered, nc) != MSR_OK) {
        msr_rpc_call_set_data(call, NULL);
        msr_relay_cover_drop_node(&s->cover, nc->key);
        msr_free(nc);
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
    }
}

/* The node gave up on its call: its answer, when it comes, is dropped. */
static void on_cancel(void *arg, msr_rpc_call_t *call)
{
    msr_relay_server_t *s = arg;
    node_call_t *nc = msr_rpc_call_get_data(call);
    if (nc == NULL)
        return;
    if (nc->merged) {
        msr_relay_merged_gave_up(s, nc);
        return;
    }
    nc->call = NULL;
    if (msr_relay_method_forwarded(nc->method)) {
        /* its upstream call ends too; forward_done frees it */
        msr_rpc_async_cancel(&((forward_t *)nc)->async);
        return;
    }
    /* the node, or the lower relay, is gone (or its link is): it no longer
     * counts, and counts again with its next call */
    if (nc->server != NULL)
        msr_relay_cover_drop_node(&s->cover, nc->key);
    else
        msr_relay_cover_drop_relay(&s->cover, ((child_batch_t *)nc)->relay_id);
}

msr_status_t msr_relay_server_create(msr_rpc_loop_t *loop, const char *address, const char *token,
                                     msr_rpc_channel_t *up, const char *relay_id, uint32_t subtree,
                                     int *port_p, msr_relay_server_t **server_p)
{
    return msr_relay_server_create_tls(loop, address, token, NULL, up, relay_id, subtree, port_p,
                                       server_p);
}

msr_status_t msr_relay_server_create_tls(msr_rpc_loop_t *loop, const char *address,
                                         const char *token, const msr_rpc_tls_t *tls,
                                         msr_rpc_channel_t *up, const char *relay_id,
                                         uint32_t subtree, int *port_p,
                                         msr_relay_server_t **server_p)
{
    msr_relay_server_t *s = msr_calloc(1, sizeof *s);
    if (s == NULL)
        return MSR_ERR_NO_MEMORY;
    s->loop = loop;
    s->up = up;
    msr_list_init(&s->forwards);
    msr_list_init(&s->merges);
    msr_list_init(&s->adds);
    msr_list_init(&s->publishes);
    msr_list_init(&s->withdraws);
    s->subtree = subtree;
    atomic_init(&s->forward_max, msr_relay_forward_max_default(subtree));
    atomic_init(&s->fetch_max, MSR_RELAY_FETCH_MAX_DEFAULT);
    snprintf(s->me, sizeof s->me, "relay %s", relay_id ? relay_id : "");
    msr_relay_cover_init(&s->cover);
    msr_status_t st = msr_relay_create(loop, up, relay_id, subtree, &s->relay);
    if (st != MSR_OK)
        goto err_free;
    msr_rpc_server_config_t cfg = {.address = address,
                                   .token = token,
                                   .handler = on_call,
                                   .cancel = on_cancel,
                                   .arg = s,
                                   .log_name = "relay",
                                   .tls = tls};
    if ((st = msr_rpc_server_create(loop, &cfg, port_p, &s->rpc)) != MSR_OK)
        goto err_relay;
    *server_p = s;
    return MSR_OK;
err_relay:
    msr_relay_destroy(s->relay);
err_free:
    msr_free(s);
    return st;
}

const msr_relay_t *msr_relay_server_relay(const msr_relay_server_t *s)
{
    return s->relay;
}

size_t msr_relay_server_forwarding(const msr_relay_server_t *s)
{
    return atomic_load(&s->nforwards);
}

uint64_t msr_relay_forward_max_default(uint32_t subtree)
{
    uint64_t n = MSR_HELD_CLIENT_CALLS_DEFAULT * (uint64_t)(subtree ? subtree : 1);
    return n < MSR_HELD_CALLS_DEFAULT ? n : MSR_HELD_CALLS_DEFAULT;
}

void msr_relay_server_limit(msr_relay_server_t *s, uint64_t forward_max)
{
    atomic_store(&s->forward_max,
                 forward_max ? forward_max : msr_relay_forward_max_default(s->subtree));
}

uint64_t msr_relay_server_forwarded(const msr_relay_server_t *s)
{
    return s->forwarded;
}

void msr_relay_server_flush(msr_relay_server_t *s)
{
    msr_relay_flush(s->relay);
    msr_relay_merges_flush(s);
}

void msr_relay_server_destroy(msr_relay_server_t *s)
{
    if (s == NULL)
        return;
    /* the relay first: its calls answered CANCELLED while the server's
     * calls can still be answered; then the server (it polls the loop,
     * which may still dispatch calls that arrived meanwhile: refused) */
    s->stopping = 1;
    msr_relay_cancel(s->relay);
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &s->forwards)
    {
        msr_rpc_async_cancel(&MSR_CONTAINER_OF(pos, forward_t, link)->async);
    }
    msr_relay_merges_stop(s);
    uint64_t limit = msr_deadline_in_ms(5000);
    while ((msr_relay_in_flight(s->relay) > 0 || !msr_list_empty(&s->forwards) ||
            !msr_list_empty(&s->merges) || !msr_list_empty(&s->adds) ||
            !msr_list_empty(&s->publishes) || !msr_list_empty(&s->withdraws)) &&
           !msr_deadline_passed(limit))
        msr_rpc_loop_poll(s->loop, msr_deadline_in_ms(50));
    msr_relay_destroy(s->relay);
    msr_rpc_server_destroy(s->rpc);
    msr_relay_cover_cleanup(&s->cover);
    msr_map_cleanup(&s->open, NULL);
    msr_map_cleanup(&s->open_adds, NULL);
    msr_map_cleanup(&s->open_publishes, NULL);
    msr_map_cleanup(&s->lower_use, msr_free);
    msr_relay_fetch_cleanup(s);
    msr_free(s);
}
