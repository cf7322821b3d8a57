/* The CUDA model against the CPU reference: logits, loss and every
 * parameter tensor's gradient of one forward/backward, at a small shape and
 * at GPT-2's (T 1024, C 768, 12 heads, 2 layers, B 8, GPT-2's vocabulary of
 * 50257), and the losses and parameters of 10 training steps (fp32, within
 * 1e-4 relative); in bf16 at both shapes, with head size 8 (cuBLAS's
 * attention) and over several tiles of the fused attention; the blocks in
 * host memory (--offload params=host) against the whole model on the
 * device, bitwise, the model's and the trainer's. Needs a GPU: where this machine has
 * none (no device, or no driver at all) it prints why and exits 77 (ctest counts it skipped); any
 * other CUDA error (an old driver, say) fails it. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "parallel/cuda/train_cuda.h"
#include "model/gpt.h"
#include "parallel/train.h"
#include "tests/runner.h"

#define SKIP 77

static const msr_gpt_config_t shape = {MSR_GPT_VOCAB, 32, 2, 4, 64}; /* V, T, L, NH, C */
enum { B = 4 };
/* GPT-2 small's widths and vocabulary, two of its layers */
static const msr_gpt_config_t gpt2 = {50257, 1024, 2, 12, 768};
enum { B_GPT2 = 8 };
/* bf16 attention's paths: head size 8 keeps cuBLAS's products; 32 with T
 * 200 takes the fused kernel over 4 tiles of 64, the last of 8 rows */
static const msr_gpt_config_t hs8 = {MSR_GPT_VOCAB, 32, 2, 8, 64};
static const msr_gpt_config_t tiles = {MSR_GPT_VOCAB, 200, 2, 4, 128};
/* 4 layers: with the blocks in host memory, each of the two slots holds
 * two blocks in turn */
static const msr_gpt_config_t deep = {MSR_GPT_VOCAB, 32, 4, 4, 64};

/* max |a - b| over n, relative to max |b| (at least 1e-30). */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0.0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

/* n tokens in [0, V): 30 random bits each */
static void random_tokens(int *x, size_t n, int V, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned hi = seed >> 16;
        seed = seed * 1103515245u + 12345u;
        x[i] = (int)((hi << 15 ^ seed >> 17) % (unsigned)V);
    }
}

/* Whether bf16 attention must take the fused kernel on this GPU and
 * shape: head size 16, 32 or 64 on sm_80 or later (gpt_cuda.h). */
static int fused_expected(const msr_gpt_config_t *cfg)
{
    int HS = cfg->channels / cfg->heads, major = 0;
    MSR_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
    return major >= 8 && (HS == 16 || HS == 32 || HS == 64);
}

/* One forward and backward of the same model on the CPU and the GPU, both
 * in precision: the loss within loss_tol relative, the logits within
 * logits_tol and every tensor's gradient within tol of their largest
 * element. In bf16, attention's path is the one gpt_cuda.h names for the
 * shape, and a second forward and backward gives the same bits. */
