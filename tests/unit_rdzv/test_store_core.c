/* The store core alone (rendezvous/store_core.h), answered through fake ops
 * with no transport. This file holds what the pieces share
 * (test_store_core.h): the ops and their context, the calls' helpers, and
 * the one table of every piece's tests; the tests live in
 * test_store_core_<theme>.c. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tests/unit_rdzv/test_store_core.h"

static void t_reply(void *ctx, void *call, const ProtobufCMessage *resp)
{
    (void)ctx;
    tcall_t *c = call;
    msr_tcall_answer(c);
    size_t len = protobuf_c_message_get_packed_size(resp);
    uint8_t buf[4096];
    MSR_CHECK(len <= sizeof buf);
    protobuf_c_message_pack(resp, buf);
    c->resp = protobuf_c_message_unpack(resp->descriptor, NULL, len, buf);
    MSR_CHECK(c->resp != NULL);
}

static void t_reply_blob(void *ctx, void *call, msr_blob_t *blob)
{
    (void)ctx;
    tcall_t *c = call;
    msr_tcall_answer(c);
    c->resp =
        protobuf_c_message_unpack(msr_rpc_methods[c->method].response, NULL, blob->len, blob->data);
    MSR_CHECK(c->resp != NULL);
}

static int t_request_seen(void *ctx, void *call, msr_rpc_method_t method, uint64_t client_id,
                          uint64_t request_id)
{
    tctx_t *t = ctx;
    (void)method;
    if (!t->seen || client_id == 0 || request_id == 0)
        return 0;
    Msr__SetResponse r = MSR__SET_RESPONSE__INIT;
    t_reply(ctx, call, &r.base);
    return 1;
}

static void t_reply_write(void *ctx, void *call, msr_rpc_method_t method, uint64_t client_id,
                          uint64_t request_id, const ProtobufCMessage *resp)
{
    tctx_t *t = ctx;
    (void)method;
    if (client_id && request_id)
        t->writes_remembered++;
    t_reply(ctx, call, resp);
}

static void t_key_changed(void *ctx, const char *key)
{
    (void)key;
    ((tctx_t *)ctx)->keys_changed++;
}

static int t_generation(void *ctx)
{
    return ((tctx_t *)ctx)->generation;
}

static uint32_t t_participants(void *ctx)
{
    return ((tctx_t *)ctx)->participants;
}

msr_store_ops_t sc_ops_for(tctx_t *t)
{
    msr_store_ops_t ops = {
        .ctx = t,
        .reply = t_reply,
        .reply_blob = t_reply_blob,
        .fail = msr_tcall_fail,
        .deadline = msr_tcall_deadline,
        .set_data = msr_tcall_set_data,
        .get_data = msr_tcall_get_data,
        .request_seen = t_request_seen,
        .reply_write = t_reply_write,
        .key_changed = t_key_changed,
        .generation = t_generation,
        .participants_max = t_participants,
    };
    return ops;
}

msr_store_core_t *sc_core_new(tctx_t *t, const msr_store_limits_t *limits)
{
    memset(t, 0, sizeof *t);
    t->participants = 8;
    msr_store_ops_t ops = sc_ops_for(t);
    msr_store_core_t *core = NULL;
    MSR_CHECK_EQ(msr_store_core_create(limits, &ops, &core), MSR_OK);
    return core;
}

void sc_call_init(tcall_t *c, msr_rpc_method_t m)
{
    msr_tcall_init(c);
    c->method = m;
}

void sc_done(tcall_t *c)
{
    if (c->resp)
        protobuf_c_message_free_unpacked(c->resp, NULL);
    c->resp = NULL;
}

void sc_do_set(msr_store_core_t *core, tcall_t *c, const char *key, const char *value)
{
    sc_call_init(c, MSR_RPC_SET);
    Msr__SetRequest r = MSR__SET_REQUEST__INIT;
    r.key = (char *)key;
    r.value.data = (uint8_t *)value;
    r.value.len = strlen(value);
    msr_store_core_call(core, c, MSR_RPC_SET, &r.base);
}

void sc_do_get(msr_store_core_t *core, tcall_t *c, const char *key, uint32_t wait_ms)
{
    sc_call_init(c, MSR_RPC_GET);
    Msr__GetRequest r = MSR__GET_REQUEST__INIT;
    r.key = (char *)key;
    r.wait_ms = wait_ms;
    msr_store_core_call(core, c, MSR_RPC_GET, &r.base);
}

void sc_do_add(msr_store_core_t *core, tcall_t *c, const char *key, int64_t delta)
{
    sc_call_init(c, MSR_RPC_ADD);
    Msr__AddRequest r = MSR__ADD_REQUEST__INIT;
    r.key = (char *)key;
    r.delta = delta;
    msr_store_core_call(core, c, MSR_RPC_ADD, &r.base);
}

void sc_do_barrier(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t count,
                   uint32_t weight, uint32_t wait_ms)
{
    sc_call_init(c, MSR_RPC_BARRIER);
    Msr__BarrierRequest r = MSR__BARRIER_REQUEST__INIT;
    r.name = (char *)name;
    r.count = count;
    r.weight = weight;
    r.wait_ms = wait_ms;
    msr_store_core_call(core, c, MSR_RPC_BARRIER, &r.base);
}

void sc_do_gather(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t count,
                  uint32_t index, const char *data, size_t len, uint32_t wait_ms)
{
    sc_call_init(c, MSR_RPC_ALLGATHER);
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep = &e;
    e.index = index;
    e.data.data = (uint8_t *)data;
    e.data.len = len;
    Msr__AllgatherRequest r = MSR__ALLGATHER_REQUEST__INIT;
    r.name = (char *)name;
    r.count = count;
    r.n_entries = 1;
    r.entries = &ep;
    r.wait_ms = wait_ms;
    msr_store_core_call(core, c, MSR_RPC_ALLGATHER, &r.base);
}

void sc_check_value(tcall_t *c, const char *want)
{
    MSR_CHECK_MSG(c->answered && c->code == 0, "get: code %d %s", c->code, c->message);
    const Msr__GetResponse *g = (const Msr__GetResponse *)c->resp;
    MSR_CHECK_EQ(g->value.len, strlen(want));
    MSR_CHECK(memcmp(g->value.data, want, g->value.len) == 0);
    sc_done(c);
}

/* ---- shared by the pieces ---- */

