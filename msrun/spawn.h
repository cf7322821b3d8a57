/* The one way msrun starts a process (workers and the embedded coordinator):
 * everything the child needs is prepared before fork, the child calls only
 * async-signal-safe functions until exec, and any failure on its side (the
 * step and its errno) comes back through a close-on-exec pipe, so the
 * caller learns that exec failed, and why, before msr_spawn returns. libuv's
 * uv_spawn is the model. */
#ifndef MSR_MSRUN_SPAWN_H
#define MSR_MSRUN_SPAWN_H

#include <sched.h>
#include <sys/types.h>

#include "msrun/base.h"

/* What a child's fd 0, 1 or 2 is. */
typedef enum msr_spawn_stdio {
    MSR_SPAWN_INHERIT = 0, /* this process's */
    MSR_SPAWN_DEVNULL,     /* /dev/null */
    MSR_SPAWN_FD,          /* the given fd */
} msr_spawn_stdio_t;

typedef struct msr_spawn_options {
    const char *path;  /* the program: a path, executed as is (no PATH search) */
    char *const *argv; /* argv[0] first, NULL-terminated */
    char *const *envp; /* the child's whole environment; NULL: this process's */
    const char *cwd;   /* NULL: this process's */
    struct {
        msr_spawn_stdio_t how;
        int fd; /* for MSR_SPAWN_FD */
    } stdio[3];
    int extra_fd;          /* one more fd the child keeps, at extra_fd_as; -1: none */
    int extra_fd_as;       /* its number in the child (>= 3) */
    int new_group;         /* the child leads a process group of its own */
    int death_signal;      /* sent to the child when this thread's process dies; 0: none */
    const cpu_set_t *cpus; /* the CPUs the child may run on; NULL: this process's */
} msr_spawn_options_t;

/* Starts the program. On success *pid_p is the child, which has passed
 * exec. On failure nothing is left behind (a child that failed before exec
 * is reaped) and msr_err_msg() names the program, the step that failed and
 * its errno ("cannot start '/x': chdir: No such file or directory"; for exec
 * itself "cannot execute '/x': Exec format error"):
 * MSR_ERR_NOT_FOUND (ENOENT), MSR_ERR_PERMISSION (EACCES, EPERM),
 * MSR_ERR_INVALID_ARG (bad options), MSR_ERR_SYSTEM otherwise. Signals are
 * blocked in this thread around the clone; the child starts with every
 * signal at its default and none blocked. The child shares this process's
 * memory (on a stack of its own) until exec, and this thread waits until
 * then, as posix_spawn: nothing is copied, however large this process is.
 * Any thread may call it. */
msr_status_t msr_spawn(const msr_spawn_options_t *o, pid_t *pid_p);

/* What a forked child runs instead of a program: its exit status. */
typedef int (*msr_spawn_fn_t)(void *arg);

/* As msr_spawn, but the child runs fn(arg) in a copy of this process (a
 * fork, no exec) and exits with its value: no program is loaded again.
 * Everything msr_spawn does in the child happens alike, and what exec
 * would do too: o->envp becomes its environment, every close-on-exec fd is
 * closed; o->argv is not used (o->path only names it in messages). A copy
 * of a process with threads has only the caller's, in whatever state the
 * others left locks and libraries: so this forks only a process with one
 * thread, else it returns MSR_ERR_UNSUPPORTED and starts nothing (the
 * caller execs instead). The caller must also not have started a library
 * that keeps state a copy must not share (gRPC). */
msr_status_t msr_spawn_fork(const msr_spawn_options_t *o, msr_spawn_fn_t fn, void *arg,
                            pid_t *pid_p);

/* Waits up to ms for child pid to exit and reaps it: 1 if it exited (or
 * is not this process's child), 0 if it still runs. Woken by the exit
 * itself (a pidfd), not by a period; where the kernel has no pidfds
 * (before Linux 5.3), polls from 1 ms, doubling to 10 ms. Any thread. */
int msr_spawn_wait(pid_t pid, int64_t ms);

/* A copy of base (NULL-terminated; NULL: this process's environment)
 * without the variables named in drop (NULL-terminated names), followed by
 * add ("NAME=value" strings, NULL-terminated; may be NULL). Free with
 * msr_spawn_env_free. NULL when out of memory. */
char **msr_spawn_env(char *const *base, const char *const *drop, const char *const *add);
void msr_spawn_env_free(char **envp);

#endif
