/* What train.c and train_ckpt.c share inside the trainer (not public). */
#ifndef MSR_PARALLEL_TRAIN_IMPL_H
#define MSR_PARALLEL_TRAIN_IMPL_H

#include "parallel/train.h"

/* Before the trainer writes its parameters or moments: the caller's
 * state_gate, if any (train.h). */
static inline void msr_train_gate(msr_trainer_t *tr)
{
    if (tr->state_gate != NULL)
        tr->state_gate(tr->state_gate_arg);
}

/* ZeRO-1 for the experts, after an update or a restore: every replica
 * gets the others' blocks of the parameters (nothing to do without
 * replicas). Collective over tr->rep_comm. Errors: the communicator's. */
msr_status_t msr_train_experts_gather(msr_trainer_t *tr);

/* ZeRO-3 for the experts with replicas (train_experts.c, train.h's ez):
 * shard_local sets the store external, allocates and initialises the
 * shards, creates the experts' optimizer over them and has dp's hooks
 * gather each block around its uses, the next one's gather started while
 * the current one computes; local (a trainer's creation agrees on its
 * outcome over the world; errors: MSR_ERR_NO_MEMORY, the store's; what it
 * allocated left to free). shard does the same on a trainer made
 * already, collective over comm (the trainer's dp group), whose ranks all
 * fail when one is out of memory, naming the lowest such (errors: those
 * and the communicator's). zero clears the shards' gradients, norm hands their
 * squared norm to the next msr_dp_update, and both forget the gathered
 * blocks, finishing the gathers in flight (collective over tr->rep_comm;
 * errors: the communicator's); free finishes those gathers and frees the
 * buffers (after a failed shard too). */
msr_status_t msr_train_experts_shard_local(msr_trainer_t *tr);
msr_status_t msr_train_experts_shard(msr_trainer_t *tr, msr_comm_t *comm);
msr_status_t msr_train_experts_zero(msr_trainer_t *tr);
msr_status_t msr_train_experts_norm(msr_trainer_t *tr);
void msr_train_experts_free(msr_trainer_t *tr);

/* The experts' optimizer with its moments offloaded (train.h's eoff):
 * offload moves the moments of a trainer just made into a file of its own
 * under cfg.par.offload's disk mode (nothing otherwise, nor for a shard
 * without elements; errors: the store's, MSR_ERR_UNSUPPORTED for experts
 * outside host memory). update runs the experts' AdamW over the shard
 * space (params and grads as msr_adamw_update takes them), the moments a
 * chunk at a time through the file when they are offloaded: the same
 * arithmetic, so the same bits (errors: the store's, after which it
 * refuses every further call). */
msr_status_t msr_train_experts_offload(msr_trainer_t *tr);
msr_status_t msr_train_experts_update(msr_trainer_t *tr, float *params, const float *grads,
                                      float lr, float grad_scale);

#endif
