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
/* A chunk's flags: it is in the file (or its write in flight); it was not
 * in use since msr_grads_fresh, so a set into it reads nothing. */
enum { F_WRITTEN = 1, F_FRESH = 2 };
/* chunk_load's ahead: the next chunk the way the chunks go; none */
#define AHEAD_WAY  (SIZE_MAX - 1)
#define AHEAD_NONE SIZE_MAX

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
    /* the chunk a buffer neither in use nor in flight still holds as it
     * was written (SIZE_MAX: none): a load of it takes it back */
    size_t held[GB_BUFS];
    uint32_t *crc;  /* [nchunks] */
    uint8_t *flags; /* [nchunks] F_WRITTEN, F_FRESH */
    /* the next call told of (msr_grads_next): its range and whether it
     * reads; then SIZE_MAX: not told */
    size_t then, then_n;
    int then_reads;
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
    g->cur = g->prev = g->then = SIZE_MAX;
    g->cur_b = g->behind_b = g->ahead_b = -1;
    for (int b = 0; b < GB_BUFS; b++)
        g->held[b] = SIZE_MAX;
    g->path = msr_offload_file_path(cfg->dir, "grads", cfg->rank);
    g->crc = msr_calloc(g->nchunks + 1, sizeof *g->crc);
    g->flags = msr_calloc(g->nchunks + 1, 1);
    int bufs = g->path != NULL && g->crc != NULL && g->flags != NULL;
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
    msr_free(g->flags);
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

/* The write behind, if any, ended: its buffer free again, still holding
 * the chunk. */
static msr_status_t behind_end(msr_grads_t *g)
{
    int b = g->behind_b;
    if (b < 0)
        return MSR_OK;
    g->behind_b = -1;
    msr_status_t st = slot_wait(g, SLOT_BEHIND, g->behind_k);
    if (st == MSR_OK)
        g->held[b] = g->behind_k;
    return st;
}

/* A read ahead of a chunk not wanted now ended and dropped. */
static msr_status_t ahead_drop(msr_grads_t *g)
{
    if (g->ahead_b < 0)
        return MSR_OK;
    g->ahead_b = -1;
    return slot_wait(g, SLOT_AHEAD, g->ahead_k);
}

/* A buffer neither in use nor in flight, to be filled: one that holds
 * no chunk where there is one, else one whose copy is then lost. */
static int free_buf(msr_grads_t *g)
{
    int pick = -1;
    for (int b = 0; b < GB_BUFS; b++) {
        if (b == g->cur_b || b == g->behind_b || b == g->ahead_b)
            continue;
        if (pick < 0 || g->held[b] == SIZE_MAX)
            pick = b;
    }
    g->held[pick] = SIZE_MAX;
    return pick;
}

