/* The embedded coordinator as a child process of the agent: starting it,
 * restarting it and stopping it at the end. Every start goes through
 * msr_spawn. The first start waits for the child's port
 * (msr_coord_child_start); a restart, asked for by the node's machine
 * (MSR_NODE_ACT_COORD_RESTART), or a takeover after an election is watched
 * from the agent's event loop instead (msr_coord_ready_feed), so the loop
 * keeps serving while the new coordinator comes up. */
#include "launcher/coord_child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/http.h"
#include "launcher/commands.h"
#include "launcher/dashboard_login.h"
#include "launcher/net.h"
#include "launcher/rundir.h"
#include "launcher/spawn.h"

/* The embedded coordinator's command line: this job's settings. */
typedef struct coord_argv {
    char bind[300], fd[16], wn[16], lwn[16], mr[16], nt[32], ct[32], ll[16], nn[48], lc[32];
    char jh[32];
    char lease[24], dport[16], dttl[32], dmax[16], ddl[32];
    char limit[7][24];
    char *argv[72];
} coord_argv_t;

/* The dashboard's options of the embedded coordinator, from argv[k]: the
 * next free slot. */
static int coord_argv_dashboard(const msr_coord_t *c, coord_argv_t *v, int k)
{
    snprintf(v->dport, sizeof v->dport, "%d", c->o->dashboard_port);
    v->argv[k++] = "--dashboard_port";
    v->argv[k++] = v->dport;
    if (c->o->dashboard_addr) {
        v->argv[k++] = "--dashboard_addr";
        v->argv[k++] = c->o->dashboard_addr;
    }
    if (c->o->dashboard_login_ttl_ms > 0) {
        snprintf(v->dttl, sizeof v->dttl, "%.3f", (double)c->o->dashboard_login_ttl_ms / 1000.0);
        v->argv[k++] = "--dashboard_login_ttl";
        v->argv[k++] = v->dttl;
    }
    if (c->o->dashboard_max_connections > 0) {
        snprintf(v->dmax, sizeof v->dmax, "%d", c->o->dashboard_max_connections);
        v->argv[k++] = "--dashboard_max_connections";
        v->argv[k++] = v->dmax;
    }
    if (c->o->dashboard_deadline_ms > 0) {
        snprintf(v->ddl, sizeof v->ddl, "%.3f", (double)c->o->dashboard_deadline_ms / 1000.0);
        v->argv[k++] = "--dashboard_request_timeout";
        v->argv[k++] = v->ddl;
    }
    return k;
}

