/* ZeRO 0 replicas of the saving layout share their reads (see
 * train_ckpt_impl.h and docs/checkpoint.md, "Replicas share their
 * reads"). Each replica of a dp group at ZeRO 0 holds every element, but
 * saved only its own share of them: read alone, each would read every
 * replica's file, dp times the checkpoint's bytes off the disk. Here each
 * reads its own file once, in segments, and broadcasts each segment to the
 * others as soon as it lands; the reader's read ahead keeps the disk busy
 * while the segment goes out. The rounds are in a fixed order that every
 * rank computes alike from the replicas' piece tables (exchanged first):
 * in round s, replica 0's segment s, then replica 1's, and so on, each
 * broadcast straight into place on every rank. A replica whose read or
 * check fails goes on taking part in every broadcast without reading (its
 * segments carry whatever its buffers hold), so that no rank waits for it;
 * msr_dp_load_end then agrees that the load failed. */
#include "parallel/train.h"
#include "parallel/train_impl.h"
#include "parallel/train_ckpt_impl.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "model/err_call.h"
#include "msrun/device.h"
#include "parallel/dp_impl.h"

/* The floats of one broadcast: 1 MiB, a quarter of the reader's read
 * ahead, so that the disk has the next read in flight while it goes out. */
#define SHARE_SEG ((uint64_t)1 << 18)

/* Where a replica's rounds stand: its piece j, the array a of it (the
 * parameters, m, v: their order in the file), the element o of that. */
typedef struct cursor {
    int64_t j;
    int a;
    uint64_t o;
    float *dst[3]; /* where piece j goes on this rank */
    size_t local;  /* its first local element */
    uint32_t crc;  /* this rank's own piece: its CRC so far */
} cursor_t;

typedef struct share {
    msr_trainer_t *tr;
    const msr_ckpt_map_t *map;
    msr_comm_t *comm;
    int size, me;
    int64_t *count; /* each replica's pieces */
    int64_t **tab;  /* each replica's pieces as (whole-model start, elements) */
    int64_t *block; /* the tables' memory */
} share_t;

/* Whether every piece of replica q lands in place on this rank. */
static int all_in_place(const share_t *s, int q)
{
    for (int64_t j = 0; j < s->count[q]; j++) {
        float *dst[3];
        size_t local;
        if (s->tab[q][2 * j + 1] <= 0 || !msr_train_ckpt_dest(s->tr, s->map, s->tab[q][2 * j],
                                                              s->tab[q][2 * j + 1], dst, &local))
            return 0;
    }
    return 1;
}

/* A collective's failure st, with what failed in front of its text. */
static msr_status_t comm_failed(const char *what, msr_status_t st)
{
    return msr_err_call(st, "train: %s while the replicas shared a checkpoint's reads", what);
}

/* The group agrees on flag (its minimum over the ranks). */
static msr_status_t agree(const share_t *s, int32_t *flag)
{
    msr_status_t st = msr_comm_allreduce(s->comm, MSR_IN_PLACE, flag, 1, MSR_DTYPE_I32, MSR_OP_MIN);
    return st == MSR_OK ? MSR_OK : comm_failed("agreeing on sharing", st);
}

/* Every replica's piece table, on every rank, and whether each of their
 * pieces lands in place here (*ok_p, agreed). */
static msr_status_t tables(share_t *s, const payload_t *p0, int32_t *ok_p)
{
    int64_t total = 0, mine = (int64_t)p0->n;
    *ok_p = 0;
    msr_status_t st = msr_comm_allgather(s->comm, &mine, s->count, 1, MSR_DTYPE_I64);
    if (st != MSR_OK)
        return comm_failed("exchanging the piece counts", st);
    for (int q = 0; q < s->size; q++)
        total += s->count[q];
    int32_t ok = (s->block = msr_malloc(2 * (size_t)MSR_MAX(total, 1) * sizeof(int64_t))) != NULL;
    if ((st = agree(s, &ok)) != MSR_OK || !ok)
        return st;
    for (int q = 0, at = 0; q < s->size; at += 2 * s->count[q], q++)
        s->tab[q] = s->block + at;
    for (uint32_t j = 0; j < p0->n; j++) {
        s->tab[s->me][2 * j] = (int64_t)p0->ranges[j].lo;
        s->tab[s->me][2 * j + 1] = (int64_t)p0->ranges[j].n;
    }
    for (int q = 0; q < s->size; q++) {
        if (s->count[q] == 0)
            continue;
        st = msr_comm_broadcast(s->comm, s->tab[q], 2 * (uint64_t)s->count[q], MSR_DTYPE_I64, q);
        if (st != MSR_OK)
            return comm_failed("exchanging the piece tables", st);
    }
    for (int q = 0; q < s->size && ok; q++)
        ok = q == s->me || all_in_place(s, q);
    if ((st = agree(s, &ok)) == MSR_OK)
        *ok_p = ok;
    return st;
}

