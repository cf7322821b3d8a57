/* A restore read in parts checks each piece with the CRCs its read gave
 * (msr_trainer_read_t's crc_p, combined chunk by chunk) and passes over no
 * byte again: a read that reports a wrong CRC for intact bytes is refused,
 * naming the piece, at a read chunk's first and last byte, the bound and
 * one past; a payload cut short inside a piece (its read fails) is refused
 * naming the file, the piece's tensor and the read's own error, cut at the
 * piece's first byte, a read chunk's bound, its last byte and one past
 * (then the next piece fails), the chunk table left readable; a payload
 * cut short inside its chunk table is refused naming it (read after the
 * pieces, when the restore needs them whole); the trainer asks the CRC
 * of every byte of every piece; a restore that failed so is redone whole
 * from good reads; and a rank that needs part of a piece reads only its
 * chunks, each run checked. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/err.h"
#include "parallel/ckpt.h"
#include "parallel/ckpt_full.h"
#include "parallel/train.h"
#include "parallel/train_ckpt_impl.h"
#include "tests/parallel/ckpt_support.h"
#include "tests/runner.h"

static const char *const META = "a test run";

/* One block of 192 channels: its MLP's matrices hold 147456 elements each,
 * so the saved pieces span several read chunks (MSR_TCKPT_READ_CHUNK). */
static msr_train_config_t config(void)
{
    return ckpt_test_config(1, 192, 2);
}

/* The saved payloads, read in part; the read that covers payload byte
 * `wrong` of rank `wrong_rank` reports a CRC one bit off (its bytes
 * intact). */
typedef struct src {
    void *buf[2];
    size_t len[2];
    int n;
    int wrong_rank;
    uint64_t wrong;     /* UINT64_MAX: every CRC right */
    uint64_t cut;       /* rank wrong_rank's payload ends here (UINT64_MAX: whole) ... */
    uint64_t cut_end;   /* ... as far as its bytes before this go (UINT64_MAX: all) */
    uint64_t crc_bytes; /* bytes read with their CRC asked for */
    uint64_t asked;     /* bytes read, all of them */
} src_t;

static msr_status_t no_fetch(void *arg, int rank, void **buf_p, size_t *len_p)
{
    (void)arg, (void)rank, (void)buf_p, (void)len_p;
    return MSR_ERR_NOT_FOUND;
}

static msr_status_t read_part(void *arg, int rank, uint64_t offset, void *buf, size_t len,
                              uint64_t *total_p, uint32_t *crc_p)
{
    src_t *s = arg;
    if (rank < 0 || rank >= s->n || offset > s->len[rank] || len > s->len[rank] - offset)
        return msr_err(MSR_ERR_CORRUPT, "test: no bytes [%llu, +%zu) in rank %d's payload",
                       (unsigned long long)offset, len, rank);
    if (rank == s->wrong_rank && s->cut < offset + len && offset < s->cut_end)
        return msr_err(MSR_ERR_CORRUPT, "test: rank %d's payload ends early, at byte %llu", rank,
                       (unsigned long long)s->cut);
    memcpy(buf, (const char *)s->buf[rank] + offset, len);
    s->asked += len;
    if (total_p != NULL)
        *total_p = s->len[rank];
    if (crc_p != NULL) {
        *crc_p = msr_crc32(0, buf, len);
        if (rank == s->wrong_rank && s->wrong >= offset && s->wrong < offset + len)
            *crc_p ^= 1u;
        s->crc_bytes += len;
    }
    return MSR_OK;
}

/* tr's state equals want's, bitwise. */
static void check_same_state(msr_trainer_t *tr, msr_trainer_t *want)
{
    size_t P = want->model->num_params;
    MSR_CHECK(memcmp(tr->model->params, want->model->params, P * sizeof(float)) == 0);
    MSR_CHECK(memcmp(tr->dp->opt->m, want->dp->opt->m, P * sizeof(float)) == 0);
    MSR_CHECK(memcmp(tr->dp->opt->v, want->dp->opt->v, P * sizeof(float)) == 0);
    MSR_CHECK_EQ(tr->step, want->step);
}

/* Restores s into tr with rank's payload cut at byte cut: refused, the
 * message naming the file, the tensor, elements [lo, hi) and the read's
 * own error. */
