/* The training layout (layout/layout.h): pipeline stages, buckets and
 * shards. */
#include "layout/layout.h"

#include <inttypes.h>
#include <math.h>
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

/* ---- activations ---- */

msr_layout_dims_t msr_layout_dims(int micro_batch, int max_seq, int channels, int heads, int vocab,
                                  int tp, int sp, int cp, int mode)
{
    msr_layout_dims_t d;
    d.B = micro_batch;
    d.C = channels;
    d.V = vocab;
    d.cp = cp > 1 ? cp : 1;
    d.T = max_seq / d.cp;
    d.tp = tp;
    d.sp = sp;
    d.mode = mode;
    d.Cl = channels / tp;
    d.NHl = heads / tp;
    d.Hl = 4 * channels / tp;
    d.glu = 0;
    d.hc = 0;
    d.Vl = vocab / tp;
    d.Tl = sp ? d.T / tp : d.T;
    d.N = (size_t)d.B * (size_t)d.T;
    d.Nl = (size_t)d.B * (size_t)d.Tl;
    return d;
}

void msr_layout_head_chunk(msr_layout_dims_t *d, int rows)
{
    d->hc = rows <= 0 ? 0 : rows < d->Vl ? rows : d->Vl;
}

size_t msr_layout_block_act(const msr_layout_dims_t *d, int a, int *kept_p)
{
    size_t N = d->N, Nl = d->Nl, C = (size_t)d->C;
    int all = d->mode == MSR_LAYOUT_RECOMPUTE_NONE;
    int sel = d->mode == MSR_LAYOUT_RECOMPUTE_SELECTIVE;
    int kept = all || sel; /* dropped only by full recompute */
    size_t n = 0;
    switch (a) {
    case MSR_ACT_LN1:
    case MSR_ACT_RES2:
    case MSR_ACT_LN2:
        n = Nl * C;
        break;
    case MSR_ACT_LN1_MEAN:
    case MSR_ACT_LN1_RSTD:
    case MSR_ACT_LN2_MEAN:
    case MSR_ACT_LN2_RSTD:
        n = Nl;
        break;
    case MSR_ACT_QKV:
        n = N * 3 * (size_t)d->Cl;
        break;
    case MSR_ACT_ATTY:
        n = N * (size_t)d->Cl;
        break;
    case MSR_ACT_ATT:
        if (d->cp > 1) {
            n = N * (size_t)d->NHl;
        } else {
            n = (size_t)d->B * (size_t)d->NHl * (size_t)d->T * (size_t)d->T;
            kept = all;
        }
        break;
    case MSR_ACT_FCH:
        n = N * (size_t)d->Hl * (d->glu ? 2 : 1);
        break;
    case MSR_ACT_FCH_GELU:
        n = N * (size_t)d->Hl;
        kept = all;
        break;
    case MSR_ACT_RES3:
        n = Nl * C;
        kept = 1; /* the block's output: the next block's input */
        break;
    }
    *kept_p = kept;
    return n;
}

size_t msr_layout_head_act(const msr_layout_dims_t *d, int a)
{
    switch (a) {
    case MSR_ACT_LNF:
        return d->Nl * (size_t)d->C;
    case MSR_ACT_LNF_MEAN:
    case MSR_ACT_LNF_RSTD:
        return d->Nl;
    case MSR_ACT_PROBS: /* a chunked head's maximum, sum and target logit a row */
        return d->hc > 0 ? 3 * d->N : d->N * (size_t)d->Vl;
    }
    return 0;
}

uint64_t msr_layout_frame_elems(const msr_layout_dims_t *d, int layers, int head)
{
    uint64_t block = 0;
    for (int a = 0; a < MSR_ACT_BLOCK_COUNT; a++) {
        int kept;
        uint64_t n = msr_layout_block_act(d, a, &kept);
        block += kept ? n : 0;
    }
    uint64_t e = (uint64_t)d->Nl * (uint64_t)d->C + (uint64_t)layers * block; /* input */
    for (int a = 0; head && a < MSR_ACT_HEAD_COUNT; a++)
        e += msr_layout_head_act(d, a);
    return e;
}

size_t msr_layout_whole_act(const msr_layout_dims_t *d, int a)
{
    size_t N = d->N, C = (size_t)d->C, V = (size_t)d->V;
    switch (a) {
    case MSR_ACT_ENCODED:
    case MSR_ACT_WHOLE_LNF:
    case MSR_ACT_PROJ:
        return N * C;
    case MSR_ACT_WHOLE_LNF_MEAN:
    case MSR_ACT_WHOLE_LNF_RSTD:
    case MSR_ACT_LOSSES:
        return N;
    case MSR_ACT_LOGITS: /* a chunked head's: one chunk's */
        return N * (d->hc > 0 ? (size_t)d->hc : V);
    case MSR_ACT_WHOLE_PROBS: /* a chunked head's M, S, Z, the chunk's maxima, sums, targets' */
        return d->hc > 0 ? 6 * N : N * V;
    }
    return 0;
}

