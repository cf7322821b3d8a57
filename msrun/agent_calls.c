/* The agent's calls to the coordinator: Join, the Heartbeat (with the
 * output lines of the ranks the coordinator asked for) and Leave, through
 * the node's relay while it answers. Their
 * answers are decoded into events for the node's machine. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "cluster/coord.h"
#include "launcher/agent_impl.h"

/* The most worker states one heartbeat carries (a node with more sends
 * its first ones). */
#define MSR_HEARTBEAT_WORKERS_MAX 256

/* The link joins and heartbeats go on: the relay's (--relay) until one
 * of its calls fails, then the coordinator's. */
static msr_link_t *membership_link(const agent_t *a)
{
    return a->relay_link && !a->relay_failed ? a->relay_link : a->link;
}

/* A call through the relay failed for want of it (the relay is gone or
 * cannot reach the coordinator): from now on the node calls the
 * coordinator itself, which accepts a node that joined through a relay.
 * Returns 1 when this call's failure was the relay's. */
static int relay_check(agent_t *a, const msr_rpc_async_t *as, const char *next)
{
    if (a->relay_link == NULL || a->relay_failed || as->status == MSR_OK ||
        as->status == MSR_ERR_NOT_FOUND || as->status == MSR_ERR_REFUSED)
        return 0;
    a->relay_failed = 1;
    MSR_WARN("no answer from %s at %s (%s): %s the coordinator at %s directly", a->relay_name,
             a->relay_addr, as->err, next, a->coord.target);
    return 1;
}

static void join_done(msr_rpc_async_t *as, void *arg)
{
    agent_t *a = arg;
    uint64_t now = msr_now_ns();
    relay_check(a, as, "joining");
    if (as->status == MSR_OK) {
        const Msr__JoinResponse *r = (const Msr__JoinResponse *)as->resp;
        msr_agent_prof_mark(a, MSR_LPROF_JOIN, a->prof.joining);
        if (!a->node.finished) {
            snprintf(a->node_id, sizeof a->node_id, "%s", r->node_id);
            MSR_DEBUG("joined job %s at %s as node %s", a->job.id, a->coord.target, a->node_id);
        }
        msr_node_on_joined(&a->node, now, r->generation, r->max_restarts);
    } else if (as->status == MSR_ERR_REFUSED) { /* full: a lost node may not be reaped yet */
        msr_node_on_join_failed(&a->node, now, MSR_NODE_JOIN_FULL, as->err);
    } else if (as->status == MSR_ERR_UNREACHABLE || as->status == MSR_ERR_TIMEOUT ||
               as->status == MSR_ERR_CANCELED) {
        msr_node_on_join_failed(&a->node, now, MSR_NODE_JOIN_AWAY, as->err);
    } else {
        msr_node_on_join_failed(&a->node, now, MSR_NODE_JOIN_REFUSED, as->err);
    }
    msr_agent_run_node(a);
}

void msr_agent_join_send(agent_t *a)
{
    Msr__JoinRequest req = MSR__JOIN_REQUEST__INIT;
    req.protocol_version = MSR_PROTOCOL_VERSION;
    req.job_id = a->job.id;
    req.host = a->coord.host;
    req.pid = (int)getpid();
    req.local_worker_num = a->o->local_worker_num;
    req.worker_num = a->o->worker_num;
    req.node_rank = a->o->node_rank;
    req.min_nodes = a->o->min_nodes;
    req.max_nodes = a->o->max_nodes;
    req.max_restarts = a->o->max_restarts;
    req.free_port = a->free_port;
    req.machine = msr_host_id(); /* the coordinator counts the ranks each machine runs */
    if (a->prof.joining == 0)
        a->prof.joining = msr_now_ns();
    int64_t left = msr_node_join_left_ms(&a->node, msr_now_ns());
    msr_status_t st = msr_link_call(membership_link(a), MSR_RPC_JOIN, &req.base,
                                    left < 5000 ? left : 5000, 1, join_done, a);
    if (st != MSR_OK)
        msr_node_on_send_failed(&a->node, msr_now_ns(), msr_status_str(st));
}

