/* The checkpoint payload: round trips, and what happens to damaged or
 * inconsistent bytes. (The files, their atomicity and completeness are
 * libmsrun's, tested with it; train_gpt's use of them is tested end to end
 * in train_gpt_cli.sh and train_gpt_restart.sh.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "parallel/ckpt.h"
#include "model/rng.h"
#include "tests/runner.h"

enum { NP = 1001 };

typedef struct state {
    float params[NP], m[NP], v[NP];
} state_t;

static void fill(state_t *s, uint64_t seed)
{
    for (int i = 0; i < NP; i++) {
        s->params[i] = (float)msr_rng_normal(seed, 0, i);
        s->m[i] = (float)msr_rng_normal(seed, 1, i);
        s->v[i] = (float)msr_rng_normal(seed, 2, i);
    }
}

static msr_tckpt_header_t header(uint32_t rank, uint32_t world)
{
    msr_tckpt_header_t h = {
        .step = 7,
        .adam_t = 7,
        .data_seed = 99,
        .data_position = 7 * 24,
        .num_params = NP,
        .rank = rank,
        .world = world,
        .zero = 2,
        .meta = "layers 2 channels 16; seed 99",
    };
    return h;
}

/* Three ranges cut out of a state, as a ZeRO rank's pieces of three units. */
static void three_ranges(const state_t *s, msr_tckpt_range_t r[3])
{
    static const uint64_t lo[3] = {0, 400, 1000}, n[3] = {17, 333, 1};
    for (int k = 0; k < 3; k++)
        r[k] = (msr_tckpt_range_t){lo[k], n[k], s->params + lo[k], s->m + lo[k], s->v + lo[k]};
}

static void test_round_trip(void)
{
    state_t s;
    fill(&s, 1);
    msr_tckpt_range_t r[3];
    three_ranges(&s, r);
    msr_tckpt_header_t h = header(1, 4);
    void *buf;
    size_t len;
    MSR_CHECK_OK(msr_tckpt_encode(&h, r, 3, &buf, &len));
    msr_tckpt_header_t g;
    msr_tckpt_range_t *got;
    uint32_t n;
    MSR_CHECK_OK(msr_tckpt_decode(buf, len, "test", &g, &got, &n));
    MSR_CHECK_EQ(n, 3);
    MSR_CHECK_EQ(g.step, 7);
    MSR_CHECK_EQ(g.adam_t, 7);
    MSR_CHECK_EQ(g.data_seed, 99);
    MSR_CHECK_EQ(g.data_position, 7 * 24);
    MSR_CHECK_EQ(g.num_params, NP);
    MSR_CHECK_EQ(g.rank, 1);
    MSR_CHECK_EQ(g.world, 4);
    MSR_CHECK_EQ(g.zero, 2);
    MSR_CHECK_STR(g.meta, h.meta);
    for (int k = 0; k < 3; k++) {
        MSR_CHECK_EQ(got[k].lo, r[k].lo);
        MSR_CHECK_EQ(got[k].n, r[k].n);
        size_t bytes = r[k].n * sizeof(float);
        MSR_CHECK(memcmp(got[k].params, r[k].params, bytes) == 0);
        MSR_CHECK(memcmp(got[k].m, r[k].m, bytes) == 0);
        MSR_CHECK(memcmp(got[k].v, r[k].v, bytes) == 0);
        MSR_CHECK(((uintptr_t)got[k].params & 3) == 0);
    }
    msr_free(got);
    /* an owner of nothing saves a header alone */
    void *empty;
    size_t elen;
    MSR_CHECK_OK(msr_tckpt_encode(&h, NULL, 0, &empty, &elen));
    MSR_CHECK_OK(msr_tckpt_decode(empty, elen, "empty", &g, &got, &n));
    MSR_CHECK_EQ(n, 0);
    MSR_CHECK(elen < len);
    msr_free(got);
    msr_free(empty);
    msr_free(buf);
}

/* Every truncation and a damaged magic, version or range table is
 * refused (libmsrun's CRC catches flipped bits in the floats). */
