/* The worker of the device communicators' tests that run without a GPU,
 * started by the real msrun (tests/comm/run_gpu.sh), with the fake GPU table
 * of gpu_fake.c. `gpu_fake_worker MODE`:
 *   staged       members share one (fake) GPU: the staged backend; every
 *                collective, in place and not, blocking and not, p2p, split
 *                and dup, checked bit for bit against the host world on the
 *                same inputs; streams; nothing left allocated at the end
 *   nccl         a GPU each: the NCCL backend's control flow: the unique id
 *                through the store (NCCL's own where it can make one, else a
 *                fake), non-blocking init, split, dup, refused arguments,
 *                tags, orderly close (finalize, destroy, no abort)
 *   one          one rank: NCCL and staged moving data (alltoall in place,
 *                alltoallv as a group)
 *   choice       the backend decision and its failures on every member
 *                alike: no device, MSR_COMM_GPU and flags that disagree,
 *                nccl forced on a shared GPU, staged forced, id failure
 *   timeout      operations that never finish: MSR_ERR_TIMEOUT at the
 *                deadline, one abort, the communicator broken
 *   notify       rank 0 gives up early: rank 1 (long deadline) hears of it
 *   asyncerr     NCCL reports an asynchronous error: MSR_ERR_PEER_LOST,
 *                aborted, long before the deadline
 *   inittimeout  NCCL's init never finishes: creation fails at the deadline
 *   kill         (nccl) the last rank SIGKILLs itself: the others fail with
 *                MSR_ERR_PEER_LOST, not at their deadline
 *   killstaged   the same on the staged backend, during transfers
 * Rank 0 prints "ok MODE" at the end; a failed check prints the case and
 * exits 1. */
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/nccl/gpu_test.h"
#include "gpu_fake.h"
#include "msrun/msrun.h"

static int g_rank = -1;
static char g_case[256];
static long g_checks;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "gpu_fake_worker rank %d: FAIL [%s]: %s (last error: %s)\n", g_rank, g_case,
            msg, msr_last_error());
    fflush(stderr);
    _exit(1);
}

