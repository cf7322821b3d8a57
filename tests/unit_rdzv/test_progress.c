/* Progress reports without processes: the per-rank batch that libmsrun and
 * the node's proxy keep between sends (rendezvous/progress.h), the
 * "msrun:metric" line parser, and the straggler detector
 * (cluster/straggler.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "cluster/straggler.h"
#include "rendezvous/progress.h"
#include "tests/runner.h"

static int near(double a, double b)
{
    return fabs(a - b) < 1e-9;
}

static void test_batch_add_take(void)
{
    msr_progress_batch_t b;
    msr_progress_batch_init(&b);
    MSR_CHECK(!msr_progress_batch_pending(&b));
    const char *names[] = {"loss", "tok_s"};
    double v1[] = {2.5, 100}, v2[] = {2.25, 110};
    MSR_CHECK_OK(msr_progress_batch_add(&b, 3, 1, 0.5, 10.0, names, v1, 2));
    MSR_CHECK_OK(msr_progress_batch_add(&b, 3, 2, 0.25, 10.25, names, v2, 2));
    MSR_CHECK_OK(msr_progress_batch_add(&b, 1, 7, 0.125, 10.0, NULL, NULL, 0));
    MSR_CHECK(msr_progress_batch_pending(&b));
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    MSR_CHECK_OK(msr_progress_batch_take(&b, &req));
    MSR_CHECK_EQ(req.n_steps, 2);
    const Msr__StepReport *r = req.steps[0];
    /* one entry per rank: the latest step and values, every step time */
    MSR_CHECK_EQ(r->rank, 3);
    MSR_CHECK_EQ(r->step, 2);
    MSR_CHECK_EQ(r->steps, 2);
    MSR_CHECK(near(r->step_time, 0.25));
    MSR_CHECK_EQ(r->n_step_times, 2);
    MSR_CHECK(near(r->step_times[0], 0.5) && near(r->step_times[1], 0.25));
    MSR_CHECK_EQ(r->n_scalars, 2);
    MSR_CHECK_STR(r->scalars[0]->name, "loss");
    MSR_CHECK(near(r->scalars[0]->value, 2.25));
    MSR_CHECK(near(r->scalars[1]->value, 110));
    MSR_CHECK_EQ(req.steps[1]->rank, 1);
    /* the request owes nothing to the batch: it survives new reports */
    const char *other[] = {"lr"};
    double lr = 1e-3;
    MSR_CHECK_OK(msr_progress_batch_add(&b, 9, 1, 1, 11, other, &lr, 1));
    MSR_CHECK_STR(r->scalars[0]->name, "loss");
    msr_progress_request_cleanup(&req);
    /* taken: only rank 9 is pending, and the rest start again */
    MSR_CHECK_OK(msr_progress_batch_take(&b, &req));
    MSR_CHECK_EQ(req.n_steps, 1);
    MSR_CHECK_EQ(req.steps[0]->rank, 9);
    msr_progress_request_cleanup(&req);
    MSR_CHECK(!msr_progress_batch_pending(&b));
    MSR_CHECK_OK(msr_progress_batch_take(&b, &req));
    MSR_CHECK_EQ(req.n_steps, 0);
    msr_progress_batch_cleanup(&b);
}

