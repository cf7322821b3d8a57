/* Fuzzing where a state file cut short was cut (msr_tckpt_find_cut,
 * parallel/ckpt.h) against the payload's index parser it reads with
 * (msr_tckpt_head_len, msr_tckpt_index_total, msr_tckpt_decode_head). The
 * input is a payload's bytes as far as the file goes; the harness puts
 * them after libmsrun's header (MSR_CKPT_HEADER_LEN bytes) in a file in
 * memory and asks where the file was cut. Never a crash or a read past
 * the file, and the answer agrees with the index:
 *   - cut (1): at the payload's start; inside the index (want 0) only
 *     when the index is longer than the bytes there; otherwise the file
 *     is shorter than the length the index gives (want), and the piece
 *     named starts at or before the file's end and ends past it, inside
 *     the payload the index lays out, or (version 4) every piece ends
 *     before the file does and the cut is in the chunk table after them,
 *     which starts at or before the file's end;
 *   - not cut (0): the index does not read, or says the payload is no
 *     longer than the bytes there;
 * and the sentence about a cut fits any buffer, NUL-terminated.
 * Built two ways, as fuzz_coord: with libFuzzer (MSRUN_FUZZ=ON, clang):
 * fuzz_ckpt_cut [corpus dirs]; as a replay driver in every build:
 * fuzz_ckpt_cut_replay FILE|DIR... */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/alloc.h"
#include "msrun/checkpoint.h"
#include "parallel/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void broken(const char *what, size_t size)
{
    fprintf(stderr, "fuzz_ckpt_cut: a payload of %zu bytes: %s\n", size, what);
    abort();
}

/* What the index parser alone says of payload p (size bytes): 1 when its
 * header and range table read and lay out more bytes than size (*total_p
 * of them, its index *hl_p bytes); 0 when they read and lay out no more;
 * -1 when they do not read. -2: out of memory (no verdict). */
static int index_says(const uint8_t *p, size_t size, size_t *hl_p, uint64_t *total_p)
{
    size_t hl = 0;
    uint64_t total = 0;
    if (size < MSR_TCKPT_PREFIX_LEN || msr_tckpt_head_len(p, size, &hl) != MSR_OK || hl > size ||
        msr_tckpt_index_total(p, hl, &total) != MSR_OK)
        return -1;
    msr_tckpt_header_t h;
    msr_tckpt_range_t *r = NULL;
    uint32_t n = 0;
    msr_status_t st = msr_tckpt_decode_head(p, hl, (size_t)total, "fuzz", &h, &r, &n);
    msr_free(r);
    if (st == MSR_ERR_NO_MEMORY)
        return -2;
    if (st != MSR_OK)
        return -1;
    *hl_p = hl;
    *total_p = total;
    return total > size ? 1 : 0;
}

/* The invariants of cut c of a file of fsize bytes whose payload (size
 * bytes) is p. */
static void check_cut(const msr_tckpt_cut_t *c, const uint8_t *p, size_t size, uint64_t fsize)
{
    if (c->size != fsize || c->at != MSR_CKPT_HEADER_LEN)
        broken("the cut's file size or payload start is wrong", size);
    if (c->want == 0) { /* inside the header and index */
        size_t hl = 0;
        if (c->head <= size || c->head < MSR_TCKPT_PREFIX_LEN)
            broken("a cut inside an index that the bytes hold", size);
        if (size >= MSR_TCKPT_PREFIX_LEN &&
            (msr_tckpt_head_len(p, size, &hl) != MSR_OK || hl != c->head))
            broken("the index length is not the header's", size);
        return;
    }
    size_t hl = 0;
    uint64_t total = 0;
    int says = index_says(p, size, &hl, &total);
    if (says == -2)
        return;
    if (says != 1 || c->want != c->at + total || c->head != hl)
        broken("a cut the index does not give", size);
    if (c->in_chunks) { /* the chunk table: after every piece, the file's end inside it */
        if (c->chunks_at > fsize || c->chunks_at < c->at + hl || c->chunks_at >= c->want ||
            (c->chunks_at - c->at - hl) % 12 != 0)
            broken("a cut in the chunk table that is not there", size);
        return;
    }
    const uint64_t start = c->piece.offset, end = start + 12 * c->piece.n;
    if (c->piece.n == 0 || start > fsize || end <= fsize || start < c->at + hl || end > c->want ||
        (start - c->at - hl) % 12 != 0)
        broken("the piece named is not the one the cut falls in", size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz_ckpt_cut", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    uint8_t header[MSR_CKPT_HEADER_LEN] = "MSRCKPT1"; /* find_cut reads past it */
    uint64_t fsize = MSR_CKPT_HEADER_LEN + (uint64_t)size;
    if (write(fd, header, sizeof header) != (ssize_t)sizeof header ||
        (size > 0 && write(fd, data, size) != (ssize_t)size)) {
        close(fd);
        return 0;
    }
    msr_tckpt_cut_t c;
    memset(&c, 0xa5, sizeof c);
    int cut = msr_tckpt_find_cut(fd, fsize, &c);
    if (cut != 0 && cut != 1)
        broken("find_cut gave neither 0 nor 1", size);
    size_t hl = 0;
    uint64_t total = 0;
    int says = index_says(data, size, &hl, &total);
    if (cut) {
        check_cut(&c, data, size, fsize);
        char small[16], big[1024];
        msr_tckpt_cut_say(&c, "step-1/rank-0.bin", size % 2 ? "h0.fcw" : NULL, small, sizeof small);
        msr_tckpt_cut_say(&c, "step-1/rank-0.bin", size % 2 ? "h0.fcw" : NULL, big, sizeof big);
        if (memchr(small, '\0', sizeof small) == NULL || strstr(big, "is cut short") == NULL)
            broken("the sentence about the cut", size);
    } else if (says == 1) {
        broken("not cut, where the index lays out more bytes than the file holds", size);
    }
    if (says == 0 && cut)
        broken("cut, where the index lays out no more bytes than the file holds", size);
    /* a file cut inside libmsrun's header is never taken for a cut payload */
    if (ftruncate(fd, MSR_CKPT_HEADER_LEN - 1) == 0 &&
        msr_tckpt_find_cut(fd, MSR_CKPT_HEADER_LEN - 1, &c) != 0)
        broken("a cut inside libmsrun's header", size);
    close(fd);
    return 0;
}
