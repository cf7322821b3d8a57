/* The MoE layer's private state (see moe.h), shared by its files: moe.c
 * (create, layouts, the experts' store and tables) and moe_pass.c
 * (forward and backward: routing, dispatch, the experts, combine). */
#ifndef MSR_MODEL_MOE_IMPL_H
#define MSR_MODEL_MOE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "layout/layout.h"
#include "model/moe.h"

/* What one MoE block keeps from its forward for its backward. */
typedef struct moe_slot {
    float *probs; /* (N,E) router softmax */
    int *choice;  /* (N,K) experts chosen, most probable first */
    float *gate;  /* (N,K) their probabilities */
    int *row;     /* (N,K) row in the dispatch buffer, -1: dropped or another tp rank's */
    double *frac; /* (E) f_e: share of the N*K choices that picked e */
    float *xin;   /* (E*cap, C) the rows this rank's experts ran on */
    float *fch;   /* (E*cap, HF) fc's outputs (a Llama's: gate | up, 2H) */
    float *fch_g; /* (E*cap, H) gelu of fch, or silu(gate) * up */
    float *comb;  /* (E*cap, C) the experts' outputs back at their tokens' rank */
    int *used;    /* (E) rows of each expert-side block that hold a token */
    int N, cap;   /* of the last forward; N = 0: none */
    int stride;   /* of the last forward: the rows of a block of xin, ... */
} moe_slot_t;

struct msr_moe {
    int E, K, C, H, every, L;
    int glu; /* a Llama's SwiGLU experts (H = ffn), Mixtral's gates */
    int HF;  /* fc's outputs: H, or gate and up, 2H */
    double F, A;
    int max_tokens, max_cap;
    const msr_device_t *dev;    /* of the work space and the store (borrowed) */
    msr_layout_moe_dims_t dims; /* the layout's MoE table's sizes: its buffers */
    size_t work_bytes;          /* the bytes of its buffers allocated now (work_alloc) */
    msr_comm_t *ep_comm;        /* NULL: ep 1 */
    int ep, ep_rank;
    msr_comm_t *tp_comm; /* NULL: tp 1 */
    int tp, tp_rank;
    msr_comm_t *cp_comm; /* NULL: cp 1 */
    int cp, cp_rank;
    int cp_seq;      /* under cp: a rank's positions of each sequence */
    int El;          /* experts computed here per MoE block: E / (ep * tp) */
    int router_once; /* the router's weight gradient on tp rank 0 only */
    int nslots;      /* MoE blocks */
    int frames;      /* forwards kept per block (msr_moe_select) */
    int frame, counting;
    int shared;             /* every block's kept state in block 0's slots (layout) */
    moe_slot_t *slots;      /* [nslots * frames]: block i's frame f at i * frames + f */
    msr_moe_stats_t *stats; /* [nslots] */
    int *store_of;          /* [nslots] the block's place in the store, -1: not held */
    int *held, nheld;       /* the MoE blocks the store holds, in order */
    msr_moe_span_t span;    /* tracing: called after each alltoall (NULL: none) */
    void *span_arg;
    /* the experts this rank computes: El per held MoE block, block after block */
    size_t count;              /* their floats */
    float *params, *grads;     /* (count) */
    msr_gpt_tensor_t *tensors; /* their table, offsets in params */
    int num_tensors;
    /* [nslots], by place in the store: each held block's parameters and
     * gradients, in params and grads, or the caller's (msr_moe_set_block)
     * when it holds the store (external: params and grads NULL) */
    float **bparams, **bgrads;
    int external;
    msr_products_t *prod; /* the model's products (borrowed; NULL: fp32) */
    /* the model's kernels (model/kernels.h; borrowed): NULL is the CPU's */
    const struct msr_kernels *kernels;
    /* work space shared by the blocks */
    float *send;   /* (E*cap, C) dispatch side: rows by expert */
    float *out;    /* (E*cap, C) expert side: outputs, then input gradients */
    float *dout;   /* (E*cap, C) expert side: output gradients */
    float *dfch;   /* (E*cap, HF) */
    float *dfch_g; /* (E*cap, H) */
    float *dgate;  /* (N,K) */
    float *dprobs; /* (N,E) */
    int *gchoice;  /* (cp*N,K) under cp: the cp group's choices, by cp rank */
    float *rdx;    /* (N,C) the router's input gradient where it is not wanted
                    * (tp ranks other than 0 that keep the router's weight
                    * gradient: made by msr_moe_set_layout) */
};

#endif
