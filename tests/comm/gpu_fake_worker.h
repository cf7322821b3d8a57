/* What gpu_fake_worker's pieces share (gpu_fake_worker.c has main and the
 * modes' list): the failure report and checks, the inputs, the staged
 * backend's checks against the host communicator, and each mode's entry. */
#ifndef MSRUN_TESTS_GPU_FAKE_WORKER_H
#define MSRUN_TESTS_GPU_FAKE_WORKER_H

#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/nccl/gpu_test.h"
#include "gpu_fake.h"
#include "msrun/msrun.h"
#include "tests/worker_ok.h"

extern int g_rank;
extern char g_case[256]; /* the case being checked, for fail's message */
extern long g_checks;

/* Prints the case and the message with the last error and exits 1. */
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define EXPECT(expr, want)                                                   \
    do {                                                                     \
        msr_status_t st_ = (expr);                                           \
        if (st_ != (want))                                                   \
            fail("%s: %s, expected %s", #expr, msr_status_name(st_), #want); \
        g_checks++;                                                          \
    } while (0)

#define CHECK(cond)                          \
    do {                                     \
        if (!(cond))                         \
            fail("check failed: %s", #cond); \
        g_checks++;                          \
    } while (0)

double now_s(void);
void *xmalloc(size_t n); /* fails the test when out of memory */
void setcase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- inputs: small integers (every type holds them), or random floats ---- */
void gfw_fill(msr_dtype_t dt, void *p, size_t n, int rank, int salt, msr_op_t op);
void gfw_same(const void *got, const void *want, size_t bytes, const char *what);
/* A device communicator over world's group on the fake table f, checked. */
msr_comm_t *gfw_make(msr_comm_t *world, gpu_fake_t *f, unsigned flags);

/* ---- the staged backend against the host communicator ---- */
typedef struct pair {
    msr_comm_t *h, *d; /* host and device communicators of the same group */
    int n, me;
} pair_t;

void gfw_vs_allreduce(pair_t *p, msr_dtype_t dt, msr_op_t op, size_t c, int salt);
void gfw_vs_reduce_scatter(pair_t *p, msr_dtype_t dt, msr_op_t op, size_t c, int salt);
void gfw_vs_allgather(pair_t *p, msr_dtype_t dt, size_t c, int salt);
void gfw_vs_rooted(pair_t *p, msr_dtype_t dt, msr_op_t op, size_t c, int root, int salt);
void gfw_vs_alltoall(pair_t *p, msr_dtype_t dt, size_t c, int salt);
void gfw_vs_alltoallv(pair_t *p, msr_dtype_t dt, size_t unit);

/* ---- the modes (gpu_fake_worker.c's comment says what each checks) ---- */
void gfw_mode_staged(msr_ctx_t *ctx, msr_comm_t *world);           /* gpu_fake_worker_staged.c */
void gfw_mode_nccl(msr_ctx_t *ctx, msr_comm_t *world);             /* gpu_fake_worker_nccl.c */
void gfw_mode_one(msr_ctx_t *ctx, msr_comm_t *world);              /* gpu_fake_worker_nccl.c */
void gfw_mode_choice(msr_ctx_t *ctx, msr_comm_t *world);           /* gpu_fake_worker_nccl.c */
void gfw_mode_lengths(msr_ctx_t *ctx, msr_comm_t *world);          /* gpu_fake_worker_nccl.c */
void gfw_mode_timeout(msr_ctx_t *ctx, msr_comm_t *world);          /* gpu_fake_worker_fail.c */
void gfw_mode_notify(msr_ctx_t *ctx, msr_comm_t *world);           /* gpu_fake_worker_fail.c */
void gfw_mode_asyncerr(msr_ctx_t *ctx, msr_comm_t *world);         /* gpu_fake_worker_fail.c */
void gfw_mode_inittimeout(msr_ctx_t *ctx, msr_comm_t *world);      /* gpu_fake_worker_fail.c */
void gfw_mode_kill(msr_ctx_t *ctx, msr_comm_t *world, int staged); /* gpu_fake_worker_fail.c */
void gfw_mode_oom(msr_ctx_t *ctx, msr_comm_t *world);              /* gpu_fake_worker_oom.c */

#endif
