/* The coordinator served over gRPC on one thread. */
#include "cluster/server.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/err.h"
#include "base/time.h"
#include "base/buf.h"
#include "cluster/http.h"
#include "cluster/munge_auth.h"
#include "rendezvous/rpc.h"
#include "rendezvous/store_limits.h"

/* Refused Auth calls are logged at most this often, with a count of the
 * rest: anyone may send them. */
#define AUTH_LOG_INTERVAL_NS (5ull * 1000000000ull)

/* Upper bounds (seconds) of the call-latency histogram's buckets: from a
 * call's arrival to its answer, long polls' waits included. */
static const double latency_bounds[] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5};
#define NBOUNDS 10
_Static_assert(sizeof latency_bounds / sizeof latency_bounds[0] == NBOUNDS, "NBOUNDS");

struct msr_coord_server {
    msr_rpc_loop_t *loop;
    msr_http_t *http; /* the dashboard, or NULL */
    /* answered calls by method: counts per bucket (+Inf last) and seconds */
    uint64_t lat_buckets[MSR_RPC_METHOD_COUNT][NBOUNDS + 1];
    double lat_sum[MSR_RPC_METHOD_COUNT];
    msr_rpc_server_t *rpc;
    msr_coord_t *coord;
    char *token;                      /* handed out by Auth */
    msr_munge_verifier_t *munge;      /* NULL: Auth is refused */
    msr_buf_t snap_metrics, snap_job; /* rendered for the dashboard, reused */
    msr_buf_t snap_output;            /* an /api/output answer, reused */
    uint64_t auth_logged_ns;          /* refusal log rate limit */
    unsigned long auth_unlogged;
};

/* Counts the call's time from arrival to answer in its method's histogram. */
static void observe_latency(msr_rpc_call_t *call)
{
    msr_coord_server_t *s = msr_rpc_call_handler_arg(call);
    msr_rpc_method_t m = msr_rpc_call_method(call);
    if (s == NULL || (unsigned)m >= MSR_RPC_METHOD_COUNT)
        return;
    double sec = (double)(msr_now_ns() - msr_rpc_call_started(call)) / 1e9;
    size_t b = 0;
    while (b < NBOUNDS && sec > latency_bounds[b])
        b++;
    s->lat_buckets[m][b]++;
    s->lat_sum[m] += sec;
}

static void r_reply(void *call, const ProtobufCMessage *resp)
{
    observe_latency(call);
    msr_rpc_call_reply(call, resp);
}

static void blob_slice_unref(void *p)
{
    msr_blob_unref(p);
}

static void r_reply_blob(void *call, msr_blob_t *blob)
{
    observe_latency(call);
    atomic_fetch_add(&blob->refs, 1);
    grpc_slice s = grpc_slice_new_with_user_data(blob->data, blob->len, blob_slice_unref, blob);
    msr_rpc_call_reply_slice(call, &s);
    grpc_slice_unref(s);
}

/* The core answers with msr_rpc_code_t, whose numbers are gRPC's. */
_Static_assert(MSR_RPC_OK == (int)GRPC_STATUS_OK &&
                   MSR_RPC_CANCELLED == (int)GRPC_STATUS_CANCELLED &&
                   MSR_RPC_INVALID_ARGUMENT == (int)GRPC_STATUS_INVALID_ARGUMENT &&
                   MSR_RPC_DEADLINE_EXCEEDED == (int)GRPC_STATUS_DEADLINE_EXCEEDED &&
                   MSR_RPC_NOT_FOUND == (int)GRPC_STATUS_NOT_FOUND &&
                   MSR_RPC_PERMISSION_DENIED == (int)GRPC_STATUS_PERMISSION_DENIED &&
                   MSR_RPC_RESOURCE_EXHAUSTED == (int)GRPC_STATUS_RESOURCE_EXHAUSTED &&
                   MSR_RPC_FAILED_PRECONDITION == (int)GRPC_STATUS_FAILED_PRECONDITION &&
                   MSR_RPC_ABORTED == (int)GRPC_STATUS_ABORTED &&
                   MSR_RPC_OUT_OF_RANGE == (int)GRPC_STATUS_OUT_OF_RANGE &&
                   MSR_RPC_UNIMPLEMENTED == (int)GRPC_STATUS_UNIMPLEMENTED &&
                   MSR_RPC_INTERNAL == (int)GRPC_STATUS_INTERNAL &&
                   MSR_RPC_UNAVAILABLE == (int)GRPC_STATUS_UNAVAILABLE,
               "msr_rpc_code_t must number its codes as gRPC does");

static void r_fail(void *call, int code, const char *message)
{
    observe_latency(call);
    msr_rpc_call_fail(call, (grpc_status_code)code, "%s", message);
}

