/* The coordinator core's membership: joins and their validation, the
 * job's formation and node ranks, long-polled heartbeats, failures,
 * restarts and their root cause, lost nodes, and an elastic job's
 * generations (test_coord.h's helpers). */
#include <errno.h>
#include <fcntl.h>
#include <grpc/status.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/time.h"
#include "base/status.h"
#include "cluster/coord_internal.h"
#include "msrun/store.h"
#include "tests/unit_rdzv/test_coord.h"

/* ---- membership ---- */

static void test_join_validation(void)
{
    msr_coord_t *co = tc_make_coord(4, 2, 0);
    tcall_t c = {0};
    Msr__JoinRequest r = tc_join_req(4, 2, -1, 0);
    r.protocol_version = 99;
    tc_call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_FAILED_PRECONDITION);
    MSR_CHECK(strstr(c.message, "protocol version 99") != NULL);

    r = tc_join_req(8, 2, -1, 0);
    tc_call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_FAILED_PRECONDITION);
    MSR_CHECK_MSG(strstr(c.message, "worker_num is 8 but the job's is 4") != NULL, "%s", c.message);

    r = tc_join_req(4, 2, -1, 0);
    r.job_id = "other";
    tc_call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_FAILED_PRECONDITION);
    MSR_CHECK(strstr(c.message, "'other'") != NULL);

    r = tc_join_req(4, 2, 2, 0);
    tc_call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT); /* node rank out of range */

    /* -1 alone is "assign by arrival" (joined below); any other negative
     * rank is refused, not taken for it */
    static const int negative[] = {-2, -5, INT_MIN};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(negative); i++) {
        r = tc_join_req(4, 2, negative[i], 0);
        tc_call(co, &c, MSR_RPC_JOIN, &r.base);
        MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
        MSR_CHECK_MSG(strstr(c.message, "is not a node rank") != NULL, "%s", c.message);
    }

    tc_join(co, 0, 4, 2, 1);
    r = tc_join_req(4, 2, 1, 0);
    tc_call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_FAILED_PRECONDITION);
    MSR_CHECK(strstr(c.message, "node rank 1 is already taken") != NULL);

    tc_join(co, 1, 4, 2, -1);
    r = tc_join_req(4, 2, -1, 0);
    tc_call(co, &c, MSR_RPC_JOIN, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_RESOURCE_EXHAUSTED); /* full */
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_formation_and_ranks(void)
{
    msr_coord_t *co = tc_make_coord(6, 2, 0);
    const char *a = tc_join(co, 0, 6, 2, -1);
    const char *b = tc_join(co, 1, 6, 2, 0); /* wants rank 0 */
    tcall_t c = {0};
    Msr__HeartbeatResponse *r = tc_beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_WAITING);
    MSR_CHECK_EQ(r->joined_nodes, 1);
    MSR_CHECK_EQ(r->expected_nodes, 3);
    MSR_CHECK(r->n_missing >= 1);
    r = tc_beat(co, &c, b, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_WAITING);
    const char *d = tc_join(co, 2, 6, 2, -1);
    r = tc_beat(co, &c, d, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK(r->assignment != NULL);
    /* arrival order fills the ranks the explicit node did not take */
    MSR_CHECK_EQ(r->assignment->node_rank, 2);
    MSR_CHECK_EQ(r->assignment->rank_offset, 4);
    MSR_CHECK_EQ(r->assignment->world_size, 6);
    r = tc_beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(r->assignment->node_rank, 1);
    r = tc_beat(co, &c, b, 0, 0);
    MSR_CHECK_EQ(r->assignment->node_rank, 0);
    MSR_CHECK_EQ(r->assignment->rank_offset, 0);
    MSR_CHECK_STR(r->assignment->master_addr, "127.0.0.1");
    MSR_CHECK_EQ(r->assignment->master_port, 5000);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* Four nodes of 2 workers on machines 7, 9, 7 and 7: each is told the
 * generation's ranks on its machine (6, 2, 6, 6). A node that did not tell
 * its machine (an older msrun) makes it 0 for all, so that every node's
 * workers count through the store and meet at its barrier. */
static void test_machine_ranks(void)
{
    uint64_t machines[2][4] = {{7, 9, 7, 7}, {7, 9, 0, 7}};
    int want[2][4] = {{6, 2, 6, 6}, {0, 0, 0, 0}};
    for (int k = 0; k < 2; k++) {
        msr_coord_t *co = tc_make_coord(8, 2, 0);
        const char *ids[4];
        for (int i = 0; i < 4; i++) {
            tc_join_machine = machines[k][i];
            ids[i] = tc_join(co, i, 8, 2, -1);
        }
        tc_join_machine = 0;
        tcall_t c = {0};
        for (int i = 0; i < 4; i++)
            tc_beat(co, &c, ids[i], 0, 0);
        for (int i = 0; i < 4; i++) {
            Msr__HeartbeatResponse *r = tc_beat(co, &c, ids[i], 0, 0);
            MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RUNNING);
            MSR_CHECK(r->assignment != NULL);
            MSR_CHECK_MSG(r->assignment->machine_ranks == want[k][i],
                          "case %d, node %d (machine %llu): %d ranks on its machine, want %d", k, i,
                          (unsigned long long)machines[k][i], r->assignment->machine_ranks,
                          want[k][i]);
        }
        msr_tcall_reset(&c);
        msr_coord_destroy(co);
    }
}

