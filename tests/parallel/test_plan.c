/* The planner's memory model (planner/plan.h): the paper accounting
 * reproduces the ZeRO paper's per-device bytes and Korthikanti et al.'s
 * activation bytes per layer; the runtime accounting equals what the
 * runtime itself builds (a part's parameters, a chunk's kept activations,
 * dp's shard, buckets and bytes) in one process. The multi-rank comparison
 * with train_gpt --report is plan_report.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "parallel/dp.h"
#include "model/moe.h"
#include "parallel/mp.h"
#include "planner/plan.h"
#include "tests/runner.h"

/* ZeRO (Rajbhandari et al. 2019), mixed-precision Adam, K = 12. */
static void test_zero_paper(void)
{
    const double K = 12;
    const double psis[] = {1e9, 7.5e9, 175e9, 1e12};
    const int nds[] = {1, 8, 64, 1024};
    for (size_t i = 0; i < 4; i++) {
        for (size_t j = 0; j < 4; j++) {
            double P = psis[i], N = nds[j];
            MSR_CHECK(msr_plan_zero_bytes(P, 0, nds[j]) == (2 + 2 + K) * P);
            MSR_CHECK(msr_plan_zero_bytes(P, 1, nds[j]) == 4 * P + K * P / N);
            MSR_CHECK(msr_plan_zero_bytes(P, 2, nds[j]) == 2 * P + (2 + K) * P / N);
            MSR_CHECK(msr_plan_zero_bytes(P, 3, nds[j]) == (4 + K) * P / N);
        }
    }
    /* the paper's figure 1 (7.5B parameters, 64 devices), as printed to 0.1 GB */
    MSR_CHECK(msr_plan_zero_bytes(7.5e9, 0, 64) == 120e9);
    MSR_CHECK(fabs(msr_plan_zero_bytes(7.5e9, 1, 64) - 31.4e9) < 0.05e9);
    MSR_CHECK(fabs(msr_plan_zero_bytes(7.5e9, 2, 64) - 16.6e9) < 0.05e9);
    MSR_CHECK(fabs(msr_plan_zero_bytes(7.5e9, 3, 64) - 1.9e9) < 0.05e9);
}

/* Korthikanti et al. (2022): bytes per layer in 16-bit. Sizes are powers
 * of two and their multiples so every term is exact in double. */
static void test_korthikanti(void)
{
    const double cfg[][5] = {
        /* s, b, h, a, t */
        {2048, 1, 12288, 96, 8}, /* GPT-3 175B, t = 8 */
        {2048, 4, 4096, 32, 4},  {1024, 2, 2048, 16, 2},    {4096, 1, 16384, 128, 8},
        {512, 8, 1024, 8, 1},    {2048, 1, 20480, 160, 16},
    };
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        double s = cfg[i][0], b = cfg[i][1], h = cfg[i][2], a = cfg[i][3], t = cfg[i][4];
        int ti = (int)t;
        double sbh = s * b * h;
        MSR_CHECK(msr_plan_layer_act_bytes(s, b, h, a, 1, 0, MSR_PLAN_RC_NONE) ==
                  sbh * (34 + 5 * a * s / h));
        MSR_CHECK(msr_plan_layer_act_bytes(s, b, h, a, ti, 0, MSR_PLAN_RC_NONE) ==
                  sbh * (10 + 24 / t + 5 * a * s / (h * t)));
        if (ti > 1) {
            MSR_CHECK(msr_plan_layer_act_bytes(s, b, h, a, ti, 1, MSR_PLAN_RC_NONE) ==
                      sbh * (34 + 5 * a * s / h) / t);
            MSR_CHECK(msr_plan_layer_act_bytes(s, b, h, a, ti, 1, MSR_PLAN_RC_SELECTIVE) ==
                      34 * sbh / t);
        }
        MSR_CHECK(msr_plan_layer_act_bytes(s, b, h, a, ti, 0, MSR_PLAN_RC_FULL) == 2 * sbh);
        MSR_CHECK(msr_plan_layer_act_bytes(s, b, h, a, 1, 0, MSR_PLAN_RC_FULL) == 2 * sbh);
    }
}

static msr_plan_model_t gpt(int L, int C, int NH, int T)
{
    return (msr_plan_model_t){MSR_PLAN_GPT, L, C, NH, NH, 4 * C, MSR_GPT_VOCAB, T};
}

static msr_plan_layout_t layout(int dp, int tp, int pp, int sp, int zero, int rc, int sched,
                                int chunks, int micros)
{
    return (msr_plan_layout_t){dp, tp, pp, sp, zero, rc, 2, micros, sched, chunks, 0, 0, 0};
}

/* A part's parameters and a chunk's kept activations, against the runtime's
 * own counts (msr_gpt_create_part, msr_mp_frame_bytes). */
