/* The gRPC server: calls taken from the completion queue, checked (token,
 * size) and handed to the owner, who answers them whenever it likes. */
#include "rendezvous/rpc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/string_util.h>
#include <grpc/support/time.h>

#include "base/alloc.h"
#include "base/list.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "rendezvous/rpc_accept.h"
#include "rendezvous/rpc_internal.h"
#include "rendezvous/rpc_unknown.h"

/* ---- server ---- */

/* Refused calls are logged at most this often, with a count of the rest. */
#define REFUSAL_LOG_INTERVAL_NS (5ull * 1000000000ull)
/* Hosts remembered as already logged (a new host is logged at once). */
#define REFUSAL_HOSTS           16

struct msr_rpc_server {
    msr_rpc_loop_t *loop;
    grpc_server *server;
    msr_rpc_server_config_t config;
    char *token;
    char *log_name;
    size_t max_message;
    void *method_handles[MSR_RPC_METHOD_COUNT];
    uint64_t calls[MSR_RPC_METHOD_COUNT];
    msr_list_t live;              /* every msr_rpc_call not yet freed */
    msr_rpc_acceptor_t *acceptor; /* our own listener, or NULL */
    msr_rpc_unknown_t *unknown;   /* calls of methods not registered */
    msr_rpc_op_t shutdown_op;
    atomic_int shutting_down;
    int shutdown_done;
    /* refusal log rate limit (polling thread only) */
    uint64_t refusal_logged_ns;
    uint64_t refusals_suppressed;
    int refusal_lines; /* lines in the current interval */
    char refusal_hosts[REFUSAL_HOSTS][64];
    int refusal_next;
};

struct msr_rpc_call {
    msr_rpc_server_t *server;
    msr_rpc_method_t method;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_byte_buffer *reply;
    grpc_slice details;
    int have_details;
    msr_rpc_op_t request_op, recv_op, close_op, send_op;
    int cancelled;  /* written by RECV_CLOSE_ON_SERVER */
    int watching;   /* close_op is outstanding (call_watch_close) */
    int refs;       /* ops in flight + 1 while unanswered */
    int owned;      /* unanswered: this layer or the handler must answer it */
    int handed;     /* the handler has it (the cancel callback applies) */
    int no_request; /* answered for want of a request: logged when it ends */
    ProtobufCMessage *req;
    void *data;
    char *peer;
    uint64_t started; /* msr_now_ns() when it arrived */
    msr_list_t link;
};

static void server_post_request(msr_rpc_server_t *s, msr_rpc_method_t method);

static void call_release(msr_rpc_call_t *c)
{
    if (--c->refs > 0)
        return;
    msr_list_remove(&c->link);
    if (c->call)
        grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->md);
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    if (c->reply)
        grpc_byte_buffer_destroy(c->reply);
    if (c->have_details)
        grpc_slice_unref(c->details);
    msr_rpc_message_free(c->req);
    if (c->peer)
        gpr_free(c->peer);
    msr_free(c);
}

static void call_send_done(msr_rpc_op_t *op, int ok)
{
    (void)ok;
    msr_rpc_call_t *c = MSR_CONTAINER_OF(op, msr_rpc_call_t, send_op);
    if (c->no_request) {
        /* Only now, the close received with the answer, is it known
         * whether the client cancelled the call (a client that cancels
         * mid-send looks like one that sent nothing). */
        if (c->cancelled)
            MSR_DEBUG("%s: %s from %s cancelled while sending its request", c->server->log_name,
                      msr_rpc_methods[c->method].name, msr_rpc_call_peer(c));
        else
            MSR_WARN("%s: %s from %s sent no request", c->server->log_name,
                     msr_rpc_methods[c->method].name, msr_rpc_call_peer(c));
    }
    call_release(c);
}

