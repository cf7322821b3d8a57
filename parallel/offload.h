/* The optimizer's moments offloaded to a file (docs/model.md "Offload").
 *
 * A store holds AdamW's m and v for `count` elements of a rank's shard
 * space (model/adamw.h) in one file of its own, cut into chunks: chunk k
 * holds elements [k E, (k + 1) E), E = chunk_bytes / 8, as m (E floats)
 * then v (E floats), at byte k * chunk_bytes. A step streams the chunks
 * through a few buffers: the chunk ahead is read while the current one is
 * updated and the one behind is written, so the memory the optimizer keeps
 * is MSR_OFFLOAD_SLOTS chunks whatever the model's size.
 *
 * Each chunk's CRC-32 (base/crc32.h) is kept in memory when it is written
 * and checked when it is read back: a file changed underneath, a short
 * read, a full disk or an I/O error is an error naming the file and the
 * chunk, never a wrong moment.
 *
 * The file is created 0600 with O_EXCL and removed by msr_offload_destroy
 * unless cfg->keep (a process killed by a signal leaves it behind).
 *
 * Not thread-safe: one thread per store (the engines' own threads do the
 * I/O). */
#ifndef MSR_PARALLEL_OFFLOAD_H
#define MSR_PARALLEL_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

/* Where the moments live. */
typedef enum msr_offload_mode {
    MSR_OFFLOAD_NONE = 0, /* in the optimizer's arrays (the default) */
    MSR_OFFLOAD_HOST,     /* in host memory: on a CPU rank the same as NONE */
    MSR_OFFLOAD_DISK,     /* in a file under dir */
} msr_offload_mode_t;

/* How the chunks move. */
typedef enum msr_offload_io {
    MSR_OFFLOAD_IO_DEFAULT = 0, /* uring where built and allowed, else threads */
    MSR_OFFLOAD_IO_THREADS,     /* a pool of threads calling pread and pwrite */
    MSR_OFFLOAD_IO_URING,       /* io_uring (builds with liburing only) */
} msr_offload_io_t;

/* The default is io_uring, the faster where measured (docs/performance.md
 * "Optimizer offload"); a build without liburing, or a kernel that refuses
 * io_uring (seccomp, io_uring_disabled), gets the thread pool, with a warning
 * on the log in the second case. */

/* Chunk sizes: multiples of MSR_OFFLOAD_ALIGN (O_DIRECT's block) within
 * [MSR_OFFLOAD_CHUNK_MIN, MSR_OFFLOAD_CHUNK_MAX]. A store whose moments are
 * fewer than MSR_OFFLOAD_SLOTS chunks' uses smaller chunks: a
 * MSR_OFFLOAD_SLOTS-th of its moments' bytes rounded up to
 * MSR_OFFLOAD_ALIGN, so its buffers never hold much more than the
 * moments. */
#define MSR_OFFLOAD_ALIGN         4096u
#define MSR_OFFLOAD_CHUNK_MIN     4096u
#define MSR_OFFLOAD_CHUNK_MAX     (1u << 30)
#define MSR_OFFLOAD_CHUNK_DEFAULT (4u << 20)
/* Buffers of a store: 2 chunks read ahead, 1 being updated, 1 written. */
#define MSR_OFFLOAD_SLOTS         4
#define MSR_OFFLOAD_AHEAD         2

typedef struct msr_offload_config {
    msr_offload_mode_t mode;
    const char *dir;    /* MSR_OFFLOAD_DISK: the directory (copied) */
    size_t chunk_bytes; /* 0: MSR_OFFLOAD_CHUNK_DEFAULT */
    msr_offload_io_t io;
    int keep; /* leave the file when the store is destroyed */
    int rank; /* names the file: one per rank */
} msr_offload_config_t;

typedef struct msr_offload msr_offload_t;

/* Checks cfg's chunk size, engine (uring in a build without liburing) and,
 * for MSR_OFFLOAD_DISK, that dir is given. Returns MSR_OK or
 * MSR_ERR_INVALID_ARG with the reason in the error text (base/err.h). */