#define OK(expr)                                         \
    do {                                                 \
        msr_status_t st_ = (expr);                       \
        if (st_ != MSR_OK)                               \
            fail("%s: %s", #expr, msr_status_name(st_)); \
    } while (0)

#define EXPECT(expr, want)                                                   \
    do {                                                                     \
        msr_status_t st_ = (expr);                                           \
        if (st_ != (want))                                                   \
            fail("%s: %s, expected %s", #expr, msr_status_name(st_), #want); \
        g_checks++;                                                          \
    } while (0)

#define CHECK(cond)                          \
    do {                                     \
        if (!(cond))                         \
            fail("check failed: %s", #cond); \
        g_checks++;                          \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        fail("out of memory for %zu bytes", n);
    return p;
}

static void setcase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void setcase(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_case, sizeof g_case, fmt, ap);
    va_end(ap);
}

/* ---- inputs: small integers (every type holds them), or random floats ---- */

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
        double f = salt % 5 == 4 ? (double)(int64_t)(x >> 11) / 9007199254740992.0 - 0.5 : v;
        switch (dt) {
        case MSR_DTYPE_F32:
            ((float *)p)[i] = (float)f;
            break;
        case MSR_DTYPE_F64:
            ((double *)p)[i] = f;
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
            ((uint16_t *)p)[i] = (uint16_t)(u >> 16); /* small integers: exact */
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

static void same(const void *got, const void *want, size_t bytes, const char *what)
{
    g_checks++;
    if (bytes && memcmp(got, want, bytes) != 0) {
        const unsigned char *g = got, *w = want;
        size_t i = 0;
        while (g[i] == w[i])
            i++;
        fail("%s: byte %zu of %zu is 0x%02x, the host communicator gave 0x%02x", what, i, bytes,
             g[i], w[i]);
    }
}

/* ---- the staged backend against the host communicator ---- */

typedef struct pair {
    msr_comm_t *h, *d; /* host and device communicators of the same group */
    int n, me;
} pair_t;

static void vs_allreduce(pair_t *p, msr_dtype_t dt, msr_op_t op, size_t c, int salt)
{
    size_t b = c * msr_dtype_size(dt);
    unsigned char *in = xmalloc(b), *ho = xmalloc(b), *d1 = xmalloc(b), *d2 = xmalloc(b);
    fill(dt, in, c, p->me, salt, op);
    OK(msr_comm_allreduce(p->h, in, ho, c, dt, op));
    memset(d1, 0xee, b);
    OK(msr_comm_allreduce(p->d, in, d1, c, dt, op));
    same(d1, ho, b, "allreduce");
    memcpy(d2, in, b);
    OK(msr_comm_allreduce(p->d, MSR_IN_PLACE, d2, c, dt, op));
    same(d2, ho, b, "allreduce in place");
    free(in);
    free(ho);
    free(d1);
    free(d2);
}

static void vs_reduce_scatter(pair_t *p, msr_dtype_t dt, msr_op_t op, size_t c, int salt)
{
    size_t es = msr_dtype_size(dt), b = c * es, all = (size_t)p->n * b;
    unsigned char *in = xmalloc(all), *ho = xmalloc(b), *d1 = xmalloc(b), *d2 = xmalloc(all);
    fill(dt, in, c * (size_t)p->n, p->me, salt, op);
    OK(msr_comm_reduce_scatter(p->h, in, ho, c, dt, op));
    OK(msr_comm_reduce_scatter(p->d, in, d1, c, dt, op));
    same(d1, ho, b, "reduce_scatter");
    memcpy(d2, in, all);
    OK(msr_comm_reduce_scatter(p->d, MSR_IN_PLACE, d2, c, dt, op));
    same(d2 + (size_t)p->me * b, ho, b, "reduce_scatter MSR_IN_PLACE");
    memcpy(d2, in, all);
    OK(msr_comm_reduce_scatter(p->d, d2, d2 + (size_t)p->me * b, c, dt, op));
    same(d2 + (size_t)p->me * b, ho, b, "reduce_scatter in place (NCCL style)");
    free(in);
    free(ho);
    free(d1);
    free(d2);
}

static void vs_allgather(pair_t *p, msr_dtype_t dt, size_t c, int salt)
{
    size_t b = c * msr_dtype_size(dt), all = (size_t)p->n * b;
    unsigned char *in = xmalloc(b), *ho = xmalloc(all), *d1 = xmalloc(all);
    fill(dt, in, c, p->me, salt, MSR_OP_SUM);
    OK(msr_comm_allgather(p->h, in, ho, c, dt));
    OK(msr_comm_allgather(p->d, in, d1, c, dt));
    same(d1, ho, all, "allgather");
    memset(d1, 0xee, all);
    memcpy(d1 + (size_t)p->me * b, in, b);
    OK(msr_comm_allgather(p->d, MSR_IN_PLACE, d1, c, dt));
    same(d1, ho, all, "allgather in place");
    free(in);
    free(ho);
    free(d1);
}

static void vs_rooted(pair_t *p, msr_dtype_t dt, msr_op_t op, size_t c, int root, int salt)
{
    size_t b = c * msr_dtype_size(dt);
    unsigned char *in = xmalloc(b), *hb = xmalloc(b), *db = xmalloc(b), *ho = xmalloc(b),
                  *d1 = xmalloc(b);
    fill(dt, in, c, p->me, salt, op);
    /* broadcast: non-roots start from garbage */
    memset(hb, 0x5a, b);
    memset(db, 0x5a, b);
    if (p->me == root) {
        memcpy(hb, in, b);
        memcpy(db, in, b);
    }
    OK(msr_comm_broadcast(p->h, hb, c, dt, root));
    OK(msr_comm_broadcast(p->d, db, c, dt, root));
    same(db, hb, b, "broadcast");
    /* reduce: out of place, then in place at the root */
    memset(ho, 0xee, b);
    memset(d1, 0xee, b);
    OK(msr_comm_reduce(p->h, in, ho, c, dt, op, root));
    OK(msr_comm_reduce(p->d, in, d1, c, dt, op, root));
    same(d1, ho, b, "reduce (the root's result, the others' untouched buffer)");
    if (p->me == root) {
        memcpy(d1, in, b);
        OK(msr_comm_reduce(p->d, MSR_IN_PLACE, d1, c, dt, op, root));
        same(d1, ho, b, "reduce in place");
    } else {
        OK(msr_comm_reduce(p->d, in, NULL, c, dt, op, root));
    }
    free(in);
    free(hb);
    free(db);
    free(ho);
    free(d1);
}

static void vs_alltoall(pair_t *p, msr_dtype_t dt, size_t c, int salt)
{
    size_t all = (size_t)p->n * c * msr_dtype_size(dt);
    unsigned char *in = xmalloc(all), *ho = xmalloc(all), *d1 = xmalloc(all);
    fill(dt, in, c * (size_t)p->n, p->me, salt, MSR_OP_SUM);
    OK(msr_comm_alltoall(p->h, in, ho, c, dt));
    OK(msr_comm_alltoall(p->d, in, d1, c, dt));
    same(d1, ho, all, "alltoall");
    memcpy(d1, in, all);
    OK(msr_comm_alltoall(p->d, MSR_IN_PLACE, d1, c, dt));
    same(d1, ho, all, "alltoall in place");
    free(in);
    free(ho);
    free(d1);
}

/* Counts that differ per pair of ranks, with gaps between the blocks (the
 * gaps must stay untouched). */
static void vs_alltoallv(pair_t *p, msr_dtype_t dt, size_t unit)
{
    int n = p->n;
    size_t es = msr_dtype_size(dt);
    uint64_t *sc = xmalloc(4 * (size_t)n * sizeof *sc), *sd = sc + n, *rc = sc + 2 * n,
             *rd = sc + 3 * n;
    uint64_t so = 0, ro = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = (uint64_t)((p->me + j + 1) % 3) * unit;
        rc[j] = (uint64_t)((j + p->me + 1) % 3) * unit;
        sd[j] = so;
        rd[j] = ro;
        so += sc[j] + 1;
        ro += rc[j] + 2;
    }
    unsigned char *in = xmalloc(so * es), *ho = xmalloc(ro * es), *d1 = xmalloc(ro * es);
    fill(dt, in, so, p->me, 3, MSR_OP_SUM);
    memset(ho, 0x77, ro * es);
    memset(d1, 0x77, ro * es);
    OK(msr_comm_alltoallv(p->h, in, sc, sd, ho, rc, rd, dt));
    OK(msr_comm_alltoallv(p->d, in, sc, sd, d1, rc, rd, dt));
    same(d1, ho, ro * es, "alltoallv (gaps included)");
    free(in);
    free(ho);
    free(d1);
    free(sc);
}

static void vs_p2p(pair_t *p)
{
    int n = p->n, to = (p->me + 1) % n, from = (p->me + n - 1) % n;
    size_t c = 1000;
    float *out = xmalloc(c * 4), *got = xmalloc(c * 4), *want = xmalloc(c * 4);
    fill(MSR_DTYPE_F32, out, c, p->me, 9, MSR_OP_SUM);
    fill(MSR_DTYPE_F32, want, c, from, 9, MSR_OP_SUM);
    msr_comm_req_t *rq[2];
    OK(msr_comm_irecv(p->d, got, c, MSR_DTYPE_F32, from, 0, &rq[0]));
    OK(msr_comm_isend(p->d, out, c, MSR_DTYPE_F32, to, 0, &rq[1]));
    OK(msr_comm_wait_all(rq, 2));
    same(got, want, c * 4, "p2p ring");
    /* tags other than 0 are refused on device communicators, which stay
     * usable */
    EXPECT(msr_comm_send(p->d, out, c, MSR_DTYPE_F32, to, 5), MSR_ERR_UNSUPPORTED);
    EXPECT(msr_comm_status(p->d), MSR_OK);
    free(out);
    free(got);
    free(want);
}

/* Several operations in flight at once, finished in different orders. */
static void vs_inflight(pair_t *p, void *side_stream)
{
    enum { K = 5 };
    size_t sizes[K] = {1, 300, 7000, 70000, 3};
    float *in[K], *ho[K], *dout[K];
    msr_comm_req_t *rq[K];
    for (int k = 0; k < K; k++) {
        in[k] = xmalloc(sizes[k] * 4);
        ho[k] = xmalloc(sizes[k] * 4);
        dout[k] = xmalloc(sizes[k] * 4);
        fill(MSR_DTYPE_F32, in[k], sizes[k], p->me, 10 + k, MSR_OP_SUM);
        OK(msr_comm_allreduce(p->h, in[k], ho[k], sizes[k], MSR_DTYPE_F32, MSR_OP_SUM));
    }
    for (int k = 0; k < K; k++)
        OK(msr_comm_iallreduce(p->d, in[k], dout[k], sizes[k], MSR_DTYPE_F32, MSR_OP_SUM, &rq[k]));
    OK(msr_comm_wait_stream(rq[2], side_stream));
    if (p->me % 2) {
        for (int k = K - 1; k >= 0; k--)
            OK(msr_comm_wait(rq[k]));
    } else {
        int left = K;
        while (left > 0)
            for (int k = 0; k < K; k++)
                if (rq[k]) {
                    msr_status_t st = msr_comm_test(&rq[k]);
                    if (st == MSR_IN_PROGRESS)
                        continue;
                    OK(st);
                    left--;
                }
    }
    for (int k = 0; k < K; k++) {
        same(dout[k], ho[k], sizes[k] * 4, "iallreduce in flight with others");
        free(in[k]);
        free(ho[k]);
        free(dout[k]);
    }
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
            vs_reduce_scatter(p, dt, MSR_OP_SUM, c, (int)ci);
            setcase("%s: allgather %s count %zu", label, msr_dtype_name(dt), c);
            vs_allgather(p, dt, c, (int)ci);
            setcase("%s: broadcast/reduce %s count %zu", label, msr_dtype_name(dt), c);
            vs_rooted(p, dt, MSR_OP_MAX, c, (int)(ci % (size_t)p->n), (int)ci);
            setcase("%s: alltoall %s count %zu", label, msr_dtype_name(dt), c);
            vs_alltoall(p, dt, c, (int)ci);
        }
    }
    /* large: the UCX ring under the staging (random floats: the bits must
     * still be the host communicator's) */
    setcase("%s: large allreduce", label);
    vs_allreduce(p, MSR_DTYPE_F32, MSR_OP_SUM, 300001, 4);
    vs_allreduce(p, MSR_DTYPE_F32, MSR_OP_AVG, 300001, 9);
    setcase("%s: large reduce_scatter", label);
    vs_reduce_scatter(p, MSR_DTYPE_BF16, MSR_OP_SUM, 100003, 2);
    setcase("%s: rooted at every rank", label);
    for (int r = 0; r < p->n; r++)
        vs_rooted(p, MSR_DTYPE_I64, MSR_OP_SUM, 77, r, r);
    setcase("%s: alltoallv", label);
    vs_alltoallv(p, MSR_DTYPE_F32, 5);
    vs_alltoallv(p, MSR_DTYPE_U8, 1000);
    setcase("%s: barrier", label);
    OK(msr_comm_barrier(p->d));
    setcase("%s: p2p", label);
    vs_p2p(p);
}

