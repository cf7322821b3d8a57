/* What the store core's parts share: the records a held call waits on, the
 * core itself, the small helpers every part calls, and the calls each part
 * handles. Private to store_core.c (the core: records, held calls, entry
 * points), store_kv.c (keys, get-waits, publish and fetch) and
 * store_gather.c (barriers and allgathers). */
#ifndef MSR_RENDEZVOUS_STORE_CORE_IMPL_H
#define MSR_RENDEZVOUS_STORE_CORE_IMPL_H

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/list.h"
#include "base/map.h"
#include "base/util.h"
#include "rendezvous/held.h"
#include "rendezvous/store_core.h"

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
    uint32_t weight;   /* MSR_HELD_BARRIER: the participants this call stands for */
    uint64_t merge_id; /* MSR_HELD_BARRIER: a relay's merged arrival (0: none) */
    uint64_t *ids;     /* MSR_HELD_BARRIER: its callers' (client, request) ids, */
    uint32_t nids;     /* pairs, noted as released when the barrier releases it */
    fetch_t *fetch;    /* MSR_HELD_FETCH: its request */
    /* MSR_HELD_GET waiting for a change: the value it saw (NULL: a get
     * waiting for its key to be set) */
    struct msr_store_value *old;
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

/* A relay's withdrawal of a merged arrival's part, come before the
 * arrival (merge_id 0: a free slot). */
typedef struct msr_withdrawn {
    uint64_t merge_id, client_id, request_id;
    uint32_t weight;
} msr_withdrawn_t;

/* Barrier arrivals released lately, by their callers' ids
 * (store_released.c): a ring of the last MSR_BARRIER_RELEASED_MAX pairs
 * (cap of them allocated: MSR_BARRIER_RELEASED_FIRST at the first,
 * doubled when full), the oldest forgotten first, and their map;
 * and the withdrawals whose arrival has not come yet, a ring of the last
 * MSR_BARRIER_WITHDRAWN_MAX (pn of them still to apply). */
typedef struct msr_released {
    msr_map_t map; /* "<client id>/<request id>" -> 1 */
    uint64_t *ring;
    uint32_t next, n, cap;
    msr_withdrawn_t *pending;
    uint32_t pnext, pn;
} msr_released_t;

struct msr_store_core {
    msr_store_ops_t ops;
    msr_map_t store, getwait, barriers, gathers;
    msr_store_limits_t given;  /* as configured: 0, the default (store_limits) */
    msr_store_limits_t limits; /* in force: given, the rest sized for ranks */
    uint32_t ranks;            /* the largest job seen (participants_max) */
    msr_store_usage_t usage;   /* store, waited-on names and allgather contributions */
    msr_held_calls_t *held;    /* where its calls are held: own, or its user's (ops.held) */
    msr_held_calls_t own;
    msr_released_t released;
};

/* ---- answers ---- */

static inline void reply(msr_store_core_t *c, void *call, const ProtobufCMessage *resp)
{
    c->ops.reply(c->ops.ctx, call, resp);
}

static inline void answer_blob(msr_store_core_t *c, void *call, msr_blob_t *blob)
{
    c->ops.reply_blob(c->ops.ctx, call, blob);
}

static inline void reply_write(msr_store_core_t *c, void *call, msr_rpc_method_t method,
                               uint64_t client_id, uint64_t request_id,
                               const ProtobufCMessage *resp)
{
    if (c->ops.reply_write)
        c->ops.reply_write(c->ops.ctx, call, method, client_id, request_id, resp);
    else
        c->ops.reply(c->ops.ctx, call, resp);
}

static inline int request_seen(msr_store_core_t *c, void *call, msr_rpc_method_t method,
                               uint64_t client_id, uint64_t request_id)
{
    return c->ops.request_seen &&
           c->ops.request_seen(c->ops.ctx, call, method, client_id, request_id);
}

/* Notes a key as set or deleted. */
static inline void mark_key(msr_store_core_t *c, const char *key)
{
    if (c->ops.key_changed)
        c->ops.key_changed(c->ops.ctx, key);
}

/* ---- waiters ---- */

/* A held store call, charged to its client's budget of held calls
 * (held.h) with kept, the bytes it keeps beyond its record: what it copied
 * and the request its caller keeps until it is answered. NULL when refused
 * or out of memory, with the error text (base/err.h) saying which. */
static inline waiter_t *waiter_new(msr_store_core_t *c, void *call, msr_held_kind_t kind,
                                   void *owner, msr_list_t *list, int64_t wait_ms, uint64_t kept)
{
    msr_held_t *h =
        msr_held_wait(c->held, sizeof(waiter_t), kept, kind, call, owner, list, wait_ms);
    return h ? MSR_CONTAINER_OF(h, waiter_t, held) : NULL;
}

/* Fails a call that could not be held, with waiter_new's reason. */
static inline void waiter_refused(msr_store_core_t *c, void *call)
{
    msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "%s", msr_err_msg());
}

static inline void waiter_free(msr_store_core_t *c, waiter_t *w)
{
    if (w->fetch)
        msr_free(w->fetch->indices);
    msr_free(w->fetch);
    msr_free(w->old);
    msr_free(w->ids);
    msr_held_free(c->held, &w->held);
}

/* ---- records ---- */

static inline void kv_free(void *v)
{
    msr_free(v);
}

