/* libmsrun's store calls (msrun/store.h): set, get, add, compare-set,
 * delete, the key count, barriers, allgathers, publish and fetch, through the node's
 * msrun or the coordinator (msr_client_call), or a singleton's local store. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/lprof.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "msrun/store.h"
#include "rendezvous/client_impl.h"

static msr_status_t check_key(const char *op, const char *key)
{
    if (!msr_rpc_key_valid(key)) {
        msr_err_set("%s: bad key (keys are 1 to %d printable bytes)%s%s%s", op, MSR_KEY_MAX,
                    key ? ": '" : "", key ? key : "", key ? "'" : "");
        return MSR_ERR_BAD_KEY;
    }
    return MSR_OK;
}

static uint32_t wait_to_ms(const msr_ctx_t *ctx, int64_t wait_ms)
{
    int64_t w = wait_ms >= 0 ? wait_ms : ctx->timeout_ms;
    if (w < 0 || w > (int64_t)UINT32_MAX)
        return UINT32_MAX;
    return (uint32_t)w;
}

msr_status_t msr_store_set(msr_ctx_t *ctx, const char *key, const void *value, size_t len)
{
    msr_status_t st = check_key("store set", key);
    if (st != MSR_OK)
        return st;
    Msr__SetRequest req = MSR__SET_REQUEST__INIT;
    req.generation = ctx->generation;
    msr_client_request_ids(ctx, &req.client_id, &req.request_id);
    req.key = (char *)key;
    req.value.data = (uint8_t *)value;
    req.value.len = len;
    ProtobufCMessage *resp = NULL;
    char what[80];
    snprintf(what, sizeof what, "store set of '%.40s'", key);
    st = msr_client_call(ctx, MSR_RPC_SET, &req.base, -1, what, &resp);
    msr_rpc_message_free(resp);
    return st;
}

/* A Get (req filled but for its generation) answered with a malloc'd,
 * NUL-terminated copy of the value. */
static msr_status_t get_call(msr_ctx_t *ctx, Msr__GetRequest *req, const char *what, void **value_p,
                             size_t *len_p)
{
    req->generation = ctx->generation;
    ProtobufCMessage *resp = NULL;
    msr_status_t st =
        msr_client_call(ctx, MSR_RPC_GET, &req->base,
                        req->wait_ms == UINT32_MAX ? -1 : (int64_t)req->wait_ms, what, &resp);
    if (st != MSR_OK)
        return st;
    Msr__GetResponse *r = (Msr__GetResponse *)resp;
    /* a store that ignores the change-wait's fields answers at once with
     * the value the caller already has: one that serves them never does */
    if (req->changed && r->value.len == req->old_value.len &&
        (r->value.len == 0 || memcmp(r->value.data, req->old_value.data, r->value.len) == 0)) {
        msr_rpc_message_free(resp);
        msr_err_set("%s: the store answered with the unchanged value: msrun or the coordinator "
                    "is older than this libmsrun and cannot wait for a change (use one msrun "
                    "version for all)",
                    what);
        return MSR_ERR_UNSUPPORTED;
    }
    char *copy = malloc(r->value.len + 1);
    if (copy == NULL) {
        msr_rpc_message_free(resp);
        msr_err_set("%s: out of memory", what);
        return MSR_ERR_NO_MEMORY;
    }
    if (r->value.len)
        memcpy(copy, r->value.data, r->value.len);
    copy[r->value.len] = '\0';
    if (len_p)
        *len_p = r->value.len;
    *value_p = copy;
    msr_rpc_message_free(resp);
    return MSR_OK;
}

msr_status_t msr_store_get(msr_ctx_t *ctx, const char *key, int64_t wait_ms, void **value_p,
                           size_t *len_p)
{
    msr_status_t st = check_key("store get", key);
    if (st != MSR_OK)
        return st;
    Msr__GetRequest req = MSR__GET_REQUEST__INIT;
    req.key = (char *)key;
    req.wait_ms = wait_ms == 0 ? 0 : wait_to_ms(ctx, wait_ms);
    char what[80];
    snprintf(what, sizeof what, "store get of '%.40s'", key);
    return get_call(ctx, &req, what, value_p, len_p);
}

