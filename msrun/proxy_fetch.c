/* The store proxy's fetches: a worker's Fetch is answered from the values
 * the node fetched before; the entries it misses are fetched upstream once
 * for every worker of the node that waits on them (an entry already on its
 * way is not asked for again), so the coordinator sees one fetch per node
 * and set of entries, not one per rank. The proxy's thread only. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "launcher/proxy_impl.h"
#include "rendezvous/store_core.h"

/* One upstream Fetch. */
typedef struct fetch_up {
    msr_rpc_async_t async;
    msr_proxy_t *proxy;
    int generation;
    int via_relay; /* sent to the node's relay */
    uint32_t n;
    uint32_t *indices;
    msr_list_t link; /* in proxy->fetch_ups */
    char name[MSR_KEY_MAX + 1];
} fetch_up_t;

/* A worker's Fetch that waits for entries. */
struct fetch_wait {
    msr_rpc_call_t *call;
    uint64_t deadline; /* the call's, or its wait_ms when sooner */
    int generation;
    uint32_t n;
    uint32_t *indices;
    msr_list_t link; /* in proxy->fetch_waits */
    char name[MSR_KEY_MAX + 1];
};

/* "generation/name/index": the cache's and the in-flight map's key. */
static void cache_key(char *out, size_t len, int generation, const char *name, uint32_t index)
{
    snprintf(out, len, "%d/%s/%u", generation, name, index);
}

static void value_free(void *v)
{
    msr_free(v);
}

void msr_proxy_fetch_wait_free(fetch_wait_t *w)
{
    if (w == NULL)
        return;
    msr_list_remove(&w->link);
    msr_free(w->indices);
    msr_free(w);
}

/* Answers call from the cache if every entry is there; 1 if answered.
 * hits (may be NULL) is counted before the answer goes. */
static int answer_cached(msr_proxy_t *p, msr_rpc_call_t *call, int generation, const char *name,
                         uint32_t n, const uint32_t *indices, _Atomic uint64_t *hits)
{
    char key[MSR_KEY_MAX + 48];
    const msr_store_value_t **vals = msr_malloc((n ? n : 1) * sizeof *vals);
    Msr__FetchResponse r;
    if (vals == NULL) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "msrun's proxy is out of memory");
        return 1;
    }
    for (uint32_t i = 0; i < n; i++) {
        cache_key(key, sizeof key, generation, name, indices[i]);
        if ((vals[i] = msr_map_get(&p->fetch_cache, key)) == NULL) {
            msr_free(vals);
            return 0;
        }
    }
    if (hits)
        atomic_fetch_add(hits, 1);
    int packed = msr_store_fetch_pack(vals, n, &r);
    msr_free(vals);
    if (!packed) {
        msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "msrun's proxy is out of memory");
        return 1;
    }
    msr_rpc_call_reply(call, &r.base);
    msr_store_fetch_pack_free(&r);
    return 1;
}

static void up_free(fetch_up_t *u)
{
    msr_list_remove(&u->link);
    msr_rpc_async_cleanup(&u->async);
    msr_free(u->indices);
    msr_free(u);
}

/* Takes the answer of u into the cache; the entries it asked for are no
 * longer on their way either way. */
static void up_absorb(msr_proxy_t *p, fetch_up_t *u)
{
    char key[MSR_KEY_MAX + 48];
    const Msr__FetchResponse *r = (const Msr__FetchResponse *)u->async.resp;
    int ok = u->async.status == MSR_OK && r != NULL && r->n_lengths == u->n;
    size_t off = 0;
    for (uint32_t i = 0; i < u->n; i++) {
        cache_key(key, sizeof key, u->generation, u->name, u->indices[i]);
        msr_map_remove(&p->fetch_inflight, key);
        if (!ok || off + r->lengths[i] > r->data.len)
            continue;
        msr_store_value_t *v = msr_malloc(sizeof *v + r->lengths[i]);
        void *old = NULL;
        size_t at = off;
        off += r->lengths[i];
        if (v == NULL)
            continue; /* not cached: fetched again when asked */
        v->len = r->lengths[i];
        memcpy(v->data, r->data.data + at, v->len);
        if (msr_map_put(&p->fetch_cache, key, v, &old) != MSR_OK)
            msr_free(v);
        msr_free(old);
    }
}

