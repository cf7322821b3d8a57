/* The trainer's checkpoint shard: snapshot and restore (see train.h). */
#include "parallel/train.h"
#include "parallel/train_impl.h"
#include "parallel/train_ckpt_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/crc32.h"
#include "base/err.h"
#include "base/status.h"
#include "model/err_call.h"
#include "model/moe.h"
#include "msrun/checkpoint.h"
#include "parallel/offload_params.h"

static int range_push(range_list_t *l, msr_tckpt_range_t x, size_t moff, int experts, size_t es)
{
    if (l->n == l->cap) {
        size_t cap = l->cap > 0 ? 2 * l->cap : 64;
        saved_range_t *s = msr_realloc_array(l->s, cap, sizeof *s);
        if (s == NULL)
            return -1;
        l->s = s;
        l->cap = cap;
    }
    l->s[l->n++] = (saved_range_t){x, moff, experts, es};
    l->offloaded |= moff != NO_MOFF;
    return 0;
}

/* msr_ckpt_map_fn: the part of l->piece at local lo is global glo. Moments
 * in the offload's file are encoded from the parameters first (any n
 * floats) and written over from the file after (stream_moments). */
static int range_cut(void *arg, size_t lo, size_t glo, size_t n)
{
    range_list_t *l = arg;
    size_t off = lo - l->piece.lo;
    const float *p = l->piece.params + off;
    if (l->piece.m == NULL)
        return range_push(l, (msr_tckpt_range_t){glo, n, p, p, p}, l->piece.moff + off, 0, 0);
    return range_push(l, (msr_tckpt_range_t){glo, n, p, l->piece.m + off, l->piece.v + off},
                      NO_MOFF, 0, 0);
}

static int range_by_lo(const void *a, const void *b)
{
    const saved_range_t *x = a, *y = b;
    return x->r.lo < y->r.lo ? -1 : x->r.lo > y->r.lo;
}

/* Everything this rank saves, in the checkpoint's numbering and in
 * increasing order: its owned flat pieces cut into the whole model's
 * ranges (map), then its experts. *l_p's s is the caller's (msr_free). */
static msr_status_t saved_ranges(msr_trainer_t *tr, const msr_ckpt_map_t *map, range_list_t *l_p)
{
    range_list_t l = {0};
    int bad = 0;
    for (int k = 0; k < msr_dp_num_owned(tr->dp) && !bad; k++) {
        msr_dp_owned(tr->dp, k, &l.piece);
        bad = msr_ckpt_map_to_global(map, l.piece.lo, l.piece.n, range_cut, &l) != 0;
    }
    if (l.n > 0)
        qsort(l.s, l.n, sizeof *l.s, range_by_lo);
    for (int k = 0; k < expert_ranges(tr) && !bad; k++) {
        size_t s;
        msr_tckpt_range_t x = expert_range_at(tr, k, &s);
        bad = x.n > 0 && range_push(&l, x, tr->eoff != NULL ? s : NO_MOFF, 1, s) != 0;
    }
    if (bad) {
        msr_free(l.s);
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a checkpoint of %zu pieces",
                       l.n);
    }
    *l_p = l;
    return MSR_OK;
}

static msr_status_t snapshot(msr_trainer_t *tr, const char *meta, void **buf_p, size_t *len_p);

/* With the parameters offloaded (parallel/offload_params.h), their blocks
 * are read into the flat buffer for the encoding and dropped after it;
 * offloaded moments are streamed from their file into the payload a chunk
 * at a time (snapshot), never held whole. */
msr_status_t msr_trainer_snapshot(msr_trainer_t *tr, const char *meta, void **buf_p, size_t *len_p)
{
    msr_status_t st = msr_dp_offload_hold(tr->dp, 1, 0);
    if (st == MSR_OK)
        st = msr_train_experts_hold(tr);
    if (st == MSR_OK)
        st = snapshot(tr, meta, buf_p, len_p);
    msr_train_experts_drop(tr);
    (void)msr_dp_offload_drop(tr->dp, 0);
    return st;
}

msr_status_t msr_trainer_blocks_hold(msr_trainer_t *tr)
{
    return msr_dp_offload_hold(tr->dp, 1, 0);
}

msr_status_t msr_trainer_blocks_drop(msr_trainer_t *tr, int write)
{
    return msr_dp_offload_drop(tr->dp, write);
}

