/* Held calls: a call answered later than it came (a get waiting for its
 * key, a barrier, an allgather, a fetch, a node's long-poll heartbeat, an
 * answer waiting for a save), written once for the store core and the
 * coordinator. A held call is one record, msr_held_t, that carries its kind;
 * the call's data slot points at it, so a call is found from its transport
 * and taken back when its client gives up. The calls of one server share
 * one table (msr_held_calls_t) and its one heap of deadlines, so a single
 * tick and a single next deadline cover them all.
 *
 * The table is also the budget of held calls: each is charged one call
 * and the bytes it keeps (its record, what it copied from its request,
 * the request the transport keeps until the call is answered, and
 * MSR_HELD_CALL_OVERHEAD for the transport's own state) to its client
 * (the peer's address without the port) and to the table's total, when it
 * is held (msr_held_new, msr_held_wait), and refunded when it leaves the
 * table (msr_held_take, msr_held_free) however it ends: answered, expired,
 * cancelled or dropped at shutdown. A call that would pass a bound is not
 * held (see msr_held_limits_t).
 *
 * Every function must be called from the one thread (or under the one lock)
 * of the table's user. */
#ifndef MSR_RENDEZVOUS_HELD_H
#define MSR_RENDEZVOUS_HELD_H

#include <stddef.h>
#include <stdint.h>

#include "base/heap.h"
#include "base/list.h"
#include "base/map.h"
#include "msrun/base.h"
#include "rendezvous/rpc.h"

/* What a held call waits for, and so who answers it when its deadline
 * passes or its client gives up (the handler registered for the kind). */
typedef enum msr_held_kind {
    MSR_HELD_GET,       /* store: a get waiting for its key to be set */
    MSR_HELD_FETCH,     /* store: a fetch waiting for its entries, one missing key at a time */
    MSR_HELD_BARRIER,   /* store: a barrier waiting for its other participants */
    MSR_HELD_ALLGATHER, /* store: an allgather waiting for the other contributions */
    MSR_HELD_HEARTBEAT, /* coordinator: a node's heartbeat, answered when the job changes */
    MSR_HELD_ANSWER,    /* coordinator: an answer held until the changes it may tell of are
                         * saved (no deadline: the save releases it) */
    MSR_HELD_KINDS
} msr_held_kind_t;

/* The bounds of held calls, per client and in total (0: the default).
 * The defaults fit a 1,024-rank job on one host (one node's ranks share
 * one client address), each rank holding a few calls at once (a get, a
 * fetch, a barrier) beside its node's heartbeat, and a 100K-rank job's one
 * held call a rank in total; see docs/security.md. */
typedef struct msr_held_limits {
    uint64_t client_calls; /* held calls of one client */
    uint64_t client_bytes; /* bytes those calls keep */
    uint64_t calls;        /* held calls of every client */
    uint64_t bytes;        /* bytes those calls keep */
} msr_held_limits_t;

#define MSR_HELD_CLIENT_CALLS_DEFAULT 4096ull
#define MSR_HELD_CLIENT_BYTES_DEFAULT (64ull << 20) /* 64 MiB */
#define MSR_HELD_CALLS_DEFAULT        131072ull
#define MSR_HELD_BYTES_DEFAULT        (1ull << 30) /* 1 GiB */

/* What each held call is charged beyond the bytes its holder names: the
 * transport's state for an unanswered call (its record, its gRPC call). */
#define MSR_HELD_CALL_OVERHEAD 4096

/* What is held now, in the units of the bounds. */
typedef struct msr_held_usage {
    uint64_t calls;
    uint64_t bytes;
} msr_held_usage_t;

/* One held call. A kind that needs more keeps this as the first member of
 * a record of its own (msr_held_new's size) and gets there with
 * MSR_CONTAINER_OF. */
typedef struct msr_held {
    msr_held_kind_t kind;
    msr_timer_t timer; /* armed while the call has a deadline */
    void *call;        /* the transport's call */
    void *owner;       /* what it waits on (a node, a barrier, ...), the kind's to set */
    msr_list_t link;   /* in its owner's list of waiting calls, or alone */
    int64_t wait_ms;   /* the wait it asked for (-1: none), for the message at its deadline */
    struct msr_held_client *client; /* what it is charged to while in the table, or NULL */
    uint64_t charged;               /* the bytes charged */
} msr_held_t;

/* How the table reaches its calls: ctx is passed back to each. set_data
 * and get_data keep one pointer per call (the transport's slot); deadline
 * is the latest time (msr_now_ns units) a call may be answered
 * (MSR_DEADLINE_NEVER when only its own wait bounds it); fail answers a
 * call with a status and a message. peer (optional) names the call's peer
 * as the transport does ("ipv4:10.0.0.7:41234"): its address without the
 * port is the client the call is charged to (NULL: every call is one
 * client's, "local"). */
typedef struct msr_held_io {
    void *ctx;
    void (*set_data)(void *ctx, void *call, void *data);
    void *(*get_data)(void *ctx, void *call);
    uint64_t (*deadline)(void *ctx, void *call);
    void (*fail)(void *ctx, void *call, msr_rpc_code_t code, const char *message);
    const char *(*peer)(void *ctx, void *call);
} msr_held_io_t;