static msr_comm_t *make(msr_comm_t *world, gpu_fake_t *f, unsigned flags)
{
    msr_comm_t *d = NULL;
    OK(msr_gpu_comm_create(world, flags, &f->api, &d));
    CHECK(d != NULL);
    CHECK(msr_comm_size(d) == msr_comm_size(world));
    CHECK(msr_comm_rank(d) == msr_comm_rank(world));
    for (int i = 0; i < msr_comm_size(d); i++)
        CHECK(msr_comm_world_rank(d, i) == msr_comm_world_rank(world, i));
    return d;
}

static void mode_staged(msr_ctx_t *ctx, msr_comm_t *world)
{
    gpu_fake_t f;
    gpu_fake_init(&f);
    f.devices = 1; /* every rank of the node on GPU 0 */
    int dev = -1;
    setcase("select");
    OK(msr_gpu_select_with(ctx, &f.api, &dev));
    CHECK(dev == 0);
    setcase("make");
    msr_comm_t *d = make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), "staged") == 0);
    CHECK(strcmp(msr_comm_backend(world), "ucx") == 0);
    CHECK(msr_comm_gpu(d) == 0 && msr_comm_gpu(world) == -1);
    CHECK(f.inits == 0);

    setcase("streams");
    void *own = msr_comm_stream(d), *side = NULL;
    CHECK(own != NULL);
    CHECK(msr_comm_stream(world) == NULL);
    EXPECT(msr_comm_set_stream(world, own), MSR_ERR_UNSUPPORTED);
    OK(f.api.stream_create(&f.api, &side));
    OK(msr_comm_set_stream(d, side));
    CHECK(msr_comm_stream(d) == side);

    pair_t p = {world, d, msr_comm_size(world), msr_comm_rank(world)};
    battery(&p, "staged world (on the caller's stream)");
    OK(msr_comm_set_stream(d, NULL));
    CHECK(msr_comm_stream(d) == own);
    setcase("in flight");
    vs_inflight(&p, side);

    setcase("split");
    int me = p.me, n = p.n;
    msr_comm_t *hs = NULL, *ds = NULL;
    OK(msr_comm_split(world, me % 2, n - me, &hs));
    OK(msr_comm_split(d, me % 2, n - me, &ds));
    CHECK(ds != NULL && strcmp(msr_comm_backend(ds), "staged") == 0);
    CHECK(msr_comm_size(ds) == msr_comm_size(hs) && msr_comm_rank(ds) == msr_comm_rank(hs));
    pair_t ps = {hs, ds, msr_comm_size(hs), msr_comm_rank(hs)};
    vs_allreduce(&ps, MSR_DTYPE_F32, MSR_OP_SUM, 5000, 1);
    vs_allgather(&ps, MSR_DTYPE_I32, 33, 1);
    msr_comm_t *none = (msr_comm_t *)1;
    OK(msr_comm_split(d, me == 0 ? MSR_COMM_NO_COLOR : 1, 0, &none));
    CHECK(me == 0 ? none == NULL : (none != NULL && msr_comm_size(none) == n - 1));
    msr_comm_destroy(none);

    setcase("dup with its own worker");
    msr_comm_t *dd = NULL;
    OK(msr_comm_dup(d, MSR_COMM_OWN_WORKER, &dd));
    CHECK(strcmp(msr_comm_backend(dd), "staged") == 0);
    msr_comm_destroy(d); /* the copy outlives its parent */
    pair_t pd = {world, dd, n, me};
    vs_allreduce(&pd, MSR_DTYPE_F64, MSR_OP_MIN, 999, 2);
    vs_alltoall(&pd, MSR_DTYPE_U8, 100, 2);

    setcase("destroy with a request in flight");
    float x[64] = {0};
    msr_comm_req_t *rq = NULL;
    OK(msr_comm_iallreduce(ds, x, x, 64, MSR_DTYPE_F32, MSR_OP_SUM, &rq));
    OK(msr_comm_wait(rq));
    msr_comm_destroy(ds);
    msr_comm_destroy(hs);
    msr_comm_destroy(dd);
    f.api.stream_destroy(&f.api, side);
    setcase("leaks through the table");
    CHECK(f.host_live == 0);
    CHECK(f.dev_live == 0);
    CHECK(f.events_live == 0);
    CHECK(f.streams_live == 0);
    CHECK(f.comms_live == 0);
}

