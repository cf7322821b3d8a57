/* The reference GPT model: layout, initialisation, forward, backward. */
#include "model/gpt.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/util.h"
#include "layout/layout.h"
#include "model/block.h"
#include "model/layers.h"
#include "model/moe.h"
#include "model/rng.h"

/* Limits that keep every size product far from overflowing size_t. */
#define GPT_MAX_SEQ      16384
#define GPT_MAX_CHANNELS 16384
#define GPT_MAX_LAYERS   1024
#define GPT_MAX_VOCAB    65536
#define GPT_MAX_BATCH    65536

_Static_assert(MSR_GPT_MAX_STAGES == GPT_MAX_LAYERS, "a split has at most one stage per layer");

/* The RNG stream of parameter initialisation. */
#define GPT_INIT_STREAM 0x696e6974ULL

msr_status_t msr_gpt_config_check(const msr_gpt_config_t *cfg)
{
    if (cfg->vocab < 1 || cfg->vocab > GPT_MAX_VOCAB) {
        return msr_err(MSR_ERR_CONFIG, "vocabulary %d is not in [1, %d]", cfg->vocab,
                       GPT_MAX_VOCAB);
    }
    if (cfg->max_seq < 1 || cfg->max_seq > GPT_MAX_SEQ) {
        return msr_err(MSR_ERR_CONFIG, "sequence length %d is not in [1, %d]", cfg->max_seq,
                       GPT_MAX_SEQ);
    }
    if (cfg->layers < 1 || cfg->layers > GPT_MAX_LAYERS) {
        return msr_err(MSR_ERR_CONFIG, "layers %d is not in [1, %d]", cfg->layers, GPT_MAX_LAYERS);
    }
    if (cfg->channels < 1 || cfg->channels > GPT_MAX_CHANNELS) {
        return msr_err(MSR_ERR_CONFIG, "channels %d is not in [1, %d]", cfg->channels,
                       GPT_MAX_CHANNELS);
    }
    if (cfg->heads < 1 || cfg->heads > cfg->channels || cfg->channels % cfg->heads != 0) {
        return msr_err(MSR_ERR_CONFIG, "channels %d do not divide into %d heads", cfg->channels,
                       cfg->heads);
    }
    const msr_gpt_moe_t *m = &cfg->moe;
    if (m->experts == 0)
        return MSR_OK;
    if (m->experts < 0 || m->experts > MSR_GPT_MAX_EXPERTS) {
        return msr_err(MSR_ERR_CONFIG, "experts %d is not in [0, %d]", m->experts,
                       MSR_GPT_MAX_EXPERTS);
    }
    if (m->top_k < 1 || m->top_k > m->experts) {
        return msr_err(MSR_ERR_CONFIG, "top-k %d is not in [1, %d experts]", m->top_k, m->experts);
    }
    if (m->every < 1 || m->every > cfg->layers) {
        return msr_err(MSR_ERR_CONFIG, "moe-every %d is not in [1, %d layers]", m->every,
                       cfg->layers);
    }
    if (!(m->capacity_factor > 0.0 && m->capacity_factor <= 1e3) ||
        !(m->aux_loss >= 0.0 && m->aux_loss <= 1e3)) {
        return msr_err(MSR_ERR_CONFIG,
                       "capacity factor %g (in (0, 1000]) or aux loss %g (in [0, 1000]) out of "
                       "range",
                       m->capacity_factor, m->aux_loss);
    }
    return MSR_OK;
}

int msr_gpt_layer_is_moe(const msr_gpt_config_t *cfg, int l)
{
    return cfg->moe.experts > 0 && cfg->moe.every > 0 && (l + 1) % cfg->moe.every == 0;
}

/* The parameters of block l of the whole model. */
static size_t block_params(const msr_gpt_config_t *cfg, int l)
{
    size_t C = (size_t)cfg->channels, E = (size_t)cfg->moe.experts;
    size_t attn = 4 * C * C + 8 * C;  /* ln1, qkv, attproj, ln2 */
    if (msr_gpt_layer_is_moe(cfg, l)) /* the router; the experts are the MoE state's */
        return attn + E * C;
    return attn + 8 * C * C + 5 * C;
}

size_t msr_gpt_num_params(const msr_gpt_config_t *cfg)
{
    size_t C = (size_t)cfg->channels, n = (size_t)cfg->vocab * C + (size_t)cfg->max_seq * C;
    for (int l = 0; l < cfg->layers; l++)
        n += block_params(cfg, l);
    return n + 2 * C;
}

