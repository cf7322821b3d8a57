/* The device interface's public calls (argument checks shared by every
 * implementation) and the CPU device: host memory, streams that run their
 * work at once in the call. */
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "comm/device_impl.h"

/* ---- the CPU device ---- */

/* Streams and events carry no state (everything is done when queued), but
 * each is a distinct allocation so that a handle can be checked and freed
 * like the CUDA device's. */
struct msr_device_stream {
    char unused;
};
struct msr_device_event {
    char unused;
};

static msr_status_t cpu_alloc(const msr_device_t *dev, size_t bytes, void **p_p)
{
    void *p = msr_pages_alloc(bytes);
    if (p == NULL) {
        msr_err_set("device %s: out of memory for %zu bytes", dev->name, bytes);
        return MSR_ERR_NO_MEMORY;
    }
    *p_p = p;
    return MSR_OK;
}

static void cpu_free(const msr_device_t *dev, void *p)
{
    (void)dev;
    msr_pages_free(p);
}

static msr_status_t cpu_memset(const msr_device_t *dev, void *p, int byte, size_t bytes,
                               msr_device_stream_t *stream)
{
    (void)dev, (void)stream;
    memset(p, byte, bytes);
    return MSR_OK;
}

static msr_status_t cpu_copy(const msr_device_t *dev, void *dst, const void *src, size_t bytes,
                             msr_device_copy_t kind, msr_device_stream_t *stream)
{
    (void)dev, (void)kind, (void)stream;
    memcpy(dst, src, bytes);
    return MSR_OK;
}

static msr_status_t cpu_stream_create(const msr_device_t *dev, msr_device_stream_t **stream_p)
{
    msr_device_stream_t *s = msr_calloc(1, sizeof *s);
    if (s == NULL) {
        msr_err_set("device %s: out of memory for a stream", dev->name);
        return MSR_ERR_NO_MEMORY;
    }
    *stream_p = s;
    return MSR_OK;
}

static void cpu_stream_destroy(const msr_device_t *dev, msr_device_stream_t *stream)
{
    (void)dev;
    msr_free(stream);
}

/* Every stream's work is done when queued: syncs, records and waits have
 * nothing to wait for. */
static msr_status_t cpu_stream_sync(const msr_device_t *dev, msr_device_stream_t *stream)
{
    (void)dev, (void)stream;
    return MSR_OK;
}

static msr_status_t cpu_event_create(const msr_device_t *dev, msr_device_event_t **event_p)
{
    msr_device_event_t *e = msr_calloc(1, sizeof *e);
    if (e == NULL) {
        msr_err_set("device %s: out of memory for an event", dev->name);
        return MSR_ERR_NO_MEMORY;
    }
    *event_p = e;
    return MSR_OK;
}

static void cpu_event_destroy(const msr_device_t *dev, msr_device_event_t *event)
{
    (void)dev;
    msr_free(event);
}

static msr_status_t cpu_event_record(const msr_device_t *dev, msr_device_event_t *event,
                                     msr_device_stream_t *stream)
{
    (void)dev, (void)event, (void)stream;
    return MSR_OK;
}

static msr_status_t cpu_event_done(const msr_device_t *dev, msr_device_event_t *event)
{
    (void)dev, (void)event;
    return MSR_OK;
}

static msr_status_t cpu_stream_wait(const msr_device_t *dev, msr_device_stream_t *stream,
                                    msr_device_event_t *event)
{
    (void)dev, (void)stream, (void)event;
    return MSR_OK;
}

static const msr_device_ops_t cpu_ops = {
    .alloc = cpu_alloc,
    .alloc_zero = cpu_alloc, /* msr_pages_alloc's memory is zero: mapped pages untouched */
    .free = cpu_free,
    .host_alloc = cpu_alloc, /* host memory is all the CPU has */
    .host_free = cpu_free,
    .memset = cpu_memset,
    .copy = cpu_copy,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_query = cpu_event_done,
    .event_sync = cpu_event_done,
    .stream_wait = cpu_stream_wait,
    .destroy = NULL,
};

static const msr_device_t cpu_device = {.ops = &cpu_ops, .name = "cpu", .is_host = 1};

const msr_device_t *msr_device_cpu(void)
{
    return &cpu_device;
}

/* ---- the public calls ---- */

static msr_status_t bad(const msr_device_t *dev, const char *call, const char *what)
{
    msr_err_set("device %s: %s: %s", dev != NULL ? dev->name : "(null)", call, what);
    return MSR_ERR_INVALID_ARG;
}

void msr_device_destroy(const msr_device_t *dev)
{
    if (dev != NULL && dev->ops->destroy != NULL)
        dev->ops->destroy(dev);
}

const char *msr_device_name(const msr_device_t *dev)
{
    return dev != NULL ? dev->name : "(none)";
}

int msr_device_is_host(const msr_device_t *dev)
{
    return dev != NULL && dev->is_host;
}

