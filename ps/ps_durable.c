/* A server's shard kept durable: a log of the updates it acknowledged (an
 * asynchronous push, or a synchronous step's summed gradients) and a
 * checkpoint of the shard every so many, restored on start (msr_ps_durable,
 * docs/ps.md's failure table); the log synced to disk as
 * msr_ps_durable_fsync asks; the state of other numbers of servers or
 * workers resharded (the layout, below). */
#include <dirent.h>
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
#include "base/time.h"
#include "ps/ps_impl.h"

#define CKPT_MAGIC      0x314b43535052534dull /* "MSRPSCK1" */
/* The log starts with LOG_MAGIC, then records: a head of LOG_RECORD_HEAD
 * int64 (seq, table, nkeys, width, divisor), nkeys keys (int64), nkeys x
 * width values: divisor 0, an asynchronous push's gradients (float),
 * applied as a push is; divisor d > 0, a synchronous step's gradients
 * summed over its d pushes (double), of distinct keys, applied divided by
 * d. */
#define LOG_MAGIC       0x32474c535052534dull /* "MSRPSLG2" */
#define LOG_RECORD_HEAD 5

struct ps_durable {
    char dir[4096], ckpt[4200], tmp[4200], log[4200]; /* a file's name under dir: < 64 */
    FILE *f;             /* the log, appended to (read only: an old layout's) */
    int readonly;        /* another layout's state, read to reshard: never changed */
    uint64_t gen;        /* the generation of the files named (the layout, below) */
    uint64_t seq;        /* updates the shard holds (checkpoint + log) */
    uint64_t ckpt_seq;   /* of them in the checkpoint */
    uint64_t every;      /* updates between checkpoints */
    uint64_t sync_every; /* records between two syncs of the log; 0: none */
    uint64_t unsynced;   /* records written since the last sync */
};

/* The arrays of table t, in the checkpoint's order: (pointer, bytes). */
static int table_arrays(const ps_table_t *t, void **ptr, size_t *len)
{
    size_t cells = t->local_rows * t->cfg.width;
    int n = 0;
    ptr[n] = t->w, len[n++] = cells * sizeof(float);
    if (t->cfg.optim != MSR_PS_SGD)
        ptr[n] = t->s1, len[n++] = cells * sizeof(float);
    if (t->cfg.optim == MSR_PS_ADAM) {
        ptr[n] = t->s2, len[n++] = cells * sizeof(float);
        ptr[n] = t->steps, len[n++] = t->local_rows * sizeof(uint32_t);
    }
    return n;
}

/* The header of table t: what a checkpoint must match to be loaded. */
static void table_head(const msr_ps_t *ps, const ps_table_t *t, uint64_t *h)
{
    h[0] = t->local_rows;
    h[1] = t->cfg.width;
    h[2] = (uint64_t)t->cfg.optim;
    h[3] = (uint64_t)ps->role_rank;
}

/* A file of this user only (0600: a shard is the model's parameters),
 * never through a symbolic link, as a stream of the given mode. */
static FILE *open_private(const char *path, int flags, const char *mode)
{
    int fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, mode);
    if (f == NULL)
        close(fd);
    return f;
}

