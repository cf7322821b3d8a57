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
 * not apply (one would fail alone) go alone, each with its own ids. */
typedef struct add_merge add_merge_t;

typedef struct add_member {
    node_call_t head; /* head.call is NULL once the node gave up */
    add_merge_t *merge;
    uint64_t client_id, request_id;
    int64_t delta;
} add_member_t;

struct add_merge {
    msr_list_t link; /* in server->adds */
    msr_relay_server_t *server;
    msr_rpc_async_t async; /* the merged call upstream, once sent */
    int sent;
    int32_t generation;
    uint64_t deadline;
    size_t n, live, cap;
    add_member_t **members;
    char okey[300]; /* in server->open_adds while open ("": closed) */
    char key[];
};

static void add_free(add_merge_t *m)
{
    msr_list_remove(&m->link);
    for (size_t k = 0; k < m->n; k++)
        msr_free(m->members[k]);
    msr_free(m->members);
    msr_free(m);
}

static void add_close(add_merge_t *m)
{
    if (m->okey[0] != '\0')
        msr_map_remove(&m->server->open_adds, m->okey);
    m->okey[0] = '\0';
}

static add_merge_t *add_new(msr_relay_server_t *s, const Msr__AddRequest *req, const char *okey)
{
    size_t kl = strlen(req->key);
    add_merge_t *m = msr_calloc(1, sizeof *m + kl + 1);
    if (m == NULL)
        return NULL;
    m->server = s;
    m->generation = req->generation;
    memcpy(m->key, req->key, kl + 1);
    snprintf(m->okey, sizeof m->okey, "%s", okey);
    if (msr_map_put(&s->open_adds, m->okey, m, NULL) != MSR_OK) {
        msr_free(m);
        return NULL;
    }
    msr_list_push_back(&s->adds, &m->link);
    return m;
}

static add_merge_t *add_open(msr_relay_server_t *s, const Msr__AddRequest *req)
{
    char okey[300];
    if ((size_t)snprintf(okey, sizeof okey, "%d/%s", req->generation, req->key) >= sizeof okey)
        return NULL;
    add_merge_t *m = msr_map_get(&s->open_adds, okey);
    if (m != NULL && m->n == MSR_ADD_PARTS_MAX)
        add_close(m); /* full: sent as it is at the flush */
    if (m == NULL || m->okey[0] == '\0')
        m = add_new(s, req, okey);
    if (m == NULL || m->n < m->cap)
        return m;
    size_t cap = m->cap ? 2 * m->cap : 8;
    add_member_t **grown = msr_realloc(m->members, cap * sizeof *grown);
    if (grown == NULL)
        return NULL; /* an empty open merge is freed at the flush */
    m->members = grown;
    m->cap = cap;
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
    m->members[m->n++] = mb;
    m->live++;
    uint64_t dl = msr_rpc_call_deadline(call);
    m->deadline = dl > m->deadline ? dl : m->deadline;
    msr_rpc_call_set_data(call, mb);
    atomic_fetch_add(&s->add_counts[0], 1);
    atomic_fetch_add(&s->nforwards, 1);
    s->forwarded++;
    return 1;
}

