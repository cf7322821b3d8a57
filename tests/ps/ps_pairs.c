/* msr_comm_pairs, the parameter server's links (tests/ps/test_ps_pairs.sh),
 * under the real msrun with 4 ranks on a world communicator:
 *   - refusals, on every member alike and with nothing made, of one
 *     member's bad list: n -1 and n = size (one past its bound), a peer
 *     that is itself, -1, size, one listed twice, peers NULL, and a pair
 *     listed by one side only (rank 0 lists rank 1, which lists nobody);
 *     the world stays usable after each
 *   - n = size - 1, the bound: every rank pairs with every other, each
 *     pair of two ranked by world rank, a message each way and an
 *     allreduce (no shared-memory segment: over messages) on each
 *   - each member in turn out of memory at its first allocation (before
 *     the exchange of addresses): every member fails at once with
 *     MSR_ERR_NO_MEMORY, not at its deadline, the others naming that
 *     member, nothing written, the world usable after
 *   - rank 2's k-th allocation of the call failing, for every k until a
 *     call makes none fail: every member gets the same status (all made
 *     and working, or all MSR_ERR_NO_MEMORY with nothing written), over a
 *     communicator of its own each time (one that broke is destroyed)
 *   - UCX refusing rank 1's engines (a UCX_TLS it has no transport for):
 *     every member fails at once with that member's status, named
 *   - n = 0 on every rank: nothing made, success
 * Linked to the static modules so that the allocation hook reaches them.
 * Every check that fails prints "FAIL" and exits 1; rank 0 prints "ok
 * pairs" at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "msrun/msrun.h"
#include "tests/worker_fail.h"

WORKER_FAIL("ps_pairs", exit)

enum { NP = 4, TAG = 5 };

/* Every rank calls; rank 0 alone with (n, peers) where bad, the others
 * with no pair: every rank must get MSR_ERR_INVALID_ARG. */
static void refused(msr_comm_t *world, const char *what, int n, const int *peers, int one_sided)
{
    int me = msr_comm_rank(world);
    msr_comm_t *pairs[NP];
    for (int i = 0; i < NP; i++)
        pairs[i] = NULL;
    int one = 1;
    msr_status_t st;
    if (me == 0)
        st = msr_comm_pairs(world, n, peers, pairs);
    else if (one_sided && me == 1)
        st = msr_comm_pairs(world, 0, &one, pairs); /* does not list rank 0 back */
    else
        st = msr_comm_pairs(world, 0, NULL, pairs);
    if (st != MSR_ERR_INVALID_ARG)
        fail("%s: msr_comm_pairs returned %s, want MSR_ERR_INVALID_ARG", what, msr_status_name(st));
    for (int i = 0; i < NP; i++)
        if (pairs[i] != NULL)
            fail("%s: pairs[%d] written on failure", what, i);
    OK(msr_comm_barrier(world)); /* still usable */
    if (me == 0)
        printf("refused: %s (%s)\n", what, msr_last_error());
}

/* Every rank with every other: the pair's ranks and a message each way. */
static void all_pairs(msr_comm_t *world)
{
    int me = msr_comm_rank(world), peers[NP - 1], n = 0;
    for (int j = 0; j < NP; j++)
        if (j != me)
            peers[n++] = j;
    msr_comm_t *pairs[NP - 1];
    OK(msr_comm_pairs(world, n, peers, pairs));
    for (int k = 0; k < n; k++) {
        msr_comm_t *p = pairs[k];
        int mine = me > peers[k], other = 1 - mine;
        if (msr_comm_size(p) != 2 || msr_comm_rank(p) != mine ||
            msr_comm_world_rank(p, other) != msr_comm_world_rank(world, peers[k]))
            fail("pair with %d: size %d, rank %d, its other world rank %d", peers[k],
                 msr_comm_size(p), msr_comm_rank(p), msr_comm_world_rank(p, other));
        int64_t out = 100 * me + peers[k], in = -1;
        msr_comm_req_t *r;
        OK(msr_comm_irecv(p, &in, 1, MSR_DTYPE_I64, other, TAG, &r));
        OK(msr_comm_send(p, &out, 1, MSR_DTYPE_I64, other, TAG));
        OK(msr_comm_wait(r));
        if (in != 100 * peers[k] + me)
            fail("pair with %d: got %lld, want %d", peers[k], (long long)in, 100 * peers[k] + me);
        /* a collective without a segment: over messages (every rank takes
         * its pairs in the order of (lower, higher) rank: no cycle) */
        int64_t sum = me;
        OK(msr_comm_allreduce(p, MSR_IN_PLACE, &sum, 1, MSR_DTYPE_I64, MSR_OP_SUM));
        if (sum != me + peers[k])
            fail("pair with %d: allreduce gave %lld, want %d", peers[k], (long long)sum,
                 me + peers[k]);
    }
    for (int k = 0; k < n; k++)
        msr_comm_destroy(pairs[k]);
    if (me == 0)
        printf("pairs: %d each, a message each way and an allreduce on each\n", n);
}

