/* The node's state machine (msrun/node.h) fed events by hand: each test
 * plays a story (a clean run, a failure, a restart, a signal, a lost
 * coordinator, a hung worker) and checks the actions that come out, in
 * order. No process, no socket: the machine decides, nothing is done. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "launcher/node.h"
#include "tests/runner.h"

#define MS 1000000ull
#define T0 (1000 * MS) /* the time the stories start at */

static msr_node_t n;
static msr_node_action_t act;

static void setup(int nworkers, int64_t worker_timeout_ms)
{
    msr_node_config_t cfg = {
        .nworkers = nworkers,
        .grace_ms = 3000,
        .coordinator_timeout_ms = 10000,
        .cluster_time_out_ms = 5000,
        .worker_timeout_ms = worker_timeout_ms,
        .coord_target = "127.0.0.1:1",
        .seed = 7,
    };
    MSR_CHECK(msr_node_init(&n, &cfg) == MSR_OK);
}

static const char *const kinds[] = {"JOIN",    "HEARTBEAT", "SPAWN",      "SIGNAL",
                                    "POLL",    "REPORT",    "RELEASE",    "LOG_RANK",
                                    "RESTART", "LEAVE",     "COORD_STOP", "EXIT"};

/* The next action must be of kind k. */
static void expect(msr_node_act_kind_t k)
{
    MSR_CHECK_MSG(msr_node_next_action(&n, &act), "expected %s, got nothing", kinds[k]);
    MSR_CHECK_MSG(act.kind == k, "expected %s, got %s", kinds[k], kinds[act.kind]);
}

static void expect_none(void)
{
    if (msr_node_next_action(&n, &act))
        MSR_CHECK_MSG(0, "expected nothing, got %s", kinds[act.kind]);
}

static void expect_exit(int code)
{
    expect(MSR_NODE_ACT_COORD_STOP);
    expect(MSR_NODE_ACT_EXIT);
    MSR_CHECK_EQ(act.code, code);
    expect_none();
    MSR_CHECK(n.finished);
    MSR_CHECK_EQ(msr_node_next_deadline(&n), 0);
}

static int update_machine_ranks; /* what update() says of the machine's ranks */

static void update(int generation, msr_job_state_t state, int assigned, msr_failure_t *f)
{
    msr_node_update_t u = {
        .generation = generation,
        .state = state,
        .max_restarts = 3,
        .message = "",
        .failure = f,
        .has_assignment = assigned,
        .node_rank = 0,
        .node_count = 1,
        .world_size = n.cfg.nworkers,
        .master_addr = "127.0.0.1",
        .master_port = 5,
        .expected_nodes = 1,
        .machine_ranks = update_machine_ranks,
    };
    msr_node_on_update(&n, T0, &u);
}

/* Joined, generation 0 running with every worker started. */
static void run_generation0(void)
{
    msr_node_on_start(&n, T0);
    expect(MSR_NODE_ACT_JOIN);
    msr_node_on_joined(&n, T0, 0, 3);
    expect(MSR_NODE_ACT_HEARTBEAT);
    update(0, MSR_JOB_RUNNING, 1, NULL);
    expect(MSR_NODE_ACT_LOG_RANK);
    MSR_CHECK_EQ(act.code, 0);
    expect(MSR_NODE_ACT_SPAWN);
    MSR_CHECK_EQ(act.generation, 0);
    expect(MSR_NODE_ACT_HEARTBEAT);
    expect_none();
    for (int i = 0; i < n.cfg.nworkers; i++)
        msr_node_on_spawned(&n, i, 100 + i);
    MSR_CHECK_EQ(n.nrunning, n.cfg.nworkers);
}

/* The machine's count of ranks comes with the generation. An answer of
 * the same generation without it (the coordinator restarted and lost it)
 * keeps it, as the generation's workers were all started with it; a new
 * generation's is taken as it comes, 0 included, also when the node heard
 * of the new generation (restarting) before its assignment came. */