static void test_damage_refused(void)
{
    state_t s;
    fill(&s, 2);
    msr_tckpt_range_t r[3];
    three_ranges(&s, r);
    msr_tckpt_header_t h = header(0, 1), g;
    void *buf;
    size_t len;
    MSR_CHECK_OK(msr_tckpt_encode(&h, r, 3, &buf, &len));
    msr_tckpt_range_t *got = NULL;
    uint32_t n;
    unsigned char *b = msr_malloc(len);
    MSR_CHECK(b != NULL);
    for (size_t cut = 0; cut < len; cut += cut < 200 ? 1 : 97) {
        memcpy(b, buf, cut);
        MSR_CHECK_STATUS(msr_tckpt_decode(b, cut, "cut", &g, &got, &n), MSR_ERR_CORRUPT);
    }
    /* magic, version, header length, rank (>= world), ranges count, meta length */
    static const size_t at[] = {0, 8, 12, 56, 68, 72};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
        memcpy(b, buf, len);
        b[at[k]] ^= 0x40;
        MSR_CHECK_STATUS(msr_tckpt_decode(b, len, "flip", &g, &got, &n), MSR_ERR_CORRUPT);
    }
    /* ranges that overlap: range 1 (400, 333) moved to start inside range 0 (0, 17) */
    uint32_t hl;
    memcpy(&hl, (unsigned char *)buf + 12, 4);
    memcpy(b, buf, len);
    uint64_t lo1 = 10;
    memcpy(b + hl - 3 * 16 + 16, &lo1, 8);
    MSR_CHECK_STATUS(msr_tckpt_decode(b, len, "overlap", &g, &got, &n), MSR_ERR_CORRUPT);
    MSR_CHECK(got == NULL);
    msr_free(b);
    msr_free(buf);
}

static void test_bad_shards_refused(void)
{
    state_t s;
    fill(&s, 3);
    msr_tckpt_range_t r[3];
    three_ranges(&s, r);
    void *buf = NULL;
    size_t len;
    msr_tckpt_header_t h = header(4, 4); /* rank >= world */
    MSR_CHECK_STATUS(msr_tckpt_encode(&h, r, 3, &buf, &len), MSR_ERR_INVALID_ARG);
    h = header(0, 4);
    msr_tckpt_range_t swapped[2] = {r[1], r[0]};
    MSR_CHECK_STATUS(msr_tckpt_encode(&h, swapped, 2, &buf, &len), MSR_ERR_INVALID_ARG);
    msr_tckpt_range_t past = {NP - 1, 2, s.params, s.m, s.v};
    MSR_CHECK_STATUS(msr_tckpt_encode(&h, &past, 1, &buf, &len), MSR_ERR_INVALID_ARG);
    char meta[MSR_TCKPT_META_MAX + 1];
    memset(meta, 'x', sizeof meta - 1);
    meta[sizeof meta - 1] = '\0';
    h.meta = meta;
    MSR_CHECK_STATUS(msr_tckpt_encode(&h, r, 3, &buf, &len), MSR_ERR_INVALID_ARG);
    MSR_CHECK(buf == NULL);
}

/* Every piece checks out; a damaged float, table entry or header field
 * fails the check of the pieces it touches (a partial reader's only
 * defence: it never reads the whole payload's CRC). */
