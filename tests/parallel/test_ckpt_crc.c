/* The pieces' CRCs are the ones parallel/ckpt.h documents, computed here
 * with the byte-at-a-time CRC-32 (base/crc32.h) from the payload's bytes:
 * a faster CRC in the writer must not change the format (programs/ckpt
 * and the Python test reader check the same values). Pieces at exactly
 * MSR_TCKPT_PIECE_MAX elements and one past it (cut in two), sealed at
 * encode time and by msr_tckpt_seal. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "parallel/ckpt.h"
#include "tests/runner.h"

/* The header's fixed part of a version 3 payload (ckpt.h): magic, 2 x u32,
 * 5 x u64, 5 x u32, the layout's 6 x u32. */
#define FIXED_V3 (8 + 2 * 4 + 5 * 8 + 5 * 4 + 6 * 4)

/* Piece r's CRC as ckpt.h says: the header's fields from step to sp, then
 * its (u64 lo, u32 n), then its floats, all as the payload holds them. */
static uint32_t reference_crc(const unsigned char *payload, const msr_tckpt_range_t *r)
{
    uint64_t lo = r->lo;
    uint32_t n = (uint32_t)r->n;
    uint32_t crc = msr_crc32(0, payload + 16, FIXED_V3 - 16);
    crc = msr_crc32(crc, &lo, sizeof lo);
    crc = msr_crc32(crc, &n, sizeof n);
    return msr_crc32(crc, payload + r->offset, 3 * (size_t)r->n * sizeof(float));
}

/* Encodes one range of n elements (sealed, or unsealed then sealed) and
 * checks that it holds `pieces` pieces with the documented CRCs. */
static void check_range(uint64_t n, uint32_t pieces, int seal_later)
{
    float *f = msr_malloc(3 * (size_t)n * sizeof *f);
    MSR_CHECK(f != NULL);
    for (size_t i = 0; i < 3 * (size_t)n; i++)
        f[i] = (float)(i % 1009) * 0.25f - 7.0f;
    msr_tckpt_header_t h = {.step = 9,
                            .adam_t = 9,
                            .data_seed = 5,
                            .data_position = 77,
                            .num_params = n + 3,
                            .rank = 1,
                            .world = 2,
                            .zero = 3,
                            .meta = "crc test",
                            .tp = 1,
                            .pp = 2,
                            .cp = 1,
                            .ep = 1,
                            .chunks = 1,
                            .sp = 0};
    msr_tckpt_range_t in = {3, n, f, f + n, f + 2 * n};
    void *buf;
    size_t len;
    MSR_CHECK((seal_later ? msr_tckpt_encode_unsealed : msr_tckpt_encode)(&h, &in, 1, &buf, &len) ==
              MSR_OK);
    if (seal_later)
        MSR_CHECK(msr_tckpt_seal(buf, len) == MSR_OK);
    msr_tckpt_header_t d;
    msr_tckpt_range_t *r;
    uint32_t got;
    MSR_CHECK(msr_tckpt_decode(buf, len, "test", &d, &r, &got) == MSR_OK);
    MSR_CHECK_MSG(got == pieces, "%llu elements: %u pieces, not %u", (unsigned long long)n, got,
                  pieces);
    for (uint32_t k = 0; k < got; k++) {
        MSR_CHECK_MSG(r[k].crc == reference_crc(buf, &r[k]), "piece %u of %u", k, got);
        MSR_CHECK(msr_tckpt_piece_ok(&d, &r[k]));
    }
    ((unsigned char *)buf)[r[got - 1].offset + 5] ^= 0x10; /* a damaged float is seen */
    MSR_CHECK(!msr_tckpt_piece_ok(&d, &r[got - 1]));
    msr_free(r);
    msr_free(buf);
    msr_free(f);
}

static void test_small_pieces(void)
{
    for (uint64_t n = 1; n <= 9; n++) /* every tail of the 8-byte steps */
        check_range(n, 1, 0);
}

static void test_piece_at_bound(void)
{
    check_range(MSR_TCKPT_PIECE_MAX, 1, 0);
}

static void test_piece_past_bound(void)
{
    check_range((uint64_t)MSR_TCKPT_PIECE_MAX + 1, 2, 0);
}

static void test_sealed_later(void)
{
    check_range(5, 1, 1);
    check_range((uint64_t)MSR_TCKPT_PIECE_MAX + 1, 2, 1);
}

static const msr_test_t tests[] = {
    {"small_pieces", test_small_pieces, 10},
    {"piece_at_bound", test_piece_at_bound, 30},
    {"piece_past_bound", test_piece_past_bound, 30},
    {"sealed_later", test_sealed_later, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
