/* The GPT's tensor and segment tables (see gpt.h): the flat buffers'
 * layout for a part of the model, parameter initialisation, the blocks'
 * views of the flat buffers, and the carving of activations and work
 * space from the layout's table. */
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
#include "model/gpt_impl.h"

/* The RNG stream of parameter initialisation. */
#define GPT_INIT_STREAM 0x696e6974ULL

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
    SPLIT_KV,   /* a Llama's wk, wv: blocks kv heads of rows, split or replicated */
} tp_split_t;

/* A tensor of the whole model: rows x cols (cols 0: 1-D) at full_offset,
 * cut as split says (blocks row blocks for SPLIT_ROWS, kv heads for
 * SPLIT_KV). */
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
    x->tp_copies = x->tp_replicated ? t : 1;
    x->tp_first = !x->tp_replicated || r == 0;
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
    } else if (sp->split == SPLIT_KV && sp->blocks < t) {
        /* one head of rows per rank, rank r holding kv head r / copies */
        x->tp_copies = t / sp->blocks;
        x->tp_first = r % x->tp_copies == 0;
        x->row_block = sp->rows / sp->blocks;
        x->row_stride = sp->rows;
        x->row_offset = r / x->tp_copies * x->row_block;
        x->shape[0] = x->row_block;
    } else if (sp->split == SPLIT_KV) { /* whole heads' rows, cut in tp pieces */
        x->row_block = sp->rows / t;
        x->row_stride = sp->rows;
        x->row_offset = r * x->row_block;
        x->shape[0] = x->row_block;
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

/* A Llama's table (gpt.h) for m->part: the first virtual stage holds wte,
 * each chunk its blocks, the last stage lnfw and the untied lm_head; full
 * offsets are the whole model's. Tensor parallel: wq, wk, wv by heads
 * (rows; with fewer kv heads than ranks each rank holds its query heads'
 * kv head, replicated: msr_gpt_part_check, SPLIT_KV), w1 and w3 by
 * rows, wo and w2 by columns, wte and lm_head by vocabulary rows; the
 * norms whole. */
static void llama_layout(msr_gpt_t *m)
{
    int V = m->cfg.vocab, C = m->cfg.channels, L = m->cfg.layers, F = m->cfg.ffn;
    int KVH = m->cfg.kv_heads, KVC = KVH * (C / m->cfg.heads);
    const msr_gpt_part_t *pt = &m->part;
    int nv = pt->pp * pt->chunks;
    size_t off = 0, full_of[GPT_MAX_LAYERS + 1];
    char name[24];
    msr_gpt_segment_t *s;
    full_of[0] = (size_t)V * C;
    for (int l = 0; l < L; l++)
        full_of[l + 1] = full_of[l] + msr_gpt_block_params(&m->cfg, l);
    if (pt->pp_rank == 0) {
        m->seg_embed = m->num_segments;
        s = open_segment(m, off, -1, 0);
        tensor_spec_t wte = {"wte", V, C, 1, SPLIT_ROWS, 1};
        add_tensor(m, &off, m->seg_embed, "wte", &wte, 0);
        s->count = off - s->offset;
    }
    const tensor_spec_t block[] = {
        {"ln1w", C, 0, 0, SPLIT_NONE, 1}, {"wq", C, C, 1, SPLIT_ROWS, 1},
        {"wk", KVC, C, 1, SPLIT_KV, KVH}, {"wv", KVC, C, 1, SPLIT_KV, KVH},
        {"wo", C, C, 1, SPLIT_COLS, 1},   {"ln2w", C, 0, 0, SPLIT_NONE, 1},
        {"w1", F, C, 1, SPLIT_ROWS, 1},   {"w3", F, C, 1, SPLIT_ROWS, 1},
        {"w2", C, F, 1, SPLIT_COLS, 1},
    };
    /* the experts of a MoE block are the MoE state's */
    const tensor_spec_t router = {"routerw", m->cfg.moe.experts, C, 1, SPLIT_NONE, 1};
    for (int c = 0; c < pt->chunks; c++) {
        msr_layout_split_stage(L, nv, pt->stage_layers, c * pt->pp + pt->pp_rank, &m->chunk_lo[c],
                               &m->chunk_hi[c]);
        m->chunk_seg[c] = m->num_segments;
        for (int l = m->chunk_lo[c]; l < m->chunk_hi[c]; l++) {
            s = open_segment(m, off, l, c);
            size_t full = full_of[l];
            int moe = msr_gpt_layer_is_moe(&m->cfg, l);
            /* a MoE block: ln1w .. ln2w, then its router */
            size_t n = moe ? 6 : MSR_ARRAY_SIZE(block);
            for (size_t k = 0; k <= n; k++) {
                const tensor_spec_t *sp = k < n ? &block[k] : moe ? &router : NULL;
                if (sp == NULL)
                    break;
                snprintf(name, sizeof name, "h%d.%s", l, sp->name);
                add_tensor(m, &off, m->num_segments - 1, name, sp, full);
                full += spec_count(sp);
            }
            s->count = off - s->offset;
        }
    }
    if (pt->pp_rank == pt->pp - 1) {
        m->seg_lnf = m->num_segments;
        s = open_segment(m, off, -1, pt->chunks - 1);
        tensor_spec_t norm = {"", C, 0, 0, SPLIT_NONE, 1}, head = {"", V, C, 1, SPLIT_ROWS, 1};
        add_tensor(m, &off, m->seg_lnf, "lnfw", &norm, full_of[L]);
        add_tensor(m, &off, m->seg_lnf, "lm_head", &head, full_of[L] + (size_t)C);
        s->count = off - s->offset;
    }
    m->num_params = off;
}

/* Fills m->tensors and m->segments in flat-buffer order (see gpt.h) for
 * m->part, and m->num_params. */
void msr_gpt_build_layout(msr_gpt_t *m)
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

    if (m->cfg.arch == MSR_GPT_ARCH_LLAMA) {
        llama_layout(m);
        return;
    }
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
        full_of[l + 1] = full_of[l] + msr_gpt_block_params(&m->cfg, l);
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
    else if (strcmp(kind, "attprojw") == 0 || strcmp(kind, "fcprojw") == 0 ||
             strcmp(kind, "wo") == 0 || strcmp(kind, "w2") == 0)
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

/* A Llama block's pointers (gpt.h) on a tp-way rank: qkvw covers wq, wk
 * and wv (C/tp + 2 KVCl rows, KVCl the rank's kv heads' rows), fcw w1 and w3 (2 F/tp rows),
 * attprojw (C, C/tp), fcprojw (C, F/tp). */
static void llama_point(const msr_gpt_config_t *cfg, int tp, float *base, msr_gpt_block_params_t *p)
{
    size_t C = (size_t)cfg->channels, F = (size_t)cfg->ffn / (size_t)tp;
    size_t KVC = (size_t)msr_gpt_kv_heads_local(cfg, tp) * (C / (size_t)cfg->heads);
    size_t Cl = C / (size_t)tp;
    float *x = base;
    *p = (msr_gpt_block_params_t){0};
    p->ln1w = x, x += C;
    p->qkvw = x, x += (Cl + 2 * KVC) * C;
    p->attprojw = x, x += C * Cl;
    p->ln2w = x, x += C;
    p->fcw = x, x += 2 * F * C;
    p->fcprojw = x;
}

void msr_gpt_block_point_tp(const msr_gpt_config_t *cfg, int tp, float *base,
                            msr_gpt_block_params_t *p)
{
    if (cfg->arch == MSR_GPT_ARCH_LLAMA) {
        llama_point(cfg, tp, base, p);
        return;
    }
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

/* The size of piece k: the layout's table's (GPT's) n, but for a Llama's
 * MLP pieces, whose width follows ffn: k == fch (the gate and up
 * projections, N x 2F) and k == fch_act (silu(gate) * up, N x F). Every
 * other piece of a Llama fits in the GPT's (qkv: C + 2 KVC <= 3C). The
 * planner counts the same sizes through msr_layout_dims_t (Hl, glu). */
static size_t llama_size(const msr_gpt_config_t *cfg, int batch, int k, int fch, int fch_act,
                         size_t n)
{
    if (cfg->arch != MSR_GPT_ARCH_LLAMA || (k != fch && k != fch_act))
        return n;
    size_t N = (size_t)batch * (size_t)cfg->max_seq, F = (size_t)cfg->ffn;
    return k == fch ? N * 2 * F : N * F;
}

void msr_gpt_carve_acts(const msr_gpt_config_t *cfg, int batch, int head_chunk, msr_gpt_carve_t *c,
                        msr_gpt_acts_t *a)
{
    /* the layout's table (layout/layout.h), which the planner counts */
    msr_layout_dims_t d = msr_layout_dims(batch, cfg->max_seq, cfg->channels, cfg->heads,
                                          cfg->vocab, 1, 0, 1, MSR_LAYOUT_RECOMPUTE_NONE);
    msr_layout_head_chunk(&d, head_chunk);
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
            *field[k] = msr_gpt_carve(c, llama_size(cfg, batch, k, MSR_ACT_FCH, MSR_ACT_FCH_GELU,
                                                    msr_layout_block_act(&d, k, &kept)));
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

void msr_gpt_carve_work(const msr_gpt_config_t *cfg, int batch, int head_chunk, int datt_heads,
                        msr_gpt_carve_t *c, msr_gpt_work_t *w)
{
    /* the layout's table (layout/layout.h), which the planner counts */
    msr_layout_dims_t d = msr_layout_dims(batch, cfg->max_seq, cfg->channels, cfg->heads,
                                          cfg->vocab, 1, 0, 1, MSR_LAYOUT_RECOMPUTE_NONE);
    msr_layout_head_chunk(&d, head_chunk);
    float **field[MSR_WORK_WHOLE_COUNT] = {
        [MSR_WORK_WHOLE_DRES] = &w->dres, [MSR_WORK_WHOLE_DLN] = &w->dln,
        [MSR_WORK_WHOLE_DQKV] = &w->dqkv, [MSR_WORK_WHOLE_DATTY] = &w->datty,
        [MSR_WORK_WHOLE_DFCH] = &w->dfch, [MSR_WORK_WHOLE_DFCH_GELU] = &w->dfch_gelu,
        [MSR_WORK_WHOLE_DATT] = &w->datt, [MSR_WORK_WHOLE_DLOGITS] = &w->dlogits,
    };
    for (int k = 0; k < MSR_WORK_WHOLE_COUNT; k++)
        *field[k] = msr_gpt_carve(c, llama_size(cfg, batch, k, MSR_WORK_WHOLE_DFCH,
                                                MSR_WORK_WHOLE_DFCH_GELU,
                                                msr_layout_whole_work(&d, k, datt_heads)));
}
