/* The budget of held calls (rendezvous/held.h): count and bytes per client
 * and in total, each at exactly its bound and one past, the refusal naming
 * the bound, and every call's charge given back however it ends; then the
 * store core's held calls (fetch, get, barrier, allgather) charged and
 * refunded through it, giving up in different orders. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/time.h"
#include "cluster/coord.h"
#include "rendezvous/held.h"
#include "rendezvous/store_core.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fake_call.h"

static msr_held_calls_t *table; /* the table the handlers free from */

static void t_end(void *ctx, msr_held_t *h)
{
    (void)ctx;
    msr_held_free(table, h);
}

static void call_init(tcall_t *c, const char *peer)
{
    msr_tcall_init(c);
    c->peer = peer;
}

/* A table answering through the fakes above, with limits. */
static void table_init(msr_held_calls_t *hc, const msr_held_limits_t *limits)
{
    msr_held_io_t io = {NULL,           msr_tcall_set_data, msr_tcall_get_data, msr_tcall_deadline,
                        msr_tcall_fail, msr_tcall_peer};
    msr_held_calls_init(hc, &io);
    msr_held_calls_limit(hc, limits);
    msr_held_handler_t h = {NULL, t_end, t_end};
    msr_held_calls_handle(hc, MSR_HELD_GET, &h);
    msr_held_calls_handle(hc, MSR_HELD_ANSWER, &h);
    table = hc;
}

/* What a bare record keeping kept bytes is charged. */
static uint64_t charge(uint64_t kept)
{
    return sizeof(msr_held_t) + kept + MSR_HELD_CALL_OVERHEAD;
}

static msr_held_t *hold(msr_held_calls_t *hc, tcall_t *c, uint64_t kept)
{
    return msr_held_wait(hc, sizeof(msr_held_t), kept, MSR_HELD_GET, c, NULL, NULL, -1);
}

static void check_use(const msr_held_calls_t *hc, const char *client, uint64_t calls,
                      uint64_t bytes)
{
    msr_held_usage_t u = msr_held_usage(hc, client);
    MSR_CHECK_EQ(u.calls, calls);
    MSR_CHECK_EQ(u.bytes, bytes);
}

/* A client holds calls up to its count bound exactly; one more is refused
 * naming the bound, nothing kept; the port does not make another client,
 * another address does. */
static void test_client_count(void)
{
    msr_held_calls_t hc;
    msr_held_limits_t l = {.client_calls = 3};
    table_init(&hc, &l);
    tcall_t c[5];
    call_init(&c[0], "ipv4:10.0.0.1:1000");
    call_init(&c[1], "ipv4:10.0.0.1:1001");
    call_init(&c[2], "ipv4:10.0.0.1:1002");
    call_init(&c[3], "ipv4:10.0.0.1:1003");
    call_init(&c[4], "ipv4:10.0.0.2:1000");
    for (int i = 0; i < 3; i++)
        MSR_CHECK(hold(&hc, &c[i], 0) != NULL);
    check_use(&hc, "10.0.0.1", 3, 3 * charge(0));
    MSR_CHECK(hold(&hc, &c[3], 0) == NULL);
    MSR_CHECK_STR(msr_err_msg(), "held calls of client 10.0.0.1: 3 at most");
    MSR_CHECK(c[3].data == NULL && !c[3].answered);
    check_use(&hc, "10.0.0.1", 3, 3 * charge(0));
    check_use(&hc, NULL, 3, 3 * charge(0));
    msr_held_t *other = hold(&hc, &c[4], 0);
    MSR_CHECK(other != NULL);
    check_use(&hc, "10.0.0.2", 1, charge(0));
    /* one given back: one more fits again */
    msr_held_free(&hc, c[1].data);
    MSR_CHECK(hold(&hc, &c[3], 0) != NULL);
    check_use(&hc, "10.0.0.1", 3, 3 * charge(0));
    msr_held_free(&hc, c[0].data);
    msr_held_free(&hc, c[2].data);
    msr_held_free(&hc, c[3].data);
    msr_held_free(&hc, other);
    check_use(&hc, NULL, 0, 0);
    check_use(&hc, "10.0.0.1", 0, 0);
    MSR_CHECK_EQ(hc.clients.count, 0);
    msr_held_calls_cleanup(&hc);
}

