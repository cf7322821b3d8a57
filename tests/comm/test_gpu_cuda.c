/* The table of real CUDA and NCCL calls (CUDA builds only), on this machine
 * whatever it has: every result code of nccl.h and the CUDA errors that
 * matter mapped to the right status, dtypes and ops to NCCL's, every call
 * present, and what the runtime answers without a device (a clear refusal,
 * not a crash); the libraries loaded only when the table is asked for, and
 * a missing one named. Needs no GPU. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl/gpu_api.h"
#include "tests/runner.h"

static void test_nccl_status(void)
{
    MSR_CHECK_STATUS(msr_gpu_nccl_status(ncclSuccess), MSR_OK);
    MSR_CHECK_STATUS(msr_gpu_nccl_status(ncclInProgress), MSR_IN_PROGRESS);
    MSR_CHECK_STATUS(msr_gpu_nccl_status(ncclRemoteError), MSR_ERR_PEER_LOST);
    MSR_CHECK_STATUS(msr_gpu_nccl_status(ncclInvalidArgument), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gpu_nccl_status(ncclInvalidUsage), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gpu_nccl_status(ncclSystemError), MSR_ERR_BACKEND);
    MSR_CHECK_STATUS(msr_gpu_nccl_status(ncclInternalError), MSR_ERR_BACKEND);
    MSR_CHECK_STATUS(msr_gpu_nccl_status(ncclUnhandledCudaError), MSR_ERR_BACKEND);
    MSR_CHECK_STATUS(msr_gpu_nccl_status(ncclNumResults), MSR_ERR_BACKEND);
    MSR_CHECK_STATUS(msr_gpu_nccl_status(12345), MSR_ERR_BACKEND);
    /* every code nccl.h knows maps to something, and only success to OK */
    for (int r = 0; r < ncclNumResults; r++) {
        msr_status_t st = msr_gpu_nccl_status(r);
        MSR_CHECK((st == MSR_OK) == (r == ncclSuccess));
        MSR_CHECK((st == MSR_IN_PROGRESS) == (r == ncclInProgress));
    }
}

static void test_cuda_status(void)
{
    MSR_CHECK_STATUS(msr_gpu_cuda_status(cudaSuccess), MSR_OK);
    MSR_CHECK_STATUS(msr_gpu_cuda_status(cudaErrorNotReady), MSR_IN_PROGRESS);
    MSR_CHECK_STATUS(msr_gpu_cuda_status(cudaErrorMemoryAllocation), MSR_ERR_NO_MEMORY);
    MSR_CHECK_STATUS(msr_gpu_cuda_status(cudaErrorNoDevice), MSR_ERR_UNSUPPORTED);
    MSR_CHECK_STATUS(msr_gpu_cuda_status(cudaErrorInsufficientDriver), MSR_ERR_UNSUPPORTED);
    MSR_CHECK_STATUS(msr_gpu_cuda_status(cudaErrorInvalidValue), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_gpu_cuda_status(cudaErrorLaunchFailure), MSR_ERR_BACKEND);
    MSR_CHECK_STATUS(msr_gpu_cuda_status(cudaErrorIllegalAddress), MSR_ERR_BACKEND);
}

static void test_types(void)
{
    MSR_CHECK_EQ(msr_gpu_nccl_dtype(MSR_DTYPE_F32), ncclFloat32);
    MSR_CHECK_EQ(msr_gpu_nccl_dtype(MSR_DTYPE_F64), ncclFloat64);
    MSR_CHECK_EQ(msr_gpu_nccl_dtype(MSR_DTYPE_F16), ncclFloat16);
    MSR_CHECK_EQ(msr_gpu_nccl_dtype(MSR_DTYPE_BF16), ncclBfloat16);
    MSR_CHECK_EQ(msr_gpu_nccl_dtype(MSR_DTYPE_I32), ncclInt32);
    MSR_CHECK_EQ(msr_gpu_nccl_dtype(MSR_DTYPE_I64), ncclInt64);
    MSR_CHECK_EQ(msr_gpu_nccl_dtype(MSR_DTYPE_U8), ncclUint8);
    MSR_CHECK_EQ(msr_gpu_nccl_dtype((msr_dtype_t)MSR_DTYPE_COUNT), -1);
    MSR_CHECK_EQ(msr_gpu_nccl_op(MSR_OP_SUM), ncclSum);
    MSR_CHECK_EQ(msr_gpu_nccl_op(MSR_OP_PROD), ncclProd);
    MSR_CHECK_EQ(msr_gpu_nccl_op(MSR_OP_MIN), ncclMin);
    MSR_CHECK_EQ(msr_gpu_nccl_op(MSR_OP_MAX), ncclMax);
    MSR_CHECK_EQ(msr_gpu_nccl_op(MSR_OP_AVG), ncclAvg);
    MSR_CHECK_EQ(msr_gpu_nccl_op((msr_op_t)MSR_OP_COUNT), -1);
    /* the element sizes agree */
    MSR_CHECK_EQ(sizeof(ncclUniqueId), MSR_GPU_ID_BYTES);
}

static void test_table(void)
{
    const msr_gpu_api_t *g = msr_gpu_api_cuda();
    MSR_CHECK(g != NULL && g->data == NULL);
    /* every slot filled: the table is a run of function pointers after name
     * and data */
    const msr_gpu_api_t zero = {0};
    size_t from = offsetof(msr_gpu_api_t, device_count);
    for (size_t off = from; off + sizeof(void (*)(void)) <= sizeof *g;
         off += sizeof(void (*)(void))) {
        void (*fp)(void), (*zp)(void);
        memcpy(&fp, (const char *)g + off, sizeof fp);
        memcpy(&zp, (const char *)&zero + off, sizeof zp);
        MSR_CHECK_MSG(memcmp(&fp, &zp, sizeof fp) != 0, "slot at offset %zu is empty", off);
    }
}

