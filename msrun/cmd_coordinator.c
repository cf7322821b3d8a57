/* `msrun coordinator`: a standalone coordinator, or the one an agent embeds
 * as its child. */
#include "launcher/commands.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "base/optparse.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/failure.h"
#include "cluster/server.h"
#include "launcher/dashboard_login.h"
#include "launcher/net.h"
#include "launcher/options.h"
#include "launcher/rundir.h"
#include "launcher/token.h"
#include "rendezvous/rpc.h"

static volatile sig_atomic_t coord_stop;

static void on_stop_signal(int sig)
{
    (void)sig;
    coord_stop = 1;
}

/* `msrun coordinator`'s options. */
typedef struct coord_args {
    int port;
    char *host;
    char *bind_host; /* --bind HOST:PORT; NULL: --host and --port */
    int bind_port;
    char *job_id, *token, *token_file, *state_file;
    int worker_num, local_worker_num, max_restarts; /* 0, 0, -1: from the first node */
    int64_t node_timeout_ms, cluster_time_out_ms, last_call_ms;
    int64_t join_hold_ms; /* -1: not given */
    int min_nodes, max_nodes;
    int log_level, state_sync, ready_fd;
    int state_repair; /* cut a corrupt --state_file at its first bad record */
    char *tls_cert, *tls_key, *tls_ca;
    int64_t store_value_max, store_keys_max, store_bytes_max; /* 0: the store's defaults */
    int64_t held_calls_max, held_bytes_max, held_calls_total, held_bytes_total; /* 0: defaults */
    char *etcd_endpoints, *etcd_prefix; /* the state in etcd instead of a file */
    int64_t etcd_lease;
    int auth_munge;
    char *munge_socket;
    int dashboard_port; /* 0: no dashboard */
    char *dashboard_addr, *straggler_factor;
    int64_t dashboard_login_ttl_ms, dashboard_deadline_ms; /* 0: cluster/http.h's defaults */
    char *dashboard_login_file;
    int dashboard_max_connections;
} coord_args_t;

#define C(field) MSR_OPT_DEST(coord_args_t, field)

static const char *const state_sync_names[] = {"disk", "process", NULL};
static const char *const auth_names[] = {"token", "munge", NULL};