/* Shares (a relay's host): 10.0.0.1 has 3 clients' bounds, 10.0.0.2 none
 * named (0: one). */
static uint64_t t_shares(void *ctx, const char *client)
{
    (void)ctx;
    return strcmp(client, "10.0.0.1") == 0 ? 3 : 0;
}

static uint64_t t_shares_4(void *ctx, const char *client)
{
    (void)ctx;
    (void)client;
    return 4;
}

/* A client with shares holds its bound times its shares, exactly, one
 * more refused naming the bound it has; another client keeps one
 * client's; bytes scale too; a bound times its shares saturates rather
 * than wraps. */
static void test_client_shares(void)
{
    msr_held_calls_t hc;
    msr_held_limits_t l = {.client_calls = 2};
    table_init(&hc, &l);
    msr_held_calls_shares(&hc, t_shares, NULL);
    tcall_t c[10];
    for (int i = 0; i < 7; i++)
        call_init(&c[i], "ipv4:10.0.0.1:1000");
    for (int i = 7; i < 10; i++)
        call_init(&c[i], "ipv4:10.0.0.2:1000");
    for (int i = 0; i < 6; i++)
        MSR_CHECK(hold(&hc, &c[i], 0) != NULL);
    MSR_CHECK(hold(&hc, &c[6], 0) == NULL);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "held calls of client 10.0.0.1: 6 at most") ==
                      msr_err_msg(),
                  "%s", msr_err_msg());
    MSR_CHECK(hold(&hc, &c[7], 0) != NULL && hold(&hc, &c[8], 0) != NULL);
    MSR_CHECK(hold(&hc, &c[9], 0) == NULL);
    MSR_CHECK_STR(msr_err_msg(), "held calls of client 10.0.0.2: 2 at most");
    for (int i = 0; i < 9; i++)
        if (i != 6)
            msr_held_free(&hc, c[i].data);
    check_use(&hc, NULL, 0, 0);

    /* bytes: 3 x (charge(0) + charge(10)) exactly, one byte past refused */
    msr_held_limits_t lb = {.client_bytes = charge(0) + charge(10)};
    msr_held_calls_limit(&hc, &lb);
    for (int i = 0; i < 3; i++)
        MSR_CHECK(hold(&hc, &c[2 * i], 0) != NULL);
    MSR_CHECK(hold(&hc, &c[1], 10) != NULL && hold(&hc, &c[3], 10) != NULL);
    MSR_CHECK(hold(&hc, &c[5], 11) == NULL); /* one byte past */
    MSR_CHECK(hold(&hc, &c[5], 10) != NULL); /* the bound exactly */
    for (int i = 0; i < 6; i++)
        msr_held_free(&hc, c[i].data);

    /* 2^62 + 1 calls times 4 would wrap to 4: saturated, a fifth fits */
    msr_held_limits_t lw = {.client_calls = (1ull << 62) + 1};
    msr_held_calls_limit(&hc, &lw);
    msr_held_calls_shares(&hc, t_shares_4, NULL);
    for (int i = 0; i < 5; i++)
        MSR_CHECK(hold(&hc, &c[i], 0) != NULL);
    for (int i = 0; i < 5; i++)
        msr_held_free(&hc, c[i].data);
    check_use(&hc, NULL, 0, 0);
    msr_held_calls_cleanup(&hc);
}