/* Syncs a directory's entries (a rename in it) to disk; 0 or -1. */
static int dir_sync(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Starts the log afresh: its magic alone. */
static int log_start(struct ps_durable *d)
{
    uint64_t magic = LOG_MAGIC;
    return fflush(d->f) == 0 && ftruncate(fileno(d->f), 0) == 0 && fseek(d->f, 0, SEEK_SET) == 0 &&
                   fwrite(&magic, sizeof magic, 1, d->f) == 1 && fflush(d->f) == 0
               ? 0
               : -1;
}

static msr_status_t ckpt_write(msr_ps_t *ps)
{
    struct ps_durable *d = ps->durable;
    FILE *f = open_private(d->tmp, O_WRONLY | O_CREAT | O_TRUNC, "wb");
    if (f == NULL)
        return msr_err(MSR_ERR_IO, "ps checkpoint %s: %s", d->tmp, strerror(errno));
    uint64_t head[3] = {CKPT_MAGIC, d->seq, (uint64_t)ps->ntables};
    int ok = fwrite(head, sizeof head, 1, f) == 1;
    for (int i = 0; ok && i < ps->ntables; i++) {
        uint64_t th[4];
        void *ptr[4];
        size_t len[4];
        table_head(ps, &ps->tables[i], th);
        ok = fwrite(th, sizeof th, 1, f) == 1;
        int n = table_arrays(&ps->tables[i], ptr, len);
        for (int k = 0; ok && k < n; k++)
            ok = len[k] == 0 || fwrite(ptr[k], len[k], 1, f) == 1;
    }
    /* synced: the checkpoint must be on disk before the log it ends is */
    if (ok && d->sync_every)
        ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(d->tmp, d->ckpt) != 0 || (d->sync_every && dir_sync(d->dir) != 0)) {
        unlink(d->tmp);
        return msr_err(MSR_ERR_IO, "ps checkpoint %s: %s", d->ckpt, strerror(errno));
    }
    d->ckpt_seq = d->seq;
    /* the log restarts; records a crash leaves before this are older than
     * the checkpoint and skipped on replay */
    if (log_start(d) != 0)
        return msr_err(MSR_ERR_IO, "ps log %s: %s", d->log, strerror(errno));
    d->unsynced = 0;
    return MSR_OK;
}

static msr_status_t ckpt_read(msr_ps_t *ps)
{
    struct ps_durable *d = ps->durable;
    FILE *f = fopen(d->ckpt, "rb");
    if (f == NULL && errno == ENOENT && d->gen > 0) /* a reshard wrote every one */
        return msr_err(MSR_ERR_CORRUPT,
                       "ps checkpoint %s is missing: every server of generation %llu wrote one "
                       "when it began",
                       d->ckpt, (unsigned long long)d->gen);
    if (f == NULL)
        return errno == ENOENT
                   ? MSR_OK
                   : msr_err(MSR_ERR_IO, "ps checkpoint %s: %s", d->ckpt, strerror(errno));
    uint64_t head[3];
    msr_status_t st = MSR_OK;
    if (fread(head, sizeof head, 1, f) != 1 || head[0] != CKPT_MAGIC ||
        head[2] != (uint64_t)ps->ntables)
        st = msr_err(MSR_ERR_CORRUPT, "ps checkpoint %s: not one of these %d tables", d->ckpt,
                     ps->ntables);
    for (int i = 0; st == MSR_OK && i < ps->ntables; i++) {
        uint64_t th[4], want[4];
        void *ptr[4];
        size_t len[4];
        table_head(ps, &ps->tables[i], want);
        if (fread(th, sizeof th, 1, f) != 1 || memcmp(th, want, sizeof th) != 0) {
            st = msr_err(MSR_ERR_CORRUPT, "ps checkpoint %s: table %d differs", d->ckpt, i);
            break;
        }
        int n = table_arrays(&ps->tables[i], ptr, len);
        for (int k = 0; st == MSR_OK && k < n; k++)
            if (len[k] && fread(ptr[k], len[k], 1, f) != 1)
                st = msr_err(MSR_ERR_CORRUPT, "ps checkpoint %s: cut short", d->ckpt);
    }
    fclose(f);
    if (st == MSR_OK)
        d->seq = d->ckpt_seq = head[1];
    return st;
}

/* Reads one whole record into the buffers (grown as needed): 1 when read,
 * 0 at the end or at a record cut short (never acknowledged). */
static int record_read(FILE *f, int64_t *h, int64_t **keys, void **vals, size_t *cap)
{
    if (fread(h, sizeof(int64_t), LOG_RECORD_HEAD, f) != LOG_RECORD_HEAD || h[2] < 0 || h[3] <= 0 ||
        h[3] > (int64_t)MSR_PS_WIDTH_MAX || h[2] > PS_CALL_ELEMS_MAX / h[3] || h[4] < 0)
        return 0;
    size_t n = (size_t)h[2], w = (size_t)h[3], esize = h[4] ? sizeof(double) : sizeof(float);
    if (n * w > *cap || n > *cap) {
        size_t c = n * w > n ? n * w : n;
        int64_t *k = msr_realloc_array(*keys, c ? c : 1, sizeof *k);
        if (k)
            *keys = k;
        double *v = msr_realloc_array(*vals, c ? c : 1, sizeof *v);
        if (v)
            *vals = v;
        if (!k || !v)
            return 0;
        *cap = c;
    }
    return fread(*keys, sizeof **keys, n, f) == n && fread(*vals, esize, n * w, f) == n * w;
}