static void one_step_in(const msr_gpt_config_t *cfg, int B_, msr_precision_t precision,
                        double loss_tol, double logits_tol, double tol)
{
    int T = cfg->max_seq, N = B_ * T, V = cfg->vocab;
    msr_gpt_t *cpu;
    MSR_CHECK(msr_gpt_create(cfg, B_, &cpu) == MSR_OK);
    msr_gpt_init_params(cpu, 1337);
    msr_cuda_gpt_t *gpu;
    MSR_CHECK_MSG(msr_cuda_gpt_create(cfg, B_, 0, cpu->tensors, cpu->num_tensors, &gpu) == MSR_OK,
                  "%s", msr_err_msg());
    MSR_CHECK(msr_cuda_gpt_precision(gpu) == MSR_PRECISION_FP32);
    size_t bytes32 = msr_cuda_gpt_device_bytes(gpu);
    MSR_CHECK(msr_gpt_set_precision(cpu, precision) == MSR_OK);
    MSR_CHECK_MSG(msr_cuda_gpt_set_precision(gpu, precision) == MSR_OK, "%s", msr_err_msg());
    MSR_CHECK(msr_cuda_gpt_precision(gpu) == precision);
    MSR_CHECK(msr_cuda_gpt_fused_attention(gpu) ==
              (precision == MSR_PRECISION_BF16 && fused_expected(cfg)));
    /* bf16's operand scratch is counted */
    MSR_CHECK((msr_cuda_gpt_device_bytes(gpu) > bytes32) == (precision == MSR_PRECISION_BF16));
    MSR_CHECK(msr_cuda_gpt_set_params(gpu, cpu->params) == MSR_OK);
    int *in = msr_calloc((size_t)N, sizeof(int)), *tg = msr_calloc((size_t)N, sizeof(int));
    float *logits = msr_calloc((size_t)N * V, sizeof(float));
    float *grads = msr_calloc(cpu->num_params, sizeof(float));
    MSR_CHECK(in != NULL && tg != NULL && logits != NULL && grads != NULL);
    random_tokens(in, (size_t)N, V, 1);
    random_tokens(tg, (size_t)N, V, 2);

    double lc, lg;
    msr_gpt_zero_grad(cpu);
    MSR_CHECK(msr_gpt_forward(cpu, in, tg, B_, T, NULL, &lc) == MSR_OK);
    MSR_CHECK(msr_gpt_backward(cpu, 1.0f / (float)N, NULL) == MSR_OK);
    MSR_CHECK(msr_cuda_gpt_zero_grad(gpu) == MSR_OK);
    MSR_CHECK(msr_cuda_gpt_forward(gpu, in, tg, B_, T, &lg) == MSR_OK);
    MSR_CHECK(msr_cuda_gpt_backward(gpu, 1.0f / (float)N) == MSR_OK);
    MSR_CHECK(msr_cuda_gpt_get_logits(gpu, logits) == MSR_OK);
    MSR_CHECK(msr_cuda_gpt_get_grads(gpu, grads) == MSR_OK);

    double dl = rel_diff(logits, cpu->acts.logits, (size_t)N * V);
    printf("B %d T %d C %d V %d: loss cpu %.9f gpu %.9f; logits rel diff %.3g\n", B_, T,
           cfg->channels, V, lc, lg, dl);
    MSR_CHECK_MSG(fabs(lg - lc) <= loss_tol * fabs(lc), "loss gpu %.9f cpu %.9f", lg, lc);
    MSR_CHECK_MSG(dl <= logits_tol, "logits differ by %.3g relative", dl);
    double worst = 0.0;
    for (int k = 0; k < cpu->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &cpu->tensors[k];
        double d = rel_diff(grads + t->offset, cpu->grads + t->offset, t->count);
        worst = fmax(worst, d);
        MSR_CHECK_MSG(d <= tol, "gradient of %s differs by %.3g relative", t->name, d);
    }
    printf("largest gradient rel diff %.3g\n", worst);
    if (precision == MSR_PRECISION_BF16) {
        /* the same bits again: no atomics, no order that varies */
        float *again = msr_calloc(cpu->num_params, sizeof(float));
        MSR_CHECK(again != NULL);
        MSR_CHECK(msr_cuda_gpt_zero_grad(gpu) == MSR_OK);
        MSR_CHECK(msr_cuda_gpt_forward(gpu, in, tg, B_, T, &lg) == MSR_OK);
        MSR_CHECK(msr_cuda_gpt_backward(gpu, 1.0f / (float)N) == MSR_OK);
        MSR_CHECK(msr_cuda_gpt_get_grads(gpu, again) == MSR_OK);
        MSR_CHECK_MSG(memcmp(again, grads, cpu->num_params * sizeof(float)) == 0,
                      "a second backward's gradients differ from the first's");
        msr_free(again);
        /* the GPU's bf16 logits are away from the CPU's fp32 ones by more
         * than the fp32 comparison's tolerance: its products were rounded */
        double l32;
        MSR_CHECK(msr_gpt_set_precision(cpu, MSR_PRECISION_FP32) == MSR_OK);
        MSR_CHECK(msr_gpt_forward(cpu, in, tg, B_, T, NULL, &l32) == MSR_OK);
        double d32 = rel_diff(logits, cpu->acts.logits, (size_t)N * V);
        printf("bf16 logits against the CPU's fp32 ones: rel diff %.3g\n", d32);
        MSR_CHECK_MSG(d32 > 1e-4, "the bf16 logits are within fp32's 1e-4 (%.3g)", d32);
        /* back to fp32: the scratch goes */
        MSR_CHECK(msr_cuda_gpt_set_precision(gpu, MSR_PRECISION_FP32) == MSR_OK);
        MSR_CHECK(msr_cuda_gpt_device_bytes(gpu) == bytes32);
    }
    MSR_CHECK(msr_cuda_gpt_set_precision(gpu, (msr_precision_t)7) == MSR_ERR_INVALID_ARG);
    /* a token out of range is refused, not read */
    in[3] = V;
    MSR_CHECK(msr_cuda_gpt_forward(gpu, in, tg, B_, T, &lg) == MSR_ERR_INVALID_ARG);
    msr_free(grads);
    msr_free(logits);
    msr_free(tg);
    msr_free(in);
    msr_cuda_gpt_destroy(gpu);
    msr_gpt_destroy(cpu);
}

