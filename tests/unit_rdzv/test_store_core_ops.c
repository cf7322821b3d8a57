/* The store core's operations: each one, held gets with deadlines,
 * barriers, allgathers of unequal sizes, generations and reset, request
 * ids, publish and fetch, and the key count (test_store_core.h's helpers). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/time.h"
#include "tests/unit_rdzv/test_store_core.h"

static void test_each_op(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t c;
    sc_do_set(core, &c, "k", "v1");
    MSR_CHECK(c.answered && c.code == 0);
    sc_done(&c);
    MSR_CHECK_EQ(t.keys_changed, 1);
    sc_do_get(core, &c, "k", 0);
    sc_check_value(&c, "v1");
    sc_do_get(core, &c, "missing", 0);
    MSR_CHECK_EQ(c.code, MSR_RPC_NOT_FOUND);
    sc_do_get(core, &c, "", 0);
    MSR_CHECK_EQ(c.code, MSR_RPC_INVALID_ARGUMENT);

    sc_do_add(core, &c, "n", 5);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, 5);
    sc_done(&c);
    sc_do_add(core, &c, "n", -7);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, -2);
    sc_done(&c);
    sc_do_get(core, &c, "n", 0);
    sc_check_value(&c, "-2");
    sc_do_add(core, &c, "k", 1);
    MSR_CHECK_EQ(c.code, MSR_RPC_INVALID_ARGUMENT); /* "v1" is not a counter */
    sc_do_add(core, &c, "n", INT64_MIN);
    MSR_CHECK_EQ(c.code, MSR_RPC_OUT_OF_RANGE);

    /* compare-set: absent expected on a present key, then a match */
    sc_call_init(&c, MSR_RPC_COMPARE_SET);
    Msr__CompareSetRequest cs = MSR__COMPARE_SET_REQUEST__INIT;
    cs.key = "k";
    cs.expect_absent = 1;
    cs.desired.data = (uint8_t *)"x";
    cs.desired.len = 1;
    msr_store_core_call(core, &c, MSR_RPC_COMPARE_SET, &cs.base);
    const Msr__CompareSetResponse *csr = (const Msr__CompareSetResponse *)c.resp;
    MSR_CHECK(!csr->swapped && csr->present && csr->current.len == 2);
    sc_done(&c);
    sc_call_init(&c, MSR_RPC_COMPARE_SET);
    cs.expect_absent = 0;
    cs.expected.data = (uint8_t *)"v1";
    cs.expected.len = 2;
    msr_store_core_call(core, &c, MSR_RPC_COMPARE_SET, &cs.base);
    csr = (const Msr__CompareSetResponse *)c.resp;
    MSR_CHECK(csr->swapped && csr->present && csr->current.len == 1);
    sc_done(&c);
    sc_do_get(core, &c, "k", 0);
    sc_check_value(&c, "x");

    MSR_CHECK_EQ(msr_store_core_keys(core), 2);
    for (int i = 0; i < 2; i++) {
        sc_call_init(&c, MSR_RPC_DELETE);
        Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
        d.key = "k";
        msr_store_core_call(core, &c, MSR_RPC_DELETE, &d.base);
        MSR_CHECK_EQ(((Msr__DeleteResponse *)c.resp)->existed, i == 0);
        sc_done(&c);
    }
    MSR_CHECK_EQ(msr_store_core_keys(core), 1);

    sc_call_init(&c, MSR_RPC_JOIN);
    Msr__JoinRequest j = MSR__JOIN_REQUEST__INIT;
    msr_store_core_call(core, &c, MSR_RPC_JOIN, &j.base);
    MSR_CHECK_EQ(c.code, MSR_RPC_UNIMPLEMENTED);
    msr_store_core_destroy(core);
}

