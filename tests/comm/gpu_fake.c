/* The fake GPU table (gpu_fake.h). */
#include "gpu_fake.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "base/err.h"
#include "fake_gpu_ops.h"

#define FAKE(g) ((gpu_fake_t *)(g)->data)

/* done: recorded when no hang was asked; aborts: the aborts before it was
 * recorded (an abort ends what hung before it, as ncclCommAbort does) */
typedef struct fake_event {
    int done, aborts;
} fake_event_t;

typedef struct fake_nc {
    int nranks, rank; /* rank -1: unknown (made by split) */
    int polls_left;   /* in progress for this many more polls */
    int polls;        /* polls so far */
    int failed;
    /* one-rank send/recv: the pending send */
    const void *pend;
    size_t pend_bytes;
    /* a split in progress: its communicator, stored into *split_out once
     * this (the parent) is done, as NCCL's thread stores it */
    void **split_out;
    void *split_nc;
} fake_nc_t;

static msr_status_t device_count(const msr_gpu_api_t *g, int *count_p)
{
    *count_p = FAKE(g)->devices;
    return MSR_OK;
}

static msr_status_t set_device(const msr_gpu_api_t *g, int device)
{
    if (device < 0 || device >= FAKE(g)->devices) {
        msr_err_set("fake: no device %d of %d", device, FAKE(g)->devices);
        return MSR_ERR_INVALID_ARG;
    }
    return MSR_OK;
}

static msr_status_t device_uuid(const msr_gpu_api_t *g, int device,
                                unsigned char uuid[MSR_GPU_UUID_BYTES])
{
    (void)g;
    memset(uuid, 0, MSR_GPU_UUID_BYTES);
    memcpy(uuid, "fake", 4);
    uuid[4] = (unsigned char)device;
    uuid[5] = 1;
    return MSR_OK;
}

static msr_status_t stream_create(const msr_gpu_api_t *g, void **stream_p)
{
    void *s = malloc(8);
    if (s == NULL)
        return MSR_ERR_NO_MEMORY;
    FAKE(g)->streams_live++;
    *stream_p = s;
    return MSR_OK;
}

static void stream_destroy(const msr_gpu_api_t *g, void *stream)
{
    if (stream) {
        FAKE(g)->streams_live--;
        free(stream);
    }
}

static msr_status_t event_create(const msr_gpu_api_t *g, void **event_p)
{
    fake_event_t *e = calloc(1, sizeof *e);
    if (e == NULL)
        return MSR_ERR_NO_MEMORY;
    e->done = 1; /* as CUDA: an event never recorded is complete */
    FAKE(g)->events_live++;
    *event_p = e;
    return MSR_OK;
}

static void event_destroy(const msr_gpu_api_t *g, void *event)
{
    if (event) {
        FAKE(g)->events_live--;
        free(event);
    }
}

static msr_status_t event_record(const msr_gpu_api_t *g, void *event, void *stream)
{
    (void)stream;
    ((fake_event_t *)event)->done = !FAKE(g)->hang;
    ((fake_event_t *)event)->aborts = FAKE(g)->aborts;
    return MSR_OK;
}

static msr_status_t event_query(const msr_gpu_api_t *g, void *event)
{
    const fake_event_t *e = event;
    return e->done || e->aborts != FAKE(g)->aborts ? MSR_OK : MSR_IN_PROGRESS;
}

static msr_status_t stream_wait_event(const msr_gpu_api_t *g, void *stream, void *event)
{
    (void)g;
    return stream && event ? MSR_OK : MSR_ERR_INVALID_ARG;
}

/* The allocation alloc_fails asks to fail. */
static int alloc_refused(gpu_fake_t *f, const char *what, size_t bytes)
{
    if (!f->alloc_fails)
        return 0;
    f->alloc_fails = 0;
    msr_err_set("fake: %s of %zu bytes: out of memory", what, bytes);
    return 1;
}

static msr_status_t host_alloc(const msr_gpu_api_t *g, size_t bytes, void **p)
{
    if (alloc_refused(FAKE(g), "cudaHostAlloc", bytes))
        return MSR_ERR_NO_MEMORY;
    *p = malloc(bytes ? bytes : 1);
    if (*p == NULL)
        return MSR_ERR_NO_MEMORY;
    FAKE(g)->host_live++;
    FAKE(g)->host_last = bytes;
    return MSR_OK;
}

static void host_free(const msr_gpu_api_t *g, void *p)
{
    if (p) {
        FAKE(g)->host_live--;
        free(p);
    }
}

static msr_status_t device_alloc(const msr_gpu_api_t *g, size_t bytes, void **p)
{
    if (alloc_refused(FAKE(g), "cudaMalloc", bytes))
        return MSR_ERR_NO_MEMORY;
    *p = malloc(bytes ? bytes : 1);
    if (*p == NULL)
        return MSR_ERR_NO_MEMORY;
    FAKE(g)->dev_live++;
    return MSR_OK;
}

static void device_free(const msr_gpu_api_t *g, void *p)
{
    if (p) {
        FAKE(g)->dev_live--;
        free(p);
    }
}