static void mode_nccl(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    gpu_fake_t f;
    gpu_fake_init(&f);
    f.devices = 8; /* a GPU per rank */
    f.init_polls = 5;
    f.settle_polls = 2;
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    setcase("make");
    msr_comm_t *d = make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), "nccl") == 0);
    CHECK(f.inits == 1);
    setcase("the unique id reached every member through the store");
    unsigned char *ids = xmalloc((size_t)n * MSR_GPU_ID_BYTES);
    OK(msr_comm_allgather(world, f.id, ids, MSR_GPU_ID_BYTES, MSR_DTYPE_U8));
    unsigned char zero[MSR_GPU_ID_BYTES] = {0};
    CHECK(memcmp(ids, zero, MSR_GPU_ID_BYTES) != 0);
    for (int i = 1; i < n; i++)
        CHECK(memcmp(ids + (size_t)i * MSR_GPU_ID_BYTES, ids, MSR_GPU_ID_BYTES) == 0);
    if (me == 0)
        printf("unique id made by %s\n", f.id_from_nccl ? "NCCL (ncclGetUniqueId)" : "the fake");
    unsigned char first[MSR_GPU_ID_BYTES];
    memcpy(first, f.id, sizeof first);
    msr_comm_t *d2 = make(world, &f, 0);
    CHECK(f.inits == 2);
    CHECK(memcmp(first, f.id, sizeof first) != 0); /* a new id, under a new key */

    setcase("operations");
    float buf[256];
    fill(MSR_DTYPE_F32, buf, 256, me, 1, MSR_OP_SUM);
    int ops0 = f.ops;
    OK(msr_comm_allreduce(d, buf, buf, 256, MSR_DTYPE_F32, MSR_OP_SUM));
    OK(msr_comm_barrier(d));
    CHECK(f.ops == ops0 + 2);
    msr_comm_req_t *rq = NULL;
    OK(msr_comm_ibroadcast(d, buf, 256, MSR_DTYPE_F32, 0, &rq));
    void *side = NULL;
    OK(f.api.stream_create(&f.api, &side));
    OK(msr_comm_wait_stream(rq, side));
    OK(msr_comm_wait(rq));
    uint64_t *v = xmalloc(4 * (size_t)n * sizeof *v);
    for (int j = 0; j < n; j++) {
        v[j] = 1;
        v[n + j] = (uint64_t)j;
        v[2 * n + j] = 1;
        v[3 * n + j] = (uint64_t)j;
    }
    float in[64] = {0}, out[64];
    OK(msr_comm_alltoallv(d, in, v, v + n, out, v + 2 * n, v + 3 * n, MSR_DTYPE_F32));
    free(v);
    setcase("refused before anything was queued: the communicator stays usable");
    f.refuse_count = 77;
    EXPECT(msr_comm_allreduce(d, buf, buf, 77, MSR_DTYPE_F32, MSR_OP_SUM), MSR_ERR_INVALID_ARG);
    EXPECT(msr_comm_status(d), MSR_OK);
    f.refuse_count = 0;
    EXPECT(msr_comm_send(d, buf, 4, MSR_DTYPE_F32, (me + 1) % n, 3), MSR_ERR_UNSUPPORTED);
    OK(msr_comm_allreduce(d, MSR_IN_PLACE, buf, 256, MSR_DTYPE_F32, MSR_OP_AVG));

    setcase("split and dup");
    int splits0 = f.splits;
    msr_comm_t *s = NULL;
    OK(msr_comm_split(d, me % 2, me, &s));
    CHECK(f.splits == splits0 + 1);
    CHECK(s != NULL && strcmp(msr_comm_backend(s), "nccl") == 0);
    CHECK(msr_comm_size(s) == (n + 1 - me % 2) / 2 && msr_comm_rank(s) == me / 2);
    OK(msr_comm_allreduce(s, buf, buf, 16, MSR_DTYPE_F32, MSR_OP_SUM));
    msr_comm_t *none = (msr_comm_t *)1;
    OK(msr_comm_split(d, me == n - 1 ? MSR_COMM_NO_COLOR : 0, 0, &none));
    CHECK(me == n - 1 ? none == NULL : none != NULL);
    msr_comm_destroy(none);
    msr_comm_t *dd = NULL;
    OK(msr_comm_dup(d, 0, &dd));
    CHECK(strcmp(msr_comm_backend(dd), "nccl") == 0 && msr_comm_rank(dd) == me);
    setcase("orderly close: finalize and destroy, no abort");
    int live = f.comms_live, fin0 = f.finalizes, des0 = f.destroys;
    CHECK(live == 4); /* d, d2, s, dd */
    msr_comm_destroy(dd);
    msr_comm_destroy(s);
    msr_comm_destroy(d2);
    msr_comm_destroy(d);
    CHECK(f.aborts == 0);
    CHECK(f.finalizes == fin0 + live && f.destroys == des0 + live);
    CHECK(f.comms_live == 0);
    f.api.stream_destroy(&f.api, side);
    CHECK(f.dev_live == 0 && f.events_live == 0 && f.streams_live == 0);
    free(ids);
}

