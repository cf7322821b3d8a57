/* Counts what reaches the coordinator: ROUNDS world allgathers and barriers,
 * then rank 0 asks the coordinator (directly) how many Allgather and Barrier
 * calls it served and prints "COUNTS allgather=A barrier=B". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/time.h"
#include "msrun/msrun.h"
#include "rendezvous/rpc.h"

#define ROUNDS 5

int main(void)
{
    msr_ctx_t *ctx = NULL;
    if (msr_init(&ctx) != MSR_OK) {
        fprintf(stderr, "msr_init: %s\n", msr_last_error());
        return 1;
    }
    int rank = msr_rank(ctx), n = msr_world_size(ctx);
    int *all = calloc((size_t)n, sizeof *all);
    for (int i = 0; i < ROUNDS; i++) {
        int mine = rank * 100 + i;
        if (msr_allgather(ctx, &mine, sizeof mine, all) != MSR_OK || msr_barrier(ctx) != MSR_OK) {
            fprintf(stderr, "round %d: %s\n", i, msr_last_error());
            return 1;
        }
        for (int r = 0; r < n; r++)
            if (all[r] != r * 100 + i) {
                fprintf(stderr, "round %d: entry %d is %d\n", i, r, all[r]);
                return 1;
            }
    }
    if (msr_barrier(ctx) != MSR_OK)
        return 1;
    if (rank == 0) {
        msr_rpc_channel_t *ch = NULL;
        if (msr_rpc_channel_create(getenv("MSR_COORDINATOR"), getenv("MSR_TOKEN"), &ch) != MSR_OK)
            return 1;
        Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
        ProtobufCMessage *resp = NULL;
        if (msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, msr_deadline_in_ms(10000), 1, &resp) !=
            MSR_OK) {
            fprintf(stderr, "status: %s\n", msr_err_msg());
            return 1;
        }
        Msr__StatusResponse *r = (Msr__StatusResponse *)resp;
        unsigned long long ag = 0, ba = 0;
        for (size_t i = 0; i < r->n_call_names && i < r->n_call_counts; i++) {
            if (strcmp(r->call_names[i], "Allgather") == 0)
                ag = (unsigned long long)r->call_counts[i];
            if (strcmp(r->call_names[i], "Barrier") == 0)
                ba = (unsigned long long)r->call_counts[i];
        }
        printf("COUNTS allgather=%llu barrier=%llu\n", ag, ba);
        msr_rpc_message_free(resp);
        msr_rpc_channel_destroy(ch);
    }
    free(all);
    msr_finalize(ctx);
    return 0;
}
