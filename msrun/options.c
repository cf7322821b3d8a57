/* msrun's command line, environment variables, defaults and --help. */
#include "msrun/options.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/util.h"
#include "msrun/cpus.h"
#include "msrun/jobdir.h"
#include "msrun/token.h"
#include "msrun/workers.h"

#define D(field) MSR_OPT_DEST(msr_options_t, field)

/* --bind_to's values, in msr_bind_t's order */
static const char *const bind_choices[] = {"none", "core", "numa", NULL};
/* --rdzv_backend's values, in msr_rdzv_backend_t's order */
static const char *const rdzv_choices[] = {"static", "etcd", NULL};
/* --auth's values: auth_munge is the index */
static const char *const auth_choices[] = {"token", "munge", NULL};

/* Every option also reads MSRUN_<NAME upper-cased>; dashes and underscores
 * are interchangeable in names. */
/* clang-format off */
static const msr_opt_t opt_defs[] = {
    {.name = "worker_num", .kind = MSR_OPT_INT, MSR_OPTB_COUNT, .env = "MSRUN_WORKER_NUM",
     .dest = D(worker_num), .metavar = "N",
     .help = "total number of workers in the job (all nodes). Default: local_worker_num x nodes "
             "when local_worker_num is given, else 8."},
    {.name = "local_worker_num", .aliases = {"nproc_per_node"}, .kind = MSR_OPT_INT, MSR_OPTB_COUNT,
     .env = "MSRUN_LOCAL_WORKER_NUM", .dest = D(local_worker_num), .metavar = "N",
     .help = "workers started on this node. Default: worker_num / nodes when worker_num is "
             "given, else 8."},
    {.name = "master_addr", .kind = MSR_OPT_STRING, .env = "MSRUN_MASTER_ADDR",
     .dest = D(master_addr), .def = "none", .metavar = "ADDR",
     .help = "address of the coordinator (a name, an IPv4 or an IPv6 address, [::1] or ::1), "
             "optionally with its port (HOST:PORT, [::1]:29500), which is then master_port. The "
             "node where this address is local starts it. None: a standalone job on this host."},
    {.name = "master_port", .kind = MSR_OPT_PORT, MSR_OPTB_PORT, .env = "MSRUN_MASTER_PORT",
     .dest = D(master_port), .def = "8118", .metavar = "PORT",
     .help = "port of the coordinator (a standalone job without it picks a free loopback "
             "port)."},
    {.name = "node_rank", .kind = MSR_OPT_INT, .min = -1, .max = INT32_MAX,
     .env = "MSRUN_NODE_RANK", .dest = D(node_rank), .def = "-1", .metavar = "R",
     .help = "this node's rank; -1 lets the coordinator assign ranks in order of arrival."},
    {.name = "log_dir", .kind = MSR_OPT_STRING, .env = "MSRUN_LOG_DIR", .dest = D(log_dir),
     .def = "none", .metavar = "DIR",
     .help = "also write the workers' output into a directory of this run, DIR/<job_id>/ "
             "(DIR/<job_id>.1, .2, ... when that exists), and point the link DIR/latest at it; "
             "a file per worker, named by worker_log_name (mode 0600; directories msrun makes are "
             "0700; DIR must belong to you)."},
    {.name = "join", .kind = MSR_OPT_BOOL, .env = "MSRUN_JOIN", .dest = D(join), .def = "true",
     .metavar = "BOOL",
     .help = "MindSpore's flag: true (msrun stays and supervises its workers) is the only "
             "value accepted."},
    {.name = "cluster_time_out", .aliases = {"rdzv_timeout"}, .kind = MSR_OPT_SECONDS,
     MSR_OPTB_CLUSTER_TIME_OUT, .env = "MSRUN_CLUSTER_TIME_OUT", .dest = D(cluster_time_out_ms),
     .def = "600", .metavar = "SEC",
     .help = "how long the job waits for all its nodes to join (or rejoin after a restart), "
             "counted from msrun's start; then msrun exits 124."},
    {.name = "bind_core", .kind = MSR_OPT_BOOL, .env = "MSRUN_BIND_CORE", .dest = D(bind_core),
     .def = "false", .metavar = "BOOL",
     .help = "MindSpore's flag: true is --bind_to=core."},
    {.name = "bind_to", .kind = MSR_OPT_ENUM, .env = "MSRUN_BIND_TO", .dest = D(bind_to),
     .choices = bind_choices, .def = "none", .metavar = "core|numa|none",
     .help = "bind each worker to CPUs of this node that msrun may use. core: whole cores (all "
             "their hardware threads) of one NUMA node, an equal number each; numa: all cores "
             "of one NUMA node, workers taking the nodes in turn. Workers with a GPU get cores "
             "near it when the GPU is found on the PCI bus. More workers than cores share cores "
             "round-robin (msrun says so once). A bound worker's OMP_NUM_THREADS is its number "
             "of cores (numa: its share of the node's) unless set."},
    {.name = "nnodes", .kind = MSR_OPT_RANGE, MSR_OPTB_NODES, .env = "MSRUN_NNODES",
     .dest = D(min_nodes), .dest2 = offsetof(msr_options_t, max_nodes), .def = "1",
     .metavar = "N|MIN:MAX",
     .help = "number of nodes, or an elastic range: the job runs on any number of nodes from MIN "
             "to MAX, re-forms smaller when nodes are lost and takes in nodes that join later "
             "(the world size is then nodes x local_worker_num)."},
    {.name = "last_call", .kind = MSR_OPT_SECONDS, MSR_OPTB_LAST_CALL, .env = "MSRUN_LAST_CALL",
     .dest = D(last_call_ms), .def = "1", .metavar = "SEC",
     .help = "elastic jobs: once MIN nodes are in, how long to wait for more before starting."},
    {.name = "max_restarts", .kind = MSR_OPT_INT, MSR_OPTB_RESTARTS, .env = "MSRUN_MAX_RESTARTS",
     .dest = D(max_restarts), .def = "0", .metavar = "N",
     .help = "restarts of the whole job after a worker failure, counted job-wide."},
    {.name = "standalone", .kind = MSR_OPT_BOOL, .env = "MSRUN_STANDALONE", .dest = D(standalone),
     .def = "false",
     .help = "a one-node job with an embedded coordinator on a free loopback port (ignores "
             "master_addr and master_port)."},
    {.name = "job_id", .aliases = {"rdzv_id", "run_id"}, .kind = MSR_OPT_STRING,
     .env = "MSRUN_JOB_ID", .dest = D(job_id), .metavar = "ID",
     .help = "the job's name; every node must give the same. Default: random when standalone, "
             "else 'default'."},
    {.name = "token", .aliases = {"job_token"}, .kind = MSR_OPT_SECRET, .env = "MSRUN_TOKEN",
     .dest = D(token), .group = 1, .metavar = "SECRET",
     .help = "the job token every call must carry (prefer MSRUN_TOKEN or --token_file: others "
             "may see a command line). Default: random; in a job of several nodes, node 0 "
             "generates it and writes it to a file only you can read, and the other nodes must "
             "be given it."},
    {.name = "token_file", .kind = MSR_OPT_STRING, .env = "MSRUN_TOKEN_FILE", .dest = D(token_file),
     .group = 1, .metavar = "PATH",
     .help = "read the job token from PATH, a file that only you may read (mode 0600, owned by "
             "you)."},
    {.name = "grace_period", .kind = MSR_OPT_SECONDS, .min = 0, .max = MSR_OPTB_SECONDS_MAX,
     .env = "MSRUN_GRACE_PERIOD", .dest = D(grace_ms), .def = "5", .metavar = "SEC",
     .help = "after SIGTERM, how long workers have to exit before SIGKILL."},
    {.name = "heartbeat_interval", .kind = MSR_OPT_SECONDS, .min = 10, .max = MSR_OPTB_SECONDS_MAX,
     .env = "MSRUN_HEARTBEAT_INTERVAL", .dest = D(heartbeat_ms), .def = "1", .metavar = "SEC",
     .help = "how often this node's msrun reports to the coordinator."},
    {.name = "node_timeout", .kind = MSR_OPT_SECONDS, MSR_OPTB_NODE_TIMEOUT,
     .env = "MSRUN_NODE_TIMEOUT", .dest = D(node_timeout_ms), .def = "5", .metavar = "SEC",
     .help = "a node silent this long is declared lost."},
    {.name = "coordinator_timeout", .kind = MSR_OPT_SECONDS, .min = 100,
     .max = MSR_OPTB_SECONDS_MAX, .env = "MSRUN_COORDINATOR_TIMEOUT",
     .dest = D(coordinator_timeout_ms), .def = "30", .metavar = "SEC",
     .help = "workers keep running this long while the coordinator cannot be reached (it may be "
             "restarting); then the job stops."},
    {.name = "worker_timeout", .kind = MSR_OPT_SECONDS, .min = 100, .max = MSR_OPTB_SECONDS_MAX,
     .env = "MSRUN_WORKER_TIMEOUT", .dest = D(worker_timeout_ms), .flags = MSR_OPT_ZERO_OFF,
     .def = "0", .metavar = "SEC",
     .help = "a worker linking libmsrun whose process stops beating this long (from msr_init "
             "on), or that stops calling msr_heartbeat() after calling it once, is killed as hung "
             "(0: off). Needs libmsrun: other programs are watched only for their exit (msrun "
             "says so once)."},
    {.name = "error_file", .kind = MSR_OPT_STRING, .env = "MSRUN_ERROR_FILE", .dest = D(error_file),
     .def = "none", .metavar = "PATH",
     .help = "write a JSON report to PATH (mode 0600): \"status\": \"failed\" and the root "
             "cause of a failure, or \"status\": \"ok\" with the duration, generations and "
             "restarts of a job that succeeded."},
    {.name = "show_ranks", .kind = MSR_OPT_STRING, .env = "MSRUN_SHOW_RANKS", .dest = D(show_ranks),
     .def = "all", .metavar = "LIST",
     .help = "only these global ranks' output reaches the terminal, e.g. 0 or 0,2-3 (log files "
             "get all)."},
    {.name = "tail_worker_log", .kind = MSR_OPT_STRING, .env = "MSRUN_TAIL_WORKER_LOG",
     .dest = D(tail_worker_log), .def = "-1", .metavar = "LIST",
     .help = "MindSpore's name for show_ranks: these global ranks' output reaches the terminal, "
             "-1 for all. Given with show_ranks, a rank is shown when both lists hold it."},
    {.name = "tag_output", .kind = MSR_OPT_BOOL, .env = "MSRUN_TAG_OUTPUT", .dest = D(tag_output),
     .def = "true", .metavar = "BOOL",
     .help = "start each line on the terminal with \"[node N rank R] \" (--tag_output=0: the "
             "workers' output as they wrote it)."},
    {.name = "timestamps", .kind = MSR_OPT_BOOL, .env = "MSRUN_TIMESTAMPS", .dest = D(timestamps),
     .def = "false", .metavar = "BOOL",
     .help = "start each line, on the terminal and in the log files, with the time msrun read "
             "it: ISO 8601, UTC, milliseconds (2026-11-24T18:30:01.123Z)."},
    {.name = "redirects", .aliases = {"r"}, .kind = MSR_OPT_STRING, .env = "MSRUN_REDIRECTS",
     .dest = D(redirects), .metavar = "STD",
     .help = "torchrun's: these streams go to the log file only, not to the terminal: 0 none, "
             "1 stdout, 2 stderr, 3 both; one value for every worker or per local rank, e.g. "
             "0:3,1:1 (ranks not named: 0). Needs log_dir."},
    {.name = "tee", .aliases = {"t"}, .kind = MSR_OPT_STRING, .env = "MSRUN_TEE", .dest = D(tee),
     .metavar = "STD",
     .help = "torchrun's: these streams go to the log file and the terminal (values as for "
             "redirects). Without tee and redirects, log_dir gets both streams of every worker; "
             "with either, only the streams they name."},
    {.name = "worker_log_name", .kind = MSR_OPT_STRING, .env = "MSRUN_WORKER_LOG_NAME",
     .dest = D(worker_log_name), .def = "worker_{rank}.log", .metavar = "PATTERN",
     .help = "the log file's name in the run's log directory: {rank}, {local_rank}, {node_rank}, "
             "{hostname} and {ip} are replaced; a pattern without {rank} or {local_rank} gets "
             "_<rank>.log appended (MindSpore's msrun)."},
    {.name = "pty", .kind = MSR_OPT_BOOL, .env = "MSRUN_PTY", .dest = D(pty), .def = "false",
     .metavar = "BOOL",
     .help = "give each worker a pseudo-terminal as stdout and stderr (merged into one stream, "
             "as on a terminal; its stdout values of tee and redirects apply), for programs that "
             "flush or draw progress only on a terminal."},
    {.name = "module", .aliases = {"m"}, .kind = MSR_OPT_BOOL, .dest = D(module), .def = "false",
     .help = "PROGRAM is a Python module: run it as python -m PROGRAM (torchrun's -m)."},
    {.name = "no_python", .kind = MSR_OPT_BOOL, .env = "MSRUN_NO_PYTHON", .dest = D(no_python),
     .def = "false",
     .help = "run PROGRAM as given even when it ends in .py (torchrun's --no-python)."},
    {.name = "python", .kind = MSR_OPT_STRING, .env = "MSRUN_PYTHON", .dest = D(python),
     .def = "python3", .metavar = "PATH",
     .help = "the interpreter that runs a PROGRAM ending in .py, or -m's module."},
    {.name = "log_level", .kind = MSR_OPT_LEVEL, .env = "MSRUN_LOG_LEVEL", .dest = D(log_level),
     .def = "info", .metavar = "LEVEL",
     .help = "msrun's own messages: error, warn, info or debug."},
    {.name = "rdzv_endpoint", .kind = MSR_OPT_STRING, .env = "MSRUN_RDZV_ENDPOINT",
     .dest = D(rdzv_endpoint), .metavar = "HOST:PORT",
     .help = "torchrun's spelling of master_addr and master_port together ([::1]:29500 for "
             "IPv6). With --rdzv_backend=etcd: etcd's endpoints, HOST:PORT[,HOST:PORT...]."},
    {.name = "rdzv_backend", .kind = MSR_OPT_ENUM, .env = "MSRUN_RDZV_BACKEND",
     .dest = D(rdzv_backend), .choices = rdzv_choices, .def = "static", .metavar = "static|etcd",
     .help = "static: one node runs the coordinator (node rank 0 under a scheduler, else the "
             "node where master_addr is local). etcd: the nodes elect the node "
             "that runs it through etcd (--rdzv_endpoint), which keeps the job's state under "
             "/msrun/<rdzv_id>/; when that node dies another takes over and the job goes on. "
             "Every node needs the job's token (MSRUN_TOKEN or --token_file)."},
    {.name = "etcd_lease", .kind = MSR_OPT_INT, .min = 1, .max = 3600, .env = "MSRUN_ETCD_LEASE",
     .dest = D(etcd_lease), .def = "2", .metavar = "SEC",
     .help = "--rdzv_backend=etcd: the coordinator's etcd lease; a dead coordinator's node is "
             "replaced after about this long."},
    {.name = "coordinator_here", .kind = MSR_OPT_BOOL, .env = "MSRUN_COORDINATOR_HERE",
     .dest = D(coordinator_here), .def = "auto", .metavar = "BOOL",
     .help = "true: this node hosts the coordinator, listening on 0.0.0.0:master_port, without "
             "checking that master_addr is one of its addresses (a Kubernetes Service's address "
             "never is); false: it never hosts it. Default: under Slurm or Kubernetes the node of "
             "rank 0 hosts it, otherwise the node where master_addr is a local address."},
    {.name = "dry_run", .kind = MSR_OPT_BOOL, .env = "MSRUN_DRY_RUN", .dest = D(dry_run),
     .def = "false",
     .help = "print the resolved settings (node rank, nodes, master address and port, workers, "
             "job id, authentication) and where each came from (option, env, slurm, kubernetes, "
             "derived, default), one 'name = value (source)' per line, and exit 0 without "
             "starting anything."},
    /* TLS for every connection to the coordinator (kept together) */
    {.name = "tls_cert", .kind = MSR_OPT_PATH, .env = "MSRUN_TLS_CERT", .dest = D(tls_cert),
     .def = "none", .metavar = "PEM",
     .help = "this node's TLS certificate (chain). With tls_key, every connection to the "
             "coordinator is encrypted; the node that runs the coordinator serves it with this "
             "certificate."},
    {.name = "tls_key", .kind = MSR_OPT_PATH, .env = "MSRUN_TLS_KEY", .dest = D(tls_key),
     .def = "none", .metavar = "PEM",
     .help = "the private key of tls_cert (keep it readable only by its owner)."},
    {.name = "tls_ca", .kind = MSR_OPT_PATH, .env = "MSRUN_TLS_CA", .dest = D(tls_ca),
     .def = "none", .metavar = "PEM",
     .help = "the CA that signed the certificates: msrun verifies the coordinator's certificate "
             "with it, and the coordinator then requires every client to show a certificate it "
             "signed (mutual TLS). None: the system's CAs, and no client certificates asked for."},
    {.name = "tls_server_name", .kind = MSR_OPT_STRING, .env = "MSRUN_TLS_SERVER_NAME",
     .dest = D(tls_server_name), .metavar = "NAME",
     .help = "the name the coordinator's certificate must carry. Default: the host part of "
             "master_addr (an IP address is checked against the certificate's IP entries)."},
    /* How a node without the job token joins (kept together) */
    {.name = "auth", .kind = MSR_OPT_ENUM, .env = "MSRUN_AUTH", .dest = D(auth_munge),
     .choices = auth_choices, .def = "token", .metavar = "token|munge",
     .help = "munge: a node without the job token proves to the coordinator with a munge "
             "credential (Slurm's authentication; munged must run on every node) that it runs as "
             "the job's user, and receives the token that node 0 generated. token: every node "
             "must be given the token."},
    {.name = "munge_socket", .kind = MSR_OPT_STRING, .env = "MSRUN_MUNGE_SOCKET",
     .dest = D(munge_socket), .def = "munge's default", .metavar = "PATH",
     .help = "the socket of munged for auth=munge."},
    /* The coordinator's store limits (used by the node that starts it). */
    {.name = "store_value_max", .kind = MSR_OPT_SIZE, MSR_OPTB_BYTES,
     .env = "MSRUN_STORE_VALUE_MAX", .dest = D(store_value_max), .def = "16M", .metavar = "BYTES",
     .help = "the store refuses a value (or allgather contribution) larger than this (K, M, G "
             "suffixes)."},
    {.name = "store_keys_max", .kind = MSR_OPT_INT, MSR_OPTB_COUNT, .env = "MSRUN_STORE_KEYS_MAX",
     .dest = D(store_keys_max), .def = "1048576", .metavar = "N",
     .help = "the store holds at most this many keys (and names being waited on)."},
    {.name = "store_bytes_max", .kind = MSR_OPT_SIZE, MSR_OPTB_BYTES,
     .env = "MSRUN_STORE_BYTES_MAX", .dest = D(store_bytes_max), .def = "1G", .metavar = "BYTES",
     .help = "the store holds at most this many bytes of keys, values and pending allgather "
             "contributions (64 more per key)."},
    /* The coordinator's dashboard (used by the node that starts it). */
    {.name = "dashboard_port", .kind = MSR_OPT_PORT, .min = 0, .max = 65535,
     .env = "MSRUN_DASHBOARD_PORT", .dest = D(dashboard_port), .def = "0 (none)", .metavar = "PORT",
     .help = "the coordinator serves the job's page, /api/job (JSON), /api/output?rank=N (a "
             "rank's last output lines, fetched from its node on request) and /metrics "
             "(Prometheus) over HTTP on this port; every request needs the job token (Authorization: Bearer) "
             "or the cookie of the one-time login URL msrun prints (docs/observe.md)."},
    {.name = "dashboard_addr", .kind = MSR_OPT_STRING, .env = "MSRUN_DASHBOARD_ADDR",
     .dest = D(dashboard_addr), .def = "127.0.0.1", .metavar = "ADDR",
     .help = "the address the dashboard listens on (0.0.0.0: every interface)."},
    {.name = "straggler_factor", .kind = MSR_OPT_STRING, .env = "MSRUN_STRAGGLER_FACTOR",
     .dest = D(straggler_factor), .def = "1.5", .metavar = "X",
     .help = "a rank whose mean step time over 20 reported steps (the same steps for every "
             "rank) is X times the ranks' median or more, in two windows running, is named a "
             "straggler, once, on node 0's terminal, the page and /metrics."},
};
/* clang-format on */

