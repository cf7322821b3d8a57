/* The reference model (model/gpt.h) on a CUDA GPU: the same shape, the
 * same flat parameter layout (so a checkpoint or a CPU model's parameters
 * load as they are), the same forward and backward in fp32, with cuBLAS for
 * the matrix products (TF32 off) and plain CUDA kernels for the rest
 * (gpt_cuda.cu), and AdamW on the device.
 *
 * Parameters, gradients and AdamW's moments each live in one device buffer
 * of num_params floats laid out as the CPU model's flat buffers; activations
 * in one more. Every call queues its work on the model's stream and, where
 * it returns host values (the loss, a norm), waits for it.
 *
 * No CUDA type crosses this header, so C code (the trainer, train_gpt, the
 * tests) uses it without CUDA's headers. It exists only in builds with CUDA
 * (MSRUN_HAVE_CUDA). Errors: MSR_ERR_UNSUPPORTED (no usable device),
 * MSR_ERR_NO_MEMORY (device or pinned memory), MSR_ERR_BACKEND (a CUDA or
 * cuBLAS call failed: the error text names it and CUDA's message),
 * MSR_ERR_INVALID_ARG (sizes, tokens out of range), MSR_ERR_STATE; each
 * with its reason in the error text (base/err.h), never logged here. After
 * MSR_ERR_BACKEND the model is to be destroyed.
 *
 * Not thread-safe: one thread drives a model, and that thread's current
 * device must be the model's (msr_cuda_gpt_create makes it so). */
#ifndef MSR_MODEL_CUDA_GPT_CUDA_H
#define MSR_MODEL_CUDA_GPT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "model/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct msr_cuda_gpt msr_cuda_gpt_t;

/* The number of CUDA devices this process sees, into *count_p. Fails with
 * MSR_ERR_UNSUPPORTED only where this machine has no GPU (no device, none
 * visible, no driver installed), and with MSR_ERR_BACKEND on any other
 * CUDA error (a driver too old for the runtime, say): the GPU tests skip on
 * the first and fail on the second. The reason is in the error text
 * (base/err.h), not logged. */
msr_status_t msr_cuda_device_count(int *count_p);

/* Creates a model of shape cfg on `device` (made the calling thread's
 * current device) for up to max_batch sequences of cfg->max_seq tokens.
 * Parameters, gradients and moments start at zero. tensors (n entries) is
 * the CPU model's table (msr_gpt_t.tensors: its layout and which tensors
 * decay), copied. */
msr_status_t msr_cuda_gpt_create(const msr_gpt_config_t *cfg, int max_batch, int device,
                                 const msr_gpt_tensor_t *tensors, int n, msr_cuda_gpt_t **model_p);
void msr_cuda_gpt_destroy(msr_cuda_gpt_t *model);

/* As msr_cuda_gpt_create, with the blocks' parameters and gradients in
 * host memory (`--offload params=host`, ZeRO-Infinity's parameter offload
 * to the CPU): host_params and host_grads are the caller's, num_params
 * floats each in the flat layout, pinned (the device interface's host
 * memory or cudaHostAlloc), outliving the model. host_params is the
 * master the model reads; host_grads gets the gradients. The device keeps
 * the embeddings, the final norm and two slots of a block's parameters
 * and of its gradients (the slot of block l is l & 1), so it holds
 * 8 * (P - (L - 2) * block) bytes of them (plus 3 * 64 floats of places)
 * where the other holds 16 * P, and no moments: the optimizer is the
 * caller's (parallel/host_adamw.h).
 *
 * On a second stream, forward copies block l + 1's parameters in while
 * block l computes, and backward block l - 1's while block l computes
 * (the last two blocks of forward are still there); after block l's
 * backward its gradients are copied out to host_grads, and its slot is
 * readied for block l - 2: zeros in the first backward after zero_grad,
 * else block l - 2's gradients so far copied back in, which its backward
 * adds to, so micro-batches accumulate as on the device. The embeddings'
 * and the final norm's gradients are copied out at the end of every
 * backward, and their parameters in at the first forward after
 * msr_cuda_gpt_host_params_changed. Every kernel and product reads and
 * writes the same values at the same alignment (each slot places a block
 * at its flat offset modulo 64 floats), so losses, logits and gradients
 * are msr_cuda_gpt_create's, bitwise.
 *
 * Differences in the calls: params_device and grads_device answer NULL
 * and backward_ex refuses a ready callback (MSR_ERR_INVALID_ARG); the
 * moments' calls and msr_cuda_gpt_adamw answer MSR_ERR_INVALID_ARG;
 * set_params writes host_params, get_params reads it, get_grads and
 * grad_sumsq read host_grads (sumsq with the device's order of sums, so
 * the same bits), each after waiting for both streams; sync waits for
 * both. Errors: as msr_cuda_gpt_create's, MSR_ERR_INVALID_ARG for NULL
 * buffers. */
