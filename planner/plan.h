/* The planner's memory model: the bytes a rank holds for a model description,
 * a parallel layout and a precision, by kind (see docs/plan.md). Pure
 * arithmetic: no I/O, no allocation, no communicator.
 *
 * Two accountings:
 *
 *   runtime  msrun's own CPU runtime (parallel/dp.h, parallel/mp.h) training
 *            the reference GPT, or its Llama (RMSNorm, SwiGLU of ffn,
 *            grouped-query attention, untied head), in fp32, exactly: the
 *            part's parameters, dp's
 *            buckets, units and shards (ZeRO 0-3, replicated small
 *            segments), each micro-batch chunk's kept activations and the
 *            most held at once under the rank's schedule. These equal, to
 *            the byte, what train_gpt --report prints. Also the runtime's
 *            bf16 (MSR_PLAN_BF16_RUNTIME, train_gpt --precision bf16): the
 *            same fp32 state plus the products' bf16 operand scratch.
 *
 *   paper    the published conventions: mixed-precision Adam keeps 2 + 2 +
 *            K bytes per parameter (K = 12: fp32 master weights and two
 *            moments) partitioned by ZeRO stage (Rajbhandari et al. 2019);
 *            activations per layer in 16-bit by Korthikanti et al. (2022)'s
 *            terms, cut by tensor and sequence parallel and dropped by
 *            recompute. Used for MSR_PLAN_BF16 (bf16 at paper scale).
 *
 * Layer and rank conventions follow the runtime: rank = ((dp_rank * pp +
 * pp_rank) * cp + cp_rank) * tp + tp_rank (parallel/mesh.h), virtual stage j = c * pp +
 * pp_rank holds layers [L*j/n, L*(j+1)/n) of n = pp * chunks, or with
 * stage_layers (train_gpt --pp-layers) the next stage_layers[j] of them. */
#ifndef MSR_PLANNER_PLAN_H
#define MSR_PLANNER_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "layout/layout.h"

typedef enum msr_plan_arch {
    MSR_PLAN_GPT = 0,   /* LayerNorm, GELU MLP of 4C, tied head, learned positions */
    MSR_PLAN_LLAMA = 1, /* RMSNorm, SwiGLU of ffn, grouped-query attention, untied head */
} msr_plan_arch_t;

typedef struct msr_plan_model {
    msr_plan_arch_t arch;
    int layers;   /* L */
    int channels; /* C (h) */
    int heads;    /* NH (a) */
    int kv_heads; /* Llama: key/value heads (divides heads); GPT: = heads */
    int ffn;      /* Llama: the SwiGLU width; GPT: 4C */
    int vocab;    /* V */
    int seq;      /* T (s) */
    /* Mixture-of-Experts (model/moe.h; experts 0: a dense model): every
     * moe_every-th block's MLP is `experts` experts (each the dense MLP's
     * shape: GPT 8C^2 + 5C, Llama 3 C ffn parameters) behind a router of
     * experts x C, each token going to top_k of them, an expert taking at
     * most ceil(capacity_factor x tokens x top_k / experts) of a
     * micro-batch's tokens */
    int experts, top_k, moe_every;
    double capacity_factor;
} msr_plan_model_t;

typedef enum msr_plan_precision {
    MSR_PLAN_FP32 = 0, /* fp32 parameters, gradients and Adam moments (the runtime) */
    MSR_PLAN_BF16 = 1, /* paper: bf16 parameters and gradients, fp32 master and moments */
    /* the runtime's bf16 (train_gpt --precision bf16): fp32 parameters,
     * gradients and moments as MSR_PLAN_FP32, plus the products' bf16
     * operand scratch (msr_plan_rank_t.bf16_scratch) */
    MSR_PLAN_BF16_RUNTIME = 2,
} msr_plan_precision_t;

/* Schedules and recompute modes: the layout's (layout/layout.h), which
 * parallel/mp.h's are too. */
enum {
    MSR_PLAN_GPIPE = MSR_PIPE_GPIPE,
    MSR_PLAN_1F1B = MSR_PIPE_1F1B,
    MSR_PLAN_INTERLEAVED = MSR_PIPE_INTERLEAVED,
};
enum {
    MSR_PLAN_RC_NONE = MSR_LAYOUT_RECOMPUTE_NONE,
    MSR_PLAN_RC_SELECTIVE = MSR_LAYOUT_RECOMPUTE_SELECTIVE,
    MSR_PLAN_RC_FULL = MSR_LAYOUT_RECOMPUTE_FULL,
};

