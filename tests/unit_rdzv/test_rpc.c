/* Tests of the coordinator over real gRPC on loopback: token checks, clear
 * errors for an unreachable coordinator and for deadlines, messages larger
 * than gRPC's default limit, and the bound on connections per address that
 * made no call. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "cluster/server.h"
#include "base/alloc.h"
#include "rendezvous/rpc.h"
#include "rendezvous/rpc_accept.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fixtures.h"

/* A coordinator for a 1-node, 1-worker job, already running. */
static void start(msr_tserved_t *s, const char *token)
{
    msr_coord_config_t cfg = {
        .token = token, .job_id = "j", .worker_num = 1, .local_worker_num = 1, .max_restarts = 0};
    msr_tserved_start(s, &cfg);
}

static msr_status_t set_key(msr_rpc_channel_t *ch, const char *key, size_t len)
{
    Msr__SetRequest r = MSR__SET_REQUEST__INIT;
    r.key = (char *)key;
    uint8_t *v = calloc(1, len ? len : 1);
    r.value.data = v;
    r.value.len = len;
    ProtobufCMessage *resp = NULL;
    msr_status_t st = msr_rpc_call(ch, MSR_RPC_SET, &r.base, msr_deadline_in_ms(10000), 1, &resp);
    msr_rpc_message_free(resp);
    free(v);
    return st;
}

static void test_token(void)
{
    msr_tserved_t s;
    start(&s, "secret");
    msr_rpc_channel_t *good, *bad, *none;
    MSR_CHECK_OK(msr_rpc_channel_create(s.target, "secret", &good));
    MSR_CHECK_OK(msr_rpc_channel_create(s.target, "wrong", &bad));
    MSR_CHECK_OK(msr_rpc_channel_create(s.target, NULL, &none));
    MSR_CHECK_OK(set_key(good, "k", 3));
    MSR_CHECK_STATUS(set_key(bad, "k", 3), MSR_ERR_PERMISSION);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "token") != NULL, "%s", msr_err_msg());
    MSR_CHECK_STATUS(set_key(none, "k", 3), MSR_ERR_PERMISSION);
    msr_rpc_channel_destroy(good);
    msr_rpc_channel_destroy(bad);
    msr_rpc_channel_destroy(none);
    msr_tserved_stop(&s);
}

static void test_unreachable(void)
{
    /* a port nobody listens on: find one by starting and stopping a server */
    msr_tserved_t s;
    start(&s, "t");
    char target[64];
    snprintf(target, sizeof target, "%s", s.target);
    msr_tserved_stop(&s);
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_channel_create(target, "t", &ch));
    Msr__StatusRequest r = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    uint64_t t0 = msr_now_ns();
    msr_status_t st = msr_rpc_call(ch, MSR_RPC_STATUS, &r.base, msr_deadline_in_ms(5000), 0, &resp);
    MSR_CHECK_STATUS(st, MSR_ERR_UNREACHABLE);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "is not running (connection refused)") &&
                      strstr(msr_err_msg(), target),
                  "%s", msr_err_msg());
    MSR_CHECK(msr_now_ns() - t0 < 3000000000ull); /* fails fast without wait_for_ready */
    /* with wait_for_ready it waits for its deadline */
    st = msr_rpc_call(ch, MSR_RPC_STATUS, &r.base, msr_deadline_in_ms(300), 1, &resp);
    MSR_CHECK_STATUS(st, MSR_ERR_TIMEOUT);
    msr_rpc_channel_destroy(ch);
}

