/* The agent: joins the job, runs this node's workers through generations and
 * exits with the job's outcome. One libevent loop drives everything: signals,
 * child exits, worker output, timers and the coordinator's answers. */
#include "msrun/agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/list.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "msrun/link.h"
#include "msrun/net.h"
#include "msrun/proxy.h"
#include "msrun/token.h"
#include "msrun/workers.h"
#include "rendezvous/rpc.h"

typedef struct root_cause {
    int set;
    int node_rank, rank, pid, exit_code, signal, generation;
    double time;
    char host[256];
    char reason[128];
    char *tail[MSR_TAIL_LINES];
    int ntail;
} root_cause_t;

typedef struct agent {
    msr_options_t *o;
    struct event_base *base;
    msr_link_t *link;
    char coord_target[300]; /* host:port of the coordinator */
    char coord_ip[64];
    int coord_port;
    char token[MSR_TOKEN_MAX + 1]; /* "" until decided (setup_coordinator) */
    char token_file[300];          /* the token this node generated, for the others */
    msr_rpc_tls_t tls;             /* strings owned by the options */
    char job_id[256];
    pid_t coord_pid; /* the embedded coordinator, 0 if none */
    msr_proxy_t *proxy;
    char job_dir[240]; /* 0700, holds the proxy's socket */
    char socket_path[280];
    int log_dir_fd; /* --log_dir, checked and opened once; -1 without */
    char node_id[64];
    char host[64]; /* where peers reach this node */
    int free_port;
    int devnull;

    /* the job as last heard */
    int generation;
    Msr__JobState state;
    int restart_count, max_restarts;
    int node_rank, node_count, world_size, rank_offset;
    char master_addr[256];
    int master_port;
    char message[600];
    root_cause_t cause;

    /* this node's workers */
    msr_worker_t *workers;
    int nworkers;
    int nrunning;
    int worker_generation; /* generation of the workers spawned, -1 none */
    int ready_generation;
    int stopping;
    int kill_sent;
    int joined;

    /* coordinator traffic */
    int hb_inflight;
    uint64_t coord_lost_since; /* 0 while it answers */
    int64_t backoff_ms;
    uint64_t forming_since, last_progress;
    int last_joined;

    struct event *retry_ev, *kill_ev, *stuck_ev, *stopped_ev, *hang_ev;
    struct event *sig_ev[8];
    int nsig;

    int finished;
    int exit_code;
    int interrupted; /* the signal that interrupted msrun, 0 if none */
    int leave_sent;
    int pending_reports;
    msr_list_t reports;   /* reports not yet acknowledged */
    char coord_bind[300]; /* where the embedded coordinator listens (restarts) */
    char state_file[300]; /* the embedded coordinator's state */
    uint64_t coord_restarts;
} agent_t;

static void hb_send(agent_t *a);
static void join_send(agent_t *a);
static void stop_workers(agent_t *a, int sig);
static void finish(agent_t *a, int code);

/* A delay between ms/2 and ms, so that many nodes retrying at once spread. */
static struct timeval jittered(int64_t ms)
{
    uint32_t r;
    msr_random_bytes(&r, sizeof r);
    int64_t d = ms / 2 + (int64_t)(r % (uint32_t)(ms / 2 + 1));
    struct timeval tv = {(time_t)(d / 1000), (suseconds_t)((d % 1000) * 1000)};
    return tv;
}

/* ---- root cause ---- */

static void cause_clear(root_cause_t *c)
{
    for (int i = 0; i < c->ntail; i++)
        msr_free(c->tail[i]);
    memset(c, 0, sizeof *c);
}

static void cause_from_msg(root_cause_t *c, const Msr__Failure *f)
{
    cause_clear(c);
    c->set = 1;
    c->node_rank = f->node_rank;
    c->rank = f->rank;
    c->pid = f->pid;
    c->exit_code = f->exit_code;
    c->signal = f->signal;
    c->generation = f->generation;
    c->time = f->time;
    snprintf(c->host, sizeof c->host, "%s", f->host ? f->host : "");
    snprintf(c->reason, sizeof c->reason, "%s", f->reason ? f->reason : "");
    for (size_t i = 0; i < f->n_stderr_tail && c->ntail < MSR_TAIL_LINES; i++) {
        c->tail[c->ntail] = msr_strdup(f->stderr_tail[i]);
        if (c->tail[c->ntail])
            c->ntail++;
    }
}

static int cause_exit_code(const root_cause_t *c)
{
    if (!c->set)
        return 1;
    if (c->signal > 0)
        return 128 + c->signal;
    return c->exit_code > 0 && c->exit_code < 256 ? c->exit_code : 1;
}

static void cause_describe(const root_cause_t *c, char *out, size_t len)
{
    char sig[32];
    if (c->rank >= 0 && strncmp(c->reason, "hung", 4) == 0)
        snprintf(out, len, "rank %d on node %d (%s, pid %d) %s and was killed", c->rank,
                 c->node_rank, c->host, c->pid, c->reason);
    else if (c->rank < 0)
        snprintf(out, len, "node %d (%s, pid %d) %s", c->node_rank, c->host, c->pid, c->reason);
    else if (c->signal > 0)
        snprintf(out, len, "rank %d on node %d (%s, pid %d) was killed by %s", c->rank,
                 c->node_rank, c->host, c->pid, msr_signal_name(c->signal, sig, sizeof sig));
    else
        snprintf(out, len, "rank %d on node %d (%s, pid %d) %s with code %d", c->rank, c->node_rank,
                 c->host, c->pid, c->reason[0] ? c->reason : "exited", c->exit_code);
}

static void write_error_file(agent_t *a)
{
    if (a->o->error_file == NULL)
        return;
    const root_cause_t *c = &a->cause;
    msr_buf_t b = MSR_BUF_INIT;
    char sig[32] = "";
    if (c->signal > 0)
        msr_signal_name(c->signal, sig, sizeof sig);
    msr_buf_printf(&b, "{\n  \"job_id\": ");
    msr_buf_json_string(&b, a->job_id, strlen(a->job_id));
    msr_buf_printf(&b, ",\n  \"node\": %d,\n  \"host\": ", c->node_rank);
    msr_buf_json_string(&b, c->host, strlen(c->host));
    msr_buf_printf(&b,
                   ",\n  \"rank\": %d,\n  \"pid\": %d,\n  \"exit_code\": %d,\n  \"signal\": %d,\n"
                   "  \"signal_name\": ",
                   c->rank, c->pid, c->exit_code, c->signal);
    msr_buf_json_string(&b, sig, strlen(sig));
    msr_buf_printf(&b, ",\n  \"time\": %.3f,\n  \"generation\": %d,\n  \"reason\": ", c->time,
                   c->generation);
    msr_buf_json_string(&b, c->reason, strlen(c->reason));
    msr_buf_printf(&b, ",\n  \"message\": ");
    msr_buf_json_string(&b, a->message, strlen(a->message));
    msr_buf_printf(&b, ",\n  \"stderr_tail\": [");
    for (int i = 0; i < c->ntail; i++) {
        msr_buf_printf(&b, "%s\n    ", i ? "," : "");
        msr_buf_json_string(&b, c->tail[i], strlen(c->tail[i]));
    }
    msr_buf_printf(&b, "%s]\n}\n", c->ntail ? "\n  " : "");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", a->o->error_file, (int)getpid());
    /* Readable by this user only, and never through a link planted at the
     * temporary name: the rename then replaces the name itself. */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || msr_write_all(fd, b.data, b.len) != MSR_OK || fsync(fd) != 0 || close(fd) != 0 ||
        rename(tmp, a->o->error_file) != 0) {
        MSR_ERROR("cannot write the error file %s: %s", a->o->error_file, strerror(errno));
        if (fd >= 0)
            close(fd);
        unlink(tmp);
    }
    msr_buf_cleanup(&b);
}

