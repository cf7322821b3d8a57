/* The gRPC client that libmsrun loads only when a worker takes the one path
 * that needs it (direct mode: MSR_COORDINATOR without a node's msrun), so
 * that every other worker starts without mapping gRPC and its libraries.
 * The plugin (rpc_dl_plugin.c, built as MSR_RPC_DL_NAME beside libmsrun)
 * exports the table below; libmsrun's rpc_dl.c gives the client calls of
 * rpc.h by forwarding to it. Private to msrun. */
#ifndef MSR_RENDEZVOUS_RPC_DL_H
#define MSR_RENDEZVOUS_RPC_DL_H

#include "rendezvous/rpc.h"

/* The plugin's file, looked for beside libmsrun first, then on the loader's
 * search path. */
#define MSR_RPC_DL_NAME "libmsrun-grpc.so"

/* Raised when the table changes: a plugin of another version is refused. */
#define MSR_RPC_DL_VERSION 1

typedef struct msr_rpc_dl_ops {
    int version;
    msr_status_t (*channel_create_tls)(const char *target, const char *token,
                                       const msr_rpc_tls_t *tls, msr_rpc_channel_t **channel_p);
    void (*channel_destroy)(msr_rpc_channel_t *channel);
    int (*channel_wait)(msr_rpc_channel_t *channel, uint64_t deadline);
    msr_status_t (*call)(msr_rpc_channel_t *channel, msr_rpc_method_t method,
                         const ProtobufCMessage *req, uint64_t deadline, int wait_for_ready,
                         ProtobufCMessage **resp_p);
} msr_rpc_dl_ops_t;

/* The symbol the plugin exports. */
#define MSR_RPC_DL_SYMBOL "msr_rpc_dl_ops"

#endif