typedef struct msr_plan_layout {
    int dp, tp, pp;
    int sp;          /* sequence parallel (tp > 1) */
    int zero;        /* ZeRO stage 0..3 (3 only with tp = pp = 1) */
    int recompute;   /* MSR_PLAN_RC_* */
    int micro_batch; /* b: sequences per micro-batch */
    int micros;      /* micro-batches per step and dp rank (gradient accumulation) */
    int schedule;    /* MSR_PLAN_GPIPE, _1F1B, _INTERLEAVED */
    int chunks;      /* virtual stages per rank (interleaved), else 1 */
    /* data parallel's buckets (parallel/dp.h; 0: its defaults) */
    size_t bucket_bytes, first_bucket_bytes, zero_min_bytes;
    /* layers of each virtual stage j = c * pp + pp_rank (pp * chunks
     * entries, summing to the model's layers, each >= 1), as train_gpt's
     * --pp-layers; NULL: the even split of model/gpt.h. Not owned. */
    const int *stage_layers;
    /* context parallel (train_gpt --cp): ranks each sequence is split over
     * (0 or 1: none), as parallel/mp.h's msr_mp_config_t.cp; the world is
     * dp x pp x cp x tp */
    int cp;
    /* expert parallel (train_gpt --ep): the experts are shared out over ep
     * ranks of the data-parallel group (0 or 1: none) */
    int ep;
    /* what train_gpt --offload moves to disk (MSR_PLAN_OFFLOAD_* bits; 0:
     * nothing) and the optimizer's chunk (--offload-chunk; 0: its 4 MiB) */
    int offload;
    size_t offload_chunk;
    /* train_gpt --tp-overlap (parallel/mp.h): a block's forward and
     * backward as two copies of b/2 sequences, one copy's tp allreduces
     * behind the other's compute; needs tp > 1, an even micro-batch, no
     * sp and no cp */
    int tp_overlap;
    /* train_gpt --head-chunk: the head's vocabulary rows a chunk (the
     * model-parallel runtime's chunked head, parallel/mp_head.c); 0: the
     * whole head */
    int head_chunk;
} msr_plan_layout_t;

/* train_gpt --offload's disk modes (docs/model.md "Offload"): the
 * optimizer's moments streamed through 4 chunk buffers and a CRC per chunk
 * (parallel/offload.h), and full recompute's block inputs through 6
 * buffers of one input and a CRC per input (parallel/offload_acts.h). */
enum {
    MSR_PLAN_OFFLOAD_OPTIM = 1,
    MSR_PLAN_OFFLOAD_ACTS = 2,
    /* the blocks' parameters through 3 buffers of one block and a CRC and
     * a flag per block (parallel/offload_params.h): ZeRO 0, the whole model */
    MSR_PLAN_OFFLOAD_PARAMS = 4,
    /* the gradient shard of ZeRO 2-3 through three chunk buffers, a moments'
     * chunk of floats and a CRC and a flag per chunk
     * (parallel/offload_grads.h): beside the optimizer's, data parallel
     * alone */
    MSR_PLAN_OFFLOAD_GRADS = 8,
};
#define MSR_PLAN_OFFLOAD_CHUNK_DEFAULT ((size_t)4 << 20)
#define MSR_PLAN_OFFLOAD_ALIGN         4096u
#define MSR_PLAN_OFFLOAD_CHUNK_MAX     ((size_t)1 << 30)
#define MSR_PLAN_OFFLOAD_SLOTS         4 /* the optimizer's chunk buffers */
#define MSR_PLAN_ACTS_BUFS             6 /* the activations' buffers */
#define MSR_PLAN_PARAMS_BUFS           3 /* the parameters' buffers */

/* The layout's context-parallel degree, 0 read as 1. */
static inline int msr_plan_cp(const msr_plan_layout_t *l)
{
    return l->cp > 1 ? l->cp : 1;
}

/* The layout's expert-parallel degree, 0 read as 1. */
static inline int msr_plan_ep(const msr_plan_layout_t *l)
{
    return l->ep > 1 ? l->ep : 1;
}

/* Whether block l (0-based) of the model is a MoE block. */
static inline int msr_plan_is_moe(const msr_plan_model_t *m, int l)
{
    return m->experts > 0 && m->moe_every > 0 && (l + 1) % m->moe_every == 0;
}

