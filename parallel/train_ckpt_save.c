/* The trainer's checkpoint written into its file a piece at a time
 * (msr_trainer_save, see train.h): each piece's parameters (its offloaded
 * blocks read one at a time), its moments (read from their file when
 * offloaded), each piece's CRC and the chunk table's CRCs as the bytes go
 * out, the head written last. */
#include "parallel/train.h"
#include "parallel/train_impl.h"
#include "parallel/train_ckpt_impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/err.h"
#include "base/status.h"
#include "msrun/checkpoint.h"

/* A save written into its file a piece at a time (msr_trainer_save): the
 * writer, the payload's head and its pieces decoded from it, the CRC of
 * the piece being written, the chunk table as it fills (its bytes so far,
 * the CRC of the chunk being written, its bytes and what is left of its
 * array's), and the buffers the offloaded parts are read into (a piece's
 * moments: m then v; a block's parameters). */
typedef struct save_stream {
    msr_trainer_t *tr;
    msr_ckpt_writer_t *w;
    void *head;
    size_t hl, len;
    msr_tckpt_header_t h;
    msr_tckpt_range_t *d;
    uint32_t n, crc;
    unsigned char *table;
    size_t table_at, table_len;
    uint32_t chunk_crc;
    size_t chunk_bytes, array_left;
    float *mv;
    msr_dp_blk_t blk, eblk; /* eblk: the experts' block (tr->epf) */
} save_stream_t;

/* msr_dp_span_fn: n floats at p into the file (one write), into the
 * piece's CRC and its chunks' (CRC'd a chunk's part at a time, each
 * chunk's crc into the table when it is complete; the writer CRCs the
 * file's bytes again: a write per chunk would cost more). */
static msr_status_t stream_out(void *arg, const float *p, size_t n)
{
    save_stream_t *s = arg;
    const unsigned char *b = (const unsigned char *)p;
    size_t left = n * sizeof(float);
    const size_t chunk = MSR_TCKPT_CRC_CHUNK * sizeof(float);
    if (left > s->array_left)
        return msr_err(MSR_ERR_INTERNAL, "train: a save wrote past its piece's array");
    msr_status_t st = msr_ckpt_writer_write(s->w, b, left, NULL);
    if (st != MSR_OK)
        return st;
    while (left > 0) {
        size_t take = MSR_MIN(left, chunk - s->chunk_bytes);
        uint32_t crc = msr_crc32(0, b, take);
        s->crc = msr_crc32_combine(s->crc, crc, take);
        s->chunk_crc = msr_crc32_combine(s->chunk_crc, crc, take);
        s->chunk_bytes += take;
        s->array_left -= take;
        if (s->chunk_bytes == chunk || s->array_left == 0) {
            if (s->table_at + 4 > s->table_len)
                return msr_err(MSR_ERR_INTERNAL, "train: a save's chunk table overflows");
            memcpy(s->table + s->table_at, &s->chunk_crc, 4);
            s->table_at += 4;
            s->chunk_crc = 0;
            s->chunk_bytes = 0;
        }
        b += take;
        left -= take;
    }
    return MSR_OK;
}

/* The next array of a piece of c elements begins. */
static void stream_array(save_stream_t *s, size_t c)
{
    s->array_left = c * sizeof(float);
    s->chunk_bytes = 0;
    s->chunk_crc = 0;
}

/* Piece j of the payload: elements [at, at + c) of saved range x. */
static msr_status_t stream_piece(save_stream_t *s, const saved_range_t *x, uint64_t at, size_t c,
                                 uint32_t j)
{
    if (j >= s->n || s->d[j].lo != x->r.lo + at || s->d[j].n != c)
        return msr_err(MSR_ERR_INTERNAL, "train: the shard's piece %u is not its range's", j);
    s->crc = msr_tckpt_piece_crc_start(&s->h, &s->d[j]);
    stream_array(s, c);
    msr_status_t st =
        x->experts && s->tr->epf != NULL
            ? msr_train_experts_spans(s->tr, s->tr->eshard_lo + x->es + at, c, &s->eblk, stream_out,
                                      s)
            : msr_dp_params_spans(s->tr->dp, x->r.params + at, c, &s->blk, stream_out, s);
    const float *m = NULL, *v = NULL;
    if (x->moff == NO_MOFF) {
        m = x->r.m + at;
        v = x->r.v + at;
    } else if (st == MSR_OK) {
        m = s->mv;
        v = s->mv + c;
        st = saved_moments_get(s->tr, x, (size_t)at, c, s->mv, s->mv + c);
    }
    if (st == MSR_OK && s->array_left != 0)
        st = msr_err(MSR_ERR_INTERNAL, "train: a save's piece %u lacks parameters", j);
    if (st == MSR_OK) {
        stream_array(s, c);
        st = stream_out(s, m, c);
    }
    if (st == MSR_OK) {
        stream_array(s, c);
        st = stream_out(s, v, c);
    }
    if (st == MSR_OK)
        msr_tckpt_head_set_crc(s->head, s->hl, s->n, j, s->crc);
    return st;
}

