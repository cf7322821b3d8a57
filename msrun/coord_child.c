/* The embedded coordinator as a child process of the agent: deciding where
 * the coordinator is (starting it here when this node should), starting it,
 * and stopping it at the end. Every start goes through msr_spawn. The
 * first start waits for the child's port (start_coordinator); a restart,
 * asked for by the node's machine (MSR_NODE_ACT_COORD_RESTART), is watched
 * from the agent's event loop instead (msr_coord_ready_feed), so the loop
 * keeps serving while the new coordinator comes up. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "base/alloc.h"
#include "base/util.h"
#include "cluster/munge_auth.h"
#include "msrun/agent_impl.h"
#include "msrun/net.h"
#include "msrun/spawn.h"
#include "msrun/token.h"

/* The embedded coordinator's command line: this job's settings. */
typedef struct coord_argv {
    char bind[300], fd[16], wn[16], lwn[16], mr[16], nt[32], ct[32], ll[16], nn[48], lc[32];
    char lease[24], dport[16];
    char store[3][24];
    char *argv[56];
} coord_argv_t;

static void coord_argv(agent_t *a, const char *bind_addr, coord_argv_t *c)
{
    snprintf(c->bind, sizeof c->bind, "%s", bind_addr);
    snprintf(c->fd, sizeof c->fd, "%d", 3);
    snprintf(c->wn, sizeof c->wn, "%d", a->o->worker_num);
    snprintf(c->lwn, sizeof c->lwn, "%d", a->o->local_worker_num);
    snprintf(c->mr, sizeof c->mr, "%d", a->o->max_restarts);
    snprintf(c->nt, sizeof c->nt, "%.3f", (double)a->o->node_timeout_ms / 1000.0);
    snprintf(c->ct, sizeof c->ct, "%.3f", (double)a->o->cluster_time_out_ms / 1000.0);
    /* The embedded coordinator speaks up for warnings unless asked for more. */
    snprintf(c->ll, sizeof c->ll, "%d",
             a->o->log_level >= MSR_LOG_DEBUG ? a->o->log_level : MSR_LOG_WARN);
    snprintf(c->nn, sizeof c->nn, "%d:%d", a->o->min_nodes, a->o->max_nodes);
    snprintf(c->lc, sizeof c->lc, "%.3f", (double)a->o->last_call_ms / 1000.0);
    int k = 0;
    const char *fixed[] = {
        "msrun",          "coordinator", "--bind",         c->bind, "--ready_fd",         c->fd,
        "--job_id",       a->job_id,     "--worker_num",   c->wn,   "--local_worker_num", c->lwn,
        "--max_restarts", c->mr,         "--node_timeout", c->nt,   "--cluster_time_out", c->ct,
        "--log_level",    c->ll,         "--last_call",    c->lc};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(fixed); i++)
        c->argv[k++] = (char *)fixed[i];
    if (a->o->max_nodes > a->o->min_nodes) {
        c->argv[k++] = "--nnodes";
        c->argv[k++] = c->nn;
    }
    if (a->elect) {
        /* the state in etcd, written only while this node's lease leads */
        snprintf(c->lease, sizeof c->lease, "%lld", (long long)a->coord_lease);
        c->argv[k++] = "--etcd_endpoints";
        c->argv[k++] = a->o->etcd_endpoints;
        c->argv[k++] = "--etcd_prefix";
        c->argv[k++] = a->etcd_prefix;
        c->argv[k++] = "--etcd_lease";
        c->argv[k++] = c->lease;
    } else if (a->state_file[0]) {
        /* The file lives in the job's directory, removed when this msrun
         * ends: it serves a coordinator restarted by this msrun, in this
         * boot, so a save need not wait for the disk. */
        c->argv[k++] = "--state_file";
        c->argv[k++] = a->state_file;
        c->argv[k++] = "--state_sync";
        c->argv[k++] = "process";
    }
    const char *tls_flags[][2] = {
        {"--tls_cert", a->o->tls_cert}, {"--tls_key", a->o->tls_key}, {"--tls_ca", a->o->tls_ca}};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(tls_flags); i++) {
        if (tls_flags[i][1]) {
            c->argv[k++] = (char *)tls_flags[i][0];
            c->argv[k++] = (char *)tls_flags[i][1];
        }
    }
    if (a->o->auth_munge) {
        c->argv[k++] = "--auth";
        c->argv[k++] = "munge";
        if (a->o->munge_socket) {
            c->argv[k++] = "--munge_socket";
            c->argv[k++] = a->o->munge_socket;
        }
    }
    if (a->o->dashboard_port > 0) {
        snprintf(c->dport, sizeof c->dport, "%d", a->o->dashboard_port);
        c->argv[k++] = "--dashboard_port";
        c->argv[k++] = c->dport;
        if (a->o->dashboard_addr) {
            c->argv[k++] = "--dashboard_addr";
            c->argv[k++] = a->o->dashboard_addr;
        }
    }
    if (a->o->straggler_factor) {
        c->argv[k++] = "--straggler_factor";
        c->argv[k++] = a->o->straggler_factor;
    }
    const int64_t store[3] = {a->o->store_value_max, a->o->store_keys_max, a->o->store_bytes_max};
    const char *store_opt[3] = {"--store_value_max", "--store_keys_max", "--store_bytes_max"};
    for (int i = 0; i < 3; i++) {
        if (store[i] <= 0)
            continue; /* the coordinator's default */
        snprintf(c->store[i], sizeof c->store[i], "%lld", (long long)store[i]);
        c->argv[k++] = (char *)store_opt[i];
        c->argv[k++] = c->store[i];
    }
    c->argv[k] = NULL;
}

