/* A node's Publish calls merged at a relay (rendezvous/relay_publish.c,
 * docs/architecture.md "Relays") against a coordinator on loopback, the
 * relay's server polled by the test itself so that it decides which calls
 * arrive within one poll: callers of one name go upstream as one Publish,
 * each hears OK and its entries are the coordinator's (one giving up
 * before the call left is not published), and the relay answers their
 * fetch; two names go as two calls; the bound on a merged call's bytes at
 * exactly its size and one byte past, and a call larger than it alone; a
 * merged call the coordinator refuses sends each caller alone, each
 * hearing the refusal a direct call hears. */
#include "tests/unit_rdzv/relay_ops.h"

typedef msr_top_t op_t;

/* A Publish over ch of entry index of name (generation gen), its value
 * len bytes of the letter tag. */
static void pub_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, op_t *o, int32_t gen,
                      const char *name, uint32_t index, size_t len, char tag, int64_t ms)
{
    static uint8_t buf[70000];
    MSR_CHECK(len <= sizeof buf);
    memset(buf, tag, len);
    Msr__Contribution c = MSR__CONTRIBUTION__INIT, *cp = &c;
    c.index = index;
    c.data.data = buf;
    c.data.len = len;
    Msr__PublishRequest r = MSR__PUBLISH_REQUEST__INIT;
    r.generation = gen;
    r.name = (char *)name;
    r.entries = &cp;
    r.n_entries = 1;
    msr_top_start(ch, loop, o, MSR_RPC_PUBLISH, &r.base, ms);
}

/* The value length that makes such a Publish exactly bytes packed. */
static size_t len_for(const char *name, uint32_t index, size_t bytes)
{
    Msr__Contribution c = MSR__CONTRIBUTION__INIT, *cp = &c;
    Msr__PublishRequest r = MSR__PUBLISH_REQUEST__INIT;
    c.index = index;
    r.name = (char *)name;
    r.entries = &cp;
    r.n_entries = 1;
    size_t len = bytes;
    for (int k = 0; k < 8; k++) {
        c.data.len = len;
        size_t got = protobuf_c_message_get_packed_size(&r.base);
        if (got == bytes)
            return len;
        len = len + bytes - got;
    }
    MSR_CHECK_MSG(0, "no value length packs to %zu bytes", bytes);
    return 0;
}

static int forwarding_is(msr_relay_server_t *relay, size_t n)
{
    return msr_relay_server_forwarding(relay) == n;
}

typedef struct at {
    msr_relay_server_t *relay;
    size_t n;
} at_t;

static int reached(void *arg)
{
    at_t *a = arg;
    return forwarding_is(a->relay, a->n);
}

static void ok_all(msr_rpc_loop_t *loop, op_t *o, int n)
{
    for (int k = 0; k < n; k++) {
        msr_tpoll_until(loop, msr_top_is_done, &o[k], "a merged caller");
        MSR_CHECK_MSG(o[k].a.status == MSR_OK, "publish %d: %s", k, o[k].a.err);
        msr_rpc_async_cleanup(&o[k].a);
    }
}

/* Fetches entry index of name over ch (wait 0): its value's length and
 * first byte, or -1 when the fetch fails. */
static long fetch_one(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, const char *name, uint32_t index,
                      int *first)
{
    Msr__FetchRequest r = MSR__FETCH_REQUEST__INIT;
    r.name = (char *)name;
    r.indices = &index;
    r.n_indices = 1;
    op_t o;
    msr_top_start(ch, loop, &o, MSR_RPC_FETCH, &r.base, 20000);
    msr_tpoll_until(loop, msr_top_is_done, &o, "a fetch");
    long len = -1;
    if (o.a.status == MSR_OK) {
        const Msr__FetchResponse *f = (const Msr__FetchResponse *)o.a.resp;
        MSR_CHECK_EQ(f->n_lengths, 1);
        len = (long)f->lengths[0];
        *first = len ? f->data.data[0] : -1;
    }
    msr_rpc_async_cleanup(&o.a);
    return len;
}

static void counts(msr_relay_server_t *relay, uint64_t calls, uint64_t merged)
{
    uint64_t c, m;
    msr_relay_server_publishes(relay, &c, &m);
    MSR_CHECK_EQ(c, calls);
    MSR_CHECK_EQ(m, merged);
}

/* A, B, C (gives up before the flush) and D publish "addr" in one poll:
 * one call upstream, A, B and D published and answered OK, C not; the
 * relay answers a fetch of A's and D's entries itself; then "x" and "y"
 * in one poll go as two calls. */