static const msr_optset_t options_set = {"msrun", opt_defs, MSR_ARRAY_SIZE(opt_defs), 1};

static void opt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void opt_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "msrun: error: %s (see msrun --help)\n", msg);
}

static int set_string(char **slot, const char *v)
{
    char *d = msr_strdup(v);
    if (d == NULL) {
        opt_error("out of memory");
        return -1;
    }
    msr_free(*slot);
    *slot = d;
    return 0;
}

static int given(const unsigned char *seen, const char *name)
{
    return seen[msr_opts_find(&options_set, name)] != 0;
}

/* The token as given, or read from --token_file; where names its source. */
static int read_token(char **token_p, const char *token_file, const char *where)
{
    if (token_file) {
        char token[MSR_TOKEN_MAX + 1];
        if (msr_token_read_file(token_file, token, sizeof token) != MSR_OK) {
            opt_error("%s: %s", where, msr_err_msg());
            return -1;
        }
        int r = set_string(token_p, token);
        memset(token, 0, sizeof token);
        return r;
    }
    if (*token_p && !msr_token_valid(*token_p)) {
        opt_error("%s: a token is 1 to %d printable characters without spaces", where,
                  MSR_TOKEN_MAX);
        return -1;
    }
    return 0;
}

/* Finds prog the way execvp would into *out_p, so a missing program is
 * refused before any worker starts; what names it in messages, flag is the
 * boolean flag given alone just before prog (or NULL), for the hint. */
