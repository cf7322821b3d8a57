/* The CUDA model's private state and helpers (see gpt_cuda.h), shared by
 * its files: gpt_cuda.cu (error handling, creation, copies, the optimizer's
 * parts) and gpt_cuda_pass.cu (the layers' host helpers, forward and
 * backward). */
#ifndef MSR_MODEL_CUDA_GPT_CUDA_IMPL_CUH
#define MSR_MODEL_CUDA_GPT_CUDA_IMPL_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stddef.h>

extern "C" {
#include "model/cuda/gpt_cuda.h"
}

#define WARP         32
#define THREADS      256 /* per block */
#define MAX_BLOCKS   65535
#define SUMSQ_BLOCKS 1024

/* One span of the flat buffer that shares AdamW's decay flag. */
typedef struct span {
    size_t lo, n;
    int decay;
} span_t;

struct msr_cuda_gpt {
    msr_gpt_config_t cfg;
    int max_batch;
    int device;
    size_t num_params;
    int num_spans;
    span_t *spans; /* host: the tensors, neighbours with one decay flag merged */

    cudaStream_t stream;
    cublasHandle_t blas;
    cudaEvent_t event; /* msr_cuda_gpt_order's; made on first use */

    /* device buffers, each (num_params) in the CPU model's flat layout */
    float *params, *grads, *m, *v;

    /* device activations and work space: one allocation, pointer tables
     * (host arrays of device pointers) in the CPU model's types */
    float *mem;
    size_t mem_count;
    msr_gpt_acts_t acts; /* acts.blocks: [L] */
    msr_gpt_work_t work; /* work.datt: (NH, T, T), one batch row's heads */
    float *ln_tmp;       /* (N, C) xhat * dout, for the layernorm weight gradient */
    float *ones;         /* (N) all 1, for the gemv column sums */

    int *d_inputs, *d_targets; /* (B, T) on the device */
    int *h_targets;            /* (B, T) host copy, for nothing but checks */
    float *h_losses;           /* (B, T) host copy of the losses */
    double *d_partials;        /* (SUMSQ_BLOCKS) */
    double *h_partials;        /* (SUMSQ_BLOCKS) */

    /* --precision bf16 (msr_cuda_gpt_set_precision): every product's
     * operands rounded into bf16 scratch, sums and outputs in fp32 */
    msr_precision_t precision;
    __nv_bfloat16 *bf_slot[2]; /* A's and B's operand, bf_cap elements each */
    size_t bf_cap;
    __nv_bfloat16 *bf_hold; /* an operand rounded once for several products */
    size_t bf_hold_cap;
    const float *hold_src; /* what bf_hold holds, hold_n elements; NULL: none */
    size_t hold_n;
    /* bf16 attention on the tensor cores (flash.cuh), where the shape and
     * the GPU allow it; NULL: the materialised products */
    float *fa_stats; /* [L] (max_batch * NH, max_seq, 2): each row's max and 1/sum */
    float *fa_dot;   /* (max_batch * NH, max_seq): backward's rowsum(att * datt) */
    size_t fa_count; /* floats of both */

    /* the token-embedding gradient's scatter, grouped by token (built on
     * the host in forward): (3N + 1) ints, pos (N) the batch's positions
     * sorted by token, stably; start (N + 1) where each distinct token's
     * positions begin in pos, and one past the last; id (N) the tokens */
    int *d_tok;
    int *h_tok;       /* host: the same, then the counting sort's (V + 1) counts */
    int tok_distinct; /* distinct tokens of the last forward */

    int B, T;         /* of the last forward with targets; 0 before */
    int fwd_B, fwd_T; /* of the last forward */

    /* The blocks' parameters and gradients in host memory
     * (msr_cuda_gpt_create_offload); NULL: all on the device. params and
     * grads then hold dev_count floats: the embeddings at 0, the final
     * norm at final_at, and two block slots at slot_at[0] and slot_at[1]
     * (block l in slot l & 1, at its flat offset's place modulo 64 floats,
     * so every pointer keeps the alignment it has in the whole buffer) */
    float *host_params, *host_grads;
    size_t dev_count; /* floats of params (and of grads) on the device */
    size_t final_at;  /* the final norm's first element there */
    size_t slot_at[2];
    size_t block_n;     /* floats of one block */
    int slot_block[2];  /* the block whose parameters each slot holds (or is
                           being copied), -1: none */
    int resident_stale; /* the embeddings and final norm to copy in at the next forward */
    int grads_zero;     /* no backward since zero_grad: the slots start at zero */
    cudaStream_t xfer;  /* the copies in and out */
    cudaEvent_t p_ready[2], p_free[2]; /* a slot's parameters in; its last reader done */
    cudaEvent_t g_ready[2], g_done[2]; /* a slot's gradients in; its backward done */
};