void sc_do_publish(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t index,
                   const char *value)
{
    sc_call_init(c, MSR_RPC_PUBLISH);
    Msr__Contribution e = MSR__CONTRIBUTION__INIT;
    Msr__Contribution *ep = &e;
    e.index = index;
    e.data.data = (uint8_t *)value;
    e.data.len = strlen(value);
    Msr__PublishRequest r = MSR__PUBLISH_REQUEST__INIT;
    r.name = (char *)name;
    r.n_entries = 1;
    r.entries = &ep;
    msr_store_core_call(core, c, MSR_RPC_PUBLISH, &r.base);
    MSR_CHECK_MSG(c->answered && c->code == 0, "publish: %d %s", c->code, c->message);
    sc_done(c);
}

void sc_do_fetch(msr_store_core_t *core, tcall_t *c, const char *name, uint32_t *indices, size_t n,
                 uint32_t wait_ms)
{
    sc_call_init(c, MSR_RPC_FETCH);
    Msr__FetchRequest r = MSR__FETCH_REQUEST__INIT;
    r.name = (char *)name;
    r.n_indices = n;
    r.indices = indices;
    r.wait_ms = wait_ms;
    msr_store_core_call(core, c, MSR_RPC_FETCH, &r.base);
}

/* Every piece's tests, run as one table. */
static const msr_test_piece_t *const pieces[] = {&sc_ops_tests, &sc_limits_tests, &sc_relay_tests};

int main(int argc, char **argv)
{
    return msr_test_main_pieces(argc, argv, pieces, sizeof pieces / sizeof pieces[0]);
}