static void one_step(const msr_gpt_config_t *cfg, int B_, double loss_tol, double tol)
{
    one_step_in(cfg, B_, MSR_PRECISION_FP32, loss_tol, 1e-4, tol);
}

static void test_forward_backward(void)
{
    one_step(&shape, B, 1e-5, 1e-3);
}

/* bf16 on both: the same fp32 values up to the order of their sums, so an
 * operand differs only where the two straddle a bf16 rounding midpoint,
 * and then by at most 2u (u = 2^-8: tests/parallel/train_gpt_bf16.sh's
 * derivation). The loss within 2u of itself, as that test's; the logits
 * and gradients within 2u of their largest element. */
static void test_forward_backward_bf16(void)
{
    one_step_in(&shape, B, MSR_PRECISION_BF16, 1.0 / 128, 1.0 / 128, 1.0 / 128);
}

/* bf16 with head size 8: attention on cuBLAS's products */
static void test_forward_backward_bf16_hs8(void)
{
    one_step_in(&hs8, B, MSR_PRECISION_BF16, 1.0 / 128, 1.0 / 128, 1.0 / 128);
}

/* bf16 over several tiles of the fused attention, the last one partial */
static void test_forward_backward_bf16_tiles(void)
{
    one_step_in(&tiles, 3, MSR_PRECISION_BF16, 1.0 / 128, 1.0 / 128, 1.0 / 128);
}

/* GPT-2's shape in bf16: the fused attention at head size 64 over 16
 * tiles, the path gpu_bench.sh times; two batch rows keep the CPU's part
 * short */
static void test_gpt2_shape_bf16(void)
{
    one_step_in(&gpt2, 2, MSR_PRECISION_BF16, 1.0 / 128, 1.0 / 128, 1.0 / 128);
}

/* The real sizes the first GPU run meets: 8192 token rows, a 50257-row
 * head, (B, NH, T, T) attention of 800 MB a layer. */
static void test_gpt2_shape(void)
{
    one_step(&gpt2, B_GPT2, 1e-5, 1e-3);
}

/* The trainers' settings here: micro-batches of B, 2 a step, one process,
 * warm-up and clipping. */
static msr_train_config_t train_config(const msr_gpt_config_t *model)
{
    msr_train_config_t cfg = {
        .model = *model,
        .micro_batch = B,
        .grad_accum = 2,
        .dp = 1,
        .dp_rank = 0,
        .seed = 1337,
        .lr = 1e-3f,
        .warmup = 3,
        .grad_clip = 1.0f,
        .adamw = {0.9, 0.95, 1e-8, 0.1},
    };
    msr_train_config_defaults(&cfg);
    return cfg;
}

