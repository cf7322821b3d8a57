/* Calls of methods no msrun server registers, answered at once; and the
 * job token's check that every call, known or not, passes first. Private
 * to rpc_server.c and rpc_unknown.c (it includes gRPC's headers). */
#ifndef MSR_RENDEZVOUS_RPC_UNKNOWN_H
#define MSR_RENDEZVOUS_RPC_UNKNOWN_H

#include <stdint.h>

#include <grpc/grpc.h>

#include "rendezvous/rpc_internal.h"

/* Nonzero when token is NULL (any caller) or md carries it under
 * MSR_TOKEN_METADATA; compared in constant time. */
int msr_rpc_token_matches(const char *token, const grpc_metadata_array *md);

typedef struct msr_rpc_unknown msr_rpc_unknown_t;

/* Takes server's calls that match no registered method (gRPC C core holds
 * such a call until a generic grpc_server_request_call takes it, so the
 * caller would wait for its deadline) and answers each at once, its body
 * never read: PERMISSION_DENIED without token (when token is not NULL),
 * UNIMPLEMENTED naming the method otherwise. server, cq, token and
 * log_name are borrowed and must outlive it. Nothing is posted before
 * msr_rpc_unknown_start. MSR_ERR_NO_MEMORY. */
msr_status_t msr_rpc_unknown_create(grpc_server *server, grpc_completion_queue *cq,
                                    const char *token, const char *log_name,
                                    msr_rpc_unknown_t **u_p);

/* Posts the generic requests (once the server has started). */
void msr_rpc_unknown_start(msr_rpc_unknown_t *u);

/* No request is posted again; may be called from any thread. */
void msr_rpc_unknown_stop(msr_rpc_unknown_t *u);

/* Requests and answers still in gRPC's hands: the server may be destroyed,
 * and u with it, once this is 0 after the server's shutdown. Polling
 * thread only. */
int msr_rpc_unknown_busy(const msr_rpc_unknown_t *u);

/* Unknown calls taken so far. */
uint64_t msr_rpc_unknown_calls(const msr_rpc_unknown_t *u);

/* Frees u (NULL: nothing); busy must be 0. */
void msr_rpc_unknown_destroy(msr_rpc_unknown_t *u);

#endif
