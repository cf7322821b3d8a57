/* The optimizer's moments in a file, streamed a chunk at a time (see
 * offload.h). */
#include "parallel/offload.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "parallel/offload_impl.h"

/* What slot s holds. */
enum { HOLD_NONE, HOLD_READ, HOLD_WRITE };

struct msr_offload {
    msr_offload_config_t cfg;
    char *path;
    int fd, direct, failed;
    const msr_offload_engine_ops_t *ops;
    msr_offload_engine_t *eng;
    char engine_name[24];
    size_t count;       /* elements */
    size_t chunk_bytes; /* in use: cfg's, or less for a small store */
    size_t per;         /* elements per chunk: chunk_bytes / 8 */
    size_t nchunks;
    uint32_t *crc; /* (nchunks) of each chunk as last written */
    unsigned char *buf[MSR_OFFLOAD_SLOTS];
    int hold[MSR_OFFLOAD_SLOTS];
    size_t held[MSR_OFFLOAD_SLOTS]; /* the chunk a slot's operation moves */
};

int msr_offload_io_parse(const char *name)
{
    if (strcmp(name, "threads") == 0)
        return MSR_OFFLOAD_IO_THREADS;
    if (strcmp(name, "uring") == 0)
        return MSR_OFFLOAD_IO_URING;
    return -1;
}

msr_status_t msr_offload_config_check(const msr_offload_config_t *cfg)
{
    size_t c = cfg->chunk_bytes;
    if (c != 0 &&
        (c < MSR_OFFLOAD_CHUNK_MIN || c > MSR_OFFLOAD_CHUNK_MAX || c % MSR_OFFLOAD_ALIGN != 0)) {
        return msr_err(MSR_ERR_INVALID_ARG,
                       "offload: a chunk of %zu bytes is not a multiple of %u in [%u, %u]", c,
                       MSR_OFFLOAD_ALIGN, MSR_OFFLOAD_CHUNK_MIN, MSR_OFFLOAD_CHUNK_MAX);
    }
#ifndef MSR_HAVE_LIBURING
    if (cfg->io == MSR_OFFLOAD_IO_URING) {
        return msr_err(MSR_ERR_INVALID_ARG,
                       "offload: io_uring is not in this build (built without liburing)");
    }
#endif
    if (cfg->mode == MSR_OFFLOAD_DISK && (cfg->dir == NULL || cfg->dir[0] == '\0'))
        return msr_err(MSR_ERR_INVALID_ARG, "offload: the disk mode needs a directory");
    return MSR_OK;
}

static size_t chunk_of(const msr_offload_t *off, size_t k)
{
    return MSR_MIN(off->per, off->count - k * off->per);
}

msr_status_t msr_offload_open(const char *path, const char *dir, int *fd_p, int *direct_p)
{
    int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    int fd = open(path, flags | O_DIRECT, 0600);
    *direct_p = fd >= 0;
    if (fd < 0 && errno == EINVAL) { /* tmpfs and the like */
        fd = open(path, flags, 0600);
        if (fd >= 0)
            MSR_WARN("offload: %s takes no O_DIRECT: the data goes through the page cache", dir);
    }
    *fd_p = fd;
    if (fd < 0)
        return msr_err(MSR_ERR_IO, "offload: cannot create %s: %s", path, strerror(errno));
    if (fchmod(fd, 0600) != 0) /* whatever the umask said */
        return msr_err(MSR_ERR_IO, "offload: cannot make %s 0600: %s", path, strerror(errno));
    return MSR_OK;
}

char *msr_offload_file_path(const char *dir, const char *kind, int rank)
{
    size_t plen = strlen(dir) + strlen(kind) + 64;
    char *path = msr_malloc(plen);
    if (path != NULL)
        snprintf(path, plen, "%s/msrun-%s-rank%d-%ld.bin", dir, kind, rank, (long)getpid());
    return path;
}

void msr_offload_file_close(int fd, const char *path, int keep)
{
    if (fd < 0)
        return;
    close(fd);
    if (!keep && unlink(path) != 0)
        MSR_WARN("offload: cannot remove %s: %s", path, strerror(errno));
}

msr_status_t msr_offload_io_error(const char *path, int write, const char *what, size_t k,
                                  size_t done, size_t want, int err)
{
    if (err != 0) {
        return msr_err(MSR_ERR_IO, "offload: %s %s %zu of %s: %s%s", write ? "writing" : "reading",
                       what, k, path, strerror(err),
                       err == ENOSPC || err == EFBIG ? " (the disk or the file size limit is full)"
                                                     : "");
    }
    return msr_err(MSR_ERR_IO, "offload: short %s of %s %zu of %s: %zu of %zu bytes",
                   write ? "write" : "read", what, k, path, done, want);
}