/* Why a record read whole cannot be applied (MSR_OK: it can). */
static msr_status_t record_check(msr_ps_t *ps, const int64_t *h, const int64_t *keys)
{
    const char *log = ps->durable->log;
    if (h[1] < 0 || h[1] >= ps->ntables || (uint64_t)h[3] != ps->tables[h[1]].cfg.width ||
        h[4] > ps->workers)
        return msr_err(MSR_ERR_CORRUPT,
                       "ps log %s: a record of table %lld, width %lld, %lld pushes", log,
                       (long long)h[1], (long long)h[3], (long long)h[4]);
    for (int64_t i = 0; i < h[2]; i++)
        if (keys[i] < 0 || (uint64_t)keys[i] >= ps->tables[h[1]].cfg.rows ||
            keys[i] % ps->servers != ps->role_rank)
            return msr_err(MSR_ERR_CORRUPT, "ps log %s: key %lld", log, (long long)keys[i]);
    return MSR_OK;
}

/* Applies the logged updates after the checkpoint; leaves the log's end at
 * the last whole record. */
static msr_status_t log_replay(msr_ps_t *ps)
{
    struct ps_durable *d = ps->durable;
    int64_t h[LOG_RECORD_HEAD], *keys = NULL;
    void *vals = NULL;
    size_t cap = 0;
    long good = sizeof(uint64_t); /* the magic, checked by msr_ps_durable */
    msr_status_t st = MSR_OK;
    while (st == MSR_OK && record_read(d->f, h, &keys, &vals, &cap)) {
        good = ftell(d->f);
        if ((uint64_t)h[0] <= d->ckpt_seq)
            continue;
        st = record_check(ps, h, keys);
        ps_table_t *t = st == MSR_OK ? &ps->tables[h[1]] : NULL;
        if (t && h[4] == 0)
            st = ps_apply_push(ps, t, keys, vals, h[2]);
        else if (t)
            st = ps_apply_sums(ps, t, keys, vals, h[2], (int)h[4]);
        d->seq = (uint64_t)h[0];
    }
    msr_free(keys);
    msr_free(vals);
    if (d->readonly)
        return st;
    if (st == MSR_OK && (ftruncate(fileno(d->f), good) != 0 || fseek(d->f, good, SEEK_SET) != 0))
        st = msr_err(MSR_ERR_IO, "ps log %s: %s", d->log, strerror(errno));
    return st;
}

/* Ends a record just written: flushed to the kernel, synced to disk as
 * msr_ps_durable_fsync asked, counted. */
static msr_status_t record_end(struct ps_durable *d)
{
    if (fflush(d->f) != 0)
        return msr_err(MSR_ERR_IO, "ps log %s: %s", d->log, strerror(errno));
    if (d->sync_every && ++d->unsynced >= d->sync_every) {
        if (fdatasync(fileno(d->f)) != 0)
            return msr_err(MSR_ERR_IO, "ps log %s: fdatasync: %s", d->log, strerror(errno));
        d->unsynced = 0;
    }
    d->seq++;
    return MSR_OK;
}

msr_status_t ps_durable_log(msr_ps_t *ps, const ps_req_t *req, const int64_t *keys, const float *g)
{
    struct ps_durable *d = ps->durable;
    int64_t h[LOG_RECORD_HEAD] = {(int64_t)(d->seq + 1), req->table, req->nkeys, req->width, 0};
    size_t n = (size_t)req->nkeys, w = (size_t)req->width;
    if (fwrite(h, sizeof h, 1, d->f) != 1 || fwrite(keys, sizeof *keys, n, d->f) != n ||
        fwrite(g, sizeof *g, n * w, d->f) != n * w)
        return msr_err(MSR_ERR_IO, "ps log %s: %s", d->log, strerror(errno));
    return record_end(d);
}

