/* AdamW on the host for parameters on a device (see host_adamw.h). */
#include "parallel/host_adamw.h"

#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "model/err_call.h"

void msr_host_adamw_destroy(msr_host_adamw_t *h)
{
    if (h == NULL)
        return;
    /* nothing may still read or write the buffers when they go */
    if (h->down != NULL)
        (void)msr_device_stream_sync(h->dev, h->down);
    if (h->up != NULL)
        (void)msr_device_stream_sync(h->dev, h->up);
    for (int i = 0; i < 2; i++) {
        msr_device_event_destroy(h->dev, h->got[i]);
        msr_device_host_free(h->dev, h->grads[i]);
    }
    msr_device_stream_destroy(h->dev, h->up);
    msr_device_stream_destroy(h->dev, h->down);
    msr_device_host_free(h->dev, h->params);
    msr_adamw_destroy(h->opt);
    msr_free(h);
}

msr_status_t msr_host_adamw_create(const msr_device_t *dev, const msr_adamw_config_t *cfg,
                                   const msr_gpt_tensor_t *tensors, int n, size_t count,
                                   size_t chunk, const float *params, msr_host_adamw_t **h_p)
{
    if (dev == NULL || cfg == NULL || tensors == NULL || params == NULL || h_p == NULL ||
        count == 0)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "host_adamw: a device, a table, parameters and count > 0 (%zu) are needed",
                       count);
    if (chunk == 0)
        chunk = MSR_HOST_ADAMW_CHUNK;
    if (chunk > count)
        chunk = count;
    msr_host_adamw_t *h = msr_calloc(1, sizeof *h);
    if (h == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "host_adamw: out of memory");
    h->dev = dev;
    h->count = count;
    h->chunk = chunk;
    msr_status_t st = msr_adamw_create(cfg, tensors, n, 0, count, &h->opt);
    if (st != MSR_OK) {
        msr_err_prefix(st, "host_adamw");
        goto fail;
    }
    if ((st = msr_device_host_alloc(dev, count * sizeof(float), (void **)&h->params)) != MSR_OK) {
        msr_err_call(st, "host_adamw: pinned memory for %zu parameters", count);
        goto fail;
    }
    memcpy(h->params, params, count * sizeof(float));
    for (int i = 0; i < 2; i++) {
        if ((st = msr_device_host_alloc(dev, chunk * sizeof(float), (void **)&h->grads[i])) !=
                MSR_OK ||
            (st = msr_device_event_create(dev, &h->got[i])) != MSR_OK) {
            msr_err_call(st, "host_adamw: a chunk of %zu gradients", chunk);
            goto fail;
        }
    }
    if ((st = msr_device_stream_create(dev, &h->down)) != MSR_OK ||
        (st = msr_device_stream_create(dev, &h->up)) != MSR_OK) {
        msr_err_call(st, "host_adamw: the copies' streams");
        goto fail;
    }
    *h_p = h;
    return MSR_OK;
fail:
    msr_host_adamw_destroy(h);
    return st;
}

msr_status_t msr_host_adamw_set(msr_host_adamw_t *h, const float *params, const float *m,
                                const float *v, uint64_t t, float *params_dev)
{
    size_t bytes = h->count * sizeof(float);
    memcpy(h->params, params, bytes);
    memcpy(h->opt->m, m, bytes);
    memcpy(h->opt->v, v, bytes);
    h->opt->t = t;
    if (params_dev == NULL)
        return MSR_OK;
    msr_status_t st = msr_device_copy(h->dev, params_dev, h->params, bytes, MSR_DEVICE_H2D, h->up);
    if (st == MSR_OK)
        st = msr_device_stream_sync(h->dev, h->up);
    return st == MSR_OK ? MSR_OK : msr_err_call(st, "host_adamw: the parameters to the device");
}

/* Queues chunk c's gradients down into grads[c & 1], behind which got[c & 1]. */
static msr_status_t fetch(msr_host_adamw_t *h, size_t c, const float *grads_dev)
{
    size_t off = c * h->chunk, n = h->count - off < h->chunk ? h->count - off : h->chunk;
    int b = (int)(c & 1);
    msr_status_t st = msr_device_copy(h->dev, h->grads[b], grads_dev + off, n * sizeof(float),
                                      MSR_DEVICE_D2H, h->down);
    if (st == MSR_OK)
        st = msr_device_event_record(h->dev, h->got[b], h->down);
    return st;
}

msr_status_t msr_host_adamw_step(msr_host_adamw_t *h, float *params_dev, const float *grads_dev,
                                 float lr, float grad_scale)
{
    size_t chunks = (h->count + h->chunk - 1) / h->chunk;
    msr_adamw_begin(h->opt, lr, grad_scale);
    msr_status_t st = fetch(h, 0, grads_dev);
    for (size_t c = 0; c < chunks && st == MSR_OK; c++) {
        size_t off = c * h->chunk, n = h->count - off < h->chunk ? h->count - off : h->chunk;
        /* the next chunk's buffer held chunk c - 1, whose update is done */
        if (c + 1 < chunks && (st = fetch(h, c + 1, grads_dev)) != MSR_OK)
            break;
        if ((st = msr_device_event_sync(h->dev, h->got[c & 1])) != MSR_OK)
            break;
        msr_adamw_update_range(h->opt, off, n, h->params + off, h->grads[c & 1]);
        /* the master chunk is not written again before the step's end */
        st = msr_device_copy(h->dev, params_dev + off, h->params + off, n * sizeof(float),
                             MSR_DEVICE_H2D, h->up);
        h->chunks_moved++;
    }
    /* every queued copy is done (or failed) before the buffers are used again */
    msr_status_t dst = msr_device_stream_sync(h->dev, h->down);
    msr_status_t ust = msr_device_stream_sync(h->dev, h->up);
    if (st == MSR_OK)
        st = dst != MSR_OK ? dst : ust;
    return st == MSR_OK ? MSR_OK : msr_err_call(st, "host_adamw: a step's copies");
}

void msr_host_adamw_step_host(msr_host_adamw_t *h, const float *grads, float lr, float grad_scale)
{
    msr_adamw_begin(h->opt, lr, grad_scale);
    for (size_t off = 0; off < h->count; off += h->chunk) {
        size_t n = h->count - off < h->chunk ? h->count - off : h->chunk;
        msr_adamw_update_range(h->opt, off, n, h->params + off, grads + off);
    }
}
