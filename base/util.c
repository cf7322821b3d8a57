/* Small helpers: strict number parsing, environment, file descriptors. */
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"

msr_status_t msr_parse_i64(const char *text, int64_t min, int64_t max, int64_t *out_p)
{
    if (text == NULL || *text == '\0' || isspace((unsigned char)*text))
        return MSR_ERR_INVALID_ARG;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0')
        return MSR_ERR_INVALID_ARG;
    if (errno == ERANGE || v < min || v > max)
        return MSR_ERR_OVERFLOW;
    *out_p = v;
    return MSR_OK;
}

msr_status_t msr_parse_bool(const char *text, int *out_p)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    if (text == NULL)
        return MSR_ERR_INVALID_ARG;
    for (size_t i = 0; i < MSR_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out_p = 1;
            return MSR_OK;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out_p = 0;
            return MSR_OK;
        }
    }
    return MSR_ERR_INVALID_ARG;
}

msr_status_t msr_parse_size(const char *text, int64_t min, int64_t max, int64_t *out_p)
{
    if (text == NULL || *text == '\0')
        return MSR_ERR_INVALID_ARG;
    char num[32];
    size_t n = strlen(text);
    int shift = 0;
    const char *units = "KMGT";
    const char *u = strchr(units, toupper((unsigned char)text[n - 1]));
    if (u != NULL) { /* text[n - 1] is not the NUL, so u is a unit */
        shift = 10 * (int)(u - units + 1);
        n--;
    }
    if (n == 0 || n >= sizeof num)
        return MSR_ERR_INVALID_ARG;
    memcpy(num, text, n);
    num[n] = '\0';
    int64_t v;
    if (msr_parse_i64(num, 0, INT64_MAX >> shift, &v) != MSR_OK)
        return MSR_ERR_INVALID_ARG;
    v <<= shift;
    if (v < min || v > max)
        return MSR_ERR_INVALID_ARG;
    *out_p = v;
    return MSR_OK;
}

int64_t msr_env_i64(const char *name, int64_t def, int64_t min, int64_t max)
{
    const char *v = getenv(name);
    int64_t out;
    if (v == NULL || *v == '\0')
        return def;
    if (msr_parse_i64(v, min, max, &out) != MSR_OK) {
        MSR_WARN("ignoring %s=%s: not an integer in [%lld, %lld], using %lld", name, v,
                 (long long)min, (long long)max, (long long)def);
        return def;
    }
    return out;
}

msr_status_t msr_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return msr_status_from_errno(errno);
        }
        p += n;
        len -= (size_t)n;
    }
    return MSR_OK;
}

msr_status_t msr_read_full(int fd, void *data, size_t len)
{
    char *p = data;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return msr_status_from_errno(errno);
        }
        if (n == 0)
            return MSR_ERR_IO;
        p += n;
        len -= (size_t)n;
    }
    return MSR_OK;
}

msr_status_t msr_fd_set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return msr_status_from_errno(errno);
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    if (fcntl(fd, F_SETFL, fl) < 0)
        return msr_status_from_errno(errno);
    return MSR_OK;
}

/* What a file that is not regular is, for the error text. */
static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    return "not a file";
}

msr_status_t msr_open_input_at(int dirfd, const char *path, int flags, int *fd_p)
{
    int fd = openat(dirfd, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | flags);
    struct stat sb;
    if (fd < 0 && errno == ENXIO && /* a socket cannot be opened at all */
        fstatat(dirfd, path, &sb, (flags & O_NOFOLLOW) ? AT_SYMLINK_NOFOLLOW : 0) == 0 &&
        !S_ISREG(sb.st_mode)) {
        msr_err_set("%s is not a regular file (%s)", path, file_kind(sb.st_mode));
        errno = EINVAL;
        return MSR_ERR_IO;
    }
    if (fd < 0) {
        int err = errno;
        msr_status_t st = msr_status_from_errno(err);
        msr_err_set("cannot open %s: %s", path, strerror(err));
        errno = err;
        return st == MSR_ERR_SYSTEM ? MSR_ERR_IO : st;
    }
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        msr_err_set("cannot stat %s: %s", path, strerror(err));
        close(fd);
        errno = err;
        return MSR_ERR_IO;
    }
    if (!S_ISREG(sb.st_mode)) {
        msr_err_set("%s is not a regular file (%s)", path, file_kind(sb.st_mode));
        close(fd);
        errno = EINVAL;
        return MSR_ERR_IO;
    }
    if (!(flags & O_NONBLOCK) && msr_fd_set_nonblock(fd, 0) != MSR_OK) {
        int err = errno;
        msr_err_set("cannot open %s: %s", path, strerror(err));
        close(fd);
        errno = err;
        return MSR_ERR_IO;
    }
    *fd_p = fd;
    return MSR_OK;
}

msr_status_t msr_open_input(const char *path, int flags, int *fd_p)
{
    return msr_open_input_at(AT_FDCWD, path, flags, fd_p);
}

FILE *msr_fopen_input(const char *path, int flags)
{
    int fd = -1;
    if (msr_open_input(path, flags, &fd) != MSR_OK)
        return NULL;
    FILE *f = fdopen(fd, "r");
    if (f == NULL) {
        int err = errno;
        msr_err_set("cannot open %s: %s", path, strerror(err));
        close(fd);
        errno = err;
    }
    return f;
}

msr_status_t msr_fd_set_cloexec(int fd, int on)
{
    int fl = fcntl(fd, F_GETFD);
    if (fl < 0)
        return msr_status_from_errno(errno);
    fl = on ? (fl | FD_CLOEXEC) : (fl & ~FD_CLOEXEC);
    if (fcntl(fd, F_SETFD, fl) < 0)
        return msr_status_from_errno(errno);
    return MSR_OK;
}

const char *msr_signal_name(int sig, char *buf, size_t len)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev != NULL)
        snprintf(buf, len, "SIG%s", abbrev);
    else
        snprintf(buf, len, "signal %d", sig);
    return buf;
}

void msr_random_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(p + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    uint64_t x = msr_now_ns() ^ ((uint64_t)getpid() << 32);
    for (; got < len; got++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[got] = (unsigned char)x;
    }
}

long msr_proc_status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t klen = strlen(key);
    long kib = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            kib = strtol(line + klen + 1, NULL, 10);
            break;
        }
    }
    if (f != NULL)
        fclose(f);
    return kib;
}