msr_status_t msr_store_wait_change(msr_ctx_t *ctx, const char *key, const void *old, size_t old_len,
                                   int64_t wait_ms, void **value_p, size_t *len_p)
{
    msr_status_t st = check_key("store wait_change", key);
    if (st != MSR_OK)
        return st;
    if (value_p == NULL || (old == NULL && old_len != 0)) {
        msr_err_set("store wait_change of '%.40s': %s", key,
                    value_p == NULL ? "value_p is NULL" : "old is NULL with old_len > 0");
        return MSR_ERR_INVALID_ARG;
    }
    Msr__GetRequest req = MSR__GET_REQUEST__INIT;
    req.key = (char *)key;
    req.wait_ms = wait_ms == 0 ? 0 : wait_to_ms(ctx, wait_ms);
    req.changed = old != NULL;
    req.old_value.data = (uint8_t *)old;
    req.old_value.len = old_len;
    char what[80];
    snprintf(what, sizeof what, "store wait_change of '%.40s'", key);
    st = get_call(ctx, &req, what, value_p, len_p);
    /* absent before and still absent: no change */
    if (st == MSR_ERR_NOT_FOUND && old == NULL) {
        msr_err_set("%s: the key was not set (wait 0)", what);
        return MSR_ERR_TIMEOUT;
    }
    return st;
}

msr_status_t msr_store_add(msr_ctx_t *ctx, const char *key, int64_t delta, int64_t *value_p)
{
    msr_status_t st = check_key("store add", key);
    if (st != MSR_OK)
        return st;
    Msr__AddRequest req = MSR__ADD_REQUEST__INIT;
    req.generation = ctx->generation;
    msr_client_request_ids(ctx, &req.client_id, &req.request_id);
    req.key = (char *)key;
    req.delta = delta;
    ProtobufCMessage *resp = NULL;
    char what[80];
    snprintf(what, sizeof what, "store add to '%.40s'", key);
    st = msr_client_call(ctx, MSR_RPC_ADD, &req.base, -1, what, &resp);
    if (st == MSR_OK && value_p)
        *value_p = ((Msr__AddResponse *)resp)->value;
    msr_rpc_message_free(resp);
    return st;
}

msr_status_t msr_store_compare_set(msr_ctx_t *ctx, const char *key, const void *expected,
                                   size_t expected_len, const void *desired, size_t desired_len,
                                   int *swapped_p)
{
    msr_status_t st = check_key("store compare-set", key);
    if (st != MSR_OK)
        return st;
    Msr__CompareSetRequest req = MSR__COMPARE_SET_REQUEST__INIT;
    req.generation = ctx->generation;
    msr_client_request_ids(ctx, &req.client_id, &req.request_id);
    req.key = (char *)key;
    req.expect_absent = expected == NULL;
    req.expected.data = (uint8_t *)expected;
    req.expected.len = expected ? expected_len : 0;
    req.desired.data = (uint8_t *)desired;
    req.desired.len = desired_len;
    ProtobufCMessage *resp = NULL;
    char what[80];
    snprintf(what, sizeof what, "store compare-set of '%.40s'", key);
    st = msr_client_call(ctx, MSR_RPC_COMPARE_SET, &req.base, -1, what, &resp);
    if (st == MSR_OK && swapped_p)
        *swapped_p = ((Msr__CompareSetResponse *)resp)->swapped;
    msr_rpc_message_free(resp);
    return st;
}

msr_status_t msr_store_delete(msr_ctx_t *ctx, const char *key, int *existed_p)
{
    msr_status_t st = check_key("store delete", key);
    if (st != MSR_OK)
        return st;
    Msr__DeleteRequest req = MSR__DELETE_REQUEST__INIT;
    req.generation = ctx->generation;
    msr_client_request_ids(ctx, &req.client_id, &req.request_id);
    req.key = (char *)key;
    ProtobufCMessage *resp = NULL;
    char what[80];
    snprintf(what, sizeof what, "store delete of '%.40s'", key);
    st = msr_client_call(ctx, MSR_RPC_DELETE, &req.base, -1, what, &resp);
    if (st == MSR_OK && existed_p)
        *existed_p = ((Msr__DeleteResponse *)resp)->existed;
    msr_rpc_message_free(resp);
    return st;
}