msr_status_t msr_coord_child_spawn(agent_t *a, const char *bind_addr, int *ready_fd_p)
{
    coord_argv_t c;
    coord_argv(a, bind_addr, &c);
    /* The token travels in the environment, not on the command line; the
     * environment is built here, before fork. */
    char token_var[MSR_TOKEN_MAX + 16], code_var[64];
    snprintf(token_var, sizeof token_var, "MSRUN_TOKEN=%s", a->token);
    /* the dashboard's one-time login code: made once, printed by this msrun */
    if (a->o->dashboard_port > 0 && a->dashboard_code[0] == '\0') {
        unsigned char rnd[16];
        msr_random_bytes(rnd, sizeof rnd);
        for (size_t i = 0; i < sizeof rnd; i++)
            snprintf(a->dashboard_code + 2 * i, 3, "%02x", rnd[i]);
    }
    snprintf(code_var, sizeof code_var, "MSRUN_DASHBOARD_CODE=%s", a->dashboard_code);
    const char *drop[] = {"MSRUN_TOKEN", "MSRUN_TOKEN_FILE", "MSRUN_DASHBOARD_CODE", NULL};
    const char *add[] = {token_var, a->dashboard_code[0] ? code_var : NULL, NULL};
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
        .argv = c.argv,
        .envp = envp,
        .stdio = {{MSR_SPAWN_DEVNULL, -1}, {MSR_SPAWN_INHERIT, -1}, {MSR_SPAWN_INHERIT, -1}},
        .extra_fd = ready[1],
        .extra_fd_as = 3,
        .new_group = 1,
        .death_signal = SIGTERM,
    };
    pid_t pid;
    msr_status_t st = msr_spawn(&so, &pid);
    msr_spawn_env_free(envp);
    close(ready[1]);
    if (st != MSR_OK) {
        close(ready[0]);
        return st;
    }
    a->coord_pid = pid;
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

void msr_coord_child_kill(agent_t *a)
{
    if (a->coord_pid <= 0)
        return;
    kill(a->coord_pid, SIGKILL);
    while (waitpid(a->coord_pid, NULL, 0) < 0 && errno == EINTR)
        ;
    a->coord_pid = 0;
}

/* Where the job's page is, with the one-time login code (docs/observe.md). */
static void print_dashboard(agent_t *a)
{
    const char *addr = a->o->dashboard_addr ? a->o->dashboard_addr : "127.0.0.1";
    if (strcmp(addr, "0.0.0.0") == 0 || strcmp(addr, "::") == 0)
        addr = a->host[0] ? a->host : "127.0.0.1";
    char hp[300];
    msr_net_join(addr, a->o->dashboard_port, hp, sizeof hp);
    fprintf(stderr,
            "msrun: dashboard at http://%s/login?code=%s (the link logs in once; afterwards "
            "send 'Authorization: Bearer <job token>')\n",
            hp, a->dashboard_code);
}

