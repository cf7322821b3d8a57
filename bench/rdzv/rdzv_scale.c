/* Rendezvous at scale: N simulated nodes of R ranks against a real
 * coordinator process. Every node joins (each over a TCP connection of its
 * own, as separate hosts would), then the ranks exchange their communication
 * addresses of B bytes as a UCX engine does at startup (comm/ucx/engine_peers.c),
 * sending what a node's msrun proxy sends upstream for its ranks:
 *
 *   --mode lazy (default): each node publishes its R addresses in one
 *     Publish (its ranks' fetches of them are answered by its proxy, from
 *     what it published: msrun/proxy_fetch.c), then fetches in one Fetch the
 *     addresses its ranks' communicators need off the node: a ring's
 *     neighbours (the last rank of the node before, the first of the node
 *     after) and a hierarchical communicator's (the leaders of both
 *     neighbouring nodes): 3 entries, however large the job. Each node
 *     joins as a machine of its own and the coordinator tells it its
 *     machine's count of ranks (checked), so that its ranks need no store
 *     call to learn it.
 *   --store_count: the nodes do not tell their machine (an older msrun,
 *     or a communicator short of the world): each adds its rank count to
 *     its machine's counter, meets the others at a Barrier (one call per
 *     node, weight R) and reads the counter, before the neighbours' Fetch.
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
 *     coordinator's code paths are the real ones. The exchange of --mode
 *     lazy follows, each node's calls on its top relay's connection, as a
 *     relay forwards its nodes' store calls (one by one, unchanged, over
 *     its one connection upstream), but for the Barrier: each top relay
 *     sends its nodes' arrivals merged into one, a part per node, as a
 *     relay merges those that reach it within one poll (a top relay of
 *     more than MSR_BARRIER_PARTS_MAX nodes: each alone); for the
 *     Publish calls, which a top relay merges as they reach it within
 *     one poll, up to MSR_RELAY_PUBLISH_BYTES a merged call; and for the
 *     Fetch of a node whose neighbours are under the same top relay,
 *     which that relay answers from its subtree's Publish calls: not
 *     sent.
 *   --relay_levels L (with --relay or --model_relay; default 1): L levels
 *     of relays of fan-in F, the first level's sending to relay agents'
 *     servers of the second (in this process, on its loop) and so on; the
 *     top level's relays alone call the coordinator, one connection each.
 *
 *   rdzv_scale [--nodes 16,128,1024] [--ranks 8] [--bytes 64]
 *              [--mode lazy|allgather] [--direct] [--store_count] [--window 1024]
 *              [--conns N] [--dashboard] [--relay F] [--relay_levels L]
 *              [--model_relay F NODES,...] [--rtt_us 100] [--progress ROUNDS]
 *
 * --model_relay F NODES,...: after the runs of --nodes (direct), runs
 * NODES through relays of F, fits the coordinator's costs to both and
 * prints the time of a join from 1K to 1M ranks on separate machines,
 * measured here where it ran and modelled (rdzv_model.c; --rtt_us: the
 * network's round trip, an assumption). With --relay_levels L > 1 NODES
 * also run through L levels, and the model has a column for them.
 *
 * --progress ROUNDS: after the run, every node sends ROUNDS rounds of
 *   Progress calls (each of its ranks a window of 20 step times and a
 *   loss, as a node's proxy sends once a second): on its own connection,
 *   or with --relay through its relay, each relay's share of a round one
 *   batch (the best case: a relay's nodes all report within one of its
 *   polls). A line gives the coordinator's connections (the sockets it
 *   holds, its listening ones included) and its CPU per node and round.
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
 * round of every node's Progress calls in flight.
 *
 * This file is the driver: the command line, the coordinator's process and
 * the steps of each run; the simulated nodes' calls are rdzv_calls.c's,
 * the relays rdzv_relay.c's, the dashboard rdzv_dashboard.c's and the
 * model rdzv_model.c's. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_coord.h"
#include "base/time.h"
#include "rdzv_scale_impl.h"
#include "rendezvous/relay.h"

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
    return bench_coord_start("rdzv_scale", msrun, RDZV_TOKEN, args, port_p);
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

double rdzv_coord_cpu_ms(const sim_t *s)
{
    return bench_cpu_ms(s->coord);
}

/* The sockets process pid holds (its listening ones and one per
 * connection); -1 if unknown. */
