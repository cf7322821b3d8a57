/* libmsrun's checkpoint files read in parts (msr_ckpt_reader_*,
 * msrun/checkpoint.h): a reader holds a rank file open and reads it past
 * the page cache (O_DIRECT) where the filesystem allows, with the next
 * stretch of the file in flight on a thread of its own while the caller
 * copies out of the one before, through the cache elsewhere;
 * checkpoint_read.c reads whole files and finds the latest step. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/util.h"
#include "msrun/checkpoint.h"
#include "rendezvous/checkpoint_impl.h"

/* Where the read kept in flight ahead of a reader's caller stands. */
typedef enum { AHEAD_NONE, AHEAD_ASKED, AHEAD_DONE, AHEAD_QUIT } ahead_state_t;

/* The read a reader keeps in flight ahead of its caller (ahead_*): its
 * thread reads the CKPT_DIRECT_STAGE bytes past the staging buffer's into
 * buf while the caller copies out of the staging buffer; the caller then
 * swaps the two buffers. The caller touches buf only in AHEAD_NONE or
 * AHEAD_DONE, the thread only in AHEAD_ASKED; state and the result under
 * mu. */
typedef struct ckpt_ahead {
    pthread_t thread;
    int started; /* thread runs (else the reader reads only what it is asked) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ahead_state_t state;
    unsigned char *buf; /* CKPT_DIRECT_STAGE bytes, page-aligned */
    off_t at;           /* the read's file offset (page-aligned) */
    ssize_t got;        /* its result once AHEAD_DONE: bytes, or -1 and errno err */
    int err;
} ckpt_ahead_t;

/* A state open for reads in parts (msrun/checkpoint.h). */
struct msr_ckpt_reader {
    int fd;
    int dfd;              /* the same file opened O_DIRECT, or -1: reads through the cache */
    unsigned char *stage; /* dfd's reads land here (CKPT_DIRECT_STAGE bytes, page-aligned) */
    off_t stage_at;       /* the file's bytes [stage_at, stage_at + stage_len) are in stage */
    size_t stage_len;
    off_t next;      /* where the last read ended (-1: none): a read from there reads ahead */
    int check;       /* continue the whole state's CRC over reads in order */
    int checked;     /* the whole state was read in order and matched */
    uint64_t crc_at; /* bytes of the state from its start the CRC covers */
    uint32_t crc;
    ckpt_header_t h;
    ckpt_ahead_t ahead;          /* with dfd: the next stretch of the file, read ahead */
    _Atomic uint64_t disk_bytes; /* asked of the files since open, read ahead too */
    char path[4200];
};

/* pread until len bytes, the file's end or an error other than EINTR:
 * the bytes read, or -1 with errno. */
