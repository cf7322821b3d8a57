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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
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

/* Writes a file atomically: temporary name, fsync, rename, fsync the dir. */
static msr_status_t write_atomic(const char *dir, const char *name, const void *a, size_t alen,
                                 const void *b, size_t blen)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    /* a fresh file of ours: never through a link, never one planted there */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, ckpt_file_mode());
    if (fd < 0)
        return io_error("cannot create", tmp);
    msr_status_t st = msr_write_all(fd, a, alen);
    if (st == MSR_OK && blen)
        st = msr_write_all(fd, b, blen);
    if (st != MSR_OK || fsync(fd) != 0) {
        io_error("cannot write", tmp);
        close(fd);
        unlink(tmp);
        return MSR_ERR_IO;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        io_error("cannot write", path);
        unlink(tmp);
        return MSR_ERR_IO;
    }
    fsync_dir(dir);
    return MSR_OK;
}

/* Every rank's `len` bytes, in rank order, in *all_p (free it with
 * msr_free). A rank that cannot allocate them still takes part, with no
 * bytes: the others' gathers then fail at once (the lengths differ, the
 * text names the rank) instead of waiting for its bytes until the
 * store's deadline, and it fails with MSR_ERR_NO_MEMORY. */
msr_status_t msr_ckpt_gather_all(msr_ctx_t *ctx, const void *mine, size_t len, void **all_p)
{
    int world = msr_world_size(ctx);
    void *all = msr_calloc((size_t)world, len);
    if (all == NULL) {
        unsigned char none;
        (void)msr_allgather(ctx, &none, 0, &none);
        return msr_err(MSR_ERR_NO_MEMORY,
                       "checkpoint: rank %d is out of memory for %d ranks' %zu bytes each",
                       msr_rank(ctx), world, len);
    }
    msr_status_t st = msr_allgather(ctx, mine, len, all);
    if (st != MSR_OK) {
        msr_free(all);
        return st;
    }
    *all_p = all;
    return MSR_OK;
}

/* Removes this rank's files of committed steps older than the keep newest.
 * The window counts this rank's committed steps of this world and the
 * complete steps (a MANIFEST) of other worlds alike: after a restart on
 * another world size, a resume loads the newest of either
 * (msr_ckpt_latest_any), so an older step of this world behind newer ones
 * of another is outside the window, not kept in place of them. */
static void prune(msr_ctx_t *ctx, const char *dir, int keep)
{
    if (keep <= 0)
        return;
    int64_t *steps;
    size_t n = msr_ckpt_list_steps(dir, &steps);
    /* newest first */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            int64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    int kept = 0;
    int64_t oldest_kept = -1;
    for (size_t i = 0; i < n; i++) {
        int mine = msr_ckpt_have_step(ctx, dir, steps[i]) == 1;
        if (!mine) {
            int w = msr_ckpt_manifest_world(dir, steps[i]);
            if (w <= 0 || w == msr_world_size(ctx))
                continue; /* not complete: not in the window */
        }
        if (kept++ < keep) {
            oldest_kept = steps[i];
            continue;
        }
        if (!mine)
            continue; /* another world's: rank 0 removes it whole below */
        char sd[4096], path[4200];
        step_dir(dir, steps[i], sd, sizeof sd);
        snprintf(path, sizeof path, "%s/rank-%d.commit", sd, msr_rank(ctx));
        unlink(path);
        snprintf(path, sizeof path, "%s/rank-%d.bin", sd, msr_rank(ctx));
        unlink(path);
        if (msr_rank(ctx) == 0) {
            snprintf(path, sizeof path, "%s/MANIFEST", sd);
            unlink(path);
        }
        rmdir(sd); /* the last rank to leave removes it */
    }
    /* Steps older than the kept window that another world wrote (before a
     * restart on another world size), or that a crash left incomplete, have
     * no rank of this world to remove them: rank 0 removes them whole. */
    if (msr_rank(ctx) == 0 && kept >= keep && oldest_kept >= 0) {
        for (size_t i = 0; i < n; i++) {
            if (steps[i] >= oldest_kept)
                continue;
            char sd[4096], path[4400];
            step_dir(dir, steps[i], sd, sizeof sd);
            DIR *d = opendir(sd);
            struct dirent *e;
            while (d && (e = readdir(d)) != NULL) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                    continue;
                snprintf(path, sizeof path, "%s/%s", sd, e->d_name);
                unlink(path);
            }
            if (d)
                closedir(d);
            rmdir(sd);
        }
    }
    free(steps);
}

/* Removes the temporary files this rank's writes left in step folder sd
 * when a process was killed mid-write (rank R: rank-R.bin.tmp.PID and
 * rank-R.commit.tmp.PID; rank 0 also MANIFEST.tmp.PID). Other ranks' files
 * are theirs to remove: they may be writing them now. */
