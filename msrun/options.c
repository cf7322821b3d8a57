/* msrun's command line: the option table, parsing, environment variables,
 * defaults and --help. What is checked once every option is known is in
 * options_check.c, what is derived from them in options_derive.c. */
#include "launcher/options.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu_features.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/util.h"
#include "launcher/cpus.h"
#include "launcher/options_impl.h"
#include "launcher/relays.h"
#include "rendezvous/relay.h"
#include "launcher/token.h"

#define D(field) MSR_OPT_DEST(msr_options_t, field)

/* --bind_to's values, in msr_bind_t's order */
const char *const msr_options_bind_choices[] = {"none", "core", "numa", NULL};
/* --rdzv_backend's values, in msr_rdzv_backend_t's order */
const char *const msr_options_rdzv_choices[] = {"static", "etcd", "c10d", NULL};
/* --nproc_per_node's words, in msr_nproc_word_t's order */
const char *const msr_options_nproc_words[] = {"auto", "gpu", "cpu", NULL};
static const char *const relays_words[] = {"auto", "off", NULL};
/* --start_method's values (accepted, without effect) */
static const char *const start_methods[] = {"spawn", "fork", "forkserver", NULL};
/* --auth's values: auth_munge is the index */
static const char *const auth_choices[] = {"token", "munge", NULL};

/* Every option also reads MSRUN_<NAME upper-cased>; dashes and underscores
 * are interchangeable in names. */
