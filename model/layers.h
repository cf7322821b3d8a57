/* The transformer's layer kernels, forward and backward, on plain arrays.
 *
 * Every kernel works on row-major tensors whose shapes are written beside
 * them: N is the number of token rows (B * T), C the channels. Backward
 * kernels ACCUMULATE (+=) into every gradient they produce, inputs' and
 * parameters' alike, so the caller zeroes gradient buffers once and residual
 * branches add up by themselves. Each kernel sums in a fixed order, so the
 * same inputs give bitwise the same outputs (given the same BLAS and thread
 * count).
 *
 * The kernels take their sizes as arguments and never allocate, so a tensor-
 * parallel layer can call them on its slice (fewer heads, a column block of a
 * weight) and a recomputing layer can call the forward again in backward.
 *
 * The kernels with matrix products take a products context first (below:
 * NULL is fp32). Each kernel exists twice, compiled from one body (layers_impl.h): in float
 * (msr_<kernel>, what the model runs) and in double (msr_<kernel>_f64, what
 * the gradient tests compare against finite differences). Thread-safe: they
 * touch only their arguments. */
#ifndef MSR_MODEL_LAYERS_H
#define MSR_MODEL_LAYERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"

/* ---- precision of the matrix products ----
 *
 * The float kernels' matrix products (every GEMM below: the linear layers'
 * forward and both backward products, attention's q.k and a.v and their
 * backward products, the head) run through a products context. NULL, or a
 * context of MSR_PRECISION_FP32, is plain cblas_sgemm. A context of
 * MSR_PRECISION_BF16 rounds both operands to bf16 (nearest, ties to even)
 * into its scratch and multiplies them with msr_gemm_bf16 (model/
 * gemm_bf16.h): bf16 inputs, fp32 sums and fp32 results. Everything else the
 * kernels do (layernorm, softmax, GELU, the loss, attention's row sums) stays
 * fp32, and so do the parameters (the fp32 masters: the weights are rounded
 * at each product, or once a step with msr_products_keep_weights below;
 * docs/model.md "bf16 training").
 *
 * The kernels return nothing, so a product that fails (out of memory for
 * the scratch or the bf16 path's buffers, a oneDNN failure) records its
 * status in the context, logged once, and leaves its output unspecified:
 * the model checks msr_products_status after each pass. The scratch grows
 * to the largest operand the model multiplies, two of them (A and B), and
 * never beyond. A context belongs to one thread at a time, as its model. */
typedef enum msr_precision {
    MSR_PRECISION_FP32 = 0,
    MSR_PRECISION_BF16 = 1,
} msr_precision_t;

typedef struct msr_products msr_products_t;

/* "fp32", "bf16"; "?" otherwise. */
const char *msr_precision_name(msr_precision_t precision);
/* Parses "fp32" or "bf16" into *precision_p (written only on success);
 * MSR_ERR_INVALID_ARG otherwise, not logged (the caller says which option). */
msr_status_t msr_precision_parse(const char *text, msr_precision_t *precision_p);

/* Creates a context for precision. For bf16 on a CPU without bf16 units
 * (no avx512_bf16) it says once per process, at info level, that the
 * products run on the slower widened-to-fp32 path: never an illegal
 * instruction. Errors (logged): those of msr_gemm_bf16_create,
 * MSR_ERR_NO_MEMORY, MSR_ERR_INVALID_ARG for an unknown precision. *p_p is
 * written only on success. */
msr_status_t msr_products_create(msr_precision_t precision, msr_products_t **p_p);
/* Frees the context; NULL does nothing. */
void msr_products_destroy(msr_products_t *p);
/* The context's precision; MSR_PRECISION_FP32 for NULL. */
msr_precision_t msr_products_precision(const msr_products_t *p);
/* The first failure of a product since creation (MSR_OK: none; NULL: OK).
 * Sticky: a pass that saw a failure is not to be trusted. */
msr_status_t msr_products_status(const msr_products_t *p);