msr_status_t ps_durable_log_step(msr_ps_t *ps, int ti, int divisor)
{
    struct ps_durable *d = ps->durable;
    const ps_table_t *t = &ps->tables[ti];
    size_t n = t->ntouched, w = t->cfg.width;
    int64_t h[LOG_RECORD_HEAD] = {(int64_t)(d->seq + 1), ti, (int64_t)n, (int64_t)w, divisor};
    int ok = fwrite(h, sizeof h, 1, d->f) == 1;
    for (size_t j = 0; ok && j < n; j++) {
        int64_t key = (int64_t)(t->order[j] * (uint64_t)ps->servers) + ps->role_rank;
        ok = fwrite(&key, sizeof key, 1, d->f) == 1;
    }
    if (!ok || fwrite(t->acc, sizeof *t->acc, n * w, d->f) != n * w)
        return msr_err(MSR_ERR_IO, "ps log %s: %s", d->log, strerror(errno));
    return record_end(d);
}

msr_status_t ps_durable_ckpt_due(msr_ps_t *ps)
{
    struct ps_durable *d = ps->durable;
    return d->seq - d->ckpt_seq >= d->every ? ckpt_write(ps) : MSR_OK;
}

void ps_durable_free(msr_ps_t *ps)
{
    if (ps->durable == NULL)
        return;
    if (ps->durable->f)
        fclose(ps->durable->f);
    msr_free(ps->durable);
    ps->durable = NULL;
}

/* A new log gets its magic; an old one must begin with it (a log of an
 * earlier format is refused, not misread). The stream is left after it. */
static msr_status_t log_open(struct ps_durable *d)
{
    uint64_t magic = 0;
    if (fread(&magic, sizeof magic, 1, d->f) == 1) {
        if (magic == LOG_MAGIC)
            return MSR_OK;
    } else if (ftell(d->f) == 0 && !ferror(d->f)) { /* empty: a new log */
        if (d->readonly)                            /* cut before its magic: no record */
            return MSR_OK;
        return log_start(d) == 0 ? MSR_OK
                                 : msr_err(MSR_ERR_IO, "ps log %s: %s", d->log, strerror(errno));
    }
    return msr_err(MSR_ERR_CORRUPT, "ps log %s: not a parameter server log of this version",
                   d->log);
}

/* ---- the layout: which servers and workers wrote the state ----
 *
 * dir/ps-layout holds the number of servers and of workers whose files
 * dir holds, and their generation G: generation 0's files are
 * ps-s<k>.ckpt and ps-s<k>.log, generation G's ps-g<G>-s<k>.*. A server
 * started with other numbers (an elastic job re-formed, a job started
 * again with more or fewer servers) reshards: it builds its rows from
 * every old server's checkpoint and log, read only, writes them as
 * generation G + 1, waits for every new server's checkpoint and only
 * then moves the layout on. Until then a crash leaves the old state the
 * one restored, whole; after it every new server's checkpoint holds the
 * rows it owns, and no update was acknowledged in between. */

#define LAYOUT_MAGIC 0x31594c535052534dull /* "MSRPSLY1" */

typedef struct ps_layout {
    uint64_t servers, workers, gen;
} ps_layout_t;

/* The paths of server k's files of generation gen under d->dir. */
static void durable_names(struct ps_durable *d, uint64_t gen, int k)
{
    char base[64];
    if (gen == 0)
        snprintf(base, sizeof base, "ps-s%d", k);
    else
        snprintf(base, sizeof base, "ps-g%llu-s%d", (unsigned long long)gen, k);
    snprintf(d->ckpt, sizeof d->ckpt, "%s/%s.ckpt", d->dir, base);
    snprintf(d->tmp, sizeof d->tmp, "%s/%s.ckpt.tmp", d->dir, base);
    snprintf(d->log, sizeof d->log, "%s/%s.log", d->dir, base);
    d->gen = gen;
}

/* Reads dir's layout into *l; *have_p 0 when there is none (a new
 * directory, or one written before layouts: taken as this job's). */
