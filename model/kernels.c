/* The CPU's table of the model's kernels (see kernels.h). */
#include "model/kernels.h"

#include <stddef.h>
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

static void ring_fold_kv(float *dkv, const float *dx, int S, int C, int NH, int KVH)
{
    size_t HS = (size_t)(C / NH), KV = (size_t)KVH * HS, G = (size_t)(NH / KVH);
    for (size_t n = 0; n < (size_t)S; n++)
        for (size_t h = 0; h < (size_t)NH; h++)
            for (size_t part = 0; part < 2; part++) {
                float *g = dkv + n * 2 * KV + part * KV + h / G * HS;
                const float *x = dx + n * 2 * (size_t)C + part * (size_t)C + h * HS;
                for (size_t i = 0; i < HS; i++)
                    g[i] += x[i];
            }
}

static void add_rows(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                     size_t n)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < n; c++)
            dst[r * ld_dst + c] += src[r * ld_src + c];
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
    .ring_fold_kv = ring_fold_kv,
    .add_rows = add_rows,
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
    .moe_route = msr_moe_route,
    .moe_prob_sums = msr_moe_prob_sums,
    .moe_dispatch = msr_moe_dispatch,
    .moe_dispatch_backward = msr_moe_dispatch_backward,
    .moe_combine = msr_moe_combine,
    .moe_combine_backward = msr_moe_combine_backward,
    .moe_route_backward = msr_moe_route_backward,
    .matmul_backward = msr_matmul_backward,
    .encoder_forward = msr_encoder_forward,
    .encoder_backward = msr_encoder_backward,
    .embedding_forward = msr_embedding_forward,
    .embedding_backward = msr_embedding_backward,
    .crossentropy_forward = msr_crossentropy_forward,
    .crossentropy_backward = msr_crossentropy_backward,
    .positions_forward = msr_positions_forward,
    .positions_backward = msr_positions_backward,
    .embedding_backward_rows = msr_embedding_backward_rows,
    .vocab_max = msr_vocab_max,
    .vocab_exp_sums = msr_vocab_exp_sums,
    .vocab_loss = msr_vocab_loss,
    .vocab_fold = msr_vocab_fold,
    .vocab_crossentropy_backward = msr_vocab_crossentropy_backward,
};

const msr_kernels_t *msr_kernels_cpu(void)
{
    return &cpu_kernels;
}

/* every entry of the table, in its order */
#define ENTRIES(X)             \
    X(layernorm_forward)       \
    X(layernorm_backward)      \
    X(rmsnorm_forward)         \
    X(rmsnorm_backward)        \
    X(matmul_forward)          \
    X(matmul_backward_set)     \
    X(operand)                 \
    X(attention_forward)       \
    X(attention_backward_set)  \
    X(attention_gqa_forward)   \
    X(attention_gqa_backward)  \
    X(ring_forward)            \
    X(ring_finish)             \
    X(ring_delta)              \
    X(ring_backward)           \
    X(ring_fold_kv)            \
    X(add_rows)                \
    X(rope)                    \
    X(gelu_forward)            \
    X(gelu_backward_set)       \
    X(gelu_backward)           \
    X(swiglu_forward)          \
    X(swiglu_backward)         \
    X(residual)                \
    X(add_bias)                \
    X(add_colsum)              \
    X(zero)                    \
    X(moe_route)               \
    X(moe_prob_sums)           \
    X(moe_dispatch)            \
    X(moe_dispatch_backward)   \
    X(moe_combine)             \
    X(moe_combine_backward)    \
    X(moe_route_backward)      \
    X(matmul_backward)         \
    X(encoder_forward)         \
    X(encoder_backward)        \
    X(embedding_forward)       \
    X(embedding_backward)      \
    X(crossentropy_forward)    \
    X(crossentropy_backward)   \
    X(positions_forward)       \
    X(positions_backward)      \
    X(embedding_backward_rows) \
    X(vocab_max)               \
    X(vocab_exp_sums)          \
    X(vocab_loss)              \
    X(vocab_fold)              \
    X(vocab_crossentropy_backward)

#define NAME(e)   #e,
#define OFFSET(e) offsetof(msr_kernels_t, e),
static const char *const entry_names[] = {ENTRIES(NAME)};
static const size_t entry_offsets[] = {ENTRIES(OFFSET)};
enum { N_ENTRIES = sizeof entry_names / sizeof entry_names[0] };

/* each entry is one function pointer after the name: a member added to
 * the table and not to the list above fails the build */
_Static_assert(sizeof(msr_kernels_t) ==
                   offsetof(msr_kernels_t, layernorm_forward) + N_ENTRIES * sizeof(void (*)(void)),
               "msr_kernels_t has entries that ENTRIES does not list");

size_t msr_kernels_entries(void)
{
    return N_ENTRIES;
}

const char *msr_kernels_entry_name(size_t i)
{
    return i < N_ENTRIES ? entry_names[i] : NULL;
}

size_t msr_kernels_entry_offset(size_t i)
{
    return i < N_ENTRIES ? entry_offsets[i] : 0;
}

const char *msr_kernels_missing(const msr_kernels_t *k)
{
#define MISSING(e)    \
    if (k->e == NULL) \
        return #e;
    ENTRIES(MISSING)
#undef MISSING
    return NULL;
}

const msr_kernels_t *msr_kernels_or_cpu(const msr_kernels_t *k)
{
    return k != NULL ? k : &cpu_kernels;
}
