/* Tests of the coordinator over real gRPC on loopback: token checks, clear
 * errors for an unreachable coordinator and for deadlines, and messages
 * larger than gRPC's default limit. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "cluster/server.h"
#include "rendezvous/rpc.h"
#include "tests/runner.h"

typedef struct served {
    msr_coord_server_t *server;
    pthread_t thread;
    volatile sig_atomic_t stop;
    int port;
    char target[64];
} served_t;

static void *serve(void *arg)
{
    served_t *s = arg;
    msr_coord_server_run(s->server, &s->stop, 0);
    return NULL;
}

/* A coordinator for a 1-node, 1-worker job, already running. */
static void start(served_t *s, const char *token)
{
    memset(s, 0, sizeof *s);
    msr_coord_config_t cfg = {
        .token = token, .job_id = "j", .worker_num = 1, .local_worker_num = 1, .max_restarts = 0};
    MSR_CHECK_OK(msr_coord_server_create("127.0.0.1:0", &cfg, &s->port, &s->server));
    MSR_CHECK(s->port > 0);
    snprintf(s->target, sizeof s->target, "127.0.0.1:%d", s->port);
    MSR_CHECK(pthread_create(&s->thread, NULL, serve, s) == 0);
}

static void stop(served_t *s)
{
    s->stop = 1;
    pthread_join(s->thread, NULL);
    msr_coord_server_destroy(s->server);
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
    served_t s;
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
    stop(&s);
}

static void test_unreachable(void)
{
    /* a port nobody listens on: find one by starting and stopping a server */
    served_t s;
    start(&s, "t");
    char target[64];
    snprintf(target, sizeof target, "%s", s.target);
    stop(&s);
    msr_rpc_channel_t *ch;
    MSR_CHECK_OK(msr_rpc_channel_create(target, "t", &ch));
    Msr__StatusRequest r = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    uint64_t t0 = msr_now_ns();
    msr_status_t st = msr_rpc_call(ch, MSR_RPC_STATUS, &r.base, msr_deadline_in_ms(5000), 0, &resp);
    MSR_CHECK_STATUS(st, MSR_ERR_UNREACHABLE);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "unreachable") && strstr(msr_err_msg(), target), "%s",
                  msr_err_msg());
    MSR_CHECK(msr_now_ns() - t0 < 3000000000ull); /* fails fast without wait_for_ready */
    /* with wait_for_ready it waits for its deadline */
    st = msr_rpc_call(ch, MSR_RPC_STATUS, &r.base, msr_deadline_in_ms(300), 1, &resp);
    MSR_CHECK_STATUS(st, MSR_ERR_TIMEOUT);
    msr_rpc_channel_destroy(ch);
}

static void test_wait_deadline(void)
{
    served_t s;
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
    stop(&s);
}

static void test_large_messages(void)
{
    served_t s;
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
    stop(&s);
}

/* A request larger than its method's limit is refused with
 * RESOURCE_EXHAUSTED, naming the limit, and the server carries on. */
static void test_request_limits(void)
{
    served_t s;
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
    stop(&s);
}

/* A raw Set whose key holds a NUL byte ("a\0b" on the wire: a string C
 * reads as "a") is refused INVALID_ARGUMENT, and nothing is written under
 * the key cut at the NUL. The client library packs keys with strlen, so
 * the request is a Contribution, whose wire form is a SetRequest's
 * (field 1 a varint, field 2 length-delimited), sent to Set's path. */
static void test_nul_key(void)
{
    served_t s;
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
    stop(&s);
}

static void test_port_in_use(void)
{
    served_t s;
    start(&s, "t");
    msr_coord_config_t cfg = {.token = "t", .worker_num = 1, .local_worker_num = 1};
    msr_coord_server_t *second = NULL;
    int port = 0;
    MSR_CHECK_STATUS(msr_coord_server_create(s.target, &cfg, &port, &second), MSR_ERR_ADDR_IN_USE);
    stop(&s);
}

static const msr_test_t tests[] = {
    {"token", test_token, 30},
    {"unreachable", test_unreachable, 30},
    {"wait_deadline", test_wait_deadline, 30},
    {"large_messages", test_large_messages, 30},
    {"request_limits", test_request_limits, 60},
    {"port_in_use", test_port_in_use, 30},
    {"nul_key", test_nul_key, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
