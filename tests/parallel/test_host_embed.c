/* The embedding table in host memory (parallel/host_embed.h), on the CPU
 * device and on the CUDA device's code over the fake table that runs
 * queued work only when it is waited for (tests/comm/device_fake.c):
 * - the chunked head against the whole one (msr_matmul_forward,
 *   msr_crossentropy_forward and _backward, msr_matmul_backward): with one
 *   chunk the losses, dh and the table's gradient are its bits; with
 *   chunks of 1 row, 2, 5, V - 1 (V = 37, so the last chunk is short,
 *   and a chunk of one row) within float rounding; the two devices give
 *   the same bits for every chunk, so no read comes before its copy;
 * - dh and the gradient are added to, never set; the chunks moved are
 *   counted (each forward and backward streams the table once, each
 *   backward sends every chunk's gradient once);
 * - the lookup and its backward are the table's rows and
 *   msr_embedding_backward's sums, repeated tokens included;
 * - rows at 1 and max_rows pass, 0 and max_rows + 1 and tokens -1 and V
 *   are refused, a backward needs its forward, and every allocation of a
 *   create failed in turn is MSR_ERR_NO_MEMORY. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "comm/device_impl.h"
#include "model/layers.h"
#include "parallel/host_embed.h"
#include "tests/comm/device_fake.h"
#include "tests/runner.h"

enum { V = 37, C = 16, NMAX = 12 };

static float value(size_t i, int which, float scale)
{
    unsigned x = (unsigned)(i * 2654435761u) ^ (unsigned)(which * 40503 + 977);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return scale * ((float)(x % 2001) - 1000.0f) / 1000.0f;
}

static void fill(float *x, size_t n, int which, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = value(i, which, scale);
}

static const msr_device_t *fake_device(msr_device_t **own)
{
    MSR_CHECK_OK(msr_device_gpu_create(msr_test_device_fake_api(), 0, own));
    return *own;
}

typedef struct result {
    float losses[NMAX], dh[NMAX * C], grads[V * C];
} result_t;

static void inputs(int N, float *w, float *h, int *tg, float *dh0, float *g0)
{
    fill(w, (size_t)V * C, 1, 1.5f);
    fill(h, (size_t)N * C, 2, 1.0f);
    fill(dh0, (size_t)N * C, 3, 0.25f);
    fill(g0, (size_t)V * C, 4, 0.25f);
    for (int i = 0; i < N; i++)
        tg[i] = (i * 11 + 3) % V;
    tg[0] = 0;         /* the first row of the first chunk */
    tg[N - 1] = V - 1; /* the last row of the last one */
}

/* The whole head on the host: the model's own kernels. */
static void reference(int N, float dloss, result_t *r)
{
    static _Alignas(64) float w[V * C], h[NMAX * C], logits[NMAX * V], probs[NMAX * V],
        dl[NMAX * V];
    int tg[NMAX];
    inputs(N, w, h, tg, r->dh, r->grads);
    msr_matmul_forward(NULL, logits, h, w, NULL, N, C, V);
    msr_crossentropy_forward(r->losses, probs, logits, tg, N, V);
    memset(dl, 0, sizeof dl);
    msr_crossentropy_backward(dl, probs, tg, dloss, N, V);
    msr_matmul_backward(NULL, r->dh, r->grads, NULL, dl, h, w, N, C, V);
}

/* The same through a host_embed of chunk rows on dev. */
static void chunked(const msr_device_t *dev, int N, int chunk, float dloss, result_t *r)
{
    float *w = NULL, *hd = NULL, *dhd = NULL;
    static float h[NMAX * C];
    int tg[NMAX];
    memset(r, 0, sizeof *r);
    MSR_CHECK_OK(msr_device_host_alloc(dev, sizeof(float) * V * C, (void **)&w));
    inputs(N, w, h, tg, r->dh, r->grads);
    MSR_CHECK_OK(msr_device_alloc(dev, sizeof h, (void **)&hd));
    MSR_CHECK_OK(msr_device_alloc(dev, sizeof h, (void **)&dhd));
    MSR_CHECK_OK(msr_device_copy(dev, hd, h, sizeof(float) * N * C, MSR_DEVICE_H2D, NULL));
    MSR_CHECK_OK(msr_device_copy(dev, dhd, r->dh, sizeof(float) * N * C, MSR_DEVICE_H2D, NULL));
    MSR_CHECK_OK(msr_device_stream_sync(dev, NULL));
    msr_host_embed_config_t cfg = {.dev = dev, .V = V, .C = C, .max_rows = NMAX, .chunk = chunk};
    msr_host_embed_t *he = NULL;
    MSR_CHECK_OK(msr_host_embed_create(&cfg, w, r->grads, &he));
    int chunks = (V + he->cfg.chunk - 1) / he->cfg.chunk;
    MSR_CHECK_OK(msr_host_embed_head_forward(he, hd, tg, N, r->losses));
    MSR_CHECK(he->chunks_in == (uint64_t)chunks && he->chunks_out == 0);
    MSR_CHECK_OK(msr_host_embed_head_backward(he, hd, dloss, dhd));
    MSR_CHECK(he->chunks_in == 2 * (uint64_t)chunks && he->chunks_out == (uint64_t)chunks);
    MSR_CHECK_OK(msr_device_copy(dev, r->dh, dhd, sizeof(float) * N * C, MSR_DEVICE_D2H, NULL));
    MSR_CHECK_OK(msr_device_stream_sync(dev, NULL));
    /* the table itself is only read */
    float w0[V * C];
    fill(w0, (size_t)V * C, 1, 1.5f);
    MSR_CHECK(memcmp(w0, w, sizeof w0) == 0);
    msr_host_embed_destroy(he);
    msr_device_free(dev, dhd);
    msr_device_free(dev, hd);
    msr_device_host_free(dev, w);
}

