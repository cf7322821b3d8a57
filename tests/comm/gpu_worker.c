/* The worker of the device communicators' tests on a real GPU, started by
 * the real msrun (tests/comm/run_gpu.sh), through the public API only.
 * `gpu_worker MODE`:
 *   probe [N]  (not under msrun) exits 0 when this machine has at least N
 *              CUDA devices (default 1), else prints why and exits 77
 *   device     msr_comm_device_world, then every collective on device
 *              buffers (cudaMalloc) against the host world (UCX) on the same
 *              inputs: in place and not, every dtype and op, blocking and
 *              not, on the communicator's stream and on the caller's, with
 *              msr_comm_wait_stream; p2p, split, dup. The backend must be
 *              "nccl" when every local rank has a GPU of its own and
 *              "staged" when they share (more local ranks than GPUs).
 *              Results: bit for bit, except NCCL's avg of floats (scaled
 *              before summing), within a few units in the last place.
 * Rank 0 prints "ok MODE" at the end; a failed check prints the case and
 * exits 1. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "msrun/msrun.h"
#include "tests/worker_fail.h"

static long g_checks;
static int g_nccl; /* the device communicator under test is "nccl" */

WORKER_FAIL("gpu_worker", exit)

#define CU(expr)                                           \
    do {                                                   \
        cudaError_t e_ = (expr);                           \
        if (e_ != cudaSuccess)                             \
            fail("%s: %s", #expr, cudaGetErrorString(e_)); \
    } while (0)

#define CHECK(cond)                          \
    do {                                     \
        if (!(cond))                         \
            fail("check failed: %s", #cond); \
        g_checks++;                          \
    } while (0)

static void setcase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void setcase(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_case, sizeof g_case, fmt, ap);
    va_end(ap);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        fail("out of memory for %zu bytes", n);
    return p;
}

/* device memory holding a copy of host (or garbage when host is NULL) */
static void *dev(const void *host, size_t bytes)
{
    void *d = NULL;
    CU(cudaMalloc(&d, bytes ? bytes : 1));
    if (host && bytes)
        CU(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    else if (bytes)
        CU(cudaMemset(d, 0xee, bytes));
    return d;
}

static void back(void *host, const void *d, size_t bytes)
{
    if (bytes)
        CU(cudaMemcpy(host, d, bytes, cudaMemcpyDeviceToHost));
}

static void fill(msr_dtype_t dt, void *p, size_t n, int rank, int salt, msr_op_t op)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1) + (uint64_t)salt * 7919u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int v = op == MSR_OP_PROD ? (int)(x % 3) - 1 + ((x >> 8) % 2 ? 2 : 0) : (int)(x % 11) - 5;
        if (v == 0 && op == MSR_OP_PROD)
            v = 1;
        switch (dt) {
        case MSR_DTYPE_F32:
            ((float *)p)[i] = (float)v;
            break;
        case MSR_DTYPE_F64:
            ((double *)p)[i] = v;
            break;
        case MSR_DTYPE_F16: {
            _Float16 h = (_Float16)(float)v;
            memcpy((uint16_t *)p + i, &h, 2);
            break;
        }
        case MSR_DTYPE_BF16: {
            float g = (float)v;
            uint32_t u;
            memcpy(&u, &g, 4);
            ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
            break;
        }
        case MSR_DTYPE_I32:
            ((int32_t *)p)[i] = v;
            break;
        case MSR_DTYPE_I64:
            ((int64_t *)p)[i] = v;
            break;
        case MSR_DTYPE_U8:
            ((uint8_t *)p)[i] = (uint8_t)(v + 5);
            break;
        }
    }
}

static double as_double(msr_dtype_t dt, const void *p, size_t i)
{
    switch (dt) {
    case MSR_DTYPE_F32:
        return ((const float *)p)[i];
    case MSR_DTYPE_F64:
        return ((const double *)p)[i];
    case MSR_DTYPE_F16: {
        _Float16 h;
        memcpy(&h, (const uint16_t *)p + i, 2);
        return (double)h;
    }
    case MSR_DTYPE_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default:
        return 0;
    }
}