static void test_machine_ranks_kept_within_generation(void)
{
    setup(2, 0);
    update_machine_ranks = 6;
    run_generation0();
    MSR_CHECK_EQ(n.machine_ranks, 6);
    update_machine_ranks = 0;
    update(0, MSR_JOB_RUNNING, 1, NULL);
    MSR_CHECK_EQ(n.machine_ranks, 6);
    update_machine_ranks = 4;
    update(0, MSR_JOB_RUNNING, 1, NULL);
    MSR_CHECK_EQ(n.machine_ranks, 4);
    update_machine_ranks = 0;
    update(1, MSR_JOB_RESTARTING, 0, NULL);
    MSR_CHECK_EQ(n.machine_ranks, 4); /* nothing new of it yet */
    update(1, MSR_JOB_RUNNING, 1, NULL);
    MSR_CHECK_EQ(n.machine_ranks, 0);
    update_machine_ranks = 3;
    update(2, MSR_JOB_RESTARTING, 0, NULL);
    update(2, MSR_JOB_RUNNING, 1, NULL);
    MSR_CHECK_EQ(n.machine_ranks, 3);
    msr_node_cleanup(&n);
}

static void test_clean_run(void)
{
    setup(2, 0);
    run_generation0();
    msr_node_on_worker_exit(&n, 0, 0, 0);
    expect(MSR_NODE_ACT_REPORT);
    MSR_CHECK_EQ(act.local, 0);
    MSR_CHECK_EQ(act.exit_code, 0);
    MSR_CHECK_STR(act.text, "exited");
    msr_node_on_worker_exit(&n, 1, 0, 0);
    expect(MSR_NODE_ACT_REPORT);
    update(0, MSR_JOB_DONE, 0, NULL);
    expect(MSR_NODE_ACT_LEAVE);
    MSR_CHECK_STR(act.long_text, "finished (exit status 0)");
    expect_exit(0);
    /* nothing after the end */
    msr_node_on_signal(&n, T0, SIGINT);
    msr_node_on_tick(&n, T0 + 100000 * MS);
    expect_none();
    msr_node_cleanup(&n);
}

static void test_failure_exit_code(void)
{
    setup(2, 0);
    run_generation0();
    msr_node_on_worker_exit(&n, 1, 3, 0);
    expect(MSR_NODE_ACT_REPORT);
    MSR_CHECK_EQ(act.exit_code, 3);
    expect_none();
    msr_failure_t f = {.set = 1, .rank = 1, .exit_code = 3, .generation = 0};
    update(0, MSR_JOB_FAILED, 0, &f);
    MSR_CHECK_EQ(f.set, 0); /* taken */
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.sig, SIGTERM);
    MSR_CHECK_EQ(act.local, -1);
    expect(MSR_NODE_ACT_HEARTBEAT); /* every answer is followed by the next long-poll */
    MSR_CHECK(msr_node_next_deadline(&n) == T0 + 3000 * MS); /* SIGKILL after the grace */
    msr_node_on_worker_exit(&n, 0, -1, SIGTERM);             /* stopped: not reported */
    expect(MSR_NODE_ACT_RELEASE);
    expect(MSR_NODE_ACT_LEAVE);
    expect_exit(3);
    msr_node_cleanup(&n);
}

static void test_signal_exit_code(void)
{
    setup(1, 0);
    run_generation0();
    msr_node_on_worker_exit(&n, 0, -1, SIGSEGV);
    expect(MSR_NODE_ACT_REPORT);
    MSR_CHECK_EQ(act.sig, SIGSEGV);
    MSR_CHECK_EQ(act.exit_code, -1);
    MSR_CHECK_STR(act.text, "signal");
    msr_failure_t f = {.set = 1, .rank = 0, .exit_code = -1, .signal = SIGSEGV};
    update(0, MSR_JOB_FAILED, 0, &f);
    expect(MSR_NODE_ACT_LEAVE);
    expect_exit(128 + SIGSEGV);
    msr_node_cleanup(&n);
}

static void test_restart_waits_for_the_old_workers(void)
{
    setup(2, 0);
    run_generation0();
    msr_node_on_worker_exit(&n, 0, -1, SIGKILL);
    expect(MSR_NODE_ACT_REPORT);
    update(1, MSR_JOB_RESTARTING, 0, NULL);
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.sig, SIGTERM);
    expect(MSR_NODE_ACT_HEARTBEAT);
    expect_none();
    /* generation 1 runs elsewhere already: no spawn while ours live */
    update(1, MSR_JOB_RUNNING, 1, NULL);
    expect(MSR_NODE_ACT_SIGNAL); /* told again to stop */
    MSR_CHECK_EQ(act.sig, SIGTERM);
    expect(MSR_NODE_ACT_HEARTBEAT);
    expect_none();
    msr_node_on_worker_exit(&n, 1, -1, SIGTERM);
    expect(MSR_NODE_ACT_RELEASE);
    expect(MSR_NODE_ACT_HEARTBEAT); /* ready for generation 1 at once */
    MSR_CHECK_EQ(n.ready_generation, 1);
    expect_none();
    update(1, MSR_JOB_RUNNING, 1, NULL);
    expect(MSR_NODE_ACT_SPAWN);
    MSR_CHECK_EQ(act.generation, 1);
    msr_node_cleanup(&n);
}

