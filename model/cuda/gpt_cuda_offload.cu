/* The CUDA model's blocks in host memory (msr_cuda_gpt_create_offload,
 * gpt_cuda.h): where a block's parameters and gradients sit on the
 * device, and the copies between their slots and host memory on the
 * copy stream, ordered against the model's stream by events. Forward and
 * backward (gpt_cuda_pass.cu) call these around each block. */
#include <cuda_runtime.h>

extern "C" {
#include "model/cuda/gpt_cuda.h"
}
#include "model/cuda/gpt_cuda_impl.cuh"

/* Block l's parameters (grads 0) or gradients (grads 1) on the device:
 * in the whole buffer, or in slot l & 1 at the block's flat offset's
 * place modulo 64 floats. */
float *msr_cuda_gpt_block_at(const msr_cuda_gpt_t *md, int grads, int l)
{
    float *base = grads ? md->grads : md->params;
    size_t off = msr_cuda_gpt_seg_offset(md, 1 + l);
    if (md->host_params == NULL)
        return base + off;
    return base + md->slot_at[l & 1] + off % 64;
}

/* Queues block l's parameters into its slot on the copy stream, once the
 * slot's last reader is done; nothing when they are there already, l is
 * not a block or the blocks are on the device. */
msr_status_t msr_cuda_gpt_params_in(msr_cuda_gpt_t *md, int l)
{
    if (md->host_params == NULL || l < 0 || l >= md->cfg.layers)
        return MSR_OK;
    int s = l & 1;
    if (md->slot_block[s] == l)
        return MSR_OK;
    CU(cudaStreamWaitEvent(md->xfer, md->p_free[s], 0));
    CU(cudaMemcpyAsync(msr_cuda_gpt_block_at(md, 0, l),
                       md->host_params + msr_cuda_gpt_seg_offset(md, 1 + l),
                       md->block_n * sizeof(float), cudaMemcpyHostToDevice, md->xfer));
    CU(cudaEventRecord(md->p_ready[s], md->xfer));
    md->slot_block[s] = l;
    return MSR_OK;
}

/* Around block l's work on the model's stream: it waits for the slot's
 * parameters (and in backward its gradients), and the slot is free after. */
msr_status_t msr_cuda_gpt_block_begin(msr_cuda_gpt_t *md, int l, int backward)
{
    if (md->host_params == NULL)
        return MSR_OK;
    CU(cudaStreamWaitEvent(md->stream, md->p_ready[l & 1], 0));
    if (backward)
        CU(cudaStreamWaitEvent(md->stream, md->g_ready[l & 1], 0));
    return MSR_OK;
}

msr_status_t msr_cuda_gpt_block_end(msr_cuda_gpt_t *md, int l)
{
    if (md->host_params == NULL)
        return MSR_OK;
    CU(cudaEventRecord(md->p_free[l & 1], md->stream));
    return MSR_OK;
}

/* Readies block l's gradient slot on the copy stream (behind the copy out
 * of the block it held): zeros in the first backward since zero_grad, else
 * the block's gradients so far, which its backward adds to. */
msr_status_t msr_cuda_gpt_grads_in(msr_cuda_gpt_t *md, int l)
{
    if (md->host_params == NULL || l < 0)
        return MSR_OK;
    size_t bytes = md->block_n * sizeof(float);
    float *slot = msr_cuda_gpt_block_at(md, 1, l);
    if (md->grads_zero)
        CU(cudaMemsetAsync(slot, 0, bytes, md->xfer));
    else
        CU(cudaMemcpyAsync(slot, md->host_grads + msr_cuda_gpt_seg_offset(md, 1 + l), bytes,
                           cudaMemcpyHostToDevice, md->xfer));
    CU(cudaEventRecord(md->g_ready[l & 1], md->xfer));
    return MSR_OK;
}

/* Block l's gradients out to host memory once its backward is done. */
msr_status_t msr_cuda_gpt_grads_out(msr_cuda_gpt_t *md, int l)
{
    if (md->host_params == NULL)
        return MSR_OK;
    CU(cudaEventRecord(md->g_done[l & 1], md->stream));
    CU(cudaStreamWaitEvent(md->xfer, md->g_done[l & 1], 0));
    CU(cudaMemcpyAsync(md->host_grads + msr_cuda_gpt_seg_offset(md, 1 + l),
                       msr_cuda_gpt_block_at(md, 1, l), md->block_n * sizeof(float),
                       cudaMemcpyDeviceToHost, md->xfer));
    return MSR_OK;
}

/* The resident segments (the embeddings and the final norm) between the
 * device and host memory on the model's stream: parameters in (grads 0),
 * gradients out (grads 1). */
msr_status_t msr_cuda_gpt_resident_copy(msr_cuda_gpt_t *md, int grads)
{
    int L = md->cfg.layers;
    size_t emb = msr_cuda_gpt_seg_offset(md, 1), fin = msr_cuda_gpt_seg_offset(md, L + 1);
    size_t fin_n = md->num_params - fin;
    float *dev = grads ? md->grads : md->params, *host = grads ? md->host_grads : md->host_params;
    cudaMemcpyKind kind = grads ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
    CU(cudaMemcpyAsync(grads ? host : dev, grads ? dev : host, emb * sizeof(float), kind,
                       md->stream));
    CU(cudaMemcpyAsync(grads ? host + fin : dev + md->final_at,
                       grads ? dev + md->final_at : host + fin, fin_n * sizeof(float), kind,
                       md->stream));
    return MSR_OK;
}
