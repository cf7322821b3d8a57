/* The gradient offload's store (parallel/offload_grads.h): ranges set and
 * added across chunk bounds and read back bitwise, the next chunk read
 * ahead and the last written behind, at random places bitwise what
 * memory gives, a chunk never written
 * read as zeros, a chunk changed underneath and a short read named with
 * the file and the chunk, the file size limit reached, the first error
 * given again after it, the bounds of ranges and chunk sizes, the file's
 * mode, its removal and a directory that is not there. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/status.h"
#include "parallel/offload_grads.h"
#include "tests/runner.h"
#include "tests/tmp_dir.h"

/* Chunks of MSR_OFFLOAD_CHUNK_MIN bytes (1024 floats); N not a multiple
 * of them, so the last chunk is short. */
#define PER 1024
#define N   (4 * PER + 300)

static msr_offload_config_t config(void)
{
    return (msr_offload_config_t){
        MSR_OFFLOAD_DISK, msr_test_dir, MSR_OFFLOAD_CHUNK_MIN, MSR_OFFLOAD_IO_DEFAULT, 0, 3};
}

static float value(size_t i, int version)
{
    return (float)(i * 7919 % 10007) * 0.01f - 3.0f + (float)version * 0.5f;
}

/* The whole store against want[0..N). */
static void check_all(msr_grads_t *g, const float *want)
{
    static float got[N];
    MSR_CHECK_OK(msr_grads_get(g, 0, N, got));
    for (size_t i = 0; i < N; i++)
        MSR_CHECK_MSG(memcmp(&got[i], &want[i], sizeof(float)) == 0, "[%zu]: %g, want %g", i,
                      (double)got[i], (double)want[i]);
}

/* Ranges set from the end down, as buckets finish (bounds inside chunks),
 * then added, as a later micro-batch's: bitwise the sums in memory, read
 * whole and in pieces that cross the chunks; each range's sum of squares
 * as it is set and as it is added (msr_grads_put_sumsq) is msr_sumsq's
 * over the values it leaves. */
static void test_set_add(void)
{
    msr_test_dir_make("offload_grads");
    msr_offload_config_t cfg = config();
    msr_grads_t *g;
    MSR_CHECK_OK(msr_grads_create(&cfg, N, &g));
    MSR_CHECK_EQ(msr_grads_chunk_bytes(g), (size_t)MSR_OFFLOAD_CHUNK_MIN);
    static float want[N], src[N];
    check_all(g, want); /* never written: zeros */
    const size_t cuts[] = {N, 3 * PER + 700, 2 * PER, 2 * PER - 1, 500, 0};
    for (int version = 0; version < 3; version++) {
        for (size_t i = 0; i < N; i++) {
            src[i] = value(i, version);
            want[i] = version == 0 ? src[i] : want[i] + src[i];
        }
        for (size_t c = 0; c + 1 < sizeof cuts / sizeof cuts[0]; c++) {
            size_t lo = cuts[c + 1], n = cuts[c] - lo;
            if (version == 1) {
                MSR_CHECK_OK(msr_grads_put(g, lo, n, src + lo, 1));
                continue;
            }
            /* set or added, the range's sum of squares as it is put:
             * msr_sumsq's bits over the values it leaves */
            double lanes[MSR_SUMSQ_LANES] = {0};
            MSR_CHECK_OK(msr_grads_put_sumsq(g, lo, n, src + lo, version > 0, lanes));
            double got = msr_sumsq_fold(lanes), ref = msr_sumsq(want + lo, n);
            MSR_CHECK_MSG(memcmp(&got, &ref, sizeof got) == 0,
                          "version %d, [%zu, %zu): sum of squares %.17g, want %.17g", version, lo,
                          lo + n, got, ref);
        }
        MSR_CHECK_OK(msr_grads_flush(g));
        check_all(g, want);
    }
    float piece[PER + 10];
    for (size_t at = 0; at < N; at += PER + 10) {
        size_t n = at + PER + 10 <= N ? PER + 10 : N - at;
        MSR_CHECK_OK(msr_grads_get(g, at, n, piece));
        MSR_CHECK(memcmp(piece, want + at, n * sizeof(float)) == 0);
    }
    /* what it keeps: three chunks (in use, behind, ahead) and a CRC and a
     * flag per chunk and one more, not the shard */
    MSR_CHECK_EQ(msr_grads_resident(g), 3 * (size_t)MSR_OFFLOAD_CHUNK_MIN + 6 * 5);
    msr_grads_destroy(g);
}

