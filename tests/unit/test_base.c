/* Unit tests of base/: statuses, containers, parsing, the allocator hook;
 * the option parser's are in test_base_optparse.c, in the same table. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/hash.h"
#include "base/heap.h"
#include "base/map.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "tests/runner.h"
#include "tests/unit/test_base.h"

static void test_status_strings(void)
{
    MSR_CHECK_STR(msr_status_str(MSR_OK), "success");
    MSR_CHECK_STR(msr_status_str(MSR_ERR_TIMEOUT), "deadline passed");
    MSR_CHECK_STR(msr_status_name(MSR_ERR_PEER_LOST), "MSR_ERR_PEER_LOST");
    MSR_CHECK_STR(msr_status_str((msr_status_t)-999), "unknown status");
    /* codes are part of the ABI: never renumbered */
    MSR_CHECK_EQ(MSR_ERR_NO_MEMORY, -1);
    MSR_CHECK_EQ(MSR_ERR_UNREACHABLE, -40);
    MSR_CHECK_EQ(MSR_ERR_PEER_LOST, -60);
    MSR_CHECK_EQ(msr_status_from_errno(ENOMEM), MSR_ERR_NO_MEMORY);
    MSR_CHECK_EQ(msr_status_from_errno(EADDRINUSE), MSR_ERR_ADDR_IN_USE);
    MSR_CHECK_EQ(msr_status_from_errno(E2BIG), MSR_ERR_SYSTEM);
}

static void test_parse(void)
{
    int64_t v = 7;
    MSR_CHECK_OK(msr_parse_i64("42", 0, 100, &v));
    MSR_CHECK_EQ(v, 42);
    MSR_CHECK_OK(msr_parse_i64("-1", -1, 100, &v));
    MSR_CHECK_EQ(v, -1);
    MSR_CHECK_STATUS(msr_parse_i64("4x", 0, 100, &v), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_parse_i64("", 0, 100, &v), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_parse_i64(" 4", 0, 100, &v), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_parse_i64("101", 0, 100, &v), MSR_ERR_OVERFLOW);
    MSR_CHECK_STATUS(msr_parse_i64("99999999999999999999", 0, INT64_MAX, &v), MSR_ERR_OVERFLOW);
    MSR_CHECK_EQ(v, -1); /* untouched on failure */
    int b = 5;
    MSR_CHECK_OK(msr_parse_bool("True", &b));
    MSR_CHECK_EQ(b, 1);
    MSR_CHECK_OK(msr_parse_bool("off", &b));
    MSR_CHECK_EQ(b, 0);
    MSR_CHECK_STATUS(msr_parse_bool("maybe", &b), MSR_ERR_INVALID_ARG);
}

static void test_buf(void)
{
    msr_buf_t b = MSR_BUF_INIT;
    MSR_CHECK_OK(msr_buf_append(&b, "abc", 3));
    MSR_CHECK_OK(msr_buf_printf(&b, "-%d-", 12));
    MSR_CHECK_STR(b.data, "abc-12-");
    msr_buf_consume(&b, 4);
    MSR_CHECK_STR(b.data, "12-");
    msr_buf_clear(&b);
    MSR_CHECK_OK(msr_buf_json_string(&b, "a\"b\n\x01", 5));
    MSR_CHECK_STR(b.data, "\"a\\\"b\\n\\u0001\"");
    for (int i = 0; i < 10000; i++)
        MSR_CHECK_OK(msr_buf_append(&b, "x", 1));
    MSR_CHECK_EQ(b.len, 14 + 10000);
    msr_buf_cleanup(&b);
}

static int count_cb_total;
static void count_cb(const char *key, void *value, void *arg)
{
    (void)key;
    (void)arg;
    count_cb_total += (int)(intptr_t)value;
}

