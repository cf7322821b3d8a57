/* dp's checkpoint load (msr_dp_load_begin/piece/end) kept as ranges of
 * elements found: pieces in any order, overlapping or touching, load
 * whole; a gap of one element anywhere, the first and the last included,
 * is found and named; a failed allocation is a status, never a crash;
 * a range read in place where it lies, then marked, at ZeRO 0 any; with
 * the moments offloaded, each piece's written into their file (never in
 * place) and read back, and a chunk changed underneath during that stream
 * a named error. */
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "parallel/dp.h"
#include "tests/runner.h"

/* A small GPT (dp alone: this rank owns every element) at stage zero. */
typedef struct fixture {
    msr_gpt_t *g;
    msr_dp_t *dp;
    size_t P;
    float *src; /* (3, P): params, m, v of a saved state, element i worth i */
} fixture_t;

static void fixture_init(fixture_t *f, int zero)
{
    msr_gpt_config_t gc = {MSR_GPT_VOCAB, 16, 2, 4, 32};
    msr_dp_config_t dc = {zero, 4000, 1000, 0, 1, 0};
    msr_adamw_config_t ac = {0.9, 0.95, 1e-8, 0.1};
    memset(f, 0, sizeof *f);
    MSR_CHECK_OK(msr_gpt_create_part(&gc, &(msr_gpt_part_t){1, 0, 1, 0, 1},
                                     msr_dp_model_flags(zero), &f->g));
    MSR_CHECK_OK(msr_dp_create(&dc, NULL, f->g, &ac, 1, &f->dp));
    f->P = f->g->num_params;
    f->src = msr_malloc(3 * f->P * sizeof(float));
    MSR_CHECK(f->src != NULL);
    for (size_t i = 0; i < 3 * f->P; i++)
        f->src[i] = (float)i;
}

static void fixture_cleanup(fixture_t *f)
{
    msr_free(f->src);
    msr_dp_destroy(f->dp);
    msr_gpt_destroy(f->g);
}

/* Loads saved elements [lo, lo + n). */
static void load(fixture_t *f, size_t lo, size_t n)
{
    msr_dp_piece_t p = {lo, n, f->src + lo, f->src + f->P + lo, f->src + 2 * f->P + lo};
    msr_dp_load_piece(f->dp, &p);
}

/* Every owned element holds what was saved. */
static void check_loaded(const fixture_t *f)
{
    for (int k = 0; k < msr_dp_num_owned(f->dp); k++) {
        msr_dp_piece_t p;
        msr_dp_owned(f->dp, k, &p);
        for (size_t i = 0; i < p.n; i++) {
            size_t e = p.lo + i;
            MSR_CHECK_MSG(p.params[i] == (float)e && p.m[i] == (float)(f->P + e) &&
                              p.v[i] == (float)(2 * f->P + e),
                          "element %zu", e);
        }
    }
}

/* Pieces of 7 elements, last first, every third loaded twice, then the
 * cut at every 7th element touching exactly: the whole state, every stage. */
static void test_any_order(void)
{
    for (int zero = 0; zero <= 3; zero++) {
        fixture_t f;
        fixture_init(&f, zero);
        MSR_CHECK_OK(msr_dp_load_begin(f.dp));
        size_t pieces = (f.P + 6) / 7;
        for (size_t j = pieces; j-- > 0;) {
            size_t lo = 7 * j, n = lo + 7 <= f.P ? 7 : f.P - lo;
            load(&f, lo, n);
            if (j % 3 == 0) /* again, overlapping its neighbour */
                load(&f, lo, MSR_MIN(n + 3, f.P - lo));
        }
        MSR_CHECK_OK(msr_dp_load_end(f.dp, 0, 0));
        check_loaded(&f);
        fixture_cleanup(&f);
    }
}

/* A gap of exactly one element (at the first, one in the middle, the
 * last) is named; the same pieces without the gap load. */
static void test_gap_of_one(void)
{
    for (int zero = 0; zero <= 3; zero += 3) {
        fixture_t f;
        fixture_init(&f, zero);
        const size_t gaps[] = {0, f.P / 2, f.P - 1};
        for (size_t k = 0; k < 3; k++) {
            size_t x = gaps[k];
            MSR_CHECK_OK(msr_dp_load_begin(f.dp));
            if (x + 1 < f.P)
                load(&f, x + 1, f.P - x - 1);
            if (x > 0)
                load(&f, 0, x);
            MSR_CHECK_EQ(msr_dp_load_end(f.dp, 0, 0), MSR_ERR_CORRUPT);
            char want[80];
            snprintf(want, sizeof want, "lacks flat element %zu of the %zu", x, f.P);
            MSR_CHECK_MSG(strstr(msr_err_msg(), want) != NULL, "%s", msr_err_msg());
            /* the gap filled, alone: the marks touch at both sides */
            MSR_CHECK_OK(msr_dp_load_begin(f.dp));
            if (x + 1 < f.P)
                load(&f, x + 1, f.P - x - 1);
            if (x > 0)
                load(&f, 0, x);
            load(&f, x, 1);
            MSR_CHECK_OK(msr_dp_load_end(f.dp, 0, 0));
            check_loaded(&f);
        }
        fixture_cleanup(&f);
    }
}

