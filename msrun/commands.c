/* `msrun coordinator` and `msrun status`. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/failure.h"
#include "cluster/server.h"
#include "msrun/agent.h"
#include "msrun/token.h"
#include "rendezvous/rpc.h"

static volatile sig_atomic_t coord_stop;

static void on_stop_signal(int sig)
{
    (void)sig;
    coord_stop = 1;
}

static void coordinator_usage(FILE *out)
{
    fprintf(out, "usage: msrun coordinator [options]\n"
                 "\n"
                 "Serves one job's coordinator until the job ends and every node has left (or\n"
                 "until SIGINT/SIGTERM). Agents reach it with --master_addr/--master_port.\n"
                 "\n"
                 "  --port P               listen on port P of --host [default 8118; env\n"
                 "                         MSRUN_MASTER_PORT]\n"
                 "  --host ADDR, --master_addr ADDR\n"
                 "                         listen on this address only [default 127.0.0.1; env\n"
                 "                         MSRUN_MASTER_ADDR]; 0.0.0.0 (every interface) only\n"
                 "                         when given\n"
                 "  --bind ADDR:PORT       listen on this address and port\n"
                 "  --job_id ID            the job's id [default: taken from the first node]\n"
                 "  --token_file PATH      read the job token from PATH, a file only you may read\n"
                 "                         (mode 0600) [env MSRUN_TOKEN_FILE]\n"
                 "  --token SECRET         the job token [env MSRUN_TOKEN; prefer either of those\n"
                 "                         to this: others may see a command line]. Required:\n"
                 "                         there is no default token\n"
                 "  --worker_num N         the job's world size [default: from the first node]\n"
                 "  --local_worker_num N   workers per node [default: from the first node]\n"
                 "  --max_restarts N       job-wide restarts [default: from the first node]\n"
                 "  --node_timeout SEC     a node silent this long is lost [default 5]\n"
                 "  --nnodes MIN:MAX       an elastic job's range of nodes [default: fixed]\n"
                 "  --last_call SEC        elastic: wait this long for more than MIN [default 1]\n"
                 "  --cluster_time_out SEC a generation must form within [default 600]\n"
                 "  --log_level LEVEL      error, warn, info, debug [default info]\n"
                 "  --state_file PATH      keep the job's state in PATH (saved before every\n"
                 "                         answer that depends on it) and resume from it\n"
                 "  --state_sync disk|process\n"
                 "                         a save waits for the disk (fdatasync: answered writes\n"
                 "                         survive a crash of this host) or only for the kernel\n"
                 "                         (they survive any end of the coordinator) [disk]\n"
                 "  --ready_fd FD          write 'port N' (or 'error ...') to FD once listening\n"
                 "  --tls_cert PEM         serve TLS with this certificate [env MSRUN_TLS_CERT]\n"
                 "  --tls_key PEM          and this private key [env MSRUN_TLS_KEY]\n"
                 "  --tls_ca PEM           require client certificates signed by this CA (mutual\n"
                 "                         TLS) [env MSRUN_TLS_CA]\n"
                 "  --store_value_max B    refuse a store value larger than B bytes (K, M, G\n"
                 "                         suffixes) [default 16M; env MSRUN_STORE_VALUE_MAX]\n"
                 "  --store_keys_max N     hold at most N keys and waited-on names\n"
                 "                         [default 1048576; env MSRUN_STORE_KEYS_MAX]\n"
                 "  --store_bytes_max B    hold at most B bytes of keys, values and pending\n"
                 "                         allgather contributions, 64 more per key [default 1G;\n"
                 "                         env MSRUN_STORE_BYTES_MAX]\n");
}

/* The job token of `msrun coordinator` and `msrun status`: --token or
 * --token_file from the command line (tok, file; NULL when not given), else
 * MSRUN_TOKEN or MSRUN_TOKEN_FILE. There is no default: a token others can
 * compute protects nothing. Writes the token to out and returns 0, or prints
 * why (prog names the command) and returns 2. */
static int resolve_token(const char *prog, const char *tok, const char *file, char *out, size_t len)
{
    char err[600];
    if (tok && file) {
        fprintf(stderr, "%s: error: give --token or --token_file, not both\n", prog);
        return 2;
    }
    if (tok == NULL && file == NULL) {
        const char *et = getenv("MSRUN_TOKEN"), *ef = getenv("MSRUN_TOKEN_FILE");
        tok = et && *et ? et : NULL;
        file = ef && *ef ? ef : NULL;
        if (tok && file) {
            fprintf(stderr, "%s: error: MSRUN_TOKEN and MSRUN_TOKEN_FILE are both set: unset one\n",
                    prog);
            return 2;
        }
    }
    if (file) {
        if (msr_token_read_file(file, out, len, err, sizeof err) != MSR_OK) {
            fprintf(stderr, "%s: error: %s\n", prog, err);
            return 2;
        }
        return 0;
    }
    if (tok == NULL) {
        fprintf(stderr,
                "%s: error: no job token: give the job's token with --token_file FILE (mode "
                "0600) or MSRUN_TOKEN\n",
                prog);
        return 2;
    }
    if (!msr_token_valid(tok) || strlen(tok) >= len) {
        fprintf(stderr, "%s: error: a token is 1 to %d printable characters without spaces\n", prog,
                MSR_TOKEN_MAX);
        return 2;
    }
    snprintf(out, len, "%s", tok);
    return 0;
}

