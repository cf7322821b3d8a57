/* Mixture-of-Experts blocks' MLP: capacity, create and destroy, the work
 * space, the expert-parallel layout and the store of the experts this rank
 * computes, with their tensor table and initialisation (see moe.h; forward
 * and backward are in moe_pass.c). */
#include "model/moe_impl.h"

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

int msr_moe_capacity(const msr_gpt_moe_t *moe, int tokens)
{
    return (int)msr_layout_moe_capacity(moe->capacity_factor, (uint64_t)tokens,
                                        (uint64_t)moe->top_k, (uint64_t)moe->experts);
}

/* An expert's tensors in store order: a GPT-2 MLP's, or a Llama's SwiGLU
 * MLP's, whose w1 and w3 follow each other as the (2F, C) gate | up matrix
 * the dense Llama block's fcw is. rows 0: H (the hidden width); cols 0: C,
 * -1: H, 1: a vector. */
typedef struct expert_spec {
    const char *name;
    int rows, cols;
} expert_spec_t;

static const expert_spec_t gpt_expert[] = {
    {"fcw", 0, 0}, {"fcb", 0, 1}, {"fcprojw", -1, -1}, {"fcprojb", -1, 1}};
static const expert_spec_t glu_expert[] = {{"w1", 0, 0}, {"w3", 0, 0}, {"w2", -1, -1}};

static size_t expert_floats(int glu, size_t C, size_t H)
{
    return glu ? 3 * H * C : 2 * H * C + H + C;
}

size_t msr_moe_expert_count(const msr_gpt_config_t *cfg)
{
    int glu = cfg->arch == MSR_GPT_ARCH_LLAMA;
    size_t C = (size_t)cfg->channels;
    return expert_floats(glu, C, glu ? (size_t)cfg->ffn : 4 * C);
}

/* The floats of one of this state's experts. */
static size_t expert_size(const msr_moe_t *moe)
{
    return expert_floats(moe->glu, (size_t)moe->C, (size_t)moe->H);
}

/* Buffer p of the state's device freed (NULL: nothing). */
static void dev_free(const msr_moe_t *moe, void *p)
{
    msr_device_free(moe->dev, p);
}

/* Whether buffer w of the layout's MoE table is one of the host's index
 * tables and counts (choices, rows, shares, filled rows, the cp group's
 * choices, the load counts): the capacity's count and the communicators
 * read and write them on the host (model/kernels.h), so they are the
 * device's host memory (pinned on a GPU), not its own. */
static int work_on_host(int w)
{
    return w == MSR_MOE_WORK_CHOICE || w == MSR_MOE_WORK_POS || w == MSR_MOE_WORK_FRAC ||
           w == MSR_MOE_WORK_USED || w == MSR_MOE_WORK_GCHOICE || w == MSR_MOE_WORK_LOAD;
}

/* Buffer w of the layout's MoE table at p freed where work_alloc made it
 * (NULL: nothing). */
static void work_release(const msr_moe_t *moe, int w, void *p)
{
    if (work_on_host(w))
        msr_device_host_free(moe->dev, p);
    else
        dev_free(moe, p);
}

static void slot_free(const msr_moe_t *moe, moe_slot_t *s)
{
    void *b[] = {s->probs, s->choice, s->gate,  s->row,  s->frac,
                 s->xin,   s->fch,    s->fch_g, s->comb, s->used};
    _Static_assert(sizeof b / sizeof b[0] == MSR_MOE_WORK_SLOT_END - MSR_MOE_WORK_PROBS,
                   "a frame's buffers");
    for (int w = MSR_MOE_WORK_PROBS; w < MSR_MOE_WORK_SLOT_END; w++)
        work_release(moe, w, b[w - MSR_MOE_WORK_PROBS]);
}

/* bytes (at least 1, so that NULL always means failure) of the state's
 * device, zero (msr_device_alloc_zero: on the CPU device, pages untouched
 * until written). NULL when out of memory or the device failed (its text
 * set). */
