/* A call of a method the server does not know is answered at once with
 * UNIMPLEMENTED (MSR_ERR_UNSUPPORTED to the client, the method named),
 * never left to its deadline, by every kind of msrun server: a bare one,
 * the coordinator's, the node's store proxy on its unix socket, a relay's.
 * Known methods still work beside it; a caller without the token is
 * refused; many unknown calls, in a row and at once, leave nothing behind
 * (under ASan the runner checks each passing test for leaks). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/time.h"
#include "launcher/proxy.h"
#include "rendezvous/relay.h"
#include "rendezvous/rpc.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fixtures.h"

/* Long enough for a loaded machine to answer, short enough that a server
 * that leaves the call unanswered fails the test quickly. */
#define CALL_MS 5000

static char sock_path[64];

/* A call of path (any method's request will do: the body is never read);
 * its status, with the client's message in msg. */
static msr_status_t call_path(msr_rpc_channel_t *ch, const char *path, size_t body, char *msg,
                              size_t msglen)
{
    static char big[1 << 20];
    Msr__SetRequest req = MSR__SET_REQUEST__INIT;
    req.key = "k";
    req.value.len = body < sizeof big ? body : sizeof big;
    req.value.data = (uint8_t *)big;
    ProtobufCMessage *resp = NULL;
    msr_status_t st = msr_rpc_call_path(ch, path, &req.base, &msr__set_response__descriptor,
                                        msr_deadline_in_ms(CALL_MS), 1, &resp);
    snprintf(msg, msglen, "%s", st == MSR_OK ? "" : msr_err_msg());
    msr_rpc_message_free(resp);
    return st;
}

/* path is refused at once as a method the server at target lacks. */
static void check_unknown(msr_rpc_channel_t *ch, const char *path, size_t body)
{
    char msg[512], want[160];
    MSR_CHECK_STATUS(call_path(ch, path, body, msg, sizeof msg), MSR_ERR_UNSUPPORTED);
    snprintf(want, sizeof want, "unknown method %s", path[0] ? path : "(empty)");
    MSR_CHECK_MSG(strstr(msg, want) != NULL && strstr(msg, "not served there") != NULL, "%s", msg);
}

/* ---- a bare server ---- */

typedef struct bare {
    msr_rpc_loop_t *loop;
    msr_rpc_server_t *server;
    pthread_t thread;
    volatile sig_atomic_t stop;
    int handled;
} bare_t;

static void bare_handler(void *arg, msr_rpc_call_t *call, msr_rpc_method_t method,
                         ProtobufCMessage *req)
{
    bare_t *b = arg;
    (void)req;
    b->handled++;
    MSR_CHECK_EQ(method, MSR_RPC_STATUS);
    Msr__StatusResponse r = MSR__STATUS_RESPONSE__INIT;
    r.job_id = "bare";
    msr_rpc_call_reply(call, &r.base);
}

static void bare_cancel(void *arg, msr_rpc_call_t *call)
{
    (void)arg, (void)call;
}

static void *bare_poll(void *arg)
{
    bare_t *b = arg;
    while (!b->stop)
        msr_rpc_loop_poll(b->loop, msr_deadline_in_ms(20));
    return NULL;
}

static void status_ok(msr_rpc_channel_t *ch, const char *job_id)
{
    Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    MSR_CHECK_OK(msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, msr_deadline_in_ms(20000), 1, &resp));
    if (job_id)
        MSR_CHECK_MSG(strcmp(((Msr__StatusResponse *)resp)->job_id, job_id) == 0, "%s",
                      ((Msr__StatusResponse *)resp)->job_id);
    msr_rpc_message_free(resp);
}

typedef struct burst {
    msr_rpc_channel_t *ch;
    int failures;
} burst_t;

static void *burst_calls(void *arg)
{
    burst_t *b = arg;
    char msg[512];
    for (int i = 0; i < 25; i++)
        b->failures +=
            call_path(b->ch, "/msr.Store/Later", 16, msg, sizeof msg) != MSR_ERR_UNSUPPORTED;
    return NULL;
}

static void test_bare(void)
{
    bare_t b = {0};
    MSR_CHECK_OK(msr_rpc_loop_create(&b.loop));
    msr_rpc_server_config_t cfg = {.address = "127.0.0.1:0",
                                   .token = "t",
                                   .handler = bare_handler,
                                   .cancel = bare_cancel,
                                   .arg = &b,
                                   .log_name = "bare"};
    int port = 0;
    MSR_CHECK_OK(msr_rpc_server_create(b.loop, &cfg, &port, &b.server));
    MSR_CHECK(pthread_create(&b.thread, NULL, bare_poll, &b) == 0);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    msr_rpc_channel_t *ch = NULL, *stranger = NULL;
    MSR_CHECK_OK(msr_rpc_channel_create(target, "t", &ch));
    MSR_CHECK_OK(msr_rpc_channel_create_own(target, "wrong", &stranger));
    check_unknown(ch, "/msr.Store/NumKeysLater", 0);
    check_unknown(ch, "/other.Service/Method", 3);
    check_unknown(ch, "/msr.Coordinator/", 0);
    /* a body larger than a stream's flow-control window, never read */
    check_unknown(ch, "/msr.Store/SetLater", sizeof(char[1 << 20]));
    status_ok(ch, "bare");
    /* without the token: refused as a known method is */
    char msg[512];
    MSR_CHECK_STATUS(call_path(stranger, "/msr.Store/Later", 0, msg, sizeof msg),
                     MSR_ERR_PERMISSION);
    MSR_CHECK_MSG(strstr(msg, "token") != NULL, "%s", msg);
    /* many in a row, then at once from several threads (more than the
     * server's generic requests posted at a time) */
    for (int i = 0; i < 200; i++)
        check_unknown(ch, "/msr.Store/Later", 8);
    burst_t bursts[6];
    pthread_t threads[6];
    for (int k = 0; k < 6; k++) {
        bursts[k] = (burst_t){ch, 0};
        MSR_CHECK(pthread_create(&threads[k], NULL, burst_calls, &bursts[k]) == 0);
    }
    for (int k = 0; k < 6; k++) {
        pthread_join(threads[k], NULL);
        MSR_CHECK_EQ(bursts[k].failures, 0);
    }
    status_ok(ch, "bare");
    b.stop = 1;
    pthread_join(b.thread, NULL);
    MSR_CHECK_EQ(b.handled, 2);
    MSR_CHECK_EQ(msr_rpc_server_unknown_calls(b.server), 4 + 1 + 200 + 6 * 25);
    MSR_CHECK_EQ(msr_rpc_server_calls(b.server, MSR_RPC_STATUS), 2);
    msr_rpc_channel_destroy(ch);
    msr_rpc_channel_destroy(stranger);
    msr_rpc_server_destroy(b.server);
    msr_rpc_loop_destroy(b.loop);
}

