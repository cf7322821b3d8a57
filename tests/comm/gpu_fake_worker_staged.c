/* gpu_fake_worker's staged mode: the staged backend against the host
 * communicator on the same inputs, bit for bit (its checks are shared with
 * the nccl modes). */
#include "comm/nccl/gpu_impl.h"
#include "gpu_fake_worker.h"

/* ---- the staged backend against the host communicator ---- */

void gfw_vs_allreduce(pair_t *p, msr_dtype_t dt, msr_op_t op, size_t c, int salt)
{
    size_t b = c * msr_dtype_size(dt);
    unsigned char *in = xmalloc(b), *ho = xmalloc(b), *d1 = xmalloc(b), *d2 = xmalloc(b);
    gfw_fill(dt, in, c, p->me, salt, op);
    OK(msr_comm_allreduce(p->h, in, ho, c, dt, op));
    memset(d1, 0xee, b);
    OK(msr_comm_allreduce(p->d, in, d1, c, dt, op));
    gfw_same(d1, ho, b, "allreduce");
    memcpy(d2, in, b);
    OK(msr_comm_allreduce(p->d, MSR_IN_PLACE, d2, c, dt, op));
    gfw_same(d2, ho, b, "allreduce in place");
    free(in);
    free(ho);
    free(d1);
    free(d2);
}

void gfw_vs_reduce_scatter(pair_t *p, msr_dtype_t dt, msr_op_t op, size_t c, int salt)
{
    size_t es = msr_dtype_size(dt), b = c * es, all = (size_t)p->n * b;
    unsigned char *in = xmalloc(all), *ho = xmalloc(b), *d1 = xmalloc(b), *d2 = xmalloc(all);
    gfw_fill(dt, in, c * (size_t)p->n, p->me, salt, op);
    OK(msr_comm_reduce_scatter(p->h, in, ho, c, dt, op));
    OK(msr_comm_reduce_scatter(p->d, in, d1, c, dt, op));
    gfw_same(d1, ho, b, "reduce_scatter");
    memcpy(d2, in, all);
    OK(msr_comm_reduce_scatter(p->d, MSR_IN_PLACE, d2, c, dt, op));
    gfw_same(d2 + (size_t)p->me * b, ho, b, "reduce_scatter MSR_IN_PLACE");
    memcpy(d2, in, all);
    OK(msr_comm_reduce_scatter(p->d, d2, d2 + (size_t)p->me * b, c, dt, op));
    gfw_same(d2 + (size_t)p->me * b, ho, b, "reduce_scatter in place (NCCL style)");
    free(in);
    free(ho);
    free(d1);
    free(d2);
}

void gfw_vs_allgather(pair_t *p, msr_dtype_t dt, size_t c, int salt)
{
    size_t b = c * msr_dtype_size(dt), all = (size_t)p->n * b;
    unsigned char *in = xmalloc(b), *ho = xmalloc(all), *d1 = xmalloc(all);
    gfw_fill(dt, in, c, p->me, salt, MSR_OP_SUM);
    OK(msr_comm_allgather(p->h, in, ho, c, dt));
    OK(msr_comm_allgather(p->d, in, d1, c, dt));
    gfw_same(d1, ho, all, "allgather");
    memset(d1, 0xee, all);
    memcpy(d1 + (size_t)p->me * b, in, b);
    OK(msr_comm_allgather(p->d, MSR_IN_PLACE, d1, c, dt));
    gfw_same(d1, ho, all, "allgather in place");
    free(in);
    free(ho);
    free(d1);
}

void gfw_vs_rooted(pair_t *p, msr_dtype_t dt, msr_op_t op, size_t c, int root, int salt)
{
    size_t b = c * msr_dtype_size(dt);
    unsigned char *in = xmalloc(b), *hb = xmalloc(b), *db = xmalloc(b), *ho = xmalloc(b),
                  *d1 = xmalloc(b);
    gfw_fill(dt, in, c, p->me, salt, op);
    /* broadcast: non-roots start from garbage */
    memset(hb, 0x5a, b);
    memset(db, 0x5a, b);
    if (p->me == root) {
        memcpy(hb, in, b);
        memcpy(db, in, b);
    }
    OK(msr_comm_broadcast(p->h, hb, c, dt, root));
    OK(msr_comm_broadcast(p->d, db, c, dt, root));
    gfw_same(db, hb, b, "broadcast");
    /* reduce: out of place, then in place at the root */
    memset(ho, 0xee, b);
    memset(d1, 0xee, b);
    OK(msr_comm_reduce(p->h, in, ho, c, dt, op, root));
    OK(msr_comm_reduce(p->d, in, d1, c, dt, op, root));
    gfw_same(d1, ho, b, "reduce (the root's result, the others' untouched buffer)");
    if (p->me == root) {
        memcpy(d1, in, b);
        OK(msr_comm_reduce(p->d, MSR_IN_PLACE, d1, c, dt, op, root));
        gfw_same(d1, ho, b, "reduce in place");
    } else {
        OK(msr_comm_reduce(p->d, in, NULL, c, dt, op, root));
    }
    free(in);
    free(hb);
    free(db);
    free(ho);
    free(d1);
}

