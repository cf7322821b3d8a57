/* libmsrun's checkpoints: atomic per-rank files, a commit per rank once the
 * whole step is durable, and agreement on the latest complete step. */
#include "msrun/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/log.h"
#include "base/status.h"
#include "base/util.h"
#include "base/err.h"
#include "rendezvous/checkpoint_impl.h"

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void header_pack(const ckpt_header_t *h, unsigned char out[MSR_CKPT_HEADER_LEN])
{
    memset(out, 0, MSR_CKPT_HEADER_LEN);
    memcpy(out, CKPT_MAGIC, 8);
    put32(out + 8, 1); /* version */
    put32(out + 12, h->rank);
    put32(out + 16, h->world);
    put32(out + 20, (uint32_t)h->generation);
    put64(out + 24, (uint64_t)h->step);
    put64(out + 32, h->len);
    put32(out + 40, h->crc);
}

/* Checkpoints hold a job's whole state: the folders msrun creates are 0700
 * and the files 0600 (the umask may narrow them further), unless
 * MSR_CKPT_MODE asks for a wider file mode (octal, read and write bits
 * only, e.g. 0640: then folders get execute where files get read, 0750). */
static mode_t ckpt_file_mode(void)
{
    const char *v = getenv("MSR_CKPT_MODE");
    char *end = NULL;
    long m = v && *v ? strtol(v, &end, 8) : 0;
    if (v == NULL || *v == '\0')
        return 0600;
    if (*end != '\0' || (m & ~0666L) != 0 || (m & 0600) != 0600) {
        MSR_WARN("checkpoint: MSR_CKPT_MODE=%s is not a file mode like 0640 (read and write "
                 "bits, the owner's included): using 0600",
                 v);
        return 0600;
    }
    return (mode_t)m;
}

static mode_t ckpt_dir_mode(mode_t file_mode)
{
    return file_mode | ((file_mode & 0444) >> 2);
}

static msr_status_t mkdirs(const char *path)
{
    mode_t mode = ckpt_dir_mode(ckpt_file_mode());
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1; *c; c++) {
        if (*c == '/') {
            *c = '\0';
            if (mkdir(p, mode) != 0 && errno != EEXIST)
                return io_error("cannot create", p);
            *c = '/';
        }
    }
    if (mkdir(p, mode) != 0 && errno != EEXIST)
        return io_error("cannot create", p);
    return MSR_OK;
}

/* A step folder is written into only when it is a real folder of this
 * user: a symbolic link planted in its place (or a folder of someone else)
 * would send the job's state where another user chose. */
static msr_status_t check_step_dir(const char *sd)
{
    struct stat sb;
    if (lstat(sd, &sb) != 0)
        return io_error("cannot check", sd);
    if (S_ISLNK(sb.st_mode) || !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid()) {
        msr_err_set("checkpoint: %s is %s: refusing to write the job's state there", sd,
                    S_ISLNK(sb.st_mode)    ? "a symbolic link"
                    : !S_ISDIR(sb.st_mode) ? "not a folder"
                                           : "owned by another user");
        return MSR_ERR_PERMISSION;
    }
    return MSR_OK;
}

static void fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Writes what fill(fd, arg) puts into a file, atomically: temporary name,
 * fsync, rename, fsync the dir. */
static msr_status_t write_atomic_fn(const char *dir, const char *name,
                                    msr_status_t (*fill)(int, const void *), const void *arg)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    /* a fresh file of ours: never through a link, never one planted there */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, ckpt_file_mode());
    if (fd < 0)
        return io_error("cannot create", tmp);
    msr_status_t st = fill(fd, arg);
    if (st != MSR_OK || fsync(fd) != 0) {
        io_error("cannot write", tmp);
        int e = errno; /* for the commit's verdict */
        close(fd);
        unlink(tmp);
        errno = e;
        return MSR_ERR_IO;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        io_error("cannot write", path);
        int e = errno;
        unlink(tmp);
        errno = e;
        return MSR_ERR_IO;
    }
    fsync_dir(dir);
    return MSR_OK;
}

typedef struct bytes {
    const void *p;
    size_t len;
} bytes_t;

static msr_status_t fill_bytes(int fd, const void *arg)
{
    const bytes_t *b = arg;
    return msr_write_all(fd, b->p, b->len);
}

