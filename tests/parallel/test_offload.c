/* The optimizer offload's store (parallel/offload.h): chunks streamed in
 * order and back bitwise with both engines, the chunk size at its bounds
 * and one past, a checkpoint's ranges got and put, a chunk changed
 * underneath (in a step and in a range), a short read, the file size
 * limit and a full disk as clear errors, the file's mode and its removal. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "parallel/offload.h"
#include "tests/runner.h"

static char dir[256];
static int mounted;

static void cleanup(void)
{
    if (mounted)
        umount2(dir, MNT_DETACH);
    mounted = 0;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (dir[0] != '\0' && system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

/* A fresh directory, removed when the test's process ends (a failed check
 * included). */
static void make_dir(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/offload_test.XXXXXX", t != NULL && t[0] != '\0' ? t : "/tmp");
    MSR_CHECK(mkdtemp(dir) != NULL);
    msr_test_at_end(cleanup);
}

static msr_offload_config_t config(size_t chunk, msr_offload_io_t io)
{
    return (msr_offload_config_t){MSR_OFFLOAD_DISK, dir, chunk, io, 0, 3};
}

/* The step's fn: checks that the chunks come in order and whole, and
 * changes every moment as a function of its element and the pass. */
typedef struct visit {
    size_t next; /* the element the next chunk must start at */
    int pass;
} visit_t;

static void change(size_t i, int pass, float *m, float *v)
{
    *m = *m * 0.5f + (float)(i % 977) + (float)pass;
    *v = *v + 0.25f * (float)pass;
}

static msr_status_t bump(void *arg, size_t off, size_t n, float *m, float *v)
{
    visit_t *vis = arg;
    if (off != vis->next)
        return msr_err(MSR_ERR_INTERNAL, "chunk at %zu, want %zu", off, vis->next);
    for (size_t i = 0; i < n; i++)
        change(off + i, vis->pass, &m[i], &v[i]);
    vis->next = off + n;
    return MSR_OK;
}

/* count moments through passes steps, against the same changes in memory. */
static void stream(msr_offload_io_t io, size_t chunk, size_t count, int passes)
{
    make_dir();
    msr_offload_config_t cfg = config(chunk, io);
    msr_offload_t *off;
    MSR_CHECK_OK(msr_offload_create(&cfg, count, &off));
    float *m = msr_calloc(count + 1, sizeof *m), *v = msr_calloc(count + 1, sizeof *v);
    float *got_m = msr_calloc(count + 1, sizeof *m), *got_v = msr_calloc(count + 1, sizeof *v);
    MSR_CHECK(m != NULL && v != NULL && got_m != NULL && got_v != NULL);
    for (int p = 1; p <= passes; p++) {
        visit_t vis = {0, p};
        MSR_CHECK_OK(msr_offload_step(off, bump, &vis));
        MSR_CHECK_EQ(vis.next, count);
        for (size_t i = 0; i < count; i++)
            change(i, p, &m[i], &v[i]);
    }
    MSR_CHECK_OK(msr_offload_read_all(off, got_m, got_v));
    MSR_CHECK(memcmp(m, got_m, count * sizeof *m) == 0);
    MSR_CHECK(memcmp(v, got_v, count * sizeof *v) == 0);
    /* written back whole (a resume), then streamed on from there */
    for (size_t i = 0; i < count; i++)
        m[i] = (float)i, v[i] = -(float)i;
    MSR_CHECK_OK(msr_offload_write_all(off, m, v));
    visit_t vis = {0, passes + 1};
    MSR_CHECK_OK(msr_offload_step(off, bump, &vis));
    for (size_t i = 0; i < count; i++)
        change(i, passes + 1, &m[i], &v[i]);
    MSR_CHECK_OK(msr_offload_read_all(off, got_m, got_v));
    MSR_CHECK(memcmp(m, got_m, count * sizeof *m) == 0);
    MSR_CHECK(memcmp(v, got_v, count * sizeof *v) == 0);
    size_t used = msr_offload_chunk_bytes(off);
    MSR_CHECK(msr_offload_resident(off) < MSR_OFFLOAD_SLOTS * used + used);
    msr_offload_destroy(off);
    msr_free(m), msr_free(v), msr_free(got_m), msr_free(got_v);
}

