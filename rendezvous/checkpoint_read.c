/* libmsrun's checkpoints read back: the rank files checked, and the latest
 * step every rank holds agreed on (checkpoint.c writes them). */
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

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int header_unpack(const unsigned char in[MSR_CKPT_HEADER_LEN], ckpt_header_t *h)
{
    if (memcmp(in, CKPT_MAGIC, 8) != 0 || get32(in + 8) != 1)
        return -1;
    h->rank = get32(in + 12);
    h->world = get32(in + 16);
    h->generation = (int32_t)get32(in + 20);
    h->step = (int64_t)get64(in + 24);
    h->len = get64(in + 32);
    h->crc = get32(in + 40);
    return 0;
}

/* Opens a checkpoint file for reading (msr_open_input: never blocks on a
 * FIFO planted in its place). A file that is not regular is refused with
 * MSR_ERR_CORRUPT and "checkpoint: <path> is not a regular file". */
static msr_status_t open_ckpt_file(const char *path, int *fd_p)
{
    msr_status_t st = msr_open_input(path, O_NOFOLLOW, fd_p);
    if (st == MSR_ERR_IO && errno == EINVAL)
        return msr_err_prefix(MSR_ERR_CORRUPT, "checkpoint");
    return st;
}

/* Whether this rank's state of step is committed and its header fits: 1
 * yes, 0 no, -1 when its file is there but not a regular file (the error
 * text says so; a resume must fail on it, not skip it). */
int msr_ckpt_have_step(msr_ctx_t *ctx, const char *dir, int64_t step)
{
    char sd[4096], path[4200];
    step_dir(dir, step, sd, sizeof sd);
    snprintf(path, sizeof path, "%s/rank-%d.commit", sd, msr_rank(ctx));
    if (access(path, F_OK) != 0)
        return 0;
    snprintf(path, sizeof path, "%s/rank-%d.bin", sd, msr_rank(ctx));
    int fd;
    msr_status_t st = open_ckpt_file(path, &fd);
    if (st != MSR_OK)
        return st == MSR_ERR_CORRUPT ? -1 : 0;
    unsigned char hb[MSR_CKPT_HEADER_LEN];
    ckpt_header_t h;
    int ok = msr_read_full(fd, hb, sizeof hb) == MSR_OK && header_unpack(hb, &h) == 0 &&
             h.step == step && h.rank == (uint32_t)msr_rank(ctx) &&
             h.world == (uint32_t)msr_world_size(ctx);
    close(fd);
    return ok;
}

/* Steps found in dir (step-N folders), in *steps_p (malloc'd). */
size_t msr_ckpt_list_steps(const char *dir, int64_t **steps_p)
{
    *steps_p = NULL;
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    size_t n = 0, cap = 0;
    int64_t *steps = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t s;
        if (strncmp(e->d_name, "step-", 5) != 0 ||
            msr_parse_i64(e->d_name + 5, 0, INT64_MAX, &s) != MSR_OK)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *ns = realloc(steps, cap * sizeof *ns);
            if (ns == NULL)
                break;
            steps = ns;
        }
        steps[n++] = s;
    }
    closedir(d);
    *steps_p = steps;
    return n;
}

/* How many of its newest complete steps each rank offers when they agree. */
#define CKPT_OFFER      16
/* The offer of a rank that found a checkpoint file it must not read. */
#define CKPT_UNREADABLE (-2)

/* Opens step-<step>/rank-<rank>.bin and checks its header against step,
 * rank, world (< 0: any) and the file's length: *fd_p (the caller closes
 * it) positioned after the header, *h_p; path gets the file's name. */
