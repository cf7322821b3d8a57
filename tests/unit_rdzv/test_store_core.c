/* The store core alone (rendezvous/store_core.h): each operation, held calls
 * with deadlines, generations, limits and allgathers of unequal sizes,
 * answered through fake ops with no transport. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/time.h"
#include "rendezvous/store_core.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fake_call.h"

typedef struct tctx {
    int generation;
    uint32_t participants;
    int keys_changed;
    int writes_remembered;
    int seen; /* request_seen answers 1 */
} tctx_t;

static void t_reply(void *ctx, void *call, const ProtobufCMessage *resp)
{
    (void)ctx;
    tcall_t *c = call;
    msr_tcall_answer(c);
    size_t len = protobuf_c_message_get_packed_size(resp);
    uint8_t buf[4096];
    MSR_CHECK(len <= sizeof buf);
    protobuf_c_message_pack(resp, buf);
    c->resp = protobuf_c_message_unpack(resp->descriptor, NULL, len, buf);
    MSR_CHECK(c->resp != NULL);
}

static void t_reply_blob(void *ctx, void *call, msr_blob_t *blob)
{
    (void)ctx;
    tcall_t *c = call;
    msr_tcall_answer(c);
    c->resp =
        protobuf_c_message_unpack(msr_rpc_methods[c->method].response, NULL, blob->len, blob->data);
    MSR_CHECK(c->resp != NULL);
}

static int t_request_seen(void *ctx, void *call, msr_rpc_method_t method, uint64_t client_id,
                          uint64_t request_id)
{
    tctx_t *t = ctx;
    (void)method;
    if (!t->seen || client_id == 0 || request_id == 0)
        return 0;
    Msr__SetResponse r = MSR__SET_RESPONSE__INIT;
    t_reply(ctx, call, &r.base);
    return 1;
}

static void t_reply_write(void *ctx, void *call, msr_rpc_method_t method, uint64_t client_id,
                          uint64_t request_id, const ProtobufCMessage *resp)
{
    tctx_t *t = ctx;
    (void)method;
    if (client_id && request_id)
        t->writes_remembered++;
    t_reply(ctx, call, resp);
}

static void t_key_changed(void *ctx, const char *key)
{
    (void)key;
    ((tctx_t *)ctx)->keys_changed++;
}

static int t_generation(void *ctx)
{
    return ((tctx_t *)ctx)->generation;
}

static uint32_t t_participants(void *ctx)
{
    return ((tctx_t *)ctx)->participants;
}

static msr_store_ops_t ops_for(tctx_t *t)
{
    msr_store_ops_t ops = {
        .ctx = t,
        .reply = t_reply,
        .reply_blob = t_reply_blob,
        .fail = msr_tcall_fail,
        .deadline = msr_tcall_deadline,
        .set_data = msr_tcall_set_data,
        .get_data = msr_tcall_get_data,
        .request_seen = t_request_seen,
        .reply_write = t_reply_write,
        .key_changed = t_key_changed,
        .generation = t_generation,
        .participants_max = t_participants,
    };
    return ops;
}

static msr_store_core_t *core_new(tctx_t *t, const msr_store_limits_t *limits)
{
    memset(t, 0, sizeof *t);
    t->participants = 8;
    msr_store_ops_t ops = ops_for(t);
    msr_store_core_t *core = NULL;
    MSR_CHECK_EQ(msr_store_core_create(limits, &ops, &core), MSR_OK);
    return core;
}

static void call_init(tcall_t *c, msr_rpc_method_t m)
{
    msr_tcall_init(c);
    c->method = m;
}

static void done(tcall_t *c)
{
    if (c->resp)
        protobuf_c_message_free_unpacked(c->resp, NULL);
    c->resp = NULL;
}

