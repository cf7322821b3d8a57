/* libmsrun without msrun: a job of one rank whose store lives in the
 * process; threads of the program can still wait on each other. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "msrun/msrun.h"
#include "tests/runner.h"

static msr_ctx_t *init_singleton(void)
{
    unsetenv("MSR_AGENT");
    unsetenv("MSR_COORDINATOR");
    unsetenv("MSR_WORLD_SIZE");
    unsetenv("MSR_RANK");
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_PROCID");
    unsetenv("WORLD_SIZE");
    msr_ctx_t *ctx = NULL;
    MSR_CHECK_OK(msr_init(&ctx));
    return ctx;
}

static void test_identity(void)
{
    msr_ctx_t *ctx = init_singleton();
    MSR_CHECK_EQ(msr_rank(ctx), 0);
    MSR_CHECK_EQ(msr_world_size(ctx), 1);
    MSR_CHECK_EQ(msr_local_world_size(ctx), 1);
    MSR_CHECK_EQ(msr_node_count(ctx), 1);
    MSR_CHECK_STR(msr_job_id(ctx), "singleton");
    int all = -1, me = 42;
    MSR_CHECK_OK(msr_allgather(ctx, &me, sizeof me, &all));
    MSR_CHECK_EQ(all, 42);
    MSR_CHECK_OK(msr_barrier(ctx));
    msr_finalize(ctx);
    /* more than one rank needs msrun */
    setenv("MSR_WORLD_SIZE", "2", 1);
    MSR_CHECK_STATUS(msr_init(&ctx), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_last_error(), "needs msrun") != NULL);
    unsetenv("MSR_WORLD_SIZE");
}

/* Started by torchrun (WORLD_SIZE, RANK, MASTER_ADDR, no MSR_*): refused
 * with the variables named, not a silent job of one rank; WORLD_SIZE=1 (the
 * bound) or unset runs alone. */
static void test_foreign_launcher(void)
{
    msr_ctx_t *ctx = init_singleton();
    msr_finalize(ctx);
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    ctx = NULL;
    MSR_CHECK_STATUS(msr_init(&ctx), MSR_ERR_INVALID_ARG);
    MSR_CHECK(ctx == NULL);
    const char *e = msr_last_error();
    MSR_CHECK(strstr(e, "WORLD_SIZE=2") != NULL);
    MSR_CHECK(strstr(e, "RANK=1") != NULL);
    MSR_CHECK(strstr(e, "MASTER_ADDR=127.0.0.1") != NULL);
    MSR_CHECK(strstr(e, "one of 2, but it was not started by msrun (MSR_* unset)") != NULL);
    MSR_CHECK(strstr(e, "unset WORLD_SIZE to run alone") != NULL);
    setenv("WORLD_SIZE", "two", 1);
    MSR_CHECK_STATUS(msr_init(&ctx), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_last_error(), "WORLD_SIZE=two") != NULL);
    setenv("WORLD_SIZE", "1", 1);
    MSR_CHECK_OK(msr_init(&ctx));
    MSR_CHECK_EQ(msr_world_size(ctx), 1);
    msr_finalize(ctx);
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");
    unsetenv("MASTER_ADDR");
    MSR_CHECK_OK(msr_init(&ctx));
    MSR_CHECK_EQ(msr_rank(ctx), 0);
    msr_finalize(ctx);
}

static void test_store(void)
{
    msr_ctx_t *ctx = init_singleton();
    void *v = NULL;
    size_t len = 0;
    MSR_CHECK_STATUS(msr_store_get(ctx, "k", 0, &v, &len), MSR_ERR_NOT_FOUND);
    MSR_CHECK_STATUS(msr_store_get(ctx, "k", 50, &v, &len), MSR_ERR_TIMEOUT);
    MSR_CHECK_OK(msr_store_set(ctx, "k", "abc", 3));
    MSR_CHECK_OK(msr_store_get(ctx, "k", 0, &v, &len));
    MSR_CHECK(len == 3 && memcmp(v, "abc", 3) == 0);
    free(v);
    int64_t n = 0;
    MSR_CHECK_OK(msr_store_add(ctx, "c", 5, &n));
    MSR_CHECK_OK(msr_store_add(ctx, "c", -2, &n));
    MSR_CHECK_EQ(n, 3);
    MSR_CHECK_STATUS(msr_store_add(ctx, "k", 1, &n), MSR_ERR_INVALID_ARG);
    int swapped = -1;
    MSR_CHECK_OK(msr_store_compare_set(ctx, "lock", NULL, 0, "me", 2, &swapped));
    MSR_CHECK_EQ(swapped, 1);
    MSR_CHECK_OK(msr_store_compare_set(ctx, "lock", NULL, 0, "you", 3, &swapped));
    MSR_CHECK_EQ(swapped, 0);
    int existed = 0;
    MSR_CHECK_OK(msr_store_delete(ctx, "lock", &existed));
    MSR_CHECK_EQ(existed, 1);
    MSR_CHECK_STATUS(msr_store_set(ctx, "", "x", 1), MSR_ERR_BAD_KEY);
    msr_finalize(ctx);
}

