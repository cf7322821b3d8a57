/* Gradient offload: a rank's gradient shard in a file, a chunk at a time,
 * the next one read ahead and the last one written behind (see
 * offload_grads.h). */
#include "parallel/offload_grads.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/err.h"
#include "base/status.h"
#include "parallel/offload_impl.h"

/* The store's buffers: the chunk in use, the one being written behind and
 * the one being read ahead; the engine's slots for the last two. */
enum { GB_BUFS = 3, SLOT_BEHIND = 0, SLOT_AHEAD = 1, GB_SLOTS = 2 };

struct msr_grads {
    size_t count, chunk, per, nchunks; /* floats, a chunk's bytes and floats, chunks */
    int fd, keep, direct;
    char *path;
    const msr_offload_engine_ops_t *ops;
    msr_offload_engine_t *eng;
    char engine_name[24];
    float *buf[GB_BUFS]; /* chunk bytes each, aligned */
    int cur_b;           /* the buffer of the chunk in use, or -1 */
    size_t cur;          /* its index, or SIZE_MAX */
    int dirty;           /* changed since read or written */
    size_t prev;         /* the chunk in use before it: the direction of the reads ahead */
    /* the write behind and the read ahead in flight: their buffers (-1:
     * none) and chunks */
    int behind_b, ahead_b;
    size_t behind_k, ahead_k;
    uint32_t *crc;    /* [nchunks] */
    uint8_t *written; /* [nchunks] the chunk is in the file (or its write in flight) */
    msr_grads_stats_t stats;
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
    g->cur = g->prev = SIZE_MAX;
    g->cur_b = g->behind_b = g->ahead_b = -1;
    g->path = msr_offload_file_path(cfg->dir, "grads", cfg->rank);
    g->crc = msr_calloc(g->nchunks + 1, sizeof *g->crc);
    g->written = msr_calloc(g->nchunks + 1, 1);
    int bufs = g->path != NULL && g->crc != NULL && g->written != NULL;
    for (int b = 0; b < GB_BUFS && bufs; b++) {
        void *p = NULL;
        bufs = posix_memalign(&p, MSR_OFFLOAD_ALIGN, g->chunk) == 0;
        g->buf[b] = p;
    }
    if (!bufs) {
        st = msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for a gradient store");
        goto err_free;
    }
    if ((st = msr_offload_open(g->path, cfg->dir, &g->fd, &g->direct)) != MSR_OK ||
        (st = msr_offload_engine_open(cfg->io, g->fd, g->direct, GB_SLOTS, &g->ops, &g->eng,
                                      g->engine_name)) != MSR_OK)
        goto err_free;
    *g_p = g;
    return MSR_OK;

err_free:
    g->keep = 0; /* nothing left behind */
    msr_grads_destroy(g);
    return st;
}

