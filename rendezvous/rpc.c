/* gRPC C core and protobuf-c glue: loop, server and client calls. */
#include "rendezvous/rpc.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/string_util.h>
#include <grpc/support/time.h>

#include "base/alloc.h"
#include "base/list.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "rendezvous/rpc_accept.h"

/* ---- methods and messages ---- */

#define METHOD(service, name, msg)                                           \
    {                                                                        \
        "/msr." service "/" #name, #name, &msr__##msg##_request__descriptor, \
            &msr__##msg##_response__descriptor                               \
    }

const msr_rpc_method_info_t msr_rpc_methods[MSR_RPC_METHOD_COUNT] = {
    [MSR_RPC_JOIN] = METHOD("Coordinator", Join, join),
    [MSR_RPC_HEARTBEAT] = METHOD("Coordinator", Heartbeat, heartbeat),
    [MSR_RPC_REPORT] = METHOD("Coordinator", Report, report),
    [MSR_RPC_LEAVE] = METHOD("Coordinator", Leave, leave),
    [MSR_RPC_STATUS] = METHOD("Coordinator", Status, status),
    [MSR_RPC_SET] = METHOD("Store", Set, set),
    [MSR_RPC_GET] = METHOD("Store", Get, get),
    [MSR_RPC_ADD] = METHOD("Store", Add, add),
    [MSR_RPC_COMPARE_SET] = METHOD("Store", CompareSet, compare_set),
    [MSR_RPC_DELETE] = METHOD("Store", Delete, delete),
    [MSR_RPC_BARRIER] = METHOD("Store", Barrier, barrier),
    [MSR_RPC_ALLGATHER] = METHOD("Store", Allgather, allgather),
    [MSR_RPC_BEAT] = METHOD("Agent", Beat, beat),
};

static void *pb_alloc(void *data, size_t size)
{
    (void)data;
    return msr_malloc(size);
}

static void pb_free(void *data, void *ptr)
{
    (void)data;
    msr_free(ptr);
}

ProtobufCAllocator msr_rpc_pb_allocator = {pb_alloc, pb_free, NULL};

void msr_rpc_message_free(ProtobufCMessage *msg)
{
    if (msg)
        protobuf_c_message_free_unpacked(msg, &msr_rpc_pb_allocator);
}

ProtobufCMessage *msr_rpc_request_unpack(msr_rpc_method_t method, const uint8_t *data, size_t len)
{
    if ((unsigned)method >= MSR_RPC_METHOD_COUNT)
        return NULL;
    return protobuf_c_message_unpack(msr_rpc_methods[method].request, &msr_rpc_pb_allocator, len,
                                     data);
}

int msr_rpc_key_valid(const char *key)
{
    if (key == NULL || *key == '\0')
        return 0;
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++, n++)
        if (*p < 0x20 || *p == 0x7f || n >= MSR_KEY_MAX)
            return 0;
    return 1;
}

msr_status_t msr_rpc_status_from_grpc(int code)
{
    switch ((grpc_status_code)code) {
    case GRPC_STATUS_OK:
        return MSR_OK;
    case GRPC_STATUS_CANCELLED:
        return MSR_ERR_CANCELED;
    case GRPC_STATUS_INVALID_ARGUMENT:
        return MSR_ERR_INVALID_ARG;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return MSR_ERR_TIMEOUT;
    case GRPC_STATUS_NOT_FOUND:
        return MSR_ERR_NOT_FOUND;
    case GRPC_STATUS_ALREADY_EXISTS:
        return MSR_ERR_EXISTS;
    case GRPC_STATUS_PERMISSION_DENIED:
    case GRPC_STATUS_UNAUTHENTICATED:
        return MSR_ERR_PERMISSION;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return MSR_ERR_REFUSED;
    case GRPC_STATUS_FAILED_PRECONDITION:
        return MSR_ERR_CONFLICT;
    case GRPC_STATUS_ABORTED:
        return MSR_ERR_STALE;
    case GRPC_STATUS_OUT_OF_RANGE:
        return MSR_ERR_OVERFLOW;
    case GRPC_STATUS_UNIMPLEMENTED:
        return MSR_ERR_UNSUPPORTED;
    case GRPC_STATUS_UNAVAILABLE:
        return MSR_ERR_UNREACHABLE;
    default:
        return MSR_ERR_INTERNAL;
    }
}

/* ---- library init ---- */

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static int lib_refs;

/* gRPC's own messages are mostly about peers that went away, which msrun
 * reports itself in its own words: keep them at debug level. */
static void grpc_log_to_msr(gpr_log_func_args *args)
{
    MSR_DEBUG("grpc: %s (%s:%d)", args->message, args->file, args->line);
}

/* Debian's abseil (under gRPC) is built with absl::Mutex deadlock detection
 * on: every lock records edges in one global graph, so gRPC's cost grows
 * with the number of mutexes alive -- about one set per connection. With
 * 1024 connections that made connecting 2.5x slower. The switch is a C++
 * function (absl::SetMutexDeadlockDetectionMode(kIgnore = 0)); call it when
 * the library exports it. */
