/* The store's calls on keys (store_core.h): set, get and its waits, add,
 * compare-set and delete, and publish and fetch, whose entries are keys. */
#include "rendezvous/store_core.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/heap.h"
#include "base/list.h"
#include "base/map.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "rendezvous/held.h"
#include "rendezvous/store_core_impl.h"

kv_t *msr_store_kv_new(const void *data, size_t len)
{
    kv_t *v = msr_malloc(sizeof *v + len);
    if (v == NULL)
        return NULL;
    v->len = len;
    if (len)
        memcpy(v->data, data, len);
    return v;
}

static void reply_value(msr_store_core_t *c, void *call, const kv_t *v)
{
    Msr__GetResponse r = MSR__GET_RESPONSE__INIT;
    r.value.data = (uint8_t *)v->data;
    r.value.len = v->len;
    reply(c, call, &r.base);
}

static void fetch_advance(msr_store_core_t *c, waiter_t *w);

static int same_value(const kv_t *a, const void *data, size_t len)
{
    return a->len == len && (len == 0 || memcmp(a->data, data, len) == 0);
}

/* Answers everyone waiting for key now that it has the value v (NULL: it
 * was deleted): a get waiting for the key to be set gets v, one waiting
 * for a change gets v unless v is the value it saw (or NOT_FOUND when the
 * key went), and a fetch goes on to the next key it misses. */
static void wake_getters(msr_store_core_t *c, const char *key, const kv_t *v)
{
    getwait_t *gw = msr_map_get(&c->getwait, key);
    if (gw == NULL)
        return;
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &gw->waiters)
    {
        waiter_t *w = WAITER_AT(pos);
        if (v == NULL ? w->old == NULL : w->old && same_value(w->old, v->data, v->len))
            continue;
        if (w->held.kind == MSR_HELD_FETCH) {
            msr_list_remove(&w->held.link);
            fetch_advance(c, w);
            continue;
        }
        void *call = w->held.call;
        waiter_free(c, w);
        if (v)
            reply_value(c, call, v);
        else
            msr_held_fail(c->held, call, MSR_RPC_NOT_FOUND, "key '%.200s' was deleted", key);
    }
    if (msr_list_empty(&gw->waiters))
        msr_store_getwait_drop(c, gw);
}

static int store_put(msr_store_core_t *c, void *call, const char *key, const void *data, size_t len)
{
    const kv_t *cur = msr_map_get(&c->store, key);
    if (msr_store_limits_check(store_limits(c), &c->usage, "write", key, cur != NULL,
                               cur ? cur->len : 0, len) != MSR_OK) {
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "%s", msr_err_msg());
        return 0;
    }
    kv_t *v = msr_store_kv_new(data, len);
    void *old = NULL;
    if (v == NULL || msr_map_put(&c->store, key, v, &old) != MSR_OK) {
        msr_free(v);
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return 0;
    }
    msr_store_usage_put(&c->usage, key, old != NULL, old ? ((kv_t *)old)->len : 0, len);
    kv_free(old);
    mark_key(c, key);
    wake_getters(c, key, v);
    return 1;
}

void msr_store_do_set(msr_store_core_t *c, void *call, const Msr__SetRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "set", req->key) ||
        request_seen(c, call, MSR_RPC_SET, req->client_id, req->request_id))
        return;
    if (store_put(c, call, req->key, req->value.data, req->value.len)) {
        Msr__SetResponse r = MSR__SET_RESPONSE__INIT;
        reply_write(c, call, MSR_RPC_SET, req->client_id, req->request_id, &r.base);
    }
}

/* The get-wait record of key, made if there is none; NULL when refused:
 * then held (a waiter of call's, or NULL) is freed first and call failed. */
static getwait_t *getwait_for(msr_store_core_t *c, void *call, const char *what, const char *key,
                              waiter_t *held)
{
    getwait_t *gw = msr_map_get(&c->getwait, key);
    if (gw)
        return gw;
    size_t kl = strlen(key);
    msr_status_t admitted = msr_store_limits_check_add(store_limits(c), &c->usage, what, key, 1,
                                                       msr_store_entry_bytes(kl, 0));
    gw = admitted == MSR_OK ? msr_calloc(1, sizeof *gw + kl + 1) : NULL;
    if (gw == NULL || msr_map_put(&c->getwait, key, gw, NULL) != MSR_OK) {
        msr_free(gw);
        if (held)
            waiter_free(c, held);
        if (admitted != MSR_OK)
            msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "%s", msr_err_msg());
        else
            msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return NULL;
    }
    memcpy(gw->key, key, kl + 1);
    msr_list_init(&gw->waiters);
    msr_store_usage_put(&c->usage, gw->key, 0, 0, 0);
    return gw;
}

