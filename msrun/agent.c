/* The agent: the libevent wiring around the node's state machine (node.h).
 * Signals, child exits and the coordinator's answers become events fed to
 * the machine; the actions it queues are performed here (send, spawn,
 * signal, report, restart the coordinator, exit). One timer (the cron)
 * serves every deadline: the machine's (retries, SIGKILL after the grace,
 * unkillable workers, the beat check) and the reports' retries. */
#include "msrun/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/coord.h"
#include "msrun/agent_impl.h"
#include "msrun/jobdir.h"
#include "msrun/net.h"
#include "msrun/rundir.h"

/* ---- the coordinator's answers, decoded into events ---- */

static void join_done(msr_rpc_async_t *as, void *arg)
{
    agent_t *a = arg;
    uint64_t now = msr_now_ns();
    if (as->status == MSR_OK) {
        const Msr__JoinResponse *r = (const Msr__JoinResponse *)as->resp;
        if (!a->node.finished) {
            snprintf(a->node_id, sizeof a->node_id, "%s", r->node_id);
            MSR_DEBUG("joined job %s at %s as node %s", a->job_id, a->coord_target, a->node_id);
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

static void join_send(agent_t *a)
{
    Msr__JoinRequest req = MSR__JOIN_REQUEST__INIT;
    req.protocol_version = MSR_PROTOCOL_VERSION;
    req.job_id = a->job_id;
    req.host = a->host;
    req.pid = (int)getpid();
    req.local_worker_num = a->o->local_worker_num;
    req.worker_num = a->o->worker_num;
    req.node_rank = a->o->node_rank;
    req.min_nodes = a->o->min_nodes;
    req.max_nodes = a->o->max_nodes;
    req.max_restarts = a->o->max_restarts;
    req.free_port = a->free_port;
    int64_t left = msr_node_join_left_ms(&a->node, msr_now_ns());
    msr_status_t st =
        msr_link_call(a->link, MSR_RPC_JOIN, &req.base, left < 5000 ? left : 5000, 1, join_done, a);
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
        for (int i = 0; i < a->nworkers; i++)
            if (a->tails[i].rank == ranks[k] ||
                (a->tails[i].rank < 0 && a->node.rank_offset + i == ranks[k]))
                a->tails[i].want_rank = ranks[k];
}

/* The asked ranks' lines as RankOutput messages, into out (the caller's
 * [nworkers] arrays; *buf_p a copy of the lines, freed by the caller);
 * clears the asks. Returns how many. */
static size_t tails_take(agent_t *a, Msr__RankOutput *out, Msr__RankOutput **outp,
                         ProtobufCBinaryData *lines, char **buf_p)
{
    size_t n = 0, bytes = 0;
    for (int i = 0; i < a->nworkers; i++)
        if (a->tails[i].want_rank >= 0)
            bytes += a->tails[i].lines.bytes;
    *buf_p = NULL;
    if (bytes > 0 && (*buf_p = msr_malloc(bytes)) == NULL)
        return 0; /* the asks stay, for the next heartbeat */
    char *at = *buf_p;
    ProtobufCBinaryData *l = lines;
    for (int i = 0; i < a->nworkers; i++) {
        struct agent_tail *t = &a->tails[i];
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

static void hb_send(agent_t *a)
{
    Msr__HeartbeatRequest req = MSR__HEARTBEAT_REQUEST__INIT;
    Msr__WorkerState ws[256], *wsp[256];
    req.node_id = a->node_id;
    req.generation = a->node.generation;
    req.known_state = (Msr__JobState)a->node.state;
    req.ready_generation = a->node.ready_generation;
    req.wait_ms = (uint32_t)a->o->heartbeat_ms;
    size_t n = 0;
    for (int i = 0; i < a->nworkers && n < 256; i++) {
        msr__worker_state__init(&ws[n]);
        ws[n].rank = a->workers[i].rank;
        ws[n].pid = (int)a->workers[i].pid;
        ws[n].running = a->workers[i].running;
        wsp[n] = &ws[n];
        n++;
    }
    req.n_workers = n;
    req.workers = wsp;
    Msr__RankOutput *outs = NULL, **outsp = NULL;
    ProtobufCBinaryData *lines = NULL;
    char *text = NULL;
    for (int i = 0; i < a->nworkers; i++) {
        if (a->tails[i].want_rank < 0)
            continue;
        outs = msr_calloc((size_t)a->nworkers, sizeof *outs);
        outsp = msr_calloc((size_t)a->nworkers, sizeof *outsp);
        lines = msr_calloc((size_t)a->nworkers * MSR_OUT_TAIL_LINES, sizeof *lines);
        if (outs && outsp && lines)
            req.n_outputs = tails_take(a, outs, outsp, lines, &text);
        req.outputs = outsp;
        break;
    }
    msr_status_t st = msr_link_call(a->link, MSR_RPC_HEARTBEAT, &req.base,
                                    a->o->heartbeat_ms + 5000, 0, hb_done, a);
    msr_free(outs);
    msr_free(outsp);
    msr_free(lines);
    msr_free(text);
    if (st != MSR_OK)
        msr_node_on_send_failed(&a->node, msr_now_ns(), msr_status_str(st));
}

/* ---- workers ---- */

/* Frees the slots (killing stragglers left in each process group). */
static void cleanup_workers(agent_t *a)
{
    for (int i = 0; i < a->nworkers; i++) {
        msr_worker_t *w = &a->workers[i];
        if (w->pid > 0)
            kill(-w->pid, SIGKILL);
        msr_worker_cleanup(w);
        memset(w, 0, sizeof *w);
        w->out.fd = w->err.fd = w->log_fd = w->log.fd = -1;
    }
}

/* A worker printed a line that starts with "msrun:metric": when it is one
 * (rendezvous/progress.h), it is the rank's progress report. */
static void on_metric_line(void *arg, int rank, const char *line, size_t len)
{
    agent_t *a = arg;
    msr_metric_line_t m;
    if (a->proxy && msr_metric_line_parse(line, len, &m))
        msr_proxy_report_line(a->proxy, rank, &m, msr_wall_time());
}

static void spawn_workers(agent_t *a)
{
    msr_options_t *o = a->o;
    const msr_node_t *n = &a->node;
    /* placed once: a restarted generation's workers go where the first went */
    if (o->bind_to != MSR_BIND_NONE && !a->placed) {
        a->places = msr_cpu_plan((msr_bind_t)o->bind_to, a->nworkers);
        a->placed = 1;
    }
    msr_spawn_env_t env = {
        .path = o->program_path,
        .argv = o->argv,
        .node_rank = n->node_rank,
        .node_count = n->node_count,
        .world_size = n->world_size,
        .local_world_size = a->nworkers,
        .rank_offset = n->rank_offset,
        .generation = n->generation,
        .restart_count = n->restart_count,
        .max_restarts = n->max_restarts,
        .job_id = a->job_id,
        .coordinator = a->coord_target,
        .token = a->token,
        .agent_socket = a->proxy ? a->socket_path : NULL,
        .master_addr = n->master_addr,
        .master_port = n->master_port,
        .log_dir = a->log_dir_fd >= 0 ? a->log_run_dir : NULL,
        .log_dir_fd = a->log_dir_fd,
        .places = a->places,
        .output = &a->output,
        .pty = o->pty,
        .devnull = a->devnull,
        .worker_timeout_ms = o->worker_timeout_ms,
    };
    /* slots of workers that exited by themselves (no stop was needed) still
     * hold their last stderr lines */
    cleanup_workers(a);
    if (a->proxy)
        msr_proxy_set_member(a->proxy, a->node_id, n->node_rank, n->generation);
    for (int i = 0; i < a->nworkers; i++) {
        msr_worker_t *w = &a->workers[i];
        int rank = n->rank_offset + i;
        msr_worker_io_t io = {0};
        int off = 0;
        msr_options_streams(o, i, &io.file, &off);
        if (msr_options_show_rank(o, rank))
            io.terminal = (MSR_STD_OUT | MSR_STD_ERR) & ~off;
        if (io.file && msr_log_name_format(o->worker_log_name, rank, i, n->node_rank, a->host,
                                           io.log_name, sizeof io.log_name) != MSR_OK)
            io.file = 0;                /* checked with the options: not reached */
        if (a->tails[i].rank != rank) { /* elastic: the slot holds another rank now */
            msr_out_tail_clear(&a->tails[i].lines);
            a->tails[i].rank = rank;
        }
        w->out_tail = &a->tails[i].lines;
        msr_status_t st = msr_worker_spawn(w, a->base, &env, i, &io);
        if (w->running)
            msr_node_on_spawned(&a->node, i, (int)w->pid);
        if (st != MSR_OK) {
            char why[620];
            snprintf(why, sizeof why, "rank %d: %.500s", rank, msr_err_msg());
            msr_node_on_spawn_failed(&a->node, msr_now_ns(), why);
            return;
        }
    }
    MSR_INFO("generation %d: started %d worker%s (ranks %d..%d of %d)", n->generation, a->nworkers,
             a->nworkers == 1 ? "" : "s", n->rank_offset, n->rank_offset + a->nworkers - 1,
             n->world_size);
}

static void signal_workers(agent_t *a, const msr_node_action_t *act)
{
    if (act->local >= 0) {
        msr_worker_t *w = &a->workers[act->local];
        if (act->text[0])
            snprintf(w->hung, sizeof w->hung, "%.95s", act->text);
        msr_worker_signal(w, act->sig);
        return;
    }
    for (int i = 0; i < a->nworkers; i++)
        if (a->workers[i].running)
            msr_worker_signal(&a->workers[i], act->sig);
}

static void poll_beats(agent_t *a)
{
    uint64_t now = msr_now_ns();
    for (int i = 0; i < a->nworkers && a->proxy; i++) {
        msr_worker_t *w = &a->workers[i];
        msr_beat_info_t b;
        if (!w->running)
            continue;
        if (msr_proxy_beat_info(a->proxy, w->rank, (int)w->pid, &b))
            msr_node_on_beat(&a->node, now, i, b.last_beat_ns, b.progress, b.progress_ns);
        else
            msr_node_on_no_beat(&a->node, now, i);
    }
}

static void report(agent_t *a, const msr_node_action_t *act)
{
    msr_worker_t *w = &a->workers[act->local];
    char how[96];
    msr_worker_describe(w, how, sizeof how);
    /* a failure reaches the user once: in the restart line or the final
     * report, which the coordinator's decision brings to every node */
    MSR_DEBUG("rank %d (pid %d) %s", w->rank, (int)w->pid, how);
    msr_report_exit(a, w, act);
}

/* ---- performing the machine's actions ---- */

static void perform(agent_t *a, const msr_node_action_t *act)
{
    switch (act->kind) {
    case MSR_NODE_ACT_JOIN:
        join_send(a);
        break;
    case MSR_NODE_ACT_HEARTBEAT:
        hb_send(a);
        break;
    case MSR_NODE_ACT_SPAWN:
        spawn_workers(a);
        break;
    case MSR_NODE_ACT_SIGNAL:
        signal_workers(a, act);
        break;
    case MSR_NODE_ACT_POLL_BEATS:
        poll_beats(a);
        break;
    case MSR_NODE_ACT_REPORT:
        report(a, act);
        break;
    case MSR_NODE_ACT_RELEASE:
        cleanup_workers(a);
        break;
    case MSR_NODE_ACT_LOG_RANK:
        msr_log_init("msrun", act->code, -1);
        break;
    case MSR_NODE_ACT_COORD_RESTART:
        msr_coord_child_restart(a, act->text);
        break;
    case MSR_NODE_ACT_LEAVE:
        a->leave_due = 1; /* once the loop ends and the workers are gone */
        break;
    case MSR_NODE_ACT_COORD_STOP:
        break; /* the teardown stops it, after leaving */
    case MSR_NODE_ACT_EXIT:
        if (act->long_text)
            fprintf(stderr, "msrun: error: %s\n", act->long_text);
        event_base_loopbreak(a->base);
        break;
    }
}

/* Arms the one timer for the earliest deadline. */
static void arm_cron(agent_t *a, uint64_t now)
{
    if (a->cron == NULL)
        return;
    uint64_t at = msr_node_next_deadline(&a->node);
    uint64_t r = msr_reports_cron(a, now);
    if (r && (at == 0 || r < at))
        at = r;
    if (at == 0) {
        evtimer_del(a->cron);
        return;
    }
    uint64_t us = at > now ? (at - now + 999) / 1000 : 0;
    struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
    evtimer_add(a->cron, &tv);
}

void msr_agent_run_node(agent_t *a)
{
    if (a->performing)
        return; /* the outer call performs what this event queued */
    a->performing = 1;
    msr_node_action_t act;
    while (msr_node_next_action(&a->node, &act))
        perform(a, &act);
    a->performing = 0;
    arm_cron(a, msr_now_ns());
    /* a job that ended elects no new coordinator */
    if (a->elect &&
        (a->node.finished || a->node.state == MSR_JOB_DONE || a->node.state == MSR_JOB_FAILED))
        msr_elect_quiet(a->elect);
}

/* ---- the election through etcd ---- */

void msr_agent_coord_moved(agent_t *a, const char *target)
{
    if (strcmp(target, a->coord_target) == 0)
        return;
    if (msr_link_retarget(a->link, target) != MSR_OK ||
        (a->proxy && msr_proxy_retarget(a->proxy, target) != MSR_OK)) {
        MSR_ERROR("cannot reach the new coordinator at %s: %s", target, msr_err_msg());
        return;
    }
    MSR_WARN("the coordinator is now at %s", target);
    snprintf(a->coord_target, sizeof a->coord_target, "%s", target);
    msr_node_on_coord_moved(&a->node, msr_now_ns());
    msr_agent_run_node(a);
}

static void on_elect(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    agent_t *a = arg;
    msr_elect_event_t ev;
    while (msr_elect_next(a->elect, &ev) != MSR_ELECT_NONE) {
        switch (ev.kind) {
        case MSR_ELECT_WON:
            if (!a->node.finished)
                msr_coord_child_takeover(a);
            break;
        case MSR_ELECT_LEADER:
            msr_agent_coord_moved(a, ev.addr);
            break;
        case MSR_ELECT_LOST:
            MSR_WARN("this node's etcd lease expired: its coordinator stops, another is elected");
            msr_coord_child_kill(a);
            break;
        case MSR_ELECT_NONE:
            break;
        }
    }
}

static void on_cron(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    agent_t *a = arg;
    msr_node_on_tick(&a->node, msr_now_ns());
    msr_agent_run_node(a); /* also sends the reports that are due */
}

/* ---- signals and child exits ---- */

static void on_child(agent_t *a, pid_t pid, int status)
{
    if (pid == a->coord_pid) {
        a->coord_pid = 0;
        char how[64];
        if (WIFSIGNALED(status))
            msr_signal_name(WTERMSIG(status), how, sizeof how);
        else
            snprintf(how, sizeof how, "code %d", WEXITSTATUS(status));
        int job_over = WIFEXITED(status) && WEXITSTATUS(status) <= 1;
        if (msr_coord_child_exited(a, how))
            msr_node_on_coord_exit(&a->node, msr_now_ns(), how, job_over);
        return;
    }
    for (int i = 0; i < a->nworkers; i++) {
        msr_worker_t *w = &a->workers[i];
        if (!w->running || w->pid != pid)
            continue;
        w->running = 0;
        w->status = status;
        w->exit_time = msr_wall_time();
        msr_worker_drain(w);
        msr_node_on_worker_exit(&a->node, i, WIFSIGNALED(status) ? -1 : WEXITSTATUS(status),
                                WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        return;
    }
}

static void reap(agent_t *a)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        on_child(a, pid, status);
        msr_agent_run_node(a);
    }
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    agent_t *a = arg;
    if (sig == SIGCHLD)
        reap(a);
    else
        msr_node_on_signal(&a->node, msr_now_ns(), (int)sig);
    msr_agent_run_node(a);
}

/* ---- start and end ---- */

static void leave(agent_t *a)
{
    Msr__LeaveRequest req = MSR__LEAVE_REQUEST__INIT;
    req.node_id = a->node_id;
    req.reason = a->node.leave_reason;
    ProtobufCMessage *resp = NULL;
    if (msr_link_call_sync(a->link, MSR_RPC_LEAVE, &req.base, 2000, 0, &resp) == MSR_OK)
        msr_rpc_message_free(resp);
    else
        MSR_DEBUG("leave: %s", msr_err_msg());
}

/* Who this job is: its id and, for a standalone job, its token (a
 * multi-node job's is decided in setup_coordinator, which knows whether this
 * node starts the coordinator). Never derived from anything others know. */
static int job_identity(agent_t *a)
{
    msr_options_t *o = a->o;
    unsigned char rnd[16];
    msr_random_bytes(rnd, sizeof rnd);
    if (o->job_id)
        snprintf(a->job_id, sizeof a->job_id, "%s", o->job_id);
    else if (o->master_addr == NULL && o->etcd_endpoints == NULL)
        snprintf(a->job_id, sizeof a->job_id, "job-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
                 rnd[3]);
    else
        snprintf(a->job_id, sizeof a->job_id, "default");
    if (o->token) {
        snprintf(a->token, sizeof a->token, "%s", o->token);
    } else if (o->master_addr == NULL) {
        if (msr_token_generate(a->token, sizeof a->token) != MSR_OK) {
            fprintf(stderr, "msrun: error: cannot generate a job token: %s\n", msr_err_msg());
            return 2;
        }
    }
    /* TLS to the coordinator: its certificate must name master_addr as the
     * user wrote it (a host name or an address), unless told otherwise. */
    a->tls = (msr_rpc_tls_t){o->tls_cert, o->tls_key, o->tls_ca,
                             o->tls_server_name ? o->tls_server_name : o->master_addr};
    return 0;
}

/* The loop's parts: the machine, the worker slots, the timer, the signals,
 * the link and the workers' store proxy. Prints what failed. */
static int loop_setup(agent_t *a)
{
    msr_node_config_t cfg = {
        .nworkers = a->nworkers,
        .grace_ms = a->o->grace_ms,
        .coordinator_timeout_ms = a->o->coordinator_timeout_ms,
        .cluster_time_out_ms = a->o->cluster_time_out_ms,
        .worker_timeout_ms = a->o->worker_timeout_ms,
        .coord_target = a->coord_target,
    };
    msr_random_bytes(&cfg.seed, sizeof cfg.seed);
    a->base = event_base_new();
    a->workers = msr_calloc((size_t)a->nworkers, sizeof *a->workers);
    a->tails = msr_calloc((size_t)a->nworkers, sizeof *a->tails);
    a->cron = a->base ? evtimer_new(a->base, on_cron, a) : NULL;
    if (a->base == NULL || a->workers == NULL || a->tails == NULL || a->cron == NULL ||
        msr_node_init(&a->node, &cfg) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot create the event loop: out of memory\n");
        return 1;
    }
    for (int i = 0; i < a->nworkers; i++) {
        a->workers[i].out.fd = a->workers[i].err.fd = a->workers[i].log_fd = a->workers[i].log.fd =
            -1;
        a->tails[i].rank = a->tails[i].want_rank = -1;
    }
    int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(sigs); i++) {
        a->sig_ev[a->nsig] = evsignal_new(a->base, sigs[i], on_signal, a);
        if (a->sig_ev[a->nsig] == NULL || event_add(a->sig_ev[a->nsig], NULL) != 0) {
            fprintf(stderr, "msrun: error: cannot watch signals\n");
            return 1;
        }
        a->nsig++;
    }
    if (msr_link_create(a->base, a->coord_target, a->token, &a->tls, &a->link) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot create the link to the coordinator: %s\n",
                msr_err_msg());
        return 1;
    }
    /* The workers' store calls go through this node's proxy. */
    if (msr_proxy_start(a->socket_path, a->coord_target, a->token, &a->tls, a->o->local_worker_num,
                        &a->proxy) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot start the store proxy for the workers\n");
        return 1;
    }
    if (a->elect) {
        a->elect_ev = event_new(a->base, msr_elect_fd(a->elect), EV_READ | EV_PERSIST, on_elect, a);
        if (a->elect_ev == NULL || event_add(a->elect_ev, NULL) != 0 ||
            msr_elect_start(a->elect) != MSR_OK) {
            fprintf(stderr, "msrun: error: cannot watch the election in etcd: %s\n", msr_err_msg());
            return 1;
        }
    }
    return 0;
}

/* Runs the loop; returns the exit status once the machine exits. */
static int loop_run(agent_t *a)
{
    reap(a); /* a coordinator child that died before the loop started */
    msr_node_on_start(&a->node, msr_now_ns());
    msr_agent_run_node(a);
    event_base_dispatch(a->base);

    /* Out of the loop: workers are stopped unless the loop broke early. */
    int status;
    for (int i = 0; i < a->nworkers; i++)
        if (a->workers[i].running)
            msr_worker_signal(&a->workers[i], SIGKILL);
    for (int i = 0; i < a->nworkers; i++)
        if (a->workers[i].running && waitpid(a->workers[i].pid, &status, 0) > 0)
            a->workers[i].running = 0;
    cleanup_workers(a);
    msr_proxy_stop(a->proxy);
    a->proxy = NULL;
    if (a->leave_due)
        leave(a);
    msr_link_destroy(a->link);
    a->link = NULL;
    msr_node_print_outcome(&a->node);
    int rc = a->node.exit_code;
    if (rc != 0 && a->node.state == MSR_JOB_FAILED && a->o->error_file &&
        msr_error_file_write(a->o->error_file, a->job_id, &a->node.cause, a->node.message) !=
            MSR_OK)
        MSR_ERROR("%s", msr_err_msg());
    if (rc == 0 && a->node.state == MSR_JOB_DONE && a->o->error_file &&
        msr_error_file_write_ok(a->o->error_file, a->job_id,
                                (double)(msr_now_ns() - a->start_ns) / 1e9, a->node.generation + 1,
                                a->node.restart_count) != MSR_OK)
        MSR_ERROR("%s", msr_err_msg());
    return rc;
}

/* Records the job for `msrun status`; a failure costs only that. */
static void record_job(agent_t *a)
{
    int tls = msr_rpc_tls_enabled(&a->tls);
    msr_run_record_t r = {
        .job_id = a->job_id,
        .coordinator = a->coord_target,
        .token = a->token,
        .tls_cert = tls ? a->tls.cert : NULL,
        .tls_key = tls ? a->tls.key : NULL,
        .tls_ca = tls ? a->tls.ca : NULL,
        .tls_server_name = tls ? a->tls.server_name : NULL,
        .pid = (int)getpid(),
        .node_rank = a->o->node_rank,
        .start_time = msr_wall_time(),
    };
    if (msr_run_record_write(&r, a->run_record, sizeof a->run_record) != MSR_OK)
        MSR_WARN("msrun status will not find this job: %s", msr_err_msg());
}

static void loop_teardown(agent_t *a)
{
    for (int i = 0; i < a->nsig; i++)
        event_free(a->sig_ev[i]);
    if (a->cron)
        event_free(a->cron);
    a->cron = NULL;
    if (a->coord_ready_ev)
        event_free(a->coord_ready_ev);
    if (a->coord_ready_fd >= 0)
        close(a->coord_ready_fd);
    a->coord_ready_fd = -1;
    if (a->elect_ev)
        event_free(a->elect_ev);
    a->elect_ev = NULL;
    msr_proxy_stop(a->proxy);
    msr_link_destroy(a->link);
    msr_reports_free(a); /* unacknowledged: their calls were cancelled with the link */
    msr_free(a->workers);
    msr_free(a->tails);
    msr_node_cleanup(&a->node);
    if (a->base)
        event_base_free(a->base);
}

int msr_agent_run(msr_options_t *o)
{
    agent_t a;
    memset(&a, 0, sizeof a);
    a.o = o;
    a.nworkers = o->local_worker_num;
    a.log_dir_fd = -1;
    a.coord_ready_fd = -1;
    a.start_ns = msr_now_ns();
    msr_list_init(&a.reports);
    msr_log_init("msrun", -1, -1);
    msr_log_set_level((msr_log_level_t)o->log_level);
    a.devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (a.devnull < 0) {
        fprintf(stderr, "msrun: error: /dev/null: %s\n", strerror(errno));
        return 2;
    }
    int rc = 2;
    msr_output_init(&a.output, o->tag_output, o->timestamps);
    a.output.metric = on_metric_line;
    a.output.metric_arg = &a;
    if (job_identity(&a) != 0)
        goto out_devnull;
    /* each run writes into a directory of its own: <log_dir>/<job id> */
    char run[256];
    if (o->log_dir &&
        msr_log_run_dir_open(o->log_dir, a.job_id, &a.log_dir_fd, run, sizeof run) != MSR_OK) {
        fprintf(stderr, "msrun: error: %s\n", msr_err_msg());
        goto out_devnull;
    }
    if (o->log_dir) {
        snprintf(a.log_run_dir, sizeof a.log_run_dir, "%s/%s", o->log_dir, run);
        MSR_INFO("logs in %s", a.log_run_dir);
    }
    /* Block nothing, ignore SIGPIPE (a closed terminal must not kill msrun). */
    signal(SIGPIPE, SIG_IGN);
    /* The job's private directory holds the proxy's socket and the embedded
     * coordinator's state file. */
    if (msr_job_dir_create(a.job_id, a.job_dir, sizeof a.job_dir) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot create the job's directory: %s\n", msr_err_msg());
        rc = 1;
        goto out_devnull;
    }
    snprintf(a.socket_path, sizeof a.socket_path, "%s/agent.sock", a.job_dir);
    snprintf(a.state_file, sizeof a.state_file, "%s/coordinator.state", a.job_dir);
    rc = setup_coordinator(&a);
    if (rc != 0)
        goto out_dir;
    record_job(&a);
    a.free_port = msr_net_free_port(a.host);
    rc = loop_setup(&a);
    if (rc == 0)
        rc = loop_run(&a);
    int job_over =
        a.node.finished && (a.node.state == MSR_JOB_DONE || a.node.state == MSR_JOB_FAILED);
    loop_teardown(&a);
    a.node_count = a.node.node_count;
    stop_coordinator(&a);
    msr_elect_destroy(a.elect, job_over);
    a.elect = NULL;
out_dir:
    if (a.elect)
        msr_coord_child_kill(&a);
    msr_elect_destroy(a.elect, 0);
    msr_run_record_remove(a.run_record);
    msr_job_dir_remove(a.job_dir);
out_devnull:
    msr_output_cleanup(&a.output);
    msr_free(a.places);
    if (a.log_dir_fd >= 0)
        close(a.log_dir_fd);
    close(a.devnull);
    return rc;
}
