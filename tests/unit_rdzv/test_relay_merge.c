/* A node's Barrier calls merged at a relay (rendezvous/relay.h,
 * docs/architecture.md "Relays") against a coordinator on loopback, the
 * relay's server polled by the test itself so that it decides which calls
 * arrive within one poll: three callers go upstream as one arrival of 3;
 * one of them giving up is taken back (a direct caller then finds 3 of 4
 * arrived, not 4), and the other two meet two direct callers; the
 * coordinator served one Barrier call for the three. A relay dying
 * mid-merge: its callers meet again at the coordinator, counted once. A
 * relay killed after the coordinator released its arrival and before it
 * passed the release on: its callers, sent again with their ids, are
 * answered released at once (directly, or merged at another relay), and
 * the next barrier of that name counts afresh. Withdrawals that overtake
 * their arrival (all of its parts: answered CANCELLED), and a merge past
 * the barrier's count (only the excess refused). */
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* The same with the caller's ids (client 7, request id), its deadline
 * in ms. */
static void barrier_start_idl(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, op_t *o, uint32_t count,
                              int64_t ms, uint32_t wait_ms, uint64_t id)
{
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.name = "b";
    r.count = count;
    r.wait_ms = wait_ms;
    r.client_id = 7;
    r.request_id = id;
    msr_top_start(ch, loop, o, MSR_RPC_BARRIER, &r.base, ms);
}

/* The same with a deadline of 20 s. */
static void barrier_start_id(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, op_t *o, uint32_t count,
                             uint32_t wait_ms, uint64_t id)
{
    barrier_start_idl(ch, loop, o, count, 20000, wait_ms, id);
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

/* ---- a relay in a process of its own, stopped and killed ---- */

/* The relay's process: reads the coordinator's target on rfd, serves
 * relay "k" of 4 nodes, writes its port on wfd; sends the first 3 Barrier
 * calls as one arrival and stops itself (SIGSTOP) once the coordinator
 * served it, so that the release that follows reaches a relay that never
 * passes it on. It dies with the test's process. */
static void relay_proc(int rfd, int wfd)
{
    char target[64] = "";
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1 || read(rfd, target, sizeof target - 1) <= 0)
        _exit(1);
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *up;
    msr_relay_server_t *relay;
    int port = 0;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(target, "tok", &up));
    MSR_CHECK_OK(msr_relay_server_create(loop, "127.0.0.1:0", "tok", up, "k", 4, &port, &relay));
    MSR_CHECK(write(wfd, &port, sizeof port) == (ssize_t)sizeof port);
    uint64_t before = msr_tcoord_served(target, "Barrier");
    while (msr_relay_server_forwarding(relay) < 3)
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(20));
    msr_relay_server_flush(relay);
    while (msr_tcoord_served(target, "Barrier") == before)
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(20));
    raise(SIGSTOP);
    for (;;)
        pause();
}

/* Forks the relay's process before this one starts gRPC, then starts the
 * coordinator and hands it its target: the relay's pid and port. */
static pid_t relay_proc_start(msr_tserved_t *s, int *port_p)
{
    int to[2], from[2];
    MSR_CHECK(pipe(to) == 0 && pipe(from) == 0);
    pid_t pid = fork();
    MSR_CHECK(pid >= 0);
    if (pid == 0) {
        close(to[1]);
        close(from[0]);
        relay_proc(to[0], from[1]);
    }
    close(to[0]);
    close(from[1]);
    msr_tserved_start_nodes(s, 8);
    MSR_CHECK(write(to[1], s->target, strlen(s->target)) == (ssize_t)strlen(s->target));
    struct pollfd p = {.fd = from[0], .events = POLLIN};
    MSR_CHECK_MSG(poll(&p, 1, 20000) == 1, "the relay's process never served");
    MSR_CHECK(read(from[0], port_p, sizeof *port_p) == (ssize_t)sizeof *port_p);
    close(to[1]);
    close(from[0]);
    return pid;
}

typedef struct stopped {
    pid_t pid;
    int stopped;
} stopped_t;

static int relay_stopped(void *arg)
{
    stopped_t *st = arg;
    int status;
    if (waitpid(st->pid, &status, WUNTRACED | WNOHANG) == st->pid)
        MSR_CHECK_MSG(WIFSTOPPED(status), "the relay's process ended: status %d", status);
    else
        return 0;
    return st->stopped = 1;
}