static uint64_t r_deadline(void *call)
{
    return msr_rpc_call_deadline(call);
}

static const char *r_peer(void *call)
{
    return msr_rpc_call_peer(call);
}

static void r_set_data(void *call, void *data)
{
    msr_rpc_call_set_data(call, data);
}

static void *r_get_data(void *call)
{
    return msr_rpc_call_get_data(call);
}

static const msr_coord_responder_t grpc_responder = {
    r_reply, r_reply_blob, r_fail, r_deadline, r_peer, r_set_data, r_get_data,
};

/* Auth: a munge credential of the job's user for the job token. Served
 * without the token (the credential is the proof), so a refusal says why
 * to the caller but reaches the log at most once per interval. */
static void on_auth(msr_coord_server_t *s, msr_rpc_call_t *call, const Msr__AuthRequest *req)
{
    if (s->munge == NULL) {
        msr_rpc_call_fail(call, GRPC_STATUS_UNIMPLEMENTED,
                          "this coordinator does not accept munge credentials (its msrun was not "
                          "started with --auth=munge)");
        return;
    }
    msr_status_t st = msr_munge_verify(s->munge, req->credential);
    if (st != MSR_OK) {
        uint64_t now = msr_now_ns();
        if (now - s->auth_logged_ns >= AUTH_LOG_INTERVAL_NS) {
            MSR_WARN("coordinator: refused Auth from %s: %s%s", msr_rpc_call_peer(call),
                     msr_err_msg(), s->auth_unlogged ? " (and earlier refusals not logged)" : "");
            s->auth_logged_ns = now;
            s->auth_unlogged = 0;
        } else {
            s->auth_unlogged++;
        }
        msr_rpc_call_fail(call,
                          st == MSR_ERR_PERMISSION ? GRPC_STATUS_PERMISSION_DENIED
                                                   : GRPC_STATUS_UNAVAILABLE,
                          "munge authentication refused: %s", msr_err_msg());
        return;
    }
    MSR_INFO("coordinator: %s authenticated with munge", msr_rpc_call_peer(call));
    Msr__AuthResponse resp = MSR__AUTH_RESPONSE__INIT;
    resp.token = s->token;
    msr_rpc_call_reply(call, &resp.base);
}

static void on_call(void *arg, msr_rpc_call_t *call, msr_rpc_method_t method, ProtobufCMessage *req)
{
    msr_coord_server_t *s = arg;
    if (s->coord == NULL) {
        msr_rpc_call_fail(call, GRPC_STATUS_UNAVAILABLE, "coordinator shutting down");
        return;
    }
    if (method == MSR_RPC_AUTH) {
        on_auth(s, call, (const Msr__AuthRequest *)req);
        return;
    }
    msr_coord_call(s->coord, call, method, req);
}

static void on_cancel(void *arg, msr_rpc_call_t *call)
{
    msr_coord_server_t *s = arg;
    if (s->coord)
        msr_coord_cancel(s->coord, call);
}

/* The world size assumed while the job's is not known yet (a standalone
 * coordinator learns it from the first node). */
#define UNKNOWN_WORLD 4096

/* Every connection holds a descriptor, and gRPC 1.51 stops accepting for
 * good once accept fails for want of one: the coordinator takes all the
 * descriptors its hard limit allows (Debian's soft default is 1024).
 * Returns the soft limit now. */
static rlim_t raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    if (rl.rlim_cur >= rl.rlim_max)
        return rl.rlim_cur;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        MSR_WARN("cannot raise the descriptor limit from %llu to %llu: %s", (unsigned long long)was,
                 (unsigned long long)rl.rlim_max, strerror(errno));
    else
        MSR_DEBUG("descriptor limit raised from %llu to %llu", (unsigned long long)was,
                  (unsigned long long)rl.rlim_max);
    return getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : was;
}

/* Connection bounds sized from the job. Legitimate connections: one per
 * msrun (its link, proxy and probes share it), one per rank that joins
 * directly (workers started by srun with MSR_COORDINATOR), and a few for
 * `msrun status`; a host may carry all of them (a job on one machine, or a
 * node's directly joining ranks connecting at once). So per host, world +
 * 16 connections may wait for their first call, and in all twice the
 * world plus the nodes plus 64 (room for reconnects whose old connection
 * is not yet gone), never more than the descriptors allow (two each). */