static msr_status_t io_failed(msr_offload_t *off, int write, size_t k, size_t done, int err)
{
    off->failed = 1;
    return msr_offload_io_error(off->path, write, "chunk", k, done, off->chunk_bytes, err);
}

/* Waits for slot s's operation; checks that it moved the whole chunk. */
static msr_status_t slot_wait(msr_offload_t *off, int s)
{
    if (off->hold[s] == HOLD_NONE)
        return MSR_OK;
    size_t done;
    int err, write = off->hold[s] == HOLD_WRITE;
    off->ops->wait(off->eng, s, &done, &err);
    off->hold[s] = HOLD_NONE;
    if (err != 0 || done != off->chunk_bytes)
        return io_failed(off, write, off->held[s], done, err);
    return MSR_OK;
}

static void slot_submit(msr_offload_t *off, int s, int write, size_t k)
{
    off->hold[s] = write ? HOLD_WRITE : HOLD_READ;
    off->held[s] = k;
    off->ops->submit(off->eng, s, write, off->buf[s], off->chunk_bytes,
                     (off_t)(k * off->chunk_bytes));
}

/* Waits for every slot, keeping the first error (and its text: what
 * fails after it is not reported). */
static msr_status_t drain(msr_offload_t *off, msr_status_t st)
{
    for (int s = 0; s < MSR_OFFLOAD_SLOTS; s++) {
        if (st != MSR_OK && off->hold[s] != HOLD_NONE) {
            size_t done;
            int err;
            off->ops->wait(off->eng, s, &done, &err);
            off->hold[s] = HOLD_NONE;
            continue;
        }
        if (st == MSR_OK)
            st = slot_wait(off, s);
    }
    if (st != MSR_OK)
        off->failed = 1;
    return st;
}

/* Checks a chunk just read against the CRC it was written with. */
static msr_status_t check_chunk(msr_offload_t *off, int s, size_t k)
{
    uint32_t crc = msr_crc32(0, off->buf[s], off->chunk_bytes);
    if (crc == off->crc[k])
        return MSR_OK;
    off->failed = 1;
    return msr_err(MSR_ERR_CORRUPT,
                   "offload: chunk %zu of %s (bytes %zu..%zu) changed underneath: crc %08x, "
                   "written with %08x",
                   k, off->path, k * off->chunk_bytes, (k + 1) * off->chunk_bytes, (unsigned)crc,
                   (unsigned)off->crc[k]);
}

/* Fills slot s with chunk k's new contents (m, v: count floats, the
 * chunk's elements at k * per) and writes it. */
static void put_chunk(msr_offload_t *off, int s, size_t k)
{
    off->crc[k] = msr_crc32(0, off->buf[s], off->chunk_bytes);
    slot_submit(off, s, 1, k);
}

msr_status_t msr_offload_engine_open(msr_offload_io_t io, int fd, int direct, int nslots,
                                     const msr_offload_engine_ops_t **ops_p,
                                     msr_offload_engine_t **eng_p, char name[24])
{
    const msr_offload_engine_ops_t *ops = &msr_offload_threads_ops;
#ifdef MSR_HAVE_LIBURING
    if (io != MSR_OFFLOAD_IO_THREADS)
        ops = &msr_offload_uring_ops;
#endif
    msr_status_t st = ops->create(fd, nslots, eng_p);
    if (st == MSR_ERR_UNSUPPORTED && io == MSR_OFFLOAD_IO_DEFAULT) {
        MSR_WARN("%s: the thread pool instead", msr_err_msg());
        ops = &msr_offload_threads_ops;
        st = ops->create(fd, nslots, eng_p);
    }
    *ops_p = ops;
    snprintf(name, 24, "%s%s", ops->name, direct ? "+direct" : "");
    return st;
}

