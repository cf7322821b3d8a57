/* Held calls (held.h): one record per call, one heap of deadlines, each
 * kind's end handed to the handler its owner registered, and the budget
 * every held call is charged to. */
#include "rendezvous/held.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/time.h"

/* A client holding calls: in the table's map of clients while it holds
 * one, gone with its last. */
typedef struct msr_held_client {
    msr_held_usage_t use;
    char host[]; /* as in the map */
} msr_held_client_t;

msr_held_limits_t msr_held_limits_resolve(const msr_held_limits_t *limits)
{
    msr_held_limits_t l = {0, 0, 0, 0};
    if (limits != NULL)
        l = *limits;
    if (l.client_calls == 0)
        l.client_calls = MSR_HELD_CLIENT_CALLS_DEFAULT;
    if (l.client_bytes == 0)
        l.client_bytes = MSR_HELD_CLIENT_BYTES_DEFAULT;
    if (l.calls == 0)
        l.calls = MSR_HELD_CALLS_DEFAULT;
    if (l.bytes == 0)
        l.bytes = MSR_HELD_BYTES_DEFAULT;
    return l;
}

void msr_held_calls_init(msr_held_calls_t *hc, const msr_held_io_t *io)
{
    memset(hc, 0, sizeof *hc);
    hc->io = *io;
    hc->limits = msr_held_limits_resolve(NULL);
}

void msr_held_calls_limit(msr_held_calls_t *hc, const msr_held_limits_t *limits)
{
    hc->limits = msr_held_limits_resolve(limits);
}

void msr_held_calls_shares(msr_held_calls_t *hc, uint64_t (*shares)(void *ctx, const char *client),
                           void *ctx)
{
    hc->shares = shares;
    hc->shares_ctx = ctx;
}

static void client_free(void *v)
{
    msr_free(v);
}

void msr_held_calls_cleanup(msr_held_calls_t *hc)
{
    msr_heap_cleanup(&hc->timers);
    msr_map_cleanup(&hc->clients, client_free);
}

/* The client a call is charged to: its peer's host. */
static void call_client(const msr_held_calls_t *hc, void *call, char *out, size_t outlen)
{
    const char *peer = hc->io.peer ? hc->io.peer(hc->io.ctx, call) : NULL;
    if (peer == NULL || peer[0] == '\0')
        snprintf(out, outlen, "local");
    else
        msr_rpc_peer_host(peer, out, outlen);
}

msr_held_usage_t msr_held_usage(const msr_held_calls_t *hc, const char *client)
{
    msr_held_usage_t none = {0, 0};
    if (client == NULL)
        return hc->total;
    const msr_held_client_t *cl = msr_map_get(&hc->clients, client);
    return cl ? cl->use : none;
}

/* Whether one more call keeping bytes fits client's bounds (cl NULL: a
 * client holding nothing) and the total's; else MSR_ERR_REFUSED with the
 * bound passed as the error text. */
static msr_status_t budget_check(const msr_held_calls_t *hc, const char *host,
                                 const msr_held_client_t *cl, uint64_t bytes)
{
    const msr_held_limits_t *l = &hc->limits;
    msr_held_usage_t use = cl ? cl->use : (msr_held_usage_t){0, 0};
    uint64_t n = hc->shares ? hc->shares(hc->shares_ctx, host) : 1;
    n = n ? n : 1;
    /* saturating: a bound times its shares past 2^64 is no bound */
    uint64_t calls_max = l->client_calls > UINT64_MAX / n ? UINT64_MAX : l->client_calls * n;
    uint64_t bytes_max = l->client_bytes > UINT64_MAX / n ? UINT64_MAX : l->client_bytes * n;
    if (use.calls + 1 > calls_max)
        return msr_err(MSR_ERR_REFUSED, "held calls of client %s: %" PRIu64 " at most%s", host,
                       calls_max,
                       n > 1 ? " (a relay's host: the bound per client times its nodes + 1)" : "");
    if (use.bytes + bytes > bytes_max)
        return msr_err(MSR_ERR_REFUSED,
                       "held bytes of client %s: %" PRIu64 " at most (%" PRIu64
                       " held, this call keeps %" PRIu64 ")",
                       host, bytes_max, use.bytes, bytes);
    if (hc->total.calls + 1 > l->calls)
        return msr_err(MSR_ERR_REFUSED, "held calls in total: %" PRIu64 " at most", l->calls);
    if (hc->total.bytes + bytes > l->bytes)
        return msr_err(MSR_ERR_REFUSED,
                       "held bytes in total: %" PRIu64 " at most (%" PRIu64
                       " held, this call keeps %" PRIu64 ")",
                       l->bytes, hc->total.bytes, bytes);
    return MSR_OK;
}

