/* The MoE state on the device interface (model/moe.c, moe_pass.c): moved
 * by its layout onto a device that counts its calls (ep_device.h), its
 * forward and backward give the CPU device's results bitwise, every
 * buffer of its work space and store is the device's and the copies of
 * the dispatch and combine are the device's (at ep 1 the exchanges are
 * device-to-device copies, and no row comes from the host); a device whose memory the host cannot
 * read is refused by name before any of its entries is called; each allocation of a state made and
 * moved onto the device, and of its passes, failed in turn is MSR_ERR_NO_MEMORY with nothing left
 * allocated. */
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "comm/device_impl.h"
#include "model/moe.h"
#include "tests/parallel/ep_device.h"
#include "tests/runner.h"

enum { N = 16, C = 8, E = 4, L = 2 };

static msr_gpt_config_t config(void)
{
    return (msr_gpt_config_t){MSR_GPT_VOCAB, N, L, 2, C, {E, 2, 1, 1.0, 0.01}};
}

/* A block's inputs and parameters, alike for every state. */
typedef struct pass {
    float x[N * C], dy[N * C], y[N * C], dx[N * C];
    float *params, *grads;
    msr_gpt_block_params_t p, g;
} pass_t;

static float draw(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(*s >> 40) / (double)(1ULL << 24) - 0.5);
}

static void pass_make(pass_t *ps, const msr_gpt_config_t *cfg)
{
    size_t n = (size_t)E * C + (size_t)E * msr_moe_expert_count(cfg);
    uint64_t s = 42;
    memset(ps, 0, sizeof *ps);
    ps->params = msr_calloc(n, sizeof(float));
    ps->grads = msr_calloc(n, sizeof(float));
    MSR_CHECK(ps->params != NULL && ps->grads != NULL);
    for (size_t i = 0; i < n; i++)
        ps->params[i] = 0.2f * draw(&s);
    for (int i = 0; i < N * C; i++) {
        ps->x[i] = draw(&s);
        ps->dy[i] = draw(&s);
    }
    ps->p = (msr_gpt_block_params_t){.routerw = ps->params, .experts = ps->params + E * C};
    ps->g = (msr_gpt_block_params_t){.routerw = ps->grads, .experts = ps->grads + E * C};
}

static void pass_free(pass_t *ps)
{
    msr_free(ps->params);
    msr_free(ps->grads);
}

/* Forward and backward of every block; the first status. */
static msr_status_t run(msr_moe_t *moe, pass_t *ps)
{
    msr_status_t st = MSR_OK;
    double aux;
    for (int l = 0; l < L && st == MSR_OK; l++) {
        memset(ps->dx, 0, sizeof ps->dx);
        st = msr_moe_forward(moe, l, &ps->p, ps->x, N, ps->y, &aux);
        if (st == MSR_OK)
            st = msr_moe_backward(moe, l, &ps->p, &ps->g, ps->x, ps->dy, ps->dx, 1.0f);
    }
    return st;
}

static long kept(const msr_moe_t *moe)
{
    long k = 0;
    for (int i = 0; i < msr_moe_blocks(moe); i++)
        for (int e = 0; e < E; e++)
            k += (long)msr_moe_stats(moe, i)->load[e];
    return k;
}

/* On the counting device: the CPU device's results bitwise; the store's
 * buffers the device's; per block, four device-to-device copies (the two
 * exchanges of each pass at ep 1) and no host to device copy (the
 * dispatch's rows are the model's table's moe_dispatch, on the device);
 * nothing left when the state goes. */
static void test_same_on_device(void)
{
    msr_gpt_config_t cfg = config();
    msr_moe_t *a = NULL, *b = NULL;
    MSR_CHECK_OK(msr_moe_create(&cfg, N, &a));
    MSR_CHECK_OK(msr_moe_create(&cfg, N, &b));
    MSR_CHECK(msr_moe_device(b) == msr_device_cpu());
    long live = ep_device_totals().live;
    msr_moe_layout_t lay = {.device = ep_device()};
    MSR_CHECK_OK(msr_moe_set_layout(b, &lay));
    MSR_CHECK(msr_moe_device(b) == ep_device());
    MSR_CHECK_EQ(msr_moe_work_bytes(a), msr_moe_work_bytes(b));
    /* 10 frame buffers and a load count per block, 7 shared, the store's 2 */
    MSR_CHECK_EQ(ep_device_totals().live - live, 11 * L + 7 + 2);
    MSR_CHECK(ep_device_buf(msr_moe_params(b)) != NULL && ep_device_buf(msr_moe_grads(b)) != NULL);
    pass_t pa, pb;
    pass_make(&pa, &cfg);
    pass_make(&pb, &cfg);
    ep_device_reset();
    for (int round = 0; round < 2; round++) {
        MSR_CHECK_OK(run(a, &pa));
        MSR_CHECK_OK(run(b, &pb));
        MSR_CHECK_EQ(memcmp(pa.y, pb.y, sizeof pa.y), 0);
        MSR_CHECK_EQ(memcmp(pa.dx, pb.dx, sizeof pa.dx), 0);
        size_t n = (size_t)E * C + (size_t)E * msr_moe_expert_count(&cfg);
        MSR_CHECK_EQ(memcmp(pa.grads, pb.grads, n * sizeof(float)), 0);
    }
    ep_device_totals_t t = ep_device_totals();
    MSR_CHECK(kept(b) > 0);
    MSR_CHECK_EQ(t.copies[MSR_DEVICE_H2D], 0);
    MSR_CHECK_EQ(t.copies[MSR_DEVICE_D2D], 2 * L * 4);
    MSR_CHECK_EQ(t.copies[MSR_DEVICE_D2H], 0);
    MSR_CHECK(t.memsets >= 2 * L * 5); /* per pass: the dispatch, combine's and 3 gradients */
    msr_moe_destroy(b);
    msr_moe_destroy(a);
    MSR_CHECK_EQ(ep_device_totals().live, live);
    MSR_CHECK_EQ(ep_device_totals().mismatched, 0); /* host tables by host_free */
    pass_free(&pa);
    pass_free(&pb);
}