static void test_train_10_steps(void)
{
    msr_dataset_t *data;
    MSR_CHECK(msr_dataset_generate(7, 1 << 16, &data) == MSR_OK);
    msr_train_config_t cfg = train_config(&shape);
    msr_trainer_t *cpu;
    msr_cuda_trainer_t *gpu;
    MSR_CHECK(msr_trainer_create(&cfg, data, NULL, &cpu) == MSR_OK);
    MSR_CHECK(msr_cuda_trainer_create(&cfg, data, NULL, &gpu) == MSR_OK);
    for (int s = 1; s <= 10; s++) {
        double lc, lg;
        MSR_CHECK(msr_trainer_step(cpu, &lc) == MSR_OK);
        MSR_CHECK(msr_cuda_trainer_step(gpu, &lg) == MSR_OK);
        printf("step %d loss cpu %.6f gpu %.6f norm cpu %.6f gpu %.6f\n", s, lc, lg,
               cpu->last_grad_norm, gpu->last_grad_norm);
        MSR_CHECK_MSG(fabs(lg - lc) <= 1e-4 * fabs(lc), "step %d: loss gpu %.9f cpu %.9f", s, lg,
                      lc);
    }
    /* every tensor within 1e-3 of its largest element, except the key
     * bias (columns [C, 2C) of qkvb): its true gradient is zero, so Adam
     * turns rounding noise into full-size steps there (docs/model.md) */
    size_t P = cpu->model->num_params, C = (size_t)shape.channels;
    float *p = msr_calloc(P, sizeof(float));
    MSR_CHECK(p != NULL);
    MSR_CHECK(msr_cuda_gpt_get_params(gpu->model, p) == MSR_OK);
    for (int k = 0; k < cpu->model->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &cpu->model->tensors[k];
        const float *a = p + t->offset, *b = cpu->model->params + t->offset;
        const char *dot = strchr(t->name, '.');
        double d = dot != NULL && strcmp(dot, ".qkvb") == 0
                       ? fmax(rel_diff(a, b, C), rel_diff(a + 2 * C, b + 2 * C, C))
                       : rel_diff(a, b, t->count);
        MSR_CHECK_MSG(d <= 1e-3, "after 10 steps %s differs by %.3g relative", t->name, d);
    }
    msr_free(p);
    msr_cuda_trainer_destroy(gpu);
    msr_trainer_destroy(cpu);
    msr_dataset_destroy(data);
}

/* A forward and backward of each of two models on the same micro-batch,
 * accumulated into their gradients: the same loss, bitwise. */
static void both_steps(msr_cuda_gpt_t *a, msr_cuda_gpt_t *b, const int *in, const int *tg, int T,
                       float dloss)
{
    double la, lb;
    MSR_CHECK_MSG(msr_cuda_gpt_forward(a, in, tg, B, T, &la) == MSR_OK, "%s", msr_err_msg());
    MSR_CHECK_MSG(msr_cuda_gpt_forward(b, in, tg, B, T, &lb) == MSR_OK, "%s", msr_err_msg());
    MSR_CHECK_MSG(msr_cuda_gpt_backward(a, dloss) == MSR_OK, "%s", msr_err_msg());
    MSR_CHECK_MSG(msr_cuda_gpt_backward(b, dloss) == MSR_OK, "%s", msr_err_msg());
    MSR_CHECK_MSG(la == lb, "loss %.17g on the device, %.17g with the blocks in host memory", la,
                  lb);
}

/* Both models' logits, gradients and gradient norms: the same bits. */
static void same_outputs(msr_cuda_gpt_t *a, msr_cuda_gpt_t *b, size_t P, size_t logits)
{
    float *x = msr_calloc(P > logits ? P : logits, sizeof(float));
    float *y = msr_calloc(P > logits ? P : logits, sizeof(float));
    MSR_CHECK(x != NULL && y != NULL);
    MSR_CHECK(msr_cuda_gpt_get_logits(a, x) == MSR_OK && msr_cuda_gpt_get_logits(b, y) == MSR_OK);
    MSR_CHECK_MSG(memcmp(x, y, logits * sizeof(float)) == 0, "the logits differ");
    MSR_CHECK(msr_cuda_gpt_get_grads(a, x) == MSR_OK && msr_cuda_gpt_get_grads(b, y) == MSR_OK);
    size_t bad = 0;
    for (size_t i = 0; i < P; i++)
        bad += memcmp(&x[i], &y[i], sizeof(float)) != 0;
    MSR_CHECK_MSG(bad == 0, "%zu of %zu gradients differ", bad, P);
    double sa, sb;
    MSR_CHECK(msr_cuda_gpt_grad_sumsq(a, &sa) == MSR_OK &&
              msr_cuda_gpt_grad_sumsq(b, &sb) == MSR_OK);
    MSR_CHECK_MSG(sa == sb && sa > 0.0, "sums of squares %.17g and %.17g", sa, sb);
    msr_free(y);
    msr_free(x);
}

