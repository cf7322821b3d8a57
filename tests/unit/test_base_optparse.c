/* Unit tests of base/'s option parser (base/optparse.h): a command of every
 * common kind of option, each bound at its limit and one past, and whole
 * programs' command lines, usage lines and help (test_base.h). */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/optparse.h"
#include "base/status.h"
#include "tests/runner.h"
#include "tests/unit/test_base.h"

/* A command of every common kind of option, as a program declares it. */
typedef struct opt_cmd {
    int n, flag, level, choice, lo, hi;
    int64_t ms, bytes;
    char *name, *secret;
} opt_cmd_t;

#define OD(field) MSR_OPT_DEST(opt_cmd_t, field)
static const char *const opt_choices[] = {"red", "green", NULL};
static const msr_opt_t opt_table[] = {
    {.name = "num",
     .aliases = {"n_alias"},
     .kind = MSR_OPT_INT,
     .min = 1,
     .max = 10,
     .env = "TEST_OPT_NUM",
     .dest = OD(n),
     .metavar = "N",
     .help = "a number."},
    {.name = "flag", .kind = MSR_OPT_BOOL, .dest = OD(flag), .metavar = "BOOL", .help = "a flag."},
    {.name = "wait",
     .kind = MSR_OPT_SECONDS,
     .min = 100,
     .max = 60000,
     .dest = OD(ms),
     .help = "seconds."},
    {.name = "bytes",
     .kind = MSR_OPT_SIZE,
     .min = 1,
     .max = INT64_MAX,
     .dest = OD(bytes),
     .help = "a size."},
    {.name = "level", .kind = MSR_OPT_LEVEL, .dest = OD(level), .help = "a level."},
    {.name = "color",
     .kind = MSR_OPT_ENUM,
     .choices = opt_choices,
     .dest = OD(choice),
     .help = "a color."},
    {.name = "nodes",
     .kind = MSR_OPT_RANGE,
     .min = 1,
     .max = 100,
     .dest = OD(lo),
     .dest2 = offsetof(opt_cmd_t, hi),
     .help = "a range."},
    {.name = "name", .kind = MSR_OPT_STRING, .dest = OD(name), .help = "a string."},
    {.name = "secret", .kind = MSR_OPT_SECRET, .dest = OD(secret), .help = "a secret."},
};
static const msr_optset_t opt_set = {"prog", opt_table, MSR_ARRAY_SIZE(opt_table), 1};

