/* The checkpoint module's gathers (every rank's offer of steps, its
 * verdict on a step, its length and CRC after a save) under the real
 * msrun (ckpt_gather.sh starts it on 2 workers), linked to the static
 * modules so that the allocation hook reaches them:
 *
 *   ckpt_gather_worker latest DIR NOMEM   both ranks save step 1 under
 *                                         DIR; then rank NOMEM's first
 *                                         allocation fails while every
 *                                         rank looks for the latest step
 *   ckpt_gather_worker save DIR NOMEM     rank NOMEM's first allocation
 *                                         fails while every rank saves
 *   ckpt_gather_worker absent             rank 1 never gathers; rank 0's
 *                                         gather has a deadline of 2 s
 *
 * Each rank prints "rank R: ok S" (S: the step found, or 0) or "rank R:
 * failed: STATUS: TEXT", then waits in a barrier for the other rank and
 * exits 0 when ok, 1 when failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "msrun/checkpoint.h"
#include "msrun/store.h"

/* One mode's calls on this rank: its status, the step found in *step_p. */
static msr_status_t run(msr_ctx_t *ctx, int argc, char **argv, int64_t *step_p)
{
    int rank = msr_rank(ctx);
    unsigned char state[64];
    memset(state, rank + 1, sizeof state);
    if (strcmp(argv[1], "absent") == 0) {
        if (rank == 1)
            return MSR_OK;
        msr_set_timeout(ctx, 2000);
        int all[2];
        return msr_allgather(ctx, &rank, sizeof rank, all);
    }
    if (argc != 4)
        return msr_err(MSR_ERR_INVALID_ARG, "usage: ckpt_gather_worker latest|save DIR NOMEM");
    const char *dir = argv[2];
    int nomem = atoi(argv[3]);
    if (strcmp(argv[1], "save") == 0) {
        if (nomem == rank)
            msr_alloc_fail_at(0);
        return msr_ckpt_save(ctx, dir, 1, state, sizeof state, 0);
    }
    msr_status_t st = msr_ckpt_save(ctx, dir, 1, state, sizeof state, 0);
    if (st != MSR_OK)
        return st;
    if (nomem == rank)
        msr_alloc_fail_at(0);
    return msr_ckpt_latest_unchecked(ctx, dir, step_p);
}

int main(int argc, char **argv)
{
    msr_ctx_t *ctx = NULL;
    if (argc < 2) {
        fprintf(stderr, "usage: ckpt_gather_worker latest|save DIR NOMEM | absent\n");
        return 2;
    }
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "ckpt_gather_worker: msr_init: %s\n", msr_status_str(st));
        return 2;
    }
    int rank = msr_rank(ctx);
    int64_t step = 0;
    st = run(ctx, argc, argv, &step);
    int failed = msr_alloc_failed();
    msr_alloc_fail_at(-1);
    if (st == MSR_OK)
        printf("rank %d: ok %lld%s\n", rank, (long long)step,
               failed ? " (an allocation failed)" : "");
    else
        printf("rank %d: failed: %s: %s\n", rank, msr_status_name(st), msr_err_msg_or(st));
    fflush(stdout);
    /* the ranks go on together (a program's next collective): a rank left
     * waiting in a gather by the other would wait here until its deadline */
    msr_set_timeout(ctx, 20000);
    msr_status_t bst = msr_barrier(ctx);
    if (bst != MSR_OK)
        printf("rank %d: barrier: %s\n", rank, msr_status_str(bst));
    msr_finalize(ctx);
    return st == MSR_OK ? 0 : 1;
}
