/* The planner's memory model (see plan.h and docs/plan.md). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/shm_defaults.h"
#include "layout/layout.h"
#include "planner/plan.h"

#define F32 4u

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

/* The replica group dp's buckets and shards span: dp x cp (parameters are
 * replicated over cp, parallel/mesh.h). */
static int replicas(const msr_plan_layout_t *l)
{
    return l->dp * msr_plan_cp(l);
}

/* ---- the part a rank holds ---- */

/* Layers [lo, hi) of virtual stage j of n: the runtime's split
 * (layout/layout.h), as the layout's stage_layers say, else even. */
static void stage_layers(const msr_plan_layout_t *l, int layers, int n, int j, int *lo, int *hi)
{
    msr_layout_split_stage(layers, n, l->stage_layers, j, lo, hi);
}

/* Elements of one block's parameters on a tensor-parallel rank; a MoE
 * block (moe) has the router (experts x C, replicated) in place of the
 * MLP, whose experts the MoE state holds (expert_params). */
static uint64_t block_params(const msr_plan_model_t *m, int t, int moe)
{
    uint64_t C = (uint64_t)m->channels, T = (uint64_t)t, E = (uint64_t)m->experts;
    if (m->arch == MSR_PLAN_GPT) {
        /* 12C^2/t + 6C + 7C/t: see gpt.c's tensor table; attention's half
         * 4C^2/t + 3C/t + 5C */
        if (moe)
            return 4 * C * C / T + 3 * C / T + 5 * C + E * C;
        return 12 * C * C / T + 6 * C + 7 * C / T;
    }
    uint64_t hd = C / (uint64_t)m->heads, kv = (uint64_t)m->kv_heads * hd, F = (uint64_t)m->ffn;
    /* q, o: C x C; k, v: C x kv; gate, up, down: C x F (all split); two RMSNorms */
    if (moe)
        return (2 * C * C + 2 * C * kv) / T + 2 * C + E * C;
    return (2 * C * C + 2 * C * kv + 3 * C * F) / T + 2 * C;
}

/* Elements of one expert: the dense MLP's (model/moe.h: 8C^2 + 5C). */
static uint64_t expert_params(const msr_plan_model_t *m)
{
    uint64_t C = (uint64_t)m->channels;
    return m->arch == MSR_PLAN_GPT ? 8 * C * C + 5 * C : 3 * C * (uint64_t)m->ffn;
}

static uint64_t embed_params(const msr_plan_model_t *m, int t)
{
    uint64_t C = (uint64_t)m->channels, Vl = (uint64_t)(m->vocab / t);
    return m->arch == MSR_PLAN_GPT ? Vl * C + (uint64_t)m->seq * C : Vl * C;
}

/* The final norm, and for Llama the untied head's rows. */
static uint64_t head_params(const msr_plan_model_t *m, int t)
{
    uint64_t C = (uint64_t)m->channels;
    return m->arch == MSR_PLAN_GPT ? 2 * C : C + (uint64_t)(m->vocab / t) * C;
}

uint64_t msr_plan_num_params(const msr_plan_model_t *m)
{
    uint64_t n = embed_params(m, 1) + head_params(m, 1);
    for (int l = 0; l < m->layers; l++)
        n += block_params(m, 1, msr_plan_is_moe(m, l)) +
             (msr_plan_is_moe(m, l) ? (uint64_t)m->experts * expert_params(m) : 0);
    return n;
}

/* The segments of a part in flat order (model/gpt.h): the embeddings on
 * the first stage, a segment per block, the final norm (and head) on the
 * last. */
typedef struct part {
    int has_embed, has_head, blocks, moe_blocks;
    uint64_t embed, block, moe_block, head, total;
    const msr_plan_model_t *m;
    const msr_plan_layout_t *l;
    int pr;
} part_t;

/* The model's layer that the part's block k is (its chunks' layers in
 * order, as gpt.c lays out the segments). */
static int part_layer(const part_t *p, int k)
{
    int n = p->l->pp * p->l->chunks;
    for (int c = 0; c < p->l->chunks; c++) {
        int lo, hi;
        stage_layers(p->l, p->m->layers, n, c * p->l->pp + p->pr, &lo, &hi);
        if (k < hi - lo)
            return lo + k;
        k -= hi - lo;
    }
    return -1;
}

static void part_of(const msr_plan_model_t *m, const msr_plan_layout_t *l, int pr, part_t *p)
{
    int n = l->pp * l->chunks;
    p->m = m;
    p->l = l;
    p->pr = pr;
    p->has_embed = pr == 0;
    p->has_head = pr == l->pp - 1;
    p->blocks = p->moe_blocks = 0;
    for (int c = 0; c < l->chunks; c++) {
        int lo, hi;
        stage_layers(l, m->layers, n, c * l->pp + pr, &lo, &hi);
        p->blocks += hi - lo;
        for (int k = lo; k < hi; k++)
            p->moe_blocks += msr_plan_is_moe(m, k);
    }
    p->embed = embed_params(m, l->tp);
    p->block = block_params(m, l->tp, 0);
    p->moe_block = block_params(m, l->tp, 1);
    p->head = head_params(m, l->tp);
    p->total = (p->has_embed ? p->embed : 0) + (uint64_t)(p->blocks - p->moe_blocks) * p->block +
               (uint64_t)p->moe_blocks * p->moe_block + (p->has_head ? p->head : 0);
}

static uint64_t seg_count(const part_t *p, int k)
{
    if (p->has_embed && k == 0)
        return p->embed;
    k -= p->has_embed;
    if (k >= p->blocks)
        return p->head;
    return p->moe_blocks > 0 && msr_plan_is_moe(p->m, part_layer(p, k)) ? p->moe_block : p->block;
}

/* ---- data parallel's layout (layout/layout.h's unit walk) ---- */

static uint64_t part_seg_count(const void *arg, int s)
{
    return seg_count(arg, s);
}

/* The walk over part p's units, cut as the runtime cuts them. */
static void part_units(const part_t *p, const msr_plan_layout_t *l, msr_layout_units_t *it)
{
    msr_layout_units_init(it, p->total, p->has_embed + p->blocks + p->has_head, part_seg_count, p,
                          replicas(l), l->bucket_bytes, l->first_bucket_bytes, l->zero_min_bytes);
}

