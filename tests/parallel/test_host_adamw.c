/* AdamW on the host for parameters on a device (parallel/host_adamw.h):
 * on the CPU device and on the CUDA device's code over the fake table that
 * runs queued work only when it is waited for (tests/comm/device_fake.c),
 * every step gives msr_adamw_update's parameters, moments and t over the
 * whole buffer, bitwise, for chunks that divide the buffer, miss it by
 * one either way, hold one element or all of them, and so does the step
 * over gradients in host memory (params=host); a state set from a
 * checkpoint goes on as the run it came from, with or without a device
 * copy; bad arguments and every
 * allocation failed in turn are a status, never a crash or a leak. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "comm/device_impl.h"
#include "parallel/host_adamw.h"
#include "tests/comm/device_fake.h"
#include "tests/runner.h"

static const msr_adamw_config_t ac = {0.9, 0.95, 1e-8, 0.1};

/* Two tensors: the first decays, the second does not. */
static void table(size_t count, msr_gpt_tensor_t t[2])
{
    memset(t, 0, 2 * sizeof *t);
    size_t a = count / 3 + 1 < count ? count / 3 + 1 : count - 1;
    snprintf(t[0].name, sizeof t[0].name, "w");
    t[0].ndim = 1;
    t[0].shape[0] = (int)a;
    t[0].shape[1] = 1;
    t[0].count = a;
    t[0].decay = 1;
    snprintf(t[1].name, sizeof t[1].name, "b");
    t[1].ndim = 1;
    t[1].shape[0] = (int)(count - a);
    t[1].shape[1] = 1;
    t[1].offset = a;
    t[1].count = count - a;
}

static float value(size_t i, int step, int which)
{
    unsigned x = (unsigned)(i * 2654435761u) ^ (unsigned)(step * 40503 + which * 977);
    return ((float)(x % 2001) - 1000.0f) / 1000.0f;
}

static const msr_device_t *fake_device(msr_device_t **own)
{
    MSR_CHECK_OK(msr_device_gpu_create(msr_test_device_fake_api(), 0, own));
    return *own;
}

/* count elements moved chunk at a time for 3 steps against msr_adamw_update. */
static void run_against(const msr_device_t *dev, size_t count, size_t chunk)
{
    msr_gpt_tensor_t t[2];
    table(count, t);
    size_t bytes = count * sizeof(float);
    float *ref = msr_malloc(bytes), *g = msr_malloc(bytes), *out = msr_malloc(bytes);
    MSR_CHECK(ref != NULL && g != NULL && out != NULL);
    for (size_t i = 0; i < count; i++)
        ref[i] = value(i, 0, 0);
    msr_adamw_t *opt = NULL;
    MSR_CHECK_OK(msr_adamw_create(&ac, t, 2, 0, count, &opt));
    msr_host_adamw_t *h = NULL;
    MSR_CHECK_OK(msr_host_adamw_create(dev, &ac, t, 2, count, chunk, ref, &h));
    float *pd = NULL, *gd = NULL;
    MSR_CHECK_OK(msr_device_alloc(dev, bytes, (void **)&pd));
    MSR_CHECK_OK(msr_device_alloc(dev, bytes, (void **)&gd));
    MSR_CHECK_OK(msr_device_memset(dev, pd, 0xff, bytes, NULL)); /* NaN: the step must write */
    MSR_CHECK_OK(msr_device_stream_sync(dev, NULL));
    for (int step = 1; step <= 3; step++) {
        for (size_t i = 0; i < count; i++)
            g[i] = value(i, step, 1);
        float lr = 1e-2f / (float)step, scale = step == 2 ? 0.5f : 1.0f;
        msr_adamw_update(opt, ref, g, lr, scale);
        MSR_CHECK_OK(msr_device_copy(dev, gd, g, bytes, MSR_DEVICE_H2D, NULL));
        MSR_CHECK_OK(msr_device_stream_sync(dev, NULL));
        memset(g, 0, bytes); /* the host's copy is not what the step reads */
        MSR_CHECK_OK(msr_host_adamw_step(h, pd, gd, lr, scale));
        MSR_CHECK_OK(msr_device_copy(dev, out, pd, bytes, MSR_DEVICE_D2H, NULL));
        MSR_CHECK_OK(msr_device_stream_sync(dev, NULL));
        MSR_CHECK_MSG(memcmp(out, ref, bytes) == 0 && memcmp(h->params, ref, bytes) == 0,
                      "%s: count %zu chunk %zu step %d: parameters differ", msr_device_name(dev),
                      count, chunk, step);
        MSR_CHECK_MSG(memcmp(h->opt->m, opt->m, bytes) == 0 &&
                          memcmp(h->opt->v, opt->v, bytes) == 0 && h->opt->t == opt->t,
                      "%s: count %zu chunk %zu step %d: moments differ", msr_device_name(dev),
                      count, chunk, step);
    }
    size_t eff = chunk == 0 ? MSR_HOST_ADAMW_CHUNK : chunk;
    eff = eff > count ? count : eff;
    MSR_CHECK_EQ(h->chunks_moved, 3 * ((count + eff - 1) / eff));
    msr_device_free(dev, gd);
    msr_device_free(dev, pd);
    msr_host_adamw_destroy(h);
    msr_adamw_destroy(opt);
    msr_free(out);
    msr_free(g);
    msr_free(ref);
}

