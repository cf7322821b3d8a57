/* The coordinator core's records; private to cluster/. */
#ifndef MSR_CLUSTER_COORD_INTERNAL_H
#define MSR_CLUSTER_COORD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/heap.h"
#include "base/list.h"
#include "base/log.h"
#include "base/map.h"
#include "cluster/coord.h"
#include "cluster/failure.h"
#include "cluster/straggler.h"
#include "rendezvous/held.h"
#include "rendezvous/progress.h"
#include "rendezvous/relay.h"
#include "rendezvous/store_core.h"

/* An answer held until the changes it may reflect are saved (group commit):
 * a held call (rendezvous/held.h) of kind MSR_HELD_ANSWER, in
 * msr_coord.answers, released in order after the next save, or failed when
 * the save fails. A held heartbeat is a bare msr_held_t of kind
 * MSR_HELD_HEARTBEAT whose owner is its node_t. */
typedef struct answer {
    msr_held_t held;
    msr_blob_t *blob;    /* the packed answer, or NULL for a failure */
    msr_rpc_code_t code; /* the failure's status */
    char message[];      /* the failure's message */
} answer_t;

/* A write applied for (client_id, request_id), remembered so that a retry of
 * it gets the same answer instead of being applied again. */
typedef struct request_rec {
    msr_list_t link; /* in msr_coord.requests, oldest first */
    uint64_t client_id, request_id;
    uint32_t method;
    int saved; /* written to the state file */
    size_t len;
    uint8_t response[]; /* the packed answer */
} request_rec_t;

/* Most writes remembered for retries, and most bytes of their answers. */
#define MSR_REQUESTS_MAX       16384
#define MSR_REQUESTS_BYTES_MAX (8u << 20)

/* Failures kept in the job's history (msr_coord.history): each failed
 * generation's root cause, oldest first; past this many the oldest goes. */
#define MSR_FAILURE_HISTORY 16

typedef struct node {
    char id[32];
    char *host;
    int pid, local_worker_num, free_port;
    int wanted_rank;      /* -1: any */
    int rank;             /* node rank in the running generation, or -1 */
    int ready_generation; /* the generation it can start, -1 before any */
    int alive, left;
    uint64_t last_seen;
    uint64_t suspect_until;           /* its connection broke: lost unless it calls by then */
    uint64_t joined_seq;              /* order of arrival */
    msr_held_t *hb;                   /* the held heartbeat, if any */
    char relay[MSR_RELAY_ID_MAX + 1]; /* the relay it joined through ("": directly) */
    uint64_t machine;                 /* JoinRequest.machine (0: not told) */
    int machine_ranks;                /* the generation's ranks on it (0: not known) */
} node_t;

/* What the coordinator knows of a rank's progress (observe.c), for the
 * current generation. */
typedef struct rank_obs {
    int seen; /* reported in this generation */
    int node_rank;
    int64_t step;
    double step_time; /* the latest, seconds */
    double time;      /* wall-clock seconds of the latest report */
    uint64_t steps;   /* reports counted in this generation */
    msr_step_window_t window;
    msr_progress_scalar_t scalars[MSR_PROGRESS_SCALARS];
    uint32_t nscalars;
    int straggler;   /* named in this generation */
    int64_t suspect; /* 1 + the last step of the window it was first found slow over (0: none) */
    double ratio;    /* its mean over the median when last compared (0: not) */
} rank_obs_t;

/* A rank's curve for the page: (step, step time, loss) points of its
 * reports across generations, at most MSR_OBS_HISTORY of them spread over
 * the whole run (when full, every other point goes and only steps a
 * multiple of the doubled stride are kept from then on); a step at or
 * before the last point (a restart resuming from a checkpoint) replaces
 * the points from it on. MSR_OBS_HISTORY: cluster/coord.h. */
typedef struct rank_hist {
    int n;
    int64_t stride;
    int64_t step[MSR_OBS_HISTORY];
    float step_ms[MSR_OBS_HISTORY];
    float loss[MSR_OBS_HISTORY]; /* NaN: no scalar named loss */
} rank_hist_t;

