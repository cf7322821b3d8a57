/* train_gpt's safetensors files, shared by train_gpt_st.c (--init-from,
 * --dump-logits) and train_gpt_st_export.c (--export-safetensors,
 * --dump-grads): the file's tensor names and the runs of a rank's slice.
 * Private to train_gpt. */
#ifndef MSR_PROGRAMS_TRAIN_GPT_ST_H
#define MSR_PROGRAMS_TRAIN_GPT_ST_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"
#include "model/safetensors.h"
#include "msrun/comm.h"

/* The file's tensors: the whole model's table (model/gpt.h), in its
 * flat-buffer order, then a MoE model's experts in the whole model's
 * expert numbering (model/moe.h): "h<l>.e<e>.fcw" (4C, C), ".fcb" (4C),
 * ".fcprojw" (C, 4C), ".fcprojb" (C). */
typedef struct names {
    msr_st_tensor_t *t;
    int n;
} names_t;

/* Tensor name's name in the file: the same for a GPT, Hugging Face
 * Llama's for a Llama. */
void train_gpt_st_file_name(const msr_gpt_config_t *cfg, const char *name, char *out, size_t len);
/* Appends a tensor of rows x cols (cols 0: a vector) to nm. */
void train_gpt_st_name_add(names_t *nm, const char *name, int rows, int cols);
/* Every tensor of the file for cfg into nm (nm->t the caller's, msr_free;
 * one spare entry). Errors: MSR_ERR_NO_MEMORY, the model's. */
msr_status_t train_gpt_st_model_names(const msr_gpt_config_t *cfg, names_t *nm);
/* The index of name in nm, or -1. */
int train_gpt_st_names_find(const names_t *nm, const char *name);
/* Whether any rank of comm failed (failed: this rank's), agreed by all. */
int train_gpt_st_any_failed(msr_comm_t *comm, int failed);

/* What one run of consecutive elements does: local [lo, lo + n) is whole
 * tensor [first, first + n). */
typedef msr_status_t (*train_gpt_st_run_fn)(void *arg, size_t lo, uint64_t first, uint64_t n);
/* Calls fn for each run of local tensor t whose elements are consecutive
 * in the whole tensor (a row, or several rows, or all of it). */
msr_status_t train_gpt_st_for_runs(const msr_gpt_tensor_t *t, train_gpt_st_run_fn fn, void *arg);

#endif
