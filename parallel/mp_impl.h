/* Model parallel's private structures (see mp.h), shared by its files:
 * mp_pipe.c (checks, sizes, the schedule), mp_tp.c (tensor-parallel
 * communication, the embeddings and the head) and mp.c (the pipeline, the
 * step). */
#ifndef MSR_PARALLEL_MP_IMPL_H
#define MSR_PARALLEL_MP_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "layout/layout.h"
#include "model/block.h"
#include "parallel/mp.h"

/* A rank's activation sizes (layout/layout.h): the runtime carves its
 * frames from the same table the planner counts with. */
typedef msr_layout_dims_t dims_t;

/* What a micro-batch's chunk keeps between its forward and backward. */
typedef struct frame {
    float *mem;
    size_t bytes;
    int live;
    float *in;                        /* (Nl, C) the chunk's input */
    msr_gpt_block_acts_t *layers;     /* [the chunk's blocks] */
    float *lnf, *lnf_mean, *lnf_rstd; /* head: (Nl, C), (Nl), (Nl) */
    float *probs;                     /* head: (N, Vl) */
} frame_t;

typedef msr_pipe_op_t op_t; /* layout/pipe_order.h */

typedef struct work {
    float *scratch;             /* the blocks' dropped activations */
    float *gat, *dgat, *perm;   /* (N, C) gathered input, gathered gradient, permutation */
    float *proj, *projl;        /* (N, C) a row-parallel output, (Nl, C) reduced */
    float *dres, *dln, *dlnl;   /* (Nl, C), (N, C), (Nl, C) */
    float *dqkv, *datty;        /* (N, 3 Cl), (N, Cl) */
    float *dfch, *dfch_gelu;    /* (N, Hl) */
    float *datt;                /* (T, T) */
    float *logits, *dlogits;    /* (N, Vl) */
    float *losses, *rmax, *red; /* (N), (N), (2N) */
    /* context parallel's ring (NULL without cp): K/V blocks in flight and
     * being computed, their gradients likewise, and the online softmax's
     * row statistics */
    float *kv[2], *dkv[2];     /* (N, 2 Cl) each */
    float *rmx, *rsum, *delta; /* (N, NHl) */
} work_t;

struct msr_mp {
    msr_mp_config_t cfg;
    const msr_device_t *dev; /* borrowed: cfg.device, or the CPU */
    const msr_mesh_t *mesh;
    msr_gpt_t *model;
    dims_t d;
    /* the step's dims, which size the frames' buffers: d is one
     * sequence's while msr_mp_eval runs a MoE model's passes (mp_eval.c) */
    dims_t d_step;
    int pp, pr, nv; /* stages, this stage, virtual stages */
    int tp, tr;
    int cp, cr;              /* context parallel: ranks in the ring, this rank's index */
    int *cp_pos;             /* [cp * T]: rank j's global positions at j * T (T = d.T) */
    int *cp_in, *cp_tgt;     /* [micros * N]: this rank's positions of the step's tokens */
    float *cp_kvx, *cp_dkvx; /* (T/2, 2 Cl) each: a Llama's kv heads repeated for grouped-query
                              * ring attention, and their gradients (NULL otherwise) */

    float *wmem;
    work_t w;
    size_t scratch_count;
    msr_block_t blk;           /* the blocks' shape and work space (in w) */
    msr_block_comm_t blk_comm; /* their tensor-parallel communication */

    frame_t *frames; /* [micros * chunks] */
    /* closed frames' memory, kept for the next frame of the same size, of
     * any chunk: freeing it made every step fault its pages in again
     * (GPipe's m frames most), and a pool per chunk held each chunk's own
     * peak, more than the schedule keeps at once when chunks interleave */
    struct {
        float *mem;
        size_t bytes;
    } * pool; /* [micros * chunks]: every frame closed at most once */
    int pool_n;
    float *head_wte, *head_dwte; /* pp > 1, last stage: the tied copy (Vl, C) and its gradient */
    float *gsend;                /* [micros * chunks] (Nl, C) gradients sent back */
    msr_comm_req_t **sreq;       /* [2 * micros * chunks] sends in flight */
    msr_comm_req_t *tied_req;    /* the head's wte gradient on its way to the first stage */
    int overlap;                 /* dp reduces during backward (GPipe, 1F1B; see mp.h) */
    int backwards;               /* backwards run this step (they go in micro-batch order) */
    int last_backward;           /* the running backward is the step's last */

    op_t *ops;
    int num_ops;

    const int *inputs, *targets; /* this step's (micros, B, T) */
    float dloss;
    double loss_sum;
    double aux_sum; /* this step's MoE load-balancing losses on this stage */
    msr_dp_t *dp;

    msr_acts_t *acts; /* activation offload (NULL: none) */
    int acts_layers;  /* activations per frame in its file: the most blocks of a chunk */

