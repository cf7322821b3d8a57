/* The store's barriers and allgathers (store_core.h): calls held until
 * every participant has come, then answered together. */
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

/* Admits a new waited-on name into the store's usage, or refuses the call
 * with the limit it would pass. */
static int name_admit(msr_store_core_t *c, void *call, const char *what, const char *name,
                      uint64_t more_bytes)
{
    if (msr_store_limits_check_add(store_limits(c), &c->usage, what, name, 1,
                                   msr_store_entry_bytes(strlen(name), 0) + more_bytes) == MSR_OK)
        return 1;
    msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "%s", msr_err_msg());
    return 0;
}

void msr_store_barrier_unlist(msr_store_core_t *c, barrier_t *b)
{
    msr_map_remove(&c->barriers, b->name);
    msr_store_usage_remove(&c->usage, b->name, 0);
}

void msr_store_gather_unlist(msr_store_core_t *c, gather_t *g)
{
    msr_map_remove(&c->gathers, g->name);
    msr_store_usage_remove(&c->usage, g->name, 0);
    uint64_t held = g->bytes + gather_table(g->count);
    c->usage.bytes = c->usage.bytes >= held ? c->usage.bytes - held : 0;
}

/* Takes back the contributions call gave to g. */
void msr_store_gather_withdraw(msr_store_core_t *c, gather_t *g, void *call)
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

/* A withdrawal whose arrival has not come (it overtook it upstream):
 * remembered, with each part's ids, to apply when it comes; refused when
 * a part was released already, or without parts (a relay that sends no
 * ids: its arrival may have been released). */
static void withdraw_early(msr_store_core_t *c, void *call, const Msr__BarrierRequest *req)
{
    uint64_t sum = 0;
    int released = req->n_parts == 0 || req->merge_id == 0;
    for (size_t i = 0; i < req->n_parts; i++) {
        const Msr__BarrierPart *p = req->parts[i];
        sum += p->weight ? p->weight : 1;
        released |= p->client_id == 0 || p->request_id == 0 ||
                    msr_store_released_seen(c, p->client_id, p->request_id);
    }
    if (req->n_parts > MSR_BARRIER_PARTS_MAX) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "barrier '%.200s': a withdrawal of %zu parts (at most %d)", req->name,
                      req->n_parts, MSR_BARRIER_PARTS_MAX);
        return;
    }
    if (released || sum != req->withdraw) {
        msr_held_fail(c->held, call, MSR_RPC_FAILED_PRECONDITION,
                      "barrier '%.200s': no merged arrival %llu waits (released already)",
                      req->name, (unsigned long long)req->merge_id);
        return;
    }
    for (size_t i = 0; i < req->n_parts; i++) {
        const Msr__BarrierPart *p = req->parts[i];
        if (msr_store_withdrawn_note(c, req->merge_id, p->weight ? p->weight : 1, p->client_id,
                                     p->request_id) != 0) {
            msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
            return;
        }
    }
    Msr__BarrierResponse r = MSR__BARRIER_RESPONSE__INIT;
    reply(c, call, &r.base);
}

/* A relay takes back req->withdraw participants of its merged arrival
 * req->merge_id, still waiting (some of its callers gave up, as direct
 * callers' cancelled calls are taken back), or not come yet (remembered);
 * once the barrier released it, they stay counted, as a direct caller
 * giving up too late. */
static void barrier_withdraw(msr_store_core_t *c, void *call, const Msr__BarrierRequest *req)
{
    barrier_t *b = msr_map_get(&c->barriers, req->name);
    msr_list_t *pos, *tmp;
    waiter_t *w = NULL;
    if (b != NULL && req->merge_id != 0) {
        msr_list_for_each_safe(pos, tmp, &b->waiters)
        {
            if (w == NULL && WAITER_AT(pos)->merge_id == req->merge_id)
                w = WAITER_AT(pos);
        }
    }
    if (w == NULL) {
        withdraw_early(c, call, req);
        return;
    }
    if (req->withdraw >= w->weight) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "barrier '%.200s': %u participants taken back from an arrival of %u (cancel "
                      "its call to take back all)",
                      req->name, req->withdraw, w->weight);
        return;
    }
    w->weight -= req->withdraw;
    b->arrived -= req->withdraw;
    for (size_t i = 0; i < req->n_parts; i++) /* not released with it */
        msr_store_ids_drop(w->ids, w->nids, req->parts[i]->client_id, req->parts[i]->request_id);
    Msr__BarrierResponse r = MSR__BARRIER_RESPONSE__INIT;
    reply(c, call, &r.base);
}

