/* A member out of memory inside a collective (tests/comm/test_comm_oom.sh),
 * under the real msrun with 4, 6 or 8 ranks (the world's size): for every
 * collective whose start allocates (its scratch, its op slots, alltoallv's
 * counts, the request itself once the free ones are in use), the chosen
 * members' first allocation of the call fails. Every member's call fails with
 * MSR_ERR_NO_MEMORY at once, not at the deadline (the communicators'
 * timeout is longer than the script allows), except a reduce's leaves,
 * whose part is a send that may finish first, and a broadcast's members
 * that wait on no failing member (none of their tree's ancestors fails:
 * their part may finish before the notice comes); everyone's barrier after it
 * fails the same way. The failing members say out of memory (or, when
 * another failing member's notice came first, name it), the others name
 * one of them; at least one member's allocation failed; the world stays
 * usable. Linked to the static modules so that the allocation hook
 * reaches them. Every check that fails prints "FAIL" and exits 1; rank 0
 * prints "ok oom" at the end. A case runs in worlds of its min_np ranks
 * and more: an allgather's start allocates its 2 (n - 1) op slots only past
 * the 8 a request holds (6 ranks and more), and the cases failing the last
 * members of 6 and 8 ranks put them where a ring's and a round's partners
 * are not a power of two apart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "msrun/msrun.h"
#include "tests/worker_fail.h"

WORKER_FAIL("comm_oom", exit)

enum { MAX_NP = 8, MAX_COUNT = 4096, POSTS = 9 /* more than the engine keeps free */ };

typedef enum {
    ALLREDUCE,
    REDUCE_SCATTER,
    ALLGATHER,
    BROADCAST,
    REDUCE,
    ALLTOALL,
    ALLTOALLV
} call_t;

typedef struct oom_case {
    const char *name;
    const char *force_var; /* MSR_COMM_ALGO_... set for the communicator, or NULL */
    const char *algo;
    call_t call;
    uint64_t count; /* floats per rank's block */
    unsigned who;   /* the failing members: a bit per rank */
    int min_np;     /* the smallest world that runs it (0: 4 ranks) */
} oom_case_t;

