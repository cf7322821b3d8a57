/* The store's calls through relays (rendezvous/relay.h, docs/architecture.md
 * "Relays") against a coordinator on loopback: nodes under two leaf relays
 * of a middle relay set, get, add and meet at a barrier, a get waiting
 * under one leaf for a set under the other; a relay answers with the
 * coordinator's own errors and refuses a wrong token as it does; the
 * coordinator holds one connection, the top relay's, for every node under
 * it; a leaf, and a middle relay, killed while a call waits through them
 * end that call with UNAVAILABLE; a node giving up on its call cancels it
 * up the tree; a node's store proxy sends its workers'
 * calls through its relay and, once the relay is killed mid-get, to the
 * coordinator, the get still answered; a relay answers a fetch of
 * entries its nodes published through it, and sends the others on. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/time.h"
#include "cluster/server.h"
#include "launcher/proxy.h"
#include "rendezvous/relay.h"
#include "rendezvous/rpc.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fixtures.h"
#include "tests/unit_rdzv/relay_ops.h"

/* ---- a store call and its answer ---- */

typedef msr_top_t op_t;

static void op_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, op_t *o, msr_rpc_method_t m,
                     const ProtobufCMessage *req)
{
    msr_top_start(ch, loop, o, m, req, 20000);
}

/* Polls loop until every op of o[0..n) is done (20 s at most). */
static void ops_wait(msr_rpc_loop_t *loop, op_t *o, int n)
{
    uint64_t limit = msr_deadline_in_ms(20000);
    for (int k = 0; k < n; k++)
        while (!o[k].done) {
            MSR_CHECK_MSG(!msr_deadline_passed(limit), "call %d unanswered in 20 s", k);
            msr_rpc_loop_poll(loop, msr_deadline_in_ms(100));
        }
}

static void set_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, op_t *o, const char *key,
                      const char *value)
{
    Msr__SetRequest r = MSR__SET_REQUEST__INIT;
    r.key = (char *)key;
    r.value.data = (uint8_t *)value;
    r.value.len = strlen(value);
    op_start(ch, loop, o, MSR_RPC_SET, &r.base);
}

static void get_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, op_t *o, const char *key,
                      uint32_t wait_ms)
{
    Msr__GetRequest r = MSR__GET_REQUEST__INIT;
    r.key = (char *)key;
    r.wait_ms = wait_ms;
    op_start(ch, loop, o, MSR_RPC_GET, &r.base);
}

/* A set answered OK. */
static void set_ok(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, const char *key, const char *value)
{
    op_t o;
    set_start(ch, loop, &o, key, value);
    ops_wait(loop, &o, 1);
    MSR_CHECK_MSG(o.a.status == MSR_OK, "set %s: %s", key, o.a.err);
    msr_rpc_async_cleanup(&o.a);
}

/* A finished get's value must be want. */
static void get_check(op_t *o, const char *want)
{
    MSR_CHECK_MSG(o->a.status == MSR_OK, "get: %d %s", o->a.grpc_code, o->a.err);
    const Msr__GetResponse *g = (const Msr__GetResponse *)o->a.resp;
    MSR_CHECK_EQ(g->value.len, strlen(want));
    MSR_CHECK(memcmp(g->value.data, want, g->value.len) == 0);
    msr_rpc_async_cleanup(&o->a);
}

static int64_t add(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, const char *key, int64_t delta)
{
    Msr__AddRequest r = MSR__ADD_REQUEST__INIT;
    r.key = (char *)key;
    r.delta = delta;
    op_t o;
    op_start(ch, loop, &o, MSR_RPC_ADD, &r.base);
    ops_wait(loop, &o, 1);
    MSR_CHECK_MSG(o.a.status == MSR_OK, "add %s: %s", key, o.a.err);
    int64_t v = ((const Msr__AddResponse *)o.a.resp)->value;
    msr_rpc_async_cleanup(&o.a);
    return v;
}

static void barrier_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, op_t *o, const char *name,
                          uint32_t count)
{
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.name = (char *)name;
    r.count = count;
    r.wait_ms = 15000;
    op_start(ch, loop, o, MSR_RPC_BARRIER, &r.base);
}

/* Whether inode is one of this process's sockets (its fds' links read
 * once per call of connections_to: "socket:[N]"). */
static int own_socket(const unsigned long *own, int n, unsigned long inode)
{
    for (int i = 0; i < n; i++)
        if (own[i] == inode)
            return 1;
    return 0;
}

