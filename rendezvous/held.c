/* Held calls (held.h): one record per call, one heap of deadlines, and
 * each kind's end handed to the handler its owner registered. */
#include "rendezvous/held.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/time.h"

void msr_held_calls_init(msr_held_calls_t *hc, const msr_held_io_t *io)
{
    memset(hc, 0, sizeof *hc);
    hc->io = *io;
}

void msr_held_calls_cleanup(msr_held_calls_t *hc)
{
    msr_heap_cleanup(&hc->timers);
}

void msr_held_calls_handle(msr_held_calls_t *hc, msr_held_kind_t kind,
                           const msr_held_handler_t *handler)
{
    hc->handlers[kind] = *handler;
}

/* A record of size bytes for call, neither armed nor listed. */
static msr_held_t *held_alloc(size_t size, msr_held_kind_t kind, void *call, void *owner)
{
    msr_held_t *h = msr_calloc(1, size);
    if (h == NULL)
        return NULL;
    msr_timer_init(&h->timer);
    h->kind = kind;
    h->call = call;
    h->owner = owner;
    h->wait_ms = -1;
    msr_list_init(&h->link);
    return h;
}

/* Puts h in list and call's slot: the call is held from here on. */
static msr_held_t *held_attach(msr_held_calls_t *hc, msr_held_t *h, msr_list_t *list)
{
    if (list)
        msr_list_push_back(list, &h->link);
    hc->io.set_data(hc->io.ctx, h->call, h);
    return h;
}

msr_held_t *msr_held_new(msr_held_calls_t *hc, size_t size, msr_held_kind_t kind, void *call,
                         void *owner, msr_list_t *list)
{
    msr_held_t *h = held_alloc(size, kind, call, owner);
    return h ? held_attach(hc, h, list) : NULL;
}

msr_held_t *msr_held_wait(msr_held_calls_t *hc, size_t size, msr_held_kind_t kind, void *call,
                          void *owner, msr_list_t *list, int64_t wait_ms)
{
    msr_held_t *h = held_alloc(size, kind, call, owner);
    if (h == NULL)
        return NULL;
    h->wait_ms = wait_ms;
    /* The wait ends at wait_ms or the latest time the user allows. */
    uint64_t deadline = wait_ms < 0 ? MSR_DEADLINE_NEVER : msr_deadline_in_ms(wait_ms);
    uint64_t latest = hc->io.deadline(hc->io.ctx, call);
    if (latest < deadline)
        deadline = latest;
    if (deadline != MSR_DEADLINE_NEVER &&
        msr_heap_push(&hc->timers, &h->timer, deadline) != MSR_OK) {
        msr_free(h);
        return NULL;
    }
    return held_attach(hc, h, list);
}

void msr_held_take(msr_held_calls_t *hc, msr_held_t *h)
{
    msr_heap_remove(&hc->timers, &h->timer);
    msr_list_remove(&h->link);
    hc->io.set_data(hc->io.ctx, h->call, NULL);
}

void msr_held_free(msr_held_calls_t *hc, msr_held_t *h)
{
    msr_held_take(hc, h);
    msr_free(h);
}

msr_held_t *msr_held_of(const msr_held_calls_t *hc, void *call)
{
    return hc->io.get_data(hc->io.ctx, call);
}

int msr_held_cancel(msr_held_calls_t *hc, void *call)
{
    msr_held_t *h = msr_held_of(hc, call);
    if (h == NULL)
        return 0;
    const msr_held_handler_t *k = &hc->handlers[h->kind];
    k->cancelled(k->ctx, h);
    return 1;
}

void msr_held_tick(msr_held_calls_t *hc, uint64_t now)
{
    msr_timer_t *t;
    while ((t = msr_heap_top(&hc->timers)) != NULL && t->deadline <= now) {
        msr_held_t *h = MSR_CONTAINER_OF(t, msr_held_t, timer);
        const msr_held_handler_t *k = &hc->handlers[h->kind];
        k->expired(k->ctx, h);
    }
}

uint64_t msr_held_next_deadline(const msr_held_calls_t *hc)
{
    msr_timer_t *t = msr_heap_top(&hc->timers);
    return t ? t->deadline : MSR_DEADLINE_NEVER;
}

void msr_held_fail(msr_held_calls_t *hc, void *call, msr_rpc_code_t code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hc->io.fail(hc->io.ctx, call, code, msg);
}
