/* The gRPC client as a plugin that libmsrun loads on demand (rpc_dl.h). */
#include "rendezvous/rpc_dl.h"

MSR_API const msr_rpc_dl_ops_t msr_rpc_dl_ops = {
    .version = MSR_RPC_DL_VERSION,
    .channel_create_tls = msr_rpc_channel_create_tls,
    .channel_destroy = msr_rpc_channel_destroy,
    .channel_wait = msr_rpc_channel_wait,
    .call = msr_rpc_call,
};
