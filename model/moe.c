/* Mixture-of-Experts blocks' MLP: routing, capacity, dispatch, experts,
 * combine and the load-balancing loss (see moe.h). */
#include "model/moe.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "layout/layout.h"
#include "model/err_call.h"
#include "model/layers.h"
#include "model/rng.h"

/* What one MoE block keeps from its forward for its backward. */
typedef struct moe_slot {
    float *probs; /* (N,E) router softmax */
    int *choice;  /* (N,K) experts chosen, most probable first */
    float *gate;  /* (N,K) their probabilities */
    int *pos;     /* (N,K) slot at the expert, -1: dropped */
    double *frac; /* (E) f_e: share of the N*K choices that picked e */
    float *xin;   /* (E*cap, C) the rows this rank's experts ran on */
    float *fch;   /* (E*cap, H) */
    float *fch_g; /* (E*cap, H) gelu of fch */
    float *comb;  /* (E*cap, C) the experts' outputs back at their tokens' rank */
    int *used;    /* (E) rows of each expert-side block that hold a token */
    int N, cap;   /* of the last forward; N = 0: none */
} moe_slot_t;

struct msr_moe {
    int E, K, C, H, every, L;
    double F, A;
    int max_tokens, max_cap;
    msr_layout_moe_dims_t dims; /* the layout's MoE table's sizes: its buffers */
    msr_comm_t *ep_comm;        /* NULL: ep 1 */
    int ep, ep_rank;
    msr_comm_t *tp_comm; /* NULL: tp 1 */
    int tp, tp_rank;
    int El;          /* experts computed here per MoE block: E / (ep * tp) */
    int router_once; /* the router's weight gradient on tp rank 0 only */
    int nslots;      /* MoE blocks */
    int frames;      /* forwards kept per block (msr_moe_select) */
    int frame, counting;
    moe_slot_t *slots;      /* [nslots * frames]: block i's frame f at i * frames + f */
    msr_moe_stats_t *stats; /* [nslots] */
    int *store_of;          /* [nslots] the block's place in the store, -1: not held */
    int *held, nheld;       /* the MoE blocks the store holds, in order */
    msr_moe_span_t span;    /* tracing: called after each alltoall (NULL: none) */
    void *span_arg;
    /* the experts this rank computes: El per held MoE block, block after block */
    size_t count;              /* their floats */
    float *params, *grads;     /* (count) */
    msr_gpt_tensor_t *tensors; /* their table, offsets in params */
    int num_tensors;
    /* work space shared by the blocks */
    float *send;   /* (E*cap, C) dispatch side: rows by expert */
    float *out;    /* (E*cap, C) expert side: outputs, then input gradients */
    float *dout;   /* (E*cap, C) expert side: output gradients */
    float *dfch;   /* (E*cap, H) */
    float *dfch_g; /* (E*cap, H) */
    float *dgate;  /* (N,K) */
    float *dprobs; /* (N,E) */
    float *rdx;    /* (N,C) the router's input gradient where it is not wanted
                    * (tp ranks other than 0 that keep the router's weight
                    * gradient: made by msr_moe_set_layout) */
};

int msr_moe_capacity(const msr_gpt_moe_t *moe, int tokens)
{
    return (int)msr_layout_moe_capacity(moe->capacity_factor, (uint64_t)tokens,
                                        (uint64_t)moe->top_k, (uint64_t)moe->experts);
}

size_t msr_moe_expert_count(int C)
{
    return 8 * (size_t)C * (size_t)C + 5 * (size_t)C;
}

/* Expert e's tensors inside an experts base. */
typedef struct expert {
    float *fcw, *fcb, *fcprojw, *fcprojb;
} expert_t;

static expert_t expert_point(float *base, int e, int C)
{
    size_t H = 4 * (size_t)C;
    float *x = base + (size_t)e * msr_moe_expert_count(C);
    expert_t x_p;
    x_p.fcw = x, x += H * (size_t)C;
    x_p.fcb = x, x += H;
    x_p.fcprojw = x, x += (size_t)C * H;
    x_p.fcprojb = x;
    return x_p;
}

static void slot_free(moe_slot_t *s)
{
    msr_free(s->probs);
    msr_free(s->choice);
    msr_free(s->gate);
    msr_free(s->pos);
    msr_free(s->frac);
    msr_free(s->xin);
    msr_free(s->fch);
    msr_free(s->fch_g);
    msr_free(s->comb);
    msr_free(s->used);
}

