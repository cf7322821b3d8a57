/* Unit tests of msrun's one spawn path (msrun/spawn.c), with real
 * processes: what the child gets (environment, stdio, process group, fds),
 * and what the parent learns when the child cannot start; and the same of
 * msr_spawn_fork, whose child runs a function instead of a program. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/time.h"
#include "launcher/spawn.h"
#include "tests/runner.h"

/* A file in a private temporary directory, removed by the caller. */
static void temp_path(char *buf, size_t len, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, len, "%s/msrun-spawn-%d-%s", tmp && *tmp ? tmp : "/tmp", (int)getpid(), name);
}

/* Runs argv with its stdout into a file and returns the file's content
 * (static buffer) once the child exited 0. */
static const char *run_capture(msr_spawn_options_t *o)
{
    static char out[8192];
    char path[256];
    temp_path(path, sizeof path, "out");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    MSR_CHECK(fd >= 0);
    o->stdio[1].how = MSR_SPAWN_FD;
    o->stdio[1].fd = fd;
    pid_t pid;
    MSR_CHECK_OK(msr_spawn(o, &pid));
    close(fd);
    int status;
    MSR_CHECK(waitpid(pid, &status, 0) == pid);
    MSR_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    MSR_CHECK(fd >= 0);
    ssize_t n = read(fd, out, sizeof out - 1);
    MSR_CHECK(n >= 0);
    out[n] = '\0';
    close(fd);
    unlink(path);
    return out;
}

static void test_exec_failure(void)
{
    char *argv[] = {"nothing-here", NULL};
    msr_spawn_options_t o = {.path = "/nonexistent/nothing-here", .argv = argv, .extra_fd = -1};
    pid_t pid = -1;
    msr_err_clear();
    MSR_CHECK_STATUS(msr_spawn(&o, &pid), MSR_ERR_NOT_FOUND);
    MSR_CHECK(pid == -1);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "cannot execute '/nonexistent/nothing-here'") &&
                      strstr(msr_err_msg(), strerror(ENOENT)),
                  "message: %s", msr_err_msg());
    /* the failed child was reaped: no child is left */
    MSR_CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);

    /* not executable: EACCES, as a permission error */
    char path[256];
    temp_path(path, sizeof path, "noexec");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    MSR_CHECK(fd >= 0);
    close(fd);
    o.path = path;
    MSR_CHECK_STATUS(msr_spawn(&o, &pid), MSR_ERR_PERMISSION);
    unlink(path);
}

/* A failure before exec names its step. */
static void test_setup_failure(void)
{
    char *argv[] = {"true", NULL};
    msr_spawn_options_t o = {
        .path = "/bin/true", .argv = argv, .extra_fd = -1, .cwd = "/nonexistent/dir"};
    pid_t pid;
    MSR_CHECK_STATUS(msr_spawn(&o, &pid), MSR_ERR_NOT_FOUND);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "cannot start '/bin/true': chdir:"), "message: %s",
                  msr_err_msg());
    o.cwd = NULL;
    o.stdio[0].how = MSR_SPAWN_FD;
    o.stdio[0].fd = 1000; /* not open */
    MSR_CHECK_STATUS(msr_spawn(&o, &pid), MSR_ERR_SYSTEM);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "fcntl"), "message: %s", msr_err_msg());
    o.stdio[0].how = MSR_SPAWN_INHERIT;
    o.extra_fd = 0;
    o.extra_fd_as = 1;
    MSR_CHECK_STATUS(msr_spawn(&o, &pid), MSR_ERR_INVALID_ARG);
    MSR_CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
}

/* The environment is exactly the one given, and the helper that builds it
 * drops and adds as asked. */
static void test_environment(void)
{
    char *argv[] = {"env", NULL};
    char *envp[] = {"A=1", "B=two words", NULL};
    msr_spawn_options_t o = {.path = "/usr/bin/env", .argv = argv, .envp = envp, .extra_fd = -1};
    MSR_CHECK_STR(run_capture(&o), "A=1\nB=two words\n");

    char *base[] = {"KEEP=1", "MSRUN_TOKEN=old", "MSRUN_TOKEN_FILE=/f", "MSRUN_TOKENX=2", NULL};
    const char *drop[] = {"MSRUN_TOKEN", "MSRUN_TOKEN_FILE", NULL};
    const char *add[] = {"MSRUN_TOKEN=new", NULL};
    char **built = msr_spawn_env(base, drop, add);
    MSR_CHECK(built != NULL);
    o.envp = built;
    MSR_CHECK_STR(run_capture(&o), "KEEP=1\nMSRUN_TOKENX=2\nMSRUN_TOKEN=new\n");
    msr_spawn_env_free(built);
}

