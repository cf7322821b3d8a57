/* Attention's bf16 operands rounded where they are written (model/layers.h,
 * msr_products_operand and _again): msr_products_sgemm takes a handed-over
 * operand A, transposed or not, only when it is that packed array of that
 * size or a block of it inside it (to its last element, not one past),
 * and only for the next product, or once more after
 * msr_products_operand_again; the attention kernels that round the softmax
 * rows (forward) and their gradient (backward) as they write them give,
 * bitwise, what each product rounding its own operands gives; an operand
 * held (msr_products_hold) is taken, as A or B, for every product whose
 * storage lies inside it until it is released, with the bits of the
 * product rounding it itself. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/bf16.h"
#include "model/layers.h"
#include "model/rng.h"
#include "tests/runner.h"

static float *random_floats(size_t n, uint64_t s)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2.0 * msr_rng_open01(msr_rng_u64(7, s, i)) - 1.0);
    return x;
}

enum { M = 23, K = 19, NC = 13 }; /* odd: no kernel's multiple */

/* C (M,NC) = op(A) B through p from zero, op(A) (M,K) with A stored (M,K)
 * or, transposed, (K,M) */
static void product(msr_products_t *p, int trans_a, const float *A, int lda, const float *B,
                    float *C)
{
    memset(C, 0, (size_t)M * NC * sizeof *C);
    msr_products_sgemm(p, trans_a, 0, M, NC, K, 1.0f, A, lda, B, NC, 0.0f, C, NC);
}

/* Whether C is the product of a garbage A (0x3f80: every element 1.0), so
 * every row the column sums of B */
static int took_garbage(const float *C, const float *B)
{
    for (int j = 0; j < NC; j++) {
        float s = 0;
        for (int k = 0; k < K; k++)
            s += msr_f32_from_bf16(msr_bf16_from_f32(B[(size_t)k * NC + j]));
        for (int i = 0; i < M; i++)
            if (fabsf(C[(size_t)i * NC + j] - s) > 1e-4f * (1.0f + fabsf(s)))
                return 0;
    }
    return 1;
}

/* Hands p the operand A (n elements) as ones; false when p offers none */
static int hand_ones(msr_products_t *p, const float *A, size_t n)
{
    uint16_t *a16 = msr_products_operand(p, A, n);
    for (size_t i = 0; a16 != NULL && i < n; i++)
        a16[i] = 0x3f80;
    return a16 != NULL;
}

/* The handed-over operand is taken when it is A's (the array handed over
 * holds ones to tell), transposed or not, not when A is another array,
 * another size or not packed, and not after another product; _again hands
 * it over once more only after a product that took it. */
static void check_sgemm_handover(int trans_a)
{
    size_t na = (size_t)M * K;
    int lda = trans_a ? M : K;
    float *A = random_floats(na + M, 1), *B = random_floats((size_t)K * NC, 2);
    float *want = malloc((size_t)M * NC * sizeof *want),
          *got = malloc((size_t)M * NC * sizeof *got);
    msr_products_t *p = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    product(p, trans_a, A, lda, B, want); /* rounds A itself; grows the scratch */
    MSR_CHECK(!took_garbage(want, B));
    MSR_CHECK(hand_ones(p, A, na));
    product(p, trans_a, A, lda, B, got);
    MSR_CHECK_MSG(took_garbage(got, B), "trans_a %d: the handover was not taken", trans_a);
    /* taken once more, after a product that took it */
    MSR_CHECK(msr_products_operand_again(p, A, na));
    product(p, trans_a, A, lda, B, got);
    MSR_CHECK(took_garbage(got, B));
    /* not after a product that rounded its own A (it overwrote a) */
    product(p, trans_a, A + 1, lda, B, got);
    MSR_CHECK(!msr_products_operand_again(p, A + 1, na));
    MSR_CHECK(!msr_products_operand_again(p, A, na));
    product(p, trans_a, A, lda, B, got);
    MSR_CHECK(memcmp(got, want, (size_t)M * NC * sizeof *got) == 0);
    /* not for another array, size, or a row stride that is not packed */
    MSR_CHECK(hand_ones(p, A, na));
    MSR_CHECK(!msr_products_operand_again(p, A, na)); /* nothing taken yet */
    product(p, trans_a, A + 1, lda, B, got);
    MSR_CHECK(!took_garbage(got, B));
    MSR_CHECK(hand_ones(p, A, na - 1));
    product(p, trans_a, A, lda, B, got);
    MSR_CHECK(memcmp(got, want, (size_t)M * NC * sizeof *got) == 0);
    MSR_CHECK(hand_ones(p, A, na));
    memset(got, 0, (size_t)M * NC * sizeof *got);
    msr_products_sgemm(p, trans_a, 0, M, NC, K, 1.0f, A, lda + 1, B, NC, 0.0f, got, NC);
    MSR_CHECK(!took_garbage(got, B));
    MSR_CHECK(!msr_products_operand_again(NULL, A, na));
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p);
    free(A), free(B), free(want), free(got);
}

