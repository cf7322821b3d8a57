/* The agent's link to the coordinator: gRPC calls whose completions are
 * handed to the libevent thread through an eventfd, as DESIGN.md section 1
 * describes. Everything here is called from the event-loop thread. */
#ifndef MSR_MSRUN_LINK_H
#define MSR_MSRUN_LINK_H

#include <event2/event.h>

#include "rendezvous/rpc.h"

typedef struct msr_link msr_link_t;

/* Called on the event-loop thread with the finished call (status, resp,
 * err). The async and its response are freed after this returns. */
typedef void (*msr_link_cb_t)(msr_rpc_async_t *async, void *arg);

/* A link to the coordinator at target, over TLS when
 * msr_rpc_tls_enabled(tls) (tls is read here, not kept). */
msr_status_t msr_link_create(struct event_base *base, const char *target, const char *token,
                             const msr_rpc_tls_t *tls, msr_link_t **link_p);

/* Cancels the calls in flight (their callbacks do not run), stops the
 * completion thread and frees the link. NULL does nothing. */
void msr_link_destroy(msr_link_t *link);

/* Starts a call bounded by timeout_ms; cb (may be NULL) runs on the loop
 * thread when it ends. On failure to start, cb never runs. */
msr_status_t msr_link_call(msr_link_t *link, msr_rpc_method_t method, const ProtobufCMessage *req,
                           int64_t timeout_ms, int wait_for_ready, msr_link_cb_t cb, void *arg);

/* A blocking call on the same channel (for start-up and shutdown). On
 * failure the reason is in this thread's error text (base/err.h). */
msr_status_t msr_link_call_sync(msr_link_t *link, msr_rpc_method_t method,
                                const ProtobufCMessage *req, int64_t timeout_ms, int wait_for_ready,
                                ProtobufCMessage **resp_p);

/* Calls started from now on go to target (same token and TLS); calls in
 * flight on the old channel are cancelled and finish as MSR_ERR_UNREACHABLE,
 * as calls to a coordinator that died (their callers retry on the new one).
 * The old channel is freed with the link. */
msr_status_t msr_link_retarget(msr_link_t *link, const char *target);

const char *msr_link_target(const msr_link_t *link);

/* Calls started and not yet delivered. */
int msr_link_pending(const msr_link_t *link);

#endif
