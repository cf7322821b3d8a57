/* Checkpoint save and load throughput as train_gpt's checkpoints see it: a
 * worker under msrun that writes and reads the trainer's payload format
 * (parallel/ckpt.h) through libmsrun's checkpoint files, every rank its
 * share of a model's state (parameters and AdamW's m and v, 12 bytes a
 * parameter), and rank 0 prints one line (bench/ckpt/ckpt_bench.sh makes
 * the table):
 *
 *   mode=save np=4 bytes=360000192 s=1.52 stall_s=1.52
 *
 * s runs from a barrier to the last rank's return (for a save, every
 * rank's state durable and the step committed; for a load, every rank's
 * share in its buffers, every CRC checked); stall_s is what a training
 * step waits (the copy for save-async). bytes counts the files
 * (rank-R.bin, headers included).
 *
 *   ckpt_bench MODE DIR PARAMS
 *     save        encode with the pieces' CRCs, msr_ckpt_save (train_gpt)
 *     save-async  the step's copy without CRCs, then a thread seals and
 *                 saves it (train_gpt --ckpt-async)
 *     load        every rank its own file (same layout) through one
 *                 reader (msr_ckpt_reader_*): the header and range table,
 *                 then each piece's parameters and moments read straight
 *                 into its share a chunk at a time, each chunk CRC'd once
 *                 as it is read, each piece's CRC and the state's combined
 *                 from those (msr_ckpt_reader_read_crc)
 *     reshard     a world of another size: every rank reads the header of
 *                 every saved file and only the pieces that overlap its
 *                 share (one reader pointed at each file in turn, a chunk
 *                 at a time; a piece all in the share straight into it,
 *                 one cut by the share's edge through one piece's
 *                 buffer), checking each piece's CRC chunk by chunk
 *                 (train_gpt's resume in another layout)
 *
 * A rank's share is msr_ckpt_slice of PARAMS over the world (ckpt_full.h),
 * as the data-parallel ranks of a ZeRO-3 job or the CUDA trainer save. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "msrun/msrun.h"
#include "parallel/ckpt.h"
#include "parallel/ckpt_full.h"
#include "parallel/ckpt_map.h"

#define BENCH_STEP 1
#define META       "ckpt_bench: flat state"

/* One rank's share of the state: global elements [lo, lo + n). */
typedef struct share {
    size_t lo, n;
    float *params, *m, *v;
} share_t;

/* The background writer of save-async. */
typedef struct writer {
    msr_ctx_t *ctx;
    const char *dir;
    void *buf;
    size_t len;
    msr_status_t st;
} writer_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(msr_ctx_t *ctx, const char *what, msr_status_t st)
{
    fprintf(stderr, "ckpt_bench: rank %d: %s: %s: %s\n", ctx != NULL ? msr_rank(ctx) : -1, what,
            msr_status_str(st), msr_last_error());
    return 1;
}

static msr_status_t share_alloc(share_t *s, int rank, int world, size_t P, int fill)
{
    size_t hi;
    msr_ckpt_slice(rank, world, P, &s->lo, &hi);
    s->n = hi - s->lo;
    s->params = msr_malloc((s->n + 1) * sizeof(float));
    s->m = msr_malloc((s->n + 1) * sizeof(float));
    s->v = msr_malloc((s->n + 1) * sizeof(float));
    if (s->params == NULL || s->m == NULL || s->v == NULL)
        return MSR_ERR_NO_MEMORY;
    for (size_t i = 0; i < s->n; i++) { /* touched: no page is faulted in while timed */
        float x = fill ? (float)((s->lo + i) % 9973) * 1e-3f : 0.0f;
        s->params[i] = x;
        s->m[i] = x * 0.5f;
        s->v[i] = x * 0.25f;
    }
    return MSR_OK;
}

static void share_free(share_t *s)
{
    msr_free(s->params);
    msr_free(s->m);
    msr_free(s->v);
}

