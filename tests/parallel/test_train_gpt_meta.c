/* The settings text a resume reads from a checkpoint
 * (programs/train_gpt/train_gpt_elastic.c): the global batch's cap at
 * exactly TRAIN_GPT_GLOBAL_BATCH_MAX and one past it, texts that name
 * none; the older wording of the data's size. The elastic resume itself
 * runs end to end in train_gpt_elastic.sh. */
#include <stdio.h>

#include "programs/train_gpt/train_gpt.h"
#include "tests/runner.h"

/* meta as train_gpt_meta writes it, with the global batch text g */
static int64_t read_g(const char *g)
{
    char meta[400];
    snprintf(meta, sizeof meta,
             "layers 2 channels 32 heads 4 seq 16 vocab 256; global batch %s; seed 1; lr 0.003 "
             "warmup 0 weight-decay 0 grad-clip 1; data synthetic (1048576 tokens)",
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

/* older TEXT: train_gpt_meta_older's text for TEXT, or "" when it has none */
static const char *older(const char *meta, char *buf, size_t len)
{
    return train_gpt_meta_older(meta, buf, len) ? buf : "";
}

/* The settings text as checkpoints saved before it counted the data in
 * tokens wrote it: "(N bytes)" for the data's "(N tokens)", only there */
static void test_meta_older(void)
{
    char b[200];
    const char *head = "layers 2 channels 32 heads 4 seq 16 vocab 256; global batch 8; seed 1; "
                       "lr 0.003 warmup 0 weight-decay 0 grad-clip 1; data ";
    char meta[400], want[400];
    snprintf(meta, sizeof meta, "%sgenerated corpus (seed 1, 4096 bytes) (4096 tokens)", head);
    snprintf(want, sizeof want, "%sgenerated corpus (seed 1, 4096 bytes) (4096 bytes)", head);
    MSR_CHECK_STR(older(meta, b, sizeof b), want);
    snprintf(meta, sizeof meta, "%sd/t (2 tokens).bin (300 tokens); epochs; experts 4", head);
    snprintf(want, sizeof want, "%sd/t (2 tokens).bin (300 bytes); epochs; experts 4", head);
    MSR_CHECK_STR(older(meta, b, sizeof b), want);
    MSR_CHECK_STR(older("layers 2; data x (3 bytes)", b, sizeof b), "");  /* already */
    MSR_CHECK_STR(older("layers 2 (3 tokens); seed 1", b, sizeof b), ""); /* no data */
    /* the older text needs one byte less: it fits len at its length + 1, not at its length */
    const char *m = "x; data y (7 tokens)"; /* older: "x; data y (7 bytes)", 19 bytes */
    MSR_CHECK_STR(older(m, b, 20), "x; data y (7 bytes)");
    MSR_CHECK_STR(older(m, b, 19), "");
}

static const msr_test_t tests[] = {
    {"global_batch_cap", test_global_batch_cap, 10},
    {"meta_older", test_meta_older, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