/* Sizes, buffers and the CRC table. */
static msr_status_t store_alloc(msr_offload_t *off, size_t count)
{
    size_t want = off->cfg.chunk_bytes != 0 ? off->cfg.chunk_bytes : MSR_OFFLOAD_CHUNK_DEFAULT;
    /* a store of fewer than SLOTS chunks: chunks of a SLOTS-th of it, so its
     * buffers are never much more than the moments themselves */
    size_t quarter = (2 * count * sizeof(float) + MSR_OFFLOAD_SLOTS - 1) / MSR_OFFLOAD_SLOTS;
    size_t need = (quarter + MSR_OFFLOAD_ALIGN - 1) / MSR_OFFLOAD_ALIGN * MSR_OFFLOAD_ALIGN;
    off->count = count;
    off->chunk_bytes = MSR_MAX(MSR_MIN(want, need), (size_t)MSR_OFFLOAD_ALIGN);
    off->per = off->chunk_bytes / (2 * sizeof(float));
    off->nchunks = (count + off->per - 1) / off->per;
    off->crc = msr_calloc(off->nchunks + 1, sizeof *off->crc);
    if (off->crc == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for %zu chunks", off->nchunks);
    for (int s = 0; s < MSR_OFFLOAD_SLOTS; s++) {
        void *p = NULL;
        if (posix_memalign(&p, MSR_OFFLOAD_ALIGN, off->chunk_bytes) != 0)
            return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for chunks of %zu bytes",
                           off->chunk_bytes);
        memset(p, 0, off->chunk_bytes);
        off->buf[s] = p;
    }
    return MSR_OK;
}

/* Writes every chunk as zeros (so a disk too small fails at once). */
static msr_status_t write_zeros(msr_offload_t *off)
{
    uint32_t zero_crc = msr_crc32(0, off->buf[0], off->chunk_bytes);
    msr_status_t st = MSR_OK;
    for (size_t k = 0; k < off->nchunks && st == MSR_OK; k++) {
        int s = (int)(k % MSR_OFFLOAD_SLOTS); /* buffers all zero */
        st = slot_wait(off, s);
        off->crc[k] = zero_crc;
        if (st == MSR_OK)
            slot_submit(off, s, 1, k);
    }
    return drain(off, st);
}

msr_status_t msr_offload_create(const msr_offload_config_t *cfg, size_t count,
                                msr_offload_t **off_p)
{
    return msr_offload_create_as(cfg, "offload", count, off_p);
}