static void test_heartbeat_long_poll(void)
{
    msr_coord_t *co = tc_make_coord(2, 1, 0);
    const char *a = tc_join(co, 0, 2, 1, -1);
    const char *b = tc_join(co, 1, 2, 1, -1);
    tcall_t held = {0}, c = {0};
    Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
    r.node_id = (char *)a;
    r.generation = 0;
    r.known_state = MSR__JOB_STATE__JOB_WAITING;
    r.ready_generation = 0;
    r.wait_ms = 5000;
    tc_call(co, &held, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(!held.answered); /* nothing changed: held */
    tc_beat(co, &c, b, 0, 0);  /* the job forms: the held beat is answered */
    MSR_CHECK(held.answered);
    MSR_CHECK_EQ(((Msr__HeartbeatResponse *)held.resp)->state, MSR__JOB_STATE__JOB_RUNNING);
    /* a held beat times out into a normal answer */
    r.known_state = MSR__JOB_STATE__JOB_RUNNING;
    r.wait_ms = 50;
    tc_call(co, &held, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK(!held.answered);
    msr_sleep_ms(60);
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK(held.answered && held.code == 0);
    /* a cancelled beat is forgotten */
    tc_call(co, &held, MSR_RPC_HEARTBEAT, &r.base);
    MSR_CHECK_MSG(!held.answered, "answered at once: %d %s", held.code, held.message);
    msr_coord_cancel(co, &held);
    msr_coord_tick(co, msr_now_ns() + 100000000ull);
    MSR_CHECK(!held.answered);
    msr_tcall_reset(&held);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_failure_restart_and_done(void)
{
    msr_coord_t *co = tc_make_coord(2, 1, 1);
    const char *a = tc_join(co, 0, 2, 1, -1);
    const char *b = tc_join(co, 1, 2, 1, -1);
    tcall_t c = {0};
    tc_beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(tc_beat(co, &c, b, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    tc_report(co, a, 0, 0, 3, 0); /* rank 0 fails: one restart left */
    Msr__HeartbeatResponse *r = tc_beat(co, &c, b, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RESTARTING);
    MSR_CHECK_EQ(r->generation, 1);
    MSR_CHECK_EQ(r->restart_count, 1);
    MSR_CHECK(r->failure != NULL && r->failure->exit_code == 3 && r->failure->rank == 0);
    MSR_CHECK(r->failure->n_stderr_tail == 1);
    MSR_CHECK_STR(r->failure->stderr_tail[0], "boom");
    /* a late report from the old generation changes nothing */
    tc_report(co, b, 0, 1, 9, 0);
    MSR_CHECK_EQ(tc_beat(co, &c, b, 0, 0)->generation, 1);
    /* both stop their workers and are ready for generation 1 */
    tc_beat(co, &c, a, 1, 1);
    MSR_CHECK_EQ(tc_beat(co, &c, b, 1, 1)->state, MSR__JOB_STATE__JOB_RUNNING);
    tc_report(co, a, 1, 0, 0, 0);
    MSR_CHECK_EQ(tc_beat(co, &c, a, 1, 1)->state, MSR__JOB_STATE__JOB_RUNNING);
    tc_report(co, b, 1, 1, 0, 0);
    MSR_CHECK_EQ(tc_beat(co, &c, a, 1, 1)->state, MSR__JOB_STATE__JOB_DONE);
    MSR_CHECK(!msr_coord_finished(co));
    Msr__LeaveRequest lv = MSR__LEAVE_REQUEST__INIT;
    lv.node_id = (char *)a;
    tc_call(co, &c, MSR_RPC_LEAVE, &lv.base);
    lv.node_id = (char *)b;
    tc_call(co, &c, MSR_RPC_LEAVE, &lv.base);
    MSR_CHECK(msr_coord_finished(co));
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* A failure that followed a lost peer ends the generation, and the failure
 * the peer loss followed, reported after it, becomes the root cause; a later
 * one of either kind changes nothing, nor does one after a real cause. */
static void test_root_cause_after_peer_lost(void)
{
    msr_coord_t *co = tc_make_coord(2, 1, 2);
    const char *a = tc_join(co, 0, 2, 1, -1);
    const char *b = tc_join(co, 1, 2, 1, -1);
    tcall_t c = {0};
    tc_beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(tc_beat(co, &c, b, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    tc_report_lost(co, a, 0, 0, 1, 0, 1); /* rank 0 saw rank 1 lost, exited 1 */
    Msr__HeartbeatResponse *r = tc_beat(co, &c, b, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RESTARTING);
    MSR_CHECK(r->failure && r->failure->rank == 0 && r->failure->after_peer_lost);
    MSR_CHECK(strstr(r->message, "after losing a communication peer") != NULL);
    tc_report(co, b, 0, 1, 0, 9); /* rank 1's SIGKILL, reported later */
    r = tc_beat(co, &c, b, 0, 0);
    MSR_CHECK_EQ(r->generation, 1);
    MSR_CHECK_EQ(r->restart_count, 1);
    MSR_CHECK(r->failure && r->failure->rank == 1 && r->failure->signal == 9 &&
              !r->failure->after_peer_lost);
    MSR_CHECK(strstr(r->message, "restart 1 of 2 after rank 1") != NULL);
    tc_report_lost(co, a, 0, 0, 1, 0, 1); /* neither kind changes it now */
    tc_report(co, b, 0, 1, 5, 0);
    Msr__StatusResponse *s = tc_status(co, &c);
    MSR_CHECK_EQ(s->n_failures, 1);
    MSR_CHECK(s->failures[0]->rank == 1 && s->failures[0]->signal == 9);
    /* generation 1: a real cause first, a peer's exit after it */
    tc_beat(co, &c, a, 1, 1);
    MSR_CHECK_EQ(tc_beat(co, &c, b, 1, 1)->state, MSR__JOB_STATE__JOB_RUNNING);
    tc_report(co, a, 1, 0, 3, 0);
    tc_report_lost(co, b, 1, 1, 1, 0, 1);
    tc_report(co, b, 1, 1, 4, 0);
    s = tc_status(co, &c);
    MSR_CHECK_EQ(s->n_failures, 2);
    MSR_CHECK(s->failures[1]->rank == 0 && s->failures[1]->exit_code == 3);
    /* generation 2, no restarts left: the job fails, and its message names
     * the root cause that comes in late */
    tc_beat(co, &c, a, 2, 2);
    MSR_CHECK_EQ(tc_beat(co, &c, b, 2, 2)->state, MSR__JOB_STATE__JOB_RUNNING);
    tc_report_lost(co, b, 2, 1, 1, 0, 1);
    MSR_CHECK_EQ(tc_beat(co, &c, a, 2, 2)->state, MSR__JOB_STATE__JOB_FAILED);
    tc_report(co, a, 2, 0, 7, 0);
    r = tc_beat(co, &c, a, 2, 2);
    MSR_CHECK(r->failure && r->failure->rank == 0 && r->failure->exit_code == 7);
    MSR_CHECK(strstr(r->message, "rank 0 on node 0") && strstr(r->message, "no restarts left"));
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_restarts_exhausted(void)
{
    msr_coord_t *co = tc_make_coord(1, 1, 0);
    const char *a = tc_join(co, 0, 1, 1, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    tc_report(co, a, 0, 0, 0, 9); /* killed by SIGKILL */
    Msr__HeartbeatResponse *r = tc_beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_FAILED);
    MSR_CHECK_EQ(r->failure->signal, 9);
    MSR_CHECK(strstr(r->message, "SIGKILL") != NULL);
    /* no new node joins an ended job */
    Msr__JoinRequest j = tc_join_req(1, 1, -1, 0);
    tc_call(co, &c, MSR_RPC_JOIN, &j.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_FAILED_PRECONDITION);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_node_lost(void)
{
    tc_job_node_timeout_ms = 300;
    msr_coord_t *co = tc_make_coord(2, 1, 0);
    tc_job_node_timeout_ms = LONG_NODE_TIMEOUT_MS;
    const char *a = tc_join(co, 0, 2, 1, -1);
    const char *b = tc_join(co, 1, 2, 1, -1);
    tcall_t c = {0};
    tc_beat(co, &c, a, 0, 0);
    uint64_t silent = msr_now_ns(); /* b's last call is after this */
    tc_beat(co, &c, b, 0, 0);
    /* b goes silent; a keeps beating until b is lost, not before the node
     * timeout (300 ms) and within 5 s (the timeout is checked every 75 ms) */
    const char *live[] = {a};
    uint64_t lost = tc_beat_until_changed(co, live, 1, 0, MSR__JOB_STATE__JOB_RUNNING, 5000);
    MSR_CHECK_MSG(lost - silent >= 300 * 1000000ull, "b was lost after %.0f ms of silence",
                  (double)(lost - silent) / 1e6);
    Msr__HeartbeatResponse *r = tc_beat(co, &c, a, 0, 0);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_FAILED);
    MSR_CHECK(r->failure && r->failure->rank == -1);
    MSR_CHECK(strstr(r->message, "lost") != NULL);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* Is the job failed (a node lost) after its two nodes' last calls, then
 * stall_ms in which the coordinator took no call (told with
 * msr_coord_deaf when deaf), then heard_ms of listening? With broke,
 * node b's connection broke after its call (a grace of the node timeout,
 * 300 ms, instead of the timeout). */
static int lost_after(int deaf, int broke, uint64_t stall_ms, uint64_t heard_ms)
{
    const uint64_t ms = 1000000ull;
    tc_job_node_timeout_ms = 300;
    msr_coord_t *co = tc_make_coord(2, 1, 0);
    tc_job_node_timeout_ms = LONG_NODE_TIMEOUT_MS;
    const char *a = tc_join(co, 0, 2, 1, -1);
    const char *b = tc_join(co, 1, 2, 1, -1);
    tcall_t c = {0}, held = {0};
    tc_beat(co, &c, a, 0, 0);
    tc_beat(co, &c, b, 0, 0);
    if (broke) {
        Msr__HeartbeatRequest r = MSR__HEARTBEAT_REQUEST__INIT;
        r.node_id = (char *)b;
        r.known_state = MSR__JOB_STATE__JOB_RUNNING;
        r.ready_generation = 0;
        r.wait_ms = 5000;
        tc_call(co, &held, MSR_RPC_HEARTBEAT, &r.base);
        MSR_CHECK(!held.answered);
        msr_coord_cancel(co, &held);
    }
    uint64_t t0 = msr_now_ns();
    if (deaf)
        msr_coord_deaf(co, t0, t0 + stall_ms * ms);
    msr_coord_check_nodes(co, t0 + (stall_ms + heard_ms) * ms);
    int lost = msr_coord_state(co) == MSR_JOB_FAILED;
    msr_tcall_reset(&c);
    msr_tcall_reset(&held);
    msr_coord_destroy(co);
    return lost;
}

/* A save that waited on etcd for seconds held the coordinator's loop: a
 * node answered just before could not call again, and one lost for it
 * was the coordinator's own stall (fault_etcd_silent). That time counts
 * as no node's silence; the time after it does (node timeout 300 ms). */
static void test_node_deaf(void)
{
    MSR_CHECK(lost_after(0, 0, 3000, 100)); /* the stall, counted, loses them */
    MSR_CHECK(!lost_after(1, 0, 3000, 100));
    MSR_CHECK(!lost_after(1, 0, 3000, 150));
    MSR_CHECK(lost_after(1, 0, 3000, 450)); /* heard nothing for longer than 300 ms */
    MSR_CHECK(!lost_after(0, 0, 0, 100));
    /* a broken connection's grace is shifted the same way */
    MSR_CHECK(lost_after(0, 1, 3000, 100));
    MSR_CHECK(!lost_after(1, 1, 3000, 100));
    MSR_CHECK(lost_after(1, 1, 3000, 450));
}

static void test_elastic(void)
{
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "job",
                              .worker_num = 4,
                              .local_worker_num = 1,
                              .max_restarts = 2,
                              .min_nodes = 2,
                              .max_nodes = 4,
                              .last_call_ms = 50,
                              /* msrun's default: a live node is lost
                               * only if this process stalls that long
                               * between its calls and a tick (the loop
                               * below ticks at times read before the live
                               * nodes' beats); it also sets how often
                               * the coordinator looks (a quarter of it) */
                              .node_timeout_ms = 5000,
                              .join_timeout_ms = 60000};
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    tcall_t c = {0};
    char ids[4][64];
    for (int i = 0; i < 3; i++) {
        Msr__JoinRequest j = tc_join_req(4, 1, -1, 2);
        j.min_nodes = 2;
        j.max_nodes = 4;
        j.pid = 200 + i;
        tc_call(co, &c, MSR_RPC_JOIN, &j.base);
        MSR_CHECK_MSG(c.code == 0, "join: %s", c.message);
        snprintf(ids[i], sizeof ids[i], "%s", ((Msr__JoinResponse *)c.resp)->node_id);
        if (i == 1) {
            /* two nodes (MIN) ready: the job forms after the last call */
            tc_beat(co, &c, ids[0], 0, 0);
            MSR_CHECK_EQ(tc_beat(co, &c, ids[1], 0, 0)->state, MSR__JOB_STATE__JOB_WAITING);
            Msr__HeartbeatResponse *r =
                tc_beat_until_state(co, &c, ids[0], 0, MSR__JOB_STATE__JOB_RUNNING, 5000);
            MSR_CHECK_EQ(r->assignment->world_size, 2);
            MSR_CHECK_EQ(r->assignment->node_count, 2);
        }
    }
    /* a fixed node rank is refused in an elastic job */
    Msr__JoinRequest j = tc_join_req(4, 1, 1, 2);
    j.min_nodes = 2;
    j.max_nodes = 4;
    tc_call(co, &c, MSR_RPC_JOIN, &j.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    /* the third node is taken in at the next generation, without a restart */
    Msr__HeartbeatResponse *r =
        tc_beat_until_state(co, &c, ids[0], 0, MSR__JOB_STATE__JOB_RESTARTING, 5000);
    MSR_CHECK_EQ(r->generation, 1);
    MSR_CHECK_EQ(r->restart_count, 0);
    for (int i = 0; i < 3; i++)
        r = tc_beat(co, &c, ids[i], 1, 1);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(r->assignment->world_size, 3);
    int ranks_seen = 0;
    for (int i = 0; i < 3; i++)
        ranks_seen |= 1 << tc_beat(co, &c, ids[i], 1, 1)->assignment->node_rank;
    MSR_CHECK_EQ(ranks_seen, 7);
    /* node 1's connection breaks: lost after the short grace (1.5 s, the
     * coordinator's for a broken long poll), the job re-forms on the two
     * left, renumbered, one restart counted */
    const uint64_t grace_ns = 1500 * 1000000ull;
    tcall_t held = {0};
    Msr__HeartbeatRequest h = MSR__HEARTBEAT_REQUEST__INIT;
    h.node_id = ids[1];
    h.generation = 1;
    h.known_state = MSR__JOB_STATE__JOB_RUNNING;
    h.ready_generation = 1;
    h.wait_ms = 10000;
    tc_call(co, &held, MSR_RPC_HEARTBEAT, &h.base);
    MSR_CHECK(!held.answered);
    uint64_t broke = msr_now_ns();
    msr_coord_cancel(co, &held);
    /* the others keep beating until it is lost: after the grace and the
     * coordinator's next look (1.25 s later at the most), 10 s at most */
    const char *live[] = {ids[0], ids[2]};
    uint64_t lost = tc_beat_until_changed(co, live, 2, 1, MSR__JOB_STATE__JOB_RUNNING, 10000);
    MSR_CHECK_MSG(lost - broke >= grace_ns, "lost %.0f ms after its connection broke",
                  (double)(lost - broke) / 1e6);
    r = tc_beat(co, &c, ids[0], 1, 1);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RESTARTING);
    MSR_CHECK_EQ(r->restart_count, 1);
    tc_beat(co, &c, ids[0], 2, 2);
    r = tc_beat(co, &c, ids[2], 2, 2);
    MSR_CHECK_EQ(r->state, MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(r->assignment->world_size, 2);
    int a0 = tc_beat(co, &c, ids[0], 2, 2)->assignment->node_rank;
    int a2 = tc_beat(co, &c, ids[2], 2, 2)->assignment->node_rank;
    MSR_CHECK((a0 == 0 && a2 == 1) || (a0 == 1 && a2 == 0));
    msr_tcall_reset(&c);
    msr_tcall_reset(&held);
    msr_coord_destroy(co);
}

/* ---- an elastic job grows at the workers' checkpoint (msrun/store.h
 * MSR_KEY_JOIN_*) ---- */

/* key's value in generation gen's store into out ("" when absent). */
static void get_gen(msr_coord_t *co, const char *key, int gen, char *out, size_t len)
{
    tcall_t c = {0};
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = (char *)key;
    g.generation = gen;
    tc_call(co, &c, MSR_RPC_GET, &g.base);
    out[0] = '\0';
    if (c.code == 0) {
        Msr__GetResponse *r = (Msr__GetResponse *)c.resp;
        MSR_CHECK(r->value.len < len);
        memcpy(out, r->value.data, r->value.len);
        out[r->value.len] = '\0';
    } else {
        MSR_CHECK_EQ(c.code, GRPC_STATUS_NOT_FOUND);
    }
    msr_tcall_reset(&c);
}

/* An elastic job (2 to 3 nodes, last call 50 ms, joins held at most
 * hold_ms) running on two nodes; *t_p: the time the third node joined,
 * between t_p[0] and t_p[1]. The workers announced that they save first
 * when saves is set. */
static msr_coord_t *grown_coord_cfg(msr_coord_config_t cfg, int saves, char ids[3][64],
                                    uint64_t t_p[2]);

static msr_coord_t *grown_coord(int64_t hold_ms, int saves, char ids[3][64], uint64_t t_p[2])
{
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "job",
                              .worker_num = 3,
                              .local_worker_num = 1,
                              .min_nodes = 2,
                              .max_nodes = 3,
                              .last_call_ms = 50,
                              .node_timeout_ms = LONG_NODE_TIMEOUT_MS,
                              .join_timeout_ms = hold_ms};
    return grown_coord_cfg(cfg, saves, ids, t_p);
}

static msr_coord_t *grown_coord_cfg(msr_coord_config_t cfg, int saves, char ids[3][64],
                                    uint64_t t_p[2])
{
    msr_coord_t *co = NULL;
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    tcall_t c = {0};
    for (int i = 0; i < 3; i++) {
        Msr__JoinRequest j = tc_join_req(3, 1, -1, 0);
        j.min_nodes = 2;
        j.max_nodes = 3;
        j.pid = 300 + i;
        if (i == 2) {
            if (saves)
                tc_set_kv(co, MSR_KEY_JOIN_SAVES, "1");
            t_p[0] = msr_now_ns();
        }
        tc_call(co, &c, MSR_RPC_JOIN, &j.base);
        MSR_CHECK_MSG(c.code == 0, "join: %s", c.message);
        snprintf(ids[i], 64, "%s", ((Msr__JoinResponse *)c.resp)->node_id);
        if (i == 1) { /* MIN ready: the job forms after the last call */
            tc_beat(co, &c, ids[0], 0, 0);
            tc_beat(co, &c, ids[1], 0, 0);
            tc_beat_until_state(co, &c, ids[0], 0, MSR__JOB_STATE__JOB_RUNNING, 5000);
        }
    }
    t_p[1] = msr_now_ns();
    msr_tcall_reset(&c);
    return co;
}

/* The job's state after a tick at now (node 0 beating in generation 0). */
static Msr__JobState state_at(msr_coord_t *co, const char *id, uint64_t now)
{
    tcall_t c = {0};
    msr_coord_tick(co, now);
    Msr__JobState st = tc_beat(co, &c, id, 0, 0)->state;
    msr_tcall_reset(&c);
    return st;
}

static void test_elastic_join_hold(void)
{
    const uint64_t ms = 1000000ull, hold = 2000 * ms;
    char ids[3][64], v[32];
    uint64_t t[2];
    /* the workers told: one node waits */
    msr_coord_t *co = grown_coord(2000, 1, ids, t);
    get_gen(co, MSR_KEY_JOIN_WAITING, 0, v, sizeof v);
    MSR_CHECK_MSG(strcmp(v, "1") == 0, "waiting: '%s'", v);
    /* held past the last call while the workers save, up to the bound
     * (the join's time + --cluster_time_out) and not one tick past it */
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + 60 * ms), MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(state_at(co, ids[0], t[0] + hold - 1), MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + hold), MSR__JOB_STATE__JOB_RESTARTING);
    msr_coord_destroy(co);
    /* READY ends the hold at the next look (20 ms) */
    co = grown_coord(60000, 1, ids, t);
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + 60 * ms), MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + 90 * ms), MSR__JOB_STATE__JOB_RUNNING);
    tc_set_kv(co, MSR_KEY_JOIN_READY, "1");
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + 120 * ms), MSR__JOB_STATE__JOB_RESTARTING);
    msr_coord_destroy(co);
    /* no SAVES: taken in at the last call, as before */
    co = grown_coord(60000, 0, ids, t);
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + 60 * ms), MSR__JOB_STATE__JOB_RESTARTING);
    msr_coord_destroy(co);
}