void test_optparse(void)
{
    opt_cmd_t c = {.n = 5};
    unsigned char seen[MSR_ARRAY_SIZE(opt_table)];
    char a0[] = "--n-alias=7", a1[] = "--flag", a2[] = "--wait", a3[] = "1.5", a4[] = "--bytes=2K",
         a5[] = "--level=debug", a6[] = "--color", a7[] = "green", a8[] = "--nodes=2:4",
         a9[] = "--name=x", a10[] = "--secret=hush", a11[] = "prog", a12[] = "--num=9";
    char *argv[] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12};
    int next = -1;
    MSR_CHECK_EQ(msr_opts_parse(&opt_set, 13, argv, &c, seen, &next), MSR_OPTS_OK);
    /* options end at the program: what follows is its own */
    MSR_CHECK_EQ(next, 11);
    MSR_CHECK_EQ(c.n, 7);
    MSR_CHECK_EQ(c.flag, 1);
    MSR_CHECK_EQ(c.ms, 1500);
    MSR_CHECK_EQ(c.bytes, 2048);
    MSR_CHECK_EQ(c.choice, 1);
    MSR_CHECK(c.lo == 2 && c.hi == 4);
    MSR_CHECK_STR(c.name, "x");
    MSR_CHECK_STR(c.secret, "hush");
    MSR_CHECK_STR(a10, "--secret=***"); /* gone from the process list */
    MSR_CHECK(seen[0] == 1 && seen[7] == 1);
    msr_opts_free(&opt_set, &c);
    MSR_CHECK(c.name == NULL && c.secret == NULL);

    /* the environment fills what the command line left */
    opt_cmd_t e = {.n = 5};
    setenv("TEST_OPT_NUM", "3", 1);
    MSR_CHECK_EQ(msr_opts_parse(&opt_set, 0, argv, &e, seen, &next), MSR_OPTS_OK);
    MSR_CHECK(e.n == 3 && seen[0] == 2 && next == 0);
    char where[32];
    MSR_CHECK_STR(msr_opts_where(&opt_set, seen, "num", where, sizeof where), "TEST_OPT_NUM");
    setenv("TEST_OPT_NUM", "30", 1);
    MSR_CHECK_EQ(msr_opts_parse(&opt_set, 0, argv, &e, seen, &next), MSR_OPTS_BAD);
    MSR_CHECK(strstr(msr_err_msg(), "TEST_OPT_NUM=30") != NULL);
    unsetenv("TEST_OPT_NUM");

    /* bad input and help come back as results: the parser never exits */
    char b0[] = "--bogus", b1[] = "--wait=0.01", b2[] = "--color=blue", b3[] = "--help";
    char *bad[][1] = {{b0}, {b1}, {b2}};
    const char *why[] = {"unknown option '--bogus'", "must be at least 0.1 s",
                         "not one of red, green"};
    for (int i = 0; i < 3; i++) {
        MSR_CHECK_EQ(msr_opts_parse(&opt_set, 1, bad[i], &e, seen, &next), MSR_OPTS_BAD);
        MSR_CHECK_MSG(strstr(msr_err_msg(), why[i]) != NULL, "%s", msr_err_msg());
    }
    char *help[] = {b3};
    MSR_CHECK_EQ(msr_opts_parse(&opt_set, 1, help, &e, seen, &next), MSR_OPTS_HELP);
    msr_opts_free(&opt_set, &e);

    char text[4096] = "";
    FILE *f = fmemopen(text, sizeof text - 1, "w");
    MSR_CHECK(f != NULL);
    msr_opts_usage(&opt_set, f);
    fclose(f);
    MSR_CHECK(strstr(text, "  --num N, --n_alias\n      a number.\n      [env TEST_OPT_NUM]\n") !=
              NULL);
    MSR_CHECK(strstr(text, "  --flag[=BOOL]\n") != NULL);
}

/* The parser's boundaries (docs/testing.md): a seconds value at its least
 * and greatest and one past each, values that are no number at all; each
 * integer range's own message; a group's options given together, alone,
 * and one on the line with the other's variable set; help text of exactly
 * the wrap width and one more. */
typedef struct bound_cmd {
    int64_t ms, pos, small, nonneg, forever;
    char *a, *b, *peer;
    int peer_port;
} bound_cmd_t;

#define BD(f)  MSR_OPT_DEST(bound_cmd_t, f)
/* 70 characters: the widest help line that is not wrapped */
#define HELP70 "aaaaaaaaa bbbbbbbbb ccccccccc ddddddddd eeeeeeeee fffffffff gggggggggg"
static const msr_opt_t bound_table[] = {
    {.name = "wait",
     .kind = MSR_OPT_SECONDS,
     .min = 100,
     .max = 60000,
     .dest = BD(ms),
     .help = HELP70},
    /* no range of its own: only the parser's limit of 1e9 seconds */
    {.name = "forever",
     .kind = MSR_OPT_SECONDS,
     .min = 0,
     .max = INT64_MAX,
     .dest = BD(forever),
     .help = "x"},
    {.name = "pos",
     .kind = MSR_OPT_INT,
     .min = 1,
     .max = INT32_MAX,
     .dest = BD(pos),
     .help = HELP70 "h"},
    {.name = "small", .kind = MSR_OPT_INT, .min = 1, .max = 10, .dest = BD(small), .help = "x"},
    {.name = "nonneg",
     .kind = MSR_OPT_INT,
     .min = 0,
     .max = INT32_MAX,
     .dest = BD(nonneg),
     .help = "x"},
    {.name = "a",
     .kind = MSR_OPT_STRING,
     .group = 1,
     .env = "TEST_BOUND_A",
     .dest = BD(a),
     .help = "x"},
    {.name = "b",
     .kind = MSR_OPT_STRING,
     .group = 1,
     .env = "TEST_BOUND_B",
     .dest = BD(b),
     .help = "x"},
    {.name = "peer",
     .kind = MSR_OPT_HOSTPORT,
     .min = 1,
     .max = 65535,
     .dest = BD(peer),
     .dest2 = offsetof(bound_cmd_t, peer_port),
     .help = "x"},
};
static const msr_optset_t bound_set = {"bound", bound_table, MSR_ARRAY_SIZE(bound_table), 0};

