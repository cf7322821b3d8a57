/* The store's semantics (store_core.h): keys, get-waits, barriers and
 * allgathers, with the limits of store_limits.h; answers go through the
 * user's ops. */
#include "rendezvous/store_core.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/heap.h"
#include "base/list.h"
#include "base/map.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "rendezvous/held.h"

/* A held Fetch: what it asked for. It waits on the get-wait of one missing
 * key at a time. */
typedef struct fetch {
    uint32_t n, next; /* indices; indices before next are known present */
    uint32_t *indices;
    char name[];
} fetch_t;

/* A store call the core holds until something happens or its deadline
 * passes: a held call (held.h) whose owner is the getwait_t, barrier_t or
 * gather_t it waits on, in that record's list of waiters. */
typedef struct waiter {
    msr_held_t held;
    uint32_t weight; /* MSR_HELD_BARRIER: the participants this call stands for */
    fetch_t *fetch;  /* MSR_HELD_FETCH: its request */
} waiter_t;

/* The waiter at a link of a record's list of waiters. */
#define WAITER_AT(pos) MSR_CONTAINER_OF(pos, waiter_t, held.link)

typedef msr_store_value_t kv_t;

/* Get-waits, barriers and allgathers live while a call waits on them: the
 * last waiter to leave (answered, expired or cancelled) takes the record
 * and what it contributed with it. Each is counted in the store's usage
 * under its name. */
typedef struct getwait {
    msr_list_t waiters;
    char key[]; /* as in the getwait map */
} getwait_t;

typedef struct barrier {
    uint32_t count, arrived;
    msr_list_t waiters;
    char name[];
} barrier_t;

typedef struct gather_entry {
    uint8_t *data;
    size_t len;
    int present;
    void *call; /* the call that gave it, to withdraw it when that call gives up */
} gather_entry_t;

typedef struct gather {
    uint32_t count, received;
    size_t bytes;
    gather_entry_t *entries;
    msr_list_t waiters;
    char name[];
} gather_t;

struct msr_store_core {
    msr_store_ops_t ops;
    msr_map_t store, getwait, barriers, gathers;
    msr_store_limits_t limits;
    msr_store_usage_t usage; /* store, waited-on names and allgather contributions */
    msr_held_calls_t *held;  /* where its calls are held: own, or its user's (ops.held) */
    msr_held_calls_t own;
};

/* ---- blobs ---- */

void msr_blob_unref(msr_blob_t *blob)
{
    if (blob && atomic_fetch_sub(&blob->refs, 1) == 1)
        msr_free(blob);
}

msr_blob_t *msr_blob_pack(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    msr_blob_t *b = msr_malloc(sizeof *b + len);
    if (b == NULL)
        return NULL;
    atomic_init(&b->refs, 1);
    b->len = protobuf_c_message_pack(msg, b->data);
    return b;
}

/* ---- answers ---- */

static void reply(msr_store_core_t *c, void *call, const ProtobufCMessage *resp)
{
    c->ops.reply(c->ops.ctx, call, resp);
}

static void answer_blob(msr_store_core_t *c, void *call, msr_blob_t *blob)
{
    c->ops.reply_blob(c->ops.ctx, call, blob);
}

static void reply_write(msr_store_core_t *c, void *call, msr_rpc_method_t method,
                        uint64_t client_id, uint64_t request_id, const ProtobufCMessage *resp)
{
    if (c->ops.reply_write)
        c->ops.reply_write(c->ops.ctx, call, method, client_id, request_id, resp);
    else
        c->ops.reply(c->ops.ctx, call, resp);
}

static int request_seen(msr_store_core_t *c, void *call, msr_rpc_method_t method,
                        uint64_t client_id, uint64_t request_id)
{
    return c->ops.request_seen &&
           c->ops.request_seen(c->ops.ctx, call, method, client_id, request_id);
}

/* Notes a key as set or deleted. */
static void mark_key(msr_store_core_t *c, const char *key)
{
    if (c->ops.key_changed)
        c->ops.key_changed(c->ops.ctx, key);
}

/* ---- waiters ---- */

/* A held store call, charged to its client's budget of held calls
 * (held.h) with kept, the bytes it keeps beyond its record: what it copied
 * and the request its caller keeps until it is answered. NULL when refused
 * or out of memory, with the error text (base/err.h) saying which. */
static waiter_t *waiter_new(msr_store_core_t *c, void *call, msr_held_kind_t kind, void *owner,
                            msr_list_t *list, int64_t wait_ms, uint64_t kept)
{
    msr_held_t *h =
        msr_held_wait(c->held, sizeof(waiter_t), kept, kind, call, owner, list, wait_ms);
    return h ? MSR_CONTAINER_OF(h, waiter_t, held) : NULL;
}

/* Fails a call that could not be held, with waiter_new's reason. */
static void waiter_refused(msr_store_core_t *c, void *call)
{
    msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "%s", msr_err_msg());
}

static void waiter_free(msr_store_core_t *c, waiter_t *w)
{
    if (w->fetch)
        msr_free(w->fetch->indices);
    msr_free(w->fetch);
    msr_held_free(c->held, &w->held);
}

/* ---- the store ---- */

static void kv_free(void *v)
{
    msr_free(v);
}

static void getwait_free(void *v)
{
    msr_free(v);
}

static void barrier_free(void *v)
{
    barrier_t *b = v;
    if (b)
        msr_free(b);
}