/* The GPT-2 initialisation's stream for the experts (the flat buffers'
 * is another: an expert element's index is its own, see moe.h). */
#define MOE_INIT_STREAM 0x6578707274ULL

/* Buffer w of the layout's MoE table (layout/layout.h: what the planner
 * counts), zeroed. */
static void *work_alloc(const msr_moe_t *moe, int w)
{
    return msr_calloc(msr_layout_moe_work(&moe->dims, w),
                      msr_layout_moe_work_size(w, sizeof(float)));
}

/* Buffers [w0, w1) of the layout's MoE table into b[w0 .. w1 - 1], each
 * made by work_alloc; 0 when one is missing, and then none is kept. */
static int work_alloc_range(const msr_moe_t *moe, int w0, int w1, void **b)
{
    for (int w = w0; w < w1; w++) {
        if ((b[w] = work_alloc(moe, w)) == NULL) {
            while (w-- > w0)
                msr_free(b[w]);
            return 0;
        }
    }
    return 1;
}

static void store_free(msr_moe_t *moe)
{
    msr_free(moe->params);
    msr_free(moe->grads);
    msr_free(moe->tensors);
    moe->params = moe->grads = NULL;
    moe->tensors = NULL;
    moe->count = 0;
    moe->num_tensors = 0;
}

/* The first expert this rank computes, in the block's numbering: tp rank
 * r of ep rank i computes [i * E/ep + r * El, ... + El). */
static int first_expert(const msr_moe_t *moe)
{
    return moe->ep_rank * (moe->E / moe->ep) + moe->tp_rank * moe->El;
}

/* Allocates the store of the experts this rank computes in the blocks it
 * holds (zero) and its tensor table. */
static msr_status_t store_alloc(msr_moe_t *moe)
{
    static const char *const names[4] = {"fcw", "fcb", "fcprojw", "fcprojb"};
    int C = moe->C, H = moe->H, El = moe->El;
    int shape[4][2] = {{H, C}, {H, 1}, {C, H}, {C, 1}};
    store_free(moe);
    moe->count = (size_t)moe->nheld * (size_t)El * msr_moe_expert_count(C);
    moe->params = msr_calloc(moe->count > 0 ? moe->count : 1, sizeof(float));
    moe->grads = msr_calloc(moe->count > 0 ? moe->count : 1, sizeof(float));
    moe->tensors = msr_calloc((size_t)moe->nheld * (size_t)El * 4 + 1, sizeof *moe->tensors);
    if (moe->params == NULL || moe->grads == NULL || moe->tensors == NULL) {
        store_free(moe);
        return msr_err(MSR_ERR_NO_MEMORY, "moe: out of memory for %d experts of %d blocks", El,
                       moe->nheld);
    }
    size_t off = 0;
    for (int i = 0; i < moe->nheld; i++) {
        for (int le = 0; le < El; le++) {
            for (int k = 0; k < 4; k++) {
                msr_gpt_tensor_t *t = &moe->tensors[moe->num_tensors++];
                snprintf(t->name, sizeof t->name, "h%d.e%d.%s", (moe->held[i] + 1) * moe->every - 1,
                         first_expert(moe) + le, names[k]);
                t->segment = -1;
                t->ndim = shape[k][1] > 1 ? 2 : 1;
                t->shape[0] = shape[k][0];
                t->shape[1] = shape[k][1];
                t->offset = off;
                t->count = (size_t)shape[k][0] * (size_t)shape[k][1];
                t->decay = t->ndim == 2;
                t->full_offset = msr_moe_global_lo(moe, i) + (size_t)le * msr_moe_expert_count(C) +
                                 (k > 0 ? (size_t)H * C : 0) + (k > 1 ? (size_t)H : 0) +
                                 (k > 2 ? (size_t)C * H : 0);
                t->full_cols = shape[k][1];
                t->row_block = shape[k][0];
                off += t->count;
            }
        }
    }
    return MSR_OK;
}

size_t msr_moe_global_lo(const msr_moe_t *moe, int k)
{
    return ((size_t)moe->held[k] * (size_t)moe->E + (size_t)first_expert(moe)) *
           msr_moe_expert_count(moe->C);
}

