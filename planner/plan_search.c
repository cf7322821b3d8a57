/* The planner's search (plan.h): every layout of a world, ranked by step time. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan.h"

const char *const msr_plan_fix_names[MSR_PLAN_FIX_N] = {
    "dp", "tp", "pp", "sp", "zero", "recompute", "micro_batch", "schedule", "virtual_stages",
    "cp", "ep"};
const char *const msr_plan_schedule_names[3] = {"gpipe", "1f1b", "interleaved"};
const char *const msr_plan_recompute_names[3] = {"none", "selective", "full"};

/* ---- the split of layers into virtual stages ---- */

/* The runtime's even split (model/gpt.h): stage j holds [L j / n, L (j+1) / n). */
static void even_split(int layers, int n, int *split)
{
    for (int j = 0; j < n; j++)
        split[j] = (int)((int64_t)layers * (j + 1) / n - (int64_t)layers * j / n);
}

/* What a pipeline rank costs per micro-batch: its blocks, and the
 * embedding (rank 0) or the head (rank pp - 1). The time model runs a
 * rank's virtual stages one after another (plan_time.c), so the slowest
 * rank, the sum of its stages, decides; with one stage per rank that is
 * the slowest stage. */
typedef struct stage_cost {
    double layer_ms, first_ms, last_ms;
    int n;   /* ranks of the pipeline (pp) */
    int min; /* layers a rank holds at least: one per virtual stage */
} stage_cost_t;

static double stage_ms(const stage_cost_t *c, int j, int k)
{
    return k * c->layer_ms + (j == 0 ? c->first_ms : 0) + (j == c->n - 1 ? c->last_ms : 0);
}

static double max_d(double a, double b)
{
    return a > b ? a : b;
}

/* The slowest rank of a split of the ranks' layers. */
static double split_bottleneck(const stage_cost_t *c, const int *per_rank)
{
    double worst = 0;
    for (int j = 0; j < c->n; j++)
        worst = max_d(worst, stage_ms(c, j, per_rank[j]));
    return worst;
}

/* Minimises the slowest of n contiguous groups of L layers, each of at
 * least min: f[j][i], the least bottleneck of i layers in groups 0..j, is
 * the least over k of max(f[j-1][i-k], cost(j, k)). f[j-1] never decreases
 * in i and cost(j, k) grows with k, so the best k is where the two cross
 * and moves right as i grows: a pointer finds it, O(n L) in all. The
 * choices are kept to walk the split back. Returns the bottleneck, or -1
 * when memory runs out. */
static double split_dp(const stage_cost_t *c, int L, int *per_rank)
{
    int n = c->n, lo = c->min;
    if (n == 1) {
        per_rank[0] = L;
        return stage_ms(c, 0, L);
    }
    size_t row = (size_t)L + 1;
    double *prev = malloc(row * sizeof *prev);
    double *cur = malloc(row * sizeof *cur);
    int *choice = malloc((size_t)n * row * sizeof *choice);
    double best = -1;
    if (prev == NULL || cur == NULL || choice == NULL)
        goto out;
    /* group 0 alone: i layers, i >= lo */
    for (int i = lo; i <= L - (n - 1) * lo; i++) {
        prev[i] = stage_ms(c, 0, i);
        choice[i] = i;
    }
    for (int j = 1; j < n; j++) {
        /* groups 0..j hold i layers, the earlier ones at least j lo of them */
        int k = lo;
        for (int i = (j + 1) * lo; i <= L - (n - 1 - j) * lo; i++) {
            while (k + 1 <= i - j * lo && max_d(prev[i - k - 1], stage_ms(c, j, k + 1)) <=
                                              max_d(prev[i - k], stage_ms(c, j, k)))
                k++;
            cur[i] = max_d(prev[i - k], stage_ms(c, j, k));
            choice[(size_t)j * row + (size_t)i] = k;
        }
        double *t = prev;
        prev = cur;
        cur = t;
    }
    best = prev[L];
    for (int j = n - 1, i = L; j >= 0; j--) {
        int k = choice[(size_t)j * row + (size_t)i];
        per_rank[j] = k;
        i -= k;
    }
out:
    free(prev);
    free(cur);
    free(choice);
    return best;
}

/* The layers of each pipeline rank's virtual stages, summed. */
static void rank_sums(const int *split, int pp, int v, int *per_rank)
{
    for (int r = 0; r < pp; r++) {
        per_rank[r] = 0;
        for (int k = 0; k < v; k++)
            per_rank[r] += split[k * pp + r];
    }
}

