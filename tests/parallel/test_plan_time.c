/* The planner's cluster file and time model (planner/plan.h): the file's
 * keys, errors and round trip; the step's FLOPs against Narayanan et al.'s
 * (2021) formulas; the pipeline's bubble against its closed forms; each
 * communication term present exactly when its dimension is. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "planner/plan.h"
#include "tests/runner.h"

/* Field by field: the struct has padding, which memcmp would read. */
static int same_cluster(const msr_plan_cluster_t *a, const msr_plan_cluster_t *b)
{
    return a->ranks_per_node == b->ranks_per_node && a->mem_gib == b->mem_gib &&
           a->peak_tflops == b->peak_tflops && a->intra_gbs == b->intra_gbs &&
           a->inter_gbs == b->inter_gbs && a->latency_us == b->latency_us &&
           a->mem_gbs == b->mem_gbs && a->act_gbs == b->act_gbs && a->kernel_us == b->kernel_us &&
           a->cores_per_node == b->cores_per_node && a->mm_rows == b->mm_rows &&
           a->mm_rows_half == b->mm_rows_half && a->attn_tflops == b->attn_tflops &&
           a->ring_tflops == b->ring_tflops && a->ring_chunk == b->ring_chunk &&
           a->ring_chunk_half == b->ring_chunk_half && a->cold_ms_per_mib == b->cold_ms_per_mib &&
           a->cold_from_mib == b->cold_from_mib && a->cold_full_mib == b->cold_full_mib &&
           a->idle_lend == b->idle_lend && a->ring_step_us == b->ring_step_us &&
           a->disk_read_gbs == b->disk_read_gbs && a->disk_write_gbs == b->disk_write_gbs;
}

static void test_cluster_file(void)
{
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    MSR_CHECK_EQ(c.ranks_per_node, 8);
    char why[256] = "";
    /* a partial file keeps what it does not name */
    MSR_CHECK(msr_plan_cluster_parse("# two nodes of 4\nranks_per_node = 4\n\n"
                                     "  inter_gbs=12.5   # per rank\r\n",
                                     &c, why, sizeof why) == 0);
    MSR_CHECK_EQ(c.ranks_per_node, 4);
    MSR_CHECK(c.inter_gbs == 12.5 && c.mem_gib == 80 && c.peak_tflops == 312);
    MSR_CHECK(msr_plan_cluster_parse("cores_per_node = 2\nact_gbs = 0.5\n", &c, why, sizeof why) ==
              0);
    MSR_CHECK(c.cores_per_node == 2 && c.act_gbs == 0.5);
    MSR_CHECK(msr_plan_cluster_parse("mm_rows = 64\nmm_rows_half = 22.5\n", &c, why, sizeof why) ==
              0);
    MSR_CHECK(c.mm_rows == 64 && c.mm_rows_half == 22.5);
    MSR_CHECK(msr_plan_cluster_parse("cold_ms_per_mib = 0.25\ncold_from_mib = 12.5\n"
                                     "cold_full_mib = 400\n",
                                     &c, why, sizeof why) == 0);
    MSR_CHECK(c.cold_ms_per_mib == 0.25 && c.cold_from_mib == 12.5 && c.cold_full_mib == 400);
    MSR_CHECK(msr_plan_cluster_parse("ring_chunk = 64\nring_chunk_half = 16\n", &c, why,
                                     sizeof why) == 0);
    MSR_CHECK(c.ring_chunk == 64 && c.ring_chunk_half == 16);
    MSR_CHECK(c.idle_lend == 1); /* the default: the cores handed over whole */
    MSR_CHECK(msr_plan_cluster_parse("idle_lend = 0.375\n", &c, why, sizeof why) == 0);
    MSR_CHECK(c.idle_lend == 0.375);
    MSR_CHECK(c.ring_step_us == 0); /* the default: no hand-off cost */
    MSR_CHECK(msr_plan_cluster_parse("ring_step_us = 40\n", &c, why, sizeof why) == 0);
    MSR_CHECK(c.ring_step_us == 40);
    /* round trip */
    char text[1024];
    MSR_CHECK(msr_plan_cluster_format(&c, text, sizeof text) < (int)sizeof text);
    msr_plan_cluster_t d = {0};
    MSR_CHECK(msr_plan_cluster_parse(text, &d, why, sizeof why) == 0);
    MSR_CHECK(same_cluster(&c, &d));
    /* every real key by its offset: distinct values survive the round
     * trip, so each names its own field */
    const char *name;
    size_t off, nreal = 0;
    for (size_t i = 0; msr_plan_cluster_real_key(i, &name, &off); i++) {
        MSR_CHECK(off + sizeof(double) <= sizeof c);
        double v = 1.5 + (double)i;
        memcpy((char *)&c + off, &v, sizeof v);
        char want[64];
        snprintf(want, sizeof want, "%s = %g\n", name, v);
        MSR_CHECK(msr_plan_cluster_format(&c, text, sizeof text) < (int)sizeof text);
        MSR_CHECK_MSG(strstr(text, want) != NULL, "%s", want);
        nreal++;
    }
    MSR_CHECK_EQ(nreal, 21); /* all but ranks_per_node and cores_per_node */
    c.idle_lend = 0.5;       /* a share */
    MSR_CHECK(msr_plan_cluster_format(&c, text, sizeof text) < (int)sizeof text);
    MSR_CHECK(msr_plan_cluster_parse(text, &d, why, sizeof why) == 0);
    MSR_CHECK(same_cluster(&c, &d));
    /* errors name the line and keep *c as it was */
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"mem_gib = 80\nspeed = 3\n", "line 2: unknown key 'speed'"},
        {"mem_gib = 80\nmem_gib = 40\n", "line 2: 'mem_gib' given twice"},
        {"peak_tflops = fast\n", "line 1: 'fast' is not a number"},
        {"peak_tflops = 0\n", "line 1: peak_tflops: must be more than 0"},
        {"intra_gbs = -1\n", "line 1: intra_gbs: must be more than 0"},
        {"kernel_us = -1\n", "line 1: kernel_us: must be 0 or more"},
        {"mm_rows_half = -2\n", "line 1: mm_rows_half: must be 0 or more"},
        {"ring_chunk_half = -1\n", "line 1: ring_chunk_half: must be 0 or more"},
        {"cold_ms_per_mib = -1\n", "line 1: cold_ms_per_mib: must be 0 or more"},
        {"idle_lend = 1.5\n", "line 1: idle_lend 1.5: a share, from 0 to 1"},
        {"idle_lend = -0.5\n", "line 1: idle_lend: must be 0 or more"},
        {"ring_step_us = -1\n", "line 1: ring_step_us: must be 0 or more"},
        {"ranks_per_node = 2.5\n", "line 1: ranks_per_node 2.5: not an integer in [1, 1048576]"},
        {"cores_per_node = -1\n", "line 1: cores_per_node -1: not an integer in [0, 1048576]"},
        {"\n\nlatency_us\n", "line 3: 'latency_us' is not key = value"},
        {"inter_gbs = nan\n", "line 1: 'nan' is not a number"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msr_plan_cluster_t e = c;
        MSR_CHECK(msr_plan_cluster_parse(bad[i].text, &e, why, sizeof why) == -1);
        MSR_CHECK_MSG(strstr(why, bad[i].want) != NULL, "%s: %s", bad[i].want, why);
        MSR_CHECK(same_cluster(&e, &c));
    }
}