static void do_set(msr_store_core_t *core, tcall_t *c, const char *key, const char *value)
{
    call_init(c, MSR_RPC_SET);
    Msr__SetRequest r = MSR__SET_REQUEST__INIT;
    r.key = (char *)key;
    r.value.data = (uint8_t *)value;
    r.value.len = strlen(value);
    msr_store_core_call(core, c, MSR_RPC_SET, &r.base);
}

static void do_get(msr_store_core_t *core, tcall_t *c, const char *key, uint32_t wait_ms)
{
    call_init(c, MSR_RPC_GET);
    Msr__GetRequest r = MSR__GET_REQUEST__INIT;
    r.key = (char *)key;
    r.wait_ms = wait_ms;
    msr_store_core_call(core, c, MSR_RPC_GET, &r.base);
}

static void do_add(msr_store_core_t *core, tcall_t *c, const char *key, int64_t delta)
{
    call_init(c, MSR_RPC_ADD);
    Msr__AddRequest r = MSR__ADD_REQUEST__INIT;
    r.key = (char *)key;
    r.delta = delta;
    msr_store_core_call(core, c, MSR_RPC_ADD, &r.base);
}

static void do_barrier(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t count,
                       uint32_t weight, uint32_t wait_ms)
{
    call_init(c, MSR_RPC_BARRIER);
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.name = (char *)name;
    r.count = count;
    r.weight = weight;
    r.wait_ms = wait_ms;
    msr_store_core_call(core, c, MSR_RPC_BARRIER, &r.base);
}

static void do_gather(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t count,
                      uint32_t index, const char *data, size_t len, uint32_t wait_ms)
{
    call_init(c, MSR_RPC_ALLGATHER);
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep = &e;
    e.index = index;
    e.data.data = (uint8_t *)data;
    e.data.len = len;
    Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
    r.name = (char *)name;
    r.count = count;
    r.n_entries = 1;
    r.entries = &ep;
    r.wait_ms = wait_ms;
    msr_store_core_call(core, c, MSR_RPC_ALLGATHER, &r.base);
}

static void check_value(tcall_t *c, const char *want)
{
    MSR_CHECK_MSG(c->answered && c->code == 0, "get: code %d %s", c->code, c->message);
    const Msr__GetResponse *g = (const Msr__GetResponse *)c->resp;
    MSR_CHECK_EQ(g->value.len, strlen(want));
    MSR_CHECK(memcmp(g->value.data, want, g->value.len) == 0);
    done(c);
}

