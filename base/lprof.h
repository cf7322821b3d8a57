/* The launch timeline (msrun --profile_launch): one table of phases that
 * the agent and libmsrun fill, and the file a worker hands its part over in. */
#ifndef MSR_BASE_LPROF_H
#define MSR_BASE_LPROF_H

#include <stdint.h>

#include "msrun/base.h"

/* The environment variable that turns a worker's recording on: the path
 * prefix of its file (PREFIX.RANK). Unset: nothing is recorded. */
#define MSR_LPROF_ENV        "MSR_PROFILE_LAUNCH"
/* The longest prefix recorded to; a longer one leaves recording off. */
#define MSR_LPROF_PREFIX_MAX 4079

/* The phases in launch order. The agent's come first, then each worker's;
 * a worker that never reaches a phase (a program without libmsrun, a job
 * that only uses the store) leaves it unset. Never renumbered: the
 * worker's file names them by name, not number. */
#define MSR_LPROF_PHASES(X)                                                                        \
    X(PARSE, "parse", 0)             /* agent: main() to options parsed */                         \
    X(TOKEN, "token", 0)             /* agent: job id, token, log and job directories */           \
    X(COORD, "coordinator", 0)       /* agent: coordinator started and listening */                \
    X(SETUP, "setup", 0)             /* agent: event loop, link, store proxy */                    \
    X(JOIN, "join", 0)               /* agent: join sent to answered */                            \
    X(RDZV, "rendezvous", 0)         /* agent: joined to the job's shape known (spawn) */          \
    X(FORK, "fork", 1)               /* worker: the agent's fork of it (environment, fork) */      \
    X(EXEC, "exec", 1)               /* worker: forked to msr_init() (exec, loader, main) */       \
    X(STORE, "store_connect", 1)     /* worker: msr_init(): environment, channel to the store */   \
    X(UCX_CONTEXT, "ucx_context", 1) /* worker: UCX context (first communicator only) */           \
    X(UCX_WORKER, "ucx_worker", 1)   /* worker: UCX worker and its addresses */                    \
    X(SHM, "shared_memory", 1)       /* worker: shared-memory segment of the communicator */       \
    X(BARRIER, "first_barrier", 1)   /* worker: the first barrier (store or communicator) */       \
    X(FINALIZE, "finalize", 1)       /* worker: msr_finalize() */                                  \
    X(EXIT, "exit", 1)               /* worker: finalized (or forked) to reaped by the agent */    \
    X(WAIT, "workers", 0)            /* agent: first fork to last worker reaped */                 \
    X(JOB_END, "job_end", 0) /* agent: last reaped to the loop's end (exits reported, job over) */ \
    X(LEAVE, "leave", 0)     /* agent: store proxy stopped, left the job, link closed */           \
    X(TEARDOWN, "teardown", 0) /* agent: left to this table (coordinator stopped) */

typedef enum msr_lprof_phase {
#define MSR_LPROF_ENUM(id, name, worker) MSR_LPROF_##id,
    MSR_LPROF_PHASES(MSR_LPROF_ENUM)
#undef MSR_LPROF_ENUM
        MSR_LPROF_COUNT
} msr_lprof_phase_t;

/* One process's phases: absolute msr_now_ns() values, 0 when unset. */
typedef struct msr_lprof {
    uint64_t start[MSR_LPROF_COUNT];
    uint64_t end[MSR_LPROF_COUNT];
} msr_lprof_t;

/* The phase's name ("store_connect"), and whether it is a worker's. */
const char *msr_lprof_name(msr_lprof_phase_t ph);
int msr_lprof_is_worker(msr_lprof_phase_t ph);

/* Records the phase's first occurrence only (a second barrier is no
 * longer launch); p NULL does nothing. */
void msr_lprof_mark(msr_lprof_t *p, msr_lprof_phase_t ph, uint64_t start_ns, uint64_t end_ns);

/* This process's own timeline when MSR_LPROF_ENV is set, else NULL (read
 * once, on the first call, from any thread). A process has one launch:
 * this is the one piece of process-wide state of the module. */
msr_lprof_t *msr_lprof_self(void);

/* Whether msr_lprof_self() records and has no ph yet: a call made often
 * (a barrier) reads the clock for its phase only then. */
int msr_lprof_wants(msr_lprof_phase_t ph);

/* Records ph from start_ns to now in msr_lprof_self(), if recording. */
void msr_lprof_note(msr_lprof_phase_t ph, uint64_t start_ns);

/* Writes msr_lprof_self() to "MSR_LPROF_ENV.rank" ("name start end" per set
 * phase); does nothing when not recording. MSR_ERR_IO when the file cannot
 * be written. */
msr_status_t msr_lprof_save(int rank);

/* Reads the file "prefix.rank" into *p_out (zeroed first). MSR_ERR_NOT_FOUND
 * when there is none (the worker did not use libmsrun), MSR_ERR_PROTOCOL
 * when a line is not a phase. */
msr_status_t msr_lprof_load(const char *prefix, int rank, msr_lprof_t *p_out);

#endif
