/* A relay agent's server: its nodes' Add calls on one key merged into one
 * call upstream (relay.h, docs/architecture.md "Relays"). */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/list.h"
#include "base/log.h"
#include "base/util.h"
#include "rendezvous/relay_server_impl.h"
#include "rendezvous/store_core.h"

/* The Add calls of the relay's nodes with the same generation and key that
 * arrive within one poll go upstream as one AddRequest carrying each
 * caller's (client id, request id, delta) in arrival order (parts); the
 * coordinator applies them in that order, each once, and answers each
 * part's value, which goes to its caller. A caller that gives up before
 * the call is sent is left out (not applied, as a direct call cancelled
 * before it left); once sent, it is applied (as a direct call that
 * reached the coordinator), its answer dropped. Parts the coordinator did
 * not apply (one would fail alone) go alone, each with its own ids; so do
 * all of them against an older coordinator that ignores parts (no values
 * come back, and the merged call's own delta, 0, changed nothing). */
typedef struct add_merge add_merge_t;

typedef struct add_member {
    node_call_t head; /* head.call is NULL once the node gave up */
    add_merge_t *merge;
    uint64_t client_id, request_id;
    int64_t delta;
} add_member_t;

struct add_merge {
    msr_relay_group_t g; /* in server->adds, open in server->open_adds */
    char key[];
};

static add_merge_t *add_new(msr_relay_server_t *s, const Msr__AddRequest *req, const char *okey)
{
    size_t kl = strlen(req->key);
    add_merge_t *m = msr_calloc(1, sizeof *m + kl + 1);
    if (m == NULL)
        return NULL;
    memcpy(m->key, req->key, kl + 1);
    if (msr_relay_group_init(&m->g, s, &s->open_adds, &s->adds, req->generation, okey) != MSR_OK) {
        msr_free(m);
        return NULL;
    }
    return m;
}

static add_merge_t *add_open(msr_relay_server_t *s, const Msr__AddRequest *req)
{
    char okey[300];
    if ((size_t)snprintf(okey, sizeof okey, "%d/%s", req->generation, req->key) >= sizeof okey)
        return NULL;
    add_merge_t *m = msr_map_get(&s->open_adds, okey);
    if (m != NULL && m->g.n == MSR_ADD_PARTS_MAX)
        msr_relay_group_close(&m->g); /* full: sent as it is at the flush */
    if (m == NULL || m->g.okey[0] == '\0')
        m = add_new(s, req, okey);
    if (m == NULL || !msr_relay_group_grow(&m->g))
        return NULL; /* an empty open merge is freed at the flush */
    return m;
}

int msr_relay_add_merge(msr_relay_server_t *s, msr_rpc_call_t *call, const Msr__AddRequest *req)
{
    if (req->n_parts != 0 || req->client_id == 0 || req->request_id == 0 || req->key == NULL)
        return 0;
    add_merge_t *m = add_open(s, req);
    add_member_t *mb = m ? msr_calloc(1, sizeof *mb) : NULL;
    if (mb == NULL)
        return 0;
    mb->head = (node_call_t){.call = call, .server = s, .method = MSR_RPC_ADD, .merged = 2};
    mb->merge = m;
    mb->client_id = req->client_id;
    mb->request_id = req->request_id;
    mb->delta = req->delta;
    atomic_fetch_add(&s->add_counts[0], 1);
    msr_relay_group_push(&m->g, &mb->head);
    return 1;
}

/* A member the coordinator did not apply: sent alone with its own ids. */
static void add_alone(add_merge_t *m, add_member_t *mb)
{
    Msr__AddRequest r = MSR__ADD_REQUEST__INIT;
    r.generation = m->g.generation;
    r.key = m->key;
    r.delta = mb->delta;
    r.client_id = mb->client_id;
    r.request_id = mb->request_id;
    msr_relay_forward_alone(m->g.server, mb->head.call, MSR_RPC_ADD, &r.base);
}

static void add_reply(msr_rpc_call_t *call, int64_t value)
{
    Msr__AddResponse r = MSR__ADD_RESPONSE__INIT;
    r.value = value;
    msr_rpc_call_reply(call, &r.base);
}