/* A small file (a commit) written atomically. */
static msr_status_t write_atomic(const char *dir, const char *name, const void *p, size_t len)
{
    bytes_t b = {p, len};
    return write_atomic_fn(dir, name, fill_bytes, &b);
}

/* Every rank's `len` bytes, in rank order, in *all_p (free it with
 * msr_free). A rank that cannot allocate them still takes part, with no
 * bytes: the others' gathers then fail at once (the lengths differ, the
 * text names the rank) instead of waiting for its bytes until the
 * store's deadline, and it fails with MSR_ERR_NO_MEMORY. */
/* msr_ckpt_gather_all, and *known_p: 1 when every rank whose call ends
 * ends it as this one did (all gathered; a contribution of another
 * length, which every rank sees; this rank out of memory, which gives
 * none and so fails every rank's), 0 when this rank's store call itself
 * failed (its deadline, a lost connection, memory inside the call) and
 * the others may have gathered everything. */
static msr_status_t gather_all(msr_ctx_t *ctx, const void *mine, size_t len, void **all_p,
                               int *known_p)
{
    int world = msr_world_size(ctx);
    void *all = msr_calloc((size_t)world, len);
    *known_p = 1;
    if (all == NULL) {
        unsigned char none;
        (void)msr_allgather(ctx, &none, 0, &none);
        return msr_err(MSR_ERR_NO_MEMORY,
                       "checkpoint: rank %d is out of memory for %d ranks' %zu bytes each",
                       msr_rank(ctx), world, len);
    }
    msr_status_t st = msr_allgather(ctx, mine, len, all);
    if (st != MSR_OK) {
        *known_p = st == MSR_ERR_INVALID_ARG; /* msr_allgather: the lengths differ */
        msr_free(all);
        return st;
    }
    *all_p = all;
    return MSR_OK;
}

msr_status_t msr_ckpt_gather_all(msr_ctx_t *ctx, const void *mine, size_t len, void **all_p)
{
    int known;
    return gather_all(ctx, mine, len, all_p, &known);
}

/* A rank's state being written (checkpoint.h): its temporary file, the
 * bytes after the head written so far and their CRC. The file's cache is
 * written back and dropped a window at a time behind the writes
 * (writer_flow), so a state larger than the rank's memory limit never
 * sits whole in the page cache that the limit counts. */
struct msr_ckpt_writer {
    msr_ctx_t *ctx;
    int fd;
    msr_status_t st; /* the first failure: every call after it fails */
    int errnum;      /* the errno behind it (0: none) */
    int checked;     /* sd made and checked: this rank's files there are its own */
    int64_t step;
    size_t head_len;
    uint64_t len;    /* bytes after the head */
    uint32_t crc;    /* their CRC */
    uint64_t synced; /* file bytes written back and dropped from the cache */
    char dir[4096], sd[4096], path[4200], tmp[4300];
};

/* w's failure st (the text set), with the errno behind it (0: none):
 * every call after it fails, and the commit agrees with it. */
static msr_status_t writer_failed(msr_ckpt_writer_t *w, msr_status_t st, int errnum)
{
    w->st = st;
    w->errnum = errnum;
    return st;
}

/* A save's agreement gathers from every rank its state's length and CRC
 * and its verdict: 0 when its state is durable, else the status it failed
 * with and the errno behind it (0: none). */
enum { V_LEN, V_CRC, V_STATUS, V_ERRNO, V_FIELDS };

/* Removes what this rank wrote of a step that is not committed (a rank
 * failed before the agreement): its state and commit (a step saved again
 * may have had them), rank 0's MANIFEST, and the folder once empty. */
static void drop_step(const msr_ckpt_writer_t *w)
{
    char path[4400];
    int rank = msr_rank(w->ctx);
    if (!w->checked) { /* sd may be a link planted there: nothing of ours in it */
        if (w->sd[0] != '\0')
            rmdir(w->sd); /* not through a link: a folder a failed open left, once empty */
        return;
    }
    snprintf(path, sizeof path, "%s/rank-%d.commit", w->sd, rank);
    unlink(path);
    snprintf(path, sizeof path, "%s/rank-%d.bin", w->sd, rank);
    unlink(path);
    if (rank == 0) {
        snprintf(path, sizeof path, "%s/MANIFEST", w->sd);
        unlink(path);
    }
    rmdir(w->sd); /* the last rank to leave removes it */
}

