/* The node's files: the job's private directory (the proxy's socket, the
 * embedded coordinator's state, a generated token), --log_dir, and the
 * --error_file that tells a scheduler why the job failed. Errors travel
 * through base/err.h; nothing here logs them. */
#ifndef MSR_MSRUN_JOBDIR_H
#define MSR_MSRUN_JOBDIR_H

#include <stddef.h>

#include "cluster/failure.h"
#include "msrun/base.h"

/* Creates the missing parts of dir (mode 0700: logs are this user's
 * business) and opens it into *fd_p. An existing directory must belong to
 * this user: another user's (a world-writable /tmp/logs planted in
 * advance, say) could read, replace or redirect the logs. */
msr_status_t msr_log_dir_open(const char *dir, int *fd_p);

/* Creates the job's private directory <tmp>/msrun-<uid>/<job>-<pid> (both
 * 0700, so only this user reaches the proxy's socket) into dir, after
 * removing the directories of msrun processes that are gone. */
msr_status_t msr_job_dir_create(const char *job_id, char *dir, size_t len);

/* Removes dir and the files msrun keeps there. */
void msr_job_dir_remove(const char *dir);

/* Writes the failure as JSON ("status": "failed", then the root cause) to
 * path, atomically (a temporary file of this user's only, fsync, rename). */
msr_status_t msr_error_file_write(const char *path, const char *job_id, const msr_failure_t *c,
                                  const char *message);

/* Writes the report of a job that succeeded ("status": "ok", the job id,
 * how long this msrun ran, the generations it saw and the restarts used)
 * to path, the same way. */
msr_status_t msr_error_file_write_ok(const char *path, const char *job_id, double duration_s,
                                     int generations, int restarts);

#endif
