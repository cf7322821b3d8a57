/* Token files (model/data.h): the header's checks, the vocabulary, and the
 * keyed permutation of an epoch's windows. */
#include <inttypes.h>
#include <string.h>

#include "base/err.h"
#include "model/data.h"
#include "model/data_impl.h"
#include "model/rng.h"

#define PERM_STREAM 0x65706f63ULL /* the epochs' permutation's RNG stream */
#define PERM_ROUNDS 6
#define VOCAB_MAX   65536 /* the model's largest V (model/gpt.c) */

static int32_t le32(const uint8_t *b)
{
    return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                     (uint32_t)b[3] << 24);
}

int msr_data_is_tokens(const uint8_t *file, size_t len)
{
    return len >= 4 && le32(file) == MSR_TOKENS_MAGIC;
}

/* The largest token of ds. */
static int max_token(const msr_dataset_t *ds)
{
    int m = 0;
    for (size_t i = 0; i < ds->size; i++) {
        int t = msr_dataset_token(ds, i);
        m = t > m ? t : m;
    }
    return m;
}

msr_status_t msr_data_tokens_parse(const char *path, const uint8_t *file, size_t len,
                                   msr_dataset_t *ds)
{
    if (len < MSR_TOKENS_HEADER_BYTES) {
        return msr_err(MSR_ERR_INVALID_ARG,
                       "data: %s starts with the token files' magic %d but holds %zu bytes, "
                       "short of the %d-byte header",
                       path, MSR_TOKENS_MAGIC, len, MSR_TOKENS_HEADER_BYTES);
    }
    int32_t version = le32(file + 4), count = le32(file + 8);
    if (version != MSR_TOKENS_VERSION_U16 && version != MSR_TOKENS_VERSION_U32) {
        return msr_err(MSR_ERR_INVALID_ARG,
                       "data: %s: token file version %" PRId32
                       " is not %d (uint16 tokens) or %d (uint32 tokens)",
                       path, version, MSR_TOKENS_VERSION_U16, MSR_TOKENS_VERSION_U32);
    }
    int width = version == MSR_TOKENS_VERSION_U16 ? 2 : 4;
    size_t body = len - MSR_TOKENS_HEADER_BYTES;
    if (count <= 0 || (uint64_t)count * (uint64_t)width != body) {
        return msr_err(MSR_ERR_INVALID_ARG,
                       "data: %s: the header counts %" PRId32
                       " tokens of %d bytes, but %zu bytes follow the header (%zu tokens)",
                       path, count, width, body, body / (size_t)width);
    }
    ds->bytes = file + MSR_TOKENS_HEADER_BYTES;
    ds->size = (size_t)count;
    ds->width = width;
    int64_t v = ((int64_t)max_token(ds) + MSR_TOKENS_VOCAB_ROUND) / MSR_TOKENS_VOCAB_ROUND *
                MSR_TOKENS_VOCAB_ROUND;
    ds->vocab = v > VOCAB_MAX ? VOCAB_MAX + 1 : (int)v; /* too large: the model refuses it */
    return MSR_OK;
}

msr_status_t msr_dataset_vocab(msr_dataset_t *ds, int V)
{
    if (V < 1 || V > VOCAB_MAX)
        return msr_err(MSR_ERR_INVALID_ARG, "data: vocabulary %d is not in [1, %d]", V, VOCAB_MAX);
    for (size_t i = 0; i < ds->size; i++) {
        int t = msr_dataset_token(ds, i);
        if (t >= V || t < 0) { /* a uint32 token past INT_MAX reads negative */
            size_t at = (ds->width > 1 ? MSR_TOKENS_HEADER_BYTES : 0) + i * (size_t)ds->width;
            return msr_err(MSR_ERR_INVALID_ARG,
                           "data: %s: token %zu (byte offset %zu) is %u, not below the "
                           "vocabulary of %d",
                           ds->origin, i, at, (unsigned)t, V);
        }
    }
    ds->vocab = V;
    return MSR_OK;
}

/* ---- the epochs' order ---- */

uint64_t msr_sampler_windows(size_t ds_size, int T)
{
    return (uint64_t)(ds_size - 1) / (uint64_t)T;
}

/* One pass of the Feistel network over 2h bits: x's halves (L, R) become
 * (R, L ^ F(R)), F keyed by (seed, epoch, round). A bijection of [0, 4^h). */
static uint64_t feistel(uint64_t seed, uint64_t epoch, int h, uint64_t x)
{
    uint64_t mask = (UINT64_C(1) << h) - 1, l = x >> h, r = x & mask;
    for (uint64_t round = 0; round < PERM_ROUNDS; round++) {
        uint64_t f = msr_rng_u64(seed, PERM_STREAM + epoch * PERM_ROUNDS + round, r) & mask;
        uint64_t nl = r;
        r = l ^ f;
        l = nl;
    }
    return l << h | r;
}

uint64_t msr_sampler_perm(uint64_t seed, uint64_t epoch, uint64_t n, uint64_t i)
{
    if (n <= 1)
        return 0;
    int h = 1;
    while (h < 32 && (UINT64_C(1) << (2 * h)) < n)
        h++;
    /* cycle walking: the domain is under 4n, so a walk takes under 4 steps
     * on average; it ends because the network's cycle through i returns
     * to i, which is in [0, n) */
    uint64_t x = i;
    do
        x = feistel(seed, epoch, h, x);
    while (x >= n);
    return x;
}

size_t msr_sampler_start(const msr_sampler_t *s, const msr_dataset_t *ds, int T, uint64_t k)
{
    if (!ds->epochs)
        return msr_sampler_offset(s, ds->size, T, k);
    uint64_t W = msr_sampler_windows(ds->size, T);
    return (size_t)(msr_sampler_perm(s->seed, k / W, W, k % W) * (uint64_t)T);
}