static void test_each_op(void)
{
    tctx_t t;
    msr_store_core_t *core = core_new(&t, NULL);
    tcall_t c;
    do_set(core, &c, "k", "v1");
    MSR_CHECK(c.answered && c.code == 0);
    done(&c);
    MSR_CHECK_EQ(t.keys_changed, 1);
    do_get(core, &c, "k", 0);
    check_value(&c, "v1");
    do_get(core, &c, "missing", 0);
    MSR_CHECK_EQ(c.code, MSR_RPC_NOT_FOUND);
    do_get(core, &c, "", 0);
    MSR_CHECK_EQ(c.code, MSR_RPC_INVALID_ARGUMENT);

    do_add(core, &c, "n", 5);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, 5);
    done(&c);
    do_add(core, &c, "n", -7);
    MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, -2);
    done(&c);
    do_get(core, &c, "n", 0);
    check_value(&c, "-2");
    do_add(core, &c, "k", 1);
    MSR_CHECK_EQ(c.code, MSR_RPC_INVALID_ARGUMENT); /* "v1" is not a counter */
    do_add(core, &c, "n", INT64_MIN);
    MSR_CHECK_EQ(c.code, MSR_RPC_OUT_OF_RANGE);

    /* compare-set: absent expected on a present key, then a match */
    call_init(&c, MSR_RPC_COMPARE_SET);
    Msr__CompareSetRequest cs = MSR__COMPARE_SET_REQUEST__INIT;
    cs.key = "k";
    cs.expect_absent = 1;
    cs.desired.data = (uint8_t *)"x";
    cs.desired.len = 1;
    msr_store_core_call(core, &c, MSR_RPC_COMPARE_SET, &cs.base);
    const Msr__CompareSetResponse *csr = (const Msr__CompareSetResponse *)c.resp;
    MSR_CHECK(!csr->swapped && csr->present && csr->current.len == 2);
    done(&c);
    call_init(&c, MSR_RPC_COMPARE_SET);
    cs.expect_absent = 0;
    cs.expected.data = (uint8_t *)"v1";
    cs.expected.len = 2;
    msr_store_core_call(core, &c, MSR_RPC_COMPARE_SET, &cs.base);
    csr = (const Msr__CompareSetResponse *)c.resp;
    MSR_CHECK(csr->swapped && csr->present && csr->current.len == 1);
    done(&c);
    do_get(core, &c, "k", 0);
    check_value(&c, "x");

    MSR_CHECK_EQ(msr_store_core_keys(core), 2);
    for (int i = 0; i < 2; i++) {
        call_init(&c, MSR_RPC_DELETE);
        Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
        d.key = "k";
        msr_store_core_call(core, &c, MSR_RPC_DELETE, &d.base);
        MSR_CHECK_EQ(((Msr__DeleteResponse *)c.resp)->existed, i == 0);
        done(&c);
    }
    MSR_CHECK_EQ(msr_store_core_keys(core), 1);

    call_init(&c, MSR_RPC_JOIN);
    Msr__JoinRequest j = MSR__JOIN_REQUEST__INIT;
    msr_store_core_call(core, &c, MSR_RPC_JOIN, &j.base);
    MSR_CHECK_EQ(c.code, MSR_RPC_UNIMPLEMENTED);
    msr_store_core_destroy(core);
}

static void test_held_gets_and_deadlines(void)
{
    tctx_t t;
    msr_store_core_t *core = core_new(&t, NULL);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);
    tcall_t a, b, w;
    do_get(core, &a, "late", UINT32_MAX); /* no deadline at all */
    do_get(core, &b, "late", 60000);
    MSR_CHECK(!a.answered && !b.answered);
    MSR_CHECK(msr_store_core_next_deadline(core) != MSR_DEADLINE_NEVER);
    do_set(core, &w, "late", "here");
    done(&w);
    check_value(&a, "here");
    check_value(&b, "here");
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);

    /* the wait's own deadline passes: not at a time before it (read
     * before the call, whatever time the call itself took), then after */
    uint64_t before = msr_now_ns();
    do_get(core, &a, "never", 50);
    MSR_CHECK(!a.answered);
    msr_store_core_tick(core, before);
    MSR_CHECK(!a.answered);
    msr_store_core_tick(core, msr_now_ns() + 10ull * 1000000000ull);
    MSR_CHECK_EQ(a.code, MSR_RPC_DEADLINE_EXCEEDED);
    MSR_CHECK_MSG(strstr(a.message, "never") != NULL, "%s", a.message);

    /* the ops' deadline comes first when earlier */
    call_init(&b, MSR_RPC_GET);
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
    do_get(core, &a, "gone", 60000);
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
    msr_store_core_t *core = core_new(&t, NULL);
    tcall_t a, b, c;
    do_barrier(core, &a, "b", 2, 1, 60000);
    MSR_CHECK(!a.answered);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &a), 1); /* its arrival is withdrawn */
    do_barrier(core, &b, "b", 2, 1, 60000);
    MSR_CHECK(!b.answered);
    do_barrier(core, &c, "b", 3, 1, 60000);
    MSR_CHECK_EQ(c.code, MSR_RPC_INVALID_ARGUMENT); /* count differs */
    do_barrier(core, &c, "b", 2, 2, 60000);
    MSR_CHECK_EQ(c.code, MSR_RPC_INVALID_ARGUMENT); /* one more than its count */
    do_barrier(core, &c, "b", 2, 1, 60000);
    MSR_CHECK(b.answered && b.code == 0 && c.answered && c.code == 0);
    done(&b);
    done(&c);
    /* weights: one call stands for three participants */
    do_barrier(core, &a, "w", 4, 3, 60000);
    MSR_CHECK(!a.answered);
    do_barrier(core, &b, "w", 4, 1, 60000);
    MSR_CHECK(a.code == 0 && b.code == 0 && a.answered && b.answered);
    done(&a);
    done(&b);
    t.participants = 4;
    do_barrier(core, &a, "big", 5, 1, 60000);
    MSR_CHECK_EQ(a.code, MSR_RPC_INVALID_ARGUMENT); /* more than the job's ranks */
    /* a barrier whose deadline passes says how many arrived */
    do_barrier(core, &a, "slow", 3, 1, 10);
    msr_store_core_tick(core, msr_now_ns() + 10ull * 1000000000ull);
    MSR_CHECK_EQ(a.code, MSR_RPC_DEADLINE_EXCEEDED);
    MSR_CHECK_MSG(strstr(a.message, "1 of 3") != NULL, "%s", a.message);
    msr_store_core_destroy(core);
}

