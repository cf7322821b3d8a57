/* Fuzzing the checkpoint payload's header and range table (parallel/ckpt.h),
 * the index a resume reads before it takes any piece: every input either
 * decodes to ranges that are increasing, inside the model and inside the
 * bytes, that the header and range table alone decode to as well (a
 * partial reader's view), and that encode and decode back to the same, or
 * is refused with
 * MSR_ERR_CORRUPT; never a crash or a read past the input. The length the
 * header and range table alone imply (msr_tckpt_index_total, how a resume
 * says where a file cut short was cut) is the payload's own when it
 * decodes, and any input's index gives a length or is refused. Built two ways:
 *   - with libFuzzer (MSRUN_FUZZ=ON, clang): fuzz_ckpt [corpus dirs]
 *   - as a replay driver in every build: fuzz_ckpt_replay FILE|DIR...
 * The input is a payload's bytes (copied to an 8-byte aligned buffer of
 * exactly its length, as libmsrun hands them over). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "parallel/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
    if (!cond)
        abort();
}

/* Encodes what was decoded and decodes it again: the same header and
 * ranges. */
static void round_trip(const msr_tckpt_header_t *h, const msr_tckpt_range_t *r, uint32_t n)
{
    void *buf = NULL;
    size_t len = 0;
    msr_tckpt_header_t g;
    msr_tckpt_range_t *got = NULL;
    uint32_t gn = 0;
    msr_status_t st = msr_tckpt_encode(h, r, n, &buf, &len);
    if (st == MSR_ERR_NO_MEMORY)
        return;
    check(st == MSR_OK);
    check(msr_tckpt_decode(buf, len, "fuzz", &g, &got, &gn) == MSR_OK);
    check(gn == n && g.step == h->step && g.num_params == h->num_params && g.rank == h->rank &&
          g.world == h->world && strcmp(g.meta, h->meta) == 0);
    for (uint32_t k = 0; k < n; k++)
        check(got[k].lo == r[k].lo && got[k].n == r[k].n &&
              memcmp(got[k].params, r[k].params, r[k].n * sizeof(float)) == 0);
    msr_free(got);
    msr_free(buf);
}

/* The header and range table alone (a partial reader's view) give the
 * same pieces, at the same offsets, as the whole payload. */
static void head_only(const void *buf, size_t size, const msr_tckpt_range_t *r, uint32_t n)
{
    size_t hl = 0;
    msr_tckpt_header_t g;
    msr_tckpt_range_t *got = NULL;
    uint32_t gn = 0;
    check(msr_tckpt_head_len(buf, size, &hl) == MSR_OK && hl <= size);
    msr_status_t st = msr_tckpt_decode_head(buf, hl, size, "fuzz", &g, &got, &gn);
    if (st == MSR_ERR_NO_MEMORY)
        return;
    check(st == MSR_OK && gn == n);
    uint64_t total = 0; /* the length the index implies: the payload's own */
    check(msr_tckpt_index_total(buf, hl, &total) == MSR_OK && total == size);
    for (uint32_t k = 0; k < n; k++)
        check(got[k].lo == r[k].lo && got[k].n == r[k].n && got[k].offset == r[k].offset &&
              got[k].crc == r[k].crc && got[k].params == NULL &&
              (const char *)buf + got[k].offset == (const char *)r[k].params);
    msr_free(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void *buf = malloc(size > 0 ? size : 1); /* malloc's alignment, like libmsrun's */
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    msr_tckpt_header_t h;
    msr_tckpt_range_t *r = NULL;
    uint32_t n = 0;
    size_t hl = 0;
    uint64_t total = 0;
    if (msr_tckpt_head_len(buf, size, &hl) == MSR_OK && hl <= size) {
        /* a payload cut short: what its index alone implies */
        msr_status_t ist = msr_tckpt_index_total(buf, hl, &total);
        check(ist == MSR_OK || ist == MSR_ERR_CORRUPT);
    }
    msr_status_t st = msr_tckpt_decode(buf, size, "fuzz", &h, &r, &n);
    check(st == MSR_OK || st == MSR_ERR_CORRUPT || st == MSR_ERR_NO_MEMORY);
    if (st == MSR_OK) {
        const char *end = (const char *)buf + size;
        check(h.rank < h.world && strlen(h.meta) < MSR_TCKPT_META_MAX);
        for (uint32_t k = 0; k < n; k++) {
            check(r[k].n > 0 && r[k].lo + r[k].n <= h.num_params);
            check(k == 0 || r[k].lo >= r[k - 1].lo + r[k - 1].n);
            check((const char *)(r[k].v + r[k].n) <= end);
        }
        head_only(buf, size, r, n);
        for (uint32_t k = 0; k < n; k++)
            (void)msr_tckpt_piece_ok(&h, &r[k]);
        round_trip(&h, r, n);
        msr_free(r);
    }
    free(buf);
    return 0;
}

#ifndef MSR_FUZZ_LIBFUZZER
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>

/* The replay driver: each file, or each file of each directory. */
static int replay(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return 1;
    }
    uint8_t *b = malloc(1 << 20);
    size_t len = b != NULL ? fread(b, 1, 1 << 20, f) : 0;
    fclose(f);
    if (b == NULL)
        return 1;
    LLVMFuzzerTestOneInput(b, len);
    free(b);
    return 0;
}

int main(int argc, char **argv)
{
    int bad = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat s;
        DIR *d = stat(argv[i], &s) == 0 && S_ISDIR(s.st_mode) ? opendir(argv[i]) : NULL;
        if (d == NULL) {
            bad |= replay(argv[i]);
            files++;
            continue;
        }
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            char p[4096];
            if (e->d_name[0] == '.')
                continue;
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            bad |= replay(p);
            files++;
        }
        closedir(d);
    }
    printf("fuzz_ckpt_replay: %d inputs\n", files);
    return bad || files == 0;
}
#endif
