/* Calls of methods that no msrun server registers (a newer client's, or a
 * stranger's), answered at once with UNIMPLEMENTED instead of being left
 * to their deadline: a new method then needs no protocol version bump. */
#include "rendezvous/rpc_unknown.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <grpc/slice.h>

#include "base/alloc.h"
#include "base/list.h"
#include "base/log.h"
#include "base/status.h"

/* Generic requests posted at a time; each is posted again when it takes a
 * call, before the call is answered. */
#define UNKNOWN_SLOTS    2
/* The most bytes of a method's path quoted back and logged. */
#define UNKNOWN_PATH_MAX 128

struct msr_rpc_unknown {
    grpc_server *server;
    grpc_completion_queue *cq;
    const char *token;
    const char *log_name;
    atomic_int stopped;
    int busy; /* unknown_call_t alive (polling thread, or before it runs) */
    uint64_t calls;
};

typedef struct unknown_call {
    msr_rpc_unknown_t *u;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_slice message;
    int have_message;
    int cancelled; /* written by RECV_CLOSE_ON_SERVER, not read */
    msr_rpc_op_t request_op, answer_op;
} unknown_call_t;

int msr_rpc_token_matches(const char *token, const grpc_metadata_array *md)
{
    if (token == NULL)
        return 1;
    size_t tlen = strlen(token);
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
            diff |= (unsigned char)(a[k] ^ (unsigned char)token[k]);
        return diff == 0;
    }
    return 0;
}

static void unknown_free(unknown_call_t *c)
{
    if (c->call)
        grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->have_message)
        grpc_slice_unref(c->message);
    c->u->busy--;
    msr_free(c);
}

static void unknown_answer_done(msr_rpc_op_t *op, int ok)
{
    (void)ok;
    unknown_free(MSR_CONTAINER_OF(op, unknown_call_t, answer_op));
}

static void unknown_post(msr_rpc_unknown_t *u);

/* The method's path, printable and cut to UNKNOWN_PATH_MAX bytes. */
static void unknown_path(const grpc_call_details *d, char *out, size_t outlen)
{
    size_t n = GRPC_SLICE_LENGTH(d->method);
    const unsigned char *p = GRPC_SLICE_START_PTR(d->method);
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < outlen && i < UNKNOWN_PATH_MAX; i++)
        out[k++] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
    out[k] = '\0';
}

/* A call to a method no one registered has arrived: answered, its body
 * never read (gRPC discards it). */
static void unknown_request_done(msr_rpc_op_t *op, int ok)
{
    unknown_call_t *c = MSR_CONTAINER_OF(op, unknown_call_t, request_op);
    msr_rpc_unknown_t *u = c->u;
    if (!ok) { /* the server is shutting down: no call arrived */
        c->call = NULL;
        unknown_free(c);
        return;
    }
    if (!atomic_load(&u->stopped))
        unknown_post(u);
    u->calls++;
    char path[UNKNOWN_PATH_MAX + 1], text[UNKNOWN_PATH_MAX + 160];
    unknown_path(&c->details, path, sizeof path);
    grpc_status_code code = GRPC_STATUS_UNIMPLEMENTED;
    if (!msr_rpc_token_matches(u->token, &c->md)) {
        code = GRPC_STATUS_PERMISSION_DENIED;
        snprintf(text, sizeof text, "refused: missing or wrong job token (%s)", MSR_TOKEN_METADATA);
    } else {
        snprintf(text, sizeof text,
                 "unknown method %s: this msrun (protocol version %d) does not serve it",
                 path[0] ? path : "(empty)", MSR_PROTOCOL_VERSION);
    }
    MSR_DEBUG("%s: %s", u->log_name, text);
    c->message = grpc_slice_from_copied_string(text);
    c->have_message = 1;
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = code;
    ops[1].data.send_status_from_server.status_details = &c->message;
    ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[2].data.recv_close_on_server.cancelled = &c->cancelled;
    grpc_call_error err = grpc_call_start_batch(c->call, ops, 3, &c->answer_op, NULL);
    if (err != GRPC_CALL_OK) {
        MSR_DEBUG("%s: cannot answer a call of %s: %s", u->log_name, path,
                  grpc_call_error_to_string(err));
        unknown_free(c);
    }
}

static void unknown_post(msr_rpc_unknown_t *u)
{
    unknown_call_t *c = msr_calloc(1, sizeof *c);
    if (c == NULL) {
        MSR_ERROR("%s: out of memory; calls of unknown methods wait for their deadline",
                  u->log_name);
        return;
    }
    c->u = u;
    c->request_op.done = unknown_request_done;
    c->answer_op.done = unknown_answer_done;
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    u->busy++;
    grpc_call_error err = grpc_server_request_call(u->server, &c->call, &c->details, &c->md, u->cq,
                                                   u->cq, &c->request_op);
    if (err != GRPC_CALL_OK) {
        MSR_ERROR("%s: cannot take calls of unknown methods: %s", u->log_name,
                  grpc_call_error_to_string(err));
        c->call = NULL;
        unknown_free(c);
    }
}

msr_status_t msr_rpc_unknown_create(grpc_server *server, grpc_completion_queue *cq,
                                    const char *token, const char *log_name,
                                    msr_rpc_unknown_t **u_p)
{
    msr_rpc_unknown_t *u = msr_calloc(1, sizeof *u);
    if (u == NULL)
        return MSR_ERR_NO_MEMORY;
    u->server = server;
    u->cq = cq;
    u->token = token;
    u->log_name = log_name;
    *u_p = u;
    return MSR_OK;
}

void msr_rpc_unknown_start(msr_rpc_unknown_t *u)
{
    for (int k = 0; k < UNKNOWN_SLOTS; k++)
        unknown_post(u);
}

void msr_rpc_unknown_stop(msr_rpc_unknown_t *u)
{
    atomic_store(&u->stopped, 1);
}

int msr_rpc_unknown_busy(const msr_rpc_unknown_t *u)
{
    return u ? u->busy : 0;
}

uint64_t msr_rpc_unknown_calls(const msr_rpc_unknown_t *u)
{
    return u->calls;
}

void msr_rpc_unknown_destroy(msr_rpc_unknown_t *u)
{
    msr_free(u);
}
