/* The memory model's private pieces, shared by its files: the part a rank
 * holds and dp's layout of it (plan_part.c), dp's temporaries replayed
 * (plan_replay.c), the runtime's activations and work space (plan_acts.c)
 * and the paper's frame (plan_paper.c), which plan_mem.c adds up per rank.
 * Not part of the planner's interface (plan.h); pure arithmetic, any
 * thread. */
#ifndef MSR_PLANNER_PLAN_MEM_IMPL_H
#define MSR_PLANNER_PLAN_MEM_IMPL_H

#include <stdint.h>

#include "layout/layout.h"
#include "planner/plan.h"

#define MSR_PLAN_F32 4u

static inline uint64_t msr_plan_min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static inline uint64_t msr_plan_max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static inline uint64_t msr_plan_ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

/* The replica group dp's buckets and shards span: dp x cp (parameters are
 * replicated over cp, parallel/mesh.h). */
static inline int msr_plan_replicas(const msr_plan_layout_t *l)
{
    return l->dp * msr_plan_cp(l);
}

/* ---- the part a rank holds (plan_part.c) ---- */

/* The segments of a part in flat order (model/gpt.h): the embeddings on
 * the first stage, a segment per block, the final norm (and head) on the
 * last. */
typedef struct msr_plan_part {
    int has_embed, has_head, blocks, moe_blocks;
    uint64_t embed, block, moe_block, head, total;
    const msr_plan_model_t *m;
    const msr_plan_layout_t *l;
    int pr;
} msr_plan_part_t;

typedef struct msr_plan_dp_layout {
    uint64_t buckets;
    uint64_t shard, replicated;
    uint64_t packed_max; /* the largest packed bucket buffer (dp * blk + rep) */
    uint64_t seg_max;    /* the largest segment */
    uint64_t gather_max; /* the largest ZeRO-3 gather buffer (dp * its blocks' sum) */
    int span_max;        /* the most buckets one segment lies in */
} msr_plan_dp_layout_t;

/* Layers [lo, hi) of virtual stage j of n, as the runtime splits them. */
void msr_plan_stage_layers(const msr_plan_layout_t *l, int layers, int n, int j, int *lo, int *hi);

/* Elements of one expert (the dense MLP's). */
uint64_t msr_plan_expert_params(const msr_plan_model_t *m);

/* The part pipeline rank pr holds, into *p (which keeps m and l). */
void msr_plan_part_of(const msr_plan_model_t *m, const msr_plan_layout_t *l, int pr,
                      msr_plan_part_t *p);

/* Elements of the part's segment k, in flat order. */
uint64_t msr_plan_seg_count(const msr_plan_part_t *p, int k);

/* The part's blocks' elements, and the largest block's (a dense and a MoE
 * block differ: parallel/dp_params.c's store block); 0 without blocks. */
uint64_t msr_plan_part_blocks(const msr_plan_part_t *p);
uint64_t msr_plan_part_block_max(const msr_plan_part_t *p);

/* The walk over the part's units, cut as the runtime cuts them. */
/* ZeRO-3 under the parameters' offload: the bytes of replica's shard
 * left in memory and the store's buffers and table (plan_offload.c). */
uint64_t msr_plan_offload_params_z3(const msr_plan_part_t *p, const msr_plan_layout_t *l,
                                    int replica);
void msr_plan_part_units(const msr_plan_part_t *p, const msr_plan_layout_t *l,
                         msr_layout_units_t *it);

/* dp's layout of the part as replica dp_rank sees it, into *out. */
void msr_plan_dp_layout(const msr_plan_part_t *p, const msr_plan_layout_t *l, int dp_rank,
                        msr_plan_dp_layout_t *out);

/* ---- dp's temporaries, replayed (plan_replay.c, parallel/dp.c) ---- */

