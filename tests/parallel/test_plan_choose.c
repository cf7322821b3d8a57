/* The planner's choice within the noise (planner/plan.h msr_plan_choose):
 * with made-up predictions, the simplest of the plans within the noise of
 * the fastest is taken, by the documented order; outside the noise the
 * fastest; no noise, the fastest. */
#include <string.h>

#include "planner/plan.h"
#include "tests/runner.h"

/* A plan of the layout's degrees and ZeRO stage, predicted ms per step. */
static msr_plan_t plan(int dp, int tp, int pp, int zero, double ms)
{
    msr_plan_t p;
    memset(&p, 0, sizeof p);
    p.l = (msr_plan_layout_t){
        .dp = dp, .tp = tp, .pp = pp, .zero = zero, .micro_batch = 1, .micros = 1, .chunks = 1};
    p.t.step_ms = ms;
    return p;
}

/* The case: on 2 ranks ZeRO-3 predicted fastest by 1%, dp with
 * ZeRO 0 within a 3% noise: the plain dp is taken. */
static void test_zero_within_noise(void)
{
    msr_plan_t p[4] = {plan(2, 1, 1, 3, 100.0), plan(2, 2, 1, 0, 100.5), plan(2, 1, 1, 1, 101.0),
                       plan(2, 1, 1, 0, 101.9)};
    int64_t within = 0;
    MSR_CHECK_EQ(msr_plan_choose(p, 4, 0.03, &within), 3);
    MSR_CHECK_EQ(within, 4);
    /* 1% noise: plan 4 (1.9% slower) is out; of the rest ZeRO-1 is simplest */
    MSR_CHECK_EQ(msr_plan_choose(p, 4, 0.01, &within), 2);
    MSR_CHECK_EQ(within, 3);
    /* no noise: the fastest */
    MSR_CHECK_EQ(msr_plan_choose(p, 4, 0, &within), 0);
    MSR_CHECK_EQ(within, 1);
    MSR_CHECK_EQ(msr_plan_choose(p, 4, -1, NULL), 0);
    MSR_CHECK_EQ(msr_plan_choose(p, 0, 0.03, NULL), -1);
}

/* Fewer parallel dimensions come before a lower ZeRO stage; ties keep the
 * faster; each later key decides only on a tie of the ones before. */
static void test_order(void)
{
    msr_plan_t p[3] = {plan(2, 2, 1, 0, 50.0), plan(4, 1, 1, 2, 50.5), plan(2, 2, 1, 0, 50.6)};
    MSR_CHECK_EQ(msr_plan_choose(p, 3, 0.05, NULL), 1); /* 1 dimension, though ZeRO-2 */
    msr_plan_t q[2] = {plan(4, 1, 1, 1, 50.0), plan(4, 1, 1, 1, 50.1)};
    MSR_CHECK_EQ(msr_plan_choose(q, 2, 0.05, NULL), 0); /* as simple: the faster */
    /* one dimension each: data parallel before tp or pp, whatever ZeRO */
    msr_plan_t r[3] = {plan(1, 4, 1, 0, 50.0), plan(1, 1, 4, 0, 50.1), plan(4, 1, 1, 2, 50.2)};
    MSR_CHECK_EQ(msr_plan_choose(r, 3, 0.05, NULL), 2);
    MSR_CHECK_EQ(msr_plan_choose(r, 2, 0.05, NULL), 0); /* tp and pp alike: the faster */
    msr_plan_t a = plan(4, 1, 1, 0, 1), b = plan(4, 1, 1, 0, 1);
    MSR_CHECK_EQ(msr_plan_simpler(&a.l, &b.l), 0);
    b.l.recompute = MSR_PLAN_RC_SELECTIVE;
    MSR_CHECK_EQ(msr_plan_simpler(&a.l, &b.l), -1);
    a.l.zero = 1; /* ZeRO before recompute */
    MSR_CHECK_EQ(msr_plan_simpler(&a.l, &b.l), 1);
    a = plan(2, 2, 1, 0, 1), b = plan(2, 2, 1, 0, 1);
    b.l.sp = 1;
    MSR_CHECK_EQ(msr_plan_simpler(&a.l, &b.l), -1);
    a = plan(2, 1, 2, 0, 1), b = plan(2, 1, 2, 0, 1);
    a.l.chunks = 2; /* virtual stages */
    MSR_CHECK_EQ(msr_plan_simpler(&a.l, &b.l), 1);
    static const int split[2] = {3, 1};
    a.l.chunks = 1;
    a.l.stage_layers = split; /* an uneven split */
    MSR_CHECK_EQ(msr_plan_simpler(&a.l, &b.l), 1);
    a.l.cp = 2; /* cp and ep count as dimensions */
    b.l.ep = 2;
    b.l.zero = 1;
    MSR_CHECK_EQ(msr_plan_simpler(&a.l, &b.l), -1);
}

/* A plan at exactly the noise's bound is within it; one just past is not. */
static void test_bound(void)
{
    msr_plan_t p[2] = {plan(2, 1, 1, 3, 100.0), plan(2, 1, 1, 0, 102.0)};
    int64_t within = 0;
    MSR_CHECK_EQ(msr_plan_choose(p, 2, 0.02, &within), 1);
    MSR_CHECK_EQ(within, 2);
    p[1].t.step_ms = 102.0001;
    MSR_CHECK_EQ(msr_plan_choose(p, 2, 0.02, &within), 0);
    MSR_CHECK_EQ(within, 1);
}

static const msr_test_t tests[] = {
    {"zero_within_noise", test_zero_within_noise, 10},
    {"order", test_order, 10},
    {"bound", test_bound, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
