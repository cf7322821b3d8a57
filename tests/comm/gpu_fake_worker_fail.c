/* gpu_fake_worker's failure modes: operations that never finish, a member
 * that gives up, NCCL's asynchronous error, an init that never finishes
 * and a rank killed (nccl and staged). */
#include "gpu_fake_worker.h"

void gfw_mode_timeout(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    gpu_fake_t f;
    gpu_fake_init(&f);
    f.hang = 1;
    msr_comm_t *d = gfw_make(world, &f, 0), *d2 = gfw_make(world, &f, 0);
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
void gfw_mode_notify(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    gpu_fake_t f;
    gpu_fake_init(&f);
    f.hang = 1;
    int me = msr_comm_rank(world);
    msr_comm_t *d = gfw_make(world, &f, 0);
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
void gfw_mode_asyncerr(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    gpu_fake_t f;
    gpu_fake_init(&f);
    int me = msr_comm_rank(world);
    f.hang = 1;
    f.async_status = MSR_ERR_PEER_LOST; /* ncclRemoteError, as cuda_api.c maps it */
    msr_comm_t *d = gfw_make(world, &f, 0);
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

void gfw_mode_inittimeout(msr_ctx_t *ctx, msr_comm_t *world)
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
void gfw_mode_kill(msr_ctx_t *ctx, msr_comm_t *world, int staged)
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
    msr_comm_t *d = gfw_make(world, &f, 0);
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
