/* The planner's search (plan.h): every layout of a world, ranked by step
 * time. This file evaluates one layout (checks it, splits its layers with
 * plan_split.c, sizes and times it, keeps it when it fits) and holds the
 * entry that checks the query and sorts the plans; plan_enum.c walks the
 * layouts. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan.h"
#include "planner/plan_search_impl.h"

const char *const msr_plan_fix_names[MSR_PLAN_FIX_N] = {
    "dp", "tp", "pp", "sp", "zero", "recompute", "micro_batch", "schedule", "virtual_stages",
    "cp", "ep"};
const char *const msr_plan_schedule_names[3] = {"gpipe", "1f1b", "interleaved"};
const char *const msr_plan_recompute_names[3] = {"none", "selective", "full"};

/* ---- evaluating a layout ---- */

static void describe(const msr_plan_layout_t *l, char *buf, size_t len)
{
    const char *sched =
        l->schedule >= 0 && l->schedule <= 2 ? msr_plan_schedule_names[l->schedule] : "?";
    const char *rc =
        l->recompute >= 0 && l->recompute <= 2 ? msr_plan_recompute_names[l->recompute] : "?";
    snprintf(buf, len,
             "dp=%d tp=%d pp=%d cp=%d ep=%d sp=%d zero=%d recompute=%s micro_batch=%d "
             "schedule=%s virtual_stages=%d",
             l->dp, l->tp, l->pp, msr_plan_cp(l), msr_plan_ep(l), l->sp, l->zero, rc,
             l->micro_batch, sched, l->chunks);
}

/* "layout: reason" into out, cut to fit */
static void join(char *out, size_t len, const char *a, const char *b)
{
    size_t at = 0;
    const char *parts[] = {a, ": ", b};
    for (size_t i = 0; i < 3; i++) {
        size_t k = strlen(parts[i]);
        if (k > len - 1 - at)
            k = len - 1 - at;
        memcpy(out + at, parts[i], k);
        at += k;
    }
    out[at] = '\0';
}

void msr_plan_search_note_invalid(msr_plan_search_state_t *s, const msr_plan_layout_t *l,
                                  const char *why)
{
    if (s->pr.invalid++ == 0) {
        char d[200];
        describe(l, d, sizeof d);
        join(s->pr.first_invalid, sizeof s->pr.first_invalid, d, why);
    }
}

