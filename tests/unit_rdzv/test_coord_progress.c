/* The ranks' progress reports in the coordinator: stragglers named once,
 * same steps, disjoint windows and ranks far ahead, times that are not
 * positive, and the history kept with its stride. */
#include <errno.h>
#include <fcntl.h>
#include <grpc/status.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "cluster/straggler.h"
#include "tests/unit_rdzv/test_coord.h"

/* Progress: the ranks' reports, the straggler named once, stale
 * generations ignored, and what /metrics and /api/job render of it. */
static void progress_send(msr_coord_t *co, tcall_t *c, const char *id, int gen, int slow_rank,
                          int64_t step)
{
    Msr__StepReport reps[8], *repp[8];
    Msr__Scalar loss[8], *lossp[8];
    double times[8][MSR_STRAGGLER_WINDOW];
    for (int r = 0; r < 8; r++) {
        msr__step_report__init(&reps[r]);
        msr__scalar__init(&loss[r]);
        loss[r].name = "loss";
        loss[r].value = 2.5 + r;
        lossp[r] = &loss[r];
        for (int k = 0; k < MSR_STRAGGLER_WINDOW; k++)
            times[r][k] = r == slow_rank ? 0.2 : 0.1 + 0.001 * r;
        reps[r].rank = r;
        reps[r].step = step;
        reps[r].step_time = times[r][0];
        reps[r].steps = MSR_STRAGGLER_WINDOW;
        reps[r].n_step_times = MSR_STRAGGLER_WINDOW;
        reps[r].step_times = times[r];
        reps[r].n_scalars = 1;
        reps[r].scalars = &lossp[r];
        repp[r] = &reps[r];
    }
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    req.node_id = (char *)id;
    req.generation = gen;
    req.n_steps = 8;
    req.steps = repp;
    tc_call(co, c, MSR_RPC_PROGRESS, &req.base);
    MSR_CHECK_MSG(c->answered && c->code == 0, "progress: %d %s", c->code, c->message);
}

static void test_progress_and_stragglers(void)
{
    msr_coord_t *co = tc_make_coord(8, 8, 0);
    const char *a = tc_join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    /* balanced: nobody named */
    progress_send(co, &c, a, 0, -1, 19);
    MSR_CHECK_EQ(((Msr__ProgressResponse *)c.resp)->n_stragglers, 0);
    msr_tcall_reset(&c);
    /* rank 5 twice as slow over a whole window: suspected, not yet named
     * (one window may be a moment of the machine) */
    progress_send(co, &c, a, 0, 5, 39);
    MSR_CHECK_EQ(((Msr__ProgressResponse *)c.resp)->n_stragglers, 0);
    msr_tcall_reset(&c);
    /* and over the next window too: named, with its node */
    progress_send(co, &c, a, 0, 5, 59);
    Msr__ProgressResponse *r = (Msr__ProgressResponse *)c.resp;
    MSR_CHECK_EQ(r->n_stragglers, 1);
    MSR_CHECK(r->n_stragglers == 1 && r->stragglers[0]->rank == 5);
    MSR_CHECK(r->n_stragglers == 1 && r->stragglers[0]->node_rank == 0);
    MSR_CHECK(r->n_stragglers == 1 && r->stragglers[0]->window == MSR_STRAGGLER_WINDOW);
    MSR_CHECK(r->n_stragglers == 1 && r->stragglers[0]->ratio > 1.9 &&
              r->stragglers[0]->ratio < 2.0);
    msr_tcall_reset(&c);
    /* still slow: the same one straggler, named once */
    progress_send(co, &c, a, 0, 5, 79);
    MSR_CHECK_EQ(((Msr__ProgressResponse *)c.resp)->n_stragglers, 1);
    msr_tcall_reset(&c);
    /* another generation's reports are ignored */
    progress_send(co, &c, a, 7, 5, 1000);
    msr_tcall_reset(&c);
    msr_buf_t m = MSR_BUF_INIT, j = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_coord_render_metrics(co, &m));
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    static const char *const want[] = {
        "msrun_rank_step{rank=\"5\",node=\"0\"} 79\n",
        "msrun_rank_straggler{rank=\"5\",node=\"0\"} 1\n",
        "msrun_rank_straggler{rank=\"4\",node=\"0\"} 0\n",
        "msrun_rank_scalar{rank=\"7\",node=\"0\",name=\"loss\"} 9.5\n",
        "msrun_stragglers_total 1\n",
        "msrun_progress_messages_total 5\n",
        "msrun_progress_steps_total 640\n",
        "msrun_coordinator_calls_total{method=\"Progress\"} 5\n",
        "msrun_job_state{state=\"running\"} 1\n",
        "msrun_ranks{state=\"running\"} 8\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        MSR_CHECK_MSG(strstr(m.data, want[i]) != NULL, "/metrics lacks %s", want[i]);
    MSR_CHECK(strstr(j.data, "\"stragglers\":[{\"rank\":5,\"node\":0,") != NULL);
    MSR_CHECK(strstr(j.data, "\"scalars\":{\"loss\":2.5}") != NULL);
    MSR_CHECK(strstr(j.data, "{\"job\":{\"id\":\"job\",\"state\":\"running\"") != NULL);
    msr_buf_cleanup(&m);
    msr_buf_cleanup(&j);
    msr_coord_destroy(co);
}

