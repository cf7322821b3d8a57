/* A relay agent's server: its nodes' Barrier calls merged into one arrival
 * upstream (relay.h, docs/architecture.md "Relays"). */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/list.h"
#include "base/log.h"
#include "base/time.h"
#include "base/util.h"
#include "rendezvous/relay_server_impl.h"
#include "rendezvous/store_core.h"

/* ---- barriers merged ---- */

/* The Barrier calls of the relay's nodes with the same generation, name,
 * count and wait that arrive within one poll go upstream as one arrival of
 * their weights together (BarrierRequest.merge_id), and its answer goes to
 * each caller. A caller that gives up is taken back upstream as a direct
 * caller's cancelled call is (BarrierRequest.withdraw, with its part: the
 * coordinator applies it whichever comes first; the whole arrival
 * cancelled once none is left); once the barrier released it, it stays
 * counted, as a direct caller giving up too late. Each caller's ids go in
 * its part (BarrierRequest.parts): answered resend (a part released
 * before, sent again after a relay died) each goes alone; answered over
 * (past the count) the parts that fit go again, the rest are refused. */
typedef struct merge merge_t;

typedef struct merged {
    node_call_t head; /* head.call is NULL once the node gave up */
    merge_t *merge;
    uint32_t weight;
    uint64_t client_id, request_id; /* the caller's (0: none) */
    size_t part;                    /* its place in the arrival sent + 1 (0: not in it) */
} merged_t;

struct merge {
    msr_relay_group_t g;             /* in server->merges, open in server->open */
    uint32_t count, wait_ms, weight; /* weight: its callers' still waiting */
    uint64_t merge_id;
    char name[];
};

/* A withdrawal in flight (its answer is not needed: taken back, or the
 * barrier released the arrival already). */
typedef struct withdraw {
    msr_rpc_async_t async;
    msr_list_t link;
    msr_relay_server_t *server;
} withdraw_t;

static merge_t *merge_new(msr_relay_server_t *s, const Msr__BarrierRequest *req, const char *key)
{
    size_t nl = strlen(req->name);
    merge_t *m = msr_calloc(1, sizeof *m + nl + 1);
    if (m == NULL)
        return NULL;
    m->count = req->count;
    m->wait_ms = req->wait_ms;
    memcpy(m->name, req->name, nl + 1);
    do
        msr_random_bytes(&m->merge_id, sizeof m->merge_id);
    while (m->merge_id == 0);
    if (msr_relay_group_init(&m->g, s, &s->open, &s->merges, req->generation, key) != MSR_OK) {
        msr_free(m);
        return NULL;
    }
    return m;
}

/* Adds a node's Barrier to the open merge of its kind: 1, or 0 when it
 * must be forwarded alone (a relay's merged call, a name too long to key,
 * out of memory). */
int msr_relay_merge_add(msr_relay_server_t *s, msr_rpc_call_t *call, const Msr__BarrierRequest *req)
{
    uint32_t w = req->weight ? req->weight : 1;
    char key[320];
    if (req->merge_id != 0 || req->withdraw != 0 || req->name == NULL || w > req->count ||
        (size_t)snprintf(key, sizeof key, "%d/%u/%u/%s", req->generation, req->count, req->wait_ms,
                         req->name) >= sizeof key)
        return 0;
    merge_t *m = msr_map_get(&s->open, key);
    /* full: sent as it is; the count's excess is refused upstream */
    if (m != NULL && ((uint64_t)m->weight + w > m->count || m->g.n == MSR_BARRIER_PARTS_MAX))
        msr_relay_group_close(&m->g);
    if (m == NULL || m->g.okey[0] == '\0')
        m = merge_new(s, req, key);
    if (m == NULL || !msr_relay_group_grow(&m->g))
        return 0; /* an empty open merge is freed at the flush */
    merged_t *mb = msr_calloc(1, sizeof *mb);
    if (mb == NULL)
        return 0;
    mb->head = (node_call_t){.call = call, .server = s, .method = MSR_RPC_BARRIER, .merged = 1};
    mb->merge = m;
    mb->weight = w;
    mb->client_id = req->client_id;
    mb->request_id = req->request_id;
    m->weight += w;
    atomic_fetch_add(&s->merge_counts[0], 1);
    msr_relay_group_push(&m->g, &mb->head);
    return 1;
}

/* A caller of an arrival the coordinator did not count (a part of it was
 * released before: sent again after its relay died): sent alone with its
 * own ids, so that each hears released or waits as a direct caller. */
