/* Data sets and the sampler: the generated corpus, files, and the rule that
 * a step's samples do not depend on how the batch is split. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/crc32.h"
#include "model/data.h"
#include "tests/runner.h"

static void test_generated_corpus(void)
{
    msr_dataset_t *a = NULL, *b = NULL, *c = NULL;
    MSR_CHECK_OK(msr_dataset_generate(1, 100000, &a));
    MSR_CHECK_OK(msr_dataset_generate(1, 100000, &b));
    MSR_CHECK_OK(msr_dataset_generate(2, 100000, &c));
    MSR_CHECK_EQ(a->size, 100000);
    MSR_CHECK(memcmp(a->bytes, b->bytes, a->size) == 0);
    MSR_CHECK(memcmp(a->bytes, c->bytes, a->size) != 0);
    int seen[256] = {0}, distinct = 0;
    for (size_t i = 0; i < a->size; i++) {
        unsigned char ch = a->bytes[i];
        MSR_CHECK_MSG((ch >= ' ' && ch <= '~') || ch == '\n', "byte %zu is %d", i, ch);
        distinct += !seen[ch]++;
    }
    MSR_CHECK(distinct > 30); /* letters, digits, punctuation */
    MSR_CHECK(memmem(a->bytes, a->size, " plus ", 6) != NULL);
    MSR_CHECK(memmem(a->bytes, a->size, ".\n", 2) != NULL);
    MSR_CHECK(strstr(a->origin, "generated") != NULL);
    msr_dataset_destroy(a);
    msr_dataset_destroy(b);
    msr_dataset_destroy(c);
    msr_dataset_destroy(NULL);
    MSR_CHECK_STATUS(msr_dataset_generate(1, 1, &a), MSR_ERR_INVALID_ARG);
}

/* The generated corpus is what every test, benchmark and figure of the
 * docs trains on by default: its bytes are pinned (CRC-32 of the whole
 * corpus) for the default seed and size, a corpus cut mid-word, and the
 * smallest one. */
static void test_generated_pinned(void)
{
    static const struct {
        uint64_t seed;
        size_t size;
        uint32_t crc;
    } pins[] = {
        {1337, 1048576, 0x46322b1a},
        {1, 100000, 0x2cf9b0c4},
        {7, 12345, 0xa9524b78},
        {3, 2, 0xdb4715bd},
    };
    for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++) {
        msr_dataset_t *ds = NULL;
        MSR_CHECK_OK(msr_dataset_generate(pins[i].seed, pins[i].size, &ds));
        MSR_CHECK_EQ(ds->size, pins[i].size);
        uint32_t crc = msr_crc32(0, ds->bytes, ds->size);
        printf("seed %llu size %zu crc 0x%08x\n", (unsigned long long)pins[i].seed, pins[i].size,
               crc);
        MSR_CHECK_MSG(crc == pins[i].crc, "seed %llu size %zu: CRC 0x%08x, want 0x%08x",
                      (unsigned long long)pins[i].seed, pins[i].size, crc, pins[i].crc);
        msr_dataset_destroy(ds);
    }
}

static void test_file(void)
{
    char path[] = "/tmp/msrun_data_XXXXXX";
    int fd = mkstemp(path);
    MSR_CHECK(fd >= 0);
    const char text[] = "hello, bytes as tokens\n";
    MSR_CHECK(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_load(path, &ds));
    MSR_CHECK_EQ(ds->size, sizeof text - 1);
    MSR_CHECK(memcmp(ds->bytes, text, ds->size) == 0);
    MSR_CHECK_STR(ds->origin, path);
    msr_dataset_destroy(ds);

    /* too short, missing, a directory */
    fd = open(path, O_WRONLY | O_TRUNC);
    MSR_CHECK(write(fd, "x", 1) == 1);
    close(fd);
    ds = NULL;
    MSR_CHECK_STATUS(msr_dataset_load(path, &ds), MSR_ERR_INVALID_ARG);
    unlink(path);
    MSR_CHECK_STATUS(msr_dataset_load(path, &ds), MSR_ERR_NOT_FOUND);
    MSR_CHECK_STATUS(msr_dataset_load("/tmp", &ds), MSR_ERR_INVALID_ARG);
    MSR_CHECK(ds == NULL);
}

/* Sample i of a step is the same whoever reads it: the whole batch at once,
 * or dp ranks x micro-batches reading slices. */
static void test_sampler_split(void)
{
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_generate(3, 5000, &ds));
    enum { T = 16, G = 12 };
    msr_sampler_t s = {42, 36}; /* three steps of 12 already drawn */
    int all_in[G * T], all_tg[G * T];
    msr_sampler_fill(&s, ds, T, 0, G, all_in, all_tg);
    static const int splits[][3] = {{1, 1, 12}, {2, 3, 2}, {4, 1, 3}, {3, 4, 1}}; /* dp accum B */
    for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
        int dp = splits[k][0], accum = splits[k][1], B = splits[k][2];
        MSR_CHECK_EQ(dp * accum * B, G);
        for (int r = 0; r < dp; r++) {
            for (int m = 0; m < accum; m++) {
                int in[G * T], tg[G * T];
                uint64_t first = ((uint64_t)r * accum + m) * B;
                msr_sampler_fill(&s, ds, T, first, B, in, tg);
                MSR_CHECK(memcmp(in, all_in + first * T, (size_t)B * T * sizeof(int)) == 0);
                MSR_CHECK(memcmp(tg, all_tg + first * T, (size_t)B * T * sizeof(int)) == 0);
            }
        }
    }
    /* targets are the inputs shifted by one byte of the data */
    for (int i = 0; i < G; i++) {
        size_t o = msr_sampler_offset(&s, ds->size, T, s.position + i);
        MSR_CHECK(o + T < ds->size);
        for (int t = 0; t < T; t++) {
            MSR_CHECK_EQ(all_in[i * T + t], ds->bytes[o + t]);
            MSR_CHECK_EQ(all_tg[i * T + t], ds->bytes[o + t + 1]);
        }
    }
    /* the next step reads other windows; the same position reads the same */
    msr_sampler_t next = {42, 48}, again = {42, 36};
    int in2[G * T], tg2[G * T];
    msr_sampler_fill(&next, ds, T, 0, G, in2, tg2);
    MSR_CHECK(memcmp(in2, all_in, sizeof in2) != 0);
    msr_sampler_fill(&again, ds, T, 0, G, in2, tg2);
    MSR_CHECK(memcmp(in2, all_in, sizeof in2) == 0);
    msr_dataset_destroy(ds);
}

/* Windows spread over the whole data set, the last start included. */
static void test_sampler_coverage(void)
{
    msr_sampler_t s = {7, 0};
    enum { SIZE = 40, T = 8 };
    int hits[SIZE] = {0};
    for (uint64_t k = 0; k < 4000; k++) {
        size_t o = msr_sampler_offset(&s, SIZE, T, k);
        MSR_CHECK(o < SIZE - T);
        hits[o]++;
    }
    for (int o = 0; o < SIZE - T; o++)
        MSR_CHECK_MSG(hits[o] > 60 && hits[o] < 200, "start %d drawn %d times of 4000", o, hits[o]);
    /* the smallest data set: T + 1 bytes, one window */
    MSR_CHECK_EQ(msr_sampler_offset(&s, T + 1, T, 12345), 0);
}

static const msr_test_t tests[] = {
    {"generated_corpus", test_generated_corpus, 10},
    {"generated_pinned", test_generated_pinned, 10},
    {"file", test_file, 10},
    {"sampler_split", test_sampler_split, 10},
    {"sampler_coverage", test_sampler_coverage, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
