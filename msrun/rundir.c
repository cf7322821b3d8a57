/* The runtime directory and its job records (rundir.h). */
#include "launcher/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/status.h"
#include "base/util.h"

/* A record larger than this is not one of ours. */
#define RECORD_MAX 16384

/* When process pid started (clock ticks after boot, /proc/PID/stat's 22nd
 * field), or 0 when it cannot be read (gone, or no /proc). A record names
 * its msrun by pid and this, so a pid reused by another process is not
 * taken for the msrun that had it. */
static unsigned long long proc_start_ticks(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* the command name (field 2) may hold spaces and ')': skip past the last ')' */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return 0;
    p++;
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (p == NULL)
            return 0;
    }
    return strtoull(p + 1, NULL, 10);
}

msr_status_t msr_run_dir_open(char *dir, size_t len)
{
    char path[PATH_MAX];
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (xdg != NULL && xdg[0] == '/')
        n = snprintf(path, sizeof path, "%s/msrun", xdg);
    else
        n = snprintf(path, sizeof path, "/tmp/msrun-%u", (unsigned)getuid());
    if (n < 0 || (size_t)n >= sizeof path || (size_t)n + 16 >= len)
        return msr_err(MSR_ERR_INVALID_ARG, "the runtime directory %.100s...: the path is too long",
                       path);
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return msr_err(MSR_ERR_IO, "cannot create the runtime directory %s: %s", path,
                       strerror(errno));
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return msr_err(MSR_ERR_IO, "cannot stat the runtime directory %s: %s", path,
                       strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return msr_err(MSR_ERR_PERMISSION,
                       "the runtime directory %s is not a directory (a link or a file is "
                       "there): remove it",
                       path);
    if (sb.st_uid != getuid())
        return msr_err(MSR_ERR_PERMISSION,
                       "the runtime directory %s belongs to uid %u, not to this user (uid %u): "
                       "another user could read the job tokens there",
                       path, (unsigned)sb.st_uid, (unsigned)getuid());
    if (sb.st_mode & 077)
        return msr_err(MSR_ERR_PERMISSION,
                       "the runtime directory %s has mode %04o: others may enter it; make it "
                       "private (chmod 700 %s)",
                       path, (unsigned)(sb.st_mode & 07777), path);
    snprintf(dir, len, "%s", path);
    return MSR_OK;
}

static int has_newline(const char *s)
{
    return s != NULL && strpbrk(s, "\r\n") != NULL;
}

/* Appends c to buf (k bytes used of len, one kept for the NUL): 0, or -1
 * when it does not fit. */
static int put_char(char *buf, size_t len, size_t *k, unsigned char c)
{
    if (*k + 1 >= len)
        return -1;
    buf[(*k)++] = (char)(c < 0x20 || c == 0x7f ? '?' : c);
    return 0;
}

void msr_run_command_format(char *const *argv, char *buf, size_t len)
{
    size_t k = 0;
    int cut = 0;
    for (size_t i = 0; argv != NULL && argv[i] != NULL && !cut; i++) {
        /* a word with a space (or none at all) is quoted, as a shell would
         * need it: "a 'b c'" is two arguments */
        int quote = argv[i][0] == '\0' || strpbrk(argv[i], " \t") != NULL;
        if (i > 0)
            cut = put_char(buf, len, &k, ' ');
        if (quote && !cut)
            cut = put_char(buf, len, &k, '\'');
        for (const unsigned char *c = (const unsigned char *)argv[i]; *c && !cut; c++)
            cut = put_char(buf, len, &k, *c);
        if (quote && !cut)
            cut = put_char(buf, len, &k, '\'');
    }
    if (cut) { /* the end says that it was cut */
        k = len - 4;
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
}

/* This user's name, or its uid in digits when it has none. */
static void user_name(unsigned uid, char *buf, size_t len)
{
    struct passwd pw, *res = NULL;
    char tmp[1024];
    if (getpwuid_r((uid_t)uid, &pw, tmp, sizeof tmp, &res) == 0 && res != NULL &&
        !has_newline(res->pw_name))
        snprintf(buf, len, "%s", res->pw_name);
    else
        snprintf(buf, len, "%u", uid);
}

msr_status_t msr_run_record_write(const msr_run_record_t *r, char *path, size_t len)
{
    const char *fields[] = {r->job_id, r->coordinator,     r->token,   r->tls_cert, r->tls_key,
                            r->tls_ca, r->tls_server_name, r->command, r->dashboard};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(fields); i++)
        if (has_newline(fields[i]))
            return msr_err(MSR_ERR_INVALID_ARG, "cannot record the job: a value holds a newline");
    char dir[PATH_MAX], file[MSR_RUN_RECORD_PATH_LEN], tmp[PATH_MAX + 48];
    msr_status_t st = msr_run_dir_open(dir, sizeof dir);
    if (st != MSR_OK)
        return st;
    snprintf(file, sizeof file, "%s/%d.job", dir, r->pid);
    snprintf(tmp, sizeof tmp, "%s/.%d.job.tmp", dir, r->pid);
    if (strlen(file) >= len)
        return msr_err(MSR_ERR_INVALID_ARG, "the record's path %s is too long", file);
    msr_buf_t b = MSR_BUF_INIT;
    int bad = msr_buf_printf(&b,
                             "job_id=%s\ncoordinator=%s\ntoken=%s\npid=%d\nproc_start=%llu\n"
                             "node_rank=%d\nstart_time=%.3f\ndashboard_port=%d\n",
                             r->job_id ? r->job_id : "", r->coordinator ? r->coordinator : "",
                             r->token ? r->token : "", r->pid, proc_start_ticks(r->pid),
                             r->node_rank, r->start_time, r->dashboard_port) != MSR_OK;
    char user[256];
    unsigned uid = (unsigned)getuid();
    user_name(uid, user, sizeof user);
    bad |= msr_buf_printf(&b, "uid=%u\nuser=%s\ncommand=%s\ndashboard=%s\n", uid, user,
                          r->command ? r->command : "", r->dashboard ? r->dashboard : "") != MSR_OK;
    const char *tls_names[] = {"tls_cert", "tls_key", "tls_ca", "tls_server_name"};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(tls_names); i++) {
        const char *v = fields[3 + i];
        char abs[PATH_MAX];
        if (v == NULL || *v == '\0')
            continue;
        /* a file named relative to msrun's directory, from wherever status runs */
        if (i < 3 && v[0] != '/' && realpath(v, abs) != NULL && !has_newline(abs))
            v = abs;
        bad |= msr_buf_printf(&b, "%s=%s\n", tls_names[i], v) != MSR_OK;
    }
    if (bad) {
        if (b.data)
            memset(b.data, 0, b.len);
        msr_buf_cleanup(&b);
        return msr_err(MSR_ERR_NO_MEMORY, "cannot record the job: out of memory");
    }
    /* 0600 whatever the umask, never through a link planted at the
     * temporary name; the rename then replaces the name itself */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int ok = fd >= 0 && fchmod(fd, 0600) == 0 && msr_write_all(fd, b.data, b.len) == MSR_OK;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (!ok || rename(tmp, file) != 0) {
        st = msr_err(MSR_ERR_IO, "cannot write the job's record %s: %s", file, strerror(errno));
        unlink(tmp);
    }
    /* the token leaves no copy in freed memory */
    memset(b.data, 0, b.len);
    msr_buf_cleanup(&b);
    if (st == MSR_OK)
        snprintf(path, len, "%s", file);
    return st;
}

