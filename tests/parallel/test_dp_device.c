/* Data parallel on the device interface (parallel/dp.c): the CPU device
 * named or left NULL gives the same layout and bytes; a device whose
 * memory is not host memory is refused with a reason, nothing left
 * behind; every allocation of a ZeRO-3 create and of a micro-batch's
 * temporaries failed in turn is a status, never a crash or a leak. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "comm/device_impl.h"
#include "parallel/dp.h"
#include "tests/runner.h"

static const msr_gpt_config_t gc = {MSR_GPT_VOCAB, 16, 2, 4, 32};
static const msr_adamw_config_t ac = {0.9, 0.95, 1e-8, 0.1};

static msr_gpt_t *model(int zero)
{
    msr_gpt_t *g = NULL;
    MSR_CHECK_OK(
        msr_gpt_create_part(&gc, &(msr_gpt_part_t){1, 0, 1, 0, 1}, msr_dp_model_flags(zero), &g));
    return g;
}

/* The CPU device, named or by default: the same parameters, bitwise, at
 * every stage (the shards and the gathers come from the device). */
static void test_cpu_named(void)
{
    for (int zero = 0; zero <= 3; zero++) {
        msr_dp_config_t dc = {zero, 4000, 1000, 0, 1, 0};
        msr_gpt_t *g1 = model(zero), *g2 = model(zero);
        msr_dp_t *a = NULL, *b = NULL;
        MSR_CHECK_OK(msr_dp_create(&dc, NULL, g1, &ac, 7, &a));
        dc.device = msr_device_cpu();
        MSR_CHECK_OK(msr_dp_create(&dc, NULL, g2, &ac, 7, &b));
        MSR_CHECK(a->dev == msr_device_cpu() && b->dev == msr_device_cpu());
        size_t P = g1->num_params;
        float *pa = msr_malloc(P * sizeof(float)), *pb = msr_malloc(P * sizeof(float));
        MSR_CHECK(pa != NULL && pb != NULL);
        MSR_CHECK_OK(msr_dp_gather_params(a, pa));
        MSR_CHECK_OK(msr_dp_gather_params(b, pb));
        MSR_CHECK_MSG(memcmp(pa, pb, P * sizeof(float)) == 0, "zero %d: parameters differ", zero);
        msr_free(pb);
        msr_free(pa);
        msr_dp_destroy(b);
        msr_dp_destroy(a);
        msr_gpt_destroy(g2);
        msr_gpt_destroy(g1);
    }
}

/* A device whose memory the host cannot read: refused before anything is
 * allocated, the device named. No entry of its table is called (they are
 * all NULL: a call would crash). */
static void test_device_memory_refused(void)
{
    static const msr_device_ops_t none = {0};
    msr_device_t gpu = {.ops = &none, .name = "gpu:7", .is_host = 0};
    for (int zero = 0; zero <= 3; zero++) {
        msr_dp_config_t dc = {zero, 4000, 1000, 0, 1, 0};
        dc.device = &gpu;
        msr_gpt_t *g = model(zero);
        msr_dp_t *dp = (msr_dp_t *)&dc;
        MSR_CHECK_STATUS(msr_dp_create(&dc, NULL, g, &ac, 7, &dp), MSR_ERR_UNSUPPORTED);
        MSR_CHECK(dp == (msr_dp_t *)&dc);
        MSR_CHECK_MSG(strstr(msr_last_error(), "device gpu:7") != NULL, "got '%s'",
                      msr_last_error());
        msr_gpt_destroy(g);
    }
}

/* ZeRO-3's create, then one micro-batch's reduction (buckets, shards and
 * gathers from the device), with the i-th allocation failed, for every i
 * until none fails: a status each time, and the run after the last
 * failure completes. */
static void test_alloc_failures(void)
{
    msr_dp_config_t dc = {3, 4000, 1000, 0, 1, 0};
    int failed_any = 0;
    long i_last = 0;
    for (long i = 0;; i++) {
        i_last = i;
        msr_gpt_t *g = model(3);
        msr_dp_t *dp = NULL;
        msr_alloc_fail_at(i);
        msr_status_t st = msr_dp_create(&dc, NULL, g, &ac, 7, &dp);
        if (st == MSR_OK) {
            st = msr_dp_micro_begin(dp, 1, 1);
            if (st == MSR_OK)
                st = msr_dp_reduce_all(dp);
        }
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        msr_dp_destroy(dp);
        msr_gpt_destroy(g);
        if (!failed) {
            MSR_CHECK_OK(st);
            break;
        }
        failed_any = 1;
        MSR_CHECK_MSG(st == MSR_ERR_NO_MEMORY, "allocation %ld failed: %s (%s)", i,
                      msr_status_name(st), msr_last_error());
        MSR_CHECK(i < 100000);
    }
    printf("alloc_failures: %ld allocations failed in turn\n", i_last);
    MSR_CHECK(failed_any);
}

static const msr_test_t tests[] = {
    {"cpu_named", test_cpu_named, 60},
    {"device_memory_refused", test_device_memory_refused, 60},
    {"alloc_failures", test_alloc_failures, 120},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