static msr_plan_layout_t layout(int dp, int tp, int pp, int zero, int rc, int b, int m, int sched,
                                int v)
{
    msr_plan_layout_t l;
    memset(&l, 0, sizeof l);
    l.dp = dp, l.tp = tp, l.pp = pp, l.zero = zero, l.recompute = rc;
    l.micro_batch = b, l.micros = m, l.schedule = sched, l.chunks = v;
    return l;
}

/* A cluster where only matrix products cost: the closed forms hold. */
static msr_plan_cluster_t flops_only(void)
{
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    c.mem_gbs = 0;
    c.kernel_us = 0;
    c.latency_us = 0;
    c.intra_gbs = c.inter_gbs = 1e12;
    return c;
}

/* FLOPs per step: 72 B s l h^2 (1 + s/6h + V/12lh) without recompute and
 * 96 B s l h^2 (1 + s/6h + V/16lh) with full recompute (Narayanan et al.
 * 2021, appendix). */
static void test_flops(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 24, 2304, 24, 24, 4 * 2304, 51200, 2048};
    msr_plan_cluster_t c = flops_only();
    msr_plan_time_t t;
    double B = 512, s = 2048, l = 24, h = 2304, V = 51200;
    msr_plan_layout_t lay = layout(32, 1, 1, 0, MSR_PLAN_RC_NONE, 2, 8, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_BF16, &c, &t);
    double want = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    MSR_CHECK_MSG(fabs(t.flops / want - 1) < 1e-12, "%g vs %g", t.flops, want);
    lay.recompute = MSR_PLAN_RC_FULL;
    msr_plan_time(&m, &lay, MSR_PLAN_BF16, &c, &t);
    want = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    MSR_CHECK_MSG(fabs(t.flops / want - 1) < 1e-12, "%g vs %g", t.flops, want);
    /* one rank, flops only: the step is the FLOPs at the peak rate */
    lay = layout(1, 1, 1, 0, MSR_PLAN_RC_FULL, 2, 8, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_BF16, &c, &t);
    MSR_CHECK(fabs(t.step_ms - t.flops / (c.peak_tflops * 1e9)) < 1e-9 * t.step_ms);
    MSR_CHECK(t.tp_comm_ms == 0 && t.pp_comm_ms == 0 && t.dp_comm_ms == 0 && t.bubble_ms == 0);
    MSR_CHECK(t.recompute_ms > 0 && t.recompute_ms < t.step_ms / 3);
    MSR_CHECK(fabs(t.tokens_per_s - 16 * 2048 / (t.step_ms / 1e3)) < 1e-6 * t.tokens_per_s);
}

/* Matrix products on fewer rows than --calibrate measured cost more per
 * FLOP: (N + h) / N x N0 / (N0 + h) of their FLOPs at the peak, for the
 * blocks' and the head's products on N rows; attention's are not scaled,
 * and at N0 rows nothing changes. */
static void test_rows_rate(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 256, 8, 8, 4 * 256, 256, 32};
    msr_plan_cluster_t c0 = flops_only(), c1 = c0;
    c1.mm_rows = 64;
    c1.mm_rows_half = 22;
    const int micro[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        int b = micro[i], M = 16 / b;
        double N = 32.0 * b, T = 32, C = 256, L = 4;
        msr_plan_layout_t lay = layout(1, 1, 1, 0, MSR_PLAN_RC_NONE, b, M, MSR_PLAN_1F1B, 1);
        msr_plan_time_t t0, t1;
        msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c0, &t0);
        msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c1, &t1);
        MSR_CHECK(t1.flops == t0.flops); /* the model's FLOPs are the model's */
        double att = 3 * L * 4 * b * T * T * C * M, mm = t0.flops - att;
        double rc = (N + 22) / N * (64.0 / 86);
        double want = (att + rc * mm) / (c1.peak_tflops * 1e9);
        MSR_CHECK_MSG(fabs(t1.step_ms / want - 1) < 1e-9, "micro-batch %d: %g ms, want %g", b,
                      t1.step_ms, want);
        if (b == 1)
            MSR_CHECK(t1.step_ms > 1.1 * t0.step_ms);
        if (b == 2)
            MSR_CHECK(fabs(t1.step_ms / t0.step_ms - 1) < 1e-12);
        if (b == 4)
            MSR_CHECK(t1.step_ms < t0.step_ms);
    }
}

