/* The split of a model's layers into a pipeline's virtual stages that
 * balances their time (plan.h msr_plan_split_layers, docs/plan.md
 * "Search"): the runtime's even split, the ranks' layers by dynamic
 * programming over the time model's per-stage costs, each rank's spread
 * over its virtual stages. The search (plan_search.c) splits every layout
 * it tries with it. */
#include <stdlib.h>
#include <string.h>

#include "planner/plan.h"
#include "planner/plan_search_impl.h"

/* ---- the split of layers into virtual stages ---- */

/* The runtime's even split (model/gpt.h): stage j holds [L j / n, L (j+1) / n). */
void msr_plan_even_split(int layers, int n, int *split)
{
    for (int j = 0; j < n; j++)
        split[j] = (int)((int64_t)layers * (j + 1) / n - (int64_t)layers * j / n);
}

static double stage_ms(const msr_plan_stage_cost_t *c, int j, int k)
{
    return k * c->layer_ms + (j == 0 ? c->first_ms : 0) + (j == c->n - 1 ? c->last_ms : 0);
}

static double max_d(double a, double b)
{
    return a > b ? a : b;
}

/* The slowest rank of a split of the ranks' layers. */
static double split_bottleneck(const msr_plan_stage_cost_t *c, const int *per_rank)
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
static double split_dp(const msr_plan_stage_cost_t *c, int L, int *per_rank)
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
int msr_plan_balance(const msr_plan_stage_cost_t *c, int L, int v, int *split)
{
    int per_rank[MSR_PLAN_MAX_STAGES], even[MSR_PLAN_MAX_STAGES], pp = c->n;
    double best = split_dp(c, L, per_rank);
    if (best < 0)
        return -1;
    for (int r = 0; r < pp; r++)
        for (int k = 0; k < v; k++)
            split[k * pp + r] =
                (int)((int64_t)per_rank[r] * (k + 1) / v - (int64_t)per_rank[r] * k / v);
    msr_plan_even_split(L, pp * v, even);
    rank_sums(even, pp, v, per_rank);
    /* ties within rounding: the even split's bottleneck sums the same terms */
    if (split_bottleneck(c, per_rank) <= best * (1 + 1e-12))
        memcpy(split, even, (size_t)(pp * v) * sizeof *split);
    return 0;
}

void msr_plan_costs_of(const msr_plan_layout_t *l, const msr_plan_time_t *t,
                       msr_plan_stage_cost_t *c)
{
    c->layer_ms = t->layer_ms > 0 ? t->layer_ms : 0;
    c->first_ms = t->first_ms > 0 ? t->first_ms : 0;
    c->last_ms = t->last_ms > 0 ? t->last_ms : 0;
    c->n = l->pp;
    c->min = l->schedule == MSR_PLAN_INTERLEAVED ? l->chunks : 1;
}

int msr_plan_chunks_of(const msr_plan_layout_t *l)
{
    return l->schedule == MSR_PLAN_INTERLEAVED ? l->chunks : 1;
}

int msr_plan_split_layers(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                          msr_plan_precision_t prec, const msr_plan_cluster_t *c, int *split)
{
    int64_t n = (int64_t)l->pp * msr_plan_chunks_of(l);
    if (l->pp < 1 || n > m->layers || n > MSR_PLAN_MAX_STAGES)
        return -1;
    msr_plan_layout_t even = *l;
    even.stage_layers = NULL;
    msr_plan_time_t t;
    msr_plan_time(m, &even, prec, c, &t);
    msr_plan_stage_cost_t sc;
    msr_plan_costs_of(l, &t, &sc);
    return msr_plan_balance(&sc, m->layers, msr_plan_chunks_of(l), split);
}
