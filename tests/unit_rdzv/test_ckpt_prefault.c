/* A checkpoint read maps its destination's pages before filling them
 * (msr_prefault): only the pages the read writes into, their
 * contents kept, and a read into fresh memory at a misaligned address
 * lands whole with its neighbours untouched; a reader past the page cache
 * (O_DIRECT, through its staging buffer) reads any part exactly, and
 * with a read ahead in flight pieces in order; its staging buffers are
 * aligned to huge pages and advised to be of them, and kept when the
 * reader is pointed at another file; it counts the bytes it reads. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "msrun/msrun.h"
#include "rendezvous/checkpoint_impl.h"
#include "tests/runner.h"

static char dir[64]; /* made by main, removed by it whatever the tests did */

/* n fresh pages of anonymous memory, none of them mapped in yet. */
static unsigned char *fresh_pages(size_t n)
{
    void *p = mmap(NULL, n * (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    MSR_CHECK(p != MAP_FAILED);
    return p;
}

/* Which of n pages at p are mapped in, as a string of 0 and 1. */
static const char *resident(const unsigned char *p, size_t n)
{
    static char out[16];
    unsigned char vec[16];
    MSR_CHECK(n < sizeof out && mincore((void *)p, n * (size_t)sysconf(_SC_PAGESIZE), vec) == 0);
    for (size_t i = 0; i < n; i++)
        out[i] = (char)('0' + (vec[i] & 1));
    out[n] = '\0';
    return out;
}

/* Whether this kernel populates memory on request (Linux 5.14): asked
 * of one aligned page of its own, so that a refusal of a range by
 * msr_prefault is its own fault. */
static int populate_supported(void)
{
#ifdef MADV_POPULATE_WRITE
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *p = fresh_pages(1);
    int ok = madvise(p, pg, MADV_POPULATE_WRITE) == 0;
    munmap(p, pg);
    return ok;
#else
    return 0;
#endif
}

/* Exactly the pages holding [p, p + len) are mapped in, each range at
 * its bounds: one byte either side of a page bound, a whole page from its
 * first byte, up to a page's last byte, nothing for no bytes. */
static void test_prefault_pages(void)
{
    const long pg = sysconf(_SC_PAGESIZE);
    static const struct {
        long at_pages, at_bytes, len_pages, len_bytes; /* at = pages * pg + bytes, len alike */
        const char *want;
    } cases[] = {
        {1, -1, 0, 2, "11000"},    /* page 0's last byte and page 1's first */
        {1, 0, 1, 0, "01000"},     /* page 1 whole, from its first byte */
        {1, 100, 2, -99, "01110"}, /* page 1 + 100 up to page 3's first byte */
        {2, 0, 0, 0, "00000"},     /* no bytes */
        {4, -1, 0, 1, "00010"},    /* page 3's last byte alone */
    };
    if (!populate_supported()) {
        printf("MADV_POPULATE_WRITE not supported here: residency not checked\n");
        return;
    }
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        unsigned char *p = fresh_pages(5);
        size_t at = (size_t)(cases[k].at_pages * pg + cases[k].at_bytes),
               len = (size_t)(cases[k].len_pages * pg + cases[k].len_bytes);
        if (len > 0) /* what a page holds already is kept */
            p[at + len / 2] = 0x5a;
        MSR_CHECK_MSG(msr_prefault(p + at, len) == 0, "case %zu: refused", k);
        MSR_CHECK_MSG(strcmp(resident(p, 5), cases[k].want) == 0,
                      "case %zu: pages %s mapped, want %s", k, resident(p, 5), cases[k].want);
        if (len > 0)
            MSR_CHECK_EQ(p[at + len / 2], 0x5a);
        munmap(p, 5 * (size_t)pg);
    }
}

/* A state of more than two read chunks, read through a reader into fresh
 * memory at an address 3 bytes into a page (every chunk's start then
 * misaligned), lands whole, with its CRC, and the bytes either side of
 * it, written before, are kept. */
static void test_read_misaligned(void)
{
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = ((size_t)5 << 19) + 13;
    unsigned char *state = malloc(len);
    MSR_CHECK(state != NULL);
    for (size_t i = 0; i < len; i++)
        state[i] = (unsigned char)(i * 131 + (i >> 12));
    msr_ctx_t *ctx = NULL;
    unsetenv("MSR_AGENT");
    unsetenv("MSR_WORLD_SIZE");
    MSR_CHECK_OK(msr_init(&ctx));
    MSR_CHECK_OK(msr_ckpt_save(ctx, dir, 3, state, len, 0));
    size_t pages = (len + 3 + 1) / pg + 2;
    unsigned char *p = fresh_pages(pages), *dst = p + pg + 3;
    dst[-1] = 0xa5;
    dst[len] = 0x5a;
    msr_ckpt_reader_t *rd = NULL;
    uint64_t total = 0;
    uint32_t crc = 0;
    MSR_CHECK_OK(msr_ckpt_reader_open(ctx, dir, 3, 0, 1, &rd, &total));
    MSR_CHECK_EQ(total, (uint64_t)len);
    MSR_CHECK_OK(msr_ckpt_reader_read_crc(rd, 0, dst, len, &crc));
    MSR_CHECK(msr_ckpt_reader_checked(rd));
    MSR_CHECK(memcmp(dst, state, len) == 0);
    MSR_CHECK_EQ(dst[-1], 0xa5);
    MSR_CHECK_EQ(dst[len], 0x5a);
    MSR_CHECK_EQ(p[0], 0);
    msr_ckpt_reader_close(rd);
    msr_finalize(ctx);
    munmap(p, pages * pg);
    free(state);
}

/* Whether the filesystem under dir takes O_DIRECT (a reader then reads
 * past the page cache). */
static int dir_takes_direct(void)
{
    char path[96];
    snprintf(path, sizeof path, "%s/direct-probe", dir);
    int fd = open(path, O_CREAT | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
    unlink(path);
    return fd >= 0;
}

/* A reader past the page cache reads whole aligned blocks into its
 * staging buffer and copies out the range asked: parts of a state of more
 * than two staging buffers at every kind of bound (the first byte, a
 * block's last and the next one's first, across the staging buffer's end,
 * from a misaligned offset past two buffers, the last byte) land exactly,
 * their neighbours kept, each with its CRC; read whole in order, the state
 * matches its CRC, and a byte damaged at the staging buffer's bound or the
 * end is refused, naming the file. */
/* Reads parts of a state saved as step `step` through a reader, O_DIRECT
 * (direct) or through the page cache (!direct: the test has made the
 * O_DIRECT open fail), and checks the bytes, their CRCs and that damage
 * is refused naming the file. */
static void read_parts(int64_t step, int direct)
{
    const size_t blk = CKPT_DIRECT_ALIGN, stage = CKPT_DIRECT_STAGE;
    const size_t len = 2 * stage + 3 * blk + 13;
    unsigned char *state = malloc(len), *got = malloc(len + 2);
    MSR_CHECK(state != NULL && got != NULL);
    for (size_t i = 0; i < len; i++)
        state[i] = (unsigned char)(i * 151 + (i >> 11));
    msr_ctx_t *ctx = NULL;
    unsetenv("MSR_AGENT");
    unsetenv("MSR_WORLD_SIZE");
    MSR_CHECK_OK(msr_init(&ctx));
    MSR_CHECK_OK(msr_ckpt_save(ctx, dir, step, state, len, 0));
    /* [offset, offset + n) of the state; offsets count from the state's
     * start, the file's header (MSR_CKPT_HEADER_LEN bytes) before it */
    const size_t parts[][2] = {{0, 1},
                               {1, blk - MSR_CKPT_HEADER_LEN - 2},
                               {blk - MSR_CKPT_HEADER_LEN - 1, 2},
                               {stage - MSR_CKPT_HEADER_LEN - 5, 10},
                               {stage - MSR_CKPT_HEADER_LEN - 1, stage + 2},
                               {3, 2 * stage + 7},
                               {len - 1, 1},
                               {0, len},
                               /* one after the other (read ahead into the
                                * staging buffer), the second across its
                                * end, then back before it, then at the
                                * file's end (a short read ahead) */
                               {stage - MSR_CKPT_HEADER_LEN - 2500, 1000},
                               {stage - MSR_CKPT_HEADER_LEN - 1500, 1000},
                               {stage - MSR_CKPT_HEADER_LEN - 500, 1000},
                               {10, 5},
                               {15, 7},
                               {len - 3, 2},
                               {len - 1, 1}};
    msr_ckpt_reader_t *rd = NULL;
    uint64_t total = 0;
    MSR_CHECK_OK(msr_ckpt_reader_open(ctx, dir, step, 0, 0, &rd, &total));
    MSR_CHECK_EQ(total, (uint64_t)len);
    if (!direct || dir_takes_direct())
        MSR_CHECK_EQ(msr_ckpt_reader_direct(rd), direct);
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        size_t at = parts[k][0], n = parts[k][1];
        uint32_t crc = 0;
        memset(got, 0xa5, len + 2);
        MSR_CHECK_OK(msr_ckpt_reader_read_crc(rd, at, got + 1, n, &crc));
        MSR_CHECK(memcmp(got + 1, state + at, n) == 0);
        MSR_CHECK_EQ(got[0], 0xa5);
        MSR_CHECK_EQ(got[n + 1], 0xa5);
        MSR_CHECK_EQ(crc, msr_crc32(0, state + at, n));
    }
    /* past the state's end: refused */
    MSR_CHECK_EQ(msr_ckpt_reader_read(rd, len - 1, got, 2), MSR_ERR_CORRUPT);
    msr_ckpt_reader_close(rd);
    /* damaged at the staging buffer's bound (the file's byte stage) and
     * at the end: a whole read in order is refused, naming the file */
    char path[128], name[64];
    snprintf(path, sizeof path, "%s/step-%lld/rank-0.bin", dir, (long long)step);
    snprintf(name, sizeof name, "step-%lld/rank-0.bin does not match its CRC", (long long)step);
    const off_t bad[] = {(off_t)stage - 1, (off_t)stage, (off_t)(MSR_CKPT_HEADER_LEN + len - 1)};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        int fd = open(path, O_RDWR | O_CLOEXEC);
        unsigned char b;
        MSR_CHECK(fd >= 0);
        MSR_CHECK_EQ(pread(fd, &b, 1, bad[k]), 1);
        b ^= 0x10;
        MSR_CHECK_EQ(pwrite(fd, &b, 1, bad[k]), 1);
        MSR_CHECK_OK(msr_ckpt_reader_open(ctx, dir, step, 0, 1, &rd, &total));
        MSR_CHECK_EQ(msr_ckpt_reader_direct(rd), direct && dir_takes_direct());
        MSR_CHECK_EQ(msr_ckpt_reader_read(rd, 0, got, len), MSR_ERR_CORRUPT);
        MSR_CHECK(strstr(msr_last_error(), name) != NULL);
        msr_ckpt_reader_close(rd);
        b ^= 0x10;
        MSR_CHECK_EQ(pwrite(fd, &b, 1, bad[k]), 1);
        close(fd);
    }
    msr_finalize(ctx);
    free(got);
    free(state);
}

