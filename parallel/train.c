/* The training step and the trainer's checkpoint shard (see train.h). */
#include "layout/layout.h"
#include "parallel/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "model/err_call.h"
#include "model/moe.h"

void msr_train_config_defaults(msr_train_config_t *cfg)
{
    cfg->par = (msr_dp_config_t){
        .zero = 0,
        .bucket_bytes = MSR_DP_BUCKET_BYTES,
        .first_bucket_bytes = MSR_DP_FIRST_BUCKET_BYTES,
        .zero_min_bytes = MSR_DP_ZERO_MIN_BYTES,
        .overlap = 1,
    };
    cfg->tp = cfg->pp = cfg->cp = 1;
    cfg->ep = 1;
    cfg->mp = (msr_mp_config_t){.schedule = MSR_MP_1F1B, .chunks = 1};
}

int msr_train_uses_mp(const msr_train_config_t *cfg)
{
    return cfg->tp > 1 || cfg->pp > 1 || cfg->cp > 1 ||
           cfg->mp.recompute != MSR_MP_RECOMPUTE_NONE || cfg->mp.chunks > 1 || cfg->mp.sp ||
           cfg->mp_always;
}

/* cfg->mp with the fields the trainer owns filled in. */
static msr_mp_config_t mp_config(const msr_train_config_t *cfg)
{
    msr_mp_config_t m = cfg->mp;
    m.micro_batch = cfg->micro_batch;
    m.micros = cfg->grad_accum;
    m.zero = cfg->par.zero;
    m.cp = cfg->cp > 1 ? cfg->cp : 1;
    if (m.chunks < 1)
        m.chunks = 1;
    return m;
}

msr_status_t msr_train_config_check(const msr_train_config_t *cfg, const msr_dataset_t *data)
{
    if (msr_gpt_config_check(&cfg->model) != MSR_OK)
        return MSR_ERR_CONFIG;
    if (cfg->micro_batch < 1 || cfg->micro_batch > 65536 ||
        (int64_t)cfg->micro_batch * cfg->model.max_seq > (1 << 24)) {
        return msr_err(MSR_ERR_CONFIG, "micro-batch %d x sequence %d is not in [1, 2^24] tokens",
                       cfg->micro_batch, cfg->model.max_seq);
    }
    if (cfg->grad_accum < 1 || cfg->grad_accum > 65536) {
        return msr_err(MSR_ERR_CONFIG, "grad-accum %d is not in [1, 65536]", cfg->grad_accum);
    }
    if (cfg->dp < 1 || cfg->dp_rank < 0 || cfg->dp_rank >= cfg->dp) {
        return msr_err(MSR_ERR_CONFIG, "dp rank %d is not in [0, %d)", cfg->dp_rank, cfg->dp);
    }
    if (data->size <= (size_t)cfg->model.max_seq) {
        return msr_err(MSR_ERR_CONFIG, "the data (%zu bytes) must be longer than the sequence (%d)",
                       data->size, cfg->model.max_seq);
    }
    if (!(cfg->lr > 0.0f && cfg->lr < 1e3f) || cfg->warmup < 0 || !(cfg->grad_clip >= 0.0f)) {
        return msr_err(MSR_ERR_CONFIG,
                       "learning rate %g, warm-up %d or gradient clip %g out of range",
                       (double)cfg->lr, cfg->warmup, (double)cfg->grad_clip);
    }
    if (cfg->par.zero < 0 || cfg->par.zero > 3 || cfg->par.bucket_bytes < sizeof(float)) {
        return msr_err(MSR_ERR_CONFIG,
                       "ZeRO stage %d (0..3) or bucket of %zu bytes (at least 4) out of range",
                       cfg->par.zero, cfg->par.bucket_bytes);
    }
    if (cfg->tp < 1 || cfg->pp < 1 || cfg->cp < 0) {
        return msr_err(MSR_ERR_CONFIG, "tp %d, pp %d and cp %d must be at least 1", cfg->tp,
                       cfg->pp, cfg->cp);
    }
    int E = cfg->model.moe.experts, ep = cfg->ep > 1 ? cfg->ep : 1; /* 0: none, as 1 */
    if (cfg->ep < 0 || (ep > 1 && E == 0)) {
        return msr_err(MSR_ERR_CONFIG, "ep %d: expert parallel needs at least 1 and a MoE model",
                       cfg->ep);
    }
    if (E > 0 && E % ep != 0) {
        return msr_err(MSR_ERR_CONFIG, "%d experts do not divide among ep %d ranks", E, ep);
    }
    if (cfg->dp % ep != 0) {
        return msr_err(MSR_ERR_CONFIG,
                       "ep %d does not divide dp %d: the expert-parallel groups are cut from the "
                       "data-parallel group",
                       ep, cfg->dp);
    }
    if (E > 0 && cfg->cp > 1) {
        return msr_err(MSR_ERR_CONFIG,
                       "MoE does not run with cp: a MoE block routes a micro-batch's whole "
                       "sequences, which context parallel splits over its ranks");
    }
    if (E > 0 && E % (ep * cfg->tp) != 0) {
        return msr_err(MSR_ERR_CONFIG,
                       "%d experts do not divide among ep %d x tp %d ranks: each tp rank "
                       "computes E / (ep x tp) of them",
                       E, ep, cfg->tp);
    }
    if (msr_train_uses_mp(cfg)) {
        msr_mp_config_t m = mp_config(cfg);
        if (msr_mp_check(&cfg->model, &m, cfg->pp, cfg->tp) != MSR_OK)
            return MSR_ERR_CONFIG;
    } else if (cfg->mp.stage_layers != NULL) { /* one stage: all the layers */
        if (msr_layout_split_check(cfg->model.layers, 1, cfg->mp.stage_layers, 1) != MSR_OK)
            return MSR_ERR_CONFIG;
    }
    return MSR_OK;
}

/* The experts of a MoE model: dp ranks [k * ep, (k + 1) * ep) share their
 * work (the ep group), the dp ranks of one ep index hold the same experts
 * and sum their gradients (the replica group), and the experts get their
 * own optimizer: over the whole store at ZeRO 0, else over this rank's
 * block of it in the replica group (ZeRO-1 for the experts: gradients
 * reduce-scattered, the block updated, the parameters all-gathered). */
