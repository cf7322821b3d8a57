/* Token files (llm.c's .bin layout) at their header's bounds, --vocab,
 * and the epochs' order: a permutation per epoch, dp shards disjoint and
 * covering, a resume on another world size reading what a run never
 * stopped reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "model/data.h"
#include "tests/runner.h"

static char path[64];

/* Writes a token file: the header's magic, version and count, then n
 * tokens of `width` bytes (little-endian). Returns the path. */
static const char *write_tokens(int32_t magic, int32_t version, int32_t count, const uint32_t *tok,
                                size_t n, int width, size_t header_bytes)
{
    snprintf(path, sizeof path, "/tmp/msrun_tokens_%d.bin", (int)getpid());
    FILE *f = fopen(path, "wb");
    MSR_CHECK(f != NULL);
    unsigned char head[MSR_TOKENS_HEADER_BYTES] = {0};
    int32_t fields[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++)
            head[4 * i + b] = (unsigned char)((uint32_t)fields[i] >> (8 * b));
    MSR_CHECK(fwrite(head, 1, header_bytes, f) == header_bytes);
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < width; b++)
            MSR_CHECK(fputc((int)((tok[i] >> (8 * b)) & 0xff), f) != EOF);
    MSR_CHECK(fclose(f) == 0);
    return path;
}

static void check_refused(const char *p, const char *words)
{
    msr_dataset_t *ds = NULL;
    msr_err_clear();
    MSR_CHECK_STATUS(msr_dataset_load(p, &ds), MSR_ERR_INVALID_ARG);
    MSR_CHECK(ds == NULL);
    MSR_CHECK_MSG(strstr(msr_err_msg(), words) != NULL, "'%s' lacks '%s'", msr_err_msg(), words);
}

/* The header at its bounds: short, bad version, counts off by one, 0. */
static void test_header_bounds(void)
{
    uint32_t tok[5] = {1, 2, 3, 4, 5};
    /* one byte short of the header, then the whole header with no token */
    check_refused(write_tokens(MSR_TOKENS_MAGIC, 1, 5, tok, 0, 2, 1023), "short of the 1024-byte");
    check_refused(write_tokens(MSR_TOKENS_MAGIC, 1, 0, tok, 0, 2, 1024), "counts 0 tokens");
    check_refused(write_tokens(MSR_TOKENS_MAGIC, 1, -1, tok, 5, 2, 1024), "counts -1 tokens");
    /* versions 0 and 3 around 1 and 2 */
    check_refused(write_tokens(MSR_TOKENS_MAGIC, 0, 5, tok, 5, 2, 1024), "version 0");
    check_refused(write_tokens(MSR_TOKENS_MAGIC, 3, 5, tok, 5, 2, 1024), "version 3");
    /* a count one more and one less than the tokens there */
    check_refused(write_tokens(MSR_TOKENS_MAGIC, 1, 6, tok, 5, 2, 1024), "counts 6 tokens");
    check_refused(write_tokens(MSR_TOKENS_MAGIC, 1, 4, tok, 5, 2, 1024), "counts 4 tokens");
    check_refused(write_tokens(MSR_TOKENS_MAGIC, 2, 5, tok, 5, 2, 1024), "of 4 bytes");
    /* another magic: the file is bytes, header included */
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_load(write_tokens(MSR_TOKENS_MAGIC + 1, 1, 5, tok, 5, 2, 1024), &ds));
    MSR_CHECK_EQ(ds->width, 1);
    MSR_CHECK_EQ(ds->size, 1024 + 10);
    MSR_CHECK_EQ(ds->vocab, 256);
    msr_dataset_destroy(ds);
    /* three bytes: too short for a magic, bytes */
    FILE *f = fopen(path, "wb");
    MSR_CHECK(f != NULL && fwrite("\x58\xd4\x34", 1, 3, f) == 3 && fclose(f) == 0);
    MSR_CHECK_OK(msr_dataset_load(path, &ds));
    MSR_CHECK_EQ(ds->width, 1);
    msr_dataset_destroy(ds);
    unlink(path);
}

