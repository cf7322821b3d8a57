/* rdzv_scale --relay: the nodes join through relays of F nodes each,
 * simulated here with the real relay code of rendezvous/relay.h, each
 * relay over a connection of its own; every node must end with a rank of
 * its own. With --relay_levels L > 1 the relays of the first level send
 * their batches to relay agents' servers (msr_relay_server_t, on this
 * process's loop) of F relays each, and so on up to level L, whose relays
 * alone call the coordinator. With --progress the nodes then send rounds
 * of Progress through the first level's relays. */
#include <stdio.h>
#include <stdlib.h>

#include "base/time.h"
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
    if (s->entry_method == MSR_RPC_PROGRESS)
        return;
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
    int ok = h != NULL && h->state == MSR__JOB_STATE__JOB_RUNNING && h->assignment != NULL &&
             h->assignment->machine_ranks == rdzv_machine_ranks(s);
    if (ok)
        s->node_rank[node] = h->assignment->node_rank;
    msr_rpc_message_free(h ? &h->base : NULL);
    if (!ok)
        sim_fail(s, "a relayed heartbeat", node, "not running after it");
}

/* The relays above the first level. Level l (1..levels) has count[l]
 * relays, relay j of level l serving ids j * F^l ...; level l's relay j
 * sends over up[l][j]: to level l + 1's server j / F, or for the top
 * level to the coordinator (the sim's channel j, not owned here). */
typedef struct upper {
    int levels;
    int count[MSR_RELAY_LEVELS_MAX + 1];
    msr_rpc_channel_t **up[MSR_RELAY_LEVELS_MAX + 1];
    msr_relay_server_t **srv[MSR_RELAY_LEVELS_MAX + 1]; /* levels 2..levels */
} upper_t;

int rdzv_relay_top(int nodes, int relay, int levels)
{
    int n = nodes;
    for (int l = 1; l <= levels; l++)
        n = (n + relay - 1) / relay;
    return n;
}

/* The subtree of relay j of level l: F^l nodes, or what is left. */
static uint32_t subtree_of(const sim_t *s, int l, int j)
{
    long long span = 1;
    for (int k = 0; k < l && span <= s->nodes; k++)
        span *= s->relay;
    long long left = s->nodes - (long long)j * span;
    return (uint32_t)(left < span ? left : span);
}

static void upper_flush(sim_t *s)
{
    upper_t *u = s->upper;
    for (int l = 2; l <= u->levels; l++)
        for (int j = 0; j < u->count[l]; j++)
            msr_relay_server_flush(u->srv[l][j]);
}

static void upper_free(sim_t *s, upper_t *u)
{
    for (int l = 2; l <= u->levels; l++) /* the lower levels first: they call the upper */
        for (int j = 0; u->srv[l] && j < u->count[l]; j++)
            msr_relay_server_destroy(u->srv[l][j]);
    for (int l = 1; l < u->levels; l++) {
        for (int j = 0; u->up[l] && j < u->count[l]; j++)
            msr_rpc_channel_destroy(u->up[l][j]);
        free(u->up[l]);
    }
    for (int l = 2; l <= u->levels; l++)
        free(u->srv[l]);
    free(u->up[u->levels]);
    s->after_poll = NULL;
    s->upper = NULL;
    free(u);
}

/* The levels above the first, served top-down; the channels up of every
 * level. NULL with s->err set when one cannot start. */
