/* The reference model on a CUDA GPU (see gpt_cuda.h): error handling,
 * creation and destruction (the device buffers in the CPU model's flat
 * layout, the activations carved from its table), the copies between host
 * and device, and the optimizer's parts (the gradient's sum of squares,
 * AdamW over spans of one decay flag). Forward and backward are in
 * gpt_cuda_pass.cu. */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "base/alloc.h"
#include "base/err.h"
#include "model/cuda/gpt_cuda.h"
#include "model/layers.h"
}
#include "model/cuda/gpt_cuda_impl.cuh"

/* ---- error handling ---- */

msr_status_t msr_cuda_gpt_cuda_fail(cudaError_t e, const char *what, int line)
{
    return msr_err(e == cudaErrorMemoryAllocation ? MSR_ERR_NO_MEMORY : MSR_ERR_BACKEND,
                   "gpt_cuda: %s (line %d): %s: %s", what, line, cudaGetErrorName(e),
                   cudaGetErrorString(e));
}

msr_status_t msr_cuda_gpt_blas_fail(cublasStatus_t s, const char *what, int line)
{
    return msr_err(s == CUBLAS_STATUS_ALLOC_FAILED ? MSR_ERR_NO_MEMORY : MSR_ERR_BACKEND,
                   "gpt_cuda: %s (line %d): cuBLAS status %d (%s)", what, line, (int)s,
                   cublasGetStatusString(s));
}

/* ---- creation ---- */

/* The activations and work space: the CPU model's table (gpt.h), each
 * piece rounded up to 64 floats so every one is 256-byte aligned, then this
 * model's own scratch. */
static void layout_acts(msr_cuda_gpt_t *md, msr_gpt_carve_t *c)
{
    size_t N = (size_t)md->max_batch * (size_t)md->cfg.max_seq, C = (size_t)md->cfg.channels;
    msr_gpt_carve_acts(&md->cfg, md->max_batch, 0, c, &md->acts);
    msr_gpt_carve_work(&md->cfg, md->max_batch, 0, md->cfg.heads, c, &md->work);
    md->ln_tmp = msr_gpt_carve(c, N * C);
    md->ones = msr_gpt_carve(c, N);
}

__global__ static void fill_k(float *p, float value, size_t n)
{
    GRID_STRIDE(i, n)
    p[i] = value;
}

/* Whether a failed cudaGetDeviceCount means that this machine has no GPU:
 * CUDA says so, or no driver is installed at all (the runtime then answers
 * cudaErrorInsufficientDriver and the driver's version is 0). A driver too
 * old for this runtime, or any other error, is a failure, not an absence. */
static int no_device(cudaError_t e)
{
    int version = -1;
    if (e == cudaErrorNoDevice)
        return 1;
    return e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&version) == cudaSuccess &&
           version == 0;
}

extern "C" msr_status_t msr_cuda_device_count(int *count_p)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess && no_device(e))
        return msr_err(MSR_ERR_UNSUPPORTED, "gpt_cuda: no CUDA device here: %s: %s",
                       cudaGetErrorName(e), cudaGetErrorString(e));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return msr_err(MSR_ERR_BACKEND,
                       "gpt_cuda: CUDA is unusable here: cudaGetDeviceCount: %s: %s",
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (n < 1)
        return msr_err(MSR_ERR_UNSUPPORTED,
                       "gpt_cuda: no CUDA device here: none is visible to this process");
    *count_p = n;
    return MSR_OK;
}

static size_t up64(size_t n)
{
    return (n + 63) / 64 * 64;
}

/* Where the device's parameters and gradients go: the whole flat buffer,
 * or with the blocks in host memory the embeddings, the final norm and
 * two block slots, each at its flat offset's place modulo 64 floats (a
 * slot one block and 64 floats, so any block's place fits). */
