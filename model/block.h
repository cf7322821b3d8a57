/* One transformer block, forward and backward, written once: the whole
 * model (gpt.c) runs it with tp = 1 and no communication, model parallel
 * (mp.c) on a tensor-parallel rank's slice with its collectives between the
 * layers (Megatron's split, see mp.h). N = B*T token rows; Nl the rows held
 * outside the tensor-parallel layers (N, or N/tp under sequence parallel):
 *
 *   x (Nl,C) -> ln1 -> enter -> qkv (N,3Cl) -> attention (N,Cl) -> attproj
 *     (N,C) -> reduce -> + attprojb -> res2 (Nl,C) = x + that
 *   res2 -> ln2 -> enter -> fc (N,Hl) -> gelu -> fcproj (N,C) -> reduce
 *     -> + fcprojb -> res3 (Nl,C) = res2 + that: the block's output
 *
 * enter brings a column-parallel layer's input to every rank (identity, or
 * an allgather along the sequence), reduce sums a row-parallel layer's
 * partial outputs (identity at tp = 1, an allreduce, or a reduce-scatter
 * along the sequence); backward runs their conjugates. attention is the
 * causal kernel on the rank's sequence, or under context parallel the
 * attend hook (ring attention over the cp group, see mp.h). At tp = 1 the biases
 * of the row-parallel layers go into their matmuls; with tp > 1 they are
 * added once after the reduction. Bitwise the same at tp = 1 whatever the
 * caller. Not thread-safe: one thread drives a block's buffers.
 *
 * A Llama block (llama set; docs/model.md "Llama") is the same block with
 * RMSNorm for ln1 and ln2, no biases, qkv (N, Cl + 2 KVl) holding the
 * query heads then the key/value heads (grouped-query attention) with
 * rotary positions applied to q and k, and the SwiGLU MLP: fc (N, 2Hl)
 * holds gate and up, fcproj reads silu(gate) * up (N, Hl). Under tp a rank
 * holds NHl query heads, NKVl = KVH/tp key/value heads and Hl = F/tp.
 * Its attend hooks (generation's cache: forward only; context parallel's
 * ring) get the rotated qkv (N, Cl + 2 KVl); under cp, pos gives each
 * row's position (the zigzag chunks'), which the rotation uses. */
#ifndef MSR_MODEL_BLOCK_H
#define MSR_MODEL_BLOCK_H

#include <stddef.h>

#include "msrun/base.h"
#include "model/gpt.h"

/* The communication between the layers of a tensor-parallel block. A NULL
 * table (or member) is tp = 1: enter and reduce hand back their input,
 * poll does nothing. A failure stops the pass and its status is returned. */
typedef struct msr_block_comm {
    void *arg;
    /* *out_p = x (Nl,C) itself, or gathered into gbuf (N,C). */
    msr_status_t (*enter)(void *arg, const float *x, float *gbuf, const float **out_p);
    /* The sum over tp of full (N,C): *out_p = full (in place) or local
     * (Nl,C) holding this rank's rows of it. full is left unspecified. */
    msr_status_t (*reduce)(void *arg, float *full, float *local, float **out_p);
    /* Called between the kernels, so that communication in flight (data
     * parallel's buckets) makes progress while the block computes. */
    msr_status_t (*poll)(void *arg);
    /* Context parallel: attention of this rank's queries over the whole
     * sequence (ring attention). out (N,Cl) from qkv (N,3Cl; a Llama's
     * (N, Cl + 2KVl), rotated); att gets what backward needs (the
     * logsumexp, (N,NHl)). NULL: the causal attention kernel on the rank's
     * own (B,T) sequence, att (B,NHl,T,T). */
    msr_status_t (*attend)(void *arg, float *out, float *att, const float *qkv);
    /* Its backward: dqkv (as qkv) += from dout (N,Cl), given forward's
     * qkv, out and att. */
    msr_status_t (*attend_backward)(void *arg, float *dqkv, const float *dout, const float *qkv,
                                    const float *out, const float *att);
    /* Tensor-parallel overlap (msr_block_forward_split): reduce in two
     * halves, started without blocking (*req_p, the caller's until it is
     * finished) and finished by reduce_wait, which sets *out_p as reduce
     * does. poll drives the requests in flight. Both NULL: no overlap. */
    msr_status_t (*reduce_start)(void *arg, float *full, float *local, void **req_p);
    msr_status_t (*reduce_wait)(void *arg, void *req, float *full, float *local, float **out_p);
    /* Its enter likewise (sequence parallel's allgather): started on x
     * (Nl,C), which stays unchanged until enter_wait finishes it, lays
     * the gathered rows out in gbuf (N,C) and sets *out_p as enter does.
     * A start that fails leaves *req_p unset. A copy has at most one
     * request in flight, of either kind. Both NULL: enter blocks where
     * the column-parallel layer needs its input (none without sp). */
    msr_status_t (*enter_start)(void *arg, const float *x, void **req_p);
    msr_status_t (*enter_wait)(void *arg, void *req, float *gbuf, const float **out_p);
} msr_block_comm_t;