/* Callers 0 and 1 sent again through relay "a", merged with caller 4 of
 * the next barrier (new ids): the coordinator answers the arrival resend,
 * and each goes alone: 0 and 1 are answered released, 4 waits for the
 * next barrier. Caller 2 sent again directly: released too. */
static void resend_released(msr_trig_t *g, op_t *o)
{
    barrier_start_id(g->via, g->loop, &o[0], 4, 15000, 1);
    barrier_start_id(g->via, g->loop, &o[1], 4, 15000, 2);
    barrier_start_id(g->via, g->loop, &o[4], 4, 15000, 10);
    relay_at_t at = {g->relay, 3, 0};
    msr_tpoll_until(g->loop, relay_reached, &at, "three callers at relay a");
    msr_relay_server_flush(g->relay);
    barrier_start_id(g->direct, g->loop, &o[2], 4, 15000, 3);
    for (int k = 0; k < 3; k++) {
        msr_tpoll_until(g->loop, msr_top_is_done, &o[k], "a caller sent again");
        MSR_CHECK_MSG(o[k].a.status == MSR_OK, "caller %d sent again: %d %s", k, o[k].a.grpc_code,
                      o[k].a.err);
        msr_rpc_async_cleanup(&o[k].a);
    }
    uint64_t calls, arrivals, withdrawals;
    msr_relay_server_merges(g->relay, &calls, &arrivals, &withdrawals);
    MSR_CHECK_EQ(arrivals, 1);
    MSR_CHECK(!o[4].done);
}

/* The next barrier "b": caller 4 (above), one more and a probe find 3 of
 * 4 arrived (the callers sent again were not counted into it), two more
 * release it. */
static void next_barrier(msr_trig_t *g, op_t *o)
{
    uint64_t before = msr_tcoord_served(g->s.target, "Barrier");
    barrier_start_id(g->direct, g->loop, &o[0], 4, 15000, 11);
    uint64_t limit = msr_deadline_in_ms(20000);
    while (msr_tcoord_served(g->s.target, "Barrier") < before + 1) {
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "the next barrier's caller never arrived");
        msr_rpc_loop_poll(g->loop, msr_deadline_in_ms(20));
    }
    barrier_start(g->direct, g->loop, &o[1], 4, 20000, 1000);
    msr_tpoll_until(g->loop, msr_top_is_done, &o[1], "a probe");
    MSR_CHECK_MSG(o[1].a.grpc_code == MSR_RPC_DEADLINE_EXCEEDED &&
                      strstr(o[1].a.err, "3 of 4 participants arrived"),
                  "the probe: %d %s", o[1].a.grpc_code, o[1].a.err);
    msr_rpc_async_cleanup(&o[1].a);
    MSR_CHECK(!o[0].done && !o[4].done);
    barrier_start_id(g->direct, g->loop, &o[1], 4, 15000, 12);
    barrier_start_id(g->via, g->loop, &o[2], 4, 15000, 13);
    relay_at_t at = {g->relay, 2, 0};
    msr_tpoll_until(g->loop, relay_reached, &at, "the last caller at relay a");
    msr_relay_server_flush(g->relay);
    for (int k = 0; k < 5; k++) {
        if (k == 3)
            continue;
        msr_tpoll_until(g->loop, msr_top_is_done, &o[k], "the next barrier's callers");
        MSR_CHECK_MSG(o[k].a.status == MSR_OK, "next barrier, caller %d: %d %s", k,
                      o[k].a.grpc_code, o[k].a.err);
        msr_rpc_async_cleanup(&o[k].a);
    }
}

/* A relay killed after the coordinator released its arrival of 3 and
 * before it passed the release on: its callers, answered UNAVAILABLE and
 * sent again with their ids, are answered released, not counted into the
 * next barrier of that name (which would hold them to their wait). */