static void test_grace_then_sigkill_then_give_up(void)
{
    setup(2, 0);
    run_generation0();
    update(1, MSR_JOB_RESTARTING, 0, NULL);
    expect(MSR_NODE_ACT_SIGNAL);
    expect(MSR_NODE_ACT_HEARTBEAT);
    msr_node_on_tick(&n, T0 + 2999 * MS);
    expect_none();
    msr_node_on_tick(&n, T0 + 3000 * MS);
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.sig, SIGKILL);
    MSR_CHECK(n.kill_sent);
    MSR_CHECK(msr_node_next_deadline(&n) == T0 + 8000 * MS);
    msr_node_on_worker_exit(&n, 0, -1, SIGKILL);
    msr_node_on_tick(&n, T0 + 8000 * MS); /* rank 1 would not die: carry on */
    expect(MSR_NODE_ACT_RELEASE);
    expect(MSR_NODE_ACT_HEARTBEAT);
    MSR_CHECK_EQ(n.nrunning, 0);
    MSR_CHECK(!n.stopping);
    msr_node_cleanup(&n);
}

static void test_sigint_twice(void)
{
    setup(2, 0);
    run_generation0();
    msr_node_on_signal(&n, T0, SIGINT);
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.sig, SIGINT);
    msr_node_on_signal(&n, T0, SIGINT);
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.sig, SIGKILL);
    msr_node_on_worker_exit(&n, 0, -1, SIGINT);
    msr_node_on_worker_exit(&n, 1, -1, SIGKILL);
    expect(MSR_NODE_ACT_RELEASE);
    expect(MSR_NODE_ACT_LEAVE);
    MSR_CHECK(strstr(act.long_text, "interrupted by SIGINT") != NULL);
    expect_exit(128 + SIGINT);
    msr_node_cleanup(&n);
}

static void test_sighup_stops_with_sigterm(void)
{
    setup(1, 0);
    run_generation0();
    msr_node_on_signal(&n, T0, SIGHUP);
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.sig, SIGTERM);
    msr_node_on_signal(&n, T0, SIGUSR1); /* forwarded as it is */
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.sig, SIGUSR1);
    msr_node_cleanup(&n);
}

/* The forming lines, caught from the log */
static char lines[4096];
static int nlines;

static void catch_line(void *arg, const char *line, size_t len)
{
    (void)arg;
    if (strstr(line, "waiting for nodes") == NULL)
        return;
    nlines++;
    snprintf(lines, sizeof lines, "%.*s", (int)len, line);
}

/* A forming update at T0 + ms; whether it printed a line. */
static int forming_at(uint64_t ms)
{
    msr_node_update_t u = {
        .generation = 0,
        .state = MSR_JOB_WAITING,
        .max_restarts = 3,
        .message = "",
        .joined_nodes = 1,
        .expected_nodes = 2,
        .missing = "node 1 not yet joined",
        .form_left_ms = 5400,
        .form_timeout_ms = 600000,
    };
    int before = nlines;
    msr_node_on_update(&n, T0 + ms * MS, &u);
    while (msr_node_next_action(&n, &act))
        ;
    return nlines - before;
}

/* A forming job's line: after 1 s, then every 10 s in the first minute,
 * every 30 s to the fifth, every 60 s after (each at exactly its bound,
 * not 1 ms before), with who is missing and the time left. */