/* One rank's bytes by kind, and the counts behind them. */
typedef struct msr_plan_rank {
    int dp_rank, pp_rank, cp_rank, tp_rank;
    uint64_t part_params;      /* parameters of the rank's part (its flat buffers) */
    uint64_t shard_elems;      /* elements this rank owns in dp's layout */
    uint64_t replicated_elems; /* of them, in replicated (small) segments */
    uint64_t buckets;          /* dp's gradient buckets */
    uint64_t params;           /* parameter bytes held across steps */
    uint64_t grads;            /* gradient bytes */
    uint64_t optim;            /* Adam moments */
    uint64_t master;           /* fp32 master weights (bf16 only) */
    uint64_t frame_bytes[2];   /* one micro-batch chunk's kept activations: plain, with head */
    int frames_held;           /* most chunk frames alive at once under the schedule */
    uint64_t activations;      /* the most activation bytes held at once */
    uint64_t comm;             /* pipeline buffers: gradients sent back, the head's wte copy */
    uint64_t work;             /* the runtime's work space: gradients of activations, the
                                * blocks' shared scratch, logits, the token buffers (runtime
                                * accounting; 0 in the paper accounting) */
    uint64_t untouched;        /* of work, the blocks' shared scratch no block writes without
                                * recompute: never resident, not in total */
    uint64_t shm;              /* the communicator's shared-memory areas the rank's dp and tp
                                * groups touch (an estimate from comm/ucx/shm.c's defaults;
                                * runtime accounting only) */
    uint64_t buckets_bound;    /* dp's temporary buffers at their peak (packed buckets, ZeRO-2/3
                                * segment gradients, ZeRO-3 gathers), replayed in the runtime's
                                * order with no reduction finishing before it must: what the
                                * runtime reaches when communication lags, a bound otherwise */
    int experts_held;          /* experts of each MoE block on this rank (E / ep) */
    uint64_t expert_params;    /* the experts' parameter bytes on this rank (model/moe.h's
                                * store: its MoE blocks x experts held x one expert) */
    uint64_t expert_grads;     /* their gradients */
    uint64_t expert_optim;     /* their Adam moments: whole, or under ZeRO >= 1 this rank's
                                * block of them among the dp / ep ranks holding the same
                                * experts (parallel/train.c); under the optimizer's offload
                                * their store's buffers (a file of their own, when the
                                * block has elements) */
    uint64_t expert_shard;     /* the elements the experts' optimizer updates here */
    uint64_t bf16_scratch;     /* the products' bf16 operand scratch (MSR_PLAN_BF16_RUNTIME:
                                * model/layers_bf16.c, the largest op(A) plus the largest
                                * op(B) the rank rounds; 0 otherwise) */
    uint64_t moe_work;         /* the MoE state's routing, kept expert activations and
                                * exchange buffers (runtime accounting; 0 in the paper's) */
    uint64_t offload_optim_io; /* the optimizer's offload: bytes it reads a step, and writes
                                * (every chunk of its file, the last one whole; 0: none) */
    uint64_t offload_acts_io;  /* the activations' offload: bytes it writes a step in forward,
                                * and reads back in backward (each block input's aligned slot
                                * once a micro-batch; 0: none) */
    uint64_t offload_acts_n;   /* of them, how many block inputs */
    uint64_t offload_grads_w;  /* the gradients' offload: bytes it writes a step, and reads */
    uint64_t offload_grads_r;  /* (msr_plan_offload_grads_io; 0: none) */
    uint64_t offload_eparam_r; /* the experts' parameters in their file (the parameters'
                                * offload without ZeRO replicas of them): bytes it reads a
                                * step (each block's slot once a pass and once in the
                                * update), and writes (once, the update's; 0: none); with
                                * their gradients' file too, its reads (M + 2 a block) and
                                * writes (M) added */
    uint64_t offload_eparam_w; /* (its writes) */
    uint64_t offload_eparam_b; /* of them, one pass over the experts' blocks (every held
                                * MoE block's slot once; 0: none) */
    uint64_t offload_egrads_b; /* the same of their gradients' file (0: resident) */
    uint64_t offload_eowned_b; /* of it, the blocks the update reads: under ZeRO 1-2 over
                                * replicas those this rank owns a part of (which the
                                * step's reduce writes back), else every one */
    uint64_t total;            /* the kinds above at once: the state, comm, work and shm, plus
                                * the larger of activations with the temporaries alive beside
                                * them in backward, and the temporaries after backward (the
                                * interleaved schedule's reduction, the update's gather) with
                                * what activations remain then (the whole model's table) */
} msr_plan_rank_t;

/* Every kind's bytes added up, as --explain lists them; the peak (total)
 * is less by what dp's temporaries and the activations do not hold at
 * once. */
static inline uint64_t msr_plan_rank_rows(const msr_plan_rank_t *o)
{
    return o->params + o->grads + o->optim + o->master + o->expert_params + o->expert_grads +
           o->expert_optim + o->moe_work + o->activations + o->comm + o->buckets_bound + o->work -
           o->untouched + o->shm + o->bf16_scratch;
}

/* The whole model's parameters (GPT: V*C + T*C + L*(12C^2 + 13C) + 2C). */
uint64_t msr_plan_num_params(const msr_plan_model_t *m);

/* Checks the model alone: sizes positive, heads dividing channels (and kv
 * heads dividing heads), its bytes countable in 64 bits. Returns 0, or -1
 * with a one-line reason in why. */
int msr_plan_check_model(const msr_plan_model_t *m, char *why, size_t why_len);

/* Checks the model and the layout against the runtime's rules (the ones
 * train_gpt refuses: heads, vocabulary and sequence divisible by tp, a
 * layer per virtual stage, 1F1B with micros >= pp, interleaved with pp > 1
 * and micros % pp == 0, ZeRO 3 only without tp, pp and cp, stage_layers each
 * >= 1 and summing to the layers, the sequence divisible by 2 cp and, with
 * sp, its T/cp positions by tp, the activations' offload only under full
 * recompute, the optimizer's not with experts, its chunk a multiple of
 * 4096 in [4096, 2^30], ...). Returns 0, or
 * -1 with a one-line reason in why. */
int msr_plan_check(const msr_plan_model_t *m, const msr_plan_layout_t *l, char *why,
                   size_t why_len);