static void absl_deadlock_detection_off(void)
{
    static const char *const names[] = {
        "_ZN4absl7debian329SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
        "_ZN4absl7debian229SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
        "_ZN4absl7debian429SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
        "_ZN4absl29SetMutexDeadlockDetectionModeENS_15OnDeadlockCycleE",
    };
    for (size_t i = 0; i < MSR_ARRAY_SIZE(names); i++) {
        void *sym = dlsym(RTLD_DEFAULT, names[i]);
        if (sym) {
            void (*set_mode)(int);
            memcpy(&set_mode, &sym, sizeof set_mode);
            set_mode(0);
            return;
        }
    }
}

void msr_rpc_library_ref(void)
{
    pthread_mutex_lock(&lib_lock);
    if (lib_refs++ == 0) {
        absl_deadlock_detection_off();
        gpr_set_log_function(grpc_log_to_msr);
        grpc_init();
    }
    pthread_mutex_unlock(&lib_lock);
}

void msr_rpc_library_unref(void)
{
    pthread_mutex_lock(&lib_lock);
    if (--lib_refs == 0)
        grpc_shutdown();
    pthread_mutex_unlock(&lib_lock);
}

/* ---- time ---- */

static gpr_timespec to_gpr_deadline(uint64_t deadline)
{
    if (deadline == MSR_DEADLINE_NEVER)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    if (deadline == 0) /* do not wait (gRPC rounds "now" up to a 1 ms wait) */
        return gpr_inf_past(GPR_CLOCK_MONOTONIC);
    uint64_t now = msr_now_ns();
    int64_t left = deadline > now ? (int64_t)(deadline - now) : 0;
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos(left, GPR_TIMESPAN));
}

static uint64_t from_gpr_deadline(gpr_timespec ts)
{
    if (gpr_time_cmp(ts, gpr_inf_future(ts.clock_type)) == 0)
        return MSR_DEADLINE_NEVER;
    gpr_timespec mono = gpr_convert_clock_type(ts, GPR_CLOCK_MONOTONIC);
    gpr_timespec left = gpr_time_sub(mono, gpr_now(GPR_CLOCK_MONOTONIC));
    int64_t ns = (int64_t)left.tv_sec * 1000000000ll + left.tv_nsec;
    uint64_t now = msr_now_ns();
    return ns <= 0 ? now : now + (uint64_t)ns;
}

/* ---- byte buffers ---- */