/* Records leave their map and the store's usage. */
void msr_store_getwait_drop(msr_store_core_t *c, getwait_t *gw)
{
    msr_map_remove(&c->getwait, gw->key);
    msr_store_usage_remove(&c->usage, gw->key, 0);
    getwait_free(gw);
}

/* A get that waits for a change from the value it saw: answered now when
 * the key holds another value or none, else held with a copy of the value. */
static int get_changed_now(msr_store_core_t *c, void *call, const Msr__GetRequest *req)
{
    const kv_t *v = msr_map_get(&c->store, req->key);
    if (v == NULL) {
        msr_held_fail(c->held, call, MSR_RPC_NOT_FOUND, "key '%.200s' not found", req->key);
        return 1;
    }
    if (!same_value(v, req->old_value.data, req->old_value.len)) {
        reply_value(c, call, v);
        return 1;
    }
    if (req->wait_ms == 0) {
        msr_held_fail(c->held, call, MSR_RPC_DEADLINE_EXCEEDED, "key '%.200s' did not change",
                      req->key);
        return 1;
    }
    return 0;
}

void msr_store_do_get(msr_store_core_t *c, void *call, const Msr__GetRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "get", req->key))
        return;
    kv_t *v = msr_map_get(&c->store, req->key);
    if (req->changed ? get_changed_now(c, call, req) : v != NULL) {
        if (!req->changed)
            reply_value(c, call, v);
        return;
    }
    if (req->wait_ms == 0) {
        msr_held_fail(c->held, call, MSR_RPC_NOT_FOUND, "key '%.200s' not found", req->key);
        return;
    }
    getwait_t *gw = getwait_for(c, call, "get", req->key, NULL);
    if (gw == NULL)
        return;
    int64_t wait = req->wait_ms == UINT32_MAX ? -1 : (int64_t)req->wait_ms;
    /* a change-wait keeps its request's old value and a copy of it */
    uint64_t kept = strlen(req->key) + (req->changed ? 2 * req->old_value.len + sizeof(kv_t) : 0);
    waiter_t *w = waiter_new(c, call, MSR_HELD_GET, gw, &gw->waiters, wait, kept);
    kv_t *old =
        w && req->changed ? msr_store_kv_new(req->old_value.data, req->old_value.len) : NULL;
    if (w && req->changed && old == NULL) {
        waiter_free(c, w);
        w = NULL;
        msr_err_set("coordinator out of memory");
    }
    if (w == NULL) {
        if (msr_list_empty(&gw->waiters))
            msr_store_getwait_drop(c, gw);
        waiter_refused(c, call);
        return;
    }
    w->old = old;
}

static int parse_counter(const kv_t *v, int64_t *out)
{
    char text[32];
    if (v->len == 0 || v->len >= sizeof text)
        return 0;
    memcpy(text, v->data, v->len);
    text[v->len] = '\0';
    return msr_parse_i64(text, INT64_MIN, INT64_MAX, out) == MSR_OK;
}

/* One part of a merged add: 1 applied or answered from its record (its
 * value in *out), 0 when it and those after it are left to go alone. */
static int add_part(msr_store_core_t *c, const Msr__AddPart *p, int64_t *value, int64_t *out)
{
    int seen = 0;
    if (c->ops.request_value && p->client_id && p->request_id)
        seen = c->ops.request_value(c->ops.ctx, p->client_id, p->request_id, out);
    if (seen != 0)
        return seen > 0;
    if ((p->delta > 0 && *value > INT64_MAX - p->delta) ||
        (p->delta < 0 && *value < INT64_MIN - p->delta))
        return 0;
    *value += p->delta;
    *out = *value;
    return 1;
}

/* A relay's merged add: its parts applied in order, each once, as if each
 * came alone; each part's value answered in AddResponse.values. A part
 * that would fail alone (overflow, an id of another call) ends the merge:
 * it and those after it are not applied, and go alone. */
