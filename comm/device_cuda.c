/* The CUDA device: the device interface over the GPU table of
 * comm/nccl/gpu_api.h, the one loader of the CUDA runtime (dlopen on first
 * use), so this file needs no CUDA header and builds everywhere; in a build
 * without CUDA the table is missing and creating the device says why. */
#include <stdio.h>

#include "base/alloc.h"
#include "base/err.h"
#include "comm/device_impl.h"
#include "comm/nccl/gpu_api.h"

typedef struct gpu_dev {
    const msr_gpu_api_t *api;
    int device; /* CUDA's number, made current before every call */
} gpu_dev_t;

static const msr_gpu_api_t *api_of(const msr_device_t *dev)
{
    return ((const gpu_dev_t *)dev->data)->api;
}

/* Makes the device current in the calling thread (CUDA keeps one per
 * thread): every call does, so any thread may use the device. */
static msr_status_t current(const msr_device_t *dev)
{
    const gpu_dev_t *g = dev->data;
    return g->api->set_device(g->api, g->device);
}

/* The streams and events of this interface are the table's void pointers:
 * NULL (the default stream) stays NULL. */
static void *raw(const void *handle)
{
    return (void *)handle;
}

static msr_status_t gpu_alloc(const msr_device_t *dev, size_t bytes, void **p_p)
{
    msr_status_t st = current(dev);
    if (st != MSR_OK)
        return st;
    void *p = NULL;
    if ((st = api_of(dev)->device_alloc(api_of(dev), bytes, &p)) != MSR_OK)
        return st;
    *p_p = p;
    return MSR_OK;
}

static void gpu_free(const msr_device_t *dev, void *p)
{
    if (current(dev) == MSR_OK)
        api_of(dev)->device_free(api_of(dev), p);
}

static msr_status_t gpu_host_alloc(const msr_device_t *dev, size_t bytes, void **p_p)
{
    msr_status_t st = current(dev);
    if (st != MSR_OK)
        return st;
    void *p = NULL;
    if ((st = api_of(dev)->host_alloc(api_of(dev), bytes, &p)) != MSR_OK)
        return st;
    *p_p = p;
    return MSR_OK;
}

static void gpu_host_free(const msr_device_t *dev, void *p)
{
    api_of(dev)->host_free(api_of(dev), p);
}

static msr_status_t gpu_memset(const msr_device_t *dev, void *p, int byte, size_t bytes,
                               msr_device_stream_t *stream)
{
    msr_status_t st = current(dev);
    return st != MSR_OK ? st : api_of(dev)->memset_async(api_of(dev), p, byte, bytes, raw(stream));
}

static msr_status_t gpu_copy(const msr_device_t *dev, void *dst, const void *src, size_t bytes,
                             msr_device_copy_t kind, msr_device_stream_t *stream)
{
    static const msr_gpu_copy_t kinds[MSR_DEVICE_COPY_KINDS] = {
        [MSR_DEVICE_H2D] = MSR_GPU_H2D,
        [MSR_DEVICE_D2H] = MSR_GPU_D2H,
        [MSR_DEVICE_D2D] = MSR_GPU_D2D,
    };
    msr_status_t st = current(dev);
    return st != MSR_OK
               ? st
               : api_of(dev)->copy_async(api_of(dev), dst, src, bytes, kinds[kind], raw(stream));
}

static msr_status_t gpu_stream_create(const msr_device_t *dev, msr_device_stream_t **stream_p)
{
    msr_status_t st = current(dev);
    void *s = NULL;
    if (st != MSR_OK || (st = api_of(dev)->stream_create(api_of(dev), &s)) != MSR_OK)
        return st;
    *stream_p = s;
    return MSR_OK;
}

static void gpu_stream_destroy(const msr_device_t *dev, msr_device_stream_t *stream)
{
    if (current(dev) == MSR_OK)
        api_of(dev)->stream_destroy(api_of(dev), raw(stream));
}

static msr_status_t gpu_stream_sync(const msr_device_t *dev, msr_device_stream_t *stream)
{
    msr_status_t st = current(dev);
    return st != MSR_OK ? st : api_of(dev)->stream_sync(api_of(dev), raw(stream));
}

static msr_status_t gpu_event_create(const msr_device_t *dev, msr_device_event_t **event_p)
{
    msr_status_t st = current(dev);
    void *e = NULL;
    if (st != MSR_OK || (st = api_of(dev)->event_create(api_of(dev), &e)) != MSR_OK)
        return st;
    *event_p = e;
    return MSR_OK;
}