/* A new generation publishes anew: what the cache holds of an older one
 * goes. Returns 0 when generation is older than the cache's. */
static int cache_generation(msr_proxy_t *p, int generation)
{
    if (generation < p->fetch_generation)
        return 0;
    if (generation > p->fetch_generation) {
        msr_map_cleanup(&p->fetch_cache, value_free);
        p->fetch_cache = (msr_map_t)MSR_MAP_INIT;
        p->fetch_generation = generation;
    }
    return 1;
}

void msr_proxy_fetch_published(msr_proxy_t *p, const Msr__PublishRequest *r)
{
    char key[MSR_KEY_MAX + 48];
    if (!msr_rpc_key_valid(r->name) || !cache_generation(p, r->generation))
        return;
    for (size_t i = 0; i < r->n_entries; i++) {
        const Msr__Contribution *e = r->entries[i];
        msr_store_value_t *v = msr_malloc(sizeof *v + e->data.len);
        void *old = NULL;
        if (v == NULL)
            return; /* not cached: fetched upstream when asked */
        v->len = e->data.len;
        if (e->data.len)
            memcpy(v->data, e->data.data, e->data.len);
        cache_key(key, sizeof key, r->generation, r->name, e->index);
        if (msr_map_put(&p->fetch_cache, key, v, &old) != MSR_OK)
            msr_free(v);
        msr_free(old);
    }
}

static msr_status_t send_missing(msr_proxy_t *p, fetch_wait_t *w, uint64_t deadline);

static void up_done(msr_rpc_async_t *a)
{
    fetch_up_t *u = MSR_CONTAINER_OF(a, fetch_up_t, async);
    msr_proxy_t *p = u->proxy;
    int relay_gone = msr_proxy_relay_gave_up(p, u->via_relay, a); /* ask the coordinator */
    up_absorb(p, u);
    /* Every worker waiting on this name is answered now, or asks again
     * for what it still misses, or fails with the upstream's reason when
     * that was the end of its own wait. */
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &p->fetch_waits)
    {
        fetch_wait_t *w = MSR_CONTAINER_OF(pos, fetch_wait_t, link);
        if (w->generation != u->generation || strcmp(w->name, u->name) != 0)
            continue;
        msr_rpc_call_t *call = w->call;
        if (answer_cached(p, call, w->generation, w->name, w->n, w->indices, NULL)) {
            msr_proxy_held_free(call);
            msr_proxy_fetch_wait_free(w);
            continue;
        }
        /* still missing with an answer in hand: entries on their way for
         * another caller, or not kept; after a timeout or a lost
         * coordinator: ask again while the caller's own wait allows */
        uint64_t deadline = w->deadline;
        int again = !atomic_load(&p->stop) &&
                    (a->status == MSR_OK || relay_gone ||
                     ((a->status == MSR_ERR_TIMEOUT || a->status == MSR_ERR_UNREACHABLE) &&
                      msr_deadline_left_ms(deadline) > 100));
        if (again && send_missing(p, w, deadline) == MSR_OK)
            continue;
        msr_proxy_held_free(call);
        msr_proxy_fetch_wait_free(w);
        if (a->status != MSR_OK)
            msr_rpc_call_forward(call, a);
        else
            msr_rpc_call_fail(call, MSR_RPC_UNAVAILABLE, "msrun's proxy cannot fetch '%s'",
                              u->name);
    }
    up_free(u);
}

/* Fetches upstream the entries of w that are neither cached nor on their
 * way (none may be left: then it waits for those on their way). */
