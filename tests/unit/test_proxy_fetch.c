/* The node's store proxy between workers and a real coordinator on
 * loopback: a node's publishers go up as one Publish, and a fetch of what
 * the node published is answered by the proxy; concurrent fetches of
 * another node's entries go up as one Fetch, a repeated fetch is answered
 * from the node's cache, a Publish the coordinator refused is not cached,
 * and an entry that never appears ends the fetch at its deadline with an
 * error that names it. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/time.h"
#include "cluster/server.h"
#include "launcher/proxy.h"
#include "rendezvous/rpc.h"
#include "tests/runner.h"

typedef struct served {
    msr_coord_server_t *server;
    pthread_t thread;
    volatile sig_atomic_t stop;
} served_t;

static void *serve(void *arg)
{
    served_t *s = arg;
    msr_coord_server_run(s->server, &s->stop, 0);
    return NULL;
}

/* The proxy's socket, named by the runner's process (each test runs in a
 * child of it), which removes it at the end even when a test failed. */
static char sock_path[64];

typedef struct job {
    served_t coord;
    msr_proxy_t *proxy;
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *ch[4]; /* four workers of one node */
    msr_rpc_channel_t *other; /* another node's, to the coordinator */
    char sock[64];
} job_t;

typedef struct op {
    msr_rpc_async_t a;
    int done;
} op_t;

static void op_done(msr_rpc_async_t *a)
{
    ((op_t *)a)->done = 1;
}

static void job_start(job_t *j)
{
    memset(j, 0, sizeof *j);
    msr_coord_config_t cfg = {
        .token = "t", .job_id = "j", .worker_num = 4, .local_worker_num = 4, .max_restarts = 0};
    int port = 0;
    MSR_CHECK_OK(msr_coord_server_create("127.0.0.1:0", &cfg, &port, &j->coord.server));
    MSR_CHECK(pthread_create(&j->coord.thread, NULL, serve, &j->coord) == 0);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    snprintf(j->sock, sizeof j->sock, "%s", sock_path);
    unlink(j->sock);
    MSR_CHECK_OK(msr_proxy_start(j->sock, target, "t", NULL, 4, NULL, &j->proxy));
    MSR_CHECK_OK(msr_rpc_loop_create(&j->loop));
    char path[80];
    snprintf(path, sizeof path, "unix:%s", j->sock);
    for (int i = 0; i < 4; i++)
        MSR_CHECK_OK(msr_rpc_channel_create_own(path, "t", &j->ch[i]));
    MSR_CHECK_OK(msr_rpc_channel_create_own(target, "t", &j->other));
}

static void job_stop(job_t *j)
{
    for (int i = 0; i < 4; i++)
        msr_rpc_channel_destroy(j->ch[i]);
    msr_rpc_channel_destroy(j->other);
    msr_rpc_loop_destroy(j->loop);
    msr_proxy_stop(j->proxy);
    j->coord.stop = 1;
    pthread_join(j->coord.thread, NULL);
    msr_coord_server_destroy(j->coord.server);
}

static void wait_all(job_t *j, op_t *ops, int n)
{
    uint64_t limit = msr_deadline_in_ms(20000);
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !ops[i].done;
        if (left == 0)
            return;
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "%d calls unanswered", left);
        msr_rpc_loop_poll(j->loop, msr_deadline_in_ms(100));
    }
}

/* A Publish of "v<index>" at index, by worker (0-3) of this node, or by
 * another node (-1) straight to the coordinator. */
static void publish_gen(job_t *j, op_t *o, int worker, uint32_t index, uint32_t local_count,
                        int generation)
{
    char value[16];
    snprintf(value, sizeof value, "v%u", index);
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep = &e;
    e.index = index;
    e.data.data = (uint8_t *)value;
    e.data.len = strlen(value);
    Msr__PublishRequest r = MSR__PUBLISH_REQUEST__INIT;
    r.name = "addr";
    r.n_entries = 1;
    r.entries = &ep;
    r.local_count = local_count;
    r.generation = generation;
    memset(o, 0, sizeof *o);
    o->a.method = MSR_RPC_PUBLISH;
    o->a.deadline = msr_deadline_in_ms(10000);
    o->a.wait_for_ready = 1;
    o->a.done = op_done;
    MSR_CHECK_OK(
        msr_rpc_call_start(worker < 0 ? j->other : j->ch[worker], j->loop, &o->a, &r.base));
}

