/* A rank file's layout as tools see it (MSR_CKPT_HEADER_LEN, the public
 * header's size), and msr_ckpt_latest_explain: when this rank's state of
 * the newest step is cut short, the step's refusal in the log goes on with
 * what the program's function says about the file (called only for a file
 * shorter than its header gives, at each bound: cut to its header alone,
 * one byte short; not for a damaged byte or a header cut itself). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "msrun/msrun.h"
#include "tests/runner.h"

#define STATE_LEN 1000

static char dir[64]; /* made by main, removed by it whatever the tests did */

/* What the log said, for checking a refusal's words. */
static char logged[8192];
static size_t logged_len;

static void keep_line(void *arg, const char *line, size_t len)
{
    (void)arg;
    if (len > sizeof logged - 1 - logged_len)
        len = sizeof logged - 1 - logged_len;
    memcpy(logged + logged_len, line, len);
    logged_len += len;
    logged[logged_len] = '\0';
}

static msr_ctx_t *start(void)
{
    msr_ctx_t *ctx = NULL;
    unsetenv("MSR_AGENT");
    unsetenv("MSR_WORLD_SIZE");
    MSR_CHECK_OK(msr_init(&ctx));
    return ctx;
}

/* The state of step: STATE_LEN bytes that depend on the step. */
static void save_step(msr_ctx_t *ctx, const char *d, int64_t step)
{
    unsigned char state[STATE_LEN];
    for (size_t i = 0; i < sizeof state; i++)
        state[i] = (unsigned char)(i * 7 + (size_t)step);
    MSR_CHECK_OK(msr_ckpt_save(ctx, d, step, state, sizeof state, 0));
}

static void file_of(const char *d, int64_t step, char *out, size_t len)
{
    snprintf(out, len, "%s/step-%lld/rank-0.bin", d, (long long)step);
}

/* The file holds the header, then the state, nothing more: a tool finds
 * the state at MSR_CKPT_HEADER_LEN and its length in the header. */
static void test_header_len(void)
{
    char d[128], path[256];
    snprintf(d, sizeof d, "%s/layout", dir);
    msr_ctx_t *ctx = start();
    save_step(ctx, d, 5);
    file_of(d, 5, path, sizeof path);
    unsigned char b[MSR_CKPT_HEADER_LEN + STATE_LEN + 1];
    int fd = open(path, O_RDONLY);
    MSR_CHECK(fd >= 0);
    ssize_t got = read(fd, b, sizeof b);
    close(fd);
    MSR_CHECK_EQ(got, MSR_CKPT_HEADER_LEN + STATE_LEN);
    MSR_CHECK(memcmp(b, "MSRCKPT1", 8) == 0);
    uint64_t len = 0, step = 0;
    for (int i = 7; i >= 0; i--) {
        step = step << 8 | b[24 + i];
        len = len << 8 | b[32 + i];
    }
    MSR_CHECK_EQ(step, 5);
    MSR_CHECK_EQ(len, STATE_LEN);
    for (size_t i = 0; i < STATE_LEN; i++)
        MSR_CHECK_EQ(b[MSR_CKPT_HEADER_LEN + i], (unsigned char)(i * 7 + 5));
    /* a state read at its first and last byte through libmsrun: the same */
    unsigned char first = 0, last = 0;
    MSR_CHECK_OK(msr_ckpt_read_rank(ctx, d, 5, 0, 0, &first, 1, NULL));
    MSR_CHECK_OK(msr_ckpt_read_rank(ctx, d, 5, 0, STATE_LEN - 1, &last, 1, NULL));
    MSR_CHECK_EQ(first, b[MSR_CKPT_HEADER_LEN]);
    MSR_CHECK_EQ(last, b[MSR_CKPT_HEADER_LEN + STATE_LEN - 1]);
    msr_finalize(ctx);
}

/* The explaining function's record of its calls. */
typedef struct said {
    int calls;
    uint64_t size;
    char what[64];
    int answer; /* what it returns */
} said_t;