static msr_status_t experts_create(msr_trainer_t *tr, msr_comm_t *comm, int rank)
{
    int ep = tr->cfg.ep > 1 ? tr->cfg.ep : 1;
    msr_moe_t *moe = tr->model->moe;
    msr_status_t st;
    if (ep > 1 && (st = msr_comm_split(comm, rank / ep, rank, &tr->ep_comm)) != MSR_OK)
        return msr_err_call(st, "train: the expert-parallel group of ep %d", ep);
    if (tr->cfg.dp > ep && (st = msr_comm_split(comm, rank % ep, rank, &tr->rep_comm)) != MSR_OK)
        return msr_err_call(st, "train: the group of the ranks holding the same experts");
    /* model parallel: the experts of the blocks of this part's stages,
     * shared out over tp too */
    int nb = msr_moe_blocks(moe), every = tr->cfg.model.moe.every;
    int *held = msr_calloc((size_t)nb, sizeof *held);
    if (held == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for %d MoE blocks", nb);
    for (int i = 0; i < nb; i++)
        for (int c = 0; c < tr->model->part.chunks; c++)
            held[i] |= (i + 1) * every - 1 >= tr->model->chunk_lo[c] &&
                       (i + 1) * every - 1 < tr->model->chunk_hi[c];
    msr_moe_layout_t lay = {tr->ep_comm, NULL, held, 0};
    if (tr->mesh != NULL) { /* set before this only on the model-parallel path */
        lay.tp_comm = tr->mesh->tp_comm;
        lay.router_once = tr->cfg.mp.sp;
    }
    st = msr_moe_set_layout(moe, &lay);
    msr_free(held);
    if (st != MSR_OK)
        return st;
    msr_moe_init_params(moe, tr->cfg.seed);
    size_t count = msr_moe_count(moe);
    tr->rep_size = tr->rep_comm != NULL ? msr_comm_size(tr->rep_comm) : 1;
    tr->rep_rank = tr->rep_comm != NULL ? msr_comm_rank(tr->rep_comm) : 0;
    tr->eshard_lo = 0;
    tr->eshard_hi = count;
    if (tr->cfg.par.zero > 0 && tr->rep_size > 1) {
        tr->eblk = (count + (size_t)tr->rep_size - 1) / (size_t)tr->rep_size;
        tr->eshard_lo = MSR_MIN(count, (size_t)tr->rep_rank * tr->eblk);
        tr->eshard_hi = MSR_MIN(count, tr->eshard_lo + tr->eblk);
        if ((tr->escratch = msr_calloc(tr->eblk * (size_t)tr->rep_size, sizeof(float))) == NULL)
            return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for %zu expert elements",
                           tr->eblk * (size_t)tr->rep_size);
    }
    int n;
    const msr_gpt_tensor_t *t = msr_moe_tensors(moe, &n);
    msr_adamw_range_t own = {tr->eshard_lo, tr->eshard_hi};
    return msr_adamw_create_ranges(&tr->cfg.adamw, t, n, &own, own.lo < own.hi, &tr->eopt);
}

/* This rank's block of the experts' gradients, after experts_reduce (the
 * optimizer's shard space). */
static float *expert_grad_shard(msr_trainer_t *tr)
{
    return tr->escratch != NULL ? tr->escratch + (size_t)tr->rep_rank * tr->eblk
                                : msr_moe_grads(tr->model->moe);
}

/* ZeRO-1 for the experts, after the update: every replica gets the others'
 * blocks of the parameters. */
static msr_status_t experts_gather(msr_trainer_t *tr)
{
    if (tr->escratch == NULL)
        return MSR_OK;
    float *p = msr_moe_params(tr->model->moe);
    float *mine = tr->escratch + (size_t)tr->rep_rank * tr->eblk;
    memcpy(mine, p + tr->eshard_lo, (tr->eshard_hi - tr->eshard_lo) * sizeof(float));
    msr_status_t st =
        msr_comm_allgather(tr->rep_comm, MSR_IN_PLACE, tr->escratch, tr->eblk, MSR_DTYPE_F32);
    if (st != MSR_OK)
        return msr_err_call(st, "train: the allgather of the experts' parameters");
    memcpy(p, tr->escratch, msr_moe_count(tr->model->moe) * sizeof(float));
    return MSR_OK;
}

/* After a step's backward: the experts' gradients summed over the ranks
 * that hold them, and their squared norm handed to the data-parallel
 * update (counted by the first replica of each expert only). */
static msr_status_t experts_reduce(msr_trainer_t *tr)
{
    msr_moe_t *moe = tr->model->moe;
    float *g = msr_moe_grads(moe);
    size_t n = msr_moe_count(moe);
    if (tr->escratch != NULL) { /* ZeRO: each replica gets its block's sum */
        memcpy(tr->escratch, g, n * sizeof(float));
        memset(tr->escratch + n, 0, (tr->eblk * (size_t)tr->rep_size - n) * sizeof(float));
        float *mine = expert_grad_shard(tr);
        msr_status_t st = msr_comm_reduce_scatter(tr->rep_comm, tr->escratch, mine, tr->eblk,
                                                  MSR_DTYPE_F32, MSR_OP_SUM);
        if (st != MSR_OK)
            return msr_err_call(st, "train: the reduce-scatter of %zu expert gradients", n);
        double sumsq = 0.0; /* every element in exactly one replica's block */
        for (size_t i = 0; i < tr->eshard_hi - tr->eshard_lo; i++)
            sumsq += (double)mine[i] * mine[i];
        tr->dp->extra_sumsq = sumsq;
        return MSR_OK;
    }
    if (tr->rep_comm != NULL) {
        msr_status_t st =
            msr_comm_allreduce(tr->rep_comm, MSR_IN_PLACE, g, n, MSR_DTYPE_F32, MSR_OP_SUM);
        if (st != MSR_OK)
            return msr_err_call(st, "train: the allreduce of %zu expert gradients", n);
    }
    double sumsq = 0.0;
    for (size_t i = 0; i < n; i++)
        sumsq += (double)g[i] * g[i];
    int ep = tr->cfg.ep > 1 ? tr->cfg.ep : 1;
    tr->dp->extra_sumsq = tr->cfg.dp_rank < ep ? sumsq : 0.0;
    return MSR_OK;
}

