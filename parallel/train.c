/* The training step and the trainer's checkpoint shard (see train.h). */
#include "parallel/train.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/status.h"
#include "parallel/ckpt.h"

msr_status_t msr_train_config_check(const msr_train_config_t *cfg, const msr_dataset_t *data,
                                    char *why, size_t why_len)
{
    if (msr_gpt_config_check(&cfg->model, why, why_len) != MSR_OK)
        return MSR_ERR_CONFIG;
    if (cfg->micro_batch < 1 || cfg->micro_batch > 65536 ||
        (int64_t)cfg->micro_batch * cfg->model.max_seq > (1 << 24)) {
        snprintf(why, why_len, "micro-batch %d x sequence %d is not in [1, 2^24] tokens",
                 cfg->micro_batch, cfg->model.max_seq);
        return MSR_ERR_CONFIG;
    }
    if (cfg->grad_accum < 1 || cfg->grad_accum > 65536) {
        snprintf(why, why_len, "grad-accum %d is not in [1, 65536]", cfg->grad_accum);
        return MSR_ERR_CONFIG;
    }
    if (cfg->dp < 1 || cfg->dp_rank < 0 || cfg->dp_rank >= cfg->dp) {
        snprintf(why, why_len, "dp rank %d is not in [0, %d)", cfg->dp_rank, cfg->dp);
        return MSR_ERR_CONFIG;
    }
    if (data->size <= (size_t)cfg->model.max_seq) {
        snprintf(why, why_len, "the data (%zu bytes) must be longer than the sequence (%d)",
                 data->size, cfg->model.max_seq);
        return MSR_ERR_CONFIG;
    }
    if (!(cfg->lr > 0.0f && cfg->lr < 1e3f) || cfg->warmup < 0 || !(cfg->grad_clip >= 0.0f)) {
        snprintf(why, why_len, "learning rate %g, warm-up %d or gradient clip %g out of range",
                 (double)cfg->lr, cfg->warmup, (double)cfg->grad_clip);
        return MSR_ERR_CONFIG;
    }
    return MSR_OK;
}

msr_status_t msr_trainer_create(const msr_train_config_t *cfg, const msr_dataset_t *data,
                                msr_trainer_t **tr_p)
{
    char why[200];
    if (msr_train_config_check(cfg, data, why, sizeof why) != MSR_OK) {
        MSR_ERROR("train: %s", why);
        return MSR_ERR_CONFIG;
    }
    if (cfg->dp > 1) {
        MSR_ERROR("train: data parallel (dp %d) needs the communicators, which are not built yet",
                  cfg->dp);
        return MSR_ERR_UNSUPPORTED;
    }
    msr_status_t st = MSR_ERR_NO_MEMORY;
    msr_trainer_t *tr = msr_calloc(1, sizeof *tr);
    if (tr == NULL)
        return MSR_ERR_NO_MEMORY;
    tr->cfg = *cfg;
    tr->data = data;
    tr->sampler.seed = cfg->seed;
    size_t N = (size_t)cfg->micro_batch * (size_t)cfg->model.max_seq;
    tr->inputs = msr_calloc(N, sizeof(int));
    tr->targets = msr_calloc(N, sizeof(int));
    if (tr->inputs == NULL || tr->targets == NULL)
        goto err_free;
    if ((st = msr_gpt_create(&cfg->model, cfg->micro_batch, &tr->model)) != MSR_OK)
        goto err_free;
    msr_gpt_init_params(tr->model, cfg->seed);
    /* dp: under ZeRO this becomes the rank's shard of the flat buffer */
    tr->opt_lo = 0;
    tr->opt_hi = tr->model->num_params;
    st = msr_adamw_create(&cfg->adamw, tr->model->tensors, tr->model->num_tensors, tr->opt_lo,
                          tr->opt_hi, &tr->opt);
    if (st != MSR_OK)
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
    msr_adamw_destroy(tr->opt);
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
    msr_status_t st;

    msr_gpt_zero_grad(model);
    double loss_sum = 0.0;
    for (int m = 0; m < c->grad_accum; m++) {
        uint64_t first = ((uint64_t)c->dp_rank * (uint64_t)c->grad_accum + (uint64_t)m) * B;
        msr_sampler_fill(&tr->sampler, tr->data, T, first, B, tr->inputs, tr->targets);
        double loss;
        /* dp: hooks here; the last micro-batch's grads_ready starts the buckets */
        if ((st = msr_gpt_forward(model, tr->inputs, tr->targets, B, T, NULL, &loss)) != MSR_OK)
            return st;
        if ((st = msr_gpt_backward(model, dloss, NULL)) != MSR_OK)
            return st;
        loss_sum += loss;
    }
    /* dp: wait for the buckets; sum loss_sum and the squared norm over the group */
    double norm = sqrt(msr_sumsq(model->grads + tr->opt_lo, tr->opt_hi - tr->opt_lo));
    float scale = msr_clip_scale(norm, c->grad_clip);
    msr_adamw_update(tr->opt, model->params + tr->opt_lo, model->grads + tr->opt_lo,
                     msr_trainer_lr(tr, tr->step), scale);
    /* dp: ZeRO all-gathers the updated parameters here */
    tr->sampler.position += G;
    tr->step++;
    tr->last_grad_norm = norm;
    *loss_p = loss_sum / (double)(c->grad_accum * c->dp);
    return MSR_OK;
}