static void gather_free(void *v)
{
    gather_t *g = v;
    if (g == NULL)
        return;
    for (uint32_t i = 0; i < g->count; i++)
        msr_free(g->entries[i].data);
    msr_free(g->entries);
    msr_free(g);
}

/* Empties the store and frees the records of waits (their waiters gone). */
static void records_free(msr_store_core_t *c)
{
    msr_map_cleanup(&c->store, kv_free);
    msr_map_cleanup(&c->getwait, getwait_free);
    msr_map_cleanup(&c->barriers, barrier_free);
    msr_map_cleanup(&c->gathers, gather_free);
    memset(&c->usage, 0, sizeof c->usage);
}

/* Every waiter of a record in maps, freed and (why not NULL) failed with
 * ABORTED: a store call is always in its record's list while held. */
static void waiters_end(msr_store_core_t *c, const char *why)
{
    msr_map_t *maps[] = {&c->getwait, &c->barriers, &c->gathers};
    for (size_t m = 0; m < MSR_ARRAY_SIZE(maps); m++) {
        for (size_t i = 0; i < maps[m]->nbuckets; i++) {
            for (msr_map_entry_t *e = maps[m]->buckets[i]; e; e = e->next) {
                msr_list_t *list = m == 0   ? &((getwait_t *)e->value)->waiters
                                   : m == 1 ? &((barrier_t *)e->value)->waiters
                                            : &((gather_t *)e->value)->waiters;
                msr_list_t *pos, *tmp;
                msr_list_for_each_safe(pos, tmp, list)
                {
                    waiter_t *w = WAITER_AT(pos);
                    void *call = w->held.call;
                    waiter_free(c, w);
                    if (why)
                        msr_held_fail(c->held, call, MSR_RPC_ABORTED, "%s", why);
                }
            }
        }
    }
}

void msr_store_core_reset(msr_store_core_t *c, const char *why)
{
    waiters_end(c, why);
    records_free(c);
}

/* The most participants a barrier or allgather may have, as the user says;
 * without a bound only the store's byte limit bounds an allgather, through
 * its entry table (gather_table). */
static uint32_t participants_max(const msr_store_core_t *c)
{
    return c->ops.participants_max ? c->ops.participants_max(c->ops.ctx) : UINT32_MAX;
}

/* The bytes an allgather of count entries takes before any contribution. */
static uint64_t gather_table(uint32_t count)
{
    return (uint64_t)count * sizeof(gather_entry_t);
}

/* Admits a new waited-on name into the store's usage, or refuses the call
 * with the limit it would pass. */
static int name_admit(msr_store_core_t *c, void *call, const char *what, const char *name,
                      uint64_t more_bytes)
{
    if (msr_store_limits_check_add(&c->limits, &c->usage, what, name, 1,
                                   msr_store_entry_bytes(strlen(name), 0) + more_bytes) == MSR_OK)
        return 1;
    msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "%s", msr_err_msg());
    return 0;
}

/* Records leave their map and the store's usage. */
static void msr_store_getwait_drop(msr_store_core_t *c, getwait_t *gw)
{
    msr_map_remove(&c->getwait, gw->key);
    msr_store_usage_remove(&c->usage, gw->key, 0);
    getwait_free(gw);
}

static void msr_store_barrier_unlist(msr_store_core_t *c, barrier_t *b)
{
    msr_map_remove(&c->barriers, b->name);
    msr_store_usage_remove(&c->usage, b->name, 0);
}

static void msr_store_gather_unlist(msr_store_core_t *c, gather_t *g)
{
    msr_map_remove(&c->gathers, g->name);
    msr_store_usage_remove(&c->usage, g->name, 0);
    uint64_t held = g->bytes + gather_table(g->count);
    c->usage.bytes = c->usage.bytes >= held ? c->usage.bytes - held : 0;
}

/* Takes back the contributions call gave to g. */
static void msr_store_gather_withdraw(msr_store_core_t *c, gather_t *g, void *call)
{
    for (uint32_t i = 0; i < g->count && g->received > 0; i++) {
        gather_entry_t *ge = &g->entries[i];
        if (!ge->present || ge->call != call)
            continue;
        g->bytes -= ge->len;
        c->usage.bytes = c->usage.bytes >= ge->len ? c->usage.bytes - ge->len : 0;
        msr_free(ge->data);
        memset(ge, 0, sizeof *ge);
        g->received--;
    }
}

/* A waiting store call gives up (its deadline passed, or it was
 * cancelled): what it brought is withdrawn (a barrier arrival, allgather
 * contributions), and the record goes once nobody waits on it, so a call
 * that gives up leaves nothing behind and may be made again. */
static void waiter_withdraw(msr_store_core_t *c, waiter_t *w)
{
    void *call = w->held.call;
    msr_held_kind_t kind = w->held.kind;
    void *owner = w->held.owner;
    uint32_t weight = w->weight;
    waiter_free(c, w);
    if (kind == MSR_HELD_GET || kind == MSR_HELD_FETCH) {
        getwait_t *gw = owner;
        if (msr_list_empty(&gw->waiters))
            msr_store_getwait_drop(c, gw);
    } else if (kind == MSR_HELD_BARRIER) {
        barrier_t *b = owner;
        b->arrived = b->arrived >= weight ? b->arrived - weight : 0;
        if (msr_list_empty(&b->waiters)) {
            msr_store_barrier_unlist(c, b);
            barrier_free(b);
        }
    } else if (kind == MSR_HELD_ALLGATHER) {
        gather_t *g = owner;
        msr_store_gather_withdraw(c, g, call);
        if (msr_list_empty(&g->waiters)) {
            msr_store_gather_unlist(c, g);
            gather_free(g);
        }
    }
}