/* Reads ahead the way a pass goes: a get over every chunk in order reads
 * the first when wanted and the others ahead, a put that adds from the
 * end down likewise; a put that sets whole chunks reads nothing. Then a
 * thousand calls at random places (sets, adds, gets, flushes; the
 * direction turning, a chunk read right after its write behind started,
 * read ahead and then set whole) give bitwise what the same calls give
 * in memory. */
static void test_ahead_and_behind(void)
{
    msr_test_dir_make("offload_grads");
    msr_offload_config_t cfg = config();
    msr_grads_t *g;
    MSR_CHECK_OK(msr_grads_create(&cfg, N, &g));
    static float want[N], src[N], got[N];
    for (size_t i = 0; i < N; i++)
        want[i] = src[i] = value(i, 0);
    MSR_CHECK_OK(msr_grads_put(g, 0, N, src, 0));
    MSR_CHECK_OK(msr_grads_flush(g));
    const msr_grads_stats_t *s = msr_grads_stats(g);
    MSR_CHECK_MSG(s->reads == 0 && s->writes == 5, "setting whole chunks: %llu read, %llu written",
                  (unsigned long long)s->reads, (unsigned long long)s->writes);
    for (size_t at = 0; at < N; at += PER / 2) /* two gets a chunk, as the update's */
        MSR_CHECK_OK(msr_grads_get(g, at, MSR_MIN((size_t)PER / 2, N - at), got + at));
    MSR_CHECK(memcmp(got, want, sizeof got) == 0);
    /* chunks 0 and 3 taken back from the buffers they were written from
     * (3 written last, 0's buffer not yet reused), 1, 2 and 4 read ahead:
     * none when wanted */
    MSR_CHECK_MSG(s->reads == 3 && s->ahead == 3 && s->misses == 0 && s->kept == 2,
                  "a get in order: %llu read, %llu ahead, %llu when wanted, %llu kept",
                  (unsigned long long)s->reads, (unsigned long long)s->ahead,
                  (unsigned long long)s->misses, (unsigned long long)s->kept);
    for (size_t c = 5; c-- > 0;) { /* added from the end down, a chunk at a time */
        size_t lo = c * PER, n = MSR_MIN((size_t)PER, N - lo);
        MSR_CHECK_OK(msr_grads_put(g, lo, n, src + lo, 1));
        for (size_t i = lo; i < lo + n; i++)
            want[i] += src[i];
    }
    /* chunk 4 still in use; chunk 3 wanted at once, the pass going down
     * from it: 2, 1 and 0 ahead */
    MSR_CHECK_MSG(s->reads == 7 && s->ahead == 6 && s->misses == 1 && s->kept == 2,
                  "an add from the end down: %llu read, %llu ahead, %llu when wanted, %llu kept",
                  (unsigned long long)s->reads, (unsigned long long)s->ahead,
                  (unsigned long long)s->misses, (unsigned long long)s->kept);
    uint64_t x = 88172645463325252ull;
    for (int op = 0; op < 1000; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t lo = (size_t)(x % N), n = 1 + (size_t)((x >> 20) % (2 * PER));
        n = MSR_MIN(n, N - lo);
        int kind = (int)((x >> 40) % 5);
        if (kind == 4 && (x >> 50) % 2 == 0) { /* a whole chunk set */
            lo = lo / PER * PER;
            n = MSR_MIN((size_t)PER, N - lo);
            kind = 0;
        }
        if (kind == 0 || kind == 1) {
            for (size_t i = lo; i < lo + n; i++) {
                src[i] = value(i, op + 1);
                want[i] = kind == 0 ? src[i] : want[i] + src[i];
            }
            MSR_CHECK_OK(msr_grads_put(g, lo, n, src + lo, kind));
        } else if (kind == 4) {
            MSR_CHECK_OK(msr_grads_flush(g));
        } else {
            MSR_CHECK_OK(msr_grads_get(g, lo, n, got));
            MSR_CHECK_MSG(memcmp(got, want + lo, n * sizeof(float)) == 0,
                          "call %d: [%zu, %zu) read back differs", op, lo, lo + n);
        }
    }
    MSR_CHECK_OK(msr_grads_flush(g));
    check_all(g, want);
    msr_grads_destroy(g);
}