/* The head of l's payload (header h), its pieces, and the buffers for
 * what is offloaded: a piece's moments, the largest offloaded piece's; a
 * block (read through the store, or aligned for a read of the file's
 * from another thread: s->blk.shared). */
static msr_status_t stream_begin(save_stream_t *s, const range_list_t *l,
                                 const msr_tckpt_range_t *r, const msr_tckpt_header_t *h)
{
    msr_status_t st = msr_tckpt_encode_head(h, r, (uint32_t)l->n, &s->head, &s->hl, &s->len);
    if (st == MSR_OK)
        st = msr_tckpt_decode_head(s->head, s->hl, s->len, "the shard being saved", &s->h, &s->d,
                                   &s->n);
    size_t most = 0, bn = msr_dp_params_block_floats(s->tr->dp);
    if (st == MSR_OK) { /* the chunk table: after the pieces, to the payload's end */
        s->table_len = s->n > 0 ? s->len - (size_t)s->d[0].chunks_offset : 0;
        if (s->table_len > 0 && (s->table = msr_malloc(s->table_len)) == NULL)
            st = msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a chunk table of %zu bytes",
                         s->table_len);
    }
    for (size_t k = 0; k < l->n; k++)
        if (l->s[k].moff != NO_MOFF)
            most = MSR_MAX(most, MSR_MIN(l->s[k].r.n, (size_t)MSR_TCKPT_PIECE_MAX));
    if (st == MSR_OK && most > 0 && (s->mv = msr_malloc(2 * most * sizeof(float))) == NULL)
        st = msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a piece's moments");
    size_t bb = s->blk.shared ? msr_dp_params_block_bytes(s->tr->dp) : bn * sizeof(float);
    void *b = NULL;
    if (st == MSR_OK && bn > 0 &&
        (s->blk.shared ? posix_memalign(&b, MSR_OFFLOAD_ALIGN, bb) != 0
                       : (b = msr_malloc(bb)) == NULL))
        st = msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a block's parameters");
    s->blk.buf = b;
    const msr_params_t *epf = s->tr->epf;
    if (st == MSR_OK && epf != NULL &&
        (s->eblk.shared ? posix_memalign(&b, MSR_OFFLOAD_ALIGN, msr_params_slot_bytes(epf)) != 0
                        : (b = msr_malloc(s->tr->ed_per * sizeof(float))) == NULL))
        st = msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a block of the experts");
    else if (st == MSR_OK && epf != NULL)
        s->eblk.buf = b;
    return st;
}

/* The save of header h and ranges l (r: their encoder's table), the
 * trainer's state read as the bytes go out; done(arg) (if any) is called
 * once, when nothing more of the state is read (the pieces written, or a
 * failure before), before the chunk table is written and the save's
 * agreement. shared: a thread other than the steps' (offloaded blocks
 * read from their file, not through the store). */
static msr_status_t save_run(msr_trainer_t *tr, const msr_tckpt_header_t *h, const range_list_t *l,
                             const msr_tckpt_range_t *r, msr_ctx_t *ctx, const char *dir,
                             int64_t step, int keep, int shared, void (*done)(void *), void *arg)
{
    save_stream_t s = {.tr = tr, .blk = {NULL, SIZE_MAX, shared}, .eblk = {NULL, SIZE_MAX, shared}};
    msr_status_t st = stream_begin(&s, l, r, h);
    if (st == MSR_OK)
        st = msr_ckpt_writer_open(ctx, dir, step, s.hl, &s.w);
    uint32_t j = 0;
    for (size_t k = 0; k < l->n && st == MSR_OK; k++)
        for (uint64_t at = 0; at < l->s[k].r.n && st == MSR_OK; at += MSR_TCKPT_PIECE_MAX, j++)
            st = stream_piece(&s, &l->s[k], at,
                              (size_t)MSR_MIN(l->s[k].r.n - at, (uint64_t)MSR_TCKPT_PIECE_MAX), j);
    msr_status_t est = msr_dp_params_spans_end(tr->dp, &s.blk);
    if (done != NULL)
        done(arg);
    if (st == MSR_OK && j != s.n)
        st = msr_err(MSR_ERR_INTERNAL, "train: %u of the shard's %u pieces written", j, s.n);
    if (st == MSR_OK && s.table_at != s.table_len)
        st = msr_err(MSR_ERR_INTERNAL, "train: %zu of the chunk table's %zu bytes made", s.table_at,
                     s.table_len);
    if (st == MSR_OK && s.table_len > 0)
        st = msr_ckpt_writer_write(s.w, s.table, s.table_len, NULL);
    /* a failure joins the save's agreement as this rank's verdict: the
     * other ranks end at once, naming this one, instead of waiting */
    if (st == MSR_OK)
        st = msr_ckpt_writer_commit(s.w, s.head, keep);
    else if (s.w != NULL)
        st = msr_ckpt_writer_fail(s.w, st);
    else
        st = msr_ckpt_save_fail(ctx, dir, step, st);
    msr_free(s.head);
    msr_free(s.d);
    msr_free(s.mv);
    if (shared) {
        free(s.blk.buf);
        free(s.eblk.buf);
    } else {
        msr_free(s.blk.buf);
        msr_free(s.eblk.buf);
    }
    msr_free(s.table);
    return st != MSR_OK ? st : est;
}

