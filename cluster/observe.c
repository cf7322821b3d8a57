/* The coordinator's view of the ranks' progress: Progress calls, the
 * straggler check, and the job rendered for /metrics and /api/job
 * (docs/observe.md). Part of the core: the core's thread only. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "cluster/coord_internal.h"

void msr_coord_obs_cleanup(msr_coord_t *c)
{
    msr_free(c->obs.ranks);
    c->obs.ranks = NULL;
    c->obs.nranks = 0;
    for (size_t i = 0; i < c->obs.nhist; i++)
        msr_free(c->obs.hist[i]);
    msr_free(c->obs.hist);
    c->obs.hist = NULL;
    c->obs.nhist = 0;
    for (size_t i = 0; i < c->obs.nouts; i++)
        if (c->obs.outs[i]) {
            msr_buf_cleanup(&c->obs.outs[i]->lines);
            msr_free(c->obs.outs[i]);
        }
    msr_free(c->obs.outs);
    c->obs.outs = NULL;
    c->obs.nouts = c->obs.outs_kept = 0;
    c->obs.asks = 0;
}

/* The most ranks a report may name: the job's largest world. */
static size_t rank_limit(const msr_coord_t *c)
{
    long world = c->worker_num;
    if (c->max_nodes > 0 && c->local_worker_num > 0 &&
        (long)c->max_nodes * c->local_worker_num > world)
        world = (long)c->max_nodes * c->local_worker_num;
    if (world <= 0)
        world = 4096;
    return world < MSR_PROGRESS_RANKS_MAX ? (size_t)world : MSR_PROGRESS_RANKS_MAX;
}

/* The records of the current generation: a new one starts over. */
static void obs_generation(msr_coord_t *c)
{
    msr_obs_t *o = &c->obs;
    if (o->generation == c->generation)
        return;
    o->generation = c->generation;
    o->start_step = -1;
    if (o->ranks)
        memset(o->ranks, 0, o->nranks * sizeof *o->ranks);
}

static rank_obs_t *rank_get(msr_coord_t *c, int rank)
{
    msr_obs_t *o = &c->obs;
    if (rank < 0 || (size_t)rank >= rank_limit(c))
        return NULL;
    if ((size_t)rank >= o->nranks) {
        size_t n = o->nranks ? o->nranks : 8;
        while (n <= (size_t)rank)
            n *= 2;
        if (n > rank_limit(c))
            n = rank_limit(c);
        rank_obs_t *nr = msr_realloc_array(o->ranks, n, sizeof *nr);
        if (nr == NULL)
            return NULL;
        memset(nr + o->nranks, 0, (n - o->nranks) * sizeof *nr);
        o->ranks = nr;
        o->nranks = n;
    }
    return &o->ranks[rank];
}

/* Rank rank's curve, made on its first report (NULL: no memory, or a
 * rank past the limit). */
static rank_hist_t *hist_get(msr_coord_t *c, int rank)
{
    msr_obs_t *o = &c->obs;
    if ((size_t)rank >= o->nhist) {
        size_t n = o->nhist ? o->nhist : 8;
        while (n <= (size_t)rank)
            n *= 2;
        rank_hist_t **nh = msr_realloc_array(o->hist, n, sizeof *nh);
        if (nh == NULL)
            return NULL;
        memset(nh + o->nhist, 0, (n - o->nhist) * sizeof *nh);
        o->hist = nh;
        o->nhist = n;
    }
    if (o->hist[rank] == NULL && (o->hist[rank] = msr_calloc(1, sizeof(rank_hist_t))) != NULL)
        o->hist[rank]->stride = 1;
    return o->hist[rank];
}