/* The balanced split of L layers into the pp * v virtual stages, into
 * split: the ranks' layers by split_dp, each rank's spread evenly over its
 * stages. The runtime's even split is kept when it is as good (no uneven
 * split for nothing). Returns 0, or -1 when memory runs out. */
static int balance(const stage_cost_t *c, int L, int v, int *split)
{
    int per_rank[MSR_PLAN_MAX_STAGES], even[MSR_PLAN_MAX_STAGES], pp = c->n;
    double best = split_dp(c, L, per_rank);
    if (best < 0)
        return -1;
    for (int r = 0; r < pp; r++)
        for (int k = 0; k < v; k++)
            split[k * pp + r] =
                (int)((int64_t)per_rank[r] * (k + 1) / v - (int64_t)per_rank[r] * k / v);
    even_split(L, pp * v, even);
    rank_sums(even, pp, v, per_rank);
    /* ties within rounding: the even split's bottleneck sums the same terms */
    if (split_bottleneck(c, per_rank) <= best * (1 + 1e-12))
        memcpy(split, even, (size_t)(pp * v) * sizeof *split);
    return 0;
}

static void costs_of(const msr_plan_layout_t *l, const msr_plan_time_t *t, stage_cost_t *c)
{
    c->layer_ms = t->layer_ms > 0 ? t->layer_ms : 0;
    c->first_ms = t->first_ms > 0 ? t->first_ms : 0;
    c->last_ms = t->last_ms > 0 ? t->last_ms : 0;
    c->n = l->pp;
    c->min = l->schedule == MSR_PLAN_INTERLEAVED ? l->chunks : 1;
}

static int chunks_of(const msr_plan_layout_t *l)
{
    return l->schedule == MSR_PLAN_INTERLEAVED ? l->chunks : 1;
}

int msr_plan_split_layers(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                          msr_plan_precision_t prec, const msr_plan_cluster_t *c, int *split)
{
    int64_t n = (int64_t)l->pp * chunks_of(l);
    if (l->pp < 1 || n > m->layers || n > MSR_PLAN_MAX_STAGES)
        return -1;
    msr_plan_layout_t even = *l;
    even.stage_layers = NULL;
    msr_plan_time_t t;
    msr_plan_time(m, &even, prec, c, &t);
    stage_cost_t sc;
    costs_of(l, &t, &sc);
    return balance(&sc, m->layers, chunks_of(l), split);
}

/* ---- the search ---- */

/* The last split computed, for the next layout with the same costs (the
 * search's inner loops change only what the split does not depend on). */
typedef struct split_cache {
    stage_cost_t cost;
    int valid, uneven;
    int split[MSR_PLAN_MAX_STAGES];
} split_cache_t;

typedef struct search {
    const msr_plan_model_t *m;
    msr_plan_precision_t prec;
    const msr_plan_cluster_t *c;
    const msr_plan_query_t *q;
    double budget; /* bytes */
    int64_t keep;
    msr_plan_t *plans; /* best first when keep > 0, else in the order found */
    int64_t n, cap;
    msr_plan_pruned_t pr;
    int oom;
    split_cache_t cache;
    msr_plan_t cand;
} search_t;

enum { EV_OK, EV_INVALID, EV_OVER };

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

static void note_invalid(search_t *s, const msr_plan_layout_t *l, const char *why)
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

static int plan_qsort_cmp(const void *a, const void *b)
{
    return plan_cmp(a, b);
}

static int grow(search_t *s)
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
static void keep_plan(search_t *s, const msr_plan_t *p)
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
static int balanced_split(search_t *s, const msr_plan_layout_t *l, msr_plan_time_t *even_t)
{
    msr_plan_time_t t;
    msr_plan_time(s->m, l, s->prec, s->c, &t);
    *even_t = t;
    stage_cost_t sc;
    costs_of(l, &t, &sc);
    split_cache_t *k = &s->cache;
    if (k->valid && k->cost.n == sc.n && k->cost.min == sc.min && k->cost.layer_ms == sc.layer_ms &&
        k->cost.first_ms == sc.first_ms && k->cost.last_ms == sc.last_ms)
        return k->uneven;
    k->valid = 0;
    int v = chunks_of(l), n = l->pp * v;
    if (balance(&sc, s->m->layers, v, k->split) != 0) {
        s->oom = 1;
        return 0;
    }
    int even[MSR_PLAN_MAX_STAGES];
    even_split(s->m->layers, n, even);
    k->uneven = memcmp(even, k->split, (size_t)n * sizeof *even) != 0;
    k->cost = sc;
    k->valid = 1;
    return k->uneven;
}

