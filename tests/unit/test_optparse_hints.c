/* The option parser's additions of issue 39: the did-you-mean of an
 * unknown option at each distance and name length, an integer option's
 * words, and an option given many times (mpirun's -x). */
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/optparse.h"
#include "base/status.h"
#include "base/util.h"
#include "tests/runner.h"

typedef struct hint_cmd {
    int count;
    int64_t wide;
    char **list;
    int flag;
} hint_cmd_t;

#define H(field) MSR_OPT_DEST(hint_cmd_t, field)

static const char *const words[] = {"auto", "gpu", "cpu", NULL};
static const msr_opt_t hint_table[] = {
    {.name = "local_worker_num",
     .aliases = {"nproc_per_node"},
     .kind = MSR_OPT_INT,
     .min = 1,
     .max = INT32_MAX,
     .choices = words,
     .dest = H(count),
     .help = "h"},
    {.name = "wide",
     .kind = MSR_OPT_INT,
     .min = 0,
     .max = 100,
     .choices = words,
     .dest = H(wide),
     .help = "h"},
    {.name = "export", .aliases = {"x"}, .kind = MSR_OPT_LIST, .dest = H(list), .help = "h"},
    {.name = "abc", .kind = MSR_OPT_BOOL, .dest = H(flag), .help = "h"},
};
static const msr_optset_t hint_set = {"hint", hint_table, MSR_ARRAY_SIZE(hint_table), 1};

/* Parses argv (n words) into a fresh *c. */
static msr_opts_result_t parse(hint_cmd_t *c, int n, const char **words_in)
{
    static char buf[8][128];
    char *argv[8];
    for (int i = 0; i < n; i++) {
        snprintf(buf[i], sizeof buf[i], "%s", words_in[i]);
        argv[i] = buf[i];
    }
    unsigned char seen[MSR_ARRAY_SIZE(hint_table)];
    int next = 0;
    msr_opts_free(&hint_set, c);
    memset(c, 0, sizeof *c);
    return msr_opts_parse(&hint_set, n, argv, c, seen, &next);
}

/* The error for an unknown option arg: its hint must be want (NULL: none). */
static void check_hint(const char *arg, const char *want)
{
    hint_cmd_t c = {0};
    const char *argv[] = {arg, "prog"};
    MSR_CHECK_MSG(parse(&c, 2, argv) == MSR_OPTS_BAD, "%s taken", arg);
    const char *msg = msr_err_msg();
    if (want)
        MSR_CHECK_MSG(strstr(msg, want) != NULL, "%s: '%s', want '%s'", arg, msg, want);
    else
        MSR_CHECK_MSG(strstr(msg, "did you mean") == NULL, "%s: '%s' has a hint", arg, msg);
    msr_opts_free(&hint_set, &c);
}

static void test_did_you_mean(void)
{
    /* long names: distance 1 and 2 answered, 3 not */
    check_hint("--local_worker_nu", "(did you mean --local_worker_num?)"); /* 1 */
    check_hint("--locl_worker_nu", "(did you mean --local_worker_num?)");  /* 2 */
    check_hint("--lcl_worker_nu", NULL);                                   /* 3 */
    check_hint("--nproc-per-nodes", "(did you mean --nproc-per-node?)");   /* '-' kept */
    check_hint("--exprot", "(did you mean --export?)");                    /* 2 */
    /* a start of 3 characters or more, however far */
    check_hint("--local", "(did you mean --local_worker_num?)");
    check_hint("--nproc", "(did you mean --nproc_per_node?)");
    /* 3 or 4 characters: distance 1 only; fewer: none */
    check_hint("--abd", "(did you mean --abc?)");
    check_hint("--axd", NULL);
    check_hint("--wid", "(did you mean --wide?)"); /* a start */
    check_hint("--wxde", "(did you mean --wide?)");
    check_hint("--wxdx", NULL);
    check_hint("-y", NULL); /* 1 from "x", but too short to guess */
    check_hint("--zzzzzzzz", NULL);
    /* a name longer than the distance's buffer: no hint, no overflow */
    check_hint("--local_worker_num_local_worker_num_local_worker_num_local_worker_num_x", NULL);
}

static void test_int_words(void)
{
    hint_cmd_t c = {0};
    const char *a[] = {"--nproc_per_node=auto"}, *g[] = {"--local_worker_num", "gpu"},
               *p[] = {"--nproc_per_node=cpu"}, *n[] = {"--nproc_per_node=1"};
    MSR_CHECK_EQ(parse(&c, 1, a), MSR_OPTS_OK);
    MSR_CHECK_EQ(c.count, -1);
    MSR_CHECK_EQ(parse(&c, 2, g), MSR_OPTS_OK);
    MSR_CHECK_EQ(c.count, -2);
    MSR_CHECK_EQ(parse(&c, 1, p), MSR_OPTS_OK);
    MSR_CHECK_EQ(c.count, -3);
    MSR_CHECK_EQ(parse(&c, 1, n), MSR_OPTS_OK);
    MSR_CHECK_EQ(c.count, 1);
    /* the bound still holds; the error lists the words */
    const char *z[] = {"--nproc_per_node=0"}, *w[] = {"--nproc_per_node=gpus"},
               *wz[] = {"--wide=101"}, *wa[] = {"--wide=cpu"};
    MSR_CHECK_EQ(parse(&c, 1, z), MSR_OPTS_BAD);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "--local_worker_num=0 is not a positive integer or one "
                                        "of auto, gpu, cpu") != NULL,
                  "%s", msr_err_msg());
    MSR_CHECK_EQ(parse(&c, 1, w), MSR_OPTS_BAD);
    MSR_CHECK_EQ(parse(&c, 1, wz), MSR_OPTS_BAD);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "--wide=101 is not an integer >= 0 or one of auto, gpu, "
                                        "cpu") != NULL,
                  "%s", msr_err_msg());
    MSR_CHECK_EQ(parse(&c, 1, wa), MSR_OPTS_OK);
    MSR_CHECK_EQ(c.wide, -3); /* a 64-bit field */
    msr_opts_free(&hint_set, &c);
}

static void test_list(void)
{
    hint_cmd_t c = {0};
    const char *x[] = {"-x", "A=1", "--export=B", "-x", "C=x=y"};
    MSR_CHECK_EQ(parse(&c, 5, x), MSR_OPTS_OK);
    MSR_CHECK(c.list != NULL);
    MSR_CHECK(strcmp(c.list[0], "A=1") == 0 && strcmp(c.list[1], "B") == 0 &&
              strcmp(c.list[2], "C=x=y") == 0 && c.list[3] == NULL);
    const char *e[] = {"-x="};
    MSR_CHECK_EQ(parse(&c, 1, e), MSR_OPTS_BAD);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "needs a non-empty value") != NULL, "%s", msr_err_msg());
    const char *none[] = {"prog"};
    MSR_CHECK_EQ(parse(&c, 1, none), MSR_OPTS_OK);
    MSR_CHECK(c.list == NULL);
    msr_opts_free(&hint_set, &c);
    MSR_CHECK(c.list == NULL);
}

static const msr_test_t tests[] = {
    {"did_you_mean", test_did_you_mean, 5},
    {"int_words", test_int_words, 5},
    {"list", test_list, 5},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