static void do_add_merged(msr_store_core_t *c, void *call, const Msr__AddRequest *req)
{
    if (req->n_parts > MSR_ADD_PARTS_MAX) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "add: %zu parts, more than %d in one merged call", req->n_parts,
                      MSR_ADD_PARTS_MAX);
        return;
    }
    int64_t value = 0, *values = msr_calloc(req->n_parts, sizeof *values);
    kv_t *v = msr_map_get(&c->store, req->key);
    if (values == NULL || (v && !parse_counter(v, &value))) {
        msr_free(values);
        msr_held_fail(c->held, call, values ? MSR_RPC_INVALID_ARGUMENT : MSR_RPC_RESOURCE_EXHAUSTED,
                      values ? "add: key '%.200s' holds a value that is not a counter"
                             : "coordinator out of memory (add '%.200s')",
                      req->key);
        return;
    }
    int64_t start = value;
    size_t n = 0;
    while (n < req->n_parts && add_part(c, req->parts[n], &value, &values[n]))
        n++;
    char text[32];
    int len = snprintf(text, sizeof text, "%" PRId64, value);
    if (value != start && !store_put(c, call, req->key, text, (size_t)len)) {
        msr_free(values);
        return;
    }
    Msr__AddResponse r = MSR__ADD_RESPONSE__INIT;
    for (size_t k = 0; k < n && c->ops.request_note; k++) {
        const Msr__AddPart *p = req->parts[k];
        r.value = values[k];
        if (p->client_id && p->request_id)
            c->ops.request_note(c->ops.ctx, MSR_RPC_ADD, p->client_id, p->request_id, &r.base);
    }
    r.value = n ? values[n - 1] : value;
    r.n_values = n;
    r.values = values;
    c->ops.reply(c->ops.ctx, call, &r.base);
    msr_free(values);
}

void msr_store_do_add(msr_store_core_t *c, void *call, const Msr__AddRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "add", req->key))
        return;
    if (req->n_parts > 0) {
        do_add_merged(c, call, req);
        return;
    }
    if (request_seen(c, call, MSR_RPC_ADD, req->client_id, req->request_id))
        return;
    int64_t value = 0;
    kv_t *v = msr_map_get(&c->store, req->key);
    if (v && !parse_counter(v, &value)) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "add: key '%.200s' holds a value that is not a counter", req->key);
        return;
    }
    if ((req->delta > 0 && value > INT64_MAX - req->delta) ||
        (req->delta < 0 && value < INT64_MIN - req->delta)) {
        msr_held_fail(c->held, call, MSR_RPC_OUT_OF_RANGE, "add: counter '%.200s' would overflow",
                      req->key);
        return;
    }
    value += req->delta;
    char text[32];
    int n = snprintf(text, sizeof text, "%" PRId64, value);
    if (store_put(c, call, req->key, text, (size_t)n)) {
        Msr__AddResponse r = MSR__ADD_RESPONSE__INIT;
        r.value = value;
        reply_write(c, call, MSR_RPC_ADD, req->client_id, req->request_id, &r.base);
    }
}

void msr_store_do_compare_set(msr_store_core_t *c, void *call, const Msr__CompareSetRequest *req)
{
    if (!check_generation(c, call, req->generation) ||
        !check_key(c, call, "compare-set", req->key) ||
        request_seen(c, call, MSR_RPC_COMPARE_SET, req->client_id, req->request_id))
        return;
    kv_t *v = msr_map_get(&c->store, req->key);
    int match = req->expect_absent
                    ? v == NULL
                    : (v != NULL && v->len == req->expected.len &&
                       (v->len == 0 || memcmp(v->data, req->expected.data, v->len) == 0));
    Msr__CompareSetResponse r = MSR__COMPARE_SET_RESPONSE__INIT;
    if (match) {
        if (!store_put(c, call, req->key, req->desired.data, req->desired.len))
            return;
        v = msr_map_get(&c->store, req->key);
        r.swapped = 1;
    }
    if (v) {
        r.present = 1;
        r.current.data = v->data;
        r.current.len = v->len;
    }
    reply_write(c, call, MSR_RPC_COMPARE_SET, req->client_id, req->request_id, &r.base);
}

