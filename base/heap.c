/* A binary min-heap of timers. */
#include "base/heap.h"

#include "base/alloc.h"

static void heap_set(msr_heap_t *h, size_t i, msr_timer_t *t)
{
    h->items[i] = t;
    t->index = i;
}

static void heap_up(msr_heap_t *h, size_t i)
{
    msr_timer_t *t = h->items[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->items[p]->deadline <= t->deadline)
            break;
        heap_set(h, i, h->items[p]);
        i = p;
    }
    heap_set(h, i, t);
}

static void heap_down(msr_heap_t *h, size_t i)
{
    msr_timer_t *t = h->items[i];
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        uint64_t best = t->deadline;
        if (l < h->count && h->items[l]->deadline < best) {
            m = l;
            best = h->items[l]->deadline;
        }
        if (l + 1 < h->count && h->items[l + 1]->deadline < best)
            m = l + 1;
        if (m == i)
            break;
        heap_set(h, i, h->items[m]);
        i = m;
    }
    heap_set(h, i, t);
}

msr_status_t msr_heap_push(msr_heap_t *heap, msr_timer_t *t, uint64_t deadline)
{
    if (msr_timer_armed(t))
        msr_heap_remove(heap, t);
    if (heap->count == heap->cap) {
        size_t cap = heap->cap ? heap->cap * 2 : 16;
        msr_timer_t **items = msr_realloc_array(heap->items, cap, sizeof *items);
        if (items == NULL)
            return MSR_ERR_NO_MEMORY;
        heap->items = items;
        heap->cap = cap;
    }
    t->deadline = deadline;
    heap_set(heap, heap->count++, t);
    heap_up(heap, t->index);
    return MSR_OK;
}

void msr_heap_remove(msr_heap_t *heap, msr_timer_t *t)
{
    if (!msr_timer_armed(t))
        return;
    size_t i = t->index;
    t->index = SIZE_MAX;
    heap->count--;
    if (i == heap->count)
        return;
    msr_timer_t *moved = heap->items[heap->count];
    heap_set(heap, i, moved);
    heap_up(heap, i);
    heap_down(heap, moved->index);
}

msr_timer_t *msr_heap_top(const msr_heap_t *heap)
{
    return heap->count ? heap->items[0] : NULL;
}

void msr_heap_cleanup(msr_heap_t *heap)
{
    for (size_t i = 0; i < heap->count; i++)
        heap->items[i]->index = SIZE_MAX;
    msr_free(heap->items);
    heap->items = NULL;
    heap->count = heap->cap = 0;
}
