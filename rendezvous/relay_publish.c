/* A relay agent's server: its nodes' Publish calls of one name merged into
 * one call upstream (relay.h, docs/architecture.md "Relays"). */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/list.h"
#include "base/log.h"
#include "base/util.h"
#include "rendezvous/relay_server_impl.h"

/* The Publish calls of the relay's nodes with the same generation and name
 * that arrive within one poll go upstream as one PublishRequest holding
 * every caller's entries, in arrival order, up to MSR_RELAY_PUBLISH_BYTES
 * packed (a call that would pass it starts another; one larger alone goes
 * alone). Each entry is a Set, so the merged call writes what the callers'
 * calls would have, and a write again of the same values changes nothing:
 * answered OK, every caller hears OK (and its entries are kept for the
 * subtree's fetches); answered otherwise, every caller still waiting sends
 * its own call alone and hears its own answer, as a direct caller would.
 * A caller that gives up before the merged call is sent is left out (as a
 * direct call cancelled before it left); once sent, its entries stand and
 * only its answer is dropped. */
typedef struct pub_merge pub_merge_t;

typedef struct pub_member {
    node_call_t head;   /* head.call is NULL once the node gave up */
    pub_merge_t *merge; /* NULL once the merged call was sent */
    size_t len;         /* its request, packed: */
    uint8_t packed[];
} pub_member_t;

struct pub_merge {
    msr_relay_group_t g; /* in server->publishes, open in server->open_publishes */
    size_t bytes;        /* its members' requests packed, together */
    char name[];
};

static pub_merge_t *pub_new(msr_relay_server_t *s, const Msr__PublishRequest *req, const char *okey)
{
    size_t nl = strlen(req->name);
    pub_merge_t *m = msr_calloc(1, sizeof *m + nl + 1);
    if (m == NULL)
        return NULL;
    memcpy(m->name, req->name, nl + 1);
    if (msr_relay_group_init(&m->g, s, &s->open_publishes, &s->publishes, req->generation, okey) !=
        MSR_OK) {
        msr_free(m);
        return NULL;
    }
    return m;
}

/* The open merge this call of len bytes joins, with room for it. */
static pub_merge_t *pub_open(msr_relay_server_t *s, const Msr__PublishRequest *req, size_t len)
{
    char okey[300];
    if ((size_t)snprintf(okey, sizeof okey, "%d/%s", req->generation, req->name) >= sizeof okey)
        return NULL;
    pub_merge_t *m = msr_map_get(&s->open_publishes, okey);
    if (m != NULL && m->bytes + len > MSR_RELAY_PUBLISH_BYTES)
        msr_relay_group_close(&m->g); /* full: sent as it is at the flush */
    if (m == NULL || m->g.okey[0] == '\0')
        m = pub_new(s, req, okey);
    if (m == NULL || !msr_relay_group_grow(&m->g))
        return NULL; /* an empty open merge is freed at the flush */
    return m;
}

int msr_relay_publish_merge(msr_relay_server_t *s, msr_rpc_call_t *call,
                            const Msr__PublishRequest *req)
{
    if (req->name == NULL || req->n_entries == 0 || req->local_count != 0)
        return 0;
    size_t len = protobuf_c_message_get_packed_size(&req->base);
    if (len > MSR_RELAY_PUBLISH_BYTES)
        return 0;
    pub_merge_t *m = pub_open(s, req, len);
    pub_member_t *mb = m ? msr_calloc(1, sizeof *mb + len) : NULL;
    if (mb == NULL)
        return 0;
    mb->head = (node_call_t){.call = call, .server = s, .method = MSR_RPC_PUBLISH, .merged = 3};
    mb->merge = m;
    mb->len = len;
    protobuf_c_message_pack(&req->base, mb->packed);
    m->bytes += len;
    atomic_fetch_add(&s->publish_counts[0], 1);
    msr_relay_group_push(&m->g, &mb->head);
    return 1;
}

static Msr__PublishRequest *member_request(const pub_member_t *mb)
{
    return msr__publish_request__unpack(NULL, mb->len, mb->packed);
}

/* The merged call's answer: OK to each caller still waiting, or each of
 * them sent alone. */