static void call_close_done(msr_rpc_op_t *op, int ok)
{
    (void)ok;
    msr_rpc_call_t *c = MSR_CONTAINER_OF(op, msr_rpc_call_t, close_op);
    if (c->owned) {
        /* Closed before anyone answered: the client is gone. */
        c->owned = 0;
        if (c->handed && c->server->config.cancel)
            c->server->config.cancel(c->server->config.arg, c);
        call_release(c);
    }
    call_release(c);
}

/* Sends the answer (message or error status) and ends the handler's hold. */
static msr_status_t call_send(msr_rpc_call_t *c, grpc_byte_buffer *reply, grpc_status_code code,
                              const char *details)
{
    if (!c->owned) {
        if (reply)
            grpc_byte_buffer_destroy(reply);
        return MSR_ERR_STATE;
    }
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    n++;
    if (!c->watching) { /* answered at once: the answer takes the close */
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n].data.recv_close_on_server.cancelled = &c->cancelled;
        n++;
    }
    if (reply) {
        c->reply = reply;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = reply;
        n++;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    if (details) {
        c->details = grpc_slice_from_copied_string(details);
        c->have_details = 1;
        ops[n].data.send_status_from_server.status_details = &c->details;
    }
    n++;
    c->owned = 0;
    /* The handler's hold becomes the send op's reference. */
    grpc_call_error err = grpc_call_start_batch(c->call, ops, n, &c->send_op, NULL);
    if (err != GRPC_CALL_OK) {
        MSR_DEBUG("%s: cannot answer %s: %s", c->server->log_name, msr_rpc_methods[c->method].name,
                  grpc_call_error_to_string(err));
        call_release(c);
        return MSR_ERR_INTERNAL;
    }
    return MSR_OK;
}

