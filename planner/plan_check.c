/* The checks of a model and a layout against the runtime's rules (the
 * ones train_gpt refuses), with the bounds that keep every count of the
 * memory model within 64 bits. */
#include <stdint.h>
#include <stdio.h>

#include "planner/plan.h"
#include "planner/plan_mem_impl.h"

/* ---- checks ---- */

#define BAD(...)                             \
    do {                                     \
        snprintf(why, why_len, __VA_ARGS__); \
        return -1;                           \
    } while (0)

int msr_plan_check_model(const msr_plan_model_t *m, char *why, size_t why_len)
{
    if (m->layers < 1 || m->channels < 1 || m->heads < 1 || m->vocab < 1 || m->seq < 1)
        BAD("layers, channels, heads, vocabulary and sequence must be positive");
    if (m->channels % m->heads != 0)
        BAD("%d channels do not divide into %d heads", m->channels, m->heads);
    if (m->arch == MSR_PLAN_LLAMA && (m->kv_heads < 1 || m->heads % m->kv_heads != 0 || m->ffn < 1))
        BAD("%d kv heads do not divide %d heads (or ffn %d < 1)", m->kv_heads, m->heads, m->ffn);
    /* every count must fit in 64 bits, with room: bytes of the model state */
    double C = m->channels, F = m->arch == MSR_PLAN_LLAMA ? m->ffn : 4.0 * C;
    double params =
        (double)m->vocab * C * 2 + (double)m->seq * C + (double)m->layers * (4 * C * C + 3 * C * F);
    if (m->experts < 0)
        BAD("%d experts: 0 (a dense model) or more", m->experts);
    if (m->experts > 0) {
        if (m->top_k < 1 || m->top_k > m->experts)
            BAD("top-k %d is not in [1, %d experts]", m->top_k, m->experts);
        if (m->moe_every < 1 || m->moe_every > m->layers)
            BAD("moe-every %d is not in [1, %d layers]", m->moe_every, m->layers);
        if (!(m->capacity_factor > 0) || m->capacity_factor > 1e6)
            BAD("capacity factor %g is not in (0, 1e6]", m->capacity_factor);
        params += (double)(m->layers / m->moe_every) * m->experts * 3 * C * F;
    }
    if (params * 32 > 1e18)
        BAD("the model is too large to count in bytes (%.3g parameters)", params);
    return 0;
}

/* ZeRO 0..3 (the model-parallel runtime gathers ZeRO-3's segments over dp,
 * dp x cp under context parallel, with tp, sp, cp and pp, a MoE model's
 * dense parts too). */
static int check_zero(const msr_plan_layout_t *l, char *why, size_t why_len)
{
    if (l->zero < 0 || l->zero > 3)
        BAD("ZeRO stage %d is not in 0..3", l->zero);
    return 0;
}

/* The gradients' offload, as train_gpt allows it: the gradient shard of
 * ZeRO 2-3 beside the optimizer's offload, under data parallel alone (the
 * norm over the file does not count tensor-parallel slices apart), with
 * or without experts over ep (their gradients move beside their
 * parameters where no replica sums them: plan_mem.c rank_experts). */
static int check_grads_offload(const msr_plan_layout_t *l, char *why, size_t why_len)
{
    if (!(l->offload & MSR_PLAN_OFFLOAD_GRADS))
        return 0;
    const char *no =
        !(l->offload & MSR_PLAN_OFFLOAD_OPTIM) ? "without the optimizer's offload"
        : l->zero < 2 ? "below ZeRO 2 (no gradient shard: the flat gradients are whole)"
        : l->tp > 1 || l->pp > 1 || msr_plan_cp(l) > 1 ? "under tp, pp or cp (data parallel alone)"
                                                       : NULL;
    if (no != NULL)
        BAD("the gradients' offload puts the gradient shard of ZeRO 2 or 3 on disk beside the "
            "optimizer's, under data parallel alone: not %s",
            no);
    return 0;
}

/* The offloads train_gpt takes, on the layouts it takes them on. */
static int check_offload(const msr_plan_layout_t *l, char *why, size_t why_len)
{
    if (l->offload & ~(MSR_PLAN_OFFLOAD_OPTIM | MSR_PLAN_OFFLOAD_ACTS | MSR_PLAN_OFFLOAD_PARAMS |
                       MSR_PLAN_OFFLOAD_GRADS))
        BAD("offload %d: only the optimizer, the activations, the parameters and the gradients "
            "offload",
            l->offload);
    if (check_grads_offload(l, why, why_len) != 0)
        return -1;
    if ((l->offload & MSR_PLAN_OFFLOAD_ACTS) && l->recompute != MSR_PLAN_RC_FULL)
        BAD("the activations' offload spills full recompute's block inputs: recompute %s",
            msr_plan_recompute_names[l->recompute]);
    size_t ch = l->offload_chunk;
    if (ch != 0 && (ch < MSR_PLAN_OFFLOAD_ALIGN || ch > MSR_PLAN_OFFLOAD_CHUNK_MAX ||
                    ch % MSR_PLAN_OFFLOAD_ALIGN != 0))
        BAD("offload chunk of %zu bytes: a multiple of %u in [%u, %zu]", ch, MSR_PLAN_OFFLOAD_ALIGN,
            MSR_PLAN_OFFLOAD_ALIGN, MSR_PLAN_OFFLOAD_CHUNK_MAX);
    return 0;
}

