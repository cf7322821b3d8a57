/* The coordinator: one actor that owns a job's membership, generations,
 * failures and key-value store. The core here answers calls through a
 * responder, so the gRPC server (server.c), unit tests and the fuzzer all
 * drive the same code. Every function must be called from one thread. */
#ifndef MSR_CLUSTER_COORD_H
#define MSR_CLUSTER_COORD_H

#include <stdatomic.h>
#include <stdint.h>

#include "cluster/failure.h"
#include "msrun/base.h"
#include "rendezvous/rpc.h"
#include "rendezvous/store_core.h"
#include "rendezvous/held.h"
#include "rendezvous/store_limits.h"

/* How the core answers the calls it is given. Each call is answered exactly
 * once (reply, reply_blob or fail), or the binding reports it cancelled
 * (msr_coord_cancel) before that. With a state file, an answer given while
 * changes are unsaved (the call's own write, or one its answer could tell
 * of) is held and given by reply_blob or fail from msr_coord_tick or
 * msr_coord_flush, once a save covers it. */
typedef struct msr_coord_responder {
    void (*reply)(void *call, const ProtobufCMessage *resp);
    /* takes a reference of its own if it keeps the blob */
    void (*reply_blob)(void *call, msr_blob_t *blob);
    /* code: an msr_rpc_code_t (gRPC's status code of the same number) */
    void (*fail)(void *call, int code, const char *message);
    /* the client's deadline (msr_now_ns units; MSR_DEADLINE_NEVER if none) */
    uint64_t (*deadline)(void *call);
    const char *(*peer)(void *call);
    /* one slot per call for the core's own bookkeeping */
    void (*set_data)(void *call, void *data);
    void *(*get_data)(void *call);
} msr_coord_responder_t;

/* msr_coord_config_t.join_hold_ms: a join's re-form is not held */
#define MSR_COORD_JOIN_HOLD_NONE (-1)

typedef struct msr_coord_config {
    const char *token; /* the job token (checked by the server binding) */
    /* Munge authentication (the server binding's too): a node without the
     * token gets it from an Auth call whose munge credential is of the
     * job's uid (msr_munge_job_uid()) and names job_id and this
     * coordinator (cluster/munge_auth.h). 0: Auth calls are refused. Needs
     * job_id. */
    int auth_munge;
    const char *munge_socket; /* munged's socket; NULL: libmunge's default */
    const char *job_id;       /* NULL or "": taken from the first node to join */
    int worker_num;           /* 0: taken from the first node to join */
    int local_worker_num;
    int max_restarts;        /* -1: taken from the first node to join */
    int min_nodes;           /* elastic range (both 0: a fixed size; taken from the */
    int max_nodes;           /* first node when the job is not configured here) */
    int64_t last_call_ms;    /* elastic: how long to wait for more nodes once MIN are in */
    int64_t node_timeout_ms; /* a node silent this long is lost */
    int64_t join_timeout_ms; /* the first generation must form within */
    /* elastic: how long a join's re-form waits at most for the workers'
     * checkpoint (msrun/store.h MSR_KEY_JOIN_*), from the join; 0:
     * join_timeout_ms; MSR_COORD_JOIN_HOLD_NONE: not at all */
    int64_t join_hold_ms;
    const char *state_file; /* NULL: no persistence; else a snapshot and a log
                             * of changes (docs/store.md), created 0600 */
    /* How far a save goes before its answers are released: 0 (the default)
     * waits for the disk (fdatasync), so an answered write survives a crash
     * of the node; 1 stops at the kernel (write(2)), so it survives any end
     * of the coordinator's process but not of the node -- for a state file
     * that does not outlive the node's boot anyway (the embedded
     * coordinator's, removed when its msrun ends). */
    int state_sync_process;
    /* A state file whose log has a bad record with valid records after it
     * (corruption, not a save cut short by a crash) is refused and left as
     * it is; 1: it is cut at the bad record instead (the records from it on
     * are dropped, and said so), and the job resumes from what precedes. */
    int state_repair;
    /* Instead of the state file: the same records in etcd (persist_etcd.c),
     * the snapshot at <etcd_prefix>/state and the changes under
     * <etcd_prefix>/log/. With etcd_lease, a write is applied only while
     * <etcd_prefix>/leader is held by that lease (a deposed coordinator
     * writes nothing). */
    const char *etcd_endpoints;
    const char *etcd_prefix;
    int64_t etcd_lease;
    /* The job's restarts and its end are logged at info instead of warn:
     * the msrun that embeds this coordinator reports them itself, so its
     * user reads each failure once. */
    int outcome_reported;
    /* A rank whose mean step time over MSR_STRAGGLER_WINDOW steps is this
     * many times the ranks' median is named a straggler (once per
     * generation); 0: MSR_STRAGGLER_FACTOR (cluster/straggler.h). */
    double straggler_factor;
    /* the store's limits; zeros: the defaults (rendezvous/store_limits.h) */
    msr_store_limits_t store_limits;
    /* the bounds of held calls, per client and in total, for the store's
     * waits and the coordinator's heartbeats alike; zeros: the defaults
     * (rendezvous/held.h) */
    msr_held_limits_t held_limits;
} msr_coord_config_t;

