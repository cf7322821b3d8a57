/* Counting allocator with a failure-injection hook for tests. */
#include "base/alloc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static atomic_long alloc_count;
static atomic_long alloc_fail_index = -1;
static atomic_int alloc_did_fail;

static int alloc_should_fail(void)
{
    long n = atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    long fail = atomic_load_explicit(&alloc_fail_index, memory_order_relaxed);
    if (fail >= 0 && n == fail) {
        atomic_store(&alloc_did_fail, 1);
        errno = ENOMEM;
        return 1;
    }
    return 0;
}

long msr_alloc_fail_at(long index)
{
    long n = atomic_exchange(&alloc_count, 0);
    atomic_store(&alloc_fail_index, index);
    atomic_store(&alloc_did_fail, 0);
    return n;
}

int msr_alloc_failed(void)
{
    return atomic_load(&alloc_did_fail);
}

void *msr_malloc(size_t size)
{
    if (alloc_should_fail())
        return NULL;
    return malloc(size ? size : 1);
}

void *msr_calloc(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    if (alloc_should_fail())
        return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void *msr_realloc(void *ptr, size_t size)
{
    if (alloc_should_fail())
        return NULL;
    return realloc(ptr, size ? size : 1);
}

void *msr_realloc_array(void *ptr, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return msr_realloc(ptr, n * size);
}

char *msr_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = msr_malloc(len + 1);
    if (d == NULL)
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *msr_strdup(const char *s)
{
    size_t len = strlen(s);
    char *d = msr_malloc(len + 1);
    if (d)
        memcpy(d, s, len + 1);
    return d;
}

void msr_free(void *ptr)
{
    free(ptr);
}

/* A header line before the buffer: its usable size and how it was made. */
#define PAGES_HDR 64

typedef struct pages_hdr {
    size_t size;
    int mapped;
} pages_hdr_t;

void *msr_pages_alloc(size_t size)
{
    if (size > SIZE_MAX - 2 * PAGES_HDR) {
        errno = ENOMEM;
        return NULL;
    }
    if (alloc_should_fail())
        return NULL;
    size_t len = size + PAGES_HDR;
    int mapped = MSR_PAGES_MAPPED && size >= MSR_PAGES_MIN;
    char *base;
    if (mapped) {
        long page = sysconf(_SC_PAGESIZE);
        size_t pg = page > 0 ? (size_t)page : 4096;
        len = (len + pg - 1) / pg * pg;
        base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED)
            return NULL;
    } else if (posix_memalign((void **)&base, PAGES_HDR, len) != 0) {
        errno = ENOMEM;
        return NULL;
    } else {
        memset(base, 0, len);
    }
    pages_hdr_t *h = (pages_hdr_t *)(void *)base;
    h->size = len - PAGES_HDR;
    h->mapped = mapped;
    return base + PAGES_HDR;
}

size_t msr_pages_size(const void *ptr)
{
    return ((const pages_hdr_t *)(const void *)((const char *)ptr - PAGES_HDR))->size;
}

void msr_pages_free(void *ptr)
{
    if (ptr == NULL)
        return;
    char *base = (char *)ptr - PAGES_HDR;
    pages_hdr_t *h = (pages_hdr_t *)(void *)base;
    if (h->mapped)
        munmap(base, h->size + PAGES_HDR);
    else
        free(base);
}

/* MADV_POPULATE_WRITE (Linux 5.14): one call maps the range's pages where
 * a page fault every 4 KiB would trap, dear in a virtual machine. */
int msr_prefault(void *p, size_t len)
{
    if (len == 0)
        return 0;
#ifdef MADV_POPULATE_WRITE
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + len + page - 1) & ~(page - 1);
    if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0)
        return 0;
#else
    (void)p;
#endif
    return -1;
}