static void test_piece_crcs(void)
{
    state_t s;
    fill(&s, 5);
    msr_tckpt_range_t r[3];
    three_ranges(&s, r);
    msr_tckpt_header_t h = header(1, 4), g;
    void *buf;
    size_t len;
    MSR_CHECK_OK(msr_tckpt_encode(&h, r, 3, &buf, &len));
    msr_tckpt_range_t *got = NULL;
    uint32_t n = 0;
    MSR_CHECK_OK(msr_tckpt_decode(buf, len, "test", &g, &got, &n));
    MSR_CHECK_EQ(g.version, 4u);
    for (uint32_t k = 0; k < n; k++)
        MSR_CHECK(msr_tckpt_piece_ok(&g, &got[k]));
    unsigned char *b = buf;
    b[got[1].offset + 5] ^= 0x10; /* a float of piece 1 */
    MSR_CHECK(msr_tckpt_piece_ok(&g, &got[0]) && !msr_tckpt_piece_ok(&g, &got[1]) &&
              msr_tckpt_piece_ok(&g, &got[2]));
    b[got[1].offset + 5] ^= 0x10;
    msr_free(got);
    size_t hl = 0;
    MSR_CHECK_OK(msr_tckpt_head_len(buf, len, &hl));
    b[hl - 3 * 16 + 16] ^= 0x01; /* piece 1's lo, still in order */
    MSR_CHECK_OK(msr_tckpt_decode(buf, len, "test", &g, &got, &n));
    MSR_CHECK(msr_tckpt_piece_ok(&g, &got[0]) && !msr_tckpt_piece_ok(&g, &got[1]));
    b[hl - 3 * 16 + 16] ^= 0x01;
    msr_free(got);
    b[16 + 8] ^= 0x01; /* AdamW's t */
    MSR_CHECK_OK(msr_tckpt_decode(buf, len, "test", &g, &got, &n));
    for (uint32_t k = 0; k < n; k++)
        MSR_CHECK(!msr_tckpt_piece_ok(&g, &got[k]));
    b[16 + 8] ^= 0x01;
    msr_free(got);
    /* the header and table alone: the same pieces, no data pointers */
    msr_tckpt_range_t *head = NULL;
    MSR_CHECK_OK(msr_tckpt_decode(buf, len, "test", &g, &got, &n));
    MSR_CHECK_OK(msr_tckpt_decode_head(buf, hl, len, "test", &g, &head, &n));
    for (uint32_t k = 0; k < n; k++)
        MSR_CHECK(head[k].lo == got[k].lo && head[k].n == got[k].n &&
                  head[k].offset == got[k].offset && head[k].crc == got[k].crc &&
                  head[k].params == NULL);
    MSR_CHECK_STATUS(msr_tckpt_decode_head(buf, hl - 1, len, "test", &g, &head, &n),
                     MSR_ERR_CORRUPT);
    msr_free(head);
    msr_free(got);
    msr_free(buf);
}

/* The chunk table (version 4): a piece of 2,500 elements has 3 chunks an
 * array (1024, 1024, 452), their crcs after every piece's floats, in
 * the order params, m, v, each msr_crc32(0, its chunk); together they
 * combine into the piece's crc, and any run of them into its bytes'.
 * A damaged chunk crc fails the piece and the combined check, a damaged
 * float the piece but not the combined check (the chunk's own crc finds
 * it). A version 3 payload (the same without the table) still decodes
 * and checks, without a table. */