void msr_grads_destroy(msr_grads_t *g)
{
    if (g == NULL)
        return;
    if (g->eng != NULL) /* waits for the write and the read in flight */
        g->ops->destroy(g->eng);
    if (g->path != NULL)
        msr_offload_file_close(g->fd, g->path, g->keep);
    for (int b = 0; b < GB_BUFS; b++)
        free(g->buf[b]);
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

/* Waits for the engine's slot (the write behind or the read ahead) and
 * checks that it moved chunk k whole. */
static msr_status_t slot_wait(msr_grads_t *g, int slot, size_t k)
{
    size_t done;
    int err;
    g->ops->wait(g->eng, slot, &done, &err);
    if (err != 0 || done != g->chunk)
        return fail(g, msr_offload_io_error(g->path, slot == SLOT_BEHIND, "gradient chunk", k, done,
                                            g->chunk, err));
    return MSR_OK;
}

/* The write behind, if any, ended: its buffer free again. */
static msr_status_t behind_end(msr_grads_t *g)
{
    if (g->behind_b < 0)
        return MSR_OK;
    g->behind_b = -1;
    return slot_wait(g, SLOT_BEHIND, g->behind_k);
}

/* A read ahead of a chunk not wanted now ended and dropped. */
static msr_status_t ahead_drop(msr_grads_t *g)
{
    if (g->ahead_b < 0)
        return MSR_OK;
    g->ahead_b = -1;
    return slot_wait(g, SLOT_AHEAD, g->ahead_k);
}

/* A buffer neither in use nor in flight. */
static int free_buf(const msr_grads_t *g)
{
    int b = 0;
    while (b == g->cur_b || b == g->behind_b || b == g->ahead_b)
        b++;
    return b;
}

/* Chunk k's CRC against the one written, after a read into buf. */
static msr_status_t crc_check(msr_grads_t *g, size_t k, const float *buf)
{
    if (msr_crc32(0, buf, used_of(g, k)) == g->crc[k])
        return MSR_OK;
    return fail(g, msr_err(MSR_ERR_CORRUPT,
                           "offload: gradient chunk %zu of %s (bytes %zu..%zu) changed "
                           "underneath (its CRC differs from the one written)",
                           k, g->path, k * g->chunk, (k + 1) * g->chunk));
}

/* The chunk in use leaves: written behind when it changed (after the write
 * before it ended: one in flight), else dropped. */
static msr_status_t chunk_leave(msr_grads_t *g)
{
    if (g->cur == SIZE_MAX)
        return MSR_OK;
    size_t k = g->cur;
    msr_status_t st = MSR_OK;
    if (g->dirty && (st = behind_end(g)) == MSR_OK) {
        size_t used = used_of(g, k);
        float *b = g->buf[g->cur_b];
        memset((char *)b + used, 0, g->chunk - used);
        g->crc[k] = msr_crc32(0, b, used);
        g->written[k] = 1;
        g->ops->submit(g->eng, SLOT_BEHIND, 1, b, g->chunk, (off_t)(k * g->chunk));
        g->behind_b = g->cur_b;
        g->behind_k = k;
        g->stats.writes++;
        g->dirty = 0;
    }
    g->prev = k;
    g->cur = SIZE_MAX;
    g->cur_b = -1;
    return st;
}

/* Starts reading chunk j ahead, when it is one, in the file, and not
 * being written (its write would race the read). */
static void ahead_start(msr_grads_t *g, size_t j)
{
    if (j >= g->nchunks || !g->written[j] || g->ahead_b >= 0 ||
        (g->behind_b >= 0 && g->behind_k == j))
        return;
    g->ahead_b = free_buf(g);
    g->ahead_k = j;
    g->ops->submit(g->eng, SLOT_AHEAD, 0, g->buf[g->ahead_b], g->chunk, (off_t)(j * g->chunk));
}

/* Chunk k into use (the one there written behind when it changed); fill
 * 1: its elements will all be set, so its old ones are not read; ahead 1:
 * the next chunk the way the chunks go is read ahead (a pass that reads). */
static msr_status_t chunk_load(msr_grads_t *g, size_t k, int fill, int ahead)
{
    if (g->cur == k)
        return MSR_OK;
    msr_status_t st = chunk_leave(g);
    if (st == MSR_OK && g->ahead_b >= 0 && g->ahead_k == k) { /* read ahead */
        int b = g->ahead_b;
        g->ahead_b = -1;
        if ((st = slot_wait(g, SLOT_AHEAD, k)) == MSR_OK && !fill)
            st = crc_check(g, k, g->buf[b]);
        if (st == MSR_OK && fill)
            memset(g->buf[b], 0, g->chunk);
        g->stats.ahead += !fill;
        g->cur_b = b;
    } else if (st == MSR_OK && (st = ahead_drop(g)) == MSR_OK) {
        int b = free_buf(g);
        if (fill || !g->written[k]) {
            memset(g->buf[b], 0, g->chunk);
        } else {
            /* its write behind, if it is the one in flight, lands first */
            if (g->behind_b >= 0 && g->behind_k == k)
                st = behind_end(g);
            int err = 0;
            size_t done = st == MSR_OK ? msr_offload_rw(g->fd, 0, g->buf[b], g->chunk,
                                                        (off_t)(k * g->chunk), &err)
                                       : 0;
            if (st == MSR_OK && (err != 0 || done != g->chunk))
                st = fail(
                    g, msr_offload_io_error(g->path, 0, "gradient chunk", k, done, g->chunk, err));
            if (st == MSR_OK)
                st = crc_check(g, k, g->buf[b]);
            g->stats.misses++;
        }
        g->cur_b = b;
    }
    if (st != MSR_OK) {
        g->cur_b = -1;
        return st;
    }
    g->stats.reads += !fill && g->written[k];
    g->cur = k;
    if (ahead) /* down when the pass came from the chunk above, else up */
        ahead_start(g, g->prev == k + 1 ? k - 1 : k + 1);
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
        if ((st = chunk_load(g, k, whole, add)) != MSR_OK)
            break;
        float *dst = g->buf[g->cur_b] + in;
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
        if ((st = chunk_load(g, k, 0, 1)) != MSR_OK)
            break;
        memcpy(dst + (at - off), g->buf[g->cur_b] + in, c * sizeof(float));
        at += c;
    }
    return st;
}

msr_status_t msr_grads_flush(msr_grads_t *g)
{
    if (g->failed != MSR_OK)
        return refused(g);
    /* the chunk in use written (and kept in use), and the write behind */
    msr_status_t st = behind_end(g);
    if (st != MSR_OK || g->cur == SIZE_MAX || !g->dirty)
        return st;
    size_t k = g->cur, used = used_of(g, k);
    float *b = g->buf[g->cur_b];
    memset((char *)b + used, 0, g->chunk - used);
    int err;
    size_t done = msr_offload_rw(g->fd, 1, b, g->chunk, (off_t)(k * g->chunk), &err);
    if (err != 0 || done != g->chunk)
        return fail(g, msr_offload_io_error(g->path, 1, "gradient chunk", k, done, g->chunk, err));
    g->crc[k] = msr_crc32(0, b, used);
    g->written[k] = 1;
    g->stats.writes++;
    g->dirty = 0;
    return MSR_OK;
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
    return GB_BUFS * g->chunk + (g->nchunks + 1) * (sizeof(uint32_t) + 1);
}

const char *msr_grads_engine(const msr_grads_t *g)
{
    return g->engine_name;
}

const msr_grads_stats_t *msr_grads_stats(const msr_grads_t *g)
{
    return &g->stats;
}