static void test_runtime_part_and_frames(void)
{
    const int tps[] = {1, 2, 4}, pps[] = {1, 2, 4}, chunks[] = {1, 2};
    msr_plan_model_t m = gpt(8, 32, 4, 16);
    msr_gpt_config_t gc = {MSR_GPT_VOCAB, 16, 8, 4, 32};
    MSR_CHECK_EQ(msr_plan_num_params(&m), (uint64_t)msr_gpt_num_params(&gc));
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 3; b++) {
            for (int c = 0; c < 2; c++) {
                int tp = tps[a], pp = pps[b], v = chunks[c];
                if (v > 1 && pp < 2)
                    continue;
                for (int sp = 0; sp <= (tp > 1); sp++) {
                    for (int rc = 0; rc < 3; rc++) {
                        msr_plan_layout_t l =
                            layout(1, tp, pp, sp, 0, rc,
                                   v > 1 ? MSR_PLAN_INTERLEAVED : MSR_PLAN_1F1B, v, 4);
                        char why[200];
                        MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
                        msr_mp_config_t mc = {
                            sp, (msr_mp_schedule_t)l.schedule, v, (msr_mp_recompute_t)rc, 2, 4, 0};
                        MSR_CHECK_OK(msr_mp_check(&gc, &mc, pp, tp));
                        for (int r = 0; r < tp * pp; r++) {
                            msr_plan_rank_t o;
                            msr_plan_rank(&m, &l, MSR_PLAN_FP32, r, &o);
                            msr_gpt_part_t part = {tp, r % tp, pp, r / tp, v};
                            msr_gpt_t *g = NULL;
                            MSR_CHECK_OK(msr_gpt_create_part(&gc, &part, 0, &g));
                            MSR_CHECK_EQ(o.part_params, (uint64_t)g->num_params);
                            int maxl = 0;
                            for (int k = 0; k < v; k++)
                                if (g->chunk_hi[k] - g->chunk_lo[k] > maxl)
                                    maxl = g->chunk_hi[k] - g->chunk_lo[k];
                            int lastl = g->chunk_hi[v - 1] - g->chunk_lo[v - 1];
                            MSR_CHECK_EQ(o.frame_bytes[0],
                                         (uint64_t)msr_mp_frame_bytes(&gc, &mc, tp, maxl, 0));
                            MSR_CHECK_EQ(o.frame_bytes[1],
                                         (uint64_t)msr_mp_frame_bytes(&gc, &mc, tp, lastl, 1));
                            msr_gpt_destroy(g);
                        }
                    }
                }
            }
        }
    }
}

/* Context parallel: a chunk's kept activations against the runtime's
 * count (msr_mp_frame_bytes with its cp), docs/model.md's worked example,
 * the ranks' coordinates and shards over dp x cp, and the layouts the
 * runtime refuses. */
