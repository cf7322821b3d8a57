/* Model parallel (see mp.h): create and destroy (the work space, the
 * frames, context parallel's buffers) and tracing. Running a step (a
 * block, the pipeline of forwards and backwards with recompute, the
 * step's end) is mp_run.c's; the plan (checks, sizes, schedule)
 * mp_pipe.c's, the tensor-parallel side mp_tp.c's. */
#include "layout/layout.h"
#include "parallel/mp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "model/err_call.h"
#include "model/layers.h"
#include "model/moe.h"
#include "parallel/mp_impl.h"

msr_status_t msr_mp_failed(const char *what, msr_status_t st)
{
    return msr_err_call(st, "mp: %s", what);
}

/* ---- buffers and copies on the device ---- */

msr_status_t msr_mp_buf_alloc(msr_mp_t *mp, size_t n, int zeroed, float **p_p)
{
    void *p = NULL;
    msr_status_t st = zeroed ? msr_device_alloc_zero(mp->dev, n * sizeof(float), &p)
                             : msr_device_alloc(mp->dev, n * sizeof(float), &p);
    if (st == MSR_OK)
        *p_p = p;
    return st;
}

void msr_mp_buf_free(msr_mp_t *mp, float *p)
{
    msr_device_free(mp->dev, p);
}

msr_status_t msr_mp_copy(msr_mp_t *mp, float *dst, const float *src, size_t n,
                         msr_device_copy_t kind)
{
    return msr_device_copy(mp->dev, dst, src, n * sizeof(float), kind, NULL);
}

msr_status_t msr_mp_zero(msr_mp_t *mp, float *dst, size_t n)
{
    return msr_device_memset(mp->dev, dst, 0, n * sizeof(float), NULL);
}

msr_status_t msr_mp_sync(msr_mp_t *mp)
{
    return msr_device_stream_sync(mp->dev, NULL);
}

/* ---- tracing ---- */