static void test_read_direct(void)
{
    read_parts(4, 1);
}

/* A load of pieces one after the other, past the page cache: the reader
 * keeps the next staging buffer's bytes in flight while the caller copies
 * out of the one before. Pieces of a state of five staging buffers and a
 * bit, read in order (odd sizes, so that pieces straddle every buffer's
 * bound and the read ahead ends short at the file's end), land exactly
 * and the whole state's CRC is checked; a read back to the start while a
 * read ahead is in flight, and reads in order on from there, land too;
 * and a file cut short after the reader opened it fails the read that
 * reaches the cut (MSR_ERR_CORRUPT naming the file), not a piece before. */
static void test_read_ahead(void)
{
    const size_t stage = CKPT_DIRECT_STAGE, len = 5 * stage + 1234, piece = stage / 3 + 7;
    unsigned char *state = malloc(len), *got = malloc(stage);
    MSR_CHECK(state != NULL && got != NULL);
    for (size_t i = 0; i < len; i++)
        state[i] = (unsigned char)(i * 37 + (i >> 13));
    msr_ctx_t *ctx = NULL;
    unsetenv("MSR_AGENT");
    unsetenv("MSR_WORLD_SIZE");
    MSR_CHECK_OK(msr_init(&ctx));
    MSR_CHECK_OK(msr_ckpt_save(ctx, dir, 6, state, len, 0));
    msr_ckpt_reader_t *rd = NULL;
    MSR_CHECK_OK(msr_ckpt_reader_open(ctx, dir, 6, 0, 1, &rd, NULL));
    if (!dir_takes_direct())
        printf("read_ahead: %s takes no O_DIRECT: read through the page cache\n", dir);
    for (size_t at = 0; at < len; at += piece) {
        size_t n = len - at < piece ? len - at : piece;
        uint32_t crc = 0;
        MSR_CHECK_OK(msr_ckpt_reader_read_crc(rd, at, got, n, &crc));
        MSR_CHECK(memcmp(got, state + at, n) == 0);
        MSR_CHECK_EQ(crc, msr_crc32(0, state + at, n));
        /* back to the start with the next buffer in flight, then on */
        if (at == piece * 4) {
            MSR_CHECK_OK(msr_ckpt_reader_read(rd, 3, got, 5));
            MSR_CHECK(memcmp(got, state + 3, 5) == 0);
            MSR_CHECK_OK(msr_ckpt_reader_read(rd, 8, got, stage));
            MSR_CHECK(memcmp(got, state + 8, stage) == 0);
        }
    }
    MSR_CHECK_EQ(msr_ckpt_reader_checked(rd), 1);
    msr_ckpt_reader_close(rd);
    /* cut at three and a half buffers of the file, the reader open */
    char path[128];
    snprintf(path, sizeof path, "%s/step-6/rank-0.bin", dir);
    const size_t cut = 3 * stage + stage / 2;
    MSR_CHECK_OK(msr_ckpt_reader_open(ctx, dir, 6, 0, 1, &rd, NULL));
    MSR_CHECK_OK(msr_ckpt_reader_read(rd, 0, got, piece));
    MSR_CHECK(truncate(path, (off_t)cut) == 0);
    size_t at = piece;
    msr_status_t st = MSR_OK;
    for (; at < len && st == MSR_OK; at += piece) {
        size_t n = len - at < piece ? len - at : piece;
        st = msr_ckpt_reader_read(rd, at, got, n);
        if (st == MSR_OK)
            MSR_CHECK(memcmp(got, state + at, n) == 0);
    }
    at -= piece; /* the read that failed */
    MSR_CHECK_EQ(st, MSR_ERR_CORRUPT);
    MSR_CHECK(strstr(msr_last_error(), "step-6/rank-0.bin ends early") != NULL);
    MSR_CHECK(at + piece > cut - MSR_CKPT_HEADER_LEN && at <= cut - MSR_CKPT_HEADER_LEN);
    msr_ckpt_reader_close(rd);
    msr_finalize(ctx);
    free(got);
    free(state);
}