/* In direct mode the coordinator may be older than this library, and one
 * without NumKeys (protocol version 1) would leave the call unanswered
 * until its deadline: its Status lists the methods it serves
 * (call_names), asked once per context. Through the node's msrun, the
 * coordinator has the msrun's version (Join refuses another), and an
 * older msrun refuses the call at once (UNIMPLEMENTED). */
static msr_status_t coordinator_counts(msr_ctx_t *ctx)
{
    int known = atomic_load(&ctx->num_keys_served);
    if (ctx->channel == NULL || known > 0)
        return MSR_OK;
    if (known == 0) {
        Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
        ProtobufCMessage *resp = NULL;
        msr_status_t st =
            msr_client_call(ctx, MSR_RPC_STATUS, &req.base, -1, "store num_keys", &resp);
        if (st != MSR_OK)
            return st;
        const Msr__StatusResponse *r = (const Msr__StatusResponse *)resp;
        known = -1;
        for (size_t i = 0; i < r->n_call_names; i++)
            if (strcmp(r->call_names[i], msr_rpc_methods[MSR_RPC_NUM_KEYS].name) == 0)
                known = 1;
        msr_rpc_message_free(resp);
        atomic_store(&ctx->num_keys_served, known);
    }
    if (known < 0) {
        const char *coord = getenv("MSR_COORDINATOR");
        msr_err_set("store num_keys: the coordinator at %.200s has no NumKeys call: it is "
                    "older than this libmsrun (protocol version %d); use one msrun version for "
                    "the coordinator and the workers",
                    coord ? coord : "MSR_COORDINATOR", MSR_PROTOCOL_VERSION);
        return MSR_ERR_UNSUPPORTED;
    }
    return MSR_OK;
}