/* Charges h (not yet charged) one call and bytes, to its call's client and
 * the total; MSR_ERR_REFUSED past a bound (an answer never is),
 * MSR_ERR_NO_MEMORY. On failure nothing is charged. */
static msr_status_t budget_charge(msr_held_calls_t *hc, msr_held_t *h, uint64_t bytes)
{
    char host[128];
    call_client(hc, h->call, host, sizeof host);
    msr_held_client_t *cl = msr_map_get(&hc->clients, host);
    if (h->kind != MSR_HELD_ANSWER) {
        msr_status_t st = budget_check(hc, host, cl, bytes);
        if (st != MSR_OK)
            return st;
    }
    if (cl == NULL) {
        size_t hl = strlen(host);
        cl = msr_calloc(1, sizeof *cl + hl + 1);
        if (cl == NULL || msr_map_put(&hc->clients, host, cl, NULL) != MSR_OK) {
            msr_free(cl);
            return msr_err(MSR_ERR_NO_MEMORY, "coordinator out of memory");
        }
        memcpy(cl->host, host, hl + 1);
    }
    cl->use.calls++;
    cl->use.bytes += bytes;
    hc->total.calls++;
    hc->total.bytes += bytes;
    h->client = cl;
    h->charged = bytes;
    return MSR_OK;
}

/* Gives h's charge back; a client holding nothing more is forgotten. */
static void budget_refund(msr_held_calls_t *hc, msr_held_t *h)
{
    msr_held_client_t *cl = h->client;
    if (cl == NULL)
        return;
    cl->use.calls--;
    cl->use.bytes -= h->charged;
    hc->total.calls--;
    hc->total.bytes -= h->charged;
    h->client = NULL;
    h->charged = 0;
    if (cl->use.calls == 0) {
        msr_map_remove(&hc->clients, cl->host);
        client_free(cl);
    }
}

void msr_held_calls_handle(msr_held_calls_t *hc, msr_held_kind_t kind,
                           const msr_held_handler_t *handler)
{
    hc->handlers[kind] = *handler;
}

/* A record of size bytes for call, charged with what it keeps (kept
 * beyond the record), neither armed nor listed; NULL with the error text
 * set when refused or out of memory. */
static msr_held_t *held_alloc(msr_held_calls_t *hc, size_t size, uint64_t kept,
                              msr_held_kind_t kind, void *call, void *owner)
{
    msr_held_t *h = msr_calloc(1, size);
    if (h == NULL) {
        msr_err(MSR_ERR_NO_MEMORY, "coordinator out of memory");
        return NULL;
    }
    msr_timer_init(&h->timer);
    h->kind = kind;
    h->call = call;
    h->owner = owner;
    h->wait_ms = -1;
    msr_list_init(&h->link);
    if (budget_charge(hc, h, (uint64_t)size + kept + MSR_HELD_CALL_OVERHEAD) != MSR_OK) {
        msr_free(h);
        return NULL;
    }
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

msr_held_t *msr_held_new(msr_held_calls_t *hc, size_t size, uint64_t kept, msr_held_kind_t kind,
                         void *call, void *owner, msr_list_t *list)
{
    msr_held_t *h = held_alloc(hc, size, kept, kind, call, owner);
    return h ? held_attach(hc, h, list) : NULL;
}

msr_held_t *msr_held_wait(msr_held_calls_t *hc, size_t size, uint64_t kept, msr_held_kind_t kind,
                          void *call, void *owner, msr_list_t *list, int64_t wait_ms)
{
    msr_held_t *h = held_alloc(hc, size, kept, kind, call, owner);
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
        budget_refund(hc, h);
        msr_free(h);
        msr_err(MSR_ERR_NO_MEMORY, "coordinator out of memory");
        return NULL;
    }
    return held_attach(hc, h, list);
}

void msr_held_take(msr_held_calls_t *hc, msr_held_t *h)
{
    msr_heap_remove(&hc->timers, &h->timer);
    msr_list_remove(&h->link);
    budget_refund(hc, h);
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
