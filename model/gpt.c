/* The reference GPT model: its configuration's checks and sizes, create
 * and destroy (see gpt.h; the tensor table and initialisation are in
 * gpt_tensors.c, forward and backward in gpt_pass.c). */
#include "model/gpt_impl.h"

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
#include "model/kernels.h"
#include "model/layers.h"
#include "model/moe.h"
#include "model/rng.h"

/* A Llama's own sizes (gpt.h). */
static msr_status_t llama_check(const msr_gpt_config_t *cfg)
{
    if (cfg->arch != MSR_GPT_ARCH_LLAMA)
        return msr_err(MSR_ERR_CONFIG, "architecture %d is not gpt (0) or llama (1)", cfg->arch);
    if (cfg->ffn < 1 || cfg->ffn > GPT_MAX_FFN) {
        return msr_err(MSR_ERR_CONFIG, "llama: ffn %d is not in [1, %d]", cfg->ffn, GPT_MAX_FFN);
    }
    if (cfg->kv_heads < 1 || cfg->kv_heads > cfg->heads || cfg->heads % cfg->kv_heads != 0) {
        return msr_err(MSR_ERR_CONFIG, "llama: %d kv heads do not divide the %d heads",
                       cfg->kv_heads, cfg->heads);
    }
    if ((cfg->channels / cfg->heads) % 2 != 0) {
        return msr_err(MSR_ERR_CONFIG,
                       "llama: the head width %d (channels %d / heads %d) is odd: rotary "
                       "positions turn pairs",
                       cfg->channels / cfg->heads, cfg->channels, cfg->heads);
    }
    if (!(cfg->rope_theta > 1.0 && cfg->rope_theta <= 1e12)) {
        return msr_err(MSR_ERR_CONFIG, "llama: rope theta %g is not in (1, 1e12]", cfg->rope_theta);
    }
    return MSR_OK;
}

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
    if (cfg->arch != MSR_GPT_ARCH_GPT && llama_check(cfg) != MSR_OK)
        return MSR_ERR_CONFIG;
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
size_t msr_gpt_block_params(const msr_gpt_config_t *cfg, int l)
{
    size_t C = (size_t)cfg->channels, E = (size_t)cfg->moe.experts;
    if (cfg->arch == MSR_GPT_ARCH_LLAMA) { /* ln1w, wq, wk, wv, wo, ln2w, w1, w3, w2 */
        size_t KVC = (size_t)cfg->kv_heads * (C / (size_t)cfg->heads), F = (size_t)cfg->ffn;
        size_t mlp = msr_gpt_layer_is_moe(cfg, l) ? E * C : 3 * F * C; /* or the router */
        return 2 * C * C + 2 * KVC * C + 2 * C + mlp;
    }
    size_t attn = 4 * C * C + 8 * C;  /* ln1, qkv, attproj, ln2 */
    if (msr_gpt_layer_is_moe(cfg, l)) /* the router; the experts are the MoE state's */
        return attn + E * C;
    return attn + 8 * C * C + 5 * C;
}

int msr_gpt_kv_heads_local(const msr_gpt_config_t *cfg, int tp)
{
    return cfg->kv_heads >= tp ? cfg->kv_heads / tp : 1;
}

