/* Rendezvous at scale: N simulated nodes of R ranks against a real
 * coordinator process. Every node joins (each over a TCP connection of its
 * own, as separate hosts would), then every rank contributes B bytes to one
 * allgather and every node receives all N*R contributions, the way a node's
 * msrun proxy does for its ranks. With --direct every rank is a client of its
 * own instead (no proxy), for comparison.
 *
 *   rdzv_scale [--nodes 16,128,1024] [--ranks 8] [--bytes 64] [--direct]
 *              [--dashboard]
 *
 * One line per N: join time, allgather time, the coordinator's peak memory
 * and the time per rank. With --dashboard the coordinator also serves its
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
#include "rendezvous/rpc.h"

typedef struct sim {
    int nodes, ranks, bytes, direct, clients, dashboard;
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t **ch;
    char (*ids)[32];
    int pending, failed;
    size_t want_bytes;
    char err[300];
} sim_t;

typedef struct op {
    msr_rpc_async_t a;
    sim_t *sim;
    int client, node;
} op_t;

static const char *token = "rdzv-scale-token";

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
    if (msr_rpc_call_start(s->ch[client], s->loop, &o->a, req) != MSR_OK) {
        free(o);
        return -1;
    }
    s->pending++;
    return 0;
}

static int drain(sim_t *s);

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

static int run_one(const char *msrun, int nodes, int ranks, int bytes, int direct, int dashboard)
{
    sim_t s;
    memset(&s, 0, sizeof s);
    s.nodes = nodes;
    s.ranks = ranks;
    s.bytes = bytes;
    s.direct = direct;
    s.dashboard = dashboard;
    s.clients = direct ? nodes * ranks : nodes;
    s.want_bytes = (size_t)nodes * ranks * bytes;
    int world = nodes * ranks, port = 0, rc = 1, dash = dashboard ? free_port() : 0;
    pid_t coord = start_coordinator(msrun, world, ranks, dash, &port);
    if (coord < 0)
        return 1;
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    s.ch = calloc((size_t)s.clients, sizeof *s.ch);
    s.ids = calloc((size_t)nodes, sizeof *s.ids);
    msr_rpc_loop_create(&s.loop);
    for (int i = 0; i < s.clients; i++)
        if (msr_rpc_channel_create_own(target, token, &s.ch[i]) != MSR_OK) {
            fprintf(stderr, "rdzv_scale: cannot create channel %d\n", i);
            goto out;
        }

    /* connect: every client opens its connection (a Status call each) */
    uint64_t tc = msr_now_ns();
    for (int c = 0; c < s.clients; c++) {
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
    char host[32];
    for (int n = 0; n < nodes; n++) {
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
    for (int n = 0; n < nodes; n++) {
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
    for (int c = 0; c < s.clients; c++) {
        Msr__AllgatherRequest g = MSR__ALLGATHER_REQUEST__INIT;
        g.generation = 0;
        g.name = "scale";
        g.count = (uint32_t)world;
        g.wait_ms = 60000;
        g.n_entries = direct ? 1 : (size_t)ranks;
        g.entries = eptr + (direct ? c : c * ranks);
        if (start_op(&s, c, direct ? c / ranks : c, MSR_RPC_ALLGATHER, &g.base) != 0)
            goto out;
    }
    int ok = drain(&s) == 0;
    uint64_t t2 = msr_now_ns();
    free(payload);
    free(entries);
    free(eptr);
    if (!ok)
        goto fail;
    uint64_t peak = coordinator_peak_kb(s.ch[0]);
    double conn_ms = (double)(t0 - tc) / 1e6, join_ms = (double)(t1 - t0) / 1e6,
           ag_ms = (double)(t2 - t1) / 1e6, total = conn_ms + join_ms + ag_ms;
    printf("nodes=%-5d ranks=%-6d mode=%-6s connect_ms=%-7.1f join_ms=%-7.1f allgather_ms=%-7.1f "
           "total_ms=%-7.1f coord_peak_rss_MiB=%-6.1f per_rank_us=%.1f\n",
           nodes, world, direct ? "direct" : "proxy", conn_ms, join_ms, ag_ms, total,
           (double)peak / 1024.0, total * 1000.0 / world);
    fflush(stdout);
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
    for (int i = 0; i < s.clients; i++)
        msr_rpc_channel_destroy(s.ch[i]);
    while (s.pending > 0 && msr_rpc_loop_poll(s.loop, msr_deadline_in_ms(1000)) >= 0) {
    }
    msr_rpc_loop_destroy(s.loop);
    free(s.ch);
    free(s.ids);
    kill(coord, SIGTERM);
    waitpid(coord, NULL, 0);
    return rc;
}

int main(int argc, char **argv)
{
    const char *list = "16,128,1024";
    int ranks = 8, bytes = 64, direct = 0, dashboard = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc)
            list = argv[++i];
        else if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc)
            ranks = atoi(argv[++i]);
        else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
            bytes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--direct") == 0)
            direct = 1;
        else if (strcmp(argv[i], "--dashboard") == 0)
            dashboard = 1;
        else {
            fprintf(stderr, "usage: rdzv_scale [--nodes 16,128,1024] [--ranks 8] [--bytes 64] "
                            "[--direct] [--dashboard]\n");
            return 2;
        }
    }
    if (ranks < 1 || bytes < 4) {
        fprintf(stderr, "rdzv_scale: --ranks must be >= 1 and --bytes >= 4\n");
        return 2;
    }
    /* Many connections: raise the descriptor limit as far as allowed. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
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
        if (nodes > 0 && run_one(msrun, nodes, ranks, bytes, direct, dashboard) != 0)
            rc = 1;
        p = strchr(p, ',');
        if (p == NULL)
            break;
        p++;
    }
    msr_rpc_library_unref();
    return rc;
}
