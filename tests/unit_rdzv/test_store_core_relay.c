/* The store core's bounds on what it remembers for relays' merged
 * barriers (docs/architecture.md "Relays"): the ids of released arrivals
 * (MSR_BARRIER_RELEASED_MAX), withdrawals whose arrival has not come
 * (MSR_BARRIER_WITHDRAWN_MAX) and the parts of one merged arrival
 * (MSR_BARRIER_PARTS_MAX), each at its bound and one past; the record of
 * released ids grown in steps, and made by no lone rank's store. */
#include <stdlib.h>

#include "base/time.h"
#include "rendezvous/local_store.h"
#include "tests/unit_rdzv/test_store_core.h"

/* A Barrier "name" of count: with merge_id, a relay's merged arrival of n
 * parts (client 2, request ids first.., weight 1 each), or with withdraw
 * its withdrawal; else a caller alone of ids (2, first) and weight n. */
static void relay_barrier(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t count,
                          uint64_t merge_id, uint32_t withdraw, uint64_t first, size_t n)
{
    sc_call_init(c, MSR_RPC_BARRIER);
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    Msr__BarrierPart *parts = calloc(n, sizeof *parts);
    Msr__BarrierPart **pp = calloc(n, sizeof *pp);
    MSR_CHECK(parts != NULL && pp != NULL);
    for (size_t k = 0; k < n && merge_id != 0; k++) {
        msr__barrier_part__init(&parts[k]);
        parts[k].client_id = 2;
        parts[k].request_id = first + k;
        parts[k].weight = 1;
        pp[k] = &parts[k];
    }
    r.name = (char *)name;
    r.count = count;
    r.weight = withdraw ? 0 : (uint32_t)n;
    r.wait_ms = 60000;
    r.merge_id = merge_id;
    r.withdraw = withdraw;
    r.n_parts = merge_id != 0 ? n : 0;
    r.parts = pp;
    r.client_id = merge_id != 0 ? 0 : 2;
    r.request_id = merge_id != 0 ? 0 : first;
    msr_store_core_call(core, c, MSR_RPC_BARRIER, &r.base);
    free(parts);
    free(pp);
}

static void check_ok(tcall_t *c, const char *what)
{
    MSR_CHECK_MSG(c->answered && c->code == 0, "%s: answered %d, %d %s", what, c->answered, c->code,
                  c->message);
    sc_done(c);
}

/* MSR_BARRIER_RELEASED_MAX + 1 arrivals released: the first one's ids
 * are forgotten (sent again, it counts into the next barrier), the
 * second's remembered (answered released at once). */
static void test_released_bound(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t c, again;
    for (uint64_t k = 1; k <= (uint64_t)MSR_BARRIER_RELEASED_MAX + 1; k++) {
        relay_barrier(core, &c, "one", 1, 0, 0, k, 1);
        MSR_CHECK_MSG(c.answered && c.code == 0, "arrival %llu: %d %s", (unsigned long long)k,
                      c.code, c.message);
        sc_done(&c);
    }
    relay_barrier(core, &again, "two", 2, 0, 0, 1, 1);
    MSR_CHECK(!again.answered); /* forgotten: counted, waits for one more */
    relay_barrier(core, &c, "two", 2, 0, 0, 2, 1);
    check_ok(&c, "the second arrival sent again");
    relay_barrier(core, &c, "two", 2, 0, 0, MSR_BARRIER_RELEASED_MAX + 2, 1);
    check_ok(&c, "a new arrival");
    check_ok(&again, "the first arrival sent again");
    msr_store_core_destroy(core);
}

/* MSR_BARRIER_WITHDRAWN_MAX + 1 withdrawals before their arrivals: the
 * first is forgotten (its arrival counts 2), the second applied (its
 * arrival counts 1): 3 arrived, so 5 more release a barrier of 8. */