/* A filesystem that refuses O_DIRECT: the reader's O_DIRECT open fails
 * (the test-only MSR_TEST_CKPT_NO_DIRECT, docs/testing.md) and it reads
 * the same parts through the page cache. */
static void test_read_fallback(void)
{
    MSR_CHECK(setenv("MSR_TEST_CKPT_NO_DIRECT", "1", 1) == 0);
    read_parts(5, 0);
    MSR_CHECK(unsetenv("MSR_TEST_CKPT_NO_DIRECT") == 0);
}

/* Whether the mapping that holds p is advised to be of huge pages (its
 * VmFlags in /proc/self/smaps list "hg"): 1 yes, 0 no, -1 not found. */
static int advised_huge(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0, found = -1;
    MSR_CHECK(f != NULL);
    while (found < 0 && fgets(line, sizeof line, f) != NULL) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ':') != NULL &&
            line[strspn(line, "0123456789abcdef")] == '-')
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && strncmp(line, "VmFlags:", 8) == 0)
            found = strstr(line, " hg") != NULL;
    }
    fclose(f);
    return found;
}

/* A reader past the page cache stages its reads in a buffer aligned to a
 * huge page and advised to be of huge pages (fewer pages for each read
 * to pin), and its read ahead swaps in one alike; what it reads is the
 * state, across the stage's bound and at its last byte. */