/* What a kind's owner does with one of its held calls: expired when its
 * deadline passed, cancelled when its client gave up (the transport says
 * so; the call must then not be answered). Each must take the call out of
 * the table (msr_held_free) before it returns. ctx is the handler's. */
typedef struct msr_held_handler {
    void *ctx;
    void (*expired)(void *ctx, msr_held_t *held);
    void (*cancelled)(void *ctx, msr_held_t *held);
} msr_held_handler_t;

typedef struct msr_held_calls {
    msr_held_io_t io;
    msr_held_handler_t handlers[MSR_HELD_KINDS];
    msr_heap_t timers; /* the deadlines of every timed held call */
    msr_held_limits_t limits;
    msr_held_usage_t total;
    msr_map_t clients; /* client address -> struct msr_held_client, while it holds calls */
    /* how many clients' bounds a client gets (NULL, or 0: one); see
     * msr_held_calls_shares */
    uint64_t (*shares)(void *ctx, const char *client);
    void *shares_ctx;
} msr_held_calls_t;

/* Starts an empty table answering through io (copied), with the default
 * bounds. Cannot fail. */
void msr_held_calls_init(msr_held_calls_t *hc, const msr_held_io_t *io);

/* Sets the bounds (copied; a 0 field: its default). Calls held already
 * stay; new ones are admitted against the new bounds. */
void msr_held_calls_limit(msr_held_calls_t *hc, const msr_held_limits_t *limits);

/* A client that stands for several (a relay's host, whose store calls
 * forward its nodes'): shares(ctx, client) gives how many clients' bounds
 * it has (its calls and bytes bounds multiplied by it; 0 or 1: one's).
 * The total bounds stay. Called as each call is charged. */
void msr_held_calls_shares(msr_held_calls_t *hc, uint64_t (*shares)(void *ctx, const char *client),
                           void *ctx);

/* limits with every 0 replaced by its default. */
msr_held_limits_t msr_held_limits_resolve(const msr_held_limits_t *limits);

/* What client (an address without the port, as in the messages) holds
 * now, or with client NULL what every client holds together. */
msr_held_usage_t msr_held_usage(const msr_held_calls_t *hc, const char *client);

/* Frees the table's own memory; the held calls belong to their owners,
 * who free (and answer or drop) them first (a client still charged then
 * is dropped with the table). */
void msr_held_calls_cleanup(msr_held_calls_t *hc);

/* Registers who handles kind's held calls (copied); every kind a user
 * holds calls of must have one. */
void msr_held_calls_handle(msr_held_calls_t *hc, msr_held_kind_t kind,
                           const msr_held_handler_t *handler);

/* Holds call as a record of size bytes (at least sizeof(msr_held_t),
 * zeroed past the msr_held_t) with no deadline: the call's slot points at
 * it, owner is set and it is appended to list (when not NULL). It is
 * charged one call and size + kept + MSR_HELD_CALL_OVERHEAD bytes (kept:
 * what the call keeps outside its record). NULL when that would pass a
 * bound (MSR_ERR_REFUSED; the error text, base/err.h, names the bound and
 * its value: "held calls of client 127.0.0.1: 4096 at most") or when out
 * of memory (MSR_ERR_NO_MEMORY): then nothing changed. An answer
 * (MSR_HELD_ANSWER) is charged but never refused: the change it tells of
 * is made already. */
msr_held_t *msr_held_new(msr_held_calls_t *hc, size_t size, uint64_t kept, msr_held_kind_t kind,
                         void *call, void *owner, msr_list_t *list);

/* As msr_held_new, with a deadline: wait_ms from now (-1: none of its
 * own), or io.deadline's for the call if that comes first. */
msr_held_t *msr_held_wait(msr_held_calls_t *hc, size_t size, uint64_t kept, msr_held_kind_t kind,
                          void *call, void *owner, msr_list_t *list, int64_t wait_ms);

/* Takes a held call out of the table: its timer and list link are
 * dropped, its charge refunded and its slot cleared; the record stays the
 * caller's (msr_free). Taking it twice does nothing more.
 * The caller answers the call afterwards if it must (an answer may end the
 * call and its slot with it). */
void msr_held_take(msr_held_calls_t *hc, msr_held_t *held);

/* msr_held_take, then frees the record (its kind's own parts are freed
 * first, by its owner). */
void msr_held_free(msr_held_calls_t *hc, msr_held_t *held);

/* The held call of call, or NULL when the table does not hold it. */
msr_held_t *msr_held_of(const msr_held_calls_t *hc, void *call);

/* Hands a held call whose client gave up to its kind's cancelled handler.
 * Returns 1 when call was held, else 0. */
int msr_held_cancel(msr_held_calls_t *hc, void *call);

/* Hands every held call whose deadline is at or before now to its kind's
 * expired handler, earliest first. */
void msr_held_tick(msr_held_calls_t *hc, uint64_t now);

/* The earliest deadline of a held call, or MSR_DEADLINE_NEVER. */
uint64_t msr_held_next_deadline(const msr_held_calls_t *hc);

/* Fails call with code and a message formatted from fmt (cut at 511
 * bytes): the one way both a refusal and the end of a held call are told.
 * A held call is freed (msr_held_free, by its owner) before it is
 * failed. */
void msr_held_fail(msr_held_calls_t *hc, void *call, msr_rpc_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
