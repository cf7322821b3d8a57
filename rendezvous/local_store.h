/* The store of a singleton job: the coordinator's store requests answered
 * in this process (libmsrun uses it when started without msrun). */
#ifndef MSR_RENDEZVOUS_LOCAL_STORE_H
#define MSR_RENDEZVOUS_LOCAL_STORE_H

#include "rendezvous/rpc.h"

typedef struct msr_local_store msr_local_store_t;

msr_status_t msr_local_store_create(msr_local_store_t **ls_p);
void msr_local_store_destroy(msr_local_store_t *ls);

/* msr_store_core_released_bytes of its store (always 0: nothing in this
 * process sends an arrival again), for tests. */
size_t msr_local_store_released_bytes(msr_local_store_t *ls);

/* Answers req (a request of method) as the coordinator would, waiting up to
 * deadline where the request waits; *resp_p is freed with
 * msr_rpc_message_free. On failure the error text (base/err.h) says why.
 * Thread-safe. */
msr_status_t msr_local_store_call(msr_local_store_t *ls, msr_rpc_method_t method,
                                  const ProtobufCMessage *req, uint64_t deadline,
                                  ProtobufCMessage **resp_p);

#endif