static void test_runtime_cp(void)
{
    msr_plan_model_t m = gpt(4, 32, 4, 16);
    msr_gpt_config_t gc = {MSR_GPT_VOCAB, 16, 4, 4, 32};
    char why[200];
    int refused = 0;
    for (int cp = 2; cp <= 8; cp *= 2)
        for (int tp = 1; tp <= 4; tp *= 2)
            for (int sp = 0; sp <= (tp > 1); sp++)
                for (int rc = 0; rc < 3; rc++) {
                    msr_plan_layout_t l = layout(1, tp, 2, sp, 0, rc, MSR_PLAN_1F1B, 1, 2);
                    l.cp = cp;
                    msr_mp_config_t mc = {sp, MSR_MP_1F1B, 1, (msr_mp_recompute_t)rc, 2, 2, 0};
                    mc.cp = cp;
                    int ok = 16 / cp % tp == 0 || !sp;
                    MSR_CHECK_EQ(msr_plan_check(&m, &l, why, sizeof why) == 0, ok);
                    MSR_CHECK_EQ(msr_mp_check(&gc, &mc, 2, tp) == MSR_OK, ok);
                    if (!ok) {
                        MSR_CHECK(strstr(why, "one cp rank") != NULL);
                        refused++;
                        continue;
                    }
                    msr_plan_rank_t o;
                    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &o);
                    MSR_CHECK_EQ(o.frame_bytes[0],
                                 (uint64_t)msr_mp_frame_bytes(&gc, &mc, tp, 2, 0));
                    MSR_CHECK_EQ(o.frame_bytes[1],
                                 (uint64_t)msr_mp_frame_bytes(&gc, &mc, tp, 2, 1));
                    /* the logsumexp N NH/tp in place of the probabilities */
                    msr_plan_layout_t l1 = l;
                    l1.cp = 1;
                    if (rc == MSR_PLAN_RC_NONE && !sp) {
                        msr_plan_rank_t o1;
                        msr_plan_rank(&m, &l1, MSR_PLAN_FP32, 0, &o1);
                        MSR_CHECK(o.frame_bytes[0] < o1.frame_bytes[0]);
                    }
                }
    MSR_CHECK_EQ(refused, 3); /* cp 8 x tp 4 with sp (2 positions over 4 ranks), each recompute */
    /* docs/model.md: L 2, C 32, NH 4, B 2, T 16 on cp 2, no tp, no
     * recompute: 87168 bytes a micro-batch with the head */
    msr_plan_model_t m2 = gpt(2, 32, 4, 16);
    msr_plan_layout_t l = layout(1, 1, 1, 0, 0, 0, MSR_PLAN_1F1B, 1, 1);
    l.cp = 2;
    MSR_CHECK(msr_plan_check(&m2, &l, why, sizeof why) == 0);
    msr_plan_rank_t o;
    msr_plan_rank(&m2, &l, MSR_PLAN_FP32, 1, &o);
    MSR_CHECK_EQ(o.frame_bytes[1], (uint64_t)87168);
    MSR_CHECK_EQ(o.activations, (uint64_t)87168);
    /* rank = ((dp_rank pp + pp_rank) cp + cp_rank) tp + tp_rank; ZeRO-1
     * shards over the replica group dp x cp */
    msr_plan_layout_t z = layout(2, 2, 2, 1, 1, 0, MSR_PLAN_1F1B, 1, 2);
    z.cp = 2;
    MSR_CHECK(msr_plan_check(&m, &z, why, sizeof why) == 0);
    msr_plan_rank(&m, &z, MSR_PLAN_FP32, 13, &o); /* 13 = ((1 * 2 + 1) * 2 + 0) * 2 + 1 */
    MSR_CHECK(o.dp_rank == 1 && o.pp_rank == 1 && o.cp_rank == 0 && o.tp_rank == 1);
    msr_plan_rank_t o4;
    msr_plan_layout_t d4 = z;
    d4.dp = 4;
    d4.cp = 1;
    msr_plan_rank(&m, &d4, MSR_PLAN_FP32, 2 * 2 * 2 + 2 + 1, &o4); /* dp rank 2, the same stage */
    MSR_CHECK_EQ(o.shard_elems, o4.shard_elems);
    MSR_CHECK_EQ(o.optim, o4.optim);
    /* the paper accounting (bf16): Korthikanti's terms of the T/cp
     * positions with the scores dropped (what selective recompute drops),
     * plus the logsumexp in fp32 */
    msr_plan_model_t big = gpt(2, 1024, 16, 4096);
    msr_plan_layout_t pl = layout(1, 2, 1, 1, 0, 0, MSR_PLAN_1F1B, 1, 1);
    pl.cp = 4;
    MSR_CHECK(msr_plan_check(&big, &pl, why, sizeof why) == 0);
    msr_plan_rank(&big, &pl, MSR_PLAN_BF16, 0, &o);
    double per_layer = msr_plan_layer_act_bytes(1024, 2, 1024, 16, 2, 1, MSR_PLAN_RC_SELECTIVE) +
                       4.0 * 16 * 1024 * 2 / 2;
    MSR_CHECK_EQ(o.frame_bytes[0], (uint64_t)(2 * per_layer + 0.5));
    /* refused: 2 cp chunks not dividing the sequence */
    l.cp = 3;
    MSR_CHECK(msr_plan_check(&m2, &l, why, sizeof why) != 0 && strstr(why, "2 x cp 3") != NULL);
    /* ZeRO-3 with cp shards the parameters too over dp x cp: cp rank 1 of
     * cp 2 holds what dp rank 1 of dp 2 does */
    l.cp = 2;
    l.zero = 3;
    MSR_CHECK_MSG(msr_plan_check(&m2, &l, why, sizeof why) == 0, "%s", why);
    msr_plan_rank(&m2, &l, MSR_PLAN_FP32, 1, &o);
    msr_plan_layout_t d2 = l;
    d2.dp = 2;
    d2.cp = 1;
    msr_plan_rank(&m2, &d2, MSR_PLAN_FP32, 1, &o4);
    MSR_CHECK(o.shard_elems > 0 && o.shard_elems < o.part_params);
    MSR_CHECK_EQ(o.shard_elems, o4.shard_elems);
    MSR_CHECK_EQ(o.params, o4.params);
    MSR_CHECK_EQ(o.params, o.shard_elems * 4);
    /* with pp > 1 each stage's part is sharded the same way */
    l.pp = l.micros = 2;
    MSR_CHECK_MSG(msr_plan_check(&m2, &l, why, sizeof why) == 0, "%s", why);
    msr_plan_rank(&m2, &l, MSR_PLAN_FP32, 1, &o);
    MSR_CHECK(o.shard_elems > 0 && o.shard_elems < o.part_params);
    MSR_CHECK_EQ(o.params, o.shard_elems * 4);
}

/* An uneven split of the layers (layout.stage_layers, train_gpt
 * --pp-layers): each rank's part and chunk frames against the runtime's
 * part made with the same split; bad splits refused. */
