/* The node's files: the job's private directory (the proxy's socket, the
 * embedded coordinator's state, a generated token), --log_dir, and the
 * --error_file that tells a scheduler why the job failed. Errors travel
 * through base/err.h; nothing here logs them. */
#ifndef MSR_MSRUN_JOBDIR_H
#define MSR_MSRUN_JOBDIR_H

#include <limits.h>
#include <stddef.h>

#include "cluster/failure.h"
#include "msrun/base.h"

/* Creates the missing parts of dir (mode 0700: logs are this user's
 * business) and opens it into *fd_p. An existing directory must belong to
 * this user: another user's (a world-writable /tmp/logs planted in
 * advance, say) could read, replace or redirect the logs. */
msr_status_t msr_log_dir_open(const char *dir, int *fd_p);

/* How many runs of one job id a log directory holds: <job>, <job>.1 ...
 * <job>.(MSR_LOG_RUN_DIRS_MAX - 1). */
#define MSR_LOG_RUN_DIRS_MAX 10000

/* Makes this run's own directory in the log directory dir (opened and
 * checked by msr_log_dir_open): <dir>/<job_id>, or <job_id>.1, .2 ... when
 * an earlier run has that name (a run never writes into an earlier run's
 * files), mode 0700, and points the symbolic link <dir>/latest at it (a
 * "latest" that is not a symbolic link is left alone). Characters of the
 * job id other than letters, digits, '-', '_' and a '.' that does not
 * start it become '_'. On success *fd_p is the run's directory and name
 * (len) its name in dir. */
msr_status_t msr_log_run_dir_open(const char *dir, const char *job_id, int *fd_p, char *name,
                                  size_t len);

/* The name of a worker's log file from --worker_log_name's pattern (NULL:
 * "worker_{rank}.log"): {rank}, {local_rank}, {node_rank}, {hostname} and
 * {ip} (host) are replaced; a pattern with neither {rank} nor {local_rank}
 * gets "_<rank>.log" appended, as MindSpore's msrun does. Refuses
 * (MSR_ERR_INVALID_ARG) an unknown placeholder and a result that is not a
 * plain file name that fits len. */
msr_status_t msr_log_name_format(const char *pattern, int rank, int local_rank, int node_rank,
                                 const char *host, char *buf, size_t len);

/* The job's private directory's path with its NUL: TMPDIR (80 bytes at
 * most, else /tmp), msrun-<uid> and <job>-<pid> (the job id cut to 47). */
#define MSR_JOB_DIR_LEN      240
/* A file's path in it (agent.sock, token, coordinator.state). */
#define MSR_JOB_FILE_LEN     (MSR_JOB_DIR_LEN + 64)
/* A run's directory name in --log_dir (msr_log_run_dir_open's name) and
 * the whole path: --log_dir, '/' and that name. */
#define MSR_LOG_RUN_NAME_LEN 256
#define MSR_LOG_RUN_DIR_LEN  (PATH_MAX + 1 + MSR_LOG_RUN_NAME_LEN)

/* Creates the job's private directory <tmp>/msrun-<uid>/<job>-<pid> (both
 * 0700, so only this user reaches the proxy's socket) into dir (len:
 * MSR_JOB_DIR_LEN), after
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
