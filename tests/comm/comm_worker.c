/* The worker of the multi-rank communicator tests, started by the real msrun
 * (tests/comm/run.sh). `comm_worker MODE`:
 *   collectives  every collective, dtype and op against a serial reference;
 *                counts 0, 1, a prime and a large odd one; in place and not;
 *                on the world and on split sub-groups of sizes 1 to 8; with
 *                each algorithm forced in turn
 *   inflight     several non-blocking operations on two communicators at
 *                once, finished in different orders on different ranks
 *   p2p          send/recv, isend/irecv, tags, truncation, dup with its
 *                own worker
 *   threads      three threads at once: on the world, on a dup with its own
 *                worker, and on a dup sharing the world's engine
 *   determinism  random floats: the same bits on every rank and twice in a
 *                row; rank 0 prints a hash for run-to-run comparison
 *   kill         the last rank SIGKILLs itself in the middle of allreduces:
 *                the others must fail with MSR_ERR_PEER_LOST in time
 *                (1 MiB: the tiled shared-memory path on one node, the UCX
 *                ring across nodes)
 *   killring     the same with the UCX ring forced
 *   killsmall    the same with 8-byte allreduces (the shared-memory slots)
 *   killsmallbc  the same with 8-byte broadcasts from rank 0, killsmallag
 *   killsmallrs  with small allgathers and reduce-scatters: all through the
 *                slots (their messages name "(shm)")
 *   killsmallbcauto  killsmallbc without forcing: the slots, also on a
 *                machine with fewer CPUs than ranks
 *   small        every collective of the slots at the slot's size and one
 *                past, at the inline size and one past, every dtype and op;
 *                on the world, a dup with other slots and halves, then all
 *                three at once
 *   killhier     the same with the two-level allreduce forced (several nodes)
 *   killhierrs   the same with the two-level reduce-scatter (blocks routed
 *                through one member per node)
 *   killhierag   the same with the two-level allgather
 *   killhierbc   the same with two-level broadcasts from rank 0 (the
 *                chain of nodes; the victim is on its last node)
 *   killhierred  the same with two-level reduces to rank 0
 *                (the killhier modes check that the failure is that
 *                algorithm's: its message names it)
 *   leave        rank 0 destroys the world after a barrier and exits; the
 *                others, still holding it, go on among themselves on it
 *                (point to point): a member that left cleanly is not lost
 *   stop         rank 1 stops answering (it sleeps): the others must fail
 *                with MSR_ERR_TIMEOUT (or PEER_LOST from the aborts) in time
 * Every rank checks its own results; a failed check prints the case and
 * exits 1. Rank 0 prints "ok MODE" at the end. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "msrun/msrun.h"

static int g_rank = -1;
static char g_case[256];
static long g_checks; /* results compared, for the final line */
static int g_nodes;   /* msrun nodes in the job */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "comm_worker rank %d: FAIL [%s]: %s (last error: %s)\n", g_rank, g_case, msg,
            msr_last_error());
    fflush(stderr);
    _exit(1);
}

#define OK(expr)                                         \
    do {                                                 \
        msr_status_t st_ = (expr);                       \
        if (st_ != MSR_OK)                               \
            fail("%s: %s", #expr, msr_status_name(st_)); \
    } while (0)

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- element values, written independently of comm/reduce.c ---- */

static uint16_t to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static uint16_t to_f16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

/* Writes element i of dtype dt: integer types take iv (wrapping), float
 * types fv. */
static void put(msr_dtype_t dt, void *p, size_t i, int64_t iv, double fv)
{
    switch (dt) {
    case MSR_DTYPE_F32:
        ((float *)p)[i] = (float)fv;
        break;
    case MSR_DTYPE_F64:
        ((double *)p)[i] = fv;
        break;
    case MSR_DTYPE_F16:
        ((uint16_t *)p)[i] = to_f16((float)fv);
        break;
    case MSR_DTYPE_BF16:
        ((uint16_t *)p)[i] = to_bf16((float)fv);
        break;
    case MSR_DTYPE_I32:
        ((uint32_t *)p)[i] = (uint32_t)(uint64_t)iv;
        break;
    case MSR_DTYPE_I64:
        ((uint64_t *)p)[i] = (uint64_t)iv;
        break;
    case MSR_DTYPE_U8:
        ((uint8_t *)p)[i] = (uint8_t)(uint64_t)iv;
        break;
    }
}

static int is_float(msr_dtype_t dt)
{
    return dt == MSR_DTYPE_F32 || dt == MSR_DTYPE_F64 || dt == MSR_DTYPE_F16 ||
           dt == MSR_DTYPE_BF16;
}

/* The input of rank r at index i for op: small integers, so that sums and
 * products are exact in every type whatever the order. */
static int64_t input(msr_op_t op, msr_dtype_t dt, int r, uint64_t i)
{
    if (op == MSR_OP_PROD) {
        if ((r + i) % 4 == 1)
            return 2;
        return (r + 2 * i) % 5 == 0 ? -1 : 1;
    }
    int64_t v = (int64_t)((r * 5 + i * 3 + 1) % 7);
    return dt == MSR_DTYPE_U8 ? v : v - 3;
}

/* The reference reduction of index i over ranks 0..n-1, written to ref[i]. */
static void reference(msr_op_t op, msr_dtype_t dt, int n, uint64_t i, void *ref, size_t at)
{
    int64_t acc = input(op, dt, 0, i);
    for (int r = 1; r < n; r++) {
        int64_t x = input(op, dt, r, i);
        switch (op) {
        case MSR_OP_PROD:
            acc *= x;
            break;
        case MSR_OP_MIN:
            acc = x < acc ? x : acc;
            break;
        case MSR_OP_MAX:
            acc = x > acc ? x : acc;
            break;
        default:
            acc += x;
            break;
        }
    }
    if (op != MSR_OP_AVG) {
        put(dt, ref, at, acc, (double)acc);
        return;
    }
    if (!is_float(dt)) {
        put(dt, ref, at, acc / n, 0);
    } else if (dt == MSR_DTYPE_F64) {
        put(dt, ref, at, 0, (double)acc / (double)n);
    } else {
        float q = (float)acc / (float)n; /* one f32 division, rounded once */
        put(dt, ref, at, 0, (double)q);
    }
}

/* A value that identifies (a, b, k) in every type (for data movement). */
static void put_id(msr_dtype_t dt, void *p, size_t i, int a, int b, uint64_t k)
{
    int64_t v = (int64_t)((a * 37 + b * 11 + k * 7) % 251);
    put(dt, p, i, v, (double)v);
}

static void check_bytes(const void *got, const void *want, size_t count, size_t es,
                        const char *what)
{
    const unsigned char *g = got, *w = want;
    g_checks++;
    for (size_t i = 0; i < count; i++)
        if (memcmp(g + i * es, w + i * es, es) != 0) {
            unsigned long long gv = 0, wv = 0;
            memcpy(&gv, g + i * es, es);
            memcpy(&wv, w + i * es, es);
            fail("%s: element %zu of %zu is 0x%llx, expected 0x%llx", what, i, count, gv, wv);
        }
}

/* ---- the collectives ---- */

typedef struct tc {
    msr_comm_t *comm;
    const char *label;
    int n, me;
} tc_t;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        fail("out of memory for %zu bytes", n);
    return p;
}

static void check_allreduce(tc_t *t, msr_dtype_t dt, msr_op_t op, uint64_t count, int inplace)
{
    size_t es = msr_dtype_size(dt);
    unsigned char *in = xmalloc(count * es), *out = xmalloc(count * es), *ref = xmalloc(count * es);
    for (uint64_t i = 0; i < count; i++) {
        int64_t v = input(op, dt, t->me, i);
        put(dt, in, i, v, (double)v);
        reference(op, dt, t->n, i, ref, i);
    }
    memset(out, 0xee, count * es);
    if (inplace) {
        memcpy(out, in, count * es);
        OK(msr_comm_allreduce(t->comm, MSR_IN_PLACE, out, count, dt, op));
    } else {
        OK(msr_comm_allreduce(t->comm, in, out, count, dt, op));
    }
    check_bytes(out, ref, count, es, "allreduce");
    free(in);
    free(out);
    free(ref);
}

