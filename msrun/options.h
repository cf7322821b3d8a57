/* msrun's command line: one table of options (base/optparse.h) gives
 * parsing, MSRUN_* environment variables, defaults and --help. */
#ifndef MSR_MSRUN_OPTIONS_H
#define MSR_MSRUN_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "base/optparse.h"
#include "launcher/sched.h"
#include "msrun/base.h"

/* The bounds of the options that msrun, `msrun coordinator` and `msrun
 * status` share, so that a value one accepts the others accept too (the
 * agent passes its own to the coordinator it starts). Seconds in ms. */
#define MSR_OPTB_SECONDS_MAX      INT64_C(1000000000000)
#define MSR_OPTB_COUNT            .min = 1, .max = INT32_MAX /* worker_num, store_keys_max... */
#define MSR_OPTB_RESTARTS         .min = 0, .max = INT32_MAX
#define MSR_OPTB_PORT             .min = 0, .max = 65535
#define MSR_OPTB_NODES            .min = 1, .max = (1 << 20) /* nnodes */
#define MSR_OPTB_BYTES            .min = 1, .max = INT64_MAX /* store_value_max, store_bytes_max */
#define MSR_OPTB_CLUSTER_TIME_OUT .min = 1, .max = MSR_OPTB_SECONDS_MAX
#define MSR_OPTB_LAST_CALL        .min = 1, .max = MSR_OPTB_SECONDS_MAX
#define MSR_OPTB_NODE_TIMEOUT     .min = 100, .max = MSR_OPTB_SECONDS_MAX
/* --join_hold: 0 takes a late node in without waiting for the workers' save */
#define MSR_OPTB_JOIN_HOLD        .min = 0, .max = MSR_OPTB_SECONDS_MAX
/* --dashboard_login_ttl: 1 s to a day */
#define MSR_OPTB_LOGIN_TTL        .min = 1000, .max = INT64_C(86400000)

/* The smallest --log_max_bytes other than 0: room for a cut line's marker. */
#define MSR_LOG_MAX_BYTES_MIN 1024

/* --rdzv_backend */
typedef enum msr_rdzv_backend {
    MSR_RDZV_STATIC = 0,
    MSR_RDZV_ETCD = 1,
    MSR_RDZV_C10D = 2, /* torchrun's name: parsing makes it MSR_RDZV_STATIC */
} msr_rdzv_backend_t;

/* --nproc_per_node's words, stored in local_worker_num as -1 - the word's
 * index until msr_options_derive_counts resolves them */
typedef enum msr_nproc_word {
    MSR_NPROC_AUTO = -1, /* the visible GPUs, else 1 */
    MSR_NPROC_GPU = -2,  /* the visible GPUs; none is an error */
    MSR_NPROC_CPU = -3,  /* the CPUs msrun may use */
} msr_nproc_word_t;