/* The bytes of bf16 operand scratch the context holds now: the largest
 * op(A) and op(B) storage it has rounded, and the weights' copies of
 * msr_products_keep_weights, 2 bytes an element (0 for fp32 and NULL). The
 * bf16 path's own buffers (model/gemm_bf16.h) come on top. */
size_t msr_products_scratch_bytes(const msr_products_t *p);

/* ---- the weights rounded once a step ----
 *
 * A weight's bf16 rounding can be kept for a step, as autocast caches its
 * cast weights: keep_weights gives the context a bf16 copy of params (n
 * elements, 2n bytes, counted in msr_products_scratch_bytes). Between
 * weights_begin and weights_end (a training step: every micro-batch's
 * forward, recompute and backward) msr_products_linear and
 * msr_products_linear_backward round a weight (OC,IC) lying inside params
 * once, into the copy, and take it from there afterwards; outside params,
 * and outside a step, they round it at each product as before. The bits are
 * the same either way, so nothing may write params between begin and end
 * (the optimizer runs after end; ZeRO-3 and the parameters' offload, whose
 * weights live in buffers reused for other weights, keep none: they pass no
 * params). Both calls drop every kept rounding. keep_weights does nothing
 * for NULL or fp32; params NULL or n 0 frees the copy. Errors (logged):
 * MSR_ERR_NO_MEMORY, the context unchanged. */
msr_status_t msr_products_keep_weights(msr_products_t *p, const float *params, size_t n);
void msr_products_weights_begin(msr_products_t *p);
void msr_products_weights_end(msr_products_t *p);

/* The product every float kernel calls: cblas_sgemm's row-major form,
 * C (M,N) = alpha op(A) op(B) + beta C, in p's precision (above). */
void msr_products_sgemm(msr_products_t *p, int trans_a, int trans_b, int M, int N, int K,
                        float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                        float *C, int ldc);

/* out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC) (NULL: none), the
 * linear layer's forward in p's precision. fp32 fills out with the bias and
 * accumulates the product into it (cblas_sgemm, beta 1); bf16 hands the
 * bias to msr_gemm_bf16_bias, which adds it as the sums are stored on the
 * onednn path (no fill and no read of out) and as fp32 does on blas. */
void msr_products_linear(msr_products_t *p, float *out, const float *inp, const float *weight,
                         const float *bias, int N, int IC, int OC);
/* dinp (N,IC) = dout (N,OC) @ weight (OC,IC) + beta dinp (beta 1 adds to
 * dinp, 0 writes it without reading it) and dweight (OC,IC) += dout^T @ inp
 * (N,IC), the linear layer's two backward products in p's precision; dinp
 * overlaps none of the inputs. bf16 rounds dout once for both (the same
 * bf16 operands as two msr_products_sgemm calls, so the same bits). */
void msr_products_linear_backward(msr_products_t *p, float beta, float *dinp, float *dweight,
                                  const float *dout, const float *inp, const float *weight, int N,
                                  int IC, int OC);

/* The bf16 operand the next product may take instead of rounding src (n
 * elements, packed rows): a kernel that makes src can write src's rounding
 * there (msr_bf16_from_f32 of each element, the same bits the product would
 * make) in the pass that writes src, and save the product a pass over it.
 * The handover lasts for the next product of p only: msr_products_linear
 * with inp == src and N * IC == n takes it (and rounds only the weight),
 * msr_products_linear_backward with dout == src and N * OC == n likewise
 * (and rounds only inp and the weight), msr_products_sgemm with A's
 * storage (transposed or not) inside src's n elements, its rows lda apart
 * in src's layout: all of src, packed, or a block of it, such as the
 * rows [r0, r0 + m) and columns [0, c) of a (T,T) src with lda T (and
 * rounds only B); any other product, or another call of this, drops it,
 * so nothing may write src or call p between the kernel and its product.
 * The scratch grows to n elements, as the product that reads all of src
 * would grow it, so its --report bytes stay those of the products. Returns
 * NULL (nothing handed over: the kernel writes fp32 only) for NULL, an
 * fp32 context, n 0, or when the scratch cannot grow (logged). */
