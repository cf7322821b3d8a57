/* The safetensors format's files (safetensors.h): a reader that reads one
 * tensor range at a time with pread, and a writer whose processes pwrite
 * their parts into a temporary file that one of them renames into place. */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"

/* ---- reading ---- */

struct msr_st_file {
    int fd;
    char *path;
    uint64_t data_start; /* 8 + N */
    msr_st_tensor_t *tensors;
    int n;
};

static msr_status_t errno_status(int e)
{
    return e == ENOENT                 ? MSR_ERR_NOT_FOUND
           : e == EACCES || e == EPERM ? MSR_ERR_PERMISSION
                                       : MSR_ERR_IO;
}

/* Reads exactly len bytes at off; a short read is MSR_ERR_TRUNCATED. */
static msr_status_t pread_all(int fd, void *buf, size_t len, uint64_t off, const char *path)
{
    char *b = buf;
    while (len > 0) {
        ssize_t r = pread(fd, b, len, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return msr_err(MSR_ERR_IO, "%s: read at byte %llu: %s", path, (unsigned long long)off,
                           strerror(errno));
        if (r == 0)
            return msr_err(MSR_ERR_TRUNCATED, "%s: the file ends at byte %llu, before its data",
                           path, (unsigned long long)off);
        b += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return MSR_OK;
}

static uint64_t get_le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* The header of an open file into f (its size is size). */
static msr_status_t read_header(msr_st_file_t *f, uint64_t size)
{
    unsigned char lenb[8];
    if (size < 8)
        return msr_err(MSR_ERR_CORRUPT,
                       "%s: %llu bytes: too short for a safetensors file (8-byte header length)",
                       f->path, (unsigned long long)size);
    msr_status_t st = pread_all(f->fd, lenb, 8, 0, f->path);
    if (st != MSR_OK)
        return st;
    uint64_t n = get_le64(lenb);
    if (n > MSR_ST_HEADER_MAX)
        return msr_err(MSR_ERR_CORRUPT,
                       "%s: the header length %llu is more than the %u bytes a safetensors "
                       "header may have",
                       f->path, (unsigned long long)n, MSR_ST_HEADER_MAX);
    if (n > size - 8)
        return msr_err(MSR_ERR_CORRUPT,
                       "%s: the header length %llu runs past the end of the file (%llu bytes)",
                       f->path, (unsigned long long)n, (unsigned long long)size);
    char *json = msr_malloc(n + 1);
    if (json == NULL)
        return MSR_ERR_NO_MEMORY;
    if ((st = pread_all(f->fd, json, n, 8, f->path)) == MSR_OK &&
        (st = msr_st_parse_header(json, n, size - 8 - n, &f->tensors, &f->n)) != MSR_OK)
        msr_err_prefix(st, "%s", f->path);
    msr_free(json);
    f->data_start = 8 + n;
    return st;
}

msr_status_t msr_st_open(const char *path, msr_st_file_t **f_p)
{
    msr_st_file_t *f = msr_calloc(1, sizeof *f);
    if (f == NULL || (f->path = msr_strdup(path)) == NULL) {
        msr_free(f);
        return MSR_ERR_NO_MEMORY;
    }
    msr_status_t st;
    struct stat sb;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        st = msr_err(errno_status(errno), "%s: %s", path, strerror(errno));
        goto err_free;
    }
    if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = msr_err(MSR_ERR_IO, "%s: not a regular file", path);
        goto err_close;
    }
    if ((st = read_header(f, (uint64_t)sb.st_size)) != MSR_OK)
        goto err_close;
    *f_p = f;
    return MSR_OK;

err_close:
    close(f->fd);
err_free:
    msr_free(f->path);
    msr_free(f);
    return st;
}

void msr_st_close(msr_st_file_t *f)
{
    if (f == NULL)
        return;
    close(f->fd);
    msr_free(f->tensors);
    msr_free(f->path);
    msr_free(f);
}