uint64_t msr_layout_whole_elems(const msr_layout_dims_t *d, int layers)
{
    uint64_t block = 0, e = 0;
    for (int a = 0; a < MSR_ACT_BLOCK_COUNT; a++) {
        int kept;
        block += msr_layout_block_act(d, a, &kept);
    }
    for (int a = 0; a < MSR_ACT_WHOLE_COUNT; a++)
        e += msr_layout_whole_act(d, a);
    return e + (uint64_t)layers * block;
}

/* ---- the model-parallel runtime's work space ---- */

size_t msr_layout_work(const msr_layout_dims_t *d, int w)
{
    size_t N = d->N, Nl = d->Nl, C = (size_t)d->C, ring = d->cp > 1;
    switch (w) {
    case MSR_WORK_SCRATCH: {
        msr_layout_dims_t full = *d;
        full.mode = MSR_LAYOUT_RECOMPUTE_FULL;
        size_t n = 0;
        for (int a = 0; a < MSR_ACT_BLOCK_COUNT; a++) {
            int kept;
            size_t k = msr_layout_block_act(&full, a, &kept);
            n += kept ? 0 : k;
        }
        return n;
    }
    case MSR_WORK_GAT:
    case MSR_WORK_DGAT:
    case MSR_WORK_PERM:
    case MSR_WORK_PROJ:
    case MSR_WORK_DLN:
        return N * C;
    case MSR_WORK_PROJL:
    case MSR_WORK_DRES:
    case MSR_WORK_DLNL:
        return Nl * C;
    case MSR_WORK_DQKV:
        return N * 3 * (size_t)d->Cl;
    case MSR_WORK_DATTY:
        return N * (size_t)d->Cl;
    case MSR_WORK_DFCH:
        return N * (size_t)d->Hl * (d->glu ? 2 : 1);
    case MSR_WORK_DFCH_GELU:
        return N * (size_t)d->Hl;
    case MSR_WORK_DATT:
        return (size_t)d->T * (size_t)d->T;
    case MSR_WORK_LOGITS:
    case MSR_WORK_DLOGITS:
        return N * (size_t)(d->hc > 0 ? d->hc : d->Vl);
    case MSR_WORK_LOSSES:
    case MSR_WORK_RMAX:
        return N;
    case MSR_WORK_RED:
        return 2 * N;
    case MSR_WORK_KV0:
    case MSR_WORK_DKV0:
    case MSR_WORK_KV1:
    case MSR_WORK_DKV1:
        return ring * N * 2 * (size_t)d->Cl;
    case MSR_WORK_RMX:
    case MSR_WORK_RSUM:
    case MSR_WORK_DELTA:
        return ring * N * (size_t)d->NHl;
    }
    return 0;
}

uint64_t msr_layout_work_elems(const msr_layout_dims_t *d)
{
    uint64_t e = 0;
    for (int w = 0; w < MSR_WORK_COUNT; w++)
        e += msr_layout_work(d, w);
    return e;
}

uint64_t msr_layout_work_ints(const msr_layout_dims_t *d, int micros)
{
    if (d->cp <= 1)
        return 0;
    return (uint64_t)d->cp * (uint64_t)d->T + 2 * (uint64_t)micros * (uint64_t)d->N;
}

/* ---- the whole model's work space ---- */

size_t msr_layout_whole_work(const msr_layout_dims_t *d, int w, int datt_heads)
{
    size_t N = d->N, C = (size_t)d->C, T = (size_t)d->T;
    switch (w) {
    case MSR_WORK_WHOLE_DRES:
    case MSR_WORK_WHOLE_DLN:
    case MSR_WORK_WHOLE_DATTY:
        return N * C;
    case MSR_WORK_WHOLE_DQKV:
        return N * 3 * C;
    case MSR_WORK_WHOLE_DFCH: /* d->Hl: 4 C, or a Llama's ffn (its gate and up: glu) */
        return N * (size_t)d->Hl * (d->glu ? 2 : 1);
    case MSR_WORK_WHOLE_DFCH_GELU:
        return N * (size_t)d->Hl;
    case MSR_WORK_WHOLE_DATT:
        return (size_t)datt_heads * T * T;
    case MSR_WORK_WHOLE_DLOGITS: /* a chunked head's: one chunk's exponentials */
        return N * (size_t)(d->hc > 0 ? d->hc : d->V);
    }
    return 0;
}