static int check_generation(msr_store_core_t *c, void *call, int generation)
{
    int current = c->ops.generation ? c->ops.generation(c->ops.ctx) : generation;
    if (generation == current)
        return 1;
    msr_held_fail(
        c->held, call, MSR_RPC_ABORTED,
        "stale generation %d: the job is at generation %d (this process belongs to a round "
        "that has ended)",
        generation, current);
    return 0;
}

static int check_key(msr_store_core_t *c, void *call, const char *what, const char *key)
{
    if (msr_rpc_key_valid(key))
        return 1;
    msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT, "%s: bad key (1 to %d printable bytes)",
                  what, MSR_KEY_MAX);
    return 0;
}

static kv_t *msr_store_kv_new(const void *data, size_t len)
{
    kv_t *v = msr_malloc(sizeof *v + len);
    if (v == NULL)
        return NULL;
    v->len = len;
    if (len)
        memcpy(v->data, data, len);
    return v;
}

static void reply_value(msr_store_core_t *c, void *call, const kv_t *v)
{
    Msr__GetResponse r = MSR__GET_RESPONSE__INIT;
    r.value.data = (uint8_t *)v->data;
    r.value.len = v->len;
    reply(c, call, &r.base);
}

static void fetch_advance(msr_store_core_t *c, waiter_t *w);

/* Answers everyone waiting for key now that it has a value; a fetch goes
 * on to the next key it misses. */
static void wake_getters(msr_store_core_t *c, const char *key, const kv_t *v)
{
    getwait_t *gw = msr_map_get(&c->getwait, key);
    if (gw == NULL)
        return;
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &gw->waiters)
    {
        waiter_t *w = WAITER_AT(pos);
        if (w->held.kind == MSR_HELD_FETCH) {
            msr_list_remove(&w->held.link);
            fetch_advance(c, w);
            continue;
        }
        void *call = w->held.call;
        waiter_free(c, w);
        reply_value(c, call, v);
    }
    msr_store_getwait_drop(c, gw);
}

static int store_put(msr_store_core_t *c, void *call, const char *key, const void *data, size_t len)
{
    const kv_t *cur = msr_map_get(&c->store, key);
    if (msr_store_limits_check(&c->limits, &c->usage, "write", key, cur != NULL, cur ? cur->len : 0,
                               len) != MSR_OK) {
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "%s", msr_err_msg());
        return 0;
    }
    kv_t *v = msr_store_kv_new(data, len);
    void *old = NULL;
    if (v == NULL || msr_map_put(&c->store, key, v, &old) != MSR_OK) {
        msr_free(v);
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return 0;
    }
    msr_store_usage_put(&c->usage, key, old != NULL, old ? ((kv_t *)old)->len : 0, len);
    kv_free(old);
    mark_key(c, key);
    wake_getters(c, key, v);
    return 1;
}

static void msr_store_do_set(msr_store_core_t *c, void *call, const Msr__SetRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "set", req->key) ||
        request_seen(c, call, MSR_RPC_SET, req->client_id, req->request_id))
        return;
    if (store_put(c, call, req->key, req->value.data, req->value.len)) {
        Msr__SetResponse r = MSR__SET_RESPONSE__INIT;
        reply_write(c, call, MSR_RPC_SET, req->client_id, req->request_id, &r.base);
    }
}

/* The get-wait record of key, made if there is none; NULL when refused:
 * then held (a waiter of call's, or NULL) is freed first and call failed. */
static getwait_t *getwait_for(msr_store_core_t *c, void *call, const char *what, const char *key,
                              waiter_t *held)
{
    getwait_t *gw = msr_map_get(&c->getwait, key);
    if (gw)
        return gw;
    size_t kl = strlen(key);
    msr_status_t admitted = msr_store_limits_check_add(&c->limits, &c->usage, what, key, 1,
                                                       msr_store_entry_bytes(kl, 0));
    gw = admitted == MSR_OK ? msr_calloc(1, sizeof *gw + kl + 1) : NULL;
    if (gw == NULL || msr_map_put(&c->getwait, key, gw, NULL) != MSR_OK) {
        msr_free(gw);
        if (held)
            waiter_free(c, held);
        if (admitted != MSR_OK)
            msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "%s", msr_err_msg());
        else
            msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return NULL;
    }
    memcpy(gw->key, key, kl + 1);
    msr_list_init(&gw->waiters);
    msr_store_usage_put(&c->usage, gw->key, 0, 0, 0);
    return gw;
}

static void msr_store_do_get(msr_store_core_t *c, void *call, const Msr__GetRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "get", req->key))
        return;
    kv_t *v = msr_map_get(&c->store, req->key);
    if (v) {
        reply_value(c, call, v);
        return;
    }
    if (req->wait_ms == 0) {
        msr_held_fail(c->held, call, MSR_RPC_NOT_FOUND, "key '%.200s' not found", req->key);
        return;
    }
    getwait_t *gw = getwait_for(c, call, "get", req->key, NULL);
    if (gw == NULL)
        return;
    int64_t wait = req->wait_ms == UINT32_MAX ? -1 : (int64_t)req->wait_ms;
    waiter_t *w = waiter_new(c, call, MSR_HELD_GET, gw, &gw->waiters, wait, strlen(req->key));
    if (w == NULL) {
        if (msr_list_empty(&gw->waiters))
            msr_store_getwait_drop(c, gw);
        waiter_refused(c, call);
        return;
    }
}