msr_status_t msr_gpt_part_check(const msr_gpt_config_t *cfg, const msr_gpt_part_t *part)
{
    if (msr_gpt_config_check(cfg) != MSR_OK)
        return MSR_ERR_CONFIG;
    if (part->tp < 1 || part->tp_rank < 0 || part->tp_rank >= part->tp || part->pp < 1 ||
        part->pp_rank < 0 || part->pp_rank >= part->pp || part->chunks < 1 ||
        part->chunks > MSR_GPT_MAX_CHUNKS) {
        return msr_err(
            MSR_ERR_CONFIG, "tp rank %d of %d, pp rank %d of %d or %d chunks (1..%d) out of range",
            part->tp_rank, part->tp, part->pp_rank, part->pp, part->chunks, MSR_GPT_MAX_CHUNKS);
    }
    if (cfg->heads % part->tp != 0) {
        return msr_err(MSR_ERR_CONFIG, "%d heads do not divide among tp %d ranks", cfg->heads,
                       part->tp);
    }
    if (cfg->vocab % part->tp != 0) {
        return msr_err(MSR_ERR_CONFIG, "the vocabulary of %d does not divide among tp %d ranks",
                       cfg->vocab, part->tp);
    }
    if ((int64_t)part->pp * part->chunks > cfg->layers) {
        return msr_err(
            MSR_ERR_CONFIG,
            "%d layers are fewer than the %d pipeline stages (pp %d x %d virtual stages)",
            cfg->layers, part->pp * part->chunks, part->pp, part->chunks);
    }
    if (part->stage_layers != NULL) {
        int n = part->pp * part->chunks;
        return msr_layout_split_check(cfg->layers, n, part->stage_layers, n);
    }
    return MSR_OK;
}

size_t msr_gpt_tensor_full_index(const msr_gpt_tensor_t *t, size_t i)
{
    size_t cols = (size_t)t->shape[1], row = i / cols, col = i % cols, rb = (size_t)t->row_block;
    size_t frow = (row / rb) * (size_t)t->row_stride + (size_t)t->row_offset + row % rb;
    return t->full_offset + frow * (size_t)t->full_cols + (size_t)t->col_offset + col;
}

/* ---- the tensor table ---- */

/* Initialisation of a tensor: std > 0 draws N(0, std), else the constant. */
typedef struct tensor_init {
    double std;
    float constant;
} tensor_init_t;

/* How a tensor is cut among tensor-parallel ranks. */
typedef enum tp_split {
    SPLIT_NONE, /* held whole (tp-replicated) */
    SPLIT_ROWS, /* row blocks (q, k, v: 3; fc, wte: 1), each cut in tp pieces */
    SPLIT_COLS, /* columns cut in tp pieces */
} tp_split_t;

/* A tensor of the whole model: rows x cols (cols 0: 1-D) at full_offset,
 * cut as split says (blocks row blocks for SPLIT_ROWS). */
typedef struct tensor_spec {
    const char *name;
    int rows, cols, decay;
    tp_split_t split;
    int blocks;
} tensor_spec_t;

