/* libmsrun's device interface: memory, copies, streams and events of one device
 * (the CPU or a CUDA GPU) behind an ops table, so that the runtime's
 * buffers and copies are written once for every device.
 *
 * What it covers: device memory (alloc, free, memset), pinned host memory,
 * copies between host and device and within the device, streams (ordered
 * queues of work) and events (a point in a stream that another stream or
 * the host waits for). What it does not cover yet: the kernels (matmuls,
 * attention, norms, the optimizer), which still run on the CPU.
 *
 * Contracts common to every implementation:
 * - Zero bytes is valid everywhere: alloc gives MSR_OK and a NULL pointer,
 *   copy and memset do nothing (their pointers may then be NULL), free and
 *   host_free of NULL do nothing.
 * - A NULL stream is the device's default stream. Work queued on one stream
 *   runs in the order it was queued; work on two streams is ordered only by
 *   an event recorded on one and waited for by the other. A memset or copy
 *   may still be running when the call returns: its destination (and its
 *   source) may be touched by the host only after stream_sync, or after
 *   event_sync of an event recorded behind it.
 * - Errors: MSR_ERR_INVALID_ARG (NULL pointer with bytes > 0, an unknown
 *   copy kind, a NULL device, event or required output), MSR_ERR_NO_MEMORY
 *   (allocation failed: nothing is allocated), MSR_ERR_UNSUPPORTED (no such
 *   device), MSR_ERR_BACKEND (the device failed); the text is in
 *   msr_last_error(). An error of queued work may surface only at the next
 *   stream_sync or event_sync, as on CUDA.
 * - Threads: a device may be used from several threads; a stream or event
 *   from one thread at a time.
 *
 * The CPU device (msr_device_cpu): memory is host memory (page-backed and
 * counted by base/alloc.h's hook, so tests can fail an allocation), pinned
 * host memory is plain host memory, and a stream runs its work at once,
 * synchronously, in the call: every event is complete when recorded.
 *
 * The CUDA device (msr_device_cuda_create): the CUDA runtime, loaded with
 * dlopen on first use by the same loader as the device communicators (a
 * build without CUDA answers MSR_ERR_UNSUPPORTED). Streams are CUDA streams,
 * events CUDA events without timing, copies cudaMemcpyAsync, memset
 * cudaMemsetAsync; every call first makes the device current in the
 * calling thread. */
#ifndef MSRUN_DEVICE_H
#define MSRUN_DEVICE_H

#include <stddef.h>

#include "msrun/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct msr_device msr_device_t;
typedef struct msr_device_stream msr_device_stream_t; /* opaque: a queue */
typedef struct msr_device_event msr_device_event_t;   /* opaque: a point in one */

typedef enum msr_device_copy {
    MSR_DEVICE_H2D, /* host to device */
    MSR_DEVICE_D2H, /* device to host */
    MSR_DEVICE_D2D, /* device to device (both in this device's memory) */
    MSR_DEVICE_COPY_KINDS
} msr_device_copy_t;

/* The CPU device: immutable, never destroyed (destroying it does nothing);
 * any thread. */
MSR_API const msr_device_t *msr_device_cpu(void);

/* CUDA device number device (as CUDA_VISIBLE_DEVICES shows them) into
 * *dev_p, owned by the caller (msr_device_destroy). Errors:
 * MSR_ERR_UNSUPPORTED when the build has no CUDA, the runtime cannot be
 * loaded or the machine has no GPU (none visible, no driver installed);
 * MSR_ERR_BACKEND for any other CUDA failure (a driver too old for the
 * runtime among them); MSR_ERR_INVALID_ARG for a device number
 * outside [0, count); MSR_ERR_NO_MEMORY. *dev_p is written only on
 * success. */
MSR_API msr_status_t msr_device_cuda_create(int device, msr_device_t **dev_p);

/* Frees a device made by a create call; NULL and the CPU device do nothing.
 * Its memory, streams and events must have been freed first. */
MSR_API void msr_device_destroy(const msr_device_t *dev);

/* "cpu" or "cuda:N", for logs. */
MSR_API const char *msr_device_name(const msr_device_t *dev);
/* 1 when the device's memory is host memory (the CPU device). */
MSR_API int msr_device_is_host(const msr_device_t *dev);

/* ---- memory: *p_p written only on success; contents undefined ---- */
MSR_API msr_status_t msr_device_alloc(const msr_device_t *dev, size_t bytes, void **p_p);
/* Memory that reads zero when the call returns (it waits for the zeroing;
 * *p_p written only on success). On the CPU device the pages are the
 * system's zero pages until written: a buffer written in part holds
 * only the pages written, as calloc's. Errors as alloc, or the zeroing's
 * (nothing is then allocated). */
MSR_API msr_status_t msr_device_alloc_zero(const msr_device_t *dev, size_t bytes, void **p_p);
MSR_API void msr_device_free(const msr_device_t *dev, void *p);
/* Host memory the device copies from and to at full speed (pinned). */
MSR_API msr_status_t msr_device_host_alloc(const msr_device_t *dev, size_t bytes, void **p_p);
MSR_API void msr_device_host_free(const msr_device_t *dev, void *p);

/* ---- copies and memset, queued on stream (NULL: the default one) ---- */
MSR_API msr_status_t msr_device_memset(const msr_device_t *dev, void *p, int byte, size_t bytes,
                                       msr_device_stream_t *stream);
/* dst and src must not overlap. */
MSR_API msr_status_t msr_device_copy(const msr_device_t *dev, void *dst, const void *src,
                                     size_t bytes, msr_device_copy_t kind,
                                     msr_device_stream_t *stream);

/* ---- streams and events ---- */
MSR_API msr_status_t msr_device_stream_create(const msr_device_t *dev,
                                              msr_device_stream_t **stream_p);
MSR_API void msr_device_stream_destroy(const msr_device_t *dev, msr_device_stream_t *stream);
/* Waits until everything queued on stream is done; its first error. */
MSR_API msr_status_t msr_device_stream_sync(const msr_device_t *dev, msr_device_stream_t *stream);
MSR_API msr_status_t msr_device_event_create(const msr_device_t *dev, msr_device_event_t **event_p);
MSR_API void msr_device_event_destroy(const msr_device_t *dev, msr_device_event_t *event);
/* Marks the point in stream after the work queued so far. */
MSR_API msr_status_t msr_device_event_record(const msr_device_t *dev, msr_device_event_t *event,
                                             msr_device_stream_t *stream);
/* MSR_OK once the work before the record is done (or never recorded),
 * MSR_IN_PROGRESS before. */
MSR_API msr_status_t msr_device_event_query(const msr_device_t *dev, msr_device_event_t *event);
/* Waits on the host until the work before the record is done. */
MSR_API msr_status_t msr_device_event_sync(const msr_device_t *dev, msr_device_event_t *event);
/* Work queued on stream after this call starts once event's is done; the
 * host does not wait. */
MSR_API msr_status_t msr_device_stream_wait(const msr_device_t *dev, msr_device_stream_t *stream,
                                            msr_device_event_t *event);

#ifdef __cplusplus
}
#endif

#endif