/* The lines a node keeps are what the coordinator keeps of them. */
_Static_assert(MSR_OUT_TAIL_LINES == MSR_OUTPUT_LINES && MSR_OUT_TAIL_BYTES == MSR_OUTPUT_BYTES &&
                   MSR_OUT_TAIL_LINE_MAX == MSR_OUTPUT_LINE_MAX,
               "a rank's output lines: the node's bounds and the coordinator's differ");

/* The coordinator asked for these ranks' last output lines (someone
 * opened them on the dashboard): they go up with the next heartbeat,
 * which follows this answer at once. Ranks not of this node are ignored. */
static void tails_wanted(agent_t *a, const int32_t *ranks, size_t n)
{
    for (size_t k = 0; k < n; k++)
        for (int i = 0; i < a->local.count; i++)
            if (a->local.tails[i].rank == ranks[k] ||
                (a->local.tails[i].rank < 0 && a->node.rank_offset + i == ranks[k]))
                a->local.tails[i].want_rank = ranks[k];
}

/* The asked ranks' lines as RankOutput messages, into out (the caller's
 * [nworkers] arrays; *buf_p a copy of the lines, freed by the caller);
 * clears the asks. Returns how many. */
static size_t tails_take(agent_t *a, Msr__RankOutput *out, Msr__RankOutput **outp,
                         ProtobufCBinaryData *lines, char **buf_p)
{
    size_t n = 0, bytes = 0;
    for (int i = 0; i < a->local.count; i++)
        if (a->local.tails[i].want_rank >= 0)
            bytes += a->local.tails[i].lines.bytes;
    *buf_p = NULL;
    if (bytes > 0 && (*buf_p = msr_malloc(bytes)) == NULL)
        return 0; /* the asks stay, for the next heartbeat */
    char *at = *buf_p;
    ProtobufCBinaryData *l = lines;
    for (int i = 0; i < a->local.count; i++) {
        agent_tail_t *t = &a->local.tails[i];
        if (t->want_rank < 0)
            continue;
        msr__rank_output__init(&out[n]);
        out[n].rank = t->want_rank;
        out[n].time = msr_wall_time();
        out[n].total_lines = t->lines.total;
        out[n].lines = l;
        for (int j = 0; j < t->lines.count; j++) {
            l->data = (uint8_t *)at;
            l->len = msr_out_tail_get(&t->lines, j, at);
            at += l->len;
            l++;
        }
        out[n].n_lines = (size_t)t->lines.count;
        outp[n] = &out[n];
        n++;
        t->want_rank = -1;
    }
    return n;
}

static void hb_done(msr_rpc_async_t *as, void *arg)
{
    agent_t *a = arg;
    uint64_t now = msr_now_ns();
    if (relay_check(a, as, "sending heartbeats to")) {
        msr_node_on_heartbeat_rerouted(&a->node, now);
        msr_agent_run_node(a);
        return;
    }
    if (as->status != MSR_OK) {
        msr_node_on_heartbeat_failed(&a->node, now, as->status == MSR_ERR_NOT_FOUND, as->err);
        msr_agent_run_node(a);
        return;
    }
    const Msr__HeartbeatResponse *r = (const Msr__HeartbeatResponse *)as->resp;
    msr_node_update_t u = {
        .generation = r->generation,
        .state = (msr_job_state_t)r->state,
        .restart_count = r->restart_count,
        .max_restarts = r->max_restarts,
        .message = r->message,
        .joined_nodes = r->joined_nodes,
        .expected_nodes = r->expected_nodes,
        .form_left_ms = r->form_left_ms,
        .form_timeout_ms = r->form_timeout_ms,
    };
    msr_failure_t f = {0};
    if (r->failure) {
        msr_failure_from_msg(&f, r->failure);
        u.failure = &f;
    }
    if (r->assignment) {
        const Msr__Assignment *s = r->assignment;
        u.has_assignment = 1;
        u.node_rank = s->node_rank;
        u.node_count = s->node_count;
        u.world_size = s->world_size;
        u.rank_offset = s->rank_offset;
        u.master_addr = s->master_addr;
        u.master_port = s->master_port;
        u.machine_ranks = s->machine_ranks;
    }
    tails_wanted(a, r->output_ranks, r->n_output_ranks);
    msr_buf_t missing = MSR_BUF_INIT;
    for (size_t i = 0; i < r->n_missing; i++)
        msr_buf_printf(&missing, "%s%s", i ? ", " : "", r->missing[i]);
    u.missing = missing.data;
    msr_node_on_update(&a->node, now, &u);
    msr_buf_cleanup(&missing);
    msr_failure_clear(&f); /* nothing left when the node took it */
    msr_agent_run_node(a);
}

