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

int msr_train_ckpt_needed(msr_trainer_t *tr, const msr_ckpt_map_t *map, const msr_tckpt_range_t *r)
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

msr_status_t msr_train_ckpt_read_crc(const source_t *src, int rank, uint64_t offset, void *dst,
                                     size_t len, uint32_t *crc)
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
    msr_status_t st =
        msr_train_ckpt_read_crc(src, rank, r->offset, buf, 3 * (size_t)r->n * sizeof *buf, &crc);
    if (st == MSR_OK)
        *crc_p = crc;
    return st;
}

int msr_train_ckpt_dest(msr_trainer_t *tr, const msr_ckpt_map_t *map, uint64_t lo, uint64_t n,
                        float *dst[3], size_t *local_p)
{
    one_run_t o = {0, 0, 0};
    if (lo + n > whole_flat(tr))
        return 0;
    msr_ckpt_map_to_local(map, (size_t)lo, (size_t)n, one_run, &o);
    if (o.runs != 1 || o.n != n || !msr_dp_load_dest(tr->dp, o.lo, o.n, &dst[0], &dst[1], &dst[2]))
        return 0;
    *local_p = o.lo;
    return 1;
}

/* In place: when piece r is all elements this rank holds and lies side by
 * side in its buffers (msr_train_ckpt_dest), reads its parameters and
 * moments straight there (no piece's buffer, no copy) and checks its CRC.
 * *done_p: 1 when read so (*local_p: its first local element), 0 when it
 * must go through a piece's buffer. */
static msr_status_t piece_read_in_place(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                        const source_t *src, int rank, const msr_tckpt_header_t *h,
                                        const msr_tckpt_range_t *r, uint32_t *crc_p, int *done_p,
                                        size_t *local_p)
{
    float *dst[3];
    *done_p = 0;
    if (!msr_train_ckpt_dest(tr, map, r->lo, r->n, dst, local_p))
        return MSR_OK;
    size_t len = (size_t)r->n * sizeof(float);
    uint32_t crc = msr_tckpt_piece_crc_start(h, r);
    for (int a = 0; a < 3; a++) { /* params, m, v: one after the other in the payload */
        msr_status_t st =
            msr_train_ckpt_read_crc(src, rank, r->offset + a * len, dst[a], len, &crc);
        if (st != MSR_OK)
            return st;
    }
    *crc_p = crc;
    *done_p = 1;
    return MSR_OK;
}

msr_status_t msr_train_ckpt_piece_check(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                        const payload_t *p, int rank, const msr_tckpt_range_t *r,
                                        uint32_t crc)
{
    if (p->h.version < 3 || crc == r->crc)
        return MSR_OK;
    return msr_err(MSR_ERR_CORRUPT,
                   "train: step-%llu/rank-%d.bin: the piece of tensor %s (elements [%llu, "
                   "%llu) of the whole model) does not match its CRC",
                   (unsigned long long)p->h.step, rank, tensor_of(tr, map, r),
                   (unsigned long long)r->lo, (unsigned long long)(r->lo + r->n));
}

msr_status_t msr_train_ckpt_piece_failed(msr_trainer_t *tr, const msr_ckpt_map_t *map,
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

/* Version 4: the chunk crcs of the pieces this rank needs, read at once
 * (one read of the stretch of the chunk table from the first needed
 * piece's to the last's, before the pieces: the pieces' reads then follow
 * one another in the file). */
typedef struct chunk_table {
    unsigned char *b;
    uint64_t at, len; /* of the payload */
} chunk_table_t;

static msr_status_t table_read(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p,
                               const source_t *src, int rank, chunk_table_t *t)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    memset(t, 0, sizeof *t);
    if (p->h.version < 4)
        return MSR_OK;
    for (uint32_t k = 0; k < p->n; k++) {
        const msr_tckpt_range_t *r = &p->ranges[k];
        if (!msr_train_ckpt_needed(tr, map, r))
            continue;
        lo = MSR_MIN(lo, r->chunks_offset);
        hi = MSR_MAX(hi, r->chunks_offset + 12 * (uint64_t)msr_tckpt_chunks(r->n));
    }
    if (lo >= hi)
        return MSR_OK;
    t->at = lo;
    t->len = hi - lo;
    if ((t->b = msr_malloc((size_t)t->len)) == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a chunk table of %llu bytes",
                       (unsigned long long)t->len);
    msr_status_t st = src->read(src->arg, rank, t->at, t->b, (size_t)t->len, NULL, NULL);
    if (st != MSR_OK) {
        char why[MSR_ERR_TEXT_MAX];
        snprintf(why, sizeof why, "%s", msr_err_msg_or(st));
        st = msr_err(st, "train: step-%llu/rank-%d.bin: reading its chunk table: %s",
                     (unsigned long long)p->h.step, rank, why);
    }
    return st;
}