static void test_stream_threads(void)
{
    stream(MSR_OFFLOAD_IO_THREADS, MSR_OFFLOAD_CHUNK_MIN, 7 * 512 + 17, 3);
}

static void test_stream_uring(void)
{
#ifdef MSR_TEST_HAVE_LIBURING
    stream(MSR_OFFLOAD_IO_URING, MSR_OFFLOAD_CHUNK_MIN, 7 * 512 + 17, 3);
#else
    printf("skip: built without liburing\n");
#endif
}

/* One chunk fewer, exactly one, one more than the slots; an empty store. */
static void test_stream_sizes(void)
{
    size_t per = MSR_OFFLOAD_CHUNK_MIN / 8;
    stream(MSR_OFFLOAD_IO_THREADS, MSR_OFFLOAD_CHUNK_MIN, 3 * per, 2);
    cleanup();
    stream(MSR_OFFLOAD_IO_THREADS, MSR_OFFLOAD_CHUNK_MIN, 4 * per, 2);
    cleanup();
    stream(MSR_OFFLOAD_IO_THREADS, MSR_OFFLOAD_CHUNK_MIN, 5 * per + 1, 2);
    cleanup();
    stream(MSR_OFFLOAD_IO_THREADS, MSR_OFFLOAD_CHUNK_MIN, 1, 2);
    cleanup();
    stream(MSR_OFFLOAD_IO_THREADS, 0, 0, 1);
}

/* The chunk size at each bound and one step (of the alignment) past. */
static void test_chunk_bounds(void)
{
    make_dir();
    size_t ok[] = {0, MSR_OFFLOAD_CHUNK_MIN, 8192, MSR_OFFLOAD_CHUNK_MAX};
    size_t bad[] = {MSR_OFFLOAD_CHUNK_MIN - 1, MSR_OFFLOAD_CHUNK_MIN + 8,
                    MSR_OFFLOAD_CHUNK_MAX + MSR_OFFLOAD_ALIGN, MSR_OFFLOAD_CHUNK_MAX + 1};
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        msr_offload_config_t cfg = config(ok[k], MSR_OFFLOAD_IO_THREADS);
        MSR_CHECK_OK(msr_offload_config_check(&cfg));
    }
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        msr_offload_config_t cfg = config(bad[k], MSR_OFFLOAD_IO_THREADS);
        MSR_CHECK_STATUS(msr_offload_config_check(&cfg), MSR_ERR_INVALID_ARG);
        MSR_CHECK(strstr(msr_err_msg(), "multiple of 4096") != NULL);
    }
    /* the largest chunk on a small store: a quarter of the store's bytes
     * rounded up (8000 bytes: 4096; 40000: 12288) */
    msr_offload_config_t cfg = config(MSR_OFFLOAD_CHUNK_MAX, MSR_OFFLOAD_IO_THREADS);
    msr_offload_t *off;
    MSR_CHECK_OK(msr_offload_create(&cfg, 1000, &off));
    MSR_CHECK_EQ(msr_offload_chunk_bytes(off), 4096);
    msr_offload_destroy(off);
    MSR_CHECK_OK(msr_offload_create(&cfg, 5000, &off));
    MSR_CHECK_EQ(msr_offload_chunk_bytes(off), 12288);
    msr_offload_destroy(off);
}

