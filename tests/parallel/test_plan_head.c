/* The planner's chunked head (train_gpt --head-chunk): its step prices the
 * backward's second pass of the head's product, 2 B s h V / tp flops a
 * micro-batch (FLOPs 72 B s l h^2 (1 + s/6h + V/12lh) without recompute,
 * Narayanan et al. 2021, plus that), at any chunk and under tp; one chunk
 * of the whole vocabulary still takes the chunked runtime's pass; on a
 * cluster where only products cost, the step grows by those flops at the
 * peak rate and nothing else moves. */
#include <math.h>
#include <string.h>

#include "planner/plan.h"
#include "tests/runner.h"

static msr_plan_layout_t layout(int tp, int head_chunk)
{
    msr_plan_layout_t l;
    memset(&l, 0, sizeof l);
    l.dp = 1, l.tp = tp, l.pp = 1, l.recompute = MSR_PLAN_RC_NONE;
    l.micro_batch = 2, l.micros = 8, l.schedule = MSR_PLAN_1F1B, l.chunks = 1;
    l.head_chunk = head_chunk;
    return l;
}

static void test_head_flops(void)
{
    msr_plan_model_t m = {MSR_PLAN_GPT, 24, 2304, 24, 24, 4 * 2304, 51200, 2048};
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    c.mem_gbs = 0, c.kernel_us = 0, c.latency_us = 0; /* only the products cost */
    c.intra_gbs = c.inter_gbs = 1e12;
    double B = 16, s = 2048, l = 24, h = 2304, V = 51200;
    double whole = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
    const int chunks[] = {1, 4096, 51199, 51200, 1 << 30};
    for (int tp = 1; tp <= 2; tp *= 2) {
        msr_plan_time_t t0, t;
        msr_plan_layout_t w = layout(tp, 0);
        char why[256];
        MSR_CHECK_MSG(msr_plan_check(&m, &w, why, sizeof why) == 0, "%s", why);
        msr_plan_time(&m, &w, MSR_PLAN_BF16, &c, &t0);
        MSR_CHECK_MSG(fabs(t0.flops / whole - 1) < 1e-12, "%g vs %g", t0.flops, whole);
        for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
            msr_plan_layout_t hl = layout(tp, chunks[i]);
            msr_plan_time(&m, &hl, MSR_PLAN_BF16, &c, &t);
            double want = whole + 2 * B * s * h * V;
            MSR_CHECK_MSG(fabs(t.flops / want - 1) < 1e-12, "tp %d chunk %d: %g vs %g", tp,
                          chunks[i], t.flops, want);
            /* the rank's share of those flops (V / tp rows) at the peak */
            double more = 2 * B * s * h * V / tp / (c.peak_tflops * 1e9);
            MSR_CHECK_MSG(fabs(t.compute_ms - t0.compute_ms - more) < 1e-9 * t.compute_ms,
                          "tp %d chunk %d: %g ms more, want %g", tp, chunks[i],
                          t.compute_ms - t0.compute_ms, more);
        }
    }
}

static const msr_test_t tests[] = {
    {"head_flops", test_head_flops, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
