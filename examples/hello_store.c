/* The first job: every rank contributes its host name and pid to one
 * allgather through the job's store, and rank 0 prints what it received.
 * Run: msrun --worker_num=4 --local_worker_num=4 build/bin/hello_store */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "msrun/msrun.h"

int main(void)
{
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "msr_init: %s: %s\n", msr_status_str(st), msr_last_error());
        return 1;
    }
    int rank = msr_rank(ctx), size = msr_world_size(ctx);
    char mine[64];
    char host[40] = "?";
    gethostname(host, sizeof host - 1);
    memset(mine, 0, sizeof mine);
    snprintf(mine, sizeof mine, "rank %d on %s, pid %d", rank, host, (int)getpid());
    char all[64 * 1024];
    if ((size_t)size * sizeof mine > sizeof all) {
        fprintf(stderr, "too many ranks for this example\n");
        return 1;
    }
    st = msr_allgather(ctx, mine, sizeof mine, all);
    if (st != MSR_OK) {
        fprintf(stderr, "allgather: %s: %s\n", msr_status_str(st), msr_last_error());
        msr_finalize(ctx);
        return 1;
    }
    if (rank == 0) {
        printf("job %s: %d ranks gathered through the store:\n", msr_job_id(ctx), size);
        for (int r = 0; r < size; r++)
            printf("  %s\n", all + (size_t)r * sizeof mine);
    }
    st = msr_barrier(ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "barrier: %s: %s\n", msr_status_str(st), msr_last_error());
        msr_finalize(ctx);
        return 1;
    }
    msr_finalize(ctx);
    return 0;
}
