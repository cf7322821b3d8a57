/* What train_gpt's planner front ends (train_gpt_plan.c) add to a plan
 * where layouts are over the memory budget (planner/plan.h
 * msr_plan_search_fit): the chunked head and --auto --offload-dir's
 * offloads, applied to the options as --head-chunk and --offload would
 * give them, each said with why and what it saves and costs. */
#include <inttypes.h>
#include <stdio.h>

#include "planner/plan.h"
#include "programs/train_gpt/train_gpt.h"

/* The chunked head the search gave plan p (the options gave none): into
 * f after prefix, why and what it saves and costs. */
void train_gpt_print_head(FILE *f, const char *prefix, const msr_plan_model_t *m,
                          msr_plan_precision_t prec, const msr_plan_cluster_t *c,
                          const msr_plan_t *p, const msr_plan_pruned_t *pr)
{
    char why[256];
    msr_plan_fit_why(p, pr, c, MSR_PLAN_FIT_HEAD, why, sizeof why);
    uint64_t saved = 0;
    double flops = 0;
    msr_plan_head_cost(m, prec, p, &saved, &flops);
    fprintf(f,
            "%shead: chunks of %d vocabulary rows (--head-chunk %d): %s; the plan holds %" PRIu64
            " bytes less on its fullest rank and computes the head's logits again in backward, "
            "%.4g GFLOP a step per rank\n",
            prefix, p->l.head_chunk, p->l.head_chunk, why, saved, flops / 1e9);
}

/* --auto: plan p's chunked head, when the search chose one (the options
 * gave none), into o (as --head-chunk would give it) and, on rank 0, why
 * and what it saves and costs. */
void train_gpt_auto_head(options_t *o, const job_t *job, const msr_plan_model_t *m,
                         msr_plan_precision_t prec, const msr_plan_cluster_t *c,
                         const msr_plan_t *p, const msr_plan_pruned_t *pr)
{
    if (o->head_chunk != 0 || p->l.head_chunk == 0)
        return;
    o->head_chunk = p->l.head_chunk;
    if (job->rank == 0)
        train_gpt_print_head(stderr, "train_gpt: --auto: ", m, prec, c, p, pr);
}

/* --auto --offload-dir: plan p's offload into o (as --offload would give
 * it) and, on rank 0, which and why. */
void train_gpt_auto_offload(options_t *o, const job_t *job, const msr_plan_model_t *m,
                            msr_plan_precision_t prec, const msr_plan_cluster_t *c,
                            const msr_plan_t *p, const msr_plan_pruned_t *pr)
{
    static char list[4 * 4096 + 64];
    static const char *const items[4] = {"optimizer", "activations", "params", "grads"};
    if (o->offload_dir == NULL)
        return;
    char why[256], mode[64];
    msr_plan_fit_why(p, pr, c, MSR_PLAN_FIT_OFFLOAD, why, sizeof why);
    if (p->l.offload == 0) {
        if (job->rank == 0)
            fprintf(stderr, "train_gpt: --auto: offload: none: %s\n", why);
        return;
    }
    uint64_t saved = 0, io = 0;
    msr_plan_offload_cost(m, prec, p, &saved, &io);
    size_t used = 0;
    for (int k = 0; k < 4; k++) /* bit k: MSR_PLAN_OFFLOAD_OPTIM, _ACTS, _PARAMS, _GRADS */
        if (p->l.offload & (1 << k))
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s=disk:%s",
                                     used > 0 ? "," : "", items[k], o->offload_dir);
    o->offload = list;
    if (job->rank == 0)
        fprintf(stderr,
                "train_gpt: --auto: offload: %s (--offload %s): %s; the plan holds %" PRIu64
                " bytes less on its fullest rank and moves %" PRIu64
                " bytes to and from disk per step: %.4g ms at %.4g GB/s read, %.4g GB/s write, "
                "%.4g ms of it in its step (what compute does not hide)\n",
                msr_plan_offload_name(p->l.offload, mode, sizeof mode), list, why, saved, io,
                p->t.offload_io_ms, c->disk_read_gbs, c->disk_write_gbs, p->t.offload_ms);
}
