/* The coordinator's answers: given at once, or held (rendezvous/held.h)
 * until a save covers the changes they may tell of (group commit); and
 * the answers of writes kept by request id, so that a retried write is
 * answered as the first time instead of applied again. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/list.h"
#include "base/log.h"
#include "base/map.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/coord_internal.h"

/* ---- answers: given now, or held until what they may reflect is saved ---- */

/* Whether answers must wait for a save: something changed since the last
 * one (an answer given now could tell of a change a crash would undo), or
 * earlier answers wait (answers leave in order). */
static int must_hold(const msr_coord_t *c)
{
    return !c->closing && (msr_coord_persist_pending(c) || !msr_list_empty(&c->answers));
}

static answer_t *hold(msr_coord_t *c, void *call, msr_blob_t *blob, msr_rpc_code_t code,
                      const char *message)
{
    size_t mlen = message ? strlen(message) : 0;
    /* charged, never refused: the change it tells of is made */
    msr_held_t *h = msr_held_new(&c->held, sizeof(answer_t) + mlen + 1, blob ? blob->len : 0,
                                 MSR_HELD_ANSWER, call, NULL, &c->answers);
    if (h == NULL)
        return NULL;
    answer_t *a = MSR_CONTAINER_OF(h, answer_t, held);
    a->blob = blob;
    a->code = code;
    memcpy(a->message, message ? message : "", mlen + 1);
    return a;
}

static void answer_fail(msr_coord_t *c, void *call, msr_rpc_code_t code, const char *message)
{
    if (must_hold(c) && hold(c, call, NULL, code, message) != NULL)
        return;
    msr_coord_io_fail(c, call, code, message);
}

/* Out of memory while holding an answer: it cannot wait, and it cannot be
 * given before the save, so the call fails (the change stays and is saved;
 * a retry with the same request id learns its outcome). */
