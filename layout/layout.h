/* The training layout: how a model is cut into pipeline stages, how a
 * stage's parameters are cut into data parallel's buckets and ZeRO's
 * shards, and the named defaults of both. The model and the runtime cut
 * and allocate with these functions; the planner counts with the same ones
 * (and with layout/pipe_order.h, the pipeline's op order), so a change to
 * the layout is made once. This module depends on base/ alone: the model,
 * the runtime and the planner all sit above it. */
#ifndef MSR_PARALLEL_LAYOUT_H
#define MSR_PARALLEL_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "layout/pipe_order.h"

/* Data parallel: the gradient bucket size, and the first bucket's (the last
 * layers' gradients, ready first, start their reduction early). */
#define MSR_DP_BUCKET_BYTES       (25u << 20)
#define MSR_DP_FIRST_BUCKET_BYTES (1u << 20)
/* ZeRO: segments smaller than this stay replicated. */
#define MSR_DP_ZERO_MIN_BYTES     (64u << 10)
/* ZeRO >= 1: packed bucket buffers alive at once, at most; a rank that
 * would need another waits for its oldest reduction first. */
#define MSR_DP_MAX_PACKED         4

/* ---- pipeline stages ---- */

/* The blocks [*lo_p, *hi_p) of virtual stage j of n: layers * j / n to
 * layers * (j + 1) / n (rounded down). */
void msr_layout_stage_even(int layers, int n, int j, int *lo_p, int *hi_p);

/* The blocks [*lo_p, *hi_p) of virtual stage j of n under split (n
 * entries, the layers of each stage), or the even split when split is
 * NULL. */
void msr_layout_split_stage(int layers, int n, const int *split, int j, int *lo_p, int *hi_p);

/* Checks a split of `layers` layers into `stages` virtual stages: count
 * entries (count == stages), each at least 1, summing to layers. On failure
 * sets the error text (a one-line reason naming the fault: the count, the
 * first empty stage, or the sum) and returns MSR_ERR_CONFIG. */
msr_status_t msr_layout_split_check(int layers, int stages, const int *split, int count);

/* Parses "3,5,5,3" (comma-separated decimal counts, no spaces) into split
 * (room for max entries) and *count_p; the values are checked by
 * msr_layout_split_check, not here. On failure (not a number, an empty entry,
 * more than max entries, a value over 2^24) sets the error text and
 * returns MSR_ERR_CONFIG; *count_p is written only on success. */
msr_status_t msr_layout_split_parse(const char *text, int *split, int max, int *count_p);

/* Whether split (n entries) is the even split of layers (and so can be
 * left out: NULL means the same). */
int msr_layout_split_is_even(int layers, int n, const int *split);

/* Writes split as "3,5,5,3" into buf (len bytes, truncated as snprintf
 * does); returns what snprintf would. */
int msr_layout_split_format(const int *split, int n, char *buf, size_t len);

/* ---- buckets and shards (data parallel, ZeRO) ---- */

/* The elements (fp32) of a bucket and of the first bucket, from their
 * sizes in bytes: at least 1 each, the first at most a bucket. */
void msr_layout_bucket_elems(uint64_t bucket_bytes, uint64_t first_bytes, uint64_t *bb_p,
                             uint64_t *fb_p);

/* The number of buckets P elements make, cut from the end: bucket 0 is
 * [P - fb, P), then bb elements each (the last may be shorter). */
uint64_t msr_layout_num_buckets(uint64_t P, uint64_t fb, uint64_t bb);

/* Bucket b's elements [*lo_p, *hi_p). */
void msr_layout_bucket_range(uint64_t P, uint64_t fb, uint64_t bb, uint64_t b, uint64_t *lo_p,
                             uint64_t *hi_p);

/* The bucket that holds element pos (< P), and its end in *hi_p. */
uint64_t msr_layout_bucket_at(uint64_t P, uint64_t fb, uint64_t bb, uint64_t pos, uint64_t *hi_p);