static void test_chunk_table(void)
{
    enum { N = 2500, K = 3 };
    float *f = msr_malloc(3 * N * sizeof *f);
    MSR_CHECK(f != NULL);
    for (size_t i = 0; i < 3 * N; i++)
        f[i] = (float)i * 0.25f - 7.0f;
    msr_tckpt_header_t h = header(0, 1), g;
    h.num_params = 2 * N;
    msr_tckpt_range_t r[2] = {{0, 5, f, f + N, f + 2 * N}, {N, N, f, f + N, f + 2 * N}};
    void *buf;
    size_t len, hl = 0;
    msr_tckpt_range_t *got = NULL;
    uint32_t np = 0;
    MSR_CHECK_OK(msr_tckpt_encode(&h, r, 2, &buf, &len));
    MSR_CHECK_OK(msr_tckpt_head_len(buf, len, &hl));
    MSR_CHECK_EQ(len, hl + 12 * (5 + N) + 12 * (1 + K));
    MSR_CHECK_OK(msr_tckpt_decode(buf, len, "test", &g, &got, &np));
    MSR_CHECK_EQ(np, 2u);
    MSR_CHECK_EQ(msr_tckpt_chunks(N), (uint32_t)K);
    MSR_CHECK_EQ(got[0].chunks_offset, hl + 12 * (5 + N));
    MSR_CHECK_EQ(got[1].chunks_offset, hl + 12 * (5 + N) + 12);
    unsigned char *b = buf;
    MSR_CHECK(got[1].chunks == b + got[1].chunks_offset);
    const float *arr[3] = {f, f + N, f + 2 * N};
    for (int a = 0; a < 3; a++)
        for (uint32_t c = 0; c < K; c++) {
            uint32_t want = msr_crc32(0, arr[a] + c * 1024,
                                      (c + 1 < K ? 1024 : N - 2 * 1024) * sizeof(float)),
                     x;
            memcpy(&x, got[1].chunks + 4 * (a * K + c), 4);
            MSR_CHECK_EQ(x, want);
        }
    /* runs of chunks: the bytes' crc */
    MSR_CHECK_EQ(msr_tckpt_chunks_crc(got[1].chunks, N, 0, K), msr_crc32(0, f, N * sizeof(float)));
    MSR_CHECK_EQ(msr_tckpt_chunks_crc(got[1].chunks + 4 * K, N, 1, 3),
                 msr_crc32(0, f + N + 1024, (N - 1024) * sizeof(float)));
    MSR_CHECK_EQ(msr_tckpt_chunks_crc(got[1].chunks, N, 1, 1), 0u);
    /* a run from the parameters' last chunk into m's first: the bytes' */
    MSR_CHECK_EQ(msr_tckpt_chunks_crc(got[1].chunks, N, K - 1, K + 1),
                 msr_crc32(0, (const unsigned char *)buf + got[1].offset + 4 * 2048,
                           (N - 2048 + 1024) * sizeof(float)));
    for (uint32_t k = 0; k < np; k++)
        MSR_CHECK(msr_tckpt_piece_ok(&g, &got[k]) &&
                  msr_tckpt_chunks_ok(&g, &got[k], got[k].chunks));
    /* a chunk crc damaged: the last one of v */
    b[got[1].chunks_offset + 4 * (3 * K - 1)] ^= 0x04;
    MSR_CHECK(!msr_tckpt_piece_ok(&g, &got[1]) && !msr_tckpt_chunks_ok(&g, &got[1], got[1].chunks));
    MSR_CHECK(msr_tckpt_piece_ok(&g, &got[0]));
    b[got[1].chunks_offset + 4 * (3 * K - 1)] ^= 0x04;
    /* a float damaged: its chunk's crc no longer matches it */
    b[got[1].offset + 4 * (N + 1500)] ^= 0x01; /* m, chunk 1 */
    MSR_CHECK(!msr_tckpt_piece_ok(&g, &got[1]) && msr_tckpt_chunks_ok(&g, &got[1], got[1].chunks));
    uint32_t x;
    memcpy(&x, got[1].chunks + 4 * (K + 1), 4);
    MSR_CHECK(x !=
              msr_crc32(0, (const float *)(b + got[1].offset) + N + 1024, 1024 * sizeof(float)));
    b[got[1].offset + 4 * (N + 1500)] ^= 0x01;
    msr_free(got);
    /* version 3: the magic and version, the table cut off */
    memcpy(b, "MSRTRN03", 8);
    uint32_t v3 = 3;
    memcpy(b + 8, &v3, 4);
    size_t len3 = hl + 12 * (5 + N);
    MSR_CHECK_OK(msr_tckpt_decode(buf, len3, "test", &g, &got, &np));
    MSR_CHECK(g.version == 3 && np == 2 && got[1].chunks == NULL && got[1].chunks_offset == 0);
    for (uint32_t k = 0; k < np; k++)
        MSR_CHECK(msr_tckpt_piece_ok(&g, &got[k]) && !msr_tckpt_chunks_ok(&g, &got[k], b));
    uint64_t total = 0;
    MSR_CHECK_OK(msr_tckpt_index_total(buf, hl, &total));
    MSR_CHECK_EQ(total, (uint64_t)len3);
    msr_free(got);
    /* version 3 with the table left on, version 4 without it: refused */
    MSR_CHECK_STATUS(msr_tckpt_decode(buf, len, "test", &g, &got, &np), MSR_ERR_CORRUPT);
    memcpy(b, "MSRTRN04", 8);
    uint32_t v4 = 4;
    memcpy(b + 8, &v4, 4);
    MSR_CHECK_STATUS(msr_tckpt_decode(buf, len3, "test", &g, &got, &np), MSR_ERR_CORRUPT);
    MSR_CHECK_STATUS(msr_tckpt_decode(buf, len - 1, "test", &g, &got, &np), MSR_ERR_CORRUPT);
    MSR_CHECK_OK(msr_tckpt_index_total(buf, hl, &total));
    MSR_CHECK_EQ(total, (uint64_t)len);
    msr_free(buf);
    msr_free(f);
}

