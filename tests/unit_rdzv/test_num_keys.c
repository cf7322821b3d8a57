/* msr_store_num_keys end to end in one process: libmsrun's client in
 * direct mode against a coordinator on loopback (the count's edges, a
 * wrong token refused), against a coordinator of protocol version 1 that
 * lacks the call (refused at once, never sent), through an msrun of that
 * version (its refusal explained), and a singleton's store. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/time.h"
#include "msrun/store.h"
#include "rendezvous/rpc.h"
#include "rendezvous/wchan.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fixtures.h"

static uint64_t count(msr_ctx_t *ctx)
{
    uint64_t n = 12345;
    MSR_CHECK_OK(msr_store_num_keys(ctx, &n));
    return n;
}

/* Empty, a key set twice, a counter added to twice, an escaped key (as
 * the torch store writes control bytes and '%'), a delete and a delete of
 * a key gone. */
static void check_counts(msr_ctx_t *ctx)
{
    MSR_CHECK_EQ(count(ctx), 0);
    MSR_CHECK_OK(msr_store_set(ctx, "a", "1", 1));
    MSR_CHECK_OK(msr_store_set(ctx, "a", "22", 2));
    MSR_CHECK_EQ(count(ctx), 1);
    MSR_CHECK_OK(msr_store_add(ctx, "n", 1, NULL));
    MSR_CHECK_OK(msr_store_add(ctx, "n", 1, NULL));
    MSR_CHECK_EQ(count(ctx), 2);
    MSR_CHECK_OK(msr_store_set(ctx, "%0Aesc%25", "e", 1));
    MSR_CHECK_EQ(count(ctx), 3);
    for (int i = 0; i < 2; i++) {
        int existed = -1;
        MSR_CHECK_OK(msr_store_delete(ctx, "a", &existed));
        MSR_CHECK_EQ(existed, i == 0);
        MSR_CHECK_EQ(count(ctx), 2);
    }
    MSR_CHECK_STATUS(msr_store_num_keys(ctx, NULL), MSR_ERR_INVALID_ARG);
}

static void test_direct(void)
{
    msr_tserved_t s;
    msr_tserved_start_one(&s);
    msr_tenv_direct(s.target, "t");
    msr_tenv_check(check_counts);
    /* a caller without the job's token counts nothing */
    msr_tenv_direct(s.target, "not-the-token");
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    uint64_t n = 777;
    MSR_CHECK_STATUS(msr_store_num_keys(ctx, &n), MSR_ERR_PERMISSION);
    MSR_CHECK_MSG(strstr(msr_last_error(), "token") != NULL, "%s", msr_last_error());
    MSR_CHECK_EQ(n, 777);
    msr_finalize(ctx);
    msr_tserved_stop(&s);
}

/* A coordinator of protocol version 1: its Status lists the methods it
 * had, and a NumKeys call would be left unanswered (as gRPC leaves a
 * method it does not know). */
typedef struct old_coord {
    msr_rpc_loop_t *loop;
    msr_rpc_server_t *server;
    pthread_t thread;
    volatile int stop;
    int num_keys_calls;
} old_coord_t;

static void old_handler(void *arg, msr_rpc_call_t *call, msr_rpc_method_t method,
                        ProtobufCMessage *req)
{
    old_coord_t *o = arg;
    (void)req;
    if (method == MSR_RPC_NUM_KEYS) {
        o->num_keys_calls++; /* held until the client gives up */
        return;
    }
    if (method != MSR_RPC_STATUS) {
        msr_rpc_call_fail(call, MSR_RPC_UNIMPLEMENTED, "not served here");
        return;
    }
    Msr__StatusResponse r = MSR__STATUS_RESPONSE__INIT;
    char *names[MSR_RPC_METHOD_COUNT];
    size_t n = 0;
    for (int m = 0; m < MSR_RPC_METHOD_COUNT; m++)
        if (m != MSR_RPC_NUM_KEYS)
            names[n++] = (char *)msr_rpc_methods[m].name;
    r.n_call_names = n;
    r.call_names = names;
    msr_rpc_call_reply(call, &r.base);
}

static void old_cancel(void *arg, msr_rpc_call_t *call)
{
    (void)arg;
    (void)call;
}