/* msr_host_adamw_step_host (--offload params=host: the gradients in host
 * memory, nothing copied): count elements, chunk at a time, 3 steps
 * against msr_adamw_update, bitwise; nothing moved. */
static void run_host(size_t count, size_t chunk)
{
    msr_gpt_tensor_t t[2];
    table(count, t);
    size_t bytes = count * sizeof(float);
    float *ref = msr_malloc(bytes), *g = msr_malloc(bytes);
    MSR_CHECK(ref != NULL && g != NULL);
    for (size_t i = 0; i < count; i++)
        ref[i] = value(i, 0, 0);
    msr_adamw_t *opt = NULL;
    MSR_CHECK_OK(msr_adamw_create(&ac, t, 2, 0, count, &opt));
    msr_host_adamw_t *h = NULL;
    MSR_CHECK_OK(msr_host_adamw_create(msr_device_cpu(), &ac, t, 2, count, chunk, ref, &h));
    for (int step = 1; step <= 3; step++) {
        for (size_t i = 0; i < count; i++)
            g[i] = value(i, step, 1);
        float lr = 1e-2f / (float)step, scale = step == 2 ? 0.5f : 1.0f;
        msr_adamw_update(opt, ref, g, lr, scale);
        msr_host_adamw_step_host(h, g, lr, scale);
        MSR_CHECK_MSG(memcmp(h->params, ref, bytes) == 0 && memcmp(h->opt->m, opt->m, bytes) == 0 &&
                          memcmp(h->opt->v, opt->v, bytes) == 0 && h->opt->t == opt->t,
                      "count %zu chunk %zu step %d: the state differs", count, chunk, step);
    }
    MSR_CHECK_EQ(h->chunks_moved, 0);
    msr_host_adamw_destroy(h);
    msr_adamw_destroy(opt);
    msr_free(g);
    msr_free(ref);
}

static const size_t cases[][2] = {
    {1, 1},  {1, 0},  {2, 1},   {7, 1},   {7, 7},   {7, 8},    {64, 8},
    {63, 8}, {65, 8}, {65, 64}, {65, 65}, {65, 66}, {1000, 3}, {4099, 1024},
};

static void test_step_host(void)
{
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        run_host(cases[k][0], cases[k][1]);
}

static void sweep(const msr_device_t *dev)
{
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        run_against(dev, cases[k][0], cases[k][1]);
}

static void test_cpu(void)
{
    sweep(msr_device_cpu());
}

static void test_deferred(void)
{
    msr_device_t *own = NULL;
    sweep(fake_device(&own));
    msr_device_destroy(own);
}

/* A state set as a checkpoint has it (parameters, moments, t) goes on as
 * the optimizer it was taken from. */
