/* Unit tests of msrun/token.c: generated tokens, token files (owner, mode,
 * links, content); and hiding a token in argv (base/optparse.c). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/optparse.h"
#include "base/status.h"
#include "launcher/token.h"
#include "tests/runner.h"

static char dir[64];

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/msrun-test-token.XXXXXX");
    MSR_CHECK(mkdtemp(dir) != NULL);
}

static void cleanup_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    MSR_CHECK(system(cmd) == 0);
}

/* Writes content to dir/name with mode; returns the path (static). */
static const char *put(const char *name, const char *content, mode_t mode)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    MSR_CHECK(fd >= 0);
    MSR_CHECK(write(fd, content, strlen(content)) == (ssize_t)strlen(content));
    MSR_CHECK(fchmod(fd, mode) == 0);
    close(fd);
    return path;
}

static void test_generate(void)
{
    char a[MSR_TOKEN_GEN_CHARS + 1], b[MSR_TOKEN_GEN_CHARS + 1];
    MSR_CHECK_OK(msr_token_generate(a, sizeof a));
    MSR_CHECK_OK(msr_token_generate(b, sizeof b));
    MSR_CHECK_EQ(strlen(a), MSR_TOKEN_GEN_CHARS);
    MSR_CHECK_EQ(strspn(a, "0123456789abcdef"), MSR_TOKEN_GEN_CHARS);
    MSR_CHECK(strcmp(a, b) != 0);
    MSR_CHECK(msr_token_valid(a));
    char small[MSR_TOKEN_GEN_CHARS];
    memset(small, 'x', sizeof small);
    MSR_CHECK_STATUS(msr_token_generate(small, sizeof small), MSR_ERR_INVALID_ARG);
    MSR_CHECK(small[0] == 'x'); /* written only on success */
}

static void test_valid(void)
{
    char longest[MSR_TOKEN_MAX + 2];
    memset(longest, 'a', sizeof longest);
    longest[MSR_TOKEN_MAX] = '\0';
    MSR_CHECK(msr_token_valid(longest));
    longest[MSR_TOKEN_MAX] = 'a';
    longest[MSR_TOKEN_MAX + 1] = '\0';
    MSR_CHECK(!msr_token_valid(longest));
    MSR_CHECK(!msr_token_valid(""));
    MSR_CHECK(!msr_token_valid("two words"));
    MSR_CHECK(!msr_token_valid("line\nbreak"));
    MSR_CHECK(msr_token_valid("base64+/=="));
}