static void layout_params(msr_cuda_gpt_t *md)
{
    int L = md->cfg.layers;
    size_t fin = msr_cuda_gpt_seg_offset(md, L + 1);
    md->block_n = msr_cuda_gpt_seg_offset(md, 2) - msr_cuda_gpt_seg_offset(md, 1);
    md->slot_block[0] = md->slot_block[1] = -1;
    md->resident_stale = 1;
    md->grads_zero = 1;
    if (md->host_params == NULL) {
        md->final_at = fin;
        md->dev_count = md->num_params;
        return;
    }
    md->final_at = up64(msr_cuda_gpt_seg_offset(md, 1)) + fin % 64;
    md->slot_at[0] = up64(md->final_at + (md->num_params - fin));
    md->slot_at[1] = md->slot_at[0] + up64(md->block_n) + 64;
    md->dev_count = md->slot_at[1] + up64(md->block_n) + 64;
}

static msr_status_t create_device_parts(msr_cuda_gpt_t *md)
{
    size_t P = md->dev_count, N = (size_t)md->max_batch * md->cfg.max_seq;
    CU(cudaSetDevice(md->device));
    CU(cudaStreamCreateWithFlags(&md->stream, cudaStreamNonBlocking));
    BLAS(cublasCreate(&md->blas));
    BLAS(cublasSetStream(md->blas, md->stream));
    /* plain fp32: no TF32 tensor cores, so results follow the CPU's */
    BLAS(cublasSetMathMode(md->blas, CUBLAS_DEFAULT_MATH));
    CU(cudaMalloc((void **)&md->params, P * sizeof(float)));
    CU(cudaMalloc((void **)&md->grads, P * sizeof(float)));
    if (md->host_params != NULL) { /* the optimizer is the caller's, on the host */
        CU(cudaStreamCreateWithFlags(&md->xfer, cudaStreamNonBlocking));
        cudaEvent_t *ev[] = {md->p_ready, md->p_free, md->g_ready, md->g_done};
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 2; j++)
                CU(cudaEventCreateWithFlags(&ev[k][j], cudaEventDisableTiming));
    } else {
        CU(cudaMalloc((void **)&md->m, P * sizeof(float)));
        CU(cudaMalloc((void **)&md->v, P * sizeof(float)));
    }
    msr_gpt_carve_t count = {NULL, 0, 64};
    layout_acts(md, &count);
    md->mem_count = count.used;
    CU(cudaMalloc((void **)&md->mem, md->mem_count * sizeof(float)));
    msr_gpt_carve_t c = {md->mem, 0, 64};
    layout_acts(md, &c);
    CU(cudaMalloc((void **)&md->d_inputs, N * sizeof(int)));
    CU(cudaMalloc((void **)&md->d_targets, N * sizeof(int)));
    CU(cudaMalloc((void **)&md->d_tok, (3 * N + 1) * sizeof(int)));
    CU(cudaMalloc((void **)&md->d_partials, SUMSQ_BLOCKS * sizeof(double)));
    TRY(msr_cuda_gpt_zero(md, md->params, P));
    TRY(msr_cuda_gpt_zero(md, md->grads, P));
    if (md->m != NULL) {
        TRY(msr_cuda_gpt_zero(md, md->m, P));
        TRY(msr_cuda_gpt_zero(md, md->v, P));
    }
    TRY(msr_cuda_gpt_zero(md, md->mem, md->mem_count));
    fill_k<<<msr_cuda_gpt_grid_for(N), THREADS, 0, md->stream>>>(md->ones, 1.0f, N);
    LAUNCHED("fill");
    CU(cudaStreamSynchronize(md->stream));
    return MSR_OK;
}

