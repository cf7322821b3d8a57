/* Allocation through one hook, so tests can fail each allocation in turn. */
#ifndef MSR_BASE_ALLOC_H
#define MSR_BASE_ALLOC_H

#include <stddef.h>

/* Like malloc/calloc/realloc/free/strdup, but every call counts and the
 * test hook below can make a chosen one fail (returning NULL, errno ENOMEM).
 * msr_calloc and msr_realloc_array check n * size for overflow. */
void *msr_malloc(size_t size);
void *msr_calloc(size_t n, size_t size);
void *msr_realloc(void *ptr, size_t size);
void *msr_realloc_array(void *ptr, size_t n, size_t size);
char *msr_strdup(const char *s);
char *msr_strndup(const char *s, size_t n);
void msr_free(void *ptr);

/* A large buffer that goes back to the system when freed: zeroed, 64-byte
 * aligned, counted by the hook like any allocation. glibc serves sizes it
 * has once freed from its heap ever after (its mmap threshold adapts
 * upward) and keeps the heap's freed chunks resident, so buffers of
 * changing sizes, freed and allocated again every step, leave their pages
 * behind; these do not. Below MSR_PAGES_MIN bytes, and in sanitizer builds
 * (which then see every access), it comes from calloc. msr_pages_size is
 * the usable size, at least the one asked for. */
#define MSR_PAGES_MIN (64u << 10)
#if defined(__SANITIZE_ADDRESS__)
#define MSR_PAGES_MAPPED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MSR_PAGES_MAPPED 0
#endif
#endif
#ifndef MSR_PAGES_MAPPED
#define MSR_PAGES_MAPPED 1 /* large buffers are mapped pages (not in sanitizer builds) */
#endif
void *msr_pages_alloc(size_t size);
size_t msr_pages_size(const void *ptr);
void msr_pages_free(void *ptr);

/* Maps the pages that hold [p, p + len) writable before a copy fills
 * them: a checkpoint's read, a broadcast received into memory nothing has
 * touched yet. One call for the range instead of a page fault at each 4
 * KiB page the copy reaches. Only the pages the copy writes into anyway,
 * their contents unchanged. 0 when done (no bytes: nothing to do); -1
 * when the kernel cannot (older, or memory it cannot populate so), and
 * then the copy faults them in as before: a hint. */
int msr_prefault(void *p, size_t len);

/* Test hook (the one piece of global state allowed besides signal flags):
 * the index-th allocation from now on fails, counting from 0; -1 turns it
 * off. Returns the number of allocations made since the last call. */
long msr_alloc_fail_at(long index);

/* Whether the hook has made an allocation fail since msr_alloc_fail_at. */
int msr_alloc_failed(void);

#endif