static void test_runtime_uneven_split(void)
{
    msr_plan_model_t m = gpt(8, 32, 4, 16);
    msr_gpt_config_t gc = {MSR_GPT_VOCAB, 16, 8, 4, 32};
    static const struct {
        int pp, chunks, split[8];
    } splits[] = {
        {2, 1, {1, 7}},       {2, 1, {6, 2}},       {4, 1, {1, 3, 3, 1}},
        {4, 1, {2, 1, 1, 4}}, {2, 2, {1, 3, 3, 1}}, {2, 2, {4, 1, 1, 2}},
    };
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        int pp = splits[i].pp, v = splits[i].chunks;
        for (int tp = 1; tp <= 2; tp++) {
            for (int rc = 0; rc < 3; rc++) {
                msr_plan_layout_t l =
                    layout(1, tp, pp, 0, 0, rc, v > 1 ? MSR_PLAN_INTERLEAVED : MSR_PLAN_1F1B, v, 4);
                l.stage_layers = splits[i].split;
                char why[200];
                MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
                msr_mp_config_t mc = {0, (msr_mp_schedule_t)l.schedule,
                                      v, (msr_mp_recompute_t)rc,
                                      2, 4,
                                      0, splits[i].split};
                MSR_CHECK_OK(msr_mp_check(&gc, &mc, pp, tp));
                for (int r = 0; r < tp * pp; r++) {
                    msr_plan_rank_t o, even;
                    msr_plan_rank(&m, &l, MSR_PLAN_FP32, r, &o);
                    msr_gpt_part_t part = {tp, r % tp, pp, r / tp, v, splits[i].split};
                    msr_gpt_t *g = NULL;
                    MSR_CHECK_OK(msr_gpt_create_part(&gc, &part, 0, &g));
                    MSR_CHECK_EQ(o.part_params, (uint64_t)g->num_params);
                    int maxl = 0, held = 0;
                    for (int k = 0; k < v; k++) {
                        int n = g->chunk_hi[k] - g->chunk_lo[k];
                        MSR_CHECK_EQ(n, splits[i].split[k * pp + r / tp]);
                        maxl = n > maxl ? n : maxl;
                        held += n;
                    }
                    int lastl = g->chunk_hi[v - 1] - g->chunk_lo[v - 1];
                    MSR_CHECK_EQ(o.frame_bytes[0],
                                 (uint64_t)msr_mp_frame_bytes(&gc, &mc, tp, maxl, 0));
                    MSR_CHECK_EQ(o.frame_bytes[1],
                                 (uint64_t)msr_mp_frame_bytes(&gc, &mc, tp, lastl, 1));
                    /* the split moved layers: the even split's part differs
                     * by the blocks this rank gained or lost */
                    msr_plan_layout_t le = l;
                    le.stage_layers = NULL;
                    msr_plan_rank(&m, &le, MSR_PLAN_FP32, r, &even);
                    uint64_t block = 12 * 32 * 32 / (uint64_t)tp + 6 * 32 + 7 * 32 / (uint64_t)tp;
                    MSR_CHECK_EQ(o.part_params + (uint64_t)(v * 8 / (pp * v)) * block,
                                 even.part_params + (uint64_t)held * block);
                    msr_gpt_destroy(g);
                }
            }
        }
    }
    /* refusals: an empty stage, a wrong sum */
    msr_plan_layout_t l = layout(1, 1, 2, 0, 0, 0, MSR_PLAN_1F1B, 1, 4);
    const int zero[] = {0, 8}, seven[] = {3, 4};
    char why[200];
    l.stage_layers = zero;
    MSR_CHECK(msr_plan_check(&m, &l, why, sizeof why) == -1);
    MSR_CHECK_MSG(strstr(why, "virtual stage 0 has 0 layers") != NULL, "%s", why);
    l.stage_layers = seven;
    MSR_CHECK(msr_plan_check(&m, &l, why, sizeof why) == -1);
    MSR_CHECK_MSG(strstr(why, "sum to 7, not the 8 layers") != NULL, "%s", why);
}

/* dp's layout and bytes against msr_dp_create's, alone (dp 1), every
 * stage, small buckets so there are many and replicated segments. */
/* Rank o of layout l (tp = pp = 1, one dp rank) against what the runtime
 * builds for model gc: its part's parameters, and dp's bytes, shard,
 * replicated elements and buckets. */
static void check_dp_alone(const msr_gpt_config_t *gc, const msr_plan_layout_t *l,
                           const msr_plan_rank_t *o)
{
    msr_gpt_t *g = NULL;
    MSR_CHECK_OK(
        msr_gpt_create_part(gc, &(msr_gpt_part_t){1, 0, 1, 0, 1}, msr_dp_model_flags(l->zero), &g));
    MSR_CHECK_EQ(o->part_params, (uint64_t)g->num_params);
    msr_dp_config_t dc = {l->zero, l->bucket_bytes, l->first_bucket_bytes, l->zero_min_bytes, 1, 0};
    msr_adamw_config_t ac = {0.9, 0.95, 1e-8, 0.1};
    msr_dp_t *dp = NULL;
    MSR_CHECK_OK(msr_dp_create(&dc, NULL, g, &ac, 1, &dp));
    msr_dp_memory_t mem;
    msr_dp_memory(dp, &mem);
    MSR_CHECK_EQ(o->params, (uint64_t)mem.params);
    MSR_CHECK_EQ(o->grads, (uint64_t)mem.grads);
    MSR_CHECK_EQ(o->optim, (uint64_t)mem.optim);
    MSR_CHECK_EQ(o->shard_elems, (uint64_t)mem.shard_elems);
    MSR_CHECK_EQ(o->replicated_elems, (uint64_t)mem.replicated_elems);
    MSR_CHECK_EQ(o->buckets, (uint64_t)dp->num_buckets);
    msr_dp_destroy(dp);
    msr_gpt_destroy(g);
}

