/* The planner's reports (plan.h's plans, printed): the ranked table, the
 * kv lines for scripts, the search's summary and one plan's breakdown
 * (--explain). Shared by plan_gpt and train_gpt so both print alike. Each
 * call writes to the FILE* it is given and nothing else; none keeps state,
 * so any thread may call them on its own FILE*. */
#ifndef MSR_PLANNER_PLAN_PRINT_H
#define MSR_PLANNER_PLAN_PRINT_H

#include <stdint.h>
#include <stdio.h>

#include "planner/plan.h"

/* The ranked table: a header line, then one row per plan numbered from 1:
 * the layout, the peak bytes per rank, step time, tokens/s, the bubble's
 * share of the step, the exposed communication and the layers of each
 * virtual stage ("even" for the runtime's own split). */
void msr_plan_print_table(FILE *f, const msr_plan_t *plans, int64_t n);

/* One line per plan for scripts: "plan dp=.. tp=.. pp=.. sp=.. zero=..
 * recompute=.. micro_batch=.. grad_accum=.. schedule=.. virtual_stages=..
 * params=.. state_bytes=.. activation_bytes=.. peak_bytes=.. step_ms=..
 * tokens_per_s=.. tflops_per_rank=.." (the FLOP rate each rank achieves),
 * and " pp_layers=a,b,.." when the split is uneven. */
void msr_plan_print_kv(FILE *f, const msr_plan_t *plans, int64_t n);

/* What the search left out: how many plans fit and are shown, a line
 * adding up the layouts tried (shown + fitting but not shown + refused +
 * over the budget), and the layouts refused or over the budget with the
 * first one's reason; two to four lines. kv: a single "search ..." line
 * (tried= the sum). */
void msr_plan_print_summary(FILE *f, const msr_plan_query_t *q, const msr_plan_cluster_t *c,
                            const msr_plan_pruned_t *pr, int64_t shown, int kv);

/* The cluster a plan assumes, one line: where it came from (origin: "the
 * default: ...", a file's path, "measured now"), the nodes world ranks
 * take, and per rank the memory, the compute rate, the bandwidths inside
 * and between nodes and a message's latency. kv: "cluster origin=.. nodes=..
 * ranks_per_node=.. mem_gib=.. peak_tflops=.. intra_gbs=.. inter_gbs=..
 * latency_us=..". */
void msr_plan_print_cluster(FILE *f, const msr_plan_cluster_t *c, int64_t world, const char *origin,
                            int kv);

/* Plan `which` (1 = the best) of plans[0..n) broken down: the layout and
 * its split with each virtual stage's time per micro-batch, the bytes the
 * fullest rank holds by kind against the budget, the step's time by phase
 * with the achieved FLOP rate, and for a plan after the first, where its
 * time differs from plan 1's. Returns 0, or -1 when which is not in 1..n
 * (nothing printed). */
int msr_plan_print_explain(FILE *f, const msr_plan_model_t *m, msr_plan_precision_t prec,
                           const msr_plan_cluster_t *c, const msr_plan_t *plans, int64_t n,
                           int64_t which);

/* A byte count for people: "716.4 KiB", "78.30 GiB"; into buf. */
void msr_plan_format_bytes(double bytes, char *buf, size_t len);

/* Reads a cluster file (at most 64 KiB of text) over the default cluster
 * into *c. Returns 0, or -1 with a one-line reason naming the path
 * ("--cluster PATH: ...") in why. */
int msr_plan_cluster_read(const char *path, msr_plan_cluster_t *c, char *why, size_t why_len);

#endif