/* The first rank whose verdict in all (world ranks') is a failure, its
 * error set: "rank 1 could not write step 6 under DIR (no space left on
 * device; ...)" (what: "write", or "commit" after the state was agreed);
 * MSR_OK when none failed. */
static msr_status_t verdicts_check(const msr_ckpt_writer_t *w, const uint64_t *all,
                                   const char *what)
{
    int world = msr_world_size(w->ctx);
    for (int r = 0; r < world; r++) {
        const uint64_t *v = all + (size_t)r * V_FIELDS;
        msr_status_t st = (msr_status_t)(int64_t)v[V_STATUS];
        if (st == MSR_OK)
            continue;
        int e = (int)(int64_t)v[V_ERRNO];
        char why[256];
        snprintf(why, sizeof why, "%s", e != 0 ? strerror(e) : msr_status_str(st));
        if (why[0] >= 'A' && why[0] <= 'Z')
            why[0] = (char)(why[0] - 'A' + 'a');
        return msr_err(
            st, "checkpoint: rank %d could not %s step %" PRId64 " under %s (%s; its log says why)",
            r, what, w->step, w->dir, why);
    }
    return MSR_OK;
}

/* The save's agreement on step w->step: every rank's verdict, mine from
 * w (w->st: this rank failed), gathered into *all_p (NULL: freed). A rank
 * that failed still takes part, so that no rank waits for it until the
 * store's deadline: it returns its own error (its text kept), every other
 * rank an error naming the first rank that failed (what it could not do:
 * what); the step is then dropped. But with committed (the commit's
 * agreement, every rank's state and commit written before it), a rank
 * whose own store call failed cannot tell whether the others gathered
 * every verdict, found them good and pruned the steps before: it keeps
 * its files of the step, which is then whole on disk, and prunes nothing
 * (were it to drop them, the others' pruning could leave no step to
 * resume from). */
static msr_status_t save_agree(msr_ckpt_writer_t *w, uint64_t len, uint32_t crc, const char *what,
                               int committed, uint64_t **all_p)
{
    uint64_t mine[V_FIELDS] = {len, crc, (uint64_t)(int64_t)w->st, (uint64_t)(int64_t)w->errnum};
    char own[MSR_ERR_TEXT_MAX] = "";
    if (w->st != MSR_OK)
        snprintf(own, sizeof own, "%s", msr_err_msg_or(w->st));
    uint64_t *all = NULL;
    int known = 1;
    msr_status_t st = gather_all(w->ctx, mine, sizeof mine, (void **)&all, &known);
    if (st != MSR_OK && committed && !known && w->st == MSR_OK)
        return msr_err_prefix(st,
                              "checkpoint: rank %d's agreement on committing step %" PRId64
                              " under %s did not end (its files of the step are kept: the step "
                              "is whole if every other rank committed it; nothing pruned)",
                              msr_rank(w->ctx), w->step, w->dir);
    if (st == MSR_OK && w->st == MSR_OK)
        st = verdicts_check(w, all, what);
    if (w->st != MSR_OK)
        st = msr_err(w->st, "%s", own);
    if (st != MSR_OK) {
        msr_free(all);
        drop_step(w);
        return st;
    }
    if (all_p != NULL)
        *all_p = all;
    else
        msr_free(all);
    return MSR_OK;
}

/* A step's MANIFEST: its step, world size, generation and every rank's
 * length and CRC (all: V_FIELDS each). */
typedef struct manifest {
    int64_t step;
    int world, generation;
    const uint64_t *all;
} manifest_t;

/* Writes the MANIFEST into fd without allocating: after the agreement, a
 * rank out of memory would leave the step without it. */
static msr_status_t fill_manifest(int fd, const void *arg)
{
    const manifest_t *m = arg;
    int bad = dprintf(fd,
                      "{\n  \"step\": %" PRId64 ",\n  \"world_size\": %d,\n  \"generation\": %d,\n"
                      "  \"shards\": [",
                      m->step, m->world, m->generation) < 0;
    for (int r = 0; r < m->world && !bad; r++)
        bad = dprintf(fd, "%s\n    {\"rank\": %d, \"bytes\": %" PRIu64 ", \"crc32\": %" PRIu64 "}",
                      r ? "," : "", r, m->all[V_FIELDS * r + V_LEN],
                      m->all[V_FIELDS * r + V_CRC]) < 0;
    return bad || dprintf(fd, "\n  ]\n}\n") < 0 ? MSR_ERR_IO : MSR_OK;
}

