/* A barrier of N nodes through one relay, against a real coordinator: the
 * coordinator's Barrier calls and CPU per round when the relay sends each
 * node's call alone (each arrives in a poll of its own) and when it merges
 * those that arrive within one poll into one arrival (docs/performance.md,
 * "Relays: a million ranks"). With --op add, N nodes adding 1 to one
 * counter instead (as torch's store barrier and counters do), each with
 * its own client and request ids: its Add calls, separate or merged.
 *
 *   relay_barrier [--nodes 256,1024] [--rounds 5] [--op barrier|add] [--msrun PATH]
 *
 * The relay's server runs in this process, polled by it; the nodes' calls
 * come over 8 channels to it. One line per nodes and mode. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/time.h"
#include "bench_coord.h"
#include "rendezvous/relay.h"
#include "rendezvous/rpc.h"

#define CHANNELS 8

static const char *token = "relay-barrier-token";

typedef struct bench {
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *up, *status, *via[CHANNELS];
    msr_relay_server_t *relay;
    pid_t coord;
    int add;      /* --op add */
    size_t adds0; /* the relay's adds taken in before the round */
} bench_t;

static long long coord_calls(bench_t *b)
{
    const char *method = b->add ? "Add" : "Barrier";
    Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    if (msr_rpc_call(b->status, MSR_RPC_STATUS, &req.base, msr_deadline_in_ms(10000), 1, &resp) !=
        MSR_OK)
        return -1;
    const Msr__StatusResponse *r = (const Msr__StatusResponse *)resp;
    long long n = 0;
    for (size_t i = 0; i < r->n_call_names && i < r->n_call_counts; i++)
        if (strcmp(r->call_names[i], method) == 0)
            n = (long long)r->call_counts[i];
    msr_rpc_message_free(resp);
    return n;
}

typedef struct op {
    msr_rpc_async_t a;
    int done;
} op_t;

static void op_done(msr_rpc_async_t *a)
{
    ((op_t *)a)->done = 1;
}

/* The relay's calls so far: barriers held, or adds taken in. */
static size_t relay_count(bench_t *b)
{
    uint64_t calls = 0, merged;
    if (b->add)
        msr_relay_server_adds(b->relay, &calls, &merged);
    return b->add ? (size_t)calls - b->adds0 : msr_relay_server_forwarding(b->relay);
}

/* Polls until the relay holds want calls (10 s at most): 0, or -1. */
static int relay_holds(bench_t *b, size_t want)
{
    uint64_t limit = msr_deadline_in_ms(10000);
    while (relay_count(b) < want)
        if (msr_deadline_passed(limit))
            return -1;
        else
            msr_rpc_loop_poll(b->loop, msr_deadline_in_ms(5));
    return 0;
}

/* Node k's call of a round: its Barrier, or its Add of 1 to the round's
 * counter under its own ids. */
static msr_status_t call_start(bench_t *b, op_t *o, int k, int n, char *name)
{
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    r.name = name;
    r.count = (uint32_t)n;
    r.wait_ms = 60000;
    a.key = name;
    a.delta = 1;
    a.client_id = (uint64_t)k + 1;
    a.request_id = msr_now_ns();
    memset(o, 0, sizeof *o);
    o->a.method = b->add ? MSR_RPC_ADD : MSR_RPC_BARRIER;
    o->a.deadline = msr_deadline_in_ms(60000);
    o->a.done = op_done;
    return msr_rpc_call_start(b->via[k % CHANNELS], b->loop, &o->a, b->add ? &a.base : &r.base);
}

/* One barrier (or counter) of n nodes through the relay: merged, one flush
 * once all arrived; else a flush after each. 0, or -1 with why on stderr. */
static int round_run(bench_t *b, op_t *ops, int n, int merged, int round)
{
    char name[32];
    snprintf(name, sizeof name, "r%d-%d", merged, round);
    uint64_t calls, m;
    msr_relay_server_adds(b->relay, &calls, &m);
    b->adds0 = (size_t)calls;
    for (int k = 0; k < n; k++) {
        if (call_start(b, &ops[k], k, n, name) != MSR_OK)
            return -1;
        if (!merged && relay_holds(b, (size_t)k + 1) != 0)
            return -1;
        if (!merged)
            msr_relay_server_flush(b->relay);
    }
    if (merged && relay_holds(b, (size_t)n) != 0)
        return -1;
    msr_relay_server_flush(b->relay);
    uint64_t limit = msr_deadline_in_ms(60000);
    for (int k = 0; k < n; k++)
        while (!ops[k].done && !msr_deadline_passed(limit))
            msr_rpc_loop_poll(b->loop, msr_deadline_in_ms(20));
    int rc = 0;
    long long sum = 0; /* adds: the values 1 to n, each heard once */
    for (int k = 0; k < n; k++) {
        if (!ops[k].done || ops[k].a.status != MSR_OK) {
            fprintf(stderr, "relay_barrier: node %d: %s\n", k, ops[k].done ? ops[k].a.err : "hung");
            rc = -1;
        } else if (b->add && ops[k].a.resp != NULL) {
            sum += ((const Msr__AddResponse *)ops[k].a.resp)->value;
        }
        msr_rpc_async_cleanup(&ops[k].a);
    }
    if (rc == 0 && b->add && sum != (long long)n * (n + 1) / 2) {
        fprintf(stderr, "relay_barrier: the adds' values sum to %lld, not %lld\n", sum,
                (long long)n * (n + 1) / 2);
        rc = -1;
    }
    return rc;
}

