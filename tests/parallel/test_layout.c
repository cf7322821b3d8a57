/* The layout's bucket and shard cut (layout/layout.h) at its bounds: the
 * first bucket exactly full and one past, the last bucket short, a
 * bucket's elements found from any of its positions, the ZeRO threshold
 * at exactly its size and one under, the blocks of an uneven shard; the
 * unit walk against the cut it claims, with runs of whole buckets and
 * without; the work tables (model parallel's, the whole model's, the
 * MoE blocks') against the sizes they replaced, at their ends and one
 * past; the chunked head's sizes at its bounds. */
#include <stdint.h>

#include "layout/layout.h"
#include "tests/runner.h"

/* Every position's bucket agrees with the ranges, and the ranges tile
 * [0, P) from the end without a gap. */
static void check_tiling(uint64_t P, uint64_t fb, uint64_t bb)
{
    uint64_t nb = msr_layout_num_buckets(P, fb, bb), next_hi = P;
    for (uint64_t b = 0; b < nb; b++) {
        uint64_t lo, hi;
        msr_layout_bucket_range(P, fb, bb, b, &lo, &hi);
        MSR_CHECK_EQ(hi, next_hi);
        MSR_CHECK(lo < hi);
        MSR_CHECK(hi - lo <= (b == 0 ? fb : bb));
        for (uint64_t pos = lo; pos < hi; pos++) {
            uint64_t at_hi, at = msr_layout_bucket_at(P, fb, bb, pos, &at_hi);
            MSR_CHECK_EQ(at, b);
            MSR_CHECK_EQ(at_hi, hi);
        }
        next_hi = lo;
    }
    MSR_CHECK_EQ(next_hi, 0);
}

