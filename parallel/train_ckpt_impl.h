/* The trainer's checkpoint shard's numbering (train_ckpt.c): the whole
 * model's elements, the saving world, and the experts' ranges, small enough
 * to be inline; the payloads a restore reads and the calls between
 * train_ckpt.c and train_ckpt_read.c. Private to parallel/. */
#ifndef MSR_PARALLEL_TRAIN_CKPT_IMPL_H
#define MSR_PARALLEL_TRAIN_CKPT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/util.h"
#include "parallel/ckpt.h"
#include "parallel/ckpt_map.h"
#include "parallel/train.h"
#include "model/moe.h"
#include "parallel/train_impl.h"

/* The whole model's flat elements: where its experts start in the
 * checkpoint's numbering (ckpt_map.h), whatever part this rank holds. */
static inline size_t whole_flat(const msr_trainer_t *tr)
{
    return msr_gpt_num_params(&tr->cfg.model);
}

/* The checkpoint's element count: the whole model's flat buffer, then its
 * experts. */
static inline size_t total_params(const msr_trainer_t *tr)
{
    return whole_flat(tr) + msr_moe_num_params(&tr->cfg.model);
}

/* The saving world: this rank's place in it and its size (every rank of
 * every model-parallel group saves its own payload). */
static inline int world_rank(const msr_trainer_t *tr)
{
    return tr->mesh != NULL ? tr->mesh->rank : tr->dp->rank;
}

static inline int world_size(const msr_trainer_t *tr)
{
    const msr_mesh_t *m = tr->mesh;
    return m != NULL ? m->dp * m->pp * m->cp * m->tp : tr->dp->size;
}

/* The MoE blocks whose experts a payload holds after the flat pieces. */
static inline int expert_ranges(const msr_trainer_t *tr)
{
    return tr->model->moe != NULL ? msr_moe_held(tr->model->moe) : 0;
}

/* Range k of the experts this rank saves, in the checkpoint's numbering:
 * MoE block k's part of the optimizer's shard of the store (all of the
 * block's at ZeRO 0; under ZeRO-3 with replicas its shard of the block),
 * with their parameters and moments, its first element being element *s_p
 * of the shard space; n = 0 when the shard has none of block k. With the
 * moments offloaded (tr->eoff) m and v point at the parameters, to be
 * written over from the file (as range_cut's); with the parameters in
 * their file (tr->epf) and not held, p, m and v are NULL when the moments
 * are offloaded, p alone otherwise. */
static inline msr_tckpt_range_t expert_range_at(msr_trainer_t *tr, int k, size_t *s_p)
{
    msr_moe_t *moe = tr->model->moe;
    size_t per = (size_t)msr_moe_local_experts(moe) * msr_moe_expert_count(&tr->cfg.model);
    size_t s, lo, n;
    float *p;
    *s_p = 0;
    if (tr->ez) { /* ZeRO-3: block k's shard, the shard space's k-th */
        s = (size_t)k * tr->ez_n;
        lo = whole_flat(tr) + msr_moe_global_lo(moe, k) + tr->ez_lo;
        n = tr->ez_n;
        /* the shares in their file: as below */
        p = tr->epf == NULL ? tr->ez_params + s : tr->ed_hold != NULL ? tr->ed_hold + s : NULL;
    } else {
        size_t a = MSR_MAX((size_t)k * per, tr->eshard_lo);
        size_t b = MSR_MIN((size_t)(k + 1) * per, tr->eshard_hi);
        s = a - tr->eshard_lo;
        lo = whole_flat(tr) + msr_moe_global_lo(moe, k) + (a - k * per);
        n = a < b ? b - a : 0;
        /* the parameters in their file (tr->epf): read a block at a time
         * (msr_train_experts_spans) but while an in-memory snapshot holds
         * them whole */
        float *base = tr->epf != NULL ? tr->ed_hold : msr_moe_params(moe);
        p = base != NULL ? base + a : NULL;
    }
    if (n == 0)
        return (msr_tckpt_range_t){0, 0, NULL, NULL, NULL};
    *s_p = s;
    if (tr->eoff != NULL)
        return (msr_tckpt_range_t){lo, n, p, p, p};
    return (msr_tckpt_range_t){lo, n, p, tr->eopt->m + s, tr->eopt->v + s};
}