static void test_runtime_dp_alone(void)
{
    msr_plan_model_t m = gpt(3, 32, 4, 16);
    msr_gpt_config_t gc = {MSR_GPT_VOCAB, 16, 3, 4, 32};
    const size_t buckets[] = {4000, MSR_DP_BUCKET_BYTES, 40000};
    for (int zero = 0; zero <= 3; zero++) {
        for (size_t k = 0; k < 3; k++) {
            msr_plan_layout_t l = layout(1, 1, 1, 0, zero, 0, MSR_PLAN_1F1B, 1, 1);
            l.bucket_bytes = buckets[k];
            l.first_bucket_bytes = 1000;
            l.zero_min_bytes = 1024 * k;
            msr_plan_rank_t o;
            msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &o);
            check_dp_alone(&gc, &l, &o);
        }
    }
}

/* A Mixture-of-Experts model: the whole model's parameters (dense, routers,
 * every expert), and one rank's part, dp's shard and buckets, and its
 * experts' store, against the runtime's own (ep 1 here; plan_report.sh
 * runs ep 2 and 4 under msrun). */
static void test_runtime_moe(void)
{
    const int cases[][4] = {
        {4, 2, 1, 0}, {4, 1, 2, 1}, {8, 2, 3, 3}, {2, 2, 1, 2}}; /* E K N zero */
    for (size_t i = 0; i < MSR_ARRAY_SIZE(cases); i++) {
        msr_plan_model_t m = gpt(3, 32, 4, 16);
        m.experts = cases[i][0];
        m.top_k = cases[i][1];
        m.moe_every = cases[i][2];
        m.capacity_factor = 1.25;
        int zero = cases[i][3];
        msr_gpt_config_t gc = {MSR_GPT_VOCAB, 16, 3, 4, 32};
        gc.moe = (msr_gpt_moe_t){m.experts, m.top_k, m.moe_every, 1.25, 0.01};
        MSR_CHECK_EQ(msr_plan_num_params(&m),
                     (uint64_t)(msr_gpt_num_params(&gc) + msr_moe_num_params(&gc)));
        msr_plan_layout_t l = layout(1, 1, 1, 0, zero, 0, MSR_PLAN_1F1B, 1, 1);
        l.bucket_bytes = 4000;
        l.first_bucket_bytes = 1000;
        char why[256];
        MSR_CHECK_EQ(msr_plan_check(&m, &l, why, sizeof why), 0);
        msr_plan_rank_t o;
        msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &o);
        check_dp_alone(&gc, &l, &o);
        msr_moe_t *moe = NULL;
        MSR_CHECK_OK(msr_moe_create(&gc, 2 * 16, &moe));
        MSR_CHECK_EQ(o.experts_held, msr_moe_local_experts(moe));
        MSR_CHECK_EQ(o.expert_params, (uint64_t)msr_moe_count(moe) * 4);
        MSR_CHECK_EQ(o.expert_grads, o.expert_params);
        MSR_CHECK_EQ(o.expert_optim, 2 * o.expert_params); /* no replicas to shard over */
        MSR_CHECK(o.moe_work > 0);
        msr_moe_destroy(moe);
        /* the rules the runtime refuses by */
        l.ep = 3;
        l.dp = 3;
        MSR_CHECK_EQ(msr_plan_check(&m, &l, why, sizeof why), -1);
        l.ep = 1;
        l.cp = 2; /* MoE runs under cp */
        l.dp = 1;
        l.zero = 0;
        MSR_CHECK_EQ(msr_plan_check(&m, &l, why, sizeof why), 0);
    }
}