/* Member `who` out of memory at its first allocation, every member
 * asking for all its pairs: all must fail with MSR_ERR_NO_MEMORY. */
static void out_of_memory(msr_comm_t *world, int who)
{
    int me = msr_comm_rank(world), peers[NP - 1], n = 0;
    for (int j = 0; j < NP; j++)
        if (j != me)
            peers[n++] = j;
    msr_comm_t *pairs[NP - 1] = {NULL};
    if (me == who)
        msr_alloc_fail_at(0);
    msr_status_t st = msr_comm_pairs(world, n, peers, pairs);
    int failed = msr_alloc_failed();
    msr_alloc_fail_at(-1);
    if (me == who && !failed)
        fail("rank %d: no allocation was failed", who);
    if (st != MSR_ERR_NO_MEMORY)
        fail("rank %d out of memory: msr_comm_pairs returned %s (%s), want MSR_ERR_NO_MEMORY", who,
             msr_status_name(st), msr_last_error());
    char named[64];
    snprintf(named, sizeof named, "rank %d of the communicator (job rank %d) failed", who,
             msr_comm_world_rank(world, who));
    if (me != who && strstr(msr_last_error(), named) == NULL)
        fail("rank %d out of memory: the error '%s' does not name it", who, msr_last_error());
    for (int k = 0; k < n; k++)
        if (pairs[k] != NULL)
            fail("rank %d out of memory: pairs[%d] written on failure", who, k);
    OK(msr_comm_barrier(world)); /* still usable */
    printf("out of memory on %d: rank %d: %s\n", who, me, msr_last_error());
}

/* Every rank's pairs over c, with every other rank of c. */
static msr_status_t pairs_of_all(msr_comm_t *c, msr_comm_t **pairs, int *n_p)
{
    int me = msr_comm_rank(c), peers[NP - 1], n = 0;
    for (int j = 0; j < NP; j++)
        if (j != me)
            peers[n++] = j;
    for (int k = 0; k < n; k++)
        pairs[k] = NULL;
    *n_p = n;
    return msr_comm_pairs(c, n, peers, pairs);
}

/* The same status on every member (over world, which stays whole). */
static void same_everywhere(msr_comm_t *world, const char *what, msr_status_t st)
{
    int64_t lo = st, hi = -(int64_t)st;
    OK(msr_comm_allreduce(world, MSR_IN_PLACE, &lo, 1, MSR_DTYPE_I64, MSR_OP_MIN));
    OK(msr_comm_allreduce(world, MSR_IN_PLACE, &hi, 1, MSR_DTYPE_I64, MSR_OP_MIN));
    if (lo != -hi)
        fail("%s: the members returned different statuses (%lld to %lld)", what, (long long)lo,
             (long long)-hi);
}

/* Rank 2's k-th allocation fails, k = 0, 1, ... until one call makes no
 * allocation fail on it (it has fewer). */
