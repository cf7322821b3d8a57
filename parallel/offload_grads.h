/* Gradient offload's store (docs/model.md "Offload"): a ZeRO-2/3 rank's
 * gradient shard, `count` floats of its shard space, in a file of its own
 * instead of memory. The reduce-scatter's results are put into it as each
 * bucket finishes (set by a step's first micro-batch, added by the next
 * ones) and read back in chunks by the optimizer's step, so what it keeps
 * in memory is three chunks (the one being filled or read, the one left
 * before it being written behind, the next one being read ahead) and a
 * CRC per chunk, whatever the shard's size.
 *
 * Chunk k holds elements [k E, (k + 1) E), E = chunk bytes / 4, at byte
 * k * chunk bytes. A chunk never written reads as zeros. Each chunk's
 * CRC-32 is kept when it is written and checked when it is read back: a
 * file changed underneath, a short read, a full disk or an I/O error is an
 * error naming the file and the chunk, never a wrong gradient; after one
 * the store refuses every call with that first error again (its status
 * and its text), so an error met where it cannot be returned (a bucket
 * finished inside a hook) is the one the step's end reports. A write
 * behind that fails is met by the call that waits for it: the next one
 * that leaves a changed chunk, reads the chunk it wrote, or flushes.
 *
 * The I/O runs on the engine cfg->io names (offload.h: io_uring or a
 * thread pool): a chunk left changed is written behind while the caller
 * goes on (one write in flight), and a pass that reads (a get, a put that
 * adds) reads the next chunk its way ahead (one read in flight); a read
 * not started ahead is a pread on the caller's thread. The file is
 * msrun-grads-rank<rank>-<pid>.bin under cfg->dir, created 0600 with
 * O_EXCL (O_DIRECT where the filesystem takes it) and removed by
 * msr_grads_destroy unless cfg->keep.
 *
 * Not thread-safe: one thread per store (the engine's own threads do the
 * I/O). */
#ifndef MSR_PARALLEL_OFFLOAD_GRADS_H
#define MSR_PARALLEL_OFFLOAD_GRADS_H

#include <stddef.h>
#include <stdint.h>

#include "model/adamw.h"
#include "msrun/base.h"
#include "parallel/offload.h"

typedef struct msr_grads msr_grads_t;

/* The chunk size of a store of count floats whose config asks for chunk
 * bytes (0: MSR_OFFLOAD_CHUNK_DEFAULT): at most the bytes of count floats
 * rounded up to MSR_OFFLOAD_ALIGN, at least MSR_OFFLOAD_CHUNK_MIN. */
size_t msr_grads_chunk_of(size_t chunk_bytes, size_t count);

/* What a store did, from its creation. */
typedef struct msr_grads_stats {
    uint64_t writes; /* chunks written (behind, or by a flush) */
    uint64_t reads;  /* chunks read back from the file ... */
    uint64_t ahead;  /* ... of them, read ahead before they were wanted */
    uint64_t misses; /* ... and read when wanted (on the caller's thread) */
    uint64_t kept;   /* chunks wanted as, or right after, they were written: taken
                      * back from the buffer written, not read */
} msr_grads_stats_t;

/* Creates the store for count floats (cfg: MSR_OFFLOAD_DISK, checked as
 * msr_offload_config_check does). Errors: MSR_ERR_INVALID_ARG, MSR_ERR_IO
 * (the file, named), MSR_ERR_NO_MEMORY, MSR_ERR_UNSUPPORTED (io_uring
 * refused when asked for by name), as the engines'. On failure nothing
 * is left behind. */
msr_status_t msr_grads_create(const msr_offload_config_t *cfg, size_t count, msr_grads_t **g_p);
/* Closes and removes the file unless cfg->keep. NULL: nothing. */
void msr_grads_destroy(msr_grads_t *g);

/* Elements [off, off + n) set to (add 0) or added (add 1) src's n floats,
 * through the chunk in memory (a chunk left for another one is written).
 * Errors: MSR_ERR_INVALID_ARG (past count), MSR_ERR_CORRUPT, MSR_ERR_IO
 * (each naming the file and the chunk), the first error again after one. */
msr_status_t msr_grads_put(msr_grads_t *g, size_t off, size_t n, const float *src, int add);
/* msr_grads_put that also adds the elements' values as they are left
 * (set, or the sums) into lanes, as msr_sumsq_add(lanes, x, n, 0) over
 * them would (model/adamw.h): a step's last micro-batch gives the
 * gradient norm's sum of squares as it puts, with no pass that reads
 * the shard back for it. */
msr_status_t msr_grads_put_sumsq(msr_grads_t *g, size_t off, size_t n, const float *src, int add,
                                 double lanes[MSR_SUMSQ_LANES]);
/* Elements [off, off + n) into dst. Errors: as msr_grads_put. */
msr_status_t msr_grads_get(msr_grads_t *g, size_t off, size_t n, float *dst);
/* The next call (a put or a get) is over [off, off + n) and reads (a get,
 * an add) or not (a set): this call's last chunk does not read ahead the
 * way its chunks went but, as it ends, the first chunk that call will
 * read (a pass that jumps, as data parallel's buckets do from the top of
 * one range to the top of the one below, or to the next micro-batch's
 * first). Told once: it holds for the next put or get alone; a call told
 * wrong moves nothing but reads. */
void msr_grads_next(msr_grads_t *g, size_t off, size_t n, int reads);
/* Every element will be set (put with add 0) before it is read or added
 * to (a step's first micro-batch sets the whole shard): a set into a chunk
 * not used since does not read the chunk's old elements, and those it
 * does not set read as zeros until they are. */
void msr_grads_fresh(msr_grads_t *g);
/* Waits for the write behind and writes the chunk in use if it changed
 * (it stays in use): the file then holds every chunk. Errors: as
 * msr_grads_put. */
msr_status_t msr_grads_flush(msr_grads_t *g);

/* The file's path, the chunk's bytes, the bytes the store keeps resident
 * (its three chunk buffers and CRC table), the engine (as
 * msr_offload_engine) and the store's counters. */
const char *msr_grads_path(const msr_grads_t *g);
size_t msr_grads_chunk_bytes(const msr_grads_t *g);
size_t msr_grads_resident(const msr_grads_t *g);
const char *msr_grads_engine(const msr_grads_t *g);
const msr_grads_stats_t *msr_grads_stats(const msr_grads_t *g);

#endif
