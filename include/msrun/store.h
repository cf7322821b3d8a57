/* libmsrun's job context and key-value store: rank, size, and the store
 * calls (set, get, add, compare-set, delete, num_keys, barrier, allgather) that reach
 * the job's coordinator through the node's msrun or directly. */
#ifndef MSRUN_STORE_H
#define MSRUN_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A worker's handle on its job. One per process is the usual case; every
 * call below may be made from any thread at the same time unless it says
 * otherwise. */
typedef struct msr_ctx msr_ctx_t;

/* Joins the job that the environment describes. Under msrun that is
 * MSR_RANK, MSR_WORLD_SIZE, MSR_LOCAL_RANK, MSR_LOCAL_WORLD_SIZE,
 * MSR_NODE_RANK, MSR_NODE_COUNT, MSR_GENERATION, MSR_JOB_ID and either
 * MSR_AGENT (the node's msrun) or MSR_COORDINATOR and MSR_TOKEN (the
 * coordinator directly, e.g. for programs started by another launcher; the
 * rank and size may then come from MSR_RANK/MSR_WORLD_SIZE or from Slurm's
 * SLURM_PROCID/SLURM_NTASKS). With neither MSR_AGENT nor MSR_COORDINATOR,
 * a job of one rank whose store lives in this process. The default deadline
 * of every call is MSR_TIMEOUT seconds (300 if unset).
 *
 * Under msrun, and in a job of one rank, msr_init does not contact the
 * coordinator (the first store call does). In direct mode without
 * MSR_GENERATION it asks the coordinator for the job's generation, within
 * the default deadline, and so may also fail like a store call
 * (MSR_ERR_UNREACHABLE, MSR_ERR_TIMEOUT, MSR_ERR_PERMISSION...).
 *
 * Fails with MSR_ERR_INVALID_ARG when the environment is missing or
 * inconsistent (msr_last_error() says which variable), MSR_ERR_NO_MEMORY.
 * On success *ctx_p is the caller's until msr_finalize. */
MSR_API msr_status_t msr_init(msr_ctx_t **ctx_p);

/* Leaves the job and frees ctx. NULL does nothing. No other call on ctx may
 * run at the same time or after. */
MSR_API void msr_finalize(msr_ctx_t *ctx);

MSR_API int msr_rank(const msr_ctx_t *ctx);
MSR_API int msr_world_size(const msr_ctx_t *ctx);
MSR_API int msr_local_rank(const msr_ctx_t *ctx);
MSR_API int msr_local_world_size(const msr_ctx_t *ctx);
MSR_API int msr_node_rank(const msr_ctx_t *ctx);
MSR_API int msr_node_count(const msr_ctx_t *ctx);
/* The restart round this process belongs to (0 at first start). */
MSR_API int msr_generation(const msr_ctx_t *ctx);
MSR_API const char *msr_job_id(const msr_ctx_t *ctx);

/* The default deadline of calls made on ctx, in milliseconds; ms < 0 means
 * none (wait forever is never the default). */
MSR_API void msr_set_timeout(msr_ctx_t *ctx, int64_t ms);
MSR_API int64_t msr_timeout(const msr_ctx_t *ctx);

/* Tells the node's msrun that this worker makes progress (call it once per
 * training step, say). Under msrun --worker_timeout, a worker that has called
 * it once and then does not for the timeout is killed as hung; a worker
 * whose process stops (its libmsrun beat stops) is killed either way.
 * Cheap (an atomic increment); any thread. */
MSR_API void msr_heartbeat(msr_ctx_t *ctx);

/* Tells the node's msrun that a communication peer of this worker was lost,
 * so that if the worker now fails, its failure is known to follow another's:
 * the coordinator then names the failure the loss followed as the root cause
 * (the rank killed, say), not this worker's exit that merely came first.
 * libmsrun's communicators call it themselves when one returns
 * MSR_ERR_PEER_LOST; a program with communication of its own (Gloo, say)
 * calls it when that reports a lost peer, before it exits. Once per process
 * (later calls do nothing); waits for the node's msrun at most 0.5 s; does
 * nothing for a worker started without msrun. Any thread. */
MSR_API void msr_note_peer_lost(msr_ctx_t *ctx);

/* ---- an elastic job growing (docs/checkpoint.md "Elastic jobs") ----
 * When a node joins a running elastic job (msrun --nnodes=MIN:MAX), the
 * coordinator sets MSR_KEY_JOIN_WAITING in the store (its value: the
 * nodes waiting, as decimal text) and re-forms the job to take the node in
 * after msrun --last_call. A program that checkpoints can make that
 * re-form come at its next checkpoint instead of throwing the steps since
 * its last one away: one rank sets MSR_KEY_JOIN_SAVES when the
 * generation starts; seeing MSR_KEY_JOIN_WAITING (msr_store_get with
 * wait_ms 0, between steps), the ranks save, then one sets
 * MSR_KEY_JOIN_READY and the ranks wait to be stopped. The coordinator
 * holds the re-form while SAVES is set without READY, for at most msrun
 * --cluster_time_out from the join. The keys go with the generation (the
 * store is emptied when it ends). */
