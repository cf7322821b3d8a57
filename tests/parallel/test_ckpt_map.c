/* The layout-free checkpoint's arithmetic (parallel/ckpt_map.h): the
 * overlap of two ranges at their edges, and the runs of a model part:
 * every tp x pp part's runs together cover the whole model's elements
 * (tp-replicated ones once per tp rank), map back to themselves, and a
 * needed range finds exactly the saved pieces that overlap it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "model/gpt.h"
#include "parallel/ckpt_map.h"
#include "tests/runner.h"

static void test_overlap_edges(void)
{
    size_t lo = 7, n = 7;
    /* a range ending exactly where a piece starts shares nothing */
    MSR_CHECK(!msr_ckpt_overlap(0, 10, 10, 5, &lo, &n));
    MSR_CHECK(!msr_ckpt_overlap(10, 5, 0, 10, &lo, &n));
    MSR_CHECK(lo == 7 && n == 7); /* untouched */
    /* one element past: exactly one element */
    MSR_CHECK(msr_ckpt_overlap(0, 11, 10, 5, &lo, &n));
    MSR_CHECK(lo == 10 && n == 1);
    MSR_CHECK(msr_ckpt_overlap(14, 3, 10, 5, &lo, &n));
    MSR_CHECK(lo == 14 && n == 1);
    MSR_CHECK(!msr_ckpt_overlap(15, 3, 10, 5, &lo, &n));
    /* inside, around, equal, empty */
    MSR_CHECK(msr_ckpt_overlap(11, 2, 10, 5, &lo, &n) && lo == 11 && n == 2);
    MSR_CHECK(msr_ckpt_overlap(0, 100, 10, 5, &lo, &n) && lo == 10 && n == 5);
    MSR_CHECK(msr_ckpt_overlap(10, 5, 10, 5, &lo, &n) && lo == 10 && n == 5);
    MSR_CHECK(!msr_ckpt_overlap(12, 0, 10, 5, &lo, &n));
}

/* Collects what a map walk calls back with. */
typedef struct seen {
    size_t lo[4096], glo[4096], n[4096];
    int count;
} seen_t;

static int record(void *arg, size_t lo, size_t glo, size_t n)
{
    seen_t *s = arg;
    if (s->count == 4096)
        return 1;
    s->lo[s->count] = lo;
    s->glo[s->count] = glo;
    s->n[s->count++] = n;
    return 0;
}

static const msr_gpt_config_t CFG = {
    .vocab = 256, .max_seq = 8, .layers = 3, .heads = 4, .channels = 8};

/* The runs of part (tp, tp_rank, pp, pp_rank) agree element by element
 * with msr_gpt_tensor_full_index, and add one to seen[] (whole numbering)
 * for each element the part holds. */
static void check_part(int tp, int tr, int pp, int pr, unsigned *count)
{
    msr_gpt_part_t part = {tp, tr, pp, pr, 1, NULL};
    msr_gpt_t *m = NULL;
    msr_ckpt_map_t map;
    MSR_CHECK_OK(msr_gpt_create_part(&CFG, &part, 0, &m));
    MSR_CHECK_OK(msr_ckpt_map_build(m, &map));
    size_t *g = msr_calloc(m->num_params, sizeof *g);
    MSR_CHECK(g != NULL);
    for (int k = 0; k < m->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &m->tensors[k];
        for (size_t i = 0; i < t->count; i++)
            g[t->offset + i] = msr_gpt_tensor_full_index(t, i);
    }
    seen_t *s = msr_calloc(1, sizeof *s);
    MSR_CHECK(s != NULL);
    MSR_CHECK(msr_ckpt_map_to_global(&map, 0, m->num_params, record, s) == 0);
    size_t covered = 0;
    for (int k = 0; k < s->count; k++) {
        MSR_CHECK(s->lo[k] == covered); /* in local order, gapless */
        for (size_t i = 0; i < s->n[k]; i++) {
            MSR_CHECK(g[s->lo[k] + i] == s->glo[k] + i);
            count[s->glo[k] + i]++;
        }
        covered += s->n[k];
    }
    MSR_CHECK(covered == m->num_params);
    /* back from the whole numbering: each run's global range maps to itself */
    for (size_t k = 0; k < map.nruns; k++) {
        seen_t one = {.count = 0};
        MSR_CHECK(
            msr_ckpt_map_to_local(&map, map.by_local[k].glo, map.by_local[k].n, record, &one) == 0);
        MSR_CHECK(one.count == 1 && one.lo[0] == map.by_local[k].lo &&
                  one.n[0] == map.by_local[k].n);
    }
    msr_free(s);
    msr_free(g);
    msr_ckpt_map_free(&map);
    msr_gpt_destroy(m);
}

