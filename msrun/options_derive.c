/* msrun's derived settings: what Slurm and Kubernetes say, the worker and
 * node counts, the coordinator's address and port, each with where it came
 * from (--dry_run prints them). */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "launcher/options.h"
#include "launcher/options_impl.h"
#include "launcher/relays.h"
#include "launcher/sched.h"

/* The origin of option name when it was given (seen: 1 command line, 2
 * environment); left alone otherwise. */
static void origin_given(const unsigned char *seen, const char *name, msr_origin_t *org)
{
    int k = msr_opts_find(&msr_options_set, name);
    if (k < 0 || seen[k] == 0)
        return;
    char buf[64];
    msr_origin_set(org, seen[k] == 2 ? MSR_SRC_ENV : MSR_SRC_OPTION, "%s",
                   msr_opts_where(&msr_options_set, seen, name, buf, sizeof buf));
}

/* Slurm and Kubernetes (msrun/sched.h): their values fill what the options
 * and MSRUN_* variables left at the default, except the master's address
 * and port, which apply_sched_master takes once the job's node count is
 * known. Without a scheduler's variables nothing changes. s gets what the
 * scheduler said. */
int msr_options_apply_sched(msr_options_t *o, const unsigned char *seen, msr_sched_t *s_p)
{
    msr_origins_t *g = &o->origins;
    origin_given(seen, "node_rank", &g->node_rank);
    origin_given(seen, "nnodes", &g->nnodes);
    origin_given(seen, "master_addr", &g->master_addr);
    if (g->master_port.src == MSR_SRC_DEFAULT) /* else it came with master_addr */
        origin_given(seen, "master_port", &g->master_port);
    origin_given(seen, "rdzv_endpoint", &g->master_addr);
    origin_given(seen, "rdzv_endpoint", &g->master_port);
    origin_given(seen, "local_worker_num", &g->local_worker_num);
    origin_given(seen, "worker_num", &g->worker_num);
    origin_given(seen, "job_id", &g->job_id);
    origin_given(seen, "coordinator_here", &g->coordinator_here);
    origin_given(seen, o->token_file ? "token_file" : "token", &g->auth);
    origin_given(seen, "rdzv_backend", &g->rdzv_backend);
    /* etcd elects the coordinator's node: no master address to find */
    int addr_given = g->master_addr.src != MSR_SRC_DEFAULT || o->etcd_endpoints != NULL;
    msr_sched_env_t env;
    msr_sched_env_system(&env);
    msr_sched_t s;
    if (msr_sched_detect(&env, !addr_given && !o->standalone, &s) != MSR_OK) {
        fprintf(stderr, "msrun: error: %s\n", msr_err_msg());
        return -1;
    }
    *s_p = s;
    o->sched = s.kind;
    if (s.kind == MSR_SCHED_NONE)
        return 0;
    if (s.kind == MSR_SCHED_SLURM && !s.in_step && s.has_nodes && s.max_nodes > 1 &&
        !o->standalone && !addr_given && g->nnodes.src == MSR_SRC_DEFAULT &&
        g->node_rank.src == MSR_SRC_DEFAULT) {
        fprintf(stderr,
                "msrun: error: this Slurm job has %d nodes but msrun runs outside srun (no "
                "SLURM_STEP_ID: a batch script or salloc shell), so only this node would start; "
                "run one msrun per node: srun -N%d --ntasks-per-node=1 msrun ...\n",
                s.max_nodes, s.max_nodes);
        return -1;
    }
    if (!o->standalone) {
        if (s.has_nodes && g->nnodes.src == MSR_SRC_DEFAULT) {
            o->min_nodes = s.min_nodes;
            o->max_nodes = s.max_nodes;
            g->nnodes = s.nodes_from;
        }
        /* an elastic job's coordinator assigns node ranks */
        if (s.has_node_rank && g->node_rank.src == MSR_SRC_DEFAULT &&
            o->min_nodes == o->max_nodes) {
            o->node_rank = s.node_rank;
            g->node_rank = s.node_rank_from;
        }
    }
    if (s.has_local && g->local_worker_num.src == MSR_SRC_DEFAULT &&
        g->worker_num.src == MSR_SRC_DEFAULT) {
        o->local_worker_num = s.local_worker_num;
        o->given_local_worker_num = 1;
        g->local_worker_num = s.local_from;
    }
    if (s.has_job_id && g->job_id.src == MSR_SRC_DEFAULT) {
        if (msr_options_set_string(&o->job_id, s.job_id) != 0)
            return -1;
        g->job_id = s.job_id_from;
    }
    msr_src_t src = s.kind == MSR_SCHED_SLURM ? MSR_SRC_SLURM : MSR_SRC_KUBERNETES;
    int rank = o->node_rank >= 0 ? o->node_rank : s.host_rank;
    if (g->coordinator_here.src == MSR_SRC_DEFAULT && rank >= 0) {
        o->coordinator_here = rank == 0;
        msr_origin_set(&g->coordinator_here, src, "node rank %d%s", rank,
                       rank == 0 ? " hosts it" : "");
    }
    return 0;
}

