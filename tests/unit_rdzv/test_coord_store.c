/* The coordinator's store: waits, add, compare-and-set and delete, keys
 * and generations, barriers and allgathers, and each of the store's guards
 * on its own (the mutation pass's, scripts/mutate.sh): stale generations
 * on every call, exact compare-and-set, add's limits, resets on restart. */
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
#include "rendezvous/store_core.h"
#include "tests/unit_rdzv/test_coord.h"

/* ---- the store ---- */

static void test_store_get_wait(void)
{
    msr_coord_t *co = tc_running_coord();
    tcall_t c = {0}, w1 = {0}, w2 = {0};
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "k";
    tc_call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_NOT_FOUND);
    g.wait_ms = 10000;
    tc_call(co, &w1, MSR_RPC_GET, &g.base);
    tc_call(co, &w2, MSR_RPC_GET, &g.base);
    MSR_CHECK(!w1.answered && !w2.answered);
    tc_set_kv(co, "k", "hello");
    MSR_CHECK(w1.answered && w2.answered && w1.code == 0);
    Msr__GetResponse *r = (Msr__GetResponse *)w1.resp;
    MSR_CHECK_EQ(r->value.len, 5);
    MSR_CHECK(memcmp(r->value.data, "hello", 5) == 0);
    /* a wait that runs out answers DEADLINE_EXCEEDED with the key's name */
    g.key = "never";
    g.wait_ms = 30;
    tc_call(co, &w1, MSR_RPC_GET, &g.base);
    msr_sleep_ms(40);
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK_EQ(w1.code, GRPC_STATUS_DEADLINE_EXCEEDED);
    MSR_CHECK(strstr(w1.message, "'never'") != NULL);
    /* the client's own deadline bounds the wait even with a long wait_ms */
    msr_tcall_reset(&w2);
    w2.method = MSR_RPC_GET;
    w2.deadline = msr_now_ns() + 250 * 1000000ull;
    g.wait_ms = 100000;
    msr_coord_call(co, &w2, MSR_RPC_GET, &g.base);
    MSR_CHECK(!w2.answered);
    msr_coord_tick(co, msr_now_ns() + 60 * 1000000ull);
    MSR_CHECK(w2.answered && w2.code == GRPC_STATUS_DEADLINE_EXCEEDED);
    msr_tcall_reset(&c);
    msr_tcall_reset(&w1);
    msr_tcall_reset(&w2);
    msr_coord_destroy(co);
}

static void test_store_add_cas_delete(void)
{
    msr_coord_t *co = tc_running_coord();
    tcall_t c = {0};
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = "ctr";
    for (int i = 1; i <= 100; i++) {
        a.delta = 2;
        tc_call(co, &c, MSR_RPC_ADD, &a.base);
        MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, 2 * i);
    }
    a.delta = -250;
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, -50);
    tc_set_kv(co, "text", "abc");
    a.key = "text";
    a.delta = 1;
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    tc_set_kv(co, "big", "9223372036854775807");
    a.key = "big";
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_OUT_OF_RANGE);

    Msr__CompareSetRequest cs = MSR__COMPARE_SET_REQUEST__INIT;
    cs.key = "lock";
    cs.expect_absent = 1;
    cs.desired.data = (uint8_t *)"owner1";
    cs.desired.len = 6;
    tc_call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    MSR_CHECK(((Msr__CompareSetResponse *)c.resp)->swapped);
    cs.desired.data = (uint8_t *)"owner2";
    tc_call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    Msr__CompareSetResponse *r = (Msr__CompareSetResponse *)c.resp;
    MSR_CHECK(!r->swapped && r->present);
    MSR_CHECK(r->current.len == 6 && memcmp(r->current.data, "owner1", 6) == 0);
    cs.expect_absent = 0;
    cs.expected.data = (uint8_t *)"owner1";
    cs.expected.len = 6;
    tc_call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    MSR_CHECK(((Msr__CompareSetResponse *)c.resp)->swapped);
    cs.expected.data = (uint8_t *)"owner1"; /* stale expectation */
    tc_call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    MSR_CHECK(!((Msr__CompareSetResponse *)c.resp)->swapped);

    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "lock";
    tc_call(co, &c, MSR_RPC_DELETE, &d.base);
    MSR_CHECK(((Msr__DeleteResponse *)c.resp)->existed);
    tc_call(co, &c, MSR_RPC_DELETE, &d.base);
    MSR_CHECK(!((Msr__DeleteResponse *)c.resp)->existed);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_store_bad_keys_and_generation(void)
{
    msr_coord_t *co = tc_running_coord();
    tcall_t c = {0};
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = "";
    tc_call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    s.key = "a\nb";
    tc_call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    char longkey[MSR_KEY_MAX + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    s.key = longkey;
    tc_call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    s.key = "ok";
    s.generation = 3; /* not the job's generation */
    tc_call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_ABORTED);
    MSR_CHECK(strstr(c.message, "stale generation 3") != NULL);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static void test_store_reset_on_restart(void)
{
    msr_coord_t *co = tc_make_coord(1, 1, 1);
    const char *a = tc_join(co, 0, 1, 1, -1);
    tcall_t c = {0}, w = {0};
    tc_beat(co, &c, a, 0, 0);
    tc_set_kv(co, "x", "1");
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "y";
    g.wait_ms = 10000;
    tc_call(co, &w, MSR_RPC_GET, &g.base);
    MSR_CHECK(!w.answered);
    tc_report(co, a, 0, 0, 1, 0); /* restart: generation 1 */
    MSR_CHECK_EQ(w.code, GRPC_STATUS_ABORTED);
    tc_beat(co, &c, a, 1, 1);
    g.generation = 1;
    g.key = "x";
    g.wait_ms = 0;
    tc_call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_NOT_FOUND); /* the old keys are gone */
    msr_tcall_reset(&c);
    msr_tcall_reset(&w);
    msr_coord_destroy(co);
}