void msr_coord_answer_blob(msr_coord_t *c, void *call, msr_blob_t *blob)
{
    if (!must_hold(c)) {
        msr_coord_io_reply_blob(c, call, blob);
        return;
    }
    atomic_fetch_add(&blob->refs, 1);
    if (hold(c, call, blob, 0, NULL) == NULL) {
        msr_blob_unref(blob);
        msr_coord_io_fail(c, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
    }
}

void msr_coord_reply(msr_coord_t *c, void *call, const ProtobufCMessage *resp)
{
    if (!must_hold(c)) {
        msr_coord_io_reply(c, call, resp);
        return;
    }
    msr_blob_t *blob = msr_blob_pack(resp);
    if (blob == NULL || hold(c, call, blob, 0, NULL) == NULL) {
        msr_blob_unref(blob);
        msr_coord_io_fail(c, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
    }
}

/* Sends every held answer; after a failed save (why != NULL) fails them
 * instead, saying why. */
void msr_coord_answers_release(msr_coord_t *c, const char *why)
{
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &c->answers)
    {
        answer_t *a = MSR_CONTAINER_OF(pos, answer_t, held.link);
        void *call = a->held.call;
        msr_held_take(&c->held, &a->held);
        if (why)
            msr_coord_io_fail(c, call, MSR_RPC_INTERNAL, why);
        else if (a->blob)
            msr_coord_io_reply_blob(c, call, a->blob);
        else
            msr_coord_io_fail(c, call, a->code, a->message);
        msr_blob_unref(a->blob);
        msr_free(a);
    }
}

/* Saves what changed and releases the answers that waited for it. */
void msr_coord_commit(msr_coord_t *c)
{
    uint64_t start = msr_now_ns();
    msr_status_t st = msr_coord_persist_save(c);
    msr_coord_deaf(c, start, msr_now_ns());
    if (st != MSR_OK)
        c->retry_save_at = msr_now_ns() + 100 * 1000000ull; /* not a busy loop */
    else
        c->retry_save_at = 0;
    msr_coord_answers_release(c, st == MSR_OK ? NULL : msr_err_msg());
}

/* ---- request records: a retried write is answered, not applied again ---- */

void msr_coord_request_key(uint64_t client_id, uint64_t request_id, char out[40])
{
    snprintf(out, 40, "%016" PRIx64 ":%016" PRIx64, client_id, request_id);
}

static void request_drop(msr_coord_t *c, request_rec_t *r)
{
    char key[40];
    msr_coord_request_key(r->client_id, r->request_id, key);
    msr_map_remove(&c->request_map, key);
    msr_list_remove(&r->link);
    c->request_bytes -= r->len;
    msr_free(r);
}

msr_status_t msr_coord_request_add(msr_coord_t *c, uint64_t client_id, uint64_t request_id,
                                   uint32_t method, const uint8_t *response, size_t len, int saved)
{
    if (len > MSR_REQUESTS_BYTES_MAX)
        return MSR_ERR_INVALID_ARG;
    request_rec_t *r = msr_malloc(sizeof *r + len);
    if (r == NULL)
        return MSR_ERR_NO_MEMORY;
    r->client_id = client_id;
    r->request_id = request_id;
    r->method = method;
    r->saved = saved;
    r->len = len;
    if (len)
        memcpy(r->response, response, len);
    char key[40];
    msr_coord_request_key(client_id, request_id, key);
    void *old = NULL;
    if (msr_map_put(&c->request_map, key, r, &old) != MSR_OK) {
        msr_free(r);
        return MSR_ERR_NO_MEMORY;
    }
    if (old) { /* the same id again (a replayed log): the newer answer */
        request_rec_t *o = old;
        msr_list_remove(&o->link);
        c->request_bytes -= o->len;
        msr_free(o);
    }
    msr_list_push_back(&c->requests, &r->link);
    c->request_bytes += len;
    if (!saved && msr_coord_persisting(c))
        c->new_requests++; /* to be saved with the next save */
    /* Oldest first out: a retry comes within seconds, not thousands of
     * writes later. */
    while (c->requests.next != &r->link &&
           (c->request_map.count > MSR_REQUESTS_MAX || c->request_bytes > MSR_REQUESTS_BYTES_MAX))
        request_drop(c, MSR_CONTAINER_OF(c->requests.next, request_rec_t, link));
    return MSR_OK;
}

void msr_coord_requests_clear(msr_coord_t *c)
{
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &c->requests)
        request_drop(c, MSR_CONTAINER_OF(pos, request_rec_t, link));
    msr_map_cleanup(&c->request_map, NULL);
}

/* A write carrying a request id the core has applied before: answers it as
 * the first time and returns 1. */