static int own_sockets(unsigned long *own, int max)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (d == NULL)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        char link[64];
        ssize_t len = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);
        if (len <= 0)
            continue;
        link[len] = '\0';
        unsigned long inode;
        if (sscanf(link, "socket:[%lu]", &inode) == 1)
            own[n++] = inode;
    }
    closedir(d);
    return n;
}

/* Whether a /proc/net/tcp address ("0100007F:1F90", or its IPv4-mapped
 * IPv6 form) is 127.0.0.1:port. */
static int loopback_port(const char *addr, int port)
{
    const char *colon = strrchr(addr, ':');
    return colon && colon - addr >= 8 && strncmp(colon - 8, "0100007F", 8) == 0 &&
           strtol(colon + 1, NULL, 16) == port;
}

/* Established TCP connections to 127.0.0.1:port that this process opened:
 * the connections a server on loopback holds for this test's clients (its
 * listening socket is not one). Counted from the client's end, whose
 * socket is this process's: a process of another test that happens to
 * connect to the same port (an ephemeral port it knew as another server's,
 * say) is not counted. */
static int connections_to(int port)
{
    const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    unsigned long own[4096];
    int nown = own_sockets(own, 4096), n = 0;
    for (size_t f = 0; f < 2; f++) {
        FILE *fp = fopen(files[f], "r");
        if (fp == NULL)
            continue;
        char line[512];
        while (fgets(line, sizeof line, fp)) {
            char local[128], remote[128];
            unsigned st;
            unsigned long inode;
            if (sscanf(line, " %*d: %127s %127s %x %*s %*s %*s %*u %*u %lu", local, remote, &st,
                       &inode) != 4)
                continue; /* the header */
            if (st == 1 && loopback_port(remote, port) && own_socket(own, nown, inode))
                n++;
        }
        fclose(fp);
    }
    return n;
}

/* connections_to(port) once it is want, or after a deadline of 10 s its
 * last count: a connection of an object already destroyed may still be
 * open while gRPC closes it in the background (and a server of this test
 * may have been given the port it was connected to), and one being made
 * may not be open yet; the state checked is where the count settles. */
static int connections_settle(int port, int want)
{
    uint64_t deadline = msr_now_ns() + 10000000000ull;
    int n = connections_to(port);
    while (n != want && msr_now_ns() < deadline) {
        msr_sleep_ms(10);
        n = connections_to(port);
    }
    return n;
}

/* ---- a tree: leaves a and b under mid, under the coordinator ---- */

typedef struct tree {
    msr_tserved_t s;
    msr_trelay_t mid, la, lb;
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *cha, *chb, *direct;
} tree_t;