static void test_released_then_relay_killed(void)
{
    msr_trig_t g;
    int port;
    char target[64];
    stopped_t st = {relay_proc_start(&g.s, &port), 0};
    MSR_CHECK_OK(msr_rpc_loop_create(&g.loop));
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    msr_rpc_channel_t *killed;
    MSR_CHECK_OK(msr_rpc_channel_create_own(target, "tok", &killed));
    op_t o[5];
    for (int k = 0; k < 3; k++)
        barrier_start_id(killed, g.loop, &o[k], 4, 15000, (uint64_t)k + 1);
    msr_tpoll_until(g.loop, relay_stopped, &st, "the relay's arrival of 3 served");
    /* relay "a" in this process, for the callers sent again */
    MSR_CHECK_OK(msr_rpc_channel_create_own(g.s.target, "tok", &g.up));
    MSR_CHECK_OK(
        msr_relay_server_create(g.loop, "127.0.0.1:0", "tok", g.up, "a", 4, &port, &g.relay));
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    MSR_CHECK_OK(msr_rpc_channel_create_own(target, "tok", &g.via));
    MSR_CHECK_OK(msr_rpc_channel_create_own(g.s.target, "tok", &g.direct));
    /* the fourth releases the barrier; the stopped relay holds the release */
    barrier_start(g.direct, g.loop, &o[3], 4, 20000, 15000);
    msr_tpoll_until(g.loop, msr_top_is_done, &o[3], "the fourth caller");
    MSR_CHECK_MSG(o[3].a.status == MSR_OK, "the fourth: %d %s", o[3].a.grpc_code, o[3].a.err);
    msr_rpc_async_cleanup(&o[3].a);
    MSR_CHECK(kill(st.pid, SIGKILL) == 0);
    MSR_CHECK(waitpid(st.pid, NULL, 0) == st.pid);
    for (int k = 0; k < 3; k++) {
        msr_tpoll_until(g.loop, msr_top_is_done, &o[k], "a caller of the killed relay");
        MSR_CHECK_MSG(o[k].a.grpc_code == MSR_RPC_UNAVAILABLE, "caller %d: %d %s", k,
                      o[k].a.grpc_code, o[k].a.err);
        msr_rpc_async_cleanup(&o[k].a);
    }
    msr_rpc_channel_destroy(killed);
    resend_released(&g, o);
    next_barrier(&g, o);
    msr_trig_stop(&g);
}

/* ---- withdrawals in every order, the coordinator's side ---- */

/* What a relay sends for barrier "w" of count 6: its merged arrival
 * merge_id 99 of parts (client 7, ids[k], weights ws[k]), or with
 * withdraw > 0 a withdrawal of those parts; with merge_id 0 a caller
 * alone of id ids[0] and weight ws[0]. */
static void relay_msg(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, op_t *o, uint64_t merge_id,
                      uint32_t withdraw, const uint64_t *ids, const uint32_t *ws, size_t n,
                      uint32_t wait_ms)
{
    Msr__BarrierPart parts[4], *pp[4];
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.name = "w";
    r.count = 6;
    r.wait_ms = wait_ms;
    r.merge_id = merge_id;
    r.withdraw = withdraw;
    for (size_t k = 0; k < n && merge_id != 0; k++) {
        msr__barrier_part__init(&parts[k]);
        parts[k].client_id = 7;
        parts[k].request_id = ids[k];
        parts[k].weight = ws[k];
        r.weight += ws[k];
        pp[k] = &parts[k];
    }
    r.n_parts = merge_id != 0 ? n : 0;
    r.parts = pp;
    if (merge_id == 0) {
        r.client_id = ids[0] ? 7 : 0;
        r.request_id = ids[0];
        r.weight = ws[0];
    }
    if (withdraw > 0)
        r.weight = 0;
    msr_top_start(ch, loop, o, MSR_RPC_BARRIER, &r.base, 20000);
}

/* Runs a relay_msg to its answer: its gRPC code. */
static int relay_msg_code(msr_trig_t *g, uint64_t merge_id, uint32_t withdraw, uint64_t id,
                          uint32_t w, uint32_t wait_ms, char *err, size_t len)
{
    op_t o;
    relay_msg(g->direct, g->loop, &o, merge_id, withdraw, &id, &w, 1, wait_ms);
    msr_tpoll_until(g->loop, msr_top_is_done, &o, "a relay's message");
    int code = o.a.grpc_code;
    if (err != NULL)
        snprintf(err, len, "%s", o.a.err);
    msr_rpc_async_cleanup(&o.a);
    return code;
}