/* Checks, splits, sizes and times one layout; keeps it when it fits. */
static int evaluate(search_t *s, const msr_plan_layout_t *lin)
{
    msr_plan_t *p = &s->cand;
    char why[256];
    p->l = *lin;
    p->l.stage_layers = NULL;
    int n = p->l.pp * chunks_of(&p->l);
    if (s->q->split_n > 0) {
        /* a split given: only layouts of its many virtual stages */
        if (n != s->q->split_n || n > MSR_PLAN_MAX_STAGES) {
            snprintf(why, sizeof why,
                     "--pp-layers has %d entries, pp %d x %d virtual stages are %d", s->q->split_n,
                     p->l.pp, chunks_of(&p->l), n);
            note_invalid(s, &p->l, why);
            return EV_INVALID;
        }
        memcpy(p->split, s->q->split, (size_t)n * sizeof *p->split);
        p->l.stage_layers = p->split;
    }
    if (msr_plan_check(s->m, &p->l, why, sizeof why) != 0) {
        note_invalid(s, &p->l, why);
        return EV_INVALID;
    }
    /* the even split's times where balanced_split priced them: the plan
     * keeps them when it keeps that split (most do), not pricing it twice */
    msr_plan_time_t even_t;
    int have_even = 0;
    if (s->q->split_n == 0 && n <= MSR_PLAN_MAX_STAGES) {
        even_split(s->m->layers, n, p->split);
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
        even_split(s->m->layers, n, p->split);
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
        return EV_OVER;
    }
    p->peak = peak;
    msr_plan_rank(s->m, &p->l, s->prec, r, &p->at);
    if (have_even && p->l.stage_layers == NULL)
        p->t = even_t;
    else
        msr_plan_time(s->m, &p->l, s->prec, s->c, &p->t);
    keep_plan(s, p);
    return EV_OK;
}

/* ---- what to enumerate ---- */

#define MAXV 2048 /* values one dimension may take: no int has more divisors (1,600 at most) */

typedef struct values {
    int n;
    int v[MAXV];
} values_t;

static void add_value(values_t *vs, int64_t v)
{
    if (vs->n < MAXV && v <= INT_MAX)
        vs->v[vs->n++] = (int)v;
}

static int is_pow2(int64_t x)
{
    return x > 0 && (x & (x - 1)) == 0;
}

/* The divisors of x in increasing order (powers of two only when pow2),
 * or the fixed value alone. */
static void divisors(int64_t x, int fixed, int pow2, values_t *out)
{
    out->n = 0;
    if (fixed >= 0) {
        add_value(out, fixed);
        return;
    }
    int64_t hi[MAXV];
    int nh = 0;
    for (int64_t d = 1; d * d <= x; d++) {
        if (x % d != 0)
            continue;
        if (!pow2 || is_pow2(d))
            add_value(out, d);
        if (d * d != x && (!pow2 || is_pow2(x / d)) && nh < MAXV)
            hi[nh++] = x / d;
    }
    while (nh > 0)
        add_value(out, hi[--nh]);
}

static void one_or_fixed(int fixed, int v, values_t *out)
{
    out->n = 0;
    add_value(out, fixed >= 0 ? fixed : v);
}

/* The schedules and virtual stages for pp stages, as (schedule, chunks). */
typedef struct sched_choice {
    int n;
    int sched[MAXV], chunks[MAXV];
} sched_choice_t;

static void schedules(const search_t *s, int pp, sched_choice_t *out)
{
    const int *fx = s->q->fix;
    int fast = s->q->search == MSR_PLAN_SEARCH_FAST;
    out->n = 0;
    for (int sc = 0; sc < 3; sc++) {
        if (fx[MSR_PLAN_FIX_SCHEDULE] >= 0 && fx[MSR_PLAN_FIX_SCHEDULE] != sc)
            continue;
        if (fx[MSR_PLAN_FIX_SCHEDULE] < 0) {
            /* one stage has no schedule to choose; fast leaves out GPipe,
             * 1F1B's equal with more memory held */
            if (pp == 1 && sc != MSR_PLAN_1F1B)
                continue;
            if (fast && sc == MSR_PLAN_GPIPE)
                continue;
        }
        int vfix = fx[MSR_PLAN_FIX_VIRTUAL_STAGES];
        if (sc != MSR_PLAN_INTERLEAVED || vfix >= 0) {
            if (out->n < MAXV) {
                out->sched[out->n] = sc;
                out->chunks[out->n++] = vfix >= 0 ? vfix : 1;
            }
            continue;
        }
        /* interleaved: 2 to 8 virtual stages (fast: 2, 4, 8), a layer each */
        for (int v = 2; v <= 8 && out->n < MAXV; v++) {
            if ((fast && !is_pow2(v)) || (int64_t)pp * v > s->m->layers)
                continue;
            out->sched[out->n] = sc;
            out->chunks[out->n++] = v;
        }
    }
}

