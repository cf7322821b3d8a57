/* A fake GPU table for the device communicators' tests on machines without
 * a GPU: "device" memory is host memory, copies are memcpy, streams and
 * events are small objects, and the NCCL calls answer as a non-blocking
 * NCCL communicator would, with knobs to make them slow, hang or fail, and
 * counters of what was called. Only one-rank NCCL communicators move data
 * (the copies a one-rank collective amounts to); with more ranks the NCCL
 * calls leave the buffers alone, so those tests check control flow only.
 * The staged backend moves real data (through the real host communicator). */
#ifndef MSR_TESTS_COMM_GPU_FAKE_H
#define MSR_TESTS_COMM_GPU_FAKE_H

#include <stdatomic.h>

#include "comm/nccl/gpu_api.h"

typedef struct gpu_fake {
    msr_gpu_api_t api; /* api.data points back here */
    /* knobs */
    int devices;           /* what device_count answers */
    int init_polls;        /* comm_init stays in progress for this many polls */
    int settle_polls;      /* each NCCL call stays in progress this long */
    int hang;              /* events never complete */
    int async_error_after; /* polls of a communicator before its async error (0: never) */
    msr_status_t async_status;
    unsigned long long refuse_count; /* NCCL calls with this count: MSR_ERR_INVALID_ARG */
    int unique_id_fails;
    int alloc_fails; /* the next host_alloc or device_alloc: MSR_ERR_NO_MEMORY (and back to 0) */
    const msr_gpu_api_t *real; /* for unique ids from NCCL itself, when there is one */
    /* what happened */
    _Atomic int aborts, finalizes, destroys, inits, splits, ops;
    _Atomic int host_live, dev_live, events_live, streams_live, comms_live;
    size_t host_last;                   /* bytes of the last host_alloc */
    unsigned char id[MSR_GPU_ID_BYTES]; /* the id the last comm_init got */
    int in_group;                       /* between group_start and group_end */
    void *group_nc;                     /* a communicator the group used */
    int id_from_nccl;                   /* the last unique_id came from NCCL */
} gpu_fake_t;

/* Sets the defaults (4 devices, no delays, nothing fails) and the table. */
void gpu_fake_init(gpu_fake_t *f);

#endif