/* Creates the missing parts of --log_dir (mode 0700: logs are this user's
 * business) and opens it. An existing directory must belong to this user:
 * another user's (a world-writable /tmp/logs planted in advance, say) could
 * read, replace or redirect the logs. Prints the error; returns the
 * directory's descriptor or -1. */
static int open_log_dir(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        fprintf(stderr, "msrun: error: log_dir %.100s...: the path is too long\n", dir);
        return -1;
    }
    for (char *p = path + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0700);
            *p = '/';
        }
    }
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "msrun: error: cannot create log_dir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    /* The checks look at the directory that is opened, not at a name that
     * could change in between; the logs are then opened relative to it. */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        fprintf(stderr, "msrun: error: cannot open log_dir %s: %s\n", dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (sb.st_uid != geteuid()) {
        fprintf(stderr,
                "msrun: error: log_dir %s belongs to uid %u, not to this user (uid %u): another "
                "user could read or redirect the logs there; choose a directory of your own\n",
                dir, (unsigned)sb.st_uid, (unsigned)geteuid());
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- the embedded coordinator ---- */

static int start_coordinator(agent_t *a, const char *bind_addr, char *err, size_t errlen)
{
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    char a_bind[300], a_fd[16], a_wn[16], a_lwn[16], a_mr[16], a_nt[32], a_ct[32], a_ll[16];
    snprintf(a_bind, sizeof a_bind, "%s", bind_addr);
    snprintf(a_fd, sizeof a_fd, "%d", 3);
    snprintf(a_wn, sizeof a_wn, "%d", a->o->worker_num);
    snprintf(a_lwn, sizeof a_lwn, "%d", a->o->local_worker_num);
    snprintf(a_mr, sizeof a_mr, "%d", a->o->max_restarts);
    snprintf(a_nt, sizeof a_nt, "%.3f", (double)a->o->node_timeout_ms / 1000.0);
    snprintf(a_ct, sizeof a_ct, "%.3f", (double)a->o->cluster_time_out_ms / 1000.0);
    /* The embedded coordinator speaks up for warnings unless asked for more. */
    snprintf(a_ll, sizeof a_ll, "%d",
             a->o->log_level >= MSR_LOG_DEBUG ? a->o->log_level : MSR_LOG_WARN);
    char a_nn[48], a_lc[32];
    snprintf(a_nn, sizeof a_nn, "%d:%d", a->o->min_nodes, a->o->max_nodes);
    snprintf(a_lc, sizeof a_lc, "%.3f", (double)a->o->last_call_ms / 1000.0);
    char *argv[48];
    int k = 0;
    const char *fixed[] = {
        "msrun",          "coordinator", "--bind",         a_bind, "--ready_fd",         a_fd,
        "--job_id",       a->job_id,     "--worker_num",   a_wn,   "--local_worker_num", a_lwn,
        "--max_restarts", a_mr,          "--node_timeout", a_nt,   "--cluster_time_out", a_ct,
        "--log_level",    a_ll,          "--last_call",    a_lc};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(fixed); i++)
        argv[k++] = (char *)fixed[i];
    if (a->o->max_nodes > a->o->min_nodes) {
        argv[k++] = "--nnodes";
        argv[k++] = a_nn;
    }
    if (a->state_file[0]) {
        /* The file lives in the job's directory, removed when this msrun
         * ends: it serves a coordinator restarted by this msrun, in this
         * boot, so a save need not wait for the disk. */
        argv[k++] = "--state_file";
        argv[k++] = a->state_file;
        argv[k++] = "--state_sync";
        argv[k++] = "process";
    }
    const char *tls_flags[][2] = {
        {"--tls_cert", a->o->tls_cert}, {"--tls_key", a->o->tls_key}, {"--tls_ca", a->o->tls_ca}};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(tls_flags); i++) {
        if (tls_flags[i][1]) {
            argv[k++] = (char *)tls_flags[i][0];
            argv[k++] = (char *)tls_flags[i][1];
        }
    }
    char a_store[3][24];
    const int64_t store[3] = {a->o->store_value_max, a->o->store_keys_max, a->o->store_bytes_max};
    const char *store_opt[3] = {"--store_value_max", "--store_keys_max", "--store_bytes_max"};
    for (int i = 0; i < 3; i++) {
        if (store[i] <= 0)
            continue; /* the coordinator's default */
        snprintf(a_store[i], sizeof a_store[i], "%lld", (long long)store[i]);
        argv[k++] = (char *)store_opt[i];
        argv[k++] = a_store[i];
    }
    argv[k] = NULL;
    /* The token travels in the environment, not on the command line. */
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(ready[0]);
        close(ready[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (ready[1] != 3) {
            dup2(ready[1], 3);
        } else {
            fcntl(3, F_SETFD, 0);
        }
        dup2(a->devnull, STDIN_FILENO);
        setenv("MSRUN_TOKEN", a->token, 1);
        unsetenv("MSRUN_TOKEN_FILE");
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(ready[1]);
    a->coord_pid = pid;
    /* Wait for "port N" or "error ..." from the child. */
    char line[512];
    size_t got = 0;
    uint64_t deadline = msr_deadline_in_ms(15000);
    while (got < sizeof line - 1) {
        struct pollfd p = {ready[0], POLLIN, 0};
        int ms = (int)msr_deadline_left_ms(deadline);
        if (ms <= 0 || (poll(&p, 1, ms) <= 0 && errno != EINTR))
            break;
        ssize_t n = read(ready[0], line + got, sizeof line - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        if (memchr(line, '\n', got))
            break;
    }
    close(ready[0]);
    line[got] = '\0';
    char *nl = strchr(line, '\n');
    if (nl)
        *nl = '\0';
    int port = 0;
    if (sscanf(line, "port %d", &port) == 1 && port > 0)
        return port;
    snprintf(err, errlen, "%s",
             strncmp(line, "error ", 6) == 0 ? line + 6
             : got                           ? line
                                             : "the coordinator did not start");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    a->coord_pid = 0;
    return -1;
}

/* Whether an msrun coordinator of this job answers at target. With
 * wait_for_ready, waits up to 2 s for it to come up; without, a refused
 * connection answers at once. */
static msr_status_t probe_coordinator(agent_t *a, const char *target, int wait_for_ready, char *err,
                                      size_t errlen)
{
    msr_rpc_channel_t *ch = NULL;
    msr_status_t st = msr_rpc_channel_create_tls(target, a->token, &a->tls, &ch);
    if (st != MSR_OK)
        return st;
    Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    st = msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, msr_deadline_in_ms(2000), wait_for_ready,
                      &resp, err, errlen);
    msr_rpc_message_free(resp);
    msr_rpc_channel_destroy(ch);
    return st;
}

/* Decides where the coordinator is, starting it here when this node should. */
static int setup_coordinator(agent_t *a)
{
    msr_options_t *o = a->o;
    char err[600];
    if (o->master_addr == NULL) {
        /* standalone: loopback, a free port */
        snprintf(a->coord_ip, sizeof a->coord_ip, "127.0.0.1");
        snprintf(a->host, sizeof a->host, "127.0.0.1");
        int port = start_coordinator(a, "127.0.0.1:0", err, sizeof err);
        if (port < 0) {
            fprintf(stderr, "msrun: error: cannot start the coordinator: %s\n", err);
            return 2;
        }
        a->coord_port = port;
        snprintf(a->coord_bind, sizeof a->coord_bind, "127.0.0.1:%d", port);
    } else {
        if (msr_net_resolve(o->master_addr, a->coord_ip, sizeof a->coord_ip) != 0) {
            fprintf(stderr, "msrun: error: master_addr: %s\n", a->coord_ip);
            return 2;
        }
        a->coord_port = o->master_port;
        if (msr_net_outward(a->coord_ip, a->coord_port, a->host, sizeof a->host) != 0)
            snprintf(a->host, sizeof a->host, "%s", a->coord_ip);
        char target[300];
        snprintf(target, sizeof target, "%s:%d", a->coord_ip, a->coord_port);
        char perr[400];
        int here = msr_net_is_local(a->coord_ip) && o->node_rank <= 0;
        int generated = 0;
        if (a->token[0] == '\0') {
            /* No token given: only the node that starts the coordinator may
             * make one up; the others cannot guess it (that is the point). */
            if (!here) {
                fprintf(stderr,
                        "msrun: error: no job token: every node of a multi-node job needs the "
                        "job's token; give this node the one node 0 generated (it printed where "
                        "it wrote it), or give every node the same with --token_file FILE "
                        "(mode 0600) or MSRUN_TOKEN\n");
                return 2;
            }
            if (msr_token_generate(a->token, sizeof a->token) != MSR_OK) {
                fprintf(stderr, "msrun: error: cannot generate a job token: %s\n", msr_err_msg());
                return 2;
            }
            generated = 1;
        }
        if (here && !generated && probe_coordinator(a, target, 0, perr, sizeof perr) == MSR_OK) {
            /* another msrun on this host already started it */
            MSR_DEBUG("joining the coordinator already running at %s", target);
        } else if (msr_net_is_local(a->coord_ip) && o->node_rank <= 0) {
            snprintf(a->coord_bind, sizeof a->coord_bind, "%s", target);
            int port = start_coordinator(a, target, err, sizeof err);
            if (port < 0) {
                /* Taken: by this job's coordinator (another msrun on this host
                 * started it), or by something else. */
                msr_status_t st = probe_coordinator(a, target, 1, perr, sizeof perr);
                if (st == MSR_ERR_PERMISSION && generated) {
                    fprintf(stderr,
                            "msrun: error: port %d on %s is in use by a msrun coordinator and "
                            "this node has no job token: if it is this job's, give this node "
                            "the job's token (--token_file FILE or MSRUN_TOKEN)\n",
                            a->coord_port, a->coord_ip);
                    return 2;
                }
                if (st == MSR_ERR_PERMISSION) {
                    fprintf(stderr,
                            "msrun: error: port %d on %s is in use by another msrun job "
                            "(its token differs)\n",
                            a->coord_port, a->coord_ip);
                    return 2;
                }
                if (st != MSR_OK) {
                    if (strstr(err, "in use"))
                        fprintf(stderr,
                                "msrun: error: port %d on %s is in use by another program (no "
                                "msrun coordinator answers there)\n",
                                a->coord_port, a->coord_ip);
                    else
                        fprintf(stderr, "msrun: error: cannot start the coordinator on %s: %s\n",
                                target, err);
                    return 2;
                }
                MSR_INFO("joining the coordinator another msrun started at %s", target);
            } else if (generated && (o->max_nodes > 1 || o->worker_num > o->local_worker_num)) {
                /* The others need it: in a file only this user can read,
                 * never in a log line that others may read. */
                snprintf(a->token_file, sizeof a->token_file, "%s/token", a->job_dir);
                if (msr_token_write_file(a->token_file, a->token) != MSR_OK) {
                    a->token_file[0] = '\0';
                    fprintf(stderr, "msrun: error: %s\n", msr_err_msg());
                    return 2;
                }
                MSR_WARN("no job token given: generated one in %s (readable only by you); start "
                         "the other nodes with --token_file set to a copy of that file (mode "
                         "0600), or with MSRUN_TOKEN set to its content",
                         a->token_file);
            }
        }
    }
    snprintf(a->coord_target, sizeof a->coord_target, "%s:%d", a->coord_ip, a->coord_port);
    return 0;
}

/* Waits up to ms for child pid to exit; 1 if it did (or is not ours). */
static int wait_child(pid_t pid, int64_t ms)
{
    uint64_t deadline = msr_deadline_in_ms(ms);
    int status;
    do {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return 1;
        msr_sleep_ms(10);
    } while (!msr_deadline_passed(deadline));
    return 0;
}

static void stop_coordinator(agent_t *a)
{
    if (a->coord_pid <= 0)
        return;
    /* The other nodes must hear the outcome: the coordinator exits by itself
     * once every node has left. Give it a moment, then stop it. */
    if (!wait_child(a->coord_pid, a->nworkers && a->node_count > 1 ? 10000 : 2000)) {
        kill(a->coord_pid, SIGTERM);
        if (!wait_child(a->coord_pid, 3000)) {
            kill(a->coord_pid, SIGKILL);
            waitpid(a->coord_pid, NULL, 0);
        }
    }
    a->coord_pid = 0;
}

/* ---- workers ---- */

static void cleanup_workers(agent_t *a);

static void spawn_workers(agent_t *a)
{
    msr_options_t *o = a->o;
    msr_spawn_env_t env = {
        .path = o->program_path,
        .argv = o->argv,
        .node_rank = a->node_rank,
        .node_count = a->node_count,
        .world_size = a->world_size,
        .local_world_size = a->nworkers,
        .rank_offset = a->rank_offset,
        .generation = a->generation,
        .restart_count = a->restart_count,
        .max_restarts = a->max_restarts,
        .job_id = a->job_id,
        .coordinator = a->coord_target,
        .token = a->token,
        .agent_socket = a->proxy ? a->socket_path : NULL,
        .master_addr = a->master_addr,
        .master_port = a->master_port,
        .log_dir = o->log_dir,
        .log_dir_fd = a->log_dir_fd,
        .bind_core = o->bind_core,
        .devnull = a->devnull,
        .worker_timeout_ms = o->worker_timeout_ms,
    };
    a->worker_generation = a->generation;
    /* slots of workers that exited by themselves (no stop was needed) still
     * hold their last stderr lines */
    cleanup_workers(a);
    for (int i = 0; i < a->nworkers; i++) {
        msr_worker_t *w = &a->workers[i];
        char err[600];
        int rank = a->rank_offset + i;
        msr_status_t st =
            msr_worker_spawn(w, a->base, &env, i, msr_options_show_rank(o, rank), err, sizeof err);
        if (w->running)
            a->nrunning++;
        if (st != MSR_OK) {
            snprintf(a->message, sizeof a->message, "rank %d: %.500s", rank, err);
            a->exit_code = 2;
            a->interrupted = -1; /* finish with exit_code once stopped */
            stop_workers(a, SIGKILL);
            return;
        }
    }
    MSR_INFO("generation %d: started %d worker%s (ranks %d..%d of %d)", a->generation, a->nworkers,
             a->nworkers == 1 ? "" : "s", a->rank_offset, a->rank_offset + a->nworkers - 1,
             a->world_size);
}

/* --worker_timeout: kills workers whose libmsrun stopped beating, or that
 * stopped calling msr_heartbeat() after calling it. Workers that never beat
 * (programs without libmsrun) are only watched for their exit. */
static void on_hang_check(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    agent_t *a = arg;
    if (a->stopping || a->proxy == NULL)
        return;
    uint64_t now = msr_now_ns(), limit = (uint64_t)a->o->worker_timeout_ms * 1000000ull;
    double secs = (double)a->o->worker_timeout_ms / 1000.0;
    for (int i = 0; i < a->nworkers; i++) {
        msr_worker_t *w = &a->workers[i];
        msr_beat_info_t b;
        if (!w->running || w->stopping || w->hung[0] ||
            !msr_proxy_beat_info(a->proxy, w->rank, (int)w->pid, &b))
            continue;
        if (now > b.last_beat_ns && now - b.last_beat_ns > limit)
            snprintf(w->hung, sizeof w->hung, "hung: no libmsrun beat for %.1f s", secs);
        else if (b.progress > 0 && now > b.progress_ns && now - b.progress_ns > limit)
            snprintf(w->hung, sizeof w->hung, "hung: no msr_heartbeat() for %.1f s", secs);
        if (w->hung[0]) {
            MSR_WARN("rank %d (pid %d) %s: killing it", w->rank, (int)w->pid, w->hung);
            msr_worker_signal(w, SIGKILL);
        }
    }
}

static void on_kill_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    agent_t *a = arg;
    int n = 0;
    for (int i = 0; i < a->nworkers; i++) {
        msr_worker_t *w = &a->workers[i];
        if (w->running) {
            msr_worker_signal(w, SIGKILL);
            n++;
        }
    }
    if (n)
        MSR_WARN("%d worker%s did not stop within %.1f s of SIGTERM: sent SIGKILL", n,
                 n == 1 ? "" : "s", (double)a->o->grace_ms / 1000.0);
    a->kill_sent = 1;
    struct timeval tv = {5, 0};
    evtimer_add(a->stuck_ev, &tv);
}

static void stopping_done(agent_t *a);

static void on_stuck_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    agent_t *a = arg;
    msr_buf_t b = MSR_BUF_INIT;
    for (int i = 0; i < a->nworkers; i++)
        if (a->workers[i].running)
            msr_buf_printf(&b, "%s%d (rank %d)", b.len ? ", " : "", (int)a->workers[i].pid,
                           a->workers[i].rank);
    MSR_ERROR("these worker processes would not die even after SIGKILL: %s", b.data ? b.data : "");
    msr_buf_cleanup(&b);
    /* give up on them: they are in uninterruptible sleep; carry on */
    for (int i = 0; i < a->nworkers; i++)
        if (a->workers[i].running) {
            a->workers[i].running = 0;
            a->nrunning--;
        }
    stopping_done(a);
}

