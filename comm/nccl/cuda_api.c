/* The GPU table over the real CUDA runtime and NCCL (built only when CMake
 * found both): each call translated, its failure mapped to a status with
 * CUDA's or NCCL's message in msr_last_error().
 *
 * libmsrun does not link either library: they are loaded with dlopen the
 * first time a device communicator or msr_gpu_select asks for the table, so
 * a CPU program (and a machine without CUDA) never maps them. The headers
 * give the types, constants and the functions' exact signatures (each
 * pointer is declared with __typeof__ of the function it stands for). */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl/gpu_api.h"
#include "base/err.h"

/* The functions this file calls, by library. A name the headers turn into a
 * macro (cudaGetDeviceProperties_v2 and the like) is expanded the same way
 * in the pointer's name, its symbol and every call. */
#define CUDART_FUNCS(X)          \
    X(cudaDriverGetVersion)      \
    X(cudaEventCreateWithFlags)  \
    X(cudaEventDestroy)          \
    X(cudaEventSynchronize)      \
    X(cudaEventQuery)            \
    X(cudaEventRecord)           \
    X(cudaFree)                  \
    X(cudaFreeHost)              \
    X(cudaGetDeviceCount)        \
    X(cudaGetDeviceProperties)   \
    X(cudaGetErrorName)          \
    X(cudaGetErrorString)        \
    X(cudaGetLastError)          \
    X(cudaHostAlloc)             \
    X(cudaMalloc)                \
    X(cudaMemcpyAsync)           \
    X(cudaMemsetAsync)           \
    X(cudaSetDevice)             \
    X(cudaStreamCreateWithFlags) \
    X(cudaStreamDestroy)         \
    X(cudaStreamSynchronize)     \
    X(cudaStreamWaitEvent)
#define NCCL_FUNCS(X)         \
    X(ncclAllGather)          \
    X(ncclAllReduce)          \
    X(ncclAlltoAll)           \
    X(ncclBroadcast)          \
    X(ncclCommAbort)          \
    X(ncclCommDestroy)        \
    X(ncclCommFinalize)       \
    X(ncclCommGetAsyncError)  \
    X(ncclCommInitRankConfig) \
    X(ncclCommSplit)          \
    X(ncclCommUserRank)       \
    X(ncclGetErrorString)     \
    X(ncclGetLastError)       \
    X(ncclGetUniqueId)        \
    X(ncclGroupEnd)           \
    X(ncclGroupStart)         \
    X(ncclRecv)               \
    X(ncclReduce)             \
    X(ncclReduceScatter)      \
    X(ncclSend)

#define SYM_STR_(name) #name
#define SYM_STR(name)  SYM_STR_(name) /* the symbol, after the headers' macros */
#define SYM_PTR(name)  __typeof__(name) *name;

/* Written once by load() (under pthread_once), read-only after. */
static struct {
    CUDART_FUNCS(SYM_PTR)
} cudart;
static struct {
    NCCL_FUNCS(SYM_PTR)
} libnccl;

/* The soname the headers were built against: libcudart.so.13 (CUDA 12 on:
 * the major version; CUDA 11: 11.0), libnccl.so.2. */
#define CUDART_MAJOR (CUDART_VERSION / 1000)

typedef struct sym {
    const char *name;
    size_t offset; /* of the pointer in its struct */
} sym_t;

#define SYM_ENTRY_CUDART(name) {SYM_STR(name), offsetof(__typeof__(cudart), name)},
#define SYM_ENTRY_NCCL(name)   {SYM_STR(name), offsetof(__typeof__(libnccl), name)},
static const sym_t cudart_syms[] = {CUDART_FUNCS(SYM_ENTRY_CUDART)};
static const sym_t nccl_syms[] = {NCCL_FUNCS(SYM_ENTRY_NCCL)};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int cudart_loaded, nccl_loaded;
static char cudart_why[512], nccl_why[512]; /* why a library is not loaded */

/* Opens one library: $env when set (a name or a path), else soname from the
 * loader's search path, else soname in dir (where CMake found it at build
 * time, for a toolkit outside that path). Fills the pointers at base from
 * syms; 0, or -1 with why (the first dlerror: the one that names the
 * library the user has to provide). */
