/* The store's limits, each at its bound and one past it, the counts that
 * stay bounded, waits that expire and withdraw, and every allocation of a
 * workload failed in turn (in memory and with a state file). */
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

#include "base/alloc.h"
#include "base/time.h"
#include "tests/unit_rdzv/test_coord.h"

/* ---- the store's limits and what waits leave behind ---- */

static int set_code(msr_coord_t *co, const char *k, size_t len, char *msg, size_t msglen)
{
    static uint8_t buf[4096];
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = (char *)k;
    s.value.data = buf;
    s.value.len = len;
    tcall_t c = {0};
    tc_call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.answered);
    snprintf(msg, msglen, "%s", c.message);
    int code = c.code;
    msr_tcall_reset(&c);
    return code;
}

static void test_store_limits(void)
{
    tc_job_limits = (msr_store_limits_t){.value_max = 1000, .keys_max = 4, .bytes_max = 3000};
    msr_coord_t *co = tc_running_coord();
    tc_job_limits = (msr_store_limits_t){0, 0, 0};
    char msg[sizeof((tcall_t *)0)->message];
    /* one byte over the value size */
    MSR_CHECK_EQ(set_code(co, "a", 1001, msg, sizeof msg), GRPC_STATUS_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(msg, "--store_value_max") && strstr(msg, "1000"), "%s", msg);
    MSR_CHECK_EQ(set_code(co, "a", 1000, msg, sizeof msg), 0);
    MSR_CHECK_EQ(set_code(co, "b", 1000, msg, sizeof msg), 0);
    /* a third 1000-byte value passes the total (each key counts 64 more) */
    MSR_CHECK_EQ(set_code(co, "c", 1000, msg, sizeof msg), GRPC_STATUS_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(msg, "--store_bytes_max") != NULL, "%s", msg);
    /* a refused write changed nothing: a smaller one fits */
    MSR_CHECK_EQ(set_code(co, "c", 10, msg, sizeof msg), 0);
    /* overwriting with a value of the same size fits although the store is full */
    MSR_CHECK_EQ(set_code(co, "a", 1000, msg, sizeof msg), 0);
    MSR_CHECK_EQ(set_code(co, "d", 1, msg, sizeof msg), 0);
    MSR_CHECK_EQ(set_code(co, "e", 1, msg, sizeof msg), GRPC_STATUS_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(msg, "--store_keys_max") != NULL, "%s", msg);
    /* add counts like set */
    tcall_t c = {0};
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = "e";
    a.delta = 1;
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    /* a delete makes room */
    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "b";
    tc_call(co, &c, MSR_RPC_DELETE, &d.base);
    MSR_CHECK(c.code == 0 && ((Msr__DeleteResponse *)c.resp)->existed);
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, 0);
    /* a waited-on name counts as a key while it is waited on */
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "f";
    g.wait_ms = 10000;
    tc_call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    /* an allgather contribution over the value size */
    uint8_t big[1001] = {0};
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[1] = {&e};
    e.data.data = big;
    e.data.len = sizeof big;
    Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
    r.name = "g";
    r.count = 1;
    r.n_entries = 1;
    r.entries = ep;
    tc_call(co, &c, MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(c.message, "--store_value_max") != NULL, "%s", c.message);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* Counts beyond the job's ranks are refused before anything is reserved
 * (a 16M-entry allgather used to reserve 400 MB for an 18-byte request). */