static void merged_alone(merge_t *m, merged_t *mb, msr_rpc_call_t *call)
{
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.generation = m->g.generation;
    r.name = m->name;
    r.count = m->count;
    r.weight = mb->weight;
    r.wait_ms = m->wait_ms;
    r.client_id = mb->client_id;
    r.request_id = mb->request_id;
    msr_relay_forward_alone(m->g.server, call, MSR_RPC_BARRIER, &r.base);
}

static void merge_send(msr_relay_group_t *g);

/* A merge of the callers of m that fit the barrier's count (the first
 * admit parts), to send again as a new arrival (a merge id of its own: a
 * withdrawal of the first may still come); NULL when out of memory. */
static merge_t *merge_again(const merge_t *m)
{
    char okey[64];
    snprintf(okey, sizeof okey, "again/%llu", (unsigned long long)m->merge_id);
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.generation = m->g.generation;
    r.name = (char *)m->name;
    r.count = m->count;
    r.wait_ms = m->wait_ms;
    return merge_new(m->g.server, &r, okey);
}

/* A caller of an arrival past the barrier's count: sent again in again
 * when among the parts that fit (admit), else refused, told why. */
static void merged_over(merge_t *m, merged_t *mb, msr_rpc_call_t *call, merge_t *again,
                        uint32_t admit)
{
    merged_t *nb = NULL;
    if (mb->part > admit) {
        msr_rpc_call_fail(call, MSR_RPC_INVALID_ARGUMENT,
                          "barrier '%.200s': %u more participants than its count of %u (those "
                          "before them in %s's merged arrival were admitted)",
                          m->name, mb->weight, m->count, m->g.server->me);
        return;
    }
    if (again != NULL && msr_relay_group_grow(&again->g))
        nb = msr_calloc(1, sizeof *nb);
    if (nb == NULL) {
        if (m->g.server->stopping)
            msr_rpc_call_fail(call, MSR_RPC_UNAVAILABLE, "%s is shutting down", m->g.server->me);
        else
            msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
        return;
    }
    *nb = (merged_t){.head = mb->head,
                     .merge = again,
                     .weight = mb->weight,
                     .client_id = mb->client_id,
                     .request_id = mb->request_id};
    nb->head.call = call;
    again->weight += nb->weight;
    msr_relay_group_push(&again->g, &nb->head);
}

/* The arrival's answer, to each caller still waiting. */
static void merge_done(msr_rpc_async_t *a)
{
    merge_t *m = MSR_CONTAINER_OF(a, merge_t, g.async);
    Msr__BarrierResponse *resp = NULL;
    merge_t *again = NULL;
    if (a->status == MSR_OK)
        resp = (Msr__BarrierResponse *)msr_rpc_async_raw_unpack(a);
    if (resp != NULL && resp->over && resp->admit > 0 && !m->g.server->stopping)
        again = merge_again(m);
    for (size_t k = 0; k < m->g.n; k++) {
        msr_rpc_call_t *call = msr_relay_group_answer(&m->g, m->g.members[k], a);
        if (call == NULL)
            continue;
        if (resp != NULL && resp->over)
            merged_over(m, (merged_t *)m->g.members[k], call, again, resp->admit);
        else if (resp != NULL && resp->resend)
            merged_alone(m, (merged_t *)m->g.members[k], call);
        else
            msr_rpc_call_forward(call, a);
    }
    if (again != NULL)
        merge_send(&again->g);
    if (resp != NULL)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    msr_rpc_async_cleanup(a);
    msr_relay_group_free(&m->g);
}

/* The parts of a merge's callers still waiting, in order, in one block
 * (*block_p, to free); NULL when out of memory. */
static Msr__BarrierPart **merge_parts(merge_t *m, size_t *n_p, void **block_p)
{
    size_t np = 0;
    Msr__BarrierPart *parts = msr_calloc(m->g.live, sizeof *parts + sizeof(Msr__BarrierPart *));
    *block_p = parts;
    if (parts == NULL)
        return NULL;
    Msr__BarrierPart **pp = (Msr__BarrierPart **)(parts + m->g.live);
    for (size_t k = 0; k < m->g.n && np < m->g.live; k++) {
        merged_t *mb = (merged_t *)m->g.members[k];
        if (mb->head.call == NULL)
            continue; /* gave up before it was sent */
        mb->part = np + 1;
        msr__barrier_part__init(&parts[np]);
        parts[np].client_id = mb->client_id;
        parts[np].request_id = mb->request_id;
        parts[np].weight = mb->weight;
        pp[np] = &parts[np];
        np++;
    }
    *n_p = np;
    return pp;
}