msr_status_t msr_cuda_gpt_create_offload(const msr_gpt_config_t *cfg, int max_batch, int device,
                                         const msr_gpt_tensor_t *tensors, int n, float *host_params,
                                         float *host_grads, msr_cuda_gpt_t **model_p);

/* 1 for a model of msr_cuda_gpt_create_offload, else 0. */
int msr_cuda_gpt_offloaded(const msr_cuda_gpt_t *model);

/* Says that host_params changed (an update on the host): the next forward
 * copies the embeddings and the final norm in and fetches every block
 * anew. The caller writes host_params only after msr_cuda_gpt_sync (no
 * copy in flight reads it). Nothing for a model without offload. */
void msr_cuda_gpt_host_params_changed(msr_cuda_gpt_t *model);

size_t msr_cuda_gpt_num_params(const msr_cuda_gpt_t *model);

/* The matrix products' precision, as the CPU model's (msr_gpt_set_precision,
 * docs/model.md "bf16 training"): MSR_PRECISION_FP32 (the default: cuBLAS
 * in fp32, TF32 off) or MSR_PRECISION_BF16 (both operands rounded to bf16,
 * nearest with ties to even, into scratch of the model's own; cuBLAS's
 * bf16 products with fp32 sums and fp32 outputs; the parameters, the
 * gradients, AdamW and every other kernel stay fp32). Attention, where
 * the head size is 16, 32 or 64 and the GPU is sm_80 or later, is one
 * fused kernel a tile at a time on the tensor cores (model/cuda/flash.cuh)
 * that rounds where the CPU's rounds and never stores the (T, T) scores;
 * elsewhere it is cuBLAS's products as above. bf16 allocates the scratch
 * (counted by device_bytes), fp32 frees it. Errors:
 * MSR_ERR_INVALID_ARG, MSR_ERR_NO_MEMORY. */
msr_status_t msr_cuda_gpt_set_precision(msr_cuda_gpt_t *model, msr_precision_t precision);
msr_precision_t msr_cuda_gpt_precision(const msr_cuda_gpt_t *model);
/* 1 when attention is the fused bf16 kernel (the precision is bf16, and
 * the shape and the GPU allow it), else 0. */
int msr_cuda_gpt_fused_attention(const msr_cuda_gpt_t *model);

/* Device memory the model holds, in bytes. */
size_t msr_cuda_gpt_device_bytes(const msr_cuda_gpt_t *model);

/* The model's stream (a cudaStream_t): device communicators are pointed at
 * it (msr_comm_set_stream) so their operations queue behind backward. */
void *msr_cuda_gpt_stream(msr_cuda_gpt_t *model);

/* The device parameter buffer (num_params floats), for an optimizer that
 * updates it from elsewhere (parallel/host_adamw.h). */
float *msr_cuda_gpt_params_device(msr_cuda_gpt_t *model);

/* Frees the device's moments, for an optimizer that keeps them on the
 * host: after it, the moments' calls and msr_cuda_gpt_adamw answer
 * MSR_ERR_INVALID_ARG and device_bytes counts 8 bytes a parameter less. */
void msr_cuda_gpt_free_moments(msr_cuda_gpt_t *model);

/* The device gradient buffer (num_params floats), for the data-parallel
 * allreduce; ordered on the model's stream. */
float *msr_cuda_gpt_grads_device(msr_cuda_gpt_t *model);

