/* libmsrun's job context and store client. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/lprof.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "msrun/store.h"
#include "rendezvous/client.h"
#include "rendezvous/local_store.h"
#include "rendezvous/progress.h"
#include "rendezvous/rpc.h"
#include "rendezvous/wchan.h"

#include "rendezvous/client_impl.h"

/* How often the report thread sends what was reported. */
#define REPORT_INTERVAL_MS 250

/* Stamps a store write with this context's id and the next request id. */
void msr_client_request_ids(msr_ctx_t *ctx, uint64_t *client_id, uint64_t *request_id)
{
    *client_id = ctx->client_id;
    *request_id = atomic_fetch_add(&ctx->request_seq, 1) + 1;
}

msr_status_t msr_client_rpc(msr_ctx_t *ctx, msr_rpc_method_t method, const ProtobufCMessage *req,
                            uint64_t deadline, ProtobufCMessage **resp_p)
{
    if (ctx->wchan)
        return msr_wchan_call(ctx->wchan, method, req, deadline, resp_p);
    return msr_rpc_call(ctx->channel, method, req, deadline, 0, resp_p);
}

/* ---- beats ---- */

static void beat_once(msr_ctx_t *ctx)
{
    Msr__BeatRequest req = MSR__BEAT_REQUEST__INIT;
    req.rank = ctx->rank;
    req.pid = (int)getpid();
    req.progress = atomic_load(&ctx->progress);
    ProtobufCMessage *resp = NULL;
    if (msr_client_rpc(ctx, MSR_RPC_BEAT, &req.base, msr_deadline_in_ms(ctx->beat_ms), &resp) ==
        MSR_OK)
        msr_rpc_message_free(resp);
}

void msr_note_peer_lost(msr_ctx_t *ctx)
{
    if (ctx == NULL || !ctx->via_agent || atomic_exchange(&ctx->peer_lost_noted, 1))
        return;
    Msr__BeatRequest req = MSR__BEAT_REQUEST__INIT;
    req.rank = ctx->rank;
    req.pid = (int)getpid();
    req.progress = atomic_load(&ctx->progress);
    req.peer_lost = 1;
    /* the agent is on this node: a moment is plenty; the caller is on its
     * way to report a failure and must not wait long */
    ProtobufCMessage *resp = NULL;
    if (msr_client_rpc(ctx, MSR_RPC_BEAT, &req.base, msr_deadline_in_ms(500), &resp) == MSR_OK)
        msr_rpc_message_free(resp);
}

static void *beat_main(void *arg)
{
    msr_ctx_t *ctx = arg;
    pthread_mutex_lock(&ctx->beat_lock);
    while (!ctx->beat_stop) {
        pthread_mutex_unlock(&ctx->beat_lock);
        beat_once(ctx);
        pthread_mutex_lock(&ctx->beat_lock);
        struct timespec ts = msr_realtime_in_ms(ctx->beat_ms);
        if (!ctx->beat_stop)
            pthread_cond_timedwait(&ctx->beat_cond, &ctx->beat_lock, &ts);
    }
    pthread_mutex_unlock(&ctx->beat_lock);
    return NULL;
}

void msr_heartbeat(msr_ctx_t *ctx)
{
    if (ctx)
        atomic_fetch_add_explicit(&ctx->progress, 1, memory_order_relaxed);
}

/* ---- progress reports ---- */

/* Sends what was reported since the last send, if anything; the lock is
 * not held while the call is under way. */
static void report_send(msr_ctx_t *ctx, int64_t deadline_ms)
{
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    pthread_mutex_lock(&ctx->report_lock);
    msr_status_t st = msr_progress_batch_take(&ctx->reports, &req);
    req.dropped = ctx->reports.dropped;
    ctx->reports.dropped = 0;
    pthread_mutex_unlock(&ctx->report_lock);
    if (st != MSR_OK || req.n_steps == 0)
        return;
    req.generation = ctx->generation;
    ProtobufCMessage *resp = NULL;
    if (msr_client_rpc(ctx, MSR_RPC_PROGRESS, &req.base, msr_deadline_in_ms(deadline_ms), &resp) ==
        MSR_OK)
        msr_rpc_message_free(resp);
    msr_progress_request_cleanup(&req);
}

