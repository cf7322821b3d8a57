/* The device communicators' entry points: msr_gpu_select, msr_comm_device
 * and msr_comm_device_world, over msr_gpu_comm_create, which takes the GPU
 * table as an argument (the real one here, a fake in the tests): pick the
 * GPU, duplicate the host communicator, agree on the backend in one
 * allgather, make the communicator and, for NCCL, share the unique id
 * through the store and initialize. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/log.h"
#include "comm/nccl/gpu_impl.h"
#include "comm/nccl/gpu_test.h"
#include "base/err.h"

/* The device of this process: local rank modulo the devices it sees, made
 * current. *count_p gets the number of devices. */
static msr_status_t select_device(msr_ctx_t *ctx, const msr_gpu_api_t *api, int *device_p,
                                  int *count_p)
{
    int count = 0;
    msr_status_t st = api->device_count(api, &count);
    if (st != MSR_OK) {
        char why[200];
        snprintf(why, sizeof why, "%s", msr_last_error());
        msr_err_set("comm: no usable CUDA device: %s", why);
        return st == MSR_ERR_BACKEND ? MSR_ERR_UNSUPPORTED : st;
    }
    if (count < 1) {
        msr_err_set("comm: no CUDA device is visible to this process");
        return MSR_ERR_UNSUPPORTED;
    }
    int lr = msr_local_rank(ctx), ls = msr_local_world_size(ctx);
    int dev = gpu_pick_device(lr, count);
    st = api->set_device(api, dev);
    if (st != MSR_OK)
        return st;
    MSR_DEBUG("comm: local rank %d of %d uses GPU %d of %d%s", lr, ls, dev, count,
              gpu_node_shared(ls, count) ? " (more local ranks than GPUs: ranks share GPUs)" : "");
    *device_p = dev;
    *count_p = count;
    return MSR_OK;
}