msr_status_t msr_rpc_call_reply(msr_rpc_call_t *call, const ProtobufCMessage *resp)
{
    grpc_byte_buffer *bb = msr_rpc_pack_message(resp);
    if (bb == NULL) {
        call_send(call, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return MSR_ERR_NO_MEMORY;
    }
    return call_send(call, bb, GRPC_STATUS_OK, NULL);
}

msr_status_t msr_rpc_call_reply_slice(msr_rpc_call_t *call, const void *grpc_slice_p)
{
    grpc_slice s = *(const grpc_slice *)grpc_slice_p;
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    if (bb == NULL) {
        call_send(call, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return MSR_ERR_NO_MEMORY;
    }
    return call_send(call, bb, GRPC_STATUS_OK, NULL);
}

void msr_rpc_call_fail(msr_rpc_call_t *call, int grpc_code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    call_send(call, NULL, (grpc_status_code)grpc_code, msg);
}

uint64_t msr_rpc_call_deadline(const msr_rpc_call_t *call)
{
    return msr_rpc_from_gpr_deadline(call->deadline);
}

const char *msr_rpc_call_peer(msr_rpc_call_t *call)
{
    if (call->peer == NULL) {
        call->peer = grpc_call_get_peer(call->call);
        /* Connections from our own listener are "fd:N" to gRPC. */
        char real[96];
        if (call->peer && call->server->acceptor &&
            msr_rpc_acceptor_peer(call->server->acceptor, call->peer, real, sizeof real) == 0) {
            gpr_free(call->peer);
            call->peer = gpr_strdup(real);
        }
    }
    return call->peer ? call->peer : "unknown peer";
}

void msr_rpc_call_set_data(msr_rpc_call_t *call, void *data)
{
    call->data = data;
}

void *msr_rpc_call_get_data(const msr_rpc_call_t *call)
{
    return call->data;
}

/* The most bytes a request of method may have. Requests that carry store
 * values may be as large as the server's limit; the others are small (a
 * report carries at most 20 stderr lines of 400 bytes). */
static size_t request_limit(const msr_rpc_server_t *s, msr_rpc_method_t method)
{
    switch (method) {
    case MSR_RPC_SET:
    case MSR_RPC_COMPARE_SET:
    case MSR_RPC_ALLGATHER:
    case MSR_RPC_PUBLISH:
    case MSR_RPC_RELAY: /* up to MSR_RELAY_BATCH_MAX nodes' calls */
        return s->max_message;
    default:
        return MSR_RPC_SMALL_REQUEST_MAX < s->max_message ? MSR_RPC_SMALL_REQUEST_MAX
                                                          : s->max_message;
    }
}

/* Logs a refused call unless that would flood the log: the first refusal
 * of a host not seen lately is logged (at most 10 lines an interval), and
 * otherwise one line an interval says how many were left out. */
static void log_refusal(msr_rpc_server_t *s, msr_rpc_call_t *c)
{
    const char *peer = msr_rpc_call_peer(c);
    char host[64];
    msr_rpc_peer_host(peer, host, sizeof host);
    uint64_t now = msr_now_ns();
    int fresh_interval = now - s->refusal_logged_ns >= REFUSAL_LOG_INTERVAL_NS;
    int known = 0;
    for (int i = 0; i < REFUSAL_HOSTS && !known; i++)
        known = strcmp(s->refusal_hosts[i], host) == 0;
    if (!fresh_interval && (known || s->refusal_lines >= 10)) {
        s->refusals_suppressed++;
        return;
    }
    if (!known) {
        snprintf(s->refusal_hosts[s->refusal_next], sizeof s->refusal_hosts[0], "%s", host);
        s->refusal_next = (s->refusal_next + 1) % REFUSAL_HOSTS;
    }
    if (fresh_interval) {
        s->refusal_logged_ns = now;
        s->refusal_lines = 0;
    }
    s->refusal_lines++;
    if (s->refusals_suppressed)
        MSR_WARN("%s: refused %s from %s: missing or wrong job token (and %llu more refused "
                 "calls not logged)",
                 s->log_name, msr_rpc_methods[c->method].name, peer,
                 (unsigned long long)s->refusals_suppressed);
    else
        MSR_WARN("%s: refused %s from %s: missing or wrong job token", s->log_name,
                 msr_rpc_methods[c->method].name, peer);
    s->refusals_suppressed = 0;
}

/* A call its handler holds: watch for the client's going away (the
 * cancel callback, call_close_done). A call answered at once is not
 * watched: its answer's batch takes the close (call_send). gRPC as Debian
 * builds it (without NDEBUG) keeps the tag of every op outstanding on a
 * completion queue in an array that each completion scans, so an op left
 * outstanding for every live call made each completion cost as much as
 * the calls alive: quadratic in a burst of calls (a million ranks'
 * exchange through relays). */
static void call_watch_close(msr_rpc_call_t *c)
{
    grpc_op close_op;
    memset(&close_op, 0, sizeof close_op);
    close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    close_op.data.recv_close_on_server.cancelled = &c->cancelled;
    c->refs++;
    c->watching = 1;
    if (grpc_call_start_batch(c->call, &close_op, 1, &c->close_op, NULL) != GRPC_CALL_OK) {
        /* Not watched: held until answered or its deadline; the answer
         * takes the close. */
        MSR_DEBUG("%s: cannot watch %s from %s for its end", c->server->log_name,
                  msr_rpc_methods[c->method].name, msr_rpc_call_peer(c));
        c->refs--;
        c->watching = 0;
    }
}

/* The request's body has arrived (or the call ended first). */
static void call_recv_done(msr_rpc_op_t *op, int ok)
{
    msr_rpc_call_t *c = MSR_CONTAINER_OF(op, msr_rpc_call_t, recv_op);
    msr_rpc_server_t *s = c->server;
    const msr_rpc_method_info_t *m = &msr_rpc_methods[c->method];
    call_release(c); /* the receive op's reference; the hold remains */
    if (!ok || c->payload == NULL) {
        /* The client cancelled or went away mid-send, or closed its side
         * without a message: logged once the call ends and says which. */
        c->no_request = 1;
        msr_rpc_call_peer(c); /* while gRPC still knows it */
        msr_rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s: no request received", m->name);
        return;
    }
    size_t len = grpc_byte_buffer_length(c->payload);
    size_t limit = request_limit(s, c->method);
    if (len > limit) {
        MSR_WARN("%s: refused %s from %s: request of %zu bytes exceeds its limit of %zu",
                 s->log_name, m->name, msr_rpc_call_peer(c), len, limit);
        msr_rpc_call_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED,
                          "%s request of %zu bytes exceeds the limit of %zu bytes", m->name, len,
                          limit);
        return;
    }
    const char *nul = NULL;
    c->req = msr_rpc_unpack_checked(c->payload, m->request, &nul);
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
    if (nul != NULL) { /* refused, not cut at the NUL */
        MSR_WARN("%s: refused %s from %s: its %s contains a NUL byte", s->log_name, m->name,
                 msr_rpc_call_peer(c), nul);
        msr_rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s: %s contains a NUL byte", m->name,
                          nul);
        return;
    }
    if (c->req == NULL) {
        MSR_WARN("%s: malformed %s request from %s", s->log_name, m->name, msr_rpc_call_peer(c));
        msr_rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "malformed %s request",
                          m->request->short_name);
        return;
    }
    c->handed = 1;
    s->config.handler(s->config.arg, c, c->method, c->req);
    if (c->owned) /* held: it stays valid on the hold's reference */
        call_watch_close(c);
}

