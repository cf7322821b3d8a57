/* The worker channel (rendezvous/wchan.h) on a real unix socket: calls,
 * the token, a caller that leaves, and bad frames at their bounds and one
 * past, answered with an error and never a crash. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "rendezvous/rpc.h"
#include "rendezvous/wchan.h"
#include "tests/runner.h"

#define TOKEN "job-token-1234"

static atomic_int barrier_gone;

/* Get answers its key as the value; Set answers how many bytes came (as a
 * Get's value); Barrier waits until its caller leaves. */
static void handler(void *arg, msr_wchan_conn_t *conn, msr_rpc_method_t method, const uint8_t *req,
                    size_t len, uint64_t deadline, int *code_p, uint8_t **resp_p,
                    size_t *resp_len_p, char *msg, size_t msglen)
{
    (void)arg;
    (void)deadline;
    char text[64] = "";
    if (method == MSR_RPC_BARRIER) {
        uint64_t limit = msr_deadline_in_ms(10000); /* held past the caller's deadline */
        while (!msr_wchan_conn_gone(conn) && !msr_deadline_passed(limit))
            msr_sleep_ms(5);
        atomic_store(&barrier_gone, msr_wchan_conn_gone(conn));
        *code_p = MSR_RPC_DEADLINE_EXCEEDED;
        snprintf(msg, msglen, "barrier: deadline passed");
        return;
    }
    Msr__GetResponse resp = MSR__GET_RESPONSE__INIT;
    if (method == MSR_RPC_GET) {
        Msr__GetRequest *r = (Msr__GetRequest *)msr_rpc_request_unpack(method, req, len);
        if (r == NULL) {
            *code_p = MSR_RPC_INVALID_ARGUMENT;
            snprintf(msg, msglen, "malformed Get");
            return;
        }
        snprintf(text, sizeof text, "%s", r->key);
        msr_rpc_message_free(&r->base);
        if (strcmp(text, "missing") == 0) {
            *code_p = MSR_RPC_NOT_FOUND;
            snprintf(msg, msglen, "key missing not found");
            return;
        }
    } else {
        snprintf(text, sizeof text, "%zu", len);
    }
    resp.value.data = (uint8_t *)text;
    resp.value.len = strlen(text);
    size_t n = protobuf_c_message_get_packed_size(&resp.base);
    *resp_p = msr_malloc(n);
    protobuf_c_message_pack(&resp.base, *resp_p);
    *resp_len_p = n;
    *code_p = 0;
}

typedef struct fixture {
    char dir[32], path[72];
    msr_wchan_server_t *server;
} fixture_t;

static void fixture_start_max(fixture_t *f, const char *token, int max_conns)
{
    snprintf(f->dir, sizeof f->dir, "/tmp/msr-wchan-XXXXXX");
    MSR_CHECK(mkdtemp(f->dir) != NULL);
    snprintf(f->path, sizeof f->path, "%s/a.sock.w", f->dir);
    MSR_CHECK_OK(msr_wchan_server_create(f->path, token, max_conns, handler, NULL, &f->server));
}

static void fixture_start(fixture_t *f, const char *token)
{
    fixture_start_max(f, token, 16);
}

static void fixture_stop(fixture_t *f)
{
    msr_wchan_server_destroy(f->server);
    MSR_CHECK(access(f->path, F_OK) != 0); /* the socket is removed */
    rmdir(f->dir);
}

static msr_status_t get(msr_wchan_t *w, const char *key, char *out, size_t outlen)
{
    Msr__GetRequest req = MSR__GET_REQUEST__INIT;
    req.key = (char *)key;
    ProtobufCMessage *resp = NULL;
    msr_status_t st = msr_wchan_call(w, MSR_RPC_GET, &req.base, msr_deadline_in_ms(5000), &resp);
    if (st == MSR_OK) {
        Msr__GetResponse *g = (Msr__GetResponse *)resp;
        snprintf(out, outlen, "%.*s", (int)g->value.len, (const char *)g->value.data);
        msr_rpc_message_free(resp);
    }
    return st;
}

static void test_calls(void)
{
    fixture_t f;
    fixture_start(&f, TOKEN);
    msr_wchan_t *w;
    MSR_CHECK_OK(msr_wchan_create(f.path, TOKEN, &w));
    char v[64];
    for (int i = 0; i < 3; i++) { /* the connection is kept and used again */
        MSR_CHECK_OK(get(w, "a/b", v, sizeof v));
        MSR_CHECK_STR(v, "a/b");
    }
    MSR_CHECK_STATUS(get(w, "missing", v, sizeof v), MSR_ERR_NOT_FOUND);
    MSR_CHECK_STR(msr_err_msg(), "key missing not found");
    MSR_CHECK_OK(get(w, "after", v, sizeof v)); /* an error keeps the stream in step */
    msr_wchan_destroy(w);
    fixture_stop(&f);
}

