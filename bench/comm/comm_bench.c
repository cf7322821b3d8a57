/* Collective latency and bus bandwidth of msrun's communicators. Started
 * under msrun; rank 0 prints one line per operation and size:
 *   op=allreduce np=2 bytes=8 lat_us=0.61 busbw_GBs=0.013 calls=2012
 * where lat_us is the slowest rank's mean time per call, calls counts every
 * call of the op at that size (warm-up and check included: what a traffic
 * counter read around the run divides by) and busbw follows
 * nccl-tests (allreduce: bytes/time * 2(n-1)/n; reduce_scatter, allgather,
 * alltoall: * (n-1)/n; broadcast, reduce: * 1). broadcast_once times
 * single broadcasts, as a user makes one after a barrier: each call
 * follows a barrier, and only the broadcast is timed (no call overlaps
 * the next); its line adds cycle_us, the slowest rank's mean time of the
 * barrier and the broadcast together (where ranks share cores, how long
 * the broadcast's readers wait for the root is mostly how the barrier left
 * them: the two figures tell it apart). bytes is the whole vector
 * (allgather: the gathered output; reduce_scatter: the input). Each size is
 * warmed up for 0.2 s, then timed over 2000, 200, 50 or 10 calls (below
 * 64 KiB, 1 MiB, 16 MiB, above), as the Open MPI reference does.
 * --check then makes one more call per size on inputs whose sums are exact
 * in f32 and verifies every element on every rank (allreduce,
 * reduce_scatter, allgather): rank 0 prints "check op=... bytes=... ok", and
 * a wrong element makes the rank that saw it print it and exit 1.
 * Usage: comm_bench [--op NAME[,NAME...]|all] [--sizes LIST] [--iters N] [--dtype T]
 *                   [--check] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "msrun/msrun.h"

static const char *const ops[] = {"allreduce",      "reduce_scatter", "allgather", "broadcast",
                                  "broadcast_once", "reduce",         "alltoall",  "barrier"};
#define N_OPS (sizeof ops / sizeof ops[0])

/* Whether op is in list: "all", or names separated by commas. */
static int op_wanted(const char *list, const char *op)
{
    size_t len = strlen(op);
    if (strcmp(list, "all") == 0)
        return 1;
    for (const char *p = list; p != NULL; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, op, len) == 0 && (p[len] == ',' || p[len] == '\0'))
            return 1;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One call of an op; resolved from its name once per size (op_call), so
 * that the timed loop compares no strings: the ping-pong bound it is held
 * to pays nothing of the kind. */
typedef msr_status_t (*op_fn_t)(msr_comm_t *c, void *a, void *b, size_t count, msr_dtype_t dt);

static msr_status_t op_allreduce(msr_comm_t *c, void *a, void *b, size_t count, msr_dtype_t dt)
{
    return msr_comm_allreduce(c, a, b, count, dt, MSR_OP_SUM);
}

static msr_status_t op_reduce_scatter(msr_comm_t *c, void *a, void *b, size_t count, msr_dtype_t dt)
{
    return msr_comm_reduce_scatter(c, a, b, count, dt, MSR_OP_SUM);
}

static msr_status_t op_allgather(msr_comm_t *c, void *a, void *b, size_t count, msr_dtype_t dt)
{
    return msr_comm_allgather(c, a, b, count, dt);
}

static msr_status_t op_broadcast(msr_comm_t *c, void *a, void *b, size_t count, msr_dtype_t dt)
{
    (void)b;
    return msr_comm_broadcast(c, a, count, dt, 0);
}

static msr_status_t op_reduce(msr_comm_t *c, void *a, void *b, size_t count, msr_dtype_t dt)
{
    return msr_comm_reduce(c, a, b, count, dt, MSR_OP_SUM, 0);
}

static msr_status_t op_alltoall(msr_comm_t *c, void *a, void *b, size_t count, msr_dtype_t dt)
{
    return msr_comm_alltoall(c, a, b, count, dt);
}