void msr_ckpt_remove_leftovers(msr_ctx_t *ctx, const char *sd)
{
    char mine[2][48];
    snprintf(mine[0], sizeof mine[0], "rank-%d.bin.tmp.", msr_rank(ctx));
    snprintf(mine[1], sizeof mine[1], "rank-%d.commit.tmp.", msr_rank(ctx));
    DIR *d = opendir(sd);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        int ours = strncmp(e->d_name, mine[0], strlen(mine[0])) == 0 ||
                   strncmp(e->d_name, mine[1], strlen(mine[1])) == 0 ||
                   (msr_rank(ctx) == 0 && strncmp(e->d_name, "MANIFEST.tmp.", 13) == 0);
        if (!ours)
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", sd, e->d_name);
        if (unlink(path) == 0)
            MSR_INFO("checkpoint: removed %s, left by a write that did not finish", path);
    }
    if (d)
        closedir(d);
}

msr_status_t msr_ckpt_save(msr_ctx_t *ctx, const char *dir, int64_t step, const void *data,
                           size_t len, int keep)
{
    if (ctx == NULL || dir == NULL || *dir == '\0' || step < 0 || (data == NULL && len)) {
        msr_err_set("checkpoint: bad arguments (dir, step >= 0, data)");
        return MSR_ERR_INVALID_ARG;
    }
    char sd[4096];
    step_dir(dir, step, sd, sizeof sd);
    msr_status_t st = mkdirs(sd);
    if (st == MSR_OK)
        st = check_step_dir(sd);
    if (st != MSR_OK)
        return st;
    msr_ckpt_remove_leftovers(ctx, sd);
    ckpt_header_t h = {
        (uint32_t)msr_rank(ctx), (uint32_t)msr_world_size(ctx), msr_generation(ctx), step, len,
        msr_crc32(0, data, len)};
    unsigned char hb[MSR_CKPT_HEADER_LEN];
    header_pack(&h, hb);
    char name[64];
    snprintf(name, sizeof name, "rank-%d.bin", msr_rank(ctx));
    st = write_atomic(sd, name, hb, sizeof hb, data, len);
    if (st != MSR_OK)
        return st;
    /* Every rank's state is durable once everyone is past this point. */
    uint64_t mine[2] = {len, h.crc};
    int world = msr_world_size(ctx);
    uint64_t *all = NULL;
    st = msr_ckpt_gather_all(ctx, mine, sizeof mine, (void **)&all);
    if (st != MSR_OK)
        return st;
    if (msr_rank(ctx) == 0) {
        msr_buf_t m = MSR_BUF_INIT;
        msr_buf_printf(&m,
                       "{\n  \"step\": %" PRId64 ",\n  \"world_size\": %d,\n  \"generation\": %d,\n"
                       "  \"shards\": [",
                       step, world, msr_generation(ctx));
        for (int r = 0; r < world; r++)
            msr_buf_printf(&m,
                           "%s\n    {\"rank\": %d, \"bytes\": %" PRIu64 ", \"crc32\": %" PRIu64 "}",
                           r ? "," : "", r, all[2 * r], all[2 * r + 1]);
        msr_buf_printf(&m, "\n  ]\n}\n");
        st = m.data ? write_atomic(sd, "MANIFEST", m.data, m.len, NULL, 0) : MSR_ERR_NO_MEMORY;
        msr_buf_cleanup(&m);
    }
    msr_free(all);
    if (st != MSR_OK)
        return st;
    char commit[64];
    snprintf(name, sizeof name, "rank-%d.commit", msr_rank(ctx));
    int n = snprintf(commit, sizeof commit, "%" PRId64 "\n", step);
    st = write_atomic(sd, name, commit, (size_t)n, NULL, 0);
    if (st == MSR_OK)
        prune(ctx, dir, keep);
    return st;
}

/* Maps the pages that hold [p, p + len) writable before a read fills
 * them (MADV_POPULATE_WRITE, Linux 5.14): one call for the chunk instead
 * of a page fault every 4 KiB in the kernel's copy out of the page cache,
 * each a trap that a virtual machine makes dear. Only pages the read
 * writes into anyway, their contents unchanged. 0 when done (no bytes:
 * nothing to do); -1 when the kernel cannot (older, or memory it cannot
 * populate so), and then the read faults them in as before. */
int msr_ckpt_prefault(void *p, size_t len)
{
    if (len == 0)
        return 0;
#ifdef MADV_POPULATE_WRITE
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + len + page - 1) & ~(page - 1);
    if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) == 0)
        return 0;
#else
    (void)p;
#endif
    return -1;
}
