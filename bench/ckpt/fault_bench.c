/* What it costs to fault in fresh memory, as a resume's first write into
 * the trainer's parameters and moments does: MIB MiB of fresh anonymous
 * memory mapped writable (MADV_POPULATE_WRITE, as the checkpoint reader
 * does before each copy) in 4 KiB pages, then the same advised to be of
 * transparent huge pages (MADV_HUGEPAGE), alternately, RUNS times each.
 * Prints each kind's median, fastest and slowest wall seconds, the same
 * of its CPU seconds (this thread's, the kernel's work included; in a
 * virtual machine also the host's work on the guest's first touch of its
 * memory) and how much of the memory the kernel gave as huge pages
 * (AnonHugePages, the most of any run).
 * Usage: fault_bench [MIB] [RUNS] (defaults 349 and 9). Exit 2 on bad
 * arguments, 1 when the memory cannot be had or the kernel cannot
 * populate it. */
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>

#include "bench_util.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels refuse it: exit 1 */
#endif
#define HUGE ((size_t)2 << 20)

/* This process's anonymous memory in huge pages, in MiB (-1: unknown). */
static long huge_mib(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kb = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kb < 0 ? -1 : kb / 1024;
}

/* One run: len fresh bytes (2 MiB-aligned), advised huge or not, then
 * populated: 0 with the wall and CPU seconds and the huge MiB it got. */
static int one(size_t len, int huge, double *wall, double *cpu, long *hmib)
{
    char *m = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    char *p = (char *)(((uintptr_t)m + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    if (huge)
        (void)madvise(p, len, MADV_HUGEPAGE);
    double t0 = bench_clock_s(CLOCK_MONOTONIC), c0 = bench_clock_s(CLOCK_THREAD_CPUTIME_ID);
    int rc = madvise(p, len, MADV_POPULATE_WRITE);
    *wall = bench_clock_s(CLOCK_MONOTONIC) - t0;
    *cpu = bench_clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    *hmib = huge_mib();
    munmap(m, len + HUGE);
    return rc;
}

static void row(const char *name, double *wall, double *cpu, long hmib, int runs)
{
    bench_sort(wall, runs);
    bench_sort(cpu, runs);
    printf("| %-13s | %7.3f | %7.3f | %7.3f | %7.3f | %7.3f | %7.3f | %8ld |\n", name,
           wall[runs / 2], wall[0], wall[runs - 1], cpu[runs / 2], cpu[0], cpu[runs - 1], hmib);
}

int main(int argc, char **argv)
{
    long m, runs;
    if (bench_mib_runs(argc, argv, "fault_bench", 349, &m, &runs) != 0)
        return 2;
    size_t mib = (size_t)m;
    size_t len = ((mib << 20) + HUGE - 1) / HUGE * HUGE; /* whole huge pages */
    double wall[2][BENCH_MAX_RUNS], cpu[2][BENCH_MAX_RUNS];
    long hmib[2] = {0, 0};
    for (long i = 0; i < runs; i++) {
        for (int k = 0; k < 2; k++) {
            long h = 0;
            if (one(len, k, &wall[k][i], &cpu[k][i], &h) != 0) {
                fprintf(stderr, "fault_bench: cannot map or populate %zu MiB\n", mib);
                return 1;
            }
            hmib[k] = h > hmib[k] ? h : hmib[k];
        }
    }
    printf("fresh memory faulted in: %zu MiB, MADV_POPULATE_WRITE, median of %d runs each, "
           "alternating\n\n",
           len >> 20, (int)runs);
    printf("| %-13s | %7s | %7s | %7s | %7s | %7s | %7s | %8s |\n", "pages", "wall s", "fastest",
           "slowest", "CPU s", "fastest", "slowest", "huge MiB");
    printf("|---------------|--------:|--------:|--------:|--------:|--------:|--------:|---------:"
           "|\n");
    row("4 KiB", wall[0], cpu[0], hmib[0], (int)runs);
    row("MADV_HUGEPAGE", wall[1], cpu[1], hmib[1], (int)runs);
    return 0;
}