static void on_stopped(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    stopping_done(arg);
}

/* Stops every running worker: sig to each process group now, SIGKILL after
 * the grace period. stopping_done() follows once all are reaped. */
static void stop_workers(agent_t *a, int sig)
{
    if (!a->stopping) {
        a->stopping = 1;
        a->kill_sent = 0;
        struct timeval tv = {a->o->grace_ms / 1000, (a->o->grace_ms % 1000) * 1000};
        evtimer_add(a->kill_ev, &tv);
    }
    for (int i = 0; i < a->nworkers; i++) {
        msr_worker_t *w = &a->workers[i];
        if (w->running) {
            w->stopping = 1;
            msr_worker_signal(w, sig);
        }
    }
    if (a->nrunning == 0)
        event_active(a->stopped_ev, 0, 0);
}

static void cleanup_workers(agent_t *a)
{
    for (int i = 0; i < a->nworkers; i++) {
        msr_worker_t *w = &a->workers[i];
        if (w->pid > 0)
            kill(-w->pid, SIGKILL); /* stragglers left in its group */
        msr_worker_cleanup(w);
        memset(w, 0, sizeof *w);
        w->out.fd = w->err.fd = w->log_fd = -1;
    }
}

static void stopping_done(agent_t *a)
{
    if (!a->stopping || a->nrunning > 0)
        return;
    a->stopping = 0;
    evtimer_del(a->kill_ev);
    evtimer_del(a->stuck_ev);
    cleanup_workers(a);
    a->worker_generation = -1;
    if (a->interrupted) {
        finish(a, a->interrupted > 0 ? 128 + a->interrupted : a->exit_code);
        return;
    }
    if (a->state == MSR__JOB_STATE__JOB_FAILED) {
        finish(a, cause_exit_code(&a->cause));
        return;
    }
    if (a->state == MSR__JOB_STATE__JOB_DONE) {
        finish(a, 0);
        return;
    }
    /* Ready for the next generation. */
    if (a->ready_generation < a->generation) {
        a->ready_generation = a->generation;
        hb_send(a);
    }
}