static void test_token(void)
{
    fixture_t f;
    fixture_start(&f, TOKEN);
    msr_wchan_t *w;
    char v[64];
    MSR_CHECK_OK(msr_wchan_create(f.path, "job-token-1235", &w));
    MSR_CHECK_STATUS(get(w, "k", v, sizeof v), MSR_ERR_PERMISSION);
    msr_wchan_destroy(w);
    MSR_CHECK_OK(msr_wchan_create(f.path, NULL, &w));
    MSR_CHECK_STATUS(get(w, "k", v, sizeof v), MSR_ERR_PERMISSION);
    msr_wchan_destroy(w);
    fixture_stop(&f);

    /* a token of exactly MSR_WCHAN_TOKEN_MAX bytes, and one past */
    char big[MSR_WCHAN_TOKEN_MAX + 2];
    memset(big, 't', sizeof big - 1);
    big[MSR_WCHAN_TOKEN_MAX] = '\0';
    fixture_start(&f, big);
    MSR_CHECK_OK(msr_wchan_create(f.path, big, &w));
    MSR_CHECK_OK(get(w, "k", v, sizeof v));
    msr_wchan_destroy(w);
    big[MSR_WCHAN_TOKEN_MAX] = 't';
    big[MSR_WCHAN_TOKEN_MAX + 1] = '\0';
    MSR_CHECK_STATUS(msr_wchan_create(f.path, big, &w), MSR_ERR_INVALID_ARG);
    fixture_stop(&f);
}

/* A caller whose deadline passes leaves; the server's handler sees it. */
static void test_caller_leaves(void)
{
    fixture_t f;
    fixture_start(&f, TOKEN);
    msr_wchan_t *w;
    MSR_CHECK_OK(msr_wchan_create(f.path, TOKEN, &w));
    Msr__BarrierRequest req = MSR__BARRIER_REQUEST__INIT;
    req.name = "b";
    ProtobufCMessage *resp = NULL;
    atomic_store(&barrier_gone, 0);
    uint64_t t0 = msr_now_ns();
    MSR_CHECK_STATUS(msr_wchan_call(w, MSR_RPC_BARRIER, &req.base, msr_deadline_in_ms(200), &resp),
                     MSR_ERR_TIMEOUT);
    MSR_CHECK((msr_now_ns() - t0) / 1000000 < 3000);
    uint64_t deadline = msr_deadline_in_ms(10000);
    while (!atomic_load(&barrier_gone) && !msr_deadline_passed(deadline))
        msr_sleep_ms(5);
    MSR_CHECK_MSG(atomic_load(&barrier_gone), "the handler never saw its caller leave");
    msr_wchan_destroy(w);
    fixture_stop(&f);
}

/* ---- raw frames ---- */

static int raw_connect(const fixture_t *f)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    MSR_CHECK(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", f->path);
    MSR_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    return fd;
}

static void raw_send(int fd, uint8_t type, uint8_t code, uint32_t arg, uint32_t len,
                     const void *body, size_t sent)
{
    /* one write: a server that refuses the header and closes must not
     * make the sending of the body fail */
    uint8_t *buf = malloc(MSR_WCHAN_HEADER + sent);
    MSR_CHECK(buf != NULL);
    msr_wchan_header_t h = {len, type, code, arg};
    msr_wchan_header_pack(&h, buf);
    if (sent > 0)
        memcpy(buf + MSR_WCHAN_HEADER, body, sent);
    MSR_CHECK_OK(msr_wchan_write_all(fd, buf, MSR_WCHAN_HEADER + sent));
    free(buf);
}

/* Reads a frame's header and body (its first outlen - 1 bytes as text). */
static msr_wchan_header_t raw_recv(int fd, char *out, size_t outlen)
{
    uint8_t hb[MSR_WCHAN_HEADER];
    msr_wchan_header_t h;
    MSR_CHECK_OK(msr_wchan_read_all(fd, hb, sizeof hb, msr_deadline_in_ms(10000)));
    MSR_CHECK_OK(msr_wchan_header_unpack(hb, &h));
    char *body = malloc((size_t)h.len + 1);
    MSR_CHECK(body != NULL);
    MSR_CHECK_OK(msr_wchan_read_all(fd, body, h.len, msr_deadline_in_ms(10000)));
    body[h.len] = '\0';
    snprintf(out, outlen, "%s", body);
    free(body);
    return h;
}

