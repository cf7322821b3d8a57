/* Conformance of the device interface (msrun/device.h): one suite run on the
 * CPU device (built as test_device), on the CUDA device's code over a fake
 * GPU table that defers queued work until it is waited for (test_device_fake,
 * MSR_TEST_FAKE: tests/comm/device_fake.c) and on CUDA device 0 (built as
 * test_device_cuda with MSR_TEST_CUDA, label gpu). Zero bytes, unaligned
 * sizes and offsets, work ordered on one stream and across two by events,
 * bad arguments and allocation failure. The CUDA build skips (exit 77,
 * with the reason printed) only where no GPU is usable; on a usable GPU
 * every wrong answer fails. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "msrun/device.h"
#include "tests/runner.h"

#if defined(MSR_TEST_CUDA) || defined(MSR_TEST_FAKE)
#define GPU_TABLE 1 /* device_cuda.c under test */
#include "comm/device_impl.h"
#include "tests/comm/device_fake.h"
#endif

#define SKIP_CODE 77 /* CTest's SKIP_RETURN_CODE for this test */

#ifdef GPU_TABLE
static msr_status_t dev_create(int device, msr_device_t **d_p)
{
#ifdef MSR_TEST_CUDA
    return msr_device_cuda_create(device, d_p);
#else
    return msr_device_gpu_create(msr_test_device_fake_api(), device, d_p);
#endif
}
#endif

/* The device under test; each test runs in its own process. */
static const msr_device_t *dev_get(void)
{
#ifdef GPU_TABLE
    msr_device_t *d = NULL;
    msr_status_t st = dev_create(0, &d);
    MSR_CHECK_MSG(st == MSR_OK, "device 0: %s: %s", msr_status_name(st), msr_last_error());
    return d;
#else
    return msr_device_cpu();
#endif
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 131u + seed * 17u + (i >> 8)) & 0xff);
}

/* Host memory from the device (pinned), checked. */
static unsigned char *host(const msr_device_t *d, size_t n)
{
    void *p = NULL;
    MSR_CHECK_OK(msr_device_host_alloc(d, n, &p));
    MSR_CHECK(p != NULL);
    return p;
}

static unsigned char *dmem(const msr_device_t *d, size_t n)
{
    void *p = NULL;
    MSR_CHECK_OK(msr_device_alloc(d, n, &p));
    MSR_CHECK(p != NULL);
    return p;
}

/* The buffers of the stream tests: host src and out, the bytes wanted,
 * device x and y. src and want start as the same pattern. */
typedef struct {
    unsigned char *src, *out, *want, *x, *y;
} bufs_t;

static bufs_t bufs_new(const msr_device_t *d, size_t n, unsigned seed)
{
    bufs_t b;
    b.src = host(d, n);
    b.out = host(d, n);
    b.want = malloc(n);
    b.x = dmem(d, n);
    b.y = dmem(d, n);
    MSR_CHECK(b.want != NULL);
    fill(b.src, n, seed);
    memcpy(b.want, b.src, n);
    return b;
}

/* Reads dev back into out on stream s, checks it is what is wanted, and
 * frees the buffers. */
static void bufs_check_free(const msr_device_t *d, bufs_t *b, const unsigned char *dev, size_t n,
                            msr_device_stream_t *s)
{
    MSR_CHECK_OK(msr_device_copy(d, b->out, dev, n, MSR_DEVICE_D2H, s));
    MSR_CHECK_OK(msr_device_stream_sync(d, s));
    MSR_CHECK(memcmp(b->out, b->want, n) == 0);
    msr_device_free(d, b->y);
    msr_device_free(d, b->x);
    free(b->want);
    msr_device_host_free(d, b->out);
    msr_device_host_free(d, b->src);
}

