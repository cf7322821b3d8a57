/* A rank that fails while it saves a step, at each point in turn, under
 * the real msrun (ckpt_save_fail.sh starts it on 2 and 3 workers), linked
 * to the static modules so that the allocation hook and the calls below
 * reach them:
 *
 *   ckpt_save_fail_worker DIR MODE FAIL
 *
 * MODE save: msr_ckpt_save; stream: a writer (open, 3 parts, commit with
 * a head of 16 bytes). Every rank saves step 1 first; then, round after
 * round, rank FAIL fails at one point of the save of the next step:
 *
 *   mkdir   making the step's folder (ENOSPC)
 *   write   writing its state (ENOSPC; stream: the second part)
 *   header  writing its file's header (EIO)
 *   fsync   syncing its file (EIO)
 *   rename  renaming its file into place (EIO)
 *   manifest (FAIL 0 only) syncing the step's MANIFEST, after the
 *           ranks agreed on their states (EIO)
 *   commit  syncing its commit, after that agreement too (EIO)
 *   own     (stream) its own code, between two parts: msr_ckpt_writer_fail
 *   nomem   allocation I from the save's start (msr_alloc_fail_at), I = 0,
 *           1, ... until a round where none failed
 *   storemem its store call of the states' agreement out of memory at
 *           its first allocation, before its part reached the store: the
 *           call gives a part of no bytes in its place, and the others end
 *           at once naming the rank, not at the store's deadline
 *   agree   its store call of the commit's agreement, after it completed
 *           (its answer lost: MSR_ERR_IO): the others commit the step
 *           and prune the one before, so the failed rank must keep its
 *           files of the step, which every rank then resumes from
 *
 * The calls fail here: this program's write, pwrite, fsync, rename and
 * mkdir stand in for libc's (the static modules call them) and fail
 * once, on rank FAIL's own state file, MANIFEST, commit or step folder,
 * while armed. Every save keeps 1 step: a step that is not committed
 * must never cost the one before it.
 *
 * Each round every rank prints "rank K: round R POINT: ok" or "rank K: round
 * R POINT: failed: STATUS: TEXT", then "rank K: round R POINT: latest S" (the step every
 * rank agrees to resume from, its bytes loaded and checked) and "round R
 * POINT: BAD" when a failed step left its file, its MANIFEST or a
 * temporary file; the ranks then gather their outcomes, and a round whose
 * ranks do not agree prints "round R POINT: the ranks disagree" (exit 3).
 * Exit 0 after the last round. A rank left waiting ends at the store's
 * deadline (MSR_TIMEOUT): its message says so. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "msrun/checkpoint.h"
#include "msrun/store.h"

#define STATE_LEN  3000
#define HEAD_LEN   16
#define MAX_RANKS  8
#define MAX_ROUNDS 1000

/* The call that fails now on this rank (NULL: none), with what, after
 * how many more of its calls that match. */
static const char *armed;
static int armed_errno, armed_skip;

/* Whether fd's file's name holds what. */
static int fd_named(int fd, const char *what)
{
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0)
        return 0;
    path[n] = '\0';
    return strstr(path, what) != NULL;
}

/* Whether fd is this rank's state file being written. */
static int state_fd(int fd)
{
    return fd_named(fd, ".bin.tmp.");
}

/* Whether call `what` fails now (once), on a call that matches. */
static int fails(const char *what, int match)
{
    if (armed == NULL || strcmp(armed, what) != 0 || !match || armed_skip-- > 0)
        return 0;
    armed = NULL;
    errno = armed_errno;
    return 1;
}

#define NEXT(type, name) ((type)(void (*)(void))dlsym(RTLD_NEXT, name))