/* A device whose memory the host cannot read: refused with its name, no
 * entry of its table called (all NULL: a call would crash), the state
 * still working on the CPU's. */
static void test_device_refused(void)
{
    static const msr_device_ops_t none = {0};
    msr_device_t gpu = {.ops = &none, .name = "gpu:7", .is_host = 0};
    msr_gpt_config_t cfg = config();
    msr_moe_t *moe = NULL;
    MSR_CHECK_OK(msr_moe_create(&cfg, N, &moe));
    msr_moe_layout_t lay = {.device = &gpu};
    MSR_CHECK_STATUS(msr_moe_set_layout(moe, &lay), MSR_ERR_UNSUPPORTED);
    MSR_CHECK_MSG(strstr(msr_last_error(), "moe: device gpu:7") != NULL, "got '%s'",
                  msr_last_error());
    MSR_CHECK(msr_moe_device(moe) == msr_device_cpu());
    pass_t ps;
    pass_make(&ps, &cfg);
    MSR_CHECK_OK(run(moe, &ps));
    pass_free(&ps);
    msr_moe_destroy(moe);
}

/* Each allocation of a state made, moved onto the counting device and
 * run, failed in turn: MSR_ERR_NO_MEMORY, nothing of the device's left
 * (the sanitizer build checks the rest); the run with none failed
 * completes. */
static void test_alloc_failures(void)
{
    msr_gpt_config_t cfg = config();
    pass_t ps;
    pass_make(&ps, &cfg);
    long live = ep_device_totals().live, i;
    for (i = 0;; i++) {
        msr_moe_t *moe = NULL;
        msr_alloc_fail_at(i);
        msr_status_t st = msr_moe_create(&cfg, N, &moe);
        msr_moe_layout_t lay = {.device = ep_device()};
        if (st == MSR_OK)
            st = msr_moe_set_layout(moe, &lay);
        if (st == MSR_OK)
            st = run(moe, &ps);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        msr_moe_destroy(moe);
        MSR_CHECK_EQ(ep_device_totals().live, live);
        if (!failed) {
            MSR_CHECK_OK(st);
            break;
        }
        MSR_CHECK_MSG(st == MSR_ERR_NO_MEMORY, "allocation %ld failed: %s (%s)", i,
                      msr_status_name(st), msr_last_error());
        MSR_CHECK(i < 10000);
    }
    printf("alloc_failures: %ld allocations failed in turn\n", i);
    MSR_CHECK(i > 11 * L + 7 + 2); /* the device's among them */
    pass_free(&ps);
}

/* ---- the model's own buffers (msr_gpt_create_on) ---- */

/* p is a live allocation of the counting device of exactly bytes, of its
 * own memory. */
static void on_device(const void *p, size_t bytes, const char *what)
{
    const ep_device_buf_t *b = ep_device_buf(p);
    MSR_CHECK_MSG(b != NULL, "%s: not the device's", what);
    MSR_CHECK_MSG(b->bytes == bytes && !b->host, "%s: %zu bytes (host %d), want %zu", what,
                  b->bytes, b->host, bytes);
}

/* One forward and backward of a whole model's tokens; its loss. */
static double one_pass(msr_gpt_t *m)
{
    int inp[2 * N], tgt[2 * N];
    for (int i = 0; i < 2 * N; i++)
        inp[i] = (i * 7 + 3) % MSR_GPT_VOCAB, tgt[i] = (i * 5 + 1) % MSR_GPT_VOCAB;
    double loss = 0.0;
    MSR_CHECK_OK(msr_gpt_forward(m, inp, tgt, 2, N, NULL, &loss));
    MSR_CHECK_OK(msr_gpt_backward(m, 1.0f / (2 * N), NULL));
    return loss;
}

/* A whole model made on the counting device: its parameters, gradients,
 * activations and work space are the device's own memory of their exact
 * sizes (the kept tokens the heap's), and a pass gives the heap model's
 * loss and gradients bitwise; a part has no activations, and the flags
 * leave out what they say; everything goes back to the device at
 * destroy; a device whose memory the host cannot read is refused by name
 * before any of its entries is called. */
