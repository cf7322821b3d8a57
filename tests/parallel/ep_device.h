/* A device that counts its calls (ep_device.c): the CPU device's behaviour
 * (host memory, work done in the call) with every allocation, copy and
 * memset recorded, per live allocation, so that a test can ask whether a
 * buffer was made by the device and how many copies and memsets landed in
 * it. Its memory comes from this binary's allocator (base/alloc.h), so the
 * allocation hook fails its allocations. One process's state, one thread
 * at a time. */
#ifndef MSR_TESTS_PARALLEL_EP_DEVICE_H
#define MSR_TESTS_PARALLEL_EP_DEVICE_H

#include <stddef.h>

#include "msrun/device.h"

/* What the device saw of one live allocation. */
typedef struct ep_device_buf {
    size_t bytes;                       /* as asked for */
    long copies[MSR_DEVICE_COPY_KINDS]; /* copies whose destination lies in it, by kind */
    long memsets;                       /* memsets that start in it */
    int host;                           /* made by host_alloc: the device's host memory */
} ep_device_buf_t;

/* Totals since the start (or ep_device_reset). */
typedef struct ep_device_totals {
    long allocs, frees, memsets, syncs;
    long copies[MSR_DEVICE_COPY_KINDS];
    long live;       /* allocations not freed */
    long mismatched; /* freed by the other kind's call (free for host_alloc's, ...) */
} ep_device_totals_t;

/* The device ("count", host memory): never destroyed. */
const msr_device_t *ep_device(void);
ep_device_totals_t ep_device_totals(void);
/* Zeroes the totals and every live buffer's counts. */
void ep_device_reset(void);
/* The live allocation that starts at p, NULL when the device made none
 * there (or freed it). */
const ep_device_buf_t *ep_device_buf(const void *p);

#endif
