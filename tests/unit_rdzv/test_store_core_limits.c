/* The store core's limits and what a caller that gives up leaves: the
 * limits, barrier and allgather withdrawals in every order, fetch,
 * counter and publish bounds at their limit and one past, the bytes an
 * entry counts, and every allocation failing in turn. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/time.h"
#include "tests/unit_rdzv/test_store_core.h"

static void test_limits(void)
{
    tctx_t t;
    msr_store_limits_t l = {.value_max = 10, .keys_max = 2, .bytes_max = 0};
    msr_store_core_t *core = sc_core_new(&t, &l);
    tcall_t c, w;
    sc_do_set(core, &c, "k", "01234567890");
    MSR_CHECK_EQ(c.code, MSR_RPC_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(c.message, "--store_value_max") != NULL, "%s", c.message);
    sc_do_set(core, &c, "a", "1");
    sc_done(&c);
    sc_do_get(core, &w, "b", 60000); /* a waited-on name counts as a key */
    MSR_CHECK(!w.answered);
    sc_do_set(core, &c, "c", "1");
    MSR_CHECK_EQ(c.code, MSR_RPC_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(c.message, "--store_keys_max") != NULL, "%s", c.message);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &w), 1); /* the name is given back */
    sc_do_set(core, &c, "c", "1");
    MSR_CHECK_MSG(c.code == 0, "%s", c.message);
    sc_done(&c);
    msr_store_core_destroy(core);
}

/* Limits not given grow with the job past 256K ranks (4 keys and 4 KiB a
 * rank), at the bound and one past; given ones stay; none shrinks when
 * the job does. */
static void test_limits_for_job(void)
{
    const uint64_t at = MSR_STORE_KEYS_MAX_DEFAULT / MSR_STORE_KEYS_PER_RANK; /* 262,144 */
    msr_store_limits_t l = msr_store_limits_for_job(NULL, 0);
    MSR_CHECK_EQ(l.keys_max, MSR_STORE_KEYS_MAX_DEFAULT);
    MSR_CHECK_EQ(l.bytes_max, MSR_STORE_BYTES_MAX_DEFAULT);
    MSR_CHECK_EQ(l.value_max, MSR_STORE_VALUE_MAX_DEFAULT);
    l = msr_store_limits_for_job(NULL, at);
    MSR_CHECK_EQ(l.keys_max, MSR_STORE_KEYS_MAX_DEFAULT);
    MSR_CHECK_EQ(l.bytes_max, MSR_STORE_BYTES_MAX_DEFAULT);
    l = msr_store_limits_for_job(NULL, at + 1);
    MSR_CHECK_EQ(l.keys_max, MSR_STORE_KEYS_MAX_DEFAULT + MSR_STORE_KEYS_PER_RANK);
    MSR_CHECK_EQ(l.bytes_max, MSR_STORE_BYTES_MAX_DEFAULT + MSR_STORE_BYTES_PER_RANK);
    MSR_CHECK_EQ(l.value_max, MSR_STORE_VALUE_MAX_DEFAULT);
    l = msr_store_limits_for_job(NULL, UINT32_MAX - 1ull);
    MSR_CHECK_EQ(l.keys_max, (UINT32_MAX - 1ull) * MSR_STORE_KEYS_PER_RANK);
    msr_store_limits_t given = {.value_max = 3, .keys_max = 5, .bytes_max = 0};
    l = msr_store_limits_for_job(&given, 1u << 20);
    MSR_CHECK_EQ(l.value_max, 3);
    MSR_CHECK_EQ(l.keys_max, 5);
    MSR_CHECK_EQ(l.bytes_max, (uint64_t)MSR_STORE_BYTES_PER_RANK << 20);

    /* The core: a job of 262,145 ranks holds 1,048,580 keys, not one more */
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    t.participants = (uint32_t)at + 1;
    char key[32];
    for (uint64_t i = 0; i < MSR_STORE_KEYS_MAX_DEFAULT; i++) {
        snprintf(key, sizeof key, "k%llu", (unsigned long long)i);
        MSR_CHECK_EQ(msr_store_core_load_set(core, key, "", 0), MSR_OK);
    }
    tcall_t c;
    for (int i = 0; i < MSR_STORE_KEYS_PER_RANK; i++) {
        snprintf(key, sizeof key, "more%d", i);
        sc_do_set(core, &c, key, "1");
        MSR_CHECK_MSG(c.code == 0, "%s", c.message);
        sc_done(&c);
    }
    sc_do_set(core, &c, "past", "1");
    MSR_CHECK_EQ(c.code, MSR_RPC_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(c.message, "1048580 keys") != NULL, "%s", c.message);
    /* the job shrinks: the store keeps what it holds and its limit */
    t.participants = 8;
    msr_store_core_load_delete(core, "more0");
    sc_do_set(core, &c, "past", "1");
    MSR_CHECK_MSG(c.code == 0, "%s", c.message);
    sc_done(&c);
    sc_do_set(core, &c, "past2", "1");
    MSR_CHECK_EQ(c.code, MSR_RPC_RESOURCE_EXHAUSTED);
    msr_store_core_destroy(core);
}

