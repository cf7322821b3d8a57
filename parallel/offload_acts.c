/* Activation offload: boundary activations in a file, written behind and
 * read ahead (see offload_acts.h). */
#include "parallel/offload_acts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "parallel/offload_impl.h"

/* What buffer s is doing. */
enum { BUF_FREE, BUF_HELD, BUF_WRITING, BUF_READING };

struct msr_acts {
    msr_offload_config_t cfg;
    char *path;
    int fd, direct, failed;
    const msr_offload_engine_ops_t *ops;
    msr_offload_engine_t *eng;
    char engine_name[24];
    const char *what;          /* an item's name in errors: "activation", "block" */
    int nbufs;                 /* buffers in use: at most MSR_ACTS_BUFS */
    size_t bytes, slot, count; /* an activation's bytes, its place in the file (aligned) */
    uint32_t *crc;             /* (count) of each activation as last written */
    unsigned char *written;    /* (count) */
    float *buf[MSR_ACTS_BUFS];
    int state[MSR_ACTS_BUFS];
    size_t key[MSR_ACTS_BUFS];   /* the activation a write or read moves */
    uint64_t seq[MSR_ACTS_BUFS]; /* when it started: the oldest write is waited first */
    uint64_t next_seq;
    msr_acts_stats_t stats;
};

static msr_status_t refuse_failed(const msr_acts_t *a)
{
    return msr_err(MSR_ERR_STATE, "offload: %s failed before: its %ss are lost", a->path, a->what);
}

static msr_status_t store_alloc(msr_acts_t *a)
{
    a->crc = msr_calloc(a->count + 1, sizeof *a->crc);
    a->written = msr_calloc(a->count + 1, 1);
    if (a->crc == NULL || a->written == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for %zu %ss", a->count, a->what);
    for (int s = 0; s < a->nbufs; s++) {
        void *p = NULL;
        if (posix_memalign(&p, MSR_OFFLOAD_ALIGN, a->slot) != 0)
            return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory for %s buffers of %zu bytes",
                           a->what, a->slot);
        memset(p, 0, a->slot);
        a->buf[s] = p;
    }
    return MSR_OK;
}

msr_status_t msr_acts_create(const msr_offload_config_t *cfg, size_t bytes, size_t count,
                             msr_acts_t **acts_p)
{
    return msr_acts_create_as(cfg, "acts", "activation", MSR_ACTS_BUFS, bytes, count, acts_p);
}

msr_status_t msr_acts_create_as(const msr_offload_config_t *cfg, const char *kind, const char *what,
                                int nbufs, size_t bytes, size_t count, msr_acts_t **acts_p)
{
    msr_offload_config_t c = *cfg;
    c.chunk_bytes = 0;
    msr_status_t st = msr_offload_config_check(&c);
    if (st != MSR_OK)
        return st;
    if (c.mode != MSR_OFFLOAD_DISK || bytes == 0 || nbufs < 2 || nbufs > MSR_ACTS_BUFS)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "offload: a %s store is for the disk mode, with %ss of at least a byte "
                       "and 2..%d buffers",
                       what, what, MSR_ACTS_BUFS);
    msr_acts_t *a = msr_calloc(1, sizeof *a);
    if (a == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory");
    a->cfg = c;
    a->fd = -1;
    a->what = what;
    a->nbufs = nbufs;
    a->bytes = bytes;
    a->slot = (bytes + MSR_OFFLOAD_ALIGN - 1) / MSR_OFFLOAD_ALIGN * MSR_OFFLOAD_ALIGN;
    a->count = count;
    a->path = msr_offload_file_path(c.dir, kind, c.rank);
    a->cfg.dir = NULL; /* not kept */
    if (a->path == NULL) {
        st = msr_err(MSR_ERR_NO_MEMORY, "offload: out of memory");
        goto err_free;
    }
    if ((st = store_alloc(a)) != MSR_OK ||
        (st = msr_offload_open(a->path, c.dir, &a->fd, &a->direct)) != MSR_OK)
        goto err_free;
    st = msr_offload_engine_open(c.io, a->fd, a->direct, nbufs, &a->ops, &a->eng, a->engine_name);
    if (st != MSR_OK)
        goto err_free;
    *acts_p = a;
    return MSR_OK;

err_free:
    a->cfg.keep = 0; /* nothing left behind */
    msr_acts_destroy(a);
    return st;
}