static void merge_send(msr_relay_group_t *g)
{
    merge_t *m = (merge_t *)g;
    msr_relay_group_close(g);
    if (g->live == 0) {
        msr_relay_group_free(g);
        return;
    }
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.generation = g->generation;
    r.name = m->name;
    r.count = m->count;
    r.weight = m->weight;
    r.wait_ms = m->wait_ms;
    r.merge_id = m->merge_id;
    void *block;
    r.parts = merge_parts(m, &r.n_parts, &block);
    if (r.parts == NULL) {
        msr_relay_group_fail(g, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
        return;
    }
    msr_status_t st =
        msr_relay_group_start(g, MSR_RPC_BARRIER, merge_done, &g->server->merge_counts[1], &r.base);
    msr_free(block);
    if (st != MSR_OK)
        msr_relay_group_fail(g, MSR_RPC_UNAVAILABLE, "the relay cannot forward Barrier upstream");
}

void msr_relay_merges_flush(msr_relay_server_t *s)
{
    msr_relay_groups_flush(&s->merges, merge_send);
    msr_relay_adds_flush(s);
    msr_relay_publishes_flush(s);
}

static void withdraw_done(msr_rpc_async_t *a)
{
    withdraw_t *w = MSR_CONTAINER_OF(a, withdraw_t, async);
    atomic_fetch_add(&w->server->merge_counts[2], 1);
    msr_list_remove(&w->link);
    msr_rpc_async_cleanup(a);
    msr_free(w);
}

/* A merged caller gave up: taken back from its arrival, as a direct
 * caller's cancelled call is. */
void msr_relay_merged_gave_up(msr_relay_server_t *s, node_call_t *nc)
{
    if (nc->merged == 2) {
        msr_relay_add_gave_up(s, nc);
        return;
    }
    if (nc->merged == 3) {
        msr_relay_publish_gave_up(s, nc);
        return;
    }
    merged_t *mb = (merged_t *)nc;
    merge_t *m = mb->merge;
    mb->head.call = NULL;
    atomic_fetch_sub(&s->nforwards, 1);
    m->g.live--;
    m->weight -= mb->weight;
    if (!m->g.sent)
        return; /* sent with the others' weight, or not at all */
    if (m->g.live == 0) {
        msr_rpc_async_cancel(&m->g.async); /* the whole arrival taken back */
        return;
    }
    withdraw_t *w = msr_calloc(1, sizeof *w);
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.generation = m->g.generation;
    r.name = m->name;
    r.count = m->count;
    r.merge_id = m->merge_id;
    r.withdraw = mb->weight;
    /* its part: a withdrawal that overtakes the arrival is applied when
     * the arrival comes */
    Msr__BarrierPart part = MSR__BARRIER_PART__INIT, *pp = &part;
    part.client_id = mb->client_id;
    part.request_id = mb->request_id;
    part.weight = mb->weight;
    r.n_parts = 1;
    r.parts = &pp;
    if (w != NULL) {
        w->async.method = MSR_RPC_BARRIER;
        w->async.deadline = msr_deadline_in_ms(10000);
        w->async.done = withdraw_done;
        w->server = s;
        msr_list_push_back(&s->withdraws, &w->link);
    }
    if (w == NULL || msr_rpc_call_start(s->up, s->loop, &w->async, &r.base) != MSR_OK) {
        MSR_WARN("%s: cannot take back a merged caller of barrier '%.200s' upstream", s->me,
                 m->name);
        if (w != NULL)
            msr_list_remove(&w->link);
        msr_free(w);
    }
}

/* The server stops: open merges answered UNAVAILABLE, those in flight and
 * the withdrawals cancelled (merge_done answers their callers). */
void msr_relay_merges_stop(msr_relay_server_t *s)
{
    msr_relay_groups_stop(&s->merges);
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &s->withdraws)
    {
        msr_rpc_async_cancel(&MSR_CONTAINER_OF(pos, withdraw_t, link)->async);
    }
    msr_relay_adds_stop(s);
    msr_relay_publishes_stop(s);
}

void msr_relay_server_merges(const msr_relay_server_t *s, uint64_t *calls_p, uint64_t *arrivals_p,
                             uint64_t *withdrawals_p)
{
    *calls_p = atomic_load(&s->merge_counts[0]);
    *arrivals_p = atomic_load(&s->merge_counts[1]);
    *withdrawals_p = atomic_load(&s->merge_counts[2]);
}