/* a before b: less step time, then less memory, then the layout's numbers */
static int plan_cmp(const msr_plan_t *a, const msr_plan_t *b)
{
    if (a->t.step_ms != b->t.step_ms)
        return a->t.step_ms < b->t.step_ms ? -1 : 1;
    if (a->peak != b->peak)
        return a->peak < b->peak ? -1 : 1;
    const int x[] = {
        a->l.dp,           a->l.tp,          a->l.pp,       a->l.sp,     a->l.zero,
        a->l.recompute,    a->l.micro_batch, a->l.schedule, a->l.chunks, msr_plan_cp(&a->l),
        msr_plan_ep(&a->l)};
    const int y[] = {
        b->l.dp,           b->l.tp,          b->l.pp,       b->l.sp,     b->l.zero,
        b->l.recompute,    b->l.micro_batch, b->l.schedule, b->l.chunks, msr_plan_cp(&b->l),
        msr_plan_ep(&b->l)};
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

static int grow(msr_plan_search_state_t *s)
{
    if (s->n < s->cap)
        return 0;
    int64_t cap = s->cap ? 2 * s->cap : 64;
    if (s->keep > 0 && cap > s->keep)
        cap = s->keep;
    msr_plan_t *p = realloc(s->plans, (size_t)cap * sizeof *p);
    if (p == NULL) {
        s->oom = 1;
        return -1;
    }
    s->plans = p;
    s->cap = cap;
    return 0;
}

/* Keeps the candidate: all of them, or the best keep in order. */
static void keep_plan(msr_plan_search_state_t *s, const msr_plan_t *p)
{
    s->pr.found++;
    if (s->keep <= 0) {
        if (grow(s) == 0)
            s->plans[s->n++] = *p;
        return;
    }
    if (s->n == s->keep && plan_cmp(p, &s->plans[s->n - 1]) >= 0)
        return;
    if (s->n < s->keep && grow(s) != 0)
        return;
    int64_t i = s->n < s->keep ? s->n++ : s->keep - 1;
    while (i > 0 && plan_cmp(p, &s->plans[i - 1]) < 0) {
        s->plans[i] = s->plans[i - 1];
        i--;
    }
    s->plans[i] = *p;
}

/* The balanced split for the layout (in the cache); 0 when it is the
 * even one. */
static int balanced_split(msr_plan_search_state_t *s, const msr_plan_layout_t *l,
                          msr_plan_time_t *even_t)
{
    msr_plan_time_t t;
    msr_plan_time(s->m, l, s->prec, s->c, &t);
    *even_t = t;
    msr_plan_stage_cost_t sc;
    msr_plan_costs_of(l, &t, &sc);
    msr_plan_split_cache_t *k = &s->cache;
    if (k->valid && k->cost.n == sc.n && k->cost.min == sc.min && k->cost.layer_ms == sc.layer_ms &&
        k->cost.first_ms == sc.first_ms && k->cost.last_ms == sc.last_ms)
        return k->uneven;
    k->valid = 0;
    int v = msr_plan_chunks_of(l), n = l->pp * v;
    if (msr_plan_balance(&sc, s->m->layers, v, k->split) != 0) {
        s->oom = 1;
        return 0;
    }
    int even[MSR_PLAN_MAX_STAGES];
    msr_plan_even_split(s->m->layers, n, even);
    k->uneven = memcmp(even, k->split, (size_t)n * sizeof *even) != 0;
    k->cost = sc;
    k->valid = 1;
    return k->uneven;
}

/* Checks, splits, sizes and times one layout; keeps it when it fits. */
int msr_plan_search_evaluate(msr_plan_search_state_t *s, const msr_plan_layout_t *lin)
{
    msr_plan_t *p = &s->cand;
    char why[256];
    p->l = *lin;
    p->l.stage_layers = NULL;
    int n = p->l.pp * msr_plan_chunks_of(&p->l);
    if (s->q->split_n > 0) {
        /* a split given: only layouts of its many virtual stages */
        if (n != s->q->split_n || n > MSR_PLAN_MAX_STAGES) {
            snprintf(why, sizeof why,
                     "--pp-layers has %d entries, pp %d x %d virtual stages are %d", s->q->split_n,
                     p->l.pp, msr_plan_chunks_of(&p->l), n);
            msr_plan_search_note_invalid(s, &p->l, why);
            return MSR_PLAN_EV_INVALID;
        }
        memcpy(p->split, s->q->split, (size_t)n * sizeof *p->split);
        p->l.stage_layers = p->split;
    }
    if (msr_plan_check(s->m, &p->l, why, sizeof why) != 0) {
        msr_plan_search_note_invalid(s, &p->l, why);
        return MSR_PLAN_EV_INVALID;
    }
    /* the even split's times where balanced_split priced them: the plan
     * keeps them when it keeps that split (most do), not pricing it twice */
    msr_plan_time_t even_t;
    int have_even = 0;
    if (s->q->split_n == 0 && n <= MSR_PLAN_MAX_STAGES) {
        msr_plan_even_split(s->m->layers, n, p->split);
        if (!s->q->even_split && n > 1) {
            have_even = 1;
            if (balanced_split(s, &p->l, &even_t)) {
                memcpy(p->split, s->cache.split, (size_t)n * sizeof *p->split);
                p->l.stage_layers = p->split;
            }
        }
    }
    int r = 0;
    uint64_t peak = msr_plan_peak(s->m, &p->l, s->prec, &r);
    if ((double)peak > s->budget && p->l.stage_layers != NULL && s->q->split_n == 0) {
        /* the balanced split moves layers onto the middle stages: the even
         * one may fit where it does not */
        p->l.stage_layers = NULL;
        msr_plan_even_split(s->m->layers, n, p->split);
        peak = msr_plan_peak(s->m, &p->l, s->prec, &r);
    }
    if ((double)peak > s->budget) {
        if (s->pr.over_memory++ == 0) {
            char d[200], over[128];
            describe(&p->l, d, sizeof d);
            snprintf(over, sizeof over, "rank %d holds %.4g GiB, over the budget of %.4g GiB", r,
                     (double)peak / 1073741824.0, s->budget / 1073741824.0);
            join(s->pr.first_over, sizeof s->pr.first_over, d, over);
        }
        return MSR_PLAN_EV_OVER;
    }
    p->peak = peak;
    msr_plan_rank(s->m, &p->l, s->prec, r, &p->at);
    if (have_even && p->l.stage_layers == NULL)
        p->t = even_t;
    else
        msr_plan_time(s->m, &p->l, s->prec, s->c, &p->t);
    keep_plan(s, p);
    return MSR_PLAN_EV_OK;
}

/* ---- the entry ---- */

static int plan_qsort_cmp(const void *a, const void *b)
{
    return plan_cmp(a, b);
}

#define FAIL(...)                                \
    do {                                         \
        if (why != NULL)                         \
            snprintf(why, why_len, __VA_ARGS__); \
        return -1;                               \
    } while (0)

int64_t msr_plan_search(const msr_plan_model_t *m, msr_plan_precision_t prec,
                        const msr_plan_cluster_t *c, const msr_plan_query_t *q, int64_t keep,
                        msr_plan_t **plans_p, msr_plan_pruned_t *pruned, char *why, size_t why_len)
{
    if (msr_plan_check_model(m, why, why_len) != 0)
        return -1;
    if (q->world < 1 || q->world > INT_MAX)
        FAIL("a world of %lld ranks: 1 to %d", (long long)q->world, INT_MAX);
    if (q->global_batch < 1 || q->global_batch > INT_MAX)
        FAIL("a global batch of %lld sequences: 1 to %d", (long long)q->global_batch, INT_MAX);
    if (q->search != MSR_PLAN_SEARCH_EXHAUSTIVE && q->search != MSR_PLAN_SEARCH_FAST)
        FAIL("search mode %d: exhaustive (0) or fast (1)", q->search);
    if (!(c->mem_gib > 0))
        FAIL("a memory budget of %g GiB per rank: must be positive", c->mem_gib);
    for (int k = 0; k < MSR_PLAN_FIX_N; k++) {
        int v = q->fix[k], hi = k == MSR_PLAN_FIX_SP          ? 1
                                : k == MSR_PLAN_FIX_ZERO      ? 3
                                : k == MSR_PLAN_FIX_RECOMPUTE ? 2
                                : k == MSR_PLAN_FIX_SCHEDULE  ? 2
                                                              : INT_MAX;
        int lo = k == MSR_PLAN_FIX_SP || k == MSR_PLAN_FIX_ZERO || k == MSR_PLAN_FIX_RECOMPUTE ||
                         k == MSR_PLAN_FIX_SCHEDULE
                     ? 0
                     : 1;
        if (v != -1 && (v < lo || v > hi))
            FAIL("%s=%d: not in %d..%d", msr_plan_fix_names[k], v, lo, hi);
    }
    msr_plan_search_state_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        FAIL("out of memory for the search");
    s->m = m;
    s->prec = prec;
    s->c = c;
    s->q = q;
    s->budget = c->mem_gib * 1073741824.0;
    s->keep = keep > 0 ? keep : 0;
    if (msr_plan_search_run(s) != 0 || s->oom) {
        snprintf(why, why_len, "out of memory after %lld plans", (long long)s->n);
        free(s->plans);
        free(s);
        return -1;
    }
    if (s->keep == 0 && s->n > 1)
        qsort(s->plans, (size_t)s->n, sizeof *s->plans, plan_qsort_cmp);
    /* the plans moved: each layout's split points into its own plan */
    for (int64_t i = 0; i < s->n; i++)
        if (s->plans[i].l.stage_layers != NULL)
            s->plans[i].l.stage_layers = s->plans[i].split;
    int64_t n = s->n;
    *plans_p = s->plans;
    if (pruned != NULL)
        *pruned = s->pr;
    free(s);
    return n;
}
#undef FAIL
