/* A hash map from NUL-terminated string keys to pointers. */
#ifndef MSR_BASE_MAP_H
#define MSR_BASE_MAP_H

#include <stddef.h>

#include "msrun/base.h"

typedef struct msr_map_entry {
    struct msr_map_entry *next;
    size_t hash;
    void *value;
    char key[]; /* owned copy */
} msr_map_entry_t;

typedef struct msr_map {
    msr_map_entry_t **buckets;
    size_t nbuckets; /* a power of two, or 0 before the first insert */
    size_t count;
} msr_map_t;

#define MSR_MAP_INIT \
    {                \
        NULL, 0, 0   \
    }

/* Returns the value stored under key, or NULL. */
void *msr_map_get(const msr_map_t *map, const char *key);
/* Stores value under key (copying the key), replacing and returning through
 * old_p any previous value (NULL if none). On failure nothing changes. */
msr_status_t msr_map_put(msr_map_t *map, const char *key, void *value, void **old_p);
/* Removes key; returns its value or NULL when absent. */
void *msr_map_remove(msr_map_t *map, const char *key);
/* Calls fn on every entry; fn may not change the map. */
void msr_map_foreach(const msr_map_t *map, void (*fn)(const char *key, void *value, void *arg),
                     void *arg);
/* Frees the map's own memory, calling free_value (if not NULL) on each value. */
void msr_map_cleanup(msr_map_t *map, void (*free_value)(void *value));

#endif