/* The server closed the connection (after answering a bad frame). */
static void raw_check_closed(int fd)
{
    uint8_t b;
    MSR_CHECK_STATUS(msr_wchan_read_all(fd, &b, 1, msr_deadline_in_ms(10000)), MSR_ERR_TRUNCATED);
    close(fd);
}

static int raw_hello(const fixture_t *f)
{
    int fd = raw_connect(f);
    raw_send(fd, MSR_WCHAN_HELLO, 0, MSR_WCHAN_VERSION, strlen(TOKEN), TOKEN, strlen(TOKEN));
    char msg[256];
    msr_wchan_header_t h = raw_recv(fd, msg, sizeof msg);
    MSR_CHECK_EQ(h.type, MSR_WCHAN_WELCOME);
    MSR_CHECK_EQ(h.code, 0);
    return fd;
}

/* A CALL of len body bytes (all sent) and its REPLY. */
static msr_wchan_header_t raw_call(int fd, uint8_t method, uint32_t len, char *msg, size_t msglen)
{
    uint8_t *body = calloc(1, len ? len : 1);
    MSR_CHECK(body != NULL);
    raw_send(fd, MSR_WCHAN_CALL, method, 5000, len, body, len);
    free(body);
    msr_wchan_header_t h = raw_recv(fd, msg, msglen);
    MSR_CHECK_EQ(h.type, MSR_WCHAN_REPLY);
    return h;
}

static void test_frame_bounds(void)
{
    fixture_t f;
    fixture_start(&f, TOKEN);
    char msg[256];
    /* a value-carrying request of exactly MSR_WCHAN_CALL_MAX bytes is taken */
    int fd = raw_hello(&f);
    msr_wchan_header_t h = raw_call(fd, MSR_RPC_SET, (uint32_t)MSR_WCHAN_CALL_MAX, msg, sizeof msg);
    MSR_CHECK_EQ(h.code, 0);
    /* a small method's request of exactly MSR_RPC_SMALL_REQUEST_MAX bytes */
    h = raw_call(fd, MSR_RPC_DELETE, (uint32_t)MSR_RPC_SMALL_REQUEST_MAX, msg, sizeof msg);
    MSR_CHECK_EQ(h.code, 0);
    /* one past: refused from the header alone, the body never read */
    raw_send(fd, MSR_WCHAN_CALL, MSR_RPC_DELETE, 5000, (uint32_t)MSR_RPC_SMALL_REQUEST_MAX + 1,
             NULL, 0);
    h = raw_recv(fd, msg, sizeof msg);
    MSR_CHECK_EQ(h.type, MSR_WCHAN_REPLY);
    MSR_CHECK_EQ(h.code, MSR_RPC_RESOURCE_EXHAUSTED);
    MSR_CHECK_MSG(strstr(msg, "over the limit") != NULL, "%s", msg);
    raw_check_closed(fd);
    fd = raw_hello(&f);
    raw_send(fd, MSR_WCHAN_CALL, MSR_RPC_SET, 5000, (uint32_t)MSR_WCHAN_CALL_MAX + 1, NULL, 0);
    h = raw_recv(fd, msg, sizeof msg);
    MSR_CHECK_EQ(h.code, MSR_RPC_RESOURCE_EXHAUSTED);
    raw_check_closed(fd);
    /* a HELLO whose token is one past MSR_WCHAN_TOKEN_MAX */
    fd = raw_connect(&f);
    raw_send(fd, MSR_WCHAN_HELLO, 0, MSR_WCHAN_VERSION, MSR_WCHAN_TOKEN_MAX + 1, NULL, 0);
    h = raw_recv(fd, msg, sizeof msg);
    MSR_CHECK_EQ(h.type, MSR_WCHAN_WELCOME);
    MSR_CHECK_EQ(h.code, MSR_RPC_INVALID_ARGUMENT);
    raw_check_closed(fd);
    /* the server still serves */
    msr_wchan_t *w;
    MSR_CHECK_OK(msr_wchan_create(f.path, TOKEN, &w));
    MSR_CHECK_OK(get(w, "k", msg, sizeof msg));
    msr_wchan_destroy(w);
    fixture_stop(&f);
}