static double max_rel(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        worst = d > worst ? d : worst;
    }
    return worst;
}

static void test_head(void)
{
    msr_device_t *own = NULL;
    const msr_device_t *devs[2] = {msr_device_cpu(), fake_device(&own)};
    static const int chunks[] = {V, V + 1, 0, 1, 2, 5, V - 1};
    static const int rows[] = {1, 7, NMAX};
    const float dloss = 1.0f / 7;
    double worst = 0;
    for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
        int N = rows[ri];
        result_t ref, got[2];
        reference(N, dloss, &ref);
        for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ci++) {
            int ch = chunks[ci];
            for (int d = 0; d < 2; d++)
                chunked(devs[d], N, ch, dloss, &got[d]);
            MSR_CHECK_MSG(memcmp(&got[0], &got[1], sizeof got[0]) == 0,
                          "rows %d chunk %d: the devices differ", N, ch);
            if (ch == 0 || ch >= V) { /* one chunk: the whole head's bits */
                MSR_CHECK_MSG(memcmp(got[0].losses, ref.losses, sizeof(float) * N) == 0,
                              "rows %d chunk %d: losses", N, ch);
                MSR_CHECK_MSG(memcmp(got[0].dh, ref.dh, sizeof(float) * N * C) == 0,
                              "rows %d chunk %d: dh", N, ch);
                MSR_CHECK_MSG(memcmp(got[0].grads, ref.grads, sizeof ref.grads) == 0,
                              "rows %d chunk %d: the table's gradient", N, ch);
                continue;
            }
            double el = max_rel(got[0].losses, ref.losses, (size_t)N);
            double eh = max_rel(got[0].dh, ref.dh, (size_t)N * C);
            double eg = max_rel(got[0].grads, ref.grads, (size_t)V * C);
            worst = el > worst ? el : worst;
            worst = eh > worst ? eh : worst;
            worst = eg > worst ? eg : worst;
            MSR_CHECK_MSG(el < 2e-6 && eh < 2e-6 && eg < 2e-6,
                          "rows %d chunk %d: losses %.3g, dh %.3g, gradient %.3g off", N, ch, el,
                          eh, eg);
        }
    }
    printf("head: several chunks against one: %.3g at most (relative)\n", worst);
    msr_device_destroy(own);
}

/* The lookup's rows and its backward's sums, a token repeated. */
static void test_lookup(void)
{
    msr_device_t *own = NULL;
    const msr_device_t *devs[2] = {msr_device_cpu(), fake_device(&own)};
    const int tok[NMAX] = {5, 0, 36, 5, 5, 17, 0, 9, 36, 1, 2, 5};
    for (int d = 0; d < 2; d++) {
        const msr_device_t *dev = devs[d];
        float *w = NULL, *x = NULL, *dx = NULL;
        static float g[V * C], want[V * C], out[NMAX * C], dout[NMAX * C];
        MSR_CHECK_OK(msr_device_host_alloc(dev, sizeof g, (void **)&w));
        fill(w, (size_t)V * C, 1, 1.5f);
        fill(g, (size_t)V * C, 4, 0.25f);
        memcpy(want, g, sizeof g);
        msr_host_embed_config_t cfg = {.dev = dev, .V = V, .C = C, .max_rows = NMAX, .chunk = 4};
        msr_host_embed_t *he = NULL;
        MSR_CHECK_OK(msr_host_embed_create(&cfg, w, g, &he));
        MSR_CHECK_OK(msr_device_alloc(dev, sizeof out, (void **)&x));
        MSR_CHECK_OK(msr_device_alloc(dev, sizeof out, (void **)&dx));
        for (int N = 1; N <= NMAX; N += NMAX - 1) {
            MSR_CHECK_OK(msr_host_embed_lookup(he, tok, N, x));
            MSR_CHECK_OK(msr_device_copy(dev, out, x, sizeof(float) * N * C, MSR_DEVICE_D2H, NULL));
            MSR_CHECK_OK(msr_device_stream_sync(dev, NULL));
            for (int i = 0; i < N; i++)
                MSR_CHECK(memcmp(out + i * C, w + tok[i] * C, sizeof(float) * C) == 0);
            fill(dout, (size_t)N * C, 5 + N, 0.5f);
            MSR_CHECK_OK(
                msr_device_copy(dev, dx, dout, sizeof(float) * N * C, MSR_DEVICE_H2D, NULL));
            MSR_CHECK_OK(msr_device_stream_sync(dev, NULL));
            MSR_CHECK_OK(msr_host_embed_lookup_backward(he, tok, N, dx));
            msr_embedding_backward(want, dout, tok, N, C);
            MSR_CHECK(memcmp(g, want, sizeof g) == 0);
        }
        msr_device_free(dev, dx);
        msr_device_free(dev, x);
        msr_host_embed_destroy(he);
        msr_device_host_free(dev, w);
    }
    msr_device_destroy(own);
}