static msr_tckpt_header_t header_of(msr_ctx_t *ctx, size_t P)
{
    msr_tckpt_header_t h = {.step = BENCH_STEP,
                            .num_params = P,
                            .rank = (uint32_t)msr_rank(ctx),
                            .world = (uint32_t)msr_world_size(ctx),
                            .zero = 3,
                            .meta = META,
                            .tp = 1,
                            .pp = 1,
                            .cp = 1,
                            .ep = 1,
                            .chunks = 1};
    return h;
}

static void *writer_thread(void *arg)
{
    writer_t *w = arg;
    w->st = msr_tckpt_seal(w->buf, w->len);
    if (w->st == MSR_OK)
        w->st = msr_ckpt_save(w->ctx, w->dir, BENCH_STEP, w->buf, w->len, 0);
    return NULL;
}

/* Saves s (async: the copy in *stall_p, the rest in a thread joined
 * before returning); *bytes_p gets the payload's length. */
static msr_status_t bench_save(msr_ctx_t *ctx, const char *dir, size_t P, const share_t *s,
                               int async, double *stall_p, size_t *bytes_p)
{
    msr_tckpt_header_t h = header_of(ctx, P);
    msr_tckpt_range_t r = {s->lo, s->n, s->params, s->m, s->v};
    writer_t w = {ctx, dir, NULL, 0, MSR_OK};
    double t0 = now_s();
    msr_status_t st = async ? msr_tckpt_encode_unsealed(&h, &r, s->n > 0, &w.buf, &w.len)
                            : msr_tckpt_encode(&h, &r, s->n > 0, &w.buf, &w.len);
    *stall_p = now_s() - t0;
    if (st != MSR_OK)
        return st;
    *bytes_p = w.len;
    pthread_t th;
    if (async && pthread_create(&th, NULL, writer_thread, &w) == 0) {
        pthread_join(th, NULL);
        st = w.st;
    } else {
        st = msr_ckpt_save(ctx, dir, BENCH_STEP, w.buf, w.len, 0);
        *stall_p = now_s() - t0;
    }
    msr_free(w.buf);
    return st;
}

/* msr_ckpt_map_fn-like copy of the overlap of saved piece r into s. */
static void share_take(share_t *s, const msr_tckpt_range_t *r)
{
    size_t lo, n;
    if (!msr_ckpt_overlap(s->lo, s->n, r->lo, r->n, &lo, &n))
        return;
    memcpy(s->params + (lo - s->lo), r->params + (lo - r->lo), n * sizeof(float));
    memcpy(s->m + (lo - s->lo), r->m + (lo - r->lo), n * sizeof(float));
    memcpy(s->v + (lo - s->lo), r->v + (lo - r->lo), n * sizeof(float));
}

/* Reads len bytes at offset of rd into dst a chunk at a time, continuing
 * *crc_p from each chunk's CRC, computed by the read as the chunk arrived
 * (msr_crc32_combine): each byte CRC'd once, for the piece and the
 * reader's whole check alike, as train_gpt's resume does. */
static msr_status_t read_crc(msr_ckpt_reader_t *rd, uint64_t offset, void *dst, size_t len,
                             uint32_t *crc_p)
{
    unsigned char *b = dst;
    msr_status_t st = MSR_OK;
    for (size_t at = 0; at < len && st == MSR_OK;) {
        size_t c = len - at < MSR_TCKPT_READ_CHUNK ? len - at : MSR_TCKPT_READ_CHUNK;
        uint32_t chunk = 0;
        st = msr_ckpt_reader_read_crc(rd, offset + at, b + at, c, &chunk);
        if (st == MSR_OK)
            *crc_p = msr_crc32_combine(*crc_p, chunk, c);
        at += c;
    }
    return st;
}

/* Loads this rank's own file (same world and share): the header, then
 * each piece's parameters and moments straight into the share, in the
 * file's order (the reader checks the state's CRC at its end). */
/* Version 4: the chunk table after the pieces, read to the state's end (so
 * that the reader checks the whole state's CRC) and checked against the
 * pieces' crcs, as train_gpt's load of a whole payload does. */