static int bench_open(bench_t *b, const char *msrun, int nodes)
{
    char workers[16];
    snprintf(workers, sizeof workers, "%d", nodes);
    const char *args[] = {"--job_id",
                          "bench",
                          "--worker_num",
                          workers,
                          "--local_worker_num",
                          "1",
                          "--max_restarts",
                          "0",
                          "--log_level",
                          "error",
                          NULL};
    int port = 0, rport = 0;
    char target[64], rtarget[64];
    memset(b, 0, sizeof *b);
    if ((b->coord = bench_coord_start("relay_barrier", msrun, token, args, &port)) < 0)
        return -1;
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    if (msr_rpc_loop_create(&b->loop) != MSR_OK ||
        msr_rpc_channel_create_own(target, token, &b->up) != MSR_OK ||
        msr_rpc_channel_create_own(target, token, &b->status) != MSR_OK ||
        msr_relay_server_create(b->loop, "127.0.0.1:0", token, b->up, "bench", (uint32_t)nodes,
                                &rport, &b->relay) != MSR_OK)
        return -1;
    snprintf(rtarget, sizeof rtarget, "127.0.0.1:%d", rport);
    for (int k = 0; k < CHANNELS; k++)
        if (msr_rpc_channel_create_own(rtarget, token, &b->via[k]) != MSR_OK)
            return -1;
    return 0;
}

static void bench_close(bench_t *b)
{
    for (int k = 0; k < CHANNELS; k++)
        msr_rpc_channel_destroy(b->via[k]);
    msr_relay_server_destroy(b->relay);
    msr_rpc_channel_destroy(b->up);
    msr_rpc_channel_destroy(b->status);
    msr_rpc_loop_destroy(b->loop);
    if (b->coord > 0) {
        kill(b->coord, SIGTERM);
        waitpid(b->coord, NULL, 0);
    }
}

/* The rounds of one mode: one line. */
static int mode_run(bench_t *b, op_t *ops, int nodes, int rounds, int merged)
{
    for (int i = 0; i < 2; i++) /* warm the connections up */
        if (round_run(b, ops, nodes, merged, -1 - i) != 0)
            return -1;
    long long calls0 = coord_calls(b);
    double cpu0 = bench_cpu_ms(b->coord);
    uint64_t t0 = msr_now_ns();
    for (int i = 0; i < rounds; i++)
        if (round_run(b, ops, nodes, merged, i) != 0)
            return -1;
    double wall = (double)(msr_now_ns() - t0) / 1e6 / rounds;
    double cpu = (bench_cpu_ms(b->coord) - cpu0) / rounds;
    long long calls = coord_calls(b) - calls0;
    printf("nodes=%-6d mode=%-8s coord_%s_calls_per_round=%-7.1f coord_cpu_ms_per_round=%-8.2f "
           "coord_cpu_us_per_node=%-7.1f wall_ms_per_round=%.1f\n",
           nodes, merged ? "merged" : "separate", b->add ? "add" : "barrier",
           (double)(calls < 0 ? 0 : calls) / rounds, cpu, cpu * 1000.0 / nodes, wall);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    const char *list = "256,1024";
    int rounds = 5, add = 0;
    char msrun[4096] = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc)
            list = argv[++i];
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--op") == 0 && i + 1 < argc &&
                 (strcmp(argv[i + 1], "add") == 0 || strcmp(argv[i + 1], "barrier") == 0))
            add = strcmp(argv[++i], "add") == 0;
        else if (strcmp(argv[i], "--msrun") == 0 && i + 1 < argc)
            snprintf(msrun, sizeof msrun, "%s", argv[++i]);
        else {
            fprintf(stderr, "usage: relay_barrier [--nodes N,M] [--rounds R] [--op barrier|add] "
                            "[--msrun PATH]\n");
            return 2;
        }
    }
    if (rounds < 1) {
        fprintf(stderr, "relay_barrier: --rounds must be at least 1\n");
        return 2;
    }
    if (msrun[0] == '\0' && bench_msrun_beside(msrun, sizeof msrun) != 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    for (const char *p = list; *p;) {
        int nodes = atoi(p);
        if (nodes < 2 || nodes > 65536) {
            fprintf(stderr, "relay_barrier: --nodes takes 2 to 65536 each\n");
            return 2;
        }
        op_t *ops = calloc((size_t)nodes, sizeof *ops);
        bench_t b;
        int rc = ops == NULL || bench_open(&b, msrun, nodes) != 0;
        b.add = add;
        for (int merged = 0; rc == 0 && merged < 2; merged++)
            rc = mode_run(&b, ops, nodes, rounds, merged) != 0;
        bench_close(&b);
        free(ops);
        if (rc != 0)
            return 1;
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
    }
    return 0;
}