static void check_cut(msr_trainer_t *tr, src_t *s, int rank, uint64_t step, uint64_t cut,
                      uint64_t lo, uint64_t hi)
{
    char want[192], why[80];
    snprintf(want, sizeof want, "train: step-%llu/rank-%d.bin: reading the piece of tensor ",
             (unsigned long long)step, rank);
    snprintf(why, sizeof why, " (elements [%llu, %llu) of the whole model): test: rank %d's",
             (unsigned long long)lo, (unsigned long long)hi, rank);
    s->wrong_rank = rank;
    s->cut = cut;
    MSR_CHECK_STATUS(msr_trainer_restore_parts(tr, META, s->n, no_fetch, read_part, s),
                     MSR_ERR_CORRUPT);
    MSR_CHECK_MSG(strncmp(msr_err_msg(), want, strlen(want)) == 0 &&
                      strstr(msr_err_msg(), why) != NULL &&
                      strstr(msr_err_msg(), "payload ends early, at byte") != NULL,
                  "cut at byte %llu: %s", (unsigned long long)cut, msr_err_msg());
    s->cut = UINT64_MAX;
}

/* Every piece of rank's payload cut at its first byte, a read chunk's
 * bound, its last byte, and one past its end (the next piece then fails;
 * past the last piece, nothing is cut), the chunk table after the pieces
 * left whole; then the payload cut at the chunk table's first byte. */
static void cut_checks(msr_trainer_t *tr, src_t *s, int rank, const msr_tckpt_header_t *h,
                       const msr_tckpt_range_t *r, uint32_t n)
{
    MSR_CHECK(h->version == 4 && n > 0 && r[0].chunks_offset > 0);
    s->cut_end = r[0].chunks_offset;
    for (uint32_t k = 0; k < n; k++) {
        uint64_t bytes = 12 * r[k].n, c0 = MSR_TCKPT_READ_CHUNK;
        uint64_t at[] = {0, c0, bytes - 1};
        for (size_t j = 0; j < sizeof at / sizeof at[0]; j++) {
            if (at[j] < bytes)
                check_cut(tr, s, rank, h->step, r[k].offset + at[j], r[k].lo, r[k].lo + r[k].n);
        }
        if (k + 1 < n)
            check_cut(tr, s, rank, h->step, r[k].offset + bytes, r[k + 1].lo,
                      r[k + 1].lo + r[k + 1].n);
    }
    s->cut_end = UINT64_MAX;
    char want[160];
    snprintf(want, sizeof want,
             "train: step-%llu/rank-%d.bin: reading its chunk table: test: rank %d's payload ends "
             "early",
             (unsigned long long)h->step, rank, rank);
    s->wrong_rank = rank;
    s->cut = r[0].chunks_offset;
    MSR_CHECK_STATUS(msr_trainer_restore_parts(tr, META, s->n, no_fetch, read_part, s),
                     MSR_ERR_CORRUPT);
    MSR_CHECK_MSG(strncmp(msr_err_msg(), want, strlen(want)) == 0, "cut at its chunk table: %s",
                  msr_err_msg());
    s->cut = UINT64_MAX;
}

/* Restores s (saved by s->n ranks) into a fresh trainer, with a wrong CRC
 * reported for each of the bytes around the read chunks' bounds of each
 * piece (refused, naming it), then with right ones (restored as saved). */
