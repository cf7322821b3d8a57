/* A node's Add calls merged at a relay (rendezvous/relay_add.c,
 * docs/architecture.md "Relays") against a coordinator on loopback, the
 * relay's server polled by the test itself so that it decides which calls
 * arrive within one poll: callers on one counter go upstream as one Add
 * call; each hears its own value as if applied one by one; one giving up
 * before the call left is not applied, one giving up after is; a resent
 * request id is answered its recorded value, not applied again. A relay
 * dying before and after its merged call reached the coordinator: the
 * callers resend directly, and the counter counts each add once. An
 * older coordinator that ignores the parts: each caller sent alone. */
#include "tests/unit_rdzv/relay_ops.h"

typedef struct op {
    msr_top_t t; /* first: an op_t is the msr_top_t the polls wait on */
    int64_t delta;
    uint64_t request_id;
} op_t;

/* An Add of delta to "c" over ch by client 7 with request id rid (0: none). */
static void add_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, op_t *o, int64_t delta,
                      uint64_t rid, int64_t ms)
{
    Msr__AddRequest r = MSR__ADD_REQUEST__INIT;
    r.key = "c";
    r.delta = delta;
    r.client_id = rid ? 7 : 0;
    r.request_id = rid;
    msr_top_start(ch, loop, &o->t, MSR_RPC_ADD, &r.base, ms);
    o->delta = delta;
    o->request_id = rid;
}

static int64_t op_value(op_t *o)
{
    MSR_CHECK_MSG(o->t.a.status == MSR_OK && o->t.a.resp != NULL, "add %lld: %d %s",
                  (long long)o->delta, o->t.a.grpc_code, o->t.a.err);
    return ((const Msr__AddResponse *)o->t.a.resp)->value;
}

typedef struct relay_at {
    msr_relay_server_t *server;
    size_t forwarding;
} relay_at_t;

static int relay_reached(void *arg)
{
    relay_at_t *r = arg;
    return msr_relay_server_forwarding(r->server) == r->forwarding;
}

static int relay_merged_4(void *arg)
{
    uint64_t calls, merged;
    msr_relay_server_adds(arg, &calls, &merged);
    return calls == 4;
}

/* The counter's value, by an add of 0 without an id (one more Add). */
static int64_t counter(msr_rpc_channel_t *direct, msr_rpc_loop_t *loop)
{
    op_t o;
    add_start(direct, loop, &o, 0, 0, 20000);
    msr_tpoll_until(loop, msr_top_is_done, &o, "reading the counter");
    int64_t v = op_value(&o);
    msr_rpc_async_cleanup(&o.t.a);
    return v;
}

/* The callers' values are those of their adds applied one by one in some
 * order: by value, each is the one before plus its own delta, from base. */
static void check_one_by_one(op_t **ops, int n, int64_t base)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (op_value(ops[j]) < op_value(ops[i])) {
                op_t *t = ops[i];
                ops[i] = ops[j];
                ops[j] = t;
            }
    int64_t v = base;
    for (int i = 0; i < n; i++) {
        v += ops[i]->delta;
        MSR_CHECK_MSG(op_value(ops[i]) == v, "add %lld heard %lld, not %lld",
                      (long long)ops[i]->delta, (long long)op_value(ops[i]), (long long)v);
    }
}

