/* The job token: generated from the kernel's random source and read from a
 * file only its owner can read (the option parser, base/optparse.h, keeps
 * one given on the command line out of the process list). */
#ifndef MSR_MSRUN_TOKEN_H
#define MSR_MSRUN_TOKEN_H

#include <stddef.h>

#include "msrun/base.h"

/* Characters of a generated token: 32 random bytes in hex. */
#define MSR_TOKEN_GEN_CHARS 64
/* The longest token accepted (from a file, the command line or the
 * environment), without its terminating NUL. */
#define MSR_TOKEN_MAX       255

/* Writes a fresh token of MSR_TOKEN_GEN_CHARS hex characters and a NUL to
 * out (len > MSR_TOKEN_GEN_CHARS) from getrandom(2). Fails with
 * MSR_ERR_SYSTEM (msr_err_msg() says why) rather than fall back to anything guessable;
 * out is written only on success. */
msr_status_t msr_token_generate(char *out, size_t len);

/* Whether token is acceptable: 1 to MSR_TOKEN_MAX printable ASCII
 * characters (it travels as a gRPC metadata value). */
int msr_token_valid(const char *token);

/* Reads the token in the file at path: a regular file (a symbolic link is
 * refused), owned by this user, that neither group nor others may read or
 * write, holding one valid token (a trailing newline is dropped). The
 * path "-" is standard input's first line, read a byte at a time (nothing
 * after its newline is consumed): how the launcher of --hostfile passes
 * the token over ssh. On failure returns MSR_ERR_PERMISSION (ownership or
 * mode: msr_err_msg() says which and how to fix it), MSR_ERR_INVALID_ARG
 * (the content) or MSR_ERR_IO (cannot open or read it); out (len >
 * MSR_TOKEN_MAX) is written only on success. */
msr_status_t msr_token_read_file(const char *path, char *out, size_t len);

/* Creates path (it must not exist; a symbolic link there is not followed)
 * with mode 0600 holding token and a newline. MSR_ERR_IO with msr_err_msg() on
 * failure, and no file is left behind. */
msr_status_t msr_token_write_file(const char *path, const char *token);

#endif