/* ---- --join_hold: the hold's own bound (msr_coord_config_t.join_hold_ms) ---- */

static msr_coord_config_t hold_cfg(int64_t hold_ms)
{
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "job",
                              .worker_num = 3,
                              .local_worker_num = 1,
                              .min_nodes = 2,
                              .max_nodes = 3,
                              .last_call_ms = 50,
                              .node_timeout_ms = LONG_NODE_TIMEOUT_MS,
                              .join_timeout_ms = 60000,
                              .join_hold_ms = hold_ms};
    return cfg;
}

static void test_elastic_join_hold_option(void)
{
    const uint64_t ms = 1000000ull, hold = 1500 * ms;
    char ids[3][64];
    uint64_t t[2];
    /* its own bound, not --cluster_time_out's 60 s: held one nanosecond
     * before it, re-formed at it */
    msr_coord_t *co = grown_coord_cfg(hold_cfg(1500), 1, ids, t);
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + 60 * ms), MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(state_at(co, ids[0], t[0] + hold - 1), MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + hold), MSR__JOB_STATE__JOB_RESTARTING);
    msr_coord_destroy(co);
    /* none (--join_hold=0): taken in at the last call though the workers
     * save */
    co = grown_coord_cfg(hold_cfg(MSR_COORD_JOIN_HOLD_NONE), 1, ids, t);
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + 60 * ms), MSR__JOB_STATE__JOB_RESTARTING);
    msr_coord_destroy(co);
    /* 0 (not given): --cluster_time_out's bound, as before */
    co = grown_coord_cfg(hold_cfg(0), 1, ids, t);
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + hold), MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + 60000 * ms), MSR__JOB_STATE__JOB_RESTARTING);
    msr_coord_destroy(co);
}

