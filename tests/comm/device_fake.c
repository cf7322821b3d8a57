/* A fake GPU table for the CUDA device's conformance run without a GPU:
 * "device" memory is host memory, and queued work is deferred, really: a
 * copy or memset runs only when its stream is synchronized, an event
 * behind it is synchronized or waited for by another stream. So the suite
 * run over it (test_device_fake) checks device_cuda.c's translation and
 * that the suite itself waits where the interface says it must. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "comm/nccl/gpu_api.h"
#include "tests/comm/device_fake.h"
#include "tests/comm/fake_gpu_ops.h"

typedef struct op {
    void *dst;
    const void *src; /* NULL: a memset of byte */
    size_t bytes;
    int byte;
} op_t;

typedef struct queue {
    op_t *ops;
    size_t n, cap, done; /* ops [done, n) still to run */
} queue_t;

typedef struct event {
    queue_t *q; /* NULL: never recorded */
    size_t upto;
} event_t;

typedef struct fake {
    queue_t dflt; /* the default stream */
    int current;
} fake_t;

static fake_t fake_state;

static queue_t *q_of(void *stream)
{
    return stream != NULL ? stream : &fake_state.dflt;
}

static void run_upto(queue_t *q, size_t upto)
{
    for (; q->done < upto; q->done++) {
        const op_t *o = &q->ops[q->done];
        if (o->src != NULL)
            memcpy(o->dst, o->src, o->bytes);
        else
            memset(o->dst, o->byte, o->bytes);
    }
}

static msr_status_t push(queue_t *q, op_t o)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 16;
        op_t *ops = msr_realloc_array(q->ops, cap, sizeof *ops);
        if (ops == NULL) {
            msr_err_set("fake: cudaMemcpyAsync: out of memory");
            return MSR_ERR_NO_MEMORY;
        }
        q->ops = ops;
        q->cap = cap;
    }
    q->ops[q->n++] = o;
    return MSR_OK;
}

static msr_status_t device_count(const msr_gpu_api_t *g, int *count_p)
{
    (void)g;
    *count_p = 1;
    return MSR_OK;
}

static msr_status_t set_device(const msr_gpu_api_t *g, int device)
{
    (void)g;
    if (device != 0) {
        msr_err_set("fake: cudaSetDevice: invalid device ordinal %d", device);
        return MSR_ERR_INVALID_ARG;
    }
    fake_state.current = device;
    return MSR_OK;
}

static msr_status_t stream_create(const msr_gpu_api_t *g, void **stream_p)
{
    (void)g;
    queue_t *q = msr_calloc(1, sizeof *q);
    if (q == NULL)
        return MSR_ERR_NO_MEMORY;
    *stream_p = q;
    return MSR_OK;
}

static void stream_destroy(const msr_gpu_api_t *g, void *stream)
{
    (void)g;
    queue_t *q = stream;
    run_upto(q, q->n); /* CUDA finishes a destroyed stream's work */
    msr_free(q->ops);
    msr_free(q);
}

static msr_status_t event_create(const msr_gpu_api_t *g, void **event_p)
{
    (void)g;
    event_t *e = msr_calloc(1, sizeof *e);
    if (e == NULL)
        return MSR_ERR_NO_MEMORY;
    *event_p = e;
    return MSR_OK;
}

static void event_destroy(const msr_gpu_api_t *g, void *event)
{
    (void)g;
    msr_free(event);
}

static msr_status_t event_record(const msr_gpu_api_t *g, void *event, void *stream)
{
    (void)g;
    event_t *e = event;
    e->q = q_of(stream);
    e->upto = e->q->n;
    return MSR_OK;
}

static msr_status_t event_query(const msr_gpu_api_t *g, void *event)
{
    (void)g;
    const event_t *e = event;
    return e->q == NULL || e->q->done >= e->upto ? MSR_OK : MSR_IN_PROGRESS;
}

static msr_status_t event_sync(const msr_gpu_api_t *g, void *event)
{
    (void)g;
    event_t *e = event;
    if (e->q != NULL)
        run_upto(e->q, e->upto);
    return MSR_OK;
}

/* What waits for event runs no earlier than now: finishing the event's
 * work at once keeps the order the wait asks for. */
static msr_status_t stream_wait_event(const msr_gpu_api_t *g, void *stream, void *event)
{
    (void)stream;
    return event_sync(g, event);
}

static msr_status_t stream_sync(const msr_gpu_api_t *g, void *stream)
{
    (void)g;
    queue_t *q = q_of(stream);
    run_upto(q, q->n);
    return MSR_OK;
}

static msr_status_t mem_alloc(const msr_gpu_api_t *g, size_t bytes, void **p)
{
    (void)g;
    if (bytes > ((size_t)1 << 40) || (*p = msr_malloc(bytes)) == NULL) {
        msr_err_set("fake: cudaMalloc: out of memory for %zu bytes", bytes);
        return MSR_ERR_NO_MEMORY;
    }
    return MSR_OK;
}

static void mem_free(const msr_gpu_api_t *g, void *p)
{
    (void)g;
    msr_free(p);
}

static msr_status_t copy_async(const msr_gpu_api_t *g, void *dst, const void *src, size_t bytes,
                               msr_gpu_copy_t kind, void *stream)
{
    (void)g;
    if (kind != MSR_GPU_D2H && kind != MSR_GPU_H2D && kind != MSR_GPU_D2D) {
        msr_err_set("fake: cudaMemcpyAsync: invalid kind %d", (int)kind);
        return MSR_ERR_INVALID_ARG;
    }
    return push(q_of(stream), (op_t){dst, src, bytes, 0});
}

static msr_status_t memset_async(const msr_gpu_api_t *g, void *p, int byte, size_t bytes,
                                 void *stream)
{
    (void)g;
    return push(q_of(stream), (op_t){p, NULL, bytes, byte});
}

static const msr_gpu_api_t fake_api = {
    .name = "fake-deferred",
    MSR_FAKE_GPU_STREAM_OPS,
    .host_alloc = mem_alloc,
    .host_free = mem_free,
    .device_alloc = mem_alloc,
    .device_free = mem_free,
    .copy_async = copy_async,
    .memset_async = memset_async,
    .stream_sync = stream_sync,
    .event_sync = event_sync,
};

const msr_gpu_api_t *msr_test_device_fake_api(void)
{
    return &fake_api;
}
