/* The order in which one pipeline rank runs its forwards and backwards,
 * for each schedule: the runtime follows it (parallel/mp.c), and the
 * planner walks the same order to count the activations a rank holds at
 * once (planner/plan_acts.c) and to simulate the step (planner/plan_sim.c).
 *
 * GPipe: every forward, then every backward. 1F1B (or one virtual stage):
 * p - r - 1 warm-up forwards, then one forward and one backward in turn,
 * then the remaining backwards. Interleaved (Megatron's): groups of p
 * micro-batches go through chunk 0, then chunk 1, ...; the warm-up is
 * (p - r - 1) * 2 + (v - 1) * p forwards (all of them when M == p), and
 * backward runs the chunks the other way. */
#ifndef MSR_PARALLEL_PIPE_ORDER_H
#define MSR_PARALLEL_PIPE_ORDER_H

#include <stdint.h>

/* The schedules, numbered as msr_mp_schedule_t and the planner's. */
enum { MSR_PIPE_GPIPE = 0, MSR_PIPE_1F1B = 1, MSR_PIPE_INTERLEAVED = 2 };

typedef struct msr_pipe_op {
    uint8_t backward;
    int m, c; /* the micro-batch and the chunk (virtual stage) */
} msr_pipe_op_t;

/* Writes rank r's 2 * micros * chunks ops (of pp ranks, chunks virtual
 * stages each) into ops, in the order it runs them, and returns their
 * number. The interleaved order with chunks > 1 needs micros a multiple
 * of pp (msr_mp_check). */
int msr_pipe_order(int schedule, int micros, int pp, int r, int chunks, msr_pipe_op_t *ops);

/* Op k (0 <= k < 2 * micros * chunks) of that order, without the rest. */
msr_pipe_op_t msr_pipe_op_at(int schedule, int micros, int pp, int r, int chunks, int k);

/* How many of the order's first ops hold the most frames (and bytes) the
 * rank ever holds at once: past them the frames alive only repeat what
 * they were or fall. At most 2 * micros * chunks. */
int msr_pipe_ops_to_peak(int schedule, int micros, int pp, int r, int chunks);

#endif
