/* This node's workers: spawning with their environment, forwarding their
 * output line by line, keeping their last stderr lines, stopping them. All
 * functions run on the agent's event-loop thread. */
#ifndef MSR_MSRUN_WORKERS_H
#define MSR_MSRUN_WORKERS_H

#include <limits.h>
#include <sys/types.h>

#include <event2/event.h>

#include "base/buf.h"
#include "launcher/board.h"
#include "launcher/cpus.h"
#include "launcher/outtail.h"
#include "msrun/base.h"

#define MSR_TAIL_LINES    20
#define MSR_TAIL_LINE_MAX 400

/* A worker's streams, as bits (--tee, --redirects). */
#define MSR_STD_OUT 1
#define MSR_STD_ERR 2

/* A line of output that is longer than this is written before its newline
 * arrives, and the rest follows as it comes (the line is not cut). */
#define MSR_LINE_HOLD_MAX 65536

/* What ends a line cut in a log file at --log_max_bytes. */
#define MSR_LOG_CUT_MARK " [msrun: line cut at --log_max_bytes]\n"

#define MSR_PTY_DRAIN_MS 200

struct msr_worker;
struct msr_stream;

/* Where output goes: msrun's stdout or stderr, or a worker's log file. A
 * stream's line is open on a sink (its owner) from its first piece to its
 * newline; another stream that writes there meanwhile ends that line first,
 * or, both being progress lines (carriage returns), writes over it. */
typedef struct msr_sink {
    int fd;
    struct msr_stream *owner; /* whose line is open here; NULL at a line's start */
} msr_sink_t;

/* The terminal side, shared by every worker of the node. */
typedef struct msr_output {
    msr_sink_t term[2]; /* msrun's stdout and stderr */
    int same_file;      /* both are one file (a terminal): term[0] holds the owner */
    int tag;            /* "[node N rank R] " before each line */
    int timestamps;     /* an ISO 8601 UTC time before each line, terminal and files */
    msr_board_t board;  /* progress lines as rows at the bottom, on a terminal */
    /* Called with each whole line (up to MSR_TAIL_LINE_MAX bytes, without its
     * newline) that starts with MSR_METRIC_PREFIX, on either stream; the line
     * is shown and logged as any other. NULL: none. */
    void (*metric)(void *arg, int rank, const char *line, size_t len);
    void *metric_arg;
} msr_output_t;

typedef struct msr_stream {
    struct msr_worker *worker;
    int fd;        /* -1 once closed */
    int is_err;    /* goes to msrun's stderr (else stdout) */
    int keep_tail; /* its last lines are kept for the failure report */
    int to_term, to_file;
    struct event *ev;
    msr_buf_t partial;           /* what is held: an unfinished line, or a last '\r' */
    int in_line;                 /* part of the current line was written */
    int cr;                      /* the current line had a carriage return: a progress line */
    int cr_pending;              /* a carriage return came: the next piece starts the line again */
    char seg[MSR_TAIL_LINE_MAX]; /* the current line since its last '\r' */
    size_t seg_len;
    int seg_whole; /* seg holds all of it */
} msr_stream_t;

/* Where worker's output goes, decided by the agent from the options. */
typedef struct msr_worker_io {
    int terminal;       /* MSR_STD_* bits of the streams shown on msrun's terminal */
    int file;           /* MSR_STD_* bits of the streams written to the log file */
    char log_name[256]; /* its log file in the run's log directory; "": none */
} msr_worker_io_t;

/* A worker's log file and its bound (--log_max_bytes): past max bytes the
 * file moves to NAME.1 and a new one starts at a line's start; a line
 * longer than what a file holds is cut with a marker. */
typedef struct msr_worker_log {
    int dir_fd;      /* the run's log directory (the agent's) */
    const char *dir; /* its path, for messages */
    char name[256];  /* the file's name in it */
    int64_t max;     /* 0: no bound */
    int64_t size;    /* bytes in the file now */
    int64_t line;    /* bytes of the line now open in the file */
    int cutting;     /* the rest of a cut line is dropped, up to its '\n' */
    int warned;      /* a failed rotation was reported */
} msr_worker_log_t;