static msr_status_t copy_async(const msr_gpu_api_t *g, void *dst, const void *src, size_t bytes,
                               msr_gpu_copy_t kind, void *stream)
{
    (void)g;
    (void)kind;
    (void)stream;
    memmove(dst, src, bytes);
    return MSR_OK;
}

static msr_status_t unique_id(const msr_gpu_api_t *g, unsigned char id[MSR_GPU_ID_BYTES])
{
    gpu_fake_t *f = FAKE(g);
    if (f->unique_id_fails) {
        msr_err_set("fake: ncclGetUniqueId refused");
        return MSR_ERR_BACKEND;
    }
    if (f->real && f->real->unique_id(f->real, id) == MSR_OK) {
        f->id_from_nccl = 1;
        return MSR_OK;
    }
    /* NCCL cannot make one here: a fake id, random past a tag */
    f->id_from_nccl = 0;
    memcpy(id, "fake-nccl-id", 12);
    msr_random_bytes(id + 12, MSR_GPU_ID_BYTES - 12);
    return MSR_OK;
}

static msr_status_t new_nc(gpu_fake_t *f, int nranks, int rank, int polls, void **nc_p)
{
    fake_nc_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        return MSR_ERR_NO_MEMORY;
    c->nranks = nranks;
    c->rank = rank;
    c->polls_left = polls;
    f->comms_live++;
    *nc_p = c;
    return polls > 0 ? MSR_IN_PROGRESS : MSR_OK;
}

static msr_status_t comm_init(const msr_gpu_api_t *g, void **nc_p, int nranks,
                              const unsigned char id[MSR_GPU_ID_BYTES], int rank)
{
    gpu_fake_t *f = FAKE(g);
    f->inits++;
    memcpy(f->id, id, MSR_GPU_ID_BYTES);
    return new_nc(f, nranks, rank, f->init_polls, nc_p);
}

/* An NCCL call went in: in progress for settle_polls polls. */
static msr_status_t queued(gpu_fake_t *f, fake_nc_t *c)
{
    c->polls_left = f->settle_polls;
    return c->polls_left > 0 ? MSR_IN_PROGRESS : MSR_OK;
}

static msr_status_t comm_split(const msr_gpu_api_t *g, void *nc, int color, int key, void **newnc_p)
{
    gpu_fake_t *f = FAKE(g);
    (void)key;
    f->splits++;
    *newnc_p = NULL;
    void *made = NULL;
    if (color >= 0) {
        msr_status_t st = new_nc(f, -1, -1, 0, &made);
        if (st != MSR_OK)
            return st;
    }
    fake_nc_t *c = nc;
    if (queued(f, c) == MSR_OK) {
        *newnc_p = made;
    } else {
        c->split_out = newnc_p;
        c->split_nc = made;
    }
    /* MSR_OK even while it runs: NCCL's ncclCommSplit answers ncclSuccess
     * and only the parent's state tells when the split is done */
    return MSR_OK;
}

static msr_status_t comm_async_error(const msr_gpu_api_t *g, void *nc)
{
    gpu_fake_t *f = FAKE(g);
    fake_nc_t *c = nc;
    c->polls++;
    if (!c->failed && f->async_error_after > 0 && c->polls >= f->async_error_after)
        c->failed = 1;
    if (c->failed) {
        msr_err_set("fake: injected asynchronous error");
        return f->async_status;
    }
    if (c->polls_left > 0) {
        c->polls_left--;
        return MSR_IN_PROGRESS;
    }
    if (c->split_out) {
        *c->split_out = c->split_nc;
        c->split_out = NULL;
        c->split_nc = NULL;
    }
    return MSR_OK;
}

static msr_status_t comm_user_rank(const msr_gpu_api_t *g, void *nc, int *rank_p)
{
    (void)g;
    fake_nc_t *c = nc;
    if (c->rank < 0) {
        msr_err_set("fake: the rank of a split communicator is unknown");
        return MSR_ERR_UNSUPPORTED;
    }
    *rank_p = c->rank;
    return MSR_OK;
}

static msr_status_t comm_finalize(const msr_gpu_api_t *g, void *nc)
{
    gpu_fake_t *f = FAKE(g);
    f->finalizes++;
    ((fake_nc_t *)nc)->polls_left = 2;
    return MSR_IN_PROGRESS;
}

static msr_status_t comm_destroy(const msr_gpu_api_t *g, void *nc)
{
    gpu_fake_t *f = FAKE(g);
    f->destroys++;
    f->comms_live--;
    free(nc);
    return MSR_OK;
}

static msr_status_t comm_abort(const msr_gpu_api_t *g, void *nc)
{
    gpu_fake_t *f = FAKE(g);
    fake_nc_t *c = nc;
    f->aborts++;
    f->comms_live--;
    if (c->split_nc) { /* a split cut short: never stored, never made */
        free(c->split_nc);
        f->comms_live--;
    }
    free(nc);
    return MSR_OK;
}