msr_status_t msr_trainer_create(const msr_train_config_t *cfg, const msr_dataset_t *data,
                                msr_comm_t *comm, msr_trainer_t **tr_p)
{
    if (msr_train_config_check(cfg, data) != MSR_OK)
        return msr_err_prefix(MSR_ERR_CONFIG, "train");
    int size = comm != NULL ? msr_comm_size(comm) : 1,
        rank = comm != NULL ? msr_comm_rank(comm) : 0;
    if (cfg->dp != size || cfg->dp_rank != rank) {
        return msr_err(MSR_ERR_CONFIG,
                       "train: dp %d (rank %d) needs a communicator of %d ranks, not %d (rank %d)",
                       cfg->dp, cfg->dp_rank, cfg->dp, size, rank);
    }
    msr_status_t st = MSR_ERR_NO_MEMORY;
    msr_trainer_t *tr = msr_calloc(1, sizeof *tr);
    if (tr == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a trainer");
    tr->cfg = *cfg;
    tr->cfg.mp.stage_layers = NULL; /* the whole model: one stage */
    tr->data = data;
    tr->sampler.seed = cfg->seed;
    size_t N = (size_t)cfg->micro_batch * (size_t)cfg->model.max_seq;
    tr->inputs = msr_calloc(N, sizeof(int));
    tr->targets = msr_calloc(N, sizeof(int));
    if (tr->inputs == NULL || tr->targets == NULL) {
        msr_err_set("train: out of memory for a micro-batch of %zu tokens", N);
        goto err_free;
    }
    st = msr_gpt_create_ex(&cfg->model, cfg->micro_batch, msr_dp_model_flags(cfg->par.zero),
                           &tr->model);
    if (st != MSR_OK)
        goto err_free;
    st = msr_dp_create(&cfg->par, comm, tr->model, &cfg->adamw, cfg->seed, &tr->dp);
    if (st != MSR_OK)
        goto err_free;
    if (tr->model->moe != NULL && (st = experts_create(tr, comm, rank)) != MSR_OK)
        goto err_free;
    *tr_p = tr;
    return MSR_OK;

err_free:
    msr_trainer_destroy(tr);
    return st;
}

msr_status_t msr_trainer_create_mesh(const msr_train_config_t *cfg, const msr_dataset_t *data,
                                     const msr_mesh_t *mesh, msr_trainer_t **tr_p)
{
    if (!msr_train_uses_mp(cfg)) {
        if (mesh->tp != 1 || mesh->pp != 1) {
            return msr_err(MSR_ERR_CONFIG,
                           "train: a mesh with tp %d pp %d for a data-parallel configuration",
                           mesh->tp, mesh->pp);
        }
        msr_status_t st = msr_trainer_create(cfg, data, mesh->dp_comm, tr_p);
        if (st == MSR_OK)
            (*tr_p)->mesh = mesh;
        return st;
    }
    if (msr_train_config_check(cfg, data) != MSR_OK)
        return msr_err_prefix(MSR_ERR_CONFIG, "train");
    int cp = cfg->cp > 1 ? cfg->cp : 1;
    if (cfg->dp != mesh->dp || cfg->tp != mesh->tp || cfg->pp != mesh->pp || cp != mesh->cp ||
        cfg->dp_rank != mesh->dp_rank) {
        return msr_err(MSR_ERR_CONFIG,
                       "train: dp %d (rank %d) x pp %d x cp %d x tp %d is not the mesh's %d "
                       "(rank %d) x %d x %d x %d",
                       cfg->dp, cfg->dp_rank, cfg->pp, cp, cfg->tp, mesh->dp, mesh->dp_rank,
                       mesh->pp, mesh->cp, mesh->tp);
    }
    msr_status_t st = MSR_ERR_NO_MEMORY;
    msr_trainer_t *tr = msr_calloc(1, sizeof *tr);
    if (tr == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a trainer");
    tr->cfg = *cfg;
    tr->cfg.mp = mp_config(cfg);
    tr->data = data;
    tr->mesh = mesh;
    tr->sampler.seed = cfg->seed;
    size_t N = (size_t)cfg->micro_batch * (size_t)cfg->model.max_seq * (size_t)cfg->grad_accum;
    tr->inputs = msr_calloc(N, sizeof(int));
    tr->targets = msr_calloc(N, sizeof(int));
    if (tr->inputs == NULL || tr->targets == NULL) {
        msr_err_set("train: out of memory for a step of %zu tokens", N);
        goto err_free;
    }
    msr_gpt_part_t part = {mesh->tp,      mesh->tp_rank,     mesh->pp,
                           mesh->pp_rank, tr->cfg.mp.chunks, cfg->mp.stage_layers};
    st = msr_gpt_create_part(&cfg->model, &part, msr_dp_model_flags(cfg->par.zero), &tr->model);
    if (st != MSR_OK)
        goto err_free;
    tr->cfg.mp.stage_layers = tr->model->part.stage_layers; /* the caller's may go */
    /* the replicas of this part: dp x cp (parameters are replicated over cp) */
    st = msr_dp_create(&cfg->par, mesh->dcp_comm, tr->model, &cfg->adamw, cfg->seed, &tr->dp);
    if (st != MSR_OK)
        goto err_free;
    msr_dp_set_model_parallel(tr->dp, mesh->tp_comm, mesh->tp_rank, mesh->pp_comm);
    if (cfg->model.moe.experts > 0) {
        /* the MoE state keeps each micro-batch's routing from its forward
         * to its backward (one frame when full recompute runs it again) */
        int frames = tr->cfg.mp.recompute == MSR_MP_RECOMPUTE_FULL ? 1 : cfg->grad_accum;
        st = msr_moe_create_frames(&cfg->model, cfg->micro_batch * cfg->model.max_seq, frames,
                                   &tr->model->moe);
        if (st != MSR_OK || (st = experts_create(tr, mesh->dp_comm, mesh->dp_rank)) != MSR_OK)
            goto err_free;
    }
    if ((st = msr_mp_create(&tr->cfg.mp, mesh, tr->model, &tr->mp)) != MSR_OK)
        goto err_free;
    if ((st = msr_mp_sync_tied(tr->mp)) != MSR_OK)
        goto err_free;
    *tr_p = tr;
    return MSR_OK;

err_free:
    msr_trainer_destroy(tr);
    return st;
}

void msr_trainer_destroy(msr_trainer_t *tr)
{
    if (tr == NULL)
        return;
    msr_mp_destroy(tr->mp);
    msr_adamw_destroy(tr->eopt);
    msr_free(tr->escratch);
    msr_comm_destroy(tr->rep_comm);
    msr_comm_destroy(tr->ep_comm);
    msr_dp_destroy(tr->dp);
    msr_gpt_destroy(tr->model);
    msr_free(tr->targets);
    msr_free(tr->inputs);
    msr_free(tr);
}

float msr_trainer_lr(const msr_trainer_t *tr, uint64_t step)
{
    if (tr->cfg.warmup > 0 && step < (uint64_t)tr->cfg.warmup)
        return tr->cfg.lr * (float)(step + 1) / (float)tr->cfg.warmup;
    return tr->cfg.lr;
}

msr_status_t msr_trainer_step(msr_trainer_t *tr, double *loss_p)
{
    const msr_train_config_t *c = &tr->cfg;
    int B = c->micro_batch, T = c->model.max_seq;
    uint64_t G = (uint64_t)B * (uint64_t)c->grad_accum * (uint64_t)c->dp; /* global batch */
    float dloss = (float)(1.0 / ((double)G * (double)T));
    msr_gpt_t *model = tr->model;
    msr_dp_t *dp = tr->dp;
    const msr_gpt_hooks_t *hooks = msr_dp_hooks(dp);
    msr_status_t st;

    double loss_sum = 0.0;
    if (model->moe != NULL)
        msr_moe_zero_grad(model->moe);
    if (tr->mp != NULL) {
        size_t N = (size_t)B * (size_t)T;
        for (int m = 0; m < c->grad_accum; m++) {
            uint64_t first = ((uint64_t)c->dp_rank * (uint64_t)c->grad_accum + (uint64_t)m) * B;
            msr_sampler_fill(&tr->sampler, tr->data, T, first, B, tr->inputs + (size_t)m * N,
                             tr->targets + (size_t)m * N);
        }
        uint64_t t0 = msr_now_ns();
        if ((st = msr_mp_run(tr->mp, dp, tr->inputs, tr->targets, dloss, &loss_sum)) != MSR_OK)
            return st;
        dp->stats.backward_ns += msr_now_ns() - t0;
    }
    for (int m = 0; m < c->grad_accum && tr->mp == NULL; m++) {
        uint64_t first = ((uint64_t)c->dp_rank * (uint64_t)c->grad_accum + (uint64_t)m) * B;
        msr_sampler_fill(&tr->sampler, tr->data, T, first, B, tr->inputs, tr->targets);
        double loss;
        if ((st = msr_dp_micro_begin(dp, m == 0, m == c->grad_accum - 1)) != MSR_OK)
            return st;
        uint64_t t0 = msr_now_ns();
        if ((st = msr_gpt_forward(model, tr->inputs, tr->targets, B, T, hooks, &loss)) != MSR_OK)
            return st;
        uint64_t t1 = msr_now_ns();
        if ((st = msr_gpt_backward(model, dloss, hooks)) != MSR_OK)
            return st;
        dp->stats.forward_ns += t1 - t0;
        dp->stats.backward_ns += msr_now_ns() - t1;
        if ((st = msr_dp_micro_end(dp)) != MSR_OK)
            return st;
        loss_sum += loss;
    }
    double total, norm;
    uint64_t u0 = msr_now_ns();
    if (model->moe != NULL && (st = experts_reduce(tr)) != MSR_OK)
        return st;
    float lr = msr_trainer_lr(tr, tr->step);
    st = msr_dp_update(dp, lr, c->grad_clip, loss_sum, &total, &norm);
    if (st == MSR_OK && model->moe != NULL) {
        msr_adamw_update(tr->eopt, msr_moe_params(model->moe) + tr->eshard_lo,
                         expert_grad_shard(tr), lr, msr_clip_scale(norm, c->grad_clip));
        st = experts_gather(tr);
    }
    if (st == MSR_OK && tr->mp != NULL) {
        st = msr_mp_sync_tied(tr->mp);
        msr_mp_span_update(tr->mp, u0, msr_now_ns());
    }
    if (st != MSR_OK)
        return st;
    tr->sampler.position += G;
    tr->step++;
    tr->last_grad_norm = norm;
    *loss_p = total / (double)(c->grad_accum * c->dp);
    return MSR_OK;
}

msr_status_t msr_trainer_moe_stats(msr_trainer_t *tr, int64_t *out)
{
    msr_moe_t *moe = tr->model->moe;
    if (moe == NULL)
        return msr_err(MSR_ERR_STATE, "train: router statistics of a dense model");
    int E = tr->cfg.model.moe.experts, n = msr_moe_blocks(moe);
    for (int i = 0; i < n; i++) {
        const msr_moe_stats_t *s = msr_moe_stats(moe, i);
        int64_t *o = out + (size_t)i * (size_t)(E + 2);
        o[0] = s->tokens;
        o[1] = s->dropped;
        memcpy(o + 2, s->load, (size_t)E * sizeof *o);
    }
    msr_moe_stats_reset(moe);
    /* model parallel: a block's counts are its stage's, alike on its tp
     * ranks (tp rank 0's are taken), summed over the world */
    msr_comm_t *comm = tr->dp->comm;
    if (tr->mp != NULL) {
        comm = tr->mesh->world;
        if (tr->mesh->tp_rank != 0)
            memset(out, 0, (size_t)n * (size_t)(E + 2) * sizeof *out);
    }
    if (comm == NULL)
        return MSR_OK;
    msr_status_t st = msr_comm_allreduce(comm, MSR_IN_PLACE, out, (uint64_t)n * (uint64_t)(E + 2),
                                         MSR_DTYPE_I64, MSR_OP_SUM);
    if (st != MSR_OK)
        return msr_err_call(st, "train: summing the router statistics");
    return MSR_OK;
}

msr_status_t msr_trainer_params(msr_trainer_t *tr, float *out)
{
    return msr_dp_gather_params(tr->dp, out);
}

/* The whole model's flat elements: where its experts start in the
 * checkpoint's numbering (ckpt_map.h), whatever part this rank holds. */
static size_t whole_flat(const msr_trainer_t *tr)
{
    return msr_gpt_num_params(&tr->cfg.model);
}

/* The checkpoint's element count: the whole model's flat buffer, then its
 * experts. */
static size_t total_params(const msr_trainer_t *tr)
{
    return whole_flat(tr) + msr_moe_num_params(&tr->cfg.model);
}

/* The saving world: this rank's place in it and its size (every rank of
 * every model-parallel group saves its own payload). */
static int world_rank(const msr_trainer_t *tr)
{
    return tr->mesh != NULL ? tr->mesh->rank : tr->dp->rank;
}

static int world_size(const msr_trainer_t *tr)
{
    const msr_mesh_t *m = tr->mesh;
    return m != NULL ? m->dp * m->pp * m->cp * m->tp : tr->dp->size;
}

/* The MoE blocks whose experts a payload holds after the flat pieces. */
static int expert_ranges(const msr_trainer_t *tr)
{
    return tr->model->moe != NULL ? msr_moe_held(tr->model->moe) : 0;
}

/* Range k of the experts this rank saves, in the checkpoint's numbering:
 * MoE block k's part of the optimizer's shard of the store (all of the
 * block's at ZeRO 0), with their parameters and moments; n = 0 when the
 * shard has none of block k. */
static msr_tckpt_range_t expert_range(msr_trainer_t *tr, int k)
{
    msr_moe_t *moe = tr->model->moe;
    size_t per = (size_t)msr_moe_local_experts(moe) * msr_moe_expert_count(tr->cfg.model.channels);
    size_t lo = MSR_MAX((size_t)k * per, tr->eshard_lo);
    size_t hi = MSR_MIN((size_t)(k + 1) * per, tr->eshard_hi);
    if (lo >= hi)
        return (msr_tckpt_range_t){0, 0, NULL, NULL, NULL};
    size_t s = lo - tr->eshard_lo;
    return (msr_tckpt_range_t){whole_flat(tr) + msr_moe_global_lo(moe, k) + (lo - k * per), hi - lo,
                               msr_moe_params(moe) + lo, tr->eopt->m + s, tr->eopt->v + s};
}

/* The ranges a rank saves, growing as the map's runs cut its pieces. */
typedef struct range_list {
    msr_tckpt_range_t *r;
    size_t n, cap;
    msr_dp_piece_t piece; /* the owned piece being cut */
} range_list_t;

static int range_push(range_list_t *l, msr_tckpt_range_t x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap > 0 ? 2 * l->cap : 64;
        msr_tckpt_range_t *r = msr_realloc_array(l->r, cap, sizeof *r);
        if (r == NULL)
            return -1;
        l->r = r;
        l->cap = cap;
    }
    l->r[l->n++] = x;
    return 0;
}

/* msr_ckpt_map_fn: the part of l->piece at local lo is global glo. */
static int range_cut(void *arg, size_t lo, size_t glo, size_t n)
{
    range_list_t *l = arg;
    size_t off = lo - l->piece.lo;
    return range_push(
        l, (msr_tckpt_range_t){glo, n, l->piece.params + off, l->piece.m + off, l->piece.v + off});
}

static int range_by_lo(const void *a, const void *b)
{
    const msr_tckpt_range_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Everything this rank saves, in the checkpoint's numbering and in
 * increasing order: its owned flat pieces cut into the whole model's
 * ranges (map), then its experts. *l_p's r is the caller's (msr_free). */
static msr_status_t saved_ranges(msr_trainer_t *tr, const msr_ckpt_map_t *map, range_list_t *l_p)
{
    range_list_t l = {0};
    int bad = 0;
    for (int k = 0; k < msr_dp_num_owned(tr->dp) && !bad; k++) {
        msr_dp_owned(tr->dp, k, &l.piece);
        bad = msr_ckpt_map_to_global(map, l.piece.lo, l.piece.n, range_cut, &l) != 0;
    }
    if (l.n > 0)
        qsort(l.r, l.n, sizeof *l.r, range_by_lo);
    for (int k = 0; k < expert_ranges(tr) && !bad; k++) {
        msr_tckpt_range_t x = expert_range(tr, k);
        bad = x.n > 0 && range_push(&l, x) != 0;
    }
    if (bad) {
        msr_free(l.r);
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a checkpoint of %zu pieces",
                       l.n);
    }
    *l_p = l;
    return MSR_OK;
}

msr_status_t msr_trainer_snapshot(msr_trainer_t *tr, const char *meta, void **buf_p, size_t *len_p)
{
    msr_ckpt_map_t map;
    range_list_t l;
    msr_status_t st = msr_ckpt_map_build(tr->model, &map);
    if (st != MSR_OK)
        return st;
    st = saved_ranges(tr, &map, &l);
    msr_ckpt_map_free(&map);
    if (st != MSR_OK)
        return st;
    msr_tckpt_header_t h = {
        .step = tr->step,
        .adam_t = tr->dp->opt->t,
        .data_seed = tr->sampler.seed,
        .data_position = tr->sampler.position,
        .num_params = total_params(tr),
        .rank = (uint32_t)world_rank(tr),
        .world = (uint32_t)world_size(tr),
        .zero = (uint32_t)tr->cfg.par.zero,
        .meta = meta,
        .tp = (uint32_t)MSR_MAX(tr->cfg.tp, 1),
        .pp = (uint32_t)MSR_MAX(tr->cfg.pp, 1),
        .cp = (uint32_t)MSR_MAX(tr->cfg.cp, 1),
        .ep = (uint32_t)MSR_MAX(tr->cfg.ep, 1),
        .chunks = (uint32_t)MSR_MAX(tr->cfg.mp.chunks, 1),
        .sp = (uint32_t)(tr->cfg.mp.sp != 0),
    };
    st = tr->unsealed_snapshots ? msr_tckpt_encode_unsealed(&h, l.r, (uint32_t)l.n, buf_p, len_p)
                                : msr_tckpt_encode(&h, l.r, (uint32_t)l.n, buf_p, len_p);
    msr_free(l.r);
    return st;
}

/* One saved rank's payload, decoded. */
typedef struct payload {
    void *buf;
    msr_tckpt_header_t h;
    msr_tckpt_range_t *ranges;
    uint32_t n;
    int partial; /* only the header and range table were read (buf holds them) */
} payload_t;

static void payload_free(payload_t *p)
{
    msr_free(p->ranges);
    msr_free(p->buf);
    memset(p, 0, sizeof *p);
}

/* Where the saved payloads come from: whole (fetch) or, when read is not
 * NULL, in byte ranges. */
typedef struct source {
    msr_trainer_fetch_t fetch;
    msr_trainer_read_t read;
    void *arg;
} source_t;

/* Reads only the header and range table of rank's payload (p->buf holds
 * them; the ranges' data pointers are NULL). */
static msr_status_t payload_read_head(const source_t *src, int rank, payload_t *p)
{
    unsigned char fixed[MSR_TCKPT_PREFIX_LEN];
    uint64_t total = 0;
    size_t hl = 0;
    char what[64];
    memset(p, 0, sizeof *p);
    msr_status_t st = src->read(src->arg, rank, 0, fixed, sizeof fixed, &total);
    if (st == MSR_OK)
        st = msr_tckpt_head_len(fixed, sizeof fixed, &hl);
    if (st == MSR_OK) { /* name it by its file (libmsrun's step-S/rank-R.bin) */
        uint64_t step;
        memcpy(&step, fixed + 16, sizeof step);
        snprintf(what, sizeof what, "step-%llu/rank-%d.bin", (unsigned long long)step, rank);
    }
    if (st == MSR_OK && (hl < sizeof fixed || hl > total))
        st = msr_err(MSR_ERR_CORRUPT, "train: %s has a header of %zu bytes in %llu", what, hl,
                     (unsigned long long)total);
    if (st == MSR_OK && (p->buf = msr_malloc(hl)) == NULL)
        st = msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a header of %zu bytes", hl);
    if (st == MSR_OK)
        st = src->read(src->arg, rank, 0, p->buf, hl, NULL);
    if (st == MSR_OK)
        st = msr_tckpt_decode_head(p->buf, hl, (size_t)total, what, &p->h, &p->ranges, &p->n);
    if (st != MSR_OK)
        payload_free(p);
    p->partial = 1;
    return st;
}

static msr_status_t payload_fetch(msr_trainer_fetch_t fetch, void *arg, int rank, payload_t *p)
{
    size_t len;
    char what[48];
    memset(p, 0, sizeof *p);
    msr_status_t st = fetch(arg, rank, &p->buf, &len);
    if (st != MSR_OK)
        return st;
    snprintf(what, sizeof what, "the shard of rank %d", rank);
    st = msr_tckpt_decode(p->buf, len, what, &p->h, &p->ranges, &p->n);
    if (st != MSR_OK)
        payload_free(p);
    return st;
}

/* Whether p holds exactly the pieces this rank saves (map: its runs):
 * its ranges cut as msr_tckpt_encode cuts them. */
static int same_layout(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p)
{
    range_list_t l;
    if (saved_ranges(tr, map, &l) != MSR_OK)
        return 0; /* read every payload instead */
    uint32_t j = 0;
    int same = 1;
    for (size_t k = 0; k < l.n && same; k++) {
        for (uint64_t at = 0; at < l.r[k].n && same; at += MSR_TCKPT_PIECE_MAX, j++) {
            uint64_t c = MSR_MIN(l.r[k].n - at, (uint64_t)MSR_TCKPT_PIECE_MAX);
            same = j < p->n && p->ranges[j].lo == l.r[k].lo + at && p->ranges[j].n == c;
        }
    }
    msr_free(l.r);
    return same && j == p->n;
}

/* Copies the part of saved range r that this rank saves itself (its
 * optimizer's shard of the experts: parameters and moments), marking it in
 * cover (one flag per shard element). The other replicas' blocks of the
 * parameters come with experts_gather. */
static void experts_load(msr_trainer_t *tr, const msr_tckpt_range_t *r, uint8_t *cover)
{
    for (int k = 0; k < expert_ranges(tr); k++) {
        msr_tckpt_range_t mine = expert_range(tr, k);
        size_t lo = MSR_MAX(mine.lo, r->lo), hi = MSR_MIN(mine.lo + mine.n, r->lo + r->n);
        if (mine.n == 0 || lo >= hi)
            continue;
        size_t at = (size_t)(mine.m - tr->eopt->m) + (lo - mine.lo); /* in the shard */
        size_t from = lo - r->lo, n = hi - lo;
        memcpy(msr_moe_params(tr->model->moe) + tr->eshard_lo + at, r->params + from,
               n * sizeof(float));
        memcpy(tr->eopt->m + at, r->m + from, n * sizeof(float));
        memcpy(tr->eopt->v + at, r->v + from, n * sizeof(float));
        memset(cover + at, 1, n);
    }
}

/* The saved range a run of this rank's overlaps (msr_ckpt_map_fn). */
typedef struct apply_arg {
    msr_dp_t *dp;
    const msr_tckpt_range_t *r;
} apply_arg_t;

static int apply_run(void *arg, size_t lo, size_t glo, size_t n)
{
    apply_arg_t *a = arg;
    size_t off = glo - a->r->lo;
    msr_dp_piece_t piece = {lo, n, a->r->params + off, a->r->m + off, a->r->v + off};
    msr_dp_load_piece(a->dp, &piece);
    return 0;
}

/* Loads the parts of p's ranges this rank holds: flat ranges through the
 * map to local elements, experts into the shard (cover: NULL without). */
static void payload_apply(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p,
                          uint8_t *cover)
{
    for (uint32_t k = 0; k < p->n; k++) {
        const msr_tckpt_range_t *r = &p->ranges[k];
        if (r->lo >= whole_flat(tr)) {
            if (cover != NULL)
                experts_load(tr, r, cover);
            continue;
        }
        size_t n = MSR_MIN(r->n, whole_flat(tr) - r->lo); /* decode bounds lo + n */
        apply_arg_t a = {tr->dp, r};
        msr_ckpt_map_to_local(map, r->lo, n, apply_run, &a);
    }
}

/* msr_ckpt_map_fn: stops at the first part this rank holds, giving its
 * local start. */
static int first_held(void *arg, size_t lo, size_t glo, size_t n)
{
    (void)glo;
    (void)n;
    *(size_t *)arg = lo;
    return 1;
}

/* Whether this rank holds any element of saved range r. */
static int range_needed(msr_trainer_t *tr, const msr_ckpt_map_t *map, const msr_tckpt_range_t *r)
{
    size_t lo, n;
    if (r->lo >= whole_flat(tr)) {
        for (int k = 0; k < expert_ranges(tr); k++) {
            msr_tckpt_range_t mine = expert_range(tr, k);
            if (mine.n > 0 && msr_ckpt_overlap(mine.lo, mine.n, r->lo, r->n, &lo, &n))
                return 1;
        }
        return 0;
    }
    return msr_ckpt_map_to_local(map, r->lo, MSR_MIN(r->n, whole_flat(tr) - r->lo), first_held,
                                 &lo) != 0;
}

/* The name of the tensor of this rank's that holds a part of saved range
 * r (one range_needed accepted). */
static const char *tensor_of(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                             const msr_tckpt_range_t *r)
{
    size_t lo = 0;
    if (r->lo >= whole_flat(tr))
        return "experts";
    msr_ckpt_map_to_local(map, r->lo, MSR_MIN(r->n, whole_flat(tr) - r->lo), first_held, &lo);
    for (int k = 0; k < tr->model->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &tr->model->tensors[k];
        if (lo >= t->offset && lo < t->offset + t->count)
            return t->name;
    }
    return "?";
}

/* Reads the pieces of partial payload p (saved by rank) that hold
 * elements of this rank's, one at a time through a buffer of one piece
 * (at most MSR_TCKPT_PIECE_MAX elements), checks each against its CRC,
 * and loads them. */
static msr_status_t payload_read_apply(msr_trainer_t *tr, const msr_ckpt_map_t *map,
                                       const payload_t *p, const source_t *src, int rank,
                                       uint8_t *cover)
{
    float *buf = NULL;
    size_t cap = 0;
    msr_status_t st = MSR_OK;
    for (uint32_t k = 0; k < p->n && st == MSR_OK; k++) {
        msr_tckpt_range_t r = p->ranges[k];
        if (!range_needed(tr, map, &r))
            continue;
        size_t floats = 3 * (size_t)r.n;
        if (floats > cap) {
            msr_free(buf);
            cap = floats;
            if ((buf = msr_malloc(cap * sizeof *buf)) == NULL)
                return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a piece of %zu floats",
                               cap);
        }
        if ((st = src->read(src->arg, rank, r.offset, buf, floats * sizeof *buf, NULL)) != MSR_OK)
            break;
        r.params = buf;
        r.m = buf + r.n;
        r.v = buf + 2 * r.n;
        if (!msr_tckpt_piece_ok(&p->h, &r)) {
            st = msr_err(MSR_ERR_CORRUPT,
                         "train: step-%llu/rank-%d.bin: the piece of tensor %s (elements [%llu, "
                         "%llu) of the whole model) does not match its CRC",
                         (unsigned long long)p->h.step, rank, tensor_of(tr, map, &r),
                         (unsigned long long)r.lo, (unsigned long long)(r.lo + r.n));
            break;
        }
        payload_t one = {NULL, p->h, &r, 1, 0};
        payload_apply(tr, map, &one, cover);
    }
    msr_free(buf);
    return st;
}

