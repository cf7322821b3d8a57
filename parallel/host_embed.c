/* The token embedding table in host memory for a model on a device (see
 * host_embed.h). */
#include "parallel/host_embed.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "model/err_call.h"
#include "model/layers.h"

void msr_host_embed_destroy(msr_host_embed_t *he)
{
    if (he == NULL)
        return;
    const msr_device_t *dev = he->cfg.dev;
    /* nothing may still read or write the buffers when they go */
    if (he->copy != NULL)
        (void)msr_device_stream_sync(dev, he->copy);
    for (int i = 0; i < 2; i++) {
        msr_device_event_destroy(dev, he->got[i]);
        msr_device_event_destroy(dev, he->out[i]);
        msr_device_free(dev, he->w[i]);
        msr_device_free(dev, he->dw[i]);
        msr_device_host_free(dev, he->gstage[i]);
    }
    msr_device_event_destroy(dev, he->moved);
    msr_device_stream_destroy(dev, he->copy);
    msr_device_free(dev, he->logits);
    msr_device_free(dev, he->probs);
    msr_device_free(dev, he->rmax);
    msr_device_free(dev, he->red);
    msr_device_free(dev, he->fin);
    msr_device_free(dev, he->loss);
    msr_device_free(dev, he->tgt);
    msr_device_host_free(dev, he->rows);
    msr_device_host_free(dev, he->hst);
    msr_device_host_free(dev, he->hfin);
    msr_device_host_free(dev, he->htgt);
    msr_free(he);
}

static msr_status_t alloc_all(msr_host_embed_t *he)
{
    const msr_device_t *dev = he->cfg.dev;
    size_t C = (size_t)he->cfg.C, N = (size_t)he->cfg.max_rows, n = (size_t)he->cfg.chunk;
    size_t f = sizeof(float);
    msr_status_t st = MSR_OK;
    for (int i = 0; i < 2 && st == MSR_OK; i++) {
        if ((st = msr_device_alloc(dev, n * C * f, (void **)&he->w[i])) == MSR_OK &&
            (st = msr_device_alloc(dev, n * C * f, (void **)&he->dw[i])) == MSR_OK &&
            (st = msr_device_host_alloc(dev, n * C * f, (void **)&he->gstage[i])) == MSR_OK &&
            (st = msr_device_event_create(dev, &he->got[i])) == MSR_OK)
            st = msr_device_event_create(dev, &he->out[i]);
    }
    if (st == MSR_OK && (st = msr_device_alloc(dev, N * n * f, (void **)&he->logits)) == MSR_OK &&
        (st = msr_device_alloc(dev, N * n * f, (void **)&he->probs)) == MSR_OK &&
        (st = msr_device_alloc(dev, N * f, (void **)&he->rmax)) == MSR_OK &&
        (st = msr_device_alloc(dev, 2 * N * f, (void **)&he->red)) == MSR_OK &&
        (st = msr_device_alloc(dev, 3 * N * f, (void **)&he->fin)) == MSR_OK &&
        (st = msr_device_alloc(dev, N * f, (void **)&he->loss)) == MSR_OK &&
        (st = msr_device_alloc(dev, N * sizeof(int), (void **)&he->tgt)) == MSR_OK &&
        (st = msr_device_host_alloc(dev, N * C * f, (void **)&he->rows)) == MSR_OK &&
        (st = msr_device_host_alloc(dev, 3 * N * f, (void **)&he->hst)) == MSR_OK &&
        (st = msr_device_host_alloc(dev, 3 * N * f, (void **)&he->hfin)) == MSR_OK &&
        (st = msr_device_host_alloc(dev, N * sizeof(int), (void **)&he->htgt)) == MSR_OK &&
        (st = msr_device_event_create(dev, &he->moved)) == MSR_OK)
        st = msr_device_stream_create(dev, &he->copy);
    return st;
}

