/* The store's semantics, written once: set, wait-get, add, compare-set,
 * delete, barrier and allgather, the generation guard and the limits of
 * store_limits.h. No transport and no I/O: the coordinator (cluster/coord.c)
 * and a singleton's store (local_store.c) hand it calls and answer them
 * through the ops they give it.
 *
 * A call that must wait (a get of a key not yet set, a barrier or allgather
 * not yet complete) is held by the core (a held call, held.h) until what it
 * waits for happens, its deadline passes (msr_store_core_tick) or its owner
 * cancels it. Each call is answered exactly once through reply, reply_blob,
 * reply_write or fail, unless msr_store_core_cancel takes it back first. Every function must be
 * called from one thread at a time (the owner's lock or thread). */
#ifndef MSR_RENDEZVOUS_STORE_CORE_H
#define MSR_RENDEZVOUS_STORE_CORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/map.h"
#include "msrun/base.h"
#include "rendezvous/rpc.h"
#include "rendezvous/store_limits.h"

/* A reference-counted packed message shared by many answers (an allgather's
 * result goes to every participant without being packed again). */
typedef struct msr_blob {
    _Atomic int refs; /* a transport may drop references from its threads */
    size_t len;
    uint8_t data[];
} msr_blob_t;

/* Packs msg into a new blob holding one reference; NULL when out of memory. */
msr_blob_t *msr_blob_pack(const ProtobufCMessage *msg);
void msr_blob_unref(msr_blob_t *blob);

/* A stored value (msr_store_core_foreach, msr_store_core_value). */
typedef struct msr_store_value {
    size_t len;
    uint8_t data[];
} msr_store_value_t;

/* A Fetch's answer from the n values asked for, in order: r's data and
 * lengths are allocated (msr_store_fetch_pack_free frees them); 0 when out
 * of memory. The coordinator's store and a node's proxy answer alike. */
int msr_store_fetch_pack(const msr_store_value_t *const *vals, uint32_t n, Msr__FetchResponse *r);
void msr_store_fetch_pack_free(Msr__FetchResponse *r);

/* How the core answers and what it asks of its user. ctx is passed back to
 * each. Required: reply, reply_blob, and either held or all of fail,
 * deadline, set_data and get_data. */
typedef struct msr_store_ops {
    void *ctx;
    void (*reply)(void *ctx, void *call, const ProtobufCMessage *resp);
    /* takes a reference of its own if it keeps the blob */
    void (*reply_blob)(void *ctx, void *call, msr_blob_t *blob);
    void (*fail)(void *ctx, void *call, msr_rpc_code_t code, const char *message);
    /* the latest time (msr_now_ns units) a held call may be answered:
     * MSR_DEADLINE_NEVER when only the request's wait_ms bounds it */
    uint64_t (*deadline)(void *ctx, void *call);
    /* one slot per call for the core's held call (held.h) */
    void (*set_data)(void *ctx, void *call, void *data);
    void *(*get_data)(void *ctx, void *call);
    /* Optional: the call's peer as the transport names it, for the table
     * of held calls the core makes of its own (held.h: the client a held
     * call is charged to; NULL: every call is one client's). */
    const char *(*peer)(void *ctx, void *call);
    /* Optional: the user's table of held calls (held.h), to hold the
     * core's calls beside the user's own, under one heap of deadlines; the
     * core registers the store's kinds in it, and fails calls and reaches
     * their slots and deadlines through its io (fail, deadline, set_data
     * and get_data above are then not used). NULL: a table of the core's
     * own, made from them. It must outlive the core. */
    struct msr_held_calls *held;
    /* Optional (NULL: not done). request_seen: a write carrying
     * (client_id, request_id) that was applied before is answered as the
     * first time, returning 1. reply_write: answers a write and remembers
     * the answer for its retries (NULL: reply). key_changed: a key was set
     * or deleted. generation: the job's generation, checked against every
     * request's. participants_max: the most participants a barrier or
     * allgather may have (NULL: the store's byte limit alone bounds it). */
    int (*request_seen)(void *ctx, void *call, msr_rpc_method_t method, uint64_t client_id,
                        uint64_t request_id);
    void (*reply_write)(void *ctx, void *call, msr_rpc_method_t method, uint64_t client_id,
                        uint64_t request_id, const ProtobufCMessage *resp);
    /* Optional, for a relay's merged add (AddRequest.parts; NULL: no part
     * is deduplicated). request_value: 1 with *value_p when (client_id,
     * request_id) was applied as an Add before, -1 when another call used
     * it, 0 when it is new. request_note: remembers a part's answer. */
    int (*request_value)(void *ctx, uint64_t client_id, uint64_t request_id, int64_t *value_p);
    void (*request_note)(void *ctx, msr_rpc_method_t method, uint64_t client_id,
                         uint64_t request_id, const ProtobufCMessage *resp);
    void (*key_changed)(void *ctx, const char *key);
    int (*generation)(void *ctx);
    uint32_t (*participants_max)(void *ctx);
    /* 1 where no barrier arrival can come again after its release (no
     * relay, no resend: a lone rank's local store): no caller's ids are
     * remembered as released, and the record of them is never made. 0
     * (the coordinator's store): remembered, in a ring grown in steps. */
    int no_resends;
} msr_store_ops_t;