int start_coordinator(agent_t *a, const char *bind_addr)
{
    int fd;
    if (msr_coord_child_spawn(a, bind_addr, &fd) != MSR_OK)
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
        msr_coord_child_kill(a);
    else if (a->o->dashboard_port > 0)
        print_dashboard(a);
    return port;
}

/* A restart of the embedded coordinator ends: port > 0 it listens, else
 * it failed (msr_err_msg() says why) and no child is left. */
static void coord_restart_done(agent_t *a, int port)
{
    event_free(a->coord_ready_ev);
    a->coord_ready_ev = NULL;
    close(a->coord_ready_fd);
    a->coord_ready_fd = -1;
    if (port > 0 && a->coord_takeover) {
        a->coord_takeover = 0;
        msr_net_join(a->host, port, a->coord_bind, sizeof a->coord_bind);
        MSR_WARN("elected to run the coordinator: it listens on %s", a->coord_bind);
        msr_elect_publish(a->elect, a->coord_bind);
        msr_agent_coord_moved(a, a->coord_bind);
        return;
    }
    if (port > 0) {
        MSR_WARN("the embedded coordinator exited (%s); restarted it on %s", a->coord_exit_how,
                 a->coord_bind);
        return;
    }
    a->coord_takeover = 0;
    MSR_ERROR("the embedded coordinator exited (%s) and cannot be restarted: %s", a->coord_exit_how,
              msr_err_msg());
    msr_coord_child_kill(a);
}

static void on_coord_ready(evutil_socket_t fd, short what, void *arg)
{
    agent_t *a = arg;
    int port;
    if (what & EV_TIMEOUT) {
        msr_err_set("it did not say its port within %d s", MSR_COORD_READY_MS / 1000);
        port = -1;
    } else if ((port = msr_coord_ready_feed(&a->coord_ready, fd)) == 0) {
        return;
    }
    coord_restart_done(a, port);
}

static void coord_child_watch(agent_t *a, const char *how);

/* Starts a new coordinator on the same address and state file, and watches
 * its ready pipe from the loop: heartbeats, worker exits and signals are
 * served while it comes up. */
void msr_coord_child_restart(agent_t *a, const char *how)
{
    if (a->coord_ready_fd >= 0)
        return; /* one under way */
    a->coord_restarts++;
    coord_child_watch(a, how);
}

void msr_coord_child_takeover(agent_t *a)
{
    if (a->coord_ready_fd >= 0 || a->coord_pid > 0)
        return; /* one under way, or running (a restart after a lost lease) */
    a->coord_lease = msr_elect_lease(a->elect);
    a->coord_takeover = 1;
    msr_net_join(a->host, 0, a->coord_bind, sizeof a->coord_bind);
    coord_child_watch(a, "taken over");
}

static void coord_child_watch(agent_t *a, const char *how)
{
    snprintf(a->coord_exit_how, sizeof a->coord_exit_how, "%s", how);
    int fd;
    if (msr_coord_child_spawn(a, a->coord_bind, &fd) != MSR_OK) {
        MSR_ERROR("the embedded coordinator exited (%s) and cannot be restarted: %s", how,
                  msr_err_msg());
        return;
    }
    msr_fd_set_nonblock(fd, 1);
    a->coord_ready = (msr_coord_ready_t){.got = 0};
    a->coord_ready_fd = fd;
    a->coord_ready_ev = event_new(a->base, fd, EV_READ | EV_PERSIST, on_coord_ready, a);
    struct timeval tv = {MSR_COORD_READY_MS / 1000, 0};
    if (a->coord_ready_ev == NULL || event_add(a->coord_ready_ev, &tv) != 0) {
        msr_err_set("out of memory");
        coord_restart_done(a, -1);
    }
}

int msr_coord_child_exited(agent_t *a, const char *how)
{
    if (a->coord_ready_fd < 0)
        return 1;
    /* a restarted one ended before or right after saying its port */
    msr_err_clear();
    int port = msr_coord_ready_feed(&a->coord_ready, a->coord_ready_fd);
    if (port <= 0 && msr_err_msg()[0] == '\0')
        msr_err_set("it exited (%s)", how);
    coord_restart_done(a, port > 0 ? port : -1);
    return port > 0;
}