/* The scheduler's master address and port (s from apply_sched), for a job
 * of more than one node only, as one node needs no coordinator elsewhere:
 * a scheduler's MASTER_ADDR must not turn a one-node job into one node of
 * a multi-node job that waits for a token. */
static int apply_sched_master(msr_options_t *o, const msr_sched_t *s, int job_nodes)
{
    msr_origins_t *g = &o->origins;
    if (s->kind == MSR_SCHED_NONE || o->standalone)
        return 0;
    int addr_given = g->master_addr.src != MSR_SRC_DEFAULT || o->etcd_endpoints != NULL;
    if (s->has_addr && !addr_given && job_nodes > 1) {
        if (msr_options_set_string(&o->master_addr, s->master_addr) != 0)
            return -1;
        g->master_addr = s->addr_from;
    }
    if (s->has_port && g->master_port.src == MSR_SRC_DEFAULT && o->master_addr) {
        o->master_port = s->master_port;
        g->master_port = s->port_from;
    }
    if (s->kind == MSR_SCHED_SLURM && o->token == NULL && o->master_addr) {
        /* never a token made from the job id: others could guess it */
        o->auth_munge = 1;
        msr_origin_set(&g->auth, MSR_SRC_SLURM, "no token given: munge credentials");
    }
    return 0;
}

/* The origins of the worker counts derive_counts filled in. */
void msr_options_origins_derived(msr_options_t *o)
{
    msr_origins_t *g = &o->origins;
    if (g->local_worker_num.src == MSR_SRC_DEFAULT && o->given_worker_num)
        msr_origin_set(&g->local_worker_num, MSR_SRC_DERIVED, "worker_num / nnodes");
    if (g->worker_num.src == MSR_SRC_DEFAULT)
        msr_origin_set(&g->worker_num, MSR_SRC_DERIVED, "local_worker_num x %snnodes",
                       o->max_nodes > o->min_nodes ? "MAX " : "");
}

static void print_line(FILE *out, const char *name, const char *value, const msr_origin_t *org,
                       const char *default_what)
{
    const char *what =
        org->src == MSR_SRC_DEFAULT && org->what[0] == '\0' ? default_what : org->what;
    fprintf(out, "%s = %s (%s%s%s)\n", name, value, msr_src_name(org->src),
            what && *what ? ": " : "", what ? what : "");
}

/* This node's relay plan (relays.h), or why it has none, as every
 * --dry_run line: name = value (source[: detail]) */
static void print_relays(FILE *out, const msr_options_t *o)
{
    msr_relays_plan_t p;
    if (msr_relays_plan(o, &p) != 0) /* checked with the options: not reached */
        return;
    if (p.k == 0)
        fprintf(out, "relays = off (derived: %s)\n", p.why);
    else
        fprintf(out, "relays = %s@%s (derived: nodes %d to %d, served by %s)\n", p.id, p.target,
                p.leader, p.leader + p.members - 1, p.serve ? "this node" : "its first node");
}

