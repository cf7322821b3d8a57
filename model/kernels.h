/* The model's kernels behind one table (issue 42 point 6, "one runtime
 * for every device"): every piece of arithmetic a transformer block's
 * forward and backward runs (model/block.c), and the model's ends around
 * the blocks (the embeddings, the final norm, the head and the loss:
 * model/gpt_pass.c for the whole model, parallel/mp_tp.c for a part), is
 * a call through a table of this shape, one table per device, so that the
 * model's code (and the runtimes that drive it) is written once and a
 * device brings its own kernels. The CPU's table (msr_kernels_cpu) is the
 * layers.h kernels themselves; a model uses it unless told otherwise
 * (msr_gpt_set_kernels; the trainer's from msr_train_config_t.kernels).
 *
 * Each entry has the contract of the layers.h kernel of the same name
 * (the pointers are that kernel's buffers, on the table's device; token
 * and target tables are the host's), and the model calls each in the
 * order the CPU's kernels ran before the table, so a table that runs the
 * CPU's kernels gives the same bits. The products' context (prod:
 * precision, bf16 operand scratch, first failure) is handed through as
 * the model holds it. A MoE block runs its router's product, softmax
 * and top-k, its dispatch, its experts' products and activations, its
 * combine and the load-balancing loss's sums through it too
 * (model/moe_pass.c: the capacity's count, integer bookkeeping over the
 * host's index tables, is the one part on the host), and so do context
 * parallel's ring attention and the fold of a Llama's repeated kv heads'
 * gradients (parallel/mp_cp.c: the K/V columns packed and the kv heads
 * repeated by the device interface's copies) and the ends where tensor
 * parallel splits the vocabulary or sp and cp the sequence
 * (parallel/mp_tp.c). */
#ifndef MSR_MODEL_KERNELS_H
#define MSR_MODEL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "model/layers.h"