/* One rank: NCCL (the fake's copies) and staged move the data. */
static void mode_one(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    for (int staged = 0; staged < 2; staged++) {
        gpu_fake_t f;
        gpu_fake_init(&f);
        f.settle_polls = 3;
        setcase("one rank, %s", staged ? "staged" : "nccl");
        msr_comm_t *d = make(world, &f, staged ? MSR_COMM_STAGED : 0);
        CHECK(strcmp(msr_comm_backend(d), staged ? "staged" : "nccl") == 0);
        pair_t p = {world, d, 1, 0};
        vs_allreduce(&p, MSR_DTYPE_F32, MSR_OP_SUM, 1000, 1);
        vs_reduce_scatter(&p, MSR_DTYPE_I32, MSR_OP_SUM, 100, 1);
        vs_allgather(&p, MSR_DTYPE_F64, 100, 1);
        vs_rooted(&p, MSR_DTYPE_BF16, MSR_OP_SUM, 100, 0, 1);
        vs_alltoall(&p, MSR_DTYPE_U8, 100, 1); /* nccl: in place through a device copy */
        vs_alltoallv(&p, MSR_DTYPE_F32, 7);    /* nccl: a group of send and recv */
        OK(msr_comm_barrier(d));
        msr_comm_destroy(d);
        CHECK(f.host_live == 0 && f.dev_live == 0 && f.events_live == 0 && f.comms_live == 0);
        CHECK(f.aborts == 0);
    }
}