/* A worker's exit, kept until the coordinator has acknowledged it: a
 * coordinator that restarts meanwhile still hears of it. */
typedef struct report {
    agent_t *agent;
    msr_list_t link; /* in agent->reports */
    struct event *retry;
    int64_t backoff_ms;
    int generation, rank, pid, exit_code, signal;
    double time;
    char reason[96];
    char *tail[MSR_TAIL_LINES];
    int ntail;
} report_t;

static void report_free(report_t *r)
{
    msr_list_remove(&r->link);
    for (int i = 0; i < r->ntail; i++)
        msr_free(r->tail[i]);
    if (r->retry)
        event_free(r->retry);
    msr_free(r);
}

static void report_send(report_t *r);

static void report_done(msr_rpc_async_t *as, void *arg)
{
    report_t *r = arg;
    agent_t *a = r->agent;
    if (as->status == MSR_OK || a->finished || as->status == MSR_ERR_NOT_FOUND ||
        as->status == MSR_ERR_CANCELED) {
        if (as->status != MSR_OK && !a->finished)
            MSR_WARN("the report of rank %d's exit was not taken: %s", r->rank, as->err);
        a->pending_reports--;
        report_free(r);
        return;
    }
    /* the coordinator is away: try again, it may be restarting */
    struct timeval tv = jittered(r->backoff_ms);
    r->backoff_ms = r->backoff_ms * 2 > 1000 ? 1000 : r->backoff_ms * 2;
    evtimer_add(r->retry, &tv);
}

