/* Checkpoints in slices (parallel/ckpt_full.h), the GPU trainer's format,
 * checked without a GPU against the CPU trainer: slices cover the buffer
 * once; a CPU trainer's checkpoint gathers whole, bitwise; slices of a
 * trained state restore into a CPU trainer (another world size), which then
 * trains on bitwise like the uninterrupted one; other settings, missing,
 * mixed or foreign payloads are refused. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "parallel/ckpt_full.h"
#include "parallel/train.h"
#include "tests/parallel/ckpt_support.h"
#include "tests/runner.h"

static const char *const META = "a test run";

static msr_train_config_t config(void)
{
    return ckpt_test_config(2, 32, 4);
}

/* Payloads held in memory, one per saved rank; fetch copies one out. */
typedef struct store {
    void *buf[8];
    size_t len[8];
    int n;
} store_t;

static msr_status_t fetch(void *arg, int rank, void **buf_p, size_t *len_p)
{
    store_t *s = arg;
    if (rank < 0 || rank >= s->n)
        return MSR_ERR_NOT_FOUND;
    *buf_p = msr_malloc(s->len[rank]);
    MSR_CHECK(*buf_p != NULL);
    memcpy(*buf_p, s->buf[rank], s->len[rank]);
    *len_p = s->len[rank];
    return MSR_OK;
}

/* fetch, recording the ranks asked for in order (the validation's
 * broadcasts, parallel/eval.c, rely on each asked for once, in order) */
static int asked[8], num_asked;

static msr_status_t fetch_logged(void *arg, int rank, void **buf_p, size_t *len_p)
{
    if (num_asked < 8)
        asked[num_asked] = rank;
    num_asked++;
    return fetch(arg, rank, buf_p, len_p);
}

static void store_free(store_t *s)
{
    for (int i = 0; i < s->n; i++)
        msr_free(s->buf[i]);
    s->n = 0;
}

static void test_slices(void)
{
    static const size_t sizes[] = {0, 1, 7, 100, 1001};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        for (int w = 1; w <= 8; w++) {
            size_t next = 0;
            for (int r = 0; r < w; r++) {
                size_t lo, hi;
                msr_ckpt_slice(r, w, sizes[k], &lo, &hi);
                MSR_CHECK_EQ(lo, next);
                MSR_CHECK(hi - lo == sizes[k] / (size_t)w || hi - lo == sizes[k] / (size_t)w + 1);
                next = hi;
            }
            MSR_CHECK_EQ(next, sizes[k]);
        }
    }
}

/* Slices of tr's whole state for `world` ranks into s. */
static void save_slices(msr_trainer_t *tr, int world, store_t *s)
{
    s->n = world;
    ckpt_test_save_slices(tr, world, META, s->buf, s->len);
}

static void test_cpu_checkpoint_gathers_whole(void)
{
    msr_dataset_t *ds;
    msr_train_config_t c = config();
    msr_trainer_t *tr = ckpt_test_trainer(&c, 3, &ds);
    store_t s = {.n = 1};
    MSR_CHECK_OK(msr_trainer_snapshot(tr, META, &s.buf[0], &s.len[0]));
    size_t P = tr->model->num_params;
    float *p = msr_calloc(P, sizeof(float)), *m = msr_calloc(P, sizeof(float)),
          *v = msr_calloc(P, sizeof(float));
    MSR_CHECK(p != NULL && m != NULL && v != NULL);
    msr_tckpt_header_t h;
    MSR_CHECK_OK(msr_ckpt_gather(fetch, &s, 1, META, P, p, m, v, &h));
    MSR_CHECK(memcmp(p, tr->model->params, P * sizeof(float)) == 0);
    MSR_CHECK(memcmp(m, tr->dp->opt->m, P * sizeof(float)) == 0);
    MSR_CHECK(memcmp(v, tr->dp->opt->v, P * sizeof(float)) == 0);
    MSR_CHECK_EQ(h.step, 3);
    MSR_CHECK_EQ(h.adam_t, 3);
    MSR_CHECK_EQ(h.data_position, tr->sampler.position);
    /* refusals: other settings; a model of another size */
    MSR_CHECK(msr_ckpt_gather(fetch, &s, 1, "other", P, p, m, v, &h) == MSR_ERR_CONFIG);
    MSR_CHECK(msr_ckpt_gather(fetch, &s, 1, META, P + 1, p, m, v, &h) == MSR_ERR_CONFIG);
    store_free(&s);
    msr_free(p);
    msr_free(m);
    msr_free(v);
    msr_trainer_destroy(tr);
    msr_dataset_destroy(ds);
}