/* Adds a point to a curve (see rank_hist_t). */
static void hist_add(rank_hist_t *h, int64_t step, double step_ms, double loss)
{
    while (h->n > 0 && h->step[h->n - 1] >= step) /* resumed from an earlier step */
        h->n--;
    if (h->n > 0 && step % h->stride != 0 && step - h->step[h->n - 1] < h->stride)
        return;
    if (h->n == MSR_OBS_HISTORY) { /* every other point goes */
        int k = 0;
        for (int i = 0; i < h->n; i += 2, k++) {
            h->step[k] = h->step[i];
            h->step_ms[k] = h->step_ms[i];
            h->loss[k] = h->loss[i];
        }
        h->n = k;
        h->stride *= 2;
    }
    h->step[h->n] = step;
    h->step_ms[h->n] = (float)step_ms;
    h->loss[h->n] = (float)loss;
    h->n++;
}

static void scalar_set(rank_obs_t *r, const char *name, double value)
{
    for (uint32_t i = 0; i < r->nscalars; i++) {
        if (strcmp(r->scalars[i].name, name) == 0) {
            r->scalars[i].value = value;
            return;
        }
    }
    if (r->nscalars == MSR_PROGRESS_SCALARS)
        return;
    snprintf(r->scalars[r->nscalars].name, sizeof r->scalars[0].name, "%s", name);
    r->scalars[r->nscalars++].value = value;
}

static void apply_report(msr_coord_t *c, int node_rank, const Msr__StepReport *s)
{
    rank_obs_t *r = rank_get(c, s->rank);
    if (r == NULL || s->step < 0)
        return;
    r->seen = 1;
    if (c->obs.start_step < 0 || s->step < c->obs.start_step)
        c->obs.start_step = s->step;
    r->node_rank = node_rank;
    r->step = s->step;
    r->step_time = isfinite(s->step_time) && s->step_time > 0 ? s->step_time : 0;
    r->time = isfinite(s->time) ? s->time : msr_wall_time();
    uint32_t steps = s->steps ? s->steps : 1;
    r->steps += steps;
    c->obs.step_reports += steps;
    if (s->n_step_times) { /* the times of the steps up to s->step, one a step */
        for (size_t i = 0; i < s->n_step_times; i++)
            if (isfinite(s->step_times[i]) && s->step_times[i] > 0)
                msr_step_window_push(&r->window, s->step - (int64_t)(s->n_step_times - 1 - i),
                                     s->step_times[i]);
    } else if (r->step_time > 0) {
        msr_step_window_push(&r->window, s->step, r->step_time);
    }
    double loss = NAN;
    for (size_t i = 0; i < s->n_scalars; i++) {
        const Msr__Scalar *sc = s->scalars[i];
        if (sc->name && msr_progress_name_valid(sc->name, strlen(sc->name)) &&
            isfinite(sc->value)) {
            scalar_set(r, sc->name, sc->value);
            if (strcmp(sc->name, "loss") == 0)
                loss = sc->value;
        }
    }
    rank_hist_t *h = hist_get(c, s->rank);
    if (h != NULL)
        hist_add(h, s->step, r->step_time * 1e3, loss);
}

/* Whether /api/job carries rank i's curve (MSR_OBS_CURVES). */
static int curve_shown(const msr_obs_t *o, size_t i, int current)
{
    if (i >= o->nhist || o->hist[i] == NULL || o->hist[i]->n == 0)
        return 0;
    if (o->nhist <= MSR_OBS_CURVES || i < MSR_OBS_CURVES_FIRST)
        return 1;
    return current && i < o->nranks && o->ranks[i].straggler;
}

/* Compares the ranks whose windows are full; names each new straggler once
 * in this generation. */