static void coord_argv(msr_coord_t *c, const char *bind_addr, coord_argv_t *v)
{
    snprintf(v->bind, sizeof v->bind, "%s", bind_addr);
    snprintf(v->fd, sizeof v->fd, "%d", 3);
    snprintf(v->wn, sizeof v->wn, "%d", c->o->worker_num);
    snprintf(v->lwn, sizeof v->lwn, "%d", c->o->local_worker_num);
    snprintf(v->mr, sizeof v->mr, "%d", c->o->max_restarts);
    snprintf(v->nt, sizeof v->nt, "%.3f", (double)c->o->node_timeout_ms / 1000.0);
    snprintf(v->ct, sizeof v->ct, "%.3f", (double)c->o->cluster_time_out_ms / 1000.0);
    /* The embedded coordinator speaks up for warnings unless asked for more. */
    snprintf(v->ll, sizeof v->ll, "%d",
             c->o->log_level >= MSR_LOG_DEBUG ? c->o->log_level : MSR_LOG_WARN);
    snprintf(v->nn, sizeof v->nn, "%d:%d", c->o->min_nodes, c->o->max_nodes);
    snprintf(v->lc, sizeof v->lc, "%.3f", (double)c->o->last_call_ms / 1000.0);
    int k = 0;
    const char *fixed[] = {
        "msrun",          "coordinator", "--bind",         v->bind, "--ready_fd",         v->fd,
        "--job_id",       c->job->id,    "--worker_num",   v->wn,   "--local_worker_num", v->lwn,
        "--max_restarts", v->mr,         "--node_timeout", v->nt,   "--cluster_time_out", v->ct,
        "--log_level",    v->ll,         "--last_call",    v->lc};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(fixed); i++)
        v->argv[k++] = (char *)fixed[i];
    if (c->o->max_nodes > c->o->min_nodes) {
        v->argv[k++] = "--nnodes";
        v->argv[k++] = v->nn;
    }
    if (c->o->join_hold_ms >= 0) {
        snprintf(v->jh, sizeof v->jh, "%.3f", (double)c->o->join_hold_ms / 1000.0);
        v->argv[k++] = "--join_hold";
        v->argv[k++] = v->jh;
    }
    if (c->elect) {
        /* the state in etcd, written only while this node's lease leads */
        snprintf(v->lease, sizeof v->lease, "%lld", (long long)c->lease);
        v->argv[k++] = "--etcd_endpoints";
        v->argv[k++] = c->o->etcd_endpoints;
        v->argv[k++] = "--etcd_prefix";
        v->argv[k++] = c->etcd_prefix;
        v->argv[k++] = "--etcd_lease";
        v->argv[k++] = v->lease;
    } else if (c->state_file[0]) {
        /* The file lives in the job's directory, removed when this msrun
         * ends: it serves a coordinator restarted by this msrun, in this
         * boot, so a save need not wait for the disk. */
        v->argv[k++] = "--state_file";
        v->argv[k++] = c->state_file;
        v->argv[k++] = "--state_sync";
        v->argv[k++] = "process";
    }
    const char *tls_flags[][2] = {
        {"--tls_cert", c->o->tls_cert}, {"--tls_key", c->o->tls_key}, {"--tls_ca", c->o->tls_ca}};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(tls_flags); i++) {
        if (tls_flags[i][1]) {
            v->argv[k++] = (char *)tls_flags[i][0];
            v->argv[k++] = (char *)tls_flags[i][1];
        }
    }
    if (c->o->auth_munge) {
        v->argv[k++] = "--auth";
        v->argv[k++] = "munge";
        if (c->o->munge_socket) {
            v->argv[k++] = "--munge_socket";
            v->argv[k++] = c->o->munge_socket;
        }
    }
    if (c->o->dashboard_port > 0)
        k = coord_argv_dashboard(c, v, k);
    if (c->o->straggler_factor) {
        v->argv[k++] = "--straggler_factor";
        v->argv[k++] = c->o->straggler_factor;
    }
    const int64_t limit[7] = {c->o->store_value_max, c->o->store_keys_max, c->o->store_bytes_max,
                              c->o->held_calls_max,  c->o->held_bytes_max, c->o->held_calls_total,
                              c->o->held_bytes_total};
    const char *limit_opt[7] = {"--store_value_max", "--store_keys_max", "--store_bytes_max",
                                "--held_calls_max",  "--held_bytes_max", "--held_calls_total",
                                "--held_bytes_total"};
    for (int i = 0; i < 7; i++) {
        if (limit[i] <= 0)
            continue; /* the coordinator's default */
        snprintf(v->limit[i], sizeof v->limit[i], "%lld", (long long)limit[i]);
        v->argv[k++] = (char *)limit_opt[i];
        v->argv[k++] = v->limit[i];
    }
    v->argv[k] = NULL;
}

/* Fields first..first+n-1 (1-based, first > 2) of /proc/self/stat: 0, or
 * -1 if they cannot be read. */
static int self_stat(int first, int n, unsigned long long *out)
{
    char buf[2048];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[got > 0 ? got : 0] = '\0';
    char *p = strrchr(buf, ')'); /* the name may hold spaces */
    if (p == NULL)
        return -1;
    p++;
    for (int field = 3, k = 0; k < n; field++) {
        char *end;
        unsigned long long x = strtoull(p, &end, 10);
        if (field >= first) {
            if (end == p)
                return -1;
            out[k++] = x;
        }
        p += strspn(p, " ");
        p += strcspn(p, " ");
    }
    return 0;
}

/* In a forked coordinator: its command line, as ps and pgrep show it,
 * becomes "msrun coordinator --bind ..." as an exec'd one's, written over
 * msrun's own arguments and cut to their length (the environment stays as
 * it is: tests find their processes by it). Nothing if the kernel does not
 * say where they are. */
static void coord_child_title(char *const *argv)
{
    unsigned long long a[2]; /* arg_start, arg_end */
    if (self_stat(48, 2, a) != 0 || a[0] == 0 || a[1] <= a[0])
        return;
    char *area = (char *)(uintptr_t)a[0];
    size_t len = (size_t)(a[1] - a[0]), k = 0;
    for (int i = 0; argv[i] && k + 1 < len; i++) {
        size_t n = strlen(argv[i]);
        if (i > 0)
            area[k++] = '\0'; /* argument by argument, as the kernel lays them out */
        n = n < len - 1 - k ? n : len - 1 - k;
        memcpy(area + k, argv[i], n);
        k += n;
    }
    memset(area + k, 0, len - k); /* its last byte a NUL: the kernel reads no further */
}

