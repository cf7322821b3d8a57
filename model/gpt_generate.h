/* Generation from a whole GPT (model/gpt.h) with a key/value cache: each
 * new token runs the blocks on ONE position, its query attending to the
 * keys and values every earlier position left in the cache, so a sequence
 * of n tokens costs n one-position passes instead of n full forwards.
 *
 *   token, pos -> wte[token] + wpe[pos] (C) -> L x block (B = T = 1) ->
 *   layernorm -> @ wte^T -> logits (V)
 *   block l: the model's block (model/block.h) whose attention is the
 *   cache's: k, v (C) of this position appended to layer l's cache
 *   (maxT, C) each, then the ring-attention kernel (layers.h) of the one
 *   query at position pos over the cached keys 0..pos
 *
 * The block's math is model/block.c's and the kernels model/layers.h's:
 * only the attention is routed through the cache (block.h's attend hook),
 * so the logits of position t equal a full forward's (to rounding). A MoE
 * block runs its MLP (model/moe.h) on the one position: its capacity,
 * ceil(F K / E) >= 1 per expert for one token, never drops a choice, so
 * its logits are those of a full forward that drops none (a training
 * forward over many tokens may drop some).
 *
 * A Llama (docs/model.md "Llama"): wte[token] (no wpe), q and k rotated at
 * position pos before k joins the cache, each key/value head stored
 * repeated for its NH/KVH query heads (the cache stays (maxT, C) a layer,
 * as the GPT's), the final RMSNorm and the untied lm_head.
 *
 * Not thread-safe: one thread drives a generator; the model must outlive
 * it, and its parameters are only read. */
#ifndef MSR_MODEL_GPT_GENERATE_H
#define MSR_MODEL_GPT_GENERATE_H

#include <stdint.h>

#include "msrun/base.h"
#include "model/gpt.h"

typedef struct msr_gpt_gen msr_gpt_gen_t;

/* How a token is drawn from a position's logits. */
typedef struct msr_gpt_sampler {
    double
        temperature; /* 0: greedy (the argmax, the lowest id on ties); > 0: softmax(logits / t) */
    int top_k;       /* 0: every token; k in [1, V]: only the k most likely */
    uint64_t seed;   /* the draws: token i of a sequence uses (seed, i) only */
} msr_gpt_sampler_t;

/* Creates a generator for model (a whole model with its flat parameters:
 * msr_gpt_create's, not a part). The cache holds cfg.max_seq positions.
 * Errors: MSR_ERR_CONFIG (a part, no parameters, a MoE model without all
 * its experts (ep > 1); the reason
 * in the error text), MSR_ERR_NO_MEMORY. *gen_p written only on success. */
msr_status_t msr_gpt_gen_create(msr_gpt_t *model, msr_gpt_gen_t **gen_p);
/* Frees the generator; NULL does nothing. The model is untouched. */
void msr_gpt_gen_destroy(msr_gpt_gen_t *gen);

/* Empties the cache: the next step is position 0. */
void msr_gpt_gen_reset(msr_gpt_gen_t *gen);

/* Runs token at the next position (the positions stepped since the last
 * reset) and points *logits_p at its logits (V), valid until the next
 * step. Errors: MSR_ERR_INVALID_ARG (a token out of [0, V), the cache
 * full: max_seq positions stepped), a bf16 product's failure. */
msr_status_t msr_gpt_gen_step(msr_gpt_gen_t *gen, int token, const float **logits_p);

/* Checks a sampler against V: temperature >= 0 and finite, 0 <= top_k <=
 * V. MSR_ERR_INVALID_ARG with the reason in the error text otherwise. */
msr_status_t msr_gpt_sampler_check(const msr_gpt_sampler_t *s, int V);

/* From an empty cache: steps the prompt (P >= 1 tokens), then draws n
 * tokens into out (n), each drawn from the previous position's logits and
 * stepped in turn (the last is drawn, not stepped). P + n must be at most
 * max_seq: the window does not slide. Token i of out is drawn with counter
 * P + i. Errors: MSR_ERR_INVALID_ARG (P < 1, n < 0, P + n > max_seq, a
 * token out of range, a bad sampler; the reason in the error text), and
 * msr_gpt_gen_step's. */
msr_status_t msr_gpt_generate(msr_gpt_gen_t *gen, const int *prompt, int P, int n,
                              const msr_gpt_sampler_t *s, int *out);

#endif