static void test_allgather_unequal_sizes(void)
{
    tctx_t t;
    msr_store_core_t *core = core_new(&t, NULL);
    static char big[3000];
    memset(big, 'z', sizeof big);
    tcall_t c[3], bad;
    do_gather(core, &c[2], "g", 3, 2, big, sizeof big, 60000);
    do_gather(core, &c[0], "g", 3, 0, "", 0, 60000);
    MSR_CHECK(!c[0].answered && !c[2].answered);
    do_gather(core, &bad, "g", 3, 2, "dup", 3, 60000);
    MSR_CHECK_EQ(bad.code, MSR_RPC_INVALID_ARGUMENT); /* index 2 given twice */
    do_gather(core, &bad, "g", 4, 1, "x", 1, 60000);
    MSR_CHECK_EQ(bad.code, MSR_RPC_INVALID_ARGUMENT); /* count differs */
    do_gather(core, &bad, "g", 3, 3, "x", 1, 60000);
    MSR_CHECK_EQ(bad.code, MSR_RPC_INVALID_ARGUMENT); /* index not below the count */
    do_gather(core, &c[1], "g", 3, 1, "hello", 5, 60000);
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
        done(&c[i]);
    }
    /* a contribution that gives up is withdrawn: the index is free again */
    do_gather(core, &c[0], "h", 2, 0, "a", 1, 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &c[0]), 1);
    do_gather(core, &c[0], "h", 2, 0, "bb", 2, 60000);
    do_gather(core, &c[1], "h", 2, 1, "c", 1, 60000);
    MSR_CHECK(c[0].code == 0 && c[1].code == 0);
    MSR_CHECK_EQ(((Msr__AllgatherResponse *)c[0].resp)->lengths[0], 2);
    done(&c[0]);
    done(&c[1]);
    msr_store_core_destroy(core);
}

