/* libmsrun's checkpoints: each rank saves its own state atomically; a step
 * counts only once every rank's state for it is on disk; after a restart
 * every rank agrees on the latest complete step and loads its own state.
 *
 * On disk, under the directory given (shared by all ranks, or one per node):
 *   step-<N>/rank-<R>.bin     a rank's state: a header (magic, step, rank,
 *                             world size, generation, length, CRC-32) and
 *                             the bytes; written to a temporary file,
 *                             fsync'd and renamed
 *   step-<N>/rank-<R>.commit  written by rank R once every rank's state of
 *                             step N is durable
 *   step-<N>/MANIFEST         written by rank 0 after the same point: step,
 *                             world size, generation, every rank's length and
 *                             CRC, as JSON (for people and tools)
 * msr_ckpt_latest and msr_ckpt_load resume the same world size: they only
 * take a step this world size saved (msr_ckpt_load refuses another's with
 * MSR_ERR_CORRUPT). Resuming in another world size is explicit:
 * msr_ckpt_latest_any and msr_ckpt_load_rank read what any world saved, and
 * the program reshards it.
 * Folders are created 0700 and files 0600 (MSR_CKPT_MODE=0640 in the
 * environment makes files 0640 and folders 0750, to share with a group); files are
 * never opened through a symbolic link, and a step folder that is a link or
 * another user's is refused. Temporary files a killed writer left behind
 * are removed by the rank that wrote them, when it next saves into that
 * step or looks for the latest. */