msr_status_t msr_offload_config_check(const msr_offload_config_t *cfg);

/* Creates the file <dir>/msrun-offload-rank<rank>-<pid>.bin (0600, O_EXCL,
 * O_DIRECT where the filesystem takes it, else through the page cache with
 * a warning on the log) holding zero moments for count elements (count may be
 * 0: an empty store). Every chunk is written once here, so a disk too small
 * fails now. Errors: MSR_ERR_INVALID_ARG (cfg), MSR_ERR_IO (the file:
 * create, write, a full disk; the path and the system's reason in the error
 * text), MSR_ERR_NO_MEMORY, MSR_ERR_UNSUPPORTED (io_uring not available on
 * this kernel). On failure nothing is left behind. */
msr_status_t msr_offload_create(const msr_offload_config_t *cfg, size_t count,
                                msr_offload_t **off_p);
/* The same with the file named <dir>/msrun-<kind>-rank<rank>-<pid>.bin: a
 * second store of the same rank (the experts' moments, kind "experts",
 * parallel/train_experts.c) beside the "offload" one. */
msr_status_t msr_offload_create_as(const msr_offload_config_t *cfg, const char *kind, size_t count,
                                   msr_offload_t **off_p);

/* Closes the store and removes its file unless cfg.keep. Waits for any
 * I/O in flight. NULL: nothing. */
void msr_offload_destroy(msr_offload_t *off);

/* What a step does to one chunk: elements [off, off + n) of the shard space,
 * their moments in m[0..n) and v[0..n), updated in place. A status other
 * than MSR_OK stops the step. */
typedef msr_status_t (*msr_offload_chunk_fn)(void *arg, size_t off, size_t n, float *m, float *v);

/* One pass over every chunk in order: read (checked against its CRC), fn,
 * write back, with MSR_OFFLOAD_AHEAD reads ahead and the writes behind in
 * flight while fn runs. Errors: fn's; MSR_ERR_CORRUPT (a chunk whose CRC
 * differs: changed underneath), MSR_ERR_IO (a short read or write, a full
 * disk, an I/O error), each naming the file and the chunk. After an error
 * the store refuses every further call (MSR_ERR_STATE): its file may hold
 * a half-done step. */
msr_status_t msr_offload_step(msr_offload_t *off, msr_offload_chunk_fn fn, void *arg);

/* The whole moments into m and v (count floats each, the caller's), or
 * from them into the file: for checkpoints (parallel/dp_offload.c). Errors
 * as msr_offload_step. */
msr_status_t msr_offload_read_all(msr_offload_t *off, float *m, float *v);
msr_status_t msr_offload_write_all(msr_offload_t *off, const float *m, const float *v);

/* Elements [at, at + n) of the moments, for a checkpoint that streams
 * them (parallel/dp_pieces.c, parallel/train_ckpt.c): get copies them into
 * m and v (n floats each, the caller's); put writes m and v over them, a
 * chunk at a time (each chunk read, checked, changed and written back, so
 * the store's other elements keep their values). Only the store's own
 * buffers are used: the memory is one chunk whatever n is. Errors:
 * MSR_ERR_INVALID_ARG (the range past count), else as msr_offload_step
 * (after which the store refuses further calls). */
msr_status_t msr_offload_get(msr_offload_t *off, size_t at, size_t n, float *m, float *v);
msr_status_t msr_offload_put(msr_offload_t *off, size_t at, size_t n, const float *m,
                             const float *v);

/* The file's path, the chunk size in use, the bytes of the store's
 * buffers (what it keeps resident), and the engine ("threads" or "uring",
 * with "+direct" when O_DIRECT is on). */
const char *msr_offload_path(const msr_offload_t *off);
size_t msr_offload_chunk_bytes(const msr_offload_t *off);
size_t msr_offload_resident(const msr_offload_t *off);
const char *msr_offload_engine(const msr_offload_t *off);

/* Parses "threads" or "uring" (-1 for anything else). */
int msr_offload_io_parse(const char *name);

#endif