static void test_merged_publishes(void)
{
    msr_trig_t g;
    msr_trig_start(&g);
    msr_rpc_loop_t *loop = g.loop;
    op_t o[4];
    pub_start(g.via, loop, &o[0], 0, "addr", 0, 16, 'a', 20000);
    pub_start(g.via, loop, &o[1], 0, "addr", 1, 16, 'b', 20000);
    pub_start(g.via, loop, &o[2], 0, "addr", 2, 16, 'c', 300);
    pub_start(g.via, loop, &o[3], 0, "addr", 3, 16, 'd', 20000);
    at_t at = {g.relay, 4};
    msr_tpoll_until(loop, reached, &at, "four Publish calls at the relay");
    msr_tpoll_until(loop, msr_top_is_done, &o[2], "C giving up");
    MSR_CHECK_EQ(o[2].a.grpc_code, MSR_RPC_DEADLINE_EXCEEDED);
    msr_rpc_async_cleanup(&o[2].a);
    at.n = 3;
    msr_tpoll_until(loop, reached, &at, "C left out");
    uint64_t before = msr_tcoord_served(g.s.target, "Publish");
    msr_relay_server_flush(g.relay);
    counts(g.relay, 4, 1);
    ok_all(loop, o, 2);
    ok_all(loop, &o[3], 1);
    MSR_CHECK_EQ(msr_tcoord_served(g.s.target, "Publish") - before, 1); /* one for three */
    int first;
    const char want[] = {'a', 'b', 0, 'd'};
    for (uint32_t i = 0; i < 4; i++) {
        long len = fetch_one(g.direct, loop, "addr", i, &first);
        if (i == 2) {
            MSR_CHECK_EQ(len, -1); /* C not published */
            continue;
        }
        MSR_CHECK_EQ(len, 16);
        MSR_CHECK_EQ(first, want[i]);
    }
    uint64_t fetches = msr_tcoord_served(g.s.target, "Fetch"), answered;
    MSR_CHECK_EQ(fetch_one(g.via, loop, "addr", 3, &first), 16);
    MSR_CHECK_EQ(first, 'd');
    msr_relay_server_fetches(g.relay, &answered, NULL);
    MSR_CHECK_EQ(answered, 1);
    MSR_CHECK_EQ(msr_tcoord_served(g.s.target, "Fetch"), fetches);

    pub_start(g.via, loop, &o[0], 0, "x", 0, 8, 'x', 20000);
    pub_start(g.via, loop, &o[1], 0, "y", 0, 8, 'y', 20000);
    pub_start(g.via, loop, &o[2], 0, "x", 1, 8, 'x', 20000);
    at.n = 3;
    msr_tpoll_until(loop, reached, &at, "three Publish calls at the relay");
    before = msr_tcoord_served(g.s.target, "Publish");
    msr_relay_server_flush(g.relay);
    counts(g.relay, 7, 3);
    ok_all(loop, o, 3);
    MSR_CHECK_EQ(msr_tcoord_served(g.s.target, "Publish") - before, 2);
    msr_trig_stop(&g);
}

/* Two calls of half the bound each: one merged call; two of half the
 * bound and one byte: two; one call one byte past the bound: alone. */
static void test_publish_bound(void)
{
    msr_trig_t g;
    msr_trig_start(&g);
    msr_rpc_loop_t *loop = g.loop;
    const size_t half = MSR_RELAY_PUBLISH_BYTES / 2;
    op_t o[2];
    at_t at = {g.relay, 2};
    for (int round = 0; round < 2; round++) {
        for (uint32_t i = 0; i < 2; i++)
            pub_start(g.via, loop, &o[i], 0, "big", i, len_for("big", i, half + (size_t)round), 'g',
                      20000);
        msr_tpoll_until(loop, reached, &at, "two Publish calls at the relay");
        uint64_t before = msr_tcoord_served(g.s.target, "Publish");
        msr_relay_server_flush(g.relay);
        ok_all(loop, o, 2);
        MSR_CHECK_EQ(msr_tcoord_served(g.s.target, "Publish") - before, (uint64_t)round + 1);
    }
    counts(g.relay, 4, 3);
    pub_start(g.via, loop, &o[0], 0, "big", 5, len_for("big", 5, MSR_RELAY_PUBLISH_BYTES + 1), 'h',
              20000);
    ok_all(loop, o, 1); /* forwarded alone, no flush needed */
    counts(g.relay, 4, 3);
    int first;
    MSR_CHECK(fetch_one(g.direct, loop, "big", 5, &first) > 0 && first == 'h');
    msr_trig_stop(&g);
}

/* A merged call the coordinator refuses (another generation): each caller
 * sent alone, each hearing the refusal a direct call hears. */
static void test_refused_merge_alone(void)
{
    msr_trig_t g;
    msr_trig_start(&g);
    msr_rpc_loop_t *loop = g.loop;
    op_t d;
    pub_start(g.direct, loop, &d, 7, "late", 9, 4, 'z', 20000);
    msr_tpoll_until(loop, msr_top_is_done, &d, "the direct call");
    MSR_CHECK(d.a.status != MSR_OK);
    op_t o[3];
    for (uint32_t i = 0; i < 3; i++)
        pub_start(g.via, loop, &o[i], 7, "late", i, 4, 'z', 20000);
    at_t at = {g.relay, 3};
    msr_tpoll_until(loop, reached, &at, "three Publish calls at the relay");
    uint64_t before = msr_tcoord_served(g.s.target, "Publish");
    msr_relay_server_flush(g.relay);
    for (int k = 0; k < 3; k++) {
        msr_tpoll_until(loop, msr_top_is_done, &o[k], "a refused caller");
        MSR_CHECK_EQ(o[k].a.grpc_code, d.a.grpc_code);
        MSR_CHECK_MSG(strcmp(o[k].a.err, d.a.err) == 0, "'%s', direct '%s'", o[k].a.err, d.a.err);
        msr_rpc_async_cleanup(&o[k].a);
    }
    MSR_CHECK_EQ(msr_tcoord_served(g.s.target, "Publish") - before, 4); /* merged, then each */
    counts(g.relay, 3, 1);
    msr_rpc_async_cleanup(&d.a);
    msr_trig_stop(&g);
}

static const msr_test_t tests[] = {
    {"merged_publishes", test_merged_publishes, 60},
    {"publish_bound", test_publish_bound, 60},
    {"refused_merge_alone", test_refused_merge_alone, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests); /* gRPC starts in each test's process */
}