/* Whether a segment of seg_elems elements stays replicated under ZeRO
 * (smaller than zero_min_bytes; 0 shards every segment). */
int msr_layout_replicated(uint64_t seg_elems, uint64_t zero_min_bytes);

/* A sharded unit of n elements over size ranks: each rank's block of
 * ceil(n / size) elements (the last ranks' blocks may be short or empty). */
uint64_t msr_layout_block(uint64_t n, int size);

/* Elements [*a_p, *e_p) of a sharded unit of n elements (blocks of blk)
 * that belong to rank j. */
void msr_layout_block_of(uint64_t n, uint64_t blk, int j, uint64_t *a_p, uint64_t *e_p);

/* ---- units: the bucket and shard cut, walked once ---- */

/* The number of elements of segment s (of the iterator's nseg), in flat
 * order: the caller's table (the model's, or the planner's count of it). */
typedef uint64_t (*msr_layout_seg_count_fn)(const void *arg, int s);

/* A unit: the part of one segment that lies in one bucket. Sharded units
 * are cut in `size` blocks of blk elements (rank j owns block j); a
 * replicated unit is owned whole by every rank (blk = n). repeat > 1 only
 * from msr_layout_units_next with runs: the unit stands for `repeat`
 * alike whole buckets of one segment, this one and the repeat - 1 after it
 * (buckets bucket, bucket - 1, ...; elements lo + k * n). */
typedef struct msr_layout_unit {
    uint64_t lo, n;     /* elements [lo, lo + n) of the flat buffer */
    uint64_t bucket;    /* its bucket (msr_layout_bucket_at) */
    uint64_t blk;       /* a rank's block: ceil(n / size), or n when replicated */
    uint64_t repeat;    /* the alike units it stands for: 1, or more from a run */
    uint64_t seg_count; /* its segment's elements */
    int seg, seg_first; /* its segment; whether it is the segment's first unit */
    int replicated;     /* msr_layout_replicated(seg_count, zero_min_bytes) */
} msr_layout_unit_t;

/* The walk over a flat buffer of P elements cut at every segment and
 * bucket boundary, in flat order (what parallel/dp.c allocates from and the
 * planner counts with). Set by msr_layout_units_init; callers read P, bb,
 * fb, buckets, size and nseg and write none of it. */
typedef struct msr_layout_units {
    uint64_t P, bb, fb;      /* elements; a bucket's and the first bucket's */
    uint64_t buckets;        /* msr_layout_num_buckets(P, fb, bb) */
    uint64_t zero_min_bytes; /* ZeRO's replication threshold */
    int size, nseg;          /* the ranks sharing a unit; the segments */
    msr_layout_seg_count_fn count;
    const void *arg;
    uint64_t pos, seg_lo, seg_n; /* the walk: next element, its segment's start and size */
    int seg;
} msr_layout_units_t;

/* Starts a walk: P elements in nseg segments (count(arg, s) each, summing
 * to P), buckets of bucket_bytes (the first of first_bytes, as
 * msr_layout_bucket_elems), shards over size ranks (>= 1), segments under
 * zero_min_bytes replicated. No allocation; cannot fail. */
void msr_layout_units_init(msr_layout_units_t *it, uint64_t P, int nseg,
                           msr_layout_seg_count_fn count, const void *arg, int size,
                           uint64_t bucket_bytes, uint64_t first_bytes, uint64_t zero_min_bytes);

/* The next unit into *u_p; returns 0 (and leaves *u_p) when the walk is
 * done; count is called once a segment. With runs, k >= 2 whole buckets
 * inside one segment (not bucket 0) come as one unit of repeat k - 1 and
 * the last of them alone after it (a huge model has millions: the
 * planner's fast path); without, every unit has repeat 1. */
int msr_layout_units_next(msr_layout_units_t *it, int runs, msr_layout_unit_t *u_p);

/* Elements [*a_p, *e_p) of unit u (within it) that rank j owns: block j
 * of a sharded unit, all of a replicated one. */
