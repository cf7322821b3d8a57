/* What the one-core benchmarks of bench/ckpt share (crc_bench.c,
 * fault_bench.c): a clock, figures sorted for their median and extremes,
 * and their arguments [MIB] [RUNS]. */
#ifndef MSR_BENCH_UTIL_H
#define MSR_BENCH_UTIL_H

#include <time.h>

#define BENCH_MAX_RUNS 99

/* Clock id's reading in seconds. */
double bench_clock_s(clockid_t id);

/* v[0..n) in ascending order: v[n / 2] is the median, v[0] the least. */
void bench_sort(double *v, int n);

/* The arguments [MIB 1..65536] [RUNS 1..BENCH_MAX_RUNS] of argv, with
 * mib_default MiB and 9 runs where absent: 0 with *mib_p and *runs_p
 * set, or -1 after printing the usage, prefixed with name, on stderr. */
int bench_mib_runs(int argc, char **argv, const char *name, long mib_default, long *mib_p,
                   long *runs_p);

#endif