uint64_t msr_layout_whole_work_elems(const msr_layout_dims_t *d, int datt_heads)
{
    uint64_t e = 0;
    for (int w = 0; w < MSR_WORK_WHOLE_COUNT; w++)
        e += msr_layout_whole_work(d, w, datt_heads);
    return e;
}

/* ---- the MoE blocks' work space ---- */

uint64_t msr_layout_moe_capacity(double F, uint64_t tokens, uint64_t K, uint64_t E)
{
    double c = ceil(F * (double)tokens * (double)K / (double)E);
    return c < 1.0 ? 1 : (uint64_t)c;
}

msr_layout_moe_dims_t msr_layout_moe_dims(uint64_t tokens, uint64_t experts, uint64_t top_k,
                                          double capacity_factor, uint64_t channels,
                                          uint64_t hidden)
{
    return msr_layout_moe_dims_cp(tokens, 1, experts, top_k, capacity_factor, channels, hidden);
}

msr_layout_moe_dims_t msr_layout_moe_dims_cp(uint64_t tokens, uint64_t cp, uint64_t experts,
                                             uint64_t top_k, double capacity_factor,
                                             uint64_t channels, uint64_t hidden)
{
    msr_layout_moe_dims_t d = {tokens, experts, top_k, channels, hidden, 0, 0, cp, 0};
    d.cap = msr_layout_moe_capacity(capacity_factor, cp * tokens, top_k, experts);
    d.stride = cp > 1 && tokens < d.cap ? tokens : d.cap;
    d.rows = experts * d.stride;
    return d;
}

size_t msr_layout_moe_work(const msr_layout_moe_dims_t *d, int w)
{
    switch (w) {
    case MSR_MOE_WORK_PROBS:
    case MSR_MOE_WORK_DPROBS:
        return (size_t)(d->N * d->E);
    case MSR_MOE_WORK_CHOICE:
    case MSR_MOE_WORK_GATE:
    case MSR_MOE_WORK_POS:
    case MSR_MOE_WORK_DGATE:
        return (size_t)(d->N * d->K);
    case MSR_MOE_WORK_FRAC:
    case MSR_MOE_WORK_USED:
    case MSR_MOE_WORK_LOAD:
        return (size_t)d->E;
    case MSR_MOE_WORK_XIN:
    case MSR_MOE_WORK_COMB:
    case MSR_MOE_WORK_SEND:
    case MSR_MOE_WORK_OUT:
    case MSR_MOE_WORK_DOUT:
        return (size_t)(d->rows * d->C);
    case MSR_MOE_WORK_FCH:
    case MSR_MOE_WORK_FCH_G:
    case MSR_MOE_WORK_DFCH:
    case MSR_MOE_WORK_DFCH_G:
        return (size_t)(d->rows * d->H);
    case MSR_MOE_WORK_RDX:
        return (size_t)(d->N * d->C);
    case MSR_MOE_WORK_GCHOICE:
        return d->cp > 1 ? (size_t)(d->cp * d->N * d->K) : 0;
    }
    return 0;
}

size_t msr_layout_moe_work_size(int w, size_t fw)
{
    switch (w) {
    case MSR_MOE_WORK_CHOICE:
    case MSR_MOE_WORK_POS:
    case MSR_MOE_WORK_USED:
    case MSR_MOE_WORK_GCHOICE:
        return sizeof(int32_t);
    case MSR_MOE_WORK_FRAC:
        return sizeof(double);
    case MSR_MOE_WORK_LOAD:
        return sizeof(int64_t);
    }
    return fw;
}

static uint64_t moe_work_sum(const msr_layout_moe_dims_t *d, int lo, int hi, uint64_t fw)
{
    uint64_t b = 0;
    for (int w = lo; w < hi; w++)
        b += (uint64_t)msr_layout_moe_work(d, w) * msr_layout_moe_work_size(w, (size_t)fw);
    return b;
}

uint64_t msr_layout_moe_work_bytes(const msr_layout_moe_dims_t *d, int held, int frames, int blocks,
                                   int rdx, uint64_t fw)
{
    uint64_t slot = moe_work_sum(d, 0, MSR_MOE_WORK_SLOT_END, fw);
    uint64_t once = moe_work_sum(d, MSR_MOE_WORK_SLOT_END, MSR_MOE_WORK_ONCE_END, fw);
    uint64_t load = moe_work_sum(d, MSR_MOE_WORK_LOAD, MSR_MOE_WORK_LOAD + 1, fw);
    if (rdx)
        once += moe_work_sum(d, MSR_MOE_WORK_RDX, MSR_MOE_WORK_RDX + 1, fw);
    return (uint64_t)held * (uint64_t)frames * slot + once + (uint64_t)blocks * load;
}