static void check_reduce_scatter(tc_t *t, msr_dtype_t dt, msr_op_t op, uint64_t rc, int inplace)
{
    size_t es = msr_dtype_size(dt), total = rc * (size_t)t->n;
    unsigned char *in = xmalloc(total * es), *out = xmalloc(total * es), *ref = xmalloc(rc * es);
    for (uint64_t i = 0; i < total; i++) {
        int64_t v = input(op, dt, t->me, i);
        put(dt, in, i, v, (double)v);
    }
    for (uint64_t j = 0; j < rc; j++)
        reference(op, dt, t->n, (uint64_t)t->me * rc + j, ref, j);
    memset(out, 0xee, total * es);
    unsigned char *mine;
    if (inplace == 1) { /* MSR_IN_PLACE: recvbuf is the whole input */
        memcpy(out, in, total * es);
        OK(msr_comm_reduce_scatter(t->comm, MSR_IN_PLACE, out, rc, dt, op));
        mine = out + (size_t)t->me * rc * es;
    } else if (inplace == 2) { /* NCCL style: recvbuf inside sendbuf */
        memcpy(out, in, total * es);
        mine = out + (size_t)t->me * rc * es;
        OK(msr_comm_reduce_scatter(t->comm, out, mine, rc, dt, op));
    } else {
        OK(msr_comm_reduce_scatter(t->comm, in, out, rc, dt, op));
        mine = out;
    }
    check_bytes(mine, ref, rc, es, "reduce_scatter");
    free(in);
    free(out);
    free(ref);
}

static void check_reduce(tc_t *t, msr_dtype_t dt, msr_op_t op, uint64_t count, int root,
                         int inplace)
{
    size_t es = msr_dtype_size(dt);
    unsigned char *in = xmalloc(count * es), *out = xmalloc(count * es), *ref = xmalloc(count * es);
    for (uint64_t i = 0; i < count; i++) {
        int64_t v = input(op, dt, t->me, i);
        put(dt, in, i, v, (double)v);
        reference(op, dt, t->n, i, ref, i);
    }
    memset(out, 0xee, count * es);
    if (inplace && t->me == root) {
        memcpy(out, in, count * es);
        OK(msr_comm_reduce(t->comm, MSR_IN_PLACE, out, count, dt, op, root));
    } else {
        OK(msr_comm_reduce(t->comm, in, t->me == root ? out : NULL, count, dt, op, root));
    }
    if (t->me == root)
        check_bytes(out, ref, count, es, "reduce");
    free(in);
    free(out);
    free(ref);
}

static void check_allgather(tc_t *t, msr_dtype_t dt, uint64_t sc, int inplace)
{
    size_t es = msr_dtype_size(dt), total = sc * (size_t)t->n;
    unsigned char *in = xmalloc(sc * es), *out = xmalloc(total * es), *ref = xmalloc(total * es);
    for (uint64_t k = 0; k < sc; k++)
        put_id(dt, in, k, t->me, 0, k);
    for (int r = 0; r < t->n; r++)
        for (uint64_t k = 0; k < sc; k++)
            put_id(dt, ref, (size_t)r * sc + k, r, 0, k);
    memset(out, 0xee, total * es);
    if (inplace) {
        memcpy(out + (size_t)t->me * sc * es, in, sc * es);
        OK(msr_comm_allgather(t->comm, MSR_IN_PLACE, out, sc, dt));
    } else {
        OK(msr_comm_allgather(t->comm, in, out, sc, dt));
    }
    check_bytes(out, ref, total, es, "allgather");
    free(in);
    free(out);
    free(ref);
}

static void check_broadcast(tc_t *t, msr_dtype_t dt, uint64_t count, int root)
{
    size_t es = msr_dtype_size(dt);
    unsigned char *buf = xmalloc(count * es), *ref = xmalloc(count * es);
    for (uint64_t k = 0; k < count; k++)
        put_id(dt, ref, k, root, 1, k);
    if (t->me == root)
        memcpy(buf, ref, count * es);
    else
        memset(buf, 0xee, count * es);
    OK(msr_comm_broadcast(t->comm, buf, count, dt, root));
    check_bytes(buf, ref, count, es, "broadcast");
    free(buf);
    free(ref);
}

static void check_alltoall(tc_t *t, msr_dtype_t dt, uint64_t count, int inplace)
{
    size_t es = msr_dtype_size(dt), total = count * (size_t)t->n;
    unsigned char *in = xmalloc(total * es), *out = xmalloc(total * es), *ref = xmalloc(total * es);
    for (int j = 0; j < t->n; j++)
        for (uint64_t k = 0; k < count; k++) {
            put_id(dt, in, (size_t)j * count + k, t->me, j, k);  /* to rank j */
            put_id(dt, ref, (size_t)j * count + k, j, t->me, k); /* from rank j */
        }
    memset(out, 0xee, total * es);
    if (inplace) {
        memcpy(out, in, total * es);
        OK(msr_comm_alltoall(t->comm, MSR_IN_PLACE, out, count, dt));
    } else {
        OK(msr_comm_alltoall(t->comm, in, out, count, dt));
    }
    check_bytes(out, ref, total, es, "alltoall");
    free(in);
    free(out);
    free(ref);
}

static void check_alltoallv(tc_t *t, msr_dtype_t dt, uint64_t scale)
{
    size_t es = msr_dtype_size(dt);
    int n = t->n;
    uint64_t *sc = xmalloc(n * sizeof *sc), *sd = xmalloc(n * sizeof *sd);
    uint64_t *rc = xmalloc(n * sizeof *rc), *rd = xmalloc(n * sizeof *rd);
    uint64_t stot = 0, rtot = 0;
    /* rank a sends (a + b) % 3 * scale elements to rank b, with gaps */
    for (int j = 0; j < n; j++) {
        sc[j] = (uint64_t)((t->me + j) % 3) * scale;
        rc[j] = (uint64_t)((j + t->me) % 3) * scale;
        sd[j] = stot + 1;
        stot += sc[j] + 1;
        rd[j] = rtot + 2;
        rtot += rc[j] + 2;
    }
    unsigned char *in = xmalloc(stot * es), *out = xmalloc(rtot * es), *ref = xmalloc(rtot * es);
    memset(in, 0, stot * es);
    memset(out, 0xee, rtot * es);
    memset(ref, 0xee, rtot * es);
    for (int j = 0; j < n; j++) {
        for (uint64_t k = 0; k < sc[j]; k++)
            put_id(dt, in, sd[j] + k, t->me, j, k);
        for (uint64_t k = 0; k < rc[j]; k++)
            put_id(dt, ref, rd[j] + k, j, t->me, k);
    }
    OK(msr_comm_alltoallv(t->comm, in, sc, sd, out, rc, rd, dt));
    check_bytes(out, ref, rtot, es, "alltoallv");
    free(in);
    free(out);
    free(ref);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

/* Everything on one communicator. large: a count that is prime and not a
 * multiple of any group size here, big enough for several segments. */
static void check_all(tc_t *t, uint64_t large)
{
    const uint64_t counts[] = {0, 1, 37, large};
    for (int d = 0; d < MSR_DTYPE_COUNT; d++) {
        msr_dtype_t dt = (msr_dtype_t)d;
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            uint64_t count = counts[c];
            for (int o = 0; o < MSR_OP_COUNT; o++) {
                msr_op_t op = (msr_op_t)o;
                /* The large count with every op for f32 and bf16, with sum
                 * for the others. */
                if (count == large && op != MSR_OP_SUM && dt != MSR_DTYPE_F32 &&
                    dt != MSR_DTYPE_BF16)
                    continue;
                for (int ip = 0; ip < 3; ip++) {
                    snprintf(g_case, sizeof g_case, "%s n=%d %s %s count=%llu inplace=%d", t->label,
                             t->n, msr_dtype_name(dt), msr_op_name(op), (unsigned long long)count,
                             ip);
                    if (ip < 2) {
                        check_allreduce(t, dt, op, count, ip);
                        check_reduce(t, dt, op, count, (int)(count % (uint64_t)t->n), ip);
                    }
                    uint64_t rc = count == large ? count / 8 + 1 : count;
                    check_reduce_scatter(t, dt, op, rc, ip);
                }
            }
            for (int ip = 0; ip < 2; ip++) {
                snprintf(g_case, sizeof g_case, "%s n=%d %s count=%llu inplace=%d", t->label, t->n,
                         msr_dtype_name(dt), (unsigned long long)count, ip);
                uint64_t per = count == large ? count / 8 + 1 : count;
                check_allgather(t, dt, per, ip);
                check_alltoall(t, dt, per, ip);
                check_broadcast(t, dt, count, (int)((count + (uint64_t)ip) % (uint64_t)t->n));
            }
            snprintf(g_case, sizeof g_case, "%s n=%d %s alltoallv scale=%llu", t->label, t->n,
                     msr_dtype_name(dt), (unsigned long long)(count / 4 + 1));
            check_alltoallv(t, dt, count / 4 + 1);
        }
    }
    snprintf(g_case, sizeof g_case, "%s n=%d barrier", t->label, t->n);
    OK(msr_comm_barrier(t->comm));
}

/* The algorithm settings tried in turn; each makes its communicators anew
 * (settings are read when a communicator is made). */