static msr_status_t create_in(const msr_gpt_config_t *cfg, int max_batch, int device,
                              const msr_gpt_tensor_t *tensors, int n, float *host_params,
                              float *host_grads, msr_cuda_gpt_t **model_p)
{
    if (msr_gpt_config_check(cfg) != MSR_OK)
        return msr_err_prefix(MSR_ERR_CONFIG, "gpt_cuda");
    size_t P = msr_gpt_num_params(cfg);
    if (max_batch < 1 || (size_t)max_batch * (size_t)cfg->max_seq > (1u << 24) || device < 0 ||
        tensors == NULL || n < 1 || tensors[n - 1].offset + tensors[n - 1].count != P)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "gpt_cuda: batch %d, device %d or a tensor table of %d entries that does "
                       "not cover the %zu parameters",
                       max_batch, device, n, P);
    msr_cuda_gpt_t *md = (msr_cuda_gpt_t *)msr_calloc(1, sizeof *md);
    if (md == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "gpt_cuda: out of host memory for a model");
    md->cfg = *cfg;
    md->max_batch = max_batch;
    md->device = device;
    md->num_params = P;
    md->host_params = host_params;
    md->host_grads = host_grads;
    layout_params(md);
    size_t N = (size_t)max_batch * cfg->max_seq;
    md->acts.blocks =
        (msr_gpt_block_acts_t *)msr_calloc((size_t)cfg->layers, sizeof(msr_gpt_block_acts_t));
    md->spans = (span_t *)msr_calloc((size_t)n, sizeof(span_t));
    md->h_targets = (int *)msr_calloc(N, sizeof(int));
    md->h_losses = (float *)msr_calloc(N, sizeof(float));
    md->h_partials = (double *)msr_calloc(SUMSQ_BLOCKS, sizeof(double));
    md->h_tok = (int *)msr_calloc(3 * N + 1 + (size_t)cfg->vocab + 1, sizeof(int));
    msr_status_t st = MSR_ERR_NO_MEMORY;
    if (md->acts.blocks == NULL || md->spans == NULL || md->h_targets == NULL ||
        md->h_losses == NULL || md->h_partials == NULL || md->h_tok == NULL) {
        msr_err_set("gpt_cuda: out of host memory for a batch of %zu tokens", N);
        goto err_destroy;
    }
    for (int k = 0; k < n; k++) {
        span_t *last = md->num_spans > 0 ? &md->spans[md->num_spans - 1] : NULL;
        if (last != NULL && last->decay == tensors[k].decay &&
            last->lo + last->n == tensors[k].offset)
            last->n += tensors[k].count;
        else
            md->spans[md->num_spans++] =
                (span_t){tensors[k].offset, tensors[k].count, tensors[k].decay};
    }
    if ((st = create_device_parts(md)) != MSR_OK)
        goto err_destroy;
    *model_p = md;
    return MSR_OK;

err_destroy:
    msr_cuda_gpt_destroy(md);
    return st;
}

extern "C" msr_status_t msr_cuda_gpt_create(const msr_gpt_config_t *cfg, int max_batch, int device,
                                            const msr_gpt_tensor_t *tensors, int n,
                                            msr_cuda_gpt_t **model_p)
{
    return create_in(cfg, max_batch, device, tensors, n, NULL, NULL, model_p);
}

extern "C" msr_status_t msr_cuda_gpt_create_offload(const msr_gpt_config_t *cfg, int max_batch,
                                                    int device, const msr_gpt_tensor_t *tensors,
                                                    int n, float *host_params, float *host_grads,
                                                    msr_cuda_gpt_t **model_p)
{
    if (host_params == NULL || host_grads == NULL)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "gpt_cuda: the blocks in host memory need host parameters and gradients");
    return create_in(cfg, max_batch, device, tensors, n, host_params, host_grads, model_p);
}