static int lib_open(const char *env, const char *soname, const char *dir, const sym_t *syms,
                    size_t nsyms, void *base, char *why, size_t len)
{
    const char *want = getenv(env);
    void *h = NULL;
    if (want != NULL && want[0] != '\0') {
        if ((h = dlopen(want, RTLD_NOW | RTLD_LOCAL)) == NULL) {
            snprintf(why, len, "%s (from %s)", dlerror(), env);
            return -1;
        }
    } else if ((h = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) == NULL) {
        snprintf(why, len, "%s", dlerror());
        if (dir != NULL && dir[0] != '\0') {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, soname);
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
        if (h == NULL)
            return -1;
    }
    for (size_t i = 0; i < nsyms; i++) {
        dlerror();
        void *fn = dlsym(h, syms[i].name);
        if (fn == NULL) {
            const char *e = dlerror();
            snprintf(why, len, "%s: no %s", e != NULL ? e : soname, syms[i].name);
            dlclose(h);
            return -1;
        }
        /* POSIX lets dlsym's void * become a function pointer */
        memcpy((char *)base + syms[i].offset, &fn, sizeof fn);
    }
    return 0; /* h stays open for the life of the process */
}

#ifndef MSR_CUDART_DIR
#define MSR_CUDART_DIR ""
#endif
#ifndef MSR_NCCL_DIR
#define MSR_NCCL_DIR ""
#endif

static void load(void)
{
    char soname[64];
    char why[400]; /* fits in cudart_why with its prefix */
    if (CUDART_MAJOR >= 12)
        snprintf(soname, sizeof soname, "libcudart.so.%d", CUDART_MAJOR);
    else
        snprintf(soname, sizeof soname, "libcudart.so.%d.0", CUDART_MAJOR);
    if (lib_open("MSR_CUDART_LIBRARY", soname, MSR_CUDART_DIR, cudart_syms,
                 sizeof cudart_syms / sizeof cudart_syms[0], &cudart, why, sizeof why) != 0) {
        snprintf(cudart_why, sizeof cudart_why, "CUDA runtime not available: %s", why);
        return; /* no table: NCCL would be of no use */
    }
    cudart_loaded = 1;
    snprintf(soname, sizeof soname, "libnccl.so.%d", NCCL_MAJOR);
    if (lib_open("MSR_NCCL_LIBRARY", soname, MSR_NCCL_DIR, nccl_syms,
                 sizeof nccl_syms / sizeof nccl_syms[0], &libnccl, why, sizeof why) == 0)
        nccl_loaded = 1;
    else
        snprintf(nccl_why, sizeof nccl_why, "NCCL not available: %s", why);
}

/* NCCL is optional (the staged communicators need only the CUDA runtime):
 * the two calls that make NCCL state from nothing, unique_id and comm_init,
 * check it; every other NCCL call takes a communicator only they make. */
static msr_status_t nccl_missing(const char *call)
{
    msr_err_set("nccl: %s: %s", call, nccl_why);
    return MSR_ERR_UNSUPPORTED;
}

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
        msr_err_set("cuda: %s: %s (%s)", call, cudart.cudaGetErrorString(e),
                    cudart.cudaGetErrorName(e));
        (void)cudart.cudaGetLastError(); /* clears it (unless sticky) for the next call */
    }
    return st;
}