static const oom_case_t cases[] = {
    {"allreduce(direct)", "MSR_COMM_ALGO_ALLREDUCE", "direct", ALLREDUCE, 256, 1u << 0},
    {"allreduce(rd)", "MSR_COMM_ALGO_ALLREDUCE", "rd", ALLREDUCE, 256, 1u << 3},
    {"allreduce(ring)", "MSR_COMM_ALGO_ALLREDUCE", "ring", ALLREDUCE, MAX_COUNT, 1u << 1},
    {"reduce_scatter(direct)", "MSR_COMM_ALGO_REDUCE_SCATTER", "direct", REDUCE_SCATTER, 64,
     1u << 2},
    {"reduce_scatter(ring)", "MSR_COMM_ALGO_REDUCE_SCATTER", "ring", REDUCE_SCATTER, MAX_COUNT,
     1u << 0},
    {"broadcast(binomial)", "MSR_COMM_ALGO_BROADCAST", "binomial", BROADCAST, 16, 1u << 3},
    {"broadcast(binomial), the root", "MSR_COMM_ALGO_BROADCAST", "binomial", BROADCAST, 16,
     1u << 0},
    {"broadcast(binomial), an inner member", "MSR_COMM_ALGO_BROADCAST", "binomial", BROADCAST, 16,
     1u << 2},
    {"reduce(binomial)", "MSR_COMM_ALGO_REDUCE", "binomial", REDUCE, 256, 1u << 1},
    {"reduce(chain)", "MSR_COMM_ALGO_REDUCE", "chain", REDUCE, MAX_COUNT, 1u << 2},
    {"alltoall(in place)", NULL, NULL, ALLTOALL, 256, 1u << 1},
    {"alltoallv", NULL, NULL, ALLTOALLV, 16, 1u << 2},
    /* several at once: each says out of memory, the others name one */
    {"allreduce(ring), ranks 1 and 2", "MSR_COMM_ALGO_ALLREDUCE", "ring", ALLREDUCE, MAX_COUNT,
     (1u << 1) | (1u << 2)},
    {"reduce(binomial), ranks 0, 2 and 3", "MSR_COMM_ALGO_REDUCE", "binomial", REDUCE, 256,
     (1u << 0) | (1u << 2) | (1u << 3)},
    /* 6 ranks and more: an allgather's start allocates only past the
     * engine's inline op slots (2 (n - 1) > 8); the last members of a
     * group not a power of two */
    {"allgather(direct)", "MSR_COMM_ALGO_ALLGATHER", "direct", ALLGATHER, 64, 1u << 1, 6},
    {"allgather(ring)", "MSR_COMM_ALGO_ALLGATHER", "ring", ALLGATHER, MAX_COUNT, 1u << 3, 6},
    {"allgather(direct), rank 5", "MSR_COMM_ALGO_ALLGATHER", "direct", ALLGATHER, 64, 1u << 5, 6},
    {"allgather(ring), rank 5", "MSR_COMM_ALGO_ALLGATHER", "ring", ALLGATHER, MAX_COUNT, 1u << 5,
     6},
    {"allgather(ring), ranks 0 and 4", "MSR_COMM_ALGO_ALLGATHER", "ring", ALLGATHER, MAX_COUNT,
     (1u << 0) | (1u << 4), 6},
    {"allreduce(rd), rank 5", "MSR_COMM_ALGO_ALLREDUCE", "rd", ALLREDUCE, 256, 1u << 5, 6},
    {"allreduce(ring), rank 4", "MSR_COMM_ALGO_ALLREDUCE", "ring", ALLREDUCE, MAX_COUNT, 1u << 4,
     6},
    /* 8 ranks */
    {"allgather(direct), rank 7", "MSR_COMM_ALGO_ALLGATHER", "direct", ALLGATHER, 64, 1u << 7, 8},
    {"allgather(ring), ranks 6 and 7", "MSR_COMM_ALGO_ALLGATHER", "ring", ALLGATHER, MAX_COUNT,
     (1u << 6) | (1u << 7), 8},
};

static float g_send[MAX_NP * MAX_COUNT], g_recv[MAX_NP * MAX_COUNT];

static msr_status_t call(msr_comm_t *c, const oom_case_t *k)
{
    uint64_t counts[MAX_NP], displs[MAX_NP];
    for (int j = 0; j < MAX_NP; j++) {
        counts[j] = k->count;
        displs[j] = (uint64_t)j * k->count;
    }
    switch (k->call) {
    case ALLREDUCE:
        return msr_comm_allreduce(c, g_send, g_recv, k->count, MSR_DTYPE_F32, MSR_OP_SUM);
    case REDUCE_SCATTER:
        return msr_comm_reduce_scatter(c, g_send, g_recv, k->count, MSR_DTYPE_F32, MSR_OP_SUM);
    case ALLGATHER:
        return msr_comm_allgather(c, g_send, g_recv, k->count, MSR_DTYPE_F32);
    case BROADCAST:
        return msr_comm_broadcast(c, g_recv, k->count, MSR_DTYPE_F32, 0);
    case REDUCE:
        return msr_comm_reduce(c, g_send, g_recv, k->count, MSR_DTYPE_F32, MSR_OP_SUM, 0);
    case ALLTOALL:
        return msr_comm_alltoall(c, MSR_IN_PLACE, g_recv, k->count, MSR_DTYPE_F32);
    default:
        return msr_comm_alltoallv(c, g_send, counts, displs, g_recv, counts, displs, MSR_DTYPE_F32);
    }
}

/* A member that did not fail must name one that did. */
static void check_named(const char *what, unsigned who, const char *err)
{
    for (int j = 0; j < MAX_NP; j++) {
        char named[64];
        snprintf(named, sizeof named, "rank %d of the communicator", j);
        if ((who >> j & 1u) && strstr(err, named) != NULL && strstr(err, "out of memory"))
            return;
    }
    fail("%s: the error '%s' names no failing member and no cause", what, err);
}