msr_status_t msr_host_embed_create(const msr_host_embed_config_t *cfg, float *table, float *grads,
                                   msr_host_embed_t **he_p)
{
    if (cfg == NULL || cfg->dev == NULL || table == NULL || grads == NULL || he_p == NULL ||
        cfg->V < 1 || cfg->C < 1 || cfg->max_rows < 1 || cfg->chunk < 0)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "host_embed: a device, a table, its gradient, V, C and max_rows >= 1 "
                       "and chunk >= 0 are needed (V %d, C %d, max_rows %d, chunk %d)",
                       cfg ? cfg->V : 0, cfg ? cfg->C : 0, cfg ? cfg->max_rows : 0,
                       cfg ? cfg->chunk : 0);
    msr_host_embed_t *he = msr_calloc(1, sizeof *he);
    if (he == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "host_embed: out of memory");
    he->cfg = *cfg;
    if (he->cfg.k == NULL)
        he->cfg.k = msr_kernels_cpu();
    if (he->cfg.chunk == 0)
        he->cfg.chunk = MSR_HOST_EMBED_CHUNK;
    if (he->cfg.chunk > he->cfg.V)
        he->cfg.chunk = he->cfg.V;
    he->table = table;
    he->grads = grads;
    msr_status_t st = alloc_all(he);
    if (st != MSR_OK) {
        msr_err_call(st, "host_embed: buffers for %d rows of %d and chunks of %d", cfg->max_rows,
                     cfg->C, he->cfg.chunk);
        msr_host_embed_destroy(he);
        return st;
    }
    *he_p = he;
    return MSR_OK;
}

static msr_status_t check_tokens(const msr_host_embed_t *he, const int *tokens, int N,
                                 const char *what)
{
    if (tokens == NULL || N < 1 || N > he->cfg.max_rows)
        return msr_err(MSR_ERR_INVALID_ARG, "host_embed: %s of %d rows (1 to %d)", what, N,
                       he->cfg.max_rows);
    for (int i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= he->cfg.V)
            return msr_err(MSR_ERR_INVALID_ARG, "host_embed: %s: token %d at %d outside [0, %d)",
                           what, tokens[i], i, he->cfg.V);
    return MSR_OK;
}

/* Queues a copy on the object's stream and waits on the host for it: the
 * CPU's kernels, or the host, read what it wrote next. */
static msr_status_t copy_wait(msr_host_embed_t *he, void *dst, const void *src, size_t bytes,
                              msr_device_copy_t kind)
{
    const msr_device_t *dev = he->cfg.dev;
    msr_status_t st = msr_device_copy(dev, dst, src, bytes, kind, he->copy);
    if (st == MSR_OK && (st = msr_device_event_record(dev, he->moved, he->copy)) == MSR_OK)
        st = msr_device_event_sync(dev, he->moved);
    return st;
}

msr_status_t msr_host_embed_lookup(msr_host_embed_t *he, const int *tokens, int N, float *out_dev)
{
    msr_status_t st = check_tokens(he, tokens, N, "lookup");
    if (st != MSR_OK)
        return st;
    /* rows is free: every copy from it was waited for */
    msr_embedding_forward(he->rows, tokens, he->table, N, he->cfg.C);
    st = copy_wait(he, out_dev, he->rows, (size_t)N * he->cfg.C * sizeof(float), MSR_DEVICE_H2D);
    return st == MSR_OK ? MSR_OK : msr_err_call(st, "host_embed: the lookup's rows in");
}

msr_status_t msr_host_embed_lookup_backward(msr_host_embed_t *he, const int *tokens, int N,
                                            const float *dout_dev)
{
    msr_status_t st = check_tokens(he, tokens, N, "lookup backward");
    if (st != MSR_OK)
        return st;
    st = copy_wait(he, he->rows, dout_dev, (size_t)N * he->cfg.C * sizeof(float), MSR_DEVICE_D2H);
    if (st != MSR_OK)
        return msr_err_call(st, "host_embed: the lookup's gradient out");
    msr_embedding_backward(he->grads, he->rows, tokens, N, he->cfg.C);
    return MSR_OK;
}

