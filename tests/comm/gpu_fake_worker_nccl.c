/* gpu_fake_worker's modes of the NCCL backend's control flow: nccl, one
 * (a single rank) and choice (the backend decision and its failures). */
#include "gpu_fake_worker.h"

void gfw_mode_nccl(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    gpu_fake_t f;
    gpu_fake_init(&f);
    f.devices = 8; /* a GPU per rank */
    f.init_polls = 5;
    f.settle_polls = 2;
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    setcase("make");
    msr_comm_t *d = gfw_make(world, &f, 0);
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
    msr_comm_t *d2 = gfw_make(world, &f, 0);
    CHECK(f.inits == 2);
    CHECK(memcmp(first, f.id, sizeof first) != 0); /* a new id, under a new key */

    setcase("operations");
    float buf[256];
    gfw_fill(MSR_DTYPE_F32, buf, 256, me, 1, MSR_OP_SUM);
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
    EXPECT(msr_comm_recv_any(d, buf, 4, MSR_DTYPE_F32, 0, NULL), MSR_ERR_UNSUPPORTED);
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
void gfw_mode_one(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    for (int staged = 0; staged < 2; staged++) {
        gpu_fake_t f;
        gpu_fake_init(&f);
        f.settle_polls = 3;
        setcase("one rank, %s", staged ? "staged" : "nccl");
        msr_comm_t *d = gfw_make(world, &f, staged ? MSR_COMM_STAGED : 0);
        CHECK(strcmp(msr_comm_backend(d), staged ? "staged" : "nccl") == 0);
        pair_t p = {world, d, 1, 0};
        gfw_vs_allreduce(&p, MSR_DTYPE_F32, MSR_OP_SUM, 1000, 1);
        gfw_vs_reduce_scatter(&p, MSR_DTYPE_I32, MSR_OP_SUM, 100, 1);
        gfw_vs_allgather(&p, MSR_DTYPE_F64, 100, 1);
        gfw_vs_rooted(&p, MSR_DTYPE_BF16, MSR_OP_SUM, 100, 0, 1);
        gfw_vs_alltoall(&p, MSR_DTYPE_U8, 100, 1); /* nccl: in place through a device copy */
        gfw_vs_alltoallv(&p, MSR_DTYPE_F32, 7);    /* nccl: a group of send and recv */
        setcase("one rank, %s: send to itself, and of the wrong length",
                staged ? "staged" : "nccl");
        float out[100], in[100];
        gfw_fill(MSR_DTYPE_F32, out, 100, 0, 5, MSR_OP_SUM);
        msr_comm_req_t *q[2];
        OK(msr_comm_isend(d, out, 100, MSR_DTYPE_F32, 0, 0, &q[0]));
        OK(msr_comm_irecv(d, in, 100, MSR_DTYPE_F32, 0, 0, &q[1]));
        OK(msr_comm_wait_all(q, 2));
        gfw_same(in, out, sizeof out, "send to itself");
        OK(msr_comm_isend(d, out, 4, MSR_DTYPE_F32, 0, 0, &q[0]));
        EXPECT(msr_comm_recv(d, in, 2, MSR_DTYPE_F32, 0, 0), MSR_ERR_TRUNCATED);
        /* nccl: the send fails too (it never reaches NCCL); staged: the host
         * communicator's send is delivered, cut */
        EXPECT(msr_comm_wait(q[0]), staged ? MSR_OK : MSR_ERR_TRUNCATED);
        EXPECT(msr_comm_status(d), MSR_OK);
        OK(msr_comm_barrier(d));
        msr_comm_destroy(d);
        CHECK(f.host_live == 0 && f.dev_live == 0 && f.events_live == 0 && f.comms_live == 0);
        CHECK(f.aborts == 0);
    }
}

/* The decision and its failures, the same on every member. */
void gfw_mode_choice(msr_ctx_t *ctx, msr_comm_t *world)
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
    d = gfw_make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), "nccl") == 0);
    msr_comm_destroy(d);
    f.devices = 1;
    d = gfw_make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), "staged") == 0);
    msr_comm_destroy(d);

    setcase("forced: the flag, the environment");
    gpu_fake_init(&f);
    d = gfw_make(world, &f, MSR_COMM_STAGED);
    CHECK(strcmp(msr_comm_backend(d), "staged") == 0);
    msr_comm_destroy(d);
    setenv("MSR_COMM_GPU", "staged", 1);
    d = gfw_make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), "staged") == 0);
    msr_comm_destroy(d);
    setenv("MSR_COMM_GPU", "NCCL", 1);
    d = gfw_make(world, &f, 0);
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
    d = gfw_make(world, &f, 0);
    msr_comm_t *d2 = NULL;
    EXPECT(msr_gpu_comm_create(d, 0, &f.api, &d2), MSR_ERR_INVALID_ARG);
    msr_comm_destroy(d);
    CHECK(f.comms_live == 0 && f.host_live == 0 && f.dev_live == 0 && f.streams_live == 0);
    setcase("the world is still fine");
    OK(msr_comm_barrier(world));
}

/* NCCL operations that never finish. */

/* The message sizes (bytes) sent to the right and the receive buffers that
 * do not fit them: longer by a little, into none, shorter, and longer by a
 * little past a MiB (as comm_worker's p2p lengths on the host). */