msr_status_t msr_trainer_fill_begin(msr_trainer_t *tr)
{
    return msr_dp_offload_hold(tr->dp, 0, 0);
}

int msr_trainer_fill_through(const msr_trainer_t *tr, int experts)
{
    return experts ? tr->epf != NULL : msr_dp_params_block_floats(tr->dp) > 0;
}

msr_status_t msr_trainer_fill(msr_trainer_t *tr, int experts, size_t lo, size_t n, const float *src)
{
    if (experts && tr->epf != NULL)
        return msr_train_experts_disk_load(tr, lo, n, src);
    if (!experts)
        return msr_dp_params_fill(tr->dp, lo, n, src);
    memcpy(msr_moe_params(tr->model->moe) + lo, src, n * sizeof(float));
    return MSR_OK;
}

msr_status_t msr_trainer_fill_end(msr_trainer_t *tr, int write)
{
    msr_status_t st = MSR_OK;
    if (tr->epf != NULL) {
        if (!write)
            tr->ed_pc.dirty = 0; /* the block it was filling: dropped */
        st = msr_train_experts_cursor_end(tr);
        if (st == MSR_OK && write) /* the next forward's first block */
            st = msr_params_prefetch(tr->epf, 0);
    }
    msr_status_t dst = msr_dp_offload_drop(tr->dp, write);
    return st != MSR_OK ? st : dst;
}

/* Writes the moments of l's offloaded ranges over their places in payload
 * buf (encoded unsealed from l, len bytes): piece by piece as the encoder
 * cut them, each read from the offload's file a chunk at a time. */
static msr_status_t stream_moments(msr_trainer_t *tr, const range_list_t *l, void *buf, size_t len)
{
    msr_tckpt_header_t h;
    msr_tckpt_range_t *d = NULL;
    uint32_t n = 0, j = 0;
    msr_status_t st = msr_tckpt_decode(buf, len, "the shard being saved", &h, &d, &n);
    for (size_t k = 0; k < l->n && st == MSR_OK; k++) {
        const saved_range_t *x = &l->s[k];
        for (uint64_t at = 0; at < x->r.n && st == MSR_OK; at += MSR_TCKPT_PIECE_MAX, j++) {
            size_t c = (size_t)MSR_MIN(x->r.n - at, (uint64_t)MSR_TCKPT_PIECE_MAX);
            if (j >= n || d[j].lo != x->r.lo + at || d[j].n != c) {
                st = msr_err(MSR_ERR_INTERNAL, "train: the shard's piece %u is not range %zu's", j,
                             k);
                break;
            }
            if (x->moff == NO_MOFF)
                continue;
            float *m = (float *)((unsigned char *)buf + d[j].offset) + c; /* after params */
            st = saved_moments_get(tr, x, (size_t)at, c, m, m + c);
        }
    }
    msr_free(d);
    if (st == MSR_OK && !tr->unsealed_snapshots)
        st = msr_tckpt_seal(buf, len);
    return st;
}

/* The header of this rank's shard (meta: the text a resume must match). */
msr_tckpt_header_t msr_train_ckpt_shard_header(const msr_trainer_t *tr, const char *meta)
{
    return (msr_tckpt_header_t){
        .step = tr->step,
        .adam_t = tr->dp->opt->t,
        .data_seed = tr->sampler.seed,
        .data_position = tr->sampler.position,
        .num_params = total_params(tr),
        .rank = (uint32_t)world_rank(tr),
        .world = (uint32_t)world_size(tr),
        .zero = (uint32_t)tr->cfg.par.zero,
        .meta = meta,
        .tp = (uint32_t)MSR_MAX(tr->cfg.tp, 1),
        .pp = (uint32_t)MSR_MAX(tr->cfg.pp, 1),
        .cp = (uint32_t)MSR_MAX(tr->cfg.cp, 1),
        .ep = (uint32_t)MSR_MAX(tr->cfg.ep, 1),
        .chunks = (uint32_t)MSR_MAX(tr->cfg.mp.chunks, 1),
        .sp = (uint32_t)(tr->cfg.mp.sp != 0),
    };
}

/* The ranges this rank saves (*l_p, its s the caller's) and their
 * encoder's table (*r_p, msr_free). */