static void test_bad_args(void)
{
    static float w[V * C], g[V * C];
    float x[(NMAX + 1) * C] = {0}, losses[NMAX + 1];
    int tok[NMAX + 1] = {0};
    const msr_device_t *cpu = msr_device_cpu();
    msr_host_embed_config_t cfg = {.dev = cpu, .V = V, .C = C, .max_rows = NMAX, .chunk = 5};
    msr_host_embed_t *he = NULL;
    msr_host_embed_config_t bad = cfg;
    bad.V = 0;
    MSR_CHECK_STATUS(msr_host_embed_create(&bad, w, g, &he), MSR_ERR_INVALID_ARG);
    bad = cfg;
    bad.chunk = -1;
    MSR_CHECK_STATUS(msr_host_embed_create(&bad, w, g, &he), MSR_ERR_INVALID_ARG);
    bad = cfg;
    bad.max_rows = 0;
    MSR_CHECK_STATUS(msr_host_embed_create(&bad, w, g, &he), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_host_embed_create(&cfg, NULL, g, &he), MSR_ERR_INVALID_ARG);
    MSR_CHECK(he == NULL);
    MSR_CHECK_OK(msr_host_embed_create(&cfg, w, g, &he));
    MSR_CHECK_STATUS(msr_host_embed_head_backward(he, x, 1.0f, x), MSR_ERR_STATE);
    MSR_CHECK(strstr(msr_last_error(), "without its forward") != NULL);
    MSR_CHECK_STATUS(msr_host_embed_lookup(he, tok, 0, x), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_host_embed_lookup(he, tok, NMAX + 1, x), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_last_error(), "1 to 12") != NULL);
    MSR_CHECK_OK(msr_host_embed_lookup(he, tok, NMAX, x));
    tok[3] = V;
    MSR_CHECK_STATUS(msr_host_embed_lookup_backward(he, tok, NMAX, x), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_last_error(), "token 37 at 3") != NULL);
    tok[3] = -1;
    MSR_CHECK_STATUS(msr_host_embed_head_forward(he, x, tok, NMAX, losses), MSR_ERR_INVALID_ARG);
    tok[3] = V - 1;
    MSR_CHECK_OK(msr_host_embed_head_forward(he, x, tok, NMAX, losses));
    MSR_CHECK_OK(msr_host_embed_head_backward(he, x, 1.0f, x));
    /* one backward a forward */
    MSR_CHECK_STATUS(msr_host_embed_head_backward(he, x, 1.0f, x), MSR_ERR_STATE);
    /* a refused forward changes nothing: the last one's backward runs */
    MSR_CHECK_OK(msr_host_embed_head_forward(he, x, tok, NMAX, losses));
    MSR_CHECK_STATUS(msr_host_embed_head_forward(he, x, tok, NMAX + 1, losses),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_OK(msr_host_embed_head_backward(he, x, 1.0f, x));
    msr_host_embed_destroy(he);
    msr_host_embed_destroy(NULL);
}

/* Every allocation of a create failed in turn, on both devices. */
static void test_alloc_failures(void)
{
    msr_device_t *own = NULL;
    const msr_device_t *devs[2] = {msr_device_cpu(), fake_device(&own)};
    static float w[V * C], g[V * C];
    for (int d = 0; d < 2; d++) {
        msr_host_embed_config_t cfg = {.dev = devs[d], .V = V, .C = C, .max_rows = NMAX};
        long i = 0;
        for (;; i++) {
            msr_host_embed_t *he = NULL;
            msr_alloc_fail_at(i);
            msr_status_t st = msr_host_embed_create(&cfg, w, g, &he);
            int failed = msr_alloc_failed();
            msr_alloc_fail_at(-1);
            msr_host_embed_destroy(he);
            if (!failed) {
                MSR_CHECK_OK(st);
                break;
            }
            MSR_CHECK_MSG(st == MSR_ERR_NO_MEMORY && he == NULL, "%s: allocation %ld: %s (%s)",
                          msr_device_name(devs[d]), i, msr_status_name(st), msr_last_error());
            MSR_CHECK(i < 1000);
        }
        printf("alloc_failures: %s: %ld allocations failed in turn\n", msr_device_name(devs[d]), i);
        MSR_CHECK(i >= 19); /* the object and its 18 buffers, at least */
    }
    msr_device_destroy(own);
}

static const msr_test_t tests[] = {
    {"head", test_head, 60},
    {"lookup", test_lookup, 30},
    {"bad_args", test_bad_args, 30},
    {"alloc_failures", test_alloc_failures, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
