/* The public headers say what libmsrun does: the calls they declare exist,
 * and msr_init contacts the coordinator exactly when store.h says. */
#include <stdlib.h>
#include <string.h>

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

static const msr_test_t tests[] = {
    {"version", test_version, 10},
    {"log_level", test_log_level, 10},
    {"init_asks_generation", test_init_asks_generation, 30},
    {"init_with_generation", test_init_with_generation, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