/* After the agreement, every rank's state durable: rank 0's MANIFEST and
 * this rank's commit, then a second agreement, then the older steps
 * pruned. A rank that could not write its part of the commit says so in
 * the second: the step is dropped on every rank and nothing pruned, so a
 * step one rank could not commit never costs the others the step before
 * it (with keep 1 they would remove it, the new one incomplete). len and
 * crc: this rank's state's; w->st: this rank's failure before (it still
 * agrees). */
static msr_status_t save_finish(msr_ckpt_writer_t *w, uint64_t len, uint32_t crc, int keep)
{
    msr_ctx_t *ctx = w->ctx;
    uint64_t *all = NULL;
    msr_status_t st = save_agree(w, len, crc, "write", 0, &all);
    if (st != MSR_OK)
        return st;
    manifest_t m = {w->step, msr_world_size(ctx), msr_generation(ctx), all};
    if (msr_rank(ctx) == 0)
        st = write_atomic_fn(w->sd, "MANIFEST", fill_manifest, &m);
    msr_free(all);
    if (st == MSR_OK) {
        char commit[64], name[64];
        snprintf(name, sizeof name, "rank-%d.commit", msr_rank(ctx));
        int n = snprintf(commit, sizeof commit, "%" PRId64 "\n", w->step);
        st = write_atomic(w->sd, name, commit, (size_t)n);
    }
    if (st != MSR_OK)
        writer_failed(w, st, errno);
    if ((st = save_agree(w, 0, 0, "commit", 1, NULL)) == MSR_OK)
        msr_ckpt_prune(ctx, w->dir, keep);
    return st;
}

/* Closes w's file (removing it with remove_tmp); w's memory stays. */
static void writer_end(msr_ckpt_writer_t *w, int remove_tmp)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    if (remove_tmp)
        unlink(w->tmp);
}

/* io_error's, for w: the errno kept for the agreement. */
static msr_status_t writer_io_error(msr_ckpt_writer_t *w, const char *what, const char *path)
{
    int e = errno;
    return writer_failed(w, io_error(what, path), e);
}

/* Sets up w (the caller's memory, no allocation: msr_ckpt_save's first
 * allocation stays its gather's) for this rank's state of step. On a
 * failure after ctx was checked, w says it (w->st) for the agreement. */
static msr_status_t writer_init(msr_ckpt_writer_t *w, msr_ctx_t *ctx, const char *dir, int64_t step,
                                size_t head_len)
{
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
    w->fd = -1;
    w->step = step;
    w->head_len = head_len;
    if (ctx == NULL || dir == NULL || *dir == '\0' || step < 0 ||
        head_len > SIZE_MAX - MSR_CKPT_HEADER_LEN || strlen(dir) >= sizeof w->dir) {
        msr_err_set("checkpoint: bad arguments (dir, step >= 0, data)");
        return writer_failed(w, MSR_ERR_INVALID_ARG, 0);
    }
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    step_dir(dir, step, w->sd, sizeof w->sd);
    msr_status_t st = mkdirs(w->sd);
    if (st != MSR_OK)
        return writer_failed(w, st, errno);
    if ((st = check_step_dir(w->sd)) != MSR_OK)
        return writer_failed(w, st, st == MSR_ERR_IO ? errno : 0);
    w->checked = 1;
    msr_ckpt_remove_leftovers(ctx, w->sd);
    snprintf(w->path, sizeof w->path, "%s/rank-%d.bin", w->sd, msr_rank(ctx));
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%d", w->path, (int)getpid());
    /* a fresh file of ours: never through a link, never one planted there */
    unlink(w->tmp);
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, ckpt_file_mode());
    if (w->fd < 0 || lseek(w->fd, (off_t)(MSR_CKPT_HEADER_LEN + head_len), SEEK_SET) < 0) {
        st = writer_io_error(w, w->fd < 0 ? "cannot create" : "cannot write", w->tmp);
        writer_end(w, w->fd >= 0);
        return st;
    }
    return MSR_OK;
}

