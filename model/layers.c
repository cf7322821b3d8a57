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
