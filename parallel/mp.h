/* Model parallel: forward and backward of a rank's part of the reference
 * GPT (model/gpt.h, msr_gpt_create_part) under tensor, sequence and
 * pipeline parallel, with recompute, on a mesh (parallel/mesh.h).
 *
 * Tensor parallel (tp ranks, Megatron's split). Per block:
 *   ln1 -> [column-parallel qkv: this rank's NH/tp heads] -> attention ->
 *   [row-parallel attproj] -> allreduce -> + bias, residual;
 *   ln2 -> [column-parallel fc: 4C/tp] -> gelu -> [row-parallel fcproj] ->
 *   allreduce -> + bias, residual.
 * Forward: identity into a column-parallel layer, an allreduce of the
 * row-parallel layer's output; backward the conjugates: identity for the
 * row-parallel layer's output gradient, an allreduce of the gradient of the
 * column-parallel layer's input. The embedding is vocabulary-parallel (a
 * rank looks up the tokens of its V/tp rows, the partial embeddings are
 * summed); the head computes its V/tp logits and the cross-entropy is
 * computed over the split vocabulary (one allreduce of the row maxima, one
 * of the exponential sums and target logits), so no rank holds (N, V).
 * Every rank of a tp group computes the same loss.
 *
 * Sequence parallel (sp, needs T % tp == 0): outside the column/row pairs
 * (layernorms, residuals, embeddings' sum) a rank holds only its T/tp
 * positions of every sequence; each allreduce above becomes a
 * reduce-scatter along the sequence, and the identity before a
 * column-parallel layer an allgather (backward: the conjugates). The
 * gathered layernorm output is not kept: backward gathers it again. The
 * tp-replicated parameters (layernorms, row-parallel biases, wpe) then get
 * partial gradients, summed over tp at the end of the step.
 *
 * Context parallel (cp ranks, needs T % (2 cp) == 0): the sequence is cut
 * into 2 cp chunks of T/(2 cp) positions and cp rank i holds chunks i and
 * 2 cp - 1 - i (Tc = T/cp positions: causal attention's work is then the
 * same on every rank). Everything outside attention (embeddings with the
 * global positions, layernorms, matmuls, the head and loss) runs on the
 * rank's own positions; sequence parallel then splits those Tc positions
 * over tp (needs Tc % tp == 0). Attention is ring attention (mp_cp.c):
 * each rank's K and V travel around the cp group point to point, the next
 * block's transfer in flight while the current one is folded into the
 * online softmax (layers.h, msr_attention_ring_forward); what is kept is
 * the output and the logsumexp (B, Tc, NH/tp), never (T, T). Backward
 * sends the K/V blocks around again with their gradients, which arrive
 * back at their owner after a full turn. Parameters are replicated over
 * cp: gradients are summed over dp x cp (the mesh's dcp_comm, which ZeRO
 * also shards over), and the loss is each rank's share of the mean.
 *
 * Pipeline parallel (pp ranks, chunks virtual stages each): activations
 * (B, T or T/tp, C) go to the next virtual stage and their gradients back,
 * point to point (non-blocking sends, blocking receives with the
 * communicator's deadline). A step's micro-batches are its grad_accum
 * micro-batches. Schedules: GPipe (every forward, then every backward),
 * 1F1B (pp - rank - 1 warm-up forwards, then one forward one backward;
 * needs micro-batches >= pp) and interleaved 1F1B (Megatron's order over
 * chunks; needs micro-batches a multiple of pp). With pp > 1 the last stage
 * keeps a copy of wte for the head; its gradient is added into the first
 * stage's at the end of the step, and the first stage sends the updated
 * wte back after the optimizer step (msr_mp_sync_tied), so both stay equal.
 * A Llama (model/gpt.h) embeds with wte alone (rotary positions are the
 * blocks') and its last stage holds the untied lm_head after the final
 * RMSNorm: no copy, nothing tied to sync. Under tp its kv heads split like
 * the query heads (kv heads divisible by tp: msr_gpt_part_check), w1 and
 * w3 are column-parallel, w2 row-parallel, lm_head vocabulary-parallel.
 * Under cp its blocks rotate q and k at each row's global position (the
 * zigzag chunks', msr_block_t.pos) and the ring carries the k and v of
 * its KVH/tp key/value heads only, each repeated for its query
 * heads one chunk at a time in front of the ring kernels.
 *
 * Recompute: none keeps every activation backward needs; selective drops
 * the attention probabilities (B, NH/tp, T, T) and the GELU output and
 * recomputes them from the kept q, k, v and fc output (no communication;
 * under cp it keeps the small logsumexp and drops only the GELU output);
 * full keeps only each block's input and recomputes the block's forward
 * (tensor-parallel collectives and the ring included) just before its
 * backward. Under full recompute the activation offload (cfg->acts) keeps
 * only a chunk's last output in its frame: every block's input goes to a
 * file after the block's forward (written behind while the next block
 * runs) and comes back before its backward, the next MSR_ACTS_AHEAD read
 * ahead in reverse order; the bytes, the order and the arithmetic are the
 * same, so the losses are too.
 *
 * Mixture-of-Experts blocks (model/moe.h) run in any stage: attention
 * as any block's, then the MoE MLP in the MLP's place, its input entered
 * like a column-parallel layer's and its output reduced like a
 * row-parallel one's (each tp rank computes E / (ep tp) of the experts; a
 * partial y); the MoE state keeps each micro-batch's routing from its
 * forward to its backward (full recompute routes again, counting nothing
 * twice), and the load-balancing losses of every stage join the step's
 * loss on tp rank 0. Under cp a MoE block counts capacity and the
 * load-balancing loss over the whole micro-batch (model/moe.h), so the
 * routing is one process's.
 *
 * Data parallel and ZeRO 0-2 run on top (parallel/dp.h over the part's flat
 * buffers). GPipe and 1F1B run a rank's backwards in micro-batch order, so
 * each backward is one dp micro-batch: a segment's gradient goes to dp
 * (grads_ready) as soon as backward finishes it, summed over tp first under
 * sp and, for wte on the first stage, with the head's gradient added on the
 * last backward; buckets reduce while backward goes on, on the step's last
 * micro-batch (every one under ZeRO-2), as data parallel alone does.
 * Interleaved 1F1B mixes the chunks' backwards, so it accumulates the whole
 * step and reduces once after the pipeline flush (msr_dp_reduce_all).
 * ZeRO-3 runs on one stage (tp, sp, cp, recompute): every segment is
 * acquired around each use, forward too, and dp gathers it at each
 * acquire and frees it at each release (msr_dp_set_model_parallel); under
 * cp dp's group is dp x cp, so the shards, the gathers and the gradients'
 * reduce-scatter span it as ZeRO-1/2's do. pp > 1 and MoE models are
 * refused with it (msr_mp_check).
 *
 * Not thread-safe: the thread that drives the model drives this. */