static ssize_t pread_full(int fd, unsigned char *buf, size_t len, off_t at)
{
    size_t done = 0;
    while (done < len) {
        ssize_t got = pread(fd, buf + done, len - done, at + (off_t)done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -1;
        if (got == 0)
            break;
        done += (size_t)got;
    }
    return (ssize_t)done;
}

/* The read-ahead thread: serves one read at a time, asked by ahead_ask,
 * until the reader closes (AHEAD_QUIT). */
static void *ahead_main(void *arg)
{
    msr_ckpt_reader_t *r = arg;
    ckpt_ahead_t *a = &r->ahead;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (a->state != AHEAD_ASKED && a->state != AHEAD_QUIT)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->state == AHEAD_QUIT)
            break;
        off_t at = a->at;
        pthread_mutex_unlock(&a->mu);
        ssize_t got = pread_full(r->dfd, a->buf, CKPT_DIRECT_STAGE, at);
        int err = errno;
        if (got > 0) /* read, whether taken or dropped later */
            atomic_fetch_add(&r->disk_bytes, (uint64_t)got);
        pthread_mutex_lock(&a->mu);
        a->got = got;
        a->err = err;
        if (a->state == AHEAD_ASKED)
            a->state = AHEAD_DONE;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* A staging buffer (CKPT_DIRECT_STAGE bytes; free it), aligned to a huge
 * page and advised to be backed by huge pages: every O_DIRECT read pins
 * the buffer's pages for the disk, which takes the kernel a page-table
 * walk per page, 1024 for a 4 MiB read of 4 KiB pages, 2 of huge ones,
 * and a fresh buffer's first touch faults once per page likewise. The
 * advice is a hint: where the kernel has no huge page to give, the
 * buffer is of small pages and reads the same. NULL: out of memory. */
static void *stage_alloc(void)
{
    void *p = NULL;
    if (posix_memalign(&p, CKPT_STAGE_ALIGN, CKPT_DIRECT_STAGE) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, CKPT_DIRECT_STAGE, MADV_HUGEPAGE);
#endif
    return p;
}

const void *msr_ckpt_reader_stage(const msr_ckpt_reader_t *r)
{
    return r != NULL ? r->stage : NULL;
}

/* Starts r's read-ahead thread and its buffer; where either cannot be had
 * the reader reads only what it is asked (a->started stays 0). The thread
 * takes no signals: they go to the program's own threads. */
static void ahead_start(msr_ckpt_reader_t *r)
{
    ckpt_ahead_t *a = &r->ahead;
    void *buf = stage_alloc();
    if (buf == NULL)
        return;
    if (pthread_mutex_init(&a->mu, NULL) != 0)
        goto err_buf;
    if (pthread_cond_init(&a->cv, NULL) != 0)
        goto err_mu;
    a->buf = buf;
    a->state = AHEAD_NONE;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&a->thread, NULL, ahead_main, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
        a->started = 1;
        return;
    }
    MSR_DEBUG("checkpoint: %s: no read-ahead thread (%s): reading only what is asked", r->path,
              strerror(rc));
    pthread_cond_destroy(&a->cv);
err_mu:
    pthread_mutex_destroy(&a->mu);
err_buf:
    a->buf = NULL;
    free(buf);
}

/* Waits until the read in flight (if any) is done: its state then. */
static ahead_state_t ahead_wait(ckpt_ahead_t *a)
{
    pthread_mutex_lock(&a->mu);
    while (a->state == AHEAD_ASKED)
        pthread_cond_wait(&a->cv, &a->mu);
    ahead_state_t st = a->state;
    pthread_mutex_unlock(&a->mu);
    return st;
}

/* Asks r's thread for the file's CKPT_DIRECT_STAGE bytes at `at` (page
 * aligned), after the read before it is done (its bytes dropped). */
static void ahead_ask(msr_ckpt_reader_t *r, off_t at)
{
    ckpt_ahead_t *a = &r->ahead;
    if (!a->started && (ahead_start(r), !a->started))
        return;
    (void)ahead_wait(a);
    pthread_mutex_lock(&a->mu);
    a->at = at;
    a->state = AHEAD_ASKED;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* When the read in flight began at or before pos, within a staging
 * buffer of it, waits for it and swaps its buffer with the staging buffer:
 * 1, *at_p where it began and *got_p its bytes (or -1 with errno); 0 when
 * none holds pos (the staging buffer untouched). */
static int ahead_take(msr_ckpt_reader_t *r, off_t pos, off_t *at_p, ssize_t *got_p)
{
    ckpt_ahead_t *a = &r->ahead;
    if (!a->started)
        return 0;
    pthread_mutex_lock(&a->mu);
    int mine = a->state != AHEAD_NONE && pos >= a->at && pos - a->at < (off_t)CKPT_DIRECT_STAGE;
    pthread_mutex_unlock(&a->mu);
    if (!mine || ahead_wait(a) != AHEAD_DONE)
        return 0;
    pthread_mutex_lock(&a->mu);
    unsigned char *t = r->stage;
    r->stage = a->buf;
    a->buf = t;
    a->state = AHEAD_NONE;
    *at_p = a->at;
    *got_p = a->got;
    errno = a->err;
    pthread_mutex_unlock(&a->mu);
    return 1;
}

/* Stops r's read-ahead thread (after its read in flight) and frees its
 * buffer. */
static void ahead_stop(msr_ckpt_reader_t *r)
{
    ckpt_ahead_t *a = &r->ahead;
    if (!a->started)
        return;
    pthread_mutex_lock(&a->mu);
    a->state = AHEAD_QUIT;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a->buf);
    a->started = 0;
}

/* Opens r's file again with O_DIRECT into r->dfd (r->stage is had), or
 * leaves r->dfd -1 where the filesystem refuses it. */