/* Bit for bit; NCCL's float avg within a tolerance of the type. */
static void same(msr_dtype_t dt, msr_op_t op, const void *got, const void *want, size_t count,
                 const char *what)
{
    size_t es = msr_dtype_size(dt);
    g_checks++;
    int loose = g_nccl && op == MSR_OP_AVG && dt != MSR_DTYPE_I32 && dt != MSR_DTYPE_I64 &&
                dt != MSR_DTYPE_U8;
    for (size_t i = 0; i < count; i++) {
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) == 0)
            continue;
        if (loose) {
            double g = as_double(dt, got, i), w = as_double(dt, want, i);
            double tol = es == 2 ? 1e-2 : (es == 4 ? 1e-6 : 1e-12);
            if (fabs(g - w) <= tol * (fabs(w) + 1))
                continue;
            fail("%s: element %zu of %zu is %g, the host communicator gave %g", what, i, count, g,
                 w);
        }
        unsigned long long gv = 0, wv = 0;
        memcpy(&gv, (const char *)got + i * es, es);
        memcpy(&wv, (const char *)want + i * es, es);
        fail("%s: element %zu of %zu is 0x%llx, the host communicator gave 0x%llx", what, i, count,
             gv, wv);
    }
}

typedef struct pair {
    msr_comm_t *h, *d;
    int n, me;
} pair_t;

static void vs_allreduce(pair_t *p, msr_dtype_t dt, msr_op_t op, size_t c, int salt)
{
    size_t b = c * msr_dtype_size(dt);
    unsigned char *in = xmalloc(b), *ho = xmalloc(b), *got = xmalloc(b);
    fill(dt, in, c, p->me, salt, op);
    OK(msr_comm_allreduce(p->h, in, ho, c, dt, op));
    void *din = dev(in, b), *dout = dev(NULL, b);
    OK(msr_comm_allreduce(p->d, din, dout, c, dt, op));
    back(got, dout, b);
    same(dt, op, got, ho, c, "allreduce");
    OK(msr_comm_allreduce(p->d, MSR_IN_PLACE, din, c, dt, op));
    back(got, din, b);
    same(dt, op, got, ho, c, "allreduce in place");
    cudaFree(din);
    cudaFree(dout);
    free(in);
    free(ho);
    free(got);
}

static void vs_reduce_scatter(pair_t *p, msr_dtype_t dt, size_t c, int salt)
{
    size_t es = msr_dtype_size(dt), b = c * es, all = (size_t)p->n * b;
    unsigned char *in = xmalloc(all), *ho = xmalloc(b), *got = xmalloc(b);
    fill(dt, in, c * (size_t)p->n, p->me, salt, MSR_OP_SUM);
    OK(msr_comm_reduce_scatter(p->h, in, ho, c, dt, MSR_OP_SUM));
    void *din = dev(in, all), *dout = dev(NULL, b);
    OK(msr_comm_reduce_scatter(p->d, din, dout, c, dt, MSR_OP_SUM));
    back(got, dout, b);
    same(dt, MSR_OP_SUM, got, ho, c, "reduce_scatter");
    OK(msr_comm_reduce_scatter(p->d, din, (char *)din + (size_t)p->me * b, c, dt, MSR_OP_SUM));
    back(got, (char *)din + (size_t)p->me * b, b);
    same(dt, MSR_OP_SUM, got, ho, c, "reduce_scatter in place");
    cudaFree(din);
    cudaFree(dout);
    free(in);
    free(ho);
    free(got);
}

static void vs_allgather(pair_t *p, msr_dtype_t dt, size_t c, int salt)
{
    size_t b = c * msr_dtype_size(dt), all = (size_t)p->n * b;
    unsigned char *in = xmalloc(b), *ho = xmalloc(all), *got = xmalloc(all);
    fill(dt, in, c, p->me, salt, MSR_OP_SUM);
    OK(msr_comm_allgather(p->h, in, ho, c, dt));
    void *din = dev(in, b), *dout = dev(NULL, all);
    OK(msr_comm_allgather(p->d, din, dout, c, dt));
    back(got, dout, all);
    same(dt, MSR_OP_SUM, got, ho, c * (size_t)p->n, "allgather");
    CU(cudaMemset(dout, 0, all));
    if (b)
        CU(cudaMemcpy((char *)dout + (size_t)p->me * b, in, b, cudaMemcpyHostToDevice));
    OK(msr_comm_allgather(p->d, MSR_IN_PLACE, dout, c, dt));
    back(got, dout, all);
    same(dt, MSR_OP_SUM, got, ho, c * (size_t)p->n, "allgather in place");
    cudaFree(din);
    cudaFree(dout);
    free(in);
    free(ho);
    free(got);
}