static const char *const configs[][12] = {
    {"auto", NULL},
    {"direct", "MSR_COMM_ALGO_ALLREDUCE=direct", "MSR_COMM_ALGO_REDUCE_SCATTER=direct",
     "MSR_COMM_ALGO_ALLGATHER=direct", "MSR_COMM_ALGO_BROADCAST=binomial",
     "MSR_COMM_ALGO_REDUCE=binomial", NULL},
    {"rd+chain", "MSR_COMM_ALGO_ALLREDUCE=rd", "MSR_COMM_ALGO_BROADCAST=chain",
     "MSR_COMM_ALGO_REDUCE=chain", "MSR_COMM_SEGMENT=4096", "MSR_COMM_WINDOW=2", NULL},
    {"ring", "MSR_COMM_ALGO_ALLREDUCE=ring", "MSR_COMM_ALGO_REDUCE_SCATTER=ring",
     "MSR_COMM_ALGO_ALLGATHER=ring", "MSR_COMM_SEGMENT=4096", "MSR_COMM_WINDOW=3", NULL},
    /* the tiled shared-memory path with tiles small enough for many of
     * them (and parts of a few elements) in every case */
    {"shm tiles", "MSR_COMM_ALGO_ALLREDUCE=shm", "MSR_COMM_ALGO_REDUCE_SCATTER=shm",
     "MSR_COMM_ALGO_ALLGATHER=shm", "MSR_COMM_ALGO_BROADCAST=shm", "MSR_COMM_ALGO_REDUCE=shm",
     "MSR_COMM_SHM_MAX=0", "MSR_COMM_SHM_TILE=4096", "MSR_COMM_SHM_TILES=2", NULL},
    /* the same with every store bypassing the cache */
    {"shm tiles nt", "MSR_COMM_ALGO_ALLREDUCE=shm", "MSR_COMM_ALGO_REDUCE_SCATTER=shm",
     "MSR_COMM_ALGO_ALLGATHER=shm", "MSR_COMM_ALGO_BROADCAST=shm", "MSR_COMM_ALGO_REDUCE=shm",
     "MSR_COMM_SHM_MAX=0", "MSR_COMM_SHM_TILE=4096", "MSR_COMM_SHM_TILES=3", "MSR_COMM_SHM_NT=1",
     "MSR_COMM_SHM_NT_MIN=0", NULL},
    /* groups over several nodes: the two levels at every size, small tiles
     * inside the nodes (a group on one node runs its shared memory) */
    {"hier", "MSR_COMM_ALGO_ALLREDUCE=hier", "MSR_COMM_ALGO_REDUCE_SCATTER=hier",
     "MSR_COMM_ALGO_REDUCE=hier", "MSR_COMM_ALGO_ALLGATHER=hier", "MSR_COMM_ALGO_BROADCAST=hier",
     "MSR_COMM_SHM_MAX=0", "MSR_COMM_SHM_TILE=4096", "MSR_COMM_SHM_TILES=2", NULL},
};

static void set_config(const char *const *cfg)
{
    static const char *const vars[] = {"MSR_COMM_ALGO_ALLREDUCE", "MSR_COMM_ALGO_REDUCE_SCATTER",
                                       "MSR_COMM_ALGO_ALLGATHER", "MSR_COMM_ALGO_BROADCAST",
                                       "MSR_COMM_ALGO_REDUCE",    "MSR_COMM_SEGMENT",
                                       "MSR_COMM_WINDOW",         "MSR_COMM_SHM_MAX",
                                       "MSR_COMM_SHM_TILE",       "MSR_COMM_SHM_TILES",
                                       "MSR_COMM_SHM_NT",         "MSR_COMM_SHM_NT_MIN"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    for (int i = 1; cfg[i]; i++) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", cfg[i]);
        char *eq = strchr(buf, '=');
        *eq = '\0';
        setenv(buf, eq + 1, 1);
    }
}

static void mode_collectives(msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    const uint64_t large = 10007;
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        if (strcmp(configs[c][0], "hier") == 0 && g_nodes < 2)
            continue; /* one node: the same as "auto" with small tiles */
        set_config(configs[c]);
        msr_comm_t *w = NULL;
        snprintf(g_case, sizeof g_case, "dup for %s", configs[c][0]);
        OK(msr_comm_dup(world, 0, &w));
        char label[64];
        snprintf(label, sizeof label, "%s world", configs[c][0]);
        tc_t t = {w, label, n, me};
        check_all(&t, large);
        /* Sub-groups: with 8 ranks, sizes 1, 2, 3 (split A), 4 (split B,
         * ranked backwards by key) and 5 (split C, the rest without one). */
        int colors[3], keys[3];
        colors[0] = me == 0 ? 0 : me <= 2 ? 1 : me <= 5 ? 2 : 3;
        keys[0] = me;
        colors[1] = me < n / 2 ? 0 : 1;
        keys[1] = -me;
        colors[2] = me < 5 ? 7 : MSR_COMM_NO_COLOR;
        keys[2] = 0;
        for (int s = 0; s < 3; s++) {
            msr_comm_t *sub = NULL;
            snprintf(g_case, sizeof g_case, "split %d for %s", s, configs[c][0]);
            OK(msr_comm_split(w, colors[s], keys[s], &sub));
            if (colors[s] == MSR_COMM_NO_COLOR) {
                if (sub != NULL)
                    fail("split with no color gave a communicator");
                continue;
            }
            if (s == 1 && n >= 2) { /* keys -rank: ranks in reverse order */
                int hi = colors[1] == 0 ? n / 2 : n;
                int want = hi - 1 - me;
                if (msr_comm_rank(sub) != want)
                    fail("split by key: rank %d, expected %d", msr_comm_rank(sub), want);
            }
            snprintf(label, sizeof label, "%s split%d", configs[c][0], s);
            tc_t st = {sub, label, msr_comm_size(sub), msr_comm_rank(sub)};
            check_all(&st, large);
            msr_comm_destroy(sub);
        }
        msr_comm_destroy(w);
    }
    /* A large allreduce with the default settings: many segments. */
    snprintf(g_case, sizeof g_case, "large allreduce");
    set_config(configs[0]);
    tc_t t = {world, "world", n, me};
    check_allreduce(&t, MSR_DTYPE_F32, MSR_OP_SUM, 1000003, 0);
    check_allreduce(&t, MSR_DTYPE_BF16, MSR_OP_AVG, 1000003, 1);
    check_reduce_scatter(&t, MSR_DTYPE_F32, MSR_OP_SUM, 200003, 0);
}

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
static void mode_samecomm(msr_comm_t *world)
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

static void mode_inflight(msr_comm_t *world)
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

/* ---- the shared-memory slots at their bounds ---- */

/* The slots' size for a communicator of n made now: what shm.c's shape
 * gives for MSR_COMM_SHM_MAX and MSR_COMM_SHM_SEGMENT (their defaults
 * unless set), in whole cache lines. */
static size_t slot_size(int n)
{
    const char *mx = getenv("MSR_COMM_SHM_MAX"), *seg = getenv("MSR_COMM_SHM_SEGMENT");
    size_t slot = mx ? strtoull(mx, NULL, 10) : 16 << 10;
    size_t cap = (seg ? strtoull(seg, NULL, 10) : 16 << 20) / (2 * (size_t)n);
    return (slot < cap ? slot : cap) / 64 * 64;
}

/* Every collective of the slots on t at exactly the slot's size and one
 * element past it (the tiles or messages then), at the 16 bytes that travel
 * in a member's counter line and one past, and at counts that are
 * multiples of nothing: every dtype and op, in place and not. */
static void check_small(tc_t *t, size_t slot)
{
    for (int d = 0; d < MSR_DTYPE_COUNT; d++) {
        msr_dtype_t dt = (msr_dtype_t)d;
        size_t es = msr_dtype_size(dt), n = (size_t)t->n;
        /* whole vectors (allreduce, broadcast, an allgather's block) and a
         * reduce-scatter's block, whose input is n of them */
        const uint64_t whole[] = {slot / es, slot / es + 1, 16 / es, 16 / es + 1, 3, 1};
        const uint64_t block[] = {
            slot / (n * es), slot / (n * es) + 1, 16 / (n * es), 16 / (n * es) + 1, 3, 1};
        for (size_t c = 0; c < sizeof whole / sizeof whole[0]; c++) {
            for (int o = 0; o < MSR_OP_COUNT; o++) {
                msr_op_t op = (msr_op_t)o;
                for (int ip = 0; ip < 3; ip++) {
                    snprintf(g_case, sizeof g_case, "small %s n=%d %s %s count=%llu/%llu ip=%d",
                             t->label, t->n, msr_dtype_name(dt), msr_op_name(op),
                             (unsigned long long)whole[c], (unsigned long long)block[c], ip);
                    if (ip < 2)
                        check_allreduce(t, dt, op, whole[c], ip);
                    check_reduce_scatter(t, dt, op, block[c], ip);
                }
            }
            snprintf(g_case, sizeof g_case, "small %s n=%d %s count=%llu", t->label, t->n,
                     msr_dtype_name(dt), (unsigned long long)whole[c]);
            check_allgather(t, dt, whole[c], (int)(c % 2));
            check_allgather(t, dt, whole[c], (int)(c % 2 == 0));
            check_broadcast(t, dt, whole[c], (int)(c % n));
        }
    }
}

