/* A relay's batch (RelayRequest): its subtree's membership calls answered
 * by the core's own handlers, one sub-call each, and the answers gathered
 * into one RelayResponse (docs/architecture.md, "Relays").
 *
 * A sub-call stands for a node's call inside the core: the core answers it
 * through the responder like any call, and may hold it (a long-polled
 * heartbeat, an answer waiting for a save). Sub-calls are told apart from
 * the binding's calls by their pointer's low bit (a sub_t is at least
 * 8-byte aligned; the binding's calls are pointers to structs too): every
 * answer the core gives goes through msr_coord_io_*() below, which route a
 * sub-call's answer into its batch and any other to the binding. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/list.h"
#include "base/log.h"
#include "base/map.h"
#include "base/util.h"
#include "cluster/coord_internal.h"
#include "rendezvous/relay.h"

typedef struct batch batch_t;

typedef struct sub {
    batch_t *batch;
    uint32_t index;
    int answered;
    int code;         /* msr_rpc_code_t */
    char *message;    /* when code != 0 */
    msr_blob_t *blob; /* the packed response when code == 0 */
    void *data;       /* the core's slot (held.h) */
    node_t *node;     /* a heartbeat's node: flushed when another entry is answered */
    char peer[96];    /* "relay:<relay id>/<index>": each entry is a client of its own
                       * for the bounds of held calls (a relay's nodes share its host) */
} sub_t;

struct batch {
    msr_list_t link; /* in c->relay_batches */
    msr_coord_t *coord;
    void *call; /* the binding's Relay call */
    char relay_id[MSR_RELAY_ID_MAX + 1];
    uint32_t n, pending;
    int flushing;  /* an entry was answered: held heartbeats are answered now */
    int cancelled; /* the Relay call ended: answers are dropped */
    int started;   /* every entry was handed to the core */
    int in_flush;  /* batch_flush runs: the last answer leaves finishing to it */
    int counted;   /* counted in its relay's batches in flight (relay_use) */
    sub_t subs[];
};

static int is_sub(const void *call)
{
    return ((uintptr_t)call & 1u) != 0;
}

static sub_t *sub_of(void *call)
{
    return (sub_t *)((uintptr_t)call & ~(uintptr_t)1u);
}

static void *tagged(sub_t *s)
{
    return (void *)((uintptr_t)s | 1u);
}

static void batch_free(batch_t *b)
{
    for (uint32_t i = 0; i < b->n; i++) {
        msr_free(b->subs[i].message);
        msr_blob_unref(b->subs[i].blob);
    }
    msr_list_remove(&b->link);
    msr_free(b);
}

static void batch_uncount(batch_t *b);