msr_status_t msr_train_ckpt_shard_ranges(msr_trainer_t *tr, range_list_t *l_p,
                                         msr_tckpt_range_t **r_p)
{
    msr_ckpt_map_t map;
    range_list_t l;
    msr_status_t st = msr_ckpt_map_build_saved(tr->model, &map);
    if (st != MSR_OK)
        return st;
    st = saved_ranges(tr, &map, &l);
    msr_ckpt_map_free(&map);
    if (st != MSR_OK)
        return st;
    msr_tckpt_range_t *r = msr_realloc_array(NULL, MSR_MAX(l.n, (size_t)1), sizeof *r);
    if (r == NULL) {
        msr_free(l.s);
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a checkpoint of %zu pieces",
                       l.n);
    }
    for (size_t k = 0; k < l.n; k++)
        r[k] = l.s[k].r;
    *l_p = l;
    *r_p = r;
    return MSR_OK;
}

static msr_status_t snapshot(msr_trainer_t *tr, const char *meta, void **buf_p, size_t *len_p)
{
    range_list_t l;
    msr_tckpt_range_t *r;
    msr_status_t st = msr_train_ckpt_shard_ranges(tr, &l, &r);
    if (st != MSR_OK)
        return st;
    msr_tckpt_header_t h = msr_train_ckpt_shard_header(tr, meta);
    /* offloaded moments: sealed once they are in */
    int unsealed = tr->unsealed_snapshots || l.offloaded;
    void *buf = NULL;
    size_t len = 0;
    st = unsealed ? msr_tckpt_encode_unsealed(&h, r, (uint32_t)l.n, &buf, &len)
                  : msr_tckpt_encode(&h, r, (uint32_t)l.n, &buf, &len);
    msr_free(r);
    if (st == MSR_OK && l.offloaded)
        st = stream_moments(tr, &l, buf, len);
    msr_free(l.s);
    if (st != MSR_OK) {
        msr_free(buf);
        return st;
    }
    *buf_p = buf;
    *len_p = len;
    return MSR_OK;
}

static msr_status_t payload_fetch(msr_trainer_fetch_t fetch, void *arg, int rank, payload_t *p)
{
    size_t len;
    char what[48];
    memset(p, 0, sizeof *p);
    msr_status_t st = fetch(arg, rank, &p->buf, &len);
    if (st != MSR_OK)
        return st;
    snprintf(what, sizeof what, "the shard of rank %d", rank);
    st = msr_tckpt_decode(p->buf, len, what, &p->h, &p->ranges, &p->n);
    if (st != MSR_OK)
        payload_free(p);
    return st;
}

/* Whether p holds exactly the pieces of this rank's elements (map: all
 * its runs): its ranges cut as msr_tckpt_encode cuts them. Never when it
 * holds elements another rank saved (a Llama's replicated kv heads: p
 * lacks them). */
static int same_layout(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p)
{
    range_list_t l;
    if (saved_ranges(tr, map, &l) != MSR_OK)
        return 0; /* read every payload instead */
    uint32_t j = 0;
    int same = 1;
    for (size_t k = 0; k < l.n && same; k++) {
        const msr_tckpt_range_t *x = &l.s[k].r;
        for (uint64_t at = 0; at < x->n && same; at += MSR_TCKPT_PIECE_MAX, j++) {
            uint64_t c = MSR_MIN(x->n - at, (uint64_t)MSR_TCKPT_PIECE_MAX);
            same = j < p->n && p->ranges[j].lo == x->lo + at && p->ranges[j].n == c;
        }
    }
    msr_free(l.s);
    return same && j == p->n;
}

/* Copies the part of saved range r that this rank saves itself (its
 * optimizer's shard of the experts: parameters and moments), marking it in
 * cover (one flag per shard element). The other replicas' blocks of the
 * parameters come with msr_train_experts_gather (under ZeRO-3 with
 * replicas the shard is all this rank keeps). Offloaded moments are
 * written into their file a chunk at a time; a failure is kept in
 * tr->eload_st (the first), its part left uncovered. */
