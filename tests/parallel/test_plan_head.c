/* The planner's chunked head (train_gpt --head-chunk): its step prices the
 * backward's second pass of the head's product, 2 B s h V / tp flops a
 * micro-batch (FLOPs 72 B s l h^2 (1 + s/6h + V/12lh) without recompute,
 * Narayanan et al. 2021, plus that), at any chunk and under tp; one chunk
 * of the whole vocabulary still takes the chunked runtime's pass; on a
 * cluster where only products cost, the step and its recompute grow by
 * those flops at the peak rate and nothing else moves.
 *
 * msr_plan_search_fit's chunked head (train_gpt --auto, plan_gpt
 * --head-chunk auto): taken where no layout fits without it, from exactly
 * the least peak of the chunked layouts (one byte under: no plan); where
 * plans fit, taken exactly when its fastest plan is faster than theirs;
 * never where none is over the budget, nor when the query fixes a chunk,
 * nor by the offloads' search; beside an offload only where neither
 * alone fits; each case with its reason. */
#include <math.h>
#include <stdlib.h>
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
            /* the rank's share of those flops (V / tp rows) at the peak: a
             * recompute (the logits again), not the compute without one */
            double more = 2 * B * s * h * V / tp / (c.peak_tflops * 1e9);
            MSR_CHECK_MSG(fabs(t.recompute_ms - t0.recompute_ms - more) < 1e-9 * t.step_ms,
                          "tp %d chunk %d: %g ms more recompute, want %g", tp, chunks[i],
                          t.recompute_ms - t0.recompute_ms, more);
            MSR_CHECK_MSG(fabs(t.step_ms - t0.step_ms - more) < 1e-9 * t.step_ms,
                          "tp %d chunk %d: %g ms more a step, want %g", tp, chunks[i],
                          t.step_ms - t0.step_ms, more);
            MSR_CHECK_MSG(fabs(t.compute_ms - t0.compute_ms) < 1e-9 * t.compute_ms,
                          "tp %d chunk %d: compute %g, whole %g", tp, chunks[i], t.compute_ms,
                          t0.compute_ms);
        }
    }
}

/* A 4-layer GPT whose head dwarfs its blocks (V 32,000 against C 256) on
 * 2 ranks, global batch 8, every layout. */
static const msr_plan_model_t big_head = {MSR_PLAN_GPT, 4, 256, 4, 4, 1024, 32000, 256};
/* and one whose head is small (V 256): its blocks' state is what is over */
static const msr_plan_model_t small_head = {MSR_PLAN_GPT, 4, 256, 4, 4, 1024, 256, 32};
static const msr_plan_model_t *model = &big_head; /* the searches' */

static msr_plan_query_t fit_query(int head_chunk)
{
    msr_plan_query_t q;
    memset(&q, 0, sizeof q);
    q.world = 2, q.global_batch = 8, q.search = MSR_PLAN_SEARCH_EXHAUSTIVE;
    for (int k = 0; k < MSR_PLAN_FIX_N; k++)
        q.fix[k] = -1;
    q.head_chunk = head_chunk;
    return q;
}

static void set_budget(msr_plan_cluster_t *c, uint64_t bytes)
{
    msr_plan_cluster_default(c);
    c->mem_gib = (double)bytes / (1024.0 * 1024.0 * 1024.0); /* exact: bytes < 2^53 */
}

/* The search of q under c with `fit`: its count, plans[0]'s head chunk,
 * offload and step, *pr, and why (the head's) into why. */
typedef struct fit_out {
    int64_t n;
    int head, offload;
    double step_ms;
    msr_plan_pruned_t pr;
    char why[256];
} fit_out_t;

static fit_out_t fit(const msr_plan_query_t *q, const msr_plan_cluster_t *c, int what)
{
    fit_out_t f;
    memset(&f, 0, sizeof f);
    msr_plan_t *plans = NULL;
    char why[256] = "";
    f.n = msr_plan_search_fit(model, MSR_PLAN_FP32, c, q, what, 0, &plans, &f.pr, why, sizeof why);
    MSR_CHECK_MSG(f.n >= 0, "%s", why);
    if (f.n > 0) {
        f.head = plans[0].l.head_chunk, f.offload = plans[0].l.offload;
        f.step_ms = plans[0].t.step_ms;
        msr_plan_fit_why(&plans[0], &f.pr, c, MSR_PLAN_FIT_HEAD, f.why, sizeof f.why);
        /* what the chunks save (some bytes) and add: the head's product
         * again, 2 N C V / tp a micro-batch, N = b T / cp tokens */
        uint64_t saved = 0;
        double flops = -1;
        const msr_plan_layout_t *l = &plans[0].l;
        msr_plan_head_cost(model, MSR_PLAN_FP32, &plans[0], &saved, &flops);
        double want = f.head == 0 ? 0
                                  : 2.0 * l->micro_batch * model->seq / msr_plan_cp(l) *
                                        model->channels * model->vocab / l->tp * l->micros;
        MSR_CHECK_MSG(flops == want, "%g flops, want %g", flops, want);
        MSR_CHECK(f.head == 0 ? saved == 0 : saved > 0);
        for (int64_t i = 1; i < f.n; i++) /* one search's plans: one head */
            MSR_CHECK(plans[i].l.head_chunk == f.head && plans[i].l.offload == f.offload);
    }
    free(plans);
    return f;
}

