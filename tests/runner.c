/* The test runner: each test in its own process group, with a timeout. */
#include "tests/runner.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "msrun/base.h"

/* The children end with _exit, which skips LeakSanitizer's check at exit:
 * under ASan a child that passed asks for it itself (ASAN_OPTIONS'
 * detect_leaks=0 still turns it off). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
static int leaks_found(void)
{
    if (__lsan_do_recoverable_leak_check() == 0)
        return 0;
    fprintf(stderr, "FAIL: LeakSanitizer found leaks (above)\n");
    return 1;
}
#else
static int leaks_found(void)
{
    return 0;
}
#endif

static void (*at_end[16])(void);
static int at_end_n;

int msr_test_at_end(void (*fn)(void))
{
    if (at_end_n == (int)(sizeof at_end / sizeof at_end[0])) {
        fn();
        return -1;
    }
    at_end[at_end_n++] = fn;
    return 0;
}

/* The functions msr_test_at_end registered, latest first, each once. */
static void run_at_end(void)
{
    while (at_end_n > 0)
        at_end[--at_end_n]();
}

void msr_test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    run_at_end();
    _exit(1);
}

int msr_test_cpuinfo_has(const char *flag)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return -1;
    char line[8192];
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, f) != NULL) {
        char *colon = strchr(line, ':'), *save = NULL;
        if (strncmp(line, "flags", 5) != 0 || colon == NULL)
            continue;
        found = 0;
        for (char *t = strtok_r(colon + 1, " \n", &save); t != NULL;
             t = strtok_r(NULL, " \n", &save))
            found |= strcmp(t, flag) == 0;
    }
    fclose(f);
    return found;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs test (void: exits 0 unless a check fails) or fn (exits with what it
 * returns) in a child of its own process group, killed with the group after
 * timeout seconds; *took the seconds it ran. Returns its wait status, -1
 * when fork or waitpid failed (said), -2 when it timed out. */
static int run_child(void (*test)(void), int (*fn)(void), int timeout, double *took)
{
    double start = now_s();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        int rc = 0;
        if (fn != NULL)
            rc = fn();
        else
            test();
        run_at_end();
        if (rc == 0 && leaks_found())
            rc = 1;
        fflush(stdout);
        _exit(rc);
    }
    setpgid(pid, pid);
    int status = 0, timed_out = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            perror("waitpid");
            kill(-pid, SIGKILL);
            return -1;
        }
        if (now_s() - start > timeout) {
            timed_out = 1;
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    /* Whatever the child left in its process group goes too. */
    kill(-pid, SIGKILL);
    *took = now_s() - start;
    return timed_out ? -2 : status;
}

int msr_test_run_in_child(int (*fn)(void), int timeout_s)
{
    double took;
    int status = run_child(NULL, fn, timeout_s, &took);
    if (status == -1)
        return 1;
    if (status == -2) {
        printf("FAIL: timed out after %d s in a child\n", timeout_s);
        return 1;
    }
    if (WIFSIGNALED(status)) {
        printf("FAIL: a child was killed by signal %d\n", WTERMSIG(status));
        return 1;
    }
    return WEXITSTATUS(status);
}

static int run_one(const msr_test_t *t)
{
    int timeout = t->timeout_s > 0 ? t->timeout_s : 30;
    double took = 0;
    int status = run_child(t->fn, NULL, timeout, &took);
    if (status == -1)
        return 1;
    if (status == -2) {
        printf("FAIL %-40s timed out after %d s\n", t->name, timeout);
        return 1;
    }
    if (WIFSIGNALED(status)) {
        printf("FAIL %-40s killed by signal %d (%.2f s)\n", t->name, WTERMSIG(status), took);
        return 1;
    }
    if (WEXITSTATUS(status) != 0) {
        printf("FAIL %-40s (%.2f s)\n", t->name, took);
        return 1;
    }
    printf("ok   %-40s (%.2f s)\n", t->name, took);
    return 0;
}

int msr_test_main(int argc, char **argv, const msr_test_t *tests, size_t n)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    int failed = 0, ran = 0, unknown = 0;
    for (size_t i = 0; i < n; i++) {
        int wanted = argc < 2;
        for (int k = 1; k < argc && !wanted; k++)
            wanted = strcmp(argv[k], tests[i].name) == 0;
        if (!wanted)
            continue;
        ran++;
        failed += run_one(&tests[i]);
    }
    for (int k = 1; k < argc; k++) {
        int known = 0;
        for (size_t i = 0; i < n; i++)
            known |= strcmp(argv[k], tests[i].name) == 0;
        if (!known) {
            printf("FAIL unknown test '%s' (--list names them)\n", argv[k]);
            unknown++;
        }
    }
    printf("%d of %d tests passed", ran - failed, ran);
    if (unknown)
        printf(", %d unknown test name%s", unknown, unknown > 1 ? "s" : "");
    printf("\n");
    return failed || unknown ? 1 : 0;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int msr_test_main_in_dir(int argc, char **argv, const msr_test_t *tests, size_t n, char *dir,
                         size_t dir_len, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, dir_len, "%.40s/%s.XXXXXX", tmp != NULL && *tmp ? tmp : "/tmp", name);
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    int rc = msr_test_main(argc, argv, tests, n);
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
