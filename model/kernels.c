/* The CPU's table of the model's kernels (see kernels.h). */
#include "model/kernels.h"

#include <string.h>

static void add_bias(float *x, const float *bias, size_t N, int C)
{
    for (size_t n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            x[n * (size_t)C + c] += bias[c];
}

static void add_colsum(float *db, const float *d, size_t N, int C)
{
    for (size_t n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            db[c] += d[n * (size_t)C + c];
}

static void zero(float *x, size_t n)
{
    memset(x, 0, n * sizeof(float));
}

static const msr_kernels_t cpu_kernels = {
    .name = "cpu",
    .layernorm_forward = msr_layernorm_forward_bf16,
    .layernorm_backward = msr_layernorm_backward,
    .rmsnorm_forward = msr_rmsnorm_forward,
    .rmsnorm_backward = msr_rmsnorm_backward,
    .matmul_forward = msr_matmul_forward,
    .matmul_backward_set = msr_matmul_backward_set,
    .operand = msr_products_operand,
    .attention_forward = msr_attention_forward,
    .attention_backward_set = msr_attention_backward_set,
    .attention_gqa_forward = msr_attention_gqa_forward,
    .attention_gqa_backward = msr_attention_gqa_backward,
    .ring_forward = msr_attention_ring_forward,
    .ring_finish = msr_attention_ring_finish,
    .ring_delta = msr_attention_ring_delta,
    .ring_backward = msr_attention_ring_backward,
    .rope = msr_rope_forward,
    .gelu_forward = msr_gelu_forward_bf16,
    .gelu_backward_set = msr_gelu_backward_set_bf16,
    .gelu_backward = msr_gelu_backward,
    .swiglu_forward = msr_swiglu_forward,
    .swiglu_backward = msr_swiglu_backward,
    .residual = msr_residual_forward,
    .add_bias = add_bias,
    .add_colsum = add_colsum,
    .zero = zero,
    .matmul_backward = msr_matmul_backward,
    .encoder_forward = msr_encoder_forward,
    .encoder_backward = msr_encoder_backward,
    .embedding_forward = msr_embedding_forward,
    .embedding_backward = msr_embedding_backward,
    .crossentropy_forward = msr_crossentropy_forward,
    .crossentropy_backward = msr_crossentropy_backward,
};

const msr_kernels_t *msr_kernels_cpu(void)
{
    return &cpu_kernels;
}

const msr_kernels_t *msr_kernels_or_cpu(const msr_kernels_t *k)
{
    return k != NULL ? k : &cpu_kernels;
}