/* The (client, request) id pairs of req's arrival: each part's of a
 * relay's merged arrival, else its own; NULL (*n_p 0) when it has none or
 * memory ran out (then not remembered: a resend counts again). */
static uint64_t *arrival_ids(const Msr__BarrierRequest *req, uint32_t *n_p)
{
    size_t n = req->n_parts ? req->n_parts : 1;
    uint64_t *ids = msr_calloc(2 * n, sizeof *ids);
    *n_p = 0;
    if (ids == NULL)
        return NULL;
    for (size_t i = 0; i < req->n_parts; i++) {
        ids[2 * i] = req->parts[i]->client_id;
        ids[2 * i + 1] = req->parts[i]->request_id;
    }
    if (req->n_parts == 0) {
        ids[0] = req->client_id;
        ids[1] = req->request_id;
    }
    *n_p = (uint32_t)n;
    return ids;
}

static void released_note_ids(msr_store_core_t *c, const uint64_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        msr_store_released_note(c, ids[2 * i], ids[2 * i + 1]);
}

/* Checks a relay's parts (MSR_BARRIER_PARTS_MAX at most, with its
 * merge_id, their weights adding up to the arrival's), and answers an
 * arrival the barrier released already: released again when sent alone;
 * a merged one with a released part resend, nothing counted (its relay
 * sends each part alone). 1 when answered here. */
static int arrival_answered(msr_store_core_t *c, void *call, const Msr__BarrierRequest *req,
                            uint32_t weight)
{
    Msr__BarrierResponse r = MSR__BARRIER_RESPONSE__INIT;
    if (req->n_parts == 0) {
        if (!msr_store_released_seen(c, req->client_id, req->request_id))
            return 0;
        reply(c, call, &r.base);
        return 1;
    }
    uint64_t sum = 0;
    int seen = 0;
    for (size_t i = 0; i < req->n_parts; i++) {
        sum += req->parts[i]->weight ? req->parts[i]->weight : 1;
        seen |= msr_store_released_seen(c, req->parts[i]->client_id, req->parts[i]->request_id);
    }
    if (req->n_parts > MSR_BARRIER_PARTS_MAX || req->merge_id == 0 || sum != weight) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "barrier '%.200s': %zu parts (at most %d, with a merge id) of weight %" PRIu64
                      " for an arrival of %u",
                      req->name, req->n_parts, MSR_BARRIER_PARTS_MAX, sum, weight);
        return 1;
    }
    if (!seen)
        return 0;
    r.resend = 1;
    reply(c, call, &r.base);
    return 1;
}

/* The barrier of req's name, made when new; NULL when the call was
 * refused. */
static barrier_t *barrier_get(msr_store_core_t *c, void *call, const Msr__BarrierRequest *req)
{
    barrier_t *b = msr_map_get(&c->barriers, req->name);
    if (b != NULL) {
        if (b->count == req->count)
            return b;
        msr_held_fail(
            c->held, call, MSR_RPC_INVALID_ARGUMENT,
            "barrier '%.200s': count %u differs from the %u given by earlier participants",
            req->name, req->count, b->count);
        return NULL;
    }
    if (!name_admit(c, call, "barrier", req->name, 0))
        return NULL;
    size_t nl = strlen(req->name);
    b = msr_calloc(1, sizeof *b + nl + 1);
    if (b == NULL || msr_map_put(&c->barriers, req->name, b, NULL) != MSR_OK) {
        msr_free(b);
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return NULL;
    }
    memcpy(b->name, req->name, nl + 1);
    b->count = req->count;
    msr_list_init(&b->waiters);
    msr_store_usage_put(&c->usage, b->name, 0, 0, 0);
    return b;
}

/* A barrier nobody waits on goes. */
static void barrier_drop_idle(msr_store_core_t *c, barrier_t *b)
{
    if (msr_list_empty(&b->waiters)) {
        msr_store_barrier_unlist(c, b);
        barrier_free(b);
    }
}

/* Everyone is here: release them all, each arrival's ids (this one's:
 * ids, n pairs, freed) noted as released, and forget the barrier. */
