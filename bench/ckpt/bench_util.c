/* The one-core benchmarks' clock, sorting and arguments (bench_util.h). */
#include "bench_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

double bench_clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_sort(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
}

/* text as a whole number in [lo, hi], else -1. */
static long parse_num(const char *text, long lo, long hi)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    return errno == 0 && end != text && *end == '\0' && v >= lo && v <= hi ? v : -1;
}

int bench_mib_runs(int argc, char **argv, const char *name, long mib_default, long *mib_p,
                   long *runs_p)
{
    long mib = argc > 1 ? parse_num(argv[1], 1, 65536) : mib_default;
    long runs = argc > 2 ? parse_num(argv[2], 1, BENCH_MAX_RUNS) : 9;
    if (argc > 3 || mib < 0 || runs < 0) {
        fprintf(stderr, "usage: %s [MIB 1..65536] [RUNS 1..%d]\n", name, BENCH_MAX_RUNS);
        return -1;
    }
    *mib_p = mib;
    *runs_p = runs;
    return 0;
}