/* The forked coordinator's main: `msrun coordinator` with argv (NULL-
 * terminated, from coord_argv), copied first, since its strings may lie in
 * the area the title overwrites. */
static int coord_child_main(void *arg)
{
    char *const *argv = arg;
    int argc = 0;
    while (argv[argc])
        argc++;
    char **copy = msr_calloc((size_t)argc + 1, sizeof *copy);
    for (int i = 0; copy && i < argc; i++)
        if ((copy[i] = msr_strdup(argv[i])) == NULL)
            return 2; /* a copy of msrun that exits at once: freed by the exit */
    if (copy == NULL)
        return 2;
    coord_child_title(copy);
    int rc = msr_coordinator_main(argc - 2, copy + 2);
    for (int i = 0; i < argc; i++)
        msr_free(copy[i]);
    msr_free(copy);
    return rc;
}

msr_status_t msr_coord_child_spawn(msr_coord_t *c, const char *bind_addr, int *ready_fd_p)
{
    coord_argv_t v;
    coord_argv(c, bind_addr, &v);
    /* The token travels in the environment, not on the command line; the
     * environment is built here, before fork. */
    char token_var[MSR_TOKEN_MAX + 16], code_var[64];
    snprintf(token_var, sizeof token_var, "MSRUN_TOKEN=%s", c->job->token);
    /* the dashboard's one-time login code: made once, printed by this msrun */
    if (c->o->dashboard_port > 0 && c->dashboard_code[0] == '\0') {
        unsigned char rnd[MSR_DASHBOARD_CODE_BYTES];
        msr_random_bytes(rnd, sizeof rnd);
        for (size_t i = 0; i < sizeof rnd; i++)
            snprintf(c->dashboard_code + 2 * i, 3, "%02x", rnd[i]);
    }
    snprintf(code_var, sizeof code_var, "MSRUN_DASHBOARD_CODE=%s", c->dashboard_code);
    const char *drop[] = {"MSRUN_TOKEN", "MSRUN_TOKEN_FILE", "MSRUN_DASHBOARD_CODE", NULL};
    const char *add[] = {token_var, c->dashboard_code[0] ? code_var : NULL, NULL};
    char **envp = msr_spawn_env(NULL, drop, add);
    memset(token_var, 0, sizeof token_var);
    memset(code_var, 0, sizeof code_var);
    if (envp == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "out of memory building the environment");
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) {
        msr_spawn_env_free(envp);
        return msr_err(MSR_ERR_SYSTEM, "pipe: %s", strerror(errno));
    }
    msr_spawn_options_t so = {
        .path = "/proc/self/exe",
        .argv = v.argv,
        .envp = envp,
        .stdio = {{MSR_SPAWN_DEVNULL, -1}, {MSR_SPAWN_INHERIT, -1}, {MSR_SPAWN_INHERIT, -1}},
        .extra_fd = ready[1],
        .extra_fd_as = 3,
        .new_group = 1,
        .death_signal = SIGTERM,
    };
    if (MSR_LOG_DEBUG <= msr_log_level_) {
        /* whole: a copy's command line shows only what msrun's own has room for */
        char line[2048];
        msr_run_command_format(v.argv, line, sizeof line);
        MSR_DEBUG("starting the embedded coordinator: %s", line);
    }
    pid_t pid;
    /* The first start, before msrun has a thread or has used gRPC, forks
     * and runs the coordinator in the copy: msrun and its libraries are
     * not loaded a second time. Later ones (a restart, a takeover) exec. */
    msr_status_t st =
        c->fork_ok ? msr_spawn_fork(&so, coord_child_main, v.argv, &pid) : MSR_ERR_UNSUPPORTED;
    if (st == MSR_ERR_UNSUPPORTED && c->fork_ok)
        MSR_DEBUG("the embedded coordinator is started by exec: %s", msr_err_msg());
    if (st == MSR_ERR_UNSUPPORTED)
        st = msr_spawn(&so, &pid);
    else
        MSR_DEBUG("the embedded coordinator runs in a copy of msrun (pid %d)", (int)pid);
    c->fork_ok = 0;
    msr_spawn_env_free(envp);
    close(ready[1]);
    if (st != MSR_OK) {
        close(ready[0]);
        return st;
    }
    c->pid = pid;
    *ready_fd_p = ready[0];
    return MSR_OK;
}

