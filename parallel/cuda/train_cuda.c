/* The training step on a CUDA GPU (see train_cuda.h). */
#include "parallel/cuda/train_cuda.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "model/err_call.h"

void msr_cuda_trainer_log_init(const char *prog, int node, int rank)
{
    msr_log_init(prog, node, rank);
}

/* --offload optimizer=host: the update on the host, its master copy of
 * the parameters from params (P floats); with params=host too, the
 * pinned host memory for the gradients. */
static msr_status_t host_optimizer(msr_cuda_trainer_t *tr, const float *params)
{
    const msr_train_config_t *c = &tr->cfg;
    size_t P = tr->layout->num_params;
    msr_status_t st = msr_device_cuda_create(tr->device, &tr->hdev);
    if (st != MSR_OK)
        return msr_err_call(st, "train_cuda: --offload optimizer=host: the device interface");
    st = msr_host_adamw_create(tr->hdev, &c->adamw, tr->layout->tensors, tr->layout->num_tensors, P,
                               c->par.offload.chunk_bytes / sizeof(float), params, &tr->hopt);
    if (st != MSR_OK)
        return msr_err_prefix(st, "train_cuda: --offload optimizer=host");
    if (c->par.params_offload.mode == MSR_OFFLOAD_HOST &&
        (st = msr_device_host_alloc(tr->hdev, P * sizeof(float), (void **)&tr->hgrads)) != MSR_OK)
        return msr_err_call(st,
                            "train_cuda: --offload params=host: pinned memory for %zu "
                            "gradients",
                            P);
    return MSR_OK;
}

/* The model on the device: with the blocks in host memory (its parameters
 * the host optimizer's master copy), else whole, from init. */
static msr_status_t make_model(msr_cuda_trainer_t *tr, const float *init)
{
    const msr_train_config_t *cfg = &tr->cfg;
    const msr_gpt_t *lay = tr->layout;
    msr_status_t st;
    if (cfg->par.offload.mode == MSR_OFFLOAD_HOST && (st = host_optimizer(tr, init)) != MSR_OK)
        return st;
    if (tr->hgrads != NULL)
        return msr_cuda_gpt_create_offload(&cfg->model, cfg->micro_batch, tr->device, lay->tensors,
                                           lay->num_tensors, tr->hopt->params, tr->hgrads,
                                           &tr->model);
    st = msr_cuda_gpt_create(&cfg->model, cfg->micro_batch, tr->device, lay->tensors,
                             lay->num_tensors, &tr->model);
    if (st == MSR_OK)
        st = msr_cuda_gpt_set_params(tr->model, init);
    if (st == MSR_OK && tr->hopt != NULL)
        msr_cuda_gpt_free_moments(tr->model);
    return st;
}