/* The same operations at their bounds on three communicators at once
 * (the world, a dup with smaller slots, halves of the world), non-blocking,
 * finished in different orders on different ranks. */
static void small_at_once(msr_comm_t *world, msr_comm_t *dup, msr_comm_t *half, size_t slot,
                          size_t dslot)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    int hn = msr_comm_size(half), hme = msr_comm_rank(half);
    size_t bc = slot / 4, ag = dslot / 4, rs = dslot / 4 / (size_t)hn;
    float *b = xmalloc(bc * 4), *gin = xmalloc(ag * 4), *gout = xmalloc(ag * 4 * (size_t)n);
    float *rin = xmalloc(rs * 4 * (size_t)hn), *rout = xmalloc(rs * 4 + 4);
    for (int round = 0; round < 20; round++) {
        snprintf(g_case, sizeof g_case, "small at once round %d", round);
        int root = round % n;
        for (size_t i = 0; i < bc; i++)
            b[i] = me == root ? (float)((i + (size_t)round) % 9) : -1.0f;
        for (size_t i = 0; i < ag; i++)
            gin[i] = (float)((size_t)me * 3 + i % 5);
        for (size_t i = 0; i < rs * (size_t)hn; i++)
            rin[i] = (float)((size_t)hme + i % 7);
        msr_comm_req_t *req[3];
        OK(msr_comm_ibroadcast(world, b, bc, MSR_DTYPE_F32, root, &req[0]));
        OK(msr_comm_iallgather(dup, gin, gout, ag, MSR_DTYPE_F32, &req[1]));
        OK(msr_comm_ireduce_scatter(half, rin, rout, rs, MSR_DTYPE_F32, MSR_OP_SUM, &req[2]));
        for (int k = 0; k < 3; k++)
            OK(msr_comm_wait(req[me % 2 ? 2 - k : k]));
        for (size_t i = 0; i < bc; i++)
            if (b[i] != (float)((i + (size_t)round) % 9))
                fail("broadcast at %zu: %g", i, (double)b[i]);
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < ag; i++)
                if (gout[(size_t)r * ag + i] != (float)((size_t)r * 3 + i % 5))
                    fail("allgather block %d at %zu", r, i);
        for (size_t i = 0; i < rs; i++) {
            float want = 0;
            for (int r = 0; r < hn; r++)
                want += (float)((size_t)r + ((size_t)hme * rs + i) % 7);
            if (rout[i] != want)
                fail("reduce_scatter at %zu: %g, expected %g", i, (double)rout[i], (double)want);
        }
        g_checks += 3;
    }
    free(b);
    free(gin);
    free(gout);
    free(rin);
    free(rout);
}

/* The slots of the default size on the world, of 1000 bytes (960: whole
 * lines) on a dup, on halves of the world, and all three at once. */
static void mode_small(msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    size_t slot = slot_size(n); /* broadcasts forced through the slots (main) */
    tc_t t = {world, "world", n, me};
    check_small(&t, slot);
    setenv("MSR_COMM_SHM_MAX", "1000", 1);
    msr_comm_t *dup = NULL, *half = NULL;
    snprintf(g_case, sizeof g_case, "small dup");
    OK(msr_comm_dup(world, 0, &dup));
    size_t dslot = slot_size(n);
    OK(msr_comm_split(world, me % 2, me, &half));
    int hn = msr_comm_size(half);
    size_t hslot = slot_size(hn);
    unsetenv("MSR_COMM_SHM_MAX");
    tc_t d = {dup, "dup", n, me}, h = {half, "half", hn, msr_comm_rank(half)};
    check_small(&d, dslot);
    check_small(&h, hslot);
    small_at_once(world, dup, half, slot, dslot);
    msr_comm_destroy(half);
    msr_comm_destroy(dup);
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

static void mode_threads(msr_comm_t *world)
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

/* ---- point to point ---- */

static void mode_p2p(msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    int right = (me + 1) % n, left = (me + n - 1) % n;
    snprintf(g_case, sizeof g_case, "p2p ring");
    for (size_t count = 1; count <= (1u << 20); count *= 16) {
        int64_t *s = xmalloc(count * 8), *r = xmalloc(count * 8);
        for (size_t i = 0; i < count; i++)
            s[i] = (int64_t)(me * 1000003 + (int64_t)i);
        msr_comm_req_t *q[2];
        OK(msr_comm_irecv(world, r, count, MSR_DTYPE_I64, left, 5, &q[0]));
        OK(msr_comm_isend(world, s, count, MSR_DTYPE_I64, right, 5, &q[1]));
        OK(msr_comm_wait_all(q, 2));
        for (size_t i = 0; i < count; i++)
            if (r[i] != (int64_t)(left * 1000003 + (int64_t)i))
                fail("p2p %zu elements: wrong value at %zu", count, i);
        free(s);
        free(r);
    }
    /* tags keep messages apart; same tag keeps order */
    snprintf(g_case, sizeof g_case, "p2p tags");
    int v[4] = {me, me + 100, me + 200, me + 300}, got[4] = {0};
    msr_comm_req_t *q[8];
    OK(msr_comm_irecv(world, &got[0], 1, MSR_DTYPE_I32, left, 7, &q[0]));
    OK(msr_comm_irecv(world, &got[1], 1, MSR_DTYPE_I32, left, MSR_COMM_TAG_MAX, &q[1]));
    OK(msr_comm_irecv(world, &got[2], 1, MSR_DTYPE_I32, left, 7, &q[2]));
    OK(msr_comm_irecv(world, &got[3], 1, MSR_DTYPE_I32, left, 0, &q[3]));
    OK(msr_comm_isend(world, &v[3], 1, MSR_DTYPE_I32, right, 0, &q[4]));
    OK(msr_comm_isend(world, &v[0], 1, MSR_DTYPE_I32, right, 7, &q[5]));
    OK(msr_comm_isend(world, &v[1], 1, MSR_DTYPE_I32, right, MSR_COMM_TAG_MAX, &q[6]));
    OK(msr_comm_isend(world, &v[2], 1, MSR_DTYPE_I32, right, 7, &q[7]));
    OK(msr_comm_wait_all(q, 8));
    if (got[0] != left || got[1] != left + 100 || got[2] != left + 200 || got[3] != left + 300)
        fail("tags: got %d %d %d %d", got[0], got[1], got[2], got[3]);
    /* a receive that expects less than was sent fails, and the
     * communicator stays usable */
    snprintf(g_case, sizeof g_case, "p2p truncation");
    int32_t big[4] = {1, 2, 3, 4}, small[2];
    msr_comm_req_t *t[2];
    OK(msr_comm_isend(world, big, 4, MSR_DTYPE_I32, right, 11, &t[0]));
    msr_status_t st = msr_comm_recv(world, small, 2, MSR_DTYPE_I32, left, 11);
    if (st != MSR_ERR_TRUNCATED)
        fail("short receive: %s, expected MSR_ERR_TRUNCATED", msr_status_name(st));
    OK(msr_comm_wait(t[0]));
    OK(msr_comm_barrier(world));
    /* bad arguments change nothing */
    snprintf(g_case, sizeof g_case, "bad arguments");
    if (msr_comm_send(world, big, 1, MSR_DTYPE_I32, n, 0) != MSR_ERR_INVALID_ARG ||
        msr_comm_send(world, big, 1, MSR_DTYPE_I32, 0, -1) != MSR_ERR_INVALID_ARG ||
        msr_comm_allreduce(world, big, small, 1, (msr_dtype_t)42, MSR_OP_SUM) !=
            MSR_ERR_INVALID_ARG ||
        msr_comm_allreduce(world, big, small, 1, MSR_DTYPE_I32, (msr_op_t)9) !=
            MSR_ERR_INVALID_ARG ||
        msr_comm_broadcast(world, big, 1, MSR_DTYPE_I32, -1) != MSR_ERR_INVALID_ARG ||
        msr_comm_allreduce(world, NULL, small, 1, MSR_DTYPE_I32, MSR_OP_SUM) !=
            MSR_ERR_INVALID_ARG ||
        msr_comm_allreduce(world, big, small, UINT64_MAX / 2, MSR_DTYPE_I32, MSR_OP_SUM) !=
            MSR_ERR_OVERFLOW ||
        msr_comm_split(world, -5, 0, &(msr_comm_t *){NULL}) != MSR_ERR_INVALID_ARG)
        fail("a bad argument was not refused");
    if (msr_comm_status(world) != MSR_OK)
        fail("bad arguments broke the communicator");
    /* dup with its own worker, used alongside the world */
    snprintf(g_case, sizeof g_case, "dup own worker");
    msr_comm_t *own = NULL;
    OK(msr_comm_dup(world, MSR_COMM_OWN_WORKER, &own));
    int64_t x = me + 1, sum = 0, sum2 = 0;
    msr_comm_req_t *q2[2];
    OK(msr_comm_iallreduce(own, &x, &sum, 1, MSR_DTYPE_I64, MSR_OP_SUM, &q2[0]));
    OK(msr_comm_iallreduce(world, &x, &sum2, 1, MSR_DTYPE_I64, MSR_OP_SUM, &q2[1]));
    OK(msr_comm_wait(q2[1]));
    OK(msr_comm_wait(q2[0]));
    if (sum != (int64_t)n * (n + 1) / 2 || sum2 != sum)
        fail("own-worker allreduce: %lld %lld", (long long)sum, (long long)sum2);
    if (msr_comm_world_rank(own, msr_comm_rank(own)) != me || msr_comm_size(own) != n)
        fail("own-worker dup: rank %d of %d", msr_comm_rank(own), msr_comm_size(own));
    msr_comm_destroy(own);
}

/* ---- determinism ---- */

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The paths that promise to fold in rank order (direct, the small
 * shared-memory slots, inline or not, and the tiled path) give the bits of
 * the serial sum x0 + x1 + ... + x(n-1), on values of very different
 * magnitudes where any other order rounds differently. */
static float order_value(int r, uint64_t i)
{
    static const int exps[] = {24, 0, -3, 13, -8, 20, 2, 17, -1, 9, 26, -5, 6};
    int e = exps[((uint64_t)r * 7 + i * 3) % 13];
    float v = ldexpf(1.0f + (float)((i * 5 + (uint64_t)r) % 8) / 8.0f, e);
    return (r + i) % 3 == 1 ? -v : v;
}

static void check_fold_order(msr_comm_t *world)
{
    int n = msr_comm_size(world);
    if (n < 3)
        return; /* a sum of two is the same whichever adds */
    enum { COUNT = 1001 };
    float *in = xmalloc(COUNT * 4), *out = xmalloc(COUNT * 4), *ref = xmalloc(COUNT * 4);
    int differs = 0;
    for (uint64_t i = 0; i < COUNT; i++) {
        in[i] = order_value(msr_comm_rank(world), i);
        float fwd = order_value(0, i), rev = order_value(n - 1, i);
        for (int r = 1; r < n; r++) {
            fwd += order_value(r, i);
            rev += order_value(n - 1 - r, i);
        }
        ref[i] = fwd;
        differs += memcmp(&fwd, &rev, 4) != 0;
    }
    if (differs == 0)
        fail("fold order: the test values do not depend on the order");
    static const char *const algos[][4] = {
        /* label, MSR_COMM_ALGO_ALLREDUCE, MSR_COMM_SHM_MAX, MSR_COMM_SHM_TILE */
        {"direct", "direct", NULL, NULL},
        {"shm slots", "shm", NULL, NULL},
        {"shm tiles", "shm", "0", "4096"},
    };
    static const size_t counts[] = {3, 64, COUNT};
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
        setenv("MSR_COMM_ALGO_ALLREDUCE", algos[a][1], 1);
        if (algos[a][2]) {
            setenv("MSR_COMM_SHM_MAX", algos[a][2], 1);
            setenv("MSR_COMM_SHM_TILE", algos[a][3], 1);
        }
        msr_comm_t *c = NULL;
        OK(msr_comm_dup(world, 0, &c));
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            snprintf(g_case, sizeof g_case, "fold order %s count %zu", algos[a][0], counts[k]);
            memset(out, 0, COUNT * 4);
            OK(msr_comm_allreduce(c, in, out, counts[k], MSR_DTYPE_F32, MSR_OP_SUM));
            for (size_t i = 0; i < counts[k]; i++)
                if (memcmp(&out[i], &ref[i], 4) != 0)
                    fail("%s: element %zu is %a, the rank-order sum is %a", g_case, i,
                         (double)out[i], (double)ref[i]);
            memcpy(out, in, COUNT * 4);
            OK(msr_comm_allreduce(c, MSR_IN_PLACE, out, counts[k], MSR_DTYPE_F32, MSR_OP_SUM));
            if (memcmp(out, ref, counts[k] * 4) != 0)
                fail("%s in place: not the rank-order sum", g_case);
        }
        msr_comm_destroy(c);
        unsetenv("MSR_COMM_SHM_MAX");
        unsetenv("MSR_COMM_SHM_TILE");
    }
    unsetenv("MSR_COMM_ALGO_ALLREDUCE");
    free(in);
    free(out);
    free(ref);
}