int msr_coord_request_seen(msr_coord_t *c, void *call, msr_rpc_method_t method, uint64_t client_id,
                           uint64_t request_id)
{
    if (client_id == 0 || request_id == 0)
        return 0;
    char key[40];
    msr_coord_request_key(client_id, request_id, key);
    request_rec_t *r = msr_map_get(&c->request_map, key);
    if (r == NULL)
        return 0;
    if (r->method != (uint32_t)method) {
        msr_held_fail(&c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "request id %" PRIu64 " of client %016" PRIx64 " was used by a %s before",
                      request_id, client_id,
                      r->method < MSR_RPC_METHOD_COUNT ? msr_rpc_methods[r->method].name
                                                       : "another call");
        return 1;
    }
    msr_blob_t *b = msr_malloc(sizeof *b + r->len);
    if (b == NULL) {
        msr_held_fail(&c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return 1;
    }
    atomic_init(&b->refs, 1);
    b->len = r->len;
    if (r->len)
        memcpy(b->data, r->response, r->len);
    msr_coord_answer_blob(c, call, b);
    msr_blob_unref(b);
    return 1;
}

/* A merged add's part: 1 with its recorded value when applied before, -1
 * when another call used its id, 0 when new. */
int msr_coord_request_value(msr_coord_t *c, uint64_t client_id, uint64_t request_id,
                            int64_t *value_p)
{
    char key[40];
    msr_coord_request_key(client_id, request_id, key);
    request_rec_t *r = msr_map_get(&c->request_map, key);
    if (r == NULL)
        return 0;
    if (r->method != (uint32_t)MSR_RPC_ADD)
        return -1;
    Msr__AddResponse *a = msr__add_response__unpack(NULL, r->len, r->response);
    if (a == NULL)
        return -1;
    *value_p = a->value;
    msr__add_response__free_unpacked(a, NULL);
    return 1;
}

/* Remembers a write's answer under its request id (saved with the write: a
 * retry after a restart is answered from it). */
void msr_coord_request_note(msr_coord_t *c, msr_rpc_method_t method, uint64_t client_id,
                            uint64_t request_id, const ProtobufCMessage *resp)
{
    size_t len = protobuf_c_message_get_packed_size(resp);
    uint8_t *buf = len <= MSR_REQUESTS_BYTES_MAX ? msr_malloc(len ? len : 1) : NULL;
    if (buf == NULL)
        return;
    protobuf_c_message_pack(resp, buf);
    if (msr_coord_request_add(c, client_id, request_id, (uint32_t)method, buf, len, 0) != MSR_OK)
        MSR_DEBUG("cannot remember request %" PRIu64 ": a retry may apply it again", request_id);
    msr_free(buf);
}

/* Answers a write and, when it carries a request id, remembers the answer. */
void msr_coord_reply_write(msr_coord_t *c, void *call, msr_rpc_method_t method, uint64_t client_id,
                           uint64_t request_id, const ProtobufCMessage *resp)
{
    if (client_id && request_id)
        msr_coord_request_note(c, method, client_id, request_id, resp);
    msr_coord_reply(c, call, resp);
}

/* ---- the table of held calls, answering through the responder ---- */

/* A held call is answered 200 ms before its client's deadline, so the
 * client hears why (MSR_DEADLINE_NEVER when the client set none). */
static uint64_t answer_by(const msr_coord_t *c, void *call)
{
    uint64_t client = msr_coord_io_deadline(c, call);
    if (client == MSR_DEADLINE_NEVER)
        return MSR_DEADLINE_NEVER;
    uint64_t margin = 200 * 1000000ull;
    uint64_t now = msr_now_ns();
    return client > now + margin ? client - margin : now;
}

/* A held answer's client is gone: the change it made is still saved. */
static void answer_cancelled(void *ctx, msr_held_t *h)
{
    answer_t *a = MSR_CONTAINER_OF(h, answer_t, held);
    msr_blob_unref(a->blob);
    msr_held_free(&((msr_coord_t *)ctx)->held, h);
}

static void io_fail(void *ctx, void *call, msr_rpc_code_t code, const char *message)
{
    answer_fail(ctx, call, code, message);
}

static uint64_t io_deadline(void *ctx, void *call)
{
    return answer_by(ctx, call);
}

static void io_set_data(void *ctx, void *call, void *data)
{
    msr_coord_io_set_data(ctx, call, data);
}

static void *io_get_data(void *ctx, void *call)
{
    return msr_coord_io_get_data(ctx, call);
}

/* The client a held call is charged to (held.h). */
static const char *io_peer(void *ctx, void *call)
{
    return msr_coord_io_peer(ctx, call);
}

void msr_coord_held_init(msr_coord_t *c)
{
    msr_list_init(&c->answers);
    msr_held_io_t io = {c, io_set_data, io_get_data, io_deadline, io_fail, io_peer};
    msr_held_calls_init(&c->held, &io);
    msr_held_calls_limit(&c->held, &c->config.held_limits);
    msr_held_handler_t answer = {c, NULL, answer_cancelled};
    msr_held_calls_handle(&c->held, MSR_HELD_ANSWER, &answer);
}
