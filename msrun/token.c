/* The job token: generation, token files and hiding it from ps. */
#include "launcher/token.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/status.h"
#include "base/util.h"

msr_status_t msr_token_generate(char *out, size_t len)
{
    unsigned char rnd[MSR_TOKEN_GEN_CHARS / 2];
    size_t got = 0;
    if (len <= MSR_TOKEN_GEN_CHARS) {
        return msr_err(MSR_ERR_INVALID_ARG, "no room for a token");
    }
    while (got < sizeof rnd) {
        ssize_t n = getrandom(rnd + got, sizeof rnd - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            return msr_err(MSR_ERR_SYSTEM, "getrandom: %s", n < 0 ? strerror(errno) : "no bytes");
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(out + 2 * i, 3, "%02x", rnd[i]);
    memset(rnd, 0, sizeof rnd);
    return MSR_OK;
}

int msr_token_valid(const char *token)
{
    size_t n = 0;
    for (const char *p = token; *p; p++, n++)
        if (*p < 0x21 || *p > 0x7e || n >= MSR_TOKEN_MAX)
            return 0;
    return n > 0;
}

/* "-": one line of standard input, read a byte at a time so that nothing
 * after the newline is consumed (the launcher keeps stdin open after it). */
static msr_status_t read_stdin(char *out)
{
    char buf[MSR_TOKEN_MAX + 2];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(0, buf + n, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            memset(buf, 0, sizeof buf);
            return msr_err(MSR_ERR_IO, "cannot read the token from standard input: %s",
                           strerror(errno));
        }
        if (r == 0 || buf[n] == '\n' || ++n == sizeof buf - 1)
            break;
    }
    buf[n] = '\0';
    if (n > 0 && buf[n - 1] == '\r')
        buf[--n] = '\0';
    if (!msr_token_valid(buf)) {
        memset(buf, 0, sizeof buf);
        return msr_err(MSR_ERR_INVALID_ARG,
                       "standard input (--token_file=-) must start with one token: 1 to %d "
                       "printable characters without spaces, and a newline",
                       MSR_TOKEN_MAX);
    }
    memcpy(out, buf, n + 1);
    memset(buf, 0, sizeof buf);
    return MSR_OK;
}

msr_status_t msr_token_read_file(const char *path, char *out, size_t len)
{
    char buf[MSR_TOKEN_MAX + 3];
    struct stat sb;
    msr_status_t st = MSR_ERR_IO;
    if (len <= MSR_TOKEN_MAX) {
        return msr_err(MSR_ERR_INVALID_ARG, "no room for a token");
    }
    if (strcmp(path, "-") == 0)
        return read_stdin(out);
    /* O_NOFOLLOW: a link planted in the file's place is refused, and the
     * checks below look at the file that is read, not at a name. */
    int fd;
    if ((st = msr_open_input(path, O_NOFOLLOW, &fd)) != MSR_OK) {
        if (errno == ELOOP)
            return msr_err(MSR_ERR_IO, "cannot open the token file %s: it is a symbolic link",
                           path);
        return msr_err_prefix(errno == EINVAL ? MSR_ERR_INVALID_ARG : MSR_ERR_IO, "the token file");
    }
    st = MSR_ERR_IO;
    if (fstat(fd, &sb) != 0) {
        msr_err_set("cannot stat the token file %s: %s", path, strerror(errno));
        goto err_fd;
    }
    if (sb.st_uid != geteuid()) {
        msr_err_set("the token file %s is owned by uid %u, not by this user (uid %u)", path,
                    (unsigned)sb.st_uid, (unsigned)geteuid());
        st = MSR_ERR_PERMISSION;
        goto err_fd;
    }
    if (sb.st_mode & 077) {
        msr_err_set("the token file %s has mode %04o: others may read it; make it readable only by "
                    "you (chmod 600 %s)",
                    path, (unsigned)(sb.st_mode & 07777), path);
        st = MSR_ERR_PERMISSION;
        goto err_fd;
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            msr_err_set("cannot read the token file %s: %s", path, strerror(errno));
            goto err_fd;
        }
        if (r == 0 || n + (size_t)r == sizeof buf - 1) {
            n += (size_t)r;
            break;
        }
        n += (size_t)r;
    }
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    if (strlen(buf) != n || !msr_token_valid(buf)) {
        msr_err_set("the token file %s must hold one token: 1 to %d printable characters without "
                    "spaces, on one line",
                    path, MSR_TOKEN_MAX);
        st = MSR_ERR_INVALID_ARG;
        goto err_fd;
    }
    close(fd);
    memcpy(out, buf, n + 1);
    memset(buf, 0, sizeof buf);
    return MSR_OK;

err_fd:
    close(fd);
    memset(buf, 0, sizeof buf);
    return st;
}

msr_status_t msr_token_write_file(const char *path, const char *token)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return msr_err(MSR_ERR_IO, "cannot create the token file %s: %s", path, strerror(errno));
    /* 0600 whatever the umask says; fchmod before anything is written */
    if (fchmod(fd, 0600) != 0 || msr_write_all(fd, token, strlen(token)) != MSR_OK ||
        msr_write_all(fd, "\n", 1) != MSR_OK) {
        msr_err_set("cannot write the token file %s: %s", path, strerror(errno));
        goto err_file;
    }
    if (close(fd) != 0) {
        fd = -1;
        msr_err_set("cannot write the token file %s: %s", path, strerror(errno));
        goto err_file;
    }
    return MSR_OK;

err_file:
    if (fd >= 0)
        close(fd);
    unlink(path);
    return MSR_ERR_IO;
}
