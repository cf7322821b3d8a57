/* The pipeline orders (layout/pipe_order.h) against each other and
 * their peaks; the pipeline simulated under processor sharing (planner/plan_sim.h):
 * with a core per rank it gives the closed forms; on one core, the sum of
 * all work (the core is never idle: some op is always ready); in between,
 * no faster than either bound and never slower with more cores. */
#include <math.h>
#include <stdio.h>

#include "layout/pipe_order.h"
#include "planner/plan.h"
#include "planner/plan_sim.h"
#include "tests/runner.h"

#define NEAR(a, b) (fabs((double)(a) - (double)(b)) <= 1e-9 * (1 + fabs((double)(b))))

static double run(int pp, int v, int m, int sched, double on_node, double cores,
                  const msr_plan_sim_stage_t *st)
{
    msr_plan_sim_t s = {pp, v, m, sched, on_node, cores, st};
    return msr_plan_sim_pipeline(&s);
}

static void fill(msr_plan_sim_stage_t *st, int n, double f, double b, double wf, double wb)
{
    for (int j = 0; j < n; j++)
        st[j] = (msr_plan_sim_stage_t){f, b, wf, wb};
}

static void test_closed_forms(void)
{
    msr_plan_sim_stage_t st[64];
    /* GPipe and 1F1B: (m + p - 1) (f + b) */
    for (int p = 1; p <= 8; p *= 2)
        for (int m = 1; m <= 16; m *= 2) {
            fill(st, p, 1, 2, 0, 0);
            double want = (m + p - 1) * 3.0;
            MSR_CHECK_MSG(NEAR(run(p, 1, m, MSR_PLAN_GPIPE, p, p, st), want), "gpipe p %d m %d", p,
                          m);
            MSR_CHECK_MSG(NEAR(run(p, 1, m, MSR_PLAN_1F1B, p, p, st), want), "1f1b p %d m %d", p,
                          m);
        }
    /* interleaved, v chunks of a stage's work: (m + (p - 1) / v) (f + b) */
    for (int p = 2; p <= 4; p *= 2)
        for (int v = 2; v <= 4; v++)
            for (int m = p; m <= 4 * p; m += p) {
                fill(st, p * v, 1.0 / v, 2.0 / v, 0, 0);
                double want = (m + (p - 1.0) / v) * 3.0;
                double got = run(p, v, m, MSR_PLAN_INTERLEAVED, p, p, st);
                MSR_CHECK_MSG(NEAR(got, want), "interleaved p %d v %d m %d: %g, want %g", p, v, m,
                              got, want);
            }
    /* more ranks on the node than the pipeline (dp, tp), each with a core */
    fill(st, 4, 1, 2, 0, 0);
    MSR_CHECK(NEAR(run(4, 1, 8, MSR_PLAN_1F1B, 16, 16, st), 11 * 3.0));
    /* the waits (collectives, sends) are on the path too */
    fill(st, 2, 1, 2, 0.5, 0.5);
    double t = run(2, 1, 1, MSR_PLAN_1F1B, 2, 2, st);
    MSR_CHECK_MSG(NEAR(t, 2 * 3.0 + 4 * 0.5), "%g", t);
}

static void test_shared_cores(void)
{
    msr_plan_sim_stage_t st[64];
    int scheds[] = {MSR_PLAN_GPIPE, MSR_PLAN_1F1B, MSR_PLAN_INTERLEAVED};
    for (int k = 0; k < 3; k++)
        for (int p = 2; p <= 8; p *= 2)
            for (int m = p; m <= 4 * p; m *= 2) {
                int v = scheds[k] == MSR_PLAN_INTERLEAVED ? 2 : 1;
                /* uneven stages: the last twice as heavy */
                fill(st, p * v, 1, 2, 0, 0);
                st[p * v - 1] = (msr_plan_sim_stage_t){2, 4, 0, 0};
                double work = 0;
                for (int j = 0; j < p * v; j++)
                    work += m * (st[j].fwd + st[j].bwd);
                /* one core: never idle, so the sum of the work */
                double one = run(p, v, m, scheds[k], p, 1, st);
                MSR_CHECK_MSG(NEAR(one, work), "sched %d p %d m %d: %g, work %g", scheds[k], p, m,
                              one, work);
                /* in between: at least the work over the cores and the path
                 * with a core each; more cores never slower */
                double own = run(p, v, m, scheds[k], p, p, st), prev = one;
                for (int c = 2; c <= p; c++) {
                    double got = run(p, v, m, scheds[k], p, c, st);
                    MSR_CHECK_MSG(got >= work / c - 1e-9 && got >= own - 1e-9 && got <= prev + 1e-9,
                                  "sched %d p %d m %d cores %d: %g (work/c %g, own %g, prev %g)",
                                  scheds[k], p, m, c, got, work / c, own, prev);
                    prev = got;
                }
            }
    /* a waiting rank lends its core: 2 ranks on 1 core, m = 1, the second
     * stage only starts when the first has sent; each runs alone */
    fill(st, 2, 1, 2, 0, 0);
    MSR_CHECK(NEAR(run(2, 1, 1, MSR_PLAN_1F1B, 2, 1, st), 6));
}