typedef struct dp_layout {
    uint64_t buckets;
    uint64_t shard, replicated;
    uint64_t packed_max; /* the largest packed bucket buffer (dp * blk + rep) */
    uint64_t seg_max;    /* the largest segment */
    uint64_t gather_max; /* the largest ZeRO-3 gather buffer (dp * its blocks' sum) */
    int span_max;        /* the most buckets one segment lies in */
} dp_layout_t;

/* Walks the units with runs (huge models have millions of alike whole
 * buckets): a run counts as its units would, one by one. */
static void dp_layout(const part_t *p, const msr_plan_layout_t *l, int dp_rank, dp_layout_t *out)
{
    msr_layout_units_t it;
    msr_layout_unit_t u;
    part_units(p, l, &it);
    uint64_t size = (uint64_t)it.size, cur_blk = 0, cur_rep = 0, seg_blk = 0;
    uint64_t cur_bucket = UINT64_MAX;
    int span = 0;
    memset(out, 0, sizeof *out);
    out->buckets = it.buckets;
    while (msr_layout_units_next(&it, 1, &u)) {
        if (u.seg_first)
            span = 0, seg_blk = 0;
        out->seg_max = max_u64(out->seg_max, u.seg_count);
        if (u.bucket != cur_bucket) {
            out->packed_max = max_u64(out->packed_max, size * cur_blk + cur_rep);
            cur_bucket = u.bucket - (u.repeat - 1); /* a run's last bucket */
            cur_blk = cur_rep = 0;
        }
        uint64_t a, e;
        msr_layout_unit_own(&u, dp_rank, &a, &e);
        out->shard += u.repeat * (e - a);
        if (u.replicated) {
            out->replicated += u.repeat * u.n;
            cur_rep += u.n;
        } else {
            cur_blk += u.blk;
            seg_blk += u.repeat * u.blk;
        }
        span += (int)min_u64(u.repeat, 1u << 30);
        out->span_max = span > out->span_max ? span : out->span_max;
        out->gather_max = max_u64(out->gather_max, size * seg_blk);
    }
    out->packed_max = max_u64(out->packed_max, size * cur_blk + cur_rep);
}

/* ---- dp's temporaries, replayed (parallel/dp.c) ---- */

/* The runtime's temporary buffers (tmp_alloc) come and go in an order the
 * planner knows: ZeRO-3's gathers at each acquire (the segment's own and
 * the next one's, prefetched), ZeRO-2/3's segment gradients from a
 * segment's backward acquire to its grads_ready, and the packed buckets
 * from the first segment packed into them until their reduction is
 * finished. Only that last moment depends on timing: a reduction finishes
 * when a later progress() finds it done, or when make_room must free a
 * buffer (MSR_DP_MAX_PACKED alive) or the micro-batch ends. The replay
 * lets none finish before it must, so its peak is the runtime's when
 * communication lags behind backward (the usual case on a loaded CPU),
 * and an upper bound otherwise. The update's allgather (ZeRO 1-2) holds
 * two consecutive buckets at once. Limits of the replay's arrays: beyond
 * them the sum of maxima stands in. */
#define REPLAY_MAX 2048

typedef struct replay {
    int zero, nseg, nb, size;
    uint64_t cur, peak;
    /* buckets: packed elements, lowest segment, state */
    uint64_t packed[REPLAY_MAX], blk[REPLAY_MAX];
    int low_seg[REPLAY_MAX];
    unsigned char alive[REPLAY_MAX];
    int alive_n, next_start, next_fin;
    /* segments: elements, gather buffer, first and last bucket, state */
    uint64_t count[REPLAY_MAX], gbuf[REPLAY_MAX];
    int b_lo[REPLAY_MAX], b_hi[REPLAY_MAX]; /* bucket of the first / last element */
    unsigned char rep[REPLAY_MAX], direct[REPLAY_MAX], gat[REPLAY_MAX], grads[REPLAY_MAX];
} replay_t;

static void r_alloc(replay_t *r, uint64_t n)
{
    r->cur += n * F32;
    r->peak = max_u64(r->peak, r->cur);
}

static void r_free(replay_t *r, uint64_t n)
{
    r->cur -= n * F32;
}

/* The layout's buckets and segments, from the unit walk; returns -1 past
 * the arrays' limits. */
static int replay_layout(const part_t *p, const msr_plan_layout_t *l, replay_t *r)
{
    msr_layout_units_t it;
    msr_layout_unit_t u;
    part_units(p, l, &it);
    if (it.buckets > REPLAY_MAX || it.nseg > REPLAY_MAX)
        return -1;
    r->nb = (int)it.buckets;
    r->nseg = it.nseg;
    r->size = it.size;
    for (int b = 0; b < r->nb; b++) {
        r->packed[b] = r->blk[b] = 0;
        r->low_seg[b] = -1;
        r->alive[b] = 0;
    }
    int units[REPLAY_MAX];
    for (int s = 0; s < r->nseg; s++) {
        r->count[s] = seg_count(p, s);
        r->gbuf[s] = 0;
        r->gat[s] = r->grads[s] = 0;
        r->rep[s] = (unsigned char)msr_layout_replicated(r->count[s], l->zero_min_bytes);
        r->b_lo[s] = -1, r->b_hi[s] = 0; /* an empty segment packs nothing */
        units[s] = 0;
    }
    while (msr_layout_units_next(&it, 0, &u)) {
        int b = (int)u.bucket, s = u.seg;
        if (units[s]++ == 0)
            r->b_lo[s] = b;
        r->b_hi[s] = b;
        if (r->low_seg[b] < 0)
            r->low_seg[b] = s;
        r->packed[b] += u.replicated ? u.n : (uint64_t)r->size * u.blk;
        r->blk[b] += u.replicated ? 0 : u.blk;
        r->gbuf[s] += u.replicated ? 0 : (uint64_t)r->size * u.blk;
    }
    for (int s = 0; s < r->nseg; s++)
        r->direct[s] = !r->rep[s] && units[s] == 1 && r->count[s] % (uint64_t)r->size == 0;
    return 0;
}