void msr_store_do_delete(msr_store_core_t *c, void *call, const Msr__DeleteRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "delete", req->key) ||
        request_seen(c, call, MSR_RPC_DELETE, req->client_id, req->request_id))
        return;
    kv_t *v = msr_map_remove(&c->store, req->key);
    Msr__DeleteResponse r = MSR__DELETE_RESPONSE__INIT;
    r.existed = v != NULL;
    if (v) {
        msr_store_usage_remove(&c->usage, req->key, v->len);
        mark_key(c, req->key);
        wake_getters(c, req->key, NULL);
    }
    kv_free(v);
    reply_write(c, call, MSR_RPC_DELETE, req->client_id, req->request_id, &r.base);
}

/* Every key of the store counts, whoever set it: torch's TCPStore counts
 * its own keys too. Barriers and allgathers under way are not keys. */
void msr_store_do_num_keys(msr_store_core_t *c, void *call, const Msr__NumKeysRequest *req)
{
    if (!check_generation(c, call, req->generation))
        return;
    Msr__NumKeysResponse r = MSR__NUM_KEYS_RESPONSE__INIT;
    r.keys = c->store.count;
    reply(c, call, &r.base);
}

/* ---- publish and fetch ---- */

/* The key of entry index of name ("<name>/<index>"); 0 if it is too long. */
static int entry_key(char *key, size_t len, const char *name, uint32_t index)
{
    int n = snprintf(key, len, "%s/%u", name, index);
    return n > 0 && (size_t)n < len && msr_rpc_key_valid(key);
}

void msr_store_do_publish(msr_store_core_t *c, void *call, const Msr__PublishRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "publish", req->name) ||
        request_seen(c, call, MSR_RPC_PUBLISH, req->client_id, req->request_id))
        return;
    char key[MSR_KEY_MAX + 1];
    for (size_t i = 0; i < req->n_entries; i++)
        if (!entry_key(key, sizeof key, req->name, req->entries[i]->index)) {
            msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                          "publish '%.200s': the name is too long", req->name);
            return;
        }
    /* Each entry is a Set: a retry writes the same values again. */
    for (size_t i = 0; i < req->n_entries; i++) {
        const Msr__Contribution *e = req->entries[i];
        entry_key(key, sizeof key, req->name, e->index);
        if (!store_put(c, call, key, e->data.data, e->data.len))
            return;
    }
    Msr__PublishResponse r = MSR__PUBLISH_RESPONSE__INIT;
    reply_write(c, call, MSR_RPC_PUBLISH, req->client_id, req->request_id, &r.base);
}

int msr_store_fetch_pack(const msr_store_value_t *const *vals, uint32_t n, Msr__FetchResponse *r)
{
    msr__fetch_response__init(r);
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += vals[i]->len;
    r->data.data = msr_malloc(total ? total : 1);
    r->lengths = msr_malloc((n ? n : 1) * sizeof *r->lengths);
    if (r->data.data == NULL || r->lengths == NULL) {
        msr_store_fetch_pack_free(r);
        return 0;
    }
    size_t off = 0;
    for (uint32_t i = 0; i < n; i++) {
        r->lengths[i] = (uint32_t)vals[i]->len;
        if (vals[i]->len)
            memcpy(r->data.data + off, vals[i]->data, vals[i]->len);
        off += vals[i]->len;
    }
    r->data.len = total;
    r->n_lengths = n;
    return 1;
}

void msr_store_fetch_pack_free(Msr__FetchResponse *r)
{
    msr_free(r->data.data);
    msr_free(r->lengths);
    r->data.data = NULL;
    r->lengths = NULL;
}

/* Answers a fetch whose entries are all present. */
static void fetch_reply(msr_store_core_t *c, void *call, const char *name, uint32_t n,
                        const uint32_t *indices)
{
    char key[MSR_KEY_MAX + 1];
    const kv_t **vals = msr_malloc((n ? n : 1) * sizeof *vals);
    Msr__FetchResponse r;
    if (vals == NULL) {
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        entry_key(key, sizeof key, name, indices[i]);
        vals[i] = msr_map_get(&c->store, key);
        total += vals[i]->len;
    }
    /* An index may be asked for many times: the answer, not the store,
     * could then pass the store's size. */
    if (total > store_limits(c)->bytes_max) {
        msr_free(vals);
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED,
                      "fetch '%.200s': the answer's %" PRIu64 " bytes exceed the store's total "
                      "size limit of %" PRIu64 " bytes (--store_bytes_max)",
                      name, total, store_limits(c)->bytes_max);
        return;
    }
    int packed = msr_store_fetch_pack(vals, n, &r);
    msr_free(vals);
    if (!packed) {
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return;
    }
    reply(c, call, &r.base);
    msr_store_fetch_pack_free(&r);
}