uint16_t *msr_products_operand(msr_products_t *p, const float *src, size_t n);
/* Hands src's rounding (n elements) over for one more product, when the
 * product just run took it as handed over (which leaves it in place):
 * true then, and the next product takes it under the rule above; false
 * otherwise (nothing handed over: the next product rounds src itself).
 * src must not have changed since it was rounded. */
bool msr_products_operand_again(msr_products_t *p, const float *src, size_t n);

/* An operand rounded once for several products: hold rounds src (n
 * elements) into slot's own buffer, and until release(slot) every product
 * (msr_products_sgemm) whose A or B storage lies inside src's n elements,
 * its rows lda or ldb apart in src's layout, takes its bf16 operand from
 * there instead of rounding it (a handed-over A, above, comes first):
 * attention rounds q, k and v once per call where each head's blocks of
 * rows would round them again (the same bits, as the rounding is per
 * element). src must not change while held. Slots are independent, holding
 * a slot again replaces its source. Each slot's buffer grows to the largest
 * it has held and is kept (counted in msr_products_scratch_bytes). Returns
 * false (nothing held: the products round src themselves, as before) for
 * NULL, an fp32 context, a slot outside [0, MSR_PRODUCTS_HOLDS), n 0, or
 * when the buffer cannot grow (logged). release does nothing for NULL or
 * a free slot. */
#define MSR_PRODUCTS_HOLDS 2
bool msr_products_hold(msr_products_t *p, int slot, const float *src, size_t n);
void msr_products_release(msr_products_t *p, int slot);

/* msr_layernorm_forward, and out16 (N,C) = out rounded to bf16 in the same
 * pass (a row at a time); msr_gelu_forward and out16 (n) likewise. out16
 * NULL: the fp32 kernel alone. Bitwise out as the fp32 kernels, out16 as
 * msr_bf16_from_f32_n on that out, on every CPU path. Typically out16 =
 * msr_products_operand(p, out, ...) ahead of out's product. */
void msr_layernorm_forward_bf16(float *out, uint16_t *out16, float *mean, float *rstd,
                                const float *inp, const float *weight, const float *bias, int N,
                                int C);
void msr_gelu_forward_bf16(float *out, uint16_t *out16, const float *inp, size_t n);
/* msr_gelu_backward, and dinp16 (n) = the accumulated dinp rounded to bf16
 * in the same pass (a block at a time): the output gradient of the product
 * that follows in backward. dinp16 NULL: the fp32 kernel alone. Bitwise
 * dinp as msr_gelu_backward, dinp16 as msr_bf16_from_f32_n on that dinp. */
void msr_gelu_backward_bf16(float *dinp, uint16_t *dinp16, const float *inp, const float *dout,
                            size_t n);
/* msr_gelu_backward_bf16 on a dinp of zeros, dinp's old contents never
 * read: each block is zeroed just before its kernel, in the L1 cache, where
 * zeroing all of dinp first was a pass of its own. The same bits. */
void msr_gelu_backward_set_bf16(float *dinp, uint16_t *dinp16, const float *inp, const float *dout,
                                size_t n);

/* LayerNorm's epsilon, as in GPT-2 and torch.nn.LayerNorm's default. */
#define MSR_LAYERNORM_EPS 1e-5

/* out[b,t,:] = wte[inp[b,t],:] + wpe[t,:].
 * out (B,T,C), inp (B,T) tokens in [0, V), wte (V,C), wpe (maxT,C), T <= maxT. */
void msr_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B,
                         int T, int C);
/* dwte (V,C) += and dwpe (maxT,C) += the rows of dout (B,T,C). */
void msr_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T,
                          int C);

/* out = (inp - mean) * rstd * weight + bias, per row.
 * out (N,C), mean (N), rstd (N) (kept for backward), inp (N,C), weight (C), bias (C). */