/* Whether prec of model m is counted as the runtime counts (GPT or
 * Llama, dense or with experts, in fp32 or with the runtime's bf16
 * products) rather than by the paper accounting. */
static inline int msr_plan_is_runtime(const msr_plan_model_t *m, msr_plan_precision_t prec)
{
    (void)m;
    return prec == MSR_PLAN_FP32 || prec == MSR_PLAN_BF16_RUNTIME;
}

/* The key/value heads a rank of tensor parallel tp holds: kv_heads / tp,
 * or one, replicated on tp / kv_heads ranks, when fewer than tp (model/
 * gpt.h msr_gpt_kv_heads_local); a GPT's heads / tp. */
static inline int msr_plan_kv_heads_local(const msr_plan_model_t *m, int tp)
{
    if (m->arch != MSR_PLAN_LLAMA)
        return m->heads / tp;
    return m->kv_heads >= tp ? m->kv_heads / tp : 1;
}

/* Rank rank's bytes. GPT or a dense Llama in fp32 or MSR_PLAN_BF16_RUNTIME:
 * the runtime accounting (exact); anything else: the paper accounting. The layout must have passed
 * msr_plan_check. */
void msr_plan_rank(const msr_plan_model_t *m, const msr_plan_layout_t *l, msr_plan_precision_t prec,
                   int rank, msr_plan_rank_t *out);

/* One micro-batch's kept activations for a pipeline chunk of `layers`
 * blocks (head: the last chunk, which holds the head's too), bytes, as
 * msr_plan_rank counts each chunk's frame. */
uint64_t msr_plan_frame_bytes(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                              msr_plan_precision_t prec, int layers, int head);

/* Reads an --offload list (train_gpt's: comma-separated items
 * `optimizer`, `activations`, `params` or `grads`, each bare, `=disk` or
 * `=disk:DIR` (DIR not empty, and an item ends only at a comma that
 * starts the next name, so DIR may hold commas), or `optimizer=host`
 * (nothing moves); each named at most once; `grads` only beside the
 * optimizer's disk offload) into MSR_PLAN_OFFLOAD_* bits in *offload_p.
 * Returns 0, or -1 with a one-line reason in why (*offload_p untouched). */
int msr_plan_offload_parse(const char *s, int *offload_p, char *why, size_t why_len);

/* The MSR_PLAN_OFFLOAD_* bits as train_gpt names them, comma-separated
 * in the order optimizer, activations, params, grads ("none" for 0), into
 * buf. Returns buf. */
const char *msr_plan_offload_name(int offload, char *buf, size_t len);

/* What the offloads keep resident: the optimizer's for moments of count
 * elements in chunks of chunk bytes (0: 4 MiB), its 4 buffers and CRCs
 * (parallel/offload.h); the activations' for block inputs of x bytes,
 * `inputs` of them in the file, its 6 buffers and CRCs
 * (parallel/offload_acts.h). */
uint64_t msr_plan_offload_optim_bytes(uint64_t count, size_t chunk);
uint64_t msr_plan_offload_acts_bytes(uint64_t x, uint64_t inputs);
/* What the parameters' offload keeps resident for `blocks` blocks of b
 * bytes (parallel/offload_params.h). */
uint64_t msr_plan_offload_params_bytes(uint64_t b, uint64_t blocks);
/* What the gradients' offload keeps resident for a shard of count
 * elements whose moments' chunk is asked as chunk bytes (0: 4 MiB):
 * three buffers of its chunk (the moments' chunk as sized for count, at
 * most the shard's bytes rounded up to 4096: the one in use, one written
 * behind, one read ahead), a CRC and a flag per chunk and one more, and
 * a moments' chunk of floats (parallel/dp_offload.c
 * msr_dp_grads_resident). */
uint64_t msr_plan_offload_grads_bytes(uint64_t count, size_t chunk);
/* The bytes the gradients' offload writes (*write_p) and reads (*read_p)
 * a step for such a shard over `micros` micro-batches (the I/O is the
 * trainer's, behind and ahead of it: parallel/offload_grads.h). With
 * one chunk, the chunk written once (it stays in its buffer). With more,
 * each chunk written once per micro-batch, and read back before each
 * micro-batch's puts (a chunk the buckets fill in pieces is, the first
 * micro-batch's too) and by the update (the norm's sum of squares comes
 * from the last micro-batch's puts: parallel/dp_offload.c): the most it
 * reads (a chunk still in the buffer is not read again: up to one less
 * a pass). */
void msr_plan_offload_grads_io(uint64_t count, size_t chunk, int micros, uint64_t *write_p,
                               uint64_t *read_p);

/* The bytes the optimizer's offload reads a step for moments of count
 * elements in chunks of chunk bytes (0: 4 MiB), and writes: every chunk of
 * its file whole (parallel/offload.c msr_offload_step), the last one too. */
uint64_t msr_plan_offload_optim_io(uint64_t count, size_t chunk);

