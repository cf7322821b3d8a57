/* Many communicators made and broken on one engine
 * (tests/comm/test_comm_break_many.sh), under the real msrun with 2 ranks:
 * each round dups the world (the world's engine), job rank 1 sends MSGS
 * messages on the dup that job rank 0 never receives, and rank 0's
 * receive of another tag meets a 1 ms deadline, which breaks the dup; both
 * destroy it. The messages left are dropped at each dup's close, so the
 * world engine's queue does not grow with the rounds: the script reads
 * what rank 0's world engine still finds at its own close (a debug line).
 * Every check that fails prints "FAIL" and exits 1; rank 0 prints "ok
 * break many" at the end. The argument: the rounds (default ROUNDS). */
#include <stdio.h>
#include <stdlib.h>

#include "msrun/msrun.h"
#include "tests/worker_fail.h"

WORKER_FAIL("comm_break_many", exit)

enum { ROUNDS = 100, MSGS = 4, LEN = 8 };

static void one_round(msr_comm_t *world, int round)
{
    msr_comm_t *c = NULL;
    OK(msr_comm_dup(world, 0, &c));
    int64_t buf[LEN];
    for (int i = 0; i < LEN; i++)
        buf[i] = round * LEN + i;
    if (g_rank == 1)
        for (int k = 0; k < MSGS; k++)
            OK(msr_comm_send(c, buf, LEN, MSR_DTYPE_I64, 0, 5));
    /* rank 1's messages are in rank 0's queue (sent before this) */
    OK(msr_comm_barrier(world));
    if (g_rank == 0) {
        msr_comm_set_timeout(c, 1);
        msr_status_t st = msr_comm_recv(c, buf, LEN, MSR_DTYPE_I64, 1, 6);
        if (st != MSR_ERR_TIMEOUT)
            fail("round %d: the receive returned %s, want MSR_ERR_TIMEOUT", round,
                 msr_status_name(st));
        if (msr_comm_status(c) != MSR_ERR_TIMEOUT)
            fail("round %d: the dup is not broken (%s)", round,
                 msr_status_name(msr_comm_status(c)));
    }
    OK(msr_comm_barrier(world));
    msr_comm_destroy(c);
}

int main(int argc, char **argv)
{
    msr_ctx_t *ctx;
    msr_comm_t *world = worker_world(&ctx, 2);
    int rounds = argc > 1 ? atoi(argv[1]) : ROUNDS;
    for (int r = 0; r < rounds; r++)
        one_round(world, r);
    OK(msr_comm_barrier(world));
    msr_comm_destroy(world);
    if (g_rank == 0)
        printf("ok break many: %d rounds, %d messages left each\n", rounds, MSGS);
    msr_finalize(ctx);
    return 0;
}
