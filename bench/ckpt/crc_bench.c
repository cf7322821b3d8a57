/* CRC-32 throughput on one core: GB/s of msr_crc32 over a buffer already
 * in memory, by the tables (slicing-by-8, in a child process started with
 * MSRUN_CPU_DISABLE=pclmul, since the path is chosen once a process) and
 * then on the path this CPU takes (folded with PCLMULQDQ where it has
 * it), side by side with the CRC each computed, which must agree.
 * Usage: crc_bench [MIB] [RUNS]; prints the median of RUNS passes over
 * MIB MiB (defaults 256 and 9). Exit 1 when the two CRCs differ. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/crc32.h"
#include "bench_util.h"

/* One path's figure: the median GB/s and the CRC of the buffer. */
typedef struct result {
    double gbs;
    uint32_t crc;
    int folded;
} result_t;

/* Measures msr_crc32 on the path this process takes over mib MiB; 0, or
 * -1 when the buffer cannot be had. */
static int measure(size_t mib, int runs, result_t *r)
{
    size_t n = mib << 20;
    unsigned char *b = malloc(n);
    if (b == NULL) {
        fprintf(stderr, "crc_bench: cannot allocate %zu MiB\n", mib);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 2654435761u >> 13);
    double gbs[BENCH_MAX_RUNS];
    for (int k = 0; k < runs; k++) {
        double t0 = bench_clock_s(CLOCK_MONOTONIC);
        r->crc = msr_crc32(0, b, n);
        gbs[k] = (double)n / (bench_clock_s(CLOCK_MONOTONIC) - t0) / 1e9;
    }
    bench_sort(gbs, runs);
    r->gbs = gbs[runs / 2];
    r->folded = msr_crc32_folded();
    free(b);
    return 0;
}

/* The tables' figure, from a child whose mask is set before its first
 * CRC (this process has computed none yet, so its own path is unset). */
static int measure_tables(size_t mib, int runs, result_t *r)
{
    int fd[2];
    if (pipe(fd) != 0) {
        perror("crc_bench: pipe");
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("crc_bench: fork");
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        setenv("MSRUN_CPU_DISABLE", "pclmul", 1);
        int ok = measure(mib, runs, r) == 0 && write(fd[1], r, sizeof *r) == (ssize_t)sizeof *r;
        _exit(ok ? 0 : 1);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], r, sizeof *r);
    close(fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (got != (ssize_t)sizeof *r || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "crc_bench: the tables' run failed\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    long mib, runs;
    if (bench_mib_runs(argc, argv, "crc_bench", 256, &mib, &runs) != 0)
        return 2;
    result_t tables = {0}, cpu = {0};
    if (measure_tables((size_t)mib, (int)runs, &tables) != 0 ||
        measure((size_t)mib, (int)runs, &cpu) != 0)
        return 1;
    printf("crc32 on one core, median of %ld passes over %ld MiB\n", runs, mib);
    printf("| path | GB/s | crc |\n|---|---:|---|\n");
    printf("| tables (slicing-by-8) | %.2f | %08x |\n", tables.gbs, tables.crc);
    if (cpu.folded)
        printf("| folded (pclmul) | %.2f | %08x |\n", cpu.gbs, cpu.crc);
    else
        printf("| (pclmul absent or masked off: tables) | %.2f | %08x |\n", cpu.gbs, cpu.crc);
    if (tables.folded || tables.crc != cpu.crc) {
        fprintf(stderr, "crc_bench: the tables' run %s\n",
                tables.folded ? "folded despite the mask" : "gave another CRC");
        return 1;
    }
    if (cpu.folded)
        printf("folded / tables: %.1fx\n", cpu.gbs / tables.gbs);
    return 0;
}