/* A client's bytes up to its bound exactly; one byte past is refused. */
static void test_client_bytes(void)
{
    msr_held_calls_t hc;
    msr_held_limits_t l = {.client_bytes = charge(100) + charge(200)};
    table_init(&hc, &l);
    tcall_t a, b, d;
    call_init(&a, "ipv6:[::1]:5000");
    call_init(&b, "ipv6:[::1]:5001");
    call_init(&d, "ipv6:[::1]:5002");
    MSR_CHECK(hold(&hc, &a, 100) != NULL);
    MSR_CHECK(hold(&hc, &b, 201) == NULL);
    char want[200];
    snprintf(want, sizeof want, "held bytes of client [::1]: %llu at most",
             (unsigned long long)l.client_bytes);
    MSR_CHECK_MSG(strstr(msr_err_msg(), want) == msr_err_msg(), "'%s' does not open with '%s'",
                  msr_err_msg(), want);
    check_use(&hc, "[::1]", 1, charge(100));
    MSR_CHECK(hold(&hc, &b, 200) != NULL); /* exactly at the bound */
    check_use(&hc, "[::1]", 2, l.client_bytes);
    MSR_CHECK(hold(&hc, &d, 0) == NULL);
    msr_held_free(&hc, a.data);
    msr_held_free(&hc, b.data);
    check_use(&hc, NULL, 0, 0);
    msr_held_calls_cleanup(&hc);
}

/* The totals over every client: count and bytes, at the bound and one past. */
static void test_total(void)
{
    msr_held_calls_t hc;
    msr_held_limits_t l = {.calls = 3, .bytes = 3 * charge(10) + 1};
    table_init(&hc, &l);
    tcall_t c[4];
    call_init(&c[0], "ipv4:10.0.0.1:1");
    call_init(&c[1], "ipv4:10.0.0.2:1");
    call_init(&c[2], "ipv4:10.0.0.3:1");
    call_init(&c[3], "unix:/run/x.sock");
    MSR_CHECK(hold(&hc, &c[0], 10) != NULL);
    MSR_CHECK(hold(&hc, &c[1], 10) != NULL);
    MSR_CHECK(hold(&hc, &c[2], 12) == NULL); /* 1 byte past the total */
    char want[200];
    snprintf(want, sizeof want, "held bytes in total: %llu at most", (unsigned long long)l.bytes);
    MSR_CHECK(strstr(msr_err_msg(), want) == msr_err_msg());
    MSR_CHECK(hold(&hc, &c[2], 11) != NULL); /* exactly the total */
    check_use(&hc, NULL, 3, l.bytes);
    MSR_CHECK(hold(&hc, &c[3], 0) == NULL);
    MSR_CHECK_STR(msr_err_msg(), "held calls in total: 3 at most");
    msr_held_free(&hc, c[0].data);
    MSR_CHECK(hold(&hc, &c[3], 0) != NULL);
    check_use(&hc, "/run/x.sock", 1, charge(0));
    for (int i = 1; i < 4; i++)
        msr_held_free(&hc, c[i].data);
    check_use(&hc, NULL, 0, 0);
    msr_held_calls_cleanup(&hc);
}

/* An answer is charged but never refused: its change is made already. */
static void test_answer_never_refused(void)
{
    msr_held_calls_t hc;
    msr_held_limits_t l = {.client_calls = 1, .calls = 1};
    table_init(&hc, &l);
    tcall_t g, a;
    call_init(&g, NULL); /* no peer: the client "local" */
    call_init(&a, NULL);
    MSR_CHECK(hold(&hc, &g, 0) != NULL);
    msr_held_t *h = msr_held_new(&hc, sizeof(msr_held_t) + 8, 4, MSR_HELD_ANSWER, &a, NULL, NULL);
    MSR_CHECK(h != NULL);
    check_use(&hc, "local", 2, charge(0) + charge(12));
    msr_held_take(&hc, h); /* as a released answer is: taken, then freed by its owner */
    msr_held_take(&hc, h); /* twice does nothing more */
    msr_free(h);
    msr_held_free(&hc, g.data);
    check_use(&hc, NULL, 0, 0);
    msr_held_calls_cleanup(&hc);
}

/* Expired and cancelled calls give their charge back through their
 * handlers, in any order. */