/* A MoE block's experts run their products on blocks of one expert's
 * rows from one source rank, rows / E on average: priced at that row
 * count's rate, the router and the other products at N rows'. With E 4,
 * top-1 and capacity 1, micro-batch 2 of 32 tokens: N = 64 (the rate
 * measured, as before) and 16 rows an expert, (16 + 22) / 16 x 64 / 86. */
static void test_moe_rows(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 2, 256, 8, 8, 4 * 256, 256, 32, 4, 1, 1, 1.0};
    msr_plan_cluster_t c0 = flops_only(), c1 = c0;
    c1.mm_rows = 64;
    c1.mm_rows_half = 22;
    msr_plan_layout_t lay = layout(1, 1, 1, 0, MSR_PLAN_RC_NONE, 2, 8, MSR_PLAN_1F1B, 1);
    msr_plan_time_t t0, t1;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c0, &t0);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c1, &t1);
    MSR_CHECK(t1.flops == t0.flops);
    double N = 64, C = 256, L = 2, M = 8;
    double experts = 3 * L * M * 2 * N * 2 * C * 4 * C; /* both products, fwd + 2 bwd */
    double rc_e = (16 + 22) / 16.0 * (64.0 / 86);
    double want = t0.step_ms + (rc_e - 1) * experts / (c1.peak_tflops * 1e9);
    MSR_CHECK_MSG(fabs(t1.step_ms / want - 1) < 1e-9, "%g ms, want %g", t1.step_ms, want);
    MSR_CHECK(t1.step_ms > 1.1 * t0.step_ms);
}

/* Frames gone cold: a micro-batch's forward and backward take
 * cold_ms_per_mib longer per MiB of its frames times the share gone cold,
 * none while the node's memory held at once (every rank's total: frames,
 * state and work space) stays under cold_from_mib, all from
 * cold_full_mib, between by the log.
 * GPipe holds all 8 micro-batches' frames, 1F1B at most 2. */
static void test_cold_frames(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 2, 64, 4, 4, 4 * 64, 256, 256};
    msr_plan_cluster_t c0 = flops_only();
    c0.ranks_per_node = 2;
    msr_plan_layout_t g = layout(1, 1, 2, 0, MSR_PLAN_RC_NONE, 2, 8, MSR_PLAN_GPIPE, 1);
    msr_plan_layout_t f = g;
    f.schedule = MSR_PLAN_1F1B;
    double hg = 0, hf = 0, fr[2] = {0, 0};
    for (int s = 0; s < 2; s++) {
        msr_plan_rank_t r;
        msr_plan_rank(&m, &g, MSR_PLAN_FP32, s, &r);
        hg += (double)r.total / 1048576;
        fr[s] = (double)r.frame_bytes[s] / 1048576; /* the last stage's with the head */
        msr_plan_rank(&m, &f, MSR_PLAN_FP32, s, &r);
        hf += (double)r.total / 1048576;
    }
    MSR_CHECK_MSG(hg > 2 * hf, "GPipe holds %g MiB, 1F1B %g", hg, hf);
    msr_plan_cluster_t c = c0;
    c.cold_ms_per_mib = 1;
    c.cold_from_mib = hf * 1.01; /* 1F1B: none cold */
    c.cold_full_mib = hg * 0.99; /* GPipe: all */
    msr_plan_time_t tg0, tg, tf0, tf, th;
    msr_plan_time(&m, &g, MSR_PLAN_FP32, &c0, &tg0);
    msr_plan_time(&m, &g, MSR_PLAN_FP32, &c, &tg);
    msr_plan_time(&m, &f, MSR_PLAN_FP32, &c0, &tf0);
    msr_plan_time(&m, &f, MSR_PLAN_FP32, &c, &tf);
    MSR_CHECK(tg0.cold_ms == 0 && tf.cold_ms == 0 && tf.step_ms == tf0.step_ms);
    MSR_CHECK(fabs(tg.step_ms - tg0.step_ms - tg.cold_ms) < 1e-9 * tg.step_ms);
    /* the slowest stage pays every micro-batch's frames, the other once */
    double lo = 8 * (fr[0] < fr[1] ? fr[0] : fr[1]), hi = 9 * (fr[0] > fr[1] ? fr[0] : fr[1]);
    MSR_CHECK_MSG(tg.cold_ms >= lo && tg.cold_ms <= hi, "%g ms cold, want [%g, %g]", tg.cold_ms, lo,
                  hi);
    /* halfway by the log: half as much */
    c.cold_from_mib = hg / 4;
    c.cold_full_mib = hg * 4;
    msr_plan_time(&m, &g, MSR_PLAN_FP32, &c, &th);
    MSR_CHECK_MSG(fabs(th.cold_ms / tg.cold_ms - 0.5) < 1e-9, "%g ms, want half of %g", th.cold_ms,
                  tg.cold_ms);
}

/* Each chunk's frame goes cold at its own size: 8 layers in 2 x 3 virtual
 * stages split 1,1,2,1,1,2, so rank 0 holds chunks of 1, 2 and 1 layers
 * and pays those three frames a micro-batch, not three of its largest.
 * With the products all but free, the pipeline is the cold reads alone:
 * 8 micro-batches on the slower rank, the other's once, over v. */