static void test_slices_restore_into_cpu(void)
{
    msr_dataset_t *ds;
    msr_train_config_t c = config();
    msr_trainer_t *a = ckpt_test_trainer(&c, 3, &ds), *b;
    MSR_CHECK_OK(msr_trainer_create(&c, ds, NULL, &b));
    double la, lb;
    store_t s;
    save_slices(a, 3, &s);
    MSR_CHECK_OK(msr_trainer_restore(b, META, 3, fetch, &s));
    MSR_CHECK_EQ(b->step, 3);
    for (int i = 0; i < 3; i++) {
        MSR_CHECK_OK(msr_trainer_step(a, &la));
        MSR_CHECK_OK(msr_trainer_step(b, &lb));
        MSR_CHECK_MSG(la == lb, "step %d after the restore: loss %.9f, uninterrupted %.9f", i + 4,
                      lb, la);
    }
    size_t P = a->model->num_params;
    MSR_CHECK(memcmp(a->model->params, b->model->params, P * sizeof(float)) == 0);

    /* refusals: a rank's payload missing or swapped, a foreign world size */
    float *p = msr_calloc(P, sizeof(float)), *m = msr_calloc(P, sizeof(float)),
          *v = msr_calloc(P, sizeof(float));
    MSR_CHECK(p != NULL && m != NULL && v != NULL);
    msr_tckpt_header_t h;
    MSR_CHECK_OK(msr_ckpt_gather(fetch, &s, 3, META, P, p, m, v, &h));
    /* the parameters alone (m and v NULL): the same parameters, each
     * payload asked for once, in rank order */
    float *p1 = msr_calloc(P, sizeof(float));
    MSR_CHECK(p1 != NULL);
    num_asked = 0;
    MSR_CHECK_OK(msr_ckpt_gather(fetch_logged, &s, 3, META, P, p1, NULL, NULL, &h));
    MSR_CHECK(memcmp(p1, p, P * sizeof(float)) == 0);
    MSR_CHECK(num_asked == 3 && asked[0] == 0 && asked[1] == 1 && asked[2] == 2);
    msr_free(p1);
    MSR_CHECK(msr_ckpt_gather(fetch, &s, 4, META, P, p, m, v, &h) == MSR_ERR_CORRUPT);
    MSR_CHECK(msr_ckpt_gather(fetch, &s, 2, META, P, p, m, v, &h) == MSR_ERR_CORRUPT);
    void *keep = s.buf[1];
    size_t keep_len = s.len[1];
    s.buf[1] = s.buf[0];
    s.len[1] = s.len[0];
    num_asked = 0; /* the gather stops at the payload that fails: 2 is not asked for */
    MSR_CHECK(msr_ckpt_gather(fetch_logged, &s, 3, META, P, p, m, v, &h) == MSR_ERR_CORRUPT);
    MSR_CHECK(num_asked == 2 && asked[0] == 0 && asked[1] == 1);
    s.buf[1] = keep;
    s.len[1] = keep_len;
    /* a payload of another step (rank 2 saved later) */
    store_t later;
    MSR_CHECK_OK(msr_trainer_step(a, &la));
    save_slices(a, 3, &later);
    keep = s.buf[2];
    s.buf[2] = later.buf[2];
    MSR_CHECK(msr_ckpt_gather(fetch, &s, 3, META, P, p, m, v, &h) == MSR_ERR_CORRUPT);
    s.buf[2] = keep;
    /* the fetch's failure */
    s.n = 2;
    MSR_CHECK(msr_ckpt_gather(fetch, &s, 3, META, P, p, m, v, &h) == MSR_ERR_NOT_FOUND);
    s.n = 3;
    store_free(&later);
    store_free(&s);
    msr_free(p);
    msr_free(m);
    msr_free(v);
    msr_trainer_destroy(a);
    msr_trainer_destroy(b);
    msr_dataset_destroy(ds);
}

static const msr_test_t tests[] = {
    {"slices", test_slices, 10},
    {"cpu_checkpoint_gathers_whole", test_cpu_checkpoint_gathers_whole, 30},
    {"slices_restore_into_cpu", test_slices_restore_into_cpu, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