/* A merged arrival of parts 1, 2 (weight 1 each) and 3 (weight 2): part
 * 1's withdrawal overtakes it (remembered, applied when it comes), part
 * 2's comes while it waits, part 3's after the barrier released it
 * (refused: it stays counted). Then the parts alone: 3 is answered
 * released, 1 and 2 (taken back) are counted afresh. */
static void test_withdraw_overtakes_arrival(void)
{
    msr_trig_t g;
    msr_trig_start(&g);
    char err[256];
    MSR_CHECK_EQ(relay_msg_code(&g, 99, 1, 1, 1, 0, err, sizeof err), 0);
    op_t a, x, probe;
    uint64_t ids[3] = {1, 2, 3};
    uint32_t ws[3] = {1, 1, 2};
    uint64_t before = msr_tcoord_served(g.s.target, "Barrier");
    relay_msg(g.direct, g.loop, &a, 99, 0, ids, ws, 3, 15000);
    uint64_t limit = msr_deadline_in_ms(20000);
    while (msr_tcoord_served(g.s.target, "Barrier") == before) {
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "the merged arrival never came");
        msr_rpc_loop_poll(g.loop, msr_deadline_in_ms(20));
    }
    MSR_CHECK_EQ(relay_msg_code(&g, 99, 1, 2, 1, 0, err, sizeof err), 0);
    /* 2 of the arrival's 4 still counted: a probe makes 3 of 6 */
    MSR_CHECK_EQ(relay_msg_code(&g, 0, 0, 0, 1, 1000, err, sizeof err), MSR_RPC_DEADLINE_EXCEEDED);
    MSR_CHECK_MSG(strstr(err, "3 of 6 participants arrived"), "the probe: %s", err);
    MSR_CHECK(!a.done);
    uint64_t none = 0;
    uint32_t four = 4;
    relay_msg(g.direct, g.loop, &x, 0, 0, &none, &four, 1, 15000);
    msr_tpoll_until(g.loop, msr_top_is_done, &x, "the last four");
    msr_tpoll_until(g.loop, msr_top_is_done, &a, "the merged arrival");
    MSR_CHECK_MSG(a.a.status == MSR_OK && x.a.status == MSR_OK, "released: %d %s, %d %s",
                  a.a.grpc_code, a.a.err, x.a.grpc_code, x.a.err);
    msr_rpc_async_cleanup(&a.a);
    msr_rpc_async_cleanup(&x.a);
    MSR_CHECK_EQ(relay_msg_code(&g, 99, 2, 3, 2, 0, err, sizeof err), MSR_RPC_FAILED_PRECONDITION);
    MSR_CHECK_EQ(relay_msg_code(&g, 0, 0, 3, 2, 15000, err, sizeof err), 0);
    relay_msg(g.direct, g.loop, &probe, 0, 0, &ids[0], &ws[0], 1, 1000);
    MSR_CHECK_EQ(relay_msg_code(&g, 0, 0, 2, 1, 1000, err, sizeof err), MSR_RPC_DEADLINE_EXCEEDED);
    MSR_CHECK_MSG(strstr(err, "of 6 participants arrived"), "part 2 alone: %s", err);
    msr_tpoll_until(g.loop, msr_top_is_done, &probe, "part 1 alone");
    MSR_CHECK_EQ(probe.a.grpc_code, MSR_RPC_DEADLINE_EXCEEDED);
    msr_rpc_async_cleanup(&probe.a);
    msr_trig_stop(&g);
}

/* relay_msg over ch, run to its answer: its gRPC code, its message in
 * err. */
static int relay_msg_via(msr_trig_t *g, msr_rpc_channel_t *ch, uint64_t merge_id, uint32_t withdraw,
                         const uint64_t *ids, const uint32_t *ws, size_t n, uint32_t wait_ms,
                         char *err, size_t len)
{
    op_t o;
    relay_msg(ch, g->loop, &o, merge_id, withdraw, ids, ws, n, wait_ms);
    msr_tpoll_until(g->loop, msr_top_is_done, &o, "a relay's message");
    int code = o.a.grpc_code;
    snprintf(err, len, "%s", o.a.err);
    msr_rpc_async_cleanup(&o.a);
    return code;
}

/* A merged arrival whose every part was withdrawn before it came (the
 * withdrawals sent directly and through relay a, which forwards a lower
 * relay's calls alone) counts nothing and is answered CANCELLED, through
 * the relay too; its withdrawals are then spent (the same arrival sent
 * again counts whole). One part short of all: the arrival counts that
 * part's weight. */
