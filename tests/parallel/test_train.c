/* The training step: the same global batch trains to the same losses
 * however it is split into micro-batches, a resumed run continues bitwise,
 * the loss falls, and bad configurations are refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/train.h"
#include "tests/runner.h"

static msr_train_config_t small_config(int micro_batch, int grad_accum)
{
    msr_train_config_t c = {
        .model = {MSR_GPT_VOCAB, 16, 2, 4, 32},
        .micro_batch = micro_batch,
        .grad_accum = grad_accum,
        .dp = 1,
        .dp_rank = 0,
        .seed = 5,
        .lr = 3e-3f,
        .warmup = 2,
        .grad_clip = 1.0f,
        .adamw = {0.9, 0.95, 1e-8, 0.1},
    };
    return c;
}

static msr_dataset_t *corpus(void)
{
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_generate(5, 1 << 16, &ds));
    return ds;
}

static void train(msr_trainer_t *tr, int steps, double *losses)
{
    for (int i = 0; i < steps; i++)
        MSR_CHECK_OK(msr_trainer_step(tr, &losses[i]));
}

/* The equivalence rule for gradient accumulation: global batch 8 as 8 x 1,
 * 4 x 2, 2 x 4 and 1 x 8 trains to the same losses within 1e-5 relative. */
static void test_accum_equivalence(void)
{
    msr_dataset_t *ds = corpus();
    enum { STEPS = 6 };
    static const int splits[][2] = {{8, 1}, {4, 2}, {2, 4}, {1, 8}};
    double ref[STEPS];
    msr_trainer_t *first = NULL;
    for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
        msr_train_config_t c = small_config(splits[k][0], splits[k][1]);
        msr_trainer_t *tr = NULL;
        MSR_CHECK_OK(msr_trainer_create(&c, ds, &tr));
        double losses[STEPS];
        train(tr, STEPS, losses);
        MSR_CHECK_EQ(tr->step, STEPS);
        MSR_CHECK_EQ(tr->sampler.position, STEPS * 8);
        if (k == 0) {
            memcpy(ref, losses, sizeof ref);
            first = tr;
            continue;
        }
        for (int i = 0; i < STEPS; i++)
            MSR_CHECK_MSG(fabs(losses[i] - ref[i]) <= 1e-5 * ref[i],
                          "micro %d x accum %d, step %d: loss %.9f, one micro-batch %.9f",
                          splits[k][0], splits[k][1], i + 1, losses[i], ref[i]);
        /* Adam divides by sqrt(v), so an element whose gradient is ~0 moves by
         * rounding noise; the parameters as a whole agree to fp32 accuracy */
        double diff = 0, norm = 0;
        for (size_t i = 0; i < tr->model->num_params; i++) {
            double d = (double)tr->model->params[i] - first->model->params[i];
            diff += d * d;
            norm += (double)first->model->params[i] * first->model->params[i];
        }
        MSR_CHECK_MSG(sqrt(diff / norm) < 1e-5, "parameters differ by %g (relative) after %d steps",
                      sqrt(diff / norm), STEPS);
        msr_trainer_destroy(tr);
    }
    msr_trainer_destroy(first);
    msr_dataset_destroy(ds);
}

/* Stopped after step 3 and resumed: steps 4..7 are bitwise those of the run
 * that never stopped, and so is everything it ends with. */
static void test_resume_bitwise(void)
{
    char dir[] = "/tmp/msrun_train_XXXXXX";
    MSR_CHECK(mkdtemp(dir) != NULL);
    msr_dataset_t *ds = corpus();
    msr_train_config_t c = small_config(2, 2);
    const char *meta = "test settings";
    msr_trainer_t *a = NULL, *b = NULL;
    MSR_CHECK_OK(msr_trainer_create(&c, ds, &a));
    double la[7], lb[7];
    train(a, 3, la);
    msr_tckpt_entry_t e;
    MSR_CHECK_OK(msr_trainer_save(a, dir, meta, &e));
    MSR_CHECK_OK(msr_tckpt_manifest_write(dir, 3, 1, &e));
    train(a, 4, la + 3);

    MSR_CHECK_OK(msr_trainer_create(&c, ds, &b));
    uint64_t step;
    uint32_t world;
    MSR_CHECK_OK(msr_tckpt_latest(dir, &step, &world));
    MSR_CHECK_EQ(step, 3);
    MSR_CHECK_OK(msr_trainer_load(b, dir, step, meta));
    MSR_CHECK_EQ(b->step, 3);
    train(b, 4, lb + 3);
    for (int i = 3; i < 7; i++)
        MSR_CHECK_MSG(la[i] == lb[i], "step %d: %.9f uninterrupted, %.9f resumed", i + 1, la[i],
                      lb[i]);
    size_t P = a->model->num_params;
    MSR_CHECK(memcmp(a->model->params, b->model->params, P * sizeof(float)) == 0);
    MSR_CHECK(memcmp(a->opt->m, b->opt->m, P * sizeof(float)) == 0);
    MSR_CHECK(memcmp(a->opt->v, b->opt->v, P * sizeof(float)) == 0);
    MSR_CHECK_EQ(a->opt->t, b->opt->t);
    MSR_CHECK_EQ(a->sampler.position, b->sampler.position);
    msr_trainer_destroy(b);

    /* other settings are refused */
    MSR_CHECK_OK(msr_trainer_create(&c, ds, &b));
    MSR_CHECK_STATUS(msr_trainer_load(b, dir, 3, "other settings"), MSR_ERR_CONFIG);
    MSR_CHECK_EQ(b->step, 0);
    msr_trainer_destroy(b);
    msr_train_config_t wide = c;
    wide.model.channels = 64;
    MSR_CHECK_OK(msr_trainer_create(&wide, ds, &b));
    MSR_CHECK_STATUS(msr_trainer_load(b, dir, 3, meta), MSR_ERR_CONFIG);
    msr_trainer_destroy(b);

    msr_trainer_destroy(a);
    msr_dataset_destroy(ds);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    MSR_CHECK(system(cmd) == 0);
}