static void on_report_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    report_send(arg);
}

static void report_send(report_t *r)
{
    agent_t *a = r->agent;
    Msr__Failure f = MSR__FAILURE__INIT;
    f.node_rank = a->node_rank;
    f.host = a->host;
    f.rank = r->rank;
    f.pid = r->pid;
    f.exit_code = r->exit_code;
    f.signal = r->signal;
    f.time = r->time;
    f.generation = r->generation;
    f.reason = r->reason;
    f.n_stderr_tail = (size_t)r->ntail;
    f.stderr_tail = r->tail;
    Msr__ReportRequest req = MSR__REPORT_REQUEST__INIT;
    req.node_id = a->node_id;
    req.generation = r->generation;
    req.exit = &f;
    if (msr_link_call(a->link, MSR_RPC_REPORT, &req.base, 5000, 1, report_done, r) != MSR_OK) {
        struct timeval tv = {0, 200000};
        evtimer_add(r->retry, &tv);
    }
}

static void report_exit(agent_t *a, msr_worker_t *w)
{
    report_t *r = msr_calloc(1, sizeof *r);
    if (r == NULL || (r->retry = evtimer_new(a->base, on_report_retry, r)) == NULL) {
        MSR_ERROR("out of memory: rank %d's exit is not reported", w->rank);
        msr_free(r);
        return;
    }
    r->agent = a;
    r->backoff_ms = 50;
    msr_list_push_back(&a->reports, &r->link);
    r->generation = a->worker_generation;
    r->rank = w->rank;
    r->pid = (int)w->pid;
    r->exit_code = WIFSIGNALED(w->status) ? -1 : WEXITSTATUS(w->status);
    r->signal = WIFSIGNALED(w->status) ? WTERMSIG(w->status) : 0;
    r->time = w->exit_time;
    snprintf(r->reason, sizeof r->reason, "%s",
             w->hung[0]  ? w->hung
             : r->signal ? "signal"
                         : "exited");
    if (r->exit_code != 0 || r->signal) {
        int start = w->tail_count < MSR_TAIL_LINES ? 0 : w->tail_next;
        for (int i = 0; i < w->tail_count; i++) {
            r->tail[r->ntail] = msr_strdup(w->tail[(start + i) % MSR_TAIL_LINES]);
            if (r->tail[r->ntail])
                r->ntail++;
        }
    }
    a->pending_reports++;
    report_send(r);
}

static int start_coordinator(agent_t *a, const char *bind_addr, char *err, size_t errlen);

static void on_child(agent_t *a, pid_t pid, int status)
{
    if (pid == a->coord_pid) {
        a->coord_pid = 0;
        if (!a->finished) {
            char why[64];
            if (WIFSIGNALED(status))
                msr_signal_name(WTERMSIG(status), why, sizeof why);
            else
                snprintf(why, sizeof why, "code %d", WEXITSTATUS(status));
            /* The workers keep running: a coordinator restarted on the same
             * port and state file resumes the job. */
            char err[400];
            a->coord_restarts++;
            int port = start_coordinator(a, a->coord_bind, err, sizeof err);
            if (port > 0)
                MSR_WARN("the embedded coordinator exited (%s); restarted it on %s", why,
                         a->coord_bind);
            else
                MSR_ERROR("the embedded coordinator exited (%s) and cannot be restarted: %s", why,
                          err);
        }
        return;
    }
    msr_worker_t *w = NULL;
    for (int i = 0; i < a->nworkers; i++)
        if (a->workers[i].running && a->workers[i].pid == pid)
            w = &a->workers[i];
    if (w == NULL)
        return;
    w->running = 0;
    w->status = status;
    w->exit_time = msr_wall_time();
    a->nrunning--;
    msr_worker_drain(w);
    if (w->stopping || a->stopping) {
        if (a->nrunning == 0)
            stopping_done(a);
        return;
    }
    char how[96];
    msr_worker_describe(w, how, sizeof how);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        MSR_DEBUG("rank %d (pid %d) %s", w->rank, (int)pid, how);
    else
        MSR_WARN("rank %d (pid %d) %s", w->rank, (int)pid, how);
    report_exit(a, w);
}

/* ---- following the coordinator ---- */

static void print_progress(agent_t *a, const Msr__HeartbeatResponse *r)
{
    uint64_t now = msr_now_ns();
    if (a->forming_since == 0)
        a->forming_since = now;
    int changed = r->joined_nodes != a->last_joined;
    if (now - a->forming_since < 1000000000ull && r->joined_nodes < r->expected_nodes)
        return; /* quiet when forming is quick */
    if (!changed && now - a->last_progress < 10000000000ull)
        return;
    a->last_joined = r->joined_nodes;
    a->last_progress = now;
    msr_buf_t b = MSR_BUF_INIT;
    for (size_t i = 0; i < r->n_missing; i++)
        msr_buf_printf(&b, "%s%s", i ? ", " : "", r->missing[i]);
    MSR_INFO("waiting for nodes: %d of %d joined%s%s%s", r->joined_nodes, r->expected_nodes,
             b.len ? " (awaiting: " : "", b.len ? b.data : "", b.len ? ")" : "");
    msr_buf_cleanup(&b);
}

static void on_update(agent_t *a, const Msr__HeartbeatResponse *r)
{
    int new_generation = r->generation != a->generation;
    a->generation = r->generation;
    a->state = r->state;
    a->restart_count = r->restart_count;
    a->max_restarts = r->max_restarts;
    snprintf(a->message, sizeof a->message, "%s", r->message ? r->message : "");
    if (r->failure)
        cause_from_msg(&a->cause, r->failure);
    if (r->assignment && r->state == MSR__JOB_STATE__JOB_RUNNING) {
        const Msr__Assignment *as = r->assignment;
        if (a->node_rank != as->node_rank)
            msr_log_init("msrun", as->node_rank, -1);
        a->node_rank = as->node_rank;
        a->node_count = as->node_count;
        a->world_size = as->world_size;
        a->rank_offset = as->rank_offset;
        snprintf(a->master_addr, sizeof a->master_addr, "%s",
                 as->master_addr ? as->master_addr : "");
        a->master_port = as->master_port;
    }
    if (a->interrupted)
        return; /* already on the way out */
    switch (r->state) {
    case MSR__JOB_STATE__JOB_FAILED:
    case MSR__JOB_STATE__JOB_DONE:
        if (a->nrunning > 0 || a->stopping)
            stop_workers(a, SIGTERM);
        else
            finish(a, r->state == MSR__JOB_STATE__JOB_DONE ? 0 : cause_exit_code(&a->cause));
        break;
    case MSR__JOB_STATE__JOB_RUNNING:
        a->forming_since = 0;
        if (a->nrunning > 0 && a->worker_generation != a->generation) {
            stop_workers(a, SIGTERM); /* workers of an older generation */
        } else if (!a->stopping && r->assignment && a->worker_generation != a->generation &&
                   a->ready_generation >= a->generation) {
            spawn_workers(a);
        }
        break;
    case MSR__JOB_STATE__JOB_WAITING:
    case MSR__JOB_STATE__JOB_RESTARTING:
        if (new_generation && a->generation > 0 && a->message[0])
            MSR_WARN("%s", a->message);
        if (a->nrunning > 0 || a->stopping) {
            stop_workers(a, SIGTERM);
        } else if (a->ready_generation < a->generation) {
            a->ready_generation = a->generation;
            hb_send(a); /* tell the coordinator at once */
        }
        print_progress(a, r);
        break;
    default:
        break;
    }
}

