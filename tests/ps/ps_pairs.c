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
    snprintf(named, sizeof named, "rank %d of the communicator failed", who);
    if (me != who && strstr(msr_last_error(), named) == NULL)
        fail("rank %d out of memory: the error '%s' does not name it", who, msr_last_error());
    for (int k = 0; k < n; k++)
        if (pairs[k] != NULL)
            fail("rank %d out of memory: pairs[%d] written on failure", who, k);
    OK(msr_comm_barrier(world)); /* still usable */
    printf("out of memory on %d: rank %d: %s\n", who, me, msr_last_error());
}

int main(void)
{
    msr_ctx_t *ctx;
    OK(msr_init(&ctx));
    g_rank = msr_rank(ctx);
    setvbuf(stdout, NULL, _IOLBF, 0);
    msr_comm_t *world;
    OK(msr_comm_world(ctx, &world));
    if (msr_comm_size(world) != NP)
        fail("needs %d ranks", NP);
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
    all_pairs(world); /* nothing left behind that stops a new call */
    OK(msr_comm_pairs(world, 0, NULL, NULL));
    msr_comm_destroy(world);
    if (g_rank == 0)
        printf("ok pairs\n");
    msr_finalize(ctx);
    return 0;
}
