/* The parameter offload's store (parallel/offload_params.h): blocks read
 * ahead in a forward and a backward pass with no read missed, written back
 * behind and read again bitwise with both engines, a block changed
 * underneath named, a block put while its read or write is in flight, the
 * bounds of blocks and buffers, the file's mode, its removal and a
 * directory that cannot take it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "parallel/offload_params.h"
#include "tests/runner.h"
#include "tests/tmp_dir.h"

static msr_offload_config_t config(msr_offload_io_t io)
{
    return (msr_offload_config_t){MSR_OFFLOAD_DISK, msr_test_dir, 0, io, 0, 2};
}

/* Not a multiple of the file's alignment: every block has a padded tail. */
#define N      1500
#define BLOCKS 5

static float value(size_t k, size_t i, int version)
{
    return (float)(k * 100003 + i) * 0.001f + (float)version;
}

static void put_all(msr_params_t *p)
{
    static float src[N];
    for (size_t k = 0; k < BLOCKS; k++) {
        for (size_t i = 0; i < N; i++)
            src[i] = value(k, i, 0);
        MSR_CHECK_OK(msr_params_put(p, k, src));
    }
}

/* A store of BLOCKS blocks of N floats on engine io, in a fresh test
 * directory, every block put (version 0). */
static msr_params_t *store_filled(msr_offload_io_t io)
{
    msr_test_dir_make("offload_params");
    msr_offload_config_t cfg = config(io);
    msr_params_t *p = NULL;
    MSR_CHECK_OK(msr_params_create(&cfg, N, BLOCKS, &p));
    put_all(p);
    return p;
}

/* One pass in direction way, the first block read ahead: every block's
 * parameters are the version's; update: each gets +1 and is written back. */
static void pass(msr_params_t *p, int way, int version, int update)
{
    size_t k = way > 0 ? 0 : BLOCKS - 1;
    MSR_CHECK_OK(msr_params_prefetch(p, k));
    for (int j = 0; j < BLOCKS; j++, k += (size_t)(ptrdiff_t)way) {
        float *buf;
        MSR_CHECK_OK(msr_params_acquire(p, k, way, &buf));
        for (size_t i = 0; i < N; i++) {
            MSR_CHECK_MSG(buf[i] == value(k, i, version), "block %zu [%zu]: %g, want %g", k, i,
                          (double)buf[i], (double)value(k, i, version));
            if (update)
                buf[i] += 1.0f;
        }
        MSR_CHECK_OK(msr_params_release(p, k, buf, update));
    }
}

/* A step's shape: forward, backward, the optimizer's pass writing back,
 * then forward and backward see the new parameters; no read was missed
 * (each block was read ahead: the pass's next one, never another). */
static void passes(msr_offload_io_t io)
{
    msr_params_t *p = store_filled(io);
    pass(p, 1, 0, 0);
    pass(p, -1, 0, 0);
    pass(p, 1, 0, 1);
    pass(p, -1, 1, 0);
    pass(p, 1, 1, 0);
    const msr_params_stats_t *s = msr_params_stats(p);
    MSR_CHECK_EQ(s->writes, 2 * BLOCKS);
    MSR_CHECK_EQ(s->reads, 5 * BLOCKS);
    MSR_CHECK_EQ(s->misses, 0);
    /* a checkpoint's read: the latest parameters, bitwise */
    float got[N];
    MSR_CHECK_OK(msr_params_get(p, 3, got));
    for (size_t i = 0; i < N; i++)
        MSR_CHECK(got[i] == value(3, i, 1));
    MSR_CHECK_EQ(msr_params_resident(p), msr_params_resident_of(N, BLOCKS));
    MSR_CHECK_EQ(msr_params_resident_of(N, BLOCKS),
                 MSR_PARAMS_BUFS * 8192 + (BLOCKS + 1) * (sizeof(uint32_t) + 1));
    msr_params_destroy(p);
}

static void test_passes_threads(void)
{
    passes(MSR_OFFLOAD_IO_THREADS);
}