static void experts_load(msr_trainer_t *tr, const msr_tckpt_range_t *r, uint8_t *cover)
{
    for (int k = 0; k < expert_ranges(tr); k++) {
        size_t s;
        msr_tckpt_range_t mine = expert_range_at(tr, k, &s);
        size_t lo = MSR_MAX(mine.lo, r->lo), hi = MSR_MIN(mine.lo + mine.n, r->lo + r->n);
        if (mine.n == 0 || lo >= hi)
            continue;
        size_t at = s + (lo - mine.lo); /* in the shard */
        size_t from = lo - r->lo, n = hi - lo;
        if (tr->epf != NULL) { /* into their file's blocks, a block at a time */
            msr_status_t st =
                tr->eload_st != MSR_OK
                    ? tr->eload_st
                    : msr_train_experts_disk_load(tr, tr->eshard_lo + at, n, r->params + from);
            if (st != MSR_OK) {
                tr->eload_st = st;
                continue;
            }
        } else {
            float *shard = tr->ez ? tr->ez_params : msr_moe_params(tr->model->moe) + tr->eshard_lo;
            memcpy(shard + at, r->params + from, n * sizeof(float));
        }
        if (tr->eoff != NULL) {
            msr_status_t st = tr->eload_st != MSR_OK
                                  ? tr->eload_st
                                  : msr_offload_put(tr->eoff, at, n, r->m + from, r->v + from);
            if (st != MSR_OK) {
                tr->eload_st = st;
                continue;
            }
        } else {
            memcpy(tr->eopt->m + at, r->m + from, n * sizeof(float));
            memcpy(tr->eopt->v + at, r->v + from, n * sizeof(float));
        }
        memset(cover + at, 1, n);
    }
}

/* The saved range a run of this rank's overlaps (msr_ckpt_map_fn). */
typedef struct apply_arg {
    msr_dp_t *dp;
    const msr_tckpt_range_t *r;
} apply_arg_t;

static int apply_run(void *arg, size_t lo, size_t glo, size_t n)
{
    apply_arg_t *a = arg;
    size_t off = glo - a->r->lo;
    msr_dp_piece_t piece = {lo, n, a->r->params + off, a->r->m + off, a->r->v + off};
    msr_dp_load_piece(a->dp, &piece);
    return 0;
}

/* Loads the parts of p's ranges this rank holds: flat ranges through the
 * map to local elements, experts into the shard (cover: NULL without). */
void msr_train_ckpt_apply(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p,
                          uint8_t *cover)
{
    for (uint32_t k = 0; k < p->n; k++) {
        const msr_tckpt_range_t *r = &p->ranges[k];
        if (r->lo >= whole_flat(tr)) {
            if (cover != NULL)
                experts_load(tr, r, cover);
            continue;
        }
        size_t n = MSR_MIN(r->n, whole_flat(tr) - r->lo); /* decode bounds lo + n */
        apply_arg_t a = {tr->dp, r};
        msr_ckpt_map_to_local(map, r->lo, n, apply_run, &a);
    }
}

/* Loads what this rank needs of payload p (saved by rank): from its bytes,
 * or, partial, by reading the pieces it needs. */
static msr_status_t payload_load(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p,
                                 const source_t *src, int rank, uint8_t *cover)
{
    if (p->partial)
        return msr_train_ckpt_read_apply(tr, map, p, src, rank, cover);
    msr_train_ckpt_apply(tr, map, p, cover);
    return MSR_OK;
}

int msr_train_ckpt_same(const payload_t *a, const payload_t *b, int world)
{
    return a->h.step == b->h.step && a->h.adam_t == b->h.adam_t &&
           a->h.data_seed == b->h.data_seed && a->h.data_position == b->h.data_position &&
           a->h.num_params == b->h.num_params && a->h.world == (uint32_t)world &&
           b->h.world == (uint32_t)world && strcmp(a->h.meta, b->h.meta) == 0;
}

/* With model parallel, the dp groups of the world agree on the outcome
 * (all succeed or all fail), and the last stage gets the restored wte. */
static msr_status_t restore_agree(msr_trainer_t *tr, msr_status_t st)
{
    if (tr->mp == NULL)
        return st;
    if (tr->mesh->world != NULL) {
        int32_t ok = st == MSR_OK;
        msr_status_t cst =
            msr_comm_allreduce(tr->mesh->world, MSR_IN_PLACE, &ok, 1, MSR_DTYPE_I32, MSR_OP_MIN);
        if (cst != MSR_OK)
            return msr_err_call(cst, "train: agreeing on a restore");
        if (!ok && st == MSR_OK)
            return msr_err(MSR_ERR_CORRUPT,
                           "train: another rank could not restore its checkpoint shard");
        if (!ok)
            return st;
    }
    return st == MSR_OK ? msr_mp_sync_tied(tr->mp) : st;
}