int msr_moe_held(const msr_moe_t *moe)
{
    return moe->nheld;
}

size_t msr_moe_num_params(const msr_gpt_config_t *cfg)
{
    if (cfg->moe.experts == 0 || cfg->moe.every < 1)
        return 0;
    return (size_t)(cfg->layers / cfg->moe.every) * (size_t)cfg->moe.experts *
           msr_moe_expert_count(cfg->channels);
}

int msr_moe_local_experts(const msr_moe_t *moe)
{
    return moe->El;
}

size_t msr_moe_count(const msr_moe_t *moe)
{
    return moe->count;
}

float *msr_moe_params(msr_moe_t *moe)
{
    return moe->params;
}

float *msr_moe_grads(msr_moe_t *moe)
{
    return moe->grads;
}

const msr_gpt_tensor_t *msr_moe_tensors(const msr_moe_t *moe, int *n_p)
{
    *n_p = moe->num_tensors;
    return moe->tensors;
}

float *msr_moe_block_params(msr_moe_t *moe, int l, int grads)
{
    int k = moe->store_of[(l + 1) / moe->every - 1];
    size_t per = (size_t)moe->El * msr_moe_expert_count(moe->C);
    if (k < 0)
        return NULL;
    return (grads ? moe->grads : moe->params) + (size_t)k * per;
}

void msr_moe_init_params(msr_moe_t *moe, uint64_t seed)
{
    for (int k = 0; k < moe->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &moe->tensors[k];
        const char *kind = strrchr(t->name, '.') + 1;
        double std = strcmp(kind, "fcw") == 0       ? 0.02
                     : strcmp(kind, "fcprojw") == 0 ? 0.02 / sqrt(2.0 * moe->L)
                                                    : 0.0;
        for (size_t j = 0; j < t->count; j++) {
            uint64_t g = t->full_offset + j;
            moe->params[t->offset + j] =
                std > 0.0 ? (float)(std * msr_rng_normal(seed, MOE_INIT_STREAM, g)) : 0.0f;
        }
    }
}

void msr_moe_zero_grad(msr_moe_t *moe)
{
    memset(moe->grads, 0, moe->count * sizeof(float));
}

void msr_moe_destroy(msr_moe_t *moe)
{
    if (moe == NULL)
        return;
    store_free(moe);
    for (int i = 0; i < moe->nslots * moe->frames && moe->slots != NULL; i++)
        slot_free(&moe->slots[i]);
    for (int i = 0; i < moe->nslots && moe->stats != NULL; i++)
        msr_free(moe->stats[i].load);
    msr_free(moe->slots);
    msr_free(moe->stats);
    msr_free(moe->store_of);
    msr_free(moe->held);
    msr_free(moe->rdx);
    msr_free(moe->send);
    msr_free(moe->out);
    msr_free(moe->dout);
    msr_free(moe->dfch);
    msr_free(moe->dfch_g);
    msr_free(moe->dgate);
    msr_free(moe->dprobs);
    msr_free(moe);
}

msr_status_t msr_moe_create(const msr_gpt_config_t *cfg, int max_tokens, msr_moe_t **moe_p)
{
    return msr_moe_create_frames(cfg, max_tokens, 1, moe_p);
}

