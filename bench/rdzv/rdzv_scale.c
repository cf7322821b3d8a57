/* Rendezvous at scale: N simulated nodes of R ranks against a real
 * coordinator process. Every node joins (each over a TCP connection of its
 * own, as separate hosts would), then the ranks exchange their communication
 * addresses of B bytes as a UCX engine does at startup (comm/ucx/engine.c),
 * sending what a node's msrun proxy sends upstream for its ranks:
 *
 *   --mode lazy (default): each node publishes its R addresses in one
 *     Publish, fetches its own node's in one Fetch, adds its rank count to
 *     its machine's counter, meets the others at a Barrier (one call per
 *     node, weight R), reads the counter, then fetches in one Fetch the
 *     addresses its ranks' communicators need off the node: a ring's
 *     neighbours (the last rank of the node before, the first of the node
 *     after) and a hierarchical communicator's (the leaders of both
 *     neighbouring nodes): 3 entries, however large the job.
 *   --mode allgather: every rank contributes to one allgather and every
 *     node receives all N*R contributions (the exchange before fetching on
 *     first use). With --direct every rank is a client of its own instead
 *     (no proxy).
 *
 *   --relay F: the nodes join through relays of F nodes each (one level,
 *     docs/architecture.md "Relays"): each relay, simulated here over a
 *     connection of its own, sends its nodes' joins as one Relay call,
 *     then their ready heartbeats as one (held until the job forms), as
 *     a relay agent does; every node must get a rank of its own. The
 *     coordinator's code paths are the real ones. No exchange follows (a
 *     relay carries membership calls, not the store's).
 *
 *   rdzv_scale [--nodes 16,128,1024] [--ranks 8] [--bytes 64]
 *              [--mode lazy|allgather] [--direct] [--window 1024]
 *              [--conns N] [--dashboard] [--relay F]
 *              [--model_relay F NODES,...] [--rtt_us 100]
 *
 * --model_relay F NODES,...: after the runs of --nodes (direct), runs
 * NODES through relays of F, fits the coordinator's costs to both and
 * prints the time of a join from 1K to 1M ranks on separate machines,
 * measured here where it ran and modelled (print_model; --rtt_us: the
 * network's round trip, an assumption).
 *
 * --window: at most this many connections are being made at once (0: all
 * at once). A burst of more SYNs than the coordinator's listen backlog
 * (net.core.somaxconn caps it) loses some, and each costs the client a
 * one-second retransmission; nodes of a real launch do not connect within
 * the same millisecond. --conns: at most this many connections (default:
 * what the descriptor limit lets the coordinator take); past it simulated
 * nodes share connections, so the coordinator's per-connection cost is
 * then counted for fewer nodes than it serves.
 *
 * One line per N: connect, join and exchange times, the coordinator's CPU
 * time (user + system, from /proc) over the whole run and per node, its
 * peak memory and the time per rank. The descriptor limit is raised (hard
 * limit too, where allowed) to what the coordinator needs: two descriptors
 * per connection. With --dashboard the coordinator also serves its
 * dashboard (docs/observe.md), and after the allgather every node sends
 * rounds of Progress calls (each of its ranks a window of 20 step times and
 * a loss, as a node's proxy does once a second) while /api/job and
 * /metrics are fetched with the token: a second line gives their sizes and
 * the median time of a request (each rendered afresh), idle and with a
 * round of every node's Progress calls in flight. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_coord.h"
#include "base/time.h"
#include "rendezvous/relay.h"
#include "rendezvous/rpc.h"

typedef struct sim {
    int nodes, ranks, bytes, direct, clients, dashboard, lazy;
    int relay;      /* nodes per relay (its subtree); 0: every node calls itself */
    int *node_rank; /* relay mode: each node's rank in the formed job */
    int nch;        /* connections: clients share them round robin past the limit */
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t **ch;
    char (*ids)[32];
    int pending, failed;
    msr_rpc_method_t entry_method; /* of the relayed calls in flight */
    size_t want_bytes;
    char err[300];
} sim_t;

typedef struct op {
    msr_rpc_async_t a;
    sim_t *sim;
    int client, node;
} op_t;

/* A simulated node, as a relayed call's argument. */
typedef struct node_arg {
    sim_t *sim;
    int node;
} node_arg_t;

static const char *token = "rdzv-scale-token";

/* What a run measured, for --model. */
typedef struct measured {
    int nodes, relay;
    double connect_us, join_us; /* the coordinator's CPU per node in each phase */
    double join_ms, total_ms;   /* wall time of connect + join */
} measured_t;

#define MEASURED_MAX 32
static measured_t runs[MEASURED_MAX];
static int nruns;

static pid_t start_coordinator(const char *msrun, int world, int local, int dash_port, int *port_p)
{
    char wn[16], lwn[16], dp[16];
    snprintf(wn, sizeof wn, "%d", world);
    snprintf(lwn, sizeof lwn, "%d", local);
    snprintf(dp, sizeof dp, "%d", dash_port);
    const char *args[] = {"--job_id",
                          "scale",
                          "--worker_num",
                          wn,
                          "--local_worker_num",
                          lwn,
                          "--max_restarts",
                          "0",
                          "--node_timeout",
                          "60",
                          "--log_level",
                          "error",
                          dash_port > 0 ? "--dashboard_port" : NULL,
                          dp,
                          NULL};
    return bench_coord_start("rdzv_scale", msrun, token, args, port_p);
}