msr_status_t ckpt_open_state(const char *dir, int64_t step, int rank, int world, char *path,
                             size_t path_len, int *fd_p, ckpt_header_t *h_p)
{
    char sd[4096];
    step_dir(dir, step, sd, sizeof sd);
    snprintf(path, path_len, "%s/rank-%d.bin", sd, rank);
    int fd;
    msr_status_t st = open_ckpt_file(path, &fd);
    if (st == MSR_ERR_CORRUPT)
        return st;
    if (st != MSR_OK) {
        if (errno == ELOOP) {
            msr_err_set("checkpoint: %s is a symbolic link: not read", path);
            return MSR_ERR_CORRUPT;
        }
        if (errno == ENOENT) {
            msr_err_set("checkpoint: %s does not exist", path);
            return MSR_ERR_NOT_FOUND;
        }
        return io_error("cannot open", path);
    }
    unsigned char hb[MSR_CKPT_HEADER_LEN];
    struct stat sb;
    if (msr_read_full(fd, hb, sizeof hb) != MSR_OK || header_unpack(hb, h_p) != 0 ||
        fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != MSR_CKPT_HEADER_LEN + h_p->len ||
        h_p->step != step || h_p->rank != (uint32_t)rank ||
        (world >= 0 && h_p->world != (uint32_t)world)) {
        msr_err_set("checkpoint: %s is not rank %d's state of step %" PRId64 "%s", path, rank, step,
                    world >= 0 ? " for this world size" : "");
        close(fd);
        return MSR_ERR_CORRUPT;
    }
    *fd_p = fd;
    return MSR_OK;
}

/* A load reads a file in chunks of CKPT_CHUNK bytes and checks each while
 * it is still in the cache (one pass over memory, not two), with the next
 * CKPT_AHEAD bytes already asked of the disk (posix_fadvise WILLNEED), so
 * the disk reads ahead while the CRC runs. */
#define CKPT_CHUNK ((size_t)1 << 20)
#define CKPT_AHEAD ((off_t)16 << 20)

/* Asks the kernel to start reading [at, at + len) of fd into the page
 * cache and return at once; a hint, its failure ignored. */
static void read_ahead(int fd, off_t at, off_t len)
{
    if (len > 0)
        (void)posix_fadvise(fd, at, len, POSIX_FADV_WILLNEED);
}

/* Reads len bytes of fd from file offset at into data, in chunks of
 * CKPT_CHUNK, and continues *crc_p over each chunk just read (crc_p NULL:
 * none). The disk is kept ahead by file offsets, not by calls, so that a
 * reader calling once a chunk asks as little as one calling once a file:
 * the chunk that reaches the start B of one of a file's windows of
 * CKPT_AHEAD / 2 bytes asks for [B, B + CKPT_AHEAD), up to end (the file's
 * end), and a read of more than one chunk for its first CKPT_AHEAD. With stream,
 * data holds one chunk and each chunk overwrites the last (a check alone,
 * in a bounded buffer). MSR_ERR_CORRUPT when the file ends early,
 * MSR_ERR_IO on a failed read (the error text names path). */
msr_status_t ckpt_read_chunks(int fd, const char *path, off_t at, void *data, size_t len, off_t end,
                              int stream, uint32_t *crc_p)
{
    const off_t half = CKPT_AHEAD / 2;
    size_t done = 0;
    (void)posix_fadvise(fd, at, (off_t)len, POSIX_FADV_SEQUENTIAL);
    if (len > CKPT_CHUNK)
        read_ahead(fd, at, MSR_MIN(end - at, CKPT_AHEAD));
    while (done < len) {
        size_t want = MSR_MIN(len - done, CKPT_CHUNK);
        off_t pos = at + (off_t)done, win = (pos + (off_t)want) / half * half;
        if (win > pos) /* this chunk reaches window win */
            read_ahead(fd, win, MSR_MIN(end - win, CKPT_AHEAD));
        unsigned char *dst = (unsigned char *)data + (stream ? 0 : done);
        if (!stream) /* a stream's one chunk is mapped after its first read */
            (void)msr_prefault(dst, want);
        ssize_t got = pread(fd, dst, want, at + (off_t)done);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return io_error("cannot read", path);
        if (got == 0)
            return msr_err(MSR_ERR_CORRUPT, "checkpoint: %s ends early", path);
        if (crc_p != NULL)
            *crc_p = msr_crc32(*crc_p, dst, (size_t)got);
        done += (size_t)got;
    }
    return MSR_OK;
}

