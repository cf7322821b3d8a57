/* Atomic file writes and whole-file reads for checkpoints (see ckpt_io.h). */
#include "parallel/ckpt_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/status.h"
#include "base/util.h"

/* fsync of the directory holding path, so a rename in it is durable. */
static msr_status_t sync_parent(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        msr_status_t st = msr_status_from_errno(errno);
        MSR_ERROR("checkpoint: cannot sync directory %s: %s", dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return st;
    }
    close(fd);
    return MSR_OK;
}

msr_status_t msr_tckpt_io_write(const char *path, const msr_tckpt_piece_t *pieces, size_t n)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp) {
        MSR_ERROR("checkpoint: path too long: %s", path);
        return MSR_ERR_INVALID_ARG;
    }
    msr_status_t st;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = msr_status_from_errno(errno);
        MSR_ERROR("checkpoint: cannot create %s: %s", tmp, strerror(errno));
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        st = msr_write_all(fd, pieces[i].data, pieces[i].len);
        if (st != MSR_OK) {
            MSR_ERROR("checkpoint: cannot write %s: %s", tmp, strerror(errno));
            goto err_unlink;
        }
    }
    if (fsync(fd) != 0) {
        st = msr_status_from_errno(errno);
        MSR_ERROR("checkpoint: cannot sync %s: %s", tmp, strerror(errno));
        goto err_unlink;
    }
    if (close(fd) != 0) {
        fd = -1;
        st = msr_status_from_errno(errno);
        MSR_ERROR("checkpoint: cannot close %s: %s", tmp, strerror(errno));
        goto err_unlink;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        st = msr_status_from_errno(errno);
        MSR_ERROR("checkpoint: cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto err_unlink;
    }
    return sync_parent(path);

err_unlink:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return st;
}

msr_status_t msr_tckpt_io_read(const char *path, void **data_p, size_t *len_p)
{
    msr_status_t st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st = msr_status_from_errno(errno);
        if (st != MSR_ERR_NOT_FOUND)
            MSR_ERROR("checkpoint: cannot open %s: %s", path, strerror(errno));
        return st;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = msr_status_from_errno(errno);
        MSR_ERROR("checkpoint: cannot stat %s: %s", path, strerror(errno));
        goto err_close;
    }
    size_t len = (size_t)sb.st_size;
    void *data = msr_malloc(len + 1);
    if (data == NULL) {
        MSR_ERROR("checkpoint: out of memory reading %s (%zu bytes)", path, len);
        st = MSR_ERR_NO_MEMORY;
        goto err_close;
    }
    st = msr_read_full(fd, data, len);
    if (st != MSR_OK) {
        MSR_ERROR("checkpoint: cannot read %s (%zu bytes): %s", path, len, msr_status_str(st));
        goto err_free;
    }
    ((char *)data)[len] = '\0'; /* text files (the manifest) parse as strings */
    close(fd);
    *data_p = data;
    *len_p = len;
    return MSR_OK;

err_free:
    msr_free(data);
err_close:
    close(fd);
    return st;
}

msr_status_t msr_tckpt_io_mkdirs(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path || path[0] == '\0') {
        MSR_ERROR("checkpoint: bad directory name '%s'", dir);
        return MSR_ERR_INVALID_ARG;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            msr_status_t st = msr_status_from_errno(errno);
            MSR_ERROR("checkpoint: cannot create directory %s: %s", path, strerror(errno));
            return st;
        }
        *p = saved;
        if (saved == '\0')
            break;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        MSR_ERROR("checkpoint: %s is not a directory", dir);
        return MSR_ERR_INVALID_ARG;
    }
    return MSR_OK;
}

msr_status_t msr_tckpt_io_size(const char *path, uint64_t *size_p)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return msr_status_from_errno(errno);
    *size_p = (uint64_t)sb.st_size;
    return MSR_OK;
}

msr_status_t msr_tckpt_io_list(const char *dir, void (*fn)(void *arg, const char *name), void *arg)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        msr_status_t st = msr_status_from_errno(errno);
        if (st != MSR_ERR_NOT_FOUND)
            MSR_ERROR("checkpoint: cannot list %s: %s", dir, strerror(errno));
        return st;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            fn(arg, e->d_name);
    }
    closedir(d);
    return MSR_OK;
}