static void r_finish(replay_t *r, int b)
{
    if (r->alive[b]) {
        r_free(r, r->packed[b]);
        r->alive[b] = 0;
        r->alive_n--;
    }
}

/* make_room and the packing of segment s's units, in flat order. */
static void r_pack(replay_t *r, int s)
{
    for (int b = r->b_lo[s]; b >= r->b_hi[s]; b--) {
        if (r->alive[b])
            continue;
        while (r->alive_n >= MSR_DP_MAX_PACKED && r->next_fin < r->next_start)
            r_finish(r, r->next_fin++);
        r->alive[b] = 1;
        r->alive_n++;
        r_alloc(r, r->packed[b]);
    }
}

static void r_grads_ready(replay_t *r, int s)
{
    if (r->zero >= 1)
        r_pack(r, s);
    if (r->zero >= 2 && r->grads[s]) {
        r_free(r, r->count[s]);
        r->grads[s] = 0;
    }
    while (r->next_start < r->nb && r->low_seg[r->next_start] >= s)
        r->next_start++;
}

/* ZeRO-3: gather_start, seg_ready, seg_drop (state 1 gathering, 2 full). */
static void r_gather_start(replay_t *r, int s)
{
    if (r->rep[s] || r->gat[s])
        return;
    r_alloc(r, r->direct[s] ? r->count[s] : r->gbuf[s]);
    r->gat[s] = 1;
}

static void r_seg_ready(replay_t *r, int s)
{
    if (r->rep[s] || r->gat[s] == 2)
        return;
    r_gather_start(r, s);
    if (!r->direct[s]) {
        r_alloc(r, r->count[s]);
        r_free(r, r->gbuf[s]);
    }
    r->gat[s] = 2;
}

static void r_seg_drop(replay_t *r, int s)
{
    if (r->rep[s] || !r->gat[s])
        return;
    r_free(r, r->gat[s] == 1 && !r->direct[s] ? r->gbuf[s] : r->count[s]);
    r->gat[s] = 0;
}

/* A backward acquire under ZeRO-2/3: the segment's gradient. */
static void r_grads(replay_t *r, int s)
{
    if (r->zero >= 2 && !r->grads[s]) {
        r_alloc(r, r->count[s]);
        r->grads[s] = 1;
    }
}

/* The whole model's micro-batch under ZeRO-3: the layout's visits
 * (msr_layout_zero3_visits), as parallel/dp.c gathers and reduces. */
static void r_whole_micro(replay_t *r)
{
    int L = r->nseg - 2, nv = MSR_LAYOUT_ZERO3_VISITS(L),
        visits[MSR_LAYOUT_ZERO3_VISITS(REPLAY_MAX)];
    msr_layout_zero3_visits(L, visits);
    for (int v = 0; v < nv; v++) {
        int s = visits[v], next = v + 1 < nv ? visits[v + 1] : -1;
        if (r->zero >= 3) {
            r_seg_ready(r, s);
            if (next >= 0 && next != s)
                r_gather_start(r, next);
        }
        int bwd = v >= MSR_LAYOUT_ZERO3_BACKWARD(L);
        if (bwd)
            r_grads(r, s);
        if (r->zero >= 3 && next != s)
            r_seg_drop(r, s);
        /* grads_ready after the head's release, each block's and the embedding's */
        if (bwd && (v == nv - 1 || (s >= 1 && v > MSR_LAYOUT_ZERO3_BACKWARD(L))))
            r_grads_ready(r, s);
    }
}

/* The model-parallel runtime's backward of one micro-batch (mp.c
 * run_backward, chunk by chunk): the tied embedding acquired with the head
 * when pp = 1, then the head, the blocks and the embedding in reverse flat
 * order; with the interleaved schedule gradients are only kept, and
 * msr_dp_reduce_all packs every segment at the end. */
static void r_mp_step(replay_t *r, const part_t *p, const msr_plan_layout_t *l)
{
    int overlap = l->schedule != MSR_PLAN_INTERLEAVED;
    if (p->has_head && l->pp == 1)
        r_grads(r, 0);
    for (int s = r->nseg - 1; s >= 0; s--) {
        r_grads(r, s);
        if (overlap)
            r_grads_ready(r, s);
    }
    if (!overlap)
        for (int s = r->nseg - 1; s >= 0; s--)
            r_grads_ready(r, s);
}

/* The peak of dp's temporaries; *during_p those alive beside the kept
 * activations (in backward), *after_p those alive once the frames are
 * freed (the interleaved schedule's msr_dp_reduce_all, the update's
 * allgather). UINT64_MAX when the part is too large to replay. */
static uint64_t transient_peak(const msr_plan_layout_t *l, const part_t *p, int whole, replay_t *r,
                               uint64_t *during_p, uint64_t *after_p)
{
    *during_p = *after_p = 0;
    if (l->zero == 0)
        return 0;
    if (replay_layout(p, l, r) != 0)
        return UINT64_MAX;
    r->zero = l->zero;
    r->cur = r->peak = 0;
    r->alive_n = r->next_start = r->next_fin = 0;
    if (whole)
        r_whole_micro(r);
    else
        r_mp_step(r, p, l);
    uint64_t bwd = r->peak, gather = 0;
    /* the update's allgather: a bucket and the one before it */
    if ((l->zero == 1 || l->zero == 2) && replicas(l) > 1) {
        uint64_t prev = 0;
        for (int b = 0; b < r->nb; b++) {
            if (r->blk[b] == 0)
                continue;
            uint64_t g = (uint64_t)r->size * r->blk[b];
            gather = max_u64(gather, (prev + g) * F32);
            prev = g;
        }
    }
    if (whole || l->schedule != MSR_PLAN_INTERLEAVED) {
        *during_p = bwd;
        *after_p = gather;
    } else {
        /* backward only keeps the segments' gradients (ZeRO-2) */
        *during_p = l->zero >= 2 ? p->total * F32 : 0;
        *after_p = max_u64(bwd, gather);
    }
    return max_u64(bwd, gather);
}

