/* The checkpoint tests' shared set-up (ckpt_support.h). */
#include "tests/parallel/ckpt_support.h"

#include "parallel/ckpt_full.h"
#include "tests/parallel/worker_config.h"
#include "tests/runner.h"

msr_train_config_t ckpt_test_config(int layers, int channels, int micro_batch)
{
    msr_train_config_t c = worker_config(4, channels, 1, 1, 0);
    c.model.layers = layers;
    c.micro_batch = micro_batch;
    c.seed = 9;
    return c;
}

msr_trainer_t *ckpt_test_trainer(const msr_train_config_t *c, int steps, msr_dataset_t **ds_p)
{
    MSR_CHECK_OK(msr_dataset_generate(3, 1 << 14, ds_p));
    msr_trainer_t *tr;
    MSR_CHECK_OK(msr_trainer_create(c, *ds_p, NULL, &tr));
    double loss;
    for (int i = 0; i < steps; i++)
        MSR_CHECK_OK(msr_trainer_step(tr, &loss));
    return tr;
}

void ckpt_test_save_slices(msr_trainer_t *tr, int world, const char *meta, void **buf, size_t *len)
{
    for (int r = 0; r < world; r++) {
        msr_tckpt_header_t h = {
            .step = tr->step,
            .adam_t = tr->dp->opt->t,
            .data_seed = tr->sampler.seed,
            .data_position = tr->sampler.position,
            .num_params = tr->model->num_params,
            .rank = (uint32_t)r,
            .world = (uint32_t)world,
            .meta = meta,
        };
        MSR_CHECK_OK(msr_ckpt_encode_slice(&h, tr->model->params, tr->dp->opt->m, tr->dp->opt->v,
                                           &buf[r], &len[r]));
    }
}