/* clang-format off */
static const msr_opt_t coord_opts[] = {
    {.name = "port", .kind = MSR_OPT_PORT, MSR_OPTB_PORT, .env = "MSRUN_MASTER_PORT",
     .dest = C(port), .def = "8118", .metavar = "P",
     .help = "listen on port P of --host."},
    {.name = "host", .aliases = {"master_addr"}, .kind = MSR_OPT_STRING, .env = "MSRUN_MASTER_ADDR",
     .dest = C(host), .def = "127.0.0.1", .metavar = "ADDR",
     .help = "listen on this address only; 0.0.0.0 (every interface) only when given."},
    {.name = "bind", .kind = MSR_OPT_HOSTPORT, MSR_OPTB_PORT, .dest = C(bind_host),
     .dest2 = offsetof(coord_args_t, bind_port), .metavar = "ADDR:PORT",
     .help = "listen on this address and port."},
    {.name = "job_id", .kind = MSR_OPT_STRING, .dest = C(job_id), .def = "from the first node",
     .metavar = "ID",
     .help = "the job's id."},
    {.name = "token_file", .kind = MSR_OPT_STRING, .group = 1, .env = "MSRUN_TOKEN_FILE",
     .dest = C(token_file), .metavar = "PATH",
     .help = "read the job token from PATH, a file only you may read (mode 0600)."},
    {.name = "token", .aliases = {"job_token"}, .kind = MSR_OPT_SECRET, .group = 1,
     .env = "MSRUN_TOKEN", .dest = C(token), .metavar = "SECRET",
     .help = "the job token (prefer MSRUN_TOKEN or --token_file: others may see a command line). "
             "Required: there is no default token."},
    {.name = "worker_num", .kind = MSR_OPT_INT, MSR_OPTB_COUNT, .dest = C(worker_num),
     .def = "from the first node", .metavar = "N",
     .help = "the job's world size."},
    {.name = "local_worker_num", .aliases = {"nproc_per_node"}, .kind = MSR_OPT_INT, MSR_OPTB_COUNT,
     .dest = C(local_worker_num), .def = "from the first node", .metavar = "N",
     .help = "workers per node."},
    {.name = "max_restarts", .kind = MSR_OPT_INT, MSR_OPTB_RESTARTS, .dest = C(max_restarts),
     .def = "from the first node", .metavar = "N",
     .help = "job-wide restarts."},
    {.name = "node_timeout", .kind = MSR_OPT_SECONDS, MSR_OPTB_NODE_TIMEOUT,
     .dest = C(node_timeout_ms), .def = "5", .metavar = "SEC",
     .help = "a node silent this long is lost."},
    {.name = "nnodes", .kind = MSR_OPT_RANGE, MSR_OPTB_NODES, .dest = C(min_nodes),
     .dest2 = offsetof(coord_args_t, max_nodes), .def = "fixed", .metavar = "MIN:MAX",
     .help = "an elastic job's range of nodes."},
    {.name = "last_call", .kind = MSR_OPT_SECONDS, MSR_OPTB_LAST_CALL, .dest = C(last_call_ms),
     .def = "1", .metavar = "SEC",
     .help = "elastic: once MIN nodes are in, wait this long for more."},
    {.name = "join_hold", .kind = MSR_OPT_SECONDS, MSR_OPTB_JOIN_HOLD, .dest = C(join_hold_ms),
     .def = "cluster_time_out", .metavar = "SEC",
     .help = "elastic: hold a join's re-form this long at most for the workers' checkpoint; 0: "
             "no hold."},
    {.name = "cluster_time_out", .aliases = {"rdzv_timeout"}, .kind = MSR_OPT_SECONDS,
     MSR_OPTB_CLUSTER_TIME_OUT, .dest = C(cluster_time_out_ms), .def = "600", .metavar = "SEC",
     .help = "a generation must form within this long."},
    {.name = "log_level", .kind = MSR_OPT_LEVEL, .dest = C(log_level), .def = "info",
     .metavar = "LEVEL",
     .help = "error, warn, info or debug."},
    {.name = "state_file", .kind = MSR_OPT_STRING, .dest = C(state_file), .metavar = "PATH",
     .help = "keep the job's state in PATH (saved before every answer that depends on it) and "
             "resume from it."},
    {.name = "state_sync", .kind = MSR_OPT_ENUM, .choices = state_sync_names, .dest = C(state_sync),
     .def = "disk", .metavar = "disk|process",
     .help = "a save waits for the disk (fdatasync: answered writes survive a crash of this "
             "host) or only for the kernel (they survive any end of the coordinator)."},
    {.name = "state_repair", .kind = MSR_OPT_BOOL, .dest = C(state_repair), .def = "false",
     .help = "a state log (--state_file or etcd) with a bad record that is not a save cut "
             "short by a crash (whole records follow it) is refused and left as it is; with "
             "this, cut it at that record (saying how many records are dropped) and resume "
             "from what precedes."},
    {.name = "ready_fd", .kind = MSR_OPT_INT, .min = 0, .max = 1 << 20, .dest = C(ready_fd),
     .metavar = "FD",
     .help = "write 'port N' (or 'error ...') to FD once listening. msrun starts its embedded "
             "coordinator so; such a coordinator logs the job's restarts and end at info, as its "
             "msrun reports them."},
    {.name = "tls_cert", .kind = MSR_OPT_PATH, .env = "MSRUN_TLS_CERT", .dest = C(tls_cert),
     .metavar = "PEM",
     .help = "serve TLS with this certificate (chain)."},
    {.name = "tls_key", .kind = MSR_OPT_PATH, .env = "MSRUN_TLS_KEY", .dest = C(tls_key),
     .metavar = "PEM",
     .help = "and this private key."},
    {.name = "tls_ca", .kind = MSR_OPT_PATH, .env = "MSRUN_TLS_CA", .dest = C(tls_ca),
     .metavar = "PEM",
     .help = "require client certificates signed by this CA (mutual TLS)."},
    {.name = "store_value_max", .kind = MSR_OPT_SIZE, MSR_OPTB_BYTES,
     .env = "MSRUN_STORE_VALUE_MAX", .dest = C(store_value_max), .def = "16M", .metavar = "BYTES",
     .help = "refuse a store value larger than this (K, M, G suffixes)."},
    {.name = "store_keys_max", .kind = MSR_OPT_INT, MSR_OPTB_COUNT, .env = "MSRUN_STORE_KEYS_MAX",
     .dest = C(store_keys_max), .def = "1048576, or 4 a rank past 262144 ranks", .metavar = "N",
     .help = "hold at most this many keys and waited-on names."},
    {.name = "store_bytes_max", .kind = MSR_OPT_SIZE, MSR_OPTB_BYTES,
     .env = "MSRUN_STORE_BYTES_MAX", .dest = C(store_bytes_max), .def = "1G, or 4K a rank past 262144 ranks", .metavar = "BYTES",
     .help = "hold at most this many bytes of keys, values and pending allgather contributions "
             "(64 more per key)."},
    {.name = "held_calls_max", .kind = MSR_OPT_INT, MSR_OPTB_COUNT, .env = "MSRUN_HELD_CALLS_MAX",
     .dest = C(held_calls_max), .def = "4096", .metavar = "N",
     .help = "at most this many calls of one client (host) wait at once (a get, fetch, barrier, "
             "allgather or heartbeat); past it RESOURCE_EXHAUSTED."},
    {.name = "held_bytes_max", .kind = MSR_OPT_SIZE, MSR_OPTB_BYTES,
     .env = "MSRUN_HELD_BYTES_MAX", .dest = C(held_bytes_max), .def = "64M", .metavar = "BYTES",
     .help = "the waiting calls of one client keep at most this many bytes."},
    {.name = "held_calls_total", .kind = MSR_OPT_INT, MSR_OPTB_COUNT,
     .env = "MSRUN_HELD_CALLS_TOTAL", .dest = C(held_calls_total), .def = "131072", .metavar = "N",
     .help = "at most this many calls wait at once, of every client."},
    {.name = "held_bytes_total", .kind = MSR_OPT_SIZE, MSR_OPTB_BYTES,
     .env = "MSRUN_HELD_BYTES_TOTAL", .dest = C(held_bytes_total), .def = "1G", .metavar = "BYTES",
     .help = "the waiting calls of every client keep at most this many bytes."},
    {.name = "etcd_endpoints", .kind = MSR_OPT_STRING, .dest = C(etcd_endpoints),
     .metavar = "HOST:PORT,...",
     .help = "keep the job's state in etcd (instead of --state_file) and resume from it."},
    {.name = "etcd_prefix", .kind = MSR_OPT_STRING, .dest = C(etcd_prefix),
     .def = "/msrun/JOB_ID", .metavar = "KEY",
     .help = "the etcd keys of the job's state: KEY/state and KEY/log/."},
    {.name = "etcd_lease", .kind = MSR_OPT_INT, .min = 0, .max = INT64_MAX,
     .dest = C(etcd_lease), .metavar = "ID",
     .help = "write only while KEY/leader is held by this etcd lease (msrun's election)."},
    {.name = "auth", .kind = MSR_OPT_ENUM, .choices = auth_names, .env = "MSRUN_AUTH",
     .dest = C(auth_munge), .def = "token", .metavar = "token|munge",
     .help = "munge: also hand the job token to a node that shows a munge credential of the "
             "job's user (SLURM_JOB_UID, else this process' uid) made for this job (--job_id, "
             "required) and this address."},
    {.name = "munge_socket", .kind = MSR_OPT_STRING, .env = "MSRUN_MUNGE_SOCKET",
     .dest = C(munge_socket), .def = "munge's default", .metavar = "PATH",
     .help = "the socket of munged for auth=munge."},
    {.name = "dashboard_port", .kind = MSR_OPT_PORT, .min = 0, .max = 65535,
     .env = "MSRUN_DASHBOARD_PORT", .dest = C(dashboard_port), .def = "0 (none)", .metavar = "PORT",
     .help = "serve the job's page, /api/job, /api/output and /metrics over HTTP on this port "
             "(each request with the job token; docs/observe.md)."},
    {.name = "dashboard_addr", .kind = MSR_OPT_STRING, .env = "MSRUN_DASHBOARD_ADDR",
     .dest = C(dashboard_addr), .def = "127.0.0.1", .metavar = "ADDR",
     .help = "the address the dashboard listens on."},
    {.name = "dashboard_login_ttl", .kind = MSR_OPT_SECONDS, MSR_OPTB_LOGIN_TTL,
     .env = "MSRUN_DASHBOARD_LOGIN_TTL", .dest = C(dashboard_login_ttl_ms), .def = "600",
     .metavar = "SEC",
     .help = "a login URL works once, within this long (1 s to a day)."},
    {.name = "dashboard_login_file", .kind = MSR_OPT_STRING, .env = "MSRUN_DASHBOARD_LOGIN_FILE",
     .dest = C(dashboard_login_file), .def = "stderr if a terminal, else the runtime directory",
     .metavar = "PATH",
     .help = "write the login URL to PATH, a new file of mode 0600, and say only where it is."},
    {.name = "dashboard_max_connections", .kind = MSR_OPT_INT, .min = 1, .max = 65536,
     .env = "MSRUN_DASHBOARD_MAX_CONNECTIONS", .dest = C(dashboard_max_connections), .def = "256", .metavar = "N",
     .help = "the dashboard holds at most N connections; one more is closed at once."},
    {.name = "dashboard_request_timeout", .kind = MSR_OPT_SECONDS, .min = 100, .max = 3600000,
     .env = "MSRUN_DASHBOARD_REQUEST_TIMEOUT", .dest = C(dashboard_deadline_ms), .def = "10", .metavar = "SEC",
     .help = "a request not read whole within this long of its connection's accept (or of "
             "the answer before) is cut, however slowly it trickles in."},
    {.name = "straggler_factor", .kind = MSR_OPT_STRING, .env = "MSRUN_STRAGGLER_FACTOR",
     .dest = C(straggler_factor), .def = "1.5", .metavar = "X",
     .help = "name a rank whose mean step time over its last 20 steps is X times the median."},
};
/* clang-format on */