msr_status_t msr_ckpt_writer_open(msr_ctx_t *ctx, const char *dir, int64_t step, size_t head_len,
                                  msr_ckpt_writer_t **writer_p)
{
    if (writer_p == NULL) {
        msr_err_set("checkpoint: bad arguments (dir, step >= 0, data)");
        return MSR_ERR_INVALID_ARG;
    }
    msr_ckpt_writer_t *w = msr_malloc(sizeof *w);
    if (w == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "checkpoint: out of memory for a writer");
    msr_status_t st = writer_init(w, ctx, dir, step, head_len);
    if (st != MSR_OK) {
        msr_free(w);
        return st;
    }
    *writer_p = w;
    return MSR_OK;
}

/* The cache behind the writes: once a window past the last one dropped is
 * written, its writeback starts; the window before it, waited for, leaves
 * the cache. At most two windows of the file are in the cache at a time. */
#define WRITER_WINDOW ((uint64_t)8 << 20)

static void writer_flow(msr_ckpt_writer_t *w)
{
    uint64_t end = MSR_CKPT_HEADER_LEN + w->head_len + w->len;
    while (end - w->synced >= 2 * WRITER_WINDOW) {
        off_t a = (off_t)w->synced, b = (off_t)(w->synced + WRITER_WINDOW);
        (void)sync_file_range(w->fd, b, (off_t)WRITER_WINDOW, SYNC_FILE_RANGE_WRITE);
        (void)sync_file_range(w->fd, a, (off_t)WRITER_WINDOW,
                              SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                  SYNC_FILE_RANGE_WAIT_AFTER);
        (void)posix_fadvise(w->fd, a, (off_t)WRITER_WINDOW, POSIX_FADV_DONTNEED);
        w->synced += WRITER_WINDOW;
    }
}

msr_status_t msr_ckpt_writer_write(msr_ckpt_writer_t *w, const void *data, size_t len,
                                   uint32_t *crc_p)
{
    if (w == NULL || (data == NULL && len))
        return msr_err(MSR_ERR_INVALID_ARG, "checkpoint: bad arguments to a writer's write");
    if (w->st != MSR_OK)
        return msr_err(w->st, "checkpoint: %s failed before", w->tmp);
    /* half a window at a time: each part CRC'd while the write left it in
     * the cache, and its window's writeback started while the next is
     * written (a state written whole waited for each window in turn) */
    uint32_t start = w->crc;
    for (size_t at = 0; at < len;) {
        size_t n = MSR_MIN(len - at, (size_t)(WRITER_WINDOW / 2));
        const unsigned char *part = (const unsigned char *)data + at;
        if (msr_write_all(w->fd, part, n) != MSR_OK)
            return writer_io_error(w, "cannot write", w->tmp);
        w->crc = msr_crc32(w->crc, part, n); /* one pass for both CRCs (base/crc32.h) */
        w->len += n;
        at += n;
        writer_flow(w);
    }
    if (crc_p != NULL)
        *crc_p = w->crc ^ msr_crc32_combine(start, 0, len);
    return MSR_OK;
}

/* The head and the file's header into the temporary file, durable, under
 * the state's name; the state's CRC in *crc_p. */
static msr_status_t writer_close(msr_ckpt_writer_t *w, const void *head, uint32_t *crc_p)
{
    uint32_t crc = w->crc;
    if (w->head_len > 0)
        crc = msr_crc32_combine(msr_crc32(0, head, w->head_len), w->crc, w->len);
    ckpt_header_t h = {(uint32_t)msr_rank(w->ctx), (uint32_t)msr_world_size(w->ctx),
                       msr_generation(w->ctx),     w->step,
                       w->head_len + w->len,       crc};
    unsigned char hb[MSR_CKPT_HEADER_LEN];
    header_pack(&h, hb);
    int ok = pwrite(w->fd, hb, sizeof hb, 0) == (ssize_t)sizeof hb &&
             (w->head_len == 0 ||
              pwrite(w->fd, head, w->head_len, MSR_CKPT_HEADER_LEN) == (ssize_t)w->head_len) &&
             fsync(w->fd) == 0;
    if (!ok)
        return writer_io_error(w, "cannot write", w->tmp);
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0 || rename(w->tmp, w->path) != 0) {
        msr_status_t st = writer_io_error(w, "cannot write", w->path);
        unlink(w->tmp);
        return st;
    }
    fsync_dir(w->sd);
    *crc_p = crc;
    return MSR_OK;
}

