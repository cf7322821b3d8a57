/* What the parameter server's benchmarks share: a clock, dying on a
 * failed call with its status and reason, and the usage line. A program
 * defines BENCH_PROG (its name) and BENCH_USAGE (its options) before it
 * includes this. */
#ifndef MSR_BENCH_PS_BENCH_H
#define MSR_BENCH_PS_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "msrun/msrun.h"

/* Seconds on clk (CLOCK_MONOTONIC for durations, CLOCK_REALTIME for stamps
 * compared with another process's). */
static inline double bench_now_s(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void die(const char *what, msr_status_t st)
{
    fprintf(stderr, BENCH_PROG ": %s: %s (%s)\n", what, msr_status_str(st), msr_last_error());
    exit(1);
}

#define CHECK(call)                \
    do {                           \
        msr_status_t st_ = (call); \
        if (st_ != MSR_OK)         \
            die(#call, st_);       \
    } while (0)

static inline void usage(const char *why)
{
    fprintf(stderr, BENCH_PROG ": %s\nusage: " BENCH_PROG " " BENCH_USAGE "\n", why);
    exit(2);
}

#endif
