/* An intrusive doubly linked list (circular, with a sentinel head). */
#ifndef MSR_BASE_LIST_H
#define MSR_BASE_LIST_H

#include <stddef.h>

typedef struct msr_list {
    struct msr_list *prev, *next;
} msr_list_t;

#define MSR_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void msr_list_init(msr_list_t *head)
{
    head->prev = head->next = head;
}

static inline int msr_list_empty(const msr_list_t *head)
{
    return head->next == head;
}

static inline void msr_list_push_back(msr_list_t *head, msr_list_t *node)
{
    node->prev = head->prev;
    node->next = head;
    head->prev->next = node;
    head->prev = node;
}

/* Removes node from its list and leaves it linked to itself. */
static inline void msr_list_remove(msr_list_t *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    node->prev = node->next = node;
}

#define msr_list_for_each_safe(pos, tmp, head)                       \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); \
         (pos) = (tmp), (tmp) = (pos)->next)

#endif
