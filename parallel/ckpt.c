/* The trainer's checkpoint payload (see ckpt.h). */
#include "parallel/ckpt.h"

#include <inttypes.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"

#define PAYLOAD_MAGIC    "MSRTRN03"
#define PAYLOAD_VERSION  3u
/* version 2: the same bytes; its ranges were the saving rank's own flat
 * elements, which are the whole model's only without model parallel (the
 * only version 2 checkpoints a run's settings text lets through, ckpt.h) */
#define PAYLOAD_MAGIC_V2 "MSRTRN02"
#define MAX_WORLD        (1u << 20)

/* magic, 2 x u32, 5 x u64, 5 x u32 */
#define FIXED_LEN (8 + 2 * 4 + 5 * 8 + 5 * 4)

/* The header: the fixed part, meta and its NUL padded to 8, the ranges. */
static size_t head_len(size_t meta_len, uint64_t nranges)
{
    return ((FIXED_LEN + meta_len + 1 + 7) & ~(size_t)7) + (size_t)nranges * 16;
}

static void put_u32(unsigned char **p, uint32_t v)
{
    memcpy(*p, &v, 4);
    *p += 4;
}

static void put_u64(unsigned char **p, uint64_t v)
{
    memcpy(*p, &v, 8);
    *p += 8;
}

static uint32_t get_u32(const unsigned char **p)
{
    uint32_t v;
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}

static uint64_t get_u64(const unsigned char **p)
{
    uint64_t v;
    memcpy(&v, *p, 8);
    *p += 8;
    return v;
}

msr_status_t msr_tckpt_encode(const msr_tckpt_header_t *h, const msr_tckpt_range_t *ranges,
                              uint32_t n, void **buf_p, size_t *len_p)
{
    size_t meta_len = h->meta != NULL ? strlen(h->meta) : 0;
    uint64_t floats = 0;
    int bad = meta_len >= MSR_TCKPT_META_MAX || h->world == 0 || h->world > MAX_WORLD ||
              h->rank >= h->world;
    for (uint32_t k = 0; k < n && !bad; k++) {
        bad = ranges[k].n == 0 || ranges[k].lo > h->num_params ||
              ranges[k].n > h->num_params - ranges[k].lo ||
              (k > 0 && ranges[k].lo < ranges[k - 1].lo + ranges[k - 1].n);
        floats += 3 * ranges[k].n;
    }
    if (bad) {
        return msr_err(MSR_ERR_INVALID_ARG,
                       "checkpoint: inconsistent shard (rank %u of %u, %u ranges of %" PRIu64
                       " parameters, meta %zu bytes)",
                       h->rank, h->world, n, h->num_params, meta_len);
    }
    size_t hl = head_len(meta_len, n), len = hl + (size_t)floats * sizeof(float);
    unsigned char *buf = msr_calloc(len, 1);
    if (buf == NULL) {
        return msr_err(MSR_ERR_NO_MEMORY, "checkpoint: out of memory for a shard of %zu bytes",
                       len);
    }
    unsigned char *p = buf;
    memcpy(p, PAYLOAD_MAGIC, 8);
    p += 8;
    put_u32(&p, PAYLOAD_VERSION);
    put_u32(&p, (uint32_t)hl);
    put_u64(&p, h->step);
    put_u64(&p, h->adam_t);
    put_u64(&p, h->data_seed);
    put_u64(&p, h->data_position);
    put_u64(&p, h->num_params);
    put_u32(&p, h->rank);
    put_u32(&p, h->world);
    put_u32(&p, h->zero);
    put_u32(&p, n);
    put_u32(&p, (uint32_t)meta_len);
    memcpy(p, h->meta, meta_len); /* the NUL and padding are calloc's zeros */
    p = buf + hl - (size_t)n * 16;
    for (uint32_t k = 0; k < n; k++) {
        put_u64(&p, ranges[k].lo);
        put_u64(&p, ranges[k].n);
    }
    for (uint32_t k = 0; k < n; k++) {
        size_t bytes = (size_t)ranges[k].n * sizeof(float);
        memcpy(p, ranges[k].params, bytes);
        memcpy(p + bytes, ranges[k].m, bytes);
        memcpy(p + 2 * bytes, ranges[k].v, bytes);
        p += 3 * bytes;
    }
    *buf_p = buf;
    *len_p = len;
    return MSR_OK;
}