static inline msr_tckpt_range_t expert_range(msr_trainer_t *tr, int k)
{
    size_t s;
    return expert_range_at(tr, k, &s);
}

/* A range a rank saves, and where its moments are when they are in the
 * offload's file (moff: the first one's shard element; NO_MOFF: the
 * range's m and v point at them). */
typedef struct saved_range {
    msr_tckpt_range_t r;
    size_t moff;
    int experts; /* moff is in the experts' file (tr->eoff), not dp's */
    size_t es;   /* experts: its first element's in the experts' shard space */
} saved_range_t;

#define NO_MOFF SIZE_MAX

/* Elements [at, at + n) of saved range x's offloaded moments into m and
 * v, from dp's file or the experts'. */
static inline msr_status_t saved_moments_get(msr_trainer_t *tr, const saved_range_t *x, size_t at,
                                             size_t n, float *m, float *v)
{
    if (x->experts)
        return msr_offload_get(tr->eoff, x->moff + at, n, m, v);
    return msr_dp_moments_get(tr->dp, x->moff + at, n, m, v);
}

/* The ranges a rank saves, growing as the map's runs cut its pieces. */
typedef struct range_list {
    saved_range_t *s;
    size_t n, cap;
    int offloaded;        /* some range's moments are in the file */
    msr_dp_piece_t piece; /* the owned piece being cut */
} range_list_t;

/* The header of this rank's shard (meta: the text a resume must match),
 * and the ranges it saves (*l_p, its s the caller's) with their encoder's
 * table (*r_p, msr_free): train_ckpt.c, for the snapshot and the streamed
 * save (train_ckpt_save.c). */
msr_tckpt_header_t msr_train_ckpt_shard_header(const msr_trainer_t *tr, const char *meta);
msr_status_t msr_train_ckpt_shard_ranges(msr_trainer_t *tr, range_list_t *l_p,
                                         msr_tckpt_range_t **r_p);

/* One saved rank's payload, decoded. */
typedef struct payload {
    void *buf;
    msr_tckpt_header_t h;
    msr_tckpt_range_t *ranges;
    uint32_t n;
    int partial; /* only the header and range table were read (buf holds them) */
} payload_t;

static inline void payload_free(payload_t *p)
{
    msr_free(p->ranges);
    msr_free(p->buf);
    memset(p, 0, sizeof *p);
}

/* Where the saved payloads come from: whole (fetch) or, when read is not
 * NULL, in byte ranges. */
typedef struct source {
    msr_trainer_fetch_t fetch;
    msr_trainer_read_t read;
    void *arg;
} source_t;

/* Loads the parts of p's ranges this rank holds: flat ranges through the
 * map to local elements, experts into the shard (cover: NULL without). */
void msr_train_ckpt_apply(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p,
                          uint8_t *cover);

/* Reads only the header and range table of rank's payload (p->buf holds
 * them; the ranges' data pointers are NULL; p->partial set). Errors name
 * the file (step-S/rank-R.bin). train_ckpt_read.c. */
msr_status_t msr_train_ckpt_read_head(const source_t *src, int rank, payload_t *p);

/* Reads the pieces of partial payload p (saved by rank) that hold elements
 * of this rank's, one at a time through a buffer of one piece, checks each
 * against its CRC and loads it (cover as msr_train_ckpt_apply's). A failed
 * read or check names the file, the piece's tensor and its elements.
 * train_ckpt_read.c. */
msr_status_t msr_train_ckpt_read_apply(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                       const payload_t *p, const source_t *src, int rank,
                                       uint8_t *cover);

/* Reads len bytes at offset of rank's payload into dst in chunks of
 * MSR_TCKPT_READ_CHUNK, continuing *crc over each from the CRC the read
 * computed as the chunk arrived (msr_crc32_combine): each byte is CRC'd
 * once, by the read, not again here. train_ckpt_read.c. */