static int parse_counter(const kv_t *v, int64_t *out)
{
    char text[32];
    if (v->len == 0 || v->len >= sizeof text)
        return 0;
    memcpy(text, v->data, v->len);
    text[v->len] = '\0';
    return msr_parse_i64(text, INT64_MIN, INT64_MAX, out) == MSR_OK;
}

static void msr_store_do_add(msr_store_core_t *c, void *call, const Msr__AddRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "add", req->key) ||
        request_seen(c, call, MSR_RPC_ADD, req->client_id, req->request_id))
        return;
    int64_t value = 0;
    kv_t *v = msr_map_get(&c->store, req->key);
    if (v && !parse_counter(v, &value)) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "add: key '%.200s' holds a value that is not a counter", req->key);
        return;
    }
    if ((req->delta > 0 && value > INT64_MAX - req->delta) ||
        (req->delta < 0 && value < INT64_MIN - req->delta)) {
        msr_held_fail(c->held, call, MSR_RPC_OUT_OF_RANGE, "add: counter '%.200s' would overflow",
                      req->key);
        return;
    }
    value += req->delta;
    char text[32];
    int n = snprintf(text, sizeof text, "%" PRId64, value);
    if (store_put(c, call, req->key, text, (size_t)n)) {
        Msr__AddResponse r = MSR__ADD_RESPONSE__INIT;
        r.value = value;
        reply_write(c, call, MSR_RPC_ADD, req->client_id, req->request_id, &r.base);
    }
}

static void msr_store_do_compare_set(msr_store_core_t *c, void *call,
                                     const Msr__CompareSetRequest *req)
{
    if (!check_generation(c, call, req->generation) ||
        !check_key(c, call, "compare-set", req->key) ||
        request_seen(c, call, MSR_RPC_COMPARE_SET, req->client_id, req->request_id))
        return;
    kv_t *v = msr_map_get(&c->store, req->key);
    int match = req->expect_absent
                    ? v == NULL
                    : (v != NULL && v->len == req->expected.len &&
                       (v->len == 0 || memcmp(v->data, req->expected.data, v->len) == 0));
    Msr__CompareSetResponse r = MSR__COMPARE_SET_RESPONSE__INIT;
    if (match) {
        if (!store_put(c, call, req->key, req->desired.data, req->desired.len))
            return;
        v = msr_map_get(&c->store, req->key);
        r.swapped = 1;
    }
    if (v) {
        r.present = 1;
        r.current.data = v->data;
        r.current.len = v->len;
    }
    reply_write(c, call, MSR_RPC_COMPARE_SET, req->client_id, req->request_id, &r.base);
}

static void msr_store_do_delete(msr_store_core_t *c, void *call, const Msr__DeleteRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "delete", req->key) ||
        request_seen(c, call, MSR_RPC_DELETE, req->client_id, req->request_id))
        return;
    kv_t *v = msr_map_remove(&c->store, req->key);
    Msr__DeleteResponse r = MSR__DELETE_RESPONSE__INIT;
    r.existed = v != NULL;
    if (v) {
        msr_store_usage_remove(&c->usage, req->key, v->len);
        mark_key(c, req->key);
    }
    kv_free(v);
    reply_write(c, call, MSR_RPC_DELETE, req->client_id, req->request_id, &r.base);
}

static void msr_store_do_barrier(msr_store_core_t *c, void *call, const Msr__BarrierRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "barrier", req->name))
        return;
    uint32_t weight = req->weight ? req->weight : 1;
    uint32_t most = participants_max(c);
    if (req->count == 0 || req->count > most) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "barrier '%.200s': count %u is not in 1..%u (the job's ranks)", req->name,
                      req->count, most);
        return;
    }
    barrier_t *b = msr_map_get(&c->barriers, req->name);
    if (b == NULL) {
        if (!name_admit(c, call, "barrier", req->name, 0))
            return;
        size_t nl = strlen(req->name);
        b = msr_calloc(1, sizeof *b + nl + 1);
        if (b == NULL || msr_map_put(&c->barriers, req->name, b, NULL) != MSR_OK) {
            msr_free(b);
            msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
            return;
        }
        memcpy(b->name, req->name, nl + 1);
        b->count = req->count;
        msr_list_init(&b->waiters);
        msr_store_usage_put(&c->usage, b->name, 0, 0, 0);
    } else if (b->count != req->count) {
        msr_held_fail(
            c->held, call, MSR_RPC_INVALID_ARGUMENT,
            "barrier '%.200s': count %u differs from the %u given by earlier participants",
            req->name, req->count, b->count);
        return;
    }
    if (weight > b->count - b->arrived) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "barrier '%.200s': %u more participants than its count of %u", req->name,
                      weight - (b->count - b->arrived), b->count);
        if (msr_list_empty(&b->waiters)) {
            msr_store_barrier_unlist(c, b);
            barrier_free(b);
        }
        return;
    }
    b->arrived += weight;
    if (b->arrived < b->count) {
        int64_t wait = req->wait_ms == UINT32_MAX ? -1 : (int64_t)req->wait_ms;
        waiter_t *w =
            waiter_new(c, call, MSR_HELD_BARRIER, b, &b->waiters, wait, strlen(req->name));
        if (w == NULL) {
            b->arrived -= weight;
            if (msr_list_empty(&b->waiters)) {
                msr_store_barrier_unlist(c, b);
                barrier_free(b);
            }
            waiter_refused(c, call);
            return;
        }
        w->weight = weight;
        return;
    }
    /* Everyone is here: release them all and forget the barrier. */
    msr_store_barrier_unlist(c, b);
    Msr__BarrierResponse r = MSR__BARRIER_RESPONSE__INIT;
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &b->waiters)
    {
        waiter_t *w = WAITER_AT(pos);
        void *wcall = w->held.call;
        waiter_free(c, w);
        reply(c, wcall, &r.base);
    }
    barrier_free(b);
    reply(c, call, &r.base);
}

