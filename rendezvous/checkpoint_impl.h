/* What checkpoint.c (the writer) and checkpoint_read.c (the readers) share:
 * a rank file's header, the step folders' names and the helpers each part
 * calls in the other. Private to them (and checkpoint_reader.c). */
#ifndef MSR_RENDEZVOUS_CHECKPOINT_IMPL_H
#define MSR_RENDEZVOUS_CHECKPOINT_IMPL_H

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "base/err.h"
#include "base/log.h"
#include "msrun/checkpoint.h"

#define CKPT_MAGIC "MSRCKPT1"

typedef struct ckpt_header {
    uint32_t rank, world;
    int32_t generation;
    int64_t step;
    uint64_t len;
    uint32_t crc;
} ckpt_header_t;

/* A reader reads past the page cache (O_DIRECT) in whole blocks of
 * CKPT_DIRECT_ALIGN bytes at aligned file offsets, up to
 * CKPT_DIRECT_STAGE bytes at a time, into a buffer of that size. */
#define CKPT_DIRECT_ALIGN ((size_t)4096)
#define CKPT_DIRECT_STAGE ((size_t)4 << 20)
/* A staging buffer's alignment: a huge page's (x86-64's 2 MiB), so that
 * its pages can be huge ones (checkpoint_reader.c). */
#define CKPT_STAGE_ALIGN  ((size_t)2 << 20)

/* Whether reader r reads past the page cache (for tests). */
int msr_ckpt_reader_direct(const msr_ckpt_reader_t *r);
/* Reader r's staging buffer, NULL when it reads through the cache (for
 * tests). */
const void *msr_ckpt_reader_stage(const msr_ckpt_reader_t *r);

/* checkpoint_read.c's, for the reader (checkpoint_reader.c); each says
 * what it does where it is defined. */
msr_status_t ckpt_open_state(const char *dir, int64_t step, int rank, int world, char *path,
                             size_t path_len, int *fd_p, ckpt_header_t *h_p);
msr_status_t ckpt_read_chunks(int fd, const char *path, off_t at, void *data, size_t len, off_t end,
                              int stream, uint32_t *crc_p);

static inline msr_status_t io_error(const char *what, const char *path)
{
    int e = errno;
    msr_err_set("checkpoint: %s %s: %s", what, path, strerror(e));
    MSR_DEBUG("%s", msr_last_error());
    errno = e; /* for a caller that keeps it (the save's verdict) */
    return MSR_ERR_IO;
}

static inline void step_dir(const char *dir, int64_t step, char *out, size_t len)
{
    snprintf(out, len, "%s/step-%" PRId64, dir, step);
}

/* checkpoint.c's, for the readers */
/* Every rank's `len` bytes, in rank order, in *all_p (msr_free it); a
 * rank out of memory for them takes part with none (checkpoint.c). */
msr_status_t msr_ckpt_gather_all(msr_ctx_t *ctx, const void *mine, size_t len, void **all_p);

/* checkpoint_steps.c's, for the writer and the readers */
/* Removes this rank's files of committed steps older than the keep newest
 * (keep <= 0: none), and rank 0 whole older steps no rank of this world
 * has. */
void msr_ckpt_prune(msr_ctx_t *ctx, const char *dir, int keep);
/* Removes the temporary files this rank's writes left in step folder sd. */
void msr_ckpt_remove_leftovers(msr_ctx_t *ctx, const char *sd);

/* checkpoint_read.c's, for the writer */
/* Whether this rank's state of step is committed and its header fits: 1
 * yes, 0 no, -1 when its file is there but not a regular file. */
int msr_ckpt_have_step(msr_ctx_t *ctx, const char *dir, int64_t step);
/* Steps found in dir (step-N folders), in *steps_p (malloc'd). */
size_t msr_ckpt_list_steps(const char *dir, int64_t **steps_p);
/* The world size a step's MANIFEST records, -1 when the step has none. */
int msr_ckpt_manifest_world(const char *dir, int64_t step);

#endif