/* clang-format off */
static const msr_opt_t opt_defs[] = {
    {.name = "worker_num", .aliases = {"np", "n"}, .kind = MSR_OPT_INT, MSR_OPTB_COUNT,
     .env = "MSRUN_WORKER_NUM", .dest = D(worker_num), .metavar = "N",
     .help = "total number of workers in the job (all nodes; mpirun's -np and -n). Default: "
             "local_worker_num x nodes."},
    {.name = "local_worker_num", .aliases = {"nproc_per_node"}, .kind = MSR_OPT_INT, MSR_OPTB_COUNT,
     .choices = msr_options_nproc_words, .env = "MSRUN_LOCAL_WORKER_NUM",
     .dest = D(local_worker_num), .metavar = "N|auto|gpu|cpu",
     .help = "workers started on this node. auto: one per visible GPU, else 1; gpu: one per "
             "visible GPU (an error without one); cpu: one per CPU msrun may use (torchrun's "
             "values). Visible GPUs: CUDA_VISIBLE_DEVICES's entries when it is set, else the "
             "NVIDIA GPUs of this machine. Default: worker_num / nodes when worker_num is given, "
             "else auto."},
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
     .choices = msr_options_bind_choices, .def = "none", .metavar = "core|numa|none",
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
    {.name = "join_hold", .kind = MSR_OPT_SECONDS, MSR_OPTB_JOIN_HOLD, .env = "MSRUN_JOIN_HOLD",
     .dest = D(join_hold_ms), .def = "cluster_time_out", .metavar = "SEC",
     .help = "elastic jobs: when a node joins a running job whose workers save before a join "
             "(train_gpt with --ckpt-dir), how long at most to hold the re-form for their "
             "checkpoint, from the join. 0: take the node in after --last_call without waiting "
             "for the save (the steps since the last checkpoint are trained again)."},
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
    /* --log_max_bytes (issue 38): a runaway worker's log is bounded */
    {.name = "log_max_bytes", .kind = MSR_OPT_SIZE, .min = 0, .max = INT64_MAX,
     .env = "MSRUN_LOG_MAX_BYTES", .dest = D(log_max_bytes), .def = "1G", .metavar = "BYTES",
     .help = "a worker's log file holds at most this many bytes (K, M, G suffixes; 0: no "
             "limit, else at least 1K): past it the file moves to NAME.1 (replacing the one "
             "before) and a new one starts; a line longer than this is cut, with a marker."},
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
     .dest = D(rdzv_backend), .choices = msr_options_rdzv_choices, .def = "static",
     .metavar = "static|c10d|etcd",
     .help = "static: one node runs the coordinator (node rank 0 under a scheduler, else the "
             "node where master_addr is local); c10d (torchrun's) is static: msrun's own "
             "coordinator plays the part of torch's c10d store. etcd: the nodes elect the node "
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
     .dest = D(store_keys_max), .def = "1048576, or 4 a rank past 262144 ranks", .metavar = "N",
     .help = "the store holds at most this many keys (and names being waited on)."},
    {.name = "store_bytes_max", .kind = MSR_OPT_SIZE, MSR_OPTB_BYTES,
     .env = "MSRUN_STORE_BYTES_MAX", .dest = D(store_bytes_max), .def = "1G, or 4K a rank past 262144 ranks", .metavar = "BYTES",
     .help = "the store holds at most this many bytes of keys, values and pending allgather "
             "contributions (64 more per key)."},
    {.name = "held_calls_max", .kind = MSR_OPT_INT, MSR_OPTB_COUNT, .env = "MSRUN_HELD_CALLS_MAX",
     .dest = D(held_calls_max), .def = "4096", .metavar = "N",
     .help = "the coordinator: at most this many calls of one client (host) wait at once (a get, fetch, barrier, "
             "allgather or heartbeat); past it RESOURCE_EXHAUSTED."},
    {.name = "held_bytes_max", .kind = MSR_OPT_SIZE, MSR_OPTB_BYTES,
     .env = "MSRUN_HELD_BYTES_MAX", .dest = D(held_bytes_max), .def = "64M", .metavar = "BYTES",
     .help = "the coordinator: the waiting calls of one client keep at most this many bytes."},
    {.name = "held_calls_total", .kind = MSR_OPT_INT, MSR_OPTB_COUNT,
     .env = "MSRUN_HELD_CALLS_TOTAL", .dest = D(held_calls_total), .def = "131072", .metavar = "N",
     .help = "the coordinator: at most this many calls wait at once, of every client."},
    {.name = "held_bytes_total", .kind = MSR_OPT_SIZE, MSR_OPTB_BYTES,
     .env = "MSRUN_HELD_BYTES_TOTAL", .dest = D(held_bytes_total), .def = "1G", .metavar = "BYTES",
     .help = "the coordinator: the waiting calls of every client keep at most this many bytes."},
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
    {.name = "dashboard_login_ttl", .kind = MSR_OPT_SECONDS, MSR_OPTB_LOGIN_TTL,
     .env = "MSRUN_DASHBOARD_LOGIN_TTL", .dest = D(dashboard_login_ttl_ms), .def = "600",
     .metavar = "SEC",
     .help = "a login URL of the dashboard works once, within this long (1 s to a day); "
             "'msrun dashboard' makes a new one."},
    {.name = "dashboard_login_file", .kind = MSR_OPT_STRING, .env = "MSRUN_DASHBOARD_LOGIN_FILE",
     .dest = D(dashboard_login_file), .def = "stderr if a terminal, else the job's directory",
     .metavar = "PATH",
     .help = "write the dashboard's login URL to PATH, a new file of mode 0600 (an existing file "
             "or link is refused), and say only where it is; without it the URL goes to stderr "
             "when that is a terminal, else to dashboard.url in the job's directory."},
    {.name = "dashboard_max_connections", .kind = MSR_OPT_INT, .min = 1, .max = 65536,
     .env = "MSRUN_DASHBOARD_MAX_CONNECTIONS", .dest = D(dashboard_max_connections), .def = "256",
     .metavar = "N",
     .help = "the dashboard holds at most N connections; one more is closed at once."},
    {.name = "dashboard_request_timeout", .kind = MSR_OPT_SECONDS, .min = 100, .max = 3600000,
     .env = "MSRUN_DASHBOARD_REQUEST_TIMEOUT", .dest = D(dashboard_deadline_ms), .def = "10",
     .metavar = "SEC",
     .help = "the dashboard cuts a request not read whole within this long of its connection's "
             "accept (or of the answer before), however slowly it trickles in."},
    {.name = "straggler_factor", .kind = MSR_OPT_STRING, .env = "MSRUN_STRAGGLER_FACTOR",
     .dest = D(straggler_factor), .def = "1.5", .metavar = "X",
     .help = "a rank whose mean step time over 20 reported steps (the same steps for every "
             "rank) is X times the ranks' median or more, in two windows running, is named a "
             "straggler, once, on node 0's terminal, the page and /metrics."},
    /* One command for a whole job: msrun starts one msrun per host over ssh
     * (launcher/remote.h; kept together) */
    {.name = "hostfile", .kind = MSR_OPT_STRING, .env = "MSRUN_HOSTFILE", .dest = D(hostfile),
     .group = 2, .metavar = "FILE",
     .help = "start the whole job from here: one msrun per host of FILE over ssh (Open MPI's "
             "format: a 'HOST [slots=K]' line per host, K 1 when not given, '#' comments), "
             "worker_num workers filling the hosts' slots in order (default: every slot). The "
             "first host runs the coordinator (master_addr). See docs/usage.md."},
    {.name = "host", .aliases = {"H"}, .kind = MSR_OPT_STRING, .env = "MSRUN_HOST",
     .dest = D(hosts), .group = 2, .metavar = "HOST[:K],...",
     .help = "as --hostfile, with the hosts listed (-H LIST, as Open MPI's): K slots each, 1 "
             "when not given."},
    {.name = "ssh", .kind = MSR_OPT_STRING, .env = "MSRUN_SSH",
     .dest = D(ssh), .def = "ssh", .metavar = "CMD",
     .help = "--hostfile/--host: the command that reaches a host, split at spaces (no quoting), "
             "e.g. 'ssh -p 2222 -i KEY'; msrun adds '-T -o BatchMode=yes HOST COMMAND'. The job "
             "token goes to the remote msrun on its standard input, never on a command line."},
    {.name = "forward_env", .kind = MSR_OPT_STRING, .env = "MSRUN_FORWARD_ENV",
     .dest = D(forward_env), .metavar = "NAME,...",
     .help = "--hostfile/--host: these environment variables of this shell (those set) are set "
             "for the remote msruns and their workers; their values are on the remote command "
             "line: never a secret."},
    {.name = "exit_on_stdin_eof", .kind = MSR_OPT_BOOL, .env = "MSRUN_EXIT_ON_STDIN_EOF",
     .dest = D(exit_on_stdin_eof), .def = "false",
     .help = "stop the job as on SIGTERM when standard input closes (how --hostfile/--host "
             "stops a remote msrun: its ssh connection ends)."},
    /* The launch timeline (issue 40) */
    {.name = "profile_launch", .kind = MSR_OPT_BOOL, .env = "MSRUN_PROFILE_LAUNCH",
     .dest = D(profile_launch), .def = "false",
     .help = "print the launch timeline on stderr when the job ends: each phase of this msrun "
             "(parse, token, coordinator, setup, join, rendezvous, workers, job_end, leave, "
             "teardown) and of each "
             "worker (fork, exec, and for libmsrun programs store_connect, ucx_context, "
             "ucx_worker, shared_memory, first_barrier, finalize; exit), with its start in ms "
             "from msrun's start and its duration; past 4 workers, their min/median/max."},
    /* What torchrun and mpirun users type (issue 39) */
    {.name = "export", .aliases = {"x"}, .kind = MSR_OPT_LIST, .dest = D(exports),
     .metavar = "VAR[=VALUE]",
     .help = "mpirun's -x: the workers get VAR=VALUE, or VAR with msrun's value of it (an error "
             "when unset); give it once per variable. Each node's msrun exports its own."},
    {.name = "torch_port", .aliases = {"torch_master_port"}, .kind = MSR_OPT_PORT, .min = 1,
     .max = 65535, .env = "MSRUN_TORCH_PORT", .dest = D(torch_port),
     .def = "master_port + 1, or a free port when master_port is not given", .metavar = "PORT",
     .help = "the port of torch's store: the workers' MASTER_PORT, on node 0. msrun checks "
             "that it is free when it starts on node 0 (when it knows it is node 0)."},
    {.name = "monitor_interval", .kind = MSR_OPT_SECONDS, .min = 0, .max = MSR_OPTB_SECONDS_MAX,
     .env = "MSRUN_MONITOR_INTERVAL", .dest = D(monitor_interval_ms), .metavar = "SEC",
     .help = "torchrun's polling interval, accepted and ignored (with a warning): msrun learns of "
             "a worker's exit at once, from the kernel."},
    {.name = "rdzv_conf", .kind = MSR_OPT_STRING, .env = "MSRUN_RDZV_CONF", .dest = D(rdzv_conf),
     .metavar = "KEY=VALUE,...",
     .help = "torchrun's rendezvous settings: join_timeout and timeout are cluster_time_out, "
             "last_call_timeout is last_call, heartbeat is heartbeat_interval, is_host is "
             "coordinator_here; read_timeout and close_timeout are accepted and have no "
             "meaning for msrun. Options given by name win."},
    {.name = "local_addr", .kind = MSR_OPT_STRING, .env = "MSRUN_LOCAL_ADDR", .dest = D(local_addr),
     .def = "the address that reaches the coordinator", .metavar = "ADDR",
     .help = "the address this node advertises: the workers' MASTER_ADDR when it is node 0, "
             "and the address shown for it."},
    {.name = "local_ranks_filter", .kind = MSR_OPT_STRING, .env = "MSRUN_LOCAL_RANKS_FILTER",
     .dest = D(local_ranks_filter), .def = "all", .metavar = "LIST",
     .help = "torchrun's: only these local ranks' output reaches the terminal, e.g. 0 or 0,2-3 "
             "(log files get all; with show_ranks, both must hold a rank)."},
    {.name = "start_method", .kind = MSR_OPT_ENUM, .env = "MSRUN_START_METHOD",
     .dest = D(start_method), .choices = start_methods, .def = "spawn",
     .metavar = "spawn|fork|forkserver",
     .help = "torchrun's, accepted without effect: msrun starts every worker as a new program "
             "(fork and exec)."},
    /* relays (issue 40) */
    {.name = "relay", .kind = MSR_OPT_STRING, .env = "MSRUN_RELAY", .dest = D(relay),
     .def = "none", .metavar = "HOST:PORT",
     .help = "send this node's joins, heartbeats, progress, exit reports and leave through the "
             "relay at HOST:PORT (`msrun relay`), which batches them for the coordinator, and "
             "its workers' store calls, which the relay forwards over its one connection; when "
             "the relay fails, the node calls the coordinator itself."},
    {.name = "relays", .kind = MSR_OPT_INT, .min = 1, .max = MSR_RELAY_SUBTREE_MAX,
     .choices = relays_words, .env = "MSRUN_RELAYS", .dest = D(relays), .def = "auto",
     .metavar = "K|auto|off",
     .help = "the node of every K-th node rank (0, K, 2K...) serves a relay inside its msrun, "
             "on port master_port + 2 + node_rank / K (master_port + 1 is torch's), and the nodes of its group send their "
             "joins, heartbeats and store calls through it (when it fails, the coordinator "
             "directly). Its "
             "host: --relays_host, else the group's first host in Slurm's node list, or the "
             "coordinator's when that is a loopback address; none otherwise, nor without "
             "--node_rank. A --hostfile/--host launch passes each host its group's. auto: K = "
             "1024 for jobs of more than 1024 nodes, none for smaller ones."},
    {.name = "relays_host", .kind = MSR_OPT_STRING, .env = "MSRUN_RELAYS_HOST",
     .dest = D(relays_host), .def = "none", .metavar = "HOST",
     .help = "with relays: the host of this node's group's first node, where its relay is "
             "(--hostfile and --host give each host's msrun its own)."},
    /* parameter server roles (issue 46; docs/ps.md) */
    {.name = "ps_servers", .kind = MSR_OPT_INT, .min = 0, .max = INT32_MAX,
     .env = "MSRUN_PS_SERVERS", .dest = D(ps_servers), .def = "0", .metavar = "N",
     .help = "parameter server training: the last N global ranks are servers (MSR_ROLE=server), "
             "the others workers (MSR_ROLE=worker); every rank gets MSR_PS_SERVERS=N and "
             "MSR_INCARNATION=0. N must be below the world size. 0: no roles set."},
    {.name = "ps_staleness", .kind = MSR_OPT_INT, .min = -1, .max = INT32_MAX,
     .env = "MSRUN_PS_STALENESS", .dest = D(ps_staleness), .def = "-1 (synchronous)",
     .metavar = "K",
     .help = "with ps_servers: every rank gets MSR_PS_STALENESS=K, the parameter server's mode "
             "for programs that ask libmsrun for the launcher's (msr_ps_create with "
             "MSR_PS_STALENESS_ENV): -1 synchronous, K >= 0 asynchronous, a worker's pull "
             "waiting until every worker has pushed at least its own pushes - K times. K >= 0: "
             "a worker that dies is started again alone (MSR_INCARNATION one more, up to "
             "max_restarts per node) and joins the servers (msr_ps_join)."},
};
/* clang-format on */