/* Which chunks of a piece this rank needs: need[c] for the parameters'
 * chunk c, need[k + c] for the moments' (k chunks an array), and how many
 * of the 2k are needed. */
typedef struct piece_need {
    const msr_tckpt_range_t *r;
    uint8_t *need;
    uint32_t k, count;
    size_t lo, glo; /* the local run being marked: its start, and its global one */
} piece_need_t;

/* Marks piece elements [off, off + n) needed for kind (0 the parameters,
 * 1 the moments). */
static void need_mark(piece_need_t *pn, int moments, uint64_t off, uint64_t n)
{
    uint32_t a = (uint32_t)(off / MSR_TCKPT_CRC_CHUNK),
             b = (uint32_t)((off + n - 1) / MSR_TCKPT_CRC_CHUNK);
    uint8_t *m = pn->need + (moments ? pn->k : 0);
    for (uint32_t c = a; c <= b; c++) {
        pn->count += !m[c];
        m[c] = 1;
    }
}

/* msr_dp_need_fn: local [lo, lo + n) of the run pn marks. */
static void need_part(void *arg, int moments, size_t lo, size_t n)
{
    piece_need_t *pn = arg;
    need_mark(pn, moments, pn->glo + (lo - pn->lo) - pn->r->lo, n);
}

/* msr_ckpt_map_fn: what dp takes of a local run the piece overlaps. */
static int need_run(void *arg, size_t lo, size_t glo, size_t n)
{
    msr_dp_t *dp = ((void **)arg)[0];
    piece_need_t *pn = ((void **)arg)[1];
    pn->lo = lo;
    pn->glo = glo;
    msr_dp_load_needs(dp, lo, n, need_part, pn);
    return 0;
}

/* The chunks of piece r that msr_train_ckpt_apply takes from (into
 * pn->need, 2 msr_tckpt_chunks(r->n) flags, zeroed here). */
static void piece_needs(msr_trainer_t *tr, const msr_ckpt_map_t *map, const msr_tckpt_range_t *r,
                        piece_need_t *pn)
{
    pn->r = r;
    pn->k = msr_tckpt_chunks(r->n);
    pn->count = 0;
    memset(pn->need, 0, 2 * (size_t)pn->k);
    if (r->lo >= whole_flat(tr)) { /* experts_load: the shard's, all three */
        for (int k = 0; k < expert_ranges(tr); k++) {
            msr_tckpt_range_t mine = expert_range(tr, k);
            size_t lo, n;
            if (mine.n > 0 && msr_ckpt_overlap(mine.lo, mine.n, r->lo, r->n, &lo, &n)) {
                need_mark(pn, 0, lo - r->lo, n);
                need_mark(pn, 1, lo - r->lo, n);
            }
        }
        return;
    }
    void *arg[2] = {tr->dp, pn};
    msr_ckpt_map_to_local(map, r->lo, MSR_MIN(r->n, whole_flat(tr) - r->lo), need_run, arg);
}

/* Runs of needed chunks at most this many chunks apart are read as one
 * (16 KiB): a read costs more than that many bytes more. */
#define CHUNK_GAP 4u

/* Whether pn needs chunk x of the piece's 3k (its parameters' k, then
 * m's, then v's: the chunk table's order, and the bytes'). */
static int chunk_needed(const piece_need_t *pn, uint32_t x)
{
    return pn->need[(x >= pn->k ? pn->k : 0) + x % pn->k];
}

