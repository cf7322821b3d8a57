/* The chunked head's online softmax (model/layers.h msr_vocab_fold): a
 * row's logits cut into chunks, each chunk's maximum and sums of
 * exponentials (msr_vocab_max, msr_vocab_exp_sums) folded in order, give
 * the whole row's maximum exactly and its sum and target logit to float
 * rounding, whatever the cut (one chunk, chunks that do not divide the
 * row, a row a chunk), with the largest logit first, last and in the
 * middle; the first fold is a copy; a fold with a smaller maximum leaves
 * the running one, a larger one rescales the running sum. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "tests/runner.h"

enum { N = 3, V = 37 };

/* Row n's logits: row 0 rising (largest last), row 1 falling (largest
 * first), row 2 a peak in the middle; targets 36, 0 and 17. */
static void make_rows(float *l, int *tgt)
{
    for (int i = 0; i < V; i++) {
        l[0 * V + i] = 0.25f * (float)i - 3.0f;
        l[1 * V + i] = 4.0f - 0.3f * (float)i;
        l[2 * V + i] = (float)(i == 17 ? 9.5 : sin(0.7 * i));
    }
    tgt[0] = 36;
    tgt[1] = 0;
    tgt[2] = 17;
}

/* The folds of the chunks of `rows` logits a chunk against the whole row's. */
static void check_cut(const float *l, const int *tgt, int rows)
{
    float M[N], S[N], Z[N], m[N], red[2 * N], part[N * V], probs[N * V];
    for (int v0 = 0, c = 0; v0 < V; v0 += rows, c++) {
        int n = V - v0 < rows ? V - v0 : rows;
        for (int r = 0; r < N; r++)
            memcpy(part + (size_t)r * n, l + (size_t)r * V + v0, (size_t)n * sizeof(float));
        msr_vocab_max(m, part, N, n);
        msr_vocab_exp_sums(probs, red, part, m, tgt, v0, N, n);
        msr_vocab_fold(M, S, Z, m, red, N, c == 0);
    }
    float wm[N], wred[2 * N];
    msr_vocab_max(wm, l, N, V);
    msr_vocab_exp_sums(probs, wred, l, wm, tgt, 0, N, V);
    for (int r = 0; r < N; r++) {
        MSR_CHECK(M[r] == wm[r]);
        MSR_CHECK(fabsf(S[r] - wred[r]) <= 4e-6f * wred[r]);
        MSR_CHECK(Z[r] == wred[N + r]); /* one chunk holds the target: 0 + z */
        if (rows >= V)                  /* one chunk: a copy, bitwise */
            MSR_CHECK(S[r] == wred[r]);
    }
}

static void test_cuts(void)
{
    float l[N * V];
    int tgt[N];
    make_rows(l, tgt);
    int cuts[] = {V, V + 1, V - 1, 10, 2, 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        check_cut(l, tgt, cuts[i]);
}

/* One row, by hand: the copy, a smaller maximum, a larger one. */
static void test_rescale(void)
{
    float M = 0, S = 0, Z = 0;
    float m = 2.0f, red[2] = {1.5f, 0.25f};
    msr_vocab_fold(&M, &S, &Z, &m, red, 1, 1);
    MSR_CHECK(M == 2.0f && S == 1.5f && Z == 0.25f);
    m = 1.0f; /* smaller: s e^(1 - 2) added, M kept */
    red[0] = 2.0f;
    red[1] = 0.0f;
    msr_vocab_fold(&M, &S, &Z, &m, red, 1, 0);
    MSR_CHECK(M == 2.0f && Z == 0.25f);
    MSR_CHECK(S == 1.5f + 2.0f * expf(-1.0f));
    m = 3.0f; /* larger: the running sum rescaled by e^(2 - 3) */
    red[0] = 1.0f;
    red[1] = 0.5f;
    float want = S * expf(-1.0f) + 1.0f;
    msr_vocab_fold(&M, &S, &Z, &m, red, 1, 0);
    MSR_CHECK(M == 3.0f && S == want && Z == 0.75f);
}

static const msr_test_t tests[] = {
    {"cuts", test_cuts, 10},
    {"rescale", test_rescale, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