int msr_coord_ready_feed(msr_coord_ready_t *r, int fd)
{
    for (;;) {
        ssize_t n = read(fd, r->line + r->got, sizeof r->line - 1 - r->got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n > 0)
            r->got += (size_t)n;
        r->line[r->got] = '\0';
        char *nl = strchr(r->line, '\n');
        if (n > 0 && nl == NULL && r->got < sizeof r->line - 1)
            continue;
        if (nl)
            *nl = '\0';
        int port = 0;
        if (sscanf(r->line, "port %d", &port) == 1 && port > 0 && port < 65536)
            return port;
        msr_err_set("%s", strncmp(r->line, "error ", 6) == 0 ? r->line + 6
                          : r->got                           ? r->line
                                                             : "the coordinator did not start");
        return -1;
    }
}

void msr_coord_child_kill(msr_coord_t *c)
{
    if (c->pid <= 0)
        return;
    kill(c->pid, SIGKILL);
    while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    c->pid = 0;
}

/* Where the job's page is, with the one-time login code, told only to a
 * terminal or a 0600 file (docs/observe.md): a scheduler's job output is
 * often readable by others. */
static void print_dashboard(msr_coord_t *c)
{
    const char *addr = c->o->dashboard_addr ? c->o->dashboard_addr : "127.0.0.1";
    if (strcmp(addr, "0.0.0.0") == 0 || strcmp(addr, "::") == 0)
        addr = c->host[0] ? c->host : "127.0.0.1";
    char hp[300];
    msr_net_join(addr, c->o->dashboard_port, hp, sizeof hp);
    if (c->o->dashboard_login_file == NULL)
        snprintf(c->login_file, sizeof c->login_file, "%s/dashboard.url", c->job->dir);
    int64_t ttl_ms = c->o->dashboard_login_ttl_ms;
    if (msr_dashboard_login_tell("msrun", hp, c->dashboard_code,
                                 (ttl_ms > 0 ? ttl_ms : MSR_HTTP_LOGIN_TTL_S * 1000) / 1000,
                                 c->o->dashboard_login_file, c->login_file) != MSR_OK)
        c->login_file[0] = '\0'; /* not ours to remove */
    /* a generated token, for curl and Prometheus: in the job's 0600 file
     * (the one other nodes are told of, made now if not yet) */
    const char *tf = c->o->token_file;
    if (tf == NULL && c->o->token == NULL && c->job->token_file[0] == '\0') {
        snprintf(c->job->token_file, sizeof c->job->token_file, "%s/token", c->job->dir);
        if (msr_token_write_file(c->job->token_file, c->job->token) != MSR_OK) {
            MSR_WARN("%s", msr_err_msg());
            c->job->token_file[0] = '\0';
        }
    }
    if (tf == NULL && c->o->token == NULL && c->job->token_file[0])
        tf = c->job->token_file;
    msr_dashboard_token_tell("msrun", tf);
}

int msr_coord_child_start(msr_coord_t *c, const char *bind_addr)
{
    int fd;
    if (msr_coord_child_spawn(c, bind_addr, &fd) != MSR_OK)
        return -1;
    /* Wait for "port N" or "error ..." from the child. */
    msr_coord_ready_t r = {.got = 0};
    uint64_t deadline = msr_deadline_in_ms(MSR_COORD_READY_MS);
    int port = 0;
    while (port == 0) {
        struct pollfd p = {fd, POLLIN, 0};
        int ms = (int)msr_deadline_left_ms(deadline);
        int ready = ms > 0 ? poll(&p, 1, ms) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            msr_err_set("the coordinator did not say its port within %d s",
                        MSR_COORD_READY_MS / 1000);
            port = -1;
            break;
        }
        port = msr_coord_ready_feed(&r, fd);
    }
    close(fd);
    if (port < 0)
        msr_coord_child_kill(c);
    else if (c->o->dashboard_port > 0)
        print_dashboard(c);
    return port;
}

/* A restart of the embedded coordinator ends: port > 0 it listens, else
 * it failed (msr_err_msg() says why) and no child is left. */