/* The ranks whose curves /api/job carries: all of them up to this many,
 * else the first MSR_OBS_CURVES_FIRST and the stragglers named. */
#define MSR_OBS_CURVES       64
#define MSR_OBS_CURVES_FIRST 16

/* Stragglers named, kept for the answers and the page (the last 64). */
#define MSR_STRAGGLERS_KEPT 64

typedef struct straggler_rec {
    int rank, node_rank, generation;
    double ratio, step_time, median;
    int64_t step;
    double time; /* when it was named, wall-clock seconds */
} straggler_rec_t;

/* A rank's last output lines for /api/output (observe.c): asked for by
 * the dashboard, fetched from the rank's node through its heartbeat (the
 * held heartbeat answered early with the rank in output_ranks; the lines
 * come with the next one). */
typedef struct rank_out {
    uint64_t asked;    /* msr_now_ns of the pending ask; 0: none */
    int sent;          /* the ask went out in a heartbeat's answer */
    char ask_node[32]; /* the id of the node asked */
    uint64_t got;      /* msr_now_ns when lines last arrived; 0: never */
    double time;       /* wall-clock seconds the node took them */
    int node_rank;     /* of the node that sent them */
    char host[64];
    uint64_t total_lines; /* the rank's lines its node had seen then */
    msr_buf_t lines;      /* the lines as a JSON array, escaped */
} rank_out_t;

typedef struct msr_obs {
    int generation;     /* of the ranks' records; -1 before any */
    int64_t start_step; /* the lowest step reported in it (where a restart resumed); -1: none */
    rank_obs_t *ranks;
    size_t nranks;
    rank_hist_t **hist; /* [nhist], per rank (NULL until it reports) */
    size_t nhist;
    straggler_rec_t named[MSR_STRAGGLERS_KEPT];
    size_t nnamed;
    uint64_t progress_calls; /* Progress calls taken */
    uint64_t since_check;    /* of them, since the ranks were last compared */
    uint64_t step_reports;   /* rank-steps they covered */
    uint64_t dropped;        /* reports the senders could not keep */
    uint64_t stragglers;     /* named, all generations */
    double start;            /* wall-clock seconds this coordinator started */
    rank_out_t **outs;       /* [nouts], by rank: NULL until asked for */
    size_t nouts;
    size_t outs_kept; /* records in outs */
    int asks;         /* of them, with an ask pending */
} msr_obs_t;

