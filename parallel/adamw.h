/* AdamW with decoupled weight decay, over one slice of the flat parameter
 * buffer, and the global gradient norm for clipping.
 *
 * The optimizer owns the moments m and v of flat elements [lo, hi): the whole
 * buffer in plain data parallel, one rank's shard under ZeRO. Updates are
 * elementwise, so a shard updates exactly as the same elements of the whole
 * would; which elements decay comes from the model's tensor table (matrices
 * decay, biases and norm weights do not), so a shard may cut through a
 * tensor. The update follows torch.optim.AdamW:
 *
 *   p *= 1 - lr * wd                   (decaying tensors only)
 *   m  = b1 m + (1 - b1) g
 *   v  = b2 v + (1 - b2) g^2
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *
 * Hyperparameters are doubles and the per-step constants are rounded to
 * float once, as torch does with its Python-float arguments.
 *
 * Not thread-safe: one thread per optimizer. */
#ifndef MSR_PARALLEL_ADAMW_H
#define MSR_PARALLEL_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "parallel/gpt.h"

typedef struct msr_adamw_config {
    double beta1;        /* 0.9 */
    double beta2;        /* 0.95 */
    double eps;          /* 1e-8 */
    double weight_decay; /* 0.1, on decaying tensors */
} msr_adamw_config_t;

/* A run of owned elements that share a weight-decay flag. */
typedef struct msr_adamw_span {
    size_t begin, end; /* [begin, end) relative to lo */
    int decay;
} msr_adamw_span_t;

typedef struct msr_adamw {
    msr_adamw_config_t cfg;
    size_t lo, hi; /* the owned flat elements */
    float *m;      /* (hi - lo) first moments */
    float *v;      /* (hi - lo) second moments */
    uint64_t t;    /* steps taken */
    int num_spans;
    msr_adamw_span_t *spans; /* cover [0, hi - lo) in order */
} msr_adamw_t;

/* Creates an optimizer for flat elements [lo, hi) of a buffer laid out as
 * tensors[0..n) (the model's table), moments zero, t = 0. Errors:
 * MSR_ERR_INVALID_ARG (an empty or out-of-range slice, bad hyperparameters;
 * logged), MSR_ERR_NO_MEMORY. */
msr_status_t msr_adamw_create(const msr_adamw_config_t *cfg, const msr_gpt_tensor_t *tensors, int n,
                              size_t lo, size_t hi, msr_adamw_t **opt_p);
void msr_adamw_destroy(msr_adamw_t *opt);

/* One step (t += 1) over the owned elements. params and grads point at
 * element lo of their buffers (a shard's own copy, or the whole buffer +
 * lo). Every gradient is multiplied by grad_scale first (the clipping factor
 * of msr_clip_scale, 1 for none); lr is this step's learning rate. */
void msr_adamw_update(msr_adamw_t *opt, float *params, const float *grads, float lr,
                      float grad_scale);

/* The sum of squares of x (n), in double and in index order. The global
 * gradient norm is sqrt of the sum of every shard's msr_sumsq. */
double msr_sumsq(const float *x, size_t n);

/* The factor that brings a gradient of global norm `norm` within max_norm,
 * as torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6));
 * 1 when max_norm <= 0 (no clipping). */
float msr_clip_scale(double norm, float max_norm);

#endif
