/* The store's semantics (store_core.h): its records and held calls, the
 * entry points and loading; the calls themselves are in store_kv.c and
 * store_gather.c (store_core_impl.h). */
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
#include "rendezvous/store_core_impl.h"

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

/* ---- the store ---- */

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
        snprintf(msg, sizeof msg,
                 w->old ? "key '%.200s' did not change within %lld ms"
                        : "key '%.200s' was not set within %lld ms",
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
    if (limits != NULL)
        c->given = *limits;
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
    msr_store_released_free(c);
    if (c->held == &c->own)
        msr_held_calls_cleanup(&c->own);
    msr_free(c);
}

int msr_store_core_method(msr_rpc_method_t method)
{
    switch (method) {
    case MSR_RPC_SET:
    case MSR_RPC_GET:
    case MSR_RPC_ADD:
    case MSR_RPC_COMPARE_SET:
    case MSR_RPC_DELETE:
    case MSR_RPC_BARRIER:
    case MSR_RPC_ALLGATHER:
    case MSR_RPC_PUBLISH:
    case MSR_RPC_FETCH:
    case MSR_RPC_NUM_KEYS:
        return 1;
    default:
        return 0;
    }
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
    case MSR_RPC_NUM_KEYS:
        msr_store_do_num_keys(c, call, (const Msr__NumKeysRequest *)req);
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