static void test_withdrawn_before_arrival(void)
{
    msr_trig_t g;
    msr_trig_start(&g);
    char err[256];
    uint64_t ids[2] = {11, 12};
    uint32_t ws[2] = {1, 2};
    MSR_CHECK_EQ(relay_msg_via(&g, g.direct, 97, 1, &ids[0], &ws[0], 1, 0, err, sizeof err), 0);
    MSR_CHECK_EQ(relay_msg_via(&g, g.via, 97, 2, &ids[1], &ws[1], 1, 0, err, sizeof err), 0);
    int code = relay_msg_via(&g, g.via, 97, 0, ids, ws, 2, 15000, err, sizeof err);
    MSR_CHECK_MSG(code == MSR_RPC_CANCELLED && strstr(err, "every participant"),
                  "all withdrawn: %d %s", code, err);
    uint64_t none = 0;
    uint32_t one = 1;
    code = relay_msg_via(&g, g.direct, 0, 0, &none, &one, 1, 300, err, sizeof err);
    MSR_CHECK_MSG(code == MSR_RPC_DEADLINE_EXCEEDED && strstr(err, "1 of 6 participants arrived"),
                  "nothing counted: %d %s", code, err);
    code = relay_msg_via(&g, g.via, 97, 0, ids, ws, 2, 300, err, sizeof err);
    MSR_CHECK_MSG(code == MSR_RPC_DEADLINE_EXCEEDED && strstr(err, "3 of 6 participants arrived"),
                  "sent again: %d %s", code, err);
    /* one part short of all */
    uint64_t ids2[2] = {21, 22};
    MSR_CHECK_EQ(relay_msg_via(&g, g.via, 96, 2, &ids2[1], &ws[1], 1, 0, err, sizeof err), 0);
    code = relay_msg_via(&g, g.via, 96, 0, ids2, ws, 2, 300, err, sizeof err);
    MSR_CHECK_MSG(code == MSR_RPC_DEADLINE_EXCEEDED && strstr(err, "1 of 6 participants arrived"),
                  "one part left: %d %s", code, err);
    msr_trig_stop(&g);
}

/* Callers with ids through the relay giving up at each point: B before
 * the merge left (left out), C while the arrival waits (withdrawn); A and
 * D released with a direct caller of weight 4. Sent again alone, A is
 * answered released, B and C (never released) are counted afresh. */
static void test_give_up_each_point(void)
{
    msr_trig_t g;
    msr_trig_start(&g);
    op_t o[5];
    barrier_start_idl(g.via, g.loop, &o[0], 6, 20000, 15000, 21);
    barrier_start_idl(g.via, g.loop, &o[1], 6, 300, 15000, 22);
    barrier_start_idl(g.via, g.loop, &o[2], 6, 1500, 15000, 23);
    barrier_start_idl(g.via, g.loop, &o[3], 6, 20000, 15000, 24);
    relay_at_t at = {g.relay, 4, 0};
    msr_tpoll_until(g.loop, relay_reached, &at, "four callers at the relay");
    msr_tpoll_until(g.loop, msr_top_is_done, &o[1], "B giving up");
    at = (relay_at_t){g.relay, 3, 0};
    msr_tpoll_until(g.loop, relay_reached, &at, "B left out");
    msr_relay_server_flush(g.relay);
    msr_tpoll_until(g.loop, msr_top_is_done, &o[2], "C giving up");
    at = (relay_at_t){g.relay, 2, 1};
    msr_tpoll_until(g.loop, relay_reached, &at, "C withdrawn upstream");
    MSR_CHECK(!o[0].done && !o[3].done);
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.name = "b";
    r.count = 6;
    r.weight = 4;
    r.wait_ms = 15000;
    msr_top_start(g.direct, g.loop, &o[4], MSR_RPC_BARRIER, &r.base, 20000);
    for (int k = 0; k < 5; k++) {
        msr_tpoll_until(g.loop, msr_top_is_done, &o[k], "the callers");
        if (k != 1 && k != 2)
            MSR_CHECK_MSG(o[k].a.status == MSR_OK, "caller %d: %d %s", k, o[k].a.grpc_code,
                          o[k].a.err);
        msr_rpc_async_cleanup(&o[k].a);
    }
    barrier_start_idl(g.direct, g.loop, &o[0], 6, 20000, 15000, 21);
    barrier_start_idl(g.direct, g.loop, &o[1], 6, 20000, 1000, 22);
    barrier_start_idl(g.direct, g.loop, &o[2], 6, 20000, 1000, 23);
    for (int k = 0; k < 3; k++) {
        msr_tpoll_until(g.loop, msr_top_is_done, &o[k], "a caller sent again");
        MSR_CHECK_MSG(o[k].a.grpc_code == (k == 0 ? 0 : MSR_RPC_DEADLINE_EXCEEDED),
                      "caller %d sent again: %d %s", k, o[k].a.grpc_code, o[k].a.err);
        msr_rpc_async_cleanup(&o[k].a);
    }
    msr_trig_stop(&g);
}