/* Ranks lo..hi report a window of steps ending at `step`, each taking t. */
static void progress_window(msr_coord_t *co, tcall_t *c, const char *id, int lo, int hi,
                            int64_t step, double t)
{
    Msr__StepReport reps[8], *repp[8];
    double times[MSR_STRAGGLER_WINDOW];
    for (int k = 0; k < MSR_STRAGGLER_WINDOW; k++)
        times[k] = t;
    int n = 0;
    for (int r = lo; r <= hi; r++, n++) {
        msr__step_report__init(&reps[n]);
        reps[n].rank = r;
        reps[n].step = step;
        reps[n].step_time = t;
        reps[n].steps = MSR_STRAGGLER_WINDOW;
        reps[n].n_step_times = MSR_STRAGGLER_WINDOW;
        reps[n].step_times = times;
        repp[n] = &reps[n];
    }
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    req.node_id = (char *)id;
    req.n_steps = (size_t)n;
    req.steps = repp;
    tc_call(co, c, MSR_RPC_PROGRESS, &req.base);
    MSR_CHECK_MSG(c->answered && c->code == 0, "progress: %d %s", c->code, c->message);
}

/* Nodes report at different moments: ranks whose latest window is of a
 * slow moment of the machine are compared with the others over the same
 * steps, not with the others' later, faster steps; a rank slow over the
 * same steps is named. */
static void test_stragglers_same_steps(void)
{
    msr_coord_t *co = tc_make_coord(8, 8, 0);
    const char *a = tc_join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    /* every rank: steps 20..39 slow (the machine busy) */
    progress_window(co, &c, a, 0, 7, 39, 0.2);
    msr_tcall_reset(&c);
    /* ranks 4..7 went on: steps 40..59 fast; ranks 0..3 have not said yet */
    progress_window(co, &c, a, 4, 7, 59, 0.1);
    MSR_CHECK_EQ(((Msr__ProgressResponse *)c.resp)->n_stragglers, 0);
    msr_tcall_reset(&c);
    /* ranks 0..3 report 40..59 fast too, but rank 2 slow over them: named */
    progress_window(co, &c, a, 0, 1, 59, 0.1);
    msr_tcall_reset(&c);
    progress_window(co, &c, a, 3, 3, 59, 0.1);
    msr_tcall_reset(&c);
    progress_window(co, &c, a, 2, 2, 59, 0.3);
    MSR_CHECK_EQ(((Msr__ProgressResponse *)c.resp)->n_stragglers, 0); /* suspected */
    msr_tcall_reset(&c);
    progress_window(co, &c, a, 0, 1, 79, 0.1);
    msr_tcall_reset(&c);
    progress_window(co, &c, a, 3, 7, 79, 0.1);
    msr_tcall_reset(&c);
    progress_window(co, &c, a, 2, 2, 79, 0.3);
    Msr__ProgressResponse *r = (Msr__ProgressResponse *)c.resp;
    MSR_CHECK_EQ(r->n_stragglers, 1);
    MSR_CHECK(r->n_stragglers == 1 && r->stragglers[0]->rank == 2);
    msr_tcall_reset(&c);
    msr_coord_destroy(co);
}

/* Each rank's curve for the page: a point per report, a resumed earlier
 * step replacing the points from it on, and a long run thinned to at most
 * MSR_OBS_HISTORY points spread over all of it. */
/* A step time that is not positive is no time: the rank's step_ms is 0,
 * and a window holding one is not full. */
