/* `msrun coordinator` and `msrun status`. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/alloc.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/failure.h"
#include "cluster/server.h"
#include "msrun/agent.h"
#include "msrun/options.h"
#include "msrun/optparse.h"
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
} coord_args_t;

#define C(field) MSR_OPT_DEST(coord_args_t, field)

static const char *const state_sync_names[] = {"disk", "process", NULL};

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
    return msr_options_need_token("msrun coordinator", &a->token, a->token_file);
}

/* Serves the coordinator of a's job on bind until it ends (or a signal). */
static int coord_serve(const coord_args_t *a, const char *bind)
{
    msr_rpc_tls_t tls = {a->tls_cert, a->tls_key, a->tls_ca, NULL};
    int64_t ready_fd = a->ready_fd;
    const char *state_file = a->state_file;
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
        /* an msrun started it (--ready_fd): that msrun reports restarts and
         * the end to its user */
        .outcome_reported = a->ready_fd >= 0,
        .min_nodes = a->min_nodes < a->max_nodes ? a->min_nodes : 0,
        .max_nodes = a->min_nodes < a->max_nodes ? a->max_nodes : 0,
        .last_call_ms = a->last_call_ms,
        .store_limits = {(uint64_t)a->store_value_max, (uint64_t)a->store_keys_max,
                         (uint64_t)a->store_bytes_max},
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
    if (st != MSR_OK) {
        int n =
            st == MSR_ERR_INVALID_ARG && msr_rpc_tls_enabled(&tls)
                ? snprintf(line, sizeof line, "error cannot use the TLS certificate %s\n", tls.cert)
                : snprintf(line, sizeof line, "error cannot %s %s: %s\n",
                           st == MSR_ERR_CORRUPT ? "resume from" : "listen on",
                           st == MSR_ERR_CORRUPT ? state_file : bind,
                           st == MSR_ERR_ADDR_IN_USE ? "address in use or not available"
                                                     : msr_status_str(st));
        if (ready_fd >= 0)
            msr_write_all((int)ready_fd, line, (size_t)n);
        else
            fprintf(stderr, "msrun coordinator: %s", line);
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
        int colon = strchr(host, ':') != NULL && host[0] != '[';
        char bind[300];
        snprintf(bind, sizeof bind, colon ? "[%s]:%d" : "%s:%d", host, port);
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
    char *job_id; /* accepted for scripts written for older versions */
} status_args_t;

#define S(field) MSR_OPT_DEST(status_args_t, field)

/* clang-format off */
static const msr_opt_t status_opts[] = {
    {.name = "master_addr", .kind = MSR_OPT_STRING, .env = "MSRUN_MASTER_ADDR",
     .dest = S(master_addr), .def = "127.0.0.1", .metavar = "ADDR",
     .help = "address of the coordinator."},
    {.name = "master_port", .kind = MSR_OPT_PORT, MSR_OPTB_PORT, .env = "MSRUN_MASTER_PORT",
     .dest = S(master_port), .def = "8118", .metavar = "PORT",
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
     .help = "ignored (the coordinator serves one job)."},
};
/* clang-format on */

static const msr_optset_t status_set = {"msrun status", status_opts, MSR_ARRAY_SIZE(status_opts),
                                        0};

static void status_usage(FILE *out)
{
    fprintf(out, "usage: msrun status [options]\n"
                 "\n"
                 "Prints the job's state and its nodes. The job's token comes from\n"
                 "--token_file (a file only you may read), --token, MSRUN_TOKEN_FILE or\n"
                 "MSRUN_TOKEN. Names take '-' or '_' alike.\n"
                 "\n"
                 "options:\n");
    msr_opts_usage(&status_set, out);
}

/* Asks the coordinator of a for the job's state and prints it. */
static int status_show(const status_args_t *a)
{
    char target[300];
    const char *addr = a->master_addr ? a->master_addr : "127.0.0.1";
    snprintf(target, sizeof target, "%s:%d", addr, a->master_port);
    msr_rpc_tls_t tls = {a->tls_cert, a->tls_key, a->tls_ca, a->tls_server_name};
    const char *token = a->token;
    msr_log_init("msrun", -1, -1);
    if (tls.server_name == NULL)
        tls.server_name = a->master_addr; /* the name as given */
    msr_rpc_channel_t *ch = NULL;
    if (msr_rpc_channel_create_tls(target, token, &tls, &ch) != MSR_OK) {
        fprintf(stderr, "msrun status: error: cannot reach %s\n", target);
        return 1;
    }
    Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    msr_status_t st =
        msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, msr_deadline_in_ms(5000), 1, &resp);
    if (st != MSR_OK) {
        fprintf(stderr, "msrun status: error: %s\n", msr_err_msg());
        msr_rpc_channel_destroy(ch);
        return 1;
    }
    const Msr__StatusResponse *r = (const Msr__StatusResponse *)resp;
    printf("job %s: %s, generation %d, %d nodes, %d workers, restarts %d of %d\n", r->job_id,
           msr_job_state_name(r->state), r->generation, r->node_count, r->world_size,
           r->restart_count, r->max_restarts);
    for (size_t i = 0; i < r->n_nodes; i++) {
        const Msr__NodeStatus *n = r->nodes[i];
        printf("  node %-3d %-16s pid %-8d %d workers  %-5s  seen %u ms ago\n", n->node_rank,
               n->host, n->pid, n->local_worker_num, n->alive ? "alive" : "gone", n->last_seen_ms);
    }
    if (r->failure)
        printf("  failure: rank %d on node %d exited with code %d (signal %d)\n", r->failure->rank,
               r->failure->node_rank, r->failure->exit_code, r->failure->signal);
    msr_rpc_message_free(resp);
    msr_rpc_channel_destroy(ch);
    return 0;
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
        r = msr_options_need_token("msrun status", &a.token, a.token_file);
        if (r == 0)
            r = status_show(&a);
        break;
    default:
        msr_opts_print_error(&status_set);
        break;
    }
    msr_opts_free(&status_set, &a);
    return r;
}