static void test_buckets_at_bounds(void)
{
    MSR_CHECK_EQ(msr_layout_num_buckets(0, 4, 10), 0);
    MSR_CHECK_EQ(msr_layout_num_buckets(1, 4, 10), 1);
    MSR_CHECK_EQ(msr_layout_num_buckets(4, 4, 10), 1);  /* the first exactly full */
    MSR_CHECK_EQ(msr_layout_num_buckets(5, 4, 10), 2);  /* one past */
    MSR_CHECK_EQ(msr_layout_num_buckets(14, 4, 10), 2); /* the second exactly full */
    MSR_CHECK_EQ(msr_layout_num_buckets(15, 4, 10), 3);
    uint64_t lo, hi;
    msr_layout_bucket_range(15, 4, 10, 2, &lo, &hi); /* the last: one element */
    MSR_CHECK_EQ(lo, 0);
    MSR_CHECK_EQ(hi, 1);
    const uint64_t sizes[][3] = {{1, 1, 1},  {4, 4, 10},    {5, 4, 10},    {14, 4, 10}, {15, 4, 10},
                                 {37, 3, 7}, {100, 100, 1}, {101, 100, 1}, {64, 1, 64}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        check_tiling(sizes[i][0], sizes[i][1], sizes[i][2]);
}

static void test_bucket_elems(void)
{
    uint64_t bb, fb;
    msr_layout_bucket_elems(MSR_DP_BUCKET_BYTES, MSR_DP_FIRST_BUCKET_BYTES, &bb, &fb);
    MSR_CHECK_EQ(bb, (uint64_t)MSR_DP_BUCKET_BYTES / 4);
    MSR_CHECK_EQ(fb, (uint64_t)MSR_DP_FIRST_BUCKET_BYTES / 4);
    msr_layout_bucket_elems(40, 100, &bb, &fb); /* the first at most a bucket */
    MSR_CHECK_EQ(bb, 10);
    MSR_CHECK_EQ(fb, 10);
    msr_layout_bucket_elems(3, 0, &bb, &fb); /* under one element: one */
    MSR_CHECK_EQ(bb, 1);
    MSR_CHECK_EQ(fb, 1);
    msr_layout_bucket_elems(4, 4, &bb, &fb);
    MSR_CHECK_EQ(bb, 1);
    MSR_CHECK_EQ(fb, 1);
}

static void test_replicated_threshold(void)
{
    MSR_CHECK(msr_layout_replicated(15, 64));  /* 60 bytes < 64 */
    MSR_CHECK(!msr_layout_replicated(16, 64)); /* exactly the threshold: sharded */
    MSR_CHECK(!msr_layout_replicated(1, 0));   /* 0: every segment sharded */
}

static void test_blocks(void)
{
    /* 10 elements over 4 ranks: blocks of 3, the last rank gets 1 */
    uint64_t blk = msr_layout_block(10, 4), a, e, sum = 0;
    MSR_CHECK_EQ(blk, 3);
    for (int j = 0; j < 4; j++) {
        msr_layout_block_of(10, blk, j, &a, &e);
        MSR_CHECK_EQ(a, (uint64_t)j * 3 < 10 ? (uint64_t)j * 3 : 10);
        sum += e - a;
    }
    MSR_CHECK_EQ(sum, 10);
    msr_layout_block_of(10, blk, 3, &a, &e);
    MSR_CHECK_EQ(e - a, 1);
    /* 2 elements over 4 ranks: the last two ranks own nothing */
    blk = msr_layout_block(2, 4);
    MSR_CHECK_EQ(blk, 1);
    msr_layout_block_of(2, blk, 2, &a, &e);
    MSR_CHECK_EQ(a, 2);
    MSR_CHECK_EQ(e, 2);
    MSR_CHECK_EQ(msr_layout_block(8, 4), 2); /* exactly divisible */
    MSR_CHECK_EQ(msr_layout_block(9, 4), 3); /* one past */
}

/* ---- the unit walk ---- */

typedef struct segs {
    int n;
    uint64_t count[8];
} segs_t;

static uint64_t segs_count(const void *arg, int s)
{
    return ((const segs_t *)arg)->count[s];
}

static uint64_t segs_total(const segs_t *g)
{
    uint64_t P = 0;
    for (int s = 0; s < g->n; s++)
        P += g->count[s];
    return P;
}

/* Walks g's units without runs and checks each against the cut it claims:
 * flat order without a gap, one segment and one bucket each, ending at the
 * nearer of their ends, the threshold's choice, the blocks of every rank
 * tiling the unit. Returns the units. */
static int check_units(const segs_t *g, int size, uint64_t bucket, uint64_t first, uint64_t zmin,
                       msr_layout_unit_t *out, int max)
{
    uint64_t P = segs_total(g), pos = 0, seg_lo = 0;
    msr_layout_units_t it;
    msr_layout_unit_t u;
    msr_layout_units_init(&it, P, g->n, segs_count, g, size, bucket, first, zmin);
    int nu = 0, s = 0;
    while (msr_layout_units_next(&it, 0, &u)) {
        while (seg_lo + g->count[s] <= pos)
            seg_lo += g->count[s++];
        uint64_t bhi, b = msr_layout_bucket_at(P, it.fb, it.bb, pos, &bhi);
        uint64_t seg_hi = seg_lo + g->count[s];
        MSR_CHECK_EQ(u.lo, pos);
        MSR_CHECK_EQ(u.seg, s);
        MSR_CHECK_EQ(u.bucket, b);
        MSR_CHECK_EQ(u.n, (seg_hi < bhi ? seg_hi : bhi) - pos);
        MSR_CHECK_EQ(u.repeat, 1);
        MSR_CHECK_EQ(u.seg_first, pos == seg_lo);
        MSR_CHECK_EQ(u.seg_count, g->count[s]);
        MSR_CHECK_EQ(u.replicated, msr_layout_replicated(g->count[s], zmin));
        MSR_CHECK_EQ(u.blk, u.replicated ? u.n : (u.n + (uint64_t)size - 1) / (uint64_t)size);
        uint64_t owned = 0, a, e;
        for (int j = 0; j < size; j++) {
            msr_layout_unit_own(&u, j, &a, &e);
            MSR_CHECK(a <= e && e <= u.n);
            owned += e - a;
        }
        MSR_CHECK_EQ(owned, u.replicated ? (uint64_t)size * u.n : u.n);
        MSR_CHECK(nu < max);
        out[nu++] = u;
        pos += u.n;
    }
    MSR_CHECK_EQ(pos, P);
    return nu;
}

static void test_units_cut(void)
{
    msr_layout_unit_t u[64];
    /* buckets of 4 elements, the first of 2: P = 20 -> [18, 20), then 4 each */
    segs_t g = {3, {5, 11, 4}};
    int nu = check_units(&g, 3, 16, 8, 0, u, 64);
    MSR_CHECK_EQ(nu, 8); /* cuts at 2, 5, 6, 10, 14, 16, 18 */
    MSR_CHECK_EQ(u[0].n, 2);
    MSR_CHECK_EQ(u[0].bucket, 5);
    MSR_CHECK_EQ(u[1].n, 3); /* segment 0's end cuts bucket 4 */
    MSR_CHECK(u[2].seg == 1 && u[2].seg_first && u[2].n == 1);
    /* the threshold at exactly its size (16 bytes: 4 elements, sharded)
     * and one element under (replicated) */
    segs_t t = {3, {4, 3, 9}};
    nu = check_units(&t, 2, 16, 8, 16, u, 64);
    for (int k = 0; k < nu; k++)
        MSR_CHECK_EQ(u[k].replicated, u[k].seg == 1);
    /* a size of one: every rank-block the whole unit; an empty segment
     * skipped; no units at all for P = 0 */
    segs_t e = {3, {6, 0, 7}};
    nu = check_units(&e, 1, 12, 4, 0, u, 64);
    for (int k = 0; k < nu; k++)
        MSR_CHECK(u[k].seg != 1 && u[k].blk == u[k].n);
    segs_t z = {0, {0}};
    MSR_CHECK_EQ(check_units(&z, 4, 16, 8, 0, u, 64), 0);
    /* segments that end before P: the walk stops at their end */
    msr_layout_units_t it;
    msr_layout_unit_t x;
    segs_t shrt = {1, {5}};
    msr_layout_units_init(&it, 9, 1, segs_count, &shrt, 2, 16, 8, 0);
    uint64_t seen = 0;
    while (msr_layout_units_next(&it, 0, &x))
        seen += x.n;
    MSR_CHECK_EQ(seen, 5);
}

/* The walk with runs, each run spread back into its units, is the walk
 * without: a run covers only whole buckets inside one segment, never
 * bucket 0, and leaves the last whole bucket to stand alone. */
static void check_runs(const segs_t *g, int size, uint64_t bucket, uint64_t first, int want_runs)
{
    msr_layout_unit_t plain[64];
    int np = check_units(g, size, bucket, first, 0, plain, 64), k = 0, runs = 0;
    msr_layout_units_t it;
    msr_layout_unit_t u;
    msr_layout_units_init(&it, segs_total(g), g->n, segs_count, g, size, bucket, first, 0);
    while (msr_layout_units_next(&it, 1, &u)) {
        runs += u.repeat > 1;
        for (uint64_t r = 0; r < u.repeat; r++, k++) {
            MSR_CHECK(k < np);
            MSR_CHECK_EQ(plain[k].lo, u.lo + r * u.n);
            MSR_CHECK_EQ(plain[k].n, u.n);
            MSR_CHECK_EQ(plain[k].bucket, u.bucket - r);
            MSR_CHECK_EQ(plain[k].seg, u.seg);
            MSR_CHECK_EQ(plain[k].blk, u.blk);
            MSR_CHECK_EQ(plain[k].seg_first, r == 0 && u.seg_first);
        }
    }
    MSR_CHECK_EQ(k, np);
    MSR_CHECK_EQ(runs, want_runs);
}

static void test_units_runs(void)
{
    /* buckets of 4, the first of 2, cut from the end: a run needs three
     * whole buckets in one segment (the last of them stands alone) */
    segs_t three = {2, {14, 2}};  /* [0, 2), then [2, 6) [6, 10) [10, 14) whole */
    segs_t two = {2, {13, 3}};    /* one element short: [2, 6) [6, 10) whole */
    segs_t many = {2, {21, 3}};   /* four whole, [2, 18), and [18, 21) */
    segs_t head = {1, {2}};       /* bucket 0 alone: never in a run */
    segs_t mid = {3, {3, 13, 2}}; /* segment 1 starts inside [0, 4): its run starts at 4 */
    check_runs(&three, 2, 16, 8, 1);
    check_runs(&two, 2, 16, 8, 0);
    check_runs(&many, 3, 16, 8, 1);
    check_runs(&head, 2, 16, 8, 0);
    check_runs(&mid, 2, 16, 8, 1);
    msr_layout_units_t it;
    msr_layout_unit_t u;
    msr_layout_units_init(&it, 24, 2, segs_count, &many, 3, 16, 8, 0);
    MSR_CHECK(msr_layout_units_next(&it, 1, &u) && u.repeat == 1 && u.n == 2);
    MSR_CHECK(msr_layout_units_next(&it, 1, &u) && u.repeat == 3 && u.lo == 2 && u.n == 4);
    MSR_CHECK(msr_layout_units_next(&it, 1, &u) && u.repeat == 1 && u.lo == 14 && u.n == 4);
    MSR_CHECK(msr_layout_units_next(&it, 1, &u) && u.repeat == 1 && u.lo == 18 && u.n == 3);
    msr_layout_units_init(&it, 16, 2, segs_count, &three, 2, 16, 8, 0);
    MSR_CHECK(msr_layout_units_next(&it, 1, &u) && msr_layout_units_next(&it, 1, &u));
    MSR_CHECK(u.repeat == 2 && u.lo == 2 && u.bucket == 3 && u.blk == 2);
}

/* ZeRO-3's visits for one layer and for three, tied (a GPT's head reads
 * the embedding) and untied (a Llama's): every segment once each way,
 * backward from MSR_LAYOUT_ZERO3_BACKWARD on. */
static void test_zero3_visits(void)
{
    int v[MSR_LAYOUT_ZERO3_VISITS(3)];
    const int one[] = {0, 1, 2, 0, 0, 2, 1, 0};
    MSR_CHECK_EQ(MSR_LAYOUT_ZERO3_VISITS(1), 8);
    MSR_CHECK_EQ(msr_layout_zero3_visits(1, 1, v), 8);
    for (int k = 0; k < 8; k++)
        MSR_CHECK_EQ(v[k], one[k]);
    const int three[] = {0, 1, 2, 3, 4, 0, 0, 4, 3, 2, 1, 0};
    MSR_CHECK_EQ(msr_layout_zero3_visits(3, 1, v), MSR_LAYOUT_ZERO3_VISITS(3));
    for (int k = 0; k < MSR_LAYOUT_ZERO3_VISITS(3); k++)
        MSR_CHECK_EQ(v[k], three[k]);
    MSR_CHECK_EQ(MSR_LAYOUT_ZERO3_BACKWARD(3, 1), 6); /* the tied head's 0 */
    const int untied[] = {0, 1, 2, 3, 4, 4, 3, 2, 1, 0};
    MSR_CHECK_EQ(msr_layout_zero3_visits(3, 0, v), 10);
    for (int k = 0; k < 10; k++)
        MSR_CHECK_EQ(v[k], untied[k]);
    MSR_CHECK_EQ(MSR_LAYOUT_ZERO3_BACKWARD(3, 0), 5); /* the final norm and head */
}

static void test_bucket_defaults(void)
{
    size_t b = 0, f = 0;
    msr_layout_bucket_defaults(&b, &f);
    MSR_CHECK_EQ(b, MSR_DP_BUCKET_BYTES);
    MSR_CHECK_EQ(f, MSR_DP_FIRST_BUCKET_BYTES);
    b = 1, f = 1; /* the least given size is kept */
    msr_layout_bucket_defaults(&b, &f);
    MSR_CHECK(b == 1 && f == 1);
}

/* ---- the work table ---- */

static void test_work_table(void)
{
    /* B 2, T 16, C 8, 2 heads, V 12, tp 2 with sp: the table against the
     * sizes parallel/mp.c carved by hand */
    msr_layout_dims_t d = msr_layout_dims(2, 16, 8, 2, 12, 2, 1, 1, MSR_LAYOUT_RECOMPUTE_NONE);
    uint64_t N = 32, Nl = 16, C = 8, Cl = 4, Hl = 16, Vl = 6, T = 16, NHl = 1;
    uint64_t scratch = 3 * Nl * C + 4 * Nl + 3 * N * Cl + N * Cl + 2 * NHl * T * T + 2 * N * Hl;
    MSR_CHECK_EQ(msr_layout_work(&d, MSR_WORK_SCRATCH), scratch);
    MSR_CHECK_EQ(msr_layout_work(&d, MSR_WORK_DQKV), 3 * N * Cl);
    MSR_CHECK_EQ(msr_layout_work(&d, MSR_WORK_DATT), T * T);
    MSR_CHECK_EQ(msr_layout_work(&d, MSR_WORK_KV0), 0); /* no ring without cp */
    MSR_CHECK_EQ(msr_layout_work(&d, MSR_WORK_COUNT), 0);
    uint64_t all =
        scratch + 5 * N * C + 3 * Nl * C + 4 * N * Cl + 2 * N * Hl + T * T + 2 * N * Vl + 4 * N;
    MSR_CHECK_EQ(msr_layout_work_elems(&d), all);
    MSR_CHECK_EQ(msr_layout_work_ints(&d, 3), 0);
    /* the scratch is the same whatever the mode: the most any drops */
    msr_layout_dims_t f = msr_layout_dims(2, 16, 8, 2, 12, 2, 1, 1, MSR_LAYOUT_RECOMPUTE_FULL);
    MSR_CHECK_EQ(msr_layout_work(&f, MSR_WORK_SCRATCH), scratch);
    /* cp 2 (T 8 a rank): the ring's blocks and statistics, its ints */
    msr_layout_dims_t c = msr_layout_dims(2, 16, 8, 2, 12, 2, 0, 2, MSR_LAYOUT_RECOMPUTE_NONE);
    uint64_t Nc = 16;
    MSR_CHECK_EQ(msr_layout_work(&c, MSR_WORK_DKV1), Nc * 2 * Cl);
    MSR_CHECK_EQ(msr_layout_work(&c, MSR_WORK_DELTA), Nc * NHl);
    MSR_CHECK_EQ(msr_layout_work(&c, MSR_WORK_DATT), 8 * 8);
    MSR_CHECK_EQ(msr_layout_work_ints(&c, 3), 2 * 8 + 2 * 3 * Nc);
    uint64_t cs = 3 * Nc * C + 4 * Nc + 3 * Nc * Cl + Nc * Cl + Nc * NHl + 2 * Nc * Hl;
    MSR_CHECK_EQ(msr_layout_work(&c, MSR_WORK_SCRATCH), cs); /* the logsumexp, not T^2 */
    uint64_t call = cs + 5 * Nc * C + 3 * Nc * C + 4 * Nc * Cl + 2 * Nc * Hl + 8 * 8 + 2 * Nc * Vl +
                    4 * Nc + 4 * Nc * 2 * Cl + 3 * Nc * NHl;
    MSR_CHECK_EQ(msr_layout_work_elems(&c), call);
}

/* The chunked head's sizes: a chunk of rows at 0 (none), 1, one under
 * this rank's V/tp, exactly it and one past (clamped: one chunk), and
 * negative; the frame's head keeps 3 N numbers instead of (N, V/tp). */
static void test_head_chunk(void)
{
    msr_layout_dims_t d = msr_layout_dims(2, 16, 8, 2, 12, 2, 0, 1, MSR_LAYOUT_RECOMPUTE_NONE);
    uint64_t N = 32, Vl = 6;
    struct {
        int rows, hc;
    } cases[] = {{0, 0}, {-1, 0}, {1, 1}, {5, 5}, {6, 6}, {7, 6}, {1 << 30, 6}};
    uint64_t whole = msr_layout_work_elems(&d), whole_frame = msr_layout_frame_elems(&d, 2, 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        msr_layout_dims_t c = d;
        msr_layout_head_chunk(&c, cases[i].rows);
        MSR_CHECK_EQ(c.hc, cases[i].hc);
        uint64_t rows = cases[i].hc > 0 ? (uint64_t)cases[i].hc : Vl;
        MSR_CHECK_EQ(msr_layout_work(&c, MSR_WORK_LOGITS), N * rows);
        MSR_CHECK_EQ(msr_layout_work(&c, MSR_WORK_DLOGITS), N * rows);
        uint64_t probs = cases[i].hc > 0 ? 3 * N : N * Vl;
        MSR_CHECK_EQ(msr_layout_head_act(&c, MSR_ACT_PROBS), probs);
        MSR_CHECK_EQ(msr_layout_work_elems(&c), whole - 2 * N * Vl + 2 * N * rows);
        MSR_CHECK_EQ(msr_layout_frame_elems(&c, 2, 1), whole_frame - N * Vl + probs);
        MSR_CHECK_EQ(msr_layout_frame_elems(&c, 2, 0), msr_layout_frame_elems(&d, 2, 0));
    }
}

/* ---- the whole model's and the MoE blocks' work tables ---- */

static void test_whole_work_table(void)
{
    /* B 2, T 16, C 8, V 12: the table against the sizes model/gpt.c carved
     * by hand (14 N C, datt_heads T^2, N V); datt at 1 head and at 2 */
    msr_layout_dims_t d = msr_layout_dims(2, 16, 8, 2, 12, 1, 0, 1, MSR_LAYOUT_RECOMPUTE_NONE);
    uint64_t N = 32, C = 8, T = 16, V = 12;
    MSR_CHECK_EQ(msr_layout_whole_work(&d, MSR_WORK_WHOLE_DRES, 1), N * C);
    MSR_CHECK_EQ(msr_layout_whole_work(&d, MSR_WORK_WHOLE_DQKV, 1), 3 * N * C);
    MSR_CHECK_EQ(msr_layout_whole_work(&d, MSR_WORK_WHOLE_DFCH_GELU, 1), 4 * N * C);
    MSR_CHECK_EQ(msr_layout_whole_work(&d, MSR_WORK_WHOLE_DATT, 1), T * T);
    MSR_CHECK_EQ(msr_layout_whole_work(&d, MSR_WORK_WHOLE_DATT, 2), 2 * T * T);
    MSR_CHECK_EQ(msr_layout_whole_work(&d, MSR_WORK_WHOLE_DLOGITS, 1), N * V);
    /* the last entry and one past: 0 out of range, at either end */
    MSR_CHECK(msr_layout_whole_work(&d, MSR_WORK_WHOLE_COUNT - 1, 1) > 0);
    MSR_CHECK_EQ(msr_layout_whole_work(&d, MSR_WORK_WHOLE_COUNT, 1), 0);
    MSR_CHECK_EQ(msr_layout_whole_work(&d, -1, 1), 0);
    MSR_CHECK_EQ(msr_layout_whole_work_elems(&d, 1), 14 * N * C + T * T + N * V);
    MSR_CHECK_EQ(msr_layout_whole_work_elems(&d, 2), 14 * N * C + 2 * T * T + N * V);
    /* a batch of one sequence: every (N, .) buffer halves, datt does not */
    msr_layout_dims_t one = msr_layout_dims(1, 16, 8, 2, 12, 1, 0, 1, MSR_LAYOUT_RECOMPUTE_NONE);
    MSR_CHECK_EQ(msr_layout_whole_work_elems(&one, 1), 14 * 16 * C + T * T + 16 * V);
}

static void test_moe_capacity(void)
{
    /* F N K / E exactly whole (8 tokens, K 2, E 4: 4) and one token past
     * (4.5: 5); the floor of 1 at no tokens and at a tiny factor */
    MSR_CHECK_EQ(msr_layout_moe_capacity(1.0, 8, 2, 4), 4);
    MSR_CHECK_EQ(msr_layout_moe_capacity(1.0, 9, 2, 4), 5);
    MSR_CHECK_EQ(msr_layout_moe_capacity(1.25, 8, 2, 4), 5);
    MSR_CHECK_EQ(msr_layout_moe_capacity(1.0, 0, 2, 4), 1);
    MSR_CHECK_EQ(msr_layout_moe_capacity(0.01, 1, 1, 4), 1);
    msr_layout_moe_dims_t d = msr_layout_moe_dims(9, 4, 2, 1.0, 8, 32);
    MSR_CHECK(d.cap == 5 && d.rows == 20 && d.N == 9 && d.H == 32);
    /* alone a capacity over the tokens stays the stride (4 tokens, F 4:
     * cap 8) */
    d = msr_layout_moe_dims(4, 4, 2, 4.0, 8, 32);
    MSR_CHECK(d.cap == 8 && d.stride == 8 && d.rows == 32);
    /* under cp the group's capacity; a block's stride min(cap, N): N 9 of
     * 18 tokens, cap 9 = N exactly; N 4 of 8 at F 2: cap 8, stride 4; N 8
     * of 16 at F 1: cap 8 = N */
    d = msr_layout_moe_dims_cp(9, 2, 4, 2, 1.0, 8, 32);
    MSR_CHECK(d.cap == 9 && d.stride == 9 && d.rows == 36 && d.N == 9 && d.cp == 2);
    d = msr_layout_moe_dims_cp(4, 2, 4, 2, 2.0, 8, 32);
    MSR_CHECK(d.cap == 8 && d.stride == 4 && d.rows == 16);
    d = msr_layout_moe_dims_cp(8, 2, 4, 2, 0.9, 8, 32);
    MSR_CHECK(d.cap == 8 && d.stride == 8 && d.rows == 32);
    d = msr_layout_moe_dims_cp(9, 1, 4, 2, 1.0, 8, 32); /* cp 1: msr_layout_moe_dims */
    MSR_CHECK(d.cap == 5 && d.stride == 5 && d.rows == 20);
}

static void test_moe_work_table(void)
{
    /* N 9, E 4, K 2, C 8, H 32, rows 20: the table against the sizes
     * model/moe.c allocated by hand */
    msr_layout_moe_dims_t d = msr_layout_moe_dims(9, 4, 2, 1.0, 8, 32);
    uint64_t N = 9, E = 4, K = 2, C = 8, H = 32, rows = 20;
    MSR_CHECK_EQ(msr_layout_moe_work(&d, MSR_MOE_WORK_PROBS), N * E);
    MSR_CHECK_EQ(msr_layout_moe_work(&d, MSR_MOE_WORK_POS), N * K);
    MSR_CHECK_EQ(msr_layout_moe_work(&d, MSR_MOE_WORK_FRAC), E);
    MSR_CHECK_EQ(msr_layout_moe_work(&d, MSR_MOE_WORK_FCH_G), rows * H);
    MSR_CHECK_EQ(msr_layout_moe_work(&d, MSR_MOE_WORK_COMB), rows * C);
    MSR_CHECK_EQ(msr_layout_moe_work(&d, MSR_MOE_WORK_SEND), rows * C);
    MSR_CHECK_EQ(msr_layout_moe_work(&d, MSR_MOE_WORK_DPROBS), N * E);
    MSR_CHECK_EQ(msr_layout_moe_work(&d, MSR_MOE_WORK_LOAD), E);
    MSR_CHECK_EQ(msr_layout_moe_work(&d, MSR_MOE_WORK_RDX), N * C);
    MSR_CHECK_EQ(msr_layout_moe_work(&d, MSR_MOE_WORK_GCHOICE), 0); /* cp 1 */
    MSR_CHECK_EQ(msr_layout_moe_work(&d, MSR_MOE_WORK_COUNT), 0);
    msr_layout_moe_dims_t dc = msr_layout_moe_dims_cp(9, 3, 4, 2, 1.0, 8, 32);
    MSR_CHECK_EQ(msr_layout_moe_work(&dc, MSR_MOE_WORK_GCHOICE), 3 * N * K);
    MSR_CHECK_EQ(msr_layout_moe_work_size(MSR_MOE_WORK_GCHOICE, 2), 4);
    MSR_CHECK_EQ(msr_layout_moe_work(&d, -1), 0);
    /* the element sizes: floats the caller's width, the others their type's */
    MSR_CHECK_EQ(msr_layout_moe_work_size(MSR_MOE_WORK_PROBS, 2), 2);
    MSR_CHECK_EQ(msr_layout_moe_work_size(MSR_MOE_WORK_CHOICE, 2), 4);
    MSR_CHECK_EQ(msr_layout_moe_work_size(MSR_MOE_WORK_FRAC, 2), 8);
    MSR_CHECK_EQ(msr_layout_moe_work_size(MSR_MOE_WORK_USED, 2), 4);
    MSR_CHECK_EQ(msr_layout_moe_work_size(MSR_MOE_WORK_LOAD, 2), 8);
    MSR_CHECK_EQ(msr_layout_moe_work_size(MSR_MOE_WORK_RDX, 4), 4);
    /* the sum against the planner's old formula, floats of 4 bytes and 2,
     * with the router's gradient and without, at 0 held blocks and 3 */
    for (uint64_t fw = 2; fw <= 4; fw += 2) {
        uint64_t slot = (N * E + N * K) * fw + 2 * N * K * 4 + E * 8 +
                        (2 * rows * C + 2 * rows * H) * fw + E * 4;
        uint64_t once = (3 * rows * C + 2 * rows * H + N * K + N * E) * fw + 4 * E * 8;
        MSR_CHECK_EQ(msr_layout_moe_work_bytes(&d, 3, 2, 4, 0, fw), 3 * 2 * slot + once);
        MSR_CHECK_EQ(msr_layout_moe_work_bytes(&d, 3, 2, 4, 1, fw),
                     3 * 2 * slot + once + N * C * fw);
        MSR_CHECK_EQ(msr_layout_moe_work_bytes(&d, 0, 2, 4, 0, fw), once);
    }
}

static const msr_test_t tests[] = {
    {"buckets_at_bounds", test_buckets_at_bounds, 10},
    {"bucket_elems", test_bucket_elems, 10},
    {"replicated_threshold", test_replicated_threshold, 10},
    {"blocks", test_blocks, 10},
    {"units_cut", test_units_cut, 10},
    {"units_runs", test_units_runs, 10},
    {"work_table", test_work_table, 10},
    {"head_chunk", test_head_chunk, 10},
    {"zero3_visits", test_zero3_visits, 10},
    {"bucket_defaults", test_bucket_defaults, 10},
    {"whole_work_table", test_whole_work_table, 10},
    {"moe_capacity", test_moe_capacity, 10},
    {"moe_work_table", test_moe_work_table, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