static void *dev_zalloc(const msr_moe_t *moe, size_t bytes)
{
    void *p = NULL;
    return msr_device_alloc_zero(moe->dev, bytes > 0 ? bytes : 1, &p) == MSR_OK ? p : NULL;
}

/* The GPT-2 initialisation's stream for the experts (the flat buffers'
 * is another: an expert element's index is its own, see moe.h). */
#define MOE_INIT_STREAM 0x6578707274ULL

/* The bytes of buffer w of the layout's MoE table. */
static size_t work_size(const msr_moe_t *moe, int w)
{
    return msr_layout_moe_work(&moe->dims, w) * msr_layout_moe_work_size(w, sizeof(float));
}

/* Buffer w of the layout's MoE table (layout/layout.h: what the planner
 * counts) on the state's device, or in its host memory for the host's
 * tables (work_on_host), zeroed, its bytes counted in moe->work_bytes. */
static void *work_alloc(msr_moe_t *moe, int w)
{
    size_t bytes = work_size(moe, w);
    void *b = NULL;
    if (!work_on_host(w))
        b = dev_zalloc(moe, bytes);
    else if (msr_device_host_alloc(moe->dev, bytes > 0 ? bytes : 1, &b) == MSR_OK)
        memset(b, 0, bytes);
    else
        b = NULL;
    if (b != NULL)
        moe->work_bytes += bytes;
    return b;
}

/* Buffers [w0, w1) of the layout's MoE table into b[w0 .. w1 - 1], each
 * made by work_alloc; 0 when one is missing, and then none is kept. */
static int work_alloc_range(msr_moe_t *moe, int w0, int w1, void **b)
{
    for (int w = w0; w < w1; w++) {
        if ((b[w] = work_alloc(moe, w)) == NULL) {
            while (w-- > w0) {
                work_release(moe, w, b[w]);
                moe->work_bytes -= work_size(moe, w);
            }
            return 0;
        }
    }
    return 1;
}

/* Whether layout lay keeps block i's frames: a held block's, or under a
 * shared layout block 0's for all (when the layout holds any). */
static int keeps(const msr_moe_t *moe, const msr_moe_layout_t *lay, int i)
{
    if (!lay->shared)
        return lay->held == NULL || lay->held[i];
    int any = lay->held == NULL;
    for (int j = 0; j < moe->nslots && !any; j++)
        any = lay->held[j] != 0;
    return i == 0 && any;
}

/* The work space on the state's device: every block's load counts, the
 * frames of the blocks lay keeps (lay NULL: all), the shared buffers (the
 * cp group's choices under cp), synced. 0 when out of memory: what was
 * made is in the state, for work_free. */
static int work_make(msr_moe_t *moe, const msr_moe_layout_t *lay)
{
    void *b[MSR_MOE_WORK_ONCE_END]; /* indexed by the layout's buffer */
    for (int i = 0; i < moe->nslots; i++) {
        if ((moe->stats[i].load = work_alloc(moe, MSR_MOE_WORK_LOAD)) == NULL)
            return 0;
        for (int f = 0; f < moe->frames && (lay == NULL || keeps(moe, lay, i)); f++) {
            if (!work_alloc_range(moe, MSR_MOE_WORK_PROBS, MSR_MOE_WORK_SLOT_END, b))
                return 0;
            moe->slots[i * moe->frames + f] = (moe_slot_t){.probs = b[MSR_MOE_WORK_PROBS],
                                                           .choice = b[MSR_MOE_WORK_CHOICE],
                                                           .gate = b[MSR_MOE_WORK_GATE],
                                                           .row = b[MSR_MOE_WORK_POS],
                                                           .frac = b[MSR_MOE_WORK_FRAC],
                                                           .xin = b[MSR_MOE_WORK_XIN],
                                                           .fch = b[MSR_MOE_WORK_FCH],
                                                           .fch_g = b[MSR_MOE_WORK_FCH_G],
                                                           .comb = b[MSR_MOE_WORK_COMB],
                                                           .used = b[MSR_MOE_WORK_USED]};
        }
    }
    if (!work_alloc_range(moe, MSR_MOE_WORK_SEND, MSR_MOE_WORK_GCHOICE, b))
        return 0;
    moe->send = b[MSR_MOE_WORK_SEND];
    moe->out = b[MSR_MOE_WORK_OUT];
    moe->dout = b[MSR_MOE_WORK_DOUT];
    moe->dfch = b[MSR_MOE_WORK_DFCH];
    moe->dfch_g = b[MSR_MOE_WORK_DFCH_G];
    moe->dgate = b[MSR_MOE_WORK_DGATE];
    moe->dprobs = b[MSR_MOE_WORK_DPROBS];
    if (moe->cp > 1 && (moe->gchoice = work_alloc(moe, MSR_MOE_WORK_GCHOICE)) == NULL)
        return 0;
    return msr_device_stream_sync(moe->dev, NULL) == MSR_OK;
}