struct msr_coord {
    msr_coord_config_t config;
    msr_coord_responder_t responder;
    int configured;
    char *job_id;
    int worker_num, local_worker_num, node_count, max_restarts;
    int min_nodes, max_nodes; /* elastic range; 0 when the size is fixed */
    msr_job_state_t state;
    int generation, restart_count;
    msr_failure_t failure;
    msr_failure_t history[MSR_FAILURE_HISTORY]; /* oldest first; no tails */
    int nhistory;
    char message[600];
    char master_addr[256];
    int master_port;
    node_t **nodes;
    size_t nnodes, cap;
    msr_store_core_t *store; /* keys, waits, barriers, allgathers (store_core.h) */
    msr_held_calls_t held;   /* every held call: the store's waits, heartbeats, answers */
    uint64_t form_deadline, next_check;
    uint64_t last_call; /* elastic: form (or take in joiners) at this time */
    uint64_t join_seq;
    /* elastic: a re-form held for the workers' checkpoint ends by then */
    uint64_t join_hold_until;
    /* elastic: the wall-clock time (ns since the epoch) of the join that
     * set last_call and join_hold_until, kept in the state file; 0: none */
    int64_t join_wall_ns;
    uint8_t *rank_done;
    int ndone;
    /* What changed since the last save (with a state file): */
    int dirty;             /* the job's record (members, state, generation, done ranks) */
    msr_map_t dirty_keys;  /* store keys set or deleted */
    int store_cleared;     /* the store was emptied (a new generation) */
    msr_list_t answers;    /* answers held until the next save (answer_t) */
    msr_list_t requests;   /* writes remembered for retries (request_rec_t) */
    msr_map_t request_map; /* the same, by request_key() */
    size_t request_bytes;  /* their answers' bytes */
    int new_requests;      /* records not yet saved */
    /* The state file: a snapshot then a log of changes (persist.c). */
    int log_fd;             /* open for appending, or -1 before the first save */
    uint64_t log_end;       /* bytes of whole records in the file */
    uint64_t snapshot_len;  /* bytes of its snapshot */
    uint32_t log_seq;       /* the next record's sequence number (the snapshot's is 0) */
    int need_snapshot;      /* write a whole snapshot at the next save */
    int save_failures;      /* saves failed in a row (logged at the first) */
    int closing;            /* being destroyed: answers go out at once */
    uint64_t retry_save_at; /* after a failed save: the next attempt */
    /* With etcd (persist_etcd.c): the client, the next log record's number,
     * and while etcd cannot be reached, when to try it again (answers are
     * not held meanwhile: the job runs on without failover). */
    struct msr_etcd *etcd;
    uint64_t etcd_seq;
    int etcd_down;
    uint64_t etcd_retry_at;
    uint64_t calls[MSR_RPC_METHOD_COUNT];
    msr_obs_t obs; /* progress reports and stragglers (observe.c) */
    /* Relays (relay.c): the batches being answered, while a batch's entry
     * is handed to the core its relay's id ("" otherwise), and the relays
     * that sent batches with their subtrees (all zero: none yet). */
    msr_list_t relay_batches;
    const char *relaying;
    msr_relay_cover_t relay_cover;
    /* the hosts of the relays in relay_cover, for the bounds of held
     * calls: "r:<relay id>" -> its host and subtree, "h:<host>" -> the
     * subtrees of its relays together (uintptr_t); and how long a relay
     * counts: "u:<relay id>" -> its batches in flight and alive nodes */
    msr_map_t relay_hosts;
    /* Kept counts and an index, so that no call costs O(nodes): nodes
     * alive, nodes ready for the generation (ready_for), nodes by id. */
    int nalive, nready;
    msr_map_t node_ids;
};

/* Marks the job's record changed (level is kept for the callers' sake: every
 * change is saved before the answers given after it are released). */
#define MARK_DIRTY(c, level) ((void)(level), (c)->dirty = 1)

/* ---- small facts of the job, for every file of the core ---- */

static inline int state_terminal(msr_job_state_t s)
{
    return s == MSR_JOB_DONE || s == MSR_JOB_FAILED;
}

static inline int state_forming(msr_job_state_t s)
{
    return s == MSR_JOB_WAITING || s == MSR_JOB_RESTARTING;
}

static inline int elastic(const msr_coord_t *c)
{
    return c->min_nodes > 0 && c->max_nodes > c->min_nodes;
}

/* The world size of the running generation. */
static inline int world_size(const msr_coord_t *c)
{
    return c->node_count * c->local_worker_num;
}

static inline int alive_nodes(const msr_coord_t *c)
{
    return c->nalive;
}

static inline int ready_for(const msr_coord_t *c, const node_t *n)
{
    return n->alive && n->ready_generation >= c->generation;
}

/* Every change of a node's alive or ready_generation goes through these,
 * which keep c->nalive and c->nready; msr_coord_recount() recomputes both
 * after the generation changes or the state is loaded. A change of alive
 * also counts the node for the relay it joined through (relay.c:
 * msr_coord_relay_nodes, below). */
/* The alive nodes recorded as joined through relay_id change by delta
 * (relay.c): a relay counts against the coordinator's bounds while it has
 * a batch in flight or such a node, and no longer once it has neither. */
void msr_coord_relay_nodes(msr_coord_t *c, const char *relay_id, int delta);

static inline void node_set_alive(msr_coord_t *c, node_t *n, int alive)
{
    int was = ready_for(c, n);
    if (n->relay[0] != '\0' && (alive != 0) != (n->alive != 0))
        msr_coord_relay_nodes(c, n->relay, alive ? 1 : -1);
    c->nalive += (alive != 0) - (n->alive != 0);
    n->alive = alive != 0;
    c->nready += ready_for(c, n) - was;
}

