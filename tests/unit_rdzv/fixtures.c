/* Fixtures shared by the coordinator's unit tests (fixtures.h). */
#include "tests/unit_rdzv/fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/time.h"
#include "tests/runner.h"

static const char *default_peer = "test";

void msr_tcall_use_peer(const char *peer)
{
    default_peer = peer;
}

static void f_reply(void *call, const ProtobufCMessage *resp)
{
    tcall_t *c = call;
    msr_tcall_answer(c);
    c->code = 0;
    /* Round-trip through the wire format, as the real binding does. */
    size_t len = protobuf_c_message_get_packed_size(resp);
    /* plain malloc: the allocation-failure test must only fail the core's */
    uint8_t *buf = malloc(len + 1);
    protobuf_c_message_pack(resp, buf);
    c->resp = protobuf_c_message_unpack(resp->descriptor, NULL, len, buf);
    free(buf);
    MSR_CHECK(c->resp != NULL);
}

static void f_reply_blob(void *call, msr_blob_t *blob)
{
    tcall_t *c = call;
    msr_tcall_answer(c);
    c->code = 0;
    c->resp =
        protobuf_c_message_unpack(msr_rpc_methods[c->method].response, NULL, blob->len, blob->data);
    MSR_CHECK(c->resp != NULL);
}

static void f_fail(void *call, int code, const char *message)
{
    msr_tcall_fail(NULL, call, (msr_rpc_code_t)code, message);
}

static uint64_t f_deadline(void *call)
{
    return msr_tcall_deadline(NULL, call);
}

static const char *f_peer(void *call)
{
    const char *peer = msr_tcall_peer(NULL, call);
    return peer ? peer : default_peer;
}

static void f_set_data(void *call, void *data)
{
    msr_tcall_set_data(NULL, call, data);
}

static void *f_get_data(void *call)
{
    return msr_tcall_get_data(NULL, call);
}

const msr_coord_responder_t msr_tcall_responder = {f_reply, f_reply_blob, f_fail,    f_deadline,
                                                   f_peer,  f_set_data,   f_get_data};

void msr_tcall_reset(tcall_t *c)
{
    if (c->resp)
        protobuf_c_message_free_unpacked(c->resp, NULL);
    msr_tcall_init(c);
}

void msr_tcall_send(msr_coord_t *co, tcall_t *c, msr_rpc_method_t m, const ProtobufCMessage *req)
{
    msr_tcall_reset(c);
    c->method = m;
    msr_coord_call(co, c, m, req);
}

void msr_tcall_call(msr_coord_t *co, tcall_t *c, msr_rpc_method_t m, const ProtobufCMessage *req)
{
    msr_tcall_send(co, c, m, req);
    msr_coord_flush(co);
}

static void *serve(void *arg)
{
    msr_tserved_t *s = arg;
    msr_coord_server_run(s->server, &s->stop, 0);
    return NULL;
}

void msr_tserved_start(msr_tserved_t *s, const msr_coord_config_t *cfg)
{
    memset(s, 0, sizeof *s);
    MSR_CHECK_OK(msr_coord_server_create("127.0.0.1:0", cfg, &s->port, &s->server));
    MSR_CHECK(s->port > 0);
    snprintf(s->target, sizeof s->target, "127.0.0.1:%d", s->port);
    MSR_CHECK(pthread_create(&s->thread, NULL, serve, s) == 0);
}

void msr_tserved_start_one(msr_tserved_t *s)
{
    msr_coord_config_t cfg = {
        .token = "t", .job_id = "j", .worker_num = 1, .local_worker_num = 1, .max_restarts = 0};
    msr_tserved_start(s, &cfg);
}

void msr_tserved_start_nodes(msr_tserved_t *s, int nodes)
{
    msr_coord_config_t cfg = {.token = "tok",
                              .job_id = "j",
                              .worker_num = nodes,
                              .local_worker_num = 1,
                              .max_restarts = 0,
                              .node_timeout_ms = 600000};
    msr_tserved_start(s, &cfg);
}

void msr_tserved_stop(msr_tserved_t *s)
{
    s->stop = 1;
    pthread_join(s->thread, NULL);
    msr_coord_server_destroy(s->server);
}