int msr_plan_check(const msr_plan_model_t *m, const msr_plan_layout_t *l, char *why, size_t why_len)
{
    if (msr_plan_check_model(m, why, why_len) != 0)
        return -1;
    if (l->dp < 1 || l->tp < 1 || l->pp < 1 || l->chunks < 1 || l->micro_batch < 1 || l->micros < 1)
        BAD("dp, tp, pp, virtual stages, micro-batch and micro-batches must be positive");
    if (m->heads % l->tp != 0)
        BAD("%d heads do not divide among tp %d", m->heads, l->tp);
    if (m->arch == MSR_PLAN_LLAMA && m->kv_heads % l->tp != 0 && l->tp % m->kv_heads != 0)
        BAD("%d kv heads neither divide among tp %d nor divide it", m->kv_heads, l->tp);
    if (m->arch == MSR_PLAN_LLAMA && m->ffn % l->tp != 0)
        BAD("ffn %d does not divide among tp %d", m->ffn, l->tp);
    if (m->vocab % l->tp != 0)
        BAD("vocabulary of %d does not divide among tp %d", m->vocab, l->tp);
    if ((int64_t)l->pp * l->chunks > m->layers)
        BAD("%d layers are fewer than the %d pipeline stages", m->layers, l->pp * l->chunks);
    if (l->stage_layers != NULL) {
        int64_t sum = 0;
        for (int j = 0; j < l->pp * l->chunks; j++) {
            if (l->stage_layers[j] < 1)
                BAD("virtual stage %d has %d layers: every virtual stage needs at least 1", j,
                    l->stage_layers[j]);
            sum += l->stage_layers[j];
        }
        if (sum != m->layers)
            BAD("the stages' layers sum to %lld, not the %d layers", (long long)sum, m->layers);
    }
    if (l->sp && l->tp < 2)
        BAD("sequence parallel needs tp > 1");
    int cp = msr_plan_cp(l);
    if (l->cp < 0)
        BAD("cp %d must be at least 1", l->cp);
    if (l->tp_overlap && l->tp < 2)
        BAD("tp overlap needs tp > 1");
    if (l->head_chunk < 0)
        BAD("the head's chunk of %d vocabulary rows must be at least 1 (0: the whole head)",
            l->head_chunk);
    if (l->tp_overlap && l->micro_batch % 2 != 0)
        BAD("tp overlap needs an even micro-batch, not %d", l->micro_batch);
    if (cp > 1 && m->seq % (2 * cp) != 0)
        BAD("sequence of %d does not divide into 2 x cp %d chunks", m->seq, cp);
    if (l->sp && m->seq / cp % l->tp != 0)
        BAD("sequence of %d does not divide among tp %d%s", m->seq / cp, l->tp,
            cp > 1 ? " (the positions of one cp rank)" : "");
    if (l->schedule < 0 || l->schedule > MSR_PLAN_INTERLEAVED || l->recompute < 0 ||
        l->recompute > MSR_PLAN_RC_FULL)
        BAD("schedule %d or recompute %d out of range", l->schedule, l->recompute);
    if (l->chunks > 1 && l->schedule != MSR_PLAN_INTERLEAVED)
        BAD("%d virtual stages need the interleaved schedule", l->chunks);
    if (l->pp > 1 && l->schedule == MSR_PLAN_1F1B && l->micros < l->pp)
        BAD("1F1B needs at least as many micro-batches as stages: %d for %d", l->micros, l->pp);
    if (l->schedule == MSR_PLAN_INTERLEAVED && (l->pp < 2 || l->micros % l->pp != 0))
        BAD("interleaved 1F1B needs pp > 1 and micro-batches a multiple of the stages: %d for %d",
            l->micros, l->pp);
    if (check_zero(l, why, why_len) != 0)
        return -1;
    int ep = msr_plan_ep(l);
    if (l->ep < 0 || (ep > 1 && m->experts == 0))
        BAD("ep %d: expert parallel needs at least 1 and a MoE model", l->ep);
    if (m->experts > 0 && m->experts % ep != 0)
        BAD("%d experts do not divide among ep %d ranks", m->experts, ep);
    if (m->experts > 0 && m->experts % (ep * l->tp) != 0)
        BAD("%d experts do not divide among ep %d x tp %d ranks", m->experts, ep, l->tp);
    if (l->dp % ep != 0)
        BAD("ep %d does not divide dp %d: the expert-parallel groups are cut from the "
            "data-parallel group",
            ep, l->dp);
    if (check_offload(l, why, why_len) != 0)
        return -1;
    /* a step's kept activations, bounded the same way */
    double C = m->channels, T = m->seq, F = m->arch == MSR_PLAN_LLAMA ? m->ffn : 4.0 * C;
    double acts = (double)l->micro_batch * l->micros * l->chunks * m->layers *
                  ((double)m->heads * T * T + 32 * T * (C + F) + T * m->vocab);
    if (acts * 8 > 1e18)
        BAD("the layout's activations are too many to count in bytes (%.3g)", acts);
    return 0;
}
#undef BAD