static void test_barrier(void)
{
    msr_coord_t *co = tc_running_coord();
    tcall_t c[4] = {{0}};
    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 5;
    b.wait_ms = 10000;
    b.weight = 2; /* a proxy's call for two participants */
    tc_call(co, &c[0], MSR_RPC_BARRIER, &b.base);
    b.weight = 1;
    tc_call(co, &c[1], MSR_RPC_BARRIER, &b.base);
    b.count = 6; /* disagrees */
    tc_call(co, &c[2], MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_EQ(c[2].code, GRPC_STATUS_INVALID_ARGUMENT);
    b.count = 5;
    b.weight = 3; /* too many */
    tc_call(co, &c[2], MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_EQ(c[2].code, GRPC_STATUS_INVALID_ARGUMENT);
    MSR_CHECK(!c[0].answered && !c[1].answered);
    b.weight = 2;
    tc_call(co, &c[3], MSR_RPC_BARRIER, &b.base);
    for (int i = 0; i < 4; i++)
        MSR_CHECK(i == 2 || (c[i].answered && c[i].code == 0));
    /* the same name starts a new barrier afterwards */
    b.count = 2;
    b.weight = 1;
    b.wait_ms = 20;
    tc_call(co, &c[0], MSR_RPC_BARRIER, &b.base);
    msr_sleep_ms(30);
    msr_coord_tick(co, msr_now_ns());
    MSR_CHECK_EQ(c[0].code, GRPC_STATUS_DEADLINE_EXCEEDED);
    MSR_CHECK_MSG(strstr(c[0].message, "1 of 2 participants") != NULL, "%s", c[0].message);
    for (int i = 0; i < 4; i++)
        msr_tcall_reset(&c[i]);
    msr_coord_destroy(co);
}

static void test_allgather(void)
{
    msr_coord_t *co = tc_running_coord();
    enum { N = 5 };
    tcall_t c[N] = {{0}};
    /* contributions arrive out of order and with different lengths */
    int order[N] = {3, 0, 4, 1, 2};
    for (int k = 0; k < N; k++) {
        int i = order[k];
        char data[16];
        memset(data, 'a' + i, (size_t)i + 1);
        Msr__Contribution e = MSR__CONTRIBUTION__INIT;
        Msr__Contribution *ep[1] = {&e};
        e.index = (uint32_t)i;
        e.data.data = (uint8_t *)data;
        e.data.len = (size_t)i + 1;
        Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
        r.name = "g";
        r.count = N;
        r.n_entries = 1;
        r.entries = ep;
        r.wait_ms = 10000;
        tc_call(co, &c[k], MSR_RPC_ALLGATHER, &r.base);
        if (k < N - 1)
            MSR_CHECK(!c[k].answered);
    }
    for (int k = 0; k < N; k++) {
        MSR_CHECK(c[k].answered && c[k].code == 0);
        Msr__AllgatherResponse *r = (Msr__AllgatherResponse *)c[k].resp;
        MSR_CHECK_EQ(r->n_lengths, N);
        size_t off = 0;
        for (int i = 0; i < N; i++) {
            MSR_CHECK_EQ(r->lengths[i], i + 1);
            for (int j = 0; j <= i; j++)
                MSR_CHECK_EQ(r->data.data[off + (size_t)j], 'a' + i);
            off += (size_t)i + 1;
        }
        msr_tcall_reset(&c[k]);
    }
    /* duplicates and out-of-range indexes are refused, leaving no trace */
    Msr__Contribution e1 = MSR__CONTRIBUTION__INIT, e2 = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[2] = {&e1, &e2};
    e1.index = 0;
    e2.index = 0;
    Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
    r.name = "h";
    r.count = 2;
    r.n_entries = 2;
    r.entries = ep;
    tc_call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c[0].code, GRPC_STATUS_INVALID_ARGUMENT);
    e2.index = 7;
    tc_call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK_EQ(c[0].code, GRPC_STATUS_INVALID_ARGUMENT);
    /* a proxy's call with both entries completes at once */
    e2.index = 1;
    tc_call(co, &c[0], MSR_RPC_ALLGATHER, &r.base);
    MSR_CHECK(c[0].answered && c[0].code == 0);
    MSR_CHECK_EQ(((Msr__AllgatherResponse *)c[0].resp)->n_lengths, 2);
    msr_tcall_reset(&c[0]);
    msr_coord_destroy(co);
}

/* ---- the store's guards, each on its own (mutation tests, scripts/mutate.sh) ---- */

/* A job of one node that runs generation 1, after one restart. */
static msr_coord_t *restarted_coord(void)
{
    msr_coord_t *co = tc_make_coord(1, 1, 1);
    const char *a = tc_join(co, 0, 1, 1, -1);
    tcall_t c = {0};
    tc_beat(co, &c, a, 0, 0);
    tc_report(co, a, 0, 0, 1, 0);
    MSR_CHECK_EQ(tc_beat(co, &c, a, 1, 1)->state, MSR__JOB_STATE__JOB_RUNNING);
    MSR_CHECK_EQ(((Msr__HeartbeatResponse *)c.resp)->generation, 1);
    msr_tcall_reset(&c);
    return co;
}

static void check_stale(const tcall_t *c, const char *what)
{
    MSR_CHECK_MSG(c->answered && c->code == GRPC_STATUS_ABORTED,
                  "%s of generation 0 at generation 1: answered %d, code %d", what, c->answered,
                  c->code);
    MSR_CHECK_MSG(strstr(c->message, "stale generation 0") != NULL, "%s: %s", what, c->message);
}

/* The value of key in generation 1, "" if absent. */
static void get1(msr_coord_t *co, const char *key, char *out, size_t len)
{
    tcall_t c = {0};
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = (char *)key;
    g.generation = 1;
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

/* Every store call of a past generation (older than the job's, the usual
 * case: a process left over from before a restart) is refused and changes
 * nothing; not only set. */
static void test_store_stale_generation_every_call(void)
{
    msr_coord_t *co = restarted_coord();
    tcall_t c = {0};
    char got[64];
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = "k";
    s.value.data = (uint8_t *)"v1";
    s.value.len = 2;
    s.generation = 1;
    tc_call(co, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.answered && c.code == 0);
    s.generation = 0;
    s.value.data = (uint8_t *)"v0";
    tc_call(co, &c, MSR_RPC_SET, &s.base);
    check_stale(&c, "set");

    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "k";
    tc_call(co, &c, MSR_RPC_GET, &g.base);
    check_stale(&c, "get");
    g.key = "absent";
    g.wait_ms = 10000; /* would wait, not be refused, without the check */
    tc_call(co, &c, MSR_RPC_GET, &g.base);
    check_stale(&c, "waiting get");

    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = "ctr";
    a.delta = 5;
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    check_stale(&c, "add");
    a.generation = 1;
    a.delta = 1;
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK(c.answered && c.code == 0);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, 1); /* the stale add left no trace */

    Msr__CompareSetRequest cs = MSR__COMPARE_SET_REQUEST__INIT;
    cs.key = "k";
    cs.expected.data = (uint8_t *)"v1";
    cs.expected.len = 2;
    cs.desired.data = (uint8_t *)"v0";
    cs.desired.len = 2;
    tc_call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    check_stale(&c, "compare-set");

    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "k";
    tc_call(co, &c, MSR_RPC_DELETE, &d.base);
    check_stale(&c, "delete");
    get1(co, "k", got, sizeof got);
    MSR_CHECK_STR(got, "v1"); /* neither the set, compare-set nor delete applied */

    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 1;
    tc_call(co, &c, MSR_RPC_BARRIER, &b.base);
    check_stale(&c, "barrier");

    uint8_t byte = 'x';
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[1] = {&e};
    e.data.data = &byte;
    e.data.len = 1;
    Msr__AllgatherRequest ag = MSR__ALLGATHER_REQUEST__INIT;
    ag.name = "g";
    ag.count = 1;
    ag.n_entries = 1;
    ag.entries = ep;
    tc_call(co, &c, MSR_RPC_ALLGATHER, &ag.base);
    check_stale(&c, "allgather");
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static int cas(msr_coord_t *co, const char *key, const char *expected, const char *desired,
               char *current, size_t len)
{
    tcall_t c = {0};
    Msr__CompareSetRequest cs = MSR__COMPARE_SET_REQUEST__INIT;
    cs.key = (char *)key;
    cs.expected.data = (uint8_t *)expected;
    cs.expected.len = strlen(expected);
    cs.desired.data = (uint8_t *)desired;
    cs.desired.len = strlen(desired);
    tc_call(co, &c, MSR_RPC_COMPARE_SET, &cs.base);
    MSR_CHECK(c.answered && c.code == 0);
    Msr__CompareSetResponse *r = (Msr__CompareSetResponse *)c.resp;
    current[0] = '\0';
    if (r->present) {
        MSR_CHECK(r->current.len < len);
        if (r->current.len) /* an empty value may come as NULL */
            memcpy(current, r->current.data, r->current.len);
        current[r->current.len] = '\0';
    }
    int swapped = r->swapped ? 1 : r->present ? 0 : -1; /* -1: absent */
    msr_tcall_reset(&c);
    return swapped;
}

/* compare-set swaps only on an exact match: not a prefix, not a longer
 * value, and an empty expectation matches an empty value, not an absent
 * key. */
static void test_store_compare_set_exact(void)
{
    msr_coord_t *co = tc_running_coord();
    char cur[64];
    tc_set_kv(co, "k", "owner1");
    MSR_CHECK_EQ(cas(co, "k", "owner", "x", cur, sizeof cur), 0);
    MSR_CHECK_STR(cur, "owner1");
    MSR_CHECK_EQ(cas(co, "k", "o", "x", cur, sizeof cur), 0);
    MSR_CHECK_EQ(cas(co, "k", "", "x", cur, sizeof cur), 0);
    MSR_CHECK_EQ(cas(co, "k", "owner12", "x", cur, sizeof cur), 0);
    MSR_CHECK_EQ(cas(co, "k", "owner2", "x", cur, sizeof cur), 0);
    MSR_CHECK_STR(cur, "owner1");
    MSR_CHECK_EQ(cas(co, "k", "owner1", "owner2", cur, sizeof cur), 1);
    MSR_CHECK_STR(cur, "owner2");
    /* an empty expectation is not "absent" */
    MSR_CHECK_EQ(cas(co, "none", "", "x", cur, sizeof cur), -1);
    tcall_t c = {0};
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "none";
    tc_call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_NOT_FOUND);
    /* an empty value matches an empty expectation only */
    tc_set_kv(co, "e", "");
    MSR_CHECK_EQ(cas(co, "e", "x", "y", cur, sizeof cur), 0);
    MSR_CHECK_STR(cur, "");
    MSR_CHECK_EQ(cas(co, "e", "", "y", cur, sizeof cur), 1);
    MSR_CHECK_STR(cur, "y");
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* add reaches the counter's limits exactly and refuses one step past them,
 * leaving the counter as it was. */
static void test_store_add_limits(void)
{
    msr_coord_t *co = tc_running_coord();
    tcall_t c = {0};
    char got[64];
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    tc_set_kv(co, "hi", "9223372036854775806");
    a.key = "hi";
    a.delta = 1;
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK(c.answered && c.code == 0);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, INT64_MAX);
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_OUT_OF_RANGE);
    tc_set_kv(co, "lo", "-9223372036854775807");
    a.key = "lo";
    a.delta = -1;
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK(c.answered && c.code == 0);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, INT64_MIN);
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_OUT_OF_RANGE);
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "lo";
    tc_call(co, &c, MSR_RPC_GET, &g.base);
    MSR_CHECK(c.code == 0);
    Msr__GetResponse *r = (Msr__GetResponse *)c.resp;
    snprintf(got, sizeof got, "%.*s", (int)r->value.len, (const char *)r->value.data);
    MSR_CHECK_STR(got, "-9223372036854775808");
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* A barrier and an allgather half-reached when a generation ends are
 * forgotten: the next generation's of the same name start from nothing and
 * are not released early by the old arrivals. */