/* Single elements, every other one first (many marks, so they grow), then
 * the rest; every allocation failed in turn: a status, and a load that
 * succeeds after. */
static void test_alloc_failures(void)
{
    fixture_t f;
    fixture_init(&f, 3);
    for (long i = 0;; i++) {
        msr_alloc_fail_at(i);
        msr_status_t st = msr_dp_load_begin(f.dp);
        for (size_t e = 0; e < f.P; e += 2)
            load(&f, e, 1);
        for (size_t e = 1; e < f.P; e += 2)
            load(&f, e, 1);
        msr_status_t end = msr_dp_load_end(f.dp, 0, st != MSR_OK);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        if (!failed) {
            MSR_CHECK_OK(st);
            MSR_CHECK_OK(end);
            MSR_CHECK(i > 1); /* the marks grew at least once */
            break;
        }
        MSR_CHECK(end == MSR_ERR_NO_MEMORY || (st == MSR_ERR_NO_MEMORY && end != MSR_OK));
    }
    check_loaded(&f);
    fixture_cleanup(&f);
}

/* Read in place: the destination of every element range up to all P
 * elements, written there and marked, loads; P + 1 elements (one past
 * the last) and 0 have none; the destinations are msr_dp_owned's. */
static void test_in_place(void)
{
    for (int zero = 0; zero <= 3; zero++) {
        fixture_t f;
        fixture_init(&f, zero);
        float *d[3];
        MSR_CHECK(!msr_dp_load_dest(f.dp, 0, f.P + 1, &d[0], &d[1], &d[2]));
        MSR_CHECK(!msr_dp_load_dest(f.dp, f.P - 1, 2, &d[0], &d[1], &d[2]));
        MSR_CHECK(!msr_dp_load_dest(f.dp, 0, 0, &d[0], &d[1], &d[2]));
        msr_dp_piece_t own;
        msr_dp_owned(f.dp, 0, &own);
        MSR_CHECK(msr_dp_load_dest(f.dp, own.lo, own.n, &d[0], &d[1], &d[2]));
        MSR_CHECK(d[0] == own.params && d[1] == own.m && d[2] == own.v);
        MSR_CHECK_OK(msr_dp_load_begin(f.dp));
        size_t step = (f.P + 4) / 5, whole = 0; /* 5 ranges, the last to element P exactly */
        for (size_t lo = 0; lo < f.P; lo += step) {
            size_t n = MSR_MIN(step, f.P - lo);
            if (!msr_dp_load_dest(f.dp, lo, n, &d[0], &d[1], &d[2])) {
                load(&f, lo, n); /* units apart in the buffers (zero 3) */
                continue;
            }
            for (int a = 0; a < 3; a++)
                memcpy(d[a], f.src + a * f.P + lo, n * sizeof(float));
            msr_dp_load_mark(f.dp, lo, n);
            whole++;
        }
        MSR_CHECK(whole > 0);
        MSR_CHECK_OK(msr_dp_load_end(f.dp, 0, 0));
        check_loaded(&f);
        /* in place but not marked: named as missing */
        MSR_CHECK_OK(msr_dp_load_begin(f.dp));
        load(&f, 0, f.P - 1);
        MSR_CHECK(msr_dp_load_dest(f.dp, f.P - 1, 1, &d[0], &d[1], &d[2]));
        MSR_CHECK_EQ(msr_dp_load_end(f.dp, 0, 0), MSR_ERR_CORRUPT);
        fixture_cleanup(&f);
    }
}

/* A rank of two: at ZeRO 0 (a replica) every element lies in place, its
 * flat index in the parameters and both moments, the other rank's share
 * too; above it only the rank's own shard does. Emulated on one rank:
 * each unit's own elements made its second half, as rank 1 of 2 owns. */
static void test_replica_in_place(void)
{
    for (int zero = 0; zero <= 3; zero++) {
        fixture_t f;
        fixture_init(&f, zero);
        size_t first_lo = 0, first_n = 0; /* a unit's half this rank then does not own */
        for (int k = 0; k < f.dp->num_units; k++) {
            msr_dp_unit_t *u = &f.dp->units[k];
            if (u->replicated || u->n < 2)
                continue;
            size_t half = (u->n + 1) / 2;
            if (first_n == 0)
                first_lo = u->lo, first_n = half;
            u->own_lo = u->lo + half;
            u->own_n = u->n - half;
        }
        MSR_CHECK(first_n > 0);
        float *d[3];
        int whole = msr_dp_load_dest(f.dp, 0, f.P, &d[0], &d[1], &d[2]);
        int other = msr_dp_load_dest(f.dp, first_lo, first_n, &d[0], &d[1], &d[2]);
        MSR_CHECK_EQ(whole, zero == 0);
        MSR_CHECK_EQ(other, zero == 0);
        if (zero == 0)
            MSR_CHECK(d[0] == f.g->params + first_lo && d[1] == f.dp->opt->m + first_lo &&
                      d[2] == f.dp->opt->v + first_lo);
        MSR_CHECK(!msr_dp_load_dest(f.dp, 0, f.P + 1, &d[0], &d[1], &d[2]));
        fixture_cleanup(&f);
    }
}