static msr_status_t group_start(const msr_gpu_api_t *g)
{
    FAKE(g)->in_group = 1;
    FAKE(g)->group_nc = NULL;
    return MSR_OK;
}

/* The group's calls are queued now: in progress, as one call would be. */
static msr_status_t group_end(const msr_gpu_api_t *g)
{
    gpu_fake_t *f = FAKE(g);
    f->in_group = 0;
    return f->group_nc ? queued(f, f->group_nc) : MSR_OK;
}

/* A collective of count elements: refused, or (one rank) the copy it
 * amounts to, then in progress for a while. */
static msr_status_t coll(const msr_gpu_api_t *g, void *nc, size_t count, void *dst, const void *src,
                         size_t bytes)
{
    gpu_fake_t *f = FAKE(g);
    fake_nc_t *c = nc;
    if (f->refuse_count && count == f->refuse_count) {
        msr_err_set("fake: refusing a call with %zu elements", count);
        return MSR_ERR_INVALID_ARG;
    }
    f->ops++;
    if (c->nranks == 1 && bytes && dst != src)
        memmove(dst, src, bytes);
    if (f->in_group) { /* recorded, queued by group_end */
        f->group_nc = c;
        return MSR_OK;
    }
    return queued(f, c);
}

static size_t esz(msr_dtype_t dt)
{
    return msr_dtype_size(dt);
}

static msr_status_t allreduce(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                              msr_dtype_t dtype, msr_op_t op, void *nc, void *stream)
{
    (void)op;
    (void)stream;
    return coll(g, nc, count, recv, send, count * esz(dtype));
}

static msr_status_t reduce_scatter(const msr_gpu_api_t *g, const void *send, void *recv,
                                   size_t recvcount, msr_dtype_t dtype, msr_op_t op, void *nc,
                                   void *stream)
{
    (void)op;
    (void)stream;
    return coll(g, nc, recvcount, recv, send, recvcount * esz(dtype));
}

static msr_status_t allgather(const msr_gpu_api_t *g, const void *send, void *recv,
                              size_t sendcount, msr_dtype_t dtype, void *nc, void *stream)
{
    (void)stream;
    return coll(g, nc, sendcount, recv, send, sendcount * esz(dtype));
}

static msr_status_t broadcast(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                              msr_dtype_t dtype, int root, void *nc, void *stream)
{
    (void)root;
    (void)stream;
    return coll(g, nc, count, recv, send, count * esz(dtype));
}

static msr_status_t reduce(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                           msr_dtype_t dtype, msr_op_t op, int root, void *nc, void *stream)
{
    (void)op;
    (void)root;
    (void)stream;
    return coll(g, nc, count, recv, send, count * esz(dtype));
}

static msr_status_t alltoall(const msr_gpu_api_t *g, const void *send, void *recv, size_t count,
                             msr_dtype_t dtype, void *nc, void *stream)
{
    (void)stream;
    return coll(g, nc, count, recv, send, count * esz(dtype));
}

static msr_status_t send_(const msr_gpu_api_t *g, const void *buf, size_t count, msr_dtype_t dtype,
                          int peer, void *nc, void *stream)
{
    (void)peer;
    (void)stream;
    fake_nc_t *c = nc;
    c->pend = buf;
    c->pend_bytes = count * esz(dtype);
    return coll(g, nc, count, NULL, NULL, 0);
}

static msr_status_t recv_(const msr_gpu_api_t *g, void *buf, size_t count, msr_dtype_t dtype,
                          int peer, void *nc, void *stream)
{
    (void)peer;
    (void)stream;
    fake_nc_t *c = nc;
    size_t bytes = count * esz(dtype);
    if (c->nranks == 1 && c->pend && c->pend_bytes == bytes) {
        memmove(buf, c->pend, bytes);
        c->pend = NULL;
    }
    return coll(g, nc, count, NULL, NULL, 0);
}

void gpu_fake_init(gpu_fake_t *f)
{
    memset(f, 0, sizeof *f);
    f->devices = 4;
    f->async_status = MSR_ERR_PEER_LOST;
    f->real = msr_gpu_api_cuda(); /* NULL without CUDA */
    f->api = (msr_gpu_api_t){
        .name = "fake",
        .data = f,
        MSR_FAKE_GPU_STREAM_OPS,
        .device_uuid = device_uuid,
        .host_alloc = host_alloc,
        .host_free = host_free,
        .device_alloc = device_alloc,
        .device_free = device_free,
        .copy_async = copy_async,
        .unique_id = unique_id,
        .comm_init = comm_init,
        .comm_split = comm_split,
        .comm_async_error = comm_async_error,
        .comm_user_rank = comm_user_rank,
        .comm_finalize = comm_finalize,
        .comm_destroy = comm_destroy,
        .comm_abort = comm_abort,
        .group_start = group_start,
        .group_end = group_end,
        .allreduce = allreduce,
        .reduce_scatter = reduce_scatter,
        .allgather = allgather,
        .broadcast = broadcast,
        .reduce = reduce,
        .alltoall = alltoall,
        .send = send_,
        .recv = recv_,
    };
}