/* The parameters' offload on rank `rank` of layout l (nothing without
 * it): the bytes of one block's slot in its store's file (the block, or
 * under ZeRO-3 the largest share of one, rounded up to 4096) into
 * *slot_p and the blocks it holds into *blocks_p. A step reads each block
 * once per micro-batch's forward and backward and once in the update,
 * and writes it once (parallel/offload_params.h). */
void msr_plan_offload_params_io(const msr_plan_model_t *m, const msr_plan_layout_t *l, int rank,
                                uint64_t *slot_p, uint64_t *blocks_p);

/* The most any rank holds (total), and which rank. */
uint64_t msr_plan_peak(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                       msr_plan_precision_t prec, int *rank_p);

/* ---- published shapes ---- */

/* The model named (plan_gpt --model: "gpt2-124m", "gpt2-350m",
 * "gpt2-1.5b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b",
 * "llama3-70b": their published layers, channels, heads, key/value heads,
 * MLP width, vocabulary and context length; a dense model, MoE fields at
 * plan_gpt's defaults) into *m, and its published parameter count into
 * *params_p (may be NULL). Returns 0, or -1 for an unknown name (*m and
 * *params_p untouched). */
int msr_plan_preset(const char *name, msr_plan_model_t *m, uint64_t *params_p);

/* The i-th preset's name, in msr_plan_preset's order; NULL past the last. */
const char *msr_plan_preset_name(size_t i);

/* ---- the cluster ---- */

/* What the time model knows of the machines: per rank, as a small
 * "key = value" file gives it (docs/plan.md). Rates are sustained rates,
 * as --calibrate measures them, not datasheet peaks unless a user says so. */
typedef struct msr_plan_cluster {
    int ranks_per_node;     /* ranks_per_node: ranks sharing a node's fast links */
    double mem_gib;         /* mem_gib: memory per rank (the budget plans must fit) */
    double peak_tflops;     /* peak_tflops: matrix-product rate per rank at the precision */
    double intra_gbs;       /* intra_gbs: bandwidth per rank inside a node, GB/s */
    double inter_gbs;       /* inter_gbs: bandwidth per rank between nodes, GB/s */
    double latency_us;      /* latency_us: one message's fixed cost */
    double mem_gbs;         /* mem_gbs: memory bandwidth per rank for element-wise work (0: none) */
    double act_gbs;         /* act_gbs: the same for the kernels of exp and tanh (GELU, SwiGLU,
                             * cross-entropy's softmax), bytes read and written (0: mem_gbs) */
    double kernel_us;       /* kernel_us: fixed cost of one kernel call (0: none) */
    int cores_per_node;     /* cores_per_node: compute units a node's ranks share (CPU cores);
                             * fewer than its ranks: a rank computes faster while others
                             * wait (0: one per rank, as GPUs) */
    double mm_rows;         /* mm_rows: the rows of the matrix products peak_tflops was
                             * measured at (0: the rate holds at any rows) */
    double mm_rows_half;    /* mm_rows_half: h, a matrix product of N rows runs at
                             * N / (N + h) of its rate on many rows; with mm_rows, a
                             * product of N rows costs (N + h) / N x mm_rows /
                             * (mm_rows + h) of its FLOPs at peak_tflops (0: none) */
    double attn_tflops;     /* attn_tflops: attention's products and softmax, its own
                             * kernels' rate (0: peak_tflops) */
    double ring_tflops;     /* ring_tflops: the same for context parallel's ring, a
                             * pair of chunks at a time (0: attn_tflops) */
    double ring_chunk;      /* ring_chunk: the positions of a chunk ring_tflops was
                             * measured at (0: the rate holds at any chunk) */
    double ring_chunk_half; /* ring_chunk_half: h, the ring runs chunks of S
                             * positions at S / (S + h) of its rate on long ones;
                             * as mm_rows_half for the matmuls (0: none) */
    double cold_ms_per_mib; /* cold_ms_per_mib: what a micro-batch's forward and backward take
                             * longer per MiB of its frames when they went cold (out of the
                             * cache) between the forward and the backward (0: none) */
    double cold_from_mib;   /* cold_from_mib: the node's memory held at once (every rank's
                             * whole peak together) up to which none go cold */
    double cold_full_mib;   /* cold_full_mib: from which all do; between, the share grows
                             * with the log of the bytes */
    double idle_lend;       /* idle_lend: with fewer cores than ranks, the share of the ideal
                             * speed-up (ranks over cores) a computing rank gets while
                             * others of its node wait: 1 the cores handed over whole,
                             * 0 none (1) */
    double ring_step_us;    /* ring_step_us: what one step of context parallel's ring
                             * costs beyond its attention and its transfer, when every
                             * rank of the node computes between the hand-offs (ranks
                             * sharing cores wait to be scheduled; 0: none) */
    double disk_read_gbs;   /* disk_read_gbs: the offload directory's sequential read rate
                             * per rank, GB/s, in the offload's chunks (train_gpt
                             * --offload; more than 0) */
    double disk_write_gbs;  /* disk_write_gbs: its write rate, synced to the disk */
} msr_plan_cluster_t;

