/* The CUDA runtime and NCCL calls the device communicators make, behind one
 * table: cuda_api.c fills it with the real libraries (CUDA builds), tests
 * fill it with a fake that runs without a GPU. No CUDA or NCCL type crosses
 * it: streams, events and NCCL communicators are void pointers, and every
 * call returns an msr_status_t (with msr_last_error() set by the table when
 * it fails), so everything above it builds and is tested without CUDA. */
#ifndef MSR_COMM_NCCL_GPU_API_H
#define MSR_COMM_NCCL_GPU_API_H

#include <stddef.h>

#include "msrun/comm.h"

#define MSR_GPU_ID_BYTES   128 /* NCCL_UNIQUE_ID_BYTES */
#define MSR_GPU_UUID_BYTES 16

typedef enum msr_gpu_copy {
    MSR_GPU_D2H, /* device to host */
    MSR_GPU_H2D, /* host to device */
    MSR_GPU_D2D, /* device to device */
} msr_gpu_copy_t;

typedef struct msr_gpu_api msr_gpu_api_t;

/* Every function takes the table first (a fake keeps its state in data).
 * Statuses: MSR_OK; MSR_IN_PROGRESS where it says so; errors as mapped by
 * msr_gpu_cuda_status and msr_gpu_nccl_status (cuda_api.c). */
struct msr_gpu_api {
    const char *name; /* "cuda" or a fake's name, for logs */
    void *data;       /* the fake's state; NULL for the real table */

    /* ---- CUDA runtime: devices (set_device: the calling thread's) ---- */
    msr_status_t (*device_count)(const msr_gpu_api_t *g, int *count_p);
    msr_status_t (*set_device)(const msr_gpu_api_t *g, int device);
    /* A 16-byte identity of device, unique per GPU of a machine whatever
     * CUDA_VISIBLE_DEVICES says. */
    msr_status_t (*device_uuid)(const msr_gpu_api_t *g, int device,
                                unsigned char uuid[MSR_GPU_UUID_BYTES]);

    /* ---- streams and events (of the current device) ---- */
    msr_status_t (*stream_create)(const msr_gpu_api_t *g, void **stream_p);
    void (*stream_destroy)(const msr_gpu_api_t *g, void *stream);
    msr_status_t (*event_create)(const msr_gpu_api_t *g, void **event_p);
    void (*event_destroy)(const msr_gpu_api_t *g, void *event);
    msr_status_t (*event_record)(const msr_gpu_api_t *g, void *event, void *stream);
    /* MSR_OK once the work queued before the record is done, MSR_IN_PROGRESS
     * before. */
    msr_status_t (*event_query)(const msr_gpu_api_t *g, void *event);
    msr_status_t (*stream_wait_event)(const msr_gpu_api_t *g, void *stream, void *event);

    /* ---- memory ---- */
    msr_status_t (*host_alloc)(const msr_gpu_api_t *g, size_t bytes, void **p); /* pinned */
    void (*host_free)(const msr_gpu_api_t *g, void *p);
    msr_status_t (*device_alloc)(const msr_gpu_api_t *g, size_t bytes, void **p);
    void (*device_free)(const msr_gpu_api_t *g, void *p);
    msr_status_t (*copy_async)(const msr_gpu_api_t *g, void *dst, const void *src, size_t bytes,
                               msr_gpu_copy_t kind, void *stream);

    /* ---- what the device interface (msrun/device.h) adds; a fake that
     * leaves them NULL serves the communicators only ---- */
    msr_status_t (*memset_async)(const msr_gpu_api_t *g, void *p, int byte, size_t bytes,
                                 void *stream);
    /* Wait on the host until the stream's work, or the work before the
     * event's record, is done; the first error of that work. */
    msr_status_t (*stream_sync)(const msr_gpu_api_t *g, void *stream);
    msr_status_t (*event_sync)(const msr_gpu_api_t *g, void *event);