/* Whether an msrun coordinator of this job answers at target. With
 * wait_for_ready, waits up to 2 s for it to come up; without, a refused
 * connection answers at once. */
static msr_status_t probe_coordinator(agent_t *a, const char *target, int wait_for_ready)
{
    msr_rpc_channel_t *ch = NULL;
    msr_status_t st = msr_rpc_channel_create_tls(target, a->token, &a->tls, &ch);
    if (st != MSR_OK)
        return st;
    Msr__StatusRequest req = MSR__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    st = msr_rpc_call(ch, MSR_RPC_STATUS, &req.base, msr_deadline_in_ms(2000), wait_for_ready,
                      &resp);
    msr_rpc_message_free(resp);
    msr_rpc_channel_destroy(ch);
    return st;
}

/* Standalone: the coordinator on loopback, on --master_port or a free port. */
static int setup_standalone(agent_t *a)
{
    snprintf(a->coord_ip, sizeof a->coord_ip, "127.0.0.1");
    snprintf(a->host, sizeof a->host, "127.0.0.1");
    /* --master_port given: the embedded coordinator listens there */
    char bind[32];
    snprintf(bind, sizeof bind, "127.0.0.1:%d", a->o->given_master_port ? a->o->master_port : 0);
    int port = start_coordinator(a, bind);
    if (port < 0) {
        fprintf(stderr, "msrun: error: cannot start the coordinator on %s: %s\n", bind,
                msr_err_msg());
        return 2;
    }
    a->coord_port = port;
    snprintf(a->coord_bind, sizeof a->coord_bind, "127.0.0.1:%d", port);
    return 0;
}

/* One Auth call with cred: MSR_OK with the token in a->token, else the
 * call's status. */
static msr_status_t auth_munge_once(agent_t *a, msr_rpc_channel_t *ch, char *cred,
                                    uint64_t deadline)
{
    Msr__AuthRequest req = MSR__AUTH_REQUEST__INIT;
    req.job_id = a->job_id;
    req.credential = cred;
    ProtobufCMessage *resp = NULL;
    uint64_t call_deadline = msr_deadline_in_ms(5000);
    msr_status_t st = msr_rpc_call(ch, MSR_RPC_AUTH, &req.base,
                                   call_deadline < deadline ? call_deadline : deadline, 1, &resp);
    if (st != MSR_OK)
        return st;
    const char *token = ((Msr__AuthResponse *)resp)->token;
    if (token == NULL || !msr_token_valid(token)) {
        msr_rpc_message_free(resp);
        return msr_err(MSR_ERR_PROTOCOL, "the coordinator answered Auth without a valid token");
    }
    snprintf(a->token, sizeof a->token, "%s", token);
    memset(((Msr__AuthResponse *)resp)->token, 0, strlen(token));
    msr_rpc_message_free(resp);
    return MSR_OK;
}

/* --auth=munge, a node without the token: it proves to the coordinator
 * with a munge credential that it runs as the job's user and receives the
 * token. The coordinator may not be up yet: tries again until
 * cluster_time_out (from msrun's start) is spent, then exits 124 as a job
 * that never formed. A refusal is final (exit 2). */