extern "C" void msr_cuda_gpt_destroy(msr_cuda_gpt_t *md)
{
    if (md == NULL)
        return;
    if (md->stream != NULL) {
        /* best effort: nothing may be in flight when the buffers go */
        (void)cudaStreamSynchronize(md->stream);
    }
    if (md->xfer != NULL)
        (void)cudaStreamSynchronize(md->xfer);
    cudaEvent_t *ev[] = {md->p_ready, md->p_free, md->g_ready, md->g_done};
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 2; j++)
            if (ev[k][j] != NULL)
                cudaEventDestroy(ev[k][j]);
    if (md->xfer != NULL)
        cudaStreamDestroy(md->xfer);
    cudaFree(md->fa_stats);
    cudaFree(md->bf_hold);
    cudaFree(md->bf_slot[1]);
    cudaFree(md->bf_slot[0]);
    cudaFree(md->d_partials);
    cudaFree(md->d_tok);
    cudaFree(md->d_targets);
    cudaFree(md->d_inputs);
    cudaFree(md->mem);
    cudaFree(md->v);
    cudaFree(md->m);
    cudaFree(md->grads);
    cudaFree(md->params);
    if (md->event != NULL)
        cudaEventDestroy(md->event);
    if (md->blas != NULL)
        cublasDestroy(md->blas);
    if (md->stream != NULL)
        cudaStreamDestroy(md->stream);
    msr_free(md->h_tok);
    msr_free(md->h_partials);
    msr_free(md->h_losses);
    msr_free(md->h_targets);
    msr_free(md->spans);
    msr_free(md->acts.blocks);
    msr_free(md);
}

extern "C" size_t msr_cuda_gpt_num_params(const msr_cuda_gpt_t *md)
{
    return md->num_params;
}

extern "C" size_t msr_cuda_gpt_device_bytes(const msr_cuda_gpt_t *md)
{
    size_t N = (size_t)md->max_batch * md->cfg.max_seq, per = md->m != NULL ? 4 : 2;
    return (per * md->dev_count + md->mem_count + md->fa_count) * sizeof(float) +
           (5 * N + 1) * sizeof(int) + SUMSQ_BLOCKS * sizeof(double) +
           (2 * md->bf_cap + md->bf_hold_cap) * sizeof(__nv_bfloat16);
}

static void free_bf16(msr_cuda_gpt_t *md)
{
    cudaFree(md->fa_stats);
    md->fa_stats = md->fa_dot = NULL;
    md->fa_count = 0;
    cudaFree(md->bf_hold);
    cudaFree(md->bf_slot[1]);
    cudaFree(md->bf_slot[0]);
    md->bf_hold = md->bf_slot[0] = md->bf_slot[1] = NULL;
    md->bf_cap = md->bf_hold_cap = 0;
    md->hold_src = NULL;
    md->hold_n = 0;
}

extern "C" msr_status_t msr_cuda_gpt_set_precision(msr_cuda_gpt_t *md, msr_precision_t precision)
{
    if (precision != MSR_PRECISION_FP32 && precision != MSR_PRECISION_BF16)
        return msr_err(MSR_ERR_INVALID_ARG, "gpt_cuda: precision %d is not fp32 or bf16",
                       (int)precision);
    /* nothing queued may still read the scratch */
    CU(cudaStreamSynchronize(md->stream));
    free_bf16(md);
    md->precision = MSR_PRECISION_FP32;
    /* a backward takes its forward's precision: the tensor-core attention
     * keeps row statistics where the other keeps att */
    md->B = md->T = 0;
    if (precision == MSR_PRECISION_FP32)
        return MSR_OK;
    /* The largest operand of any product, in elements, a strided view's
     * whole extent: an activation of N rows of at most max(4C, V) columns
     * (the MLP's, the logits' gradient), a batch row's T x T attention of
     * every head (unless attention takes the tensor-core path, which
     * rounds in shared memory), the tied embedding (V, C) or an MLP weight
     * (4C, C). The held operand is an activation: qkv (N, 3C) or an output
     * gradient. */
    size_t C = (size_t)md->cfg.channels, V = (size_t)md->cfg.vocab, T = (size_t)md->cfg.max_seq;
    size_t N = (size_t)md->max_batch * T, wide = 4 * C > V ? 4 * C : V;
    size_t cap = N * wide, rows = (size_t)md->max_batch * md->cfg.heads * T;
    int flash = msr_cuda_gpt_flash_ok(md);
    if (!flash && (size_t)md->cfg.heads * T * T > cap)
        cap = (size_t)md->cfg.heads * T * T;
    if (V * C > cap)
        cap = V * C;
    if (4 * C * C > cap)
        cap = 4 * C * C;
    msr_status_t st = MSR_OK;
    cudaError_t e;
    for (int k = 0; k < 2 && st == MSR_OK; k++) {
        if ((e = cudaMalloc((void **)&md->bf_slot[k], cap * sizeof(__nv_bfloat16))) != cudaSuccess)
            st = msr_cuda_gpt_cuda_fail(e, "cudaMalloc(bf16 operand)", __LINE__);
    }
    if (st == MSR_OK &&
        (e = cudaMalloc((void **)&md->bf_hold, N * wide * sizeof(__nv_bfloat16))) != cudaSuccess)
        st = msr_cuda_gpt_cuda_fail(e, "cudaMalloc(bf16 held operand)", __LINE__);
    /* the tensor-core attention's row statistics: 2 floats a row of every
     * layer, and backward's one */
    size_t fa = flash ? rows * (2 * (size_t)md->cfg.layers + 1) : 0;
    if (st == MSR_OK && fa > 0) {
        if ((e = cudaMalloc((void **)&md->fa_stats, fa * sizeof(float))) != cudaSuccess)
            st = msr_cuda_gpt_cuda_fail(e, "cudaMalloc(attention statistics)", __LINE__);
        else {
            md->fa_dot = md->fa_stats + 2 * (size_t)md->cfg.layers * rows;
            md->fa_count = fa;
        }
    }
    if (st != MSR_OK) {
        free_bf16(md);
        return st;
    }
    md->bf_cap = cap;
    md->bf_hold_cap = N * wide;
    md->precision = MSR_PRECISION_BF16;
    return MSR_OK;
}

