/* The pipeline's step, simulated op by op under processor sharing: each
 * pipeline rank runs its schedule's ops in the order the runtime does
 * (parallel/mp_pipe.c), an op once its inputs are there; the ranks computing
 * at one time share the node's cores evenly, and a rank waiting for its
 * input or on a collective uses none. */
#include "planner/plan_sim.h"

#include <stdlib.h>

#include "layout/layout.h"
#include "planner/plan.h"

typedef msr_pipe_op_t op_t;

/* The rank's ops in the runtime's order. */
static int build_ops(const msr_plan_sim_t *s, int r, op_t *o)
{
    return msr_pipe_order(s->schedule, s->micros, s->pp, r, s->chunks, o);
}

enum { WAITING, COMPUTING, ON_WIRE, FINISHED };

typedef struct rank_state {
    op_t *ops;
    int n, pos, phase;
    double left; /* of the phase: work (ms at a whole core) or wall ms */
} rank_state_t;

double msr_plan_sim_pipeline(const msr_plan_sim_t *s)
{
    if (s->pp < 1 || s->chunks < 1 || s->micros < 1 || s->cores <= 0 || s->on_node < 1 ||
        s->stage == NULL)
        return -1;
    if (s->schedule == MSR_PLAN_INTERLEAVED && s->chunks > 1 && s->micros % s->pp != 0)
        return -1; /* the runtime's interleaved order needs whole groups */
    int p = s->pp, nv = p * s->chunks, M = s->micros;
    if ((double)nv * M * 2 > MSR_PLAN_SIM_MAX_OPS)
        return -1;
    int per = 2 * M * s->chunks;
    op_t *ops = malloc(sizeof *ops * (size_t)per * (size_t)p);
    double *done = malloc(sizeof *done * (size_t)nv * (size_t)M * 2);
    rank_state_t *rs = calloc((size_t)p, sizeof *rs);
    double t = -1;
    if (ops == NULL || done == NULL || rs == NULL)
        goto out;
    for (int i = 0; i < nv * M * 2; i++)
        done[i] = -1;
    for (int r = 0; r < p; r++) {
        rs[r].ops = ops + (size_t)r * per;
        rs[r].n = build_ops(s, r, rs[r].ops);
        rs[r].phase = rs[r].n > 0 ? WAITING : FINISHED;
    }
#define DONE(b, m, j) done[((size_t)(m)*nv + (j)) * 2 + (b)]
    double per_rank = s->on_node / p; /* node ranks each pipeline rank stands for */
    int left = p;
    t = 0;
    while (left > 0) {
        /* start what can start */
        int running = 0;
        for (int r = 0; r < p; r++) {
            rank_state_t *x = &rs[r];
            if (x->phase == WAITING) {
                op_t o = x->ops[x->pos];
                int j = o.c * p + r;
                int ready = o.backward
                                ? DONE(0, o.m, j) >= 0 && (j == nv - 1 || DONE(1, o.m, j + 1) >= 0)
                                : j == 0 || DONE(0, o.m, j - 1) >= 0;
                if (ready) {
                    x->phase = COMPUTING;
                    x->left = o.backward ? s->stage[j].bwd : s->stage[j].fwd;
                }
            }
            running += x->phase == COMPUTING;
        }
        double rate = running * per_rank > s->cores ? s->cores / (running * per_rank) : 1;
        double dt = -1;
        for (int r = 0; r < p; r++) {
            double d = rs[r].phase == COMPUTING ? rs[r].left / rate
                       : rs[r].phase == ON_WIRE ? rs[r].left
                                                : -1;
            if (d >= 0 && (dt < 0 || d < dt))
                dt = d;
        }
        if (dt < 0) { /* nothing runs and nothing can start: a broken schedule */
            t = -1;
            goto out;
        }
        t += dt;
        for (int r = 0; r < p; r++) {
            rank_state_t *x = &rs[r];
            if (x->phase != COMPUTING && x->phase != ON_WIRE)
                continue;
            op_t o = x->ops[x->pos];
            int j = o.c * p + r;
            x->left -= x->phase == COMPUTING ? dt * rate : dt;
            if (x->left > 1e-9)
                continue;
            if (x->phase == COMPUTING) {
                x->phase = ON_WIRE;
                x->left = o.backward ? s->stage[j].bwd_wait : s->stage[j].fwd_wait;
                if (x->left > 1e-9)
                    continue;
            }
            DONE(o.backward, o.m, j) = t;
            if (++x->pos == x->n) {
                x->phase = FINISHED;
                left--;
            } else
                x->phase = WAITING;
        }
    }
#undef DONE
out:
    free(ops);
    free(done);
    free(rs);
    return t;
}