/* What the ranks of the replica group agree on before loading anything,
 * each flag the minimum over the ranks (reduced as 3 int32s). */
typedef struct restore_flags {
    int32_t fetched;       /* the rank read and decoded its first shard */
    int32_t same_settings; /* that shard's meta, parameter count and world are this run's */
    int32_t own_layout;    /* it holds exactly the rank's pieces: no other shard is read */
} restore_flags_t;

_Static_assert(sizeof(restore_flags_t) == 3 * sizeof(int32_t), "reduced as 3 int32s");

/* The flags of this rank's first shard p0 (fetched with fetch_st, the
 * shard of rank first), agreed over the replica group. Fails when any rank
 * could not read its shard, or any shard has other settings (CONFIG). */
static msr_status_t restore_check(msr_trainer_t *tr, const msr_ckpt_map_t *map, const char *meta,
                                  int world, int first, msr_status_t fetch_st, const payload_t *p0,
                                  restore_flags_t *flags_p)
{
    msr_dp_t *dp = tr->dp;
    restore_flags_t f = {fetch_st == MSR_OK, 0, 0};
    if (f.fetched) {
        f.same_settings = strcmp(p0->h.meta, meta) == 0 && p0->h.num_params == total_params(tr) &&
                          p0->h.world == (uint32_t)world;
        f.own_layout =
            world == world_size(tr) && p0->h.rank == (uint32_t)first && same_layout(tr, map, p0);
    }
    int own_settings = f.same_settings;
    if (dp->comm != NULL) {
        msr_status_t cst =
            msr_comm_allreduce(dp->comm, MSR_IN_PLACE, &f, 3, MSR_DTYPE_I32, MSR_OP_MIN);
        if (cst != MSR_OK)
            return msr_err_call(cst, "train: agreeing on a checkpoint");
    }
    if (fetch_st != MSR_OK)
        return fetch_st;
    if (!f.fetched)
        return msr_err(MSR_ERR_CORRUPT, "train: another rank could not read its checkpoint shard");
    if (!own_settings) {
        size_t at = msr_tckpt_meta_diff(p0->h.meta, meta);
        return msr_err(MSR_ERR_CONFIG,
                       "train: the checkpoint of step %llu was written with other settings; "
                       "checkpoint: %s%.160s (%llu parameters, %u ranks); this run: %s%.160s "
                       "(%zu parameters, %d ranks)",
                       (unsigned long long)p0->h.step, at > 0 ? "..." : "", p0->h.meta + at,
                       (unsigned long long)p0->h.num_params, p0->h.world, at > 0 ? "..." : "",
                       meta + at, total_params(tr), world);
    }
    if (!f.same_settings)
        return msr_err(MSR_ERR_CONFIG,
                       "train: another rank's checkpoint shard was written with other settings");
    *flags_p = f;
    return MSR_OK;
}

/* The point a checkpoint resumes from, as a shard's header says. */
enum { POINT_STEP, POINT_ADAM_T, POINT_DATA_SEED, POINT_DATA_POSITION, POINT_N };

/* Every rank resumes from the same point, or none does: the step,
 * optimizer and sampler state of each rank's first shard p0, their maxima
 * and (negated) minima over the replica group, must be equal. */
static msr_status_t restore_same_point(msr_trainer_t *tr, const payload_t *p0)
{
    if (tr->dp->comm == NULL)
        return MSR_OK;
    struct {
        int64_t max[POINT_N];
        int64_t neg_min[POINT_N];
    } v = {{(int64_t)p0->h.step, (int64_t)p0->h.adam_t, (int64_t)p0->h.data_seed,
            (int64_t)p0->h.data_position}};
    _Static_assert(sizeof v == 2 * POINT_N * sizeof(int64_t), "reduced as int64s");
    int same = 1;
    for (int k = 0; k < POINT_N; k++)
        v.neg_min[k] = -v.max[k];
    msr_status_t st =
        msr_comm_allreduce(tr->dp->comm, MSR_IN_PLACE, &v, 2 * POINT_N, MSR_DTYPE_I64, MSR_OP_MAX);
    if (st != MSR_OK)
        return msr_err_call(st, "train: agreeing on a checkpoint");
    for (int k = 0; k < POINT_N; k++)
        same = same && v.max[k] == -v.neg_min[k];
    if (!same) {
        return msr_err(MSR_ERR_CORRUPT,
                       "train: the ranks' checkpoint shards disagree (step %lld..%lld, optimizer "
                       "step %lld..%lld, samples drawn %lld..%lld): not resuming from them",
                       (long long)-v.neg_min[POINT_STEP], (long long)v.max[POINT_STEP],
                       (long long)-v.neg_min[POINT_ADAM_T], (long long)v.max[POINT_ADAM_T],
                       (long long)-v.neg_min[POINT_DATA_POSITION],
                       (long long)v.max[POINT_DATA_POSITION]);
    }
    return MSR_OK;
}