/* A member the coordinator did not apply: sent alone with its own ids. */
static void add_alone(add_merge_t *m, add_member_t *mb)
{
    Msr__AddRequest r = MSR__ADD_REQUEST__INIT;
    r.generation = m->generation;
    r.key = m->key;
    r.delta = mb->delta;
    r.client_id = mb->client_id;
    r.request_id = mb->request_id;
    msr_relay_forward_alone(m->server, mb->head.call, MSR_RPC_ADD, &r.base);
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
    add_merge_t *m = MSR_CONTAINER_OF(a, add_merge_t, async);
    msr_relay_server_t *s = m->server;
    Msr__AddResponse *resp = NULL;
    if (a->status == MSR_OK)
        resp = (Msr__AddResponse *)msr_rpc_async_raw_unpack(a);
    for (size_t k = 0, part = 0; k < m->n; k++) {
        add_member_t *mb = m->members[k];
        if (mb->merge != NULL)
            continue; /* gave up before the call was sent: not in it */
        size_t i = part++;
        msr_rpc_call_t *call = mb->head.call;
        if (call == NULL)
            continue;
        atomic_fetch_sub(&s->nforwards, 1);
        msr_rpc_call_set_data(call, NULL);
        if (s->stopping && a->status == MSR_ERR_CANCELED)
            msr_rpc_call_fail(call, MSR_RPC_UNAVAILABLE, "%s is shutting down", s->me);
        else if (a->status != MSR_OK)
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
    add_free(m);
}

static void add_fail(add_merge_t *m, int code, const char *why)
{
    for (size_t k = 0; k < m->n; k++) {
        msr_rpc_call_t *call = m->members[k]->head.call;
        if (call == NULL)
            continue;
        atomic_fetch_sub(&m->server->nforwards, 1);
        msr_rpc_call_set_data(call, NULL);
        msr_rpc_call_fail(call, code, "%s", why);
    }
    add_free(m);
}

static void add_send(add_merge_t *m)
{
    add_close(m);
    size_t np = 0;
    Msr__AddPart *parts = msr_calloc(m->live ? m->live : 1, sizeof *parts);
    Msr__AddPart **pp = msr_calloc(m->live ? m->live : 1, sizeof *pp);
    for (size_t k = 0; parts && pp && k < m->n; k++) {
        add_member_t *mb = m->members[k];
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
    if (m->live == 0 || parts == NULL || pp == NULL) {
        msr_free(parts);
        msr_free(pp);
        if (m->live == 0)
            add_free(m);
        else
            add_fail(m, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
        return;
    }
    Msr__AddRequest r = MSR__ADD_REQUEST__INIT;
    r.generation = m->generation;
    r.key = m->key;
    r.n_parts = np;
    r.parts = pp;
    m->async.method = MSR_RPC_ADD;
    m->async.deadline = m->deadline;
    m->async.raw = 1;
    m->async.done = add_done;
    m->sent = 1;
    atomic_fetch_add(&m->server->add_counts[1], 1);
    msr_status_t st = msr_rpc_call_start(m->server->up, m->server->loop, &m->async, &r.base);
    msr_free(parts);
    msr_free(pp);
    if (st != MSR_OK)
        add_fail(m, MSR_RPC_UNAVAILABLE, "the relay cannot forward Add upstream");
}

void msr_relay_adds_flush(msr_relay_server_t *s)
{
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &s->adds)
    {
        add_merge_t *m = MSR_CONTAINER_OF(pos, add_merge_t, link);
        if (!m->sent)
            add_send(m);
    }
}

/* A merged caller gave up: left out when not sent yet; once sent, its add
 * stands (it may have been applied already) and its answer is dropped. */
void msr_relay_add_gave_up(msr_relay_server_t *s, node_call_t *nc)
{
    add_member_t *mb = (add_member_t *)nc;
    mb->head.call = NULL;
    atomic_fetch_sub(&s->nforwards, 1);
    if (mb->merge != NULL)
        mb->merge->live--;
}

void msr_relay_adds_stop(msr_relay_server_t *s)
{
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &s->adds)
    {
        add_merge_t *m = MSR_CONTAINER_OF(pos, add_merge_t, link);
        if (m->sent) {
            msr_rpc_async_cancel(&m->async);
        } else {
            add_close(m);
            add_fail(m, MSR_RPC_UNAVAILABLE, "the relay is shutting down");
        }
    }
}

void msr_relay_server_adds(const msr_relay_server_t *s, uint64_t *calls_p, uint64_t *merged_p)
{
    *calls_p = atomic_load(&s->add_counts[0]);
    *merged_p = atomic_load(&s->add_counts[1]);
}
