/* The Open MPI reference for comm_bench: the same operations, sizes,
 * iteration counts and output lines, measured the same way (the slowest
 * rank's mean time per call; bus bandwidth by the nccl-tests convention;
 * broadcast_once: a barrier before each broadcast, only the broadcast
 * timed, and cycle_us for the two together).
 * Run: mpirun --allow-run-as-root --oversubscribe -np N mpi_comm_bench
 *      [--op NAME[,NAME...]|all] [--sizes LIST] [--iters N] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* One call of an op, resolved from its name once per size (op_call) as
 * comm_bench does: the timed loop compares no strings. */
typedef int (*op_fn_t)(float *a, float *b, int count);

static int op_allreduce(float *a, float *b, int count)
{
    return MPI_Allreduce(a, b, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static int op_reduce_scatter(float *a, float *b, int count)
{
    return MPI_Reduce_scatter_block(a, b, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static int op_allgather(float *a, float *b, int count)
{
    return MPI_Allgather(a, count, MPI_FLOAT, b, count, MPI_FLOAT, MPI_COMM_WORLD);
}

static int op_broadcast(float *a, float *b, int count)
{
    (void)b;
    return MPI_Bcast(a, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
}

static int op_reduce(float *a, float *b, int count)
{
    return MPI_Reduce(a, b, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
}

static int op_alltoall(float *a, float *b, int count)
{
    return MPI_Alltoall(a, count, MPI_FLOAT, b, count, MPI_FLOAT, MPI_COMM_WORLD);
}

static int op_barrier(float *a, float *b, int count)
{
    (void)a, (void)b, (void)count;
    return MPI_Barrier(MPI_COMM_WORLD);
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

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    const char *op_arg = "allreduce";
    const char *sizes_arg = "8,1024,65536,1048576,16777216,67108864";
    long iters_arg = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--op") == 0 && i + 1 < argc)
            op_arg = argv[++i];
        else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc)
            sizes_arg = argv[++i];
        else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            iters_arg = strtol(argv[++i], NULL, 10);
    }
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (size_t k = 0; k < N_OPS; k++) {
        const char *op = ops[k];
        if (!op_wanted(op_arg, op))
            continue;
        char list[1024];
        snprintf(list, sizeof list, "%s", strcmp(op, "barrier") == 0 ? "0" : sizes_arg);
        char *save = NULL;
        for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            size_t bytes = strtoull(tok, NULL, 10);
            int per_rank = strcmp(op, "reduce_scatter") == 0 || strcmp(op, "allgather") == 0 ||
                           strcmp(op, "alltoall") == 0;
            size_t count = bytes / sizeof(float);
            if (per_rank)
                count /= (size_t)n;
            if (count == 0 && bytes > 0)
                count = 1;
            size_t total = per_rank ? count * (size_t)n : count;
            size_t used = strcmp(op, "barrier") == 0 ? 0 : total * sizeof(float);
            float *a = malloc(total * sizeof(float) + 64), *b = malloc(total * sizeof(float) + 64);
            for (size_t i = 0; i < total; i++)
                a[i] = (float)(rank + i % 7);
            memset(b, 0, total * sizeof(float));
            long iters = iters_arg > 0         ? iters_arg
                         : bytes < 65536       ? 2000
                         : bytes < (1 << 20)   ? 200
                         : bytes < (16u << 20) ? 50
                                               : 10;
            /* the same warm-up as comm_bench: 0.2 s on the slowest rank */
            int once = strcmp(op, "broadcast_once") == 0;
            op_fn_t call = op_call(op);
            double w0 = MPI_Wtime();
            for (int done = 0; !done;) {
                for (int w = 0; w < 4; w++) {
                    if (once)
                        MPI_Barrier(MPI_COMM_WORLD);
                    call(a, b, (int)count);
                }
                int mine = MPI_Wtime() - w0 >= 0.2;
                MPI_Allreduce(&mine, &done, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            }
            MPI_Barrier(MPI_COMM_WORLD);
            double t = 0, cycle = 0;
            for (long i = 0; once && i < iters; i++) {
                double c0 = MPI_Wtime();
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                call(a, b, (int)count);
                double t1 = MPI_Wtime();
                t += t1 - t0;
                cycle += t1 - c0;
            }
            if (!once) {
                t = MPI_Wtime();
                for (long i = 0; i < iters; i++)
                    call(a, b, (int)count);
                t = MPI_Wtime() - t;
            }
            double mean[2] = {t / (double)iters, cycle / (double)iters}, w[2];
            MPI_Allreduce(mean, w, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            double worst = w[0];
            double factor = strcmp(op, "allreduce") == 0 ? 2.0 * (n - 1) / n
                            : per_rank                   ? (double)(n - 1) / n
                            : strcmp(op, "barrier") == 0 ? 0.0
                                                         : 1.0;
            if (rank == 0) {
                printf("op=%s np=%d bytes=%zu lat_us=%.2f busbw_GBs=%.3f", op, n, used, worst * 1e6,
                       worst > 0 ? (double)used / worst / 1e9 * factor : 0.0);
                if (once)
                    printf(" cycle_us=%.2f", w[1] * 1e6);
                printf("\n");
                fflush(stdout);
            }
            free(a);
            free(b);
        }
    }
    MPI_Finalize();
    return 0;
}