/* stdin from /dev/null, and the extra fd where it was asked for. */
static void test_stdio(void)
{
    char *argv[] = {"readlink", "/proc/self/fd/0", NULL};
    msr_spawn_options_t o = {.path = "/usr/bin/readlink", .argv = argv, .extra_fd = -1};
    o.stdio[0].how = MSR_SPAWN_DEVNULL;
    MSR_CHECK_STR(run_capture(&o), "/dev/null\n");

    /* the extra fd's source is fd 0 itself: placing it must not lose it */
    int p[2];
    MSR_CHECK(pipe2(p, O_CLOEXEC) == 0);
    char *argv2[] = {"sh", "-c", "echo ready >&3", NULL};
    msr_spawn_options_t o2 = {.path = "/bin/sh", .argv = argv2, .extra_fd = p[1], .extra_fd_as = 3};
    o2.stdio[0].how = MSR_SPAWN_DEVNULL;
    MSR_CHECK_STR(run_capture(&o2), "");
    close(p[1]);
    char buf[32] = "";
    MSR_CHECK(read(p[0], buf, sizeof buf - 1) == 6);
    MSR_CHECK_STR(buf, "ready\n");
    close(p[0]);
}

/* Only stdio and the extra fd reach the child: none of msr_spawn's own
 * (the error pipe, /dev/null, the copies made while placing fds). */
static void test_no_fd_leaks(void)
{
    /* ls lists its own fds: those it got, and the one it reads the list on */
    char *argv[] = {"ls", "-1", "/proc/self/fd", NULL};
    msr_spawn_options_t o = {.path = "/bin/ls", .argv = argv, .extra_fd = -1};
    char plain[512];
    snprintf(plain, sizeof plain, "\n%s", run_capture(&o));
    o.stdio[0].how = MSR_SPAWN_DEVNULL;
    o.stdio[2].how = MSR_SPAWN_DEVNULL;
    char again[512];
    snprintf(again, sizeof again, "\n%s", run_capture(&o));
    MSR_CHECK_STR(again, plain);
    int p[2];
    MSR_CHECK(pipe2(p, O_CLOEXEC) == 0);
    o.extra_fd = p[1];
    o.extra_fd_as = 9;
    char with[512];
    snprintf(with, sizeof with, "\n%s", run_capture(&o));
    close(p[0]);
    close(p[1]);
    /* the same fds plus 9 */
    char *nine = strstr(with, "\n9\n");
    MSR_CHECK_MSG(nine != NULL, "fds '%s' lack 9", with);
    memmove(nine, nine + 2, strlen(nine + 2) + 1);
    MSR_CHECK_MSG(strcmp(with, plain) == 0, "fds '%s' besides 9, want '%s'", with, plain);
}

/* The child leads its own group (so one kill reaches its whole tree), and
 * starts with default dispositions even when this process ignores one. */
static void test_group_and_signals(void)
{
    signal(SIGTERM, SIG_IGN);
    char *argv[] = {"sleep", "30", NULL};
    msr_spawn_options_t o = {.path = "/bin/sleep", .argv = argv, .extra_fd = -1, .new_group = 1};
    pid_t pid;
    MSR_CHECK_OK(msr_spawn(&o, &pid));
    MSR_CHECK_EQ(getpgid(pid), pid);
    MSR_CHECK(kill(-pid, SIGTERM) == 0);
    int status;
    MSR_CHECK(waitpid(pid, &status, 0) == pid);
    MSR_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    signal(SIGTERM, SIG_DFL);
}