/* Everything the agent needs, after parsing and validation. */
typedef struct msr_options {
    int worker_num;       /* the job's world size */
    int local_worker_num; /* workers on this node */
    char *master_addr;    /* NULL: standalone on this host */
    int master_port;
    int node_rank; /* -1: assigned by the coordinator */
    char *log_dir; /* NULL: no per-rank files */
    int join;
    int64_t cluster_time_out_ms;
    int bind_core;            /* as given; bind_to says what is done */
    int bind_to;              /* msr_bind_t (msrun/cpus.h) */
    int min_nodes, max_nodes; /* elastic range from --nnodes MIN:MAX; 0 for a fixed size */
    int64_t last_call_ms;
    int64_t join_hold_ms; /* -1: --cluster_time_out (not given) */
    int max_restarts;
    int standalone;
    char *job_id;
    char *token;      /* NULL: none given (the agent decides, see agent.c) */
    char *token_file; /* where the token was read from, or NULL */
    /* TLS (PEM files; NULL: none): every connection to the coordinator is
     * encrypted when tls_cert/tls_key or tls_ca are given */
    char *tls_cert, *tls_key, *tls_ca;
    char *tls_server_name; /* NULL: the host part of master_addr */
    /* --auth=munge: a node without a token gets it from the coordinator
     * with a munge credential (cluster/munge_auth.h); the node that starts
     * the coordinator makes it accept them. Set by scheduler detection too. */
    int auth_munge;
    char *munge_socket;   /* NULL: libmunge's default */
    int64_t grace_ms;     /* SIGTERM -> SIGKILL */
    int64_t heartbeat_ms; /* long-poll interval */
    int64_t node_timeout_ms;
    int64_t coordinator_timeout_ms; /* workers run on this long without it */
    int64_t worker_timeout_ms;      /* 0: hangs are not watched */
    char *error_file;
    char *show_ranks; /* NULL: all ranks reach the terminal */
    /* output and logs */
    char *tail_worker_log; /* "-1" or NULL: all ranks (MindSpore's show_ranks) */
    int tag_output, timestamps, pty;
    char *tee, *redirects; /* "N" or "LOCAL:N,..." (torchrun); NULL: not given */
    char *worker_log_name; /* NULL: worker_{rank}.log */
    /* --log_max_bytes: a worker's log file rotates to NAME.1 past this many
     * bytes (0: no limit); at least MSR_LOG_MAX_BYTES_MIN otherwise */
    int64_t log_max_bytes;
    int log_level;
    /* the coordinator's store limits; 0: its defaults */
    int64_t store_value_max, store_keys_max, store_bytes_max;
    /* the coordinator's bounds of held calls, per client and in total
     * (rendezvous/held.h); 0: its defaults */
    int64_t held_calls_max, held_bytes_max, held_calls_total, held_bytes_total;
    /* the coordinator's dashboard (docs/observe.md): port 0 = none */
    int dashboard_port;
    char *dashboard_addr;   /* NULL: 127.0.0.1 */
    char *straggler_factor; /* as given (checked: a number > 1); NULL: 1.5 */
    /* the dashboard's login URL (docs/observe.md) */
    int64_t dashboard_login_ttl_ms; /* 0: MSR_HTTP_LOGIN_TTL_S */
    char *dashboard_login_file;     /* NULL: on a terminal, else in the job's directory */
    int dashboard_max_connections;  /* 0: MSR_HTTP_MAX_CONNECTIONS */
    int64_t dashboard_deadline_ms;  /* --dashboard_request_timeout; 0: cluster/http.h's */
    /* the program */
    char *program;      /* as given */
    char *program_path; /* what is executed: resolved through PATH */
    char **argv;        /* what is executed and its arguments, NULL-terminated */
    /* Python programs: PROGRAM.py (or -m MODULE) runs as "python PROGRAM
     * ARGS" unless no_python */
    int module, no_python;
    char *python; /* the interpreter, "python3" unless given */
    int argc;
    /* rendezvous */
    char *rdzv_endpoint;  /* as given; moved to master_addr/port or etcd_endpoints */
    int rdzv_backend;     /* msr_rdzv_backend_t */
    char *etcd_endpoints; /* etcd: "host:port[,host:port...]"; NULL: static */
    int etcd_lease;       /* seconds */
    /* which flags were given explicitly (command line or environment) */
    int given_worker_num, given_local_worker_num, given_master_port;
    /* schedulers (msrun/sched.h) and where each setting came from */
    int sched;            /* msr_sched_kind_t seen in the environment */
    int coordinator_here; /* 1: host it on 0.0.0.0:master_port; 0: never; -1: if master_addr is
                             local */
    int dry_run;          /* print the resolved settings and exit */
    /* torchrun's and mpirun's habits (issue 39) */
    char **exports;              /* -x VAR[=VALUE], NULL-terminated; NULL: none */
    int torch_port;              /* the workers' MASTER_PORT; 0: a free port */
    int64_t monitor_interval_ms; /* accepted, ignored */
    char *rdzv_conf;             /* as given; applied to the options it maps to */
    char *local_addr;            /* NULL: the address that reaches the coordinator */
    char *local_ranks_filter;    /* NULL: every local rank reaches the terminal */
    int start_method;            /* accepted, ignored */
    msr_origins_t origins;
    /* relays (issue 40): this node's joins and heartbeats go through the
     * relay at this HOST:PORT (`msrun relay`); NULL: to the coordinator */
    char *relay;
    /* --relays: every K-th node serves a relay for its group (relays.h);
     * MSR_RELAYS_AUTO (-1) or MSR_RELAYS_OFF (-2) otherwise */
    int relays;
    /* --relays_host: the host of this node's group's first node, which
     * serves the group's relay; NULL: from Slurm or a loopback coordinator */
    char *relays_host;
    /* one command for a whole job (launcher/remote.h): NULL when not given */
    char *hostfile, *hosts; /* --hostfile, --host (-H) */
    char *ssh;              /* --ssh: how to reach a host; NULL: "ssh" */
    char *forward_env;      /* --forward_env: NAME[,NAME...] */
    int exit_on_stdin_eof;  /* stop the job when stdin closes (set on remote msruns) */
    /* the launch timeline (base/lprof.h) */
    int profile_launch; /* --profile_launch: print it when the job ends */
    uint64_t start_ns;  /* msr_now_ns() when main() began: the timeline's zero */
    /* parameter server roles (docs/ps.md): the last ps_servers global ranks
     * are servers; 0: no roles */
    int ps_servers;
    int ps_staleness; /* -1: synchronous; K >= 0: asynchronous, staleness K */
} msr_options_t;

/* Parses argv (after "msrun"), reading MSRUN_* variables for options not
 * on the command line, and validates everything that can be checked before
 * any process starts. On failure prints one line "msrun: error: ..." to
 * stderr and returns 2; returns 1 after printing --help or --version (exit
 * 0), 0 on success. */
int msr_options_parse(int argc, char **argv, msr_options_t *opts);

void msr_options_cleanup(msr_options_t *opts);

/* --dry_run: prints the resolved settings, one "name = value (source)"
 * per line (docs/clusters.md). */
void msr_options_print_resolved(const msr_options_t *opts, FILE *out);

/* Prints the usage text for the agent. */
void msr_options_usage(FILE *out);

/* The job token of `msrun coordinator` and `msrun status`, which have no
 * default: *token_p as given (--token or MSRUN_TOKEN) or else read from
 * token_file; prog names the command in the error line. Returns 0, or
 * prints why and returns 2. */
int msr_options_need_token(const char *prog, char **token_p, const char *token_file);

/* Whether global rank r, local rank local_rank, passes the --show_ranks,
 * --tail_worker_log and --local_ranks_filter filters. */
int msr_options_show_rank(const msr_options_t *opts, int rank, int local_rank);

/* The GPUs a worker of this node may see: CUDA_VISIBLE_DEVICES's entries
 * when it is set (up to the first that is no device, as CUDA reads it),
 * else the NVIDIA GPUs the driver lists; 0 for none. */
int msr_options_visible_gpus(void);

/* Where worker local_rank's streams go (MSR_STD_OUT, MSR_STD_ERR bits):
 * *file_p those written to its log file (none without --log_dir), *off_p
 * those kept off the terminal (--redirects without --tee). */
void msr_options_streams(const msr_options_t *opts, int local_rank, int *file_p, int *off_p);

#endif
