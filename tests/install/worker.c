/* A worker built outside msrun's tree against the installed libmsrun (the
 * install tests build it with pkg-config and with find_package): it joins
 * the job, waits for every rank and says who it is. */
#include <stdio.h>

#include <msrun/msrun.h>

int main(void)
{
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "msr_init: %s: %s\n", msr_status_name(st), msr_last_error());
        return 1;
    }
    st = msr_barrier(ctx);
    if (st != MSR_OK) {
        fprintf(stderr, "msr_barrier: %s: %s\n", msr_status_name(st), msr_last_error());
        msr_finalize(ctx);
        return 1;
    }
    printf("rank %d of %d: libmsrun %s, barrier passed\n", msr_rank(ctx), msr_world_size(ctx),
           msr_version());
    msr_finalize(ctx);
    return 0;
}
