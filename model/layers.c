/* The layer kernels, compiled from layers_impl.h in float and in double. */
#include "model/layers.h"

#include <cblas.h>
#include <stdint.h>
#include <string.h>
#include <tgmath.h>

#include "base/bf16.h"

#define R(x) ((real)(x))

/* float: what the model runs */
#define real        float
#define LAYER(name) msr_##name
#define PRODUCTS    msr_products_t *pr,
#define PASS_PR     pr,
#define GEMM(pr, ta, tb, ...) \
    msr_products_sgemm(pr, (ta) == CblasTrans, (tb) == CblasTrans, __VA_ARGS__)
#define LINEAR          msr_products_linear
#define LINEAR_BACKWARD msr_products_linear_backward
#define OPERAND         msr_products_operand
#define OPERAND_AGAIN   msr_products_operand_again
#define HOLD            msr_products_hold
#define RELEASE         msr_products_release
#define ROUND(dst, at, src, n)                             \
    do {                                                   \
        if ((dst) != NULL)                                 \
            msr_bf16_from_f32_n((dst) + (at), (src), (n)); \
    } while (0)
#define LAYERS_OWN_GELU 1 /* model/gelu.c */
#define LAYERS_OWN_NORM 1 /* model/norm.c */
#include "model/layers_impl.h"
#undef LAYERS_OWN_GELU
#undef LAYERS_OWN_NORM
#undef LINEAR
#undef LINEAR_BACKWARD
#undef OPERAND
#undef OPERAND_AGAIN
#undef HOLD
#undef RELEASE
#undef ROUND
#undef real
#undef LAYER
#undef PRODUCTS
#undef PASS_PR
#undef GEMM

/* double: what the gradient tests check against finite differences */
#define real        double
#define LAYER(name) msr_##name##_f64
#define PRODUCTS
#define PASS_PR
#define GEMM(pr, ...)             cblas_dgemm(CblasRowMajor, __VA_ARGS__)
/* no bf16 operands in double */
#define OPERAND(pr, src, n)       ((uint16_t *)NULL)
#define OPERAND_AGAIN(pr, src, n) ((void)0)
#define HOLD(pr, slot, src, n)    ((void)0)
#define RELEASE(pr, slot)         ((void)0)
#define ROUND(dst, at, src, n)    ((void)(dst))
#include "model/layers_impl.h"
#undef real
#undef LAYER
#undef PRODUCTS
#undef PASS_PR
#undef GEMM
#undef OPERAND
#undef OPERAND_AGAIN
#undef ROUND
#undef HOLD
#undef RELEASE

/* the float kernels that write their input gradient (beta 0), layers.h */
void msr_matmul_backward_set(msr_products_t *pr, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight, int N,
                             int IC, int OC)
{
    msr_linear_backward(pr, 0.0f, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

void msr_attention_backward_set(msr_products_t *pr, float *dqkv, float *scratch, const float *dout,
                                const float *qkv, const float *att, int B, int T, int C, int NH)
{
    msr_attention_backward_beta(pr, 0.0f, dqkv, scratch, dout, qkv, att, B, T, C, NH, NH);
}