/* Loads what this rank needs of payload p (saved by rank): from its bytes,
 * or, partial, by reading the pieces it needs. */
static msr_status_t payload_load(msr_trainer_t *tr, const msr_ckpt_map_t *map, const payload_t *p,
                                 const source_t *src, int rank, uint8_t *cover)
{
    if (p->partial)
        return payload_read_apply(tr, map, p, src, rank, cover);
    payload_apply(tr, map, p, cover);
    return MSR_OK;
}

/* Whether two payloads belong to the same checkpoint. */
static int same_checkpoint(const payload_t *a, const payload_t *b, int world)
{
    return a->h.step == b->h.step && a->h.adam_t == b->h.adam_t &&
           a->h.data_seed == b->h.data_seed && a->h.data_position == b->h.data_position &&
           a->h.num_params == b->h.num_params && a->h.world == (uint32_t)world &&
           b->h.world == (uint32_t)world && strcmp(a->h.meta, b->h.meta) == 0;
}

/* With model parallel, the dp groups of the world agree on the outcome
 * (all succeed or all fail), and the last stage gets the restored wte. */
static msr_status_t restore_agree(msr_trainer_t *tr, msr_status_t st)
{
    if (tr->mp == NULL)
        return st;
    if (tr->mesh->world != NULL) {
        int32_t ok = st == MSR_OK;
        msr_status_t cst =
            msr_comm_allreduce(tr->mesh->world, MSR_IN_PLACE, &ok, 1, MSR_DTYPE_I32, MSR_OP_MIN);
        if (cst != MSR_OK)
            return msr_err_call(cst, "train: agreeing on a restore");
        if (!ok && st == MSR_OK)
            return msr_err(MSR_ERR_CORRUPT,
                           "train: another rank could not restore its checkpoint shard");
        if (!ok)
            return st;
    }
    return st == MSR_OK ? msr_mp_sync_tied(tr->mp) : st;
}