const msr_optset_t msr_options_set = {"msrun", opt_defs, MSR_ARRAY_SIZE(opt_defs), 1};

void msr_options_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "msrun: error: %s (see msrun --help)\n", msg);
}

int msr_options_set_string(char **slot, const char *v)
{
    char *d = msr_strdup(v);
    if (d == NULL) {
        msr_options_error("out of memory");
        return -1;
    }
    msr_free(*slot);
    *slot = d;
    return 0;
}

static int given(const unsigned char *seen, const char *name)
{
    return seen[msr_opts_find(&msr_options_set, name)] != 0;
}

/* The token as given, or read from --token_file; where names its source. */
static int read_token(char **token_p, const char *token_file, const char *where)
{
    if (token_file) {
        char token[MSR_TOKEN_MAX + 1];
        if (msr_token_read_file(token_file, token, sizeof token) != MSR_OK) {
            msr_options_error("%s: %s", where, msr_err_msg());
            return -1;
        }
        int r = msr_options_set_string(token_p, token);
        memset(token, 0, sizeof token);
        return r;
    }
    if (*token_p && !msr_token_valid(*token_p)) {
        msr_options_error("%s: a token is 1 to %d printable characters without spaces", where,
                          MSR_TOKEN_MAX);
        return -1;
    }
    return 0;
}