static void publish(job_t *j, op_t *o, int worker, uint32_t index, uint32_t local_count)
{
    publish_gen(j, o, worker, index, local_count, 0);
}

static void fetch_gen(job_t *j, op_t *o, int worker, uint32_t *indices, size_t n, uint32_t wait_ms,
                      int generation)
{
    Msr__FetchRequest r = MSR__FETCH_REQUEST__INIT;
    r.generation = generation;
    r.name = "addr";
    r.indices = indices;
    r.n_indices = n;
    r.wait_ms = wait_ms;
    memset(o, 0, sizeof *o);
    o->a.method = MSR_RPC_FETCH;
    o->a.deadline = msr_deadline_in_ms(wait_ms + 5000);
    o->a.wait_for_ready = 1;
    o->a.done = op_done;
    MSR_CHECK_OK(msr_rpc_call_start(j->ch[worker], j->loop, &o->a, &r.base));
}

static void fetch(job_t *j, op_t *o, int worker, uint32_t *indices, size_t n, uint32_t wait_ms)
{
    fetch_gen(j, o, worker, indices, n, wait_ms, 0);
}

/* The answer of o holds "v<i>" for each of indices, in that order. */
static void check_fetched(op_t *o, const uint32_t *indices, size_t n)
{
    MSR_CHECK_MSG(o->a.status == MSR_OK, "fetch: %s", o->a.err);
    const Msr__FetchResponse *r = (const Msr__FetchResponse *)o->a.resp;
    MSR_CHECK_EQ(r->n_lengths, n);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        char want[16];
        snprintf(want, sizeof want, "v%u", indices[i]);
        MSR_CHECK_EQ(r->lengths[i], strlen(want));
        MSR_CHECK(memcmp(r->data.data + off, want, r->lengths[i]) == 0);
        off += r->lengths[i];
    }
    msr_rpc_async_cleanup(&o->a);
}

static void test_batched_publish_and_fetch(void)
{
    job_t j;
    job_start(&j);
    op_t ops[4];
    uint64_t up0 = msr_proxy_calls_up(j.proxy);
    for (int i = 0; i < 4; i++)
        publish(&j, &ops[i], i, (uint32_t)i, 4);
    wait_all(&j, ops, 4);
    for (int i = 0; i < 4; i++) {
        MSR_CHECK_MSG(ops[i].a.status == MSR_OK, "publish: %s", ops[i].a.err);
        msr_rpc_async_cleanup(&ops[i].a);
    }
    MSR_CHECK_EQ(msr_proxy_calls_up(j.proxy) - up0, 1); /* one Publish for the node */

    /* the node's own entries: answered by the proxy, none goes up */
    uint32_t own[4] = {3, 0, 2, 1};
    for (int i = 0; i < 4; i++)
        fetch(&j, &ops[i], i, own, 4, 5000);
    wait_all(&j, ops, 4);
    for (int i = 0; i < 4; i++)
        check_fetched(&ops[i], own, 4);
    uint64_t hits = 0, up = 0;
    msr_proxy_fetch_stats(j.proxy, &hits, &up);
    MSR_CHECK_EQ(up, 0);
    MSR_CHECK_EQ(hits, 4);
    MSR_CHECK_EQ(msr_proxy_calls_up(j.proxy) - up0, 1);

    /* another node's entries 10-13 (straight to the coordinator) */
    for (int i = 0; i < 4; i++)
        publish(&j, &ops[i], -1, (uint32_t)(10 + i), 0);
    wait_all(&j, ops, 4);
    for (int i = 0; i < 4; i++) {
        MSR_CHECK_MSG(ops[i].a.status == MSR_OK, "publish: %s", ops[i].a.err);
        msr_rpc_async_cleanup(&ops[i].a);
    }
    /* four workers ask for the same entries at once: one upstream Fetch */
    uint32_t all[4] = {13, 10, 12, 11};
    for (int i = 0; i < 4; i++)
        fetch(&j, &ops[i], i, all, 4, 5000);
    wait_all(&j, ops, 4);
    for (int i = 0; i < 4; i++)
        check_fetched(&ops[i], all, 4);
    msr_proxy_fetch_stats(j.proxy, &hits, &up);
    MSR_CHECK_EQ(up, 1);

    /* asked again, with one of the node's own: from the node's cache */
    uint32_t two[2] = {12, 1};
    fetch(&j, &ops[0], 0, two, 2, 5000);
    wait_all(&j, ops, 1);
    check_fetched(&ops[0], two, 2);
    uint64_t hits2 = 0, up2 = 0;
    msr_proxy_fetch_stats(j.proxy, &hits2, &up2);
    MSR_CHECK_EQ(up2, 1);
    MSR_CHECK_EQ(hits2, hits + 1);

    /* entries published while two workers wait for them: the proxy has
     * both fetches and has sent one upstream before they are published */
    uint32_t later[2] = {5, 6};
    uint64_t in0 = msr_proxy_calls_in(j.proxy);
    fetch(&j, &ops[0], 0, later, 2, 10000);
    fetch(&j, &ops[1], 1, later, 2, 10000);
    /* 5 s: half the fetches' wait, so that they still wait when published */
    uint64_t limit = msr_deadline_in_ms(5000);
    for (;;) {
        msr_rpc_loop_poll(j.loop, msr_deadline_in_ms(10));
        msr_proxy_fetch_stats(j.proxy, &hits2, &up2);
        if (msr_proxy_calls_in(j.proxy) - in0 >= 2 && up2 == 2)
            break;
        MSR_CHECK_MSG(!msr_deadline_passed(limit),
                      "the proxy got %llu of the 2 fetches and sent %llu of them upstream",
                      (unsigned long long)(msr_proxy_calls_in(j.proxy) - in0),
                      (unsigned long long)(up2 - 1));
    }
    MSR_CHECK(!ops[0].done && !ops[1].done);
    publish(&j, &ops[2], 2, 5, 0);
    publish(&j, &ops[3], 3, 6, 0);
    wait_all(&j, ops, 4);
    check_fetched(&ops[0], later, 2);
    check_fetched(&ops[1], later, 2);
    msr_rpc_async_cleanup(&ops[2].a);
    msr_rpc_async_cleanup(&ops[3].a);
    msr_proxy_fetch_stats(j.proxy, &hits2, &up2);
    MSR_CHECK_EQ(up2, 2);
    job_stop(&j);
}