/* The resident part of comm/ucx/shm.c's tiled area, as one member of a
 * group of n ranks on one node maps it, with the library's default tuning
 * (comm/ucx/coll.c: MSR_COMM_SHM_TILE 256 KiB, MSR_COMM_SHM_TILES 4,
 * MSR_COMM_SHM_SEGMENT 16 MiB): n stages and a result of 4 slots of a
 * tile each, tiles halved until the area fits. Collectives over
 * MSR_COMM_SHM_MAX (16 KiB) go through it a tile at a time, slot after
 * slot; a member maps the pages it writes and reads, and a read fault maps
 * the 64 KiB window around it (Linux's fault-around, aligned in the
 * address space, not the file): a part of x bytes read from another
 * member's slot maps about x + 1.5 windows. Per slot a vector of msg bytes
 * (t = min(msg, tile) of it there) maps, for an allreduce (rs_ag 0), the
 * member's stage t, the result t and its n-th of each other stage; for a
 * reduce-scatter with the allgather after it (ZeRO >= 1, sp), its stage,
 * its slice of each other stage, and each other member's block (msg / n)
 * up to a tile. The slots turn with every tile, so over a few steps each
 * collective meets every slot, unless the step's tiles are a multiple of
 * the slots: then each keeps its own (a reduce-scatter and an allgather of
 * few tiles). rs_per_step: the reduce-scatters of the one vector a step
 * (the allgather after them); 0: many collectives. Measured (the pages of
 * the segment each member maps, on 4 and 8 ranks): within about 1.5 MiB
 * of the most any member maps. */
static uint64_t shm_tiled(uint64_t n, uint64_t msg, int rs_ag, uint64_t rs_per_step)
{
    const uint64_t line = 64, depth = MSR_SHM_TILES, segment = MSR_SHM_SEGMENT_BYTES;
    const uint64_t fa = 64u << 10; /* the kernel's fault-around */
    uint64_t tile = MSR_SHM_TILE_BYTES;
    while (tile && (n + 1) * depth * tile > segment)
        tile = tile / 2 / line * line;
    if (tile < n * line || msg == 0)
        return 0;
    uint64_t t = min_u64(msg, tile);
#define SHM_READ(x) min_u64(t, (x) + 3 * fa / 2)
    if (!rs_ag)
        return depth * (2 * t + (n - 1) * SHM_READ(t / n));
    uint64_t block = max_u64(msg / n, 1), slice = tile / n / line * line;
    uint64_t part = min_u64(block, slice), ag = min_u64(block, tile);
    uint64_t rs_slot = min_u64(t, n * part) + (n - 1) * SHM_READ(part);
    uint64_t ag_slot = ag + (n - 1) * SHM_READ(ag);
    uint64_t rs_tiles = ceil_div(block, part) * rs_per_step, ag_tiles = ceil_div(block, tile);
    uint64_t used = depth * (rs_slot + ag_slot);
    if (rs_per_step > 0 && (rs_tiles + ag_tiles) % depth == 0)
        used = min_u64(depth, rs_tiles) * rs_slot + min_u64(depth, ag_tiles) * ag_slot;
#undef SHM_READ
    return min_u64(used, depth * n * t);
}

/* ---- activations (parallel/mp_pipe.c msr_mp_carve_frame) ---- */

/* fp32 elements one micro-batch chunk of `layers` blocks keeps, GPT
 * runtime: the layout's table, which the runtime carves its frames from. */
static uint64_t frame_elems(const msr_plan_model_t *m, const msr_plan_layout_t *l, int layers,
                            int head)
{
    msr_layout_dims_t d = msr_layout_dims(l->micro_batch, m->seq, m->channels, m->heads, m->vocab,
                                          l->tp, l->sp, msr_plan_cp(l), l->recompute);
    return msr_layout_frame_elems(&d, layers, head);
}

/* train_gpt runs the whole model without the model-parallel runtime when
 * tp = pp = 1 with no recompute (parallel/train.c msr_train_uses_mp; its
 * --trace would switch it on). */
static int whole_path(const msr_plan_layout_t *l)
{
    return l->tp == 1 && l->pp == 1 && msr_plan_cp(l) == 1 && l->chunks == 1 && !l->sp &&
           l->recompute == MSR_PLAN_RC_NONE;
}

/* fp32 elements of the whole model's activation table for b sequences:
 * the layout's, which model/gpt.c carves. */
static uint64_t whole_acts_elems(const msr_plan_model_t *m, const msr_plan_layout_t *l)
{
    msr_layout_dims_t d = msr_layout_dims(l->micro_batch, m->seq, m->channels, m->heads, m->vocab,
                                          1, 0, 1, MSR_LAYOUT_RECOMPUTE_NONE);
    return msr_layout_whole_elems(&d, m->layers);
}

/* ---- the runtime's work space ---- */

/* Bytes of the work space and token buffers a rank allocates besides its
 * parameters, state and kept activations; *scratch_p the blocks' shared
 * scratch among them. Whole model: the layout's whole-model work table
 * (msr_layout_whole_work, which model/gpt.c carves, one attention head's
 * datt) and the model's and the trainer's inputs and targets, N ints each.
 * Model parallel: the layout's work table (msr_layout_work, which
 * parallel/mp.c carves) and the ints context parallel adds, with the
 * trainer's inputs and targets for every micro-batch of the step (whole
 * sequences under cp). */
static uint64_t work_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                           uint64_t *scratch_p)
{
    *scratch_p = 0;
    uint64_t N = (uint64_t)l->micro_batch * (uint64_t)m->seq;
    if (whole_path(l)) {
        msr_layout_dims_t d = msr_layout_dims(l->micro_batch, m->seq, m->channels, m->heads,
                                              m->vocab, 1, 0, 1, MSR_LAYOUT_RECOMPUTE_NONE);
        return msr_layout_whole_work_elems(&d, 1) * F32 + 4 * N * sizeof(int32_t);
    }
    uint64_t trainer = 2 * N * (uint64_t)l->micros * sizeof(int32_t);
    msr_layout_dims_t d = msr_layout_dims(l->micro_batch, m->seq, m->channels, m->heads, m->vocab,
                                          l->tp, l->sp, msr_plan_cp(l), l->recompute);
    *scratch_p = msr_layout_work(&d, MSR_WORK_SCRATCH) * F32;
    return msr_layout_work_elems(&d) * F32 + msr_layout_work_ints(&d, l->micros) * sizeof(int32_t) +
           trainer;
}