void gfw_vs_alltoall(pair_t *p, msr_dtype_t dt, size_t c, int salt)
{
    size_t all = (size_t)p->n * c * msr_dtype_size(dt);
    unsigned char *in = xmalloc(all), *ho = xmalloc(all), *d1 = xmalloc(all);
    gfw_fill(dt, in, c * (size_t)p->n, p->me, salt, MSR_OP_SUM);
    OK(msr_comm_alltoall(p->h, in, ho, c, dt));
    OK(msr_comm_alltoall(p->d, in, d1, c, dt));
    gfw_same(d1, ho, all, "alltoall");
    memcpy(d1, in, all);
    OK(msr_comm_alltoall(p->d, MSR_IN_PLACE, d1, c, dt));
    gfw_same(d1, ho, all, "alltoall in place");
    free(in);
    free(ho);
    free(d1);
}

/* Counts that differ per pair of ranks, with gaps between the blocks (the
 * gaps must stay untouched). */
void gfw_vs_alltoallv(pair_t *p, msr_dtype_t dt, size_t unit)
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
    gfw_fill(dt, in, so, p->me, 3, MSR_OP_SUM);
    memset(ho, 0x77, ro * es);
    memset(d1, 0x77, ro * es);
    OK(msr_comm_alltoallv(p->h, in, sc, sd, ho, rc, rd, dt));
    OK(msr_comm_alltoallv(p->d, in, sc, sd, d1, rc, rd, dt));
    gfw_same(d1, ho, ro * es, "alltoallv (gaps included)");
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
    gfw_fill(MSR_DTYPE_F32, out, c, p->me, 9, MSR_OP_SUM);
    gfw_fill(MSR_DTYPE_F32, want, c, from, 9, MSR_OP_SUM);
    msr_comm_req_t *rq[2];
    OK(msr_comm_irecv(p->d, got, c, MSR_DTYPE_F32, from, 0, &rq[0]));
    OK(msr_comm_isend(p->d, out, c, MSR_DTYPE_F32, to, 0, &rq[1]));
    OK(msr_comm_wait_all(rq, 2));
    gfw_same(got, want, c * 4, "p2p ring");
    /* tags other than 0 are refused on device communicators, which stay
     * usable */
    EXPECT(msr_comm_send(p->d, out, c, MSR_DTYPE_F32, to, 5), MSR_ERR_UNSUPPORTED);
    /* and so are receives from any source */
    int src = -7;
    msr_comm_req_t *q = NULL;
    EXPECT(msr_comm_recv_any(p->d, got, c, MSR_DTYPE_F32, 0, &src), MSR_ERR_UNSUPPORTED);
    EXPECT(msr_comm_irecv_any(p->d, got, c, MSR_DTYPE_F32, 0, &src, &q), MSR_ERR_UNSUPPORTED);
    if (src != -7 || q != NULL)
        fail("a refused receive from any source wrote its outputs");
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
        gfw_fill(MSR_DTYPE_F32, in[k], sizes[k], p->me, 10 + k, MSR_OP_SUM);
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
        gfw_same(dout[k], ho[k], sizes[k] * 4, "iallreduce in flight with others");
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
                gfw_vs_allreduce(p, dt, (msr_op_t)op, c, (int)(t * 10 + ci));
            }
            setcase("%s: reduce_scatter %s count %zu", label, msr_dtype_name(dt), c);
            gfw_vs_reduce_scatter(p, dt, MSR_OP_SUM, c, (int)ci);
            setcase("%s: allgather %s count %zu", label, msr_dtype_name(dt), c);
            gfw_vs_allgather(p, dt, c, (int)ci);
            setcase("%s: broadcast/reduce %s count %zu", label, msr_dtype_name(dt), c);
            gfw_vs_rooted(p, dt, MSR_OP_MAX, c, (int)(ci % (size_t)p->n), (int)ci);
            setcase("%s: alltoall %s count %zu", label, msr_dtype_name(dt), c);
            gfw_vs_alltoall(p, dt, c, (int)ci);
        }
    }
    /* large: the UCX ring under the staging (random floats: the bits must
     * still be the host communicator's) */
    setcase("%s: large allreduce", label);
    gfw_vs_allreduce(p, MSR_DTYPE_F32, MSR_OP_SUM, 300001, 4);
    gfw_vs_allreduce(p, MSR_DTYPE_F32, MSR_OP_AVG, 300001, 9);
    setcase("%s: large reduce_scatter", label);
    gfw_vs_reduce_scatter(p, MSR_DTYPE_BF16, MSR_OP_SUM, 100003, 2);
    setcase("%s: rooted at every rank", label);
    for (int r = 0; r < p->n; r++)
        gfw_vs_rooted(p, MSR_DTYPE_I64, MSR_OP_SUM, 77, r, r);
    setcase("%s: alltoallv", label);
    gfw_vs_alltoallv(p, MSR_DTYPE_F32, 5);
    gfw_vs_alltoallv(p, MSR_DTYPE_U8, 1000);
    setcase("%s: barrier", label);
    OK(msr_comm_barrier(p->d));
    setcase("%s: p2p", label);
    vs_p2p(p);
}

