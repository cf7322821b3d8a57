/* The reference model: a GPT-2 style transformer over bytes, in fp32 on the
 * CPU, forward and backward written by hand.
 *
 *   tokens (B,T) -> wte[token] + wpe[t] -> L x block -> layernorm -> @ wte^T
 *   -> logits (B,T,V) -> softmax cross-entropy against the next byte
 *   block: x += attn(ln1(x)); x += mlp(ln2(x)), mlp = fcproj(gelu(fc(.)))
 *
 * Parameters live in ONE flat buffer of num_params floats, gradients in a
 * second of the same layout (AdamW's m and v follow it too, see adamw.h), so a
 * checkpoint is one write and a ZeRO shard is one slice [lo, hi). The layout
 * is grouped by segment, in this order:
 *
 *   segment 0      embeddings: wte (V,C), wpe (maxT,C)
 *   segment 1+l    block l:    ln1w (C), ln1b (C), qkvw (3C,C), qkvb (3C),
 *                              attprojw (C,C), attprojb (C), ln2w (C), ln2b (C),
 *                              fcw (4C,C), fcb (4C), fcprojw (C,4C), fcprojb (C)
 *   segment L+1    final norm: lnfw (C), lnfb (C)
 *
 * A Llama (cfg->arch MSR_GPT_ARCH_LLAMA, docs/model.md "Llama"; HS = C/NH,
 * KVC = KVH * HS, F = cfg->ffn; no biases, no wpe, an untied head):
 *
 *   segment 0      embeddings: wte (V,C)
 *   segment 1+l    block l:    ln1w (C), wq (C,C), wk (KVC,C), wv (KVC,C),
 *                              wo (C,C), ln2w (C), w1 (F,C), w3 (F,C),
 *                              w2 (C,F)
 *   segment L+1    final norm and head: lnfw (C), lm_head (V,C)
 *
 * wq, wk, wv are one (C + 2 KVC, C) matrix to the block (its qkvw), w1 and
 * w3 one (2F, C) (its fcw: gate rows, then up rows), wo its attprojw and
 * w2 its fcprojw; ln1w and ln2w are RMSNorm weights.
 *
 * Backward finishes the segments' gradients from the end of the buffer to
 * its start (L+1, L, ..., 1, 0), so the gradients that are ready always form
 * one contiguous tail of the flat buffer: data parallel reduces them in
 * buckets cut from the end while backward goes on.
 *
 * The model reads a segment's parameters and writes its gradients through
 * segments[s].params and segments[s].grads, which point into the flat
 * buffers unless a hook (below) points them elsewhere: that is how ZeRO-3
 * gathers a block's parameters just before it runs, and how ZeRO-2 catches a
 * block's gradients in a temporary buffer to reduce-scatter them.
 *
 * Not thread-safe: one thread drives a model at a time. */
#ifndef MSR_MODEL_GPT_H
#define MSR_MODEL_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "msrun/device.h"
#include "model/layers.h"

/* Mixture-of-Experts (model/moe.h, docs/model.md "Mixture-of-Experts"):
 * every `every`-th block (layers every-1, 2*every-1, ...) has, in place of
 * its MLP, `experts` MLPs of the dense one's shape behind a softmax router.
 * experts == 0: a dense model (the rest is then ignored). */
typedef struct msr_gpt_moe {
    int experts;            /* E: 0 (dense) or 1..MSR_GPT_MAX_EXPERTS */
    int top_k;              /* K: experts each token goes to, 1..E */
    int every;              /* N: every N-th block is MoE (1: all) */
    double capacity_factor; /* F: capacity = ceil(F * tokens * K / E) per micro-batch */
    double aux_loss;        /* A: weight of the load-balancing loss (0: none) */
} msr_gpt_moe_t;

#define MSR_GPT_MAX_EXPERTS 1024

/* The architecture of the blocks (docs/model.md "Llama"). */
typedef enum msr_gpt_arch {
    MSR_GPT_ARCH_GPT = 0,   /* GPT-2: LayerNorm, GELU MLP, learned positions, tied head */
    MSR_GPT_ARCH_LLAMA = 1, /* RMSNorm, SwiGLU, rotary positions, GQA, untied head, no biases */
} msr_gpt_arch_t;

/* The model's shape. A config zeroed past moe is the GPT: arch, ffn,
 * kv_heads and rope_theta are read only for MSR_GPT_ARCH_LLAMA. */
