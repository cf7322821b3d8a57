/* The checkpoint format: round trips, what counts as complete, and what
 * happens to damaged files. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "parallel/ckpt.h"
#include "parallel/ckpt_io.h"
#include "parallel/rng.h"
#include "tests/runner.h"

/* A fresh directory under /tmp; removed by the caller with rm_tree. */
static void temp_dir(char *out, size_t len)
{
    snprintf(out, len, "/tmp/msrun_ckpt_XXXXXX");
    MSR_CHECK(mkdtemp(out) != NULL);
}

static void rm_tree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    MSR_CHECK(system(cmd) == 0);
}

enum { NP = 1001 };

typedef struct shard_data {
    float params[NP], m[NP], v[NP];
} shard_data_t;

static msr_tckpt_shard_t make_shard(shard_data_t *d, uint64_t step, uint32_t rank, uint32_t world)
{
    for (int i = 0; i < NP; i++) {
        d->params[i] = (float)msr_rng_normal(step, rank, i);
        d->m[i] = (float)msr_rng_normal(step, rank + 100, i);
        d->v[i] = (float)msr_rng_normal(step, rank + 200, i);
    }
    /* rank r keeps moments for its shard [lo, hi) of the NP parameters */
    uint64_t lo = (uint64_t)NP * rank / world, hi = (uint64_t)NP * (rank + 1) / world;
    msr_tckpt_shard_t s = {
        .step = step,
        .adam_t = step,
        .data_seed = 99,
        .data_position = step * 24,
        .rank = rank,
        .world = world,
        .num_params = NP,
        .params_lo = 0,
        .params_hi = NP,
        .opt_lo = lo,
        .opt_hi = hi,
        .meta = "layers 2 channels 16; seed 99",
        .params = d->params,
        .m = d->m,
        .v = d->v,
    };
    return s;
}

static void write_checkpoint(const char *dir, uint64_t step, uint32_t world, int manifest)
{
    msr_tckpt_entry_t entries[4];
    for (uint32_t r = 0; r < world; r++) {
        shard_data_t *d = malloc(sizeof *d);
        msr_tckpt_shard_t s = make_shard(d, step, r, world);
        MSR_CHECK_OK(msr_tckpt_shard_write(dir, &s, &entries[r]));
        free(d);
    }
    if (manifest)
        MSR_CHECK_OK(msr_tckpt_manifest_write(dir, step, world, entries));
}

static void shard_path(const char *dir, uint64_t step, uint32_t rank, char *out, size_t len)
{
    snprintf(out, len, "%s/step_%08llu/rank_%05u.bin", dir, (unsigned long long)step, rank);
}

static void test_round_trip(void)
{
    char dir[64];
    temp_dir(dir, sizeof dir);
    write_checkpoint(dir, 7, 3, 1);
    uint64_t step = 0;
    uint32_t world = 0;
    MSR_CHECK_OK(msr_tckpt_latest(dir, &step, &world));
    MSR_CHECK_EQ(step, 7);
    MSR_CHECK_EQ(world, 3);
    for (uint32_t r = 0; r < 3; r++) {
        shard_data_t *want = malloc(sizeof *want);
        msr_tckpt_shard_t w = make_shard(want, 7, r, 3), got;
        void *buf = NULL;
        MSR_CHECK_OK(msr_tckpt_shard_read(dir, 7, r, &got, &buf));
        MSR_CHECK_EQ(got.step, 7);
        MSR_CHECK_EQ(got.adam_t, 7);
        MSR_CHECK_EQ(got.data_seed, 99);
        MSR_CHECK_EQ(got.data_position, 7 * 24);
        MSR_CHECK_EQ(got.rank, r);
        MSR_CHECK_EQ(got.world, 3);
        MSR_CHECK_EQ(got.opt_lo, w.opt_lo);
        MSR_CHECK_EQ(got.opt_hi, w.opt_hi);
        MSR_CHECK_STR(got.meta, w.meta);
        MSR_CHECK(memcmp(got.params, want->params, NP * sizeof(float)) == 0);
        MSR_CHECK(memcmp(got.m, want->m, (w.opt_hi - w.opt_lo) * sizeof(float)) == 0);
        MSR_CHECK(memcmp(got.v, want->v, (w.opt_hi - w.opt_lo) * sizeof(float)) == 0);
        msr_free(buf);
        free(want);
    }
    void *buf = NULL;
    msr_tckpt_shard_t s;
    MSR_CHECK_STATUS(msr_tckpt_shard_read(dir, 7, 3, &s, &buf), MSR_ERR_NOT_FOUND); /* no rank 3 */
    MSR_CHECK_STATUS(msr_tckpt_shard_read(dir, 8, 0, &s, &buf), MSR_ERR_NOT_FOUND); /* no step 8 */
    /* nothing but the shards and the manifest is left behind */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test $(ls '%s/step_00000007' | wc -l) -eq 4", dir);
    MSR_CHECK(system(cmd) == 0);
    rm_tree(dir);
}