static void corrupt(msr_offload_io_t io)
{
    make_dir();
    msr_offload_config_t cfg = config(MSR_OFFLOAD_CHUNK_MIN, io);
    msr_offload_t *off;
    MSR_CHECK_OK(msr_offload_create(&cfg, 6 * 512, &off));
    visit_t vis = {0, 1};
    MSR_CHECK_OK(msr_offload_step(off, bump, &vis));
    /* one byte of chunk 2 changed underneath, between steps */
    int fd = open(msr_offload_path(off), O_WRONLY);
    MSR_CHECK(fd >= 0);
    unsigned char x = 0x5a;
    MSR_CHECK(pwrite(fd, &x, 1, 2 * MSR_OFFLOAD_CHUNK_MIN + 100) == 1);
    close(fd);
    vis = (visit_t){0, 2};
    MSR_CHECK_STATUS(msr_offload_step(off, bump, &vis), MSR_ERR_CORRUPT);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "chunk 2 of") != NULL &&
                      strstr(msr_err_msg(), msr_offload_path(off)) != NULL &&
                      strstr(msr_err_msg(), "changed underneath") != NULL,
                  "%s", msr_err_msg());
    MSR_CHECK_EQ(vis.next, 2 * 512); /* chunks 0 and 1 updated, never chunk 2 */
    /* the store refuses to go on */
    MSR_CHECK_STATUS(msr_offload_step(off, bump, &vis), MSR_ERR_STATE);
    float m[6 * 512], v[6 * 512];
    MSR_CHECK_STATUS(msr_offload_read_all(off, m, v), MSR_ERR_STATE);
    msr_offload_destroy(off);
}

static void test_corrupt_threads(void)
{
    corrupt(MSR_OFFLOAD_IO_THREADS);
}

static void test_corrupt_uring(void)
{
#ifdef MSR_TEST_HAVE_LIBURING
    corrupt(MSR_OFFLOAD_IO_URING);
#else
    printf("skip: built without liburing\n");
#endif
}

/* A checkpoint's ranges (get and put): a range inside a chunk, one
 * across three, one ending at count, an empty one and all six chunks
 * (more than the store's slots); one past count; a put keeps the chunk's
 * other moments; both engines' files read back bitwise. */
static void ranges(msr_offload_io_t io)
{
    make_dir();
    msr_offload_config_t cfg = config(MSR_OFFLOAD_CHUNK_MIN, io); /* 512 elements a chunk */
    msr_offload_t *off;
    enum { COUNT = 6 * 512 - 7 }; /* the last chunk short */
    MSR_CHECK_OK(msr_offload_create(&cfg, COUNT, &off));
    float *m = msr_calloc(COUNT, sizeof *m), *v = msr_calloc(COUNT, sizeof *v);
    float *got_m = msr_calloc(COUNT, sizeof *m), *got_v = msr_calloc(COUNT, sizeof *v);
    MSR_CHECK(m != NULL && v != NULL && got_m != NULL && got_v != NULL);
    visit_t vis = {0, 1};
    MSR_CHECK_OK(msr_offload_step(off, bump, &vis));
    for (size_t i = 0; i < COUNT; i++)
        change(i, 1, &m[i], &v[i]);
    const size_t at[5][2] = {
        {100, 50}, {300, 2 * 512 + 10}, {COUNT - 600, 600}, {0, 0}, {0, COUNT}};
    for (int r = 0; r < 5; r++) {
        size_t a = at[r][0], n = at[r][1];
        for (size_t i = a; i < a + n; i++)
            m[i] = 1000.0f + (float)i, v[i] = -(float)i * 0.5f;
        MSR_CHECK_OK(msr_offload_put(off, a, n, m + a, v + a));
        MSR_CHECK_OK(msr_offload_get(off, a, n, got_m + a, got_v + a));
        MSR_CHECK(memcmp(m + a, got_m + a, n * sizeof *m) == 0);
    }
    MSR_CHECK_OK(msr_offload_read_all(off, got_m, got_v));
    MSR_CHECK(memcmp(m, got_m, COUNT * sizeof *m) == 0);
    MSR_CHECK(memcmp(v, got_v, COUNT * sizeof *v) == 0);
    /* one past count, either end: refused, the store still usable */
    MSR_CHECK_STATUS(msr_offload_get(off, COUNT - 10, 11, got_m, got_v), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_offload_put(off, COUNT + 1, 0, m, v), MSR_ERR_INVALID_ARG);
    MSR_CHECK_OK(msr_offload_get(off, COUNT, 0, got_m, got_v));
    MSR_CHECK_OK(msr_offload_get(off, COUNT - 10, 10, got_m, got_v));
    MSR_CHECK(memcmp(m + COUNT - 10, got_m, 10 * sizeof *m) == 0);
    msr_offload_destroy(off);
    msr_free(m), msr_free(v), msr_free(got_m), msr_free(got_v);
}

