/* The offload store's I/O engines (offload_threads.c, offload_uring.c):
 * an ops table over numbered slots. Private to parallel/. */
#ifndef MSR_PARALLEL_OFFLOAD_IMPL_H
#define MSR_PARALLEL_OFFLOAD_IMPL_H

#include <stddef.h>
#include <sys/types.h>

#include "msrun/base.h"
#include "parallel/offload.h"
#include "parallel/offload_acts.h"

typedef struct msr_offload_engine msr_offload_engine_t;

/* An engine moves whole buffers between memory and one file descriptor.
 * Slot s has at most one operation in flight; the store's thread submits
 * and waits, the engine may complete the work on threads of its own. */
typedef struct msr_offload_engine_ops {
    const char *name;
    /* An engine for fd with nslots slots. Errors: MSR_ERR_NO_MEMORY,
     * MSR_ERR_UNSUPPORTED (the kernel refuses it; the reason in the error
     * text), MSR_ERR_SYSTEM (a thread). */
    msr_status_t (*create)(int fd, int nslots, msr_offload_engine_t **eng_p);
    /* Starts reading (write 0) or writing (write 1) len bytes at file
     * offset at into or from buf on slot. Never fails: a failure is what
     * wait reports. */
    void (*submit)(msr_offload_engine_t *eng, int slot, int write, void *buf, size_t len, off_t at);
    /* Waits for slot's operation: *done_p the bytes moved, *err_p 0 or the
     * errno that stopped it (a short count with err 0: end of file). */
    void (*wait)(msr_offload_engine_t *eng, int slot, size_t *done_p, int *err_p);
    /* Waits for everything in flight, then frees. NULL: nothing. */
    void (*destroy)(msr_offload_engine_t *eng);
} msr_offload_engine_ops_t;

extern const msr_offload_engine_ops_t msr_offload_threads_ops;
#ifdef MSR_HAVE_LIBURING
extern const msr_offload_engine_ops_t msr_offload_uring_ops;
#endif

/* What every engine's structure begins with: its file and slot count. */
typedef struct msr_offload_engine_io {
    int fd, nslots;
} msr_offload_engine_io_t;

/* A zeroed engine of head bytes (a structure that begins with a
 * msr_offload_engine_io_t, filled in) followed by nslots slots of slot
 * bytes each; NULL with the error text set. */
void *msr_offload_engine_calloc(size_t head, int fd, int nslots, size_t slot);

/* Creates path O_EXCL 0600 (whatever the umask), with O_DIRECT when dir's
 * filesystem takes it (*direct_p 1), else through the page cache with a
 * warning. *fd_p is the descriptor or -1. Errors: MSR_ERR_IO naming path. */
msr_status_t msr_offload_open(const char *path, const char *dir, int *fd_p, int *direct_p);

/* The file of a store of kind ("offload", "acts") of rank in dir:
 * "DIR/msrun-KIND-rankRANK-PID.bin", msr_malloc'd; NULL when out of memory
 * (no error text set). */
char *msr_offload_file_path(const char *dir, const char *kind, int rank);

/* Closes a store's fd (nothing when -1) and, unless keep, removes its path
 * (a warning when it cannot). */
void msr_offload_file_close(int fd, const char *path, int keep);

/* The engine io asks for on fd (the default: io_uring where built, the
 * thread pool where the kernel refuses it, with a warning); name gets
 * "threads" or "uring", with "+direct" when direct. Errors: the engine's. */
msr_status_t msr_offload_engine_open(msr_offload_io_t io, int fd, int direct, int nslots,
                                     const msr_offload_engine_ops_t **ops_p,
                                     msr_offload_engine_t **eng_p, char name[24]);

/* The error of a transfer of `what` k of path (base/err.h's text): err's
 * reason, or a short count (done of want bytes) when err is 0. Returns
 * MSR_ERR_IO. */
msr_status_t msr_offload_io_error(const char *path, int write, const char *what, size_t k,
                                  size_t done, size_t want, int err);

/* pread or pwrite until len bytes moved, end of file or an error (EINTR
 * retried): the bytes moved, *err_p 0 or the errno. */
size_t msr_offload_rw(int fd, int write, void *buf, size_t len, off_t at, int *err_p);

/* msr_acts_create for another kind of item (offload_params.c): the file
 * is "DIR/msrun-KIND-rankRANK-PID.bin", `what` names an item in errors
 * (both borrowed: string constants), nbufs buffers (2..MSR_ACTS_BUFS). */
msr_status_t msr_acts_create_as(const msr_offload_config_t *cfg, const char *kind, const char *what,
                                int nbufs, size_t bytes, size_t count, msr_acts_t **acts_p);

#endif
