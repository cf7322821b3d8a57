/* msrun's command line, environment variables, defaults and --help. */
#include "msrun/options.h"

#include <ctype.h>
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
#include "base/log.h"
#include "base/status.h"
#include "base/util.h"
#include "msrun/token.h"

typedef enum opt_type { T_INT, T_BOOL, T_STR, T_SECONDS, T_NNODES, T_LEVEL, T_SIZE } opt_type_t;

typedef enum opt_id {
    O_WORKER_NUM,
    O_LOCAL_WORKER_NUM,
    O_MASTER_ADDR,
    O_MASTER_PORT,
    O_NODE_RANK,
    O_LOG_DIR,
    O_JOIN,
    O_CLUSTER_TIME_OUT,
    O_BIND_CORE,
    O_NNODES,
    O_LAST_CALL,
    O_MAX_RESTARTS,
    O_STANDALONE,
    O_JOB_ID,
    O_TOKEN,
    O_TOKEN_FILE,
    O_GRACE,
    O_HEARTBEAT,
    O_NODE_TIMEOUT,
    O_COORDINATOR_TIMEOUT,
    O_WORKER_TIMEOUT,
    O_ERROR_FILE,
    O_SHOW_RANKS,
    O_LOG_LEVEL,
    O_RDZV_ENDPOINT,
    /* TLS (kept together) */
    O_TLS_CERT,
    O_TLS_KEY,
    O_TLS_CA,
    O_TLS_SERVER_NAME,
    /* the coordinator's store limits */
    O_STORE_VALUE_MAX,
    O_STORE_KEYS_MAX,
    O_STORE_BYTES_MAX,
    O_COUNT
} opt_id_t;

typedef struct opt_def {
    opt_id_t id;
    const char *name; /* MindSpore-style, with underscores */
    const char *aliases[3];
    opt_type_t type;
    const char *def; /* shown in --help; NULL when the default is computed */
    const char *metavar;
    const char *help;
} opt_def_t;

/* Every option also reads MSRUN_<NAME upper-cased>; dashes and underscores
 * are interchangeable in names. */