static int socket_count(pid_t pid)
{
    char path[64], link[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char fd[320];
        snprintf(fd, sizeof fd, "%s/%s", path, e->d_name);
        ssize_t len = readlink(fd, link, sizeof link - 1);
        if (len > 0 && (link[len] = '\0', strncmp(link, "socket:", 7) == 0))
            n++;
    }
    closedir(d);
    return n;
}

void rdzv_progress_line(const sim_t *s, double wall_ms, double cpu)
{
    char mode[16];
    snprintf(mode, sizeof mode, "relay%d", s->relay);
    printf("nodes=%-5d ranks=%-6d progress: mode=%-9s conns=%-5d coord_sockets=%-5d rounds=%-3d "
           "wall_ms=%-8.1f coord_cpu_ms=%-7.0f coord_cpu_us_per_node_round=%.1f\n",
           s->nodes, s->nodes * s->ranks, s->relay ? mode : "direct", s->nch,
           socket_count(s->coord), s->progress, wall_ms, cpu,
           cpu * 1000.0 / ((double)s->nodes * s->progress));
    fflush(stdout);
}

/* --progress without relays: s->progress rounds of every node's Progress
 * on its own connection, and the coordinator's CPU over them. */
static int direct_progress(sim_t *s)
{
    double cpu0 = bench_cpu_ms(s->coord);
    uint64_t t0 = msr_now_ns();
    s->entry_method = MSR_RPC_PROGRESS;
    for (int r = 0; r < s->progress; r++)
        if (rdzv_progress_round(s, 19 + 20 * (int64_t)r, NULL, NULL) != 0 || rdzv_drain(s) != 0)
            return -1;
    rdzv_progress_line(s, (double)(msr_now_ns() - t0) / 1e6, bench_cpu_ms(s->coord) - cpu0);
    return 0;
}

/* How a step of a run ended: STEP_FAIL prints the run's error (s->err)
 * first, STEP_QUIT (a call that could not start) ends it silently. */
enum { STEP_OK, STEP_FAIL, STEP_QUIT };

/* When each phase of a run began and ended: wall time and the
 * coordinator's CPU time. */
typedef struct run_times {
    double cpu_start, cpu_t0, cpu_t1, cpu_end;
    uint64_t tc, t0, t1, t2;
} run_times_t;

static void sim_init(sim_t *s, int nodes, int ranks, int bytes, int direct, int dashboard, int lazy,
                     int max_conns, int relay, int levels)
{
    memset(s, 0, sizeof *s);
    s->nodes = nodes;
    s->ranks = ranks;
    s->bytes = bytes;
    s->direct = direct;
    s->dashboard = dashboard;
    s->lazy = lazy;
    s->relay = relay;
    s->levels = relay ? levels : 0;
    s->entry_method = MSR_RPC_METHOD_COUNT;
    s->clients = relay ? rdzv_relay_top(nodes, relay, levels) : direct ? nodes * ranks : nodes;
    s->nch = s->clients < max_conns ? s->clients : max_conns;
    s->want_bytes = (size_t)nodes * ranks * bytes;
}

/* connect: every client opens its connection (a Status call each) */
static int connect_step(sim_t *s, int window)
{
    for (int c = 0; c < s->nch; c++) {
        /* at most window connections being made at once (0: all) */
        while (window > 0 && s->pending >= window && !s->failed)
            if (msr_rpc_loop_poll(s->loop, msr_deadline_in_ms(1000)) < 0)
                return STEP_FAIL;
        Msr__StatusRequest st = MSR__STATUS_REQUEST__INIT;
        if (rdzv_start_op(s, c, s->direct ? c / s->ranks : c, MSR_RPC_STATUS, &st.base) != 0)
            return STEP_QUIT;
    }
    return rdzv_drain(s) != 0 ? STEP_FAIL : STEP_OK;
}

/* join: every node registers (over the channel of its first rank with
 * --direct), then reports ready; the last one forms the job and every
 * held heartbeat hears it */
static int join_step(sim_t *s)
{
    if (s->relay)
        return rdzv_relay_join(s) != 0 ? STEP_FAIL : STEP_OK;
    char host[32];
    for (int n = 0; n < s->nodes; n++) {
        Msr__JoinRequest j;
        rdzv_make_join(s, n, &j);
        snprintf(host, sizeof host, "10.%d.%d.%d", n >> 16, (n >> 8) & 255, n & 255);
        j.host = host;
        if (rdzv_start_op(s, s->direct ? n * s->ranks : n, n, MSR_RPC_JOIN, &j.base) != 0)
            return STEP_QUIT;
    }
    if (rdzv_drain(s) != 0)
        return STEP_FAIL;
    for (int n = 0; n < s->nodes; n++) {
        Msr__HeartbeatRequest h;
        rdzv_make_heartbeat(s, n, &h);
        if (rdzv_start_op(s, s->direct ? n * s->ranks : n, n, MSR_RPC_HEARTBEAT, &h.base) != 0)
            return STEP_QUIT;
    }
    return rdzv_drain(s) != 0 ? STEP_FAIL : STEP_OK;
}

