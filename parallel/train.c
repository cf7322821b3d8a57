/* The training step (see train.h); its checkpoint shard is in train_ckpt.c. */
#include "layout/layout.h"
#include "parallel/train.h"
#include "parallel/train_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
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
           cfg->mp.head_chunk != 0 || cfg->mp_always;
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
        return msr_err(MSR_ERR_CONFIG,
                       "the data (%zu tokens) must be longer than the sequence (%d)", data->size,
                       cfg->model.max_seq);
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
    if (cfg->par.grad_bf16 && cfg->par.zero != 0) {
        return msr_err(MSR_ERR_CONFIG,
                       "gradients reduced in bf16 need ZeRO stage 0, not %d (ZeRO's "
                       "reduce-scatters sum in fp32)",
                       cfg->par.zero);
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

/* The experts' groups of a MoE model: dp ranks [k * ep, (k + 1) * ep)
 * share their work (the ep group), the dp ranks of one ep index (and under
 * cp every cp rank of theirs: mesh not NULL) hold the same experts and sum
 * their gradients (the replica group, ranked as the dp x cp group). The
 * splits are collective: a creation makes them before anything a rank may
 * fail to allocate, and every rank takes part in both whatever the first
 * one's outcome (a split agrees on its own failures), so that none is
 * left waiting in one. Errors: the splits'. */
static msr_status_t experts_split(const msr_train_config_t *cfg, msr_comm_t *comm, int rank,
                                  const msr_mesh_t *mesh, msr_comm_t **ep_p, msr_comm_t **rep_p)
{
    int ep = cfg->ep > 1 ? cfg->ep : 1;
    msr_status_t st = MSR_OK, rst = MSR_OK;
    if (cfg->model.moe.experts == 0)
        return MSR_OK;
    if (ep > 1 && (st = msr_comm_split(comm, rank / ep, rank, ep_p)) != MSR_OK)
        st = msr_err_call(st, "train: the expert-parallel group of ep %d", ep);
    msr_comm_t *rcomm = comm;
    int reps = cfg->dp / ep, rkey = rank;
    if (mesh != NULL && mesh->cp > 1) {
        rcomm = mesh->dcp_comm;
        reps *= mesh->cp;
        rkey = rank * mesh->cp + mesh->cp_rank;
    }
    if (reps > 1 && (rst = msr_comm_split(rcomm, rank % ep, rkey, rep_p)) != MSR_OK)
        rst = msr_err_call(rst, "train: the group of the ranks holding the same experts");
    return st != MSR_OK ? st : rst;
}

/* The experts of a MoE model over the groups experts_split made: they get
 * their own optimizer, over the whole store at ZeRO 0, else over this
 * rank's block of it in the replica group (ZeRO-1 for the experts:
 * gradients reduce-scattered, the block updated, the parameters
 * all-gathered); under ZeRO-3 with replicas the store itself is sharded
 * per MoE block (train_experts.c). Local: the creation's agreement tells
 * the other ranks of a failure. */
static msr_status_t experts_state(msr_trainer_t *tr)
{
    msr_moe_t *moe = tr->model->moe;
    msr_status_t st;
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
    /* the experts' buffers on dp's device, or mp's on its path when named */
    msr_moe_layout_t lay = {tr->ep_comm, NULL, held, 0, NULL, 0, tr->cfg.par.device};
    if (tr->mesh != NULL) { /* set before this only on the model-parallel path */
        lay.device = tr->cfg.mp.device != NULL ? tr->cfg.mp.device : lay.device;
        lay.tp_comm = tr->mesh->tp_comm;
        lay.router_once = tr->cfg.mp.sp;
        lay.cp_comm = tr->mesh->cp_comm;
        lay.cp_seq = tr->cfg.model.max_seq / tr->mesh->cp;
        /* full recompute runs each block's forward again just before its
         * backward: one slot of kept state for all the blocks */
        lay.shared = tr->cfg.mp.recompute == MSR_MP_RECOMPUTE_FULL;
    }
    st = msr_moe_set_layout(moe, &lay);
    msr_free(held);
    if (st != MSR_OK)
        return st;
    size_t count = msr_moe_count(moe);
    tr->rep_size = tr->rep_comm != NULL ? msr_comm_size(tr->rep_comm) : 1;
    tr->rep_rank = tr->rep_comm != NULL ? msr_comm_rank(tr->rep_comm) : 0;
    /* under the parameters' disk offload the experts' go to a file of
     * their own (under ZeRO-3 with replicas each rank's shares of them) */
    int disk = tr->cfg.par.params_offload.mode == MSR_OFFLOAD_DISK && msr_moe_held(moe) > 0;
    if (tr->cfg.par.zero >= 3 && tr->rep_size > 1 && msr_moe_held(moe) > 0)
        return msr_train_experts_shard_local(tr);
    tr->eshard_lo = 0;
    tr->eshard_hi = count;
    if (tr->cfg.par.zero > 0 && tr->rep_size > 1) {
        tr->eblk = (count + (size_t)tr->rep_size - 1) / (size_t)tr->rep_size;
        tr->eshard_lo = MSR_MIN(count, (size_t)tr->rep_rank * tr->eblk);
        tr->eshard_hi = MSR_MIN(count, tr->eshard_lo + tr->eblk);
        /* (in their file: reduced in place and gathered a block at a time) */
        if (!disk &&
            (tr->escratch = msr_calloc(tr->eblk * (size_t)tr->rep_size, sizeof(float))) == NULL)
            return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for %zu expert elements",
                           tr->eblk * (size_t)tr->rep_size);
    }
    if (disk) {
        if ((st = msr_train_experts_disk(tr)) != MSR_OK)
            return st;
    } else {
        msr_moe_init_params(moe, tr->cfg.seed);
    }
    int n;
    const msr_gpt_tensor_t *t = msr_moe_tensors(moe, &n);
    msr_adamw_range_t own = {tr->eshard_lo, tr->eshard_hi};
    return msr_adamw_create_ranges(&tr->cfg.adamw, t, n, &own, own.lo < own.hi, &tr->eopt);
}