static void *relay_serve(void *arg)
{
    msr_trelay_t *r = arg;
    while (!r->stop) {
        msr_rpc_loop_poll(r->loop, msr_deadline_in_ms(5));
        msr_relay_server_flush(r->server);
    }
    msr_relay_server_destroy(r->server);
    r->server = NULL;
    return NULL;
}

void msr_trelay_start(msr_trelay_t *r, const char *coord, const char *token, const char *id,
                      int nodes)
{
    memset(r, 0, sizeof *r);
    MSR_CHECK_OK(msr_rpc_loop_create(&r->loop));
    MSR_CHECK_OK(msr_rpc_channel_create_own(coord, token, &r->up));
    MSR_CHECK_OK(msr_relay_server_create(r->loop, "127.0.0.1:0", token, r->up, id, nodes, &r->port,
                                         &r->server));
    snprintf(r->target, sizeof r->target, "127.0.0.1:%d", r->port);
    MSR_CHECK(pthread_create(&r->thread, NULL, relay_serve, r) == 0);
    r->running = 1;
}

void msr_trelay_kill(msr_trelay_t *r)
{
    if (!r->running)
        return;
    r->stop = 1;
    pthread_join(r->thread, NULL);
    r->running = 0;
}

void msr_trelay_stop(msr_trelay_t *r)
{
    msr_trelay_kill(r);
    msr_rpc_channel_destroy(r->up);
    msr_rpc_loop_destroy(r->loop);
}

/* ---- a rank's environment for msr_init ---- */

void msr_tenv_direct(const char *target, const char *token)
{
    unsetenv("MSR_AGENT");
    setenv("MSR_COORDINATOR", target, 1);
    setenv("MSR_TOKEN", token, 1);
    setenv("MSR_RANK", "0", 1);
    setenv("MSR_WORLD_SIZE", "1", 1);
    setenv("MSR_GENERATION", "0", 1);
}

void msr_tenv_singleton(void)
{
    unsetenv("MSR_AGENT");
    unsetenv("MSR_COORDINATOR");
    unsetenv("MSR_WORLD_SIZE");
    unsetenv("MSR_RANK");
    unsetenv("MSR_GENERATION");
}

void msr_tenv_check(void (*check)(msr_ctx_t *ctx))
{
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    check(ctx);
    msr_finalize(ctx);
}

static void tnode_call_done(msr_rpc_async_t *a)
{
    msr_tnode_call_t *c = (msr_tnode_call_t *)a;
    c->code = a->status == MSR_OK ? 0 : a->grpc_code ? a->grpc_code : -1;
    snprintf(c->message, sizeof c->message, "%s", a->status == MSR_OK ? "" : a->err);
    if (a->status == MSR_OK && a->method == MSR_RPC_JOIN)
        snprintf(c->id, sizeof c->id, "%s", ((Msr__JoinResponse *)a->resp)->node_id);
    if (a->status == MSR_OK && a->method == MSR_RPC_HEARTBEAT) {
        const Msr__HeartbeatResponse *h = (const Msr__HeartbeatResponse *)a->resp;
        c->state = h->state;
        c->rank = h->assignment ? h->assignment->node_rank : -1;
    }
    msr_rpc_async_cleanup(a);
    c->done = 1;
}

void msr_tnode_call_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, msr_tnode_call_t *c,
                          msr_rpc_method_t m, const ProtobufCMessage *req)
{
    char id[sizeof c->id];
    memcpy(id, c->id, sizeof id);
    memset(c, 0, sizeof *c);
    memcpy(c->id, id, sizeof id);
    c->rank = -1;
    c->a.method = m;
    c->a.deadline = msr_deadline_in_ms(20000);
    c->a.wait_for_ready = 1;
    c->a.done = tnode_call_done;
    MSR_CHECK_OK(msr_rpc_call_start(ch, loop, &c->a, req));
}

void msr_tnode_calls_wait(msr_rpc_loop_t *loop, msr_tnode_call_t *c, int n)
{
    uint64_t limit = msr_deadline_in_ms(20000);
    for (int k = 0; k < n; k++)
        while (!c[k].done) {
            MSR_CHECK_MSG(!msr_deadline_passed(limit), "call %d not done in 20 s", k);
            msr_rpc_loop_poll(loop, msr_deadline_in_ms(100));
        }
}
