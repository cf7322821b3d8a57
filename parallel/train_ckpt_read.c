/* The trainer's checkpoint shard read in part: a payload's header, then
 * the pieces a rank needs, each checked against its CRC (see train.h). */
#include "parallel/train.h"
#include "parallel/train_impl.h"
#include "parallel/train_ckpt_impl.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/err.h"
#include "base/status.h"
/* Reads only the header and range table of rank's payload (p->buf holds
 * them; the ranges' data pointers are NULL). */
msr_status_t msr_train_ckpt_read_head(const source_t *src, int rank, payload_t *p)
{
    unsigned char fixed[MSR_TCKPT_PREFIX_LEN];
    uint64_t total = 0;
    size_t hl = 0;
    char what[64];
    memset(p, 0, sizeof *p);
    msr_status_t st = src->read(src->arg, rank, 0, fixed, sizeof fixed, &total, NULL);
    if (st == MSR_OK)
        st = msr_tckpt_head_len(fixed, sizeof fixed, &hl);
    if (st == MSR_OK) { /* name it by its file (libmsrun's step-S/rank-R.bin) */
        uint64_t step;
        memcpy(&step, fixed + 16, sizeof step);
        snprintf(what, sizeof what, "step-%llu/rank-%d.bin", (unsigned long long)step, rank);
    }
    if (st == MSR_OK && (hl < sizeof fixed || hl > total))
        st = msr_err(MSR_ERR_CORRUPT, "train: %s has a header of %zu bytes in %llu", what, hl,
                     (unsigned long long)total);
    if (st == MSR_OK && (p->buf = msr_malloc(hl)) == NULL)
        st = msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a header of %zu bytes", hl);
    if (st == MSR_OK)
        st = src->read(src->arg, rank, 0, p->buf, hl, NULL, NULL);
    if (st == MSR_OK)
        st = msr_tckpt_decode_head(p->buf, hl, (size_t)total, what, &p->h, &p->ranges, &p->n);
    if (st != MSR_OK)
        payload_free(p);
    p->partial = 1;
    return st;
}

/* msr_ckpt_map_fn: stops at the first part this rank holds, giving its
 * local start. */
static int first_held(void *arg, size_t lo, size_t glo, size_t n)
{
    (void)glo;
    (void)n;
    *(size_t *)arg = lo;
    return 1;
}

/* Whether this rank holds any element of saved range r. */
static int range_needed(msr_trainer_t *tr, const msr_ckpt_map_t *map, const msr_tckpt_range_t *r)
{
    size_t lo, n;
    if (r->lo >= whole_flat(tr)) {
        for (int k = 0; k < expert_ranges(tr); k++) {
            msr_tckpt_range_t mine = expert_range(tr, k);
            if (mine.n > 0 && msr_ckpt_overlap(mine.lo, mine.n, r->lo, r->n, &lo, &n))
                return 1;
        }
        return 0;
    }
    return msr_ckpt_map_to_local(map, r->lo, MSR_MIN(r->n, whole_flat(tr) - r->lo), first_held,
                                 &lo) != 0;
}

/* The name of the tensor of this rank's that holds a part of saved range
 * r (one range_needed accepted). */
static const char *tensor_of(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                             const msr_tckpt_range_t *r)
{
    size_t lo = 0;
    if (r->lo >= whole_flat(tr))
        return "experts";
    msr_ckpt_map_to_local(map, r->lo, MSR_MIN(r->n, whole_flat(tr) - r->lo), first_held, &lo);
    for (int k = 0; k < tr->model->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &tr->model->tensors[k];
        if (lo >= t->offset && lo < t->offset + t->count)
            return t->name;
    }
    return "?";
}

/* msr_ckpt_map_fn: the one local run a saved range maps to (n = 0: none,
 * or more than one). */
typedef struct one_run {
    size_t lo, n;
    int runs;
} one_run_t;

static int one_run(void *arg, size_t lo, size_t glo, size_t n)
{
    one_run_t *o = arg;
    (void)glo;
    o->lo = lo;
    o->n = n;
    return ++o->runs > 1;
}

/* Reads len bytes at offset of rank's payload into dst in chunks of
 * MSR_TCKPT_READ_CHUNK, continuing *crc over each from the CRC the read
 * computed as the chunk arrived (msr_crc32_combine): each byte is CRC'd
 * once, by the read, not again here. */
static msr_status_t read_crc(const source_t *src, int rank, uint64_t offset, void *dst, size_t len,
                             uint32_t *crc)
{
    unsigned char *b = dst;
    for (size_t at = 0; at < len;) {
        size_t n = MSR_MIN(len - at, MSR_TCKPT_READ_CHUNK);
        uint32_t chunk = 0;
        msr_status_t st = src->read(src->arg, rank, offset + at, b + at, n, NULL, &chunk);
        if (st != MSR_OK)
            return st;
        *crc = msr_crc32_combine(*crc, chunk, n);
        at += n;
    }
    return MSR_OK;
}

/* Reads piece r of rank's payload into buf (3 * r->n floats), checked as
 * read_crc reads: *crc_p gets the CRC to compare with r->crc. */
static msr_status_t piece_read(const source_t *src, int rank, const msr_tckpt_header_t *h,
                               const msr_tckpt_range_t *r, float *buf, uint32_t *crc_p)
{
    uint32_t crc = msr_tckpt_piece_crc_start(h, r);
    msr_status_t st = read_crc(src, rank, r->offset, buf, 3 * (size_t)r->n * sizeof *buf, &crc);
    if (st == MSR_OK)
        *crc_p = crc;
    return st;
}