/* tp = pp = 1 without recompute: the whole model's own activation table. */
static void test_runtime_whole(void)
{
    const int shapes[][4] = {{2, 32, 4, 16}, {3, 48, 6, 24}, {1, 16, 1, 8}};
    for (size_t i = 0; i < 3; i++) {
        msr_plan_model_t m = gpt(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
        msr_gpt_config_t gc = {MSR_GPT_VOCAB, shapes[i][3], shapes[i][0], shapes[i][2],
                               shapes[i][1]};
        for (int b = 1; b <= 4; b *= 2) {
            msr_plan_layout_t l = layout(2, 1, 1, 0, 1, 0, MSR_PLAN_1F1B, 1, 3);
            l.micro_batch = b;
            msr_plan_rank_t o;
            msr_plan_rank(&m, &l, MSR_PLAN_FP32, 1, &o);
            msr_gpt_t *g = NULL;
            MSR_CHECK_OK(msr_gpt_create(&gc, b, &g));
            MSR_CHECK_EQ(o.activations, (uint64_t)g->acts_count * 4);
            MSR_CHECK_EQ(o.frames_held, 1);
            msr_gpt_destroy(g);
        }
    }
    /* the chunked head runs the model-parallel runtime: no whole table */
    msr_plan_model_t m = gpt(2, 32, 4, 16);
    msr_plan_layout_t l = layout(2, 1, 1, 0, 1, 0, MSR_PLAN_1F1B, 1, 3);
    msr_plan_rank_t whole, chunked;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 1, &whole);
    l.head_chunk = 48;
    char why[256];
    MSR_CHECK(msr_plan_check(&m, &l, why, sizeof why) == 0);
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 1, &chunked);
    MSR_CHECK(chunked.activations < whole.activations);
    l.head_chunk = -1;
    MSR_CHECK(msr_plan_check(&m, &l, why, sizeof why) != 0);
    MSR_CHECK(strstr(why, "chunk of -1 vocabulary rows") != NULL);
}

/* The schedules' held frames: GPipe all m, 1F1B p - stage, interleaved
 * Megatron's warm-up count. */
static void test_schedules(void)
{
    msr_plan_model_t m = gpt(8, 32, 4, 16);
    for (int pp = 2; pp <= 4; pp *= 2) {
        for (int r = 0; r < pp; r++) {
            msr_plan_rank_t o;
            msr_plan_layout_t l = layout(1, 1, pp, 0, 0, 0, MSR_PLAN_GPIPE, 1, 8);
            msr_plan_rank(&m, &l, MSR_PLAN_FP32, r * 1, &o);
            MSR_CHECK_EQ(o.frames_held, 8);
            l.schedule = MSR_PLAN_1F1B;
            msr_plan_rank(&m, &l, MSR_PLAN_FP32, r, &o);
            MSR_CHECK_EQ(o.frames_held, pp - r);
            MSR_CHECK_EQ(o.activations, (uint64_t)(pp - r) * o.frame_bytes[r == pp - 1]);
            l.schedule = MSR_PLAN_INTERLEAVED;
            l.chunks = 2;
            msr_plan_rank(&m, &l, MSR_PLAN_FP32, r, &o);
            /* warm-up (p - r - 1) * 2 + (v - 1) * p, plus the one of the steady state */
            MSR_CHECK_EQ(o.frames_held, (pp - r - 1) * 2 + pp + 1);
        }
    }
}

/* bf16 with ZeRO follows the paper's per-parameter bytes on one part. */
static void test_bf16_states(void)
{
    msr_plan_model_t m = gpt(4, 64, 4, 16);
    uint64_t P = msr_plan_num_params(&m);
    for (int zero = 0; zero <= 3; zero++) {
        msr_plan_layout_t l = layout(8, 1, 1, 0, zero, 0, MSR_PLAN_1F1B, 1, 1);
        msr_plan_rank_t o;
        msr_plan_rank(&m, &l, MSR_PLAN_BF16, 0, &o);
        uint64_t S = (P + 7) / 8;
        double want = msr_plan_zero_bytes((double)P, zero, 8);
        double got = (double)(o.params + o.grads + o.optim + o.master);
        /* the shard is ceil(P / 8): at most 16 bytes of rounding per term */
        MSR_CHECK_MSG(fabs(got - want) <= 16.0 * 4, "zero %d: %.0f vs %.0f", zero, got, want);
        MSR_CHECK_EQ(o.master, (zero >= 1 ? S : P) * 4);
    }
}

/* The peak scans one rank per stage: it must be the largest of all ranks. */
static void test_peak_is_max(void)
{
    msr_plan_model_t m = gpt(8, 32, 4, 16);
    const msr_plan_layout_t ls[] = {
        layout(2, 2, 2, 1, 2, 0, MSR_PLAN_1F1B, 1, 4),
        layout(4, 1, 2, 0, 1, 1, MSR_PLAN_INTERLEAVED, 2, 4),
        layout(3, 1, 1, 0, 3, 0, MSR_PLAN_1F1B, 1, 1),
        layout(1, 4, 2, 1, 0, 2, MSR_PLAN_GPIPE, 1, 3),
    };
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
        msr_plan_layout_t l = ls[i];
        l.zero_min_bytes = 0;
        l.bucket_bytes = 10000;
        char why[200];
        MSR_CHECK_MSG(msr_plan_check(&m, &l, why, sizeof why) == 0, "%s", why);
        uint64_t most = 0;
        for (int r = 0; r < l.dp * l.tp * l.pp; r++) {
            msr_plan_rank_t o;
            msr_plan_rank(&m, &l, MSR_PLAN_FP32, r, &o);
            most = o.total > most ? o.total : most;
        }
        MSR_CHECK_EQ(msr_plan_peak(&m, &l, MSR_PLAN_FP32, NULL), most);
    }
}

/* The paper accounting per rank (GPT in bf16; in fp32 GPT is the runtime's
 * accounting): Korthikanti's bytes per layer, times the chunk's layers,
 * times the frames the schedule holds. */
