/* The global batch a resume reads from a checkpoint's settings text
 * (programs/train_gpt/train_gpt_elastic.c): its cap at exactly
 * TRAIN_GPT_GLOBAL_BATCH_MAX and one past it, and texts that name none. */
#include <stdio.h>

#include "programs/train_gpt/train_gpt.h"
#include "tests/runner.h"

/* meta as train_gpt_meta writes it, with the global batch text g */
static int64_t read_g(const char *g)
{
    char meta[400];
    snprintf(meta, sizeof meta,
             "layers 2 channels 32 heads 4 seq 16 vocab 256; global batch %s; seed 1; lr 0.003 "
             "warmup 0 weight-decay 0 grad-clip 1; data synthetic (1048576 bytes)",
             g);
    return train_gpt_meta_global_batch(meta);
}

static void test_global_batch_cap(void)
{
    MSR_CHECK_EQ(TRAIN_GPT_GLOBAL_BATCH_MAX, 1 << 30);
    MSR_CHECK_EQ(read_g("1073741824"), (int64_t)1 << 30); /* the bound */
    MSR_CHECK_EQ(read_g("1073741825"), 0);                /* one past */
    MSR_CHECK_EQ(read_g("1"), 1);
    MSR_CHECK_EQ(read_g("6"), 6);
    MSR_CHECK_EQ(read_g("0"), 0);
    MSR_CHECK_EQ(read_g("18446744073709551617"), 0); /* past 2^64: strtoull's ERANGE */
    MSR_CHECK_EQ(read_g("-1"), 0);
    MSR_CHECK_EQ(read_g("6x"), 0);
    MSR_CHECK_EQ(read_g(""), 0);
    MSR_CHECK_EQ(train_gpt_meta_global_batch("layers 2 channels 32; seed 1"), 0);
    MSR_CHECK_EQ(train_gpt_meta_global_batch("x; global batch 8"), 0); /* no ';' after */
}

static const msr_test_t tests[] = {
    {"global_batch_cap", test_global_batch_cap, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