msr_status_t msr_cuda_trainer_create(const msr_train_config_t *cfg, const msr_dataset_t *data,
                                     msr_comm_t *comm, msr_cuda_trainer_t **tr_p)
{
    if (msr_train_config_check(cfg, data) != MSR_OK)
        return msr_err_prefix(MSR_ERR_CONFIG, "train_cuda");
    int size = comm != NULL ? msr_comm_size(comm) : 1,
        rank = comm != NULL ? msr_comm_rank(comm) : 0;
    if (cfg->par.offload.mode == MSR_OFFLOAD_DISK)
        return msr_err(MSR_ERR_CONFIG, "train_cuda: the optimizer's state on disk is for CPU "
                                       "ranks (host memory is for GPU ranks)");
    if (cfg->par.params_offload.mode == MSR_OFFLOAD_DISK ||
        cfg->par.grads_offload.mode != MSR_OFFLOAD_NONE)
        return msr_err(MSR_ERR_CONFIG, "train_cuda: parameters and gradients on disk are for CPU "
                                       "ranks (params=host is for GPU ranks)");
    if (cfg->par.params_offload.mode == MSR_OFFLOAD_HOST &&
        cfg->par.offload.mode != MSR_OFFLOAD_HOST)
        return msr_err(MSR_ERR_CONFIG, "train_cuda: the parameters in host memory are updated "
                                       "there: params=host needs optimizer=host");
    if (cfg->par.grad_bf16)
        return msr_err(MSR_ERR_CONFIG, "train_cuda: gradients are summed in fp32 on GPU ranks "
                                       "(bf16 sums are for CPU ranks)");
    if (cfg->dp != size || cfg->dp_rank != rank || cfg->par.zero != 0)
        return msr_err(MSR_ERR_CONFIG,
                       "train_cuda: dp %d (rank %d) zero %d: needs a communicator of %d ranks (it "
                       "has %d, rank %d) and ZeRO stage 0",
                       cfg->dp, cfg->dp_rank, cfg->par.zero, cfg->dp, size, rank);
    msr_cuda_trainer_t *tr = msr_calloc(1, sizeof *tr);
    if (tr == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "train_cuda: out of memory for a trainer");
    msr_status_t st = MSR_ERR_NO_MEMORY;
    float *init = NULL;
    tr->cfg = *cfg;
    tr->data = data;
    tr->comm = comm;
    tr->sampler.seed = cfg->seed;
    size_t N = (size_t)cfg->micro_batch * (size_t)cfg->model.max_seq;
    tr->inputs = msr_calloc(N, sizeof(int));
    tr->targets = msr_calloc(N, sizeof(int));
    if (tr->inputs == NULL || tr->targets == NULL) {
        msr_err_set("train_cuda: out of memory for a micro-batch of %zu tokens", N);
        goto err_destroy;
    }
    /* the CPU model's tensor table and initialisation, without its buffers
     * (its activations for one sequence are allocated but never touched) */
    st = msr_gpt_create_ex(&cfg->model, 1, MSR_GPT_NO_PARAMS | MSR_GPT_NO_GRADS, &tr->layout);
    if (st != MSR_OK) {
        msr_err_prefix(st, "train_cuda");
        goto err_destroy;
    }
    if (comm != NULL) {
        if ((st = msr_comm_device(comm, 0, &tr->dcomm)) != MSR_OK) {
            msr_err_call(st, "train_cuda: making the device communicator");
            goto err_destroy;
        }
        tr->device = msr_comm_gpu(tr->dcomm);
    } else {
        int count;
        if ((st = msr_cuda_device_count(&count)) != MSR_OK)
            goto err_destroy;
        tr->device = 0;
    }
    size_t P = tr->layout->num_params;
    if ((init = msr_malloc(P * sizeof(float))) == NULL) {
        st = msr_err(MSR_ERR_NO_MEMORY, "train_cuda: out of memory for %zu parameters", P);
        goto err_destroy;
    }
    msr_gpt_init_range(tr->layout, cfg->seed, 0, P, init);
    if ((st = make_model(tr, init)) != MSR_OK)
        goto err_destroy;
    if ((st = msr_cuda_gpt_set_precision(tr->model, cfg->precision)) != MSR_OK)
        goto err_destroy;
    tr->fused_attention = msr_cuda_gpt_fused_attention(tr->model);
    tr->device_bytes = msr_cuda_gpt_device_bytes(tr->model);
    tr->reqs = msr_calloc((size_t)cfg->model.layers + 2, sizeof *tr->reqs);
    if (tr->reqs == NULL) {
        st = msr_err(MSR_ERR_NO_MEMORY, "train_cuda: out of memory for %d gradient buckets",
                     cfg->model.layers + 2);
        goto err_destroy;
    }
    msr_free(init);
    MSR_DEBUG("train_cuda: rank %d on GPU %d, %zu parameters, %zu bytes of device memory%s%s", rank,
              tr->device, P, tr->device_bytes, tr->dcomm != NULL ? ", gradients over " : "",
              tr->dcomm != NULL ? msr_comm_backend(tr->dcomm) : "");
    *tr_p = tr;
    return MSR_OK;

err_destroy:
    msr_free(init);
    msr_cuda_trainer_destroy(tr);
    return st;
}

void msr_cuda_trainer_destroy(msr_cuda_trainer_t *tr)
{
    if (tr == NULL)
        return;
    /* the communicator first: its operations read the model's gradients */
    msr_comm_destroy(tr->dcomm);
    /* the model next: its copies read the host optimizer's parameters */
    msr_cuda_gpt_destroy(tr->model);
    if (tr->hgrads != NULL)
        msr_device_host_free(tr->hdev, tr->hgrads);
    msr_host_adamw_destroy(tr->hopt);
    msr_device_destroy(tr->hdev);
    msr_gpt_destroy(tr->layout);
    msr_free(tr->reqs);
    msr_free(tr->targets);
    msr_free(tr->inputs);
    msr_free(tr);
}

