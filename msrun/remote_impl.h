/* What the parts of the --hostfile/--host launcher share (remote.c runs
 * the job, remote_cmd.c makes each host's command). Private to msrun/. */
#ifndef MSR_LAUNCHER_REMOTE_IMPL_H
#define MSR_LAUNCHER_REMOTE_IMPL_H

#include <limits.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/status.h"
#include "launcher/options.h"
#include "launcher/remote.h"
#include "launcher/token.h"

typedef struct remote_stream {
    int fd; /* read end; -1 once closed */
    int to; /* 1 or 2: this process's stdout or stderr */
    msr_buf_t line;
} remote_stream_t;

typedef struct remote_proc {
    const msr_remote_host_t *host;
    int node;   /* node rank */
    pid_t pid;  /* ssh; 0 once reaped */
    int status; /* waitpid's, once reaped */
    int in_fd;  /* the remote msrun's stdin; -1 once closed */
    remote_stream_t out, err;
} remote_proc_t;

typedef struct remote_launch {
    const msr_options_t *o;
    msr_remote_hosts_t hosts;
    remote_proc_t *procs; /* [nprocs]: the hosts with workers */
    int nprocs, running;
    int world; /* the workers of every host */
    /* --relays: the groups' size (relays.h); 0: none, relays_why says why */
    int relays_k;
    const char *relays_why;
    char job_id[64];
    char token[MSR_TOKEN_MAX + 1];
    char **fwd; /* msrun's arguments that the remote msruns get too */
    int nfwd;
    char self[PATH_MAX]; /* this msrun, the same path on every host */
    char cwd[PATH_MAX];
    /* ending */
    int stopping;     /* the hosts were told to stop */
    uint64_t stop_ns; /* when */
    int term_sent, kill_sent;
    int failed;     /* the first host that failed, +1; 0: none */
    int fail_code;  /* its exit status */
    int sig;        /* the signal that stopped the job; 0: none */
    int interrupts; /* SIGINT, SIGTERM and SIGHUP received */
} remote_launch_t;

/* Keeps in l->fwd msrun's arguments but the launcher's own; refuses those
 * that contradict the host list. argv: msrun's arguments, parsed. */
int msr_remote_split_args(remote_launch_t *l, int argc, char **argv);

/* Checks --forward_env: names of variables, comma-separated. */
int msr_remote_check_forward_env(const char *list);

/* The relays of the job (relays_k, relays_why); -1 after a message when
 * a relay's port would pass 65535. */
int msr_remote_relays(remote_launch_t *l);

/* Host i's name without its user@ */
const char *msr_remote_host_addr(const remote_launch_t *l, int i);

/* ssh's argv for host i (see remote_cmd.c); *words_p and *cmd back it. */
msr_status_t msr_remote_ssh_argv(const remote_launch_t *l, int i, char ***argv_p, char **words_p,
                                 msr_buf_t *cmd);

#endif
