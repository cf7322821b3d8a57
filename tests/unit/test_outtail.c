/* Unit tests of the ring of a rank's last output lines (msrun/outtail.c):
 * the line bound, the byte bound, wrap-around of the bytes, long lines cut,
 * binary bytes kept as they are. */
#include <stdio.h>
#include <string.h>

#include "launcher/outtail.h"
#include "tests/runner.h"

/* The i-th oldest line as a NUL-terminated string (static buffer). */
static const char *line(const msr_out_tail_t *t, int i)
{
    static char buf[MSR_OUT_TAIL_LINE_MAX + 1];
    size_t len = msr_out_tail_get(t, i, buf);
    buf[len] = '\0';
    return buf;
}

static void push_str(msr_out_tail_t *t, const char *s)
{
    msr_out_tail_push(t, s, strlen(s));
}

static void test_lines_bound(void)
{
    static msr_out_tail_t t;
    MSR_CHECK_EQ(t.count, 0); /* a zeroed ring is empty */
    push_str(&t, "");         /* an empty line counts */
    MSR_CHECK_EQ(t.count, 1);
    MSR_CHECK_STR(line(&t, 0), "");
    char s[32];
    for (int i = 0; i < 200; i++) {
        snprintf(s, sizeof s, "line %d", i);
        push_str(&t, s);
    }
    MSR_CHECK_EQ(t.count, MSR_OUT_TAIL_LINES);
    MSR_CHECK_EQ(t.total, 201);
    for (int i = 0; i < MSR_OUT_TAIL_LINES; i++) {
        snprintf(s, sizeof s, "line %d", 200 - MSR_OUT_TAIL_LINES + i);
        MSR_CHECK_STR(line(&t, i), s);
    }
    MSR_CHECK_EQ(msr_out_tail_get(&t, MSR_OUT_TAIL_LINES, s), 0);
    msr_out_tail_clear(&t);
    MSR_CHECK_EQ(t.count, 0);
    MSR_CHECK_EQ(t.total, 0);
    MSR_CHECK_EQ(t.bytes, 0);
}

/* Lines of 300 bytes: the byte bound (8 KiB) keeps 27 of them, and their
 * bytes wrap around the ring's end again and again. */
static void test_bytes_bound_and_wrap(void)
{
    static msr_out_tail_t t;
    char s[300];
    for (int i = 0; i < 1000; i++) {
        memset(s, 'a' + i % 26, sizeof s);
        snprintf(s, 16, "%06d", i); /* its number, then a NUL, then letters */
        msr_out_tail_push(&t, s, sizeof s);
        MSR_CHECK(t.bytes <= MSR_OUT_TAIL_BYTES);
    }
    int kept = MSR_OUT_TAIL_BYTES / (int)sizeof s;
    MSR_CHECK_EQ(t.count, kept);
    MSR_CHECK_EQ(t.bytes, (size_t)kept * sizeof s);
    char out[MSR_OUT_TAIL_LINE_MAX];
    for (int i = 0; i < kept; i++) {
        int n = 1000 - kept + i;
        MSR_CHECK_EQ(msr_out_tail_get(&t, i, out), sizeof s);
        memset(s, 'a' + n % 26, sizeof s);
        snprintf(s, 16, "%06d", n);
        MSR_CHECK_MSG(memcmp(out, s, sizeof s) == 0, "line %d of %d differs", i, kept);
    }
}

/* A long line is cut; a short one after it pushes out just enough. */
static void test_long_lines_and_binary(void)
{
    static msr_out_tail_t t;
    char big[5000];
    memset(big, 'x', sizeof big);
    msr_out_tail_push(&t, big, sizeof big);
    char out[MSR_OUT_TAIL_LINE_MAX];
    MSR_CHECK_EQ(msr_out_tail_get(&t, 0, out), MSR_OUT_TAIL_LINE_MAX);
    const char bin[] = {'\0', '\x01', '\xff', '\n', '"', '\0'};
    msr_out_tail_push(&t, bin, sizeof bin);
    MSR_CHECK_EQ(msr_out_tail_get(&t, 1, out), sizeof bin);
    MSR_CHECK(memcmp(out, bin, sizeof bin) == 0);
    /* fill to the byte bound exactly: nothing goes until one more byte */
    for (int i = 0; i < 19; i++)
        msr_out_tail_push(&t, big, MSR_OUT_TAIL_LINE_MAX);
    msr_out_tail_push(&t, big, MSR_OUT_TAIL_BYTES - 20 * MSR_OUT_TAIL_LINE_MAX - sizeof bin);
    MSR_CHECK_EQ(t.bytes, MSR_OUT_TAIL_BYTES);
    MSR_CHECK_EQ(t.count, 22);
    msr_out_tail_push(&t, "y", 1); /* the oldest (400 bytes) goes */
    MSR_CHECK_EQ(t.count, 22);
    MSR_CHECK_EQ(msr_out_tail_get(&t, 0, out), sizeof bin);
    MSR_CHECK_STR(line(&t, 21), "y");
}

static const msr_test_t tests[] = {
    {"lines_bound", test_lines_bound, 10},
    {"bytes_bound_and_wrap", test_bytes_bound_and_wrap, 10},
    {"long_lines_and_binary", test_long_lines_and_binary, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
