/* A client of the coordinator's Auth call, for the munge tests: sends one
 * credential (the argument, or a line read from stdin when it is "-") and
 * says what came back, without ever printing the token itself.
 * Usage: auth_client HOST:PORT JOB_ID CREDENTIAL|-
 * Prints "auth: token of N characters" and exits 0 when the coordinator
 * gave a token, prints "auth: refused: WHY" and exits 3 on
 * PERMISSION_DENIED, "auth: unimplemented: WHY" and 4 on UNIMPLEMENTED, 1 on
 * any other error. */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/time.h"
#include "rendezvous/rpc.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: auth_client HOST:PORT JOB_ID CREDENTIAL|-\n");
        return 1;
    }
    static char line[65536];
    const char *cred = argv[3];
    if (strcmp(cred, "-") == 0) {
        if (fgets(line, sizeof line, stdin) == NULL)
            line[0] = '\0';
        line[strcspn(line, "\r\n")] = '\0';
        cred = line;
    }
    msr_rpc_channel_t *ch = NULL;
    if (msr_rpc_channel_create(argv[1], NULL, &ch) != MSR_OK) {
        fprintf(stderr, "auth: no channel to %s\n", argv[1]);
        return 1;
    }
    Msr__AuthRequest req = MSR__AUTH_REQUEST__INIT;
    req.job_id = argv[2];
    req.credential = (char *)cred;
    ProtobufCMessage *resp = NULL;
    msr_status_t st =
        msr_rpc_call(ch, MSR_RPC_AUTH, &req.base, msr_deadline_in_ms(10000), 1, &resp);
    int rc = 1;
    if (st == MSR_OK) {
        const char *token = ((Msr__AuthResponse *)resp)->token;
        printf("auth: token of %zu characters\n", token ? strlen(token) : (size_t)0);
        rc = 0;
    } else if (st == MSR_ERR_PERMISSION) {
        printf("auth: refused: %s\n", msr_err_msg());
        rc = 3;
    } else if (st == MSR_ERR_UNSUPPORTED) {
        printf("auth: unimplemented: %s\n", msr_err_msg());
        rc = 4;
    } else {
        printf("auth: failed (%s): %s\n", msr_status_str(st), msr_err_msg());
    }
    msr_rpc_message_free(resp);
    msr_rpc_channel_destroy(ch);
    return rc;
}