/* Replica q's next segment of its rounds: this rank reads it first when q
 * is this rank (unless *read_st already failed: then it sends what its
 * buffer holds), then every rank takes part in its broadcast. */
static msr_status_t segment(share_t *s, const payload_t *p0, const source_t *src, int rank, int q,
                            cursor_t *c, msr_status_t *read_st)
{
    uint64_t lo = (uint64_t)s->tab[q][2 * c->j], n = (uint64_t)s->tab[q][2 * c->j + 1];
    const msr_tckpt_range_t *r = q == s->me ? &p0->ranges[c->j] : NULL;
    if (c->a == 0 && c->o == 0) { /* a new piece (found in place by tables) */
        msr_train_ckpt_dest(s->tr, s->map, lo, n, c->dst, &c->local);
        if (r != NULL)
            c->crc = msr_tckpt_piece_crc_start(&p0->h, r);
    }
    uint64_t len = MSR_MIN(SHARE_SEG, n - c->o);
    float *at = c->dst[c->a] + c->o;
    if (r != NULL && *read_st == MSR_OK) {
        uint64_t off = r->offset + ((uint64_t)c->a * n + c->o) * sizeof(float);
        msr_status_t st = msr_train_ckpt_read_crc(src, rank, off, at, len * sizeof(float), &c->crc);
        if (st != MSR_OK)
            *read_st = msr_train_ckpt_piece_failed(s->tr, s->map, p0, rank, r, st);
    }
    if (r == NULL) /* its pages mapped at once, not a fault every 4 KiB as they arrive */
        (void)msr_prefault(at, len * sizeof(float));
    msr_status_t st = msr_comm_broadcast(s->comm, at, len, MSR_DTYPE_F32, q);
    if (st != MSR_OK)
        return comm_failed("broadcasting a piece", st);
    if ((c->o += len) < n)
        return MSR_OK;
    c->o = 0;
    if (++c->a < 3)
        return MSR_OK;
    if (r != NULL && *read_st == MSR_OK)
        *read_st = msr_train_ckpt_piece_check(s->tr, s->map, p0, rank, r, c->crc);
    if (r == NULL || *read_st == MSR_OK)
        msr_dp_load_mark(s->tr->dp, c->local, n);
    c->a = 0;
    c->j++;
    return MSR_OK;
}

/* The rounds: every replica's segments in turn until all are sent. */
static msr_status_t rounds(share_t *s, const payload_t *p0, const source_t *src, int rank,
                           cursor_t *cur, msr_status_t *read_st)
{
    for (int any = 1; any;) {
        any = 0;
        for (int q = 0; q < s->size; q++) {
            if (cur[q].j >= s->count[q])
                continue;
            any = 1;
            msr_status_t st = segment(s, p0, src, rank, q, &cur[q], read_st);
            if (st != MSR_OK)
                return st;
        }
    }
    return MSR_OK;
}

/* Whether this rank can share: its own pieces all land in place, in host
 * memory, with no experts (their shards go through a buffer). */
static int can_share(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p0,
                     const source_t *src)
{
    if (src->read == NULL || !p0->partial || tr->model->moe != NULL ||
        !msr_device_is_host(tr->dp->dev) || p0->n > INT32_MAX)
        return 0;
    for (uint32_t j = 0; j < p0->n; j++) {
        float *dst[3];
        size_t local;
        if (p0->ranges[j].n == 0 ||
            !msr_train_ckpt_dest(tr, map, p0->ranges[j].lo, p0->ranges[j].n, dst, &local))
            return 0;
    }
    return 1;
}

msr_status_t msr_train_ckpt_share(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p0,
                                  const source_t *src, int rank, int ok, int *shared_p)
{
    msr_dp_t *dp = tr->dp;
    share_t s = {tr, map, dp->comm, dp->size, dp->rank, NULL, NULL, NULL};
    cursor_t *cur = msr_calloc((size_t)dp->size, sizeof *cur);
    s.count = msr_calloc((size_t)dp->size, sizeof *s.count);
    s.tab = msr_calloc((size_t)dp->size, sizeof *s.tab);
    int32_t can = ok && cur != NULL && s.count != NULL && s.tab != NULL &&
                  can_share(tr, map, p0, src),
            shared = 0;
    msr_status_t read_st = MSR_OK;
    *shared_p = 0;
    msr_status_t st = agree(&s, &can); /* every rank takes part, whatever it lacks */
    if (st == MSR_OK && can)
        st = tables(&s, p0, &shared);
    if (st == MSR_OK && shared) {
        *shared_p = 1;
        st = rounds(&s, p0, src, rank, cur, &read_st);
        if (st == MSR_OK && read_st == MSR_OK)
            read_st = msr_train_ckpt_chunks_check(tr, map, p0, src, rank);
    }
    msr_free(s.block);
    msr_free(s.tab);
    msr_free(s.count);
    msr_free(cur);
    return st != MSR_OK ? st : read_st;
}
