/* `msrun coordinator` and `msrun status`. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/optparse.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/failure.h"
#include "cluster/server.h"
#include "msrun/agent.h"
#include "msrun/net.h"
#include "msrun/options.h"
#include "msrun/rundir.h"
#include "msrun/token.h"
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
    int min_nodes, max_nodes;
    int log_level, state_sync, ready_fd;
    char *tls_cert, *tls_key, *tls_ca;
    int64_t store_value_max, store_keys_max, store_bytes_max; /* 0: the store's defaults */
    char *etcd_endpoints, *etcd_prefix; /* the state in etcd instead of a file */
    int64_t etcd_lease;
    int auth_munge;
    char *munge_socket;
    int dashboard_port; /* 0: no dashboard */
    char *dashboard_addr, *straggler_factor;
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
     .dest = C(store_keys_max), .def = "1048576", .metavar = "N",
     .help = "hold at most this many keys and waited-on names."},
    {.name = "store_bytes_max", .kind = MSR_OPT_SIZE, MSR_OPTB_BYTES,
     .env = "MSRUN_STORE_BYTES_MAX", .dest = C(store_bytes_max), .def = "1G", .metavar = "BYTES",
     .help = "hold at most this many bytes of keys, values and pending allgather contributions "
             "(64 more per key)."},
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

/* Starts the dashboard: 0, or after saying why (on the ready pipe, if
 * any), 2. An msrun that started this coordinator made the one-time login
 * code (MSRUN_DASHBOARD_CODE) and prints the URL; standalone, it is made
 * and printed here. */