void msr_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C);
/* dinp (N,C) +=, dweight (C) +=, dbias (C) +=. */
void msr_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C);

/* out = inp @ weight^T + bias, as torch.nn.Linear.
 * out (N,OC), inp (N,IC), weight (OC,IC), bias (OC) or NULL. */
void msr_matmul_forward(msr_products_t *pr, float *out, const float *inp, const float *weight,
                        const float *bias, int N, int IC, int OC);
/* dinp (N,IC) += dout @ weight, dweight (OC,IC) += dout^T @ inp, dbias (OC) +=
 * the column sums of dout (N,OC); dbias may be NULL. */
void msr_matmul_backward(msr_products_t *pr, float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp, const float *weight, int N, int IC,
                         int OC);
/* As msr_matmul_backward, but dinp (N,IC) = dout @ weight is written, its
 * old contents never read (the product's beta is 0): where dinp would be
 * zeroed first, that pass over it is saved. The bits of msr_matmul_backward
 * on a zeroed dinp but for the sign of a zero: a sum that is -0 stays -0
 * where 0 + (-0) made it +0. */
void msr_matmul_backward_set(msr_products_t *pr, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight, int N,
                             int IC, int OC);

/* Causal multi-head self-attention on packed q, k, v.
 * out (B,T,C), att (B,NH,T,T) the softmax of each query row (zero above the
 * diagonal; kept for backward), qkv (B,T,3C) laid out [q | k | v] with head h
 * in columns [h*HS, (h+1)*HS) of each, HS = C / NH. C is the total width of
 * the heads given here (a tensor-parallel rank passes its own heads). */
void msr_attention_forward(msr_products_t *pr, float *out, float *att, const float *qkv, int B,
                           int T, int C, int NH);
/* dqkv (B,T,3C) +=. scratch: T*T floats of work space. */
void msr_attention_backward(msr_products_t *pr, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *att, int B, int T, int C, int NH);
/* As msr_attention_backward, but dqkv is written, its old contents never
 * read: the bits of msr_attention_backward on a zeroed dqkv but for the
 * sign of a zero sum (as msr_matmul_backward_set). */
void msr_attention_backward_set(msr_products_t *pr, float *dqkv, float *scratch, const float *dout,
                                const float *qkv, const float *att, int B, int T, int C, int NH);

/* The same with grouped-query attention: qkv (B,T,C + 2 KVC) laid out
 * [q (C) | k (KVC) | v (KVC)], KVC = KVH * HS, KVH dividing NH; query head
 * h reads key/value head h / (NH/KVH). KVH = NH is the kernel above. */
void msr_attention_gqa_forward(msr_products_t *pr, float *out, float *att, const float *qkv, int B,
                               int T, int C, int NH, int KVH);
/* dqkv (B,T,C + 2 KVC) +=; a key/value head's gradient sums its query heads'. */
void msr_attention_gqa_backward(msr_products_t *pr, float *dqkv, float *scratch, const float *dout,
                                const float *qkv, const float *att, int B, int T, int C, int NH,
                                int KVH);

/* Ring attention (context parallel, parallel/mp.h): causal attention of a
 * rank's queries computed one block of keys and values at a time, the
 * blocks in any order, with the causal mask taken from global positions.
 * Per sequence and for NH heads of width HS = C / NH:
 *   q (Tq,C) with row stride ldq, qpos (Tq) the queries' global positions;
 *   k, v (Tk,C) with row stride ldk, kpos (Tk) the keys' positions;
 *   acc (Tq,C) the unnormalised output; mx, sum (Tq,NH) the running row
 *   maxima and sums of exponentials (start: acc 0, mx -inf, sum 0).
 * forward folds one block into acc, mx and sum (the online softmax);
 * scratch: Tq*Tk. After the last block, finish turns acc into the output
 * (in place: out may be acc) and leaves lse (Tq,NH) = mx + log(sum), all
 * that backward needs besides q, k, v and the output. Every query must
 * have seen at least one key by then (its own position does). */