static int find_program(const char *prog, const char *what, const char *flag, char **out_p)
{
    char path[PATH_MAX];
    struct stat sb;
    if (strchr(prog, '/')) {
        if (stat(prog, &sb) != 0) {
            opt_error("%s '%s' does not exist", what, prog);
            return -1;
        }
        if (S_ISDIR(sb.st_mode)) {
            opt_error("%s '%s' is a directory", what, prog);
            return -1;
        }
        if (access(prog, X_OK) != 0) {
            opt_error("%s '%s' is not executable: %s", what, prog, strerror(errno));
            return -1;
        }
        return set_string(out_p, prog);
    }
    const char *env = getenv("PATH");
    const char *dirs = env && *env ? env : "/usr/local/bin:/usr/bin:/bin";
    int found_noexec = 0;
    for (const char *p = dirs; *p;) {
        const char *end = strchr(p, ':');
        size_t dl = end ? (size_t)(end - p) : strlen(p);
        int n = snprintf(path, sizeof path, "%.*s%s%s", (int)dl, p, dl ? "/" : "", prog);
        if (n > 0 && (size_t)n < sizeof path && stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
            if (access(path, X_OK) == 0)
                return set_string(out_p, path);
            found_noexec = 1;
        }
        p = end ? end + 1 : p + dl;
    }
    int b;
    if (found_noexec)
        opt_error("%s '%s' was found in PATH but is not executable", what, prog);
    else if (flag && msr_parse_bool(prog, &b) == MSR_OK)
        /* "--bind_core True": the flag ended, True is taken as the program */
        opt_error("%s '%s' not found in PATH (a flag takes a value only after '=', e.g. %s=%s)",
                  what, prog, flag, prog);
    else
        opt_error("%s '%s' not found in PATH", what, prog);
    return -1;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

/* What runs: PROGRAM itself, or for a Python program (PROGRAM.py, or -m
 * MODULE) the interpreter with PROGRAM (after -m) in front of the
 * arguments, as MindSpore's msrun and torchrun run them. flag: as for
 * find_program. */
static int resolve_program(msr_options_t *o, const char *flag)
{
    const char *prog = o->program;
    if (o->module && o->no_python) {
        opt_error("-m runs a module with Python: it cannot go with --no_python");
        return -1;
    }
    int python = o->module || (!o->no_python && ends_with(prog, ".py"));
    if (!python)
        return find_program(prog, "program", flag, &o->program_path);
    struct stat sb;
    if (!o->module && stat(prog, &sb) != 0) {
        opt_error("program '%s' does not exist", prog);
        return -1;
    }
    if (find_program(o->python ? o->python : "python3", "Python interpreter", NULL,
                     &o->program_path) != 0)
        return -1;
    /* python [-m] PROGRAM ARGS...: o->argv points into the command line */
    char **argv = msr_calloc((size_t)o->argc + 3, sizeof *argv);
    if (argv == NULL) {
        opt_error("out of memory");
        return -1;
    }
    int k = 0;
    argv[k++] = o->program_path;
    if (o->module)
        argv[k++] = "-m";
    for (int i = 0; i < o->argc; i++)
        argv[k++] = o->argv[i];
    argv[k] = NULL;
    msr_free(o->argv);
    o->argv = argv;
    o->argc = k;
    return 0;
}

static int parse_rank_list(const char *s, int rank, int *valid, long *top_p)
{
    /* Returns whether rank is in the list; *valid tells if the list parsed,
     * *top_p (may be NULL) its largest rank. */
    int in = 0;
    *valid = 1;
    if (top_p)
        *top_p = -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10);
        if (end == p || a < 0 || errno) {
            *valid = 0;
            return 0;
        }
        long b = a;
        p = end;
        if (*p == '-') {
            p++;
            b = strtol(p, &end, 10);
            if (end == p || b < a || errno) {
                *valid = 0;
                return 0;
            }
            p = end;
        }
        if (rank >= a && rank <= b)
            in = 1;
        if (top_p && b > *top_p)
            *top_p = b;
        if (*p == ',')
            p++;
        else if (*p != '\0') {
            *valid = 0;
            return 0;
        }
    }
    return in;
}

