/* The node's store proxy: workers call it on a unix socket in the job's
 * 0700 directory; it forwards their calls to the coordinator and combines a
 * node's Barrier and Allgather participants into one upstream call, so the
 * coordinator sees one client per node (as PMIx daemons do). It runs in a
 * thread of its own; start and stop it from the agent's thread. */
#ifndef MSR_MSRUN_PROXY_H
#define MSR_MSRUN_PROXY_H

#include <stdint.h>

#include "msrun/base.h"
#include "rendezvous/held.h"
#include "rendezvous/progress.h"
#include "rendezvous/rpc.h"

typedef struct msr_proxy msr_proxy_t;

/* Listens on socket_path (which must not exist) and forwards to upstream
 * ("host:port") with token, over TLS when msr_rpc_tls_enabled(tls) (read
 * here, not kept); calls without the token are refused too. The workers'
 * unix socket itself needs no TLS. A barrier or allgather may name at most
 * local_workers participants on this node (its local_count; more is
 * refused, never allocated). */
msr_status_t msr_proxy_start(const char *socket_path, const char *upstream, const char *token,
                             const msr_rpc_tls_t *tls, int local_workers,
                             const msr_held_limits_t *held, msr_proxy_t **proxy_p);

/* Upstream calls started from now on go to upstream (same token and TLS);
 * those in flight finish where they were sent. The agent's thread. */
msr_status_t msr_proxy_retarget(msr_proxy_t *proxy, const char *upstream);

/* The node's progress goes to the relay at target ("host:port"; same token
 * and TLS, its certificate checked against server_name when not NULL),
 * which batches it with its subtree's (docs/architecture.md, "Relays"),
 * until a call through it fails: that call, and every one after it, then
 * goes upstream. The workers' store calls go there too (the relay
 * forwards them over its one connection) until one finds the relay gone
 * (UNAVAILABLE) or not forwarding (UNIMPLEMENTED): that call is sent
 * upstream again, and every one after it goes there. Once, before the node has joined; the agent's
 * thread. MSR_ERR_INVALID_ARG when called twice or a TLS file cannot be read, MSR_ERR_NO_MEMORY. */
msr_status_t msr_proxy_set_relay(msr_proxy_t *proxy, const char *target, const char *server_name);

/* Fails what is held, stops the thread, removes the socket, frees. NULL is
 * fine. */
void msr_proxy_stop(msr_proxy_t *proxy);

/* What the proxy heard from a worker's libmsrun beats. */
typedef struct msr_beat_info {
    uint64_t last_beat_ns; /* msr_now_ns() of the last beat */
    uint64_t progress;     /* the worker's msr_heartbeat() count */
    uint64_t progress_ns;  /* when that count last changed */
    int peer_lost;         /* it said a communicator of its lost a peer */
} msr_beat_info_t;

/* The beats of the worker (rank, pid); 0 if it never beat. Any thread. */
int msr_proxy_beat_info(msr_proxy_t *proxy, int rank, int pid, msr_beat_info_t *info_p);

/* The node's identity in the generation its workers now run: progress goes
 * upstream with it, and node rank 0 shows the stragglers the coordinator
 * names on msrun's terminal (once each). Any thread. */
void msr_proxy_set_member(msr_proxy_t *proxy, const char *node_id, int node_rank, int generation);

/* Every report of this node's ranks from now on goes to history too (NULL:
 * nowhere), which must outlive the proxy or the next call. Any thread. */
typedef struct msr_history msr_history_t;
void msr_proxy_set_history(msr_proxy_t *proxy, msr_history_t *history);

/* A worker's printed metric line (rendezvous/progress.h), recorded as its
 * report at wall-clock time `time`. Any thread; never waits for the
 * network. */
void msr_proxy_report_line(msr_proxy_t *proxy, int rank, const msr_metric_line_t *m, double time);

/* Calls received from workers and calls sent upstream so far (read from
 * the agent thread; approximate while running). */
uint64_t msr_proxy_calls_in(const msr_proxy_t *proxy);
uint64_t msr_proxy_calls_up(const msr_proxy_t *proxy);

/* Workers' Fetch calls answered from the node's cache alone, and Fetch
 * calls sent upstream (any thread; approximate while running). */
void msr_proxy_fetch_stats(const msr_proxy_t *proxy, uint64_t *hits_p, uint64_t *up_p);

#endif