static void tree_start(tree_t *t)
{
    msr_tserved_start_nodes(&t->s, 4);
    msr_trelay_start(&t->mid, t->s.target, "tok", "mid", 4);
    msr_trelay_start(&t->la, t->mid.target, "tok", "leaf-a", 2);
    msr_trelay_start(&t->lb, t->mid.target, "tok", "leaf-b", 2);
    MSR_CHECK_OK(msr_rpc_loop_create(&t->loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(t->la.target, "tok", &t->cha));
    MSR_CHECK_OK(msr_rpc_channel_create_own(t->lb.target, "tok", &t->chb));
    MSR_CHECK_OK(msr_rpc_channel_create_own(t->s.target, "tok", &t->direct));
}

static void tree_stop(tree_t *t)
{
    msr_rpc_channel_destroy(t->cha);
    msr_rpc_channel_destroy(t->chb);
    msr_rpc_channel_destroy(t->direct);
    msr_rpc_loop_destroy(t->loop);
    msr_trelay_stop(&t->la);
    msr_trelay_stop(&t->lb);
    msr_trelay_stop(&t->mid);
    msr_tserved_stop(&t->s);
}

/* Set, get and add through the tree, and the direct view of the same
 * keys; a get waiting under leaf a for a set under leaf b; a barrier of
 * two, one under each leaf. */
static void test_tree_store(void)
{
    tree_t t;
    tree_start(&t);
    set_ok(t.cha, t.loop, "k", "v-a");
    op_t g[3];
    get_start(t.chb, t.loop, &g[0], "k", 0);
    get_start(t.direct, t.loop, &g[1], "k", 0);
    ops_wait(t.loop, g, 2);
    get_check(&g[0], "v-a");
    get_check(&g[1], "v-a");
    MSR_CHECK_EQ(add(t.cha, t.loop, "n", 2), 2);
    MSR_CHECK_EQ(add(t.chb, t.loop, "n", 3), 5);
    MSR_CHECK_EQ(add(t.direct, t.loop, "n", 0), 5);

    get_start(t.cha, t.loop, &g[2], "late", 15000); /* waits at the coordinator */
    set_ok(t.chb, t.loop, "late", "v-b");
    ops_wait(t.loop, &g[2], 1);
    get_check(&g[2], "v-b");

    op_t b[2];
    barrier_start(t.cha, t.loop, &b[0], "meet", 2);
    barrier_start(t.chb, t.loop, &b[1], "meet", 2);
    ops_wait(t.loop, b, 2);
    for (int k = 0; k < 2; k++) {
        MSR_CHECK_MSG(b[k].a.status == MSR_OK, "barrier %d: %s", k, b[k].a.err);
        msr_rpc_async_cleanup(&b[k].a);
    }
    tree_stop(&t);
}

/* A relay's errors are the coordinator's: a missing key, a write the
 * store refuses, and a call with a wrong token, each with the code (and
 * for the store's errors the message) of the same call made directly. */
static void test_same_errors(void)
{
    tree_t t;
    tree_start(&t);
    op_t o[2];
    get_start(t.cha, t.loop, &o[0], "missing", 0);
    get_start(t.direct, t.loop, &o[1], "missing", 0);
    ops_wait(t.loop, o, 2);
    MSR_CHECK_EQ(o[0].a.grpc_code, MSR_RPC_NOT_FOUND);
    MSR_CHECK_EQ(o[0].a.grpc_code, o[1].a.grpc_code);
    MSR_CHECK_STR(o[0].a.err, o[1].a.err);
    msr_rpc_async_cleanup(&o[0].a);
    msr_rpc_async_cleanup(&o[1].a);

    set_start(t.cha, t.loop, &o[0], "", "v"); /* an empty key */
    set_start(t.direct, t.loop, &o[1], "", "v");
    ops_wait(t.loop, o, 2);
    MSR_CHECK(o[0].a.status != MSR_OK);
    MSR_CHECK_EQ(o[0].a.grpc_code, o[1].a.grpc_code);
    MSR_CHECK_STR(o[0].a.err, o[1].a.err);
    msr_rpc_async_cleanup(&o[0].a);
    msr_rpc_async_cleanup(&o[1].a);

    msr_rpc_channel_t *bad_relay, *bad_direct;
    MSR_CHECK_OK(msr_rpc_channel_create_own(t.la.target, "wrong", &bad_relay));
    MSR_CHECK_OK(msr_rpc_channel_create_own(t.s.target, "wrong", &bad_direct));
    set_start(bad_relay, t.loop, &o[0], "k", "v");
    set_start(bad_direct, t.loop, &o[1], "k", "v");
    ops_wait(t.loop, o, 2);
    MSR_CHECK(o[0].a.status != MSR_OK);
    MSR_CHECK_EQ(o[0].a.grpc_code, o[1].a.grpc_code);
    msr_rpc_async_cleanup(&o[0].a);
    msr_rpc_async_cleanup(&o[1].a);
    get_start(t.direct, t.loop, &o[0], "k", 0); /* neither was applied */
    ops_wait(t.loop, o, 1);
    MSR_CHECK_EQ(o[0].a.grpc_code, MSR_RPC_NOT_FOUND);
    msr_rpc_async_cleanup(&o[0].a);
    msr_rpc_channel_destroy(bad_relay);
    msr_rpc_channel_destroy(bad_direct);
    tree_stop(&t);
}

/* Six nodes (a connection each) calling through the tree: the coordinator
 * holds one connection, mid's, and mid two, its leaves'; the same six
 * calling directly make six at the coordinator. */
static void test_connections_at_relays(void)
{
    enum { NODES = 6 };
    tree_t t;
    tree_start(&t);
    msr_rpc_channel_t *via[NODES], *direct[NODES];
    for (int k = 0; k < NODES; k++) {
        MSR_CHECK_OK(msr_rpc_channel_create_own(k % 2 ? t.lb.target : t.la.target, "tok", &via[k]));
        char key[16];
        snprintf(key, sizeof key, "via%d", k);
        set_ok(via[k], t.loop, key, "v");
    }
    MSR_CHECK_EQ(connections_settle(t.s.port, 1), 1);
    MSR_CHECK_EQ(connections_settle(t.mid.port, 2), 2);
    MSR_CHECK_EQ(connections_settle(t.la.port, NODES / 2), NODES / 2);
    for (int k = 0; k < NODES; k++) {
        MSR_CHECK_OK(msr_rpc_channel_create_own(t.s.target, "tok", &direct[k]));
        char key[16];
        snprintf(key, sizeof key, "direct%d", k);
        set_ok(direct[k], t.loop, key, "v");
    }
    MSR_CHECK_EQ(connections_settle(t.s.port, 1 + NODES), 1 + NODES);
    for (int k = 0; k < NODES; k++) {
        msr_rpc_channel_destroy(via[k]);
        msr_rpc_channel_destroy(direct[k]);
    }
    tree_stop(&t);
}

/* Polls loop until relay r forwards n calls (20 s at most). */
static void forwarding_wait(msr_rpc_loop_t *loop, const msr_trelay_t *r, size_t n)
{
    uint64_t limit = msr_deadline_in_ms(20000);
    while (msr_relay_server_forwarding(r->server) != n) {
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "relay forwards %zu calls, not %zu",
                      msr_relay_server_forwarding(r->server), n);
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(20));
    }
}