static void test_refund_on_expiry_and_cancel(void)
{
    msr_held_calls_t hc;
    table_init(&hc, NULL);
    tcall_t c[4];
    for (int i = 0; i < 4; i++) {
        call_init(&c[i], i % 2 ? "ipv4:10.0.0.1:7" : "ipv4:10.0.0.2:7");
        msr_held_t *h = msr_held_wait(&hc, sizeof(msr_held_t), 1000, MSR_HELD_GET, &c[i], NULL,
                                      NULL, i < 2 ? 10 : -1);
        MSR_CHECK(h != NULL);
    }
    check_use(&hc, NULL, 4, 4 * charge(1000));
    MSR_CHECK_EQ(msr_held_cancel(&hc, &c[3]), 1);
    check_use(&hc, "10.0.0.1", 1, charge(1000));
    msr_held_tick(&hc, msr_now_ns() + 60ull * 1000000000ull); /* c[0], c[1] expire */
    check_use(&hc, "10.0.0.1", 0, 0);
    check_use(&hc, "10.0.0.2", 1, charge(1000));
    MSR_CHECK_EQ(msr_held_cancel(&hc, &c[2]), 1);
    check_use(&hc, NULL, 0, 0);
    MSR_CHECK_EQ(hc.clients.count, 0);
    msr_held_calls_cleanup(&hc);
}

/* ---- the store core's held calls ---- */

static void s_reply(void *ctx, void *call, const ProtobufCMessage *resp)
{
    (void)ctx;
    (void)resp;
    msr_tcall_answer(call);
}

static void s_reply_blob(void *ctx, void *call, msr_blob_t *blob)
{
    (void)blob;
    s_reply(ctx, call, NULL);
}

/* A store core answering through the fake calls, with the store's limits
 * (NULL: the defaults) and its held calls' (NULL: the defaults). */
static msr_store_core_t *core_new(const msr_store_limits_t *store_limits,
                                  const msr_held_limits_t *limits)
{
    msr_store_ops_t ops = {
        .reply = s_reply,
        .reply_blob = s_reply_blob,
        .fail = msr_tcall_fail,
        .deadline = msr_tcall_deadline,
        .set_data = msr_tcall_set_data,
        .get_data = msr_tcall_get_data,
        .peer = msr_tcall_peer,
    };
    msr_store_core_t *core = NULL;
    MSR_CHECK_EQ(msr_store_core_create(store_limits, &ops, &core), MSR_OK);
    msr_held_calls_limit(msr_store_core_held(core), limits);
    return core;
}

#define NIDX 1000

static void fetch(msr_store_core_t *core, tcall_t *c, const char *peer, uint32_t wait_ms)
{
    static uint32_t indices[NIDX];
    for (uint32_t i = 0; i < NIDX; i++)
        indices[i] = i;
    call_init(c, peer);
    Msr__FetchRequest r = MSR__FETCH_REQUEST__INIT;
    r.name = "w";
    r.indices = indices;
    r.n_indices = NIDX;
    r.wait_ms = wait_ms;
    msr_store_core_call(core, c, MSR_RPC_FETCH, &r.base);
}

static void publish_all(msr_store_core_t *core)
{
    Msr__Contribution e[NIDX], *pe[NIDX];
    for (uint32_t i = 0; i < NIDX; i++) {
        msr__contribution__init(&e[i]);
        e[i].index = i;
        e[i].data.data = (uint8_t *)"v";
        e[i].data.len = 1;
        pe[i] = &e[i];
    }
    tcall_t c;
    call_init(&c, "ipv4:10.0.0.9:1");
    Msr__PublishRequest r = MSR__PUBLISH_REQUEST__INIT;
    r.name = "w";
    r.entries = pe;
    r.n_entries = NIDX;
    msr_store_core_call(core, &c, MSR_RPC_PUBLISH, &r.base);
    MSR_CHECK(c.answered && c.code == 0);
}

/* A held fetch is charged its indices twice (its request and the core's
 * copy): a client's byte bound admits exactly as many as fit, refuses the
 * next with RESOURCE_EXHAUSTED naming it, and the charge comes back when
 * the fetches are answered. */
