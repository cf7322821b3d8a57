/* The job's coordinator as this node sees it: where it is, and when this
 * node runs it, the child process that does (the embedded coordinator).
 * coord_setup.c decides where it is before the agent's loop runs, starting
 * it here when this node should; coord_child.c starts, restarts and stops
 * the child. Event-loop thread only (before the loop: the agent's). */
#ifndef MSR_MSRUN_COORD_CHILD_H
#define MSR_MSRUN_COORD_CHILD_H

#include <stdint.h>
#include <sys/types.h>

#include <event2/event.h>

#include "launcher/elect.h"
#include "launcher/job.h"
#include "launcher/options.h"
#include "msrun/base.h"

/* How long a starting coordinator has to say its port. */
#define MSR_COORD_READY_MS       15000
/* The line a starting coordinator writes on its ready pipe ("port N" or
 * "error <why>") with its NUL. */
#define MSR_COORD_READY_LEN      512
/* The dashboard's one-time login code: random bytes, in hex with a NUL. */
#define MSR_DASHBOARD_CODE_BYTES 16
#define MSR_DASHBOARD_CODE_LEN   (2 * MSR_DASHBOARD_CODE_BYTES + 1)
/* How a child ended, for messages ("code 3", "SIGKILL", "taken over"). */
#define MSR_COORD_HOW_LEN        128
/* etcd's key prefix of the job, "/msrun/<job id>", with its NUL. */
#define MSR_ETCD_PREFIX_LEN      (MSR_JOB_ID_LEN + 8)

/* What a starting coordinator wrote on its ready pipe so far. */
typedef struct msr_coord_ready {
    char line[MSR_COORD_READY_LEN];
    size_t got;
} msr_coord_ready_t;

/* The coordinator moved to target (etcd: this node was elected and its
 * child listens): the agent's link and proxy follow. */
typedef void (*msr_coord_moved_fn)(void *arg, const char *target);

typedef struct msr_coord {
    /* the agent's, borrowed */
    const msr_options_t *o;
    msr_job_t *job;          /* its token is decided here when none was given */
    struct event_base *base; /* the loop, once it runs: restarts are watched there */
    msr_coord_moved_fn moved;
    void *moved_arg;

    /* where it is */
    char target[MSR_HOSTPORT_LEN]; /* host:port */
    char ip[MSR_IP_LEN];
    int port;
    char host[MSR_IP_LEN]; /* this node's address toward it: where peers reach this node */

    /* the embedded coordinator, when this node runs it */
    pid_t pid;   /* 0 if none */
    int fork_ok; /* msrun has not used gRPC yet: the first start may fork (msr_spawn_fork) */
    char bind[MSR_HOSTPORT_LEN];                 /* where it listens (restarts reuse it) */
    char state_file[MSR_JOB_FILE_LEN];           /* its state, for a restarted one */
    char dashboard_code[MSR_DASHBOARD_CODE_LEN]; /* "" none */
    char login_file[MSR_JOB_FILE_LEN];           /* the login URL's file in dir; "" none */
    uint64_t restarts;
    /* a start watched from the loop (a restart, a takeover) */
    struct event *ready_ev;
    int ready_fd; /* -1 unless one is under way */
    msr_coord_ready_t ready;
    char exit_how[MSR_COORD_HOW_LEN]; /* how the coordinator being replaced ended */

    /* --rdzv_backend=etcd (elect.h); elect NULL: static */
    msr_elect_t *elect;
    char etcd_prefix[MSR_ETCD_PREFIX_LEN];
    int64_t lease; /* the lease the child writes under; 0 none */
    int takeover;  /* the child starting is this node's after an election */
} msr_coord_t;

/* Sets c up with the agent's options and job (borrowed for c's life) and
 * moved (etcd's takeovers); nothing runs yet. */
void msr_coord_init(msr_coord_t *c, const msr_options_t *o, msr_job_t *job,
                    msr_coord_moved_fn moved, void *moved_arg);

/* coord_setup.c: decides where the coordinator is (c->target, c->host),
 * starting it here when this node should, and the job's token when none
 * was given. Before the loop runs. Prints why it failed and returns
 * msrun's exit status (2 bad input, 124 the job never formed), 0 on
 * success. */
int msr_coord_setup(msr_coord_t *c);

/* coord_child.c */

/* Starts `msrun coordinator` for this job listening on bind_addr (its token
 * in its environment, stdin /dev/null, its ready pipe at fd 3, its own
 * process group, SIGTERM when this msrun dies): while c->fork_ok (the
 * first start, before msrun has a thread or has used gRPC) in a fork of
 * msrun that runs the coordinator's main (msr_spawn_fork), else by exec of
 * msrun. Sets c->pid and
 * *ready_fd_p, the pipe's read end, on which it writes "port N\n" once it
 * listens or "error ...\n". */
msr_status_t msr_coord_child_spawn(msr_coord_t *c, const char *bind_addr, int *ready_fd_p);
/* Reads what is there on fd (non-blocking or readable): the port (> 0)
 * once the line is complete, 0 while more is to come, -1 if the child
 * failed (msr_err_msg() has its words). */
int msr_coord_ready_feed(msr_coord_ready_t *r, int fd);
/* Spawns and waits up to MSR_COORD_READY_MS for the port: the port, or -1
 * (msr_err_msg() says why; no child is left). Before the loop runs only. */
int msr_coord_child_start(msr_coord_t *c, const char *bind_addr);
/* MSR_NODE_ACT_COORD_RESTART: starts a new coordinator on the same address
 * and state file, and watches its ready pipe from the event loop, so
 * heartbeats, worker exits and signals are served while it comes up. */
void msr_coord_child_restart(msr_coord_t *c, const char *how);
/* etcd: this node won the election in the loop: starts a coordinator (its
 * ready pipe watched from the loop) that publishes itself once it listens. */
void msr_coord_child_takeover(msr_coord_t *c);
/* The coordinator child exited (how: "code N" or a signal's name); call
 * with c->pid already 0. 1 if the node's machine should hear of it, 0 if
 * it was a restart that failed (logged here). */
int msr_coord_child_exited(msr_coord_t *c, const char *how);
/* Kills and reaps the coordinator child, if any. */
void msr_coord_child_kill(msr_coord_t *c);
/* Stops the watch of a start under way (at the loop's end). */
void msr_coord_child_unwatch(msr_coord_t *c);
/* At the end: lets the child exit by itself once every node has left (up
 * to 10 s when others must hear the outcome, else 2 s), then SIGTERM and
 * SIGKILL. Nothing when there is no child. */
void msr_coord_child_stop(msr_coord_t *c, int others);

#endif