/* The first of indices[from..n) whose entry is missing, or n. */
static uint32_t fetch_missing(msr_store_core_t *c, const char *name, uint32_t n,
                              const uint32_t *indices, uint32_t from)
{
    char key[MSR_KEY_MAX + 1];
    for (uint32_t i = from; i < n; i++) {
        entry_key(key, sizeof key, name, indices[i]);
        if (msr_map_get(&c->store, key) == NULL)
            return i;
    }
    return n;
}

/* A held fetch whose awaited key appeared (w is on no list): answers it
 * when nothing is missing, else waits on the next missing key. */
static void fetch_advance(msr_store_core_t *c, waiter_t *w)
{
    fetch_t *f = w->fetch;
    void *call = w->held.call;
    f->next = fetch_missing(c, f->name, f->n, f->indices, f->next);
    if (f->next == f->n) {
        w->fetch = NULL;
        waiter_free(c, w);
        fetch_reply(c, call, f->name, f->n, f->indices);
        msr_free(f->indices);
        msr_free(f);
        return;
    }
    char key[MSR_KEY_MAX + 1];
    entry_key(key, sizeof key, f->name, f->indices[f->next]);
    getwait_t *gw = getwait_for(c, call, "fetch", key, w);
    if (gw == NULL)
        return;
    w->held.owner = gw;
    msr_list_push_back(&gw->waiters, &w->held.link);
}

void msr_store_do_fetch(msr_store_core_t *c, void *call, const Msr__FetchRequest *req)
{
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "fetch", req->name))
        return;
    if (req->n_indices > MSR_FETCH_MAX) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "fetch '%.200s': %zu entries asked, at most %d", req->name, req->n_indices,
                      MSR_FETCH_MAX);
        return;
    }
    char key[MSR_KEY_MAX + 1];
    if (req->n_indices > 0 && !entry_key(key, sizeof key, req->name, UINT32_MAX)) {
        msr_held_fail(c->held, call, MSR_RPC_INVALID_ARGUMENT,
                      "fetch '%.200s': the name is too long", req->name);
        return;
    }
    uint32_t n = (uint32_t)req->n_indices;
    uint32_t miss = fetch_missing(c, req->name, n, req->indices, 0);
    if (miss == n) {
        fetch_reply(c, call, req->name, n, req->indices);
        return;
    }
    if (req->wait_ms == 0) {
        msr_held_fail(c->held, call, MSR_RPC_NOT_FOUND,
                      "fetch '%.200s': entry %u was not published", req->name, req->indices[miss]);
        return;
    }
    size_t nl = strlen(req->name);
    int64_t wait = req->wait_ms == UINT32_MAX ? -1 : (int64_t)req->wait_ms;
    /* It keeps its request (name and indices, with the caller) and a copy
     * of both (here), all charged before anything is copied. */
    uint64_t kept = 2 * ((uint64_t)n * sizeof(uint32_t) + nl + 1) + sizeof(fetch_t);
    waiter_t *w = waiter_new(c, call, MSR_HELD_FETCH, NULL, NULL, wait, kept);
    if (w == NULL) {
        waiter_refused(c, call);
        return;
    }
    fetch_t *f = msr_calloc(1, sizeof *f + nl + 1);
    uint32_t *indices = msr_malloc((n ? n : 1) * sizeof *indices);
    if (f == NULL || indices == NULL) {
        msr_free(f);
        msr_free(indices);
        waiter_free(c, w);
        msr_held_fail(c->held, call, MSR_RPC_RESOURCE_EXHAUSTED, "coordinator out of memory");
        return;
    }
    memcpy(f->name, req->name, nl + 1);
    memcpy(indices, req->indices, n * sizeof *indices);
    f->n = n;
    f->indices = indices;
    f->next = miss;
    w->fetch = f;
    fetch_advance(c, w);
}