static void test_progress_nonpositive_times(void)
{
    msr_coord_t *co = tc_make_coord(1, 1, 0);
    const char *a = tc_join(co, 0, 1, 1, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    double times[MSR_STRAGGLER_WINDOW];
    for (int k = 0; k < MSR_STRAGGLER_WINDOW; k++)
        times[k] = k == 0 ? 0 : 0.1; /* the oldest step's time is 0 */
    Msr__StepReport rep = MSR__STEP_REPORT__INIT, *repp = &rep;
    rep.rank = 0;
    rep.step = 30;
    rep.step_time = -0.5;
    rep.steps = MSR_STRAGGLER_WINDOW;
    rep.n_step_times = MSR_STRAGGLER_WINDOW;
    rep.step_times = times;
    Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
    req.node_id = (char *)a;
    req.n_steps = 1;
    req.steps = &repp;
    tc_call(co, &c, MSR_RPC_PROGRESS, &req.base);
    MSR_CHECK_MSG(c.answered && c.code == 0, "progress: %d %s", c.code, c.message);
    msr_tcall_reset(&c);
    msr_buf_t j = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    MSR_CHECK_MSG(strstr(j.data, "\"step\":30,\"step_ms\":0,\"step_ms_mean\":0,") != NULL, "%s",
                  j.data);
    msr_buf_cleanup(&j);
    msr_coord_destroy(co);
}

/* Once a curve is thinned to every other step (stride 2), a step off the
 * stride is kept when it lies a whole stride after the last point. */
static void test_progress_history_stride(void)
{
    msr_coord_t *co = tc_make_coord(1, 1, 0);
    const char *a = tc_join(co, 0, 1, 1, 0);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    const int64_t after[] = {MSR_OBS_HISTORY + 3, MSR_OBS_HISTORY + 5};
    for (int64_t k = 0; k <= MSR_OBS_HISTORY + 2; k++) {
        int64_t step = k <= MSR_OBS_HISTORY ? k : after[k - MSR_OBS_HISTORY - 1];
        Msr__StepReport rep = MSR__STEP_REPORT__INIT, *repp = &rep;
        rep.rank = 0;
        rep.step = step;
        rep.step_time = 0.1;
        Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
        req.node_id = (char *)a;
        req.n_steps = 1;
        req.steps = &repp;
        tc_call(co, &c, MSR_RPC_PROGRESS, &req.base);
        MSR_CHECK_MSG(c.answered && c.code == 0, "progress: %d %s", c.code, c.message);
        msr_tcall_reset(&c);
    }
    msr_buf_t j = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    char want[64];
    snprintf(want, sizeof want, "[%d,100,null],[%d,100,null]]", MSR_OBS_HISTORY + 3,
             MSR_OBS_HISTORY + 5);
    MSR_CHECK_MSG(strstr(j.data, want) != NULL, "%s", j.data);
    msr_buf_cleanup(&j);
    msr_coord_destroy(co);
}

static void test_progress_history(void)
{
    msr_coord_t *co = tc_make_coord(8, 8, 0);
    const char *a = tc_join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    for (int64_t step = 10; step <= 40; step += 10) {
        progress_send(co, &c, a, 0, -1, step);
        msr_tcall_reset(&c);
    }
    progress_send(co, &c, a, 0, -1, 20); /* resumed from step 20 */
    msr_tcall_reset(&c);
    msr_buf_t j = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    MSR_CHECK_MSG(strstr(j.data, "\"history\":[[10,100,2.5],[20,100,2.5]]}") != NULL, "%s", j.data);
    MSR_CHECK(strstr(j.data, "\"history\":[[10,101,3.5],[20,101,3.5]]}") != NULL);
    msr_buf_cleanup(&j);
    for (int64_t step = 21; step <= 1000; step++) {
        progress_send(co, &c, a, 0, -1, step);
        msr_tcall_reset(&c);
    }
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    const char *h = strstr(j.data, "\"history\":[[10,100,2.5],");
    MSR_CHECK(h != NULL);
    if (h == NULL)
        h = "";
    int points = 0;
    for (const char *q = h; q != NULL && *q && *q != '}'; q++)
        points += *q == '[';
    MSR_CHECK_MSG(points - 1 <= MSR_OBS_HISTORY && points - 1 >= MSR_OBS_HISTORY / 2, "%d points",
                  points - 1);
    const char *end = strstr(h, "]]");
    const char *last = end;
    while (last != NULL && last > h && *last != '[')
        last--;
    long at = last != NULL ? strtol(last + 1, NULL, 10) : 0;
    MSR_CHECK_MSG(at > 900 && at <= 1000, "the last point is step %ld", at);
    /* spread over the run: the middle point near its middle */
    const char *mid = h;
    for (int k = 0; k <= points / 2 && mid != NULL; k++)
        mid = strchr(mid + 1, '[');
    long mstep = mid != NULL ? strtol(mid + 1, NULL, 10) : 0;
    MSR_CHECK_MSG(mstep > 300 && mstep < 700, "the middle point is step %ld", mstep);
    msr_buf_cleanup(&j);
    msr_coord_destroy(co);
}

/* A slow rank is named once slow over two windows that share no step: the
 * second ending one step short of that (sharing the first's last step)
 * is not enough. */
static void test_stragglers_disjoint_windows(void)
{
    msr_coord_t *co = tc_make_coord(8, 8, 0);
    const char *a = tc_join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    const struct {
        int64_t step;
        size_t named;
    } rounds[] = {
        {19, 0}, {39, 0}, {39 + MSR_STRAGGLER_WINDOW - 1, 0}, {39 + MSR_STRAGGLER_WINDOW, 1}};
    for (size_t k = 0; k < MSR_ARRAY_SIZE(rounds); k++) {
        progress_send(co, &c, a, 0, k ? 5 : -1, rounds[k].step);
        MSR_CHECK_MSG(((Msr__ProgressResponse *)c.resp)->n_stragglers == rounds[k].named,
                      "at step %lld: %zu named", (long long)rounds[k].step,
                      ((Msr__ProgressResponse *)c.resp)->n_stragglers);
        msr_tcall_reset(&c);
    }
    msr_coord_destroy(co);
}

/* A rank far ahead of the others (its window holds none of their last
 * steps) is compared by its own last window: slow over two of them, it
 * is named. */
static void test_stragglers_far_ahead(void)
{
    msr_coord_t *co = tc_make_coord(8, 8, 0);
    const char *a = tc_join(co, 0, 8, 8, -1);
    tcall_t c = {0};
    MSR_CHECK_EQ(tc_beat(co, &c, a, 0, 0)->state, MSR__JOB_STATE__JOB_RUNNING);
    msr_tcall_reset(&c);
    double times[8][MSR_STRAGGLER_WINDOW];
    Msr__StepReport reps[8], *repp[8];
    for (int round = 0; round < 3; round++) {
        int64_t step = 19 + MSR_STRAGGLER_WINDOW * round;
        for (int r = 0; r < 8; r++) {
            msr__step_report__init(&reps[r]);
            for (int k = 0; k < MSR_STRAGGLER_WINDOW; k++)
                times[r][k] = r == 5 ? 0.2 : 0.1;
            reps[r].rank = r;
            reps[r].step = r == 5 ? step + 1000 : step;
            reps[r].step_time = times[r][0];
            reps[r].steps = MSR_STRAGGLER_WINDOW;
            reps[r].n_step_times = MSR_STRAGGLER_WINDOW;
            reps[r].step_times = times[r];
            repp[r] = &reps[r];
        }
        Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
        req.node_id = (char *)a;
        req.n_steps = 8;
        req.steps = repp;
        tc_call(co, &c, MSR_RPC_PROGRESS, &req.base);
        MSR_CHECK_MSG(c.answered && c.code == 0, "progress: %d %s", c.code, c.message);
        msr_tcall_reset(&c);
    }
    msr_buf_t j = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_coord_render_job(co, &j));
    MSR_CHECK_MSG(strstr(j.data, "\"stragglers\":[{\"rank\":5,") != NULL, "%s", j.data);
    msr_buf_cleanup(&j);
    msr_coord_destroy(co);
}

static const msr_test_t tests[] = {
    {"progress_and_stragglers", test_progress_and_stragglers, 10},
    {"progress_history", test_progress_history, 10},
    {"progress_history_stride", test_progress_history_stride, 10},
    {"progress_nonpositive_times", test_progress_nonpositive_times, 10},
    {"stragglers_same_steps", test_stragglers_same_steps, 10},
    {"stragglers_disjoint_windows", test_stragglers_disjoint_windows, 10},
    {"stragglers_far_ahead", test_stragglers_far_ahead, 10},
};

const msr_test_piece_t tc_progress_tests = MSR_TEST_PIECE(tests);