static void add_tensor(msr_gpt_t *m, size_t *offset, int seg, const char *name,
                       const tensor_spec_t *sp, size_t full_offset)
{
    int t = m->part.tp, r = m->part.tp_rank;
    int cols = sp->cols > 0 ? sp->cols : 1;
    msr_gpt_tensor_t *x = &m->tensors[m->num_tensors++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->segment = seg;
    x->ndim = sp->cols > 0 ? 2 : 1;
    x->decay = sp->decay;
    x->tp_replicated = sp->split == SPLIT_NONE;
    x->full_offset = full_offset;
    x->full_cols = cols;
    x->row_block = sp->rows;
    x->row_stride = 0;
    x->row_offset = 0;
    x->col_offset = 0;
    x->shape[0] = sp->rows;
    x->shape[1] = cols;
    if (sp->split == SPLIT_ROWS) {
        int per_block = sp->rows / sp->blocks; /* whole rows of one block */
        x->row_block = per_block / t;
        x->row_stride = per_block;
        x->row_offset = r * x->row_block;
        x->shape[0] = sp->blocks * x->row_block;
    } else if (sp->split == SPLIT_COLS) {
        x->shape[1] = cols / t;
        x->col_offset = r * x->shape[1];
    }
    x->offset = *offset;
    x->count = (size_t)x->shape[0] * (size_t)x->shape[1];
    *offset += x->count;
}

static size_t spec_count(const tensor_spec_t *sp)
{
    return (size_t)sp->rows * (size_t)(sp->cols > 0 ? sp->cols : 1);
}

static msr_gpt_segment_t *open_segment(msr_gpt_t *m, size_t off, int layer, int group)
{
    msr_gpt_segment_t *s = &m->segments[m->num_segments++];
    s->offset = off;
    s->layer = layer;
    s->group = group;
    return s;
}

/* Fills m->tensors and m->segments in flat-buffer order (see gpt.h) for
 * m->part, and m->num_params. */
static void build_layout(msr_gpt_t *m)
{
    int V = m->cfg.vocab, C = m->cfg.channels, L = m->cfg.layers, maxT = m->cfg.max_seq;
    const msr_gpt_part_t *pt = &m->part;
    size_t off = 0, fblock0 = (size_t)V * C + (size_t)maxT * C;
    char name[24];
    m->num_tensors = 0;
    m->num_segments = 0;
    m->num_chunks = pt->chunks;
    int nv = pt->pp * pt->chunks;
    int has_embed = pt->pp_rank == 0, has_head = pt->pp_rank == pt->pp - 1;
    m->seg_embed = m->seg_lnf = -1;

    if (has_embed) {
        m->seg_embed = m->num_segments;
        msr_gpt_segment_t *s = open_segment(m, off, -1, 0);
        tensor_spec_t wte = {"wte", V, C, 1, SPLIT_ROWS, 1};
        tensor_spec_t wpe = {"wpe", maxT, C, 1, SPLIT_NONE, 1};
        add_tensor(m, &off, m->seg_embed, "wte", &wte, 0);
        add_tensor(m, &off, m->seg_embed, "wpe", &wpe, (size_t)V * C);
        s->count = off - s->offset;
    }

    const tensor_spec_t block[MSR_GPT_BLOCK_TENSORS] = {
        [MSR_GPT_LN1W] = {"ln1w", C, 0, 0, SPLIT_NONE, 1},
        [MSR_GPT_LN1B] = {"ln1b", C, 0, 0, SPLIT_NONE, 1},
        [MSR_GPT_QKVW] = {"qkvw", 3 * C, C, 1, SPLIT_ROWS, 3},
        [MSR_GPT_QKVB] = {"qkvb", 3 * C, 0, 0, SPLIT_ROWS, 3},
        [MSR_GPT_ATTPROJW] = {"attprojw", C, C, 1, SPLIT_COLS, 1},
        [MSR_GPT_ATTPROJB] = {"attprojb", C, 0, 0, SPLIT_NONE, 1},
        [MSR_GPT_LN2W] = {"ln2w", C, 0, 0, SPLIT_NONE, 1},
        [MSR_GPT_LN2B] = {"ln2b", C, 0, 0, SPLIT_NONE, 1},
        [MSR_GPT_FCW] = {"fcw", 4 * C, C, 1, SPLIT_ROWS, 1},
        [MSR_GPT_FCB] = {"fcb", 4 * C, 0, 0, SPLIT_ROWS, 1},
        [MSR_GPT_FCPROJW] = {"fcprojw", C, 4 * C, 1, SPLIT_COLS, 1},
        [MSR_GPT_FCPROJB] = {"fcprojb", C, 0, 0, SPLIT_NONE, 1},
    };
    const tensor_spec_t router = {"routerw", m->cfg.moe.experts, C, 1, SPLIT_NONE, 1};
    size_t full_of[GPT_MAX_LAYERS + 1]; /* where block l starts in the whole model */
    full_of[0] = fblock0;
    for (int l = 0; l < L; l++)
        full_of[l + 1] = full_of[l] + block_params(&m->cfg, l);
    for (int c = 0; c < pt->chunks; c++) {
        msr_layout_split_stage(L, nv, pt->stage_layers, c * pt->pp + pt->pp_rank, &m->chunk_lo[c],
                               &m->chunk_hi[c]);
        m->chunk_seg[c] = m->num_segments;
        for (int l = m->chunk_lo[c]; l < m->chunk_hi[c]; l++) {
            msr_gpt_segment_t *s = open_segment(m, off, l, c);
            size_t full = full_of[l];
            int moe = msr_gpt_layer_is_moe(&m->cfg, l);
            for (int k = 0; k < (moe ? MSR_GPT_FCW : MSR_GPT_BLOCK_TENSORS); k++) {
                snprintf(name, sizeof name, "h%d.%s", l, block[k].name);
                add_tensor(m, &off, m->num_segments - 1, name, &block[k], full);
                full += spec_count(&block[k]);
            }
            if (moe) { /* the router (the experts are the MoE state's) */
                snprintf(name, sizeof name, "h%d.routerw", l);
                add_tensor(m, &off, m->num_segments - 1, name, &router, full);
                full += spec_count(&router);
            }
            s->count = off - s->offset;
        }
    }

    if (has_head) {
        m->seg_lnf = m->num_segments;
        msr_gpt_segment_t *s = open_segment(m, off, -1, pt->chunks - 1);
        tensor_spec_t norm = {"", C, 0, 0, SPLIT_NONE, 1};
        size_t full = full_of[L];
        add_tensor(m, &off, m->seg_lnf, "lnfw", &norm, full);
        add_tensor(m, &off, m->seg_lnf, "lnfb", &norm, full + (size_t)C);
        s->count = off - s->offset;
    }
    m->num_params = off;
}

static tensor_init_t tensor_init(const msr_gpt_t *m, const msr_gpt_tensor_t *t)
{
    tensor_init_t in = {0.0, 0.0f};
    const char *kind = strrchr(t->name, '.');
    kind = kind != NULL ? kind + 1 : t->name;
    if (strcmp(kind, "wpe") == 0)
        in.std = 0.01;
    else if (strcmp(kind, "attprojw") == 0 || strcmp(kind, "fcprojw") == 0)
        in.std = 0.02 / sqrt(2.0 * m->cfg.layers);
    else if (t->ndim == 2)
        in.std = 0.02;
    else if (strcmp(kind, "ln1w") == 0 || strcmp(kind, "ln2w") == 0 || strcmp(kind, "lnfw") == 0)
        in.constant = 1.0f;
    return in;
}

void msr_gpt_init_range(const msr_gpt_t *model, uint64_t seed, size_t lo, size_t hi, float *dst)
{
    for (int k = 0; k < model->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &model->tensors[k];
        size_t a = MSR_MAX(lo, t->offset), b = MSR_MIN(hi, t->offset + t->count);
        if (a >= b)
            continue;
        tensor_init_t in = tensor_init(model, t);
        for (size_t i = a; i < b; i++) {
            uint64_t g = msr_gpt_tensor_full_index(t, i - t->offset);
            dst[i - lo] = in.std > 0.0 ? (float)(in.std * msr_rng_normal(seed, GPT_INIT_STREAM, g))
                                       : in.constant;
        }
    }
}

void msr_gpt_init_params(msr_gpt_t *model, uint64_t seed)
{
    msr_gpt_init_range(model, seed, 0, model->num_params, model->params);
    if (model->moe != NULL)
        msr_moe_init_params(model->moe, seed);
}

void msr_gpt_zero_grad(msr_gpt_t *model)
{
    if (model->grads != NULL)
        memset(model->grads, 0, model->num_params * sizeof(float));
    if (model->moe != NULL)
        msr_moe_zero_grad(model->moe);
}

void msr_gpt_segment_reset(msr_gpt_t *model, int s)
{
    size_t off = model->segments[s].offset;
    model->segments[s].params = model->params != NULL ? model->params + off : NULL;
    model->segments[s].grads = model->grads != NULL ? model->grads + off : NULL;
}

void msr_gpt_block_point_tp(const msr_gpt_config_t *cfg, int tp, float *base,
                            msr_gpt_block_params_t *p)
{
    size_t C = (size_t)cfg->channels, Cl = C / (size_t)tp, Hl = 4 * C / (size_t)tp;
    float *x = base;
    p->ln1w = x, x += C;
    p->ln1b = x, x += C;
    p->qkvw = x, x += 3 * Cl * C;
    p->qkvb = x, x += 3 * Cl;
    p->attprojw = x, x += C * Cl;
    p->attprojb = x, x += C;
    p->ln2w = x, x += C;
    p->ln2b = x, x += C;
    p->fcw = x, x += Hl * C;
    p->fcb = x, x += Hl;
    p->fcprojw = x, x += C * Hl;
    p->fcprojb = x;
}

void msr_gpt_block_point(const msr_gpt_config_t *cfg, float *base, msr_gpt_block_params_t *p)
{
    msr_gpt_block_point_tp(cfg, 1, base, p);
}

void msr_gpt_block_point_layer(const msr_gpt_config_t *cfg, int l, float *base,
                               msr_gpt_block_params_t *p)
{
    msr_gpt_block_point_tp(cfg, 1, base, p);
    p->routerw = p->experts = NULL;
    if (!msr_gpt_layer_is_moe(cfg, l))
        return;
    p->routerw = p->fcw; /* the router takes the MLP's place after ln2b */
    p->fcw = p->fcb = p->fcprojw = p->fcprojb = NULL;
}

/* ---- activations and work space ---- */

float *msr_gpt_carve(msr_gpt_carve_t *c, size_t n)
{
    size_t a = c->align > 1 ? c->align : 1;
    float *p = c->base != NULL ? c->base + c->used : NULL;
    c->used += (n + a - 1) / a * a;
    return p;
}

void msr_gpt_carve_acts(const msr_gpt_config_t *cfg, int batch, msr_gpt_carve_t *c,
                        msr_gpt_acts_t *a)
{
    /* the layout's table (layout/layout.h), which the planner counts */
    msr_layout_dims_t d = msr_layout_dims(batch, cfg->max_seq, cfg->channels, cfg->heads,
                                          cfg->vocab, 1, 0, 1, MSR_LAYOUT_RECOMPUTE_NONE);
    a->encoded = msr_gpt_carve(c, msr_layout_whole_act(&d, MSR_ACT_ENCODED));
    for (int l = 0; l < cfg->layers; l++) {
        msr_gpt_block_acts_t *b = &a->blocks[l];
        float **field[MSR_ACT_BLOCK_COUNT] = {
            [MSR_ACT_LN1] = &b->ln1,           [MSR_ACT_LN1_MEAN] = &b->ln1_mean,
            [MSR_ACT_LN1_RSTD] = &b->ln1_rstd, [MSR_ACT_QKV] = &b->qkv,
            [MSR_ACT_ATTY] = &b->atty,         [MSR_ACT_ATT] = &b->att,
            [MSR_ACT_RES2] = &b->res2,         [MSR_ACT_LN2] = &b->ln2,
            [MSR_ACT_LN2_MEAN] = &b->ln2_mean, [MSR_ACT_LN2_RSTD] = &b->ln2_rstd,
            [MSR_ACT_FCH] = &b->fch,           [MSR_ACT_FCH_GELU] = &b->fch_gelu,
            [MSR_ACT_RES3] = &b->res3,
        };
        for (int k = 0; k < MSR_ACT_BLOCK_COUNT; k++) {
            int kept;
            *field[k] = msr_gpt_carve(c, msr_layout_block_act(&d, k, &kept));
        }
    }
    a->lnf = msr_gpt_carve(c, msr_layout_whole_act(&d, MSR_ACT_WHOLE_LNF));
    a->lnf_mean = msr_gpt_carve(c, msr_layout_whole_act(&d, MSR_ACT_WHOLE_LNF_MEAN));
    a->lnf_rstd = msr_gpt_carve(c, msr_layout_whole_act(&d, MSR_ACT_WHOLE_LNF_RSTD));
    a->logits = msr_gpt_carve(c, msr_layout_whole_act(&d, MSR_ACT_LOGITS));
    a->probs = msr_gpt_carve(c, msr_layout_whole_act(&d, MSR_ACT_WHOLE_PROBS));
    a->losses = msr_gpt_carve(c, msr_layout_whole_act(&d, MSR_ACT_LOSSES));
    a->proj = msr_gpt_carve(c, msr_layout_whole_act(&d, MSR_ACT_PROJ));
}

void msr_gpt_carve_work(const msr_gpt_config_t *cfg, int batch, int datt_heads, msr_gpt_carve_t *c,
                        msr_gpt_work_t *w)
{
    /* the layout's table (layout/layout.h), which the planner counts */
    msr_layout_dims_t d = msr_layout_dims(batch, cfg->max_seq, cfg->channels, cfg->heads,
                                          cfg->vocab, 1, 0, 1, MSR_LAYOUT_RECOMPUTE_NONE);
    float **field[MSR_WORK_WHOLE_COUNT] = {
        [MSR_WORK_WHOLE_DRES] = &w->dres, [MSR_WORK_WHOLE_DLN] = &w->dln,
        [MSR_WORK_WHOLE_DQKV] = &w->dqkv, [MSR_WORK_WHOLE_DATTY] = &w->datty,
        [MSR_WORK_WHOLE_DFCH] = &w->dfch, [MSR_WORK_WHOLE_DFCH_GELU] = &w->dfch_gelu,
        [MSR_WORK_WHOLE_DATT] = &w->datt, [MSR_WORK_WHOLE_DLOGITS] = &w->dlogits,
    };
    for (int k = 0; k < MSR_WORK_WHOLE_COUNT; k++)
        *field[k] = msr_gpt_carve(c, msr_layout_whole_work(&d, k, datt_heads));
}

msr_status_t msr_gpt_create(const msr_gpt_config_t *cfg, int max_batch, msr_gpt_t **model_p)
{
    return msr_gpt_create_ex(cfg, max_batch, 0, model_p);
}

/* The activations and work space of a whole model, carved from the table
 * the CUDA model shares (msr_gpt_carve_acts), and the kept tokens. */
static msr_status_t alloc_acts(msr_gpt_t *m)
{
    int B = m->max_batch;
    size_t N = (size_t)B * (size_t)m->cfg.max_seq;
    msr_gpt_carve_t acts = {NULL, 0, 1}, work = {NULL, 0, 1};
    msr_gpt_carve_acts(&m->cfg, B, &acts, &m->acts);
    msr_gpt_carve_work(&m->cfg, B, 1, &work, &m->work);
    m->acts_count = acts.used;
    m->work_count = work.used;
    m->acts_mem = msr_calloc(m->acts_count, sizeof(float));
    m->work_mem = msr_calloc(m->work_count, sizeof(float));
    m->inputs = msr_calloc(N, sizeof(int));
    m->targets = msr_calloc(N, sizeof(int));
    if (m->acts_mem == NULL || m->work_mem == NULL || m->inputs == NULL || m->targets == NULL)
        return MSR_ERR_NO_MEMORY;
    acts = (msr_gpt_carve_t){m->acts_mem, 0, 1};
    work = (msr_gpt_carve_t){m->work_mem, 0, 1};
    msr_gpt_carve_acts(&m->cfg, B, &acts, &m->acts);
    msr_gpt_carve_work(&m->cfg, B, 1, &work, &m->work);
    return MSR_OK;
}

/* The whole model with activations for max_batch (>= 1), or a part with
 * none (max_batch 0). */
static msr_status_t create(const msr_gpt_config_t *cfg, const msr_gpt_part_t *part, int max_batch,
                           unsigned flags, msr_gpt_t **model_p)
{
    if (msr_gpt_part_check(cfg, part) != MSR_OK)
        return msr_err_prefix(MSR_ERR_CONFIG, "gpt");
    msr_gpt_t *m = msr_calloc(1, sizeof *m);
    if (m == NULL)
        goto err_no_memory;
    m->cfg = *cfg;
    m->part = *part;
    if (part->stage_layers != NULL) { /* the model's own copy */
        size_t n = (size_t)part->pp * (size_t)part->chunks;
        if ((m->stage_layers = msr_calloc(n, sizeof *m->stage_layers)) == NULL)
            goto err_free;
        memcpy(m->stage_layers, part->stage_layers, n * sizeof *m->stage_layers);
    }
    m->part.stage_layers = m->stage_layers;
    m->whole = part->tp == 1 && part->pp == 1;
    m->max_batch = max_batch;
    size_t per_block = (size_t)MSR_GPT_BLOCK_TENSORS + 1;
    m->tensors = msr_calloc(4 + per_block * (size_t)cfg->layers, sizeof *m->tensors);
    m->segments = msr_calloc((size_t)cfg->layers + 2, sizeof *m->segments);
    m->acts.blocks = msr_calloc((size_t)cfg->layers, sizeof *m->acts.blocks);
    if (m->tensors == NULL || m->segments == NULL || m->acts.blocks == NULL)
        goto err_free;
    build_layout(m);

    if (!(flags & MSR_GPT_NO_PARAMS) &&
        (m->params = msr_calloc(m->num_params, sizeof(float))) == NULL)
        goto err_free;
    if (!(flags & MSR_GPT_NO_GRADS) &&
        (m->grads = msr_calloc(m->num_params, sizeof(float))) == NULL)
        goto err_free;
    for (int s = 0; s < m->num_segments; s++)
        msr_gpt_segment_reset(m, s);
    if (max_batch == 0) {
        *model_p = m;
        return MSR_OK;
    }

    if (alloc_acts(m) != MSR_OK)
        goto err_free;
    if (cfg->moe.experts > 0) {
        msr_status_t st = msr_moe_create(cfg, max_batch * cfg->max_seq, &m->moe);
        if (st != MSR_OK) {
            msr_gpt_destroy(m);
            return st;
        }
    }
    *model_p = m;
    return MSR_OK;

err_free:
    msr_gpt_destroy(m);
err_no_memory:
    return msr_err(MSR_ERR_NO_MEMORY,
                   "gpt: out of memory for a model of %zu parameters, batch %d x %d",
                   msr_gpt_num_params(cfg), max_batch, cfg->max_seq);
}

msr_status_t msr_gpt_create_ex(const msr_gpt_config_t *cfg, int max_batch, unsigned flags,
                               msr_gpt_t **model_p)
{
    if (msr_gpt_config_check(cfg) != MSR_OK)
        return msr_err_prefix(MSR_ERR_CONFIG, "gpt");
    if (max_batch < 1 || max_batch > GPT_MAX_BATCH)
        return msr_err(MSR_ERR_CONFIG, "gpt: batch %d is not in [1, %d]", max_batch, GPT_MAX_BATCH);
    msr_gpt_part_t whole = {1, 0, 1, 0, 1};
    return create(cfg, &whole, max_batch, flags, model_p);
}

msr_status_t msr_gpt_create_part(const msr_gpt_config_t *cfg, const msr_gpt_part_t *part,
                                 unsigned flags, msr_gpt_t **model_p)
{
    return create(cfg, part, 0, flags, model_p);
}

void msr_gpt_destroy(msr_gpt_t *model)
{
    if (model == NULL)
        return;
    msr_moe_destroy(model->moe);
    msr_free(model->stage_layers);
    msr_free(model->inputs);
    msr_free(model->targets);
    msr_free(model->work_mem);
    msr_free(model->acts_mem);
    msr_free(model->grads);
    msr_free(model->params);
    msr_free(model->acts.blocks);
    msr_free(model->segments);
    msr_free(model->tensors);
    msr_free(model);
}

/* ---- hooks ---- */

static msr_status_t hook_acquire(const msr_gpt_hooks_t *h, msr_gpt_t *m, int seg, msr_gpt_pass_t p)
{
    return h != NULL && h->acquire != NULL ? h->acquire(h->arg, m, seg, p) : MSR_OK;
}

static msr_status_t hook_release(const msr_gpt_hooks_t *h, msr_gpt_t *m, int seg, msr_gpt_pass_t p)
{
    return h != NULL && h->release != NULL ? h->release(h->arg, m, seg, p) : MSR_OK;
}

static msr_status_t hook_grads_ready(const msr_gpt_hooks_t *h, msr_gpt_t *m, int seg)
{
    return h != NULL && h->grads_ready != NULL ? h->grads_ready(h->arg, m, seg) : MSR_OK;
}

static msr_status_t hook_poll(const msr_gpt_hooks_t *h, msr_gpt_t *m)
{
    return h != NULL && h->poll != NULL ? h->poll(h->arg, m) : MSR_OK;
}

/* ---- forward ---- */

/* The whole model's block (model/block.h): tp = 1, the model's work
 * space, the hooks' poll between the kernels. */
typedef struct block_poll {
    const msr_gpt_hooks_t *hooks;
    msr_gpt_t *model;
} block_poll_t;

static msr_status_t block_poll(void *arg)
{
    block_poll_t *bp = arg;
    return hook_poll(bp->hooks, bp->model);
}

static void whole_block(msr_gpt_t *m, int B, int T, const msr_block_comm_t *comm, msr_block_t *b)
{
    int C = m->cfg.channels;
    size_t N = (size_t)B * (size_t)T;
    const msr_gpt_work_t *w = &m->work;
    *b = (msr_block_t){
        .B = B,
        .T = T,
        .C = C,
        .tp = 1,
        .NHl = m->cfg.heads,
        .Cl = C,
        .Hl = 4 * C,
        .N = N,
        .Nl = N,
        .comm = comm,
        .proj = m->acts.proj,
        .dln = w->dln,
        .dqkv = w->dqkv,
        .datty = w->datty,
        .dfch = w->dfch,
        .dfch_gelu = w->dfch_gelu,
        .datt = w->datt,
    };
}

/* A MoE block's MLP (model/moe.h) as the block's (block.h): res3 = res2 +
 * moe(ln2(res2)); forward leaves its load-balancing loss in aux, backward
 * takes that loss's gradient as aux_weight. */
typedef struct moe_mlp {
    msr_gpt_t *model;
    int l, N;
    const msr_gpt_block_params_t *p, *g;
    float aux_weight;
    double aux;
} moe_mlp_t;

static msr_status_t moe_mlp_forward(void *arg, const float *in, float *out)
{
    moe_mlp_t *c = arg;
    return msr_moe_forward(c->model->moe, c->l, c->p, in, c->N, out, &c->aux);
}

static msr_status_t moe_mlp_backward(void *arg, const float *in, const float *dout, float *din)
{
    moe_mlp_t *c = arg;
    return msr_moe_backward(c->model->moe, c->l, c->p, c->g, in, dout, din, c->aux_weight);
}

/* Block l on in (B,T,C) (*aux_p += a MoE block's load-balancing loss), or
 * its backward (dres: see msr_block_backward; aux_weight: the gradient of
 * that loss). */
static msr_status_t block_pass(msr_gpt_t *model, int l, const float *in, float *dres, int B, int T,
                               const msr_gpt_hooks_t *hooks, double *aux_p, float aux_weight)
{
    block_poll_t bp = {hooks, model};
    msr_block_comm_t comm = {&bp, NULL, NULL, block_poll};
    msr_block_t b;
    whole_block(model, B, T, &comm, &b);
    const msr_gpt_segment_t *s = &model->segments[1 + l];
    int moe = msr_gpt_layer_is_moe(&model->cfg, l);
    msr_gpt_block_params_t p, g;
    moe_mlp_t c = {model, l, B * T, &p, &g, aux_weight, 0.0};
    msr_block_mlp_t mlp = {moe_mlp_forward, moe_mlp_backward, &c};
    msr_gpt_block_point_layer(&model->cfg, l, s->params, &p);
    if (moe)
        p.experts = msr_moe_block_params(model->moe, l, 0);
    if (dres == NULL) {
        msr_status_t st = msr_block_forward(&b, &p, &model->acts.blocks[l], in, moe ? &mlp : NULL);
        if (st == MSR_OK && moe)
            *aux_p += c.aux;
        return st;
    }
    msr_gpt_block_point_layer(&model->cfg, l, s->grads, &g);
    if (moe)
        g.experts = msr_moe_block_params(model->moe, l, 1);
    return msr_block_backward(&b, &p, &g, &model->acts.blocks[l], in, dres, moe ? &mlp : NULL);
}

static msr_status_t check_tokens(const int *tokens, size_t n, int V, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= V) {
            return msr_err(MSR_ERR_INVALID_ARG, "gpt: %s[%zu] = %d is not a token in [0, %d)", what,
                           i, tokens[i], V);
        }
    }
    return MSR_OK;
}