static void restore_checks(msr_trainer_t *saved, msr_dataset_t *ds, src_t *s)
{
    msr_train_config_t c = config();
    c.seed = 10; /* another start: the restore must write every element */
    msr_trainer_t *tr;
    MSR_CHECK_OK(msr_trainer_create(&c, ds, NULL, &tr));
    uint64_t piece_bytes = 0;
    int spans = 0; /* pieces of more than one read chunk */
    for (int rank = 0; rank < s->n; rank++) {
        msr_tckpt_header_t h;
        msr_tckpt_range_t *r;
        uint32_t n;
        MSR_CHECK_OK(msr_tckpt_decode(s->buf[rank], s->len[rank], "test", &h, &r, &n));
        for (uint32_t k = 0; k < n; k++) {
            uint64_t bytes = 12 * r[k].n, c0 = MSR_TCKPT_READ_CHUNK;
            uint64_t at[] = {0, c0 - 1, c0, bytes - 1};
            piece_bytes += bytes;
            spans += bytes > c0;
            for (size_t j = 0; j < sizeof at / sizeof at[0]; j++) {
                if (at[j] >= bytes)
                    continue;
                char want[128];
                snprintf(want, sizeof want, "(elements [%llu, %llu) of the whole model)",
                         (unsigned long long)r[k].lo, (unsigned long long)(r[k].lo + r[k].n));
                s->wrong_rank = rank;
                s->wrong = r[k].offset + at[j];
                MSR_CHECK_STATUS(msr_trainer_restore_parts(tr, META, s->n, no_fetch, read_part, s),
                                 MSR_ERR_CORRUPT);
                MSR_CHECK_MSG(strstr(msr_err_msg(), "the piece of tensor ") != NULL &&
                                  strstr(msr_err_msg(), want) != NULL &&
                                  strstr(msr_err_msg(), "does not match its CRC") != NULL,
                              "byte %llu of a piece: %s", (unsigned long long)at[j], msr_err_msg());
            }
        }
        s->wrong = UINT64_MAX;
        cut_checks(tr, s, rank, &h, r, n);
        msr_free(r);
    }
    MSR_CHECK_MSG(spans > 0, "no piece spans two read chunks");
    s->wrong = UINT64_MAX;
    s->crc_bytes = 0;
    MSR_CHECK_OK(msr_trainer_restore_parts(tr, META, s->n, no_fetch, read_part, s));
    MSR_CHECK_EQ(s->crc_bytes, piece_bytes); /* every piece's byte, once */
    check_same_state(tr, saved);
    msr_trainer_destroy(tr);
}

static void test_restore_uses_read_crc(void)
{
    msr_dataset_t *ds;
    msr_train_config_t c = config();
    msr_trainer_t *tr = ckpt_test_trainer(&c, 2, &ds);
    src_t s = {.n = 1, .cut = UINT64_MAX, .cut_end = UINT64_MAX};
    MSR_CHECK_OK(msr_trainer_snapshot(tr, META, &s.buf[0], &s.len[0])); /* the same layout */
    restore_checks(tr, ds, &s);
    msr_free(s.buf[0]);
    msr_trainer_destroy(tr);
    msr_dataset_destroy(ds);
}

/* Saved by 2 ranks in slices (parallel/ckpt_full.h): resharded into 1. */
static void test_resharded_restore_uses_read_crc(void)
{
    msr_dataset_t *ds;
    msr_train_config_t c = config();
    msr_trainer_t *tr = ckpt_test_trainer(&c, 1, &ds);
    src_t s = {.n = 2, .cut = UINT64_MAX, .cut_end = UINT64_MAX};
    ckpt_test_save_slices(tr, 2, META, s.buf, s.len);
    restore_checks(tr, ds, &s);
    for (int r = 0; r < 2; r++)
        msr_free(s.buf[r]);
    msr_trainer_destroy(tr);
    msr_dataset_destroy(ds);
}

/* Restores s's payload of rank 0 into tr through a map of one run (the
 * whole model's elements [a, a + n), as a rank that holds only those):
 * its header, then msr_train_ckpt_read_apply. *asked_p: the bytes the
 * apply asked for. */
static msr_status_t apply_run_only(msr_trainer_t *tr, src_t *s, size_t a, size_t n,
                                   uint64_t *asked_p)
{
    msr_ckpt_run_t run = {a, a, n};
    msr_ckpt_map_t map = {1, &run, &run};
    source_t src = {no_fetch, read_part, s};
    payload_t p;
    msr_status_t st = msr_train_ckpt_read_head(&src, 0, &p);
    uint64_t before = s->asked;
    if (st == MSR_OK)
        st = msr_dp_load_begin(tr->dp);
    if (st == MSR_OK) {
        st = msr_train_ckpt_read_apply(tr, &map, &p, &src, 0, NULL);
        char why[MSR_ERR_TEXT_MAX];
        snprintf(why, sizeof why, "%s", msr_err_msg_or(st));
        (void)msr_dp_load_end(tr->dp, 0, 1); /* frees the load's state (not all was loaded) */
        if (st != MSR_OK)
            msr_err_set("%s", why);
    }
    *asked_p = s->asked - before;
    payload_free(&p);
    return st;
}