/* A block's shape on this rank and the work space its passes share. */
typedef struct msr_block {
    int B, T, C;                  /* micro-batch, sequence, channels */
    int tp;                       /* tensor-parallel degree: 1 for the whole block */
    int NHl, Cl, Hl;              /* this rank's heads, their width C/tp, MLP width 4C/tp */
    size_t N, Nl;                 /* token rows, rows held outside the tp layers */
    int llama;                    /* a Llama block (above): 0 for the GPT's */
    int NKVl;                     /* llama: this rank's key/value heads (KVl = NKVl * Cl/NHl) */
    double rope_theta;            /* llama: the rotary base */
    int pos0;                     /* llama: the position of each sequence's first row (0;
                                   * generation: the cache's length) */
    const int *pos;               /* llama: each sequence's rows' positions (T), context
                                   * parallel's zigzag chunks; NULL: pos0 + t */
    const msr_block_comm_t *comm; /* NULL: tp = 1 */
    msr_products_t *prod;         /* the products' precision (NULL: fp32), the model's */
    float *proj, *projl;          /* (N,C) a projection before its reduction, (Nl,C) */
    float *gat, *dgat;            /* (N,C) gathered input and gradient (sequence parallel) */
    float *dln, *dlnl;            /* (N,C) a layernorm output's gradient, (Nl,C) reduced */
    float *dqkv, *datty;          /* (N,3Cl), (N,Cl) */
    float *dfch, *dfch_gelu;      /* (N,Hl) */
    float *datt;                  /* (T,T) attention backward scratch */
    /* the kernels every pass calls (model/kernels.h): the model's table;
     * NULL: the CPU's */
    const struct msr_kernels *k;
} msr_block_t;

/* A block whose MLP is the caller's (a Mixture-of-Experts block, model/
 * moe.h): res3 = res2 + reduce(mlp(enter(ln2(res2)))). forward gets the
 * MLP's input in (N,C), entered like a column-parallel layer's (gathered
 * under sequence parallel), and writes out (N,C), a partial sum over tp
 * that is reduced like a row-parallel layer's output (no bias is added:
 * the MLP adds its own). backward gets in (N,C) again and dout (N,C), the
 * gradient of out (the block's output gradient entered), and adds its
 * partial input gradient to din (N,C), which is reduced over tp before
 * ln2's backward. */
typedef struct msr_block_mlp {
    msr_status_t (*forward)(void *arg, const float *in, float *out);
    msr_status_t (*backward)(void *arg, const float *in, const float *dout, float *din);
    void *arg;
} msr_block_mlp_t;

/* Forward of the block with parameters p on input x (Nl,C): fills a, whose
 * res3 (Nl,C) is the output. mlp: the caller's MLP in place of the dense
 * one (fc, gelu, fcproj), or NULL. */
msr_status_t msr_block_forward(const msr_block_t *b, const msr_gpt_block_params_t *p,
                               msr_gpt_block_acts_t *a, const float *x, const msr_block_mlp_t *mlp);

/* Backward: dres (Nl,C), the gradient of the block's output, becomes the
 * gradient of its input x; g (same layout as p) += the parameters'
 * gradients (the dense MLP's, or ln2's alone with mlp). a is what forward
 * kept; mlp the same as forward's. */
msr_status_t msr_block_backward(const msr_block_t *b, const msr_gpt_block_params_t *p,
                                const msr_gpt_block_params_t *g, const msr_gpt_block_acts_t *a,
                                const float *x, float *dres, const msr_block_mlp_t *mlp);

/* Forward of a micro-batch in two copies (tensor-parallel overlap): half[0]
 * and half[1] are the block's shape on B/2 sequences each, pointing at
 * disjoint halves of the work space (proj, projl and gat at least), a[i]
 * and x[i] each copy's activations and input. The copies' passes
 * interleave: each copy's communication (a row-parallel output's
 * reduction, reduce_start; under sequence parallel a column-parallel
 * layer's gathered input, enter_start) is started as soon as its input
 * is computed and waited for only when the copy's next piece needs it,
 * while the other copy computes (block.c's schedules). Needs the comm
 * table's reduce_start and reduce_wait; no caller's MLP. Every row is
 * computed as msr_block_forward computes it. */
msr_status_t msr_block_forward_split(const msr_block_t *half, const msr_gpt_block_params_t *p,
                                     msr_gpt_block_acts_t *a, const float *const *x);

/* Backward of msr_block_forward_split's two copies: dres[i] (copy i's
 * output gradient) becomes that of x[i]; g += the parameters' gradients
 * of both copies (copy A's rows first). A copy's reduction of a norm's
 * output gradient runs while the other copy computes. half's dln, dlnl,
 * dqkv, datty, dfch and dfch_gelu must point at disjoint halves too. */
msr_status_t msr_block_backward_split(const msr_block_t *half, const msr_gpt_block_params_t *p,
                                      const msr_gpt_block_params_t *g,
                                      const msr_gpt_block_acts_t *a, const float *const *x,
                                      float *const *dres);

#endif