/* clang-format off */
static const opt_def_t opt_defs[] = {
    {O_WORKER_NUM, "worker_num", {NULL}, T_INT, NULL, "N",
     "total number of workers in the job (all nodes). Default: local_worker_num x nodes "
     "when local_worker_num is given, else 8."},
    {O_LOCAL_WORKER_NUM, "local_worker_num", {"nproc_per_node"}, T_INT, NULL, "N",
     "workers started on this node. Default: worker_num / nodes when worker_num is given, "
     "else 8."},
    {O_MASTER_ADDR, "master_addr", {NULL}, T_STR, "none", "ADDR",
     "address of the coordinator. The node where this address is local starts it. None: a "
     "standalone job on this host."},
    {O_MASTER_PORT, "master_port", {NULL}, T_INT, "8118", "PORT",
     "port of the coordinator (a standalone job picks a free loopback port)."},
    {O_NODE_RANK, "node_rank", {NULL}, T_INT, "-1", "R",
     "this node's rank; -1 lets the coordinator assign ranks in order of arrival."},
    {O_LOG_DIR, "log_dir", {NULL}, T_STR, "none", "DIR",
     "also write each worker's output to DIR/worker_<rank>.log (mode 0600; directories "
     "msrun makes are 0700; DIR must belong to you)."},
    {O_JOIN, "join", {NULL}, T_BOOL, "true", "BOOL",
     "accepted for MindSpore compatibility: msrun always stays and supervises its workers."},
    {O_CLUSTER_TIME_OUT, "cluster_time_out", {"rdzv_timeout"}, T_SECONDS, "600", "SEC",
     "how long the job waits for all its nodes to join (or rejoin after a restart)."},
    {O_BIND_CORE, "bind_core", {NULL}, T_BOOL, "false", "BOOL",
     "pin each worker to an equal share of this node's allowed CPU cores."},
    {O_NNODES, "nnodes", {NULL}, T_NNODES, "1", "N|MIN:MAX",
     "number of nodes, or an elastic range: the job runs on any number of nodes from MIN to "
     "MAX, re-forms smaller when nodes are lost and takes in nodes that join later (the "
     "world size is then nodes x local_worker_num)."},
    {O_LAST_CALL, "last_call", {NULL}, T_SECONDS, "1", "SEC",
     "elastic jobs: once MIN nodes are in, how long to wait for more before starting."},
    {O_MAX_RESTARTS, "max_restarts", {NULL}, T_INT, "0", "N",
     "restarts of the whole job after a worker failure, counted job-wide."},
    {O_STANDALONE, "standalone", {NULL}, T_BOOL, "false", NULL,
     "a one-node job with an embedded coordinator on a free loopback port (ignores "
     "master_addr and master_port)."},
    {O_JOB_ID, "job_id", {"rdzv_id", "run_id"}, T_STR, NULL, "ID",
     "the job's name; every node must give the same. Default: random when standalone, "
     "else 'default'."},
    {O_TOKEN, "token", {"job_token"}, T_STR, NULL, "SECRET",
     "the job token every call must carry (prefer MSRUN_TOKEN or --token_file: others may "
     "see a command line). Default: random; in a job of several nodes, node 0 generates it "
     "and writes it to a file only you can read, and the other nodes must be given it."},
    {O_TOKEN_FILE, "token_file", {NULL}, T_STR, NULL, "PATH",
     "read the job token from PATH, a file that only you may read (mode 0600, owned by you)."},
    {O_GRACE, "grace_period", {NULL}, T_SECONDS, "5", "SEC",
     "after SIGTERM, how long workers have to exit before SIGKILL."},
    {O_HEARTBEAT, "heartbeat_interval", {NULL}, T_SECONDS, "1", "SEC",
     "how often this node's msrun reports to the coordinator."},
    {O_NODE_TIMEOUT, "node_timeout", {NULL}, T_SECONDS, "5", "SEC",
     "a node silent this long is declared lost."},
    {O_COORDINATOR_TIMEOUT, "coordinator_timeout", {NULL}, T_SECONDS, "30", "SEC",
     "workers keep running this long while the coordinator cannot be reached (it may be "
     "restarting); then the job stops."},
    {O_WORKER_TIMEOUT, "worker_timeout", {NULL}, T_SECONDS, "0", "SEC",
     "a worker linking libmsrun whose process stops beating this long, or that stops "
     "calling msr_heartbeat() after calling it once, is killed as hung (0: off)."},
    {O_ERROR_FILE, "error_file", {NULL}, T_STR, "none", "PATH",
     "write the root cause of a failure as JSON to PATH (mode 0600)."},
    {O_SHOW_RANKS, "show_ranks", {NULL}, T_STR, "all", "LIST",
     "only these global ranks' output reaches the terminal, e.g. 0 or 0,2-3 (log files "
     "get all)."},
    {O_LOG_LEVEL, "log_level", {NULL}, T_LEVEL, "info", "LEVEL",
     "msrun's own messages: error, warn, info or debug."},
    {O_RDZV_ENDPOINT, "rdzv_endpoint", {NULL}, T_STR, NULL, "HOST:PORT",
     "torchrun's spelling of master_addr and master_port together."},
    /* TLS for every connection to the coordinator (kept together) */
    {O_TLS_CERT, "tls_cert", {NULL}, T_STR, "none", "PEM",
     "this node's TLS certificate (chain). With tls_key, every connection to the coordinator "
     "is encrypted; the node that runs the coordinator serves it with this certificate."},
    {O_TLS_KEY, "tls_key", {NULL}, T_STR, "none", "PEM",
     "the private key of tls_cert (keep it readable only by its owner)."},
    {O_TLS_CA, "tls_ca", {NULL}, T_STR, "none", "PEM",
     "the CA that signed the certificates: msrun verifies the coordinator's certificate with "
     "it, and the coordinator then requires every client to show a certificate it signed "
     "(mutual TLS). None: the system's CAs, and no client certificates asked for."},
    {O_TLS_SERVER_NAME, "tls_server_name", {NULL}, T_STR, NULL, "NAME",
     "the name the coordinator's certificate must carry. Default: the host part of "
     "master_addr (an IP address is checked against the certificate's IP entries)."},
    /* The coordinator's store limits (used by the node that starts it). */
    {O_STORE_VALUE_MAX, "store_value_max", {NULL}, T_SIZE, "16M", "BYTES",
     "the store refuses a value (or allgather contribution) larger than this (K, M, G "
     "suffixes)."},
    {O_STORE_KEYS_MAX, "store_keys_max", {NULL}, T_INT, "1048576", "N",
     "the store holds at most this many keys (and names being waited on)."},
    {O_STORE_BYTES_MAX, "store_bytes_max", {NULL}, T_SIZE, "1G", "BYTES",
     "the store holds at most this many bytes of keys, values and pending allgather "
     "contributions (64 more per key)."},
};
/* clang-format on */

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