#define MSR_KEY_JOIN_WAITING "msrun.join.waiting"
#define MSR_KEY_JOIN_SAVES   "msrun.join.saves"
#define MSR_KEY_JOIN_READY   "msrun.join.ready"

/* ---- the store ----
 * Keys are 1 to 1024 bytes of printable text (MSR_ERR_BAD_KEY otherwise).
 * They live in the current generation: after a restart the store is empty
 * and a process of an older generation is refused (MSR_ERR_STALE).
 * Errors common to all: MSR_ERR_UNREACHABLE (no coordinator answered within
 * the connect window), MSR_ERR_TIMEOUT (the deadline passed),
 * MSR_ERR_PERMISSION (wrong job token), MSR_ERR_NO_MEMORY, MSR_ERR_REFUSED
 * (a write past one of the store's limits on a value's size, the number of
 * keys or the total bytes: msr_last_error() names the limit and its msrun
 * option; docs/store.md). A barrier or allgather count above the job's
 * world size, or a local_count above the node's workers, is
 * MSR_ERR_INVALID_ARG. */

/* Stores a copy of len bytes under key, replacing any value. */
MSR_API msr_status_t msr_store_set(msr_ctx_t *ctx, const char *key, const void *value, size_t len);

/* Reads key. wait_ms = 0 answers at once (MSR_ERR_NOT_FOUND when absent);
 * wait_ms > 0 waits that long for the key to be set (MSR_ERR_TIMEOUT);
 * wait_ms < 0 waits up to the context's timeout. On success *value_p is a
 * malloc'd copy (free it with free(3)), NUL-terminated one byte past
 * *len_p for convenience. */
MSR_API msr_status_t msr_store_get(msr_ctx_t *ctx, const char *key, int64_t wait_ms, void **value_p,
                                   size_t *len_p);

/* Waits for key to change from what the caller saw: old_len bytes at old,
 * or old NULL (old_len 0) for a key that was absent. MSR_OK when key holds
 * another value, returned as msr_store_get does; MSR_ERR_NOT_FOUND when
 * old was a value and the key is now absent (deleted).
 * A write of the same value is no change, and a change undone before the
 * call reaches the store is not seen: watch a counter (msr_store_add) when
 * every write matters. wait_ms as for msr_store_get; MSR_ERR_TIMEOUT when
 * unchanged within it (at once for wait_ms 0). MSR_ERR_INVALID_ARG for
 * value_p NULL, or old NULL with old_len > 0; MSR_ERR_UNSUPPORTED from an
 * msrun or coordinator older than this library (it answers with the old
 * value). */
MSR_API msr_status_t msr_store_wait_change(msr_ctx_t *ctx, const char *key, const void *old,
                                           size_t old_len, int64_t wait_ms, void **value_p,
                                           size_t *len_p);

/* Adds delta to the 64-bit counter at key (absent counts as 0) atomically
 * and returns the new value in *value_p (may be NULL). A key holding a value
 * that is not a counter gives MSR_ERR_INVALID_ARG. */
MSR_API msr_status_t msr_store_add(msr_ctx_t *ctx, const char *key, int64_t delta,
                                   int64_t *value_p);

/* Atomically replaces key's value with desired if it equals expected
 * (expected == NULL: only if the key is absent). *swapped_p tells whether it
 * did. */
MSR_API msr_status_t msr_store_compare_set(msr_ctx_t *ctx, const char *key, const void *expected,
                                           size_t expected_len, const void *desired,
                                           size_t desired_len, int *swapped_p);

/* Removes key; *existed_p (may be NULL) tells whether it was there. */
MSR_API msr_status_t msr_store_delete(msr_ctx_t *ctx, const char *key, int *existed_p);

/* The number of keys the store holds in this generation, in *count_p:
 * every key set (set, add, compare-set, publish's entries "<name>/<i>")
 * and not deleted, whoever set it (libmsrun's communicators and msrun
 * set keys too); barriers and allgathers are not keys. A key set twice
 * counts once. A count taken while others write is already old when it
 * returns. MSR_ERR_INVALID_ARG for count_p NULL; MSR_ERR_UNSUPPORTED
 * from an msrun or coordinator older than this library (protocol
 * version 1), whose version cannot count. */