/* What the ranks of the replica group agree on before loading anything,
 * each flag the minimum over the ranks (reduced as 3 int32s). */
typedef struct restore_flags {
    int32_t fetched;       /* the rank read and decoded its first shard */
    int32_t same_settings; /* that shard's meta, parameter count and world are this run's */
    int32_t own_layout;    /* it holds exactly the rank's pieces: no other shard is read */
} restore_flags_t;

_Static_assert(sizeof(restore_flags_t) == 3 * sizeof(int32_t), "reduced as 3 int32s");

/* The flags of this rank's first shard p0 (fetched with fetch_st, the
 * shard of rank first), agreed over the replica group. Fails when any rank
 * could not read its shard, or any shard has other settings (CONFIG). */
static msr_status_t restore_check(msr_trainer_t *tr, const msr_ckpt_map_t *map, const char *meta,
                                  int world, int first, msr_status_t fetch_st, const payload_t *p0,
                                  restore_flags_t *flags_p)
{
    msr_dp_t *dp = tr->dp;
    restore_flags_t f = {fetch_st == MSR_OK, 0, 0};
    if (f.fetched) {
        f.same_settings = strcmp(p0->h.meta, meta) == 0 && p0->h.num_params == total_params(tr) &&
                          p0->h.world == (uint32_t)world;
        f.own_layout =
            world == world_size(tr) && p0->h.rank == (uint32_t)first && same_layout(tr, map, p0);
    }
    int own_settings = f.same_settings;
    if (dp->comm != NULL) {
        msr_status_t cst =
            msr_comm_allreduce(dp->comm, MSR_IN_PLACE, &f, 3, MSR_DTYPE_I32, MSR_OP_MIN);
        if (cst != MSR_OK)
            return msr_err_call(cst, "train: agreeing on a checkpoint");
    }
    if (fetch_st != MSR_OK)
        return fetch_st;
    if (!f.fetched)
        return msr_err(MSR_ERR_CORRUPT, "train: another rank could not read its checkpoint shard");
    if (!own_settings) {
        size_t at = msr_tckpt_meta_diff(p0->h.meta, meta);
        return msr_err(MSR_ERR_CONFIG,
                       "train: the checkpoint of step %llu was written with other settings; "
                       "checkpoint: %s%.160s (%llu parameters, %u ranks); this run: %s%.160s "
                       "(%zu parameters, %d ranks)",
                       (unsigned long long)p0->h.step, at > 0 ? "..." : "", p0->h.meta + at,
                       (unsigned long long)p0->h.num_params, p0->h.world, at > 0 ? "..." : "",
                       meta + at, total_params(tr), world);
    }
    if (!f.same_settings)
        return msr_err(MSR_ERR_CONFIG,
                       "train: another rank's checkpoint shard was written with other settings");
    *flags_p = f;
    return MSR_OK;
}