void msr_options_print_resolved(const msr_options_t *o, FILE *out)
{
    const msr_origins_t *g = &o->origins;
    char v[320];
    msr_origin_t org = {MSR_SRC_DEFAULT, ""};
    if (o->sched == MSR_SCHED_SLURM)
        msr_origin_set(&org, MSR_SRC_SLURM, "SLURM_JOB_ID is set");
    else if (o->sched == MSR_SCHED_KUBERNETES)
        msr_origin_set(&org, MSR_SRC_KUBERNETES, "its variables are set");
    print_line(out, "scheduler", msr_sched_kind_name((msr_sched_kind_t)o->sched), &org,
               "no Slurm or Kubernetes variables");
    snprintf(v, sizeof v, "%d", o->node_rank);
    print_line(out, "node_rank", v, &g->node_rank, "the coordinator assigns it");
    if (o->max_nodes > o->min_nodes)
        snprintf(v, sizeof v, "%d:%d", o->min_nodes, o->max_nodes);
    else
        snprintf(v, sizeof v, "%d", o->worker_num / o->local_worker_num);
    msr_origin_t nn = g->nnodes;
    if (nn.src == MSR_SRC_DEFAULT)
        msr_origin_set(&nn, MSR_SRC_DERIVED, "worker_num / local_worker_num");
    print_line(out, "nnodes", v, &nn, NULL);
    if (o->etcd_endpoints) {
        msr_origin_t eo = g->rdzv_backend;
        print_line(out, "master_addr", "elected through etcd", &eo, NULL);
        print_line(out, "etcd_endpoints", o->etcd_endpoints, &eo, NULL);
    } else {
        print_line(out, "master_addr", o->master_addr ? o->master_addr : "none", &g->master_addr,
                   "a standalone job on this host");
    }
    if (o->etcd_endpoints) {
        msr_origin_t d;
        msr_origin_set(&d, MSR_SRC_DERIVED, "--rdzv_backend=etcd");
        print_line(out, "master_port", "0", &d, "a free port on the node etcd elects");
        print_line(out, "coordinator_here", "if elected", &d, NULL);
    } else {
        if (o->master_addr || o->given_master_port)
            snprintf(v, sizeof v, "%d", o->master_port);
        else
            snprintf(v, sizeof v, "0");
        print_line(out, "master_port", v, &g->master_port,
                   o->master_addr || o->given_master_port ? NULL : "0: a free loopback port");
        print_line(out, "coordinator_here",
                   o->master_addr == NULL     ? "true"
                   : o->coordinator_here > 0  ? "true"
                   : o->coordinator_here == 0 ? "false"
                                              : "auto",
                   &g->coordinator_here,
                   o->master_addr ? "when master_addr is a local address" : "standalone");
    }
    if (o->torch_port > 0) { /* issue 39: the workers' MASTER_PORT */
        msr_origin_t tp;
        if (o->torch_port == o->master_port + 1)
            msr_origin_set(&tp, MSR_SRC_DERIVED, "master_port + 1");
        else
            msr_origin_set(&tp, MSR_SRC_OPTION, "--torch_port");
        snprintf(v, sizeof v, "%d", o->torch_port);
        print_line(out, "torch_port", v, &tp, NULL);
    }
    snprintf(v, sizeof v, "%d", o->local_worker_num);
    print_line(out, "local_worker_num", v, &g->local_worker_num, NULL);
    snprintf(v, sizeof v, "%d", o->worker_num);
    print_line(out, "worker_num", v, &g->worker_num, NULL);
    print_line(out, "job_id",
               o->job_id        ? o->job_id
               : o->master_addr ? "default"
                                : "random",
               &g->job_id, o->master_addr ? NULL : "a new one each run");
    const char *auth = o->auth_munge                 ? "munge"
                       : (o->token || o->token_file) ? "token"
                                                     : "generated";
    print_line(out, "auth", auth, &g->auth,
               o->master_addr ? "node 0 makes a token up; the other nodes must be given it"
                              : "a random token");
    print_line(out, "rdzv_backend", msr_options_rdzv_choices[o->rdzv_backend], &g->rdzv_backend,
               NULL);
    print_relays(out, o);
    msr_origin_set(&org, MSR_SRC_OPTION, "PROGRAM");
    print_line(out, "program", o->program_path ? o->program_path : o->program, &org, NULL);
}

/* Worker counts and node counts: derives what was not given, takes the
 * scheduler's master (s) for a job of several nodes, and checks that they
 * agree. */
int msr_options_derive_counts(msr_options_t *o, const msr_sched_t *s)
{
    int nodes = o->max_nodes ? o->max_nodes : 1;
    if (msr_options_resolve_nproc(o) != 0)
        return 2;
    if (o->standalone) {
        msr_free(o->master_addr);
        o->master_addr = NULL;
        nodes = 1;
        if (o->max_nodes > 1) {
            msr_options_error("--standalone runs one node, but --nnodes=%d", o->max_nodes);
            return 2;
        }
    }
    if (o->given_worker_num && !o->given_local_worker_num) {
        if (o->worker_num % nodes) {
            msr_options_error("worker_num %d does not divide among %d nodes", o->worker_num, nodes);
            return 2;
        }
        o->local_worker_num = o->worker_num / nodes;
    } else if (!o->given_worker_num) {
        o->worker_num = o->local_worker_num * nodes;
    }
    if (o->worker_num % o->local_worker_num != 0) {
        msr_options_error("worker_num %d is not a multiple of local_worker_num %d", o->worker_num,
                          o->local_worker_num);
        return 2;
    }
    int job_nodes = o->worker_num / o->local_worker_num;
    if (o->max_nodes && o->min_nodes == o->max_nodes && job_nodes != o->max_nodes) {
        msr_options_error("worker_num %d / local_worker_num %d makes %d nodes, but --nnodes=%d",
                          o->worker_num, o->local_worker_num, job_nodes, o->max_nodes);
        return 2;
    }
    if (o->max_nodes && o->min_nodes != o->max_nodes) {
        /* elastic: the world is nodes x local_worker_num, at most MAX nodes */
        if (o->given_worker_num && o->worker_num != o->max_nodes * o->local_worker_num) {
            msr_options_error("in an elastic job (--nnodes=%d:%d) the world size is nodes x "
                              "local_worker_num: leave --worker_num out (or give %d)",
                              o->min_nodes, o->max_nodes, o->max_nodes * o->local_worker_num);
            return 2;
        }
        if (o->node_rank >= 0) {
            msr_options_error(
                "an elastic job (--nnodes=%d:%d) assigns node ranks: leave --node_rank out",
                o->min_nodes, o->max_nodes);
            return 2;
        }
    } else {
        o->min_nodes = o->max_nodes = 0; /* a fixed size, however it was given */
    }
    if (apply_sched_master(o, s, job_nodes) != 0)
        return 2;
    if (o->master_addr == NULL && o->etcd_endpoints == NULL && job_nodes > 1) {
        msr_options_error(
            "a job of %d nodes needs --master_addr (worker_num %d, local_worker_num %d)", job_nodes,
            o->worker_num, o->local_worker_num);
        return 2;
    }
    if (o->node_rank >= job_nodes) {
        msr_options_error("node_rank %d is out of range: the job has %d node%s", o->node_rank,
                          job_nodes, job_nodes == 1 ? "" : "s");
        return 2;
    }
    return 0;
}