static void test_passes_uring(void)
{
#ifdef MSR_TEST_HAVE_LIBURING
    passes(MSR_OFFLOAD_IO_URING);
#else
    printf("skip: built without liburing\n");
#endif
}

/* A block put while its read ahead or its write is in flight (as a
 * restore puts the blocks the last step left read ahead or written
 * behind): the read is dropped, the earlier write lands first, and a
 * later read gives what the last put wrote, with both engines. */
static void put_in_flight(msr_offload_io_t io)
{
    msr_params_t *p = store_filled(io);
    static float src[N], got[N];
    for (int round = 0; round < 20; round++) {
        size_t k = (size_t)round % BLOCKS;
        MSR_CHECK_OK(msr_params_prefetch(p, k)); /* read ahead, then put */
        for (size_t i = 0; i < N; i++)
            src[i] = value(k, i, 2 * round + 1);
        MSR_CHECK_OK(msr_params_put(p, k, src));
        for (size_t i = 0; i < N; i++) /* put again at once: two writes */
            src[i] = value(k, i, 2 * round + 2);
        MSR_CHECK_OK(msr_params_put(p, k, src));
        MSR_CHECK_OK(msr_params_get(p, k, got));
        MSR_CHECK_MSG(memcmp(got, src, sizeof got) == 0, "round %d: block %zu is not the last put",
                      round, k);
    }
    msr_params_destroy(p);
}

static void test_put_in_flight(void)
{
    put_in_flight(MSR_OFFLOAD_IO_THREADS);
#ifdef MSR_TEST_HAVE_LIBURING
    put_in_flight(MSR_OFFLOAD_IO_URING);
#endif
}

/* One byte of block 2 changed underneath between passes: the pass stops at
 * block 2 with the file and the block named; the store refuses to go on. */
static void test_corrupt(void)
{
    msr_params_t *p = store_filled(MSR_OFFLOAD_IO_THREADS);
    pass(p, 1, 0, 0);
    int fd = open(msr_params_path(p), O_WRONLY);
    MSR_CHECK(fd >= 0);
    unsigned char x = 0x5a;
    MSR_CHECK(pwrite(fd, &x, 1, 2 * 8192 + 17) == 1);
    close(fd);
    MSR_CHECK_OK(msr_params_prefetch(p, 0));
    float *buf;
    for (size_t k = 0; k < 2; k++) {
        MSR_CHECK_OK(msr_params_acquire(p, k, 1, &buf));
        MSR_CHECK_OK(msr_params_release(p, k, buf, 0));
    }
    MSR_CHECK_STATUS(msr_params_acquire(p, 2, 1, &buf), MSR_ERR_CORRUPT);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "block 2 of") != NULL &&
                      strstr(msr_err_msg(), msr_params_path(p)) != NULL &&
                      strstr(msr_err_msg(), "changed underneath") != NULL,
                  "%s", msr_err_msg());
    MSR_CHECK_STATUS(msr_params_acquire(p, 3, 1, &buf), MSR_ERR_STATE);
    MSR_CHECK_STATUS(msr_params_put(p, 0, buf), MSR_ERR_STATE);
    msr_params_destroy(p);
}

/* Blocks at their last index and one past, a direction that is none, a
 * release of what is not held, every buffer held: errors, never a crash;
 * the store goes on after them. */
