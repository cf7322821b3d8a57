/* The public headers say what libmsrun does: the calls they declare exist,
 * and msr_init contacts the coordinator exactly when store.h says. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "msrun/msrun.h"
#include "tests/runner.h"

/* msr_version is declared in base.h and is the library's own. */
static void test_version(void)
{
    const char *v = msr_version();
    MSR_CHECK(v != NULL);
    MSR_CHECK_STR(v, MSR_VERSION_STRING);
}

/* msr_log_set_level is the public logging call; out-of-range levels are
 * clamped, not refused. */
static void test_log_level(void)
{
    msr_log_set_level(MSR_LOG_ERROR);
    msr_log_set_level((msr_log_level_t)99);
    msr_log_set_level((msr_log_level_t)-5);
    msr_log_set_level(MSR_LOG_WARN);
}

/* Direct mode toward an address where nothing listens. */
static void direct_env(void)
{
    unsetenv("MSR_AGENT");
    setenv("MSR_COORDINATOR", "127.0.0.1:1", 1);
    setenv("MSR_TOKEN", "test-token", 1);
    setenv("MSR_WORLD_SIZE", "2", 1);
    setenv("MSR_RANK", "0", 1);
    setenv("MSR_CONNECT_TIMEOUT", "1", 1);
    setenv("MSR_TIMEOUT", "2", 1);
    setenv("MSR_LOG_LEVEL", "error", 1);
}

/* Without MSR_GENERATION, msr_init asks the coordinator for it: with no
 * coordinator it fails and says why. */
static void test_init_asks_generation(void)
{
    direct_env();
    unsetenv("MSR_GENERATION");
    msr_ctx_t *ctx = NULL;
    msr_status_t st = msr_init(&ctx);
    MSR_CHECK_MSG(st != MSR_OK, "msr_init succeeded without a coordinator");
    MSR_CHECK(ctx == NULL);
    MSR_CHECK(strlen(msr_last_error()) > 0);
}

/* With MSR_GENERATION, msr_init does not contact it: the first store call
 * does (and fails). */
static void test_init_with_generation(void)
{
    direct_env();
    setenv("MSR_GENERATION", "0", 1);
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    MSR_CHECK_EQ(msr_generation(ctx), 0);
    msr_set_timeout(ctx, 2000);
    MSR_CHECK(msr_store_set(ctx, "k", "v", 1) != MSR_OK);
    msr_finalize(ctx);
}

/* msr_report never waits for the network: with no coordinator to reach,
 * a thousand reports return at once, and msr_finalize's last send is
 * bounded. Bad input is refused without recording anything. */
static void test_report_never_waits(void)
{
    direct_env();
    setenv("MSR_GENERATION", "0", 1);
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    msr_scalar_t sc[2] = {{"loss", 2.5}, {"tok_s", 100}};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 1000; i++)
        MSR_CHECK_OK(msr_report(ctx, i, 0.01, sc, 2));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    MSR_CHECK_MSG(s < 0.5, "1000 reports took %.3f s", s);
    msr_scalar_t bad = {"9lives", 1};
    MSR_CHECK_STATUS(msr_report(ctx, 1, 0, &bad, 1), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_last_error(), "9lives") != NULL);
    MSR_CHECK_STATUS(msr_report(ctx, -1, 0, NULL, 0), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_report(ctx, 1, 0, NULL, 1), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_report(NULL, 1, 0, NULL, 0), MSR_ERR_INVALID_ARG);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    msr_finalize(ctx);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    MSR_CHECK_MSG(s < 5, "msr_finalize took %.3f s", s);
}

static const msr_test_t tests[] = {
    {"report_never_waits", test_report_never_waits, 30},
    {"version", test_version, 10},
    {"log_level", test_log_level, 10},
    {"init_asks_generation", test_init_asks_generation, 30},
    {"init_with_generation", test_init_with_generation, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