/* The point a checkpoint resumes from, as a shard's header says. */
enum { POINT_STEP, POINT_ADAM_T, POINT_DATA_SEED, POINT_DATA_POSITION, POINT_N };

/* Every rank resumes from the same point, or none does: the step,
 * optimizer and sampler state of each rank's first shard p0, their maxima
 * and (negated) minima over the replica group, must be equal. */
static msr_status_t restore_same_point(msr_trainer_t *tr, const payload_t *p0)
{
    if (tr->dp->comm == NULL)
        return MSR_OK;
    struct {
        int64_t max[POINT_N];
        int64_t neg_min[POINT_N];
    } v = {{(int64_t)p0->h.step, (int64_t)p0->h.adam_t, (int64_t)p0->h.data_seed,
            (int64_t)p0->h.data_position}};
    _Static_assert(sizeof v == 2 * POINT_N * sizeof(int64_t), "reduced as int64s");
    int same = 1;
    for (int k = 0; k < POINT_N; k++)
        v.neg_min[k] = -v.max[k];
    msr_status_t st =
        msr_comm_allreduce(tr->dp->comm, MSR_IN_PLACE, &v, 2 * POINT_N, MSR_DTYPE_I64, MSR_OP_MAX);
    if (st != MSR_OK)
        return msr_err_call(st, "train: agreeing on a checkpoint");
    for (int k = 0; k < POINT_N; k++)
        same = same && v.max[k] == -v.neg_min[k];
    if (!same) {
        return msr_err(MSR_ERR_CORRUPT,
                       "train: the ranks' checkpoint shards disagree (step %lld..%lld, optimizer "
                       "step %lld..%lld, samples drawn %lld..%lld): not resuming from them",
                       (long long)-v.neg_min[POINT_STEP], (long long)v.max[POINT_STEP],
                       (long long)-v.neg_min[POINT_ADAM_T], (long long)v.max[POINT_ADAM_T],
                       (long long)-v.neg_min[POINT_DATA_POSITION],
                       (long long)v.max[POINT_DATA_POSITION]);
    }
    return MSR_OK;
}