int msr_options_show_rank(const msr_options_t *o, int rank)
{
    int valid;
    if (o->tail_worker_log && strcmp(o->tail_worker_log, "-1") != 0 &&
        !parse_rank_list(o->tail_worker_log, rank, &valid, NULL))
        return 0;
    if (o->show_ranks == NULL || strcmp(o->show_ranks, "all") == 0)
        return 1;
    return parse_rank_list(o->show_ranks, rank, &valid, NULL);
}

/* A --tee or --redirects value (torchrun's): "N" for every worker, or
 * "L:N,L:N..." per local rank (others 0), N in 0..3. *value_p gets
 * local_rank's, *top_p (may be NULL) the largest local rank named. Returns
 * 0, or -1 if s is malformed. */
static int parse_std_spec(const char *s, int local_rank, int *value_p, long *top_p)
{
    *value_p = 0;
    if (top_p)
        *top_p = -1;
    if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0') {
        *value_p = s[0] - '0';
        return 0;
    }
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long l = strtol(p, &end, 10);
        if (end == p || l < 0 || errno || *end != ':' || end[1] < '0' || end[1] > '3' ||
            (end[2] != ',' && end[2] != '\0') || (end[2] == ',' && end[3] == '\0'))
            return -1;
        if (l == local_rank)
            *value_p = end[1] - '0';
        if (top_p && l > *top_p)
            *top_p = l;
        p = end + 2;
        if (*p == ',')
            p++;
    }
    return 0;
}

void msr_options_streams(const msr_options_t *o, int local_rank, int *file_p, int *off_p)
{
    int tee = 0, redir = 0;
    *file_p = *off_p = 0;
    if (o->log_dir == NULL)
        return;
    if (o->tee == NULL && o->redirects == NULL) {
        *file_p = MSR_STD_OUT | MSR_STD_ERR;
        return;
    }
    if (o->tee)
        parse_std_spec(o->tee, local_rank, &tee, NULL);
    if (o->redirects)
        parse_std_spec(o->redirects, local_rank, &redir, NULL);
    *file_p = tee | redir;
    *off_p = redir & ~tee;
}

/* Checks --tee and --redirects (name) against the node's workers. */
static int check_std_spec(const msr_options_t *o, const char *name, const char *value)
{
    int v;
    long top;
    if (value == NULL)
        return 0;
    if (parse_std_spec(value, 0, &v, &top) != 0) {
        opt_error("--%s=%s: give 0 (none), 1 (stdout), 2 (stderr) or 3 (both), or per local "
                  "rank like 0:3,1:1",
                  name, value);
        return -1;
    }
    if (top >= o->local_worker_num) {
        opt_error("--%s=%s: local rank %ld is out of range (this node has %d worker%s)", name,
                  value, top, o->local_worker_num, o->local_worker_num == 1 ? "" : "s");
        return -1;
    }
    if (o->log_dir == NULL) {
        opt_error("--%s needs --log_dir: the streams it names are written to log files there",
                  name);
        return -1;
    }
    return 0;
}

