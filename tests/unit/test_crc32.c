/* base/crc32.h's CRC-32 against the definition (a bit at a time, written
 * here), for every length, alignment and split of the input, on the path
 * the CPU takes (folded where it has PCLMULQDQ) and on the tables with
 * "pclmul" masked off (each test runs in its own process, so the mask set
 * before the first call holds for the whole test). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "base/crc32.h"
#include "tests/runner.h"

/* The next of a fixed pseudo-random sequence (xorshift32, x never 0). */
static uint32_t next_rand(uint32_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

/* Bytes that are not all alike: a fixed pseudo-random sequence. */
static void fill_seeded(unsigned char *b, size_t n, uint32_t x)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)next_rand(&x);
}

static void fill(unsigned char *b, size_t n)
{
    fill_seeded(b, n, 2463534242u);
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

/* Every length 0..1024 (the folds of 64 and 16 bytes and what is left,
 * the 8-byte steps and 0..7 bytes after them) from every start 0..63
 * (every alignment to a cache line), continued from 0 and from another
 * CRC. The reference for a start grows a byte at a time, so each length
 * costs one byte of it. */
static void check_lengths(void)
{
    enum { MAX_LEN = 1024, MAX_AT = 63 };
    static unsigned char b[MAX_LEN + MAX_AT + 1];
    fill(b, sizeof b);
    for (size_t at = 0; at <= MAX_AT; at++) {
        uint32_t ref0 = 0, ref1 = 0xdeadbeefu; /* over the first n bytes from at */
        for (size_t n = 0; n <= MAX_LEN; n++) {
            MSR_CHECK_MSG(msr_crc32(0, b + at, n) == ref0, "start %zu, %zu bytes", at, n);
            MSR_CHECK_MSG(msr_crc32(0xdeadbeefu, b + at, n) == ref1, "start %zu, %zu bytes", at, n);
            ref0 = ref_crc32(ref0, b + at + n, 1);
            ref1 = ref_crc32(ref1, b + at + n, 1);
        }
    }
}

/* A CRC continued over two parts equals one pass, at every split point of
 * every length 0..300 and of 1024 bytes (so both parts fold, one does, or
 * neither), and over three parts at every pair of cuts of 200 bytes. */
static void check_splits(void)
{
    static unsigned char b[1024];
    fill(b, sizeof b);
    for (size_t n = 0; n <= 300; n++) {
        uint32_t whole = ref_crc32(0, b, n);
        for (size_t cut = 0; cut <= n; cut++)
            MSR_CHECK_MSG(msr_crc32(msr_crc32(0, b, cut), b + cut, n - cut) == whole,
                          "%zu bytes split at %zu", n, cut);
    }
    uint32_t whole = ref_crc32(0, b, sizeof b);
    for (size_t cut = 0; cut <= sizeof b; cut++)
        MSR_CHECK_MSG(msr_crc32(msr_crc32(0, b, cut), b + cut, sizeof b - cut) == whole,
                      "1024 bytes split at %zu", cut);
    whole = ref_crc32(0, b, 200);
    for (size_t i = 0; i <= 200; i++)
        for (size_t j = i; j <= 200; j++) {
            uint32_t c = msr_crc32(msr_crc32(msr_crc32(0, b, i), b + i, j - i), b + j, 200 - j);
            MSR_CHECK_MSG(c == whole, "200 bytes split at %zu and %zu", i, j);
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
    check_splits();
}

/* "pclmul" masked off: the tables, the same values. */
static void test_tables_forced(void)
{
    setenv("MSRUN_CPU_DISABLE", "pclmul", 1);
    MSR_CHECK_EQ(msr_crc32_folded(), 0);
    MSR_CHECK(msr_crc32(0, "123456789", 9) == 0xcbf43926u);
    check_lengths();
    check_splits();
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

/* Buffers of 1..8 MiB of random bytes, random lengths and starts (fixed
 * seeds: a failure repeats), each against the definition. */
static void check_random_large(void)
{
    size_t max = (size_t)8 << 20;
    unsigned char *b = malloc(max + 64);
    MSR_CHECK(b != NULL);
    uint32_t r = 0x9e3779b9u;
    for (int k = 0; k < 4; k++) {
        size_t n = ((size_t)1 << 20) + next_rand(&r) % (max - ((size_t)1 << 20) + 1);
        size_t at = next_rand(&r) % 64;
        fill_seeded(b, max + 64, next_rand(&r));
        MSR_CHECK_MSG(msr_crc32(0, b + at, n) == ref_crc32(0, b + at, n), "%zu bytes from %zu", n,
                      at);
    }
    free(b);
}

static void test_large_and_split(void)
{
    check_large();
    check_random_large();
}

static void test_large_tables_forced(void)
{
    setenv("MSRUN_CPU_DISABLE", "pclmul", 1);
    MSR_CHECK_EQ(msr_crc32_folded(), 0);
    check_large();
    check_random_large();
}

/* "pclmul" is detected as the kernel sees it (PCLMULQDQ and SSE4.1), is
 * a name MSRUN_CPU_DISABLE takes, and the cpu line says when it is
 * masked off. */
static void test_pclmul_feature(void)
{
    int clmul = msr_test_cpuinfo_has("pclmulqdq"), sse41 = msr_test_cpuinfo_has("sse4_1");
    int has = (msr_cpu_features_detect() & MSR_CPU_PCLMUL) != 0;
    if (clmul < 0)
        printf("no flags in /proc/cpuinfo: detection not cross-checked\n");
    else
        MSR_CHECK_MSG(has == (clmul && sse41), "pclmul detected %d, cpuinfo %d %d", has, clmul,
                      sse41);
    unsigned m = 0;
    MSR_CHECK_OK(msr_cpu_features_parse("pclmul", &m));
    MSR_CHECK_EQ(m, MSR_CPU_PCLMUL);
    MSR_CHECK_OK(msr_cpu_features_parse("avx2,pclmul", &m));
    MSR_CHECK_EQ(m, MSR_CPU_AVX2 | MSR_CPU_PCLMUL);
    MSR_CHECK_OK(msr_cpu_features_parse("all", &m));
    MSR_CHECK(m & MSR_CPU_PCLMUL);
    MSR_CHECK_STATUS(msr_cpu_features_parse("pclmulqdq", &m), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strcmp(msr_cpu_feature_name(MSR_CPU_PCLMUL), "pclmul") == 0);
    setenv("MSRUN_CPU_DISABLE", "pclmul", 1);
    char line[256];
    msr_cpu_features_describe(line, sizeof line);
    printf("%s\n", line);
    MSR_CHECK_MSG(strstr(line, has ? "masked off: pclmul" : "absent: ") != NULL, "%s", line);
    MSR_CHECK_EQ(msr_crc32_folded(), 0);
}

/* A MSRUN_CPU_DISABLE it cannot read takes no vector path: the tables. */
static void test_bad_mask_tables(void)
{
    setenv("MSRUN_CPU_DISABLE", "pclmul,bogus", 1);
    MSR_CHECK_EQ(msr_crc32_folded(), 0);
    MSR_CHECK(msr_crc32(0, "123456789", 9) == 0xcbf43926u);
    static unsigned char b[256];
    fill(b, sizeof b);
    MSR_CHECK(msr_crc32(0, b, sizeof b) == ref_crc32(0, b, sizeof b));
}

/* msr_crc32_combine against the CRC of the joined bytes: every cut of
 * 300 bytes (0 and every length included), cuts of 1 MiB (the second part
 * of 4096 bytes, the length it moves by tables, and one byte either side
 * among them), a seeded CRC made seedless, and lengths past 4 GiB by the
 * rule's own algebra. */
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
    const size_t cuts[] = {1, 4096, 65536 + 3, (size_t)1 << 19, n - 4095, n - 4096, n - 4097};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++)
        MSR_CHECK(msr_crc32_combine(msr_crc32(0, m, cuts[k]),
                                    msr_crc32(0, m + cuts[k], n - cuts[k]), n - cuts[k]) == whole);
    /* 4096 bytes, moved by tables: from every one-bit state (the move is
     * linear, so from every state) as two moves of 2048 bit by bit */
    for (int bit = 0; bit < 34; bit++) {
        uint32_t a = bit < 32 ? 1u << bit : bit == 32 ? 0xffffffffu : 0x9e3779b9u;
        MSR_CHECK_MSG(msr_crc32_combine(a, 0, 4096) ==
                          msr_crc32_combine(msr_crc32_combine(a, 0, 2048), 0, 2048),
                      "state %08x", a);
    }
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
    {"pclmul_feature", test_pclmul_feature, 10},
    {"bad_mask_tables", test_bad_mask_tables, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