/* Compares option names treating '-' and '_' alike. */
static int name_eq(const char *a, size_t alen, const char *b)
{
    size_t i = 0;
    for (; i < alen && b[i]; i++) {
        char x = a[i] == '-' ? '_' : a[i];
        char y = b[i] == '-' ? '_' : b[i];
        if (x != y)
            return 0;
    }
    return i == alen && b[i] == '\0';
}

static const opt_def_t *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < MSR_ARRAY_SIZE(opt_defs); i++) {
        if (name_eq(name, len, opt_defs[i].name))
            return &opt_defs[i];
        for (int k = 0; k < 3 && opt_defs[i].aliases[k]; k++)
            if (name_eq(name, len, opt_defs[i].aliases[k]))
                return &opt_defs[i];
    }
    return NULL;
}

static int parse_seconds(const char *v, int64_t *ms_p)
{
    char *end = NULL;
    errno = 0;
    double s = strtod(v, &end);
    if (end == v || *end != '\0' || errno || s < 0 || s > 1e9 || s != s)
        return -1;
    *ms_p = (int64_t)(s * 1000.0 + 0.5);
    return 0;
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

/* Applies one value; where says "--name" or "MSRUN_NAME" for messages. */
static int apply(msr_options_t *o, const opt_def_t *d, const char *v, const char *where)
{
    int64_t x;
    int b;
    switch (d->type) {
    case T_INT: {
        int64_t min = d->id == O_NODE_RANK ? -1 : d->id == O_MAX_RESTARTS ? 0 : 1;
        int64_t max = d->id == O_MASTER_PORT ? 65535 : INT32_MAX;
        if (d->id == O_MASTER_PORT)
            min = 0;
        msr_status_t st = msr_parse_i64(v, min, max, &x);
        if (st != MSR_OK) {
            if (d->id == O_MASTER_PORT)
                opt_error("%s=%s is not a port number (0..65535)", where, v);
            else if (min == 1)
                opt_error("%s=%s is not a positive integer", where, v);
            else
                opt_error("%s=%s is not an integer >= %lld", where, v, (long long)min);
            return -1;
        }
        break;
    }
    case T_BOOL:
        if (msr_parse_bool(v, &b) != MSR_OK) {
            opt_error("%s=%s is not a boolean (true/false)", where, v);
            return -1;
        }
        x = b;
        break;
    case T_SECONDS:
        if (parse_seconds(v, &x) != 0) {
            opt_error("%s=%s is not a number of seconds", where, v);
            return -1;
        }
        break;
    case T_SIZE:
        if (msr_parse_size(v, 1, INT64_MAX, &x) != MSR_OK) {
            opt_error("%s=%s is not a positive size in bytes (e.g. 65536, 64K, 16M, 1G)", where, v);
            return -1;
        }
        break;
    case T_LEVEL: {
        int lvl = msr_log_level_parse(v);
        if (lvl < 0) {
            opt_error("%s=%s is not a log level (error, warn, info, debug)", where, v);
            return -1;
        }
        x = lvl;
        break;
    }
    default:
        x = 0;
    }
    switch (d->id) {
    case O_WORKER_NUM:
        o->worker_num = (int)x;
        o->given_worker_num = 1;
        break;
    case O_LOCAL_WORKER_NUM:
        o->local_worker_num = (int)x;
        o->given_local_worker_num = 1;
        break;
    case O_MASTER_ADDR:
        if (*v == '\0') {
            opt_error("%s is empty", where);
            return -1;
        }
        return set_string(&o->master_addr, v);
    case O_MASTER_PORT:
        o->master_port = (int)x;
        o->given_master_port = 1;
        break;
    case O_NODE_RANK:
        o->node_rank = (int)x;
        break;
    case O_LOG_DIR:
        return set_string(&o->log_dir, v);
    case O_JOIN:
        o->join = (int)x;
        break;
    case O_CLUSTER_TIME_OUT:
        o->cluster_time_out_ms = x;
        break;
    case O_BIND_CORE:
        o->bind_core = (int)x;
        break;
    case O_NNODES: {
        const char *colon = strchr(v, ':');
        int64_t lo, hi;
        if (colon) {
            char left[32];
            size_t n = (size_t)(colon - v);
            if (n >= sizeof left)
                n = sizeof left - 1;
            memcpy(left, v, n);
            left[n] = '\0';
            if (msr_parse_i64(left, 1, 1 << 20, &lo) || msr_parse_i64(colon + 1, 1, 1 << 20, &hi) ||
                lo > hi) {
                opt_error("%s=%s is not N or MIN:MAX with 1 <= MIN <= MAX", where, v);
                return -1;
            }
        } else {
            if (msr_parse_i64(v, 1, 1 << 20, &lo)) {
                opt_error("%s=%s is not a positive integer or MIN:MAX", where, v);
                return -1;
            }
            hi = lo;
        }
        o->min_nodes = (int)lo;
        o->max_nodes = (int)hi;
        break;
    }
    case O_MAX_RESTARTS:
        o->max_restarts = (int)x;
        break;
    case O_LAST_CALL:
        o->last_call_ms = x;
        break;
    case O_STANDALONE:
        o->standalone = (int)x;
        break;
    case O_JOB_ID:
        if (*v == '\0') {
            opt_error("%s is empty", where);
            return -1;
        }
        return set_string(&o->job_id, v);
    case O_TOKEN:
        if (!msr_token_valid(v)) {
            opt_error("%s: a token is 1 to %d printable characters without spaces", where,
                      MSR_TOKEN_MAX);
            return -1;
        }
        return set_string(&o->token, v);
    case O_TOKEN_FILE: {
        char token[MSR_TOKEN_MAX + 1], err[600];
        if (msr_token_read_file(v, token, sizeof token, err, sizeof err) != MSR_OK) {
            opt_error("%s: %s", where, err);
            return -1;
        }
        int r = set_string(&o->token, token);
        memset(token, 0, sizeof token);
        return r ? r : set_string(&o->token_file, v);
    }
    case O_TLS_CERT:
    case O_TLS_KEY:
    case O_TLS_CA:
    case O_TLS_SERVER_NAME: {
        char **slot = d->id == O_TLS_CERT  ? &o->tls_cert
                      : d->id == O_TLS_KEY ? &o->tls_key
                      : d->id == O_TLS_CA  ? &o->tls_ca
                                           : &o->tls_server_name;
        if (*v == '\0') {
            opt_error("%s is empty", where);
            return -1;
        }
        if (d->id != O_TLS_SERVER_NAME && access(v, R_OK) != 0) {
            opt_error("%s=%s: cannot read it: %s", where, v, strerror(errno));
            return -1;
        }
        return set_string(slot, v);
    }
    case O_GRACE:
        o->grace_ms = x;
        break;
    case O_HEARTBEAT:
        if (x < 10) {
            opt_error("%s=%s: the heartbeat interval must be at least 0.01 s", where, v);
            return -1;
        }
        o->heartbeat_ms = x;
        break;
    case O_NODE_TIMEOUT:
        if (x < 100) {
            opt_error("%s=%s: the node timeout must be at least 0.1 s", where, v);
            return -1;
        }
        o->node_timeout_ms = x;
        break;
    case O_COORDINATOR_TIMEOUT:
        if (x < 100) {
            opt_error("%s=%s: the coordinator timeout must be at least 0.1 s", where, v);
            return -1;
        }
        o->coordinator_timeout_ms = x;
        break;
    case O_WORKER_TIMEOUT:
        if (x != 0 && x < 100) {
            opt_error("%s=%s: the worker timeout must be 0 (off) or at least 0.1 s", where, v);
            return -1;
        }
        o->worker_timeout_ms = x;
        break;
    case O_ERROR_FILE:
        return set_string(&o->error_file, v);
    case O_SHOW_RANKS:
        return set_string(&o->show_ranks, v);
    case O_LOG_LEVEL:
        o->log_level = (int)x;
        break;
    case O_RDZV_ENDPOINT: {
        const char *colon = strrchr(v, ':');
        int64_t port;
        if (colon == NULL || colon == v || msr_parse_i64(colon + 1, 1, 65535, &port)) {
            opt_error("%s=%s is not HOST:PORT", where, v);
            return -1;
        }
        char host[256];
        size_t n = (size_t)(colon - v);
        if (n >= sizeof host)
            n = sizeof host - 1;
        memcpy(host, v, n);
        host[n] = '\0';
        o->master_port = (int)port;
        o->given_master_port = 1;
        return set_string(&o->master_addr, host);
    }
    case O_STORE_VALUE_MAX:
        o->store_value_max = x;
        break;
    case O_STORE_KEYS_MAX:
        o->store_keys_max = x;
        break;
    case O_STORE_BYTES_MAX:
        o->store_bytes_max = x;
        break;
    default:
        break;
    }
    return 0;
}

static void env_name(const opt_def_t *d, char *out, size_t len)
{
    size_t n = (size_t)snprintf(out, len, "MSRUN_");
    for (const char *p = d->name; *p && n + 1 < len; p++)
        out[n++] = (char)toupper((unsigned char)*p);
    out[n] = '\0';
}

static int is_bool_literal(const char *s)
{
    int b;
    return msr_parse_bool(s, &b) == MSR_OK;
}

/* Finds prog the way execvp would, so a missing program is refused before
 * any worker starts. */
static int resolve_program(msr_options_t *o)
{
    const char *prog = o->program;
    char path[PATH_MAX];
    struct stat sb;
    if (strchr(prog, '/')) {
        if (stat(prog, &sb) != 0) {
            opt_error("program '%s' does not exist", prog);
            return -1;
        }
        if (S_ISDIR(sb.st_mode)) {
            opt_error("program '%s' is a directory", prog);
            return -1;
        }
        if (access(prog, X_OK) != 0) {
            opt_error("program '%s' is not executable: %s", prog, strerror(errno));
            return -1;
        }
        return set_string(&o->program_path, prog);
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
                return set_string(&o->program_path, path);
            found_noexec = 1;
        }
        p = end ? end + 1 : p + dl;
    }
    if (found_noexec)
        opt_error("program '%s' was found in PATH but is not executable", prog);
    else
        opt_error("program '%s' not found in PATH", prog);
    return -1;
}