/* A piece read in parts (version 4): a rank that holds the whole model's
 * elements [5000, 8000) only (in wte's piece, elements [0, 49152)) reads
 * that piece's chunk CRCs (12 bytes a chunk of 1024 elements) and its
 * chunks 4..7 of the parameters, m and v (3 runs of 16 KiB), nothing else,
 * and loads those elements as saved; a float damaged outside those
 * chunks is not read, one inside is refused naming the piece, and a
 * damaged header field (the writer's ZeRO stage, which only the pieces'
 * CRCs cover) is refused by the chunk CRCs' sum, before any chunk is read
 * (the chunks' own CRCs do not cover it). */
static void test_parts_of_a_piece(void)
{
    msr_dataset_t *ds;
    msr_train_config_t c = config();
    msr_trainer_t *saved = ckpt_test_trainer(&c, 2, &ds);
    src_t s = {
        .n = 1, .wrong_rank = -1, .wrong = UINT64_MAX, .cut = UINT64_MAX, .cut_end = UINT64_MAX};
    MSR_CHECK_OK(msr_trainer_snapshot(saved, META, &s.buf[0], &s.len[0]));
    msr_tckpt_header_t h;
    msr_tckpt_range_t *r;
    uint32_t np;
    MSR_CHECK_OK(msr_tckpt_decode(s.buf[0], s.len[0], "test", &h, &r, &np));
    MSR_CHECK(np > 1 && r[0].lo == 0 && r[0].n >= 8192);
    const size_t a = 5000, n = 3000, k = msr_tckpt_chunks(r[0].n), hl = (size_t)r[0].offset;
    const uint64_t want = 12 * k + 3 * 4096 * sizeof(float); /* the table's, 3 runs of 4 chunks */
    c.seed = 10; /* another start: what is loaded must be the checkpoint's */
    msr_trainer_t *tr;
    MSR_CHECK_OK(msr_trainer_create(&c, ds, NULL, &tr));
    uint64_t asked = 0;
    MSR_CHECK_OK(apply_run_only(tr, &s, a, n, &asked));
    MSR_CHECK_EQ(asked, want);
    MSR_CHECK(memcmp(tr->model->params + a, saved->model->params + a, n * sizeof(float)) == 0);
    MSR_CHECK(memcmp(tr->dp->opt->m + a, saved->dp->opt->m + a, n * sizeof(float)) == 0);
    MSR_CHECK(memcmp(tr->dp->opt->v + a, saved->dp->opt->v + a, n * sizeof(float)) == 0);
    unsigned char *b = s.buf[0];
    /* a float of chunk 19 of the parameters: not read */
    b[hl + 4 * 19500] ^= 0x10;
    MSR_CHECK_OK(apply_run_only(tr, &s, a, n, &asked));
    b[hl + 4 * 19500] ^= 0x10;
    /* a float of chunk 6 of m: refused */
    b[hl + 4 * (r[0].n + 6500)] ^= 0x10;
    MSR_CHECK_STATUS(apply_run_only(tr, &s, a, n, &asked), MSR_ERR_CORRUPT);
    MSR_CHECK_MSG(strstr(msr_err_msg(),
                         "step-2/rank-0.bin: the piece of tensor wte (elements [0, ") != NULL &&
                      strstr(msr_err_msg(), "does not match its CRC") != NULL,
                  "%s", msr_err_msg());
    b[hl + 4 * (r[0].n + 6500)] ^= 0x10;
    /* the writer's ZeRO stage: refused with the table read, no chunk */
    b[64] ^= 0x01;
    MSR_CHECK_STATUS(apply_run_only(tr, &s, a, n, &asked), MSR_ERR_CORRUPT);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "the piece of tensor wte (elements [0, ") != NULL, "%s",
                  msr_err_msg());
    MSR_CHECK_EQ(asked, 12 * k);
    b[64] ^= 0x01;
    MSR_CHECK_OK(apply_run_only(tr, &s, a, n, &asked));
    msr_free(r);
    msr_free(s.buf[0]);
    msr_trainer_destroy(tr);
    msr_trainer_destroy(saved);
    msr_dataset_destroy(ds);
}

static const msr_test_t tests[] = {
    {"restore_uses_read_crc", test_restore_uses_read_crc, 60},
    {"resharded_restore_uses_read_crc", test_resharded_restore_uses_read_crc, 60},
    {"parts_of_a_piece", test_parts_of_a_piece, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
