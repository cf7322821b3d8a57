/* The validation loss: the mean loss of a fixed set of batches of a
 * held-out data set under the trainer's current parameters, forward only,
 * the same whatever the layout that trains them.
 *
 * How: every rank assembles the whole model from the ranks' checkpoint
 * payloads (msr_trainer_snapshot, exchanged in memory over the world, read
 * back by msr_ckpt_gather: the path a resume in another layout takes), so
 * the numbers do not depend on how the model is cut; the ranks then share
 * out the rows in chunks of a micro-batch, each running a whole-model
 * forward pass over chunks r, r + world, ..., and the rows' losses are
 * summed over the world. This
 * costs every rank the whole model's parameters, moments and one
 * micro-batch's activations while it runs (its head chunked as the job's,
 * --head-chunk: msr_gpt_create_chunked), and one exchange of every
 * rank's payload: it is for models that fit one process (the ones the CPU
 * runtime trains), and for a validation every few hundred steps.
 *
 * The rows are the first batches x G validation samples, G the global
 * batch (micro-batch x grad-accum x dp, the same in every layout of a
 * run); sample k is the data set's window k mod W of T + 1 tokens in file
 * order (the windows msr_sampler_windows counts: starting at multiples of
 * T), so the set depends on the file, G and T only, never on the layout,
 * the seed or the step. The loss is the mean over the rows' tokens (the
 * cross-entropy msr_gpt_forward reports). A MoE model runs one sequence a
 * forward pass, so that its blocks' capacity (which depends on the tokens
 * of a pass) is the same whatever the layout's micro-batch; its experts
 * come from the payloads too, into a store that holds them all. */
#ifndef MSR_PARALLEL_EVAL_H
#define MSR_PARALLEL_EVAL_H

#include "msrun/base.h"
#include "model/data.h"
#include "parallel/train.h"

/* Writes the mean loss over `batches` global batches of val's rows to
 * *loss_p, the same on every rank. Collective over the trainer's world
 * (every rank calls it). val->size must exceed T and val's tokens be below
 * the model's V (msr_dataset_vocab). Errors: MSR_ERR_CONFIG (batches < 1),
 * MSR_ERR_NO_MEMORY, the communicator's and the forward pass's. The
 * trainer is unchanged. */
msr_status_t msr_trainer_eval(msr_trainer_t *tr, const msr_dataset_t *val, int batches,
                              double *loss_p);

/* Fills rows [first, first + n) of val's validation samples (T + 1 token
 * windows in file order, wrapping) as inputs and targets (n, T). */
void msr_eval_fill(const msr_dataset_t *val, int T, uint64_t first, int n, int *inputs,
                   int *targets);

#endif
