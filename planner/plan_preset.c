/* Published model shapes by name (plan.h's msr_plan_preset), for
 * plan_gpt --model. */
#include <string.h>

#include "planner/plan.h"

typedef struct preset {
    const char *name;
    msr_plan_arch_t arch;
    int layers, channels, heads, kv_heads, ffn, vocab, seq;
    uint64_t params; /* the published count, which msr_plan_num_params gives */
} preset_t;

/* GPT-2 (Radford et al. 2019, the released checkpoints: vocabulary 50257,
 * 1024 positions, tied head); Llama 2 (Touvron et al. 2023) and Llama 3
 * (Meta 2024, the released configurations). */
static const preset_t presets[] = {
    {"gpt2-124m", MSR_PLAN_GPT, 12, 768, 12, 12, 3072, 50257, 1024, 124439808ull},
    {"gpt2-350m", MSR_PLAN_GPT, 24, 1024, 16, 16, 4096, 50257, 1024, 354823168ull},
    {"gpt2-1.5b", MSR_PLAN_GPT, 48, 1600, 25, 25, 6400, 50257, 1024, 1557611200ull},
    {"llama2-7b", MSR_PLAN_LLAMA, 32, 4096, 32, 32, 11008, 32000, 4096, 6738415616ull},
    {"llama2-13b", MSR_PLAN_LLAMA, 40, 5120, 40, 40, 13824, 32000, 4096, 13015864320ull},
    {"llama2-70b", MSR_PLAN_LLAMA, 80, 8192, 64, 8, 28672, 32000, 4096, 68976648192ull},
    {"llama3-8b", MSR_PLAN_LLAMA, 32, 4096, 32, 8, 14336, 128256, 8192, 8030261248ull},
    {"llama3-70b", MSR_PLAN_LLAMA, 80, 8192, 64, 8, 28672, 128256, 8192, 70553706496ull},
};

int msr_plan_preset(const char *name, msr_plan_model_t *m, uint64_t *params_p)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const preset_t *p = &presets[i];
        if (strcmp(p->name, name) != 0)
            continue;
        *m = (msr_plan_model_t){.arch = p->arch,
                                .layers = p->layers,
                                .channels = p->channels,
                                .heads = p->heads,
                                .kv_heads = p->kv_heads,
                                .ffn = p->ffn,
                                .vocab = p->vocab,
                                .seq = p->seq,
                                .top_k = 2,
                                .moe_every = 1,
                                .capacity_factor = 1.25};
        if (params_p != NULL)
            *params_p = p->params;
        return 0;
    }
    return -1;
}

const char *msr_plan_preset_name(size_t i)
{
    return i < sizeof presets / sizeof presets[0] ? presets[i].name : NULL;
}