void msr_attention_ring_forward(msr_products_t *pr, float *acc, float *mx, float *sum,
                                const float *q, int ldq, const int *qpos, int Tq, const float *k,
                                const float *v, int ldk, const int *kpos, int Tk, int C, int NH,
                                float *scratch);
void msr_attention_ring_finish(float *out, float *lse, const float *mx, const float *sum, int Tq,
                               int C, int NH);
/* delta (Tq,NH) = the per-head row sums of dout * out, both (Tq,C): once
 * per query block, before its backward steps. */
void msr_attention_ring_delta(float *delta, const float *dout, const float *out, int Tq, int C,
                              int NH);
/* One block's backward: dq (Tq,C, stride ldq) +=, and dk, dv (Tk,C, stride
 * ldk) += the block's share of the gradients; dout (Tq,C) the output's
 * gradient. scratch: 2*Tq*Tk. Summing over every block gives the full
 * attention's gradients. */
void msr_attention_ring_backward(msr_products_t *pr, float *dq, int ldq, float *dk, float *dv,
                                 int ldk, const float *dout, const float *q, const float *k,
                                 const float *v, const float *lse, const float *delta,
                                 const int *qpos, int Tq, const int *kpos, int Tk, int C, int NH,
                                 float *scratch);

/* GELU, tanh approximation (torch's approximate="tanh"). out, inp (n).
 * The float forms (model/gelu.c) compute exp themselves (within an ulp of
 * the true value), on the widest vector path msr_cpu_features_get()
 * allows (AVX-512F, AVX2, or any CPU's 4 lanes; model/simd_paths.h): the
 * same bits on every path and at every position, so neither the CPU nor
 * where a tensor is cut changes a result. The _scalar forms are the plain
 * loops, for tests that compare the paths. */
void msr_gelu_forward(float *out, const float *inp, size_t n);
/* dinp (n) += gelu'(inp) * dout. */
void msr_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void msr_gelu_forward_scalar(float *out, const float *inp, size_t n);
void msr_gelu_backward_scalar(float *dinp, const float *inp, const float *dout, size_t n);
/* The exp they use: within 1 ulp of exp(x); NaN stays NaN. */
float msr_gelu_exp(float x);
/* A softmax row's exponentials with that exp: x[j] = exp(x[j] - mx) for
 * j < n, returning their sum, added as 16 running sums (sum l takes x[l],
 * x[l + 16], ... of the whole blocks of 16, in order), those added in
 * order, then the elements past the last whole block in order: the same
 * bits on every path (the float attention's softmax, model/layers_impl.h,
 * whose rows are vectors for it). The _scalar form is the plain loop. */
float msr_softmax_exp_sum(float *x, float mx, size_t n);
float msr_softmax_exp_sum_scalar(float *x, float mx, size_t n);

/* out = a + b, all (n). Its backward adds dout to both gradients, which the
 * model does by passing one buffer along (see gpt.c). */
void msr_residual_forward(float *out, const float *a, const float *b, size_t n);

/* ---- the Llama block's kernels (docs/model.md "Llama") ---- */

/* RMSNorm's epsilon, as Llama 2's (torch's LlamaRMSNorm default is 1e-6;
 * the PyTorch test passes this one). */
#define MSR_RMSNORM_EPS 1e-5

/* out (N,C) = wte[inp[n]] rows; inp (N) tokens in [0, V), wte (V,C). */
void msr_embedding_forward(float *out, const int *inp, const float *wte, int N, int C);
/* dwte (V,C) += the rows of dout (N,C). */
void msr_embedding_backward(float *dwte, const float *dout, const int *inp, int N, int C);
/* out (N,C) = inp * rstd * weight, rstd (N) = 1 / sqrt(mean(inp^2) + eps)
 * kept for backward; weight (C). No bias. */
void msr_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N,
                         int C);
/* dinp (N,C) +=, dweight (C) +=. */
void msr_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                          const float *weight, const float *rstd, int N, int C);