static void test_bad_frames(void)
{
    fixture_t f;
    fixture_start(&f, TOKEN);
    char msg[256];
    msr_wchan_header_t h;
    /* truncated: 10 of 100 bytes, then the end of the stream */
    int fd = raw_hello(&f);
    raw_send(fd, MSR_WCHAN_CALL, MSR_RPC_GET, 5000, 100, "0123456789", 10);
    shutdown(fd, SHUT_WR);
    h = raw_recv(fd, msg, sizeof msg);
    MSR_CHECK_EQ(h.code, MSR_RPC_INVALID_ARGUMENT);
    MSR_CHECK_MSG(strstr(msg, "truncated") != NULL, "%s", msg);
    raw_check_closed(fd);
    /* a truncated header: the connection just ends */
    fd = raw_hello(&f);
    MSR_CHECK_OK(msr_wchan_write_all(fd, "\x01\x02\x03", 3));
    shutdown(fd, SHUT_WR);
    raw_check_closed(fd);
    /* wrong type after the HELLO, and a CALL before it */
    fd = raw_hello(&f);
    raw_send(fd, MSR_WCHAN_REPLY, 0, 0, 0, NULL, 0);
    h = raw_recv(fd, msg, sizeof msg);
    MSR_CHECK_EQ(h.code, MSR_RPC_INVALID_ARGUMENT);
    raw_check_closed(fd);
    fd = raw_connect(&f);
    raw_send(fd, MSR_WCHAN_CALL, MSR_RPC_GET, 0, 0, NULL, 0);
    h = raw_recv(fd, msg, sizeof msg);
    MSR_CHECK_EQ(h.type, MSR_WCHAN_WELCOME);
    MSR_CHECK_EQ(h.code, MSR_RPC_INVALID_ARGUMENT);
    raw_check_closed(fd);
    /* a method out of range, and a HELLO of another version */
    fd = raw_hello(&f);
    raw_send(fd, MSR_WCHAN_CALL, MSR_RPC_METHOD_COUNT, 5000, 0, NULL, 0);
    h = raw_recv(fd, msg, sizeof msg);
    MSR_CHECK_EQ(h.code, MSR_RPC_UNIMPLEMENTED);
    raw_check_closed(fd);
    fd = raw_connect(&f);
    raw_send(fd, MSR_WCHAN_HELLO, 0, MSR_WCHAN_VERSION + 1, strlen(TOKEN), TOKEN, strlen(TOKEN));
    h = raw_recv(fd, msg, sizeof msg);
    MSR_CHECK_EQ(h.code, MSR_RPC_INVALID_ARGUMENT);
    raw_check_closed(fd);
    /* a header whose zero field is not zero */
    fd = raw_hello(&f);
    uint8_t hb[MSR_WCHAN_HEADER] = {0, 0, 0, 0, MSR_WCHAN_CALL, MSR_RPC_GET, 1, 0};
    MSR_CHECK_OK(msr_wchan_write_all(fd, hb, sizeof hb));
    h = raw_recv(fd, msg, sizeof msg);
    MSR_CHECK_EQ(h.code, MSR_RPC_INVALID_ARGUMENT);
    raw_check_closed(fd);
    fixture_stop(&f);
}

/* A server that answers the first CALL with a REPLY one byte over
 * MSR_WCHAN_REPLY_MAX: the client refuses it without allocating it. */
static void *liar_main(void *arg)
{
    int lfd = *(int *)arg;
    int fd = accept(lfd, NULL, NULL);
    uint8_t buf[MSR_WCHAN_HEADER + 64];
    msr_wchan_header_t h;
    if (fd < 0 || msr_wchan_read_all(fd, buf, MSR_WCHAN_HEADER, msr_deadline_in_ms(5000)) ||
        msr_wchan_header_unpack(buf, &h) || h.len > 64 ||
        msr_wchan_read_all(fd, buf, h.len, msr_deadline_in_ms(5000)))
        return NULL;
    msr_wchan_header_t w = {0, MSR_WCHAN_WELCOME, 0, 0};
    msr_wchan_header_pack(&w, buf);
    msr_wchan_write_all(fd, buf, MSR_WCHAN_HEADER);
    if (msr_wchan_read_all(fd, buf, MSR_WCHAN_HEADER, msr_deadline_in_ms(5000)) == MSR_OK &&
        msr_wchan_header_unpack(buf, &h) == MSR_OK && h.len <= 64 &&
        msr_wchan_read_all(fd, buf, h.len, msr_deadline_in_ms(5000)) == MSR_OK) {
        msr_wchan_header_t r = {(uint32_t)MSR_WCHAN_REPLY_MAX + 1, MSR_WCHAN_REPLY, 0, 0};
        msr_wchan_header_pack(&r, buf);
        msr_wchan_write_all(fd, buf, MSR_WCHAN_HEADER);
    }
    uint8_t b;
    msr_wchan_read_all(fd, &b, 1, msr_deadline_in_ms(5000)); /* until the client closes */
    close(fd);
    return NULL;
}