/* A block of a handed-over (R, L) array: op(A)'s storage (ar, ac) at row 1,
 * column 2, rows L apart, is taken when it lies inside the n elements
 * handed over (its last element the last of them: at the bound), not when
 * it ends one past them; the product of the block taken gives the bits of
 * the product rounding it itself. */
static void check_block_handover(int trans_a)
{
    enum { L = (M > K ? M : K) + 3, R = L + 2 };
    int ar = trans_a ? K : M, ac = trans_a ? M : K;
    size_t at = (size_t)L + 2, end = at + (size_t)(ar - 1) * L + (size_t)ac;
    float *A = random_floats((size_t)R * L, 7), *B = random_floats((size_t)K * NC, 8);
    float *want = malloc((size_t)M * NC * sizeof *want),
          *got = malloc((size_t)M * NC * sizeof *got);
    msr_products_t *p = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    product(p, trans_a, A + at, L, B, want);
    MSR_CHECK(!took_garbage(want, B));
    MSR_CHECK(hand_ones(p, A, end)); /* the block ends at the last element */
    product(p, trans_a, A + at, L, B, got);
    MSR_CHECK_MSG(took_garbage(got, B), "trans_a %d: the block was not taken", trans_a);
    MSR_CHECK(msr_products_operand_again(p, A, end));
    product(p, trans_a, A + at, L, B, got);
    MSR_CHECK(took_garbage(got, B));
    MSR_CHECK(hand_ones(p, A, end - 1)); /* one past */
    product(p, trans_a, A + at, L, B, got);
    MSR_CHECK(memcmp(got, want, (size_t)M * NC * sizeof *got) == 0);
    /* the block's own rounding, handed over, gives the bits of the product
     * rounding it */
    uint16_t *a16 = msr_products_operand(p, A, (size_t)R * L);
    MSR_CHECK(a16 != NULL);
    for (size_t i = 0; i < (size_t)R * L; i++)
        a16[i] = msr_bf16_from_f32(A[i]);
    product(p, trans_a, A + at, L, B, got);
    MSR_CHECK(memcmp(got, want, (size_t)M * NC * sizeof *got) == 0);
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p);
    free(A), free(B), free(want), free(got);
}

/* A held (R, L) array: op(A)'s storage (ar, ac) at row 1, column 2, rows
 * L apart, and B (K, NC) at row 1, column 0 with row stride L, are taken
 * from the held rounding while they lie inside the n elements held (the
 * last element at the bound), not one past them, and not after release;
 * the held array is changed after hold to tell (the held rounding is the
 * old one), and the held product gives the bits of the product rounding
 * it itself. */
