/* A worker that reports its steps through libmsrun (msr_report), for the
 * observability tests: report_worker STEPS STEP_MS [SLOW_RANK SLOW_MS
 * [HOLD_FILE]]. Each step sleeps STEP_MS (SLOW_MS on SLOW_RANK) and reports
 * its step, its time and two scalars; afterwards it waits (up to 60 s) for
 * HOLD_FILE to exist, so that a test can look at the job while it runs. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "msrun/msrun.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: report_worker STEPS STEP_MS [SLOW_RANK SLOW_MS [HOLD_FILE]]\n");
        return 2;
    }
    int steps = atoi(argv[1]);
    long step_ms = atol(argv[2]);
    int slow_rank = argc > 3 ? atoi(argv[3]) : -1;
    long slow_ms = argc > 4 ? atol(argv[4]) : step_ms;
    const char *hold = argc > 5 ? argv[5] : NULL;
    msr_ctx_t *ctx;
    if (msr_init(&ctx) != MSR_OK) {
        fprintf(stderr, "msr_init: %s\n", msr_last_error());
        return 1;
    }
    int rank = msr_rank(ctx);
    for (int s = 0; s < steps; s++) {
        double t0 = now_s();
        sleep_ms(rank == slow_rank ? slow_ms : step_ms);
        double dt = now_s() - t0;
        msr_scalar_t sc[2] = {{"loss", 10.0 - s * 0.125}, {"tok_s", 1000.0 + rank}};
        if (msr_report(ctx, s, dt, sc, 2) != MSR_OK) {
            fprintf(stderr, "msr_report: %s\n", msr_last_error());
            return 1;
        }
    }
    msr_scalar_t bad = {"9bad", 1};
    if (msr_report(ctx, steps, 0, &bad, 1) != MSR_ERR_INVALID_ARG) {
        fprintf(stderr, "msr_report took a bad name\n");
        return 1;
    }
    for (int i = 0; hold && i < 600 && access(hold, F_OK) != 0; i++)
        sleep_ms(100);
    msr_finalize(ctx);
    return 0;
}