static msr_status_t op_barrier(msr_comm_t *c, void *a, void *b, size_t count, msr_dtype_t dt)
{
    (void)a, (void)b, (void)count, (void)dt;
    return msr_comm_barrier(c);
}

static op_fn_t op_call(const char *op)
{
    if (strcmp(op, "allreduce") == 0)
        return op_allreduce;
    if (strcmp(op, "reduce_scatter") == 0)
        return op_reduce_scatter;
    if (strcmp(op, "allgather") == 0)
        return op_allgather;
    if (strcmp(op, "broadcast") == 0 || strcmp(op, "broadcast_once") == 0)
        return op_broadcast;
    if (strcmp(op, "reduce") == 0)
        return op_reduce;
    if (strcmp(op, "alltoall") == 0)
        return op_alltoall;
    return op_barrier;
}

/* --check's input: rank r's element i (small integers: exact sums) */
static float check_value(int r, size_t i)
{
    return (float)((r + 1) * (int)(i % 13 + 1));
}

/* One verified call of op (allreduce, reduce_scatter or allgather, f32):
 * returns the number of wrong elements on this rank (the first printed), or
 * -1 when the call itself failed (the status in *st_p). */
static long check_op(msr_comm_t *c, const char *op, float *a, float *b, size_t count,
                     msr_status_t *st_p)
{
    int n = msr_comm_size(c), me = msr_comm_rank(c);
    int gather = strcmp(op, "allgather") == 0, scatter = strcmp(op, "reduce_scatter") == 0;
    size_t in = scatter ? count * (size_t)n : count, out = gather ? count * (size_t)n : count;
    for (size_t i = 0; i < in; i++)
        a[i] = check_value(me, i);
    for (size_t i = 0; i < out; i++)
        b[i] = -1.0f;
    *st_p = op_call(op)(c, a, b, count, MSR_DTYPE_F32);
    if (*st_p != MSR_OK)
        return -1;
    long bad = 0;
    for (size_t i = 0; i < out; i++) {
        float want = 0;
        if (gather) {
            want = check_value((int)(i / count), i % count);
        } else {
            size_t j = scatter ? (size_t)me * count + i : i;
            for (int r = 0; r < n; r++)
                want += check_value(r, j);
        }
        if (b[i] != want && bad++ == 0)
            fprintf(stderr, "comm_bench: rank %d: %s of %zu floats: element %zu is %g, not %g\n",
                    me, op, count, i, (double)b[i], (double)want);
    }
    return bad;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: comm_bench [--op allreduce|reduce_scatter|allgather|broadcast|"
            "broadcast_once|reduce|alltoall|barrier[,...]|all] [--sizes 8,1024,...] [--iters N] "
            "[--dtype f32|f64|f16|bf16|i32|i64|u8] [--check]\n"
            "  --check: allreduce, reduce_scatter or allgather in f32 only\n");
    return 2;
}

/* The command line. */
typedef struct args {
    const char *ops;   /* --op: "all", or names separated by commas */
    const char *sizes; /* --sizes: bytes, separated by commas */
    long iters;        /* --iters; 0: by size */
    int check;         /* --check */
    msr_dtype_t dt;    /* --dtype */
} args_t;