static void sim_fail(sim_t *s, const char *what, int node, const char *why)
{
    if (!s->failed)
        snprintf(s->err, sizeof s->err, "%s of node %d: %s", what, node, why);
    s->failed = 1;
}

static void op_done(msr_rpc_async_t *a)
{
    op_t *o = (op_t *)a;
    sim_t *s = o->sim;
    s->pending--;
    if (a->status != MSR_OK) {
        if (!s->failed)
            snprintf(s->err, sizeof s->err, "%s of client %d: %s", msr_rpc_methods[a->method].name,
                     o->client, a->err);
        s->failed = 1;
    } else if (a->method == MSR_RPC_JOIN) {
        snprintf(s->ids[o->node], sizeof s->ids[0], "%s", ((Msr__JoinResponse *)a->resp)->node_id);
    } else if (a->method == MSR_RPC_HEARTBEAT) {
        const Msr__HeartbeatResponse *r = (const Msr__HeartbeatResponse *)a->resp;
        if (r->state != MSR__JOB_STATE__JOB_RUNNING || r->assignment == NULL) {
            if (!s->failed)
                snprintf(s->err, sizeof s->err, "node %d: not running after the heartbeat",
                         o->client);
            s->failed = 1;
        }
    } else if (a->method == MSR_RPC_FETCH) {
        /* each entry is an address published as (index, payload) */
        const Msr__FetchResponse *r = (const Msr__FetchResponse *)a->resp;
        int bad = r == NULL || r->data.len != r->n_lengths * (size_t)s->bytes;
        for (size_t i = 0; !bad && i < r->n_lengths; i++)
            bad = r->lengths[i] != (uint32_t)s->bytes;
        if (bad) {
            if (!s->failed)
                snprintf(s->err, sizeof s->err, "client %d: wrong fetch result", o->client);
            s->failed = 1;
        }
    } else if (a->method == MSR_RPC_ALLGATHER) {
        /* Answers arrive as bytes, as a node's proxy receives them to pass
         * on; every answer must be complete, and every 64th is unpacked and
         * checked entry by entry. */
        int bad = msr_rpc_async_raw_len(a) < s->want_bytes;
        if (!bad && o->client % 64 == 0) {
            Msr__AllgatherResponse *r = (Msr__AllgatherResponse *)msr_rpc_async_raw_unpack(a);
            bad = r == NULL || r->data.len != s->want_bytes ||
                  r->n_lengths != (size_t)s->nodes * s->ranks;
            for (size_t i = 0; !bad && i < r->n_lengths; i++) {
                uint32_t idx;
                memcpy(&idx, r->data.data + i * (size_t)s->bytes, sizeof idx);
                bad = idx != i || r->lengths[i] != (uint32_t)s->bytes;
            }
            if (r)
                msr_rpc_message_free(&r->base);
        }
        if (bad) {
            if (!s->failed)
                snprintf(s->err, sizeof s->err, "client %d: wrong allgather result", o->client);
            s->failed = 1;
        }
    }
    msr_rpc_async_cleanup(a);
    free(o);
}

/* Starts a call of client (a channel); node is the simulated node it is for. */
static int start_op(sim_t *s, int client, int node, msr_rpc_method_t m, const ProtobufCMessage *req)
{
    op_t *o = calloc(1, sizeof *o);
    if (o == NULL)
        return -1;
    o->sim = s;
    o->client = client;
    o->node = node;
    o->a.method = m;
    o->a.deadline = msr_deadline_in_ms(120000);
    o->a.wait_for_ready = 1;
    o->a.done = op_done;
    o->a.raw = m == MSR_RPC_ALLGATHER;
    if (msr_rpc_call_start(s->ch[client % s->nch], s->loop, &o->a, req) != MSR_OK) {
        free(o);
        return -1;
    }
    s->pending++;
    return 0;
}

static int drain(sim_t *s);

static const ProtobufCMessage *make_join(sim_t *s, int n, void *space)
{
    Msr__JoinRequest *j = space;
    msr__join_request__init(j);
    j->protocol_version = MSR_PROTOCOL_VERSION;
    j->job_id = "scale";
    j->host = ""; /* set by the caller */
    j->pid = 1000 + n;
    j->local_worker_num = s->ranks;
    j->worker_num = s->nodes * s->ranks;
    j->node_rank = -1;
    j->free_port = 29500;
    return &j->base;
}

static const ProtobufCMessage *make_heartbeat(sim_t *s, int n, void *space)
{
    Msr__HeartbeatRequest *h = space;
    msr__heartbeat_request__init(h);
    h->node_id = s->ids[n];
    h->generation = 0;
    h->known_state = MSR__JOB_STATE__JOB_WAITING;
    h->ready_generation = 0;
    h->wait_ms = 60000;
    return &h->base;
}