static void test_generations_and_reset(void)
{
    tctx_t t;
    msr_store_core_t *core = core_new(&t, NULL);
    t.generation = 3;
    tcall_t c, held, bar;
    call_init(&c, MSR_RPC_SET);
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = "k";
    s.generation = 2;
    msr_store_core_call(core, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK_EQ(c.code, MSR_RPC_ABORTED);
    MSR_CHECK_MSG(strstr(c.message, "stale generation 2") != NULL, "%s", c.message);
    MSR_CHECK_EQ(msr_store_core_keys(core), 0);
    call_init(&c, MSR_RPC_SET);
    s.generation = 3;
    msr_store_core_call(core, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.answered && c.code == 0);
    done(&c);
    MSR_CHECK_EQ(msr_store_core_keys(core), 1);

    call_init(&held, MSR_RPC_GET);
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "next";
    g.wait_ms = UINT32_MAX;
    g.generation = 3;
    msr_store_core_call(core, &held, MSR_RPC_GET, &g.base);
    call_init(&bar, MSR_RPC_BARRIER);
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
    call_init(&bar, MSR_RPC_BARRIER);
    b.generation = 4;
    msr_store_core_call(core, &bar, MSR_RPC_BARRIER, &b.base);
    MSR_CHECK(!bar.answered);
    msr_store_core_destroy(core); /* drops what it holds, unanswered */
}

static void test_request_ids(void)
{
    tctx_t t;
    msr_store_core_t *core = core_new(&t, NULL);
    tcall_t c;
    call_init(&c, MSR_RPC_SET);
    Msr__SetRequest s = MSR__SET_REQUEST__INIT;
    s.key = "k";
    s.client_id = 7;
    s.request_id = 1;
    msr_store_core_call(core, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.code == 0 && c.answered);
    done(&c);
    MSR_CHECK_EQ(t.writes_remembered, 1);
    /* a write the user has seen before is answered by it, not applied */
    t.seen = 1;
    call_init(&c, MSR_RPC_SET);
    s.key = "other";
    msr_store_core_call(core, &c, MSR_RPC_SET, &s.base);
    MSR_CHECK(c.code == 0 && c.answered);
    done(&c);
    MSR_CHECK_EQ(msr_store_core_keys(core), 1);
    MSR_CHECK_EQ(t.writes_remembered, 1);
    msr_store_core_destroy(core);
}

static void do_publish(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t index,
                       const char *value)
{
    call_init(c, MSR_RPC_PUBLISH);
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep = &e;
    e.index = index;
    e.data.data = (uint8_t *)value;
    e.data.len = strlen(value);
    Msr__PublishRequest r = MSR__PUBLISH_REQUEST__INIT;
    r.name = (char *)name;
    r.n_entries = 1;
    r.entries = &ep;
    msr_store_core_call(core, c, MSR_RPC_PUBLISH, &r.base);
    MSR_CHECK_MSG(c->answered && c->code == 0, "publish: %d %s", c->code, c->message);
    done(c);
}

static void do_fetch(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t *indices,
                     size_t n, uint32_t wait_ms)
{
    call_init(c, MSR_RPC_FETCH);
    Msr__FetchRequest r = MSR__FETCH_REQUEST__INIT;
    r.name = (char *)name;
    r.n_indices = n;
    r.indices = indices;
    r.wait_ms = wait_ms;
    msr_store_core_call(core, c, MSR_RPC_FETCH, &r.base);
}

/* A fetch answers with the values in the order asked, once all exist;
 * one that waits moves from one missing entry to the next; a missing
 * entry ends it at its deadline, named in the error. */
static void test_publish_fetch(void)
{
    tctx_t t;
    msr_store_core_t *core = core_new(&t, NULL);
    tcall_t p, f, g, h;
    uint32_t want[3] = {2, 0, 1};
    do_fetch(core, &f, "addr", want, 3, 60000);
    do_fetch(core, &h, "addr", want + 2, 1, 0);
    MSR_CHECK(!f.answered);
    MSR_CHECK_EQ(h.code, MSR_RPC_NOT_FOUND);
    MSR_CHECK_MSG(strstr(h.message, "entry 1 ") != NULL, "%s", h.message);
    do_publish(core, &p, "addr", 2, "cc");
    MSR_CHECK(!f.answered);
    do_publish(core, &p, "addr", 0, "a");
    MSR_CHECK(!f.answered);
    do_publish(core, &p, "addr", 1, "bbb");
    MSR_CHECK_MSG(f.answered && f.code == 0, "fetch: %d %s", f.code, f.message);
    const Msr__FetchResponse *r = (const Msr__FetchResponse *)f.resp;
    MSR_CHECK_EQ(r->n_lengths, 3);
    MSR_CHECK(r->lengths[0] == 2 && r->lengths[1] == 1 && r->lengths[2] == 3);
    MSR_CHECK_EQ(r->data.len, 6);
    MSR_CHECK(memcmp(r->data.data, "ccabbb", 6) == 0);
    done(&f);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);
    /* the entry is an ordinary key too */
    do_get(core, &g, "addr/1", 0);
    check_value(&g, "bbb");

    /* present now: answered at once */
    do_fetch(core, &f, "addr", want, 2, 0);
    MSR_CHECK(f.answered && f.code == 0);
    done(&f);

    /* never published: the deadline names the entry */
    uint32_t late[2] = {0, 7};
    do_fetch(core, &f, "addr", late, 2, 50);
    MSR_CHECK(!f.answered);
    msr_store_core_tick(core, msr_now_ns() + 10ull * 1000000000ull);
    MSR_CHECK_EQ(f.code, MSR_RPC_DEADLINE_EXCEEDED);
    MSR_CHECK_MSG(strstr(f.message, "fetch 'addr': entry 7 was not published") != NULL, "%s",
                  f.message);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);

    /* a cancelled fetch leaves nothing held; a reset fails a held one */
    do_fetch(core, &f, "addr", late, 2, 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &f), 1);
    MSR_CHECK(!f.answered && f.data == NULL);
    do_fetch(core, &f, "addr", late, 2, UINT32_MAX);
    msr_store_core_reset(core, "restart");
    MSR_CHECK_EQ(f.code, MSR_RPC_ABORTED);
    msr_store_core_destroy(core);
}