/* Reads the command line into o; 0, or 2 with the usage printed. */
static int parse_args(int argc, char **argv, args_t *o)
{
    *o = (args_t){
        .ops = "allreduce", .sizes = "8,1024,65536,1048576,16777216,67108864", .dt = MSR_DTYPE_F32};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--op") == 0 && i + 1 < argc) {
            o->ops = argv[++i];
        } else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
            o->sizes = argv[++i];
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            o->iters = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            const char *t = argv[++i];
            int found = 0;
            for (int d = 0; d < MSR_DTYPE_COUNT; d++)
                if (strcmp(t, msr_dtype_name((msr_dtype_t)d)) == 0) {
                    o->dt = (msr_dtype_t)d;
                    found = 1;
                }
            if (!found)
                return usage();
        } else if (strcmp(argv[i], "--check") == 0) {
            o->check = 1;
        } else {
            return usage();
        }
    }
    /* every name in the list must be an op */
    size_t named = 1, known = 0;
    for (const char *p = o->ops; (p = strchr(p, ',')) != NULL; p++)
        named++;
    for (size_t k = 0; k < N_OPS; k++)
        known += op_wanted(o->ops, ops[k]);
    if (strcmp(o->ops, "all") != 0 && known != named)
        return usage();
    if (o->check && (o->dt != MSR_DTYPE_F32 ||
                     (strcmp(o->ops, "allreduce") != 0 && strcmp(o->ops, "reduce_scatter") != 0 &&
                      strcmp(o->ops, "allgather") != 0)))
        return usage();
    return 0;
}

/* Warm-up, then iters timed calls of op on a and b. *calls_p counts each
 * warm-up call too; worst_p[0]: the slowest rank's mean time per call.
 * broadcast_once: a barrier before each call, outside the timed part;
 * worst_p[1]: the slowest rank's mean time of both (else 0). */
static msr_status_t time_op(msr_comm_t *comm, const char *op, char *a, char *b, size_t count,
                            msr_dtype_t dt, long iters, long *calls_p, double worst_p[2])
{
    msr_status_t st = MSR_OK;
    int once = strcmp(op, "broadcast_once") == 0;
    op_fn_t call = op_call(op);
    /* Warm-up: rounds of 4 calls until 0.2 s have passed on the
     * slowest rank (agreed by an allreduce, so that every rank makes
     * the same calls); startup noise stays out of the figures. */
    double w0 = now_s();
    for (int32_t done = 0; !done && st == MSR_OK;) {
        for (int w = 0; w < 4 && st == MSR_OK; w++, (*calls_p)++) {
            if (once)
                st = msr_comm_barrier(comm);
            if (st == MSR_OK)
                st = call(comm, a, b, count, dt);
        }
        int32_t mine = now_s() - w0 >= 0.2;
        if (st == MSR_OK)
            st = msr_comm_allreduce(comm, &mine, &done, 1, MSR_DTYPE_I32, MSR_OP_MIN);
    }
    if (st == MSR_OK)
        st = msr_comm_barrier(comm);
    double t = 0, cycle = 0;
    if (once) {
        for (long i = 0; i < iters && st == MSR_OK; i++) {
            double c0 = now_s();
            st = msr_comm_barrier(comm);
            double t0 = now_s();
            if (st == MSR_OK)
                st = call(comm, a, b, count, dt);
            double t1 = now_s();
            t += t1 - t0;
            cycle += t1 - c0;
        }
    } else {
        t = now_s();
        for (long i = 0; i < iters && st == MSR_OK; i++)
            st = call(comm, a, b, count, dt);
        t = now_s() - t;
    }
    double mean[2] = {t / (double)iters, cycle / (double)iters};
    if (st == MSR_OK)
        st = msr_comm_allreduce(comm, mean, worst_p, 2, MSR_DTYPE_F64, MSR_OP_MAX);
    return st;
}

/* One op at one size: measured, checked with --check, and printed by
 * rank 0. 0, or 1 when it failed (said on stderr) or a check found wrong
 * elements. */
