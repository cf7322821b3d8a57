/* Store write latency and throughput against a real coordinator process,
 * with and without its state file: C client threads (each on a connection
 * of its own) each make N Sets (or Adds) of B bytes one after the other.
 *
 *   store_bench [--clients 1,8] [--ops 2000] [--bytes 16] [--op set|add]
 *               [--state on|process|off] [--msrun PATH]
 *
 * --state on: the coordinator keeps a state file and saves to the disk
 * before answering (--state_sync disk); process: it saves to the kernel
 * only (--state_sync process, as msrun's embedded coordinator does); off:
 * no state file.
 *
 * One line per client count: the median and 99th percentile of one call's
 * latency and the writes per second of all clients together. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_coord.h"
#include "base/time.h"
#include "rendezvous/rpc.h"

static const char *token = "store-bench-token";

static pid_t start_coordinator(const char *msrun, const char *state, const char *sync, int *port_p)
{
    const char *args[24] = {"--job_id",           "bench", "--worker_num",   "1",
                            "--local_worker_num", "1",     "--max_restarts", "0",
                            "--log_level",        "error"};
    int k = 10;
    if (state) {
        args[k++] = "--state_file";
        args[k++] = state;
    }
    if (state && sync) { /* not given otherwise: older builds lack it */
        args[k++] = "--state_sync";
        args[k++] = sync;
    }
    args[k] = NULL;
    return bench_coord_start("store_bench", msrun, token, args, port_p);
}

typedef struct worker {
    pthread_t thread;
    int id, ops, bytes, add;
    char target[64];
    uint64_t *lat_ns;
    int failed;
    char err[300];
} worker_t;

static void *run(void *arg)
{
    worker_t *w = arg;
    msr_rpc_channel_t *ch = NULL;
    if (msr_rpc_channel_create_own(w->target, token, &ch) != MSR_OK) {
        w->failed = 1;
        return NULL;
    }
    char *value = malloc((size_t)w->bytes + 1);
    memset(value, 'x', (size_t)w->bytes);
    for (int i = 0; i < w->ops && !w->failed; i++) {
        char key[64];
        snprintf(key, sizeof key, "bench/%d/%d", w->id, w->add ? 0 : i);
        Msr__SetRequest s = MSR__SET_REQUEST__INIT;
        Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
        s.key = a.key = key;
        s.value.data = (uint8_t *)value;
        s.value.len = (size_t)w->bytes;
        a.delta = 1;
        s.client_id = a.client_id = (uint64_t)w->id + 1;
        s.request_id = a.request_id = (uint64_t)i + 1;
        ProtobufCMessage *resp = NULL;
        uint64_t t0 = msr_now_ns();
        msr_status_t st =
            msr_rpc_call(ch, w->add ? MSR_RPC_ADD : MSR_RPC_SET, w->add ? &a.base : &s.base,
                         msr_deadline_in_ms(30000), 1, &resp);
        w->lat_ns[i] = msr_now_ns() - t0;
        msr_rpc_message_free(resp);
        if (st != MSR_OK)
            w->failed = 1;
    }
    free(value);
    msr_rpc_channel_destroy(ch);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The command line (see the header). */
typedef struct args {
    const char *clients, *op, *state;
    int ops, bytes;
    char msrun[4200]; /* --msrun; "": the one next to this program */
} args_t;

/* Reads the command line into o; 0, or 2 with the reason printed. */
static int parse_args(int argc, char **argv, args_t *o)
{
    *o = (args_t){.clients = "1,8", .op = "set", .state = "on", .ops = 2000, .bytes = 16};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--clients") == 0)
            o->clients = argv[i + 1];
        else if (strcmp(argv[i], "--ops") == 0)
            o->ops = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--bytes") == 0)
            o->bytes = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--op") == 0)
            o->op = argv[i + 1];
        else if (strcmp(argv[i], "--state") == 0)
            o->state = argv[i + 1];
        else if (strcmp(argv[i], "--msrun") == 0)
            snprintf(o->msrun, sizeof o->msrun, "%s", argv[i + 1]);
        else {
            fprintf(stderr, "store_bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (o->ops <= 0 || o->bytes < 0) {
        fprintf(stderr, "store_bench: --ops and --bytes must be positive\n");
        return 2;
    }
    return 0;
}

/* One line: nclients threads against a coordinator of their own (its
 * state file at path when with_state). 0, 1 when a client failed (said
 * on stderr), or -1 when the coordinator did not start. */
static int bench_clients(const args_t *o, int nclients, const char *path, int with_state,
                         const char *sync)
{
    int ops = o->ops;
    unlink(path);
    int port = 0;
    pid_t pid = start_coordinator(o->msrun, with_state ? path : NULL, sync, &port);
    if (pid < 0)
        return -1;
    worker_t *w = calloc((size_t)nclients, sizeof *w);
    uint64_t *all = calloc((size_t)nclients * (size_t)ops, sizeof *all);
    uint64_t t0 = msr_now_ns();
    for (int c = 0; c < nclients; c++) {
        w[c].id = c;
        w[c].ops = ops;
        w[c].bytes = o->bytes;
        w[c].add = strcmp(o->op, "add") == 0;
        w[c].lat_ns = all + (size_t)c * (size_t)ops;
        snprintf(w[c].target, sizeof w[c].target, "127.0.0.1:%d", port);
        pthread_create(&w[c].thread, NULL, run, &w[c]);
    }
    int failed = 0;
    for (int c = 0; c < nclients; c++) {
        pthread_join(w[c].thread, NULL);
        if (w[c].failed && !failed) {
            fprintf(stderr, "store_bench: client %d: %s\n", c, w[c].err);
            failed = 1;
        }
    }
    double secs = (double)(msr_now_ns() - t0) / 1e9;
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    size_t n = (size_t)nclients * (size_t)ops;
    qsort(all, n, sizeof *all, cmp_u64);
    if (!failed)
        printf("op=%s state=%s clients=%d ops=%d bytes=%d p50_us=%.1f p99_us=%.1f "
               "writes_per_s=%.0f\n",
               o->op, o->state, nclients, ops, o->bytes, (double)all[n / 2] / 1e3,
               (double)all[n * 99 / 100] / 1e3, (double)n / secs);
    fflush(stdout);
    free(all);
    free(w);
    return failed;
}

int main(int argc, char **argv)
{
    args_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    if (o.msrun[0] == '\0' && bench_msrun_beside(o.msrun, sizeof o.msrun) != 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/store-bench-XXXXXX", path[64] = "";
    const char *state = o.state;
    if (strcmp(state, "on") != 0 && strcmp(state, "process") != 0 && strcmp(state, "off") != 0) {
        fprintf(stderr, "store_bench: --state is on, process or off\n");
        return 2;
    }
    int with_state = strcmp(state, "off") != 0;
    const char *sync = strcmp(state, "process") == 0 ? "process" : NULL;
    if (with_state) {
        if (mkdtemp(dir) == NULL)
            return 1;
        snprintf(path, sizeof path, "%s/state", dir);
    }
    for (const char *p = o.clients; *p;) {
        int nclients = atoi(p);
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
        if (nclients <= 0)
            continue;
        int r = bench_clients(&o, nclients, path, with_state, sync);
        if (r < 0)
            return 1;
        if (r > 0)
            rc = 1;
    }
    if (with_state) {
        char tmp[80];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        unlink(path);
        unlink(tmp);
        rmdir(dir);
    }
    return rc;
}