msr_status_t msr_gpt_forward(msr_gpt_t *model, const int *inputs, const int *targets, int B, int T,
                             const msr_gpt_hooks_t *hooks, double *loss_p)
{
    const msr_gpt_config_t *cfg = &model->cfg;
    int C = cfg->channels, V = cfg->vocab, L = cfg->layers;
    if (model->max_batch == 0) {
        return msr_err(MSR_ERR_STATE,
                       "gpt: forward of a part of the model (parallel/mp.h runs those)");
    }
    if (B < 1 || B > model->max_batch || T < 1 || T > cfg->max_seq) {
        return msr_err(MSR_ERR_INVALID_ARG, "gpt: batch %d x %d does not fit the model's %d x %d",
                       B, T, model->max_batch, cfg->max_seq);
    }
    int N = B * T;
    msr_status_t st = check_tokens(inputs, (size_t)N, V, "inputs");
    if (st == MSR_OK && targets != NULL)
        st = check_tokens(targets, (size_t)N, V, "targets");
    if (st != MSR_OK)
        return st;
    model->B = model->T = 0; /* no backward until this forward completes */
    msr_gpt_acts_t *acts = &model->acts;

    /* embeddings: (B,T) tokens -> (B,T,C) */
    if ((st = hook_acquire(hooks, model, 0, MSR_GPT_FORWARD)) != MSR_OK)
        return st;
    const float *wte = model->segments[0].params;   /* (V, C) */
    const float *wpe = wte + (size_t)V * (size_t)C; /* (maxT, C) */
    msr_encoder_forward(acts->encoded, inputs, wte, wpe, B, T, C);
    if ((st = hook_release(hooks, model, 0, MSR_GPT_FORWARD)) != MSR_OK)
        return st;

    /* the blocks, each reading the previous one's output */
    const float *x = acts->encoded; /* (B,T,C) */
    double aux = 0.0;               /* the MoE blocks' load-balancing losses */
    for (int l = 0; l < L; l++) {
        if ((st = hook_acquire(hooks, model, 1 + l, MSR_GPT_FORWARD)) != MSR_OK)
            return st;
        if ((st = block_pass(model, l, x, NULL, B, T, hooks, &aux, 0.0f)) != MSR_OK)
            return st;
        if ((st = hook_release(hooks, model, 1 + l, MSR_GPT_FORWARD)) != MSR_OK)
            return st;
        x = acts->blocks[l].res3;
    }

    /* final layernorm */
    if ((st = hook_acquire(hooks, model, L + 1, MSR_GPT_FORWARD)) != MSR_OK)
        return st;
    const float *lnfw = model->segments[L + 1].params; /* (C) */
    const float *lnfb = lnfw + C;                      /* (C) */
    msr_layernorm_forward(acts->lnf, acts->lnf_mean, acts->lnf_rstd, x, lnfw, lnfb, N, C);
    if ((st = hook_release(hooks, model, L + 1, MSR_GPT_FORWARD)) != MSR_OK)
        return st;

    /* the output head, tied to wte: logits (B,T,V) = lnf (B,T,C) @ wte^T */
    if ((st = hook_acquire(hooks, model, 0, MSR_GPT_FORWARD)) != MSR_OK)
        return st;
    msr_matmul_forward(acts->logits, acts->lnf, model->segments[0].params, NULL, N, C, V);
    if ((st = hook_release(hooks, model, 0, MSR_GPT_FORWARD)) != MSR_OK)
        return st;
    if (targets == NULL)
        return MSR_OK;

    msr_crossentropy_forward(acts->losses, acts->probs, acts->logits, targets, N, V);
    double sum = 0.0;
    for (int i = 0; i < N; i++)
        sum += acts->losses[i];
    memcpy(model->inputs, inputs, (size_t)N * sizeof(int));
    memcpy(model->targets, targets, (size_t)N * sizeof(int));
    model->B = B;
    model->T = T;
    *loss_p = sum / N + aux;
    return MSR_OK;
}

