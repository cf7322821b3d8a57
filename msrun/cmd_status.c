/* `msrun status`: the members and state of the jobs of this machine, or of
 * one coordinator elsewhere. */
#include "launcher/commands.h"

#include <errno.h>
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
#include "launcher/net.h"
#include "launcher/options.h"
#include "launcher/rundir.h"
#include "launcher/token.h"
#include "rendezvous/rpc.h"

/* `msrun status`'s options. */
typedef struct status_args {
    char *master_addr;
    int master_port;
    char *token, *token_file;
    char *tls_cert, *tls_key, *tls_ca, *tls_server_name;
    char *job_id;
    int json, all;
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
    {.name = "all", .kind = MSR_OPT_BOOL, .dest = S(all), .def = "false",
     .help = "without an address, also the records of other users' jobs (a record names the "
             "user that started its msrun); without it, only this user's."},
};
/* clang-format on */

static const msr_optset_t status_set = {"msrun status", status_opts, MSR_ARRAY_SIZE(status_opts),
                                        0};

static void status_usage(FILE *out)
{
    fprintf(out, "usage: msrun status [--json] [--all] [--job_id ID]\n"
                 "       msrun status [--json] --master_addr A [--master_port P] [--token_file F]\n"
                 "\n"
                 "Prints the state of a job and of its nodes: its user and command, step and\n"
                 "last loss (when the workers report them), dashboard address, generation and\n"
                 "failures. Without an address, it shows the jobs that msrun processes of this\n"
                 "user run on this machine (each records its job, user, command, coordinator\n"
                 "and token in $XDG_RUNTIME_DIR/msrun, or /tmp/msrun-<uid>, mode 0700). With\n"
                 "--master_addr or --master_port, it asks that coordinator;\n"
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
    /* from this machine's record; NULL or "": unknown */
    const char *user, *command, *dashboard;
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

static int has(const char *s)
{
    return s != NULL && s[0] != '\0';
}

static void status_text(const status_target_t *t, const Msr__StatusResponse *r)
{
    printf("job %s: %s, generation %d, %d nodes, %d workers, restarts %d of %d\n", r->job_id,
           msr_job_state_name(r->state), r->generation, r->node_count, r->world_size,
           r->restart_count, r->max_restarts);
    if (has(t->user) || has(t->command))
        printf("  user %s, command: %s\n", has(t->user) ? t->user : "?",
               has(t->command) ? t->command : "?");
    if (r->reporting_ranks > 0 && r->loss_ranks > 0)
        printf("  step %lld, loss %.6g (mean of %d rank%s)\n", (long long)r->step, r->loss,
               r->loss_ranks, r->loss_ranks == 1 ? "" : "s");
    else if (r->reporting_ranks > 0)
        printf("  step %lld\n", (long long)r->step);
    if (has(t->dashboard))
        printf("  dashboard %s\n", t->dashboard);
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
        printf("  node %-3s %-16s pid %-8d %d workers  %-8s  seen %u ms ago%s%s\n", rank, n->host,
               n->pid, n->local_worker_num, node_state_of(n), n->last_seen_ms,
               has(n->relay) ? ", joined through relay " : "", has(n->relay) ? n->relay : "");
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

/* ",\n  \"name\": s", null for an unknown s. */
static void json_opt_str(msr_buf_t *b, const char *indent, const char *name, const char *s)
{
    msr_buf_printf(b, ",\n%s  \"%s\": ", indent, name);
    if (has(s))
        json_str(b, s);
    else
        msr_buf_printf(b, "null");
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
    json_opt_str(b, indent, "user", t->user);
    json_opt_str(b, indent, "command", t->command);
    json_opt_str(b, indent, "dashboard", t->dashboard);
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
    msr_buf_printf(b, ",\n%s  \"reporting_ranks\": %d", indent, r->reporting_ranks);
    if (r->reporting_ranks > 0)
        msr_buf_printf(b, ",\n%s  \"step\": %lld", indent, (long long)r->step);
    else
        msr_buf_printf(b, ",\n%s  \"step\": null", indent);
    if (r->loss_ranks > 0)
        msr_buf_printf(b, ",\n%s  \"loss\": %.17g", indent, r->loss);
    else
        msr_buf_printf(b, ",\n%s  \"loss\": null", indent);
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
        msr_buf_printf(b,
                       ", \"workers\": %d, \"last_seen_ms\": %u, \"relay\": ", n->local_worker_num,
                       n->last_seen_ms);
        json_str(b, n->relay ? n->relay : "");
        msr_buf_printf(b, "}");
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
        if (refused) {
            /* the first answer says why better than a deadline passed */
            snprintf(err, errlen, "%s", msr_err_msg());
            st = msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, deadline, 1, resp_p);
            if (st == MSR_ERR_TIMEOUT || st == MSR_ERR_UNREACHABLE) {
                msr_rpc_channel_destroy(ch);
                return MSR_ERR_UNREACHABLE;
            }
        }
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
        if (!a->all && r->has_uid && r->uid != (unsigned)getuid())
            continue; /* another user's (--all shows it) */
        size_t k;
        for (k = 0; k < nt; k++)
            if (strcmp(t[k].coordinator, r->coordinator) == 0 &&
                strcmp(t[k].job_id, r->job_id) == 0)
                break;
        if (k < nt) {
            if (!has(t[k].dashboard)) /* recorded by the node that runs it */
                t[k].dashboard = r->dashboard;
            continue;
        }
        t[nt++] = (status_target_t){
            r->job_id,     r->coordinator,
            r->token,      {r->tls_cert, r->tls_key, r->tls_ca, r->tls_server_name},
            r->start_time, r->user,
            r->command,    r->dashboard};
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
    status_target_t t = {.job_id = a->job_id,
                         .coordinator = target,
                         .tls = {a->tls_cert, a->tls_key, a->tls_ca, a->tls_server_name}};
    if (t.tls.server_name == NULL)
        t.tls.server_name = a->master_addr; /* the name as given */
    msr_run_entry_t *e = NULL;
    size_t n = 0;
    /* a job of this machine at that address: its user, command and
     * dashboard, and its token and TLS files when none are given */
    int given = a->token != NULL || a->token_file != NULL;
    if (msr_run_records_list(&e, &n) == MSR_OK) {
        for (size_t i = 0; i < n; i++) {
            const msr_run_record_t *r = &e[i].rec;
            if (strcmp(r->coordinator, target) != 0)
                continue;
            t.start_time = r->start_time;
            t.user = r->user;
            t.command = r->command;
            t.dashboard = r->dashboard;
            if (!given)
                t.token = r->token;
            if (!given && !msr_rpc_tls_enabled(&t.tls))
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
