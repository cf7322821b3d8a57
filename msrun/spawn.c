/* The one way msrun starts a process (spawn.h). */
#include "launcher/spawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"

extern char **environ;

/* The child's steps, in order; the one that failed comes back with errno. */
typedef enum spawn_step {
    STEP_SETPGID,
    STEP_DEATH_SIGNAL,
    STEP_PARENT_GONE,
    STEP_SIGNALS,
    STEP_MOVE_FDS,
    STEP_STDIN,
    STEP_STDOUT,
    STEP_STDERR,
    STEP_EXTRA_FD,
    STEP_CPUS,
    STEP_CHDIR,
    STEP_CLOSE_FDS,
    STEP_EXEC,
} spawn_step_t;

static const char *const step_names[] = {
    [STEP_SETPGID] = "setpgid",
    [STEP_DEATH_SIGNAL] = "parent-death signal",
    [STEP_PARENT_GONE] = "parent exited before the child started",
    [STEP_SIGNALS] = "signal reset",
    [STEP_MOVE_FDS] = "fcntl",
    [STEP_STDIN] = "dup2 of stdin",
    [STEP_STDOUT] = "dup2 of stdout",
    [STEP_STDERR] = "dup2 of stderr",
    [STEP_EXTRA_FD] = "dup2 of the extra fd",
    [STEP_CPUS] = "sched_setaffinity",
    [STEP_CHDIR] = "chdir",
    [STEP_CLOSE_FDS] = "closing the close-on-exec fds",
    [STEP_EXEC] = "exec",
};

typedef struct spawn_failure {
    int step;
    int err;
} spawn_failure_t;

/* In the child: tells the parent which step failed, and exits. */
static void __attribute__((noreturn)) child_fail(int pipe_fd, spawn_step_t step)
{
    spawn_failure_t f = {(int)step, errno};
    ssize_t n;
    do {
        n = write(pipe_fd, &f, sizeof f);
    } while (n < 0 && errno == EINTR);
    _exit(127);
}

/* In the child, between fork and exec: async-signal-safe calls only. The
 * fds to place are first copied above every target, so that placing one
 * never overwrites another's source, and a source equal to its target still
 * loses close-on-exec through dup2. */
static int child_prepare(const msr_spawn_options_t *o, int devnull, int pipe_fd, pid_t parent)
{
    if (o->new_group && setpgid(0, 0) != 0)
        child_fail(pipe_fd, STEP_SETPGID);
    if (o->death_signal) {
        if (prctl(PR_SET_PDEATHSIG, o->death_signal) != 0)
            child_fail(pipe_fd, STEP_DEATH_SIGNAL);
        if (getppid() != parent) {
            errno = ESRCH;
            child_fail(pipe_fd, STEP_PARENT_GONE);
        }
    }
    /* every disposition back to the default, then nothing blocked */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP)
            continue;
        if (sigaction(sig, &dfl, NULL) != 0 && errno != EINVAL)
            child_fail(pipe_fd, STEP_SIGNALS);
    }
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0)
        child_fail(pipe_fd, STEP_SIGNALS);

    int floor = o->extra_fd >= 0 && o->extra_fd_as >= 3 ? o->extra_fd_as + 1 : 3;
    if (pipe_fd < floor) {
        int moved = fcntl(pipe_fd, F_DUPFD_CLOEXEC, floor);
        if (moved < 0)
            child_fail(pipe_fd, STEP_MOVE_FDS);
        pipe_fd = moved;
    }
    int src[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 3; i++) {
        int fd = o->stdio[i].how == MSR_SPAWN_DEVNULL ? devnull
                 : o->stdio[i].how == MSR_SPAWN_FD    ? o->stdio[i].fd
                                                      : -1;
        if (fd >= 0 && (src[i] = fcntl(fd, F_DUPFD_CLOEXEC, floor)) < 0)
            child_fail(pipe_fd, STEP_MOVE_FDS);
    }
    if (o->extra_fd >= 0 && (src[3] = fcntl(o->extra_fd, F_DUPFD_CLOEXEC, floor)) < 0)
        child_fail(pipe_fd, STEP_MOVE_FDS);
    static const spawn_step_t place_step[3] = {STEP_STDIN, STEP_STDOUT, STEP_STDERR};
    for (int i = 0; i < 3; i++)
        if (src[i] >= 0 && dup2(src[i], i) < 0)
            child_fail(pipe_fd, place_step[i]);
    if (src[3] >= 0 && dup2(src[3], o->extra_fd_as) < 0)
        child_fail(pipe_fd, STEP_EXTRA_FD);

    if (o->cpus && sched_setaffinity(0, sizeof *o->cpus, o->cpus) != 0)
        child_fail(pipe_fd, STEP_CPUS);
    if (o->cwd && chdir(o->cwd) != 0)
        child_fail(pipe_fd, STEP_CHDIR);
    return pipe_fd;
}