/* One byte of chunk 2 changed underneath: the read that reaches it stops
 * with the file and the chunk named, and every call after gives that error
 * again. */
static void test_corrupt(void)
{
    msr_test_dir_make("offload_grads");
    msr_offload_config_t cfg = config();
    msr_grads_t *g;
    MSR_CHECK_OK(msr_grads_create(&cfg, N, &g));
    static float src[N], got[N];
    for (size_t i = 0; i < N; i++)
        src[i] = value(i, 1);
    MSR_CHECK_OK(msr_grads_put(g, 0, N, src, 0));
    MSR_CHECK_OK(msr_grads_flush(g));
    int fd = open(msr_grads_path(g), O_WRONLY);
    MSR_CHECK(fd >= 0);
    unsigned char x = 0x5a;
    MSR_CHECK(pwrite(fd, &x, 1, 2 * MSR_OFFLOAD_CHUNK_MIN + 17) == 1);
    close(fd);
    MSR_CHECK_OK(msr_grads_get(g, 0, 2 * PER, got));
    MSR_CHECK_STATUS(msr_grads_get(g, 2 * PER, 1, got), MSR_ERR_CORRUPT);
    char first[512];
    snprintf(first, sizeof first, "%s", msr_err_msg());
    MSR_CHECK_MSG(strstr(first, "gradient chunk 2 of") != NULL &&
                      strstr(first, msr_grads_path(g)) != NULL &&
                      strstr(first, "changed underneath") != NULL,
                  "%s", first);
    MSR_CHECK_STATUS(msr_grads_get(g, 0, 1, got), MSR_ERR_CORRUPT);
    MSR_CHECK_STATUS(msr_grads_put(g, 0, 1, src, 1), MSR_ERR_CORRUPT);
    MSR_CHECK_STATUS(msr_grads_flush(g), MSR_ERR_CORRUPT);
    MSR_CHECK_MSG(strcmp(msr_err_msg(), first) == 0, "%s", msr_err_msg());
    msr_grads_destroy(g);
}

/* The file cut short under a written chunk: a short read, named (chunk
 * 2, whose buffer was filled again since; chunk 3, written last, would be
 * taken back from its buffer, not read). */
static void test_short_read(void)
{
    msr_test_dir_make("offload_grads");
    msr_offload_config_t cfg = config();
    msr_grads_t *g;
    MSR_CHECK_OK(msr_grads_create(&cfg, N, &g));
    static float src[N], got[N];
    MSR_CHECK_OK(msr_grads_put(g, 0, N, src, 0));
    MSR_CHECK_OK(msr_grads_flush(g));
    MSR_CHECK(truncate(msr_grads_path(g), 2 * MSR_OFFLOAD_CHUNK_MIN + 512) == 0);
    MSR_CHECK_STATUS(msr_grads_get(g, 2 * PER, 1, got), MSR_ERR_IO);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "short read of gradient chunk 2 of") != NULL, "%s",
                  msr_err_msg());
    msr_grads_destroy(g);
}

/* The file size limit (RLIMIT_FSIZE, no root needed) reached by the write
 * of chunk 3 (behind, from when chunk 4 is reached): a clear error naming
 * it, also for a read of chunk 3 that waits for that write; at exactly
 * the limit every chunk fits. */
