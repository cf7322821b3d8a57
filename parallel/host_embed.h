/* The token embedding table in host memory for a model on a device: the
 * host part of `--embedding-on-host` (issue 45 point 6; docs/model.md
 * "The embedding table in host memory").
 *
 * A table of V rows of C floats whose lookup and update stay on the host,
 * for a vocabulary whose table would not fit beside the rest of a rank's
 * device memory. The table and its gradient are the caller's host memory
 * (the table pinned: the device interface's host memory), and the host's
 * AdamW updates them (parallel/host_adamw.h, msr_host_adamw_step_host).
 * The device holds no row of it but a micro-batch's:
 *
 * - The lookup gathers the micro-batch's rows on the host into a pinned
 *   buffer and copies them to the device; its backward copies their
 *   gradient back and adds it into the table's gradient, row after row
 *   in token order (the bits of msr_embedding_backward).
 * - The tied head, logits = h · table^T and the softmax cross-entropy,
 *   never holds the table nor the (N, V) logits: it streams the table
 *   through the device a chunk of rows at a time (two slots; chunk c + 1
 *   copied in while chunk c computes), each chunk's logits (N, chunk)
 *   folded into each row's running maximum and sum of exponentials (the
 *   online softmax, combined on the host). The backward streams it again:
 *   each chunk's logits recomputed, its probabilities from the forward's
 *   maximum and sum, dh += dlogits · chunk, and the chunk's gradient
 *   dlogits^T · h copied out and added into the table's gradient rows.
 *
 * The kernels are the model's table (model/kernels.h: matmul_forward,
 * matmul_backward, vocab_max, vocab_exp_sums, vocab_loss,
 * vocab_crossentropy_backward, zero). With a single chunk (chunk >= V)
 * the losses, dh and the gradient are the whole head's (msr_matmul_forward,
 * msr_crossentropy_forward and _backward, msr_matmul_backward), bitwise;
 * with more, the sums of exponentials and dh are summed in another order.
 *
 * Ordering: every copy goes through the device interface on the object's
 * own stream, and kernels read what a copy wrote only after its event.
 * The CPU's kernels run on the host when called, so there the host waits
 * for the event; that is the only kind of kernels there is yet (a
 * device's kernels would wait on the device instead: not built). On the
 * CPU device the copies are memcpy; on a device whose queued work is
 * deferred every read waits for the copy behind it.
 *
 * Not thread-safe: one thread drives an object. */
#ifndef MSR_PARALLEL_HOST_EMBED_H
#define MSR_PARALLEL_HOST_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "model/kernels.h"
#include "msrun/device.h"

/* Vocabulary rows a chunk of the head streams when the caller says 0. */
#define MSR_HOST_EMBED_CHUNK 4096

typedef struct msr_host_embed_config {
    const msr_device_t *dev;
    const msr_kernels_t *k; /* NULL: the CPU's */
    msr_products_t *pr;     /* the products' context (NULL: fp32) */
    int V, C;               /* the table's rows and columns */
    int max_rows;           /* tokens a call takes at most (B * T) */
    int chunk;              /* the head's rows a chunk, clamped to V (0: the default) */
} msr_host_embed_config_t;

typedef struct msr_host_embed {
    msr_host_embed_config_t cfg;
    float *table, *grads; /* the caller's: V * C floats each */
    /* host: pinned staging */
    float *rows;      /* max_rows * C: the lookup's rows and their gradient */
    float *gstage[2]; /* chunk * C: a chunk's gradient out */
    float *hst;       /* 3 * max_rows: a chunk's maxima and sums (N, 2N) */
    float *hfin;      /* 3 * max_rows: the rows' maximum, sum, target logit */
    int *htgt;        /* max_rows: the targets in */
    /* device */
    float *w[2];           /* chunk * C: the chunks' slots */
    float *logits, *probs; /* max_rows * chunk */
    float *dw[2];          /* chunk * C: a chunk's gradient */
    float *rmax, *red;     /* max_rows, 2 * max_rows: a chunk's */
    float *fin;            /* 3 * max_rows: hfin's copy */
    float *loss;           /* max_rows: vocab_loss's scratch */
    int *tgt;              /* max_rows */
    msr_device_stream_t *copy;
    msr_device_event_t *got[2], *out[2], *moved;
    int fwd_rows; /* rows of the head forward the backward is to follow; 0: none */
    uint64_t chunks_in, chunks_out; /* over the object's life */
} msr_host_embed_t;

/* An object for cfg over table and grads (V * C floats each, the caller's,
 * outliving it; the table pinned for full-speed copies). Errors:
 * MSR_ERR_INVALID_ARG (NULL arguments, V, C or max_rows < 1, chunk < 0),
 * MSR_ERR_NO_MEMORY, the device's; the reason in the error text. */
msr_status_t msr_host_embed_create(const msr_host_embed_config_t *cfg, float *table, float *grads,
                                   msr_host_embed_t **he_p);
void msr_host_embed_destroy(msr_host_embed_t *he);

/* out_dev (N, C, on the device) = the table's rows of tokens (N, host);
 * the device's next kernels may read it when this returns. Errors:
 * MSR_ERR_INVALID_ARG (N outside [1, max_rows], a token outside [0, V)),
 * the device's. */
msr_status_t msr_host_embed_lookup(msr_host_embed_t *he, const int *tokens, int N, float *out_dev);

/* grads' rows of tokens += dout_dev (N, C on the device, finished by the
 * kernels before the call), in token order. Errors as lookup's. */
msr_status_t msr_host_embed_lookup_backward(msr_host_embed_t *he, const int *tokens, int N,
                                            const float *dout_dev);

/* losses (N, host) = logsumexp(h · table^T) - the target's logit, each
 * row of h_dev (N, C on the device) against targets (N, host). The
 * backward may follow with the same h_dev. Errors as lookup's. */
msr_status_t msr_host_embed_head_forward(msr_host_embed_t *he, const float *h_dev,
                                         const int *targets, int N, float *losses);

/* The last head forward's gradient times dloss a row: dh_dev (N, C on the
 * device) += its input gradient, grads += the table's. Errors:
 * MSR_ERR_STATE (no head forward since the last backward), the
 * device's. */
msr_status_t msr_host_embed_head_backward(msr_host_embed_t *he, const float *h_dev, float dloss,
                                          float *dh_dev);

#endif