static void direct_reopen(msr_ckpt_reader_t *r)
{
    /* test-only: as if the filesystem refused O_DIRECT (docs/testing.md) */
    const char *no_direct = getenv("MSR_TEST_CKPT_NO_DIRECT");
    if (no_direct != NULL && strcmp(no_direct, "1") == 0)
        errno = EINVAL;
    else
        r->dfd = open(r->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (r->dfd < 0)
        MSR_DEBUG("checkpoint: %s: no O_DIRECT (%s): reading through the page cache", r->path,
                  strerror(errno));
}

/* Opens r's file again with O_DIRECT, and its staging buffer: a reader's
 * reads then bypass the page cache (no page of the cache to allocate,
 * fill and copy out of, one copy from the staging buffer instead). Where
 * the filesystem refuses O_DIRECT, or the buffer cannot be had, the
 * reader reads through the cache (r->dfd stays -1). */
static void direct_open(msr_ckpt_reader_t *r)
{
    void *stage = NULL;
    r->dfd = -1;
    r->stage = NULL;
    r->stage_len = 0;
    r->next = -1;
    if ((stage = stage_alloc()) == NULL)
        return;
    r->stage = stage;
    direct_reopen(r);
    if (r->dfd < 0) {
        free(stage);
        r->stage = NULL;
    }
}

int msr_ckpt_reader_direct(const msr_ckpt_reader_t *r)
{
    return r != NULL && r->dfd >= 0;
}

/* Opens rank's state of step: past the page cache when direct (and the
 * filesystem allows), else through it. */
static msr_status_t reader_open(const char *dir, int64_t step, int rank, int check, int direct,
                                msr_ckpt_reader_t **reader_p)
{
    msr_ckpt_reader_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "checkpoint: out of memory for a reader");
    msr_status_t st = ckpt_open_state(dir, step, rank, -1, r->path, sizeof r->path, &r->fd, &r->h);
    if (st != MSR_OK) {
        free(r);
        return st;
    }
    r->check = check;
    r->dfd = -1;
    if (direct)
        direct_open(r);
    *reader_p = r;
    return MSR_OK;
}

/* Fills r's staging buffer with the file's pages from pos's on, past the
 * page cache: from the read in flight when it holds pos (waiting for it),
 * else read now, want bytes from pos or (ahead) a whole staging buffer.
 * O_DIRECT has no readahead: a load of small pieces one after the other
 * (a resharded load's row slices) reads ahead, so that it asks the disk
 * for CKPT_DIRECT_STAGE bytes at a time, not a page per piece, and keeps
 * the next CKPT_DIRECT_STAGE bytes in flight on the reader's thread while
 * its caller copies these out. MSR_ERR_CORRUPT when the file ends early,
 * MSR_ERR_IO on a failed read (the text names the file). */
static msr_status_t direct_fill(msr_ckpt_reader_t *r, off_t pos, size_t want, int ahead)
{
    const off_t pg = (off_t)CKPT_DIRECT_ALIGN, end = MSR_CKPT_HEADER_LEN + (off_t)r->h.len;
    off_t a = pos / pg * pg;
    ssize_t got;
    r->stage_len = 0;
    if (!ahead_take(r, pos, &a, &got)) {
        want = MSR_MIN(want, CKPT_DIRECT_STAGE - (size_t)(pos - a));
        off_t e = ahead ? a + (off_t)CKPT_DIRECT_STAGE : (pos + (off_t)want + pg - 1) / pg * pg;
        got = pread_full(r->dfd, r->stage, (size_t)(e - a), a);
        if (got > 0)
            atomic_fetch_add(&r->disk_bytes, (uint64_t)got);
    }
    if (got < 0)
        return io_error("cannot read", r->path);
    if (got <= pos - a)
        return msr_err(MSR_ERR_CORRUPT, "checkpoint: %s ends early", r->path);
    r->stage_at = a;
    r->stage_len = (size_t)got;
    if (ahead && (size_t)got == CKPT_DIRECT_STAGE && a + got < end)
        ahead_ask(r, a + got);
    return MSR_OK;
}

/* Reads [at, at + len) of r's file into data past the page cache (through
 * its staging buffer, direct_fill), then CRCs it there (continuing *crc_p,
 * NULL: none) while it is in the cache. A read that starts where the one
 * before ended reads ahead; a read elsewhere reads only its own pages.
 * Errors as direct_fill's. */