/* A call has arrived with its metadata only: the token is checked before
 * a byte of its body is read, so a refused call costs no more than gRPC's
 * flow-control window. */
static void call_request_done(msr_rpc_op_t *op, int ok)
{
    msr_rpc_call_t *c = MSR_CONTAINER_OF(op, msr_rpc_call_t, request_op);
    msr_rpc_server_t *s = c->server;
    if (!ok) {
        /* The server is shutting down: no call arrived. */
        c->call = NULL;
        call_release(c);
        return;
    }
    if (!atomic_load(&s->shutting_down))
        server_post_request(s, c->method);
    s->calls[c->method]++;
    c->started = msr_now_ns();
    /* The request op's reference becomes the hold until it is answered;
     * the client's going away is watched only if the handler holds it
     * (call_watch_close), else the answer takes the close. */
    c->owned = 1;
    /* A tokenless method's request carries its own proof, checked by the
     * handler; it does not make the connection an authenticated one. */
    int tokenless = (s->config.tokenless_methods >> c->method) & 1u;
    if (!tokenless && !msr_rpc_token_matches(s->token, &c->md)) {
        log_refusal(s, c);
        msr_rpc_call_fail(c, GRPC_STATUS_PERMISSION_DENIED,
                          "refused: missing or wrong job token (%s)", MSR_TOKEN_METADATA);
        return;
    }
    if (s->acceptor) {
        /* gRPC names our listener's connections "fd:N" */
        char *raw = grpc_call_get_peer(c->call);
        if (!tokenless)
            msr_rpc_acceptor_authenticated(s->acceptor, raw);
        c->peer = raw;
        char real[96];
        if (raw && msr_rpc_acceptor_peer(s->acceptor, raw, real, sizeof real) == 0) {
            gpr_free(c->peer);
            c->peer = gpr_strdup(real);
        }
    }
    grpc_op recv;
    memset(&recv, 0, sizeof recv);
    recv.op = GRPC_OP_RECV_MESSAGE;
    recv.data.recv_message.recv_message = &c->payload;
    c->refs++;
    if (grpc_call_start_batch(c->call, &recv, 1, &c->recv_op, NULL) != GRPC_CALL_OK) {
        c->refs--;
        msr_rpc_call_fail(c, GRPC_STATUS_INTERNAL, "cannot read the request");
    }
}