static void schedule_retry(agent_t *a)
{
    struct timeval tv = jittered(a->backoff_ms);
    evtimer_add(a->retry_ev, &tv);
    a->backoff_ms = a->backoff_ms * 2 > 1000 ? 1000 : a->backoff_ms * 2;
}

static void hb_done(msr_rpc_async_t *as, void *arg)
{
    agent_t *a = arg;
    a->hb_inflight--;
    if (a->finished)
        return;
    if (as->status == MSR_OK) {
        if (a->coord_lost_since)
            MSR_INFO("the coordinator at %s answers again", a->coord_target);
        a->coord_lost_since = 0;
        a->backoff_ms = 50;
        on_update(a, (const Msr__HeartbeatResponse *)as->resp);
        if (!a->finished && a->hb_inflight == 0)
            hb_send(a);
        return;
    }
    if (as->status == MSR_ERR_NOT_FOUND) {
        snprintf(a->message, sizeof a->message, "the coordinator no longer knows this node: %s",
                 as->err);
        MSR_ERROR("%s", a->message);
        a->interrupted = -1;
        a->exit_code = 1;
        if (a->nrunning)
            stop_workers(a, SIGTERM);
        else
            finish(a, 1);
        return;
    }
    uint64_t now = msr_now_ns();
    if (a->coord_lost_since == 0) {
        a->coord_lost_since = now;
        MSR_WARN("no answer from the coordinator at %s: %s; retrying", a->coord_target, as->err);
    } else if (now - a->coord_lost_since > (uint64_t)a->o->coordinator_timeout_ms * 1000000ull) {
        snprintf(a->message, sizeof a->message,
                 "lost the coordinator at %s: no answer for %.1f s (%.200s)", a->coord_target,
                 (double)a->o->coordinator_timeout_ms / 1000.0, as->err);
        MSR_ERROR("%s", a->message);
        a->interrupted = -1;
        a->exit_code = 1;
        if (a->nrunning)
            stop_workers(a, SIGTERM);
        else
            finish(a, 1);
        return;
    }
    if (a->hb_inflight == 0)
        schedule_retry(a);
}

static void hb_send(agent_t *a)
{
    if (a->finished || !a->joined)
        return;
    Msr__HeartbeatRequest req = MSR__HEARTBEAT_REQUEST__INIT;
    Msr__WorkerState ws[256], *wsp[256];
    req.node_id = a->node_id;
    req.generation = a->generation;
    req.known_state = a->state;
    req.ready_generation = a->ready_generation;
    req.wait_ms = (uint32_t)a->o->heartbeat_ms;
    size_t n = 0;
    for (int i = 0; i < a->nworkers && n < 256; i++) {
        msr__worker_state__init(&ws[n]);
        ws[n].rank = a->workers[i].rank;
        ws[n].pid = (int)a->workers[i].pid;
        ws[n].running = a->workers[i].running;
        wsp[n] = &ws[n];
        n++;
    }
    req.n_workers = n;
    req.workers = wsp;
    msr_status_t st = msr_link_call(a->link, MSR_RPC_HEARTBEAT, &req.base,
                                    a->o->heartbeat_ms + 5000, 0, hb_done, a);
    if (st == MSR_OK)
        a->hb_inflight++;
    else
        schedule_retry(a);
}

static void join_done(msr_rpc_async_t *as, void *arg)
{
    agent_t *a = arg;
    if (a->finished)
        return;
    if (as->status == MSR_OK) {
        const Msr__JoinResponse *r = (const Msr__JoinResponse *)as->resp;
        snprintf(a->node_id, sizeof a->node_id, "%s", r->node_id);
        a->generation = r->generation;
        a->max_restarts = r->max_restarts;
        a->joined = 1;
        a->coord_lost_since = 0;
        a->backoff_ms = 50;
        a->ready_generation = r->generation;
        MSR_DEBUG("joined job %s at %s as node %s", a->job_id, a->coord_target, a->node_id);
        hb_send(a);
        return;
    }
    switch (as->status) {
    case MSR_ERR_REFUSED: /* the job is full: a lost node may not be reaped yet */
    case MSR_ERR_UNREACHABLE:
    case MSR_ERR_TIMEOUT:
    case MSR_ERR_CANCELED: {
        uint64_t now = msr_now_ns();
        if (a->coord_lost_since == 0)
            a->coord_lost_since = now;
        if (now - a->coord_lost_since > (uint64_t)a->o->cluster_time_out_ms * 1000000ull) {
            fprintf(stderr, "msrun: error: no coordinator answered at %s within %.0f s\n",
                    a->coord_target, (double)a->o->cluster_time_out_ms / 1000.0);
            finish(a, 1);
            return;
        }
        if (now - a->last_progress > 5000000000ull) {
            if (as->status == MSR_ERR_REFUSED)
                MSR_INFO("the job at %s is full (%s); waiting for a free place", a->coord_target,
                         as->err);
            else
                MSR_INFO("waiting for the coordinator at %s", a->coord_target);
            a->last_progress = now;
        }
        schedule_retry(a);
        return;
    }
    default:
        fprintf(stderr, "msrun: error: the coordinator at %s refused this node: %s\n",
                a->coord_target, as->err);
        finish(a, 2);
    }
}