static void test_held_gets_and_deadlines(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);
    tcall_t a, b, w;
    sc_do_get(core, &a, "late", UINT32_MAX); /* no deadline at all */
    sc_do_get(core, &b, "late", 60000);
    MSR_CHECK(!a.answered && !b.answered);
    MSR_CHECK(msr_store_core_next_deadline(core) != MSR_DEADLINE_NEVER);
    sc_do_set(core, &w, "late", "here");
    sc_done(&w);
    sc_check_value(&a, "here");
    sc_check_value(&b, "here");
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);

    /* the wait's own deadline passes: not at a time before it (read
     * before the call, whatever time the call itself took), then after */
    uint64_t before = msr_now_ns();
    sc_do_get(core, &a, "never", 50);
    MSR_CHECK(!a.answered);
    msr_store_core_tick(core, before);
    MSR_CHECK(!a.answered);
    msr_store_core_tick(core, msr_now_ns() + 10ull * 1000000000ull);
    MSR_CHECK_EQ(a.code, MSR_RPC_DEADLINE_EXCEEDED);
    MSR_CHECK_MSG(strstr(a.message, "never") != NULL, "%s", a.message);

    /* the ops' deadline comes first when earlier */
    sc_call_init(&b, MSR_RPC_GET);
    b.deadline = msr_now_ns() + 1000000ull;
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "never";
    g.wait_ms = UINT32_MAX;
    msr_store_core_call(core, &b, MSR_RPC_GET, &g.base);
    MSR_CHECK(!b.answered);
    MSR_CHECK(msr_store_core_next_deadline(core) <= b.deadline);
    msr_store_core_tick(core, b.deadline);
    MSR_CHECK_EQ(b.code, MSR_RPC_DEADLINE_EXCEEDED);

    /* a cancelled get leaves nothing held */
    sc_do_get(core, &a, "gone", 60000);
    MSR_CHECK(a.data != NULL);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &a), 1);
    MSR_CHECK(a.data == NULL && !a.answered);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &a), 0);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);
    msr_store_core_destroy(core);
}

static void test_barrier(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t a, b, c;
    sc_do_barrier(core, &a, "b", 2, 1, 60000);
    MSR_CHECK(!a.answered);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &a), 1); /* its arrival is withdrawn */
    sc_do_barrier(core, &b, "b", 2, 1, 60000);
    MSR_CHECK(!b.answered);
    sc_do_barrier(core, &c, "b", 3, 1, 60000);
    MSR_CHECK_EQ(c.code, MSR_RPC_INVALID_ARGUMENT); /* count differs */
    sc_do_barrier(core, &c, "b", 2, 2, 60000);
    MSR_CHECK_EQ(c.code, MSR_RPC_INVALID_ARGUMENT); /* one more than its count */
    sc_do_barrier(core, &c, "b", 2, 1, 60000);
    MSR_CHECK(b.answered && b.code == 0 && c.answered && c.code == 0);
    sc_done(&b);
    sc_done(&c);
    /* weights: one call stands for three participants */
    sc_do_barrier(core, &a, "w", 4, 3, 60000);
    MSR_CHECK(!a.answered);
    sc_do_barrier(core, &b, "w", 4, 1, 60000);
    MSR_CHECK(a.code == 0 && b.code == 0 && a.answered && b.answered);
    sc_done(&a);
    sc_done(&b);
    t.participants = 4;
    sc_do_barrier(core, &a, "big", 5, 1, 60000);
    MSR_CHECK_EQ(a.code, MSR_RPC_INVALID_ARGUMENT); /* more than the job's ranks */
    /* a barrier whose deadline passes says how many arrived */
    sc_do_barrier(core, &a, "slow", 3, 1, 10);
    msr_store_core_tick(core, msr_now_ns() + 10ull * 1000000000ull);
    MSR_CHECK_EQ(a.code, MSR_RPC_DEADLINE_EXCEEDED);
    MSR_CHECK_MSG(strstr(a.message, "1 of 3") != NULL, "%s", a.message);
    msr_store_core_destroy(core);
}

