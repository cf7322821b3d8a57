/* Unit tests of msrun/remote_hosts.c: Open MPI's hostfile and -H formats,
 * their limits, the workers each host gets, and every allocation failing
 * in turn. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "launcher/remote.h"
#include "tests/runner.h"

/* Writes content (len bytes) to a new temporary file; returns its path. */
static const char *put(const char *content, size_t len)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/msrun-test-hosts.XXXXXX");
    int fd = mkstemp(path);
    MSR_CHECK(fd >= 0);
    MSR_CHECK(write(fd, content, len) == (ssize_t)len);
    close(fd);
    return path;
}

static void test_list(void)
{
    msr_remote_hosts_t h = {0};
    MSR_CHECK_OK(msr_remote_hosts_parse_list("a:2,b,a:3,user@c:1", &h));
    MSR_CHECK_EQ(h.count, 3);
    MSR_CHECK_STR(h.v[0].name, "a");
    MSR_CHECK_EQ(h.v[0].slots, 5); /* named twice: added up */
    MSR_CHECK_EQ(h.v[1].slots, 1); /* no :K: one slot */
    MSR_CHECK_STR(h.v[2].name, "user@c");
    msr_remote_hosts_free(&h);
    msr_remote_hosts_free(NULL);
    const char *bad[] = {
        "", "a,", ",a", "a:", "a:0", "a:x", "a:2147483648", "-a", "a b", "a'b", "a:2147483647,a:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msr_remote_hosts_t g = {0};
        MSR_CHECK_MSG(msr_remote_hosts_parse_list(bad[i], &g) == MSR_ERR_INVALID_ARG, "'%s'",
                      bad[i]);
        MSR_CHECK(g.count == 0 && g.v == NULL); /* untouched on failure */
    }
    MSR_CHECK_OK(msr_remote_hosts_parse_list("a:2147483647", &h));
    MSR_CHECK_EQ(h.v[0].slots, 2147483647);
    msr_remote_hosts_free(&h);
}

static void test_name_bound(void)
{
    char name[MSR_REMOTE_NAME_MAX + 2];
    memset(name, 'h', sizeof name - 1);
    name[MSR_REMOTE_NAME_MAX] = '\0';
    msr_remote_hosts_t h = {0};
    MSR_CHECK_OK(msr_remote_hosts_parse_list(name, &h));
    msr_remote_hosts_free(&h);
    name[MSR_REMOTE_NAME_MAX] = 'h';
    name[MSR_REMOTE_NAME_MAX + 1] = '\0';
    MSR_CHECK_STATUS(msr_remote_hosts_parse_list(name, &h), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_err_msg(), "longer than 255") != NULL);
}

static void test_hosts_bound(void)
{
    size_t cap = (size_t)(MSR_REMOTE_HOSTS_MAX + 1) * 8;
    char *list = malloc(cap);
    MSR_CHECK(list != NULL);
    size_t n = 0;
    for (int i = 0; i < MSR_REMOTE_HOSTS_MAX; i++)
        n += (size_t)snprintf(list + n, cap - n, "%sh%d", i ? "," : "", i);
    msr_remote_hosts_t h = {0};
    MSR_CHECK_OK(msr_remote_hosts_parse_list(list, &h));
    MSR_CHECK_EQ(h.count, MSR_REMOTE_HOSTS_MAX);
    msr_remote_hosts_free(&h);
    snprintf(list + n, cap - n, ",h%d", MSR_REMOTE_HOSTS_MAX);
    MSR_CHECK_STATUS(msr_remote_hosts_parse_list(list, &h), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(msr_err_msg(), "more than 4096 hosts") != NULL);
    free(list);
}