void msr_acts_destroy(msr_acts_t *a)
{
    if (a == NULL)
        return;
    for (int s = 0; s < a->nbufs && a->eng != NULL; s++) {
        if (a->state[s] == BUF_WRITING || a->state[s] == BUF_READING) {
            size_t done;
            int err;
            a->ops->wait(a->eng, s, &done, &err);
        }
    }
    if (a->eng != NULL)
        a->ops->destroy(a->eng);
    msr_offload_file_close(a->fd, a->path, a->cfg.keep);
    for (int s = 0; s < a->nbufs; s++)
        free(a->buf[s]);
    msr_free(a->crc);
    msr_free(a->written);
    msr_free(a->path);
    msr_free(a);
}

static void submit(msr_acts_t *a, int s, int write, size_t k)
{
    a->state[s] = write ? BUF_WRITING : BUF_READING;
    a->key[s] = k;
    a->seq[s] = a->next_seq++;
    a->ops->submit(a->eng, s, write, a->buf[s], a->slot, (off_t)(k * a->slot));
}

/* Waits for buffer s's write or read; checks that it moved the whole
 * activation. The buffer is then held. */
static msr_status_t finish(msr_acts_t *a, int s)
{
    size_t done;
    int err, write = a->state[s] == BUF_WRITING;
    a->ops->wait(a->eng, s, &done, &err);
    a->state[s] = BUF_HELD;
    if (err != 0 || done != a->slot) {
        a->failed = 1;
        return msr_offload_io_error(a->path, write, a->what, a->key[s], done, a->slot, err);
    }
    return MSR_OK;
}

static int find(const msr_acts_t *a, int state, size_t k)
{
    for (int s = 0; s < a->nbufs; s++)
        if (a->state[s] == state && a->key[s] == k)
            return s;
    return -1;
}

/* A free buffer, held: waits for the oldest write when none is free,
 * and when none is being written gives up the oldest read ahead not yet
 * taken (a guess the caller's pass did not follow: a later fetch of it
 * reads it again). */
static msr_status_t take(msr_acts_t *a, int *s_p)
{
    int w = -1, r = -1;
    for (int s = 0; s < a->nbufs; s++) {
        if (a->state[s] == BUF_FREE) {
            a->state[s] = BUF_HELD;
            *s_p = s;
            return MSR_OK;
        }
        if (a->state[s] == BUF_WRITING && (w < 0 || a->seq[s] < a->seq[w]))
            w = s;
        if (a->state[s] == BUF_READING && (r < 0 || a->seq[s] < a->seq[r]))
            r = s;
    }
    if (w < 0 && r < 0)
        return msr_err(MSR_ERR_STATE, "offload: all %d %s buffers of %s are held", a->nbufs,
                       a->what, a->path);
    if (w >= 0)
        a->stats.write_wait++;
    else
        a->stats.reads_dropped++;
    *s_p = w >= 0 ? w : r;
    return finish(a, *s_p);
}

msr_status_t msr_acts_get(msr_acts_t *a, float **buf_p)
{
    if (a->failed)
        return refuse_failed(a);
    int s;
    msr_status_t st = take(a, &s);
    if (st == MSR_OK)
        *buf_p = a->buf[s];
    return st;
}

static int held(const msr_acts_t *a, const float *buf)
{
    for (int s = 0; s < a->nbufs; s++)
        if (a->buf[s] == buf && a->state[s] == BUF_HELD)
            return s;
    return -1;
}

msr_status_t msr_acts_spill(msr_acts_t *a, float *buf, size_t k)
{
    if (a->failed)
        return refuse_failed(a);
    int s = held(a, buf);
    if (s < 0 || k >= a->count)
        return msr_err(MSR_ERR_STATE, "offload: %s %zu of %zu written from a buffer not held",
                       a->what, k, a->count);
    /* what is in flight for item k ends first: a write of it lands before
     * this one (two would race), a read of it is dropped (fetched later,
     * it would hand the old contents back) */
    for (int t = 0; t < a->nbufs; t++) {
        if (t == s || a->key[t] != k || (a->state[t] != BUF_WRITING && a->state[t] != BUF_READING))
            continue;
        msr_status_t st = finish(a, t);
        a->state[t] = BUF_FREE;
        if (st != MSR_OK)
            return st;
    }
    a->crc[k] = msr_crc32(0, a->buf[s], a->slot);
    a->written[k] = 1;
    a->stats.spills++;
    submit(a, s, 1, k);
    return MSR_OK;
}