static int parse_rank_list(const char *s, int rank, int *valid)
{
    /* Returns whether rank is in the list; *valid tells if the list parsed. */
    int in = 0;
    *valid = 1;
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
    if (o->show_ranks == NULL || strcmp(o->show_ranks, "all") == 0)
        return 1;
    return parse_rank_list(o->show_ranks, rank, &valid);
}

void msr_options_usage(FILE *out)
{
    fprintf(out, "usage: msrun [options] PROGRAM [ARGS...]\n"
                 "       msrun coordinator [--port P] [--host ADDR] [options]\n"
                 "       msrun status [--master_addr A] [--master_port P] [--token_file F]\n"
                 "\n"
                 "Starts PROGRAM as this node's workers of a distributed job, supervises them and\n"
                 "restarts the job after failures. Options end at the first argument that is not\n"
                 "one, or at '--'. Names take '-' or '_' alike; every option also reads the\n"
                 "environment variable MSRUN_<NAME> (e.g. MSRUN_WORKER_NUM) when not given.\n"
                 "\n"
                 "options:\n");
    for (size_t i = 0; i < MSR_ARRAY_SIZE(opt_defs); i++) {
        const opt_def_t *d = &opt_defs[i];
        char head[128];
        int n = snprintf(head, sizeof head, "  --%s%s%s", d->name, d->metavar ? " " : "",
                         d->metavar ? d->metavar : "");
        for (int k = 0; k < 3 && d->aliases[k]; k++)
            n += snprintf(head + n, sizeof head - (size_t)n, ", --%s", d->aliases[k]);
        fprintf(out, "%s\n", head);
        /* wrap the help at 76 columns, indented by 6 */
        const char *h = d->help;
        while (*h) {
            size_t len = strlen(h);
            size_t cut = len;
            if (len > 70) {
                cut = 70;
                while (cut > 0 && h[cut] != ' ')
                    cut--;
                if (cut == 0)
                    cut = 70;
            }
            fprintf(out, "      %.*s\n", (int)cut, h);
            h += cut;
            while (*h == ' ')
                h++;
        }
        char env[64];
        env_name(d, env, sizeof env);
        if (d->def)
            fprintf(out, "      [default: %s; env %s]\n", d->def, env);
        else
            fprintf(out, "      [env %s]\n", env);
    }
    fprintf(out,
            "  -h, --help      this text\n"
            "  --version       msrun's version\n"
            "\n"
            "Each worker gets MSR_RANK, MSR_WORLD_SIZE, MSR_LOCAL_RANK, MSR_LOCAL_WORLD_SIZE,\n"
            "MSR_NODE_RANK, MSR_NODE_COUNT, MSR_GENERATION, MSR_JOB_ID, MSR_COORDINATOR,\n"
            "MSR_TOKEN, and torch's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
            "MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,\n"
            "TORCHELASTIC_RUN_ID, and OMP_NUM_THREADS=1 unless set.\n"
            "\n"
            "Exit status: the first failing worker's exit code (128 + signal number if it was\n"
            "killed), 2 for bad input before any worker starts, 0 when all workers exit 0.\n");
}

