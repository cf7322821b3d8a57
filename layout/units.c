/* The unit walk and ZeRO-3's visits (layout/layout.h): a flat buffer cut
 * at every segment and bucket boundary, once for the runtime and the
 * planner. */
#include "layout/layout.h"

void msr_layout_units_init(msr_layout_units_t *it, uint64_t P, int nseg,
                           msr_layout_seg_count_fn count, const void *arg, int size,
                           uint64_t bucket_bytes, uint64_t first_bytes, uint64_t zero_min_bytes)
{
    it->P = P;
    msr_layout_bucket_elems(bucket_bytes, first_bytes, &it->bb, &it->fb);
    it->buckets = msr_layout_num_buckets(P, it->fb, it->bb);
    it->zero_min_bytes = zero_min_bytes;
    it->size = size > 0 ? size : 1;
    it->nseg = nseg;
    it->count = count;
    it->arg = arg;
    it->pos = it->seg_lo = 0;
    it->seg = 0;
    it->seg_n = nseg > 0 ? count(arg, 0) : 0;
}

/* Whether the unit at pos (bucket b ending at bhi, its segment ending at
 * seg_hi) starts a run of k >= 2 whole buckets inside the segment; the
 * run's first k - 1 in *repeat_p. Bucket 0 (the first, of its own size) is
 * never in a run. */
static int run_at(const msr_layout_units_t *it, uint64_t b, uint64_t bhi, uint64_t seg_hi,
                  uint64_t *repeat_p)
{
    uint64_t pos = it->pos, bb = it->bb;
    uint64_t first = it->P > it->fb ? it->P - it->fb : 0; /* bucket 0's start */
    uint64_t lim = seg_hi < first ? seg_hi : first;
    if (b < 1 || bhi < bb || pos != bhi - bb || lim <= pos || (lim - pos) / bb < 2)
        return 0;
    *repeat_p = (lim - pos) / bb - 1;
    return 1;
}

int msr_layout_units_next(msr_layout_units_t *it, int runs, msr_layout_unit_t *u_p)
{
    if (it->pos >= it->P)
        return 0;
    while (it->seg_lo + it->seg_n <= it->pos) {
        if (it->seg + 1 >= it->nseg) {
            it->pos = it->P; /* the segments end before P: nothing more to cut */
            return 0;
        }
        it->seg_lo += it->seg_n;
        it->seg_n = it->count(it->arg, ++it->seg);
    }
    uint64_t bhi, seg_hi = it->seg_lo + it->seg_n;
    u_p->bucket = msr_layout_bucket_at(it->P, it->fb, it->bb, it->pos, &bhi);
    u_p->lo = it->pos;
    u_p->n = (seg_hi < bhi ? seg_hi : bhi) - it->pos;
    u_p->repeat = 1;
    if (runs && run_at(it, u_p->bucket, bhi, seg_hi, &u_p->repeat))
        u_p->n = it->bb;
    u_p->seg = it->seg;
    u_p->seg_first = it->pos == it->seg_lo;
    u_p->seg_count = it->seg_n;
    u_p->replicated = msr_layout_replicated(it->seg_n, it->zero_min_bytes);
    u_p->blk = u_p->replicated ? u_p->n : msr_layout_block(u_p->n, it->size);
    it->pos += u_p->repeat * u_p->n;
    return 1;
}

void msr_layout_unit_own(const msr_layout_unit_t *u, int j, uint64_t *a_p, uint64_t *e_p)
{
    if (u->replicated) {
        *a_p = 0;
        *e_p = u->n;
        return;
    }
    msr_layout_block_of(u->n, u->blk, j, a_p, e_p);
}

int msr_layout_zero3_visits(int layers, int tied, int *visits)
{
    int nv = 0;
    visits[nv++] = 0;
    for (int l = 1; l <= layers; l++)
        visits[nv++] = l;
    visits[nv++] = layers + 1;
    if (tied) {
        visits[nv++] = 0; /* the head's forward */
        visits[nv++] = 0; /* backward: the head's */
    }
    visits[nv++] = layers + 1;
    for (int l = layers; l >= 1; l--)
        visits[nv++] = l;
    visits[nv++] = 0;
    return nv;
}

void msr_layout_bucket_defaults(size_t *bucket_bytes, size_t *first_bytes)
{
    if (*bucket_bytes == 0)
        *bucket_bytes = MSR_DP_BUCKET_BYTES;
    if (*first_bytes == 0)
        *first_bytes = MSR_DP_FIRST_BUCKET_BYTES;
}