static void mode_determinism(msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    const size_t count = 300007;
    float *in = xmalloc(count * 4), *out = xmalloc(count * 4);
    uint16_t *hin = xmalloc(count * 2), *hout = xmalloc(count * 2);
    uint64_t seed = 88172645463325252ull + (uint64_t)me * 7919;
    for (size_t i = 0; i < count; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        in[i] = (float)((double)(seed % 2000001) / 1000.0 - 1000.0) * 1.0001f;
        hin[i] = to_f16(in[i] / 64.0f);
    }
    /* "tiles": the tiled shared-memory path (several tiles); it folds in
     * rank order like direct, so its first 1001 elements must have the
     * same bits as direct's whole result */
    static const char *const algos[] = {"direct", "shm", "rd", "ring", "tiles", "tiles-nt"};
    uint64_t all = 1469598103934665603ull, direct[2] = {0, 0};
    for (size_t a = 0; a < 6; a++) {
        setenv("MSR_COMM_ALGO_ALLREDUCE", a >= 4 ? "shm" : algos[a], 1);
        if (a >= 4) {
            setenv("MSR_COMM_SHM_MAX", "0", 1);
            setenv("MSR_COMM_SHM_TILE", "65536", 1);
            setenv("MSR_COMM_SHM_NT", a == 5 ? "1" : "0", 1);
        }
        msr_comm_t *c = NULL;
        OK(msr_comm_dup(world, 0, &c));
        for (int dt = 0; dt < 2; dt++) {
            size_t cnt = a <= 1 ? 1001 : count; /* direct, shm: small vectors */
            uint64_t h[2];
            for (int rep = 0; rep < 2; rep++) {
                snprintf(g_case, sizeof g_case, "determinism %s %s rep %d", algos[a],
                         dt ? "f16" : "f32", rep);
                if (dt == 0) {
                    OK(msr_comm_allreduce(c, in, out, cnt, MSR_DTYPE_F32, MSR_OP_SUM));
                    h[rep] = fnv(out, cnt * 4);
                } else {
                    OK(msr_comm_allreduce(c, hin, hout, cnt, MSR_DTYPE_F16, MSR_OP_SUM));
                    h[rep] = fnv(hout, cnt * 2);
                }
            }
            if (h[0] != h[1])
                fail("two identical allreduces gave different bits");
            if (a == 0)
                direct[dt] = h[0];
            if (a >= 4 && (dt ? fnv(hout, 1001 * 2) : fnv(out, 1001 * 4)) != direct[dt])
                fail("the tiled path and direct folded differently");
            uint64_t *hs = xmalloc((size_t)n * 8);
            OK(msr_comm_allgather(c, &h[0], hs, 1, MSR_DTYPE_I64));
            for (int r = 0; r < n; r++)
                if (hs[r] != h[0])
                    fail("rank %d got different bits than this rank", r);
            free(hs);
            all = (all ^ h[0]) * 1099511628211ull;
        }
        msr_comm_destroy(c);
    }
    unsetenv("MSR_COMM_SHM_MAX");
    unsetenv("MSR_COMM_SHM_TILE");
    unsetenv("MSR_COMM_SHM_NT");
    unsetenv("MSR_COMM_ALGO_ALLREDUCE");
    check_fold_order(world);
    if (me == 0)
        printf("determinism hash %016llx\n", (unsigned long long)all);
    free(in);
    free(out);
    free(hin);
    free(hout);
}

/* ---- a member leaves cleanly ---- */

/* A descriptor that becomes readable once process pid has exited (a
 * pidfd), or -1 where the kernel has none. Open it while the process is
 * known to live: it then names that process, not a later one with its pid. */
static int pid_watch(int pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    return -1;
#endif
}

/* Whether process pid (watched by fd from pid_watch, or -1) has exited
 * within limit_ms. */
static int wait_exited(int fd, int pid, int limit_ms)
{
    double end = now_ms() + limit_ms;
    for (;;) {
        double left = end - now_ms();
        if (fd >= 0) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            int r = poll(&p, 1, left > 0 ? (int)left + 1 : 0);
            if (r > 0)
                return 1;
            if (r == 0)
                return 0; /* the time left is over */
            if (errno != EINTR)
                fail("poll on a pidfd: %s", strerror(errno));
            continue;
        }
        /* no pidfd: gone, or a zombie its msrun has not reaped yet */
        char path[64], st[512] = "";
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            return 1;
        size_t k = fread(st, 1, sizeof st - 1, f);
        fclose(f);
        st[k] = '\0';
        const char *rp = strrchr(st, ')');
        if (rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'))
            return 1;
        if (left <= 0)
            return 0;
        usleep(10 * 1000); /* paces the look; the deadline bounds it */
    }
}