/* In a forked child (msr_spawn_fork): closes what exec would, every
 * close-on-exec fd (the error pipe last, which tells the parent the child
 * started). The process has one thread, so opendir may allocate. */
static void child_close_cloexec(int pipe_fd)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        child_fail(pipe_fd, STEP_CLOSE_FDS);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d) || fd == pipe_fd)
            continue;
        int flags = fcntl(fd, F_GETFD);
        if (flags >= 0 && (flags & FD_CLOEXEC))
            close(fd);
    }
    closedir(d);
    close(pipe_fd);
}

typedef struct child_args {
    const msr_spawn_options_t *o;
    char *const *envp;
    int devnull, pipe_fd;
    pid_t parent;
    msr_spawn_fn_t fn; /* NULL: exec o->path */
    void *fn_arg;
} child_args_t;

static void __attribute__((noreturn)) child_main(const child_args_t *c)
{
    int pipe_fd = child_prepare(c->o, c->devnull, c->pipe_fd, c->parent);
    if (c->fn == NULL) {
        execve(c->o->path, c->o->argv, c->envp);
        child_fail(pipe_fd, STEP_EXEC);
    }
    environ = (char **)c->envp;
    child_close_cloexec(pipe_fd);
    exit(c->fn(c->fn_arg));
}

static msr_status_t status_of(int err)
{
    switch (err) {
    case ENOENT:
    case ENOTDIR:
        return MSR_ERR_NOT_FOUND;
    case EACCES:
    case EPERM:
        return MSR_ERR_PERMISSION;
    default:
        return MSR_ERR_SYSTEM;
    }
}

/* exec's ENOENT for a file that exists means its interpreter (#!) is
 * missing: say that, not "No such file or directory". */
static msr_status_t exec_failure(const char *path, int err)
{
    char line[256] = "";
    int fd = -1;
    if (err == ENOENT && msr_open_input(path, 0, &fd) == MSR_OK) { /* never blocks on a FIFO */
        ssize_t n = read(fd, line, sizeof line - 1);
        close(fd);
        line[n > 0 ? n : 0] = '\0';
        if (line[0] == '#' && line[1] == '!') {
            char *interp = line + 2;
            interp += strspn(interp, " \t");
            interp[strcspn(interp, " \t\r\n")] = '\0';
            return msr_err(MSR_ERR_NOT_FOUND, "cannot execute '%s': interpreter '%s' not found",
                           path, interp);
        }
    }
    return msr_err(status_of(err), "cannot execute '%s': %s", path, strerror(err));
}

/* The child's stack: it shares this process's memory until exec (see
 * msr_spawn), so it runs on a stack of its own, not on the caller's.
 * Sanitized builds fork instead: a sanitizer keeps its state in this
 * process's memory, and AddressSanitizer warns on stderr about a child
 * on a stack it did not make (which tests that read msrun's stderr see). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MSR_SPAWN_BY_CLONE 0
#else
#define MSR_SPAWN_BY_CLONE 1
#endif
#define CHILD_STACK_BYTES (64 * 1024)

/* The child's report (its failure, or nothing) is read without waiting
 * when the parent resumes only once the child is done with it: with
 * CLONE_VFORK that is when it exited (after writing any failure) or when
 * its exec passed the point of no return (the old memory let go of), after
 * which exec cannot fail back. Waiting there for end of file, as a
 * blocking read did, waited for the close-on-exec of the pipe's write end
 * a little later in exec, which a starved child (workers spinning on the
 * agent's core) reached up to a second later, or never while a process
 * forked by another thread meanwhile held a copy of it: all of it with
 * the agent's event loop held. A forked child (sanitized builds) runs
 * its steps after fork returns, and msr_spawn_fork's child runs on in
 * its copy: there the pipe blocks and the read waits for its report. */