/* msr_ckpt_writer_commit but for freeing w (whose file is closed). A
 * failure before the agreement (a write before, the head, the file's
 * close and rename) is this rank's verdict in it. */
static msr_status_t writer_commit(msr_ckpt_writer_t *w, const void *head, int keep)
{
    uint32_t crc = 0;
    if (w->st == MSR_OK && head == NULL && w->head_len > 0)
        writer_failed(w,
                      msr_err(MSR_ERR_INVALID_ARG, "checkpoint: %s: no head of %zu bytes to commit",
                              w->tmp, w->head_len),
                      0);
    else if (w->st == MSR_OK)
        (void)writer_close(w, head, &crc);
    else
        msr_err_set("checkpoint: %s failed before its commit: %s", w->tmp,
                    w->errnum != 0 ? strerror(w->errnum) : msr_status_str(w->st));
    if (w->st != MSR_OK)
        writer_end(w, 1);
    return save_finish(w, w->head_len + w->len, crc, keep);
}

msr_status_t msr_ckpt_writer_commit(msr_ckpt_writer_t *w, const void *head, int keep)
{
    if (w == NULL)
        return msr_err(MSR_ERR_INVALID_ARG, "checkpoint: no writer to commit");
    msr_status_t st = writer_commit(w, head, keep);
    msr_free(w);
    return st;
}

void msr_ckpt_writer_abort(msr_ckpt_writer_t *w)
{
    if (w == NULL)
        return;
    writer_end(w, 1);
    msr_free(w);
}

msr_status_t msr_ckpt_writer_fail(msr_ckpt_writer_t *w, msr_status_t st)
{
    if (w == NULL || st == MSR_OK)
        return msr_err(MSR_ERR_INVALID_ARG, "checkpoint: no writer or no failure to agree on");
    char own[MSR_ERR_TEXT_MAX];
    snprintf(own, sizeof own, "%s", msr_err_msg_or(st));
    if (w->st == MSR_OK)
        writer_failed(w, st, 0);
    writer_end(w, 1);
    (void)save_finish(w, 0, 0, 0);
    msr_free(w);
    return msr_err(st, "%s", own);
}

msr_status_t msr_ckpt_save_fail(msr_ctx_t *ctx, const char *dir, int64_t step, msr_status_t st)
{
    if (ctx == NULL || st == MSR_OK)
        return msr_err(MSR_ERR_INVALID_ARG, "checkpoint: no job or no failure to agree on");
    char own[MSR_ERR_TEXT_MAX];
    snprintf(own, sizeof own, "%s", msr_err_msg_or(st));
    msr_ckpt_writer_t w; /* what the agreement needs of one: ctx, dir, step */
    memset(&w, 0, sizeof w);
    w.ctx = ctx;
    w.fd = -1;
    w.step = step;
    snprintf(w.dir, sizeof w.dir, "%s", dir != NULL ? dir : "");
    if (dir != NULL && step >= 0)
        step_dir(dir, step, w.sd, sizeof w.sd);
    writer_failed(&w, st, 0);
    (void)save_finish(&w, 0, 0, 0);
    return msr_err(st, "%s", own);
}

msr_status_t msr_ckpt_save(msr_ctx_t *ctx, const char *dir, int64_t step, const void *data,
                           size_t len, int keep)
{
    msr_ckpt_writer_t w; /* on the stack: the gather's is the first allocation */
    msr_status_t st = writer_init(&w, ctx, dir, step, 0);
    if (ctx == NULL)
        return st;
    if (st == MSR_OK && data == NULL && len)
        writer_failed(
            &w, msr_err(MSR_ERR_INVALID_ARG, "checkpoint: bad arguments (dir, step >= 0, data)"),
            0);
    if (w.st == MSR_OK && msr_ckpt_writer_write(&w, data, len, NULL) == MSR_OK)
        return writer_commit(&w, NULL, keep);
    writer_end(&w, 1); /* this rank's failure (its text set) is its verdict */
    return save_finish(&w, 0, 0, keep);
}
