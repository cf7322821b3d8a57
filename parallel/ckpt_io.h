/* The file operations under checkpoints, kept apart from the format
 * (ckpt.c) so that they can move behind libmsrun's checkpoint API (or to
 * another store) without touching the format. */
#ifndef MSR_PARALLEL_CKPT_IO_H
#define MSR_PARALLEL_CKPT_IO_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

/* One piece of a file: len bytes at data. */
typedef struct msr_tckpt_piece {
    const void *data;
    size_t len;
} msr_tckpt_piece_t;

/* Writes the pieces, in order, as the file at path, atomically: into a
 * temporary file in the same directory, fsync, rename over path, fsync the
 * directory. A reader sees the old file or the whole new one, never a part;
 * after a crash at most a temporary file (".tmp." in its name) is left.
 * Errors: msr_status_from_errno of the failed call (logged with the path);
 * the temporary file is removed and path is left as it was. */
msr_status_t msr_tckpt_io_write(const char *path, const msr_tckpt_piece_t *pieces, size_t n);

/* Reads the whole file at path into a new buffer *data_p (free with
 * msr_free), its length in *len_p. Errors: MSR_ERR_NOT_FOUND (not logged:
 * callers probe), others logged with the path. */
msr_status_t msr_tckpt_io_read(const char *path, void **data_p, size_t *len_p);

/* Creates dir and its missing parents (mode 0777 & ~umask). An existing
 * directory is fine. */
msr_status_t msr_tckpt_io_mkdirs(const char *dir);

/* The size of the file at path (MSR_ERR_NOT_FOUND if there is none). */
msr_status_t msr_tckpt_io_size(const char *path, uint64_t *size_p);

/* Calls fn(arg, name) for every entry of dir except "." and "..", in no
 * particular order. Errors: those of opendir (MSR_ERR_NOT_FOUND when dir
 * does not exist, not logged). */
msr_status_t msr_tckpt_io_list(const char *dir, void (*fn)(void *arg, const char *name), void *arg);

#endif