static int fetch_token(agent_t *a)
{
    uint64_t deadline = a->start_ns + (uint64_t)a->o->cluster_time_out_ms * 1000000ull;
    msr_rpc_channel_t *ch = NULL;
    if (msr_rpc_channel_create_tls(a->coord_target, NULL, &a->tls, &ch) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot reach the coordinator at %s: %s\n", a->coord_target,
                msr_err_msg());
        return 2;
    }
    int64_t backoff_ms = 100;
    int rc;
    for (;;) {
        /* a fresh credential for each call: one is accepted only once */
        char *cred = NULL;
        msr_status_t st = msr_munge_encode(a->o->munge_socket, a->job_id, a->coord_target,
                                           msr_munge_job_uid(), &cred);
        if (st != MSR_OK) {
            fprintf(stderr, "msrun: error: --auth=munge: %s\n", msr_err_msg_or(st));
            rc = 2;
            break;
        }
        msr_err_clear();
        st = auth_munge_once(a, ch, cred, deadline);
        msr_free(cred);
        if (st == MSR_OK) {
            MSR_INFO("authenticated to the coordinator at %s with munge", a->coord_target);
            rc = 0;
            break;
        }
        if (st == MSR_ERR_PERMISSION || st == MSR_ERR_UNSUPPORTED || st == MSR_ERR_PROTOCOL ||
            st == MSR_ERR_INVALID_ARG) {
            fprintf(stderr,
                    "msrun: error: munge authentication to the coordinator at %s failed: %s\n",
                    a->coord_target, msr_err_msg_or(st));
            rc = 2;
            break;
        }
        if (msr_deadline_passed(deadline)) {
            fprintf(stderr,
                    "msrun: error: no coordinator at %s gave this node the job token within "
                    "cluster_time_out (%.0f s): %s\n",
                    a->coord_target, (double)a->o->cluster_time_out_ms / 1000.0,
                    msr_err_msg_or(st));
            rc = 124;
            break;
        }
        MSR_DEBUG("munge authentication to %s: %s; trying again", a->coord_target,
                  msr_err_msg_or(st));
        int64_t left = msr_deadline_left_ms(deadline);
        if (st == MSR_ERR_UNREACHABLE) /* poll the connection on while waiting */
            msr_rpc_channel_wait(ch, msr_deadline_in_ms(backoff_ms < left ? backoff_ms : left));
        else
            msr_sleep_ms(backoff_ms < left ? backoff_ms : left);
        backoff_ms = backoff_ms < 1000 ? backoff_ms * 2 : 1000;
    }
    msr_rpc_channel_destroy(ch);
    return rc;
}

/* The job's token when none was given: only the node that starts the
 * coordinator may make one up; the others cannot guess it (that is the
 * point): they are given it, or with --auth=munge fetch it (fetch_token).
 * Sets *generated when it made one. */
static int decide_token(agent_t *a, int here, int *generated)
{
    *generated = 0;
    if (a->token[0] != '\0')
        return 0;
    if (!here && a->o->auth_munge)
        return fetch_token(a);
    if (!here) {
        fprintf(stderr, "msrun: error: no job token: every node of a multi-node job needs the "
                        "job's token; give this node the one node 0 generated (it printed where "
                        "it wrote it), or give every node the same with --token_file FILE "
                        "(mode 0600) or MSRUN_TOKEN\n");
        return 2;
    }
    if (msr_token_generate(a->token, sizeof a->token) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot generate a job token: %s\n", msr_err_msg());
        return 2;
    }
    *generated = 1;
    return 0;
}

/* How long a node that lost the race for the port keeps telling apart a
 * coordinator that is still starting from another program holding it. */
#define PORT_TAKEN_MS 10000
#define PORT_BOUND    (-1) /* port_taken: this node bound the port after all */

/* The port could not be bound: taken by this job's coordinator (another
 * msrun on this host started it), which is fine, or by something else.
 * Until PORT_TAKEN_MS has passed, a holder that does not answer yet is
 * asked again and the port tried again: the other msrun's coordinator may
 * be slow to come up on a loaded host, and a holder that goes away (a
 * connection that happened to get this port as its own end) frees it. */
static int port_taken(agent_t *a, const char *target, const char *err, int generated)
{
    uint64_t deadline = msr_deadline_in_ms(PORT_TAKEN_MS);
    msr_status_t st = probe_coordinator(a, target, 1);
    char again[600];
    while (st != MSR_OK && st != MSR_ERR_PERMISSION && strstr(err, "in use") &&
           msr_deadline_left_ms(deadline) > 0) {
        msr_sleep_ms(100);
        if (start_coordinator(a, a->coord_bind) >= 0)
            return PORT_BOUND;
        snprintf(again, sizeof again, "%s", msr_err_msg());
        err = again;
        MSR_DEBUG("port %d still held and no coordinator answers yet: %s", a->coord_port, err);
        st = probe_coordinator(a, target, 1);
    }
    if (st == MSR_ERR_PERMISSION && generated && a->o->auth_munge) {
        /* another msrun of this host started it: get its token with munge */
        memset(a->token, 0, sizeof a->token);
        return fetch_token(a);
    }
    if (st == MSR_ERR_PERMISSION && generated) {
        fprintf(stderr,
                "msrun: error: port %d on %s is in use by a msrun coordinator and this node has "
                "no job token: if it is this job's, give this node the job's token "
                "(--token_file FILE or MSRUN_TOKEN)\n",
                a->coord_port, a->coord_ip);
        return 2;
    }
    if (st == MSR_ERR_PERMISSION) {
        fprintf(stderr,
                "msrun: error: port %d on %s is in use by another msrun job (its token "
                "differs)\n",
                a->coord_port, a->coord_ip);
        return 2;
    }
    if (st != MSR_OK) {
        if (strstr(err, "in use"))
            fprintf(stderr,
                    "msrun: error: port %d on %s is in use by another program (no msrun "
                    "coordinator answers there)\n",
                    a->coord_port, a->coord_ip);
        else
            fprintf(stderr, "msrun: error: cannot start the coordinator on %s: %s\n", target, err);
        return 2;
    }
    MSR_INFO("joining the coordinator another msrun started at %s", target);
    return 0;
}