static void test_map(void)
{
    msr_map_t m = MSR_MAP_INIT;
    MSR_CHECK(msr_map_get(&m, "absent") == NULL);
    char key[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "k%d", i);
        MSR_CHECK_OK(msr_map_put(&m, key, (void *)(intptr_t)(i + 1), NULL));
    }
    MSR_CHECK_EQ(m.count, 5000);
    void *old = NULL;
    MSR_CHECK_OK(msr_map_put(&m, "k7", (void *)(intptr_t)100, &old));
    MSR_CHECK_EQ((intptr_t)old, 8);
    MSR_CHECK_EQ(m.count, 5000);
    for (int i = 0; i < 5000; i += 2) {
        snprintf(key, sizeof key, "k%d", i);
        MSR_CHECK(msr_map_remove(&m, key) != NULL);
    }
    MSR_CHECK_EQ(m.count, 2500);
    MSR_CHECK(msr_map_get(&m, "k2") == NULL);
    MSR_CHECK_EQ((intptr_t)msr_map_get(&m, "k3"), 4);
    count_cb_total = 0;
    msr_map_foreach(&m, count_cb, NULL);
    MSR_CHECK(count_cb_total > 0);
    msr_map_cleanup(&m, NULL);
    MSR_CHECK_EQ(m.count, 0);
}

static void test_heap(void)
{
    msr_heap_t h = MSR_HEAP_INIT;
    msr_timer_t t[200];
    uint64_t x = 12345;
    for (int i = 0; i < 200; i++) {
        msr_timer_init(&t[i]);
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        MSR_CHECK_OK(msr_heap_push(&h, &t[i], x >> 40));
    }
    for (int i = 0; i < 200; i += 3)
        msr_heap_remove(&h, &t[i]);
    MSR_CHECK(!msr_timer_armed(&t[0]));
    uint64_t last = 0;
    int popped = 0;
    msr_timer_t *top;
    while ((top = msr_heap_top(&h)) != NULL) {
        MSR_CHECK(top->deadline >= last);
        last = top->deadline;
        msr_heap_remove(&h, top);
        popped++;
    }
    MSR_CHECK_EQ(popped, 200 - 67);
    msr_heap_cleanup(&h);
}

static void test_deadlines(void)
{
    MSR_CHECK_EQ(msr_deadline_in_ms(-1), MSR_DEADLINE_NEVER);
    MSR_CHECK(!msr_deadline_passed(MSR_DEADLINE_NEVER));
    /* a fresh deadline has time left, at most its length: a minute long,
     * so that no pause of this process between the calls can use it up */
    uint64_t far = msr_deadline_in_ms(60000);
    int64_t left = msr_deadline_left_ms(far);
    MSR_CHECK_MSG(left <= 60000 && left > 0, "%lld ms left", (long long)left);
    MSR_CHECK(!msr_deadline_passed(far));
    /* a short one: never more left than its length, and passed once a
     * longer sleep is over (nanosleep sleeps at least that long) */
    uint64_t d = msr_deadline_in_ms(50);
    MSR_CHECK(msr_deadline_left_ms(d) <= 50);
    msr_sleep_ms(60);
    MSR_CHECK(msr_deadline_passed(d));
    MSR_CHECK_EQ(msr_deadline_left_ms(d), 0);
}

/* Fail each allocation of a map workload in turn: every failure is reported
 * and leaves the map consistent. */
static void test_alloc_failures(void)
{
    for (long k = 0;; k++) {
        msr_alloc_fail_at(k);
        msr_map_t m = MSR_MAP_INIT;
        int ok = 1;
        for (int i = 0; i < 40 && ok; i++) {
            char key[16];
            snprintf(key, sizeof key, "%d", i);
            msr_status_t st = msr_map_put(&m, key, (void *)(intptr_t)1, NULL);
            if (st != MSR_OK) {
                MSR_CHECK_EQ(st, MSR_ERR_NO_MEMORY);
                MSR_CHECK(msr_map_get(&m, key) == NULL);
                MSR_CHECK_EQ(m.count, (size_t)i);
                ok = 0;
            }
        }
        int failed = msr_alloc_failed();
        msr_alloc_fail_at(-1);
        msr_map_cleanup(&m, NULL);
        MSR_CHECK_EQ(failed, !ok);
        if (!failed)
            break; /* the workload ran through: every allocation was tried */
    }
}

/* Page buffers: zeroed, aligned, at least the size asked; a large one goes
 * back to the system when freed (what malloc's heap, after a free has
 * raised its mmap threshold, does not do); the hook fails them too. */
