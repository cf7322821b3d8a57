/* A checkpoint written a piece at a time (msr_trainer_save over
 * msr_ckpt_writer_t) is the file the payload built whole and saved with
 * msr_ckpt_save makes, bitwise, with the moments and the parameters'
 * blocks in memory or in their files (ZeRO 0 and 3); the trainer trains
 * on after it exactly as one that never saved. libmsrun's writer: a head
 * given last, a state past its page-cache window, a write after a
 * failure, an abort, a commit without its head. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "msrun/msrun.h"
#include "parallel/train.h"
#include "tests/parallel/ckpt_support.h"
#include "tests/runner.h"
#include "tests/tmp_dir.h"

static const char *const META = "a streamed save";

/* The bytes of file path in *buf_p (malloc'd), its length returned. */
/* A trainer of c trained 3 steps with its offload files (when c has
 * any) under sub of the test's folder. */
static msr_trainer_t *trained(msr_train_config_t c, int zero, int moments, int params,
                              const char *sub, msr_dataset_t **ds_p)
{
    static char dirs[2][512];
    int i = strcmp(sub, "a") != 0;
    snprintf(dirs[i], sizeof dirs[i], "%s/off-%s", msr_test_dir, sub);
    MSR_CHECK(mkdir(dirs[i], 0700) == 0);
    msr_offload_config_t disk = {MSR_OFFLOAD_DISK, dirs[i], 0, MSR_OFFLOAD_IO_THREADS, 0, 0};
    c.par.zero = zero;
    if (moments)
        c.par.offload = disk;
    if (params)
        c.par.params_offload = disk;
    return ckpt_test_trainer(&c, 3, ds_p);
}

/* One layout: a saves with msr_ckpt_save (the payload whole) and streamed,
 * into two folders whose files must match; b never saves; both then
 * train on to the same loss, bitwise. */
static void stream_matches(int zero, int moments, int params)
{
    msr_test_dir_make("ckpt_stream");
    msr_train_config_t c = ckpt_test_config(3, 32, 2);
    msr_dataset_t *da, *db;
    msr_trainer_t *a = trained(c, zero, moments, params, "a", &da);
    msr_trainer_t *b = trained(c, zero, moments, params, "b", &db);
    MSR_CHECK((a->dp->offload != NULL) == moments);
    MSR_CHECK((msr_dp_params_store(a->dp) != NULL) == params);
    MSR_CHECK_EQ(msr_dp_params_block_floats(a->dp) > 0, params);
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    char whole[512], streamed[512];
    snprintf(whole, sizeof whole, "%s/whole", msr_test_dir);
    snprintf(streamed, sizeof streamed, "%s/streamed", msr_test_dir);
    void *buf;
    size_t len;
    MSR_CHECK_OK(msr_trainer_snapshot(a, META, &buf, &len));
    MSR_CHECK_OK(msr_ckpt_save(ctx, whole, 3, buf, len, 0));
    msr_free(buf);
    MSR_CHECK_OK(msr_trainer_save(a, META, ctx, streamed, 3, 0));
    ckpt_test_same_file(whole, streamed, 3, "rank-0.bin");
    ckpt_test_same_file(whole, streamed, 3, "MANIFEST");
    int64_t step = -1;
    MSR_CHECK_OK(msr_ckpt_latest(ctx, streamed, &step));
    MSR_CHECK_EQ(step, 3);
    double la, lb;
    for (int i = 0; i < 2; i++) {
        MSR_CHECK_OK(msr_trainer_step(a, &la));
        MSR_CHECK_OK(msr_trainer_step(b, &lb));
        MSR_CHECK_MSG(la == lb,
                      "zero %d moments %d params %d: step %d after the save: loss %.9f, "
                      "never saved %.9f",
                      zero, moments, params, 4 + i, la, lb);
    }
    msr_finalize(ctx);
    msr_trainer_destroy(a);
    msr_trainer_destroy(b);
    msr_dataset_destroy(da);
    msr_dataset_destroy(db);
}

static void test_in_memory(void)
{
    stream_matches(0, 0, 0);
}

static void test_moments_on_disk(void)
{
    stream_matches(1, 1, 0);
}

static void test_all_on_disk(void)
{
    stream_matches(0, 1, 1);
}

static void test_zero3_on_disk(void)
{
    stream_matches(3, 1, 1);
}

/* Bytes 0, 1, ... of a state of n bytes, b's byte i = (i * 7 + 3) & 255. */
static unsigned char *pattern(size_t n)
{
    unsigned char *b = malloc(n);
    MSR_CHECK(b != NULL);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(i * 7 + 3);
    return b;
}