/* A cluster of ranks_per_node 8, 80 GiB, 312 TFLOP/s, 300/25 GB/s, 5 us:
 * the A100 nodes of Narayanan et al. (2021), in bf16; their NVMe array's
 * 3 GB/s read and 1.5 GB/s write per rank. */
void msr_plan_cluster_default(msr_plan_cluster_t *c);

/* Parses the text of a cluster file ("key = value" lines, '#' comments,
 * the keys above; unknown keys and bad values refused) over what *c holds.
 * Returns 0, or -1 with a one-line reason ("line 3: ...") in why. */
int msr_plan_cluster_parse(const char *text, msr_plan_cluster_t *c, char *why, size_t why_len);

/* Writes *c as a cluster file's text; returns what snprintf returns. */
int msr_plan_cluster_format(const msr_plan_cluster_t *c, char *buf, size_t len);

/* The cluster file's real-valued keys (all but ranks_per_node and
 * cores_per_node), in the file's order: 1, with key i's name and the
 * offset of its double in msr_plan_cluster_t; 0 past the last. */
int msr_plan_cluster_real_key(size_t i, const char **name, size_t *offset);

/* ---- the time model ---- */

/* ms to read read_bytes and write write_bytes at the cluster's disk rates,
 * one after the other (the disk serves both). */
double msr_plan_disk_ms(const msr_plan_cluster_t *c, double read_bytes, double write_bytes);

/* What io_ms of disk I/O overlapped with compute_ms of work adds to it:
 * max(0, io_ms - compute_ms) (the pair takes max(compute_ms, io_ms)). */
double msr_plan_io_exposed_ms(double compute_ms, double io_ms);

/* One step of a layout, in milliseconds, on the slowest pipeline stage. */
typedef struct msr_plan_time {
    double flops;           /* the whole model's floating-point operations per step */
    double compute_ms;      /* forward and backward of the stage's micro-batches */
    double recompute_ms;    /* of it, forwards run again */
    double tp_comm_ms;      /* tensor / sequence parallel collectives (exposed: never hidden
                             * but for tp overlap's blocks) */
    double cp_comm_ms;      /* context parallel's ring transfers, what attention does not hide */
    double ep_comm_ms;      /* expert parallel's alltoalls (dispatch and combine, both ways) */
    double pp_comm_ms;      /* sends between stages on the critical path */
    double bubble_ms;       /* the pipeline's idle time (fill and drain) */
    double cold_ms;         /* what frames gone cold (out of the cache) add to the pipeline */
    double dp_comm_ms;      /* data parallel's gradient reduction, all of it (with ZeRO's
                             * packing of buckets) */
    double dp_exposed_ms;   /* of it, what backward does not hide */
    double zero3_ms;        /* ZeRO-3's parameter gathers, exposed */
    double optim_ms;        /* the optimizer step */
    double offload_io_ms;   /* the offloads' disk reads and writes at the disk's rates, all of
                             * them (0: no offload) */
    double offload_ms;      /* of it, what the update and the passes' compute do not hide */
    double exposed_comm_ms; /* tp + cp + ep + pp + dp exposed + zero3 */
    double step_ms;         /* the whole step */
    double tokens_per_s;    /* global batch x sequence / step */
    /* one micro-batch, forward and backward (recompute and tp collectives
     * included), for balancing the pipeline's stages: */
    double layer_ms; /* a transformer block */
    double first_ms; /* the embedding, on the first virtual stage */
    double last_ms;  /* the final norm, head and loss, on the last */
} msr_plan_time_t;

/* Step time of a layout that passed msr_plan_check, global batch
 * dp * micro_batch * micros sequences. */
void msr_plan_time(const msr_plan_model_t *m, const msr_plan_layout_t *l, msr_plan_precision_t prec,
                   const msr_plan_cluster_t *c, msr_plan_time_t *out);

/* ---- the search ---- */

/* Keys a search can fix (-1: free), as plan_gpt's --fix names them. */
enum {
    MSR_PLAN_FIX_DP,
    MSR_PLAN_FIX_TP,
    MSR_PLAN_FIX_PP,
    MSR_PLAN_FIX_SP,
    MSR_PLAN_FIX_ZERO,
    MSR_PLAN_FIX_RECOMPUTE,
    MSR_PLAN_FIX_MICRO_BATCH,
    MSR_PLAN_FIX_SCHEDULE,
    MSR_PLAN_FIX_VIRTUAL_STAGES,
    MSR_PLAN_FIX_CP,
    MSR_PLAN_FIX_EP,
    MSR_PLAN_FIX_N
};
extern const char *const msr_plan_fix_names[MSR_PLAN_FIX_N];
extern const char *const msr_plan_schedule_names[3];  /* gpipe 1f1b interleaved */
extern const char *const msr_plan_recompute_names[3]; /* none selective full */

enum { MSR_PLAN_SEARCH_EXHAUSTIVE = 0, MSR_PLAN_SEARCH_FAST = 1 };

#define MSR_PLAN_MAX_STAGES 256 /* pp * chunks a searched split may have */