static void check_stragglers(msr_coord_t *c)
{
    msr_obs_t *o = &c->obs;
    double factor =
        c->config.straggler_factor > 0 ? c->config.straggler_factor : MSR_STRAGGLER_FACTOR;
    if (o->nranks == 0)
        return;
    double *means = msr_calloc(o->nranks, sizeof *means);
    uint8_t *slow = msr_calloc(o->nranks, 1);
    if (means == NULL || slow == NULL)
        goto out;
    /* the last window every rank has finished: compared over the same
     * steps (cluster/straggler.h) */
    int64_t common = -1;
    for (size_t i = 0; i < o->nranks; i++) {
        if (!o->ranks[i].seen || msr_step_window_mean(&o->ranks[i].window) == 0)
            continue;
        int64_t last = msr_step_window_last(&o->ranks[i].window);
        common = common < 0 || last < common ? last : common;
    }
    int64_t *end = msr_calloc(o->nranks, sizeof *end); /* each mean's last step */
    if (end == NULL)
        goto out;
    for (size_t i = 0; i < o->nranks; i++) {
        const msr_step_window_t *w = &o->ranks[i].window;
        means[i] = o->ranks[i].seen ? msr_step_window_mean_at(w, common) : 0;
        end[i] = common;
        if (o->ranks[i].seen && means[i] == 0) { /* far ahead: its own last window */
            means[i] = msr_step_window_mean(w);
            end[i] = msr_step_window_last(w);
        }
    }
    double median;
    msr_stragglers_find(means, o->nranks, factor, slow, &median);
    for (size_t i = 0; i < o->nranks; i++) {
        rank_obs_t *r = &o->ranks[i];
        r->ratio = median > 0 && means[i] > 0 ? means[i] / median : 0;
        if (!slow[i]) {
            r->suspect = 0;
            continue;
        }
        /* named once slow over two windows that share no step: one slow
         * window may be a moment of the machine */
        if (r->straggler)
            continue;
        if (r->suspect == 0) {
            r->suspect = end[i] + 1;
            continue;
        }
        if (end[i] + 1 < r->suspect + MSR_STRAGGLER_WINDOW)
            continue;
        r->straggler = 1;
        o->stragglers++;
        if (o->nnamed == MSR_STRAGGLERS_KEPT) {
            memmove(o->named, o->named + 1, (o->nnamed - 1) * sizeof o->named[0]);
            o->nnamed--;
        }
        straggler_rec_t *s = &o->named[o->nnamed++];
        s->rank = (int)i;
        s->node_rank = r->node_rank;
        s->generation = c->generation;
        s->ratio = r->ratio;
        s->step_time = means[i];
        s->median = median;
        s->step = r->step;
        s->time = msr_wall_time();
        if (c->config.outcome_reported)
            MSR_INFO("rank %d on node %d is %.1fx slower than the median over the last %d steps",
                     s->rank, s->node_rank, s->ratio, MSR_STRAGGLER_WINDOW);
        else
            MSR_WARN("rank %d on node %d is %.1fx slower than the median over the last %d steps",
                     s->rank, s->node_rank, s->ratio, MSR_STRAGGLER_WINDOW);
    }
    msr_free(end);
out:
    msr_free(means);
    msr_free(slow);
}

void msr_coord_progress(msr_coord_t *c, void *call, const Msr__ProgressRequest *req)
{
    msr_obs_t *o = &c->obs;
    o->progress_calls++;
    o->dropped += req->dropped;
    obs_generation(c);
    /* the sender's node rank: a node names itself; a worker that joined
     * directly is placed by its rank */
    const node_t *n = NULL;
    if (req->node_id && req->node_id[0]) {
        for (size_t i = 0; i < c->nnodes && n == NULL; i++)
            if (strcmp(c->nodes[i]->id, req->node_id) == 0)
                n = c->nodes[i];
        if (n)
            n = n->rank >= 0 ? n : NULL;
    }
    if (req->generation == c->generation) {
        for (size_t i = 0; i < req->n_steps; i++) {
            int node_rank = n                         ? n->rank
                            : c->local_worker_num > 0 ? req->steps[i]->rank / c->local_worker_num
                                                      : -1;
            apply_report(c, node_rank, req->steps[i]);
        }
        /* comparing is O(ranks): about 16 times per round of every node's
         * calls, not on each (every call of a job of up to 16 nodes) */
        size_t every = c->nnodes / 16 > 1 ? c->nnodes / 16 : 1;
        if (++o->since_check >= every) {
            o->since_check = 0;
            check_stragglers(c);
        }
    }
    /* the answer: this generation's stragglers */
    Msr__ProgressResponse resp = MSR__PROGRESS_RESPONSE__INIT;
    Msr__Straggler recs[MSR_STRAGGLERS_KEPT], *recp[MSR_STRAGGLERS_KEPT];
    size_t k = 0;
    for (size_t i = 0; i < o->nnamed; i++) {
        const straggler_rec_t *s = &o->named[i];
        if (s->generation != c->generation)
            continue;
        msr__straggler__init(&recs[k]);
        recs[k].rank = s->rank;
        recs[k].node_rank = s->node_rank;
        recs[k].ratio = s->ratio;
        recs[k].window = MSR_STRAGGLER_WINDOW;
        recs[k].step_time = s->step_time;
        recs[k].median = s->median;
        recs[k].step = s->step;
        recs[k].generation = s->generation;
        recp[k] = &recs[k];
        k++;
    }
    resp.n_stragglers = k;
    resp.stragglers = recp;
    msr_coord_io_reply(c, call, &resp.base);
}