static void test_cold_uneven_chunks(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 8, 64, 4, 4, 4 * 64, 256, 64};
    msr_plan_cluster_t c = flops_only();
    c.ranks_per_node = 2;
    c.peak_tflops = 1e12;
    c.cold_ms_per_mib = 1;
    c.cold_from_mib = 1e-9; /* every frame cold */
    c.cold_full_mib = 1e-6;
    msr_plan_layout_t l = layout(1, 1, 2, 0, MSR_PLAN_RC_NONE, 2, 8, MSR_PLAN_INTERLEAVED, 3);
    const int layers[6] = {1, 1, 2, 1, 1, 2};
    double rank[2] = {0, 0};
    for (int j = 0; j < 6; j++)
        rank[j % 2] +=
            (double)msr_plan_frame_bytes(&m, &l, MSR_PLAN_FP32, layers[j], j == 5) / 1048576;
    msr_plan_rank_t r0;
    msr_plan_rank(&m, &l, MSR_PLAN_FP32, 0, &r0);
    MSR_CHECK(r0.frame_bytes[0] == msr_plan_frame_bytes(&m, &l, MSR_PLAN_FP32, 2, 0));
    MSR_CHECK(3.0 * (double)r0.frame_bytes[0] / 1048576 > rank[0] * 1.2);
    double hi = rank[0] > rank[1] ? rank[0] : rank[1], lo = rank[0] + rank[1] - hi;
    double want = 8 * hi + lo / 3;
    msr_plan_time_t t;
    msr_plan_time(&m, &l, MSR_PLAN_FP32, &c, &t);
    MSR_CHECK_MSG(fabs(t.cold_ms / want - 1) < 1e-3, "%g ms cold, want %g", t.cold_ms, want);
}

/* Attention at its own rate (attn_tflops), and context parallel's ring
 * attention at the ring's (ring_tflops); either 0 falls back. */
static void test_attn_rates(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 2, 64, 4, 4, 4 * 64, 256, 256};
    msr_plan_cluster_t c = flops_only(), half = c, ring = c, both = c;
    half.attn_tflops = c.peak_tflops / 2;
    ring.ring_tflops = c.peak_tflops / 4;
    both.attn_tflops = c.peak_tflops / 2;
    both.ring_tflops = c.peak_tflops / 4;
    msr_plan_time_t t, th, tr, tb;
    /* one rank: the extra time is attention's FLOPs once more at the peak */
    msr_plan_layout_t lay = layout(1, 1, 1, 0, MSR_PLAN_RC_NONE, 2, 8, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &half, &th);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &ring, &tr);
    double att = 3.0 * 2 * 4 * 2 * 256.0 * 256 * 64 * 8; /* fwd + 2 bwd, L 2, b 2, M 8 */
    MSR_CHECK_MSG(fabs((th.step_ms - t.step_ms) / (att / (c.peak_tflops * 1e9)) - 1) < 1e-9,
                  "%g ms more, want %g", th.step_ms - t.step_ms, att / (c.peak_tflops * 1e9));
    MSR_CHECK(tr.step_ms == t.step_ms); /* no ring without cp */
    /* cp 2: the ring's rate, not attention's, once given */
    lay = layout(1, 1, 1, 0, MSR_PLAN_RC_NONE, 2, 8, MSR_PLAN_1F1B, 1);
    lay.cp = 2;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &half, &th);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &ring, &tr);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &both, &tb);
    MSR_CHECK(th.step_ms > t.step_ms); /* no ring rate: attention's */
    MSR_CHECK(tr.step_ms > th.step_ms);
    MSR_CHECK(fabs(tb.step_ms / tr.step_ms - 1) < 1e-12); /* the ring's set: attention's unused */
    MSR_CHECK(tb.flops == t.flops);
    /* chunks shorter than ring_chunk run slower: cp 2's chunks of 64 at
     * the rate measured there cost as before; cp 4's of 32, with h = 16,
     * (32 + 16) / 32 x 64 / (64 + 16) = 1.2 times their FLOPs. With a
     * cluster that counts only FLOPs, the ring's share of the step grows
     * by 0.2 of itself, and the step's FLOPs stay the model's */
    msr_plan_cluster_t ch = ring, big = ring;
    ch.ring_chunk = 64;
    ch.ring_chunk_half = 16;
    big.ring_tflops = 1e9; /* the ring free: what is left is the rest */
    msr_plan_time_t tc, tf;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &ch, &tc);
    MSR_CHECK(fabs(tc.step_ms / tr.step_ms - 1) < 1e-12);
    lay.cp = 4;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &ring, &tr);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &ch, &tc);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &big, &tf);
    double ring_ms = tr.step_ms - tf.step_ms;
    MSR_CHECK(ring_ms > 0);
    MSR_CHECK_MSG(fabs((tc.step_ms - tf.step_ms) / ring_ms - 1.2) < 1e-6, "ring %g ms, %g with h",
                  ring_ms, tc.step_ms - tf.step_ms);
    MSR_CHECK(tc.flops == tr.flops);
    /* each ring step that waits pays ring_step_us: cp - 1 forward and cp
     * backward, a block, a micro-batch (2 layers, 8 micro-batches, one
     * stage, a core per rank): 2 x 8 x (3 + 4) x 0.1 ms at cp 4 */
    msr_plan_cluster_t hs = ring;
    hs.ring_step_us = 100;
    msr_plan_time_t ts;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &hs, &ts);
    MSR_CHECK_MSG(fabs(ts.step_ms - tr.step_ms - 2 * 8 * 7 * 0.1) < 1e-6, "%g ms more",
                  ts.step_ms - tr.step_ms);
    MSR_CHECK(fabs(ts.cp_comm_ms - tr.cp_comm_ms - 2 * 8 * 7 * 0.1) < 1e-6);
    MSR_CHECK(ts.flops == tr.flops);
    lay.cp = 1; /* no ring, no hand-off */
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &ring, &tr);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &hs, &ts);
    MSR_CHECK(ts.step_ms == tr.step_ms);
}

