/* A relay agent's server: a group of its nodes' calls merged into one call
 * upstream, what merged Barriers (relay_merge.c) and merged Adds
 * (relay_add.c) share (relay_server_impl.h). */
#include <stdio.h>

#include "base/alloc.h"
#include "base/list.h"
#include "base/util.h"
#include "rendezvous/relay_server_impl.h"

msr_status_t msr_relay_group_init(msr_relay_group_t *g, msr_relay_server_t *s, msr_map_t *open,
                                  msr_list_t *list, int32_t generation, const char *okey)
{
    g->server = s;
    g->open = open;
    g->generation = generation;
    snprintf(g->okey, sizeof g->okey, "%s", okey);
    msr_status_t st = msr_map_put(open, g->okey, g, NULL);
    if (st == MSR_OK)
        msr_list_push_back(list, &g->link);
    return st;
}

void msr_relay_group_close(msr_relay_group_t *g)
{
    if (g->okey[0] != '\0')
        msr_map_remove(g->open, g->okey);
    g->okey[0] = '\0';
}

void msr_relay_group_free(msr_relay_group_t *g)
{
    msr_list_remove(&g->link);
    for (size_t k = 0; k < g->n; k++)
        msr_free(g->members[k]);
    msr_free(g->members);
    msr_free(g);
}

int msr_relay_group_grow(msr_relay_group_t *g)
{
    if (g->n < g->cap)
        return 1;
    size_t cap = g->cap ? 2 * g->cap : 8;
    node_call_t **grown = msr_realloc(g->members, cap * sizeof *grown);
    if (grown == NULL)
        return 0; /* an empty open group is freed at the flush */
    g->members = grown;
    g->cap = cap;
    return 1;
}

void msr_relay_group_push(msr_relay_group_t *g, node_call_t *nc)
{
    g->members[g->n++] = nc;
    g->live++;
    uint64_t dl = msr_rpc_call_deadline(nc->call);
    g->deadline = dl > g->deadline ? dl : g->deadline;
    msr_rpc_call_set_data(nc->call, nc);
    atomic_fetch_add(&g->server->nforwards, 1);
    g->server->forwarded++;
}

msr_rpc_call_t *msr_relay_group_answer(msr_relay_group_t *g, node_call_t *nc,
                                       const msr_rpc_async_t *a)
{
    msr_rpc_call_t *call = nc->call;
    if (call == NULL)
        return NULL;
    msr_relay_server_t *s = g->server;
    atomic_fetch_sub(&s->nforwards, 1);
    msr_rpc_call_set_data(call, NULL);
    if (s->stopping && a->status == MSR_ERR_CANCELED) {
        msr_rpc_call_fail(call, MSR_RPC_UNAVAILABLE, "%s is shutting down", s->me);
        return NULL;
    }
    return call;
}

void msr_relay_group_fail(msr_relay_group_t *g, int code, const char *why)
{
    for (size_t k = 0; k < g->n; k++) {
        msr_rpc_call_t *call = g->members[k]->call;
        if (call == NULL)
            continue;
        atomic_fetch_sub(&g->server->nforwards, 1);
        msr_rpc_call_set_data(call, NULL);
        msr_rpc_call_fail(call, code, "%s", why);
    }
    msr_relay_group_free(g);
}

void msr_relay_group_gave_up(msr_relay_server_t *s, node_call_t *nc, msr_relay_group_t *unsent)
{
    nc->call = NULL;
    atomic_fetch_sub(&s->nforwards, 1);
    if (unsent != NULL)
        unsent->live--;
}

msr_status_t msr_relay_group_start(msr_relay_group_t *g, msr_rpc_method_t method,
                                   void (*done)(msr_rpc_async_t *), _Atomic uint64_t *nsent,
                                   const ProtobufCMessage *req)
{
    g->async.method = method;
    g->async.deadline = g->deadline;
    g->async.raw = 1;
    g->async.done = done;
    g->sent = 1;
    atomic_fetch_add(nsent, 1);
    return msr_rpc_call_start(g->server->up, g->server->loop, &g->async, req);
}

void msr_relay_groups_flush(msr_list_t *list, void (*send)(msr_relay_group_t *))
{
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, list)
    {
        msr_relay_group_t *g = MSR_CONTAINER_OF(pos, msr_relay_group_t, link);
        if (!g->sent)
            send(g);
    }
}

void msr_relay_groups_stop(msr_list_t *list)
{
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, list)
    {
        msr_relay_group_t *g = MSR_CONTAINER_OF(pos, msr_relay_group_t, link);
        if (g->sent) {
            msr_rpc_async_cancel(&g->async);
        } else {
            msr_relay_group_close(g);
            msr_relay_group_fail(g, MSR_RPC_UNAVAILABLE, "the relay is shutting down");
        }
    }
}