typedef struct msr_plan_query {
    int64_t world;        /* ranks */
    int64_t global_batch; /* sequences per step */
    int search;           /* MSR_PLAN_SEARCH_* */
    int fix[MSR_PLAN_FIX_N];
    size_t bucket_bytes, zero_min_bytes; /* dp's, as msr_plan_layout_t */
    int even_split;                      /* 1: keep the even split of layers (no --pp-layers) */
    /* a split given (as --pp-layers): only layouts of split_n virtual
     * stages, with these layers each (not owned); split_n 0: none */
    const int *split;
    int split_n;
    /* every layout's offload (msr_plan_layout_t's: MSR_PLAN_OFFLOAD_*
     * bits, the optimizer's chunk bytes; 0: none, the default) */
    int offload;
    size_t offload_chunk;
    int tp_overlap; /* every layout's (msr_plan_layout_t's) */
    int head_chunk; /* every layout's (msr_plan_layout_t's) */
} msr_plan_query_t;

/* One plan: a layout (its stage_layers pointing into the plan's own
 * array), its memory and its time. */
typedef struct msr_plan {
    msr_plan_layout_t l;
    int split[MSR_PLAN_MAX_STAGES]; /* the layers of each virtual stage, when searched */
    uint64_t peak;                  /* the most bytes a rank holds */
    msr_plan_rank_t at;             /* that rank's bytes */
    msr_plan_time_t t;
} msr_plan_t;

/* Why layouts were left out: how many, and the first one's reason. */
typedef struct msr_plan_pruned {
    uint64_t invalid;     /* refused by msr_plan_check */
    uint64_t over_memory; /* over the cluster's mem_gib */
    char first_invalid[256], first_over[256];
    uint64_t found;  /* valid and within the budget: the plans before keep cut them */
    double plain_ms; /* msr_plan_search_fit: the fastest plan's step without what
                      * the search adds (0: none fits without it) */
} msr_plan_pruned_t;

/* Plans for the query: every valid layout within the memory budget, best
 * (least step time, then least memory) first, at most keep of them (0:
 * all), *plans_p allocated (free with free(); NULL when none). Exhaustive
 * tries every layout (docs/plan.md "Search"); fast prunes the space (tp
 * and micro-batch powers of two, no GPipe, 2/4/8 virtual stages, the
 * least recompute that fits). Each layout with pp > 1 gets the split of
 * msr_plan_split_layers unless q->even_split. *pruned counts what was left
 * out, and the plans found before keep. Returns the number in *plans_p,
 * or -1 with a reason in why (bad query, out of memory). Pure: any thread. */
int64_t msr_plan_search(const msr_plan_model_t *m, msr_plan_precision_t prec,
                        const msr_plan_cluster_t *c, const msr_plan_query_t *q, int64_t keep,
                        msr_plan_t **plans_p, msr_plan_pruned_t *pruned, char *why, size_t why_len);

/* The vocabulary rows a chunk of the head msr_plan_search_fit tries
 * (train_gpt --head-chunk): docs/performance.md "The chunked head" found
 * 1,024 rows as fast as 8,192 on the CPU, holding an eighth as much. */
#define MSR_PLAN_FIT_HEAD_ROWS 1024

/* What msr_plan_search_fit may add to layouts over the budget: the chunked
 * head (a second pass of the head's product, no I/O) and train_gpt's disk
 * offloads (--auto --offload-dir). */
enum { MSR_PLAN_FIT_HEAD = 1, MSR_PLAN_FIT_OFFLOAD = 2 };

/* msr_plan_search, and when layouts were over the memory budget, again
 * with what `fit` allows and q does not fix already: first the chunked
 * head of MSR_PLAN_FIT_HEAD_ROWS rows (when q->head_chunk is 0); then
 * train_gpt's offloads (when q->offload is 0): the optimizer's (not with
 * experts), the activations' (full recompute), both, the blocks'
 * parameters beside the optimizer's, then beside both, the gradient shard
 * beside the optimizer's and the parameters', then beside all three (ZeRO
 * 2-3 under data parallel alone), in that order; last, when none of those
 * finds a plan and both are allowed, each offload beside the chunked
 * head. When nothing fits without them, the first that finds plans; when
 * plans fit, one only if its fastest plan is faster than theirs (the
 * layouts over the budget it lets in outrun its cost; with none over the
 * budget nothing is added). The plans (and *pruned, of the search that
 * found them, its plain_ms set) carry what was added in l.offload and
 * l.head_chunk. Returns as msr_plan_search. */
int64_t msr_plan_search_fit(const msr_plan_model_t *m, msr_plan_precision_t prec,
                            const msr_plan_cluster_t *c, const msr_plan_query_t *q, int fit,
                            int64_t keep, msr_plan_t **plans_p, msr_plan_pruned_t *pruned,
                            char *why, size_t why_len);

/* msr_plan_search_fit with the offloads alone (MSR_PLAN_FIT_OFFLOAD). */
int64_t msr_plan_search_offload(const msr_plan_model_t *m, msr_plan_precision_t prec,
                                const msr_plan_cluster_t *c, const msr_plan_query_t *q,
                                int64_t keep, msr_plan_t **plans_p, msr_plan_pruned_t *pruned,
                                char *why, size_t why_len);

