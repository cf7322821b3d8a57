/* The launch timeline's worker: init, one barrier, finalize; through the
 * store only ("store") or through a world communicator ("comm"). Prints
 * whether msrun asked it to record its launch (MSR_PROFILE_LAUNCH set). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msrun/comm.h"
#include "msrun/msrun.h"

static int fail(const char *what, msr_status_t st)
{
    fprintf(stderr, "launch_worker: %s: %s: %s\n", what, msr_status_str(st), msr_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "store") != 0 && strcmp(argv[1], "comm") != 0)) {
        fprintf(stderr, "usage: launch_worker store|comm\n");
        return 2;
    }
    const char *rec = getenv("MSR_PROFILE_LAUNCH");
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK)
        return fail("msr_init", st);
    printf("rank %d recording=%s\n", msr_rank(ctx), rec && *rec ? "yes" : "no");
    if (strcmp(argv[1], "store") == 0) {
        st = msr_barrier(ctx);
        if (st != MSR_OK)
            return fail("msr_barrier", st);
    } else {
        msr_comm_t *comm = NULL;
        st = msr_comm_world(ctx, &comm);
        if (st != MSR_OK)
            return fail("msr_comm_world", st);
        st = msr_comm_barrier(comm);
        msr_comm_destroy(comm);
        if (st != MSR_OK)
            return fail("msr_comm_barrier", st);
    }
    msr_finalize(ctx);
    return 0;
}