/* experts_state, with the moments moved to their file under the
 * optimizer's disk offload. */
static msr_status_t experts_create(msr_trainer_t *tr)
{
    msr_status_t st = experts_state(tr);
    return st != MSR_OK ? st : msr_train_experts_offload(tr);
}

/* This rank's block of the experts' gradients, after experts_reduce (the
 * optimizer's shard space). */
static float *expert_grad_shard(msr_trainer_t *tr)
{
    return tr->escratch != NULL ? tr->escratch + (size_t)tr->rep_rank * tr->eblk
           : tr->epf != NULL    ? tr->ed_grads + (size_t)tr->rep_rank * tr->eblk
                                : msr_moe_grads(tr->model->moe);
}

/* ZeRO-1 for the experts, after the update: every replica gets the others'
 * blocks of the parameters. */
msr_status_t msr_train_experts_gather(msr_trainer_t *tr)
{
    if (tr->ed_gath != NULL) /* in their file: a block at a time */
        return msr_train_experts_disk_gather(tr);
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
 * update (counted by the first replica of each expert only: the first ep
 * group's cp rank 0). */
static msr_status_t experts_reduce(msr_trainer_t *tr)
{
    msr_moe_t *moe = tr->model->moe;
    float *g = tr->epf != NULL ? tr->ed_grads : msr_moe_grads(moe);
    size_t n = msr_moe_count(moe);
    if (tr->eblk > 0 && tr->egf != NULL) /* in their file: a block at a time */
        return msr_train_experts_disk_reduce(tr);
    if (tr->eblk > 0) { /* ZeRO: each replica gets its block's sum */
        float *all = g; /* in their file: ed_grads, padded, in place */
        if (tr->escratch != NULL) {
            all = tr->escratch;
            memcpy(all, g, n * sizeof(float));
            memset(all + n, 0, (tr->eblk * (size_t)tr->rep_size - n) * sizeof(float));
        }
        float *mine = expert_grad_shard(tr);
        msr_status_t st =
            msr_comm_reduce_scatter(tr->rep_comm, all, mine, tr->eblk, MSR_DTYPE_F32, MSR_OP_SUM);
        if (st != MSR_OK)
            return msr_err_call(st, "train: the reduce-scatter of %zu expert gradients", n);
        double sumsq = 0.0; /* every element in exactly one replica's block */
        for (size_t i = 0; i < tr->eshard_hi - tr->eshard_lo; i++)
            sumsq += (double)mine[i] * mine[i];
        tr->dp->extra_sumsq = sumsq;
        return MSR_OK;
    }
    if (tr->rep_comm != NULL) { /* (never with the gradients in their file) */
        msr_status_t st =
            msr_comm_allreduce(tr->rep_comm, MSR_IN_PLACE, g, n, MSR_DTYPE_F32, MSR_OP_SUM);
        if (st != MSR_OK)
            return msr_err_call(st, "train: the allreduce of %zu expert gradients", n);
    }
    double sumsq = 0.0;
    if (tr->egf != NULL) { /* read back a block at a time */
        msr_status_t st = msr_train_experts_disk_sumsq(tr, &sumsq);
        if (st != MSR_OK)
            return st;
    }
    for (size_t i = 0; g != NULL && i < n; i++)
        sumsq += (double)g[i] * g[i];
    int ep = tr->cfg.ep > 1 ? tr->cfg.ep : 1;
    int first = tr->cfg.dp_rank < ep && (tr->mesh == NULL || tr->mesh->cp_rank == 0);
    tr->dp->extra_sumsq = first ? sumsq : 0.0;
    return MSR_OK;
}

/* The model's (and its experts') kernels, the configured table, and its
 * products in the configured precision, once the MoE state is in place;
 * they keep the weights' roundings for a step where the weights stay in
 * the flat parameter buffer (not under ZeRO-3, nor with the parameters'
 * offload: model/layers.h). */
static msr_status_t set_precision(msr_trainer_t *tr)
{
    msr_status_t st = msr_gpt_set_kernels(tr->model, tr->cfg.kernels);
    if (st != MSR_OK)
        return st;
    if (tr->cfg.precision == MSR_PRECISION_FP32)
        return MSR_OK;
    st = msr_gpt_set_precision(tr->model, tr->cfg.precision);
    if (st == MSR_OK && tr->model->params != NULL && msr_dp_params_store(tr->dp) == NULL)
        st = msr_products_keep_weights(tr->model->prod, tr->model->params, tr->model->num_params);
    if (st != MSR_OK)
        return msr_err(st, "train: cannot run the matrix products in %s",
                       msr_precision_name(tr->cfg.precision));
    return MSR_OK;
}

/* The end of every creation: one agreement over the world (comm; NULL:
 * alone) on each rank's outcome st (msr_dp_agree), so that when one rank
 * failed part way (out of memory) every rank fails at once and alike. */
static msr_status_t create_agree(msr_comm_t *comm, msr_status_t st)
{
    return msr_dp_agree(comm, st, "train", "trainer");
}

/* A trainer with its experts' groups (experts_split, made first) and the
 * step's token buffers of n tokens; *tr_p set even on failure (NULL when
 * the trainer itself could not be allocated), for the caller to agree
 * and then destroy. */
static msr_status_t trainer_alloc(const msr_train_config_t *cfg, msr_comm_t *comm, int rank,
                                  const msr_mesh_t *mesh, size_t n, msr_trainer_t **tr_p)
{
    msr_comm_t *ep = NULL, *rep = NULL;
    msr_status_t st = experts_split(cfg, comm, rank, mesh, &ep, &rep);
    msr_trainer_t *tr = *tr_p = msr_calloc(1, sizeof *tr);
    if (tr == NULL) {
        msr_comm_destroy(rep);
        msr_comm_destroy(ep);
        return st != MSR_OK ? st : msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a trainer");
    }
    tr->ep_comm = ep;
    tr->rep_comm = rep;
    tr->cfg = *cfg;
    tr->mesh = mesh;
    tr->sampler.seed = cfg->seed;
    if (st != MSR_OK)
        return st;
    tr->inputs = msr_calloc(n, sizeof(int));
    tr->targets = msr_calloc(n, sizeof(int));
    if (tr->inputs == NULL || tr->targets == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train: out of memory for a step of %zu tokens", n);
    return MSR_OK;
}

/* The device of the model's buffers: the runtime's (dp's on the
 * data-parallel path, mp's on the model-parallel one) where the host can
 * reach its memory; else the heap's, and the runtime refuses the device
 * by name (dp.c, mp.c). */
static const msr_device_t *model_device(const msr_device_t *dev)
{
    return dev != NULL && msr_device_is_host(dev) ? dev : NULL;
}

/* The data-parallel trainer's parts, each rank on its own (no collective
 * after the experts' splits): the caller agrees on the outcome. */
static msr_status_t create_dp(const msr_train_config_t *cfg, msr_comm_t *comm, int rank,
                              msr_trainer_t **tr_p)
{
    size_t N = (size_t)cfg->micro_batch * (size_t)cfg->model.max_seq;
    msr_status_t st = trainer_alloc(cfg, comm, rank, NULL, N, tr_p);
    msr_trainer_t *tr = *tr_p;
    if (st != MSR_OK)
        return st;
    tr->cfg.mp.stage_layers = NULL; /* the whole model: one stage */
    st = msr_gpt_create_on(model_device(cfg->par.device), &cfg->model, NULL, cfg->micro_batch,
                           msr_dp_model_flags(cfg->par.zero), &tr->model);
    if (st == MSR_OK)
        st = msr_dp_create(&cfg->par, comm, tr->model, &cfg->adamw, cfg->seed, &tr->dp);
    if (st == MSR_OK && tr->model->moe != NULL)
        st = experts_create(tr);
    return st != MSR_OK ? st : set_precision(tr);
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
    msr_trainer_t *tr = NULL;
    msr_status_t st = create_agree(comm, create_dp(cfg, comm, rank, &tr));
    if (st != MSR_OK) {
        msr_trainer_destroy(tr);
        return st;
    }
    tr->data = data;
    *tr_p = tr;
    return MSR_OK;
}

/* The model-parallel trainer's parts, each rank on its own as create_dp's
 * (the tied embedding's first sync comes after the agreement, with the
 * buffers of its ZeRO-3 gather reserved before it). */
static msr_status_t create_mp(const msr_train_config_t *cfg, const msr_mesh_t *mesh,
                              msr_trainer_t **tr_p)
{
    int cp = cfg->cp > 1 ? cfg->cp : 1;
    size_t N = (size_t)cfg->micro_batch * (size_t)cfg->model.max_seq * (size_t)cfg->grad_accum;
    msr_status_t st = trainer_alloc(cfg, mesh->dp_comm, mesh->dp_rank, mesh, N, tr_p);
    msr_trainer_t *tr = *tr_p;
    if (st != MSR_OK)
        return st;
    tr->cfg.mp = mp_config(cfg);
    msr_gpt_part_t part = {mesh->tp,      mesh->tp_rank,     mesh->pp,
                           mesh->pp_rank, tr->cfg.mp.chunks, cfg->mp.stage_layers};
    st = msr_gpt_create_on(model_device(cfg->mp.device), &cfg->model, &part, 0,
                           msr_dp_model_flags(cfg->par.zero), &tr->model);
    if (st != MSR_OK)
        return st;
    tr->cfg.mp.stage_layers = tr->model->part.stage_layers; /* the caller's may go */
    /* the replicas of this part: dp x cp (parameters are replicated over cp) */
    st = msr_dp_create(&cfg->par, mesh->dcp_comm, tr->model, &cfg->adamw, cfg->seed, &tr->dp);
    if (st != MSR_OK)
        return st;
    msr_dp_set_model_parallel(tr->dp, mesh->tp_comm, mesh->tp_rank, mesh->pp_comm);
    if (cfg->model.moe.experts > 0) {
        /* the MoE state keeps each micro-batch's routing from its forward
         * to its backward (one frame when full recompute runs it again) */
        int frames = tr->cfg.mp.recompute == MSR_MP_RECOMPUTE_FULL ? 1 : cfg->grad_accum;
        st = msr_moe_create_cp(&cfg->model, cfg->micro_batch * cfg->model.max_seq / cp, frames, cp,
                               &tr->model->moe);
        if (st != MSR_OK || (st = experts_create(tr)) != MSR_OK)
            return st;
    }
    /* before msr_mp_create: its block takes the model's products and kernels */
    if ((st = set_precision(tr)) != MSR_OK ||
        (st = msr_mp_create(&tr->cfg.mp, mesh, tr->model, &tr->mp)) != MSR_OK)
        return st;
    msr_mp_set_dp(tr->mp, tr->dp);
    /* the first send of the tied embedding comes after the agreement:
     * under ZeRO-3 its gather's buffers are taken here, before it */
    return msr_mp_tied_reserve(tr->mp);
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
    msr_trainer_t *tr = NULL;
    msr_status_t st = create_agree(mesh->world, create_mp(cfg, mesh, &tr));
    if (st == MSR_OK)
        st = msr_mp_sync_tied(tr->mp);
    if (st != MSR_OK) {
        msr_trainer_destroy(tr);
        return st;
    }
    tr->data = data;
    *tr_p = tr;
    return MSR_OK;
}

msr_status_t msr_trainer_init_params(msr_trainer_t *tr)
{
    if (!msr_dp_init_left(&tr->cfg.par))
        return MSR_OK;
    msr_train_gate(tr);
    msr_dp_init_params(tr->dp, tr->cfg.seed);
    return tr->mp != NULL ? msr_mp_sync_tied(tr->mp) : MSR_OK;
}

void msr_trainer_destroy(msr_trainer_t *tr)
{
    if (tr == NULL)
        return;
    msr_mp_destroy(tr->mp);
    msr_adamw_destroy(tr->eopt);
    msr_free(tr->escratch);
    msr_train_experts_free(tr);
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

static msr_status_t step(msr_trainer_t *tr, double *loss_p)
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
    if (tr->epf != NULL)
        msr_train_experts_disk_zero(tr);
    if (tr->ez && (st = msr_train_experts_zero(tr)) != MSR_OK)
        return st;
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
    if (tr->ez && (st = msr_train_experts_norm(tr)) != MSR_OK)
        return st;
    if (!tr->ez && model->moe != NULL && (st = experts_reduce(tr)) != MSR_OK)
        return st;
    float lr = msr_trainer_lr(tr, tr->step);
    msr_train_gate(tr); /* the state is written from here on */
    st = msr_dp_update(dp, lr, c->grad_clip, loss_sum, &total, &norm);
    if (st == MSR_OK && tr->epf != NULL) {
        st = msr_train_experts_disk_update(tr, lr, msr_clip_scale(norm, c->grad_clip));
    } else if (st == MSR_OK && model->moe != NULL) {
        st = msr_train_experts_update(
            tr, tr->ez ? tr->ez_params : msr_moe_params(model->moe) + tr->eshard_lo,
            tr->ez ? tr->ez_grads : expert_grad_shard(tr), lr, msr_clip_scale(norm, c->grad_clip));
        if (st == MSR_OK)
            st = msr_train_experts_gather(tr);
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

/* The products keep each weight's rounding from its first product of the
 * step to the optimizer's update (model/layers.h), which writes them. */
msr_status_t msr_trainer_step(msr_trainer_t *tr, double *loss_p)
{
    msr_products_weights_begin(tr->model->prod);
    msr_status_t st = step(tr, loss_p);
    msr_products_weights_end(tr->model->prod);
    return st;
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

msr_status_t msr_trainer_params_each(msr_trainer_t *tr, msr_dp_seg_fn fn, void *arg)
{
    return msr_dp_gather_each(tr->dp, fn, arg);
}