/* A communicator of its own (the failure breaks it) with the case's
 * algorithm, and a deadline no wait of the test reaches. */
static msr_comm_t *fresh(msr_comm_t *world, const char *var, const char *algo)
{
    if (var != NULL)
        setenv(var, algo, 1);
    msr_comm_t *c;
    OK(msr_comm_split(world, 0, msr_comm_rank(world), &c));
    if (var != NULL)
        unsetenv(var);
    msr_comm_set_timeout(c, 300000);
    return c;
}

/* What a member's call or the barrier after it ended with: MSR_ERR_NO_MEMORY,
 * saying out of memory on a failing member whose own allocation failed,
 * else naming a failing member (one that failed first told the rest). */
static void check_failed(const oom_case_t *k, const char *what, msr_status_t st, int own)
{
    if (st != MSR_ERR_NO_MEMORY)
        fail("%s returned %s, want MSR_ERR_NO_MEMORY", what, msr_status_name(st));
    if (own && strstr(msr_last_error(), "out of memory") == NULL)
        fail("%s: the error '%s' does not say out of memory", what, msr_last_error());
    if (!own)
        check_named(k->name, k->who, msr_last_error());
}

/* Whether a broadcast's member me (root 0) receives through a failing
 * member: the binomial tree's parent of vr is vr with its lowest set bit
 * cleared (comm/ucx/coll_rooted.c). */
static int bcast_waits_on(int me, unsigned who)
{
    for (int v = me; v != 0;) {
        v &= v - 1;
        if (who >> v & 1u)
            return 1;
    }
    return 0;
}

/* Whether a member that is not failing must see the call itself fail. */
static int call_must_fail(const oom_case_t *k, int me)
{
    if (k->call == REDUCE)
        return me == 0;
    if (k->call == BROADCAST)
        return bcast_waits_on(me, k->who);
    return 1;
}

/* The failing members' allocation fails inside the call. A member whose
 * part is only sends (a reduce's leaves) or that waits on no failing
 * member (a broadcast's other branches) may finish first; every other
 * member's call fails, and so does everyone's barrier on the communicator
 * after it (the failing members are no longer in it), at once. */
static void one_case(msr_comm_t *world, const oom_case_t *k)
{
    int me = msr_comm_rank(world), mine = (int)(k->who >> me & 1u);
    snprintf(g_case, sizeof g_case, "%s", k->name);
    msr_comm_t *c = fresh(world, k->force_var, k->algo);
    OK(msr_comm_barrier(c)); /* made on every member before any fails */
    if (mine)
        msr_alloc_fail_at(0);
    msr_status_t st = call(c, k);
    int64_t fired = msr_alloc_failed();
    msr_alloc_fail_at(-1);
    if (k->who == (1u << me) && !fired)
        fail("no allocation was failed (the call returned %s)", msr_status_name(st));
    if (st != MSR_OK || mine || call_must_fail(k, me))
        check_failed(k, "the call", st, (int)fired);
    char err[256];
    snprintf(err, sizeof err, "%s", st == MSR_OK ? "finished its part" : msr_last_error());
    check_failed(k, "the barrier after", msr_comm_barrier(c), (int)fired);
    if (msr_comm_status(c) != MSR_ERR_NO_MEMORY)
        fail("the communicator is %s after, want broken with MSR_ERR_NO_MEMORY",
             msr_status_name(msr_comm_status(c)));
    printf("oom %s: rank %d: %s\n", k->name, me, err);
    msr_comm_destroy(c);
    OK(msr_comm_allreduce(world, MSR_IN_PLACE, &fired, 1, MSR_DTYPE_I64, MSR_OP_SUM));
    if (fired < 1)
        fail("no member's allocation was failed");
    g_case[0] = '\0';
}

/* The request itself: rank 2 posts more operations than the engine keeps
 * free, so one of them allocates its request, which fails; the others'
 * posts or waits end in MSR_ERR_NO_MEMORY naming rank 2. */
