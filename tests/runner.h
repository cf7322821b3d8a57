/* The project's test runner: a table of named tests, each run in its own
 * process with a timeout, so a crash or a hang fails one test and names it.
 *
 *   static void test_map_grow(void) { MSR_CHECK(...); }
 *   static const msr_test_t tests[] = {{"map_grow", test_map_grow, 10}, ...};
 *   int main(int argc, char **argv) { return MSR_TEST_MAIN(argc, argv, tests); }
 *
 * `prog` runs every test; `prog NAME...` runs the named ones; `prog --list`
 * lists them. A test fails by failing a check (which exits its process),
 * crashing, or outliving its timeout (the process group is then killed). */
#ifndef MSR_TESTS_RUNNER_H
#define MSR_TESTS_RUNNER_H

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct msr_test {
    const char *name;
    void (*fn)(void);
    int timeout_s; /* 0: 30 s */
} msr_test_t;

int msr_test_main(int argc, char **argv, const msr_test_t *tests, size_t n);

#define MSR_TEST_MAIN(argc, argv, table) \
    msr_test_main((argc), (argv), (table), sizeof(table) / sizeof((table)[0]))

/* msr_test_main with a fresh folder for the tests: dir (dir_len bytes,
 * 32 or more) is made as $TMPDIR/NAME.XXXXXX (/tmp without TMPDIR) before
 * they run and removed with all it holds after, whatever they did; 1
 * when it cannot be made. */
int msr_test_main_in_dir(int argc, char **argv, const msr_test_t *tests, size_t n, char *dir,
                         size_t dir_len, const char *name);

#define MSR_TEST_MAIN_IN_DIR(argc, argv, table, dir, name)                                   \
    msr_test_main_in_dir((argc), (argv), (table), sizeof(table) / sizeof((table)[0]), (dir), \
                         sizeof(dir), (name))

/* Runs fn in a child process with a timeout, as a test runs, and returns
 * its exit status (1, said on stdout, where it crashes or times out): for
 * what must not happen in the runner's own process (setting CUDA up, which
 * a forked child could then not use). */
int msr_test_run_in_child(int (*fn)(void), int timeout_s);

/* 1 when /proc/cpuinfo's first flags line lists flag (the kernel's name:
 * "avx512_bf16", "pclmulqdq"), 0 when not, -1 without such a line (not
 * Linux on x86): what a test checks the CPU feature detection against. */
int msr_test_cpuinfo_has(const char *flag);

/* Has fn run when the test's process ends, passed or failed (a failed
 * check included), latest first: a test's files removed. The runner's
 * children end with _exit, which skips atexit's functions, so a test
 * registers here instead. At most 16 a process; past that, fn runs now
 * (returns -1). */
int msr_test_at_end(void (*fn)(void));

/* Reports a failed check and ends the test's process. */
void msr_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

#define MSR_CHECK(cond)                                                   \
    do {                                                                  \
        if (!(cond))                                                      \
            msr_test_fail(__FILE__, __LINE__, "check failed: %s", #cond); \
    } while (0)

#define MSR_CHECK_MSG(cond, ...)                            \
    do {                                                    \
        if (!(cond))                                        \
            msr_test_fail(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

#define MSR_CHECK_EQ(a, b)                                                               \
    do {                                                                                 \
        long long a_ = (long long)(a), b_ = (long long)(b);                              \
        if (a_ != b_)                                                                    \
            msr_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_); \
    } while (0)

#define MSR_CHECK_STR(a, b)                                                         \
    do {                                                                            \
        const char *a_ = (a), *b_ = (b);                                            \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0)                        \
            msr_test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, \
                          a_ ? a_ : "(null)", b_ ? b_ : "(null)");                  \
    } while (0)

/* For msr_status_t results: names the status on failure. */
#define MSR_CHECK_STATUS(expr, want)                                                   \
    do {                                                                               \
        int got_ = (int)(expr);                                                        \
        if (got_ != (int)(want))                                                       \
            msr_test_fail(__FILE__, __LINE__, "%s: got %d (%s), want %s", #expr, got_, \
                          msr_status_name((msr_status_t)got_), #want);                 \
    } while (0)

#define MSR_CHECK_OK(expr) MSR_CHECK_STATUS(expr, MSR_OK)

#endif