static void test_wait_deadline(void)
{
    msr_tserved_t s;
    start(&s, "t");
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_channel_create(s.target, "t", &ch));
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "absent";
    g.wait_ms = 200;
    ProtobufCMessage *resp = NULL;
    uint64_t t0 = msr_now_ns();
    msr_status_t st = msr_rpc_call(ch, MSR_RPC_GET, &g.base, msr_deadline_in_ms(5000), 1, &resp);
    uint64_t took = msr_now_ns() - t0;
    MSR_CHECK_STATUS(st, MSR_ERR_TIMEOUT);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "'absent'") != NULL, "%s", msr_err_msg());
    MSR_CHECK(took >= 190000000ull && took < 3000000000ull);
    /* a client deadline shorter than the wait ends the call at the deadline */
    g.wait_ms = 60000;
    t0 = msr_now_ns();
    st = msr_rpc_call(ch, MSR_RPC_GET, &g.base, msr_deadline_in_ms(300), 1, &resp);
    MSR_CHECK_STATUS(st, MSR_ERR_TIMEOUT);
    MSR_CHECK(msr_now_ns() - t0 < 3000000000ull);
    msr_rpc_channel_destroy(ch);
    msr_tserved_stop(&s);
}

/* A Get of an absent key waiting wait_ms on ch, to its end: its code. */
static int get_absent(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, uint32_t wait_ms)
{
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "absent";
    g.wait_ms = wait_ms;
    msr_tnode_call_t c;
    msr_tnode_call_start(ch, loop, &c, MSR_RPC_GET, &g.base);
    msr_tnode_calls_wait(loop, &c, 1);
    return c.code;
}

/* A call the coordinator holds is watched for its client's going away,
 * and only such a call (one answered at once takes the close with its
 * answer): with one held call allowed per client, a held Get fills the
 * client's share (a second is refused), and once its client cancels it
 * the share is free again at once, not when its minute is up. Calls
 * answered at once, many in a row, leave no share taken. */
static void test_held_call_watched(void)
{
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "j",
                              .worker_num = 1,
                              .local_worker_num = 1,
                              .max_restarts = 0,
                              .held_limits = {.client_calls = 1}};
    msr_tserved_t s;
    msr_tserved_start(&s, &cfg);
    msr_rpc_loop_t *loop;
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    MSR_CHECK_OK(msr_rpc_channel_create(s.target, "t", &ch));
    for (int i = 0; i < 200; i++)
        MSR_CHECK_OK(set_key(ch, "k", 3)); /* answered at once: none held */
    MSR_CHECK_EQ(get_absent(ch, loop, 50), GRPC_STATUS_DEADLINE_EXCEEDED);

    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "absent";
    g.wait_ms = 60000;
    msr_tnode_call_t held;
    msr_tnode_call_start(ch, loop, &held, MSR_RPC_GET, &g.base);
    /* held once a second one is refused for the client's share */
    uint64_t deadline = msr_deadline_in_ms(10000);
    int code;
    while ((code = get_absent(ch, loop, 20)) == GRPC_STATUS_DEADLINE_EXCEEDED &&
           msr_now_ns() < deadline)
        ;
    MSR_CHECK_EQ(code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    MSR_CHECK(!held.done);
    msr_rpc_async_cancel(&held.a);
    msr_tnode_calls_wait(loop, &held, 1);
    MSR_CHECK_EQ(held.code, GRPC_STATUS_CANCELLED);
    /* the share comes back as soon as the coordinator sees the cancel */
    deadline = msr_deadline_in_ms(10000);
    while ((code = get_absent(ch, loop, 20)) == GRPC_STATUS_RESOURCE_EXHAUSTED &&
           msr_now_ns() < deadline)
        ;
    MSR_CHECK_EQ(code, GRPC_STATUS_DEADLINE_EXCEEDED);
    msr_rpc_channel_destroy(ch);
    msr_rpc_loop_destroy(loop);
    msr_tserved_stop(&s);
}