typedef struct msr_gpt_config {
    int vocab;    /* V: 256, bytes as tokens */
    int max_seq;  /* maxT: the longest sequence (rows of wpe) */
    int layers;   /* L: transformer blocks */
    int heads;    /* NH: attention heads; C % NH == 0 */
    int channels; /* C: the width of the residual stream */
    msr_gpt_moe_t moe;
    msr_gpt_arch_t arch; /* MSR_GPT_ARCH_GPT (0) or MSR_GPT_ARCH_LLAMA */
    int ffn;             /* F: llama's SwiGLU width, >= 1 */
    int kv_heads;        /* KVH: llama's key/value heads, dividing NH */
    double rope_theta;   /* llama's rotary base (10000), > 0 */
} msr_gpt_config_t;

/* Whether block l of cfg is a Mixture-of-Experts block. */
int msr_gpt_layer_is_moe(const msr_gpt_config_t *cfg, int l);

#define MSR_GPT_VOCAB 256

/* Which part of the model a rank holds under tensor and pipeline parallel
 * (parallel/mp.h). The whole model is {1, 0, 1, 0, 1}.
 *
 * Tensor parallel (Megatron's split): each block's qkv and fc weights are
 * split by rows (a rank holds the q, k and v rows of its NH/tp heads and
 * 4C/tp rows of fc: column-parallel layers), attproj and fcproj by columns
 * (row-parallel layers), wte by vocabulary rows (V/tp); layernorms, wpe and
 * the row-parallel layers' biases are held whole by every tensor-parallel
 * rank ("tp-replicated").
 *
 * Pipeline parallel: the L blocks are cut into pp * chunks virtual stages
 * of consecutive layers (as evenly as possible, or as stage_layers says:
 * an uneven split can balance the end stages' extra work, the embedding
 * and the head); virtual stage j = c * pp + pp_rank is this rank's chunk c
 * (interleaved schedules give a rank several chunks, Megatron's layout).
 * The first virtual stage also holds the embeddings, the last the final
 * norm and the output head; with pp > 1 the head's tied copy of wte is not
 * part of the flat buffers (parallel/mp.h keeps it in step with the first
 * stage's). A Llama's part holds wte on the first virtual stage and lnfw
 * with the untied lm_head on the last; under tp wq, wk, wv are split by
 * heads (kv heads divisible by tp), w1 and w3 by rows, wo and w2 by
 * columns, wte and lm_head by vocabulary rows, the norms whole. The kv
 * heads KVH split among tp when tp divides them; with fewer kv heads than
 * ranks (tp a multiple of KVH) each rank holds the one kv head its query
 * heads use, replicated on the tp / KVH ranks that share it, whose
 * gradients parallel/mp.h sums over those ranks (Megatron's layout). */
typedef struct msr_gpt_part {
    int tp, tp_rank; /* tensor-parallel degree and this rank's index */
    int pp, pp_rank; /* pipeline stages and this rank's */
    int chunks;      /* model chunks per stage (virtual stages): 1 unless interleaved */
    /* the layers of each virtual stage j = c * pp + pp_rank (pp * chunks
     * entries, each >= 1, summing to L), as train_gpt's --pp-layers; NULL:
     * the even split (msr_layout_stage_even). Read by the call it is passed
     * to; a model keeps its own copy (model->part.stage_layers). */
    const int *stage_layers;
} msr_gpt_part_t;

#define MSR_GPT_MAX_CHUNKS 64
/* The most virtual stages a split can have: one layer each of the most
 * layers a model has. */
#define MSR_GPT_MAX_STAGES 1024

/* Checks that cfg can be split as part says: tp divides the heads and the
 * vocabulary (a Llama's ffn too, and its kv heads or a multiple of them), at least one layer per
 * virtual stage, ranks in range, and stage_layers (when given) a valid split
 * (msr_layout_split_check). On failure sets the error text (base/err.h: a one-line reason) and
 * returns MSR_ERR_CONFIG. */
msr_status_t msr_gpt_part_check(const msr_gpt_config_t *cfg, const msr_gpt_part_t *part);