/* --master_addr=HOST:PORT or [v6]:PORT (an address that holds a port, as
 * --rdzv_endpoint does): split into master_addr and master_port. As for
 * --bind_core, the command line wins over MSRUN_*; a master_port given at
 * the same level must be the same port. An IPv6 address without brackets
 * (::1) or in brackets alone ([::1]) holds no port. */
int msr_options_split_master_addr(msr_options_t *o, const unsigned char *seen)
{
    const char *a = o->master_addr;
    const char *colon = a ? strrchr(a, ':') : NULL;
    if (colon == NULL)
        return 0;
    int has_port = a[0] == '[' ? colon[-1] == ']' : strchr(a, ':') == colon;
    if (!has_port)
        return 0;
    char where[64], pwhere[64];
    const char *w = msr_opts_where(&msr_options_set, seen, "master_addr", where, sizeof where);
    char *host = NULL;
    int port;
    if (msr_opts_hostport(a, w, 1, 65535, &host, &port) != MSR_OK) {
        msr_options_error("%s", msr_err_msg());
        return 2;
    }
    int addr_level = seen[msr_opts_find(&msr_options_set, "master_addr")]; /* 1 or 2 */
    int port_level = seen[msr_opts_find(&msr_options_set, "master_port")]; /* 0: not given */
    if (port_level == addr_level && o->master_port != port) {
        msr_options_error(
            "%s=%s and %s=%d name different ports: give one", w, a,
            msr_opts_where(&msr_options_set, seen, "master_port", pwhere, sizeof pwhere),
            o->master_port);
        msr_free(host);
        return 2;
    }
    if (port_level == 0 || addr_level < port_level) {
        o->master_port = port;
        msr_origin_set(&o->origins.master_port, addr_level == 2 ? MSR_SRC_ENV : MSR_SRC_OPTION,
                       "%s", w);
    }
    msr_free(o->master_addr);
    o->master_addr = host;
    return 0;
}

/* --rdzv_endpoint: master_addr and master_port (static), or etcd's
 * endpoints (etcd), which also needs the job's token on every node. */
int msr_options_resolve_rdzv(msr_options_t *o, const unsigned char *seen)
{
    char where[64];
    const char *w = msr_opts_where(&msr_options_set, seen, "rdzv_endpoint", where, sizeof where);
    if (o->rdzv_backend != MSR_RDZV_ETCD) {
        if (o->rdzv_endpoint && msr_opts_hostport(o->rdzv_endpoint, w, 1, 65535, &o->master_addr,
                                                  &o->master_port) != MSR_OK) {
            fprintf(stderr, "msrun: error: %s\n", msr_err_msg());
            return 2;
        }
        return 0;
    }
    if (o->rdzv_endpoint == NULL || o->rdzv_endpoint[0] == '\0') {
        msr_options_error(
            "--rdzv_backend=etcd needs etcd's endpoints: --rdzv_endpoint=HOST:PORT[,...]");
        return 2;
    }
    if (o->master_addr || o->standalone) {
        msr_options_error("--rdzv_backend=etcd elects the coordinator's node: leave --%s out",
                          o->standalone ? "standalone" : "master_addr");
        return 2;
    }
    if (o->token == NULL) {
        msr_options_error(
            "--rdzv_backend=etcd needs the job's token on every node (MSRUN_TOKEN or "
            "--token_file FILE): whichever node is elected cannot hand out one it made up");
        return 2;
    }
    o->etcd_endpoints = o->rdzv_endpoint;
    o->rdzv_endpoint = NULL;
    return 0;
}