typedef struct thread_arg {
    msr_ctx_t *ctx;
    int index;
    msr_status_t st;
    unsigned char got[2];
} thread_arg_t;

static void *gather_thread(void *p)
{
    thread_arg_t *t = p;
    unsigned char mine = (unsigned char)(10 + t->index);
    msr_gather_result_t *r = NULL;
    t->st = msr_store_allgather(t->ctx, "g", 2, (uint32_t)t->index, 0, &mine, 1, 5000, &r);
    if (t->st == MSR_OK) {
        t->got[0] = r->data[0];
        t->got[1] = r->data[1];
        msr_gather_result_free(r);
        t->st = msr_store_barrier(t->ctx, "b", 2, 0, 5000);
    }
    return NULL;
}

static void *setter_thread(void *p)
{
    msr_ctx_t *ctx = p;
    usleep(100000);
    msr_store_set(ctx, "late", "yes", 3);
    return NULL;
}

/* Threads are participants: a get waits for another thread's set, a
 * barrier and an allgather of count 2 complete with two threads. */
static void test_threads(void)
{
    msr_ctx_t *ctx = init_singleton();
    pthread_t th[2];
    MSR_CHECK(pthread_create(&th[0], NULL, setter_thread, ctx) == 0);
    void *v = NULL;
    size_t len = 0;
    MSR_CHECK_OK(msr_store_get(ctx, "late", 5000, &v, &len));
    MSR_CHECK(len == 3);
    free(v);
    pthread_join(th[0], NULL);
    thread_arg_t args[2] = {{ctx, 0, MSR_ERR_INTERNAL, {0}}, {ctx, 1, MSR_ERR_INTERNAL, {0}}};
    for (int i = 0; i < 2; i++)
        MSR_CHECK(pthread_create(&th[i], NULL, gather_thread, &args[i]) == 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        MSR_CHECK_OK(args[i].st);
        MSR_CHECK(args[i].got[0] == 10 && args[i].got[1] == 11);
    }
    /* a barrier of two with one thread runs out of time */
    MSR_CHECK_STATUS(msr_store_barrier(ctx, "alone", 2, 0, 50), MSR_ERR_TIMEOUT);
    msr_finalize(ctx);
}

/* The singleton's store keeps the coordinator's limits (the defaults), and a
 * participant that gave up is not counted when it comes again. */
static void test_limits(void)
{
    msr_ctx_t *ctx = init_singleton();
    size_t big = (16u << 20) + 1; /* one byte over the default value limit */
    char *buf = calloc(1, big);
    MSR_CHECK(buf != NULL);
    MSR_CHECK_STATUS(msr_store_set(ctx, "big", buf, big), MSR_ERR_REFUSED);
    MSR_CHECK_MSG(strstr(msr_last_error(), "--store_value_max") != NULL, "%s", msr_last_error());
    MSR_CHECK_OK(msr_store_set(ctx, "big", buf, big - 1));
    msr_gather_result_t *r = NULL;
    MSR_CHECK_STATUS(msr_store_allgather(ctx, "g", 2, 0, 0, buf, big, 50, &r), MSR_ERR_REFUSED);
    /* an allgather whose entry tables alone pass the total is refused, not
     * allocated */
    MSR_CHECK_STATUS(msr_store_allgather(ctx, "huge", 1u << 30, 0, 0, buf, 1, 50, &r),
                     MSR_ERR_REFUSED);
    MSR_CHECK_MSG(strstr(msr_last_error(), "--store_bytes_max") != NULL, "%s", msr_last_error());
    free(buf);
    /* the barrier of two: the first arrival expires, so the one that comes
     * next waits for a second participant again */
    MSR_CHECK_STATUS(msr_store_barrier(ctx, "b", 2, 0, 20), MSR_ERR_TIMEOUT);
    MSR_CHECK_STATUS(msr_store_barrier(ctx, "b", 2, 0, 20), MSR_ERR_TIMEOUT);
    msr_finalize(ctx);
}

static const msr_test_t tests[] = {
    {"limits", test_limits, 20},
    {"identity", test_identity, 10},
    {"foreign_launcher", test_foreign_launcher, 10},
    {"store", test_store, 10},
    {"threads", test_threads, 20},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