static void test_file(void)
{
    const char *text = "# the job's hosts\n\n a slots=2 max_slots=4  # two\nb\r\n\tc slots=3\n";
    const char *path = put(text, strlen(text));
    msr_remote_hosts_t h = {0};
    MSR_CHECK_OK(msr_remote_hosts_parse_file(path, &h));
    MSR_CHECK_EQ(h.count, 3);
    MSR_CHECK_EQ(h.v[0].slots, 2);
    MSR_CHECK_STR(h.v[1].name, "b");
    MSR_CHECK_EQ(h.v[2].slots, 3);
    msr_remote_hosts_free(&h);
    unlink(path);
    struct {
        const char *text;
        size_t len;
        const char *msg;
    } bad[] = {
        {"a\nb slot=2\n", 11, "line 2: 'slot=2' is not understood"},
        {"a slots=1 slots=2\n", 18, "line 1: 'slots=2' is not understood"},
        {"a slots=0\n", 10, "line 1: slots '0' is not a number from 1 to 2147483647"},
        {"a max_slots=x\n", 14, "line 1: max_slots 'x'"},
        {"a\nb\0c\n", 6, "line 2: a NUL byte"},
        {"# nothing\n\n", 11, "names no host"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path = put(bad[i].text, bad[i].len);
        MSR_CHECK_STATUS(msr_remote_hosts_parse_file(path, &h), MSR_ERR_INVALID_ARG);
        MSR_CHECK_MSG(strstr(msr_err_msg(), bad[i].msg) != NULL, "'%s' for '%s'", msr_err_msg(),
                      bad[i].msg);
        MSR_CHECK(h.count == 0 && h.v == NULL);
        unlink(path);
    }
    MSR_CHECK_STATUS(msr_remote_hosts_parse_file("/nonexistent/hosts", &h), MSR_ERR_IO);
}

static void test_assign(void)
{
    msr_remote_hosts_t h = {0};
    MSR_CHECK_OK(msr_remote_hosts_parse_list("a:2,b:2,c:2", &h));
    MSR_CHECK_OK(msr_remote_hosts_assign(&h, 0)); /* every slot */
    MSR_CHECK(h.v[0].workers == 2 && h.v[1].workers == 2 && h.v[2].workers == 2);
    MSR_CHECK_OK(msr_remote_hosts_assign(&h, 3)); /* in order */
    MSR_CHECK(h.v[0].workers == 2 && h.v[1].workers == 1 && h.v[2].workers == 0);
    MSR_CHECK_OK(msr_remote_hosts_assign(&h, 6)); /* exactly the slots */
    MSR_CHECK(h.v[2].workers == 2);
    MSR_CHECK_STATUS(msr_remote_hosts_assign(&h, 7), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STR(msr_err_msg(), "7 workers asked for, but the hosts have only 6 slots in all");
    msr_remote_hosts_free(&h);
    MSR_CHECK_OK(msr_remote_hosts_parse_list("a:2147483647,b:1", &h));
    MSR_CHECK_STATUS(msr_remote_hosts_assign(&h, 0), MSR_ERR_INVALID_ARG); /* > INT32_MAX */
    MSR_CHECK_OK(msr_remote_hosts_assign(&h, 2147483647));
    MSR_CHECK(h.v[0].workers == 2147483647 && h.v[1].workers == 0);
    msr_remote_hosts_free(&h);
}

/* Every allocation of a parse fails in turn: out of memory, nothing kept. */
static void test_no_memory(void)
{
    char list[1024];
    size_t n = 0;
    for (int i = 0; i < 70; i++) /* past the index's first growth (64) */
        n += (size_t)snprintf(list + n, sizeof list - n, "%sh%d", i ? "," : "", i);
    for (long k = 0;; k++) {
        msr_remote_hosts_t h = {0};
        msr_alloc_fail_at(k);
        msr_status_t st = msr_remote_hosts_parse_list(list, &h);
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        if (!failed) {
            MSR_CHECK_OK(st);
            MSR_CHECK_EQ(h.count, 70);
            msr_remote_hosts_free(&h);
            break;
        }
        MSR_CHECK_STATUS(st, MSR_ERR_NO_MEMORY);
        MSR_CHECK(h.count == 0 && h.v == NULL);
    }
}

static const msr_test_t tests[] = {
    {"list", test_list, 10},
    {"name_bound", test_name_bound, 10},
    {"hosts_bound", test_hosts_bound, 10},
    {"file", test_file, 10},
    {"assign", test_assign, 10},
    {"no_memory", test_no_memory, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
