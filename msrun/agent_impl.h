/* The agent's record, shared by its files: agent.c (start, end, the timer and the actions),
 * agent_events.c (signals, child exits, stdin, the election) and agent_calls.c (its calls to the
 * coordinator). The coordinator's child and the reports keep their own state (coord_child.h,
 * report.h) and see only the parts of the agent they are given. Event-loop thread only. */
#ifndef MSR_MSRUN_AGENT_IMPL_H
#define MSR_MSRUN_AGENT_IMPL_H

#include <event2/event.h>

#include "launcher/coord_child.h"
#include "base/lprof.h"
#include "launcher/cpus.h"
#include "launcher/job.h"
#include "launcher/link.h"
#include "launcher/node.h"
#include "launcher/options.h"
#include "launcher/outtail.h"
#include "launcher/proxy.h"
#include "launcher/report.h"
#include "launcher/rundir.h"
#include "launcher/workers.h"

/* The id the coordinator gives a node at Join, with its NUL. */
#define MSR_NODE_ID_LEN   64
/* The signals the agent watches: SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1,
 * SIGUSR2. */
#define MSR_AGENT_SIGNALS 6

/* A local rank's last output lines, kept across generations for the
 * dashboard's /api/output (docs/observe.md). */
typedef struct agent_tail {
    msr_out_tail_t lines;
    int rank;      /* whose lines they are; -1 before any */
    int want_rank; /* the coordinator asked for them under this rank; -1 not */
} agent_tail_t;

/* This node's workers and what they write to. */
typedef struct agent_local {
    msr_worker_t *workers; /* [count] */
    int count;             /* --local_worker_num */
    agent_tail_t *tails;   /* [count] */
    /* --bind_to's CPUs of each local worker (NULL: unbound), once placed */
    msr_cpu_place_t *places;
    int placed;
    msr_output_t output; /* the terminal, shared by the workers' output */
    int devnull;
} agent_local_t;

/* This msrun's files. */
typedef struct agent_files {
    int log_dir_fd; /* this run's directory in --log_dir, made and opened once; -1 without */
    char log_run_dir[MSR_LOG_RUN_DIR_LEN];    /* its path, for messages */
    char socket_path[MSR_JOB_FILE_LEN];       /* the proxy's, in the job's directory */
    char run_record[MSR_RUN_RECORD_PATH_LEN]; /* the record for `msrun status`; "" if none */
} agent_files_t;

/* The event loop and what it watches besides the workers' streams. */
typedef struct agent_loop {
    struct event_base *base;
    struct event *cron; /* the one timer: the machine's and the reports' deadlines */
    struct event *sig_ev[MSR_AGENT_SIGNALS];
    int nsig;
    struct event *elect_ev; /* etcd's events (coord.elect); NULL: static */
    int performing;         /* in msr_agent_run_node: events fed meanwhile queue their actions */
    int leave_due;          /* MSR_NODE_ACT_LEAVE: leave once the loop ends */
    struct event *stdin_ev; /* --exit_on_stdin_eof: stdin watched; NULL: not */
} agent_loop_t;

/* --profile_launch: this msrun's phases and, per local worker, what the
 * agent saw of it (fork, reaped); the workers' own come from their files
 * PREFIX.RANK in the job's directory (base/lprof.h). */
typedef struct agent_prof {
    int on;
    msr_lprof_t self;
    msr_lprof_t *workers; /* [local.count] */
    uint64_t joining;     /* when the first join was sent */
    char prefix[MSR_JOB_FILE_LEN];
} agent_prof_t;

typedef struct agent {
    msr_options_t *o;
    msr_job_t job;                 /* who the job is */
    msr_coord_t coord;             /* where its coordinator is; the child when this node runs it */
    msr_node_t node;               /* what the node does: the machine the wiring feeds */
    char node_id[MSR_NODE_ID_LEN]; /* given at Join */
    int free_port;                 /* offered to the job (torch's MASTER_PORT) */
    msr_link_t *link;              /* the calls to the coordinator */
    msr_link_t *relay_link;        /* --relay: joins and heartbeats through it; NULL: none */
    int relay_failed;              /* its calls failed: the coordinator's link from then on */
    char relay_addr[300];          /* the relay_link's HOST:PORT */
    char relay_name[32];           /* "relay-<group>" (--relays), or "the relay" */
    struct agent_relay_srv
        *relay_srv;         /* --relays: the group's relay this node serves; NULL: none */
    msr_proxy_t *proxy;     /* the workers' store calls */
    msr_history_t *history; /* the run's history in --log_dir (history.h); NULL: none */
    msr_reports_t reports;  /* workers' exits not yet acknowledged */
    agent_local_t local;
    agent_files_t files;
    agent_loop_t loop;
    agent_prof_t prof;
} agent_t;

/* agent.c: feeds nothing; performs the machine's queued actions and arms
 * the timer. Call after feeding an event. */
void msr_agent_run_node(agent_t *a);

/* agent_events.c: what happens outside the machine, fed to it (then
 * msr_agent_run_node). on_coord_moved: the coordinator is now at target
 * (msr_coord_init's callback; arg is the agent); on_elect, on_signal,
 * on_stdin: the loop's events' callbacks (arg is the agent); reap: waits
 * for every child that exited (the coordinator's, the workers). */
void msr_agent_on_coord_moved(void *arg, const char *target);
void msr_agent_on_elect(evutil_socket_t fd, short what, void *arg);
void msr_agent_on_signal(evutil_socket_t sig, short what, void *arg);
void msr_agent_on_stdin(evutil_socket_t fd, short what, void *arg);
void msr_agent_reap(agent_t *a);

/* agent_calls.c: the node's calls to the coordinator. Join and Heartbeat
 * answer into the node's machine (then msr_agent_run_node); a call that
 * cannot be sent is fed as a send failure. Leave waits up to 2 s. */
void msr_agent_join_send(agent_t *a);
void msr_agent_heartbeat_send(agent_t *a);
void msr_agent_leave(agent_t *a);

/* agent_relay.c: the link to the relay (--relay, or the group's under
 * --relays) and the group's relay when this node serves it. open: once
 * the loop exists; nothing without a relay (0, or 1 with a message
 * printed). close: destroys both (the link's calls cancelled, the relay's
 * nodes sent to the coordinator); again does nothing. */
int msr_agent_relay_open(agent_t *a);
/* The store proxy's progress through the node's relay, if it has one: 0,
 * or 1 (said on stderr) when its channel cannot be made. */
int msr_agent_relay_proxy(agent_t *a);
void msr_agent_relay_close(agent_t *a);

/* agent_prof.c: --profile_launch. start: once the job's directory exists
 * (sets the workers' MSR_PROFILE_LAUNCH, or unsets it when off; 0, or 1
 * with a message printed). mark: a phase of this msrun from start_ns to
 * now. print: the table on stderr, with the workers' files read. All do
 * nothing when the option is off. */
int msr_agent_prof_start(agent_t *a);
void msr_agent_prof_mark(agent_t *a, msr_lprof_phase_t ph, uint64_t start_ns);
void msr_agent_prof_print(agent_t *a);
void msr_agent_prof_cleanup(agent_t *a);

#endif
