/* The gRPC client: channels, synchronous and asynchronous unary calls. */
#include "rendezvous/rpc.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/list.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "rendezvous/rpc_internal.h"

static grpc_channel_args *common_args(int own)
{
    /* clang-format off */
    /* Reconnect to a restarted coordinator within about a second, but give
     * each attempt 5 s to connect and finish its TLS handshake: gRPC takes
     * GRPC_ARG_MIN_RECONNECT_BACKOFF_MS as an attempt's least time to
     * connect, and at 100 ms a coordinator busy with many connections cut
     * off every handshake it could not finish in 100 ms. A receive window
     * large enough for an allgather's answer without waiting for window
     * updates on a fresh connection. */
#define CLIENT_ARGS                                                                 \
    {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = -1}},       \
    {GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = -1}},          \
    {GRPC_ARG_INTEGER, GRPC_ARG_ENABLE_HTTP_PROXY, {.integer = 0}},                 \
    {GRPC_ARG_INTEGER, GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, {.integer = 100}},    \
    {GRPC_ARG_INTEGER, GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, {.integer = 5000}},       \
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
    atomic_int answered; /* a call of this channel reached its server */
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
    msr_rpc_pem_t pem;
    msr_status_t st = msr_rpc_pem_read(tls, &pem);
    if (st != MSR_OK)
        return st;
    grpc_ssl_pem_key_cert_pair pair = {pem.key, pem.cert};
    grpc_channel_credentials *creds =
        grpc_ssl_credentials_create(pem.ca, pem.cert ? &pair : NULL, NULL, NULL);
    msr_rpc_pem_free(&pem);
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

int msr_rpc_channel_wait(msr_rpc_channel_t *ch, uint64_t deadline)
{
    grpc_connectivity_state s = grpc_channel_check_connectivity_state(ch->channel, 1);
    if (s == GRPC_CHANNEL_READY)
        return 1;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    if (cq == NULL) {
        msr_sleep_ms(msr_deadline_left_ms(deadline));
        return 0;
    }
    /* Polling this queue is what moves the connection attempt on: gRPC
     * reads the socket's events only while some thread polls. */
    while (s != GRPC_CHANNEL_READY && s != GRPC_CHANNEL_SHUTDOWN &&
           !msr_deadline_passed(deadline)) {
        grpc_channel_watch_connectivity_state(ch->channel, s, msr_rpc_to_gpr_deadline(deadline), cq,
                                              NULL);
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE || !ev.success)
            break; /* the deadline passed with no change */
        s = grpc_channel_check_connectivity_state(ch->channel, 1);
    }
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    return s == GRPC_CHANNEL_READY;
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
                                 msr_rpc_method_t method, const char *path,
                                 const ProtobufCMessage *req, uint64_t deadline, int wait_for_ready,
                                 client_call_t *cc, void *tag, void **ref_p)
{
    memset(cc, 0, sizeof *cc);
    cc->request = msr_rpc_pack_message(req);
    if (cc->request == NULL)
        return MSR_ERR_NO_MEMORY;
    if (path) { /* another service's method (msr_rpc_call_path) */
        grpc_slice m = grpc_slice_from_static_string(path);
        cc->call = grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL,
                                            msr_rpc_to_gpr_deadline(deadline), NULL);
    } else {
        cc->call = grpc_channel_create_registered_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
                                                       cq, ch->registered[method],
                                                       msr_rpc_to_gpr_deadline(deadline), NULL);
    }
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

/* Whether s holds any of the words (lowercase; s's case does not count). */
static int mentions(const char *s, const char *const *words, size_t n)
{
    char low[384];
    size_t k = 0;
    for (; s[k] != '\0' && k < sizeof low - 1; k++)
        low[k] = (char)tolower((unsigned char)s[k]);
    low[k] = '\0';
    for (size_t i = 0; i < n; i++)
        if (strstr(low, words[i]) != NULL)
            return 1;
    return 0;
}