static msr_status_t table_check(msr_ckpt_reader_t *rd, const msr_tckpt_header_t *h,
                                const msr_tckpt_range_t *r, uint32_t n, uint64_t total)
{
    uint64_t at = r[0].chunks_offset;
    unsigned char *t = NULL;
    if (at > total || (t = msr_malloc((size_t)(total - at) + 1)) == NULL)
        return MSR_ERR_CORRUPT;
    msr_status_t st = msr_ckpt_reader_read(rd, at, t, (size_t)(total - at));
    for (uint32_t k = 0; k < n && st == MSR_OK; k++) {
        if (!msr_tckpt_chunks_ok(h, &r[k], t + (r[k].chunks_offset - at)))
            st = MSR_ERR_CORRUPT;
    }
    msr_free(t);
    return st;
}

static msr_status_t bench_load(msr_ctx_t *ctx, const char *dir, share_t *s, size_t *bytes_p)
{
    unsigned char prefix[MSR_TCKPT_PREFIX_LEN];
    uint64_t total = 0;
    size_t hl = 0;
    msr_tckpt_header_t h;
    msr_tckpt_range_t *r = NULL;
    uint32_t n = 0, crc = 0;
    void *head = NULL;
    msr_ckpt_reader_t *rd = NULL;
    msr_status_t st = msr_ckpt_reader_open(ctx, dir, BENCH_STEP, msr_rank(ctx), 1, &rd, &total);
    if (st == MSR_OK)
        st = msr_ckpt_reader_read(rd, 0, prefix, sizeof prefix);
    if (st == MSR_OK)
        st = msr_tckpt_head_len(prefix, sizeof prefix, &hl);
    if (st == MSR_OK && (hl > total || (head = msr_malloc(hl)) == NULL))
        st = MSR_ERR_CORRUPT;
    if (st == MSR_OK)
        st = msr_ckpt_reader_read(rd, 0, head, hl);
    if (st == MSR_OK)
        st = msr_tckpt_decode_head(head, hl, (size_t)total, "own shard", &h, &r, &n);
    for (uint32_t k = 0; k < n && st == MSR_OK; k++) {
        size_t lo, cnt, bytes = (size_t)r[k].n * sizeof(float);
        if (!msr_ckpt_overlap(s->lo, s->n, r[k].lo, r[k].n, &lo, &cnt) || cnt != r[k].n) {
            st = MSR_ERR_CORRUPT; /* not this share's layout */
            break;
        }
        crc = msr_tckpt_piece_crc_start(&h, &r[k]);
        st = read_crc(rd, r[k].offset, s->params + (lo - s->lo), bytes, &crc);
        if (st == MSR_OK)
            st = read_crc(rd, r[k].offset + bytes, s->m + (lo - s->lo), bytes, &crc);
        if (st == MSR_OK)
            st = read_crc(rd, r[k].offset + 2 * bytes, s->v + (lo - s->lo), bytes, &crc);
        if (st == MSR_OK && h.version >= 3 && crc != r[k].crc)
            st = MSR_ERR_CORRUPT;
    }
    if (st == MSR_OK && h.version >= 4 && n > 0)
        st = table_check(rd, &h, r, n, total);
    if (st == MSR_OK && !msr_ckpt_reader_checked(rd))
        st = MSR_ERR_CORRUPT; /* the whole state was not read */
    msr_ckpt_reader_close(rd);
    msr_free(r);
    msr_free(head);
    *bytes_p = (size_t)total;
    return st;
}

/* Reads piece r, all of it in s, straight into s's parameters and
 * moments (no piece's buffer, no copy), as train_gpt's resume reads a
 * piece its rank holds whole; checks its CRC. */