static void test_file_size_limit(void)
{
    msr_test_dir_make("offload_grads");
    signal(SIGXFSZ, SIG_IGN); /* the write fails with EFBIG instead */
    struct rlimit rl = {3 * MSR_OFFLOAD_CHUNK_MIN, 3 * MSR_OFFLOAD_CHUNK_MIN};
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    msr_offload_config_t cfg = config();
    msr_grads_t *g;
    static float src[N];
    MSR_CHECK_OK(msr_grads_create(&cfg, 3 * PER, &g));
    MSR_CHECK_OK(msr_grads_put(g, 0, 3 * PER, src, 0));
    MSR_CHECK_OK(msr_grads_flush(g));
    msr_grads_destroy(g);
    MSR_CHECK_OK(msr_grads_create(&cfg, N, &g));
    /* chunk 3 is written behind when chunk 4 is reached: the flush that
     * waits for it meets the failure */
    msr_status_t st = msr_grads_put(g, 0, N, src, 0);
    MSR_CHECK_STATUS(st == MSR_OK ? msr_grads_flush(g) : st, MSR_ERR_IO);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "writing gradient chunk 3 of") != NULL &&
                      strstr(msr_err_msg(), strerror(EFBIG)) != NULL,
                  "%s", msr_err_msg());
    msr_grads_destroy(g);
    /* chunk 3 read back while its write behind is the one in flight: the
     * read waits for the write, whose failure it reports (a read started
     * first would find the file short of it) */
    MSR_CHECK_OK(msr_grads_create(&cfg, N, &g));
    float one;
    MSR_CHECK_OK(msr_grads_put(g, 3 * PER, PER, src, 0));
    MSR_CHECK_OK(msr_grads_get(g, 4 * PER, 1, &one)); /* chunk 3 left: written behind */
    MSR_CHECK_STATUS(msr_grads_get(g, 3 * PER, 1, &one), MSR_ERR_IO);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "writing gradient chunk 3 of") != NULL &&
                      strstr(msr_err_msg(), strerror(EFBIG)) != NULL,
                  "%s", msr_err_msg());
    msr_grads_destroy(g);
    /* nor read ahead: chunk 3 written behind, then chunks 5 and 4 got
     * (never written: no reads), the pass going down from 4 toward 3 */
    MSR_CHECK_OK(msr_grads_create(&cfg, 7 * PER, &g));
    MSR_CHECK_OK(msr_grads_put(g, 3 * PER, PER, src, 0));
    MSR_CHECK_OK(msr_grads_get(g, 5 * PER, 1, &one));
    MSR_CHECK_OK(msr_grads_get(g, 4 * PER, 1, &one));
    MSR_CHECK_STATUS(msr_grads_get(g, 3 * PER, 1, &one), MSR_ERR_IO);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "writing gradient chunk 3 of") != NULL, "%s",
                  msr_err_msg());
    msr_grads_destroy(g);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", msr_test_dir);
    MSR_CHECK(system(cmd) == 0);
}

/* Ranges at the end and one past, an empty store, chunk sizes at their
 * bounds: errors, never a crash; the store goes on after a refused range. */
