/* A relay agent's server: its nodes' membership calls relayed to the
 * coordinator in batches (relay.h). */
#include <stdio.h>
#include <string.h>

#include <grpc/slice.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "rendezvous/relay.h"

struct msr_relay_server {
    msr_rpc_loop_t *loop;
    msr_rpc_server_t *rpc;
    msr_relay_t *relay;
};

/* A node's call being relayed; call is NULL once the node gave up. */
typedef struct node_call {
    msr_rpc_call_t *call;
} node_call_t;

static void node_answered(void *arg, int code, const char *message, const uint8_t *resp, size_t len)
{
    node_call_t *nc = arg;
    if (nc->call != NULL) {
        msr_rpc_call_set_data(nc->call, NULL);
        if (code == 0) {
            grpc_slice s = grpc_slice_from_copied_buffer((const char *)resp, len);
            msr_rpc_call_reply_slice(nc->call, &s);
            grpc_slice_unref(s);
        } else {
            msr_rpc_call_fail(nc->call, code, "%s", message);
        }
    }
    msr_free(nc);
}

static void on_call(void *arg, msr_rpc_call_t *call, msr_rpc_method_t method, ProtobufCMessage *req)
{
    msr_relay_server_t *s = arg;
    if (method != MSR_RPC_JOIN && method != MSR_RPC_HEARTBEAT && method != MSR_RPC_REPORT &&
        method != MSR_RPC_LEAVE) {
        msr_rpc_call_fail(call, MSR_RPC_UNIMPLEMENTED,
                          "a relay serves Join, Heartbeat, Report and Leave; call the "
                          "coordinator for %s",
                          msr_rpc_methods[method].name);
        return;
    }
    node_call_t *nc = msr_calloc(1, sizeof *nc);
    if (nc == NULL) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
        return;
    }
    nc->call = call;
    msr_rpc_call_set_data(call, nc);
    if (msr_relay_submit(s->relay, method, req, node_answered, nc) != MSR_OK) {
        msr_rpc_call_set_data(call, NULL);
        msr_free(nc);
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "relay out of memory");
    }
}

/* The node gave up on its call: its answer, when it comes, is dropped. */
static void on_cancel(void *arg, msr_rpc_call_t *call)
{
    (void)arg;
    node_call_t *nc = msr_rpc_call_get_data(call);
    if (nc != NULL)
        nc->call = NULL;
}

msr_status_t msr_relay_server_create(msr_rpc_loop_t *loop, const char *address, const char *token,
                                     msr_rpc_channel_t *up, const char *relay_id, uint32_t subtree,
                                     int *port_p, msr_relay_server_t **server_p)
{
    return msr_relay_server_create_tls(loop, address, token, NULL, up, relay_id, subtree, port_p,
                                       server_p);
}

msr_status_t msr_relay_server_create_tls(msr_rpc_loop_t *loop, const char *address,
                                         const char *token, const msr_rpc_tls_t *tls,
                                         msr_rpc_channel_t *up, const char *relay_id,
                                         uint32_t subtree, int *port_p,
                                         msr_relay_server_t **server_p)
{
    msr_relay_server_t *s = msr_calloc(1, sizeof *s);
    if (s == NULL)
        return MSR_ERR_NO_MEMORY;
    s->loop = loop;
    msr_status_t st = msr_relay_create(loop, up, relay_id, subtree, &s->relay);
    if (st != MSR_OK)
        goto err_free;
    msr_rpc_server_config_t cfg = {.address = address,
                                   .token = token,
                                   .handler = on_call,
                                   .cancel = on_cancel,
                                   .arg = s,
                                   .log_name = "relay",
                                   .tls = tls};
    if ((st = msr_rpc_server_create(loop, &cfg, port_p, &s->rpc)) != MSR_OK)
        goto err_relay;
    *server_p = s;
    return MSR_OK;
err_relay:
    msr_relay_destroy(s->relay);
err_free:
    msr_free(s);
    return st;
}

const msr_relay_t *msr_relay_server_relay(const msr_relay_server_t *s)
{
    return s->relay;
}

void msr_relay_server_flush(msr_relay_server_t *s)
{
    msr_relay_flush(s->relay);
}

void msr_relay_server_destroy(msr_relay_server_t *s)
{
    if (s == NULL)
        return;
    /* the relay first: its calls answered CANCELLED while the server's
     * calls can still be answered; then the server (it polls the loop) */
    msr_relay_cancel(s->relay);
    uint64_t limit = msr_deadline_in_ms(5000);
    while (msr_relay_in_flight(s->relay) > 0 && !msr_deadline_passed(limit))
        msr_rpc_loop_poll(s->loop, msr_deadline_in_ms(50));
    msr_relay_destroy(s->relay);
    msr_rpc_server_destroy(s->rpc);
    msr_free(s);
}
