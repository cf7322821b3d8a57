/* The device interface's ops table (see msrun/device.h for the contracts):
 * what an implementation fills. The public calls in device.c check the
 * arguments (NULL pointers, zero bytes, copy kinds) before an entry is
 * called, so an entry sees bytes > 0 and valid handles only. */
#ifndef MSR_COMM_DEVICE_IMPL_H
#define MSR_COMM_DEVICE_IMPL_H

#include "msrun/device.h"

typedef struct msr_device_ops {
    /* memory: *p_p written only on success; MSR_ERR_NO_MEMORY when out */
    msr_status_t (*alloc)(const msr_device_t *dev, size_t bytes, void **p_p);
    /* memory that reads zero, for a device whose allocations are zero
     * already (NULL: alloc, then a memset on the default stream and its
     * sync) */
    msr_status_t (*alloc_zero)(const msr_device_t *dev, size_t bytes, void **p_p);
    void (*free)(const msr_device_t *dev, void *p);
    msr_status_t (*host_alloc)(const msr_device_t *dev, size_t bytes, void **p_p);
    void (*host_free)(const msr_device_t *dev, void *p);
    /* queued on stream (NULL: the default stream), in its order */
    msr_status_t (*memset)(const msr_device_t *dev, void *p, int byte, size_t bytes,
                           msr_device_stream_t *stream);
    msr_status_t (*copy)(const msr_device_t *dev, void *dst, const void *src, size_t bytes,
                         msr_device_copy_t kind, msr_device_stream_t *stream);
    msr_status_t (*stream_create)(const msr_device_t *dev, msr_device_stream_t **stream_p);
    void (*stream_destroy)(const msr_device_t *dev, msr_device_stream_t *stream);
    msr_status_t (*stream_sync)(const msr_device_t *dev, msr_device_stream_t *stream);
    msr_status_t (*event_create)(const msr_device_t *dev, msr_device_event_t **event_p);
    void (*event_destroy)(const msr_device_t *dev, msr_device_event_t *event);
    msr_status_t (*event_record)(const msr_device_t *dev, msr_device_event_t *event,
                                 msr_device_stream_t *stream);
    msr_status_t (*event_query)(const msr_device_t *dev, msr_device_event_t *event);
    msr_status_t (*event_sync)(const msr_device_t *dev, msr_device_event_t *event);
    msr_status_t (*stream_wait)(const msr_device_t *dev, msr_device_stream_t *stream,
                                msr_device_event_t *event);
    /* frees what the create call made; NULL for a device never destroyed */
    void (*destroy)(const msr_device_t *dev);
} msr_device_ops_t;

struct msr_device {
    const msr_device_ops_t *ops;
    char name[24]; /* "cpu", "cuda:N" */
    int is_host;   /* memory is host memory */
    void *data;    /* the implementation's state */
};

/* The CUDA device over any GPU table (device_cuda.c): the real one for
 * msr_device_cuda_create, a fake in tests. The table must have the device
 * interface's calls (memset_async, stream_sync, event_sync: else
 * MSR_ERR_UNSUPPORTED); otherwise as msr_device_cuda_create. */
struct msr_gpu_api;
msr_status_t msr_device_gpu_create(const struct msr_gpu_api *api, int device, msr_device_t **dev_p);

#endif