/* Gives up a held call by its deadline: ticks to a time past wait_ms,
 * earlier than the deadlines of the other calls (a minute). */
static void expire(msr_store_core_t *core, tcall_t *c)
{
    MSR_CHECK(!c->answered);
    msr_store_core_tick(core, msr_now_ns() + 5ull * 1000000000ull);
    MSR_CHECK_MSG(c->code == MSR_RPC_DEADLINE_EXCEEDED, "code %d %s", c->code, c->message);
}

/* A weighted arrival that gives up takes back its whole weight, whether it
 * gives up first or last of several callers, by cancel or by deadline:
 * afterwards exactly the rest of the count completes the barrier. */
static void test_barrier_withdraw_orders(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t a, b, c, d;
    /* the weighted one first: 2 + 1 arrive, the 2 leaves, 1 + 2 + 1 fill 4 */
    sc_do_barrier(core, &a, "first", 4, 2, 60000);
    sc_do_barrier(core, &b, "first", 4, 1, 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &a), 1);
    sc_do_barrier(core, &c, "first", 4, 1, 60000);
    MSR_CHECK(!b.answered && !c.answered);
    sc_do_barrier(core, &a, "first", 4, 2, 60000); /* exactly the room left */
    MSR_CHECK_MSG(a.answered && a.code == 0, "%d %s", a.code, a.message);
    MSR_CHECK(b.answered && b.code == 0 && c.answered && c.code == 0);
    sc_done(&a);
    sc_done(&b);
    sc_done(&c);
    /* the weighted one last, by its deadline: 1 + 1 + 3 of 6, the first 1
     * and then the 3 leave; 1 is left, 5 more fill it, 6 would not */
    sc_do_barrier(core, &b, "last", 6, 1, 60000);
    sc_do_barrier(core, &c, "last", 6, 1, 60000);
    sc_do_barrier(core, &a, "last", 6, 3, 10);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &b), 1);
    expire(core, &a);
    MSR_CHECK_MSG(strstr(a.message, "4 of 6") != NULL, "%s", a.message);
    MSR_CHECK(!c.answered);
    sc_do_barrier(core, &d, "last", 6, 6, 60000);
    MSR_CHECK_EQ(d.code, MSR_RPC_INVALID_ARGUMENT); /* one past the room left */
    sc_do_barrier(core, &d, "last", 6, 5, 60000);
    MSR_CHECK_MSG(d.answered && d.code == 0, "%d %s", d.code, d.message);
    MSR_CHECK(c.answered && c.code == 0);
    sc_done(&c);
    sc_done(&d);
    /* every caller gives up, the weighted one first: nothing is
     * left, and the barrier starts again from nothing */
    sc_do_barrier(core, &a, "all", 4, 1, 60000);
    sc_do_barrier(core, &b, "all", 4, 2, 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &b), 1);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &a), 1);
    sc_do_barrier(core, &a, "all", 4, 1, 10);
    expire(core, &a);
    MSR_CHECK_MSG(strstr(a.message, "1 of 4") != NULL, "%s", a.message);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);
    msr_store_core_destroy(core);
}

