/* comm_worker's modes of several operations at once: samecomm and inflight
 * (non-blocking operations in flight on one or two communicators) and
 * threads (three threads on the world and its dups). */
#include "comm_worker.h"

/* ---- several allreduces in flight on one communicator ---- */

static uint64_t hash_bytes(const void *v, size_t n)
{
    const unsigned char *p = v;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Non-blocking in-place allreduces of random floats, several posted before
 * any is waited for, on one communicator (small ones take the
 * shared-memory path, whose slots the operations take turns on): every
 * rank must get the same bits, close to the sum computed here. */
void cw_mode_samecomm(msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    enum { K = 7 };
    const size_t counts[K] = {7, 500, 500, 1200, 37, 500, 70000};
    float *buf[K], *want[K];
    msr_comm_req_t *req[K];
    for (int round = 0; round < 30; round++) {
        snprintf(g_case, sizeof g_case, "samecomm round %d", round);
        for (int k = 0; k < K; k++) {
            buf[k] = xmalloc(counts[k] * sizeof(float));
            want[k] = xmalloc(counts[k] * sizeof(float));
            for (size_t i = 0; i < counts[k]; i++) {
                want[k][i] = 0;
                for (int r = 0; r < n; r++) {
                    uint64_t x = hash_bytes(&(uint64_t){(uint64_t)round << 40 | (uint64_t)k << 32 |
                                                        (uint64_t)r << 24 | i},
                                            8);
                    float v = (float)(x % 2000001) / 1000000.0f - 1.0f;
                    want[k][i] += v;
                    if (r == me)
                        buf[k][i] = v;
                }
            }
        }
        for (int k = 0; k < K; k++)
            OK(msr_comm_iallreduce(world, MSR_IN_PLACE, buf[k], counts[k], MSR_DTYPE_F32,
                                   MSR_OP_SUM, &req[k]));
        for (int k = K - 1; k >= 0; k--) /* waited for in the reverse order */
            OK(msr_comm_wait(req[k]));
        for (int k = 0; k < K; k++) {
            for (size_t i = 0; i < counts[k]; i++)
                if (fabsf(buf[k][i] - want[k][i]) > 1e-5f * (float)n)
                    fail("op %d at %zu: %.9g, expected about %.9g", k, i, buf[k][i], want[k][i]);
            int64_t h[2];
            h[0] = h[1] = (int64_t)(hash_bytes(buf[k], counts[k] * sizeof(float)) >> 1);
            OK(msr_comm_allreduce(world, MSR_IN_PLACE, &h[0], 1, MSR_DTYPE_I64, MSR_OP_MIN));
            OK(msr_comm_allreduce(world, MSR_IN_PLACE, &h[1], 1, MSR_DTYPE_I64, MSR_OP_MAX));
            if (h[0] != h[1])
                fail("op %d (%zu floats): the ranks' results differ", k, counts[k]);
            free(buf[k]);
            free(want[k]);
        }
    }
}

/* ---- several operations in flight on two communicators ---- */

void cw_mode_inflight(msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    msr_comm_t *a = NULL, *b = NULL;
    OK(msr_comm_dup(world, 0, &a));
    OK(msr_comm_split(world, 0, -me, &b)); /* reversed ranks */
    int bme = msr_comm_rank(b);
    enum { K = 6, COUNT = 50021 };
    float *in[K], *out[K];
    msr_comm_req_t *req[K];
    for (int round = 0; round < 20; round++) {
        snprintf(g_case, sizeof g_case, "inflight round %d", round);
        for (int k = 0; k < K; k++) {
            in[k] = xmalloc(COUNT * sizeof(float) * (size_t)n);
            out[k] = xmalloc(COUNT * sizeof(float) * (size_t)n);
            for (size_t i = 0; i < COUNT * (size_t)n; i++)
                in[k][i] = (float)((i + (size_t)k + (size_t)me) % 5);
        }
        size_t cnt = round % 2 ? COUNT : 7;
        OK(msr_comm_iallreduce(a, in[0], out[0], cnt, MSR_DTYPE_F32, MSR_OP_SUM, &req[0]));
        OK(msr_comm_iallgather(b, in[1], out[1], cnt, MSR_DTYPE_F32, &req[1]));
        OK(msr_comm_ibroadcast(a, in[2], cnt, MSR_DTYPE_F32, round % n, &req[2]));
        OK(msr_comm_ireduce_scatter(b, in[3], out[3], cnt, MSR_DTYPE_F32, MSR_OP_MAX, &req[3]));
        OK(msr_comm_iallreduce(b, in[4], out[4], cnt, MSR_DTYPE_F32, MSR_OP_MIN, &req[4]));
        OK(msr_comm_ibarrier(a, &req[5]));
        /* Even ranks finish b's first, odd ranks a's: only progress of
         * every operation in flight gets both through. */
        int order[K] = {1, 3, 4, 0, 2, 5};
        if (me % 2)
            for (int k = 0; k < K; k++)
                order[k] = k;
        if (round % 3 == 2) { /* polling with test */
            int left = K;
            while (left > 0)
                for (int k = 0; k < K; k++)
                    if (req[k]) {
                        msr_status_t st = msr_comm_test(&req[k]);
                        if (st == MSR_IN_PROGRESS)
                            continue;
                        if (st != MSR_OK)
                            fail("test of op %d: %s", k, msr_status_name(st));
                        left--;
                    }
        } else {
            for (int k = 0; k < K; k++)
                OK(msr_comm_wait(req[order[k]]));
        }
        for (size_t i = 0; i < cnt; i++) {
            float sum = 0, mn = 1e9f;
            for (int r = 0; r < n; r++) {
                sum += (float)((i + 0 + (size_t)r) % 5);
                float v = (float)((i + 4 + (size_t)r) % 5);
                mn = v < mn ? v : mn;
            }
            if (out[0][i] != sum || out[4][i] != mn)
                fail("allreduce at %zu: %g %g, expected %g %g", i, out[0][i], out[4][i], sum, mn);
            float bc = (float)((i + 2 + (size_t)(round % n)) % 5);
            if (in[2][i] != bc)
                fail("broadcast at %zu: %g, expected %g", i, in[2][i], bc);
            /* b ranks are reversed: block r of the gather is job rank n-1-r */
            for (int r = 0; r < n; r++) {
                float g = (float)((i + 1 + (size_t)(n - 1 - r)) % 5);
                if (out[1][(size_t)r * cnt + i] != g)
                    fail("allgather block %d at %zu", r, i);
            }
            float mx = -1;
            for (int r = 0; r < n; r++) {
                float v = (float)(((size_t)bme * cnt + i + 3 + (size_t)r) % 5);
                mx = v > mx ? v : mx;
            }
            if (out[3][i] != mx)
                fail("reduce_scatter at %zu: %g, expected %g", i, out[3][i], mx);
        }
        for (int k = 0; k < K; k++) {
            free(in[k]);
            free(out[k]);
        }
    }
    /* destroy with an operation in flight: it fails with MSR_ERR_CANCELED */
    msr_comm_t *c = NULL;
    OK(msr_comm_dup(world, 0, &c));
    float x = 1, y = 0;
    msr_comm_req_t *r = NULL;
    snprintf(g_case, sizeof g_case, "destroy in flight");
    OK(msr_comm_irecv(c, &y, 1, MSR_DTYPE_F32, (me + 1) % n, 99, &r));
    msr_comm_destroy(c);
    msr_status_t st = msr_comm_wait(r);
    if (st != MSR_ERR_CANCELED)
        fail("wait after destroy: %s, expected MSR_ERR_CANCELED", msr_status_name(st));
    (void)x;
    msr_comm_destroy(a);
    msr_comm_destroy(b);
}

/* ---- two threads: one on the world, one on a dup with its own worker,
 * and both on one shared engine through a split ---- */

typedef struct thr_arg {
    msr_comm_t *comm;
    int n, rounds;
    msr_status_t st;
    int bad;
} thr_arg_t;

static void *thr_allreduce(void *p)
{
    thr_arg_t *t = p;
    int64_t x[257], y[257];
    int me = msr_comm_rank(t->comm);
    for (int k = 0; k < t->rounds && t->st == MSR_OK; k++) {
        size_t cnt = k % 2 ? 257 : 3;
        for (size_t i = 0; i < cnt; i++)
            x[i] = me + (int64_t)i + k;
        t->st = msr_comm_allreduce(t->comm, x, y, cnt, MSR_DTYPE_I64, MSR_OP_SUM);
        for (size_t i = 0; t->st == MSR_OK && i < cnt; i++)
            if (y[i] != (int64_t)t->n * (t->n - 1) / 2 + t->n * ((int64_t)i + k))
                t->bad = 1;
    }
    return NULL;
}

void cw_mode_threads(msr_comm_t *world)
{
    int n = msr_comm_size(world);
    msr_comm_t *own = NULL, *shared = NULL;
    snprintf(g_case, sizeof g_case, "threads setup");
    OK(msr_comm_dup(world, MSR_COMM_OWN_WORKER, &own));
    OK(msr_comm_dup(world, 0, &shared));
    thr_arg_t args[3] = {
        {world, n, 300, MSR_OK, 0}, {own, n, 300, MSR_OK, 0}, {shared, n, 300, MSR_OK, 0}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        if (pthread_create(&th[i], NULL, thr_allreduce, &args[i]) != 0)
            fail("pthread_create");
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        snprintf(g_case, sizeof g_case, "thread %d", i);
        if (args[i].st != MSR_OK || args[i].bad)
            fail("thread %d: %s, wrong result %d", i, msr_status_name(args[i].st), args[i].bad);
    }
    msr_comm_destroy(shared);
    msr_comm_destroy(own);
}