/* The writer: a head of 5 given last, then the parts, is the state
 * msr_ckpt_save writes of the same bytes, file for file; a state of 40
 * MiB (past two of its 8 MiB windows of page cache, at one byte past a
 * window's end too) reads back whole. */
static void test_writer(void)
{
    msr_test_dir_make("ckpt_writer");
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/a", msr_test_dir);
    snprintf(b, sizeof b, "%s/b", msr_test_dir);
    static const size_t sizes[] = {13, (size_t)16 << 20, ((size_t)16 << 20) - 47,
                                   ((size_t)40 << 20) + 1};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        unsigned char *st = pattern(n);
        MSR_CHECK_OK(msr_ckpt_save(ctx, a, 3, st, n, 0));
        msr_ckpt_writer_t *w;
        MSR_CHECK_OK(msr_ckpt_writer_open(ctx, b, 3, 5, &w));
        size_t at = 5, part = n / 3 + 1;
        while (at < n) {
            size_t c = n - at < part ? n - at : part;
            uint32_t crc;
            MSR_CHECK_OK(msr_ckpt_writer_write(w, st + at, c, &crc));
            MSR_CHECK_EQ(crc, msr_crc32(0, st + at, c));
            at += c;
        }
        MSR_CHECK_OK(msr_ckpt_writer_commit(w, st, 0));
        ckpt_test_same_file(a, b, 3, "rank-0.bin");
        void *back;
        size_t blen;
        MSR_CHECK_OK(msr_ckpt_load(ctx, b, 3, &back, &blen));
        MSR_CHECK(blen == n && memcmp(back, st, n) == 0);
        free(back);
        free(st);
    }
    msr_finalize(ctx);
}

/* An abort leaves no file and no step; a commit without the head it was
 * opened for fails and removes its file; a write after a failed one
 * fails, and so does the commit. */
static void test_writer_refusals(void)
{
    msr_test_dir_make("ckpt_writer");
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    char d[512], cmd[600];
    snprintf(d, sizeof d, "%s/d", msr_test_dir);
    msr_ckpt_writer_t *w;
    MSR_CHECK_OK(msr_ckpt_writer_open(ctx, d, 4, 0, &w));
    MSR_CHECK_OK(msr_ckpt_writer_write(w, "abc", 3, NULL));
    msr_ckpt_writer_abort(w);
    msr_ckpt_writer_abort(NULL);
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s/step-4')\"", d);
    MSR_CHECK_MSG(system(cmd) == 0, "an abort left a file in %s/step-4", d);
    int64_t step = 0;
    MSR_CHECK_OK(msr_ckpt_latest(ctx, d, &step));
    MSR_CHECK_EQ(step, -1);
    MSR_CHECK_OK(msr_ckpt_writer_open(ctx, d, 4, 8, &w));
    MSR_CHECK_STATUS(msr_ckpt_writer_commit(w, NULL, 0), MSR_ERR_INVALID_ARG);
    MSR_CHECK_MSG(system(cmd) == 0, "a refused commit left a file in %s/step-4", d);
    MSR_CHECK_STATUS(msr_ckpt_writer_open(ctx, d, -1, 0, &w), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_ckpt_writer_open(NULL, d, 4, 0, &w), MSR_ERR_INVALID_ARG);
    MSR_CHECK_OK(msr_ckpt_writer_open(ctx, d, 4, 0, &w));
    MSR_CHECK_STATUS(msr_ckpt_writer_write(w, NULL, 1, NULL), MSR_ERR_INVALID_ARG);
    /* a failed write (the file past this process's size limit: EFBIG),
     * then another write and the commit refused, the file removed */
    MSR_CHECK_OK(msr_ckpt_writer_write(w, "abc", 3, NULL));
    struct rlimit old, lim;
    MSR_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    unsigned char *big = pattern(8192);
    MSR_CHECK_STATUS(msr_ckpt_writer_write(w, big, 8192, NULL), MSR_ERR_IO);
    MSR_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    MSR_CHECK_STATUS(msr_ckpt_writer_write(w, "x", 1, NULL), MSR_ERR_IO);
    MSR_CHECK_STATUS(msr_ckpt_writer_commit(w, NULL, 0), MSR_ERR_IO);
    MSR_CHECK_MSG(system(cmd) == 0, "a failed write left a file in %s/step-4", d);
    MSR_CHECK_OK(msr_ckpt_latest(ctx, d, &step));
    MSR_CHECK_EQ(step, -1);
    free(big);
    msr_finalize(ctx);
}

static const msr_test_t tests[] = {
    {"in_memory", test_in_memory, 60},     {"moments_on_disk", test_moments_on_disk, 60},
    {"all_on_disk", test_all_on_disk, 60}, {"zero3_on_disk", test_zero3_on_disk, 60},
    {"writer", test_writer, 60},           {"writer_refusals", test_writer_refusals, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