/* ---- publish and fetch ---- */

/* The key of entry index of name ("<name>/<index>"); 0 if it is too long. */
static int entry_key(char *key, size_t len, const char *name, uint32_t index)
{
    int n = snprintf(key, len, "%s/%u", name, index);
    return n > 0 && (size_t)n < len && msr_rpc_key_valid(key);
}

static void msr_store_do_publish(msr_store_core_t *c, void *call, const Msr__PublishRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "publish", req->name) ||
        request_seen(c, call, MSR_RPC_PUBLISH, req->client_id, req->request_id))
        return;
    char key[MSR_KEY_MAX + 1];
    for (size_t i = 0; i < req->n_entries; i++)
        if (!entry_key(key, sizeof key, req->name, req->entries[i]->index)) {
            msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                          "publish '%.200s': the name is too long", req->name);
            return;
        }
    /* Each entry is a Set: a retry writes the same values again. */
    for (size_t i = 0; i < req->n_entries; i++) {
        const Msr__Contribution *e = req->entries[i];
        entry_key(key, sizeof key, req->name, e->index);
        if (!store_put(c, call, key, e->data.data, e->data.len))
            return;
    }
    Msr__PublishResponse r = MSR__PUBLISH_RESPONSE__INIT;
    reply_write(c, call, MSR_RPC_PUBLISH, req->client_id, req->request_id, &r.base);
}

int msr_store_fetch_pack(const msr_store_value_t *const *vals, uint32_t n, Msr__FetchResponse *r)
{
    msr__fetch_response__init(r);
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += vals[i]->len;
    r->data.data = msr_malloc(total ? total : 1);
    r->lengths = msr_malloc((n ? n : 1) * sizeof *r->lengths);
    if (r->data.data == NULL || r->lengths == NULL) {
        msr_store_fetch_pack_free(r);
        return 0;
    }
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        r->lengths[i] = (uint32_t)vals[i]->len;
        if (vals[i]->len)
            memcpy(r->data.data + off, vals[i]->data, vals[i]->len);
        off += vals[i]->len;
    }
    r->data.len = total;
    r->n_lengths = n;
    return 1;
}

void msr_store_fetch_pack_free(Msr__FetchResponse *r)
{
    msr_free(r->data.data);
    msr_free(r->lengths);
    r->data.data = NULL;
    r->lengths = NULL;
}

/* Answers a fetch whose entries are all present. */
static void fetch_reply(msr_store_core_t *c, void *call, const char *name, uint32_t n,
                        const uint32_t *indices)
{
    char key[MSR_KEY_MAX + 1];
    const kv_t **vals = msr_malloc((n ? n : 1) * sizeof *vals);
    Msr__FetchResponse r;
    if (vals == NULL) {
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        entry_key(key, sizeof key, name, indices[i]);
        vals[i] = msr_map_get(&c->store, key);
        total += vals[i]->len;
    }
    /* An index may be asked for many times: the answer, not the store,
     * could then pass the store's size. */
    if (total > c->limits.bytes_max) {
        msr_free(vals);
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED,
                      "fetch '%.200s': the answer's %" PRIu64 " bytes exceed the store's total "
                      "size limit of %" PRIu64 " bytes (--store_bytes_max)",
                      name, total, c->limits.bytes_max);
        return;
    }
    int packed = msr_store_fetch_pack(vals, n, &r);
    msr_free(vals);
    if (!packed) {
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return;
    }
    reply(c, call, &r.base);
    msr_store_fetch_pack_free(&r);
}

/* The first of indices[from..n) whose entry is missing, or n. */
static uint32_t fetch_missing(msr_store_core_t *c, const char *name, uint32_t n,
                              const uint32_t *indices, uint32_t from)
{
    char key[MSR_KEY_MAX + 1];
    for (uint32_t i = from; i < n; i++) {
        entry_key(key, sizeof key, name, indices[i]);
        if (msr_map_get(&c->store, key) == NULL)
            return i;
    }
    return n;
}

/* A held fetch whose awaited key appeared (w is on no list): answers it
 * when nothing is missing, else waits on the next missing key. */
static void fetch_advance(msr_store_core_t *c, waiter_t *w)
{
    fetch_t *f = w->fetch;
    void *call = w->held.call;
    f->next = fetch_missing(c, f->name, f->n, f->indices, f->next);
    if (f->next == f->n) {
        w->fetch = NULL;
        waiter_free(c, w);
        fetch_reply(c, call, f->name, f->n, f->indices);
        msr_free(f->indices);
        msr_free(f);
        return;
    }
    char key[MSR_KEY_MAX + 1];
    entry_key(key, sizeof key, f->name, f->indices[f->next]);
    getwait_t *gw = getwait_for(c, call, "fetch", key, w);
    if (gw == NULL)
        return;
    w->held.owner = gw;
    msr_list_push_back(&gw->waiters, &w->held.link);
}