extern "C" int msr_cuda_gpt_fused_attention(const msr_cuda_gpt_t *md)
{
    return md->precision == MSR_PRECISION_BF16 && md->fa_stats != NULL;
}

extern "C" msr_precision_t msr_cuda_gpt_precision(const msr_cuda_gpt_t *md)
{
    return md->precision;
}

extern "C" void msr_cuda_gpt_free_moments(msr_cuda_gpt_t *md)
{
    /* nothing queued may still use them */
    (void)cudaStreamSynchronize(md->stream);
    cudaFree(md->v);
    cudaFree(md->m);
    md->m = md->v = NULL;
}

/* The moments' calls on a model whose moments went to the host. */
static msr_status_t moments_gone(const msr_cuda_gpt_t *md, const char *what)
{
    if (md->m != NULL)
        return MSR_OK;
    return msr_err(MSR_ERR_INVALID_ARG, "gpt_cuda: %s: the moments are on the host", what);
}

extern "C" float *msr_cuda_gpt_params_device(msr_cuda_gpt_t *md)
{
    return md->host_params != NULL ? NULL : md->params;
}

extern "C" int msr_cuda_gpt_offloaded(const msr_cuda_gpt_t *md)
{
    return md->host_params != NULL;
}

extern "C" void msr_cuda_gpt_host_params_changed(msr_cuda_gpt_t *md)
{
    md->slot_block[0] = md->slot_block[1] = -1;
    md->resident_stale = 1;
}

extern "C" void *msr_cuda_gpt_stream(msr_cuda_gpt_t *md)
{
    return md->stream;
}

extern "C" float *msr_cuda_gpt_grads_device(msr_cuda_gpt_t *md)
{
    return md->host_params != NULL ? NULL : md->grads;
}

msr_status_t msr_cuda_gpt_copy_sync(msr_cuda_gpt_t *md, void *dst, const void *src, size_t bytes,
                                    cudaMemcpyKind kind)
{
    CU(cudaMemcpyAsync(dst, src, bytes, kind, md->stream));
    CU(cudaStreamSynchronize(md->stream));
    return MSR_OK;
}