static void test_limits(void)
{
    tctx_t t;
    msr_store_limits_t l = {.value_max = 10, .keys_max = 2, .bytes_max = 0};
    msr_store_core_t *core = core_new(&t, &l);
    tcall_t c, w;
    do_set(core, &c, "k", "01234567890");
    MSR_CHECK_EQ(c.code, MSR_RPC_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(c.message, "--store_value_max") != NULL, "%s", c.message);
    do_set(core, &c, "a", "1");
    done(&c);
    do_get(core, &w, "b", 60000); /* a waited-on name counts as a key */
    MSR_CHECK(!w.answered);
    do_set(core, &c, "c", "1");
    MSR_CHECK_EQ(c.code, MSR_RPC_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(c.message, "--store_keys_max") != NULL, "%s", c.message);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &w), 1); /* the name is given back */
    do_set(core, &c, "c", "1");
    MSR_CHECK_MSG(c.code == 0, "%s", c.message);
    done(&c);
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
    msr_store_core_t *core = core_new(&t, NULL);
    tcall_t a, b, c, d;
    /* the weighted one first: 2 + 1 arrive, the 2 leaves, 1 + 2 + 1 fill 4 */
    do_barrier(core, &a, "first", 4, 2, 60000);
    do_barrier(core, &b, "first", 4, 1, 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &a), 1);
    do_barrier(core, &c, "first", 4, 1, 60000);
    MSR_CHECK(!b.answered && !c.answered);
    do_barrier(core, &a, "first", 4, 2, 60000); /* exactly the room left */
    MSR_CHECK_MSG(a.answered && a.code == 0, "%d %s", a.code, a.message);
    MSR_CHECK(b.answered && b.code == 0 && c.answered && c.code == 0);
    done(&a);
    done(&b);
    done(&c);
    /* the weighted one last, by its deadline: 1 + 1 + 3 of 6, the first 1
     * and then the 3 leave; 1 is left, 5 more fill it, 6 would not */
    do_barrier(core, &b, "last", 6, 1, 60000);
    do_barrier(core, &c, "last", 6, 1, 60000);
    do_barrier(core, &a, "last", 6, 3, 10);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &b), 1);
    expire(core, &a);
    MSR_CHECK_MSG(strstr(a.message, "4 of 6") != NULL, "%s", a.message);
    MSR_CHECK(!c.answered);
    do_barrier(core, &d, "last", 6, 6, 60000);
    MSR_CHECK_EQ(d.code, MSR_RPC_INVALID_ARGUMENT); /* one past the room left */
    do_barrier(core, &d, "last", 6, 5, 60000);
    MSR_CHECK_MSG(d.answered && d.code == 0, "%d %s", d.code, d.message);
    MSR_CHECK(c.answered && c.code == 0);
    done(&c);
    done(&d);
    /* every caller gives up, the weighted one first: nothing is
     * left, and the barrier starts again from nothing */
    do_barrier(core, &a, "all", 4, 1, 60000);
    do_barrier(core, &b, "all", 4, 2, 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &b), 1);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &a), 1);
    do_barrier(core, &a, "all", 4, 1, 10);
    expire(core, &a);
    MSR_CHECK_MSG(strstr(a.message, "1 of 4") != NULL, "%s", a.message);
    MSR_CHECK_EQ(msr_store_core_next_deadline(core), MSR_DEADLINE_NEVER);
    msr_store_core_destroy(core);
}