/* The ranks of a tp group go on to the reads together (they may share
 * them, msr_train_ckpt_share) or not at all: st, or an error when another
 * rank of the group failed. */
static msr_status_t restore_tp_agree(msr_trainer_t *tr, msr_status_t st)
{
    if (tr->mesh == NULL || tr->mesh->tp_comm == NULL)
        return st;
    int32_t ok = st == MSR_OK;
    msr_status_t cst =
        msr_comm_allreduce(tr->mesh->tp_comm, MSR_IN_PLACE, &ok, 1, MSR_DTYPE_I32, MSR_OP_MIN);
    if (cst != MSR_OK)
        return st != MSR_OK ? st : msr_err_call(cst, "train: agreeing on a checkpoint");
    if (!ok && st == MSR_OK)
        return msr_err(MSR_ERR_CORRUPT,
                       "train: another tensor-parallel rank could not read its checkpoint");
    return st;
}

/* Applies the shards of the saving world's other ranks (the rank's own
 * layout differs from the one that saved): each must be of p0's
 * checkpoint. One payload (or, reading in part, one header and one piece)
 * is held at a time. */
static msr_status_t restore_other_ranks(msr_trainer_t *tr, const msr_ckpt_map_t *map, int world,
                                        int first, const source_t *src, const payload_t *p0,
                                        uint8_t *cover)
{
    msr_status_t st = MSR_OK;
    for (int r = 0; r < world && st == MSR_OK; r++) {
        payload_t p;
        if (r == first)
            continue;
        st = src->read != NULL ? msr_train_ckpt_read_head(src, r, &p)
                               : payload_fetch(src->fetch, src->arg, r, &p);
        if (st != MSR_OK)
            break;
        if (!msr_train_ckpt_same(p0, &p, world) || p.h.rank != (uint32_t)r)
            st = msr_err(MSR_ERR_CORRUPT,
                         "train: the shards of ranks %d and %d belong to different checkpoints",
                         first, r);
        else
            st = payload_load(tr, map, &p, src, r, cover);
        payload_free(&p);
    }
    return st;
}

/* Loads the checkpoint whose first shard is p0 (the shard of rank first):
 * with own_layout, from p0 alone, the replicated state then gathered by
 * msr_dp_load_end; when all is replicated (ZeRO 0 over dp > 1: that
 * gather would move the whole state after the reads, docs/checkpoint.md)
 * the replicas split the reads and broadcast what they read as it lands
 * (msr_train_ckpt_share: in their own layout each its p0, in another a
 * run of the pieces), and in another layout so do the ranks of a tp group
 * whose slices cut the same pieces; else, or when a rank cannot share,
 * from every shard that may hold a piece of this rank's. Whatever fails,
 * every rank reaches msr_dp_load_end, which agrees on the outcome. */