/* uint16 and uint32 tokens read back, V by default and by --vocab. */
static void test_widths_and_vocab(void)
{
    uint32_t tok[6] = {0, 127, 5, 65535, 9, 3};
    msr_dataset_t *ds = NULL;
    for (int version = 1; version <= 2; version++) {
        int width = version == 1 ? 2 : 4;
        tok[3] = 65535;
        MSR_CHECK_OK(
            msr_dataset_load(write_tokens(MSR_TOKENS_MAGIC, version, 6, tok, 6, width, 1024), &ds));
        MSR_CHECK_EQ(ds->width, width);
        MSR_CHECK_EQ(ds->size, 6);
        for (size_t i = 0; i < 6; i++)
            MSR_CHECK_EQ(msr_dataset_token(ds, i), (int)tok[i]);
        MSR_CHECK_EQ(ds->vocab, 65536); /* 65535 + 1, a multiple of 128 */
        /* --vocab at the largest token + 1, then one less: refused naming
         * token 3 and its byte offset */
        MSR_CHECK_OK(msr_dataset_vocab(ds, 65536));
        msr_err_clear();
        MSR_CHECK_STATUS(msr_dataset_vocab(ds, 65535), MSR_ERR_INVALID_ARG);
        char want[96];
        snprintf(want, sizeof want, "token 3 (byte offset %d) is 65535", 1024 + 3 * width);
        MSR_CHECK_MSG(strstr(msr_err_msg(), want) != NULL, "'%s' lacks '%s'", msr_err_msg(), want);
        MSR_CHECK_EQ(ds->vocab, 65536); /* unchanged */
        MSR_CHECK_STATUS(msr_dataset_vocab(ds, 65537), MSR_ERR_INVALID_ARG);
        MSR_CHECK_STATUS(msr_dataset_vocab(ds, 0), MSR_ERR_INVALID_ARG);
        msr_dataset_destroy(ds);
    }
    /* the default V's rounding at its bound: largest 127 -> 128, 128 -> 256 */
    tok[3] = 127;
    MSR_CHECK_OK(msr_dataset_load(write_tokens(MSR_TOKENS_MAGIC, 1, 6, tok, 6, 2, 1024), &ds));
    MSR_CHECK_EQ(ds->vocab, 128);
    msr_dataset_destroy(ds);
    tok[3] = 128;
    MSR_CHECK_OK(msr_dataset_load(write_tokens(MSR_TOKENS_MAGIC, 1, 6, tok, 6, 2, 1024), &ds));
    MSR_CHECK_EQ(ds->vocab, 256);
    msr_dataset_destroy(ds);
    /* a uint32 token past the model's largest V: V over 65536, which the
     * model refuses; --vocab names the token */
    tok[3] = 65536;
    MSR_CHECK_OK(msr_dataset_load(write_tokens(MSR_TOKENS_MAGIC, 2, 6, tok, 6, 4, 1024), &ds));
    MSR_CHECK(ds->vocab > 65536);
    MSR_CHECK_STATUS(msr_dataset_vocab(ds, 65536), MSR_ERR_INVALID_ARG);
    msr_dataset_destroy(ds);
    /* bytes: --vocab below a byte there is refused, at it accepted */
    FILE *f = fopen(path, "wb");
    MSR_CHECK(f != NULL && fwrite("abcz", 1, 4, f) == 4 && fclose(f) == 0);
    MSR_CHECK_OK(msr_dataset_load(path, &ds));
    MSR_CHECK_STATUS(msr_dataset_vocab(ds, 'z'), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_err_msg(), "token 3 (byte offset 3)") != NULL);
    MSR_CHECK_OK(msr_dataset_vocab(ds, 'z' + 1));
    msr_dataset_destroy(ds);
    unlink(path);
}

/* Every window once per epoch, for 1, 2, primes, powers of two and one
 * past; the order depends on the seed and the epoch, and only on them. */
static void test_perm(void)
{
    static const uint64_t sizes[] = {1,  2,  3,  4,  5,  7,    8,    9,    13,   16,  17,
                                     31, 32, 33, 64, 65, 1021, 1024, 1025, 4096, 4097};
    unsigned char *seen = malloc(4097);
    MSR_CHECK(seen != NULL);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint64_t n = sizes[s];
        for (uint64_t epoch = 0; epoch < 3; epoch++) {
            memset(seen, 0, n);
            uint64_t moved = 0;
            for (uint64_t i = 0; i < n; i++) {
                uint64_t j = msr_sampler_perm(99, epoch, n, i);
                MSR_CHECK_MSG(j < n && !seen[j], "n %llu epoch %llu: %llu -> %llu twice or out",
                              (unsigned long long)n, (unsigned long long)epoch,
                              (unsigned long long)i, (unsigned long long)j);
                seen[j] = 1;
                moved += j != i;
                MSR_CHECK_EQ(j, msr_sampler_perm(99, epoch, n, i));
            }
            if (n >= 16) /* shuffled, not the identity */
                MSR_CHECK(moved > n / 2);
        }
        if (n >= 16) { /* another epoch or seed: another order */
            int diff_epoch = 0, diff_seed = 0;
            for (uint64_t i = 0; i < n; i++) {
                diff_epoch += msr_sampler_perm(99, 0, n, i) != msr_sampler_perm(99, 1, n, i);
                diff_seed += msr_sampler_perm(99, 0, n, i) != msr_sampler_perm(98, 0, n, i);
            }
            MSR_CHECK(diff_epoch > (int)n / 2 && diff_seed > (int)n / 2);
        }
    }
    free(seen);
    /* a large domain needs no table */
    uint64_t big = (UINT64_C(1) << 40) + 7;
    MSR_CHECK(msr_sampler_perm(1, 5, big, big - 1) < big);
}

/* A data set of n bytes in memory (tokens 0..n-1 mod 256), read in epochs. */
static msr_dataset_t mem_dataset(const uint8_t *bytes, size_t n)
{
    msr_dataset_t ds = {.bytes = bytes, .size = n, .width = 1, .vocab = 256, .epochs = 1};
    return ds;
}