/* One (dp, tp, pp, sp, schedule, chunks, micro_batch): every recompute and
 * ZeRO stage (exhaustive), or the least recompute that fits with each
 * ZeRO stage (fast: recompute only adds time). Returns 1 when nothing was
 * under the budget and something was over it (a larger micro-batch fits
 * no better). */
static int group_ep(search_t *s, msr_plan_layout_t l);

/* Every expert-parallel degree for the layout's dp (a MoE model's: the
 * divisors of dp that divide the experts; the fast search: powers of two),
 * each through group_ep. */
static int group(search_t *s, msr_plan_layout_t l)
{
    const int *fx = s->q->fix;
    values_t eps;
    if (s->m->experts == 0) {
        one_or_fixed(fx[MSR_PLAN_FIX_EP], 1, &eps);
    } else
        divisors(l.dp, fx[MSR_PLAN_FIX_EP], s->q->search == MSR_PLAN_SEARCH_FAST, &eps);
    int none_fit = 1;
    for (int i = 0; i < eps.n; i++) {
        if (s->m->experts > 0 && fx[MSR_PLAN_FIX_EP] < 0 && s->m->experts % eps.v[i] != 0)
            continue;
        l.ep = eps.v[i];
        none_fit &= group_ep(s, l);
        if (s->oom)
            return 0;
    }
    return none_fit;
}

static int group_ep(search_t *s, msr_plan_layout_t l)
{
    const int *fx = s->q->fix;
    int fast = s->q->search == MSR_PLAN_SEARCH_FAST;
    int ok = 0, over = 0;
    int zmax = l.tp == 1 && l.pp == 1 && msr_plan_cp(&l) == 1 ? 3 : 2;
    for (int rc = 0; rc < 3; rc++) {
        if (fx[MSR_PLAN_FIX_RECOMPUTE] >= 0 && fx[MSR_PLAN_FIX_RECOMPUTE] != rc)
            continue;
        int fit = 0;
        for (int z = 0; z <= (fx[MSR_PLAN_FIX_ZERO] >= 0 ? fx[MSR_PLAN_FIX_ZERO] : zmax); z++) {
            if (fx[MSR_PLAN_FIX_ZERO] >= 0 && fx[MSR_PLAN_FIX_ZERO] != z)
                continue;
            l.recompute = rc;
            l.zero = z;
            int e = evaluate(s, &l);
            fit |= e == EV_OK;
            over |= e == EV_OVER;
            if (s->oom)
                return 0;
        }
        ok |= fit;
        if (fast && fit)
            break;
    }
    return !ok && over;
}

/* Positions a chunk of the ring holds at least in the fast search: a ring
 * step must compute long enough to hide its K/V block's transfer, which
 * with the default cluster inside a node takes chunks of about a thousand
 * positions (docs/plan.md "Search"). */
#define FAST_CP_CHUNK 1024

/* The exhaustive search's cp beyond chunks of FAST_CP_CHUNK: up to this
 * many ranks a ring (each cp value multiplies the space; 1 to 4 keep a
 * search of 1,024 ranks within its goal). */
#define EXHAUSTIVE_CP_MAX 4

/* The context-parallel degrees for rest = world / (tp pp) ranks: divisors
 * of rest whose 2 cp chunks divide the sequence and hold FAST_CP_CHUNK
 * positions or more (the exhaustive search: or cp up to
 * EXHAUSTIVE_CP_MAX; the fast one: powers of two only), or the fixed value
 * alone. */
static void cp_choices(const search_t *s, int64_t rest, values_t *out)
{
    int fixed = s->q->fix[MSR_PLAN_FIX_CP];
    int fast = s->q->search == MSR_PLAN_SEARCH_FAST;
    divisors(rest, fixed, fast, out);
    if (fixed >= 0)
        return;
    int n = 0;
    for (int i = 0; i < out->n; i++) {
        int64_t cp = out->v[i], two = 2 * cp;
        int long_chunks = s->m->seq / two >= FAST_CP_CHUNK;
        if (cp == 1 ||
            (s->m->seq % two == 0 && (long_chunks || (!fast && cp <= EXHAUSTIVE_CP_MAX))))
            out->v[n++] = out->v[i];
    }
    out->n = n;
}