/* The MoE state's buffers: the layout's MoE table (msr_layout_moe_work,
 * which model/moe.c allocates from) for micro-batches of N = b T tokens,
 * floats of fw bytes: a slot per MoE block the rank runs and frame (a
 * micro-batch whose routing waits for its backward: one on the whole-model
 * path and under full recompute, else the step's micro-batches), the once
 * buffers, the load counters of every MoE block, and under tp without sp
 * on tp ranks but 0 the router's unwanted input gradient. */
static uint64_t moe_work_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l, int blocks,
                               int tp_rank, uint64_t fw)
{
    uint64_t N = (uint64_t)l->micro_batch * (uint64_t)m->seq, C = (uint64_t)m->channels;
    uint64_t H = m->arch == MSR_PLAN_LLAMA ? (uint64_t)m->ffn : 4 * C;
    msr_layout_moe_dims_t d =
        msr_layout_moe_dims(N, (uint64_t)m->experts, (uint64_t)m->top_k, m->capacity_factor, C, H);
    int frames = whole_path(l) || l->recompute == MSR_PLAN_RC_FULL ? 1 : l->micros;
    int rdx = l->tp > 1 && !l->sp && tp_rank > 0;
    return msr_layout_moe_work_bytes(&d, blocks, frames, m->layers / m->moe_every, rdx, fw);
}

/* Paper accounting: bytes of one chunk's kept activations. */
static uint64_t frame_paper_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                                  msr_plan_precision_t prec, int layers)
{
    /* under cp a rank keeps its T/cp positions' terms; ring attention keeps
     * no scores (the terms selective recompute drops) but the logsumexp, a
     * s b / t in fp32 */
    int cp = msr_plan_cp(l);
    double s_cp = (double)(m->seq / cp);
    int rc = cp > 1 && l->recompute == MSR_PLAN_RC_NONE ? MSR_PLAN_RC_SELECTIVE : l->recompute;
    double lse = cp > 1 && l->recompute != MSR_PLAN_RC_FULL
                     ? 4 * (double)m->heads * s_cp * l->micro_batch / l->tp
                     : 0;
    double b =
        msr_plan_layer_act_bytes(s_cp, l->micro_batch, m->channels, m->heads, l->tp, l->sp, rc) +
        lse;
    if (m->arch == MSR_PLAN_LLAMA) {
        /* Llama's terms (plan.h's table, second half) */
        double s = s_cp, B = l->micro_batch, h = m->channels, a = m->heads, t = l->tp;
        double f = m->ffn, g = (double)m->kv_heads / a, sbh = s * B * h, sbf = s * B * f;
        double split = 8 * sbh + 4 * sbh * g + 6 * sbf; /* q, k, v, out-proj input, MLP */
        double sp_only = 8 * sbh;                       /* the two norms' inputs and outputs */
        double scores = 2 * a * s * s * B;
        if (l->recompute == MSR_PLAN_RC_FULL)
            b = 2 * sbh / (l->sp ? t : 1);
        else
            b = split / t + sp_only / (l->sp ? t : 1) + (rc == MSR_PLAN_RC_NONE ? scores / t : 0) +
                lse;
    }
    if (prec == MSR_PLAN_FP32)
        b *= 2;
    return (uint64_t)(b * layers + 0.5);
}

/* Walks rank pr's schedule (layout/pipe_order.h, the runtime's order):
 * a forward opens a frame of its chunk, its backward closes it. Returns the
 * most bytes alive at once; *held_p the most frames. */
static uint64_t schedule_peak(const msr_plan_layout_t *l, int pr, const uint64_t *chunk_bytes,
                              int *held_p)
{
    uint64_t live = 0, peak = 0;
    int held = 0, most = 0;
    int n = msr_pipe_ops_to_peak(l->schedule, l->micros, l->pp, pr, l->chunks);
    for (int k = 0; k < n; k++) {
        msr_pipe_op_t o = msr_pipe_op_at(l->schedule, l->micros, l->pp, pr, l->chunks, k);
        if (o.backward) {
            live -= chunk_bytes[o.c];
            held--;
            continue;
        }
        live += chunk_bytes[o.c];
        held++;
        peak = max_u64(peak, live);
        most = held > most ? held : most;
    }
    *held_p = most;
    return peak;
}

/* ---- checks ---- */

#define BAD(...)                             \
    do {                                     \
        snprintf(why, why_len, __VA_ARGS__); \
        return -1;                           \
    } while (0)

int msr_plan_check_model(const msr_plan_model_t *m, char *why, size_t why_len)
{
    if (m->layers < 1 || m->channels < 1 || m->heads < 1 || m->vocab < 1 || m->seq < 1)
        BAD("layers, channels, heads, vocabulary and sequence must be positive");
    if (m->channels % m->heads != 0)
        BAD("%d channels do not divide into %d heads", m->channels, m->heads);
    if (m->arch == MSR_PLAN_LLAMA && (m->kv_heads < 1 || m->heads % m->kv_heads != 0 || m->ffn < 1))
        BAD("%d kv heads do not divide %d heads (or ffn %d < 1)", m->kv_heads, m->heads, m->ffn);
    /* every count must fit in 64 bits, with room: bytes of the model state */
    double C = m->channels, F = m->arch == MSR_PLAN_LLAMA ? m->ffn : 4.0 * C;
    double params =
        (double)m->vocab * C * 2 + (double)m->seq * C + (double)m->layers * (4 * C * C + 3 * C * F);
    if (m->experts < 0)
        BAD("%d experts: 0 (a dense model) or more", m->experts);
    if (m->experts > 0) {
        if (m->top_k < 1 || m->top_k > m->experts)
            BAD("top-k %d is not in [1, %d experts]", m->top_k, m->experts);
        if (m->moe_every < 1 || m->moe_every > m->layers)
            BAD("moe-every %d is not in [1, %d layers]", m->moe_every, m->layers);
        if (!(m->capacity_factor > 0) || m->capacity_factor > 1e6)
            BAD("capacity factor %g is not in (0, 1e6]", m->capacity_factor);
        params += (double)(m->layers / m->moe_every) * m->experts * 3 * C * F;
    }
    if (params * 32 > 1e18)
        BAD("the model is too large to count in bytes (%.3g parameters)", params);
    return 0;
}