static msr_status_t restore_read(msr_trainer_t *tr, const msr_ckpt_map_t *map, int world, int first,
                                 const source_t *src, const payload_t *p0, int own_layout)
{
    int replicas = tr->cfg.par.zero == 0 && tr->dp->size > 1 && tr->dp->comm != NULL;
    int gather = own_layout && !replicas, shared = 0;
    msr_comm_t *group = replicas ? tr->dp->comm : NULL;
    /* else a tp group, whose slices cut the same pieces: in another layout
     * only, which its ranks agree on (a tp rank holding a Llama's
     * replicated kv heads may not be in its own layout while another is) */
    if (!replicas && tr->mesh != NULL && tr->cfg.tp > 1)
        group = tr->mesh->tp_comm;
    msr_status_t read_st = msr_dp_load_begin(tr->dp);
    size_t ecount = tr->model->moe != NULL ? tr->eshard_hi - tr->eshard_lo : 0;
    uint8_t *cover = ecount > 0 ? msr_calloc(ecount, 1) : NULL;
    if (read_st == MSR_OK && ecount > 0 && cover == NULL)
        read_st = msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for %zu expert flags", ecount);
    tr->eload_st = MSR_OK;
    if (group != NULL) { /* every rank of the group: a collective */
        msr_status_t st = msr_train_ckpt_share(tr, map, group, world, first, src, p0, own_layout,
                                               read_st == MSR_OK, &shared);
        if (read_st == MSR_OK)
            read_st = st;
    }
    if (read_st == MSR_OK && !shared)
        read_st = payload_load(tr, map, p0, src, first, cover);
    if (read_st == MSR_OK && !gather && !shared)
        read_st = restore_other_ranks(tr, map, world, first, src, p0, cover);
    if (read_st == MSR_OK && tr->eload_st != MSR_OK)
        read_st = tr->eload_st; /* the experts' file's error names it */
    for (size_t i = 0; i < ecount && read_st == MSR_OK; i++) {
        if (!cover[i])
            read_st = msr_err(MSR_ERR_CORRUPT,
                              "train: the checkpoint lacks expert element %zu of this rank's", i);
    }
    msr_free(cover);
    msr_status_t st = msr_dp_load_end(tr->dp, gather, read_st != MSR_OK);
    if (st != MSR_OK)
        return read_st != MSR_OK ? read_st : st;
    if (tr->model->moe != NULL)
        return msr_train_experts_gather(tr);
    return MSR_OK;
}

static msr_status_t restore_parts(msr_trainer_t *tr, const char *meta, int world,
                                  msr_trainer_fetch_t fetch, msr_trainer_read_t read, void *arg)
{
    int first = world == world_size(tr) ? world_rank(tr) : 0;
    source_t src = {fetch, read, arg};
    payload_t p0;
    msr_ckpt_map_t map;
    restore_flags_t flags = {0, 0, 0};
    msr_status_t st = msr_ckpt_map_build(tr->model, &map);
    if (st != MSR_OK) /* every rank still reaches restore_agree */
        memset(&p0, 0, sizeof p0);
    else if (read != NULL) /* a piece at a time, never the whole state: only what it needs */
        st = msr_train_ckpt_read_head(&src, first, &p0);
    else
        st = payload_fetch(fetch, arg, first, &p0);
    st = restore_check(tr, &map, meta, world, first, st, &p0, &flags);
    if (st == MSR_OK)
        st = restore_same_point(tr, &p0);
    st = restore_tp_agree(tr, st); /* restore_read may share over the tp group */
    if (st == MSR_OK)
        st = restore_read(tr, &map, world, first, &src, &p0, flags.own_layout);
    if (st == MSR_OK) {
        tr->dp->opt->t = p0.h.adam_t;
        if (tr->eopt != NULL)
            tr->eopt->t = p0.h.adam_t;
        tr->sampler.seed = p0.h.data_seed;
        tr->sampler.position = p0.h.data_position;
        tr->step = p0.h.step;
    }
    payload_free(&p0);
    msr_ckpt_map_free(&map);
    return restore_agree(tr, st);
}

/* With the parameters offloaded, the restore fills their blocks in their
 * file a block at a time (ZeRO 3: the rank's share of each, the rest of
 * its shard in the shard buffer). Offloaded moments go
 * straight into their file as each piece is loaded (msr_dp_load_piece),
 * but under ZeRO 0, whose load may gather them over the replicas: there
 * they are filled in memory and written back after. */
msr_status_t msr_trainer_restore_parts(msr_trainer_t *tr, const char *meta, int world,
                                       msr_trainer_fetch_t fetch, msr_trainer_read_t read,
                                       void *arg)
{
    msr_train_gate(tr);
    msr_status_t st = msr_dp_offload_hold(tr->dp, 0, tr->cfg.par.zero == 0);
    if (st != MSR_OK)
        return st;
    st = restore_parts(tr, meta, world, fetch, read, arg);
    msr_status_t est = msr_train_experts_cursor_end(tr); /* the last block written back */
    st = st != MSR_OK ? st : est;
    msr_status_t wst = msr_dp_offload_drop(tr->dp, st == MSR_OK);
    return st != MSR_OK ? st : wst;
}

msr_status_t msr_trainer_restore(msr_trainer_t *tr, const char *meta, int world,
                                 msr_trainer_fetch_t fetch, void *arg)
{
    return msr_trainer_restore_parts(tr, meta, world, fetch, NULL, arg);
}