static void test_allgather_unequal_sizes(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    static char big[3000];
    memset(big, 'z', sizeof big);
    tcall_t c[3], bad;
    sc_do_gather(core, &c[2], "g", 3, 2, big, sizeof big, 60000);
    sc_do_gather(core, &c[0], "g", 3, 0, "", 0, 60000);
    MSR_CHECK(!c[0].answered && !c[2].answered);
    sc_do_gather(core, &bad, "g", 3, 2, "dup", 3, 60000);
    MSR_CHECK_EQ(bad.code, MSR_RPC_INVALID_ARGUMENT); /* index 2 given twice */
    sc_do_gather(core, &bad, "g", 4, 1, "x", 1, 60000);
    MSR_CHECK_EQ(bad.code, MSR_RPC_INVALID_ARGUMENT); /* count differs */
    sc_do_gather(core, &bad, "g", 3, 3, "x", 1, 60000);
    MSR_CHECK_EQ(bad.code, MSR_RPC_INVALID_ARGUMENT); /* index not below the count */
    sc_do_gather(core, &c[1], "g", 3, 1, "hello", 5, 60000);
    for (int i = 0; i < 3; i++) {
        MSR_CHECK_MSG(c[i].answered && c[i].code == 0, "%d: %d %s", i, c[i].code, c[i].message);
        const Msr__AllgatherResponse *r = (const Msr__AllgatherResponse *)c[i].resp;
        MSR_CHECK_EQ(r->n_lengths, 3);
        MSR_CHECK_EQ(r->lengths[0], 0);
        MSR_CHECK_EQ(r->lengths[1], 5);
        MSR_CHECK_EQ(r->lengths[2], sizeof big);
        MSR_CHECK_EQ(r->data.len, 5 + sizeof big);
        MSR_CHECK(memcmp(r->data.data, "hello", 5) == 0);
        MSR_CHECK(memcmp(r->data.data + 5, big, sizeof big) == 0);
        sc_done(&c[i]);
    }
    /* a contribution that gives up is withdrawn: the index is free again */
    sc_do_gather(core, &c[0], "h", 2, 0, "a", 1, 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &c[0]), 1);
    sc_do_gather(core, &c[0], "h", 2, 0, "bb", 2, 60000);
    sc_do_gather(core, &c[1], "h", 2, 1, "c", 1, 60000);
    MSR_CHECK(c[0].code == 0 && c[1].code == 0);
    MSR_CHECK_EQ(((Msr__AllgatherResponse *)c[0].resp)->lengths[0], 2);
    sc_done(&c[0]);
    sc_done(&c[1]);
    msr_store_core_destroy(core);
}

static void test_generations_and_reset(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    t.generation = 3;
    tcall_t c, held, bar;
    sc_call_init(&c, MSR_RPC_SET);
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = "k";
    s.generation = 2;
    msr_store_core_call(core, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, MSR_RPC_ABORTED);
    MSR_CHECK_MSG(strstr(c.message, "stale generation 2") != NULL, "%s", c.message);
    MSR_CHECK_EQ(msr_store_core_keys(core), 0);
    sc_call_init(&c, MSR_RPC_SET);
    s.generation = 3;
    msr_store_core_call(core, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.answered && c.code == 0);
    sc_done(&c);
    MSR_CHECK_EQ(msr_store_core_keys(core), 1);

    sc_call_init(&held, MSR_RPC_GET);
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "next";
    g.wait_ms = UINT32_MAX;
    g.generation = 3;
    msr_store_core_call(core, &held, MSR_RPC_GET, &g.base);
    sc_call_init(&bar, MSR_RPC_BARRIER);
    Msr__BarrierRequest b = MSR__BARRIER_REQUEST__INIT;
    b.name = "b";
    b.count = 2;
    b.wait_ms = 60000;
    b.generation = 3;
    msr_store_core_call(core, &bar, MSR_RPC_BARRIER, &b.base);
    MSR_CHECK(!held.answered && !bar.answered);
    t.generation = 4;
    msr_store_core_reset(core, "generation 3 ended");
    MSR_CHECK_EQ(held.code, MSR_RPC_ABORTED);
    MSR_CHECK_STR(held.message, "generation 3 ended");
    MSR_CHECK_EQ(bar.code, MSR_RPC_ABORTED);
    MSR_CHECK_EQ(msr_store_core_keys(core), 0);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);
    /* the barrier starts again from nothing */
    sc_call_init(&bar, MSR_RPC_BARRIER);
    b.generation = 4;
    msr_store_core_call(core, &bar, MSR_RPC_BARRIER, &b.base);
    MSR_CHECK(!bar.answered);
    msr_store_core_destroy(core); /* drops what it holds, unanswered */
}