static void test_merged_adds(void)
{
    msr_trig_t g;
    msr_trig_start(&g);
    msr_rpc_loop_t *loop = g.loop;
    /* A, B, C (gives up before the flush) and D reach the relay in one poll */
    op_t o[8];
    add_start(g.via, loop, &o[0], 1, 1, 20000);
    add_start(g.via, loop, &o[1], 10, 2, 20000);
    add_start(g.via, loop, &o[2], 100000, 3, 300);
    add_start(g.via, loop, &o[3], 100, 4, 20000);
    relay_at_t at = {g.relay, 4};
    msr_tpoll_until(loop, relay_reached, &at, "four Add calls at the relay");
    msr_tpoll_until(loop, msr_top_is_done, &o[2], "C giving up");
    MSR_CHECK_EQ(o[2].t.a.grpc_code, MSR_RPC_DEADLINE_EXCEEDED);
    at.forwarding = 3;
    msr_tpoll_until(loop, relay_reached, &at, "C left out");
    uint64_t before = msr_tcoord_served(g.s.target, "Add");
    msr_relay_server_flush(g.relay);
    uint64_t calls, merged;
    msr_relay_server_adds(g.relay, &calls, &merged);
    MSR_CHECK_EQ(calls, 4);
    MSR_CHECK_EQ(merged, 1);
    for (int k = 0; k < 4; k++)
        msr_tpoll_until(loop, msr_top_is_done, &o[k], "the merged callers");
    op_t *abd[3] = {&o[0], &o[1], &o[3]};
    check_one_by_one(abd, 3, 0);
    MSR_CHECK_EQ(msr_tcoord_served(g.s.target, "Add") - before, 1); /* one call for three */
    MSR_CHECK_EQ(counter(g.direct, loop), 111);                     /* C not applied */
    /* B resent directly, A resent merged with E: their recorded values;
     * F sent and given up after the flush: applied */
    int64_t a_value = op_value(&o[0]);
    int64_t b_value = op_value(&o[1]);
    add_start(g.direct, loop, &o[4], 10, 2, 20000);
    add_start(g.via, loop, &o[5], 1, 1, 20000);
    add_start(g.via, loop, &o[6], 1000, 5, 20000);
    add_start(g.via, loop, &o[7], 10000, 6, 20000);
    at.forwarding = 3;
    msr_tpoll_until(loop, relay_reached, &at, "three more Add calls at the relay");
    msr_relay_server_flush(g.relay);
    msr_rpc_async_cancel(&o[7].t.a);
    for (int k = 4; k < 8; k++)
        msr_tpoll_until(loop, msr_top_is_done, &o[k], "the second round");
    MSR_CHECK_EQ(op_value(&o[4]), b_value);
    MSR_CHECK_EQ(op_value(&o[5]), a_value);
    MSR_CHECK(op_value(&o[6]) == 1111 || op_value(&o[6]) == 11111);
    MSR_CHECK_EQ(counter(g.direct, loop), 11111);
    for (int k = 0; k < 8; k++)
        msr_rpc_async_cleanup(&o[k].t.a);
    msr_trig_stop(&g);
}

/* A relay dying mid-merge: its callers, answered UNAVAILABLE, resend
 * directly with their ids; each add counted once, whether the merged call
 * reached the coordinator (A, B) or not (C, D). */
static void test_relay_dies_mid_add(void)
{
    msr_trig_t g;
    msr_trig_start(&g);
    msr_rpc_loop_t *loop = g.loop;
    op_t o[4];
    add_start(g.via, loop, &o[0], 1, 11, 20000);
    add_start(g.via, loop, &o[1], 10, 12, 20000);
    relay_at_t at = {g.relay, 2};
    msr_tpoll_until(loop, relay_reached, &at, "two Add calls at the relay");
    uint64_t before = msr_tcoord_served(g.s.target, "Add");
    msr_relay_server_flush(g.relay);
    uint64_t limit = msr_deadline_in_ms(20000);
    while (msr_tcoord_served(g.s.target, "Add") == before) {
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "the merged add never reached it");
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(5));
    }
    add_start(g.via, loop, &o[2], 100, 13, 20000);
    add_start(g.via, loop, &o[3], 1000, 14, 20000);
    msr_tpoll_until(loop, relay_merged_4, g.relay, "two more Add calls at the relay");
    msr_relay_server_destroy(g.relay); /* A and B may or may not have their answer */
    g.relay = NULL;
    msr_rpc_channel_destroy(g.up);
    g.up = NULL;
    op_t again[4];
    for (int k = 0; k < 4; k++) {
        msr_tpoll_until(loop, msr_top_is_done, &o[k], "a merged caller");
        if (k >= 2)
            MSR_CHECK_EQ(o[k].t.a.grpc_code, MSR_RPC_UNAVAILABLE);
        add_start(g.direct, loop, &again[k], o[k].delta, o[k].request_id, 20000);
    }
    for (int k = 0; k < 4; k++)
        msr_tpoll_until(loop, msr_top_is_done, &again[k], "the callers again, directly");
    op_t *ab[2] = {&again[0], &again[1]};
    check_one_by_one(ab, 2, 0);
    MSR_CHECK_EQ(counter(g.direct, loop), 1111);
    for (int k = 0; k < 4; k++) {
        msr_rpc_async_cleanup(&o[k].t.a);
        msr_rpc_async_cleanup(&again[k].t.a);
    }
    msr_trig_stop(&g);
}