/* The least peak of q's layouts (no budget to speak of). */
static uint64_t least_peak(const msr_plan_query_t *q)
{
    msr_plan_cluster_t c;
    msr_plan_cluster_default(&c);
    c.mem_gib = 1e6;
    msr_plan_t *plans = NULL;
    msr_plan_pruned_t pr;
    char why[256] = "";
    int64_t n = msr_plan_search(model, MSR_PLAN_FP32, &c, q, 0, &plans, &pr, why, sizeof why);
    MSR_CHECK_MSG(n > 0, "%s", why);
    uint64_t least = UINT64_MAX;
    for (int64_t i = 0; i < n; i++)
        least = plans[i].peak < least ? plans[i].peak : least;
    free(plans);
    return least;
}

static void test_fit_head_needed(void)
{
    msr_plan_query_t q0 = fit_query(0), qh = fit_query(MSR_PLAN_FIT_HEAD_ROWS);
    uint64_t whole = least_peak(&q0), chunked = least_peak(&qh);
    MSR_CHECK_MSG(chunked < whole, "the chunked head saves nothing: %llu vs %llu",
                  (unsigned long long)chunked, (unsigned long long)whole);
    msr_plan_cluster_t c;
    /* nothing fits without: the chunked head from its least peak exactly */
    const uint64_t budgets[] = {chunked, (chunked + whole) / 2, whole - 1};
    for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
        set_budget(&c, budgets[i]);
        fit_out_t f = fit(&q0, &c, MSR_PLAN_FIT_HEAD);
        MSR_CHECK_MSG(f.n > 0 && f.head == MSR_PLAN_FIT_HEAD_ROWS && f.offload == 0,
                      "budget %llu: %lld plans, head %d", (unsigned long long)budgets[i],
                      (long long)f.n, f.head);
        MSR_CHECK(f.pr.plain_ms == 0);
        MSR_CHECK_MSG(strncmp(f.why, "no layout fits in ", 18) == 0, "%s", f.why);
        /* without the head allowed: nothing */
        MSR_CHECK(fit(&q0, &c, 0).n == 0);
    }
    set_budget(&c, chunked - 1);
    fit_out_t f = fit(&q0, &c, MSR_PLAN_FIT_HEAD);
    MSR_CHECK_MSG(f.n == 0 && f.pr.over_memory > 0, "one byte under: %lld plans", (long long)f.n);
    /* a chunk the query fixes is kept: no rung of the search's own */
    msr_plan_query_t q48 = fit_query(48);
    set_budget(&c, least_peak(&q48));
    f = fit(&q48, &c, MSR_PLAN_FIT_HEAD);
    MSR_CHECK(f.n > 0 && f.head == 48);
    /* the offloads' search never chunks the head */
    set_budget(&c, chunked);
    f = fit(&q0, &c, MSR_PLAN_FIT_OFFLOAD);
    MSR_CHECK(f.n == 0 || f.head == 0);
}

/* Where plans fit without it: the chunked head exactly when its fastest
 * plan (the search fixing the chunk) is faster than theirs. */
static void test_fit_head_faster(void)
{
    msr_plan_query_t q0 = fit_query(0), qh = fit_query(MSR_PLAN_FIT_HEAD_ROWS);
    uint64_t whole = least_peak(&q0);
    int taken = 0, left = 0;
    for (double scale = 1; scale <= 8; scale *= 1.25) {
        msr_plan_cluster_t c;
        set_budget(&c, (uint64_t)(whole * scale));
        fit_out_t plain = fit(&q0, &c, 0), head = fit(&qh, &c, 0),
                  f = fit(&q0, &c, MSR_PLAN_FIT_HEAD);
        MSR_CHECK(plain.n > 0 && head.n > 0 && f.n > 0);
        MSR_CHECK(f.pr.plain_ms == plain.step_ms);
        if (plain.pr.over_memory == 0) {
            MSR_CHECK(f.head == 0 && f.step_ms == plain.step_ms);
            MSR_CHECK_MSG(strstr(f.why, "and none is over it (a chunked head saves nothing") !=
                              NULL,
                          "%s", f.why);
        } else if (head.step_ms < plain.step_ms) {
            taken++;
            MSR_CHECK(f.head == MSR_PLAN_FIT_HEAD_ROWS && f.step_ms == head.step_ms);
            MSR_CHECK_MSG(strncmp(f.why, "faster than the plans that fit in ", 34) == 0, "%s",
                          f.why);
        } else {
            left++;
            MSR_CHECK(f.head == 0 && f.step_ms == plain.step_ms);
            MSR_CHECK_MSG(strstr(f.why, "none with a chunked head is faster") != NULL, "%s", f.why);
        }
    }
    MSR_CHECK_MSG(taken > 0 && left > 0, "the budgets never took (%d) or left (%d) the chunk",
                  taken, left);
    /* every layout fits: nothing is searched again */
    msr_plan_cluster_t c;
    set_budget(&c, (uint64_t)1 << 50);
    fit_out_t f = fit(&q0, &c, MSR_PLAN_FIT_HEAD | MSR_PLAN_FIT_OFFLOAD);
    MSR_CHECK(f.pr.over_memory == 0 && f.head == 0 && f.offload == 0);
}