static inline void node_set_ready(msr_coord_t *c, node_t *n, int generation)
{
    int was = ready_for(c, n);
    n->ready_generation = generation;
    c->nready += ready_for(c, n) - was;
}

void msr_coord_recount(msr_coord_t *c);
/* Indexes n by its id (set): MSR_ERR_NO_MEMORY. */
msr_status_t msr_coord_node_index(msr_coord_t *c, node_t *n);

/* ---- relays (relay.c) ---- */

/* A relay's batch: each entry handed to the core as a sub-call. */
void msr_coord_relay(msr_coord_t *c, void *call, const Msr__RelayRequest *req);
/* The Relay call ended unanswered: its held entries end with it. Returns 1
 * when call was a relay's batch. */
int msr_coord_relay_cancel(msr_coord_t *c, void *call);
/* Records the relay n joined through (or calls through: "" once it calls
 * directly), moving its count from the relay it had. */
void msr_coord_node_set_relay(msr_coord_t *c, node_t *n, const char *relay_id);
/* Frees the batches left at the core's end (their calls are not answered). */
void msr_coord_relays_cleanup(msr_coord_t *c);
/* The responder, as the core uses it: a sub-call's answer goes to its
 * batch, any other call's to the binding. */
void msr_coord_io_reply(msr_coord_t *c, void *call, const ProtobufCMessage *resp);
void msr_coord_io_reply_blob(msr_coord_t *c, void *call, msr_blob_t *blob);
void msr_coord_io_fail(msr_coord_t *c, void *call, int code, const char *message);
uint64_t msr_coord_io_deadline(const msr_coord_t *c, void *call);
const char *msr_coord_io_peer(const msr_coord_t *c, void *call);
void msr_coord_io_set_data(msr_coord_t *c, void *call, void *data);
void *msr_coord_io_get_data(const msr_coord_t *c, void *call);

/* How loud a restart or the job's failure is (see outcome_reported). */
static inline msr_log_level_t outcome_level(const msr_coord_t *c)
{
    return c->config.outcome_reported ? MSR_LOG_INFO : MSR_LOG_WARN;
}

/* ---- answer.c: how the core answers ---- */

/* Sets up the table of held calls (c->held) with the responder as its io
 * (a failure is held like any answer while changes wait for a save; a held
 * call is answered 200 ms before its client's deadline, so the client
 * hears why) and registers the held answers' kind. */
void msr_coord_held_init(msr_coord_t *c);

/* Answer a call at once or, while changes wait for a save, hold the answer
 * until msr_coord_commit (an answer that cannot be held for lack of memory
 * fails with RESOURCE_EXHAUSTED: its change stays and is saved; a retry
 * with the same request id learns its outcome). */
void msr_coord_reply(msr_coord_t *c, void *call, const ProtobufCMessage *resp);
void msr_coord_answer_blob(msr_coord_t *c, void *call, msr_blob_t *blob);

/* Sends every held answer; after a failed save (why != NULL) fails them
 * instead, saying why. */
void msr_coord_answers_release(msr_coord_t *c, const char *why);

/* Saves what changed and releases the answers that waited for it; after a
 * failed save the next attempt waits about 100 ms. */
void msr_coord_commit(msr_coord_t *c);

/* A write carrying a request id the core has applied before: answers it as
 * the first time and returns 1 (else 0). */
int msr_coord_request_seen(msr_coord_t *c, void *call, msr_rpc_method_t method, uint64_t client_id,
                           uint64_t request_id);

/* Answers a write and, when it carries a request id, remembers the answer
 * (saved with the write: a retry after a restart is answered from it). */
int msr_coord_request_value(msr_coord_t *c, uint64_t client_id, uint64_t request_id,
                            int64_t *value_p);
void msr_coord_request_note(msr_coord_t *c, msr_rpc_method_t method, uint64_t client_id,
                            uint64_t request_id, const ProtobufCMessage *resp);