static const msr_optset_t coord_set = {"msrun coordinator", coord_opts, MSR_ARRAY_SIZE(coord_opts),
                                       0};

static void coordinator_usage(FILE *out)
{
    fprintf(out, "usage: msrun coordinator [options]\n"
                 "\n"
                 "Serves one job's coordinator until the job ends and every node has left (or\n"
                 "until SIGINT/SIGTERM). Agents reach it with --master_addr/--master_port.\n"
                 "Names take '-' or '_' alike.\n"
                 "\n"
                 "options:\n");
    msr_opts_usage(&coord_set, out);
}

/* Parses `msrun coordinator`'s arguments into a (holding its defaults):
 * 0 to go on, else the exit status (after printing --help or why). */
static int coord_parse(int argc, char **argv, coord_args_t *a)
{
    unsigned char seen[MSR_ARRAY_SIZE(coord_opts)];
    int next;
    switch (msr_opts_parse(&coord_set, argc, argv, a, seen, &next)) {
    case MSR_OPTS_HELP:
        coordinator_usage(stdout);
        return -1;
    case MSR_OPTS_OK:
        break;
    default:
        msr_opts_print_error(&coord_set);
        return 2;
    }
    if ((a->tls_cert || a->tls_key || a->tls_ca) && (!a->tls_cert || !a->tls_key)) {
        fprintf(stderr, "msrun coordinator: error: TLS needs both --tls_cert and --tls_key\n");
        return 2;
    }
    if (a->worker_num && a->local_worker_num && a->worker_num % a->local_worker_num) {
        fprintf(stderr,
                "msrun coordinator: error: worker_num %d is not a multiple of "
                "local_worker_num %d\n",
                a->worker_num, a->local_worker_num);
        return 2;
    }
    if (a->auth_munge && (a->job_id == NULL || a->job_id[0] == '\0')) {
        fprintf(stderr, "msrun coordinator: error: --auth=munge needs --job_id: credentials name "
                        "the job\n");
        return 2;
    }
    if (a->straggler_factor) {
        char *end;
        double x = strtod(a->straggler_factor, &end);
        if (*end != '\0' || !(x > 1 && x <= 1000)) {
            fprintf(stderr,
                    "msrun coordinator: error: --straggler_factor=%s is not a number above 1 "
                    "(up to 1000)\n",
                    a->straggler_factor);
            return 2;
        }
    }
    return msr_options_need_token("msrun coordinator", &a->token, a->token_file);
}

