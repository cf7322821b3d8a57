/* rdzv_scale's pieces (rdzv_scale.c's header describes the benchmark): the
 * simulation every piece drives, and what each piece offers the others.
 * All run on the one thread of the benchmark; the simulation's calls are
 * answered as its loop is polled (rdzv_drain). */
#ifndef RDZV_SCALE_IMPL_H
#define RDZV_SCALE_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rendezvous/rpc.h"

/* The job's token, given to the coordinator and sent by every client. */
#define RDZV_TOKEN "rdzv-scale-token"

typedef struct sim {
    int nodes, ranks, bytes, direct, clients, dashboard, lazy;
    int store_count; /* --store_count: nodes do not tell their machine */
    int relay;       /* nodes per relay (its subtree); 0: every node calls itself */
    int levels;      /* relay mode: levels of relays (1: nodes -> relays -> coordinator) */
    void (*after_poll)(struct sim *s); /* relay mode: the upper relays' flush */
    void *upper;                       /* relay mode: rdzv_relay.c's upper levels */
    int *node_rank;                    /* relay mode: each node's rank in the formed job */
    int progress; /* --progress: rounds of every node's Progress after the run */
    pid_t coord;  /* the coordinator's process */
    /* --relay --progress: the rounds' wall time (ns) and the coordinator's
     * CPU (ms), sent within the join step and taken out of its times */
    uint64_t progress_ns;
    double progress_cpu_ms;
    int nch; /* connections: clients share them round robin past the limit */
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t **ch;
    char (*ids)[32];
    int pending, failed;
    msr_rpc_method_t entry_method; /* of the relayed calls in flight */
    size_t want_bytes;
    char err[300];
} sim_t;

/* What a run measured, for --model. */
typedef struct measured {
    int nodes, relay, levels;
    double connect_us, join_us; /* the coordinator's CPU per node in each phase */
    double join_ms, total_ms;   /* wall time of connect + join */
} measured_t;

/* rdzv_calls.c. start_op: starts a call of client (a channel); node is the
 * simulated node it is for; 0, or -1 when it cannot start. drain: polls
 * until no call is in flight; 0, or -1 when the loop failed or a call did
 * (s->err says which). make_join, make_heartbeat: node n's request, built
 * in space (a Msr__JoinRequest, a Msr__HeartbeatRequest; a join's host is
 * the caller's to set). lazy_exchange, exchange_all: the exchange of the
 * addresses in eptr[nodes * ranks] (see rdzv_scale.c's header); 0 or -1. */
int rdzv_start_op(sim_t *s, int client, int node, msr_rpc_method_t m, const ProtobufCMessage *req);
/* The client whose connection carries node n's store calls: its own, or
 * in relay mode its top relay's (a relay forwards its nodes' store calls
 * over its one connection upstream). */
int rdzv_node_client(const sim_t *s, int n);
int rdzv_drain(sim_t *s);
const ProtobufCMessage *rdzv_make_join(sim_t *s, int n, void *space);
/* What the coordinator must tell each node of its machine's ranks: a
 * machine each (its own ranks), or 0 with --store_count. */
int rdzv_machine_ranks(const sim_t *s);
const ProtobufCMessage *rdzv_make_heartbeat(sim_t *s, int n, void *space);
int rdzv_lazy_exchange(sim_t *s, Msr__Contribution **eptr);
int rdzv_exchange_all(sim_t *s, Msr__Contribution **eptr);

/* rdzv_relay.c: every node joins and reports ready through s->levels
 * levels of relays of fan-in s->relay (the top level's relays one per
 * channel); 0, or -1 with s->err set. rdzv_relay_top: how many relays the
 * top level of a run of nodes has. */
int rdzv_relay_join(sim_t *s);
int rdzv_relay_top(int nodes, int relay, int levels);

/* rdzv_scale.c. coord_cpu_ms: the CPU time (user + system) the
 * coordinator has used, in ms; -1 if unknown. progress_line: prints the
 * line of s->progress rounds that took wall_ms and cpu_ms of the
 * coordinator's CPU. */
double rdzv_coord_cpu_ms(const sim_t *s);
void rdzv_progress_line(const sim_t *s, double wall_ms, double cpu_ms);

/* rdzv_dashboard.c. progress_round: one Progress call per node, each of
 * its ranks a window of step times ending at step and a loss (as a node's
 * proxy sends once a second), made by send(s, node, req, arg) (which
 * counts it in s->pending), or when send is NULL on the node's channel;
 * 0 or -1. */
typedef int (*rdzv_send_t)(sim_t *s, int node, const ProtobufCMessage *req, void *arg);
int rdzv_progress_round(sim_t *s, int64_t step, rdzv_send_t send, void *arg);

/* rdzv_dashboard.c. free_port: a TCP port free on loopback now, or -1.
 * dashboard_phase: the dashboard's line for the job formed on s, its
 * coordinator serving the dashboard on port; 0 or -1. */
int rdzv_free_port(void);
int rdzv_dashboard_phase(sim_t *s, int port);

/* rdzv_model.c. record: keeps a run's measurement (past 32, dropped).
 * print_model: the model fitted to the runs kept, for ranks a node and
 * relays of relay nodes, rtt_us the network's assumed round trip. */
void rdzv_model_record(const measured_t *m);
void rdzv_print_model(int ranks, int relay, int levels, double rtt_us);

#endif
