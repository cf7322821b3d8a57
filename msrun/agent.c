/* The agent: the libevent wiring around the node's state machine (node.h).
 * Signals, child exits (agent_events.c) and the coordinator's answers
 * become events fed to the machine; the actions it queues are performed
 * here (send, spawn, signal, report, restart the coordinator, exit). One
 * timer (the cron) serves every deadline: the machine's (retries, SIGKILL
 * after the grace, unkillable workers, the beat check) and the reports'
 * retries. */
#include "launcher/agent.h"

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
#include "launcher/agent_impl.h"
#include "launcher/history.h"
#include "launcher/jobdir.h"
#include "launcher/net.h"
#include "launcher/rundir.h"

/* ---- workers ---- */

/* Frees the slots (killing stragglers left in each process group). */
static void cleanup_workers(agent_t *a)
{
    for (int i = 0; i < a->local.count; i++) {
        msr_worker_t *w = &a->local.workers[i];
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

/* What every local worker's spawn shares. */
static msr_spawn_env_t spawn_env(agent_t *a)
{
    msr_options_t *o = a->o;
    const msr_node_t *n = &a->node;
    return (msr_spawn_env_t){
        .path = o->program_path,
        .argv = o->argv,
        .node_rank = n->node_rank,
        .node_count = n->node_count,
        .world_size = n->world_size,
        .local_world_size = a->local.count,
        .rank_offset = n->rank_offset,
        .generation = n->generation,
        .restart_count = n->restart_count,
        .max_restarts = n->max_restarts,
        .job_id = a->job.id,
        .coordinator = a->coord.target,
        .token = a->job.token,
        .agent_socket = a->proxy ? a->files.socket_path : NULL,
        .master_addr = n->master_addr,
        .master_port = n->master_port,
        .machine_ranks = n->machine_ranks,
        .log_dir = a->files.log_dir_fd >= 0 ? a->files.log_run_dir : NULL,
        .log_dir_fd = a->files.log_dir_fd,
        .log_max_bytes = o->log_max_bytes,
        .places = a->local.places,
        .output = &a->local.output,
        .pty = o->pty,
        .devnull = a->local.devnull,
        .worker_timeout_ms = o->worker_timeout_ms,
        .ps_servers = o->ps_servers,
        .ps_staleness = o->ps_staleness,
    };
}

/* Starts local worker i (its incarnation the machine's); fed back to the
 * machine. MSR_OK or the failure, which the machine was told. */
static msr_status_t spawn_slot(agent_t *a, msr_spawn_env_t *env, int i)
{
    msr_options_t *o = a->o;
    const msr_node_t *n = &a->node;
    msr_worker_t *w = &a->local.workers[i];
    int rank = n->rank_offset + i;
    msr_worker_io_t io = {0};
    int off = 0;
    msr_options_streams(o, i, &io.file, &off);
    if (msr_options_show_rank(o, rank, i))
        io.terminal = (MSR_STD_OUT | MSR_STD_ERR) & ~off;
    if (io.file && msr_log_name_format(o->worker_log_name, rank, i, n->node_rank, a->coord.host,
                                       io.log_name, sizeof io.log_name) != MSR_OK)
        io.file = 0;                      /* checked with the options: not reached */
    if (a->local.tails[i].rank != rank) { /* elastic: the slot holds another rank now */
        msr_out_tail_clear(&a->local.tails[i].lines);
        a->local.tails[i].rank = rank;
    }
    w->out_tail = &a->local.tails[i].lines;
    env->incarnation = n->workers[i].incarnation;
    uint64_t forking = msr_now_ns();
    msr_status_t st = msr_worker_spawn(w, a->loop.base, env, i, &io);
    if (a->prof.on && st == MSR_OK) {
        msr_lprof_mark(&a->prof.workers[i], MSR_LPROF_FORK, forking, msr_now_ns());
        if (a->prof.self.end[MSR_LPROF_JOIN]) /* joined, as before any spawn */
            msr_lprof_mark(&a->prof.self, MSR_LPROF_RDZV, a->prof.self.end[MSR_LPROF_JOIN],
                           forking);
    }
    if (w->running)
        msr_node_on_spawned(&a->node, i, (int)w->pid);
    if (st != MSR_OK) {
        char why[620];
        snprintf(why, sizeof why, "rank %d: %.500s", rank, msr_err_msg());
        msr_node_on_spawn_failed(&a->node, msr_now_ns(), why);
    }
    return st;
}

/* A failed worker replaced alone (node.c, replace_alone): its old slot,
 * reaped and drained, is freed first. */
static void spawn_again(agent_t *a, int i)
{
    msr_worker_t *w = &a->local.workers[i];
    if (i < 0 || i >= a->local.count || w->running)
        return;
    if (w->pid > 0)
        kill(-w->pid, SIGKILL); /* what it left in its process group */
    msr_worker_cleanup(w);
    memset(w, 0, sizeof *w);
    w->out.fd = w->err.fd = w->log_fd = w->log.fd = -1;
    msr_spawn_env_t env = spawn_env(a);
    spawn_slot(a, &env, i);
}

static void spawn_workers(agent_t *a, int from)
{
    msr_options_t *o = a->o;
    const msr_node_t *n = &a->node;
    /* placed once: a restarted generation's workers go where the first went */
    if (o->bind_to != MSR_BIND_NONE && !a->local.placed) {
        a->local.places = msr_cpu_plan((msr_bind_t)o->bind_to, a->local.count);
        a->local.placed = 1;
    }
    msr_spawn_env_t env = spawn_env(a);
    uint64_t began = msr_now_ns(); /* a slice of the start: node.h */
    /* slots of workers that exited by themselves (no stop was needed) still
     * hold their last stderr lines */
    if (from == 0)
        cleanup_workers(a);
    if (from == 0 && a->proxy)
        msr_proxy_set_member(a->proxy, a->node_id, n->node_rank, n->generation);
    for (int i = from; i < a->local.count; i++) {
        if (spawn_slot(a, &env, i) != MSR_OK)
            return;
        if (i + 1 < a->local.count && msr_node_spawn_turn_over(&a->node, began, msr_now_ns())) {
            msr_node_on_spawn_paused(&a->node, msr_now_ns(), i + 1); /* the loop's turn */
            return;
        }
    }
    MSR_INFO("generation %d: started %d worker%s (ranks %d..%d of %d)", n->generation,
             a->local.count, a->local.count == 1 ? "" : "s", n->rank_offset,
             n->rank_offset + a->local.count - 1, n->world_size);
}

static void signal_workers(agent_t *a, const msr_node_action_t *act)
{
    if (act->local >= 0) {
        msr_worker_t *w = &a->local.workers[act->local];
        if (act->text[0])
            snprintf(w->hung, sizeof w->hung, "%.95s", act->text);
        msr_worker_signal(w, act->sig);
        return;
    }
    for (int i = 0; i < a->local.count; i++)
        if (a->local.workers[i].running)
            msr_worker_signal(&a->local.workers[i], act->sig);
}

static void poll_beats(agent_t *a)
{
    uint64_t now = msr_now_ns();
    for (int i = 0; i < a->local.count && a->proxy; i++) {
        msr_worker_t *w = &a->local.workers[i];
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
    msr_worker_t *w = &a->local.workers[act->local];
    char how[96];
    msr_worker_describe(w, how, sizeof how);
    /* a failure reaches the user once: in the restart line or the final
     * report, which the coordinator's decision brings to every node */
    MSR_DEBUG("rank %d (pid %d) %s", w->rank, (int)w->pid, how);
    /* a worker that failed after its communicator saw a peer lost is not
     * the root cause */
    int after_peer_lost = 0;
    msr_beat_info_t beat;
    if ((act->exit_code != 0 || act->sig) && a->proxy &&
        msr_proxy_beat_info(a->proxy, w->rank, (int)w->pid, &beat))
        after_peer_lost = beat.peer_lost;
    msr_report_exit(&a->reports, w, act, after_peer_lost);
}

/* A report's retry was armed: the timer must serve it. */
static void on_report_retry(void *arg)
{
    msr_agent_run_node(arg);
}

/* ---- performing the machine's actions ---- */

static void perform(agent_t *a, const msr_node_action_t *act)
{
    switch (act->kind) {
    case MSR_NODE_ACT_JOIN:
        msr_agent_join_send(a);
        break;
    case MSR_NODE_ACT_HEARTBEAT:
        msr_agent_heartbeat_send(a);
        break;
    case MSR_NODE_ACT_SPAWN:
        if (act->code == 1)
            spawn_again(a, act->local);
        else
            spawn_workers(a, act->local);
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
        msr_coord_child_restart(&a->coord, act->text);
        break;
    case MSR_NODE_ACT_LEAVE:
        a->loop.leave_due = 1; /* once the loop ends and the workers are gone */
        break;
    case MSR_NODE_ACT_COORD_STOP:
        break; /* the teardown stops it, after leaving */
    case MSR_NODE_ACT_EXIT:
        if (act->long_text)
            fprintf(stderr, "msrun: error: %s\n", act->long_text);
        event_base_loopbreak(a->loop.base);
        break;
    }
}

/* Arms the one timer for the earliest deadline. */
static void arm_cron(agent_t *a, uint64_t now)
{
    if (a->loop.cron == NULL)
        return;
    uint64_t at = msr_node_next_deadline(&a->node);
    uint64_t r = msr_reports_cron(&a->reports, now);
    if (r && (at == 0 || r < at))
        at = r;
    if (at == 0) {
        evtimer_del(a->loop.cron);
        return;
    }
    uint64_t us = at > now ? (at - now + 999) / 1000 : 0;
    struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
    evtimer_add(a->loop.cron, &tv);
}

void msr_agent_run_node(agent_t *a)
{
    if (a->loop.performing)
        return; /* the outer call performs what this event queued */
    a->loop.performing = 1;
    msr_node_action_t act;
    while (msr_node_next_action(&a->node, &act))
        perform(a, &act);
    a->loop.performing = 0;
    arm_cron(a, msr_now_ns());
    /* a job that ended elects no new coordinator */
    if (a->coord.elect &&
        (a->node.finished || a->node.state == MSR_JOB_DONE || a->node.state == MSR_JOB_FAILED))
        msr_elect_quiet(a->coord.elect);
}

static void on_cron(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    agent_t *a = arg;
    msr_node_on_tick(&a->node, msr_now_ns());
    msr_agent_run_node(a); /* also sends the reports that are due */
}

/* ---- start and end ---- */

/* Who this job is: its id and, for a standalone job, its token (a
 * multi-node job's is decided in msr_coord_setup, which knows whether this
 * node starts the coordinator). Never derived from anything others know. */
static int job_identity(agent_t *a)
{
    msr_options_t *o = a->o;
    unsigned char rnd[16];
    msr_random_bytes(rnd, sizeof rnd);
    if (o->job_id)
        snprintf(a->job.id, sizeof a->job.id, "%s", o->job_id);
    else if (o->master_addr == NULL && o->etcd_endpoints == NULL)
        snprintf(a->job.id, sizeof a->job.id, "job-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
                 rnd[3]);
    else
        snprintf(a->job.id, sizeof a->job.id, "default");
    if (o->token) {
        snprintf(a->job.token, sizeof a->job.token, "%s", o->token);
    } else if (o->master_addr == NULL) {
        if (msr_token_generate(a->job.token, sizeof a->job.token) != MSR_OK) {
            fprintf(stderr, "msrun: error: cannot generate a job token: %s\n", msr_err_msg());
            return 2;
        }
    }
    /* TLS to the coordinator: its certificate must name master_addr as the
     * user wrote it (a host name or an address), unless told otherwise. */
    a->job.tls = (msr_rpc_tls_t){o->tls_cert, o->tls_key, o->tls_ca,
                                 o->tls_server_name ? o->tls_server_name : o->master_addr};
    return 0;
}

/* The loop's parts: the machine, the worker slots, the timer, the signals,
 * the link and the workers' store proxy. Prints what failed. */
static int loop_setup(agent_t *a)
{
    msr_node_config_t cfg = {
        .nworkers = a->local.count,
        .grace_ms = a->o->grace_ms,
        .coordinator_timeout_ms = a->o->coordinator_timeout_ms,
        .cluster_time_out_ms = a->o->cluster_time_out_ms,
        .worker_timeout_ms = a->o->worker_timeout_ms,
        .coord_target = a->coord.target,
        .ps_servers = a->o->ps_servers,
        .ps_async = a->o->ps_servers > 0 && a->o->ps_staleness >= 0,
    };
    msr_random_bytes(&cfg.seed, sizeof cfg.seed);
    a->loop.base = event_base_new();
    a->coord.base = a->loop.base; /* restarts of the coordinator are watched from the loop */
    a->local.workers = msr_calloc((size_t)a->local.count, sizeof *a->local.workers);
    a->local.tails = msr_calloc((size_t)a->local.count, sizeof *a->local.tails);
    a->loop.cron = a->loop.base ? evtimer_new(a->loop.base, on_cron, a) : NULL;
    if (a->loop.base == NULL || a->local.workers == NULL || a->local.tails == NULL ||
        a->loop.cron == NULL || msr_node_init(&a->node, &cfg) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot create the event loop: out of memory\n");
        return 1;
    }
    for (int i = 0; i < a->local.count; i++) {
        a->local.workers[i].out.fd = a->local.workers[i].err.fd = a->local.workers[i].log_fd =
            a->local.workers[i].log.fd = -1;
        a->local.tails[i].rank = a->local.tails[i].want_rank = -1;
    }
    int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
    _Static_assert(MSR_ARRAY_SIZE(sigs) == MSR_AGENT_SIGNALS, "the signals the agent watches");
    for (size_t i = 0; i < MSR_ARRAY_SIZE(sigs); i++) {
        a->loop.sig_ev[a->loop.nsig] = evsignal_new(a->loop.base, sigs[i], msr_agent_on_signal, a);
        if (a->loop.sig_ev[a->loop.nsig] == NULL ||
            event_add(a->loop.sig_ev[a->loop.nsig], NULL) != 0) {
            fprintf(stderr, "msrun: error: cannot watch signals\n");
            return 1;
        }
        a->loop.nsig++;
    }
    if (msr_link_create(a->loop.base, a->coord.target, a->job.token, &a->job.tls, &a->link) !=
        MSR_OK) {
        fprintf(stderr, "msrun: error: cannot create the link to the coordinator: %s\n",
                msr_err_msg());
        return 1;
    }
    a->reports.link = a->link;
    if (msr_agent_relay_open(a) != 0)
        return 1;
    /* The workers' store calls go through this node's proxy. */
    /* The node's workers are one client of the coordinator: the proxy
     * holds their calls to the same bound (--held_calls_max, _bytes_max). */
    const msr_held_limits_t held = {(uint64_t)a->o->held_calls_max, (uint64_t)a->o->held_bytes_max,
                                    0, 0};
    if (msr_proxy_start(a->files.socket_path, a->coord.target, a->job.token, &a->job.tls,
                        a->o->local_worker_num, &held, &a->proxy) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot start the store proxy for the workers\n");
        return 1;
    }
    if (msr_agent_relay_proxy(a) != 0)
        return 1;
    /* the run's history beside its logs, for `msrun board` (a failure only
     * costs the history) */
    if (a->files.log_dir_fd >= 0 &&
        msr_history_open(a->files.log_dir_fd, a->o->log_max_bytes, &a->history) != MSR_OK)
        MSR_WARN("no history of this run in %s: %s", a->files.log_run_dir, msr_err_msg());
    msr_proxy_set_history(a->proxy, a->history);
    if (a->o->exit_on_stdin_eof) {
        a->loop.stdin_ev = event_new(a->loop.base, 0, EV_READ | EV_PERSIST, msr_agent_on_stdin, a);
        if (a->loop.stdin_ev == NULL || event_add(a->loop.stdin_ev, NULL) != 0) {
            fprintf(stderr, "msrun: error: cannot watch standard input\n");
            return 1;
        }
    }
    if (a->coord.elect) {
        a->loop.elect_ev = event_new(a->loop.base, msr_elect_fd(a->coord.elect),
                                     EV_READ | EV_PERSIST, msr_agent_on_elect, a);
        if (a->loop.elect_ev == NULL || event_add(a->loop.elect_ev, NULL) != 0 ||
            msr_elect_start(a->coord.elect) != MSR_OK) {
            fprintf(stderr, "msrun: error: cannot watch the election in etcd: %s\n", msr_err_msg());
            return 1;
        }
    }
    return 0;
}

/* Runs the loop; returns the exit status once the machine exits. */
static int loop_run(agent_t *a)
{
    msr_agent_reap(a); /* a coordinator child that died before the loop started */
    msr_node_on_start(&a->node, msr_now_ns());
    msr_agent_run_node(a);
    event_base_dispatch(a->loop.base);
    msr_agent_prof_mark(a, MSR_LPROF_JOB_END, a->prof.self.end[MSR_LPROF_WAIT]);
    uint64_t leaving = msr_now_ns();

    /* Out of the loop: workers are stopped unless the loop broke early. */
    int status;
    for (int i = 0; i < a->local.count; i++)
        if (a->local.workers[i].running)
            msr_worker_signal(&a->local.workers[i], SIGKILL);
    for (int i = 0; i < a->local.count; i++)
        if (a->local.workers[i].running && waitpid(a->local.workers[i].pid, &status, 0) > 0)
            a->local.workers[i].running = 0;
    cleanup_workers(a);
    msr_proxy_stop(a->proxy);
    a->proxy = NULL;
    if (a->loop.leave_due)
        msr_agent_leave(a);
    msr_link_destroy(a->link);
    a->link = NULL;
    a->reports.link = NULL;
    msr_agent_prof_mark(a, MSR_LPROF_LEAVE, leaving);
    msr_agent_relay_close(a);
    msr_node_print_outcome(&a->node);
    int rc = a->node.exit_code;
    if (rc != 0 && a->node.state == MSR_JOB_FAILED && a->o->error_file &&
        msr_error_file_write(a->o->error_file, a->job.id, &a->node.cause, a->node.message) !=
            MSR_OK)
        MSR_ERROR("%s", msr_err_msg());
    if (rc == 0 && a->node.state == MSR_JOB_DONE && a->o->error_file &&
        msr_error_file_write_ok(a->o->error_file, a->job.id,
                                (double)(msr_now_ns() - a->job.start_ns) / 1e9,
                                a->node.generation + 1, a->node.restart_count) != MSR_OK)
        MSR_ERROR("%s", msr_err_msg());
    return rc;
}

/* Records the job for `msrun status`; a failure costs only that. */
static void record_job(agent_t *a)
{
    int tls = msr_rpc_tls_enabled(&a->job.tls);
    char command[MSR_RUN_COMMAND_LEN], dashboard[MSR_HOSTPORT_LEN + 16] = "";
    msr_run_command_format(a->o->argv, command, sizeof command);
    if (a->o->dashboard_port > 0 && a->coord.pid > 0) {
        /* this node runs the coordinator, and so the page: where it listens */
        const char *addr = a->o->dashboard_addr ? a->o->dashboard_addr : "127.0.0.1";
        char hp[MSR_HOSTPORT_LEN];
        if (strcmp(addr, "0.0.0.0") == 0 || strcmp(addr, "::") == 0)
            addr = a->coord.host[0] ? a->coord.host : "127.0.0.1";
        msr_net_join(addr, a->o->dashboard_port, hp, sizeof hp);
        snprintf(dashboard, sizeof dashboard, "http://%s/", hp);
    }
    msr_run_record_t r = {
        .job_id = a->job.id,
        .coordinator = a->coord.target,
        .token = a->job.token,
        .tls_cert = tls ? a->job.tls.cert : NULL,
        .tls_key = tls ? a->job.tls.key : NULL,
        .tls_ca = tls ? a->job.tls.ca : NULL,
        .tls_server_name = tls ? a->job.tls.server_name : NULL,
        .pid = (int)getpid(),
        .node_rank = a->o->node_rank,
        .dashboard_port = a->o->dashboard_port,
        .start_time = msr_wall_time(),
        .command = command,
        .dashboard = dashboard,
    };
    if (msr_run_record_write(&r, a->files.run_record, sizeof a->files.run_record) != MSR_OK)
        MSR_WARN("msrun status will not find this job: %s", msr_err_msg());
}

static void loop_teardown(agent_t *a)
{
    for (int i = 0; i < a->loop.nsig; i++)
        event_free(a->loop.sig_ev[i]);
    if (a->loop.cron)
        event_free(a->loop.cron);
    a->loop.cron = NULL;
    if (a->loop.stdin_ev)
        event_free(a->loop.stdin_ev);
    a->loop.stdin_ev = NULL;
    msr_coord_child_unwatch(&a->coord);
    if (a->loop.elect_ev)
        event_free(a->loop.elect_ev);
    a->loop.elect_ev = NULL;
    msr_proxy_stop(a->proxy);
    msr_history_close(a->history);
    a->history = NULL;
    msr_link_destroy(a->link);
    msr_agent_relay_close(a);
    msr_reports_free(&a->reports); /* unacknowledged: their calls were cancelled with the link */
    msr_free(a->local.workers);
    msr_free(a->local.tails);
    msr_node_cleanup(&a->node);
    if (a->loop.base)
        event_base_free(a->loop.base);
}

int msr_agent_run(msr_options_t *o)
{
    agent_t a;
    memset(&a, 0, sizeof a);
    a.o = o;
    msr_coord_init(&a.coord, o, &a.job, msr_agent_on_coord_moved, &a);
    a.local.count = o->local_worker_num;
    a.files.log_dir_fd = -1;
    a.job.start_ns = msr_now_ns();
    msr_lprof_mark(o->profile_launch ? &a.prof.self : NULL, MSR_LPROF_PARSE, o->start_ns,
                   a.job.start_ns);
    msr_reports_init(&a.reports, &a.node, a.node_id, a.coord.host, on_report_retry, &a);
    msr_log_init("msrun", -1, -1);
    msr_log_set_level((msr_log_level_t)o->log_level);
    a.local.devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (a.local.devnull < 0) {
        fprintf(stderr, "msrun: error: /dev/null: %s\n", strerror(errno));
        return 2;
    }
    int rc = 2;
    msr_output_init(&a.local.output, o->tag_output, o->timestamps);
    a.local.output.metric = on_metric_line;
    a.local.output.metric_arg = &a;
    if (job_identity(&a) != 0)
        goto out_devnull;
    /* each run writes into a directory of its own: <log_dir>/<job id> */
    char run[MSR_LOG_RUN_NAME_LEN];
    if (o->log_dir && msr_log_run_dir_open(o->log_dir, a.job.id, &a.files.log_dir_fd, run,
                                           sizeof run) != MSR_OK) {
        fprintf(stderr, "msrun: error: %s\n", msr_err_msg());
        goto out_devnull;
    }
    if (o->log_dir) {
        snprintf(a.files.log_run_dir, sizeof a.files.log_run_dir, "%s/%s", o->log_dir, run);
        MSR_INFO("logs in %s", a.files.log_run_dir);
    }
    /* Block nothing, ignore SIGPIPE (a closed terminal must not kill msrun). */
    signal(SIGPIPE, SIG_IGN);
    /* The job's private directory holds the proxy's socket and the embedded
     * coordinator's state file. */
    if (msr_job_dir_create(a.job.id, a.job.dir, sizeof a.job.dir) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot create the job's directory: %s\n", msr_err_msg());
        rc = 1;
        goto out_devnull;
    }
    snprintf(a.files.socket_path, sizeof a.files.socket_path, "%s/agent.sock", a.job.dir);
    snprintf(a.coord.state_file, sizeof a.coord.state_file, "%s/coordinator.state", a.job.dir);
    rc = msr_agent_prof_start(&a);
    if (rc != 0)
        goto out_dir;
    msr_agent_prof_mark(&a, MSR_LPROF_TOKEN, a.job.start_ns);
    uint64_t t = msr_now_ns();
    rc = msr_coord_setup(&a.coord);
    if (rc != 0)
        goto out_dir;
    msr_agent_prof_mark(&a, MSR_LPROF_COORD, t);
    t = msr_now_ns();
    if (o->local_addr) /* --local_addr: the address this node advertises */
        snprintf(a.coord.host, sizeof a.coord.host, "%s", o->local_addr);
    record_job(&a);
    a.free_port = o->torch_port ? o->torch_port : msr_net_free_port(a.coord.host);
    rc = loop_setup(&a);
    msr_agent_prof_mark(&a, MSR_LPROF_SETUP, t);
    if (rc == 0)
        rc = loop_run(&a);
    t = msr_now_ns();
    int job_over =
        a.node.finished && (a.node.state == MSR_JOB_DONE || a.node.state == MSR_JOB_FAILED);
    loop_teardown(&a);
    msr_coord_child_stop(&a.coord, a.local.count && a.node.node_count > 1);
    msr_elect_destroy(a.coord.elect, job_over);
    a.coord.elect = NULL;
    msr_agent_prof_mark(&a, MSR_LPROF_TEARDOWN, t);
    msr_agent_prof_print(&a);
out_dir:
    if (a.coord.elect)
        msr_coord_child_kill(&a.coord);
    msr_elect_destroy(a.coord.elect, 0);
    msr_run_record_remove(a.files.run_record);
    msr_job_dir_remove(a.job.dir);
    msr_agent_prof_cleanup(&a);
out_devnull:
    msr_output_cleanup(&a.local.output);
    msr_free(a.local.places);
    if (a.files.log_dir_fd >= 0)
        close(a.files.log_dir_fd);
    close(a.local.devnull);
    return rc;
}