static void mode_leave(msr_ctx_t *ctx, msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    if (n < 3)
        fail("leave needs 3 ranks or more");
    int *pids = xmalloc((size_t)n * sizeof *pids);
    int pid = getpid();
    OK(msr_allgather(ctx, &pid, sizeof pid, pids));
    /* rank 0 lives at least until the barrier: watched from here */
    int watch = me == 0 ? -1 : pid_watch(pids[0]);
    snprintf(g_case, sizeof g_case, "leave: barrier");
    OK(msr_comm_barrier(world));
    if (me == 0) {
        msr_comm_destroy(world);
        msr_finalize(ctx);
        printf("ok leave (rank 0 left)\n");
        fflush(stdout);
        exit(0);
    }
    /* A closing message goes to the previous rank after the ring (tag
     * 8); posted now, its receive cannot end before this rank has done its
     * part of the ring, so it is still running while this rank waits. */
    int next = me == n - 1 ? 1 : me + 1, prev = me == 1 ? n - 1 : me - 1;
    int64_t bye_in = -1, bye_out = me;
    msr_comm_req_t *bye = NULL;
    OK(msr_comm_irecv(world, &bye_in, 1, MSR_DTYPE_I64, next, 8, &bye));
    /* rank 0 exits (30 s at most: half the test's limit) */
    snprintf(g_case, sizeof g_case, "leave: rank 0 exits");
    if (!wait_exited(watch, pids[0], 30000))
        fail("rank 0 (pid %d) still runs 30 s after it left", pids[0]);
    if (watch >= 0)
        close(watch);
    free(pids);
    /* then the engine looks at its members' liveness (every 50 ms, in a
     * call that drives progress) and sees the exit: tests of the closing
     * receive for two of those periods make it look at least once */
    snprintf(g_case, sizeof g_case, "leave: rank 0's exit seen");
    double from = now_ms();
    while (now_ms() < from + 100) {
        msr_status_t ts = msr_comm_test(&bye);
        if (ts != MSR_IN_PROGRESS)
            fail("the closing receive ended early: %s", msr_status_name(ts));
        usleep(1000); /* paces the tests */
    }
    if (msr_comm_status(world) != MSR_OK)
        fail("the communicator broke when rank 0's exit was seen");
    snprintf(g_case, sizeof g_case, "leave: ring among the others");
    int64_t out = me * 1000, in = -1;
    msr_comm_req_t *req = NULL;
    OK(msr_comm_isend(world, &out, 1, MSR_DTYPE_I64, next, 7, &req));
    OK(msr_comm_recv(world, &in, 1, MSR_DTYPE_I64, prev, 7));
    OK(msr_comm_wait(req));
    if (in != prev * 1000)
        fail("got %lld from rank %d", (long long)in, prev);
    OK(msr_comm_send(world, &bye_out, 1, MSR_DTYPE_I64, prev, 8));
    OK(msr_comm_wait(bye));
    if (bye_in != next)
        fail("got closing message %lld from rank %d", (long long)bye_in, next);
    if (msr_comm_status(world) != MSR_OK)
        fail("the communicator broke when rank 0 left");
    msr_comm_destroy(world);
    msr_finalize(ctx);
    exit(0);
}

/* ---- two levels (groups over several nodes) ---- */

/* The documented fold order of the two levels: each node's members in
 * group rank order, then the nodes' partials in node order (ascending node
 * id); node_of: the node of each group rank. */
/* Node m's partial of element i: its members in group rank order; *any:
 * whether it has members. */
static float node_partial(const int *node_of, int n, int m, uint64_t i, int *any)
{
    float part = 0;
    *any = 0;
    for (int r = 0; r < n; r++) {
        if (node_of[r] != m)
            continue;
        float v = order_value(r, i);
        part = *any ? part + v : v;
        *any = 1;
    }
    return part;
}

static float hier_order_sum(const int *node_of, int n, uint64_t i)
{
    float total = 0;
    int first_node = 1;
    for (int m = 0; m < n; m++) { /* node ids: job rank / ranks per node */
        int any;
        float part = node_partial(node_of, n, m, i, &any);
        if (!any)
            continue;
        total = first_node ? part : total + part;
        first_node = 0;
    }
    return total;
}

/* The documented fold order of the two-level reduce: the nodes' partials
 * (each as above) along the chain of nodes from the root's, in ascending
 * node id, wrapping: P0 + (P1 + (... + P(N-1))). */
static float hier_chain_sum(const int *node_of, int n, int root, uint64_t i)
{
    int *nodes = xmalloc((size_t)n * sizeof *nodes), nn = 0, first = 0;
    for (int m = 0; m < n; m++) { /* the nodes present, ascending */
        int any;
        node_partial(node_of, n, m, i, &any);
        if (any)
            nodes[nn++] = m;
    }
    for (int v = 0; v < nn; v++)
        if (nodes[v] == node_of[root])
            first = v;
    float acc = 0;
    for (int v = nn - 1; v >= 0; v--) {
        int any;
        float part = node_partial(node_of, n, nodes[(first + v) % nn], i, &any);
        acc = v == nn - 1 ? part : part + acc;
    }
    free(nodes);
    return acc;
}

/* One group over several nodes, forced through the two levels: every
 * reduction against the reference, in and out of place, sizes within a
 * tile and across many, odd counts; the documented fold order; the same
 * bits on every rank. */
static void check_hier_group(msr_comm_t *c, const char *label, int local_size)
{
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    tc_t t = {c, label, n, me};
    static const uint64_t counts[] = {1, 2, 37, 1001, 10007};
    static const msr_dtype_t dts[] = {MSR_DTYPE_F32, MSR_DTYPE_BF16, MSR_DTYPE_F64, MSR_DTYPE_I32,
                                      MSR_DTYPE_U8};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
            for (int o = 0; o < MSR_OP_COUNT; o++) {
                msr_op_t op = (msr_op_t)o;
                if (dts[d] != MSR_DTYPE_F32 && op != MSR_OP_SUM && op != MSR_OP_AVG)
                    continue;
                for (int ip = 0; ip < 3; ip++) {
                    snprintf(g_case, sizeof g_case, "hier %s n=%d %s %s count=%llu inplace=%d",
                             label, n, msr_dtype_name(dts[d]), msr_op_name(op),
                             (unsigned long long)counts[k], ip);
                    if (ip < 2) {
                        check_allreduce(&t, dts[d], op, counts[k], ip);
                        check_reduce(&t, dts[d], op, counts[k], (int)(counts[k] % (uint64_t)n), ip);
                    }
                    check_reduce_scatter(&t, dts[d], op, counts[k] / 4 + 1, ip);
                }
            }
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
            for (int ip = 0; ip < 2; ip++) {
                snprintf(g_case, sizeof g_case, "hier %s n=%d %s count=%llu inplace=%d", label, n,
                         msr_dtype_name(dts[d]), (unsigned long long)counts[k], ip);
                check_allgather(&t, dts[d], counts[k] / 4 + 1, ip);
                check_broadcast(&t, dts[d], counts[k],
                                (int)((counts[k] + (uint64_t)ip) % (uint64_t)n));
            }
    /* the fold order, and the same bits everywhere */
    enum { COUNT = 4099 };
    int *node_of = xmalloc((size_t)n * sizeof *node_of);
    for (int r = 0; r < n; r++)
        node_of[r] = msr_comm_world_rank(c, r) / local_size;
    float *in = xmalloc(COUNT * 4), *out = xmalloc(COUNT * 4), *ref = xmalloc(COUNT * 4);
    for (uint64_t i = 0; i < COUNT; i++) {
        in[i] = order_value(me, i);
        ref[i] = hier_order_sum(node_of, n, i);
    }
    static const size_t sizes[] = {5, 333, COUNT};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        snprintf(g_case, sizeof g_case, "hier %s fold order count %zu", label, sizes[k]);
        memset(out, 0, COUNT * 4);
        OK(msr_comm_allreduce(c, in, out, sizes[k], MSR_DTYPE_F32, MSR_OP_SUM));
        for (size_t i = 0; i < sizes[k]; i++)
            if (memcmp(&out[i], &ref[i], 4) != 0)
                fail("%s: element %zu is %a, the two-level order gives %a", g_case, i,
                     (double)out[i], (double)ref[i]);
        int64_t h = (int64_t)fnv(out, sizes[k] * 4), *all = xmalloc((size_t)n * sizeof *all);
        OK(msr_comm_allgather(c, &h, all, 1, MSR_DTYPE_I64));
        for (int r = 0; r < n; r++)
            if (all[r] != h)
                fail("%s: rank %d got other bits than rank %d", g_case, r, me);
        free(all);
        /* reduce folds along the chain of nodes from the root's */
        for (int root = 0; root<n; root += n> 2 ? n / 2 : 1) {
            snprintf(g_case, sizeof g_case, "hier %s reduce fold order count %zu root %d", label,
                     sizes[k], root);
            memset(out, 0, COUNT * 4);
            OK(msr_comm_reduce(c, in, me == root ? out : NULL, sizes[k], MSR_DTYPE_F32, MSR_OP_SUM,
                               root));
            for (size_t i = 0; me == root && i < sizes[k]; i++) {
                float want = hier_chain_sum(node_of, n, root, i);
                if (memcmp(&out[i], &want, 4) != 0)
                    fail("%s: element %zu is %a, the chain of nodes gives %a", g_case, i,
                         (double)out[i], (double)want);
            }
        }
        /* reduce_scatter folds the same way: each block has the bits the
         * allreduce gives its elements */
        size_t rc = sizes[k] / (size_t)n;
        if (rc == 0)
            continue;
        snprintf(g_case, sizeof g_case, "hier %s reduce_scatter fold order block %zu", label, rc);
        OK(msr_comm_reduce_scatter(c, in, out, rc, MSR_DTYPE_F32, MSR_OP_SUM));
        for (size_t i = 0; i < rc; i++)
            if (memcmp(&out[i], &ref[(size_t)me * rc + i], 4) != 0)
                fail("%s: element %zu is %a, the two-level order gives %a", g_case, i,
                     (double)out[i], (double)ref[(size_t)me * rc + i]);
    }
    free(node_of);
    free(in);
    free(out);
    free(ref);
}