static void test_fetch_bound_and_answer(void)
{
    msr_store_core_t *core = core_new(NULL, NULL);
    msr_held_calls_t *hc = msr_store_core_held(core);
    tcall_t a, b, d;
    fetch(core, &a, "ipv4:10.0.0.1:1", UINT32_MAX);
    MSR_CHECK(!a.answered);
    uint64_t one = msr_held_usage(hc, "10.0.0.1").bytes;
    MSR_CHECK_MSG(one >= 2 * NIDX * sizeof(uint32_t) + MSR_HELD_CALL_OVERHEAD,
                  "a fetch of %d indices charged only %llu bytes", NIDX, (unsigned long long)one);
    msr_held_limits_t l = {.client_bytes = 2 * one};
    msr_held_calls_limit(hc, &l);
    fetch(core, &b, "ipv4:10.0.0.1:2", UINT32_MAX);
    MSR_CHECK(!b.answered); /* exactly at the bound */
    fetch(core, &d, "ipv4:10.0.0.1:3", UINT32_MAX);
    MSR_CHECK(d.answered && d.code == MSR_RPC_RESOURCE_EXHAUSTED);
    char want[120];
    snprintf(want, sizeof want, "held bytes of client 10.0.0.1: %llu at most",
             (unsigned long long)l.client_bytes);
    MSR_CHECK_MSG(strstr(d.message, want) == d.message, "'%s'", d.message);
    check_use(hc, "10.0.0.1", 2, 2 * one);
    publish_all(core);
    MSR_CHECK(a.answered && a.code == 0 && b.answered && b.code == 0);
    check_use(hc, NULL, 0, 0);
    msr_store_core_destroy(core);
}

/* Fetches, gets, barriers and allgathers of two clients give up in
 * different orders (cancelled first, last, in the middle; expired; the
 * store reset): each gives its charge back, and the budget ends at zero. */
static void test_store_give_up_orders(void)
{
    msr_store_core_t *core = core_new(NULL, NULL);
    msr_held_calls_t *hc = msr_store_core_held(core);
    tcall_t f1, f2, g1, g2, b1, a1, f3;
    fetch(core, &f1, "ipv4:10.0.0.1:1", UINT32_MAX);
    fetch(core, &f2, "ipv4:10.0.0.2:1", 50);
    call_init(&g1, "ipv4:10.0.0.1:2");
    Msr__GetRequest gr = MSR__GET_REQUEST__INIT;
    gr.key = "k";
    gr.wait_ms = UINT32_MAX;
    msr_store_core_call(core, &g1, MSR_RPC_GET, &gr.base);
    call_init(&g2, "ipv4:10.0.0.2:2");
    msr_store_core_call(core, &g2, MSR_RPC_GET, &gr.base);
    call_init(&b1, "ipv4:10.0.0.1:3");
    Msr__BarrierRequest br = MSR__BARRIER_REQUEST__INIT;
    br.name = "b";
    br.count = 2;
    br.wait_ms = 50;
    msr_store_core_call(core, &b1, MSR_RPC_BARRIER, &br.base);
    call_init(&a1, "ipv4:10.0.0.2:3");
    Msr__Contribution ce = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *pce = &ce;
    ce.data.data = (uint8_t *)"0123456789";
    ce.data.len = 10;
    Msr__AllgatherRequest ar = MSR__ALLGATHER_REQUEST__INIT;
    ar.name = "a";
    ar.count = 2;
    ar.entries = &pce;
    ar.n_entries = 1;
    ar.wait_ms = UINT32_MAX;
    msr_store_core_call(core, &a1, MSR_RPC_ALLGATHER, &ar.base);
    check_use(hc, NULL, 6, msr_held_usage(hc, NULL).bytes);
    check_use(hc, "10.0.0.1", 3, msr_held_usage(hc, "10.0.0.1").bytes);
    MSR_CHECK(msr_held_usage(hc, "10.0.0.2").bytes >= 2 * ce.data.len);

    uint64_t f1_bytes = msr_held_usage(hc, "10.0.0.1").bytes;
    MSR_CHECK_EQ(msr_store_core_cancel(core, &f1), 1); /* the first held */
    f1_bytes -= msr_held_usage(hc, "10.0.0.1").bytes;
    MSR_CHECK(f1_bytes >= 2 * NIDX * sizeof(uint32_t));
    MSR_CHECK_EQ(msr_store_core_cancel(core, &a1), 1); /* the last held */
    MSR_CHECK_EQ(msr_held_usage(hc, NULL).calls, 4);
    msr_store_core_tick(core, msr_now_ns() + 60ull * 1000000000ull); /* f2 and b1 expire */
    MSR_CHECK(f2.answered && f2.code == MSR_RPC_DEADLINE_EXCEEDED);
    MSR_CHECK(b1.answered && b1.code == MSR_RPC_DEADLINE_EXCEEDED);
    check_use(hc, NULL, 2, msr_held_usage(hc, NULL).bytes);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &g2), 1); /* one of two on the same key */
    check_use(hc, "10.0.0.2", 0, 0);
    fetch(core, &f3, "ipv4:10.0.0.2:4", UINT32_MAX);
    msr_store_core_reset(core, "shutting down"); /* g1 and f3 end at shutdown */
    MSR_CHECK(g1.answered && g1.code == MSR_RPC_ABORTED);
    MSR_CHECK(f3.answered && f3.code == MSR_RPC_ABORTED);
    check_use(hc, NULL, 0, 0);
    MSR_CHECK_EQ(hc->clients.count, 0);
    msr_store_core_destroy(core);
}