static int bench_size(msr_comm_t *comm, const args_t *o, const char *op, size_t bytes)
{
    int n = msr_comm_size(comm), rank = msr_comm_rank(comm), check = o->check;
    size_t es = msr_dtype_size(o->dt);
    /* count: per rank for the collectives that split the vector */
    int per_rank = strcmp(op, "reduce_scatter") == 0 || strcmp(op, "allgather") == 0 ||
                   strcmp(op, "alltoall") == 0;
    size_t count = bytes / es;
    if (per_rank)
        count /= (size_t)n;
    if (count == 0 && bytes > 0)
        count = 1;
    size_t total = per_rank ? count * (size_t)n : count;
    size_t used = strcmp(op, "barrier") == 0 ? 0 : total * es;
    char *a = malloc(total * es + 64), *b = malloc(total * es + 64);
    if (a == NULL || b == NULL) {
        fprintf(stderr, "comm_bench: out of memory for %zu bytes\n", used);
        free(a);
        free(b);
        return 1;
    }
    for (size_t i = 0; i < total * es; i++)
        a[i] = (char)(rank + i % 7);
    memset(b, 0, total * es);
    long iters = o->iters > 0          ? o->iters
                 : bytes < 65536       ? 2000
                 : bytes < (1 << 20)   ? 200
                 : bytes < (16u << 20) ? 50
                                       : 10;
    long calls = iters + check;
    double w[2] = {0, 0};
    msr_status_t st = time_op(comm, op, a, b, count, o->dt, iters, &calls, w);
    double worst = w[0];
    int64_t bad = 0, bad_all = 0;
    if (check && st == MSR_OK &&
        (bad = check_op(comm, op, (float *)a, (float *)b, count, &st)) >= 0)
        st = msr_comm_allreduce(comm, &bad, &bad_all, 1, MSR_DTYPE_I64, MSR_OP_SUM);
    free(a);
    free(b);
    if (st != MSR_OK) {
        fprintf(stderr, "comm_bench: %s of %zu bytes: %s: %s\n", op, used, msr_status_str(st),
                msr_last_error());
        return 1;
    }
    double factor = strcmp(op, "allreduce") == 0 ? 2.0 * (n - 1) / n
                    : per_rank                   ? (double)(n - 1) / n
                    : strcmp(op, "barrier") == 0 ? 0.0
                                                 : 1.0;
    if (rank == 0) {
        printf("op=%s np=%d bytes=%zu lat_us=%.2f busbw_GBs=%.3f calls=%ld", op, n, used,
               worst * 1e6, worst > 0 ? (double)used / worst / 1e9 * factor : 0.0, calls);
        if (strcmp(op, "broadcast_once") == 0)
            printf(" cycle_us=%.2f", w[1] * 1e6);
        printf("\n");
        fflush(stdout);
    }
    int rc = 0;
    if (check && bad_all != 0) {
        if (rank == 0)
            printf("check op=%s bytes=%zu FAILED: %lld wrong elements\n", op, used,
                   (long long)bad_all);
        rc = 1;
    } else if (check && rank == 0) {
        printf("check op=%s bytes=%zu ok\n", op, used);
    }
    fflush(stdout);
    return rc;
}

/* Every size of --sizes for op (the barrier: one, of 0 bytes), up to the
 * first that fails; 0 or 1. */
static int bench_op(msr_comm_t *comm, const args_t *o, const char *op)
{
    char list[1024];
    snprintf(list, sizeof list, "%s", strcmp(op, "barrier") == 0 ? "0" : o->sizes);
    char *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(list, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save))
        rc = bench_size(comm, o, op, strtoull(tok, NULL, 10));
    return rc;
}

int main(int argc, char **argv)
{
    args_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0)
        return rc;
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "comm_bench: msr_init: %s: %s\n", msr_status_str(st), msr_last_error());
        return 1;
    }
    msr_comm_t *comm = NULL;
    st = msr_comm_world(ctx, &comm);
    if (st != MSR_OK) {
        fprintf(stderr, "comm_bench: msr_comm_world: %s: %s\n", msr_status_str(st),
                msr_last_error());
        msr_finalize(ctx);
        return 1;
    }
    for (size_t k = 0; k < N_OPS && rc == 0; k++)
        if (op_wanted(o.ops, ops[k]))
            rc = bench_op(comm, &o, ops[k]);
    msr_comm_destroy(comm);
    msr_finalize(ctx);
    return rc;
}
