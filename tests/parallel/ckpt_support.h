/* What the checkpoint tests of the CPU trainer share (test_ckpt_full.c,
 * test_ckpt_read_crc.c, test_ckpt_stream.c, test_ckpt_snap.c): the
 * trainer's settings, a trainer trained a few steps on a generated
 * corpus, its whole state saved in slices (parallel/ckpt_full.h), as the
 * GPU trainer saves it, and two saves' files compared. */
#ifndef MSRUN_TESTS_PARALLEL_CKPT_SUPPORT_H
#define MSRUN_TESTS_PARALLEL_CKPT_SUPPORT_H

#include <stddef.h>

#include "parallel/train.h"

/* One process (dp 1, no accumulation), seed 9, AdamW with warmup 2 and
 * clipping at 1: a GPT of `layers` blocks of `channels` (4 heads, sequence
 * 16), micro_batch sequences a step. */
msr_train_config_t ckpt_test_config(int layers, int channels, int micro_batch);

/* A trainer of c on a fresh generated corpus (*ds_p, the caller's to
 * destroy after the trainer), trained `steps` steps. */
msr_trainer_t *ckpt_test_trainer(const msr_train_config_t *c, int steps, msr_dataset_t **ds_p);

/* tr's whole state (parameters, moments, step) as `world` ranks' slices,
 * with meta: buf[r] (msr_free each) of len[r] bytes for r < world. */
void ckpt_test_save_slices(msr_trainer_t *tr, int world, const char *meta, void **buf, size_t *len);

/* Checks that file name of step `step` holds the same bytes under
 * checkpoint directories a and b (the first difference named). */
void ckpt_test_same_file(const char *a, const char *b, int step, const char *name);

#endif
