/* The rounds of the out-of-memory workers (create_oom_worker.c,
 * experts_oom_worker.c): in round K rank WHO's K-th allocation fails
 * (msr_alloc_fail_at), and every rank must end the round alike, out of
 * memory, WHO's error saying so and every other's naming rank WHO. A
 * worker includes this after its WORKER_FAIL (tests/worker_fail.h): each
 * check that fails calls fail. */
#ifndef MSRUN_TESTS_OOM_ROUNDS_H
#define MSRUN_TESTS_OOM_ROUNDS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "msrun/msrun.h"
#include "parallel/train.h"
#include "tests/parallel/worker_config.h"

/* The workers' small GPT trainer, dp ranks with this one dp_rank rank:
 * the defaults, buckets of 4000 bytes, every parameter sharded at ZeRO
 * levels above 0. A worker sets its layout on top. */
static msr_train_config_t oom_config(int dp, int rank)
{
    msr_train_config_t c = worker_config(2, 16, 2, dp, rank);
    c.seed = 5;
    c.par.bucket_bytes = 4000;
    c.par.zero_min_bytes = 0;
    return c;
}

/* Sets the allocation hook: rank me's k-th allocation from now on fails
 * where me is who (k < 0, or another rank: none). */
static void oom_hook_set(int me, int who, long k)
{
    msr_alloc_fail_at(me == who ? k : -1);
}

/* Turns the hook off: *fired_p, whether it failed an allocation; returns
 * the allocations made since oom_hook_set. */
static long oom_hook_clear(int *fired_p)
{
    *fired_p = msr_alloc_failed();
    return msr_alloc_fail_at(-1);
}

/* Names round k in what (of n bytes) and in g_case: "allocation K of rank
 * WHO". */
static void oom_round_name(char *what, size_t n, long k, int who)
{
    snprintf(what, n, "allocation %ld of rank %d", k, who);
    snprintf(g_case, sizeof g_case, "%s", what);
}

/* The same outcome on every rank (over world, which stays whole). */
static void oom_same_everywhere(msr_comm_t *world, const char *what, msr_status_t st,
                                const char *err)
{
    int64_t lo = st, hi = -(int64_t)st;
    if (msr_comm_allreduce(world, MSR_IN_PLACE, &lo, 1, MSR_DTYPE_I64, MSR_OP_MIN) != MSR_OK ||
        msr_comm_allreduce(world, MSR_IN_PLACE, &hi, 1, MSR_DTYPE_I64, MSR_OP_MIN) != MSR_OK)
        fail("%s: the comparison over the world failed (this rank's: %s, %s)", what,
             msr_status_name(st), err);
    if (lo != -hi)
        fail("%s: the ranks ended differently (%lld to %lld; this rank's: %s, %s)", what,
             (long long)lo, (long long)-hi, msr_status_name(st), err);
}

/* A failed round: out of memory, said by WHO, named by the others ("rank
 * WHO" followed by after in their errors). */
static void oom_check_failed(const char *what, msr_status_t st, const char *err, int me, int who,
                             const char *after)
{
    if (st != MSR_ERR_NO_MEMORY)
        fail("%s: %s (%s), want MSR_ERR_NO_MEMORY", what, msr_status_name(st), err);
    if (strstr(err, "out of memory") == NULL)
        fail("%s: the error '%s' does not say out of memory", what, err);
    char named[32];
    snprintf(named, sizeof named, "rank %d%s", who, after);
    if (me != who && strstr(err, named) == NULL)
        fail("%s: the error '%s' does not name rank %d", what, err, who);
}

/* Round k's end on rank me: its outcome st (err its text) compared over
 * world and checked as oom_check_failed's where it failed, then printed
 * as "round K: rank ME: ok" or "round K: rank ME: STATUS: ERR". */
static void oom_round_end(msr_comm_t *world, const char *what, long k, int who, msr_status_t st,
                          const char *err, const char *after)
{
    int me = msr_comm_rank(world);
    oom_same_everywhere(world, what, st, err);
    if (st != MSR_OK)
        oom_check_failed(what, st, err, me, who, after);
    printf("round %ld: rank %d: %s%s%s\n", k, me, st == MSR_OK ? "ok" : msr_status_name(st),
           st == MSR_OK ? "" : ": ", err);
}

#endif
