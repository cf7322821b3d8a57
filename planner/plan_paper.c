/* The paper accounting: ZeRO's model-state bytes (Rajbhandari et al. 2019)
 * and the activations a layer keeps by Korthikanti et al. (2022)'s terms,
 * term by term, with the frame of a pipeline chunk they give for bf16 and
 * for the Llama-style description (docs/plan.md). */
#include <stddef.h>

#include "planner/plan.h"
#include "planner/plan_mem_impl.h"

/* ---- the paper accounting ---- */

double msr_plan_zero_bytes(double psi, int stage, int nd)
{
    const double K = 12.0; /* fp32 master weights, momentum, variance: 4 + 4 + 4 */
    double params = 2 * psi, grads = 2 * psi, optim = K * psi;
    if (stage >= 1)
        optim /= nd;
    if (stage >= 2)
        grads /= nd;
    if (stage >= 3)
        params /= nd;
    return params + grads + optim;
}

/* Korthikanti et al. (2022), section 4: the bytes one layer keeps, by term.
 * unit: 0 sbh, 1 sbf (f = 4h for GPT), 2 a s^2 b. split: 1 cut by tensor
 * parallel, 0 cut only by sequence parallel. dropped: selective recompute
 * drops it. */
typedef struct act_term {
    const char *what;
    double coef;
    int unit, split, dropped;
} act_term_t;

static const act_term_t gpt_terms[] = {
    {"layernorm 1 input", 2, 0, 0, 0},
    {"QKV input (layernorm 1 output)", 2, 0, 0, 0},
    {"Q and K", 4, 0, 1, 0},
    {"softmax output", 2, 2, 1, 1},
    {"softmax dropout mask", 1, 2, 1, 1},
    {"softmax dropout output", 2, 2, 1, 1},
    {"V", 2, 0, 1, 0},
    {"attention projection input", 2, 0, 1, 0},
    {"attention dropout mask", 1, 0, 0, 0},
    {"layernorm 2 input", 2, 0, 0, 0},
    {"MLP input (layernorm 2 output)", 2, 0, 0, 0},
    {"GELU input", 2, 1, 1, 0},
    {"GELU output (second linear input)", 2, 1, 1, 0},
    {"MLP dropout mask", 1, 0, 0, 0},
};

double msr_plan_layer_act_bytes(double s, double b, double h, double a, int t, int sp,
                                int recompute)
{
    double T = t;
    if (recompute == MSR_PLAN_RC_FULL)
        return 2 * s * b * h / (sp ? T : 1); /* the layer's input only */
    double sum = 0;
    for (size_t i = 0; i < sizeof gpt_terms / sizeof gpt_terms[0]; i++) {
        const act_term_t *x = &gpt_terms[i];
        if (x->dropped && recompute == MSR_PLAN_RC_SELECTIVE)
            continue;
        double unit = x->unit == 0 ? s * b * h : x->unit == 1 ? s * b * 4 * h : a * s * s * b;
        sum += x->coef * unit / (x->split || sp ? T : 1);
    }
    return sum;
}

/* Paper accounting: bytes of one chunk's kept activations. */
uint64_t msr_plan_frame_paper_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                                    msr_plan_precision_t prec, int layers)
{
    /* under cp a rank keeps its T/cp positions' terms; ring attention keeps
     * no scores (the terms selective recompute drops) but the logsumexp, a
     * s b / t in fp32 */
    int cp = msr_plan_cp(l);
    double s_cp = (double)(m->seq / cp);
    int rc = cp > 1 && l->recompute == MSR_PLAN_RC_NONE ? MSR_PLAN_RC_SELECTIVE : l->recompute;
    double lse = cp > 1 && l->recompute != MSR_PLAN_RC_FULL
                     ? 4 * (double)m->heads * s_cp * l->micro_batch / l->tp
                     : 0;
    double b =
        msr_plan_layer_act_bytes(s_cp, l->micro_batch, m->channels, m->heads, l->tp, l->sp, rc) +
        lse;
    if (m->arch == MSR_PLAN_LLAMA) {
        /* Llama's terms (plan.h's table, second half) */
        double s = s_cp, B = l->micro_batch, h = m->channels, a = m->heads, t = l->tp;
        double f = m->ffn, g = (double)m->kv_heads / a, sbh = s * B * h, sbf = s * B * f;
        double split = 8 * sbh + 4 * sbh * g + 6 * sbf; /* q, k, v, out-proj input, MLP */
        double sp_only = 8 * sbh;                       /* the two norms' inputs and outputs */
        double scores = 2 * a * s * s * B;
        if (l->recompute == MSR_PLAN_RC_FULL)
            b = 2 * sbh / (l->sp ? t : 1);
        else
            b = split / t + sp_only / (l->sp ? t : 1) + (rc == MSR_PLAN_RC_NONE ? scores / t : 0) +
                lse;
    }
    if (prec == MSR_PLAN_FP32)
        b *= 2;
    return (uint64_t)(b * layers + 0.5);
}
