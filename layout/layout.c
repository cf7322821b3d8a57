/* The training layout (layout/layout.h): pipeline stages, buckets and
 * shards. */
#include "layout/layout.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"

/* ---- pipeline stages ---- */

void msr_layout_stage_even(int layers, int n, int j, int *lo_p, int *hi_p)
{
    *lo_p = (int)((int64_t)layers * j / n);
    *hi_p = (int)((int64_t)layers * (j + 1) / n);
}

void msr_layout_split_stage(int layers, int n, const int *split, int j, int *lo_p, int *hi_p)
{
    if (split == NULL) {
        msr_layout_stage_even(layers, n, j, lo_p, hi_p);
        return;
    }
    int lo = 0;
    for (int k = 0; k < j; k++)
        lo += split[k];
    *lo_p = lo;
    *hi_p = lo + split[j];
}

msr_status_t msr_layout_split_check(int layers, int stages, const int *split, int count)
{
    if (count != stages) {
        return msr_err(MSR_ERR_CONFIG,
                       "%d entries for %d virtual stages: give one layer count per virtual stage "
                       "(pp x virtual stages)",
                       count, stages);
    }
    int64_t sum = 0;
    for (int j = 0; j < count; j++) {
        if (split[j] < 1) {
            return msr_err(MSR_ERR_CONFIG,
                           "virtual stage %d has %d layers: every virtual stage needs at least 1",
                           j, split[j]);
        }
        sum += split[j];
    }
    if (sum != layers) {
        return msr_err(MSR_ERR_CONFIG, "the stages' layers sum to %" PRId64 ", not the %d layers",
                       sum, layers);
    }
    return MSR_OK;
}

/* The largest count msr_layout_split_parse reads (the planner's models may
 * have more layers than this runtime's). */
#define SPLIT_MAX_COUNT (1 << 24)

msr_status_t msr_layout_split_parse(const char *text, int *split, int max, int *count_p)
{
    int n = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        char num[16];
        if (len == 0 || len >= sizeof num) {
            return msr_err(MSR_ERR_CONFIG, "entry %d is %s", n + 1,
                           len == 0 ? "empty" : "not a layer count");
        }
        memcpy(num, p, len);
        num[len] = '\0';
        int64_t v;
        if (msr_parse_i64(num, 0, SPLIT_MAX_COUNT, &v) != MSR_OK) {
            return msr_err(MSR_ERR_CONFIG, "entry %d '%s' is not a layer count in [0, %d]", n + 1,
                           num, SPLIT_MAX_COUNT);
        }
        if (n == max) {
            return msr_err(MSR_ERR_CONFIG, "more than %d entries", max);
        }
        split[n++] = (int)v;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    *count_p = n;
    return MSR_OK;
}

int msr_layout_split_is_even(int layers, int n, const int *split)
{
    for (int j = 0; j < n; j++) {
        int lo, hi;
        msr_layout_stage_even(layers, n, j, &lo, &hi);
        if (split[j] != hi - lo)
            return 0;
    }
    return 1;
}

int msr_layout_split_format(const int *split, int n, char *buf, size_t len)
{
    int used = 0;
    if (len > 0)
        buf[0] = '\0';
    for (int j = 0; j < n; j++) {
        size_t at = (size_t)used < len ? (size_t)used : len;
        int w = snprintf(buf + at, len - at, "%s%d", j > 0 ? "," : "", split[j]);
        if (w < 0)
            return w;
        used += w;
    }
    return used;
}

/* ---- buckets and shards ---- */

void msr_layout_bucket_elems(uint64_t bucket_bytes, uint64_t first_bytes, uint64_t *bb_p,
                             uint64_t *fb_p)
{
    uint64_t bb = bucket_bytes / sizeof(float);
    uint64_t fb = (first_bytes < bucket_bytes ? first_bytes : bucket_bytes) / sizeof(float);
    *bb_p = bb > 0 ? bb : 1;
    *fb_p = fb > 0 ? fb : 1;
}

uint64_t msr_layout_num_buckets(uint64_t P, uint64_t fb, uint64_t bb)
{
    if (P == 0)
        return 0;
    return P <= fb ? 1 : 1 + (P - fb + bb - 1) / bb;
}

void msr_layout_bucket_range(uint64_t P, uint64_t fb, uint64_t bb, uint64_t b, uint64_t *lo_p,
                             uint64_t *hi_p)
{
    uint64_t hi = b == 0 ? P : P > fb + (b - 1) * bb ? P - fb - (b - 1) * bb : 0;
    uint64_t sz = b == 0 ? fb : bb;
    *hi_p = hi;
    *lo_p = hi > sz ? hi - sz : 0;
}

uint64_t msr_layout_bucket_at(uint64_t P, uint64_t fb, uint64_t bb, uint64_t pos, uint64_t *hi_p)
{
    if (P <= fb || pos >= P - fb) {
        *hi_p = P;
        return 0;
    }
    uint64_t k = (P - fb - pos + bb - 1) / bb - 1;
    *hi_p = P - fb - k * bb;
    return 1 + k;
}

int msr_layout_replicated(uint64_t seg_elems, uint64_t zero_min_bytes)
{
    return zero_min_bytes > 0 && seg_elems * sizeof(float) < zero_min_bytes;
}

uint64_t msr_layout_block(uint64_t n, int size)
{
    return (n + (uint64_t)size - 1) / (uint64_t)size;
}

void msr_layout_block_of(uint64_t n, uint64_t blk, int j, uint64_t *a_p, uint64_t *e_p)
{
    uint64_t a = (uint64_t)j * blk < n ? (uint64_t)j * blk : n;
    *a_p = a;
    *e_p = a + blk < n ? a + blk : n;
}