/* A range of exactly MSR_TCKPT_PIECE_MAX elements is one piece, one more
 * element makes two. */
static void test_piece_bound(void)
{
    size_t big = (size_t)MSR_TCKPT_PIECE_MAX + 1;
    float *f = msr_calloc(big, sizeof *f);
    MSR_CHECK(f != NULL);
    for (size_t i = 0; i < big; i++)
        f[i] = (float)i;
    msr_tckpt_header_t h = header(0, 1), g;
    h.num_params = big;
    for (size_t n = big - 1; n <= big; n++) {
        msr_tckpt_range_t r = {0, n, f, f, f};
        void *buf;
        size_t len;
        msr_tckpt_range_t *got = NULL;
        uint32_t np = 0;
        MSR_CHECK_OK(msr_tckpt_encode(&h, &r, 1, &buf, &len));
        MSR_CHECK_OK(msr_tckpt_decode(buf, len, "test", &g, &got, &np));
        MSR_CHECK_EQ(np, n == big ? 2u : 1u);
        MSR_CHECK(got[0].n == MSR_TCKPT_PIECE_MAX && got[0].params[7] == 7.0f);
        /* whole chunks, and one chunk of one element an array after */
        MSR_CHECK_EQ(len, (size_t)(got[0].offset + 12 * n + 12 * msr_tckpt_chunks(n)));
        MSR_CHECK_EQ(msr_tckpt_chunks(n),
                     n == big ? MSR_TCKPT_PIECE_MAX / 1024 + 1 : MSR_TCKPT_PIECE_MAX / 1024);
        if (np == 2)
            MSR_CHECK(got[1].lo == MSR_TCKPT_PIECE_MAX && got[1].n == 1 &&
                      got[1].params[0] == (float)MSR_TCKPT_PIECE_MAX);
        for (uint32_t k = 0; k < np; k++)
            MSR_CHECK(msr_tckpt_piece_ok(&g, &got[k]));
        msr_free(got);
        msr_free(buf);
    }
    msr_free(f);
}

/* A version 2 payload (MSRTRN02: no layout fields, (u64 lo, u64 n)
 * ranges, no CRCs), as the previous release wrote it, still decodes. */
static void test_version2(void)
{
    unsigned char b[80 + 16 + 24] = {0}, *p = b;
    const uint64_t fixed64[5] = {7, 7, 1337, 84, 1000}, range[2] = {5, 2};
    const uint32_t fixed32[5] = {1, 4, 2, 1, 1}; /* rank, world, zero, ranges, meta "m" */
    const uint32_t head[2] = {2, 96};            /* version, header bytes */
    memcpy(p, "MSRTRN02", 8);
    memcpy(p + 8, head, 8);
    memcpy(p + 16, fixed64, 40);
    memcpy(p + 56, fixed32, 20);
    p[76] = 'm'; /* NUL and padding to 80 are zeros */
    memcpy(p + 80, range, 16);
    float f[6] = {1, 2, 3, 4, 5, 6};
    memcpy(p + 96, f, sizeof f);
    msr_tckpt_header_t g;
    msr_tckpt_range_t *got = NULL;
    uint32_t n = 0;
    MSR_CHECK_OK(msr_tckpt_decode(b, sizeof b, "v2", &g, &got, &n));
    MSR_CHECK(g.version == 2 && g.step == 7 && g.rank == 1 && g.world == 4 && g.tp == 0);
    MSR_CHECK_STR(g.meta, "m");
    MSR_CHECK(n == 1 && got[0].lo == 5 && got[0].n == 2 && got[0].params[1] == 2.0f &&
              got[0].m[0] == 3.0f && got[0].v[1] == 6.0f && msr_tckpt_piece_ok(&g, &got[0]));
    msr_free(got);
    MSR_CHECK_STATUS(msr_tckpt_decode(b, sizeof b - 4, "v2", &g, &got, &n), MSR_ERR_CORRUPT);
}