void msr_coord_reply_write(msr_coord_t *c, void *call, msr_rpc_method_t method, uint64_t client_id,
                           uint64_t request_id, const ProtobufCMessage *resp);

/* ---- members.c: nodes and their heartbeats ---- */

/* Registers the held heartbeats' kind in c->held. */
void msr_coord_heartbeats_init(msr_coord_t *c);

/* Join, Heartbeat and Leave calls. */
void msr_coord_join(msr_coord_t *c, void *call, const Msr__JoinRequest *req);
void msr_coord_heartbeat(msr_coord_t *c, void *call, const Msr__HeartbeatRequest *req);
void msr_coord_leave(msr_coord_t *c, void *call, const Msr__LeaveRequest *req);

/* The node of id, or NULL. */
node_t *msr_coord_node_find(msr_coord_t *c, const char *id);

/* Answers every held heartbeat: the job's state or generation changed. */
void msr_coord_wake_heartbeats(msr_coord_t *c);

/* The tick's part: declares lost the nodes silent past the node timeout or
 * whose connection broke and who did not call again (checked every
 * quarter of the node timeout, c->next_check). */
void msr_coord_check_nodes(msr_coord_t *c, uint64_t now);

/* The coordinator's loop took no call from `from` to `to` (a save that
 * waited on etcd or a disk): that time is not counted as any node's
 * silence. A heartbeat sent meanwhile waits in the server's queue, and a
 * node answered just before could not call again. */
void msr_coord_deaf(msr_coord_t *c, uint64_t from, uint64_t to);

/* ---- generation.c: the job's state and generations ---- */

/* Ends the running generation after a failure: a new one if restarts
 * remain, else the job fails. Takes the tail strings of f. */
void msr_coord_generation_failed(msr_coord_t *c, msr_failure_t *f);

/* Forms the generation once enough nodes are ready for it. */
void msr_coord_try_form(msr_coord_t *c);

/* A Report call: a worker's exit. */
void msr_coord_report(msr_coord_t *c, void *call, const Msr__ReportRequest *req);

/* The tick's part: takes nodes that joined an elastic job in (or forms
 * once its last call passed), and fails a generation that did not form in
 * time. */
void msr_coord_check_forming(msr_coord_t *c, uint64_t now);

/* coord.c: fails every waiting store call and empties the store (a new
 * generation starts from nothing). */
void msr_coord_store_reset(msr_coord_t *c, const char *why);

/* generation.c: tells the running generation's workers that `waiting`
 * nodes wait to join (MSR_KEY_JOIN_WAITING, msrun/store.h); the key goes
 * with the generation's store. */
void msr_coord_join_notice(msr_coord_t *c, int waiting);

/* After the state file is read back: a join that waited (join_wall_ns)
 * gets its last call and its hold again, counted from the join's time on
 * the wall clock (a bound already passed: at the next tick). */
void msr_coord_join_restore(msr_coord_t *c);

/* Notes a key as changed for the next save (with a state file). */
void msr_coord_key_changed(msr_coord_t *c, const char *key);

/* What node n is doing, in the words of NodeStatus.state. */
char *msr_coord_node_state(const msr_coord_t *c, const node_t *n);

/* Who the forming generation still waits for, into buf (len bytes): the
 * ranks no live node asked for ("node 1", "nodes 1, 3") when every live
 * node asked for its rank, else how many ("1 node"); "" when none is
 * missing. Lines read "<buf> not yet joined". */
void msr_coord_missing_describe(const msr_coord_t *c, char *buf, size_t len);

/* observe.c: a Progress call, and the records' cleanup. */
void msr_coord_progress(msr_coord_t *c, void *call, const Msr__ProgressRequest *req);
void msr_coord_obs_cleanup(msr_coord_t *c);

/* observe.c, /api/output's part in the heartbeats (coord.c calls them):
 * whether an ask for one of node n's ranks has not gone out yet (0 at
 * once while nobody asks); up to max such ranks into ranks, marked sent;
 * and the lines a heartbeat brought (only for asks sent to that node). */