msr_status_t msr_trainer_save(msr_trainer_t *tr, const char *meta, msr_ctx_t *ctx, const char *dir,
                              int64_t step, int keep)
{
    range_list_t l;
    msr_tckpt_range_t *r;
    msr_status_t st = msr_train_ckpt_shard_ranges(tr, &l, &r);
    if (st != MSR_OK) /* its failure still joins the save's agreement */
        return msr_ckpt_save_fail(ctx, dir, step, st);
    msr_tckpt_header_t h = msr_train_ckpt_shard_header(tr, meta);
    st = save_run(tr, &h, &l, r, ctx, dir, step, keep, 0, NULL, NULL);
    msr_free(l.s);
    msr_free(r);
    return st;
}

/* ---- a snapshot copied, or streamed, by another thread
 * (msr_trainer_snap_take) ---- */

struct msr_trainer_snap {
    msr_trainer_t *tr;    /* streamed (moments or parameters in a file): the trainer */
    msr_tckpt_header_t h; /* h.meta: meta below */
    msr_tckpt_range_t *r; /* the pieces' places in the trainer's memory */
    uint32_t n;
    range_list_t l; /* streamed: the ranges saved, where each one's moments are */
    char meta[];
};

msr_status_t msr_trainer_snap_take(msr_trainer_t *tr, const char *meta, msr_trainer_snap_t **snap_p)
{
    *snap_p = NULL;
    /* the blocks written back by the last update on the file before
     * another thread reads them there */
    msr_status_t st = msr_dp_params_flush(tr->dp);
    if (st == MSR_OK && tr->epf != NULL && (st = msr_train_experts_cursor_end(tr)) == MSR_OK)
        st = msr_params_flush(tr->epf);
    if (st != MSR_OK)
        return st;
    size_t ml = strlen(meta) + 1;
    msr_trainer_snap_t *s = msr_calloc(1, sizeof *s + ml);
    if (s == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a snapshot");
    st = msr_train_ckpt_shard_ranges(tr, &s->l, &s->r);
    if (st != MSR_OK) {
        msr_free(s);
        return st;
    }
    memcpy(s->meta, meta, ml);
    s->h = msr_train_ckpt_shard_header(tr, s->meta);
    s->n = (uint32_t)s->l.n;
    if (s->l.offloaded || msr_dp_params_block_floats(tr->dp) > 0 || tr->epf != NULL) {
        s->tr = tr; /* streamed from the files as the bytes go out */
    } else {
        msr_free(s->l.s);
        s->l.s = NULL;
    }
    *snap_p = s;
    return MSR_OK;
}

int msr_trainer_snap_streamed(const msr_trainer_snap_t *snap)
{
    return snap != NULL && snap->tr != NULL;
}

msr_status_t msr_trainer_snap_copy(const msr_trainer_snap_t *snap, void **buf_p, size_t *len_p)
{
    if (msr_trainer_snap_streamed(snap))
        return msr_err(MSR_ERR_INVALID_ARG,
                       "train: a snapshot of moments or parameters in a file is saved "
                       "(msr_trainer_snap_save), not copied");
    return msr_tckpt_encode_unsealed(&snap->h, snap->r, snap->n, buf_p, len_p);
}

msr_status_t msr_trainer_snap_save(const msr_trainer_snap_t *snap, msr_ctx_t *ctx, const char *dir,
                                   int64_t step, int keep, void (*read_done)(void *), void *arg)
{
    if (!msr_trainer_snap_streamed(snap)) {
        if (read_done != NULL)
            read_done(arg);
        return msr_ckpt_save_fail(
            ctx, dir, step,
            msr_err(MSR_ERR_INVALID_ARG,
                    "train: a snapshot held in memory is copied (msr_trainer_snap_copy), not "
                    "saved from the trainer"));
    }
    return save_run(snap->tr, &snap->h, &snap->l, snap->r, ctx, dir, step, keep, 1, read_done, arg);
}

void msr_trainer_snap_free(msr_trainer_snap_t *snap)
{
    if (snap == NULL)
        return;
    msr_free(snap->l.s);
    msr_free(snap->r);
    msr_free(snap);
}