static msr_status_t piece_in_place(msr_ckpt_reader_t *rd, const msr_tckpt_header_t *h,
                                   const msr_tckpt_range_t *r, share_t *s)
{
    size_t at = r->lo - s->lo, bytes = (size_t)r->n * sizeof(float);
    uint32_t crc = msr_tckpt_piece_crc_start(h, r);
    msr_status_t st = read_crc(rd, r->offset, s->params + at, bytes, &crc);
    if (st == MSR_OK)
        st = read_crc(rd, r->offset + bytes, s->m + at, bytes, &crc);
    if (st == MSR_OK)
        st = read_crc(rd, r->offset + 2 * bytes, s->v + at, bytes, &crc);
    if (st == MSR_OK && h->version >= 3 && crc != r->crc)
        st = MSR_ERR_CORRUPT;
    return st;
}

/* Reads from saved rank `rank`'s file the pieces that overlap s, each in
 * place when s holds all of it, else through one piece's buffer, checking
 * each against its CRC. *rd_p: the reader, opened by the first file and
 * pointed at each next one (its staging buffers set up once). *seen_p
 * gets the file's payload length. */
static msr_status_t reshard_one(msr_ctx_t *ctx, const char *dir, int rank, share_t *s,
                                msr_ckpt_reader_t **rd_p, float **buf_p, size_t *cap_p,
                                size_t *seen_p)
{
    unsigned char prefix[MSR_TCKPT_PREFIX_LEN];
    uint64_t total = 0;
    size_t hl = 0;
    msr_tckpt_header_t h;
    msr_tckpt_range_t *r = NULL;
    uint32_t n = 0;
    void *head = NULL;
    msr_ckpt_reader_t *rd = *rd_p; /* one open per file, not per chunk */
    msr_status_t st = rd != NULL
                          ? msr_ckpt_reader_reopen(rd, dir, BENCH_STEP, rank, 0, &total)
                          : msr_ckpt_reader_open(ctx, dir, BENCH_STEP, rank, 0, rd_p, &total);
    rd = *rd_p;
    if (st == MSR_OK)
        st = msr_ckpt_reader_read(rd, 0, prefix, sizeof prefix);
    if (st == MSR_OK)
        st = msr_tckpt_head_len(prefix, sizeof prefix, &hl);
    if (st == MSR_OK && (hl > total || (head = msr_malloc(hl)) == NULL))
        st = MSR_ERR_CORRUPT;
    if (st == MSR_OK)
        st = msr_ckpt_reader_read(rd, 0, head, hl);
    if (st == MSR_OK)
        st = msr_tckpt_decode_head(head, hl, (size_t)total, "a saved shard", &h, &r, &n);
    for (uint32_t k = 0; k < n && st == MSR_OK; k++) {
        size_t lo, cnt, floats = 3 * (size_t)r[k].n;
        if (!msr_ckpt_overlap(s->lo, s->n, r[k].lo, r[k].n, &lo, &cnt))
            continue;
        if (cnt == r[k].n) {
            st = piece_in_place(rd, &h, &r[k], s);
            continue;
        }
        if (floats > *cap_p) {
            msr_free(*buf_p);
            *cap_p = floats;
            if ((*buf_p = msr_malloc(floats * sizeof(float))) == NULL)
                st = MSR_ERR_NO_MEMORY;
        }
        /* a chunk at a time, its CRC continued while it is in the cache */
        uint32_t crc = msr_tckpt_piece_crc_start(&h, &r[k]);
        if (st == MSR_OK)
            st = read_crc(rd, r[k].offset, *buf_p, floats * sizeof(float), &crc);
        if (st != MSR_OK)
            break;
        r[k].params = *buf_p;
        r[k].m = *buf_p + r[k].n;
        r[k].v = *buf_p + 2 * r[k].n;
        if (h.version >= 3 && crc != r[k].crc)
            st = MSR_ERR_CORRUPT;
        else
            share_take(s, &r[k]);
    }
    msr_free(r);
    msr_free(head);
    *seen_p = (size_t)total;
    return st;
}

/* Loads s out of a checkpoint saved by another world: every saved file's
 * header, and the pieces s needs. *bytes_p: the saved payloads' length. */
