/* Small helpers: strict number parsing, environment, file descriptors. */
#ifndef MSR_BASE_UTIL_H
#define MSR_BASE_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#include "msrun/base.h"

/* Parses a whole decimal integer in [min, max]; leading/trailing spaces and
 * junk are refused. Writes *out_p only on success. */
msr_status_t msr_parse_i64(const char *text, int64_t min, int64_t max, int64_t *out_p);
/* Parses a size in bytes: a whole decimal number with an optional suffix K,
 * M, G or T (any case; powers of 1024), in [min, max]. */
msr_status_t msr_parse_size(const char *text, int64_t min, int64_t max, int64_t *out_p);
/* Parses a boolean: 1/0, true/false, yes/no, on/off (any case). */
msr_status_t msr_parse_bool(const char *text, int *out_p);

/* An integer environment variable in [min, max], or def when unset or empty.
 * A set but invalid value is logged once and def is used. */
int64_t msr_env_i64(const char *name, int64_t def, int64_t min, int64_t max);

/* Writes all len bytes, retrying after EINTR and short writes. */
msr_status_t msr_write_all(int fd, const void *data, size_t len);
/* Reads exactly len bytes; MSR_ERR_IO at end of file before that. */
msr_status_t msr_read_full(int fd, void *data, size_t len);
msr_status_t msr_fd_set_nonblock(int fd, int on);
/* Opens path (relative to dirfd, or AT_FDCWD) for reading a file whose name
 * a user or another process controls, without blocking: O_RDONLY,
 * O_NONBLOCK and O_CLOEXEC plus the caller's flags (O_NOFOLLOW, ...); then
 * refuses anything but a regular file (a FIFO, a device, a directory, a
 * socket), whose open or read could block forever, and clears O_NONBLOCK.
 * On success *fd_p is the caller's to close. On failure sets the error text
 * ("<path> is not a regular file (a FIFO)", or "cannot open <path>: ...")
 * and errno (EINVAL for a file that is not regular, open's own otherwise),
 * and returns MSR_ERR_IO for a file that is not regular, the status of
 * open's errno otherwise. Thread-safe. */
msr_status_t msr_open_input_at(int dirfd, const char *path, int flags, int *fd_p);
msr_status_t msr_open_input(const char *path, int flags, int *fd_p);
/* The stdio counterpart: msr_open_input with fdopen(fd, "r"). NULL on
 * failure, with the error text and errno as msr_open_input sets them. */
FILE *msr_fopen_input(const char *path, int flags);
msr_status_t msr_fd_set_cloexec(int fd, int on);

/* The name of a signal ("SIGKILL"), or "signal N" written into buf. */
const char *msr_signal_name(int sig, char *buf, size_t len);

/* Fills buf with len random bytes from the kernel (getrandom), falling back
 * to time and pid mixing if that fails. */
void msr_random_bytes(void *buf, size_t len);

/* A "Key: N kB" line of /proc/self/status (VmHWM, RssAnon, ...) in KiB;
 * 0 where it is missing or unreadable. */
long msr_proc_status_kib(const char *key);

#endif
