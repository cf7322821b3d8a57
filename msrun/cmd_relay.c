/* `msrun relay`: a relay agent (docs/architecture.md, "Relays"): nodes
 * started with --relay send it their joins and heartbeats, which it passes
 * to the coordinator in batches, handing each node its answer. */
#include "launcher/commands.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/optparse.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "launcher/options.h"
#include "rendezvous/relay.h"
#include "rendezvous/rpc.h"

static volatile sig_atomic_t relay_stop;

static void on_stop_signal(int sig)
{
    (void)sig;
    relay_stop = 1;
}

typedef struct relay_args {
    char *coordinator, *bind, *relay_id, *token, *token_file;
    int subtree, ready_fd, log_level;
} relay_args_t;

#define R(field) MSR_OPT_DEST(relay_args_t, field)

/* clang-format off */
static const msr_opt_t relay_opts[] = {
    {.name = "coordinator", .kind = MSR_OPT_STRING, .env = "MSRUN_RELAY_COORDINATOR",
     .dest = R(coordinator), .metavar = "HOST:PORT",
     .help = "the job's coordinator, or the relay of a higher level this relay's batches go "
             "through (required)."},
    {.name = "bind", .kind = MSR_OPT_STRING, .dest = R(bind), .def = "0.0.0.0:0",
     .metavar = "HOST:PORT", .help = "where the relay listens for its nodes (port 0: any)."},
    {.name = "relay_id", .kind = MSR_OPT_STRING, .dest = R(relay_id),
     .def = "the host name and pid", .metavar = "ID",
     .help = "the relay's name in the job (1 to 64 bytes, unique)."},
    {.name = "subtree", .kind = MSR_OPT_INT, .min = 1, .max = MSR_RELAY_SUBTREE_MAX,
     .dest = R(subtree), .def = "1024", .metavar = "N",
     .help = "the nodes the relay serves at most, those of the relays below it included."},
    {.name = "token_file", .kind = MSR_OPT_STRING, .group = 1, .env = "MSRUN_TOKEN_FILE",
     .dest = R(token_file), .metavar = "PATH",
     .help = "read the job token from PATH, a file only you may read (mode 0600)."},
    {.name = "token", .aliases = {"job_token"}, .kind = MSR_OPT_SECRET, .group = 1,
     .env = "MSRUN_TOKEN", .dest = R(token), .metavar = "SECRET",
     .help = "the job token (prefer MSRUN_TOKEN or --token_file: others may see a command line)."},
    {.name = "ready_fd", .kind = MSR_OPT_INT, .min = 0, .max = 1 << 20, .dest = R(ready_fd),
     .metavar = "FD", .help = "once listening, write \"port N\" and a newline to descriptor FD."},
    {.name = "log_level", .kind = MSR_OPT_LEVEL, .env = "MSRUN_LOG_LEVEL", .dest = R(log_level),
     .def = "info", .metavar = "LEVEL", .help = "error, warn, info or debug."},
};
/* clang-format on */

static const msr_optset_t relay_set = {"msrun relay", relay_opts, MSR_ARRAY_SIZE(relay_opts), 0};

static void relay_usage(FILE *out)
{
    fprintf(out, "usage: msrun relay --coordinator HOST:PORT [--bind HOST:PORT] [--subtree N]\n"
                 "                   [--relay_id ID] [--token_file F]\n"
                 "\n"
                 "Serves as a relay between nodes and the job's coordinator: nodes started\n"
                 "with --relay HOST:PORT send it their joins and heartbeats, which it passes on\n"
                 "in batches (docs/architecture.md, \"Relays\"), and their workers' store\n"
                 "calls, which it forwards over its one connection upstream: one by one, but\n"
                 "for the Barrier, Add and Publish calls that reach it together, merged into\n"
                 "one call, and the Fetch calls of entries its nodes published through it,\n"
                 "which it answers itself.\n"
                 "Relays of a lower level may send it their batches too, and --coordinator\n"
                 "may name a relay of a higher level: a tree of at most 4 levels. The\n"
                 "coordinator stays the one authority; when the relay (or one above it) ends,\n"
                 "its nodes call the coordinator directly.\n"
                 "Runs until SIGINT or SIGTERM.\n"
                 "\n"
                 "Exit status: 0 when stopped by a signal, 1 when it could not start, 2 for bad\n"
                 "input.\n"
                 "\n"
                 "options:\n");
    msr_opts_usage(&relay_set, out);
}

