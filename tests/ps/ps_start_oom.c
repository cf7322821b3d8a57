/* Out of memory at a parameter server's start (tests/ps/test_ps_start_oom.sh),
 * under two msrun agents on loopback, 2 workers on node 0 and 2 servers on
 * node 1. `ps_start_oom WHO [FIRST]`: for k = FIRST (default 0), FIRST + 1, ... the k-th allocation
 * of job rank WHO's msr_ps_create (the mode msrun's --ps_staleness: synchronous, a duplicate
 * communicator; asynchronous, the pairs) fails, until a call makes none fail on it. Each time every
 * rank gets the same status: all made (the workers then say they are done to the servers, which
 * serve them; also after an allocation that has a way around it, as a shared segment the
 * communicator then goes without), or all MSR_ERR_NO_MEMORY, not MSR_ERR_TIMEOUT (the ranks'
 * deadline, MSR_TIMEOUT, is short: a rank that waited for WHO instead of failing at once would meet
 * it), WHO's error saying out of memory and every other's naming job rank WHO and the cause,
 * nothing written. Each try is over a communicator split from the world (one that broke is
 * destroyed); the statuses are compared over the world. Linked to the
 * static modules so that the allocation hook reaches them. Every check
 * that fails prints "FAIL" and exits 1; rank 0 prints "ok start oom". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "msrun/msrun.h"
#include "tests/worker_fail.h"

WORKER_FAIL("ps_start_oom", exit)

enum { NP = 4, MAX_TRIES = 2000 };

/* The same status on every rank (over world, which stays whole). */
static void same_everywhere(msr_comm_t *world, const char *what, msr_status_t st, const char *err)
{
    int64_t lo = st, hi = -(int64_t)st;
    if (msr_comm_allreduce(world, MSR_IN_PLACE, &lo, 1, MSR_DTYPE_I64, MSR_OP_MIN) != MSR_OK ||
        msr_comm_allreduce(world, MSR_IN_PLACE, &hi, 1, MSR_DTYPE_I64, MSR_OP_MIN) != MSR_OK)
        fail("%s: the comparison over the world failed (this rank's start: %s, %s)", what,
             msr_status_name(st), err);
    if (lo != -hi)
        fail("%s: the ranks returned different statuses (%lld to %lld; this rank's: %s, %s)", what,
             (long long)lo, (long long)-hi, msr_status_name(st), err);
}

/* A failed start: out of memory, said by WHO, named with its cause by the
 * others. */
static void check_failed(const char *what, msr_status_t st, int me, int who)
{
    const char *err = msr_last_error();
    if (st != MSR_ERR_NO_MEMORY)
        fail("%s: msr_ps_create returned %s (%s), want MSR_ERR_NO_MEMORY", what,
             msr_status_name(st), err);
    if (strstr(err, "out of memory") == NULL)
        fail("%s: the error '%s' does not say out of memory", what, err);
    char named[64];
    snprintf(named, sizeof named, "(job rank %d)", who);
    if (me != who && strstr(err, named) == NULL)
        fail("%s: the error '%s' does not name job rank %d", what, err, who);
}

/* A start that worked: the workers say they are done, the servers serve
 * them until then. */
static void finish(msr_ps_t *ps, const char *what)
{
    if (msr_ps_my_role(ps) == MSR_PS_SERVER) {
        msr_status_t st = msr_ps_serve(ps);
        if (st != MSR_OK)
            fail("%s: msr_ps_serve returned %s", what, msr_status_name(st));
    }
    msr_ps_destroy(ps);
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 3)
        fail("usage: ps_start_oom WHO [FIRST]");
    int who = atoi(argv[1]), first = argc == 3 ? atoi(argv[2]) : 0;
    msr_ctx_t *ctx;
    msr_comm_t *world = worker_world(&ctx, NP);
    int me = msr_comm_rank(world), k;
    for (k = first; k < MAX_TRIES; k++) {
        char what[64];
        snprintf(what, sizeof what, "allocation %d of rank %d", k, who);
        snprintf(g_case, sizeof g_case, "%s", what);
        msr_comm_t *c;
        OK(msr_comm_split(world, 0, me, &c));
        msr_ps_t *ps = NULL;
        if (me == who)
            msr_alloc_fail_at(k);
        msr_status_t st = msr_ps_create(c, 0, MSR_PS_STALENESS_ENV, &ps);
        int64_t fired = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        char err[256];
        snprintf(err, sizeof err, "%s", msr_last_error());
        same_everywhere(world, what, st, err);
        if (st != MSR_OK) {
            check_failed(what, st, me, who);
            if (ps != NULL)
                fail("%s: *ps_p written on failure", what);
        } else {
            finish(ps, what);
        }
        if (k == first)
            printf("start oom: rank %d: %s\n", me, st == MSR_OK ? "made" : err);
        msr_comm_destroy(c);
        OK(msr_comm_allreduce(world, MSR_IN_PLACE, &fired, 1, MSR_DTYPE_I64, MSR_OP_MAX));
        if (!fired)
            break;
    }
    g_case[0] = '\0';
    if (k == MAX_TRIES)
        fail("rank %d still had an allocation to fail after %d", who, k);
    if (k == first)
        fail("rank %d's allocation %d was not failed", who, first);
    OK(msr_comm_barrier(world));
    if (me == 0)
        printf("start allocations: each of rank %d's %d failed in turn, every rank alike\n", who,
               k);
    msr_comm_destroy(world);
    if (me == 0)
        printf("ok start oom\n");
    msr_finalize(ctx);
    return 0;
}