static void test_request_ids(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t c;
    sc_call_init(&c, MSR_RPC_SET);
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = "k";
    s.client_id = 7;
    s.request_id = 1;
    msr_store_core_call(core, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.code == 0 && c.answered);
    sc_done(&c);
    MSR_CHECK_EQ(t.writes_remembered, 1);
    /* a write the user has seen before is answered by it, not applied */
    t.seen = 1;
    sc_call_init(&c, MSR_RPC_SET);
    s.key = "other";
    msr_store_core_call(core, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.code == 0 && c.answered);
    sc_done(&c);
    MSR_CHECK_EQ(msr_store_core_keys(core), 1);
    MSR_CHECK_EQ(t.writes_remembered, 1);
    msr_store_core_destroy(core);
}

/* A fetch answers with the values in the order asked, once all exist;
 * one that waits moves from one missing entry to the next; a missing
 * entry ends it at its deadline, named in the error. */
static void test_publish_fetch(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t p, f, g, h;
    uint32_t want[3] = {2, 0, 1};
    sc_do_fetch(core, &f, "addr", want, 3, 60000);
    sc_do_fetch(core, &h, "addr", want + 2, 1, 0);
    MSR_CHECK(!f.answered);
    MSR_CHECK_EQ(h.code, MSR_RPC_NOT_FOUND);
    MSR_CHECK_MSG(strstr(h.message, "entry 1 ") != NULL, "%s", h.message);
    sc_do_publish(core, &p, "addr", 2, "cc");
    MSR_CHECK(!f.answered);
    sc_do_publish(core, &p, "addr", 0, "a");
    MSR_CHECK(!f.answered);
    sc_do_publish(core, &p, "addr", 1, "bbb");
    MSR_CHECK_MSG(f.answered && f.code == 0, "fetch: %d %s", f.code, f.message);
    const Msr__FetchResponse *r = (const Msr__FetchResponse *)f.resp;
    MSR_CHECK_EQ(r->n_lengths, 3);
    MSR_CHECK(r->lengths[0] == 2 && r->lengths[1] == 1 && r->lengths[2] == 3);
    MSR_CHECK_EQ(r->data.len, 6);
    MSR_CHECK(memcmp(r->data.data, "ccabbb", 6) == 0);
    sc_done(&f);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);
    /* the entry is an ordinary key too */
    sc_do_get(core, &g, "addr/1", 0);
    sc_check_value(&g, "bbb");

    /* present now: answered at once */
    sc_do_fetch(core, &f, "addr", want, 2, 0);
    MSR_CHECK(f.answered && f.code == 0);
    sc_done(&f);

    /* never published: the deadline names the entry */
    uint32_t late[2] = {0, 7};
    sc_do_fetch(core, &f, "addr", late, 2, 50);
    MSR_CHECK(!f.answered);
    msr_store_core_tick(core, msr_now_ns() + 10ull * 1000000000ull);
    MSR_CHECK_EQ(f.code, MSR_RPC_DEADLINE_EXCEEDED);
    MSR_CHECK_MSG(strstr(f.message, "fetch 'addr': entry 7 was not published") != NULL, "%s",
                  f.message);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);

    /* a cancelled fetch leaves nothing held; a reset fails a held one */
    sc_do_fetch(core, &f, "addr", late, 2, 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &f), 1);
    MSR_CHECK(!f.answered && f.data == NULL);
    sc_do_fetch(core, &f, "addr", late, 2, UINT32_MAX);
    msr_store_core_reset(core, "restart");
    MSR_CHECK_EQ(f.code, MSR_RPC_ABORTED);
    msr_store_core_destroy(core);
}