/* Applies the shards of the saving world's other ranks (the rank's own
 * layout differs from the one that saved): each must be of p0's
 * checkpoint. One payload (or, reading in part, one header and one piece)
 * is held at a time. */
static msr_status_t restore_other_ranks(msr_trainer_t *tr, const msr_ckpt_map_t *map, int world,
                                        int first, const source_t *src, const payload_t *p0,
                                        uint8_t *cover)
{
    msr_status_t st = MSR_OK;
    for (int r = 0; r < world && st == MSR_OK; r++) {
        payload_t p;
        if (r == first)
            continue;
        st = src->read != NULL ? payload_read_head(src, r, &p)
                               : payload_fetch(src->fetch, src->arg, r, &p);
        if (st != MSR_OK)
            break;
        if (!same_checkpoint(p0, &p, world) || p.h.rank != (uint32_t)r)
            st = msr_err(MSR_ERR_CORRUPT,
                         "train: the shards of ranks %d and %d belong to different checkpoints",
                         first, r);
        else
            st = payload_load(tr, map, &p, src, r, cover);
        payload_free(&p);
    }
    return st;
}

/* Loads the checkpoint whose first shard is p0 (the shard of rank first):
 * with own_layout, from p0 alone, else from every shard that may hold a
 * piece of this rank's. Whatever fails, every rank reaches
 * msr_dp_load_end, which agrees on the outcome. */