static grpc_byte_buffer *pack_message(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice slice;
    if (len == 0) {
        slice = grpc_empty_slice();
    } else {
        uint8_t *data = malloc(len);
        if (data == NULL)
            return NULL;
        protobuf_c_message_pack(msg, data);
        slice = grpc_slice_new(data, len, free);
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

/* Unpacks a received buffer as desc; NULL when malformed (or bb is NULL). */
static ProtobufCMessage *unpack_buffer(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc)
{
    if (bb == NULL)
        return NULL;
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return NULL;
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    ProtobufCMessage *msg = protobuf_c_message_unpack(
        desc, &msr_rpc_pb_allocator, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
    grpc_slice_unref(all);
    return msg;
}

static void slice_to_cstr(grpc_slice s, char *out, size_t outlen)
{
    if (out == NULL || outlen == 0)
        return;
    size_t n = GRPC_SLICE_LENGTH(s);
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, GRPC_SLICE_START_PTR(s), n);
    out[n] = '\0';
}

/* ---- loop ---- */

struct msr_rpc_loop {
    grpc_completion_queue *cq;
    int shut;                   /* the queue reported GRPC_QUEUE_SHUTDOWN */
    atomic_int shutdown_called; /* grpc_completion_queue_shutdown was called */
};

msr_status_t msr_rpc_loop_create(msr_rpc_loop_t **loop_p)
{
    msr_rpc_loop_t *loop = msr_calloc(1, sizeof *loop);
    if (loop == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_rpc_library_ref();
    loop->cq = grpc_completion_queue_create_for_next(NULL);
    if (loop->cq == NULL) {
        msr_rpc_library_unref();
        msr_free(loop);
        return MSR_ERR_INTERNAL;
    }
    *loop_p = loop;
    return MSR_OK;
}

int msr_rpc_loop_poll(msr_rpc_loop_t *loop, uint64_t deadline)
{
    if (loop->shut)
        return -1;
    grpc_event ev = grpc_completion_queue_next(loop->cq, to_gpr_deadline(deadline), NULL);
    switch (ev.type) {
    case GRPC_OP_COMPLETE: {
        msr_rpc_op_t *op = ev.tag;
        op->done(op, ev.success);
        return 1;
    }
    case GRPC_QUEUE_SHUTDOWN:
        loop->shut = 1;
        return -1;
    default:
        return 0;
    }
}

void msr_rpc_loop_shutdown(msr_rpc_loop_t *loop)
{
    if (!atomic_exchange(&loop->shutdown_called, 1))
        grpc_completion_queue_shutdown(loop->cq);
}

void msr_rpc_loop_destroy(msr_rpc_loop_t *loop)
{
    if (loop == NULL)
        return;
    msr_rpc_loop_shutdown(loop);
    while (!loop->shut)
        msr_rpc_loop_poll(loop, MSR_DEADLINE_NEVER);
    grpc_completion_queue_destroy(loop->cq);
    msr_rpc_library_unref();
    msr_free(loop);
}

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
    int refs;       /* ops in flight + 1 while unanswered */
    int owned;      /* unanswered: this layer or the handler must answer it */
    int handed;     /* the handler has it (the cancel callback applies) */
    int no_request; /* answered for want of a request: logged when it ends */
    ProtobufCMessage *req;
    void *data;
    char *peer;
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
    call_release(c);
}

static void call_close_done(msr_rpc_op_t *op, int ok)
{
    (void)ok;
    msr_rpc_call_t *c = MSR_CONTAINER_OF(op, msr_rpc_call_t, close_op);
    if (c->no_request) {
        /* Only now is it known whether the client cancelled the call (a
         * client that cancels mid-send looks like one that sent nothing). */
        if (c->cancelled)
            MSR_DEBUG("%s: %s from %s cancelled while sending its request", c->server->log_name,
                      msr_rpc_methods[c->method].name, msr_rpc_call_peer(c));
        else
            MSR_WARN("%s: %s from %s sent no request", c->server->log_name,
                     msr_rpc_methods[c->method].name, msr_rpc_call_peer(c));
    }
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
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    n++;
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
    grpc_byte_buffer *bb = pack_message(resp);
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
    return from_gpr_deadline(call->deadline);
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

static int token_matches(msr_rpc_server_t *s, const grpc_metadata_array *md)
{
    if (s->token == NULL)
        return 1;
    size_t tlen = strlen(s->token);
    for (size_t i = 0; i < md->count; i++) {
        const grpc_metadata *m = &md->metadata[i];
        if (grpc_slice_str_cmp(m->key, MSR_TOKEN_METADATA) != 0)
            continue;
        if (GRPC_SLICE_LENGTH(m->value) != tlen)
            return 0;
        /* Constant-time comparison: the token is a secret. */
        const unsigned char *a = GRPC_SLICE_START_PTR(m->value);
        unsigned char diff = 0;
        for (size_t k = 0; k < tlen; k++)
            diff |= (unsigned char)(a[k] ^ (unsigned char)s->token[k]);
        return diff == 0;
    }
    return 0;
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
        return s->max_message;
    default:
        return MSR_RPC_SMALL_REQUEST_MAX < s->max_message ? MSR_RPC_SMALL_REQUEST_MAX
                                                          : s->max_message;
    }
}

/* "ipv4:10.0.0.7:41234" -> "10.0.0.7": refusals are counted per host. */
static void peer_host(const char *peer, char *out, size_t outlen)
{
    const char *p = strchr(peer, ':');
    p = p ? p + 1 : peer;
    const char *end = strrchr(p, ':');
    size_t n = end && end > p ? (size_t)(end - p) : strlen(p);
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

/* Logs a refused call unless that would flood the log: the first refusal
 * of a host not seen lately is logged (at most 10 lines an interval), and
 * otherwise one line an interval says how many were left out. */
static void log_refusal(msr_rpc_server_t *s, msr_rpc_call_t *c)
{
    const char *peer = msr_rpc_call_peer(c);
    char host[64];
    peer_host(peer, host, sizeof host);
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

/* The request's body has arrived (or the call ended first). */
static void call_recv_done(msr_rpc_op_t *op, int ok)
{
    msr_rpc_call_t *c = MSR_CONTAINER_OF(op, msr_rpc_call_t, recv_op);
    msr_rpc_server_t *s = c->server;
    const msr_rpc_method_info_t *m = &msr_rpc_methods[c->method];
    if (!c->owned) {
        /* The call ended while its body was on the way. */
        MSR_DEBUG("%s: %s from %s cancelled before its request arrived", s->log_name, m->name,
                  msr_rpc_call_peer(c));
        call_release(c);
        return;
    }
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
    c->req = unpack_buffer(c->payload, m->request);
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
    if (c->req == NULL) {
        MSR_WARN("%s: malformed %s request from %s", s->log_name, m->name, msr_rpc_call_peer(c));
        msr_rpc_call_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "malformed %s request",
                          m->request->short_name);
        return;
    }
    c->handed = 1;
    s->config.handler(s->config.arg, c, c->method, c->req);
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
    /* Watch for the end of the call; the request op's reference passes to
     * the close op, and the hold until it is answered is one more. */
    grpc_op close_op;
    memset(&close_op, 0, sizeof close_op);
    close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    close_op.data.recv_close_on_server.cancelled = &c->cancelled;
    if (grpc_call_start_batch(c->call, &close_op, 1, &c->close_op, NULL) != GRPC_CALL_OK) {
        call_release(c);
        return;
    }
    c->refs++;
    c->owned = 1;
    if (!token_matches(s, &c->md)) {
        log_refusal(s, c);
        msr_rpc_call_fail(c, GRPC_STATUS_PERMISSION_DENIED,
                          "refused: missing or wrong job token (%s)", MSR_TOKEN_METADATA);
        return;
    }
    if (s->acceptor) {
        /* gRPC names our listener's connections "fd:N" */
        char *raw = grpc_call_get_peer(c->call);
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

/* The server's channel arguments, in args (at least 8 slots). */
static size_t server_args(const msr_rpc_server_t *s, grpc_arg *args)
{
    int max = s->max_message > (size_t)INT32_MAX ? INT32_MAX : (int)s->max_message;
    size_t n = 0;
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = max}};
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = -1}};
    /* A second coordinator on the same port must fail to bind. */
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_ALLOW_REUSEPORT, {.integer = 0}};
    args[n++] = (grpc_arg){
        GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, {.integer = 500}};
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, "grpc.http2.max_ping_strikes", {.integer = 0}};
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
    return n;
}

