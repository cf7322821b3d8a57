/* What comm_worker's pieces share (comm_worker.c has main and the modes'
 * list): the failure report, the element values of the serial reference
 * and the checks of each collective against it, and each mode's entry. */
#ifndef MSRUN_TESTS_COMM_WORKER_H
#define MSRUN_TESTS_COMM_WORKER_H

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "msrun/msrun.h"
#include "tests/worker_ok.h"

extern int g_rank;
extern char g_case[256]; /* the case being checked, for fail's message */
extern long g_checks;    /* results compared, for the final line */
extern int g_nodes;      /* msrun nodes in the job */

/* Prints the case and the message with the last error and exits 1. */
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

double now_ms(void);
void *xmalloc(size_t n); /* fails the test when out of memory */

/* ---- element values, written independently of comm/reduce.c ---- */
uint16_t cw_to_f16(float f);
void cw_put(msr_dtype_t dt, void *p, size_t i, int64_t iv, double fv);
int64_t cw_input(msr_op_t op, msr_dtype_t dt, int r, uint64_t i);
void cw_reference(msr_op_t op, msr_dtype_t dt, int n, uint64_t i, void *ref, size_t at);
void cw_put_id(msr_dtype_t dt, void *p, size_t i, int a, int b, uint64_t k);
void cw_check_bytes(const void *got, const void *want, size_t count, size_t es, const char *what);

/* Fails unless st is MSR_ERR_TRUNCATED and the last error names rank from,
 * the message's sent bytes and the buffer's room. comm_worker_p2p.c */
void cw_expect_cut(msr_status_t st, int from, size_t sent, size_t room);

/* ---- one collective on one communicator against the reference ---- */
typedef struct tc {
    msr_comm_t *comm;
    const char *label;
    int n, me;
} tc_t;

void cw_check_allreduce(tc_t *t, msr_dtype_t dt, msr_op_t op, uint64_t count, int inplace);
void cw_check_reduce_scatter(tc_t *t, msr_dtype_t dt, msr_op_t op, uint64_t rc, int inplace);
void cw_check_reduce(tc_t *t, msr_dtype_t dt, msr_op_t op, uint64_t count, int root, int inplace);
void cw_check_allgather(tc_t *t, msr_dtype_t dt, uint64_t sc, int inplace);
void cw_check_broadcast(tc_t *t, msr_dtype_t dt, uint64_t count, int root);

/* ---- the modes (comm_worker.c's comment says what each checks) ---- */
void cw_mode_collectives(msr_comm_t *world);                        /* comm_worker_coll.c */
void cw_mode_samecomm(msr_comm_t *world);                           /* comm_worker_inflight.c */
void cw_mode_inflight(msr_comm_t *world);                           /* comm_worker_inflight.c */
void cw_mode_threads(msr_comm_t *world);                            /* comm_worker_inflight.c */
void cw_mode_small(msr_comm_t *world);                              /* comm_worker_small.c */
void cw_mode_p2p(msr_comm_t *world);                                /* comm_worker_p2p.c */
void cw_mode_unreceived(msr_comm_t *world);                         /* comm_worker_p2p.c */
void cw_mode_determinism(msr_comm_t *world);                        /* comm_worker_order.c */
void cw_mode_hier(msr_ctx_t *ctx, msr_comm_t *world);               /* comm_worker_order.c */
void cw_mode_leave(msr_ctx_t *ctx, msr_comm_t *world);              /* comm_worker_fail.c */
void cw_mode_exit_after_barrier(msr_ctx_t *ctx, msr_comm_t *world); /* comm_worker_fail.c */
void cw_mode_giveup(msr_ctx_t *ctx, msr_comm_t *world);             /* comm_worker_fail.c */
void cw_mode_anysrc(msr_comm_t *world);                             /* comm_worker_anysrc.c */
void cw_mode_killanysrc(msr_ctx_t *ctx, msr_comm_t *world);         /* comm_worker_anysrc.c */
/* Runs a failure mode (a rank killed or stopped mid-collective; does not
 * return); 0 when mode is not one. comm_worker_fail.c */
int cw_run_failure_mode(msr_ctx_t *ctx, msr_comm_t *world, const char *mode);

#endif
