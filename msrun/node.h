/* The node as a state machine: what one node of a job does (join, follow the
 * coordinator through generations, start, watch and stop its workers,
 * report their exits, leave) with no I/O in it. The agent (agent.c) turns
 * what happens (the coordinator's answers decoded into plain structs, child
 * exits, beats, signals, the time) into calls of the msr_node_on_* functions
 * and performs the actions they queue (msr_node_next_action): it sends,
 * spawns, signals and exits; the machine decides. Time is an argument
 * (msr_now_ns() in the agent), never read here, so a test or a fuzzer
 * drives it by feeding events.
 *
 * States, as the fields say them:
 *   joining   !joined: ACT_JOIN sent, retried at retry_at until
 *             cluster_time_out; ends in joined or ACT_EXIT
 *   following joined: one or more heartbeats in flight (hb_inflight), or a
 *             retry armed (retry_at); the job's state decides what workers
 *             should do
 *   running   nrunning > 0 of worker_generation
 *   stopping  stopping: workers signalled; SIGKILL at kill_at, given up on
 *             at stuck_at; when the last is gone, ACT_RELEASE then either
 *             the next generation (ready_generation) or the end
 *   finished  finished: ACT_LEAVE (when joined), ACT_COORD_STOP, ACT_EXIT;
 *             nothing after
 *
 * One thread: the agent's event loop. */
#ifndef MSR_MSRUN_NODE_H
#define MSR_MSRUN_NODE_H

/* msrun's exit status when the job never formed: no coordinator answered,
 * or not every node joined, within --cluster_time_out. No worker ran. */
#define MSR_EXIT_NOT_FORMED 124

#include <stddef.h>
#include <stdint.h>

#include "cluster/failure.h"
#include "msrun/base.h"

typedef enum msr_node_act_kind {
    MSR_NODE_ACT_JOIN,          /* send a join request */
    MSR_NODE_ACT_HEARTBEAT,     /* send a heartbeat (generation, state, ready_generation) */
    MSR_NODE_ACT_SPAWN,         /* start the workers of generation from local on (0: free
                                   the old slots first); see msr_node_spawn_turn_over;
                                   code 1: only local, a replacement (workers[local]'s
                                   incarnation) */
    MSR_NODE_ACT_SIGNAL,        /* sig to worker local (-1: every running one); text: why
                                   it is killed as hung, or NULL */
    MSR_NODE_ACT_POLL_BEATS,    /* feed msr_node_on_beat for each running worker */
    MSR_NODE_ACT_REPORT,        /* report worker local's exit: generation, exit_code,
                                   sig (signal), text (reason) */
    MSR_NODE_ACT_RELEASE,       /* every worker is gone or given up on: free their slots */
    MSR_NODE_ACT_LOG_RANK,      /* this node's rank is now code: label the log with it */
    MSR_NODE_ACT_COORD_RESTART, /* the embedded coordinator exited (text: how): restart it */
    MSR_NODE_ACT_LEAVE,         /* tell the coordinator this node leaves (text: why) */
    MSR_NODE_ACT_COORD_STOP,    /* stop the embedded coordinator, if any, once left */
    MSR_NODE_ACT_EXIT,          /* end with status code; text: a message for stderr or NULL */
} msr_node_act_kind_t;

typedef struct msr_node_action {
    msr_node_act_kind_t kind;
    int local;             /* SIGNAL, REPORT: the worker's local rank (-1: all); SPAWN:
                              the first worker to start */
    int sig;               /* SIGNAL: the signal; REPORT: the signal that killed it, or 0 */
    int generation;        /* HEARTBEAT, SPAWN, REPORT */
    int exit_code;         /* REPORT: the code, -1 when killed by a signal */
    int code;              /* EXIT: the status; LOG_RANK: the node rank */
    char text[128];        /* see the kinds; "" when none */
    const char *long_text; /* LEAVE, EXIT: longer texts, held by the node; or NULL */
} msr_node_action_t;

typedef struct msr_node_config {
    int nworkers;
    int64_t grace_ms;               /* SIGTERM to SIGKILL */
    int64_t coordinator_timeout_ms; /* the coordinator may be away this long */
    int64_t cluster_time_out_ms;    /* the first join may take this long */
    int64_t worker_timeout_ms;      /* a worker silent this long is hung; 0: not watched */
    const char *coord_target;       /* host:port, for messages; kept by the caller */
    uint64_t seed;                  /* for the jitter of retries */
    /* --ps_servers and an asynchronous --ps_staleness (K >= 0): a worker
     * rank (below world_size - ps_servers) that fails is replaced alone,
     * up to max_restarts times on this node (docs/ps.md, Failures);
     * ps_async 0: every failure is reported */
    int ps_servers, ps_async;
} msr_node_config_t;