/* The first flat element of segment s (0 embeddings, 1 + l block l, L + 1
 * final norm), as gpt.h lays them out. */
static inline size_t msr_cuda_gpt_seg_offset(const msr_cuda_gpt_t *md, int s)
{
    size_t C = (size_t)md->cfg.channels;
    size_t block = 12 * C * C + 13 * C;
    if (s == 0)
        return 0;
    return ((size_t)md->cfg.vocab + (size_t)md->cfg.max_seq) * C + (size_t)(s - 1) * block;
}

/* A failed CUDA or cuBLAS call's status, with what failed and where in
 * the error text (gpt_cuda.cu). */
msr_status_t msr_cuda_gpt_cuda_fail(cudaError_t e, const char *what, int line);
msr_status_t msr_cuda_gpt_blas_fail(cublasStatus_t s, const char *what, int line);

/* Return from the calling function on a failed CUDA or cuBLAS call. */
#define CU(call)                                                \
    do {                                                        \
        cudaError_t e_ = (call);                                \
        if (e_ != cudaSuccess)                                  \
            return msr_cuda_gpt_cuda_fail(e_, #call, __LINE__); \
    } while (0)
#define BLAS(call)                                              \
    do {                                                        \
        cublasStatus_t s_ = (call);                             \
        if (s_ != CUBLAS_STATUS_SUCCESS)                        \
            return msr_cuda_gpt_blas_fail(s_, #call, __LINE__); \
    } while (0)
/* After a kernel launch: a bad configuration shows here. */
#define LAUNCHED(what) CU(cudaGetLastError())
#define TRY(call)                  \
    do {                           \
        msr_status_t st_ = (call); \
        if (st_ != MSR_OK)         \
            return st_;            \
    } while (0)

/* Blocks of THREADS for n work items (grid-stride loops cover the rest). */
static inline unsigned msr_cuda_gpt_grid_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    if (b < 1)
        b = 1;
    return (unsigned)(b < MAX_BLOCKS ? b : MAX_BLOCKS);
}

/* Blocks of THREADS for one warp per row. */
static inline unsigned msr_cuda_gpt_grid_rows(size_t rows)
{
    return msr_cuda_gpt_grid_for(rows * WARP);
}

/* A grid-stride loop over [0, n). */
#define GRID_STRIDE(i, n)                                                   \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

/* Whether bf16 attention can take the tensor-core path (flash.cuh) for
 * this model's shape on its GPU (gpt_cuda_pass.cu). */
int msr_cuda_gpt_flash_ok(const msr_cuda_gpt_t *md);

/* The blocks in host memory (gpt_cuda_offload.cu); each does nothing for
 * a model whose blocks are on the device, except block_at. Block l's
 * parameters (grads 0) or gradients (grads 1) on the device. */
float *msr_cuda_gpt_block_at(const msr_cuda_gpt_t *md, int grads, int l);
/* Block l's parameters into its slot on the copy stream (nothing when
 * there already or l is not a block). */
msr_status_t msr_cuda_gpt_params_in(msr_cuda_gpt_t *md, int l);
/* Around block l's work on the model's stream: wait for its slot's
 * parameters (and in backward its gradients); the slot free after. */
msr_status_t msr_cuda_gpt_block_begin(msr_cuda_gpt_t *md, int l, int backward);
msr_status_t msr_cuda_gpt_block_end(msr_cuda_gpt_t *md, int l);
/* Block l's gradient slot readied (zeros, or its sums so far copied in);
 * its gradients out to host memory after its backward. */
msr_status_t msr_cuda_gpt_grads_in(msr_cuda_gpt_t *md, int l);
msr_status_t msr_cuda_gpt_grads_out(msr_cuda_gpt_t *md, int l);
/* The embeddings' and final norm's parameters in (grads 0) or gradients
 * out (grads 1) on the model's stream. */
msr_status_t msr_cuda_gpt_resident_copy(msr_cuda_gpt_t *md, int grads);

/* Zeroes n floats at p on the model's stream (gpt_cuda_pass.cu). */
msr_status_t msr_cuda_gpt_zero(msr_cuda_gpt_t *md, float *p, size_t n);
/* Copies and waits for the copy (gpt_cuda.cu). */
msr_status_t msr_cuda_gpt_copy_sync(msr_cuda_gpt_t *md, void *dst, const void *src, size_t bytes,
                                    cudaMemcpyKind kind);

#endif