/* Checks a shape: every size positive and bounded, C divisible by NH, and
 * a MoE setting (when experts > 0) in range: 1 <= K <= E, every >= 1,
 * capacity factor > 0, aux loss >= 0. A Llama also: ffn in [1, 4 x 16384],
 * kv_heads in [1, NH] dividing NH, an even head width (rotary pairs),
 * rope_theta > 1; its MoE blocks' experts are SwiGLU MLPs (Mixtral's).
 * On failure sets the error text (a one-line reason) and returns
 * MSR_ERR_CONFIG. */
msr_status_t msr_gpt_config_check(const msr_gpt_config_t *cfg);

/* The key/value heads a tensor-parallel rank of a Llama holds on a tp-way
 * split that msr_gpt_part_check accepts: KVH / tp, or 1 when tp is a
 * multiple of KVH (the head replicated on tp / KVH ranks). */
int msr_gpt_kv_heads_local(const msr_gpt_config_t *cfg, int tp);

/* The number of parameters of a shape in the flat buffers: V*C + maxT*C +
 * L*(12C^2 + 13C) + 2C for a dense model; a MoE block holds its router, E*C,
 * in place of the MLP's 8C^2 + 5C (its experts are the MoE state's,
 * model/moe.h: msr_moe_num_params). A Llama: 2VC + C + L*(2C^2 + 2 KVC C +
 * 2C + 3FC), a MoE block its router E*C in place of the 3FC. */
size_t msr_gpt_num_params(const msr_gpt_config_t *cfg);

/* The parameter tensors of a block, in their flat-buffer order. A MoE
 * block has the first eight (a Llama's: ln1w, wq, wk, wv, wo, ln2w), then
 * routerw (E, C), named "h<l>.routerw";
 * its experts are not in the flat buffers (model/moe.h). */
typedef enum msr_gpt_block_tensor {
    MSR_GPT_LN1W,
    MSR_GPT_LN1B,
    MSR_GPT_QKVW,
    MSR_GPT_QKVB,
    MSR_GPT_ATTPROJW,
    MSR_GPT_ATTPROJB,
    MSR_GPT_LN2W,
    MSR_GPT_LN2B,
    MSR_GPT_FCW,
    MSR_GPT_FCB,
    MSR_GPT_FCPROJW,
    MSR_GPT_FCPROJB,
    MSR_GPT_BLOCK_TENSORS
} msr_gpt_block_tensor_t;

/* One entry of the model's tensor table. */
typedef struct msr_gpt_tensor {
    char name[24];     /* "wte", "wpe", "h3.qkvw", "lnfw" (as the torch test names them) */
    int segment;       /* 0, 1 + layer, or L + 1 */
    int ndim;          /* 1 or 2 */
    int shape[2];      /* (rows, cols), or (n) with shape[1] = 1 */
    size_t offset;     /* first element in the flat buffers */
    size_t count;      /* elements */
    int decay;         /* AdamW's weight decay applies: matrices yes, biases and norms no */
    int tp_replicated; /* every tensor-parallel rank holds all of it (see msr_gpt_part_t) */
    /* the tensor-parallel ranks that hold these same elements: 1 for a
     * slice of its own, tp for a tp-replicated tensor, tp / KVH for a
     * Llama's wk and wv with fewer kv heads than tp ranks (each kv head
     * replicated on the ranks whose query heads use it) */
    int tp_copies;
    /* this rank is the first of those copies: it saves the elements and
     * counts them in the gradient norm (tp rank 0 for a tp-replicated one) */
    int tp_first;
    /* Where the elements are in the whole model's flat buffer: local element
     * (row i, column j) is whole-tensor element (row (i / row_block) *
     * row_stride + row_offset + i % row_block, column col_offset + j) of a
     * tensor of full_cols columns starting at full_offset. The identity for
     * the whole model; a tensor-parallel slice otherwise. */
    size_t full_offset;
    int full_cols;
    int row_block, row_stride, row_offset, col_offset;
} msr_gpt_tensor_t;

/* The whole model's flat index of local element i (0 <= i < t->count). */
size_t msr_gpt_tensor_full_index(const msr_gpt_tensor_t *t, size_t i);

/* Where a segment is, and where the model reads and writes it right now. */
typedef struct msr_gpt_segment {
    size_t offset; /* first element in the flat buffers */
    size_t count;  /* elements */
    float *params; /* (count) its parameters; default: model->params + offset */
    float *grads;  /* (count) its gradients;  default: model->grads + offset */
    int layer;     /* the block's layer (global index), -1 for the embeddings and final norm */
    int group;     /* the model chunk it belongs to (parallel/dp.h reduces a chunk's
                    * buckets when its backward finishes); 0 for the whole model */
} msr_gpt_segment_t;