static void test_refusals(void)
{
    msr_plan_sim_stage_t st[4];
    fill(st, 4, 1, 2, 0, 0);
    MSR_CHECK(run(2, 1, MSR_PLAN_SIM_MAX_OPS, MSR_PLAN_1F1B, 2, 1, st) == -1);
    MSR_CHECK(run(0, 1, 4, MSR_PLAN_1F1B, 2, 1, st) == -1);
    MSR_CHECK(run(2, 1, 4, MSR_PLAN_1F1B, 2, 0, st) == -1);
    MSR_CHECK(run(2, 1, 4, MSR_PLAN_1F1B, 2, 1, NULL) == -1);
    /* the runtime's interleaved order takes whole groups of p */
    MSR_CHECK(run(2, 2, 3, MSR_PLAN_INTERLEAVED, 2, 1, st) == -1);
}

/* The schedules' orders (layout/pipe_order.h), which the runtime, the
 * memory model and the simulation share: every forward and backward once,
 * a backward after its forward and after the next stage's backward could
 * have run (its chunk's backward order), the frames a rank holds at once
 * (1F1B: at most p - r; GPipe: all M), and the interleaved order's first
 * ops as Megatron's paper draws them. */
/* The first msr_pipe_ops_to_peak ops reach the most frames and bytes the
 * whole order holds at once, chunks of different sizes. */
static void test_ops_to_peak(void)
{
    const double bytes[4] = {1, 10, 100, 1000};
    for (int sc = 0; sc < 3; sc++)
        for (int p = 1; p <= 6; p++)
            for (int v = 1; v <= (sc == MSR_PIPE_INTERLEAVED ? 4 : 1); v++)
                for (int M = p; M <= 5 * p; M += (v > 1 ? p : 1))
                    for (int r = 0; r < p; r++) {
                        int n = 2 * M * v, cut = msr_pipe_ops_to_peak(sc, M, p, r, v);
                        double live = 0, peak = 0, peak_cut = 0;
                        int held = 0, most = 0, most_cut = 0;
                        for (int k = 0; k < n; k++) {
                            msr_pipe_op_t o = msr_pipe_op_at(sc, M, p, r, v, k);
                            live += o.backward ? -bytes[o.c] : bytes[o.c];
                            held += o.backward ? -1 : 1;
                            peak = live > peak ? live : peak;
                            most = held > most ? held : most;
                            if (k < cut) {
                                peak_cut = peak;
                                most_cut = most;
                            }
                        }
                        int bad = cut < 1 || cut > n || peak_cut != peak || most_cut != most;
                        if (bad)
                            fprintf(stderr, "schedule %d p %d v %d M %d rank %d: %d of %d ops\n",
                                    sc, p, v, M, r, cut, n);
                        MSR_CHECK(!bad);
                    }
    /* a long order stops after its warm-up and one round: interleaved p 4,
     * v 2, rank 0: (4 - 1) 2 + 4 = 10 forwards, then 8 pairs; 1F1B rank 1
     * of 4: 2 forwards, then one pair; GPipe: every forward */
    MSR_CHECK_EQ(msr_pipe_ops_to_peak(MSR_PIPE_INTERLEAVED, 1024, 4, 0, 2), 26);
    MSR_CHECK_EQ(msr_pipe_ops_to_peak(MSR_PIPE_1F1B, 1024, 4, 1, 1), 4);
    MSR_CHECK_EQ(msr_pipe_ops_to_peak(MSR_PIPE_GPIPE, 1024, 4, 1, 1), 1024);
    /* the warm-up's bound: with M == p - r micro-batches the p - r - 1
     * warm-up forwards are fewer than M, then one pair (rank 0 of 4: 3 + 2);
     * one fewer micro-batch: all M are warm-up, no pair */
    MSR_CHECK_EQ(msr_pipe_ops_to_peak(MSR_PIPE_1F1B, 4, 4, 0, 1), 5);
    MSR_CHECK_EQ(msr_pipe_ops_to_peak(MSR_PIPE_1F1B, 3, 4, 0, 1), 3);
}