/* Why plan p, the first msr_plan_search_fit found (*pr its), has what
 * `what` names (MSR_PLAN_FIT_HEAD: a chunked head; MSR_PLAN_FIT_OFFLOAD:
 * an offload) or not, a clause into buf: "no layout fits in G GiB per
 * rank without it", "faster than the plans that fit in G GiB per rank
 * without it (A ms a step against B)", "the offload (the chunked head)
 * lets plans fit in G GiB per rank without it", "plans fit in G GiB per
 * rank without it and none is over it (... saves nothing then and only adds
 * ...)" or "plans fit in G GiB per rank without it and none with ... is
 * faster". */
void msr_plan_fit_why(const msr_plan_t *p, const msr_plan_pruned_t *pr, const msr_plan_cluster_t *c,
                      int what, char *buf, size_t len);

/* Plan p's chunked head on its fullest rank: the bytes it saves (that
 * rank's peak with the whole head less with the chunks: the work space's
 * and the frames' (N, V/tp) buffers) and the flops per step its backward
 * adds on each rank of the last stage (the head's product again, 2 N C
 * V/tp a micro-batch, N its tokens: T/cp positions of b sequences). */
void msr_plan_head_cost(const msr_plan_model_t *m, msr_plan_precision_t prec, const msr_plan_t *p,
                        uint64_t *saved_p, double *flops_p);

/* Plan p's offload on its fullest rank: the bytes it saves (that rank's
 * peak without it less with it) and the bytes it moves to and from disk
 * per step (msr_plan_rank_t's offload_optim_io and offload_acts_io, each
 * both ways: the moments' chunks read and written whole; each block
 * input's slot written and read once per micro-batch; the parameters'
 * blocks, msr_plan_offload_params_io's reads and writes; and the
 * gradient chunks' writes and reads, offload_grads_w and
 * offload_grads_r; the experts' blocks, offload_eparam_r and _w). */
void msr_plan_offload_cost(const msr_plan_model_t *m, msr_plan_precision_t prec,
                           const msr_plan_t *p, uint64_t *saved_p, uint64_t *io_p);

/* ---- choosing within the noise ---- */

/* Whether layout a is simpler than b: -1 simpler, 1 less simple, 0 as
 * simple. The keys, in order, each deciding only when those before tie:
 * fewer parallel dimensions (dp, tp, pp, cp, ep above 1), fewer of them
 * model-parallel (tp, pp, cp, ep: data parallel is the plainest), a lower
 * ZeRO stage, less recompute (none, selective, full), no sequence parallel,
 * fewer virtual stages per rank, the even split of layers. */
int msr_plan_simpler(const msr_plan_layout_t *a, const msr_plan_layout_t *b);

/* Which of plans[0..n) (best first, as msr_plan_search returns them) to
 * train with: among the plans whose predicted step is within noise (a
 * fraction, e.g. 0.03: the calibration's measured spread; 0 or less: only
 * the fastest and its exact ties) of plans[0]'s, the simplest by
 * msr_plan_simpler, the faster of equally simple ones. Returns its index,
 * -1 when n <= 0; *within_p (may be NULL): how many plans were within the
 * noise, plans[0] included. Pure: any thread. */
int64_t msr_plan_choose(const msr_plan_t *plans, int64_t n, double noise, int64_t *within_p);

/* The split of the model's layers into the layout's pp * chunks virtual
 * stages that balances their time, by dynamic programming; into split.
 * The time model runs a rank's virtual stages one after another, so the
 * split minimises the slowest pipeline rank's time per micro-batch (its
 * layers' layer_ms, plus first_ms on rank 0 and last_ms on the last: the
 * embedding and the head make the end stages heavier), each rank's layers
 * spread evenly over its stages; the even split when that is as fast.
 * Returns 0, or -1 when the stages outnumber the layers (or
 * MSR_PLAN_MAX_STAGES) or memory runs out. */
int msr_plan_split_layers(const msr_plan_model_t *m, const msr_plan_layout_t *l,
                          msr_plan_precision_t prec, const msr_plan_cluster_t *c, int *split);

/* ---- the paper accounting, term by term ---- */

/* ZeRO's model-state bytes per device for psi parameters over nd
 * data-parallel ranks, mixed-precision Adam (K = 12), stage 0..3:
 * 2 psi parameters + 2 psi gradients + K psi optimizer states, the later
 * stages partitioning the optimizer, then the gradients, then the
 * parameters. */
double msr_plan_zero_bytes(double psi, int stage, int nd);

/* Korthikanti et al.'s activation bytes of one transformer layer in 16-bit:
 * sequence s, micro-batch b, hidden h, heads a, tensor size t, sequence
 * parallel sp, recompute MSR_PLAN_RC_*; summed from the paper's terms. */
double msr_plan_layer_act_bytes(double s, double b, double h, double a, int t, int sp,
                                int recompute);

#endif