static grpc_channel_args *common_args(int own)
{
    /* clang-format off */
    /* Reconnect to a restarted coordinator within about a second; a receive
     * window large enough for an allgather's answer without waiting for
     * window updates on a fresh connection. */
#define CLIENT_ARGS                                                                 \
    {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = -1}},       \
    {GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = -1}},          \
    {GRPC_ARG_INTEGER, GRPC_ARG_ENABLE_HTTP_PROXY, {.integer = 0}},                 \
    {GRPC_ARG_INTEGER, GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, {.integer = 100}},    \
    {GRPC_ARG_INTEGER, GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, {.integer = 100}},        \
    {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, {.integer = 1000}},      \
    {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, {.integer = 4 << 20}}
    /* clang-format on */
    static grpc_arg client_args[] = {CLIENT_ARGS};
    /* the same plus a subchannel pool of the channel's own: its own connection */
    static grpc_arg own_args[] = {
        CLIENT_ARGS, {GRPC_ARG_INTEGER, GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, {.integer = 1}}};
#undef CLIENT_ARGS
    static grpc_channel_args ca = {MSR_ARRAY_SIZE(client_args), client_args};
    static grpc_channel_args oa = {MSR_ARRAY_SIZE(own_args), own_args};
    return own ? &oa : &ca;
}

/* ---- TLS ---- */

int msr_rpc_tls_enabled(const msr_rpc_tls_t *tls)
{
    return tls && ((tls->cert && *tls->cert) || (tls->key && *tls->key) || (tls->ca && *tls->ca));
}

/* Reads a PEM file whole (NUL-terminated); NULL for an empty path. Logs and
 * returns MSR_ERR_INVALID_ARG when it cannot be read. */
static msr_status_t read_pem(const char *what, const char *path, char **out_p)
{
    *out_p = NULL;
    if (path == NULL || *path == '\0')
        return MSR_OK;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        MSR_ERROR("cannot read the TLS %s '%s': %s", what, path, strerror(errno));
        return MSR_ERR_INVALID_ARG;
    }
    size_t cap = 1 << 20, n = 0; /* PEM files are a few kilobytes */
    char *buf = msr_malloc(cap + 1);
    if (buf == NULL) {
        fclose(f);
        return MSR_ERR_NO_MEMORY;
    }
    n = fread(buf, 1, cap + 1, f);
    int bad = ferror(f) || n == 0 || n > cap;
    fclose(f);
    if (bad || strstr((buf[n < cap ? n : cap] = '\0', buf), "-----BEGIN") == NULL) {
        MSR_ERROR("the TLS %s '%s' is not a PEM file", what, path);
        msr_free(buf);
        return MSR_ERR_INVALID_ARG;
    }
    *out_p = buf;
    return MSR_OK;
}

typedef struct pem_set {
    char *cert, *key, *ca;
} pem_set_t;

static void pem_set_free(pem_set_t *p)
{
    msr_free(p->cert);
    if (p->key) {
        memset(p->key, 0, strlen(p->key)); /* a private key */
        msr_free(p->key);
    }
    msr_free(p->ca);
}