/* One (tp, pp, cp): every dp-compatible sp, schedule and micro-batch. */
static int search_mesh(search_t *s, int tp, int pp, int cp)
{
    const msr_plan_query_t *q = s->q;
    const int *fx = q->fix;
    int fast = q->search == MSR_PLAN_SEARCH_FAST;
    int64_t W = q->world, B = q->global_batch;
    values_t mbs, sps;
    int64_t dp = W / tp / pp / cp;
    if (fx[MSR_PLAN_FIX_DP] >= 0 && fx[MSR_PLAN_FIX_DP] != dp)
        return 0;
    if (B % dp != 0) {
        if (fx[MSR_PLAN_FIX_DP] >= 0) {
            msr_plan_layout_t l = {(int)dp, tp, pp, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, NULL, cp};
            char why[128];
            snprintf(why, sizeof why, "a global batch of %lld does not divide among dp %lld",
                     (long long)B, (long long)dp);
            note_invalid(s, &l, why);
        }
        return 0;
    }
    int64_t per = B / dp;
    sched_choice_t sch;
    schedules(s, pp, &sch);
    if (fx[MSR_PLAN_FIX_SP] >= 0)
        one_or_fixed(fx[MSR_PLAN_FIX_SP], 0, &sps);
    else if (tp > 1 && (int64_t)s->m->seq / cp % tp == 0) {
        sps.n = 0;
        add_value(&sps, 0);
        add_value(&sps, 1);
    } else
        one_or_fixed(-1, 0, &sps);
    divisors(per, fx[MSR_PLAN_FIX_MICRO_BATCH], fast, &mbs);
    for (int c = 0; c < sch.n; c++) {
        for (int d = 0; d < sps.n; d++) {
            for (int e = 0; e < mbs.n; e++) {
                int mb = mbs.v[e];
                if (mb < 1 || per % mb != 0) {
                    msr_plan_layout_t l = {(int)dp, tp, pp, 0, 0, 0,    mb, 1,
                                           1,       1,  0,  0, 0, NULL, cp};
                    char why[160];
                    snprintf(why, sizeof why,
                             "%lld sequences per dp rank do not divide into "
                             "micro-batches of %d",
                             (long long)per, mb);
                    note_invalid(s, &l, why);
                    continue;
                }
                msr_plan_layout_t l = {(int)dp,
                                       tp,
                                       pp,
                                       sps.v[d],
                                       0,
                                       0,
                                       mb,
                                       (int)(per / mb),
                                       sch.sched[c],
                                       sch.chunks[c],
                                       q->bucket_bytes,
                                       0,
                                       q->zero_min_bytes,
                                       NULL,
                                       cp};
                int none_fit = group(s, l);
                if (s->oom)
                    return -1;
                /* more sequences per micro-batch only hold more */
                if (fast && none_fit)
                    break;
            }
        }
    }
    return 0;
}

static int64_t search_run(search_t *s)
{
    const msr_plan_query_t *q = s->q;
    const int *fx = q->fix;
    int fast = q->search == MSR_PLAN_SEARCH_FAST;
    int64_t W = q->world;
    values_t tps, pps, cps;
    divisors(W, fx[MSR_PLAN_FIX_TP], fast, &tps);
    for (int a = 0; a < tps.n; a++) {
        int tp = tps.v[a];
        if (W % tp != 0)
            continue;
        /* any pipeline size: worlds of 2520 ranks need pp = 35 */
        divisors(W / tp, fx[MSR_PLAN_FIX_PP], 0, &pps);
        for (int b = 0; b < pps.n; b++) {
            int pp = pps.v[b];
            if ((W / tp) % pp != 0 || (fast && pp > s->m->layers && fx[MSR_PLAN_FIX_PP] < 0))
                continue;
            cp_choices(s, W / tp / pp, &cps);
            for (int k = 0; k < cps.n; k++) {
                int cp = cps.v[k];
                if (cp < 1 || (W / tp / pp) % cp != 0)
                    continue;
                if (search_mesh(s, tp, pp, cp) != 0)
                    return -1;
            }
        }
    }
    return 0;
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
    search_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        FAIL("out of memory for the search");
    s->m = m;
    s->prec = prec;
    s->c = c;
    s->q = q;
    s->budget = c->mem_gib * 1073741824.0;
    s->keep = keep > 0 ? keep : 0;
    if (search_run(s) != 0 || s->oom) {
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