typedef struct msr_coord msr_coord_t;

msr_status_t msr_coord_create(const msr_coord_config_t *config,
                              const msr_coord_responder_t *responder, msr_coord_t **coord_p);
void msr_coord_destroy(msr_coord_t *coord);

/* Hands a call to the core; req stays the caller's and is not used after
 * this returns. */
void msr_coord_call(msr_coord_t *coord, void *call, msr_rpc_method_t method,
                    const ProtobufCMessage *req);

/* Tells the core that a call it holds ended without an answer. */
void msr_coord_cancel(msr_coord_t *coord, void *call);

/* Runs the timers that are due at now (answers waits whose deadline passed,
 * declares silent nodes lost, fails a job that did not form in time), then
 * saves what changed and releases the answers that waited for it (group
 * commit: call it once after each batch of msr_coord_call). After a failed
 * save the next attempt waits about 100 ms. */
void msr_coord_tick(msr_coord_t *coord, uint64_t now);

/* When msr_coord_tick next has something to do (MSR_DEADLINE_NEVER if not);
 * now or earlier while answers wait for a save. */
uint64_t msr_coord_next_deadline(const msr_coord_t *coord);

/* Saves what changed now and releases (or, when the save fails, fails with
 * INTERNAL) the held answers; nothing to do without a state file. */
void msr_coord_flush(msr_coord_t *coord);

/* Whether the job has ended (done or failed) and every node has left. */
int msr_coord_finished(const msr_coord_t *coord);

/* The job's state, for logs and tests. */
msr_job_state_t msr_coord_state(const msr_coord_t *coord);

/* Counts calls by method as the core saw them. */
uint64_t msr_coord_calls(const msr_coord_t *coord, msr_rpc_method_t method);

/* The job as Prometheus' text format (version 0.0.4) and as the JSON of
 * /api/job (docs/observe.md), appended to b: the core's part of the
 * dashboard (the server adds its own metrics). MSR_ERR_NO_MEMORY. */
struct msr_buf;
msr_status_t msr_coord_render_metrics(const msr_coord_t *coord, struct msr_buf *b);

/* /api/job gives the first ranks and the stragglers a curve of at most
 * this many (step, step ms, loss) points, spread over the whole run. */
#define MSR_OBS_HISTORY 128
msr_status_t msr_coord_render_job(const msr_coord_t *coord, struct msr_buf *b);

/* The bounds of a rank's output lines as a node keeps and sends them
 * (RankOutput; msrun/outtail.h) and the coordinator keeps them; ranks
 * asked for at once (more: 503); ranks whose last lines the coordinator
 * keeps (past it, the record fetched longest ago goes); how long an ask
 * waits for its node before it is answered with the last lines known. */
#define MSR_OUTPUT_LINES    64
#define MSR_OUTPUT_BYTES    8192
#define MSR_OUTPUT_LINE_MAX 400
#define MSR_OUTPUT_ASKS_MAX 64
#define MSR_OUTPUT_KEPT_MAX 256
#define MSR_OUTPUT_WAIT_MS  5000

/* /api/output?rank=RANK (docs/observe.md): the rank's last output lines as
 * JSON into b, and the HTTP status to answer with: 200 with the lines
 * (taken after the ask, or the last ones known when the rank's node is
 * gone or did not answer within MSR_OUTPUT_WAIT_MS: "stale" then says
 * why), 202 while they are on their way (the first request asks the node:
 * its held heartbeat is answered at once), 404 for a rank the job does not
 * have, 503 when too many ranks are asked for at once. now: msr_now_ns().
 * The core's thread. */
int msr_coord_render_output(msr_coord_t *coord, int rank, uint64_t now, struct msr_buf *b);

#endif