/* Pointers to one block's parameters (or gradients: same layout). A
 * Llama block (see the layout above) has ln1w, qkvw (C + 2 KVC, C),
 * attprojw, ln2w, fcw (2F, C) and fcprojw (C, F); the rest are NULL. */
typedef struct msr_gpt_block_params {
    float *ln1w;     /* (C) */
    float *ln1b;     /* (C) */
    float *qkvw;     /* (3C, C) */
    float *qkvb;     /* (3C) */
    float *attprojw; /* (C, C) */
    float *attprojb; /* (C) */
    float *ln2w;     /* (C) */
    float *ln2b;     /* (C) */
    float *fcw;      /* (4C, C) */
    float *fcb;      /* (4C) */
    float *fcprojw;  /* (C, 4C) */
    float *fcprojb;  /* (C) */
    /* a MoE block: the router and the experts (fc* above are NULL) */
    float *routerw; /* (E, C) */
    float *experts; /* E/ep x [fcw (4C,C), fcb (4C), fcprojw (C,4C), fcprojb (C)],
                     * the MoE state's store (msr_moe_block_params) */
} msr_gpt_block_params_t;

/* One block's activations, kept from forward for backward. N = B*T. */
typedef struct msr_gpt_block_acts {
    float *ln1;      /* (N, C) */
    float *ln1_mean; /* (N) */
    float *ln1_rstd; /* (N) */
    float *qkv;      /* (N, 3C) */
    float *atty;     /* (N, C) attention output before its projection */
    float *att;      /* (B, NH, T, T) attention probabilities */
    float *res2;     /* (N, C) residual after attention */
    float *ln2;      /* (N, C) */
    float *ln2_mean; /* (N) */
    float *ln2_rstd; /* (N) */
    float *fch;      /* (N, 4C) */
    float *fch_gelu; /* (N, 4C) */
    float *res3;     /* (N, C) residual after the MLP: the block's output */
} msr_gpt_block_acts_t;

/* The model's activations: one buffer (acts_mem), a table of pointers. */
typedef struct msr_gpt_acts {
    float *encoded;               /* (N, C) embeddings, the first block's input */
    msr_gpt_block_acts_t *blocks; /* [L] */
    float *lnf;                   /* (N, C) */
    float *lnf_mean;              /* (N) */
    float *lnf_rstd;              /* (N) */
    float *logits;                /* (N, V) */
    float *probs;                 /* (N, V) */
    float *losses;                /* (N) */
    float *proj;                  /* (N, C) scratch: a projection before its residual add */
} msr_gpt_acts_t;

/* Backward's work space: one buffer (work_mem), a table of pointers. The
 * per-block buffers are zeroed and reused by every block. */
typedef struct msr_gpt_work {
    float *dres;      /* (N, C) gradient of the residual stream, passed down the blocks */
    float *dln;       /* (N, C) gradient of a layernorm's output */
    float *dqkv;      /* (N, 3C) */
    float *datty;     /* (N, C) */
    float *dfch;      /* (N, 4C) */
    float *dfch_gelu; /* (N, 4C) */
    float *datt;      /* (T, T) attention backward scratch */
    float *dlogits;   /* (N, V) */
} msr_gpt_work_t;

/* The activations' and work space's table: the CPU model and the CUDA
 * model (parallel/cuda) carve their buffers by it, so both hold the same
 * tensors in the same order with the same shapes. */
typedef struct msr_gpt_carve {
    float *base;  /* NULL: only count */
    size_t used;  /* floats handed out so far: the size the buffer needs */
    size_t align; /* each piece rounded up to a multiple of this many floats; 0 or 1: packed */
} msr_gpt_carve_t;

/* The next n floats of c (NULL when only counting). */
float *msr_gpt_carve(msr_gpt_carve_t *c, size_t n);

/* Points acts (acts->blocks: [L], the caller's) into c for batch x max_seq
 * tokens; head_chunk > 0: the chunked head's buffers (layout.h
 * msr_layout_head_chunk, msr_gpt_create_chunked), 0: the whole head's. */
void msr_gpt_carve_acts(const msr_gpt_config_t *cfg, int batch, int head_chunk, msr_gpt_carve_t *c,
                        msr_gpt_acts_t *acts);