/* The offload's directory (removed at exit, a failed check included). */
static char off_dir[256];

static void off_cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", off_dir);
    if (off_dir[0] != '\0' && system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", off_dir);
}

/* ZeRO 1 with the moments in a file of 4 KiB chunks: a restore's pieces
 * write them into the file, a save reads them back bitwise; the load again
 * after one byte of chunk 1 changed underneath fails at load_end with the
 * store's error naming the file and the chunk. */
static void test_offloaded(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(off_dir, sizeof off_dir, "%s/dp_cover.XXXXXX", t != NULL && t[0] != '\0' ? t : "/tmp");
    MSR_CHECK(mkdtemp(off_dir) != NULL);
    msr_test_at_end(off_cleanup);
    fixture_t f;
    msr_gpt_config_t gc = {MSR_GPT_VOCAB, 16, 2, 4, 32};
    msr_dp_config_t dc = {1, 4000, 1000, 0, 1, 0};
    dc.offload =
        (msr_offload_config_t){MSR_OFFLOAD_DISK, off_dir, 4096, MSR_OFFLOAD_IO_THREADS, 0, 0};
    msr_adamw_config_t ac = {0.9, 0.95, 1e-8, 0.1};
    memset(&f, 0, sizeof f);
    MSR_CHECK_OK(
        msr_gpt_create_part(&gc, &(msr_gpt_part_t){1, 0, 1, 0, 1}, msr_dp_model_flags(1), &f.g));
    MSR_CHECK_OK(msr_dp_create(&dc, NULL, f.g, &ac, 1, &f.dp));
    f.P = f.g->num_params;
    MSR_CHECK((f.src = msr_malloc(3 * f.P * sizeof(float))) != NULL);
    for (size_t i = 0; i < 3 * f.P; i++)
        f.src[i] = (float)i;
    float *dst[3];
    MSR_CHECK(!msr_dp_load_dest(f.dp, 0, 10, &dst[0], &dst[1], &dst[2])); /* not in place */
    MSR_CHECK_OK(msr_dp_load_begin(f.dp));
    for (size_t lo = f.P; lo > 0;) { /* pieces of 1000, last first */
        size_t n = lo % 1000 != 0 ? lo % 1000 : 1000;
        lo -= n;
        load(&f, lo, n);
    }
    MSR_CHECK_OK(msr_dp_load_end(f.dp, 1, 0));
    float *m = msr_malloc(f.P * sizeof *m), *v = msr_malloc(f.P * sizeof *v);
    MSR_CHECK(m != NULL && v != NULL);
    for (int k = 0; k < msr_dp_num_owned(f.dp); k++) {
        msr_dp_piece_t p;
        msr_dp_owned(f.dp, k, &p);
        MSR_CHECK(p.m == NULL && p.v == NULL); /* in the file */
        MSR_CHECK_OK(msr_dp_moments_get(f.dp, p.moff, p.n, m, v));
        for (size_t i = 0; i < p.n; i++)
            MSR_CHECK_MSG(p.params[i] == (float)(p.lo + i) && m[i] == (float)(f.P + p.lo + i) &&
                              v[i] == (float)(2 * f.P + p.lo + i),
                          "element %zu", p.lo + i);
    }
    char pat[300];
    glob_t g;
    snprintf(pat, sizeof pat, "%s/msrun-offload-rank0-*.bin", off_dir);
    MSR_CHECK(glob(pat, 0, NULL, &g) == 0 && g.gl_pathc == 1);
    int fd = open(g.gl_pathv[0], O_WRONLY);
    MSR_CHECK(fd >= 0);
    unsigned char x = 0x5a;
    MSR_CHECK(pwrite(fd, &x, 1, 4096 + 9) == 1);
    close(fd);
    MSR_CHECK_OK(msr_dp_load_begin(f.dp));
    load(&f, 0, f.P);
    MSR_CHECK_STATUS(msr_dp_load_end(f.dp, 1, 0), MSR_ERR_CORRUPT);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "chunk 1 of") != NULL &&
                      strstr(msr_err_msg(), g.gl_pathv[0]) != NULL &&
                      strstr(msr_err_msg(), "changed underneath") != NULL,
                  "%s", msr_err_msg());
    globfree(&g);
    msr_free(m), msr_free(v);
    fixture_cleanup(&f);
}

static const msr_test_t tests[] = {
    {"any_order", test_any_order, 30},
    {"gap_of_one", test_gap_of_one, 30},
    {"alloc_failures", test_alloc_failures, 30},
    {"replica_in_place", test_replica_in_place, 30},
    {"in_place", test_in_place, 30},
    {"offloaded", test_offloaded, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