#ifndef MSR_PARALLEL_MP_H
#define MSR_PARALLEL_MP_H

#include <stddef.h>
#include <stdint.h>

#include "layout/layout.h"
#include "msrun/base.h"
#include "msrun/device.h"
#include "parallel/dp.h"
#include "model/gpt.h"
#include "parallel/mesh.h"
#include "parallel/offload_acts.h"

typedef enum msr_mp_schedule {
    MSR_MP_GPIPE = MSR_PIPE_GPIPE,
    MSR_MP_1F1B = MSR_PIPE_1F1B,
    MSR_MP_INTERLEAVED = MSR_PIPE_INTERLEAVED,
} msr_mp_schedule_t;

/* (the layout's modes: its activation table decides what each keeps) */
typedef enum msr_mp_recompute {
    MSR_MP_RECOMPUTE_NONE = MSR_LAYOUT_RECOMPUTE_NONE,
    MSR_MP_RECOMPUTE_SELECTIVE = MSR_LAYOUT_RECOMPUTE_SELECTIVE,
    MSR_MP_RECOMPUTE_FULL = MSR_LAYOUT_RECOMPUTE_FULL,
} msr_mp_recompute_t;

typedef struct msr_mp_config {
    int sp;                       /* sequence parallel */
    msr_mp_schedule_t schedule;   /* pipeline schedule */
    int chunks;                   /* virtual stages per rank: 1 unless interleaved */
    msr_mp_recompute_t recompute; /* what backward recomputes */
    int micro_batch;              /* B */
    int micros;                   /* micro-batches per step (grad_accum) */
    int zero;                     /* the ZeRO stage dp runs (checked) */
    /* the layers of each of the pp * chunks virtual stages (msr_gpt_part_t's
     * stage_layers), NULL: the even split. Borrowed: the model's copy
     * (model->part.stage_layers) once the model is made. */
    const int *stage_layers;
    int cp; /* context-parallel degree (the mesh's; 0 or 1: none) */
    /* activation offload (parallel/offload_acts.h): MSR_OFFLOAD_DISK with
     * full recompute spills each block's input to a file after its
     * forward and reads it back ahead of its backward; dir is borrowed
     * until msr_mp_create returns */
    msr_offload_config_t acts;
    /* tensor-parallel overlap: each micro-batch's dense blocks run forward
     * as two copies of B/2 sequences, one copy's tp allreduce (under sp
     * its reduce-scatter) in flight while the other computes
     * (model/block.h, msr_block_forward_split); needs tp > 1 and an even
     * micro-batch */
    int tp_overlap;
    /* the chunked head (layout.h msr_layout_head_chunk): the head's
     * logits this many vocabulary rows at a time, a frame keeping three
     * numbers a row instead of the probabilities; 0: the whole head */
    int head_chunk;
    /* where the runtime's buffers live and its copies run (msrun/device.h):
     * the blocks' work space, the frames' kept activations, the pipeline's
     * gradients in flight, the last stage's tied embedding, context
     * parallel's ring copies and the tp gradient sums' buffer. NULL: the
     * CPU. Only a device with host memory is accepted until the model's
     * kernels run on devices (msr_mp_create: MSR_ERR_UNSUPPORTED) */
    const msr_device_t *device;
} msr_mp_config_t;