/* Why a call found the coordinator UNAVAILABLE, in words that tell the
 * causes apart: nothing listens (connection refused: it is not running),
 * it closed the connection or said it is shutting down (it stopped or
 * restarted), the TLS handshake
 * failed, or the name does not resolve; gRPC's own words in parentheses. */
static int unavailable_text(const char *target, const char *details, int answered, char *err,
                            size_t errlen)
{
    static const char *const refused[] = {"refused"};
    static const char *const closed[] = {"socket closed", "connection reset", "broken pipe",
                                         "end of file", "goaway"};
    static const char *const tls[] = {"handshake", "ssl", "tls", "certificate"};
    static const char *const stopping[] = {"shutting down"}; /* its own words */
    if (details[0] == '\0')
        return snprintf(err, errlen, "coordinator at %s unreachable (connection failed)", target);
    if (mentions(details, refused, sizeof refused / sizeof *refused))
        return snprintf(err, errlen, "the coordinator at %s is not running (connection refused)",
                        target);
    if (mentions(details, tls, sizeof tls / sizeof *tls))
        return snprintf(
            err, errlen,
            "coordinator at %s: the TLS handshake failed (%.160s): check both sides' --tls_* "
            "options",
            target, details);
    if (mentions(details, stopping, sizeof stopping / sizeof *stopping))
        return snprintf(err, errlen,
                        "the coordinator at %s is shutting down (%.160s): it stopped or restarted",
                        target, details);
    if (mentions(details, closed, sizeof closed / sizeof *closed) && answered)
        return snprintf(
            err, errlen,
            "the coordinator at %s closed the connection (%.160s): it stopped or restarted", target,
            details);
    if (mentions(details, closed, sizeof closed / sizeof *closed))
        /* a TLS server closes a plaintext client's connection at once */
        return snprintf(
            err, errlen,
            "coordinator at %s closed the connection at once (%.160s): the TLS handshake "
            "failed, or something else listens there: check both sides' --tls_* options",
            target, details);
    return snprintf(err, errlen, "coordinator at %s unreachable (%.160s)", target, details);
}