/* The bubble: with a vocabulary and positions too small to weigh, every
 * stage costs the same t and the step is (m + p - 1) t for 1F1B and
 * (m + (p - 1) / v) t interleaved. */
static void test_bubble(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 16, 1024, 16, 16, 4096, 16, 1024};
    msr_plan_cluster_t c = flops_only();
    msr_plan_time_t one, t;
    msr_plan_layout_t lay = layout(1, 1, 1, 0, 0, 1, 1, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &one);
    double layer = one.layer_ms;
    MSR_CHECK(layer > 0 && one.first_ms < 2e-3 * layer && one.last_ms < 2e-3 * layer);
    const int ps[] = {2, 4, 8}, ms[] = {8, 16, 32};
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) {
            int p = ps[i], mb = ms[j];
            lay = layout(1, 1, p, 0, 0, 1, mb, MSR_PLAN_1F1B, 1);
            msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
            double st = layer * 16 / p;
            MSR_CHECK_MSG(fabs(t.step_ms / ((mb + p - 1) * st) - 1) < 2e-3, "p %d m %d", p, mb);
            MSR_CHECK(fabs(t.bubble_ms / ((p - 1) * st) - 1) < 2e-3);
            lay.schedule = MSR_PLAN_INTERLEAVED;
            lay.chunks = 2;
            msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
            MSR_CHECK_MSG(fabs(t.step_ms / ((mb + (p - 1) / 2.0) * st) - 1) < 2e-3, "p %d", p);
        }
    }
    /* an uneven split costs its slowest stage: 3 + 13 layers are 13 a
     * micro-batch, where 8 + 8 are 8 */
    int uneven[2] = {3, 13};
    lay = layout(1, 1, 2, 0, 0, 1, 8, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &one);
    lay.stage_layers = uneven;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
    MSR_CHECK(fabs(t.step_ms / (8 * 13 * layer + 3 * layer) - 1) < 2e-3);
    MSR_CHECK(fabs(one.step_ms / (9 * 8 * layer) - 1) < 2e-3);
}

/* Selective recompute runs again what the memory model drops: in the
 * runtime's accounting (GPT, fp32) the attention kernel and the GELU, whose
 * bytes cost act_gbs; in the papers' (bf16) the attention core alone; under
 * cp the runtime's GELU alone (the ring keeps its logsumexp). */
static void test_selective_reruns(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 256, 8, 8, 1024, 64, 256};
    msr_plan_cluster_t c = flops_only();
    c.mem_gbs = 1000;
    /* fp32, read and write, N x 4C: micro-batch 2 of 256 positions */
    double gelu_bytes = 4.0 * 2 * (2 * 256) * (4 * 256);
    for (int cp = 1; cp <= 2; cp++) {
        msr_plan_layout_t lay = layout(1, 1, 1, 0, MSR_PLAN_RC_SELECTIVE, 2, 1, MSR_PLAN_1F1B, 1);
        lay.cp = cp;
        msr_plan_time_t slow, fast, bf;
        c.act_gbs = 1;
        msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &slow);
        c.act_gbs = 1e9;
        msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &fast);
        /* the GELU's bytes of 4 blocks (cp 2: each rank's half) at 1 GB/s */
        double want = 4 * gelu_bytes / cp / 1e6;
        MSR_CHECK_MSG(fabs((slow.recompute_ms - fast.recompute_ms) / want - 1) < 1e-3,
                      "cp %d: %g ms more, want %g", cp, slow.recompute_ms - fast.recompute_ms,
                      want);
        MSR_CHECK(cp == 2 || fast.recompute_ms > 0); /* the attention's FLOPs */
        c.act_gbs = 1;
        msr_plan_time(&m, &lay, MSR_PLAN_BF16, &c, &bf);
        MSR_CHECK_MSG(cp == 1 ? bf.recompute_ms > 0 && bf.recompute_ms < slow.recompute_ms / 2
                              : bf.recompute_ms == 0,
                      "cp %d: bf16 %g ms", cp, bf.recompute_ms);
    }
}

/* Ranks sharing cores: 8 ranks of a node on 2 cores, dp 2 x pp 4 with one
 * micro-batch, so 2 ranks compute at a time. The rates are those of all 8
 * computing; the 2 compute 1 + idle_lend x (8 / 2 - 1) times as fast, in
 * the closed form and in the simulated pipeline (several micro-batches)
 * alike. */
static void test_idle_lend(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 16, 1024, 16, 16, 4096, 16, 1024};
    msr_plan_cluster_t c = flops_only();
    msr_plan_time_t own, t;
    msr_plan_layout_t lay = layout(2, 1, 4, 0, 0, 1, 1, MSR_PLAN_GPIPE, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &own); /* a core each */
    c.cores_per_node = 2;
    const double lends[] = {1, 0.5, 0};
    for (int i = 0; i < 3; i++) {
        c.idle_lend = lends[i];
        msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
        double speed = 1 + lends[i] * 3;
        MSR_CHECK_MSG(fabs(t.step_ms / (own.step_ms / speed) - 1) < 2e-3, "idle_lend %g: %g ms",
                      lends[i], t.step_ms);
    }
    /* 4 micro-batches: the simulator's pipeline; with nothing lent it is
     * the closed form's, with more lent faster */
    lay.micros = 4;
    msr_plan_time_t none, half;
    c.idle_lend = 0;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &none);
    c.cores_per_node = 0;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &own);
    MSR_CHECK(fabs(none.step_ms / own.step_ms - 1) < 2e-3);
    c.cores_per_node = 2;
    c.idle_lend = 0.5;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &half);
    c.idle_lend = 1;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
    MSR_CHECK_MSG(t.step_ms < half.step_ms && half.step_ms < none.step_ms, "%g %g %g", t.step_ms,
                  half.step_ms, none.step_ms);
}