void msr_layout_unit_own(const msr_layout_unit_t *u, int j, uint64_t *a_p, uint64_t *e_p);

/* ZeRO-3: the segments a whole model's micro-batch acquires, in order
 * (model/gpt.h's hooks; segment 0 the embedding, 1..layers the blocks,
 * layers + 1 the final norm, with a Llama's untied head): forward 0,
 * 1..layers, layers + 1, then 0 again when the head is tied (a GPT's
 * reads wte); backward 0 first when tied, then layers + 1, layers..1, 0.
 * Writes the visits into visits (room for MSR_LAYOUT_ZERO3_VISITS(layers))
 * and returns how many: 2 x layers + 6 tied, 2 x layers + 4 untied
 * (parallel/dp.c gathers in this order, the planner replays it); those
 * from MSR_LAYOUT_ZERO3_BACKWARD(layers, tied) on are backward's. */
#define MSR_LAYOUT_ZERO3_VISITS(layers)         (2 * (layers) + 6)
#define MSR_LAYOUT_ZERO3_BACKWARD(layers, tied) ((layers) + ((tied) ? 3 : 2))
int msr_layout_zero3_visits(int layers, int tied, int *visits);

/* The bucket sizes in force: the given ones, 0 for the named defaults. */
void msr_layout_bucket_defaults(size_t *bucket_bytes, size_t *first_bytes);

/* ---- activations: what a pipeline frame keeps ---- */

/* Recompute modes, numbered as msr_mp_recompute_t and the planner's. */
enum {
    MSR_LAYOUT_RECOMPUTE_NONE = 0,
    MSR_LAYOUT_RECOMPUTE_SELECTIVE = 1,
    MSR_LAYOUT_RECOMPUTE_FULL = 2,
};

/* The sizes one rank's activations are counted in: a micro-batch of B
 * sequences of T positions (this rank's max_seq / cp under context
 * parallel) under tensor parallel tp (with sequence parallel sp). */
typedef struct msr_layout_dims {
    int B, T, C, V, tp, sp, mode; /* mode: MSR_LAYOUT_RECOMPUTE_* */
    int cp;                       /* context parallel: T is this rank's T/cp positions */
    int Cl, NHl, Hl, Vl;          /* this rank's share: channels of its heads, heads, MLP, vocab */
    int Tl;                       /* positions held outside the tensor-parallel layers */
    int glu;      /* 0: the GPT's MLP; 1: a gated MLP (a Llama's SwiGLU: Hl its width, its
                   * fc output and that output's gradient 2 Hl wide: gate and up) */
    int hc;       /* the head's vocabulary rows a chunk (msr_layout_head_chunk); 0: all Vl */
    size_t N, Nl; /* token rows: all of them, held outside */
} msr_layout_dims_t;

msr_layout_dims_t msr_layout_dims(int micro_batch, int max_seq, int channels, int heads, int vocab,
                                  int tp, int sp, int cp, int mode);

/* The chunked head (train_gpt --head-chunk): the head computes its Vl
 * logits `rows` vocabulary rows at a time (at most Vl: one chunk), folding
 * each chunk into every row's maximum, sum of exponentials and target
 * logit, and its backward computes each chunk's logits again. The work
 * space then holds one chunk's logits and probabilities (N, hc) and a
 * frame keeps those three numbers a row instead of the probabilities
 * (N, Vl). rows <= 0: the whole head (hc 0). */
void msr_layout_head_chunk(msr_layout_dims_t *d, int rows);

/* One block's activations, in the order the runtime carves them. */
enum {
    MSR_ACT_LN1,
    MSR_ACT_LN1_MEAN,
    MSR_ACT_LN1_RSTD,
    MSR_ACT_QKV,
    MSR_ACT_ATTY,
    MSR_ACT_ATT, /* the probabilities (B, NH/tp, T, T); under cp the logsumexp (N, NH/tp) */
    MSR_ACT_RES2,
    MSR_ACT_LN2,
    MSR_ACT_LN2_MEAN,
    MSR_ACT_LN2_RSTD,
    MSR_ACT_FCH,
    MSR_ACT_FCH_GELU,
    MSR_ACT_RES3,
    MSR_ACT_BLOCK_COUNT,
};