/* What the runtime says on this machine: a device count, or where it has
 * no GPU (no device, no driver installed) MSR_ERR_UNSUPPORTED naming the
 * call. Any other CUDA error (a driver too old for the runtime) fails. */
static void test_runtime_here(void)
{
    const msr_gpu_api_t *g = msr_gpu_api_cuda();
    int n = -1;
    msr_status_t st = g->device_count(g, &n);
    if (st == MSR_OK) {
        MSR_CHECK(n >= 0);
        printf("cuda: %d device(s) here\n", n);
    } else {
        MSR_CHECK_MSG(st == MSR_ERR_UNSUPPORTED, "got %s: %s", msr_status_name(st),
                      msr_last_error());
        MSR_CHECK(n == -1);
        MSR_CHECK(strstr(msr_last_error(), "cudaGetDeviceCount") != NULL);
        printf("cuda: no device here: %s\n", msr_last_error());
    }
}

/* ncclGetUniqueId needs no GPU (it opens the bootstrap socket): two ids
 * differ. Where NCCL cannot make one, it says why. */
static void test_unique_id(void)
{
    const msr_gpu_api_t *g = msr_gpu_api_cuda();
    unsigned char a[MSR_GPU_ID_BYTES], b[MSR_GPU_ID_BYTES], zero[MSR_GPU_ID_BYTES] = {0};
    msr_status_t st = g->unique_id(g, a);
    if (st != MSR_OK) {
        MSR_CHECK(strstr(msr_last_error(), "ncclGetUniqueId") != NULL);
        printf("nccl: no unique id here: %s\n", msr_last_error());
        return;
    }
    MSR_CHECK_OK(g->unique_id(g, b));
    MSR_CHECK(memcmp(a, zero, sizeof a) != 0);
    MSR_CHECK(memcmp(a, b, sizeof a) != 0);
}

/* Whether this process maps a file whose name contains what. */
static int mapped(const char *what)
{
    FILE *f = fopen("/proc/self/maps", "r");
    MSR_CHECK(f != NULL);
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

/* Nothing maps the CUDA runtime or NCCL until the table is asked for (the
 * program links no CUDA library); then both are loaded. */
static void test_loaded_on_demand(void)
{
    MSR_CHECK_MSG(!mapped("libcudart.so"), "libcudart is mapped before it is asked for");
    MSR_CHECK_MSG(!mapped("libnccl.so"), "libnccl is mapped before it is asked for");
    MSR_CHECK(msr_gpu_api_cuda() != NULL);
    MSR_CHECK(mapped("libcudart.so"));
    MSR_CHECK(mapped("libnccl.so"));
}

/* NCCL that cannot be loaded: the table still works (the staged
 * communicators need only the CUDA runtime); the calls that make NCCL state
 * refuse, naming the library and the loader's reason. */
static void test_nccl_missing(void)
{
    setenv("MSR_NCCL_LIBRARY", "/no/such/libnccl.so.2", 1);
    const msr_gpu_api_t *g = msr_gpu_api_cuda();
    MSR_CHECK(g != NULL);
    unsigned char id[MSR_GPU_ID_BYTES];
    MSR_CHECK_STATUS(g->unique_id(g, id), MSR_ERR_UNSUPPORTED);
    MSR_CHECK_MSG(strstr(msr_last_error(), "NCCL not available: /no/such/libnccl.so.2: cannot "
                                           "open shared object file") != NULL,
                  "got '%s'", msr_last_error());
    void *nc = NULL;
    MSR_CHECK_STATUS(g->comm_init(g, &nc, 2, id, 0), MSR_ERR_UNSUPPORTED);
    MSR_CHECK(nc == NULL);
    MSR_CHECK(strstr(msr_last_error(), "ncclCommInitRankConfig: NCCL not available") != NULL);
    MSR_CHECK(!mapped("libnccl.so"));
}

/* A CUDA runtime that cannot be loaded: no table, and the public calls say
 * why instead of "built without CUDA". */
static void test_cudart_missing(void)
{
    setenv("MSR_CUDART_LIBRARY", "/no/such/libcudart.so.13", 1);
    MSR_CHECK(msr_gpu_api_cuda() == NULL);
    MSR_CHECK(strstr(msr_gpu_api_why(), "CUDA runtime not available: /no/such/libcudart.so.13: "
                                        "cannot open shared object file") != NULL);
    int dev = -1;
    /* any non-NULL context: the call stops at the missing table */
    MSR_CHECK_STATUS(msr_gpu_select((msr_ctx_t *)&dev, &dev), MSR_ERR_UNSUPPORTED);
    MSR_CHECK_EQ(dev, -1);
    MSR_CHECK(strstr(msr_last_error(), "msr_gpu_select: CUDA runtime not available") != NULL);
    MSR_CHECK(!mapped("libnccl.so"));
}

static const msr_test_t tests[] = {
    {"nccl_status", test_nccl_status, 10},
    {"cuda_status", test_cuda_status, 10},
    {"types", test_types, 10},
    {"table", test_table, 10},
    {"runtime_here", test_runtime_here, 60},
    {"unique_id", test_unique_id, 60},
    {"loaded_on_demand", test_loaded_on_demand, 60},
    {"nccl_missing", test_nccl_missing, 60},
    {"cudart_missing", test_cudart_missing, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
