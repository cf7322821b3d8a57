/* The node's files (jobdir.h). */
#include "launcher/jobdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/util.h"

msr_status_t msr_log_dir_open(const char *dir, int *fd_p)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return msr_err(MSR_ERR_INVALID_ARG, "log_dir %.100s...: the path is too long", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0700);
            *p = '/';
        }
    }
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return msr_err(MSR_ERR_IO, "cannot create log_dir %s: %s", dir, strerror(errno));
    /* The checks look at the directory that is opened, not at a name that
     * could change in between; the logs are then opened relative to it. */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        msr_status_t st = msr_err(MSR_ERR_IO, "cannot open log_dir %s: %s", dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return st;
    }
    if (sb.st_uid != geteuid()) {
        close(fd);
        return msr_err(MSR_ERR_PERMISSION,
                       "log_dir %s belongs to uid %u, not to this user (uid %u): another user "
                       "could read or redirect the logs there; choose a directory of your own",
                       dir, (unsigned)sb.st_uid, (unsigned)geteuid());
    }
    *fd_p = fd;
    return MSR_OK;
}

/* Empties a job's directory: everything in it is msrun's (the proxy's
 * socket, the coordinator's state, the token, the dashboard's login, the
 * workers' error and launch-timeline files), whatever the version of msrun
 * that left it; a list of known names would leave the directory behind
 * for every name it lacks, and every later launch would try it again. */
static void remove_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            unlinkat(dirfd(d), e->d_name, 0) != 0)
            MSR_DEBUG("cannot remove %s/%s: %s", dir, e->d_name, strerror(errno));
    closedir(d);
}

/* Removes job directories left by msrun processes that are gone (killed by
 * SIGKILL, say): <job>-<pid> whose pid no longer exists. */
static void sweep_stale_job_dirs(const char *top)
{
    DIR *d = opendir(top);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *dash = strrchr(e->d_name, '-');
        int64_t pid;
        if (e->d_name[0] == '.' || dash == NULL ||
            msr_parse_i64(dash + 1, 1, INT32_MAX, &pid) != MSR_OK)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* alive (or not ours to judge) */
        char path[600];
        snprintf(path, sizeof path, "%s/%s", top, e->d_name);
        remove_files(path);
        if (rmdir(path) == 0)
            MSR_DEBUG("removed %s, left by a msrun that is gone", path);
    }
    closedir(d);
}

