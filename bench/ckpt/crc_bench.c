/* CRC-32 throughput on one core: GB/s of msr_crc32 over a buffer already
 * in memory, on the path this CPU takes (MSRUN_CPU_DISABLE=pclmul forces
 * the tables). Usage: crc_bench [MIB] [RUNS]; prints the median. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/crc32.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    int runs = argc > 2 ? atoi(argv[2]) : 9;
    if (mib == 0 || runs <= 0 || runs > 99) {
        fprintf(stderr, "usage: crc_bench [MIB >= 1] [RUNS 1..99]\n");
        return 2;
    }
    size_t n = mib << 20;
    unsigned char *b = malloc(n);
    if (b == NULL) {
        fprintf(stderr, "crc_bench: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 2654435761u >> 13);
    double gbs[99];
    uint32_t crc = 0;
    for (int r = 0; r < runs; r++) {
        double t0 = now_s();
        crc = msr_crc32(0, b, n);
        gbs[r] = (double)n / (now_s() - t0) / 1e9;
    }
    qsort(gbs, (size_t)runs, sizeof gbs[0], cmp_double);
    printf("crc32 %s: %.2f GB/s (median of %d over %zu MiB, crc %08x)\n",
           msr_crc32_folded() ? "folded (pclmul)" : "tables (slicing-by-8)", gbs[runs / 2], runs,
           mib, crc);
    free(b);
    return 0;
}