static msr_status_t never_ready(void *arg, int seg)
{
    (void)arg;
    (void)seg;
    return MSR_OK;
}

/* The blocks in host memory (msr_cuda_gpt_create_offload) against the
 * whole model on the device, 4 layers so each slot holds two blocks in
 * turn: two micro-batches accumulated, then the parameters changed (as an
 * update on the host changes them) and one more: the same losses, logits,
 * gradients and sums of squares, bitwise; the device holds 8 bytes a
 * parameter less and 8 a parameter of two blocks fewer (but a few places
 * of 64 floats). */
static void offload_blocks_in(msr_precision_t precision)
{
    const msr_gpt_config_t *cfg = &deep;
    int T = cfg->max_seq, N = B * T, V = cfg->vocab, L = cfg->layers;
    msr_gpt_t *cpu;
    MSR_CHECK(msr_gpt_create(cfg, B, &cpu) == MSR_OK);
    msr_gpt_init_params(cpu, 1337);
    size_t P = cpu->num_params, C = (size_t)cfg->channels, blk = 12 * C * C + 13 * C;
    float *hp, *hg;
    MSR_CHECK(cudaMallocHost((void **)&hp, P * sizeof(float)) == cudaSuccess);
    MSR_CHECK(cudaMallocHost((void **)&hg, P * sizeof(float)) == cudaSuccess);
    memcpy(hp, cpu->params, P * sizeof(float));
    msr_cuda_gpt_t *whole, *part;
    MSR_CHECK(msr_cuda_gpt_create(cfg, B, 0, cpu->tensors, cpu->num_tensors, &whole) == MSR_OK);
    MSR_CHECK(msr_cuda_gpt_create_offload(cfg, B, 0, cpu->tensors, cpu->num_tensors, NULL, hg,
                                          &part) == MSR_ERR_INVALID_ARG);
    MSR_CHECK_MSG(msr_cuda_gpt_create_offload(cfg, B, 0, cpu->tensors, cpu->num_tensors, hp, hg,
                                              &part) == MSR_OK,
                  "%s", msr_err_msg());
    MSR_CHECK(msr_cuda_gpt_set_params(whole, cpu->params) == MSR_OK);
    MSR_CHECK(msr_cuda_gpt_offloaded(part) && !msr_cuda_gpt_offloaded(whole));
    MSR_CHECK(msr_cuda_gpt_params_device(part) == NULL && msr_cuda_gpt_grads_device(part) == NULL);
    size_t bw = msr_cuda_gpt_device_bytes(whole), bp = msr_cuda_gpt_device_bytes(part);
    size_t fewer = 8 * P + 8 * (size_t)(L - 2) * blk;
    printf("device bytes: whole %zu, blocks in host memory %zu (%zu fewer; at most %zu)\n", bw, bp,
           bw - bp, fewer);
    MSR_CHECK(bw - bp <= fewer && bw - bp >= fewer - 8 * 8 * 64);
    MSR_CHECK(msr_cuda_gpt_set_precision(whole, precision) == MSR_OK);
    MSR_CHECK(msr_cuda_gpt_set_precision(part, precision) == MSR_OK);
    MSR_CHECK(msr_cuda_gpt_set_moments(part, hp, hp) == MSR_ERR_INVALID_ARG);

    int *in = msr_calloc((size_t)N * 4, sizeof(int));
    float *p2 = msr_calloc(P, sizeof(float)), *g = msr_calloc(P, sizeof(float));
    MSR_CHECK(in != NULL && p2 != NULL && g != NULL);
    random_tokens(in, (size_t)N * 4, V, 3);
    MSR_CHECK(msr_cuda_gpt_zero_grad(whole) == MSR_OK && msr_cuda_gpt_zero_grad(part) == MSR_OK);
    /* no backward yet: zeros, whatever host_grads held */
    memset(hg, 0x7f, P * sizeof(float));
    MSR_CHECK(msr_cuda_gpt_get_grads(part, g) == MSR_OK);
    for (size_t i = 0; i < P; i++)
        MSR_CHECK_MSG(g[i] == 0.0f, "gradient %zu is %g before any backward", i, g[i]);
    float dloss = 1.0f / (float)(2 * N);
    both_steps(whole, part, in, in + N, T, dloss);
    both_steps(whole, part, in + 2 * N, in + 3 * N, T, dloss);
    MSR_CHECK(msr_cuda_gpt_backward_ex(part, dloss, never_ready, NULL) == MSR_ERR_INVALID_ARG);
    same_outputs(whole, part, P, (size_t)N * V);
    /* an update on the host: the model must fetch every block anew */
    for (size_t i = 0; i < P; i++)
        p2[i] = cpu->params[i] * 0.75f + (float)(i % 7) * 1e-3f;
    MSR_CHECK(msr_cuda_gpt_set_params(whole, p2) == MSR_OK);
    MSR_CHECK(msr_cuda_gpt_sync(part) == MSR_OK);
    memcpy(hp, p2, P * sizeof(float));
    msr_cuda_gpt_host_params_changed(part);
    MSR_CHECK(msr_cuda_gpt_zero_grad(whole) == MSR_OK && msr_cuda_gpt_zero_grad(part) == MSR_OK);
    both_steps(whole, part, in + N, in, T, 1.0f / (float)N);
    same_outputs(whole, part, P, (size_t)N * V);
    MSR_CHECK(msr_cuda_gpt_get_params(part, g) == MSR_OK);
    MSR_CHECK(memcmp(g, p2, P * sizeof(float)) == 0);
    /* set_params writes the master copy */
    MSR_CHECK(msr_cuda_gpt_set_params(part, cpu->params) == MSR_OK);
    MSR_CHECK(memcmp(hp, cpu->params, P * sizeof(float)) == 0);
    msr_free(g);
    msr_free(p2);
    msr_free(in);
    msr_cuda_gpt_destroy(part);
    msr_cuda_gpt_destroy(whole);
    cudaFreeHost(hg);
    cudaFreeHost(hp);
    msr_gpt_destroy(cpu);
}