typedef struct msr_store_core msr_store_core_t;

/* The most parts one merged Add may carry (a relay's batch bound). */
#define MSR_ADD_PARTS_MAX 1024

/* The most parts one merged Barrier arrival may carry (a relay's). */
#define MSR_BARRIER_PARTS_MAX 1024

/* The barrier arrivals' ids remembered as released (the latest), so that
 * one sent again after its release is answered released. */
#define MSR_BARRIER_RELEASED_MAX 131072

/* The released arrivals' ids the record holds at first; it doubles when
 * full, up to MSR_BARRIER_RELEASED_MAX (16 bytes of ring each). */
#define MSR_BARRIER_RELEASED_FIRST 1024

/* The withdrawals of merged arrivals not seen yet that are remembered (the
 * latest), applied when their arrival comes. */
#define MSR_BARRIER_WITHDRAWN_MAX 4096

/* The most entries one Fetch may ask for. */
#define MSR_FETCH_MAX 65536

/* limits: NULL or zeros for the defaults. MSR_ERR_NO_MEMORY on failure. */
msr_status_t msr_store_core_create(const msr_store_limits_t *limits, const msr_store_ops_t *ops,
                                   msr_store_core_t **core_p);

/* Frees the core and what it holds; held calls are dropped unanswered (call
 * msr_store_core_reset first to fail them). NULL does nothing. */
void msr_store_core_destroy(msr_store_core_t *core);

/* Answers or holds a store call (Set, Get, Add, CompareSet, Delete, Barrier,
 * Allgather, Publish, Fetch, NumKeys; any other method is refused with
 * UNIMPLEMENTED). NumKeys counts every key stored (msr_store_core_keys). Publish sets the key
 * "<name>/<index>" of each entry; Fetch answers once the keys of all its indices exist, waiting on
 * one missing key at a time. req stays the caller's and is not used after this returns. */
void msr_store_core_call(msr_store_core_t *core, void *call, msr_rpc_method_t method,
                         const ProtobufCMessage *req);

/* 1 when method is one of the store's calls msr_store_core_call answers
 * (the list above), else 0. */
int msr_store_core_method(msr_rpc_method_t method);

/* Takes back a call the core holds (its client gave up): what it brought
 * (a barrier arrival, allgather contributions) is withdrawn. Returns 1 when
 * the core's table of held calls held it (a call of the user's in a shared
 * table goes to the user's handler), else 0. */
int msr_store_core_cancel(msr_store_core_t *core, void *call);

/* Fails every held call with DEADLINE_EXCEEDED whose deadline is at or
 * before now (in a shared table: hands every call due to its kind's
 * handler, the user's too). */
void msr_store_core_tick(msr_store_core_t *core, uint64_t now);

/* The earliest deadline of a held call (in a shared table: of any), or
 * MSR_DEADLINE_NEVER. */
uint64_t msr_store_core_next_deadline(const msr_store_core_t *core);

/* Fails every store call the core holds with ABORTED and message why, and
 * empties the store (a new generation starts from nothing). */
void msr_store_core_reset(msr_store_core_t *core, const char *why);

/* The table the core holds its calls in (its own, or ops.held): its
 * bounds are set (msr_held_calls_limit) and its use read
 * (msr_held_usage) through it. Every held store call is charged to the
 * budget of held.h with the bytes it keeps: a get or barrier its name, a
 * fetch its indices twice (its request and the core's copy), an
 * allgather its contributions twice (its request and the store's copy,
 * which the store's own limits count as well). */
struct msr_held_calls *msr_store_core_held(msr_store_core_t *core);

/* The number of keys stored. */
size_t msr_store_core_keys(const msr_store_core_t *core);

/* The bytes of the ring of released barrier arrivals' ids (0 until one
 * is remembered, and always with ops.no_resends), for tests. */
size_t msr_store_core_released_bytes(const msr_store_core_t *core);

/* The stored keys, for the coordinator's state file to save: fn gets each
 * key and its value, in no order; both stay valid until the store
 * changes, and fn must not change it. */
void msr_store_core_foreach(const msr_store_core_t *core,
                            void (*fn)(const char *key, const msr_store_value_t *value, void *arg),
                            void *arg);

/* The value stored under key, or NULL; valid until the store changes. */
const msr_store_value_t *msr_store_core_value(const msr_store_core_t *core, const char *key);

/* Reading a saved store back, while the core holds no call: load_set
 * stores len bytes of data under key, load_delete removes key, load_clear
 * empties the store. What they load counts against the limits but is never
 * refused (a resumed store may already pass lowered limits: then only
 * removals and shrinking writes succeed), and they tell nobody (no
 * key_changed, no held call woken). load_set: MSR_ERR_INVALID_ARG for a
 * bad key, MSR_ERR_NO_MEMORY (the store unchanged). */
msr_status_t msr_store_core_load_set(msr_store_core_t *core, const char *key, const void *data,
                                     size_t len);
void msr_store_core_load_delete(msr_store_core_t *core, const char *key);
void msr_store_core_load_clear(msr_store_core_t *core);

#endif