int msr_plan_check(const msr_plan_model_t *m, const msr_plan_layout_t *l, char *why, size_t why_len)
{
    if (msr_plan_check_model(m, why, why_len) != 0)
        return -1;
    if (l->dp < 1 || l->tp < 1 || l->pp < 1 || l->chunks < 1 || l->micro_batch < 1 || l->micros < 1)
        BAD("dp, tp, pp, virtual stages, micro-batch and micro-batches must be positive");
    if (m->heads % l->tp != 0)
        BAD("%d heads do not divide among tp %d", m->heads, l->tp);
    if (m->arch == MSR_PLAN_LLAMA && m->kv_heads % l->tp != 0)
        BAD("%d kv heads do not divide among tp %d", m->kv_heads, l->tp);
    if (m->arch == MSR_PLAN_LLAMA && m->ffn % l->tp != 0)
        BAD("ffn %d does not divide among tp %d", m->ffn, l->tp);
    if (m->vocab % l->tp != 0)
        BAD("vocabulary of %d does not divide among tp %d", m->vocab, l->tp);
    if ((int64_t)l->pp * l->chunks > m->layers)
        BAD("%d layers are fewer than the %d pipeline stages", m->layers, l->pp * l->chunks);
    if (l->stage_layers != NULL) {
        int64_t sum = 0;
        for (int j = 0; j < l->pp * l->chunks; j++) {
            if (l->stage_layers[j] < 1)
                BAD("virtual stage %d has %d layers: every virtual stage needs at least 1", j,
                    l->stage_layers[j]);
            sum += l->stage_layers[j];
        }
        if (sum != m->layers)
            BAD("the stages' layers sum to %lld, not the %d layers", (long long)sum, m->layers);
    }
    if (l->sp && l->tp < 2)
        BAD("sequence parallel needs tp > 1");
    int cp = msr_plan_cp(l);
    if (l->cp < 0)
        BAD("cp %d must be at least 1", l->cp);
    if (cp > 1 && m->seq % (2 * cp) != 0)
        BAD("sequence of %d does not divide into 2 x cp %d chunks", m->seq, cp);
    if (l->sp && m->seq / cp % l->tp != 0)
        BAD("sequence of %d does not divide among tp %d%s", m->seq / cp, l->tp,
            cp > 1 ? " (the positions of one cp rank)" : "");
    if (l->schedule < 0 || l->schedule > MSR_PLAN_INTERLEAVED || l->recompute < 0 ||
        l->recompute > MSR_PLAN_RC_FULL)
        BAD("schedule %d or recompute %d out of range", l->schedule, l->recompute);
    if (l->chunks > 1 && l->schedule != MSR_PLAN_INTERLEAVED)
        BAD("%d virtual stages need the interleaved schedule", l->chunks);
    if (l->pp > 1 && l->schedule == MSR_PLAN_1F1B && l->micros < l->pp)
        BAD("1F1B needs at least as many micro-batches as stages: %d for %d", l->micros, l->pp);
    if (l->schedule == MSR_PLAN_INTERLEAVED && (l->pp < 2 || l->micros % l->pp != 0))
        BAD("interleaved 1F1B needs pp > 1 and micro-batches a multiple of the stages: %d for %d",
            l->micros, l->pp);
    if (l->zero < 0 || l->zero > 3 || ((l->tp > 1 || l->pp > 1 || cp > 1) && l->zero > 2))
        BAD("ZeRO stage %d: 0..3, and 0..2 with tensor, pipeline or context parallel", l->zero);
    int ep = msr_plan_ep(l);
    if (l->ep < 0 || (ep > 1 && m->experts == 0))
        BAD("ep %d: expert parallel needs at least 1 and a MoE model", l->ep);
    if (m->experts > 0 && m->experts % ep != 0)
        BAD("%d experts do not divide among ep %d ranks", m->experts, ep);
    if (m->experts > 0 && m->experts % (ep * l->tp) != 0)
        BAD("%d experts do not divide among ep %d x tp %d ranks", m->experts, ep, l->tp);
    if (l->dp % ep != 0)
        BAD("ep %d does not divide dp %d: the expert-parallel groups are cut from the "
            "data-parallel group",
            ep, l->dp);
    if (m->experts > 0 && cp > 1)
        BAD("MoE blocks do not run with context parallel (cp %d)", cp);
    /* a step's kept activations, bounded the same way */
    double C = m->channels, T = m->seq, F = m->arch == MSR_PLAN_LLAMA ? m->ffn : 4.0 * C;
    double acts = (double)l->micro_batch * l->micros * l->chunks * m->layers *
                  ((double)m->heads * T * T + 32 * T * (C + F) + T * m->vocab);
    if (acts * 8 > 1e18)
        BAD("the layout's activations are too many to count in bytes (%.3g)", acts);
    return 0;
}
#undef BAD

/* ---- a rank ---- */

uint64_t msr_plan_frame_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                              msr_plan_precision_t prec, int layers, int head)
{
    if (m->arch == MSR_PLAN_GPT && prec == MSR_PLAN_FP32)
        return frame_elems(m, l, layers, head) * F32;
    return frame_paper_bytes(m, l, prec, layers);
}

static msr_plan_layout_t with_defaults(const msr_plan_layout_t *l)
{
    msr_plan_layout_t d = *l;
    msr_layout_bucket_defaults(&d.bucket_bytes, &d.first_bucket_bytes);
    return d;
}

/* A rank's parameters, gradients and optimizer state: the runtime's
 * (parallel/dp.c msr_dp_memory) or the papers' accounting. */