/* A node's relayed call answered (rendezvous/relay.h). */
static void node_answered(void *arg, int code, const char *message, const uint8_t *resp, size_t len)
{
    node_arg_t *na = arg;
    sim_t *s = na->sim;
    int node = na->node;
    s->pending--;
    if (code != 0) {
        sim_fail(s, "a relayed call", node, message);
        return;
    }
    if (s->entry_method == MSR_RPC_JOIN) {
        Msr__JoinResponse *j =
            (Msr__JoinResponse *)msr_rpc_response_unpack(MSR_RPC_JOIN, resp, len);
        if (j == NULL) {
            sim_fail(s, "a relayed join", node, "the answer does not unpack");
            return;
        }
        snprintf(s->ids[node], sizeof s->ids[0], "%s", j->node_id);
        msr_rpc_message_free(&j->base);
        return;
    }
    Msr__HeartbeatResponse *h =
        (Msr__HeartbeatResponse *)msr_rpc_response_unpack(MSR_RPC_HEARTBEAT, resp, len);
    int ok = h != NULL && h->state == MSR__JOB_STATE__JOB_RUNNING && h->assignment != NULL;
    if (ok)
        s->node_rank[node] = h->assignment->node_rank;
    msr_rpc_message_free(h ? &h->base : NULL);
    if (!ok)
        sim_fail(s, "a relayed heartbeat", node, "not running after it");
}

/* One round through the relays: every node's call of method m (made by
 * make) queued at its relay, every relay's queue sent as one batch, and
 * every answer awaited. */
static int relay_round(sim_t *s, msr_relay_t **relays, node_arg_t *args, msr_rpc_method_t m,
                       const ProtobufCMessage *(*make)(sim_t *s, int node, void *space))
{
    int nrel = (s->nodes + s->relay - 1) / s->relay;
    s->entry_method = m;
    for (int n = 0; n < s->nodes; n++) {
        union {
            Msr__JoinRequest j;
            Msr__HeartbeatRequest h;
        } space;
        char host[32];
        const ProtobufCMessage *req = make(s, n, &space);
        if (m == MSR_RPC_JOIN) {
            snprintf(host, sizeof host, "10.%d.%d.%d", n >> 16, (n >> 8) & 255, n & 255);
            space.j.host = host;
        }
        if (msr_relay_submit(relays[n / s->relay], m, req, node_answered, &args[n]) != MSR_OK)
            return -1;
        s->pending++;
    }
    for (int r = 0; r < nrel; r++)
        msr_relay_flush(relays[r]);
    return drain(s);
}

/* Relay mode: every relay sends its nodes' joins as one batch, then their
 * ready heartbeats as one batch (held until the job forms), through the
 * relay code of rendezvous/relay.h; every node must then have a distinct
 * rank of 0 .. nodes - 1. */
static int relay_join(sim_t *s)
{
    int nrel = (s->nodes + s->relay - 1) / s->relay, rc = 0;
    msr_relay_t **relays = calloc((size_t)nrel, sizeof *relays);
    node_arg_t *args = calloc((size_t)s->nodes, sizeof *args);
    if (relays == NULL || args == NULL)
        rc = -1;
    for (int n = 0; rc == 0 && n < s->nodes; n++)
        args[n] = (node_arg_t){s, n};
    for (int r = 0; rc == 0 && r < nrel; r++) {
        char rid[32];
        snprintf(rid, sizeof rid, "relay-%d", r);
        if (msr_relay_create(s->loop, s->ch[r], rid, (uint32_t)s->relay, &relays[r]) != MSR_OK)
            rc = -1;
    }
    if (rc == 0)
        rc = relay_round(s, relays, args, MSR_RPC_JOIN, make_join);
    if (rc == 0)
        rc = relay_round(s, relays, args, MSR_RPC_HEARTBEAT, make_heartbeat);
    for (int r = 0; relays && r < nrel; r++)
        msr_relay_destroy(relays[r]);
    drain(s); /* what a failure left in flight comes back cancelled */
    free(relays);
    free(args);
    if (rc != 0)
        return -1;
    char *seen = calloc((size_t)s->nodes, 1);
    int bad = seen == NULL;
    for (int n = 0; !bad && n < s->nodes; n++) {
        int k = s->node_rank[n];
        bad = k < 0 || k >= s->nodes || seen[k];
        if (!bad)
            seen[k] = 1;
    }
    free(seen);
    if (bad)
        sim_fail(s, "the ranks", 0, "not every node has a rank of its own");
    return bad ? -1 : 0;
}

/* A TCP port free on loopback now (for the dashboard). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* GET path from the dashboard with the token; *bytes_p gets the body's
 * size. Returns the milliseconds it took, or -1 (not 200, or a failure). */