/* Names of the schedules and recompute modes ("gpipe", "1f1b",
 * "interleaved"; "none", "selective", "full"); -1 for an unknown name. */
int msr_mp_schedule_parse(const char *name);
int msr_mp_recompute_parse(const char *name);
const char *msr_mp_schedule_name(msr_mp_schedule_t s);
const char *msr_mp_recompute_name(msr_mp_recompute_t r);

/* Checks that the model can run as cfg says on pp x tp (and cfg->cp): the
 * part's rules (msr_gpt_part_check: heads and vocabulary divisible by tp, a
 * layer for every virtual stage, cfg->stage_layers a split of the layers),
 * T % (2 cp) == 0, sp with tp > 1 and (T / cp) % tp == 0, 1F1B with at least pp micro-batches,
 * interleaved with pp > 1 and micro-batches a multiple of pp, ZeRO 0..3 (3 with pp = 1 and no
 * experts), tp_overlap with tp > 1 and an even micro-batch. On failure sets the error
 * text (base/err.h: a one-line reason) and returns MSR_ERR_CONFIG. */
msr_status_t msr_mp_check(const msr_gpt_config_t *model, const msr_mp_config_t *cfg, int pp,
                          int tp);

/* One span of the trace: a piece of compute or communication. */
typedef struct msr_mp_span {
    char name[28];
    uint8_t comm;      /* 0 compute, 1 communication */
    uint64_t start_ns; /* from the step's start */
    uint64_t dur_ns;
} msr_mp_span_t;

/* What the steps did, summed over steps. */
typedef struct msr_mp_stats {
    uint64_t steps;
    uint64_t step_ns;      /* msr_mp_run, whole */
    uint64_t busy_ns;      /* forward and backward work, receives' waiting excluded */
    uint64_t recv_wait_ns; /* blocked in pipeline receives */
    size_t acts_peak;      /* the most activation bytes kept at once */
    size_t frame_bytes[2]; /* kept bytes of one micro-batch's chunk: plain / with the head */
    size_t frames_held;    /* the frames' buffers allocated (kept for reuse when closed) */
    size_t work_bytes;     /* the work space every block and the head share (point_work),
                            * and under cp the ring's positions and local tokens */
} msr_mp_stats_t;

typedef struct msr_mp msr_mp_t;

/* Makes the runtime of model (a part made for mesh's pp_rank, tp_rank,
 * cfg->chunks and cfg->stage_layers' split) on mesh, for micro-batches of
 * cfg->micro_batch x T tokens. model and mesh must outlive it. Errors:
 * MSR_ERR_CONFIG (the reason in the error text), MSR_ERR_NO_MEMORY. */
msr_status_t msr_mp_create(const msr_mp_config_t *cfg, const msr_mesh_t *mesh, msr_gpt_t *model,
                           msr_mp_t **mp_p);
void msr_mp_destroy(msr_mp_t *mp);