static void test_stage_huge(void)
{
    const size_t len = CKPT_DIRECT_STAGE * 2 + 100;
    unsigned char *state = malloc(len), *got = malloc(len);
    MSR_CHECK(state != NULL && got != NULL);
    for (size_t i = 0; i < len; i++)
        state[i] = (unsigned char)(i * 13 + (i >> 16));
    msr_ctx_t *ctx = NULL;
    unsetenv("MSR_AGENT");
    unsetenv("MSR_WORLD_SIZE");
    MSR_CHECK_OK(msr_init(&ctx));
    MSR_CHECK_OK(msr_ckpt_save(ctx, dir, 8, state, len, 0));
    msr_ckpt_reader_t *rd = NULL;
    MSR_CHECK_OK(msr_ckpt_reader_open(ctx, dir, 8, 0, 1, &rd, NULL));
    if (!msr_ckpt_reader_direct(rd)) {
        printf("no O_DIRECT under %s: no staging buffer to check\n", dir);
    } else {
        for (int k = 0; k < 3; k++) { /* the first stage, then the read ahead's in turn */
            size_t at = (size_t)k * CKPT_DIRECT_STAGE, n = k < 2 ? CKPT_DIRECT_STAGE : 100;
            MSR_CHECK_OK(msr_ckpt_reader_read(rd, at, got + at, n));
            const void *stage = msr_ckpt_reader_stage(rd);
            MSR_CHECK_MSG((uintptr_t)stage % CKPT_STAGE_ALIGN == 0, "read %d: stage at %p", k,
                          stage);
            MSR_CHECK_MSG(advised_huge(stage) == 1, "read %d: stage at %p not advised huge", k,
                          stage);
        }
        MSR_CHECK(msr_ckpt_reader_checked(rd));
        MSR_CHECK(memcmp(got, state, len) == 0);
    }
    msr_ckpt_reader_close(rd);
    msr_finalize(ctx);
    free(got);
    free(state);
}