static double http_get(int port, const char *path, size_t *bytes_p)
{
    uint64_t t0 = msr_now_ns();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[256];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                     "Connection: close\r\n\r\n",
                     path, token);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    size_t total = 0, head = 0;
    char buf[65536], first[16] = "";
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 30000) <= 0)
            break;
        ssize_t k = read(fd, buf, sizeof buf);
        if (k <= 0)
            break;
        if (total == 0)
            memcpy(first, buf, k < 15 ? (size_t)k : 15);
        if (head == 0) {
            char *e = memmem(buf, (size_t)k, "\r\n\r\n", 4);
            if (e != NULL)
                head = total + (size_t)(e - buf) + 4;
        }
        total += (size_t)k;
    }
    close(fd);
    *bytes_p = total > head ? total - head : 0;
    if (strncmp(first, "HTTP/1.1 200", 12) != 0)
        return -1;
    return (double)(msr_now_ns() - t0) / 1e6;
}

/* One Progress call per node: each of its ranks a window of step times
 * ending at step, and a loss. */
static int progress_round(sim_t *s, int64_t step)
{
    enum { W = 20 };
    static double times[W];
    for (int k = 0; k < W; k++)
        times[k] = 0.1;
    int R = s->ranks;
    Msr__StepReport *reps = calloc((size_t)R, sizeof *reps);
    Msr__StepReport **repp = calloc((size_t)R, sizeof *repp);
    Msr__Scalar *loss = calloc((size_t)R, sizeof *loss);
    Msr__Scalar **lossp = calloc((size_t)R, sizeof *lossp);
    int rc = reps && repp && loss && lossp ? 0 : -1;
    for (int n = 0; rc == 0 && n < s->nodes; n++) {
        for (int i = 0; i < R; i++) {
            msr__step_report__init(&reps[i]);
            msr__scalar__init(&loss[i]);
            loss[i].name = "loss";
            loss[i].value = 10.0 / (double)(step + 1);
            lossp[i] = &loss[i];
            reps[i].rank = n * R + i;
            reps[i].step = step;
            reps[i].step_time = 0.1;
            reps[i].steps = W;
            reps[i].n_step_times = W;
            reps[i].step_times = times;
            reps[i].n_scalars = 1;
            reps[i].scalars = &lossp[i];
            repp[i] = &reps[i];
        }
        Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
        req.node_id = s->ids[n];
        req.generation = 0;
        req.n_steps = (size_t)R;
        req.steps = repp;
        /* the request is packed when the call starts: the arrays are reused */
        rc = start_op(s, s->direct ? n * R : n, n, MSR_RPC_PROGRESS, &req.base);
    }
    free(reps);
    free(repp);
    free(loss);
    free(lossp);
    return rc;
}

static int cmp_ms(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The dashboard under the job: a few Progress rounds, then /api/job and
 * /metrics fetched 5 times each idle, and 5 times each while a round is
 * in flight; prints their sizes and median times. */
static int dashboard_phase(sim_t *s, int port)
{
    int64_t step = 19;
    for (int r = 0; r < 3; r++, step += 20)
        if (progress_round(s, step) != 0 || drain(s) != 0)
            return -1;
    const char *paths[2] = {"/api/job", "/metrics"};
    double idle[2][5], busy[2][5];
    size_t bytes[2] = {0, 0};
    for (int p = 0; p < 2; p++) {
        /* a quarter of a second apart: each request waits for a snapshot the
         * coordinator renders for it (one younger than 200 ms is reused) */
        for (int k = 0; k < 5; k++) {
            usleep(250000);
            if ((idle[p][k] = http_get(port, paths[p], &bytes[p])) < 0)
                return -1;
        }
        for (int k = 0; k < 5; k++, step += 20) {
            usleep(250000);
            if (progress_round(s, step) != 0)
                return -1;
            /* the calls are sent as the loop polls: start them, then ask */
            msr_rpc_loop_poll(s->loop, msr_deadline_in_ms(0));
            if ((busy[p][k] = http_get(port, paths[p], &bytes[p])) < 0 || drain(s) != 0)
                return -1;
        }
        qsort(idle[p], 5, sizeof(double), cmp_ms);
        qsort(busy[p], 5, sizeof(double), cmp_ms);
    }
    printf("nodes=%-5d ranks=%-6d dashboard: api_job_KiB=%-8.1f api_job_ms=%-7.1f "
           "api_job_busy_ms=%-7.1f metrics_KiB=%-8.1f metrics_ms=%-7.1f metrics_busy_ms=%.1f\n",
           s->nodes, s->nodes * s->ranks, (double)bytes[0] / 1024, idle[0][2], busy[0][2],
           (double)bytes[1] / 1024, idle[1][2], busy[1][2]);
    fflush(stdout);
    return 0;
}

static int drain(sim_t *s)
{
    while (s->pending > 0)
        if (msr_rpc_loop_poll(s->loop, msr_deadline_in_ms(1000)) < 0)
            return -1;
    return s->failed ? -1 : 0;
}

static uint64_t coordinator_peak_kb(msr_rpc_channel_t *ch)
{
    Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    if (msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, msr_deadline_in_ms(30000), 1, &resp) != MSR_OK)
        return 0;
    uint64_t kb = ((Msr__StatusResponse *)resp)->peak_rss_kb;
    msr_rpc_message_free(resp);
    return kb;
}

/* The CPU time (user + system) process pid has used, in milliseconds; -1
 * if unknown. */
