/* A relay's side of a Relay call: queued node calls, sent as batches, the
 * answers handed back one by one (relay.h). */
#include "rendezvous/relay.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/map.h"
#include "base/time.h"

/* A node's call, queued or in a batch. */
typedef struct entry {
    msr_rpc_method_t method;
    uint32_t levels; /* relays below this one that the call came through */
    uint8_t *req;    /* packed */
    size_t len;
    char *key; /* its node (msr_relay_call_key): one call a node per batch */
    msr_relay_done_t done;
    void *arg;
} entry_t;

/* One Relay call in flight. */
typedef struct batch {
    msr_rpc_async_t a;
    msr_relay_t *relay;
    struct batch *next;
    size_t n;
    entry_t e[];
} batch_t;

struct msr_relay {
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *up;
    char id[MSR_RELAY_ID_MAX + 1];
    uint32_t subtree;
    entry_t *queue;
    size_t nqueue, capq;
    batch_t *flying; /* in flight */
    size_t nflying;
    int destroying;
    uint64_t calls, batches;                  /* sent */
    uint64_t by_method[MSR_RPC_METHOD_COUNT]; /* calls sent, by method */
};

msr_status_t msr_relay_create(msr_rpc_loop_t *loop, msr_rpc_channel_t *up, const char *relay_id,
                              uint32_t subtree, msr_relay_t **relay_p)
{
    if (relay_id == NULL || *relay_id == '\0' || strlen(relay_id) > MSR_RELAY_ID_MAX ||
        subtree == 0 || subtree > MSR_RELAY_SUBTREE_MAX)
        return MSR_ERR_INVALID_ARG;
    msr_relay_t *r = msr_calloc(1, sizeof *r);
    if (r == NULL)
        return MSR_ERR_NO_MEMORY;
    r->loop = loop;
    r->up = up;
    snprintf(r->id, sizeof r->id, "%s", relay_id);
    r->subtree = subtree;
    *relay_p = r;
    return MSR_OK;
}

static void entry_free(entry_t *e)
{
    msr_free(e->req);
    msr_free(e->key);
}

msr_status_t msr_relay_submit(msr_relay_t *r, msr_rpc_method_t m, const ProtobufCMessage *req,
                              msr_relay_done_t done, void *arg)
{
    return msr_relay_submit_from(r, m, req, 0, done, arg);
}

msr_status_t msr_relay_submit_from(msr_relay_t *r, msr_rpc_method_t m, const ProtobufCMessage *req,
                                   uint32_t levels, msr_relay_done_t done, void *arg)
{
    if (!msr_relay_method_relayed(m) || levels >= MSR_RELAY_LEVELS_MAX)
        return MSR_ERR_INVALID_ARG;
    if (r->nqueue == r->capq) {
        size_t cap = r->capq ? r->capq * 2 : 64;
        entry_t *q = msr_realloc_array(r->queue, cap, sizeof *q);
        if (q == NULL)
            return MSR_ERR_NO_MEMORY;
        r->queue = q;
        r->capq = cap;
    }
    entry_t *e = &r->queue[r->nqueue];
    char key[256];
    msr_relay_call_key(m, req, key, sizeof key);
    e->len = protobuf_c_message_get_packed_size(req);
    e->req = msr_malloc(e->len ? e->len : 1);
    e->key = msr_strdup(key);
    if (e->req == NULL || e->key == NULL) {
        entry_free(e);
        return MSR_ERR_NO_MEMORY;
    }
    protobuf_c_message_pack(req, e->req);
    e->method = m;
    e->levels = levels;
    e->done = done;
    e->arg = arg;
    r->nqueue++;
    return MSR_OK;
}

static void unlink_batch(msr_relay_t *r, batch_t *b)
{
    for (batch_t **pp = &r->flying; *pp; pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            r->nflying--;
            return;
        }
}

/* The batch's answer handed to each of its calls: the entry's own, or
 * the batch's failure (every entry answered with it). */
static void batch_done(msr_rpc_async_t *a)
{
    batch_t *b = (batch_t *)a;
    msr_relay_t *r = b->relay;
    const Msr__RelayResponse *resp = (const Msr__RelayResponse *)a->resp;
    int whole = a->status != MSR_OK || resp == NULL || resp->n_answers != b->n;
    for (size_t k = 0; k < b->n; k++) {
        entry_t *e = &b->e[k];
        if (whole) {
            int code = a->status == MSR_OK ? MSR_RPC_INTERNAL
                       : a->grpc_code      ? a->grpc_code
                                           : MSR_RPC_UNAVAILABLE;
            char why[400];
            snprintf(why, sizeof why, "relay %s: %s", r->id,
                     a->status == MSR_OK ? "the coordinator's answer does not match the batch"
                                         : a->err);
            e->done(e->arg, code, why, NULL, 0);
        } else {
            const Msr__RelayAnswer *an = resp->answers[k];
            e->done(e->arg, an->code, an->message, an->response.data, an->response.len);
        }
        entry_free(e);
    }
    unlink_batch(r, b);
    msr_rpc_async_cleanup(a);
    msr_free(b);
    if (r->destroying && r->nflying == 0) {
        msr_free(r->queue);
        msr_free(r);
    }
}

/* Sends queue[first, first + n) as one batch; answers them UNAVAILABLE
 * when it cannot start. */