static const size_t cut_sent[] = {16, 8, 8, (1u << 20) + 8, 1u << 20};
static const size_t cut_room[] = {8, 0, 16, 1u << 20, (1u << 20) + 8};

/* The receive's error names the sender and both sizes, as the host
 * communicator's does; the send's names the receiver and both sizes. */
static void expect_cut(msr_status_t st, int recv, int peer, size_t sent, size_t room)
{
    if (st != MSR_ERR_TRUNCATED)
        fail("%s of %zu bytes into %zu: %s, expected MSR_ERR_TRUNCATED", recv ? "recv" : "send",
             sent, room, msr_status_name(st));
    char want[160];
    if (!recv)
        snprintf(want, sizeof want,
                 "send: rank %d posted a receive of %zu bytes for this message of %zu", peer, room,
                 sent);
    else if (sent > room)
        snprintf(want, sizeof want,
                 "recv: the message from rank %d has %zu bytes, more than the buffer's %zu", peer,
                 sent, room);
    else
        snprintf(want, sizeof want,
                 "recv: the message from rank %d has %zu bytes, fewer than the %zu expected", peer,
                 sent, room);
    if (strstr(msr_last_error(), want) == NULL)
        fail("%zu bytes into %zu: the error does not say \"%s\"", sent, room, want);
    g_checks++;
}

/* NCCL sends and receives whose lengths differ: both sides fail with
 * MSR_ERR_TRUNCATED at once (NCCL would hang or cut the message short),
 * nothing reaches NCCL, the communicator stays usable; lengths that agree
 * reach NCCL in the order posted, collectives posted behind them too. */
void gfw_mode_lengths(msr_ctx_t *ctx, msr_comm_t *world)
{
    (void)ctx;
    gpu_fake_t f;
    gpu_fake_init(&f);
    f.devices = 8; /* a GPU per rank */
    f.settle_polls = 2;
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    int right = (me + 1) % n, left = (me + n - 1) % n;
    setcase("make");
    msr_comm_t *d = gfw_make(world, &f, 0);
    CHECK(strcmp(msr_comm_backend(d), "nccl") == 0);
    msr_comm_set_timeout(d, 300000); /* past the test's limit: no wait ends at it */
    size_t most = (1u << 20) + 8;
    unsigned char *out = xmalloc(most), *in = xmalloc(most);
    memset(out, me + 1, most);
    for (int nb = 0; nb < 2; nb++)
        for (size_t k = 0; k < sizeof cut_sent / sizeof cut_sent[0]; k++) {
            setcase("%zu bytes into %zu, %s", cut_sent[k], cut_room[k], nb ? "irecv" : "recv");
            int ops0 = f.ops;
            msr_comm_req_t *s = NULL, *q = NULL;
            OK(msr_comm_isend(d, out, cut_sent[k], MSR_DTYPE_U8, right, 0, &s));
            msr_status_t st;
            if (nb) {
                OK(msr_comm_irecv(d, in, cut_room[k], MSR_DTYPE_U8, left, 0, &q));
                st = msr_comm_wait(q);
            } else {
                st = msr_comm_recv(d, in, cut_room[k], MSR_DTYPE_U8, left, 0);
            }
            expect_cut(st, 1, left, cut_sent[k], cut_room[k]);
            expect_cut(msr_comm_wait(s), 0, right, cut_sent[k], cut_room[k]);
            CHECK(f.ops == ops0); /* nothing reached NCCL */
            EXPECT(msr_comm_status(d), MSR_OK);
            OK(msr_comm_barrier(world));
        }
    setcase("at the bound, and a collective posted behind the transfers");
    int ops0 = f.ops;
    msr_comm_req_t *q[3];
    OK(msr_comm_irecv(d, in, most, MSR_DTYPE_U8, left, 0, &q[0]));
    OK(msr_comm_isend(d, out, most, MSR_DTYPE_U8, right, 0, &q[1]));
    OK(msr_comm_iallreduce(d, out, in, 16, MSR_DTYPE_F32, MSR_OP_SUM, &q[2]));
    void *side = NULL;
    OK(f.api.stream_create(&f.api, &side));
    OK(msr_comm_wait_stream(q[2], side)); /* waits until it is queued */
    OK(msr_comm_wait_all(q, 3));
    CHECK(f.ops == ops0 + 3);
    setcase("blocking, each way round");
    if (me % 2 == 0) {
        OK(msr_comm_send(d, out, 1000, MSR_DTYPE_F32, right, 0));
        OK(msr_comm_recv(d, in, 1000, MSR_DTYPE_F32, left, 0));
    } else {
        OK(msr_comm_recv(d, in, 1000, MSR_DTYPE_F32, left, 0));
        OK(msr_comm_send(d, out, 1000, MSR_DTYPE_F32, right, 0));
    }
    OK(msr_comm_barrier(d));
    msr_comm_destroy(d);
    f.api.stream_destroy(&f.api, side);
    CHECK(f.aborts == 0 && f.comms_live == 0);
    CHECK(f.dev_live == 0 && f.events_live == 0 && f.streams_live == 0);
    free(out);
    free(in);
}