static void test_barrier_allgather_reset_on_restart(void)
{
    /* two ranks on one node, so that counts of 2 are the job's own */
    msr_coord_t *co = tc_make_coord(2, 2, 1);
    const char *a = tc_join(co, 0, 2, 2, -1);
    tcall_t c = {0}, b0 = {0}, g0 = {0}, b1 = {0}, g1 = {0};
    tc_beat(co, &c, a, 0, 0);
    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 2;
    b.wait_ms = 10000;
    tc_call(co, &b0, MSR_RPC_BARRIER, &b.base);
    uint8_t old = 'o', neu[2] = {'n', 'm'};
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep[1] = {&e};
    e.index = 0;
    e.data.data = &old;
    e.data.len = 1;
    Msr__AllgatherRequest ag = MSR__ALLGATHER_REQUEST__INIT;
    ag.name = "g";
    ag.count = 2;
    ag.n_entries = 1;
    ag.entries = ep;
    ag.wait_ms = 10000;
    tc_call(co, &g0, MSR_RPC_ALLGATHER, &ag.base);
    MSR_CHECK(!b0.answered && !g0.answered);
    tc_report(co, a, 0, 0, 1, 0); /* restart: generation 1 */
    MSR_CHECK_EQ(b0.code, GRPC_STATUS_ABORTED);
    MSR_CHECK_EQ(g0.code, GRPC_STATUS_ABORTED);
    tc_beat(co, &c, a, 1, 1);
    b.generation = 1;
    tc_call(co, &b1, MSR_RPC_BARRIER, &b.base);
    MSR_CHECK_MSG(!b1.answered, "the next generation's barrier was released by an old arrival");
    ag.generation = 1;
    e.index = 1;
    e.data.data = &neu[1];
    tc_call(co, &g1, MSR_RPC_ALLGATHER, &ag.base);
    MSR_CHECK_MSG(!g1.answered, "the next generation's allgather completed with an old entry");
    /* the second participants complete both, with this generation's data */
    tc_call(co, &c, MSR_RPC_BARRIER, &b.base);
    MSR_CHECK(c.answered && c.code == 0 && b1.answered && b1.code == 0);
    e.index = 0;
    e.data.data = &neu[0];
    tc_call(co, &c, MSR_RPC_ALLGATHER, &ag.base);
    MSR_CHECK(c.answered && c.code == 0 && g1.answered && g1.code == 0);
    Msr__AllgatherResponse *r = (Msr__AllgatherResponse *)g1.resp;
    MSR_CHECK(r->data.len == 2 && memcmp(r->data.data, "nm", 2) == 0);
    msr_tcall_reset(&c);
    msr_tcall_reset(&b0);
    msr_tcall_reset(&g0);
    msr_tcall_reset(&b1);
    msr_tcall_reset(&g1);
    msr_coord_destroy(co);
}