static void test_orders(void)
{
    msr_pipe_op_t o[2 * 24 * 4];
    for (int sc = 0; sc < 3; sc++)
        for (int p = 1; p <= 6; p++)
            for (int v = 1; v <= (sc == MSR_PIPE_INTERLEAVED ? 3 : 1); v++)
                for (int M = p; M <= 3 * p; M += (v > 1 ? p : 1))
                    for (int r = 0; r < p; r++) {
                        int n = msr_pipe_order(sc, M, p, r, v, o), seen[2][24][4] = {{{0}}};
                        int held = 0, most = 0, bad = n != 2 * M * v;
                        for (int k = 0; k < n && !bad; k++) {
                            msr_pipe_op_t a = msr_pipe_op_at(sc, M, p, r, v, k);
                            bad |= a.backward != o[k].backward || a.m != o[k].m || a.c != o[k].c;
                            bad |= o[k].m < 0 || o[k].m >= M || o[k].c < 0 || o[k].c >= v;
                            if (bad)
                                break;
                            bad |= seen[o[k].backward][o[k].m][o[k].c]++ != 0;
                            bad |= o[k].backward && !seen[0][o[k].m][o[k].c];
                            held += o[k].backward ? -1 : 1;
                            most = held > most ? held : most;
                        }
                        if (sc == MSR_PIPE_GPIPE)
                            bad |= most != M;
                        if (sc == MSR_PIPE_1F1B)
                            bad |= most != (p - r < M ? p - r : M);
                        if (bad)
                            fprintf(stderr, "schedule %d p %d v %d M %d rank %d\n", sc, p, v, M, r);
                        MSR_CHECK(!bad);
                    }
    /* p 2, v 2, M 4, rank 0: warm-up (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4
     * forwards: micro-batches 0 1 of chunk 0, then 0 1 of chunk 1; then
     * forward 2/chunk 0 with backward 0/chunk 1 */
    msr_pipe_order(MSR_PIPE_INTERLEAVED, 4, 2, 0, 2, o);
    const int want[][3] = {{0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1}, {0, 2, 0}, {1, 0, 1}};
    for (int k = 0; k < 6; k++)
        MSR_CHECK(o[k].backward == want[k][0] && o[k].m == want[k][1] && o[k].c == want[k][2]);
}

/* Checks msr_pipe_order's interleaved order against want ({backward, m, c}
 * per op). */
static void check_order(int M, int p, int r, int v, const int (*want)[3], int n)
{
    msr_pipe_op_t o[2 * 8 * 2];
    MSR_CHECK(n <= (int)(sizeof o / sizeof o[0]));
    MSR_CHECK_EQ(msr_pipe_order(MSR_PIPE_INTERLEAVED, M, p, r, v, o), n);
    for (int k = 0; k < n; k++)
        MSR_CHECK_MSG(o[k].backward == want[k][0] && o[k].m == want[k][1] && o[k].c == want[k][2],
                      "M %d p %d rank %d op %d: %c%d/%d, want %c%d/%d", M, p, r, k,
                      o[k].backward ? 'B' : 'F', o[k].m, o[k].c, want[k][0] ? 'B' : 'F', want[k][1],
                      want[k][2]);
}

/* Interleaved with M == p: every forward first, on every rank (Megatron's
 * rule), although rank 1 of 2 would warm up with 2; with M = 2p (one
 * round past) rank 1 warms up with (2 - 1 - 1) 2 + (2 - 1) 2 = 2 forwards. */
static void test_interleaved_m_equals_p(void)
{
    const int eq[][3] = {{0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1},
                         {1, 0, 1}, {1, 1, 1}, {1, 0, 0}, {1, 1, 0}};
    check_order(2, 2, 1, 2, eq, 8);
    check_order(2, 2, 0, 2, eq, 8);
    const int past[][3] = {{0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1},
                           {0, 2, 0}, {1, 0, 0}, {0, 3, 0}, {1, 1, 0}, {0, 2, 1}, {1, 2, 1},
                           {0, 3, 1}, {1, 3, 1}, {1, 2, 0}, {1, 3, 0}};
    check_order(4, 2, 1, 2, past, 16);
    /* p 3, v 2, M 3, the last rank (warm-up 3 without the rule) */
    const int three[][3] = {{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {0, 0, 1}, {0, 1, 1}, {0, 2, 1},
                            {1, 0, 1}, {1, 1, 1}, {1, 2, 1}, {1, 0, 0}, {1, 1, 0}, {1, 2, 0}};
    check_order(3, 3, 2, 2, three, 12);
}

static const msr_test_t tests[] = {
    {"orders", test_orders, 10},
    {"interleaved_m_equals_p", test_interleaved_m_equals_p, 10},
    {"ops_to_peak", test_ops_to_peak, 10},
    {"closed_forms", test_closed_forms, 10},
    {"shared_cores", test_shared_cores, 10},
    {"refusals", test_refusals, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
