/* This node's workers: spawning with their environment, forwarding their
 * output line by line, keeping their last stderr lines, stopping them. All
 * functions run on the agent's event-loop thread. */
#ifndef MSR_MSRUN_WORKERS_H
#define MSR_MSRUN_WORKERS_H

#include <sys/types.h>

#include <event2/event.h>

#include "base/buf.h"
#include "msrun/base.h"
#include "msrun/cpus.h"

#define MSR_TAIL_LINES    20
#define MSR_TAIL_LINE_MAX 400

struct msr_worker;

typedef struct msr_stream {
    struct msr_worker *worker;
    int fd; /* -1 once closed */
    int is_err;
    struct event *ev;
    msr_buf_t partial; /* an unfinished line */
} msr_stream_t;

typedef struct msr_worker {
    int local_rank, rank;
    pid_t pid;    /* process (and process group) id; 0 before spawn */
    int running;  /* not yet reaped */
    int stopping; /* msrun asked it to stop: its exit is not a failure */
    int status;   /* wait status, once reaped */
    double exit_time;
    msr_stream_t out, err;
    int log_fd;                 /* -1 without --log_dir */
    int show;                   /* its output reaches the terminal */
    char hung[96];              /* why msrun killed it as hung, "" if it did not */
    char *tail[MSR_TAIL_LINES]; /* ring of the last stderr lines */
    int tail_count, tail_next;
    char prefix[48]; /* "[node N rank R] " */
    int prefix_len;
} msr_worker_t;

/* Everything a spawn needs that is the same for all local workers. */
typedef struct msr_spawn_env {
    const char *path; /* the program, resolved */
    char *const *argv;
    int node_rank, node_count, world_size, local_world_size, rank_offset;
    int generation, restart_count, max_restarts;
    const char *job_id, *coordinator, *token, *agent_socket;
    const char *master_addr;
    int master_port;
    const char *log_dir; /* for messages; NULL: no log files */
    int log_dir_fd;      /* the checked --log_dir, where worker_<rank>.log is opened */
    /* --bind_to's CPUs of each local worker ([local_world_size]); NULL: unbound */
    const msr_cpu_place_t *places;
    int devnull;
    int64_t worker_timeout_ms; /* 0: no beats asked for */
} msr_spawn_env_t;

/* Starts worker local_rank through msr_spawn: its own process group, dead
 * with msrun (SIGKILL as the parent-death signal), stdin /dev/null, its
 * output into pipes registered with base. On failure (exec's included) no
 * worker is running and msr_err_msg() says why. */
msr_status_t msr_worker_spawn(msr_worker_t *w, struct event_base *base, const msr_spawn_env_t *env,
                              int local_rank, int show);

/* Reads what is left in the worker's pipes (after it exited) and closes
 * them, flushing an unfinished last line. */
void msr_worker_drain(msr_worker_t *w);

/* Sends sig to the worker's whole process group (ignored once gone). */
void msr_worker_signal(msr_worker_t *w, int sig);

/* Frees buffers and closes what is open; the worker must be reaped. */
void msr_worker_cleanup(msr_worker_t *w);

/* Describes the exit ("exited with code 3", "was killed by SIGKILL"). */
const char *msr_worker_describe(const msr_worker_t *w, char *buf, size_t len);

/* The exit status msrun passes on for this worker: the code, or 128 + the
 * signal number. */
int msr_worker_exit_code(const msr_worker_t *w);

#endif
