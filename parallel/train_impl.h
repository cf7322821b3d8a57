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

/* The place in the experts' store of the MoE block segment s runs, or -1
 * (a dense segment, or a block held elsewhere). */
int msr_train_experts_held_block(const msr_trainer_t *tr, int s);
/* The held block a pass in direction dir (+1, -1) reaches next after
 * segment s inside s's model chunk (an interleaved pipeline's next pass
 * is often another chunk's), -1 when none. */
int msr_train_experts_next_in_chunk(const msr_trainer_t *tr, int s, int dir);
/* The segment of held block k (-1: none). */
int msr_train_experts_block_seg(const msr_trainer_t *tr, int k);

/* The experts' parameters in a file under the parameters' disk offload
 * (train_experts_disk.c, train.h's epf), for experts without ZeRO
 * replicas' shards (ZeRO 0, or no replicas): disk sets the store
 * external, makes the file and seeds it a block at a time (the numbers
 * msr_moe_init_params gives), keeps the gradients resident (or, under
 * the gradients' disk offload without replicas, in a second file, each
 * block read and written back around its backward) and has dp's hooks
 * read each block around its passes (local; errors: the store's,
 * MSR_ERR_NO_MEMORY, MSR_ERR_UNSUPPORTED for experts outside host
 * memory; what it made left to disk_free). disk_update runs the experts'
 * AdamW over the store a block at a time (each read, updated, written
 * back; the moments a chunk at a time when offloaded too): the same
 * arithmetic as msr_train_experts_update. spans hands the parameters of
 * shard elements [s, s + n) to fn a block's span at a time (as
 * msr_dp_params_spans: through the store, or from the file on another
 * thread when blk->shared). disk_load writes n parameters from src over
 * shard elements [s, s + n) through the cursor, which cursor_end writes
 * back (after a restore). hold reads the whole parameters into ed_hold
 * (for an in-memory snapshot), drop frees them. */
msr_status_t msr_train_experts_disk(msr_trainer_t *tr);
/* The same under ZeRO-3 with replicas (train_experts.c's shard_make,
 * ez_n > 0): store epf holds this rank's shares of the blocks (ed_per =
 * ez_n, the shard space's block k at k * ez_n, as ez_params would), each
 * read for the block's gathers (train_experts.c's slot_start) and a block
 * at a time by the update, a checkpoint and a restore through the same
 * cursors. The gradients' shards stay in ez_grads, or under the
 * gradients' disk offload go to store egf (ez_grads NULL): block k's
 * share read, added to and written back after each backward of the
 * block (disk_add), read by the norm and the update. */
msr_status_t msr_train_experts_disk_shards(msr_trainer_t *tr);
/* Adds src (ed_per floats: this rank's share of MoE block k's reduced
 * gradients) into block k of store egf, this step's zeros at its first.
 * Errors: the store's. */
msr_status_t msr_train_experts_disk_add(msr_trainer_t *tr, int k, const float *src);
/* Under ZeRO 1-2 with replicas (ed_gath): every block of the file gets
 * the other replicas' owned elements, in order, each read, gathered and
 * written back (after a restore; collective over tr->rep_comm; errors:
 * the store's, the communicator's). */
msr_status_t msr_train_experts_disk_gather(msr_trainer_t *tr);
/* Under ZeRO 2 with replicas and the gradients in their file (egf): after
 * the step's backward, block by block, each replica's owned part of the
 * block summed into that replica's copy (a reduce to it), written back;
 * their squared norm to the update (collective over tr->rep_comm;
 * errors: the store's, the communicator's). */
msr_status_t msr_train_experts_disk_reduce(msr_trainer_t *tr);
void msr_train_experts_disk_free(msr_trainer_t *tr);
/* A step's start: the experts' gradients zero (in their file: each
 * block's taken as zeros at its first read of the step). */
void msr_train_experts_disk_zero(msr_trainer_t *tr);
/* The squared norm of the experts' gradients in their file (tr->egf),
 * read a block at a time in element order (the sum in memory's order).
 * Errors: the store's. */
msr_status_t msr_train_experts_disk_sumsq(msr_trainer_t *tr, double *sumsq_p);
msr_status_t msr_train_experts_disk_update(msr_trainer_t *tr, float lr, float grad_scale);
msr_status_t msr_train_experts_spans(msr_trainer_t *tr, size_t s, size_t n, msr_dp_blk_t *blk,
                                     msr_dp_span_fn fn, void *arg);
msr_status_t msr_train_experts_disk_load(msr_trainer_t *tr, size_t s, size_t n, const float *src);
msr_status_t msr_train_experts_cursor_end(msr_trainer_t *tr);
msr_status_t msr_train_experts_hold(msr_trainer_t *tr);
void msr_train_experts_drop(msr_trainer_t *tr);

#endif