/* A ring of c-byte transfers, blocking (even ranks send first, odd ones
 * receive first), so each transfer has the cached block to itself. */
static void vs_ring(pair_t *p, size_t c)
{
    int n = p->n, to = (p->me + 1) % n, from = (p->me + n - 1) % n;
    unsigned char *out = xmalloc(c), *got = xmalloc(c), *want = xmalloc(c);
    gfw_fill(MSR_DTYPE_U8, out, c, p->me, 9, MSR_OP_SUM);
    gfw_fill(MSR_DTYPE_U8, want, c, from, 9, MSR_OP_SUM);
    for (int step = 0; step < 2; step++) {
        if ((p->me + step) % 2 == 0)
            OK(msr_comm_send(p->d, out, c, MSR_DTYPE_U8, to, 0));
        else
            OK(msr_comm_recv(p->d, got, c, MSR_DTYPE_U8, from, 0));
    }
    gfw_same(got, want, c, "p2p ring");
    free(out);
    free(got);
    free(want);
}

/* Every collective, each on a fresh communicator, with its pinned block
 * exactly the staging unit (GPU_STAGED_UNIT bytes), then one element (a
 * byte) per block past it: the cached block is made one unit long at the
 * unit and two units long one past it; the results are the host
 * communicator's, bit for bit. */
static void at_unit(msr_comm_t *world, gpu_fake_t *f)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    const size_t u = GPU_STAGED_UNIT;
    static const char *const names[] = {"allreduce",        "reduce_scatter", "allgather",
                                        "broadcast/reduce", "alltoall",       "send/recv"};
    for (int past = 0; past < 2; past++)
        for (int k = 0; k < 6; k++) {
            int blocks = k == 1 || k == 2 || k == 4; /* a block per rank */
            if (blocks && u % (size_t)n)
                continue; /* no count puts n blocks exactly at the unit */
            size_t c = (blocks ? u / (size_t)n : u) + (size_t)past;
            setcase("at the staging unit: %s of %zu bytes%s", names[k], c,
                    blocks ? " per rank" : "");
            msr_comm_t *d = gfw_make(world, f, MSR_COMM_STAGED);
            pair_t p = {world, d, n, me};
            f->host_last = 0;
            if (k == 0)
                gfw_vs_allreduce(&p, MSR_DTYPE_U8, MSR_OP_SUM, c, past);
            else if (k == 1)
                gfw_vs_reduce_scatter(&p, MSR_DTYPE_U8, MSR_OP_SUM, c, past);
            else if (k == 2)
                gfw_vs_allgather(&p, MSR_DTYPE_U8, c, past);
            else if (k == 3)
                gfw_vs_rooted(&p, MSR_DTYPE_U8, MSR_OP_MAX, c, n - 1, past);
            else if (k == 4)
                gfw_vs_alltoall(&p, MSR_DTYPE_U8, c, past);
            else
                vs_ring(&p, c);
            if (f->host_last != u * (size_t)(1 + past))
                fail("the pinned block has %zu bytes, want %zu", f->host_last,
                     u * (size_t)(1 + past));
            g_checks++;
            msr_comm_destroy(d);
        }
}

void gfw_mode_staged(msr_ctx_t *ctx, msr_comm_t *world)
{
    gpu_fake_t f;
    gpu_fake_init(&f);
    f.devices = 1; /* every rank of the node on GPU 0 */
    int dev = -1;
    setcase("select");
    OK(msr_gpu_select_with(ctx, &f.api, &dev));
    CHECK(dev == 0);
    setcase("make");
    msr_comm_t *d = gfw_make(world, &f, 0);
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
    at_unit(world, &f);
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
    gfw_vs_allreduce(&ps, MSR_DTYPE_F32, MSR_OP_SUM, 5000, 1);
    gfw_vs_allgather(&ps, MSR_DTYPE_I32, 33, 1);
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
    gfw_vs_allreduce(&pd, MSR_DTYPE_F64, MSR_OP_MIN, 999, 2);
    gfw_vs_alltoall(&pd, MSR_DTYPE_U8, 100, 2);

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