static void test_withdrawn_bound(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t c, a1, a2;
    for (uint64_t k = 1; k <= (uint64_t)MSR_BARRIER_WITHDRAWN_MAX + 1; k++) {
        relay_barrier(core, &c, "w", 8, k, 1, k, 1);
        MSR_CHECK_MSG(c.answered && c.code == 0, "withdrawal %llu: %d %s", (unsigned long long)k,
                      c.code, c.message);
        sc_done(&c);
    }
    relay_barrier(core, &a1, "w", 8, 1, 0, 1, 2);
    relay_barrier(core, &a2, "w", 8, 2, 0, 2, 2);
    MSR_CHECK(!a1.answered && !a2.answered);
    relay_barrier(core, &c, "w", 8, 0, 0, 100000, 5);
    check_ok(&c, "the last five");
    check_ok(&a1, "arrival 1");
    check_ok(&a2, "arrival 2");
    msr_store_core_destroy(core);
}

/* A merged arrival of MSR_BARRIER_PARTS_MAX parts is taken, one of one
 * more is refused, and so are parts whose weights do not add up. */
static void test_parts_bound(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    t.participants = 4096;
    tcall_t c;
    relay_barrier(core, &c, "p", 4096, 5, 0, 1, MSR_BARRIER_PARTS_MAX + 1);
    MSR_CHECK_MSG(c.answered && c.code == MSR_RPC_INVALID_ARGUMENT && strstr(c.message, "parts"),
                  "one part past: %d %s", c.code, c.message);
    sc_done(&c);
    relay_barrier(core, &c, "p", 4096, 7, 1, 1, MSR_BARRIER_PARTS_MAX + 1);
    MSR_CHECK_MSG(c.answered && c.code == MSR_RPC_INVALID_ARGUMENT && strstr(c.message, "parts"),
                  "a withdrawal of one part past: %d %s", c.code, c.message);
    sc_done(&c);
    relay_barrier(core, &c, "p", 4096, 7, MSR_BARRIER_PARTS_MAX, 1, MSR_BARRIER_PARTS_MAX);
    check_ok(&c, "a withdrawal of the most parts (remembered)");
    relay_barrier(core, &c, "p", MSR_BARRIER_PARTS_MAX, 5, 0, 1, MSR_BARRIER_PARTS_MAX);
    check_ok(&c, "the most parts");
    sc_call_init(&c, MSR_RPC_BARRIER);
    Msr__BarrierPart part = MSR__BARRIER_PART__INIT, *pp = &part;
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.name = "q";
    r.count = 4;
    r.weight = 2;
    r.merge_id = 6;
    r.n_parts = 1;
    r.parts = &pp;
    msr_store_core_call(core, &c, MSR_RPC_BARRIER, &r.base);
    MSR_CHECK_MSG(c.answered && c.code == MSR_RPC_INVALID_ARGUMENT, "weights: %d %s", c.code,
                  c.message);
    sc_done(&c);
    msr_store_core_destroy(core);
}

/* A merged arrival of parts weighing 1, 2 and 1 into a barrier of 5 where
 * arrived came before: counted whole where all 4 fit (at the bound); one
 * past (3 fit) answered over with the first two parts admitted, nothing
 * counted; where 2 or 1 fit, the first part only (the part of 2 would
 * pass). */
static void over_case(uint32_t arrived, uint32_t want_admit)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t first, c;
    if (arrived > 0)
        sc_do_barrier(core, &first, "o", 5, arrived, 60000);
    Msr__BarrierPart parts[3], *pp[3];
    uint32_t ws[3] = {1, 2, 1};
    for (int k = 0; k < 3; k++) {
        msr__barrier_part__init(&parts[k]);
        parts[k].weight = ws[k];
        pp[k] = &parts[k];
    }
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.name = "o";
    r.count = 5;
    r.weight = 4;
    r.wait_ms = 60000;
    r.merge_id = 9;
    r.n_parts = 3;
    r.parts = pp;
    sc_call_init(&c, MSR_RPC_BARRIER);
    msr_store_core_call(core, &c, MSR_RPC_BARRIER, &r.base);
    if (arrived == 1) { /* fits exactly: released with the first */
        check_ok(&c, "a merge that fits exactly");
        check_ok(&first, "the first");
    } else {
        MSR_CHECK_MSG(c.answered && c.code == 0, "over: %d %s", c.code, c.message);
        const Msr__BarrierResponse *resp = (const Msr__BarrierResponse *)c.resp;
        MSR_CHECK(resp->over);
        MSR_CHECK_EQ(resp->admit, want_admit);
        sc_done(&c);
        /* nothing counted: the rest of the count releases the first */
        sc_do_barrier(core, &c, "o", 5, 5 - arrived, 60000);
        check_ok(&c, "the rest");
        check_ok(&first, "the first");
    }
    msr_store_core_destroy(core);
}