/* Windows start at multiples of T; an epoch reads each once; dp shards of a
 * step are disjoint and the steps of an epoch cover it; a run resumed at
 * any step on another dp reads what a run never stopped reads. */
static void test_epoch_sampling(void)
{
    enum { T = 4, W = 37, N = W * T + 3 }; /* 3 tokens past the last window's */
    static uint8_t bytes[N];
    for (int i = 0; i < N; i++)
        bytes[i] = (uint8_t)i;
    msr_dataset_t ds = mem_dataset(bytes, N);
    MSR_CHECK_EQ(msr_sampler_windows(N, T), W);
    MSR_CHECK_EQ(msr_sampler_windows(T + 1, T), 1);
    MSR_CHECK_EQ(msr_sampler_windows(2 * T, T), 1);
    MSR_CHECK_EQ(msr_sampler_windows(2 * T + 1, T), 2);
    /* the reference: one process, 3 epochs of samples k = 0.. */
    enum { K = 3 * W };
    static int ref_in[K * T], ref_tg[K * T];
    msr_sampler_t s0 = {7, 0};
    msr_sampler_fill(&s0, &ds, T, 0, K, ref_in, ref_tg);
    for (int e = 0; e < 3; e++) {
        int seen[W] = {0};
        for (int k = e * W; k < (e + 1) * W; k++) {
            int start = ref_in[k * T];
            MSR_CHECK(start % T == 0 && start / T < W);
            seen[start / T]++;
            for (int t = 0; t < T; t++) {
                MSR_CHECK_EQ(ref_in[k * T + t], start + t);
                MSR_CHECK_EQ(ref_tg[k * T + t], start + t + 1);
            }
        }
        for (int w = 0; w < W; w++)
            MSR_CHECK_MSG(seen[w] == 1, "epoch %d: window %d read %d times", e, w, seen[w]);
    }
    /* dp ranks x micro-batches of a step, as parallel/train.c reads them:
     * rank r's micro-batch m reads rows [(r * accum + m) * B, + B) */
    static const int dps[] = {1, 2, 3, 5};
    for (size_t d = 0; d < sizeof dps / sizeof dps[0]; d++) {
        int dp = dps[d], B = 2, accum = 2, G = B * accum * dp;
        msr_sampler_t s = {7, 0};
        int in[B * T], tg[B * T];
        for (; s.position + (uint64_t)G <= K; s.position += (uint64_t)G) {
            int step_seen[K] = {0};
            for (int r = 0; r < dp; r++)
                for (int m = 0; m < accum; m++) {
                    uint64_t first = ((uint64_t)r * accum + (uint64_t)m) * (uint64_t)B;
                    msr_sampler_fill(&s, &ds, T, first, B, in, tg);
                    for (int b = 0; b < B; b++) {
                        uint64_t k = s.position + first + (uint64_t)b;
                        MSR_CHECK(memcmp(in + b * T, ref_in + k * T, sizeof(int) * T) == 0);
                        MSR_CHECK(memcmp(tg + b * T, ref_tg + k * T, sizeof(int) * T) == 0);
                        step_seen[k]++;
                    }
                }
            for (uint64_t k = s.position; k < s.position + (uint64_t)G; k++)
                MSR_CHECK_EQ(step_seen[k], 1); /* disjoint, covering the step */
        }
    }
    /* resumed mid-epoch (position 10, of a dp 2 run with G 10) on dp 3
     * (G stays 10: micro-batch and accumulation change): the same rows */
    msr_sampler_t resumed = {7, 10};
    int in[10 * T], tg[10 * T];
    msr_sampler_fill(&resumed, &ds, T, 0, 10, in, tg);
    MSR_CHECK(memcmp(in, ref_in + 10 * T, sizeof in) == 0);
    MSR_CHECK(memcmp(tg, ref_tg + 10 * T, sizeof tg) == 0);
    /* the smallest data set: one window, read every time */
    msr_dataset_t one = mem_dataset(bytes, T + 1);
    msr_sampler_fill(&s0, &one, T, 5, 1, in, tg);
    MSR_CHECK(in[0] == 0 && tg[T - 1] == T);
}

/* With replacement stays the default and unchanged: windows anywhere. */
static void test_replacement_default(void)
{
    static uint8_t bytes[200];
    for (int i = 0; i < 200; i++)
        bytes[i] = (uint8_t)i;
    msr_dataset_t ds = mem_dataset(bytes, 200);
    ds.epochs = 0;
    msr_sampler_t s = {7, 0};
    int odd = 0;
    for (uint64_t k = 0; k < 100; k++) {
        size_t o = msr_sampler_start(&s, &ds, 4, k);
        MSR_CHECK_EQ(o, msr_sampler_offset(&s, 200, 4, k));
        odd += o % 4 != 0;
    }
    MSR_CHECK(odd > 30);
}

static const msr_test_t tests[] = {
    {"header_bounds", test_header_bounds, 10},
    {"widths_and_vocab", test_widths_and_vocab, 10},
    {"perm", test_perm, 20},
    {"epoch_sampling", test_epoch_sampling, 10},
    {"replacement_default", test_replacement_default, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