static int serve_dashboard(const coord_args_t *a, msr_coord_server_t *server, int64_t ready_fd)
{
    char code[40] = "";
    const char *given = getenv("MSRUN_DASHBOARD_CODE");
    if (given && *given) {
        snprintf(code, sizeof code, "%s", given);
    } else {
        unsigned char rnd[16];
        msr_random_bytes(rnd, sizeof rnd);
        for (size_t i = 0; i < sizeof rnd; i++)
            snprintf(code + 2 * i, 3, "%02x", rnd[i]);
    }
    unsetenv("MSRUN_DASHBOARD_CODE");
    const char *addr = a->dashboard_addr ? a->dashboard_addr : "127.0.0.1";
    int port = 0;
    if (msr_coord_server_dashboard(server, addr, a->dashboard_port, a->token, code, &port) !=
        MSR_OK) {
        char line[400];
        int n = snprintf(line, sizeof line,
                         "error cannot serve the dashboard on %s port %d: address in use or not "
                         "available\n",
                         addr, a->dashboard_port);
        if (ready_fd >= 0)
            msr_write_all((int)ready_fd, line, (size_t)n);
        else
            fprintf(stderr, "msrun coordinator: %s", line);
        return 2;
    }
    if (!(given && *given)) {
        char hp[300];
        msr_net_join(addr, port, hp, sizeof hp);
        fprintf(stderr,
                "msrun coordinator: dashboard at http://%s/login?code=%s (the link logs in once; "
                "afterwards send 'Authorization: Bearer <job token>')\n",
                hp, code);
    }
    memset(code, 0, sizeof code);
    return 0;
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
        .etcd_endpoints = a->etcd_endpoints,
        .etcd_prefix = etcd_prefix,
        .etcd_lease = a->etcd_lease,
        /* an msrun started it (--ready_fd): that msrun reports restarts and
         * the end to its user */
        .outcome_reported = a->ready_fd >= 0,
        .min_nodes = a->min_nodes < a->max_nodes ? a->min_nodes : 0,
        .max_nodes = a->min_nodes < a->max_nodes ? a->max_nodes : 0,
        .last_call_ms = a->last_call_ms,
        .store_limits = {(uint64_t)a->store_value_max, (uint64_t)a->store_keys_max,
                         (uint64_t)a->store_bytes_max},
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
    int resume_failed = st == MSR_ERR_CORRUPT || (a->etcd_endpoints && st == MSR_ERR_UNREACHABLE);
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
    if (a->dashboard_port > 0 && serve_dashboard(a, server, ready_fd) != 0) {
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
    Msr__JobState end = msr_coord_server_run(server, &coord_stop, 1);
    msr_coord_server_destroy(server);
    return end == MSR__JOB_STATE__JOB_DONE ? 0 : 1;
}

int msr_coordinator_main(int argc, char **argv)
{
    coord_args_t a = {.port = 8118,
                      .max_restarts = -1,
                      .node_timeout_ms = 5000,
                      .cluster_time_out_ms = 600000,
                      .last_call_ms = 1000,
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

/* `msrun status`'s options. */
typedef struct status_args {
    char *master_addr;
    int master_port;
    char *token, *token_file;
    char *tls_cert, *tls_key, *tls_ca, *tls_server_name;
    char *job_id;
    int json;
} status_args_t;

#define S(field) MSR_OPT_DEST(status_args_t, field)

/* clang-format off */
static const msr_opt_t status_opts[] = {
    {.name = "master_addr", .kind = MSR_OPT_STRING, .env = "MSRUN_MASTER_ADDR",
     .dest = S(master_addr), .def = "the jobs found on this machine", .metavar = "ADDR",
     .help = "address of the coordinator (127.0.0.1 when only --master_port is given)."},
    {.name = "master_port", .kind = MSR_OPT_PORT, MSR_OPTB_PORT, .env = "MSRUN_MASTER_PORT",
     .dest = S(master_port), .def = "8118 when --master_addr is given", .metavar = "PORT",
     .help = "port of the coordinator."},
    {.name = "token_file", .kind = MSR_OPT_STRING, .group = 1, .env = "MSRUN_TOKEN_FILE",
     .dest = S(token_file), .metavar = "PATH",
     .help = "read the job token from PATH, a file only you may read (mode 0600)."},
    {.name = "token", .aliases = {"job_token"}, .kind = MSR_OPT_SECRET, .group = 1,
     .env = "MSRUN_TOKEN", .dest = S(token), .metavar = "SECRET",
     .help = "the job token (prefer MSRUN_TOKEN or --token_file: others may see a command line)."},
    {.name = "tls_cert", .kind = MSR_OPT_PATH, .env = "MSRUN_TLS_CERT", .dest = S(tls_cert),
     .metavar = "PEM",
     .help = "this client's TLS certificate (chain), with tls_key."},
    {.name = "tls_key", .kind = MSR_OPT_PATH, .env = "MSRUN_TLS_KEY", .dest = S(tls_key),
     .metavar = "PEM",
     .help = "the private key of tls_cert."},
    {.name = "tls_ca", .kind = MSR_OPT_PATH, .env = "MSRUN_TLS_CA", .dest = S(tls_ca),
     .metavar = "PEM",
     .help = "the CA that signed the coordinator's certificate."},
    {.name = "tls_server_name", .kind = MSR_OPT_STRING, .env = "MSRUN_TLS_SERVER_NAME",
     .dest = S(tls_server_name), .metavar = "NAME",
     .help = "the name the coordinator's certificate must carry. Default: master_addr as given."},
    {.name = "job_id", .kind = MSR_OPT_STRING, .dest = S(job_id), .metavar = "ID",
     .help = "show this job of the ones running on this machine; with --master_addr or "
             "--master_port, the coordinator there must serve it."},
    {.name = "json", .kind = MSR_OPT_BOOL, .dest = S(json), .def = "false",
     .help = "print JSON: one object for one job (an address or --job_id), else an array of "
             "every job found."},
};
/* clang-format on */

static const msr_optset_t status_set = {"msrun status", status_opts, MSR_ARRAY_SIZE(status_opts),
                                        0};

static void status_usage(FILE *out)
{
    fprintf(out, "usage: msrun status [--json] [--job_id ID]\n"
                 "       msrun status [--json] --master_addr A [--master_port P] [--token_file F]\n"
                 "\n"
                 "Prints the state of a job and of its nodes. Without an address, it shows the\n"
                 "jobs that msrun processes of this user run on this machine (each records its\n"
                 "job, coordinator and token in $XDG_RUNTIME_DIR/msrun, or /tmp/msrun-<uid>,\n"
                 "mode 0700). With --master_addr or --master_port, it asks that coordinator;\n"
                 "the job's token then comes from --token_file (a file only you may read),\n"
                 "--token, MSRUN_TOKEN_FILE, MSRUN_TOKEN or a job of this machine at that\n"
                 "address. Names take '-' or '_' alike.\n"
                 "\n"
                 "Exit status: 0 when every job asked about answered, 1 when none was found or\n"
                 "one could not be reached, 2 for bad input.\n"
                 "\n"
                 "options:\n");
    msr_opts_usage(&status_set, out);
}

/* One job to ask about: where its coordinator is and how to talk to it. */
typedef struct status_target {
    const char *job_id; /* expected; NULL: any */
    const char *coordinator;
    const char *token;
    msr_rpc_tls_t tls;
    double start_time; /* from this machine's record; 0: unknown */
} status_target_t;

/* The node's state, from an older coordinator that does not say it. */
static const char *node_state_of(const Msr__NodeStatus *n)
{
    if (n->state && *n->state)
        return n->state;
    if (!n->alive)
        return "lost";
    return n->node_rank >= 0 ? "running" : "waiting";
}

static int forming(const Msr__StatusResponse *r)
{
    return r->state == MSR__JOB_STATE__JOB_WAITING || r->state == MSR__JOB_STATE__JOB_RESTARTING;
}

static void status_text(const status_target_t *t, const Msr__StatusResponse *r)
{
    printf("job %s: %s, generation %d, %d nodes, %d workers, restarts %d of %d\n", r->job_id,
           msr_job_state_name(r->state), r->generation, r->node_count, r->world_size,
           r->restart_count, r->max_restarts);
    printf("  coordinator %s", t->coordinator);
    if (r->max_nodes > 0)
        printf(", elastic: %d to %d nodes of %d workers", r->min_nodes, r->max_nodes,
               r->local_worker_num);
    if (forming(r) && r->expected_nodes > 0 && r->max_nodes > 0)
        printf(", forming: %d ready (%d needed)", r->ready_nodes, r->expected_nodes);
    else if (forming(r) && r->expected_nodes > 0)
        printf(", forming: %d of %d nodes ready", r->ready_nodes, r->expected_nodes);
    printf("\n");
    for (size_t i = 0; i < r->n_nodes; i++) {
        const Msr__NodeStatus *n = r->nodes[i];
        char rank[16] = "-";
        if (n->node_rank >= 0)
            snprintf(rank, sizeof rank, "%d", n->node_rank);
        printf("  node %-3s %-16s pid %-8d %d workers  %-8s  seen %u ms ago\n", rank, n->host,
               n->pid, n->local_worker_num, node_state_of(n), n->last_seen_ms);
    }
    if (r->failure)
        printf("  failure: rank %d on node %d exited with code %d (signal %d)\n", r->failure->rank,
               r->failure->node_rank, r->failure->exit_code, r->failure->signal);
    if (r->n_failures > 1) {
        printf("  failure history, oldest first:\n");
        for (size_t i = 0; i < r->n_failures; i++) {
            msr_failure_t f = {0};
            char what[512];
            msr_failure_from_msg(&f, r->failures[i]);
            msr_failure_describe(&f, what, sizeof what);
            msr_failure_clear(&f);
            printf("    generation %d: %s\n", r->failures[i]->generation, what);
        }
    }
}

static void json_str(msr_buf_t *b, const char *s)
{
    s = s ? s : "";
    msr_buf_json_string(b, s, strlen(s));
}

/* One failure as a JSON object. */
static void failure_json(msr_buf_t *b, const Msr__Failure *f)
{
    msr_buf_printf(b, "{\"node_rank\": %d, \"host\": ", f->node_rank);
    json_str(b, f->host);
    msr_buf_printf(b,
                   ", \"rank\": %d, \"pid\": %d, \"exit_code\": %d, \"signal\": %d, "
                   "\"generation\": %d, \"time\": %.3f, \"reason\": ",
                   f->rank, f->pid, f->exit_code, f->signal, f->generation, f->time);
    json_str(b, f->reason);
    msr_buf_printf(b, "}");
}

/* The job as one JSON object (r NULL: the call failed with st, why in err). */
static void status_json(msr_buf_t *b, const status_target_t *t, const Msr__StatusResponse *r,
                        msr_status_t st, const char *err, const char *indent)
{
    msr_buf_printf(b, "%s{\n%s  \"job_id\": ", indent, indent);
    json_str(b, r ? r->job_id : t->job_id);
    msr_buf_printf(b, ",\n%s  \"coordinator\": ", indent);
    json_str(b, t->coordinator);
    if (t->start_time > 0)
        msr_buf_printf(b, ",\n%s  \"start_time\": %.3f", indent, t->start_time);
    if (r == NULL) {
        msr_buf_printf(b, ",\n%s  \"state\": \"%s\",\n%s  \"error\": ", indent,
                       st == MSR_ERR_UNREACHABLE || st == MSR_ERR_TIMEOUT ? "unreachable" : "error",
                       indent);
        json_str(b, err);
        msr_buf_printf(b, "\n%s}", indent);
        return;
    }
    msr_buf_printf(b, ",\n%s  \"state\": \"%s\",\n%s  \"generation\": %d", indent,
                   msr_job_state_name(r->state), indent, r->generation);
    msr_buf_printf(b, ",\n%s  \"restarts\": %d,\n%s  \"max_restarts\": %d", indent,
                   r->restart_count, indent, r->max_restarts);
    msr_buf_printf(b, ",\n%s  \"world_size\": %d,\n%s  \"node_count\": %d", indent, r->world_size,
                   indent, r->node_count);
    msr_buf_printf(b, ",\n%s  \"local_worker_num\": %d", indent, r->local_worker_num);
    if (r->max_nodes > 0)
        msr_buf_printf(b, ",\n%s  \"min_nodes\": %d,\n%s  \"max_nodes\": %d", indent, r->min_nodes,
                       indent, r->max_nodes);
    else
        msr_buf_printf(b, ",\n%s  \"min_nodes\": null,\n%s  \"max_nodes\": null", indent, indent);
    if (forming(r))
        msr_buf_printf(b, ",\n%s  \"ready_nodes\": %d,\n%s  \"expected_nodes\": %d", indent,
                       r->ready_nodes, indent, r->expected_nodes);
    msr_buf_printf(b, ",\n%s  \"nodes\": [", indent);
    for (size_t i = 0; i < r->n_nodes; i++) {
        const Msr__NodeStatus *n = r->nodes[i];
        msr_buf_printf(b, "%s\n%s    {\"node_rank\": ", i ? "," : "", indent);
        if (n->node_rank >= 0)
            msr_buf_printf(b, "%d", n->node_rank);
        else
            msr_buf_printf(b, "null");
        msr_buf_printf(b, ", \"host\": ");
        json_str(b, n->host);
        msr_buf_printf(b, ", \"pid\": %d, \"state\": ", n->pid);
        json_str(b, node_state_of(n));
        msr_buf_printf(b, ", \"workers\": %d, \"last_seen_ms\": %u}", n->local_worker_num,
                       n->last_seen_ms);
    }
    if (r->n_nodes)
        msr_buf_printf(b, "\n%s  ", indent);
    msr_buf_printf(b, "]");
    msr_buf_printf(b, ",\n%s  \"failure\": ", indent);
    if (r->failure)
        failure_json(b, r->failure);
    else
        msr_buf_printf(b, "null");
    msr_buf_printf(b, ",\n%s  \"failures\": [", indent);
    for (size_t i = 0; i < r->n_failures; i++) {
        msr_buf_printf(b, "%s\n%s    ", i ? "," : "", indent);
        failure_json(b, r->failures[i]);
    }
    if (r->n_failures)
        msr_buf_printf(b, "\n%s  ", indent);
    msr_buf_printf(b, "]");
    msr_buf_printf(b, "\n%s}", indent);
}

/* Asks t's coordinator for the job's state into *resp_p: MSR_OK, or the
 * failure's status with its words in err. */
static msr_status_t status_ask(const status_target_t *t, ProtobufCMessage **resp_p, char *err,
                               size_t errlen)
{
    /* Not with wait_for_ready, so that a TLS handshake that fails says so
     * in a moment rather than at the deadline: three tries on fresh
     * channels (a loaded coordinator may drop one handshake). A refused
     * connection (a coordinator starting, or moving after a failover) is
     * waited for until the deadline. */
    Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
    uint64_t deadline = msr_deadline_in_ms(5000);
    msr_status_t st = MSR_ERR_UNREACHABLE;
    for (int attempt = 0; attempt < 3; attempt++) {
        msr_rpc_channel_t *ch = NULL;
        if (msr_rpc_channel_create_tls(t->coordinator, t->token, &t->tls, &ch) != MSR_OK) {
            snprintf(err, errlen, "cannot reach %s", t->coordinator);
            return MSR_ERR_UNREACHABLE;
        }
        st = msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, deadline, 0, resp_p);
        int refused = st == MSR_ERR_UNREACHABLE && strstr(msr_err_msg(), "refused");
        if (refused)
            st = msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, deadline, 1, resp_p);
        msr_rpc_channel_destroy(ch);
        if (st != MSR_ERR_UNREACHABLE || refused || msr_now_ns() >= deadline)
            break;
        if (attempt < 2)
            msr_sleep_ms(100 << attempt);
    }
    if (st != MSR_OK)
        snprintf(err, errlen, "%s", msr_err_msg());
    return st;
}

/* Asks about each of the n targets and prints them: one object (or block)
 * when single, else a JSON array (or blocks apart by a blank line). */
static int status_show(const status_target_t *t, size_t n, int json, int single)
{
    int rc = 0;
    msr_buf_t b = MSR_BUF_INIT;
    if (json && !single)
        msr_buf_printf(&b, "[");
    for (size_t i = 0; i < n; i++) {
        ProtobufCMessage *resp = NULL;
        char err[600] = "";
        msr_status_t st = status_ask(&t[i], &resp, err, sizeof err);
        const Msr__StatusResponse *r = st == MSR_OK ? (const Msr__StatusResponse *)resp : NULL;
        if (r && t[i].job_id && strcmp(r->job_id, t[i].job_id) != 0) {
            snprintf(err, sizeof err, "the coordinator at %s serves job %s, not %s",
                     t[i].coordinator, r->job_id, t[i].job_id);
            r = NULL;
            st = MSR_ERR_NOT_FOUND;
        }
        if (r == NULL) {
            rc = 1;
            fprintf(stderr, "msrun status: error: %s\n", err);
        }
        if (json) {
            msr_buf_printf(&b, "%s", single ? "" : i ? ",\n" : "\n");
            status_json(&b, &t[i], r, st, err, single ? "" : "  ");
        } else if (r) {
            if (i > 0)
                printf("\n");
            status_text(&t[i], r);
        } else if (!single) {
            if (i > 0)
                printf("\n");
            printf("job %s: %s (coordinator %s)\n", t[i].job_id,
                   st == MSR_ERR_UNREACHABLE || st == MSR_ERR_TIMEOUT ? "unreachable" : "error",
                   t[i].coordinator);
        }
        msr_rpc_message_free(resp);
    }
    if (json && !single)
        msr_buf_printf(&b, "%s]", n ? "\n" : "");
    if (json && b.data)
        printf("%s\n", b.data);
    msr_buf_cleanup(&b);
    fflush(stdout);
    return rc;
}

/* Without an address: the jobs this user's msrun processes run here. */
static int status_local(const status_args_t *a)
{
    msr_run_entry_t *e = NULL;
    size_t n = 0;
    if (msr_run_records_list(&e, &n) != MSR_OK) {
        fprintf(stderr, "msrun status: error: %s\n", msr_err_msg());
        return 1;
    }
    status_target_t *t = msr_calloc(n ? n : 1, sizeof *t);
    if (t == NULL) {
        msr_run_entries_free(e, n);
        fprintf(stderr, "msrun status: error: out of memory\n");
        return 1;
    }
    /* One target per job: the nodes of one job on this host share it. */
    size_t nt = 0;
    for (size_t i = 0; i < n; i++) {
        const msr_run_record_t *r = &e[i].rec;
        if (a->job_id && strcmp(r->job_id, a->job_id) != 0)
            continue;
        size_t k;
        for (k = 0; k < nt; k++)
            if (strcmp(t[k].coordinator, r->coordinator) == 0 &&
                strcmp(t[k].job_id, r->job_id) == 0)
                break;
        if (k < nt)
            continue;
        t[nt++] = (status_target_t){r->job_id,
                                    r->coordinator,
                                    r->token,
                                    {r->tls_cert, r->tls_key, r->tls_ca, r->tls_server_name},
                                    r->start_time};
    }
    int rc;
    if (nt == 0) {
        if (a->job_id)
            fprintf(stderr, "msrun status: error: no job %s runs on this machine\n", a->job_id);
        else
            fprintf(stderr, "msrun status: error: no msrun job of this user runs on this "
                            "machine; give --master_addr and --master_port for one elsewhere\n");
        if (a->json && !a->job_id)
            printf("[]\n");
        rc = 1;
    } else {
        /* --job_id names one job (the oldest, when two coordinators here
         * serve jobs of the same name) */
        rc = status_show(t, a->job_id ? 1 : nt, a->json, a->job_id != NULL);
    }
    msr_free(t);
    msr_run_entries_free(e, n);
    return rc;
}

/* With an address: that coordinator, with the token given or, when none
 * is, the token of a job of this machine that uses it. */
static int status_remote(status_args_t *a)
{
    char target[300];
    const char *addr = a->master_addr ? a->master_addr : "127.0.0.1";
    msr_net_join(addr, a->master_port, target, sizeof target);
    status_target_t t = {
        a->job_id, target, NULL, {a->tls_cert, a->tls_key, a->tls_ca, a->tls_server_name}, 0};
    if (t.tls.server_name == NULL)
        t.tls.server_name = a->master_addr; /* the name as given */
    msr_run_entry_t *e = NULL;
    size_t n = 0;
    if (a->token == NULL && a->token_file == NULL && msr_run_records_list(&e, &n) == MSR_OK) {
        for (size_t i = 0; i < n; i++) {
            const msr_run_record_t *r = &e[i].rec;
            if (strcmp(r->coordinator, target) != 0)
                continue;
            t.token = r->token;
            t.start_time = r->start_time;
            if (!msr_rpc_tls_enabled(&t.tls))
                t.tls = (msr_rpc_tls_t){r->tls_cert, r->tls_key, r->tls_ca, r->tls_server_name};
            break;
        }
    }
    int rc = 0;
    if (t.token == NULL) {
        rc = msr_options_need_token("msrun status", &a->token, a->token_file);
        t.token = a->token;
    }
    if (rc == 0)
        rc = status_show(&t, 1, a->json, 1);
    msr_run_entries_free(e, n);
    return rc;
}

int msr_status_main(int argc, char **argv)
{
    status_args_t a = {.master_port = 8118};
    unsigned char seen[MSR_ARRAY_SIZE(status_opts)];
    int next, r = 2;
    switch (msr_opts_parse(&status_set, argc, argv, &a, seen, &next)) {
    case MSR_OPTS_HELP:
        status_usage(stdout);
        r = 0;
        break;
    case MSR_OPTS_OK:
        msr_log_init("msrun", -1, -1);
        if (seen[msr_opts_find(&status_set, "master_addr")] ||
            seen[msr_opts_find(&status_set, "master_port")])
            r = status_remote(&a);
        else
            r = status_local(&a);
        break;
    default:
        msr_opts_print_error(&status_set);
        break;
    }
    msr_opts_free(&status_set, &a);
    return r;
}