    /* ---- NCCL: every communicator is made non-blocking, so any call may
     * answer MSR_IN_PROGRESS; comm_async_error then tells when it is done
     * (MSR_OK), still going (MSR_IN_PROGRESS) or failed. ---- */
    msr_status_t (*unique_id)(const msr_gpu_api_t *g, unsigned char id[MSR_GPU_ID_BYTES]);
    /* *nc_p is set even when the answer is MSR_IN_PROGRESS. */
    msr_status_t (*comm_init)(const msr_gpu_api_t *g, void **nc_p, int nranks,
                              const unsigned char id[MSR_GPU_ID_BYTES], int rank);
    /* color < 0: this rank joins no group (*newnc_p NULL once done).
     * *newnc_p is written when the split is done: during the call, or,
     * after MSR_IN_PROGRESS, once comm_async_error(nc) answers MSR_OK
     * (NCCL's background thread stores it), so it must outlive the call. */
    msr_status_t (*comm_split)(const msr_gpu_api_t *g, void *nc, int color, int key,
                               void **newnc_p);
    msr_status_t (*comm_async_error)(const msr_gpu_api_t *g, void *nc);
    msr_status_t (*comm_user_rank)(const msr_gpu_api_t *g, void *nc, int *rank_p);
    msr_status_t (*comm_finalize)(const msr_gpu_api_t *g, void *nc);
    msr_status_t (*comm_destroy)(const msr_gpu_api_t *g, void *nc);
    /* Frees nc and stops its operations on the device; any thread. */
    msr_status_t (*comm_abort)(const msr_gpu_api_t *g, void *nc);
    msr_status_t (*group_start)(const msr_gpu_api_t *g);
    msr_status_t (*group_end)(const msr_gpu_api_t *g);
    msr_status_t (*allreduce)(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                              msr_dtype_t dtype, msr_op_t op, void *nc, void *stream);
    msr_status_t (*reduce_scatter)(const msr_gpu_api_t *g, const void *send, void *recv,
                                   size_t recvcount, msr_dtype_t dtype, msr_op_t op, void *nc,
                                   void *stream);
    msr_status_t (*allgather)(const msr_gpu_api_t *g, const void *send, void *recv,
                              size_t sendcount, msr_dtype_t dtype, void *nc, void *stream);
    msr_status_t (*broadcast)(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                              msr_dtype_t dtype, int root, void *nc, void *stream);
    msr_status_t (*reduce)(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                           msr_dtype_t dtype, msr_op_t op, int root, void *nc, void *stream);
    msr_status_t (*alltoall)(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                             msr_dtype_t dtype, void *nc, void *stream);
    msr_status_t (*send)(const msr_gpu_api_t *g, const void *buf, size_t count, msr_dtype_t dtype,
                         int peer, void *nc, void *stream);
    msr_status_t (*recv)(const msr_gpu_api_t *g, void *buf, size_t count, msr_dtype_t dtype,
                         int peer, void *nc, void *stream);
};

/* The real table (cuda_api.c), or NULL in a build without CUDA (no_cuda.c)
 * or where the CUDA runtime cannot be loaded: the first call loads the CUDA
 * runtime and NCCL with dlopen (libmsrun links neither), so only a program
 * that asks for a device communicator maps them. NCCL is optional: without
 * it the table's unique_id and comm_init fail with MSR_ERR_UNSUPPORTED and
 * "NCCL not available: <the loader's reason>"; the staged communicators
 * still work. $MSR_CUDART_LIBRARY and $MSR_NCCL_LIBRARY name other files
 * to load. Immutable; shared by every thread; any thread may call. */
const msr_gpu_api_t *msr_gpu_api_cuda(void);

/* Why msr_gpu_api_cuda() is NULL ("libmsrun was built without CUDA", "CUDA
 * runtime not available: libcudart.so.13: cannot open shared object file:
 * ..."), for messages. Never NULL. */
const char *msr_gpu_api_why(void);

/* The mappings cuda_api.c uses, exposed for the unit tests (CUDA builds
 * only): a cudaError_t or ncclResult_t value to a status; an msrun dtype or
 * op to ncclDataType_t / ncclRedOp_t (-1 for values outside the enums). */
msr_status_t msr_gpu_cuda_status(int cuda_error);
msr_status_t msr_gpu_nccl_status(int nccl_result);
int msr_gpu_nccl_dtype(msr_dtype_t dtype);
int msr_gpu_nccl_op(msr_op_t op);

#endif
