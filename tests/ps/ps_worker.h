/* What the two files of the parameter server tests' program share
 * (ps_worker.c: main, the roles and the training modes sync, stale and
 * leave; ps_worker_server.c: the servers' modes bad, durable, order,
 * fsync, reshard and elastic): the width of the small tables, and the second file's modes. */
#ifndef MSRUN_TESTS_PS_WORKER_H
#define MSRUN_TESTS_PS_WORKER_H

#include "msrun/msrun.h"

/* The row width of the tables of sync and order. */
enum { DIM = 4 };

/* ps_worker_server.c's modes; each fails the process (exit 1) on a failed
 * check, as ps_worker.c's do. */
void mode_bad(msr_ctx_t *ctx);
void mode_durable(msr_ctx_t *ctx, const char *dir, int sync);
void mode_order(msr_ctx_t *ctx);
void mode_fsync(msr_ctx_t *ctx, char **argv);
void mode_reshard(msr_ctx_t *ctx, const char *dir, double expect, int steps);
void mode_elastic(msr_ctx_t *ctx, const char *dir);

#endif
