/* Unit tests of the launch timeline's table and file (base/lprof.h): the
 * first occurrence of a phase wins, a worker's file goes and comes back
 * whole, a bad file is refused, and the prefix's length limit. Each test
 * runs in a process of its own, so each reads MSR_PROFILE_LAUNCH afresh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/lprof.h"
#include "tests/runner.h"

static void prefix_in_tmp(char *buf, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, len, "%s/msrun-lprof-%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
}

static void test_first_wins(void)
{
    msr_lprof_t p;
    memset(&p, 0, sizeof p);
    msr_lprof_mark(&p, MSR_LPROF_BARRIER, 10, 20);
    msr_lprof_mark(&p, MSR_LPROF_BARRIER, 30, 40); /* a second barrier is not launch */
    MSR_CHECK(p.start[MSR_LPROF_BARRIER] == 10 && p.end[MSR_LPROF_BARRIER] == 20);
    msr_lprof_mark(&p, MSR_LPROF_EXEC, 50, 40); /* an end before the start: empty */
    MSR_CHECK(p.start[MSR_LPROF_EXEC] == 50 && p.end[MSR_LPROF_EXEC] == 50);
    msr_lprof_mark(NULL, MSR_LPROF_EXEC, 1, 2);
    MSR_CHECK(strcmp(msr_lprof_name(MSR_LPROF_STORE), "store_connect") == 0);
    MSR_CHECK(msr_lprof_is_worker(MSR_LPROF_FORK) && !msr_lprof_is_worker(MSR_LPROF_JOIN));
}

static void test_off_records_nothing(void)
{
    unsetenv(MSR_LPROF_ENV);
    MSR_CHECK(msr_lprof_self() == NULL);
    MSR_CHECK(!msr_lprof_wants(MSR_LPROF_BARRIER));
    msr_lprof_note(MSR_LPROF_STORE, 1);
    MSR_CHECK_OK(msr_lprof_save(0)); /* nothing to write */
}

static void test_save_load(void)
{
    char prefix[256], path[300];
    prefix_in_tmp(prefix, sizeof prefix);
    setenv(MSR_LPROF_ENV, prefix, 1);
    msr_lprof_t *self = msr_lprof_self();
    MSR_CHECK(self != NULL);
    MSR_CHECK(msr_lprof_wants(MSR_LPROF_STORE) && msr_lprof_wants(MSR_LPROF_BARRIER));
    MSR_CHECK(!msr_lprof_wants(MSR_LPROF_COUNT));
    msr_lprof_mark(self, MSR_LPROF_STORE, 100, 200);
    MSR_CHECK(!msr_lprof_wants(MSR_LPROF_STORE) && msr_lprof_wants(MSR_LPROF_BARRIER));
    msr_lprof_mark(self, MSR_LPROF_FINALIZE, 300, 450);
    MSR_CHECK_OK(msr_lprof_save(7));
    msr_lprof_t back;
    MSR_CHECK_OK(msr_lprof_load(prefix, 7, &back));
    snprintf(path, sizeof path, "%s.7", prefix);
    unlink(path);
    MSR_CHECK(memcmp(&back, self, sizeof back) == 0);
    MSR_CHECK_STATUS(msr_lprof_load(prefix, 8, &back), MSR_ERR_NOT_FOUND);
}

static void test_bad_file(void)
{
    char prefix[256], path[300];
    prefix_in_tmp(prefix, sizeof prefix);
    snprintf(path, sizeof path, "%s.0", prefix);
    static const char *const bad[] = {"nonsense 1 2\n", "exec 5 4\n", "exec 1\n", "exec x y\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(path, "w");
        MSR_CHECK(f != NULL);
        fputs(bad[i], f);
        fclose(f);
        msr_lprof_t p;
        MSR_CHECK_STATUS(msr_lprof_load(prefix, 0, &p), MSR_ERR_PROTOCOL);
    }
    unlink(path);
}

/* The prefix: at most 4079 characters (MSR_LPROF_PREFIX_MAX);
 * one more and recording stays off rather than writing elsewhere. */
static void prefix_of_length(size_t n)
{
    char *v = malloc(n + 1);
    MSR_CHECK(v != NULL);
    memset(v, 'p', n);
    v[0] = '/';
    v[n] = '\0';
    setenv(MSR_LPROF_ENV, v, 1);
    free(v);
}

static void test_prefix_at_bound(void)
{
    prefix_of_length(4079);
    MSR_CHECK(msr_lprof_self() != NULL);
}

static void test_prefix_past_bound(void)
{
    prefix_of_length(4080);
    MSR_CHECK(msr_lprof_self() == NULL);
}

static const msr_test_t tests[] = {
    {"first_wins", test_first_wins, 10},
    {"off_records_nothing", test_off_records_nothing, 10},
    {"save_load", test_save_load, 10},
    {"bad_file", test_bad_file, 10},
    {"prefix_at_bound", test_prefix_at_bound, 10},
    {"prefix_past_bound", test_prefix_past_bound, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