msr_status_t msr_job_dir_create(const char *job_id, char *dir, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp == '\0' || strlen(tmp) > 80)
        tmp = "/tmp";
    char top[160];
    snprintf(top, sizeof top, "%s/msrun-%u", tmp, (unsigned)getuid());
    if (mkdir(top, 0700) != 0 && errno != EEXIST)
        return msr_err(MSR_ERR_IO, "cannot create %s: %s", top, strerror(errno));
    struct stat sb;
    if (lstat(top, &sb) != 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != getuid() ||
        (sb.st_mode & 077) != 0)
        return msr_err(MSR_ERR_PERMISSION,
                       "%s is not a private directory of this user (mode 0700 expected)", top);
    sweep_stale_job_dirs(top);
    char job[48];
    size_t n = 0;
    for (const char *c = job_id; *c && n < sizeof job - 1; c++)
        job[n++] = (char)((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                                  (*c >= '0' && *c <= '9') || *c == '-' || *c == '_'
                              ? *c
                              : '_');
    job[n] = '\0';
    char path[MSR_JOB_DIR_LEN];
    snprintf(path, sizeof path, "%s/%s-%d", top, job, (int)getpid());
    if (mkdir(path, 0700) != 0)
        return msr_err(MSR_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    snprintf(dir, len, "%s", path);
    return MSR_OK;
}

void msr_job_dir_remove(const char *dir)
{
    if (dir[0] == '\0')
        return;
    remove_files(dir);
    if (rmdir(dir) != 0)
        MSR_DEBUG("cannot remove %s: %s", dir, strerror(errno));
}

static void failure_json(msr_buf_t *b, const char *job_id, const msr_failure_t *c,
                         const char *message)
{
    char sig[32] = "";
    if (c->signal > 0)
        msr_signal_name(c->signal, sig, sizeof sig);
    msr_buf_printf(b, "{\n  \"status\": \"failed\",\n  \"job_id\": ");
    msr_buf_json_string(b, job_id, strlen(job_id));
    msr_buf_printf(b, ",\n  \"node\": %d,\n  \"host\": ", c->node_rank);
    msr_buf_json_string(b, c->host, strlen(c->host));
    msr_buf_printf(b,
                   ",\n  \"rank\": %d,\n  \"pid\": %d,\n  \"exit_code\": %d,\n  \"signal\": %d,\n"
                   "  \"signal_name\": ",
                   c->rank, c->pid, c->exit_code, c->signal);
    msr_buf_json_string(b, sig, strlen(sig));
    msr_buf_printf(b, ",\n  \"time\": %.3f,\n  \"generation\": %d,\n  \"reason\": ", c->time,
                   c->generation);
    msr_buf_json_string(b, c->reason, strlen(c->reason));
    msr_buf_printf(b, ",\n  \"message\": ");
    msr_buf_json_string(b, message, strlen(message));
    msr_buf_printf(b, ",\n  \"stderr_tail\": [");
    for (size_t i = 0; i < c->ntail; i++) {
        msr_buf_printf(b, "%s\n    ", i ? "," : "");
        msr_buf_json_string(b, c->tail[i], strlen(c->tail[i]));
    }
    msr_buf_printf(b, "%s]\n}\n", c->ntail ? "\n  " : "");
}

/* Writes b to path atomically. */
static msr_status_t report_write(const char *path, const msr_buf_t *b)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    /* Readable by this user only, and never through a link planted at the
     * temporary name: the rename then replaces the name itself. */
    unlink(tmp);
    msr_status_t st = MSR_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int ok = fd >= 0 && b->data != NULL && msr_write_all(fd, b->data, b->len) == MSR_OK &&
             fsync(fd) == 0;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        st = msr_err(MSR_ERR_IO, "cannot write the error file %s: %s", path,
                     b->data ? strerror(errno) : "out of memory");
        unlink(tmp);
    }
    return st;
}

msr_status_t msr_error_file_write(const char *path, const char *job_id, const msr_failure_t *c,
                                  const char *message)
{
    msr_buf_t b = MSR_BUF_INIT;
    failure_json(&b, job_id, c, message);
    msr_status_t st = report_write(path, &b);
    msr_buf_cleanup(&b);
    return st;
}

msr_status_t msr_error_file_write_ok(const char *path, const char *job_id, double duration_s,
                                     int generations, int restarts)
{
    msr_buf_t b = MSR_BUF_INIT;
    msr_buf_printf(&b, "{\n  \"status\": \"ok\",\n  \"job_id\": ");
    msr_buf_json_string(&b, job_id, strlen(job_id));
    msr_buf_printf(&b,
                   ",\n  \"duration_s\": %.3f,\n  \"generations\": %d,\n  \"restarts\": %d\n}\n",
                   duration_s, generations, restarts);
    msr_status_t st = report_write(path, &b);
    msr_buf_cleanup(&b);
    return st;
}

