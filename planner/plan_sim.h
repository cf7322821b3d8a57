/* The pipeline's step, simulated op by op where a node's ranks share fewer
 * cores than they are (planner/plan_time.c uses it; docs/plan.md "Time
 * model"). The closed forms of the pipeline assume each rank owns its core;
 * sharing makes the fill and drain cheaper (a waiting rank lends its core)
 * and the steady state dearer, by amounts that depend on the schedule. */
#ifndef MSRUN_PARALLEL_PLAN_SIM_H
#define MSRUN_PARALLEL_PLAN_SIM_H

/* One virtual stage's micro-batch. */
typedef struct msr_plan_sim_stage {
    double fwd, bwd;           /* compute, ms on a core of its own */
    double fwd_wait, bwd_wait; /* ms that pass at any core share: collectives, sends */
} msr_plan_sim_stage_t;

typedef struct msr_plan_sim {
    int pp;       /* pipeline ranks */
    int chunks;   /* virtual stages per rank (interleaved), else 1 */
    int micros;   /* micro-batches of the step */
    int schedule; /* MSR_PLAN_GPIPE, _1F1B, _INTERLEAVED (planner/plan.h) */
    /* the node: its ranks, each pipeline rank standing for on_node / pp of
     * them (the other pipelines and tp ranks run alike), and its cores */
    double on_node;
    double cores;
    const msr_plan_sim_stage_t *stage; /* pp * chunks, virtual stage j = chunk * pp + rank */
} msr_plan_sim_t;

/* Upper bound on ops (pp * chunks * micros * 2) simulated; longer
 * schedules return -1 and the caller keeps its closed form. */
#define MSR_PLAN_SIM_MAX_OPS 65536

/* The step's pipeline time in ms, from the first forward to the last
 * backward; -1 when the schedule is over MSR_PLAN_SIM_MAX_OPS or a
 * field is out of range. */
double msr_plan_sim_pipeline(const msr_plan_sim_t *s);

#endif