static void test_bounds(void)
{
    msr_test_dir_make("offload_params");
    msr_offload_config_t cfg = config(MSR_OFFLOAD_IO_THREADS);
    msr_params_t *p;
    MSR_CHECK_STATUS(msr_params_create(&cfg, 0, BLOCKS, &p), MSR_ERR_INVALID_ARG);
    MSR_CHECK_OK(msr_params_create(&cfg, 1, 0, &p)); /* no blocks: nothing to read */
    float one = 1.0f, *buf;
    MSR_CHECK_STATUS(msr_params_put(p, 0, &one), MSR_ERR_STATE);
    MSR_CHECK_STATUS(msr_params_acquire(p, 0, 1, &buf), MSR_ERR_STATE);
    msr_params_destroy(p);

    MSR_CHECK_OK(msr_params_create(&cfg, N, BLOCKS, &p));
    float src[N] = {0};
    MSR_CHECK_OK(msr_params_put(p, BLOCKS - 1, src));
    MSR_CHECK_STATUS(msr_params_put(p, BLOCKS, src), MSR_ERR_STATE);
    MSR_CHECK_STATUS(msr_params_prefetch(p, 0), MSR_ERR_STATE); /* never put */
    put_all(p);
    MSR_CHECK_STATUS(msr_params_acquire(p, BLOCKS, -1, &buf), MSR_ERR_STATE);
    MSR_CHECK_STATUS(msr_params_acquire(p, 0, 2, &buf), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_params_acquire(p, 1, -2, &buf), MSR_ERR_INVALID_ARG);
    /* dir 0 reads nothing ahead: the next block is a miss */
    const msr_params_stats_t *ps = msr_params_stats(p);
    MSR_CHECK_OK(msr_params_acquire(p, 1, 0, &buf));
    MSR_CHECK(buf[3] == value(1, 3, 0));
    MSR_CHECK_OK(msr_params_release(p, 1, buf, 0));
    uint64_t misses = ps->misses;
    MSR_CHECK_OK(msr_params_acquire(p, 2, 1, &buf));
    MSR_CHECK_EQ(ps->misses, misses + 1);
    MSR_CHECK_OK(msr_params_release(p, 2, buf, 0));
    MSR_CHECK_OK(msr_params_acquire(p, 3, 1, &buf)); /* read ahead by 2's */
    MSR_CHECK_EQ(ps->misses, misses + 1);
    MSR_CHECK_OK(msr_params_release(p, 3, buf, 0));
    /* the last block forward and the first backward: no block after them */
    MSR_CHECK_OK(msr_params_acquire(p, BLOCKS - 1, 1, &buf));
    MSR_CHECK_STATUS(msr_params_release(p, 0, buf, 0), MSR_ERR_STATE); /* not block 0's */
    MSR_CHECK_OK(msr_params_release(p, BLOCKS - 1, buf, 0));
    MSR_CHECK_STATUS(msr_params_release(p, BLOCKS - 1, buf, 0), MSR_ERR_STATE); /* twice */
    MSR_CHECK_OK(msr_params_acquire(p, 0, -1, &buf));
    MSR_CHECK_OK(msr_params_release(p, 0, buf, 0));
    /* two held and the next being read: a third cannot be read ahead */
    float *b0, *b1, *b2;
    MSR_CHECK_OK(msr_params_acquire(p, 0, 1, &b0));
    MSR_CHECK_OK(msr_params_acquire(p, 1, 1, &b1));
    MSR_CHECK_STATUS(msr_params_acquire(p, 2, 1, &b2), MSR_ERR_STATE);
    MSR_CHECK(strstr(msr_err_msg(), "buffers") != NULL);
    MSR_CHECK_OK(msr_params_release(p, 0, b0, 0));
    MSR_CHECK_OK(msr_params_release(p, 1, b1, 0));
    MSR_CHECK_OK(msr_params_acquire(p, 2, 1, &b2));
    MSR_CHECK(b2[0] == value(2, 0, 0));
    MSR_CHECK_OK(msr_params_release(p, 2, b2, 0));
    msr_params_destroy(p);
}

/* Reads ahead that no acquire took (a pass that went elsewhere) are
 * given up, the oldest first, when a newer read finds no buffer free:
 * acquiring one of them reads it again (a miss), the right values all
 * the same; one still being read is taken as read ahead. */