static void server_post_request(msr_rpc_server_t *s, msr_rpc_method_t method)
{
    msr_rpc_call_t *c = msr_calloc(1, sizeof *c);
    if (c == NULL) {
        MSR_ERROR("%s: out of memory; %s calls are no longer accepted", s->log_name,
                  msr_rpc_methods[method].name);
        return;
    }
    c->server = s;
    c->method = method;
    c->refs = 1;
    c->request_op.done = call_request_done;
    c->recv_op.done = call_recv_done;
    c->close_op.done = call_close_done;
    c->send_op.done = call_send_done;
    grpc_metadata_array_init(&c->md);
    msr_list_push_back(&s->live, &c->link);
    grpc_call_error err = grpc_server_request_registered_call(
        s->server, s->method_handles[method], &c->call, &c->deadline, &c->md, NULL, s->loop->cq,
        s->loop->cq, &c->request_op);
    if (err != GRPC_CALL_OK) {
        MSR_ERROR("%s: cannot accept %s calls: %s", s->log_name, msr_rpc_methods[method].name,
                  grpc_call_error_to_string(err));
        c->call = NULL;
        call_release(c);
    }
}

static void server_shutdown_done(msr_rpc_op_t *op, int ok)
{
    (void)ok;
    msr_rpc_server_t *s = MSR_CONTAINER_OF(op, msr_rpc_server_t, shutdown_op);
    s->shutdown_done = 1;
}

/* Connections that have not finished their HTTP/2 (and TLS) handshake in
 * this long are closed: an idle TCP connection holds a descriptor. */
#define SERVER_HANDSHAKE_TIMEOUT_MS 10000
/* Connections without a call for this long are closed (GOAWAY); clients
 * reconnect on their next call. Long polls keep busy connections open. */
#define SERVER_IDLE_TIMEOUT_MS      60000

/* The server's channel arguments, in args (at least 12 slots). own_accept:
 * our acceptor hands gRPC its connections (no listener, no handshake of
 * gRPC's: the acceptor's grace period bounds a silent connection). */
static size_t server_args(const msr_rpc_server_t *s, int own_accept, grpc_arg *args)
{
    int max = s->max_message > (size_t)INT32_MAX ? INT32_MAX : (int)s->max_message;
    size_t n = 0;
    /* Every argument costs each connection: four of gRPC's filters copy
     * the whole list when a connection's channel is built. Defaults are
     * left out (a server's sends are unlimited by default). */
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = max}};
    /* A second coordinator on the same port must fail to bind. */
    if (!own_accept)
        args[n++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_ALLOW_REUSEPORT, {.integer = 0}};
    args[n++] = (grpc_arg){
        GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, {.integer = 500}};
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, "grpc.http2.max_ping_strikes", {.integer = 0}};
    if (!own_accept)
        args[n++] = (grpc_arg){GRPC_ARG_INTEGER,
                               GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                               {.integer = SERVER_HANDSHAKE_TIMEOUT_MS}};
    args[n++] = (grpc_arg){
        GRPC_ARG_INTEGER, GRPC_ARG_MAX_CONNECTION_IDLE_MS, {.integer = SERVER_IDLE_TIMEOUT_MS}};
    /* gRPC's bandwidth-delay probing grows the window every new stream
     * starts with to hundreds of megabytes on a fast link: a client could
     * then push that much into a call before its token is checked. A fixed
     * window bounds what an unread call can cost. */
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_BDP_PROBE, {.integer = 0}};
    /* channelz's records (a socket node per connection, counters and a
     * timestamp per call) cost about a third of a connection's setup and
     * nothing here reads them. */
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_ENABLE_CHANNELZ, {.integer = 0}};
    return n;
}

/* The server's TLS credentials when config asks for TLS (*creds_p NULL
 * otherwise): with a CA, every client must show a certificate it signed. */
