/* The GPU table over the real CUDA runtime and NCCL (built only when CMake
 * found both): each call translated, its failure mapped to a status with
 * CUDA's or NCCL's message in msr_last_error(). */
#include <cuda_runtime.h>
#include <nccl.h>
#include <string.h>

#include "comm/nccl/gpu_api.h"
#include "base/err.h"

msr_status_t msr_gpu_cuda_status(int cuda_error)
{
    switch ((cudaError_t)cuda_error) {
    case cudaSuccess:
        return MSR_OK;
    case cudaErrorNotReady:
        return MSR_IN_PROGRESS;
    case cudaErrorMemoryAllocation:
        return MSR_ERR_NO_MEMORY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
        return MSR_ERR_INVALID_ARG;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
        return MSR_ERR_UNSUPPORTED;
    default:
        return MSR_ERR_BACKEND;
    }
}

msr_status_t msr_gpu_nccl_status(int nccl_result)
{
    switch ((ncclResult_t)nccl_result) {
    case ncclSuccess:
        return MSR_OK;
    case ncclInProgress:
        return MSR_IN_PROGRESS;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return MSR_ERR_INVALID_ARG;
    case ncclRemoteError: /* a peer exited or the network failed */
        return MSR_ERR_PEER_LOST;
    case ncclUnhandledCudaError:
    case ncclSystemError:
    case ncclInternalError:
    default:
        return MSR_ERR_BACKEND;
    }
}

int msr_gpu_nccl_dtype(msr_dtype_t dtype)
{
    switch (dtype) {
    case MSR_DTYPE_F32:
        return ncclFloat32;
    case MSR_DTYPE_F64:
        return ncclFloat64;
    case MSR_DTYPE_F16:
        return ncclFloat16;
    case MSR_DTYPE_BF16:
        return ncclBfloat16;
    case MSR_DTYPE_I32:
        return ncclInt32;
    case MSR_DTYPE_I64:
        return ncclInt64;
    case MSR_DTYPE_U8:
        return ncclUint8;
    }
    return -1;
}

int msr_gpu_nccl_op(msr_op_t op)
{
    switch (op) {
    case MSR_OP_SUM:
        return ncclSum;
    case MSR_OP_PROD:
        return ncclProd;
    case MSR_OP_MIN:
        return ncclMin;
    case MSR_OP_MAX:
        return ncclMax;
    case MSR_OP_AVG:
        return ncclAvg;
    }
    return -1;
}

/* Maps a CUDA result, naming the call on failure. */
static msr_status_t cu(cudaError_t e, const char *call)
{
    msr_status_t st = msr_gpu_cuda_status(e);
    if (st < 0) {
        msr_err_set("cuda: %s: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
        (void)cudaGetLastError(); /* clears it (unless sticky) for the next call */
    }
    return st;
}

/* Maps an NCCL result, with NCCL's last message on failure. */
static msr_status_t nc_(ncclResult_t r, ncclComm_t comm, const char *call)
{
    msr_status_t st = msr_gpu_nccl_status(r);
    if (st < 0) {
        const char *last = ncclGetLastError(comm);
        msr_err_set("nccl: %s: %s%s%s", call, ncclGetErrorString(r), last && *last ? ": " : "",
                    last ? last : "");
    }
    return st;
}

/* Whether a failed cudaGetDeviceCount means that this machine has no GPU:
 * CUDA says so, or no driver is installed at all (the runtime answers
 * cudaErrorInsufficientDriver and the driver's version is 0). */
static int no_device(cudaError_t e)
{
    int version = -1;
    if (e == cudaErrorNoDevice)
        return 1;
    return e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&version) == cudaSuccess &&
           version == 0;
}

/* MSR_ERR_UNSUPPORTED only where the machine has no GPU; a driver too old
 * for the runtime is MSR_ERR_BACKEND, so a GPU test fails on it instead of
 * skipping (select_device refuses both alike). */
static msr_status_t device_count(const msr_gpu_api_t *g, int *count_p)
{
    (void)g;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    msr_status_t st = cu(e, "cudaGetDeviceCount");
    if (st == MSR_ERR_UNSUPPORTED && !no_device(e))
        st = MSR_ERR_BACKEND;
    if (st == MSR_OK)
        *count_p = n;
    return st;
}

static msr_status_t set_device(const msr_gpu_api_t *g, int device)
{
    (void)g;
    return cu(cudaSetDevice(device), "cudaSetDevice");
}