static void test_forming_lines(void)
{
    setup(1, 0);
    msr_node_on_start(&n, T0);
    expect(MSR_NODE_ACT_JOIN);
    msr_node_on_joined(&n, T0, 0, 3);
    expect(MSR_NODE_ACT_HEARTBEAT);
    msr_log_set_level(MSR_LOG_INFO);
    msr_log_set_sink(catch_line, NULL);
    MSR_CHECK_EQ(forming_at(0), 0);
    MSR_CHECK_EQ(forming_at(999), 0);
    MSR_CHECK_EQ(forming_at(1000), 1);
    MSR_CHECK(strstr(lines, "waiting for nodes: 1 of 2 joined (awaiting: node 1 not yet "
                            "joined); 5 s left of --cluster_time_out 600 s\n") != NULL);
    MSR_CHECK_EQ(forming_at(10999), 0);
    MSR_CHECK_EQ(forming_at(11000), 1);
    MSR_CHECK_EQ(forming_at(59000), 1); /* waited 59 s: every 10 s */
    MSR_CHECK_EQ(forming_at(69000), 0); /* waited 69 s: every 30 s */
    MSR_CHECK_EQ(forming_at(88999), 0);
    MSR_CHECK_EQ(forming_at(89000), 1);
    MSR_CHECK_EQ(forming_at(300000), 1); /* waited 300 s: every 60 s */
    MSR_CHECK_EQ(forming_at(330000), 0);
    MSR_CHECK_EQ(forming_at(359999), 0);
    MSR_CHECK_EQ(forming_at(360000), 1);
    msr_log_set_sink(NULL, NULL);
    msr_node_cleanup(&n);
}

static void test_signal_before_join(void)
{
    setup(1, 0);
    msr_node_on_start(&n, T0);
    expect(MSR_NODE_ACT_JOIN);
    msr_node_on_signal(&n, T0, SIGTERM);
    expect_exit(128 + SIGTERM); /* no LEAVE: never joined */
    msr_node_cleanup(&n);
}

static void test_join_retries_then_gives_up(void)
{
    setup(1, 0);
    msr_node_on_start(&n, T0);
    expect(MSR_NODE_ACT_JOIN);
    uint64_t t = T0;
    for (int i = 0; i < 10; i++) {
        msr_node_on_join_failed(&n, t, i % 2 ? MSR_NODE_JOIN_FULL : MSR_NODE_JOIN_AWAY, "away");
        expect_none();
        uint64_t at = msr_node_next_deadline(&n);
        MSR_CHECK(at > t && at <= t + 1000 * MS); /* armed, backed off up to 1 s */
        msr_node_on_tick(&n, at);
        expect(MSR_NODE_ACT_JOIN);
        t = at;
    }
    msr_node_on_join_failed(&n, T0 + 5001 * MS, MSR_NODE_JOIN_AWAY, "away");
    MSR_CHECK(strstr(n.error, "no coordinator answered at 127.0.0.1:1 within 5 s") != NULL);
    expect_exit(MSR_EXIT_NOT_FORMED);
    msr_node_cleanup(&n);
}

static void test_join_refused(void)
{
    setup(1, 0);
    msr_node_on_start(&n, T0);
    expect(MSR_NODE_ACT_JOIN);
    msr_node_on_join_failed(&n, T0, MSR_NODE_JOIN_REFUSED, "worker_num is 6");
    expect(MSR_NODE_ACT_COORD_STOP);
    expect(MSR_NODE_ACT_EXIT);
    MSR_CHECK_EQ(act.code, 2);
    MSR_CHECK(strstr(act.long_text, "refused this node: worker_num is 6") != NULL);
    msr_node_cleanup(&n);
}

static void test_coordinator_lost(void)
{
    setup(1, 0);
    run_generation0();
    msr_node_on_heartbeat_failed(&n, T0, 0, "unavailable");
    MSR_CHECK(n.retry_at != 0);
    msr_node_on_tick(&n, n.retry_at);
    expect(MSR_NODE_ACT_HEARTBEAT);
    msr_node_on_heartbeat_failed(&n, T0 + 10001 * MS, 0, "unavailable");
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.sig, SIGTERM);
    msr_node_on_worker_exit(&n, 0, -1, SIGTERM);
    expect(MSR_NODE_ACT_RELEASE);
    expect(MSR_NODE_ACT_LEAVE);
    MSR_CHECK(strstr(act.long_text, "lost the coordinator") != NULL);
    expect_exit(1);
    msr_node_cleanup(&n);
}