/* Each communication term appears with its dimension, grows with slower
 * links, and inter-node placement costs more than intra-node. */
static void test_comm_terms(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 8, 256, 8, 8, 1024, 256, 128};
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    msr_plan_time_t t;
    msr_plan_layout_t lay = layout(2, 2, 2, 1, 0, 2, 4, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
    MSR_CHECK(t.tp_comm_ms > 0 && t.pp_comm_ms > 0 && t.dp_comm_ms > 0 && t.bubble_ms > 0);
    MSR_CHECK(t.dp_exposed_ms <= t.dp_comm_ms + 1e-12 && t.zero3_ms == 0);
    MSR_CHECK(fabs(t.exposed_comm_ms - (t.tp_comm_ms + t.pp_comm_ms + t.dp_exposed_ms)) < 1e-9);
    MSR_CHECK(t.step_ms > t.compute_ms + t.exposed_comm_ms - 1e-9);
    /* the same 8 ranks split over 4 nodes of 2: tp stays inside, pp and dp cross */
    msr_plan_time_t far;
    msr_plan_cluster_t c2 = c;
    c2.ranks_per_node = 2;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c2, &far);
    MSR_CHECK(fabs(far.tp_comm_ms - t.tp_comm_ms) < 1e-9 * t.tp_comm_ms);
    MSR_CHECK(far.pp_comm_ms > t.pp_comm_ms && far.dp_comm_ms > t.dp_comm_ms);
    /* no dp, tp, pp: none of their costs */
    lay = layout(1, 1, 1, 0, 0, 2, 4, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
    MSR_CHECK(t.tp_comm_ms == 0 && t.pp_comm_ms == 0 && t.dp_comm_ms == 0 && t.bubble_ms == 0);
    /* ZeRO-3 gathers parameters forward and backward: a cost that stage 2
     * does not have; on slow links more than stage 2's one gather a step */
    c2.inter_gbs = 0.01;
    lay = layout(8, 1, 1, 3, 0, 2, 1, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c2, &t);
    MSR_CHECK(t.zero3_ms > 0);
    lay.zero = 2;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c2, &far);
    MSR_CHECK(far.zero3_ms == 0 && far.step_ms < t.step_ms);
    /* sequence parallel moves the same bytes as tp's allreduces; it cuts
     * the norms' and residuals' work (10 N C elements a layer to 10 N C /
     * tp) but reorders the stream around each of its 4 collectives (8 N C):
     * the cut wins at tp 8, the copies at tp 2 (kernel calls aside) */
    msr_plan_cluster_t c3 = c;
    c3.kernel_us = 0;
    lay = layout(1, 8, 1, 0, 0, 2, 4, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c3, &t);
    lay.sp = 1;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c3, &far);
    MSR_CHECK(far.compute_ms < t.compute_ms);
    lay = layout(1, 2, 1, 0, 0, 2, 4, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c3, &t);
    lay.sp = 1;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c3, &far);
    MSR_CHECK(far.compute_ms > t.compute_ms);
}

/* Context parallel: the FLOPs the ring computes (a rank's 2 cp + 1 chunk
 * pairs of S = T/(2 cp) positions, everything else on its T/cp), the
 * ring's exposed transfers exactly when cp > 1, and the gradients
 * reduced over dp x cp. */
static void test_cp_terms(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 256, 8, 8, 1024, 256, 1024};
    msr_plan_cluster_t c = flops_only();
    msr_plan_time_t one, t;
    double L = 4, C = 256, V = 256, T = 1024, b = 2, micros = 4;
    msr_plan_layout_t lay = layout(1, 1, 1, 0, 0, 2, 4, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &one);
    MSR_CHECK(one.cp_comm_ms == 0 && one.dp_comm_ms == 0);
    for (int cp = 2; cp <= 8; cp *= 2) {
        lay.cp = cp;
        msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
        double Tc = T / cp, S = T / (2.0 * cp);
        double att = 4 * b * (2 * cp + 1) * S * S * C;
        double rank = L * (24 * b * Tc * C * C + att) + 2 * b * Tc * C * V;
        /* backward twice forward, but the ring's five products a pair */
        double want = micros * cp * (3 * rank + L * att / 2);
        MSR_CHECK_MSG(fabs(t.flops / want - 1) < 1e-12, "cp %d: %g vs %g", cp, t.flops, want);
        /* the chunk pairs above the diagonal are skipped: fewer FLOPs
         * than the whole T x T */
        MSR_CHECK(t.flops < one.flops);
        /* each rank computes its share: about 1/cp of one rank's time */
        MSR_CHECK(t.compute_ms < one.compute_ms / cp * 1.05 && t.compute_ms > 0);
        /* the parameters are replicated over cp: their gradients reduced */
        MSR_CHECK(t.dp_comm_ms > 0);
        MSR_CHECK(t.cp_comm_ms > 0); /* the gradient blocks, sent after their step */
        MSR_CHECK(fabs(t.exposed_comm_ms - (t.tp_comm_ms + t.cp_comm_ms + t.pp_comm_ms +
                                            t.dp_exposed_ms + t.zero3_ms)) < 1e-9);
    }
    /* slow links: the K/V blocks no longer hide behind a ring step */
    msr_plan_cluster_t slow;
    msr_plan_cluster_default(&slow);
    msr_plan_time_t fast_ring;
    lay.cp = 4;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &slow, &fast_ring);
    slow.intra_gbs = 0.01;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &slow, &t);
    MSR_CHECK(t.cp_comm_ms > 10 * fast_ring.cp_comm_ms && t.step_ms > fast_ring.step_ms);
    /* selective recompute keeps the ring's logsumexp: no attention FLOPs
     * run again, where without cp they do */
    lay.recompute = MSR_PLAN_RC_SELECTIVE;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
    msr_plan_time_t none;
    lay.recompute = MSR_PLAN_RC_NONE;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &none);
    MSR_CHECK(t.flops == none.flops);
    lay.cp = 1;
    lay.recompute = MSR_PLAN_RC_SELECTIVE;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
    MSR_CHECK(t.flops > one.flops);
}

