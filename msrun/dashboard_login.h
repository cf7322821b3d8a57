/* Where msrun tells its user the dashboard's login URL (docs/observe.md):
 * the URL opens the job's page without the token, so it goes only to a
 * terminal or to a new file only this user may read, never to a stderr a
 * scheduler writes to a shared file. */
#ifndef MSR_MSRUN_DASHBOARD_LOGIN_H
#define MSR_MSRUN_DASHBOARD_LOGIN_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

/* A login file's path with its NUL. */
#define MSR_DASHBOARD_LOGIN_PATH_LEN (PATH_MAX + 64)

/* Tells the URL http://<hostport>/login?code=<code>, good once within
 * ttl_s: on stderr when path is NULL and stderr is a terminal, else in a
 * new file at path (path NULL: default_path) of mode 0600, created
 * O_EXCL|O_NOFOLLOW (an existing file or link there is refused), stderr
 * then naming the file, not the code. Lines start with prog. Fails with
 * MSR_ERR_IO after printing why on stderr. */
msr_status_t msr_dashboard_login_tell(const char *prog, const char *hostport, const char *code,
                                      int64_t ttl_s, const char *path, const char *default_path);

/* The default login file of a process without a job directory: <the
 * runtime directory of rundir.h>/dashboard-<port>-<pid>.url, into path
 * (MSR_DASHBOARD_LOGIN_PATH_LEN). Fails as msr_run_dir_open (msr_err_msg()
 * says why); path written only on success. */
msr_status_t msr_dashboard_login_default(int port, char *path, size_t len);

/* Tells, on stderr, how curl and Prometheus reach the dashboard's /metrics
 * and /api/job: the header 'Authorization: Bearer <token>', the token being
 * the content of token_file (named, never its content), or the one the
 * user gave (token_file NULL: MSRUN_TOKEN or --token). Lines start with
 * prog. */
void msr_dashboard_token_tell(const char *prog, const char *token_file);

#endif