/* Checks a list of global ranks (--show_ranks, --tail_worker_log). */
static int check_rank_list(const msr_options_t *o, const char *name, const char *list)
{
    int valid;
    long top;
    parse_rank_list(list, 0, &valid, &top);
    if (!valid) {
        opt_error("--%s=%s is not a list like 0,2-3", name, list);
        return -1;
    }
    /* the most ranks the job can have (an elastic job at its largest) */
    long world = o->worker_num;
    if (o->max_nodes > 0 && (long)o->max_nodes * o->local_worker_num > world)
        world = (long)o->max_nodes * o->local_worker_num;
    if (top >= world) {
        opt_error("--%s=%s: rank %ld is out of range (the job has %ld rank%s)", name, list, top,
                  world, world == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

/* The output and log options. */
static int check_output(const msr_options_t *o)
{
    if (o->show_ranks && strcmp(o->show_ranks, "all") != 0 &&
        check_rank_list(o, "show_ranks", o->show_ranks) != 0)
        return -1;
    if (o->tail_worker_log && strcmp(o->tail_worker_log, "-1") != 0 &&
        check_rank_list(o, "tail_worker_log", o->tail_worker_log) != 0)
        return -1;
    if (check_std_spec(o, "redirects", o->redirects) != 0 || check_std_spec(o, "tee", o->tee) != 0)
        return -1;
    char name[256];
    if (o->worker_log_name && msr_log_name_format(o->worker_log_name, 0, 0, 0, "127.0.0.1", name,
                                                  sizeof name) != MSR_OK) {
        opt_error("%s", msr_err_msg());
        return -1;
    }
    return 0;
}

void msr_options_usage(FILE *out)
{
    fprintf(out, "usage: msrun [options] PROGRAM [ARGS...]\n"
                 "       msrun coordinator [--port P] [--host ADDR] [options]\n"
                 "       msrun status [--json] [--job_id ID] [--master_addr A --master_port P]\n"
                 "\n"
                 "Starts PROGRAM as this node's workers of a distributed job, supervises them and\n"
                 "restarts the job after failures. Options end at the first argument that is not\n"
                 "one, or at '--'. Names take '-' or '_' alike; every option also reads the\n"
                 "environment variable MSRUN_<NAME> (e.g. MSRUN_WORKER_NUM) when not given.\n"
                 "\n"
                 "options:\n");
    msr_opts_usage(&options_set, out);
    fprintf(out,
            "  -h, --help      this text\n"
            "  --version       msrun's version\n"
            "\n"
            "Each worker gets MSR_RANK, MSR_WORLD_SIZE, MSR_LOCAL_RANK, MSR_LOCAL_WORLD_SIZE,\n"
            "MSR_NODE_RANK, MSR_NODE_COUNT, MSR_GENERATION, MSR_JOB_ID, MSR_COORDINATOR,\n"
            "MSR_TOKEN, and torch's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
            "MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,\n"
            "TORCHELASTIC_RUN_ID, and OMP_NUM_THREADS unless set: 1, or with --bind_to the\n"
            "number of cores the worker was given.\n"
            "\n"
            "Exit status: 0 when all workers exit 0; the failing worker's exit code (128 +\n"
            "signal number if it was killed); 2 for bad input before any worker starts; 124\n"
            "when the job never formed (no coordinator answered, or not every node joined,\n"
            "within cluster_time_out: no worker ran).\n");
}

/* --bind_core=true is --bind_to=core, false --bind_to=none: the command line
 * wins over MSRUN_*; the two given at the same level must agree. */
static int resolve_binding(msr_options_t *o, const unsigned char *seen)
{
    int core = seen[msr_opts_find(&options_set, "bind_core")];
    int to = seen[msr_opts_find(&options_set, "bind_to")];
    int from_core = o->bind_core ? MSR_BIND_CORE : MSR_BIND_NONE;
    if (core == 0 || (to != 0 && to < core))
        return 0; /* 1: command line, 2: environment */
    if (to == core && o->bind_to != from_core) {
        opt_error("%s=%s and %s=%s disagree: give one",
                  core == 1 ? "--bind_core" : "MSRUN_BIND_CORE", o->bind_core ? "true" : "false",
                  to == 1 ? "--bind_to" : "MSRUN_BIND_TO", bind_choices[o->bind_to]);
        return -1;
    }
    o->bind_to = from_core;
    return 0;
}

static void defaults(msr_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->worker_num = 8;
    o->local_worker_num = 8;
    o->master_port = 8118;
    o->node_rank = -1;
    o->coordinator_here = -1;
    o->join = 1;
    o->cluster_time_out_ms = 600000;
    o->grace_ms = 5000;
    o->heartbeat_ms = 1000;
    o->node_timeout_ms = 5000;
    o->coordinator_timeout_ms = 30000;
    o->last_call_ms = 1000;
    o->log_level = MSR_LOG_INFO;
    o->tag_output = 1;
    o->etcd_lease = 2;
}

/* The origin of option name when it was given (seen: 1 command line, 2
 * environment); left alone otherwise. */
static void origin_given(const unsigned char *seen, const char *name, msr_origin_t *org)
{
    int k = msr_opts_find(&options_set, name);
    if (k < 0 || seen[k] == 0)
        return;
    char buf[64];
    msr_origin_set(org, seen[k] == 2 ? MSR_SRC_ENV : MSR_SRC_OPTION, "%s",
                   msr_opts_where(&options_set, seen, name, buf, sizeof buf));
}

/* Slurm and Kubernetes (msrun/sched.h): their values fill what the options
 * and MSRUN_* variables left at the default, except the master's address
 * and port, which apply_sched_master takes once the job's node count is
 * known. Without a scheduler's variables nothing changes. s gets what the
 * scheduler said. */
static int apply_sched(msr_options_t *o, const unsigned char *seen, msr_sched_t *s_p)
{
    msr_origins_t *g = &o->origins;
    origin_given(seen, "node_rank", &g->node_rank);
    origin_given(seen, "nnodes", &g->nnodes);
    origin_given(seen, "master_addr", &g->master_addr);
    if (g->master_port.src == MSR_SRC_DEFAULT) /* else it came with master_addr */
        origin_given(seen, "master_port", &g->master_port);
    origin_given(seen, "rdzv_endpoint", &g->master_addr);
    origin_given(seen, "rdzv_endpoint", &g->master_port);
    origin_given(seen, "local_worker_num", &g->local_worker_num);
    origin_given(seen, "worker_num", &g->worker_num);
    origin_given(seen, "job_id", &g->job_id);
    origin_given(seen, "coordinator_here", &g->coordinator_here);
    origin_given(seen, o->token_file ? "token_file" : "token", &g->auth);
    origin_given(seen, "rdzv_backend", &g->rdzv_backend);
    /* etcd elects the coordinator's node: no master address to find */
    int addr_given = g->master_addr.src != MSR_SRC_DEFAULT || o->etcd_endpoints != NULL;
    msr_sched_env_t env;
    msr_sched_env_system(&env);
    msr_sched_t s;
    if (msr_sched_detect(&env, !addr_given && !o->standalone, &s) != MSR_OK) {
        fprintf(stderr, "msrun: error: %s\n", msr_err_msg());
        return -1;
    }
    *s_p = s;
    o->sched = s.kind;
    if (s.kind == MSR_SCHED_NONE)
        return 0;
    if (s.kind == MSR_SCHED_SLURM && !s.in_step && s.has_nodes && s.max_nodes > 1 &&
        !o->standalone && !addr_given && g->nnodes.src == MSR_SRC_DEFAULT &&
        g->node_rank.src == MSR_SRC_DEFAULT) {
        fprintf(stderr,
                "msrun: error: this Slurm job has %d nodes but msrun runs outside srun (no "
                "SLURM_STEP_ID: a batch script or salloc shell), so only this node would start; "
                "run one msrun per node: srun -N%d --ntasks-per-node=1 msrun ...\n",
                s.max_nodes, s.max_nodes);
        return -1;
    }
    if (!o->standalone) {
        if (s.has_nodes && g->nnodes.src == MSR_SRC_DEFAULT) {
            o->min_nodes = s.min_nodes;
            o->max_nodes = s.max_nodes;
            g->nnodes = s.nodes_from;
        }
        /* an elastic job's coordinator assigns node ranks */
        if (s.has_node_rank && g->node_rank.src == MSR_SRC_DEFAULT &&
            o->min_nodes == o->max_nodes) {
            o->node_rank = s.node_rank;
            g->node_rank = s.node_rank_from;
        }
    }
    if (s.has_local && g->local_worker_num.src == MSR_SRC_DEFAULT &&
        g->worker_num.src == MSR_SRC_DEFAULT) {
        o->local_worker_num = s.local_worker_num;
        o->given_local_worker_num = 1;
        g->local_worker_num = s.local_from;
    }
    if (s.has_job_id && g->job_id.src == MSR_SRC_DEFAULT) {
        if (set_string(&o->job_id, s.job_id) != 0)
            return -1;
        g->job_id = s.job_id_from;
    }
    msr_src_t src = s.kind == MSR_SCHED_SLURM ? MSR_SRC_SLURM : MSR_SRC_KUBERNETES;
    int rank = o->node_rank >= 0 ? o->node_rank : s.host_rank;
    if (g->coordinator_here.src == MSR_SRC_DEFAULT && rank >= 0) {
        o->coordinator_here = rank == 0;
        msr_origin_set(&g->coordinator_here, src, "node rank %d%s", rank,
                       rank == 0 ? " hosts it" : "");
    }
    return 0;
}

/* The scheduler's master address and port (s from apply_sched), for a job
 * of more than one node only, as one node needs no coordinator elsewhere:
 * a scheduler's MASTER_ADDR must not turn a one-node job into one node of
 * a multi-node job that waits for a token. */
static int apply_sched_master(msr_options_t *o, const msr_sched_t *s, int job_nodes)
{
    msr_origins_t *g = &o->origins;
    if (s->kind == MSR_SCHED_NONE || o->standalone)
        return 0;
    int addr_given = g->master_addr.src != MSR_SRC_DEFAULT || o->etcd_endpoints != NULL;
    if (s->has_addr && !addr_given && job_nodes > 1) {
        if (set_string(&o->master_addr, s->master_addr) != 0)
            return -1;
        g->master_addr = s->addr_from;
    }
    if (s->has_port && g->master_port.src == MSR_SRC_DEFAULT && o->master_addr) {
        o->master_port = s->master_port;
        g->master_port = s->port_from;
    }
    if (s->kind == MSR_SCHED_SLURM && o->token == NULL && o->master_addr) {
        /* never a token made from the job id: others could guess it */
        o->auth_munge = 1;
        msr_origin_set(&g->auth, MSR_SRC_SLURM, "no token given: munge credentials");
    }
    return 0;
}

/* The origins of the worker counts derive_counts filled in. */
static void origins_derived(msr_options_t *o)
{
    msr_origins_t *g = &o->origins;
    if (g->local_worker_num.src == MSR_SRC_DEFAULT && o->given_worker_num)
        msr_origin_set(&g->local_worker_num, MSR_SRC_DERIVED, "worker_num / nnodes");
    if (g->worker_num.src == MSR_SRC_DEFAULT)
        msr_origin_set(&g->worker_num, MSR_SRC_DERIVED, "local_worker_num x %snnodes",
                       o->max_nodes > o->min_nodes ? "MAX " : "");
}

static void print_line(FILE *out, const char *name, const char *value, const msr_origin_t *org,
                       const char *default_what)
{
    const char *what =
        org->src == MSR_SRC_DEFAULT && org->what[0] == '\0' ? default_what : org->what;
    fprintf(out, "%s = %s (%s%s%s)\n", name, value, msr_src_name(org->src),
            what && *what ? ": " : "", what ? what : "");
}

void msr_options_print_resolved(const msr_options_t *o, FILE *out)
{
    const msr_origins_t *g = &o->origins;
    char v[320];
    msr_origin_t org = {MSR_SRC_DEFAULT, ""};
    if (o->sched == MSR_SCHED_SLURM)
        msr_origin_set(&org, MSR_SRC_SLURM, "SLURM_JOB_ID is set");
    else if (o->sched == MSR_SCHED_KUBERNETES)
        msr_origin_set(&org, MSR_SRC_KUBERNETES, "its variables are set");
    print_line(out, "scheduler", msr_sched_kind_name((msr_sched_kind_t)o->sched), &org,
               "no Slurm or Kubernetes variables");
    snprintf(v, sizeof v, "%d", o->node_rank);
    print_line(out, "node_rank", v, &g->node_rank, "the coordinator assigns it");
    if (o->max_nodes > o->min_nodes)
        snprintf(v, sizeof v, "%d:%d", o->min_nodes, o->max_nodes);
    else
        snprintf(v, sizeof v, "%d", o->worker_num / o->local_worker_num);
    msr_origin_t nn = g->nnodes;
    if (nn.src == MSR_SRC_DEFAULT)
        msr_origin_set(&nn, MSR_SRC_DERIVED, "worker_num / local_worker_num");
    print_line(out, "nnodes", v, &nn, NULL);
    if (o->etcd_endpoints) {
        msr_origin_t eo = g->rdzv_backend;
        print_line(out, "master_addr", "elected through etcd", &eo, NULL);
        print_line(out, "etcd_endpoints", o->etcd_endpoints, &eo, NULL);
    } else {
        print_line(out, "master_addr", o->master_addr ? o->master_addr : "none", &g->master_addr,
                   "a standalone job on this host");
    }
    if (o->etcd_endpoints) {
        msr_origin_t d;
        msr_origin_set(&d, MSR_SRC_DERIVED, "--rdzv_backend=etcd");
        print_line(out, "master_port", "0", &d, "a free port on the node etcd elects");
        print_line(out, "coordinator_here", "if elected", &d, NULL);
    } else {
        if (o->master_addr || o->given_master_port)
            snprintf(v, sizeof v, "%d", o->master_port);
        else
            snprintf(v, sizeof v, "0");
        print_line(out, "master_port", v, &g->master_port,
                   o->master_addr || o->given_master_port ? NULL : "0: a free loopback port");
        print_line(out, "coordinator_here",
                   o->master_addr == NULL     ? "true"
                   : o->coordinator_here > 0  ? "true"
                   : o->coordinator_here == 0 ? "false"
                                              : "auto",
                   &g->coordinator_here,
                   o->master_addr ? "when master_addr is a local address" : "standalone");
    }
    snprintf(v, sizeof v, "%d", o->local_worker_num);
    print_line(out, "local_worker_num", v, &g->local_worker_num, NULL);
    snprintf(v, sizeof v, "%d", o->worker_num);
    print_line(out, "worker_num", v, &g->worker_num, NULL);
    print_line(out, "job_id",
               o->job_id        ? o->job_id
               : o->master_addr ? "default"
                                : "random",
               &g->job_id, o->master_addr ? NULL : "a new one each run");
    const char *auth = o->auth_munge                 ? "munge"
                       : (o->token || o->token_file) ? "token"
                                                     : "generated";
    print_line(out, "auth", auth, &g->auth,
               o->master_addr ? "node 0 makes a token up; the other nodes must be given it"
                              : "a random token");
    print_line(out, "rdzv_backend", rdzv_choices[o->rdzv_backend], &g->rdzv_backend, NULL);
    msr_origin_set(&org, MSR_SRC_OPTION, "PROGRAM");
    print_line(out, "program", o->program_path ? o->program_path : o->program, &org, NULL);
}

/* Worker counts and node counts: derives what was not given, takes the
 * scheduler's master (s) for a job of several nodes, and checks that they
 * agree. */
static int derive_counts(msr_options_t *o, const msr_sched_t *s)
{
    int nodes = o->max_nodes ? o->max_nodes : 1;
    if (o->standalone) {
        msr_free(o->master_addr);
        o->master_addr = NULL;
        nodes = 1;
        if (o->max_nodes > 1) {
            opt_error("--standalone runs one node, but --nnodes=%d", o->max_nodes);
            return 2;
        }
    }
    if (o->given_worker_num && !o->given_local_worker_num) {
        if (o->worker_num % nodes) {
            opt_error("worker_num %d does not divide among %d nodes", o->worker_num, nodes);
            return 2;
        }
        o->local_worker_num = o->worker_num / nodes;
    } else if (!o->given_worker_num) {
        o->worker_num = o->local_worker_num * nodes;
    }
    if (o->worker_num % o->local_worker_num != 0) {
        opt_error("worker_num %d is not a multiple of local_worker_num %d", o->worker_num,
                  o->local_worker_num);
        return 2;
    }
    int job_nodes = o->worker_num / o->local_worker_num;
    if (o->max_nodes && o->min_nodes == o->max_nodes && job_nodes != o->max_nodes) {
        opt_error("worker_num %d / local_worker_num %d makes %d nodes, but --nnodes=%d",
                  o->worker_num, o->local_worker_num, job_nodes, o->max_nodes);
        return 2;
    }
    if (o->max_nodes && o->min_nodes != o->max_nodes) {
        /* elastic: the world is nodes x local_worker_num, at most MAX nodes */
        if (o->given_worker_num && o->worker_num != o->max_nodes * o->local_worker_num) {
            opt_error("in an elastic job (--nnodes=%d:%d) the world size is nodes x "
                      "local_worker_num: leave --worker_num out (or give %d)",
                      o->min_nodes, o->max_nodes, o->max_nodes * o->local_worker_num);
            return 2;
        }
        if (o->node_rank >= 0) {
            opt_error("an elastic job (--nnodes=%d:%d) assigns node ranks: leave --node_rank out",
                      o->min_nodes, o->max_nodes);
            return 2;
        }
    } else {
        o->min_nodes = o->max_nodes = 0; /* a fixed size, however it was given */
    }
    if (apply_sched_master(o, s, job_nodes) != 0)
        return 2;
    if (o->master_addr == NULL && o->etcd_endpoints == NULL && job_nodes > 1) {
        opt_error("a job of %d nodes needs --master_addr (worker_num %d, local_worker_num %d)",
                  job_nodes, o->worker_num, o->local_worker_num);
        return 2;
    }
    if (o->node_rank >= job_nodes) {
        opt_error("node_rank %d is out of range: the job has %d node%s", o->node_rank, job_nodes,
                  job_nodes == 1 ? "" : "s");
        return 2;
    }
    return 0;
}

/* --master_addr=HOST:PORT or [v6]:PORT (an address that holds a port, as
 * --rdzv_endpoint does): split into master_addr and master_port. As for
 * --bind_core, the command line wins over MSRUN_*; a master_port given at
 * the same level must be the same port. An IPv6 address without brackets
 * (::1) or in brackets alone ([::1]) holds no port. */
static int split_master_addr(msr_options_t *o, const unsigned char *seen)
{
    const char *a = o->master_addr;
    const char *colon = a ? strrchr(a, ':') : NULL;
    if (colon == NULL)
        return 0;
    int has_port = a[0] == '[' ? colon[-1] == ']' : strchr(a, ':') == colon;
    if (!has_port)
        return 0;
    char where[64], pwhere[64];
    const char *w = msr_opts_where(&options_set, seen, "master_addr", where, sizeof where);
    char *host = NULL;
    int port;
    if (msr_opts_hostport(a, w, 1, 65535, &host, &port) != MSR_OK) {
        opt_error("%s", msr_err_msg());
        return 2;
    }
    int addr_level = seen[msr_opts_find(&options_set, "master_addr")]; /* 1 or 2 */
    int port_level = seen[msr_opts_find(&options_set, "master_port")]; /* 0: not given */
    if (port_level == addr_level && o->master_port != port) {
        opt_error("%s=%s and %s=%d name different ports: give one", w, a,
                  msr_opts_where(&options_set, seen, "master_port", pwhere, sizeof pwhere),
                  o->master_port);
        msr_free(host);
        return 2;
    }
    if (port_level == 0 || addr_level < port_level) {
        o->master_port = port;
        msr_origin_set(&o->origins.master_port, addr_level == 2 ? MSR_SRC_ENV : MSR_SRC_OPTION,
                       "%s", w);
    }
    msr_free(o->master_addr);
    o->master_addr = host;
    return 0;
}

/* --rdzv_endpoint: master_addr and master_port (static), or etcd's
 * endpoints (etcd), which also needs the job's token on every node. */
static int resolve_rdzv(msr_options_t *o, const unsigned char *seen)
{
    char where[64];
    const char *w = msr_opts_where(&options_set, seen, "rdzv_endpoint", where, sizeof where);
    if (o->rdzv_backend != MSR_RDZV_ETCD) {
        if (o->rdzv_endpoint && msr_opts_hostport(o->rdzv_endpoint, w, 1, 65535, &o->master_addr,
                                                  &o->master_port) != MSR_OK) {
            fprintf(stderr, "msrun: error: %s\n", msr_err_msg());
            return 2;
        }
        return 0;
    }
    if (o->rdzv_endpoint == NULL || o->rdzv_endpoint[0] == '\0') {
        opt_error("--rdzv_backend=etcd needs etcd's endpoints: --rdzv_endpoint=HOST:PORT[,...]");
        return 2;
    }
    if (o->master_addr || o->standalone) {
        opt_error("--rdzv_backend=etcd elects the coordinator's node: leave --%s out",
                  o->standalone ? "standalone" : "master_addr");
        return 2;
    }
    if (o->token == NULL) {
        opt_error("--rdzv_backend=etcd needs the job's token on every node (MSRUN_TOKEN or "
                  "--token_file FILE): whichever node is elected cannot hand out one it made up");
        return 2;
    }
    o->etcd_endpoints = o->rdzv_endpoint;
    o->rdzv_endpoint = NULL;
    return 0;
}

/* Checks of options against each other and of the program, once all are
 * known; flag: as for find_program. */
/* --straggler_factor: a number above 1 (and sane). */
static int check_straggler_factor(const msr_options_t *o)
{
    if (o->straggler_factor == NULL)
        return 0;
    char *end;
    double x = strtod(o->straggler_factor, &end);
    if (*end != '\0' || !(x > 1 && x <= 1000)) {
        opt_error("--straggler_factor=%s is not a number above 1 (up to 1000)",
                  o->straggler_factor);
        return 2;
    }
    return 0;
}

static int check_rest(msr_options_t *o, const char *flag)
{
    if (check_straggler_factor(o) != 0)
        return 2;
    /* an IPv6 address may come in brackets, as in a URL: [::1] */
    size_t alen = o->master_addr ? strlen(o->master_addr) : 0;
    if (alen >= 2 && o->master_addr[0] == '[' && o->master_addr[alen - 1] == ']') {
        memmove(o->master_addr, o->master_addr + 1, alen - 2);
        o->master_addr[alen - 2] = '\0';
    }
    if (o->master_addr && o->master_addr[0] == '\0') {
        opt_error("--master_addr is empty");
        return 2;
    }
    if (o->master_addr && o->master_port == 0) {
        opt_error("master_port 0 is only valid for a standalone job");
        return 2;
    }
    if (check_output(o) != 0)
        return 2;
    if (!o->join) {
        opt_error("--join=false (exit once the workers are started) is not supported: msrun "
                  "stays and supervises its workers");
        return 2;
    }
    if (o->node_timeout_ms <= o->heartbeat_ms) {
        opt_error("node_timeout (%.1f s) must be longer than heartbeat_interval (%.1f s)",
                  (double)o->node_timeout_ms / 1000, (double)o->heartbeat_ms / 1000);
        return 2;
    }
    if ((o->tls_cert == NULL) != (o->tls_key == NULL)) {
        opt_error("--tls_cert and --tls_key go together (only --%s given)",
                  o->tls_cert ? "tls_cert" : "tls_key");
        return 2;
    }
    if (o->tls_server_name && !o->tls_cert && !o->tls_ca) {
        opt_error("--tls_server_name needs TLS: give --tls_ca (or --tls_cert and --tls_key)");
        return 2;
    }
    if (resolve_program(o, flag) != 0)
        return 2;
    return 0;
}

/* The boolean flag given alone just before argv[next] (the program), as
 * typed ("--tag-output"), or NULL: in "--tag_output 0" the flag ends and 0
 * is the program. Walks the options as msr_opts_parse does. */
static const char *flag_before(char **argv, int next)
{
    const char *flag = NULL;
    for (int j = 0; j < next; j++) {
        const char *a = argv[j];
        flag = NULL;
        if (a[0] != '-' || strcmp(a, "--") == 0)
            continue;
        const char *name = a + (a[1] == '-' ? 2 : 1);
        int k = msr_opts_find(&options_set, name);
        if (k < 0) /* unknown, or --name=value */
            continue;
        if (opt_defs[k].kind == MSR_OPT_BOOL)
            flag = a;
        else
            j++; /* its value is the next word */
    }
    return flag;
}

int msr_options_parse(int argc, char **argv, msr_options_t *o)
{
    const msr_optset_t *set = &options_set;
    unsigned char seen[MSR_ARRAY_SIZE(opt_defs)];
    int i = 0;
    defaults(o);
    switch (msr_opts_parse(set, argc, argv, o, seen, &i)) {
    case MSR_OPTS_HELP:
        msr_options_usage(stdout);
        return 1;
    case MSR_OPTS_VERSION:
        printf("msrun %s (protocol 1)\n", MSR_VERSION_STRING);
        return 1;
    case MSR_OPTS_BAD:
        msr_opts_print_error(set);
        return 2;
    case MSR_OPTS_OK:
        break;
    }
    o->given_worker_num = given(seen, "worker_num");
    o->given_local_worker_num = given(seen, "local_worker_num");
    o->given_master_port = given(seen, "master_port") || given(seen, "rdzv_endpoint");
    if (resolve_binding(o, seen) != 0)
        return 2;
    char where[64];
    const char *tw = o->token_file ? msr_opts_where(set, seen, "token_file", where, sizeof where)
                                   : msr_opts_where(set, seen, "token", where, sizeof where);
    if (read_token(&o->token, o->token_file, tw) != 0)
        return 2;
    if (i >= argc) {
        opt_error("no program given: msrun [options] PROGRAM [ARGS...]");
        return 2;
    }
    o->argc = argc - i;
    o->argv = msr_calloc((size_t)o->argc + 1, sizeof *o->argv);
    if (o->argv == NULL) {
        opt_error("out of memory");
        return 2;
    }
    for (int k = 0; k < o->argc; k++)
        o->argv[k] = argv[i + k];
    if (set_string(&o->program, argv[i]) != 0)
        return 2;
    msr_sched_t sched;
    memset(&sched, 0, sizeof sched);
    if (split_master_addr(o, seen) != 0 || resolve_rdzv(o, seen) != 0 ||
        apply_sched(o, seen, &sched) != 0 || derive_counts(o, &sched) != 0 ||
        check_rest(o, flag_before(argv, i)) != 0)
        return 2;
    origins_derived(o);
    return 0;
}

int msr_options_need_token(const char *prog, char **token_p, const char *token_file)
{
    if (token_file) {
        char token[MSR_TOKEN_MAX + 1];
        if (msr_token_read_file(token_file, token, sizeof token) != MSR_OK) {
            fprintf(stderr, "%s: error: %s\n", prog, msr_err_msg());
            return 2;
        }
        char *copy = msr_strdup(token);
        memset(token, 0, sizeof token);
        if (copy == NULL) {
            fprintf(stderr, "%s: error: out of memory\n", prog);
            return 2;
        }
        if (*token_p)
            memset(*token_p, 0, strlen(*token_p));
        msr_free(*token_p);
        *token_p = copy;
        return 0;
    }
    if (*token_p == NULL) {
        fprintf(stderr,
                "%s: error: no job token: give the job's token with --token_file FILE (mode "
                "0600) or MSRUN_TOKEN\n",
                prog);
        return 2;
    }
    if (!msr_token_valid(*token_p)) {
        fprintf(stderr, "%s: error: a token is 1 to %d printable characters without spaces\n", prog,
                MSR_TOKEN_MAX);
        return 2;
    }
    return 0;
}

void msr_options_cleanup(msr_options_t *o)
{
    msr_opts_free(&options_set, o);
    msr_free(o->etcd_endpoints);
    msr_free(o->program);
    msr_free(o->program_path);
    msr_free(o->argv);
    memset(o, 0, sizeof *o);
}
