/* A chained hash map with string keys (FNV-1a hash). */
#include "base/map.h"

#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"

static size_t map_hash(const char *key)
{
    uint64_t h = msr_fnv1a_str(MSR_FNV1A_INIT, key);
    return (size_t)(h ^ (h >> 29));
}

static msr_map_entry_t **map_slot(const msr_map_t *map, const char *key, size_t hash)
{
    msr_map_entry_t **pp = &map->buckets[hash & (map->nbuckets - 1)];
    while (*pp && ((*pp)->hash != hash || strcmp((*pp)->key, key) != 0))
        pp = &(*pp)->next;
    return pp;
}

void *msr_map_get(const msr_map_t *map, const char *key)
{
    if (map->nbuckets == 0)
        return NULL;
    msr_map_entry_t *e = *map_slot(map, key, map_hash(key));
    return e ? e->value : NULL;
}

static msr_status_t map_grow(msr_map_t *map)
{
    size_t n = map->nbuckets ? map->nbuckets * 2 : 16;
    msr_map_entry_t **b = msr_calloc(n, sizeof *b);
    if (b == NULL)
        return MSR_ERR_NO_MEMORY;
    for (size_t i = 0; i < map->nbuckets; i++) {
        msr_map_entry_t *e = map->buckets[i];
        while (e) {
            msr_map_entry_t *next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    msr_free(map->buckets);
    map->buckets = b;
    map->nbuckets = n;
    return MSR_OK;
}

msr_status_t msr_map_put(msr_map_t *map, const char *key, void *value, void **old_p)
{
    size_t hash = map_hash(key);
    if (map->nbuckets) {
        msr_map_entry_t *e = *map_slot(map, key, hash);
        if (e) {
            if (old_p)
                *old_p = e->value;
            e->value = value;
            return MSR_OK;
        }
    }
    if (map->count + 1 > map->nbuckets - map->nbuckets / 4 || map->nbuckets == 0) {
        msr_status_t st = map_grow(map);
        if (st != MSR_OK)
            return st;
    }
    size_t klen = strlen(key);
    msr_map_entry_t *e = msr_malloc(sizeof *e + klen + 1);
    if (e == NULL)
        return MSR_ERR_NO_MEMORY;
    memcpy(e->key, key, klen + 1);
    e->hash = hash;
    e->value = value;
    msr_map_entry_t **head = &map->buckets[hash & (map->nbuckets - 1)];
    e->next = *head;
    *head = e;
    map->count++;
    if (old_p)
        *old_p = NULL;
    return MSR_OK;
}

void *msr_map_remove(msr_map_t *map, const char *key)
{
    if (map->nbuckets == 0)
        return NULL;
    msr_map_entry_t **pp = map_slot(map, key, map_hash(key));
    msr_map_entry_t *e = *pp;
    if (e == NULL)
        return NULL;
    *pp = e->next;
    void *v = e->value;
    msr_free(e);
    map->count--;
    return v;
}

void msr_map_foreach(const msr_map_t *map, void (*fn)(const char *key, void *value, void *arg),
                     void *arg)
{
    for (size_t i = 0; i < map->nbuckets; i++)
        for (msr_map_entry_t *e = map->buckets[i]; e; e = e->next)
            fn(e->key, e->value, arg);
}

void msr_map_cleanup(msr_map_t *map, void (*free_value)(void *value))
{
    for (size_t i = 0; i < map->nbuckets; i++) {
        msr_map_entry_t *e = map->buckets[i];
        while (e) {
            msr_map_entry_t *next = e->next;
            if (free_value)
                free_value(e->value);
            msr_free(e);
            e = next;
        }
    }
    msr_free(map->buckets);
    map->buckets = NULL;
    map->nbuckets = map->count = 0;
}