/* Reads the files of tls; a cert needs its key and the other way round. */
static msr_status_t pem_set_read(const msr_rpc_tls_t *tls, pem_set_t *p)
{
    memset(p, 0, sizeof *p);
    msr_status_t st;
    if ((st = read_pem("certificate", tls->cert, &p->cert)) != MSR_OK ||
        (st = read_pem("key", tls->key, &p->key)) != MSR_OK ||
        (st = read_pem("CA", tls->ca, &p->ca)) != MSR_OK) {
        pem_set_free(p);
        return st;
    }
    if ((p->cert == NULL) != (p->key == NULL)) {
        MSR_ERROR("TLS needs both a certificate and its key (%s given alone)",
                  p->cert ? "the certificate" : "the key");
        pem_set_free(p);
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
    if (msr_rpc_tls_enabled(config->tls)) {
        pem_set_t pem;
        st = pem_set_read(config->tls, &pem);
        if (st != MSR_OK)
            goto err_free;
        if (pem.cert == NULL) {
            MSR_ERROR("%s: TLS needs a certificate and key for the server", s->log_name);
            pem_set_free(&pem);
            st = MSR_ERR_INVALID_ARG;
            goto err_free;
        }
        grpc_ssl_pem_key_cert_pair pair = {pem.key, pem.cert};
        /* With a CA, every client must show a certificate it signed. */
        creds = grpc_ssl_server_credentials_create_ex(
            pem.ca, &pair, 1,
            pem.ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            NULL);
        pem_set_free(&pem);
        if (creds == NULL) {
            MSR_ERROR("%s: gRPC refused the TLS certificate or key", s->log_name);
            st = MSR_ERR_INVALID_ARG;
            goto err_free;
        }
    }
    msr_rpc_library_ref();
    if (creds == NULL)
        creds = grpc_insecure_server_credentials_create();
    grpc_arg args[8];
    grpc_channel_args cargs = {server_args(s, args), args};
    s->server = grpc_server_create(&cargs, NULL);
    if (s->server == NULL) {
        st = MSR_ERR_INTERNAL;
        goto err_lib;
    }
    grpc_server_register_completion_queue(s->server, loop->cq, NULL);
    for (int m = 0; m < MSR_RPC_METHOD_COUNT; m++)
        s->method_handles[m] = grpc_server_register_method(s->server, msr_rpc_methods[m].path, NULL,
                                                           GRPC_SRM_PAYLOAD_NONE, 0);
    int own_accept = config->max_connections > 0 && config->max_unauth_per_host > 0 &&
                     !msr_rpc_tls_enabled(config->tls) && strncmp(config->address, "unix:", 5) != 0;
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
    grpc_server_shutdown_and_notify(s->server, s->loop->cq, &s->shutdown_op);
    grpc_server_cancel_all_calls(s->server);
}

void msr_rpc_server_destroy(msr_rpc_server_t *s)
{
    if (s == NULL)
        return;
    msr_rpc_server_shutdown(s);
    while (!s->shutdown_done || !msr_list_empty(&s->live)) {
        if (msr_rpc_loop_poll(s->loop, msr_deadline_in_ms(1000)) < 0)
            break;
    }
    grpc_server_destroy(s->server);
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

/* ---- client ---- */

struct msr_rpc_channel {
    grpc_channel *channel;
    char *target;
    grpc_slice token_key, token_value;
    int have_token;
    void *registered[MSR_RPC_METHOD_COUNT];
    pthread_mutex_t lock;
    grpc_completion_queue *idle_cqs[8]; /* pluck queues kept for reuse */
    int nidle;
};

/* "127.0.0.1:5000" is given to gRPC as "ipv4:127.0.0.1:5000" so that no DNS
 * resolver is involved for address literals. */
static char *channel_target(const char *target)
{
    const char *colon = strrchr(target, ':');
    if (strchr(target, ':') == colon && colon != NULL) {
        char host[64];
        size_t hl = (size_t)(colon - target);
        struct in_addr a;
        if (hl < sizeof host) {
            memcpy(host, target, hl);
            host[hl] = '\0';
            if (inet_pton(AF_INET, host, &a) == 1) {
                size_t n = strlen(target) + 6;
                char *t = msr_malloc(n);
                if (t)
                    snprintf(t, n, "ipv4:%s", target);
                return t;
            }
        }
    }
    return msr_strdup(target);
}

static msr_status_t channel_create(const char *target, const char *token, const msr_rpc_tls_t *tls,
                                   int own, msr_rpc_channel_t **channel_p);

msr_status_t msr_rpc_channel_create(const char *target, const char *token,
                                    msr_rpc_channel_t **channel_p)
{
    return channel_create(target, token, NULL, 0, channel_p);
}

msr_status_t msr_rpc_channel_create_own(const char *target, const char *token,
                                        msr_rpc_channel_t **channel_p)
{
    return channel_create(target, token, NULL, 1, channel_p);
}

msr_status_t msr_rpc_channel_create_tls(const char *target, const char *token,
                                        const msr_rpc_tls_t *tls, msr_rpc_channel_t **channel_p)
{
    return channel_create(target, token, tls, 0, channel_p);
}

/* The host part of "host:port", "[v6]:port" or "unix:/path" (the last has
 * none: ""). */
static void target_host(const char *target, char *out, size_t outlen)
{
    out[0] = '\0';
    if (strncmp(target, "unix:", 5) == 0)
        return;
    const char *start = target, *end = strrchr(target, ':');
    if (*start == '[') {
        start++;
        end = strchr(start, ']');
    }
    size_t n = end ? (size_t)(end - start) : strlen(start);
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, start, n);
    out[n] = '\0';
}

/* TLS credentials for a channel to target, and the name the server's
 * certificate must carry (in name). */
static msr_status_t channel_tls(const char *target, const msr_rpc_tls_t *tls,
                                grpc_channel_credentials **creds_p, char *name, size_t namelen)
{
    pem_set_t pem;
    msr_status_t st = pem_set_read(tls, &pem);
    if (st != MSR_OK)
        return st;
    grpc_ssl_pem_key_cert_pair pair = {pem.key, pem.cert};
    grpc_channel_credentials *creds =
        grpc_ssl_credentials_create(pem.ca, pem.cert ? &pair : NULL, NULL, NULL);
    pem_set_free(&pem);
    if (creds == NULL) {
        MSR_ERROR("gRPC refused the TLS files for %s", target);
        return MSR_ERR_INVALID_ARG;
    }
    if (tls->server_name && *tls->server_name)
        snprintf(name, namelen, "%s", tls->server_name);
    else
        target_host(target, name, namelen);
    *creds_p = creds;
    return MSR_OK;
}

static msr_status_t channel_create(const char *target, const char *token, const msr_rpc_tls_t *tls,
                                   int own, msr_rpc_channel_t **channel_p)
{
    if (target == NULL || *target == '\0')
        return MSR_ERR_INVALID_ARG;
    msr_rpc_channel_t *ch = msr_calloc(1, sizeof *ch);
    if (ch == NULL)
        return MSR_ERR_NO_MEMORY;
    ch->target = msr_strdup(target);
    char *gtarget = channel_target(target);
    if (ch->target == NULL || gtarget == NULL) {
        msr_free(gtarget);
        msr_free(ch->target);
        msr_free(ch);
        return MSR_ERR_NO_MEMORY;
    }
    msr_rpc_library_ref();
    grpc_channel_credentials *creds = NULL;
    char name[256] = "";
    if (msr_rpc_tls_enabled(tls)) {
        msr_status_t st = channel_tls(target, tls, &creds, name, sizeof name);
        if (st != MSR_OK) {
            msr_rpc_library_unref();
            msr_free(gtarget);
            msr_free(ch->target);
            msr_free(ch);
            return st;
        }
    } else {
        creds = grpc_insecure_credentials_create();
    }
    const grpc_channel_args *base = common_args(own);
    grpc_arg args[16];
    size_t n = base->num_args;
    memcpy(args, base->args, n * sizeof *args);
    if (name[0]) {
        /* The name checked against the server's certificate: the host the
         * user named (an IP address is matched against IP SANs). */
        args[n++] =
            (grpc_arg){GRPC_ARG_STRING, GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, {.string = name}};
        args[n++] = (grpc_arg){GRPC_ARG_STRING, GRPC_ARG_DEFAULT_AUTHORITY, {.string = name}};
    }
    grpc_channel_args cargs = {n, args};
    ch->channel = grpc_channel_create(gtarget, creds, &cargs);
    grpc_channel_credentials_release(creds);
    msr_free(gtarget);
    if (ch->channel == NULL) {
        msr_rpc_library_unref();
        msr_free(ch->target);
        msr_free(ch);
        return MSR_ERR_INTERNAL;
    }
    for (int m = 0; m < MSR_RPC_METHOD_COUNT; m++)
        ch->registered[m] =
            grpc_channel_register_call(ch->channel, msr_rpc_methods[m].path, NULL, NULL);
    if (token && *token) {
        ch->token_key = grpc_slice_from_static_string(MSR_TOKEN_METADATA);
        ch->token_value = grpc_slice_from_copied_string(token);
        ch->have_token = 1;
    }
    pthread_mutex_init(&ch->lock, NULL);
    *channel_p = ch;
    return MSR_OK;
}

void msr_rpc_channel_destroy(msr_rpc_channel_t *ch)
{
    if (ch == NULL)
        return;
    for (int i = 0; i < ch->nidle; i++) {
        grpc_completion_queue_shutdown(ch->idle_cqs[i]);
        grpc_completion_queue_destroy(ch->idle_cqs[i]);
    }
    grpc_channel_destroy(ch->channel);
    if (ch->have_token)
        grpc_slice_unref(ch->token_value);
    pthread_mutex_destroy(&ch->lock);
    msr_free(ch->target);
    msr_free(ch);
    msr_rpc_library_unref();
}

const char *msr_rpc_channel_target(const msr_rpc_channel_t *ch)
{
    return ch->target;
}

/* The state of one client call, sync or async. */
typedef struct client_call {
    grpc_call *call;
    grpc_metadata token;
    grpc_metadata_array initial_md, trailing_md;
    grpc_byte_buffer *request, *response;
    grpc_status_code code;
    grpc_slice details;
    const char *error_string;
} client_call_t;

/* Creates and starts a call. With ref_p, a reference on the grpc_call is
 * taken before the batch starts (the call may complete on another thread at
 * once) and stored there. */
static msr_status_t client_start(msr_rpc_channel_t *ch, grpc_completion_queue *cq,
                                 msr_rpc_method_t method, const ProtobufCMessage *req,
                                 uint64_t deadline, int wait_for_ready, client_call_t *cc,
                                 void *tag, void **ref_p)
{
    memset(cc, 0, sizeof *cc);
    cc->request = pack_message(req);
    if (cc->request == NULL)
        return MSR_ERR_NO_MEMORY;
    cc->call = grpc_channel_create_registered_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                                   ch->registered[method],
                                                   to_gpr_deadline(deadline), NULL);
    if (cc->call == NULL) {
        grpc_byte_buffer_destroy(cc->request);
        return MSR_ERR_INTERNAL;
    }
    grpc_metadata_array_init(&cc->initial_md);
    grpc_metadata_array_init(&cc->trailing_md);
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (ch->have_token) {
        cc->token.key = ch->token_key;
        cc->token.value = ch->token_value;
        ops[0].data.send_initial_metadata.count = 1;
        ops[0].data.send_initial_metadata.metadata = &cc->token;
    }
    ops[0].flags = wait_for_ready ? (GRPC_INITIAL_METADATA_WAIT_FOR_READY |
                                     GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET)
                                  : GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = cc->request;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &cc->initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &cc->response;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &cc->trailing_md;
    ops[5].data.recv_status_on_client.status = &cc->code;
    ops[5].data.recv_status_on_client.status_details = &cc->details;
    ops[5].data.recv_status_on_client.error_string = &cc->error_string;
    if (ref_p) {
        grpc_call_ref(cc->call);
        *ref_p = cc->call;
    }
    grpc_call_error err = grpc_call_start_batch(cc->call, ops, 6, tag, NULL);
    if (err != GRPC_CALL_OK) {
        if (ref_p) {
            grpc_call_unref(cc->call);
            *ref_p = NULL;
        }
        grpc_call_unref(cc->call);
        grpc_byte_buffer_destroy(cc->request);
        grpc_metadata_array_destroy(&cc->initial_md);
        grpc_metadata_array_destroy(&cc->trailing_md);
        return MSR_ERR_INTERNAL;
    }
    return MSR_OK;
}