static msr_status_t layout_read(const char *dir, ps_layout_t *l, int *have_p)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/ps-layout", dir);
    *have_p = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return errno == ENOENT ? MSR_OK
                               : msr_err(MSR_ERR_IO, "ps layout %s: %s", path, strerror(errno));
    uint64_t v[4];
    int ok = fread(v, sizeof v, 1, f) == 1 && fgetc(f) == EOF;
    fclose(f);
    if (!ok || v[0] != LAYOUT_MAGIC || v[1] == 0 || v[1] >= INT_MAX || v[2] == 0 ||
        v[2] >= INT_MAX || v[3] >= INT_MAX)
        return msr_err(MSR_ERR_CORRUPT, "ps layout %s: not a parameter server layout", path);
    *l = (ps_layout_t){v[1], v[2], v[3]};
    *have_p = 1;
    return MSR_OK;
}

/* Writes dir's layout l (server me's temporary file, synced, renamed over
 * the old, the directory synced): every server may write the same one. */
static msr_status_t layout_write(const char *dir, int me, const ps_layout_t *l)
{
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/ps-layout", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, me);
    uint64_t v[4] = {LAYOUT_MAGIC, l->servers, l->workers, l->gen};
    FILE *f = open_private(tmp, O_WRONLY | O_CREAT | O_TRUNC, "wb");
    int ok = f != NULL && fwrite(v, sizeof v, 1, f) == 1 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (f == NULL || fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0 || dir_sync(dir) != 0) {
        msr_status_t st = msr_err(MSR_ERR_IO, "ps layout %s: %s", path, strerror(errno));
        unlink(tmp);
        return st;
    }
    return MSR_OK;
}

/* Copies the rows of old shard o (server s of old_servers) that server me
 * of ps->servers owns into t: values and optimizer state. */
static void rows_take(const msr_ps_t *ps, ps_table_t *t, const ps_table_t *o, uint64_t s,
                      uint64_t old_servers)
{
    size_t w = t->cfg.width, row = w * sizeof(float);
    uint64_t S = (uint64_t)ps->servers, me = (uint64_t)ps->role_rank;
    for (uint64_t j = 0; j < o->local_rows; j++) {
        uint64_t r = j * old_servers + s;
        if (r % S != me)
            continue;
        uint64_t i = r / S;
        memcpy(t->w + i * w, o->w + j * w, row);
        if (t->s1)
            memcpy(t->s1 + i * w, o->s1 + j * w, row);
        if (t->s2)
            memcpy(t->s2 + i * w, o->s2 + j * w, row);
        if (t->steps)
            t->steps[i] = o->steps[j];
    }
}

/* Server s of layout old: its shard restored as it would restore it
 * (checkpoint, then its log replayed with its own numbers of servers and
 * workers), its files read only, then the rows ps's server owns taken. */
static msr_status_t reshard_one(msr_ps_t *ps, const ps_layout_t *old, int s, ps_table_t *tabs)
{
    struct ps_durable od = {0};
    msr_ps_t sh = *ps; /* the old server's numbers, the same tables */
    sh.servers = (int)old->servers;
    sh.workers = (int)old->workers;
    sh.role_rank = s;
    sh.tables = tabs;
    sh.durable = &od;
    od.readonly = 1;
    snprintf(od.dir, sizeof od.dir, "%s", ps->durable->dir);
    durable_names(&od, old->gen, s);
    msr_status_t st = MSR_OK;
    for (int i = 0; i < ps->ntables && st == MSR_OK; i++) {
        memset(&tabs[i], 0, sizeof tabs[i]);
        tabs[i].cfg = ps->tables[i].cfg;
        st = ps_table_alloc_shard(&sh, &tabs[i]);
    }
    if (st == MSR_OK && (od.f = fopen(od.log, "rb")) == NULL)
        st = msr_err(errno == ENOENT ? MSR_ERR_CORRUPT : MSR_ERR_IO,
                     "ps log %s: %s (its layout has %llu servers of generation %llu)", od.log,
                     strerror(errno), (unsigned long long)old->servers,
                     (unsigned long long)old->gen);
    if (st == MSR_OK)
        st = log_open(&od);
    if (st == MSR_OK)
        st = ckpt_read(&sh);
    if (st == MSR_OK)
        st = log_replay(&sh);
    for (int i = 0; i < ps->ntables && st == MSR_OK; i++)
        rows_take(ps, &ps->tables[i], &tabs[i], (uint64_t)s, old->servers);
    for (int i = 0; i < ps->ntables; i++)
        ps_table_free_shard(&tabs[i]);
    if (od.f)
        fclose(od.f);
    return st;
}

