/* base/crc32.h's slicing-by-8 CRC-32 against the definition (a bit at a
 * time, written here), for every length, alignment and split of the input. */
#include <stdint.h>
#include <stdlib.h>

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

/* Every length 0..80 (the 8-byte steps, and 0..7 bytes left over) from
 * every start 0..7 (aligned or not), continued from 0 and from another CRC. */
static void test_lengths_and_alignments(void)
{
    unsigned char b[96];
    fill(b, sizeof b);
    for (size_t at = 0; at < 8; at++)
        for (size_t n = 0; n + at <= 88; n++) {
            MSR_CHECK_MSG(msr_crc32(0, b + at, n) == ref_crc32(0, b + at, n),
                          "start %zu, %zu bytes", at, n);
            MSR_CHECK(msr_crc32(0xdeadbeefu, b + at, n) == ref_crc32(0xdeadbeefu, b + at, n));
        }
}

/* A buffer of a checkpoint piece's size and one byte more, whole and
 * split anywhere (a piece's CRC continues over its fields and floats). */
static void test_large_and_split(void)
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
    b[n / 2] ^= 1; /* one bit flipped is seen */
    MSR_CHECK(msr_crc32(0, b, n) != whole);
    free(b);
}

static const msr_test_t tests[] = {
    {"check_value", test_check_value, 10},
    {"lengths_and_alignments", test_lengths_and_alignments, 10},
    {"large_and_split", test_large_and_split, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