/* A relay's merged add (AddRequest.parts): applied in order, each once by
 * its ids, its parts' values answered; 1,024 parts at most; a part that
 * would fail alone ends the merge (fewer values), nothing after it applied. */
static Msr__AddResponse *merged_add(msr_coord_t *co, tcall_t *c, const char *key, size_t n,
                                    const uint64_t *rids, const int64_t *deltas)
{
    static Msr__AddPart parts[MSR_ADD_PARTS_MAX + 1];
    static Msr__AddPart *pp[MSR_ADD_PARTS_MAX + 1];
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = (char *)key;
    for (size_t k = 0; k < n; k++) {
        msr__add_part__init(&parts[k]);
        parts[k].client_id = 9;
        parts[k].request_id = rids ? rids[k] : 1 + k;
        parts[k].delta = deltas ? deltas[k] : 1;
        pp[k] = &parts[k];
    }
    a.n_parts = n;
    a.parts = pp;
    tc_call(co, c, MSR_RPC_ADD, &a.base);
    return c->answered && c->code == 0 ? (Msr__AddResponse *)c->resp : NULL;
}

static void test_store_add_merged(void)
{
    msr_coord_t *co = tc_running_coord();
    tcall_t c = {0};
    Msr__AddResponse *r = merged_add(co, &c, "ctr", MSR_ADD_PARTS_MAX, NULL, NULL);
    MSR_CHECK(r != NULL && r->n_values == MSR_ADD_PARTS_MAX);
    for (size_t k = 0; k < MSR_ADD_PARTS_MAX; k++)
        MSR_CHECK_EQ(r->values[k], (int64_t)k + 1);
    uint64_t past[MSR_ADD_PARTS_MAX + 1];
    for (size_t k = 0; k <= MSR_ADD_PARTS_MAX; k++)
        past[k] = 5000 + k;
    MSR_CHECK(merged_add(co, &c, "ctr", MSR_ADD_PARTS_MAX + 1, past, NULL) == NULL);
    MSR_CHECK_EQ(c.code, GRPC_STATUS_INVALID_ARGUMENT);
    /* a part applied before: its recorded value; the new one applied */
    uint64_t again[2] = {5, 2000};
    int64_t d[3] = {1, 7, 1};
    r = merged_add(co, &c, "ctr", 2, again, d);
    MSR_CHECK(r != NULL && r->n_values == 2 && r->values[0] == 5 &&
              r->values[1] == MSR_ADD_PARTS_MAX + 7);
    /* the same part alone: its record too */
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = "ctr";
    a.delta = 7;
    a.client_id = 9;
    a.request_id = 2000;
    tc_call(co, &c, MSR_RPC_ADD, &a.base);
    MSR_CHECK(c.answered && c.code == 0 &&
              ((Msr__AddResponse *)c.resp)->value == MSR_ADD_PARTS_MAX + 7);
    /* an overflow ends the merge: the part before it applied, none after */
    uint64_t ov[3] = {3001, 3002, 3003};
    int64_t big[3] = {INT64_MAX - 1, 2, 1};
    r = merged_add(co, &c, "big", 3, ov, big);
    MSR_CHECK(r != NULL && r->n_values == 1 && r->values[0] == INT64_MAX - 1);
    uint64_t last[1] = {3003};
    r = merged_add(co, &c, "big", 1, last, d);
    MSR_CHECK(r != NULL && r->n_values == 1 && r->values[0] == INT64_MAX);
    /* an id a Set used: the merge ends there */
    Msr__SetRequest st = MSR__SET_REQUEST__INIT;
    st.key = "k";
    st.value.data = (uint8_t *)"v";
    st.value.len = 1;
    st.client_id = 9;
    st.request_id = 4000;
    tc_call(co, &c, MSR_RPC_SET, &st.base);
    MSR_CHECK(c.answered && c.code == 0);
    uint64_t used[2] = {4001, 4000};
    r = merged_add(co, &c, "ctr", 2, used, d);
    MSR_CHECK(r != NULL && r->n_values == 1 && r->values[0] == MSR_ADD_PARTS_MAX + 8);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

static const msr_test_t tests[] = {
    {"store_get_wait", test_store_get_wait, 10},
    {"store_add_cas_delete", test_store_add_cas_delete, 10},
    {"store_bad_keys_and_generation", test_store_bad_keys_and_generation, 10},
    {"store_reset_on_restart", test_store_reset_on_restart, 10},
    {"barrier", test_barrier, 10},
    {"allgather", test_allgather, 10},
    {"store_stale_generation_every_call", test_store_stale_generation_every_call, 10},
    {"store_compare_set_exact", test_store_compare_set_exact, 10},
    {"store_add_limits", test_store_add_limits, 10},
    {"store_add_merged", test_store_add_merged, 10},
    {"barrier_allgather_reset_on_restart", test_barrier_allgather_reset_on_restart, 10},
};

const msr_test_piece_t tc_store_tests = MSR_TEST_PIECE(tests);