/* The decision and its failures, the same on every member. */
static void mode_choice(msr_ctx_t *ctx, msr_comm_t *world)
{
    int me = msr_comm_rank(world);
    gpu_fake_t f;
    msr_comm_t *d = NULL;
    int dev = -1;

    setcase("select: local rank modulo the devices");
    gpu_fake_init(&f);
    f.devices = 4;
    OK(msr_gpu_select_with(ctx, &f.api, &dev));
    CHECK(dev == msr_local_rank(ctx) % 4);
    f.devices = 0;
    EXPECT(msr_gpu_select_with(ctx, &f.api, &dev), MSR_ERR_UNSUPPORTED);
    EXPECT(msr_gpu_select_with(ctx, NULL, &dev), MSR_ERR_UNSUPPORTED);

    setcase("auto: a GPU each gives nccl, a shared GPU staged");
    gpu_fake_init(&f);
    d = make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), "nccl") == 0);
    msr_comm_destroy(d);
    f.devices = 1;
    d = make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), "staged") == 0);
    msr_comm_destroy(d);

    setcase("forced: the flag, the environment");
    gpu_fake_init(&f);
    d = make(world, &f, MSR_COMM_STAGED);
    CHECK(strcmp(msr_comm_backend(d), "staged") == 0);
    msr_comm_destroy(d);
    setenv("MSR_COMM_GPU", "staged", 1);
    d = make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), "staged") == 0);
    msr_comm_destroy(d);
    setenv("MSR_COMM_GPU", "NCCL", 1);
    d = make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), "nccl") == 0);
    msr_comm_destroy(d);

    setcase("nccl forced where members share a GPU: refused everywhere");
    f.devices = 1;
    EXPECT(msr_gpu_comm_create(world, 0, &f.api, &d), MSR_ERR_UNSUPPORTED);
    unsetenv("MSR_COMM_GPU");

    setcase("members that disagree: refused everywhere");
    f.devices = 4;
    setenv("MSR_COMM_GPU", me == 1 ? "staged" : "auto", 1);
    EXPECT(msr_gpu_comm_create(world, 0, &f.api, &d), MSR_ERR_INVALID_ARG);
    setenv("MSR_COMM_GPU", me == 1 ? "bogus" : "auto", 1);
    EXPECT(msr_gpu_comm_create(world, 0, &f.api, &d), MSR_ERR_INVALID_ARG);
    unsetenv("MSR_COMM_GPU");
    EXPECT(msr_gpu_comm_create(world, me == 1 ? MSR_COMM_STAGED : 0, &f.api, &d),
           MSR_ERR_INVALID_ARG);
    EXPECT(msr_gpu_comm_create(world, 0x80, &f.api, &d), MSR_ERR_INVALID_ARG);

    setcase("a member without a device: refused everywhere");
    f.devices = me == 1 ? 0 : 4;
    EXPECT(msr_gpu_comm_create(world, 0, &f.api, &d), MSR_ERR_UNSUPPORTED);
    f.devices = 4;

    setcase("member 0 cannot make the NCCL id: refused everywhere");
    f.unique_id_fails = me == 0;
    EXPECT(msr_gpu_comm_create(world, 0, &f.api, &d), MSR_ERR_BACKEND);
    f.unique_id_fails = 0;

    setcase("a device communicator is not made from a device communicator");
    d = make(world, &f, 0);
    msr_comm_t *d2 = NULL;
    EXPECT(msr_gpu_comm_create(d, 0, &f.api, &d2), MSR_ERR_INVALID_ARG);
    msr_comm_destroy(d);
    CHECK(f.comms_live == 0 && f.host_live == 0 && f.dev_live == 0 && f.streams_live == 0);
    setcase("the world is still fine");
    OK(msr_comm_barrier(world));
}