/* An older coordinator, on the test's loop: it knows no AddRequest.parts,
 * so it applies a call's own delta to its one counter and answers its
 * value alone (no values). */
typedef struct old_coord {
    msr_rpc_server_t *server;
    int64_t value;
    uint64_t adds;
} old_coord_t;

static void old_handler(void *arg, msr_rpc_call_t *call, msr_rpc_method_t method,
                        ProtobufCMessage *req)
{
    old_coord_t *o = arg;
    if (method != MSR_RPC_ADD) {
        msr_rpc_call_fail(call, MSR_RPC_UNIMPLEMENTED, "not the older coordinator's");
        return;
    }
    o->adds++;
    o->value += ((const Msr__AddRequest *)req)->delta;
    Msr__AddResponse r = MSR__ADD_RESPONSE__INIT;
    r.value = o->value;
    msr_rpc_call_reply(call, &r.base);
}

/* Against an older coordinator that ignores parts: the merged call of A, B
 * and C applies nothing, and each goes alone after it (4 calls), hearing
 * its own value; the counter counts each add once. */
static void test_older_coordinator(void)
{
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *up, *via;
    msr_relay_server_t *relay;
    old_coord_t old = {0};
    char target[64];
    int port = 0;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    msr_rpc_server_config_t cfg = {
        .address = "127.0.0.1:0", .token = "tok", .handler = old_handler, .arg = &old};
    MSR_CHECK_OK(msr_rpc_server_create(loop, &cfg, &port, &old.server));
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    MSR_CHECK_OK(msr_rpc_channel_create_own(target, "tok", &up));
    MSR_CHECK_OK(msr_relay_server_create(loop, "127.0.0.1:0", "tok", up, "a", 4, &port, &relay));
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    MSR_CHECK_OK(msr_rpc_channel_create_own(target, "tok", &via));
    op_t o[3];
    add_start(via, loop, &o[0], 1, 1, 20000);
    add_start(via, loop, &o[1], 10, 2, 20000);
    add_start(via, loop, &o[2], 100, 3, 20000);
    relay_at_t at = {relay, 3};
    msr_tpoll_until(loop, relay_reached, &at, "three Add calls at the relay");
    msr_relay_server_flush(relay);
    for (int k = 0; k < 3; k++)
        msr_tpoll_until(loop, msr_top_is_done, &o[k], "the merged callers");
    uint64_t calls, merged;
    msr_relay_server_adds(relay, &calls, &merged);
    MSR_CHECK_EQ(merged, 1);
    op_t *abc[3] = {&o[0], &o[1], &o[2]};
    check_one_by_one(abc, 3, 0);
    MSR_CHECK_EQ(old.value, 111);
    MSR_CHECK_EQ(old.adds, 4);
    for (int k = 0; k < 3; k++)
        msr_rpc_async_cleanup(&o[k].t.a);
    msr_rpc_channel_destroy(via);
    msr_relay_server_destroy(relay);
    msr_rpc_channel_destroy(up);
    msr_rpc_server_shutdown(old.server);
    msr_rpc_server_destroy(old.server);
    msr_rpc_loop_destroy(loop);
}

static const msr_test_t tests[] = {
    {"merged_adds", test_merged_adds, 60},
    {"relay_dies_mid_add", test_relay_dies_mid_add, 60},
    {"older_coordinator", test_older_coordinator, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests); /* gRPC starts in each test's process */
}