static void test_read_file(void)
{
    char tok[MSR_TOKEN_MAX + 1] = "unchanged";
    make_dir();
    MSR_CHECK_OK(msr_token_read_file(put("ok", "s3cret\n", 0600), tok, sizeof tok));
    MSR_CHECK_STR(tok, "s3cret");
    /* a file written on Windows: the \r before the \n goes too, or alone */
    MSR_CHECK_OK(msr_token_read_file(put("crlf", "s3cret\r\n", 0600), tok, sizeof tok));
    MSR_CHECK_STR(tok, "s3cret");
    MSR_CHECK_OK(msr_token_read_file(put("cr", "s3cret\r", 0600), tok, sizeof tok));
    MSR_CHECK_STR(tok, "s3cret");
    MSR_CHECK_OK(msr_token_read_file(put("ro", "s3cret", 0400), tok, sizeof tok));
    MSR_CHECK_OK(msr_token_read_file(put("x", "s3cret", 0700), tok, sizeof tok)); /* owner's bits */
    /* any bit for the group or others, each alone (execute too): refused,
     * and says how to fix it */
    snprintf(tok, sizeof tok, "unchanged");
    static const mode_t loose[] = {0640, 0620, 0610, 0604, 0602, 0601, 0644, 0666};
    for (size_t i = 0; i < sizeof loose / sizeof loose[0]; i++) {
        MSR_CHECK_STATUS(msr_token_read_file(put("loose", "s3cret", loose[i]), tok, sizeof tok),
                         MSR_ERR_PERMISSION);
        MSR_CHECK_MSG(strstr(msr_err_msg(), "chmod 600") != NULL, "message: %s", msr_err_msg());
    }
    MSR_CHECK_STR(tok, "unchanged");
    /* a symbolic link to a good file: refused */
    char link_path[128];
    snprintf(link_path, sizeof link_path, "%s/link", dir);
    MSR_CHECK(symlink(put("target", "s3cret", 0600), link_path) == 0);
    MSR_CHECK_STATUS(msr_token_read_file(link_path, tok, sizeof tok), MSR_ERR_IO);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "symbolic link") != NULL, "message: %s", msr_err_msg());
    /* content: empty, spaces, two lines, too long; a directory; missing */
    MSR_CHECK_STATUS(msr_token_read_file(put("empty", "", 0600), tok, sizeof tok),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_token_read_file(put("sp", "a b\n", 0600), tok, sizeof tok),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_token_read_file(put("two", "a\nb\n", 0600), tok, sizeof tok),
                     MSR_ERR_INVALID_ARG);
    char big[MSR_TOKEN_MAX + 8];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    MSR_CHECK_STATUS(msr_token_read_file(put("big", big, 0600), tok, sizeof tok),
                     MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_token_read_file(dir, tok, sizeof tok), MSR_ERR_INVALID_ARG);
    snprintf(link_path, sizeof link_path, "%s/missing", dir);
    MSR_CHECK_STATUS(msr_token_read_file(link_path, tok, sizeof tok), MSR_ERR_IO);
    MSR_CHECK_STR(tok, "unchanged");
    cleanup_dir();
}

static void test_write_file(void)
{
    char tok[MSR_TOKEN_MAX + 1], path[128];
    make_dir();
    snprintf(path, sizeof path, "%s/new", dir);
    mode_t old = umask(0);
    msr_status_t st = msr_token_write_file(path, "abc123");
    umask(old);
    MSR_CHECK_OK(st);
    struct stat sb;
    MSR_CHECK(stat(path, &sb) == 0);
    MSR_CHECK_EQ(sb.st_mode & 07777, 0600);
    MSR_CHECK_OK(msr_token_read_file(path, tok, sizeof tok));
    MSR_CHECK_STR(tok, "abc123");
    /* never over an existing name, nor through a link */
    MSR_CHECK_STATUS(msr_token_write_file(path, "other"), MSR_ERR_IO);
    char link_path[128];
    snprintf(link_path, sizeof link_path, "%s/link", dir);
    MSR_CHECK(symlink("/nonexistent-target-of-a-planted-link", link_path) == 0);
    MSR_CHECK_STATUS(msr_token_write_file(link_path, "other"), MSR_ERR_IO);
    MSR_CHECK(access("/nonexistent-target-of-a-planted-link", F_OK) != 0);
    cleanup_dir();
}

static void test_scrub(void)
{
    char a[] = "--token=s3cret-value", b[] = "s3cret-value", c[] = "--token=ab", d[] = "x=y=z";
    msr_opts_scrub_arg(a, 1);
    MSR_CHECK_STR(a, "--token=***");
    MSR_CHECK(memchr(a, 's', sizeof a) == NULL);
    msr_opts_scrub_arg(b, 0);
    MSR_CHECK_STR(b, "***");
    MSR_CHECK(memchr(b, 'v', sizeof b) == NULL);
    msr_opts_scrub_arg(c, 1);
    MSR_CHECK_STR(c, "--token=**");
    msr_opts_scrub_arg(d, 0); /* a separate value may hold '=' */
    MSR_CHECK_STR(d, "***");
}

static const msr_test_t tests[] = {
    {"generate", test_generate, 10},   {"valid", test_valid, 10},
    {"read_file", test_read_file, 10}, {"write_file", test_write_file, 10},
    {"scrub", test_scrub, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