    size_t acts_live;
    msr_mp_stats_t stats;
    uint64_t recv_ns; /* this step */

    /* tensor-parallel overlap: copy i's collective in flight in
     * flight[i] (an allreduce, or under sp a reduce-scatter from its half
     * of w.perm; gather: forward's allgather under sp into that half;
     * req NULL once a poll saw it finish, its status in st), on the
     * copy's buf (a reduction's); copy[i], the arg of copy_comm[i], copy
     * i's view of the block's communication (B/2 sequences) */
    struct {
        msr_comm_req_t *req;
        msr_status_t st;
        int used, gather;
        float *buf;
    } flight[2];
    /* under sp, backward's allgathers of the copies' saved norm outputs
     * (ln2 A, ln2 B, ln1 A, ln1 B: the order the split backward enters
     * them), each started as the one before is entered, into w.proj
     * (which backward does not use), so that it runs while the copies
     * compute; pre.k the next to enter, pre.req the one in flight (NULL
     * once a poll saw it finish, its status in pre.st) */
    struct {
        const float *src[4];
        float *gbuf[4];
        msr_comm_req_t *req;
        msr_status_t st;
        int k, live;
    } pre;
    struct msr_mp_copy {
        struct msr_mp *mp;
        int i;
    } copy[2];
    msr_block_comm_t copy_comm[2];

    int tracing;
    /* msr_mp_eval's forwards: nothing kept for a backward (the block
     * inputs under the activations' offload given back unwritten) */
    int evaluating;
    uint64_t t0;
    msr_mp_span_t *spans;
    int num_spans, cap_spans;
};

/* The runtime's buffers and copies on mp->dev (mp.c). buf_alloc: n floats
 * of the device's memory into *p_p, set to zero when zeroed (and synced,
 * so the host may read them), else NO_MEMORY with the text set; buf_free
 * of NULL does nothing. copy and zero queue n floats' work on the device's
 * default stream, kind saying between which memories (the model's
 * parameters and gradients are the host's); sync waits for it before a
 * communicator or the host reads what it wrote (on the CPU device the
 * work is done in the call). Each answers the device's failure, text
 * set. */
msr_status_t msr_mp_buf_alloc(msr_mp_t *mp, size_t n, int zeroed, float **p_p);
void msr_mp_buf_free(msr_mp_t *mp, float *p);
msr_status_t msr_mp_copy(msr_mp_t *mp, float *dst, const float *src, size_t n,
                         msr_device_copy_t kind);
msr_status_t msr_mp_zero(msr_mp_t *mp, float *dst, size_t n);
msr_status_t msr_mp_sync(msr_mp_t *mp);

/* This rank's sizes for cfg on a tp-way split. */
dims_t msr_mp_dims(const msr_gpt_config_t *m, const msr_mp_config_t *cfg, int tp);
/* Points la into keep (what the frame keeps) and scr (the shared scratch,
 * overwritten by the next block) as the recompute mode says. */
void msr_mp_carve_layer(const dims_t *d, msr_gpt_carve_t *keep, msr_gpt_carve_t *scr,
                        msr_gpt_block_acts_t *la);
/* Points f into keep and scr for a chunk of `layers` blocks (head: with the
 * final norm and the head); f->layers NULL: only counts. */
void msr_mp_carve_frame(const dims_t *d, int layers, int head, msr_gpt_carve_t *keep,
                        msr_gpt_carve_t *scr, frame_t *f);
/* Fills mp->ops with this rank's order of forwards and backwards. */
void msr_mp_build_schedule(msr_mp_t *mp);

/* Puts "mp: <what>" in front of a failed communication's text (base/err.h)
 * and returns st: the caller passes it on, the trainer's caller logs it. */
msr_status_t msr_mp_failed(const char *what, msr_status_t st);
/* Adds a span to the trace while tracing. */
void msr_mp_span_add(msr_mp_t *mp, int comm, uint64_t a, uint64_t b, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Gives a live frame's memory back to the pool (mp_run.c; a closed frame
 * is left as it is). */
void msr_mp_frame_close(msr_mp_t *mp, frame_t *f);
/* Micro-batch m's frame of chunk c, and its forward (mp_run.c). */
frame_t *msr_mp_frame_at(msr_mp_t *mp, int m, int c);
msr_status_t msr_mp_run_forward(msr_mp_t *mp, int m, int c);
/* A forward's hook on segment s (mp_run.c): ZeRO-3's gather (acquire) and
 * free, the parameters' offload's read and drop; nothing otherwise. */
msr_status_t msr_mp_fwd_hook(msr_mp_t *mp, int s, int acquire);
/* Whether the last stage keeps a copy of the tied wte (mp_tied.c). */
int msr_mp_tied(const msr_mp_t *mp);
/* The first stage adds the head's wte gradient, sent by the last stage, to
 * its own; the embedding segment must be acquired (mp_tied.c). */
