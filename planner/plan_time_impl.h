/* The time model's private pieces, shared by its files: a network's
 * prices of collectives and the work's prices at the cluster's rates, and
 * one micro-batch's pieces (plan_cost.c), which plan_time.c adds up into
 * the stages, the pipeline and the step. Not part of the planner's
 * interface (plan.h); pure arithmetic, any thread. */
#ifndef MSR_PLANNER_PLAN_TIME_IMPL_H
#define MSR_PLANNER_PLAN_TIME_IMPL_H

#include "planner/plan.h"

/* ---- collectives ---- */

/* A group's network: one node's shared memory, or the links between nodes. */
typedef struct msr_plan_net {
    double lat_ms; /* per message */
    double ms_per_byte;
    int shm; /* one node: the shared-memory algorithms */
} msr_plan_net_t;

/* The network inside a node (intra) or between nodes. */
msr_plan_net_t msr_plan_net_of(const msr_plan_cluster_t *c, int intra);

/* ms of an allreduce of bytes over n ranks. */
double msr_plan_t_allreduce(const msr_plan_net_t *x, double bytes, int n);

/* ms of a reduce-scatter or allgather whose whole vector is bytes. */
double msr_plan_t_scatter(const msr_plan_net_t *x, double bytes, int n);

/* ms of one send of bytes. */
double msr_plan_t_p2p(const msr_plan_net_t *x, double bytes);

/* ---- work ---- */

/* Work in the three currencies, priced by the cluster. */
typedef struct msr_plan_work {
    double flops, bytes, act, kernels; /* act: bytes of exp/tanh kernels */
    double aflops;                     /* attention's FLOPs (its own kernels) */
    double rflops;                     /* ring attention's (cp: block pairs) */
} msr_plan_work_t;

/* ms of work w at the cluster's rates. */
double msr_plan_price(const msr_plan_cluster_t *c, msr_plan_work_t w);

/* w with every currency times k. */
msr_plan_work_t msr_plan_work_scale(msr_plan_work_t w, double k);

/* a and b together. */
msr_plan_work_t msr_plan_work_add(msr_plan_work_t a, msr_plan_work_t b);

/* ---- a micro-batch's pieces ---- */

/* One micro-batch's forward on one rank, in parts the phases price. */
typedef struct msr_plan_pieces {
    msr_plan_work_t layer_f; /* one block's forward */
    msr_plan_work_t attn_f;  /* of it, the attention core (what selective recomputes) */
    double layer_tp_ms;      /* one block's tp collectives, forward (backward: the same) */
    double layer_tp_half_ms; /* tp overlap's: an allreduce (sp: a scatter) of half */
    double layer_ep_ms;      /* one block's expert-parallel alltoalls, forward (backward: the same),
                              * averaged over the blocks as layer_f is */
    double layer_moe_cp_ms;  /* under cp, forward only: a MoE block's choices gathered over cp
                              * and its router's means summed, averaged alike */
    msr_plan_work_t
        attn_b_more;          /* under cp: what the ring's backward computes beyond twice attn_f */
    msr_plan_work_t sel_f;    /* what selective recompute runs again, a block (averaged as
                               * layer_f is) */
    double ring_f_ms;         /* under cp: one block's exposed ring transfers, forward */
    double ring_b_ms;         /* and backward */
    msr_plan_work_t layer_sp; /* under sp, its copies between sequence and rank order (each pass) */
    msr_plan_work_t embed_f, embed_b;
    double embed_tp_ms; /* forward; its backward has none */
    msr_plan_work_t head_f, head_b;
    msr_plan_work_t head_rc; /* the chunked head's backward computing its logits again (a
                              * recompute: none without --head-chunk) */
    double head_tp_f_ms, head_tp_b_ms;
    double model_flops_f; /* the whole model's forward FLOPs for one micro-batch (all ranks) */
    double act_bytes;     /* a stage boundary's activation (or its gradient), per micro-batch */
    double ring_cost;     /* under cp: the ring's FLOPs priced this many times (chunk_cost) */
    const double *cold;   /* per virtual stage j (chunk j / pp of pipeline rank j % pp),
                           * its frame's cold reads, ms a micro-batch; NULL: none */
} msr_plan_pieces_t;

/* Counts the pieces of one micro-batch of the layout on one rank into *p
 * (its cold is NULL). */
void msr_plan_count_pieces(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                           msr_plan_precision_t prec, const msr_plan_cluster_t *c,
                           msr_plan_pieces_t *p);

#endif