/* Neither the chunked head nor an offload alone fits; both do: the
 * offload's first rung that fits, beside the head. */
static void test_fit_head_beside_offload(void)
{
    msr_plan_query_t q0 = fit_query(0);
    msr_plan_cluster_t c;
    set_budget(&c, (uint64_t)(0.09 * 1073741824.0));
    MSR_CHECK(fit(&q0, &c, MSR_PLAN_FIT_HEAD).n == 0);
    MSR_CHECK(fit(&q0, &c, MSR_PLAN_FIT_OFFLOAD).n == 0);
    fit_out_t f = fit(&q0, &c, MSR_PLAN_FIT_HEAD | MSR_PLAN_FIT_OFFLOAD);
    MSR_CHECK_MSG(f.n > 0 && f.head == MSR_PLAN_FIT_HEAD_ROWS && f.offload != 0,
                  "%lld plans, head %d, offload %d", (long long)f.n, f.head, f.offload);
    MSR_CHECK_MSG(strncmp(f.why, "no layout fits in ", 18) == 0, "%s", f.why);
    /* the first offload rung that fits beside the head: no earlier one does */
    msr_plan_query_t qh = fit_query(MSR_PLAN_FIT_HEAD_ROWS);
    msr_plan_query_t qo = qh;
    qo.offload = f.offload;
    MSR_CHECK(fit(&qo, &c, 0).n > 0);
    qo.offload = MSR_PLAN_OFFLOAD_OPTIM;
    if (f.offload != MSR_PLAN_OFFLOAD_OPTIM)
        MSR_CHECK(fit(&qo, &c, 0).n == 0);
    /* the offload's reason when the chunked head alone let plans fit */
    set_budget(&c, least_peak(&qh));
    msr_plan_t *plans = NULL;
    msr_plan_pruned_t pr;
    char why[256] = "";
    int64_t n = msr_plan_search_fit(&big_head, MSR_PLAN_FP32, &c, &q0,
                                    MSR_PLAN_FIT_HEAD | MSR_PLAN_FIT_OFFLOAD, 0, &plans, &pr, why,
                                    sizeof why);
    MSR_CHECK_MSG(n > 0 && plans[0].l.head_chunk > 0 && plans[0].l.offload == 0, "%s", why);
    if (n > 0)
        msr_plan_fit_why(&plans[0], &pr, &c, MSR_PLAN_FIT_OFFLOAD, why, sizeof why);
    MSR_CHECK_MSG(strncmp(why, "the chunked head lets plans fit in ", 35) == 0, "%s", why);
    free(plans);
    /* a model whose blocks are what is over: from the least peak of the
     * optimizer's offload, the offload alone, not beside the head */
    model = &small_head;
    q0.world = 1, q0.global_batch = 2; /* no ZeRO to shard the moments */
    qh = q0;
    qh.head_chunk = MSR_PLAN_FIT_HEAD_ROWS;
    qo = q0;
    qo.offload = MSR_PLAN_OFFLOAD_OPTIM;
    uint64_t optim = least_peak(&qo);
    MSR_CHECK(optim < least_peak(&q0) && optim < least_peak(&qh));
    set_budget(&c, optim);
    MSR_CHECK(fit(&q0, &c, MSR_PLAN_FIT_HEAD).n == 0);
    f = fit(&q0, &c, MSR_PLAN_FIT_HEAD | MSR_PLAN_FIT_OFFLOAD);
    MSR_CHECK_MSG(f.n > 0 && f.head == 0 && f.offload == MSR_PLAN_OFFLOAD_OPTIM,
                  "%lld plans, head %d, offload %d", (long long)f.n, f.head, f.offload);
    MSR_CHECK_MSG(strncmp(f.why, "the offload lets plans fit in ", 30) == 0, "%s", f.why);
    model = &big_head;
}

static const msr_test_t tests[] = {
    {"head_flops", test_head_flops, 10},
    {"fit_head_needed", test_fit_head_needed, 30},
    {"fit_head_faster", test_fit_head_faster, 30},
    {"fit_head_beside_offload", test_fit_head_beside_offload, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