/* Reads state (len bytes) through rd in pieces in order from its start,
 * each against state; the whole state's CRC then checked. */
static void read_in_order(msr_ckpt_reader_t *rd, const unsigned char *state, size_t len,
                          unsigned char *got, size_t piece)
{
    for (size_t at = 0; at < len; at += piece) {
        size_t n = len - at < piece ? len - at : piece;
        MSR_CHECK_OK(msr_ckpt_reader_read(rd, at, got, n));
        MSR_CHECK_MSG(memcmp(got, state + at, n) == 0, "bytes [%zu, %zu) differ", at, at + n);
    }
    MSR_CHECK_EQ(msr_ckpt_reader_checked(rd), 1);
}

/* A reader pointed at another rank's state (msr_ckpt_reader_reopen) with
 * a read ahead of the first in flight reads the second exactly (where
 * its staging buffer held the first's bytes too), its whole CRC checked,
 * through the same staging buffers; one pointed at a
 * state that is not there fails (MSR_ERR_NOT_FOUND) and still reads the
 * one it had; bad arguments are refused. */
static void test_reader_reopen(void)
{
    const size_t stage = CKPT_DIRECT_STAGE, alen = 2 * stage + 100, blen = 3 * stage + 7;
    const size_t piece = stage / 3 + 5;
    unsigned char *a = malloc(alen), *b = malloc(blen), *got = malloc(stage);
    MSR_CHECK(a != NULL && b != NULL && got != NULL);
    for (size_t i = 0; i < alen; i++)
        a[i] = (unsigned char)(i * 29 + (i >> 12));
    for (size_t i = 0; i < blen; i++)
        b[i] = (unsigned char)(i * 53 + 7 + (i >> 10));
    msr_ctx_t *ctx = NULL;
    unsetenv("MSR_AGENT");
    unsetenv("MSR_WORLD_SIZE");
    MSR_CHECK_OK(msr_init(&ctx));
    MSR_CHECK_OK(msr_ckpt_save(ctx, dir, 10, a, alen, 0));
    MSR_CHECK_OK(msr_ckpt_save(ctx, dir, 11, b, blen, 0));
    msr_ckpt_reader_t *rd = NULL;
    uint64_t total = 0;
    MSR_CHECK_OK(msr_ckpt_reader_open(ctx, dir, 10, 0, 1, &rd, &total));
    MSR_CHECK_EQ(total, (uint64_t)alen);
    /* two pieces in order: the second reads ahead, still in flight */
    MSR_CHECK_OK(msr_ckpt_reader_read(rd, 0, got, piece));
    MSR_CHECK_OK(msr_ckpt_reader_read(rd, piece, got, piece));
    MSR_CHECK(memcmp(got, a + piece, piece) == 0);
    int direct = msr_ckpt_reader_direct(rd);
    const void *s0 = msr_ckpt_reader_stage(rd);
    MSR_CHECK_OK(msr_ckpt_reader_reopen(rd, dir, 11, 0, 0, &total));
    MSR_CHECK_EQ(total, (uint64_t)blen);
    MSR_CHECK_EQ(msr_ckpt_reader_direct(rd), direct);
    MSR_CHECK(msr_ckpt_reader_stage(rd) == s0); /* the same staging buffer, not a new one */
    /* where the staging buffer held the first state's bytes: the second's */
    MSR_CHECK_OK(msr_ckpt_reader_read(rd, 2 * piece, got, 100));
    MSR_CHECK(memcmp(got, b + 2 * piece, 100) == 0);
    /* the same state again, with its whole CRC checked */
    MSR_CHECK_OK(msr_ckpt_reader_reopen(rd, dir, 11, 0, 1, NULL));
    MSR_CHECK_EQ(msr_ckpt_reader_checked(rd), 0);
    read_in_order(rd, b, blen, got, piece);
    /* back to the first state, read whole again, then at a missing one */
    MSR_CHECK_OK(msr_ckpt_reader_reopen(rd, dir, 10, 0, 1, NULL));
    read_in_order(rd, a, alen, got, piece);
    total = 1;
    MSR_CHECK_EQ(msr_ckpt_reader_reopen(rd, dir, 12, 0, 1, &total), MSR_ERR_NOT_FOUND);
    MSR_CHECK_EQ(total, 1);
    MSR_CHECK_OK(msr_ckpt_reader_read(rd, alen - 9, got, 9));
    MSR_CHECK(memcmp(got, a + alen - 9, 9) == 0);
    MSR_CHECK_EQ(msr_ckpt_reader_reopen(rd, NULL, 10, 0, 1, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_EQ(msr_ckpt_reader_reopen(NULL, dir, 10, 0, 1, NULL), MSR_ERR_INVALID_ARG);
    msr_ckpt_reader_close(rd);
    msr_finalize(ctx);
    free(got);
    free(b);
    free(a);
}

/* The bytes a read of [offset, offset + len) of a state of total bytes
 * takes from its file: past the page cache, the whole blocks it spans,
 * cut at the file's end; through it, len. */
static uint64_t read_cost(int direct, size_t offset, size_t len, size_t total)
{
    const size_t pg = CKPT_DIRECT_ALIGN, pos = MSR_CKPT_HEADER_LEN + offset;
    if (!direct || len == 0)
        return len;
    size_t a = pos / pg * pg, e = (pos + len + pg - 1) / pg * pg, end = MSR_CKPT_HEADER_LEN + total;
    return (e < end ? e : end) - a;
}

/* msr_ckpt_reader_bytes_read counts what the reader read from its files:
 * none at open and for a read of 0 bytes; a lone read of 1 byte, of 2
 * bytes across a block's bound and of the state's last bytes, the blocks
 * each spans (the bytes asked through the page cache); a reopen keeps
 * counting; reading a state whole in order reads each byte of its file
 * once, the read ahead included; NULL counts 0. */
static void test_reader_bytes(void)
{
    const size_t stage = CKPT_DIRECT_STAGE, len = 3 * stage + 100, pg = CKPT_DIRECT_ALIGN;
    unsigned char *state = malloc(len), *got = malloc(stage);
    MSR_CHECK(state != NULL && got != NULL);
    for (size_t i = 0; i < len; i++)
        state[i] = (unsigned char)(i * 41 + (i >> 11));
    msr_ctx_t *ctx = NULL;
    unsetenv("MSR_AGENT");
    unsetenv("MSR_WORLD_SIZE");
    MSR_CHECK_OK(msr_init(&ctx));
    MSR_CHECK_OK(msr_ckpt_save(ctx, dir, 20, state, len, 0));
    msr_ckpt_reader_t *rd = NULL;
    MSR_CHECK_OK(msr_ckpt_reader_open(ctx, dir, 20, 0, 0, &rd, NULL));
    int direct = msr_ckpt_reader_direct(rd);
    uint64_t want = 0;
    MSR_CHECK_EQ(msr_ckpt_reader_bytes_read(rd), 0);
    MSR_CHECK_OK(msr_ckpt_reader_read(rd, stage, got, 0)); /* 0 bytes: none read */
    MSR_CHECK_EQ(msr_ckpt_reader_bytes_read(rd), 0);
    const size_t at[3] = {stage + 7, 2 * pg - MSR_CKPT_HEADER_LEN - 1, len - 10};
    const size_t n[3] = {1, 2, 10}; /* in a block; across a bound; to the state's end */
    for (int k = 0; k < 3; k++) {
        MSR_CHECK_OK(msr_ckpt_reader_read(rd, at[k], got, n[k]));
        MSR_CHECK(memcmp(got, state + at[k], n[k]) == 0);
        want += read_cost(direct, at[k], n[k], len);
        MSR_CHECK_EQ(msr_ckpt_reader_bytes_read(rd), want);
    }
    MSR_CHECK(!direct || want == 4 * pg - (pg - (MSR_CKPT_HEADER_LEN + len) % pg) % pg);
    MSR_CHECK_OK(msr_ckpt_reader_reopen(rd, dir, 20, 0, 1, NULL));
    MSR_CHECK_EQ(msr_ckpt_reader_bytes_read(rd), want);
    read_in_order(rd, state, len, got, stage / 3 + 11);
    want += direct ? MSR_CKPT_HEADER_LEN + len : len;
    MSR_CHECK_EQ(msr_ckpt_reader_bytes_read(rd), want);
    MSR_CHECK_EQ(msr_ckpt_reader_bytes_read(NULL), 0);
    msr_ckpt_reader_close(rd);
    msr_finalize(ctx);
    free(got);
    free(state);
}

static const msr_test_t tests[] = {
    {"prefault_pages", test_prefault_pages, 10}, {"read_misaligned", test_read_misaligned, 30},
    {"read_direct", test_read_direct, 30},       {"read_fallback", test_read_fallback, 30},
    {"read_ahead", test_read_ahead, 30},         {"stage_huge", test_stage_huge, 30},
    {"reader_reopen", test_reader_reopen, 30},   {"reader_bytes", test_reader_bytes, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN_IN_DIR(argc, argv, tests, dir, "ckpt_prefault");
}
