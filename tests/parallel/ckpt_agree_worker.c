/* The agreement after a checkpoint load (msr_tckpt_agree_first) under the
 * real msrun (ckpt_agree.sh starts it on 2 workers):
 *
 *   ckpt_agree_worker FLAGS NOMEM
 *
 * Rank r's flag is set when FLAGS (a list of digits) names r; when NOMEM is
 * r, r's first allocation from the call on fails (msr_alloc_fail_at). Each
 * rank prints "rank R: first F" (exit 0) or "rank R: failed: STATUS: TEXT"
 * (exit 1), then waits in a barrier for the other rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "msrun/store.h"
#include "parallel/ckpt.h"

int main(int argc, char **argv)
{
    msr_ctx_t *ctx = NULL;
    if (argc != 3) {
        fprintf(stderr, "usage: ckpt_agree_worker FLAGS NOMEM\n");
        return 2;
    }
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "ckpt_agree_worker: msr_init: %s\n", msr_status_str(st));
        return 2;
    }
    int rank = msr_rank(ctx), first = -2;
    char me = (char)('0' + rank);
    int flag = strchr(argv[1], me) != NULL;
    if (atoi(argv[2]) == rank)
        msr_alloc_fail_at(0);
    st = msr_tckpt_agree_first(ctx, flag, &first);
    int failed = msr_alloc_failed();
    msr_alloc_fail_at(-1);
    if (st == MSR_OK)
        printf("rank %d: first %d%s\n", rank, first, failed ? " (an allocation failed)" : "");
    else
        printf("rank %d: failed: %s: %s\n", rank, msr_status_str(st), msr_err_msg_or(st));
    fflush(stdout);
    /* the ranks go on together, failed or not (a program's next collective,
     * here a barrier): a rank that left the others waiting in the
     * agreement would wait here for ever */
    msr_status_t bst = msr_barrier(ctx);
    if (bst != MSR_OK)
        printf("rank %d: barrier: %s\n", rank, msr_status_str(bst));
    msr_finalize(ctx);
    return st == MSR_OK ? 0 : 1;
}