void msr_options_usage(FILE *out)
{
    fprintf(out, "usage: msrun [options] PROGRAM [ARGS...]\n"
                 "       msrun coordinator [--port P] [--host ADDR] [options]\n"
                 "       msrun status [--json] [--job_id ID] [--master_addr A --master_port P]\n"
                 "       msrun dashboard [--dashboard_port P] [--dashboard_addr ADDR]\n"
                 "       msrun board [--out FILE] DIR [DIR...]\n"
                 "       msrun ckpt inspect DIR [--step N]\n"
                 "       msrun ckpt export DIR [--step N] --safetensors FILE\n"
                 "       msrun relay --coordinator HOST:PORT [--bind HOST:PORT] [options]\n"
                 "\n"
                 "Starts PROGRAM as this node's workers of a distributed job, supervises them and\n"
                 "restarts the job after failures. Options end at the first argument that is not\n"
                 "one, or at '--'. Names take '-' or '_' alike; every option also reads the\n"
                 "environment variable MSRUN_<NAME> (e.g. MSRUN_WORKER_NUM) when not given.\n"
                 "\n"
                 "options:\n");
    msr_opts_usage(&msr_options_set, out);
    fprintf(out,
            "  -h, --help      this text\n"
            "  --version       msrun's version\n"
            "\n"
            "Each worker gets MSR_RANK, MSR_WORLD_SIZE, MSR_LOCAL_RANK, MSR_LOCAL_WORLD_SIZE,\n"
            "MSR_NODE_RANK, MSR_NODE_COUNT, MSR_MACHINE_RANKS, MSR_GENERATION, MSR_JOB_ID,\n"
            "MSR_COORDINATOR, MSR_TOKEN, and torch's RANK, WORLD_SIZE, LOCAL_RANK,\n"
            "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT (torch_port),\n"
            "TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,\n"
            "TORCHELASTIC_ERROR_FILE (the failure report names the exception torch's\n"
            "@record writes there), and OMP_NUM_THREADS unless set: 1, or with --bind_to\n"
            "the number of cores the worker was given.\n"
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
    int core = seen[msr_opts_find(&msr_options_set, "bind_core")];
    int to = seen[msr_opts_find(&msr_options_set, "bind_to")];
    int from_core = o->bind_core ? MSR_BIND_CORE : MSR_BIND_NONE;
    if (core == 0 || (to != 0 && to < core))
        return 0; /* 1: command line, 2: environment */
    if (to == core && o->bind_to != from_core) {
        msr_options_error("%s=%s and %s=%s disagree: give one",
                          core == 1 ? "--bind_core" : "MSRUN_BIND_CORE",
                          o->bind_core ? "true" : "false", to == 1 ? "--bind_to" : "MSRUN_BIND_TO",
                          msr_options_bind_choices[o->bind_to]);
        return -1;
    }
    o->bind_to = from_core;
    return 0;
}

static void defaults(msr_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->worker_num = 1;    /* derived: msr_options_derive_counts */
    o->ps_staleness = -1; /* --ps_staleness: synchronous */
    o->relays = MSR_RELAYS_AUTO;
    o->local_worker_num = 1;
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
    o->join_hold_ms = -1;
    o->log_level = MSR_LOG_INFO;
    o->tag_output = 1;
    o->etcd_lease = 2;
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
        int k = msr_opts_find(&msr_options_set, name);
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
    const msr_optset_t *set = &msr_options_set;
    unsigned char seen[MSR_ARRAY_SIZE(opt_defs)];
    int i = 0;
    defaults(o);
    switch (msr_opts_parse(set, argc, argv, o, seen, &i)) {
    case MSR_OPTS_HELP:
        msr_options_usage(stdout);
        return 1;
    case MSR_OPTS_VERSION: {
        /* the kernels' paths depend on the CPU: a bug report carries both */
        char cpu[200];
        msr_cpu_features_describe(cpu, sizeof cpu);
        printf("msrun %s (protocol 1)\n%s\n", MSR_VERSION_STRING, cpu);
        return 1;
    }
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
        msr_options_error("no program given: msrun [options] PROGRAM [ARGS...]");
        return 2;
    }
    o->argc = argc - i;
    o->argv = msr_calloc((size_t)o->argc + 1, sizeof *o->argv);
    if (o->argv == NULL) {
        msr_options_error("out of memory");
        return 2;
    }
    for (int k = 0; k < o->argc; k++)
        o->argv[k] = argv[i + k];
    if (msr_options_set_string(&o->program, argv[i]) != 0)
        return 2;
    msr_sched_t sched;
    memset(&sched, 0, sizeof sched);
    if (msr_options_split_master_addr(o, seen) != 0 || msr_options_resolve_rdzv(o, seen) != 0 ||
        msr_options_apply_habits(o, seen) != 0 || msr_options_apply_sched(o, seen, &sched) != 0 ||
        msr_options_derive_counts(o, &sched) != 0 ||
        msr_options_check_rest(o, flag_before(argv, i)) != 0 ||
        msr_options_finish_habits(o, seen) != 0)
        return 2;
    msr_options_origins_derived(o);
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
    msr_opts_free(&msr_options_set, o);
    msr_free(o->etcd_endpoints);
    msr_free(o->program);
    msr_free(o->program_path);
    msr_free(o->argv);
    memset(o, 0, sizeof *o);
}
