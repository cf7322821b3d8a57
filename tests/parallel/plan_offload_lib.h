/* What the planner's offload tests share (test_plan_offload_io.c and
 * test_plan_offload_experts.c): a layout, an --offload auto search's
 * query, and the first plan such a search finds. Included once by each,
 * after tests/runner.h. */
#ifndef MSRUN_TESTS_PARALLEL_PLAN_OFFLOAD_LIB_H
#define MSRUN_TESTS_PARALLEL_PLAN_OFFLOAD_LIB_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan.h"
#include "tests/runner.h"

/* A layout of dp ranks by pp stages, ZeRO zero, recompute rc, micro-batches
 * of b, micros of them a step, under 1F1B. */
static inline msr_plan_layout_t layout(int dp, int pp, int zero, int rc, int b, int micros)
{
    msr_plan_layout_t l;
    memset(&l, 0, sizeof l);
    l.dp = dp, l.tp = 1, l.pp = pp, l.zero = zero, l.recompute = rc;
    l.micro_batch = b, l.micros = micros, l.schedule = MSR_PLAN_1F1B, l.chunks = 1;
    return l;
}

/* An exhaustive search's query over world ranks for a global batch of
 * gb: dp fixed (-1: free), ZeRO zero, micro-batches of 2 under 1F1B, the
 * optimizer's offload in chunks of 4096 bytes. */
static inline msr_plan_query_t auto_query(int world, int gb, int dp, int zero)
{
    msr_plan_query_t q;
    memset(&q, 0, sizeof q);
    q.world = world, q.global_batch = gb, q.search = MSR_PLAN_SEARCH_EXHAUSTIVE;
    for (int k = 0; k < MSR_PLAN_FIX_N; k++)
        q.fix[k] = -1;
    q.fix[MSR_PLAN_FIX_DP] = dp, q.fix[MSR_PLAN_FIX_ZERO] = zero;
    q.fix[MSR_PLAN_FIX_MICRO_BATCH] = 2, q.fix[MSR_PLAN_FIX_SCHEDULE] = MSR_PLAN_1F1B;
    q.offload_chunk = 4096;
    return q;
}

/* The first plan of an --offload auto search (auto_first): its offload,
 * its I/O and what the step pays of it, the bytes it saves and moves. */
typedef struct auto_first {
    int off;
    double io, paid;
    uint64_t saved, moved;
} auto_first_t;

/* Searches q under c with the offloads; checks that a plan came, one that
 * needed them ("no layout fits in", none without), its I/O priced; its
 * figures in *f. -1 when none came. */
static inline int auto_first(msr_plan_model_t *m, msr_plan_cluster_t *c, msr_plan_query_t *q,
                             auto_first_t *f)
{
    msr_plan_t *plans = NULL;
    msr_plan_pruned_t pr;
    char why[256] = "";
    int64_t n = msr_plan_search_offload(m, MSR_PLAN_FP32, c, q, 0, &plans, &pr, why, sizeof why);
    MSR_CHECK_MSG(n > 0, "%s", why);
    if (n <= 0)
        return -1;
    msr_plan_fit_why(&plans[0], &pr, c, MSR_PLAN_FIT_OFFLOAD, why, sizeof why);
    f->off = plans[0].l.offload;
    f->io = plans[0].t.offload_io_ms, f->paid = plans[0].t.offload_ms;
    msr_plan_offload_cost(m, MSR_PLAN_FP32, &plans[0], &f->saved, &f->moved);
    free(plans);
    MSR_CHECK_MSG(strstr(why, "no layout fits in") != NULL, "%s", why);
    MSR_CHECK(pr.plain_ms == 0 && f->io > 0 && f->paid > 0);
    return 0;
}

/* The plans an --offload auto search of q under c finds (fp32, all of
 * them) into *plans_p; their count, or -1. */
static inline int64_t search_all(msr_plan_model_t *m, msr_plan_cluster_t *c, msr_plan_query_t *q,
                                 msr_plan_t **plans_p)
{
    msr_plan_pruned_t pr;
    char why[256] = "";
    return msr_plan_search_offload(m, MSR_PLAN_FP32, c, q, 0, plans_p, &pr, why, sizeof why);
}

/* auto_first under a default cluster (into *c) whose budget is peak
 * bytes a rank. */
static inline int auto_at(msr_plan_model_t *m, uint64_t peak, msr_plan_cluster_t *c,
                          msr_plan_query_t *q, auto_first_t *f)
{
    msr_plan_cluster_default(c);
    c->mem_gib = (double)peak / (1024.0 * 1024.0 * 1024.0);
    return auto_first(m, c, q, f);
}

#endif