/* A buffer of len bytes for a load; large ones are asked to be backed by
 * huge pages (a hint), so that filling them faults 512 times less. */
static void *load_buffer(size_t len)
{
    unsigned char *data = malloc(len ? len : 1);
    size_t huge = (size_t)2 << 20;
    if (data != NULL && len >= 2 * huge) {
        uintptr_t lo = ((uintptr_t)data + huge - 1) & ~(uintptr_t)(huge - 1),
                  hi = ((uintptr_t)data + len) & ~(uintptr_t)(huge - 1);
        if (hi > lo)
            (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
    return data;
}

/* Reads and checks step-<step>/rank-<rank>.bin; world < 0 accepts any. */
static msr_status_t load_file(const char *dir, int64_t step, int rank, int world, void **data_p,
                              size_t *len_p)
{
    char path[4200];
    int fd;
    ckpt_header_t h;
    msr_status_t st = ckpt_open_state(dir, step, rank, world, path, sizeof path, &fd, &h);
    if (st != MSR_OK)
        return st;
    uint32_t crc = 0;
    void *data = NULL;
    if (h.len > SIZE_MAX - 1 || (data = load_buffer((size_t)h.len)) == NULL) {
        st = msr_err(MSR_ERR_NO_MEMORY, "checkpoint: out of memory for %s (%" PRIu64 " bytes)",
                     path, h.len);
        goto out;
    }
    st = ckpt_read_chunks(fd, path, MSR_CKPT_HEADER_LEN, data, (size_t)h.len,
                          MSR_CKPT_HEADER_LEN + (off_t)h.len, 0, &crc);
    if (st == MSR_OK && crc != h.crc)
        st = msr_err(MSR_ERR_CORRUPT, "checkpoint: %s does not match its CRC", path);
    if (st != MSR_OK) {
        free(data);
        goto out;
    }
    *data_p = data;
    if (len_p)
        *len_p = h.len;
out:
    close(fd);
    return st;
}

/* What a program says about its state files cut short (msr_ckpt_cut_fn
 * and its argument); fn NULL: nothing. */
typedef struct cut_explainer {
    msr_ckpt_cut_fn fn;
    void *arg;
} cut_explainer_t;

/* After ckpt_open_state refused step's state file of this rank at path:
 * when the file is a regular one shorter than its header gives, appends
 * what x says about it to the error text. */
static void explain_cut(const cut_explainer_t *x, msr_ctx_t *ctx, int64_t step, const char *path)
{
    unsigned char hb[MSR_CKPT_HEADER_LEN];
    ckpt_header_t h;
    struct stat sb;
    char what[64], why[MSR_ERR_TEXT_MAX], was[MSR_ERR_TEXT_MAX];
    if (x->fn == NULL)
        return;
    int fd = -1;
    if (open_ckpt_file(path, &fd) != MSR_OK)
        return;
    snprintf(what, sizeof what, "step-%" PRId64 "/rank-%d.bin", step, msr_rank(ctx));
    if (fstat(fd, &sb) == 0 && msr_read_full(fd, hb, sizeof hb) == MSR_OK &&
        header_unpack(hb, &h) == 0 && h.len <= UINT64_MAX - MSR_CKPT_HEADER_LEN &&
        (uint64_t)sb.st_size < MSR_CKPT_HEADER_LEN + h.len &&
        x->fn(x->arg, fd, (uint64_t)sb.st_size, what, why, sizeof why) == 1) {
        snprintf(was, sizeof was, "%s", msr_last_error());
        msr_err_set("%s: %s", was, why);
    }
    close(fd);
}

/* Whether this rank's state of step reads back whole (header, length and
 * CRC), read through a buffer of one chunk (the state is not held); on
 * failure msr_last_error() says why, and what x says of a file cut short. */
static int verify_own(msr_ctx_t *ctx, const char *dir, int64_t step, const cut_explainer_t *x)
{
    char path[4200];
    int fd;
    ckpt_header_t h;
    uint32_t crc = 0;
    msr_status_t st =
        ckpt_open_state(dir, step, msr_rank(ctx), msr_world_size(ctx), path, sizeof path, &fd, &h);
    if (st == MSR_ERR_CORRUPT)
        explain_cut(x, ctx, step, path);
    if (st != MSR_OK)
        return 0;
    void *chunk = malloc(CKPT_CHUNK);
    if (chunk == NULL)
        st = msr_err(MSR_ERR_NO_MEMORY, "checkpoint: out of memory to check %s", path);
    else
        st = ckpt_read_chunks(fd, path, MSR_CKPT_HEADER_LEN, chunk, (size_t)h.len,
                              MSR_CKPT_HEADER_LEN + (off_t)h.len, 1, &crc);
    if (st == MSR_OK && crc != h.crc)
        st = msr_err(MSR_ERR_CORRUPT, "checkpoint: %s does not match its CRC", path);
    free(chunk);
    close(fd);
    return st == MSR_OK;
}

/* This rank's offer: its CKPT_OFFER newest complete steps under dir,
 * newest first (-1 past the last), after removing its leftovers there; or
 * CKPT_UNREADABLE first, with the reason in why, when a file of its is
 * there but not a regular file. */
static void own_offers(msr_ctx_t *ctx, const char *dir, int64_t mine[CKPT_OFFER], char *why,
                       size_t why_len)
{
    for (int i = 0; i < CKPT_OFFER; i++)
        mine[i] = -1;
    int64_t *steps;
    size_t n = msr_ckpt_list_steps(dir, &steps);
    for (size_t i = 0; i < n; i++) {
        char sd[4096];
        step_dir(dir, steps[i], sd, sizeof sd);
        msr_ckpt_remove_leftovers(ctx, sd);
        int have = msr_ckpt_have_step(ctx, dir, steps[i]);
        if (have < 0) {
            /* offer nothing but the mark: every rank fails below */
            snprintf(why, why_len, "%s", msr_last_error());
            mine[0] = CKPT_UNREADABLE;
            break;
        }
        if (!have)
            continue;
        /* insert into the descending list of the CKPT_OFFER newest */
        int64_t v = steps[i];
        for (int k = 0; k < CKPT_OFFER; k++) {
            if (v > mine[k]) {
                int64_t t = mine[k];
                mine[k] = v;
                v = t;
            }
        }
    }
    free(steps);
}

/* msr_ckpt_latest_explain, and with verify 0 msr_ckpt_latest_unchecked. */
static msr_status_t latest(msr_ctx_t *ctx, const char *dir, int verify, const cut_explainer_t *x,
                           int64_t *step_p)
{
    if (ctx == NULL || dir == NULL || step_p == NULL) {
        msr_err_set("checkpoint: bad arguments");
        return MSR_ERR_INVALID_ARG;
    }
    /* Each rank offers its newest complete steps; the candidates are the
     * steps every rank offers, newest first. Every rank computes them from
     * the same gathered lists, so all agree even when one crashed before
     * committing a step the others committed. */
    int64_t mine[CKPT_OFFER];
    char why[MSR_ERR_TEXT_MAX] = "";
    own_offers(ctx, dir, mine, why, sizeof why);
    int world = msr_world_size(ctx);
    int64_t *all = NULL;
    msr_status_t st = msr_ckpt_gather_all(ctx, mine, sizeof mine, (void **)&all);
    if (st != MSR_OK)
        return st;
    for (int r = 0; r < world; r++)
        if (all[(size_t)r * CKPT_OFFER] == CKPT_UNREADABLE) {
            msr_free(all);
            if (mine[0] == CKPT_UNREADABLE)
                return msr_err(MSR_ERR_CORRUPT, "%s: not resuming", why);
            return msr_err(MSR_ERR_CORRUPT,
                           "checkpoint: rank %d found a file under %s that is not a regular file "
                           "(its log names it): not resuming",
                           r, dir);
        }
    int64_t agreed = -1, refused = -1;
    for (int k = 0; k < CKPT_OFFER && agreed < 0 && st == MSR_OK; k++) {
        int64_t cand = all[k]; /* rank 0's k-th newest */
        if (cand < 0)
            break;
        int everywhere = 1;
        for (int r = 1; r < world && everywhere; r++) {
            int found = 0;
            for (int q = 0; q < CKPT_OFFER && !found; q++)
                found = all[(size_t)r * CKPT_OFFER + (size_t)q] == cand;
            everywhere = found;
        }
        if (!everywhere)
            continue;
        if (!verify) { /* complete everywhere: the caller's load checks it */
            agreed = cand;
            break;
        }
        /* Complete everywhere: every rank reads its state back before the
         * job trusts it; a corrupt one sends all ranks to the next. */
        int32_t ok = verify_own(ctx, dir, cand, x), *oks = NULL;
        if (!ok)
            MSR_WARN("checkpoint: step %" PRId64 " is not usable on rank %d: %s", cand,
                     msr_rank(ctx), msr_last_error());
        st = msr_ckpt_gather_all(ctx, &ok, sizeof ok, (void **)&oks);
        if (st != MSR_OK)
            break;
        int bad = -1;
        for (int r = 0; r < world && bad < 0; r++)
            if (!oks[r])
                bad = r;
        msr_free(oks);
        if (bad < 0) {
            agreed = cand;
        } else {
            if (msr_rank(ctx) == 0)
                MSR_WARN("checkpoint: refusing step %" PRId64 " under %s: rank %d's state of it "
                         "is corrupt (its log says why); looking for an older one",
                         cand, dir, bad);
            if (refused < 0)
                refused = cand;
        }
    }
    msr_free(all);
    if (st != MSR_OK)
        return st;
    if (refused >= 0 && msr_rank(ctx) == 0) {
        if (agreed >= 0)
            MSR_WARN("checkpoint: falling back to step %" PRId64 " under %s, the newest intact "
                     "one (step %" PRId64 " was refused)",
                     agreed, dir, refused);
        else
            MSR_WARN("checkpoint: no intact checkpoint under %s (step %" PRId64 " was refused)",
                     dir, refused);
    }
    *step_p = agreed;
    return MSR_OK;
}

msr_status_t msr_ckpt_latest(msr_ctx_t *ctx, const char *dir, int64_t *step_p)
{
    const cut_explainer_t none = {NULL, NULL};
    return latest(ctx, dir, 1, &none, step_p);
}

msr_status_t msr_ckpt_latest_explain(msr_ctx_t *ctx, const char *dir, msr_ckpt_cut_fn cut_fn,
                                     void *arg, int64_t *step_p)
{
    const cut_explainer_t x = {cut_fn, arg};
    return latest(ctx, dir, 1, &x, step_p);
}

msr_status_t msr_ckpt_latest_unchecked(msr_ctx_t *ctx, const char *dir, int64_t *step_p)
{
    const cut_explainer_t none = {NULL, NULL};
    return latest(ctx, dir, 0, &none, step_p);
}

msr_status_t msr_ckpt_load(msr_ctx_t *ctx, const char *dir, int64_t step, void **data_p,
                           size_t *len_p)
{
    if (ctx == NULL || dir == NULL || step < 0 || data_p == NULL) {
        msr_err_set("checkpoint: bad arguments");
        return MSR_ERR_INVALID_ARG;
    }
    int have = msr_ckpt_have_step(ctx, dir, step);
    if (have < 0)
        return MSR_ERR_CORRUPT;
    if (!have) {
        msr_err_set("checkpoint: step %" PRId64 " of rank %d is not complete in %s", step,
                    msr_rank(ctx), dir);
        return MSR_ERR_NOT_FOUND;
    }
    return load_file(dir, step, msr_rank(ctx), msr_world_size(ctx), data_p, len_p);
}

msr_status_t msr_ckpt_load_rank(msr_ctx_t *ctx, const char *dir, int64_t step, int rank,
                                void **data_p, size_t *len_p)
{
    if (ctx == NULL || dir == NULL || step < 0 || rank < 0 || data_p == NULL) {
        msr_err_set("checkpoint: bad arguments");
        return MSR_ERR_INVALID_ARG;
    }
    return load_file(dir, step, rank, -1, data_p, len_p);
}

/* The world size a step's MANIFEST records, -1 when the step has none
 * (not complete) or it cannot be read, -2 when it is not a regular file
 * (the error text says so). */
int msr_ckpt_manifest_world(const char *dir, int64_t step)
{
    char sd[4096], path[4200];
    step_dir(dir, step, sd, sizeof sd);
    snprintf(path, sizeof path, "%s/MANIFEST", sd);
    int fd = -1;
    msr_status_t st = open_ckpt_file(path, &fd);
    if (st != MSR_OK)
        return st == MSR_ERR_CORRUPT ? -2 : -1;
    FILE *f = fdopen(fd, "r");
    if (f == NULL) {
        close(fd);
        return -1;
    }
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *w = strstr(buf, "\"world_size\": ");
    int64_t world;
    char num[16];
    if (w == NULL)
        return -1;
    w += strlen("\"world_size\": ");
    size_t k = 0;
    while (k < sizeof num - 1 && w[k] >= '0' && w[k] <= '9') {
        num[k] = w[k];
        k++;
    }
    num[k] = '\0';
    if (msr_parse_i64(num, 1, 1 << 30, &world) != MSR_OK)
        return -1;
    return (int)world;
}

msr_status_t msr_ckpt_latest_any(msr_ctx_t *ctx, const char *dir, int64_t *step_p, int *world_p)
{
    return msr_ckpt_latest_any_before(ctx, dir, INT64_MAX, step_p, world_p);
}

msr_status_t msr_ckpt_latest_any_before(msr_ctx_t *ctx, const char *dir, int64_t before,
                                        int64_t *step_p, int *world_p)
{
    if (ctx == NULL || dir == NULL || step_p == NULL) {
        msr_err_set("checkpoint: bad arguments");
        return MSR_ERR_INVALID_ARG;
    }
    int64_t found[2] = {-1, 0}; /* step, world: rank 0's decides */
    char why[MSR_ERR_TEXT_MAX] = "";
    if (msr_rank(ctx) == 0) {
        int64_t *steps;
        size_t n = msr_ckpt_list_steps(dir, &steps);
        for (size_t i = 0; i < n; i++) {
            if (steps[i] <= found[0] || steps[i] >= before)
                continue;
            int w = msr_ckpt_manifest_world(dir, steps[i]);
            if (w == -2) {
                snprintf(why, sizeof why, "%s", msr_last_error());
                found[0] = CKPT_UNREADABLE;
                break;
            }
            if (w > 0) {
                found[0] = steps[i];
                found[1] = w;
            }
        }
        free(steps);
    }
    int64_t *all = NULL;
    msr_status_t st = msr_ckpt_gather_all(ctx, found, sizeof found, (void **)&all);
    if (st == MSR_OK && all[0] == CKPT_UNREADABLE)
        st = msr_rank(ctx) == 0 ? msr_err(MSR_ERR_CORRUPT, "%s: not resuming", why)
                                : msr_err(MSR_ERR_CORRUPT,
                                          "checkpoint: rank 0 found a MANIFEST under %s that is "
                                          "not a regular file (its log names it): not resuming",
                                          dir);
    else if (st == MSR_OK) {
        *step_p = all[0];
        if (world_p)
            *world_p = (int)all[1];
    }
    msr_free(all);
    return st;
}