/* The exchange: every rank contributes `bytes`, starting with its index
 * (in relay mode over the relays' connections: rdzv_node_client). 1 when
 * it went well. */
static int exchange_step(sim_t *s)
{
    int world = s->nodes * s->ranks, bytes = s->bytes;
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
    int ok = s->lazy ? rdzv_lazy_exchange(s, eptr) == 0 : rdzv_exchange_all(s, eptr) == 0;
    free(payload);
    free(entries);
    free(eptr);
    return ok;
}

/* The run's line, and its measurement kept for --model_relay. */
static void print_run(const sim_t *s, const run_times_t *t, uint64_t peak)
{
    int nodes = s->nodes, world = s->nodes * s->ranks, relay = s->relay;
    double conn_ms = (double)(t->t0 - t->tc) / 1e6, join_ms = (double)(t->t1 - t->t0) / 1e6,
           ag_ms = (double)(t->t2 - t->t1) / 1e6, total = conn_ms + join_ms + ag_ms;
    double cpu = t->cpu_end - t->cpu_start, cpu_conn = t->cpu_t0 - t->cpu_start,
           cpu_join = t->cpu_t1 - t->cpu_t0, cpu_ex = t->cpu_end - t->cpu_t1;
    char mode[16];
    snprintf(mode, sizeof mode, "relay%.0d", s->levels > 1 ? s->levels : 0);
    printf("nodes=%-5d ranks=%-6d conns=%-5d mode=%-9s connect_ms=%-7.1f join_ms=%-7.1f "
           "exchange_ms=%-8.1f "
           "total_ms=%-8.1f coord_sockets=%-5d coord_cpu_ms=%-7.0f coord_cpu_us_per_node=%-6.0f "
           "(connect %.0f join %.0f exchange %.0f) "
           "coord_peak_rss_MiB=%-6.1f per_rank_us=%.1f\n",
           nodes, world, s->nch,
           relay       ? mode
           : s->lazy   ? "lazy"
           : s->direct ? "ag-direct"
                       : "allgather",
           conn_ms, join_ms, ag_ms, total, socket_count(s->coord), cpu, cpu * 1000.0 / nodes,
           cpu_conn * 1000.0 / nodes, cpu_join * 1000.0 / nodes, cpu_ex * 1000.0 / nodes,
           (double)peak / 1024.0, total * 1000.0 / world);
    fflush(stdout);
    rdzv_model_record(&(measured_t){nodes, relay, s->levels, cpu_conn * 1000.0 / nodes,
                                    cpu_join * 1000.0 / nodes, join_ms, conn_ms + join_ms});
}

/* The steps of a run against the coordinator coord (connections open):
 * connect, join, exchange, the run's line, and the dashboard's. */
static int run_steps(sim_t *s, pid_t coord, int window, int dash)
{
    run_times_t t;
    t.cpu_start = bench_cpu_ms(coord);
    t.tc = msr_now_ns();
    int step = connect_step(s, window);
    if (step != STEP_OK)
        return step;
    t.t0 = msr_now_ns();
    t.cpu_t0 = bench_cpu_ms(coord);
    step = join_step(s);
    if (step != STEP_OK)
        return step;
    /* the relays' progress rounds (within the join step): not the join's */
    t.tc += s->progress_ns;
    t.t0 += s->progress_ns;
    t.cpu_start += s->progress_cpu_ms;
    t.cpu_t0 += s->progress_cpu_ms;
    t.t1 = msr_now_ns();
    t.cpu_t1 = bench_cpu_ms(coord);
    int ok = exchange_step(s);
    t.t2 = msr_now_ns();
    t.cpu_end = bench_cpu_ms(coord);
    if (!ok)
        return STEP_FAIL;
    print_run(s, &t, coordinator_peak_kb(s->ch[0]));
    if (s->progress > 0 && !s->relay && direct_progress(s) != 0)
        return STEP_FAIL;
    if (s->dashboard && rdzv_dashboard_phase(s, dash) != 0) {
        if (!s->failed)
            snprintf(s->err, sizeof s->err, "the dashboard did not answer");
        return STEP_FAIL;
    }
    return STEP_OK;
}