/* Frees the whole work space (NULL pointers after). */
static void work_free(msr_moe_t *moe)
{
    for (int i = 0; i < moe->nslots * moe->frames && moe->slots != NULL; i++) {
        slot_free(moe, &moe->slots[i]);
        memset(&moe->slots[i], 0, sizeof *moe->slots);
    }
    for (int i = 0; i < moe->nslots && moe->stats != NULL; i++) {
        work_release(moe, MSR_MOE_WORK_LOAD, moe->stats[i].load);
        moe->stats[i].load = NULL;
    }
    dev_free(moe, moe->send);
    dev_free(moe, moe->out);
    dev_free(moe, moe->dout);
    dev_free(moe, moe->dfch);
    dev_free(moe, moe->dfch_g);
    dev_free(moe, moe->dgate);
    dev_free(moe, moe->dprobs);
    work_release(moe, MSR_MOE_WORK_GCHOICE, moe->gchoice);
    dev_free(moe, moe->rdx);
    moe->send = moe->out = moe->dout = moe->dfch = moe->dfch_g = moe->dgate = NULL;
    moe->dprobs = moe->rdx = NULL;
    moe->gchoice = NULL;
    moe->work_bytes = 0;
}

static void store_free(msr_moe_t *moe)
{
    dev_free(moe, moe->params);
    dev_free(moe, moe->grads);
    msr_free(moe->tensors);
    moe->params = moe->grads = NULL;
    moe->tensors = NULL;
    moe->count = 0;
    moe->num_tensors = 0;
    for (int i = 0; i < moe->nslots; i++)
        moe->bparams[i] = moe->bgrads[i] = NULL;
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
    const expert_spec_t *spec = moe->glu ? glu_expert : gpt_expert;
    int C = moe->C, H = moe->H, El = moe->El, nt = moe->glu ? 3 : 4;
    store_free(moe);
    moe->count = (size_t)moe->nheld * (size_t)El * expert_size(moe);
    if (!moe->external) { /* the experts' parameters and gradients: the device's */
        moe->params = dev_zalloc(moe, moe->count * sizeof(float));
        moe->grads = dev_zalloc(moe, moe->count * sizeof(float));
        if (msr_device_stream_sync(moe->dev, NULL) != MSR_OK)
            store_free(moe); /* the tensor table's check below reports it */
    }
    moe->tensors =
        msr_calloc((size_t)moe->nheld * (size_t)El * (size_t)nt + 1, sizeof *moe->tensors);
    if ((!moe->external && (moe->params == NULL || moe->grads == NULL)) || moe->tensors == NULL) {
        store_free(moe);
        return msr_err(MSR_ERR_NO_MEMORY, "moe: out of memory for %d experts of %d blocks", El,
                       moe->nheld);
    }
    size_t per = (size_t)El * expert_size(moe);
    for (int i = 0; i < moe->nheld && !moe->external; i++) {
        moe->bparams[i] = moe->params + (size_t)i * per;
        moe->bgrads[i] = moe->grads + (size_t)i * per;
    }
    size_t off = 0;
    for (int i = 0; i < moe->nheld; i++) {
        for (int le = 0; le < El; le++) {
            size_t full = msr_moe_global_lo(moe, i) + (size_t)le * expert_size(moe);
            for (int k = 0; k < nt; k++) {
                msr_gpt_tensor_t *t = &moe->tensors[moe->num_tensors++];
                int rows = spec[k].rows == 0 ? H : C;
                int cols = spec[k].cols == 0 ? C : spec[k].cols < 0 ? H : 1;
                snprintf(t->name, sizeof t->name, "h%d.e%d.%s", (moe->held[i] + 1) * moe->every - 1,
                         first_expert(moe) + le, spec[k].name);
                t->segment = -1;
                t->ndim = cols > 1 ? 2 : 1;
                t->shape[0] = rows;
                t->shape[1] = cols;
                t->offset = off;
                t->count = (size_t)rows * (size_t)cols;
                t->decay = t->ndim == 2;
                t->full_offset = full;
                t->full_cols = cols;
                t->row_block = rows;
                t->tp_copies = 1; /* an expert is not split or replicated over tp */
                t->tp_first = 1;
                off += t->count;
                full += t->count;
            }
        }
    }
    return MSR_OK;
}

