/* libmsrun's store client internals, shared with the communicators. */
#ifndef MSR_RENDEZVOUS_CLIENT_H
#define MSR_RENDEZVOUS_CLIENT_H

#include "msrun/store.h"
#include "rendezvous/rpc.h"

/* Makes a store or coordinator call on ctx's channel. wait_ms >= 0 bounds the
 * call (plus a grace for the server's answer); < 0 uses ctx's timeout.
 * Retries while the coordinator is unreachable, up to MSR_CONNECT_TIMEOUT.
 * what (may be NULL) starts the message msr_last_error() gives on failure. */
msr_status_t msr_client_call(msr_ctx_t *ctx, msr_rpc_method_t method, const ProtobufCMessage *req,
                             int64_t wait_ms, const char *what, ProtobufCMessage **resp_p);

#endif