static void pub_done(msr_rpc_async_t *a)
{
    pub_merge_t *m = MSR_CONTAINER_OF(a, pub_merge_t, g.async);
    msr_relay_server_t *s = m->g.server;
    for (size_t k = 0; k < m->g.n; k++) {
        pub_member_t *mb = (pub_member_t *)m->g.members[k];
        if (mb->merge != NULL)
            continue; /* gave up before the call was sent: not in it */
        Msr__PublishRequest *r = NULL;
        if (a->status == MSR_OK && !s->stopping && (r = member_request(mb)) != NULL)
            msr_relay_fetch_published(s, r); /* before its node hears it */
        msr_rpc_call_t *call = msr_relay_group_answer(&m->g, &mb->head, a);
        if (call != NULL) {
            if (a->status == MSR_OK) {
                Msr__PublishResponse ok = MSR__PUBLISH_RESPONSE__INIT;
                msr_rpc_call_reply(call, &ok.base);
            } else if (r != NULL || (r = member_request(mb)) != NULL) {
                msr_relay_forward_alone(s, call, MSR_RPC_PUBLISH, &r->base);
            } else {
                msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
            }
        }
        if (r != NULL)
            msr__publish_request__free_unpacked(r, NULL);
    }
    msr_rpc_async_cleanup(a);
    msr_relay_group_free(&m->g);
}

static void pub_send(msr_relay_group_t *g)
{
    pub_merge_t *m = (pub_merge_t *)g;
    msr_relay_group_close(g);
    size_t live = g->live ? g->live : 1, nr = 0, ne = 0;
    Msr__PublishRequest **reqs = msr_calloc(live, sizeof *reqs);
    int ok = reqs != NULL;
    for (size_t k = 0; ok && k < g->n; k++) {
        pub_member_t *mb = (pub_member_t *)g->members[k];
        if (mb->head.call == NULL)
            continue; /* gave up before it was sent: not applied */
        if ((reqs[nr] = member_request(mb)) == NULL) {
            ok = 0;
            break;
        }
        ne += reqs[nr++]->n_entries;
    }
    Msr__Contribution **entries = ok ? msr_calloc(ne ? ne : 1, sizeof *entries) : NULL;
    if (g->live == 0 || entries == NULL) {
        for (size_t i = 0; i < nr; i++)
            msr__publish_request__free_unpacked(reqs[i], NULL);
        msr_free(reqs);
        if (g->live == 0)
            msr_relay_group_free(g);
        else
            msr_relay_group_fail(g, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
        return;
    }
    size_t at = 0;
    for (size_t i = 0; i < nr; i++)
        for (size_t e = 0; e < reqs[i]->n_entries; e++)
            entries[at++] = reqs[i]->entries[e];
    for (size_t k = 0; k < g->n; k++) {
        pub_member_t *mb = (pub_member_t *)g->members[k];
        if (mb->head.call != NULL)
            mb->merge = NULL; /* marks it sent */
    }
    Msr__PublishRequest r = MSR__PUBLISH_REQUEST__INIT;
    r.generation = g->generation;
    r.name = m->name;
    r.n_entries = ne;
    r.entries = entries;
    msr_status_t st =
        msr_relay_group_start(g, MSR_RPC_PUBLISH, pub_done, &g->server->publish_counts[1], &r.base);
    for (size_t i = 0; i < nr; i++)
        msr__publish_request__free_unpacked(reqs[i], NULL);
    msr_free(reqs);
    msr_free(entries);
    if (st != MSR_OK)
        msr_relay_group_fail(g, MSR_RPC_UNAVAILABLE, "the relay cannot forward Publish upstream");
}

void msr_relay_publishes_flush(msr_relay_server_t *s)
{
    msr_relay_groups_flush(&s->publishes, pub_send);
}

/* A merged caller gave up: left out when not sent yet; once sent, its
 * entries stand and its answer is dropped. */
void msr_relay_publish_gave_up(msr_relay_server_t *s, node_call_t *nc)
{
    pub_member_t *mb = (pub_member_t *)nc;
    msr_relay_group_gave_up(s, nc, mb->merge != NULL ? &mb->merge->g : NULL);
}

void msr_relay_publishes_stop(msr_relay_server_t *s)
{
    msr_relay_groups_stop(&s->publishes);
}

void msr_relay_server_publishes(const msr_relay_server_t *s, uint64_t *calls_p, uint64_t *merged_p)
{
    *calls_p = atomic_load(&s->publish_counts[0]);
    *merged_p = atomic_load(&s->publish_counts[1]);
}