/* The float LayerNorm and RMSNorm (model/norm.c) sum each row in 16 fp32
 * lanes, folded in a fixed order, the elements past the last whole 16
 * added after in order; the kernels above run the widest path that
 * msr_cpu_features_get() allows. Every path gives the same bits, and a
 * row's results do not depend on the other rows. msr_norm_kernels gives
 * one path's kernels, NULL where the CPU (or MSRUN_CPU_DISABLE) rules it
 * out, for tests that compare the paths. */
typedef enum msr_norm_path {
    MSR_NORM_BASE,   /* any CPU: the compiler's plain vectors (SSE2 on x86-64) */
    MSR_NORM_AVX2,   /* avx2 */
    MSR_NORM_AVX512, /* avx512f */
} msr_norm_path_t;
typedef struct msr_norm_kernels {
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C);
    void (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *weight, int N,
                            int C);
    void (*rmsnorm_backward)(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C);
} msr_norm_kernels_t;
const msr_norm_kernels_t *msr_norm_kernels(msr_norm_path_t path);
/* out (N,F) = silu(gate) * up from inp (N,2F), rows [gate (F) | up (F)],
 * silu(a) = a / (1 + exp(-a)) with the GELU's exp on the widest vector
 * path (model/gelu.c): the same bits on every path; the _scalar forms are
 * the plain loops, for tests that compare the paths. */
void msr_swiglu_forward(float *out, const float *inp, int N, int F);
/* dinp (N,2F) += from dout (N,F). */
void msr_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);
void msr_swiglu_forward_scalar(float *out, const float *inp, int N, int F);
void msr_swiglu_backward_scalar(float *dinp, const float *inp, const float *dout, int N, int F);
/* Rotary positions in place on H heads of width HS (even) at the start of
 * each row of x (B,T, row stride ld): Hugging Face Llama's rotate_half
 * pairing (element i with i + HS/2, angle t * theta^(-2i/HS), t = t0 + the
 * row's index in its sequence: t0 0 for whole sequences, the cache's
 * length when generating). dir = 1 rotates, -1 rotates back (backward: a
 * gradient rotates back in place). */
void msr_rope_forward(float *x, int ld, int B, int T, int t0, int H, int HS, double theta, int dir);

/* ---- the model's ends split over ranks (model/split_ends.c) ----
 *
 * Where tensor parallel splits the vocabulary (a rank holds V of its
 * rows, from lo) or sequence or context parallel the sequence, the
 * model-parallel runtime (parallel/mp_tp.c) runs the ends in these
 * pieces, summing over the ranks between them. A row's position is
 * pos[t] where pos is given (context parallel's chunks), else t0 + t. */

/* out (B,T,C) = x + the position rows of wpe (maxT,C). */
void msr_positions_forward(float *out, const float *x, const float *wpe, const int *pos, int t0,
                           int B, int T, int C);
/* dwpe (maxT,C) += the rows of dout (B,T,C) at their positions. */
void msr_positions_backward(float *dwpe, const float *dout, const int *pos, int t0, int B, int T,
                            int C);
/* dwte (V,C) += the rows of dout (N,C) whose token is in [lo, lo + V),
 * at row token - lo; the other rows are skipped. */
void msr_embedding_backward_rows(float *dwte, const float *dout, const int *inp, int lo, int V,
                                 size_t N, int C);
/* rmax (N) = each row's largest of logits (N,V), this rank's slice. */
void msr_vocab_max(float *rmax, const float *logits, size_t N, int V);
/* probs (N,V) = exp(logits - rmax) (the row maxima summed to the whole
 * vocabulary's); red (2N): [0, N) the rows' sums of probs
 * (msr_softmax_exp_sum's), [N, 2N) each row's target logit where the
 * target is in this slice, else 0. */
void msr_vocab_exp_sums(float *probs, float *red, const float *logits, const float *rmax,
                        const int *targets, int lo, size_t N, int V);
