/* Mixture-of-Experts: the MLP of a MoE block (model/gpt.h), forward and
 * backward, in one process or with its experts sharded over the ranks of
 * an expert-parallel group.
 *
 *   x (N,C) -> router logits (N,E) = x @ routerw^T -> probs = softmax
 *   -> each token's K most probable experts (ties: the lower index), gate =
 *      the expert's probability (not renormalized over the K); a Llama's
 *      gates are Mixtral's, renormalized: gate = p / (the sum of the K
 *      chosen p), the softmax over the K chosen logits
 *   -> capacity: expert e takes at most cap = ceil(F * N * K / E) of the
 *      micro-batch's N tokens. Slots are handed out choice rank first, then
 *      token index: every token's first choice in token order, then every
 *      token's second choice, ...; a choice that finds its expert full is
 *      dropped (counted) and adds nothing: the residual carries the token.
 *   -> dispatch: row e * cap + slot of a (E * cap, C) buffer holds the
 *      token's x (unused slots zero)
 *   -> expert e: fcproj(gelu(fc(.))) on its cap rows, the dense MLP's shape;
 *      a Llama's: w2(silu(w1 .) * w3 .), no biases (Mixtral's expert)
 *   -> combine: y[t] = sum over the token's kept choices of gate * output.
 *
 * The load-balancing loss (Switch Transformer) of a micro-batch is
 * A * E * sum_e f_e * P_e, where f_e is the share of the N * K choices that
 * picked e (before capacity drops) and P_e the mean of probs[:, e]; f is
 * held constant in backward, as in the paper.
 *
 * Expert parallel over ep ranks (the communicator given to
 * msr_moe_set_ep): ep rank i holds the computation of experts [i * E/ep,
 * (i+1) * E/ep). Experts are numbered so that rows e * cap.. of the
 * dispatch buffer are already grouped by the rank that computes them, and
 * one alltoall of E/ep * cap * C floats per peer carries them there
 * (fixed-size capacity buffers; a first one of E/ep counts per peer says
 * how many rows are filled, and the experts run on those only); the
 * outputs come back by a second; in
 * backward the output gradients go out and the input gradients come back
 * the same way. Every rank routes its own tokens with its own capacity, so
 * the routing of a micro-batch does not depend on ep.
 *
 * Tensor parallel over tp ranks (msr_moe_set_layout): every tp rank gets
 * the same tokens (the whole micro-batch, gathered under sequence
 * parallel) and routes them alike, but computes only a contiguous share
 * of its ep rank's experts: tp rank r of ep rank i computes [i * E/ep + r
 * * El, ... + El), El = E / (ep * tp). Its dispatch buffer holds the rows
 * of those experts only (one alltoall of El * cap * C floats per ep peer,
 * over the ep ranks of the same tp index), and its y is the sum over its
 * experts' choices only: a partial sum that the caller completes over tp,
 * as it does a dense MLP's row-parallel output. Backward: dy whole on
 * every tp rank; each rank back-propagates through its experts; the gates'
 * gradients (N,K), each computed by the rank of the gate's expert, are
 * summed over tp (one allreduce), so every rank computes the router's
 * backward alike; the router's input gradient is added on tp rank 0 only
 * (the caller's sum over tp of dx completes it).
 *
 * Context parallel over cp ranks (msr_moe_set_layout's cp_comm): each
 * rank holds cp_seq positions of each of the micro-batch's B sequences,
 * N = B * cp_seq tokens, and routes them one by one. Capacity is the
 * micro-batch's, cap = ceil(F * cp * N * K / E), counted as one process
 * counts it: the ranks all-gather their choices ((N,K) ints each), and
 * every rank replays the count over the whole group's tokens in one
 * process's order (choice rank, then sequence, then position), keeping
 * the slots of its own tokens; so the same choices are kept and dropped
 * as in one process, however the sequences are split. A rank's kept
 * choices fill its own rows of an expert's block (at most min(cap, N)
 * of them: the block's stride). f_e counts the group's choices and P_e
 * the group's probabilities (one allreduce of E doubles), so the
 * load-balancing loss is the micro-batch's; each rank reports 1/cp of it
 * (the caller sums over cp, as it does the cross-entropy's shares).
 *
 * The experts' parameters are not in the model's flat buffers: the MoE
 * state holds those of the experts this rank computes (its "store", E/ep
 * experts per MoE block, block after block, each fcw (4C,C), fcb (4C),
 * fcprojw (C,4C), fcprojb (C), a Llama's w1 (F,C), w3 (F,C), w2 (C,F))
 * and their gradients, so that the trainer
 * reduces them over the ranks that hold the same experts only
 * (parallel/train.h). In the whole model's expert numbering, element j of
 * expert e of MoE block i is expert element (i * E + e) * count + j (count
 * = msr_moe_expert_count):
 * its initial value and its place in a checkpoint.
 *
 * Not thread-safe: one thread drives a model and its MoE state. */
