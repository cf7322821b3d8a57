/* The failure report of the programs the multi-rank tests start under the
 * real msrun (tests/ps/ps_worker.c, tests/comm/bcast_worker.c,
 * tests/comm/gpu_worker.c): a program includes this once, defines its
 * fail with WORKER_FAIL, sets g_rank once msr_init gave it and g_case to
 * the case being checked, and checks its calls with OK (tests/worker_ok.h). */
#ifndef MSRUN_TESTS_WORKER_FAIL_H
#define MSRUN_TESTS_WORKER_FAIL_H

#include <stdarg.h>
#include <stdio.h>

#include "msrun/msrun.h"
#include "tests/worker_ok.h"

static int g_rank = -1;
static char g_case[256]; /* the case being checked, for fail's message; "": none */

/* Prints "PROGRAM rank R: FAIL [CASE]: MESSAGE (last error: ...)" (no
 * " [CASE]" while g_case is empty) on stderr, flushed. */
static void worker_report(const char *program, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "%s rank %d: FAIL%s%s%s: %s (last error: %s)\n", program, g_rank,
            g_case[0] ? " [" : "", g_case, g_case[0] ? "]" : "", msg, msr_last_error());
    fflush(stderr);
}

/* Defines fail(FMT, ...): the report of PROGRAM, then EXIT(1) (exit, or
 * _exit where the program's threads must not run the exit handlers), and
 * worker_world(CTX_P, NP): a worker's start (msr_init into *CTX_P, g_rank,
 * stdout line-buffered) and its world communicator, which must have NP
 * ranks where NP > 0. */
#define WORKER_FAIL(program, exit_fn)                                                       \
    static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn)); \
    static void fail(const char *fmt, ...)                                                  \
    {                                                                                       \
        va_list ap;                                                                         \
        va_start(ap, fmt);                                                                  \
        worker_report(program, fmt, ap);                                                    \
        va_end(ap);                                                                         \
        exit_fn(1);                                                                         \
    }                                                                                       \
    static msr_comm_t *worker_world(msr_ctx_t **ctx_p, int np) __attribute__((unused));     \
    static msr_comm_t *worker_world(msr_ctx_t **ctx_p, int np)                              \
    {                                                                                       \
        OK(msr_init(ctx_p));                                                                \
        g_rank = msr_rank(*ctx_p);                                                          \
        setvbuf(stdout, NULL, _IOLBF, 0);                                                   \
        msr_comm_t *world;                                                                  \
        OK(msr_comm_world(*ctx_p, &world));                                                 \
        if (np > 0 && msr_comm_size(world) != np)                                           \
            fail("needs %d ranks", np);                                                     \
        return world;                                                                       \
    }

#endif