/* A Llama's kv heads under tp: with fewer kv heads than tp every rank
 * projects one head's k and v (replicated, not K/t of one), so its
 * products are those of K = t, and one head more a rank (K = 2t) adds 2 N C
 * 2 hs FLOPs a block; the replicated heads' gradients are summed over tp
 * once a step (each micro-batch under ZeRO-2), an allreduce of L 2 C hs K
 * fp32 priced as the cluster's (here 2 (t-1)/t bytes at intra_gbs), in the
 * tp collectives. Under cp the ring carries (N, 2 kvl), and repeats the kv
 * heads in front of its kernels: 4 (2 kvl + 2C/t) fp32 a row of each of a
 * micro-batch's b (2 cp + 1) S key rows per block, forward and backward;
 * fewer k heads turn fewer rows by their rotary positions. */
static void test_kv_heads(void)
{
    double L = 4, C = 256, HS = 32, N = 2 * 64, M = 4, t = 4;
    msr_plan_model_t m = {MSR_PLAN_LLAMA, 4, 256, 8, 1, 512, 256, 64};
    msr_plan_cluster_t c = flops_only();
    msr_plan_layout_t lay = layout(1, 4, 1, 0, MSR_PLAN_RC_NONE, 2, 4, MSR_PLAN_1F1B, 1);
    msr_plan_time_t k[4]; /* kv heads 1, 2, 4, 8 on tp 4 */
    for (int i = 0; i < 4; i++) {
        m.kv_heads = 1 << i;
        msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &k[i]);
    }
    for (int i = 0; i < 2; i++)
        MSR_CHECK_MSG(fabs(k[i].compute_ms / k[2].compute_ms - 1) < 1e-12, "kv %d: %g vs %g ms",
                      1 << i, k[i].compute_ms, k[2].compute_ms);
    double more = 3 * L * M * 2 * N * C * 2 * HS / (c.peak_tflops * 1e9);
    MSR_CHECK_MSG(fabs((k[3].compute_ms - k[2].compute_ms) / more - 1) < 1e-9, "%g vs %g ms",
                  k[3].compute_ms - k[2].compute_ms, more);
    /* the sum over tp, on links of 1 GB/s: exposed, and none from K = t */
    c.intra_gbs = 1;
    lay = layout(2, 4, 1, 2, MSR_PLAN_RC_NONE, 2, 4, MSR_PLAN_1F1B, 1);
    for (int z = 1; z <= 2; z++) {
        lay.zero = z;
        msr_plan_time_t base;
        m.kv_heads = 4;
        msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &base);
        for (int K = 1; K <= 2; K++) {
            msr_plan_time_t r;
            m.kv_heads = K;
            msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &r);
            double want = (z == 2 ? M : 1) * 2 * (t - 1) / t * (L * 2 * C * HS * K * 4) / 1e6;
            MSR_CHECK_MSG(fabs((r.tp_comm_ms - base.tp_comm_ms) / want - 1) < 1e-9,
                          "zero %d kv %d: %g vs %g ms", z, K, r.tp_comm_ms - base.tp_comm_ms, want);
            MSR_CHECK(fabs((r.step_ms - base.step_ms) / want - 1) < 1e-9);
        }
    }
    /* cp 2 on tp 1: the ring's copies cost memory traffic (fast products,
     * 1 GB/s of memory), and the ring's blocks shrink with the kv heads */
    c = flops_only();
    c.peak_tflops = 1e12;
    c.mem_gbs = 1;
    lay = layout(1, 1, 1, 0, MSR_PLAN_RC_NONE, 2, 4, MSR_PLAN_1F1B, 1);
    lay.cp = 2;
    msr_plan_time_t rep, whole;
    m.kv_heads = 2;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &rep);
    m.kv_heads = 8;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &whole);
    double S = 64 / 4.0, rows = 2 * 5 * S, w = 2 * 2 * HS + 2 * C;
    double copies = M * L * 4 * 4 * rows * w / 1e6;
    /* less the rotary positions' turns of the k heads (read and written,
     * forward and twice backward, at act_gbs, here mem_gbs) of 6 heads
     * fewer on a rank's 64 rows */
    double turns = M * L * 3 * 4 * 2 * 64 * (2 - 8) * HS / 1e6;
    MSR_CHECK_MSG(fabs((rep.compute_ms - whole.compute_ms) / (copies + turns) - 1) < 1e-6,
                  "%g vs %g ms", rep.compute_ms - whole.compute_ms, copies + turns);
    msr_plan_cluster_t slow;
    msr_plan_cluster_default(&slow);
    slow.intra_gbs = 0.01;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &slow, &whole);
    m.kv_heads = 2;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &slow, &rep);
    MSR_CHECK_MSG(rep.cp_comm_ms < 0.3 * whole.cp_comm_ms, "%g vs %g ms", rep.cp_comm_ms,
                  whole.cp_comm_ms);
}