/* Parses one or two arguments into a fresh command: the parser's result,
 * with *c filled. */
static msr_opts_result_t bound_parse(bound_cmd_t *c, const char *x, const char *y)
{
    static char ax[128], ay[128];
    snprintf(ax, sizeof ax, "%s", x);
    snprintf(ay, sizeof ay, "%s", y ? y : "");
    char *argv[] = {ax, ay};
    unsigned char seen[MSR_ARRAY_SIZE(bound_table)];
    int next = 0;
    msr_opts_free(&bound_set, c);
    memset(c, 0, sizeof *c);
    return msr_opts_parse(&bound_set, y ? 2 : 1, argv, c, seen, &next);
}

void test_optparse_boundaries(void)
{
    bound_cmd_t c = {0};
    /* seconds: 0.1 and 60 taken, 0.099 and 60.001 refused; no number refused */
    MSR_CHECK_EQ(bound_parse(&c, "--wait=0.1", NULL), MSR_OPTS_OK);
    MSR_CHECK_EQ(c.ms, 100);
    MSR_CHECK_EQ(bound_parse(&c, "--wait=60", NULL), MSR_OPTS_OK);
    MSR_CHECK_EQ(c.ms, 60000);
    /* out of range: the bound passed; no number of seconds at all: that */
    const struct {
        const char *arg, *why;
    } bad_s[] = {
        {"--wait=0.099", "--wait=0.099: must be at least 0.1 s"},
        {"--wait=60.001", "--wait=60.001: must be at most 60 s"},
        {"--wait=-1", "--wait=-1: must be at least 0.1 s"},
        {"--wait=1e10", "--wait=1e10: must be at most 60 s"},
        {"--wait=1e999", "--wait=1e999: must be at most 60 s"},
        {"--wait=abc", "--wait=abc is not a number of seconds"},
        {"--wait=1x", "--wait=1x is not a number of seconds"},
        {"--wait=nan", "--wait=nan is not a number of seconds"},
        {"--wait=1e-999", "--wait=1e-999 is not a number of seconds"},
    };
    for (size_t i = 0; i < MSR_ARRAY_SIZE(bad_s); i++) {
        MSR_CHECK_MSG(bound_parse(&c, bad_s[i].arg, NULL) == MSR_OPTS_BAD, "%s taken",
                      bad_s[i].arg);
        MSR_CHECK_MSG(strstr(msr_err_msg(), bad_s[i].why), "%s: %s", bad_s[i].arg, msr_err_msg());
    }
    /* the parser's own limit: 1e9 seconds taken, a millisecond more told
     * that bound */
    MSR_CHECK_EQ(bound_parse(&c, "--forever=1000000000", NULL), MSR_OPTS_OK);
    MSR_CHECK_EQ(c.forever, INT64_C(1000000000000));
    MSR_CHECK_EQ(bound_parse(&c, "--forever=1000000000.001", NULL), MSR_OPTS_BAD);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "--forever=1000000000.001: must be at most 1000000000 s"),
                  "%s", msr_err_msg());
    /* each integer range says its own bound */
    const struct {
        const char *arg, *why;
    } bad_i[] = {
        {"--pos=0", "--pos=0 is not a positive integer"},
        {"--small=11", "--small=11 is not an integer in [1, 10]"},
        {"--small=0", "--small=0 is not an integer in [1, 10]"},
        {"--nonneg=-1", "--nonneg=-1 is not an integer >= 0"},
    };
    for (size_t i = 0; i < MSR_ARRAY_SIZE(bad_i); i++) {
        MSR_CHECK_EQ(bound_parse(&c, bad_i[i].arg, NULL), MSR_OPTS_BAD);
        MSR_CHECK_MSG(strstr(msr_err_msg(), bad_i[i].why) != NULL, "%s: %s", bad_i[i].arg,
                      msr_err_msg());
    }
    MSR_CHECK_EQ(bound_parse(&c, "--small=10", "--nonneg=0"), MSR_OPTS_OK);
    MSR_CHECK(c.small == 10 && c.nonneg == 0);
    /* a group: one of it alone, not both; one on the line wins over the
     * other's variable; both variables are refused */
    MSR_CHECK_EQ(bound_parse(&c, "--a=x", NULL), MSR_OPTS_OK);
    MSR_CHECK(c.a != NULL && c.b == NULL);
    MSR_CHECK_EQ(bound_parse(&c, "--a=x", "--b=y"), MSR_OPTS_BAD);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "give --a or --b, not both") != NULL, "%s", msr_err_msg());
    setenv("TEST_BOUND_B", "y", 1);
    MSR_CHECK_EQ(bound_parse(&c, "--a=x", NULL), MSR_OPTS_OK);
    MSR_CHECK(c.a != NULL && strcmp(c.a, "x") == 0 && c.b == NULL);
    setenv("TEST_BOUND_A", "x", 1);
    MSR_CHECK_EQ(bound_parse(&c, "--small=1", NULL), MSR_OPTS_BAD);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "are both set") != NULL, "%s", msr_err_msg());
    unsetenv("TEST_BOUND_A");
    MSR_CHECK_EQ(bound_parse(&c, "--small=1", NULL), MSR_OPTS_OK);
    MSR_CHECK(c.a == NULL && c.b != NULL && strcmp(c.b, "y") == 0);
    unsetenv("TEST_BOUND_B");
    /* out of memory at each allocation in turn: refused, never taken */
    const char *alloc_args[] = {"--a=x", "--peer=h:80"};
    for (size_t a = 0; a < MSR_ARRAY_SIZE(alloc_args); a++) {
        for (long i = 0;; i++) {
            MSR_CHECK(i < 16);
            msr_alloc_fail_at(i);
            msr_opts_result_t r = bound_parse(&c, alloc_args[a], NULL);
            int failed = msr_alloc_failed();
            msr_alloc_fail_at(-1);
            if (!failed) {
                MSR_CHECK_EQ(r, MSR_OPTS_OK);
                break;
            }
            MSR_CHECK_MSG(r == MSR_OPTS_BAD, "%s taken with allocation %ld failed", alloc_args[a],
                          i);
        }
    }
    MSR_CHECK(c.peer != NULL && strcmp(c.peer, "h") == 0 && c.peer_port == 80);
    msr_opts_free(&bound_set, &c);
    /* help: 70 characters on one line, 71 wrapped at the last space */
    char text[4096] = "";
    FILE *f = fmemopen(text, sizeof text - 1, "w");
    MSR_CHECK(f != NULL);
    msr_opts_usage(&bound_set, f);
    fclose(f);
    MSR_CHECK_MSG(strstr(text, "\n      " HELP70 "\n") != NULL, "%s", text);
    MSR_CHECK_MSG(strstr(text, "\n      aaaaaaaaa bbbbbbbbb ccccccccc ddddddddd eeeeeeeee "
                               "fffffffff\n      ggggggggggh\n") != NULL,
                  "%s", text);
}

