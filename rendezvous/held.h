/* Held calls: a call answered later than it came (a get waiting for its
 * key, a barrier, an allgather, a fetch, a node's long-poll heartbeat, an
 * answer waiting for a save), written once for the store core and the
 * coordinator. A held call is one record, msr_held_t, that carries its kind;
 * the call's data slot points at it, so a call is found from its transport
 * and taken back when its client gives up. The calls of one server share
 * one table (msr_held_calls_t) and its one heap of deadlines, so a single
 * tick and a single next deadline cover them all.
 *
 * Every function must be called from the one thread (or under the one lock)
 * of the table's user. */
#ifndef MSR_RENDEZVOUS_HELD_H
#define MSR_RENDEZVOUS_HELD_H

#include <stddef.h>
#include <stdint.h>

#include "base/heap.h"
#include "base/list.h"
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
} msr_held_t;

/* How the table reaches its calls: ctx is passed back to each. set_data
 * and get_data keep one pointer per call (the transport's slot); deadline
 * is the latest time (msr_now_ns units) a call may be answered
 * (MSR_DEADLINE_NEVER when only its own wait bounds it); fail answers a
 * call with a status and a message. */
typedef struct msr_held_io {
    void *ctx;
    void (*set_data)(void *ctx, void *call, void *data);
    void *(*get_data)(void *ctx, void *call);
    uint64_t (*deadline)(void *ctx, void *call);
    void (*fail)(void *ctx, void *call, msr_rpc_code_t code, const char *message);
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
} msr_held_calls_t;

/* Starts an empty table answering through io (copied). Cannot fail. */
void msr_held_calls_init(msr_held_calls_t *hc, const msr_held_io_t *io);

/* Frees the table's own memory; the held calls belong to their owners,
 * who free (and answer or drop) them first. */
void msr_held_calls_cleanup(msr_held_calls_t *hc);

/* Registers who handles kind's held calls (copied); every kind a user
 * holds calls of must have one. */
void msr_held_calls_handle(msr_held_calls_t *hc, msr_held_kind_t kind,
                           const msr_held_handler_t *handler);

/* Holds call as a record of size bytes (at least sizeof(msr_held_t),
 * zeroed past the msr_held_t) with no deadline: the call's slot points at
 * it, owner is set and it is appended to list (when not NULL). NULL when
 * out of memory: then nothing changed. */
msr_held_t *msr_held_new(msr_held_calls_t *hc, size_t size, msr_held_kind_t kind, void *call,
                         void *owner, msr_list_t *list);

/* As msr_held_new, with a deadline: wait_ms from now (-1: none of its
 * own), or io.deadline's for the call if that comes first. */
msr_held_t *msr_held_wait(msr_held_calls_t *hc, size_t size, msr_held_kind_t kind, void *call,
                          void *owner, msr_list_t *list, int64_t wait_ms);

/* Takes a held call out of the table: its timer and list link are
 * dropped and its slot cleared; the record stays the caller's (msr_free).
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