typedef struct msr_worker {
    int local_rank, rank;
    pid_t pid;    /* process (and process group) id; 0 before spawn */
    int running;  /* not yet reaped */
    int stopping; /* msrun asked it to stop: its exit is not a failure */
    int status;   /* wait status, once reaped */
    double exit_time;
    msr_stream_t out, err; /* with --pty, out carries both and err is closed */
    int pty;               /* out is a pseudo-terminal */
    int log_fd;            /* -1 without a log file */
    msr_sink_t log;        /* log_fd as a sink for out and err */
    msr_worker_log_t logf; /* log_fd's name and bound */
    msr_output_t *output;
    char hung[96];              /* why msrun killed it as hung, "" if it did not */
    char *tail[MSR_TAIL_LINES]; /* ring of the last stderr lines */
    int tail_count, tail_next;
    char prefix[48]; /* "[node N rank R] ", or "" without --tag_output */
    int prefix_len;
    msr_out_tail_t *out_tail; /* the agent's ring of its last lines, both streams;
                               * NULL: none kept */
    /* TORCHELASTIC_ERROR_FILE: where torch's @record writes why it failed,
     * in the run's log directory, else the job's private directory
     * (error_private: removed by msr_worker_cleanup); "": none */
    char error_file[PATH_MAX];
    int error_private;
} msr_worker_t;

/* Prepares out for msrun's stdout and stderr (and, when they are one
 * terminal, its progress board, through which msrun's log lines then go). */
void msr_output_init(msr_output_t *out, int tag, int timestamps);

/* Leaves the progress rows on the screen as plain lines and gives msrun's
 * log lines back to stderr. */
void msr_output_cleanup(msr_output_t *out);

/* Writes an ISO 8601 UTC time with milliseconds ("2026-11-24T18:30:01.123Z")
 * for wall-clock time t (seconds) into buf (at least 32 bytes). */
void msr_iso_time(double t, char *buf, size_t len);

/* Everything a spawn needs that is the same for all local workers. */
typedef struct msr_spawn_env {
    const char *path; /* the program, resolved */
    char *const *argv;
    int node_rank, node_count, world_size, local_world_size, rank_offset;
    int generation, restart_count, max_restarts;
    const char *job_id, *coordinator, *token, *agent_socket;
    const char *master_addr;
    int master_port;
    int machine_ranks;     /* MSR_MACHINE_RANKS when > 0 */
    const char *log_dir;   /* the run's log directory, for messages; NULL: no log files */
    int log_dir_fd;        /* that directory, where the workers' logs are opened */
    int64_t log_max_bytes; /* --log_max_bytes: a log rotates past it; 0: never */
    msr_output_t *output;
    int pty; /* a pseudo-terminal for stdout and stderr instead of pipes */
    /* --bind_to's CPUs of each local worker ([local_world_size]); NULL: unbound */
    const msr_cpu_place_t *places;
    int devnull;
    int64_t worker_timeout_ms; /* 0: no beats asked for */
    int ps_servers;            /* --ps_servers: the last this many ranks are servers; 0: no roles */
    int ps_staleness;          /* --ps_staleness: -1 synchronous */
    int incarnation;           /* with ps_servers: MSR_INCARNATION, the worker's replacements */
} msr_spawn_env_t;

/* Writes len bytes of w's output (whole lines or a line's pieces, as they
 * come) to its log file, keeping it within --log_max_bytes: a line that
 * would take it past the bound starts a new file (the old one becomes
 * NAME.1, replacing the one before), and a line longer than a file holds
 * is cut, ending with MSR_LOG_CUT_MARK. A file that cannot rotate is
 * reported once and written on. Event-loop thread only. */
void msr_worker_log_write(msr_worker_t *w, const char *data, size_t len);

/* Starts worker local_rank through msr_spawn: its own process group, dead
 * with msrun (SIGKILL as the parent-death signal), stdin /dev/null, its
 * output into pipes (or one pseudo-terminal, env->pty) registered with base,
 * shown and logged as io says. Its log file gets a line marking the
 * generation's start. w is reset but for w->out_tail, the caller's ring
 * that then gets its every line (NULL: none). On failure (exec's included)
 * no worker is running and msr_err_msg() says why. */
msr_status_t msr_worker_spawn(msr_worker_t *w, struct event_base *base, const msr_spawn_env_t *env,
                              int local_rank, const msr_worker_io_t *io);

/* output.c: starts forwarding fd (non-blocking from now on, owned by s)
 * as worker w's stdout or stderr (is_err), read from base; MSR_ERR_NO_MEMORY
 * when it cannot be watched. */
msr_status_t msr_stream_open(msr_stream_t *s, msr_worker_t *w, struct event_base *base, int fd,
                             int is_err);

/* Flushes the stream's unfinished line, gives up its place on the sinks
 * and the board and closes it (nothing once closed). */
void msr_stream_close(msr_stream_t *s);

/* Reads what is left in the worker's pipes (after it exited) and closes
 * them, flushing an unfinished last line. A pseudo-terminal is read until
 * its end for at most MSR_PTY_DRAIN_MS (the kernel passes what the worker
 * wrote last to msrun's side a moment later). */
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
