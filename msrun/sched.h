/* Schedulers as sources of msrun's options: Slurm (srun, sbatch) and
 * Kubernetes (an Indexed Job, a JobSet, Kubeflow's PyTorchJob). One
 * resolver turns options, MSRUN_* variables and the scheduler's variables
 * into the node's settings and records where each came from, for
 * --dry_run. Explicit options and MSRUN_* variables always win; without a
 * scheduler's variables nothing changes. docs/clusters.md says what is read
 * from where. */
#ifndef MSR_MSRUN_SCHED_H
#define MSR_MSRUN_SCHED_H

#include <stddef.h>
#include <stdio.h>

#include "msrun/base.h"

typedef enum msr_sched_kind {
    MSR_SCHED_NONE = 0,
    MSR_SCHED_SLURM,      /* SLURM_JOB_ID is set */
    MSR_SCHED_KUBERNETES, /* JOB_COMPLETION_INDEX, PET_*, or KUBERNETES_SERVICE_HOST */
} msr_sched_kind_t;

/* Where a value came from. */
typedef enum msr_src {
    MSR_SRC_DEFAULT = 0,
    MSR_SRC_OPTION,     /* the command line */
    MSR_SRC_ENV,        /* an MSRUN_* variable */
    MSR_SRC_SLURM,      /* a SLURM_* variable (or scontrol) */
    MSR_SRC_KUBERNETES, /* JOB_COMPLETION_INDEX, PET_*, MASTER_ADDR, MASTER_PORT */
    MSR_SRC_DERIVED,    /* computed from other values */
} msr_src_t;

typedef struct msr_origin {
    msr_src_t src;
    char what[128]; /* the option or variable, and how: "SLURM_NODEID", "--node_rank" */
} msr_origin_t;

/* The origin of each value --dry_run prints. */
typedef struct msr_origins {
    msr_origin_t node_rank, nnodes, master_addr, master_port, local_worker_num, worker_num, job_id,
        coordinator_here, auth, rdzv_backend;
} msr_origins_t;

/* How the resolver reads its world; tests give their own. */
typedef struct msr_sched_env {
    /* A variable's value or NULL (getenv). */
    const char *(*get)(void *ctx, const char *name);
    /* The address msrun should use for a scheduler's host name: the name
     * itself when DNS resolves it, else Slurm's NodeAddr for it. Writes it
     * to out and how it was found to how ("DNS", "NodeAddr of n1");
     * returns 0, or -1 with msr_err_msg() saying why. NULL: names are used
     * as they are. */
    int (*lookup)(void *ctx, const char *host, char *out, size_t len, char *how, size_t how_len);
    void *ctx;
} msr_sched_env_t;

/* What the scheduler says; has_* tells which values it gave. */
typedef struct msr_sched {
    msr_sched_kind_t kind;
    int has_node_rank, node_rank;
    int has_nodes, min_nodes, max_nodes; /* min == max: a fixed size */
    int has_local, local_worker_num;
    int has_addr;
    char master_addr[256];
    int has_port, master_port;
    int has_job_id;
    char job_id[80];
    int in_step;   /* Slurm: under srun (SLURM_STEP_ID), not in a batch script */
    int host_rank; /* the scheduler's index of this node (-1: none); 0 hosts the coordinator */
    msr_origin_t node_rank_from, nodes_from, local_from, addr_from, port_from, job_id_from;
} msr_sched_t;

/* Reads the scheduler's variables through env into *s. want_addr: the
 * master address is needed (not given, more than one node), so a Slurm
 * host name may be looked up (env->lookup). Returns MSR_OK (kind NONE when
 * no scheduler is seen), or MSR_ERR_INVALID_ARG with msr_err_msg() saying
 * why: a variable that is not a number, a malformed SLURM_JOB_NODELIST, a
 * master host that resolves neither way, or several msrun per node (srun
 * -n N with N > nodes), which is refused with the command that is right. */
msr_status_t msr_sched_detect(const msr_sched_env_t *env, int want_addr, msr_sched_t *s);

/* The real environment: getenv, DNS and `scontrol show node NAME` (5 s at
 * most). */
void msr_sched_env_system(msr_sched_env_t *env);

/* Parses "NodeAddr=ADDR" out of `scontrol show node` output into out;
 * returns 0, or -1 when there is none. */
int msr_sched_parse_nodeaddr(const char *text, char *out, size_t len);

const char *msr_sched_kind_name(msr_sched_kind_t kind);
const char *msr_src_name(msr_src_t src);

/* Sets an origin: src and what (printf-style; may be NULL). */
void msr_origin_set(msr_origin_t *o, msr_src_t src, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