void msr_run_record_remove(const char *path)
{
    if (path != NULL && path[0] != '\0')
        unlink(path);
}

/* Reads the record file name in dir (fd dirfd) into e (0), or says why not
 * (-1: not a record of this user's, left alone). */
static int record_read(int dirfd, const char *name, msr_run_entry_t *e,
                       unsigned long long *proc_start_p)
{
    int fd;
    if (msr_open_input_at(dirfd, name, O_NOFOLLOW, &fd) != MSR_OK)
        return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_uid != getuid() ||
        (sb.st_mode & 077) != 0 || sb.st_size <= 0 || sb.st_size > RECORD_MAX) {
        close(fd);
        return -1;
    }
    char *text = msr_malloc((size_t)sb.st_size + 1);
    if (text == NULL || msr_read_full(fd, text, (size_t)sb.st_size) != MSR_OK) {
        msr_free(text);
        close(fd);
        return -1;
    }
    close(fd);
    text[sb.st_size] = '\0';
    memset(e, 0, sizeof *e);
    e->text = text;
    e->text_len = (size_t)sb.st_size;
    e->rec.node_rank = -1;
    *proc_start_p = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *eq = strchr(line, '=');
        if (eq == NULL)
            continue;
        *eq = '\0';
        const char *v = eq + 1;
        int64_t x;
        if (strcmp(line, "job_id") == 0)
            e->rec.job_id = v;
        else if (strcmp(line, "coordinator") == 0)
            e->rec.coordinator = v;
        else if (strcmp(line, "token") == 0)
            e->rec.token = v;
        else if (strcmp(line, "tls_cert") == 0)
            e->rec.tls_cert = v;
        else if (strcmp(line, "tls_key") == 0)
            e->rec.tls_key = v;
        else if (strcmp(line, "tls_ca") == 0)
            e->rec.tls_ca = v;
        else if (strcmp(line, "tls_server_name") == 0)
            e->rec.tls_server_name = v;
        else if (strcmp(line, "pid") == 0 && msr_parse_i64(v, 1, INT32_MAX, &x) == MSR_OK)
            e->rec.pid = (int)x;
        else if (strcmp(line, "node_rank") == 0 && msr_parse_i64(v, -1, INT32_MAX, &x) == MSR_OK)
            e->rec.node_rank = (int)x;
        else if (strcmp(line, "dashboard_port") == 0 && msr_parse_i64(v, 0, 65535, &x) == MSR_OK)
            e->rec.dashboard_port = (int)x;
        else if (strcmp(line, "uid") == 0 && msr_parse_i64(v, 0, UINT32_MAX, &x) == MSR_OK) {
            e->rec.uid = (unsigned)x;
            e->rec.has_uid = 1;
        } else if (strcmp(line, "user") == 0)
            e->rec.user = v;
        else if (strcmp(line, "command") == 0)
            e->rec.command = v;
        else if (strcmp(line, "dashboard") == 0)
            e->rec.dashboard = v;
        else if (strcmp(line, "start_time") == 0)
            e->rec.start_time = strtod(v, NULL);
        else if (strcmp(line, "proc_start") == 0)
            *proc_start_p = strtoull(v, NULL, 10);
    }
    if (e->rec.pid <= 0 || e->rec.job_id == NULL || e->rec.coordinator == NULL ||
        e->rec.token == NULL) {
        msr_free(text);
        e->text = NULL;
        return -1;
    }
    return 0;
}