MSR_API msr_status_t msr_store_num_keys(msr_ctx_t *ctx, uint64_t *count_p);

/* Waits until count participants reached the barrier called name.
 * local_count is how many of them this node's processes are (it lets the
 * node's msrun combine them into one call); 0 when unknown. */
MSR_API msr_status_t msr_store_barrier(msr_ctx_t *ctx, const char *name, uint32_t count,
                                       uint32_t local_count, int64_t wait_ms);

/* The result of an allgather: count contributions, in index order. */
typedef struct msr_gather_result {
    uint32_t count;
    const size_t *lengths;     /* lengths[i]: bytes of contribution i */
    const size_t *offsets;     /* offsets[i]: where it starts in data */
    const unsigned char *data; /* every contribution, back to back */
} msr_gather_result_t;

/* Contributes len bytes as entry index (0 .. count-1) of the allgather
 * called name and waits for all count entries. local_count as for barrier.
 * On success *result_p is the caller's (free with msr_gather_result_free). */
MSR_API msr_status_t msr_store_allgather(msr_ctx_t *ctx, const char *name, uint32_t count,
                                         uint32_t index, uint32_t local_count, const void *data,
                                         size_t len, int64_t wait_ms,
                                         msr_gather_result_t **result_p);

MSR_API void msr_gather_result_free(msr_gather_result_t *result);

/* Values fetched on first use, for groups too large for an allgather:
 * each member publishes its value once and fetches only the few it
 * needs (a node's msrun sends its members' publications up as one call
 * and answers repeated fetches itself). */
/* Publishes len bytes as entry index of name (the store key
 * "<name>/<index>"). local_count: the publishers of name on this node, whose
 * proxy sends them up as one call once all are in (0: sent alone). Waits
 * at most ctx's timeout. */
MSR_API msr_status_t msr_store_publish(msr_ctx_t *ctx, const char *name, uint32_t index,
                                       uint32_t local_count, const void *data, size_t len);

/* Fetches the entries indices[0..n) of name, waiting up to wait_ms (< 0:
 * ctx's timeout) for all of them to be published. MSR_ERR_TIMEOUT, with a
 * message naming the first entry missing, when one never is. On success
 * *result_p holds them in the order asked (free with
 * msr_gather_result_free). */
MSR_API msr_status_t msr_store_fetch(msr_ctx_t *ctx, const char *name, uint32_t n,
                                     const uint32_t *indices, int64_t wait_ms,
                                     msr_gather_result_t **result_p);

/* ---- progress reports (docs/observe.md) ---- */

/* A named value a step reports: loss, tokens/s, anything. */
typedef struct msr_scalar {
    const char *name; /* 1..63 of [A-Za-z0-9_.:/-], not starting with a digit */
    double value;
} msr_scalar_t;

/* Reports that this rank finished training step `step` (>= 0), which took
 * step_time seconds (< 0: derived from the time since the previous report),
 * with n scalars (up to 16 names per rank; later new names are dropped).
 * The report goes to the node's msrun, which sends the job's coordinator
 * one message per node and interval; the coordinator shows it at
 * /metrics and /api/job and compares the ranks' step times (stragglers).
 *
 * Never waits for the network: the report is recorded in ctx (a mutex held
 * for a copy) and a thread of libmsrun's, started by the first report,
 * sends what was recorded every quarter of a second; reports beyond what
 * that thread can send are summarised (the latest values win; the last 64
 * step times are kept). MSR_ERR_INVALID_ARG for a negative step, a bad name
 * or scalars == NULL with n > 0 (nothing recorded); MSR_ERR_NO_MEMORY.
 * Outside msrun (a job of one rank in this process), and with MSR_REPORT=0
 * in the environment, the report is checked and dropped. Any thread;
 * strings are copied. */
MSR_API msr_status_t msr_report(msr_ctx_t *ctx, int64_t step, double step_time,
                                const msr_scalar_t *scalars, size_t n);

/* ---- whole-job helpers ---- */

/* Waits until every rank of the job called msr_barrier as often as this
 * one (the calls are matched by their order). */
MSR_API msr_status_t msr_barrier(msr_ctx_t *ctx);

/* Gathers len bytes from every rank into out (world_size * len bytes, rank
 * order). Every rank must pass the same len (MSR_ERR_INVALID_ARG if not,
 * naming the rank). A rank out of memory inside its store call
 * (MSR_ERR_NO_MEMORY) gives a part of no bytes in its place, so that the
 * others end at once with MSR_ERR_INVALID_ARG naming it, not at the
 * store's deadline. */
MSR_API msr_status_t msr_allgather(msr_ctx_t *ctx, const void *in, size_t len, void *out);

#ifdef __cplusplus
}
#endif

#endif