/* A generated token goes where the other nodes' users can fetch it: a file
 * only this user can read, never a log line that others may read. */
static int share_token(agent_t *a)
{
    snprintf(a->token_file, sizeof a->token_file, "%s/token", a->job_dir);
    if (msr_token_write_file(a->token_file, a->token) != MSR_OK) {
        a->token_file[0] = '\0';
        fprintf(stderr, "msrun: error: %s\n", msr_err_msg());
        return 2;
    }
    MSR_WARN("no job token given: generated one in %s (readable only by you); start the other "
             "nodes with --token_file set to a copy of that file (mode 0600), or with "
             "MSRUN_TOKEN set to its content",
             a->token_file);
    return 0;
}

/* --rdzv_backend=etcd: the nodes elect the one that runs the coordinator;
 * it listens on this host's address toward etcd, on a free port. */
static int setup_etcd(agent_t *a)
{
    msr_options_t *o = a->o;
    snprintf(a->etcd_prefix, sizeof a->etcd_prefix, "/msrun/%s", a->job_id);
    uint64_t deadline = msr_deadline_in_ms(o->cluster_time_out_ms);
    /* the first endpoint's host says which of this host's addresses peers see */
    char first[300], ip[64];
    const char *ep = o->etcd_endpoints;
    if (strncmp(ep, "http://", 7) == 0)
        ep += 7;
    snprintf(first, sizeof first, "%.*s", (int)strcspn(ep, ","), ep);
    char *colon = strrchr(first, ':');
    int port = colon ? atoi(colon + 1) : 2379;
    if (colon)
        *colon = '\0';
    if (msr_net_resolve(first[0] == '[' ? first + 1 : first, ip, sizeof ip) != 0) {
        fprintf(stderr, "msrun: error: --rdzv_endpoint: %s\n", msr_err_msg());
        return 2;
    }
    if (msr_net_outward(ip, port, a->host, sizeof a->host) != 0)
        snprintf(a->host, sizeof a->host, "%s", ip);
    msr_status_t st =
        msr_elect_create(o->etcd_endpoints, a->etcd_prefix, o->etcd_lease, deadline, &a->elect);
    if (st == MSR_ERR_INVALID_ARG) {
        fprintf(stderr, "msrun: error: --rdzv_endpoint: %s\n", msr_err_msg());
        return 2;
    }
    if (st != MSR_OK) {
        fprintf(stderr, "msrun: error: %s (within --cluster_time_out %g s)\n", msr_err_msg(),
                (double)o->cluster_time_out_ms / 1000.0);
        return MSR_EXIT_NOT_FORMED;
    }
    int leader = 0;
    st = msr_elect_campaign(a->elect, deadline, &leader, a->coord_target, sizeof a->coord_target);
    if (st != MSR_OK) {
        fprintf(stderr, "msrun: error: no coordinator elected through etcd within %g s: %s\n",
                (double)o->cluster_time_out_ms / 1000.0, msr_err_msg());
        return MSR_EXIT_NOT_FORMED;
    }
    if (leader) {
        a->coord_lease = msr_elect_lease(a->elect);
        char bind[300];
        msr_net_join(a->host, 0, bind, sizeof bind);
        int cport = start_coordinator(a, bind);
        if (cport < 0) {
            fprintf(stderr, "msrun: error: cannot start the coordinator on %s: %s\n", bind,
                    msr_err_msg());
            return 2;
        }
        msr_net_join(a->host, cport, a->coord_bind, sizeof a->coord_bind);
        snprintf(a->coord_target, sizeof a->coord_target, "%s", a->coord_bind);
        if (msr_elect_publish_sync(a->elect, a->coord_bind, deadline) != MSR_OK) {
            fprintf(stderr, "msrun: error: cannot publish the coordinator's address in etcd: %s\n",
                    msr_err_msg());
            return MSR_EXIT_NOT_FORMED;
        }
        MSR_DEBUG("elected to run the coordinator: it listens on %s", a->coord_bind);
    } else {
        MSR_DEBUG("the coordinator elected through etcd is at %s", a->coord_target);
    }
    /* where peers reach this node: toward the coordinator */
    char cip[300];
    snprintf(cip, sizeof cip, "%s", a->coord_target);
    colon = strrchr(cip, ':');
    if (colon) {
        *colon = '\0';
        if (msr_net_outward(cip, atoi(colon + 1), a->host, sizeof a->host) != 0)
            snprintf(a->host, sizeof a->host, "%s", ip);
    }
    snprintf(a->coord_ip, sizeof a->coord_ip, "%.63s", cip);
    a->coord_port = colon ? atoi(colon + 1) : 0;
    return 0;
}

