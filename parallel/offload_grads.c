/* Gradient offload: a rank's gradient shard in a file, a chunk at a time
 * through one buffer (see offload_grads.h). */
#include "parallel/offload_grads.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/err.h"
#include "base/status.h"
#include "parallel/offload_impl.h"

struct msr_grads {
    size_t count, chunk, per, nchunks; /* floats, a chunk's bytes and floats, chunks */
    int fd, keep, direct;
    char *path;
    float *buf;       /* the chunk in memory (chunk bytes, aligned) */
    size_t cur;       /* its index, or SIZE_MAX */
    int dirty;        /* changed since read or written */
    uint32_t *crc;    /* [nchunks] */
    uint8_t *written; /* [nchunks] the chunk is in the file */
    msr_status_t failed;
    char *why; /* the first error's text */
};

size_t msr_grads_chunk_of(size_t chunk_bytes, size_t count)
{
    size_t want = chunk_bytes != 0 ? chunk_bytes : MSR_OFFLOAD_CHUNK_DEFAULT;
    size_t need =
        (count * sizeof(float) + MSR_OFFLOAD_ALIGN - 1) / MSR_OFFLOAD_ALIGN * MSR_OFFLOAD_ALIGN;
    return MSR_MAX(MSR_MIN(want, need), (size_t)MSR_OFFLOAD_CHUNK_MIN);
}

