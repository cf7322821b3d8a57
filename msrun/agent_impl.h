/* The agent's record, shared by its wiring (agent.c, report.c) and the
 * embedded coordinator's child (coord_child.c). Event-loop thread only. */
#ifndef MSR_MSRUN_AGENT_IMPL_H
#define MSR_MSRUN_AGENT_IMPL_H

#include <stdint.h>
#include <sys/types.h>

#include <event2/event.h>

#include "base/list.h"
#include "msrun/link.h"
#include "msrun/node.h"
#include "msrun/options.h"
#include "msrun/proxy.h"
#include "msrun/token.h"
#include "msrun/workers.h"
#include "rendezvous/rpc.h"

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
    pid_t coord_pid; /* the embedded coordinator, 0 if none */
    msr_proxy_t *proxy;
    char job_dir[240]; /* 0700, holds the proxy's socket */
    char socket_path[280];
    int log_dir_fd; /* --log_dir, checked and opened once; -1 without */
    char node_id[64];
    char host[64]; /* where peers reach this node */
    int free_port;
    int devnull;
    char coord_bind[300]; /* where the embedded coordinator listens (restarts) */
    char state_file[300]; /* the embedded coordinator's state */
    uint64_t coord_restarts;

    msr_node_t node; /* what the node does: the machine the wiring feeds */
    msr_worker_t *workers;
    int nworkers;
    int node_count; /* node.node_count, for stop_coordinator */

    struct event *cron; /* the one timer: the machine's and the reports' deadlines */
    struct event *sig_ev[8];
    int nsig;
    int performing;     /* in run_node: events fed meanwhile queue their actions */
    int leave_due;      /* MSR_NODE_ACT_LEAVE: leave once the loop ends */
    msr_list_t reports; /* report_t, not yet acknowledged */
} agent_t;

/* coord_child.c */
int start_coordinator(agent_t *a, const char *bind_addr, char *err, size_t errlen);
int setup_coordinator(agent_t *a);
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