#ifndef MSRUN_CHECKPOINT_H
#define MSRUN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "msrun/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The bytes of a rank file's header (step-<N>/rank-<R>.bin): the state
 * saved starts at this offset and the file holds exactly this many bytes
 * more than the state. The header, integers little-endian: "MSRCKPT1",
 * u32 version (1), u32 rank, u32 world size, i32 generation, i64 step,
 * u64 state length, u32 CRC-32 of the state (zlib's), zeros to the end.
 * For tools that read a state without libmsrun (an offset into the file);
 * never changes within version 1. */
#define MSR_CKPT_HEADER_LEN 48

/* Saves len bytes as this rank's state of step (>= 0) in dir (created if
 * missing). Every rank of the job must call it for the same step: it waits
 * for all of them (a store allgather), then marks the step complete. A
 * rank whose write fails (its file, memory) still joins that agreement
 * with its failure as its verdict: it returns its own error, every other
 * rank at once an error naming it ("checkpoint: rank 1 could not write
 * step 6 under DIR (no space left on device; its log says why)", the
 * failed rank's status), and the step is not committed (each rank removes
 * its file of it; the step before stays the latest). Keeps
 * the `keep` latest complete steps, this rank's and those another world
 * size wrote before a restart, and removes older ones (keep <= 0 keeps
 * all).
 * Errors: MSR_ERR_IO (with the file and errno in msr_last_error()),
 * MSR_ERR_PERMISSION (the step folder is a symbolic link or not this
 * user's), MSR_ERR_INVALID_ARG, and the store's errors. */
MSR_API msr_status_t msr_ckpt_save(msr_ctx_t *ctx, const char *dir, int64_t step, const void *data,
                                   size_t len, int keep);

/* A rank's state of a step written in parts, in order, for a state that
 * is not held whole in memory: msr_ckpt_save's file, bytes, commit and
 * pruning (msr_ckpt_save is open, one write, commit). What it adds to the
 * caller's memory is the writer itself: the parts are written from where
 * they are, and the file's page cache is written back and dropped behind
 * the writes, at most 16 MiB of it kept. The state's first head_len bytes
 * (a head that depends on the bytes after it, such as a table of their
 * CRCs) are given last, to msr_ckpt_writer_commit. One writer is used by
 * one thread at a time. */
typedef struct msr_ckpt_writer msr_ckpt_writer_t;

/* Opens this rank's state of step (>= 0) under dir for writing: the step
 * folder made and checked and the temporary file created as msr_ckpt_save
 * does. Does not communicate. Errors: MSR_ERR_IO, MSR_ERR_PERMISSION,
 * MSR_ERR_INVALID_ARG, MSR_ERR_NO_MEMORY; *writer_p untouched on
 * failure. */
MSR_API msr_status_t msr_ckpt_writer_open(msr_ctx_t *ctx, const char *dir, int64_t step,
                                          size_t head_len, msr_ckpt_writer_t **writer_p);

/* Appends len bytes of the state after its head (and the parts before),
 * and *crc_p (NULL: not wanted) gets their CRC-32 (msr_crc32(0, data,
 * len), computed in the same pass as the state's). Errors: MSR_ERR_IO
 * (the file and errno in msr_last_error()), MSR_ERR_INVALID_ARG; after
 * a failure every write and the commit fail. */
MSR_API msr_status_t msr_ckpt_writer_write(msr_ckpt_writer_t *writer, const void *data, size_t len,
                                           uint32_t *crc_p);

/* Writes head (head_len bytes as opened; NULL when 0) and the file's
 * header, makes the file durable under its name, then as msr_ckpt_save:
 * waits for every rank of the job (a store allgather), marks the step
 * complete and prunes to `keep`. Frees writer whatever the outcome; on a
 * failure before the wait (a write failed before, MSR_ERR_IO; no head;
 * the file's sync or rename) the temporary file is removed and the rank
 * joins the wait with its failure as its verdict, as in msr_ckpt_save.
 * Errors: msr_ckpt_save's. */
MSR_API msr_status_t msr_ckpt_writer_commit(msr_ckpt_writer_t *writer, const void *head, int keep);

/* Drops a state being written: the temporary file removed, writer freed;
 * NULL does nothing. Does not communicate: the other ranks' commits wait
 * for this rank's as for a rank that never saved (msr_ckpt_writer_fail
 * tells them instead). */
MSR_API void msr_ckpt_writer_abort(msr_ckpt_writer_t *writer);

/* For a rank that fails while it saves step, in its own code (out of
 * memory for what it writes) or the writer's, in place of the commit:
 * joins the save's agreement with its failure as its verdict, so that
 * every other rank's save of step fails at once naming this rank instead
 * of waiting for it until the store's deadline. msr_ckpt_writer_fail
 * drops writer (its file removed, writer freed; the verdict is the
 * writer's own failure when a write failed, else st);
 * msr_ckpt_save_fail is for a rank with no writer (msr_ckpt_writer_open
 * failed, or it never got to open one). Both return st (not MSR_OK),
 * msr_last_error() as it was; MSR_ERR_INVALID_ARG without a writer or
 * job, or with st MSR_OK. */
MSR_API msr_status_t msr_ckpt_writer_fail(msr_ckpt_writer_t *writer, msr_status_t st);
MSR_API msr_status_t msr_ckpt_save_fail(msr_ctx_t *ctx, const char *dir, int64_t step,
                                        msr_status_t st);

/* The latest step complete and intact for every rank of the job in dir,
 * agreed by all ranks (store allgathers: every rank must call it), in
 * *step_p; -1 when there is none. Every rank reads its state of the newest
 * complete step back (header, length, CRC); when one rank's does not check
 * out, all ranks fall back to the next older complete step, and the log
 * says which step was refused, on which rank and why. */
MSR_API msr_status_t msr_ckpt_latest(msr_ctx_t *ctx, const char *dir, int64_t *step_p);

/* Says where a state file cut short was cut, for msr_ckpt_latest_explain:
 * fd is the file, open for reading (size bytes, fewer than its header
 * gives; the callee must not close it), `what` its name under the
 * checkpoint's directory ("step-<N>/rank-<R>.bin"). Writes a sentence
 * into out (len bytes, NUL-terminated) and returns 1, or returns 0 when
 * it has nothing to say (out then unused). Called on the thread that
 * called msr_ckpt_latest_explain. */
typedef int (*msr_ckpt_cut_fn)(void *arg, int fd, uint64_t size, const char *what, char *out,
                               size_t len);

/* msr_ckpt_latest, and when this rank's state of a step is cut short
 * (the file shorter than its header gives), the reason logged for the
 * step's refusal goes on with what cut_fn(arg, ...) says about the file:
 * a program that knows its state's layout names the part the cut falls
 * in (train_gpt: the tensor, msr_tckpt_explain_cut). cut_fn NULL: as
 * msr_ckpt_latest. Same errors. */
MSR_API msr_status_t msr_ckpt_latest_explain(msr_ctx_t *ctx, const char *dir,
                                             msr_ckpt_cut_fn cut_fn, void *arg, int64_t *step_p);

/* Loads this rank's state of step: *data_p (free with free(3)) and *len_p.
 * MSR_ERR_NOT_FOUND when absent or incomplete, MSR_ERR_CORRUPT when its
 * header or CRC does not check out or it was written by another world
 * size. Does not communicate. */
MSR_API msr_status_t msr_ckpt_load(msr_ctx_t *ctx, const char *dir, int64_t step, void **data_p,
                                   size_t *len_p);

/* For resuming in another world size (an elastic job re-formed, or
 * resharding by the program): the newest step whose MANIFEST says every rank
 * of the world that saved it committed, decided by rank 0 and agreed by all
 * (every rank must call it). *step_p is -1 when there is none; *world_p gets
 * the world size that saved it. Rank 0 must see dir (a shared directory, or
 * node 0's). */
MSR_API msr_status_t msr_ckpt_latest_any(msr_ctx_t *ctx, const char *dir, int64_t *step_p,
                                         int *world_p);

/* msr_ckpt_latest_any among the steps older than `before`: the newest
 * complete step below it (any world size), for a program that checks a
 * step's states itself and passes over a damaged one. */
MSR_API msr_status_t msr_ckpt_latest_any_before(msr_ctx_t *ctx, const char *dir, int64_t before,
                                                int64_t *step_p, int *world_p);

/* Loads the state that rank `rank` of the saving world wrote at step,
 * whatever the world size now (rank 0's, for state every rank holds alike).
 * Checks the header and the CRC like msr_ckpt_load. Does not communicate. */
MSR_API msr_status_t msr_ckpt_load_rank(msr_ctx_t *ctx, const char *dir, int64_t step, int rank,
                                        void **data_p, size_t *len_p);

/* Reads len bytes at offset of the state rank `rank` of the saving world
 * wrote at step into buf, without reading the rest: for a program that
 * needs only part of a state (a resume in another layout reads only the
 * pieces it needs). Checks the file's header (step, rank) and length, not
 * the CRC of the whole state, which covers bytes it does not read: the
 * caller checks what it reads (train_gpt: a CRC per piece). *total_p
 * (NULL: not wanted) gets the state's length. Errors: MSR_ERR_NOT_FOUND
 * (no such file), MSR_ERR_CORRUPT (a bad header, a short file, or bytes
 * past the state's end asked for; the file in msr_last_error()),
 * MSR_ERR_IO, MSR_ERR_INVALID_ARG. Does not communicate; thread-safe; ctx
 * may be NULL (a tool reading a checkpoint outside a job). */
MSR_API msr_status_t msr_ckpt_read_rank(msr_ctx_t *ctx, const char *dir, int64_t step, int rank,
                                        uint64_t offset, void *buf, size_t len, uint64_t *total_p);

/* A rank's state of a step held open for reads in parts: the header is
 * read and checked once, at open, and every read after it reuses the file
 * (a load reading a piece at a time opens it once, not once a piece).
 * Opened with check, while the reads go in order from the state's start
 * (each starting at or before the end of the ones before), the reader
 * continues the CRC of the whole state over them, and the read that
 * reaches the state's end checks it: MSR_ERR_CORRUPT, "checkpoint: <file>
 * does not match its CRC", when it does not match. A read that skips
 * bytes ends that check; without check, or then, the caller checks what
 * it reads, as with msr_ckpt_read_rank. One reader is used by
 * one thread at a time; readers of the same file are independent. */
typedef struct msr_ckpt_reader msr_ckpt_reader_t;

/* Opens rank `rank`'s state of step under dir (any world size), with the
 * whole state's CRC checked as above when check is not 0: *reader_p
 * (close it with msr_ckpt_reader_close) and *total_p (NULL: not wanted),
 * the state's length. Errors as msr_ckpt_read_rank's, and
 * MSR_ERR_NO_MEMORY; *reader_p untouched on failure. ctx may be NULL. */
MSR_API msr_status_t msr_ckpt_reader_open(msr_ctx_t *ctx, const char *dir, int64_t step, int rank,
                                          int check, msr_ckpt_reader_t **reader_p,
                                          uint64_t *total_p);

/* Points reader at rank `rank`'s state of step under dir, as
 * msr_ckpt_reader_open would open it (check and *total_p alike), keeping
 * its staging buffers and read-ahead thread: a load that reads several
 * ranks' states one after the other (a resume in another layout) sets
 * them up once, not once a file. A read in flight of the file before is
 * waited for and dropped. Errors as msr_ckpt_reader_open's; on failure
 * the reader still reads the file it had. */
MSR_API msr_status_t msr_ckpt_reader_reopen(msr_ckpt_reader_t *reader, const char *dir,
                                            int64_t step, int rank, int check, uint64_t *total_p);

/* Reads len bytes at offset of the state into buf: MSR_ERR_CORRUPT for
 * bytes past the state's end, a short file or a whole state read in order
 * that does not match its CRC; MSR_ERR_IO. */
MSR_API msr_status_t msr_ckpt_reader_read(msr_ckpt_reader_t *reader, uint64_t offset, void *buf,
                                          size_t len);

/* msr_ckpt_reader_read, and *crc_p (NULL: not wanted) the CRC-32 of the
 * bytes read (IEEE 802.3, zlib's crc32(0, buf, len)), written only on
 * success. Computed once as the bytes arrive; the reader's own check of
 * the whole state continues from it (msr_crc32_combine), so a caller that
 * checks its pieces with it and the whole-state check pass over each byte
 * once between them. */
MSR_API msr_status_t msr_ckpt_reader_read_crc(msr_ckpt_reader_t *reader, uint64_t offset, void *buf,
                                              size_t len, uint32_t *crc_p);

/* Whether the reads so far covered the whole state in order and it
 * matched its CRC: 1 yes, 0 not (yet). */
MSR_API int msr_ckpt_reader_checked(const msr_ckpt_reader_t *reader);

/* The bytes the reader has read from its files since it opened (its
 * reopens included): past the page cache, whole 4 KiB blocks and the
 * stretches read ahead, used or dropped; through it, the bytes asked. The
 * header each open checks is not counted. 0 for NULL. How much of a
 * checkpoint a load made the disk read; thread-safe. */
MSR_API uint64_t msr_ckpt_reader_bytes_read(const msr_ckpt_reader_t *reader);

/* Closes the file and frees the reader; NULL does nothing. */
MSR_API void msr_ckpt_reader_close(msr_ckpt_reader_t *reader);

/* As msr_ckpt_latest, without reading the states back: the newest step
 * committed on every rank whose file's header fits (step, rank and world
 * size), agreed by all ranks (every rank must call it). For a
 * program whose load is the check: msr_ckpt_load, or a reader that reads
 * the whole state in order, checks the CRC as it reads, so the state is
 * read once, not twice. When that load fails with MSR_ERR_CORRUPT the
 * program falls back to msr_ckpt_latest, which refuses the damaged step
 * (the log names the file) and finds the newest intact one. */
MSR_API msr_status_t msr_ckpt_latest_unchecked(msr_ctx_t *ctx, const char *dir, int64_t *step_p);

#ifdef __cplusplus
}
#endif

#endif