msr_status_t msr_moe_create_frames(const msr_gpt_config_t *cfg, int max_tokens, int frames,
                                   msr_moe_t **moe_p)
{
    const msr_gpt_moe_t *m = &cfg->moe;
    if (m->experts < 1 || max_tokens < 1 || frames < 1) {
        return msr_err(MSR_ERR_CONFIG,
                       "moe: %d experts, %d tokens, %d frames: a MoE model needs all three",
                       m->experts, max_tokens, frames);
    }
    msr_moe_t *moe = msr_calloc(1, sizeof *moe);
    if (moe == NULL)
        goto err_no_memory;
    moe->E = m->experts;
    moe->K = m->top_k;
    moe->C = cfg->channels;
    moe->H = 4 * cfg->channels;
    moe->every = m->every;
    moe->L = cfg->layers;
    moe->F = m->capacity_factor;
    moe->A = m->aux_loss;
    moe->ep = moe->tp = 1;
    moe->El = moe->E;
    moe->frames = frames;
    moe->counting = 1;
    moe->max_tokens = max_tokens;
    moe->dims = msr_layout_moe_dims((uint64_t)max_tokens, (uint64_t)m->experts, (uint64_t)m->top_k,
                                    m->capacity_factor, (uint64_t)moe->C, (uint64_t)moe->H);
    moe->max_cap = (int)moe->dims.cap;
    moe->nslots = cfg->layers / m->every;
    moe->slots = msr_calloc((size_t)moe->nslots * (size_t)frames, sizeof *moe->slots);
    moe->stats = msr_calloc((size_t)moe->nslots, sizeof *moe->stats);
    moe->store_of = msr_calloc((size_t)moe->nslots, sizeof *moe->store_of);
    moe->held = msr_calloc((size_t)moe->nslots, sizeof *moe->held);
    if (moe->slots == NULL || moe->stats == NULL || moe->store_of == NULL || moe->held == NULL)
        goto err_free;
    for (int i = 0; i < moe->nslots; i++) {
        moe->store_of[i] = moe->held[i] = i;
        if ((moe->stats[i].load = work_alloc(moe, MSR_MOE_WORK_LOAD)) == NULL)
            goto err_free;
    }
    moe->nheld = moe->nslots;
    void *b[MSR_MOE_WORK_ONCE_END]; /* indexed by the layout's buffer */
    for (int i = 0; i < moe->nslots * frames; i++) {
        if (!work_alloc_range(moe, MSR_MOE_WORK_PROBS, MSR_MOE_WORK_SLOT_END, b))
            goto err_free;
        moe->slots[i] = (moe_slot_t){.probs = b[MSR_MOE_WORK_PROBS],
                                     .choice = b[MSR_MOE_WORK_CHOICE],
                                     .gate = b[MSR_MOE_WORK_GATE],
                                     .pos = b[MSR_MOE_WORK_POS],
                                     .frac = b[MSR_MOE_WORK_FRAC],
                                     .xin = b[MSR_MOE_WORK_XIN],
                                     .fch = b[MSR_MOE_WORK_FCH],
                                     .fch_g = b[MSR_MOE_WORK_FCH_G],
                                     .comb = b[MSR_MOE_WORK_COMB],
                                     .used = b[MSR_MOE_WORK_USED]};
    }
    if (!work_alloc_range(moe, MSR_MOE_WORK_SEND, MSR_MOE_WORK_ONCE_END, b))
        goto err_free;
    moe->send = b[MSR_MOE_WORK_SEND];
    moe->out = b[MSR_MOE_WORK_OUT];
    moe->dout = b[MSR_MOE_WORK_DOUT];
    moe->dfch = b[MSR_MOE_WORK_DFCH];
    moe->dfch_g = b[MSR_MOE_WORK_DFCH_G];
    moe->dgate = b[MSR_MOE_WORK_DGATE];
    moe->dprobs = b[MSR_MOE_WORK_DPROBS];
    if (store_alloc(moe) != MSR_OK)
        goto err_free;
    *moe_p = moe;
    return MSR_OK;

err_free:
    msr_moe_destroy(moe);
err_no_memory:
    return msr_err(MSR_ERR_NO_MEMORY, "moe: out of memory for %d experts' work space (%d tokens)",
                   m->experts, max_tokens);
}

msr_status_t msr_moe_set_ep(msr_moe_t *moe, msr_comm_t *comm)
{
    msr_moe_layout_t lay = {comm, NULL, NULL, 0};
    return msr_moe_set_layout(moe, &lay);
}