static void test_store_counts_bounded(void)
{
    msr_coord_t *co = tc_running_coord(); /* 8 ranks */
    tcall_t c = {0};
    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 9;
    b.wait_ms = 10000;
    tc_call(co, &c, MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    MSR_CHECK_MSG(strstr(c.message, "count 9 is not in 1..8") != NULL, "%s", c.message);
    b.count = 100000000;
    tc_call(co, &c, MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[1] = {&e};
    Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
    r.name = "g";
    r.count = 1u << 24;
    r.n_entries = 1;
    r.entries = ep;
    tc_call(co, &c, MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    MSR_CHECK_MSG(strstr(c.message, "the job's ranks") != NULL, "%s", c.message);
    r.count = 9;
    tc_call(co, &c, MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
    /* workers that reach a coordinator no node joined (another launcher
     * started them): the job's size is unknown, and an allgather's entry
     * table counts against the byte limit instead */
    tc_job_limits = (msr_store_limits_t){.bytes_max = 1 << 20};
    co = tc_make_coord(0, 0, -1);
    tc_job_limits = (msr_store_limits_t){0, 0, 0};
    r.count = 1u << 24;
    tc_call(co, &c, MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(c.message, "--store_bytes_max") != NULL, "%s", c.message);
    r.count = 2;
    r.wait_ms = 10000;
    tc_call(co, &c, MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK(!c.answered);
    msr_coord_cancel(co, &c);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* A wait that expires or is cancelled takes back what it brought: its
 * barrier arrival, its allgather contributions, its get-wait record. A
 * participant that gives up and comes again counts once; before, its first
 * arrival stayed and the barrier released early, and its retried
 * contribution was refused as given twice. */
static void test_store_expired_waits_withdraw(void)
{
    tc_job_limits = (msr_store_limits_t){.keys_max = 2};
    msr_coord_t *co = tc_running_coord();
    tc_job_limits = (msr_store_limits_t){0, 0, 0};
    tcall_t c[3] = {{0}};
    /* barrier of 2: the first arrival expires, comes again; not released
     * until the second participant is there */
    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 2;
    b.wait_ms = 20;
    tc_call(co, &c[0], MSR_RPC_BARRIER, &b.base);
    msr_sleep_ms(30);
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK_EQ(c[0].code, GRPC_STATUS_DEADLINE_EXCEEDED);
    b.wait_ms = 10000;
    tc_call(co, &c[0], MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_MSG(!c[0].answered, "released with 1 of 2 participants: %d %s", c[0].code,
                  c[0].message);
    tc_call(co, &c[1], MSR_RPC_BARRIER, &b.base);
    MSR_CHECK(c[0].answered && c[0].code == 0 && c[1].answered && c[1].code == 0);
    /* allgather of 2: index 0 expires and is given again */
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[1] = {&e};
    e.data.data = (uint8_t *)"x";
    e.data.len = 1;
    Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
    r.name = "g";
    r.count = 2;
    r.n_entries = 1;
    r.entries = ep;
    r.wait_ms = 20;
    tc_call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    msr_sleep_ms(30);
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK_EQ(c[0].code, GRPC_STATUS_DEADLINE_EXCEEDED);
    r.wait_ms = 10000;
    tc_call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_MSG(!c[0].answered, "index 0 again: %d %s", c[0].code, c[0].message);
    /* a cancelled participant's contribution goes too */
    msr_coord_cancel(co, &c[0]);
    msr_tcall_reset(&c[0]);
    tc_call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_MSG(!c[0].answered, "index 0 after a cancel: %d %s", c[0].code, c[0].message);
    e.index = 1;
    e.data.data = (uint8_t *)"y";
    tc_call(co, &c[1], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK(c[0].answered && c[0].code == 0 && c[1].answered && c[1].code == 0);
    MSR_CHECK_EQ(((Msr__AllgatherResponse *)c[0].resp)->data.len, 2);
    MSR_CHECK(memcmp(((Msr__AllgatherResponse *)c[0].resp)->data.data, "xy", 2) == 0);
    /* expired and cancelled get-waits on many names: with a key limit of 2,
     * keys still fit afterwards */
    for (int i = 0; i < 10; i++) {
        char key[32];
        snprintf(key, sizeof key, "w%d", i);
        Msr__GetRequest g = MSR__GET_REQUEST__INIT;
        g.key = key;
        g.wait_ms = i % 2 ? 10000 : 5;
        tc_call(co, &c[2], MSR_RPC_GET, &g.base);
        MSR_CHECK_MSG(!c[2].answered, "get-wait %d: %d %s", i, c[2].code, c[2].message);
        if (i % 2) {
            msr_coord_cancel(co, &c[2]);
        } else {
            msr_sleep_ms(10);
            msr_coord_tick(co, msr_now_ns());
            MSR_CHECK_EQ(c[2].code, GRPC_STATUS_DEADLINE_EXCEEDED);
        }
        msr_tcall_reset(&c[2]);
    }
    tc_set_kv(co, "k1", "v");
    tc_set_kv(co, "k2", "v");
    for (int i = 0; i < 3; i++)
        msr_tcall_reset(&c[i]);
    msr_coord_destroy(co);
}

/* Fail each allocation of a store workload in turn: every call is answered
 * (with an error or not) and the core stays usable. */
static void test_alloc_failures(void)
{
    for (long k = 0; k < 400; k++) {
        msr_coord_t *co = tc_running_coord();
        msr_alloc_fail_at(k);
        tcall_t c[3] = {{0}};
        Msr__SetRequest s = MSR__SET_REQUEST__INIT;
        s.key = "k";
        s.value.data = (uint8_t *)"v";
        s.value.len = 1;
        tc_call(co, &c[0], MSR_RPC_SET, &s.base);
        Msr__Contribution e = MSR__CONTRIBUTION__INIT;
        Msr__Contribution *ep[1] = {&e};
        Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
        r.name = "g";
        r.count = 1;
        r.n_entries = 1;
        r.entries = ep;
        tc_call(co, &c[1], MSR_RPC_ALLGATHER, &r.base);
        Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
        b.name = "b";
        b.count = 1;
        tc_call(co, &c[2], MSR_RPC_BARRIER, &b.base);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        for (int i = 0; i < 3; i++) {
            MSR_CHECK_MSG(c[i].answered, "call %d unanswered with allocation %ld failing", i, k);
            msr_tcall_reset(&c[i]);
        }
        msr_coord_destroy(co);
        if (!failed)
            return;
    }
    MSR_CHECK_MSG(0, "the workload never ran without a failed allocation");
}

/* The same with a state file: answers wait for saves, and a save (or a
 * held answer) that cannot get memory still answers every call; what was
 * saved reads back. */
static void test_alloc_failures_durable(void)
{
    tmpstate_t t;
    tc_tmpstate_make(&t);
    for (long k = 0; k < 2000; k++) {
        unlink(t.path);
        msr_coord_t *co = tc_durable_coord(t.path);
        tc_hold_answers = 1;
        msr_alloc_fail_at(k);
        tcall_t c[3] = {{0}};
        tc_set_key(co, &c[0], "k", "v");
        Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
        a.key = "n";
        a.delta = 1;
        a.client_id = 1;
        a.request_id = 1;
        tc_call(co, &c[1], MSR_RPC_ADD, &a.base);
        tc_call(co, &c[2], MSR_RPC_ADD, &a.base);
        msr_coord_flush(co);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        tc_hold_answers = 0;
        for (int i = 0; i < 3; i++) {
            MSR_CHECK_MSG(c[i].answered, "call %d unanswered with allocation %ld failing", i, k);
            msr_tcall_reset(&c[i]);
        }
        msr_coord_destroy(co);
        co = tc_durable_coord(t.path); /* whatever was saved reads back */
        msr_coord_destroy(co);
        if (!failed) {
            tc_tmpstate_remove(&t);
            return;
        }
    }
    MSR_CHECK_MSG(0, "the workload never ran without a failed allocation");
}

static const msr_test_t tests[] = {
    {"store_limits", test_store_limits, 10},
    {"store_counts_bounded", test_store_counts_bounded, 10},
    {"store_expired_waits_withdraw", test_store_expired_waits_withdraw, 10},
    {"alloc_failures", test_alloc_failures, 60},
    {"alloc_failures_durable", test_alloc_failures_durable, 120},
};

const msr_test_piece_t tc_limits_tests = MSR_TEST_PIECE(tests);