static void test_merge_over(void)
{
    over_case(1, 3);
    over_case(2, 2);
    over_case(3, 1);
    over_case(4, 1);
}

/* The record of released ids grows in steps: none before the first
 * release with ids, MSR_BARRIER_RELEASED_FIRST at it and still at that
 * many, doubled one past, every id kept (the first still answered
 * released). A store with no_resends, and a lone rank's local store,
 * make none (sent again, an arrival counts afresh there). */
static void test_released_lazily(void)
{
    tctx_t t;
    msr_store_core_t *core = sc_core_new(&t, NULL);
    tcall_t c, again;
    const size_t first = 16 * (size_t)MSR_BARRIER_RELEASED_FIRST;
    MSR_CHECK_EQ(msr_store_core_released_bytes(core), 0);
    for (uint64_t k = 1; k <= (uint64_t)MSR_BARRIER_RELEASED_FIRST + 1; k++) {
        relay_barrier(core, &c, "one", 1, 0, 0, k, 1);
        check_ok(&c, "an arrival released");
        if (k == 1 || k == MSR_BARRIER_RELEASED_FIRST)
            MSR_CHECK_EQ(msr_store_core_released_bytes(core), first);
    }
    MSR_CHECK_EQ(msr_store_core_released_bytes(core), 2 * first);
    relay_barrier(core, &c, "two", 2, 0, 0, 1, 1);
    check_ok(&c, "the first arrival sent again");
    msr_store_core_destroy(core);
    msr_store_ops_t ops = sc_ops_for(&t);
    ops.no_resends = 1;
    MSR_CHECK_EQ(msr_store_core_create(NULL, &ops, &core), MSR_OK);
    relay_barrier(core, &c, "one", 1, 0, 0, 1, 1);
    check_ok(&c, "an arrival released, no resends");
    MSR_CHECK_EQ(msr_store_core_released_bytes(core), 0);
    relay_barrier(core, &again, "two", 2, 0, 0, 1, 1);
    MSR_CHECK(!again.answered); /* not remembered: counted afresh */
    relay_barrier(core, &c, "two", 2, 0, 0, 2, 1);
    check_ok(&c, "the second of two");
    check_ok(&again, "the first sent again");
    msr_store_core_destroy(core);
}

/* A lone rank's local store: a barrier of one with ids released, no
 * record of released ids made. */
static void test_local_store_released(void)
{
    msr_local_store_t *ls = NULL;
    MSR_CHECK_EQ(msr_local_store_create(&ls), MSR_OK);
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.name = "b";
    r.count = 1;
    r.wait_ms = 1000;
    r.client_id = 3;
    r.request_id = 1;
    ProtobufCMessage *resp = NULL;
    MSR_CHECK_EQ(
        msr_local_store_call(ls, MSR_RPC_BARRIER, &r.base, msr_deadline_in_ms(5000), &resp),
        MSR_OK);
    msr_rpc_message_free(resp);
    MSR_CHECK_EQ(msr_local_store_released_bytes(ls), 0);
    msr_local_store_destroy(ls);
}

static const msr_test_t tests[] = {
    {"released_bound", test_released_bound, 30},
    {"withdrawn_bound", test_withdrawn_bound, 10},
    {"parts_bound", test_parts_bound, 10},
    {"merge_over", test_merge_over, 10},
    {"released_lazily", test_released_lazily, 10},
    {"local_store_released", test_local_store_released, 10},
};

const msr_test_piece_t sc_relay_tests = MSR_TEST_PIECE(tests);