float msr_cuda_trainer_lr(const msr_cuda_trainer_t *tr, uint64_t step)
{
    if (tr->cfg.warmup > 0 && step < (uint64_t)tr->cfg.warmup)
        return tr->cfg.lr * (float)(step + 1) / (float)tr->cfg.warmup;
    return tr->cfg.lr;
}

/* Starts the allreduce (sum, in place) of gradient elements [lo, hi) on the
 * device communicator's stream, after the work queued on the model's stream
 * so far (which finishes them). */
static msr_status_t post_bucket(msr_cuda_trainer_t *tr, size_t lo, size_t hi)
{
    msr_status_t st = msr_cuda_gpt_order(tr->model, msr_comm_stream(tr->dcomm));
    if (st != MSR_OK)
        return st;
    float *g = msr_cuda_gpt_grads_device(tr->model);
    st = msr_comm_iallreduce(tr->dcomm, MSR_IN_PLACE, g + lo, hi - lo, MSR_DTYPE_F32, MSR_OP_SUM,
                             &tr->reqs[tr->nreqs]);
    if (st != MSR_OK)
        return msr_err_call(st, "train_cuda: starting the allreduce of a gradient bucket");
    tr->nreqs++;
    return MSR_OK;
}

/* msr_cuda_ready_fn of the last micro-batch's backward: the segments come
 * from the end of the buffer down, so the ready ones not yet posted are one
 * range [pend_lo, pend_hi); a bucket goes once it holds bucket_bytes, and
 * the rest with segment 0. */
static msr_status_t on_ready(void *arg, int seg)
{
    msr_cuda_trainer_t *tr = arg;
    size_t off, n;
    msr_cuda_gpt_segment(tr->model, seg, &off, &n);
    if (tr->pend_lo == tr->pend_hi)
        tr->pend_hi = off + n;
    tr->pend_lo = off;
    if ((tr->pend_hi - tr->pend_lo) * sizeof(float) < tr->cfg.par.bucket_bytes && seg != 0)
        return MSR_OK;
    msr_status_t st = post_bucket(tr, tr->pend_lo, tr->pend_hi);
    tr->pend_hi = tr->pend_lo;
    return st;
}

/* AdamW step t on the device, with its constants as msr_adamw_begin's. */
static msr_status_t device_adamw(msr_cuda_trainer_t *tr, uint64_t t, float lr, float scale)
{
    const msr_adamw_config_t *a = &tr->cfg.adamw;
    msr_status_t st;
    double bc1 = 1.0 - pow(a->beta1, (double)t);
    double bc2 = 1.0 - pow(a->beta2, (double)t);
    msr_cuda_adamw_step_t s = {
        .beta1 = (float)a->beta1,
        .beta2 = (float)a->beta2,
        .one_minus_beta1 = (float)(1.0 - a->beta1),
        .one_minus_beta2 = (float)(1.0 - a->beta2),
        .eps = (float)a->eps,
        .step_size = (float)((double)lr / bc1),
        .bc2_sqrt = (float)sqrt(bc2),
        .decay_keep = (float)(1.0 - (double)lr * a->weight_decay),
        .grad_scale = scale,
    };
    if ((st = msr_cuda_gpt_adamw(tr->model, &s)) != MSR_OK)
        return st;
    return msr_cuda_gpt_sync(tr->model);
}