/* Turns a finished call into a status and a parsed response; frees cc. */
static msr_status_t client_finish(msr_rpc_channel_t *ch, msr_rpc_method_t method, client_call_t *cc,
                                  int ok, ProtobufCMessage **resp_p, grpc_byte_buffer **raw_p,
                                  int *code_p, char *err, size_t errlen)
{
    msr_status_t st;
    if (code_p)
        *code_p = ok ? (int)cc->code : (int)GRPC_STATUS_INTERNAL;
    if (!ok) {
        st = MSR_ERR_INTERNAL;
        if (err)
            snprintf(err, errlen, "%s call to %s failed in gRPC", msr_rpc_methods[method].name,
                     ch->target);
    } else if (cc->code != GRPC_STATUS_OK) {
        st = msr_rpc_status_from_grpc(cc->code);
        char details[384];
        slice_to_cstr(cc->details, details, sizeof details);
        if (err) {
            if (cc->code == GRPC_STATUS_UNAVAILABLE)
                snprintf(err, errlen, "coordinator at %s unreachable (%s)", ch->target,
                         details[0] ? details : "connection failed");
            else if (cc->code == GRPC_STATUS_DEADLINE_EXCEEDED &&
                     grpc_channel_check_connectivity_state(ch->channel, 0) != GRPC_CHANNEL_READY)
                snprintf(err, errlen,
                         "%s call to %s: deadline passed before a connection was made (nothing "
                         "listens there, or the TLS handshake failed: check both sides' "
                         "--tls_* options)",
                         msr_rpc_methods[method].name, ch->target);
            else if (cc->code == GRPC_STATUS_DEADLINE_EXCEEDED && details[0] == '\0')
                snprintf(err, errlen, "%s call to %s: deadline passed",
                         msr_rpc_methods[method].name, ch->target);
            else
                snprintf(err, errlen, "%s", details[0] ? details : msr_status_str(st));
        }
    } else if (raw_p) {
        *raw_p = cc->response;
        cc->response = NULL;
        st = *raw_p ? MSR_OK : MSR_ERR_PROTOCOL;
        if (st != MSR_OK && code_p)
            *code_p = GRPC_STATUS_INTERNAL;
        if (st != MSR_OK && err)
            snprintf(err, errlen, "empty %s response from %s", msr_rpc_methods[method].name,
                     ch->target);
    } else {
        ProtobufCMessage *resp = unpack_buffer(cc->response, msr_rpc_methods[method].response);
        if (resp == NULL) {
            st = MSR_ERR_PROTOCOL;
            if (err)
                snprintf(err, errlen, "malformed %s response from %s", msr_rpc_methods[method].name,
                         ch->target);
        } else {
            st = MSR_OK;
            *resp_p = resp;
        }
    }
    if (cc->error_string)
        gpr_free((void *)cc->error_string);
    grpc_slice_unref(cc->details);
    grpc_metadata_array_destroy(&cc->initial_md);
    grpc_metadata_array_destroy(&cc->trailing_md);
    grpc_byte_buffer_destroy(cc->request);
    if (cc->response)
        grpc_byte_buffer_destroy(cc->response);
    grpc_call_unref(cc->call);
    return st;
}