/* The deadline of a reshard's wait for the other servers: the
 * communicator's (60 s without one). */
static int64_t reshard_wait_ms(const msr_ps_t *ps)
{
    if (ps->comm)
        return msr_comm_timeout(ps->comm);
    if (ps->nlinks > 0 && ps->links[0])
        return msr_comm_timeout(ps->links[0]);
    return 60000;
}

/* Waits until every server of ps has written its checkpoint of
 * generation gen (MSR_ERR_TIMEOUT past the deadline). */
static msr_status_t reshard_wait(msr_ps_t *ps, uint64_t gen)
{
    struct ps_durable n = {0};
    snprintf(n.dir, sizeof n.dir, "%s", ps->durable->dir);
    uint64_t deadline = msr_deadline_in_ms(reshard_wait_ms(ps));
    for (int k = 0; k < ps->servers;) {
        durable_names(&n, gen, k);
        if (access(n.ckpt, F_OK) == 0) {
            k++;
            continue;
        }
        if (msr_deadline_passed(deadline))
            return msr_err(MSR_ERR_TIMEOUT,
                           "msr_ps_durable: server %d of %d wrote no resharded checkpoint %s in "
                           "time",
                           k, ps->servers, n.ckpt);
        msr_sleep_ms(5);
    }
    return MSR_OK;
}

/* Whether dir holds every old server's log, each server's reshard
 * reading some and waiting for every new server's rows there: on disks
 * of their own the servers would wait out their deadline for each other;
 * this fails at once instead. */