ssize_t write(int fd, const void *buf, size_t n)
{
    if (armed != NULL && fails("write", state_fd(fd)))
        return -1;
    return NEXT(ssize_t(*)(int, const void *, size_t), "write")(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t at)
{
    if (armed != NULL && fails("header", state_fd(fd)))
        return -1;
    return NEXT(ssize_t(*)(int, const void *, size_t, off_t), "pwrite")(fd, buf, n, at);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t at)
{
    return pwrite(fd, buf, n, at);
}

int fsync(int fd)
{
    if (armed != NULL &&
        (fails("fsync", state_fd(fd)) || fails("manifest", fd_named(fd, "/MANIFEST.tmp.")) ||
         fails("commit", fd_named(fd, ".commit.tmp."))))
        return -1;
    return NEXT(int (*)(int), "fsync")(fd);
}

int rename(const char *from, const char *to)
{
    if (fails("rename", strstr(from, ".bin.tmp.") != NULL))
        return -1;
    return NEXT(int (*)(const char *, const char *), "rename")(from, to);
}

int mkdir(const char *path, mode_t mode)
{
    if (fails("mkdir", strrchr(path, '/') != NULL && strncmp(strrchr(path, '/'), "/step-", 6) == 0))
        return -1;
    return NEXT(int (*)(const char *, mode_t), "mkdir")(path, mode);
}

/* The allocation hook's rounds count the checkpoint's own allocations,
 * not the store's in its calls: a rank whose store call itself fails
 * never joins the call, and the others wait for it until the store's
 * deadline, as for a rank that died (docs/checkpoint.md). The link wraps
 * msr_allgather (--wrap): the hook is off during it, then on again for
 * what is left of its count. hook_at: allocations to go before the one
 * that fails (-1: off); hook_fired: it failed one. */
static long hook_at = -1;
static int hook_fired;

static void hook_arm(long i)
{
    hook_at = i;
    hook_fired = 0;
    msr_alloc_fail_at(i);
}

/* Turns the hook off; whether it failed an allocation since hook_arm. */
static int hook_off(void)
{
    hook_fired |= msr_alloc_failed();
    msr_alloc_fail_at(-1);
    hook_at = -1;
    return hook_fired;
}

msr_status_t __real_msr_allgather(msr_ctx_t *ctx, const void *in, size_t len, void *out);

/* "agree": the save's store gathers to go before the one whose answer is
 * lost (the first is the states' agreement, the second the commit's);
 * -1: none. */
static int agree_at = -1;
/* "storemem": the gather (0: the states' agreement) whose store call fails
 * its first allocation; -1: none */
static int storemem_at = -1;

msr_status_t __wrap_msr_allgather(msr_ctx_t *ctx, const void *in, size_t len, void *out)
{
    if (storemem_at >= 0 && storemem_at-- == 0) {
        msr_alloc_fail_at(0);
        msr_status_t st = __real_msr_allgather(ctx, in, len, out);
        (void)msr_alloc_failed();
        msr_alloc_fail_at(-1);
        return st;
    }
    if (agree_at >= 0 && agree_at-- == 0) {
        msr_status_t st = __real_msr_allgather(ctx, in, len, out);
        if (st == MSR_OK)
            st = msr_err(MSR_ERR_IO, "worker: the answer of the store's gather was lost");
        return st;
    }
    if (hook_at < 0)
        return __real_msr_allgather(ctx, in, len, out);
    hook_fired |= msr_alloc_failed();
    long left = hook_at - msr_alloc_fail_at(-1);
    msr_status_t st = __real_msr_allgather(ctx, in, len, out);
    hook_at = hook_fired || left < 0 ? -1 : left;
    msr_alloc_fail_at(hook_at);
    return st;
}

/* Rank r's state of step: bytes that name both. */
static void pattern(unsigned char *p, size_t len, int r, int64_t step)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(i * 7 + (size_t)r * 31 + (size_t)step * 13);
}

/* This rank's save of step: whole, or through a writer in 3 parts. */
static msr_status_t save(msr_ctx_t *ctx, const char *dir, int stream, int own, int64_t step)
{
    unsigned char state[STATE_LEN];
    int rank = msr_rank(ctx);
    pattern(state, sizeof state, rank, step);
    if (!stream)
        return msr_ckpt_save(ctx, dir, step, state, sizeof state, 1);
    msr_ckpt_writer_t *w = NULL;
    msr_status_t st = msr_ckpt_writer_open(ctx, dir, step, HEAD_LEN, &w);
    if (st != MSR_OK)
        return msr_ckpt_save_fail(ctx, dir, step, st);
    size_t part = (STATE_LEN - HEAD_LEN) / 3;
    for (int k = 0; k < 3 && st == MSR_OK; k++) {
        if (k == 1 && own)
            st = msr_err(MSR_ERR_NO_MEMORY, "worker: out of memory between two parts");
        else
            st = msr_ckpt_writer_write(w, state + HEAD_LEN + part * (size_t)k,
                                       k < 2 ? part : STATE_LEN - HEAD_LEN - 2 * part, NULL);
    }
    if (st != MSR_OK)
        return msr_ckpt_writer_fail(w, st);
    return msr_ckpt_writer_commit(w, state, 1);
}

/* 0 when this rank left nothing of failed step under dir: no state, no
 * commit, no MANIFEST, no temporary file of its own. */
static int leftovers(msr_ctx_t *ctx, const char *dir, int64_t step)
{
    char sd[4200], mine[64];
    snprintf(sd, sizeof sd, "%s/step-%lld", dir, (long long)step);
    snprintf(mine, sizeof mine, "rank-%d.", msr_rank(ctx));
    DIR *d = opendir(sd);
    struct dirent *e;
    int left = 0;
    while (d != NULL && (e = readdir(d)) != NULL)
        left += strncmp(e->d_name, mine, strlen(mine)) == 0 || strcmp(e->d_name, "MANIFEST") == 0;
    if (d != NULL)
        closedir(d);
    return left;
}

/* The step every rank agrees on now, this rank's state of it loaded and
 * compared; -2 when it does not load or match. */