static void test_latest_needs_manifest(void)
{
    char dir[64];
    temp_dir(dir, sizeof dir);
    uint64_t step;
    uint32_t world;
    MSR_CHECK_STATUS(msr_tckpt_latest(dir, &step, &world), MSR_ERR_NOT_FOUND);
    MSR_CHECK_STATUS(msr_tckpt_latest("/tmp/msrun_no_such_dir", &step, &world), MSR_ERR_NOT_FOUND);
    write_checkpoint(dir, 5, 2, 1);
    write_checkpoint(dir, 10, 2, 0); /* shards written, manifest not: a crash in between */
    MSR_CHECK_OK(msr_tckpt_latest(dir, &step, &world));
    MSR_CHECK_EQ(step, 5);
    write_checkpoint(dir, 10, 2, 1);
    MSR_CHECK_OK(msr_tckpt_latest(dir, &step, &world));
    MSR_CHECK_EQ(step, 10);
    /* a shard lost after its manifest was written: step 10 no longer counts */
    char path[256];
    shard_path(dir, 10, 1, path, sizeof path);
    MSR_CHECK(unlink(path) == 0);
    MSR_CHECK_OK(msr_tckpt_latest(dir, &step, &world));
    MSR_CHECK_EQ(step, 5);
    /* a truncated shard does not count either */
    shard_path(dir, 5, 0, path, sizeof path);
    MSR_CHECK(truncate(path, 100) == 0);
    MSR_CHECK_STATUS(msr_tckpt_latest(dir, &step, &world), MSR_ERR_NOT_FOUND);
    /* other names in the directory are ignored */
    snprintf(path, sizeof path, "%s/step_12x", dir);
    MSR_CHECK(mkdir(path, 0755) == 0);
    MSR_CHECK_STATUS(msr_tckpt_latest(dir, &step, &world), MSR_ERR_NOT_FOUND);
    rm_tree(dir);
}

static void overwrite_byte(const char *path, long at)
{
    int fd = open(path, O_RDWR);
    MSR_CHECK(fd >= 0);
    unsigned char b;
    MSR_CHECK(pread(fd, &b, 1, at) == 1);
    b ^= 0x40;
    MSR_CHECK(pwrite(fd, &b, 1, at) == 1);
    close(fd);
}