/* It learns: on the generated corpus the loss falls well below ln 256. */
static void test_loss_falls(void)
{
    msr_dataset_t *ds = corpus();
    msr_train_config_t c = small_config(8, 1);
    c.lr = 1e-2f;
    msr_trainer_t *tr = NULL;
    MSR_CHECK_OK(msr_trainer_create(&c, ds, &tr));
    double losses[60];
    train(tr, 60, losses);
    MSR_CHECK_MSG(fabs(losses[0] - log(256.0)) < 0.1, "first loss %f", losses[0]);
    double tail = (losses[57] + losses[58] + losses[59]) / 3;
    MSR_CHECK_MSG(tail < 3.0, "loss after 60 steps %f (from %f)", tail, losses[0]);
    msr_trainer_destroy(tr);
    msr_dataset_destroy(ds);
}

static void test_schedule_and_clip(void)
{
    msr_dataset_t *ds = corpus();
    msr_train_config_t c = small_config(2, 1);
    c.warmup = 4;
    c.grad_clip = 1e-3f;
    msr_trainer_t *tr = NULL;
    MSR_CHECK_OK(msr_trainer_create(&c, ds, &tr));
    MSR_CHECK(msr_trainer_lr(tr, 0) == c.lr / 4);
    MSR_CHECK(msr_trainer_lr(tr, 1) == c.lr / 2);
    MSR_CHECK(msr_trainer_lr(tr, 3) == c.lr);
    MSR_CHECK(msr_trainer_lr(tr, 100) == c.lr);
    double loss;
    MSR_CHECK_OK(msr_trainer_step(tr, &loss));
    MSR_CHECK(tr->last_grad_norm > 1e-3); /* so clipping was active */
    MSR_CHECK(isfinite(loss));
    msr_trainer_destroy(tr);
    msr_dataset_destroy(ds);
}

static void test_bad_config(void)
{
    msr_dataset_t *ds = corpus(), *tiny = NULL;
    msr_trainer_t *tr = NULL;
    char why[200];
    msr_train_config_t c = small_config(2, 1);
    c.dp = 2;
    MSR_CHECK_STATUS(msr_trainer_create(&c, ds, &tr), MSR_ERR_UNSUPPORTED);
    c = small_config(0, 1);
    MSR_CHECK_STATUS(msr_train_config_check(&c, ds, why, sizeof why), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(why, "micro-batch") != NULL);
    c = small_config(2, 1);
    c.model.heads = 5;
    MSR_CHECK_STATUS(msr_trainer_create(&c, ds, &tr), MSR_ERR_CONFIG);
    c = small_config(2, 1);
    c.dp_rank = 1;
    MSR_CHECK_STATUS(msr_trainer_create(&c, ds, &tr), MSR_ERR_CONFIG);
    MSR_CHECK_OK(msr_dataset_generate(1, 16, &tiny)); /* not longer than T = 16 */
    c = small_config(2, 1);
    MSR_CHECK_STATUS(msr_train_config_check(&c, tiny, why, sizeof why), MSR_ERR_CONFIG);
    MSR_CHECK(strstr(why, "longer") != NULL);
    MSR_CHECK(tr == NULL);
    msr_dataset_destroy(tiny);
    msr_dataset_destroy(ds);
}

static const msr_test_t tests[] = {
    {"accum_equivalence", test_accum_equivalence, 60},
    {"resume_bitwise", test_resume_bitwise, 60},
    {"loss_falls", test_loss_falls, 60},
    {"schedule_and_clip", test_schedule_and_clip, 20},
    {"bad_config", test_bad_config, 20},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
