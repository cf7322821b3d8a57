/* rdzv_scale --relay: the nodes join through relays of F nodes each,
 * simulated here with the real relay code of rendezvous/relay.h, each
 * relay over a connection of its own; every node must end with a rank of
 * its own. */
#include <stdio.h>
#include <stdlib.h>

#include "rdzv_scale_impl.h"
#include "rendezvous/relay.h"

/* A simulated node, as a relayed call's argument. */
typedef struct node_arg {
    sim_t *sim;
    int node;
} node_arg_t;

static void sim_fail(sim_t *s, const char *what, int node, const char *why)
{
    if (!s->failed)
        snprintf(s->err, sizeof s->err, "%s of node %d: %s", what, node, why);
    s->failed = 1;
}

/* A node's relayed call answered (rendezvous/relay.h). */
static void node_answered(void *arg, int code, const char *message, const uint8_t *resp, size_t len)
{
    node_arg_t *na = arg;
    sim_t *s = na->sim;
    int node = na->node;
    s->pending--;
    if (code != 0) {
        sim_fail(s, "a relayed call", node, message);
        return;
    }
    if (s->entry_method == MSR_RPC_JOIN) {
        Msr__JoinResponse *j =
            (Msr__JoinResponse *)msr_rpc_response_unpack(MSR_RPC_JOIN, resp, len);
        if (j == NULL) {
            sim_fail(s, "a relayed join", node, "the answer does not unpack");
            return;
        }
        snprintf(s->ids[node], sizeof s->ids[0], "%s", j->node_id);
        msr_rpc_message_free(&j->base);
        return;
    }
    Msr__HeartbeatResponse *h =
        (Msr__HeartbeatResponse *)msr_rpc_response_unpack(MSR_RPC_HEARTBEAT, resp, len);
    int ok = h != NULL && h->state == MSR__JOB_STATE__JOB_RUNNING && h->assignment != NULL;
    if (ok)
        s->node_rank[node] = h->assignment->node_rank;
    msr_rpc_message_free(h ? &h->base : NULL);
    if (!ok)
        sim_fail(s, "a relayed heartbeat", node, "not running after it");
}

/* One round through the relays: every node's call of method m (made by
 * make) queued at its relay, every relay's queue sent as one batch, and
 * every answer awaited. */
static int relay_round(sim_t *s, msr_relay_t **relays, node_arg_t *args, msr_rpc_method_t m,
                       const ProtobufCMessage *(*make)(sim_t *s, int node, void *space))
{
    int nrel = (s->nodes + s->relay - 1) / s->relay;
    s->entry_method = m;
    for (int n = 0; n < s->nodes; n++) {
        union {
            Msr__JoinRequest j;
            Msr__HeartbeatRequest h;
        } space;
        char host[32];
        const ProtobufCMessage *req = make(s, n, &space);
        if (m == MSR_RPC_JOIN) {
            snprintf(host, sizeof host, "10.%d.%d.%d", n >> 16, (n >> 8) & 255, n & 255);
            space.j.host = host;
        }
        if (msr_relay_submit(relays[n / s->relay], m, req, node_answered, &args[n]) != MSR_OK)
            return -1;
        s->pending++;
    }
    for (int r = 0; r < nrel; r++)
        msr_relay_flush(relays[r]);
    return rdzv_drain(s);
}

/* Relay mode: every relay sends its nodes' joins as one batch, then their
 * ready heartbeats as one batch (held until the job forms), through the
 * relay code of rendezvous/relay.h; every node must then have a distinct
 * rank of 0 .. nodes - 1. */
int rdzv_relay_join(sim_t *s)
{
    int nrel = (s->nodes + s->relay - 1) / s->relay, rc = 0;
    msr_relay_t **relays = calloc((size_t)nrel, sizeof *relays);
    node_arg_t *args = calloc((size_t)s->nodes, sizeof *args);
    if (relays == NULL || args == NULL)
        rc = -1;
    for (int n = 0; rc == 0 && n < s->nodes; n++)
        args[n] = (node_arg_t){s, n};
    for (int r = 0; rc == 0 && r < nrel; r++) {
        char rid[32];
        snprintf(rid, sizeof rid, "relay-%d", r);
        if (msr_relay_create(s->loop, s->ch[r], rid, (uint32_t)s->relay, &relays[r]) != MSR_OK)
            rc = -1;
    }
    if (rc == 0)
        rc = relay_round(s, relays, args, MSR_RPC_JOIN, rdzv_make_join);
    if (rc == 0)
        rc = relay_round(s, relays, args, MSR_RPC_HEARTBEAT, rdzv_make_heartbeat);
    for (int r = 0; relays && r < nrel; r++)
        msr_relay_destroy(relays[r]);
    rdzv_drain(s); /* what a failure left in flight comes back cancelled */
    free(relays);
    free(args);
    if (rc != 0)
        return -1;
    char *seen = calloc((size_t)s->nodes, 1);
    int bad = seen == NULL;
    for (int n = 0; !bad && n < s->nodes; n++) {
        int k = s->node_rank[n];
        bad = k < 0 || k >= s->nodes || seen[k];
        if (!bad)
            seen[k] = 1;
    }
    free(seen);
    if (bad)
        sim_fail(s, "the ranks", 0, "not every node has a rank of its own");
    return bad ? -1 : 0;
}