/* Every entry is answered: one RelayResponse for the relay. */
static void batch_finish(batch_t *b)
{
    msr_coord_t *c = b->coord;
    Msr__RelayAnswer *ans = msr_calloc(b->n, sizeof *ans);
    Msr__RelayAnswer **ansp = msr_calloc(b->n, sizeof *ansp);
    if (ans == NULL || ansp == NULL) {
        c->responder.fail(b->call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
    } else {
        for (uint32_t i = 0; i < b->n; i++) {
            const sub_t *s = &b->subs[i];
            msr__relay_answer__init(&ans[i]);
            ans[i].code = s->code;
            ans[i].message = s->message ? s->message : "";
            if (s->blob) {
                ans[i].response.data = s->blob->data;
                ans[i].response.len = s->blob->len;
            }
            ansp[i] = &ans[i];
        }
        Msr__RelayResponse r = MSR__RELAY_RESPONSE__INIT;
        r.n_answers = b->n;
        r.answers = ansp;
        c->responder.reply(b->call, &r.base);
    }
    msr_free(ans);
    msr_free(ansp);
    batch_uncount(b);
    batch_free(b);
}

/* The first answer of a batch: its heartbeats still held are answered now
 * (with the job as it stands), so no node waits on another's long poll. */
static void batch_flush(batch_t *b)
{
    b->flushing = 1;
    b->in_flush = 1; /* the answers below must not free b under the loop */
    for (uint32_t i = 0; i < b->n; i++) {
        sub_t *s = &b->subs[i];
        if (!s->answered && s->node && s->node->hb && s->node->hb->call == tagged(s))
            msr_coord_wake_node(b->coord, s->node);
    }
    b->in_flush = 0;
    if (b->pending == 0)
        batch_finish(b);
}

static void sub_answered(sub_t *s)
{
    batch_t *b = s->batch;
    s->answered = 1;
    b->pending--;
    if (b->cancelled) {
        if (b->pending == 0)
            batch_free(b);
        return;
    }
    if (!b->started || b->in_flush)
        return; /* msr_coord_relay or batch_flush finishes it */
    if (b->pending == 0)
        batch_finish(b);
    else if (!b->flushing)
        batch_flush(b);
}

static void sub_fail(sub_t *s, int code, const char *message)
{
    if (s->answered)
        return;
    s->code = code;
    s->message = msr_strdup(message ? message : "");
    sub_answered(s);
}

/* ---- the core's answers, routed ---- */

void msr_coord_io_reply(msr_coord_t *c, void *call, const ProtobufCMessage *resp)
{
    if (!is_sub(call)) {
        c->responder.reply(call, resp);
        return;
    }
    sub_t *s = sub_of(call);
    if (s->answered)
        return;
    if ((s->blob = msr_blob_pack(resp)) == NULL) {
        sub_fail(s, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return;
    }
    sub_answered(s);
}

void msr_coord_io_reply_blob(msr_coord_t *c, void *call, msr_blob_t *blob)
{
    if (!is_sub(call)) {
        c->responder.reply_blob(call, blob);
        return;
    }
    sub_t *s = sub_of(call);
    if (s->answered)
        return;
    atomic_fetch_add(&blob->refs, 1);
    s->blob = blob;
    sub_answered(s);
}

void msr_coord_io_fail(msr_coord_t *c, void *call, int code, const char *message)
{
    if (!is_sub(call))
        c->responder.fail(call, code, message);
    else
        sub_fail(sub_of(call), code, message);
}

uint64_t msr_coord_io_deadline(const msr_coord_t *c, void *call)
{
    if (is_sub(call))
        call = sub_of(call)->batch->call;
    return c->responder.deadline(call);
}

const char *msr_coord_io_peer(const msr_coord_t *c, void *call)
{
    if (is_sub(call))
        return sub_of(call)->peer;
    return c->responder.peer ? c->responder.peer(call) : NULL;
}

void msr_coord_io_set_data(msr_coord_t *c, void *call, void *data)
{
    if (is_sub(call))
        sub_of(call)->data = data;
    else
        c->responder.set_data(call, data);
}

void *msr_coord_io_get_data(const msr_coord_t *c, void *call)
{
    return is_sub(call) ? sub_of(call)->data : c->responder.get_data(call);
}

/* ---- the hosts of relays: the bounds of held calls ---- */

/* A relay counted in the coordinator's cover: the host its batches came
 * from (the client its forwarded store calls are charged to) and its
 * subtree. */
typedef struct relay_host {
    uint32_t subtree;
    char host[128];
} relay_host_t;

static void host_add(msr_coord_t *c, const char *host, int64_t delta)
{
    char key[160];
    snprintf(key, sizeof key, "h:%s", host);
    int64_t now = (int64_t)(uintptr_t)msr_map_get(&c->relay_hosts, key) + delta;
    if (now <= 0)
        msr_map_remove(&c->relay_hosts, key);
    else if (msr_map_put(&c->relay_hosts, key, (void *)(uintptr_t)now, NULL) != MSR_OK)
        MSR_WARN("job %s: out of memory recording relay host %s", c->job_id, host);
}

/* Relay id no longer counts: its host's share falls by its subtree. */
static void relay_host_drop(msr_coord_t *c, const char *relay_id)
{
    char key[MSR_RELAY_ID_MAX + 8];
    snprintf(key, sizeof key, "r:%s", relay_id);
    relay_host_t *r = msr_map_remove(&c->relay_hosts, key);
    if (r == NULL)
        return;
    host_add(c, r->host, -(int64_t)r->subtree);
    msr_free(r);
}

/* How many clients' bounds of held calls host has: one, plus one per node
 * of the relays whose batches come from it (their nodes' store calls come
 * to the coordinator from that host, forwarded). */
static uint64_t relay_shares(void *ctx, const char *host)
{
    msr_coord_t *c = ctx;
    char key[160];
    snprintf(key, sizeof key, "h:%s", host);
    return 1 + (uint64_t)(uintptr_t)msr_map_get(&c->relay_hosts, key);
}

/* The relay of req, accepted, counts from the host call came from, with
 * its subtree now. */
static void relay_host_record(msr_coord_t *c, void *call, const Msr__RelayRequest *req)
{
    const char *peer = c->responder.peer ? c->responder.peer(call) : NULL;
    char key[MSR_RELAY_ID_MAX + 8], host[128];
    if (peer == NULL || peer[0] == '\0')
        snprintf(host, sizeof host, "local");
    else
        msr_rpc_peer_host(peer, host, sizeof host);
    snprintf(key, sizeof key, "r:%s", req->relay_id);
    const relay_host_t *was = msr_map_get(&c->relay_hosts, key);
    if (was != NULL && was->subtree == req->subtree && strcmp(was->host, host) == 0)
        return; /* its every batch: nothing changed */
    relay_host_t *r = msr_calloc(1, sizeof *r);
    if (r == NULL) {
        MSR_WARN("job %s: out of memory recording relay %s", c->job_id, req->relay_id);
        return;
    }
    snprintf(r->host, sizeof r->host, "%s", host);
    r->subtree = req->subtree;
    relay_host_drop(c, req->relay_id);
    if (msr_map_put(&c->relay_hosts, key, r, NULL) != MSR_OK) {
        MSR_WARN("job %s: out of memory recording relay %s", c->job_id, req->relay_id);
        msr_free(r);
        return;
    }
    host_add(c, r->host, r->subtree);
    msr_held_calls_shares(&c->held, relay_shares, c);
}

/* ---- how long a relay counts ---- */

/* A relay counts against the coordinator's cover and its host's share of
 * the bounds of held calls while it has a batch in flight or an alive node
 * recorded as joined through it. A relay killed between two batches ends no
 * call: it stops counting once its nodes fall back (they join or heartbeat
 * directly, or through another relay) or are lost, so that as many nodes can
 * come back through a replacement. */
typedef struct relay_use {
    uint32_t batches, nodes;
} relay_use_t;

static void relay_use_add(msr_coord_t *c, const char *relay_id, int batches, int nodes)
{
    char key[MSR_RELAY_ID_MAX + 8];
    snprintf(key, sizeof key, "u:%s", relay_id);
    relay_use_t *u = msr_map_get(&c->relay_hosts, key);
    if (u == NULL && (batches < 0 || nodes < 0))
        return; /* counted before its record could be made */
    if (u == NULL) {
        if ((u = msr_calloc(1, sizeof *u)) == NULL ||
            msr_map_put(&c->relay_hosts, key, u, NULL) != MSR_OK) {
            MSR_WARN("job %s: out of memory counting relay %s", c->job_id, relay_id);
            msr_free(u);
            return;
        }
    }
    u->batches += (uint32_t)batches;
    u->nodes += (uint32_t)nodes;
    if (u->batches > 0 || u->nodes > 0)
        return;
    msr_free(msr_map_remove(&c->relay_hosts, key));
    msr_relay_cover_drop_relay(&c->relay_cover, relay_id);
    relay_host_drop(c, relay_id);
}

void msr_coord_relay_nodes(msr_coord_t *c, const char *relay_id, int delta)
{
    relay_use_add(c, relay_id, 0, delta);
}

void msr_coord_node_set_relay(msr_coord_t *c, node_t *n, const char *relay_id)
{
    if (strcmp(n->relay, relay_id) == 0)
        return;
    char old[sizeof n->relay];
    snprintf(old, sizeof old, "%s", n->relay);
    snprintf(n->relay, sizeof n->relay, "%s", relay_id);
    if (!n->alive)
        return;
    if (*relay_id)
        relay_use_add(c, relay_id, 0, 1);
    if (*old) /* after: the old relay may stop counting now */
        relay_use_add(c, old, 0, -1);
}

static void batch_uncount(batch_t *b)
{
    if (b->counted) {
        b->counted = 0;
        relay_use_add(b->coord, b->relay_id, -1, 0);
    }
}

/* ---- the batch ---- */

static const char *relay_peer(const msr_coord_t *c, void *call)
{
    const char *p = msr_coord_io_peer(c, call);
    return p ? p : "a relay";
}

static const char *node_id_of(msr_rpc_method_t m, const ProtobufCMessage *req)
{
    switch (m) {
    case MSR_RPC_HEARTBEAT:
        return ((const Msr__HeartbeatRequest *)req)->node_id;
    case MSR_RPC_REPORT:
        return ((const Msr__ReportRequest *)req)->node_id;
    case MSR_RPC_LEAVE:
        return ((const Msr__LeaveRequest *)req)->node_id;
    case MSR_RPC_PROGRESS:
        return ((const Msr__ProgressRequest *)req)->node_id;
    default:
        return NULL;
    }
}

/* Hands entry k of batch b to the core (or refuses it alone: a node the
 * relay does not serve). */
static void batch_start_one(msr_coord_t *c, batch_t *b, msr_rpc_method_t m,
                            const ProtobufCMessage *req)
{
    sub_t *s = &b->subs[b->n];
    s->batch = b;
    s->index = b->n++;
    b->pending++;
    snprintf(s->peer, sizeof s->peer, "relay:%s/%u", b->relay_id, s->index);
    const char *id = node_id_of(m, req);
    node_t *n = id ? msr_coord_node_find(c, id) : NULL;
    if (n != NULL && strcmp(n->relay, b->relay_id) != 0) {
        char why[300];
        snprintf(why, sizeof why,
                 "relay %s does not serve node %s: it joined %s%s; join again through this relay",
                 b->relay_id, id, n->relay[0] ? "through relay " : "directly", n->relay);
        sub_fail(s, MSR_RPC_FAILED_PRECONDITION, why);
        return;
    }
    if (m == MSR_RPC_HEARTBEAT)
        s->node = n;
    c->relaying = b->relay_id;
    msr_coord_call(c, tagged(s), m, req);
    c->relaying = "";
}

void msr_coord_relay(msr_coord_t *c, void *call, const Msr__RelayRequest *req)
{
    char why[400];
    ProtobufCMessage **reqs = msr_calloc(req->n_calls ? req->n_calls : 1, sizeof *reqs);
    batch_t *b = NULL;
    if (reqs == NULL) {
        c->responder.fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return;
    }
    if (msr_relay_batch_check(req, MSR_RELAY_SUBTREE_MAX, 0, reqs, why, sizeof why) != 0 ||
        msr_relay_cover_check(&c->relay_cover, "the coordinator", MSR_RELAY_SUBTREE_MAX, req, why,
                              sizeof why) != 0) {
        int no_mem = strcmp(why, MSR_RELAY_NO_MEMORY) == 0;
        if (!no_mem)
            MSR_WARN("job %s: refused a relay's batch from %s: %s", c->job_id, relay_peer(c, call),
                     why);
        c->responder.fail(call, no_mem ? MSR_RPC_RESOURCE_EXHAUSTED : MSR_RPC_INVALID_ARGUMENT,
                          no_mem ? "coordinator out of memory" : why);
        goto out;
    }
    if ((b = msr_calloc(1, sizeof *b + req->n_calls * sizeof(sub_t))) == NULL) {
        c->responder.fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        goto out;
    }
    relay_host_record(c, call, req);
    b->coord = c;
    b->call = call;
    snprintf(b->relay_id, sizeof b->relay_id, "%s", req->relay_id);
    b->counted = 1;
    relay_use_add(c, b->relay_id, 1, 0);
    msr_list_push_back(&c->relay_batches, &b->link);
    for (size_t k = 0; k < req->n_calls; k++)
        batch_start_one(c, b, (msr_rpc_method_t)req->calls[k]->method, reqs[k]);
    b->started = 1;
    if (b->pending == 0)
        batch_finish(b);
    else if (b->pending < b->n)
        batch_flush(b); /* finishes it when that answers the rest */
out:
    for (size_t k = 0; k < req->n_calls; k++)
        msr_rpc_message_free(reqs[k]);
    msr_free(reqs);
}

int msr_coord_relay_cancel(msr_coord_t *c, void *call)
{
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &c->relay_batches)
    {
        batch_t *b = MSR_CONTAINER_OF(pos, batch_t, link);
        if (b->call != call)
            continue;
        b->cancelled = 1;
        /* the relay died (or its link up did): a replacement, under any
         * id, may take its place; alive, it counts again with its next
         * batch */
        msr_relay_cover_drop_relay(&c->relay_cover, b->relay_id);
        relay_host_drop(c, b->relay_id);
        batch_uncount(b);
        /* the entries still held (a long-polled heartbeat: its node is
         * suspect, as when its own connection breaks; an answer waiting
         * for a save: the change stays) end with the call */
        for (uint32_t i = 0; i < b->n; i++) {
            sub_t *s = &b->subs[i];
            if (!s->answered && msr_held_cancel(&c->held, tagged(s))) {
                s->answered = 1;
                b->pending--;
            }
        }
        if (b->pending == 0)
            batch_free(b);
        return 1;
    }
    return 0;
}

static void free_relay_host(const char *key, void *value, void *arg)
{
    (void)arg;
    if (key[0] == 'r' || key[0] == 'u')
        msr_free(value);
}

void msr_coord_relays_cleanup(msr_coord_t *c)
{
    msr_relay_cover_cleanup(&c->relay_cover);
    msr_map_foreach(&c->relay_hosts, free_relay_host, NULL);
    msr_map_cleanup(&c->relay_hosts, NULL);
    while (!msr_list_empty(&c->relay_batches)) {
        batch_t *b = MSR_CONTAINER_OF(c->relay_batches.next, batch_t, link);
        batch_free(b);
    }
}