/* Points work into c; datt holds datt_heads (T, T) matrices (the CPU runs
 * one head at a time: 1; the GPU a batch row's heads at once: NH);
 * head_chunk as msr_gpt_carve_acts'. */
void msr_gpt_carve_work(const msr_gpt_config_t *cfg, int batch, int head_chunk, int datt_heads,
                        msr_gpt_carve_t *c, msr_gpt_work_t *work);

typedef struct msr_moe msr_moe_t; /* model/moe.h */

typedef struct msr_gpt {
    msr_gpt_config_t cfg; /* the whole model's shape */
    msr_gpt_part_t part;  /* what this model holds of it */
    int whole;            /* part is the whole model */
    int max_batch;        /* B the activations were sized for; 0: none (a part) */
    int head_chunk;       /* msr_gpt_create_chunked's rows a chunk (at most V); 0: whole */
    size_t num_params;    /* held here (the whole model's for a whole model) */
    /* the device params, grads, acts_mem and work_mem come from
     * (msr_gpt_create_on; NULL: the heap, msr_calloc) */
    const msr_device_t *dev;
    float *params; /* (num_params) the flat parameter buffer */
    float *grads;  /* (num_params) the flat gradient buffer */

    int num_tensors; /* 2 + 12 L + 2 (a Llama: 1 + 9 L + 2) */
    msr_gpt_tensor_t *tensors;
    int num_segments; /* L + 2 for the whole model */
    msr_gpt_segment_t *segments;
    /* the part's segments: [embeddings] [chunk 0's blocks] ... [final norm] */
    int seg_embed; /* the embeddings' segment, -1 when not held */
    int seg_lnf;   /* the final norm's segment, -1 when not held */
    int num_chunks;
    int chunk_lo[MSR_GPT_MAX_CHUNKS], chunk_hi[MSR_GPT_MAX_CHUNKS]; /* global layers */
    int chunk_seg[MSR_GPT_MAX_CHUNKS]; /* segment of the chunk's first block */
    int *stage_layers; /* part.stage_layers: the model's copy (pp * chunks), or NULL */

    float *acts_mem;
    size_t acts_count;
    msr_gpt_acts_t acts;
    float *work_mem;
    size_t work_count;
    msr_gpt_work_t work;

    /* the last forward, for backward */
    int *inputs;  /* (B, T) */
    int *targets; /* (B, T) */
    int B, T;     /* 0, 0 until a forward with targets ran */

    msr_moe_t *moe; /* the MoE blocks' routing and experts' work (NULL: dense) */

    /* the matrix products' precision (layers.h; owned): NULL is fp32 */
    msr_products_t *prod;
    /* the kernels the model's passes call, whichever runtime drives them
     * (model/kernels.h; not owned; msr_gpt_set_kernels): NULL is the
     * CPU's. A table of another device needs the buffers on that device. */
    const struct msr_kernels *kernels;
} msr_gpt_t;

/* Runs the model's matrix products in precision (layers.h, "precision of
 * the matrix products"): bf16 operands with fp32 sums, or fp32. The
 * parameters stay fp32 (the masters). Call before the first pass, after
 * the model's MoE state (m->moe) is in place: it gets the same. Errors
 * (logged): those of msr_products_create; the model is then unchanged. */
msr_status_t msr_gpt_set_precision(msr_gpt_t *m, msr_precision_t precision);

/* Runs the model's kernels through k (model/kernels.h; borrowed, NULL: the
 * CPU's): the blocks', the ends' and the MoE state's (m->moe, which must
 * be in place). A model-parallel runtime's blocks take the table when it
 * is created (parallel/mp.h): call this before. Errors: MSR_ERR_INVALID_ARG
 * for a table with an entry missing (named in the error text); the model
 * is then unchanged. */
msr_status_t msr_gpt_set_kernels(msr_gpt_t *m, const struct msr_kernels *k);

/* Creates a model of shape cfg whose activations hold up to max_batch
 * sequences of up to cfg->max_seq tokens. Parameters and gradients are
 * zero; call msr_gpt_init_params. Errors: MSR_ERR_CONFIG (the reason in the
 * error text, base/err.h), MSR_ERR_NO_MEMORY. */
msr_status_t msr_gpt_create(const msr_gpt_config_t *cfg, int max_batch, msr_gpt_t **model_p);