static double cpu_ms(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command may hold spaces */
    unsigned long long ut = 0, st = 0;
    if (p == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

/* Sends, for node n, a Fetch of the entries indices[0..k) (distinct, in the
 * job) of the addresses. */
static int fetch_op(sim_t *s, int n, const uint32_t *indices, size_t k)
{
    Msr__FetchRequest f = MSR__FETCH_REQUEST__INIT;
    f.generation = 0;
    f.name = "scale";
    f.indices = (uint32_t *)indices;
    f.n_indices = k;
    f.wait_ms = 60000;
    return start_op(s, n, n, MSR_RPC_FETCH, &f.base);
}

/* The exchange of addresses fetched on first use (see the header): what
 * each node's proxy sends upstream, each step for every node at once. */
static int lazy_exchange(sim_t *s, Msr__Contribution **eptr)
{
    int R = s->ranks, N = s->nodes;
    uint32_t world = (uint32_t)N * (uint32_t)R;
    for (int n = 0; n < N; n++) {
        Msr__PublishRequest p = MSR__PUBLISH_REQUEST__INIT;
        p.generation = 0;
        p.name = "scale";
        p.n_entries = (size_t)R;
        p.entries = eptr + (size_t)n * R;
        if (start_op(s, n, n, MSR_RPC_PUBLISH, &p.base) != 0)
            return -1;
    }
    if (drain(s) != 0)
        return -1;
    /* this node's addresses, and its machine's count of ranks */
    uint32_t *own = calloc((size_t)R, sizeof *own);
    if (own == NULL)
        return -1;
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < R; i++)
            own[i] = (uint32_t)(n * R + i);
        if (R > 1 && fetch_op(s, n, own, (size_t)R) != 0) {
            free(own);
            return -1;
        }
        char key[64];
        snprintf(key, sizeof key, "scale-hosts/%d", n);
        Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
        a.generation = 0;
        a.key = key;
        a.delta = R;
        if (start_op(s, n, n, MSR_RPC_ADD, &a.base) != 0) {
            free(own);
            return -1;
        }
    }
    free(own);
    if (drain(s) != 0)
        return -1;
    for (int n = 0; n < N; n++) {
        Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
        b.generation = 0;
        b.name = "scale-ready";
        b.count = world;
        b.weight = (uint32_t)R;
        b.wait_ms = 60000;
        if (start_op(s, n, n, MSR_RPC_BARRIER, &b.base) != 0)
            return -1;
    }
    if (drain(s) != 0)
        return -1;
    for (int n = 0; n < N && N > 1; n++) {
        char key[64];
        snprintf(key, sizeof key, "scale-hosts/%d", n);
        Msr__GetRequest g = MSR__GET_REQUEST__INIT;
        g.generation = 0;
        g.key = key;
        if (start_op(s, n, n, MSR_RPC_GET, &g.base) != 0)
            return -1;
        /* the ring's and the leaders' neighbours off this node */
        uint32_t prev = (uint32_t)((n + N - 1) % N), next = (uint32_t)((n + 1) % N);
        uint32_t want[3] = {prev * R + (uint32_t)R - 1, next * R, prev * R};
        size_t k = want[2] == want[0] ? 2 : 3;
        if (fetch_op(s, n, want, k) != 0)
            return -1;
    }
    return drain(s);
}

/* The allgather of every address (see the header). */
static int exchange_all(sim_t *s, Msr__Contribution **eptr)
{
    int direct = s->direct, ranks = s->ranks, world = s->nodes * s->ranks;
    for (int c = 0; c < s->clients; c++) {
        Msr__AllgatherRequest g = MSR__ALLGATHER_REQUEST__INIT;
        g.generation = 0;
        g.name = "scale";
        g.count = (uint32_t)world;
        g.wait_ms = 60000;
        g.n_entries = direct ? 1 : (size_t)ranks;
        g.entries = eptr + (direct ? c : c * ranks);
        if (start_op(s, c, direct ? c / ranks : c, MSR_RPC_ALLGATHER, &g.base) != 0)
            return -1;
    }
    return drain(s);
}