extern "C" msr_status_t msr_cuda_gpt_set_params(msr_cuda_gpt_t *md, const float *host)
{
    if (md->host_params == NULL)
        return msr_cuda_gpt_copy_sync(md, md->params, host, md->num_params * sizeof(float),
                                      cudaMemcpyHostToDevice);
    TRY(msr_cuda_gpt_sync(md)); /* no copy in flight reads them */
    if (host != md->host_params)
        memcpy(md->host_params, host, md->num_params * sizeof(float));
    msr_cuda_gpt_host_params_changed(md);
    return MSR_OK;
}

extern "C" msr_status_t msr_cuda_gpt_get_params(msr_cuda_gpt_t *md, float *host)
{
    if (md->host_params == NULL)
        return msr_cuda_gpt_copy_sync(md, host, md->params, md->num_params * sizeof(float),
                                      cudaMemcpyDeviceToHost);
    TRY(msr_cuda_gpt_sync(md));
    memcpy(host, md->host_params, md->num_params * sizeof(float));
    return MSR_OK;
}

extern "C" msr_status_t msr_cuda_gpt_get_grads(msr_cuda_gpt_t *md, float *host)
{
    size_t bytes = md->num_params * sizeof(float);
    if (md->host_params == NULL)
        return msr_cuda_gpt_copy_sync(md, host, md->grads, bytes, cudaMemcpyDeviceToHost);
    TRY(msr_cuda_gpt_sync(md));
    if (md->grads_zero) /* host_grads still hold an earlier step's */
        memset(host, 0, bytes);
    else
        memcpy(host, md->host_grads, bytes);
    return MSR_OK;
}

extern "C" msr_status_t msr_cuda_gpt_set_moments(msr_cuda_gpt_t *md, const float *m, const float *v)
{
    TRY(moments_gone(md, "set_moments"));
    TRY(msr_cuda_gpt_copy_sync(md, md->m, m, md->num_params * sizeof(float),
                               cudaMemcpyHostToDevice));
    return msr_cuda_gpt_copy_sync(md, md->v, v, md->num_params * sizeof(float),
                                  cudaMemcpyHostToDevice);
}

extern "C" msr_status_t msr_cuda_gpt_get_moments(msr_cuda_gpt_t *md, float *m, float *v)
{
    TRY(moments_gone(md, "get_moments"));
    TRY(msr_cuda_gpt_copy_sync(md, m, md->m, md->num_params * sizeof(float),
                               cudaMemcpyDeviceToHost));
    return msr_cuda_gpt_copy_sync(md, v, md->v, md->num_params * sizeof(float),
                                  cudaMemcpyDeviceToHost);
}

extern "C" msr_status_t msr_cuda_gpt_zero_grad(msr_cuda_gpt_t *md)
{
    md->grads_zero = 1;
    if (md->host_params == NULL)
        return msr_cuda_gpt_zero(md, md->grads, md->dev_count);
    /* the resident gradients only: the copy stream may still be copying a
     * slot out, and each slot is readied before its backward anyway */
    int L = md->cfg.layers;
    size_t fin = msr_cuda_gpt_seg_offset(md, L + 1);
    TRY(msr_cuda_gpt_zero(md, md->grads, msr_cuda_gpt_seg_offset(md, 1)));
    return msr_cuda_gpt_zero(md, md->grads + md->final_at, md->num_params - fin);
}

extern "C" msr_status_t msr_cuda_gpt_sync(msr_cuda_gpt_t *md)
{
    CU(cudaStreamSynchronize(md->stream));
    if (md->xfer != NULL)
        CU(cudaStreamSynchronize(md->xfer));
    return MSR_OK;
}

/* ---- the optimizer's parts ---- */
/* Per block, the sum of squares (in double) of its grid-stride share of x. */
__global__ static void sumsq_k(double *partials, const float *x, size_t n)
{
    __shared__ double acc[THREADS];
    double s = 0.0;
    GRID_STRIDE(i, n)
    s += (double)x[i] * (double)x[i];
    acc[threadIdx.x] = s;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k)
            acc[threadIdx.x] += acc[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        partials[blockIdx.x] = acc[0];
}