static void test_paper_activations(void)
{
    msr_plan_model_t m = gpt(8, 64, 8, 32);
    for (int rc = 0; rc < 3; rc++) {
        msr_plan_layout_t l = layout(1, 2, 4, 1, 0, rc, MSR_PLAN_1F1B, 1, 8);
        for (int r = 0; r < 8; r++) {
            msr_plan_rank_t o;
            msr_plan_rank(&m, &l, MSR_PLAN_BF16, r, &o);
            double layer = msr_plan_layer_act_bytes(32, 2, 64, 8, 2, 1, rc);
            double want = layer * 2 /* layers per stage */ * (4 - r / 2) /* frames */;
            MSR_CHECK_MSG((double)o.activations == want, "rank %d: %llu vs %.0f", r,
                          (unsigned long long)o.activations, want);
        }
    }
    /* Llama: grouped-query attention shrinks k and v, the untied head adds
     * a V x C matrix on the last stage */
    msr_plan_model_t ll = {MSR_PLAN_LLAMA, 4, 64, 8, 2, 160, 1000, 32};
    uint64_t C = 64, kv = 2 * 8, F = 160;
    MSR_CHECK_EQ(msr_plan_num_params(&ll),
                 1000 * C + 4 * (2 * C * C + 2 * C * kv + 3 * C * F + 2 * C) + C + 1000 * C);
    char why[200];
    /* kv heads split over tp (2 on tp 2), replicated (2 on tp 4 and 8);
     * of 12 heads, 3 neither divide tp 4 nor are divided by it */
    for (int t = 2; t <= 8; t *= 2) {
        msr_plan_layout_t l = layout(1, t, 1, 0, 0, 0, MSR_PLAN_1F1B, 1, 1);
        MSR_CHECK(msr_plan_check(&ll, &l, why, sizeof why) == 0);
    }
    msr_plan_layout_t l = layout(1, 4, 1, 0, 0, 0, MSR_PLAN_1F1B, 1, 1);
    msr_plan_model_t l12 = {MSR_PLAN_LLAMA, 4, 48, 12, 3, 160, 1000, 32};
    MSR_CHECK(msr_plan_check(&l12, &l, why, sizeof why) == -1);
    MSR_CHECK(strstr(why, "3 kv heads neither divide among tp 4 nor divide it") != NULL);
    l12.kv_heads = 2;
    MSR_CHECK(msr_plan_check(&l12, &l, why, sizeof why) == 0);
}

/* The shared-memory area's resident part (plan_mem.c shm_tiled), worked
 * by hand for a model of 132864 parameters (one bucket of 531456 bytes)
 * on 8 ranks, tiles of 256 KiB, 4 slots, reads mapping their part and
 * 96 KiB more; then a 3.2M-parameter model, whose allgather reads whole
 * tiles, and tensor parallel's collectives. */
static void test_runtime_shm(void)
{
    msr_plan_model_t narrow = gpt(2, 64, 4, 256), wide = gpt(4, 256, 8, 32);
    narrow.vocab = wide.vocab = 256;
    const uint64_t K = 1024, t = 256 * K, rd = 96 * K;
    msr_plan_rank_t o;
    /* ZeRO 0, an allreduce: every slot, the stage and the result whole,
     * a 32 KiB part of each of 7 other stages */
    msr_plan_layout_t l = layout(8, 1, 1, 0, 0, MSR_PLAN_RC_NONE, MSR_PLAN_1F1B, 1, 1);
    msr_plan_rank(&narrow, &l, MSR_PLAN_FP32, 0, &o);
    MSR_CHECK_EQ(o.shm, 4 * (2 * t + 7 * (32 * K + rd)));
    /* ZeRO 1: blocks of 66432 bytes; the reduce-scatter's 3 tiles and the
     * allgather's 1 are 4 a step, so each keeps its own slots */
    l.zero = 1;
    msr_plan_rank(&narrow, &l, MSR_PLAN_FP32, 0, &o);
    const uint64_t rs = t + 7 * (32 * K + rd), ag = 66432 + 7 * (66432 + rd);
    MSR_CHECK_EQ(o.shm, 3 * rs + ag);
    /* ZeRO-2 over two micro-batches reduce-scatters in each: 6 + 1 tiles
     * a step, so the slots turn; capped at the 8 stages whole */
    l = layout(8, 1, 1, 0, 2, MSR_PLAN_RC_NONE, MSR_PLAN_1F1B, 1, 2);
    l.micro_batch = 1;
    msr_plan_rank(&narrow, &l, MSR_PLAN_FP32, 0, &o);
    MSR_CHECK(4 * (rs + ag) > 4 * 8 * t);
    MSR_CHECK_EQ(o.shm, 4 * 8 * t);
    /* the wide model's blocks pass a tile: every stage whole, no result */
    l = layout(8, 1, 1, 0, 1, MSR_PLAN_RC_NONE, MSR_PLAN_1F1B, 1, 1);
    msr_plan_rank(&wide, &l, MSR_PLAN_FP32, 0, &o);
    MSR_CHECK_EQ(o.shm, 4 * 8 * t);
    /* tp 4 with sp over a (2, 256, 64) stream of 128 KiB: blocks of 32 KiB,
     * many collectives a step, so the 4 stages' 128 KiB whole; dp 2's
     * allreduce of the part beside it */
    l = layout(2, 4, 1, 1, 0, MSR_PLAN_RC_NONE, MSR_PLAN_1F1B, 1, 1);
    msr_plan_rank(&narrow, &l, MSR_PLAN_FP32, 0, &o);
    uint64_t msg = o.part_params * 4, dt = msg < t ? msg : t;
    uint64_t dread = dt / 2 + rd < dt ? dt / 2 + rd : dt;
    MSR_CHECK(msg > 16 * K);
    MSR_CHECK_EQ(o.shm, 4 * 4 * 128 * K + 4 * (2 * dt + dread));
}