/* An allgather call of n entries (indices idx[0..n), data "<index>"). */
static void do_gather_n(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t count,
                        const uint32_t *idx, size_t n, uint32_t wait_ms)
{
    sc_call_init(c, MSR_RPC_ALLGATHER);
    Msr__Contribution e[4], *ep[4];
    char data[4][4];
    MSR_CHECK(n <= 4);
    for (size_t k = 0; k < n; k++) {
        msr__contribution__init(&e[k]);
        ep[k] = &e[k];
        e[k].index = idx[k];
        snprintf(data[k], sizeof data[k], "%u", idx[k]);
        e[k].data.data = (uint8_t *)data[k];
        e[k].data.len = strlen(data[k]);
    }
    Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
    r.name = (char *)name;
    r.count = count;
    r.n_entries = n;
    r.entries = ep;
    r.wait_ms = wait_ms;
    msr_store_core_call(core, c, MSR_RPC_ALLGATHER, &r.base);
}

/* Every index's data ("0", "1", ...) in c's answer, for a count of n. */
static void check_gathered(tcall_t *c, uint32_t n)
{
    MSR_CHECK_MSG(c->answered && c->code == 0, "allgather: %d %s", c->code, c->message);
    const Msr__AllgatherResponse *r = (const Msr__AllgatherResponse *)c->resp;
    MSR_CHECK_EQ(r->n_lengths, n);
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        char want[4];
        snprintf(want, sizeof want, "%u", i);
        MSR_CHECK_EQ(r->lengths[i], strlen(want));
        MSR_CHECK(memcmp(r->data.data + off, want, r->lengths[i]) == 0);
        off += r->lengths[i];
    }
    sc_done(c);
}

/* A caller that gives up takes back its own contributions and no one
 * else's: three callers (one bringing two entries), the two-entry one
 * giving up first, then a one-entry one giving up last. */
static void test_allgather_withdraw_orders(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t a, b, c;
    const uint32_t i01[] = {0, 1}, i2[] = {2}, i3[] = {3};
    do_gather_n(core, &a, "g", 4, i01, 2, 60000);
    do_gather_n(core, &b, "g", 4, i2, 1, 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &a), 1);
    do_gather_n(core, &c, "g", 4, i3, 1, 60000);
    MSR_CHECK(!b.answered && !c.answered);
    do_gather_n(core, &a, "g", 4, i01, 2, 60000); /* 2 and 3 were kept */
    check_gathered(&a, 4);
    check_gathered(&b, 4);
    check_gathered(&c, 4);
    /* the one-entry callers leave last, by deadline then by cancel; the
     * two-entry one's entries stay, and three more calls complete it */
    const uint32_t i4[] = {4};
    tcall_t d;
    do_gather_n(core, &a, "h", 5, i01, 2, 60000);
    do_gather_n(core, &b, "h", 5, i2, 1, 10);
    do_gather_n(core, &c, "h", 5, i3, 1, 60000);
    expire(core, &b);
    MSR_CHECK_MSG(strstr(b.message, "4 of 5") != NULL, "%s", b.message);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &c), 1);
    do_gather_n(core, &b, "h", 5, i2, 1, 60000);
    do_gather_n(core, &c, "h", 5, i3, 1, 60000);
    MSR_CHECK(!a.answered && !b.answered && !c.answered);
    do_gather_n(core, &d, "h", 5, i4, 1, 60000);
    check_gathered(&a, 5);
    check_gathered(&b, 5);
    check_gathered(&c, 5);
    check_gathered(&d, 5);
    msr_store_core_destroy(core);
}

/* A fetch of exactly MSR_FETCH_MAX entries is taken (here: none is
 * published, so it is answered "not found"), one more is refused; three
 * fetchers of the same entries give up in turn, the last is answered. */