msr_status_t msr_store_num_keys(msr_ctx_t *ctx, uint64_t *count_p)
{
    if (count_p == NULL) {
        msr_err_set("store num_keys: count_p is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    msr_status_t st = coordinator_counts(ctx);
    if (st != MSR_OK)
        return st;
    Msr__NumKeysRequest req = MSR__NUM_KEYS_REQUEST__INIT;
    req.generation = ctx->generation;
    ProtobufCMessage *resp = NULL;
    st = msr_client_call(ctx, MSR_RPC_NUM_KEYS, &req.base, -1, "store num_keys", &resp);
    if (st == MSR_ERR_UNSUPPORTED) {
        char why[384];
        snprintf(why, sizeof why, "%s", msr_err_msg());
        msr_err_set("%s (the node's msrun is older than this libmsrun, which speaks protocol "
                    "version %d: use one msrun version for both)",
                    why, MSR_PROTOCOL_VERSION);
        return st;
    }
    if (st != MSR_OK)
        return st;
    *count_p = ((Msr__NumKeysResponse *)resp)->keys;
    msr_rpc_message_free(resp);
    return MSR_OK;
}

msr_status_t msr_store_barrier(msr_ctx_t *ctx, const char *name, uint32_t count,
                               uint32_t local_count, int64_t wait_ms)
{
    msr_status_t st = check_key("barrier", name);
    if (st != MSR_OK)
        return st;
    if (count == 0) {
        msr_err_set("barrier '%.40s': count is 0", name);
        return MSR_ERR_INVALID_ARG;
    }
    Msr__BarrierRequest req = MSR__BARRIER_REQUEST__INIT;
    req.generation = ctx->generation;
    req.name = (char *)name;
    req.count = count;
    /* This call is one participant; local_count lets the node's msrun
     * combine the node's participants into one call upstream. */
    req.weight = 1;
    req.local_count = local_count;
    req.wait_ms = wait_to_ms(ctx, wait_ms);
    /* an arrival sent again (its relay died) is answered released when
     * the barrier released it, not counted into the next one */
    msr_client_request_ids(ctx, &req.client_id, &req.request_id);
    ProtobufCMessage *resp = NULL;
    char what[80];
    snprintf(what, sizeof what, "barrier '%.40s'", name);
    st = msr_client_call(ctx, MSR_RPC_BARRIER, &req.base,
                         req.wait_ms == UINT32_MAX ? -1 : (int64_t)req.wait_ms, what, &resp);
    msr_rpc_message_free(resp);
    return st;
}

void msr_gather_result_free(msr_gather_result_t *r)
{
    msr_free(r);
}

/* A gather result of count entries from an answer's lengths and bytes (an
 * Allgather's or a Fetch's); checks that they agree. */
static msr_status_t gather_result_make(const char *what, uint32_t count, const uint32_t *rlengths,
                                       size_t n_lengths, const uint8_t *data, size_t len,
                                       msr_gather_result_t **result_p)
{
    if (n_lengths != count) {
        msr_err_set("%s: %zu entries received, %u expected", what, n_lengths, count);
        return MSR_ERR_PROTOCOL;
    }
    size_t total = 0;
    for (size_t i = 0; i < n_lengths; i++)
        total += rlengths[i];
    if (total != len) {
        msr_err_set("%s: lengths add up to %zu bytes, %zu received", what, total, len);
        return MSR_ERR_PROTOCOL;
    }
    /* One allocation: the header, the lengths, the offsets and the data. */
    size_t head = sizeof(msr_gather_result_t) + 2 * (size_t)count * sizeof(size_t);
    msr_gather_result_t *out = msr_malloc(head + total + 1);
    if (out == NULL) {
        msr_err_set("%s: out of memory for %zu bytes", what, total);
        return MSR_ERR_NO_MEMORY;
    }
    size_t *lengths = (size_t *)(out + 1);
    size_t *offsets = lengths + count;
    unsigned char *bytes = (unsigned char *)(offsets + count);
    size_t off = 0;
    for (uint32_t i = 0; i < count; i++) {
        lengths[i] = rlengths[i];
        offsets[i] = off;
        off += lengths[i];
    }
    if (total)
        memcpy(bytes, data, total);
    bytes[total] = 0;
    out->count = count;
    out->lengths = lengths;
    out->offsets = offsets;
    out->data = bytes;
    *result_p = out;
    return MSR_OK;
}

/* The one entry an allgather's or a publish's request carries: this
 * rank's data at index (not copied: it must outlive the call). entries[0]
 * points to entry, so the struct must not move once initialised. */
typedef struct contribution {
    Msr__Contribution entry;
    Msr__Contribution *entries[1];
} contribution_t;

static void contribution_init(contribution_t *c, uint32_t index, const void *data, size_t len)
{
    *c = (contribution_t){.entry = MSR__CONTRIBUTION__INIT};
    c->entry.index = index;
    c->entry.data.data = (uint8_t *)data;
    c->entry.data.len = len;
    c->entries[0] = &c->entry;
}

msr_status_t msr_store_allgather(msr_ctx_t *ctx, const char *name, uint32_t count, uint32_t index,
                                 uint32_t local_count, const void *data, size_t len,
                                 int64_t wait_ms, msr_gather_result_t **result_p)
{
    msr_status_t st = check_key("allgather", name);
    if (st != MSR_OK)
        return st;
    if (count == 0 || index >= count) {
        msr_err_set("allgather '%.40s': index %u is not below count %u", name, index, count);
        return MSR_ERR_INVALID_ARG;
    }
    contribution_t c;
    contribution_init(&c, index, data, len);
    Msr__AllgatherRequest req = MSR__ALLGATHER_REQUEST__INIT;
    req.generation = ctx->generation;
    req.name = (char *)name;
    req.count = count;
    req.n_entries = 1;
    req.entries = c.entries;
    req.wait_ms = wait_to_ms(ctx, wait_ms);
    req.local_count = local_count;
    ProtobufCMessage *resp = NULL;
    char what[80];
    snprintf(what, sizeof what, "allgather '%.40s'", name);
    st = msr_client_call(ctx, MSR_RPC_ALLGATHER, &req.base,
                         req.wait_ms == UINT32_MAX ? -1 : (int64_t)req.wait_ms, what, &resp);
    if (st != MSR_OK)
        return st;
    Msr__AllgatherResponse *r = (Msr__AllgatherResponse *)resp;
    st = gather_result_make(what, count, r->lengths, r->n_lengths, r->data.data, r->data.len,
                            result_p);
    msr_rpc_message_free(resp);
    return st;
}

msr_status_t msr_store_publish(msr_ctx_t *ctx, const char *name, uint32_t index,
                               uint32_t local_count, const void *data, size_t len)
{
    msr_status_t st = check_key("publish", name);
    if (st != MSR_OK)
        return st;
    contribution_t c;
    contribution_init(&c, index, data, len);
    Msr__PublishRequest req = MSR__PUBLISH_REQUEST__INIT;
    req.generation = ctx->generation;
    req.name = (char *)name;
    req.n_entries = 1;
    req.entries = c.entries;
    req.local_count = local_count;
    ProtobufCMessage *resp = NULL;
    char what[80];
    snprintf(what, sizeof what, "publish '%.40s'", name);
    /* the node's proxy holds it until its local_count publishers are in */
    st = msr_client_call(ctx, MSR_RPC_PUBLISH, &req.base, -1, what, &resp);
    msr_rpc_message_free(resp);
    return st;
}

msr_status_t msr_store_fetch(msr_ctx_t *ctx, const char *name, uint32_t n, const uint32_t *indices,
                             int64_t wait_ms, msr_gather_result_t **result_p)
{
    msr_status_t st = check_key("fetch", name);
    if (st != MSR_OK)
        return st;
    Msr__FetchRequest req = MSR__FETCH_REQUEST__INIT;
    req.generation = ctx->generation;
    req.name = (char *)name;
    req.n_indices = n;
    req.indices = (uint32_t *)indices;
    req.wait_ms = wait_to_ms(ctx, wait_ms);
    ProtobufCMessage *resp = NULL;
    char what[80];
    snprintf(what, sizeof what, "fetch '%.40s'", name);
    st = msr_client_call(ctx, MSR_RPC_FETCH, &req.base,
                         req.wait_ms == UINT32_MAX ? -1 : (int64_t)req.wait_ms, what, &resp);
    if (st != MSR_OK)
        return st;
    Msr__FetchResponse *r = (Msr__FetchResponse *)resp;
    st = gather_result_make(what, n, r->lengths, r->n_lengths, r->data.data, r->data.len, result_p);
    msr_rpc_message_free(resp);
    return st;
}

msr_status_t msr_barrier(msr_ctx_t *ctx)
{
    char name[64];
    uint64_t t0 = msr_now_ns();
    unsigned seq = atomic_fetch_add(&ctx->barrier_seq, 1);
    snprintf(name, sizeof name, "msr/barrier/%u", seq);
    msr_status_t st = msr_store_barrier(ctx, name, (uint32_t)ctx->world_size,
                                        (uint32_t)ctx->local_world_size, -1);
    if (st == MSR_OK)
        msr_lprof_note(MSR_LPROF_BARRIER, t0);
    return st;
}

msr_status_t msr_allgather(msr_ctx_t *ctx, const void *in, size_t len, void *out)
{
    char name[64];
    unsigned seq = atomic_fetch_add(&ctx->allgather_seq, 1);
    snprintf(name, sizeof name, "msr/allgather/%u", seq);
    msr_gather_result_t *r = NULL;
    msr_status_t st = msr_store_allgather(ctx, name, (uint32_t)ctx->world_size, (uint32_t)ctx->rank,
                                          (uint32_t)ctx->local_world_size, in, len, -1, &r);
    if (st == MSR_ERR_NO_MEMORY) {
        /* memory inside the call: this rank's part may not have reached
         * the store, so a part of no bytes goes in its place (refused as
         * given twice where the first did), and the others end at once,
         * naming this rank (the lengths differ), not at the deadline */
        char why[512];
        snprintf(why, sizeof why, "%s", msr_err_msg());
        msr_gather_result_t *none = NULL;
        if (msr_store_allgather(ctx, name, (uint32_t)ctx->world_size, (uint32_t)ctx->rank,
                                (uint32_t)ctx->local_world_size, why, 0, -1, &none) == MSR_OK)
            msr_gather_result_free(none);
        msr_err_set("%s", why);
        return st;
    }
    if (st != MSR_OK)
        return st;
    for (uint32_t i = 0; i < r->count; i++) {
        if (r->lengths[i] != len) {
            msr_err_set("allgather '%s': rank %u gave %zu bytes, this rank %zu", name, i,
                        r->lengths[i], len);
            msr_gather_result_free(r);
            return MSR_ERR_INVALID_ARG;
        }
    }
    if (len)
        memcpy(out, r->data, len * r->count);
    msr_gather_result_free(r);
    return MSR_OK;
}
