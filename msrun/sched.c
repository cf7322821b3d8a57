/* Scheduler detection: what Slurm's and Kubernetes' variables say about
 * this node (sched.h). msr_sched_detect reads only through its env, so
 * tests feed it variables and lookups of their own. */
#include "launcher/sched.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "launcher/hostlist.h"
#include "launcher/net.h"
#include "launcher/spawn.h"

/* Under Slurm the coordinator's port is this plus the job id modulo 10000,
 * so that two jobs sharing a node do not meet on one port. */
#define SLURM_PORT_BASE 20000
#define SCONTROL_MS     5000

const char *msr_sched_kind_name(msr_sched_kind_t kind)
{
    switch (kind) {
    case MSR_SCHED_SLURM:
        return "slurm";
    case MSR_SCHED_KUBERNETES:
        return "kubernetes";
    default:
        return "none";
    }
}

const char *msr_src_name(msr_src_t src)
{
    static const char *const names[] = {"default", "option",     "env",
                                        "slurm",   "kubernetes", "derived"};
    return (unsigned)src < sizeof names / sizeof names[0] ? names[src] : "default";
}

void msr_origin_set(msr_origin_t *o, msr_src_t src, const char *fmt, ...)
{
    o->src = src;
    o->what[0] = '\0';
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(o->what, sizeof o->what, fmt, ap);
        va_end(ap);
    }
}

static const char *get(const msr_sched_env_t *env, const char *name)
{
    const char *v = env->get(env->ctx, name);
    return v && *v ? v : NULL;
}

/* The first of names that is set; *name_p says which. */
static const char *get_first(const msr_sched_env_t *env, const char *const *names,
                             const char **name_p)
{
    for (; *names; names++) {
        const char *v = get(env, *names);
        if (v) {
            *name_p = *names;
            return v;
        }
    }
    return NULL;
}

/* name's value as an integer in [min, max]: 1 if set, 0 if not, -1 (with
 * the error text) if it is not such a number. */
static int get_int(const msr_sched_env_t *env, const char *name, int64_t min, int64_t max, int *v_p)
{
    const char *v = get(env, name);
    if (v == NULL)
        return 0;
    int64_t x;
    if (msr_parse_i64(v, min, max, &x) != MSR_OK) {
        msr_err(MSR_ERR_INVALID_ARG, "%s='%.40s' is not a number from %lld to %lld", name, v,
                (long long)min, (long long)max);
        return -1;
    }
    *v_p = (int)x;
    return 1;
}

/* "N" or "MIN:MAX" (torchrun's --nnodes, Kubeflow's PET_NNODES). */
static int parse_nodes(const char *name, const char *v, int *min_p, int *max_p)
{
    char buf[48];
    snprintf(buf, sizeof buf, "%s", v);
    char *colon = strchr(buf, ':');
    if (colon)
        *colon = '\0';
    int64_t a, b;
    if (msr_parse_i64(buf, 1, 1 << 20, &a) != MSR_OK ||
        (colon && msr_parse_i64(colon + 1, 1, 1 << 20, &b) != MSR_OK) || strlen(v) >= sizeof buf) {
        msr_err(MSR_ERR_INVALID_ARG, "%s='%.40s' is not a node count N or a range MIN:MAX", name,
                v);
        return -1;
    }
    if (!colon)
        b = a;
    if (a > b) {
        msr_err(MSR_ERR_INVALID_ARG, "%s='%.40s': MIN is larger than MAX", name, v);
        return -1;
    }
    *min_p = (int)a;
    *max_p = (int)b;
    return 0;
}