static void test_pages(void)
{
    const size_t sizes[] = {1, 100, MSR_PAGES_MIN - 1, MSR_PAGES_MIN, 3u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = msr_pages_alloc(sizes[i]);
        MSR_CHECK(p != NULL);
        MSR_CHECK((uintptr_t)p % 64 == 0);
        MSR_CHECK(msr_pages_size(p) >= sizes[i]);
        size_t nonzero = 0;
        for (size_t k = 0; k < sizes[i]; k++)
            nonzero += p[k] != 0;
        MSR_CHECK_EQ(nonzero, (size_t)0);
        memset(p, 0xa5, msr_pages_size(p));
        msr_pages_free(p);
    }
    msr_pages_free(NULL);

    errno = 0;
    MSR_CHECK(msr_pages_alloc(SIZE_MAX) == NULL); /* the header would not fit */
    MSR_CHECK_EQ(errno, ENOMEM);
    msr_alloc_fail_at(0);
    MSR_CHECK(msr_pages_alloc(1u << 20) == NULL);
    MSR_CHECK(msr_alloc_failed());
    msr_alloc_fail_at(-1);

#if MSR_PAGES_MAPPED
    const size_t big = 32u << 20;
    unsigned char *p = msr_pages_alloc(big);
    MSR_CHECK(p != NULL);
    memset(p, 1, big);
    long held = msr_proc_status_kib("RssAnon");
    msr_pages_free(p);
    long after = msr_proc_status_kib("RssAnon");
    if (held > 0)
        MSR_CHECK_MSG(held - after >= 30 * 1024, "RssAnon %ld KiB before the free, %ld after", held,
                      after);
#endif
}

/* msr_open_input: a regular file opens (blocking again); a FIFO with no
 * writer, a directory, a device and a socket are refused at once with "is
 * not a regular file"; a missing file keeps open's errno. */
