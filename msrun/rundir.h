/* The runtime directory: each running msrun records its job there (job id,
 * coordinator, token, pid, node rank, start time), so that `msrun status`
 * finds the jobs of this machine without being told where they are. The
 * directory is $XDG_RUNTIME_DIR/msrun, or /tmp/msrun-<uid> without one: mode
 * 0700 and this user's (another user's, or one that group or others may
 * enter, is refused), each record a file of mode 0600 named <pid>.job,
 * written atomically and removed when its msrun ends. Errors travel through
 * base/err.h; nothing here logs them. */
#ifndef MSR_MSRUN_RUNDIR_H
#define MSR_MSRUN_RUNDIR_H

#include <limits.h>
#include <stddef.h>

#include "msrun/base.h"

/* One msrun's record. Strings must not hold a newline; NULL or "" for TLS
 * fields the job does not use. */
typedef struct msr_run_record {
    const char *job_id;
    const char *coordinator; /* host:port ([v6]:port) */
    const char *token;
    const char *tls_cert, *tls_key, *tls_ca, *tls_server_name;
    int pid;
    int node_rank;      /* as asked for: -1 when the coordinator assigns it */
    int dashboard_port; /* its --dashboard_port (for `msrun dashboard`); 0: none */
    double start_time;  /* seconds since the epoch */
    /* for `msrun status`: the program and its arguments, shortened
     * (msr_run_command_format); the dashboard's address ("http://H:P/", no
     * login code) where this msrun runs it; NULL or "" when none */
    const char *command, *dashboard;
    /* written from getuid() and its name, whatever they hold; read back as
     * recorded (has_uid 0: a record without one, from an older msrun) */
    unsigned uid;
    int has_uid;
    const char *user;
} msr_run_record_t;

/* The most bytes of a command a record keeps (its NUL included): longer
 * ones are cut, ending in "...". */
#define MSR_RUN_COMMAND_LEN 160

/* Writes argv (NULL-terminated) joined by spaces to buf (len bytes, at
 * least 4), a word holding a space or tab (or empty) in single quotes,
 * newlines and other control characters as '?', cut to fit with "..." at
 * its end. */
void msr_run_command_format(char *const *argv, char *buf, size_t len);

/* A record read back: rec's strings point into text, which it owns. */
typedef struct msr_run_entry {
    msr_run_record_t rec;
    char *text; /* the file's bytes, its lines cut at each '=' and newline */
    size_t text_len;
} msr_run_entry_t;

/* Writes the runtime directory's path to dir (len bytes) after creating it
 * if it is missing (mode 0700) and checking that it is a directory (not a
 * link) of this user that group and others cannot enter. MSR_ERR_PERMISSION
 * (msr_err_msg() says what is wrong and how to fix it) or MSR_ERR_IO;
 * dir is written only on success. */
msr_status_t msr_run_dir_open(char *dir, size_t len);

/* A record's path with its NUL: the runtime directory and "/<pid>.job". */
#define MSR_RUN_RECORD_PATH_LEN (PATH_MAX + 32)

/* Records r in the runtime directory as <pid>.job (mode 0600, a temporary
 * file renamed into place) and writes its path to path (len bytes), for
 * msr_run_record_remove. Fails with MSR_ERR_INVALID_ARG for a string
 * holding a newline, else as msr_run_dir_open or MSR_ERR_IO; nothing is
 * left behind on failure and path is written only on success. */
msr_status_t msr_run_record_write(const msr_run_record_t *r, char *path, size_t len);

/* Removes the record at path (nothing when path is ""). */
void msr_run_record_remove(const char *path);

/* Reads the records of the msrun processes that still run, oldest first,
 * into a new array *entries_p of *count_p entries (free it with
 * msr_run_entries_free), and removes the records of those that are gone
 * (their pid is free or now another process). Files that are not records,
 * are not this user's or have group or other access are skipped. Fails as
 * msr_run_dir_open, or MSR_ERR_NO_MEMORY; outputs written only on
 * success. */
msr_status_t msr_run_records_list(msr_run_entry_t **entries_p, size_t *count_p);

void msr_run_entries_free(msr_run_entry_t *entries, size_t count);

#endif