msr_status_t msr_moe_set_layout(msr_moe_t *moe, const msr_moe_layout_t *lay)
{
    int ep = lay->ep_comm != NULL ? msr_comm_size(lay->ep_comm) : 1;
    int tp = lay->tp_comm != NULL ? msr_comm_size(lay->tp_comm) : 1;
    if (moe->E % (ep * tp) != 0) {
        return msr_err(MSR_ERR_CONFIG, "moe: %d experts do not divide among ep %d x tp %d ranks",
                       moe->E, ep, tp);
    }
    moe->ep_comm = ep > 1 ? lay->ep_comm : NULL;
    moe->ep = ep;
    moe->ep_rank = ep > 1 ? msr_comm_rank(lay->ep_comm) : 0;
    moe->tp_comm = tp > 1 ? lay->tp_comm : NULL;
    moe->tp = tp;
    moe->tp_rank = tp > 1 ? msr_comm_rank(lay->tp_comm) : 0;
    moe->El = moe->E / (ep * tp);
    moe->router_once = tp > 1 && lay->router_once;
    if (moe->tp_rank > 0 && !moe->router_once && moe->rdx == NULL &&
        (moe->rdx = work_alloc(moe, MSR_MOE_WORK_RDX)) == NULL) {
        return msr_err(MSR_ERR_NO_MEMORY,
                       "moe: out of memory for the router's gradient (%d tokens)", moe->max_tokens);
    }
    for (int i = 0; i < moe->nslots; i++) {
        if ((lay->held == NULL || lay->held[i]) && moe->slots[i * moe->frames].probs == NULL) {
            return msr_err(MSR_ERR_CONFIG, "moe: block %d's work space went with an earlier layout",
                           i);
        }
    }
    moe->nheld = 0;
    for (int i = 0; i < moe->nslots; i++) {
        moe->store_of[i] = -1;
        if (lay->held == NULL || lay->held[i]) {
            moe->store_of[i] = moe->nheld;
            moe->held[moe->nheld++] = i;
            continue;
        }
        /* another stage's block: its frames are never used here */
        for (int f = 0; f < moe->frames; f++) {
            slot_free(&moe->slots[i * moe->frames + f]);
            memset(&moe->slots[i * moe->frames + f], 0, sizeof *moe->slots);
        }
    }
    return store_alloc(moe);
}

void msr_moe_select(msr_moe_t *moe, int frame, int count)
{
    moe->frame = frame % moe->frames;
    moe->counting = count;
}

void msr_moe_set_trace(msr_moe_t *moe, msr_moe_span_t span, void *arg)
{
    moe->span = span;
    moe->span_arg = arg;
}

int msr_moe_blocks(const msr_moe_t *moe)
{
    return moe->nslots;
}

const msr_moe_stats_t *msr_moe_stats(const msr_moe_t *moe, int i)
{
    return &moe->stats[i];
}

void msr_moe_stats_reset(msr_moe_t *moe)
{
    for (int i = 0; i < moe->nslots; i++) {
        msr_moe_stats_t *st = &moe->stats[i];
        st->tokens = st->dropped = 0;
        memset(st->load, 0, (size_t)moe->E * sizeof *st->load);
    }
}

/* Block l's slot of the selected frame: l is the (i+1)-th MoE block when
 * l + 1 = (i + 1) * every. */
static moe_slot_t *slot_of(msr_moe_t *moe, int l)
{
    return &moe->slots[((l + 1) / moe->every - 1) * moe->frames + moe->frame];
}

/* The row block of expert e in the dispatch buffer, -1 when another tp
 * rank computes it: the blocks go ep rank by ep rank, each with the El
 * experts this tp rank computes there, so that one alltoall of El * cap
 * rows per peer carries them (at tp 1: e itself). */
static int row_block(const msr_moe_t *moe, int e)
{
    int per = moe->E / moe->ep, p = e / per, le = e % per - moe->tp_rank * moe->El;
    return le >= 0 && le < moe->El ? p * moe->El + le : -1;
}

/* The blocks of the dispatch buffer: ep * El. */
static int row_blocks(const msr_moe_t *moe)
{
    return moe->ep * moe->El;
}

static void span(msr_moe_t *moe, const char *what, uint64_t a)
{
    if (moe->span != NULL)
        moe->span(moe->span_arg, what, a, msr_now_ns());
}

/* Sends each rank its block of rows (El experts x cap rows x C) of src
 * and receives the blocks the ranks send here into dst: the dispatch and
 * the combine, both ways. At ep 1 a copy. */
static msr_status_t exchange(msr_moe_t *moe, const float *src, float *dst, int cap, int C,
                             const char *what)
{
    size_t n = (size_t)row_blocks(moe) * (size_t)cap * (size_t)C;
    if (moe->ep_comm == NULL) {
        memcpy(dst, src, n * sizeof(float));
        return MSR_OK;
    }
    uint64_t a = msr_now_ns();
    msr_status_t st = msr_comm_alltoall(moe->ep_comm, src, dst, n / (size_t)moe->ep, MSR_DTYPE_F32);
    span(moe, what, a);
    if (st != MSR_OK)
        return msr_err_call(st, "moe: the alltoall of %zu floats over ep %d (%s)", n, moe->ep,
                            what);
    return MSR_OK;
}