static upper_t *upper_start(sim_t *s)
{
    upper_t *u = calloc(1, sizeof *u);
    if (u == NULL)
        return NULL;
    u->levels = s->levels;
    u->count[0] = s->nodes;
    for (int l = 1; l <= u->levels; l++) {
        u->count[l] = (u->count[l - 1] + s->relay - 1) / s->relay;
        u->up[l] = calloc((size_t)u->count[l], sizeof *u->up[l]);
        u->srv[l] = l >= 2 ? calloc((size_t)u->count[l], sizeof *u->srv[l]) : NULL;
        if (u->up[l] == NULL || (l >= 2 && u->srv[l] == NULL))
            goto err;
    }
    for (int j = 0; j < u->count[u->levels]; j++)
        u->up[u->levels][j] = s->ch[j % s->nch];
    for (int l = u->levels; l >= 2; l--)
        for (int j = 0; j < u->count[l]; j++) {
            char rid[32], target[64];
            int port = 0;
            snprintf(rid, sizeof rid, "relay-%d-%d", l, j);
            if (msr_relay_server_create(s->loop, "127.0.0.1:0", RDZV_TOKEN, u->up[l][j], rid,
                                        subtree_of(s, l, j), &port, &u->srv[l][j]) != MSR_OK)
                goto err;
            snprintf(target, sizeof target, "127.0.0.1:%d", port);
            for (int c = j * s->relay; c < u->count[l - 1] && c < (j + 1) * s->relay; c++)
                if (msr_rpc_channel_create_own(target, RDZV_TOKEN, &u->up[l - 1][c]) != MSR_OK)
                    goto err;
        }
    s->upper = u;
    s->after_poll = upper_flush;
    return u;
err:
    snprintf(s->err, sizeof s->err, "cannot start the relays above the first level");
    s->failed = 1;
    for (int j = 0; u->up[u->levels] && j < u->count[u->levels]; j++)
        u->up[u->levels][j] = NULL; /* the sim's */
    upper_free(s, u);
    return NULL;
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

/* The first level's relays and the nodes' arguments, for relay_send. */
typedef struct relay_sink {
    msr_relay_t **relays;
    node_arg_t *args;
} relay_sink_t;

/* A node's Progress queued at its relay (rdzv_send_t). */
static int relay_send(sim_t *s, int node, const ProtobufCMessage *req, void *arg)
{
    relay_sink_t *k = arg;
    if (msr_relay_submit(k->relays[node / s->relay], MSR_RPC_PROGRESS, req, node_answered,
                         &k->args[node]) != MSR_OK)
        return -1;
    s->pending++;
    return 0;
}

/* --progress: s->progress rounds of every node's Progress, each relay's
 * share of a round sent as one batch (their own: no heartbeat is held
 * beside them), and the coordinator's CPU over them. */
static int relay_progress(sim_t *s, msr_relay_t **relays, node_arg_t *args)
{
    int nrel = (s->nodes + s->relay - 1) / s->relay;
    relay_sink_t sink = {relays, args};
    s->entry_method = MSR_RPC_PROGRESS;
    double cpu0 = rdzv_coord_cpu_ms(s);
    uint64_t t0 = msr_now_ns();
    for (int r = 0; r < s->progress; r++) {
        if (rdzv_progress_round(s, 19 + 20 * (int64_t)r, relay_send, &sink) != 0)
            return -1;
        for (int k = 0; k < nrel; k++)
            msr_relay_flush(relays[k]);
        if (rdzv_drain(s) != 0)
            return -1;
    }
    s->progress_ns = msr_now_ns() - t0;
    s->progress_cpu_ms = rdzv_coord_cpu_ms(s) - cpu0;
    rdzv_progress_line(s, (double)s->progress_ns / 1e6, s->progress_cpu_ms);
    return 0;
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
    upper_t *u = upper_start(s);
    if (relays == NULL || args == NULL || u == NULL)
        rc = -1;
    for (int n = 0; rc == 0 && n < s->nodes; n++)
        args[n] = (node_arg_t){s, n};
    for (int r = 0; rc == 0 && r < nrel; r++) {
        char rid[32];
        snprintf(rid, sizeof rid, "relay-%d", r);
        if (msr_relay_create(s->loop, u->up[1][r], rid, subtree_of(s, 1, r), &relays[r]) != MSR_OK)
            rc = -1;
    }
    if (rc == 0)
        rc = relay_round(s, relays, args, MSR_RPC_JOIN, rdzv_make_join);
    if (rc == 0)
        rc = relay_round(s, relays, args, MSR_RPC_HEARTBEAT, rdzv_make_heartbeat);
    if (rc == 0 && s->progress > 0)
        rc = relay_progress(s, relays, args);
    for (int r = 0; relays && r < nrel; r++)
        msr_relay_destroy(relays[r]);
    rdzv_drain(s); /* what a failure left in flight comes back cancelled */
    if (u != NULL) {
        for (int j = 0; j < u->count[u->levels]; j++)
            u->up[u->levels][j] = NULL; /* the sim's */
        upper_free(s, u);
    }
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
