/* A min-heap of timers keyed by deadline, with O(log n) removal. */
#ifndef MSR_BASE_HEAP_H
#define MSR_BASE_HEAP_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

/* Embed in the object that owns the timer. index is SIZE_MAX when the timer
 * is not in a heap. */
typedef struct msr_timer {
    uint64_t deadline;
    size_t index;
} msr_timer_t;

typedef struct msr_heap {
    msr_timer_t **items;
    size_t count, cap;
} msr_heap_t;

#define MSR_HEAP_INIT \
    {                 \
        NULL, 0, 0    \
    }

static inline void msr_timer_init(msr_timer_t *t)
{
    t->deadline = 0;
    t->index = SIZE_MAX;
}

static inline int msr_timer_armed(const msr_timer_t *t)
{
    return t->index != SIZE_MAX;
}

/* Arms t at deadline (re-arming it if armed). */
msr_status_t msr_heap_push(msr_heap_t *heap, msr_timer_t *t, uint64_t deadline);
/* Disarms t if armed. */
void msr_heap_remove(msr_heap_t *heap, msr_timer_t *t);
/* The earliest timer, or NULL. */
msr_timer_t *msr_heap_top(const msr_heap_t *heap);
void msr_heap_cleanup(msr_heap_t *heap);

#endif
