/* libmsrun's parameter server: tables of rows sharded over server ranks,
 * pulled and pushed by worker ranks, updated on the servers by SGD, Adagrad
 * or Adam (docs/ps.md). */
#ifndef MSRUN_PS_H
#define MSRUN_PS_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "msrun/comm.h"
#include "msrun/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A parameter server over a communicator: its last `servers` members are
 * servers, the others workers (ranked 0 .. workers-1 in member order).
 * Servers create the same tables as the workers and then run msr_ps_serve
 * until every worker has called msr_ps_destroy; workers pull and push.
 *
 * Threads: one thread at a time per msr_ps_t (the calls are not locked);
 * several msr_ps_t over different communicators may run in parallel.
 *
 * Failures: every call is bounded by the communicator's deadline
 * (msr_comm_set_timeout); a lost peer or a passed deadline breaks the
 * communicator and with it the parameter server (msr_ps_destroy is then the
 * only useful call). In asynchronous mode each worker talks to each server
 * on a communicator of two with an engine of its own (so a worker killed
 * inside a send stalls no other's messages): a server takes a worker lost
 * without its goodbye as done and serves the others. A request a server refuses
 * (unknown table, a key out of range, a row of the wrong width) fails with MSR_ERR_INVALID_ARG and
 * msr_last_error() names the server and the reason; the parameter server
 * stays usable. */
typedef struct msr_ps msr_ps_t;

typedef enum msr_ps_role {
    MSR_PS_WORKER = 0,
    MSR_PS_SERVER = 1,
} msr_ps_role_t;

typedef enum msr_ps_optim {
    MSR_PS_SGD = 0,     /* w -= lr * g */
    MSR_PS_ADAGRAD = 1, /* h += g^2; w -= lr * g / (sqrt(h) + eps) */
    MSR_PS_ADAM = 2,    /* per-row step count, m, v; only pushed rows move */
} msr_ps_optim_t;

/* staleness for msr_ps_create: synchronous mode (see msr_ps_push). */
#define MSR_PS_SYNC          (-1)
/* staleness for msr_ps_create: the launcher's, MSR_PS_STALENESS (msrun
 * --ps_staleness; unset: synchronous). */
#define MSR_PS_STALENESS_ENV (-2)

/* A table of rows x width floats. Row r's element c starts as
 * msr_ps_init_value(seed, r, c, init_scale). beta1, beta2 and eps of 0 take
 * the defaults 0.9, 0.999 and 1e-8 (Adagrad's eps: 1e-10). */
typedef struct msr_ps_table_config {
    uint64_t rows;
    uint32_t width;
    msr_ps_optim_t optim;
    float lr;
    float beta1, beta2, eps;
    float init_scale; /* rows start uniform in [-init_scale, init_scale); 0: zeros */
    uint64_t seed;
} msr_ps_table_config_t;

/* This process's role from its environment: MSR_PS_SERVERS (set by msrun
 * --ps_servers; unset or 0: every rank a worker) and the rule that the last
 * MSR_PS_SERVERS ranks of the job are servers; MSR_ROLE, when set, must
 * agree. *role_rank_p gets the rank among its role (workers 0 ..
 * world-servers-1, servers 0 .. servers-1) and *role_size_p that role's
 * count. Any of the outputs may be NULL. Fails with MSR_ERR_INVALID_ARG
 * (ctx NULL, MSR_PS_SERVERS not a number or not below the world size,
 * MSR_ROLE not server or worker, or disagreeing with the rule). Local; any
 * thread. */
MSR_API msr_status_t msr_ps_role(const msr_ctx_t *ctx, msr_ps_role_t *role_p, int *role_rank_p,
                                 int *role_size_p);

/* Makes a parameter server over comm: servers is the number of servers
 * (its last members); 0 takes MSR_PS_SERVERS from the environment.
 * staleness: MSR_PS_SYNC, or K >= 0 for the asynchronous mode in which a
 * worker's pull waits until every worker has pushed the table at least
 * (its own pushes of it - K) times, or MSR_PS_STALENESS_ENV. The members
 * must agree (the launcher's is the same on every rank). Collective over comm (every member, the
 * same arguments). Synchronous mode duplicates comm; asynchronous mode
 * makes a communicator of two per worker and server, each on an engine of
 * its own, all in one msr_comm_pairs over comm (comm may be destroyed
 * afterwards in both).
 * Fails with MSR_ERR_INVALID_ARG (servers < 0 or not below comm's size,
 * staleness < -2, MSR_PS_STALENESS not a number >= -1), MSR_ERR_NO_MEMORY, or comm's errors. On
 * success *ps_p is the caller's until msr_ps_destroy. */
MSR_API msr_status_t msr_ps_create(msr_comm_t *comm, int servers, int staleness, msr_ps_t **ps_p);

/* The job's parameter server over every rank of ctx, for a job of
 * msrun --ps_servers (arguments as msr_ps_create's). In a first process
 * of its rank (collective: every rank calls it) synchronous mode makes the
 * world communicator and msr_ps_create on it; asynchronous mode pairs each
 * worker with each server (msr_comm_pair), with no collective
 * communicator. A worker of an asynchronous parameter
 * server that msrun started again alone after its process died
 * (MSR_INCARNATION > 0) joins the running servers instead: it makes a
 * communicator of two with each (msr_comm_pair), named by its join, which
 * the servers see in the store within PS_JOIN_POLL_MS (50 ms) of taking
 * the old process as lost; its pulls then get the current rows, and it
 * bounds the others' staleness again from the slowest one's clock. Only
 * servers made by msr_ps_join take a replacement, in msr_ps_serve, until
 * every worker is done. Fails as msr_ps_create, plus MSR_ERR_UNSUPPORTED
 * (MSR_INCARNATION > 0 on a server or in synchronous mode), MSR_ERR_TIMEOUT
 * (a server did not pair within ctx's timeout) and MSR_ERR_INVALID_ARG
 * (MSR_INCARNATION not a count). */
MSR_API msr_status_t msr_ps_join(msr_ctx_t *ctx, int servers, int staleness, msr_ps_t **ps_p);

/* A worker tells every server it is done (and waits for their answer); then
 * frees ps, also on a server. NULL does nothing. After a failure it frees
 * without telling. */
MSR_API void msr_ps_destroy(msr_ps_t *ps);

/* This member's role, its rank among its role, and the counts. Never fail. */
MSR_API msr_ps_role_t msr_ps_my_role(const msr_ps_t *ps);
MSR_API int msr_ps_role_rank(const msr_ps_t *ps);
MSR_API int msr_ps_workers(const msr_ps_t *ps);
MSR_API int msr_ps_servers(const msr_ps_t *ps);

/* Creates the next table (ids 0, 1, ... in creation order). Every member,
 * workers and servers, creates the same tables in the same order, servers
 * before they call msr_ps_serve. Local: a server allocates its shard, the
 * rows r with r % servers == its server rank (row r is its local row
 * r / servers), with their optimizer state. Fails with
 * MSR_ERR_INVALID_ARG (rows or width 0, width above MSR_PS_WIDTH_MAX, an
 * unknown optimizer, lr not finite), MSR_ERR_STATE (a server already
 * serving), MSR_ERR_NO_MEMORY. */
MSR_API msr_status_t msr_ps_table_create(msr_ps_t *ps, const msr_ps_table_config_t *cfg,
                                         int *table_p);
#define MSR_PS_WIDTH_MAX 65536u

/* Workers: rows[i * width ..] gets row keys[i] of table (keys may repeat).
 * One request per server that holds some of the keys, all in flight at
 * once. In the asynchronous mode with staleness K it waits until every
 * worker has pushed the table at least (this worker's pushes - K) times.
 * At most 2^30 - 1 floats (nkeys x width) per call. Fails with
 * MSR_ERR_INVALID_ARG (a server refused: unknown table, key out of range,
 * width not the table's; rows then unspecified; or more floats than
 * that, refused before anything is sent), MSR_ERR_STATE
 * (called on a server), or the communicator's errors. */
MSR_API msr_status_t msr_ps_pull(msr_ps_t *ps, int table, const int64_t *keys, uint64_t nkeys,
                                 float *rows, uint32_t width);

/* Workers: sends the gradients grads[i * width ..] of rows keys[i] (a key
 * that repeats has its gradients summed), one request to every server (an
 * empty one to those that hold none of the keys: it counts the step). The
 * server applies the optimizer to the sum over workers divided by the
 * number of workers:
 *   synchronous: once every worker has pushed the table for this step; the
 *     call returns when that update is applied, so a pull after it sees it
 *     (each worker pushes each table once per step);
 *   asynchronous: at once, per push.
 * A refused push (as msr_ps_pull's) still counts as this worker's push of
 * the step; the server that refused it applies none of its rows. Errors as
 * msr_ps_pull. */
MSR_API msr_status_t msr_ps_push(msr_ps_t *ps, int table, const int64_t *keys, uint64_t nkeys,
                                 const float *grads, uint32_t width);

/* A dense tensor: the whole table, rows 0 .. rows-1 in order (rows * width
 * floats), pulled or pushed as msr_ps_pull and msr_ps_push do. */
MSR_API msr_status_t msr_ps_pull_dense(msr_ps_t *ps, int table, float *values);
MSR_API msr_status_t msr_ps_push_dense(msr_ps_t *ps, int table, const float *grads);

/* The bytes this member's pulls and pushes sent and received so far
 * (headers, keys, rows and gradients; on a server its answers are
 * counted as sent). Either pointer may be NULL. Never fails. */
MSR_API void msr_ps_traffic(const msr_ps_t *ps, uint64_t *sent_p, uint64_t *received_p);

/* Servers, after their tables are made and before msr_ps_serve: keeps
 * the shard durable in directory dir (made if missing; the same for a
 * server across restarts, e.g. on a shared or local disk). Every update is
 * appended to dir/ps-s<server rank>.log before it is acknowledged: in the
 * asynchronous mode each push, in the synchronous mode each step's
 * gradients summed over its pushes (logged once, before the step's pushes
 * are answered). Every ckpt_every updates (0: 10000) the shard (values and
 * optimizer state) is written whole to dir/ps-s<rank>.ckpt (a new file
 * renamed over the old) and the log restarted. First it restores what dir
 * holds: the checkpoint, then the logged updates after it (a record cut by
 * a crash is dropped: it was never acknowledged); so a server killed and
 * started again with the same tables loses no acknowledged update. The
 * files are this user's only (mode 0600). *restored_p (may be NULL) gets
 * the number of updates (pushes, or synchronous steps of a table) the
 * restored shard holds. The log is written, not synced, unless
 * msr_ps_durable_fsync asks: it survives the process, not the machine.
 *
 * dir/ps-layout records the numbers of servers and workers that wrote the
 * state. Started with other numbers (an elastic job re-formed, a job
 * started again with more or fewer servers), every server reshards: it
 * builds its rows from the checkpoint and log of every old server that
 * held some of them (replayed with the old numbers), writes them as the
 * next generation's files
 * (dir/ps-g<G>-s<rank>.*, synced) and waits for every other server's
 * (the communicator's deadline) before the layout names them, so a crash
 * at any point leaves one whole state to restore; *restored_p is then 0.
 * Resharding needs dir to be one every server sees (a shared disk when the
 * servers are on several machines): an old server's log missing fails it
 * at once.
 *
 * Fails with MSR_ERR_STATE (a worker, or serving), MSR_ERR_INVALID_ARG (a
 * name of dir of 4096 bytes or more), MSR_ERR_CORRUPT (a checkpoint of
 * other tables, a log of an earlier format or of other tables, a layout
 * that is not one, an old server's log missing, a checkpoint of the
 * layout's generation missing), MSR_ERR_TIMEOUT (a
 * reshard's other servers never wrote their rows), MSR_ERR_IO,
 * MSR_ERR_NO_MEMORY. */
MSR_API msr_status_t msr_ps_durable(msr_ps_t *ps, const char *dir, uint64_t ckpt_every,
                                    uint64_t *restored_p);

/* A durable server, before msr_ps_serve: syncs its log to disk
 * (fdatasync) after every `every` records, so that it survives the
 * machine too: 1 before each acknowledgement (no acknowledged update is
 * lost to a crash of the machine), N > 1 after every N (at most N - 1
 * acknowledged updates lost), 0 never (the default). With every > 0 each
 * checkpoint is synced, and its directory, before the log restarts. Fails
 * with MSR_ERR_STATE when ps is not a durable server or is serving. */
MSR_API msr_status_t msr_ps_durable_fsync(msr_ps_t *ps, uint64_t every);

/* Servers: answers the workers' requests until every worker has called
 * msr_ps_destroy, or in asynchronous mode was lost (MSR_OK), or the
 * communicator fails (its status). A
 * request it refuses gets an error answer; the loop goes on. Fails with
 * MSR_ERR_STATE on a worker. */
MSR_API msr_status_t msr_ps_serve(msr_ps_t *ps);

/* The initial value of element col of row of a table made with seed and
 * init_scale: uniform in [-init_scale, init_scale), the same on every
 * machine. */
MSR_API float msr_ps_init_value(uint64_t seed, uint64_t row, uint32_t col, float init_scale);

#ifdef __cplusplus
}
#endif

#endif
