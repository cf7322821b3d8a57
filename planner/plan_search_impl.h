/* The search's private pieces, shared by its files: the split of layers
 * (plan_split.c), the evaluation of one layout (plan_search.c) and the
 * enumeration of the layouts (plan_enum.c). Not part of the planner's
 * interface (plan.h). */
#ifndef MSR_PLANNER_PLAN_SEARCH_IMPL_H
#define MSR_PLANNER_PLAN_SEARCH_IMPL_H

#include <stdint.h>

#include "planner/plan.h"

/* ---- the split of layers (plan_split.c) ---- */

/* What a pipeline rank costs per micro-batch: its blocks, and the
 * embedding (rank 0) or the head (rank pp - 1). The time model runs a
 * rank's virtual stages one after another (plan_time.c), so the slowest
 * rank, the sum of its stages, decides; with one stage per rank that is
 * the slowest stage. */
typedef struct msr_plan_stage_cost {
    double layer_ms, first_ms, last_ms;
    int n;   /* ranks of the pipeline (pp) */
    int min; /* layers a rank holds at least: one per virtual stage */
} msr_plan_stage_cost_t;

/* The runtime's even split of layers into n stages, into split. */
void msr_plan_even_split(int layers, int n, int *split);

/* The balanced split of L layers into the c->n * v virtual stages, into
 * split; the even one when it is as good. Returns 0, or -1 when memory
 * runs out. */
int msr_plan_balance(const msr_plan_stage_cost_t *c, int L, int v, int *split);

/* The per-stage costs of layout l from its times t, into *c. */
void msr_plan_costs_of(const msr_plan_layout_t *l, const msr_plan_time_t *t,
                       msr_plan_stage_cost_t *c);

/* The virtual stages per rank the layout's schedule runs. */
int msr_plan_chunks_of(const msr_plan_layout_t *l);

/* ---- the search (plan_search.c, plan_enum.c) ---- */

/* The last split computed, for the next layout with the same costs (the
 * search's inner loops change only what the split does not depend on). */
typedef struct msr_plan_split_cache {
    msr_plan_stage_cost_t cost;
    int valid, uneven;
    int split[MSR_PLAN_MAX_STAGES];
} msr_plan_split_cache_t;

/* One search: its query, the plans kept so far, what was left out. */
typedef struct msr_plan_search_state {
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
    msr_plan_split_cache_t cache;
    msr_plan_t cand;
} msr_plan_search_state_t;

/* What msr_plan_search_evaluate made of a layout. */
enum { MSR_PLAN_EV_OK, MSR_PLAN_EV_INVALID, MSR_PLAN_EV_OVER };

/* Counts layout l as refused for why (the first one's reason kept). */
void msr_plan_search_note_invalid(msr_plan_search_state_t *s, const msr_plan_layout_t *l,
                                  const char *why);

/* Checks, splits, sizes and times one layout; keeps it when it fits.
 * Returns MSR_PLAN_EV_*; sets s->oom when memory ran out. */
int msr_plan_search_evaluate(msr_plan_search_state_t *s, const msr_plan_layout_t *lin);

/* Evaluates every layout of the query (plan_enum.c). Returns 0, or -1
 * when memory ran out. */
int64_t msr_plan_search_run(msr_plan_search_state_t *s);

#endif