size_t msr_gpt_num_params(const msr_gpt_config_t *cfg)
{
    size_t C = (size_t)cfg->channels, n = (size_t)cfg->vocab * C + (size_t)cfg->max_seq * C;
    if (cfg->arch == MSR_GPT_ARCH_LLAMA) /* wte; lnfw and the untied head */
        n = (size_t)cfg->vocab * C + C + (size_t)cfg->vocab * C;
    else
        n += 2 * C;
    for (int l = 0; l < cfg->layers; l++)
        n += msr_gpt_block_params(cfg, l);
    return n;
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
    if (cfg->arch == MSR_GPT_ARCH_LLAMA && cfg->ffn % part->tp != 0) {
        return msr_err(MSR_ERR_CONFIG, "llama: ffn %d does not divide among tp %d ranks", cfg->ffn,
                       part->tp);
    }
    if (cfg->arch == MSR_GPT_ARCH_LLAMA && cfg->kv_heads % part->tp != 0 &&
        part->tp % cfg->kv_heads != 0) {
        return msr_err(MSR_ERR_CONFIG,
                       "llama: %d kv heads neither divide among tp %d ranks nor divide tp (to be "
                       "replicated over tp / kv heads ranks each)",
                       cfg->kv_heads, part->tp);
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

msr_status_t msr_gpt_create(const msr_gpt_config_t *cfg, int max_batch, msr_gpt_t **model_p)
{
    return msr_gpt_create_ex(cfg, max_batch, 0, model_p);
}

/* n elements of size bytes for one of the model's buffers, zeroed: from
 * its device, or the heap (m->dev NULL). NULL when out of memory. */
static void *buf_alloc(const msr_gpt_t *m, size_t n, size_t size)
{
    if (m->dev == NULL)
        return msr_calloc(n, size);
    void *p = NULL;
    size_t bytes = n * size;
    return msr_device_alloc_zero(m->dev, bytes > 0 ? bytes : 1, &p) == MSR_OK ? p : NULL;
}

static void buf_free(const msr_gpt_t *m, void *p)
{
    if (m->dev == NULL)
        msr_free(p);
    else
        msr_device_free(m->dev, p);
}

/* The activations and work space of a whole model, carved from the table
 * the CUDA model shares (msr_gpt_carve_acts), and the kept tokens (the
 * host's). */
static msr_status_t alloc_acts(msr_gpt_t *m)
{
    int B = m->max_batch;
    size_t N = (size_t)B * (size_t)m->cfg.max_seq;
    msr_gpt_carve_t acts = {NULL, 0, 1}, work = {NULL, 0, 1};
    msr_gpt_carve_acts(&m->cfg, B, m->head_chunk, &acts, &m->acts);
    msr_gpt_carve_work(&m->cfg, B, m->head_chunk, 1, &work, &m->work);
    m->acts_count = acts.used;
    m->work_count = work.used;
    m->acts_mem = buf_alloc(m, m->acts_count, sizeof(float));
    m->work_mem = buf_alloc(m, m->work_count, sizeof(float));
    m->inputs = msr_calloc(N, sizeof(int));
    m->targets = msr_calloc(N, sizeof(int));
    if (m->acts_mem == NULL || m->work_mem == NULL || m->inputs == NULL || m->targets == NULL)
        return MSR_ERR_NO_MEMORY;
    acts = (msr_gpt_carve_t){m->acts_mem, 0, 1};
    work = (msr_gpt_carve_t){m->work_mem, 0, 1};
    msr_gpt_carve_acts(&m->cfg, B, m->head_chunk, &acts, &m->acts);
    msr_gpt_carve_work(&m->cfg, B, m->head_chunk, 1, &work, &m->work);
    return MSR_OK;
}

/* The whole model with activations for max_batch (>= 1), its head
 * chunked in head_chunk rows (0: whole), or a part with none (max_batch
 * 0). */
static msr_status_t create(const msr_device_t *dev, const msr_gpt_config_t *cfg,
                           const msr_gpt_part_t *part, int max_batch, unsigned flags,
                           int head_chunk, msr_gpt_t **model_p)
{
    if (msr_gpt_part_check(cfg, part) != MSR_OK)
        return msr_err_prefix(MSR_ERR_CONFIG, "gpt");
    if (dev != NULL && !msr_device_is_host(dev)) {
        return msr_err(MSR_ERR_UNSUPPORTED,
                       "gpt: device %s: the model's code reads and writes its buffers on the "
                       "host, which cannot reach its memory",
                       msr_device_name(dev));
    }
    msr_gpt_t *m = msr_calloc(1, sizeof *m);
    if (m == NULL)
        goto err_no_memory;
    m->dev = dev;
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
    m->head_chunk = head_chunk < cfg->vocab ? head_chunk : cfg->vocab;
    size_t per_block = (size_t)MSR_GPT_BLOCK_TENSORS + 1;
    m->tensors = msr_calloc(4 + per_block * (size_t)cfg->layers, sizeof *m->tensors);
    m->segments = msr_calloc((size_t)cfg->layers + 2, sizeof *m->segments);
    m->acts.blocks = msr_calloc((size_t)cfg->layers, sizeof *m->acts.blocks);
    if (m->tensors == NULL || m->segments == NULL || m->acts.blocks == NULL)
        goto err_free;
    msr_gpt_build_layout(m);

    if (!(flags & MSR_GPT_NO_PARAMS) &&
        (m->params = buf_alloc(m, m->num_params, sizeof(float))) == NULL)
        goto err_free;
    if (!(flags & MSR_GPT_NO_GRADS) &&
        (m->grads = buf_alloc(m, m->num_params, sizeof(float))) == NULL)
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
    return msr_gpt_create_on(NULL, cfg, NULL, max_batch, flags, model_p);
}

msr_status_t msr_gpt_create_part(const msr_gpt_config_t *cfg, const msr_gpt_part_t *part,
                                 unsigned flags, msr_gpt_t **model_p)
{
    return create(NULL, cfg, part, 0, flags, 0, model_p);
}

/* The whole model with activations for max_batch, its head chunked in
 * head_chunk rows (0: whole). */
static msr_status_t create_whole(const msr_device_t *dev, const msr_gpt_config_t *cfg,
                                 int max_batch, unsigned flags, int head_chunk, msr_gpt_t **model_p)
{
    if (msr_gpt_config_check(cfg) != MSR_OK)
        return msr_err_prefix(MSR_ERR_CONFIG, "gpt");
    if (max_batch < 1 || max_batch > GPT_MAX_BATCH)
        return msr_err(MSR_ERR_CONFIG, "gpt: batch %d is not in [1, %d]", max_batch, GPT_MAX_BATCH);
    msr_gpt_part_t whole = {1, 0, 1, 0, 1};
    return create(dev, cfg, &whole, max_batch, flags, head_chunk, model_p);
}

msr_status_t msr_gpt_create_on(const msr_device_t *dev, const msr_gpt_config_t *cfg,
                               const msr_gpt_part_t *part, int max_batch, unsigned flags,
                               msr_gpt_t **model_p)
{
    if (part != NULL)
        return create(dev, cfg, part, 0, flags, 0, model_p);
    return create_whole(dev, cfg, max_batch, flags, 0, model_p);
}

msr_status_t msr_gpt_create_chunked(const msr_gpt_config_t *cfg, int max_batch, int head_chunk,
                                    unsigned flags, msr_gpt_t **model_p)
{
    if (head_chunk < 1)
        return msr_err(MSR_ERR_CONFIG, "gpt: a head chunk of %d rows", head_chunk);
    return create_whole(NULL, cfg, max_batch, flags, head_chunk, model_p);
}

msr_status_t msr_gpt_set_precision(msr_gpt_t *m, msr_precision_t precision)
{
    msr_products_t *p = NULL;
    msr_status_t st = msr_products_create(precision, &p);
    if (st != MSR_OK)
        return st;
    if (m->moe != NULL)
        msr_moe_set_products(m->moe, p);
    msr_products_destroy(m->prod);
    m->prod = p;
    return MSR_OK;
}

msr_status_t msr_gpt_set_kernels(msr_gpt_t *m, const struct msr_kernels *k)
{
    const char *missing = k != NULL ? msr_kernels_missing(k) : NULL;
    if (missing != NULL) {
        return msr_err(MSR_ERR_INVALID_ARG, "gpt: the kernel table '%s' has no %s",
                       k->name != NULL ? k->name : "(unnamed)", missing);
    }
    m->kernels = k;
    if (m->moe != NULL)
        msr_moe_set_kernels(m->moe, k);
    return MSR_OK;
}

void msr_gpt_destroy(msr_gpt_t *model)
{
    if (model == NULL)
        return;
    msr_moe_destroy(model->moe);
    msr_products_destroy(model->prod);
    msr_free(model->stage_layers);
    msr_free(model->inputs);
    msr_free(model->targets);
    buf_free(model, model->work_mem);
    buf_free(model, model->acts_mem);
    buf_free(model, model->grads);
    buf_free(model, model->params);
    msr_free(model->acts.blocks);
    msr_free(model->segments);
    msr_free(model->tensors);
    msr_free(model);
}
