/* The client context libmsrun's calls share (client.c: init, beats,
 * reports and the call path; client_store.c: the store's calls). Private
 * to rendezvous/. */
#ifndef MSR_RENDEZVOUS_CLIENT_IMPL_H
#define MSR_RENDEZVOUS_CLIENT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "rendezvous/client.h"
#include "rendezvous/local_store.h"
#include "rendezvous/progress.h"
#include "rendezvous/rpc.h"
#include "rendezvous/wchan.h"

struct msr_ctx {
    int rank, world_size, local_rank, local_world_size, node_rank, node_count, generation;
    /* beats to the node's msrun (when it watches for hangs) */
    pthread_t beat_thread;
    int beating;
    int64_t beat_ms;
    pthread_mutex_t beat_lock;
    pthread_cond_t beat_cond;
    int beat_stop;
    atomic_ullong progress;
    char *job_id;
    msr_rpc_channel_t *channel; /* to the coordinator, in direct mode */
    msr_wchan_t *wchan;         /* or to the node's msrun (the worker channel) */
    msr_local_store_t *local;   /* a singleton job's store, instead of a channel */
    int via_agent;
    _Atomic int64_t timeout_ms;
    int64_t connect_ms;
    atomic_uint barrier_seq, allgather_seq;
    /* Store writes carry (client_id, request id): a write retried after a
     * lost connection is applied once by the coordinator. */
    uint64_t client_id;
    atomic_ullong request_seq;
    /* progress reports (msr_report): recorded under report_lock, sent by
     * the report thread, started at the first report */
    pthread_mutex_t report_lock;
    pthread_cond_t report_cond;
    msr_progress_batch_t reports;
    pthread_t report_thread;
    int reporting, report_stop;
    int report_off; /* MSR_REPORT=0: reports are dropped */
    atomic_int peer_lost_noted;
    atomic_int num_keys_served; /* direct mode: the coordinator serves NumKeys
                                 * (1), does not (-1), not yet asked (0) */
};

/* One call on ctx's worker channel or gRPC channel, as msr_rpc_call. */
msr_status_t msr_client_rpc(msr_ctx_t *ctx, msr_rpc_method_t method, const ProtobufCMessage *req,
                            uint64_t deadline, ProtobufCMessage **resp_p);

/* Stamps a store write with this context's id and the next request id. */
void msr_client_request_ids(msr_ctx_t *ctx, uint64_t *client_id, uint64_t *request_id);

#endif