static void test_hung_worker_killed_and_reported(void)
{
    setup(2, 1000);
    run_generation0();
    uint64_t at = msr_node_next_deadline(&n);
    MSR_CHECK(at == T0 + 250 * MS); /* a quarter of the timeout */
    msr_node_on_tick(&n, T0 + 2000 * MS);
    expect(MSR_NODE_ACT_POLL_BEATS);
    msr_node_on_beat(&n, T0 + 2000 * MS, 0, T0 + 1900 * MS, 0, 0); /* beats */
    msr_node_on_beat(&n, T0 + 2000 * MS, 1, T0 + 500 * MS, 0, 0);  /* silent 1.5 s */
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.local, 1);
    MSR_CHECK_EQ(act.sig, SIGKILL);
    MSR_CHECK_STR(act.text, "hung: no libmsrun beat for 1.0 s");
    expect_none();
    msr_node_on_worker_exit(&n, 1, -1, SIGKILL);
    expect(MSR_NODE_ACT_REPORT);
    MSR_CHECK_STR(act.text, "hung: no libmsrun beat for 1.0 s");
    /* beating but no msr_heartbeat() progress */
    msr_node_on_beat(&n, T0 + 3000 * MS, 0, T0 + 2990 * MS, 5, T0 + 1000 * MS);
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_STR(act.text, "hung: no msr_heartbeat() for 1.0 s");
    msr_node_cleanup(&n);
}

static void test_spawn_failure(void)
{
    setup(2, 0);
    msr_node_on_start(&n, T0);
    expect(MSR_NODE_ACT_JOIN);
    msr_node_on_joined(&n, T0, 0, 0);
    expect(MSR_NODE_ACT_HEARTBEAT);
    update(0, MSR_JOB_RUNNING, 1, NULL);
    expect(MSR_NODE_ACT_LOG_RANK);
    expect(MSR_NODE_ACT_SPAWN);
    expect(MSR_NODE_ACT_HEARTBEAT);
    msr_node_on_spawned(&n, 0, 100);
    msr_node_on_spawn_failed(&n, T0, "rank 1: cannot run ./nothing: No such file");
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.sig, SIGKILL);
    msr_node_on_worker_exit(&n, 0, -1, SIGKILL);
    expect(MSR_NODE_ACT_RELEASE);
    expect(MSR_NODE_ACT_LEAVE);
    MSR_CHECK(strstr(act.long_text, "cannot run") != NULL);
    expect_exit(2);
    msr_node_cleanup(&n);
}

static void test_coordinator_child_restarted(void)
{
    setup(1, 0);
    run_generation0();
    msr_node_on_coord_exit(&n, T0, "SIGKILL", 0);
    expect(MSR_NODE_ACT_COORD_RESTART);
    MSR_CHECK_STR(act.text, "SIGKILL");
    expect_none();
    MSR_CHECK_EQ(n.nrunning, 1); /* the workers keep running */
    msr_node_cleanup(&n);
}

/* cluster_time_out counts from the start: a first call that took 3 of the
 * 5 s leaves 2, the calls and the retries are cut to what is left, and the
 * node gives up at 5 s, not 3 + 5. */
static void test_join_deadline_from_the_start(void)
{
    setup(1, 0);
    msr_node_on_start(&n, T0);
    expect(MSR_NODE_ACT_JOIN);
    MSR_CHECK_EQ(msr_node_join_left_ms(&n, T0), 5000);
    msr_node_on_join_failed(&n, T0 + 3000 * MS, MSR_NODE_JOIN_AWAY, "deadline");
    expect_none();
    MSR_CHECK_EQ(msr_node_join_left_ms(&n, T0 + 3000 * MS), 2000);
    msr_node_on_join_failed(&n, T0 + 4900 * MS, MSR_NODE_JOIN_AWAY, "deadline");
    MSR_CHECK(msr_node_next_deadline(&n) <= T0 + 5000 * MS); /* no retry after the end */
    MSR_CHECK_EQ(msr_node_join_left_ms(&n, T0 + 5000 * MS), 1);
    msr_node_on_join_failed(&n, T0 + 5000 * MS, MSR_NODE_JOIN_AWAY, "deadline");
    MSR_CHECK(strstr(n.error, "within 5 s") != NULL);
    expect_exit(MSR_EXIT_NOT_FORMED);
    msr_node_cleanup(&n);
}

/* The job failed (it did not form) before this node ran a worker: the
 * status says so, not 1 like a worker's failure. */
static void test_not_formed_exit_code(void)
{
    setup(1, 0);
    msr_node_on_start(&n, T0);
    expect(MSR_NODE_ACT_JOIN);
    msr_node_on_joined(&n, T0, 0, 3);
    expect(MSR_NODE_ACT_HEARTBEAT);
    update(0, MSR_JOB_FAILED, 0, NULL);
    expect(MSR_NODE_ACT_LEAVE);
    expect_exit(MSR_EXIT_NOT_FORMED);
    msr_node_cleanup(&n);
}