/* Zero bytes is valid everywhere and touches nothing. */
static void test_zero_bytes(void)
{
    const msr_device_t *d = dev_get();
    void *p = (void *)&p;
    MSR_CHECK_OK(msr_device_alloc(d, 0, &p));
    MSR_CHECK(p == NULL);
    p = (void *)&p;
    MSR_CHECK_OK(msr_device_host_alloc(d, 0, &p));
    MSR_CHECK(p == NULL);
    for (int k = 0; k < MSR_DEVICE_COPY_KINDS; k++)
        MSR_CHECK_OK(msr_device_copy(d, NULL, NULL, 0, (msr_device_copy_t)k, NULL));
    MSR_CHECK_OK(msr_device_memset(d, NULL, 0xff, 0, NULL));
    msr_device_free(d, NULL);
    msr_device_host_free(d, NULL);
    /* a zero-byte copy between real buffers leaves them as they were */
    unsigned char *h = host(d, 16), *g = host(d, 16), *m = dmem(d, 16);
    fill(h, 16, 1);
    MSR_CHECK_OK(msr_device_copy(d, m, h, 16, MSR_DEVICE_H2D, NULL));
    MSR_CHECK_OK(msr_device_copy(d, m, g, 0, MSR_DEVICE_H2D, NULL));
    MSR_CHECK_OK(msr_device_memset(d, m, 0, 0, NULL));
    memset(g, 0, 16);
    MSR_CHECK_OK(msr_device_copy(d, g, m, 16, MSR_DEVICE_D2H, NULL));
    MSR_CHECK_OK(msr_device_stream_sync(d, NULL));
    MSR_CHECK(memcmp(g, h, 16) == 0);
    msr_device_free(d, m);
    msr_device_host_free(d, g);
    msr_device_host_free(d, h);
    msr_device_destroy(d);
}

/* Bad arguments: refused with MSR_ERR_INVALID_ARG and a message, never a
 * crash; outputs untouched. */