static void join_send(agent_t *a)
{
    Msr__JoinRequest req = MSR__JOIN_REQUEST__INIT;
    req.protocol_version = MSR_PROTOCOL_VERSION;
    req.job_id = a->job_id;
    req.host = a->host;
    req.pid = (int)getpid();
    req.local_worker_num = a->o->local_worker_num;
    req.worker_num = a->o->worker_num;
    req.node_rank = a->o->node_rank;
    req.min_nodes = a->o->min_nodes;
    req.max_nodes = a->o->max_nodes;
    req.max_restarts = a->o->max_restarts;
    req.free_port = a->free_port;
    int64_t left = (int64_t)a->o->cluster_time_out_ms;
    msr_status_t st =
        msr_link_call(a->link, MSR_RPC_JOIN, &req.base, left < 5000 ? left : 5000, 1, join_done, a);
    if (st != MSR_OK) {
        MSR_ERROR("cannot send the join request: %s", msr_status_str(st));
        finish(a, 1);
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    agent_t *a = arg;
    if (a->finished)
        return;
    if (a->joined)
        hb_send(a);
    else
        join_send(a);
}

/* ---- signals ---- */

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    agent_t *a = arg;
    char name[32];
    msr_signal_name((int)sig, name, sizeof name);
    if (sig == SIGCHLD) {
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
            on_child(a, pid, status);
        return;
    }
    if (sig == SIGUSR1 || sig == SIGUSR2) {
        MSR_INFO("forwarding %s to the workers", name);
        for (int i = 0; i < a->nworkers; i++)
            if (a->workers[i].running)
                msr_worker_signal(&a->workers[i], (int)sig);
        return;
    }
    /* SIGINT, SIGTERM, SIGHUP */
    if (a->interrupted > 0) {
        MSR_WARN("%s again: killing the workers now", name);
        for (int i = 0; i < a->nworkers; i++)
            if (a->workers[i].running)
                msr_worker_signal(&a->workers[i], SIGKILL);
        return;
    }
    a->interrupted = (int)sig;
    snprintf(a->message, sizeof a->message, "msrun on node %d was interrupted by %s", a->node_rank,
             name);
    if (a->nrunning > 0) {
        MSR_WARN("interrupted by %s: stopping the workers (SIGKILL after %.1f s)", name,
                 (double)a->o->grace_ms / 1000.0);
        stop_workers(a, (int)sig == SIGHUP ? SIGTERM : (int)sig);
    } else {
        finish(a, 128 + (int)sig);
    }
}

/* ---- the end ---- */

static void finish(agent_t *a, int code)
{
    if (a->finished)
        return;
    a->finished = 1;
    a->exit_code = code;
    event_base_loopbreak(a->base);
}

static void leave(agent_t *a)
{
    if (!a->joined || a->leave_sent)
        return;
    a->leave_sent = 1;
    Msr__LeaveRequest req = MSR__LEAVE_REQUEST__INIT;
    req.node_id = a->node_id;
    char reason[700];
    if (a->interrupted > 0 || a->interrupted < 0)
        snprintf(reason, sizeof reason, "%s", a->message);
    else
        snprintf(reason, sizeof reason, "finished (exit status %d)", a->exit_code);
    req.reason = reason;
    ProtobufCMessage *resp = NULL;
    char err[256];
    if (msr_link_call_sync(a->link, MSR_RPC_LEAVE, &req.base, 2000, 0, &resp, err, sizeof err) ==
        MSR_OK)
        msr_rpc_message_free(resp);
    else
        MSR_DEBUG("leave: %s", err);
}

static void print_outcome(agent_t *a)
{
    if (a->state == MSR__JOB_STATE__JOB_FAILED && a->interrupted == 0 && a->exit_code != 0) {
        char what[700];
        const root_cause_t *c = &a->cause;
        if (c->set) {
            cause_describe(c, what, sizeof what);
            MSR_ERROR("job failed (generation %d): %s", c->generation, what);
            if (a->max_restarts > 0)
                MSR_ERROR("restarts used: %d of %d", a->restart_count, a->max_restarts);
            if (c->ntail > 0) {
                MSR_ERROR("last lines rank %d wrote to stderr:", c->rank);
                for (int i = 0; i < c->ntail; i++)
                    MSR_ERROR("  | %s", c->tail[i]);
            }
        } else {
            MSR_ERROR("job failed: %s", a->message);
        }
    } else if (a->interrupted != 0 && a->exit_code != 0) {
        MSR_ERROR("%s", a->message[0] ? a->message : "stopped");
    }
}

/* Removes job directories left by msrun processes that are gone (killed by
 * SIGKILL, say): <job>-<pid> whose pid no longer exists. */
static void sweep_stale_job_dirs(const char *top)
{
    DIR *d = opendir(top);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *dash = strrchr(e->d_name, '-');
        int64_t pid;
        if (e->d_name[0] == '.' || dash == NULL ||
            msr_parse_i64(dash + 1, 1, INT32_MAX, &pid) != MSR_OK)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* alive (or not ours to judge) */
        char path[600];
        static const char *const files[] = {"agent.sock", "coordinator.state",
                                            "coordinator.state.tmp", "token"};
        for (size_t i = 0; i < MSR_ARRAY_SIZE(files); i++) {
            snprintf(path, sizeof path, "%s/%s/%s", top, e->d_name, files[i]);
            unlink(path);
        }
        snprintf(path, sizeof path, "%s/%s", top, e->d_name);
        if (rmdir(path) == 0)
            MSR_DEBUG("removed %s, left by a msrun that is gone", path);
    }
    closedir(d);
}

/* The job's private directory: <tmp>/msrun-<uid>/<job>-<pid>, both 0700, so
 * only this user reaches the proxy's socket. */