static void vs_rooted(pair_t *p, msr_dtype_t dt, size_t c, int root)
{
    size_t b = c * msr_dtype_size(dt);
    unsigned char *in = xmalloc(b), *ho = xmalloc(b), *got = xmalloc(b);
    fill(dt, in, c, p->me, root, MSR_OP_SUM);
    memcpy(ho, in, b);
    OK(msr_comm_broadcast(p->h, ho, c, dt, root));
    void *d = dev(p->me == root ? in : NULL, b);
    OK(msr_comm_broadcast(p->d, d, c, dt, root));
    back(got, d, b);
    same(dt, MSR_OP_SUM, got, ho, c, "broadcast");
    OK(msr_comm_reduce(p->h, in, ho, c, dt, MSR_OP_SUM, root));
    void *din = dev(in, b);
    OK(msr_comm_reduce(p->d, din, d, c, dt, MSR_OP_SUM, root));
    if (p->me == root) {
        back(got, d, b);
        same(dt, MSR_OP_SUM, got, ho, c, "reduce");
    }
    cudaFree(d);
    cudaFree(din);
    free(in);
    free(ho);
    free(got);
}

static void vs_alltoall(pair_t *p, msr_dtype_t dt, size_t c)
{
    size_t all = (size_t)p->n * c * msr_dtype_size(dt);
    unsigned char *in = xmalloc(all), *ho = xmalloc(all), *got = xmalloc(all);
    fill(dt, in, c * (size_t)p->n, p->me, 5, MSR_OP_SUM);
    OK(msr_comm_alltoall(p->h, in, ho, c, dt));
    void *din = dev(in, all), *dout = dev(NULL, all);
    OK(msr_comm_alltoall(p->d, din, dout, c, dt));
    back(got, dout, all);
    same(dt, MSR_OP_SUM, got, ho, c * (size_t)p->n, "alltoall");
    OK(msr_comm_alltoall(p->d, MSR_IN_PLACE, din, c, dt));
    back(got, din, all);
    same(dt, MSR_OP_SUM, got, ho, c * (size_t)p->n, "alltoall in place");
    cudaFree(din);
    cudaFree(dout);
    free(in);
    free(ho);
    free(got);
}

static void vs_alltoallv(pair_t *p)
{
    int n = p->n;
    uint64_t *v = xmalloc(4 * (size_t)n * sizeof *v), *sc = v, *sd = v + n, *rc = v + 2 * n,
             *rd = v + 3 * n, so = 0, ro = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = (uint64_t)((p->me + j + 1) % 3) * 100;
        rc[j] = (uint64_t)((j + p->me + 1) % 3) * 100;
        sd[j] = so;
        rd[j] = ro;
        so += sc[j] + 1;
        ro += rc[j] + 2;
    }
    float *in = xmalloc(so * 4), *ho = xmalloc(ro * 4), *got = xmalloc(ro * 4);
    fill(MSR_DTYPE_F32, in, so, p->me, 6, MSR_OP_SUM);
    memset(ho, 0, ro * 4);
    OK(msr_comm_alltoallv(p->h, in, sc, sd, ho, rc, rd, MSR_DTYPE_F32));
    void *din = dev(in, so * 4), *dout = dev(NULL, ro * 4);
    CU(cudaMemset(dout, 0, ro * 4));
    OK(msr_comm_alltoallv(p->d, din, sc, sd, dout, rc, rd, MSR_DTYPE_F32));
    back(got, dout, ro * 4);
    same(MSR_DTYPE_F32, MSR_OP_SUM, got, ho, ro, "alltoallv (gaps included)");
    cudaFree(din);
    cudaFree(dout);
    free(in);
    free(ho);
    free(got);
    free(v);
}

static void vs_p2p(pair_t *p)
{
    if (p->n < 2)
        return; /* NCCL: a rank's send to itself waits for its own receive */
    int n = p->n, to = (p->me + 1) % n, from = (p->me + n - 1) % n;
    size_t c = 100000;
    float *out = xmalloc(c * 4), *want = xmalloc(c * 4), *got = xmalloc(c * 4);
    fill(MSR_DTYPE_F32, out, c, p->me, 8, MSR_OP_SUM);
    fill(MSR_DTYPE_F32, want, c, from, 8, MSR_OP_SUM);
    void *dout = dev(out, c * 4), *din = dev(NULL, c * 4);
    msr_comm_req_t *rq[2];
    OK(msr_comm_irecv(p->d, din, c, MSR_DTYPE_F32, from, 0, &rq[0]));
    OK(msr_comm_isend(p->d, dout, c, MSR_DTYPE_F32, to, 0, &rq[1]));
    OK(msr_comm_wait_all(rq, 2));
    back(got, din, c * 4);
    same(MSR_DTYPE_F32, MSR_OP_SUM, got, want, c, "p2p ring");
    cudaFree(dout);
    cudaFree(din);
    free(out);
    free(want);
    free(got);
}

/* Operations in flight on the caller's stream, and a second stream that
 * waits for one of them on the device. */
