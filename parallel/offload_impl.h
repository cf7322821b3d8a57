/* The offload store's I/O engines (offload_threads.c, offload_uring.c):
 * an ops table over numbered slots. Private to parallel/. */
#ifndef MSR_PARALLEL_OFFLOAD_IMPL_H
#define MSR_PARALLEL_OFFLOAD_IMPL_H

#include <stddef.h>
#include <sys/types.h>

#include "msrun/base.h"

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

/* pread or pwrite until len bytes moved, end of file or an error (EINTR
 * retried): the bytes moved, *err_p 0 or the errno. */
size_t msr_offload_rw(int fd, int write, void *buf, size_t len, off_t at, int *err_p);

#endif