/* The fp32 elements of block activation a (MSR_ACT_*), and in *kept_p
 * whether the frame keeps it between forward and backward (1) or the
 * scratch that the next block overwrites holds it (0), as d's recompute
 * mode says: full recompute keeps only the block's output; selective
 * drops the probabilities and the GELU's output (under cp the logsumexp
 * is kept: recomputing it takes the ring). */
size_t msr_layout_block_act(const msr_layout_dims_t *d, int a, int *kept_p);

/* The head's activations, all kept: the final norm, its mean and rstd,
 * the probabilities (under a chunked head each row's maximum, sum of
 * exponentials and target logit: 3 N). */
enum { MSR_ACT_LNF, MSR_ACT_LNF_MEAN, MSR_ACT_LNF_RSTD, MSR_ACT_PROBS, MSR_ACT_HEAD_COUNT };
size_t msr_layout_head_act(const msr_layout_dims_t *d, int a);

/* The fp32 elements a micro-batch's frame of `layers` blocks (with the
 * head when head) keeps: the chunk's input, the kept activations of each
 * block, the head's. What the runtime carves and the planner counts. */
uint64_t msr_layout_frame_elems(const msr_layout_dims_t *d, int layers, int head);

/* The whole model's activations (no model parallel; model/gpt.c carves
 * its table from these): the embeddings, the blocks (msr_layout_block_act
 * with no recompute: every one kept), then these after the last block. */
enum {
    MSR_ACT_ENCODED,   /* (N, C) the first block's input */
    MSR_ACT_WHOLE_LNF, /* (N, C), its mean and rstd (N) each */
    MSR_ACT_WHOLE_LNF_MEAN,
    MSR_ACT_WHOLE_LNF_RSTD,
    MSR_ACT_LOGITS,      /* (N, V); a chunked head's (N, hc) */
    MSR_ACT_WHOLE_PROBS, /* (N, V); a chunked head's 6 N (msr_gpt_create_chunked) */
    MSR_ACT_LOSSES,      /* (N) */
    MSR_ACT_PROJ,        /* (N, C) a projection before its residual add */
    MSR_ACT_WHOLE_COUNT,
};
size_t msr_layout_whole_act(const msr_layout_dims_t *d, int a);

/* The fp32 elements of the whole model's activation table for d's batch
 * (d as msr_layout_dims gives it with tp = cp = 1, no recompute). */
uint64_t msr_layout_whole_elems(const msr_layout_dims_t *d, int layers);

/* ---- the model-parallel runtime's work space ---- */

/* The buffers parallel/mp.c carves its work space into, in this order
 * (fp32; what the planner counts): the blocks' shared scratch (what a fully
 * recomputed block drops: every block activation but its output), the
 * gathered and permuted rows and projections, the backward's gradients, the
 * head's logits and loss rows; under context parallel the ring's two K/V
 * blocks and their gradient accumulators, and its row statistics. */
enum {
    MSR_WORK_SCRATCH,
    MSR_WORK_GAT,   /* (N, C) */
    MSR_WORK_DGAT,  /* (N, C) */
    MSR_WORK_PERM,  /* (N, C) */
    MSR_WORK_PROJ,  /* (N, C) */
    MSR_WORK_PROJL, /* (Nl, C) */
    MSR_WORK_DRES,  /* (Nl, C) */
    MSR_WORK_DLN,   /* (N, C) */
    MSR_WORK_DLNL,  /* (Nl, C) */
    MSR_WORK_DQKV,  /* (N, 3 C/tp) */
    MSR_WORK_DATTY, /* (N, C/tp) */
    MSR_WORK_DFCH,  /* (N, 4 C/tp) */
    MSR_WORK_DFCH_GELU,
    MSR_WORK_DATT,    /* (T, T): one head's */
    MSR_WORK_LOGITS,  /* (N, V/tp); a chunked head's (N, hc), its gradient too */
    MSR_WORK_DLOGITS, /* (N, V/tp); a chunked head's chunk probabilities (N, hc) */
    MSR_WORK_LOSSES,  /* (N) */
    MSR_WORK_RMAX,    /* (N) */
    MSR_WORK_RED,     /* (2 N) */
    MSR_WORK_KV0,     /* cp > 1: (N, 2 C/tp) each of the four */
    MSR_WORK_DKV0,
    MSR_WORK_KV1,
    MSR_WORK_DKV1,
    MSR_WORK_RMX, /* cp > 1: (N, NH/tp) each of the three */
    MSR_WORK_RSUM,
    MSR_WORK_DELTA,
    MSR_WORK_COUNT,
};