static msr_status_t detect_slurm(const msr_sched_env_t *env, int want_addr, msr_sched_t *s)
{
    const char *jobvar = NULL;
    static const char *const job_names[] = {"SLURM_JOB_ID", "SLURM_JOBID", NULL};
    const char *job = get_first(env, job_names, &jobvar);
    int64_t jobnum;
    if (msr_parse_i64(job, 0, INT64_MAX, &jobnum) != MSR_OK)
        return msr_err(MSR_ERR_INVALID_ARG, "%s='%.40s' is not a Slurm job id", jobvar, job);
    s->kind = MSR_SCHED_SLURM;
    s->has_job_id = 1;
    snprintf(s->job_id, sizeof s->job_id, "slurm-%lld", (long long)jobnum);
    msr_origin_set(&s->job_id_from, MSR_SRC_SLURM, "%s", jobvar);
    s->has_port = 1;
    s->master_port = SLURM_PORT_BASE + (int)(jobnum % 10000);
    msr_origin_set(&s->port_from, MSR_SRC_SLURM, "%d + %s mod 10000", SLURM_PORT_BASE, jobvar);

    /* Under srun the step's variables describe this step (srun -N1 inside
     * a 2-node allocation is one node); in a batch script only the job's
     * exist. */
    s->in_step = get(env, "SLURM_STEP_ID") != NULL;
    static const char *const node_names[] = {"SLURM_STEP_NUM_NODES", "SLURM_NNODES",
                                             "SLURM_JOB_NUM_NODES", NULL};
    const char *nodesvar = NULL;
    if (get_first(env, node_names, &nodesvar)) {
        int n = 0; /* get_first found it: get_int sets it or fails */
        if (get_int(env, nodesvar, 1, 1 << 20, &n) <= 0)
            return MSR_ERR_INVALID_ARG;
        s->has_nodes = 1;
        s->min_nodes = s->max_nodes = n;
        msr_origin_set(&s->nodes_from, MSR_SRC_SLURM, "%s", nodesvar);
    }
    int r = get_int(env, "SLURM_NODEID", 0, (1 << 20) - 1, &s->node_rank);
    if (r < 0)
        return MSR_ERR_INVALID_ARG;
    if (r > 0) {
        s->has_node_rank = 1;
        s->host_rank = s->node_rank;
        msr_origin_set(&s->node_rank_from, MSR_SRC_SLURM, "SLURM_NODEID");
    }
    if (s->in_step) {
        /* one msrun per node: it starts its node's workers itself */
        static const char *const task_names[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", NULL};
        const char *tasksvar = NULL;
        int tasks = 0, localid = 0;
        if (get_first(env, task_names, &tasksvar) && get_int(env, tasksvar, 1, INT_MAX, &tasks) < 0)
            return MSR_ERR_INVALID_ARG;
        if (get_int(env, "SLURM_LOCALID", 0, INT_MAX, &localid) < 0)
            return MSR_ERR_INVALID_ARG;
        int nodes = s->has_nodes ? s->max_nodes : 1;
        if (tasks > nodes || localid > 0)
            return msr_err(MSR_ERR_INVALID_ARG,
                           "srun started %d msrun on %d node%s (%s=%d%s): msrun starts its "
                           "node's workers itself, so run one msrun per node: srun -N%d "
                           "--ntasks-per-node=1 msrun --local_worker_num=<workers per node> ...",
                           tasks > nodes ? tasks : nodes + 1, nodes, nodes == 1 ? "" : "s",
                           tasksvar ? tasksvar : "SLURM_LOCALID", tasksvar ? tasks : localid,
                           localid > 0 ? ", this one has SLURM_LOCALID>0" : "", nodes);
    }
    r = get_int(env, "SLURM_GPUS_ON_NODE", 0, INT_MAX, &s->local_worker_num);
    if (r < 0)
        return MSR_ERR_INVALID_ARG;
    if (r > 0 && s->local_worker_num > 0) {
        s->has_local = 1;
        msr_origin_set(&s->local_from, MSR_SRC_SLURM, "SLURM_GPUS_ON_NODE");
    }
    /* outside srun only this node would start (msrun says so), so the
     * master is not looked up */
    if (!want_addr || !s->in_step || !s->has_nodes || s->max_nodes < 2)
        return MSR_OK;
    /* the master: the first host of the step's (or job's) node list */
    static const char *const list_names[] = {"SLURM_STEP_NODELIST", "SLURM_NODELIST",
                                             "SLURM_JOB_NODELIST", NULL};
    const char *listvar = NULL;
    const char *list = get_first(env, list_names, &listvar);
    if (list == NULL)
        return msr_err(MSR_ERR_INVALID_ARG,
                       "a Slurm job of %d nodes without SLURM_JOB_NODELIST: give --master_addr",
                       s->max_nodes);
    msr_hostlist_t hl;
    if (msr_hostlist_expand(list, 0, &hl) != MSR_OK)
        return msr_err_prefix(MSR_ERR_INVALID_ARG, "%s", listvar);
    char first[MSR_HOSTLIST_NAME_MAX + 1];
    snprintf(first, sizeof first, "%s", hl.hosts[0]);
    msr_hostlist_free(&hl);
    char how[96] = "";
    if (env->lookup) {
        if (env->lookup(env->ctx, first, s->master_addr, sizeof s->master_addr, how, sizeof how) !=
            0)
            return msr_err_prefix(MSR_ERR_INVALID_ARG,
                                  "the master address, %s (the first host of %s)", first, listvar);
    } else {
        snprintf(s->master_addr, sizeof s->master_addr, "%s", first);
    }
    s->has_addr = 1;
    if (strcmp(s->master_addr, first) == 0)
        msr_origin_set(&s->addr_from, MSR_SRC_SLURM, "the first host of %s", listvar);
    else
        msr_origin_set(&s->addr_from, MSR_SRC_SLURM, "%s, the first host of %s", how, listvar);
    return MSR_OK;
}

/* Kubeflow's PyTorchJob sets PET_* (torchrun's variables) and MASTER_*; an
 * Indexed Job or a JobSet sets JOB_COMPLETION_INDEX. */
static msr_status_t detect_kubernetes(const msr_sched_env_t *env, msr_sched_t *s)
{
    static const char *const marks[] = {
        "JOB_COMPLETION_INDEX", "PET_NNODES",      "PET_NODE_RANK",           "PET_NPROC_PER_NODE",
        "PET_MASTER_ADDR",      "PET_MASTER_PORT", "KUBERNETES_SERVICE_HOST", NULL};
    const char *mark;
    if (get_first(env, marks, &mark) == NULL)
        return MSR_OK;
    s->kind = MSR_SCHED_KUBERNETES;
    const char *v = get(env, "PET_NNODES");
    if (v) {
        if (parse_nodes("PET_NNODES", v, &s->min_nodes, &s->max_nodes) != 0)
            return MSR_ERR_INVALID_ARG;
        s->has_nodes = 1;
        msr_origin_set(&s->nodes_from, MSR_SRC_KUBERNETES, "PET_NNODES");
    }
    static const char *const rank_names[] = {"PET_NODE_RANK", "JOB_COMPLETION_INDEX", NULL};
    const char *rankvar = NULL;
    if (get_first(env, rank_names, &rankvar)) {
        if (get_int(env, rankvar, 0, (1 << 20) - 1, &s->host_rank) < 0)
            return MSR_ERR_INVALID_ARG;
        /* an elastic job's coordinator assigns node ranks */
        if (!s->has_nodes || s->min_nodes == s->max_nodes) {
            s->has_node_rank = 1;
            s->node_rank = s->host_rank;
            msr_origin_set(&s->node_rank_from, MSR_SRC_KUBERNETES, "%s", rankvar);
        }
    }
    v = get(env, "PET_NPROC_PER_NODE");
    /* torchrun's words for "count them" are left to msrun's own default */
    if (v && strcmp(v, "auto") != 0 && strcmp(v, "gpu") != 0 && strcmp(v, "cpu") != 0) {
        if (get_int(env, "PET_NPROC_PER_NODE", 1, INT_MAX, &s->local_worker_num) < 0)
            return MSR_ERR_INVALID_ARG;
        s->has_local = 1;
        msr_origin_set(&s->local_from, MSR_SRC_KUBERNETES, "PET_NPROC_PER_NODE");
    }
    /* torchrun's plain MASTER_* count only beside a variable that makes
     * this pod a node of a job (any pod may carry them, and
     * KUBERNETES_SERVICE_HOST is in every pod) */
    static const char *const job_names[] = {"PET_NNODES", "PET_NODE_RANK", "JOB_COMPLETION_INDEX",
                                            NULL};
    const char *jobvar;
    int plain = get_first(env, job_names, &jobvar) != NULL;
    static const char *const addr_names[] = {"PET_MASTER_ADDR", "MASTER_ADDR", NULL};
    static const char *const pet_addr_names[] = {"PET_MASTER_ADDR", NULL};
    const char *addrvar = NULL;
    if ((v = get_first(env, plain ? addr_names : pet_addr_names, &addrvar)) != NULL) {
        if (strlen(v) >= sizeof s->master_addr)
            return msr_err(MSR_ERR_INVALID_ARG, "%s is longer than %zu characters", addrvar,
                           sizeof s->master_addr - 1);
        s->has_addr = 1;
        snprintf(s->master_addr, sizeof s->master_addr, "%s", v);
        msr_origin_set(&s->addr_from, MSR_SRC_KUBERNETES, "%s", addrvar);
    }
    static const char *const port_names[] = {"PET_MASTER_PORT", "MASTER_PORT", NULL};
    static const char *const pet_port_names[] = {"PET_MASTER_PORT", NULL};
    const char *portvar = NULL;
    if (get_first(env, plain ? port_names : pet_port_names, &portvar)) {
        if (get_int(env, portvar, 1, 65535, &s->master_port) < 0)
            return MSR_ERR_INVALID_ARG;
        s->has_port = 1;
        msr_origin_set(&s->port_from, MSR_SRC_KUBERNETES, "%s", portvar);
    }
    return MSR_OK;
}

msr_status_t msr_sched_detect(const msr_sched_env_t *env, int want_addr, msr_sched_t *out)
{
    msr_sched_t s;
    memset(&s, 0, sizeof s);
    s.host_rank = -1;
    msr_status_t st = MSR_OK;
    if (get(env, "SLURM_JOB_ID") || get(env, "SLURM_JOBID"))
        st = detect_slurm(env, want_addr, &s);
    else
        st = detect_kubernetes(env, &s);
    if (st != MSR_OK)
        return st;
    *out = s;
    return MSR_OK;
}

/* ---- the real environment: getenv, DNS, scontrol ---- */

int msr_sched_parse_nodeaddr(const char *text, char *out, size_t len)
{
    for (const char *p = text; (p = strstr(p, "NodeAddr=")) != NULL; p++) {
        if (p != text && p[-1] != ' ' && p[-1] != '\n' && p[-1] != '\t')
            continue;
        p += strlen("NodeAddr=");
        size_t n = strcspn(p, " \t\r\n");
        if (n == 0 || n >= len)
            return -1;
        memcpy(out, p, n);
        out[n] = '\0';
        return 0;
    }
    return -1;
}

static const char *sys_get(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

/* prog found through PATH into path; 0 if found. */
static int find_in_path(const char *prog, char *path, size_t len)
{
    const char *dirs = getenv("PATH");
    if (dirs == NULL || *dirs == '\0')
        dirs = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = dirs; *p;) {
        const char *end = strchr(p, ':');
        size_t dl = end ? (size_t)(end - p) : strlen(p);
        int n = snprintf(path, len, "%.*s%s%s", (int)dl, p, dl ? "/" : "", prog);
        if (n > 0 && (size_t)n < len && access(path, X_OK) == 0)
            return 0;
        p = end ? end + 1 : p + dl;
    }
    return -1;
}

/* `scontrol show node host`'s output into buf, within SCONTROL_MS. */
static int run_scontrol(const char *host, char *buf, size_t len)
{
    char path[PATH_MAX];
    if (find_in_path("scontrol", path, sizeof path) != 0) {
        msr_err_set("scontrol is not in PATH");
        return -1;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        msr_err_set("pipe: %s", strerror(errno));
        return -1;
    }
    char *argv[] = {"scontrol", "show", "node", (char *)host, NULL};
    msr_spawn_options_t so = {
        .path = path,
        .argv = argv,
        .stdio = {{MSR_SPAWN_DEVNULL, -1}, {MSR_SPAWN_FD, fds[1]}, {MSR_SPAWN_DEVNULL, -1}},
        .extra_fd = -1,
        .new_group = 1,
        .death_signal = SIGKILL,
    };
    pid_t pid;
    msr_status_t st = msr_spawn(&so, &pid);
    close(fds[1]);
    if (st != MSR_OK) {
        close(fds[0]);
        return -1;
    }
    size_t got = 0;
    int timed_out = 0;
    uint64_t deadline = msr_deadline_in_ms(SCONTROL_MS);
    for (;;) {
        struct pollfd p = {fds[0], POLLIN, 0};
        int ms = (int)msr_deadline_left_ms(deadline);
        int ready = ms > 0 ? poll(&p, 1, ms) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            timed_out = 1;
            break;
        }
        ssize_t n = read(fds[0], buf + got, len - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || (got += (size_t)n) == len - 1)
            break;
    }
    buf[got] = '\0';
    close(fds[0]);
    if (timed_out)
        kill(-pid, SIGKILL);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (timed_out) {
        msr_err_set("scontrol show node %s gave no answer within %d s", host, SCONTROL_MS / 1000);
        return -1;
    }
    return 0;
}

