/* The node's state machine starting its workers in slices (msrun/node.h,
 * MSR_NODE_SPAWN_SLICE_MS): a spawn hands the agent's loop a turn, the
 * heartbeat goes on in between, the rest follows at the next tick, and a
 * stop in between cancels it. Events fed by hand: no process, no socket. */
#include <signal.h>
#include <string.h>

#include "launcher/node.h"
#include "tests/runner.h"

#define MS 1000000ull
#define T0 (1000 * MS)

static msr_node_t n;
static msr_node_action_t act;

static void setup(int nworkers)
{
    msr_node_config_t cfg = {
        .nworkers = nworkers,
        .grace_ms = 3000,
        .coordinator_timeout_ms = 10000,
        .cluster_time_out_ms = 5000,
        .coord_target = "127.0.0.1:1",
        .seed = 7,
    };
    MSR_CHECK(msr_node_init(&n, &cfg) == MSR_OK);
}

static void expect(msr_node_act_kind_t k)
{
    MSR_CHECK_MSG(msr_node_next_action(&n, &act), "expected action %d, got nothing", (int)k);
    MSR_CHECK_MSG(act.kind == k, "expected action %d, got %d", (int)k, (int)act.kind);
}

static void expect_none(void)
{
    if (msr_node_next_action(&n, &act))
        MSR_CHECK_MSG(0, "expected nothing, got action %d", (int)act.kind);
}

static void update(uint64_t now, int generation, msr_job_state_t state)
{
    msr_node_update_t u = {
        .generation = generation,
        .state = state,
        .max_restarts = 3,
        .message = "",
        .has_assignment = state == MSR_JOB_RUNNING,
        .node_count = 1,
        .world_size = n.cfg.nworkers,
        .master_addr = "127.0.0.1",
        .master_port = 5,
        .expected_nodes = 1,
    };
    msr_node_on_update(&n, now, &u);
}

/* Joined, generation 0 running: the first SPAWN (from worker 0) and the
 * heartbeat after it are queued; workers 0 and 1 start, then the slice is
 * over and the agent hands the loop its turn. */
static void start_and_pause(void)
{
    msr_node_on_start(&n, T0);
    expect(MSR_NODE_ACT_JOIN);
    msr_node_on_joined(&n, T0, 0, 3);
    expect(MSR_NODE_ACT_HEARTBEAT);
    update(T0, 0, MSR_JOB_RUNNING);
    expect(MSR_NODE_ACT_LOG_RANK);
    expect(MSR_NODE_ACT_SPAWN);
    MSR_CHECK_EQ(act.local, 0);
    MSR_CHECK_EQ(act.generation, 0);
    expect(MSR_NODE_ACT_HEARTBEAT);
    expect_none();
    msr_node_on_spawned(&n, 0, 100);
    msr_node_on_spawned(&n, 1, 101);
    msr_node_on_spawn_paused(&n, T0 + 60 * MS, 2);
    expect_none(); /* nothing until the loop's turn */
    MSR_CHECK_EQ(msr_node_next_deadline(&n), T0 + 60 * MS);
}

/* The slice: a spawn may hold the loop exactly MSR_NODE_SPAWN_SLICE_MS. */
static void test_slice_bound(void)
{
    setup(4);
    uint64_t slice = MSR_NODE_SPAWN_SLICE_MS * MS;
    MSR_CHECK_EQ(msr_node_spawn_turn_over(&n, T0, T0), 0);
    MSR_CHECK_EQ(msr_node_spawn_turn_over(&n, T0, T0 + slice - 1), 0);
    MSR_CHECK_EQ(msr_node_spawn_turn_over(&n, T0, T0 + slice), 1);
    MSR_CHECK_EQ(msr_node_spawn_turn_over(&n, T0, T0 + slice + 1), 1);
    msr_node_cleanup(&n);
}

/* The heartbeat's answer comes in the loop's turn: the next heartbeat goes
 * out at once, before the rest of the workers, and the rest follow at the
 * tick, from where the spawn stopped. */
static void test_heartbeat_between_slices(void)
{
    setup(4);
    start_and_pause();
    update(T0 + 1000 * MS, 0, MSR_JOB_RUNNING); /* the held heartbeat's answer */
    expect(MSR_NODE_ACT_HEARTBEAT);
    expect_none();
    msr_node_on_tick(&n, T0 + 1000 * MS);
    expect(MSR_NODE_ACT_SPAWN);
    MSR_CHECK_EQ(act.local, 2);
    MSR_CHECK_EQ(act.generation, 0);
    expect_none();
    msr_node_on_spawned(&n, 2, 102);
    msr_node_on_spawned(&n, 3, 103);
    MSR_CHECK_EQ(n.nrunning, 4);
    MSR_CHECK_EQ(n.spawn_at, 0);
    msr_node_on_tick(&n, T0 + 1001 * MS);
    expect_none(); /* no second resume */
    msr_node_cleanup(&n);
}

/* The job failed while the start was paused: the started ones are stopped,
 * the rest never start. */
static void test_stop_cancels_the_rest(void)
{
    setup(4);
    start_and_pause();
    update(T0 + 70 * MS, 0, MSR_JOB_FAILED);
    expect(MSR_NODE_ACT_SIGNAL);
    MSR_CHECK_EQ(act.sig, SIGTERM);
    expect(MSR_NODE_ACT_HEARTBEAT);
    expect_none();
    MSR_CHECK_EQ(n.spawn_at, 0);
    msr_node_on_tick(&n, T0 + 80 * MS);
    expect_none();
    msr_node_on_worker_exit(&n, 0, -1, SIGTERM);
    msr_node_on_worker_exit(&n, 1, -1, SIGTERM);
    expect(MSR_NODE_ACT_RELEASE);
    msr_node_cleanup(&n);
}

/* A pause at the last worker or past it, or before any, is no pause. */
static void test_pause_out_of_range(void)
{
    setup(2);
    msr_node_on_spawn_paused(&n, T0, 2);
    msr_node_on_spawn_paused(&n, T0, 0);
    msr_node_on_spawn_paused(&n, T0, -1);
    MSR_CHECK_EQ(n.spawn_at, 0);
    msr_node_on_spawn_paused(&n, T0, 1); /* exactly the last one: a pause */
    MSR_CHECK_EQ(n.spawn_at, T0);
    msr_node_cleanup(&n);
}

static const msr_test_t tests[] = {
    {"slice_bound", test_slice_bound, 10},
    {"heartbeat_between_slices", test_heartbeat_between_slices, 10},
    {"stop_cancels_the_rest", test_stop_cancels_the_rest, 10},
    {"pause_out_of_range", test_pause_out_of_range, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
