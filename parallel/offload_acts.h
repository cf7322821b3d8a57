/* Activation offload (docs/model.md "Offload"): the boundary activations
 * that full recompute keeps (each block's input, parallel/mp.h) spilled to
 * a file after the block's forward and read back, the next ones ahead, in
 * reverse order before backward needs them.
 *
 * A store holds `count` activations of `bytes` each, activation k at byte
 * k * S of its file (S: bytes rounded up to MSR_OFFLOAD_ALIGN). Its memory
 * is MSR_ACTS_BUFS buffers of S bytes: the caller takes a free one
 * (msr_acts_get), fills it and hands it back to be written
 * (msr_acts_spill: write-behind, the buffer free again once written);
 * backward starts reads ahead (msr_acts_prefetch) and takes the buffer
 * when it needs it (msr_acts_fetch), then gives it back (msr_acts_put).
 *
 * Each activation's CRC-32 is kept when it is written and checked when it
 * is read back: a file changed underneath, a short read, a full disk or an
 * I/O error is an error naming the file and the activation, never a wrong
 * activation; after one the store refuses every call (MSR_ERR_STATE). The
 * file is msrun-acts-rank<rank>-<pid>.bin under cfg->dir, created 0600
 * with O_EXCL and removed by msr_acts_destroy unless cfg->keep.
 *
 * Not thread-safe: one thread per store. */
#ifndef MSR_PARALLEL_OFFLOAD_ACTS_H
#define MSR_PARALLEL_OFFLOAD_ACTS_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "parallel/offload.h"

/* Buffers of a store: while a block runs its forward, its input and
 * output are held and the blocks' before are being written; in backward
 * two are held (the block's input and the output its recompute rewrites)
 * and MSR_ACTS_AHEAD are being read. */
#define MSR_ACTS_BUFS  6
#define MSR_ACTS_AHEAD 2

typedef struct msr_acts msr_acts_t;

/* What a store did, from its creation. */
typedef struct msr_acts_stats {
    uint64_t spills;        /* activations written */
    uint64_t fetches;       /* activations read back */
    uint64_t misses;        /* of them, not read ahead (fetch had to start the read) */
    uint64_t write_wait;    /* msr_acts_get waited for a write to end */
    uint64_t reads_dropped; /* reads ahead given up for a buffer before they were taken */
} msr_acts_stats_t;

/* Creates the store for cfg (MSR_OFFLOAD_DISK: checked as
 * msr_offload_config_check does; chunk_bytes is not used). Errors:
 * MSR_ERR_INVALID_ARG, MSR_ERR_IO (the file, named), MSR_ERR_NO_MEMORY,
 * MSR_ERR_UNSUPPORTED (io_uring refused when asked for by name). On
 * failure nothing is left behind. */
msr_status_t msr_acts_create(const msr_offload_config_t *cfg, size_t bytes, size_t count,
                             msr_acts_t **acts_p);
/* Waits for what is in flight, closes and removes the file unless
 * cfg->keep. NULL: nothing. */
void msr_acts_destroy(msr_acts_t *a);

/* A free buffer of at least `bytes` (waiting for the oldest write to end
 * when every buffer is busy; when none is being written, the oldest read
 * ahead is waited and given up: a later fetch of it reads again). Errors:
 * MSR_ERR_STATE (every buffer held: a caller's bug; or the store failed
 * before), the write's or the read's. */
msr_status_t msr_acts_get(msr_acts_t *a, float **buf_p);
/* Starts writing buf (one of the store's, held) as activation k; the
 * buffer is the store's again. Errors: MSR_ERR_STATE. */
msr_status_t msr_acts_spill(msr_acts_t *a, float *buf, size_t k);
/* Starts reading activation k (written before) into a free buffer;
 * nothing when it is being read already. Errors: as msr_acts_get. */
msr_status_t msr_acts_prefetch(msr_acts_t *a, size_t k);
/* Activation k, read and checked, in a buffer the caller now holds.
 * Errors: MSR_ERR_CORRUPT (its CRC differs: changed underneath), MSR_ERR_IO
 * (a short read, an I/O error), each naming the file and the activation;
 * MSR_ERR_STATE (k never written). */
msr_status_t msr_acts_fetch(msr_acts_t *a, size_t k, float **buf_p);
/* Gives a held buffer back unwritten. */
void msr_acts_put(msr_acts_t *a, float *buf);

/* Waits for every write in flight (their buffers free again): after it
 * the file holds what was spilled, until the next spill. Errors: a
 * write's (the store failed). */
msr_status_t msr_acts_flush(msr_acts_t *a);
/* Activation k, read and checked as msr_acts_fetch does, into buf (the
 * caller's: msr_acts_slot_bytes, aligned to MSR_OFFLOAD_ALIGN) without
 * the store's buffers, engine or state: from any thread, while the
 * store's own thread spills nothing (flushed before, no msr_acts_spill
 * until this returns; its reads, fetches and puts may go on). A failure
 * is this call's alone: the store goes on. Errors: MSR_ERR_STATE (k
 * never written), MSR_ERR_IO, MSR_ERR_CORRUPT, as msr_acts_fetch. */
msr_status_t msr_acts_read_shared(const msr_acts_t *a, size_t k, void *buf);
/* The bytes an activation takes in the file (its size rounded up to
 * MSR_OFFLOAD_ALIGN): a buffer msr_acts_read_shared fills. */
size_t msr_acts_slot_bytes(const msr_acts_t *a);

/* The file's path, the engine (as msr_offload_engine), the bytes the store
 * keeps resident (its buffers and CRC table), its counters. */
const char *msr_acts_path(const msr_acts_t *a);
const char *msr_acts_engine(const msr_acts_t *a);
size_t msr_acts_resident(const msr_acts_t *a);
const msr_acts_stats_t *msr_acts_stats(const msr_acts_t *a);

#endif