/* AdamW over n elements of one decay flag (msr_adamw_update_range). */
__global__ static void adamw_k(float *p, const float *g, float *m, float *v, size_t n, float keep,
                               msr_cuda_adamw_step_t s)
{
    GRID_STRIDE(i, n)
    {
        float gr = g[i] * s.grad_scale;
        float mm = m[i] * s.beta1 + s.one_minus_beta1 * gr;
        float vv = v[i] * s.beta2 + s.one_minus_beta2 * gr * gr;
        m[i] = mm;
        v[i] = vv;
        float denom = sqrtf(vv) / s.bc2_sqrt + s.eps;
        p[i] = p[i] * keep - s.step_size * mm / denom;
    }
}

/* sumsq_k's sums on the host, in its order (every product of two
 * floats is exact in double, so only the order of the adds matters): each
 * of its threads' grid-stride share, in order, each block's tree of
 * halves, the blocks in order. The threads' sums advance together, one
 * grid's width of x at a time, so x is read in order (each thread's share
 * alone would read one float every 1 MiB). acc: one double per thread of
 * the grid. */
static double sumsq_host(const float *x, size_t n, double *acc)
{
    size_t width = (size_t)SUMSQ_BLOCKS * THREADS;
    memset(acc, 0, width * sizeof(double));
    for (size_t lo = 0; lo < n; lo += width) {
        size_t m = n - lo < width ? n - lo : width;
        const float *xs = x + lo;
        for (size_t j = 0; j < m; j++)
            acc[j] += (double)xs[j] * (double)xs[j];
    }
    double total = 0.0;
    for (size_t b = 0; b < SUMSQ_BLOCKS; b++) {
        double *t = acc + b * THREADS;
        for (size_t k = THREADS / 2; k > 0; k /= 2)
            for (size_t i = 0; i < k; i++)
                t[i] += t[i + k];
        total += t[0];
    }
    return total;
}

extern "C" msr_status_t msr_cuda_gpt_grad_sumsq(msr_cuda_gpt_t *md, double *sumsq_p)
{
    if (md->host_params != NULL) {
        TRY(msr_cuda_gpt_sync(md));
        if (md->grads_zero) {
            *sumsq_p = 0.0;
            return MSR_OK;
        }
        double *acc = (double *)msr_malloc((size_t)SUMSQ_BLOCKS * THREADS * sizeof(double));
        if (acc == NULL)
            return msr_err(MSR_ERR_NO_MEMORY, "gpt_cuda: out of host memory for a sum of squares");
        *sumsq_p = sumsq_host(md->host_grads, md->num_params, acc);
        msr_free(acc);
        return MSR_OK;
    }
    sumsq_k<<<SUMSQ_BLOCKS, THREADS, 0, md->stream>>>(md->d_partials, md->grads, md->num_params);
    LAUNCHED("sumsq");
    TRY(msr_cuda_gpt_copy_sync(md, md->h_partials, md->d_partials, SUMSQ_BLOCKS * sizeof(double),
                               cudaMemcpyDeviceToHost));
    double s = 0.0;
    for (int k = 0; k < SUMSQ_BLOCKS; k++)
        s += md->h_partials[k];
    *sumsq_p = s;
    return MSR_OK;
}

extern "C" msr_status_t msr_cuda_gpt_adamw(msr_cuda_gpt_t *md, const msr_cuda_adamw_step_t *s)
{
    TRY(moments_gone(md, "adamw"));
    for (int k = 0; k < md->num_spans; k++) {
        const span_t *sp = &md->spans[k];
        float keep = sp->decay ? s->decay_keep : 1.0f;
        adamw_k<<<msr_cuda_gpt_grid_for(sp->n), THREADS, 0, md->stream>>>(
            md->params + sp->lo, md->grads + sp->lo, md->m + sp->lo, md->v + sp->lo, sp->n, keep,
            *s);
        LAUNCHED("adamw");
    }
    return MSR_OK;
}