static msr_status_t server_tls_creds(const msr_rpc_server_t *s, const msr_rpc_tls_t *tls,
                                     grpc_server_credentials **creds_p)
{
    *creds_p = NULL;
    if (!msr_rpc_tls_enabled(tls))
        return MSR_OK;
    msr_rpc_pem_t pem;
    msr_status_t st = msr_rpc_pem_read(tls, &pem);
    if (st != MSR_OK)
        return st;
    if (pem.cert == NULL) {
        MSR_ERROR("%s: TLS needs a certificate and key for the server", s->log_name);
        msr_rpc_pem_free(&pem);
        return MSR_ERR_INVALID_ARG;
    }
    grpc_ssl_pem_key_cert_pair pair = {pem.key, pem.cert};
    *creds_p = grpc_ssl_server_credentials_create_ex(
        pem.ca, &pair, 1,
        pem.ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
    msr_rpc_pem_free(&pem);
    if (*creds_p == NULL) {
        MSR_ERROR("%s: gRPC refused the TLS certificate or key", s->log_name);
        return MSR_ERR_INVALID_ARG;
    }
    return MSR_OK;
}

msr_status_t msr_rpc_server_create(msr_rpc_loop_t *loop, const msr_rpc_server_config_t *config,
                                   int *port_p, msr_rpc_server_t **server_p)
{
    msr_status_t st = MSR_ERR_NO_MEMORY;
    grpc_server_credentials *creds = NULL;
    msr_rpc_server_t *s = msr_calloc(1, sizeof *s);
    if (s == NULL)
        return MSR_ERR_NO_MEMORY;
    s->loop = loop;
    s->config = *config;
    msr_list_init(&s->live);
    s->shutdown_op.done = server_shutdown_done;
    s->max_message = config->max_message ? config->max_message : MSR_RPC_MAX_MESSAGE_DEFAULT;
    s->config.tls = NULL; /* read below, not kept */
    s->log_name = msr_strdup(config->log_name ? config->log_name : "server");
    if (s->log_name == NULL)
        goto err_free;
    if (config->token && *config->token) {
        s->token = msr_strdup(config->token);
        if (s->token == NULL)
            goto err_free;
    }
    st = server_tls_creds(s, config->tls, &creds);
    if (st != MSR_OK)
        goto err_free;
    msr_rpc_library_ref();
    if (creds == NULL)
        creds = grpc_insecure_server_credentials_create();
    int own_accept = config->max_connections > 0 && config->max_unauth_per_host > 0 &&
                     !msr_rpc_tls_enabled(config->tls) && strncmp(config->address, "unix:", 5) != 0;
    grpc_arg args[12];
    grpc_channel_args cargs = {server_args(s, own_accept, args), args};
    s->server = grpc_server_create(&cargs, NULL);
    if (s->server == NULL) {
        st = MSR_ERR_INTERNAL;
        goto err_lib;
    }
    grpc_server_register_completion_queue(s->server, loop->cq, NULL);
    for (int m = 0; m < MSR_RPC_METHOD_COUNT; m++)
        s->method_handles[m] = grpc_server_register_method(s->server, msr_rpc_methods[m].path, NULL,
                                                           GRPC_SRM_PAYLOAD_NONE, 0);
    st = msr_rpc_unknown_create(s->server, loop->cq, s->token, s->log_name, &s->unknown);
    if (st != MSR_OK)
        goto err_server;
    int port = 0;
    if (!own_accept) {
        port = grpc_server_add_http2_port(s->server, config->address, creds);
        if (port == 0) {
            st = MSR_ERR_ADDR_IN_USE;
            goto err_server;
        }
    }
    grpc_server_credentials_release(creds);
    creds = NULL;
    grpc_server_start(s->server);
    if (own_accept) {
        msr_rpc_acceptor_config_t ac = {
            .address = config->address,
            .max_total = config->max_connections,
            .max_unauth_per_host = config->max_unauth_per_host,
            .grace_ms = config->unauth_grace_ms > 0 ? config->unauth_grace_ms : 5000,
            .log_name = s->log_name,
        };
        st = msr_rpc_acceptor_start(s->server, &ac, &port, &s->acceptor);
        if (st != MSR_OK)
            goto err_started;
    }
    /* Several accept slots per method keep bursts (every node joining at
     * once) from queueing behind one. */
    for (int m = 0; m < MSR_RPC_METHOD_COUNT; m++)
        for (int k = 0; k < 4; k++)
            server_post_request(s, (msr_rpc_method_t)m);
    msr_rpc_unknown_start(s->unknown);
    if (port_p)
        *port_p = strncmp(config->address, "unix:", 5) == 0 ? 0 : port;
    *server_p = s;
    return MSR_OK;

err_started:
    grpc_server_shutdown_and_notify(s->server, loop->cq, &s->shutdown_op);
    grpc_server_cancel_all_calls(s->server);
    while (!s->shutdown_done && msr_rpc_loop_poll(loop, msr_deadline_in_ms(1000)) >= 0) {
    }
err_server:
    grpc_server_destroy(s->server);
    msr_rpc_unknown_destroy(s->unknown);
err_lib:
    if (creds)
        grpc_server_credentials_release(creds);
    msr_rpc_library_unref();
err_free:
    msr_free(s->token);
    msr_free(s->log_name);
    msr_free(s);
    return st;
}

void msr_rpc_server_shutdown(msr_rpc_server_t *s)
{
    if (atomic_exchange(&s->shutting_down, 1))
        return;
    /* No new connections; those already made are gRPC's to close. */
    if (s->acceptor)
        msr_rpc_acceptor_stop(s->acceptor);
    msr_rpc_unknown_stop(s->unknown);
    grpc_server_shutdown_and_notify(s->server, s->loop->cq, &s->shutdown_op);
    grpc_server_cancel_all_calls(s->server);
}

void msr_rpc_server_destroy(msr_rpc_server_t *s)
{
    if (s == NULL)
        return;
    msr_rpc_server_shutdown(s);
    while (!s->shutdown_done || !msr_list_empty(&s->live) || msr_rpc_unknown_busy(s->unknown)) {
        if (msr_rpc_loop_poll(s->loop, msr_deadline_in_ms(1000)) < 0)
            break;
    }
    grpc_server_destroy(s->server);
    msr_rpc_unknown_destroy(s->unknown);
    msr_rpc_acceptor_destroy(s->acceptor);
    msr_rpc_library_unref();
    msr_free(s->token);
    msr_free(s->log_name);
    msr_free(s);
}

uint64_t msr_rpc_server_calls(const msr_rpc_server_t *s, msr_rpc_method_t method)
{
    return (unsigned)method < MSR_RPC_METHOD_COUNT ? s->calls[method] : 0;
}

uint64_t msr_rpc_server_unknown_calls(const msr_rpc_server_t *s)
{
    return msr_rpc_unknown_calls(s->unknown);
}

msr_status_t msr_rpc_call_forward(msr_rpc_call_t *call, const msr_rpc_async_t *a)
{
    if (a->status == MSR_OK && a->raw_) {
        grpc_byte_buffer *copy = grpc_byte_buffer_copy(a->raw_); /* references the slices */
        if (copy == NULL) {
            call_send(call, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return MSR_ERR_NO_MEMORY;
        }
        return call_send(call, copy, GRPC_STATUS_OK, NULL);
    }
    int code = a->grpc_code == GRPC_STATUS_OK ? GRPC_STATUS_INTERNAL : a->grpc_code;
    return call_send(call, NULL, (grpc_status_code)code,
                     a->err[0] ? a->err : "upstream call failed");
}

msr_rpc_method_t msr_rpc_call_method(const msr_rpc_call_t *call)
{
    return call->method;
}

uint64_t msr_rpc_call_started(const msr_rpc_call_t *call)
{
    return call->started;
}

void *msr_rpc_call_handler_arg(const msr_rpc_call_t *call)
{
    return call->server->config.arg;
}