/* A store call past the count bound is refused and leaves nothing: the
 * get-wait it would have made is gone, so a later get may wait again. */
static void test_store_count_bound_keeps_nothing(void)
{
    msr_held_limits_t l = {.client_calls = 1};
    msr_store_core_t *core = core_new(NULL, &l);
    msr_held_calls_t *hc = msr_store_core_held(core);
    tcall_t g1, g2, g3;
    Msr__GetRequest gr = MSR__GET_REQUEST__INIT;
    gr.key = "k1";
    gr.wait_ms = UINT32_MAX;
    call_init(&g1, "ipv4:10.0.0.1:1");
    msr_store_core_call(core, &g1, MSR_RPC_GET, &gr.base);
    MSR_CHECK(!g1.answered);
    gr.key = "k2";
    call_init(&g2, "ipv4:10.0.0.1:2");
    msr_store_core_call(core, &g2, MSR_RPC_GET, &gr.base);
    MSR_CHECK(g2.answered && g2.code == MSR_RPC_RESOURCE_EXHAUSTED);
    MSR_CHECK_STR(g2.message, "held calls of client 10.0.0.1: 1 at most");
    check_use(hc, NULL, 1, msr_held_usage(hc, "10.0.0.1").bytes);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &g1), 1);
    check_use(hc, NULL, 0, 0);
    call_init(&g3, "ipv4:10.0.0.1:3");
    msr_store_core_call(core, &g3, MSR_RPC_GET, &gr.base);
    MSR_CHECK(!g3.answered);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &g3), 1);
    check_use(hc, NULL, 0, 0);
    msr_store_core_destroy(core);
}

/* A fetch's answer is bounded by the store's size even when it asks for
 * one entry many times: at exactly --store_bytes_max it is answered, one
 * byte past it is refused naming the limit, and nothing is allocated. */
static void test_fetch_answer_bound(void)
{
    msr_store_limits_t sl = {.value_max = 1000, .keys_max = 10, .bytes_max = 10001};
    /* its calls have no peer: the one client "local" */
    msr_store_core_t *core = core_new(&sl, NULL);
    static uint8_t value[1000];
    tcall_t c;
    call_init(&c, NULL);
    Msr__SetRequest sr = MSR__SET_REQUEST__INIT;
    sr.key = "w/0";
    sr.value.data = value;
    sr.value.len = 1000;
    msr_store_core_call(core, &c, MSR_RPC_SET, &sr.base);
    MSR_CHECK(c.answered && c.code == 0);
    sr.key = "w/1";
    sr.value.len = 1;
    call_init(&c, NULL);
    msr_store_core_call(core, &c, MSR_RPC_SET, &sr.base);
    MSR_CHECK(c.answered && c.code == 0);
    uint32_t indices[11] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    Msr__FetchRequest fr = MSR__FETCH_REQUEST__INIT;
    fr.name = "w";
    fr.indices = indices;
    fr.n_indices = 11; /* 10,001 bytes: exactly the limit */
    call_init(&c, NULL);
    msr_store_core_call(core, &c, MSR_RPC_FETCH, &fr.base);
    MSR_CHECK_MSG(c.answered && c.code == 0, "code %d: %s", c.code, c.message);
    indices[10] = 0; /* 11,000 bytes: past it */
    call_init(&c, NULL);
    msr_store_core_call(core, &c, MSR_RPC_FETCH, &fr.base);
    MSR_CHECK(c.answered && c.code == MSR_RPC_RESOURCE_EXHAUSTED);
    MSR_CHECK_STR(c.message, "fetch 'w': the answer's 11000 bytes exceed the store's total size "
                             "limit of 10001 bytes (--store_bytes_max)");
    msr_store_core_destroy(core);
}