static msr_status_t device_uuid(const msr_gpu_api_t *g, int device,
                                unsigned char uuid[MSR_GPU_UUID_BYTES])
{
    (void)g;
    struct cudaDeviceProp prop;
    msr_status_t st = cu(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    if (st == MSR_OK)
        memcpy(uuid, prop.uuid.bytes, MSR_GPU_UUID_BYTES);
    return st;
}

static msr_status_t stream_create(const msr_gpu_api_t *g, void **stream_p)
{
    (void)g;
    cudaStream_t s = NULL;
    msr_status_t st =
        cu(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    if (st == MSR_OK)
        *stream_p = s;
    return st;
}

static void stream_destroy(const msr_gpu_api_t *g, void *stream)
{
    (void)g;
    if (stream)
        cu(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

static msr_status_t event_create(const msr_gpu_api_t *g, void **event_p)
{
    (void)g;
    cudaEvent_t e = NULL;
    msr_status_t st =
        cu(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    if (st == MSR_OK)
        *event_p = e;
    return st;
}

static void event_destroy(const msr_gpu_api_t *g, void *event)
{
    (void)g;
    if (event)
        cu(cudaEventDestroy(event), "cudaEventDestroy");
}

static msr_status_t event_record(const msr_gpu_api_t *g, void *event, void *stream)
{
    (void)g;
    return cu(cudaEventRecord(event, stream), "cudaEventRecord");
}

static msr_status_t event_query(const msr_gpu_api_t *g, void *event)
{
    (void)g;
    return cu(cudaEventQuery(event), "cudaEventQuery");
}

static msr_status_t stream_wait_event(const msr_gpu_api_t *g, void *stream, void *event)
{
    (void)g;
    return cu(cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent");
}

static msr_status_t host_alloc(const msr_gpu_api_t *g, size_t bytes, void **p)
{
    (void)g;
    return cu(cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocPortable), "cudaHostAlloc");
}

static void host_free(const msr_gpu_api_t *g, void *p)
{
    (void)g;
    if (p)
        cu(cudaFreeHost(p), "cudaFreeHost");
}

static msr_status_t device_alloc(const msr_gpu_api_t *g, size_t bytes, void **p)
{
    (void)g;
    return cu(cudaMalloc(p, bytes ? bytes : 1), "cudaMalloc");
}

static void device_free(const msr_gpu_api_t *g, void *p)
{
    (void)g;
    if (p)
        cu(cudaFree(p), "cudaFree");
}

static msr_status_t copy_async(const msr_gpu_api_t *g, void *dst, const void *src, size_t bytes,
                               msr_gpu_copy_t kind, void *stream)
{
    (void)g;
    enum cudaMemcpyKind k = kind == MSR_GPU_D2H   ? cudaMemcpyDeviceToHost
                            : kind == MSR_GPU_H2D ? cudaMemcpyHostToDevice
                                                  : cudaMemcpyDeviceToDevice;
    return cu(cudaMemcpyAsync(dst, src, bytes, k, stream), "cudaMemcpyAsync");
}

static msr_status_t unique_id(const msr_gpu_api_t *g, unsigned char id[MSR_GPU_ID_BYTES])
{
    (void)g;
    ncclUniqueId u;
    _Static_assert(sizeof u == MSR_GPU_ID_BYTES, "ncclUniqueId is 128 bytes");
    msr_status_t st = nc_(ncclGetUniqueId(&u), NULL, "ncclGetUniqueId");
    if (st == MSR_OK)
        memcpy(id, &u, sizeof u);
    return st;
}

/* Every communicator is non-blocking: its calls return at once and
 * ncclCommGetAsyncError tells when they are done. */
static ncclConfig_t config(void)
{
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.blocking = 0;
    return c;
}

static msr_status_t comm_init(const msr_gpu_api_t *g, void **nc_p, int nranks,
                              const unsigned char id[MSR_GPU_ID_BYTES], int rank)
{
    (void)g;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclConfig_t c = config();
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, u, rank, &c);
    msr_status_t st = nc_(r, comm, "ncclCommInitRankConfig");
    if (st == MSR_OK || st == MSR_IN_PROGRESS)
        *nc_p = comm;
    else if (comm != NULL)
        ncclCommAbort(comm);
    return st;
}

static msr_status_t comm_split(const msr_gpu_api_t *g, void *nc, int color, int key, void **newnc_p)
{
    (void)g;
    ncclConfig_t c = config();
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommSplit(nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &comm, &c);
    msr_status_t st = nc_(r, nc, "ncclCommSplit");
    if (st == MSR_OK || st == MSR_IN_PROGRESS)
        *newnc_p = comm;
    return st;
}

static msr_status_t comm_async_error(const msr_gpu_api_t *g, void *nc)
{
    (void)g;
    ncclResult_t async = ncclSuccess;
    msr_status_t st = nc_(ncclCommGetAsyncError(nc, &async), nc, "ncclCommGetAsyncError");
    if (st != MSR_OK)
        return st;
    return nc_(async, nc, "asynchronous error");
}

static msr_status_t comm_user_rank(const msr_gpu_api_t *g, void *nc, int *rank_p)
{
    (void)g;
    return nc_(ncclCommUserRank(nc, rank_p), nc, "ncclCommUserRank");
}

static msr_status_t comm_finalize(const msr_gpu_api_t *g, void *nc)
{
    (void)g;
    return nc_(ncclCommFinalize(nc), nc, "ncclCommFinalize");
}

static msr_status_t comm_destroy(const msr_gpu_api_t *g, void *nc)
{
    (void)g;
    return nc_(ncclCommDestroy(nc), nc, "ncclCommDestroy");
}

static msr_status_t comm_abort(const msr_gpu_api_t *g, void *nc)
{
    (void)g;
    return nc_(ncclCommAbort(nc), NULL, "ncclCommAbort");
}

static msr_status_t group_start(const msr_gpu_api_t *g)
{
    (void)g;
    return nc_(ncclGroupStart(), NULL, "ncclGroupStart");
}

static msr_status_t group_end(const msr_gpu_api_t *g)
{
    (void)g;
    return nc_(ncclGroupEnd(), NULL, "ncclGroupEnd");
}

#define DT(d) ((ncclDataType_t)msr_gpu_nccl_dtype(d))
#define OP(o) ((ncclRedOp_t)msr_gpu_nccl_op(o))

static msr_status_t allreduce(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                              msr_dtype_t dtype, msr_op_t op, void *nc, void *stream)
{
    (void)g;
    return nc_(ncclAllReduce(send, recv, count, DT(dtype), OP(op), nc, stream), nc,
               "ncclAllReduce");
}

static msr_status_t reduce_scatter(const msr_gpu_api_t *g, const void *send, void *recv,
                                   size_t recvcount, msr_dtype_t dtype, msr_op_t op, void *nc,
                                   void *stream)
{
    (void)g;
    return nc_(ncclReduceScatter(send, recv, recvcount, DT(dtype), OP(op), nc, stream), nc,
               "ncclReduceScatter");
}

static msr_status_t allgather(const msr_gpu_api_t *g, const void *send, void *recv,
                              size_t sendcount, msr_dtype_t dtype, void *nc, void *stream)
{
    (void)g;
    return nc_(ncclAllGather(send, recv, sendcount, DT(dtype), nc, stream), nc, "ncclAllGather");
}

static msr_status_t broadcast(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                              msr_dtype_t dtype, int root, void *nc, void *stream)
{
    (void)g;
    return nc_(ncclBroadcast(send, recv, count, DT(dtype), root, nc, stream), nc, "ncclBroadcast");
}

static msr_status_t reduce(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                           msr_dtype_t dtype, msr_op_t op, int root, void *nc, void *stream)
{
    (void)g;
    return nc_(ncclReduce(send, recv, count, DT(dtype), OP(op), root, nc, stream), nc,
               "ncclReduce");
}

static msr_status_t alltoall(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                             msr_dtype_t dtype, void *nc, void *stream)
{
    (void)g;
    return nc_(ncclAlltoAll(send, recv, count, DT(dtype), nc, stream), nc, "ncclAlltoAll");
}

static msr_status_t send_(const msr_gpu_api_t *g, const void *buf, size_t count, msr_dtype_t dtype,
                          int peer, void *nc, void *stream)
{
    (void)g;
    return nc_(ncclSend(buf, count, DT(dtype), peer, nc, stream), nc, "ncclSend");
}

static msr_status_t recv_(const msr_gpu_api_t *g, void *buf, size_t count, msr_dtype_t dtype,
                          int peer, void *nc, void *stream)
{
    (void)g;
    return nc_(ncclRecv(buf, count, DT(dtype), peer, nc, stream), nc, "ncclRecv");
}

static const msr_gpu_api_t cuda_api = {
    .name = "cuda",
    .device_count = device_count,
    .set_device = set_device,
    .device_uuid = device_uuid,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_query = event_query,
    .stream_wait_event = stream_wait_event,
    .host_alloc = host_alloc,
    .host_free = host_free,
    .device_alloc = device_alloc,
    .device_free = device_free,
    .copy_async = copy_async,
    .unique_id = unique_id,
    .comm_init = comm_init,
    .comm_split = comm_split,
    .comm_async_error = comm_async_error,
    .comm_user_rank = comm_user_rank,
    .comm_finalize = comm_finalize,
    .comm_destroy = comm_destroy,
    .comm_abort = comm_abort,
    .group_start = group_start,
    .group_end = group_end,
    .allreduce = allreduce,
    .reduce_scatter = reduce_scatter,
    .allgather = allgather,
    .broadcast = broadcast,
    .reduce = reduce,
    .alltoall = alltoall,
    .send = send_,
    .recv = recv_,
};

const msr_gpu_api_t *msr_gpu_api_cuda(void)
{
    return &cuda_api;
}