msr_status_t msr_cuda_trainer_step(msr_cuda_trainer_t *tr, double *loss_p)
{
    const msr_train_config_t *c = &tr->cfg;
    int B = c->micro_batch, T = c->model.max_seq;
    uint64_t G = (uint64_t)B * (uint64_t)c->grad_accum * (uint64_t)c->dp; /* global batch */
    float dloss = (float)(1.0 / ((double)G * (double)T));
    msr_status_t st;

    if ((st = msr_cuda_gpt_zero_grad(tr->model)) != MSR_OK)
        return st;
    double loss_sum = 0.0;
    for (int m = 0; m < c->grad_accum; m++) {
        uint64_t first = ((uint64_t)c->dp_rank * (uint64_t)c->grad_accum + (uint64_t)m) * B;
        msr_sampler_fill(&tr->sampler, tr->data, T, first, B, tr->inputs, tr->targets);
        double loss;
        if ((st = msr_cuda_gpt_forward(tr->model, tr->inputs, tr->targets, B, T, &loss)) != MSR_OK)
            return st;
        /* the ranks' gradients (each already scaled by 1/(G*T)) are summed
         * in place after the last micro-batch: with overlap, bucket by
         * bucket while its backward goes on, else in one allreduce after */
        /* (with the blocks in host memory the host communicator sums
         * them there after the last backward) */
        int last = m == c->grad_accum - 1, device_sum = tr->dcomm != NULL && tr->hgrads == NULL;
        int overlap = device_sum && c->par.overlap;
        tr->nreqs = 0;
        tr->pend_lo = tr->pend_hi = 0;
        st = msr_cuda_gpt_backward_ex(tr->model, dloss, last && overlap ? on_ready : NULL, tr);
        if (st == MSR_OK && last && device_sum && !overlap)
            st = post_bucket(tr, 0, tr->layout->num_params);
        /* the host waits until every bucket is done on the device (or
         * failed: every request is finished either way) */
        msr_status_t wst = msr_comm_wait_all(tr->reqs, (size_t)tr->nreqs);
        tr->nreqs = 0;
        if (st != MSR_OK)
            return st;
        if (wst != MSR_OK)
            return msr_err_call(wst, "train_cuda: the allreduce of the gradients");
        loss_sum += loss;
    }
    if (tr->hgrads != NULL && tr->comm != NULL) {
        if ((st = msr_cuda_gpt_sync(tr->model)) != MSR_OK)
            return st;
        st = msr_comm_allreduce(tr->comm, MSR_IN_PLACE, tr->hgrads, tr->layout->num_params,
                                MSR_DTYPE_F32, MSR_OP_SUM);
        if (st != MSR_OK)
            return msr_err_call(st, "train_cuda: the allreduce of the gradients in host memory");
    }
    double sumsq;
    if ((st = msr_cuda_gpt_grad_sumsq(tr->model, &sumsq)) != MSR_OK)
        return st;
    if (tr->comm != NULL) {
        st = msr_comm_allreduce(tr->comm, MSR_IN_PLACE, &loss_sum, 1, MSR_DTYPE_F64, MSR_OP_SUM);
        if (st != MSR_OK)
            return msr_err_call(st, "train_cuda: the allreduce of the loss");
    }
    double norm = sqrt(sumsq);
    float scale = msr_clip_scale(norm, c->grad_clip);

    float lr = msr_cuda_trainer_lr(tr, tr->step);
    uint64_t t = tr->adam_t + 1;
    if (tr->hgrads != NULL) { /* the gradients are in host memory, and the master copy */
        if ((st = msr_cuda_gpt_sync(tr->model)) != MSR_OK)
            return st;
        msr_host_adamw_step_host(tr->hopt, tr->hgrads, lr, scale);
        msr_cuda_gpt_host_params_changed(tr->model);
    } else if (tr->hopt !=
               NULL) { /* the gradients are final on the device: the update on the host */
        if ((st = msr_cuda_gpt_sync(tr->model)) != MSR_OK ||
            (st = msr_host_adamw_step(tr->hopt, msr_cuda_gpt_params_device(tr->model),
                                      msr_cuda_gpt_grads_device(tr->model), lr, scale)) != MSR_OK)
            return st;
    } else if ((st = device_adamw(tr, t, lr, scale)) != MSR_OK) {
        return st;
    }
    tr->adam_t = t;
    tr->sampler.position += G;
    tr->step++;
    tr->last_grad_norm = norm;
    *loss_p = loss_sum / (double)(c->grad_accum * c->dp);
    return MSR_OK;
}