/* --coordinator's HOST:PORT (a port of 1..65535: the coordinator's or an
 * upper relay's) and --bind's (0..65535); 0, or -1 with the error printed. */
static int check_addresses(const relay_args_t *a)
{
    char *host = NULL;
    int port = 0;
    if (msr_opts_hostport(a->coordinator, "--coordinator", 1, 65535, &host, &port) != MSR_OK ||
        (a->bind && msr_opts_hostport(a->bind, "--bind", 0, 65535, &host, &port) != MSR_OK)) {
        fprintf(stderr, "msrun relay: error: %s\n", msr_err_msg());
        msr_free(host);
        return -1;
    }
    msr_free(host);
    return 0;
}

/* Serves until a signal: 0, or 1 when it could not start. */
static int relay_run(relay_args_t *a)
{
    char id[MSR_RELAY_ID_MAX + 1], host[48] = "relay";
    gethostname(host, sizeof host - 1);
    if (a->relay_id)
        snprintf(id, sizeof id, "%s", a->relay_id);
    else
        snprintf(id, sizeof id, "%.40s-%d", host, (int)getpid());
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    msr_rpc_loop_t *loop = NULL;
    msr_rpc_channel_t *up = NULL;
    msr_relay_server_t *server = NULL;
    int port = 0, rc = 1;
    msr_status_t st = msr_rpc_loop_create(&loop);
    if (st == MSR_OK)
        st = msr_rpc_channel_create_own(a->coordinator, a->token, &up);
    if (st == MSR_OK)
        st = msr_relay_server_create(loop, a->bind ? a->bind : "0.0.0.0:0", a->token, up, id,
                                     (uint32_t)(a->subtree ? a->subtree : 1024), &port, &server);
    if (st != MSR_OK) {
        fprintf(stderr, "msrun relay: error: cannot serve on %s for %s: %s\n",
                a->bind ? a->bind : "0.0.0.0:0", a->coordinator, msr_status_str(st));
        goto out;
    }
    MSR_INFO("relay %s: serving on port %d for the coordinator at %s", id, port, a->coordinator);
    if (a->ready_fd > 0) {
        char line[32];
        int n = snprintf(line, sizeof line, "port %d\n", port);
        msr_write_all(a->ready_fd, line, (size_t)n);
        close(a->ready_fd);
    }
    while (!relay_stop) {
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(5)); /* what arrives meanwhile: one batch */
        msr_relay_server_flush(server);
    }
    char sent[200];
    msr_relay_describe(msr_relay_server_relay(server), sent, sizeof sent);
    MSR_INFO("relay %s: stopping after relaying %s; forwarded %" PRIu64 " store calls", id, sent,
             msr_relay_server_forwarded(server));
    rc = 0;
out:
    msr_relay_server_destroy(server);
    msr_rpc_channel_destroy(up);
    if (loop)
        msr_rpc_loop_destroy(loop);
    return rc;
}

int msr_relay_main(int argc, char **argv)
{
    relay_args_t a = {0};
    a.ready_fd = -1;
    a.log_level = MSR_LOG_INFO;
    unsigned char seen[MSR_ARRAY_SIZE(relay_opts)];
    int next, r = 2;
    switch (msr_opts_parse(&relay_set, argc, argv, &a, seen, &next)) {
    case MSR_OPTS_HELP:
        relay_usage(stdout);
        r = 0;
        break;
    case MSR_OPTS_OK:
        if (next < argc) {
            fprintf(stderr, "msrun relay: error: unexpected argument '%s'\n", argv[next]);
            break;
        }
        if (a.coordinator == NULL) {
            fprintf(stderr, "msrun relay: error: give the coordinator with --coordinator "
                            "HOST:PORT\n");
            break;
        }
        if (check_addresses(&a) != 0)
            break;
        if (msr_options_need_token("msrun relay", &a.token, a.token_file) != 0)
            break;
        msr_log_init("msrun-relay", -1, -1);
        msr_log_set_level((msr_log_level_t)a.log_level);
        r = relay_run(&a);
        break;
    default:
        msr_opts_print_error(&relay_set);
        break;
    }
    if (a.token)
        memset(a.token, 0, strlen(a.token));
    msr_opts_free(&relay_set, &a);
    return r;
}
