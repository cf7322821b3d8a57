/* Matrix products of bf16 operands with fp32 results:
 *
 *   C (M, N) = alpha * op(A) (M, K) . op(B) (K, N) + beta * C
 *
 * row-major as cblas_sgemm(CblasRowMajor, ...) is called by the layers
 * (op(X) = X, or X transposed when trans_x), A and B bf16, C fp32, sums in
 * fp32. beta = 0 ignores C's old contents (NaN included), as BLAS does.
 *
 * Paths, one chosen per context at creation:
 *   blas    the project's own: blocks of A and B widened to fp32 (exact)
 *           into the context's buffers (at most 18 MiB, whatever the
 *           sizes), then cblas_sgemm. On every
 *           CPU the result is an fp32 product of the bf16 inputs: within
 *           gamma(K+2) = (K+2)u / (1 - (K+2)u), u = 2^-24, of
 *           |alpha| sum_k |a_ik b_kj| + |beta c_ij| (docs/model.md, "bf16
 *           products", derives it).
 *   onednn  oneDNN's bf16 matmul primitive (only in a build that found
 *           oneDNN); it uses the CPU's bf16 instructions where there are
 *           some, and MSRUN_CPU_DISABLE caps the instruction set it may use.
 *           oneDNN 2.x has no bf16 matmul below avx512_core: there the
 *           path is refused at creation (MSR_ERR_UNSUPPORTED).
 * MSR_GEMM_BF16_AUTO takes MSRUN_BF16_GEMM ("blas" or "onednn") when set
 * (unset, empty or "auto": the default), otherwise the default: onednn
 * where the CPU has avx512_bf16 (after MSRUN_CPU_DISABLE) and the build has
 * oneDNN, about 4 times blas there; blas elsewhere, the faster on a CPU
 * without bf16 units (docs/model.md has the measurements).
 *
 * A context belongs to one thread at a time. */
#ifndef MSR_MODEL_GEMM_BF16_H
#define MSR_MODEL_GEMM_BF16_H

#include <stdbool.h>
#include <stdint.h>

#include "msrun/base.h"

typedef enum msr_gemm_bf16_path {
    MSR_GEMM_BF16_AUTO = 0,
    MSR_GEMM_BF16_BLAS = 1,
    MSR_GEMM_BF16_ONEDNN = 2,
} msr_gemm_bf16_path_t;

typedef struct msr_gemm_bf16 msr_gemm_bf16_t;

/* Creates a context for path (AUTO: see above). MSR_ERR_UNSUPPORTED for
 * onednn in a build without oneDNN or on a CPU it has no bf16 matmul for, MSR_ERR_INVALID_ARG for a
 * bad MSRUN_BF16_GEMM or MSRUN_CPU_DISABLE, MSR_ERR_NO_MEMORY, MSR_ERR_BACKEND when oneDNN fails to
 * start; each logged. *g_p is written only on success. */
msr_status_t msr_gemm_bf16_create(msr_gemm_bf16_path_t path, msr_gemm_bf16_t **g_p);

/* The path AUTO takes under cpu_features (msr_cpu_features_get) and, when
 * why_p is not NULL, why: a static sentence. MSR_ERR_INVALID_ARG (logged)
 * for a bad MSRUN_BF16_GEMM. */
msr_status_t msr_gemm_bf16_auto(unsigned cpu_features, msr_gemm_bf16_path_t *path_p,
                                const char **why_p);

/* Frees the context; NULL does nothing. */
void msr_gemm_bf16_destroy(msr_gemm_bf16_t *g);

/* The path the context runs (never AUTO). */
msr_gemm_bf16_path_t msr_gemm_bf16_path(const msr_gemm_bf16_t *g);

/* "blas", "onednn", "auto"; "?" otherwise. */
const char *msr_gemm_bf16_path_name(msr_gemm_bf16_path_t path);

/* For onednn: the implementation oneDNN chose for the last product, e.g.
 * "brg:avx512_core_bf16" or "ref:any"; for blas "blas"; "" before any. */
const char *msr_gemm_bf16_impl(const msr_gemm_bf16_t *g);

/* The product above. Leading dimensions as cblas's row-major ones: lda at
 * least K (or M when trans_a), ldb at least N (or K when trans_b), ldc at
 * least N, and at least 1. MSR_ERR_INVALID_ARG for a negative size or a
 * short leading dimension, MSR_ERR_NO_MEMORY when the blas path cannot
 * grow its buffers (C untouched), MSR_ERR_BACKEND when oneDNN fails (C
 * then unspecified); each logged. M, N or K 0 is valid (K 0: C = beta * C). */
msr_status_t msr_gemm_bf16(msr_gemm_bf16_t *g, bool trans_a, bool trans_b, int M, int N, int K,
                           float alpha, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                           float beta, float *C, int ldc);

/* C (M, N) = op(A) op(B) + bias, bias (N) added to every row of C (NULL:
 * none): a linear layer's forward, alpha 1 and beta 0, so C's old contents
 * are never read. The blas path fills C with the bias and accumulates into
 * it (the bits of msr_gemm_bf16 with beta 1 on C filled so); onednn passes
 * the bias to the primitive, which adds it to the sums as it stores them
 * (no fill, no read of C). Shapes and errors as msr_gemm_bf16. */
msr_status_t msr_gemm_bf16_bias(msr_gemm_bf16_t *g, bool trans_a, bool trans_b, int M, int N, int K,
                                const uint16_t *A, int lda, const uint16_t *B, int ldb,
                                const float *bias, float *C, int ldc);

#endif