static void rank_state(const msr_plan_layout_t *l, msr_plan_precision_t prec, int runtime,
                       uint64_t P, uint64_t S, msr_plan_rank_t *o)
{
    if (runtime) {
        o->params = (l->zero >= 3 ? S : P) * F32;
        o->grads = (l->zero >= 2 ? S : P) * F32;
        o->optim = 2 * (l->zero >= 1 ? S : P) * F32;
        return;
    }
    /* paper: 16-bit parameters and gradients with fp32 master weights, or
     * fp32 without; Adam's two fp32 moments; ZeRO partitions them */
    uint64_t w = prec == MSR_PLAN_BF16 ? 2 : 4;
    uint64_t sh = ceil_div(P, (uint64_t)replicas(l));
    o->params = (l->zero >= 3 ? sh : P) * w;
    o->grads = (l->zero >= 2 ? sh : P) * w;
    o->optim = 2 * (l->zero >= 1 ? sh : P) * F32;
    o->master = prec == MSR_PLAN_BF16 ? (l->zero >= 1 ? sh : P) * F32 : 0;
}

/* Activations: each chunk's frame, held per the schedule. */
static void rank_activations(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                             msr_plan_precision_t prec, int runtime, msr_plan_rank_t *o)
{
    int n = l->pp * l->chunks, max_layers = 0, last_layers = 0;
    uint64_t chunk_bytes[64];
    for (int c = 0; c < l->chunks && c < 64; c++) {
        int lo, hi, j = c * l->pp + o->pp_rank;
        stage_layers(l, m->layers, n, j, &lo, &hi);
        max_layers = hi - lo > max_layers ? hi - lo : max_layers;
        if (c == l->chunks - 1)
            last_layers = hi - lo;
        chunk_bytes[c] = msr_plan_frame_bytes(m, l, prec, hi - lo, j == n - 1);
    }
    o->frame_bytes[0] = msr_plan_frame_bytes(m, l, prec, max_layers, 0);
    o->frame_bytes[1] = msr_plan_frame_bytes(m, l, prec, last_layers, 1);
    o->activations = schedule_peak(l, o->pp_rank, chunk_bytes, &o->frames_held);
    if (runtime && whole_path(l)) {
        /* the whole model keeps one micro-batch's activations in its own
         * table (model/gpt.c msr_gpt_carve_acts), reused by the next */
        o->activations = whole_acts_elems(m, l) * F32;
        o->frames_held = 1;
    }
}

/* The experts (parallel/train.c experts_create): E / (ep tp) of each MoE
 * block of the part, their moments whole or, under ZeRO with replicas,
 * this rank's block among the dp / ep ranks holding the same experts (rank
 * dp_rank / ep of them), with a gather buffer of all the blocks. */
static void rank_experts(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                         msr_plan_precision_t prec, int runtime, const part_t *p,
                         msr_plan_rank_t *o)
{
    int ep = msr_plan_ep(l), held = m->experts / (ep * l->tp);
    uint64_t fw = runtime ? F32 : (prec == MSR_PLAN_BF16 ? 2 : 4);
    uint64_t count = (uint64_t)p->moe_blocks * (uint64_t)held * expert_params(m);
    uint64_t reps = (uint64_t)(l->dp / ep), lo = 0, hi = count, blk = 0;
    if (l->zero >= 1 && reps > 1) {
        blk = ceil_div(count, reps);
        lo = min_u64(count, (uint64_t)(o->dp_rank / ep) * blk);
        hi = min_u64(count, lo + blk);
    }
    o->experts_held = held;
    o->expert_params = count * fw;
    o->expert_grads = count * fw;
    o->expert_optim = 2 * (hi - lo) * F32;
    o->moe_work = moe_work_bytes(m, l, p->moe_blocks, o->tp_rank, fw) + blk * reps * F32;
    if (prec == MSR_PLAN_BF16)
        o->master += (hi - lo) * F32;
}

/* The bytes of what the runtime allocates and frees during a step, beyond
 * the frames: dp's temporaries (their bound, or the replayed peak), the
 * work space, the shared-memory staging. Sets *during_p and *after_p (the
 * transients held with the activations, and after them), *acts_after_p
 * (activations still held after the step) and o->untouched. */
static void rank_transients(const msr_plan_model_t *m, const msr_plan_layout_t *l, int runtime,
                            uint64_t w, const part_t *p, const dp_layout_t *d, msr_plan_rank_t *o,
                            uint64_t *during_p, uint64_t *after_p, uint64_t *acts_after_p)
{
    /* dp's temporaries, at most (parallel/dp.c): packed buckets under ZeRO
     * >= 1 (MSR_DP_MAX_PACKED started ones, plus those of the segment being
     * packed, which cannot start before it is ready); two segments'
     * gradients under ZeRO-2/3 (the embedding's, held from the tied head's
     * backward to the end, and the current one); the current and the
     * prefetched segment, each with its gather buffer, under ZeRO-3 */
    uint64_t g = runtime ? F32 : w;
    if (l->zero >= 1)
        o->buckets_bound += (uint64_t)(MSR_DP_MAX_PACKED + d->span_max) * d->packed_max * g;
    if (l->zero >= 2)
        o->buckets_bound += 2 * d->seg_max * g;
    if (l->zero >= 3)
        o->buckets_bound += 2 * (d->seg_max + d->gather_max) * g;
    *during_p = o->buckets_bound;
    *after_p = *acts_after_p = 0;
    o->untouched = 0;
    if (!runtime)
        return;
    /* the runtime's own order, replayed (above); the sum of maxima stays
     * for parts too large to replay */
    static _Thread_local replay_t r;
    uint64_t peak = transient_peak(l, p, whole_path(l), &r, during_p, after_p);
    if (peak != UINT64_MAX)
        o->buckets_bound = peak;
    else
        *during_p = o->buckets_bound, *after_p = 0;
    uint64_t scratch;
    o->work = work_bytes(m, l, &scratch);
    /* without recompute no block writes the shared scratch: its pages never
     * become resident */
    if (l->recompute == MSR_PLAN_RC_NONE)
        o->untouched = scratch;
    /* dp's gradients (every part has more than 16 KiB of them) and tp's
     * activations */
    const uint64_t shm_max = MSR_SHM_MAX_BYTES;
    uint64_t P = p->total, bucket = l->bucket_bytes; /* with_defaults set it */
    if (replicas(l) > 1 && P * F32 > shm_max)
        o->shm += shm_tiled((uint64_t)replicas(l), min_u64(P * F32, bucket), l->zero >= 1,
                            (l->zero == 1 || l->zero == 2) && d->buckets == 1
                                ? (l->zero == 2 ? (uint64_t)l->micros : 1)
                                : 0);
    uint64_t Tc = (uint64_t)(m->seq / msr_plan_cp(l));
    uint64_t act = (uint64_t)l->micro_batch * Tc * (uint64_t)m->channels * F32;
    if (l->tp > 1 && act > shm_max)
        o->shm += shm_tiled((uint64_t)l->tp, act, l->sp, 0);
    *acts_after_p = whole_path(l) ? o->activations : 0;
}