/* With red summed over the slices: probs (N,V) divided by the row's sum,
 * losses (N) = rmax + log(sum) - the target logit. */
void msr_vocab_loss(float *probs, float *losses, const float *rmax, const float *red, size_t N,
                    int V);
/* A chunked head's fold (layout.h msr_layout_head_chunk) of a chunk's row
 * maxima m (N) and red (2N: its sums of exp(logits - m), then its target
 * logits, as msr_vocab_exp_sums writes them) into the running maxima M,
 * sums S and target logits Z (N each): M' = max(M, m), S' = S exp(M - M')
 * + s exp(m - M'), Z' = Z + z; first: M, S, Z = m, s, z (a copy). */
void msr_vocab_fold(float *M, float *S, float *Z, const float *m, const float *red, size_t N,
                    int first);
/* dlogits (N,V) += (probs - onehot(target - lo)) * dloss on this slice. */
void msr_vocab_crossentropy_backward(float *dlogits, const float *probs, const int *targets, int lo,
                                     float dloss, size_t N, int V);

/* Softmax and cross-entropy fused.
 * losses (N) = -log softmax(logits)[target], probs (N,V) the softmax (kept for
 * backward), logits (N,V), targets (N) in [0, V). */
void msr_crossentropy_forward(float *losses, float *probs, const float *logits, const int *targets,
                              int N, int V);
/* dlogits (N,V) += (probs - onehot(target)) * dloss, where dloss is the
 * gradient of the objective with respect to every token's loss (1 / (B*T)
 * for a mean). */
void msr_crossentropy_backward(float *dlogits, const float *probs, const int *targets, float dloss,
                               int N, int V);

/* ---- a MoE layer's routing and combine (model/moe_kernels.c) ----
 *
 * N tokens each choose K of E experts. The index tables (choice and row,
 * (N,K) each, token t's j-th at t * K + j) and frac are the host's: the
 * capacity's count, which assigns the rows, runs there. row is each
 * choice's row in the dispatch buffer (rows of C), -1 where it has none
 * (dropped by the capacity, or an expert another tp rank computes). */

/* The router's softmax and top-K: probs (N,E) holds the router's logits
 * and gets their softmax (max subtracted, exp, over the double sum); each
 * token's K most probable experts into choice, most probable first (ties:
 * the lower index), their probabilities into gate, and with renorm those
 * K divided by their sum (Mixtral: the softmax of the K chosen logits). */
void msr_moe_route(float *probs, int *choice, float *gate, int N, int E, int K, int renorm);
/* P (E, the host's, doubles) = each expert's probability summed over
 * the N tokens, in token order: the load-balancing loss's means. */
void msr_moe_prob_sums(double *P, const float *probs, int N, int E);
/* The dispatch: send's row row[t * K + j] = x's row t (N,C), for each
 * choice with a row; the others are left as they are. */
void msr_moe_dispatch(float *send, const float *x, const int *row, int N, int K, int C);
/* Its backward: dx (N,C) += the rows of dsend the token's choices have,
 * j in order. */
void msr_moe_dispatch_backward(float *dx, const float *dsend, const int *row, int N, int K, int C);
/* The combine: y (N,C) = the sum over j (in order, from zero) of
 * gate[t * K + j] times comb's row of that choice; choices with none
 * add nothing. */
void msr_moe_combine(float *y, const float *comb, const int *row, const float *gate, int N, int K,
                     int C);
/* Its backward from dy (N,C): dgate (N,K) = dy's row . comb's row of the
 * choice (0 where it has none), and dcomb's row of each choice = gate *
 * dy's row (the other rows left as they are). */
void msr_moe_combine_backward(float *dcomb, float *dgate, const float *dy, const float *comb,
                              const int *row, const float *gate, int N, int K, int C);
/* The router's backward to its logits: dprobs (N,E) = softmax's backward
 * of (daux * frac[e] + the gates' gradients at their experts), frac
 * (E, the host's) each expert's share of the choices; with renorm, the
 * gates' renormalisation's backward first, in place in dgate. probs,
 * gate and choice as msr_moe_route left them. */
