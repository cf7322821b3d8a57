/* Unit tests of the run's history file (msrun/history.c): the records'
 * JSON lines, the bound at exactly its size and one past (rotation to
 * history.jsonl.1), appending to an existing file, and a link refused. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/history.h"
#include "tests/runner.h"

static char dir[64];
static int dir_fd = -1;

static void dir_make(void)
{
    snprintf(dir, sizeof dir, "/tmp/msrun_history_XXXXXX");
    MSR_CHECK(mkdtemp(dir) != NULL);
    dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    MSR_CHECK(dir_fd >= 0);
}

static void dir_remove(void)
{
    unlinkat(dir_fd, MSR_HISTORY_FILE, 0);
    unlinkat(dir_fd, MSR_HISTORY_FILE_OLD, 0);
    close(dir_fd);
    rmdir(dir);
}

/* The file name's content (static buffer) and its size in *size. */
static const char *slurp(const char *name, long *size)
{
    static char buf[8192];
    buf[0] = '\0';
    *size = -1;
    int fd = openat(dir_fd, name, O_RDONLY);
    if (fd < 0)
        return buf;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    *size = n;
    return buf;
}

/* A record of rank rank at step step: 12.5 ms, loss 2.5. */
static void add(msr_history_t *h, int rank, int64_t step)
{
    static const char *const names[] = {"loss"};
    static const double values[] = {2.5};
    msr_history_rec_t r = {0, 1, rank, step, 0.0125, 1700000000.25, 1, names, values};
    msr_history_add(h, &r);
}

static void test_records(void)
{
    dir_make();
    msr_history_t *h = NULL;
    MSR_CHECK_EQ(msr_history_open(dir_fd, 0, &h), MSR_OK);
    add(h, 3, 7);
    const char *const names[] = {"loss", "bad", "tok_s"};
    const double values[] = {1.5, NAN, 1000};
    msr_history_rec_t r = {2, 0, 0, 8, 0, 1700000001.5, 3, names, values}; /* no step time */
    msr_history_add(h, &r);
    msr_history_add(NULL, &r); /* nothing */
    MSR_CHECK_EQ(msr_history_lines(h), 2);
    msr_history_close(h);
    msr_history_close(NULL);
    long size;
    MSR_CHECK_STR(slurp(MSR_HISTORY_FILE, &size),
                  "{\"t\":1700000000.250,\"gen\":0,\"node\":1,\"rank\":3,\"step\":7,"
                  "\"step_ms\":12.5,\"scalars\":{\"loss\":2.5}}\n"
                  "{\"t\":1700000001.500,\"gen\":2,\"node\":0,\"rank\":0,\"step\":8,"
                  "\"step_ms\":null,\"scalars\":{\"loss\":1.5,\"tok_s\":1000}}\n");
    struct stat st;
    MSR_CHECK_EQ(fstatat(dir_fd, MSR_HISTORY_FILE, &st, 0), 0);
    MSR_CHECK_EQ(st.st_mode & 0777, 0600);
    /* a restarted msrun appends */
    MSR_CHECK_EQ(msr_history_open(dir_fd, 0, &h), MSR_OK);
    add(h, 0, 9);
    msr_history_close(h);
    slurp(MSR_HISTORY_FILE, &size);
    long one = (long)strlen("{\"t\":1700000000.250,\"gen\":0,\"node\":1,\"rank\":0,\"step\":9,"
                            "\"step_ms\":12.5,\"scalars\":{\"loss\":2.5}}\n");
    MSR_CHECK(size > 2 * one);
    dir_remove();
}

/* Three records of one length L: a bound of 3L holds them all (exactly at
 * the bound), the fourth rotates; a bound of 3L - 1 rotates at the third. */
static void test_rotation_bound(void)
{
    char line[256];
    int L = snprintf(line, sizeof line,
                     "{\"t\":1700000000.250,\"gen\":0,\"node\":1,\"rank\":1,\"step\":1,"
                     "\"step_ms\":12.5,\"scalars\":{\"loss\":2.5}}\n");
    long size, old;
    for (int past = 0; past <= 1; past++) {
        dir_make();
        msr_history_t *h = NULL;
        MSR_CHECK_EQ(msr_history_open(dir_fd, 3 * L - past, &h), MSR_OK);
        for (int i = 1; i <= 3; i++)
            add(h, 1, i);
        slurp(MSR_HISTORY_FILE, &size);
        slurp(MSR_HISTORY_FILE_OLD, &old);
        if (past == 0) { /* exactly at the bound: one file of 3L */
            MSR_CHECK_EQ(size, 3 * L);
            MSR_CHECK_EQ(old, -1);
            MSR_CHECK_EQ(msr_history_rotations(h), 0);
            add(h, 1, 4); /* one past: rotates */
            slurp(MSR_HISTORY_FILE, &size);
            slurp(MSR_HISTORY_FILE_OLD, &old);
            MSR_CHECK_EQ(old, 3 * L);
            MSR_CHECK_EQ(size, L);
        } else { /* one byte less: the third record starts a new file */
            MSR_CHECK_EQ(old, 2 * L);
            MSR_CHECK_EQ(size, L);
        }
        MSR_CHECK_EQ(msr_history_rotations(h), 1);
        /* a second rotation drops the oldest file */
        for (int i = 5; i <= 8; i++)
            add(h, 1, i);
        slurp(MSR_HISTORY_FILE_OLD, &old);
        MSR_CHECK(old <= 3 * L - past);
        MSR_CHECK_EQ(msr_history_rotations(h), 2 + past);
        msr_history_close(h);
        dir_remove();
    }
}

static void test_link_refused(void)
{
    dir_make();
    MSR_CHECK_EQ(symlinkat("/dev/null", dir_fd, MSR_HISTORY_FILE), 0);
    msr_history_t *h = NULL;
    MSR_CHECK_EQ(msr_history_open(dir_fd, 0, &h), MSR_ERR_IO);
    MSR_CHECK(h == NULL);
    dir_remove();
}

static const msr_test_t tests[] = {
    {"records", test_records, 10},
    {"rotation_bound", test_rotation_bound, 10},
    {"link_refused", test_link_refused, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