msr_status_t msr_tckpt_decode(const void *buf, size_t len, const char *what,
                              msr_tckpt_header_t *h_p, msr_tckpt_range_t **ranges_p, uint32_t *n_p)
{
    const unsigned char *b = buf, *p = b + 8;
    if (len < FIXED_LEN ||
        (memcmp(b, PAYLOAD_MAGIC, 8) != 0 && memcmp(b, PAYLOAD_MAGIC_V2, 8) != 0)) {
        return msr_err(MSR_ERR_CORRUPT, "checkpoint: %s is not a train_gpt shard (%zu bytes)", what,
                       len);
    }
    msr_tckpt_header_t h;
    uint32_t version = get_u32(&p), hl = get_u32(&p);
    h.step = get_u64(&p);
    h.adam_t = get_u64(&p);
    h.data_seed = get_u64(&p);
    h.data_position = get_u64(&p);
    h.num_params = get_u64(&p);
    h.rank = get_u32(&p);
    h.world = get_u32(&p);
    h.zero = get_u32(&p);
    uint32_t n = get_u32(&p), meta_len = get_u32(&p);
    if (version != (b[7] == '3' ? PAYLOAD_VERSION : 2u) || meta_len >= MSR_TCKPT_META_MAX ||
        n > len / 16 || hl != head_len(meta_len, n) || hl > len ||
        b[FIXED_LEN + meta_len] != '\0' || h.world == 0 || h.world > MAX_WORLD ||
        h.rank >= h.world) {
        return msr_err(MSR_ERR_CORRUPT,
                       "checkpoint: %s has an inconsistent header (version %u, rank %u of %u, %u "
                       "ranges)",
                       what, version, h.rank, h.world, n);
    }
    h.meta = (const char *)b + FIXED_LEN;
    msr_tckpt_range_t *r = msr_calloc(n + 1u, sizeof *r);
    if (r == NULL) {
        return msr_err(MSR_ERR_NO_MEMORY, "checkpoint: out of memory reading %s", what);
    }
    p = b + hl - (size_t)n * 16;
    const float *f = (const float *)(b + hl); /* hl % 8 == 0 */
    size_t left = (len - hl) / sizeof(float);
    int bad = (len - hl) % sizeof(float) != 0;
    for (uint32_t k = 0; k < n && !bad; k++) {
        r[k].lo = get_u64(&p);
        r[k].n = get_u64(&p);
        bad = r[k].n == 0 || r[k].lo > h.num_params || r[k].n > h.num_params - r[k].lo ||
              (k > 0 && r[k].lo < r[k - 1].lo + r[k - 1].n) || r[k].n > left / 3;
        if (bad)
            break;
        r[k].params = f;
        r[k].m = f + r[k].n;
        r[k].v = f + 2 * r[k].n;
        f += 3 * r[k].n;
        left -= 3 * r[k].n;
    }
    if (bad || left != 0) {
        msr_free(r);
        return msr_err(MSR_ERR_CORRUPT, "checkpoint: %s has ranges that do not fit its %zu bytes",
                       what, len);
    }
    *h_p = h;
    *ranges_p = r;
    *n_p = n;
    return MSR_OK;
}

size_t msr_tckpt_meta_diff(const char *a, const char *b)
{
    size_t i = 0;
    while (a[i] != '\0' && a[i] == b[i])
        i++;
    while (i > 0 && !(i >= 2 && a[i - 2] == ';' && a[i - 1] == ' '))
        i--;
    return i;
}