static void test_bounds(void)
{
    msr_test_dir_make("offload_grads");
    msr_offload_config_t cfg = config();
    msr_grads_t *g;
    float src[2] = {1.0f, 2.0f}, got[2];
    MSR_CHECK_OK(msr_grads_create(&cfg, 0, &g)); /* an empty shard */
    MSR_CHECK_OK(msr_grads_put(g, 0, 0, src, 0));
    MSR_CHECK_STATUS(msr_grads_put(g, 0, 1, src, 0), MSR_ERR_INVALID_ARG);
    MSR_CHECK_OK(msr_grads_flush(g));
    msr_grads_destroy(g);
    MSR_CHECK_OK(msr_grads_create(&cfg, N, &g));
    MSR_CHECK_OK(msr_grads_put(g, N - 2, 2, src, 0));
    MSR_CHECK_STATUS(msr_grads_put(g, N - 1, 2, src, 0), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_grads_get(g, N + 1, 0, got), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_grads_get(g, SIZE_MAX, 2, got), MSR_ERR_INVALID_ARG);
    MSR_CHECK_OK(msr_grads_get(g, N - 2, 2, got));
    MSR_CHECK(got[0] == 1.0f && got[1] == 2.0f);
    msr_grads_destroy(g);
    /* chunk sizes: the bounds of MSR_OFFLOAD_CHUNK_MIN and the shard's
     * bytes rounded up; one past the size allowed refused */
    MSR_CHECK_EQ(msr_grads_chunk_of(0, 1), (size_t)MSR_OFFLOAD_CHUNK_MIN);
    MSR_CHECK_EQ(msr_grads_chunk_of(0, PER + 1), 2 * (size_t)MSR_OFFLOAD_ALIGN);
    MSR_CHECK_EQ(msr_grads_chunk_of(0, (size_t)1 << 30), (size_t)MSR_OFFLOAD_CHUNK_DEFAULT);
    cfg.chunk_bytes = MSR_OFFLOAD_CHUNK_MIN + 1;
    MSR_CHECK_STATUS(msr_grads_create(&cfg, N, &g), MSR_ERR_INVALID_ARG);
}

/* 0600 whatever the umask; removed by destroy, kept on request; a
 * directory that is not there and a mode but disk: clear errors. */
static void test_mode_and_removal(void)
{
    msr_test_dir_make("offload_grads");
    umask(0);
    msr_offload_config_t cfg = config();
    msr_grads_t *g;
    MSR_CHECK_OK(msr_grads_create(&cfg, N, &g));
    char path[512];
    snprintf(path, sizeof path, "%s", msr_grads_path(g));
    MSR_CHECK(strstr(path, "/msrun-grads-rank3-") != NULL);
    struct stat sb;
    MSR_CHECK(stat(path, &sb) == 0);
    MSR_CHECK_EQ(sb.st_mode & 0777, 0600);
    msr_grads_destroy(g);
    MSR_CHECK(access(path, F_OK) != 0 && errno == ENOENT);
    cfg.keep = 1;
    MSR_CHECK_OK(msr_grads_create(&cfg, N, &g));
    snprintf(path, sizeof path, "%s", msr_grads_path(g));
    msr_grads_destroy(g);
    MSR_CHECK(access(path, F_OK) == 0);
    char missing[300];
    snprintf(missing, sizeof missing, "%s/not-there", msr_test_dir);
    cfg.dir = missing;
    MSR_CHECK_STATUS(msr_grads_create(&cfg, N, &g), MSR_ERR_IO);
    MSR_CHECK_MSG(strstr(msr_err_msg(), missing) != NULL, "%s", msr_err_msg());
    cfg.mode = MSR_OFFLOAD_HOST;
    MSR_CHECK_STATUS(msr_grads_create(&cfg, N, &g), MSR_ERR_INVALID_ARG);
}

/* A step as data parallel's hooks give it (dp_offload.c): units that
 * tile the shard, in buckets that finish from the top down, each
 * bucket's units going up; a first micro-batch that sets after
 * msr_grads_fresh, later ones that add, each put told where the next one
 * starts (the step's last: the update's gets from element 0), then those
 * gets. Bitwise what memory gives, over steps of random tilings, with
 * hints true and, in one of four steps, every hint a random place: a hint
 * moves reads only. A first micro-batch reads no chunk but those a
 * bucket's range shares with the bucket before it, and with the true
 * hints every one of those and the add passes' first chunks are read
 * ahead, none when wanted past the step's first. */