/* The runtime's temporary buffers (tmp_alloc) come and go in an order the
 * planner knows: ZeRO-3's gathers at each acquire (the segment's own and
 * the next one's, prefetched), ZeRO-2/3's segment gradients from a
 * segment's backward acquire to its grads_ready, and the packed buckets
 * from the first segment packed into them until their reduction is
 * finished. Only that last moment depends on timing: a reduction finishes
 * when a later progress() finds it done, or when make_room must free a
 * buffer (MSR_DP_MAX_PACKED alive) or the micro-batch ends. The replay
 * lets none finish before it must, so its peak is the runtime's when
 * communication lags behind backward (the usual case on a loaded CPU),
 * and an upper bound otherwise. The update's allgather (ZeRO 1-2) holds
 * two consecutive buckets at once. Limits of the replay's arrays: beyond
 * them the sum of maxima stands in. */
#define MSR_PLAN_REPLAY_MAX 2048

typedef struct msr_plan_replay {
    int zero, nseg, nb, size;
    uint64_t cur, peak;
    /* buckets: packed elements, lowest segment, state */
    uint64_t packed[MSR_PLAN_REPLAY_MAX], blk[MSR_PLAN_REPLAY_MAX];
    int low_seg[MSR_PLAN_REPLAY_MAX];
    unsigned char alive[MSR_PLAN_REPLAY_MAX];
    int alive_n, next_start, next_fin;
    /* segments: elements, gather buffer, first and last bucket, state */
    uint64_t count[MSR_PLAN_REPLAY_MAX], gbuf[MSR_PLAN_REPLAY_MAX];
    int b_lo[MSR_PLAN_REPLAY_MAX],
        b_hi[MSR_PLAN_REPLAY_MAX]; /* bucket of the first / last element */
    unsigned char rep[MSR_PLAN_REPLAY_MAX], direct[MSR_PLAN_REPLAY_MAX], gat[MSR_PLAN_REPLAY_MAX],
        grads[MSR_PLAN_REPLAY_MAX];
} msr_plan_replay_t;

/* The peak of dp's temporaries (r is the replay's room); *during_p and
 * *after_p those alive beside the kept activations and after them;
 * UINT64_MAX when the part is too large to replay. */
uint64_t msr_plan_transient_peak(const msr_plan_layout_t *l, const msr_plan_part_t *p, int whole,
                                 msr_plan_replay_t *r, uint64_t *during_p, uint64_t *after_p);

/* ---- activations and work space (plan_acts.c, plan_paper.c) ---- */

/* fp32 elements one micro-batch chunk of `layers` blocks keeps (GPT runtime). */
uint64_t msr_plan_frame_elems(const msr_plan_model_t *m, const msr_plan_layout_t *l, int layers,
                              int head);

/* Whether train_gpt runs the whole model without the model-parallel runtime. */
int msr_plan_whole_path(const msr_plan_layout_t *l);

/* fp32 elements of the whole model's activation table. */
uint64_t msr_plan_whole_acts_elems(const msr_plan_model_t *m, const msr_plan_layout_t *l);

/* Bytes of the work space and token buffers; *scratch_p the blocks'
 * shared scratch among them. */
uint64_t msr_plan_work_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                             uint64_t *scratch_p);

/* Bytes of the MoE state's buffers for `blocks` MoE blocks, floats of fw bytes. */
uint64_t msr_plan_moe_work_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l, int blocks,
                                 int tp_rank, uint64_t fw);

/* The most bytes of chunk frames rank pr's schedule keeps at once; *held_p
 * the most frames. */
uint64_t msr_plan_schedule_peak(const msr_plan_layout_t *l, int pr, const uint64_t *chunk_bytes,
                                int *held_p);

/* Paper accounting: bytes of one chunk's kept activations. */
uint64_t msr_plan_frame_paper_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                                    msr_plan_precision_t prec, int layers);

/* Bytes of bf16 operand scratch the products context of a rank whose part
 * has `blocks` blocks (moe_blocks of them MoE) and, when has_head, the head
 * holds after a step (train_gpt --precision bf16). */
uint64_t msr_plan_bf16_scratch_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                                     int blocks, int moe_blocks, int has_head);

#endif