/* The part of a heartbeat answer the node uses (decoded by the agent). */
typedef struct msr_node_update {
    int generation;
    msr_job_state_t state;
    int restart_count, max_restarts;
    const char *message;    /* "" or NULL when none */
    msr_failure_t *failure; /* the root cause, or NULL; its tail is taken */
    int has_assignment;     /* the fields below are set (RUNNING and a member) */
    int node_rank, node_count, world_size, rank_offset;
    const char *master_addr;
    int master_port;
    int machine_ranks;                /* the generation's ranks on this machine; 0: not known */
    int joined_nodes, expected_nodes; /* while forming */
    const char *missing;              /* who is awaited, "2, 3"; or NULL */
    uint32_t form_left_ms, form_timeout_ms; /* while forming; 0: unknown */
} msr_node_update_t;

/* What the join's answer was, when it was not a success. */
typedef enum msr_node_join_error {
    MSR_NODE_JOIN_AWAY,    /* unreachable, timed out, cancelled: try again */
    MSR_NODE_JOIN_FULL,    /* refused because the job is full: try again */
    MSR_NODE_JOIN_REFUSED, /* refused for good: exit 2 */
} msr_node_join_error_t;

typedef struct msr_node_worker {
    int running;        /* started and not yet seen exit */
    int pid, rank;      /* for messages */
    char hung[96];      /* why it was killed as hung, "" if not */
    int beaten;         /* libmsrun beats seen from it (this generation) */
    unsigned sent_sigs; /* signals msrun sent it (bit per number, this generation) */
    int incarnation;    /* replacements of this rank before it in this generation */
} msr_node_worker_t;

/* Read-only outside node.c (the agent and the tests read it). */
typedef struct msr_node {
    msr_node_config_t cfg;

    /* the job as last heard */
    int generation;
    msr_job_state_t state;
    int restart_count, max_restarts;
    int node_rank, node_count, world_size, rank_offset;
    char master_addr[256];
    int master_port;
    int machine_ranks;      /* the generation's ranks on this machine; 0: not known */
    int machine_generation; /* the generation machine_ranks came with */
    char message[600];
    msr_failure_t cause;

    /* this node's workers */
    msr_node_worker_t *workers; /* cfg.nworkers */
    int nrunning;
    int worker_generation; /* of the workers spawned, -1 none */
    int ready_generation;  /* the generation this node can start */
    int replaced;          /* workers replaced alone (cfg.ps_async), all generations */
    int stopping;
    int kill_sent;

    /* the coordinator */
    int joined;
    int hb_inflight;
    uint64_t coord_lost_since; /* 0 while it answers; the start before joining */
    int coord_ended;           /* the embedded one exited with the job over; 0 on an answer */
    int spawned;               /* workers were started in some generation */
    int spawn_next;            /* a spawn handed the loop a turn: the next local to start */
    uint64_t spawned_at;       /* when the current generation's were */
    int unwatched_said;        /* the worker_timeout warning for non-libmsrun workers */
    int64_t backoff_ms;
    uint64_t forming_since, last_progress;
    int last_joined;

    /* deadlines (monotonic ns; 0: not armed) */
    uint64_t retry_at, kill_at, stuck_at, hang_at, spawn_at;

    /* the end */
    int finished;
    int exit_code;
    int interrupted; /* the signal that interrupted msrun; -1: another cause; 0 none */
    char leave_reason[700];
    char error[700];

    /* queued actions (a ring) */
    msr_node_action_t *acts;
    size_t acts_cap, acts_head, acts_len;
    uint64_t rng;
} msr_node_t;

/* Prepares n (zeroed by the caller or not); MSR_ERR_NO_MEMORY, with n left
 * cleaned up, when the worker table cannot be allocated. */
msr_status_t msr_node_init(msr_node_t *n, const msr_node_config_t *cfg);
void msr_node_cleanup(msr_node_t *n);

/* The next queued action, 1 if there was one. Actions come out in the order
 * they were decided; performing one may feed events (which queue more). */
int msr_node_next_action(msr_node_t *n, msr_node_action_t *act_p);

/* The earliest armed deadline (monotonic ns), 0 when none: the agent's one
 * timer fires then and feeds msr_node_on_tick. */