static void *old_poll(void *arg)
{
    old_coord_t *o = arg;
    while (!o->stop)
        msr_rpc_loop_poll(o->loop, msr_deadline_in_ms(50));
    return NULL;
}

static void test_old_coordinator(void)
{
    old_coord_t o = {0};
    MSR_CHECK_OK(msr_rpc_loop_create(&o.loop));
    msr_rpc_server_config_t cfg = {.address = "127.0.0.1:0",
                                   .token = "t",
                                   .handler = old_handler,
                                   .cancel = old_cancel,
                                   .arg = &o,
                                   .log_name = "old coordinator"};
    int port = 0;
    MSR_CHECK_OK(msr_rpc_server_create(o.loop, &cfg, &port, &o.server));
    MSR_CHECK(pthread_create(&o.thread, NULL, old_poll, &o) == 0);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    msr_tenv_direct(target, "t");
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    /* a hang would last past the test's own limit */
    msr_set_timeout(ctx, 600000);
    uint64_t n = 777;
    for (int i = 0; i < 2; i++) { /* asked once, refused every time */
        MSR_CHECK_STATUS(msr_store_num_keys(ctx, &n), MSR_ERR_UNSUPPORTED);
        MSR_CHECK_MSG(strstr(msr_last_error(), "older than this libmsrun") != NULL &&
                          strstr(msr_last_error(), target) != NULL,
                      "%s", msr_last_error());
    }
    MSR_CHECK_EQ(n, 777);
    msr_finalize(ctx);
    o.stop = 1;
    pthread_join(o.thread, NULL);
    MSR_CHECK_EQ(o.num_keys_calls, 0);
    msr_rpc_server_destroy(o.server);
    msr_rpc_loop_destroy(o.loop);
}

/* An msrun of protocol version 1 refuses a method it does not know over
 * the worker channel (UNIMPLEMENTED, as its wchan_server.c did). */
static void old_msrun(void *arg, msr_wchan_conn_t *conn, msr_rpc_method_t method,
                      const uint8_t *req, size_t len, uint64_t deadline, int *code_p,
                      uint8_t **resp_p, size_t *resp_len_p, char *msg, size_t msglen)
{
    (void)arg, (void)conn, (void)req, (void)len, (void)deadline, (void)resp_p, (void)resp_len_p;
    *code_p = MSR_RPC_UNIMPLEMENTED;
    snprintf(msg, msglen, "worker channel: no method %u", (unsigned)method);
}

static void test_old_msrun(void)
{
    char dir[32] = "/tmp/msr-numkeys-XXXXXX", agent[64], path[80];
    MSR_CHECK(mkdtemp(dir) != NULL);
    snprintf(agent, sizeof agent, "%s/agent", dir);
    snprintf(path, sizeof path, "%s%s", agent, MSR_WCHAN_SUFFIX);
    msr_wchan_server_t *server = NULL;
    MSR_CHECK_OK(msr_wchan_server_create(path, "t", 4, old_msrun, NULL, &server));
    msr_tenv_direct("127.0.0.1:1", "t");
    unsetenv("MSR_COORDINATOR");
    setenv("MSR_AGENT", agent, 1);
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    uint64_t n = 777;
    if (st == MSR_OK)
        st = msr_store_num_keys(ctx, &n);
    char err[512];
    snprintf(err, sizeof err, "%s", msr_last_error());
    msr_finalize(ctx);
    msr_wchan_server_destroy(server);
    rmdir(dir);
    MSR_CHECK_STATUS(st, MSR_ERR_UNSUPPORTED);
    MSR_CHECK_MSG(strstr(err, "no method") != NULL &&
                      strstr(err, "msrun is older than this libmsrun") != NULL,
                  "%s", err);
    MSR_CHECK_EQ(n, 777);
}

/* A job of one rank: the store in the process counts alike. */
static void test_singleton(void)
{
    msr_tenv_singleton();
    msr_tenv_check(check_counts);
}

static const msr_test_t tests[] = {
    {"direct", test_direct, 30},
    {"old_coordinator", test_old_coordinator, 30},
    {"old_msrun", test_old_msrun, 30},
    {"singleton", test_singleton, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