msr_status_t msr_train_ckpt_read_crc(const source_t *src, int rank, uint64_t offset, void *dst,
                                     size_t len, uint32_t *crc);

/* Whether the saved elements [lo, lo + n) of the whole model are all
 * elements this rank holds, side by side in its buffers (msr_dp_load_dest:
 * at ZeRO 0 any, the replica's; else its own shard's): then dst gets where
 * their parameters and both moments go, *local_p the first's local index
 * (for msr_dp_load_mark). train_ckpt_read.c. */
int msr_train_ckpt_dest(msr_trainer_t *tr, const msr_ckpt_map_t *map, uint64_t lo, uint64_t n,
                        float *dst[3], size_t *local_p);

/* Piece r of p (saved by rank), read with CRC crc: MSR_ERR_CORRUPT naming
 * its tensor when that is not the piece's. train_ckpt_read.c. */
msr_status_t msr_train_ckpt_piece_check(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                        const payload_t *p, int rank, const msr_tckpt_range_t *r,
                                        uint32_t crc);

/* The read of piece r of p (saved by rank) failed with st: the read's own
 * text (the source's: for train_gpt, libmsrun's reader's, which names the
 * file and how it failed), after the file, the tensor and the elements.
 * train_ckpt_read.c. */
msr_status_t msr_train_ckpt_piece_failed(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                         const payload_t *p, int rank, const msr_tckpt_range_t *r,
                                         msr_status_t st);

/* Version 4, after every needed piece of p was read whole: their chunk
 * crcs (read last, so that a payload read whole in order still has its own
 * CRC checked by the reader) combine into their crcs. train_ckpt_read.c. */
msr_status_t msr_train_ckpt_chunks_check(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                         const payload_t *p, const source_t *src, int rank);

/* Whether this rank holds any element of saved range r.
 * train_ckpt_read.c. */
int msr_train_ckpt_needed(msr_trainer_t *tr, const msr_ckpt_map_t *map, const msr_tckpt_range_t *r);

/* The bytes of piece r of payload p that this rank reads when it loads
 * alone (msr_train_ckpt_read_apply: the chunks it needs, the whole piece
 * before version 4; 0 when it needs none). need: room for the flags of a
 * whole piece's chunks, 2 msr_tckpt_chunks(MSR_TCKPT_PIECE_MAX) bytes.
 * train_ckpt_read.c. */
uint64_t msr_train_ckpt_read_bytes(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p,
                                   const msr_tckpt_range_t *r, uint8_t *need);

/* Whether payloads a and b belong to the same checkpoint of world ranks.
 * train_ckpt.c. */
int msr_train_ckpt_same(const payload_t *a, const payload_t *b, int world);

/* Ranks that need the same bytes of a checkpoint share their reads. The
 * ranks of group: ZeRO 0 replicas (the dp group: every element alike) or,
 * in another layout, a tensor-parallel group (its slices cut the same
 * pieces), split the pieces they need (in their own layout, own_layout,
 * replicas only: each its own payload p0, the shard of rank first; in
 * another, runs of the pieces any of them needs of the world saved
 * payloads, about 1/size of the bytes each) and broadcast what they read
 * as it lands, each rank keeping its part, instead of each reading all it
 * needs. In another layout they share only when reading alone they would
 * read at least SHARE_OVERLAP times the bytes the group needs. Called by
 * every rank of the group (a collective; ok: this rank can take part;
 * a tp group shares only when no rank is in its own layout).
 * *shared_p: 1 when the group loaded so (every piece is now in place or
 * applied, or a rank failed: msr_dp_load_end agrees on which); 0 when some
 * rank cannot (MoE, a device's memory, a piece of its own not in place, a
 * header it could not read, a rank that failed before) or their needs
 * overlap too little: nothing was loaded, load as before.
 * train_ckpt_share.c. */
msr_status_t msr_train_ckpt_share(msr_trainer_t *tr, const msr_ckpt_map_t *map, msr_comm_t *group,
                                  int world, int first, const source_t *src, const payload_t *p0,
                                  int own_layout, int ok, int *shared_p);

#endif
