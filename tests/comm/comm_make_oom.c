/* Out of memory while a communicator is made (tests/comm/test_comm_make_oom.sh),
 * under the real msrun with 4 ranks on one node (so that every new
 * communicator sets up a shared-memory segment): for a split and for a dup,
 * and for job rank 0 (which makes the segment) and job rank 3 (which maps it),
 * the k-th allocation of that rank's call fails, k = 0, 1, ... until a call
 * makes none fail. Each time every rank gets the same status: all made (and
 * the new communicator's allreduce exact on every member), or all
 * MSR_ERR_NO_MEMORY with nothing written to *newcomm_p, the failing rank
 * saying out of memory and every other naming its job rank and the cause;
 * never MSR_ERR_TIMEOUT (MSR_TIMEOUT is short: a member left waiting for the
 * failing one would meet it). Among the failed allocations is the segment's
 * own state (the failing rank's error says so), allocated before the
 * members' last agreement on the segment. Each call is made over a
 * communicator split from the world, destroyed after; the statuses are
 * compared over the world. With the argument "own", the dups alone, each
 * with MSR_COMM_OWN_WORKER: an engine of its own, whose opening and
 * address exchange fail the same way (a member failing there once left
 * the others waiting for its address until their deadline). Linked to the
 * static modules so that the allocation hook reaches them. Every check that fails prints "FAIL" and
 * exits 1; rank 0 prints "ok make oom". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "msrun/msrun.h"
#include "tests/worker_fail.h"

WORKER_FAIL("comm_make_oom", exit)

enum { NP = 4, MAX_TRIES = 2000 };

/* The same status on every rank (over world, which stays whole). */
static void same_everywhere(msr_comm_t *world, msr_status_t st, const char *err)
{
    int64_t lo = st, hi = -(int64_t)st;
    if (msr_comm_allreduce(world, MSR_IN_PLACE, &lo, 1, MSR_DTYPE_I64, MSR_OP_MIN) != MSR_OK ||
        msr_comm_allreduce(world, MSR_IN_PLACE, &hi, 1, MSR_DTYPE_I64, MSR_OP_MIN) != MSR_OK)
        fail("the comparison over the world failed (this rank's: %s, %s)", msr_status_name(st),
             err);
    if (lo != -hi)
        fail("the ranks returned different statuses (%lld to %lld; this rank's: %s, %s)",
             (long long)lo, (long long)-hi, msr_status_name(st), err);
}

/* A failed call: out of memory, said by who, named with its cause by the
 * others. */
static void check_failed(msr_status_t st, const char *err, int me, int who)
{
    if (st != MSR_ERR_NO_MEMORY)
        fail("returned %s (%s), want MSR_ERR_NO_MEMORY", msr_status_name(st), err);
    if (strstr(err, "out of memory") == NULL)
        fail("the error '%s' does not say out of memory", err);
    char named[64];
    snprintf(named, sizeof named, "(job rank %d)", who);
    if (me != who && strstr(err, named) == NULL)
        fail("the error '%s' does not name job rank %d", err, who);
}

/* A made communicator works on every member: an allreduce of the ranks. */
static void check_made(msr_comm_t *c)
{
    if (msr_comm_size(c) != NP)
        fail("the new communicator has %d members, want %d", msr_comm_size(c), NP);
    int64_t sum = msr_comm_rank(c);
    OK(msr_comm_allreduce(c, MSR_IN_PLACE, &sum, 1, MSR_DTYPE_I64, MSR_OP_SUM));
    if (sum != NP * (NP - 1) / 2)
        fail("allreduce on the new communicator: %lld, want %d", (long long)sum, NP * (NP - 1) / 2);
}

/* The dup's flags: MSR_COMM_OWN_WORKER with the argument "own". */
static unsigned g_dup_flags;

/* Every allocation of who's split (dup = 0) or dup in turn; the members'
 * errors are printed where who's was the segment's. */
static void each_allocation(msr_comm_t *world, int dup, int who)
{
    int me = msr_comm_rank(world), k, segments = 0;
    const char *call = dup ? "dup" : "split";
    for (k = 0; k < MAX_TRIES; k++) {
        snprintf(g_case, sizeof g_case, "%s, allocation %d of rank %d", call, k, who);
        msr_comm_t *parent, *c = NULL;
        OK(msr_comm_split(world, 0, me, &parent));
        if (me == who)
            msr_alloc_fail_at(k);
        msr_status_t st = dup ? msr_comm_dup(parent, g_dup_flags, &c)
                              : msr_comm_split(parent, 1, NP - 1 - me, &c);
        /* [0]: whether who's allocation failed, [1]: whether it was the segment's */
        int64_t seen[2] = {msr_alloc_failed(), 0};
        msr_alloc_fail_at(-1);
        char err[512];
        snprintf(err, sizeof err, "%s", st == MSR_OK ? "made" : msr_last_error());
        same_everywhere(world, st, err);
        if (st != MSR_OK) {
            check_failed(st, err, me, who);
            if (c != NULL)
                fail("*newcomm_p written on failure");
            seen[1] = me == who && strstr(err, "shared-memory segment") != NULL;
        } else {
            check_made(c);
            msr_comm_destroy(c);
        }
        msr_comm_destroy(parent);
        OK(msr_comm_allreduce(world, MSR_IN_PLACE, seen, 2, MSR_DTYPE_I64, MSR_OP_MAX));
        if (!seen[0])
            break;
        if (seen[1] && segments++ == 0)
            printf("make oom %s, rank %d's segment: rank %d: %s\n", call, who, me, err);
    }
    g_case[0] = '\0';
    if (k == MAX_TRIES)
        fail("%s: rank %d still had an allocation to fail after %d", call, who, k);
    if (segments == 0)
        fail("%s: none of rank %d's failed allocations was its shared-memory segment's", call, who);
    if (me == 0)
        printf("%s allocations: each of rank %d's %d failed in turn, every rank alike\n", call, who,
               k);
}

int main(int argc, char **argv)
{
    msr_ctx_t *ctx;
    msr_comm_t *world = worker_world(&ctx, NP);
    int own = argc > 1 && strcmp(argv[1], "own") == 0;
    g_dup_flags = own ? MSR_COMM_OWN_WORKER : 0;
    for (int dup = own; dup < 2; dup++) {
        each_allocation(world, dup, 0);
        each_allocation(world, dup, NP - 1);
    }
    msr_comm_destroy(world);
    if (g_rank == 0)
        printf("ok make oom\n");
    msr_finalize(ctx);
    return 0;
}