/* A leaf killed while a get waits through it, then mid killed while a
 * barrier waits through leaf b and mid: each call ends UNAVAILABLE long
 * before its wait, and the store still answers directly. */
static void test_relay_killed_mid_call(void)
{
    tree_t t;
    tree_start(&t);
    op_t o;
    get_start(t.cha, t.loop, &o, "never", 15000);
    forwarding_wait(t.loop, &t.la, 1);
    forwarding_wait(t.loop, &t.mid, 1);
    msr_trelay_kill(&t.la);
    ops_wait(t.loop, &o, 1);
    MSR_CHECK_MSG(o.a.grpc_code == MSR_RPC_UNAVAILABLE, "%d %s", o.a.grpc_code, o.a.err);
    msr_rpc_async_cleanup(&o.a);
    forwarding_wait(t.loop, &t.mid, 0); /* the get ended upstream too */

    barrier_start(t.chb, t.loop, &o, "alone", 2);
    forwarding_wait(t.loop, &t.lb, 1);
    forwarding_wait(t.loop, &t.mid, 1);
    msr_trelay_kill(&t.mid);
    ops_wait(t.loop, &o, 1);
    MSR_CHECK_MSG(o.a.grpc_code == MSR_RPC_UNAVAILABLE, "%d %s", o.a.grpc_code, o.a.err);
    msr_rpc_async_cleanup(&o.a);
    forwarding_wait(t.loop, &t.lb, 0);
    set_ok(t.direct, t.loop, "after", "v");
    tree_stop(&t);
}

/* A node gives up on a get waiting through leaf a (a minute's wait):
 * both relays cancel their calls upstream at once, and neither forwards
 * anything after it. */
static void test_node_gives_up(void)
{
    tree_t t;
    tree_start(&t);
    op_t o;
    Msr__GetRequest r = MSR__GET_REQUEST__INIT;
    r.key = "never";
    r.wait_ms = 60000;
    msr_top_start(t.cha, t.loop, &o, MSR_RPC_GET, &r.base, 60000);
    forwarding_wait(t.loop, &t.mid, 1);
    msr_rpc_async_cancel(&o.a);
    ops_wait(t.loop, &o, 1);
    MSR_CHECK_EQ(o.a.status, MSR_ERR_CANCELED);
    msr_rpc_async_cleanup(&o.a);
    forwarding_wait(t.loop, &t.la, 0);
    forwarding_wait(t.loop, &t.mid, 0);
    tree_stop(&t);
}

/* ---- a node's store proxy under a relay ---- */

/* The proxy's socket, named by the runner's process, which removes it at
 * the end even when a test failed. */
static char sock_path[64];

/* Two workers of a node whose proxy has relay r: a set and a get go
 * through r (the coordinator holds r's connection only); r is killed while
 * a worker's get waits through it; the get goes to the coordinator, and
 * the other worker's set (sent directly now) answers it. */