/* ---- the coordinator: its held calls counted per peer, its bounds set
 * by its configuration ---- */

static void c_reply(void *call, const ProtobufCMessage *resp)
{
    s_reply(NULL, call, resp);
}

static void c_reply_blob(void *call, msr_blob_t *blob)
{
    s_reply_blob(NULL, call, blob);
}

static void c_fail(void *call, int code, const char *message)
{
    msr_tcall_fail(NULL, call, (msr_rpc_code_t)code, message);
}

static uint64_t c_deadline(void *call)
{
    return msr_tcall_deadline(NULL, call);
}

static const char *c_peer(void *call)
{
    return msr_tcall_peer(NULL, call);
}

static void c_set_data(void *call, void *data)
{
    msr_tcall_set_data(NULL, call, data);
}

static void *c_get_data(void *call)
{
    return msr_tcall_get_data(NULL, call);
}

static void coord_get(msr_coord_t *co, tcall_t *c, const char *peer, const char *key)
{
    call_init(c, peer);
    Msr__GetRequest r = MSR__GET_REQUEST__INIT;
    r.key = (char *)key;
    r.wait_ms = UINT32_MAX;
    msr_coord_call(co, c, MSR_RPC_GET, &r.base);
    msr_coord_flush(co);
}

/* The coordinator charges a held call to its peer's address (the port
 * aside) with the bounds of its configuration: a client's calls up to its
 * bound exactly, one more refused naming it, another client unaffected,
 * and a cancelled call's place free again. */
static void test_coord_client_bound(void)
{
    static const msr_coord_responder_t responder = {c_reply, c_reply_blob, c_fail,    c_deadline,
                                                    c_peer,  c_set_data,   c_get_data};
    msr_coord_config_t cfg = {
        .token = "t",
        .job_id = "job",
        .worker_num = 1,
        .local_worker_num = 1,
        .held_limits = {.client_calls = 2},
    };
    msr_coord_t *co = NULL;
    MSR_CHECK_EQ(msr_coord_create(&cfg, &responder, &co), MSR_OK);
    tcall_t g[4];
    coord_get(co, &g[0], "ipv4:10.1.0.1:500", "k0");
    coord_get(co, &g[1], "ipv4:10.1.0.1:501", "k1");
    MSR_CHECK(!g[0].answered && !g[1].answered);
    coord_get(co, &g[2], "ipv4:10.1.0.1:502", "k2");
    MSR_CHECK(g[2].answered && g[2].code == MSR_RPC_RESOURCE_EXHAUSTED);
    MSR_CHECK_STR(g[2].message, "held calls of client 10.1.0.1: 2 at most");
    coord_get(co, &g[3], "ipv4:10.1.0.2:500", "k2");
    MSR_CHECK(!g[3].answered);
    msr_coord_cancel(co, &g[0]);
    coord_get(co, &g[2], "ipv4:10.1.0.1:503", "k2");
    MSR_CHECK(!g[2].answered);
    msr_coord_destroy(co); /* the held calls go with it, unanswered */
}

/* The reply of an answered coordinator call, unpacked (s_reply keeps none). */
static ProtobufCMessage *last_resp;

static void c_reply_keep(void *call, const ProtobufCMessage *resp)
{
    s_reply(NULL, call, resp);
    uint8_t buf[4096];
    size_t len = protobuf_c_message_get_packed_size(resp);
    MSR_CHECK(len <= sizeof buf);
    protobuf_c_message_pack(resp, buf);
    last_resp = protobuf_c_message_unpack(resp->descriptor, NULL, len, buf);
}

/* A node's held heartbeat is charged to its client like a store wait: with
 * a bound of one call a client, a get from the node's address is refused
 * while its heartbeat is held, and admitted once the heartbeat is
 * answered. */