static msr_status_t bench_reshard(msr_ctx_t *ctx, const char *dir, share_t *s, size_t *bytes_p)
{
    int64_t step = -1;
    int saved_world = 0;
    float *buf = NULL;
    size_t cap = 0, all = 0;
    msr_ckpt_reader_t *rd = NULL;
    msr_status_t st = msr_ckpt_latest_any(ctx, dir, &step, &saved_world);
    if (st == MSR_OK && step != BENCH_STEP)
        st = MSR_ERR_NOT_FOUND;
    for (int r = 0; r < saved_world && st == MSR_OK; r++) {
        size_t seen = 0;
        st = reshard_one(ctx, dir, r, s, &rd, &buf, &cap, &seen);
        all += seen + 48; /* and libmsrun's header of the file */
    }
    msr_ckpt_reader_close(rd);
    msr_free(buf);
    *bytes_p = all;
    return st;
}

/* The job's slowest rank's seconds, rank 0's figures otherwise. */
static msr_status_t job_max(msr_ctx_t *ctx, double *x)
{
    int world = msr_world_size(ctx);
    double *all = malloc((size_t)world * sizeof *all);
    if (all == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_status_t st = msr_allgather(ctx, x, sizeof *x, all);
    for (int r = 0; r < world && st == MSR_OK; r++)
        *x = all[r] > *x ? all[r] : *x;
    free(all);
    return st;
}

static msr_status_t run(msr_ctx_t *ctx, const char *mode, const char *dir, size_t P)
{
    int save = strncmp(mode, "save", 4) == 0, async = strcmp(mode, "save-async") == 0;
    share_t s = {0};
    double stall = 0.0;
    size_t bytes = 0;
    msr_status_t st = share_alloc(&s, msr_rank(ctx), msr_world_size(ctx), P, save);
    if (st == MSR_OK)
        st = msr_barrier(ctx);
    double t0 = now_s();
    if (st == MSR_OK && save)
        st = bench_save(ctx, dir, P, &s, async, &stall, &bytes);
    else if (st == MSR_OK && strcmp(mode, "load") == 0)
        st = bench_load(ctx, dir, &s, &bytes);
    else if (st == MSR_OK)
        st = bench_reshard(ctx, dir, &s, &bytes);
    double secs = now_s() - t0;
    share_free(&s);
    if (st != MSR_OK)
        return st;
    int reshard = strcmp(mode, "reshard") == 0;
    double total = (double)bytes + (reshard ? 0.0 : 48.0); /* libmsrun's header of a file */
    if ((st = job_max(ctx, &secs)) != MSR_OK || (st = job_max(ctx, &stall)) != MSR_OK)
        return st;
    if (!reshard) { /* a rank's own file: sum them */
        double *all = malloc((size_t)msr_world_size(ctx) * sizeof *all);
        if (all == NULL)
            return MSR_ERR_NO_MEMORY;
        st = msr_allgather(ctx, &total, sizeof total, all);
        total = 0.0;
        for (int r = 0; r < msr_world_size(ctx) && st == MSR_OK; r++)
            total += all[r];
        free(all);
    }
    if (st == MSR_OK && msr_rank(ctx) == 0)
        printf("mode=%s np=%d bytes=%.0f s=%.4f stall_s=%.4f\n", mode, msr_world_size(ctx), total,
               secs, save ? stall : secs);
    return st;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "save") != 0 && strcmp(argv[1], "save-async") != 0 &&
                      strcmp(argv[1], "load") != 0 && strcmp(argv[1], "reshard") != 0)) {
        fprintf(stderr, "usage: ckpt_bench save|save-async|load|reshard DIR PARAMS\n");
        return 2;
    }
    size_t P = (size_t)strtoull(argv[3], NULL, 10);
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK)
        return fail(NULL, "msr_init", st);
    st = run(ctx, argv[1], argv[2], P);
    int rc = st != MSR_OK ? fail(ctx, argv[1], st) : 0;
    msr_finalize(ctx);
    return rc;
}
