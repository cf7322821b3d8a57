/* A device that counts its calls (see ep_device.h): the CPU device's work,
 * done at once in the call, with a table of the live allocations. */
#include "tests/parallel/ep_device.h"

#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "comm/device_impl.h"

enum { MAX_LIVE = 8192 };

typedef struct live {
    char *p; /* NULL: a free entry */
    ep_device_buf_t buf;
} live_t;

struct msr_device_stream {
    char unused;
};
struct msr_device_event {
    char unused;
};

static live_t table[MAX_LIVE];
static int top; /* entries [top, MAX_LIVE) were never used */
static ep_device_totals_t totals;

/* The live allocation holding byte p, or NULL. */
static live_t *holding(const void *p)
{
    const char *c = p;
    for (int i = 0; i < top; i++)
        if (table[i].p != NULL && c >= table[i].p && c < table[i].p + table[i].buf.bytes)
            return &table[i];
    return NULL;
}

/* An allocation of device memory (host 0) or of the device's host memory
 * (host 1): alike here, told apart in the record. */
static msr_status_t alloc_as(const msr_device_t *dev, size_t bytes, void **p_p, int host)
{
    int i = 0;
    while (i < MAX_LIVE && table[i].p != NULL)
        i++;
    void *p = i < MAX_LIVE ? msr_pages_alloc(bytes) : NULL;
    if (p == NULL) {
        msr_err_set("device %s: out of memory for %zu bytes", dev->name, bytes);
        return MSR_ERR_NO_MEMORY;
    }
    table[i] = (live_t){p, {bytes, {0}, 0, host}};
    top = i + 1 > top ? i + 1 : top;
    totals.allocs++;
    totals.live++;
    *p_p = p;
    return MSR_OK;
}

static msr_status_t c_alloc(const msr_device_t *dev, size_t bytes, void **p_p)
{
    return alloc_as(dev, bytes, p_p, 0);
}

static msr_status_t c_host_alloc(const msr_device_t *dev, size_t bytes, void **p_p)
{
    return alloc_as(dev, bytes, p_p, 1);
}

/* A free by the call of its kind (host: host_free); one by the other
 * kind's counted as mismatched. */
static void free_as(void *p, int host)
{
    live_t *l = holding(p);
    if (l != NULL && l->p == p) {
        totals.mismatched += l->buf.host != host;
        l->p = NULL;
        totals.live--;
    }
    totals.frees++;
    msr_pages_free(p);
}

static void c_free(const msr_device_t *dev, void *p)
{
    (void)dev;
    free_as(p, 0);
}

static void c_host_free(const msr_device_t *dev, void *p)
{
    (void)dev;
    if (p != NULL)
        free_as(p, 1);
}

static msr_status_t c_memset(const msr_device_t *dev, void *p, int byte, size_t bytes,
                             msr_device_stream_t *stream)
{
    (void)dev, (void)stream;
    live_t *l = holding(p);
    if (l != NULL)
        l->buf.memsets++;
    totals.memsets++;
    memset(p, byte, bytes);
    return MSR_OK;
}

static msr_status_t c_copy(const msr_device_t *dev, void *dst, const void *src, size_t bytes,
                           msr_device_copy_t kind, msr_device_stream_t *stream)
{
    (void)dev, (void)stream;
    live_t *l = holding(dst);
    if (l != NULL)
        l->buf.copies[kind]++;
    totals.copies[kind]++;
    memcpy(dst, src, bytes);
    return MSR_OK;
}

static msr_status_t c_stream_create(const msr_device_t *dev, msr_device_stream_t **stream_p)
{
    (void)dev;
    *stream_p = msr_calloc(1, sizeof **stream_p);
    return *stream_p != NULL ? MSR_OK : MSR_ERR_NO_MEMORY;
}

static void c_stream_destroy(const msr_device_t *dev, msr_device_stream_t *stream)
{
    (void)dev;
    msr_free(stream);
}

static msr_status_t c_sync(const msr_device_t *dev, msr_device_stream_t *stream)
{
    (void)dev, (void)stream;
    totals.syncs++;
    return MSR_OK;
}

static msr_status_t c_event_create(const msr_device_t *dev, msr_device_event_t **event_p)
{
    (void)dev;
    *event_p = msr_calloc(1, sizeof **event_p);
    return *event_p != NULL ? MSR_OK : MSR_ERR_NO_MEMORY;
}

static void c_event_destroy(const msr_device_t *dev, msr_device_event_t *event)
{
    (void)dev;
    msr_free(event);
}

static msr_status_t c_event_record(const msr_device_t *dev, msr_device_event_t *event,
                                   msr_device_stream_t *stream)
{
    (void)dev, (void)event, (void)stream;
    return MSR_OK;
}

static msr_status_t c_event_done(const msr_device_t *dev, msr_device_event_t *event)
{
    (void)dev, (void)event;
    totals.syncs++;
    return MSR_OK;
}

static msr_status_t c_stream_wait(const msr_device_t *dev, msr_device_stream_t *stream,
                                  msr_device_event_t *event)
{
    (void)dev, (void)stream, (void)event;
    return MSR_OK;
}

static const msr_device_ops_t ops = {
    .alloc = c_alloc,
    .free = c_free,
    .host_alloc = c_host_alloc,
    .host_free = c_host_free,
    .memset = c_memset,
    .copy = c_copy,
    .stream_create = c_stream_create,
    .stream_destroy = c_stream_destroy,
    .stream_sync = c_sync,
    .event_create = c_event_create,
    .event_destroy = c_event_destroy,
    .event_record = c_event_record,
    .event_query = c_event_done,
    .event_sync = c_event_done,
    .stream_wait = c_stream_wait,
    .destroy = NULL,
};

static const msr_device_t device = {.ops = &ops, .name = "count", .is_host = 1};

const msr_device_t *ep_device(void)
{
    return &device;
}

ep_device_totals_t ep_device_totals(void)
{
    return totals;
}

void ep_device_reset(void)
{
    long live = totals.live;
    memset(&totals, 0, sizeof totals);
    totals.live = live;
    for (int i = 0; i < top; i++) {
        memset(table[i].buf.copies, 0, sizeof table[i].buf.copies);
        table[i].buf.memsets = 0;
    }
}

const ep_device_buf_t *ep_device_buf(const void *p)
{
    live_t *l = holding(p);
    return l != NULL && l->p == p ? &l->buf : NULL;
}
