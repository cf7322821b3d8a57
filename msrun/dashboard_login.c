/* The dashboard's login URL, told only to a terminal or a 0600 file. */
#include "launcher/dashboard_login.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/status.h"
#include "base/util.h"
#include "launcher/rundir.h"

/* Writes line to a new file at path, mode 0600, never through a link. */
static msr_status_t write_new(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return msr_err(MSR_ERR_IO, "%s", strerror(errno));
    msr_status_t st = fchmod(fd, 0600) == 0 ? msr_write_all(fd, line, strlen(line)) : MSR_ERR_IO;
    if (close(fd) != 0 || st != MSR_OK) {
        unlink(path);
        return msr_err(MSR_ERR_IO, "cannot write it whole");
    }
    return MSR_OK;
}

msr_status_t msr_dashboard_login_tell(const char *prog, const char *hostport, const char *code,
                                      int64_t ttl_s, const char *path, const char *default_path)
{
    char url[400];
    snprintf(url, sizeof url, "http://%s/login?code=%s", hostport, code);
    if (path == NULL && isatty(STDERR_FILENO)) {
        fprintf(stderr,
                "%s: dashboard at %s (it logs in once, within %lld s; afterwards send "
                "'Authorization: Bearer <job token>')\n",
                prog, url, (long long)ttl_s);
        memset(url, 0, sizeof url);
        return MSR_OK;
    }
    if (path == NULL)
        path = default_path;
    char line[sizeof url + 1];
    snprintf(line, sizeof line, "%s\n", url);
    memset(url, 0, sizeof url);
    msr_status_t st = write_new(path, line);
    memset(line, 0, sizeof line);
    if (st != MSR_OK) {
        fprintf(stderr,
                "%s: error: cannot write the dashboard's login URL to %s (a new file, not a "
                "link): %s\n",
                prog, path, msr_err_msg());
        return st;
    }
    fprintf(stderr,
            "%s: dashboard at http://%s/ (its login URL, good once within %lld s, is in %s, "
            "mode 0600)\n",
            prog, hostport, (long long)ttl_s, path);
    return MSR_OK;
}

msr_status_t msr_dashboard_login_default(int port, char *path, size_t len)
{
    char dir[PATH_MAX];
    msr_status_t st = msr_run_dir_open(dir, sizeof dir);
    if (st != MSR_OK)
        return st;
    if ((size_t)snprintf(path, len, "%s/dashboard-%d-%d.url", dir, port, (int)getpid()) >= len)
        return msr_err(MSR_ERR_INVALID_ARG, "the runtime directory's path is too long");
    return MSR_OK;
}

void msr_dashboard_token_tell(const char *prog, const char *token_file)
{
    if (token_file)
        fprintf(stderr,
                "%s: dashboard API (curl, Prometheus): send 'Authorization: Bearer <the token "
                "in %s>'; 'msrun dashboard' makes a new login URL, 'msrun dashboard "
                "--prometheus' a scrape config\n",
                prog, token_file);
    else
        fprintf(stderr,
                "%s: dashboard API (curl, Prometheus): send 'Authorization: Bearer <the job "
                "token you gave>'; 'msrun dashboard' makes a new login URL, 'msrun dashboard "
                "--prometheus' a scrape config\n",
                prog);
}
