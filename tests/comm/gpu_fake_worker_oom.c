/* gpu_fake_worker's oom mode: a member of a device communicator out of
 * memory inside a collective (its request, alltoallv's counts, the staged
 * backend's pinned block and host counts, NCCL's copy for an in-place
 * alltoall). The member gives up on the communicator (ops->give_up): every
 * member's call fails with MSR_ERR_NO_MEMORY at once, not at the deadline
 * (the communicators' timeout is past the test's limit), the others naming
 * the member; everyone's barrier after it fails the same way; NCCL's
 * communicator is aborted on every member; the world stays usable. */
#include "base/alloc.h"
#include "gpu_fake_worker.h"

typedef enum { OOM_ALLREDUCE, OOM_ALLTOALL_IN_PLACE, OOM_ALLTOALLV } oom_call_t;

typedef struct oom_case {
    const char *name;
    int staged; /* the backend: staged (a shared GPU) or nccl */
    oom_call_t call;
    long fail_at;     /* the failing member's msr_* allocation to fail (-1: none) */
    int gpu_alloc;    /* ... or its next allocation through the GPU table */
    const char *says; /* what the failing member's error must contain */
} oom_case_t;

static const oom_case_t cases[] = {
    {"nccl: a request", 0, OOM_ALLREDUCE, 0, 0, "out of memory for a request"},
    {"nccl: alltoallv's counts", 0, OOM_ALLTOALLV, 0, 0, "out of memory for the counts"},
    {"nccl: the copy of an in-place alltoall", 0, OOM_ALLTOALL_IN_PLACE, -1, 1, "cudaMalloc"},
    {"staged: a request", 1, OOM_ALLREDUCE, 0, 0, "out of memory for a request"},
    {"staged: alltoallv's counts", 1, OOM_ALLTOALLV, 0, 0, "out of memory for the counts"},
    {"staged: the host operation's counts", 1, OOM_ALLTOALLV, 2, 0,
     "staged: out of memory for alltoallv's counts"},
    {"staged: the pinned block", 1, OOM_ALLREDUCE, -1, 1, "no pinned host block"},
};

enum { COUNT = 64 }; /* floats per block */

static msr_status_t call(msr_comm_t *d, oom_call_t what, int n, float *in, float *out)
{
    uint64_t v[4 * 16];
    for (int j = 0; j < n; j++) {
        v[j] = v[2 * n + j] = COUNT;
        v[n + j] = v[3 * n + j] = (uint64_t)j * COUNT;
    }
    switch (what) {
    case OOM_ALLREDUCE:
        return msr_comm_allreduce(d, in, out, COUNT, MSR_DTYPE_F32, MSR_OP_SUM);
    case OOM_ALLTOALL_IN_PLACE:
        return msr_comm_alltoall(d, MSR_IN_PLACE, out, COUNT, MSR_DTYPE_F32);
    case OOM_ALLTOALLV:
        break;
    }
    return msr_comm_alltoallv(d, in, v, v + n, out, v + 2 * n, v + 3 * n, MSR_DTYPE_F32);
}

/* MSR_ERR_NO_MEMORY, saying why on the failing member and naming it on
 * the others. */
static void check_failed(const char *what, msr_status_t st, int mine, int who, const char *says)
{
    if (st != MSR_ERR_NO_MEMORY)
        fail("%s returned %s, want MSR_ERR_NO_MEMORY", what, msr_status_name(st));
    const char *err = msr_last_error();
    char named[64];
    snprintf(named, sizeof named, "rank %d of the communicator", who);
    if (mine && strstr(err, says) == NULL)
        fail("%s: the error '%s' does not say '%s'", what, err, says);
    if (!mine && (strstr(err, named) == NULL || strstr(err, "out of memory") == NULL))
        fail("%s: the error '%s' does not name rank %d out of memory", what, err, who);
    g_checks++;
}

static void one_case(msr_comm_t *world, const oom_case_t *k, int who)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world), mine = me == who;
    setcase("%s (rank %d)", k->name, who);
    gpu_fake_t f;
    gpu_fake_init(&f);
    if (k->staged)
        f.devices = 1; /* every rank on one GPU */
    else
        f.hang = 1; /* the others' NCCL operations end only by the notice */
    msr_comm_t *d = gfw_make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), k->staged ? "staged" : "nccl") == 0);
    msr_comm_set_timeout(d, 300000);
    /* made, and past its first barrier, on every member before any fails:
     * a member leaves the world's barrier only once all have entered it */
    if (k->staged)
        OK(msr_comm_barrier(d)); /* a hung NCCL one never finishes it */
    OK(msr_comm_barrier(world));
    float *in = xmalloc((size_t)n * COUNT * 4), *out = xmalloc((size_t)n * COUNT * 4);
    gfw_fill(MSR_DTYPE_F32, in, (size_t)n * COUNT, me, 1, MSR_OP_SUM);
    memcpy(out, in, (size_t)n * COUNT * 4);
    if (mine && k->fail_at >= 0)
        msr_alloc_fail_at(k->fail_at);
    if (mine && k->gpu_alloc)
        f.alloc_fails = 1;
    msr_status_t st = call(d, k->call, n, in, out);
    int fired = k->gpu_alloc ? f.alloc_fails == 0 : msr_alloc_failed();
    msr_alloc_fail_at(-1);
    f.alloc_fails = 0;
    if (mine && !fired)
        fail("no allocation was failed (the call returned %s)", msr_status_name(st));
    check_failed("the call", st, mine, who, k->says);
    char err[256];
    snprintf(err, sizeof err, "%s", msr_last_error());
    check_failed("the barrier after", msr_comm_barrier(d), mine, who, k->says);
    EXPECT(msr_comm_status(d), MSR_ERR_NO_MEMORY);
    if (!k->staged)
        CHECK(f.aborts == 1); /* ncclCommAbort, once */
    printf("oom %s: rank %d: %s\n", k->name, me, err);
    fflush(stdout);
    msr_comm_destroy(d);
    CHECK(f.comms_live == 0 && f.streams_live == 0);
    if (k->staged) /* nothing queued stays: everything comes back */
        CHECK(f.host_live == 0 && f.dev_live == 0 && f.events_live == 0);
    free(in);
    free(out);
    setcase("%s: the world after", k->name);
    OK(msr_comm_barrier(world));
}

void gfw_mode_oom(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    int n = msr_comm_size(world);
    if (n > 16)
        fail("oom: at most 16 ranks, not %d", n);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        one_case(world, &cases[i], (int)((i + 1) % (size_t)n));
}