static int sys_lookup(void *ctx, const char *host, char *out, size_t len, char *how, size_t how_len)
{
    (void)ctx;
    char ip[64];
    if (msr_net_resolve(host, ip, sizeof ip) == 0) {
        snprintf(out, len, "%s", host);
        snprintf(how, how_len, "DNS");
        return 0;
    }
    char dns_err[256];
    snprintf(dns_err, sizeof dns_err, "%s", msr_err_msg());
    char text[8192];
    if (run_scontrol(host, text, sizeof text) != 0) {
        msr_err_set("%s, and %s", dns_err, msr_err_msg());
        return -1;
    }
    char addr[256];
    if (msr_sched_parse_nodeaddr(text, addr, sizeof addr) != 0) {
        msr_err_set("%s, and scontrol show node %s gives no NodeAddr", dns_err, host);
        return -1;
    }
    if (strcmp(addr, host) == 0 || msr_net_resolve(addr, ip, sizeof ip) != 0) {
        msr_err_set("%s, and its NodeAddr=%s does not resolve either", dns_err, addr);
        return -1;
    }
    snprintf(out, len, "%s", addr);
    snprintf(how, how_len, "NodeAddr of %s", host);
    return 0;
}

void msr_sched_env_system(msr_sched_env_t *env)
{
    env->get = sys_get;
    env->lookup = sys_lookup;
    env->ctx = NULL;
}
