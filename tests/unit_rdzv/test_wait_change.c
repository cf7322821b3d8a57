/* msr_store_wait_change end to end in one process: libmsrun's client in
 * direct mode against a coordinator on loopback, and a singleton's store.
 * Threads wait on one key while the main thread writes: every waiter gets
 * the change whenever it reaches the store, one that gives up gets
 * MSR_ERR_TIMEOUT and leaves the others waiting, a delete is
 * MSR_ERR_NOT_FOUND; bad arguments are refused before any call. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msrun/store.h"
#include "tests/runner.h"
#include "tests/unit_rdzv/fixtures.h"

typedef struct waiter {
    msr_ctx_t *ctx;
    const char *old; /* NULL: the key was absent */
    int64_t wait_ms;
    msr_status_t st;
    char got[32];
} waiter_t;

static void *wait_thread(void *arg)
{
    waiter_t *w = arg;
    void *v = NULL;
    size_t len = 0;
    w->st = msr_store_wait_change(w->ctx, "k", w->old, w->old ? strlen(w->old) : 0, w->wait_ms, &v,
                                  &len);
    if (w->st == MSR_OK)
        snprintf(w->got, sizeof w->got, "%.*s", (int)len, (const char *)v);
    free(v);
    return NULL;
}

static void expect_value(msr_ctx_t *ctx, const char *old, int64_t wait_ms, const char *want)
{
    void *v = NULL;
    size_t len = 0;
    MSR_CHECK_OK(msr_store_wait_change(ctx, "k", old, old ? strlen(old) : 0, wait_ms, &v, &len));
    MSR_CHECK_MSG(len == strlen(want) && memcmp(v, want, len) == 0, "got '%.*s', want '%s'",
                  (int)len, (const char *)v, want);
    free(v);
}

static void check_wait_change(msr_ctx_t *ctx)
{
    void *v = NULL;
    size_t len = 0;
    /* absent and still absent: no change, at once for wait 0 */
    MSR_CHECK_STATUS(msr_store_wait_change(ctx, "k", NULL, 0, 0, &v, &len), MSR_ERR_TIMEOUT);
    MSR_CHECK_STATUS(msr_store_wait_change(ctx, "k", NULL, 0, 1, &v, &len), MSR_ERR_TIMEOUT);
    MSR_CHECK_OK(msr_store_set(ctx, "k", "v1", 2));
    expect_value(ctx, NULL, 0, "v1");
    MSR_CHECK_STATUS(msr_store_wait_change(ctx, "k", "v1", 2, 0, &v, &len), MSR_ERR_TIMEOUT);
    expect_value(ctx, "v0", 0, "v1");
    expect_value(ctx, "", 0, "v1"); /* an empty old value is a value */

    /* three waiters on v1 (one gives up after 1 ms); a write of v1 again
     * is no change; v2 reaches the two that wait */
    waiter_t w[3] = {{ctx, "v1", 60000, MSR_ERR_INTERNAL, ""},
                     {ctx, "v1", 1, MSR_ERR_INTERNAL, ""},
                     {ctx, "v1", -1, MSR_ERR_INTERNAL, ""}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        MSR_CHECK(pthread_create(&t[i], NULL, wait_thread, &w[i]) == 0);
    MSR_CHECK(pthread_join(t[1], NULL) == 0);
    MSR_CHECK_STATUS(w[1].st, MSR_ERR_TIMEOUT);
    MSR_CHECK_OK(msr_store_set(ctx, "k", "v1", 2));
    MSR_CHECK_OK(msr_store_set(ctx, "k", "v2", 2));
    for (int i = 0; i < 3; i += 2) {
        MSR_CHECK(pthread_join(t[i], NULL) == 0);
        MSR_CHECK_OK(w[i].st);
        MSR_CHECK_MSG(strcmp(w[i].got, "v2") == 0, "waiter %d got '%s'", i, w[i].got);
    }

    /* deleted while waited on: NOT_FOUND */
    waiter_t d = {ctx, "v2", 60000, MSR_ERR_INTERNAL, ""};
    pthread_t dt;
    MSR_CHECK(pthread_create(&dt, NULL, wait_thread, &d) == 0);
    int existed = 0;
    MSR_CHECK_OK(msr_store_delete(ctx, "k", &existed));
    MSR_CHECK(existed);
    MSR_CHECK(pthread_join(dt, NULL) == 0);
    MSR_CHECK_STATUS(d.st, MSR_ERR_NOT_FOUND);

    /* refused before any call */
    MSR_CHECK_STATUS(msr_store_wait_change(ctx, "k", NULL, 1, 0, &v, &len), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_store_wait_change(ctx, "k", "a", 1, 0, NULL, &len), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_store_wait_change(ctx, "", "a", 1, 0, &v, &len), MSR_ERR_BAD_KEY);
}

static void test_direct(void)
{
    msr_tserved_t s;
    msr_tserved_start_one(&s);
    msr_tenv_direct(s.target, "t");
    msr_tenv_check(check_wait_change);
    msr_tserved_stop(&s);
}

static void test_singleton(void)
{
    msr_tenv_singleton();
    msr_tenv_check(check_wait_change);
}

static const msr_test_t tests[] = {
    {"direct", test_direct, 30},
    {"singleton", test_singleton, 30},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