/* The kinds and usage styles train_gpt and plan_gpt need. */
typedef struct prog_cmd {
    double rate, factor;
    const char *text;
    int quiet;
    int64_t count;
} prog_cmd_t;

#define PD(field) MSR_OPT_DEST(prog_cmd_t, field)
static const msr_opt_t prog_table[] = {
    {.name = "count",
     .kind = MSR_OPT_INT,
     .min = 0,
     .max = 3,
     .dest = PD(count),
     .metavar = "N",
     .flags = MSR_OPT_USAGE_BARE,
     .help = "a count"},
    {.name = "rate",
     .kind = MSR_OPT_REAL,
     .real_min = 1e-6,
     .real_max = 10,
     .dest = PD(rate),
     .metavar = "R",
     .help = "a rate"},
    {.name = "factor",
     .kind = MSR_OPT_REAL,
     .real_min = 0,
     .real_max = 1e6,
     .dest = PD(factor),
     .flags = MSR_OPT_MIN_OPEN | MSR_OPT_USAGE_JOIN,
     .metavar = "F",
     .help = "a factor"},
    {.name = "text", .kind = MSR_OPT_TEXT, .dest = PD(text), .metavar = "T", .help = "a text"},
    {.name = "quiet",
     .kind = MSR_OPT_BOOL,
     .flags = MSR_OPT_NO_VALUE,
     .dest = PD(quiet),
     .help = "a flag"},
    {.name = "help", .kind = MSR_OPT_HELP, .help = "this text"},
};