static void test_ranges_threads(void)
{
    ranges(MSR_OFFLOAD_IO_THREADS);
}

static void test_ranges_uring(void)
{
#ifdef MSR_TEST_HAVE_LIBURING
    ranges(MSR_OFFLOAD_IO_URING);
#else
    printf("skip: built without liburing\n");
#endif
}

/* A chunk changed underneath while a checkpoint streams a range over it:
 * get and put stop at that chunk naming it and the file, and the store
 * refuses to go on. */
static void test_range_corrupt(void)
{
    for (int put = 0; put < 2; put++) {
        make_dir();
        msr_offload_config_t cfg = config(MSR_OFFLOAD_CHUNK_MIN, MSR_OFFLOAD_IO_THREADS);
        msr_offload_t *off;
        MSR_CHECK_OK(msr_offload_create(&cfg, 6 * 512, &off));
        int fd = open(msr_offload_path(off), O_WRONLY);
        MSR_CHECK(fd >= 0);
        unsigned char x = 0x5a;
        MSR_CHECK(pwrite(fd, &x, 1, 3 * MSR_OFFLOAD_CHUNK_MIN + 7) == 1);
        close(fd);
        static float m[6 * 512], v[6 * 512];
        msr_status_t st =
            put ? msr_offload_put(off, 700, 2000, m, v) : msr_offload_get(off, 700, 2000, m, v);
        MSR_CHECK_STATUS(st, MSR_ERR_CORRUPT);
        MSR_CHECK_MSG(strstr(msr_err_msg(), "chunk 3 of") != NULL &&
                          strstr(msr_err_msg(), msr_offload_path(off)) != NULL &&
                          strstr(msr_err_msg(), "changed underneath") != NULL,
                      "%s", msr_err_msg());
        MSR_CHECK_STATUS(msr_offload_get(off, 0, 1, m, v), MSR_ERR_STATE);
        msr_offload_destroy(off);
        cleanup();
    }
}

/* The file cut short underneath: a short read, named. */
static void test_short_read(void)
{
    make_dir();
    msr_offload_config_t cfg = config(MSR_OFFLOAD_CHUNK_MIN, MSR_OFFLOAD_IO_THREADS);
    msr_offload_t *off;
    MSR_CHECK_OK(msr_offload_create(&cfg, 6 * 512, &off));
    MSR_CHECK(truncate(msr_offload_path(off), 2 * MSR_OFFLOAD_CHUNK_MIN + 512) == 0);
    visit_t vis = {0, 1};
    MSR_CHECK_STATUS(msr_offload_step(off, bump, &vis), MSR_ERR_IO);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "short read of chunk 2 of") != NULL, "%s", msr_err_msg());
    msr_offload_destroy(off);
}

/* The file size limit (RLIMIT_FSIZE, no root needed) reached while the
 * file is made: a clear error and nothing left behind. */
static void test_file_size_limit(void)
{
    make_dir();
    signal(SIGXFSZ, SIG_IGN); /* the write fails with EFBIG instead */
    struct rlimit rl = {3 * MSR_OFFLOAD_CHUNK_MIN, 3 * MSR_OFFLOAD_CHUNK_MIN};
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    msr_offload_config_t cfg = config(MSR_OFFLOAD_CHUNK_MIN, MSR_OFFLOAD_IO_THREADS);
    msr_offload_t *off = NULL;
    MSR_CHECK_STATUS(msr_offload_create(&cfg, 10 * 512, &off), MSR_ERR_IO);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "writing chunk 3 of") != NULL &&
                      strstr(msr_err_msg(), strerror(EFBIG)) != NULL,
                  "%s", msr_err_msg());
    MSR_CHECK(off == NULL);
    /* at exactly the limit it fits */
    MSR_CHECK_OK(msr_offload_create(&cfg, 3 * 512, &off));
    msr_offload_destroy(off);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir);
    MSR_CHECK(system(cmd) == 0);
}