/* Decides where the coordinator is, starting it here when this node should. */
int setup_coordinator(agent_t *a)
{
    msr_options_t *o = a->o;
    if (o->etcd_endpoints)
        return setup_etcd(a);
    if (o->master_addr == NULL) {
        int rc = setup_standalone(a);
        if (rc == 0)
            msr_net_join(a->coord_ip, a->coord_port, a->coord_target, sizeof a->coord_target);
        return rc;
    }
    /* --coordinator_here (or node rank 0 under a scheduler): this node hosts
     * it on every address, whatever master_addr is (a Service's address is
     * never the pod's own), and reaches it over loopback */
    int forced = o->coordinator_here > 0;
    if (msr_net_resolve(o->master_addr, a->coord_ip, sizeof a->coord_ip) != 0) {
        if (!forced) {
            fprintf(stderr, "msrun: error: master_addr: %s\n", msr_err_msg());
            return 2;
        }
        MSR_DEBUG("master_addr %s does not resolve here (%s); this node hosts the coordinator",
                  o->master_addr, msr_err_msg());
        char name[256];
        if (gethostname(name, sizeof name) != 0 ||
            msr_net_resolve(name, a->coord_ip, sizeof a->coord_ip) != 0)
            snprintf(a->coord_ip, sizeof a->coord_ip, "127.0.0.1");
    }
    a->coord_port = o->master_port;
    if (msr_net_outward(a->coord_ip, a->coord_port, a->host, sizeof a->host) != 0)
        snprintf(a->host, sizeof a->host, "%s", a->coord_ip);
    int v6 = strchr(a->coord_ip, ':') != NULL;
    char target[300], bind[300];
    msr_net_join(forced ? (v6 ? "::1" : "127.0.0.1") : a->coord_ip, a->coord_port, target,
                 sizeof target);
    msr_net_join(v6 ? "::" : "0.0.0.0", a->coord_port, bind, sizeof bind);
    snprintf(a->coord_target, sizeof a->coord_target, "%s", target);
    int here = o->coordinator_here >= 0 ? o->coordinator_here
                                        : msr_net_is_local(a->coord_ip) && o->node_rank <= 0;
    int generated, rc = decide_token(a, here, &generated);
    if (rc != 0 || !here)
        return rc;
    if (!generated && probe_coordinator(a, target, 0) == MSR_OK) {
        /* another msrun on this host already started it */
        MSR_DEBUG("joining the coordinator already running at %s", target);
        return 0;
    }
    snprintf(a->coord_bind, sizeof a->coord_bind, "%s", forced ? bind : target);
    if (start_coordinator(a, a->coord_bind) < 0) {
        char err[600];
        snprintf(err, sizeof err, "%s", msr_err_msg());
        rc = port_taken(a, target, err, generated);
        if (rc != PORT_BOUND)
            return rc;
    }
    /* With --auth=munge the other nodes get the token from the coordinator. */
    if (generated && !o->auth_munge && (o->max_nodes > 1 || o->worker_num > o->local_worker_num))
        return share_token(a);
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

void stop_coordinator(agent_t *a)
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
