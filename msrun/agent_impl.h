/* The agent's record, shared by its wiring (agent.c, report.c) and the
 * embedded coordinator's child (coord_child.c). Event-loop thread only. */
#ifndef MSR_MSRUN_AGENT_IMPL_H
#define MSR_MSRUN_AGENT_IMPL_H

#include <stdint.h>
#include <sys/types.h>

#include <event2/event.h>

#include "base/list.h"
#include "msrun/elect.h"
#include "msrun/link.h"
#include "msrun/node.h"
#include "msrun/options.h"
#include "msrun/proxy.h"
#include "msrun/token.h"
#include "msrun/workers.h"
#include "rendezvous/rpc.h"

/* How long a starting coordinator has to say its port. */
#define MSR_COORD_READY_MS 15000

/* What a starting coordinator wrote on its ready pipe so far. */
typedef struct msr_coord_ready {
    char line[512];
    size_t got;
} msr_coord_ready_t;

typedef struct agent {
    msr_options_t *o;
    struct event_base *base;
    msr_link_t *link;
    char coord_target[300]; /* host:port of the coordinator */
    char coord_ip[64];
    int coord_port;
    char token[MSR_TOKEN_MAX + 1]; /* "" until decided (setup_coordinator) */
    char token_file[300];          /* the token this node generated, for the others */
    msr_rpc_tls_t tls;             /* strings owned by the options */
    char job_id[256];
    pid_t coord_pid;         /* the embedded coordinator, 0 if none */
    char dashboard_code[33]; /* its dashboard's one-time login code; "" none */
    msr_proxy_t *proxy;
    char job_dir[240]; /* 0700, holds the proxy's socket */
    char socket_path[280];
    int log_dir_fd; /* this run's directory in --log_dir, made and opened once; -1 without */
    char log_run_dir[4400]; /* its path, for messages */
    msr_output_t output;    /* the terminal, shared by the workers' output */
    char node_id[64];
    char host[64]; /* where peers reach this node */
    int free_port;
    int devnull;
    char coord_bind[300]; /* where the embedded coordinator listens (restarts) */
    char state_file[300]; /* the embedded coordinator's state */
    uint64_t coord_restarts;
    struct event *coord_ready_ev; /* a restarted coordinator's ready pipe */
    int coord_ready_fd;           /* -1 unless a restart is under way */
    msr_coord_ready_t coord_ready;
    char coord_exit_how[128]; /* how the coordinator being replaced ended */

    /* --rdzv_backend=etcd (elect.h); NULL: static */
    msr_elect_t *elect;
    struct event *elect_ev;
    char etcd_prefix[300]; /* /msrun/<job> */
    int64_t coord_lease;   /* the lease the coordinator child writes under; 0 none */
    int coord_takeover;    /* the coordinator starting is this node's after an election */

    msr_node_t node; /* what the node does: the machine the wiring feeds */
    msr_worker_t *workers;
    int nworkers;
    /* [nworkers]: each local rank's last output lines, kept across
     * generations for the dashboard's /api/output (docs/observe.md) */
    struct agent_tail {
        msr_out_tail_t lines;
        int rank;      /* whose lines they are; -1 before any */
        int want_rank; /* the coordinator asked for them under this rank; -1 not */
    } * tails;
    /* --bind_to's CPUs of each local worker (NULL: unbound), once placed */
    msr_cpu_place_t *places;
    int placed;
    int node_count; /* node.node_count, for stop_coordinator */

    struct event *cron; /* the one timer: the machine's and the reports' deadlines */
    struct event *sig_ev[8];
    int nsig;
    int performing;     /* in run_node: events fed meanwhile queue their actions */
    int leave_due;      /* MSR_NODE_ACT_LEAVE: leave once the loop ends */
    msr_list_t reports; /* report_t, not yet acknowledged */

    char run_record[4200]; /* this msrun's record for `msrun status` (rundir.h); "" if none */
    uint64_t start_ns;     /* when msrun started (monotonic), for --error_file */
} agent_t;

/* coord_child.c: the embedded coordinator, a child started with msr_spawn */

/* Starts `msrun coordinator` for this job listening on bind_addr (its token
 * in its environment, stdin /dev/null, its ready pipe at fd 3, its own
 * process group, SIGTERM when this msrun dies). Sets a->coord_pid and
 * *ready_fd_p, the pipe's read end, on which it writes "port N\n" once it
 * listens or "error ...\n". */
msr_status_t msr_coord_child_spawn(agent_t *a, const char *bind_addr, int *ready_fd_p);
/* Reads what is there on fd (non-blocking or readable): the port (> 0)
 * once the line is complete, 0 while more is to come, -1 if the child
 * failed (msr_err_msg() has its words). */
int msr_coord_ready_feed(msr_coord_ready_t *r, int fd);
/* MSR_NODE_ACT_COORD_RESTART: starts a new coordinator on the same address
 * and state file, and watches its ready pipe from the event loop, so
 * heartbeats, worker exits and signals are served while it comes up. */
void msr_coord_child_restart(agent_t *a, const char *how);
/* The coordinator child exited (how: "code N" or a signal's name); call
 * with a->coord_pid already 0. 1 if the node's machine should hear of it,
 * 0 if it was a restart that failed (logged here). */
int msr_coord_child_exited(agent_t *a, const char *how);
/* Kills and reaps the coordinator child, if any. */
void msr_coord_child_kill(agent_t *a);
/* Spawns and waits up to MSR_COORD_READY_MS for the port: the port, or -1
 * (msr_err_msg() says why; no child is left). Before the loop runs only. */
int start_coordinator(agent_t *a, const char *bind_addr);
int setup_coordinator(agent_t *a);
/* etcd: this node won the election in the loop: starts a coordinator (its
 * ready pipe watched from the loop) that publishes itself once it listens. */
void msr_coord_child_takeover(agent_t *a);
/* etcd: the coordinator is now at target: links and proxy follow. */
void msr_agent_coord_moved(agent_t *a, const char *target);
void stop_coordinator(agent_t *a);

/* report.c: a worker's exit, sent until the coordinator takes it. */
void msr_report_exit(agent_t *a, const msr_worker_t *w, const msr_node_action_t *act);
/* Sends the reports whose retry is due; returns the earliest retry still
 * armed (monotonic ns), 0 if none. */
uint64_t msr_reports_cron(agent_t *a, uint64_t now);
/* Frees every report (their calls were cancelled with the link). */
void msr_reports_free(agent_t *a);

/* agent.c: feeds nothing; performs the machine's queued actions and arms
 * the timer. Call after feeding an event. */
void msr_agent_run_node(agent_t *a);

#endif