static void vs_streams(pair_t *p)
{
    enum { K = 4 };
    size_t sizes[K] = {1, 1000, 1 << 20, 77};
    cudaStream_t s, side;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    void *own = msr_comm_stream(p->d);
    CHECK(own != NULL);
    OK(msr_comm_set_stream(p->d, s));
    CHECK(msr_comm_stream(p->d) == (void *)s);
    float *in[K], *ho[K], *got[K];
    void *dio[K];
    msr_comm_req_t *rq[K];
    for (int k = 0; k < K; k++) {
        in[k] = xmalloc(sizes[k] * 4);
        ho[k] = xmalloc(sizes[k] * 4);
        got[k] = xmalloc(sizes[k] * 4);
        fill(MSR_DTYPE_F32, in[k], sizes[k], p->me, 20 + k, MSR_OP_SUM);
        OK(msr_comm_allreduce(p->h, in[k], ho[k], sizes[k], MSR_DTYPE_F32, MSR_OP_SUM));
        dio[k] = dev(in[k], sizes[k] * 4);
    }
    /* s is non-blocking: it does not wait for the legacy default stream,
     * where dev()'s copies may still be landing (the caller orders its own
     * streams) */
    CU(cudaDeviceSynchronize());
    for (int k = 0; k < K; k++)
        OK(msr_comm_iallreduce(p->d, MSR_IN_PLACE, dio[k], sizes[k], MSR_DTYPE_F32, MSR_OP_SUM,
                               &rq[k]));
    /* the side stream reads buffer 2 after the allreduce, on the device */
    float *copy2 = NULL;
    CU(cudaMalloc((void **)&copy2, sizes[2] * 4));
    OK(msr_comm_wait_stream(rq[2], side));
    CU(cudaMemcpyAsync(copy2, dio[2], sizes[2] * 4, cudaMemcpyDeviceToDevice, side));
    CU(cudaStreamSynchronize(side));
    OK(msr_comm_wait_all(rq, K));
    for (int k = 0; k < K; k++) {
        back(got[k], dio[k], sizes[k] * 4);
        same(MSR_DTYPE_F32, MSR_OP_SUM, got[k], ho[k], sizes[k],
             "iallreduce on the caller's stream");
        cudaFree(dio[k]);
        free(in[k]);
        free(got[k]);
        if (k != 2)
            free(ho[k]);
    }
    float *g2 = xmalloc(sizes[2] * 4);
    back(g2, copy2, sizes[2] * 4);
    same(MSR_DTYPE_F32, MSR_OP_SUM, g2, ho[2], sizes[2], "read on a stream after wait_stream");
    free(g2);
    free(ho[2]);
    cudaFree(copy2);
    OK(msr_comm_set_stream(p->d, NULL));
    CHECK(msr_comm_stream(p->d) == own);
    CU(cudaStreamDestroy(s));
    CU(cudaStreamDestroy(side));
}

static const msr_dtype_t all_dtypes[] = {MSR_DTYPE_F32,  MSR_DTYPE_F64, MSR_DTYPE_F16,
                                         MSR_DTYPE_BF16, MSR_DTYPE_I32, MSR_DTYPE_I64,
                                         MSR_DTYPE_U8};

static void battery(pair_t *p, const char *label)
{
    const size_t counts[] = {0, 1, 13, 4099};
    for (size_t t = 0; t < sizeof all_dtypes / sizeof *all_dtypes; t++) {
        msr_dtype_t dt = all_dtypes[t];
        for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
            size_t c = counts[ci];
            for (int op = 0; op < MSR_OP_COUNT; op++) {
                setcase("%s: allreduce %s %s count %zu", label, msr_dtype_name(dt),
                        msr_op_name((msr_op_t)op), c);
                vs_allreduce(p, dt, (msr_op_t)op, c, (int)(t * 10 + ci));
            }
            setcase("%s: reduce_scatter %s count %zu", label, msr_dtype_name(dt), c);
            vs_reduce_scatter(p, dt, c, (int)ci);
            setcase("%s: allgather %s count %zu", label, msr_dtype_name(dt), c);
            vs_allgather(p, dt, c, (int)ci);
            setcase("%s: broadcast/reduce %s count %zu", label, msr_dtype_name(dt), c);
            vs_rooted(p, dt, c, (int)(ci % (size_t)p->n));
            setcase("%s: alltoall %s count %zu", label, msr_dtype_name(dt), c);
            vs_alltoall(p, dt, c);
        }
    }
    setcase("%s: large", label);
    vs_allreduce(p, MSR_DTYPE_F32, MSR_OP_SUM, (1 << 22) + 1, 3);
    vs_allreduce(p, MSR_DTYPE_BF16, MSR_OP_SUM, (1 << 22) + 1, 4);
    vs_reduce_scatter(p, MSR_DTYPE_F32, 1 << 20, 5);
    vs_allgather(p, MSR_DTYPE_F16, 1 << 20, 6);
    setcase("%s: alltoallv", label);
    vs_alltoallv(p);
    setcase("%s: barrier", label);
    OK(msr_comm_barrier(p->d));
    setcase("%s: p2p", label);
    vs_p2p(p);
    setcase("%s: streams", label);
    vs_streams(p);
}

