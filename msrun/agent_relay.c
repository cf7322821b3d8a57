/* The agent's relays (issue 40): the link to this node's relay (--relay,
 * or its group's relay under --relays), opened with the loop's other
 * parts and closed once the node has left, and the store proxy's channel
 * to it (the node's progress); and, on a group's first node,
 * the group's relay served by a thread of this msrun (over TLS when the
 * node's options give it). Which calls go
 * through the link, and the fall back to the coordinator when one fails,
 * are agent_calls.c's (the relay's side is rendezvous/relay.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "launcher/agent_impl.h"
#include "launcher/relays.h"
#include "rendezvous/relay.h"

/* The group's relay, served by its own thread and gRPC loop. */
struct agent_relay_srv {
    pthread_t thread;
    atomic_int stop;
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *up;
    msr_relay_server_t *server;
    char id[24];
};

static void *relay_thread(void *arg)
{
    struct agent_relay_srv *r = arg;
    while (!atomic_load(&r->stop)) {
        msr_rpc_loop_poll(r->loop, msr_deadline_in_ms(5)); /* what arrives meanwhile: one batch */
        msr_relay_server_flush(r->server);
    }
    return NULL;
}

static void relay_srv_free(struct agent_relay_srv *r)
{
    msr_relay_server_destroy(r->server);
    msr_rpc_channel_destroy(r->up);
    if (r->loop)
        msr_rpc_loop_destroy(r->loop);
    msr_free(r);
}

/* Serves the group's relay: 0, or -1 when it cannot start, which is no
 * error: the group's nodes call the coordinator, as when it dies. */
static int relay_serve(agent_t *a, const msr_relays_plan_t *p)
{
    struct agent_relay_srv *r = msr_calloc(1, sizeof *r);
    if (r == NULL)
        return -1;
    snprintf(r->id, sizeof r->id, "%s", p->id);
    char bind[32];
    snprintf(bind, sizeof bind, "0.0.0.0:%d", p->port);
    int port = 0;
    int tls = msr_rpc_tls_enabled(&a->job.tls);
    msr_status_t st = msr_rpc_loop_create(&r->loop);
    if (st == MSR_OK)
        st = tls ? msr_rpc_channel_create_tls(a->coord.target, a->job.token, &a->job.tls, &r->up)
                 : msr_rpc_channel_create_own(a->coord.target, a->job.token, &r->up);
    if (st == MSR_OK)
        st = msr_relay_server_create_tls(r->loop, bind, a->job.token, tls ? &a->job.tls : NULL,
                                         r->up, p->id, (uint32_t)p->members, &port, &r->server);
    if (st == MSR_OK && pthread_create(&r->thread, NULL, relay_thread, r) != 0)
        st = MSR_ERR_NO_MEMORY;
    if (st != MSR_OK) {
        MSR_WARN("cannot serve %s on %s: %s; its nodes call the coordinator directly", p->id, bind,
                 msr_status_str(st));
        relay_srv_free(r);
        return -1;
    }
    MSR_INFO("serving %s for nodes %d to %d on port %d", p->id, p->leader,
             p->leader + p->members - 1, port);
    a->relay_srv = r;
    return 0;
}

static void relay_srv_stop(agent_t *a)
{
    struct agent_relay_srv *r = a->relay_srv;
    if (r == NULL)
        return;
    a->relay_srv = NULL;
    atomic_store(&r->stop, 1);
    pthread_join(r->thread, NULL);
    char sent[200];
    msr_relay_describe(msr_relay_server_relay(r->server), sent, sizeof sent);
    MSR_INFO("%s: stopping after relaying %s; forwarded %" PRIu64 " store calls", r->id, sent,
             msr_relay_server_forwarded(r->server));
    relay_srv_free(r);
}

int msr_agent_relay_open(agent_t *a)
{
    msr_relays_plan_t p;
    if (a->o->relay) {
        snprintf(a->relay_addr, sizeof a->relay_addr, "%s", a->o->relay);
        snprintf(a->relay_name, sizeof a->relay_name, "the relay");
    } else if (msr_relays_plan(a->o, &p) != 0) {
        return 1;
    } else if (p.k == 0) {
        MSR_DEBUG("no relay: %s", p.why);
        return 0;
    } else {
        if (p.serve && relay_serve(a, &p) != 0)
            return 0; /* this node calls the coordinator, as its group's do once they fail */
        snprintf(a->relay_addr, sizeof a->relay_addr, "%s", p.target);
        snprintf(a->relay_name, sizeof a->relay_name, "%s", p.id);
        MSR_INFO("node %d joins and heartbeats through %s at %s", a->o->node_rank, p.id, p.target);
    }
    /* the relay's certificate names its host (or --tls_server_name), not
     * the coordinator's */
    msr_rpc_tls_t tls = a->job.tls;
    tls.server_name = a->o->tls_server_name;
    if (msr_link_create(a->loop.base, a->relay_addr, a->job.token, &tls, &a->relay_link) !=
        MSR_OK) {
        fprintf(stderr, "msrun: error: cannot create the link to the relay %s: %s\n", a->relay_addr,
                msr_err_msg());
        return 1;
    }
    return 0;
}

int msr_agent_relay_proxy(agent_t *a)
{
    if (a->relay_link == NULL)
        return 0;
    a->reports.relay = a->relay_link;
    a->reports.relay_failed = &a->relay_failed;
    if (msr_proxy_set_relay(a->proxy, a->relay_addr, a->o->tls_server_name) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot create the proxy's channel to the relay %s: %s\n",
                a->relay_addr, msr_err_msg());
        return 1;
    }
    return 0;
}

void msr_agent_relay_close(agent_t *a)
{
    a->reports.relay = NULL;
    msr_link_destroy(a->relay_link);
    a->relay_link = NULL;
    relay_srv_stop(a);
}