static void defaults(msr_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->worker_num = 8;
    o->local_worker_num = 8;
    o->master_port = 8118;
    o->node_rank = -1;
    o->join = 1;
    o->cluster_time_out_ms = 600000;
    o->grace_ms = 5000;
    o->heartbeat_ms = 1000;
    o->node_timeout_ms = 5000;
    o->coordinator_timeout_ms = 30000;
    o->last_call_ms = 1000;
    o->log_level = MSR_LOG_INFO;
}

int msr_options_parse(int argc, char **argv, msr_options_t *o)
{
    defaults(o);
    int seen[O_COUNT] = {0}; /* 1: on the command line, 2: from the environment */
    int i = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            msr_options_usage(stdout);
            return 1;
        }
        if (strcmp(a, "--version") == 0) {
            printf("msrun %s (protocol 1)\n", MSR_VERSION_STRING);
            return 1;
        }
        if (a[0] != '-' || a[1] == '\0')
            break; /* the program */
        const char *name = a + (a[1] == '-' ? 2 : 1);
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const opt_def_t *d = find_opt(name, nlen);
        if (d == NULL) {
            opt_error("unknown option '%.*s'", (int)(nlen + (size_t)(name - a)), a);
            return 2;
        }
        const char *v;
        char *v_arg; /* the argv string that holds v */
        char where[80];
        snprintf(where, sizeof where, "--%s", d->name);
        if (eq) {
            v = eq + 1;
            v_arg = argv[i];
        } else if (d->type == T_BOOL) {
            /* --flag alone is true; a following boolean literal is its value */
            v_arg = i + 1 < argc && is_bool_literal(argv[i + 1]) ? argv[++i] : NULL;
            v = v_arg ? v_arg : "true";
        } else {
            if (i + 1 >= argc) {
                opt_error("option %s needs a value (%s)", where, d->metavar ? d->metavar : "");
                return 2;
            }
            v = v_arg = argv[++i];
        }
        int bad =
            (d->id == O_TOKEN && seen[O_TOKEN_FILE]) || (d->id == O_TOKEN_FILE && seen[O_TOKEN]);
        if (bad)
            opt_error("give --token or --token_file, not both");
        else
            bad = apply(o, d, v, where) != 0;
        /* The token leaves the process list (/proc/PID/cmdline) at once;
         * apply() copied it. */
        if (d->id == O_TOKEN)
            msr_token_scrub_arg(v_arg, eq != NULL);
        if (bad)
            return 2;
        seen[d->id] = 1;
    }
    /* Environment variables for options not on the command line. */
    for (size_t k = 0; k < MSR_ARRAY_SIZE(opt_defs); k++) {
        const opt_def_t *d = &opt_defs[k];
        if (seen[d->id])
            continue;
        /* a token given on the command line wins over either variable */
        if ((d->id == O_TOKEN && seen[O_TOKEN_FILE] == 1) ||
            (d->id == O_TOKEN_FILE && seen[O_TOKEN] == 1))
            continue;
        char env[64];
        env_name(d, env, sizeof env);
        const char *v = getenv(env);
        if (v == NULL || *v == '\0')
            continue;
        if ((d->id == O_TOKEN && seen[O_TOKEN_FILE]) || (d->id == O_TOKEN_FILE && seen[O_TOKEN])) {
            opt_error("MSRUN_TOKEN and MSRUN_TOKEN_FILE are both set: unset one");
            return 2;
        }
        if (apply(o, d, v, env) != 0)
            return 2;
        seen[d->id] = 2; /* from the environment */
    }
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

    /* Worker counts: derive what was not given. */
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
    if (o->master_addr == NULL && job_nodes > 1) {
        opt_error("a job of %d nodes needs --master_addr (worker_num %d, local_worker_num %d)",
                  job_nodes, o->worker_num, o->local_worker_num);
        return 2;
    }
    if (o->node_rank >= job_nodes) {
        opt_error("node_rank %d is out of range: the job has %d node%s", o->node_rank, job_nodes,
                  job_nodes == 1 ? "" : "s");
        return 2;
    }
    if (o->master_addr && o->master_port == 0) {
        opt_error("master_port 0 is only valid for a standalone job");
        return 2;
    }
    if (o->show_ranks && strcmp(o->show_ranks, "all") != 0) {
        int valid;
        parse_rank_list(o->show_ranks, 0, &valid);
        if (!valid) {
            opt_error("--show_ranks=%s is not a list like 0,2-3", o->show_ranks);
            return 2;
        }
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
    if (resolve_program(o) != 0)
        return 2;
    return 0;
}

void msr_options_cleanup(msr_options_t *o)
{
    msr_free(o->master_addr);
    msr_free(o->log_dir);
    msr_free(o->job_id);
    if (o->token)
        memset(o->token, 0, strlen(o->token));
    msr_free(o->token);
    msr_free(o->token_file);
    msr_free(o->tls_cert);
    msr_free(o->tls_key);
    msr_free(o->tls_ca);
    msr_free(o->tls_server_name);
    msr_free(o->error_file);
    msr_free(o->show_ranks);
    msr_free(o->program);
    msr_free(o->program_path);
    msr_free(o->argv);
    memset(o, 0, sizeof *o);
}