static void test_proxy_falls_back(void)
{
    msr_tserved_t s;
    msr_trelay_t r;
    msr_tserved_start_nodes(&s, 2);
    msr_trelay_start(&r, s.target, "tok", "r", 2);
    unlink(sock_path);
    msr_proxy_t *p;
    MSR_CHECK_OK(msr_proxy_start(sock_path, s.target, "tok", NULL, 2, NULL, &p));
    MSR_CHECK_OK(msr_proxy_set_relay(p, r.target, NULL));
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *w[2];
    char path[80];
    snprintf(path, sizeof path, "unix:%s", sock_path);
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    for (int k = 0; k < 2; k++)
        MSR_CHECK_OK(msr_rpc_channel_create_own(path, "tok", &w[k]));

    set_ok(w[0], loop, "k", "v0");
    op_t o;
    get_start(w[1], loop, &o, "k", 0);
    ops_wait(loop, &o, 1);
    get_check(&o, "v0");
    MSR_CHECK_EQ(connections_settle(s.port, 1), 1); /* the relay's */

    get_start(w[0], loop, &o, "late", 15000);
    forwarding_wait(loop, &r, 1);
    msr_trelay_kill(&r);
    set_ok(w[1], loop, "late", "v1");
    ops_wait(loop, &o, 1);
    get_check(&o, "v1");
    for (int k = 0; k < 2; k++)
        msr_rpc_channel_destroy(w[k]);
    msr_rpc_loop_destroy(loop);
    msr_proxy_stop(p);
    msr_trelay_stop(&r);
    msr_tserved_stop(&s);
}

/* ---- the bounds of held and forwarded calls ---- */

/* Starts n gets of keys <prefix>0..n-1 on ch, each waiting 15 s; waits
 * for one of them to be answered (a get can only be answered before its
 * key is set by a refusal), then sets every key directly, and checks that
 * exactly one get was refused RESOURCE_EXHAUSTED with a message holding
 * want, and the n - 1 others were answered with their values: n - 1 calls
 * held at once fit the bound, the n-th is one past it. */
static void held_bound_check(tree_t *t, msr_rpc_channel_t *ch, const char *prefix, int n,
                             const char *want)
{
    op_t o[16];
    char key[32];
    MSR_CHECK(n <= 16);
    for (int k = 0; k < n; k++) {
        snprintf(key, sizeof key, "%s%d", prefix, k);
        get_start(ch, t->loop, &o[k], key, 15000);
    }
    uint64_t limit = msr_deadline_in_ms(20000);
    for (int done = 0; !done;) {
        MSR_CHECK_MSG(!msr_deadline_passed(limit), "no get of %d refused in 20 s", n);
        msr_rpc_loop_poll(t->loop, msr_deadline_in_ms(20));
        for (int k = 0; k < n; k++)
            done |= o[k].done;
    }
    for (int k = 0; k < n; k++) {
        snprintf(key, sizeof key, "%s%d", prefix, k);
        set_ok(t->direct, t->loop, key, key);
    }
    ops_wait(t->loop, o, n);
    int refused = 0;
    for (int k = 0; k < n; k++) {
        snprintf(key, sizeof key, "%s%d", prefix, k);
        if (o[k].a.status == MSR_OK) {
            get_check(&o[k], key);
            continue;
        }
        refused++;
        MSR_CHECK_MSG(o[k].a.grpc_code == MSR_RPC_RESOURCE_EXHAUSTED, "get %d: %d %s", k,
                      o[k].a.grpc_code, o[k].a.err);
        MSR_CHECK_MSG(strstr(o[k].a.err, want) != NULL, "get %d: '%s' lacks '%s'", k, o[k].a.err,
                      want);
        msr_rpc_async_cleanup(&o[k].a);
    }
    MSR_CHECK_EQ(refused, 1);
}

/* A relay's host stands for its nodes at the coordinator's bound of held
 * calls per client: with a bound of 2, a relay whose batches have not
 * come yet gets 2 held calls (its host's own), the third refused; once
 * its batch of a subtree of 3 is accepted, its host gets 2 x (3 + 1) = 8,
 * the ninth refused. */
