/* A fresh directory for a unit test's files (tests/parallel/test_offload_*.c):
 * msr_test_dir_make(NAME) makes $TMPDIR/NAME.XXXXXX (/tmp without TMPDIR)
 * into msr_test_dir, removing the one an earlier call made; the last is
 * removed when the test's process ends (msr_test_at_end: the runner's
 * children skip atexit). A program includes this once. */
#ifndef MSRUN_TESTS_TMP_DIR_H
#define MSRUN_TESTS_TMP_DIR_H

#include <stdio.h>
#include <stdlib.h>

#include "tests/runner.h"

static char msr_test_dir[256];

static void msr_test_dir_remove(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", msr_test_dir);
    if (msr_test_dir[0] != '\0' && system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", msr_test_dir);
    msr_test_dir[0] = '\0';
}

static void msr_test_dir_make(const char *name)
{
    static int registered;
    const char *t = getenv("TMPDIR");
    msr_test_dir_remove();
    snprintf(msr_test_dir, sizeof msr_test_dir, "%s/%s.XXXXXX",
             t != NULL && t[0] != '\0' ? t : "/tmp", name);
    MSR_CHECK(mkdtemp(msr_test_dir) != NULL);
    if (!registered && msr_test_at_end(msr_test_dir_remove) == 0)
        registered = 1;
}

#endif