/* ---- the coordinator, the node's proxy, a relay ---- */

static void start_coordinator(msr_tserved_t *s)
{
    msr_coord_config_t cfg = {.token = "t",
                              .job_id = "j",
                              .worker_num = 2,
                              .local_worker_num = 1,
                              .max_restarts = 0,
                              .node_timeout_ms = 600000};
    msr_tserved_start(s, &cfg);
}

static void test_coordinator(void)
{
    msr_tserved_t s;
    start_coordinator(&s);
    msr_rpc_channel_t *ch = NULL;
    MSR_CHECK_OK(msr_rpc_channel_create(s.target, "t", &ch));
    check_unknown(ch, "/msr.Store/NumKeysLater", 0);
    status_ok(ch, "j");
    for (int i = 0; i < 50; i++)
        check_unknown(ch, "/msr.Coordinator/Later", 8);
    status_ok(ch, "j");
    msr_rpc_channel_destroy(ch);
    msr_tserved_stop(&s);
}

static void test_proxy(void)
{
    msr_tserved_t s;
    start_coordinator(&s);
    unlink(sock_path);
    msr_proxy_t *proxy = NULL;
    MSR_CHECK_OK(msr_proxy_start(sock_path, s.target, "t", NULL, 1, NULL, &proxy));
    char target[80];
    snprintf(target, sizeof target, "unix:%s", sock_path);
    msr_rpc_channel_t *ch = NULL;
    MSR_CHECK_OK(msr_rpc_channel_create(target, "t", &ch));
    check_unknown(ch, "/msr.Store/NumKeysLater", 0);
    status_ok(ch, "j"); /* forwarded to the coordinator */
    for (int i = 0; i < 50; i++)
        check_unknown(ch, "/msr.Store/Later", 8);
    status_ok(ch, "j");
    msr_rpc_channel_destroy(ch);
    msr_proxy_stop(proxy);
    msr_tserved_stop(&s);
}

static void test_relay(void)
{
    msr_tserved_t s;
    start_coordinator(&s);
    msr_trelay_t ra;
    msr_trelay_start(&ra, s.target, "t", "r", 2);
    msr_rpc_channel_t *ch = NULL;
    MSR_CHECK_OK(msr_rpc_channel_create(ra.target, "t", &ch));
    check_unknown(ch, "/msr.Coordinator/JoinLater", 0);
    for (int i = 0; i < 50; i++)
        check_unknown(ch, "/msr.Coordinator/Later", 8);
    /* a method the relay knows but does not relay: refused by its
     * handler, and the client says so */
    Msr__StatusRequest sreq = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *sresp = NULL;
    MSR_CHECK_STATUS(
        msr_rpc_call(ch, MSR_RPC_STATUS, &sreq.base, msr_deadline_in_ms(CALL_MS), 1, &sresp),
        MSR_ERR_UNSUPPORTED);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "Status call to") != NULL &&
                      strstr(msr_err_msg(), "not served there") != NULL,
                  "%s", msr_err_msg());
    /* a known method reaches the relay, which relays it to the
     * coordinator: a heartbeat of a node it never saw, refused there */
    Msr__HeartbeatRequest hb = MSR__HEARTBEAT_REQUEST__INIT;
    hb.node_id = "no-such-node";
    ProtobufCMessage *resp = NULL;
    msr_status_t st =
        msr_rpc_call(ch, MSR_RPC_HEARTBEAT, &hb.base, msr_deadline_in_ms(20000), 1, &resp);
    msr_rpc_message_free(resp);
    MSR_CHECK_MSG(st != MSR_ERR_UNSUPPORTED && st != MSR_ERR_TIMEOUT, "heartbeat: %s: %s",
                  msr_status_str(st), msr_err_msg());
    msr_rpc_channel_destroy(ch);
    msr_trelay_stop(&ra);
    msr_tserved_stop(&s);
}

static const msr_test_t tests[] = {
    {"bare", test_bare, 120},
    {"coordinator", test_coordinator, 60},
    {"proxy", test_proxy, 60},
    {"relay", test_relay, 60},
};

int main(int argc, char **argv)
{
    snprintf(sock_path, sizeof sock_path, "%s/msr-rpc-unknown-%d.sock", P_tmpdir, (int)getpid());
    int rc = MSR_TEST_MAIN(argc, argv, tests);
    unlink(sock_path);
    return rc;
}