#if MSR_SPAWN_BY_CLONE
#define REPORT_PIPE_FLAGS O_NONBLOCK
#else
#define REPORT_PIPE_FLAGS 0
#endif

static int child_entry(void *arg)
{
    child_main(arg);
}

static int needs_devnull(const msr_spawn_options_t *o)
{
    for (int i = 0; i < 3; i++)
        if (o->stdio[i].how == MSR_SPAWN_DEVNULL)
            return 1;
    return 0;
}

/* msr_spawn, or with fn msr_spawn_fork: the child runs fn instead of
 * exec. */
static msr_status_t spawn_start(const msr_spawn_options_t *o, msr_spawn_fn_t fn, void *fn_arg,
                                pid_t *pid_p)
{
    if (o == NULL || o->path == NULL || pid_p == NULL ||
        (fn == NULL && (o->argv == NULL || o->argv[0] == NULL)))
        return msr_err(MSR_ERR_INVALID_ARG, "spawn: no program or argv");
    if (o->extra_fd >= 0 && o->extra_fd_as < 3)
        return msr_err(MSR_ERR_INVALID_ARG, "spawn: the extra fd must land at 3 or above");
    char *const *envp = o->envp ? o->envp : environ;
    int devnull = -1, pipefd[2] = {-1, -1};
    if (needs_devnull(o) && (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
        return msr_err(msr_status_from_errno(errno), "cannot open /dev/null: %s", strerror(errno));
    if (pipe2(pipefd, O_CLOEXEC | (fn ? 0 : REPORT_PIPE_FLAGS)) != 0) {
        msr_err_set("pipe: %s", strerror(errno));
        goto err_devnull;
    }
    char *stack = fn ? NULL : msr_malloc(CHILD_STACK_BYTES); /* a fork needs none */
    if (fn == NULL && stack == NULL) {
        msr_err_set("cannot start '%s': out of memory", o->path);
        close(pipefd[1]);
        goto err_pipe;
    }
    /* No handler of this process may run in the child between fork and the
     * reset of dispositions there. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    /* The child shares this process's memory until it execs, and this
     * thread waits until then (as posix_spawn): no page tables are copied
     * and no page is copied on write, which made each fork of a large
     * msrun cost milliseconds. The child writes only its own stack and
     * errno (this thread's, unused here after a successful start).
     * msr_spawn_fork's child runs on in its copy: a fork. */
    child_args_t args = {o, envp, devnull, pipefd[1], getpid(), fn, fn_arg};
    pid_t pid;
    if (fn || !MSR_SPAWN_BY_CLONE) {
        if (fn) /* nothing buffered here is written twice by the child's exit */
            fflush(NULL);
        pid = fork();
        if (pid == 0)
            child_entry(&args);
    } else {
        pid =
            clone(child_entry, stack + CHILD_STACK_BYTES, CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
    }
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    msr_free(stack);
    close(pipefd[1]);
    if (pid < 0) {
        msr_err_set("cannot start '%s': clone: %s", o->path, strerror(fork_errno));
        goto err_pipe;
    }
    /* also here, so a signal sent to the group right away finds it */
    if (o->new_group)
        setpgid(pid, pid);
    spawn_failure_t f;
    ssize_t n;
    do {
        n = read(pipefd[0], &f, sizeof f);
    } while (n < 0 && errno == EINTR);
    int report_err = n < 0 ? errno : 0;
    close(pipefd[0]);
    if (devnull >= 0)
        close(devnull);
    /* nothing to read: the child is past exec's point of no return (see
     * REPORT_PIPE_FLAGS) */
    if (n == 0 || (n < 0 && (report_err == EAGAIN || report_err == EWOULDBLOCK))) {
        *pid_p = pid;
        return MSR_OK;
    }
    /* the child failed before exec (or the pipe did): reap it */
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    if (n != (ssize_t)sizeof f || f.step < 0 || f.step > STEP_EXEC)
        return msr_err(MSR_ERR_SYSTEM, "cannot start '%s': no word from the child", o->path);
    if (f.step == STEP_EXEC)
        return exec_failure(o->path, f.err);
    return msr_err(status_of(f.err), "cannot start '%s': %s: %s", o->path, step_names[f.step],
                   strerror(f.err));

err_pipe:
    close(pipefd[0]);
err_devnull:
    if (devnull >= 0)
        close(devnull);
    return MSR_ERR_SYSTEM;
}

msr_status_t msr_spawn(const msr_spawn_options_t *o, pid_t *pid_p)
{
    return spawn_start(o, NULL, NULL, pid_p);
}

/* The threads of this process, from /proc/self/stat (its 20th field); 0
 * if unknown. */
static long threads_of_self(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    long threads = 0;
    if (p == NULL ||
        sscanf(p + 1, " %*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %ld",
               &threads) != 1)
        return 0;
    return threads;
}

msr_status_t msr_spawn_fork(const msr_spawn_options_t *o, msr_spawn_fn_t fn, void *arg,
                            pid_t *pid_p)
{
    if (fn == NULL)
        return msr_err(MSR_ERR_INVALID_ARG, "spawn: no function for the child");
    long threads = threads_of_self();
    if (threads != 1)
        return msr_err(MSR_ERR_UNSUPPORTED, "cannot fork '%s': this process has %ld threads",
                       o && o->path ? o->path : "?", threads);
    return spawn_start(o, fn, arg, pid_p);
}

static int dropped(const char *entry, const char *const *drop)
{
    for (; drop && *drop; drop++) {
        size_t n = strlen(*drop);
        if (strncmp(entry, *drop, n) == 0 && entry[n] == '=')
            return 1;
    }
    return 0;
}

char **msr_spawn_env(char *const *base, const char *const *drop, const char *const *add)
{
    if (base == NULL)
        base = environ;
    size_t nbase = 0, nadd = 0;
    while (base[nbase])
        nbase++;
    while (add && add[nadd])
        nadd++;
    char **envp = msr_calloc(nbase + nadd + 1, sizeof *envp);
    if (envp == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < nbase; i++) {
        if (dropped(base[i], drop))
            continue;
        if ((envp[k++] = msr_strdup(base[i])) == NULL)
            goto err;
    }
    for (size_t i = 0; i < nadd; i++)
        if ((envp[k++] = msr_strdup(add[i])) == NULL)
            goto err;
    envp[k] = NULL;
    return envp;
err:
    msr_spawn_env_free(envp);
    return NULL;
}

void msr_spawn_env_free(char **envp)
{
    if (envp == NULL)
        return;
    for (char **p = envp; *p; p++)
        msr_free(*p);
    msr_free(envp);
}

/* A descriptor that becomes readable when pid exits; -1 where the kernel
 * has none. */
static int pidfd_of(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

int msr_spawn_wait(pid_t pid, int64_t ms)
{
    uint64_t deadline = msr_deadline_in_ms(ms);
    int status, fd = -1, backoff = 1;
    pid_t r;
    while ((r = waitpid(pid, &status, WNOHANG)) == 0 || (r < 0 && errno == EINTR)) {
        int64_t left = msr_deadline_left_ms(deadline);
        if (left <= 0)
            break;
        if (fd < 0)
            fd = pidfd_of(pid);
        if (fd >= 0) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            (void)poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left); /* EINTR: look again */
        } else {
            msr_sleep_ms(backoff < left ? backoff : left);
            backoff = backoff * 2 > 10 ? 10 : backoff * 2;
        }
    }
    if (fd >= 0)
        close(fd);
    return r == pid || (r < 0 && errno == ECHILD);
}