uint64_t msr_node_next_deadline(const msr_node_t *n);

/* After the exit: the job's outcome for people, the root cause first (what
 * failed, the restarts used, its last stderr lines), or why msrun stopped.
 * Logs only when the exit code is not 0. */
void msr_node_print_outcome(const msr_node_t *n);

/* ---- events ---- */

/* The loop runs: join (and start watching beats). */
void msr_node_on_start(msr_node_t *n, uint64_t now);
/* The timer: retries, SIGKILL after the grace, giving up on unkillable
 * workers, the beat check. */
void msr_node_on_tick(msr_node_t *n, uint64_t now);
/* A JOIN or HEARTBEAT action could not even be sent. */
void msr_node_on_send_failed(msr_node_t *n, uint64_t now, const char *why);
void msr_node_on_joined(msr_node_t *n, uint64_t now, int generation, int max_restarts);
void msr_node_on_join_failed(msr_node_t *n, uint64_t now, msr_node_join_error_t e, const char *why);
/* The coordinator moved (an election through etcd): a retry due later is
 * sent now, to the new one. */
void msr_node_on_coord_moved(msr_node_t *n, uint64_t now);
/* A heartbeat's answer. */
void msr_node_on_update(msr_node_t *n, uint64_t now, const msr_node_update_t *u);
/* A heartbeat failed: gone = the coordinator no longer knows this node. */
void msr_node_on_heartbeat_failed(msr_node_t *n, uint64_t now, int gone, const char *why);
/* A heartbeat sent through the node's relay failed for want of the relay
 * (the agent said so and sends the next to the coordinator): retried after
 * the backoff, the coordinator not counted as lost. */
void msr_node_on_heartbeat_rerouted(msr_node_t *n, uint64_t now);
/* After ACT_SPAWN: worker local started (pid), or a spawn failed (why) and
 * the ones after it were not tried. */
void msr_node_on_spawned(msr_node_t *n, int local, int pid);
void msr_node_on_spawn_failed(msr_node_t *n, uint64_t now, const char *why);

/* Starting a worker waits until it has exec'd, and with many workers on
 * few cores each start waits behind the ones already spinning (64 on one
 * core took 10 s): a loop that started them all at once answered no
 * heartbeat meanwhile and the coordinator declared the node lost. So a
 * spawn holds the agent's loop at most MSR_NODE_SPAWN_SLICE_MS: the agent
 * asks msr_node_spawn_turn_over after each start (began: when this
 * ACT_SPAWN began) and, when it says 1 with workers left, stops and calls
 * msr_node_on_spawn_paused with the next local; the loop turns (heartbeats,
 * the workers' calls) and a tick queues the next ACT_SPAWN from there. A
 * stop in between cancels the rest. */
#define MSR_NODE_SPAWN_SLICE_MS 50
int msr_node_spawn_turn_over(const msr_node_t *n, uint64_t began, uint64_t now);
void msr_node_on_spawn_paused(msr_node_t *n, uint64_t now, int next);
/* Worker local was reaped: its exit code, or -1 and the signal. */
void msr_node_on_worker_exit(msr_node_t *n, int local, int exit_code, int sig);
/* After ACT_POLL_BEATS: worker local's libmsrun beats (see msr_beat_info_t). */
void msr_node_on_beat(msr_node_t *n, uint64_t now, int local, uint64_t last_beat_ns,
                      uint64_t progress, uint64_t progress_ns);
/* After ACT_POLL_BEATS: worker local has never beaten (it does not link
 * libmsrun, or has not reached msr_init yet): said once per job when it
 * lasts longer than worker_timeout, as such a worker cannot be watched. */
void msr_node_on_no_beat(msr_node_t *n, uint64_t now, int local);
/* A signal to msrun (SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2). */
void msr_node_on_signal(msr_node_t *n, uint64_t now, int sig);
/* The embedded coordinator exited; how: "SIGKILL", "code 1". */
/* job_over: it exited by itself with the code that says the job ended (0
 * done, 1 failed): a node that never joined then stops, as the job it
 * waited for is over; a joined node restarts it once, and gives up (exit 1,
 * "declared this node lost") when the restarted one ends the job too
 * before answering this node. */
void msr_node_on_coord_exit(msr_node_t *n, uint64_t now, const char *how, int job_over);

/* Before joining: how long the join may still take (at least 1 ms), so that
 * a JOIN call never outlives cluster_time_out. */
int64_t msr_node_join_left_ms(const msr_node_t *n, uint64_t now);

#endif