msr_status_t msr_log_run_dir_open(const char *dir, const char *job_id, int *fd_p, char *name,
                                  size_t len)
{
    int top;
    msr_status_t st = msr_log_dir_open(dir, &top);
    if (st != MSR_OK)
        return st;
    /* the job id as a file name: no '/', no leading '.' */
    char base[200];
    size_t n = 0;
    for (const char *c = job_id; *c && n < sizeof base - 1; c++) {
        int keep = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                   (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || (*c == '.' && n > 0);
        base[n++] = keep ? *c : '_';
    }
    base[n] = '\0';
    char run[240];
    int made = 0;
    for (int k = 0; k < MSR_LOG_RUN_DIRS_MAX && !made; k++) {
        if (k == 0)
            snprintf(run, sizeof run, "%s", base);
        else
            snprintf(run, sizeof run, "%s.%d", base, k);
        if (mkdirat(top, run, 0700) == 0)
            made = 1;
        else if (errno != EEXIST) {
            st = msr_err(MSR_ERR_IO, "cannot create %s/%s: %s", dir, run, strerror(errno));
            goto err_top;
        }
    }
    if (!made) {
        st = msr_err(MSR_ERR_IO,
                     "cannot create a directory for this run in log_dir %s: %s and "
                     "%d more like it exist",
                     dir, base, MSR_LOG_RUN_DIRS_MAX - 1);
        goto err_top;
    }
    int fd = openat(top, run, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        st = msr_err(MSR_ERR_IO, "cannot open %s/%s: %s", dir, run, strerror(errno));
        goto err_top;
    }
    /* latest -> run, replaced in one step; a "latest" that is not a link
     * is the user's and stays */
    struct stat sb;
    char tmp[64];
    snprintf(tmp, sizeof tmp, ".latest.%d", (int)getpid());
    unlinkat(top, tmp, 0);
    if (fstatat(top, "latest", &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISLNK(sb.st_mode)) {
        MSR_DEBUG("%s/latest is not a symbolic link: left as it is", dir);
    } else if (symlinkat(run, top, tmp) != 0 || renameat(top, tmp, top, "latest") != 0) {
        MSR_DEBUG("cannot point %s/latest at %s: %s", dir, run, strerror(errno));
        unlinkat(top, tmp, 0);
    }
    close(top);
    snprintf(name, len, "%s", run);
    *fd_p = fd;
    return MSR_OK;

err_top:
    close(top);
    return st;
}

msr_status_t msr_log_name_format(const char *pattern, int rank, int local_rank, int node_rank,
                                 const char *host, char *buf, size_t len)
{
    static const char *const keys[] = {"rank", "local_rank", "node_rank", "hostname", "ip"};
    msr_buf_t b = MSR_BUF_INIT;
    msr_status_t st = MSR_OK;
    int has_rank = 0;
    char hostname[256] = "";
    if (pattern == NULL)
        pattern = "worker_{rank}.log";
    for (const char *p = pattern; *p; p++) {
        if (*p != '{') {
            msr_buf_append(&b, p, 1);
            continue;
        }
        const char *end = strchr(p, '}');
        size_t k = 0, n = end ? (size_t)(end - p - 1) : 0;
        while (k < MSR_ARRAY_SIZE(keys) && (strlen(keys[k]) != n || strncmp(p + 1, keys[k], n)))
            k++;
        if (end == NULL || k == MSR_ARRAY_SIZE(keys)) {
            st = msr_err(MSR_ERR_INVALID_ARG,
                         "worker_log_name '%s': unknown placeholder at '%.20s' (known: {rank}, "
                         "{local_rank}, {node_rank}, {hostname}, {ip})",
                         pattern, p);
            goto out;
        }
        switch (k) {
        case 0:
            msr_buf_printf(&b, "%d", rank);
            has_rank = 1;
            break;
        case 1:
            msr_buf_printf(&b, "%d", local_rank);
            has_rank = 1;
            break;
        case 2:
            msr_buf_printf(&b, "%d", node_rank);
            break;
        case 3:
            if (hostname[0] == '\0' && gethostname(hostname, sizeof hostname - 1) != 0)
                snprintf(hostname, sizeof hostname, "localhost");
            msr_buf_printf(&b, "%s", hostname);
            break;
        default:
            msr_buf_printf(&b, "%s", host ? host : "");
            break;
        }
        p = end;
    }
    /* MindSpore's pattern names no rank: it gets "_<rank>.log", as there */
    if (!has_rank)
        msr_buf_printf(&b, "_%d.log", rank);
    if (b.len == 0 || b.len >= len || memchr(b.data, '/', b.len) || strcmp(b.data, ".") == 0 ||
        strcmp(b.data, "..") == 0) {
        st = msr_err(MSR_ERR_INVALID_ARG,
                     "worker_log_name '%s' gives '%s', which is not a file name of at most %zu "
                     "bytes",
                     pattern, b.data ? b.data : "", len - 1);
        goto out;
    }
    snprintf(buf, len, "%s", b.data);
out:
    msr_buf_cleanup(&b);
    return st;
}