static void test_bad_args(void)
{
    const msr_device_t *d = dev_get();
    unsigned char *h = host(d, 8), *m = dmem(d, 8);
    MSR_CHECK_STATUS(msr_device_copy(d, NULL, h, 8, MSR_DEVICE_H2D, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_last_error(), "NULL pointer") != NULL);
    MSR_CHECK_STATUS(msr_device_copy(d, m, NULL, 8, MSR_DEVICE_H2D, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_copy(d, m, h, 8, MSR_DEVICE_COPY_KINDS, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_last_error(), "unknown copy kind") != NULL);
    MSR_CHECK_STATUS(msr_device_copy(d, m, h, 0, (msr_device_copy_t)-1, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_memset(d, NULL, 0, 1, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_alloc(d, 8, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_host_alloc(d, 8, NULL), MSR_ERR_INVALID_ARG);
    void *p = &p;
    MSR_CHECK_STATUS(msr_device_alloc(NULL, 8, &p), MSR_ERR_INVALID_ARG);
    MSR_CHECK(p == &p);
    MSR_CHECK_STATUS(msr_device_copy(NULL, m, h, 8, MSR_DEVICE_H2D, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_stream_create(d, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_event_create(d, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_event_record(d, NULL, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_event_query(d, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_event_sync(d, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_stream_wait(d, NULL, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_stream_sync(NULL, NULL), MSR_ERR_INVALID_ARG);
    msr_device_stream_destroy(d, NULL);
    msr_device_event_destroy(d, NULL);
    msr_device_destroy(NULL);
    MSR_CHECK(strcmp(msr_device_name(NULL), "(none)") == 0);
    msr_device_free(d, m);
    msr_device_host_free(d, h);
    msr_device_destroy(d);
}

/* Host to device, within the device and back, at sizes and offsets that
 * are no multiple of anything (a byte, a float and a half, a page and a
 * byte, past the page-backed threshold), each landing exactly and leaving
 * its neighbours alone; memset likewise. */
static void test_unaligned(void)
{
    const msr_device_t *d = dev_get();
    static const size_t sizes[] = {1, 3, 6, 63, 65, 4095, 4097, (64u << 10) + 3, (1u << 20) + 5};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i], off = 1 + i % 7, len = n + 2 * off;
        unsigned char *src = host(d, len), *out = host(d, len), *want = malloc(len);
        unsigned char *a = dmem(d, len), *b = dmem(d, len);
        MSR_CHECK(want != NULL);
        fill(src, len, (unsigned)i);
        /* b holds a known frame around the window the copies land in */
        memset(out, 0x5a, len);
        MSR_CHECK_OK(msr_device_copy(d, b, out, len, MSR_DEVICE_H2D, NULL));
        MSR_CHECK_OK(msr_device_copy(d, a + off, src, n, MSR_DEVICE_H2D, NULL));
        MSR_CHECK_OK(msr_device_copy(d, b + off - 1, a + off, n, MSR_DEVICE_D2D, NULL));
        MSR_CHECK_OK(msr_device_memset(d, b + off - 1 + n / 3, 0xa7, n / 2, NULL));
        MSR_CHECK_OK(msr_device_copy(d, out, b, len, MSR_DEVICE_D2H, NULL));
        MSR_CHECK_OK(msr_device_stream_sync(d, NULL));
        memset(want, 0x5a, len);
        memcpy(want + off - 1, src, n);
        memset(want + off - 1 + n / 3, 0xa7, n / 2);
        MSR_CHECK_MSG(memcmp(out, want, len) == 0, "size %zu offset %zu: wrong bytes", n, off);
        free(want);
        msr_device_free(d, b);
        msr_device_free(d, a);
        msr_device_host_free(d, out);
        msr_device_host_free(d, src);
    }
    msr_device_destroy(d);
}

/* Work queued on one stream runs in order: each copy reads what the one
 * before it wrote, and a memset in between is seen by what follows. The
 * host's source may be rewritten only after the sync. */
static void test_stream_order(void)
{
    const msr_device_t *d = dev_get();
    enum { N = (3u << 20) + 1, ROUNDS = 16 };
    msr_device_stream_t *s = NULL;
    MSR_CHECK_OK(msr_device_stream_create(d, &s));
    bufs_t b = bufs_new(d, N, 3);
    MSR_CHECK_OK(msr_device_copy(d, b.x, b.src, N, MSR_DEVICE_H2D, s));
    for (int r = 0; r < ROUNDS; r++) {
        /* x -> y, a byte of y changed, y -> x: each step needs the last */
        MSR_CHECK_OK(msr_device_copy(d, b.y, b.x, N, MSR_DEVICE_D2D, s));
        MSR_CHECK_OK(msr_device_memset(d, b.y + (size_t)r * 4099, r + 1, 1, s));
        b.want[(size_t)r * 4099] = (unsigned char)(r + 1);
        MSR_CHECK_OK(msr_device_copy(d, b.x, b.y, N, MSR_DEVICE_D2D, s));
    }
    bufs_check_free(d, &b, b.x, N, s);
    msr_device_stream_destroy(d, s);
    msr_device_destroy(d);
}

/* Two streams ordered by an event: the second waits for the first's copy
 * and memset before it reads; event_sync waits for the host; an event
 * never recorded is complete. */
static void test_events(void)
{
    const msr_device_t *d = dev_get();
    enum { N = (4u << 20) + 3 };
    msr_device_stream_t *s1 = NULL, *s2 = NULL;
    msr_device_event_t *e1 = NULL, *e2 = NULL;
    MSR_CHECK_OK(msr_device_stream_create(d, &s1));
    MSR_CHECK_OK(msr_device_stream_create(d, &s2));
    MSR_CHECK_OK(msr_device_event_create(d, &e1));
    MSR_CHECK_OK(msr_device_event_create(d, &e2));
    MSR_CHECK_OK(msr_device_event_query(d, e1));
    bufs_t b = bufs_new(d, N, 5);
    memset(b.want + 1001, 0x3c, N / 2);
    MSR_CHECK_OK(msr_device_copy(d, b.x, b.src, N, MSR_DEVICE_H2D, s1));
    MSR_CHECK_OK(msr_device_memset(d, b.x + 1001, 0x3c, N / 2, s1));
    MSR_CHECK_OK(msr_device_event_record(d, e1, s1));
    MSR_CHECK_OK(msr_device_stream_wait(d, s2, e1));
    MSR_CHECK_OK(msr_device_copy(d, b.y, b.x, N, MSR_DEVICE_D2D, s2));
    MSR_CHECK_OK(msr_device_copy(d, b.out, b.y, N, MSR_DEVICE_D2H, s2));
    MSR_CHECK_OK(msr_device_event_record(d, e2, s2));
    MSR_CHECK_OK(msr_device_event_sync(d, e2));
    MSR_CHECK_OK(msr_device_event_query(d, e2));
    MSR_CHECK_OK(msr_device_event_query(d, e1));
    MSR_CHECK(memcmp(b.out, b.want, N) == 0);
    /* the default stream sees the other streams' finished work */
    memset(b.out, 0, N);
    bufs_check_free(d, &b, b.y, N, NULL);
    msr_device_event_destroy(d, e2);
    msr_device_event_destroy(d, e1);
    msr_device_stream_destroy(d, s2);
    msr_device_stream_destroy(d, s1);
    msr_device_destroy(d);
}

/* Allocation failure: MSR_ERR_NO_MEMORY with a message, the output
 * untouched, and the device usable after. The CPU device's memory, streams
 * and events fail through base/alloc.h's hook; the CUDA device's memory
 * fails for a size no GPU has, its handles' state through the hook. */
static void test_alloc_failure(void)
{
    const msr_device_t *d = dev_get();
    void *p = &p;
#ifdef GPU_TABLE
    MSR_CHECK_STATUS(msr_device_alloc(d, (size_t)1 << 56, &p), MSR_ERR_NO_MEMORY);
    MSR_CHECK(p == &p);
    MSR_CHECK(strstr(msr_last_error(), "cudaMalloc") != NULL);
    msr_device_t *d2 = (msr_device_t *)&p;
    msr_alloc_fail_at(0);
    MSR_CHECK_STATUS(dev_create(0, &d2), MSR_ERR_NO_MEMORY);
    msr_alloc_fail_at(-1);
    MSR_CHECK(d2 == (msr_device_t *)&p);
#else
    msr_alloc_fail_at(0);
    MSR_CHECK_STATUS(msr_device_alloc(d, 100, &p), MSR_ERR_NO_MEMORY);
    MSR_CHECK(p == &p);
    MSR_CHECK(strstr(msr_last_error(), "out of memory for 100 bytes") != NULL);
    msr_alloc_fail_at(0);
    MSR_CHECK_STATUS(msr_device_host_alloc(d, 1u << 20, &p), MSR_ERR_NO_MEMORY);
    MSR_CHECK(p == &p);
    msr_device_stream_t *s = (msr_device_stream_t *)&p;
    msr_device_event_t *e = (msr_device_event_t *)&p;
    msr_alloc_fail_at(0);
    MSR_CHECK_STATUS(msr_device_stream_create(d, &s), MSR_ERR_NO_MEMORY);
    msr_alloc_fail_at(0);
    MSR_CHECK_STATUS(msr_device_event_create(d, &e), MSR_ERR_NO_MEMORY);
    msr_alloc_fail_at(-1);
    MSR_CHECK(s == (msr_device_stream_t *)&p && e == (msr_device_event_t *)&p);
#endif
    /* usable after */
    unsigned char *m = dmem(d, 4096), *h = host(d, 4096);
    MSR_CHECK_OK(msr_device_memset(d, m, 7, 4096, NULL));
    MSR_CHECK_OK(msr_device_copy(d, h, m, 4096, MSR_DEVICE_D2H, NULL));
    MSR_CHECK_OK(msr_device_stream_sync(d, NULL));
    for (size_t i = 0; i < 4096; i++)
        MSR_CHECK(h[i] == 7);
    msr_device_host_free(d, h);
    msr_device_free(d, m);
    msr_device_destroy(d);
}

#if !defined(GPU_TABLE) && MSR_PAGES_MAPPED
/* Resident pages of this process (/proc/self/statm), in bytes. */
static size_t resident_bytes(void)
{
    unsigned long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    MSR_CHECK(f != NULL);
    MSR_CHECK(fscanf(f, "%lu %lu", &size, &res) == 2);
    fclose(f);
    return (size_t)res * 4096;
}
#endif

/* alloc_zero: memory that reads zero at every size, also where the same
 * memory was just written and freed (the allocator's reuse), with the
 * bad arguments and allocation failure of alloc. On the CPU device, where
 * large buffers are mapped pages, the zero costs no page: 64 MiB leave
 * the resident memory within a few pages (alloc and memset take it all). */
static void test_alloc_zero(void)
{
    const msr_device_t *d = dev_get();
    static const size_t sizes[] = {1, 3, 63, 4097, (64u << 10) + 3, (1u << 20) + 5};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        unsigned char *out = host(d, n), *dirty = dmem(d, n);
        memset(out, 0x5a, n);
        MSR_CHECK_OK(msr_device_copy(d, dirty, out, n, MSR_DEVICE_H2D, NULL));
        MSR_CHECK_OK(msr_device_stream_sync(d, NULL));
        msr_device_free(d, dirty);
        void *z = NULL;
        MSR_CHECK_OK(msr_device_alloc_zero(d, n, &z));
        MSR_CHECK(z != NULL);
        MSR_CHECK_OK(msr_device_copy(d, out, z, n, MSR_DEVICE_D2H, NULL));
        MSR_CHECK_OK(msr_device_stream_sync(d, NULL));
        for (size_t k = 0; k < n; k++)
            MSR_CHECK_MSG(out[k] == 0, "%zu bytes: byte %zu is %d", n, k, out[k]);
        msr_device_free(d, z);
        msr_device_host_free(d, out);
    }
    void *p = &p;
    MSR_CHECK_OK(msr_device_alloc_zero(d, 0, &p));
    MSR_CHECK(p == NULL);
    p = &p;
    MSR_CHECK_STATUS(msr_device_alloc_zero(NULL, 8, &p), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_device_alloc_zero(d, 8, NULL), MSR_ERR_INVALID_ARG);
    msr_alloc_fail_at(0);
#ifdef GPU_TABLE
    MSR_CHECK_STATUS(msr_device_alloc_zero(d, (size_t)1 << 56, &p), MSR_ERR_NO_MEMORY);
#else
    MSR_CHECK_STATUS(msr_device_alloc_zero(d, 100, &p), MSR_ERR_NO_MEMORY);
#endif
    msr_alloc_fail_at(-1);
    MSR_CHECK(p == &p);
#if !defined(GPU_TABLE) && MSR_PAGES_MAPPED
    const size_t big = (size_t)64 << 20;
    size_t before = resident_bytes();
    MSR_CHECK_OK(msr_device_alloc_zero(d, big, &p));
    size_t lazy = resident_bytes() - before;
    ((unsigned char *)p)[big / 2] = 1; /* a page written is a page taken */
    MSR_CHECK(((unsigned char *)p)[big / 2 + 1] == 0 && ((unsigned char *)p)[big - 1] == 0);
    msr_device_free(d, p);
    before = resident_bytes();
    MSR_CHECK_OK(msr_device_alloc(d, big, &p));
    MSR_CHECK_OK(msr_device_memset(d, p, 0, big, NULL));
    size_t eager = resident_bytes() - before;
    msr_device_free(d, p);
    printf("alloc_zero: 64 MiB zeroed took %zu resident bytes, alloc and memset %zu\n", lazy,
           eager);
    MSR_CHECK(lazy < ((size_t)1 << 20) && eager >= big / 2);
#endif
    msr_device_destroy(d);
}

#ifdef GPU_TABLE
/* Device numbers outside [0, count) refused, the output untouched; the
 * name says which device. */
static void test_create(void)
{
    msr_device_t *d = (msr_device_t *)&d;
    MSR_CHECK_STATUS(dev_create(-1, &d), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(dev_create(1 << 20, &d), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_last_error(), "does not exist") != NULL);
    MSR_CHECK(d == (msr_device_t *)&d);
    MSR_CHECK_OK(dev_create(0, &d));
    MSR_CHECK(strcmp(msr_device_name(d), "cuda:0") == 0);
    MSR_CHECK(!msr_device_is_host(d));
    msr_device_destroy(d);
#ifdef MSR_TEST_FAKE
    /* a table without the interface's calls (a communicators-only fake) */
    msr_gpu_api_t partial = *msr_test_device_fake_api();
    partial.memset_async = NULL;
    d = (msr_device_t *)&d;
    MSR_CHECK_STATUS(msr_device_gpu_create(&partial, 0, &d), MSR_ERR_UNSUPPORTED);
    MSR_CHECK(d == (msr_device_t *)&d);
#endif
}
#else
static void test_create(void)
{
    const msr_device_t *d = msr_device_cpu();
    MSR_CHECK(d == msr_device_cpu());
    MSR_CHECK(strcmp(msr_device_name(d), "cpu") == 0);
    MSR_CHECK(msr_device_is_host(d));
    msr_device_destroy(d); /* does nothing */
    MSR_CHECK(strcmp(msr_device_name(msr_device_cpu()), "cpu") == 0);
}
#endif

static const msr_test_t tests[] = {
    {"create", test_create, 60},
    {"zero_bytes", test_zero_bytes, 60},
    {"bad_args", test_bad_args, 60},
    {"unaligned", test_unaligned, 60},
    {"stream_order", test_stream_order, 60},
    {"events", test_events, 60},
    {"alloc_failure", test_alloc_failure, 60},
    {"alloc_zero", test_alloc_zero, 60},
};

#ifdef MSR_TEST_CUDA
/* In a child (CUDA is never set up in the runner's process): exit 0 where
 * device 0 is usable, SKIP_CODE where this machine has no GPU (the reason
 * printed), 1 for any other answer. */
static int probe(void)
{
    msr_device_t *d = NULL;
    msr_status_t st = msr_device_cuda_create(0, &d);
    if (st == MSR_ERR_UNSUPPORTED) {
        printf("SKIP no usable GPU: %s\n", msr_last_error());
        return SKIP_CODE;
    }
    if (st != MSR_OK) {
        printf("FAIL cuda device 0: %s: %s\n", msr_status_name(st), msr_last_error());
        return 1;
    }
    printf("cuda device 0 usable: running the suite on %s\n", msr_device_name(d));
    msr_device_destroy(d);
    return 0;
}
#endif

int main(int argc, char **argv)
{
#ifdef MSR_TEST_CUDA
    int rc = msr_test_run_in_child(probe, 60);
    if (rc != 0)
        return rc;
#endif
    return MSR_TEST_MAIN(argc, argv, tests);
}