static void msr_store_do_fetch(msr_store_core_t *c, void *call, const Msr__FetchRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "fetch", req->name))
        return;
    if (req->n_indices > MSR_FETCH_MAX) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "fetch '%.200s': %zu entries asked, at most %d", req->name, req->n_indices,
                      MSR_FETCH_MAX);
        return;
    }
    char key[MSR_KEY_MAX + 1];
    if (req->n_indices > 0 && !entry_key(key, sizeof key, req->name, UINT32_MAX)) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "fetch '%.200s': the name is too long", req->name);
        return;
    }
    uint32_t n = (uint32_t)req->n_indices;
    uint32_t miss = fetch_missing(c, req->name, n, req->indices, 0);
    if (miss == n) {
        fetch_reply(c, call, req->name, n, req->indices);
        return;
    }
    if (req->wait_ms == 0) {
        msr_held_fail(c->held, call, MSR_RPC_NOT_FOUND,
                      "fetch '%.200s': entry %u was not published", req->name, req->indices[miss]);
        return;
    }
    size_t nl = strlen(req->name);
    int64_t wait = req->wait_ms == UINT32_MAX ? -1 : (int64_t)req->wait_ms;
    /* It keeps its request (name and indices, with the caller) and a copy
     * of both (here), all charged before anything is copied. */
    uint64_t kept = 2 * ((uint64_t)n * sizeof(uint32_t) + nl + 1) + sizeof(fetch_t);
    waiter_t *w = waiter_new(c, call, MSR_HELD_FETCH, NULL, NULL, wait, kept);
    if (w == NULL) {
        waiter_refused(c, call);
        return;
    }
    fetch_t *f = msr_calloc(1, sizeof *f + nl + 1);
    uint32_t *indices = msr_malloc((n ? n : 1) * sizeof *indices);
    if (f == NULL || indices == NULL) {
        msr_free(f);
        msr_free(indices);
        waiter_free(c, w);
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return;
    }
    memcpy(f->name, req->name, nl + 1);
    memcpy(indices, req->indices, n * sizeof *indices);
    f->n = n;
    f->indices = indices;
    f->next = miss;
    w->fetch = f;
    fetch_advance(c, w);
}

static msr_blob_t *gather_result(const gather_t *g)
{
    uint8_t *concat = msr_malloc(g->bytes ? g->bytes : 1);
    uint32_t *lengths = msr_malloc(sizeof *lengths * g->count);
    msr_blob_t *blob = NULL;
    if (concat && lengths) {
        size_t off = 0;
        for (uint32_t i = 0; i < g->count; i++) {
            lengths[i] = (uint32_t)g->entries[i].len;
            if (g->entries[i].len)
                memcpy(concat + off, g->entries[i].data, g->entries[i].len);
            off += g->entries[i].len;
        }
        Msr__AllgatherResponse r = MSR__ALLGATHER_RESPONSE__INIT;
        r.data.data = concat;
        r.data.len = g->bytes;
        r.n_lengths = g->count;
        r.lengths = lengths;
        blob = msr_blob_pack(&r.base);
    }
    msr_free(concat);
    msr_free(lengths);
    return blob;
}

/* Checks an allgather request against itself, the job and an allgather
 * in progress (g, or NULL), every entry before any is taken, so a bad
 * request changes nothing (a duplicate inside the request is caught while
 * taking, and undone); then whether the store's limits admit its bytes
 * (and the allgather's name and table when it is the first). 0 when the
 * call was refused. */
static int gather_admit(msr_store_core_t *c, void *call, const Msr__AllgatherRequest *req,
                        const gather_t *g)
{
    uint32_t most = participants_max(c);
    if (req->count == 0 || req->count > most) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "allgather '%.200s': count %u is not in 1..%u (the job's ranks)", req->name,
                      req->count, most);
        return 0;
    }
    if (req->n_entries == 0 || req->n_entries > req->count) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "allgather '%.200s': %zu contributions for a count of %u", req->name,
                      req->n_entries, req->count);
        return 0;
    }
    if (g != NULL && g->count != req->count) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "allgather '%.200s': count %u differs from the %u given by earlier "
                      "participants",
                      req->name, req->count, g->count);
        return 0;
    }
    uint64_t bytes = 0;
    for (size_t i = 0; i < req->n_entries; i++) {
        const Msr__Contribution *e = req->entries[i];
        if (e->index >= req->count || (g && g->entries[e->index].present) ||
            e->data.len > UINT32_MAX) {
            msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                          "allgather '%.200s': index %u is %s", req->name, e->index,
                          e->index >= req->count      ? "not below the count"
                          : e->data.len <= UINT32_MAX ? "given twice"
                                                      : "too large");
            return 0;
        }
        if (msr_store_limits_check_value(&c->limits, "allgather", req->name, e->data.len) !=
            MSR_OK) {
            msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "%s", msr_err_msg());
            return 0;
        }
        bytes += e->data.len;
    }
    if (g == NULL)
        return name_admit(c, call, "allgather", req->name, bytes + gather_table(req->count));
    if (msr_store_limits_check_add(&c->limits, &c->usage, "allgather", req->name, 0, bytes) !=
        MSR_OK) {
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "%s", msr_err_msg());
        return 0;
    }
    return 1;
}

/* A new allgather of count entries under name, listed and counted in the
 * store's usage; NULL when out of memory. */
