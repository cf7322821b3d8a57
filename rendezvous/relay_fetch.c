/* A relay answers its nodes' Fetch calls from what they published through
 * it (relay.h, "Fetch answered from the subtree"). The entries of a
 * Publish the relay forwarded are kept once the coordinator answered it
 * OK; a Fetch whose every entry is kept is answered here, as the
 * coordinator would (the entries in the order asked), and any other goes
 * upstream. A write of an entry's key that passes through the relay (Set,
 * CompareSet, Add, Delete of "<name>/<index>") drops the kept entry first.
 * Only the newest generation's entries are kept; the cache holds at most
 * fetch_max bytes (each entry its key and value), past which entries are
 * not kept (their fetches go upstream). The loop's thread only, but the
 * counts and the bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "rendezvous/relay.h"
#include "rendezvous/relay_server_impl.h"
#include "rendezvous/store_core.h"

/* "generation/name/index": the cache's key; 0 if it does not fit. */
static int cache_key(char *out, size_t len, int32_t generation, const char *name, uint32_t index)
{
    int n = snprintf(out, len, "%d/%s/%u", (int)generation, name, index);
    return n > 0 && (size_t)n < len;
}

/* What an entry costs the cache's bound: its key and its value. */
static uint64_t entry_cost(const char *key, size_t len)
{
    return (uint64_t)strlen(key) + len;
}

typedef struct kept {
    uint64_t cost;
    msr_store_value_t value; /* last: its data follows */
} kept_t;

static void drop_all(msr_relay_server_t *s)
{
    msr_map_cleanup(&s->fetch_cache, msr_free);
    s->fetch_cache = (msr_map_t)MSR_MAP_INIT;
    atomic_store(&s->fetch_bytes, 0);
}

static void drop_key(msr_relay_server_t *s, const char *key)
{
    kept_t *k = msr_map_remove(&s->fetch_cache, key);
    if (k != NULL) {
        atomic_fetch_sub(&s->fetch_bytes, k->cost);
        msr_free(k);
    }
}

void msr_relay_fetch_published(msr_relay_server_t *s, const Msr__PublishRequest *r)
{
    if (r->name == NULL || !msr_rpc_key_valid(r->name))
        return;
    if (s->fetch_generation_set && r->generation < s->fetch_generation)
        return; /* an older generation's: not kept */
    if (!s->fetch_generation_set || r->generation > s->fetch_generation) {
        drop_all(s); /* a new generation publishes anew */
        s->fetch_generation = r->generation;
        s->fetch_generation_set = 1;
    }
    uint64_t max = atomic_load(&s->fetch_max);
    char key[MSR_KEY_MAX + 48];
    for (size_t i = 0; i < r->n_entries; i++) {
        const Msr__Contribution *e = r->entries[i];
        if (!cache_key(key, sizeof key, r->generation, r->name, e->index))
            continue;
        drop_key(s, key); /* published again: the new value, or none */
        uint64_t cost = entry_cost(key, e->data.len);
        if (atomic_load(&s->fetch_bytes) + cost > max)
            continue; /* past the bound: fetched upstream */
        kept_t *k = msr_malloc(sizeof *k + e->data.len);
        if (k == NULL)
            continue;
        k->cost = cost;
        k->value.len = e->data.len;
        if (e->data.len)
            memcpy(k->value.data, e->data.data, e->data.len);
        if (msr_map_put(&s->fetch_cache, key, k, NULL) != MSR_OK) {
            msr_free(k);
            continue;
        }
        atomic_fetch_add(&s->fetch_bytes, cost);
    }
}

/* "<name>/<index>" of a store key: the entry it writes, or 0. */
static int entry_of(const char *key, char *name, size_t nlen, uint32_t *index)
{
    const char *slash = key ? strrchr(key, '/') : NULL;
    if (slash == NULL || slash == key || slash[1] < '0' || slash[1] > '9')
        return 0;
    char *end;
    unsigned long v = strtoul(slash + 1, &end, 10);
    if (*end != '\0' || v > UINT32_MAX || (size_t)(slash - key) >= nlen)
        return 0;
    memcpy(name, key, (size_t)(slash - key));
    name[slash - key] = '\0';
    *index = (uint32_t)v;
    return 1;
}

void msr_relay_fetch_publishing(msr_relay_server_t *s, const Msr__PublishRequest *r)
{
    char key[MSR_KEY_MAX + 48];
    if (!s->fetch_generation_set || r->generation != s->fetch_generation || r->name == NULL)
        return;
    for (size_t i = 0; i < r->n_entries; i++)
        if (cache_key(key, sizeof key, r->generation, r->name, r->entries[i]->index))
            drop_key(s, key);
}

void msr_relay_fetch_written(msr_relay_server_t *s, int32_t generation, const char *key)
{
    char name[MSR_KEY_MAX + 1], ckey[MSR_KEY_MAX + 48];
    uint32_t index;
    if (!s->fetch_generation_set || generation != s->fetch_generation ||
        !entry_of(key, name, sizeof name, &index) ||
        !cache_key(ckey, sizeof ckey, generation, name, index))
        return;
    drop_key(s, ckey);
}

int msr_relay_fetch_answer(msr_relay_server_t *s, msr_rpc_call_t *call, const Msr__FetchRequest *r)
{
    if (!s->fetch_generation_set || r->generation != s->fetch_generation || r->name == NULL ||
        r->n_indices == 0 || r->n_indices > UINT32_MAX)
        return 0;
    const msr_store_value_t **vals = msr_malloc(r->n_indices * sizeof *vals);
    if (vals == NULL)
        return 0; /* upstream, as if not kept */
    char key[MSR_KEY_MAX + 48];
    for (size_t i = 0; i < r->n_indices; i++) {
        kept_t *k = cache_key(key, sizeof key, r->generation, r->name, r->indices[i])
                        ? msr_map_get(&s->fetch_cache, key)
                        : NULL;
        if (k == NULL) {
            msr_free(vals);
            return 0;
        }
        vals[i] = &k->value;
    }
    Msr__FetchResponse resp;
    int packed = msr_store_fetch_pack(vals, (uint32_t)r->n_indices, &resp);
    msr_free(vals);
    if (!packed)
        return 0;
    atomic_fetch_add(&s->fetch_answered, 1);
    if (msr_rpc_call_reply(call, &resp.base) != MSR_OK)
        MSR_DEBUG("%s: a fetch answered from the subtree's entries was not sent", s->me);
    msr_store_fetch_pack_free(&resp);
    return 1;
}

void msr_relay_fetch_cleanup(msr_relay_server_t *s)
{
    drop_all(s);
}

void msr_relay_server_fetch_limit(msr_relay_server_t *s, uint64_t bytes)
{
    atomic_store(&s->fetch_max, bytes);
}

void msr_relay_server_fetches(const msr_relay_server_t *s, uint64_t *answered_p, uint64_t *bytes_p)
{
    if (answered_p)
        *answered_p = atomic_load(&s->fetch_answered);
    if (bytes_p)
        *bytes_p = atomic_load(&s->fetch_bytes);
}