#ifndef MSR_MODEL_MOE_H
#define MSR_MODEL_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "msrun/comm.h"
#include "msrun/device.h"
#include "model/gpt.h"

/* Tracing: called after each alltoall or allreduce of the MoE blocks with
 * its name ("moe dispatch", "moe combine", ...) and its start and end
 * (msr_now_ns). */
typedef void (*msr_moe_span_t)(void *arg, const char *what, uint64_t start_ns, uint64_t end_ns);

/* The capacity of an expert for a micro-batch of `tokens` tokens:
 * ceil(F * tokens * K / E), at least 1. */
int msr_moe_capacity(const msr_gpt_moe_t *moe, int tokens);

/* The number of floats of one expert of cfg's model: 8C^2 + 5C, a
 * Llama's 3FC. */
size_t msr_moe_expert_count(const msr_gpt_config_t *cfg);

/* The whole model's expert parameters: (L / every) * E * that count; 0
 * for a dense model. */
size_t msr_moe_num_params(const msr_gpt_config_t *cfg);

/* The router's choices, counted since the last msr_moe_stats_reset, per
 * MoE block (index: its rank among the MoE blocks). */
typedef struct msr_moe_stats {
    int64_t tokens;  /* tokens routed */
    int64_t dropped; /* choices dropped for capacity */
    int64_t *load;   /* (E) choices each expert took (kept ones) */
} msr_moe_stats_t;

/* Creates the MoE state of a model of shape cfg (cfg->moe.experts > 0)
 * for micro-batches of up to max_tokens tokens (a rank's, under cp). Errors: MSR_ERR_CONFIG
 * (the reason in the error text, base/err.h), MSR_ERR_NO_MEMORY. */
msr_status_t msr_moe_create(const msr_gpt_config_t *cfg, int max_tokens, msr_moe_t **moe_p);
/* The same, keeping what backward needs for `frames` forwards of each
 * block at once (a pipeline's micro-batches in flight; msr_moe_select). */
msr_status_t msr_moe_create_frames(const msr_gpt_config_t *cfg, int max_tokens, int frames,
                                   msr_moe_t **moe_p);
/* The same for a rank of a context-parallel group of cp ranks (cp 1:
 * msr_moe_create_frames): its buffers are sized for the capacity of the
 * group's cp x max_tokens tokens. */
msr_status_t msr_moe_create_cp(const msr_gpt_config_t *cfg, int max_tokens, int frames, int cp,
                               msr_moe_t **moe_p);
void msr_moe_destroy(msr_moe_t *moe);

/* The experts' and the router's products run through prod (borrowed: the
 * model's, layers.h; NULL: fp32). msr_gpt_set_precision calls it. */
void msr_moe_set_products(msr_moe_t *moe, msr_products_t *prod);
struct msr_kernels;
/* The router's and the experts' products and activations run through k
 * (borrowed: the model's table, model/kernels.h; NULL: the CPU's).
 * msr_gpt_set_kernels calls it. */
void msr_moe_set_kernels(msr_moe_t *moe, const struct msr_kernels *k);

/* Shards the experts over comm's ranks (borrowed; NULL: this rank computes
 * them all), and makes the store hold this rank's experts (zero: call
 * msr_moe_init_params). Its size must divide E. Every rank of comm runs the
 * same micro-batch size and calls forward and backward in the same order.
 * Errors: MSR_ERR_CONFIG (the reason in the error text), MSR_ERR_NO_MEMORY
 * (the old store is gone: destroy the state). */