static void test_coord_bound_per_relay_node(void)
{
    tree_t t;
    msr_coord_config_t cfg = {.token = "tok",
                              .job_id = "j",
                              .worker_num = 4,
                              .local_worker_num = 1,
                              .max_restarts = 0,
                              .node_timeout_ms = 600000,
                              .held_limits = {.client_calls = 2}};
    msr_tserved_start(&t.s, &cfg);
    msr_trelay_start(&t.la, t.s.target, "tok", "r", 3);
    MSR_CHECK_OK(msr_rpc_loop_create(&t.loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(t.la.target, "tok", &t.cha));
    MSR_CHECK_OK(msr_rpc_channel_create_own(t.s.target, "tok", &t.direct));
    held_bound_check(&t, t.cha, "before", 3, "held calls of client 127.0.0.1: 2 at most");

    msr_tnode_call_t j;
    memset(&j, 0, sizeof j);
    Msr__JoinRequest jr = MSR__JOIN_REQUEST__INIT;
    jr.protocol_version = MSR_PROTOCOL_VERSION;
    jr.job_id = "j";
    jr.host = "10.0.0.1";
    jr.pid = 101;
    jr.worker_num = 4;
    jr.local_worker_num = 1;
    jr.node_rank = -1;
    jr.node_id = j.id;
    msr_tnode_call_start(t.cha, t.loop, &j, MSR_RPC_JOIN, &jr.base);
    msr_tnode_calls_wait(t.loop, &j, 1);
    MSR_CHECK_MSG(j.code == 0, "join through the relay: %d %s", j.code, j.message);
    held_bound_check(&t, t.cha, "after", 9, "held calls of client 127.0.0.1: 8 at most");

    msr_rpc_channel_destroy(t.cha);
    msr_rpc_channel_destroy(t.direct);
    msr_rpc_loop_destroy(t.loop);
    msr_trelay_stop(&t.la);
    msr_tserved_stop(&t.s);
}

/* A relay's own bound on the store calls it forwards at once: with 3, a
 * fourth is refused by the relay, RESOURCE_EXHAUSTED naming the bound,
 * while the coordinator's bound (4,096) is far; the default is the
 * coordinator's bound per client for each node of its subtree, at most
 * its bound in total. */
static void test_relay_forward_bound(void)
{
    tree_t t;
    tree_start(&t);
    MSR_CHECK_EQ(msr_relay_forward_max_default(1), 4096);
    MSR_CHECK_EQ(msr_relay_forward_max_default(32), 131072);
    MSR_CHECK_EQ(msr_relay_forward_max_default(33), 131072);
    msr_relay_server_limit(t.la.server, 3);
    held_bound_check(&t, t.cha, "fw", 4, "relay leaf-a forwards at most 3 store calls at once");
    msr_relay_server_limit(t.la.server, 0); /* the default again: 4 fit */
    op_t o[4];
    for (int k = 0; k < 4; k++) {
        char key[16];
        snprintf(key, sizeof key, "again%d", k);
        get_start(t.cha, t.loop, &o[k], key, 15000);
    }
    forwarding_wait(t.loop, &t.la, 4);
    for (int k = 0; k < 4; k++) {
        char key[16];
        snprintf(key, sizeof key, "again%d", k);
        set_ok(t.direct, t.loop, key, key);
    }
    ops_wait(t.loop, o, 4);
    for (int k = 0; k < 4; k++) {
        char key[16];
        snprintf(key, sizeof key, "again%d", k);
        get_check(&o[k], key);
    }
    tree_stop(&t);
}

/* ---- fetches answered from the subtree ---- */

/* Publishes entries first.. first + n - 1 of name, each value "<tag><index>"
 * (generation gen), through ch; the status. */
static msr_status_t publish(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, int32_t gen,
                            const char *name, uint32_t first, uint32_t n, const char *tag)
{
    Msr__Contribution c[8], *cp[8];
    char val[8][32];
    MSR_CHECK(n <= 8);
    for (uint32_t i = 0; i < n; i++) {
        msr__contribution__init(&c[i]);
        c[i].index = first + i;
        snprintf(val[i], sizeof val[i], "%s%u", tag, first + i);
        c[i].data.data = (uint8_t *)val[i];
        c[i].data.len = strlen(val[i]);
        cp[i] = &c[i];
    }
    Msr__PublishRequest r = MSR__PUBLISH_REQUEST__INIT;
    r.generation = gen;
    r.name = (char *)name;
    r.entries = cp;
    r.n_entries = n;
    op_t o;
    op_start(ch, loop, &o, MSR_RPC_PUBLISH, &r.base);
    ops_wait(loop, &o, 1);
    msr_status_t st = o.a.status;
    msr_rpc_async_cleanup(&o.a);
    return st;
}

/* Fetches indices[0..n) of name through ch; want: the values in order,
 * joined with ',' (NULL: the fetch must fail). */
static void fetch_check(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, int32_t gen, const char *name,
                        const uint32_t *indices, size_t n, const char *want)
{
    Msr__FetchRequest r = MSR__FETCH_REQUEST__INIT;
    r.generation = gen;
    r.name = (char *)name;
    r.indices = (uint32_t *)indices;
    r.n_indices = n;
    op_t o;
    op_start(ch, loop, &o, MSR_RPC_FETCH, &r.base);
    ops_wait(loop, &o, 1);
    if (want == NULL) {
        MSR_CHECK_MSG(o.a.status != MSR_OK, "fetch of %s answered", name);
        msr_rpc_async_cleanup(&o.a);
        return;
    }
    MSR_CHECK_MSG(o.a.status == MSR_OK, "fetch %s: %s", name, o.a.err);
    const Msr__FetchResponse *f = (const Msr__FetchResponse *)o.a.resp;
    MSR_CHECK_EQ(f->n_lengths, n);
    char got[256] = "";
    size_t off = 0, at = 0;
    for (size_t i = 0; i < n; i++) {
        MSR_CHECK(off + f->lengths[i] <= f->data.len && at + f->lengths[i] + 2 < sizeof got);
        if (i)
            got[at++] = ',';
        memcpy(got + at, f->data.data + off, f->lengths[i]);
        at += f->lengths[i];
        off += f->lengths[i];
    }
    got[at] = '\0';
    MSR_CHECK_MSG(strcmp(got, want) == 0, "fetch %s: '%s', want '%s'", name, got, want);
    msr_rpc_async_cleanup(&o.a);
}

static uint64_t answered(const msr_trelay_t *r)
{
    uint64_t n;
    msr_relay_server_fetches(r->server, &n, NULL);
    return n;
}

static uint64_t kept_bytes(const msr_trelay_t *r)
{
    uint64_t n;
    msr_relay_server_fetches(r->server, NULL, &n);
    return n;
}

/* Entries published under leaf a: a's fetch is answered by leaf a, b's
 * by the middle relay, in the order asked, the coordinator serving no
 * Fetch; a fetch of one entry more (published at the coordinator) goes
 * up whole; a Set, a Delete and an Add of an entry's key through the
 * relays drop it there, so its next fetch gets the coordinator's value;
 * a Publish the coordinator refuses (another generation) is not kept. */
static void test_fetch_from_subtree(void)
{
    tree_t t;
    tree_start(&t);
    MSR_CHECK_OK(publish(t.cha, t.loop, 0, "addr", 0, 3, "a"));
    MSR_CHECK_OK(publish(t.direct, t.loop, 0, "addr", 3, 1, "d"));
    uint64_t coord = msr_tcoord_served(t.s.target, "Fetch");
    uint32_t idx[] = {2, 0, 1, 3};
    fetch_check(t.cha, t.loop, 0, "addr", idx, 3, "a2,a0,a1");
    MSR_CHECK_EQ(answered(&t.la), 1);
    fetch_check(t.chb, t.loop, 0, "addr", idx + 1, 2, "a0,a1");
    MSR_CHECK_EQ(answered(&t.lb), 0);
    MSR_CHECK_EQ(answered(&t.mid), 1);
    MSR_CHECK_EQ(msr_tcoord_served(t.s.target, "Fetch"), coord);

    /* one entry not kept: the whole fetch goes up */
    fetch_check(t.cha, t.loop, 0, "addr", idx, 4, "a2,a0,a1,d3");
    MSR_CHECK_EQ(answered(&t.la), 1);
    MSR_CHECK_EQ(answered(&t.mid), 1);
    MSR_CHECK_EQ(msr_tcoord_served(t.s.target, "Fetch"), coord + 1);

    /* writes of an entry's key through a relay drop it there */
    set_ok(t.cha, t.loop, "addr/1", "s1");
    fetch_check(t.cha, t.loop, 0, "addr", idx + 2, 1, "s1");
    MSR_CHECK_EQ(msr_tcoord_served(t.s.target, "Fetch"), coord + 2);
    Msr__DeleteRequest d = MSR__DELETE_REQUEST__INIT;
    d.key = "addr/2";
    op_t o;
    op_start(t.chb, t.loop, &o, MSR_RPC_DELETE, &d.base);
    ops_wait(t.loop, &o, 1);
    MSR_CHECK_MSG(o.a.status == MSR_OK, "delete: %s", o.a.err);
    msr_rpc_async_cleanup(&o.a);
    fetch_check(t.chb, t.loop, 0, "addr", idx, 1, NULL); /* the mid relay dropped it */
    MSR_CHECK_EQ(answered(&t.mid), 1);
    /* an Add (refused: the value is no number) drops it too */
    Msr__AddRequest a = MSR__ADD_REQUEST__INIT;
    a.key = "addr/0";
    a.delta = 5;
    op_start(t.cha, t.loop, &o, MSR_RPC_ADD, &a.base);
    ops_wait(t.loop, &o, 1);
    msr_rpc_async_cleanup(&o.a);
    coord = msr_tcoord_served(t.s.target, "Fetch");
    fetch_check(t.cha, t.loop, 0, "addr", idx + 1, 1, "a0");
    MSR_CHECK_EQ(answered(&t.la), 1);
    MSR_CHECK_EQ(msr_tcoord_served(t.s.target, "Fetch"), coord + 1);
    /* published again: kept again, answered at the leaf */
    MSR_CHECK_OK(publish(t.cha, t.loop, 0, "addr", 0, 2, "b"));
    fetch_check(t.cha, t.loop, 0, "addr", idx + 1, 2, "b0,b1");
    MSR_CHECK_EQ(answered(&t.la), 2);

    /* refused upstream: not kept (its fetch refused by the coordinator) */
    coord = msr_tcoord_served(t.s.target, "Fetch");
    MSR_CHECK(publish(t.cha, t.loop, 7, "late", 0, 1, "x") != MSR_OK);
    fetch_check(t.cha, t.loop, 7, "late", idx + 1, 1, NULL);
    MSR_CHECK_EQ(answered(&t.la), 2);
    MSR_CHECK_EQ(msr_tcoord_served(t.s.target, "Fetch"), coord + 1);
    tree_stop(&t);
}

/* The bound on what a relay keeps, at exactly two entries' cost and one
 * byte short of it: two entries kept, then one; 0 keeps none. */
static void test_fetch_bound(void)
{
    tree_t t;
    tree_start(&t);
    /* each entry of "bnd": key "0/bnd/K" (7 bytes) and value "vK" (2) */
    const uint64_t cost = 9;
    uint32_t idx[] = {0, 1, 2};
    msr_relay_server_fetch_limit(t.la.server, 2 * cost);
    MSR_CHECK_OK(publish(t.cha, t.loop, 0, "bnd", 0, 3, "v"));
    MSR_CHECK_EQ(kept_bytes(&t.la), 2 * cost);
    fetch_check(t.cha, t.loop, 0, "bnd", idx, 2, "v0,v1");
    MSR_CHECK_EQ(answered(&t.la), 1);
    fetch_check(t.cha, t.loop, 0, "bnd", idx + 2, 1, "v2"); /* the middle relay's */
    MSR_CHECK_EQ(answered(&t.la), 1);
    MSR_CHECK_EQ(answered(&t.mid), 1);

    msr_relay_server_fetch_limit(t.la.server, 2 * cost - 1);
    MSR_CHECK_OK(publish(t.cha, t.loop, 0, "bnd", 0, 3, "v")); /* dropped, kept anew */
    MSR_CHECK_EQ(kept_bytes(&t.la), cost);
    fetch_check(t.cha, t.loop, 0, "bnd", idx, 2, "v0,v1");
    MSR_CHECK_EQ(answered(&t.la), 1);

    msr_relay_server_fetch_limit(t.la.server, 0);
    MSR_CHECK_OK(publish(t.cha, t.loop, 0, "bnd", 0, 3, "v"));
    MSR_CHECK_EQ(kept_bytes(&t.la), 0);
    tree_stop(&t);
}

static const msr_test_t tests[] = {
    {"tree_store", test_tree_store, 60},
    {"same_errors", test_same_errors, 60},
    {"connections_at_relays", test_connections_at_relays, 60},
    {"relay_killed_mid_call", test_relay_killed_mid_call, 60},
    {"node_gives_up", test_node_gives_up, 60},
    {"proxy_falls_back", test_proxy_falls_back, 60},
    {"coord_bound_per_relay_node", test_coord_bound_per_relay_node, 60},
    {"relay_forward_bound", test_relay_forward_bound, 60},
    {"fetch_from_subtree", test_fetch_from_subtree, 60},
    {"fetch_bound", test_fetch_bound, 60},
};

int main(int argc, char **argv)
{
    snprintf(sock_path, sizeof sock_path, "/tmp/msr-relay-store-%d.sock", (int)getpid());
    int rc = MSR_TEST_MAIN(argc, argv, tests); /* gRPC starts in each test's process */
    unlink(sock_path);
    return rc;
}