msr_status_t msr_gpu_select_with(msr_ctx_t *ctx, const msr_gpu_api_t *api, int *device_p)
{
    if (ctx == NULL || device_p == NULL) {
        msr_err_set("msr_gpu_select: ctx or device_p is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    if (api == NULL) {
        msr_err_set("msr_gpu_select: %s", msr_gpu_api_why());
        return MSR_ERR_UNSUPPORTED;
    }
    int count;
    return select_device(ctx, api, device_p, &count);
}

msr_status_t msr_gpu_select(msr_ctx_t *ctx, int *device_p)
{
    return msr_gpu_select_with(ctx, msr_gpu_api_cuda(), device_p);
}

/* This member's part of the agreement; a local failure goes in status
 * (with why) rather than out of the call, so every member still takes part
 * in the allgather and all fail alike. */
static void describe(msr_comm_t *comm, unsigned flags, const msr_gpu_api_t *api, gpu_member_t *me,
                     char *why, size_t len)
{
    msr_ctx_t *ctx = comm->ctx;
    memset(me, 0, sizeof *me);
    me->magic = GPU_MEMBER_MAGIC;
    me->flags = flags;
    me->pid = (int32_t)getpid();
    me->host = msr_host_id();
    me->local_size = msr_local_world_size(ctx);
    me->device = -1;
    me->key = -1;
    gpu_mode_t mode;
    const char *env = getenv("MSR_COMM_GPU");
    if (gpu_mode_parse(env, &mode) != MSR_OK) {
        snprintf(why, len, "MSR_COMM_GPU=%s: expected auto, nccl or staged", env);
        me->status = MSR_ERR_INVALID_ARG;
        return;
    }
    me->mode = mode;
    int dev = -1, count = 0;
    msr_status_t st = select_device(ctx, api, &dev, &count);
    if (st != MSR_OK) {
        snprintf(why, len, "%s", msr_last_error());
        me->status = st;
        return;
    }
    me->device = dev;
    me->device_count = count;
    if (api->device_uuid(api, dev, me->uuid) != MSR_OK) {
        /* the ordinal stands in (gpu_find_shared) */
        MSR_DEBUG("comm: no UUID for GPU %d (%s): comparing ordinals", dev, msr_last_error());
        memset(me->uuid, 0, sizeof me->uuid);
    }
}

/* What msr_comm_device refuses before any member talks to another. */
static msr_status_t device_args_check(msr_comm_t *comm, unsigned flags, const msr_gpu_api_t *api,
                                      msr_comm_t **dcomm_p)
{
    if (comm == NULL || dcomm_p == NULL) {
        msr_err_set("msr_comm_device: comm or dcomm_p is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    if ((flags & ~(MSR_COMM_OWN_WORKER | MSR_COMM_STAGED)) != 0) {
        msr_err_set("msr_comm_device: unknown flags 0x%x", flags);
        return MSR_ERR_INVALID_ARG;
    }
    if (comm->gpu >= 0) {
        msr_err_set("msr_comm_device: comm is a device communicator already (use "
                    "msr_comm_dup)");
        return MSR_ERR_INVALID_ARG;
    }
    if (api == NULL) {
        msr_err_set("msr_comm_device: %s", msr_gpu_api_why());
        return MSR_ERR_UNSUPPORTED;
    }
    msr_status_t st = msr_comm_status(comm);
    if (st != MSR_OK)
        msr_err_set("msr_comm_device: the communicator is broken (%s)", msr_status_str(st));
    return st;
}

/* Every member's description, gathered over host: each must be able to
 * take part, and together they decide the kind (NCCL or staged) and the
 * store key of the NCCL id (member 0's). why holds this member's own
 * reason when it cannot. */
static msr_status_t gather_members(msr_comm_t *host, const gpu_member_t *me, char *why,
                                   size_t why_len, gpu_kind_t *kind_p, int64_t *key_p)
{
    int n = msr_comm_size(host), rank = msr_comm_rank(host);
    gpu_member_t *all = msr_calloc((size_t)n, sizeof *all);
    if (all == NULL) {
        msr_err_set("msr_comm_device: out of memory for %d members", n);
        return MSR_ERR_NO_MEMORY;
    }
    msr_status_t st = msr_comm_allgather(host, me, all, sizeof *me, MSR_DTYPE_U8);
    for (int i = 0; st == MSR_OK && i < n; i++) {
        if (all[i].magic != GPU_MEMBER_MAGIC) {
            msr_err_set("msr_comm_device: member %d sent a malformed description", i);
            st = MSR_ERR_PROTOCOL;
        } else if (all[i].status != MSR_OK) {
            st = (msr_status_t)all[i].status;
            if (i == rank)
                msr_err_set("msr_comm_device: %s", why);
            else
                msr_err_set("msr_comm_device: member %d (job rank %d, pid %d) cannot "
                            "take part (%s)",
                            i, msr_comm_world_rank(host, i), all[i].pid, msr_status_name(st));
        }
    }
    if (st == MSR_OK) {
        st = gpu_decide(all, n, kind_p, why, why_len);
        if (st != MSR_OK)
            msr_err_set("msr_comm_device: %s", why);
        *key_p = all[0].key;
    }
    msr_free(all);
    return st;
}

msr_status_t msr_gpu_comm_create(msr_comm_t *comm, unsigned flags, const msr_gpu_api_t *api,
                                 msr_comm_t **dcomm_p)
{
    msr_status_t st = device_args_check(comm, flags, api, dcomm_p);
    if (st != MSR_OK)
        return st;
    msr_ctx_t *ctx = comm->ctx;
    gpu_member_t me;
    char why[256] = "";
    describe(comm, flags, api, &me, why, sizeof why);

    msr_comm_t *host = NULL;
    st = msr_comm_dup(comm, flags & MSR_COMM_OWN_WORKER, &host);
    if (st != MSR_OK)
        return st;
    int n = msr_comm_size(host), rank = msr_comm_rank(host);
    if (rank == 0 && me.status == MSR_OK) {
        /* names the store key of this communicator's NCCL id (the store
         * keeps it to the current generation) */
        st = msr_store_add(ctx, "msr/comm/gpu/count", 1, &me.key);
        if (st != MSR_OK) {
            snprintf(why, sizeof why, "%s", msr_last_error());
            me.status = st;
        }
    }
    gpu_kind_t kind;
    int64_t key;
    st = gather_members(host, &me, why, sizeof why, &kind, &key);
    if (st != MSR_OK) {
        msr_comm_destroy(host);
        return st;
    }
    MSR_DEBUG("comm: device communicator of %d members on GPU %d (local rank %d of %d, %d GPUs "
              "here): %s",
              n, me.device, msr_local_rank(ctx), me.local_size, me.device_count, why);

    msr_comm_t *dcomm = NULL;
    msr_status_t mine =
        gpu_comm_make(ctx, api, kind, me.device, host, NULL, msr_comm_timeout(comm), &dcomm);
    if (mine != MSR_OK)
        snprintf(why, sizeof why, "%s", msr_last_error());
    st = gpu_agree(host, mine); /* host is dcomm's once made, alive either way */
    if (st != MSR_OK) {
        if (mine != MSR_OK)
            msr_err_set("msr_comm_device: %s", why);
        msr_comm_destroy(dcomm ? dcomm : host); /* dcomm takes host with it */
        return st;
    }
    if (kind == GPU_KIND_NCCL) {
        gpu_comm_t *gc = dcomm->be;
        mine = gpu_nccl_attach(gc, key);
        if (mine != MSR_OK)
            snprintf(why, sizeof why, "%s", msr_last_error());
        st = gpu_agree(gc->host, mine);
        if (rank == 0) {
            char name[96];
            snprintf(name, sizeof name, "msr/comm/gpu/%lld/nccl-id", (long long)key);
            msr_store_delete(ctx, name, NULL); /* everyone has read it */
        }
        if (st != MSR_OK) {
            if (mine != MSR_OK)
                msr_err_set("msr_comm_device: %s", why);
            msr_comm_destroy(dcomm);
            return st;
        }
    }
    *dcomm_p = dcomm;
    return MSR_OK;
}

msr_status_t msr_comm_device(msr_comm_t *comm, unsigned flags, msr_comm_t **dcomm_p)
{
    return msr_gpu_comm_create(comm, flags, msr_gpu_api_cuda(), dcomm_p);
}

msr_status_t msr_comm_device_world(msr_ctx_t *ctx, unsigned flags, msr_comm_t **dcomm_p)
{
    if (ctx == NULL || dcomm_p == NULL) {
        msr_err_set("msr_comm_device_world: ctx or dcomm_p is NULL");
        return MSR_ERR_INVALID_ARG;
    }
    if (msr_gpu_api_cuda() == NULL) {
        msr_err_set("msr_comm_device_world: %s", msr_gpu_api_why());
        return MSR_ERR_UNSUPPORTED;
    }
    msr_comm_t *world = NULL;
    msr_status_t st = msr_comm_world(ctx, &world);
    if (st != MSR_OK)
        return st;
    st = msr_comm_device(world, flags, dcomm_p);
    msr_comm_destroy(world); /* the device communicator has its own copy */
    return st;
}