/* Runs one step's forwards and backwards: inputs and targets hold cfg
 * micros micro-batches of (B, T) tokens each. Each micro-batch's backward
 * adds dloss x the gradient of its token losses' sum. Starts dp's step
 * (msr_dp_micro_begin), and ends with every gradient of the part final and
 * reduced over dp (tied wte and sequence-parallel sums included); the
 * caller then runs msr_dp_update. *loss_p gets the sum of the micro-batches'
 * mean losses on the last stage's tp rank 0, plus the stage's MoE
 * load-balancing losses on every stage's tp rank 0, 0 elsewhere (what
 * msr_dp_update sums). Collective over the mesh. Errors: the
 * communicators' (their error text prefixed with what failed),
 * MSR_ERR_NO_MEMORY. */
msr_status_t msr_mp_run(msr_mp_t *mp, msr_dp_t *dp, const int *inputs, const int *targets,
                        float dloss, double *loss_p);

/* Forwards alone between two steps (the validation's, parallel/eval.c;
 * mp_eval.c): inputs and targets hold `micros` (1 .. cfg micros)
 * micro-batches of (B, T) tokens; each runs through the pipeline's stages
 * in order, micro-batch after micro-batch, its parameters got through
 * dp's hooks as a step's forward gets them (msr_dp_eval_begin and _end
 * around), nothing kept for a backward: a frame is given back as its
 * forward ends. *loss_p gets what msr_mp_run's does (the sum of the
 * micro-batches' mean losses on the last stage's tp rank 0, each context
 * parallel rank its share; 0 elsewhere). Under the activations' offload
 * the block inputs go back to the store unwritten. A MoE model runs one
 * sequence a pass whatever the micro-batch (its blocks' capacity depends
 * on the tokens of a pass; a micro-batch's mean is then its sequences'
 * mean, and tensor parallel's overlap is off for the passes); its router
 * counts nothing, and its load-balancing losses join *loss_p as
 * msr_mp_run's do. The parameters,
 * gradients and the next step are unchanged; the trace records nothing.
 * Collective over the mesh. Errors: as msr_mp_run's. */
msr_status_t msr_mp_eval(msr_mp_t *mp, msr_dp_t *dp, const int *inputs, const int *targets,
                         int micros, double *loss_p);

/* The data-parallel state whose hooks msr_mp_sync_tied gathers ZeRO-3's
 * embedding segment with (msr_mp_run sets it too); dp must outlive mp. */
void msr_mp_set_dp(msr_mp_t *mp, msr_dp_t *dp);

/* Under ZeRO-3, on the first stage of a tied pipeline: reserves the
 * buffers of the embedding's gather that the next msr_mp_sync_tied takes
 * (msr_dp_gather_reserve), so that a creation's first send, after its
 * agreement, allocates none. Local; MSR_ERR_NO_MEMORY; does nothing
 * otherwise (msr_mp_set_dp before). */
msr_status_t msr_mp_tied_reserve(msr_mp_t *mp);

/* Pipeline with pp > 1: the first stage sends its wte to the last stage's
 * head copy (after initialisation, an optimizer step or a restore); under
 * ZeRO-3 the first stage gathers it over dp first (msr_mp_set_dp before).
 * Collective over the pipeline group (and under ZeRO-3 the first stage's
 * dp group); does nothing otherwise. */
msr_status_t msr_mp_sync_tied(msr_mp_t *mp);

/* Tracing: while on, msr_mp_run records its spans (each run starts a new
 * list, timed from a barrier of the world so ranks line up). */
void msr_mp_trace(msr_mp_t *mp, int on);
/* The last run's spans (valid until the next run). */
const msr_mp_span_t *msr_mp_spans(const msr_mp_t *mp, int *n_p);

/* Adds the span of the optimizer step (times from msr_now_ns) to the trace. */
void msr_mp_span_update(msr_mp_t *mp, uint64_t start_ns, uint64_t end_ns);

const msr_mp_stats_t *msr_mp_stats(const msr_mp_t *mp);

/* The activation offload's store (counters, file), NULL without it. */
const msr_acts_t *msr_mp_acts(const msr_mp_t *mp);

/* The activation bytes one micro-batch's chunk keeps from forward to
 * backward, per the mode (see above): what acts_peak is made of. with_head:
 * the chunk that ends in the output head. Counted from the shapes alone. */
size_t msr_mp_frame_bytes(const msr_gpt_config_t *model, const msr_mp_config_t *cfg, int tp,
                          int layers, int with_head);

#endif
