/* The store's record of barrier arrivals released lately, by their
 * callers' ids (store_core_impl.h): an arrival sent again after its
 * barrier released it (its relay died before passing the release on) is
 * answered released, not counted into the next barrier of that name. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/map.h"
#include "rendezvous/store_core_impl.h"

static void released_key(uint64_t client_id, uint64_t request_id, char key[40])
{
    snprintf(key, 40, "%016" PRIx64 "/%016" PRIx64, client_id, request_id);
}

/* A full ring below MSR_BARRIER_RELEASED_MAX doubled (it never wrapped:
 * its pairs lie oldest first from 0). -1 when out of memory. */
static int released_grow(msr_released_t *r)
{
    uint32_t cap = r->cap ? 2 * r->cap : MSR_BARRIER_RELEASED_FIRST;
    if (cap > MSR_BARRIER_RELEASED_MAX)
        cap = MSR_BARRIER_RELEASED_MAX;
    uint64_t *ring = msr_calloc(2 * (size_t)cap, sizeof *ring);
    if (ring == NULL)
        return -1;
    if (r->n > 0)
        memcpy(ring, r->ring, 2 * (size_t)r->n * sizeof *ring);
    msr_free(r->ring);
    r->ring = ring;
    r->cap = cap;
    r->next = r->n;
    return 0;
}

void msr_store_released_note(msr_store_core_t *c, uint64_t client_id, uint64_t request_id)
{
    msr_released_t *r = &c->released;
    char key[40];
    if (client_id == 0 || request_id == 0 || c->ops.no_resends)
        return;
    released_key(client_id, request_id, key);
    if (msr_map_get(&r->map, key) != NULL)
        return;
    if (r->n == r->cap && r->cap < MSR_BARRIER_RELEASED_MAX && released_grow(r) != 0)
        return; /* not remembered: a resend counts again, as before */
    uint64_t *slot = &r->ring[2 * (size_t)r->next];
    if (r->n == r->cap) { /* the oldest forgotten */
        char old[40];
        released_key(slot[0], slot[1], old);
        msr_map_remove(&r->map, old);
        r->n--;
    }
    if (msr_map_put(&r->map, key, (void *)1, NULL) != MSR_OK)
        return;
    slot[0] = client_id;
    slot[1] = request_id;
    r->next = (r->next + 1) % r->cap;
    r->n++;
}

int msr_store_released_seen(const msr_store_core_t *c, uint64_t client_id, uint64_t request_id)
{
    char key[40];
    if (client_id == 0 || request_id == 0 || c->released.n == 0)
        return 0;
    released_key(client_id, request_id, key);
    return msr_map_get(&c->released.map, key) != NULL;
}

int msr_store_withdrawn_note(msr_store_core_t *c, uint64_t merge_id, uint32_t weight,
                             uint64_t client_id, uint64_t request_id)
{
    msr_released_t *r = &c->released;
    if (r->pending == NULL) {
        r->pending = msr_calloc(MSR_BARRIER_WITHDRAWN_MAX, sizeof *r->pending);
        if (r->pending == NULL)
            return -1;
    }
    msr_withdrawn_t *slot = &r->pending[r->pnext];
    if (slot->merge_id != 0) /* the oldest forgotten */
        r->pn--;
    *slot = (msr_withdrawn_t){merge_id, client_id, request_id, weight};
    r->pnext = (r->pnext + 1) % MSR_BARRIER_WITHDRAWN_MAX;
    r->pn++;
    return 0;
}

void msr_store_ids_drop(uint64_t *ids, uint32_t n, uint64_t client_id, uint64_t request_id)
{
    for (uint32_t i = 0; i < n && (client_id || request_id); i++) {
        if (ids[2 * i] == client_id && ids[2 * i + 1] == request_id) {
            ids[2 * i] = ids[2 * i + 1] = 0;
            return;
        }
    }
}

uint64_t msr_store_withdrawn_take(msr_store_core_t *c, uint64_t merge_id, uint64_t *ids, uint32_t n)
{
    msr_released_t *r = &c->released;
    uint64_t weight = 0;
    for (uint32_t i = 0; merge_id != 0 && r->pn > 0 && i < MSR_BARRIER_WITHDRAWN_MAX; i++) {
        msr_withdrawn_t *slot = &r->pending[i];
        if (slot->merge_id != merge_id)
            continue;
        weight += slot->weight;
        if (ids != NULL)
            msr_store_ids_drop(ids, n, slot->client_id, slot->request_id);
        slot->merge_id = 0;
        r->pn--;
    }
    return weight;
}

uint64_t msr_store_withdrawn_peek(const msr_store_core_t *c, uint64_t merge_id)
{
    const msr_released_t *r = &c->released;
    uint64_t weight = 0;
    for (uint32_t i = 0; merge_id != 0 && r->pn > 0 && i < MSR_BARRIER_WITHDRAWN_MAX; i++)
        if (r->pending[i].merge_id == merge_id)
            weight += r->pending[i].weight;
    return weight;
}

size_t msr_store_core_released_bytes(const msr_store_core_t *c)
{
    return 2 * (size_t)c->released.cap * sizeof *c->released.ring;
}

void msr_store_released_free(msr_store_core_t *c)
{
    msr_map_cleanup(&c->released.map, NULL);
    msr_free(c->released.ring);
    msr_free(c->released.pending);
    memset(&c->released, 0, sizeof c->released);
}