static void test_large_messages(void)
{
    msr_tserved_t s;
    start(&s, "t");
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_channel_create(s.target, "t", &ch));
    size_t big = 12u << 20; /* three times gRPC's default receive limit */
    MSR_CHECK_OK(set_key(ch, "big", big));
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "big";
    ProtobufCMessage *resp = NULL;
    MSR_CHECK_OK(msr_rpc_call(ch, MSR_RPC_GET, &g.base, msr_deadline_in_ms(10000), 1, &resp));
    MSR_CHECK_EQ(((Msr__GetResponse *)resp)->value.len, big);
    msr_rpc_message_free(resp);
    msr_rpc_channel_destroy(ch);
    msr_tserved_stop(&s);
}

/* A request larger than its method's limit is refused with
 * RESOURCE_EXHAUSTED, naming the limit, and the server carries on. */
static void test_request_limits(void)
{
    msr_tserved_t s;
    start(&s, "t");
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_channel_create(s.target, "t", &ch));
    /* Get carries no value: 64 KiB at most */
    size_t n = MSR_RPC_SMALL_REQUEST_MAX + 100;
    char *key = malloc(n + 1);
    MSR_CHECK(key != NULL);
    memset(key, 'k', n);
    key[n] = '\0';
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = key;
    ProtobufCMessage *resp = NULL;
    MSR_CHECK_STATUS(msr_rpc_call(ch, MSR_RPC_GET, &g.base, msr_deadline_in_ms(10000), 1, &resp),
                     MSR_ERR_REFUSED);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "exceeds the limit") != NULL, "%s", msr_err_msg());
    free(key);
    /* a Set over the server's message limit */
    MSR_CHECK_STATUS(set_key(ch, "huge", MSR_RPC_MAX_MESSAGE_DEFAULT + 1), MSR_ERR_REFUSED);
    /* and the server still answers */
    MSR_CHECK_OK(set_key(ch, "small", 10));
    msr_rpc_channel_destroy(ch);
    msr_tserved_stop(&s);
}

/* A raw Set whose key holds a NUL byte ("a\0b" on the wire: a string C
 * reads as "a") is refused INVALID_ARGUMENT, and nothing is written under
 * the key cut at the NUL. The client library packs keys with strlen, so
 * the request is a Contribution, whose wire form is a SetRequest's
 * (field 1 a varint, field 2 length-delimited), sent to Set's path. */
static void test_nul_key(void)
{
    msr_tserved_t s;
    start(&s, "t");
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_channel_create(s.target, "t", &ch));
    static const struct {
        const char *bytes;
        size_t len;
    } keys[] = {{"a\0b", 3}, {"a\0", 2}, {"\0", 1}};
    ProtobufCMessage *resp = NULL;
    for (size_t i = 0; i < MSR_ARRAY_SIZE(keys); i++) {
        Msr__Contribution raw = MSR__CONTRIBUTION__INIT;
        raw.data.data = (uint8_t *)keys[i].bytes;
        raw.data.len = keys[i].len;
        MSR_CHECK_STATUS(msr_rpc_call_path(ch, "/msr.Store/Set", &raw.base,
                                           &msr__set_response__descriptor,
                                           msr_deadline_in_ms(10000), 1, &resp),
                         MSR_ERR_INVALID_ARG);
        MSR_CHECK_MSG(strstr(msr_err_msg(), "key contains a NUL byte") != NULL, "%s",
                      msr_err_msg());
    }
    /* the same bytes without the NUL are a valid Set: the path is right */
    Msr__Contribution plain = MSR__CONTRIBUTION__INIT;
    plain.data.data = (uint8_t *)"ab";
    plain.data.len = 2;
    MSR_CHECK_OK(msr_rpc_call_path(ch, "/msr.Store/Set", &plain.base,
                                   &msr__set_response__descriptor, msr_deadline_in_ms(10000), 1,
                                   &resp));
    msr_rpc_message_free(resp);
    resp = NULL;
    Msr__GetRequest g = MSR__GET_REQUEST__INIT;
    g.key = "a";
    MSR_CHECK_STATUS(msr_rpc_call(ch, MSR_RPC_GET, &g.base, msr_deadline_in_ms(10000), 1, &resp),
                     MSR_ERR_NOT_FOUND);
    g.key = "ab";
    MSR_CHECK_OK(msr_rpc_call(ch, MSR_RPC_GET, &g.base, msr_deadline_in_ms(10000), 1, &resp));
    msr_rpc_message_free(resp);
    msr_rpc_channel_destroy(ch);
    msr_tserved_stop(&s);
}

