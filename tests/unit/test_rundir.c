/* Unit tests of msrun/rundir.c: the command a record keeps (shortened at
 * exactly its bound), and the user, uid, command and dashboard fields
 * written and read back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "launcher/rundir.h"
#include "tests/runner.h"

/* argv of one word of n bytes ('x') */
static void format_one(size_t n, char *out, size_t len)
{
    char *word = malloc(n + 1);
    MSR_CHECK(word != NULL);
    memset(word, 'x', n);
    word[n] = '\0';
    char *argv[] = {word, NULL};
    msr_run_command_format(argv, out, len);
    free(word);
}

static void test_command_bound(void)
{
    char out[MSR_RUN_COMMAND_LEN];
    /* at the bound: 159 bytes and the NUL fit whole */
    format_one(MSR_RUN_COMMAND_LEN - 1, out, sizeof out);
    MSR_CHECK_EQ(strlen(out), MSR_RUN_COMMAND_LEN - 1);
    MSR_CHECK(strchr(out, '.') == NULL);
    /* one past: cut, "..." at the end, still 159 bytes */
    format_one(MSR_RUN_COMMAND_LEN, out, sizeof out);
    MSR_CHECK_EQ(strlen(out), MSR_RUN_COMMAND_LEN - 1);
    MSR_CHECK(strcmp(out + MSR_RUN_COMMAND_LEN - 4, "...") == 0);
    /* words joined by spaces, control characters as '?' (a tab quotes its word) */
    char *argv[] = {"python3", "train.py", "--note", "a\nb\tc", NULL};
    msr_run_command_format(argv, out, sizeof out);
    MSR_CHECK_STR(out, "python3 train.py --note 'a?b?c'");
    char *spaced[] = {"prog", "b c", "", NULL}; /* quoted as a shell needs them */
    msr_run_command_format(spaced, out, sizeof out);
    MSR_CHECK_STR(out, "prog 'b c' ''");
    char *none[] = {NULL};
    msr_run_command_format(none, out, sizeof out);
    MSR_CHECK_STR(out, "");
}

static void test_record_fields(void)
{
    char dir[64] = "/tmp/msrun-test-rundir.XXXXXX";
    MSR_CHECK(mkdtemp(dir) != NULL);
    MSR_CHECK(setenv("XDG_RUNTIME_DIR", dir, 1) == 0);
    msr_run_record_t r = {.job_id = "j",
                          .coordinator = "127.0.0.1:5",
                          .token = "t",
                          .pid = (int)getpid(),
                          .node_rank = -1,
                          .start_time = 1.0,
                          .command = "python3 train.py",
                          .dashboard = "http://127.0.0.1:8265/",
                          .uid = 12345, /* ignored: getuid() is written */
                          .user = "someone"};
    char path[MSR_RUN_RECORD_PATH_LEN];
    MSR_CHECK_OK(msr_run_record_write(&r, path, sizeof path));
    msr_run_entry_t *e = NULL;
    size_t n = 0;
    MSR_CHECK_OK(msr_run_records_list(&e, &n));
    MSR_CHECK_EQ(n, 1);
    MSR_CHECK(e[0].rec.has_uid && e[0].rec.uid == (unsigned)getuid());
    MSR_CHECK(e[0].rec.user != NULL && e[0].rec.user[0] != '\0');
    MSR_CHECK(strcmp(e[0].rec.user, "someone") != 0);
    MSR_CHECK_STR(e[0].rec.command, "python3 train.py");
    MSR_CHECK_STR(e[0].rec.dashboard, "http://127.0.0.1:8265/");
    msr_run_entries_free(e, n);
    /* a newline in the command is refused: a record is one value a line */
    r.command = "a\nuid=0";
    MSR_CHECK_STATUS(msr_run_record_write(&r, path, sizeof path), MSR_ERR_INVALID_ARG);
    msr_run_record_remove(path);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    MSR_CHECK(system(cmd) == 0);
}

static const msr_test_t tests[] = {
    {"command_bound", test_command_bound, 10},
    {"record_fields", test_record_fields, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