/* The dispatch's counts: each rank sends the rows it filled at each
 * row block (count, ep * El) and gets, in used, those of expert-side block
 * b = (source rank, local expert), so the experts run on filled rows only. */
static msr_status_t exchange_counts(msr_moe_t *moe, const int *count, int *used)
{
    if (moe->ep_comm == NULL) {
        memcpy(used, count, (size_t)row_blocks(moe) * sizeof *used);
        return MSR_OK;
    }
    uint64_t a = msr_now_ns();
    msr_status_t st =
        msr_comm_alltoall(moe->ep_comm, count, used, (uint64_t)moe->El, MSR_DTYPE_I32);
    span(moe, "moe counts", a);
    if (st != MSR_OK)
        return msr_err_call(st, "moe: the alltoall of the dispatch's counts over ep %d", moe->ep);
    return MSR_OK;
}

/* The local expert (its index among this rank's) of expert-side block b
 * (source rank p, local expert le = b % El): rows [b * cap, (b + 1) *
 * cap). */
static int block_expert(const msr_moe_t *moe, int b)
{
    return b % moe->El;
}

/* The router: probs, each token's top K and the counts of the choices. */
static void route(msr_moe_t *moe, moe_slot_t *s, const float *routerw, const float *x, int N)
{
    int E = moe->E, K = moe->K, C = moe->C;
    msr_matmul_forward(s->probs, x, routerw, NULL, N, C, E);
    memset(s->frac, 0, (size_t)E * sizeof(double));
    for (int t = 0; t < N; t++) {
        float *p = s->probs + (size_t)t * E;
        float mx = p[0];
        for (int e = 1; e < E; e++)
            mx = p[e] > mx ? p[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < E; e++) {
            p[e] = expf(p[e] - mx);
            sum += p[e];
        }
        for (int e = 0; e < E; e++)
            p[e] = (float)(p[e] / sum);
        for (int j = 0; j < K; j++) { /* the j-th most probable, ties: lower index */
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++)
                    taken |= s->choice[(size_t)t * K + i] == e;
                if (!taken && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            s->choice[(size_t)t * K + j] = best;
            s->gate[(size_t)t * K + j] = p[best];
            s->frac[best] += 1.0;
        }
    }
    for (int e = 0; e < E; e++)
        s->frac[e] /= (double)N * K;
}

msr_status_t msr_moe_forward(msr_moe_t *moe, int l, const msr_gpt_block_params_t *p, const float *x,
                             int N, float *y, double *aux_p)
{
    moe_slot_t *s = slot_of(moe, l);
    int E = moe->E, K = moe->K, C = moe->C, H = moe->H;
    msr_gpt_moe_t cfg = {E, K, moe->every, moe->F, moe->A};
    int cap = msr_moe_capacity(&cfg, N);
    int nb = row_blocks(moe);
    size_t rows = (size_t)nb * (size_t)cap;
    msr_moe_stats_t *stats = &moe->stats[(l + 1) / moe->every - 1];
    s->N = 0;
    route(moe, s, p->routerw, x, N);

    /* capacity: choice rank first, then token index (every tp rank counts
     * every expert alike; it fills the rows of its own experts only) */
    int count[MSR_GPT_MAX_EXPERTS], filled[MSR_GPT_MAX_EXPERTS];
    memset(count, 0, sizeof count);
    memset(filled, 0, sizeof filled);
    memset(moe->send, 0, rows * (size_t)C * sizeof(float));
    if (moe->counting)
        stats->tokens += N;
    for (int j = 0; j < K; j++) {
        for (int t = 0; t < N; t++) {
            size_t tj = (size_t)t * K + j;
            int e = s->choice[tj], q = row_block(moe, e);
            if (count[e] == cap) {
                s->pos[tj] = -1;
                stats->dropped += moe->counting;
                continue;
            }
            s->pos[tj] = count[e]++;
            stats->load[e] += moe->counting;
            if (q < 0)
                continue;
            filled[q] = count[e];
            memcpy(moe->send + ((size_t)q * cap + (size_t)s->pos[tj]) * C, x + (size_t)t * C,
                   (size_t)C * sizeof(float));
        }
    }

    /* dispatch, the experts (on the filled rows of each block), combine */
    msr_status_t st = exchange_counts(moe, filled, s->used);
    if (st != MSR_OK || (st = exchange(moe, moe->send, s->xin, cap, C, "moe dispatch")) != MSR_OK)
        return st;
    for (int b = 0; b < nb; b++) {
        expert_t w = expert_point(p->experts, block_expert(moe, b), C);
        size_t r0 = (size_t)b * cap;
        int n = s->used[b];
        if (n == 0)
            continue;
        msr_matmul_forward(s->fch + r0 * H, s->xin + r0 * C, w.fcw, w.fcb, n, C, H);
        msr_gelu_forward(s->fch_g + r0 * H, s->fch + r0 * H, (size_t)n * H);
        msr_matmul_forward(moe->out + r0 * C, s->fch_g + r0 * H, w.fcprojw, w.fcprojb, n, H, C);
    }
    if ((st = exchange(moe, moe->out, s->comb, cap, C, "moe combine")) != MSR_OK)
        return st;
    memset(y, 0, (size_t)N * C * sizeof(float));
    for (int t = 0; t < N; t++) {
        for (int j = 0; j < K; j++) {
            size_t tj = (size_t)t * K + j;
            int q = row_block(moe, s->choice[tj]);
            if (s->pos[tj] < 0 || q < 0)
                continue;
            const float *o = s->comb + ((size_t)q * cap + (size_t)s->pos[tj]) * C;
            float g = s->gate[tj];
            for (int c = 0; c < C; c++)
                y[(size_t)t * C + c] += g * o[c];
        }
    }

    double aux = 0.0;
    if (moe->A > 0.0) {
        for (int e = 0; e < E; e++) {
            double P = 0.0;
            for (int t = 0; t < N; t++)
                P += s->probs[(size_t)t * E + e];
            aux += s->frac[e] * (P / N);
        }
        aux *= moe->A * E;
    }
    s->N = N;
    s->cap = cap;
    *aux_p = aux;
    return MSR_OK;
}

