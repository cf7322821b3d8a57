/* Data parallel's temporary buffers, replayed: the packed buckets, the
 * ZeRO-2/3 segment gradients and the ZeRO-3 gathers that parallel/dp.c
 * allocates and frees during a step, in the runtime's order, for their
 * peak beside the kept activations and after them (plan_mem.c adds it to
 * a rank's bytes). */
#include "layout/layout.h"
#include "planner/plan.h"
#include "planner/plan_mem_impl.h"

static void r_alloc(msr_plan_replay_t *r, uint64_t n)
{
    r->cur += n * MSR_PLAN_F32;
    r->peak = msr_plan_max_u64(r->peak, r->cur);
}

static void r_free(msr_plan_replay_t *r, uint64_t n)
{
    r->cur -= n * MSR_PLAN_F32;
}

/* The layout's buckets and segments, from the unit walk; returns -1 past
 * the arrays' limits. */
static int replay_layout(const msr_plan_part_t *p, const msr_plan_layout_t *l, msr_plan_replay_t *r)
{
    msr_layout_units_t it;
    msr_layout_unit_t u;
    msr_plan_part_units(p, l, &it);
    if (it.buckets > MSR_PLAN_REPLAY_MAX || it.nseg > MSR_PLAN_REPLAY_MAX)
        return -1;
    r->nb = (int)it.buckets;
    r->nseg = it.nseg;
    r->size = it.size;
    for (int b = 0; b < r->nb; b++) {
        r->packed[b] = r->blk[b] = 0;
        r->low_seg[b] = -1;
        r->alive[b] = 0;
    }
    int units[MSR_PLAN_REPLAY_MAX];
    for (int s = 0; s < r->nseg; s++) {
        r->count[s] = msr_plan_seg_count(p, s);
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

static void r_finish(msr_plan_replay_t *r, int b)
{
    if (r->alive[b]) {
        r_free(r, r->packed[b]);
        r->alive[b] = 0;
        r->alive_n--;
    }
}

/* make_room and the packing of segment s's units, in flat order. */
static void r_pack(msr_plan_replay_t *r, int s)
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

static void r_grads_ready(msr_plan_replay_t *r, int s)
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
static void r_gather_start(msr_plan_replay_t *r, int s)
{
    if (r->rep[s] || r->gat[s])
        return;
    r_alloc(r, r->direct[s] ? r->count[s] : r->gbuf[s]);
    r->gat[s] = 1;
}

static void r_seg_ready(msr_plan_replay_t *r, int s)
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

static void r_seg_drop(msr_plan_replay_t *r, int s)
{
    if (r->rep[s] || !r->gat[s])
        return;
    r_free(r, r->gat[s] == 1 && !r->direct[s] ? r->gbuf[s] : r->count[s]);
    r->gat[s] = 0;
}

/* A backward acquire under ZeRO-2/3: the segment's gradient. */
static void r_grads(msr_plan_replay_t *r, int s)
{
    if (r->zero >= 2 && !r->grads[s]) {
        r_alloc(r, r->count[s]);
        r->grads[s] = 1;
    }
}

/* The whole model's micro-batch under ZeRO-3: the layout's visits
 * (msr_layout_zero3_visits; a Llama's head untied), as parallel/dp.c
 * gathers and reduces. */
static void r_whole_micro(msr_plan_replay_t *r, int tied)
{
    int L = r->nseg - 2, visits[MSR_LAYOUT_ZERO3_VISITS(MSR_PLAN_REPLAY_MAX)];
    int nv = msr_layout_zero3_visits(L, tied, visits), b0 = MSR_LAYOUT_ZERO3_BACKWARD(L, tied);
    for (int v = 0; v < nv; v++) {
        int s = visits[v], next = v + 1 < nv ? visits[v + 1] : -1;
        if (r->zero >= 3) {
            r_seg_ready(r, s);
            if (next >= 0 && next != s)
                r_gather_start(r, next);
        }
        int bwd = v >= b0;
        if (bwd)
            r_grads(r, s);
        if (r->zero >= 3 && next != s)
            r_seg_drop(r, s);
        /* grads_ready after the final norm's (and head's) release, each
         * block's and the embedding's last, not after a tied head's 0 */
        if (bwd && (s >= 1 || v == nv - 1))
            r_grads_ready(r, s);
    }
}

/* ZeRO-3 in the model-parallel runtime (one stage: mp_run.c): every
 * acquire gathers its segment, every release frees it, no prefetch. */
static void r_use(msr_plan_replay_t *r, int s, int bwd)
{
    r_seg_ready(r, s);
    if (bwd)
        r_grads(r, s);
}

/* A stage's segments (msr_plan_part_t): the embedding's (e, -1 when not
 * held), the head's (h, the final norm's; -1 when not held), whether the
 * head's forward reads the tied embedding (a GPT on one stage) and whether
 * its backward acquires the embedding's segment (one stage: mp_run.c). */
typedef struct r_stage {
    int e, h, tied_fwd, head_embed;
} r_stage_t;

static r_stage_t r_stage(const msr_plan_replay_t *r, const msr_plan_part_t *p)
{
    r_stage_t t = {p->has_embed ? 0 : -1, p->has_head ? r->nseg - 1 : -1, 0, 0};
    t.head_embed = t.e >= 0 && t.h >= 0;
    t.tied_fwd = t.head_embed && p->m->arch != MSR_PLAN_LLAMA;
    return t;
}

/* A micro-batch's forward: the embedding, the blocks, then the head with
 * the final norm's segment (a GPT's on one stage inside the tied
 * embedding's). */
static void r_mp_forward(msr_plan_replay_t *r, const r_stage_t *t)
{
    for (int s = 0; s < r->nseg; s++) {
        if (s == t->h)
            continue;
        r_use(r, s, 0);
        r_seg_drop(r, s);
    }
    if (t->h < 0)
        return;
    if (t->tied_fwd)
        r_use(r, 0, 0);
    r_use(r, t->h, 0);
    r_seg_drop(r, t->h);
    if (t->tied_fwd)
        r_seg_drop(r, 0);
}

/* Its backward: the head (on one stage inside the embedding's acquire),
 * the blocks in reverse, the embedding's gradient handed over before its
 * release; reduce 0 (the interleaved schedule) only keeps the gradients. */
static void r_mp_backward(msr_plan_replay_t *r, const r_stage_t *t, int reduce)
{
    if (t->h >= 0) {
        if (t->head_embed)
            r_use(r, 0, 1);
        r_use(r, t->h, 1);
        r_seg_drop(r, t->h);
        if (t->head_embed)
            r_seg_drop(r, 0);
        if (reduce)
            r_grads_ready(r, t->h);
    }
    for (int s = t->h >= 0 ? t->h - 1 : r->nseg - 1; s > t->e; s--) {
        r_use(r, s, 1);
        r_seg_drop(r, s);
        if (reduce)
            r_grads_ready(r, s);
    }
    if (t->e < 0)
        return;
    r_use(r, 0, 1);
    if (reduce)
        r_grads_ready(r, 0);
    r_seg_drop(r, 0);
}

/* Whether this rank's op after its first backward is a forward (its
 * schedule's order, layout/pipe_order.h: 1F1B's steady state, more than
 * one micro-batch past the warm-up). */
static int r_forward_after_backward(const msr_plan_part_t *p, const msr_plan_layout_t *l)
{
    int n = 2 * l->micros * l->chunks;
    for (int k = 0; k + 1 < n; k++)
        if (msr_pipe_op_at((int)l->schedule, l->micros, l->pp, p->pr, l->chunks, k).backward)
            return !msr_pipe_op_at((int)l->schedule, l->micros, l->pp, p->pr, l->chunks, k + 1)
                        .backward;
    return 0;
}

/* One stage's step under ZeRO-3: a micro-batch's forward and backward;
 * where the schedule runs a forward next (1F1B's steady state) it runs
 * while this backward's buckets may still be held (msr_dp_micro_end comes
 * with the next backward). The interleaved schedule keeps every segment's gradient
 * through the step (a second micro-batch's visits find them all held),
 * the first stage of a pipelined GPT gathers the embedding again to add
 * the head's wte gradient, and msr_dp_reduce_all packs the segments in
 * reverse; *during_p: the peak while the frames are held. */
static void r_mp_zero3(msr_plan_replay_t *r, const msr_plan_part_t *p, const msr_plan_layout_t *l,
                       uint64_t *during_p)
{
    r_stage_t t = r_stage(r, p);
    int interleaved = l->schedule == MSR_PLAN_INTERLEAVED;
    r_mp_forward(r, &t);
    r_mp_backward(r, &t, !interleaved);
    if (!interleaved && r_forward_after_backward(p, l))
        r_mp_forward(r, &t);
    if (interleaved) {
        r_mp_forward(r, &t);
        r_mp_backward(r, &t, 0);
    }
    *during_p = r->peak;
    if (!interleaved)
        return;
    if (t.e >= 0 && l->pp > 1 && p->m->arch != MSR_PLAN_LLAMA) {
        r_seg_ready(r, 0);
        r_seg_drop(r, 0);
    }
    for (int s = r->nseg - 1; s >= 0; s--) {
        r_grads(r, s);
        r_grads_ready(r, s);
    }
}

/* The model-parallel runtime's backward of one micro-batch (mp.c
 * run_backward, chunk by chunk): the tied embedding acquired with the head
 * when pp = 1, then the head, the blocks and the embedding in reverse flat
 * order; with the interleaved schedule gradients are only kept, and
 * msr_dp_reduce_all packs every segment at the end. */
static void r_mp_step(msr_plan_replay_t *r, const msr_plan_part_t *p, const msr_plan_layout_t *l,
                      uint64_t *during_p)
{
    int overlap = l->schedule != MSR_PLAN_INTERLEAVED;
    if (r->zero >= 3) {
        r_mp_zero3(r, p, l, during_p);
        return;
    }
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
uint64_t msr_plan_transient_peak(const msr_plan_layout_t *l, const msr_plan_part_t *p, int whole,
                                 msr_plan_replay_t *r, uint64_t *during_p, uint64_t *after_p)
{
    *during_p = *after_p = 0;
    if (l->zero == 0)
        return 0;
    if (replay_layout(p, l, r) != 0)
        return UINT64_MAX;
    r->zero = l->zero;
    r->cur = r->peak = 0;
    r->alive_n = r->next_start = r->next_fin = 0;
    uint64_t during3 = 0; /* ZeRO-3 in the model-parallel runtime: with the frames */
    if (whole)
        r_whole_micro(r, p->m->arch != MSR_PLAN_LLAMA);
    else
        r_mp_step(r, p, l, &during3);
    uint64_t bwd = r->peak, gather = 0;
    /* the update's allgather: a bucket and the one before it */
    if ((l->zero == 1 || l->zero == 2) && msr_plan_replicas(l) > 1) {
        uint64_t prev = 0;
        for (int b = 0; b < r->nb; b++) {
            if (r->blk[b] == 0)
                continue;
            uint64_t g = (uint64_t)r->size * r->blk[b];
            gather = msr_plan_max_u64(gather, (prev + g) * MSR_PLAN_F32);
            prev = g;
        }
    }
    if (whole || l->schedule != MSR_PLAN_INTERLEAVED) {
        *during_p = bwd;
        *after_p = gather;
    } else {
        /* backward only keeps the segments' gradients (ZeRO-2; ZeRO-3
         * gathers a segment at a time beside them) */
        *during_p = l->zero >= 3 ? during3 : l->zero >= 2 ? p->total * MSR_PLAN_F32 : 0;
        *after_p = msr_plan_max_u64(bwd, gather);
    }
    return msr_plan_max_u64(bwd, gather);
}