static void coord_restart_done(msr_coord_t *c, int port)
{
    event_free(c->ready_ev);
    c->ready_ev = NULL;
    close(c->ready_fd);
    c->ready_fd = -1;
    if (port > 0 && c->takeover) {
        c->takeover = 0;
        msr_net_join(c->host, port, c->bind, sizeof c->bind);
        MSR_WARN("elected to run the coordinator: it listens on %s", c->bind);
        msr_elect_publish(c->elect, c->bind);
        c->moved(c->moved_arg, c->bind);
        return;
    }
    if (port > 0) {
        MSR_WARN("the embedded coordinator exited (%s); restarted it on %s", c->exit_how, c->bind);
        return;
    }
    c->takeover = 0;
    MSR_ERROR("the embedded coordinator exited (%s) and cannot be restarted: %s", c->exit_how,
              msr_err_msg());
    msr_coord_child_kill(c);
}

static void on_coord_ready(evutil_socket_t fd, short what, void *arg)
{
    msr_coord_t *c = arg;
    int port;
    if (what & EV_TIMEOUT) {
        msr_err_set("it did not say its port within %d s", MSR_COORD_READY_MS / 1000);
        port = -1;
    } else if ((port = msr_coord_ready_feed(&c->ready, fd)) == 0) {
        return;
    }
    coord_restart_done(c, port);
}

static void coord_child_watch(msr_coord_t *c, const char *how);

/* Starts a new coordinator on the same address and state file, and watches
 * its ready pipe from the loop: heartbeats, worker exits and signals are
 * served while it comes up. */
void msr_coord_child_restart(msr_coord_t *c, const char *how)
{
    if (c->ready_fd >= 0)
        return; /* one under way */
    c->restarts++;
    coord_child_watch(c, how);
}

void msr_coord_child_takeover(msr_coord_t *c)
{
    if (c->ready_fd >= 0 || c->pid > 0)
        return; /* one under way, or running (a restart after a lost lease) */
    c->lease = msr_elect_lease(c->elect);
    c->takeover = 1;
    msr_net_join(c->host, 0, c->bind, sizeof c->bind);
    coord_child_watch(c, "taken over");
}

static void coord_child_watch(msr_coord_t *c, const char *how)
{
    snprintf(c->exit_how, sizeof c->exit_how, "%s", how);
    int fd;
    if (msr_coord_child_spawn(c, c->bind, &fd) != MSR_OK) {
        MSR_ERROR("the embedded coordinator exited (%s) and cannot be restarted: %s", how,
                  msr_err_msg());
        return;
    }
    msr_fd_set_nonblock(fd, 1);
    c->ready = (msr_coord_ready_t){.got = 0};
    c->ready_fd = fd;
    c->ready_ev = event_new(c->base, fd, EV_READ | EV_PERSIST, on_coord_ready, c);
    struct timeval tv = {MSR_COORD_READY_MS / 1000, 0};
    if (c->ready_ev == NULL || event_add(c->ready_ev, &tv) != 0) {
        msr_err_set("out of memory");
        coord_restart_done(c, -1);
    }
}

int msr_coord_child_exited(msr_coord_t *c, const char *how)
{
    if (c->ready_fd < 0)
        return 1;
    /* a restarted one ended before or right after saying its port */
    msr_err_clear();
    int port = msr_coord_ready_feed(&c->ready, c->ready_fd);
    if (port <= 0 && msr_err_msg()[0] == '\0')
        msr_err_set("it exited (%s)", how);
    coord_restart_done(c, port > 0 ? port : -1);
    return port > 0;
}

void msr_coord_child_stop(msr_coord_t *c, int others)
{
    if (c->login_file[0]) /* its code is void once the coordinator ends */
        unlink(c->login_file);
    c->login_file[0] = '\0';
    if (c->pid <= 0)
        return;
    /* The other nodes must hear the outcome: the coordinator exits by itself
     * once every node has left. Give it a moment, then stop it. */
    if (!msr_spawn_wait(c->pid, others ? 10000 : 2000)) {
        kill(c->pid, SIGTERM);
        if (!msr_spawn_wait(c->pid, 3000)) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, NULL, 0);
        }
    }
    c->pid = 0;
}

void msr_coord_init(msr_coord_t *c, const msr_options_t *o, msr_job_t *job,
                    msr_coord_moved_fn moved, void *moved_arg)
{
    memset(c, 0, sizeof *c);
    c->o = o;
    c->job = job;
    c->moved = moved;
    c->moved_arg = moved_arg;
    c->ready_fd = -1;
    c->fork_ok = 1;
}

void msr_coord_child_unwatch(msr_coord_t *c)
{
    if (c->ready_ev)
        event_free(c->ready_ev);
    c->ready_ev = NULL;
    if (c->ready_fd >= 0)
        close(c->ready_fd);
    c->ready_fd = -1;
    c->fork_ok = 1;
}