/* Standalone, the login URL is told here (an msrun that started this
 * coordinator tells its own): 0, or 2 when it could not be. file gets the
 * default file written (removed at the end), or "". */
static int tell_login(const coord_args_t *a, const char *addr, int port, const char *code,
                      char file[MSR_DASHBOARD_LOGIN_PATH_LEN])
{
    char hp[300];
    file[0] = '\0';
    msr_net_join(addr, port, hp, sizeof hp);
    if (a->dashboard_login_file == NULL && !isatty(STDERR_FILENO) &&
        msr_dashboard_login_default(port, file, MSR_DASHBOARD_LOGIN_PATH_LEN) != MSR_OK) {
        fprintf(stderr, "msrun coordinator: error: no file for the dashboard's login URL: %s\n",
                msr_err_msg());
        return 2;
    }
    int64_t ttl_ms =
        a->dashboard_login_ttl_ms > 0 ? a->dashboard_login_ttl_ms : MSR_HTTP_LOGIN_TTL_S * 1000;
    if (msr_dashboard_login_tell("msrun coordinator", hp, code, ttl_ms / 1000,
                                 a->dashboard_login_file, file) != MSR_OK) {
        file[0] = '\0';
        return 2;
    }
    return 0;
}

/* Starts the dashboard: 0, or after saying why (on the ready pipe, if
 * any), 2. An msrun that started this coordinator made the one-time login
 * code (MSRUN_DASHBOARD_CODE) and tells the URL; standalone, it is made
 * and told here. */