size_t msr_moe_global_lo(const msr_moe_t *moe, int k)
{
    return ((size_t)moe->held[k] * (size_t)moe->E + (size_t)first_expert(moe)) * expert_size(moe);
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
           msr_moe_expert_count(cfg);
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
    if (k < 0)
        return NULL;
    return grads ? moe->bgrads[k] : moe->bparams[k];
}

msr_status_t msr_moe_store_external(msr_moe_t *moe)
{
    moe->external = 1;
    return store_alloc(moe);
}

void msr_moe_set_block(msr_moe_t *moe, int k, float *params, float *grads)
{
    moe->bparams[k] = params;
    moe->bgrads[k] = grads;
}

void msr_moe_init_range(const msr_moe_t *moe, uint64_t seed, size_t lo, size_t n, float *dst)
{
    for (int k = 0; k < moe->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &moe->tensors[k];
        size_t a = MSR_MAX(lo, t->offset), e = MSR_MIN(lo + n, t->offset + t->count);
        if (a >= e)
            continue;
        const char *kind = strrchr(t->name, '.') + 1;
        int proj = strcmp(kind, "fcprojw") == 0 || strcmp(kind, "w2") == 0;
        double std = proj ? 0.02 / sqrt(2.0 * moe->L) : t->ndim == 2 ? 0.02 : 0.0;
        for (size_t i = a; i < e; i++) {
            uint64_t g = t->full_offset + (i - t->offset);
            dst[i - lo] =
                std > 0.0 ? (float)(std * msr_rng_normal(seed, MOE_INIT_STREAM, g)) : 0.0f;
        }
    }
}

void msr_moe_init_params(msr_moe_t *moe, uint64_t seed)
{
    if (moe->params != NULL)
        msr_moe_init_range(moe, seed, 0, moe->count, moe->params);
}

void msr_moe_zero_grad(msr_moe_t *moe)
{
    /* a device's failure here surfaces again at the forward's next sync */
    if (moe->grads != NULL &&
        msr_device_memset(moe->dev, moe->grads, 0, moe->count * sizeof(float), NULL) == MSR_OK)
        (void)msr_device_stream_sync(moe->dev, NULL);
}

const msr_device_t *msr_moe_device(const msr_moe_t *moe)
{
    return moe->dev;
}

void msr_moe_set_products(msr_moe_t *moe, msr_products_t *prod)
{
    moe->prod = prod;
}

void msr_moe_set_kernels(msr_moe_t *moe, const struct msr_kernels *k)
{
    moe->kernels = k;
}