static int need_value(int argc, char **argv, int i)
{
    if (i + 1 >= argc) {
        fprintf(stderr, "msrun coordinator: error: %s needs a value\n", argv[i]);
        return 0;
    }
    return 1;
}

static int parse_secs(const char *v, int64_t *ms)
{
    char *end;
    double s = strtod(v, &end);
    if (end == v || *end || s <= 0 || s > 1e9)
        return -1;
    *ms = (int64_t)(s * 1000 + 0.5);
    return 0;
}

/* Keeps a copy of a token given on the command line, so that its argv
 * memory can be hidden at once. */
static int set_token_arg(const char **token_p, char **copy_p, const char *v)
{
    char *c = msr_strdup(v);
    if (c == NULL)
        return -1;
    if (*copy_p) {
        memset(*copy_p, 0, strlen(*copy_p));
        msr_free(*copy_p);
    }
    *copy_p = c;
    *token_p = c;
    return 0;
}

int msr_coordinator_main(int argc, char **argv)
{
    char *token_copy = NULL;
    char bind[300] = "";
    const char *env_port = getenv("MSRUN_MASTER_PORT"), *env_host = getenv("MSRUN_MASTER_ADDR");
    const char *host = env_host && *env_host ? env_host : "127.0.0.1";
    int64_t port_arg = -1;
    if (env_port && *env_port && msr_parse_i64(env_port, 0, 65535, &port_arg) != MSR_OK) {
        fprintf(stderr, "msrun coordinator: error: MSRUN_MASTER_PORT=%s is not a port\n", env_port);
        return 2;
    }
    const char *job_id = NULL, *token = NULL, *token_file = NULL, *state_file = NULL;
    msr_rpc_tls_t tls = {getenv("MSRUN_TLS_CERT"), getenv("MSRUN_TLS_KEY"), getenv("MSRUN_TLS_CA"),
                         NULL};
    int64_t worker_num = 0, local_worker_num = 0, max_restarts = -1, ready_fd = -1;
    int64_t node_timeout = 5000, cluster_time_out = 600000, level = MSR_LOG_INFO;
    int64_t min_nodes = 0, max_nodes = 0, last_call = 1000;
    int state_sync_process = 0;
    /* the store's limits: the environment first, the command line over it */
    int64_t store_limit[3] = {0, 0, 0}; /* value, keys, bytes; 0: defaults */
    static const char *const store_opt[3] = {"--store_value_max", "--store_keys_max",
                                             "--store_bytes_max"};
    static const char *const store_env[3] = {"MSRUN_STORE_VALUE_MAX", "MSRUN_STORE_KEYS_MAX",
                                             "MSRUN_STORE_BYTES_MAX"};
    for (int k = 0; k < 3; k++) {
        const char *v = getenv(store_env[k]);
        if (v && *v &&
            (k == 1 ? msr_parse_i64(v, 1, INT32_MAX, &store_limit[k])
                    : msr_parse_size(v, 1, INT64_MAX, &store_limit[k])) != MSR_OK) {
            fprintf(stderr, "msrun coordinator: error: bad value for %s: '%s'\n", store_env[k], v);
            return 2;
        }
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        char name[64];
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        if (nl >= sizeof name)
            nl = sizeof name - 1;
        memcpy(name, a, nl);
        name[nl] = '\0';
        for (char *p = name; *p; p++)
            if (*p == '-' && p > name + 1)
                *p = '_';
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            coordinator_usage(stdout);
            return 0;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (v == NULL) {
            if (!need_value(argc, argv, i))
                return 2;
            v = argv[++i];
        }
        int bad = 0;
        if (strcmp(name, "--port") == 0) {
            bad = msr_parse_i64(v, 0, 65535, &port_arg) != MSR_OK;
        } else if (strcmp(name, "--host") == 0 || strcmp(name, "--master_addr") == 0) {
            host = v;
            bad = *v == '\0';
        } else if (strcmp(name, "--bind") == 0) {
            snprintf(bind, sizeof bind, "%s", v);
            bad = strchr(v, ':') == NULL;
        } else if (strcmp(name, "--job_id") == 0) {
            job_id = v;
        } else if (strcmp(name, "--token") == 0 || strcmp(name, "--job_token") == 0) {
            /* copied, then hidden from ps (/proc/PID/cmdline) */
            if (set_token_arg(&token, &token_copy, v) != 0) {
                fprintf(stderr, "msrun coordinator: error: out of memory\n");
                return 2;
            }
            msr_token_scrub_arg(argv[i], eq != NULL);
            v = "***";
        } else if (strcmp(name, "--token_file") == 0) {
            token_file = v;
        } else if (strcmp(name, "--worker_num") == 0) {
            bad = msr_parse_i64(v, 1, INT32_MAX, &worker_num) != MSR_OK;
        } else if (strcmp(name, "--local_worker_num") == 0) {
            bad = msr_parse_i64(v, 1, INT32_MAX, &local_worker_num) != MSR_OK;
        } else if (strcmp(name, "--max_restarts") == 0) {
            bad = msr_parse_i64(v, -1, INT32_MAX, &max_restarts) != MSR_OK;
        } else if (strcmp(name, "--node_timeout") == 0) {
            bad = parse_secs(v, &node_timeout) != 0;
        } else if (strcmp(name, "--cluster_time_out") == 0) {
            bad = parse_secs(v, &cluster_time_out) != 0;
        } else if (strcmp(name, "--nnodes") == 0) {
            char *colon = strchr(v, ':');
            bad = colon == NULL;
            if (!bad) {
                char lo[32];
                snprintf(lo, sizeof lo, "%.*s", (int)(colon - v), v);
                bad = msr_parse_i64(lo, 1, 1 << 20, &min_nodes) != MSR_OK ||
                      msr_parse_i64(colon + 1, min_nodes, 1 << 20, &max_nodes) != MSR_OK;
            }
        } else if (strcmp(name, "--last_call") == 0) {
            bad = parse_secs(v, &last_call) != 0;
        } else if (strcmp(name, "--state_file") == 0) {
            state_file = v;
        } else if (strcmp(name, "--state_sync") == 0) {
            bad = strcmp(v, "disk") != 0 && strcmp(v, "process") != 0;
            state_sync_process = strcmp(v, "process") == 0;
        } else if (strcmp(name, "--tls_cert") == 0) {
            tls.cert = v;
        } else if (strcmp(name, "--tls_key") == 0) {
            tls.key = v;
        } else if (strcmp(name, "--tls_ca") == 0) {
            tls.ca = v;
        } else if (strcmp(name, "--ready_fd") == 0) {
            bad = msr_parse_i64(v, 0, 1 << 20, &ready_fd) != MSR_OK;
        } else if (strcmp(name, store_opt[0]) == 0 || strcmp(name, store_opt[1]) == 0 ||
                   strcmp(name, store_opt[2]) == 0) {
            int k = strcmp(name, store_opt[0]) == 0 ? 0 : strcmp(name, store_opt[1]) == 0 ? 1 : 2;
            bad = (k == 1 ? msr_parse_i64(v, 1, INT32_MAX, &store_limit[k])
                          : msr_parse_size(v, 1, INT64_MAX, &store_limit[k])) != MSR_OK;
        } else if (strcmp(name, "--log_level") == 0) {
            level = msr_log_level_parse(v);
            bad = level < 0;
        } else {
            fprintf(stderr, "msrun coordinator: error: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "msrun coordinator: error: bad value for %s: '%s'\n", name, v);
            return 2;
        }
    }
    msr_log_init("msrun-coordinator", -1, -1);
    msr_log_set_level((msr_log_level_t)level);
    char tok[MSR_TOKEN_MAX + 1];
    int r = resolve_token("msrun coordinator", token, token_file, tok, sizeof tok);
    msr_free(token_copy);
    if (r != 0)
        return r;
    token = tok;
    if (bind[0] == '\0') {
        /* --port on --host: loopback unless another address is asked for */
        int colon = strchr(host, ':') != NULL && host[0] != '[';
        snprintf(bind, sizeof bind, colon ? "[%s]:%lld" : "%s:%lld", host,
                 (long long)(port_arg >= 0 ? port_arg : 8118));
    }
    if (msr_rpc_tls_enabled(&tls) && (!tls.cert || !*tls.cert || !tls.key || !*tls.key)) {
        fprintf(stderr, "msrun coordinator: error: TLS needs both --tls_cert and --tls_key\n");
        return 2;
    }
    if (worker_num && local_worker_num && worker_num % local_worker_num) {
        fprintf(stderr,
                "msrun coordinator: error: worker_num %lld is not a multiple of "
                "local_worker_num %lld\n",
                (long long)worker_num, (long long)local_worker_num);
        return 2;
    }
    msr_coord_config_t cfg = {
        .token = token,
        .job_id = job_id,
        .worker_num = (int)worker_num,
        .local_worker_num = (int)local_worker_num,
        .max_restarts = (int)max_restarts,
        .node_timeout_ms = node_timeout,
        .join_timeout_ms = cluster_time_out,
        .state_file = state_file,
        .state_sync_process = state_sync_process,
        .min_nodes = min_nodes < max_nodes ? (int)min_nodes : 0,
        .max_nodes = min_nodes < max_nodes ? (int)max_nodes : 0,
        .last_call_ms = last_call,
        .store_limits = {(uint64_t)store_limit[0], (uint64_t)store_limit[1],
                         (uint64_t)store_limit[2]},
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

int msr_status_main(int argc, char **argv)
{
    const char *addr = getenv("MSRUN_MASTER_ADDR");
    const char *port = getenv("MSRUN_MASTER_PORT");
    const char *token = NULL, *token_file = NULL;
    char *token_copy = NULL;
    msr_rpc_tls_t tls = {getenv("MSRUN_TLS_CERT"), getenv("MSRUN_TLS_KEY"), getenv("MSRUN_TLS_CA"),
                         getenv("MSRUN_TLS_SERVER_NAME")};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("usage: msrun status [--master_addr A] [--master_port P] [--token_file F]\n"
                   "                    [--tls_cert PEM --tls_key PEM] [--tls_ca PEM] "
                   "[--tls_server_name NAME]\n"
                   "\nPrints the job's state and its nodes. The job's token comes from\n"
                   "--token_file (a file only you may read), --token, MSRUN_TOKEN_FILE or\n"
                   "MSRUN_TOKEN.\n");
            return 0;
        }
        const char *eq = strchr(a, '=');
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (v == NULL) {
            fprintf(stderr, "msrun status: error: %s needs a value\n", a);
            return 2;
        }
        if (nl == 13 && strncmp(a, "--master_addr", nl) == 0)
            addr = v;
        else if (nl == 13 && strncmp(a, "--master_port", nl) == 0)
            port = v;
        else if (nl == 7 && strncmp(a, "--token", nl) == 0) {
            if (set_token_arg(&token, &token_copy, v) != 0) {
                fprintf(stderr, "msrun status: error: out of memory\n");
                return 2;
            }
            msr_token_scrub_arg(argv[i], eq != NULL);
        } else if (nl == 12 && strncmp(a, "--token_file", nl) == 0)
            token_file = v;
        else if (nl == 10 && strncmp(a, "--tls_cert", nl) == 0)
            tls.cert = v;
        else if (nl == 9 && strncmp(a, "--tls_key", nl) == 0)
            tls.key = v;
        else if (nl == 8 && strncmp(a, "--tls_ca", nl) == 0)
            tls.ca = v;
        else if (nl == 17 && strncmp(a, "--tls_server_name", nl) == 0)
            tls.server_name = v;
        else if (nl == 8 && strncmp(a, "--job_id", nl) == 0)
            continue; /* accepted for scripts written for older versions */
        else {
            fprintf(stderr, "msrun status: error: unknown option '%.*s'\n", (int)nl, a);
            return 2;
        }
    }
    char target[300], tok[MSR_TOKEN_MAX + 1];
    snprintf(target, sizeof target, "%s:%s", addr && *addr ? addr : "127.0.0.1",
             port && *port ? port : "8118");
    int bad = resolve_token("msrun status", token, token_file, tok, sizeof tok);
    msr_free(token_copy);
    if (bad != 0)
        return bad;
    token = tok;
    msr_log_init("msrun", -1, -1);
    if (tls.server_name == NULL || *tls.server_name == '\0')
        tls.server_name = addr && *addr ? addr : NULL; /* the name as given */
    msr_rpc_channel_t *ch = NULL;
    if (msr_rpc_channel_create_tls(target, token, &tls, &ch) != MSR_OK) {
        fprintf(stderr, "msrun status: error: cannot reach %s\n", target);
        return 1;
    }
    Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    char err[400];
    msr_status_t st = msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, msr_deadline_in_ms(5000), 1,
                                   &resp, err, sizeof err);
    if (st != MSR_OK) {
        fprintf(stderr, "msrun status: error: %s\n", err);
        msr_rpc_channel_destroy(ch);
        return 1;
    }
    const Msr__StatusResponse *r = (const Msr__StatusResponse *)resp;
    printf("job %s: %s, generation %d, %d nodes, %d workers, restarts %d of %d\n", r->job_id,
           msr_job_state_name(r->state), r->generation, r->node_count, r->world_size, r->restart_count,
           r->max_restarts);
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