static void test_offload_blocks(void)
{
    offload_blocks_in(MSR_PRECISION_FP32);
}

static void test_offload_blocks_bf16(void)
{
    offload_blocks_in(MSR_PRECISION_BF16);
}

/* Two GPU trainers with AdamW on the host, the second with the blocks in
 * host memory too (--offload params=host), 10 steps of 2 micro-batches
 * with clipping: the same losses, norms, parameters and checkpoint
 * payloads, bitwise, and less device memory. */
static void test_train_host_params(void)
{
    msr_dataset_t *data;
    MSR_CHECK(msr_dataset_generate(7, 1 << 16, &data) == MSR_OK);
    msr_train_config_t cfg = train_config(&deep);
    cfg.par.offload.mode = MSR_OFFLOAD_HOST;
    cfg.par.offload.chunk_bytes = 4096 * sizeof(float);
    msr_train_config_t hcfg = cfg;
    hcfg.par.params_offload.mode = MSR_OFFLOAD_HOST;
    msr_cuda_trainer_t *a, *b;
    MSR_CHECK_MSG(msr_cuda_trainer_create(&cfg, data, NULL, &a) == MSR_OK, "%s", msr_err_msg());
    MSR_CHECK_MSG(msr_cuda_trainer_create(&hcfg, data, NULL, &b) == MSR_OK, "%s", msr_err_msg());
    MSR_CHECK(a->hgrads == NULL && b->hgrads != NULL && msr_cuda_gpt_offloaded(b->model));
    printf("device bytes: optimizer=host %zu, params=host too %zu\n", a->device_bytes,
           b->device_bytes);
    MSR_CHECK(b->device_bytes < a->device_bytes);
    for (int s = 1; s <= 10; s++) {
        double la, lb;
        MSR_CHECK_MSG(msr_cuda_trainer_step(a, &la) == MSR_OK, "%s", msr_err_msg());
        MSR_CHECK_MSG(msr_cuda_trainer_step(b, &lb) == MSR_OK, "%s", msr_err_msg());
        printf("step %d loss %.9f %.9f norm %.9f %.9f\n", s, la, lb, a->last_grad_norm,
               b->last_grad_norm);
        MSR_CHECK_MSG(la == lb && a->last_grad_norm == b->last_grad_norm,
                      "step %d: loss %.17g / %.17g, norm %.17g / %.17g", s, la, lb,
                      a->last_grad_norm, b->last_grad_norm);
    }
    size_t P = a->layout->num_params;
    float *pa = msr_calloc(P, sizeof(float)), *pb = msr_calloc(P, sizeof(float));
    MSR_CHECK(pa != NULL && pb != NULL);
    MSR_CHECK(msr_cuda_gpt_get_params(a->model, pa) == MSR_OK);
    MSR_CHECK(msr_cuda_gpt_get_params(b->model, pb) == MSR_OK);
    MSR_CHECK_MSG(memcmp(pa, pb, P * sizeof(float)) == 0, "the parameters differ after 10 steps");
    void *sa, *sb;
    size_t na, nb;
    MSR_CHECK(msr_cuda_trainer_snapshot(a, "m", &sa, &na) == MSR_OK);
    MSR_CHECK(msr_cuda_trainer_snapshot(b, "m", &sb, &nb) == MSR_OK);
    MSR_CHECK_MSG(na == nb && memcmp(sa, sb, na) == 0, "the checkpoint payloads differ");
    msr_free(sb);
    msr_free(sa);
    msr_free(pb);
    msr_free(pa);
    msr_cuda_trainer_destroy(b);
    msr_cuda_trainer_destroy(a);
    /* params=host without the optimizer on the host is refused */
    hcfg.par.offload.mode = MSR_OFFLOAD_NONE;
    MSR_CHECK(msr_cuda_trainer_create(&hcfg, data, NULL, &b) == MSR_ERR_CONFIG);
    msr_dataset_destroy(data);
}