void msr_moe_route_backward(float *dprobs, float *dgate, const float *probs, const float *gate,
                            const int *choice, const double *frac, double daux, int N, int E, int K,
                            int renorm);

/* ---- the same kernels in double, for the gradient tests ---- */
void msr_encoder_forward_f64(double *out, const int *inp, const double *wte, const double *wpe,
                             int B, int T, int C);
void msr_encoder_backward_f64(double *dwte, double *dwpe, const double *dout, const int *inp, int B,
                              int T, int C);
void msr_layernorm_forward_f64(double *out, double *mean, double *rstd, const double *inp,
                               const double *weight, const double *bias, int N, int C);
void msr_layernorm_backward_f64(double *dinp, double *dweight, double *dbias, const double *dout,
                                const double *inp, const double *weight, const double *mean,
                                const double *rstd, int N, int C);
void msr_matmul_forward_f64(double *out, const double *inp, const double *weight,
                            const double *bias, int N, int IC, int OC);
void msr_matmul_backward_f64(double *dinp, double *dweight, double *dbias, const double *dout,
                             const double *inp, const double *weight, int N, int IC, int OC);
void msr_attention_forward_f64(double *out, double *att, const double *qkv, int B, int T, int C,
                               int NH);
void msr_attention_backward_f64(double *dqkv, double *scratch, const double *dout,
                                const double *qkv, const double *att, int B, int T, int C, int NH);
void msr_attention_ring_forward_f64(double *acc, double *mx, double *sum, const double *q, int ldq,
                                    const int *qpos, int Tq, const double *k, const double *v,
                                    int ldk, const int *kpos, int Tk, int C, int NH,
                                    double *scratch);
void msr_attention_ring_finish_f64(double *out, double *lse, const double *mx, const double *sum,
                                   int Tq, int C, int NH);
void msr_attention_ring_delta_f64(double *delta, const double *dout, const double *out, int Tq,
                                  int C, int NH);
void msr_attention_ring_backward_f64(double *dq, int ldq, double *dk, double *dv, int ldk,
                                     const double *dout, const double *q, const double *k,
                                     const double *v, const double *lse, const double *delta,
                                     const int *qpos, int Tq, const int *kpos, int Tk, int C,
                                     int NH, double *scratch);
void msr_attention_gqa_forward_f64(double *out, double *att, const double *qkv, int B, int T, int C,
                                   int NH, int KVH);
void msr_attention_gqa_backward_f64(double *dqkv, double *scratch, const double *dout,
                                    const double *qkv, const double *att, int B, int T, int C,
                                    int NH, int KVH);
void msr_embedding_forward_f64(double *out, const int *inp, const double *wte, int N, int C);
void msr_embedding_backward_f64(double *dwte, const double *dout, const int *inp, int N, int C);
void msr_rmsnorm_forward_f64(double *out, double *rstd, const double *inp, const double *weight,
                             int N, int C);
void msr_rmsnorm_backward_f64(double *dinp, double *dweight, const double *dout, const double *inp,
                              const double *weight, const double *rstd, int N, int C);
void msr_swiglu_forward_f64(double *out, const double *inp, int N, int F);
void msr_swiglu_backward_f64(double *dinp, const double *inp, const double *dout, int N, int F);
void msr_rope_forward_f64(double *x, int ld, int B, int T, int t0, int H, int HS, double theta,
                          int dir);
void msr_gelu_forward_f64(double *out, const double *inp, size_t n);
void msr_gelu_backward_f64(double *dinp, const double *inp, const double *dout, size_t n);
void msr_residual_forward_f64(double *out, const double *a, const double *b, size_t n);
void msr_crossentropy_forward_f64(double *losses, double *probs, const double *logits,
                                  const int *targets, int N, int V);
void msr_crossentropy_backward_f64(double *dlogits, const double *probs, const int *targets,
                                   double dloss, int N, int V);

#endif