void msr_moe_destroy(msr_moe_t *moe)
{
    if (moe == NULL)
        return;
    if (moe->bparams != NULL && moe->bgrads != NULL)
        store_free(moe);
    else
        msr_free(moe->tensors);
    msr_free(moe->bparams);
    msr_free(moe->bgrads);
    work_free(moe);
    msr_free(moe->slots);
    msr_free(moe->stats);
    msr_free(moe->store_of);
    msr_free(moe->held);
    msr_free(moe);
}

msr_status_t msr_moe_create(const msr_gpt_config_t *cfg, int max_tokens, msr_moe_t **moe_p)
{
    return msr_moe_create_frames(cfg, max_tokens, 1, moe_p);
}

msr_status_t msr_moe_create_frames(const msr_gpt_config_t *cfg, int max_tokens, int frames,
                                   msr_moe_t **moe_p)
{
    return msr_moe_create_cp(cfg, max_tokens, frames, 1, moe_p);
}

msr_status_t msr_moe_create_cp(const msr_gpt_config_t *cfg, int max_tokens, int frames, int cp,
                               msr_moe_t **moe_p)
{
    const msr_gpt_moe_t *m = &cfg->moe;
    if (m->experts < 1 || max_tokens < 1 || frames < 1 || cp < 1) {
        return msr_err(MSR_ERR_CONFIG,
                       "moe: %d experts, %d tokens, %d frames, cp %d: a MoE model needs all four",
                       m->experts, max_tokens, frames, cp);
    }
    msr_moe_t *moe = msr_calloc(1, sizeof *moe);
    if (moe == NULL)
        goto err_no_memory;
    moe->E = m->experts;
    moe->K = m->top_k;
    moe->C = cfg->channels;
    moe->glu = cfg->arch == MSR_GPT_ARCH_LLAMA;
    moe->H = moe->glu ? cfg->ffn : 4 * cfg->channels;
    moe->HF = moe->glu ? 2 * moe->H : moe->H;
    moe->every = m->every;
    moe->L = cfg->layers;
    moe->F = m->capacity_factor;
    moe->A = m->aux_loss;
    moe->ep = moe->tp = 1;
    moe->cp = cp;
    moe->El = moe->E;
    moe->frames = frames;
    moe->counting = 1;
    moe->dev = msr_device_cpu();
    moe->max_tokens = max_tokens;
    moe->dims = msr_layout_moe_dims_cp((uint64_t)max_tokens, (uint64_t)cp, (uint64_t)m->experts,
                                       (uint64_t)m->top_k, m->capacity_factor, (uint64_t)moe->C,
                                       (uint64_t)moe->HF);
    moe->max_cap = (int)moe->dims.cap;
    moe->nslots = cfg->layers / m->every;
    moe->slots = msr_calloc((size_t)moe->nslots * (size_t)frames, sizeof *moe->slots);
    moe->stats = msr_calloc((size_t)moe->nslots, sizeof *moe->stats);
    moe->store_of = msr_calloc((size_t)moe->nslots, sizeof *moe->store_of);
    moe->held = msr_calloc((size_t)moe->nslots, sizeof *moe->held);
    moe->bparams = msr_calloc((size_t)moe->nslots, sizeof *moe->bparams);
    moe->bgrads = msr_calloc((size_t)moe->nslots, sizeof *moe->bgrads);
    if (moe->slots == NULL || moe->stats == NULL || moe->store_of == NULL || moe->held == NULL ||
        moe->bparams == NULL || moe->bgrads == NULL)
        goto err_free;
    for (int i = 0; i < moe->nslots; i++)
        moe->store_of[i] = moe->held[i] = i;
    moe->nheld = moe->nslots;
    if (!work_make(moe, NULL))
        goto err_free;
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
    msr_moe_layout_t lay = {comm, NULL, NULL, 0, NULL, 0};
    return msr_moe_set_layout(moe, &lay);
}

/* The context-parallel side of a layout: the group's size must be the
 * one the buffers were made for, and its positions two equal chunks. */