static int run_one(const char *msrun, int nodes, int ranks, int bytes, int direct, int dashboard,
                   int lazy, int max_conns, int window, int relay, int levels, int progress,
                   int store_count)
{
    sim_t s;
    sim_init(&s, nodes, ranks, bytes, direct, dashboard, lazy, max_conns, relay, levels);
    s.progress = progress;
    s.store_count = store_count;
    int world = nodes * ranks, port = 0, step = STEP_QUIT, dash = dashboard ? rdzv_free_port() : 0;
    pid_t coord = start_coordinator(msrun, world, ranks, dash, &port);
    if (coord < 0)
        return 1;
    s.coord = coord;
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    s.ch = calloc((size_t)s.nch, sizeof *s.ch);
    s.ids = calloc((size_t)nodes, sizeof *s.ids);
    s.node_rank = calloc((size_t)nodes, sizeof *s.node_rank);
    msr_rpc_loop_create(&s.loop);
    for (int i = 0; i < s.nch; i++)
        if (msr_rpc_channel_create_own(target, RDZV_TOKEN, &s.ch[i]) != MSR_OK) {
            fprintf(stderr, "rdzv_scale: cannot create channel %d\n", i);
            goto out;
        }
    step = run_steps(&s, coord, window, dash);
    if (step == STEP_FAIL)
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
    return step == STEP_OK ? 0 : 1;
}

/* The command line (see the header). */
typedef struct args {
    const char *list;       /* --nodes */
    const char *relay_list; /* --model_relay's NODES,...; NULL: none */
    int ranks, bytes, direct, dashboard, lazy, window, conns, relay, model_relay, levels;
    int progress;    /* --progress */
    int store_count; /* --store_count */
    double rtt_us;
} args_t;

/* Reads the command line into a; 0, or 2 with the usage printed. */
static int parse_args(int argc, char **argv, args_t *a)
{
    *a = (args_t){.list = "16,128,1024",
                  .ranks = 8,
                  .bytes = 64,
                  .lazy = 1,
                  .window = 1024,
                  .rtt_us = 100,
                  .levels = 1};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--nodes") == 0 && i + 1 < argc)
            a->list = argv[++i];
        else if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc)
            a->ranks = atoi(argv[++i]);
        else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
            a->bytes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--direct") == 0)
            a->direct = 1;
        else if (strcmp(argv[i], "--store_count") == 0)
            a->store_count = 1;
        else if (strcmp(argv[i], "--window") == 0 && i + 1 < argc)
            a->window = atoi(argv[++i]);
        else if (strcmp(argv[i], "--conns") == 0 && i + 1 < argc)
            a->conns = atoi(argv[++i]);
        else if (strcmp(argv[i], "--relay") == 0 && i + 1 < argc)
            a->relay = atoi(argv[++i]);
        else if (strcmp(argv[i], "--progress") == 0 && i + 1 < argc)
            a->progress = atoi(argv[++i]);
        else if (strcmp(argv[i], "--relay_levels") == 0 && i + 1 < argc)
            a->levels = atoi(argv[++i]);
        else if (strcmp(argv[i], "--model_relay") == 0 && i + 2 < argc) {
            a->model_relay = atoi(argv[++i]);
            a->relay_list = argv[++i];
        } else if (strcmp(argv[i], "--rtt_us") == 0 && i + 1 < argc)
            a->rtt_us = atof(argv[++i]);
        else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc &&
                 (strcmp(argv[i + 1], "lazy") == 0 || strcmp(argv[i + 1], "allgather") == 0))
            a->lazy = strcmp(argv[++i], "lazy") == 0;
        else if (strcmp(argv[i], "--dashboard") == 0)
            a->dashboard = 1;
        else {
            fprintf(stderr, "usage: rdzv_scale [--nodes 16,128,1024] [--ranks 8] [--bytes 64] "
                            "[--mode lazy|allgather] [--direct] [--store_count] [--window 1024] "
                            "[--conns N] "
                            "[--dashboard] [--relay F] [--relay_levels L] "
                            "[--model_relay F NODES,...] [--progress ROUNDS] "
                            "[--rtt_us 100]\n");
            return 2;
        }
    }
    return 0;
}

/* The options' bounds and the combinations that go together; 0, or 2
 * with the reason printed. */