/* Maps an NCCL result, with NCCL's last message on failure. */
static msr_status_t nc_(ncclResult_t r, ncclComm_t comm, const char *call)
{
    msr_status_t st = msr_gpu_nccl_status(r);
    if (st < 0) {
        const char *last = libnccl.ncclGetLastError(comm);
        msr_err_set("nccl: %s: %s%s%s", call, libnccl.ncclGetErrorString(r),
                    last && *last ? ": " : "", last ? last : "");
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
    return e == cudaErrorInsufficientDriver &&
           cudart.cudaDriverGetVersion(&version) == cudaSuccess && version == 0;
}

/* MSR_ERR_UNSUPPORTED only where the machine has no GPU; a driver too old
 * for the runtime is MSR_ERR_BACKEND, so a GPU test fails on it instead of
 * skipping (select_device refuses both alike). */
static msr_status_t device_count(const msr_gpu_api_t *g, int *count_p)
{
    (void)g;
    int n = 0;
    cudaError_t e = cudart.cudaGetDeviceCount(&n);
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
    return cu(cudart.cudaSetDevice(device), "cudaSetDevice");
}

static msr_status_t device_uuid(const msr_gpu_api_t *g, int device,
                                unsigned char uuid[MSR_GPU_UUID_BYTES])
{
    (void)g;
    struct cudaDeviceProp prop;
    msr_status_t st = cu(cudart.cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    if (st == MSR_OK)
        memcpy(uuid, prop.uuid.bytes, MSR_GPU_UUID_BYTES);
    return st;
}

/* A blocking stream (cudaStreamDefault), not cudaStreamNonBlocking: it waits
 * for the legacy default stream, so the input a caller wrote there with
 * cudaMemcpy or cudaMemset (both asynchronous on the device) is in place
 * before a collective on the communicator's own stream reads it. */
static msr_status_t stream_create(const msr_gpu_api_t *g, void **stream_p)
{
    (void)g;
    cudaStream_t s = NULL;
    msr_status_t st =
        cu(cudart.cudaStreamCreateWithFlags(&s, cudaStreamDefault), "cudaStreamCreateWithFlags");
    if (st == MSR_OK)
        *stream_p = s;
    return st;
}

static void stream_destroy(const msr_gpu_api_t *g, void *stream)
{
    (void)g;
    if (stream)
        cu(cudart.cudaStreamDestroy(stream), "cudaStreamDestroy");
}

static msr_status_t event_create(const msr_gpu_api_t *g, void **event_p)
{
    (void)g;
    cudaEvent_t e = NULL;
    msr_status_t st =
        cu(cudart.cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    if (st == MSR_OK)
        *event_p = e;
    return st;
}

static void event_destroy(const msr_gpu_api_t *g, void *event)
{
    (void)g;
    if (event)
        cu(cudart.cudaEventDestroy(event), "cudaEventDestroy");
}

static msr_status_t event_record(const msr_gpu_api_t *g, void *event, void *stream)
{
    (void)g;
    return cu(cudart.cudaEventRecord(event, stream), "cudaEventRecord");
}

static msr_status_t event_query(const msr_gpu_api_t *g, void *event)
{
    (void)g;
    return cu(cudart.cudaEventQuery(event), "cudaEventQuery");
}

static msr_status_t stream_wait_event(const msr_gpu_api_t *g, void *stream, void *event)
{
    (void)g;
    return cu(cudart.cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent");
}

static msr_status_t host_alloc(const msr_gpu_api_t *g, size_t bytes, void **p)
{
    (void)g;
    return cu(cudart.cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocPortable), "cudaHostAlloc");
}

static void host_free(const msr_gpu_api_t *g, void *p)
{
    (void)g;
    if (p)
        cu(cudart.cudaFreeHost(p), "cudaFreeHost");
}

static msr_status_t device_alloc(const msr_gpu_api_t *g, size_t bytes, void **p)
{
    (void)g;
    return cu(cudart.cudaMalloc(p, bytes ? bytes : 1), "cudaMalloc");
}

static void device_free(const msr_gpu_api_t *g, void *p)
{
    (void)g;
    if (p)
        cu(cudart.cudaFree(p), "cudaFree");
}

static msr_status_t copy_async(const msr_gpu_api_t *g, void *dst, const void *src, size_t bytes,
                               msr_gpu_copy_t kind, void *stream)
{
    (void)g;
    enum cudaMemcpyKind k = kind == MSR_GPU_D2H   ? cudaMemcpyDeviceToHost
                            : kind == MSR_GPU_H2D ? cudaMemcpyHostToDevice
                                                  : cudaMemcpyDeviceToDevice;
    return cu(cudart.cudaMemcpyAsync(dst, src, bytes, k, stream), "cudaMemcpyAsync");
}

static msr_status_t memset_async(const msr_gpu_api_t *g, void *p, int byte, size_t bytes,
                                 void *stream)
{
    (void)g;
    return cu(cudart.cudaMemsetAsync(p, byte, bytes, stream), "cudaMemsetAsync");
}

static msr_status_t stream_sync(const msr_gpu_api_t *g, void *stream)
{
    (void)g;
    return cu(cudart.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

static msr_status_t event_sync(const msr_gpu_api_t *g, void *event)
{
    (void)g;
    return cu(cudart.cudaEventSynchronize(event), "cudaEventSynchronize");
}

static msr_status_t unique_id(const msr_gpu_api_t *g, unsigned char id[MSR_GPU_ID_BYTES])
{
    (void)g;
    if (!nccl_loaded)
        return nccl_missing("ncclGetUniqueId");
    ncclUniqueId u;
    _Static_assert(sizeof u == MSR_GPU_ID_BYTES, "ncclUniqueId is 128 bytes");
    msr_status_t st = nc_(libnccl.ncclGetUniqueId(&u), NULL, "ncclGetUniqueId");
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
    if (!nccl_loaded)
        return nccl_missing("ncclCommInitRankConfig");
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclConfig_t c = config();
    ncclComm_t comm = NULL;
    ncclResult_t r = libnccl.ncclCommInitRankConfig(&comm, nranks, u, rank, &c);
    msr_status_t st = nc_(r, comm, "ncclCommInitRankConfig");
    if (st == MSR_OK || st == MSR_IN_PROGRESS)
        *nc_p = comm;
    else if (comm != NULL)
        libnccl.ncclCommAbort(comm);
    return st;
}

static msr_status_t comm_split(const msr_gpu_api_t *g, void *nc, int color, int key, void **newnc_p)
{
    (void)g;
    ncclConfig_t c = config();
    /* newnc_p itself, not a local: a non-blocking split stores the new
     * communicator there from NCCL's thread once it is done, after this
     * returns (a local here was written after its frame was gone, and the
     * caller got NULL) */
    ncclResult_t r = libnccl.ncclCommSplit(nc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                                           (ncclComm_t *)newnc_p, &c);
    return nc_(r, nc, "ncclCommSplit");
}

static msr_status_t comm_async_error(const msr_gpu_api_t *g, void *nc)
{
    (void)g;
    ncclResult_t async = ncclSuccess;
    msr_status_t st = nc_(libnccl.ncclCommGetAsyncError(nc, &async), nc, "ncclCommGetAsyncError");
    if (st != MSR_OK)
        return st;
    return nc_(async, nc, "asynchronous error");
}

static msr_status_t comm_user_rank(const msr_gpu_api_t *g, void *nc, int *rank_p)
{
    (void)g;
    return nc_(libnccl.ncclCommUserRank(nc, rank_p), nc, "ncclCommUserRank");
}

static msr_status_t comm_finalize(const msr_gpu_api_t *g, void *nc)
{
    (void)g;
    return nc_(libnccl.ncclCommFinalize(nc), nc, "ncclCommFinalize");
}

static msr_status_t comm_destroy(const msr_gpu_api_t *g, void *nc)
{
    (void)g;
    return nc_(libnccl.ncclCommDestroy(nc), nc, "ncclCommDestroy");
}

static msr_status_t comm_abort(const msr_gpu_api_t *g, void *nc)
{
    (void)g;
    return nc_(libnccl.ncclCommAbort(nc), NULL, "ncclCommAbort");
}

static msr_status_t group_start(const msr_gpu_api_t *g)
{
    (void)g;
    return nc_(libnccl.ncclGroupStart(), NULL, "ncclGroupStart");
}

static msr_status_t group_end(const msr_gpu_api_t *g)
{
    (void)g;
    return nc_(libnccl.ncclGroupEnd(), NULL, "ncclGroupEnd");
}

#define DT(d) ((ncclDataType_t)msr_gpu_nccl_dtype(d))
#define OP(o) ((ncclRedOp_t)msr_gpu_nccl_op(o))

static msr_status_t allreduce(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                              msr_dtype_t dtype, msr_op_t op, void *nc, void *stream)
{
    (void)g;
    return nc_(libnccl.ncclAllReduce(send, recv, count, DT(dtype), OP(op), nc, stream), nc,
               "ncclAllReduce");
}

static msr_status_t reduce_scatter(const msr_gpu_api_t *g, const void *send, void *recv,
                                   size_t recvcount, msr_dtype_t dtype, msr_op_t op, void *nc,
                                   void *stream)
{
    (void)g;
    return nc_(libnccl.ncclReduceScatter(send, recv, recvcount, DT(dtype), OP(op), nc, stream), nc,
               "ncclReduceScatter");
}

static msr_status_t allgather(const msr_gpu_api_t *g, const void *send, void *recv,
                              size_t sendcount, msr_dtype_t dtype, void *nc, void *stream)
{
    (void)g;
    return nc_(libnccl.ncclAllGather(send, recv, sendcount, DT(dtype), nc, stream), nc,
               "ncclAllGather");
}

static msr_status_t broadcast(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                              msr_dtype_t dtype, int root, void *nc, void *stream)
{
    (void)g;
    return nc_(libnccl.ncclBroadcast(send, recv, count, DT(dtype), root, nc, stream), nc,
               "ncclBroadcast");
}

static msr_status_t reduce(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                           msr_dtype_t dtype, msr_op_t op, int root, void *nc, void *stream)
{
    (void)g;
    return nc_(libnccl.ncclReduce(send, recv, count, DT(dtype), OP(op), root, nc, stream), nc,
               "ncclReduce");
}

static msr_status_t alltoall(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                             msr_dtype_t dtype, void *nc, void *stream)
{
    (void)g;
    return nc_(libnccl.ncclAlltoAll(send, recv, count, DT(dtype), nc, stream), nc, "ncclAlltoAll");
}

static msr_status_t send_(const msr_gpu_api_t *g, const void *buf, size_t count, msr_dtype_t dtype,
                          int peer, void *nc, void *stream)
{
    (void)g;
    return nc_(libnccl.ncclSend(buf, count, DT(dtype), peer, nc, stream), nc, "ncclSend");
}

static msr_status_t recv_(const msr_gpu_api_t *g, void *buf, size_t count, msr_dtype_t dtype,
                          int peer, void *nc, void *stream)
{
    (void)g;
    return nc_(libnccl.ncclRecv(buf, count, DT(dtype), peer, nc, stream), nc, "ncclRecv");
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
    .memset_async = memset_async,
    .stream_sync = stream_sync,
    .event_sync = event_sync,
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
    pthread_once(&load_once, load);
    return cudart_loaded ? &cuda_api : NULL;
}

const char *msr_gpu_api_why(void)
{
    pthread_once(&load_once, load);
    return cudart_loaded ? "no GPU table given" : cudart_why;
}