/* NumKeys of generation gen: the count, or -1 - the failure's code. */
static int64_t num_keys(msr_store_core_t *core, int gen)
{
    tcall_t c;
    sc_call_init(&c, MSR_RPC_NUM_KEYS);
    Msr__NumKeysRequest r = MSR__NUM_KEYS_REQUEST__INIT;
    r.generation = gen;
    msr_store_core_call(core, &c, MSR_RPC_NUM_KEYS, &r.base);
    MSR_CHECK(c.answered);
    if (c.code != 0)
        return -1 - c.code;
    int64_t n = (int64_t)((const Msr__NumKeysResponse *)c.resp)->keys;
    sc_done(&c);
    return n;
}

/* NumKeys counts the keys stored: each once, whatever wrote it, until it
 * is deleted; names waited on, barriers and allgathers are no keys. */
static void test_num_keys(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t c, held[3];
    MSR_CHECK_EQ(num_keys(core, 0), 0); /* an empty store */
    sc_do_set(core, &c, "a", "1");
    sc_done(&c);
    sc_do_set(core, &c, "a", "2"); /* set twice: one key */
    sc_done(&c);
    MSR_CHECK_EQ(num_keys(core, 0), 1);
    sc_do_add(core, &c, "n", 1);
    sc_done(&c);
    sc_do_add(core, &c, "n", 1);
    sc_done(&c);
    MSR_CHECK_EQ(num_keys(core, 0), 2);
    sc_call_init(&c, MSR_RPC_COMPARE_SET);
    Msr__CompareSetRequest cs = MSR__COMPARE_SET_REQUEST__INIT;
    cs.key = "%0Aesc%25";
    cs.expect_absent = 1;
    msr_store_core_call(core, &c, MSR_RPC_COMPARE_SET, &cs.base);
    sc_done(&c);
    sc_do_publish(core, &c, "addr", 3, "x"); /* the key "addr/3" */
    MSR_CHECK_EQ(num_keys(core, 0), 4);
    /* waiting calls hold names, not keys */
    sc_do_get(core, &held[0], "late", 60000);
    sc_do_barrier(core, &held[1], "bar", 2, 1, 60000);
    sc_do_gather(core, &held[2], "gat", 2, 0, "d", 1, 60000);
    MSR_CHECK(!held[0].answered && !held[1].answered && !held[2].answered);
    MSR_CHECK_EQ(num_keys(core, 0), 4);
    for (int i = 0; i < 2; i++) { /* a delete, then one of a key gone */
        sc_call_init(&c, MSR_RPC_DELETE);
        Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
        d.key = "a";
        msr_store_core_call(core, &c, MSR_RPC_DELETE, &d.base);
        sc_done(&c);
        MSR_CHECK_EQ(num_keys(core, 0), 3);
    }
    sc_do_set(core, &c, "late", "now"); /* answers the get: a key now */
    sc_done(&c);
    sc_check_value(&held[0], "now");
    MSR_CHECK_EQ(num_keys(core, 0), 4);
    MSR_CHECK_EQ(num_keys(core, 0), (int64_t)msr_store_core_keys(core));
    /* another generation's count is refused; a new one starts empty */
    MSR_CHECK_EQ(num_keys(core, 1), -1 - MSR_RPC_ABORTED);
    t.generation = 1;
    msr_store_core_reset(core, "generation 0 ended");
    MSR_CHECK_EQ(held[1].code, MSR_RPC_ABORTED);
    MSR_CHECK_EQ(held[2].code, MSR_RPC_ABORTED);
    MSR_CHECK_EQ(num_keys(core, 1), 0);
    msr_store_core_destroy(core);
}

/* A get waiting for key to change from old (msrun.proto: GetRequest's
 * changed), wait_ms as a get's. */
static void do_change(msr_store_core_t *core, tcall_t *c, const char *key, const char *old,
                      uint32_t wait_ms)
{
    sc_call_init(c, MSR_RPC_GET);
    Msr__GetRequest r = MSR__GET_REQUEST__INIT;
    r.key = (char *)key;
    r.wait_ms = wait_ms;
    r.changed = 1;
    r.old_value.data = (uint8_t *)old;
    r.old_value.len = strlen(old);
    msr_store_core_call(core, c, MSR_RPC_GET, &r.base);
}