/* Host copies of the whole parameter and moment buffers, 3 x P floats. */
static msr_status_t host_state(size_t P, float **p, float **m, float **v)
{
    *p = msr_malloc(P * sizeof(float));
    *m = msr_malloc(P * sizeof(float));
    *v = msr_malloc(P * sizeof(float));
    if (*p != NULL && *m != NULL && *v != NULL)
        return MSR_OK;
    msr_free(*p);
    msr_free(*m);
    msr_free(*v);
    *p = *m = *v = NULL;
    return msr_err(MSR_ERR_NO_MEMORY,
                   "train_cuda: out of host memory for a checkpoint of %zu parameters", P);
}

msr_status_t msr_cuda_trainer_snapshot(msr_cuda_trainer_t *tr, const char *meta, void **buf_p,
                                       size_t *len_p)
{
    size_t P = tr->layout->num_params;
    float *p, *m, *v;
    msr_status_t st = host_state(P, &p, &m, &v);
    if (st != MSR_OK)
        return st;
    if (tr->hopt != NULL) { /* the master parameters are the device's */
        memcpy(p, tr->hopt->params, P * sizeof(float));
        memcpy(m, tr->hopt->opt->m, P * sizeof(float));
        memcpy(v, tr->hopt->opt->v, P * sizeof(float));
    } else if ((st = msr_cuda_gpt_get_params(tr->model, p)) == MSR_OK) {
        st = msr_cuda_gpt_get_moments(tr->model, m, v);
    }
    if (st == MSR_OK) {
        msr_tckpt_header_t h = {
            .step = tr->step,
            .adam_t = tr->adam_t,
            .data_seed = tr->sampler.seed,
            .data_position = tr->sampler.position,
            .num_params = P,
            .rank = (uint32_t)tr->cfg.dp_rank,
            .world = (uint32_t)tr->cfg.dp,
            .zero = 0,
            .meta = meta,
        };
        if ((st = msr_ckpt_encode_slice(&h, p, m, v, buf_p, len_p)) != MSR_OK)
            msr_err_prefix(st, "train_cuda");
    }
    msr_free(p);
    msr_free(m);
    msr_free(v);
    return st;
}

msr_status_t msr_cuda_trainer_restore(msr_cuda_trainer_t *tr, const char *meta, int world,
                                      msr_trainer_fetch_t fetch, void *arg)
{
    size_t P = tr->layout->num_params;
    float *p, *m, *v;
    msr_tckpt_header_t h;
    msr_status_t st = host_state(P, &p, &m, &v);
    /* a failed fetch or gather left its reason in the error text */
    if (st == MSR_OK)
        st = msr_ckpt_gather(fetch, arg, world, meta, P, p, m, v, &h);
    /* every rank learns the worst outcome: CONFIG (exit 2) before others */
    int32_t mine[2] = {st == MSR_OK, st != MSR_ERR_CONFIG};
    if (tr->comm != NULL) {
        msr_status_t cst =
            msr_comm_allreduce(tr->comm, MSR_IN_PLACE, mine, 2, MSR_DTYPE_I32, MSR_OP_MIN);
        if (cst != MSR_OK) {
            st = msr_err_call(cst, "train_cuda: agreeing on a checkpoint");
            goto out;
        }
    }
    if (!mine[0]) {
        if (st == MSR_OK)
            st = msr_err(mine[1] ? MSR_ERR_CORRUPT : MSR_ERR_CONFIG,
                         "train_cuda: another rank could not read the checkpoint");
        goto out;
    }
    if (tr->hopt != NULL) {
        /* with the blocks in host memory the master copy is what they
         * read: no copy in flight, and every block fetched anew */
        if ((st = msr_cuda_gpt_sync(tr->model)) == MSR_OK)
            st = msr_host_adamw_set(tr->hopt, p, m, v, h.adam_t,
                                    msr_cuda_gpt_params_device(tr->model));
        msr_cuda_gpt_host_params_changed(tr->model);
    } else if ((st = msr_cuda_gpt_set_params(tr->model, p)) == MSR_OK)
        st = msr_cuda_gpt_set_moments(tr->model, m, v);
    if (st != MSR_OK)
        goto out;
    tr->step = h.step;
    tr->adam_t = h.adam_t;
    tr->sampler.seed = h.data_seed;
    tr->sampler.position = h.data_position;
out:
    msr_free(p);
    msr_free(m);
    msr_free(v);
    return st;
}