msr_status_t msr_device_alloc(const msr_device_t *dev, size_t bytes, void **p_p)
{
    if (dev == NULL || p_p == NULL)
        return bad(dev, "alloc", "no device or no output");
    if (bytes == 0) {
        *p_p = NULL;
        return MSR_OK;
    }
    return dev->ops->alloc(dev, bytes, p_p);
}

msr_status_t msr_device_alloc_zero(const msr_device_t *dev, size_t bytes, void **p_p)
{
    if (dev == NULL || p_p == NULL)
        return bad(dev, "alloc_zero", "no device or no output");
    if (bytes == 0) {
        *p_p = NULL;
        return MSR_OK;
    }
    if (dev->ops->alloc_zero != NULL)
        return dev->ops->alloc_zero(dev, bytes, p_p);
    void *p = NULL;
    msr_status_t st = dev->ops->alloc(dev, bytes, &p);
    if (st != MSR_OK)
        return st;
    if ((st = dev->ops->memset(dev, p, 0, bytes, NULL)) == MSR_OK &&
        (st = dev->ops->stream_sync(dev, NULL)) == MSR_OK) {
        *p_p = p;
        return MSR_OK;
    }
    dev->ops->free(dev, p);
    return st;
}

void msr_device_free(const msr_device_t *dev, void *p)
{
    if (dev != NULL && p != NULL)
        dev->ops->free(dev, p);
}

msr_status_t msr_device_host_alloc(const msr_device_t *dev, size_t bytes, void **p_p)
{
    if (dev == NULL || p_p == NULL)
        return bad(dev, "host_alloc", "no device or no output");
    if (bytes == 0) {
        *p_p = NULL;
        return MSR_OK;
    }
    return dev->ops->host_alloc(dev, bytes, p_p);
}

void msr_device_host_free(const msr_device_t *dev, void *p)
{
    if (dev != NULL && p != NULL)
        dev->ops->host_free(dev, p);
}

msr_status_t msr_device_memset(const msr_device_t *dev, void *p, int byte, size_t bytes,
                               msr_device_stream_t *stream)
{
    if (dev == NULL)
        return bad(dev, "memset", "no device");
    if (bytes == 0)
        return MSR_OK;
    if (p == NULL)
        return bad(dev, "memset", "NULL pointer");
    return dev->ops->memset(dev, p, byte, bytes, stream);
}

msr_status_t msr_device_copy(const msr_device_t *dev, void *dst, const void *src, size_t bytes,
                             msr_device_copy_t kind, msr_device_stream_t *stream)
{
    if (dev == NULL)
        return bad(dev, "copy", "no device");
    if ((unsigned)kind >= MSR_DEVICE_COPY_KINDS)
        return bad(dev, "copy", "unknown copy kind");
    if (bytes == 0)
        return MSR_OK;
    if (dst == NULL || src == NULL)
        return bad(dev, "copy", "NULL pointer");
    return dev->ops->copy(dev, dst, src, bytes, kind, stream);
}

msr_status_t msr_device_stream_create(const msr_device_t *dev, msr_device_stream_t **stream_p)
{
    if (dev == NULL || stream_p == NULL)
        return bad(dev, "stream_create", "no device or no output");
    return dev->ops->stream_create(dev, stream_p);
}

void msr_device_stream_destroy(const msr_device_t *dev, msr_device_stream_t *stream)
{
    if (dev != NULL && stream != NULL)
        dev->ops->stream_destroy(dev, stream);
}

msr_status_t msr_device_stream_sync(const msr_device_t *dev, msr_device_stream_t *stream)
{
    if (dev == NULL)
        return bad(dev, "stream_sync", "no device");
    return dev->ops->stream_sync(dev, stream);
}

msr_status_t msr_device_event_create(const msr_device_t *dev, msr_device_event_t **event_p)
{
    if (dev == NULL || event_p == NULL)
        return bad(dev, "event_create", "no device or no output");
    return dev->ops->event_create(dev, event_p);
}

void msr_device_event_destroy(const msr_device_t *dev, msr_device_event_t *event)
{
    if (dev != NULL && event != NULL)
        dev->ops->event_destroy(dev, event);
}

msr_status_t msr_device_event_record(const msr_device_t *dev, msr_device_event_t *event,
                                     msr_device_stream_t *stream)
{
    if (dev == NULL || event == NULL)
        return bad(dev, "event_record", "no device or no event");
    return dev->ops->event_record(dev, event, stream);
}

msr_status_t msr_device_event_query(const msr_device_t *dev, msr_device_event_t *event)
{
    if (dev == NULL || event == NULL)
        return bad(dev, "event_query", "no device or no event");
    return dev->ops->event_query(dev, event);
}

msr_status_t msr_device_event_sync(const msr_device_t *dev, msr_device_event_t *event)
{
    if (dev == NULL || event == NULL)
        return bad(dev, "event_sync", "no device or no event");
    return dev->ops->event_sync(dev, event);
}

msr_status_t msr_device_stream_wait(const msr_device_t *dev, msr_device_stream_t *stream,
                                    msr_device_event_t *event)
{
    if (dev == NULL || event == NULL)
        return bad(dev, "stream_wait", "no device or no event");
    return dev->ops->stream_wait(dev, stream, event);
}