static msr_opts_result_t prog_parse(prog_cmd_t *c, int argc, char **argv, msr_opts_style_t style)
{
    msr_optset_t set = {"prog", prog_table, MSR_ARRAY_SIZE(prog_table), 0, style};
    unsigned char seen[MSR_ARRAY_SIZE(prog_table)];
    int next = -1;
    return msr_opts_parse(&set, argc, argv, c, seen, &next);
}

void test_optparse_programs(void)
{
    prog_cmd_t c = {.rate = 1, .factor = 1, .text = "default"};
    char a0[] = "--rate", a1[] = "2.5", a2[] = "--factor=1e-300", a3[] = "--text", a4[] = "word",
         a5[] = "--quiet", a6[] = "-count", a7[] = "3";
    char *argv[] = {a0, a1, a2, a3, a4, a5, a6, a7};
    MSR_CHECK_EQ(prog_parse(&c, 8, argv, MSR_OPTS_USAGE_LINE), MSR_OPTS_OK);
    MSR_CHECK(c.rate == 2.5 && c.factor == 1e-300 && c.quiet == 1 && c.count == 3);
    MSR_CHECK(c.text == a4); /* kept, not copied: nothing to free */

    /* a value in an error is shown as it was given */
    char b0[] = "--rate", b1[] = "0", b2[] = "--rate=nan", b3[] = "--factor=0",
         b4[] = "--text=", b5[] = "--quiet=1", b6[] = "--count", b7[] = "x", b8[] = "--count=4",
         b9[] = "-help=1", b10[] = "word";
    char *bad[][2] = {{b0, b1}, {b2}, {b3}, {b4}, {b5}, {b6, b7}, {b8}, {b9}, {b10}, {b6}};
    int n[] = {2, 1, 1, 1, 1, 2, 1, 1, 1, 1};
    const char *why[] = {"--rate 0 is not a number in [1e-06, 10]",
                         "--rate=nan is not a number in [1e-06, 10]",
                         "--factor=0 is not a number in (0, 1e+06]",
                         "--text needs a non-empty value",
                         "--quiet takes no value",
                         "--count x is not an integer in [0, 3]",
                         "--count=4 is not an integer in [0, 3]",
                         "--help takes no value",
                         "unexpected argument 'word'",
                         "option --count needs a value (N)"};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(n); i++) {
        MSR_CHECK_EQ(prog_parse(&c, n[i], bad[i], MSR_OPTS_USAGE_LINE), MSR_OPTS_BAD);
        MSR_CHECK_MSG(strcmp(msr_err_msg(), why[i]) == 0, "%s", msr_err_msg());
    }
    /* the help row asks for the help, however spelled */
    char h0[] = "-help", h1[] = "-h";
    char *help[][1] = {{h0}, {h1}};
    for (int i = 0; i < 2; i++)
        MSR_CHECK_EQ(prog_parse(&c, 1, help[i], MSR_OPTS_USAGE_LINE), MSR_OPTS_HELP);

    char text[1024] = "";
    FILE *f = fmemopen(text, sizeof text - 1, "w");
    MSR_CHECK(f != NULL);
    msr_optset_t set = {"prog", prog_table, 5, 0, MSR_OPTS_USAGE_LINE};
    msr_opts_usage(&set, f);
    set.style = MSR_OPTS_USAGE_COLUMNS;
    set.count = 2;
    msr_opts_usage(&set, f);
    fclose(f);
    MSR_CHECK_STR(text, "usage: prog --count N [--rate R --factor F] [--text T] [--quiet]\n"
                        "  --count          a count\n"
                        "  --rate           a rate\n");
}