typedef struct msr_kernels {
    const char *name; /* the device's, for messages: "cpu" */

    /* ---- the block ---- */

    /* LayerNorm (out16: out rounded to bf16 beside it, or NULL) and
     * RMSNorm; their backwards add into dinp and the weights' gradients */
    void (*layernorm_forward)(float *out, uint16_t *out16, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias, int N,
                              int C);
    void (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *weight, int N,
                            int C);
    void (*rmsnorm_backward)(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C);

    /* the linear layers: out (N,OC) = inp (N,IC) weight^T + bias; the
     * backward writes dinp and adds to dweight and dbias */
    void (*matmul_forward)(msr_products_t *pr, float *out, const float *inp, const float *weight,
                           const float *bias, int N, int IC, int OC);
    void (*matmul_backward_set)(msr_products_t *pr, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight, int N,
                                int IC, int OC);
    /* the bf16 operand a kernel writing src (n) may round beside it for
     * the product that reads src next (NULL: none; layers.h) */
    uint16_t *(*operand)(msr_products_t *pr, const float *src, size_t n);

    /* causal attention on qkv (B,T,3C), and grouped-query attention on a
     * Llama's qkv (B,T,C + 2 KVC); the backwards' dqkv: _set writes it,
     * gqa adds to it */
    void (*attention_forward)(msr_products_t *pr, float *out, float *att, const float *qkv, int B,
                              int T, int C, int NH);
    void (*attention_backward_set)(msr_products_t *pr, float *dqkv, float *scratch,
                                   const float *dout, const float *qkv, const float *att, int B,
                                   int T, int C, int NH);
    void (*attention_gqa_forward)(msr_products_t *pr, float *out, float *att, const float *qkv,
                                  int B, int T, int C, int NH, int KVH);
    void (*attention_gqa_backward)(msr_products_t *pr, float *dqkv, float *scratch,
                                   const float *dout, const float *qkv, const float *att, int B,
                                   int T, int C, int NH, int KVH);
    /* context parallel's ring attention: one K/V block folded into a
     * query block's running sums, the sums finished into the output and
     * its logsumexp; the backward's per-head row sums, and one block's
     * share of the gradients (dq, dk, dv added to) */
    void (*ring_forward)(msr_products_t *pr, float *acc, float *mx, float *sum, const float *q,
                         int ldq, const int *qpos, int Tq, const float *k, const float *v, int ldk,
                         const int *kpos, int Tk, int C, int NH, float *scratch);
    void (*ring_finish)(float *out, float *lse, const float *mx, const float *sum, int Tq, int C,
                        int NH);
    void (*ring_delta)(float *delta, const float *dout, const float *out, int Tq, int C, int NH);
    void (*ring_backward)(msr_products_t *pr, float *dq, int ldq, float *dk, float *dv, int ldk,
                          const float *dout, const float *q, const float *k, const float *v,
                          const float *lse, const float *delta, const int *qpos, int Tq,
                          const int *kpos, int Tk, int C, int NH, float *scratch);
    /* the ring under grouped-query attention: the backward of repeating
     * each of the KVH kv heads for its NH / KVH query heads, S rows of
     * dkv (S, 2 KVH HS: K's heads, then V's) += each group's columns of
     * dx (S, 2C) summed, HS = C / NH, in head order */
    void (*ring_fold_kv)(float *dkv, const float *dx, int S, int C, int NH, int KVH);
    /* dst (rows, ld_dst) += src (rows, ld_src), the first n columns of
     * each row: the ring's K/V gradients into the rows of dqkv */
    void (*add_rows)(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                     size_t n);
    /* rotary positions in place (dir 1) or back (-1) */
    void (*rope)(float *x, int ld, int B, int T, int t0, int H, int HS, double theta, int dir);

    /* the MLP's activations: GELU (out16 and dinp16 as out16 above) and
     * SwiGLU (inp (N,2F) -> out (N,F); its backward adds to dinp) */
    void (*gelu_forward)(float *out, uint16_t *out16, const float *inp, size_t n);
    void (*gelu_backward_set)(float *dinp, uint16_t *dinp16, const float *inp, const float *dout,
                              size_t n);
    /* dinp (n) += gelu'(inp) * dout: a MoE expert's, into its zeroed rows */
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    void (*swiglu_forward)(float *out, const float *inp, int N, int F);
    void (*swiglu_backward)(float *dinp, const float *inp, const float *dout, int N, int F);

    /* out (n) = a + b: the residual adds */
    void (*residual)(float *out, const float *a, const float *b, size_t n);
    /* x (N,C) += bias (C) on each row: a row-parallel layer's bias, added
     * once after its reduction under tp */
    void (*add_bias)(float *x, const float *bias, size_t N, int C);
    /* db (C) += the column sums of d (N,C): that bias's gradient */
    void (*add_colsum)(float *db, const float *d, size_t N, int C);
    /* x (n) = 0: a gradient the next kernel adds into */
    void (*zero)(float *x, size_t n);

    /* ---- a MoE layer's routing and combine: layers.h's msr_moe_* (its
     * index tables, choice and row, and frac and the sums P are the
     * host's: the device's host memory, which an entry that writes one
     * has written when it returns) ---- */

    void (*moe_route)(float *probs, int *choice, float *gate, int N, int E, int K, int renorm);
    void (*moe_prob_sums)(double *P, const float *probs, int N, int E);
    void (*moe_dispatch)(float *send, const float *x, const int *row, int N, int K, int C);
    void (*moe_dispatch_backward)(float *dx, const float *dsend, const int *row, int N, int K,
                                  int C);
    void (*moe_combine)(float *y, const float *comb, const int *row, const float *gate, int N,
                        int K, int C);
    void (*moe_combine_backward)(float *dcomb, float *dgate, const float *dy, const float *comb,
                                 const int *row, const float *gate, int N, int K, int C);
    void (*moe_route_backward)(float *dprobs, float *dgate, const float *probs, const float *gate,
                               const int *choice, const double *frac, double daux, int N, int E,
                               int K, int renorm);

    /* ---- the model's ends ---- */

    /* the head's backward: as matmul_backward_set, but dinp is added to */
    void (*matmul_backward)(msr_products_t *pr, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight, int N, int IC,
                            int OC);
    /* the GPT's embeddings, wte rows plus wpe rows (B,T,C), and their
     * backward (dwte and dwpe added to); a Llama's, wte rows alone (N,C) */
    void (*encoder_forward)(float *out, const int *inp, const float *wte, const float *wpe, int B,
                            int T, int C);
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int *inp, int B,
                             int T, int C);
    void (*embedding_forward)(float *out, const int *inp, const float *wte, int N, int C);
    void (*embedding_backward)(float *dwte, const float *dout, const int *inp, int N, int C);
    /* softmax and cross-entropy fused: losses (N) and probs (N,V) from
     * logits; the backward adds to dlogits */
    void (*crossentropy_forward)(float *losses, float *probs, const float *logits,
                                 const int *targets, int N, int V);
    void (*crossentropy_backward)(float *dlogits, const float *probs, const int *targets,
                                  float dloss, int N, int V);

    /* ---- the ends split over ranks (tp's vocabulary, sp's and cp's
     * sequence): layers.h's msr_positions_*, msr_embedding_backward_rows
     * and msr_vocab_* ---- */

    void (*positions_forward)(float *out, const float *x, const float *wpe, const int *pos, int t0,
                              int B, int T, int C);
    void (*positions_backward)(float *dwpe, const float *dout, const int *pos, int t0, int B, int T,
                               int C);
    void (*embedding_backward_rows)(float *dwte, const float *dout, const int *inp, int lo, int V,
                                    size_t N, int C);
    void (*vocab_max)(float *rmax, const float *logits, size_t N, int V);
    void (*vocab_exp_sums)(float *probs, float *red, const float *logits, const float *rmax,
                           const int *targets, int lo, size_t N, int V);
    void (*vocab_loss)(float *probs, float *losses, const float *rmax, const float *red, size_t N,
                       int V);
    void (*vocab_fold)(float *M, float *S, float *Z, const float *m, const float *red, size_t N,
                       int first);
    void (*vocab_crossentropy_backward)(float *dlogits, const float *probs, const int *targets,
                                        int lo, float dloss, size_t N, int V);
} msr_kernels_t;

/* The CPU's table: the layers.h kernels (every vector path they choose). */
const msr_kernels_t *msr_kernels_cpu(void);

/* k, or the CPU's table where k is NULL (a model's or block's default). */
const msr_kernels_t *msr_kernels_or_cpu(const msr_kernels_t *k);

/* The entries of a table (every member but name), for checks that walk
 * them: how many, each one's name (NULL past the last) and its offset in
 * the table. */
size_t msr_kernels_entries(void);
const char *msr_kernels_entry_name(size_t i);
size_t msr_kernels_entry_offset(size_t i);
/* The name of k's first entry that is NULL, or NULL when every entry is
 * set (a table a model may run: msr_gpt_set_kernels refuses others). */
const char *msr_kernels_missing(const msr_kernels_t *k);

#endif