/* ---- a join's wait and hold survive a coordinator restart (the state
 * file's join_wall_ns and the saved MSR_KEY_JOIN_WAITING) ---- */

static void test_elastic_join_restart(void)
{
    const uint64_t ms = 1000000ull, hold = 1500 * ms;
    char dir[] = "/tmp/msrun-coord-test-XXXXXX";
    MSR_CHECK(mkdtemp(dir) != NULL);
    char path[128], ids[3][64], v[32];
    snprintf(path, sizeof path, "%s/state", dir);
    uint64_t t[2];
    msr_coord_config_t cfg = hold_cfg(1500);
    cfg.state_file = path;
    msr_coord_t *co = grown_coord_cfg(cfg, 1, ids, t);
    msr_coord_tick(co, msr_now_ns()); /* saved */
    msr_coord_destroy(co);            /* the coordinator dies after the join */
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    /* the workers still see the join */
    get_gen(co, MSR_KEY_JOIN_WAITING, 0, v, sizeof v);
    MSR_CHECK_MSG(strcmp(v, "1") == 0, "waiting after a restart: '%s'", v);
    /* still held for the save past the last call, up to the bound counted
     * from the join (the wall clock across the restart: 1 ms of slack),
     * then re-formed */
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + 60 * ms), MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(state_at(co, ids[0], t[0] + hold - ms), MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + hold + ms), MSR__JOB_STATE__JOB_RESTARTING);
    msr_coord_tick(co, msr_now_ns());
    msr_coord_destroy(co);
    /* without the save, taken in at the last call after a restart too */
    unlink(path);
    cfg = hold_cfg(1500);
    cfg.state_file = path;
    co = grown_coord_cfg(cfg, 0, ids, t);
    msr_coord_tick(co, msr_now_ns());
    msr_coord_destroy(co);
    MSR_CHECK_OK(msr_coord_create(&cfg, &msr_tcall_responder, &co));
    MSR_CHECK_EQ(state_at(co, ids[0], t[1] + 60 * ms), MSR__JOB_STATE__JOB_RESTARTING);
    msr_coord_destroy(co);
    unlink(path);
    rmdir(dir);
}

static const msr_test_t tests[] = {
    {"join_validation", test_join_validation, 10},
    {"formation_and_ranks", test_formation_and_ranks, 10},
    {"machine_ranks", test_machine_ranks, 10},
    {"heartbeat_long_poll", test_heartbeat_long_poll, 10},
    {"failure_restart_and_done", test_failure_restart_and_done, 10},
    {"root_cause_after_peer_lost", test_root_cause_after_peer_lost, 10},
    {"restarts_exhausted", test_restarts_exhausted, 10},
    {"node_lost", test_node_lost, 10},
    {"node_deaf", test_node_deaf, 10},
    {"elastic", test_elastic, 20},
    {"elastic_join_hold", test_elastic_join_hold, 20},
    {"elastic_join_hold_option", test_elastic_join_hold_option, 20},
    {"elastic_join_restart", test_elastic_join_restart, 20},
};

const msr_test_piece_t tc_members_tests = MSR_TEST_PIECE(tests);