/* ---- a merge past the count ---- */

/* Direct callers o[0..direct) reach the coordinator (held there), then
 * o[direct..direct+3) merge at the relay into one arrival: every caller's
 * answer comes, the merged callers' codes in codes. */
static void past_round(msr_trig_t *g, op_t *o, int direct, int *codes)
{
    uint64_t before = msr_tcoord_served(g->s.target, "Barrier");
    for (int k = 0; k < direct; k++)
        barrier_start(g->direct, g->loop, &o[k], 4, 20000, 15000);
    uint64_t limit = msr_deadline_in_ms(20000);
    while (msr_tcoord_served(g->s.target, "Barrier") < before + (uint64_t)direct) {
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "the direct callers never arrived");
        msr_rpc_loop_poll(g->loop, msr_deadline_in_ms(20));
    }
    for (int k = direct; k < direct + 3; k++)
        barrier_start(g->via, g->loop, &o[k], 4, 20000, 15000);
    relay_at_t at = {g->relay, 3, 0};
    msr_tpoll_until(g->loop, relay_reached, &at, "three callers at the relay");
    msr_relay_server_flush(g->relay);
    for (int k = 0; k < direct + 3; k++) {
        msr_tpoll_until(g->loop, msr_top_is_done, &o[k], "a caller");
        if (k < direct)
            MSR_CHECK_MSG(o[k].a.status == MSR_OK, "direct caller %d: %d %s", k, o[k].a.grpc_code,
                          o[k].a.err);
        else
            codes[k - direct] = o[k].a.grpc_code;
        if (k == direct + 2 && codes[2] != 0)
            MSR_CHECK_MSG(strstr(o[k].a.err, "1 more participants than its count of 4"),
                          "the refused caller: %s", o[k].a.err);
        msr_rpc_async_cleanup(&o[k].a);
    }
}

/* A merge of 3 that fills the barrier's room exactly is admitted whole;
 * one that passes it by one admits its first two callers (sent again)
 * and refuses only the third, told why. */
static void test_merge_past_count(void)
{
    msr_trig_t g;
    msr_trig_start(&g);
    op_t o[5];
    int codes[3];
    past_round(&g, o, 1, codes);
    for (int k = 0; k < 3; k++)
        MSR_CHECK_MSG(codes[k] == 0, "at the bound, caller %d: %d", k, codes[k]);
    past_round(&g, o, 2, codes);
    MSR_CHECK_MSG(codes[0] == 0 && codes[1] == 0 && codes[2] == MSR_RPC_INVALID_ARGUMENT,
                  "one past: %d %d %d", codes[0], codes[1], codes[2]);
    uint64_t calls, arrivals, withdrawals;
    msr_relay_server_merges(g.relay, &calls, &arrivals, &withdrawals);
    MSR_CHECK_EQ(arrivals, 3); /* one, then one sent again with two */
    msr_trig_stop(&g);
}

static const msr_test_t tests[] = {
    {"merged_give_up", test_merged_give_up, 60},
    {"relay_dies_mid_merge", test_relay_dies_mid_merge, 60},
    {"released_then_relay_killed", test_released_then_relay_killed, 60},
    {"withdraw_overtakes_arrival", test_withdraw_overtakes_arrival, 60},
    {"merge_past_count", test_merge_past_count, 60},
    {"withdrawn_before_arrival", test_withdrawn_before_arrival, 60},
    {"give_up_each_point", test_give_up_each_point, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests); /* gRPC starts in each test's process */
}