static int explain(void *arg, int fd, uint64_t size, const char *what, char *out, size_t len)
{
    said_t *s = arg;
    struct stat sb;
    MSR_CHECK(fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == size);
    s->calls++;
    s->size = size;
    snprintf(s->what, sizeof s->what, "%s", what);
    snprintf(out, len, "the cut falls in part %llu", (unsigned long long)size);
    return s->answer;
}

/* Steps 2 and 4 saved, step 4's file then cut to cut_to bytes (or one
 * byte of its state changed, cut_to 0): msr_ckpt_latest_explain falls
 * back to step 2, the log saying step 4 was refused when it was a
 * candidate (its header whole), and *s says what the function was asked. */
static void latest_after(const char *name, long cut_to, said_t *s)
{
    char d[128], path[256];
    snprintf(d, sizeof d, "%s/%s", dir, name);
    msr_ctx_t *ctx = start();
    save_step(ctx, d, 2);
    save_step(ctx, d, 4);
    file_of(d, 4, path, sizeof path);
    if (cut_to > 0) {
        MSR_CHECK(truncate(path, cut_to) == 0);
    } else {
        int fd = open(path, O_WRONLY);
        MSR_CHECK(fd >= 0 && pwrite(fd, "x", 1, MSR_CKPT_HEADER_LEN + 10) == 1);
        close(fd);
    }
    logged_len = 0;
    logged[0] = '\0';
    msr_log_set_sink(keep_line, NULL);
    int64_t step = -1;
    MSR_CHECK_OK(msr_ckpt_latest_explain(ctx, d, explain, s, &step));
    msr_log_set_sink(NULL, NULL);
    MSR_CHECK_EQ(step, 2);
    MSR_CHECK_MSG((strstr(logged, "step 4 is not usable on rank 0") != NULL) ==
                      (cut_to == 0 || cut_to >= MSR_CKPT_HEADER_LEN),
                  "log: %s", logged);
    msr_finalize(ctx);
}

/* Cut one byte short and cut to its header alone: the function is asked
 * about the file by its name under the directory, with its size, and its
 * sentence follows the refusal's; a function with nothing to say adds
 * nothing. */
static void test_cut_explained(void)
{
    const long cuts[] = {MSR_CKPT_HEADER_LEN + STATE_LEN - 1, MSR_CKPT_HEADER_LEN};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        char name[32], want[128];
        said_t s = {.answer = 1};
        snprintf(name, sizeof name, "cut%zu", k);
        latest_after(name, cuts[k], &s);
        MSR_CHECK_EQ(s.calls, 1);
        MSR_CHECK_EQ(s.size, cuts[k]);
        MSR_CHECK_STR(s.what, "step-4/rank-0.bin");
        snprintf(want, sizeof want,
                 "rank-0.bin is not rank 0's state of step 4 for this world "
                 "size: the cut falls in part %ld",
                 cuts[k]);
        MSR_CHECK_MSG(strstr(logged, want) != NULL, "no '%s' in: %s", want, logged);
    }
    said_t quiet = {.answer = 0};
    latest_after("quiet", MSR_CKPT_HEADER_LEN + STATE_LEN - 1, &quiet);
    MSR_CHECK_EQ(quiet.calls, 1);
    MSR_CHECK_MSG(strstr(logged, "the cut falls") == NULL, "log: %s", logged);
}

/* Not asked: a file of its full length with a damaged byte (its CRC
 * fails), and a file cut inside its header (one byte short of it: no
 * length to be short of). */
static void test_not_cut_not_asked(void)
{
    said_t s = {.answer = 1};
    latest_after("damaged", 0, &s);
    MSR_CHECK_EQ(s.calls, 0);
    MSR_CHECK_MSG(strstr(logged, "does not match its CRC") != NULL, "log: %s", logged);
    latest_after("header", MSR_CKPT_HEADER_LEN - 1, &s);
    MSR_CHECK_EQ(s.calls, 0);
    MSR_CHECK_MSG(strstr(logged, "the cut falls") == NULL, "log: %s", logged);
}

static const msr_test_t tests[] = {
    {"header_len", test_header_len, 0},
    {"cut_explained", test_cut_explained, 0},
    {"not_cut_not_asked", test_not_cut_not_asked, 0},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN_IN_DIR(argc, argv, tests, dir, "ckpt_latest_cut");
}