void msr_mp_span_add(msr_mp_t *mp, int comm, uint64_t a, uint64_t b, const char *fmt, ...)
{
    if (!mp->tracing)
        return;
    if (mp->num_spans == mp->cap_spans) {
        int cap = mp->cap_spans > 0 ? 2 * mp->cap_spans : 256;
        msr_mp_span_t *s = msr_realloc(mp->spans, (size_t)cap * sizeof *s);
        if (s == NULL)
            return; /* the trace loses a span, the step goes on */
        mp->spans = s;
        mp->cap_spans = cap;
    }
    msr_mp_span_t *s = &mp->spans[mp->num_spans++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    s->comm = (uint8_t)comm;
    s->start_ns = a > mp->t0 ? a - mp->t0 : 0;
    s->dur_ns = b > a ? b - a : 0;
}

void msr_mp_trace(msr_mp_t *mp, int on)
{
    mp->tracing = on;
}

const msr_mp_span_t *msr_mp_spans(const msr_mp_t *mp, int *n_p)
{
    *n_p = mp->num_spans;
    return mp->spans;
}

const msr_mp_stats_t *msr_mp_stats(const msr_mp_t *mp)
{
    return &mp->stats;
}

/* ---- create / destroy ---- */

/* The MoE blocks' alltoalls and allreduces in the trace. */
static void moe_span(void *arg, const char *what, uint64_t a, uint64_t b)
{
    msr_mp_span_add(arg, 1, a, b, "%s", what);
}

/* Points the work space into c, the layout's table (layout/layout.h
 * msr_layout_work) in its order: what the planner counts. */
static void point_work(msr_mp_t *mp, msr_gpt_carve_t *c)
{
    work_t *w = &mp->w;
    float **field[MSR_WORK_COUNT] = {
        [MSR_WORK_SCRATCH] = &w->scratch,
        [MSR_WORK_GAT] = &w->gat,
        [MSR_WORK_DGAT] = &w->dgat,
        [MSR_WORK_PERM] = &w->perm,
        [MSR_WORK_PROJ] = &w->proj,
        [MSR_WORK_PROJL] = &w->projl,
        [MSR_WORK_DRES] = &w->dres,
        [MSR_WORK_DLN] = &w->dln,
        [MSR_WORK_DLNL] = &w->dlnl,
        [MSR_WORK_DQKV] = &w->dqkv,
        [MSR_WORK_DATTY] = &w->datty,
        [MSR_WORK_DFCH] = &w->dfch,
        [MSR_WORK_DFCH_GELU] = &w->dfch_gelu,
        [MSR_WORK_DATT] = &w->datt,
        [MSR_WORK_LOGITS] = &w->logits,
        [MSR_WORK_DLOGITS] = &w->dlogits,
        [MSR_WORK_LOSSES] = &w->losses,
        [MSR_WORK_RMAX] = &w->rmax,
        [MSR_WORK_RED] = &w->red,
        [MSR_WORK_KV0] = &w->kv[0],
        [MSR_WORK_DKV0] = &w->dkv[0],
        [MSR_WORK_KV1] = &w->kv[1],
        [MSR_WORK_DKV1] = &w->dkv[1],
        [MSR_WORK_RMX] = &w->rmx,
        [MSR_WORK_RSUM] = &w->rsum,
        [MSR_WORK_DELTA] = &w->delta,
    };
    for (int k = 0; k < MSR_WORK_COUNT; k++) {
        size_t n = msr_layout_work(&mp->d, k);
        *field[k] = n > 0 ? msr_gpt_carve(c, n) : NULL; /* the ring's without cp */
    }
}

/* Context parallel: the ring's positions of every cp rank's tokens and
 * the step's local inputs and targets (work space too). */
static msr_status_t alloc_cp(msr_mp_t *mp)
{
    size_t T = (size_t)mp->d.T;
    mp->cp_pos = msr_calloc((size_t)mp->cp * T, sizeof(int));
    mp->cp_in = msr_calloc((size_t)mp->cfg.micros * mp->d.N, sizeof(int));
    mp->cp_tgt = msr_calloc((size_t)mp->cfg.micros * mp->d.N, sizeof(int));
    if (mp->cp_pos == NULL || mp->cp_in == NULL || mp->cp_tgt == NULL)
        return MSR_ERR_NO_MEMORY;
    mp->stats.work_bytes += msr_layout_work_ints(&mp->d, mp->cfg.micros) * sizeof(int);
    const msr_gpt_config_t *g = &mp->model->cfg;
    if (g->arch == MSR_GPT_ARCH_LLAMA && g->kv_heads != g->heads) {
        size_t n = T / 2 * 2 * (size_t)mp->d.Cl; /* grouped-query: the kv heads repeated */
        if (msr_mp_buf_alloc(mp, n, 1, &mp->cp_kvx) != MSR_OK ||
            msr_mp_buf_alloc(mp, n, 1, &mp->cp_dkvx) != MSR_OK)
            return MSR_ERR_NO_MEMORY;
        mp->stats.work_bytes += 2 * n * sizeof(float);
    }
    for (int j = 0; j < mp->cp; j++)
        for (size_t t = 0; t < T; t++)
            mp->cp_pos[(size_t)j * T + t] = msr_mp_cp_position(mp->cp, mp->d.T / 2, j, (int)t);
    return MSR_OK;
}

/* The frames' tables of kept activations (max_layers each), the pipeline's
 * gradients in flight, and the last stage's copy of the tied embedding. */
static msr_status_t alloc_frames(msr_mp_t *mp, size_t nframes, int max_layers)
{
    for (size_t k = 0; k < nframes; k++)
        if ((mp->frames[k].layers = msr_calloc((size_t)max_layers, sizeof(msr_gpt_block_acts_t))) ==
            NULL)
            return MSR_ERR_NO_MEMORY;
    if (mp->pp > 1 && (mp->pr > 0 || mp->cfg.chunks > 1) &&
        msr_mp_buf_alloc(mp, nframes * mp->d.Nl * (size_t)mp->d.C, 1, &mp->gsend) != MSR_OK)
        return MSR_ERR_NO_MEMORY;
    if (mp->pp > 1 && mp->pr == mp->pp - 1 && mp->model->cfg.arch != MSR_GPT_ARCH_LLAMA) {
        size_t n = (size_t)mp->d.Vl * (size_t)mp->d.C; /* a Llama's head is untied */
        if (msr_mp_buf_alloc(mp, n, 1, &mp->head_wte) != MSR_OK ||
            msr_mp_buf_alloc(mp, n, 1, &mp->head_dwte) != MSR_OK)
            return MSR_ERR_NO_MEMORY;
    }
    return MSR_OK;
}

/* The activation offload's store (cfg.acts): a file of nframes x layers
 * block inputs (offload_acts.h). */
static msr_status_t acts_start(msr_mp_t *mp, size_t nframes, int layers)
{
    if (mp->cfg.acts.mode != MSR_OFFLOAD_DISK)
        return MSR_OK;
    size_t x = mp->d.Nl * (size_t)mp->d.C;
    /* what the frames keep under full recompute: the chunk's input and
     * each block's output, one (Nl, C) each (the store's size) */
    if (msr_layout_frame_elems(&mp->d, layers, 0) != (uint64_t)(layers + 1) * x)
        return msr_err(MSR_ERR_CONFIG, "mp: a frame keeps more than the blocks' inputs");
    msr_status_t st =
        msr_acts_create(&mp->cfg.acts, x * sizeof(float), nframes * (size_t)layers, &mp->acts);
    mp->cfg.acts.dir = NULL; /* borrowed: the store has the path */
    if (st != MSR_OK)
        return st;
    mp->acts_layers = layers;
    mp->acts_live += msr_acts_resident(mp->acts);
    mp->stats.acts_peak = mp->acts_live;
    MSR_INFO("offload: the block inputs of %zu frames x %d blocks (%zu bytes each) in %s (%s)",
             nframes, layers, x * sizeof(float), msr_acts_path(mp->acts),
             msr_acts_engine(mp->acts));
    return MSR_OK;
}

const msr_acts_t *msr_mp_acts(const msr_mp_t *mp)
{
    return mp->acts;
}

/* Whether model is this rank's part on mesh, cut as cfg says. */
static msr_status_t check_part(const msr_mp_config_t *cfg, const msr_mesh_t *mesh,
                               const msr_gpt_t *model)
{
    if (msr_mp_check(&model->cfg, cfg, mesh->pp, mesh->tp) != MSR_OK)
        return msr_err_prefix(MSR_ERR_CONFIG, "mp");
    if (model->part.tp != mesh->tp || model->part.tp_rank != mesh->tp_rank ||
        model->part.pp != mesh->pp || model->part.pp_rank != mesh->pp_rank ||
        model->part.chunks != cfg->chunks || (cfg->cp > 1 ? cfg->cp : 1) != mesh->cp) {
        return msr_err(MSR_ERR_CONFIG,
                       "mp: the model part (tp %d/%d pp %d/%d, %d chunks, cp %d) is not this "
                       "rank's (mesh cp %d)",
                       model->part.tp_rank, model->part.tp, model->part.pp_rank, model->part.pp,
                       model->part.chunks, cfg->cp, mesh->cp);
    }
    for (int c = 0; c < cfg->chunks; c++) {
        int lo, hi, n = mesh->pp * cfg->chunks;
        msr_layout_split_stage(model->cfg.layers, n, cfg->stage_layers,
                               c * mesh->pp + mesh->pp_rank, &lo, &hi);
        if (lo != model->chunk_lo[c] || hi != model->chunk_hi[c]) {
            return msr_err(MSR_ERR_CONFIG,
                           "mp: the model's chunk %d holds layers [%d, %d), the split says [%d, "
                           "%d)",
                           c, model->chunk_lo[c], model->chunk_hi[c], lo, hi);
        }
    }
    return MSR_OK;
}

msr_status_t msr_mp_create(const msr_mp_config_t *cfg, const msr_mesh_t *mesh, msr_gpt_t *model,
                           msr_mp_t **mp_p)
{
    msr_status_t st = check_part(cfg, mesh, model);
    if (st != MSR_OK)
        return st;
    const msr_device_t *dev = cfg->device != NULL ? cfg->device : msr_device_cpu();
    if (!msr_device_is_host(dev)) {
        return msr_err(MSR_ERR_UNSUPPORTED,
                       "mp: device %s: the model's kernels run on the host only, so model "
                       "parallel's buffers stay there until they run on devices",
                       msr_device_name(dev));
    }
    msr_mp_t *mp = msr_calloc(1, sizeof *mp);
    if (mp == NULL)
        goto err_no_memory;
    mp->cfg = *cfg;
    mp->dev = dev;
    mp->cfg.stage_layers = model->part.stage_layers; /* outlives cfg's */
    mp->mesh = mesh;
    mp->model = model;
    mp->d = msr_mp_dims(&model->cfg, cfg, mesh->tp);
    mp->d_step = mp->d;
    mp->pp = mesh->pp;
    mp->pr = mesh->pp_rank;
    mp->tp = mesh->tp;
    mp->tr = mesh->tp_rank;
    mp->cp = mesh->cp;
    mp->cr = mesh->cp_rank;
    mp->nv = mesh->pp * cfg->chunks;
    mp->overlap = cfg->schedule != MSR_MP_INTERLEAVED;

    /* the scratch every block shares: everything a fully recomputed block
     * drops (the most any mode drops) */
    mp->scratch_count = msr_layout_work(&mp->d, MSR_WORK_SCRATCH);
    msr_gpt_carve_t cw = {NULL, 0, 1};
    point_work(mp, &cw);
    size_t nframes = (size_t)cfg->micros * (size_t)cfg->chunks;
    int max_layers = 0;
    for (int c = 0; c < cfg->chunks; c++)
        max_layers = MSR_MAX(max_layers, model->chunk_hi[c] - model->chunk_lo[c]);
    if (msr_mp_buf_alloc(mp, cw.used, 1, &mp->wmem) != MSR_OK)
        goto err_free;
    mp->stats.work_bytes = cw.used * sizeof(float);
    mp->frames = msr_calloc(nframes, sizeof *mp->frames);
    mp->pool = msr_calloc(nframes, sizeof *mp->pool);
    mp->sreq = msr_calloc(2 * nframes, sizeof *mp->sreq);
    mp->ops = msr_calloc(2 * nframes, sizeof *mp->ops);
    if (mp->frames == NULL || mp->pool == NULL || mp->sreq == NULL || mp->ops == NULL)
        goto err_free;
    if (mp->cp > 1 && alloc_cp(mp) != MSR_OK)
        goto err_free;
    cw.base = mp->wmem;
    cw.used = 0;
    point_work(mp, &cw);
    msr_mp_point_block(mp);
    if (alloc_frames(mp, nframes, max_layers) != MSR_OK)
        goto err_free;
    if (model->moe != NULL)
        msr_moe_set_trace(model->moe, moe_span, mp);
    msr_mp_build_schedule(mp);
    if ((st = acts_start(mp, nframes, max_layers)) != MSR_OK) {
        msr_mp_destroy(mp);
        return st;
    }
    for (int c = 0; c < 2; c++) {
        int lay = c == 0 ? max_layers
                         : model->chunk_hi[cfg->chunks - 1] - model->chunk_lo[cfg->chunks - 1];
        mp->stats.frame_bytes[c] = msr_mp_frame_bytes(&model->cfg, cfg, mp->tp, lay, c);
    }
    *mp_p = mp;
    return MSR_OK;

err_free:
    msr_mp_destroy(mp);
err_no_memory:
    return msr_err(MSR_ERR_NO_MEMORY,
                   "mp: out of memory for the runtime of a part of %zu parameters",
                   model->num_params);
}

/* Waits for the sends in flight; returns the first failure. */
msr_status_t msr_mp_sends_wait(msr_mp_t *mp)
{
    size_t n = 2 * (size_t)mp->cfg.micros * (size_t)mp->cfg.chunks;
    msr_status_t st = mp->sreq != NULL ? msr_comm_wait_all(mp->sreq, n) : MSR_OK;
    msr_status_t tst = msr_comm_wait_all(&mp->tied_req, 1);
    if (st == MSR_OK)
        st = tst;
    return st != MSR_OK ? msr_mp_failed("pipeline send", st) : MSR_OK;
}

void msr_mp_destroy(msr_mp_t *mp)
{
    if (mp == NULL)
        return;
    (void)msr_mp_sends_wait(mp);
    size_t nframes = (size_t)mp->cfg.micros * (size_t)mp->cfg.chunks;
    if (mp->frames != NULL) {
        for (size_t k = 0; k < nframes; k++) {
            msr_mp_frame_close(mp, &mp->frames[k]);
            msr_free(mp->frames[k].layers);
        }
    }
    msr_free(mp->frames);
    msr_acts_destroy(mp->acts);
    for (int k = 0; mp->pool != NULL && k < mp->pool_n; k++)
        msr_mp_buf_free(mp, mp->pool[k].mem);
    msr_free(mp->pool);
    msr_free(mp->spans);
    msr_free(mp->ops);
    msr_free(mp->sreq);
    msr_mp_buf_free(mp, mp->gsend);
    msr_mp_buf_free(mp, mp->head_wte);
    msr_mp_buf_free(mp, mp->head_dwte);
    msr_free(mp->cp_pos);
    msr_mp_buf_free(mp, mp->cp_kvx);
    msr_mp_buf_free(mp, mp->cp_dkvx);
    msr_free(mp->cp_in);
    msr_free(mp->cp_tgt);
    msr_mp_buf_free(mp, mp->wmem);
    msr_free(mp);
}

void msr_mp_span_update(msr_mp_t *mp, uint64_t a, uint64_t b)
{
    msr_mp_span_add(mp, 0, a, b, "optimizer");
}