/* The parent-death signal: the child dies with the process that spawned it. */
static void test_death_signal(void)
{
    int p[2];
    MSR_CHECK(pipe(p) == 0);
    pid_t mid = fork();
    MSR_CHECK(mid >= 0);
    if (mid == 0) {
        char *argv[] = {"sleep", "30", NULL};
        msr_spawn_options_t o = {
            .path = "/bin/sleep", .argv = argv, .extra_fd = -1, .death_signal = SIGKILL};
        pid_t pid = -1;
        if (msr_spawn(&o, &pid) != MSR_OK)
            _exit(1);
        ssize_t w = write(p[1], &pid, sizeof pid);
        _exit(w == (ssize_t)sizeof pid ? 0 : 1);
    }
    close(p[1]);
    pid_t child = -1;
    MSR_CHECK(read(p[0], &child, sizeof child) == (ssize_t)sizeof child);
    close(p[0]);
    int status;
    MSR_CHECK(waitpid(mid, &status, 0) == mid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* gone, or a zombie of whoever adopted it: never still sleeping */
    for (int i = 0; i < 500; i++) {
        char path[64], stat[256] = "";
        snprintf(path, sizeof path, "/proc/%d/stat", (int)child);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            return;
        size_t n = fread(stat, 1, sizeof stat - 1, f);
        fclose(f);
        stat[n] = '\0';
        const char *rp = strrchr(stat, ')');
        if (rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'))
            return;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    kill(child, SIGKILL);
    MSR_CHECK_MSG(0, "pid %d outlived the process that spawned it", (int)child);
}

/* The child shares the parent's memory until exec instead of a copy of its
 * page tables: after a spawn, rewriting memory the parent had touched
 * takes no copy-on-write fault (a fork makes every one of those pages
 * fault once, which is what made each worker's start cost milliseconds in
 * a large msrun). */
static void test_no_copy_on_write(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    printf("skip: sanitized builds spawn by fork (msrun/spawn.c)\n");
    return;
#endif
    enum { PAGES = 16384 };
    long page = sysconf(_SC_PAGESIZE);
    size_t bytes = (size_t)PAGES * (size_t)page;
    unsigned char *mem =
        mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    MSR_CHECK(mem != MAP_FAILED);
    madvise(mem, bytes, MADV_NOHUGEPAGE); /* one fault per page, not per huge page */
    memset(mem, 1, bytes);
    char *argv[] = {"true", NULL};
    msr_spawn_options_t o = {.path = "/bin/true", .argv = argv, .extra_fd = -1};
    pid_t pid;
    MSR_CHECK_OK(msr_spawn(&o, &pid));
    int status;
    MSR_CHECK(waitpid(pid, &status, 0) == pid);
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    memset(mem, 2, bytes);
    getrusage(RUSAGE_SELF, &after);
    munmap(mem, bytes);
    long faults = after.ru_minflt - before.ru_minflt;
    MSR_CHECK_MSG(faults < PAGES / 4, "%ld faults rewriting %d pages after a spawn", faults, PAGES);
}

/* msr_spawn_wait sleeps until the child exits, not in periods: waiting
 * 300 ms for a child takes a wakeup or two, where a 10 ms poll took 30.
 * And it returns at its deadline while the child runs on (0 ms: at once). */
static void test_wait_wakes_on_exit(void)
{
    char *argv[] = {"sleep", "0.3", NULL};
    msr_spawn_options_t o = {.path = "/bin/sleep", .argv = argv, .extra_fd = -1};
    pid_t pid;
    MSR_CHECK_OK(msr_spawn(&o, &pid));
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) { /* before Linux 5.3: the polling fallback */
        printf("skip: no pidfd_open (%s)\n", strerror(errno));
        MSR_CHECK(msr_spawn_wait(pid, 10000) == 1);
        return;
    }
    close(pidfd);
    struct rusage before, after;
    getrusage(RUSAGE_THREAD, &before);
    MSR_CHECK(msr_spawn_wait(pid, 10000) == 1);
    getrusage(RUSAGE_THREAD, &after);
    long wakeups = after.ru_nvcsw - before.ru_nvcsw;
    MSR_CHECK_MSG(wakeups <= 3, "%ld wakeups waiting for one exit", wakeups);
    MSR_CHECK(msr_spawn_wait(pid, 0) == 1); /* reaped: no longer a child */

    char *argv2[] = {"sleep", "30", NULL};
    o.argv = argv2;
    MSR_CHECK_OK(msr_spawn(&o, &pid));
    MSR_CHECK(msr_spawn_wait(pid, 0) == 0);
    MSR_CHECK(msr_spawn_wait(pid, 50) == 0);
    kill(pid, SIGKILL);
    MSR_CHECK(msr_spawn_wait(pid, 10000) == 1);
}

/* A process forked by another thread while msr_spawn runs holds a copy
 * of its report pipe's write end until it exits (close-on-exec closes it
 * only at an exec). msr_spawn must not wait for that copy, as a blocking
 * read of the report did: the agent's event loop was held as long. Here a
 * thread forks children that keep their copies 2 s while this one spawns
 * /bin/true 20 times: each spawn returns well within those 2 s, and an
 * exec failure is still reported with its errno. */
typedef struct forker {
    volatile int stop;
    int forks;
} forker_t;

static void *fork_holders(void *arg)
{
    forker_t *f = arg;
    while (!f->stop && f->forks < 200) {
        pid_t p = fork();
        if (p == 0) {
            struct timespec hold = {2, 0};
            nanosleep(&hold, NULL);
            _exit(0);
        }
        f->forks += p > 0;
        struct timespec gap = {0, 200 * 1000};
        nanosleep(&gap, NULL);
    }
    return NULL;
}

static void test_report_not_held_by_forks(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    printf("skip: sanitized builds spawn by fork, whose report is waited for (msrun/spawn.c)\n");
    return;
#endif
    forker_t f = {0};
    pthread_t t;
    MSR_CHECK(pthread_create(&t, NULL, fork_holders, &f) == 0);
    char *argv[] = {"true", NULL};
    msr_spawn_options_t o = {.path = "/bin/true", .argv = argv, .extra_fd = -1};
    int64_t slowest_ms = 0;
    for (int i = 0; i < 20; i++) {
        uint64_t t0 = msr_now_ns();
        pid_t pid;
        MSR_CHECK_OK(msr_spawn(&o, &pid));
        int64_t ms = (int64_t)((msr_now_ns() - t0) / 1000000);
        slowest_ms = ms > slowest_ms ? ms : slowest_ms;
        MSR_CHECK(waitpid(pid, NULL, 0) == pid);
    }
    char *bad_argv[] = {"nothing-here", NULL};
    msr_spawn_options_t bad = {
        .path = "/nonexistent/nothing-here", .argv = bad_argv, .extra_fd = -1};
    pid_t pid;
    MSR_CHECK_EQ(msr_spawn(&bad, &pid), MSR_ERR_NOT_FOUND);
    MSR_CHECK_MSG(strstr(msr_err_msg(), "No such file or directory") != NULL, "%s", msr_err_msg());
    f.stop = 1;
    pthread_join(t, NULL);
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
        ;
    MSR_CHECK(f.forks > 0);
    MSR_CHECK_MSG(slowest_ms < 1000, "a spawn took %lld ms beside %d forks holding 2 s",
                  (long long)slowest_ms, f.forks);
}

/* msr_spawn_fork's child: reports on fd 9 what it got, exits 7. */
static int forked_report(void *arg)
{
    const int *fds = arg; /* a close-on-exec fd and a plain one of the parent */
    char link[64] = "";
    ssize_t n = readlink("/proc/self/fd/0", link, sizeof link - 1);
    link[n > 0 ? n : 0] = '\0';
    const char *a = getenv("A");
    char line[256];
    int len =
        snprintf(line, sizeof line, "A=%s KEEP=%s stdin=%s cloexec=%s plain=%s\n", a ? a : "-",
                 getenv("KEEP") ? "set" : "-", link, fcntl(fds[0], F_GETFD) < 0 ? "closed" : "open",
                 fcntl(fds[1], F_GETFD) < 0 ? "closed" : "open");
    return write(9, line, (size_t)len) == len ? 7 : 1;
}

/* This process's threads (a thread sanitizer adds one of its own). */
static int threads_now(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    MSR_CHECK(f != NULL);
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    fclose(f);
    return n;
}

/* msr_spawn_fork: the child runs the function with everything msr_spawn
 * gives a child, and what exec would do: the given environment, every
 * close-on-exec fd closed, the rest kept. */
static void test_fork_runs_function(void)
{
    if (threads_now() != 1) {
        printf("skip: this process has %d threads before any test's\n", threads_now());
        return;
    }
    int fds[2];
    fds[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    fds[1] = open("/dev/null", O_RDONLY);
    MSR_CHECK(fds[0] >= 0 && fds[1] >= 0);
    int p[2];
    MSR_CHECK(pipe2(p, O_CLOEXEC) == 0);
    char *envp[] = {"A=1", NULL};
    msr_spawn_options_t o = {
        .path = "forked", .envp = envp, .extra_fd = p[1], .extra_fd_as = 9, .new_group = 1};
    o.stdio[0].how = MSR_SPAWN_DEVNULL;
    setenv("KEEP", "1", 1);
    pid_t pid;
    MSR_CHECK_OK(msr_spawn_fork(&o, forked_report, fds, &pid));
    close(p[1]);
    char got[256];
    ssize_t n = read(p[0], got, sizeof got - 1);
    MSR_CHECK(n > 0);
    got[n] = '\0';
    close(p[0]);
    int status;
    MSR_CHECK(waitpid(pid, &status, 0) == pid);
    MSR_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 7, "child status %d", status);
    MSR_CHECK_STR(got, "A=1 KEEP=- stdin=/dev/null cloexec=closed plain=open\n");
    close(fds[0]);
    close(fds[1]);
}

static int forked_exit(void *arg)
{
    (void)arg;
    return 3;
}

static void *blocked_thread(void *arg)
{
    char c;
    return read(*(int *)arg, &c, 1) < 0 ? NULL : arg;
}

/* A copy of a process with threads would hold the others' locks: with a
 * second thread running, msr_spawn_fork starts nothing and says so; once
 * it is gone, it forks. */
static void test_fork_refuses_threads(void)
{
    int base = threads_now();
    int p[2];
    MSR_CHECK(pipe2(p, O_CLOEXEC) == 0);
    pthread_t t;
    MSR_CHECK(pthread_create(&t, NULL, blocked_thread, &p[0]) == 0);
    msr_spawn_options_t o = {.path = "forked", .extra_fd = -1};
    pid_t pid = -1;
    msr_err_clear();
    MSR_CHECK_STATUS(msr_spawn_fork(&o, forked_exit, NULL, &pid), MSR_ERR_UNSUPPORTED);
    MSR_CHECK(pid == -1);
    char want[32];
    snprintf(want, sizeof want, "%d threads", base + 1);
    MSR_CHECK_MSG(strstr(msr_err_msg(), want), "message: %s", msr_err_msg());
    MSR_CHECK(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
    MSR_CHECK(write(p[1], "x", 1) == 1);
    MSR_CHECK(pthread_join(t, NULL) == 0);
    close(p[0]);
    close(p[1]);
    if (base != 1) {
        printf("skip: this process has %d threads before any test's\n", base);
        return;
    }
    /* a joined thread leaves the kernel's count a moment after the join */
    for (int i = 0; i < 5000 && threads_now() != base; i++)
        usleep(1000);
    MSR_CHECK_OK(msr_spawn_fork(&o, forked_exit, NULL, &pid));
    int status;
    MSR_CHECK(waitpid(pid, &status, 0) == pid);
    MSR_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 3, "child status %d", status);
}

static const msr_test_t tests[] = {
    {"exec_failure", test_exec_failure, 10},
    {"setup_failure", test_setup_failure, 10},
    {"environment", test_environment, 10},
    {"stdio", test_stdio, 10},
    {"no_fd_leaks", test_no_fd_leaks, 10},
    {"group_and_signals", test_group_and_signals, 40},
    {"death_signal", test_death_signal, 20},
    {"no_copy_on_write", test_no_copy_on_write, 20},
    {"wait_wakes_on_exit", test_wait_wakes_on_exit, 30},
    {"report_not_held_by_forks", test_report_not_held_by_forks, 30},
    {"fork_runs_function", test_fork_runs_function, 10},
    {"fork_refuses_threads", test_fork_refuses_threads, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