static void test_port_in_use(void)
{
    msr_tserved_t s;
    start(&s, "t");
    msr_coord_config_t cfg = {.token = "t", .worker_num = 1, .local_worker_num = 1};
    msr_coord_server_t *second = NULL;
    int port = 0;
    MSR_CHECK_STATUS(msr_coord_server_create(s.target, &cfg, &port, &second), MSR_ERR_ADDR_IN_USE);
    msr_tserved_stop(&s);
}

static void fail_all(void *arg, msr_rpc_call_t *call, msr_rpc_method_t method,
                     ProtobufCMessage *req)
{
    (void)arg;
    (void)method;
    (void)req;
    msr_rpc_call_fail(call, MSR_RPC_UNIMPLEMENTED, "not served here");
}

/* Without the acceptor (no connection bounds: gRPC's own listener, as
 * with TLS) a second server on a taken port fails too: gRPC would
 * otherwise share the port (SO_REUSEPORT is its default). */
static void test_port_in_use_grpc_listener(void)
{
    msr_rpc_loop_t *loop = NULL;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    msr_rpc_server_config_t cfg = {
        .address = "127.0.0.1:0", .token = "t", .handler = fail_all, .log_name = "test"};
    msr_rpc_server_t *first = NULL, *second = NULL;
    int port = 0;
    MSR_CHECK_OK(msr_rpc_server_create(loop, &cfg, &port, &first));
    MSR_CHECK(port > 0);
    char address[32];
    snprintf(address, sizeof address, "127.0.0.1:%d", port);
    cfg.address = address;
    MSR_CHECK_STATUS(msr_rpc_server_create(loop, &cfg, NULL, &second), MSR_ERR_ADDR_IN_USE);
    msr_rpc_server_destroy(first);
    msr_rpc_loop_destroy(loop);
}

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    MSR_CHECK(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    MSR_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    return fd;
}

