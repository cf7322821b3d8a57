/* train_gpt's checked search for an intact step (train_gpt_latest_whole,
 * train_gpt_ckpt_any.c) out of memory, under the real msrun
 * (train_gpt_ckpt_bad.sh starts it on 2 and 3 workers):
 *
 *   ckpt_whole_worker DIR FROM META NOMEM
 *
 * Rank NOMEM fails its allocations in turn, as the curl and SQLite tests
 * do: round i fails its i-th allocation from the search's start
 * (msr_alloc_fail_at), until a round where none failed. Each round every
 * rank prints "round I: step S of W ranks" or "round I: failed: STATUS
 * (exit E): TEXT", E being the exit status the resume would end with;
 * then the ranks gather every rank's outcome, and a round whose ranks do
 * not all have the same one prints "round I: the ranks disagree" (exit
 * 3). Exit 0 after the last round. A rank left waiting by another hangs:
 * the script's deadline finds it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "msrun/store.h"
#include "parallel/ckpt.h"
#include "programs/train_gpt/train_gpt.h"

#define MAX_ROUNDS 10000
#define MAX_RANKS  8

/* One rank's outcome of a round, as gathered. */
typedef struct outcome {
    int64_t step;   /* the step found (-1: none), or 0 when failed */
    int32_t status; /* MSR_OK or the search's error */
    int32_t failed; /* whether this rank's hook made an allocation fail */
} outcome_t;

int main(int argc, char **argv)
{
    msr_ctx_t *ctx = NULL;
    if (argc != 5) {
        fprintf(stderr, "usage: ckpt_whole_worker DIR FROM META NOMEM\n");
        return 2;
    }
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "ckpt_whole_worker: msr_init: %s\n", msr_status_str(st));
        return 2;
    }
    job_t job = {ctx, msr_rank(ctx), msr_world_size(ctx)};
    int nomem = atoi(argv[4]), rc = 0;
    if (job.world > MAX_RANKS) {
        fprintf(stderr, "ckpt_whole_worker: at most %d ranks\n", MAX_RANKS);
        msr_finalize(ctx);
        return 2;
    }
    for (long round = 0; round < MAX_ROUNDS; round++) {
        int64_t step = -1;
        int world = 0;
        if (job.rank == nomem)
            msr_alloc_fail_at(round);
        st = train_gpt_latest_whole(&job, argv[1], argv[3], atoll(argv[2]), &step, &world);
        outcome_t me = {st == MSR_OK ? step : 0, st, msr_alloc_failed()}, all[MAX_RANKS];
        msr_alloc_fail_at(-1);
        if (st == MSR_OK)
            printf("round %ld: step %lld of %d ranks\n", round, (long long)step, world);
        else
            printf("round %ld: failed: %s (exit %d): %s\n", round, msr_status_str(st),
                   msr_tckpt_exit_status(st), msr_err_msg_or(st));
        fflush(stdout);
        msr_status_t gst = msr_allgather(ctx, &me, sizeof me, all);
        if (gst != MSR_OK) {
            printf("round %ld: gathering the outcomes: %s\n", round, msr_status_str(gst));
            rc = 3;
            break;
        }
        int any_failed = 0;
        for (int q = 0; q < job.world; q++) {
            any_failed |= all[q].failed;
            if ((all[q].status == MSR_OK) != (me.status == MSR_OK) || all[q].step != me.step)
                rc = 3;
        }
        if (rc != 0) {
            printf("round %ld: the ranks disagree\n", round);
            break;
        }
        if (!any_failed)
            break;
    }
    fflush(stdout);
    msr_finalize(ctx);
    return rc;
}