const msr_st_tensor_t *msr_st_tensors(const msr_st_file_t *f, int *n_p)
{
    *n_p = f->n;
    return f->tensors;
}

const msr_st_tensor_t *msr_st_find(const msr_st_file_t *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

static int host_is_little(void)
{
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

static float bf16_to_f32(const unsigned char *b)
{
    uint32_t u = (uint32_t)b[0] << 16 | (uint32_t)b[1] << 24;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static void swap4(void *p, uint64_t n)
{
    unsigned char *b = p;
    for (uint64_t i = 0; i < n; i++, b += 4) {
        unsigned char t0 = b[0], t1 = b[1];
        b[0] = b[3];
        b[1] = b[2];
        b[2] = t1;
        b[3] = t0;
    }
}

msr_status_t msr_st_read_f32(const msr_st_file_t *f, const msr_st_tensor_t *t, uint64_t first,
                             uint64_t count, float *dst)
{
    uint64_t elems = msr_st_tensor_elems(t);
    if (t->dtype != MSR_ST_F32 && t->dtype != MSR_ST_BF16)
        return msr_err(MSR_ERR_UNSUPPORTED,
                       "%s: tensor '%s' is %s: only F32 and BF16 tensors are read", f->path,
                       t->name, msr_st_dtype_name(t->dtype));
    if (first > elems || count > elems - first)
        return msr_err(MSR_ERR_INVALID_ARG, "%s: tensor '%s': elements [%llu, +%llu) past its %llu",
                       f->path, t->name, (unsigned long long)first, (unsigned long long)count,
                       (unsigned long long)elems);
    size_t es = msr_st_dtype_size(t->dtype);
    uint64_t off = f->data_start + t->begin + first * es;
    msr_status_t st = MSR_OK;
    if (t->dtype == MSR_ST_F32) {
        st = pread_all(f->fd, dst, (size_t)count * 4, off, f->path);
        if (st == MSR_OK && !host_is_little())
            swap4(dst, count);
    } else {
        unsigned char buf[65536];
        for (uint64_t done = 0; done < count && st == MSR_OK;) {
            uint64_t k = count - done < sizeof buf / 2 ? count - done : sizeof buf / 2;
            st = pread_all(f->fd, buf, (size_t)k * 2, off + done * 2, f->path);
            for (uint64_t i = 0; i < k && st == MSR_OK; i++)
                dst[done + i] = bf16_to_f32(buf + 2 * i);
            done += k;
        }
    }
    if (st != MSR_OK)
        return msr_err_prefix(st, "tensor '%s'", t->name);
    return MSR_OK;
}

/* ---- writing ---- */

struct msr_st_writer {
    int fd;
    char *path, *tmp;
    uint64_t data_start;
    msr_st_tensor_t *tensors;
    int n;
};

/* Appends text to the growing header b (len, cap). */
static int hdr_put(char **b, size_t *len, size_t *cap, const char *text, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = (*cap ? *cap * 2 : 4096) + n;
        char *g = msr_realloc(*b, c);
        if (g == NULL)
            return -1;
        *b = g;
        *cap = c;
    }
    memcpy(*b + *len, text, n);
    *len += n;
    (*b)[*len] = '\0';
    return 0;
}

/* The JSON string of name, escaped. */
static int hdr_put_name(char **b, size_t *len, size_t *cap, const char *name)
{
    int rc = hdr_put(b, len, cap, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)name; *c != '\0' && rc == 0; c++) {
        char e[8];
        int k;
        if (*c == '"' || *c == '\\')
            k = snprintf(e, sizeof e, "\\%c", *c);
        else if (*c < 0x20)
            k = snprintf(e, sizeof e, "\\u%04x", *c);
        else
            k = snprintf(e, sizeof e, "%c", *c);
        rc = hdr_put(b, len, cap, e, (size_t)k);
    }
    return rc == 0 ? hdr_put(b, len, cap, "\"", 1) : rc;
}

#define META  "{\"__metadata__\":{\"format\":\"pt\"}"
#define DTYPE ":{\"dtype\":\"F32\",\"shape\":["

/* Offsets for w->tensors and the header text (padded with spaces so the
 * data starts at a multiple of 8) into *hdr_p, *hlen_p. */
static msr_status_t layout(msr_st_writer_t *w, char **hdr_p, size_t *hlen_p)
{
    char *b = NULL, num[64];
    size_t len = 0, cap = 0;
    uint64_t at = 0;
    int rc = hdr_put(&b, &len, &cap, META, strlen(META));
    for (int i = 0; i < w->n && rc == 0; i++) {
        msr_st_tensor_t *t = &w->tensors[i];
        uint64_t elems = msr_st_tensor_elems(t);
        if (t->name[0] == '\0' || strlen(t->name) > MSR_ST_NAME_MAX || t->ndim < 0 ||
            t->ndim > MSR_ST_MAX_DIMS || elems > (UINT64_MAX - at) / 4) {
            msr_free(b);
            return msr_err(MSR_ERR_INVALID_ARG, "safetensors: tensor %d '%s': bad name or shape", i,
                           t->name);
        }
        t->dtype = MSR_ST_F32;
        t->begin = at;
        t->end = at += elems * 4;
        rc = hdr_put(&b, &len, &cap, ",", 1) || hdr_put_name(&b, &len, &cap, t->name) ||
             hdr_put(&b, &len, &cap, DTYPE, strlen(DTYPE));
        for (int d = 0; d < t->ndim && rc == 0; d++) {
            int k =
                snprintf(num, sizeof num, "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
            rc = hdr_put(&b, &len, &cap, num, (size_t)k);
        }
        int k = snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}",
                         (unsigned long long)t->begin, (unsigned long long)t->end);
        rc = rc || hdr_put(&b, &len, &cap, num, (size_t)k);
    }
    rc = rc || hdr_put(&b, &len, &cap, "}", 1);
    while (rc == 0 && (8 + len) % 8 != 0)
        rc = hdr_put(&b, &len, &cap, " ", 1);
    if (rc != 0 || len > MSR_ST_HEADER_MAX) {
        msr_free(b);
        return rc != 0 ? MSR_ERR_NO_MEMORY
                       : msr_err(MSR_ERR_INVALID_ARG, "safetensors: a header of %zu bytes", len);
    }
    *hdr_p = b;
    *hlen_p = len;
    return MSR_OK;
}

