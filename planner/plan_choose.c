/* The choice among ranked plans (plan.h's msr_plan_choose): the simplest
 * of those the time model cannot tell apart from the fastest. */
#include "planner/plan.h"

/* The layout's model-parallel dimensions: tp, pp, cp and ep above 1. */
static int model_dims_of(const msr_plan_layout_t *l)
{
    return (l->tp > 1) + (l->pp > 1) + (msr_plan_cp(l) > 1) + (msr_plan_ep(l) > 1);
}

/* The layout's parallel dimensions: dp and the model-parallel ones. */
static int dims_of(const msr_plan_layout_t *l)
{
    return (l->dp > 1) + model_dims_of(l);
}

int msr_plan_simpler(const msr_plan_layout_t *a, const msr_plan_layout_t *b)
{
    /* the order of docs/plan.md "Choosing within the noise": each key
     * decides only when the ones before it tie */
    const int ka[] = {dims_of(a), model_dims_of(a),       a->zero, a->recompute, a->sp,
                      a->chunks,  a->stage_layers != NULL};
    const int kb[] = {dims_of(b), model_dims_of(b),       b->zero, b->recompute, b->sp,
                      b->chunks,  b->stage_layers != NULL};
    for (size_t i = 0; i < sizeof ka / sizeof ka[0]; i++)
        if (ka[i] != kb[i])
            return ka[i] < kb[i] ? -1 : 1;
    return 0;
}

int64_t msr_plan_choose(const msr_plan_t *plans, int64_t n, double noise, int64_t *within_p)
{
    if (n <= 0)
        return -1;
    double bound = plans[0].t.step_ms * (1.0 + (noise > 0 ? noise : 0));
    int64_t best = 0, within = 1;
    for (int64_t i = 1; i < n && plans[i].t.step_ms <= bound; i++) {
        within++;
        /* ties keep the faster: plans are best first */
        if (msr_plan_simpler(&plans[i].l, &plans[best].l) < 0)
            best = i;
    }
    if (within_p != NULL)
        *within_p = within;
    return best;
}