void msr_agent_heartbeat_send(agent_t *a)
{
    Msr__HeartbeatRequest req = MSR__HEARTBEAT_REQUEST__INIT;
    Msr__WorkerState ws[MSR_HEARTBEAT_WORKERS_MAX], *wsp[MSR_HEARTBEAT_WORKERS_MAX];
    req.node_id = a->node_id;
    req.generation = a->node.generation;
    req.known_state = (Msr__JobState)a->node.state;
    req.ready_generation = a->node.ready_generation;
    req.wait_ms = (uint32_t)a->o->heartbeat_ms;
    size_t n = 0;
    for (int i = 0; i < a->local.count && n < MSR_HEARTBEAT_WORKERS_MAX; i++) {
        msr__worker_state__init(&ws[n]);
        ws[n].rank = a->local.workers[i].rank;
        ws[n].pid = (int)a->local.workers[i].pid;
        ws[n].running = a->local.workers[i].running;
        wsp[n] = &ws[n];
        n++;
    }
    req.n_workers = n;
    req.workers = wsp;
    Msr__RankOutput *outs = NULL, **outsp = NULL;
    ProtobufCBinaryData *lines = NULL;
    char *text = NULL;
    for (int i = 0; i < a->local.count; i++) {
        if (a->local.tails[i].want_rank < 0)
            continue;
        outs = msr_calloc((size_t)a->local.count, sizeof *outs);
        outsp = msr_calloc((size_t)a->local.count, sizeof *outsp);
        lines = msr_calloc((size_t)a->local.count * MSR_OUT_TAIL_LINES, sizeof *lines);
        if (outs && outsp && lines)
            req.n_outputs = tails_take(a, outs, outsp, lines, &text);
        req.outputs = outsp;
        break;
    }
    msr_status_t st = msr_link_call(membership_link(a), MSR_RPC_HEARTBEAT, &req.base,
                                    a->o->heartbeat_ms + 5000, 0, hb_done, a);
    msr_free(outs);
    msr_free(outsp);
    msr_free(lines);
    msr_free(text);
    if (st != MSR_OK)
        msr_node_on_send_failed(&a->node, msr_now_ns(), msr_status_str(st));
}

void msr_agent_leave(agent_t *a)
{
    Msr__LeaveRequest req = MSR__LEAVE_REQUEST__INIT;
    req.node_id = a->node_id;
    req.reason = a->node.leave_reason;
    ProtobufCMessage *resp = NULL;
    msr_link_t *via = membership_link(a);
    msr_status_t st = msr_link_call_sync(via, MSR_RPC_LEAVE, &req.base, 2000, 0, &resp);
    if (st != MSR_OK && st != MSR_ERR_NOT_FOUND && via != a->link) {
        /* the relay did not take it: the coordinator itself */
        MSR_DEBUG("leave through %s: %s; to the coordinator", a->relay_name, msr_err_msg());
        st = msr_link_call_sync(a->link, MSR_RPC_LEAVE, &req.base, 2000, 0, &resp);
    }
    if (st == MSR_OK)
        msr_rpc_message_free(resp);
    else
        MSR_DEBUG("leave: %s", msr_err_msg());
}