static msr_status_t direct_chunks(msr_ckpt_reader_t *r, off_t at, void *data, size_t len,
                                  uint32_t *crc_p)
{
    int ahead = at == r->next;
    size_t done = 0;
    while (done < len) {
        off_t pos = at + (off_t)done;
        if (pos < r->stage_at || pos >= r->stage_at + (off_t)r->stage_len) {
            msr_status_t st = direct_fill(r, pos, len - done, ahead);
            if (st != MSR_OK)
                return st;
        }
        size_t take = MSR_MIN(len - done, (size_t)(r->stage_at + (off_t)r->stage_len - pos));
        unsigned char *dst = (unsigned char *)data + done;
        (void)msr_prefault(dst, take);
        memcpy(dst, r->stage + (pos - r->stage_at), take);
        if (crc_p != NULL)
            *crc_p = msr_crc32(*crc_p, dst, take);
        done += take;
    }
    r->next = at + (off_t)len;
    return MSR_OK;
}

/* The bytes [offset, offset + len) just read into buf, of seedless CRC
 * *chunk_crc (NULL: not computed): continues the whole state's CRC over
 * those past crc_at, and checks it at the state's end. A read that starts
 * where the CRC stands continues it from *chunk_crc (msr_crc32_combine),
 * without passing over its bytes again; one that overlaps the bytes before
 * CRCs only those past them. */
static msr_status_t reader_crc(msr_ckpt_reader_t *r, uint64_t offset, const void *buf, size_t len,
                               const uint32_t *chunk_crc)
{
    if (!r->check || r->checked || len == 0)
        return MSR_OK;
    if (offset > r->crc_at) { /* bytes skipped: no whole check */
        r->check = 0;
        return MSR_OK;
    }
    uint64_t end = offset + len;
    if (end <= r->crc_at)
        return MSR_OK;
    if (offset == r->crc_at && chunk_crc != NULL)
        r->crc = msr_crc32_combine(r->crc, *chunk_crc, len);
    else
        r->crc = msr_crc32(r->crc, (const unsigned char *)buf + (r->crc_at - offset),
                           (size_t)(end - r->crc_at));
    r->crc_at = end;
    if (end < r->h.len)
        return MSR_OK;
    if (r->crc != r->h.crc)
        return msr_err(MSR_ERR_CORRUPT, "checkpoint: %s does not match its CRC", r->path);
    r->checked = 1;
    return MSR_OK;
}

msr_status_t msr_ckpt_reader_open(msr_ctx_t *ctx, const char *dir, int64_t step, int rank,
                                  int check, msr_ckpt_reader_t **reader_p, uint64_t *total_p)
{
    (void)ctx; /* a tool outside a job passes NULL */
    if (dir == NULL || step < 0 || rank < 0 || reader_p == NULL) {
        msr_err_set("checkpoint: bad arguments");
        return MSR_ERR_INVALID_ARG;
    }
    msr_ckpt_reader_t *r;
    msr_status_t st = reader_open(dir, step, rank, check != 0, 1, &r);
    if (st != MSR_OK)
        return st;
    if (total_p != NULL)
        *total_p = r->h.len;
    *reader_p = r;
    return MSR_OK;
}

msr_status_t msr_ckpt_reader_reopen(msr_ckpt_reader_t *r, const char *dir, int64_t step, int rank,
                                    int check, uint64_t *total_p)
{
    if (r == NULL || dir == NULL || step < 0 || rank < 0) {
        msr_err_set("checkpoint: bad arguments");
        return MSR_ERR_INVALID_ARG;
    }
    char path[sizeof r->path];
    int fd;
    ckpt_header_t h;
    msr_status_t st = ckpt_open_state(dir, step, rank, -1, path, sizeof path, &fd, &h);
    if (st != MSR_OK)
        return st;          /* r still reads its file */
    if (r->ahead.started) { /* the read in flight is of the file before: dropped */
        (void)ahead_wait(&r->ahead);
        pthread_mutex_lock(&r->ahead.mu);
        r->ahead.state = AHEAD_NONE;
        pthread_mutex_unlock(&r->ahead.mu);
    }
    close(r->fd);
    if (r->dfd >= 0)
        close(r->dfd);
    r->fd = fd;
    r->dfd = -1;
    memcpy(r->path, path, sizeof path);
    r->h = h;
    r->check = check != 0;
    r->checked = 0;
    r->crc_at = 0;
    r->crc = 0;
    r->stage_at = 0;
    r->stage_len = 0;
    r->next = -1;
    if (r->stage != NULL) /* the same staging buffers, already faulted in */
        direct_reopen(r);
    if (total_p != NULL)
        *total_p = h.len;
    return MSR_OK;
}

