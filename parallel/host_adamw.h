/* AdamW on the host for parameters that live on a device: the optimizer
 * of `--offload optimizer=host` on GPU ranks (ZeRO-Offload: docs/model.md
 * "The optimizer on the host").
 *
 * The device keeps the parameters and their gradients (8 bytes a
 * parameter); the host keeps the fp32 master copy of the parameters in
 * pinned memory and AdamW's moments (12 bytes a parameter), so the device
 * holds no moments. A step streams the gradients down a chunk at a time
 * and the updated parameters back up:
 *
 *   chunk c + 1's gradients  device -> host   (stream "down", queued ahead)
 *   chunk c updated on the host               (model/adamw.h: the CPU
 *                                              trainer's update, its bits)
 *   chunk c's parameters     host -> device   (stream "up", queued behind)
 *
 * so both copies overlap the host's arithmetic, and what the host holds
 * beside its state is two chunks of gradients. Every copy goes through the
 * device interface (msrun/device.h): on the CPU device the copies are
 * memcpy and the result is msr_adamw_update's over the whole buffer,
 * bitwise; on a device whose queued work is deferred the step waits for
 * each chunk's gradients before it reads them and for every upload before
 * it returns.
 *
 * Not thread-safe: one thread per optimizer. */
#ifndef MSR_PARALLEL_HOST_ADAMW_H
#define MSR_PARALLEL_HOST_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "model/adamw.h"
#include "msrun/device.h"

/* Elements a chunk moves when the caller says 0: 4 MiB of floats. */
#define MSR_HOST_ADAMW_CHUNK ((size_t)1 << 20)

typedef struct msr_host_adamw {
    const msr_device_t *dev;
    msr_adamw_t *opt; /* m, v and t over [0, count) */
    float *params;    /* count floats, pinned: the master copy */
    float *grads[2];  /* chunk floats each, pinned */
    msr_device_stream_t *down, *up;
    msr_device_event_t *got[2]; /* grads[i] filled */
    size_t count, chunk;
    uint64_t chunks_moved; /* over the optimizer's life: chunks down (each also up) */
} msr_host_adamw_t;

/* An optimizer for count > 0 elements laid out as tensors[0..n) (the
 * model's table: which elements decay), on device dev, moving chunk
 * elements at a time (0: MSR_HOST_ADAMW_CHUNK), with master parameters
 * params (count floats, copied) and zero moments, t = 0. The device's
 * parameters are not touched. Errors: MSR_ERR_INVALID_ARG (count 0, NULL
 * arguments, the table's), MSR_ERR_NO_MEMORY, the device's; the reason
 * in the error text. */
msr_status_t msr_host_adamw_create(const msr_device_t *dev, const msr_adamw_config_t *cfg,
                                   const msr_gpt_tensor_t *tensors, int n, size_t count,
                                   size_t chunk, const float *params, msr_host_adamw_t **h_p);
void msr_host_adamw_destroy(msr_host_adamw_t *h);

/* The state from a checkpoint: master parameters, moments (count floats
 * each, copied) and AdamW's step count t; then the master parameters are
 * copied to params_dev (count floats on the device; NULL: nowhere, for
 * parameters that live in host memory) and the call waits for it.
 * Errors: the device's. */
msr_status_t msr_host_adamw_set(msr_host_adamw_t *h, const float *params, const float *m,
                                const float *v, uint64_t t, float *params_dev);

/* One step (t += 1): the gradients grads_dev (count floats on the device,
 * finished there before the call) times grad_scale, learning rate lr;
 * the updated parameters are in params_dev (count floats on the device)
 * and the master copy when it returns. A failed copy fails the step
 * with the device's status; the state is then part updated and the run
 * is not to go on from it. */
msr_status_t msr_host_adamw_step(msr_host_adamw_t *h, float *params_dev, const float *grads_dev,
                                 float lr, float grad_scale);

/* One step as msr_host_adamw_step's, for parameters whose master copy is
 * the only one (`--offload params=host`: the device fetches its blocks
 * from it): the gradients are grads (count floats in host memory) and
 * nothing is copied. The update runs over the same chunks, so its bits
 * are msr_host_adamw_step's. */
void msr_host_adamw_step_host(msr_host_adamw_t *h, const float *grads, float lr, float grad_scale);

#endif
