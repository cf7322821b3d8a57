/* libmsrun's gRPC client calls, forwarded to the plugin (rpc_dl.h) that is
 * loaded at the first of them: libmsrun itself does not link gRPC. */
#include "rendezvous/rpc_dl.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/status.h"

static pthread_once_t dl_once = PTHREAD_ONCE_INIT;
static const msr_rpc_dl_ops_t *dl_ops; /* set once, by dl_load */
static char dl_error[512];

/* The plugin beside this library, or on the search path. */
static void dl_load(void)
{
    char path[PATH_MAX] = MSR_RPC_DL_NAME;
    Dl_info info;
    if (dladdr((void *)dl_load, &info) && info.dli_fname && strrchr(info.dli_fname, '/')) {
        const char *slash = strrchr(info.dli_fname, '/');
        snprintf(path, sizeof path, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
                 MSR_RPC_DL_NAME);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL && strchr(path, '/') != NULL)
        h = dlopen(MSR_RPC_DL_NAME, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(dl_error, sizeof dl_error, "%s", dlerror());
        return;
    }
    const msr_rpc_dl_ops_t *ops = dlsym(h, MSR_RPC_DL_SYMBOL);
    if (ops == NULL || ops->version != MSR_RPC_DL_VERSION) {
        snprintf(dl_error, sizeof dl_error, "%s has no %s of version %d", path, MSR_RPC_DL_SYMBOL,
                 MSR_RPC_DL_VERSION);
        return; /* kept loaded: what it mapped may be in use elsewhere */
    }
    dl_ops = ops;
}

/* The plugin's table, or NULL with the error text set. */
static const msr_rpc_dl_ops_t *dl_get(void)
{
    pthread_once(&dl_once, dl_load);
    if (dl_ops == NULL)
        msr_err_set("a direct connection to the coordinator (MSR_COORDINATOR without msrun) "
                    "needs gRPC, from %s, which cannot be loaded: %s (install it beside "
                    "libmsrun, or start the job with msrun)",
                    MSR_RPC_DL_NAME, dl_error);
    return dl_ops;
}

msr_status_t msr_rpc_channel_create_tls(const char *target, const char *token,
                                        const msr_rpc_tls_t *tls, msr_rpc_channel_t **channel_p)
{
    const msr_rpc_dl_ops_t *ops = dl_get();
    if (ops == NULL)
        return MSR_ERR_UNSUPPORTED;
    return ops->channel_create_tls(target, token, tls, channel_p);
}

void msr_rpc_channel_destroy(msr_rpc_channel_t *channel)
{
    if (channel != NULL && dl_ops != NULL) /* a channel exists only if the plugin loaded */
        dl_ops->channel_destroy(channel);
}

int msr_rpc_channel_wait(msr_rpc_channel_t *channel, uint64_t deadline)
{
    return dl_ops->channel_wait(channel, deadline);
}

msr_status_t msr_rpc_call(msr_rpc_channel_t *channel, msr_rpc_method_t method,
                          const ProtobufCMessage *req, uint64_t deadline, int wait_for_ready,
                          ProtobufCMessage **resp_p)
{
    return dl_ops->call(channel, method, req, deadline, wait_for_ready, resp_p);
}