/* ---- rendering ---- */

/* A label value in Prometheus' text format: \, " and newline escaped. */
static void prom_label(msr_buf_t *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            msr_buf_printf(b, "\\%c", *s);
        else if (*s == '\n')
            msr_buf_append(b, "\\n", 2);
        else
            msr_buf_append(b, s, 1);
    }
}

static void prom_head(msr_buf_t *b, const char *name, const char *type, const char *help)
{
    msr_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A double as Prometheus and JSON both read it (never inf or nan). */
static void num(msr_buf_t *b, double v)
{
    if (!isfinite(v))
        v = 0;
    msr_buf_printf(b, "%.9g", v);
}

static const char *const node_states[] = {"running",  "waiting", "stopping", "joining",
                                          "finished", "lost",    "left"};

/* The job: its state, generation, restarts, uptime, size. */
static void metrics_job(const msr_coord_t *c, msr_buf_t *b)
{
    const msr_obs_t *o = &c->obs;
    prom_head(b, "msrun_job_state", "gauge", "The job's state (1 for the current one).");
    for (int s = MSR_JOB_WAITING; s <= MSR_JOB_FAILED; s++)
        msr_buf_printf(b, "msrun_job_state{state=\"%s\"} %d\n", msr_job_state_name(s),
                       (int)c->state == s);
    prom_head(b, "msrun_generation", "gauge", "The current generation (restart round).");
    msr_buf_printf(b, "msrun_generation %d\n", c->generation);
    prom_head(b, "msrun_restarts_total", "counter", "Restarts of the job so far.");
    msr_buf_printf(b, "msrun_restarts_total %d\n", c->restart_count);
    prom_head(b, "msrun_max_restarts", "gauge", "Restarts the job may make in all.");
    msr_buf_printf(b, "msrun_max_restarts %d\n", c->max_restarts);
    prom_head(b, "msrun_uptime_seconds", "gauge", "Seconds since this coordinator started.");
    msr_buf_printf(b, "msrun_uptime_seconds ");
    num(b, msr_wall_time() - o->start);
    msr_buf_append(b, "\n", 1);
    prom_head(b, "msrun_world_size", "gauge", "Ranks of the job (as configured).");
    msr_buf_printf(b, "msrun_world_size %d\n", c->worker_num);
}

/* Nodes and ranks by state: a node's ranks are in its state. */
static void metrics_nodes(const msr_coord_t *c, msr_buf_t *b)
{
    int nodes[MSR_ARRAY_SIZE(node_states)] = {0}, ranks[MSR_ARRAY_SIZE(node_states)] = {0};
    for (size_t i = 0; i < c->nnodes; i++) {
        const char *st = msr_coord_node_state(c, c->nodes[i]);
        for (size_t k = 0; k < MSR_ARRAY_SIZE(node_states); k++) {
            if (strcmp(st, node_states[k]) == 0) {
                nodes[k]++;
                ranks[k] += c->nodes[i]->local_worker_num;
            }
        }
    }
    prom_head(b, "msrun_nodes", "gauge", "Nodes by state.");
    for (size_t k = 0; k < MSR_ARRAY_SIZE(node_states); k++)
        msr_buf_printf(b, "msrun_nodes{state=\"%s\"} %d\n", node_states[k], nodes[k]);
    prom_head(b, "msrun_ranks", "gauge", "Ranks by the state of their node.");
    for (size_t k = 0; k < MSR_ARRAY_SIZE(node_states); k++)
        msr_buf_printf(b, "msrun_ranks{state=\"%s\"} %d\n", node_states[k], ranks[k]);
}

/* Each rank's latest step, step times, straggling and scalars (the
 * current generation's ranks only). */
static void metrics_ranks(const msr_coord_t *c, msr_buf_t *b)
{
    const msr_obs_t *o = &c->obs;
    int current = o->generation == c->generation;
    static const struct {
        const char *name, *help;
    } per_rank[] = {
        {"msrun_rank_step", "The latest step a rank reported."},
        {"msrun_rank_step_seconds", "The time a rank's latest step took."},
        {"msrun_rank_step_seconds_mean", "A rank's mean step time over its last window of steps."},
        {"msrun_rank_step_ratio", "A rank's mean step time over the ranks' median (0: not "
                                  "compared yet)."},
        {"msrun_rank_straggler", "1 when the rank was named a straggler in this generation."},
        {"msrun_rank_reports_total", "Steps a rank reported in this generation."},
    };
    for (size_t m = 0; m < MSR_ARRAY_SIZE(per_rank); m++) {
        prom_head(b, per_rank[m].name, strstr(per_rank[m].name, "_total") ? "counter" : "gauge",
                  per_rank[m].help);
        for (size_t i = 0; current && i < o->nranks; i++) {
            const rank_obs_t *r = &o->ranks[i];
            if (!r->seen)
                continue;
            msr_buf_printf(b, "%s{rank=\"%zu\",node=\"%d\"} ", per_rank[m].name, i, r->node_rank);
            switch (m) {
            case 0:
                msr_buf_printf(b, "%lld", (long long)r->step);
                break;
            case 1:
                num(b, r->step_time);
                break;
            case 2:
                num(b, msr_step_window_mean(&r->window));
                break;
            case 3:
                num(b, r->ratio);
                break;
            case 4:
                msr_buf_printf(b, "%d", r->straggler);
                break;
            default:
                msr_buf_printf(b, "%llu", (unsigned long long)r->steps);
            }
            msr_buf_append(b, "\n", 1);
        }
    }
    prom_head(b, "msrun_rank_scalar", "gauge", "The latest value of each scalar a rank reported.");
    for (size_t i = 0; current && i < o->nranks; i++) {
        const rank_obs_t *r = &o->ranks[i];
        for (uint32_t k = 0; r->seen && k < r->nscalars; k++) {
            msr_buf_printf(b, "msrun_rank_scalar{rank=\"%zu\",node=\"%d\",name=\"", i,
                           r->node_rank);
            prom_label(b, r->scalars[k].name);
            msr_buf_append(b, "\"} ", 3);
            num(b, r->scalars[k].value);
            msr_buf_append(b, "\n", 1);
        }
    }
}

msr_status_t msr_coord_render_metrics(const msr_coord_t *c, msr_buf_t *b)
{
    const msr_obs_t *o = &c->obs;
    metrics_job(c, b);
    metrics_nodes(c, b);
    metrics_ranks(c, b);
    prom_head(b, "msrun_stragglers_total", "counter", "Stragglers named so far.");
    msr_buf_printf(b, "msrun_stragglers_total %llu\n", (unsigned long long)o->stragglers);
    prom_head(b, "msrun_progress_messages_total", "counter",
              "Progress calls the coordinator took (one per node and interval).");
    msr_buf_printf(b, "msrun_progress_messages_total %llu\n",
                   (unsigned long long)o->progress_calls);
    prom_head(b, "msrun_progress_steps_total", "counter",
              "Rank-steps those calls reported (each rank's steps, summed).");
    msr_buf_printf(b, "msrun_progress_steps_total %llu\n", (unsigned long long)o->step_reports);
    prom_head(b, "msrun_progress_dropped_total", "counter",
              "Reports the senders could not keep (bad names, no memory).");
    msr_buf_printf(b, "msrun_progress_dropped_total %llu\n", (unsigned long long)o->dropped);
    prom_head(b, "msrun_coordinator_calls_total", "counter",
              "Calls the coordinator took, by method.");
    for (int m = 0; m < MSR_RPC_METHOD_COUNT; m++)
        msr_buf_printf(b, "msrun_coordinator_calls_total{method=\"%s\"} %llu\n",
                       msr_rpc_methods[m].name, (unsigned long long)c->calls[m]);
    prom_head(b, "msrun_store_keys", "gauge", "Keys in the job's store.");
    msr_buf_printf(b, "msrun_store_keys %zu\n", msr_store_core_keys(c->store));
    return b->data == NULL && b->len == 0 ? MSR_ERR_NO_MEMORY : MSR_OK;
}

static void json_str(msr_buf_t *b, const char *s)
{
    msr_buf_json_string(b, s ? s : "", s ? strlen(s) : 0);
}

/* The root causes of the job's restarts (and of its end, if it failed),
 * oldest first. */
static void job_causes(const msr_coord_t *c, msr_buf_t *b)
{
    msr_buf_printf(b, ",\"restart_causes\":[");
    for (int i = 0; i < c->nhistory; i++) {
        const msr_failure_t *f = &c->history[i];
        char what[600];
        msr_failure_describe(f, what, sizeof what);
        msr_buf_printf(b, "%s{\"generation\":%d,\"cause\":", i ? "," : "", f->generation);
        json_str(b, what);
        msr_buf_printf(b, ",\"node\":%d,\"rank\":%d,\"host\":", f->node_rank, f->rank);
        json_str(b, f->host);
        msr_buf_printf(b, ",\"exit_code\":%d,\"signal\":%d,\"reason\":", f->exit_code, f->signal);
        json_str(b, f->reason);
        msr_buf_printf(b, ",\"time\":%.3f}", isfinite(f->time) ? f->time : 0);
    }
}

/* Rank i's object in /api/job: its step, times, scalars and (when shown)
 * its curve. */
static void job_rank(const msr_coord_t *c, msr_buf_t *b, size_t i, const char *sep, double now,
                     int current)
{
    const msr_obs_t *o = &c->obs;
    const rank_obs_t *r = &o->ranks[i];
    msr_buf_printf(b, "%s{\"rank\":%zu,\"node\":%d,\"step\":%lld,\"step_ms\":", sep, i,
                   r->node_rank, (long long)r->step);
    num(b, r->step_time * 1e3);
    msr_buf_printf(b, ",\"step_ms_mean\":");
    num(b, msr_step_window_mean(&r->window) * 1e3);
    msr_buf_printf(b, ",\"ratio\":");
    num(b, r->ratio);
    msr_buf_printf(b, ",\"report_age_s\":");
    num(b, now - r->time);
    msr_buf_printf(b, ",\"steps\":%llu,\"straggler\":%s,\"scalars\":{",
                   (unsigned long long)r->steps, r->straggler ? "true" : "false");
    for (uint32_t k = 0; k < r->nscalars; k++) {
        msr_buf_printf(b, "%s", k ? "," : "");
        json_str(b, r->scalars[k].name);
        msr_buf_append(b, ":", 1);
        num(b, r->scalars[k].value);
    }
    msr_buf_printf(b, "}");
    if (curve_shown(o, i, current)) { /* its curve: [step, step ms, loss] */
        const rank_hist_t *h = o->hist[i];
        msr_buf_printf(b, ",\"history\":[");
        for (int k = 0; k < h->n; k++) {
            msr_buf_printf(b, "%s[%lld,", k ? "," : "", (long long)h->step[k]);
            num(b, h->step_ms[k]);
            msr_buf_append(b, ",", 1);
            if (isfinite(h->loss[k]))
                num(b, h->loss[k]);
            else
                msr_buf_append(b, "null", 4);
            msr_buf_append(b, "]", 1);
        }
        msr_buf_append(b, "]", 1);
    }
    msr_buf_printf(b, "}");
}

msr_status_t msr_coord_render_job(const msr_coord_t *c, msr_buf_t *b)
{
    const msr_obs_t *o = &c->obs;
    double now = msr_wall_time();
    uint64_t mono = msr_now_ns();
    int current = o->generation == c->generation;
    /* the job, with the root causes of its restarts (and of its end, if it
     * failed), oldest first */
    msr_buf_printf(b, "{\"job\":{\"id\":");
    json_str(b, c->job_id);
    msr_buf_printf(b,
                   ",\"state\":\"%s\",\"generation\":%d,\"restarts\":%d,\"max_restarts\":%d,"
                   "\"world_size\":%d,\"uptime_s\":",
                   msr_job_state_name(c->state), c->generation, c->restart_count, c->max_restarts,
                   c->worker_num);
    num(b, now - o->start);
    msr_buf_printf(b, ",\"straggler_factor\":");
    num(b, c->config.straggler_factor > 0 ? c->config.straggler_factor : MSR_STRAGGLER_FACTOR);
    msr_buf_printf(b, ",\"straggler_window\":%d,\"start_step\":%lld,\"message\":",
                   MSR_STRAGGLER_WINDOW, current ? (long long)o->start_step : -1ll);
    json_str(b, c->message);
    job_causes(c, b);
    msr_buf_printf(b, "]},\"nodes\":[");
    for (size_t i = 0; i < c->nnodes; i++) {
        const node_t *n = c->nodes[i];
        msr_buf_printf(b, "%s{\"node\":%d,\"node_id\":", i ? "," : "", n->rank);
        json_str(b, n->id);
        msr_buf_printf(b, ",\"host\":");
        json_str(b, n->host);
        msr_buf_printf(b,
                       ",\"pid\":%d,\"local_worker_num\":%d,\"state\":\"%s\","
                       "\"heartbeat_age_s\":",
                       n->pid, n->local_worker_num, msr_coord_node_state(c, n));
        num(b, n->hb ? 0 : (double)(mono - n->last_seen) / 1e9);
        msr_buf_append(b, "}", 1);
    }
    msr_buf_printf(b, "],\"ranks\":[");
    int first = 1;
    for (size_t i = 0; current && i < o->nranks; i++) {
        if (!o->ranks[i].seen)
            continue;
        job_rank(c, b, i, first ? "" : ",", now, current);
        first = 0;
    }
    msr_buf_printf(b, "],\"stragglers\":[");
    first = 1;
    for (size_t i = 0; i < o->nnamed; i++) {
        const straggler_rec_t *s = &o->named[i];
        if (s->generation != c->generation)
            continue;
        msr_buf_printf(b, "%s{\"rank\":%d,\"node\":%d,\"generation\":%d,\"step\":%lld,\"factor\":",
                       first ? "" : ",", s->rank, s->node_rank, s->generation, (long long)s->step);
        first = 0;
        num(b, s->ratio);
        msr_buf_printf(b, ",\"step_ms\":");
        num(b, s->step_time * 1e3);
        msr_buf_printf(b, ",\"median_ms\":");
        num(b, s->median * 1e3);
        msr_buf_printf(b, ",\"window\":%d,\"time\":%.3f}", MSR_STRAGGLER_WINDOW, s->time);
    }
    msr_buf_printf(b, "],\"progress\":{\"messages\":%llu,\"steps\":%llu}}\n",
                   (unsigned long long)o->progress_calls, (unsigned long long)o->step_reports);
    return MSR_OK;
}