/* Combine's backward: the gates' gradients into moe->dgate (N, K) and
 * the outputs' into moe->send (rows, C), from dy (N, C). */
static void combine_backward(msr_moe_t *moe, const moe_slot_t *s, const float *dy)
{
    int K = moe->K, C = moe->C, N = s->N, cap = s->cap;
    size_t rows = (size_t)row_blocks(moe) * (size_t)cap;
    memset(moe->send, 0, rows * (size_t)C * sizeof(float));
    for (int t = 0; t < N; t++) {
        const float *d = dy + (size_t)t * C;
        for (int j = 0; j < K; j++) {
            size_t tj = (size_t)t * K + j;
            int q = row_block(moe, s->choice[tj]);
            moe->dgate[tj] = 0.0f;
            if (s->pos[tj] < 0 || q < 0)
                continue;
            size_t row = (size_t)q * cap + (size_t)s->pos[tj];
            const float *o = s->comb + row * C;
            float *dsend = moe->send + row * C, gt = s->gate[tj], dg = 0.0f;
            for (int c = 0; c < C; c++) {
                dg += d[c] * o[c];
                dsend[c] = gt * d[c];
            }
            moe->dgate[tj] = dg;
        }
    }
}

/* The experts' backward where they ran, from moe->send's output gradients:
 * their weights' gradients into g, their input gradients added to dx
 * (N, C). */