static void test_set(void)
{
    msr_device_t *own = NULL;
    const msr_device_t *dev = fake_device(&own);
    const size_t count = 100, bytes = count * sizeof(float);
    msr_gpt_tensor_t t[2];
    table(count, t);
    float p[100], g[100], out[100];
    for (size_t i = 0; i < count; i++)
        p[i] = value(i, 0, 2);
    msr_host_adamw_t *a = NULL, *b = NULL;
    MSR_CHECK_OK(msr_host_adamw_create(dev, &ac, t, 2, count, 9, p, &a));
    float *pa = NULL, *pb = NULL, *gd = NULL;
    MSR_CHECK_OK(msr_device_alloc(dev, bytes, (void **)&pa));
    MSR_CHECK_OK(msr_device_alloc(dev, bytes, (void **)&pb));
    MSR_CHECK_OK(msr_device_alloc(dev, bytes, (void **)&gd));
    for (int step = 1; step <= 4; step++) {
        if (step == 3) { /* b starts from a's state after 2 steps, other chunks */
            MSR_CHECK_OK(msr_host_adamw_create(dev, &ac, t, 2, count, 31, p, &b));
            MSR_CHECK_OK(msr_host_adamw_set(b, a->params, a->opt->m, a->opt->v, a->opt->t, pb));
            MSR_CHECK_OK(msr_device_copy(dev, out, pb, bytes, MSR_DEVICE_D2H, NULL));
            MSR_CHECK_OK(msr_device_stream_sync(dev, NULL));
            MSR_CHECK(memcmp(out, a->params, bytes) == 0);
        }
        for (size_t i = 0; i < count; i++)
            g[i] = value(i, step, 3);
        MSR_CHECK_OK(msr_device_copy(dev, gd, g, bytes, MSR_DEVICE_H2D, NULL));
        MSR_CHECK_OK(msr_device_stream_sync(dev, NULL));
        MSR_CHECK_OK(msr_host_adamw_step(a, pa, gd, 1e-3f, 1.0f));
        if (b != NULL)
            MSR_CHECK_OK(msr_host_adamw_step(b, pb, gd, 1e-3f, 1.0f));
    }
    MSR_CHECK(b->opt->t == 4 && a->opt->t == 4);
    MSR_CHECK(memcmp(a->params, b->params, bytes) == 0);
    MSR_CHECK(memcmp(a->opt->m, b->opt->m, bytes) == 0 && memcmp(a->opt->v, b->opt->v, bytes) == 0);
    /* with no device copy (params=host: the master copy is the only one) */
    msr_host_adamw_t *c = NULL;
    MSR_CHECK_OK(msr_host_adamw_create(dev, &ac, t, 2, count, 9, p, &c));
    MSR_CHECK_OK(msr_host_adamw_set(c, a->params, a->opt->m, a->opt->v, a->opt->t, NULL));
    MSR_CHECK(c->opt->t == 4 && memcmp(c->params, a->params, bytes) == 0 &&
              memcmp(c->opt->v, a->opt->v, bytes) == 0);
    msr_host_adamw_destroy(c);
    msr_device_free(dev, gd);
    msr_device_free(dev, pb);
    msr_device_free(dev, pa);
    msr_host_adamw_destroy(b);
    msr_host_adamw_destroy(a);
    msr_device_destroy(own);
}

static void test_bad_args(void)
{
    msr_gpt_tensor_t t[2];
    table(8, t);
    float p[8] = {0};
    msr_host_adamw_t *h = NULL;
    const msr_device_t *cpu = msr_device_cpu();
    MSR_CHECK_STATUS(msr_host_adamw_create(cpu, &ac, t, 2, 0, 1, p, &h), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_last_error(), "count > 0") != NULL);
    MSR_CHECK_STATUS(msr_host_adamw_create(NULL, &ac, t, 2, 8, 1, p, &h), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_host_adamw_create(cpu, &ac, t, 2, 8, 1, NULL, &h), MSR_ERR_INVALID_ARG);
    /* past the table's end: the table's own refusal */
    MSR_CHECK_STATUS(msr_host_adamw_create(cpu, &ac, t, 2, 9, 1, p, &h), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_last_error(), "host_adamw") != NULL);
    MSR_CHECK(h == NULL);
    msr_host_adamw_destroy(NULL);
}

/* Every allocation of a create failed in turn, on both devices. */
static void test_alloc_failures(void)
{
    msr_device_t *own = NULL;
    const msr_device_t *devs[2] = {msr_device_cpu(), fake_device(&own)};
    msr_gpt_tensor_t t[2];
    table(50, t);
    float p[50] = {0};
    for (int d = 0; d < 2; d++) {
        long i = 0;
        for (;; i++) {
            msr_host_adamw_t *h = NULL;
            msr_alloc_fail_at(i);
            msr_status_t st = msr_host_adamw_create(devs[d], &ac, t, 2, 50, 7, p, &h);
            int failed = msr_alloc_failed();
            msr_alloc_fail_at(-1);
            msr_host_adamw_destroy(h);
            if (!failed) {
                MSR_CHECK_OK(st);
                break;
            }
            MSR_CHECK_MSG(st == MSR_ERR_NO_MEMORY && h == NULL, "%s: allocation %ld: %s (%s)",
                          msr_device_name(devs[d]), i, msr_status_name(st), msr_last_error());
            MSR_CHECK(i < 1000);
        }
        printf("alloc_failures: %s: %ld allocations failed in turn\n", msr_device_name(devs[d]), i);
        MSR_CHECK(i >= 4); /* the optimizer, the master copy, two chunks: at least */
    }
    msr_device_destroy(own);
}

static const msr_test_t tests[] = {
    {"step_host", test_step_host, 30}, {"cpu", test_cpu, 60},
    {"deferred", test_deferred, 60},   {"set", test_set, 60},
    {"bad_args", test_bad_args, 30},   {"alloc_failures", test_alloc_failures, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