/* In place: when piece r is all elements this rank holds (msr_dp_load_dest:
 * at ZeRO 0 any, the replica's; else its own shard's) and lies side by side
 * in its buffers, reads its parameters and moments
 * straight there (no piece's buffer, no copy) and checks its CRC. *done_p:
 * 1 when read so, 0 when it must go through a piece's buffer. */
static msr_status_t piece_read_in_place(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                        const source_t *src, int rank, const msr_tckpt_header_t *h,
                                        const msr_tckpt_range_t *r, uint32_t *crc_p, int *done_p)
{
    one_run_t o = {0, 0, 0};
    float *dst[3];
    *done_p = 0;
    if (r->lo + r->n > whole_flat(tr))
        return MSR_OK;
    msr_ckpt_map_to_local(map, r->lo, r->n, one_run, &o);
    if (o.runs != 1 || o.n != r->n ||
        !msr_dp_load_dest(tr->dp, o.lo, o.n, &dst[0], &dst[1], &dst[2]))
        return MSR_OK;
    size_t len = (size_t)r->n * sizeof(float);
    uint32_t crc = msr_tckpt_piece_crc_start(h, r);
    for (int a = 0; a < 3; a++) { /* params, m, v: one after the other in the payload */
        msr_status_t st = read_crc(src, rank, r->offset + a * len, dst[a], len, &crc);
        if (st != MSR_OK)
            return st;
    }
    *crc_p = crc;
    *done_p = 1;
    return MSR_OK;
}

/* Piece r of p (saved by rank), read with CRC crc: MSR_ERR_CORRUPT naming
 * its tensor when that is not the piece's. */
static msr_status_t piece_check(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p,
                                int rank, const msr_tckpt_range_t *r, uint32_t crc)
{
    if (p->h.version < 3 || crc == r->crc)
        return MSR_OK;
    return msr_err(MSR_ERR_CORRUPT,
                   "train: step-%llu/rank-%d.bin: the piece of tensor %s (elements [%llu, "
                   "%llu) of the whole model) does not match its CRC",
                   (unsigned long long)p->h.step, rank, tensor_of(tr, map, r),
                   (unsigned long long)r->lo, (unsigned long long)(r->lo + r->n));
}

/* The read of piece r of p (saved by rank) failed with st: the read's own
 * text (the source's: for train_gpt, libmsrun's reader's, which names the
 * file and how it failed), after the file, the tensor and the elements. */
static msr_status_t piece_read_failed(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                      const payload_t *p, int rank, const msr_tckpt_range_t *r,
                                      msr_status_t st)
{
    char why[MSR_ERR_TEXT_MAX];
    snprintf(why, sizeof why, "%s", msr_err_msg_or(st)); /* copied: msr_err writes over it */
    return msr_err(st,
                   "train: step-%llu/rank-%d.bin: reading the piece of tensor %s (elements [%llu, "
                   "%llu) of the whole model): %s",
                   (unsigned long long)p->h.step, rank, tensor_of(tr, map, r),
                   (unsigned long long)r->lo, (unsigned long long)(r->lo + r->n), why);
}

/* Reads the pieces of partial payload p (saved by rank) that hold
 * elements of this rank's, one at a time through a buffer of one piece
 * (at most MSR_TCKPT_PIECE_MAX elements), checks each against its CRC,
 * and loads them. A failed read or check names the file and the tensor. */
msr_status_t msr_train_ckpt_read_apply(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                       const payload_t *p, const source_t *src, int rank,
                                       uint8_t *cover)
{
    float *buf = NULL;
    size_t cap = 0;
    msr_status_t st = MSR_OK;
    for (uint32_t k = 0; k < p->n && st == MSR_OK; k++) {
        msr_tckpt_range_t r = p->ranges[k];
        if (!range_needed(tr, map, &r))
            continue;
        int in_place = 0;
        uint32_t crc = 0;
        st = piece_read_in_place(tr, map, src, rank, &p->h, &r, &crc, &in_place);
        if (st != MSR_OK) {
            st = piece_read_failed(tr, map, p, rank, &r, st);
            break;
        }
        if (in_place) {
            if ((st = piece_check(tr, map, p, rank, &r, crc)) != MSR_OK)
                break;
            one_run_t o = {0, 0, 0};
            msr_ckpt_map_to_local(map, r.lo, r.n, one_run, &o);
            msr_dp_load_mark(tr->dp, o.lo, o.n);
            continue;
        }
        size_t floats = 3 * (size_t)r.n;
        if (floats > cap) {
            msr_free(buf);
            cap = floats;
            if ((buf = msr_malloc(cap * sizeof *buf)) == NULL)
                return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a piece of %zu floats",
                               cap);
        }
        if ((st = piece_read(src, rank, &p->h, &r, buf, &crc)) != MSR_OK) {
            st = piece_read_failed(tr, map, p, rank, &r, st);
            break;
        }
        r.params = buf;
        r.m = buf + r.n;
        r.v = buf + 2 * r.n;
        if ((st = piece_check(tr, map, p, rank, &r, crc)) != MSR_OK)
            break;
        payload_t one = {NULL, p->h, &r, 1, 0};
        msr_train_ckpt_apply(tr, map, &one, cover);
    }
    msr_free(buf);
    return st;
}