static msr_status_t experts_backward(msr_moe_t *moe, const moe_slot_t *s,
                                     const msr_gpt_block_params_t *p,
                                     const msr_gpt_block_params_t *g, float *dx)
{
    int C = moe->C, H = moe->H, N = s->N, K = moe->K, cap = s->cap, nb = row_blocks(moe);
    size_t rows = (size_t)nb * (size_t)cap;
    msr_status_t st = exchange(moe, moe->send, moe->dout, cap, C, "moe dispatch grad");
    if (st != MSR_OK)
        return st;
    memset(moe->dfch_g, 0, rows * (size_t)H * sizeof(float));
    memset(moe->dfch, 0, rows * (size_t)H * sizeof(float));
    memset(moe->out, 0, rows * (size_t)C * sizeof(float));
    for (int b = 0; b < nb; b++) {
        int e = block_expert(moe, b);
        expert_t w = expert_point(p->experts, e, C), dw = expert_point(g->experts, e, C);
        size_t r0 = (size_t)b * cap;
        int n = s->used[b];
        if (n == 0)
            continue;
        msr_matmul_backward(moe->dfch_g + r0 * H, dw.fcprojw, dw.fcprojb, moe->dout + r0 * C,
                            s->fch_g + r0 * H, w.fcprojw, n, H, C);
        msr_gelu_backward(moe->dfch + r0 * H, s->fch + r0 * H, moe->dfch_g + r0 * H, (size_t)n * H);
        msr_matmul_backward(moe->out + r0 * C, dw.fcw, dw.fcb, moe->dfch + r0 * H, s->xin + r0 * C,
                            w.fcw, n, C, H);
    }
    if ((st = exchange(moe, moe->out, moe->send, cap, C, "moe combine grad")) != MSR_OK)
        return st;
    for (int t = 0; t < N; t++) {
        for (int j = 0; j < K; j++) {
            size_t tj = (size_t)t * K + j;
            int q = row_block(moe, s->choice[tj]);
            if (s->pos[tj] < 0 || q < 0)
                continue;
            const float *d = moe->send + ((size_t)q * cap + (size_t)s->pos[tj]) * C;
            for (int c = 0; c < C; c++)
                dx[(size_t)t * C + c] += d[c];
        }
    }
    return MSR_OK;
}

/* The router's backward from moe->dgate: the gates and the load-balancing
 * loss into the probabilities, softmax's backward into the logits (in
 * place), the router matmul into dx (N, C) and g->routerw. */
static void router_backward(msr_moe_t *moe, const moe_slot_t *s, const msr_gpt_block_params_t *p,
                            const msr_gpt_block_params_t *g, const float *x, float *dx,
                            float aux_weight)
{
    int E = moe->E, K = moe->K, C = moe->C, N = s->N;
    double daux = moe->A > 0.0 ? (double)aux_weight * moe->A * E / N : 0.0;
    for (int t = 0; t < N; t++) {
        float *dp = moe->dprobs + (size_t)t * E;
        const float *pr = s->probs + (size_t)t * E;
        for (int e = 0; e < E; e++)
            dp[e] = (float)(daux * s->frac[e]);
        for (int j = 0; j < K; j++)
            dp[s->choice[(size_t)t * K + j]] += moe->dgate[(size_t)t * K + j];
        double dot = 0.0;
        for (int e = 0; e < E; e++)
            dot += (double)pr[e] * dp[e];
        for (int e = 0; e < E; e++)
            dp[e] = pr[e] * (float)(dp[e] - dot);
    }
    /* tp: every rank computes the router alike; its input gradient joins
     * tp rank 0's dx only (the others' hold their experts' share), and its
     * weight gradient every rank's, or only rank 0's when the caller sums
     * it over tp */
    if (moe->tp_rank == 0) {
        msr_matmul_backward(dx, g->routerw, NULL, moe->dprobs, x, p->routerw, N, C, E);
    } else if (!moe->router_once) {
        memset(moe->rdx, 0, (size_t)N * C * sizeof(float));
        msr_matmul_backward(moe->rdx, g->routerw, NULL, moe->dprobs, x, p->routerw, N, C, E);
    }
}

msr_status_t msr_moe_backward(msr_moe_t *moe, int l, const msr_gpt_block_params_t *p,
                              const msr_gpt_block_params_t *g, const float *x, const float *dy,
                              float *dx, float aux_weight)
{
    moe_slot_t *s = slot_of(moe, l);
    if (s->N == 0)
        return msr_err(MSR_ERR_STATE, "moe: backward of block %d without its forward", l);
    int N = s->N, K = moe->K;
    combine_backward(moe, s, dy);
    msr_status_t st = experts_backward(moe, s, p, g, dx);
    if (st != MSR_OK)
        return st;
    /* tp: a gate's gradient came from the rank computing its expert (zero
     * on the others): the sum gives every rank all of them */
    if (moe->tp_comm != NULL) {
        uint64_t a = msr_now_ns();
        st = msr_comm_allreduce(moe->tp_comm, MSR_IN_PLACE, moe->dgate, (uint64_t)N * K,
                                MSR_DTYPE_F32, MSR_OP_SUM);
        span(moe, "moe gate grads", a);
        if (st != MSR_OK)
            return msr_err_call(st, "moe: the allreduce of the gates' gradients over tp %d",
                                moe->tp);
    }

    router_backward(moe, s, p, g, x, dx, aux_weight);
    return MSR_OK;
}