static void test_fetch_bounds(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    static uint32_t many[MSR_FETCH_MAX + 1];
    for (uint32_t i = 0; i <= MSR_FETCH_MAX; i++)
        many[i] = i;
    tcall_t f[3], p;
    sc_do_fetch(core, &f[0], "addr", many, MSR_FETCH_MAX, 0);
    MSR_CHECK_MSG(f[0].code == MSR_RPC_NOT_FOUND, "%d %s", f[0].code, f[0].message);
    MSR_CHECK_MSG(strstr(f[0].message, "entry 0 was not published") != NULL, "%s", f[0].message);
    sc_do_fetch(core, &f[0], "addr", many, MSR_FETCH_MAX + 1, 0);
    MSR_CHECK_EQ(f[0].code, MSR_RPC_INVALID_ARGUMENT);
    MSR_CHECK_MSG(strstr(f[0].message, "65537 entries asked, at most 65536") != NULL, "%s",
                  f[0].message);
    /* held at its bound: one entry published of MSR_FETCH_MAX, it waits on the next */
    sc_do_publish(core, &p, "big", 0, "a");
    sc_do_fetch(core, &f[0], "big", many, MSR_FETCH_MAX, 10);
    expire(core, &f[0]);
    MSR_CHECK_MSG(strstr(f[0].message, "entry 1 was not published") != NULL, "%s", f[0].message);
    /* three callers on entries 1 and 2: the first gives up by cancel, the
     * second by its deadline, the third gets both */
    sc_do_fetch(core, &f[0], "addr", many + 1, 2, 60000);
    sc_do_fetch(core, &f[1], "addr", many + 1, 2, 10);
    sc_do_fetch(core, &f[2], "addr", many + 1, 2, 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &f[0]), 1);
    sc_do_publish(core, &p, "addr", 1, "one");
    expire(core, &f[1]);
    MSR_CHECK_MSG(strstr(f[1].message, "entry 2 was not published") != NULL, "%s", f[1].message);
    MSR_CHECK(!f[2].answered);
    sc_do_publish(core, &p, "addr", 2, "two");
    MSR_CHECK_MSG(f[2].answered && f[2].code == 0, "%d %s", f[2].code, f[2].message);
    MSR_CHECK_EQ(((Msr__FetchResponse *)f[2].resp)->data.len, 6);
    sc_done(&f[2]);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);
    msr_store_core_destroy(core);
}

/* An entry counts its key's bytes, its value's and MSR_STORE_ENTRY_OVERHEAD
 * against --store_bytes_max: a set that fills it exactly is taken, one
 * byte more of key or of value is refused. */
static void test_bytes_count_keys(void)
{
    enum { KEY = 10, VALUE = 26 };
    msr_store_limits_t l = {.bytes_max = KEY + VALUE + MSR_STORE_ENTRY_OVERHEAD};
    char value[VALUE + 2];
    memset(value, 'v', VALUE);
    value[VALUE] = '\0';
    const char *keys[] = {"abcdefghij", "abcdefghijk"}; /* KEY, KEY + 1 */
    for (int one_more = 0; one_more < 2; one_more++) {
        tctx_t t;
        msr_store_core_t *core = sc_core_new(&t, &l);
        tcall_t c;
        MSR_CHECK_EQ(strlen(keys[0]), KEY);
        sc_do_set(core, &c, keys[one_more], value);
        if (one_more) {
            MSR_CHECK_EQ(c.code, MSR_RPC_RESOURCE_EXHAUSTED);
            MSR_CHECK_MSG(strstr(c.message, "--store_bytes_max") != NULL, "%s", c.message);
        } else {
            MSR_CHECK_MSG(c.answered && c.code == 0, "%d %s", c.code, c.message);
            sc_done(&c);
            value[VALUE] = 'v'; /* the same key, one byte more of value */
            value[VALUE + 1] = '\0';
            sc_do_set(core, &c, keys[0], value);
            MSR_CHECK_EQ(c.code, MSR_RPC_RESOURCE_EXHAUSTED);
            value[VALUE] = '\0';
        }
        msr_store_core_destroy(core);
    }
}

/* A counter's text of 31 characters (leading zeros) is a counter; one of
 * 32, the bound of its parse buffer, is not, whatever its digits say. */
static void test_counter_text_bound(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    char text[33];
    for (size_t len = 31; len <= 32; len++) {
        memset(text, '0', len - 1);
        text[len - 1] = '7';
        text[len] = '\0';
        tcall_t c;
        sc_do_set(core, &c, "n", text);
        MSR_CHECK_MSG(c.answered && c.code == 0, "%d %s", c.code, c.message);
        sc_done(&c);
        sc_do_add(core, &c, "n", 1);
        if (len == 31) {
            MSR_CHECK_MSG(c.answered && c.code == 0, "%d %s", c.code, c.message);
            MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, 8);
            sc_done(&c);
        } else {
            MSR_CHECK_EQ(c.code, MSR_RPC_INVALID_ARGUMENT);
            MSR_CHECK_MSG(strstr(c.message, "not a counter") != NULL, "%s", c.message);
        }
    }
    msr_store_core_destroy(core);
}

