/* The bf16 products' paths as an ops table (model/gemm_bf16.c). */
#ifndef MSR_MODEL_GEMM_BF16_IMPL_H
#define MSR_MODEL_GEMM_BF16_IMPL_H

#include "model/gemm_bf16.h"

/* One path. Arguments are checked by msr_gemm_bf16 (or _bias) before run
 * is called, and M, N, K are all positive. bias (N) is added to every row
 * of C, or NULL; with a bias, alpha is 1 and beta 0. */
typedef struct msr_gemm_bf16_ops {
    /* allocates the path's state into *state_p; logs its failures */
    msr_status_t (*create)(unsigned cpu_features, void **state_p);
    void (*destroy)(void *state);
    msr_status_t (*run)(void *state, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                        const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                        const float *bias, float *C, int ldc);
    /* the implementation last used ("" before any run) */
    const char *(*impl)(const void *state);
    /* NULL where the path can run in this process, else why not (a library
     * it loads on first use that cannot be loaded); a NULL function: always */
    const char *(*missing)(void);
} msr_gemm_bf16_ops_t;

/* oneDNN's, in a build that has it (gemm_bf16_onednn.c); NULL otherwise */
extern const msr_gemm_bf16_ops_t *const msr_gemm_bf16_onednn_ops;

#endif