/* The free buffer that holds chunk k, or -1. */
static int held_buf(const msr_grads_t *g, size_t k)
{
    for (int b = 0; b < GB_BUFS; b++)
        if (g->held[b] == k && b != g->cur_b && b != g->behind_b && b != g->ahead_b)
            return b;
    return -1;
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
        g->flags[k] |= F_WRITTEN;
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

/* Starts reading chunk j ahead, when it is one, in the file, and neither
 * being written (its write would race the read) nor still in the buffer
 * it was written from. */
static void ahead_start(msr_grads_t *g, size_t j)
{
    if (j >= g->nchunks || !(g->flags[j] & F_WRITTEN) || g->ahead_b >= 0 ||
        (g->behind_b >= 0 && g->behind_k == j) || held_buf(g, j) >= 0)
        return;
    g->ahead_b = free_buf(g);
    g->ahead_k = j;
    g->ops->submit(g->eng, SLOT_AHEAD, 0, g->buf[g->ahead_b], g->chunk, (off_t)(j * g->chunk));
}

/* Chunk k into use (the one there written behind when it changed); fill
 * 1: its elements will all be set, so its old ones are not read; ahead:
 * the chunk then read ahead (AHEAD_WAY: the next one the way the chunks
 * go; AHEAD_NONE). A chunk whose write behind is the one in flight is
 * taken back from its buffer once the write ended (before the chunk in
 * use leaves, whose write would wait for it), and one whose write ended
 * from a buffer that still holds it, not read. */
static msr_status_t chunk_load(msr_grads_t *g, size_t k, int fill, size_t ahead)
{
    /* down when the pass came from the chunk above, else up */
    size_t from = g->cur != SIZE_MAX && g->cur != k ? g->cur : g->prev;
    if (ahead == AHEAD_WAY)
        ahead = from == k + 1 ? k - 1 : k + 1;
    if (g->cur == k) {
        g->flags[k] &= (uint8_t)~F_FRESH; /* set in part now: no longer fresh */
        if (ahead != AHEAD_NONE)
            ahead_start(g, ahead);
        return MSR_OK;
    }
    msr_status_t st = MSR_OK;
    int b = -1, read = 0;
    if (g->behind_b >= 0 && g->behind_k == k) { /* its failure met here */
        b = g->behind_b;
        st = behind_end(g);
    } else {
        b = held_buf(g, k);
    }
    if (b >= 0) {
        g->held[b] = SIZE_MAX;
        g->stats.kept += !fill;
    }
    if (st == MSR_OK)
        st = chunk_leave(g);
    if (st != MSR_OK || b >= 0) {
        if (st == MSR_OK && fill)
            memset(g->buf[b], 0, g->chunk);
    } else if (g->ahead_b >= 0 && g->ahead_k == k) { /* read ahead */
        b = g->ahead_b;
        g->ahead_b = -1;
        if ((st = slot_wait(g, SLOT_AHEAD, k)) == MSR_OK && !fill)
            st = crc_check(g, k, g->buf[b]);
        if (st == MSR_OK && fill)
            memset(g->buf[b], 0, g->chunk);
        g->stats.ahead += !fill;
        read = !fill;
    } else if ((st = ahead_drop(g)) == MSR_OK) {
        b = free_buf(g);
        if (fill || !(g->flags[k] & F_WRITTEN)) {
            memset(g->buf[b], 0, g->chunk);
        } else {
            int err = 0;
            size_t done =
                msr_offload_rw(g->fd, 0, g->buf[b], g->chunk, (off_t)(k * g->chunk), &err);
            if (err != 0 || done != g->chunk)
                st = fail(
                    g, msr_offload_io_error(g->path, 0, "gradient chunk", k, done, g->chunk, err));
            if (st == MSR_OK)
                st = crc_check(g, k, g->buf[b]);
            g->stats.misses++;
            read = 1;
        }
    }
    if (st != MSR_OK)
        return st;
    g->stats.reads += read;
    g->flags[k] &= (uint8_t)~F_FRESH;
    g->cur = k;
    g->cur_b = b;
    if (ahead != AHEAD_NONE)
        ahead_start(g, ahead);
    return MSR_OK;
}

/* Whether a put of [off, off + n) (add: adding) reads chunk k: unless it
 * sets the chunk whole, or a chunk still fresh. */
static int put_reads(const msr_grads_t *g, size_t k, size_t off, size_t n, int add)
{
    if (add)
        return 1;
    size_t lo = k * g->per, hi = lo + used_of(g, k) / sizeof(float);
    return !(g->flags[k] & F_FRESH) && !(off <= lo && off + n >= hi);
}

/* What a call over [off, off + n) (reads: a get or an add) reads ahead as
 * it loads chunk k, whose part ends at element end: the call's next chunk
 * when the call reads it; at its last chunk, nothing when the next call
 * was told of (then_ahead reads for it), else, for a call that reads, the
 * next chunk the way the chunks go. */
static size_t ahead_of(const msr_grads_t *g, size_t k, size_t end, size_t off, size_t n, int reads)
{
    if (end < off + n)
        return put_reads(g, k + 1, off, n, reads) ? k + 1 : AHEAD_NONE;
    return g->then == SIZE_MAX && reads ? AHEAD_WAY : AHEAD_NONE;
}

/* The call told of by msr_grads_next, if any: the first chunk it reads
 * that is not in use read ahead (its first, or the next when it starts in
 * the chunk in use and goes on past it), the slot allowing. */
static void then_ahead(msr_grads_t *g)
{
    size_t off = g->then, n = g->then_n;
    g->then = SIZE_MAX;
    if (off == SIZE_MAX || n == 0)
        return;
    size_t j = off / g->per;
    if (j == g->cur) {
        if (off + n <= (j + 1) * g->per) /* within the chunk in use */
            return;
        j++;
    }
    if (put_reads(g, j, off, n, g->then_reads))
        ahead_start(g, j);
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
        int fill = !put_reads(g, k, off, n, add);
        if ((st = chunk_load(g, k, fill, ahead_of(g, k, at + c, off, n, add))) != MSR_OK)
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
    if (st == MSR_OK)
        then_ahead(g);
    return st;
}

msr_status_t msr_grads_get(msr_grads_t *g, size_t off, size_t n, float *dst)
{
    msr_status_t st = range_check(g, off, n);
    for (size_t at = off; at < off + n && st == MSR_OK;) {
        size_t k = at / g->per, in = at - k * g->per;
        size_t c = MSR_MIN(off + n - at, g->per - in);
        if ((st = chunk_load(g, k, 0, ahead_of(g, k, at + c, off, n, 1))) != MSR_OK)
            break;
        memcpy(dst + (at - off), g->buf[g->cur_b] + in, c * sizeof(float));
        at += c;
    }
    if (st == MSR_OK)
        then_ahead(g);
    return st;
}

void msr_grads_next(msr_grads_t *g, size_t off, size_t n, int reads)
{
    g->then = off < g->count ? off : SIZE_MAX;
    g->then_n = off < g->count ? MSR_MIN(n, g->count - off) : 0;
    g->then_reads = reads;
}

void msr_grads_fresh(msr_grads_t *g)
{
    for (size_t k = 0; k < g->nchunks; k++)
        g->flags[k] |= F_FRESH;
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
    g->flags[k] |= F_WRITTEN;
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