/* ZeRO-3 with pp: after each update the first stage gathers its embedding
 * segment over dp before it sends the tied wte to the last stage
 * (msr_mp_sync_tied), once a step, exposed. With only latency costing
 * (1 ms a message, shared memory: one a gather), every stage's gathers
 * cost micros x 2 and the tie's one more; a Llama (untied), ZeRO 2 and
 * dp 1 pay none. With only bytes costing (1 GB/s), V rows more of wte add
 * (dp - 1) / dp of their bytes to each of the first stage's 2 micros
 * gathers and to the tie's. */
static void test_tied_gather(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 4, 256, 8, 8, 1024, 256, 64};
    msr_plan_cluster_t c = flops_only();
    c.latency_us = 1000;
    double micros = 4, dp = 2;
    msr_plan_layout_t lay = layout(2, 1, 2, 3, MSR_PLAN_RC_NONE, 2, 4, MSR_PLAN_1F1B, 1);
    msr_plan_time_t t, none;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
    MSR_CHECK_MSG(fabs(t.zero3_ms - (2 * micros + 1)) < 1e-9, "%g ms", t.zero3_ms);
    msr_plan_model_t llama = m;
    llama.arch = MSR_PLAN_LLAMA, llama.ffn = 1024, llama.kv_heads = 8;
    msr_plan_time(&llama, &lay, MSR_PLAN_FP32, &c, &none);
    MSR_CHECK_MSG(fabs(none.zero3_ms - 2 * micros) < 1e-9, "llama: %g ms", none.zero3_ms);
    lay.zero = 2;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &none);
    MSR_CHECK(none.zero3_ms == 0);
    lay = layout(1, 1, 2, 3, MSR_PLAN_RC_NONE, 2, 4, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &none);
    MSR_CHECK(none.zero3_ms == 0);
    /* the bytes: V 256 then 4352 (4096 rows of C more) */
    c = flops_only();
    c.intra_gbs = 1;
    lay = layout(2, 1, 2, 3, MSR_PLAN_RC_NONE, 2, 4, MSR_PLAN_1F1B, 1);
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &none);
    m.vocab = 256 + 4096;
    msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
    double want = (2 * micros + 1) * (dp - 1) / dp * 4096 * 256 * 4 / 1e6;
    MSR_CHECK_MSG(fabs((t.zero3_ms - none.zero3_ms) / want - 1) < 1e-9, "%g vs %g ms",
                  t.zero3_ms - none.zero3_ms, want);
    MSR_CHECK(fabs(t.exposed_comm_ms - (t.tp_comm_ms + t.cp_comm_ms + t.ep_comm_ms + t.pp_comm_ms +
                                        t.dp_exposed_ms + t.zero3_ms)) < 1e-9);
}

/* A MoE block's exchanges under cp (model/moe.h): the capacity is the
 * micro-batch's cp N tokens' (ceil(F cp N K / E)) and an expert's block in
 * the dispatch and combine alltoalls min(cap, N) rows, the buffers fixed
 * in size; forward, each rank gathers the group's choices (N K int32 a
 * rank) and sums the router's means (E doubles) over cp. With only bytes
 * costing (1 GB/s inside the node): two alltoalls each way of E min(cap,
 * N) C fp32 a rank (each half of it to the ep peer, through shared memory
 * twice), the gather and the sum forward. At cp 1 the block is the
 * capacity itself and there is no gather. */
static void test_moe_cp(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 2, 256, 8, 8, 4 * 256, 256, 256, 4, 2, 1, 1.25};
    msr_plan_cluster_t c = flops_only();
    c.intra_gbs = 1;
    double L = 2, C = 256, E = 4, K = 2, b = 2, T = 256;
    for (int cp = 1; cp <= 2; cp++) {
        msr_plan_layout_t lay = layout(2, 1, 1, 0, MSR_PLAN_RC_NONE, 2, 1, MSR_PLAN_1F1B, 1);
        lay.cp = cp, lay.ep = 2;
        msr_plan_time_t t;
        msr_plan_time(&m, &lay, MSR_PLAN_FP32, &c, &t);
        double N = b * T / cp, cap = ceil(1.25 * cp * N * K / E), block = fmin(cap, N);
        double a2a = 2.0 * (2 - 1) / 2 * E * block * C * 4 / 1e6;
        double gather = cp > 1 ? (cp - 1.0) / cp * cp * N * K * 4 / 1e6 : 0;
        double sum = cp > 1 ? 2.0 * (cp - 1) / cp * 8 * E / 1e6 : 0;
        double want = L * (2 * 2 * a2a + gather + sum); /* forward and backward */
        MSR_CHECK_MSG(fabs(t.ep_comm_ms / want - 1) < 1e-9, "cp %d: %g vs %g ms", cp, t.ep_comm_ms,
                      want);
    }
}

static const msr_test_t tests[] = {
    {"cluster_file", test_cluster_file, 10},
    {"flops", test_flops, 10},
    {"rows_rate", test_rows_rate, 10},
    {"moe_rows", test_moe_rows, 10},
    {"cold_frames", test_cold_frames, 10},
    {"cold_uneven_chunks", test_cold_uneven_chunks, 10},
    {"attn_rates", test_attn_rates, 10},
    {"bubble", test_bubble, 10},
    {"idle_lend", test_idle_lend, 10},
    {"selective_reruns", test_selective_reruns, 10},
    {"comm_terms", test_comm_terms, 10},
    {"cp_terms", test_cp_terms, 10},
    {"kv_heads", test_kv_heads, 10},
    {"tied_gather", test_tied_gather, 10},
    {"moe_cp", test_moe_cp, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
