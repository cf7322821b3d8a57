/* The offload store's streaming alone (parallel/offload.h): MB/s of a step
 * that reads and writes every chunk of N moments with a light update, per
 * engine and chunk size, the engines interleaved so a busy disk hurts both
 * alike. Prints a table; the default engine is the faster (docs/
 * performance.md "Optimizer offload").
 *
 * usage: offload_io_bench DIR [MB] [PASSES] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/err.h"
#include "parallel/offload.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* what AdamW does to a moment, roughly: touch every element once */
static msr_status_t touch(void *arg, size_t off, size_t n, float *m, float *v)
{
    (void)arg, (void)off;
    for (size_t i = 0; i < n; i++) {
        m[i] = m[i] * 0.9f + 0.1f;
        v[i] = v[i] * 0.95f + 0.05f;
    }
    return MSR_OK;
}

/* seconds per step of store off, the best of passes */
static double best_step(msr_offload_t *off, int passes)
{
    double best = 1e30;
    for (int p = 0; p < passes; p++) {
        double t0 = now_s();
        if (msr_offload_step(off, touch, NULL) != MSR_OK) {
            fprintf(stderr, "offload_io_bench: %s\n", msr_err_msg());
            exit(1);
        }
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: offload_io_bench DIR [MB] [PASSES]\n");
        return 2;
    }
    size_t mb = argc > 2 ? (size_t)atol(argv[2]) : 256;
    int passes = argc > 3 ? atoi(argv[3]) : 3;
    size_t count = mb * 1048576 / 8; /* m and v: 8 bytes an element */
    const size_t chunks[] = {1u << 20, 4u << 20, 16u << 20};
    const msr_offload_io_t ios[] = {MSR_OFFLOAD_IO_THREADS, MSR_OFFLOAD_IO_URING};
    printf("| %-14s | %9s | %12s |\n", "engine", "chunk", "MB/s (r+w)");
    printf("|----------------|-----------|--------------|\n");
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        for (size_t e = 0; e < sizeof ios / sizeof ios[0]; e++) {
            msr_offload_config_t cfg = {MSR_OFFLOAD_DISK, argv[1], chunks[c], ios[e], 0, 0};
            msr_offload_t *off;
            if (msr_offload_create(&cfg, count, &off) != MSR_OK) {
                printf("| %-14s | %9zu | %12s |\n",
                       ios[e] == MSR_OFFLOAD_IO_URING ? "uring" : "threads", chunks[c],
                       msr_err_msg());
                continue;
            }
            double t = best_step(off, passes);
            printf("| %-14s | %9zu | %12.0f |\n", msr_offload_engine(off), chunks[c],
                   2.0 * (double)count * 8 / t / 1e6);
            msr_offload_destroy(off);
        }
    }
    return 0;
}