/* A real full disk: a tmpfs of 64 KiB (mounting needs root). */
static void test_disk_full(void)
{
    make_dir();
    if (geteuid() != 0 || mount("tmpfs", dir, "tmpfs", 0, "size=64k") != 0) {
        printf("skip: a tmpfs to fill needs root (%s)\n",
               geteuid() != 0 ? "not root" : strerror(errno));
        return;
    }
    mounted = 1;
    msr_offload_config_t cfg = config(MSR_OFFLOAD_CHUNK_MIN, MSR_OFFLOAD_IO_DEFAULT);
    msr_offload_t *off = NULL;
    MSR_CHECK_STATUS(msr_offload_create(&cfg, 40 * 512, &off), MSR_ERR_IO);
    MSR_CHECK_MSG(strstr(msr_err_msg(), strerror(ENOSPC)) != NULL &&
                      strstr(msr_err_msg(), "disk or the file size limit is full") != NULL,
                  "%s", msr_err_msg());
    MSR_CHECK(off == NULL);
}

/* 0600 whatever the umask; removed by destroy, kept on request. */
static void test_mode_and_removal(void)
{
    make_dir();
    umask(0);
    msr_offload_config_t cfg = config(0, MSR_OFFLOAD_IO_DEFAULT);
    msr_offload_t *off;
    MSR_CHECK_OK(msr_offload_create(&cfg, 5000, &off));
    char path[512];
    snprintf(path, sizeof path, "%s", msr_offload_path(off));
    struct stat sb;
    MSR_CHECK(stat(path, &sb) == 0);
    MSR_CHECK_EQ(sb.st_mode & 0777, 0600);
    msr_offload_destroy(off);
    MSR_CHECK(access(path, F_OK) != 0 && errno == ENOENT);
    cfg.keep = 1;
    MSR_CHECK_OK(msr_offload_create(&cfg, 5000, &off));
    snprintf(path, sizeof path, "%s", msr_offload_path(off));
    msr_offload_destroy(off);
    MSR_CHECK(access(path, F_OK) == 0);
}

/* Every allocation of a store and a step failing in turn: out of memory,
 * nothing left behind; the host mode is no store. */
static void test_alloc_failures(void)
{
    make_dir();
    msr_offload_config_t cfg = config(MSR_OFFLOAD_CHUNK_MIN, MSR_OFFLOAD_IO_DEFAULT);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir);
    for (long i = 0;; i++) {
        msr_offload_t *off = NULL;
        msr_alloc_fail_at(i);
        msr_status_t st = msr_offload_create(&cfg, 5 * 512, &off);
        visit_t vis = {0, 1};
        if (st == MSR_OK)
            st = msr_offload_step(off, bump, &vis);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        msr_offload_destroy(off);
        MSR_CHECK(system(cmd) == 0);
        if (!failed) {
            MSR_CHECK_OK(st);
            MSR_CHECK(i >= 3);
            break;
        }
        MSR_CHECK_STATUS(st, MSR_ERR_NO_MEMORY);
    }
    cfg.mode = MSR_OFFLOAD_HOST;
    msr_offload_t *off = NULL;
    MSR_CHECK_STATUS(msr_offload_create(&cfg, 10, &off), MSR_ERR_INVALID_ARG);
}

static const msr_test_t tests[] = {
    {"alloc_failures", test_alloc_failures, 30},     {"stream_threads", test_stream_threads, 30},
    {"stream_uring", test_stream_uring, 30},         {"stream_sizes", test_stream_sizes, 30},
    {"chunk_bounds", test_chunk_bounds, 30},         {"corrupt_threads", test_corrupt_threads, 30},
    {"corrupt_uring", test_corrupt_uring, 30},       {"short_read", test_short_read, 30},
    {"file_size_limit", test_file_size_limit, 30},   {"disk_full", test_disk_full, 30},
    {"mode_and_removal", test_mode_and_removal, 30}, {"ranges_threads", test_ranges_threads, 30},
    {"ranges_uring", test_ranges_uring, 30},         {"range_corrupt", test_range_corrupt, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