static grpc_completion_queue *channel_take_cq(msr_rpc_channel_t *ch)
{
    grpc_completion_queue *cq = NULL;
    pthread_mutex_lock(&ch->lock);
    if (ch->nidle > 0)
        cq = ch->idle_cqs[--ch->nidle];
    pthread_mutex_unlock(&ch->lock);
    return cq ? cq : grpc_completion_queue_create_for_pluck(NULL);
}

static void channel_give_cq(msr_rpc_channel_t *ch, grpc_completion_queue *cq)
{
    pthread_mutex_lock(&ch->lock);
    if (ch->nidle < (int)MSR_ARRAY_SIZE(ch->idle_cqs)) {
        ch->idle_cqs[ch->nidle++] = cq;
        cq = NULL;
    }
    pthread_mutex_unlock(&ch->lock);
    if (cq) {
        grpc_completion_queue_shutdown(cq);
        grpc_completion_queue_destroy(cq);
    }
}

msr_status_t msr_rpc_call(msr_rpc_channel_t *ch, msr_rpc_method_t method,
                          const ProtobufCMessage *req, uint64_t deadline, int wait_for_ready,
                          ProtobufCMessage **resp_p, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    grpc_completion_queue *cq = channel_take_cq(ch);
    if (cq == NULL)
        return MSR_ERR_NO_MEMORY;
    client_call_t cc;
    msr_status_t st = client_start(ch, cq, method, req, deadline, wait_for_ready, &cc, &cc, NULL);
    if (st != MSR_OK) {
        channel_give_cq(ch, cq);
        if (err)
            snprintf(err, errlen, "cannot start %s call: %s", msr_rpc_methods[method].name,
                     msr_status_str(st));
        return st;
    }
    /* The call's own deadline bounds this wait. */
    grpc_event ev = grpc_completion_queue_pluck(cq, &cc, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    st = client_finish(ch, method, &cc, ev.type == GRPC_OP_COMPLETE && ev.success, resp_p, NULL,
                       NULL, err, errlen);
    channel_give_cq(ch, cq);
    return st;
}

static void async_done(msr_rpc_op_t *op, int ok)
{
    msr_rpc_async_t *a = MSR_CONTAINER_OF(op, msr_rpc_async_t, op);
    client_call_t *cc = a->call_;
    a->resp = NULL;
    grpc_byte_buffer *raw = NULL;
    a->status = client_finish(a->priv_, a->method, cc, ok, &a->resp, a->raw ? &raw : NULL,
                              &a->grpc_code, a->err, sizeof a->err);
    a->raw_ = raw;
    msr_free(cc);
    a->call_ = NULL;
    a->done(a);
}

msr_status_t msr_rpc_call_start(msr_rpc_channel_t *ch, msr_rpc_loop_t *loop, msr_rpc_async_t *a,
                                const ProtobufCMessage *req)
{
    client_call_t *cc = msr_malloc(sizeof *cc);
    if (cc == NULL)
        return MSR_ERR_NO_MEMORY;
    a->op.done = async_done;
    a->call_ = cc;
    a->priv_ = ch;
    a->resp = NULL;
    a->raw_ = NULL;
    a->err[0] = '\0';
    a->status = MSR_IN_PROGRESS;
    a->gcall_ = NULL;
    msr_status_t st = client_start(ch, loop->cq, a->method, req, a->deadline, a->wait_for_ready, cc,
                                   &a->op, &a->gcall_);
    if (st != MSR_OK) {
        msr_free(cc);
        a->call_ = NULL;
    }
    return st;
}

size_t msr_rpc_async_raw_len(const msr_rpc_async_t *a)
{
    return a->raw_ ? grpc_byte_buffer_length(a->raw_) : 0;
}

ProtobufCMessage *msr_rpc_async_raw_unpack(const msr_rpc_async_t *a)
{
    return unpack_buffer(a->raw_, msr_rpc_methods[a->method].response);
}

void msr_rpc_async_cancel(msr_rpc_async_t *a)
{
    if (a->gcall_)
        grpc_call_cancel(a->gcall_, NULL);
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

void msr_rpc_async_cleanup(msr_rpc_async_t *a)
{
    msr_rpc_message_free(a->resp);
    a->resp = NULL;
    if (a->raw_) {
        grpc_byte_buffer_destroy(a->raw_);
        a->raw_ = NULL;
    }
    if (a->gcall_) {
        grpc_call_unref(a->gcall_);
        a->gcall_ = NULL;
    }
}

_Static_assert((int)MSR_RPC_UNAVAILABLE == (int)GRPC_STATUS_UNAVAILABLE &&
                   (int)MSR_RPC_DEADLINE_EXCEEDED == (int)GRPC_STATUS_DEADLINE_EXCEEDED &&
                   (int)MSR_RPC_RESOURCE_EXHAUSTED == (int)GRPC_STATUS_RESOURCE_EXHAUSTED &&
                   (int)MSR_RPC_INVALID_ARGUMENT == (int)GRPC_STATUS_INVALID_ARGUMENT &&
                   (int)MSR_RPC_ABORTED == (int)GRPC_STATUS_ABORTED,
               "msr_rpc_code_t follows gRPC's status codes");
