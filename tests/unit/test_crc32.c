/* base/crc32.h's CRC-32 against the definition (a bit at a time, written
 * here), for every length, alignment and split of the input, on the path
 * the CPU takes (folded where it has PCLMULQDQ) and on the tables with
 * "pclmul" masked off (each test runs in its own process, so the mask set
 * before the first call holds for the whole test). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/cpu_features.h"
#include "base/crc32.h"
#include "tests/runner.h"

/* Bytes that are not all alike: a fixed pseudo-random sequence. */
static void fill(unsigned char *b, size_t n)
{
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (unsigned char)x;
    }
}

/* CRC-32 (reflected, polynomial 0xedb88320) a bit at a time: no table. */
static uint32_t ref_crc32(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? 0xedb88320u ^ (crc >> 1) : crc >> 1;
    }
    return ~crc;
}

static void test_check_value(void)
{
    /* CRC-32's published check value (IEEE 802.3, zlib) */
    MSR_CHECK(msr_crc32(0, "123456789", 9) == 0xcbf43926u);
    MSR_CHECK(ref_crc32(0, (const unsigned char *)"123456789", 9) == 0xcbf43926u);
    MSR_CHECK(msr_crc32(0, "", 0) == 0);
    MSR_CHECK(msr_crc32(0x12345678u, "", 0) == 0x12345678u);
}

/* Every length 0..300 (the folds of 64 and 16 bytes and what is left,
 * the 8-byte steps and 0..7 bytes after them) from every start 0..16
 * (aligned or not), continued from 0 and from another CRC. */
static void check_lengths(void)
{
    static unsigned char b[320];
    fill(b, sizeof b);
    for (size_t at = 0; at <= 16; at++)
        for (size_t n = 0; n <= 300; n++) {
            MSR_CHECK_MSG(msr_crc32(0, b + at, n) == ref_crc32(0, b + at, n),
                          "start %zu, %zu bytes", at, n);
            MSR_CHECK(msr_crc32(0xdeadbeefu, b + at, n) == ref_crc32(0xdeadbeefu, b + at, n));
        }
}

/* The path the CPU takes: folded wherever it has pclmul (so this test
 * checks the fold on such a CPU, and says when it could not). */
static void test_lengths_and_alignments(void)
{
    unsigned f = 0;
    MSR_CHECK_OK(msr_cpu_features_get(&f));
    MSR_CHECK_EQ(msr_crc32_folded(), (f & MSR_CPU_PCLMUL) != 0);
    if (!msr_crc32_folded())
        printf("no pclmul on this CPU: the tables only\n");
    check_lengths();
}

/* "pclmul" masked off: the tables, the same values. */
static void test_tables_forced(void)
{
    setenv("MSRUN_CPU_DISABLE", "pclmul", 1);
    MSR_CHECK_EQ(msr_crc32_folded(), 0);
    MSR_CHECK(msr_crc32(0, "123456789", 9) == 0xcbf43926u);
    check_lengths();
}

/* A buffer of a checkpoint piece's size and one byte more, whole and
 * split anywhere (a piece's CRC continues over its fields and floats),
 * from an odd start too. */
static void check_large(void)
{
    size_t n = (size_t)12 << 20; /* MSR_TCKPT_PIECE_MAX floats x 3 */
    unsigned char *b = malloc(n + 1);
    MSR_CHECK(b != NULL);
    fill(b, n + 1);
    uint32_t whole = ref_crc32(0, b, n), more = ref_crc32(0, b, n + 1);
    MSR_CHECK(msr_crc32(0, b, n) == whole);
    MSR_CHECK(msr_crc32(0, b, n + 1) == more);
    static const size_t cuts[] = {0, 1, 7, 8, 9, 4093, 65536, (size_t)12 << 19};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++)
        MSR_CHECK_MSG(msr_crc32(msr_crc32(0, b, cuts[k]), b + cuts[k], n - cuts[k]) == whole,
                      "split at %zu", cuts[k]);
    MSR_CHECK(msr_crc32(0, b + 3, n - 3) == ref_crc32(0, b + 3, n - 3));
    b[n / 2] ^= 1; /* one bit flipped is seen */
    MSR_CHECK(msr_crc32(0, b, n) != whole);
    free(b);
}

static void test_large_and_split(void)
{
    check_large();
}

static void test_large_tables_forced(void)
{
    setenv("MSRUN_CPU_DISABLE", "pclmul", 1);
    MSR_CHECK_EQ(msr_crc32_folded(), 0);
    check_large();
}

/* msr_crc32_combine against the CRC of the joined bytes: every cut of
 * 300 bytes (0 and every length included), cuts of 1 MiB, a seeded CRC
 * made seedless, and lengths past 4 GiB by the rule's own algebra. */
static void test_combine(void)
{
    static unsigned char b[300];
    fill(b, sizeof b);
    for (size_t n = 0; n <= sizeof b; n++) {
        uint32_t whole = ref_crc32(0, b, n);
        for (size_t cut = 0; cut <= n; cut++) {
            uint32_t a = msr_crc32(0, b, cut), z = msr_crc32(0, b + cut, n - cut);
            MSR_CHECK_MSG(msr_crc32_combine(a, z, n - cut) == whole, "%zu bytes cut at %zu", n,
                          cut);
        }
        uint32_t seeded = msr_crc32(0xdeadbeefu, b, n); /* a piece's CRC from its header's */
        MSR_CHECK(msr_crc32_combine(0xdeadbeefu, 0, n) == (ref_crc32(0xdeadbeefu, b, n) ^ whole));
        MSR_CHECK((seeded ^ msr_crc32_combine(0xdeadbeefu, 0, n)) == whole);
    }
    size_t n = (size_t)1 << 20;
    unsigned char *m = malloc(n);
    MSR_CHECK(m != NULL);
    fill(m, n);
    uint32_t whole = msr_crc32(0, m, n);
    static const size_t cuts[] = {1, 4096, 65536 + 3, (size_t)1 << 19};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++)
        MSR_CHECK(msr_crc32_combine(msr_crc32(0, m, cuts[k]),
                                    msr_crc32(0, m + cuts[k], n - cuts[k]), n - cuts[k]) == whole);
    free(m);
    /* zeros past 4 GiB: moving over 2^32 + 5 bytes is moving over 2^32, then 5 */
    uint64_t big = ((uint64_t)1 << 32) + 5;
    uint32_t c = 0x12345678u;
    MSR_CHECK(msr_crc32_combine(c, 0, big) ==
              msr_crc32_combine(msr_crc32_combine(c, 0, (uint64_t)1 << 32), 0, 5));
    MSR_CHECK(msr_crc32_combine(c, 0, big) != msr_crc32_combine(c, 0, 5));
}

static const msr_test_t tests[] = {
    {"check_value", test_check_value, 10},
    {"lengths_and_alignments", test_lengths_and_alignments, 10},
    {"tables_forced", test_tables_forced, 10},
    {"large_and_split", test_large_and_split, 30},
    {"large_tables_forced", test_large_tables_forced, 30},
    {"combine", test_combine, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
