/* Parameter offload's store (docs/model.md "Offload"): the parameters of
 * `count` blocks of n floats each in a file of the rank's, read back one
 * block at a time as a pass reaches it, the pass's next block read ahead,
 * and dropped after (or written back behind, when an optimizer step
 * changed them). What it keeps in memory is MSR_PARAMS_BUFS blocks'
 * buffers and a CRC per block, whatever the number of blocks.
 *
 * A pass goes over the blocks in one direction: dir +1 (a forward: 0, 1,
 * ..., count - 1) or -1 (a backward: count - 1, ..., 0). Block k is
 * taken with msr_params_acquire(k, dir), which returns its parameters,
 * read and checked, and starts reading block k + dir; msr_params_release
 * gives them back, dropped or written back. A pass that starts its first
 * block with msr_params_prefetch while it does something else (the
 * embeddings, the head) never waits for a read it could have started
 * earlier: msr_params_stats counts the reads that were not started ahead
 * (misses).
 *
 * Each block's CRC-32 is kept when it is written and checked when it is
 * read back: a file changed underneath, a short read, a full disk or an
 * I/O error is an error naming the file and the block, never a wrong
 * parameter; after one the store refuses every call (MSR_ERR_STATE). The
 * file is msrun-params-rank<rank>-<pid>.bin under cfg->dir, created 0600
 * with O_EXCL and removed by msr_params_destroy unless cfg->keep.
 *
 * Not thread-safe: one thread per store. */
#ifndef MSR_PARALLEL_OFFLOAD_PARAMS_H
#define MSR_PARALLEL_OFFLOAD_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "parallel/offload.h"

/* Buffers of a store: the block in use, the next one being read and the
 * one before being written back. */
#define MSR_PARAMS_BUFS 3

typedef struct msr_params msr_params_t;

/* What a store did, from its creation. */
typedef struct msr_params_stats {
    uint64_t writes;  /* blocks written (put and written back) */
    uint64_t reads;   /* blocks read back (acquired and got) */
    uint64_t misses;  /* of them, not read ahead (the read started when asked for) */
    uint64_t dropped; /* reads ahead given up for a buffer before they were acquired */
    /* the most bytes of the blocks' parameters a checkpoint's restore held
     * in memory at once beside the store's buffers (msr_params_count_restore) */
    uint64_t restore_peak;
} msr_params_stats_t;

/* Creates the store for count blocks of n floats (n >= 1; cfg:
 * MSR_OFFLOAD_DISK, checked as msr_offload_config_check does, chunk_bytes
 * not used). Every block must be put before it is read. Errors:
 * MSR_ERR_INVALID_ARG, MSR_ERR_IO (the file, named), MSR_ERR_NO_MEMORY,
 * MSR_ERR_UNSUPPORTED (io_uring refused when asked for by name). On
 * failure nothing is left behind. */
msr_status_t msr_params_create(const msr_offload_config_t *cfg, size_t n, size_t count,
                               msr_params_t **p_p);
/* The same, the file msrun-<kind>-rank<rank>-<pid>.bin (a store of a
 * trainer's other parameters: kind "experts-params"). */
msr_status_t msr_params_create_as(const msr_offload_config_t *cfg, const char *kind, size_t n,
                                  size_t count, msr_params_t **p_p);
/* Waits for what is in flight, closes and removes the file unless
 * cfg->keep. NULL: nothing. */
void msr_params_destroy(msr_params_t *p);

/* Block k's parameters from src (n floats): the initial ones, or a
 * checkpoint's. Written behind from a buffer of the store's, after a
 * write of block k in flight landed and a read of it in flight was
 * dropped (a later read gives these). Errors:
 * MSR_ERR_STATE (k out of range, every buffer held, the store failed
 * before), a write's that ended in between. */
msr_status_t msr_params_put(msr_params_t *p, size_t k, const float *src);
/* Block k's parameters, read and checked, into dst (n floats): for a
 * checkpoint. Errors: as msr_params_acquire. */
msr_status_t msr_params_get(msr_params_t *p, size_t k, float *dst);

/* Starts reading block k (put before) unless it is being read already;
 * with no buffer free or being written, the oldest read ahead not yet
 * acquired is given up for it (a wrong guess: acquiring that block reads
 * it again). Errors: MSR_ERR_STATE (k out of range or never put, every
 * buffer held, the store failed before), a write's or a read's that ended
 * in between. */
msr_status_t msr_params_prefetch(msr_params_t *p, size_t k);
/* Block k's parameters, read and checked, in *buf_p (n floats, held until
 * msr_params_release), and block k + dir starts reading when it is one
 * (dir: +1 or -1; 0: nothing read ahead, the caller knows the next pass
 * goes elsewhere; else MSR_ERR_INVALID_ARG). Errors: MSR_ERR_CORRUPT (its
 * CRC differs: changed underneath), MSR_ERR_IO (a short read, an I/O
 * error), each naming the file and the block; as msr_params_prefetch. */
msr_status_t msr_params_acquire(msr_params_t *p, size_t k, int dir, float **buf_p);
/* Gives back block k's buffer from msr_params_acquire: dirty 0 drops it,
 * 1 writes it back behind as block k's new parameters. Errors:
 * MSR_ERR_STATE (buf not held). */
msr_status_t msr_params_release(msr_params_t *p, size_t k, float *buf, int dirty);

/* For a reader on another thread (a checkpoint streamed while the steps
 * compute, parallel/train_ckpt_save.c): flush waits for the blocks being
 * written back (after it the file holds every block's parameters, until
 * the next write); read_shared reads block k into buf (the caller's:
 * msr_params_slot_bytes, aligned to MSR_OFFLOAD_ALIGN; its first n floats
 * the parameters) and checks it, without the store's buffers or state:
 * from any thread while the store's own thread writes no block (flushed,
 * then no put and no dirty release until it returns), its reads going on.
 * Errors: flush's, a write's (the store failed); read_shared's as
 * msr_params_get's, a failure its own (the store goes on). */
msr_status_t msr_params_flush(msr_params_t *p);
msr_status_t msr_params_read_shared(const msr_params_t *p, size_t k, float *buf);
size_t msr_params_slot_bytes(const msr_params_t *p);

/* The file's path, the engine (as msr_offload_engine), the bytes the store
 * keeps resident (its buffers and per-block table), its counters. */
const char *msr_params_path(const msr_params_t *p);
const char *msr_params_engine(const msr_params_t *p);
size_t msr_params_resident(const msr_params_t *p);
const msr_params_stats_t *msr_params_stats(const msr_params_t *p);
/* Counts that a restore holds bytes of the blocks' parameters now: the
 * stats' restore_peak keeps the most. */
void msr_params_count_restore(msr_params_t *p, size_t bytes);

/* What a store of count blocks of n floats keeps resident, from the
 * shapes alone (msr_params_resident of such a store: for the planner). */
size_t msr_params_resident_of(size_t n, size_t count);

#endif