/* flags for msr_gpt_create_ex: leave out the flat parameter or gradient
 * buffer (model->params / model->grads NULL, and so every segment's pointer
 * NULL until a hook points it somewhere). ZeRO-2 keeps no full gradient,
 * ZeRO-3 neither a full gradient nor full parameters. */
#define MSR_GPT_NO_PARAMS 1u
#define MSR_GPT_NO_GRADS  2u

/* msr_gpt_create with flags. */
msr_status_t msr_gpt_create_ex(const msr_gpt_config_t *cfg, int max_batch, unsigned flags,
                               msr_gpt_t **model_p);

/* A rank's part of the model (parameters and gradients of its tensors, in
 * the layout above, cut as part says), with no activations: forward and
 * backward of a part are parallel/mp.h's (msr_gpt_forward refuses it).
 * Errors: MSR_ERR_CONFIG (the reason in the error text), MSR_ERR_NO_MEMORY. */
msr_status_t msr_gpt_create_part(const msr_gpt_config_t *cfg, const msr_gpt_part_t *part,
                                 unsigned flags, msr_gpt_t **model_p);
/* msr_gpt_create_ex (part NULL: the whole model, activations for
 * max_batch) or msr_gpt_create_part (max_batch 0) with the model's
 * buffers (parameters, gradients, activations, work space: model->dev)
 * allocated zeroed by dev (msr_device_alloc_zero, freed by
 * msr_device_free); NULL: from the heap, as those. The kept tokens stay
 * the host's, and so does a MoE state (msr_moe_set_layout moves it). A
 * device whose memory the host cannot reach is refused, named
 * (MSR_ERR_UNSUPPORTED): the model's code reads and writes its buffers
 * on the host (the kernels' table aside). Errors: theirs, and the
 * device's allocation failures as MSR_ERR_NO_MEMORY. */
msr_status_t msr_gpt_create_on(const msr_device_t *dev, const msr_gpt_config_t *cfg,
                               const msr_gpt_part_t *part, int max_batch, unsigned flags,
                               msr_gpt_t **model_p);

/* msr_gpt_create_ex with a chunked head (train_gpt --head-chunk; layout.h
 * msr_layout_head_chunk), for the loss alone: msr_gpt_forward computes
 * the head's logits head_chunk (>= 1; at most V taken) vocabulary rows at
 * a time, folding each chunk into every position's maximum, sum of
 * exponentials and target logit (the online softmax, msr_vocab_fold), so
 * the model holds one chunk's logits and exponentials (N, head_chunk) and
 * 6 N floats in place of the whole head's three (N, V) buffers. With one
 * chunk the losses are the whole head's, bitwise; with more, the sums of
 * exponentials are added in another order. msr_gpt_forward without
 * targets (the logits) and msr_gpt_backward are refused (MSR_ERR_STATE):
 * the model is for evaluation (parallel/eval.h). Errors: msr_gpt_create_ex's,
 * MSR_ERR_CONFIG for head_chunk < 1. */
msr_status_t msr_gpt_create_chunked(const msr_gpt_config_t *cfg, int max_batch, int head_chunk,
                                    unsigned flags, msr_gpt_t **model_p);
void msr_gpt_destroy(msr_gpt_t *model);

/* Points p at the block parameters inside a segment base (a block segment's
 * params or grads) of a dense block. */
void msr_gpt_block_point(const msr_gpt_config_t *cfg, float *base, msr_gpt_block_params_t *p);
/* The same for block l, dense or MoE (experts NULL: they are the MoE
 * state's), GPT or Llama. */
void msr_gpt_block_point_layer(const msr_gpt_config_t *cfg, int l, float *base,
                               msr_gpt_block_params_t *p);
/* The same for a tensor-parallel rank's block (tp = 1: the whole block):
 * qkvw (3C/tp, C), qkvb (3C/tp), attprojw (C, C/tp), fcw (4C/tp, C), fcb
 * (4C/tp), fcprojw (C, 4C/tp); the rest as above. */
void msr_gpt_block_point_tp(const msr_gpt_config_t *cfg, int tp, float *base,
                            msr_gpt_block_params_t *p);

/* Writes the initial value of flat elements [lo, hi) into dst (hi - lo
 * floats), as GPT-2 initialises: matrices N(0, 0.02), the two residual
 * projections N(0, 0.02/sqrt(2L)), wpe N(0, 0.01), biases 0, norm weights 1.
 * Element i depends only on (seed, i), so any slice of the buffer (a ZeRO-3
 * shard) gets the same numbers as the whole; in a part, i is the element's
 * index in the whole model, so every split starts from the same model. */