/* ---- backward ---- */

msr_status_t msr_gpt_backward(msr_gpt_t *model, float dloss, const msr_gpt_hooks_t *hooks)
{
    if (model->B == 0) {
        return msr_err(MSR_ERR_STATE, "gpt: backward without a forward with targets");
    }
    const msr_gpt_config_t *cfg = &model->cfg;
    int B = model->B, T = model->T, N = B * T;
    int C = cfg->channels, V = cfg->vocab, L = cfg->layers;
    size_t NC = (size_t)N * C;
    msr_gpt_acts_t *acts = &model->acts;
    msr_gpt_work_t *w = &model->work;
    msr_status_t st;

    memset(w->dlogits, 0, (size_t)N * V * sizeof(float));
    memset(w->dres, 0, NC * sizeof(float));
    memset(w->dln, 0, NC * sizeof(float));
    msr_crossentropy_backward(w->dlogits, acts->probs, model->targets, dloss, N, V);

    /* the head: dlnf (N,C) += dlogits @ wte, dwte += dlogits^T @ lnf */
    if ((st = hook_acquire(hooks, model, 0, MSR_GPT_BACKWARD)) != MSR_OK)
        return st;
    msr_matmul_backward(w->dln, model->segments[0].grads, NULL, w->dlogits, acts->lnf,
                        model->segments[0].params, N, C, V);
    if ((st = hook_release(hooks, model, 0, MSR_GPT_BACKWARD)) != MSR_OK)
        return st;

    /* final layernorm: its input is the last block's output */
    if ((st = hook_acquire(hooks, model, L + 1, MSR_GPT_BACKWARD)) != MSR_OK)
        return st;
    const float *lnfw = model->segments[L + 1].params; /* (C) */
    float *dlnfw = model->segments[L + 1].grads;       /* (C) */
    msr_layernorm_backward(w->dres, dlnfw, dlnfw + C, w->dln, acts->blocks[L - 1].res3, lnfw,
                           acts->lnf_mean, acts->lnf_rstd, N, C);
    if ((st = hook_release(hooks, model, L + 1, MSR_GPT_BACKWARD)) != MSR_OK)
        return st;
    if ((st = hook_grads_ready(hooks, model, L + 1)) != MSR_OK)
        return st;

    for (int l = L - 1; l >= 0; l--) {
        const float *in = l == 0 ? acts->encoded : acts->blocks[l - 1].res3; /* (B,T,C) */
        if ((st = hook_acquire(hooks, model, 1 + l, MSR_GPT_BACKWARD)) != MSR_OK)
            return st;
        if ((st = block_pass(model, l, in, w->dres, B, T, hooks, NULL, dloss * (float)N)) != MSR_OK)
            return st;
        if ((st = hook_release(hooks, model, 1 + l, MSR_GPT_BACKWARD)) != MSR_OK)
            return st;
        if ((st = hook_grads_ready(hooks, model, 1 + l)) != MSR_OK)
            return st;
    }

    /* embeddings: dwte and dwpe get the rows of dres */
    if ((st = hook_acquire(hooks, model, 0, MSR_GPT_BACKWARD)) != MSR_OK)
        return st;
    float *dwte = model->segments[0].grads;     /* (V, C) */
    float *dwpe = dwte + (size_t)V * (size_t)C; /* (maxT, C) */
    msr_encoder_backward(dwte, dwpe, w->dres, model->inputs, B, T, C);
    if ((st = hook_release(hooks, model, 0, MSR_GPT_BACKWARD)) != MSR_OK)
        return st;
    return hook_grads_ready(hooks, model, 0);
}