static void size_connections(const msr_coord_config_t *config, rlim_t nofile, int *total_p,
                             int *per_host_p)
{
    long world = config->worker_num;
    if (config->max_nodes > 0 && config->local_worker_num > 0)
        world = (long)config->max_nodes * config->local_worker_num;
    if (world <= 0)
        world = UNKNOWN_WORLD;
    long nodes = config->local_worker_num > 0 ? world / config->local_worker_num : world;
    long total = 2 * world + nodes + 64;
    long fd_cap = nofile > 256 ? (long)((nofile - 128) / 2) : 64;
    if (fd_cap > (1l << 30))
        fd_cap = 1l << 30;
    if (total > fd_cap) {
        MSR_WARN("the descriptor limit (%llu) allows %ld connections to the coordinator, fewer "
                 "than a job of %ld ranks may want (%ld): raise its hard limit (ulimit -Hn)",
                 (unsigned long long)nofile, fd_cap, world, total);
        total = fd_cap;
    }
    long per_host = world + 16;
    *total_p = (int)total;
    *per_host_p = (int)(per_host < total ? per_host : total);
}

msr_status_t msr_coord_server_create(const char *address, const msr_coord_config_t *config,
                                     int *port_p, msr_coord_server_t **server_p)
{
    return msr_coord_server_create_tls(address, config, NULL, port_p, server_p);
}

msr_status_t msr_coord_server_create_tls(const char *address, const msr_coord_config_t *config,
                                         const msr_rpc_tls_t *tls, int *port_p,
                                         msr_coord_server_t **server_p)
{
    if (config->auth_munge && (config->job_id == NULL || config->job_id[0] == '\0' ||
                               config->token == NULL || config->token[0] == '\0')) {
        MSR_ERROR("munge authentication needs the job's id and token");
        return MSR_ERR_INVALID_ARG;
    }
    msr_coord_server_t *s = msr_calloc(1, sizeof *s);
    if (s == NULL)
        return MSR_ERR_NO_MEMORY;
    if (config->auth_munge && (s->token = msr_strdup(config->token)) == NULL) {
        msr_free(s);
        return MSR_ERR_NO_MEMORY;
    }
    rlim_t nofile = raise_fd_limit();
    int max_connections, max_unauth_per_host;
    size_connections(config, nofile, &max_connections, &max_unauth_per_host);
    msr_status_t st = msr_coord_create(config, &grpc_responder, &s->coord);
    if (st != MSR_OK)
        goto err_free;
    st = msr_rpc_loop_create(&s->loop);
    if (st != MSR_OK)
        goto err_coord;
    /* The largest message a call may bring: a value at the store's limit,
     * or an allgather request in which a node's proxy combines every local
     * worker's contribution at that limit; plus room for keys and framing.
     * Larger ones are refused by gRPC before they are held. */
    msr_store_limits_t limits = msr_store_limits_resolve(&config->store_limits);
    uint64_t per_call =
        limits.value_max * (uint64_t)(config->local_worker_num > 1 ? config->local_worker_num : 1) +
        (64u << 10);
    msr_rpc_server_config_t sc = {
        .address = address,
        .max_message = per_call < INT32_MAX ? (size_t)per_call : (size_t)INT32_MAX,
        .token = config->token,
        .handler = on_call,
        .cancel = on_cancel,
        .arg = s,
        .log_name = "coordinator",
        .tls = tls,
        .max_connections = max_connections,
        .max_unauth_per_host = max_unauth_per_host,
        .tokenless_methods = config->auth_munge ? 1u << MSR_RPC_AUTH : 0,
    };
    int port = 0;
    st = msr_rpc_server_create(s->loop, &sc, &port, &s->rpc);
    if (st != MSR_OK)
        goto err_loop;
    if (config->auth_munge) {
        /* credentials name the address with the port bound (address may say 0) */
        char bind[320];
        const char *colon = strrchr(address, ':');
        snprintf(bind, sizeof bind, "%.*s:%d", colon ? (int)(colon - address) : 0, address, port);
        msr_munge_verifier_config_t mc = {config->munge_socket, config->job_id, msr_munge_job_uid(),
                                          bind};
        st = msr_munge_verifier_create(&mc, &s->munge);
        if (st != MSR_OK) {
            MSR_ERROR("%s", msr_err_msg_or(st));
            goto err_rpc;
        }
    }
    *port_p = port;
    *server_p = s;
    return MSR_OK;

err_rpc:
    msr_rpc_server_destroy(s->rpc);
err_loop:
    msr_rpc_loop_destroy(s->loop);
err_coord:
    msr_coord_destroy(s->coord);
err_free:
    msr_free(s->token);
    msr_free(s);
    return st;
}

/* Renders the job for the dashboard: the core's metrics, then the
 * server's (call latencies, dashboard requests). */