/* A published entry's key "<name>/<index>" of MSR_KEY_MAX characters is
 * taken; one character more (a longer index) is refused, not cut short. */
static void test_publish_key_bound(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    static char name[MSR_KEY_MAX + 1];
    memset(name, 'n', MSR_KEY_MAX - 2);
    name[MSR_KEY_MAX - 2] = '\0'; /* + "/0" is MSR_KEY_MAX */
    tcall_t c;
    sc_do_publish(core, &c, name, 0, "a");
    for (uint32_t index = 9; index <= 10; index++) {
        sc_call_init(&c, MSR_RPC_PUBLISH);
        Msr__Contribution e = MSR__CONTRIBUTION__INIT;
        Msr__Contribution *ep = &e;
        e.index = index;
        e.data.data = (uint8_t *)"b";
        e.data.len = 1;
        Msr__PublishRequest r = MSR__PUBLISH_REQUEST__INIT;
        r.name = name;
        r.n_entries = 1;
        r.entries = &ep;
        msr_store_core_call(core, &c, MSR_RPC_PUBLISH, &r.base);
        if (index == 9) {
            MSR_CHECK_MSG(c.answered && c.code == 0, "%d %s", c.code, c.message);
            sc_done(&c);
        } else {
            MSR_CHECK_EQ(c.code, MSR_RPC_INVALID_ARGUMENT);
            MSR_CHECK_MSG(strstr(c.message, "too long") != NULL, "%s", c.message);
        }
    }
    msr_store_core_destroy(core);
}

/* Each allocation of creating a core, and of an allgather's first
 * contribution, fails in turn: the failure is reported (the call answered
 * with an error), nothing is left half made, and the allgather then
 * completes. */
static void test_alloc_failures(void)
{
    tctx_t t;
    memset(&t, 0, sizeof t);
    t.participants = 8;
    msr_store_ops_t ops = sc_ops_for(&t);
    for (long k = 0;; k++) {
        msr_store_core_t *core = NULL;
        msr_alloc_fail_at(k);
        msr_status_t st = msr_store_core_create(NULL, &ops, &core);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        if (failed) {
            MSR_CHECK_EQ(st, MSR_ERR_NO_MEMORY);
            MSR_CHECK(core == NULL);
            continue;
        }
        MSR_CHECK_EQ(st, MSR_OK);
        msr_store_core_destroy(core);
        break;
    }
    for (long k = 0;; k++) {
        msr_store_core_t *core = sc_core_new(&t, NULL);
        tcall_t a, b;
        msr_alloc_fail_at(k);
        sc_do_gather(core, &a, "g", 2, 0, "abc", 3, 60000);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        if (failed) {
            MSR_CHECK_MSG(a.answered && a.code != 0, "allocation %ld: %d", k, a.code);
            sc_do_gather(core, &a, "g", 2, 0, "abc", 3, 60000);
        }
        MSR_CHECK(!a.answered);
        sc_do_gather(core, &b, "g", 2, 1, "de", 2, 60000);
        MSR_CHECK_MSG(a.answered && a.code == 0, "%d %s", a.code, a.message);
        MSR_CHECK_MSG(b.answered && b.code == 0, "%d %s", b.code, b.message);
        MSR_CHECK_EQ(((Msr__AllgatherResponse *)a.resp)->data.len, 5);
        sc_done(&a);
        sc_done(&b);
        msr_store_core_destroy(core);
        if (!failed)
            break;
    }
}

static const msr_test_t tests[] = {
    {"limits", test_limits, 10},
    {"limits_for_job", test_limits_for_job, 120},
    {"barrier_withdraw_orders", test_barrier_withdraw_orders, 10},
    {"allgather_withdraw_orders", test_allgather_withdraw_orders, 10},
    {"fetch_bounds", test_fetch_bounds, 10},
    {"bytes_count_keys", test_bytes_count_keys, 10},
    {"counter_text_bound", test_counter_text_bound, 10},
    {"publish_key_bound", test_publish_key_bound, 10},
    {"alloc_failures", test_alloc_failures, 10},
};

const msr_test_piece_t sc_limits_tests = MSR_TEST_PIECE(tests);