/* Turns a finished call into a status and a parsed response; frees cc. */
static msr_status_t client_finish(msr_rpc_channel_t *ch, msr_rpc_method_t method, client_call_t *cc,
                                  int ok, ProtobufCMessage **resp_p, grpc_byte_buffer **raw_p,
                                  int *code_p, char *err, size_t errlen)
{
    msr_status_t st;
    if (code_p)
        *code_p = ok ? (int)cc->code : (int)GRPC_STATUS_INTERNAL;
    if (ok && cc->code != GRPC_STATUS_UNAVAILABLE && cc->code != GRPC_STATUS_DEADLINE_EXCEEDED)
        atomic_store(&ch->answered, 1);
    if (!ok) {
        st = MSR_ERR_INTERNAL;
        if (err)
            snprintf(err, errlen, "%s call to %s failed in gRPC", msr_rpc_methods[method].name,
                     ch->target);
    } else if (cc->code != GRPC_STATUS_OK) {
        st = msr_rpc_status_from_grpc(cc->code);
        char details[384];
        msr_rpc_slice_to_cstr(cc->details, details, sizeof details);
        if (err) {
            if (cc->code == GRPC_STATUS_UNAVAILABLE)
                unavailable_text(ch->target, details, atomic_load(&ch->answered), err, errlen);
            else if (cc->code == GRPC_STATUS_DEADLINE_EXCEEDED &&
                     grpc_channel_check_connectivity_state(ch->channel, 0) != GRPC_CHANNEL_READY)
                snprintf(err, errlen,
                         "%s call to %s: deadline passed before a connection was made (nothing "
                         "listens there, or the TLS handshake failed: check both sides' "
                         "--tls_* options)",
                         msr_rpc_methods[method].name, ch->target);
            else if (cc->code == GRPC_STATUS_UNIMPLEMENTED)
                snprintf(err, errlen, "%s call to %s: not served there (%.200s)",
                         msr_rpc_methods[method].name, ch->target,
                         details[0] ? details : "UNIMPLEMENTED");
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
        ProtobufCMessage *resp =
            msr_rpc_unpack_buffer(cc->response, msr_rpc_methods[method].response);
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
                          ProtobufCMessage **resp_p)
{
    grpc_completion_queue *cq = channel_take_cq(ch);
    if (cq == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "%s call: out of memory", msr_rpc_methods[method].name);
    client_call_t cc;
    msr_status_t st =
        client_start(ch, cq, method, NULL, req, deadline, wait_for_ready, &cc, &cc, NULL);
    if (st != MSR_OK) {
        channel_give_cq(ch, cq);
        return msr_err(st, "cannot start %s call: %s", msr_rpc_methods[method].name,
                       msr_status_str(st));
    }
    /* The call's own deadline bounds this wait. */
    grpc_event ev = grpc_completion_queue_pluck(cq, &cc, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    char err[512] = "";
    st = client_finish(ch, method, &cc, ev.type == GRPC_OP_COMPLETE && ev.success, resp_p, NULL,
                       NULL, err, sizeof err);
    channel_give_cq(ch, cq);
    if (st != MSR_OK)
        msr_err_set("%s", err);
    return st;
}

msr_status_t msr_rpc_call_path(msr_rpc_channel_t *ch, const char *path, const ProtobufCMessage *req,
                               const ProtobufCMessageDescriptor *resp_desc, uint64_t deadline,
                               int wait_for_ready, ProtobufCMessage **resp_p)
{
    grpc_completion_queue *cq = channel_take_cq(ch);
    if (cq == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "%s call: out of memory", path);
    client_call_t cc;
    msr_status_t st = client_start(ch, cq, 0, path, req, deadline, wait_for_ready, &cc, &cc, NULL);
    if (st != MSR_OK) {
        channel_give_cq(ch, cq);
        return msr_err(st, "cannot start %s call: %s", path, msr_status_str(st));
    }
    grpc_event ev = grpc_completion_queue_pluck(cq, &cc, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    int ok = ev.type == GRPC_OP_COMPLETE && ev.success;
    char details[384] = "";
    if (!ok) {
        st = MSR_ERR_INTERNAL;
        snprintf(details, sizeof details, "%s call to %s failed in gRPC", path, ch->target);
    } else if (cc.code != GRPC_STATUS_OK) {
        st = msr_rpc_status_from_grpc(cc.code);
        char said[256];
        msr_rpc_slice_to_cstr(cc.details, said, sizeof said);
        if (cc.code == GRPC_STATUS_UNIMPLEMENTED)
            snprintf(details, sizeof details, "%s call to %s: not served there (%s)", path,
                     ch->target, said[0] ? said : "UNIMPLEMENTED");
        else
            snprintf(details, sizeof details, "%s", said[0] ? said : msr_status_str(st));
    } else if ((*resp_p = msr_rpc_unpack_buffer(cc.response, resp_desc)) == NULL) {
        st = MSR_ERR_PROTOCOL;
        snprintf(details, sizeof details, "malformed %s response from %s", path, ch->target);
    }
    if (cc.error_string)
        gpr_free((void *)cc.error_string);
    grpc_slice_unref(cc.details);
    grpc_metadata_array_destroy(&cc.initial_md);
    grpc_metadata_array_destroy(&cc.trailing_md);
    grpc_byte_buffer_destroy(cc.request);
    if (cc.response)
        grpc_byte_buffer_destroy(cc.response);
    grpc_call_unref(cc.call);
    channel_give_cq(ch, cq);
    if (st != MSR_OK)
        msr_err_set("%s", details);
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
    msr_status_t st = client_start(ch, loop->cq, a->method, NULL, req, a->deadline,
                                   a->wait_for_ready, cc, &a->op, &a->gcall_);
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
    return msr_rpc_unpack_buffer(a->raw_, msr_rpc_methods[a->method].response);
}

void msr_rpc_async_cancel(msr_rpc_async_t *a)
{
    if (a->gcall_)
        grpc_call_cancel(a->gcall_, NULL);
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