/* The embedded coordinator ended the job (exit 1) before this node joined:
 * no restart loop, the node stops with the not-formed status. */
static void test_coordinator_ended_before_join(void)
{
    setup(1, 0);
    msr_node_on_start(&n, T0);
    expect(MSR_NODE_ACT_JOIN);
    msr_node_on_coord_exit(&n, T0, "code 1", 1);
    MSR_CHECK(strstr(n.error, "ended the job before this node joined") != NULL);
    expect_exit(MSR_EXIT_NOT_FORMED);
    msr_node_cleanup(&n);
}

/* The embedded coordinator ended the job with this node still in (it was
 * declared lost): restarted once; the restarted one ending it too before
 * answering means the end is real: stop the workers and exit 1 naming the
 * cause, not a restart loop until the coordinator timeout. An answer in
 * between starts the count again. */
static void test_coordinator_ended_without_this_node(void)
{
    setup(1, 0);
    run_generation0();
    msr_node_on_coord_exit(&n, T0, "code 1", 1);
    expect(MSR_NODE_ACT_COORD_RESTART);
    expect_none();
    msr_node_on_coord_exit(&n, T0, "code 1", 1);
    MSR_CHECK(strstr(n.message, "declared this node lost") != NULL);
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.sig, SIGTERM);
    msr_node_cleanup(&n);

    setup(1, 0);
    run_generation0();
    msr_node_on_coord_exit(&n, T0, "code 1", 1);
    expect(MSR_NODE_ACT_COORD_RESTART);
    n.hb_inflight++;
    update(0, MSR_JOB_RUNNING, 1, NULL);
    while (msr_node_next_action(&n, &act))
        ;
    msr_node_on_coord_exit(&n, T0, "code 1", 1);
    expect(MSR_NODE_ACT_COORD_RESTART);
    MSR_CHECK(!n.finished);
    msr_node_cleanup(&n);
}

/* 4 workers of generation 0 running, the last a parameter server
 * (--ps_servers 1), asynchronous or not. */
static void setup_ps(int async)
{
    setup(4, 0);
    n.cfg.ps_servers = 1;
    n.cfg.ps_async = async;
    run_generation0();
}

/* Worker 1 killed and started again alone as PID 201: its first
 * replacement. */
static void replace_worker1(void)
{
    msr_node_on_worker_exit(&n, 1, -1, SIGKILL);
    expect(MSR_NODE_ACT_SPAWN);
    MSR_CHECK_EQ(act.local, 1);
    MSR_CHECK_EQ(act.code, 1);
    MSR_CHECK_EQ(act.generation, 0);
    expect_none();
    MSR_CHECK_EQ(n.workers[1].incarnation, 1);
    msr_node_on_spawned(&n, 1, 201);
    MSR_CHECK_EQ(n.workers[1].incarnation, 1); /* kept across the start */
    MSR_CHECK_EQ(n.workers[1].pid, 201);
}

/* --ps_servers 1 with an asynchronous staleness on 4 workers: ranks 0-2
 * work, rank 3 serves. A worker that fails of its own is started again
 * alone (SPAWN of that slot only, its incarnation up by one, the
 * coordinator not told); a clean exit, a server and a worker past this
 * node's max_restarts (3) replacements are reported as any failure. */