/* A Publish the coordinator refused (a generation the job is not at) is
 * not the store's: a fetch of it at that generation goes up and is
 * refused too, not answered from the node's cache. */
static void test_refused_publish_not_cached(void)
{
    job_t j;
    job_start(&j);
    op_t ops[2];
    publish_gen(&j, &ops[0], 0, 7, 0, 3);
    wait_all(&j, ops, 1);
    MSR_CHECK_EQ(ops[0].a.status, MSR_ERR_STALE);
    msr_rpc_async_cleanup(&ops[0].a);
    uint32_t seven[1] = {7};
    fetch_gen(&j, &ops[1], 1, seven, 1, 300, 3);
    wait_all(&j, &ops[1], 1);
    MSR_CHECK_MSG(ops[1].a.status == MSR_ERR_STALE, "fetch: %s (%s)",
                  msr_status_str(ops[1].a.status), ops[1].a.err);
    msr_rpc_async_cleanup(&ops[1].a);
    uint64_t hits = 0, up = 0;
    msr_proxy_fetch_stats(j.proxy, &hits, &up);
    MSR_CHECK_EQ(hits, 0);
    MSR_CHECK_EQ(up, 1);
    job_stop(&j);
}

static void test_fetch_never_published(void)
{
    job_t j;
    job_start(&j);
    op_t o;
    uint32_t missing[1] = {9};
    uint64_t t0 = msr_now_ns();
    fetch(&j, &o, 0, missing, 1, 300);
    wait_all(&j, &o, 1);
    MSR_CHECK_EQ(o.a.status, MSR_ERR_TIMEOUT);
    MSR_CHECK_MSG(strstr(o.a.err, "fetch 'addr': entry 9 was not published") != NULL, "%s",
                  o.a.err);
    /* ended by its 300 ms wait, before the caller's own deadline (the wait
     * and 5 s more: see fetch()) */
    MSR_CHECK(msr_now_ns() - t0 < (300 + 5000) * 1000000ull);
    msr_rpc_async_cleanup(&o.a);
    job_stop(&j);
}

static const msr_test_t tests[] = {
    {"batched_publish_and_fetch", test_batched_publish_and_fetch, 30},
    {"refused_publish_not_cached", test_refused_publish_not_cached, 30},
    {"fetch_never_published", test_fetch_never_published, 30},
};

int main(int argc, char **argv)
{
    snprintf(sock_path, sizeof sock_path, "/tmp/msr-proxy-fetch-%d.sock", (int)getpid());
    int rc = MSR_TEST_MAIN(argc, argv, tests);
    unlink(sock_path);
    return rc;
}