/* Exits 77 (skipped) only where the machine has no GPU (no device, no
 * driver installed: the runtime answers cudaErrorInsufficientDriver and the
 * driver's version is 0) or fewer than the test needs; any other CUDA error
 * (a driver too old for the runtime) fails. */
static int probe(int want)
{
    int n = 0, version = -1;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || (e == cudaErrorInsufficientDriver &&
                                   cudaDriverGetVersion(&version) == cudaSuccess && version == 0)) {
        printf("no CUDA device here: cudaGetDeviceCount: %s\n", cudaGetErrorString(e));
        return 77;
    }
    if (e != cudaSuccess) {
        printf("CUDA is unusable here: cudaGetDeviceCount: %s: %s\n", cudaGetErrorName(e),
               cudaGetErrorString(e));
        return 1;
    }
    if (n < want) {
        printf("%d CUDA device(s) here, the test needs %d\n", n, want);
        return 77;
    }
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    printf("GPU: %s (sm_%d%d), %d device(s)\n", prop.name, prop.major, prop.minor, n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_worker probe [N] | device\n");
        return 2;
    }
    if (strcmp(argv[1], "probe") == 0)
        return probe(argc > 2 ? atoi(argv[2]) : 1);
    if (strcmp(argv[1], "device") != 0) {
        fprintf(stderr, "gpu_worker: unknown mode %s\n", argv[1]);
        return 2;
    }
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "msr_init: %s: %s\n", msr_status_str(st), msr_last_error());
        return 1;
    }
    g_rank = msr_rank(ctx);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    setcase("make");
    msr_comm_t *world = NULL, *d = NULL;
    OK(msr_comm_world(ctx, &world));
    OK(msr_comm_device_world(ctx, 0, &d));
    int gpus = 0, gpu = -1;
    CU(cudaGetDeviceCount(&gpus));
    OK(msr_gpu_select(ctx, &gpu));
    CHECK(gpu == msr_comm_gpu(d));
    CHECK(gpu == msr_local_rank(ctx) % gpus);
    const char *want = msr_local_world_size(ctx) > gpus ? "staged" : "nccl";
    const char *be = msr_comm_backend(d);
    if (getenv("MSR_COMM_GPU") == NULL && strcmp(be, want) != 0)
        fail("backend %s with %d local ranks on %d GPUs, expected %s", be,
             msr_local_world_size(ctx), gpus, want);
    g_nccl = strcmp(be, "nccl") == 0;
    if (g_rank == 0)
        printf("device communicator: %s, %d ranks, %d GPU(s) here\n", be, msr_comm_size(d), gpus);
    pair_t p = {world, d, msr_comm_size(world), msr_comm_rank(world)};
    battery(&p, be);

    setcase("split and dup");
    msr_comm_t *hs = NULL, *ds = NULL, *dd = NULL;
    OK(msr_comm_split(world, p.me % 2, p.n - p.me, &hs));
    OK(msr_comm_split(d, p.me % 2, p.n - p.me, &ds));
    CHECK(msr_comm_size(ds) == msr_comm_size(hs) && msr_comm_rank(ds) == msr_comm_rank(hs));
    pair_t ps = {hs, ds, msr_comm_size(hs), msr_comm_rank(hs)};
    vs_allreduce(&ps, MSR_DTYPE_F32, MSR_OP_SUM, 100000, 7);
    OK(msr_comm_dup(d, 0, &dd));
    msr_comm_destroy(d);
    pair_t pd = {world, dd, p.n, p.me};
    vs_allgather(&pd, MSR_DTYPE_I32, 1000, 8);
    msr_comm_destroy(ds);
    msr_comm_destroy(hs);
    msr_comm_destroy(dd);
    setcase("final barrier");
    OK(msr_comm_barrier(world));
    msr_comm_destroy(world);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (g_rank == 0)
        printf("ok device (%s, %ld checks on rank 0, %.1f s)\n", be, g_checks,
               (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    msr_finalize(ctx);
    return 0;
}