static void test_model_on_device(void)
{
    msr_gpt_config_t cfg = {MSR_GPT_VOCAB, N, L, 2, C};
    long live = ep_device_totals().live;
    msr_gpt_t *a = NULL, *b = NULL;
    MSR_CHECK_OK(msr_gpt_create_ex(&cfg, 2, 0, &a));
    MSR_CHECK_OK(msr_gpt_create_on(ep_device(), &cfg, NULL, 2, 0, &b));
    MSR_CHECK(a->dev == NULL && b->dev == ep_device());
    MSR_CHECK_EQ(ep_device_totals().live - live, 4);
    size_t f = sizeof(float);
    on_device(b->params, b->num_params * f, "parameters");
    on_device(b->grads, b->num_params * f, "gradients");
    on_device(b->acts_mem, b->acts_count * f, "activations");
    on_device(b->work_mem, b->work_count * f, "work space");
    MSR_CHECK(ep_device_buf(b->inputs) == NULL && ep_device_buf(b->targets) == NULL);
    MSR_CHECK(a->acts_count == b->acts_count && a->work_count == b->work_count);
    msr_gpt_init_params(a, 5);
    msr_gpt_init_params(b, 5);
    double la = one_pass(a), lb = one_pass(b);
    MSR_CHECK(memcmp(&la, &lb, sizeof la) == 0);
    MSR_CHECK_EQ(memcmp(a->grads, b->grads, a->num_params * f), 0);
    msr_gpt_destroy(b);
    msr_gpt_destroy(a);
    MSR_CHECK_EQ(ep_device_totals().live, live);

    msr_gpt_part_t half = {1, 0, 2, 1, 1}; /* pp 2's second stage: no activations */
    MSR_CHECK_OK(msr_gpt_create_on(ep_device(), &cfg, &half, 0, MSR_GPT_NO_GRADS, &b));
    MSR_CHECK(b->acts_mem == NULL && b->work_mem == NULL && b->grads == NULL);
    on_device(b->params, b->num_params * f, "a part's parameters");
    MSR_CHECK_EQ(ep_device_totals().live - live, 1);
    msr_gpt_destroy(b);
    MSR_CHECK_OK(msr_gpt_create_on(ep_device(), &cfg, NULL, 1, MSR_GPT_NO_PARAMS, &b));
    MSR_CHECK(b->params == NULL);
    MSR_CHECK_EQ(ep_device_totals().live - live, 3);
    msr_gpt_destroy(b);
    MSR_CHECK_EQ(ep_device_totals().live, live);
    MSR_CHECK_EQ(ep_device_totals().mismatched, 0);

    static const msr_device_ops_t none = {0};
    msr_device_t gpu = {.ops = &none, .name = "gpu:7", .is_host = 0};
    b = (msr_gpt_t *)&gpu;
    MSR_CHECK_STATUS(msr_gpt_create_on(&gpu, &cfg, NULL, 2, 0, &b), MSR_ERR_UNSUPPORTED);
    MSR_CHECK(b == (msr_gpt_t *)&gpu);
    MSR_CHECK_MSG(strstr(msr_last_error(), "gpt: device gpu:7") != NULL, "got '%s'",
                  msr_last_error());
    /* the shape and the batch are checked as msr_gpt_create_ex's */
    MSR_CHECK_STATUS(msr_gpt_create_on(ep_device(), &cfg, NULL, 0, 0, &b), MSR_ERR_CONFIG);
    MSR_CHECK_EQ(ep_device_totals().live, live);
}

/* Each allocation of a model made on the counting device failed in turn:
 * MSR_ERR_NO_MEMORY, nothing of the device's left. */
static void test_model_alloc_failures(void)
{
    msr_gpt_config_t cfg = {MSR_GPT_VOCAB, N, L, 2, C};
    long live = ep_device_totals().live, i;
    for (i = 0;; i++) {
        msr_gpt_t *m = NULL;
        msr_alloc_fail_at(i);
        msr_status_t st = msr_gpt_create_on(ep_device(), &cfg, NULL, 2, 0, &m);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        msr_gpt_destroy(m);
        MSR_CHECK_EQ(ep_device_totals().live, live);
        if (!failed) {
            MSR_CHECK_OK(st);
            break;
        }
        MSR_CHECK_MSG(st == MSR_ERR_NO_MEMORY && m == NULL, "allocation %ld failed: %s (%s)", i,
                      msr_status_name(st), msr_last_error());
        MSR_CHECK(i < 10000);
    }
    printf("model_alloc_failures: %ld allocations failed in turn\n", i);
    MSR_CHECK(i > 4); /* the device's four among them */
}

static const msr_test_t tests[] = {
    {"same_on_device", test_same_on_device, 30},
    {"model_on_device", test_model_on_device, 30},
    {"model_alloc_failures", test_model_alloc_failures, 30},
    {"device_refused", test_device_refused, 30},
    {"alloc_failures", test_alloc_failures, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