static void barrier_release(msr_store_core_t *c, barrier_t *b, void *call, uint64_t *ids,
                            uint32_t n)
{
    msr_store_barrier_unlist(c, b);
    Msr__BarrierResponse r = MSR__BARRIER_RESPONSE__INIT;
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &b->waiters)
    {
        waiter_t *w = WAITER_AT(pos);
        void *wcall = w->held.call;
        released_note_ids(c, w->ids, w->nids);
        waiter_free(c, w);
        reply(c, wcall, &r.base);
    }
    barrier_free(b);
    released_note_ids(c, ids, n);
    msr_free(ids);
    reply(c, call, &r.base);
}

/* An arrival of weight that would pass b's count: a caller alone is
 * refused; a relay's merged arrival is answered over with the parts that
 * fit, in order (admit), nothing counted: its relay sends those again and
 * refuses the rest. 1 when answered here. */
static int barrier_over(msr_store_core_t *c, barrier_t *b, void *call,
                        const Msr__BarrierRequest *req, uint32_t weight)
{
    uint32_t room = b->count - b->arrived;
    if (weight <= room)
        return 0;
    if (req->n_parts == 0) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "barrier '%.200s': %u more participants than its count of %u", req->name,
                      weight - room, b->count);
        barrier_drop_idle(c, b);
        return 1;
    }
    Msr__BarrierResponse r = MSR__BARRIER_RESPONSE__INIT;
    uint64_t sum = 0;
    r.over = 1;
    while (r.admit < req->n_parts) {
        const Msr__BarrierPart *p = req->parts[r.admit];
        sum += p->weight ? p->weight : 1;
        if (sum > room)
            break;
        r.admit++;
    }
    barrier_drop_idle(c, b);
    reply(c, call, &r.base);
    return 1;
}

/* Holds the arrival of weight (its ids: n pairs, kept) until the barrier
 * releases it. */
static void barrier_hold(msr_store_core_t *c, barrier_t *b, void *call,
                         const Msr__BarrierRequest *req, uint32_t weight, uint64_t *ids, uint32_t n)
{
    int64_t wait = req->wait_ms == UINT32_MAX ? -1 : (int64_t)req->wait_ms;
    waiter_t *w = waiter_new(c, call, MSR_HELD_BARRIER, b, &b->waiters, wait,
                             strlen(req->name) + 16 * (uint64_t)n);
    if (w == NULL) {
        msr_free(ids);
        b->arrived -= weight;
        barrier_drop_idle(c, b);
        waiter_refused(c, call);
        return;
    }
    w->weight = weight;
    w->merge_id = req->merge_id;
    w->ids = ids;
    w->nids = n;
}

void msr_store_do_barrier(msr_store_core_t *c, void *call, const Msr__BarrierRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "barrier", req->name))
        return;
    if (req->withdraw > 0) {
        barrier_withdraw(c, call, req);
        return;
    }
    uint32_t weight = req->weight ? req->weight : 1;
    uint32_t most = participants_max(c);
    if (req->count == 0 || req->count > most) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "barrier '%.200s': count %u is not in 1..%u (the job's ranks)", req->name,
                      req->count, most);
        return;
    }
    if (arrival_answered(c, call, req, weight))
        return;
    uint64_t gone = msr_store_withdrawn_peek(c, req->merge_id);
    if (gone >= weight) {
        msr_store_withdrawn_take(c, req->merge_id, NULL, 0);
        msr_held_fail(c->held, call, MSR_RPC_CANCELLED,
                      "barrier '%.200s': every participant of merged arrival %llu withdrew",
                      req->name, (unsigned long long)req->merge_id);
        return;
    }
    weight -= (uint32_t)gone;
    barrier_t *b = barrier_get(c, call, req);
    if (b == NULL || barrier_over(c, b, call, req, weight))
        return;
    uint32_t n;
    uint64_t *ids = arrival_ids(req, &n);
    msr_store_withdrawn_take(c, req->merge_id, ids, n);
    b->arrived += weight;
    if (b->arrived < b->count)
        barrier_hold(c, b, call, req, weight, ids, n);
    else
        barrier_release(c, b, call, ids, n);
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
        if (msr_store_limits_check_value(store_limits(c), "allgather", req->name, e->data.len) !=
            MSR_OK) {
            msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "%s", msr_err_msg());
            return 0;
        }
        bytes += e->data.len;
    }
    if (g == NULL)
        return name_admit(c, call, "allgather", req->name, bytes + gather_table(req->count));
    if (msr_store_limits_check_add(store_limits(c), &c->usage, "allgather", req->name, 0, bytes) !=
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

void msr_store_do_allgather(msr_store_core_t *c, void *call, const Msr__AllgatherRequest *req)
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