static void check_hold(int trans_a)
{
    enum { L = (M > K ? M : K) + (NC > 3 ? NC : 3) + 3, R = L + 2 };
    int ar = trans_a ? K : M, ac = trans_a ? M : K;
    size_t at = (size_t)L + 2, end = at + (size_t)(ar - 1) * L + (size_t)ac;
    size_t bend = (size_t)L + (size_t)(K - 1) * L + NC;
    size_t n = (size_t)R * L, nc = (size_t)M * NC;
    float *A = random_floats(n, 9), *old = malloc(n * sizeof *old);
    float *want = malloc(nc * sizeof *want), *got = malloc(nc * sizeof *got);
    float *now = malloc(nc * sizeof *now);
    memcpy(old, A, n * sizeof *A);
    msr_products_t *p = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    size_t bytes = msr_products_scratch_bytes(p);
    /* the product of the array as it was, rounding its own operands */
    memset(want, 0, nc * sizeof *want);
    msr_products_sgemm(p, trans_a, 0, M, NC, K, 1.0f, A + at, L, A + L, L, 0.0f, want, NC);
    for (size_t i = 0; i < n; i++) /* the array changes: a product that rounds sees it */
        A[i] = -A[i] * 0.5f;
    memset(now, 0, nc * sizeof *now);
    msr_products_sgemm(p, trans_a, 0, M, NC, K, 1.0f, A + at, L, A + L, L, 0.0f, now, NC);
    MSR_CHECK(memcmp(now, want, nc * sizeof *now) != 0);
    bytes = msr_products_scratch_bytes(p);
    /* held as it was, to A's last element and B's */
    memcpy(A, old, n * sizeof *A);
    size_t last = end > bend ? end : bend;
    MSR_CHECK(msr_products_hold(p, 1, A, last));
    MSR_CHECK_EQ(msr_products_scratch_bytes(p), bytes + last * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++)
        A[i] = -A[i] * 0.5f;
    memset(got, 0, nc * sizeof *got);
    msr_products_sgemm(p, trans_a, 0, M, NC, K, 1.0f, A + at, L, A + L, L, 0.0f, got, NC);
    MSR_CHECK_MSG(memcmp(got, want, nc * sizeof *got) == 0, "trans_a %d: the hold was not taken",
                  trans_a);
    /* one past: that operand rounds the array as it is now */
    memcpy(A, old, n * sizeof *A);
    MSR_CHECK(msr_products_hold(p, 1, A, last - 1));
    for (size_t i = 0; i < n; i++)
        A[i] = -A[i] * 0.5f;
    memset(got, 0, nc * sizeof *got);
    msr_products_sgemm(p, trans_a, 0, M, NC, K, 1.0f, A + at, L, A + L, L, 0.0f, got, NC);
    MSR_CHECK(memcmp(got, want, nc * sizeof *got) != 0);
    /* released: every operand rounds the array as it is now */
    msr_products_release(p, 1);
    memset(got, 0, nc * sizeof *got);
    msr_products_sgemm(p, trans_a, 0, M, NC, K, 1.0f, A + at, L, A + L, L, 0.0f, got, NC);
    MSR_CHECK(memcmp(got, now, nc * sizeof *got) == 0);
    /* the slot's buffer is kept at its largest; slots outside the range,
     * NULL, fp32 and n 0 hold nothing */
    MSR_CHECK_EQ(msr_products_scratch_bytes(p), bytes + last * sizeof(uint16_t));
    MSR_CHECK(!msr_products_hold(p, MSR_PRODUCTS_HOLDS, A, n));
    MSR_CHECK(!msr_products_hold(p, -1, A, n));
    MSR_CHECK(!msr_products_hold(p, 0, A, 0));
    MSR_CHECK(!msr_products_hold(NULL, 0, A, n));
    msr_products_release(NULL, 0);
    msr_products_release(p, MSR_PRODUCTS_HOLDS);
    msr_products_t *p32 = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_FP32, &p32));
    MSR_CHECK(!msr_products_hold(p32, 0, A, n));
    MSR_CHECK_EQ(msr_products_scratch_bytes(p32), 0);
    msr_products_destroy(p32);
    /* a buffer that cannot grow: nothing held, the slot free */
    msr_alloc_fail_at(0);
    MSR_CHECK(!msr_products_hold(p, 0, A, n));
    MSR_CHECK(msr_alloc_failed());
    msr_alloc_fail_at(-1);
    memset(got, 0, nc * sizeof *got);
    msr_products_sgemm(p, trans_a, 0, M, NC, K, 1.0f, A + at, L, A + L, L, 0.0f, got, NC);
    MSR_CHECK(memcmp(got, now, nc * sizeof *got) == 0);
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p);
    free(A), free(old), free(want), free(got), free(now);
}

static void test_sgemm_handover(void)
{
    check_sgemm_handover(0);
    check_sgemm_handover(1);
    check_block_handover(0);
    check_block_handover(1);
}

static void test_hold(void)
{
    check_hold(0);
    check_hold(1);
}

static void test_hold_blas(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx512_bf16,avx512f", 1);
    check_hold(0);
    check_hold(1);
}

static void test_sgemm_handover_blas(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx512_bf16,avx512f", 1);
    check_sgemm_handover(0);
    check_sgemm_handover(1);
    check_block_handover(0);
    check_block_handover(1);
}

/* T past two blocks of the kernels' 64 rows, the last one partial */
enum { B = 2, T = 150, C = 48, NH = 3, HS = C / NH, C3 = 3 * C };

/* A fresh bf16 context whose scratch holds T x HS for op(A) and op(B),
 * what the attention kernels' products before their first handover need,
 * so that the handover's growth to T x T is the next allocation after the
 * pass's holds */
static msr_products_t *pregrown(void)
{
    msr_products_t *p = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    float *x = random_floats((size_t)T * HS, 6), *c = malloc((size_t)T * T * sizeof *c);
    msr_products_sgemm(p, 0, 1, T, T, HS, 1.0f, x, HS, x, HS, 0.0f, c, T);
    free(x), free(c);
    return p;
}

/* One head's attention, forward and backward, alone: qkv's head columns
 * copied into a (T, 3 HS) array, each pass on a fresh context whose
 * handover cannot grow the scratch (that allocation, the one after the
 * pass's holds, fails: no handover), so the products round the softmax
 * rows and their gradient themselves (q, k, v and dout they take from the
 * held rounding, whose bits test_hold shows are a product's own); the
 * outputs written back into the head's columns of out, att and dqkv. */
