/* The proxy's side of the worker channel (rendezvous/wchan.h): each call
 * that comes on it is made on the proxy's own gRPC socket, so that both
 * kinds of worker are served by one path (groups, held calls, beats), and
 * a worker whose connection closes has its call cancelled there. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "launcher/proxy_impl.h"
#include "rendezvous/wchan.h"

/* How often a call in flight looks whether its worker still waits. */
#define GONE_POLL_MS 50

static void bridge_done(msr_rpc_async_t *a)
{
    *(int *)a->arg = 1;
}

static void bridge_call(void *arg, msr_wchan_conn_t *conn, msr_rpc_method_t method,
                        const uint8_t *req, size_t len, uint64_t deadline, int *code_p,
                        uint8_t **resp_p, size_t *resp_len_p, char *msg, size_t msglen)
{
    msr_proxy_t *p = arg;
    const char *nul = NULL;
    ProtobufCMessage *r = msr_rpc_request_unpack_checked(method, req, len, &nul);
    if (r == NULL) {
        *code_p = MSR_RPC_INVALID_ARGUMENT;
        snprintf(msg, msglen, "malformed %s request%s%s%s", msr_rpc_methods[method].name,
                 nul ? " (field " : "", nul ? nul : "", nul ? " holds a NUL byte)" : "");
        return;
    }
    msr_rpc_loop_t *loop = NULL;
    int finished = 0;
    msr_rpc_async_t a = {
        .method = method, .deadline = deadline, .done = bridge_done, .arg = &finished};
    msr_status_t st = msr_rpc_loop_create(&loop);
    if (st == MSR_OK)
        st = msr_rpc_call_start(p->self, loop, &a, r);
    if (st != MSR_OK) {
        *code_p = MSR_RPC_UNAVAILABLE;
        snprintf(msg, msglen, "msrun's proxy cannot take the %s call: %s",
                 msr_rpc_methods[method].name, msr_status_str(st));
        goto out;
    }
    int cancelled = 0;
    while (!finished) {
        msr_rpc_loop_poll(loop, msr_deadline_in_ms(GONE_POLL_MS));
        if (!finished && !cancelled && msr_wchan_conn_gone(conn)) {
            msr_rpc_async_cancel(&a); /* the worker left: the proxy forgets its call */
            cancelled = 1;
        }
    }
    if (a.status == MSR_OK && a.resp != NULL) {
        size_t n = protobuf_c_message_get_packed_size(a.resp);
        *resp_p = msr_malloc(n ? n : 1);
        if (*resp_p != NULL) {
            protobuf_c_message_pack(a.resp, *resp_p);
            *resp_len_p = n;
            *code_p = 0;
        } else {
            *code_p = MSR_RPC_RESOURCE_EXHAUSTED;
            snprintf(msg, msglen, "msrun's proxy is out of memory");
        }
    } else {
        *code_p = a.grpc_code != 0               ? a.grpc_code
                  : a.status == MSR_ERR_CANCELED ? MSR_RPC_CANCELLED
                                                 : MSR_RPC_UNAVAILABLE;
        snprintf(msg, msglen, "%s", a.err[0] ? a.err : msr_status_str(a.status));
    }
    msr_rpc_async_cleanup(&a);
out:
    msr_rpc_loop_destroy(loop);
    msr_rpc_message_free(r);
}

msr_status_t msr_proxy_wchan_start(msr_proxy_t *p, const char *token)
{
    char target[300], path[300];
    snprintf(target, sizeof target, "unix:%s", p->socket_path);
    snprintf(path, sizeof path, "%s%s", p->socket_path, MSR_WCHAN_SUFFIX);
    msr_status_t st = msr_rpc_channel_create(target, token, &p->self);
    if (st != MSR_OK)
        return st;
    /* a worker holds up to three connections at once (its calls, beats and
     * reports), some room for more threads of its own */
    int max_conns = (int)p->local_workers * 8 + 16;
    st = msr_wchan_server_create(path, token, max_conns, bridge_call, p, &p->wchan);
    if (st != MSR_OK) {
        MSR_ERROR("cannot listen on %s for the workers", path);
        msr_rpc_channel_destroy(p->self);
        p->self = NULL;
    }
    return st;
}

void msr_proxy_wchan_stop(msr_proxy_t *p)
{
    msr_wchan_server_destroy(p->wchan); /* the calls in flight are cancelled */
    p->wchan = NULL;
    msr_rpc_channel_destroy(p->self);
    p->self = NULL;
}