static msr_status_t old_logs_seen(const msr_ps_t *ps, const ps_layout_t *old)
{
    struct ps_durable n = {0};
    snprintf(n.dir, sizeof n.dir, "%s", ps->durable->dir);
    for (int s = 0; s < (int)old->servers; s++) {
        durable_names(&n, old->gen, s);
        if (access(n.log, F_OK) != 0)
            return msr_err(errno == ENOENT ? MSR_ERR_CORRUPT : MSR_ERR_IO,
                           "ps log %s: %s (its layout has %llu servers of generation %llu; "
                           "resharding needs a directory every server sees)",
                           n.log, strerror(errno), (unsigned long long)old->servers,
                           (unsigned long long)old->gen);
    }
    return MSR_OK;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* This server's rows of layout old's state, written as generation
 * old->gen + 1 (a checkpoint, synced, and an empty log); the layout moves
 * on once every server has written its own. */
static msr_status_t reshard(msr_ps_t *ps, const ps_layout_t *old)
{
    struct ps_durable *d = ps->durable;
    msr_status_t st = old_logs_seen(ps, old);
    if (st != MSR_OK)
        return st;
    ps_table_t *tabs = msr_calloc((size_t)(ps->ntables ? ps->ntables : 1), sizeof *tabs);
    if (tabs == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "msr_ps_durable: out of memory");
    /* old server s holds row r when r % old == s, this one when r % servers
     * == me: both for some r only when s and me agree modulo their gcd */
    uint64_t g = gcd(old->servers, (uint64_t)ps->servers);
    for (int s = 0; s < (int)old->servers && st == MSR_OK; s++)
        if ((uint64_t)s % g == (uint64_t)ps->role_rank % g)
            st = reshard_one(ps, old, s, tabs);
    msr_free(tabs);
    if (st != MSR_OK)
        return msr_err_prefix(st,
                              "msr_ps_durable: resharding %llu servers and %llu workers into "
                              "%d and %d",
                              (unsigned long long)old->servers, (unsigned long long)old->workers,
                              ps->servers, ps->workers);
    ps_layout_t now = {(uint64_t)ps->servers, (uint64_t)ps->workers, old->gen + 1};
    durable_names(d, now.gen, ps->role_rank);
    d->f = open_private(d->log, O_RDWR | O_CREAT | O_TRUNC, "r+b");
    if (d->f == NULL)
        return msr_err(MSR_ERR_IO, "msr_ps_durable: %s: %s", d->log, strerror(errno));
    d->seq = 0;
    d->sync_every = 1; /* the new generation on disk before the layout names it */
    st = ckpt_write(ps);
    d->sync_every = 0;
    if (st == MSR_OK)
        st = reshard_wait(ps, now.gen);
    if (st == MSR_OK)
        st = layout_write(d->dir, ps->role_rank, &now);
    return st;
}

/* Server 0 removes the files no start can read any more: of generations
 * before keep_from and after keep_to (a reshard that never finished). */
static void generations_drop(const msr_ps_t *ps, uint64_t keep_from, uint64_t keep_to)
{
    if (ps->role_rank != 0)
        return;
    DIR *dh = opendir(ps->durable->dir);
    if (dh == NULL)
        return;
    for (struct dirent *e; (e = readdir(dh)) != NULL;) {
        unsigned long long gen = 0;
        int k, end = 0;
        char rest[16];
        if (sscanf(e->d_name, "ps-s%d.%15s%n", &k, rest, &end) != 2 &&
            sscanf(e->d_name, "ps-g%llu-s%d.%15s%n", &gen, &k, rest, &end) != 3)
            continue;
        if (end != (int)strlen(e->d_name) || k < 0 ||
            (strcmp(rest, "ckpt") != 0 && strcmp(rest, "log") != 0 &&
             strcmp(rest, "ckpt.tmp") != 0) ||
            (gen >= keep_from && gen <= keep_to))
            continue;
        unlinkat(dirfd(dh), e->d_name, 0);
    }
    closedir(dh);
}

msr_status_t msr_ps_durable(msr_ps_t *ps, const char *dir, uint64_t ckpt_every,
                            uint64_t *restored_p)
{
    if (ps == NULL || dir == NULL || ps->role != MSR_PS_SERVER || ps->serving || ps->durable)
        return msr_err(MSR_ERR_STATE, "msr_ps_durable: a server's, once, before msr_ps_serve");
    if (strlen(dir) >= sizeof ps->durable->dir)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "msr_ps_durable: a directory name of %zu bytes (at most "
                       "%zu)",
                       strlen(dir), sizeof ps->durable->dir - 1);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return msr_err(MSR_ERR_IO, "msr_ps_durable: mkdir %s: %s", dir, strerror(errno));
    struct ps_durable *d = msr_calloc(1, sizeof *d);
    if (d == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "msr_ps_durable: out of memory");
    ps->durable = d;
    d->every = ckpt_every ? ckpt_every : 10000;
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    ps_layout_t l = {(uint64_t)ps->servers, (uint64_t)ps->workers, 0};
    int have = 0;
    msr_status_t st = layout_read(dir, &l, &have);
    int same =
        st == MSR_OK && l.servers == (uint64_t)ps->servers && l.workers == (uint64_t)ps->workers;
    if (st == MSR_OK && !same) {
        generations_drop(ps, l.gen, l.gen + 1); /* older ones: nobody reads them now */
        st = reshard(ps, &l);
    } else if (st == MSR_OK) {
        durable_names(d, l.gen, ps->role_rank);
        /* not "a+", which forces every write to the end: the replay sets it */
        d->f = open_private(d->log, O_RDWR | O_CREAT, "r+b");
        st = d->f ? MSR_OK : msr_err(MSR_ERR_IO, "msr_ps_durable: %s: %s", d->log, strerror(errno));
        if (st == MSR_OK)
            st = log_open(d);
        if (st == MSR_OK)
            st = ckpt_read(ps);
        if (st == MSR_OK)
            st = log_replay(ps);
        if (st == MSR_OK && !have)
            st = layout_write(dir, ps->role_rank, &l);
        /* the generation before may still be read by a server of this
         * start resharding from it; those before it and any after are not */
        if (st == MSR_OK)
            generations_drop(ps, l.gen ? l.gen - 1 : 0, l.gen);
    }
    if (st != MSR_OK) {
        ps_durable_free(ps);
        return st;
    }
    if (restored_p)
        *restored_p = d->seq;
    return MSR_OK;
}

msr_status_t msr_ps_durable_fsync(msr_ps_t *ps, uint64_t every)
{
    if (ps == NULL || ps->durable == NULL || ps->serving)
        return msr_err(MSR_ERR_STATE,
                       "msr_ps_durable_fsync: a durable server's, before msr_ps_serve");
    ps->durable->sync_every = every;
    ps->durable->unsynced = 0;
    return MSR_OK;
}