static void test_reply_too_long(void)
{
    fixture_t f;
    snprintf(f.dir, sizeof f.dir, "/tmp/msr-wchan-XXXXXX");
    MSR_CHECK(mkdtemp(f.dir) != NULL);
    snprintf(f.path, sizeof f.path, "%s/liar.sock", f.dir);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", f.path);
    MSR_CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(lfd, 4) == 0);
    pthread_t t;
    MSR_CHECK(pthread_create(&t, NULL, liar_main, &lfd) == 0);
    msr_wchan_t *w;
    char v[64];
    MSR_CHECK_OK(msr_wchan_create(f.path, TOKEN, &w));
    msr_status_t st = get(w, "k", v, sizeof v);
    msr_wchan_destroy(w);
    pthread_join(t, NULL);
    close(lfd);
    unlink(f.path);
    rmdir(f.dir);
    MSR_CHECK_STATUS(st, MSR_ERR_PROTOCOL);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "malformed reply") != NULL, "%s", msr_err_msg());
}

/* At most max_conns connections at once: the one past is closed before
 * its HELLO is answered; once one ends, a new one is served again. */
static void test_connection_bound(void)
{
    fixture_t f;
    fixture_start_max(&f, TOKEN, 2);
    int a = raw_hello(&f), b = raw_hello(&f); /* exactly the bound */
    int c = raw_connect(&f);
    uint8_t hello[MSR_WCHAN_HEADER + sizeof TOKEN - 1];
    msr_wchan_header_t hh = {sizeof TOKEN - 1, MSR_WCHAN_HELLO, 0, MSR_WCHAN_VERSION};
    msr_wchan_header_pack(&hh, hello);
    memcpy(hello + MSR_WCHAN_HEADER, TOKEN, sizeof TOKEN - 1);
    if (send(c, hello, sizeof hello, MSG_NOSIGNAL) < 0) /* it may be closed already */
        MSR_CHECK(errno == EPIPE || errno == ECONNRESET);
    uint8_t byte; /* no WELCOME: closed (reset, the HELLO unread) */
    msr_status_t st = msr_wchan_read_all(c, &byte, 1, msr_deadline_in_ms(10000));
    MSR_CHECK_MSG(st == MSR_ERR_TRUNCATED || st == MSR_ERR_IO, "got %s", msr_status_str(st));
    close(c);
    close(a);
    uint64_t deadline = msr_deadline_in_ms(10000);
    int served = 0;
    while (!served && !msr_deadline_passed(deadline)) {
        int d = raw_connect(&f);
        /* refused while the ended one is not reaped yet: closed, maybe
         * before the HELLO is written */
        uint8_t hb[MSR_WCHAN_HEADER];
        served = send(d, hello, sizeof hello, MSG_NOSIGNAL) == (ssize_t)sizeof hello &&
                 msr_wchan_read_all(d, hb, sizeof hb, msr_deadline_in_ms(10000)) == MSR_OK;
        close(d);
        if (!served)
            msr_sleep_ms(10); /* the ended connection's thread is reaped at the next accept */
    }
    MSR_CHECK_MSG(served, "no connection served after one of the two ended");
    close(b);
    fixture_stop(&f);
}

/* Nothing listens: unreachable, with the path in the message. */
static void test_unreachable(void)
{
    msr_wchan_t *w;
    char v[64];
    MSR_CHECK_OK(msr_wchan_create("/nonexistent/msr.sock.w", TOKEN, &w));
    MSR_CHECK_STATUS(get(w, "k", v, sizeof v), MSR_ERR_UNREACHABLE);
    MSR_CHECK(strstr(msr_err_msg(), "/nonexistent/msr.sock.w") != NULL);
    msr_wchan_destroy(w);
}

static const msr_test_t tests[] = {
    {"calls", test_calls, 20},
    {"token", test_token, 20},
    {"caller_leaves", test_caller_leaves, 20},
    {"frame_bounds", test_frame_bounds, 40},
    {"bad_frames", test_bad_frames, 20},
    {"reply_too_long", test_reply_too_long, 20},
    {"unreachable", test_unreachable, 20},
    {"connection_bound", test_connection_bound, 20},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