static inline void getwait_free(void *v)
{
    msr_free(v);
}

static inline void barrier_free(void *v)
{
    barrier_t *b = v;
    if (b)
        msr_free(b);
}

static inline void gather_free(void *v)
{
    gather_t *g = v;
    if (g == NULL)
        return;
    for (uint32_t i = 0; i < g->count; i++)
        msr_free(g->entries[i].data);
    msr_free(g->entries);
    msr_free(g);
}

/* The most participants a barrier or allgather may have, as the user says;
 * without a bound only the store's byte limit bounds an allgather, through
 * its entry table (gather_table). */
static inline uint32_t participants_max(const msr_store_core_t *c)
{
    return c->ops.participants_max ? c->ops.participants_max(c->ops.ctx) : UINT32_MAX;
}

/* The limits a write is checked against now: those given as they are, the
 * key and byte limits not given sized for the largest job this store has
 * served (msr_store_limits_for_job), so they never shrink under what the
 * store holds. */
static inline const msr_store_limits_t *store_limits(msr_store_core_t *c)
{
    uint32_t n = participants_max(c);
    if (n != UINT32_MAX && n > c->ranks) {
        c->ranks = n;
        c->limits = msr_store_limits_for_job(&c->given, n);
    }
    return &c->limits;
}

/* The bytes an allgather of count entries takes before any contribution. */
static inline uint64_t gather_table(uint32_t count)
{
    return (uint64_t)count * sizeof(gather_entry_t);
}

/* ---- every call's checks ---- */

static inline int check_generation(msr_store_core_t *c, void *call, int generation)
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

static inline int check_key(msr_store_core_t *c, void *call, const char *what, const char *key)
{
    if (msr_rpc_key_valid(key))
        return 1;
    msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT, "%s: bad key (1 to %d printable bytes)",
                  what, MSR_KEY_MAX);
    return 0;
}

/* ---- across the parts ---- */

/* store_kv.c: a stored value of len bytes copied from data; NULL when out
 * of memory. */
kv_t *msr_store_kv_new(const void *data, size_t len);
/* Records leave their map and the store's usage: a get-wait (store_kv.c,
 * freed), a barrier and an allgather (store_gather.c, not freed). */
void msr_store_getwait_drop(msr_store_core_t *c, getwait_t *gw);
void msr_store_barrier_unlist(msr_store_core_t *c, barrier_t *b);
void msr_store_gather_unlist(msr_store_core_t *c, gather_t *g);
/* store_gather.c: takes back the contributions call gave to g. */
void msr_store_gather_withdraw(msr_store_core_t *c, gather_t *g, void *call);

/* store_released.c: the ids of a barrier's caller noted as released (none
 * for 0 ids), whether they were (and not forgotten since), the record
 * freed. */
void msr_store_released_note(msr_store_core_t *c, uint64_t client_id, uint64_t request_id);
int msr_store_released_seen(const msr_store_core_t *c, uint64_t client_id, uint64_t request_id);
void msr_store_released_free(msr_store_core_t *c);
/* store_released.c: a withdrawal of weight participants (the part of
 * ids client_id, request_id) of merged arrival merge_id, not seen yet,
 * remembered (0, or -1 out of memory); and, when that arrival comes, the
 * weight withdrawn from it so far, each withdrawn part's ids zeroed in its
 * n pairs ids (its remembered withdrawals then forgotten; ids NULL: only
 * the weight, nothing forgotten). */
int msr_store_withdrawn_note(msr_store_core_t *c, uint64_t merge_id, uint32_t weight,
                             uint64_t client_id, uint64_t request_id);
uint64_t msr_store_withdrawn_take(msr_store_core_t *c, uint64_t merge_id, uint64_t *ids,
                                  uint32_t n);
/* The weight msr_store_withdrawn_take would take, nothing forgotten. */
uint64_t msr_store_withdrawn_peek(const msr_store_core_t *c, uint64_t merge_id);
/* Zeroes the pair (client_id, request_id) among the n pairs of ids. */
void msr_store_ids_drop(uint64_t *ids, uint32_t n, uint64_t client_id, uint64_t request_id);

/* The calls, each answered exactly once (store_core.h): store_kv.c's */
void msr_store_do_set(msr_store_core_t *c, void *call, const Msr__SetRequest *req);
void msr_store_do_get(msr_store_core_t *c, void *call, const Msr__GetRequest *req);
void msr_store_do_add(msr_store_core_t *c, void *call, const Msr__AddRequest *req);
void msr_store_do_compare_set(msr_store_core_t *c, void *call, const Msr__CompareSetRequest *req);
void msr_store_do_delete(msr_store_core_t *c, void *call, const Msr__DeleteRequest *req);
void msr_store_do_num_keys(msr_store_core_t *c, void *call, const Msr__NumKeysRequest *req);
void msr_store_do_publish(msr_store_core_t *c, void *call, const Msr__PublishRequest *req);
void msr_store_do_fetch(msr_store_core_t *c, void *call, const Msr__FetchRequest *req);
/* and store_gather.c's */
void msr_store_do_barrier(msr_store_core_t *c, void *call, const Msr__BarrierRequest *req);
void msr_store_do_allgather(msr_store_core_t *c, void *call, const Msr__AllgatherRequest *req);

#endif