static int64_t latest_checked(msr_ctx_t *ctx, const char *dir)
{
    int64_t step = -1;
    void *data = NULL;
    size_t len = 0;
    unsigned char want[STATE_LEN];
    if (msr_ckpt_latest(ctx, dir, &step) != MSR_OK || step < 0 ||
        msr_ckpt_load(ctx, dir, step, &data, &len) != MSR_OK)
        return -2;
    pattern(want, sizeof want, msr_rank(ctx), step);
    int same = len == STATE_LEN && memcmp(data, want, len) == 0;
    free(data);
    return same ? step : -2;
}

/* One rank's outcome of a round, as gathered. */
typedef struct outcome {
    int64_t latest;
    int32_t status, failed;
} outcome_t;

/* One round: rank fail fails at `point` (nomem: allocation i) while every
 * rank saves step; the outcome printed; 1 when rank fail's hook failed an
 * allocation (another nomem round is due), 0 when not, -1 when the ranks
 * disagree. */
static int round_run(msr_ctx_t *ctx, const char **argv, const char *point, long i, int64_t *step)
{
    int rank = msr_rank(ctx), fail = atoi(argv[3]), stream = strcmp(argv[2], "stream") == 0;
    int nomem = strcmp(point, "nomem") == 0;
    int agree = strcmp(point, "agree") == 0;
    if (rank == fail && nomem)
        hook_arm(i);
    else if (rank == fail && agree)
        agree_at = 1;
    else if (rank == fail && strcmp(point, "storemem") == 0)
        storemem_at = 0;
    else if (rank == fail) {
        armed = point;
        armed_errno = strcmp(point, "mkdir") == 0 || strcmp(point, "write") == 0 ? ENOSPC : EIO;
        armed_skip = stream && strcmp(point, "write") == 0; /* the second part */
    }
    msr_status_t st = save(ctx, argv[1], stream, rank == fail && strcmp(point, "own") == 0, *step);
    outcome_t me = {0, st, hook_off()}, all[MAX_RANKS];
    armed = NULL;
    agree_at = storemem_at = -1;
    if (st == MSR_OK)
        printf("rank %d: round %ld %s: ok\n", rank, i, point);
    else
        printf("rank %d: round %ld %s: failed: %s: %s\n", rank, i, point, msr_status_name(st),
               msr_err_msg_or(st));
    me.latest = latest_checked(ctx, argv[1]);
    printf("rank %d: round %ld %s: latest %lld\n", rank, i, point, (long long)me.latest);
    if (st != MSR_OK && !agree && leftovers(ctx, argv[1], *step))
        printf("rank %d: round %ld %s: BAD: step %lld left files\n", rank, i, point,
               (long long)*step);
    if (agree && me.latest != *step)
        printf("rank %d: round %ld %s: BAD: step %lld is not the latest (%lld)\n", rank, i, point,
               (long long)*step, (long long)me.latest);
    fflush(stdout);
    if (msr_allgather(ctx, &me, sizeof me, all) != MSR_OK)
        return -1;
    int any = 0;
    int same = 1;
    for (int q = 0; q < msr_world_size(ctx); q++) {
        any |= all[q].failed;
        /* agree: the failed rank alone reports the failure */
        same &=
            (agree || (all[q].status == MSR_OK) == (st == MSR_OK)) && all[q].latest == me.latest;
    }
    if (!same) {
        printf("rank %d: round %ld %s: the ranks disagree\n", rank, i, point);
        return -1;
    }
    *step += st == MSR_OK || me.latest == *step; /* a failed step is saved again next round */
    return nomem && any;
}

int main(int argc, char **argv)
{
    static const char *points[] = {"mkdir",  "write", "header",   "fsync", "rename", "manifest",
                                   "commit", "own",   "storemem", "nomem", "agree"};
    msr_ctx_t *ctx = NULL;
    if (argc != 4 || (strcmp(argv[2], "save") != 0 && strcmp(argv[2], "stream") != 0)) {
        fprintf(stderr, "usage: ckpt_save_fail_worker DIR save|stream FAIL\n");
        return 2;
    }
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK || msr_world_size(ctx) > MAX_RANKS) {
        fprintf(stderr, "ckpt_save_fail_worker: msr_init: %s (at most %d ranks)\n",
                msr_status_str(st), MAX_RANKS);
        return 2;
    }
    int64_t step = 1;
    int rc = 0;
    if ((st = save(ctx, argv[1], 0, 0, step++)) != MSR_OK) {
        printf("rank %d: step 1: %s: %s\n", msr_rank(ctx), msr_status_name(st), msr_err_msg_or(st));
        rc = 1;
    }
    for (size_t p = 0; p < sizeof points / sizeof *points && rc == 0; p++) {
        if ((strcmp(points[p], "own") == 0 && strcmp(argv[2], "stream") != 0) ||
            (strcmp(points[p], "manifest") == 0 && atoi(argv[3]) != 0))
            continue;
        int more = 1;
        for (long i = 0; more == 1 && i < MAX_ROUNDS; i++)
            more = round_run(ctx, (const char **)argv, points[p], i, &step);
        rc = more < 0 ? 3 : 0;
    }
    fflush(stdout);
    msr_finalize(ctx);
    return rc;
}
