/* Store latency and throughput as a worker sees them: every rank of the job
 * times small store calls through libmsrun (its node's msrun, or the
 * coordinator directly), and rank 0 prints one line per call kind:
 *   op=set np=4 bytes=64 p50_us=180.2 p99_us=420.7 ops_s=21000
 * p50/p99 are over every rank's calls; ops_s is the whole job's rate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "msrun/msrun.h"

enum { OP_SET, OP_GET, OP_ADD, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"set", "get", "add"};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int fail(const char *what, msr_status_t st)
{
    fprintf(stderr, "store_job: %s: %s: %s\n", what, msr_status_str(st), msr_last_error());
    return 1;
}

/* Times iters calls of op by this rank; lat gets each call's seconds. */
static msr_status_t run_op(msr_ctx_t *ctx, int op, int iters, const char *value, size_t bytes,
                           double *lat)
{
    char key[64];
    int rank = msr_rank(ctx);
    for (int i = 0; i < iters; i++) {
        msr_status_t st = MSR_OK;
        double t0 = now_s();
        switch (op) {
        case OP_SET:
            snprintf(key, sizeof key, "bench/%d/%d", rank, i);
            st = msr_store_set(ctx, key, value, bytes);
            break;
        case OP_GET: {
            snprintf(key, sizeof key, "bench/%d/%d", rank, i);
            void *v = NULL;
            size_t len = 0;
            st = msr_store_get(ctx, key, 0, &v, &len);
            if (st == MSR_OK && len != bytes)
                st = MSR_ERR_CORRUPT;
            free(v);
            break;
        }
        case OP_ADD:
            st = msr_store_add(ctx, "bench/counter", 1, NULL);
            break;
        }
        lat[i] = now_s() - t0;
        if (st != MSR_OK)
            return st;
    }
    return MSR_OK;
}

int main(int argc, char **argv)
{
    int iters = 500;
    size_t bytes = 64;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc)
            bytes = (size_t)strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: store_job [--iters N] [--bytes B]\n");
            return 2;
        }
    }
    if (iters < 1 || bytes < 1 || bytes > (64u << 20)) {
        fprintf(stderr, "store_job: --iters must be >= 1 and --bytes 1 .. 64 MiB\n");
        return 2;
    }
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK)
        return fail("msr_init", st);
    int np = msr_world_size(ctx), rank = msr_rank(ctx);
    char *value = malloc(bytes);
    double *lat = malloc(sizeof *lat * (size_t)iters);
    double *all = malloc(sizeof *all * (size_t)iters * (size_t)np);
    if (value == NULL || lat == NULL || all == NULL) {
        fprintf(stderr, "store_job: out of memory\n");
        return 1;
    }
    memset(value, 'v', bytes);
    int rc = 0;
    for (int op = 0; op < OP_COUNT && rc == 0; op++) {
        if ((st = msr_barrier(ctx)) != MSR_OK) {
            rc = fail("barrier", st);
            break;
        }
        double t0 = now_s();
        if ((st = run_op(ctx, op, iters, value, bytes, lat)) != MSR_OK) {
            rc = fail(op_names[op], st);
            break;
        }
        /* the job's rate: every rank's calls over the slowest rank's time */
        double wall = now_s() - t0, walls_max = wall;
        double *walls = malloc(sizeof *walls * (size_t)np);
        if (walls == NULL || (st = msr_allgather(ctx, &wall, sizeof wall, walls)) != MSR_OK ||
            (st = msr_allgather(ctx, lat, sizeof *lat * (size_t)iters, all)) != MSR_OK) {
            free(walls);
            rc = fail("allgather", st);
            break;
        }
        for (int r = 0; r < np; r++)
            if (walls[r] > walls_max)
                walls_max = walls[r];
        free(walls);
        if (rank == 0) {
            size_t n = (size_t)iters * (size_t)np;
            qsort(all, n, sizeof *all, cmp_double);
            printf("op=%s np=%d bytes=%zu p50_us=%.1f p99_us=%.1f ops_s=%.0f\n", op_names[op], np,
                   op == OP_ADD ? (size_t)8 : bytes, all[n / 2] * 1e6,
                   all[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] * 1e6, (double)n / walls_max);
            fflush(stdout);
        }
    }
    free(all);
    free(lat);
    free(value);
    msr_finalize(ctx);
    return rc;
}