static void test_ps_worker_replaced_alone(void)
{
    setup_ps(1);
    replace_worker1();
    MSR_CHECK_EQ(n.nrunning, 4);
    /* a code not 0 too; the same slot again counts its incarnations */
    msr_node_on_worker_exit(&n, 1, 3, 0);
    expect(MSR_NODE_ACT_SPAWN);
    MSR_CHECK_EQ(act.local, 1);
    expect_none();
    msr_node_on_spawned(&n, 1, 202);
    MSR_CHECK_EQ(n.workers[1].incarnation, 2);
    msr_node_on_worker_exit(&n, 0, -1, SIGSEGV);
    expect(MSR_NODE_ACT_SPAWN);
    MSR_CHECK_EQ(act.local, 0);
    msr_node_on_spawned(&n, 0, 203);
    MSR_CHECK_EQ(n.workers[0].incarnation, 1);
    MSR_CHECK_EQ(n.replaced, 3);
    /* the fourth is past --max_restarts=3: reported */
    msr_node_on_worker_exit(&n, 2, -1, SIGKILL);
    expect(MSR_NODE_ACT_REPORT);
    MSR_CHECK_EQ(act.local, 2);
    MSR_CHECK_EQ(n.replaced, 3);
    msr_node_cleanup(&n);

    /* a clean exit and a server are reported, not replaced */
    setup_ps(1);
    msr_node_on_worker_exit(&n, 0, 0, 0);
    expect(MSR_NODE_ACT_REPORT);
    MSR_CHECK_EQ(act.exit_code, 0);
    msr_node_on_worker_exit(&n, 3, -1, SIGKILL);
    expect(MSR_NODE_ACT_REPORT);
    MSR_CHECK_EQ(act.local, 3);
    MSR_CHECK_EQ(n.replaced, 0);
    msr_node_cleanup(&n);

    /* synchronous (ps_async 0): every failure is reported */
    setup_ps(0);
    msr_node_on_worker_exit(&n, 1, -1, SIGKILL);
    expect(MSR_NODE_ACT_REPORT);
    MSR_CHECK_EQ(act.local, 1);
    MSR_CHECK_EQ(n.replaced, 0);
    msr_node_cleanup(&n);
}

/* A replaced worker's incarnation belongs to its generation: when every
 * worker of the node ended on its own before the coordinator restarted
 * the job (no stop of msrun's, so no slot cleared on its end), the next
 * generation still starts each at incarnation 0. ps_replace's "die" case
 * once started generation 1's rank 2 with MSR_INCARNATION=1: it joined as
 * a replacement while the new servers paired as at a start, and both
 * waited until their deadline. */
static void test_ps_incarnation_new_generation(void)
{
    setup_ps(1);
    replace_worker1();
    for (int i = 0; i < 4; i++) /* every one ends on its own */
        msr_node_on_worker_exit(&n, i, 0, i == 3 ? SIGKILL : 0);
    while (msr_node_next_action(&n, &act))
        MSR_CHECK(act.kind == MSR_NODE_ACT_REPORT);
    MSR_CHECK_EQ(n.nrunning, 0);
    MSR_CHECK(!n.stopping);
    update(1, MSR_JOB_RESTARTING, 0, NULL);
    expect(MSR_NODE_ACT_HEARTBEAT);
    expect_none();
    update(1, MSR_JOB_RUNNING, 1, NULL);
    expect(MSR_NODE_ACT_SPAWN);
    MSR_CHECK_EQ(act.generation, 1);
    for (int i = 0; i < 4; i++) {
        MSR_CHECK_EQ(n.workers[i].incarnation, 0);
        msr_node_on_spawned(&n, i, 300 + i);
        MSR_CHECK_EQ(n.workers[i].incarnation, 0);
    }
    msr_node_cleanup(&n);
}

static const msr_test_t tests[] = {
    {"coordinator_ended_without_this_node", test_coordinator_ended_without_this_node, 10},
    {"join_deadline_from_the_start", test_join_deadline_from_the_start, 10},
    {"not_formed_exit_code", test_not_formed_exit_code, 10},
    {"coordinator_ended_before_join", test_coordinator_ended_before_join, 10},
    {"clean_run", test_clean_run, 10},
    {"machine_ranks_kept_within_generation", test_machine_ranks_kept_within_generation, 10},
    {"failure_exit_code", test_failure_exit_code, 10},
    {"signal_exit_code", test_signal_exit_code, 10},
    {"restart_waits_for_the_old_workers", test_restart_waits_for_the_old_workers, 10},
    {"grace_then_sigkill_then_give_up", test_grace_then_sigkill_then_give_up, 10},
    {"sigint_twice", test_sigint_twice, 10},
    {"sighup_stops_with_sigterm", test_sighup_stops_with_sigterm, 10},
    {"signal_before_join", test_signal_before_join, 10},
    {"forming_lines", test_forming_lines, 10},
    {"join_retries_then_gives_up", test_join_retries_then_gives_up, 10},
    {"join_refused", test_join_refused, 10},
    {"coordinator_lost", test_coordinator_lost, 10},
    {"hung_worker_killed_and_reported", test_hung_worker_killed_and_reported, 10},
    {"spawn_failure", test_spawn_failure, 10},
    {"coordinator_child_restarted", test_coordinator_child_restarted, 10},
    {"ps_worker_replaced_alone", test_ps_worker_replaced_alone, 10},
    {"ps_incarnation_new_generation", test_ps_incarnation_new_generation, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