/* Whether the msrun a record names still runs: its pid exists and, when
 * both are known, started when the record says. */
static int record_alive(const msr_run_entry_t *e, unsigned long long proc_start)
{
    if (kill(e->rec.pid, 0) != 0 && errno == ESRCH)
        return 0;
    unsigned long long now = proc_start_ticks(e->rec.pid);
    return proc_start == 0 || now == 0 || now == proc_start;
}

static int entry_older(const void *x, const void *y)
{
    const msr_run_entry_t *a = x, *b = y;
    if (a->rec.start_time != b->rec.start_time)
        return a->rec.start_time < b->rec.start_time ? -1 : 1;
    return a->rec.pid < b->rec.pid ? -1 : a->rec.pid > b->rec.pid;
}

msr_status_t msr_run_records_list(msr_run_entry_t **entries_p, size_t *count_p)
{
    char dir[PATH_MAX];
    msr_status_t st = msr_run_dir_open(dir, sizeof dir);
    if (st != MSR_OK)
        return st;
    DIR *d = opendir(dir);
    if (d == NULL)
        return msr_err(MSR_ERR_IO, "cannot read the runtime directory %s: %s", dir,
                       strerror(errno));
    msr_run_entry_t *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *dot = strrchr(de->d_name, '.');
        int64_t pid;
        char num[32];
        size_t nlen = dot ? (size_t)(dot - de->d_name) : 0;
        if (dot == NULL || strcmp(dot, ".job") != 0 || nlen == 0 || nlen >= sizeof num)
            continue;
        memcpy(num, de->d_name, nlen);
        num[nlen] = '\0';
        if (msr_parse_i64(num, 1, INT32_MAX, &pid) != MSR_OK)
            continue;
        msr_run_entry_t e;
        unsigned long long proc_start;
        if (record_read(dirfd(d), de->d_name, &e, &proc_start) != 0)
            continue;
        if (e.rec.pid != (int)pid) {
            msr_free(e.text); /* not a record msrun wrote: left alone */
            continue;
        }
        if (!record_alive(&e, proc_start)) {
            /* left by a msrun that is gone (SIGKILL, a crash of the host) */
            unlinkat(dirfd(d), de->d_name, 0);
            msr_free(e.text);
            continue;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            msr_run_entry_t *nv = msr_realloc_array(v, ncap, sizeof *nv);
            if (nv == NULL) {
                msr_free(e.text);
                closedir(d);
                msr_run_entries_free(v, n);
                return msr_err(MSR_ERR_NO_MEMORY, "out of memory reading %s", dir);
            }
            v = nv;
            cap = ncap;
        }
        v[n++] = e;
    }
    closedir(d);
    if (n > 1)
        qsort(v, n, sizeof *v, entry_older);
    *entries_p = v;
    *count_p = n;
    return MSR_OK;
}

void msr_run_entries_free(msr_run_entry_t *entries, size_t count)
{
    for (size_t i = 0; entries && i < count; i++) {
        if (entries[i].text) {
            memset(entries[i].text, 0, entries[i].text_len);
            msr_free(entries[i].text);
        }
    }
    msr_free(entries);
}