static void gpu_event_destroy(const msr_device_t *dev, msr_device_event_t *event)
{
    if (current(dev) == MSR_OK)
        api_of(dev)->event_destroy(api_of(dev), raw(event));
}

static msr_status_t gpu_event_record(const msr_device_t *dev, msr_device_event_t *event,
                                     msr_device_stream_t *stream)
{
    msr_status_t st = current(dev);
    return st != MSR_OK ? st : api_of(dev)->event_record(api_of(dev), raw(event), raw(stream));
}

static msr_status_t gpu_event_query(const msr_device_t *dev, msr_device_event_t *event)
{
    msr_status_t st = current(dev);
    return st != MSR_OK ? st : api_of(dev)->event_query(api_of(dev), raw(event));
}

static msr_status_t gpu_event_sync(const msr_device_t *dev, msr_device_event_t *event)
{
    msr_status_t st = current(dev);
    return st != MSR_OK ? st : api_of(dev)->event_sync(api_of(dev), raw(event));
}

static msr_status_t gpu_stream_wait(const msr_device_t *dev, msr_device_stream_t *stream,
                                    msr_device_event_t *event)
{
    msr_status_t st = current(dev);
    return st != MSR_OK ? st : api_of(dev)->stream_wait_event(api_of(dev), raw(stream), raw(event));
}

static void gpu_destroy(const msr_device_t *dev)
{
    msr_free(dev->data);
    msr_free((void *)dev);
}

static const msr_device_ops_t gpu_ops = {
    .alloc = gpu_alloc,
    .free = gpu_free,
    .host_alloc = gpu_host_alloc,
    .host_free = gpu_host_free,
    .memset = gpu_memset,
    .copy = gpu_copy,
    .stream_create = gpu_stream_create,
    .stream_destroy = gpu_stream_destroy,
    .stream_sync = gpu_stream_sync,
    .event_create = gpu_event_create,
    .event_destroy = gpu_event_destroy,
    .event_record = gpu_event_record,
    .event_query = gpu_event_query,
    .event_sync = gpu_event_sync,
    .stream_wait = gpu_stream_wait,
    .destroy = gpu_destroy,
};

msr_status_t msr_device_gpu_create(const msr_gpu_api_t *api, int device, msr_device_t **dev_p)
{
    if (api->memset_async == NULL || api->stream_sync == NULL || api->event_sync == NULL) {
        msr_err_set("device: the GPU table %s lacks the device interface's calls", api->name);
        return MSR_ERR_UNSUPPORTED;
    }
    /* the table's answer as it is: MSR_ERR_UNSUPPORTED where the machine
     * has no GPU, MSR_ERR_BACKEND for a driver too old for the runtime (a
     * machine with a GPU that must not pass for one without) */
    int count = 0;
    msr_status_t st = api->device_count(api, &count);
    if (st != MSR_OK)
        return st;
    if (count <= 0) {
        msr_err_set("device: no CUDA device visible");
        return MSR_ERR_UNSUPPORTED;
    }
    if (device < 0 || device >= count) {
        msr_err_set("device: CUDA device %d does not exist (%d visible)", device, count);
        return MSR_ERR_INVALID_ARG;
    }
    if ((st = api->set_device(api, device)) != MSR_OK)
        return st;
    msr_device_t *dev = msr_calloc(1, sizeof *dev);
    gpu_dev_t *g = msr_calloc(1, sizeof *g);
    if (dev == NULL || g == NULL) {
        msr_free(dev);
        msr_free(g);
        msr_err_set("device: out of memory for CUDA device %d", device);
        return MSR_ERR_NO_MEMORY;
    }
    g->api = api;
    g->device = device;
    dev->ops = &gpu_ops;
    dev->data = g;
    snprintf(dev->name, sizeof dev->name, "cuda:%d", device);
    *dev_p = dev;
    return MSR_OK;
}

msr_status_t msr_device_cuda_create(int device, msr_device_t **dev_p)
{
    if (dev_p == NULL) {
        msr_err_set("device: cuda_create: no output");
        return MSR_ERR_INVALID_ARG;
    }
    const msr_gpu_api_t *api = msr_gpu_api_cuda();
    if (api == NULL) {
        msr_err_set("device: no CUDA device: %s", msr_gpu_api_why());
        return MSR_ERR_UNSUPPORTED;
    }
    return msr_device_gpu_create(api, device, dev_p);
}