static void test_guesses_given_up(void)
{
    msr_test_dir_make("offload_params");
    msr_offload_config_t cfg = config(MSR_OFFLOAD_IO_THREADS);
    msr_params_t *p;
    MSR_CHECK_OK(msr_params_create(&cfg, N, BLOCKS, &p));
    put_all(p);
    const msr_params_stats_t *ps = msr_params_stats(p);
    MSR_CHECK_OK(msr_params_prefetch(p, 0));
    MSR_CHECK_OK(msr_params_prefetch(p, 2));
    MSR_CHECK_OK(msr_params_prefetch(p, 3)); /* every buffer reading */
    MSR_CHECK_EQ(ps->dropped, 0);
    MSR_CHECK_OK(msr_params_prefetch(p, 4)); /* 0's given up */
    MSR_CHECK_EQ(ps->dropped, 1);
    uint64_t misses = ps->misses;
    float *buf;
    MSR_CHECK_OK(msr_params_acquire(p, 3, 1, &buf)); /* 4 being read already */
    MSR_CHECK(ps->misses == misses && ps->dropped == 1 && buf[7] == value(3, 7, 0));
    MSR_CHECK_OK(msr_params_release(p, 3, buf, 0));
    /* read again into the buffer 3 left; its next, 1, takes 2's */
    MSR_CHECK_OK(msr_params_acquire(p, 0, 1, &buf));
    MSR_CHECK(ps->misses == misses + 1 && ps->dropped == 2 && buf[7] == value(0, 7, 0));
    MSR_CHECK_OK(msr_params_release(p, 0, buf, 0));
    MSR_CHECK_OK(msr_params_acquire(p, 4, -1, &buf)); /* still read ahead */
    MSR_CHECK(ps->misses == misses + 1 && buf[N - 1] == value(4, N - 1, 0));
    MSR_CHECK_OK(msr_params_release(p, 4, buf, 0));
    MSR_CHECK_OK(msr_params_acquire(p, 2, 1, &buf)); /* given up: read again */
    MSR_CHECK(ps->misses == misses + 2 && buf[N - 1] == value(2, N - 1, 0));
    MSR_CHECK_OK(msr_params_release(p, 2, buf, 0));
    msr_params_destroy(p);
}

/* 0600 whatever the umask; removed by destroy, kept on request; a
 * directory that is not there: a clear error naming the file. */
static void test_mode_and_removal(void)
{
    msr_test_dir_make("offload_params");
    umask(0);
    msr_offload_config_t cfg = config(MSR_OFFLOAD_IO_DEFAULT);
    msr_params_t *p;
    MSR_CHECK_OK(msr_params_create(&cfg, N, BLOCKS, &p));
    char path[512];
    snprintf(path, sizeof path, "%s", msr_params_path(p));
    MSR_CHECK(strstr(path, "/msrun-params-rank2-") != NULL);
    struct stat sb;
    MSR_CHECK(stat(path, &sb) == 0);
    MSR_CHECK_EQ(sb.st_mode & 0777, 0600);
    msr_params_destroy(p);
    MSR_CHECK(access(path, F_OK) != 0 && errno == ENOENT);
    cfg.keep = 1;
    MSR_CHECK_OK(msr_params_create(&cfg, N, BLOCKS, &p));
    snprintf(path, sizeof path, "%s", msr_params_path(p));
    msr_params_destroy(p);
    MSR_CHECK(access(path, F_OK) == 0);
    char missing[300];
    snprintf(missing, sizeof missing, "%s/not-there", msr_test_dir);
    cfg.dir = missing;
    MSR_CHECK_STATUS(msr_params_create(&cfg, N, BLOCKS, &p), MSR_ERR_IO);
    MSR_CHECK_MSG(strstr(msr_err_msg(), missing) != NULL, "%s", msr_err_msg());
    cfg.mode = MSR_OFFLOAD_HOST;
    MSR_CHECK_STATUS(msr_params_create(&cfg, N, BLOCKS, &p), MSR_ERR_INVALID_ARG);
}

static const msr_test_t tests[] = {
    {"passes_threads", test_passes_threads, 30},
    {"passes_uring", test_passes_uring, 30},
    {"corrupt", test_corrupt, 30},
    {"bounds", test_bounds, 30},
    {"guesses_given_up", test_guesses_given_up, 30},
    {"mode_and_removal", test_mode_and_removal, 30},
    {"put_in_flight", test_put_in_flight, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