msr_status_t msr_mp_tied_add(msr_mp_t *mp);
/* Waits for the pipeline's sends in flight (mp.c); the first failure,
 * prefixed as msr_mp_failed does. */
msr_status_t msr_mp_sends_wait(msr_mp_t *mp);

/* Forward of a dense block under tp overlap (mp_tp_copy.c): micro-batch's
 * rows in two copies of B/2 sequences (msr_block_forward_split). */
msr_status_t msr_mp_block_forward_split(msr_mp_t *mp, const msr_gpt_block_params_t *p,
                                        msr_gpt_block_acts_t *la, const float *x);
/* Its backward (msr_block_backward_split): dres (Nl,C) becomes the
 * gradient of x. */
msr_status_t msr_mp_block_backward_split(msr_mp_t *mp, const msr_gpt_block_params_t *p,
                                         const msr_gpt_block_params_t *g,
                                         const msr_gpt_block_acts_t *la, const float *x,
                                         float *dres);
/* An allreduce over the tensor-parallel group (nothing at tp = 1). */
msr_status_t msr_mp_tp_allreduce(msr_mp_t *mp, void *x, size_t n, msr_dtype_t t, msr_op_t op,
                                 const char *what);
/* Points mp->blk at this rank's shape, the work space and the
 * tensor-parallel communication (none at tp = 1). */
void msr_mp_point_block(msr_mp_t *mp);
/* Under tp overlap (mp_tp_copy.c): fills mp->copy and copy_comm, the two
 * copies' views of the block's communication; the poll hook (arg: the
 * msr_mp_t) drives the copies' collectives in flight. */
void msr_mp_point_copies(msr_mp_t *mp);
msr_status_t msr_mp_tp_poll(void *arg);
/* Sequence parallel's layout (mp_tp.c): the rows of B sequences from perm
 * (rank r's (B, T/tp, C) at r B T/tp C) into full (B, T, C) (dir 1), or
 * back (dir -1), copies synced (the device's failure, else MSR_OK);
 * full (B, T, C) on every rank gathered from each rank's local
 * (B, T/tp, C) through perm; local = this rank's positions of the
 * sum over ranks of full (left unspecified). */
msr_status_t msr_mp_seq_permute(msr_mp_t *mp, int B, float *perm, float *full, int dir);
msr_status_t msr_mp_seq_gather(msr_mp_t *mp, int B, float *perm, const float *local, float *full);
msr_status_t msr_mp_seq_scatter(msr_mp_t *mp, int B, float *perm, float *full, float *local);
/* The embeddings: out (Nl, C) = this rank's rows of wte[token] + wpe[t];
 * backward adds dout's rows to wte's and wpe's gradients. */
msr_status_t msr_mp_embed_forward(msr_mp_t *mp, const int *tokens, float *out);
msr_status_t msr_mp_embed_backward(msr_mp_t *mp, const int *tokens, float *dout);
/* Context parallel (mp_cp.c): the global position of local position t on
 * cp rank r, chunks of `chunk` positions; ring attention, the block's
 * attend hooks (arg: the msr_mp_t); local (B, T) = this rank's positions of
 * full (B, cp T) tokens. */
int msr_mp_cp_position(int cp, int chunk, int r, int t);
msr_status_t msr_mp_cp_attend(void *arg, float *out, float *lse, const float *qkv);
msr_status_t msr_mp_cp_attend_backward(void *arg, float *dqkv, const float *dout, const float *qkv,
                                       const float *out, const float *lse);
void msr_mp_cp_select(const msr_mp_t *mp, const int *full, int *local);
/* The final norm, the head and the loss of one micro-batch; x (Nl, C) is
 * the last block's output. Forward adds the mean loss to mp->loss_sum;
 * backward leaves the gradient of x in mp->w.dres. */
msr_status_t msr_mp_head_forward(msr_mp_t *mp, frame_t *f, const float *x, const int *targets);
msr_status_t msr_mp_head_backward(msr_mp_t *mp, frame_t *f, const float *x, const int *targets);
/* The head's weights (V/tp, C: a Llama's lm_head, the GPT's tied wte or
 * under pp the last stage's copy of it), or their gradient when grads. */
float *msr_mp_head_weights(msr_mp_t *mp, int grads);
/* The chunked head (mp_head.c; mp->d.hc > 0): the loss rows into w->losses
 * and the frame's maxima, sums and target logits into f->probs (3 N)
 * from g, the head's input (N, C, gathered under tp); the backward adds
 * the input's gradient into w->dln and the weights' into theirs. */
msr_status_t msr_mp_head_chunked_forward(msr_mp_t *mp, frame_t *f, const float *g,
                                         const int *targets);
msr_status_t msr_mp_head_chunked_backward(msr_mp_t *mp, frame_t *f, const float *g,
                                          const int *targets);

#endif