static int serve_dashboard(const coord_args_t *a, msr_coord_server_t *server, int64_t ready_fd,
                           char login_file[MSR_DASHBOARD_LOGIN_PATH_LEN])
{
    char code[MSR_HTTP_CODE_LEN] = "";
    const char *given = getenv("MSRUN_DASHBOARD_CODE");
    int standalone = !(given && *given);
    if (standalone)
        msr_http_code_new(code);
    else
        snprintf(code, sizeof code, "%s", given);
    unsetenv("MSRUN_DASHBOARD_CODE");
    const char *addr = a->dashboard_addr ? a->dashboard_addr : "127.0.0.1";
    int port = 0;
    msr_http_config_t hc = {
        .addr = addr,
        .port = a->dashboard_port,
        .token = a->token,
        .login_code = code,
        .login_ttl_ms = a->dashboard_login_ttl_ms,
        .max_connections = a->dashboard_max_connections,
        .request_deadline_ms = a->dashboard_deadline_ms,
    };
    if (msr_coord_server_dashboard(server, &hc, &port) != MSR_OK) {
        char line[400];
        int n = snprintf(line, sizeof line,
                         "error cannot serve the dashboard on %s port %d: address in use or not "
                         "available\n",
                         addr, a->dashboard_port);
        if (ready_fd >= 0)
            msr_write_all((int)ready_fd, line, (size_t)n);
        else
            fprintf(stderr, "msrun coordinator: %s", line);
        memset(code, 0, sizeof code);
        return 2;
    }
    int r = standalone ? tell_login(a, addr, port, code, login_file) : 0;
    memset(code, 0, sizeof code);
    return r;
}