static void test_coord_heartbeat_charged(void)
{
    static const msr_coord_responder_t responder = {
        c_reply_keep, c_reply_blob, c_fail, c_deadline, c_peer, c_set_data, c_get_data};
    msr_coord_config_t cfg = {
        .token = "t",
        .job_id = "job",
        .worker_num = 2,
        .local_worker_num = 1,
        .max_restarts = 0,
        .node_timeout_ms = 600000,
        .join_timeout_ms = 600000,
        .held_limits = {.client_calls = 1},
    };
    msr_coord_t *co = NULL;
    MSR_CHECK_EQ(msr_coord_create(&cfg, &responder, &co), MSR_OK);
    Msr__JoinRequest jr = MSR__JOIN_REQUEST__INIT;
    jr.protocol_version = MSR_PROTOCOL_VERSION;
    jr.job_id = "job";
    jr.host = "10.2.0.1";
    jr.pid = 100;
    jr.worker_num = 2;
    jr.local_worker_num = 1;
    jr.free_port = 5000;
    tcall_t c;
    call_init(&c, "ipv4:10.2.0.1:700");
    msr_coord_call(co, &c, MSR_RPC_JOIN, &jr.base);
    msr_coord_flush(co);
    MSR_CHECK_MSG(c.answered && c.code == 0 && last_resp, "join: %d %s", c.code, c.message);
    char id[128];
    snprintf(id, sizeof id, "%s", ((Msr__JoinResponse *)last_resp)->node_id);
    protobuf_c_message_free_unpacked(last_resp, NULL);
    last_resp = NULL;
    Msr__HeartbeatRequest hr = MSR__HEARTBEAT_REQUEST__INIT;
    hr.node_id = id;
    hr.ready_generation = -1;
    call_init(&c, "ipv4:10.2.0.1:701");
    msr_coord_call(co, &c, MSR_RPC_HEARTBEAT, &hr.base); /* wait 0: learns the state */
    msr_coord_flush(co);
    MSR_CHECK_MSG(c.answered && c.code == 0 && last_resp, "heartbeat: %d %s", c.code, c.message);
    Msr__HeartbeatResponse *st = (Msr__HeartbeatResponse *)last_resp;
    hr.generation = st->generation;
    hr.known_state = st->state;
    protobuf_c_message_free_unpacked(last_resp, NULL);
    last_resp = NULL;
    hr.wait_ms = 30000;
    tcall_t hb, g;
    call_init(&hb, "ipv4:10.2.0.1:702");
    msr_coord_call(co, &hb, MSR_RPC_HEARTBEAT, &hr.base);
    msr_coord_flush(co);
    MSR_CHECK_MSG(!hb.answered, "the heartbeat was not held: %d %s", hb.code, hb.message);
    coord_get(co, &g, "ipv4:10.2.0.1:703", "k");
    MSR_CHECK(g.answered && g.code == MSR_RPC_RESOURCE_EXHAUSTED);
    MSR_CHECK_STR(g.message, "held calls of client 10.2.0.1: 1 at most");
    msr_coord_cancel(co, &hb); /* its client gave up: its place is free */
    coord_get(co, &g, "ipv4:10.2.0.1:704", "k");
    MSR_CHECK(!g.answered);
    msr_coord_destroy(co);
}

static const msr_test_t tests[] = {
    {"coord_heartbeat_charged", test_coord_heartbeat_charged, 10},
    {"coord_client_bound", test_coord_client_bound, 10},
    {"fetch_answer_bound", test_fetch_answer_bound, 10},
    {"client_count", test_client_count, 10},
    {"client_bytes", test_client_bytes, 10},
    {"client_shares", test_client_shares, 10},
    {"total", test_total, 10},
    {"answer_never_refused", test_answer_never_refused, 10},
    {"refund_on_expiry_and_cancel", test_refund_on_expiry_and_cancel, 10},
    {"fetch_bound_and_answer", test_fetch_bound_and_answer, 10},
    {"store_give_up_orders", test_store_give_up_orders, 10},
    {"store_count_bound_keeps_nothing", test_store_count_bound_keeps_nothing, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