static gather_t *gather_new(msr_store_core_t *c, const char *name, uint32_t count)
{
    size_t nl = strlen(name);
    gather_t *g = msr_calloc(1, sizeof *g + nl + 1);
    if (g)
        g->entries = msr_calloc(count, sizeof *g->entries);
    if (g == NULL || g->entries == NULL || msr_map_put(&c->gathers, name, g, NULL) != MSR_OK) {
        if (g)
            msr_free(g->entries);
        msr_free(g);
        return NULL;
    }
    memcpy(g->name, name, nl + 1);
    g->count = count;
    msr_list_init(&g->waiters);
    msr_store_usage_put(&c->usage, g->name, 0, 0, 0);
    c->usage.bytes += gather_table(g->count);
    return g;
}

/* Takes the request's contributions into g: MSR_OK, MSR_ERR_INVALID_ARG
 * when an index is given twice inside the request, MSR_ERR_NO_MEMORY. On
 * failure what was taken stays (msr_store_gather_withdraw undoes it). */
static msr_status_t gather_take(msr_store_core_t *c, gather_t *g, void *call,
                                const Msr__AllgatherRequest *req)
{
    for (size_t i = 0; i < req->n_entries; i++) {
        const Msr__Contribution *e = req->entries[i];
        gather_entry_t *ge = &g->entries[e->index];
        if (ge->present)
            return MSR_ERR_INVALID_ARG;
        uint8_t *copy = msr_malloc(e->data.len ? e->data.len : 1);
        if (copy == NULL)
            return MSR_ERR_NO_MEMORY;
        if (e->data.len)
            memcpy(copy, e->data.data, e->data.len);
        ge->data = copy;
        ge->len = e->data.len;
        ge->present = 1;
        ge->call = call;
        g->bytes += e->data.len;
        c->usage.bytes += e->data.len;
        g->received++;
    }
    return MSR_OK;
}

/* Every contribution is in: packs the result once and sends it to every
 * participant, call last, and forgets the allgather. */
static void gather_complete(msr_store_core_t *c, gather_t *g, void *call)
{
    msr_store_gather_unlist(c, g);
    msr_blob_t *blob = gather_result(g);
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &g->waiters)
    {
        waiter_t *ww = WAITER_AT(pos);
        void *wcall = ww->held.call;
        waiter_free(c, ww);
        if (blob)
            answer_blob(c, wcall, blob);
        else
            msr_held_fail(c->held, wcall, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
    }
    if (blob)
        answer_blob(c, call, blob);
    else
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
    msr_blob_unref(blob);
    gather_free(g);
}

/* What a waiting allgather call keeps beyond its record: its
 * contributions, copied here, and its request with them. */
static uint64_t gather_kept(const Msr__AllgatherRequest *req)
{
    uint64_t bytes = strlen(req->name) + 1;
    for (size_t i = 0; i < req->n_entries; i++)
        bytes += 2 * (uint64_t)req->entries[i]->data.len + sizeof(Msr__Contribution);
    return bytes;
}

static void msr_store_do_allgather(msr_store_core_t *c, void *call,
                                   const Msr__AllgatherRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "allgather", req->name))
        return;
    gather_t *g = msr_map_get(&c->gathers, req->name);
    if (!gather_admit(c, call, req, g))
        return;
    int created = g == NULL;
    if (created && (g = gather_new(c, req->name, req->count)) == NULL) {
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return;
    }
    msr_status_t st = gather_take(c, g, call, req);
    if (st == MSR_OK && g->received == g->count) {
        gather_complete(c, g, call);
        return;
    }
    if (st == MSR_OK) {
        int64_t wait = req->wait_ms == UINT32_MAX ? -1 : (int64_t)req->wait_ms;
        if (waiter_new(c, call, MSR_HELD_ALLGATHER, g, &g->waiters, wait, gather_kept(req)) != NULL)
            return;
        st = MSR_ERR_REFUSED;
    }
    /* Undo this request's entries: it failed as a whole. */
    msr_store_gather_withdraw(c, g, call);
    if (created || msr_list_empty(&g->waiters)) {
        msr_store_gather_unlist(c, g);
        gather_free(g);
    }
    if (st == MSR_ERR_REFUSED)
        waiter_refused(c, call);
    else if (st == MSR_ERR_NO_MEMORY)
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
    else
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "allgather '%.200s': an index is given twice", req->name);
}

/* ---- held calls that give up ---- */

int msr_store_core_cancel(msr_store_core_t *c, void *call)
{
    return msr_held_cancel(c->held, call);
}

static void held_cancelled(void *ctx, msr_held_t *h)
{
    waiter_withdraw(ctx, MSR_CONTAINER_OF(h, waiter_t, held));
}

/* A held store call's deadline passed: it fails, saying what it waited for
 * and how far that got. */
static void held_expired(void *ctx, msr_held_t *h)
{
    msr_store_core_t *c = ctx;
    waiter_t *w = MSR_CONTAINER_OF(h, waiter_t, held);
    void *call = h->call;
    long long ms = (long long)h->wait_ms;
    char msg[400];
    switch (h->kind) {
    case MSR_HELD_GET:
        snprintf(msg, sizeof msg, "key '%.200s' was not set within %lld ms",
                 ((getwait_t *)h->owner)->key, ms);
        break;
    case MSR_HELD_FETCH:
        snprintf(msg, sizeof msg, "fetch '%.200s': entry %u was not published within %lld ms",
                 w->fetch->name, w->fetch->indices[w->fetch->next], ms);
        break;
    case MSR_HELD_BARRIER: {
        barrier_t *b = h->owner;
        snprintf(msg, sizeof msg, "barrier '%.200s': %u of %u participants arrived within %lld ms",
                 b->name, b->arrived, b->count, ms);
        break;
    }
    default: {
        gather_t *g = h->owner;
        snprintf(msg, sizeof msg,
                 "allgather '%.200s': %u of %u contributions arrived within %lld ms", g->name,
                 g->received, g->count, ms);
    }
    }
    waiter_withdraw(c, w);
    msr_held_fail(c->held, call, MSR_RPC_DEADLINE_EXCEEDED, "%s", msg);
}