static void later_allocations(msr_comm_t *world)
{
    int me = msr_comm_rank(world), who = 2, k;
    for (k = 0; k < 2000; k++) {
        msr_comm_t *c, *pairs[NP - 1];
        int n;
        OK(msr_comm_split(world, 0, me, &c));
        if (me == who)
            msr_alloc_fail_at(k);
        msr_status_t st = pairs_of_all(c, pairs, &n);
        int64_t fired = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        char what[64];
        snprintf(what, sizeof what, "allocation %d of rank %d", k, who);
        same_everywhere(world, what, st);
        if (st != MSR_OK && st != MSR_ERR_NO_MEMORY)
            fail("%s: msr_comm_pairs returned %s, want MSR_ERR_NO_MEMORY", what,
                 msr_status_name(st));
        if (st == MSR_OK && fired)
            fail("%s failed and msr_comm_pairs succeeded", what);
        for (int j = 0; j < n; j++) {
            if (st != MSR_OK && pairs[j] != NULL)
                fail("%s: pairs[%d] written on failure", what, j);
            if (st != MSR_OK)
                continue;
            int64_t sum = me;
            OK(msr_comm_allreduce(pairs[j], MSR_IN_PLACE, &sum, 1, MSR_DTYPE_I64, MSR_OP_SUM));
            msr_comm_destroy(pairs[j]);
        }
        msr_comm_destroy(c);
        OK(msr_comm_allreduce(world, MSR_IN_PLACE, &fired, 1, MSR_DTYPE_I64, MSR_OP_MAX));
        if (!fired)
            break;
    }
    if (k == 2000)
        fail("rank %d still had an allocation to fail after %d", who, k);
    if (me == 0)
        printf("later allocations: each of rank %d's %d failed in turn, every member alike\n", who,
               k);
}

/* UCX refuses rank 1's engines: it reads a UCX_TLS that names no
 * transport it has when each engine opens. */
static void ucx_refuses(msr_comm_t *world)
{
    int me = msr_comm_rank(world), who = 1;
    msr_comm_t *pairs[NP - 1];
    int n;
    if (me == who)
        setenv("UCX_TLS", "no_such_transport", 1);
    msr_status_t st = pairs_of_all(world, pairs, &n);
    if (me == who)
        unsetenv("UCX_TLS");
    same_everywhere(world, "UCX refusing", st);
    if (st != MSR_ERR_BACKEND && st != MSR_ERR_NO_MEMORY)
        fail("UCX refusing rank %d's engines: msr_comm_pairs returned %s (%s)", who,
             msr_status_name(st), msr_last_error());
    char named[64];
    snprintf(named, sizeof named, "rank %d of the communicator (job rank %d) failed", who,
             msr_comm_world_rank(world, who));
    if (me != who && strstr(msr_last_error(), named) == NULL)
        fail("UCX refusing: the error '%s' does not name rank %d", msr_last_error(), who);
    for (int k = 0; k < n; k++)
        if (pairs[k] != NULL)
            fail("UCX refusing: pairs[%d] written on failure", k);
    OK(msr_comm_barrier(world));
    printf("ucx refusing on %d: rank %d: %s\n", who, me, msr_last_error());
}

int main(void)
{
    msr_ctx_t *ctx;
    msr_comm_t *world = worker_world(&ctx, NP);
    const int self[] = {0}, low[] = {-1}, high[] = {NP}, twice[] = {1, 1};
    const int every[] = {1, 2, 3, 1};
    refused(world, "n -1", -1, every, 0);
    refused(world, "n = size, one past", NP, every, 0);
    refused(world, "itself", 1, self, 0);
    refused(world, "peer -1", 1, low, 0);
    refused(world, "peer = size", 1, high, 0);
    refused(world, "a peer listed twice", 2, twice, 0);
    refused(world, "peers NULL", 1, NULL, 0);
    refused(world, "listed by one side only", 1, every, 1);
    all_pairs(world);
    for (int who = 0; who < NP; who++)
        out_of_memory(world, who);
    later_allocations(world);
    ucx_refuses(world);
    all_pairs(world); /* nothing left behind that stops a new call */
    OK(msr_comm_pairs(world, 0, NULL, NULL));
    msr_comm_destroy(world);
    if (g_rank == 0)
        printf("ok pairs\n");
    msr_finalize(ctx);
    return 0;
}