/* Serves the coordinator of a's job on bind until it ends (or a signal). */
static int coord_serve(const coord_args_t *a, const char *bind)
{
    msr_rpc_tls_t tls = {a->tls_cert, a->tls_key, a->tls_ca, NULL};
    int64_t ready_fd = a->ready_fd;
    const char *state_file = a->state_file;
    char etcd_prefix[600];
    snprintf(etcd_prefix, sizeof etcd_prefix, "%s", a->etcd_prefix ? a->etcd_prefix : "");
    if (etcd_prefix[0] == '\0')
        snprintf(etcd_prefix, sizeof etcd_prefix, "/msrun/%s", a->job_id ? a->job_id : "job");
    if (a->etcd_endpoints)
        state_file = etcd_prefix;
    msr_coord_config_t cfg = {
        .token = a->token,
        .job_id = a->job_id,
        .worker_num = a->worker_num,
        .local_worker_num = a->local_worker_num,
        .max_restarts = a->max_restarts,
        .node_timeout_ms = a->node_timeout_ms,
        .join_timeout_ms = a->cluster_time_out_ms,
        .state_file = a->state_file,
        .state_sync_process = a->state_sync == 1,
        .state_repair = a->state_repair,
        .etcd_endpoints = a->etcd_endpoints,
        .etcd_prefix = etcd_prefix,
        .etcd_lease = a->etcd_lease,
        /* an msrun started it (--ready_fd): that msrun reports restarts and
         * the end to its user */
        .outcome_reported = a->ready_fd >= 0,
        .min_nodes = a->min_nodes < a->max_nodes ? a->min_nodes : 0,
        .max_nodes = a->min_nodes < a->max_nodes ? a->max_nodes : 0,
        .last_call_ms = a->last_call_ms,
        .join_hold_ms = a->join_hold_ms < 0    ? 0 /* the coordinator's default */
                        : a->join_hold_ms == 0 ? MSR_COORD_JOIN_HOLD_NONE
                                               : a->join_hold_ms,
        .store_limits = {(uint64_t)a->store_value_max, (uint64_t)a->store_keys_max,
                         (uint64_t)a->store_bytes_max},
        .held_limits = {(uint64_t)a->held_calls_max, (uint64_t)a->held_bytes_max,
                        (uint64_t)a->held_calls_total, (uint64_t)a->held_bytes_total},
        .auth_munge = a->auth_munge,
        .munge_socket = a->munge_socket,
        .straggler_factor = a->straggler_factor ? strtod(a->straggler_factor, NULL) : 0,
    };
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    msr_coord_server_t *server = NULL;
    int port = 0;
    msr_status_t st = msr_coord_server_create_tls(bind, &cfg, &tls, &port, &server);
    char line[400];
    /* the state could not be read back (etcd: not reached either) */
    int resume_failed = st == MSR_ERR_CORRUPT || st == MSR_ERR_CONFLICT ||
                        (a->etcd_endpoints && st == MSR_ERR_UNREACHABLE);
    if (st != MSR_OK) {
        int n =
            st == MSR_ERR_INVALID_ARG && msr_rpc_tls_enabled(&tls)
                ? snprintf(line, sizeof line, "error cannot use the TLS certificate %s\n", tls.cert)
                : snprintf(line, sizeof line, "error cannot %s %s: %s\n",
                           resume_failed ? "resume from" : "listen on",
                           resume_failed ? state_file : bind,
                           st == MSR_ERR_ADDR_IN_USE ? "address in use or not available"
                           : resume_failed && st == MSR_ERR_UNREACHABLE ? "etcd unreachable"
                                                                        : msr_status_str(st));
        if (ready_fd >= 0)
            msr_write_all((int)ready_fd, line, (size_t)n);
        else
            fprintf(stderr, "msrun coordinator: %s", line);
        return 2;
    }
    char login_file[MSR_DASHBOARD_LOGIN_PATH_LEN] = "";
    if (a->dashboard_port > 0 && serve_dashboard(a, server, ready_fd, login_file) != 0) {
        msr_coord_server_destroy(server);
        return 2;
    }
    if (ready_fd >= 0) {
        int n = snprintf(line, sizeof line, "port %d\n", port);
        msr_write_all((int)ready_fd, line, (size_t)n);
        close((int)ready_fd);
    } else {
        MSR_INFO("listening on %s (port %d)", bind, port);
    }
    msr_job_state_t end = msr_coord_server_run(server, &coord_stop, 1);
    msr_coord_server_destroy(server);
    if (login_file[0]) /* its codes died with the server */
        unlink(login_file);
    return end == MSR_JOB_DONE ? 0 : 1;
}

int msr_coordinator_main(int argc, char **argv)
{
    coord_args_t a = {.port = 8118,
                      .max_restarts = -1,
                      .node_timeout_ms = 5000,
                      .cluster_time_out_ms = 600000,
                      .last_call_ms = 1000,
                      .join_hold_ms = -1,
                      .log_level = MSR_LOG_INFO,
                      .ready_fd = -1};
    int r = coord_parse(argc, argv, &a);
    if (r == 0) {
        msr_log_init("msrun-coordinator", -1, -1);
        msr_log_set_level((msr_log_level_t)a.log_level);
        /* --port on --host (loopback unless another address is asked for),
         * or --bind */
        const char *host = a.bind_host ? a.bind_host : a.host ? a.host : "127.0.0.1";
        int port = a.bind_host ? a.bind_port : a.port;
        char bind[300];
        msr_net_join(host, port, bind, sizeof bind);
        r = coord_serve(&a, bind);
    }
    msr_opts_free(&coord_set, &a);
    return r < 0 ? 0 : r;
}