/* Copies between host arrays of num_params floats and the device buffers:
 * parameters in and out, gradients and moments out (for tests and
 * checkpoints). Each waits until the copy is done. */
msr_status_t msr_cuda_gpt_set_params(msr_cuda_gpt_t *model, const float *host);
msr_status_t msr_cuda_gpt_get_params(msr_cuda_gpt_t *model, float *host);
msr_status_t msr_cuda_gpt_get_grads(msr_cuda_gpt_t *model, float *host);
/* Moments m and v in, and out (each num_params floats). */
msr_status_t msr_cuda_gpt_set_moments(msr_cuda_gpt_t *model, const float *m, const float *v);
msr_status_t msr_cuda_gpt_get_moments(msr_cuda_gpt_t *model, float *m, float *v);

/* Sets every gradient to zero (queued). */
msr_status_t msr_cuda_gpt_zero_grad(msr_cuda_gpt_t *model);

/* As msr_gpt_forward without hooks: inputs and targets (B,T) are host
 * arrays (checked, then copied); with targets, *loss_p gets the mean token
 * loss (the per-token losses summed in double in index order on the host,
 * as the CPU model does), and backward may follow. */
msr_status_t msr_cuda_gpt_forward(msr_cuda_gpt_t *model, const int *inputs, const int *targets,
                                  int B, int T, double *loss_p);

/* The logits (B,T,V) of the last forward into host (B*T*V floats);
 * MSR_ERR_STATE before any forward. */
msr_status_t msr_cuda_gpt_get_logits(msr_cuda_gpt_t *model, float *host);

/* As msr_gpt_backward: adds dloss times the gradient of the last forward's
 * summed token losses to the gradients (queued). MSR_ERR_STATE without a
 * forward with targets before. */
msr_status_t msr_cuda_gpt_backward(msr_cuda_gpt_t *model, float dloss);

/* Called by msr_cuda_gpt_backward_ex once segment s's gradients are final
 * for this backward, as far as the host can tell: the work that finishes
 * them is queued on the model's stream (msr_cuda_gpt_order makes another
 * stream wait for it). Order: L + 1, L, ..., 1, 0, as the CPU model's
 * grads_ready hook (model/gpt.h). A failure stops the backward. */
typedef msr_status_t (*msr_cuda_ready_fn)(void *arg, int seg);

/* msr_cuda_gpt_backward, calling ready (if not NULL) as each segment's
 * gradients are queued complete. */
msr_status_t msr_cuda_gpt_backward_ex(msr_cuda_gpt_t *model, float dloss, msr_cuda_ready_fn ready,
                                      void *arg);

/* Segment s's flat elements [*offset_p, *offset_p + *count_p) (0
 * embeddings, 1 + l block l, L + 1 the final norm). */
void msr_cuda_gpt_segment(const msr_cuda_gpt_t *model, int s, size_t *offset_p, size_t *count_p);

/* Makes stream (a cudaStream_t of the model's device) wait, on the device,
 * for everything queued on the model's stream so far; the host does not
 * wait. */
msr_status_t msr_cuda_gpt_order(msr_cuda_gpt_t *model, void *stream);

/* The sum of squares of the gradients (each summed in double on the
 * device, blocks summed in a fixed order on the host), waiting for it. */
msr_status_t msr_cuda_gpt_grad_sumsq(msr_cuda_gpt_t *model, double *sumsq_p);

/* One AdamW step over the whole buffer with the constants of adamw.h
 * (step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t), decay_keep =
 * 1 - lr * wd for decaying tensors), gradients scaled by grad_scale first:
 * the update of msr_adamw_update_range, element by element (queued). */
typedef struct msr_cuda_adamw_step {
    float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
    float step_size, bc2_sqrt, decay_keep, grad_scale;
} msr_cuda_adamw_step_t;
msr_status_t msr_cuda_gpt_adamw(msr_cuda_gpt_t *model, const msr_cuda_adamw_step_t *s);

/* Waits for everything queued on the model's stream. */
msr_status_t msr_cuda_gpt_sync(msr_cuda_gpt_t *model);

#ifdef __cplusplus
}
#endif

#endif