/* The merged call's answer: each caller still waiting its own value. */
static void add_done(msr_rpc_async_t *a)
{
    add_merge_t *m = MSR_CONTAINER_OF(a, add_merge_t, g.async);
    msr_relay_server_t *s = m->g.server;
    Msr__AddResponse *resp = NULL;
    if (a->status == MSR_OK)
        resp = (Msr__AddResponse *)msr_rpc_async_raw_unpack(a);
    for (size_t k = 0, part = 0; k < m->g.n; k++) {
        add_member_t *mb = (add_member_t *)m->g.members[k];
        if (mb->merge != NULL)
            continue; /* gave up before the call was sent: not in it */
        size_t i = part++;
        msr_rpc_call_t *call = msr_relay_group_answer(&m->g, &mb->head, a);
        if (call == NULL)
            continue;
        if (a->status != MSR_OK)
            msr_rpc_call_forward(call, a);
        else if (resp == NULL)
            msr_rpc_call_fail(call, MSR_RPC_INTERNAL, "%s: a merged Add's answer is bad", s->me);
        else if (i < resp->n_values)
            add_reply(call, resp->values[i]);
        else
            add_alone(m, mb);
    }
    if (resp != NULL)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    msr_rpc_async_cleanup(a);
    msr_relay_group_free(&m->g);
}

static void add_send(msr_relay_group_t *g)
{
    add_merge_t *m = (add_merge_t *)g;
    msr_relay_group_close(g);
    size_t np = 0;
    Msr__AddPart *parts = msr_calloc(g->live ? g->live : 1, sizeof *parts);
    Msr__AddPart **pp = msr_calloc(g->live ? g->live : 1, sizeof *pp);
    for (size_t k = 0; parts && pp && k < g->n; k++) {
        add_member_t *mb = (add_member_t *)g->members[k];
        if (mb->head.call == NULL)
            continue;     /* gave up before it was sent: not applied */
        mb->merge = NULL; /* marks it sent (add_done counts its part) */
        msr__add_part__init(&parts[np]);
        parts[np].client_id = mb->client_id;
        parts[np].request_id = mb->request_id;
        parts[np].delta = mb->delta;
        pp[np] = &parts[np];
        np++;
    }
    if (g->live == 0 || parts == NULL || pp == NULL) {
        msr_free(parts);
        msr_free(pp);
        if (g->live == 0)
            msr_relay_group_free(g);
        else
            msr_relay_group_fail(g, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
        return;
    }
    Msr__AddRequest r = MSR__ADD_REQUEST__INIT;
    r.generation = g->generation;
    r.key = m->key;
    /* no delta of its own: an older coordinator, which knows no parts,
     * applies nothing and answers no values, so each part goes alone */
    r.delta = 0;
    r.n_parts = np;
    r.parts = pp;
    msr_status_t st =
        msr_relay_group_start(g, MSR_RPC_ADD, add_done, &g->server->add_counts[1], &r.base);
    msr_free(parts);
    msr_free(pp);
    if (st != MSR_OK)
        msr_relay_group_fail(g, MSR_RPC_UNAVAILABLE, "the relay cannot forward Add upstream");
}

void msr_relay_adds_flush(msr_relay_server_t *s)
{
    msr_relay_groups_flush(&s->adds, add_send);
}

/* A merged caller gave up: left out when not sent yet; once sent, its add
 * stands (it may have been applied already) and its answer is dropped. */
void msr_relay_add_gave_up(msr_relay_server_t *s, node_call_t *nc)
{
    add_member_t *mb = (add_member_t *)nc;
    msr_relay_group_gave_up(s, nc, mb->merge != NULL ? &mb->merge->g : NULL);
}

void msr_relay_adds_stop(msr_relay_server_t *s)
{
    msr_relay_groups_stop(&s->adds);
}

void msr_relay_server_adds(const msr_relay_server_t *s, uint64_t *calls_p, uint64_t *merged_p)
{
    *calls_p = atomic_load(&s->add_counts[0]);
    *merged_p = atomic_load(&s->add_counts[1]);
}