/* An allgather call of n entries (indices idx[0..n), data "<index>"). */
static void do_gather_n(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t count,
                        const uint32_t *idx, size_t n, uint32_t wait_ms)
{
    call_init(c, MSR_RPC_ALLGATHER);
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
    done(c);
}

/* A caller that gives up takes back its own contributions and no one
 * else's: three callers (one bringing two entries), the two-entry one
 * giving up first, then a one-entry one giving up last. */
static void test_allgather_withdraw_orders(void)
{
    tctx_t t;
    msr_store_core_t *core = core_new(&t, NULL);
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
    msr_store_core_t *core = core_new(&t, NULL);
    static uint32_t many[MSR_FETCH_MAX + 1];
    for (uint32_t i = 0; i <= MSR_FETCH_MAX; i++)
        many[i] = i;
    tcall_t f[3], p;
    do_fetch(core, &f[0], "addr", many, MSR_FETCH_MAX, 0);
    MSR_CHECK_MSG(f[0].code == MSR_RPC_NOT_FOUND, "%d %s", f[0].code, f[0].message);
    MSR_CHECK_MSG(strstr(f[0].message, "entry 0 was not published") != NULL, "%s", f[0].message);
    do_fetch(core, &f[0], "addr", many, MSR_FETCH_MAX + 1, 0);
    MSR_CHECK_EQ(f[0].code, MSR_RPC_INVALID_ARGUMENT);
    MSR_CHECK_MSG(strstr(f[0].message, "65537 entries asked, at most 65536") != NULL, "%s",
                  f[0].message);
    /* held at its bound: one entry published of MSR_FETCH_MAX, it waits on the next */
    do_publish(core, &p, "big", 0, "a");
    do_fetch(core, &f[0], "big", many, MSR_FETCH_MAX, 10);
    expire(core, &f[0]);
    MSR_CHECK_MSG(strstr(f[0].message, "entry 1 was not published") != NULL, "%s", f[0].message);
    /* three callers on entries 1 and 2: the first gives up by cancel, the
     * second by its deadline, the third gets both */
    do_fetch(core, &f[0], "addr", many + 1, 2, 60000);
    do_fetch(core, &f[1], "addr", many + 1, 2, 10);
    do_fetch(core, &f[2], "addr", many + 1, 2, 60000);
    MSR_CHECK_EQ(msr_store_core_cancel(core, &f[0]), 1);
    do_publish(core, &p, "addr", 1, "one");
    expire(core, &f[1]);
    MSR_CHECK_MSG(strstr(f[1].message, "entry 2 was not published") != NULL, "%s", f[1].message);
    MSR_CHECK(!f[2].answered);
    do_publish(core, &p, "addr", 2, "two");
    MSR_CHECK_MSG(f[2].answered && f[2].code == 0, "%d %s", f[2].code, f[2].message);
    MSR_CHECK_EQ(((Msr__FetchResponse *)f[2].resp)->data.len, 6);
    done(&f[2]);
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
        msr_store_core_t *core = core_new(&t, &l);
        tcall_t c;
        MSR_CHECK_EQ(strlen(keys[0]), KEY);
        do_set(core, &c, keys[one_more], value);
        if (one_more) {
            MSR_CHECK_EQ(c.code, MSR_RPC_RESOURCE_EXHAUSTED);
            MSR_CHECK_MSG(strstr(c.message, "--store_bytes_max") != NULL, "%s", c.message);
        } else {
            MSR_CHECK_MSG(c.answered && c.code == 0, "%d %s", c.code, c.message);
            done(&c);
            value[VALUE] = 'v'; /* the same key, one byte more of value */
            value[VALUE + 1] = '\0';
            do_set(core, &c, keys[0], value);
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
    msr_store_core_t *core = core_new(&t, NULL);
    char text[33];
    for (size_t len = 31; len <= 32; len++) {
        memset(text, '0', len - 1);
        text[len - 1] = '7';
        text[len] = '\0';
        tcall_t c;
        do_set(core, &c, "n", text);
        MSR_CHECK_MSG(c.answered && c.code == 0, "%d %s", c.code, c.message);
        done(&c);
        do_add(core, &c, "n", 1);
        if (len == 31) {
            MSR_CHECK_MSG(c.answered && c.code == 0, "%d %s", c.code, c.message);
            MSR_CHECK_EQ(((Msr__AddResponse *)c.resp)->value, 8);
            done(&c);
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
    msr_store_core_t *core = core_new(&t, NULL);
    static char name[MSR_KEY_MAX + 1];
    memset(name, 'n', MSR_KEY_MAX - 2);
    name[MSR_KEY_MAX - 2] = '\0'; /* + "/0" is MSR_KEY_MAX */
    tcall_t c;
    do_publish(core, &c, name, 0, "a");
    for (uint32_t index = 9; index <= 10; index++) {
        call_init(&c, MSR_RPC_PUBLISH);
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
            done(&c);
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
    msr_store_ops_t ops = ops_for(&t);
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
        msr_store_core_t *core = core_new(&t, NULL);
        tcall_t a, b;
        msr_alloc_fail_at(k);
        do_gather(core, &a, "g", 2, 0, "abc", 3, 60000);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        if (failed) {
            MSR_CHECK_MSG(a.answered && a.code != 0, "allocation %ld: %d", k, a.code);
            do_gather(core, &a, "g", 2, 0, "abc", 3, 60000);
        }
        MSR_CHECK(!a.answered);
        do_gather(core, &b, "g", 2, 1, "de", 2, 60000);
        MSR_CHECK_MSG(a.answered && a.code == 0, "%d %s", a.code, a.message);
        MSR_CHECK_MSG(b.answered && b.code == 0, "%d %s", b.code, b.message);
        MSR_CHECK_EQ(((Msr__AllgatherResponse *)a.resp)->data.len, 5);
        done(&a);
        done(&b);
        msr_store_core_destroy(core);
        if (!failed)
            break;
    }
}

static const msr_test_t tests[] = {
    {"each_op", test_each_op, 10},
    {"held_gets_and_deadlines", test_held_gets_and_deadlines, 10},
    {"barrier", test_barrier, 10},
    {"allgather_unequal_sizes", test_allgather_unequal_sizes, 10},
    {"generations_and_reset", test_generations_and_reset, 10},
    {"request_ids", test_request_ids, 10},
    {"limits", test_limits, 10},
    {"publish_fetch", test_publish_fetch, 10},
    {"barrier_withdraw_orders", test_barrier_withdraw_orders, 10},
    {"allgather_withdraw_orders", test_allgather_withdraw_orders, 10},
    {"fetch_bounds", test_fetch_bounds, 10},
    {"bytes_count_keys", test_bytes_count_keys, 10},
    {"counter_text_bound", test_counter_text_bound, 10},
    {"publish_key_bound", test_publish_key_bound, 10},
    {"alloc_failures", test_alloc_failures, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