/* The first byte of chunk x of piece r (of k chunks an array), from the
 * piece's first, and one past its last. */
static uint64_t chunk_from(const msr_tckpt_range_t *r, uint32_t k, uint32_t x)
{
    return ((x / k) * r->n + (uint64_t)(x % k) * MSR_TCKPT_CRC_CHUNK) * sizeof(float);
}

static uint64_t chunk_to(const msr_tckpt_range_t *r, uint32_t k, uint32_t x)
{
    return ((x / k) * r->n + MSR_MIN((uint64_t)(x % k + 1) * MSR_TCKPT_CRC_CHUNK, r->n)) *
           sizeof(float);
}

/* Reads the chunks of piece r that pn needs into buf (3 * r->n floats,
 * each at its place), in the file's order: a run of needed chunks (short
 * gaps read through, and on from one array into the next, so that no read
 * starts where the one before ended: the reader reads ahead of reads that
 * follow one another) is one read, checked against the crc its chunks
 * have together (crcs: the piece's chunk crcs, already found to combine
 * into its crc). *ok_p: 0 when a run does not match. */
static msr_status_t piece_read_part(const source_t *src, int rank, const msr_tckpt_range_t *r,
                                    const piece_need_t *pn, const unsigned char *crcs, float *buf,
                                    int *ok_p)
{
    uint32_t k = pn->k, all = 3 * k;
    *ok_p = 1;
    for (uint32_t x = 0; x < all;) {
        if (!chunk_needed(pn, x)) {
            x++;
            continue;
        }
        uint32_t e = x + 1, gap = 0; /* the run [x, e), through short gaps */
        for (uint32_t y = e; y < all && gap <= CHUNK_GAP; y++) {
            if (chunk_needed(pn, y)) {
                e = y + 1;
                gap = 0;
            } else {
                gap++;
            }
        }
        uint64_t from = chunk_from(r, k, x), to = chunk_to(r, k, e - 1);
        uint32_t got = 0;
        msr_status_t st = src->read(src->arg, rank, r->offset + from, (unsigned char *)buf + from,
                                    (size_t)(to - from), NULL, &got);
        if (st != MSR_OK)
            return st;
        if (got != msr_tckpt_chunks_crc(crcs, r->n, x, e)) {
            *ok_p = 0;
            return MSR_OK;
        }
        x = e;
    }
    return MSR_OK;
}

uint64_t msr_train_ckpt_read_bytes(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p,
                                   const msr_tckpt_range_t *r, uint8_t *need)
{
    if (!msr_train_ckpt_needed(tr, map, r))
        return 0;
    if (p->h.version < 4) /* no chunk crcs: read whole */
        return 3 * r->n * sizeof(float);
    piece_need_t pn = {.need = need};
    piece_needs(tr, map, r, &pn);
    uint64_t bytes = 0;
    for (uint32_t x = 0; x < 3 * pn.k; x++)
        bytes += chunk_needed(&pn, x) ? chunk_to(r, pn.k, x) - chunk_from(r, pn.k, x) : 0;
    return bytes;
}

/* Whether this rank needs only some chunks of any piece of p (version 4;
 * pn->need: room for a whole piece's flags). */
static int any_part(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p,
                    piece_need_t *pn)
{
    for (uint32_t k = 0; k < p->n; k++) {
        if (!msr_train_ckpt_needed(tr, map, &p->ranges[k]))
            continue;
        piece_needs(tr, map, &p->ranges[k], pn);
        if (pn->count < 2 * pn->k)
            return 1;
    }
    return 0;
}

msr_status_t msr_train_ckpt_chunks_check(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                         const payload_t *p, const source_t *src, int rank)
{
    chunk_table_t t;
    msr_status_t st = table_read(tr, map, p, src, rank, &t);
    for (uint32_t k = 0; k < p->n && st == MSR_OK && t.b != NULL; k++) {
        const msr_tckpt_range_t *r = &p->ranges[k];
        if (msr_train_ckpt_needed(tr, map, r) &&
            !msr_tckpt_chunks_ok(&p->h, r, t.b + (r->chunks_offset - t.at)))
            st = msr_train_ckpt_piece_check(tr, map, p, rank, r,
                                            ~r->crc); /* its chunk crcs are damaged */
    }
    msr_free(t.b);
    return st;
}