/* Chunk c's first row and its row count. */
static int chunk_rows(const msr_host_embed_t *he, int c, int *v0_p)
{
    int v0 = c * he->cfg.chunk;
    *v0_p = v0;
    return he->cfg.V - v0 < he->cfg.chunk ? he->cfg.V - v0 : he->cfg.chunk;
}

/* Queues chunk c's rows of the table into slot c & 1, behind which got[c & 1].
 * The slot's last reader, chunk c - 2's kernels, ran on the host before. */
static msr_status_t fetch(msr_host_embed_t *he, int c)
{
    int v0, n = chunk_rows(he, c, &v0), b = c & 1;
    size_t C = (size_t)he->cfg.C;
    const msr_device_t *dev = he->cfg.dev;
    msr_status_t st = msr_device_copy(dev, he->w[b], he->table + (size_t)v0 * C,
                                      (size_t)n * C * sizeof(float), MSR_DEVICE_H2D, he->copy);
    if (st == MSR_OK)
        st = msr_device_event_record(dev, he->got[b], he->copy);
    he->chunks_in++;
    return st;
}

/* Chunk c's logits (N, n) = h · chunk^T into he->logits, once its rows landed. */
static msr_status_t chunk_logits(msr_host_embed_t *he, const float *h, int N, int c, int chunks)
{
    msr_status_t st = MSR_OK;
    if (c + 1 < chunks && (st = fetch(he, c + 1)) != MSR_OK)
        return st;
    if ((st = msr_device_event_sync(he->cfg.dev, he->got[c & 1])) != MSR_OK)
        return st;
    int v0, n = chunk_rows(he, c, &v0);
    he->cfg.k->matmul_forward(he->cfg.pr, he->logits, h, he->w[c & 1], NULL, N, he->cfg.C, n);
    return MSR_OK;
}

/* Folds a chunk's maxima m and sums s (exp(l - m) summed) and target
 * logits z (hst) into the rows' running ones (hfin: M, S, Z), on the
 * host: msr_vocab_fold's online softmax, the chunked head's. */
static void fold(msr_host_embed_t *he, int N, int first)
{
    float *M = he->hfin, *S = he->hfin + N, *Z = he->hfin + 2 * N;
    msr_vocab_fold(M, S, Z, he->hst, he->hst + N, (size_t)N, first);
}

msr_status_t msr_host_embed_head_forward(msr_host_embed_t *he, const float *h_dev,
                                         const int *targets, int N, float *losses)
{
    msr_status_t st = check_tokens(he, targets, N, "head");
    if (st != MSR_OK)
        return st;
    const msr_kernels_t *k = he->cfg.k;
    int chunks = (he->cfg.V + he->cfg.chunk - 1) / he->cfg.chunk;
    size_t f = sizeof(float);
    he->fwd_rows = 0;
    memcpy(he->htgt, targets, (size_t)N * sizeof(int));
    if ((st = copy_wait(he, he->tgt, he->htgt, (size_t)N * sizeof(int), MSR_DEVICE_H2D)) != MSR_OK)
        goto fail;
    if ((st = fetch(he, 0)) != MSR_OK)
        goto fail;
    for (int c = 0; c < chunks; c++) {
        if ((st = chunk_logits(he, h_dev, N, c, chunks)) != MSR_OK)
            goto fail;
        int v0, n = chunk_rows(he, c, &v0);
        k->vocab_max(he->rmax, he->logits, (size_t)N, n);
        k->vocab_exp_sums(he->probs, he->red, he->logits, he->rmax, he->tgt, v0, (size_t)N, n);
        if ((st = copy_wait(he, he->hst, he->rmax, (size_t)N * f, MSR_DEVICE_D2H)) != MSR_OK ||
            (st = copy_wait(he, he->hst + N, he->red, 2 * (size_t)N * f, MSR_DEVICE_D2H)) != MSR_OK)
            goto fail;
        fold(he, N, c == 0);
    }
    /* the whole head's loss: max + log(sum) - the target's logit, in float
     * as msr_crossentropy_forward's */
    for (int i = 0; i < N; i++)
        losses[i] = he->hfin[i] + logf(he->hfin[N + i]) - he->hfin[2 * N + i];
    /* the maxima, then the sums and target logits as vocab_loss reads them */
    if ((st = copy_wait(he, he->fin, he->hfin, 3 * (size_t)N * f, MSR_DEVICE_H2D)) != MSR_OK)
        goto fail;
    if ((st = msr_products_status(he->cfg.pr)) != MSR_OK)
        return msr_err_call(st, "host_embed: the head's products");
    he->fwd_rows = N;
    return MSR_OK;
fail:
    (void)msr_device_stream_sync(he->cfg.dev, he->copy);
    return msr_err_call(st, "host_embed: the head's forward");
}