static msr_status_t restore_read(msr_trainer_t *tr, const msr_ckpt_map_t *map, int world, int first,
                                 const source_t *src, const payload_t *p0, int own_layout)
{
    msr_status_t read_st = msr_dp_load_begin(tr->dp);
    size_t ecount = tr->model->moe != NULL ? tr->eshard_hi - tr->eshard_lo : 0;
    uint8_t *cover = ecount > 0 ? msr_calloc(ecount, 1) : NULL;
    if (read_st == MSR_OK && ecount > 0 && cover == NULL)
        read_st = msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for %zu expert flags", ecount);
    if (read_st == MSR_OK)
        read_st = payload_load(tr, map, p0, src, first, cover);
    if (read_st == MSR_OK && !own_layout)
        read_st = restore_other_ranks(tr, map, world, first, src, p0, cover);
    for (size_t i = 0; i < ecount && read_st == MSR_OK; i++) {
        if (!cover[i])
            read_st = msr_err(MSR_ERR_CORRUPT,
                              "train: the checkpoint lacks expert element %zu of this rank's", i);
    }
    msr_free(cover);
    msr_status_t st = msr_dp_load_end(tr->dp, own_layout, read_st != MSR_OK);
    if (st != MSR_OK)
        return read_st != MSR_OK ? read_st : st;
    if (tr->model->moe != NULL)
        return experts_gather(tr);
    return MSR_OK;
}

msr_status_t msr_trainer_restore_parts(msr_trainer_t *tr, const char *meta, int world,
                                       msr_trainer_fetch_t fetch, msr_trainer_read_t read,
                                       void *arg)
{
    int first = world == world_size(tr) ? world_rank(tr) : 0;
    source_t src = {fetch, read, arg};
    payload_t p0;
    msr_ckpt_map_t map;
    restore_flags_t flags = {0, 0, 0};
    msr_status_t st = msr_ckpt_map_build(tr->model, &map);
    if (st != MSR_OK) /* every rank still reaches restore_agree */
        memset(&p0, 0, sizeof p0);
    else if (read != NULL && world != world_size(tr)) /* not this layout: only what it needs */
        st = payload_read_head(&src, first, &p0);
    else
        st = payload_fetch(fetch, arg, first, &p0);
    st = restore_check(tr, &map, meta, world, first, st, &p0, &flags);
    if (st == MSR_OK)
        st = restore_same_point(tr, &p0);
    if (st == MSR_OK)
        st = restore_read(tr, &map, world, first, &src, &p0, flags.own_layout);
    if (st == MSR_OK) {
        tr->dp->opt->t = p0.h.adam_t;
        if (tr->eopt != NULL)
            tr->eopt->t = p0.h.adam_t;
        tr->sampler.seed = p0.h.data_seed;
        tr->sampler.position = p0.h.data_position;
        tr->step = p0.h.step;
    }
    payload_free(&p0);
    msr_ckpt_map_free(&map);
    return restore_agree(tr, st);
}

msr_status_t msr_trainer_restore(msr_trainer_t *tr, const char *meta, int world,
                                 msr_trainer_fetch_t fetch, void *arg)
{
    return msr_trainer_restore_parts(tr, meta, world, fetch, NULL, arg);
}