int msr_coord_output_unsent(const msr_coord_t *c, const node_t *n);
size_t msr_coord_output_ranks(msr_coord_t *c, const node_t *n, int32_t *ranks, size_t max);
void msr_coord_output_take(msr_coord_t *c, const node_t *n, const Msr__HeartbeatRequest *req);
/* members.c: answers node n's held heartbeat now (if one is held). */
void msr_coord_wake_node(msr_coord_t *c, node_t *n);

/* members.c and generation.c, shared with persist.c. */
msr_status_t msr_coord_settings_valid(msr_coord_t *c);
node_t *msr_coord_node_add(msr_coord_t *c, const char *host);
/* Appends a copy of f, without its stderr tail, to the failure history,
 * dropping the oldest past MSR_FAILURE_HISTORY. Cannot fail. */
void msr_coord_history_add(msr_coord_t *c, const msr_failure_t *f);

/* Whether anything changed since the last save (always 0 without a state
 * file): answers given meanwhile are held until it is saved. */
int msr_coord_persist_pending(const msr_coord_t *c);

/* Saves what changed: a log record, fdatasync'ed, or a whole new snapshot
 * (temporary file, fsync, rename, fsync of the directory) when the log has
 * grown past MSR_LOG_COMPACT_FACTOR times the snapshot or a save failed
 * before. MSR_OK without a state file or when nothing changed. On failure,
 * msr_err_msg() says what failed (logged here at the first failure in a row
 * only) and the next save writes a whole snapshot. The caller releases or
 * fails the held answers. */
msr_status_t msr_coord_persist_save(msr_coord_t *c);

/* Reads the state file (snapshot, then the log up to its first torn or
 * corrupt record, which is cut off) into a freshly created core:
 * MSR_ERR_NOT_FOUND when there is none, MSR_ERR_CORRUPT when it cannot be
 * read or holds counts the job cannot have. */
msr_status_t msr_coord_persist_load(msr_coord_t *c);

/* Closes the state file. */
void msr_coord_persist_close(msr_coord_t *c);

/* Whether the core persists its state (a state file or etcd). */
int msr_coord_persisting(const msr_coord_t *c);

/* persist.c's records for persist_etcd.c: the whole state, or what changed
 * since the last save, packed as one framed record (length, CRC, payload);
 * NULL when out of memory. After a successful write, msr_coord_persist_saved
 * marks it all saved. */
uint8_t *msr_coord_persist_snapshot_record(msr_coord_t *c, size_t *len_p);
uint8_t *msr_coord_persist_change_record(msr_coord_t *c, size_t *len_p);
void msr_coord_persist_saved(msr_coord_t *c);
/* Applies one framed record read back (a snapshot, or a change); on
 * failure msr_err_msg() says what is wrong. */
msr_status_t msr_coord_persist_apply(msr_coord_t *c, const uint8_t *rec, size_t len, int snapshot);

/* persist_etcd.c: msr_coord_persist_save and _load with etcd. */
msr_status_t msr_coord_etcd_save(msr_coord_t *c);
msr_status_t msr_coord_etcd_load(msr_coord_t *c);
void msr_coord_etcd_close(msr_coord_t *c);

/* Request records (answer.c): the key a record is found by, and how one is
 * added (from a save or from the state file); takes nothing on failure. */
void msr_coord_request_key(uint64_t client_id, uint64_t request_id, char out[40]);
msr_status_t msr_coord_request_add(msr_coord_t *c, uint64_t client_id, uint64_t request_id,
                                   uint32_t method, const uint8_t *response, size_t len, int saved);
void msr_coord_requests_clear(msr_coord_t *c);

/* The log grows to this many times the snapshot (and at least
 * MSR_LOG_COMPACT_MIN bytes) before the snapshot is rewritten: saving costs
 * what changed, and reading the file back at most a few times the state. */
#define MSR_LOG_COMPACT_FACTOR 4
#define MSR_LOG_COMPACT_MIN    (1u << 20)

#endif