void msr_gpt_init_range(const msr_gpt_t *model, uint64_t seed, size_t lo, size_t hi, float *dst);

/* msr_gpt_init_range over the whole flat buffer (which must exist), and
 * the MoE state's experts (msr_moe_init_params). */
void msr_gpt_init_params(msr_gpt_t *model, uint64_t seed);

/* Sets every gradient to zero (the flat buffer, if any, and the MoE
 * state's experts; segments pointed elsewhere are the hook's business). */
void msr_gpt_zero_grad(msr_gpt_t *model);

/* Points segment s back at the model's flat buffers (NULL for one left
 * out). */
void msr_gpt_segment_reset(msr_gpt_t *model, int s);

/* What a forward or backward is doing when it calls a hook. */
typedef enum msr_gpt_pass {
    MSR_GPT_FORWARD = 0,
    MSR_GPT_BACKWARD = 1,
} msr_gpt_pass_t;

/* Calls into the parallel runtime, made by forward and backward from the
 * calling thread. Any member may be NULL. A hook that fails stops the pass
 * and its status is returned; the model is then in an unspecified state
 * until the next forward.
 *
 * acquire(s): the pass is about to read segment s's parameters (and, in
 *   backward, add to its gradients); the hook may point
 *   model->segments[s].params / .grads elsewhere first.
 * release(s): the pass is done with segment s for now.
 * grads_ready(s): backward, only: segment s's gradients are final for this
 *   backward (called once per segment, in the order L+1, L, ..., 1, 0).
 *
 * Forward visits 0 (embeddings), 1..L, L+1 (final norm), then 0 again (the
 * output head reads wte). Backward visits 0 (head), L+1, L..1, 0 (embeddings),
 * and segment 0's gradients are ready only after that last visit. A Llama's
 * head is untied, in L+1: forward visits 0, 1..L, L+1; backward L+1, L..1,
 * 0 (layout/'s ZeRO-3 visit table, untied). */
typedef struct msr_gpt_hooks {
    void *arg;
    msr_status_t (*acquire)(void *arg, msr_gpt_t *model, int seg, msr_gpt_pass_t pass);
    msr_status_t (*release)(void *arg, msr_gpt_t *model, int seg, msr_gpt_pass_t pass);
    msr_status_t (*grads_ready)(void *arg, msr_gpt_t *model, int seg);
    /* poll(): called between the kernels of a block and of the head (a few
     * times per segment), so that communication in flight makes progress
     * while the pass computes; it must not touch the segments' pointers. */
    msr_status_t (*poll)(void *arg, msr_gpt_t *model);
} msr_gpt_hooks_t;

/* Runs the whole model on inputs (B,T) (tokens in [0, V)), B <= max_batch, T <=
 * maxT (MSR_ERR_STATE for a part). With targets (B,T), also computes the per-token losses and
 * writes their mean (summed in double) to *loss_p, and keeps what backward needs; with targets ==
 * NULL, computes only acts.logits (B,T,V) and leaves *loss_p alone. hooks may be NULL. A MoE
 * model's loss is that mean plus the MoE blocks' load-balancing losses (model/moe.h). Errors:
 * MSR_ERR_INVALID_ARG (sizes, a token out of range; in the error text), a hook's status, or (expert
 * parallel) the communicator's. */
msr_status_t msr_gpt_forward(msr_gpt_t *model, const int *inputs, const int *targets, int B, int T,
                             const msr_gpt_hooks_t *hooks, double *loss_p);

/* Adds to the gradients (+=) the gradient of dloss * (sum of the last
 * forward's token losses): dloss = 1 / (B*T) gives the gradient of that
 * micro-batch's mean loss, 1 / (tokens of the whole step) the share of one
 * micro-batch in the step's mean; a MoE block's load-balancing loss gets
 * the weight dloss * B * T (its share of the step's mean of micro-batch
 * losses). Calls the hooks as described above. Errors: MSR_ERR_STATE (no
 * forward with targets before), a hook's status, the communicator's. */
msr_status_t msr_gpt_backward(msr_gpt_t *model, float dloss, const msr_gpt_hooks_t *hooks);

#endif