/* What the offloads keep resident, against real stores (parallel/offload.h
 * and offload_acts.h) in a fresh directory: the optimizer's for shards
 * from none to past four chunks, the quarter rule at its bounds (8n / 4
 * exactly 4096, and a byte over), chunks of 4096 up; the activations'
 * for inputs from 1 byte to past a 4096 block, 1 to 9 of them. */
/* What the offloads keep resident, against real stores (parallel/offload.h
 * and offload_acts.h) in a fresh directory: the optimizer's for shards
 * from none to past four chunks, the quarter rule at its bounds (8n / 4
 * exactly 4096, and a byte over), chunks of 4096 up; the activations'
 * for inputs from 4 bytes to past a 4096 block, 1 to 9 of them. Each store
 * is gone before anything is checked, and the directory too (a failed
 * check exits at once). */
static void test_offload_resident(void)
{
    static const size_t counts[] = {0, 1, 511, 512, 2048, 2049, 4096, 12288, 70001};
    static const size_t chunks[] = {0, 4096, 8192, 12288};
    static const size_t bytes[] = {4, 4092, 4096, 4100, 65536};
    const char *t = getenv("TMPDIR");
    char dir[512], bad[256] = "";
    snprintf(dir, sizeof dir, "%s/plan_offload.XXXXXX", t != NULL && t[0] != '\0' ? t : "/tmp");
    MSR_CHECK(mkdtemp(dir) != NULL);
    size_t n_opt = sizeof counts / sizeof *counts * (sizeof chunks / sizeof *chunks);
    for (size_t k = 0; k < n_opt + 3 * (sizeof bytes / sizeof *bytes) && !bad[0]; k++) {
        int opt = k < n_opt;
        size_t i = opt ? k / 4 : (k - n_opt) / 3, chunk = opt ? chunks[k % 4] : 0;
        size_t n = opt ? counts[i] : 1 + 4 * ((k - n_opt) % 3), held = 0;
        uint64_t plan =
            opt ? msr_plan_offload_optim_bytes(n, chunk) : msr_plan_offload_acts_bytes(bytes[i], n);
        msr_offload_config_t cfg = {MSR_OFFLOAD_DISK, dir, chunk, MSR_OFFLOAD_IO_THREADS, 0, 0};
        msr_offload_t *off = NULL;
        msr_acts_t *a = NULL;
        msr_status_t st =
            opt ? msr_offload_create(&cfg, n, &off) : msr_acts_create(&cfg, bytes[i], n, &a);
        if (st == MSR_OK)
            held = opt ? msr_offload_resident(off) : msr_acts_resident(a);
        msr_offload_destroy(off);
        msr_acts_destroy(a);
        if (st != MSR_OK || plan != held)
            snprintf(bad, sizeof bad,
                     "%s store of %zu (%zu bytes, chunk %zu): planned %llu, %s %zu",
                     opt ? "optimizer" : "activation", n, opt ? 0 : bytes[i], chunk,
                     (unsigned long long)plan, st == MSR_OK ? "held" : "create failed", held);
    }
    int gone = rmdir(dir); /* every store removed its file */
    MSR_CHECK_MSG(bad[0] == '\0', "%s", bad);
    MSR_CHECK_EQ(gone, 0);
}

static const msr_test_t tests[] = {
    {"zero_paper", test_zero_paper, 10},
    {"korthikanti", test_korthikanti, 10},
    {"runtime_part_and_frames", test_runtime_part_and_frames, 30},
    {"runtime_uneven_split", test_runtime_uneven_split, 30},
    {"runtime_cp", test_runtime_cp, 30},
    {"runtime_dp_alone", test_runtime_dp_alone, 30},
    {"runtime_whole", test_runtime_whole, 10},
    {"runtime_shm", test_runtime_shm, 10},
    {"runtime_moe", test_runtime_moe, 10},
    {"schedules", test_schedules, 10},
    {"bf16_states", test_bf16_states, 10},
    {"peak_is_max", test_peak_is_max, 10},
    {"paper_activations", test_paper_activations, 10},
    {"offload_resident", test_offload_resident, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