static int check_args(const args_t *a)
{
    if (a->ranks < 1 || a->bytes < 4) {
        fprintf(stderr, "rdzv_scale: --ranks must be >= 1 and --bytes >= 4\n");
        return 2;
    }
    if (a->window < 0 || a->conns < 0 || a->progress < 0 || a->progress > 1000) {
        fprintf(stderr, "rdzv_scale: --window and --conns must be >= 0, --progress 0 to 1000\n");
        return 2;
    }
    if (a->model_relay < 0 || a->model_relay > MSR_RELAY_BATCH_MAX || a->rtt_us < 0 ||
        (a->model_relay && a->relay)) {
        fprintf(stderr,
                "rdzv_scale: --model_relay takes 1 to %d nodes a relay and a list of "
                "node counts, and goes without --relay\n",
                MSR_RELAY_BATCH_MAX);
        return 2;
    }
    if (a->relay < 0 || a->relay > MSR_RELAY_BATCH_MAX ||
        (a->relay && (a->direct || a->dashboard || !a->lazy))) {
        fprintf(stderr,
                "rdzv_scale: --relay takes 1 to %d nodes a relay (0: none), without "
                "--direct, --dashboard or --mode allgather\n",
                MSR_RELAY_BATCH_MAX);
        return 2;
    }
    if (a->levels < 1 || a->levels > MSR_RELAY_LEVELS_MAX ||
        (a->levels > 1 && !a->relay && !a->model_relay)) {
        fprintf(stderr, "rdzv_scale: --relay_levels takes 1 to %d, with --relay or --model_relay\n",
                MSR_RELAY_LEVELS_MAX);
        return 2;
    }
    if (a->levels > 1 && a->relay < 2 && a->model_relay < 2) {
        fprintf(stderr, "rdzv_scale: --relay_levels above 1 needs a fan-in of 2 or more\n");
        return 2;
    }
    if (a->direct && a->lazy) {
        fprintf(stderr, "rdzv_scale: --direct goes with --mode allgather\n");
        return 2;
    }
    return 0;
}

/* Many connections: this process holds one descriptor per client and
 * the coordinator (which inherits the limit) two; raises the limit, the
 * hard one too where allowed (root), to what the largest run needs.
 * Returns how many connections the coordinator can take. */
static int raise_fd_limit(const args_t *a)
{
    long most = 0;
    for (const char *p = a->list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (atol(p) > most)
            most = atol(p);
    rlim_t want = (rlim_t)(2 * (a->direct ? most * a->ranks : most) * 2 + 4096);
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
    return getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 1024
               ? (int)((rl.rlim_cur - 128) / 2 - 256)
               : 256;
}

/* The runs of --nodes, then those of --model_relay and its model. */
static int run_all(const char *msrun, const args_t *a)
{
    int rc = 0;
    for (const char *p = a->list; *p;) {
        int nodes = atoi(p);
        if (nodes > 0 &&
            run_one(msrun, nodes, a->ranks, a->bytes, a->direct, a->dashboard, a->lazy, a->conns,
                    a->window, a->relay, a->levels, a->progress, a->store_count) != 0)
            rc = 1;
        p = strchr(p, ',');
        if (p == NULL)
            break;
        p++;
    }
    /* --model_relay: the same through one level of relays (the fit), then
     * through --relay_levels where above 1, then the model */
    for (int pass = 0; pass < (a->levels > 1 ? 2 : 1); pass++)
        for (const char *p = a->relay_list; rc == 0 && p && *p;) {
            int nodes = atoi(p);
            if (nodes > 0 && run_one(msrun, nodes, a->ranks, a->bytes, 0, 0, 1, a->conns, a->window,
                                     a->model_relay, pass ? a->levels : 1, 0, a->store_count) != 0)
                rc = 1;
            p = strchr(p, ',');
            p = p ? p + 1 : NULL;
        }
    if (rc == 0 && a->model_relay)
        rdzv_print_model(a->ranks, a->model_relay, a->levels, a->rtt_us);
    return rc;
}

int main(int argc, char **argv)
{
    args_t a;
    int rc = parse_args(argc, argv, &a);
    if (rc == 0)
        rc = check_args(&a);
    if (rc != 0)
        return rc;
    int fit = raise_fd_limit(&a);
    if (a.conns == 0 || a.conns > fit)
        a.conns = fit;
    char msrun[PATH_MAX];
    if (bench_msrun_beside(msrun, sizeof msrun) != 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    msr_rpc_library_ref();
    rc = run_all(msrun, &a);
    msr_rpc_library_unref();
    return rc;
}