static void mode_hier(msr_ctx_t *ctx, msr_comm_t *world)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    int local = msr_local_world_size(ctx), nodes = n / local;
    if (nodes < 2 || local < 2)
        fail("mode hier wants several nodes of several ranks, has %d x %d", nodes, local);
    setenv("MSR_COMM_ALGO_ALLREDUCE", "hier", 1);
    setenv("MSR_COMM_ALGO_REDUCE_SCATTER", "hier", 1);
    setenv("MSR_COMM_ALGO_REDUCE", "hier", 1);
    setenv("MSR_COMM_ALGO_ALLGATHER", "hier", 1);
    setenv("MSR_COMM_ALGO_BROADCAST", "hier", 1);
    setenv("MSR_COMM_SHM_MAX", "0", 1);
    setenv("MSR_COMM_SHM_TILE", "4096", 1); /* parts of many tiles */
    setenv("MSR_COMM_SHM_TILES", "2", 1);
    /* the exchange between nodes in many small units, few in flight */
    setenv("MSR_COMM_HIER_CHUNK", "4096", 1);
    setenv("MSR_COMM_HIER_WINDOW", "2", 1);
    /* the world, even nodes; the same members ranked backwards (the nodes'
     * order is not the ranks'); uneven: the first node and one rank of
     * each other node (3+1, 2+1+1), and the first node and one rank of the
     * second (2+1 with three nodes) */
    msr_comm_t *w = NULL;
    snprintf(g_case, sizeof g_case, "hier dup");
    OK(msr_comm_dup(world, 0, &w));
    char label[64];
    snprintf(label, sizeof label, "%dx%d", nodes, local);
    check_hier_group(w, label, local);
    struct {
        const char *label;
        int color, key;
    } splits[] = {
        {"backwards", 0, -me},
        {"first node + one of each other", me < local || me % local == 0 ? 0 : MSR_COMM_NO_COLOR,
         me},
        {"first node + one", me <= local ? 0 : MSR_COMM_NO_COLOR, me},
    };
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        if (i == 2 && nodes < 3)
            continue; /* the same as the one before */
        msr_comm_t *sub = NULL;
        snprintf(g_case, sizeof g_case, "hier split %s", splits[i].label);
        OK(msr_comm_split(w, splits[i].color, splits[i].key, &sub));
        if (sub != NULL) {
            check_hier_group(sub, splits[i].label, local);
            msr_comm_destroy(sub);
        }
    }
    msr_comm_destroy(w);
    static const char *const vars[] = {"MSR_COMM_ALGO_ALLREDUCE", "MSR_COMM_ALGO_REDUCE_SCATTER",
                                       "MSR_COMM_ALGO_REDUCE",    "MSR_COMM_ALGO_ALLGATHER",
                                       "MSR_COMM_ALGO_BROADCAST", "MSR_COMM_SHM_MAX",
                                       "MSR_COMM_SHM_TILE",       "MSR_COMM_SHM_TILES",
                                       "MSR_COMM_HIER_CHUNK",     "MSR_COMM_HIER_WINDOW"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    /* the defaults: sizes on both sides of the allreduce's threshold */
    tc_t t = {world, "world auto", n, me};
    snprintf(g_case, sizeof g_case, "hier auto");
    check_allreduce(&t, MSR_DTYPE_F32, MSR_OP_SUM, 1000, 0);
    check_allreduce(&t, MSR_DTYPE_F32, MSR_OP_SUM, 100003, 1);
    check_reduce_scatter(&t, MSR_DTYPE_F32, MSR_OP_SUM, 300007, 0);
    check_broadcast(&t, MSR_DTYPE_F32, 1000, 1);
    check_broadcast(&t, MSR_DTYPE_F32, 100003, n - 1);
}

/* ---- failures ---- */

static void *killer(void *arg)
{
    int ms = *(int *)arg;
    usleep((useconds_t)ms * 1000);
    kill(getpid(), SIGKILL);
    return NULL;
}

/* The victim dies (kill) or stops answering (stop) while the others loop
 * allreduces; each survivor must fail with one of the expected statuses
 * within limit_ms of the event and can destroy the communicator. */
/* The collective a failure test repeats until it fails. */
enum { FAIL_ALLREDUCE, FAIL_REDUCE_SCATTER, FAIL_ALLGATHER, FAIL_BROADCAST, FAIL_REDUCE };

/* One call of the collective coll on world: count elements in and out
 * (reduce-scatter's input and allgather's output are the whole vector, n
 * blocks of count / n). */
static msr_status_t failure_collective(msr_comm_t *world, int coll, float *a, float *b,
                                       size_t count)
{
    size_t n = (size_t)msr_comm_size(world);
    int me = msr_comm_rank(world);
    if (coll == FAIL_REDUCE_SCATTER)
        return msr_comm_reduce_scatter(world, a, b, count / n, MSR_DTYPE_F32, MSR_OP_SUM);
    if (coll == FAIL_ALLGATHER)
        return msr_comm_allgather(world, a, b, count / n, MSR_DTYPE_F32);
    if (coll == FAIL_BROADCAST)
        return msr_comm_broadcast(world, a, count, MSR_DTYPE_F32, 0);
    if (coll == FAIL_REDUCE)
        return msr_comm_reduce(world, a, me == 0 ? b : NULL, count, MSR_DTYPE_F32, MSR_OP_SUM, 0);
    return msr_comm_allreduce(world, a, b, count, MSR_DTYPE_F32, MSR_OP_SUM);
}

/* When the stopped victim said it stopped (it stops between two
 * collectives, after its own 300 ms), from the store. */
static double stopped_at(msr_ctx_t *ctx)
{
    void *v = NULL;
    size_t len = 0;
    OK(msr_store_get(ctx, "comm_worker/stopped_at", 30000, &v, &len));
    if (len != sizeof(double))
        fail("stopped_at has %zu bytes", len);
    double at;
    memcpy(&at, v, sizeof at);
    free(v);
    return at;
}