msr_status_t msr_ckpt_reader_read_crc(msr_ckpt_reader_t *r, uint64_t offset, void *buf, size_t len,
                                      uint32_t *crc_p)
{
    if (r == NULL || (buf == NULL && len > 0)) {
        msr_err_set("checkpoint: bad arguments");
        return MSR_ERR_INVALID_ARG;
    }
    if (offset > r->h.len || len > r->h.len - offset) {
        msr_err_set("checkpoint: %s holds %" PRIu64 " bytes of state, not [%" PRIu64 ", %" PRIu64
                    ")",
                    r->path, r->h.len, offset, offset + (uint64_t)len);
        return MSR_ERR_CORRUPT;
    }
    /* one pass of the CRC over the bytes serves both the caller and the
     * whole state's check, when this read continues it */
    int whole = r->check && !r->checked && offset == r->crc_at;
    uint32_t crc = 0, *want = crc_p != NULL || whole ? &crc : NULL;
    /* a resharded load reads the pieces it needs a chunk at a time, most
     * often one after the other: read_chunks keeps the disk ahead of them
     * in the file, past this read */
    msr_status_t st =
        r->dfd >= 0 ? direct_chunks(r, (off_t)(MSR_CKPT_HEADER_LEN + offset), buf, len, want)
                    : ckpt_read_chunks(r->fd, r->path, (off_t)(MSR_CKPT_HEADER_LEN + offset), buf,
                                       len, MSR_CKPT_HEADER_LEN + (off_t)r->h.len, 0, want);
    if (st == MSR_OK && r->dfd < 0) /* through the cache: the bytes asked */
        atomic_fetch_add(&r->disk_bytes, (uint64_t)len);
    if (st == MSR_OK)
        st = reader_crc(r, offset, buf, len, want);
    if (st == MSR_OK && crc_p != NULL)
        *crc_p = crc;
    return st;
}

msr_status_t msr_ckpt_reader_read(msr_ckpt_reader_t *r, uint64_t offset, void *buf, size_t len)
{
    return msr_ckpt_reader_read_crc(r, offset, buf, len, NULL);
}

int msr_ckpt_reader_checked(const msr_ckpt_reader_t *r)
{
    return r != NULL && r->checked;
}

uint64_t msr_ckpt_reader_bytes_read(const msr_ckpt_reader_t *r)
{
    return r != NULL ? atomic_load(&r->disk_bytes) : 0;
}

void msr_ckpt_reader_close(msr_ckpt_reader_t *r)
{
    if (r == NULL)
        return;
    ahead_stop(r);
    close(r->fd);
    if (r->dfd >= 0)
        close(r->dfd);
    free(r->stage);
    free(r);
}

msr_status_t msr_ckpt_read_rank(msr_ctx_t *ctx, const char *dir, int64_t step, int rank,
                                uint64_t offset, void *buf, size_t len, uint64_t *total_p)
{
    (void)ctx; /* a tool outside a job passes NULL */
    if (dir == NULL || step < 0 || rank < 0 || (buf == NULL && len > 0)) {
        msr_err_set("checkpoint: bad arguments");
        return MSR_ERR_INVALID_ARG;
    }
    msr_ckpt_reader_t *r;
    /* the caller checks its part. One read shorter than a staging buffer
     * (a header, a piece's table) goes through the page cache: past it,
     * the reader would fault in a fresh staging buffer of huge pages to
     * read a few pages once, costlier than the read itself */
    msr_status_t st = reader_open(dir, step, rank, 0, len >= CKPT_DIRECT_STAGE, &r);
    if (st != MSR_OK)
        return st;
    st = msr_ckpt_reader_read(r, offset, buf, len);
    if (st == MSR_OK && total_p != NULL)
        *total_p = r->h.len;
    msr_ckpt_reader_close(r);
    return st;
}