/* The fp32 elements of work buffer w (MSR_WORK_*) for d (0 for the ring's
 * buffers without context parallel; the scratch whatever d's mode). */
size_t msr_layout_work(const msr_layout_dims_t *d, int w);

/* The fp32 elements of the whole work space: the sum of the table. */
uint64_t msr_layout_work_elems(const msr_layout_dims_t *d);

/* The ints context parallel adds for a step of `micros` micro-batches:
 * every ring rank's positions (cp T) and the step's local inputs and
 * targets (2 micros N); 0 without context parallel. */
uint64_t msr_layout_work_ints(const msr_layout_dims_t *d, int micros);

/* ---- the whole model's work space ---- */

/* The buffers model/gpt.c carves a whole model's backward work space into
 * (msr_gpt_carve_work), in this order (fp32; what the planner counts). */
enum {
    MSR_WORK_WHOLE_DRES,      /* (N, C) */
    MSR_WORK_WHOLE_DLN,       /* (N, C) */
    MSR_WORK_WHOLE_DQKV,      /* (N, 3 C) */
    MSR_WORK_WHOLE_DATTY,     /* (N, C) */
    MSR_WORK_WHOLE_DFCH,      /* (N, Hl), Hl = 4 C; a Llama's (N, 2 ffn) (glu) */
    MSR_WORK_WHOLE_DFCH_GELU, /* (N, Hl), a Llama's (N, ffn) */
    MSR_WORK_WHOLE_DATT,      /* (datt_heads, T, T) */
    MSR_WORK_WHOLE_DLOGITS,   /* (N, V); a chunked head's (N, hc) */
    MSR_WORK_WHOLE_COUNT,
};

/* The fp32 elements of whole-model work buffer w (MSR_WORK_WHOLE_*) for d
 * (as msr_layout_dims gives it with tp = cp = 1); datt holds datt_heads
 * (T, T) matrices (the CPU model runs one head at a time, the GPU a row's
 * heads at once). 0 for w out of range. */
size_t msr_layout_whole_work(const msr_layout_dims_t *d, int w, int datt_heads);

/* The fp32 elements of the whole model's work space: the sum of the table. */
uint64_t msr_layout_whole_work_elems(const msr_layout_dims_t *d, int datt_heads);

/* ---- the MoE blocks' work space ---- */

/* The sizes a rank's MoE state is counted in: micro-batches of N tokens
 * on this rank (of cp x N over a context-parallel group of cp ranks), E
 * experts, K choices a token, C channels, an expert's hidden layer of H,
 * cap the capacity of an expert (msr_layout_moe_capacity of the cp x N
 * tokens), and rows = E x stride, stride = the rows an expert's block has
 * in the exchanges' buffers: cap, and under cp min(cap, N) (a rank's N
 * tokens give an expert at most N of the cap slots). */
typedef struct msr_layout_moe_dims {
    uint64_t N, E, K, C, H, cap, rows, cp, stride;
} msr_layout_moe_dims_t;

/* An expert's capacity for tokens tokens: ceil(F * tokens * K / E), at
 * least 1. */
uint64_t msr_layout_moe_capacity(double F, uint64_t tokens, uint64_t K, uint64_t E);