void msr_store_core_tick(msr_store_core_t *c, uint64_t now)
{
    msr_held_tick(c->held, now);
}

uint64_t msr_store_core_next_deadline(const msr_store_core_t *c)
{
    return msr_held_next_deadline(c->held);
}

/* ---- entry points ---- */

msr_status_t msr_store_core_create(const msr_store_limits_t *limits, const msr_store_ops_t *ops,
                                   msr_store_core_t **core_p)
{
    msr_store_core_t *c = msr_calloc(1, sizeof *c);
    if (c == NULL)
        return MSR_ERR_NO_MEMORY;
    c->ops = *ops;
    c->limits = msr_store_limits_resolve(limits);
    c->held = ops->held;
    if (c->held == NULL) {
        msr_held_io_t io = {ops->ctx,      ops->set_data, ops->get_data,
                            ops->deadline, ops->fail,     ops->peer};
        msr_held_calls_init(&c->own, &io);
        c->held = &c->own;
    }
    msr_held_handler_t handler = {c, held_expired, held_cancelled};
    msr_held_kind_t kinds[] = {MSR_HELD_GET, MSR_HELD_FETCH, MSR_HELD_BARRIER, MSR_HELD_ALLGATHER};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(kinds); i++)
        msr_held_calls_handle(c->held, kinds[i], &handler);
    *core_p = c;
    return MSR_OK;
}

void msr_store_core_destroy(msr_store_core_t *c)
{
    if (c == NULL)
        return;
    waiters_end(c, NULL); /* waiters go with their records, unanswered */
    records_free(c);
    if (c->held == &c->own)
        msr_held_calls_cleanup(&c->own);
    msr_free(c);
}

void msr_store_core_call(msr_store_core_t *c, void *call, msr_rpc_method_t method,
                         const ProtobufCMessage *req)
{
    switch (method) {
    case MSR_RPC_SET:
        msr_store_do_set(c, call, (const Msr__SetRequest *)req);
        break;
    case MSR_RPC_GET:
        msr_store_do_get(c, call, (const Msr__GetRequest *)req);
        break;
    case MSR_RPC_ADD:
        msr_store_do_add(c, call, (const Msr__AddRequest *)req);
        break;
    case MSR_RPC_COMPARE_SET:
        msr_store_do_compare_set(c, call, (const Msr__CompareSetRequest *)req);
        break;
    case MSR_RPC_DELETE:
        msr_store_do_delete(c, call, (const Msr__DeleteRequest *)req);
        break;
    case MSR_RPC_BARRIER:
        msr_store_do_barrier(c, call, (const Msr__BarrierRequest *)req);
        break;
    case MSR_RPC_ALLGATHER:
        msr_store_do_allgather(c, call, (const Msr__AllgatherRequest *)req);
        break;
    case MSR_RPC_PUBLISH:
        msr_store_do_publish(c, call, (const Msr__PublishRequest *)req);
        break;
    case MSR_RPC_FETCH:
        msr_store_do_fetch(c, call, (const Msr__FetchRequest *)req);
        break;
    default:
        msr_held_fail(c->held, call, MSR_RPC_UNIMPLEMENTED, "not a store call");
    }
}

msr_held_calls_t *msr_store_core_held(msr_store_core_t *c)
{
    return c->held;
}

size_t msr_store_core_keys(const msr_store_core_t *c)
{
    return c->store.count;
}

typedef struct foreach_arg {
    void (*fn)(const char *key, const msr_store_value_t *value, void *arg);
    void *arg;
} foreach_arg_t;

static void foreach_key(const char *key, void *value, void *arg)
{
    foreach_arg_t *f = arg;
    f->fn(key, value, f->arg);
}

void msr_store_core_foreach(const msr_store_core_t *c,
                            void (*fn)(const char *key, const msr_store_value_t *value, void *arg),
                            void *arg)
{
    foreach_arg_t f = {fn, arg};
    msr_map_foreach(&c->store, foreach_key, &f);
}

const msr_store_value_t *msr_store_core_value(const msr_store_core_t *c, const char *key)
{
    return msr_map_get(&c->store, key);
}

msr_status_t msr_store_core_load_set(msr_store_core_t *c, const char *key, const void *data,
                                     size_t len)
{
    if (!msr_rpc_key_valid(key))
        return MSR_ERR_INVALID_ARG;
    kv_t *v = msr_store_kv_new(data, len);
    void *old = NULL;
    if (v == NULL || msr_map_put(&c->store, key, v, &old) != MSR_OK) {
        msr_free(v);
        return MSR_ERR_NO_MEMORY;
    }
    msr_store_usage_put(&c->usage, key, old != NULL, old ? ((kv_t *)old)->len : 0, len);
    kv_free(old);
    return MSR_OK;
}

void msr_store_core_load_delete(msr_store_core_t *c, const char *key)
{
    kv_t *v = msr_map_remove(&c->store, key);
    if (v)
        msr_store_usage_remove(&c->usage, key, v->len);
    kv_free(v);
}

void msr_store_core_load_clear(msr_store_core_t *c)
{
    msr_map_cleanup(&c->store, kv_free);
    memset(&c->usage, 0, sizeof c->usage); /* no call is held: the keys were all it counted */
}
