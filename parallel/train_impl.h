/* What train.c and train_ckpt.c share inside the trainer (not public). */
#ifndef MSR_PARALLEL_TRAIN_IMPL_H
#define MSR_PARALLEL_TRAIN_IMPL_H

#include "parallel/train.h"

/* ZeRO-1 for the experts, after an update or a restore: every replica
 * gets the others' blocks of the parameters (nothing to do without
 * replicas). Collective over tr->rep_comm. Errors: the communicator's. */
msr_status_t msr_train_experts_gather(msr_trainer_t *tr);

#endif