static void send_batch(msr_relay_t *r, size_t first, size_t n)
{
    uint32_t depth = 0;
    for (size_t k = 0; k < n; k++)
        if (r->queue[first + k].levels > depth)
            depth = r->queue[first + k].levels;
    batch_t *b = msr_calloc(1, sizeof *b + n * sizeof(entry_t));
    Msr__RelayCall *calls = msr_calloc(n, sizeof *calls);
    Msr__RelayCall **callp = msr_calloc(n, sizeof *callp);
    msr_status_t st = b && calls && callp ? MSR_OK : MSR_ERR_NO_MEMORY;
    if (st == MSR_OK) {
        memcpy(b->e, &r->queue[first], n * sizeof(entry_t));
        b->n = n;
        b->relay = r;
        for (size_t k = 0; k < n; k++) {
            msr__relay_call__init(&calls[k]);
            calls[k].method = (uint32_t)b->e[k].method;
            calls[k].request.data = b->e[k].req;
            calls[k].request.len = b->e[k].len;
            callp[k] = &calls[k];
        }
        Msr__RelayRequest req = MSR__RELAY_REQUEST__INIT;
        req.relay_id = r->id;
        req.subtree = r->subtree;
        req.n_calls = n;
        req.calls = callp;
        req.depth = depth;
        b->a.method = MSR_RPC_RELAY;
        b->a.deadline = MSR_DEADLINE_NEVER; /* held heartbeats bound it */
        b->a.wait_for_ready = 1;
        b->a.done = batch_done;
        st = msr_rpc_call_start(r->up, r->loop, &b->a, &req.base); /* packs req now */
    }
    msr_free(calls);
    msr_free(callp);
    if (st == MSR_OK) {
        r->calls += n;
        r->batches++;
        for (size_t k = 0; k < n; k++)
            r->by_method[b->e[k].method]++;
        b->next = r->flying;
        r->flying = b;
        r->nflying++;
        return;
    }
    MSR_WARN("relay %s: cannot send a batch of %zu calls: %s", r->id, n, msr_status_str(st));
    for (size_t k = 0; k < n; k++) {
        entry_t *e = &r->queue[first + k];
        e->done(e->arg, MSR_RPC_UNAVAILABLE, "the relay cannot reach the coordinator", NULL, 0);
        entry_free(e);
    }
    msr_free(b);
}

/* Moves to the front of queue[from, nqueue) at most MSR_RELAY_BATCH_MAX
 * calls of distinct nodes (the rest keep their order behind them): a batch
 * holds one call a node, and a node may have two calls queued (it gave up
 * on one through a relay below, now dead, and called again). Progress
 * calls go in batches of their own: answered at once, they would end the
 * long polls of the heartbeats beside them. Returns how many; 0 only when
 * memory ran out. */
static size_t pick_batch(msr_relay_t *r, size_t from)
{
    msr_map_t seen;
    memset(&seen, 0, sizeof seen);
    size_t n = 0;
    int progress = r->queue[from].method == MSR_RPC_PROGRESS;
    for (size_t k = from; k < r->nqueue && n < MSR_RELAY_BATCH_MAX; k++) {
        entry_t *e = &r->queue[k];
        if ((e->method == MSR_RPC_PROGRESS) != progress || msr_map_get(&seen, e->key) != NULL)
            continue; /* the next batch takes it */
        if (msr_map_put(&seen, e->key, e, NULL) != MSR_OK)
            break;
        if (k != from + n) {
            entry_t t = *e;
            memmove(&r->queue[from + n + 1], &r->queue[from + n], (k - from - n) * sizeof(entry_t));
            r->queue[from + n] = t;
        }
        n++;
    }
    msr_map_cleanup(&seen, NULL);
    return n;
}

void msr_relay_flush(msr_relay_t *r)
{
    size_t first = 0;
    while (first < r->nqueue) {
        size_t n = pick_batch(r, first);
        if (n == 0) { /* out of memory: what is left cannot be batched */
            for (size_t k = first; k < r->nqueue; k++) {
                r->queue[k].done(r->queue[k].arg, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory",
                                 NULL, 0);
                entry_free(&r->queue[k]);
            }
            break;
        }
        send_batch(r, first, n);
        first += n;
    }
    r->nqueue = 0;
}

const char *msr_relay_id(const msr_relay_t *r)
{
    return r->id;
}

void msr_relay_counts(const msr_relay_t *r, uint64_t *calls_p, uint64_t *batches_p)
{
    *calls_p = r->calls;
    *batches_p = r->batches;
}

void msr_relay_describe(const msr_relay_t *r, char *out, size_t len)
{
    snprintf(out, len,
             "%llu calls in %llu batches (Join %llu, Heartbeat %llu, Report %llu, Leave %llu, "
             "Progress %llu)",
             (unsigned long long)r->calls, (unsigned long long)r->batches,
             (unsigned long long)r->by_method[MSR_RPC_JOIN],
             (unsigned long long)r->by_method[MSR_RPC_HEARTBEAT],
             (unsigned long long)r->by_method[MSR_RPC_REPORT],
             (unsigned long long)r->by_method[MSR_RPC_LEAVE],
             (unsigned long long)r->by_method[MSR_RPC_PROGRESS]);
}

size_t msr_relay_in_flight(const msr_relay_t *r)
{
    return r->nflying;
}

void msr_relay_cancel(msr_relay_t *r)
{
    for (size_t k = 0; k < r->nqueue; k++) {
        r->queue[k].done(r->queue[k].arg, MSR_RPC_CANCELLED, "the relay is shutting down", NULL, 0);
        entry_free(&r->queue[k]);
    }
    r->nqueue = 0;
    for (batch_t *b = r->flying; b; b = b->next)
        msr_rpc_async_cancel(&b->a);
}

void msr_relay_destroy(msr_relay_t *r)
{
    if (r == NULL)
        return;
    msr_relay_cancel(r);
    if (r->nflying == 0) {
        msr_free(r->queue);
        msr_free(r);
        return;
    }
    r->destroying = 1; /* freed by the last batch_done */
}