/* Whether the server closed fd: 1 (end of file or reset), 0 (open). */
static int peer_closed(int fd)
{
    char byte;
    ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* At most max_unauth_per_host connections from one address that have made
 * no call: exactly that many are held, the one past it is closed at once
 * (the acceptor takes them in the order they connected, so the ones
 * before were held when it is closed). */
static void test_unauth_per_host(void)
{
    enum { PER_HOST = 3 };
    msr_rpc_loop_t *loop = NULL;
    MSR_CHECK_OK(msr_rpc_loop_create(&loop));
    msr_rpc_server_config_t cfg = {.address = "127.0.0.1:0",
                                   .token = "t",
                                   .handler = fail_all,
                                   .log_name = "test",
                                   .max_connections = 16,
                                   .max_unauth_per_host = PER_HOST,
                                   .unauth_grace_ms = 60000};
    msr_rpc_server_t *server = NULL;
    int port = 0;
    MSR_CHECK_OK(msr_rpc_server_create(loop, &cfg, &port, &server));
    int fds[PER_HOST + 1];
    for (int i = 0; i <= PER_HOST; i++)
        fds[i] = connect_to(port);
    /* the one past the bound: closed, well before any grace period */
    uint64_t deadline = msr_deadline_in_ms(5000);
    while (!peer_closed(fds[PER_HOST]) && msr_now_ns() < deadline) {
        struct pollfd p = {.fd = fds[PER_HOST], .events = POLLIN | POLLRDHUP};
        poll(&p, 1, 100);
    }
    MSR_CHECK_MSG(peer_closed(fds[PER_HOST]), "connection %d of %d per host was not closed",
                  PER_HOST + 1, PER_HOST);
    for (int i = 0; i < PER_HOST; i++)
        MSR_CHECK_MSG(!peer_closed(fds[i]), "connection %d of %d was closed", i + 1, PER_HOST);
    for (int i = 0; i <= PER_HOST; i++)
        close(fds[i]);
    msr_rpc_server_destroy(server);
    msr_rpc_loop_destroy(loop);
}

/* A started gRPC server with no methods, for the acceptor alone. */
typedef struct bare {
    grpc_completion_queue *cq;
    grpc_server *server;
} bare_t;

static void bare_start(bare_t *b)
{
    msr_rpc_library_ref();
    b->cq = grpc_completion_queue_create_for_next(NULL);
    b->server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(b->server, b->cq, NULL);
    grpc_server_start(b->server);
}

static void bare_stop(bare_t *b)
{
    grpc_server_shutdown_and_notify(b->server, b->cq, b);
    grpc_server_cancel_all_calls(b->server);
    grpc_event ev;
    do
        ev = grpc_completion_queue_next(b->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    while (ev.type != GRPC_OP_COMPLETE || ev.tag != b);
    grpc_server_destroy(b->server);
    grpc_completion_queue_shutdown(b->cq);
    while (grpc_completion_queue_next(b->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(b->cq);
    msr_rpc_library_unref();
}

/* The acceptor's limits at their least (1 each) taken, 0 refused; an
 * address in brackets, "[]" for every address; each allocation failing
 * in turn refuses, leaving every descriptor as it was (0 among them). */
static void test_acceptor_config(void)
{
    bare_t b;
    bare_start(&b);
    msr_rpc_acceptor_t *a = NULL;
    int port = 0;
    const msr_rpc_acceptor_config_t bad[] = {
        {"127.0.0.1:0", 0, 1, 1, "t"},
        {"127.0.0.1:0", 1, 0, 1, "t"},
        {"127.0.0.1:0", 1, 1, 0, "t"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        MSR_CHECK_STATUS(msr_rpc_acceptor_start(b.server, &bad[i], &port, &a), MSR_ERR_INVALID_ARG);
    const char *good[] = {"127.0.0.1:0", "[127.0.0.1]:0", "[]:0"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        msr_rpc_acceptor_config_t c = {good[i], 1, 1, 1, "t"};
        port = 0;
        MSR_CHECK_MSG(msr_rpc_acceptor_start(b.server, &c, &port, &a) == MSR_OK, "%s", good[i]);
        MSR_CHECK(port > 0);
        msr_rpc_acceptor_destroy(a);
    }
    /* out of memory at each allocation: refused, nothing closed that was
     * not its own (fd 0 too, which a slot of -1 never names) */
    int zero_was = fcntl(0, F_GETFD) >= 0;
    msr_rpc_acceptor_config_t c = {"127.0.0.1:0", 4, 1, 1, "t"};
    for (long i = 0;; i++) {
        MSR_CHECK(i < 16);
        msr_alloc_fail_at(i);
        msr_status_t st = msr_rpc_acceptor_start(b.server, &c, &port, &a);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        if (!failed) {
            MSR_CHECK_OK(st);
            msr_rpc_acceptor_destroy(a);
            break;
        }
        MSR_CHECK_MSG(st == MSR_ERR_NO_MEMORY, "allocation %ld failed: %s", i, msr_status_str(st));
        MSR_CHECK_MSG((fcntl(0, F_GETFD) >= 0) == zero_was, "allocation %ld: fd 0 closed", i);
    }
    bare_stop(&b);
}

/* msr_rpc_acceptor_peer: the one connection made is found, under the name
 * gRPC gives it ("fd:N"), with its address; no other name is. With
 * descriptor 0 free, the connection takes it. */
static void check_peer_lookup(int close_zero)
{
    bare_t b;
    bare_start(&b);
    msr_rpc_acceptor_t *a = NULL;
    int port = 0;
    msr_rpc_acceptor_config_t c = {"127.0.0.1:0", 4, 4, 60000, "t"};
    MSR_CHECK_OK(msr_rpc_acceptor_start(b.server, &c, &port, &a));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), saved = -1;
    MSR_CHECK(fd > 0);
    if (close_zero) { /* free for the acceptor's accept, not this socket */
        saved = fcntl(0, F_DUPFD_CLOEXEC, 100);
        close(0);
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    MSR_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    MSR_CHECK(getsockname(fd, (struct sockaddr *)&me, &ml) == 0);
    char want[64], out[128];
    snprintf(want, sizeof want, "ipv4:127.0.0.1:%d", ntohs(me.sin_port));
    int found = 0, at = -1;
    uint64_t deadline = msr_deadline_in_ms(10000);
    while (found == 0 && msr_now_ns() < deadline) {
        for (int n = 0; n < 1024; n++) {
            char peer[32];
            snprintf(peer, sizeof peer, "fd:%d", n);
            if (msr_rpc_acceptor_peer(a, peer, out, sizeof out) == 0) {
                found++;
                at = n;
                MSR_CHECK_STR(out, want);
            }
        }
        if (found == 0)
            poll(NULL, 0, 10);
    }
    MSR_CHECK_MSG(found == 1, "%d names found", found);
    MSR_CHECK(msr_rpc_acceptor_peer(a, "ipv4:127.0.0.1:1", out, sizeof out) == -1);
    if (close_zero) {
        MSR_CHECK_EQ(at, 0);
        /* its end is seen (slot 0 freed): a new connection is held */
        close(fd);
        deadline = msr_deadline_in_ms(10000);
        while (msr_rpc_acceptor_peer(a, "fd:0", out, sizeof out) == 0 && msr_now_ns() < deadline)
            poll(NULL, 0, 10);
        MSR_CHECK(msr_rpc_acceptor_peer(a, "fd:0", out, sizeof out) == -1);
        MSR_CHECK(dup2(saved, 0) == 0);
        close(saved);
    } else {
        close(fd);
    }
    msr_rpc_acceptor_destroy(a);
    bare_stop(&b);
}

static void test_acceptor_peer(void)
{
    check_peer_lookup(0);
    check_peer_lookup(1);
}

/* The coordinator's server keeps no channelz records: they cost every
 * connection and call (a socket node, call counters, timestamps) and
 * nothing reads them. A server that kept them would be listed. */
static void test_no_channelz(void)
{
    msr_tserved_t s;
    start(&s, "t");
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_channel_create(s.target, "t", &ch));
    MSR_CHECK_OK(set_key(ch, "k", 3)); /* a connection and a call */
    char *servers = grpc_channelz_get_servers(0);
    MSR_CHECK(servers != NULL);
    int listed = strstr(servers, "\"server\"") != NULL;
    MSR_CHECK_MSG(!listed, "channelz lists a server: %s", servers);
    gpr_free(servers);
    msr_rpc_channel_destroy(ch);
    msr_tserved_stop(&s);
}

static const msr_test_t tests[] = {
    {"token", test_token, 30},
    {"unreachable", test_unreachable, 30},
    {"wait_deadline", test_wait_deadline, 30},
    {"held_call_watched", test_held_call_watched, 60},
    {"large_messages", test_large_messages, 30},
    {"request_limits", test_request_limits, 60},
    {"port_in_use", test_port_in_use, 30},
    {"port_in_use_grpc_listener", test_port_in_use_grpc_listener, 30},
    {"nul_key", test_nul_key, 30},
    {"unauth_per_host", test_unauth_per_host, 30},
    {"acceptor_config", test_acceptor_config, 30},
    {"acceptor_peer", test_acceptor_peer, 30},
    {"no_channelz", test_no_channelz, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
