/* The launch benchmark's worker: join the job, one barrier, leave. */
#include <stdio.h>

#include "msrun/msrun.h"

int main(void)
{
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st == MSR_OK)
        st = msr_barrier(ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "msr_barrier: %s: %s\n", msr_status_str(st), msr_last_error());
        return 1;
    }
    msr_finalize(ctx);
    return 0;
}
