/* A node's Barrier calls merged at a relay (rendezvous/relay.h,
 * docs/architecture.md "Relays") against a coordinator on loopback, the
 * relay's server polled by the test itself so that it decides which calls
 * arrive within one poll: three callers go upstream as one arrival of 3;
 * one of them giving up is taken back (a direct caller then finds 3 of 4
 * arrived, not 4), and the other two meet two direct callers; the
 * coordinator served one Barrier call for the three. A relay dying
 * mid-merge: its callers meet again at the coordinator, counted once. */
#include "tests/unit_rdzv/relay_ops.h"

typedef msr_top_t op_t;

/* A Barrier "b" of count over ch: its call's deadline in ms, its wait in
 * the store wait_ms. */
static void barrier_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, op_t *o, uint32_t count,
                          int64_t ms, uint32_t wait_ms)
{
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.name = "b";
    r.count = count;
    r.wait_ms = wait_ms;
    msr_top_start(ch, loop, o, MSR_RPC_BARRIER, &r.base, ms);
}

typedef struct relay_at {
    msr_relay_server_t *server;
    uint64_t forwarding, withdrawals;
} relay_at_t;

static int relay_reached(void *arg)
{
    relay_at_t *r = arg;
    uint64_t calls, arrivals, withdrawals;
    msr_relay_server_merges(r->server, &calls, &arrivals, &withdrawals);
    return msr_relay_server_forwarding(r->server) == r->forwarding && withdrawals == r->withdrawals;
}

static void test_merged_give_up(void)
{
    msr_trig_t g;
    msr_trig_start(&g);
    msr_rpc_loop_t *loop = g.loop;
    /* A, B and C (which gives up after 1.5 s) reach the relay in one poll:
     * one arrival of 3 */
    op_t o[6];
    barrier_start(g.via, loop, &o[0], 4, 20000, 15000);
    barrier_start(g.via, loop, &o[1], 4, 20000, 15000);
    barrier_start(g.via, loop, &o[2], 4, 1500, 15000);
    relay_at_t at = {g.relay, 3, 0};
    msr_tpoll_until(loop, relay_reached, &at, "three Barrier calls at the relay");
    uint64_t before = msr_tcoord_served(g.s.target, "Barrier");
    msr_relay_server_flush(g.relay);
    uint64_t calls, arrivals, withdrawals;
    msr_relay_server_merges(g.relay, &calls, &arrivals, &withdrawals);
    MSR_CHECK_EQ(calls, 3);
    MSR_CHECK_EQ(arrivals, 1);
    /* C gives up: taken back once the coordinator answers the withdrawal */
    msr_tpoll_until(loop, msr_top_is_done, &o[2], "C giving up");
    MSR_CHECK_EQ(o[2].a.grpc_code, MSR_RPC_DEADLINE_EXCEEDED);
    at = (relay_at_t){g.relay, 2, 1};
    msr_tpoll_until(loop, relay_reached, &at, "C taken back upstream");
    /* D alone finds A and B: 3 of 4 (with C still counted, 4 of 4) */
    barrier_start(g.direct, loop, &o[3], 4, 20000, 1000);
    msr_tpoll_until(loop, msr_top_is_done, &o[3], "D");
    MSR_CHECK_MSG(o[3].a.grpc_code == MSR_RPC_DEADLINE_EXCEEDED &&
                      strstr(o[3].a.err, "3 of 4 participants arrived"),
                  "D: %d %s", o[3].a.grpc_code, o[3].a.err);
    MSR_CHECK(!o[0].done && !o[1].done);
    /* E and F complete it with A and B */
    barrier_start(g.direct, loop, &o[4], 4, 20000, 15000);
    barrier_start(g.direct, loop, &o[5], 4, 20000, 15000);
    for (int k = 0; k < 6; k++)
        msr_tpoll_until(loop, msr_top_is_done, &o[k], "the barrier's callers");
    for (int k = 0; k < 6; k++)
        if (k != 2 && k != 3)
            MSR_CHECK_MSG(o[k].a.status == MSR_OK, "caller %d: %d %s", k, o[k].a.grpc_code,
                          o[k].a.err);
    /* the coordinator: one arrival, one withdrawal, D, E and F */
    MSR_CHECK_EQ(msr_tcoord_served(g.s.target, "Barrier") - before, 5);
    for (int k = 0; k < 6; k++)
        msr_rpc_async_cleanup(&o[k].a);
    msr_trig_stop(&g);
}