/* Chunk c's gradient out of dw[c & 1] into gstage[c & 1], behind out[c & 1]. */
static msr_status_t send_grad(msr_host_embed_t *he, int c)
{
    int v0, n = chunk_rows(he, c, &v0), b = c & 1;
    const msr_device_t *dev = he->cfg.dev;
    msr_status_t st =
        msr_device_copy(dev, he->gstage[b], he->dw[b], (size_t)n * he->cfg.C * sizeof(float),
                        MSR_DEVICE_D2H, he->copy);
    if (st == MSR_OK)
        st = msr_device_event_record(dev, he->out[b], he->copy);
    he->chunks_out++;
    return st;
}

/* grads' rows of chunk c += its gradient, once out. */
static msr_status_t add_grad(msr_host_embed_t *he, int c)
{
    int v0, n = chunk_rows(he, c, &v0), b = c & 1;
    msr_status_t st = msr_device_event_sync(he->cfg.dev, he->out[b]);
    if (st != MSR_OK)
        return st;
    size_t len = (size_t)n * he->cfg.C;
    float *g = he->grads + (size_t)v0 * he->cfg.C;
    const float *s = he->gstage[b];
    for (size_t i = 0; i < len; i++)
        g[i] += s[i];
    return MSR_OK;
}

msr_status_t msr_host_embed_head_backward(msr_host_embed_t *he, const float *h_dev, float dloss,
                                          float *dh_dev)
{
    int N = he->fwd_rows;
    if (N == 0)
        return msr_err(MSR_ERR_STATE, "host_embed: the head's backward without its forward");
    he->fwd_rows = 0;
    const msr_kernels_t *k = he->cfg.k;
    int C = he->cfg.C, chunks = (he->cfg.V + he->cfg.chunk - 1) / he->cfg.chunk;
    const float *M = he->fin, *red = he->fin + N;
    msr_status_t st = fetch(he, 0);
    for (int c = 0; c < chunks && st == MSR_OK; c++) {
        if ((st = chunk_logits(he, h_dev, N, c, chunks)) != MSR_OK)
            break;
        int v0, n = chunk_rows(he, c, &v0), b = c & 1;
        /* probs = exp(logits - M) / S: the whole vocabulary's softmax */
        k->vocab_exp_sums(he->probs, he->red, he->logits, M, he->tgt, v0, (size_t)N, n);
        k->vocab_loss(he->probs, he->loss, M, red, (size_t)N, n);
        k->zero(he->logits, (size_t)N * n); /* now dlogits */
        k->vocab_crossentropy_backward(he->logits, he->probs, he->tgt, v0, dloss, (size_t)N, n);
        /* dw[b] held chunk c - 2's gradient, added (so out) in round c - 1 */
        k->zero(he->dw[b], (size_t)n * C);
        k->matmul_backward(he->cfg.pr, dh_dev, he->dw[b], NULL, he->logits, h_dev, he->w[b], N, C,
                           n);
        if ((st = send_grad(he, c)) == MSR_OK && c > 0)
            st = add_grad(he, c - 1);
    }
    if (st == MSR_OK)
        st = add_grad(he, chunks - 1);
    if (st != MSR_OK) {
        (void)msr_device_stream_sync(he->cfg.dev, he->copy);
        return msr_err_call(st, "host_embed: the head's backward");
    }
    if ((st = msr_products_status(he->cfg.pr)) != MSR_OK)
        return msr_err_call(st, "host_embed: the head's products");
    return MSR_OK;
}