static void test_steps_told(void)
{
    msr_test_dir_make("offload_grads");
    msr_offload_config_t cfg = config();
    msr_grads_t *g;
    MSR_CHECK_OK(msr_grads_create(&cfg, N, &g));
    const msr_grads_stats_t *s = msr_grads_stats(g);
    static float want[N], src[N], got[N];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    enum { UNITS_MAX = 40 };
    for (int step = 0; step < 400; step++) {
        size_t cut[UNITS_MAX + 1];
        int bucket_of[UNITS_MAX], units = 0;
        cut[0] = 0;
        while (cut[units] < N && units < UNITS_MAX - 1) { /* units of 1 to 2 chunks */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t len = 1 + (size_t)(x % (step % 2 ? 2 * PER : PER / 3));
            cut[units + 1] = MSR_MIN((size_t)N, cut[units] + len);
            units++;
        }
        cut[units] = N;
        int buckets = 0;
        for (int u = units - 1; u >= 0; u--) { /* bucket 0 the top units */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (u == units - 1 || x % 3 == 0)
                buckets++;
            bucket_of[u] = buckets - 1;
        }
        int lie = step % 4 == 3, micros = 1 + step % 3;
        /* the order the puts come in: bucket by bucket, each one's units up */
        int order[UNITS_MAX], n = 0;
        for (int b = 0; b < buckets; b++)
            for (int u = 0; u < units; u++)
                if (bucket_of[u] == b)
                    order[n++] = u;
        /* the chunks where a bucket's range starts inside a chunk: a
         * first micro-batch reads those at most */
        size_t shared = 0;
        for (int u = 1; u < units; u++)
            shared += bucket_of[u] != bucket_of[u - 1] && cut[u] % PER != 0;
        uint64_t misses = s->misses, reads = s->reads;
        for (int m = 0; m < micros; m++) {
            if (m == 1 && step > 0)
                MSR_CHECK_MSG(s->reads - reads <= shared,
                              "step %d: a first micro-batch read %llu chunks, %zu shared", step,
                              (unsigned long long)(s->reads - reads), shared);
            if (m == 0)
                msr_grads_fresh(g);
            for (int i = 0; i < n; i++) {
                int u = order[i];
                size_t lo = cut[u], len = cut[u + 1] - lo;
                for (size_t e = lo; e < lo + len; e++) {
                    src[e] = value(e, step * 7 + m);
                    want[e] = m == 0 ? src[e] : want[e] + src[e];
                }
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                if (lie) {
                    msr_grads_next(g, (size_t)(x % (N + 1)), (size_t)((x >> 20) % (3 * PER)),
                                   (int)(x >> 40) & 1);
                } else if (i + 1 < n) {
                    int v = order[i + 1];
                    msr_grads_next(g, cut[v], cut[v + 1] - cut[v], m > 0);
                } else if (m + 1 < micros) {
                    msr_grads_next(g, cut[order[0]], cut[order[0] + 1] - cut[order[0]], 1);
                } else {
                    msr_grads_next(g, 0, PER / 2, 1);
                }
                MSR_CHECK_OK(msr_grads_put(g, lo, len, src + lo, m > 0));
            }
        }
        MSR_CHECK_OK(msr_grads_flush(g));
        for (size_t at = 0; at < N; at += PER / 2) { /* the update's gets, each told the next */
            if (!lie)
                msr_grads_next(g, at + PER / 2, PER / 2, 1);
            MSR_CHECK_OK(msr_grads_get(g, at, MSR_MIN((size_t)PER / 2, N - at), got + at));
        }
        MSR_CHECK_MSG(memcmp(got, want, sizeof got) == 0, "step %d (%d units, %d buckets%s)", step,
                      units, buckets, lie ? ", hints lying" : "");
        /* told true, a step after the first reads every chunk ahead */
        if (step > 0 && !lie && step % 4 != 0)
            MSR_CHECK_MSG(s->misses == misses, "step %d: %llu chunks read when wanted", step,
                          (unsigned long long)(s->misses - misses));
    }
    check_all(g, want);
    msr_grads_destroy(g);
}

static const msr_test_t tests[] = {
    {"set_add", test_set_add, 30},
    {"corrupt", test_corrupt, 30},
    {"short_read", test_short_read, 30},
    {"file_size_limit", test_file_size_limit, 30},
    {"bounds", test_bounds, 30},
    {"mode_and_removal", test_mode_and_removal, 30},
    {"ahead_and_behind", test_ahead_and_behind, 30},
    {"steps_told", test_steps_told, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