static msr_status_t pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *path)
{
    const char *b = buf;
    while (len > 0) {
        ssize_t r = pwrite(fd, b, len, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return msr_err(MSR_ERR_IO, "%s: write at byte %llu: %s", path, (unsigned long long)off,
                           r < 0 ? strerror(errno) : "nothing written");
        b += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return MSR_OK;
}

/* The creator's part: the header, and the file sized to hold the data. */
static msr_status_t write_header(msr_st_writer_t *w, const char *hdr, size_t hlen)
{
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    uint64_t total = w->data_start + (w->n > 0 ? w->tensors[w->n - 1].end : 0);
    msr_status_t st = pwrite_all(w->fd, lenb, 8, 0, w->tmp);
    if (st == MSR_OK)
        st = pwrite_all(w->fd, hdr, hlen, 8, w->tmp);
    if (st == MSR_OK && ftruncate(w->fd, (off_t)total) != 0)
        st = msr_err(MSR_ERR_IO, "%s: sizing to %llu bytes: %s", w->tmp, (unsigned long long)total,
                     strerror(errno));
    return st;
}

msr_status_t msr_st_writer_open(const char *path, const msr_st_tensor_t *tensors, int n, int create,
                                msr_st_writer_t **w_p)
{
    msr_st_writer_t *w = msr_calloc(1, sizeof *w);
    size_t plen = strlen(path);
    char *hdr = NULL;
    size_t hlen = 0;
    msr_status_t st = MSR_ERR_NO_MEMORY;
    if (w == NULL)
        return st;
    w->fd = -1;
    w->n = n;
    if ((w->path = msr_strdup(path)) == NULL || (w->tmp = msr_malloc(plen + 5)) == NULL ||
        (w->tensors = msr_calloc((size_t)n + 1, sizeof *w->tensors)) == NULL)
        goto err_free;
    snprintf(w->tmp, plen + 5, "%s.tmp", path);
    memcpy(w->tensors, tensors, (size_t)n * sizeof *tensors);
    if ((st = layout(w, &hdr, &hlen)) != MSR_OK)
        goto err_free;
    w->data_start = 8 + hlen;
    w->fd = open(w->tmp, create ? O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC : O_WRONLY | O_CLOEXEC,
                 0644);
    if (w->fd < 0) {
        st = msr_err(errno_status(errno), "%s: %s", w->tmp, strerror(errno));
        goto err_free;
    }
    if (create && (st = write_header(w, hdr, hlen)) != MSR_OK)
        goto err_unlink;
    msr_free(hdr);
    *w_p = w;
    return MSR_OK;

err_unlink:
    close(w->fd);
    w->fd = -1;
    unlink(w->tmp);
err_free:
    msr_free(hdr);
    msr_free(w->tensors);
    msr_free(w->tmp);
    msr_free(w->path);
    msr_free(w);
    return st;
}

msr_status_t msr_st_write_f32(msr_st_writer_t *w, int k, uint64_t first, uint64_t count,
                              const float *src)
{
    if (k < 0 || k >= w->n)
        return msr_err(MSR_ERR_INVALID_ARG, "safetensors: no tensor %d", k);
    const msr_st_tensor_t *t = &w->tensors[k];
    uint64_t elems = msr_st_tensor_elems(t);
    if (first > elems || count > elems - first)
        return msr_err(MSR_ERR_INVALID_ARG, "%s: tensor '%s': elements [%llu, +%llu) past its %llu",
                       w->path, t->name, (unsigned long long)first, (unsigned long long)count,
                       (unsigned long long)elems);
    uint64_t off = w->data_start + t->begin + first * 4;
    if (host_is_little())
        return pwrite_all(w->fd, src, (size_t)count * 4, off, w->tmp);
    msr_status_t st = MSR_OK;
    float buf[4096];
    for (uint64_t done = 0; done < count && st == MSR_OK;) {
        uint64_t n = count - done < 4096 ? count - done : 4096;
        memcpy(buf, src + done, (size_t)n * 4);
        swap4(buf, n);
        st = pwrite_all(w->fd, buf, (size_t)n * 4, off + done * 4, w->tmp);
        done += n;
    }
    return st;
}

/* Syncs the directory holding path, so a rename in it is durable. */
static msr_status_t sync_dir(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return msr_err(MSR_ERR_IO, "%s: syncing the directory: %s", dir, strerror(e));
    }
    close(fd);
    return MSR_OK;
}

static void writer_free(msr_st_writer_t *w)
{
    msr_free(w->tensors);
    msr_free(w->tmp);
    msr_free(w->path);
    msr_free(w);
}

msr_status_t msr_st_writer_close(msr_st_writer_t *w, int commit)
{
    msr_status_t st = MSR_OK;
    if (fsync(w->fd) != 0)
        st = msr_err(MSR_ERR_IO, "%s: fsync: %s", w->tmp, strerror(errno));
    if (close(w->fd) != 0 && st == MSR_OK)
        st = msr_err(MSR_ERR_IO, "%s: close: %s", w->tmp, strerror(errno));
    if (st == MSR_OK && commit) {
        if (rename(w->tmp, w->path) != 0)
            st = msr_err(MSR_ERR_IO, "renaming %s to %s: %s", w->tmp, w->path, strerror(errno));
        else
            st = sync_dir(w->path);
    }
    if (st != MSR_OK && commit)
        unlink(w->tmp);
    writer_free(w);
    return st;
}

void msr_st_writer_abort(msr_st_writer_t *w)
{
    if (w == NULL)
        return;
    close(w->fd);
    unlink(w->tmp);
    writer_free(w);
}