static msr_status_t set_cp(msr_moe_t *moe, const msr_moe_layout_t *lay)
{
    int cp = lay->cp_comm != NULL ? msr_comm_size(lay->cp_comm) : 1;
    if (cp != moe->cp) {
        return msr_err(MSR_ERR_CONFIG, "moe: a cp group of %d ranks for a state made for cp %d", cp,
                       moe->cp);
    }
    if (cp > 1 && (lay->cp_seq < 2 || lay->cp_seq % 2 != 0)) {
        return msr_err(MSR_ERR_CONFIG,
                       "moe: cp %d with %d positions a sequence on a rank (two equal chunks)", cp,
                       lay->cp_seq);
    }
    moe->cp_comm = cp > 1 ? lay->cp_comm : NULL;
    moe->cp_rank = cp > 1 ? msr_comm_rank(lay->cp_comm) : 0;
    moe->cp_seq = cp > 1 ? lay->cp_seq : 0;
    return MSR_OK;
}

/* The state's buffers made anew on the layout's device when it is another
 * (before any forward: nothing is kept), the frames of the blocks the
 * layout leaves out not made. */
static msr_status_t set_device(msr_moe_t *moe, const msr_moe_layout_t *lay)
{
    const msr_device_t *dev = lay->device != NULL ? lay->device : msr_device_cpu();
    if (dev == moe->dev)
        return MSR_OK;
    if (!msr_device_is_host(dev)) {
        return msr_err(MSR_ERR_UNSUPPORTED,
                       "moe: device %s: the experts' kernels run on the CPU, which cannot reach "
                       "its memory",
                       msr_device_name(dev));
    }
    store_free(moe);
    work_free(moe);
    moe->dev = dev;
    if (!work_make(moe, lay)) {
        return msr_err(MSR_ERR_NO_MEMORY, "moe: out of memory for the work space on device %s",
                       msr_device_name(dev));
    }
    return MSR_OK;
}

msr_status_t msr_moe_set_layout(msr_moe_t *moe, const msr_moe_layout_t *lay)
{
    int ep = lay->ep_comm != NULL ? msr_comm_size(lay->ep_comm) : 1;
    int tp = lay->tp_comm != NULL ? msr_comm_size(lay->tp_comm) : 1;
    if (moe->E % (ep * tp) != 0) {
        return msr_err(MSR_ERR_CONFIG, "moe: %d experts do not divide among ep %d x tp %d ranks",
                       moe->E, ep, tp);
    }
    msr_status_t st = set_cp(moe, lay);
    if (st != MSR_OK)
        return st;
    for (int i = 0; i < moe->nslots; i++) {
        if (keeps(moe, lay, i) && moe->slots[i * moe->frames].probs == NULL) {
            return msr_err(MSR_ERR_CONFIG, "moe: block %d's work space went with an earlier layout",
                           i);
        }
    }
    if ((st = set_device(moe, lay)) != MSR_OK)
        return st;
    moe->shared = lay->shared != 0;
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
    moe->nheld = 0;
    for (int i = 0; i < moe->nslots; i++) {
        moe->store_of[i] = -1;
        if (lay->held == NULL || lay->held[i]) {
            moe->store_of[i] = moe->nheld;
            moe->held[moe->nheld++] = i;
        }
        if (keeps(moe, lay, i))
            continue;
        /* another stage's block, or every block's in block 0's: its
         * frames are never used here */
        for (int f = 0; f < moe->frames; f++) {
            for (int w = MSR_MOE_WORK_PROBS; w < MSR_MOE_WORK_SLOT_END; w++)
                moe->work_bytes -=
                    moe->slots[i * moe->frames + f].probs != NULL ? work_size(moe, w) : 0;
            slot_free(moe, &moe->slots[i * moe->frames + f]);
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

void msr_moe_trace(const msr_moe_t *moe, const char *what, uint64_t start_ns, uint64_t end_ns)
{
    if (moe->span != NULL)
        moe->span(moe->span_arg, what, start_ns, end_ns);
}

size_t msr_moe_work_bytes(const msr_moe_t *moe)
{
    return moe->work_bytes;
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