/* An unsealed payload (the copy a step makes with --ckpt-async) fails its
 * pieces' checks until msr_tckpt_seal, which makes it byte for byte the
 * sealed encoding; sealing twice changes nothing. */
static void test_seal(void)
{
    state_t s;
    fill(&s, 9);
    msr_tckpt_range_t r[3];
    three_ranges(&s, r);
    msr_tckpt_header_t h = header(2, 4), g;
    void *sealed, *open;
    size_t len, olen;
    msr_tckpt_range_t *got = NULL;
    uint32_t n = 0;
    MSR_CHECK_OK(msr_tckpt_encode(&h, r, 3, &sealed, &len));
    MSR_CHECK_OK(msr_tckpt_encode_unsealed(&h, r, 3, &open, &olen));
    MSR_CHECK(olen == len && memcmp(open, sealed, len) != 0);
    MSR_CHECK_OK(msr_tckpt_decode(open, olen, "open", &g, &got, &n));
    MSR_CHECK(n == 3 && !msr_tckpt_piece_ok(&g, &got[0]));
    msr_free(got);
    MSR_CHECK_OK(msr_tckpt_seal(open, olen));
    MSR_CHECK(memcmp(open, sealed, len) == 0);
    MSR_CHECK_OK(msr_tckpt_seal(open, olen));
    MSR_CHECK(memcmp(open, sealed, len) == 0);
    MSR_CHECK_STATUS(msr_tckpt_seal(open, olen - 1), MSR_ERR_CORRUPT);
    msr_free(open);
    msr_free(sealed);
}

/* Whose fault a failed read is (the exit status), and the length a
 * payload's header and range table alone imply (a file cut short). */
static void test_exit_status_index_total(void)
{
    MSR_CHECK(msr_tckpt_exit_status(MSR_OK) == 0);
    const msr_status_t input[] = {MSR_ERR_CORRUPT, MSR_ERR_CONFIG, MSR_ERR_NOT_FOUND};
    const msr_status_t machine[] = {MSR_ERR_IO,         MSR_ERR_NO_MEMORY, MSR_ERR_TIMEOUT,
                                    MSR_ERR_PEER_LOST,  MSR_ERR_SYSTEM,    MSR_ERR_INVALID_ARG,
                                    MSR_ERR_PERMISSION, MSR_ERR_OVERFLOW};
    for (size_t k = 0; k < sizeof input / sizeof *input; k++)
        MSR_CHECK(msr_tckpt_exit_status(input[k]) == 2);
    for (size_t k = 0; k < sizeof machine / sizeof *machine; k++)
        MSR_CHECK(msr_tckpt_exit_status(machine[k]) == 1);
    state_t s;
    fill(&s, 9);
    msr_tckpt_range_t r[3];
    three_ranges(&s, r);
    msr_tckpt_header_t h = header(2, 4);
    void *buf;
    size_t len, hl = 0;
    uint64_t total = 0;
    MSR_CHECK_OK(msr_tckpt_encode(&h, r, 3, &buf, &len));
    MSR_CHECK_OK(msr_tckpt_head_len(buf, len, &hl));
    MSR_CHECK_OK(msr_tckpt_index_total(buf, hl, &total));
    MSR_CHECK(total == len); /* the bytes after hl are not needed */
    MSR_CHECK_STATUS(msr_tckpt_index_total(buf, hl - 8, &total), MSR_ERR_CORRUPT);
    MSR_CHECK_STATUS(msr_tckpt_index_total(buf, 20, &total), MSR_ERR_CORRUPT);
    msr_free(buf);
}

static const msr_test_t tests[] = {
    {"seal", test_seal, 20},
    {"exit_status_index_total", test_exit_status_index_total, 20},
    {"version2", test_version2, 20},
    {"piece_crcs", test_piece_crcs, 20},
    {"piece_bound", test_piece_bound, 20},
    {"chunk_table", test_chunk_table, 20},
    {"round_trip", test_round_trip, 20},
    {"damage_refused", test_damage_refused, 20},
    {"bad_shards_refused", test_bad_shards_refused, 20},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