static msr_status_t send_missing(msr_proxy_t *p, fetch_wait_t *w, uint64_t deadline)
{
    char key[MSR_KEY_MAX + 48];
    fetch_up_t *u = msr_calloc(1, sizeof *u);
    if (u == NULL || (u->indices = msr_malloc(w->n * sizeof *u->indices)) == NULL) {
        msr_free(u);
        return MSR_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < w->n; i++) {
        cache_key(key, sizeof key, w->generation, w->name, w->indices[i]);
        if (msr_map_get(&p->fetch_cache, key) || msr_map_get(&p->fetch_inflight, key))
            continue;
        if (msr_map_put(&p->fetch_inflight, key, u, NULL) != MSR_OK)
            goto err_marks;
        u->indices[u->n++] = w->indices[i];
    }
    if (u->n == 0) {
        msr_free(u->indices);
        msr_free(u);
        return MSR_OK;
    }
    u->proxy = p;
    u->generation = w->generation;
    snprintf(u->name, sizeof u->name, "%s", w->name);
    u->async.method = MSR_RPC_FETCH;
    u->async.deadline = deadline;
    u->async.done = up_done;
    Msr__FetchRequest r = MSR__FETCH_REQUEST__INIT;
    r.generation = u->generation;
    r.name = u->name;
    r.n_indices = u->n;
    r.indices = u->indices;
    int64_t left = msr_deadline_left_ms(deadline);
    r.wait_ms = left > (int64_t)UINT32_MAX - 1 ? UINT32_MAX - 1 : left > 0 ? (uint32_t)left : 0;
    msr_list_push_back(&p->fetch_ups, &u->link);
    msr_rpc_channel_t *ch = msr_proxy_store_channel(p, &u->via_relay);
    u->async.wait_for_ready = !u->via_relay; /* as the store's calls (proxy_up.c) */
    if (msr_rpc_call_start(ch, p->loop, &u->async, &r.base) != MSR_OK) {
        msr_list_remove(&u->link);
        goto err_marks;
    }
    atomic_fetch_add(&p->fetch_up_calls, 1);
    return MSR_OK;

err_marks:
    for (uint32_t i = 0; i < u->n; i++) {
        cache_key(key, sizeof key, w->generation, w->name, u->indices[i]);
        msr_map_remove(&p->fetch_inflight, key);
    }
    msr_free(u->indices);
    msr_free(u);
    return MSR_ERR_NO_MEMORY;
}

void msr_proxy_fetch(msr_proxy_t *p, msr_rpc_call_t *call, const Msr__FetchRequest *r)
{
    if (!msr_rpc_key_valid(r->name) || r->n_indices > MSR_PROXY_FETCH_MAX) {
        msr_rpc_call_fail(call, MSR_RPC_INVALID_ARGUMENT,
                          "fetch: a bad name, or more than %d entries", MSR_PROXY_FETCH_MAX);
        return;
    }
    cache_generation(p, r->generation);
    uint32_t n = (uint32_t)r->n_indices;
    if (answer_cached(p, call, r->generation, r->name, n, r->indices, &p->fetch_hits))
        return;
    /* It keeps its request, its wait with a copy of the indices, and the
     * indices it sends upstream. */
    held_t *h = msr_proxy_held_new(p, call, MSR_RPC_FETCH,
                                   msr_proxy_request_keeps(&r->base) + sizeof(fetch_wait_t) +
                                       2 * (uint64_t)n * sizeof(uint32_t));
    if (h == NULL)
        return;
    msr_rpc_call_set_data(call, h);
    fetch_wait_t *w = msr_calloc(1, sizeof *w);
    uint32_t *indices = msr_malloc((n ? n : 1) * sizeof *indices);
    if (w == NULL || indices == NULL)
        goto err_free;
    w->call = call;
    w->generation = r->generation;
    w->n = n;
    w->indices = indices;
    memcpy(indices, r->indices, n * sizeof *indices);
    snprintf(w->name, sizeof w->name, "%s", r->name);
    msr_list_init(&w->link);
    uint64_t deadline = msr_rpc_call_deadline(call);
    uint64_t until = r->wait_ms == UINT32_MAX ? MSR_DEADLINE_NEVER : msr_deadline_in_ms(r->wait_ms);
    if (until < deadline)
        deadline = until;
    w->deadline = deadline;
    if (send_missing(p, w, deadline) != MSR_OK)
        goto err_free;
    msr_list_push_back(&p->fetch_waits, &w->link);
    h->fetch = w;
    return;

err_free:
    msr_proxy_held_free(call);
    msr_free(indices);
    msr_free(w);
    msr_rpc_call_fail(call, MSR_RPC_RESOURCE_EXHAUSTED, "msrun's proxy is out of memory");
}

void msr_proxy_fetch_shutdown(msr_proxy_t *p)
{
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &p->fetch_ups)
    {
        fetch_up_t *u = MSR_CONTAINER_OF(pos, fetch_up_t, link);
        msr_rpc_async_cancel(&u->async);
    }
}

void msr_proxy_fetch_cleanup(msr_proxy_t *p)
{
    msr_map_cleanup(&p->fetch_cache, value_free);
    msr_map_cleanup(&p->fetch_inflight, NULL);
}