void msr_plan_rank(const msr_plan_model_t *m, const msr_plan_layout_t *lay,
                   msr_plan_precision_t prec, int rank, msr_plan_rank_t *o)
{
    msr_plan_layout_t l = with_defaults(lay);
    memset(o, 0, sizeof *o);
    int cp = msr_plan_cp(&l);
    o->tp_rank = rank % l.tp;
    o->cp_rank = rank / l.tp % cp;
    o->pp_rank = rank / (l.tp * cp) % l.pp;
    o->dp_rank = rank / (l.tp * cp * l.pp);
    int runtime = m->arch == MSR_PLAN_GPT && prec == MSR_PLAN_FP32;
    part_t p;
    part_of(m, &l, o->pp_rank, &p);
    dp_layout_t d;
    dp_layout(&p, &l, o->dp_rank * cp + o->cp_rank, &d); /* its rank among the replicas */
    o->part_params = p.total;
    o->shard_elems = d.shard;
    o->replicated_elems = d.replicated;
    o->buckets = d.buckets;
    rank_state(&l, prec, runtime, p.total, d.shard, o);
    rank_activations(m, &l, prec, runtime, o);
    if (m->experts > 0)
        rank_experts(m, &l, prec, runtime, &p, o);

    /* pipeline buffers (parallel/mp.c msr_mp_create): the gradients sent
     * back, one per frame, and the last stage's copy of wte and its
     * gradient (GPT's tied head) */
    uint64_t w = runtime ? F32 : (prec == MSR_PLAN_BF16 ? 2 : 4);
    uint64_t Tc = (uint64_t)(m->seq / cp), Tl = l.sp ? Tc / (uint64_t)l.tp : Tc;
    uint64_t Nl = (uint64_t)l.micro_batch * Tl, C = (uint64_t)m->channels;
    if (l.pp > 1 && (o->pp_rank > 0 || l.chunks > 1))
        o->comm += (uint64_t)l.micros * (uint64_t)l.chunks * Nl * C * w;
    if (l.pp > 1 && o->pp_rank == l.pp - 1 && m->arch == MSR_PLAN_GPT)
        o->comm += 2 * (uint64_t)(m->vocab / l.tp) * C * w;

    uint64_t during, after, acts_after;
    rank_transients(m, &l, runtime, w, &p, &d, o, &during, &after, &acts_after);
    o->total = msr_plan_rank_rows(o) - o->activations - o->buckets_bound +
               max_u64(o->activations + during, acts_after + after);
}

uint64_t msr_plan_peak(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                       msr_plan_precision_t prec, int *rank_p)
{
    uint64_t best = 0;
    int stage = msr_plan_cp(l) * l->tp, who = 0;
    /* the tp and cp ranks of a stage hold equal slices and positions, and
     * replica 0 owns the largest shard: the stages' first ranks suffice */
    for (int r = 0; r < stage * l->pp; r += stage) {
        msr_plan_rank_t o;
        msr_plan_rank(m, l, prec, r, &o);
        if (o.total > best) {
            best = o.total;
            who = r;
        }
    }
    if (rank_p != NULL)
        *rank_p = who;
    return best;
}

/* ---- the paper accounting ---- */

double msr_plan_zero_bytes(double psi, int stage, int nd)
{
    const double K = 12.0; /* fp32 master weights, momentum, variance: 4 + 4 + 4 */
    double params = 2 * psi, grads = 2 * psi, optim = K * psi;
    if (stage >= 1)
        optim /= nd;
    if (stage >= 2)
        grads /= nd;
    if (stage >= 3)
        params /= nd;
    return params + grads + optim;
}

/* Korthikanti et al. (2022), section 4: the bytes one layer keeps, by term.
 * unit: 0 sbh, 1 sbf (f = 4h for GPT), 2 a s^2 b. split: 1 cut by tensor
 * parallel, 0 cut only by sequence parallel. dropped: selective recompute
 * drops it. */
typedef struct act_term {
    const char *what;
    double coef;
    int unit, split, dropped;
} act_term_t;

static const act_term_t gpt_terms[] = {
    {"layernorm 1 input", 2, 0, 0, 0},
    {"QKV input (layernorm 1 output)", 2, 0, 0, 0},
    {"Q and K", 4, 0, 1, 0},
    {"softmax output", 2, 2, 1, 1},
    {"softmax dropout mask", 1, 2, 1, 1},
    {"softmax dropout output", 2, 2, 1, 1},
    {"V", 2, 0, 1, 0},
    {"attention projection input", 2, 0, 1, 0},
    {"attention dropout mask", 1, 0, 0, 0},
    {"layernorm 2 input", 2, 0, 0, 0},
    {"MLP input (layernorm 2 output)", 2, 0, 0, 0},
    {"GELU input", 2, 1, 1, 0},
    {"GELU output (second linear input)", 2, 1, 1, 0},
    {"MLP dropout mask", 1, 0, 0, 0},
};

double msr_plan_layer_act_bytes(double s, double b, double h, double a, int t, int sp,
                                int recompute)
{
    double T = t;
    if (recompute == MSR_PLAN_RC_FULL)
        return 2 * s * b * h / (sp ? T : 1); /* the layer's input only */
    double sum = 0;
    for (size_t i = 0; i < sizeof gpt_terms / sizeof gpt_terms[0]; i++) {
        const act_term_t *x = &gpt_terms[i];
        if (x->dropped && recompute == MSR_PLAN_RC_SELECTIVE)
            continue;
        double unit = x->unit == 0 ? s * b * h : x->unit == 1 ? s * b * 4 * h : a * s * s * b;
        sum += x->coef * unit / (x->split || sp ? T : 1);
    }
    return sum;
}