static int make_job_dir(agent_t *a)
{
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp == '\0' || strlen(tmp) > 80)
        tmp = "/tmp";
    char top[160];
    snprintf(top, sizeof top, "%s/msrun-%u", tmp, (unsigned)getuid());
    if (mkdir(top, 0700) != 0 && errno != EEXIST) {
        MSR_ERROR("cannot create %s: %s", top, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (lstat(top, &sb) != 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != getuid() ||
        (sb.st_mode & 077) != 0) {
        MSR_ERROR("%s is not a private directory of this user (mode 0700 expected)", top);
        return -1;
    }
    sweep_stale_job_dirs(top);
    char job[48];
    size_t n = 0;
    for (const char *c = a->job_id; *c && n < sizeof job - 1; c++)
        job[n++] = (char)((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                                  (*c >= '0' && *c <= '9') || *c == '-' || *c == '_'
                              ? *c
                              : '_');
    job[n] = '\0';
    snprintf(a->job_dir, sizeof a->job_dir, "%s/%s-%d", top, job, (int)getpid());
    if (mkdir(a->job_dir, 0700) != 0) {
        MSR_ERROR("cannot create %s: %s", a->job_dir, strerror(errno));
        a->job_dir[0] = '\0';
        return -1;
    }
    snprintf(a->socket_path, sizeof a->socket_path, "%s/agent.sock", a->job_dir);
    return 0;
}

static void remove_job_dir(agent_t *a)
{
    if (a->job_dir[0] == '\0')
        return;
    unlink(a->socket_path);
    if (a->token_file[0])
        unlink(a->token_file);
    unlink(a->state_file);
    char tmp[sizeof a->state_file + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", a->state_file);
    unlink(tmp);
    if (rmdir(a->job_dir) != 0)
        MSR_DEBUG("cannot remove %s: %s", a->job_dir, strerror(errno));
    a->job_dir[0] = '\0';
}

int msr_agent_run(msr_options_t *o)
{
    agent_t a;
    memset(&a, 0, sizeof a);
    a.o = o;
    a.node_rank = -1;
    a.worker_generation = -1;
    a.ready_generation = -1;
    a.backoff_ms = 50;
    a.state = MSR__JOB_STATE__JOB_STATE_UNKNOWN;
    msr_list_init(&a.reports);
    msr_log_init("msrun", -1, -1);
    msr_log_set_level((msr_log_level_t)o->log_level);
    a.devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (a.devnull < 0) {
        fprintf(stderr, "msrun: error: /dev/null: %s\n", strerror(errno));
        return 2;
    }
    a.log_dir_fd = -1;
    int rc = 2;
    if (o->log_dir && (a.log_dir_fd = open_log_dir(o->log_dir)) < 0)
        goto out_devnull;
    /* Job identity: standalone jobs get random ones. */
    unsigned char rnd[16];
    msr_random_bytes(rnd, sizeof rnd);
    if (o->job_id)
        snprintf(a.job_id, sizeof a.job_id, "%s", o->job_id);
    else if (o->master_addr == NULL)
        snprintf(a.job_id, sizeof a.job_id, "job-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
    else
        snprintf(a.job_id, sizeof a.job_id, "default");
    /* The token: given, or random (a standalone job's here; a multi-node
     * job's in setup_coordinator, which knows whether this node starts the
     * coordinator). Never derived from anything others know. */
    if (o->token) {
        snprintf(a.token, sizeof a.token, "%s", o->token);
    } else if (o->master_addr == NULL) {
        if (msr_token_generate(a.token, sizeof a.token) != MSR_OK) {
            fprintf(stderr, "msrun: error: cannot generate a job token: %s\n", msr_err_msg());
            goto out_devnull;
        }
    }
    /* TLS to the coordinator: its certificate must name master_addr as the
     * user wrote it (a host name or an address), unless told otherwise. */
    a.tls = (msr_rpc_tls_t){o->tls_cert, o->tls_key, o->tls_ca,
                            o->tls_server_name ? o->tls_server_name : o->master_addr};
    /* Block nothing, ignore SIGPIPE (a closed terminal must not kill msrun). */
    signal(SIGPIPE, SIG_IGN);
    /* The job's private directory holds the proxy's socket and the embedded
     * coordinator's state file. */
    if (make_job_dir(&a) != 0) {
        fprintf(stderr, "msrun: error: cannot create the job's directory\n");
        rc = 1;
        goto out_devnull;
    }
    snprintf(a.state_file, sizeof a.state_file, "%s/coordinator.state", a.job_dir);
    rc = setup_coordinator(&a);
    if (rc != 0)
        goto out_devnull;
    a.free_port = msr_net_free_port(a.host);

    a.base = event_base_new();
    if (a.base == NULL) {
        fprintf(stderr, "msrun: error: cannot create the event loop\n");
        rc = 1;
        goto out_coord;
    }
    a.nworkers = o->local_worker_num;
    a.workers = msr_calloc((size_t)a.nworkers, sizeof *a.workers);
    a.retry_ev = evtimer_new(a.base, on_retry, &a);
    a.kill_ev = evtimer_new(a.base, on_kill_timer, &a);
    a.stuck_ev = evtimer_new(a.base, on_stuck_timer, &a);
    a.stopped_ev = event_new(a.base, -1, 0, on_stopped, &a);
    a.hang_ev = event_new(a.base, -1, EV_PERSIST, on_hang_check, &a);
    if (a.hang_ev && o->worker_timeout_ms > 0) {
        int64_t every = o->worker_timeout_ms / 4 < 50 ? 50 : o->worker_timeout_ms / 4;
        if (every > 1000)
            every = 1000;
        struct timeval tv = {(time_t)(every / 1000), (suseconds_t)((every % 1000) * 1000)};
        event_add(a.hang_ev, &tv);
    }
    if (a.workers == NULL || !a.retry_ev || !a.kill_ev || !a.stuck_ev || !a.stopped_ev ||
        !a.hang_ev) {
        fprintf(stderr, "msrun: error: out of memory\n");
        rc = 1;
        goto out_base;
    }
    for (int i = 0; i < a.nworkers; i++)
        a.workers[i].out.fd = a.workers[i].err.fd = a.workers[i].log_fd = -1;
    int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(sigs); i++) {
        a.sig_ev[a.nsig] = evsignal_new(a.base, sigs[i], on_signal, &a);
        if (a.sig_ev[a.nsig] == NULL || event_add(a.sig_ev[a.nsig], NULL) != 0) {
            fprintf(stderr, "msrun: error: cannot watch signals\n");
            rc = 1;
            goto out_base;
        }
        a.nsig++;
    }
    /* A coordinator child that died before the loop started. */
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        on_child(&a, pid, status);
    if (msr_link_create(a.base, a.coord_target, a.token, &a.tls, &a.link) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot create the link to the coordinator\n");
        rc = 1;
        goto out_base;
    }
    /* The workers' store calls go through this node's proxy. */
    if (msr_proxy_start(a.socket_path, a.coord_target, a.token, &a.tls, a.o->local_worker_num,
                        &a.proxy) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot start the store proxy for the workers\n");
        rc = 1;
        goto out_base;
    }
    join_send(&a);
    event_base_dispatch(a.base);

    /* Out of the loop: workers are stopped unless the loop broke early. */
    for (int i = 0; i < a.nworkers; i++)
        if (a.workers[i].running)
            msr_worker_signal(&a.workers[i], SIGKILL);
    for (int i = 0; i < a.nworkers; i++)
        if (a.workers[i].running && waitpid(a.workers[i].pid, &status, 0) > 0)
            a.workers[i].running = 0;
    cleanup_workers(&a);
    rc = a.exit_code;
    msr_proxy_stop(a.proxy);
    a.proxy = NULL;
    leave(&a);
    msr_link_destroy(a.link);
    a.link = NULL;
    print_outcome(&a);
    if (rc != 0 && a.state == MSR__JOB_STATE__JOB_FAILED)
        write_error_file(&a);

out_base:
    for (int i = 0; i < a.nsig; i++)
        event_free(a.sig_ev[i]);
    if (a.retry_ev)
        event_free(a.retry_ev);
    if (a.kill_ev)
        event_free(a.kill_ev);
    if (a.stuck_ev)
        event_free(a.stuck_ev);
    if (a.stopped_ev)
        event_free(a.stopped_ev);
    if (a.hang_ev)
        event_free(a.hang_ev);
    msr_proxy_stop(a.proxy);
    msr_link_destroy(a.link);
    /* reports still unacknowledged: their calls were cancelled with the link */
    while (!msr_list_empty(&a.reports))
        report_free(MSR_CONTAINER_OF(a.reports.next, report_t, link));
    msr_free(a.workers);
    event_base_free(a.base);
out_coord:
    stop_coordinator(&a);
out_devnull:
    remove_job_dir(&a);
    cause_clear(&a.cause);
    if (a.log_dir_fd >= 0)
        close(a.log_dir_fd);
    close(a.devnull);
    return rc;
}