static void test_batch_bad_and_derived(void)
{
    msr_progress_batch_t b;
    msr_progress_batch_init(&b);
    const char *bad[] = {"9lives"}, *space[] = {"a b"}, *ok[] = {"a.b:c/d-e_f"};
    double v = 1;
    MSR_CHECK_STATUS(msr_progress_batch_add(&b, 0, 1, 1, 1, bad, &v, 1), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_progress_batch_add(&b, 0, 1, 1, 1, space, &v, 1), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_progress_batch_add(&b, 0, -1, 1, 1, NULL, NULL, 0), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_progress_batch_add(&b, -1, 1, 1, 1, NULL, NULL, 0), MSR_ERR_INVALID_ARG);
    MSR_CHECK_EQ(b.dropped, 4);
    MSR_CHECK(!msr_progress_batch_pending(&b));
    MSR_CHECK_OK(msr_progress_batch_add(&b, 0, 1, 1, 1, ok, &v, 1));
    /* a step time not given is derived from the previous report: none
     * for the first (0, not kept), then 3 steps in 1.5 s */
    MSR_CHECK_OK(msr_progress_batch_add(&b, 2, 10, -1, 100.0, NULL, NULL, 0));
    MSR_CHECK_OK(msr_progress_batch_add(&b, 2, 13, -1, 101.5, NULL, NULL, 0));
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    MSR_CHECK_OK(msr_progress_batch_take(&b, &req));
    MSR_CHECK_EQ(req.n_steps, 2);
    MSR_CHECK_EQ(req.steps[1]->rank, 2);
    MSR_CHECK(near(req.steps[1]->step_time, 0.5));
    MSR_CHECK_EQ(req.steps[1]->n_step_times, 1);
    MSR_CHECK(near(req.steps[1]->step_times[0], 0.5));
    msr_progress_request_cleanup(&req);
    /* many steps between two sends: the last MSR_PROGRESS_TIMES are kept */
    for (int i = 0; i < 3 * MSR_PROGRESS_TIMES; i++)
        MSR_CHECK_OK(
            msr_progress_batch_add(&b, 0, 20 + i, 0.001 * (i + 1), 200 + i, NULL, NULL, 0));
    MSR_CHECK_OK(msr_progress_batch_take(&b, &req));
    MSR_CHECK_EQ(req.steps[0]->steps, 3 * MSR_PROGRESS_TIMES);
    MSR_CHECK_EQ(req.steps[0]->n_step_times, MSR_PROGRESS_TIMES);
    MSR_CHECK(
        near(req.steps[0]->step_times[MSR_PROGRESS_TIMES - 1], 0.001 * 3 * MSR_PROGRESS_TIMES));
    MSR_CHECK(near(req.steps[0]->step_times[0], 0.001 * (2 * MSR_PROGRESS_TIMES + 1)));
    msr_progress_request_cleanup(&req);
    msr_progress_batch_cleanup(&b);
}

/* A node's proxy merges its workers' batches: one entry per rank, the step
 * times of all, the steps counted. */
static void test_batch_merge(void)
{
    msr_progress_batch_t worker, node;
    msr_progress_batch_init(&worker);
    msr_progress_batch_init(&node);
    const char *names[] = {"loss"};
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    for (int send = 0; send < 3; send++) {
        for (int s = 0; s < 4; s++) {
            double loss = 10 - s - send;
            MSR_CHECK_OK(msr_progress_batch_add(&worker, 5, send * 4 + s, 0.1, send + s * 0.1,
                                                names, &loss, 1));
        }
        MSR_CHECK_OK(msr_progress_batch_take(&worker, &req));
        MSR_CHECK_EQ(req.n_steps, 1);
        MSR_CHECK_OK(msr_progress_batch_merge(&node, req.steps[0]));
        msr_progress_request_cleanup(&req);
    }
    MSR_CHECK_OK(msr_progress_batch_take(&node, &req));
    MSR_CHECK_EQ(req.n_steps, 1);
    MSR_CHECK_EQ(req.steps[0]->steps, 12);
    MSR_CHECK_EQ(req.steps[0]->step, 11);
    MSR_CHECK_EQ(req.steps[0]->n_step_times, 12);
    MSR_CHECK(near(req.steps[0]->scalars[0]->value, 5));
    msr_progress_request_cleanup(&req);
    msr_progress_batch_cleanup(&worker);
    msr_progress_batch_cleanup(&node);
}

static int parse(const char *line, msr_metric_line_t *m)
{
    return msr_metric_line_parse(line, strlen(line), m);
}

