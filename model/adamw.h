/* AdamW with decoupled weight decay, over one slice of the flat parameter
 * buffer, and the global gradient norm for clipping.
 *
 * The optimizer owns the moments m and v of a list of flat ranges, laid end
 * to end in its "shard space": the whole buffer [0, P) in plain data
 * parallel, a rank's pieces of every bucket under ZeRO (parallel/dp.h).
 * Updates are elementwise, so a shard updates exactly as the same elements
 * of the whole would; which elements decay comes from the model's tensor
 * table (matrices decay, biases and norm weights do not), so a shard may cut
 * through a tensor. The update follows torch.optim.AdamW:
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
#ifndef MSR_MODEL_ADAMW_H
#define MSR_MODEL_ADAMW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "model/gpt.h"

typedef struct msr_adamw_config {
    double beta1;        /* 0.9 */
    double beta2;        /* 0.95 */
    double eps;          /* 1e-8 */
    double weight_decay; /* 0.1, on decaying tensors */
} msr_adamw_config_t;

/* A run of owned elements that share a weight-decay flag. */
typedef struct msr_adamw_span {
    size_t begin, end; /* [begin, end) in the shard space */
    int decay;
} msr_adamw_span_t;

/* Flat elements [lo, hi). */
typedef struct msr_adamw_range {
    size_t lo, hi;
} msr_adamw_range_t;

typedef struct msr_adamw {
    msr_adamw_config_t cfg;
    size_t lo, hi; /* the first range's lo and the last range's hi */
    size_t count;  /* owned elements: the size of the shard space */
    float *m;      /* (count) first moments; NULL while offloaded (parallel/offload.h) */
    float *v;      /* (count) second moments; likewise */
    uint64_t t;    /* steps taken */
    int num_spans;
    msr_adamw_span_t *spans; /* cover [0, count) in order */
    /* this step's constants (msr_adamw_begin) */
    float step_size, bc2_sqrt, decay_keep, grad_scale;
} msr_adamw_t;

/* Creates an optimizer for flat elements [lo, hi) of a buffer laid out as
 * tensors[0..n) (the model's table), moments zero, t = 0. Errors:
 * MSR_ERR_INVALID_ARG (an empty or out-of-range slice, bad hyperparameters;
 * the reason in the error text, base/err.h), MSR_ERR_NO_MEMORY. */
msr_status_t msr_adamw_create(const msr_adamw_config_t *cfg, const msr_gpt_tensor_t *tensors, int n,
                              size_t lo, size_t hi, msr_adamw_t **opt_p);

/* The same for a list of nranges increasing, disjoint, non-empty flat
 * ranges, which follow each other in the shard space (range k's elements
 * come after range k-1's). nranges may be 0 (a rank that owns nothing):
 * then every update is empty. Errors as msr_adamw_create. */
msr_status_t msr_adamw_create_ranges(const msr_adamw_config_t *cfg, const msr_gpt_tensor_t *tensors,
                                     int n, const msr_adamw_range_t *ranges, int nranges,
                                     msr_adamw_t **opt_p);
void msr_adamw_destroy(msr_adamw_t *opt);

/* One step (t += 1) over every owned element. params and grads are in the
 * shard space (element i is shard element i: for one range [lo, hi), the
 * whole buffer + lo). Every gradient is multiplied by grad_scale first (the
 * clipping factor of msr_clip_scale, 1 for none); lr is this step's
 * learning rate. Same as msr_adamw_begin + msr_adamw_update_range over
 * [0, count). */
void msr_adamw_update(msr_adamw_t *opt, float *params, const float *grads, float lr,
                      float grad_scale);

/* A step in pieces, for parameters and gradients that do not sit in one
 * array (ZeRO-1 and 2 update in the full parameter buffer): begin counts the
 * step (t += 1) and fixes its constants; then update_range updates shard
 * elements [off, off + n), params[i] and grads[i] being element off + i.
 * Every element must be updated exactly once per step. */
void msr_adamw_begin(msr_adamw_t *opt, float lr, float grad_scale);
void msr_adamw_update_range(msr_adamw_t *opt, size_t off, size_t n, float *params,
                            const float *grads);

/* update_range with the moments of shard elements [off, off + n) at m[0..n)
 * and v[0..n) instead of in opt->m and opt->v: for moments that live
 * elsewhere and are brought in a chunk at a time (parallel/offload.h). The
 * same arithmetic, so the same bits. */
void msr_adamw_update_moments(msr_adamw_t *opt, size_t off, size_t n, float *params,
                              const float *grads, float *m, float *v);

/* One span's constants: the hyperparameters and this step's values as
 * floats, keep the decay factor (1 for a tensor that does not decay). */
typedef struct msr_adamw_coef {
    float b1, b2, one_b1, one_b2, eps;
    float step_size, bc2_sqrt, grad_scale, keep;
} msr_adamw_coef_t;

/* The elementwise update over n elements: p, m and v updated in place from
 * g. vector: AVX2 where msr_cpu_features_get() reports it, otherwise (and
 * when false) the scalar loop; both give the same bits, so a run's results
 * do not depend on the CPU. For msr_adamw_update_moments and for tests that
 * compare the paths. */
void msr_adamw_kernel(const msr_adamw_coef_t *k, bool vector, size_t n, float *p, const float *g,
                      float *m, float *v);

/* The sum of squares of x (n), in double: element i added into the i mod
 * 8-th of eight partial sums in index order, the eight then folded
 * pairwise ((0+1) + (2+3)) + ((4+5) + (6+7)), the same bits on every CPU.
 * The global gradient norm is sqrt of the sum of every shard's msr_sumsq. */
double msr_sumsq(const float *x, size_t n);

/* msr_sumsq of an array read in pieces (a gradient shard streamed from its
 * file): lanes zeroed first, each piece x (n) added with its offset `at`
 * in the whole array, in increasing order; msr_sumsq_fold then gives the
 * bits msr_sumsq gives over the whole array. */
#define MSR_SUMSQ_LANES 8
void msr_sumsq_add(double lanes[MSR_SUMSQ_LANES], const float *x, size_t n, size_t at);
double msr_sumsq_fold(const double lanes[MSR_SUMSQ_LANES]);

/* The factor that brings a gradient of global norm `norm` within max_norm,
 * as torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6));
 * 1 when max_norm <= 0 (no clipping). */
float msr_clip_scale(double norm, float max_norm);

#endif