/* NCCL operations that never finish. */
static void mode_timeout(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    gpu_fake_t f;
    gpu_fake_init(&f);
    f.hang = 1;
    msr_comm_t *d = make(world, &f, 0), *d2 = make(world, &f, 0);
    msr_comm_set_timeout(d, 1500);
    msr_comm_set_timeout(d2, 1500);
    float buf[64] = {0};
    setcase("blocking: the deadline");
    double t0 = now_s();
    msr_status_t st = msr_comm_allreduce(d, buf, buf, 64, MSR_DTYPE_F32, MSR_OP_SUM);
    double t = now_s() - t0;
    /* its own deadline, or the other member's notice of its own */
    if (st != MSR_ERR_TIMEOUT)
        fail("allreduce: %s, expected MSR_ERR_TIMEOUT", msr_status_name(st));
    if (t < 1.0 || t > 8.0)
        fail("allreduce failed after %.2f s with a 1.5 s deadline", t);
    CHECK(f.aborts == 1);
    EXPECT(msr_comm_status(d), MSR_ERR_TIMEOUT);
    t0 = now_s();
    EXPECT(msr_comm_barrier(d), MSR_ERR_TIMEOUT); /* broken: at once */
    CHECK(now_s() - t0 < 0.5);
    CHECK(f.aborts == 1);
    setcase("non-blocking: in progress, then the deadline");
    msr_comm_req_t *rq = NULL;
    OK(msr_comm_iallreduce(d2, buf, buf, 64, MSR_DTYPE_F32, MSR_OP_SUM, &rq));
    EXPECT(msr_comm_test(&rq), MSR_IN_PROGRESS);
    CHECK(rq != NULL);
    EXPECT(msr_comm_wait(rq), MSR_ERR_TIMEOUT);
    CHECK(f.aborts == 2);
    msr_comm_destroy(d);
    msr_comm_destroy(d2);
    CHECK(f.finalizes == 0 && f.aborts == 2 && f.comms_live == 0);
    printf("rank %d: timed out after %.2f s\n", g_rank, t);
}

/* Rank 0 gives up after 1 s; rank 1, with a 60 s deadline, must hear of it. */
static void mode_notify(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    gpu_fake_t f;
    gpu_fake_init(&f);
    f.hang = 1;
    int me = msr_comm_rank(world);
    msr_comm_t *d = make(world, &f, 0);
    msr_comm_set_timeout(d, me == 0 ? 1000 : 60000);
    float buf[16] = {0};
    setcase("a member's failure reaches the others");
    double t0 = now_s();
    msr_status_t st = msr_comm_allreduce(d, buf, buf, 16, MSR_DTYPE_F32, MSR_OP_SUM);
    double t = now_s() - t0;
    if (st != MSR_ERR_TIMEOUT && st != MSR_ERR_PEER_LOST)
        fail("allreduce: %s", msr_status_name(st));
    if (me != 0 && t > 15.0)
        fail("rank %d heard of rank 0's failure only after %.2f s", me, t);
    CHECK(f.aborts == 1);
    printf("rank %d: %s after %.2f s\n", me, msr_status_name(st), t);
    msr_comm_destroy(d);
}

/* Rank 0's NCCL reports an asynchronous error; the others hear of it. */
static void mode_asyncerr(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    gpu_fake_t f;
    gpu_fake_init(&f);
    int me = msr_comm_rank(world);
    f.hang = 1;
    f.async_status = MSR_ERR_PEER_LOST; /* ncclRemoteError, as cuda_api.c maps it */
    msr_comm_t *d = make(world, &f, 0);
    f.async_error_after = me == 0 ? 50 : 0;
    msr_comm_set_timeout(d, 60000);
    float buf[16] = {0};
    setcase("an asynchronous NCCL error");
    double t0 = now_s();
    msr_status_t st = msr_comm_allreduce(d, buf, buf, 16, MSR_DTYPE_F32, MSR_OP_SUM);
    double t = now_s() - t0;
    /* rank 0: the error, mapped; the others: rank 0's notice (which says
     * MSR_ERR_TIMEOUT: see gpu_comm.c's break_host) */
    if (me == 0 ? st != MSR_ERR_PEER_LOST : (st != MSR_ERR_PEER_LOST && st != MSR_ERR_TIMEOUT))
        fail("allreduce: %s", msr_status_name(st));
    CHECK(t < 15.0);
    CHECK(f.aborts == 1);
    printf("rank %d: %s after %.2f s\n", me, msr_status_name(st), t);
    msr_comm_destroy(d);
    CHECK(f.comms_live == 0);
}

