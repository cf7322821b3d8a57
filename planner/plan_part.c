/* The part of the model a rank holds: the parameters of a block, an expert,
 * the embeddings and the head, the part's segments in flat order as the
 * runtime lays them out (model/gpt.h), and data parallel's layout of them
 * (buckets, units, shards), walked with layout/'s unit walk as the runtime
 * cuts them. The rest of the memory model (plan_mem.c) counts from these. */
#include <string.h>

#include "layout/layout.h"
#include "planner/plan.h"
#include "planner/plan_mem_impl.h"

/* ---- the part a rank holds ---- */

/* Layers [lo, hi) of virtual stage j of n: the runtime's split
 * (layout/layout.h), as the layout's stage_layers say, else even. */
void msr_plan_stage_layers(const msr_plan_layout_t *l, int layers, int n, int j, int *lo, int *hi)
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
    uint64_t hd = C / (uint64_t)m->heads, F = (uint64_t)m->ffn;
    /* k, v: C x the rank's kv heads' rows (kv heads / t, or one head
     * replicated when fewer than t: model/gpt.h) */
    uint64_t kvl = (uint64_t)msr_plan_kv_heads_local(m, t) * hd;
    /* q, o: C x C; gate, up, down: C x F (all split); two RMSNorms */
    if (moe)
        return 2 * C * C / T + 2 * C * kvl + 2 * C + E * C;
    return (2 * C * C + 3 * C * F) / T + 2 * C * kvl + 2 * C;
}

/* Elements of one expert: the dense MLP's (model/moe.h: 8C^2 + 5C). */
uint64_t msr_plan_expert_params(const msr_plan_model_t *m)
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
             (msr_plan_is_moe(m, l) ? (uint64_t)m->experts * msr_plan_expert_params(m) : 0);
    return n;
}

/* The segments of a part in flat order (model/gpt.h): the embeddings on
 * the first stage, a segment per block, the final norm (and head) on the
 * last. */

/* The model's layer that the part's block k is (its chunks' layers in
 * order, as gpt.c lays out the segments). */
static int part_layer(const msr_plan_part_t *p, int k)
{
    int n = p->l->pp * p->l->chunks;
    for (int c = 0; c < p->l->chunks; c++) {
        int lo, hi;
        msr_plan_stage_layers(p->l, p->m->layers, n, c * p->l->pp + p->pr, &lo, &hi);
        if (k < hi - lo)
            return lo + k;
        k -= hi - lo;
    }
    return -1;
}

void msr_plan_part_of(const msr_plan_model_t *m, const msr_plan_layout_t *l, int pr,
                      msr_plan_part_t *p)
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
        msr_plan_stage_layers(l, m->layers, n, c * l->pp + pr, &lo, &hi);
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

uint64_t msr_plan_seg_count(const msr_plan_part_t *p, int k)
{
    if (p->has_embed && k == 0)
        return p->embed;
    k -= p->has_embed;
    if (k >= p->blocks)
        return p->head;
    return p->moe_blocks > 0 && msr_plan_is_moe(p->m, part_layer(p, k)) ? p->moe_block : p->block;
}

uint64_t msr_plan_part_blocks(const msr_plan_part_t *p)
{
    return (uint64_t)(p->blocks - p->moe_blocks) * p->block +
           (uint64_t)p->moe_blocks * p->moe_block;
}

uint64_t msr_plan_part_block_max(const msr_plan_part_t *p)
{
    uint64_t most = p->blocks > p->moe_blocks ? p->block : 0;
    return p->moe_blocks > 0 ? msr_plan_max_u64(most, p->moe_block) : most;
}

/* ---- data parallel's layout (layout/layout.h's unit walk) ---- */

static uint64_t part_seg_count(const void *arg, int s)
{
    return msr_plan_seg_count(arg, s);
}

/* The walk over part p's units, cut as the runtime cuts them. */
void msr_plan_part_units(const msr_plan_part_t *p, const msr_plan_layout_t *l,
                         msr_layout_units_t *it)
{
    msr_layout_units_init(it, p->total, p->has_embed + p->blocks + p->has_head, part_seg_count, p,
                          msr_plan_replicas(l), l->bucket_bytes, l->first_bucket_bytes,
                          l->zero_min_bytes);
}

/* Walks the units with runs (huge models have millions of alike whole
 * buckets): a run counts as its units would, one by one. */
void msr_plan_dp_layout(const msr_plan_part_t *p, const msr_plan_layout_t *l, int dp_rank,
                        msr_plan_dp_layout_t *out)
{
    msr_layout_units_t it;
    msr_layout_unit_t u;
    msr_plan_part_units(p, l, &it);
    uint64_t size = (uint64_t)it.size, cur_blk = 0, cur_rep = 0, seg_blk = 0;
    uint64_t cur_bucket = UINT64_MAX;
    int span = 0;
    memset(out, 0, sizeof *out);
    out->buckets = it.buckets;
    while (msr_layout_units_next(&it, 1, &u)) {
        if (u.seg_first)
            span = 0, seg_blk = 0;
        out->seg_max = msr_plan_max_u64(out->seg_max, u.seg_count);
        if (u.bucket != cur_bucket) {
            out->packed_max = msr_plan_max_u64(out->packed_max, size * cur_blk + cur_rep);
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
        span += (int)msr_plan_min_u64(u.repeat, 1u << 30);
        out->span_max = span > out->span_max ? span : out->span_max;
        out->gather_max = msr_plan_max_u64(out->gather_max, size * seg_blk);
    }
    out->packed_max = msr_plan_max_u64(out->packed_max, size * cur_blk + cur_rep);
}
