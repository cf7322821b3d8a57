/* The layout's bucket and shard cut (layout/layout.h) at its bounds: the
 * first bucket exactly full and one past, the last bucket short, a
 * bucket's elements found from any of its positions, the ZeRO threshold
 * at exactly its size and one under, and the blocks of an uneven shard. */
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

static const msr_test_t tests[] = {
    {"buckets_at_bounds", test_buckets_at_bounds, 10},
    {"bucket_elems", test_bucket_elems, 10},
    {"replicated_threshold", test_replicated_threshold, 10},
    {"blocks", test_blocks, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
