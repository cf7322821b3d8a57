/* What the search enumerates (docs/plan.md "Search"): the divisors of the
 * world for tp, pp, cp and dp, the schedules and virtual stages, sequence
 * parallel, the micro-batches, the expert-parallel degrees, recompute and
 * ZeRO, each layout handed to the search's evaluation (plan_search.c);
 * the fast search's pruning of the space. */
#include <limits.h>
#include <stdio.h>

#include "planner/plan.h"
#include "planner/plan_search_impl.h"

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

static void schedules(const msr_plan_search_state_t *s, int pp, sched_choice_t *out)
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
static int group_ep(msr_plan_search_state_t *s, msr_plan_layout_t l);

/* Every expert-parallel degree for the layout's dp (a MoE model's: the
 * divisors of dp that divide the experts; the fast search: powers of two),
 * each through group_ep. */
static int group(msr_plan_search_state_t *s, msr_plan_layout_t l)
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

static int group_ep(msr_plan_search_state_t *s, msr_plan_layout_t l)
{
    const int *fx = s->q->fix;
    int fast = s->q->search == MSR_PLAN_SEARCH_FAST;
    int ok = 0, over = 0;
    /* ZeRO-3 with tp, sp, cp and pp as the runtime runs it, a MoE model's
     * too */
    int zmax = 3;
    for (int rc = 0; rc < 3; rc++) {
        if (fx[MSR_PLAN_FIX_RECOMPUTE] >= 0 && fx[MSR_PLAN_FIX_RECOMPUTE] != rc)
            continue;
        int fit = 0;
        for (int z = 0; z <= (fx[MSR_PLAN_FIX_ZERO] >= 0 ? fx[MSR_PLAN_FIX_ZERO] : zmax); z++) {
            if (fx[MSR_PLAN_FIX_ZERO] >= 0 && fx[MSR_PLAN_FIX_ZERO] != z)
                continue;
            l.recompute = rc;
            l.zero = z;
            int e = msr_plan_search_evaluate(s, &l);
            fit |= e == MSR_PLAN_EV_OK;
            over |= e == MSR_PLAN_EV_OVER;
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
static void cp_choices(const msr_plan_search_state_t *s, int64_t rest, values_t *out)
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
static int search_mesh(msr_plan_search_state_t *s, int tp, int pp, int cp)
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
            msr_plan_search_note_invalid(s, &l, why);
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
                    msr_plan_search_note_invalid(s, &l, why);
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
                l.offload = q->offload;
                l.offload_chunk = q->offload_chunk;
                l.tp_overlap = q->tp_overlap;
                l.head_chunk = q->head_chunk;
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

int64_t msr_plan_search_run(msr_plan_search_state_t *s)
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