msr_layout_moe_dims_t msr_layout_moe_dims(uint64_t tokens, uint64_t experts, uint64_t top_k,
                                          double capacity_factor, uint64_t channels,
                                          uint64_t hidden);

/* The same for a rank of a context-parallel group of cp ranks, each with
 * `tokens` of the micro-batch's cp x tokens (cp 1: msr_layout_moe_dims). */
msr_layout_moe_dims_t msr_layout_moe_dims_cp(uint64_t tokens, uint64_t cp, uint64_t experts,
                                             uint64_t top_k, double capacity_factor,
                                             uint64_t channels, uint64_t hidden);

/* The buffers model/moe.c allocates (msr_moe_create_frames), what the
 * planner counts. A slot's, one per MoE block and frame (a micro-batch
 * whose routing waits for its backward): the router's probabilities, each
 * token's choices, gates and slots, the drop fractions, the dispatched
 * inputs, the experts' hidden layer before and after GELU, the combined
 * outputs, the used slots. Once a state: the exchanges' send, output and
 * output-gradient rows, the hidden layer's gradients, the gates' and
 * probabilities' gradients, and under cp the choices of the whole cp
 * group's tokens (every rank replays one process's capacity count over
 * them). One per MoE block: the load counters. The
 * router's unwanted input gradient (tp ranks but 0 that keep the router's
 * weight gradient: msr_moe_set_layout). */
enum {
    MSR_MOE_WORK_PROBS,  /* (N, E) float */
    MSR_MOE_WORK_CHOICE, /* (N, K) int */
    MSR_MOE_WORK_GATE,   /* (N, K) float */
    MSR_MOE_WORK_POS,    /* (N, K) int */
    MSR_MOE_WORK_FRAC,   /* (E) double */
    MSR_MOE_WORK_XIN,    /* (rows, C) float */
    MSR_MOE_WORK_FCH,    /* (rows, H) float */
    MSR_MOE_WORK_FCH_G,  /* (rows, H) float */
    MSR_MOE_WORK_COMB,   /* (rows, C) float */
    MSR_MOE_WORK_USED,   /* (E) int */
    MSR_MOE_WORK_SLOT_END,
    MSR_MOE_WORK_SEND = MSR_MOE_WORK_SLOT_END, /* (rows, C) float */
    MSR_MOE_WORK_OUT,                          /* (rows, C) float */
    MSR_MOE_WORK_DOUT,                         /* (rows, C) float */
    MSR_MOE_WORK_DFCH,                         /* (rows, H) float */
    MSR_MOE_WORK_DFCH_G,                       /* (rows, H) float */
    MSR_MOE_WORK_DGATE,                        /* (N, K) float */
    MSR_MOE_WORK_DPROBS,                       /* (N, E) float */
    MSR_MOE_WORK_GCHOICE,                      /* (cp N, K) int, none at cp 1 */
    MSR_MOE_WORK_ONCE_END,
    MSR_MOE_WORK_LOAD = MSR_MOE_WORK_ONCE_END, /* (E) int64 */
    MSR_MOE_WORK_RDX,                          /* (N, C) float */
    MSR_MOE_WORK_COUNT,
};

/* The elements of MoE buffer w (MSR_MOE_WORK_*) for d; 0 out of range. */
size_t msr_layout_moe_work(const msr_layout_moe_dims_t *d, int w);

/* The bytes of one element of buffer w: fw for a float (the runtime's
 * sizeof(float); the planner's paper accounting counts its precision's),
 * the C type's size for the others. */
size_t msr_layout_moe_work_size(int w, size_t fw);

/* The bytes of a MoE state with floats of fw bytes: the slots of `held`
 * MoE blocks (those the rank runs) x frames, the once buffers, the load
 * counters of all `blocks` MoE blocks, and the router's input gradient
 * when rdx. */
uint64_t msr_layout_moe_work_bytes(const msr_layout_moe_dims_t *d, int held, int frames, int blocks,
                                   int rdx, uint64_t fw);

#endif
