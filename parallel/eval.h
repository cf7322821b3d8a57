/* The validation loss: the mean loss of a fixed set of batches of a
 * held-out data set under the trainer's current parameters, forward only,
 * over the same rows whatever the layout that trains them.
 *
 * Where: on the trainer's own model, nothing copied. Data parallel alone
 * runs the whole model's forward over its share of the rows (chunks of a
 * micro-batch dealt round-robin over the world; a MoE model's one
 * sequence a pass, since its blocks' capacity depends on the tokens of a
 * pass and any other chunk would tie the loss to the layout's
 * micro-batch), its segments got through dp's hooks as a step's forward
 * gets them (msr_dp_eval_begin: ZeRO-3's gathers, the parameters' and
 * the experts' offload's reads, expert parallel's exchanges; the router's
 * counts left alone); model parallel runs each replica's grad_accum
 * micro-batches of every global batch through the ranks' parts
 * (msr_mp_eval). The rows' losses are summed over the world. The loss is
 * then the layout's forward's: bitwise one process's under data and
 * pipeline parallel (but for the order the ranks' sums are added in), and
 * within the rounding of the split sums under tensor and context
 * parallel and the chunked head (as the steps' losses are). A MoE model
 * runs one sequence a pass under model parallel too, whatever its
 * micro-batch (msr_mp_eval sizes the runtime's passes so).
 *
 * The rows are the first batches x G validation samples, G the global
 * batch (micro-batch x grad-accum x dp, the same in every layout of a
 * run); sample k is the data set's window k mod W of T + 1 tokens in file
 * order (the windows msr_sampler_windows counts: starting at multiples of
 * T), so the set depends on the file, G and T only, never on the layout,
 * the seed or the step. The loss is the mean over the rows' tokens (the
 * cross-entropy msr_gpt_forward reports). */
#ifndef MSR_PARALLEL_EVAL_H
#define MSR_PARALLEL_EVAL_H

#include "msrun/base.h"
#include "model/data.h"
#include "parallel/train.h"

/* Writes the mean loss over `batches` global batches of val's rows to
 * *loss_p, the same on every rank. Collective over the trainer's world
 * (every rank calls it), between steps; the trainer's parameters and its
 * next step are unchanged (its counters count the forwards' gathers and
 * reads). val->size must exceed T and val's tokens be below
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
