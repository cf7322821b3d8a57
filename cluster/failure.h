/* A job's root cause and its states, as the coordinator decides them and
 * every node hears and reports them: the one type both sides use. No I/O;
 * the conversions copy to and from the wire message Msr__Failure. */
#ifndef MSR_CLUSTER_FAILURE_H
#define MSR_CLUSTER_FAILURE_H

#include <stddef.h>

#define MSR_FAILURE_TAIL 32 /* stderr lines kept for the root cause */

struct Msr__Failure;

/* The job's state, numbered as the wire's JobState (failure.c checks). */
typedef enum msr_job_state {
    MSR_JOB_UNKNOWN = 0,
    MSR_JOB_WAITING = 1,    /* the generation forms: nodes are awaited */
    MSR_JOB_RUNNING = 2,    /* every node of the generation runs its workers */
    MSR_JOB_RESTARTING = 3, /* a failure ended the generation; a new one forms */
    MSR_JOB_DONE = 4,       /* every worker exited 0 */
    MSR_JOB_FAILED = 5,     /* a failure with no restarts left, or a refused job */
} msr_job_state_t;

/* What ended a generation: a worker's exit (rank >= 0) or a node's loss
 * (rank -1). The tail strings are owned by the record. */
typedef struct msr_failure {
    int set;
    int node_rank;
    char host[256];
    int rank, pid, exit_code, signal; /* exit_code -1 when killed by a signal */
    double time;                      /* seconds since the epoch */
    char *tail[MSR_FAILURE_TAIL];     /* its last stderr lines */
    size_t ntail;
    int generation;
    char reason[128];    /* "exited", "signal", "hung: ...", "missed heartbeats ..." */
    int after_peer_lost; /* the worker had lost a communication peer first */
} msr_failure_t;

/* Frees the tail and zeroes the record (set 0). */
void msr_failure_clear(msr_failure_t *f);

/* Replaces f with a copy of m (tail lines past MSR_FAILURE_TAIL, and past
 * 4096 bytes each, are cut; a line that cannot be copied is left out). */
void msr_failure_from_msg(msr_failure_t *f, const struct Msr__Failure *m);

/* Fills m to point into f: m is valid while f is unchanged. */
void msr_failure_to_msg(const msr_failure_t *f, struct Msr__Failure *m);

/* One line for people: "rank 2 on node 0 (host, pid 7) was killed by
 * SIGKILL", "node 1 (host, pid 9) missed heartbeats ...". */
void msr_failure_describe(const msr_failure_t *f, char *out, size_t len);

/* The exit status msrun passes on for it: 128 + the signal, the worker's
 * code when in 1..255, else 1 (also when no failure is set). */
int msr_failure_exit_code(const msr_failure_t *f);

/* "waiting", "running", "restarting", "done", "failed" or "unknown". s is a
 * msr_job_state_t or the wire's Msr__JobState (same numbers). */
const char *msr_job_state_name(int s);

#endif
