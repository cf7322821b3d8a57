/* The checkpoint tests' shared set-up (ckpt_support.h). */
#include "tests/parallel/ckpt_support.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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

static size_t slurp(const char *path, unsigned char **buf_p)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    MSR_CHECK_MSG(fd >= 0, "cannot open %s", path);
    struct stat sb;
    MSR_CHECK(fstat(fd, &sb) == 0);
    unsigned char *buf = malloc((size_t)sb.st_size + 1);
    MSR_CHECK(buf != NULL);
    MSR_CHECK(read(fd, buf, (size_t)sb.st_size) == sb.st_size);
    close(fd);
    *buf_p = buf;
    return (size_t)sb.st_size;
}

void ckpt_test_same_file(const char *a, const char *b, int step, const char *name)
{
    char pa[512], pb[512];
    unsigned char *x, *y;
    snprintf(pa, sizeof pa, "%s/step-%d/%s", a, step, name);
    snprintf(pb, sizeof pb, "%s/step-%d/%s", b, step, name);
    size_t nx = slurp(pa, &x), ny = slurp(pb, &y);
    size_t at = 0;
    while (at < nx && at < ny && x[at] == y[at])
        at++;
    MSR_CHECK_MSG(nx == ny && at == nx, "%s: %zu and %zu bytes, first difference at byte %zu", pb,
                  nx, ny, at);
    free(x);
    free(y);
}