static void test_corruption(void)
{
    char dir[64], path[256];
    temp_dir(dir, sizeof dir);
    write_checkpoint(dir, 3, 1, 1);
    shard_path(dir, 3, 0, path, sizeof path);
    msr_tckpt_shard_t s;
    void *buf = NULL;
    /* one flipped bit in the parameters: same size, so it is still listed, but refused */
    overwrite_byte(path, 2000);
    uint64_t step;
    uint32_t world;
    MSR_CHECK_OK(msr_tckpt_latest(dir, &step, &world));
    MSR_CHECK_STATUS(msr_tckpt_shard_read(dir, 3, 0, &s, &buf), MSR_ERR_CORRUPT);
    overwrite_byte(path, 2000);
    MSR_CHECK_OK(msr_tckpt_shard_read(dir, 3, 0, &s, &buf));
    msr_free(buf);

    /* a manifest without its last line is incomplete */
    char mpath[256];
    snprintf(mpath, sizeof mpath, "%s/step_00000003/MANIFEST", dir);
    void *text;
    size_t len;
    MSR_CHECK_OK(msr_tckpt_io_read(mpath, &text, &len));
    MSR_CHECK(len > 4 && strcmp((char *)text + len - 4, "end\n") == 0);
    msr_tckpt_piece_t piece = {text, len - 4};
    MSR_CHECK_OK(msr_tckpt_io_write(mpath, &piece, 1));
    MSR_CHECK_STATUS(msr_tckpt_latest(dir, &step, &world), MSR_ERR_NOT_FOUND);
    MSR_CHECK_STATUS(msr_tckpt_shard_read(dir, 3, 0, &s, &buf), MSR_ERR_NOT_FOUND);
    /* a manifest naming a file outside its directory is refused */
    char evil[512];
    snprintf(evil, sizeof evil, "msrun-checkpoint 1\nstep 3\nworld 1\nshard 0 ../x 10 0\nend\n");
    piece = (msr_tckpt_piece_t){evil, strlen(evil)};
    MSR_CHECK_OK(msr_tckpt_io_write(mpath, &piece, 1));
    MSR_CHECK_STATUS(msr_tckpt_latest(dir, &step, &world), MSR_ERR_NOT_FOUND);
    msr_free(text);
    rm_tree(dir);
}

static void test_bad_shard(void)
{
    char dir[64];
    temp_dir(dir, sizeof dir);
    shard_data_t *d = malloc(sizeof *d);
    msr_tckpt_shard_t s = make_shard(d, 1, 0, 1);
    msr_tckpt_entry_t e;
    s.opt_hi = NP + 1;
    MSR_CHECK_STATUS(msr_tckpt_shard_write(dir, &s, &e), MSR_ERR_INVALID_ARG);
    s = make_shard(d, 1, 2, 2); /* rank 2 of 2 */
    MSR_CHECK_STATUS(msr_tckpt_shard_write(dir, &s, &e), MSR_ERR_INVALID_ARG);
    s = make_shard(d, 1, 0, 1);
    s.meta = NULL; /* no meta is fine */
    MSR_CHECK_OK(msr_tckpt_shard_write(dir, &s, &e));
    /* a checkpoint directory that cannot be created (its parent is a file) */
    char file[128], under[160];
    snprintf(file, sizeof file, "%s/file", dir);
    int fd = open(file, O_WRONLY | O_CREAT, 0644);
    MSR_CHECK(fd >= 0);
    close(fd);
    snprintf(under, sizeof under, "%s/ckpt", file);
    MSR_CHECK(msr_tckpt_shard_write(under, &s, &e) != MSR_OK);
    free(d);
    rm_tree(dir);
}

/* The hash depends on the bytes only, not on how they were cut. */
static void test_hash_pieces(void)
{
    unsigned char data[300];
    for (int i = 0; i < 300; i++)
        data[i] = (unsigned char)msr_rng_u64(1, 0, i);
    uint64_t whole = msr_tckpt_hash(data, sizeof data);
    static const size_t cuts[][3] = {{1, 2, 3}, {7, 8, 9}, {100, 101, 299}, {0, 0, 300}};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        msr_tckpt_hasher_t hs;
        msr_tckpt_hash_init(&hs);
        msr_tckpt_hash_update(&hs, data, cuts[k][0]);
        msr_tckpt_hash_update(&hs, data + cuts[k][0], cuts[k][1] - cuts[k][0]);
        msr_tckpt_hash_update(&hs, data + cuts[k][1], cuts[k][2] - cuts[k][1]);
        msr_tckpt_hash_update(&hs, data + cuts[k][2], sizeof data - cuts[k][2]);
        MSR_CHECK(msr_tckpt_hash_final(&hs) == whole);
    }
    data[150] ^= 1;
    MSR_CHECK(msr_tckpt_hash(data, sizeof data) != whole);
    MSR_CHECK(msr_tckpt_hash(data, 0) != msr_tckpt_hash(data, 1));
}

static const msr_test_t tests[] = {
    {"round_trip", test_round_trip, 20},
    {"latest_needs_manifest", test_latest_needs_manifest, 20},
    {"corruption", test_corruption, 20},
    {"bad_shard", test_bad_shard, 20},
    {"hash_pieces", test_hash_pieces, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