/* Reads the pieces of partial payload p (saved by rank) that hold
 * elements of this rank's, one at a time through a buffer of one piece
 * (at most MSR_TCKPT_PIECE_MAX elements), checks each against its CRC,
 * and loads them. In version 4, when this rank needs only some chunks of
 * a piece, it reads the needed pieces' chunk crcs first and checks that
 * each piece's combine into its crc; such a piece is then read in those
 * chunks only, each run of them checked by its chunks' crcs. When it
 * needs every piece it reads whole, it checks their chunk crcs after
 * them. A failed read or check names the file and the tensor. */
msr_status_t msr_train_ckpt_read_apply(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                       const payload_t *p, const source_t *src, int rank,
                                       uint8_t *cover)
{
    float *buf = NULL;
    size_t cap = 0;
    chunk_table_t t = {NULL, 0, 0};
    piece_need_t pn = {0};
    msr_status_t st = MSR_OK;
    int parts = 0;
    if (p->h.version >= 4 &&
        (pn.need = msr_malloc(2 * (size_t)msr_tckpt_chunks(MSR_TCKPT_PIECE_MAX))) == NULL)
        st = msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a piece's chunk flags");
    if (st == MSR_OK && pn.need != NULL && (parts = any_part(tr, map, p, &pn)))
        st = table_read(tr, map, p, src, rank, &t);
    for (uint32_t k = 0; k < p->n && st == MSR_OK; k++) {
        msr_tckpt_range_t r = p->ranges[k];
        if (!msr_train_ckpt_needed(tr, map, &r))
            continue;
        const unsigned char *crcs = t.b != NULL ? t.b + (r.chunks_offset - t.at) : NULL;
        if (crcs != NULL && !msr_tckpt_chunks_ok(&p->h, &r, crcs)) {
            st = msr_train_ckpt_piece_check(tr, map, p, rank, &r,
                                            ~r.crc); /* its chunk table is damaged */
            break;
        }
        int in_place = 0, part = 0;
        uint32_t crc = 0;
        size_t local = 0;
        if (crcs != NULL) {
            piece_needs(tr, map, &r, &pn);
            part = pn.count < 2 * pn.k;
        }
        if (!part)
            st = piece_read_in_place(tr, map, src, rank, &p->h, &r, &crc, &in_place, &local);
        if (st != MSR_OK) {
            st = msr_train_ckpt_piece_failed(tr, map, p, rank, &r, st);
            break;
        }
        if (in_place) {
            if ((st = msr_train_ckpt_piece_check(tr, map, p, rank, &r, crc)) != MSR_OK)
                break;
            msr_dp_load_mark(tr->dp, local, r.n);
            continue;
        }
        size_t floats = 3 * (size_t)r.n;
        if (floats > cap) {
            msr_free(buf);
            cap = floats;
            if ((buf = msr_malloc(cap * sizeof *buf)) == NULL) {
                st = msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a piece of %zu floats",
                             cap);
                break;
            }
        }
        int ok = 1;
        st = part ? piece_read_part(src, rank, &r, &pn, crcs, buf, &ok)
                  : piece_read(src, rank, &p->h, &r, buf, &crc);
        if (st != MSR_OK) {
            st = msr_train_ckpt_piece_failed(tr, map, p, rank, &r, st);
            break;
        }
        if (part)
            crc = ok ? r.crc : ~r.crc; /* its chunks' crcs hold: as the piece's would */
        r.params = buf;
        r.m = buf + r.n;
        r.v = buf + 2 * r.n;
        if ((st = msr_train_ckpt_piece_check(tr, map, p, rank, &r, crc)) != MSR_OK)
            break;
        payload_t one = {NULL, p->h, &r, 1, 0};
        msr_train_ckpt_apply(tr, map, &one, cover);
    }
    if (st == MSR_OK && pn.need != NULL && !parts)
        st = msr_train_ckpt_chunks_check(tr, map, p, src, rank);
    msr_free(pn.need);
    msr_free(t.b);
    msr_free(buf);
    return st;
}