static void test_open_input(void)
{
    char dir[] = "/tmp/msr-open-input.XXXXXX", path[128];
    MSR_CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/file", dir);
    FILE *w = fopen(path, "w");
    MSR_CHECK(w != NULL && fputs("data", w) >= 0 && fclose(w) == 0);
    int fd = -1;
    MSR_CHECK_OK(msr_open_input(path, O_NOFOLLOW, &fd));
    MSR_CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
    MSR_CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    close(fd);
    FILE *f = msr_fopen_input(path, 0);
    char buf[8] = "";
    MSR_CHECK(f != NULL && fgets(buf, sizeof buf, f) != NULL && strcmp(buf, "data") == 0);
    fclose(f);
    snprintf(path, sizeof path, "%s/fifo", dir);
    MSR_CHECK(mkfifo(path, 0600) == 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/sock", dir);
    int sock = socket(AF_UNIX, SOCK_STREAM, 0);
    MSR_CHECK(sock >= 0 && bind(sock, (struct sockaddr *)&sa, sizeof sa) == 0);
    const struct {
        const char *path, *kind;
    } bad[] = {{path, "a FIFO"},
               {dir, "a directory"},
               {"/dev/null", "a device"},
               {sa.sun_path, "a socket"}};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(bad); i++) {
        fd = -1;
        MSR_CHECK_STATUS(msr_open_input(bad[i].path, 0, &fd), MSR_ERR_IO);
        MSR_CHECK_EQ(errno, EINVAL);
        MSR_CHECK_EQ(fd, -1);
        MSR_CHECK_MSG(strstr(msr_err_msg(), "is not a regular file") != NULL &&
                          strstr(msr_err_msg(), bad[i].kind) != NULL,
                      "%s", msr_err_msg());
        MSR_CHECK(msr_fopen_input(bad[i].path, 0) == NULL);
    }
    close(sock);
    snprintf(path, sizeof path, "%s/missing", dir);
    MSR_CHECK_STATUS(msr_open_input(path, 0, &fd), MSR_ERR_NOT_FOUND);
    MSR_CHECK_EQ(errno, ENOENT);
    unlink(sa.sun_path);
    snprintf(path, sizeof path, "%s/fifo", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/file", dir);
    unlink(path);
    rmdir(dir);
}

static void test_signal_names(void)
{
    char b[32];
    MSR_CHECK_STR(msr_signal_name(9, b, sizeof b), "SIGKILL");
    MSR_CHECK_STR(msr_signal_name(15, b, sizeof b), "SIGTERM");
}

/* The error channel: msr_err sets and returns, prefix adds context in
 * front, a long text is cut, not overrun, and each thread has its own. */
static void test_err_channel(void)
{
    msr_err_clear();
    MSR_CHECK_STR(msr_err_msg(), "");
    MSR_CHECK_STR(msr_err_msg_or(MSR_ERR_TIMEOUT), "deadline passed");
    MSR_CHECK_STATUS(msr_err(MSR_ERR_IO, "open %s: %s", "f", "gone"), MSR_ERR_IO);
    MSR_CHECK_STR(msr_err_msg(), "open f: gone");
    MSR_CHECK_STR(msr_last_error(), "open f: gone");
    MSR_CHECK_STATUS(msr_err_prefix(MSR_ERR_IO, "loading %d", 3), MSR_ERR_IO);
    MSR_CHECK_STR(msr_err_msg(), "loading 3: open f: gone");
    msr_err_clear();
    msr_err_prefix(MSR_ERR_IO, "only context");
    MSR_CHECK_STR(msr_err_msg(), "only context");

    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    msr_err_set("%s", big);
    size_t n = strlen(msr_err_msg());
    MSR_CHECK(n > 100 && n < sizeof big);
    msr_err_prefix(MSR_ERR_IO, "%s", big);
    MSR_CHECK(strlen(msr_err_msg()) == n);
    msr_err_set("short");
    msr_err_prefix(MSR_ERR_IO, "%s", big);
    MSR_CHECK(strlen(msr_err_msg()) == n); /* the context alone fills it */
    /* the text itself as an argument: read whole before it is written */
    msr_err_set("scontrol is not in PATH");
    msr_err_set("%s, and %s", "no DNS", msr_err_msg());
    MSR_CHECK_STR(msr_err_msg(), "no DNS, and scontrol is not in PATH");
    MSR_CHECK_STATUS(msr_err(MSR_ERR_IO, "%s (again)", msr_err_msg()), MSR_ERR_IO);
    MSR_CHECK_STR(msr_err_msg(), "no DNS, and scontrol is not in PATH (again)");
    msr_err_set("mine");
}

static void *err_other_thread(void *arg)
{
    char *seen = arg;
    strcpy(seen, msr_err_msg()); /* a new thread starts with no text */
    msr_err_set("theirs");
    return NULL;
}

static void test_err_per_thread(void)
{
    char seen[64] = "unset";
    pthread_t t;
    msr_err_set("mine");
    MSR_CHECK(pthread_create(&t, NULL, err_other_thread, seen) == 0);
    pthread_join(t, NULL);
    MSR_CHECK_STR(seen, "");
    MSR_CHECK_STR(msr_err_msg(), "mine");
}

/* FNV-1a's published values, and one machine identity per machine. */
static void test_hash(void)
{
    MSR_CHECK(msr_fnv1a_str(MSR_FNV1A_INIT, "") == 0xcbf29ce484222325ull);
    MSR_CHECK(msr_fnv1a_str(MSR_FNV1A_INIT, "a") == 0xaf63dc4c8601ec8cull);
    MSR_CHECK(msr_fnv1a_str(MSR_FNV1A_INIT, "foobar") == 0x85944171f73967e8ull);
    MSR_CHECK(msr_fnv1a(MSR_FNV1A_INIT, "foobar", 6) == 0x85944171f73967e8ull);
    MSR_CHECK(msr_fnv1a(msr_fnv1a(MSR_FNV1A_INIT, "foo", 3), "bar", 3) == 0x85944171f73967e8ull);
    uint64_t h = msr_host_id();
    MSR_CHECK(h != 0 && h != MSR_FNV1A_INIT);
    MSR_CHECK(h == msr_host_id());
}

static const msr_test_t tests[] = {
    {"status_strings", test_status_strings, 5},
    {"parse", test_parse, 5},
    {"buf", test_buf, 5},
    {"map", test_map, 10},
    {"heap", test_heap, 5},
    {"deadlines", test_deadlines, 5},
    {"alloc_failures", test_alloc_failures, 20},
    {"pages", test_pages, 10},
    {"signal_names", test_signal_names, 5},
    {"open_input", test_open_input, 5},
    {"err_channel", test_err_channel, 5},
    {"err_per_thread", test_err_per_thread, 5},
    {"hash", test_hash, 5},
    {"optparse", test_optparse, 5},
    {"optparse_programs", test_optparse_programs, 5},
    {"optparse_boundaries", test_optparse_boundaries, 5},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