static int run_one(const char *msrun, int nodes, int ranks, int bytes, int direct, int dashboard,
                   int lazy, int max_conns, int window, int relay)
{
    sim_t s;
    memset(&s, 0, sizeof s);
    s.nodes = nodes;
    s.ranks = ranks;
    s.bytes = bytes;
    s.direct = direct;
    s.dashboard = dashboard;
    s.lazy = lazy;
    s.relay = relay;
    s.entry_method = MSR_RPC_METHOD_COUNT;
    s.clients = relay ? (nodes + relay - 1) / relay : direct ? nodes * ranks : nodes;
    s.nch = s.clients < max_conns ? s.clients : max_conns;
    s.want_bytes = (size_t)nodes * ranks * bytes;
    int world = nodes * ranks, port = 0, rc = 1, dash = dashboard ? free_port() : 0;
    pid_t coord = start_coordinator(msrun, world, ranks, dash, &port);
    if (coord < 0)
        return 1;
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    s.ch = calloc((size_t)s.nch, sizeof *s.ch);
    s.ids = calloc((size_t)nodes, sizeof *s.ids);
    s.node_rank = calloc((size_t)nodes, sizeof *s.node_rank);
    msr_rpc_loop_create(&s.loop);
    for (int i = 0; i < s.nch; i++)
        if (msr_rpc_channel_create_own(target, token, &s.ch[i]) != MSR_OK) {
            fprintf(stderr, "rdzv_scale: cannot create channel %d\n", i);
            goto out;
        }

    /* connect: every client opens its connection (a Status call each) */
    double cpu_start = cpu_ms(coord);
    uint64_t tc = msr_now_ns();
    for (int c = 0; c < s.nch; c++) {
        /* at most window connections being made at once (0: all) */
        while (window > 0 && s.pending >= window && !s.failed)
            if (msr_rpc_loop_poll(s.loop, msr_deadline_in_ms(1000)) < 0)
                goto fail;
        Msr__StatusRequest st = MSR__STATUS_REQUEST__INIT;
        if (start_op(&s, c, direct ? c / ranks : c, MSR_RPC_STATUS, &st.base) != 0)
            goto out;
    }
    if (drain(&s) != 0)
        goto fail;

    /* join: every node registers (over the channel of its first rank with
     * --direct), then reports ready; the last one forms the job and every
     * held heartbeat hears it */
    uint64_t t0 = msr_now_ns();
    double cpu_t0 = cpu_ms(coord);
    char host[32];
    if (relay && relay_join(&s) != 0)
        goto fail;
    for (int n = 0; n < nodes && !relay; n++) {
        Msr__JoinRequest j = MSR__JOIN_REQUEST__INIT;
        j.protocol_version = MSR_PROTOCOL_VERSION;
        j.job_id = "scale";
        snprintf(host, sizeof host, "10.%d.%d.%d", n >> 16, (n >> 8) & 255, n & 255);
        j.host = host;
        j.pid = 1000 + n;
        j.local_worker_num = ranks;
        j.worker_num = world;
        j.node_rank = -1;
        j.free_port = 29500;
        if (start_op(&s, direct ? n * ranks : n, n, MSR_RPC_JOIN, &j.base) != 0)
            goto out;
    }
    if (drain(&s) != 0)
        goto fail;
    for (int n = 0; n < nodes && !relay; n++) {
        Msr__HeartbeatRequest h = MSR__HEARTBEAT_REQUEST__INIT;
        h.node_id = s.ids[n];
        h.generation = 0;
        h.known_state = MSR__JOB_STATE__JOB_WAITING;
        h.ready_generation = 0;
        h.wait_ms = 60000;
        if (start_op(&s, direct ? n * ranks : n, n, MSR_RPC_HEARTBEAT, &h.base) != 0)
            goto out;
    }
    if (drain(&s) != 0)
        goto fail;
    uint64_t t1 = msr_now_ns();
    double cpu_t1 = cpu_ms(coord);

    /* allgather: every rank contributes `bytes`, starting with its index */
    uint8_t *payload = calloc((size_t)world, (size_t)bytes);
    Msr__Contribution *entries = calloc((size_t)world, sizeof *entries);
    Msr__Contribution **eptr = calloc((size_t)world, sizeof *eptr);
    for (int r = 0; r < world; r++) {
        uint32_t idx = (uint32_t)r;
        memcpy(payload + (size_t)r * bytes, &idx, sizeof idx);
        msr__contribution__init(&entries[r]);
        entries[r].index = idx;
        entries[r].data.data = payload + (size_t)r * bytes;
        entries[r].data.len = (size_t)bytes;
        eptr[r] = &entries[r];
    }
    /* relay mode measures the rendezvous (join and formation) alone: a
     * relay carries membership calls, not the store's */
    int ok = relay ? 1 : lazy ? lazy_exchange(&s, eptr) == 0 : exchange_all(&s, eptr) == 0;
    uint64_t t2 = msr_now_ns();
    double cpu_end = cpu_ms(coord);
    free(payload);
    free(entries);
    free(eptr);
    if (!ok)
        goto fail;
    uint64_t peak = coordinator_peak_kb(s.ch[0]);
    double conn_ms = (double)(t0 - tc) / 1e6, join_ms = (double)(t1 - t0) / 1e6,
           ag_ms = (double)(t2 - t1) / 1e6, total = conn_ms + join_ms + ag_ms;
    double cpu = cpu_end - cpu_start, cpu_conn = cpu_t0 - cpu_start, cpu_join = cpu_t1 - cpu_t0,
           cpu_ex = cpu_end - cpu_t1;
    printf("nodes=%-5d ranks=%-6d conns=%-5d mode=%-9s connect_ms=%-7.1f join_ms=%-7.1f "
           "exchange_ms=%-8.1f "
           "total_ms=%-8.1f coord_cpu_ms=%-7.0f coord_cpu_us_per_node=%-6.0f "
           "(connect %.0f join %.0f exchange %.0f) "
           "coord_peak_rss_MiB=%-6.1f per_rank_us=%.1f\n",
           nodes, world, s.nch,
           relay    ? "relay"
           : lazy   ? "lazy"
           : direct ? "ag-direct"
                    : "allgather",
           conn_ms, join_ms, ag_ms, total, cpu, cpu * 1000.0 / nodes, cpu_conn * 1000.0 / nodes,
           cpu_join * 1000.0 / nodes, cpu_ex * 1000.0 / nodes, (double)peak / 1024.0,
           total * 1000.0 / world);
    fflush(stdout);
    if (nruns < MEASURED_MAX)
        runs[nruns++] = (measured_t){nodes,
                                     relay,
                                     cpu_conn * 1000.0 / nodes,
                                     cpu_join * 1000.0 / nodes,
                                     join_ms,
                                     conn_ms + join_ms};
    if (dashboard && dashboard_phase(&s, dash) != 0) {
        if (!s.failed)
            snprintf(s.err, sizeof s.err, "the dashboard did not answer");
        goto fail;
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "rdzv_scale: nodes=%d: %s\n", nodes, s.err);
out:
    for (int i = 0; i < s.nch && s.ch; i++)
        msr_rpc_channel_destroy(s.ch[i]);
    while (s.pending > 0 && msr_rpc_loop_poll(s.loop, msr_deadline_in_ms(1000)) >= 0) {
    }
    msr_rpc_loop_destroy(s.loop);
    free(s.ch);
    free(s.ids);
    free(s.node_rank);
    kill(coord, SIGTERM);
    waitpid(coord, NULL, 0);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median over the runs with (relay != 0) == relayed of what get reads. */
static double median_of(int relayed, double (*get)(const measured_t *m))
{
    double v[MEASURED_MAX];
    int n = 0;
    for (int i = 0; i < nruns; i++)
        if ((runs[i].relay != 0) == relayed)
            v[n++] = get(&runs[i]);
    if (n == 0)
        return -1;
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double get_connect(const measured_t *m)
{
    return m->connect_us;
}

static double get_join(const measured_t *m)
{
    return m->join_us;
}

/* The wall time (connect + join) measured here for nodes through relays of
 * fan-in relay (0: direct); -1 when not run. */
static double measured_ms(int nodes, int relay)
{
    for (int i = 0; i < nruns; i++)
        if (runs[i].nodes == nodes && runs[i].relay == relay)
            return runs[i].total_ms;
    return -1;
}

/* The critical path of a join on separate machines (docs/performance.md,
 * "Rendezvous at scale"), fitted to this invocation's runs. Per node the
 * coordinator spends c_conn on a connection (and its first call) and
 * c_call on each further call when nodes call it directly; through relays
 * it spends c_call per batch and c_entry per entry. A relay is a server
 * like the coordinator: its F nodes cost it F * c_conn to connect and
 * F * c_call per round. Two rounds (the joins, the ready heartbeats), each
 * crossing two hops of rtt_us; the relays work in parallel, the
 * coordinator alone. */
static void print_model(int ranks, int relay, double rtt_us)
{
    double c_conn = median_of(0, get_connect), c_call = median_of(0, get_join) / 2,
           relay_join = median_of(1, get_join);
    if (c_conn < 0 || relay_join < 0 || relay == 0) {
        printf("model: needs a direct run and a --relay run in one invocation (--model_relay F)\n");
        return;
    }
    int fit_relay = 0;
    for (int i = 0; i < nruns; i++)
        if (runs[i].relay)
            fit_relay = runs[i].relay;
    double c_entry = relay_join / 2 - c_call / fit_relay;
    if (c_entry < 0.5)
        c_entry = 0.5;
    printf("model: c_conn=%.0f us c_call=%.0f us c_entry=%.1f us (coordinator CPU, fitted here); "
           "rtt=%.0f us (assumed); relays of %d nodes, one level\n",
           c_conn, c_call, c_entry, rtt_us, relay);
    printf("%-9s %-8s %-8s | %-13s %-13s | %-14s %-14s\n", "ranks", "nodes", "relays",
           "here_direct_s", "here_relay_s", "model_direct_s", "model_relay_s");
    static const int world[] = {1024, 8192, 32768, 100000, 1000000};
    for (size_t i = 0; i < sizeof world / sizeof world[0]; i++) {
        int nodes = world[i] / ranks, F = nodes < relay ? nodes : relay;
        int nrel = (nodes + F - 1) / F;
        double direct = nodes * (c_conn + 2 * c_call) / 1e6;
        double round = (F * c_call + nrel * c_call + nodes * c_entry + 2 * rtt_us) / 1e6;
        double viarelay = (F * c_conn + nrel * c_conn) / 1e6 + 2 * round;
        double hd = measured_ms(nodes, 0), hr = measured_ms(nodes, relay);
        char hds[16] = "-", hrs[16] = "-";
        if (hd >= 0)
            snprintf(hds, sizeof hds, "%.2f", hd / 1000);
        if (hr >= 0)
            snprintf(hrs, sizeof hrs, "%.2f", hr / 1000);
        printf("%-9d %-8d %-8d | %-13s %-13s | %-14.2f %-14.2f\n", world[i], nodes, nrel, hds, hrs,
               direct, viarelay);
    }
}

int main(int argc, char **argv)
{
    const char *list = "16,128,1024";
    int ranks = 8, bytes = 64, direct = 0, dashboard = 0, lazy = 1, window = 1024, conns = 0;
    int relay = 0, model_relay = 0;
    const char *relay_list = NULL;
    double rtt_us = 100;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc)
            list = argv[++i];
        else if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc)
            ranks = atoi(argv[++i]);
        else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
            bytes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--direct") == 0)
            direct = 1;
        else if (strcmp(argv[i], "--window") == 0 && i + 1 < argc)
            window = atoi(argv[++i]);
        else if (strcmp(argv[i], "--conns") == 0 && i + 1 < argc)
            conns = atoi(argv[++i]);
        else if (strcmp(argv[i], "--relay") == 0 && i + 1 < argc)
            relay = atoi(argv[++i]);
        else if (strcmp(argv[i], "--model_relay") == 0 && i + 2 < argc) {
            model_relay = atoi(argv[++i]);
            relay_list = argv[++i];
        } else if (strcmp(argv[i], "--rtt_us") == 0 && i + 1 < argc)
            rtt_us = atof(argv[++i]);
        else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc &&
                 (strcmp(argv[i + 1], "lazy") == 0 || strcmp(argv[i + 1], "allgather") == 0))
            lazy = strcmp(argv[++i], "lazy") == 0;
        else if (strcmp(argv[i], "--dashboard") == 0)
            dashboard = 1;
        else {
            fprintf(stderr, "usage: rdzv_scale [--nodes 16,128,1024] [--ranks 8] [--bytes 64] "
                            "[--mode lazy|allgather] [--direct] [--window 1024] [--conns N] "
                            "[--dashboard] [--relay F] [--model_relay F NODES,...] "
                            "[--rtt_us 100]\n");
            return 2;
        }
    }
    if (ranks < 1 || bytes < 4) {
        fprintf(stderr, "rdzv_scale: --ranks must be >= 1 and --bytes >= 4\n");
        return 2;
    }
    if (window < 0 || conns < 0) {
        fprintf(stderr, "rdzv_scale: --window and --conns must be >= 0\n");
        return 2;
    }
    if (model_relay < 0 || model_relay > MSR_RELAY_BATCH_MAX || rtt_us < 0 ||
        (model_relay && relay)) {
        fprintf(stderr,
                "rdzv_scale: --model_relay takes 1 to %d nodes a relay and a list of "
                "node counts, and goes without --relay\n",
                MSR_RELAY_BATCH_MAX);
        return 2;
    }
    if (relay < 0 || relay > MSR_RELAY_BATCH_MAX || (relay && (direct || dashboard))) {
        fprintf(stderr,
                "rdzv_scale: --relay takes 1 to %d nodes a relay (0: none), without "
                "--direct or --dashboard\n",
                MSR_RELAY_BATCH_MAX);
        return 2;
    }
    if (direct && lazy) {
        fprintf(stderr, "rdzv_scale: --direct goes with --mode allgather\n");
        return 2;
    }
    /* Many connections: this process holds one descriptor per client and
     * the coordinator (which inherits the limit) two; raise the limit, the
     * hard one too where allowed (root), to what the largest run needs. */
    long most = 0;
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (atol(p) > most)
            most = atol(p);
    rlim_t want = (rlim_t)(2 * (direct ? most * ranks : most) * 2 + 4096);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_max < want) {
            struct rlimit up = {want, want};
            if (setrlimit(RLIMIT_NOFILE, &up) != 0)
                fprintf(stderr,
                        "rdzv_scale: the descriptor limit is %llu, %llu wanted (%s): the "
                        "largest runs may fail\n",
                        (unsigned long long)rl.rlim_max, (unsigned long long)want, strerror(errno));
        }
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    /* The coordinator takes (limit - 128) / 2 connections (two descriptors
     * each); past that, simulated nodes share connections. */
    int fit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 1024
                  ? (int)((rl.rlim_cur - 128) / 2 - 256)
                  : 256;
    if (conns == 0 || conns > fit)
        conns = fit;
    char msrun[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", msrun, sizeof msrun - 16);
    if (n <= 0)
        return 1;
    msrun[n] = '\0';
    char *slash = strrchr(msrun, '/');
    snprintf(slash + 1, sizeof msrun - (size_t)(slash + 1 - msrun), "msrun");
    signal(SIGPIPE, SIG_IGN);
    msr_rpc_library_ref();
    int rc = 0;
    for (const char *p = list; *p;) {
        int nodes = atoi(p);
        if (nodes > 0 &&
            run_one(msrun, nodes, ranks, bytes, direct, dashboard, lazy, conns, window, relay) != 0)
            rc = 1;
        p = strchr(p, ',');
        if (p == NULL)
            break;
        p++;
    }
    /* --model_relay: the same through relays, then the model fitted to both */
    for (const char *p = relay_list; rc == 0 && p && *p;) {
        int nodes = atoi(p);
        if (nodes > 0 &&
            run_one(msrun, nodes, ranks, bytes, 0, 0, 1, conns, window, model_relay) != 0)
            rc = 1;
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    if (rc == 0 && model_relay)
        print_model(ranks, model_relay, rtt_us);
    msr_rpc_library_unref();
    return rc;
}