static void request_case(msr_comm_t *world)
{
    int me = msr_comm_rank(world), who = 2;
    snprintf(g_case, sizeof g_case, "a request");
    msr_comm_t *c = fresh(world, "MSR_COMM_ALGO_ALLREDUCE", "rd");
    OK(msr_comm_barrier(c));
    msr_comm_req_t *reqs[POSTS];
    int posted = 0, failed;
    msr_status_t st = MSR_OK;
    if (me == who)
        msr_alloc_fail_at(0);
    for (; posted < POSTS; posted++) {
        st = msr_comm_iallreduce(c, g_send + posted, g_recv + posted, 1, MSR_DTYPE_F32, MSR_OP_SUM,
                                 &reqs[posted]);
        if (st != MSR_OK)
            break;
    }
    failed = msr_alloc_failed();
    msr_alloc_fail_at(-1);
    if (me == who && (!failed || st != MSR_ERR_NO_MEMORY))
        fail("%d posts: the last returned %s, the hook %s", posted, msr_status_name(st),
             failed ? "fired" : "did not fire");
    char err[512] = "";
    if (st != MSR_OK)
        snprintf(err, sizeof err, "%s", msr_last_error());
    for (int i = 0; i < posted; i++) {
        msr_status_t w = msr_comm_wait(reqs[i]);
        if (w != MSR_OK && w != MSR_ERR_NO_MEMORY)
            fail("operation %d ended with %s, want MSR_OK or MSR_ERR_NO_MEMORY", i,
                 msr_status_name(w));
        if (w != MSR_OK && err[0] == '\0') {
            st = w;
            snprintf(err, sizeof err, "%s", msr_last_error());
        }
    }
    if (st != MSR_ERR_NO_MEMORY)
        fail("no operation failed with MSR_ERR_NO_MEMORY (%d posted)", posted);
    if (me != who)
        check_named("a request", 1u << who, err);
    printf("oom a request: rank %d: %s\n", me, err);
    msr_comm_destroy(c);
    OK(msr_comm_barrier(world));
    g_case[0] = '\0';
}

/* Notices that come after their receive is gone: rank 0 destroys a
 * communicator first, the others after (each telling it that it left, in
 * a notice of the full abort notice's size); the engine's close must
 * receive them all, so that UCX warns of no unmatched message at exit
 * (test_comm_oom.sh looks for that warning). */
static void late_notices(msr_comm_t *world)
{
    msr_comm_t *c = fresh(world, NULL, NULL);
    OK(msr_comm_barrier(c));
    if (msr_comm_rank(world) == 0)
        msr_comm_destroy(c);
    OK(msr_comm_barrier(world));
    if (msr_comm_rank(world) != 0)
        msr_comm_destroy(c);
    OK(msr_comm_barrier(world));
}

int main(void)
{
    msr_ctx_t *ctx;
    msr_comm_t *world = worker_world(&ctx, 0);
    int np = msr_comm_size(world);
    if (np < 4 || np > MAX_NP)
        fail("needs 4 to %d ranks, has %d", MAX_NP, np);
    for (size_t i = 0; i < sizeof g_send / sizeof g_send[0]; i++)
        g_send[i] = (float)(i % 7);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (np >= cases[i].min_np && cases[i].who >> np == 0)
            one_case(world, &cases[i]);
    request_case(world);
    /* the world and a new communicator still work */
    msr_comm_t *c = fresh(world, NULL, NULL);
    float x = 1.0f;
    OK(msr_comm_allreduce(c, MSR_IN_PLACE, &x, 1, MSR_DTYPE_F32, MSR_OP_SUM));
    if (x != (float)np)
        fail("allreduce after: %g, want %d", (double)x, np);
    msr_comm_destroy(c);
    late_notices(world);
    msr_comm_destroy(world);
    if (g_rank == 0)
        printf("ok oom\n");
    msr_finalize(ctx);
    return 0;
}