static void one_head(int b, int h, const float *qkv, const float *dout, float *out, float *att,
                     float *dqkv)
{
    static float q1[T * 3 * HS], o1[T * HS], d1[T * HS], dq1[T * 3 * HS], a1[T * T], s1[T * T];
    for (int t = 0; t < T; t++)
        for (int part = 0; part < 3; part++)
            for (int c = 0; c < HS; c++) {
                size_t from = ((size_t)b * T + t) * C3 + (size_t)part * C + (size_t)h * HS + c;
                q1[t * 3 * HS + part * HS + c] = qkv[from];
                if (part == 0)
                    d1[t * HS + c] = dout[((size_t)b * T + t) * C + (size_t)h * HS + c];
            }
    msr_products_t *p = pregrown();
    msr_alloc_fail_at(1); /* after qkv's hold */
    msr_attention_forward(p, o1, a1, q1, 1, T, HS, 1);
    MSR_CHECK(msr_alloc_failed()); /* the growth, refused */
    msr_alloc_fail_at(-1);
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p);
    p = pregrown();
    memset(dq1, 0, sizeof dq1);
    msr_alloc_fail_at(2); /* after qkv's and dout's holds */
    msr_attention_backward(p, dq1, s1, d1, q1, a1, 1, T, HS, 1);
    MSR_CHECK(msr_alloc_failed());
    msr_alloc_fail_at(-1);
    MSR_CHECK_OK(msr_products_status(p));
    msr_products_destroy(p);
    memcpy(att + ((size_t)b * NH + h) * T * T, a1, sizeof a1);
    for (int t = 0; t < T; t++)
        for (int part = 0; part < 3; part++)
            for (int c = 0; c < HS; c++) {
                size_t to = ((size_t)b * T + t) * C3 + (size_t)part * C + (size_t)h * HS + c;
                dqkv[to] = dq1[t * 3 * HS + part * HS + c];
                if (part == 0)
                    out[((size_t)b * T + t) * C + (size_t)h * HS + c] = o1[t * HS + c];
            }
}

/* Every head at once on a context whose scratch holds T x T from the
 * start (the softmax rows and their gradient rounded as written, taken by
 * their products, each a block of rows or columns of them) against each
 * head alone (its products rounding them): bitwise the same output,
 * probabilities and gradients. */
static void check_attention_handover(void)
{
    size_t nq = (size_t)B * T * C3, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = random_floats(nq, 3), *dout = random_floats(no, 4);
    float *out = malloc(no * sizeof *out), *att = malloc(na * sizeof *att);
    float *dqkv = calloc(nq, sizeof *dqkv), *scratch = malloc((size_t)T * T * sizeof *scratch);
    float *want_out = malloc(no * sizeof *want_out), *want_att = malloc(na * sizeof *want_att);
    float *want_dqkv = malloc(nq * sizeof *want_dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            one_head(b, h, qkv, dout, want_out, want_att, want_dqkv);
    msr_products_t *p = NULL;
    MSR_CHECK_OK(msr_products_create(MSR_PRECISION_BF16, &p));
    /* a (T T, 1) x (1, 1) product grows the scratch to T x T */
    float *big = random_floats((size_t)T * T, 5), *cbig = malloc((size_t)T * T * sizeof *cbig);
    msr_products_sgemm(p, 0, 0, T * T, 1, 1, 1.0f, big, 1, big, 1, 0.0f, cbig, 1);
    MSR_CHECK(msr_products_operand(p, att, (size_t)T * T) != NULL);
    msr_attention_forward(p, out, att, qkv, B, T, C, NH);
    msr_attention_backward(p, dqkv, scratch, dout, qkv, att, B, T, C, NH);
    MSR_CHECK_OK(msr_products_status(p));
    MSR_CHECK(memcmp(out, want_out, no * sizeof *out) == 0);
    MSR_CHECK(memcmp(att, want_att, na * sizeof *att) == 0);
    MSR_CHECK(memcmp(dqkv, want_dqkv, nq * sizeof *dqkv) == 0);
    msr_products_destroy(p);
    free(qkv), free(dout), free(out), free(att), free(dqkv), free(scratch), free(big), free(cbig);
    free(want_out), free(want_att), free(want_dqkv);
}

static void test_attention_handover(void)
{
    check_attention_handover();
}

/* the blas path, a CPU without bf16 units */
static void test_attention_handover_blas(void)
{
    setenv("MSRUN_CPU_DISABLE", "avx512_bf16,avx512f", 1);
    check_attention_handover();
}

static const msr_test_t tests[] = {
    {"sgemm_handover", test_sgemm_handover, 10},
    {"sgemm_handover_blas", test_sgemm_handover_blas, 10},
    {"hold", test_hold, 10},
    {"hold_blas", test_hold_blas, 10},
    {"attention_handover", test_attention_handover, 10},
    {"attention_handover_blas", test_attention_handover_blas, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