msr_status_t msr_acts_prefetch(msr_acts_t *a, size_t k)
{
    if (a->failed)
        return refuse_failed(a);
    if (k >= a->count || !a->written[k])
        return msr_err(MSR_ERR_STATE, "offload: %s %zu of %s read before it was written", a->what,
                       k, a->path);
    if (find(a, BUF_READING, k) >= 0)
        return MSR_OK;
    int s = find(a, BUF_WRITING, k); /* its write ends before the read starts */
    msr_status_t st = MSR_OK;
    if (s >= 0 && (st = finish(a, s)) == MSR_OK)
        a->state[s] = BUF_FREE;
    if (st == MSR_OK && (st = take(a, &s)) == MSR_OK)
        submit(a, s, 0, k);
    return st;
}

/* The CRC check of a read of item k into buf. */
static msr_status_t check_crc(const msr_acts_t *a, size_t k, const void *buf)
{
    uint32_t crc = msr_crc32(0, buf, a->slot);
    if (crc == a->crc[k])
        return MSR_OK;
    return msr_err(MSR_ERR_CORRUPT,
                   "offload: %s %zu of %s (bytes %zu..%zu) changed underneath: crc %08x, "
                   "written with %08x",
                   a->what, k, a->path, k * a->slot, (k + 1) * a->slot, (unsigned)crc,
                   (unsigned)a->crc[k]);
}

msr_status_t msr_acts_fetch(msr_acts_t *a, size_t k, float **buf_p)
{
    int s = a->failed ? -1 : find(a, BUF_READING, k);
    msr_status_t st;
    if (s < 0) {
        if ((st = msr_acts_prefetch(a, k)) != MSR_OK)
            return st;
        a->stats.misses++;
        s = find(a, BUF_READING, k);
    }
    if ((st = finish(a, s)) != MSR_OK)
        return st;
    if ((st = check_crc(a, k, a->buf[s])) != MSR_OK) {
        a->failed = 1;
        return st;
    }
    a->stats.fetches++;
    *buf_p = a->buf[s];
    return MSR_OK;
}

void msr_acts_put(msr_acts_t *a, float *buf)
{
    int s = held(a, buf);
    if (s >= 0)
        a->state[s] = BUF_FREE;
}

msr_status_t msr_acts_flush(msr_acts_t *a)
{
    if (a->failed)
        return refuse_failed(a);
    msr_status_t st = MSR_OK;
    for (int s = 0; s < a->nbufs; s++) {
        if (a->state[s] != BUF_WRITING)
            continue;
        msr_status_t fst = finish(a, s);
        a->state[s] = BUF_FREE;
        st = st != MSR_OK ? st : fst;
    }
    return st;
}

msr_status_t msr_acts_read_shared(const msr_acts_t *a, size_t k, void *buf)
{
    if (k >= a->count || !a->written[k])
        return msr_err(MSR_ERR_STATE, "offload: %s %zu of %s read before it was written", a->what,
                       k, a->path);
    int err = 0;
    size_t done = msr_offload_rw(a->fd, 0, buf, a->slot, (off_t)(k * a->slot), &err);
    if (err != 0 || done != a->slot)
        return msr_offload_io_error(a->path, 0, a->what, k, done, a->slot, err);
    return check_crc(a, k, buf);
}

size_t msr_acts_slot_bytes(const msr_acts_t *a)
{
    return a->slot;
}

const char *msr_acts_path(const msr_acts_t *a)
{
    return a->path;
}

const char *msr_acts_engine(const msr_acts_t *a)
{
    return a->engine_name;
}

size_t msr_acts_resident(const msr_acts_t *a)
{
    return (size_t)a->nbufs * a->slot + (a->count + 1) * (sizeof(uint32_t) + 1);
}

const msr_acts_stats_t *msr_acts_stats(const msr_acts_t *a)
{
    return &a->stats;
}
