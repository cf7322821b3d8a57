/* The GPT's private limits and functions (see gpt.h), shared by its files:
 * gpt.c (the configuration's checks, create and destroy), gpt_tensors.c
 * (the tensor and segment tables, initialisation, the blocks' views of the
 * flat buffers, the activations' carving) and gpt_pass.c (forward and
 * backward). */
#ifndef MSR_MODEL_GPT_IMPL_H
#define MSR_MODEL_GPT_IMPL_H

#include <stddef.h>

#include "model/gpt.h"

/* Limits that keep every size product far from overflowing size_t. */
#define GPT_MAX_SEQ      16384
#define GPT_MAX_CHANNELS 16384
#define GPT_MAX_LAYERS   1024
#define GPT_MAX_VOCAB    65536
#define GPT_MAX_BATCH    65536
#define GPT_MAX_FFN      (4 * GPT_MAX_CHANNELS)

_Static_assert(MSR_GPT_MAX_STAGES == GPT_MAX_LAYERS, "a split has at most one stage per layer");

/* The parameters of block l of the whole model (gpt.c). */
size_t msr_gpt_block_params(const msr_gpt_config_t *cfg, int l);

/* Fills m->tensors and m->segments in flat-buffer order (see gpt.h) for
 * m->part, and m->num_params (gpt_tensors.c). */
void msr_gpt_build_layout(msr_gpt_t *m);

#endif