msr_status_t msr_offload_create_as(const msr_offload_config_t *cfg, const char *kind, size_t count,
                                   msr_offload_t **off_p)
{
    msr_status_t st = msr_offload_config_check(cfg);
    if (st != MSR_OK)
        return st;
    if (cfg->mode != MSR_OFFLOAD_DISK)
        return msr_err(MSR_ERR_INVALID_ARG, "offload: a store is for the disk mode only");
    msr_offload_t *off = msr_calloc(1, sizeof *off);
    if (off == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory");
    off->cfg = *cfg;
    off->fd = -1;
    off->path = msr_offload_file_path(cfg->dir, kind, cfg->rank);
    off->cfg.dir = msr_strdup(cfg->dir);
    if (off->path == NULL || off->cfg.dir == NULL) {
        st = msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory");
        goto err_free;
    }
    if ((st = store_alloc(off, count)) != MSR_OK ||
        (st = msr_offload_open(off->path, off->cfg.dir, &off->fd, &off->direct)) != MSR_OK)
        goto err_free;
    st = msr_offload_engine_open(off->cfg.io, off->fd, off->direct, MSR_OFFLOAD_SLOTS, &off->ops,
                                 &off->eng, off->engine_name);
    if (st != MSR_OK || (st = write_zeros(off)) != MSR_OK)
        goto err_free;
    off->failed = 0;
    *off_p = off;
    return MSR_OK;

err_free:
    off->cfg.keep = 0; /* nothing left behind */
    msr_offload_destroy(off);
    return st;
}

void msr_offload_destroy(msr_offload_t *off)
{
    if (off == NULL)
        return;
    if (off->eng != NULL) {
        (void)drain(off, MSR_OK);
        off->ops->destroy(off->eng);
    }
    msr_offload_file_close(off->fd, off->path, off->cfg.keep);
    for (int s = 0; s < MSR_OFFLOAD_SLOTS; s++)
        free(off->buf[s]);
    msr_free(off->crc);
    msr_free((char *)off->cfg.dir);
    msr_free(off->path);
    msr_free(off);
}

static msr_status_t refuse_failed(const msr_offload_t *off)
{
    return msr_err(MSR_ERR_STATE, "offload: %s failed before and may hold a half-done step",
                   off->path);
}

msr_status_t msr_offload_step(msr_offload_t *off, msr_offload_chunk_fn fn, void *arg)
{
    if (off->failed)
        return refuse_failed(off);
    size_t N = off->nchunks;
    msr_status_t st = MSR_OK;
    for (size_t k = 0; k < MSR_MIN((size_t)MSR_OFFLOAD_AHEAD, N); k++)
        slot_submit(off, (int)(k % MSR_OFFLOAD_SLOTS), 0, k);
    for (size_t k = 0; k < N && st == MSR_OK; k++) {
        int s = (int)(k % MSR_OFFLOAD_SLOTS);
        st = slot_wait(off, s);
        size_t ka = k + MSR_OFFLOAD_AHEAD; /* its slot last wrote chunk ka - SLOTS */
        if (st == MSR_OK && ka < N) {
            int sa = (int)(ka % MSR_OFFLOAD_SLOTS);
            st = slot_wait(off, sa);
            if (st == MSR_OK)
                slot_submit(off, sa, 0, ka);
        }
        if (st == MSR_OK)
            st = check_chunk(off, s, k);
        if (st == MSR_OK) {
            float *m = (float *)off->buf[s], *v = m + off->per;
            st = fn(arg, k * off->per, chunk_of(off, k), m, v);
        }
        if (st == MSR_OK)
            put_chunk(off, s, k);
    }
    return drain(off, st);
}

msr_status_t msr_offload_read_all(msr_offload_t *off, float *m, float *v)
{
    if (off->failed)
        return refuse_failed(off);
    msr_status_t st = MSR_OK;
    for (size_t k = 0; k < off->nchunks && st == MSR_OK; k++) {
        slot_submit(off, 0, 0, k);
        st = slot_wait(off, 0);
        if (st == MSR_OK)
            st = check_chunk(off, 0, k);
        if (st == MSR_OK) {
            const float *cm = (const float *)off->buf[0];
            size_t n = chunk_of(off, k);
            memcpy(m + k * off->per, cm, n * sizeof(float));
            memcpy(v + k * off->per, cm + off->per, n * sizeof(float));
        }
    }
    return drain(off, st);
}

msr_status_t msr_offload_write_all(msr_offload_t *off, const float *m, const float *v)
{
    if (off->failed)
        return refuse_failed(off);
    msr_status_t st = MSR_OK;
    for (size_t k = 0; k < off->nchunks && st == MSR_OK; k++) {
        int s = (int)(k % MSR_OFFLOAD_SLOTS);
        st = slot_wait(off, s);
        if (st != MSR_OK)
            break;
        float *cm = (float *)off->buf[s];
        size_t n = chunk_of(off, k);
        memset(cm, 0, off->chunk_bytes);
        memcpy(cm, m + k * off->per, n * sizeof(float));
        memcpy(cm + off->per, v + k * off->per, n * sizeof(float));
        put_chunk(off, s, k);
    }
    return drain(off, st);
}

/* Elements [at, at + n) of the moments, a chunk at a time through slot 0:
 * each chunk read and checked, then copied out to m and v (get), or
 * overwritten from pm and pv (put: m and v NULL) and written back. */
static msr_status_t range_move(msr_offload_t *off, size_t at, size_t n, float *m, float *v,
                               const float *pm, const float *pv)
{
    if (off->failed)
        return refuse_failed(off);
    if (at > off->count || n > off->count - at)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "offload: moments [%zu, %zu) past the %zu elements of %s", at, at + n,
                       off->count, off->path);
    msr_status_t st = MSR_OK;
    for (size_t i = at; i < at + n && st == MSR_OK;) {
        size_t k = i / off->per, in = i - k * off->per;
        size_t c = MSR_MIN(n - (i - at), chunk_of(off, k) - in);
        slot_submit(off, 0, 0, k);
        st = slot_wait(off, 0);
        if (st == MSR_OK)
            st = check_chunk(off, 0, k);
        if (st != MSR_OK)
            break;
        float *cm = (float *)off->buf[0] + in, *cv = cm + off->per;
        if (pm != NULL) {
            memcpy(cm, pm + (i - at), c * sizeof(float));
            memcpy(cv, pv + (i - at), c * sizeof(float));
            put_chunk(off, 0, k);
            st = slot_wait(off, 0);
        } else {
            memcpy(m + (i - at), cm, c * sizeof(float));
            memcpy(v + (i - at), cv, c * sizeof(float));
        }
        i += c;
    }
    return drain(off, st);
}

msr_status_t msr_offload_get(msr_offload_t *off, size_t at, size_t n, float *m, float *v)
{
    return range_move(off, at, n, m, v, NULL, NULL);
}

msr_status_t msr_offload_put(msr_offload_t *off, size_t at, size_t n, const float *m,
                             const float *v)
{
    return range_move(off, at, n, NULL, NULL, m, v);
}

const char *msr_offload_path(const msr_offload_t *off)
{
    return off->path;
}

size_t msr_offload_chunk_bytes(const msr_offload_t *off)
{
    return off->chunk_bytes;
}

size_t msr_offload_resident(const msr_offload_t *off)
{
    return MSR_OFFLOAD_SLOTS * off->chunk_bytes + (off->nchunks + 1) * sizeof(uint32_t);
}

const char *msr_offload_engine(const msr_offload_t *off)
{
    return off->engine_name;
}