static const msr_test_t tests[] = {
    {"forward_backward", test_forward_backward, 60},
    {"forward_backward_bf16", test_forward_backward_bf16, 60},
    {"forward_backward_bf16_hs8", test_forward_backward_bf16_hs8, 60},
    {"forward_backward_bf16_tiles", test_forward_backward_bf16_tiles, 120},
    {"gpt2_shape", test_gpt2_shape, 540},
    {"gpt2_shape_bf16", test_gpt2_shape_bf16, 540},
    {"train_10_steps", test_train_10_steps, 120},
    {"offload_blocks", test_offload_blocks, 60},
    {"offload_blocks_bf16", test_offload_blocks_bf16, 60},
    {"train_host_params", test_train_host_params, 120},
};

/* Asks CUDA for a device, in a child (msr_test_run_in_child): the runner
 * forks each test, and a child of a process that has set CUDA up cannot
 * use it (cudaErrorInitializationError), so this process never touches
 * CUDA. 0: a GPU; SKIP: none on this machine; 1: a GPU that CUDA cannot
 * use. */
static int probe(void)
{
    int count = 0;
    msr_status_t st = msr_cuda_device_count(&count);
    if (st == MSR_ERR_UNSUPPORTED) /* no GPU on this machine */
        printf("skip: %s\n", msr_err_msg());
    else if (st != MSR_OK) /* a GPU that CUDA cannot use is a failure */
        printf("FAIL: %s\n", msr_err_msg());
    return st == MSR_OK ? 0 : st == MSR_ERR_UNSUPPORTED ? SKIP : 1;
}

int main(int argc, char **argv)
{
    int rc = msr_test_run_in_child(probe, 120);
    if (rc != 0)
        return rc;
    return MSR_TEST_MAIN(argc, argv, tests);
}