msr_status_t msr_trainer_save(msr_trainer_t *tr, const char *dir, const char *meta,
                              msr_tckpt_entry_t *entry_p)
{
    msr_tckpt_shard_t s = {
        .step = tr->step,
        .adam_t = tr->opt->t,
        .data_seed = tr->sampler.seed,
        .data_position = tr->sampler.position,
        .rank = (uint32_t)tr->cfg.dp_rank,
        .world = (uint32_t)tr->cfg.dp,
        .num_params = tr->model->num_params,
        .params_lo = 0,
        .params_hi = tr->model->num_params,
        .opt_lo = tr->opt_lo,
        .opt_hi = tr->opt_hi,
        .meta = meta,
        .params = tr->model->params,
        .m = tr->opt->m,
        .v = tr->opt->v,
    };
    return msr_tckpt_shard_write(dir, &s, entry_p);
}

msr_status_t msr_trainer_load(msr_trainer_t *tr, const char *dir, uint64_t step, const char *meta)
{
    msr_tckpt_shard_t s;
    void *buf;
    msr_status_t st = msr_tckpt_shard_read(dir, step, (uint32_t)tr->cfg.dp_rank, &s, &buf);
    if (st != MSR_OK)
        return st;
    st = MSR_ERR_CONFIG;
    if (strcmp(s.meta, meta) != 0) {
        MSR_ERROR("train: the checkpoint of step %llu under %s was written with other settings",
                  (unsigned long long)step, dir);
        MSR_ERROR("train:   checkpoint: %s", s.meta);
        MSR_ERROR("train:   this run:   %s", meta);
        goto err_buf;
    }
    if (s.num_params != tr->model->num_params || s.params_lo != 0 ||
        s.params_hi != tr->model->num_params || s.opt_lo != tr->opt_lo || s.opt_hi != tr->opt_hi ||
        s.world != (uint32_t)tr->cfg.dp) {
        MSR_ERROR("train: the checkpoint of step %llu under %s was written by %u ranks with "
                  "another layout than this run's %d",
                  (unsigned long long)step, dir, s.world, tr->cfg.dp);
        goto err_buf;
    }
    memcpy(tr->model->params, s.params, tr->model->num_params * sizeof(float));
    memcpy(tr->opt->m, s.m, (tr->opt_hi - tr->opt_lo) * sizeof(float));
    memcpy(tr->opt->v, s.v, (tr->opt_hi - tr->opt_lo) * sizeof(float));
    tr->opt->t = s.adam_t;
    tr->sampler.seed = s.data_seed;
    tr->sampler.position = s.data_position;
    tr->step = s.step;
    st = MSR_OK;

err_buf:
    msr_free(buf);
    return st;
}