static void publish(msr_coord_server_t *s)
{
    msr_buf_t *m = &s->snap_metrics, *j = &s->snap_job;
    msr_coord_render_metrics(s->coord, m);
    msr_buf_printf(m, "# HELP msrun_coordinator_call_duration_seconds Time from a call's arrival "
                      "to its answer, by method (long polls' waits included).\n"
                      "# TYPE msrun_coordinator_call_duration_seconds histogram\n");
    for (int k = 0; k < MSR_RPC_METHOD_COUNT; k++) {
        uint64_t cum = 0;
        const char *name = msr_rpc_methods[k].name;
        for (size_t b = 0; b <= NBOUNDS; b++) {
            cum += s->lat_buckets[k][b];
            if (b < NBOUNDS)
                msr_buf_printf(m,
                               "msrun_coordinator_call_duration_seconds_bucket{method=\"%s\","
                               "le=\"%g\"} %llu\n",
                               name, latency_bounds[b], (unsigned long long)cum);
            else
                msr_buf_printf(m,
                               "msrun_coordinator_call_duration_seconds_bucket{method=\"%s\","
                               "le=\"+Inf\"} %llu\n",
                               name, (unsigned long long)cum);
        }
        msr_buf_printf(m, "msrun_coordinator_call_duration_seconds_sum{method=\"%s\"} %.9g\n", name,
                       s->lat_sum[k]);
        msr_buf_printf(m, "msrun_coordinator_call_duration_seconds_count{method=\"%s\"} %llu\n",
                       name, (unsigned long long)cum);
    }
    msr_buf_printf(m,
                   "# HELP msrun_dashboard_requests_total Dashboard requests, and those "
                   "refused for want of the token.\n"
                   "# TYPE msrun_dashboard_requests_total counter\n"
                   "msrun_dashboard_requests_total{outcome=\"served\"} %lu\n"
                   "msrun_dashboard_requests_total{outcome=\"refused\"} %lu\n",
                   msr_http_served(s->http) - msr_http_refused(s->http), msr_http_refused(s->http));
    msr_buf_printf(m,
                   "# HELP msrun_dashboard_connections_shed_total Dashboard connections closed "
                   "over the cap or past the request deadline, and accepts failed.\n"
                   "# TYPE msrun_dashboard_connections_shed_total counter\n"
                   "msrun_dashboard_connections_shed_total %lu\n",
                   msr_http_shed(s->http));
    msr_coord_render_job(s->coord, j);
    msr_http_publish(s->http, m, j);
}

msr_status_t msr_coord_server_dashboard(msr_coord_server_t *s, const msr_http_config_t *config,
                                        int *port_p)
{
    return msr_http_start(config, port_p, &s->http);
}

msr_job_state_t msr_coord_server_run(msr_coord_server_t *s, volatile sig_atomic_t *stop,
                                     int exit_when_finished)
{
    while (!(stop && *stop)) {
        if (exit_when_finished && msr_coord_finished(s->coord))
            break;
        uint64_t deadline = msr_coord_next_deadline(s->coord);
        uint64_t cap = msr_now_ns() + 100 * 1000000ull; /* notice *stop soon */
        if (deadline > cap)
            deadline = cap;
        int got = msr_rpc_loop_poll(s->loop, deadline);
        if (got < 0)
            break;
        /* Group commit: take every call that is already here, then one save
         * (in the tick) answers all the writes among them. */
        for (int n = 0; got > 0 && n < 1024; n++)
            got = msr_rpc_loop_poll(s->loop, 0);
        if (got < 0)
            break;
        msr_coord_tick(s->coord, msr_now_ns());
        if (s->http && msr_http_wanted(s->http))
            publish(s);
        int rank;
        uint64_t seq;
        if (s->http && msr_http_output_wanted(s->http, &rank, &seq)) {
            int code = msr_coord_render_output(s->coord, rank, msr_now_ns(), &s->snap_output);
            msr_http_output_answer(s->http, seq, code, &s->snap_output);
        }
    }
    msr_coord_flush(s->coord);
    return msr_coord_state(s->coord);
}

void msr_coord_server_destroy(msr_coord_server_t *s)
{
    if (s == NULL)
        return;
    /* Answer what the core still holds, then let the server cancel the rest. */
    msr_http_stop(s->http);
    msr_buf_cleanup(&s->snap_metrics);
    msr_buf_cleanup(&s->snap_job);
    msr_buf_cleanup(&s->snap_output);
    msr_coord_destroy(s->coord);
    s->coord = NULL;
    msr_rpc_server_destroy(s->rpc);
    msr_rpc_loop_destroy(s->loop);
    msr_munge_verifier_destroy(s->munge);
    if (s->token)
        memset(s->token, 0, strlen(s->token));
    msr_free(s->token);
    msr_free(s);
}