/* A relay that dies mid-merge: its arrival of 2 is taken back upstream
 * (a probe of another count no longer finds the barrier), and its two
 * callers, answered UNAVAILABLE, meet a third at the coordinator directly:
 * counted once each. */
static void test_relay_dies_mid_merge(void)
{
    msr_trig_t g;
    msr_trig_start(&g);
    msr_rpc_loop_t *loop = g.loop;
    op_t o[3];
    barrier_start(g.via, loop, &o[0], 3, 20000, 15000);
    barrier_start(g.via, loop, &o[1], 3, 20000, 15000);
    relay_at_t at = {g.relay, 2, 0};
    msr_tpoll_until(loop, relay_reached, &at, "two Barrier calls at the relay");
    uint64_t before = msr_tcoord_served(g.s.target, "Barrier");
    msr_relay_server_flush(g.relay);
    /* the arrival reached the coordinator (a probe sent before it would
     * make a barrier of count 4 that refuses the arrival) */
    uint64_t limit = msr_deadline_in_ms(20000);
    while (msr_tcoord_served(g.s.target, "Barrier") == before) {
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "the merged arrival never reached it");
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(20));
    }
    /* counted there: a barrier of count 4 is refused */
    op_t probe;
    int code;
    barrier_start(g.direct, loop, &probe, 4, 20000, 50);
    msr_tpoll_until(loop, msr_top_is_done, &probe, "a probe");
    MSR_CHECK_EQ(probe.a.grpc_code, MSR_RPC_INVALID_ARGUMENT);
    msr_rpc_async_cleanup(&probe.a);
    msr_relay_server_destroy(g.relay);
    g.relay = NULL;
    msr_rpc_channel_destroy(g.up);
    g.up = NULL;
    for (int k = 0; k < 2; k++) {
        msr_tpoll_until(loop, msr_top_is_done, &o[k], "a merged caller");
        MSR_CHECK_EQ(o[k].a.grpc_code, MSR_RPC_UNAVAILABLE);
        msr_rpc_async_cleanup(&o[k].a);
    }
    /* taken back: a probe of count 4 makes a barrier of its own (expired) */
    limit = msr_deadline_in_ms(20000);
    do {
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "the dead relay's arrival still counts");
        barrier_start(g.direct, loop, &probe, 4, 20000, 50);
        msr_tpoll_until(loop, msr_top_is_done, &probe, "a probe");
        code = probe.a.grpc_code;
        msr_rpc_async_cleanup(&probe.a);
    } while (code != MSR_RPC_DEADLINE_EXCEEDED);
    for (int k = 0; k < 3; k++)
        barrier_start(g.direct, loop, &o[k], 3, 20000, 15000);
    for (int k = 0; k < 3; k++) {
        msr_tpoll_until(loop, msr_top_is_done, &o[k], "the callers again, directly");
        MSR_CHECK_MSG(o[k].a.status == MSR_OK, "caller %d: %d %s", k, o[k].a.grpc_code, o[k].a.err);
        msr_rpc_async_cleanup(&o[k].a);
    }
    msr_trig_stop(&g);
}

static const msr_test_t tests[] = {
    {"merged_give_up", test_merged_give_up, 60},
    {"relay_dies_mid_merge", test_relay_dies_mid_merge, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests); /* gRPC starts in each test's process */
}