static void mode_inittimeout(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    gpu_fake_t f;
    gpu_fake_init(&f);
    f.init_polls = 1 << 30;
    msr_comm_set_timeout(world, 1500);
    msr_comm_t *d = NULL;
    setcase("NCCL's initialization never finishes");
    double t0 = now_s();
    msr_status_t st = msr_gpu_comm_create(world, 0, &f.api, &d);
    double t = now_s() - t0;
    if (st != MSR_ERR_TIMEOUT)
        fail("create: %s, expected MSR_ERR_TIMEOUT", msr_status_name(st));
    CHECK(d == NULL);
    CHECK(t > 1.0 && t < 10.0);
    CHECK(f.aborts == 1 && f.comms_live == 0);
    CHECK(f.streams_live == 0 && f.dev_live == 0);
    msr_comm_set_timeout(world, 30000);
}

/* The last rank dies; the others must not wait for their deadline. */
static void mode_kill(msr_ctx_t *ctx, msr_comm_t *world, int staged)
{
    (void)ctx;
    gpu_fake_t f;
    gpu_fake_init(&f);
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    /* msrun sends SIGTERM to the survivors when a worker dies: this test
     * wants to see them notice on their own */
    signal(SIGTERM, SIG_IGN);
    if (staged)
        f.devices = 1;
    else
        f.hang = 1;
    msr_comm_t *d = make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), staged ? "staged" : "nccl") == 0);
    msr_comm_set_timeout(d, 60000);
    size_t c = staged ? (1u << 18) : 16;
    float *buf = xmalloc(c * 4);
    memset(buf, 0, c * 4);
    OK(msr_comm_barrier(world));
    if (me == n - 1) {
        if (staged)
            for (int i = 0; i < 5; i++)
                OK(msr_comm_allreduce(d, buf, buf, c, MSR_DTYPE_F32, MSR_OP_SUM));
        fflush(stdout);
        kill(getpid(), SIGKILL);
    }
    double t0 = now_s();
    msr_status_t st = MSR_OK;
    long i = 0;
    for (; i < 100000 && st == MSR_OK; i++)
        st = msr_comm_allreduce(d, buf, buf, c, MSR_DTYPE_F32, MSR_OP_SUM);
    double t = now_s() - t0;
    if (st == MSR_OK)
        fail("%ld allreduces and no failure", i);
    if (t > 20.0)
        fail("noticed the loss only after %.1f s", t);
    if (!staged)
        CHECK(f.aborts == 1);
    printf("rank %d survived: %s after %.0f ms (%ld allreduces)\n", me, msr_status_name(st),
           t * 1e3, i);
    fflush(stdout);
    msr_comm_destroy(d);
    free(buf);
    msr_comm_destroy(world);
    msr_finalize(ctx);
    exit(0);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpu_fake_worker "
                        "staged|nccl|one|choice|timeout|notify|asyncerr|inittimeout|kill|"
                        "killstaged\n");
        return 2;
    }
    const char *mode = argv[1];
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "msr_init: %s: %s\n", msr_status_str(st), msr_last_error());
        return 1;
    }
    g_rank = msr_rank(ctx);
    msr_comm_t *world = NULL;
    setcase("world");
    OK(msr_comm_world(ctx, &world));
    double t0 = now_s();
    if (strcmp(mode, "staged") == 0)
        mode_staged(ctx, world);
    else if (strcmp(mode, "nccl") == 0)
        mode_nccl(ctx, world);
    else if (strcmp(mode, "one") == 0)
        mode_one(ctx, world);
    else if (strcmp(mode, "choice") == 0)
        mode_choice(ctx, world);
    else if (strcmp(mode, "timeout") == 0)
        mode_timeout(ctx, world);
    else if (strcmp(mode, "notify") == 0)
        mode_notify(ctx, world);
    else if (strcmp(mode, "asyncerr") == 0)
        mode_asyncerr(ctx, world);
    else if (strcmp(mode, "inittimeout") == 0)
        mode_inittimeout(ctx, world);
    else if (strcmp(mode, "kill") == 0)
        mode_kill(ctx, world, 0);
    else if (strcmp(mode, "killstaged") == 0)
        mode_kill(ctx, world, 1);
    else
        fail("unknown mode %s", mode);
    setcase("final barrier");
    OK(msr_comm_barrier(world));
    msr_comm_destroy(world);
    if (g_rank == 0)
        printf("ok %s (%ld checks on rank 0, %.1f s)\n", mode, g_checks, now_s() - t0);
    msr_finalize(ctx);
    return 0;
}