/* algo: what the failure's message must name (the algorithm forced), or NULL */
static void mode_failure(msr_ctx_t *ctx, msr_comm_t *world, int stop, size_t count, int coll,
                         const char *algo)
{
    int n = msr_comm_size(world), me = msr_comm_rank(world);
    int victim = stop ? 1 : n - 1;
    /* msrun sends SIGTERM to the survivors when a worker dies: this test
     * wants to see them notice on their own. */
    signal(SIGTERM, SIG_IGN);
    int *pids = xmalloc((size_t)n * sizeof *pids);
    int pid = getpid();
    OK(msr_allgather(ctx, &pid, sizeof pid, pids));
    int64_t timeout_ms = stop ? 3000 : 30000;
    msr_comm_set_timeout(world, timeout_ms);
    /* count elements in and out: reduce-scatter's input and allgather's
     * output are the whole vector, n blocks of count / n */
    float *a = xmalloc(count * 4), *b = xmalloc(count * 4);
    for (size_t i = 0; i < count; i++)
        a[i] = 1.0f;
    OK(msr_comm_barrier(world));
    if (me == victim && !stop) {
        static int delay = 300;
        pthread_t th;
        pthread_create(&th, NULL, killer, &delay);
    }
    /* the victim's event (its SIGKILL, or that it stops answering) is
     * meant 300 ms after the barrier; a loaded machine can make it later */
    double start = now_ms(), event = start + 300;
    msr_status_t st = MSR_OK;
    long iters = 0;
    while (st == MSR_OK) {
        if (stop && me == victim && now_ms() >= event) {
            /* says when it stopped (one clock: all ranks are on this
             * machine), then stops answering: sleeps (SIGTERM ignored)
             * until killed */
            double at = now_ms();
            OK(msr_store_set(ctx, "comm_worker/stopped_at", &at, sizeof at));
            for (;;)
                pause();
        }
        st = failure_collective(world, coll, a, b, count);
        iters++;
        if (now_ms() - start > 60000)
            fail("still running after 60 s");
    }
    double failed_at = now_ms(), took = failed_at - event;
    char why[256];
    snprintf(why, sizeof why, "%s", msr_last_error());
    if (stop) /* timed from when the victim did stop, not from when it meant to */
        took = failed_at - stopped_at(ctx);
    int expected =
        stop ? (st == MSR_ERR_TIMEOUT || st == MSR_ERR_PEER_LOST) : (st == MSR_ERR_PEER_LOST);
    static const char *const names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                        "reduce"};
    if (!expected)
        fail("%s failed with %s (%s)", names[coll], msr_status_name(st), why);
    if (algo != NULL && strstr(why, algo) == NULL)
        fail("the failure is not %s's: %s", algo, why);
    /* from the victim's event (stop: from when it did stop), the
     * communicator's timeout (a kill is noticed long before it), and 2 s
     * for the deadline's check and the aborts to reach every survivor on a
     * loaded machine */
    double limit = (double)timeout_ms + 2000;
    if (took > limit)
        fail("noticed after %.0f ms, limit %.0f ms", took, limit);
    if (msr_comm_status(world) == MSR_OK)
        fail("the communicator is not marked broken");
    msr_status_t again = msr_comm_barrier(world);
    if (again == MSR_OK)
        fail("a broken communicator still works");
    msr_comm_destroy(world);
    printf("rank %d survived: %s after %.0f ms (%ld %s calls): %s\n", me, msr_status_name(st), took,
           iters, names[coll], why);
    fflush(stdout);
    if (stop && me == 0)
        kill(pids[victim], SIGKILL); /* the stopped rank would wait forever */
    free(pids);
    free(a);
    free(b);
    msr_finalize(ctx);
    exit(0);
}

/* The algorithms mode forces, through the communicator's environment. */
static void force_algorithms(const char *mode)
{
    if (strcmp(mode, "killring") == 0)
        setenv("MSR_COMM_ALGO_ALLREDUCE", "ring", 1);
    if (strcmp(mode, "killhier") == 0)
        setenv("MSR_COMM_ALGO_ALLREDUCE", "hier", 1);
    if (strcmp(mode, "killhierrs") == 0) /* the blocks routed through the nodes */
        setenv("MSR_COMM_ALGO_REDUCE_SCATTER", "hier", 1);
    if (strcmp(mode, "killhierag") == 0)
        setenv("MSR_COMM_ALGO_ALLGATHER", "hier", 1);
    if (strcmp(mode, "killhierbc") == 0) /* the chain of nodes */
        setenv("MSR_COMM_ALGO_BROADCAST", "hier", 1);
    if (strcmp(mode, "killhierred") == 0)
        setenv("MSR_COMM_ALGO_REDUCE", "hier", 1);
    /* auto leaves the slots' broadcast out where ranks outnumber CPUs */
    if (strcmp(mode, "small") == 0 || strcmp(mode, "killsmallbc") == 0)
        setenv("MSR_COMM_ALGO_BROADCAST", "shm", 1);
    if (strcmp(mode, "inflighthier") == 0) { /* several two-level operations in flight */
        static const char *const ops[] = {"ALLREDUCE", "REDUCE_SCATTER", "ALLGATHER", "BROADCAST",
                                          "REDUCE"};
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
            char var[64];
            snprintf(var, sizeof var, "MSR_COMM_ALGO_%s", ops[i]);
            setenv(var, "hier", 1);
        }
    }
}

/* Runs mode's checks on world; 0 when mode is not one of these. */
static int run_mode(msr_ctx_t *ctx, msr_comm_t *world, const char *mode)
{
    if (strcmp(mode, "collectives") == 0)
        mode_collectives(world);
    else if (strcmp(mode, "samecomm") == 0)
        mode_samecomm(world);
    else if (strcmp(mode, "inflight") == 0 || strcmp(mode, "inflighthier") == 0)
        mode_inflight(world);
    else if (strcmp(mode, "p2p") == 0)
        mode_p2p(world);
    else if (strcmp(mode, "threads") == 0)
        mode_threads(world);
    else if (strcmp(mode, "determinism") == 0)
        mode_determinism(world);
    else if (strcmp(mode, "hier") == 0)
        mode_hier(ctx, world);
    else if (strcmp(mode, "small") == 0)
        mode_small(world);
    else if (strcmp(mode, "leave") == 0)
        mode_leave(ctx, world);
    else
        return 0;
    return 1;
}

/* Runs a failure mode (a rank killed or stopped mid-collective; does not
 * return); 0 when mode is not one. */
static int run_failure_mode(msr_ctx_t *ctx, msr_comm_t *world, const char *mode)
{
    if (strcmp(mode, "kill") == 0 || strcmp(mode, "killring") == 0 ||
        strcmp(mode, "killhier") == 0) /* 1 MiB */
        mode_failure(ctx, world, 0, 1 << 18, FAIL_ALLREDUCE,
                     strcmp(mode, "killhier") == 0 ? "allreduce(hier)" : NULL);
    else if (strcmp(mode, "killhierrs") == 0)
        mode_failure(ctx, world, 0, 1 << 18, FAIL_REDUCE_SCATTER, "reduce_scatter(hier)");
    else if (strcmp(mode, "killhierag") == 0)
        mode_failure(ctx, world, 0, 1 << 18, FAIL_ALLGATHER, "allgather(hier)");
    else if (strcmp(mode, "killhierbc") == 0)
        mode_failure(ctx, world, 0, 1 << 18, FAIL_BROADCAST, "broadcast(hier)");
    else if (strcmp(mode, "killhierred") == 0)
        mode_failure(ctx, world, 0, 1 << 18, FAIL_REDUCE, "reduce(hier)");
    else if (strcmp(mode, "killsmall") == 0) /* 8 bytes: shared memory on one node */
        mode_failure(ctx, world, 0, 2, FAIL_ALLREDUCE, NULL);
    else if (strcmp(mode, "killsmallbc") == 0) /* the slots of the other collectives */
        mode_failure(ctx, world, 0, 2, FAIL_BROADCAST, "broadcast(shm)");
    else if (strcmp(mode, "killsmallbcauto") == 0) /* the slots, crowded or not */
        mode_failure(ctx, world, 0, 2, FAIL_BROADCAST, "broadcast(shm)");
    else if (strcmp(mode, "killsmallag") == 0)
        mode_failure(ctx, world, 0, 64, FAIL_ALLGATHER, "allgather(shm)");
    else if (strcmp(mode, "killsmallrs") == 0)
        mode_failure(ctx, world, 0, 64, FAIL_REDUCE_SCATTER, "reduce_scatter(shm)");
    else if (strcmp(mode, "stop") == 0)
        mode_failure(ctx, world, 1, 1 << 18, FAIL_ALLREDUCE, NULL);
    else
        return 0;
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr,
                "usage: comm_worker "
                "collectives|samecomm|inflight|p2p|threads|determinism|kill|killring|killsmall|"
                "leave|stop|hier|killhier|killhierrs|killhierag|killhierbc|killhierred|"
                "inflighthier|small|killsmallbc|killsmallbcauto|killsmallag|killsmallrs\n");
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
    g_nodes = msr_node_count(ctx);
    force_algorithms(mode);
    msr_comm_t *world = NULL;
    snprintf(g_case, sizeof g_case, "world");
    OK(msr_comm_world(ctx, &world));
    if (msr_comm_size(world) != msr_world_size(ctx) || msr_comm_rank(world) != g_rank ||
        msr_comm_world_rank(world, g_rank) != g_rank)
        fail("world: rank %d of %d", msr_comm_rank(world), msr_comm_size(world));
    double t0 = now_ms();
    if (!run_mode(ctx, world, mode) && !run_failure_mode(ctx, world, mode))
        fail("unknown mode %s", mode);
    snprintf(g_case, sizeof g_case, "final barrier");
    OK(msr_comm_barrier(world));
    msr_comm_destroy(world);
    if (g_rank == 0)
        printf("ok %s (%ld results checked on rank 0, %.1f s)\n", mode, g_checks,
               (now_ms() - t0) / 1e3);
    msr_finalize(ctx);
    return 0;
}