msr_status_t msr_grads_create(const msr_offload_config_t *cfg, size_t count, msr_grads_t **g_p)
{
    msr_status_t st = msr_offload_config_check(cfg);
    if (st != MSR_OK)
        return st;
    if (cfg->mode != MSR_OFFLOAD_DISK)
        return msr_err(MSR_ERR_INVALID_ARG, "offload: the gradients go to disk only");
    if (count > SIZE_MAX / sizeof(float) - MSR_OFFLOAD_ALIGN)
        return msr_err(MSR_ERR_INVALID_ARG, "offload: a gradient shard of %zu floats", count);
    msr_grads_t *g = msr_calloc(1, sizeof *g);
    if (g == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory");
    g->count = count;
    g->chunk = msr_grads_chunk_of(cfg->chunk_bytes, count);
    g->per = g->chunk / sizeof(float);
    g->nchunks = (count + g->per - 1) / g->per;
    g->fd = -1;
    g->keep = cfg->keep;
    g->cur = SIZE_MAX;
    void *p = NULL;
    g->path = msr_offload_file_path(cfg->dir, "grads", cfg->rank);
    g->crc = msr_calloc(g->nchunks + 1, sizeof *g->crc);
    g->written = msr_calloc(g->nchunks + 1, 1);
    if (g->path == NULL || g->crc == NULL || g->written == NULL ||
        posix_memalign(&p, MSR_OFFLOAD_ALIGN, g->chunk) != 0) {
        st = msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for a gradient store");
        goto err_free;
    }
    g->buf = p;
    if ((st = msr_offload_open(g->path, cfg->dir, &g->fd, &g->direct)) != MSR_OK)
        goto err_free;
    *g_p = g;
    return MSR_OK;

err_free:
    msr_grads_destroy(g);
    return st;
}

void msr_grads_destroy(msr_grads_t *g)
{
    if (g == NULL)
        return;
    if (g->path != NULL)
        msr_offload_file_close(g->fd, g->path, g->keep);
    free(g->buf);
    msr_free(g->crc);
    msr_free(g->written);
    msr_free(g->why);
    msr_free(g->path);
    msr_free(g);
}

/* Remembers the error just set (st, msr_err_msg) as the store's last. */
static msr_status_t fail(msr_grads_t *g, msr_status_t st)
{
    g->failed = st;
    g->why = msr_strdup(msr_err_msg());
    return st;
}

static msr_status_t refused(const msr_grads_t *g)
{
    return msr_err(g->failed, "%s", g->why != NULL ? g->why : msr_status_str(g->failed));
}

/* The bytes of chunk k that hold elements (the last one's may be fewer). */
static size_t used_of(const msr_grads_t *g, size_t k)
{
    return MSR_MIN(g->per, g->count - k * g->per) * sizeof(float);
}

static msr_status_t chunk_write(msr_grads_t *g)
{
    if (g->cur == SIZE_MAX || !g->dirty)
        return MSR_OK;
    size_t k = g->cur, used = used_of(g, k);
    memset((char *)g->buf + used, 0, g->chunk - used);
    int err;
    size_t done = msr_offload_rw(g->fd, 1, g->buf, g->chunk, (off_t)(k * g->chunk), &err);
    if (err != 0 || done != g->chunk)
        return fail(g, msr_offload_io_error(g->path, 1, "gradient chunk", k, done, g->chunk, err));
    g->crc[k] = msr_crc32(0, g->buf, used);
    g->written[k] = 1;
    g->dirty = 0;
    return MSR_OK;
}

/* Chunk k into the buffer (the one there written first when it changed);
 * fill 1: its elements will all be set, so its old ones are not read. */
static msr_status_t chunk_load(msr_grads_t *g, size_t k, int fill)
{
    if (g->cur == k)
        return MSR_OK;
    msr_status_t st = chunk_write(g);
    if (st != MSR_OK)
        return st;
    g->cur = SIZE_MAX;
    if (fill || !g->written[k]) {
        memset(g->buf, 0, g->chunk);
    } else {
        int err;
        size_t done = msr_offload_rw(g->fd, 0, g->buf, g->chunk, (off_t)(k * g->chunk), &err);
        if (err != 0 || done != g->chunk)
            return fail(g,
                        msr_offload_io_error(g->path, 0, "gradient chunk", k, done, g->chunk, err));
        if (msr_crc32(0, g->buf, used_of(g, k)) != g->crc[k])
            return fail(g, msr_err(MSR_ERR_CORRUPT,
                                   "offload: gradient chunk %zu of %s (bytes %zu..%zu) changed "
                                   "underneath (its CRC differs from the one written)",
                                   k, g->path, k * g->chunk, (k + 1) * g->chunk));
    }
    g->cur = k;
    return MSR_OK;
}

static msr_status_t range_check(const msr_grads_t *g, size_t off, size_t n)
{
    if (g->failed != MSR_OK)
        return refused(g);
    if (off > g->count || n > g->count - off)
        return msr_err(MSR_ERR_INVALID_ARG, "offload: gradients [%zu, %zu) of %s, which holds %zu",
                       off, off + n, g->path, g->count);
    return MSR_OK;
}

msr_status_t msr_grads_put(msr_grads_t *g, size_t off, size_t n, const float *src, int add)
{
    return msr_grads_put_sumsq(g, off, n, src, add, NULL);
}

msr_status_t msr_grads_put_sumsq(msr_grads_t *g, size_t off, size_t n, const float *src, int add,
                                 double lanes[MSR_SUMSQ_LANES])
{
    msr_status_t st = range_check(g, off, n);
    for (size_t at = off; at < off + n && st == MSR_OK;) {
        size_t k = at / g->per, in = at - k * g->per;
        size_t c = MSR_MIN(off + n - at, g->per - in);
        int whole = !add && in == 0 && c * sizeof(float) == used_of(g, k);
        if ((st = chunk_load(g, k, whole)) != MSR_OK)
            break;
        float *dst = g->buf + in;
        const float *s = src + (at - off);
        if (add) {
            for (size_t i = 0; i < c; i++)
                dst[i] += s[i];
        } else {
            memcpy(dst, s, c * sizeof(float));
        }
        if (lanes != NULL)
            msr_sumsq_add(lanes, dst, c, at - off);
        g->dirty = 1;
        at += c;
    }
    return st;
}

msr_status_t msr_grads_get(msr_grads_t *g, size_t off, size_t n, float *dst)
{
    msr_status_t st = range_check(g, off, n);
    for (size_t at = off; at < off + n && st == MSR_OK;) {
        size_t k = at / g->per, in = at - k * g->per;
        size_t c = MSR_MIN(off + n - at, g->per - in);
        if ((st = chunk_load(g, k, 0)) != MSR_OK)
            break;
        memcpy(dst + (at - off), g->buf + in, c * sizeof(float));
        at += c;
    }
    return st;
}

msr_status_t msr_grads_flush(msr_grads_t *g)
{
    if (g->failed != MSR_OK)
        return refused(g);
    return chunk_write(g);
}

const char *msr_grads_path(const msr_grads_t *g)
{
    return g->path;
}

size_t msr_grads_chunk_bytes(const msr_grads_t *g)
{
    return g->chunk;
}

size_t msr_grads_resident(const msr_grads_t *g)
{
    return g->chunk + (g->nchunks + 1) * (sizeof(uint32_t) + 1);
}