static void test_wait_change(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t c, w[4];
    sc_do_set(core, &c, "k", "v1");
    sc_done(&c);
    /* answered at once: unchanged with no wait, changed, absent */
    do_change(core, &c, "k", "v1", 0);
    MSR_CHECK_EQ(c.code, MSR_RPC_DEADLINE_EXCEEDED);
    do_change(core, &c, "k", "v0", 0);
    sc_check_value(&c, "v1");
    do_change(core, &c, "k", "v", 60000); /* a prefix of the value is another value */
    sc_check_value(&c, "v1");
    do_change(core, &c, "absent", "v1", 60000);
    MSR_CHECK_EQ(c.code, MSR_RPC_NOT_FOUND);

    /* several waiters, one gives up; a write of the same value wakes none */
    for (int i = 0; i < 3; i++)
        do_change(core, &w[i], "k", "v1", i == 2 ? UINT32_MAX : 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &w[1]), 1);
    sc_do_set(core, &c, "k", "v1");
    sc_done(&c);
    MSR_CHECK(!w[0].answered && !w[1].answered && !w[2].answered);
    sc_do_set(core, &c, "k", "v2");
    sc_done(&c);
    sc_check_value(&w[0], "v2");
    sc_check_value(&w[2], "v2");
    MSR_CHECK(!w[1].answered);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);

    /* deleted: NOT_FOUND; a get waiting for another key is left alone */
    do_change(core, &w[0], "k", "v2", 60000);
    sc_do_get(core, &w[1], "other", 60000);
    sc_call_init(&c, MSR_RPC_DELETE);
    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "k";
    msr_store_core_call(core, &c, MSR_RPC_DELETE, &d.base);
    sc_done(&c);
    MSR_CHECK_EQ(w[0].code, MSR_RPC_NOT_FOUND);
    MSR_CHECK_MSG(strstr(w[0].message, "deleted") != NULL, "%s", w[0].message);
    MSR_CHECK(!w[1].answered);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &w[1]), 1);

    /* a counter: add 0 is no change, add 1 is */
    sc_do_add(core, &c, "n", 5);
    sc_done(&c);
    do_change(core, &w[0], "n", "5", 60000);
    sc_do_add(core, &c, "n", 0);
    sc_done(&c);
    MSR_CHECK(!w[0].answered);
    sc_do_add(core, &c, "n", 1);
    sc_done(&c);
    sc_check_value(&w[0], "6");

    /* the deadline: not a tick before it, exactly at it */
    sc_call_init(&w[3], MSR_RPC_GET);
    w[3].deadline = msr_now_ns() + 1000000ull;
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "n";
    g.wait_ms = UINT32_MAX;
    g.changed = 1;
    g.old_value.data = (uint8_t *)"6";
    g.old_value.len = 1;
    msr_store_core_call(core, &w[3], MSR_RPC_GET, &g.base);
    msr_store_core_tick(core, w[3].deadline - 1);
    MSR_CHECK(!w[3].answered);
    msr_store_core_tick(core, w[3].deadline);
    MSR_CHECK_EQ(w[3].code, MSR_RPC_DEADLINE_EXCEEDED);
    MSR_CHECK_MSG(strstr(w[3].message, "did not change") != NULL, "%s", w[3].message);

    /* the generation ends: a change-wait is aborted */
    do_change(core, &w[0], "n", "6", 60000);
    MSR_CHECK(!w[0].answered);
    t.generation = 1;
    msr_store_core_reset(core, "generation 0 ended");
    MSR_CHECK_EQ(w[0].code, MSR_RPC_ABORTED);
    msr_store_core_destroy(core);
}

static const msr_test_t tests[] = {
    {"num_keys", test_num_keys, 10},
    {"each_op", test_each_op, 10},
    {"held_gets_and_deadlines", test_held_gets_and_deadlines, 10},
    {"barrier", test_barrier, 10},
    {"allgather_unequal_sizes", test_allgather_unequal_sizes, 10},
    {"generations_and_reset", test_generations_and_reset, 10},
    {"request_ids", test_request_ids, 10},
    {"publish_fetch", test_publish_fetch, 10},
    {"wait_change", test_wait_change, 10},
};

const msr_test_piece_t sc_ops_tests = MSR_TEST_PIECE(tests);