static void test_parts_cover_model(void)
{
    size_t P = msr_gpt_num_params(&CFG);
    const int layouts[][2] = {{1, 1}, {2, 1}, {1, 3}, {2, 3}, {4, 1}};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        int tp = layouts[l][0], pp = layouts[l][1];
        unsigned *count = msr_calloc(P, sizeof *count);
        MSR_CHECK(count != NULL);
        for (int t = 0; t < tp; t++)
            for (int p = 0; p < pp; p++)
                check_part(tp, t, pp, p, count);
        for (size_t i = 0; i < P; i++) /* once, or once per tp rank (replicated) */
            MSR_CHECK_MSG(count[i] == 1 || count[i] == (unsigned)tp,
                          "tp %d pp %d: element %zu held %u times", tp, pp, i, count[i]);
        msr_free(count);
    }
}

/* tp 2: qkvw's local rows are three runs of the whole tensor (q, k and v
 * blocks); a needed range one element into the next run reaches it, one
 * ending where it starts does not. */
static void test_row_blocks(void)
{
    msr_gpt_part_t part = {2, 1, 1, 0, 1, NULL};
    msr_gpt_t *m = NULL;
    msr_ckpt_map_t map;
    MSR_CHECK_OK(msr_gpt_create_part(&CFG, &part, 0, &m));
    MSR_CHECK_OK(msr_ckpt_map_build(m, &map));
    const msr_gpt_tensor_t *q = NULL;
    for (int k = 0; k < m->num_tensors && q == NULL; k++)
        if (strcmp(m->tensors[k].name, "h0.qkvw") == 0)
            q = &m->tensors[k];
    MSR_CHECK(q != NULL);
    size_t C = (size_t)CFG.channels, block = C / 2 * C; /* rows of a head group x C */
    seen_t *s = msr_calloc(1, sizeof *s);
    MSR_CHECK(s != NULL);
    MSR_CHECK(msr_ckpt_map_to_global(&map, q->offset, q->count, record, s) == 0);
    MSR_CHECK_EQ(s->count, 3);
    for (int k = 0; k < 3; k++) { /* rank 1's half of q, of k, of v */
        MSR_CHECK(s->lo[k] == q->offset + (size_t)k * block && s->n[k] == block);
        MSR_CHECK(s->glo[k] == q->full_offset + (size_t)k * 2 * block + block);
    }
    /* the whole tensor's k block, rank 0's half then rank 1's: needed
     * [start of k's rank-1 half - 1, ...) reaches one element of rank 0's
     * half (not held here) and then the held run */
    size_t k1 = q->full_offset + 3 * block;
    seen_t *t = msr_calloc(1, sizeof *t);
    MSR_CHECK(t != NULL);
    MSR_CHECK(msr_ckpt_map_to_local(&map, k1 - 1, 2, record, t) == 0);
    MSR_CHECK(t->count == 1 && t->glo[0] == k1 && t->n[0] == 1);
    t->count = 0;
    MSR_CHECK(msr_ckpt_map_to_local(&map, k1 - block, block, record, t) == 0);
    MSR_CHECK_EQ(t->count, 0); /* ends exactly where the held run starts */
    MSR_CHECK(msr_ckpt_map_to_local(&map, k1 - block, block + 1, record, t) == 0);
    MSR_CHECK(t->count == 1 && t->lo[0] == q->offset + block && t->n[0] == 1);
    msr_free(t);
    msr_free(s);
    msr_ckpt_map_free(&map);
    msr_gpt_destroy(m);
}

static const msr_test_t tests[] = {
    {"overlap_edges", test_overlap_edges, 20},
    {"parts_cover_model", test_parts_cover_model, 30},
    {"row_blocks", test_row_blocks, 20},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