static void *report_main(void *arg)
{
    msr_ctx_t *ctx = arg;
    pthread_mutex_lock(&ctx->report_lock);
    while (!ctx->report_stop) {
        struct timespec ts = msr_realtime_in_ms(REPORT_INTERVAL_MS);
        pthread_cond_timedwait(&ctx->report_cond, &ctx->report_lock, &ts);
        if (ctx->report_stop)
            break;
        pthread_mutex_unlock(&ctx->report_lock);
        report_send(ctx, 2000);
        pthread_mutex_lock(&ctx->report_lock);
    }
    pthread_mutex_unlock(&ctx->report_lock);
    return NULL;
}

msr_status_t msr_report(msr_ctx_t *ctx, int64_t step, double step_time, const msr_scalar_t *scalars,
                        size_t n)
{
    if (ctx == NULL || step < 0 || (n > 0 && scalars == NULL)) {
        msr_err_set("msr_report: %s", ctx == NULL ? "ctx is NULL"
                                      : step < 0  ? "the step is negative"
                                                  : "scalars is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    const char *names[MSR_PROGRESS_SCALARS];
    double values[MSR_PROGRESS_SCALARS];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (scalars[i].name == NULL ||
            !msr_progress_name_valid(scalars[i].name, strlen(scalars[i].name))) {
            msr_err_set("msr_report: bad scalar name \"%s\" (1..%d of A-Z a-z 0-9 _ . : / -, "
                        "not starting with a digit)",
                        scalars[i].name ? scalars[i].name : "(null)", MSR_PROGRESS_NAME_MAX);
            return MSR_ERR_INVALID_ARG;
        }
        if (k < MSR_PROGRESS_SCALARS) {
            names[k] = scalars[i].name;
            values[k++] = scalars[i].value;
        }
    }
    if ((ctx->channel == NULL && ctx->wchan == NULL) || ctx->report_off)
        return MSR_OK; /* a job of one rank in this process, or told not to */
    double now = msr_wall_time();
    pthread_mutex_lock(&ctx->report_lock);
    msr_status_t st = msr_progress_batch_add(&ctx->reports, ctx->rank, step,
                                             step_time < 0 ? -1 : step_time, now, names, values, k);
    if (st == MSR_OK && !ctx->reporting && !ctx->report_stop) {
        if (pthread_create(&ctx->report_thread, NULL, report_main, ctx) == 0)
            ctx->reporting = 1;
        else
            ctx->report_stop = 1; /* reports stay recorded; msr_finalize sends the last */
    }
    pthread_mutex_unlock(&ctx->report_lock);
    if (st != MSR_OK)
        msr_err_set("msr_report: %s", msr_status_str(st));
    return st;
}

/* ---- environment ---- */

static int env_int(const char *name, const char *alt, int def, int min, int max, int *out_p)
{
    const char *v = getenv(name);
    const char *used = name;
    if ((v == NULL || *v == '\0') && alt) {
        v = getenv(alt);
        used = alt;
    }
    if (v == NULL || *v == '\0') {
        if (def < min) {
            msr_err_set("msr_init: %s is not set (is this program running under msrun?)", name);
            return -1;
        }
        *out_p = def;
        return 0;
    }
    int64_t x;
    if (msr_parse_i64(v, min, max, &x) != MSR_OK) {
        msr_err_set("msr_init: %s=%s is not an integer in [%d, %d]", used, v, min, max);
        return -1;
    }
    *out_p = (int)x;
    return 0;
}

/* The job's shape from the environment (msrun's MSR_*, or Slurm's):
 * nonzero, with the error text set, when a variable is bad or missing. A
 * singleton (no msrun, no coordinator) is a job of one rank. */
static int init_shape(msr_ctx_t *ctx, int singleton)
{
    return env_int("MSR_WORLD_SIZE", "SLURM_NTASKS", singleton ? 1 : -1, 1, 1 << 30,
                   &ctx->world_size) ||
           env_int("MSR_RANK", "SLURM_PROCID", singleton ? 0 : -1, 0, ctx->world_size - 1,
                   &ctx->rank) ||
           env_int("MSR_LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", 1, 1, ctx->world_size,
                   &ctx->local_world_size) ||
           env_int("MSR_LOCAL_RANK", "SLURM_LOCALID", 0, 0, ctx->local_world_size - 1,
                   &ctx->local_rank) ||
           env_int("MSR_NODE_RANK", "SLURM_NODEID", ctx->rank / ctx->local_world_size, 0, 1 << 30,
                   &ctx->node_rank) ||
           env_int("MSR_NODE_COUNT", "SLURM_NNODES",
                   (ctx->world_size + ctx->local_world_size - 1) / ctx->local_world_size, 1,
                   1 << 30, &ctx->node_count) ||
           env_int("MSR_GENERATION", NULL, 0, 0, 1 << 30, &ctx->generation);
}

/* A singleton refuses a process another launcher started as one of
 * several (torchrun, or WORLD_SIZE left in the shell): with no MSR_*
 * variables it would run alone, print "rank 0 of 1" in every process and
 * reduce nothing. WORLD_SIZE unset, empty or 1 is a job of one rank.
 * Nonzero, with the error text set, when refused. */
static int init_check_foreign(void)
{
    const char *ws = getenv("WORLD_SIZE");
    if (ws == NULL || *ws == '\0' || strcmp(ws, "1") == 0)
        return 0;
    char seen[512] = "";
    size_t used = 0;
    static const char *const names[] = {"RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && used < sizeof seen; i++) {
        const char *v = getenv(names[i]);
        if (v != NULL)
            used += (size_t)snprintf(seen + used, sizeof seen - used, "%s%s=%.80s",
                                     used ? ", " : " (with ", names[i], v);
    }
    if (used > 0 && used < sizeof seen - 1)
        snprintf(seen + used, sizeof seen - used, ")");
    int64_t n;
    if (msr_parse_i64(ws, 2, 1 << 30, &n) == MSR_OK)
        msr_err_set("msr_init: WORLD_SIZE=%s%s says this process is one of %s, but it was not "
                    "started by msrun (MSR_* unset): start it with msrun, or unset WORLD_SIZE "
                    "to run alone",
                    ws, seen, ws);
    else
        msr_err_set("msr_init: WORLD_SIZE=%.80s%s is not a job size, and this process was not "
                    "started by msrun (MSR_* unset): start it with msrun, or unset WORLD_SIZE "
                    "to run alone",
                    ws, seen);
    return -1;
}

/* The channel to the node's msrun (the worker channel beside its unix
 * socket: no gRPC in this process) or, in direct mode, to the coordinator
 * (TLS as msrun's --tls_* options give it: it may cross the network); a job
 * started by another launcher learns its generation from the job. */
static msr_status_t init_channel(msr_ctx_t *ctx, const char *agent, const char *coord, int gen_set)
{
    msr_status_t st;
    if (agent && *agent) {
        char path[4200];
        snprintf(path, sizeof path, "%s%s", agent, MSR_WCHAN_SUFFIX);
        ctx->via_agent = 1;
        st = msr_wchan_create(path, getenv("MSR_TOKEN"), &ctx->wchan);
        if (st != MSR_OK)
            msr_err_prefix(st, "msr_init");
        return st;
    }
    msr_rpc_tls_t tls = {getenv("MSR_TLS_CERT"), getenv("MSR_TLS_KEY"), getenv("MSR_TLS_CA"),
                         getenv("MSR_TLS_SERVER_NAME")};
    st = msr_rpc_channel_create_tls(coord, getenv("MSR_TOKEN"), &tls, &ctx->channel);
    if (st != MSR_OK) {
        char why[384];
        snprintf(why, sizeof why, "%s", msr_err_msg_or(st));
        msr_err_set("msr_init: cannot create a channel to %s: %s", coord, why);
        return st;
    }
    if (!gen_set) {
        Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
        ProtobufCMessage *resp = NULL;
        st = msr_client_call(ctx, MSR_RPC_STATUS, &req.base, -1, NULL, &resp);
        if (st != MSR_OK) {
            msr_rpc_channel_destroy(ctx->channel);
            return st;
        }
        ctx->generation = ((Msr__StatusResponse *)resp)->generation;
        msr_rpc_message_free(resp);
    }
    return MSR_OK;
}

/* Under msrun --worker_timeout, beat to the node's msrun from a thread of
 * our own: it stops only when the whole process stops. */
static void init_beats(msr_ctx_t *ctx)
{
    int64_t timeout_ms = msr_env_i64("MSR_WORKER_TIMEOUT_MS", 0, 0, INT32_MAX);
    if (!ctx->via_agent || timeout_ms <= 0)
        return;
    ctx->beat_ms = timeout_ms / 4 < 50 ? 50 : timeout_ms / 4 > 2000 ? 2000 : timeout_ms / 4;
    /* the first beat before msr_init returns: msrun watches this process
     * from here, even if it is stopped before the thread runs */
    beat_once(ctx);
    pthread_mutex_init(&ctx->beat_lock, NULL);
    pthread_cond_init(&ctx->beat_cond, NULL);
    if (pthread_create(&ctx->beat_thread, NULL, beat_main, ctx) == 0) {
        ctx->beating = 1;
    } else {
        pthread_mutex_destroy(&ctx->beat_lock);
        pthread_cond_destroy(&ctx->beat_cond);
        MSR_WARN("cannot start the beat thread: hang detection is off for this worker");
    }
}

msr_status_t msr_init(msr_ctx_t **ctx_p)
{
    uint64_t t0 = msr_now_ns();
    msr_status_t st = MSR_ERR_INVALID_ARG;
    msr_err_clear();
    if (ctx_p == NULL) {
        msr_err_set("msr_init: ctx_p is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    msr_ctx_t *ctx = msr_calloc(1, sizeof *ctx);
    if (ctx == NULL) {
        msr_err_set("msr_init: out of memory");
        return MSR_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&ctx->report_lock, NULL);
    pthread_cond_init(&ctx->report_cond, NULL);
    msr_progress_batch_init(&ctx->reports);
    const char *report = getenv("MSR_REPORT");
    ctx->report_off = report != NULL && strcmp(report, "0") == 0;
    const char *agent = getenv("MSR_AGENT");
    const char *coord = getenv("MSR_COORDINATOR");
    /* Started without msrun and without a coordinator: a job of one rank,
     * with a store in this process (as MPI's singleton init). */
    int singleton = (agent == NULL || *agent == '\0') && (coord == NULL || *coord == '\0');
    int gen_set = getenv("MSR_GENERATION") != NULL;
    if (init_shape(ctx, singleton))
        goto err_free;
    msr_log_init("libmsrun", ctx->node_rank, ctx->rank);

    do
        msr_random_bytes(&ctx->client_id, sizeof ctx->client_id);
    while (ctx->client_id == 0);
    const char *job = getenv("MSR_JOB_ID");
    ctx->job_id = msr_strdup(job ? job : singleton ? "singleton" : "");
    if (ctx->job_id == NULL) {
        st = MSR_ERR_NO_MEMORY;
        goto err_free;
    }
    ctx->timeout_ms = msr_env_i64("MSR_TIMEOUT", 300, -1, INT32_MAX) * 1000;
    if (ctx->timeout_ms < 0)
        ctx->timeout_ms = -1;
    ctx->connect_ms = msr_env_i64("MSR_CONNECT_TIMEOUT", 10, 0, INT32_MAX) * 1000;

    if (singleton && init_check_foreign())
        goto err_free;
    if (singleton && ctx->world_size > 1) {
        msr_err_set("msr_init: a job of %d ranks needs msrun (or MSR_COORDINATOR=host:port "
                    "and MSR_TOKEN); only a job of one rank runs without",
                    ctx->world_size);
        goto err_free;
    }
    if (singleton)
        st = msr_local_store_create(&ctx->local);
    else
        st = init_channel(ctx, agent, coord, gen_set);
    if (st != MSR_OK)
        goto err_free;
    if (!singleton)
        init_beats(ctx);
    msr_lprof_note(MSR_LPROF_STORE, t0);
    *ctx_p = ctx;
    return MSR_OK;

err_free:
    pthread_mutex_destroy(&ctx->report_lock);
    pthread_cond_destroy(&ctx->report_cond);
    msr_free(ctx->job_id);
    msr_free(ctx);
    return st;
}

void msr_finalize(msr_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    uint64_t t0 = msr_now_ns();
    int rank = ctx->rank;
    if (ctx->beating) {
        pthread_mutex_lock(&ctx->beat_lock);
        ctx->beat_stop = 1;
        pthread_cond_signal(&ctx->beat_cond);
        pthread_mutex_unlock(&ctx->beat_lock);
        pthread_join(ctx->beat_thread, NULL);
        pthread_mutex_destroy(&ctx->beat_lock);
        pthread_cond_destroy(&ctx->beat_cond);
    }
    pthread_mutex_lock(&ctx->report_lock);
    ctx->report_stop = 1;
    pthread_cond_signal(&ctx->report_cond);
    pthread_mutex_unlock(&ctx->report_lock);
    if (ctx->reporting)
        pthread_join(ctx->report_thread, NULL);
    if (ctx->channel || ctx->wchan)
        report_send(ctx, 1000); /* the last reports, within a second */
    msr_progress_batch_cleanup(&ctx->reports);
    pthread_mutex_destroy(&ctx->report_lock);
    pthread_cond_destroy(&ctx->report_cond);
    msr_rpc_channel_destroy(ctx->channel);
    msr_wchan_destroy(ctx->wchan);
    msr_local_store_destroy(ctx->local);
    msr_free(ctx->job_id);
    msr_free(ctx);
    msr_lprof_note(MSR_LPROF_FINALIZE, t0);
    if (msr_lprof_save(rank) != MSR_OK)
        MSR_WARN("%s", msr_err_msg());
}

int msr_rank(const msr_ctx_t *ctx)
{
    return ctx->rank;
}

int msr_world_size(const msr_ctx_t *ctx)
{
    return ctx->world_size;
}

int msr_local_rank(const msr_ctx_t *ctx)
{
    return ctx->local_rank;
}

int msr_local_world_size(const msr_ctx_t *ctx)
{
    return ctx->local_world_size;
}

int msr_node_rank(const msr_ctx_t *ctx)
{
    return ctx->node_rank;
}

int msr_node_count(const msr_ctx_t *ctx)
{
    return ctx->node_count;
}

int msr_generation(const msr_ctx_t *ctx)
{
    return ctx->generation;
}

const char *msr_job_id(const msr_ctx_t *ctx)
{
    return ctx->job_id;
}

void msr_set_timeout(msr_ctx_t *ctx, int64_t ms)
{
    ctx->timeout_ms = ms < 0 ? -1 : ms;
}

int64_t msr_timeout(const msr_ctx_t *ctx)
{
    return ctx->timeout_ms;
}

/* ---- calls ---- */

/* A waiting call asks the server to hold it up to the wait and gives gRPC
 * this much longer, so the server's own answer (with its message) wins. */
#define WAIT_GRACE_MS 2000

msr_status_t msr_client_call(msr_ctx_t *ctx, msr_rpc_method_t method, const ProtobufCMessage *req,
                             int64_t wait_ms, const char *what, ProtobufCMessage **resp_p)
{
    int64_t limit = wait_ms >= 0 ? wait_ms : ctx->timeout_ms;
    uint64_t deadline = msr_deadline_in_ms(limit < 0 ? -1 : limit + WAIT_GRACE_MS);
    uint64_t connect_deadline = msr_deadline_in_ms(ctx->connect_ms);
    int64_t backoff = 10;
    char err[384];
    for (;;) {
        msr_status_t st;
        if (ctx->local)
            st = msr_local_store_call(ctx->local, method, req, deadline, resp_p);
        else
            st = msr_client_rpc(ctx, method, req, deadline, resp_p);
        if (st == MSR_OK)
            return MSR_OK;
        snprintf(err, sizeof err, "%s", msr_err_msg());
        if (st == MSR_ERR_UNREACHABLE && !msr_deadline_passed(connect_deadline) &&
            msr_deadline_left_ms(deadline) > backoff) {
            /* Not connected yet, or the coordinator is restarting: wait
             * for the connection (polling it on), not just sleep. */
            if (ctx->local || ctx->wchan)
                msr_sleep_ms(backoff);
            else
                msr_rpc_channel_wait(ctx->channel, msr_deadline_in_ms(backoff));
            backoff = backoff * 2 > 500 ? 500 : backoff * 2;
            continue;
        }
        if (st == MSR_ERR_TIMEOUT && limit >= 0)
            msr_err_set("%s%s%s: deadline passed after %lld ms", what ? what : "", what ? ": " : "",
                        msr_rpc_methods[method].name, (long long)limit);
        else
            msr_err_set("%s%s%s", what ? what : "", what ? ": " : "", err);
        if (st != MSR_ERR_NOT_FOUND)
            MSR_DEBUG("%s", msr_err_msg());
        return st;
    }
}