static void test_metric_line(void)
{
    msr_metric_line_t m;
    MSR_CHECK(parse("msrun:metric step=12 loss=2.31", &m));
    MSR_CHECK_EQ(m.step, 12);
    MSR_CHECK(m.step_time < 0);
    MSR_CHECK_EQ(m.n, 1);
    MSR_CHECK_STR(m.names[0], "loss");
    MSR_CHECK(near(m.values[0], 2.31));
    MSR_CHECK(parse("msrun:metric  loss=-1e-3\tstep=0 step_time=0.25 tok_s=5120 lr=3e-4\r", &m));
    MSR_CHECK_EQ(m.step, 0);
    MSR_CHECK(near(m.step_time, 0.25));
    MSR_CHECK_EQ(m.n, 3);
    MSR_CHECK_STR(m.names[2], "lr");
    /* not metric lines: each is ignored as a whole */
    static const char *const bad[] = {
        "msrun:metric",                      /* no step */
        "msrun:metric loss=1",               /* no step */
        "msrun:metricstep=1",                /* no space after the prefix */
        " msrun:metric step=1",              /* not at the start */
        "step 12 loss 3.141593 tok/s 5120",  /* train_gpt's own line */
        "msrun:metric step=-1",              /* negative step */
        "msrun:metric step=1.5",             /* not an integer */
        "msrun:metric step=1 step=2",        /* repeated */
        "msrun:metric step=1 loss=1 loss=2", /* repeated */
        "msrun:metric step=1 loss=",         /* no value */
        "msrun:metric step=1 loss=abc",      /* not a number */
        "msrun:metric step=1 loss=nan",      /* not finite */
        "msrun:metric step=1 loss=inf",      /* not finite */
        "msrun:metric step=1 2x=1",          /* name starts with a digit */
        "msrun:metric step=1 l\"oss=1",      /* bad character */
        "msrun:metric step=1 loss",          /* no '=' */
        "msrun:metric step=1 step_time=-1",  /* negative time */
        "msrun:metric step=x",               /* not a number */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        MSR_CHECK_MSG(!parse(bad[i], &m), "accepted: %s", bad[i]);
    /* up to MSR_PROGRESS_SCALARS scalars, not one more */
    char line[1024];
    int n = snprintf(line, sizeof line, "msrun:metric step=3");
    for (int i = 0; i < MSR_PROGRESS_SCALARS; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, " s%d=%d", i, i);
    MSR_CHECK(parse(line, &m));
    MSR_CHECK_EQ(m.n, MSR_PROGRESS_SCALARS);
    snprintf(line + n, sizeof line - (size_t)n, " extra=1");
    MSR_CHECK(!parse(line, &m));
    /* a name of 63 characters is fine, 64 is not */
    char name[80];
    memset(name, 'a', 64);
    name[63] = '\0';
    snprintf(line, sizeof line, "msrun:metric step=1 %s=1", name);
    MSR_CHECK(parse(line, &m));
    name[63] = 'a';
    name[64] = '\0';
    snprintf(line, sizeof line, "msrun:metric step=1 %s=1", name);
    MSR_CHECK(!parse(line, &m));
}

static void test_straggler_window(void)
{
    msr_step_window_t w;
    memset(&w, 0, sizeof w);
    MSR_CHECK(msr_step_window_last(&w) == -1);
    int64_t step = 0;
    for (int i = 0; i < MSR_STRAGGLER_WINDOW - 1; i++)
        msr_step_window_push(&w, step++, 1.0);
    MSR_CHECK(msr_step_window_mean(&w) == 0); /* not full yet */
    msr_step_window_push(&w, step++, 1.0);
    MSR_CHECK(near(msr_step_window_mean(&w), 1.0));
    /* the oldest goes: after a full window of 3.0 the mean is 3.0 */
    for (int i = 0; i < MSR_STRAGGLER_WINDOW; i++)
        msr_step_window_push(&w, step++, 3.0);
    MSR_CHECK(near(msr_step_window_mean(&w), 3.0));
    MSR_CHECK(msr_step_window_last(&w) == step - 1);
    /* over given steps: the window of 1.0 ended at step 19, a window ending
     * at 29 is half of each; steps the ring no longer (or not yet) holds: 0 */
    MSR_CHECK(near(msr_step_window_mean_at(&w, 19), 1.0));
    MSR_CHECK(near(msr_step_window_mean_at(&w, 29), 2.0));
    MSR_CHECK(msr_step_window_mean_at(&w, step) == 0);
    for (int i = 0; i < MSR_STEP_RING; i++)
        msr_step_window_push(&w, step++, 2.0);
    MSR_CHECK(msr_step_window_mean_at(&w, 19) == 0);
    /* a resume from an earlier step starts over */
    msr_step_window_push(&w, 5, 4.0);
    MSR_CHECK(msr_step_window_last(&w) == 5 && msr_step_window_mean(&w) == 0);
    /* so does the latest step again (a resume from the step just done):
     * the window is full once more only after MSR_STRAGGLER_WINDOW steps */
    memset(&w, 0, sizeof w);
    for (step = 0; step < MSR_STRAGGLER_WINDOW; step++)
        msr_step_window_push(&w, step, 1.0);
    MSR_CHECK(near(msr_step_window_mean(&w), 1.0));
    msr_step_window_push(&w, step - 1, 5.0);
    MSR_CHECK(msr_step_window_last(&w) == step - 1 && msr_step_window_mean(&w) == 0);
    for (int i = 2; i < MSR_STRAGGLER_WINDOW; i++)
        msr_step_window_push(&w, step++, 5.0);
    MSR_CHECK(msr_step_window_mean(&w) == 0); /* one short */
    msr_step_window_push(&w, step++, 5.0);
    MSR_CHECK(near(msr_step_window_mean(&w), 5.0));
}

static void test_stragglers(void)
{
    uint8_t slow[8];
    double median;
    /* balanced, with noise: none */
    double even[] = {0.100, 0.104, 0.098, 0.110, 0.101, 0.099, 0.12, 0.097};
    MSR_CHECK_EQ(msr_stragglers_find(even, 8, 1.5, slow, &median), 0);
    MSR_CHECK(near(median, 0.100));
    /* one slow rank of eight: named, and only it */
    double one[] = {0.100, 0.104, 0.098, 0.110, 0.101, 0.180, 0.12, 0.097};
    MSR_CHECK_EQ(msr_stragglers_find(one, 8, 1.5, slow, &median), 1);
    MSR_CHECK(slow[5]);
    /* below the factor: not named */
    MSR_CHECK_EQ(msr_stragglers_find(one, 8, 1.9, slow, &median), 0);
    /* ranks without a full window (0) are left out of the median */
    double part[] = {0, 0.1, 0, 0.3};
    MSR_CHECK_EQ(msr_stragglers_find(part, 4, 1.5, slow, &median), 1);
    MSR_CHECK(near(median, 0.1));
    MSR_CHECK(slow[3] && !slow[0] && !slow[2]);
    /* two ranks: the slow one is compared with the fast (lower median) */
    double two[] = {0.2, 0.1};
    MSR_CHECK_EQ(msr_stragglers_find(two, 2, 1.5, slow, &median), 1);
    MSR_CHECK(slow[0] && !slow[1]);
    /* one rank alone is compared with nobody; factor <= 1 finds none */
    double alone[] = {0.5};
    MSR_CHECK_EQ(msr_stragglers_find(alone, 1, 1.5, slow, &median), 0);
    MSR_CHECK_EQ(msr_stragglers_find(one, 8, 1.0, slow, &median), 0);
    /* half the ranks slow: the median is a slow one, nobody stands out */
    double half[] = {0.1, 0.1, 0.3, 0.3};
    MSR_CHECK(near(msr_straggler_median(half, 4), 0.1));
    double most[] = {0.1, 0.3, 0.3, 0.3};
    MSR_CHECK_EQ(msr_stragglers_find(most, 4, 1.5, slow, &median), 0);
    /* steps too short to compare: a 61.6x ratio of 0.000 s steps (the
     * report's "0.000 s a step, median 0.000 s") names nobody */
    double tiny[] = {1e-6, 1e-6, 61.6e-6, 1e-6};
    MSR_CHECK_EQ(msr_stragglers_find(tiny, 4, 1.5, slow, &median), 0);
    double zero_median[] = {0, 0, 0.5e-9, 0.3, 1e-12};
    MSR_CHECK_EQ(msr_stragglers_find(zero_median, 5, 1.5, slow, &median), 0);
    /* the floor's bound: a median at exactly MSR_STRAGGLER_MIN_SECONDS is
     * compared, one just below it is not */
    double at[] = {MSR_STRAGGLER_MIN_SECONDS, MSR_STRAGGLER_MIN_SECONDS,
                   2 * MSR_STRAGGLER_MIN_SECONDS};
    MSR_CHECK_EQ(msr_stragglers_find(at, 3, 1.5, slow, &median), 1);
    MSR_CHECK(slow[2] && !slow[0] && !slow[1]);
    double below[] = {0.999 * MSR_STRAGGLER_MIN_SECONDS, 0.999 * MSR_STRAGGLER_MIN_SECONDS,
                      2 * MSR_STRAGGLER_MIN_SECONDS};
    MSR_CHECK_EQ(msr_stragglers_find(below, 3, 1.5, slow, &median), 0);
}

/* The median of up to 64 means is taken without allocating (it cannot fail
 * for want of memory): at 64, the bound, with allocations failing it is
 * found; at 65, one past, it needs one (0 when it fails). */
static void test_straggler_median_no_alloc(void)
{
    double v[65];
    for (int i = 0; i < 65; i++)
        v[i] = 0.1 + 0.001 * i;
    msr_alloc_fail_at(0);
    double m64 = msr_straggler_median(v, 64);
    int failed64 = msr_alloc_failed();
    msr_alloc_fail_at(0);
    double m65 = msr_straggler_median(v, 65);
    int failed65 = msr_alloc_failed();
    msr_alloc_fail_at(-1);
    MSR_CHECK_MSG(near(m64, v[31]) && !failed64, "64 means: %g", m64);
    MSR_CHECK_MSG(m65 == 0 && failed65, "65 means: %g", m65);
    MSR_CHECK(near(msr_straggler_median(v, 65), v[32]));
}

static const msr_test_t tests[] = {
    {"batch_add_take", test_batch_add_take, 10},
    {"batch_bad_and_derived", test_batch_bad_and_derived, 10},
    {"batch_merge", test_batch_merge, 10},
    {"metric_line", test_metric_line, 10},
    {"straggler_window", test_straggler_window, 10},
    {"stragglers", test_stragglers, 10},
    {"straggler_median_no_alloc", test_straggler_median_no_alloc, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