msr_status_t msr_moe_set_ep(msr_moe_t *moe, msr_comm_t *comm);

/* Where the experts run (see above). Communicators borrowed, NULL: size 1. */
typedef struct msr_moe_layout {
    msr_comm_t *ep_comm; /* the expert-parallel group */
    msr_comm_t *tp_comm; /* the tensor-parallel group */
    const int *held;     /* [msr_moe_blocks] nonzero: this rank runs MoE block i
                          * (a pipeline stage's); NULL: all of them */
    int router_once;     /* tp: the router's weight gradient on tp rank 0 only
                          * (the caller sums it over tp, as sequence parallel
                          * does its replicated tensors); 0: on every rank */
    msr_comm_t *cp_comm; /* context parallel: the ranks that share the
                          * micro-batch's sequences, ranked by cp index, of
                          * the size given to msr_moe_create_cp (NULL: 1) */
    int cp_seq;          /* under cp: the positions a rank holds of each
                          * sequence, two chunks of cp_seq / 2 (parallel/mp.h's
                          * layout: rank r holds chunks r and 2 cp - 1 - r) */
    /* where the work space (the dispatch and combine buffers, the kept
     * routing and activations) and the experts' store live and their
     * copies and zeroing run (msrun/device.h); NULL: the CPU. Another
     * device than the state's makes them anew there (nothing is kept:
     * a layout comes before the first forward). Only a device with host
     * memory is accepted while the experts' kernels run on the CPU
     * (MSR_ERR_UNSUPPORTED, the device named, nothing allocated) */
    const msr_device_t *device;
    /* the blocks' kept state (routing, inputs, the experts' hidden rows)
     * in one slot per frame for all of them: every backward of a block
     * follows a forward of the same block and frame with no other
     * block's forward between (full recompute re-runs each block's
     * forward just before its backward); 0: a slot per block and frame */
    int shared;
} msr_moe_layout_t;

/* msr_moe_set_ep with tensor parallel and a part of the blocks: the store
 * then holds El = E / (ep * tp) experts of each held block (zero). ep * tp
 * must divide E. Every rank of ep_comm and of tp_comm runs the same
 * micro-batch size and calls forward and backward of the same blocks in the
 * same order. The work space of the blocks not held is freed (a later
 * layout cannot hold them again: MSR_ERR_CONFIG). Errors: as
 * msr_moe_set_ep, MSR_ERR_UNSUPPORTED (a device without host memory);
 * after a failed move to another device (MSR_ERR_NO_MEMORY) the state
 * can only be destroyed. */
msr_status_t msr_moe_set_layout(msr_moe_t *moe, const msr_moe_layout_t *lay);

/* The forwards and backwards that follow keep and use frame's state
 * (frame modulo the frames made; a backward uses what the last forward of
 * the same block and frame kept), and forwards add to the router's
 * counters when count is nonzero (0: a recomputed forward). */
void msr_moe_select(msr_moe_t *moe, int frame, int count);

/* Tracing of the collectives (NULL: none). */
void msr_moe_set_trace(msr_moe_t *moe, msr_moe_span_t span, void *arg);
/* Hands a span of the experts' own work (what, times from msr_now_ns) to
 * the trace set there, as the store's caller's (nothing without one). */
void msr_moe_trace(const msr_moe_t *moe, const char *what, uint64_t start_ns, uint64_t end_ns);

/* The experts this rank holds (El per held block), the floats of its store,
 * the store's parameters and gradients, and its tensor table (names
 * "h<l>.e<e>.fcw" ..., offsets in the store, full_offset the element's
 * index in the whole model's expert numbering). The store changes with
 * msr_moe_set_ep (zeroed). */
int msr_moe_local_experts(const msr_moe_t *moe);
size_t msr_moe_count(const msr_moe_t *moe);
float *msr_moe_params(msr_moe_t *moe);
float *msr_moe_grads(msr_moe_t *moe);
const msr_gpt_tensor_t *msr_moe_tensors(const msr_moe_t *moe, int *n_p);

/* The MoE blocks the store holds (all unless msr_moe_set_layout said
 * otherwise), and where the experts of the k-th of them start in the
 * whole model's expert numbering (they are consecutive). */
int msr_moe_held(const msr_moe_t *moe);

