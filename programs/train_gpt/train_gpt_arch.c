/* train_gpt's --arch (train_gpt.h): gpt or llama, the Llama's options and
 * what a Llama runs on today (docs/model.md "Llama"): one process, data
 * parallel and ZeRO 1-3, pipeline parallel (every schedule, virtual stages,
 * uneven --pp-layers), tensor and sequence parallel (kv heads split over
 * tp, or replicated when fewer than tp and dividing it), recompute and
 * --trace, checkpoints and resume, safetensors export and import,
 * --dump-logits and --dump-grads, fp32 or bf16 products, --generate,
 * context parallel, the planner's --plan, --explain and --auto (fp32 or
 * bf16, every layout) with --calibrate timing a Llama's own kernels,
 * Mixture-of-Experts blocks with Mixtral's SwiGLU experts (--experts,
 * --ep, as the GPT's). The CUDA trainer runs GPT blocks only, and is
 * refused for a Llama by name. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "programs/train_gpt/train_gpt.h"

/* Llama's default SwiGLU width: 2/3 of the GPT's 4C (the same parameters
 * in three matrices as in two), rounded up to a multiple of 8. */
static int64_t default_ffn(int64_t channels)
{
    int64_t f = (8 * channels + 2) / 3;
    return (f + 7) / 8 * 8;
}

/* The first option of a Llama's missing pieces that o asks for, or NULL. */
static const char *missing_piece(const options_t *o)
{
    if (strcmp(o->device, "cpu") != 0)
        return "--device cuda (the CUDA trainer's Llama kernels)";
    return NULL;
}

int train_gpt_arch_check(options_t *o)
{
    int llama = strcmp(o->arch, "llama") == 0;
    if (!llama && strcmp(o->arch, "gpt") != 0) {
        fprintf(stderr, "train_gpt: --arch %s: not gpt or llama\n", o->arch);
        return -1;
    }
    if (!llama) {
        if (train_gpt_given(o, "ffn") || train_gpt_given(o, "kv-heads") ||
            train_gpt_given(o, "rope-theta")) {
            fprintf(stderr, "train_gpt: --ffn, --kv-heads and --rope-theta are a Llama's: give "
                            "--arch llama\n");
            return -1;
        }
        return 0;
    }
    if (!train_gpt_given(o, "ffn"))
        o->ffn = default_ffn(o->channels);
    if (!train_gpt_given(o, "kv-heads"))
        o->kv_heads = o->heads;
    if (o->kv_heads > o->heads || o->heads % o->kv_heads != 0) {
        fprintf(stderr,
                "train_gpt: --kv-heads %" PRId64 " does not divide --heads %" PRId64
                " (each key/value head serves heads / kv-heads query heads)\n",
                o->kv_heads, o->heads);
        return -1;
    }
    if (o->channels % o->heads == 0 && (o->channels / o->heads) % 2 != 0) {
        fprintf(stderr,
                "train_gpt: --arch llama: the head width %" PRId64 " (channels %" PRId64
                " / heads %" PRId64 ") is odd: rotary positions turn pairs of channels\n",
                o->channels / o->heads, o->channels, o->heads);
        return -1;
    }
    const char *missing = missing_piece(o);
    if (missing != NULL) {
        fprintf(stderr,
                "train_gpt: --arch llama runs on one process, data, pipeline, tensor, "
                "sequence and context parallel, ZeRO and experts: %s is not written for it yet\n",
                missing);
        return -1;
    }
    return 0;
}

void train_gpt_arch_config(const options_t *o, msr_gpt_config_t *cfg)
{
    if (strcmp(o->arch, "llama") != 0)
        return; /* the GPT: arch 0, the rest unread */
    cfg->arch = MSR_GPT_ARCH_LLAMA;
    cfg->ffn = (int)o->ffn;
    cfg->kv_heads = (int)o->kv_heads;
    cfg->rope_theta = o->rope_theta;
}