/* The bytes of the state's work space allocated now: the layout's MoE
 * table's buffers (layout/layout.h msr_layout_moe_work) it holds, the
 * frames of blocks a layout left out freed. */
size_t msr_moe_work_bytes(const msr_moe_t *moe);
size_t msr_moe_global_lo(const msr_moe_t *moe, int k);

/* The store's parameters (grads 0) or gradients (grads 1) of block l, the
 * base msr_moe_forward and _backward read as p->experts and g->experts
 * (NULL: a block not held). */
float *msr_moe_block_params(msr_moe_t *moe, int l, int grads);

/* Lets the caller hold the store (ZeRO-3's shards, parallel/train.h):
 * frees the store's parameters and gradients (msr_moe_params and
 * msr_moe_grads then return NULL; msr_moe_count, the tensor table and its
 * offsets stay the store's) and makes each held block's parameters and
 * gradients the ones msr_moe_set_block gives (NULL until then). A later
 * msr_moe_set_layout keeps this. Errors: MSR_ERR_NO_MEMORY (the table). */
msr_status_t msr_moe_store_external(msr_moe_t *moe);

/* Under msr_moe_store_external: the k-th held block's parameters and
 * gradients, El experts in the store's order (its El * count floats from
 * store element k * El * count on; borrowed, NULL: none), what
 * msr_moe_block_params returns and forward and backward read and add to
 * until the next call. */
void msr_moe_set_block(msr_moe_t *moe, int k, float *params, float *grads);

/* The initial values (msr_moe_init_params's) of store elements [lo, lo +
 * n) into dst (n floats), whoever holds the store. */
void msr_moe_init_range(const msr_moe_t *moe, uint64_t seed, size_t lo, size_t n, float *dst);

/* Sets the store to the initial values of the experts it holds, as GPT-2
 * initialises an MLP: fcw N(0, 0.02), fcprojw N(0, 0.02/sqrt(2L)), biases
 * 0; element values depend only on (seed, whole-model index), so every ep
 * gets the same model. */
void msr_moe_init_params(msr_moe_t *moe, uint64_t seed);

/* Zeroes the store's gradients (on the state's device, synced). */
void msr_moe_zero_grad(msr_moe_t *moe);

/* The device of the state's buffers (msr_moe_layout_t.device; at first
 * the CPU): where a caller makes the buffers it swaps in by
 * msr_moe_set_block (parallel/train_experts.c's gathered blocks). */
const msr_device_t *msr_moe_device(const msr_moe_t *moe);

/* The number of MoE blocks, and the counters of MoE block i. */
int msr_moe_blocks(const msr_moe_t *moe);
const msr_moe_stats_t *msr_moe_stats(const msr_moe_t *moe, int i);
void msr_moe_stats_reset(msr_moe_t *moe);

/* Forward of block l's MoE MLP (p: its parameters, routerw, and experts:
 * msr_moe_block_params) on
 * x (N,C), N <= max_tokens: y (N,C) = the combined expert outputs (under
 * tp, of this rank's experts: a partial sum); *aux_p = the load-balancing
 * loss (0 when A = 0; alike on every tp rank; under cp this rank's 1/cp
 * share of the micro-batch's). Keeps what backward needs
 * in the selected frame and adds to the counters if msr_moe_select says
 * so. Collective over the ep communicator and the cp one. Errors: the
 * communicators'. */
msr_status_t msr_moe_forward(msr_moe_t *moe, int l, const msr_gpt_block_params_t *p, const float *x,
                             int N, float *y, double *aux_p);

/* Backward of the last forward of block l on x (N,C), the same input as
 * that forward's: dx (N,C) += the gradient of x,
 * g->routerw and g->experts (this rank's experts) +=, given dy (N,C), the
 * gradient of y, and aux_weight, that of the load-balancing loss. Under
 * tp, dy is the whole gradient on every tp rank and dx gets this rank's
 * partial sum (see above). Collective over the ep communicator, and the
 * tp one. Errors: MSR_ERR_STATE (no forward), the communicator's. */
msr_status_t msr_moe_backward(msr_moe_t *moe, int l, const msr_gpt_block_params_t *p,
                              const msr_gpt_block_params_t *g, const float *x, const float *dy,
                              float *dx, float aux_weight);

#endif
