/* The launcher of --hostfile/--host: one msrun per host over ssh, their
 * output passed through a line at a time, Ctrl-C forwarded by closing
 * their standard input, and every host stopped when one fails. */
#include "launcher/remote.h"
#include "launcher/remote_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "launcher/options_impl.h"
#include "launcher/relays.h"
#include "launcher/spawn.h"
#include "launcher/token.h"

/* A remote msrun's stream is passed on in whole lines; a longer line is
 * passed on in pieces of this size. */
#define REMOTE_LINE_MAX      65536
/* After the hosts were told to stop (stdin closed), how long past
 * --grace_period their msruns have before ssh gets SIGTERM, then SIGKILL. */
#define REMOTE_STOP_SLACK_MS 10000
#define REMOTE_KILL_AFTER_MS 2000
/* Once every ssh has exited, how long their streams may stay open (a
 * process that kept them) before they are closed. */
#define REMOTE_DRAIN_MS      2000

/* The signal pipe: the only state a signal handler touches. */
static int sig_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t n = write(sig_pipe[1], &b, 1);
    (void)n; /* a full pipe already holds a wake-up */
    errno = saved;
}

/* ---- starting ---- */

/* Starts host i's ssh: its stdin a pipe that carries the token, its
 * stdout and stderr pipes read here. ssh_path: --ssh's program, found. */
static int start_one(remote_launch_t *l, int i, const char *ssh_path, char *const *envp)
{
    remote_proc_t *p = &l->procs[i];
    char **argv = NULL, *words = NULL;
    msr_buf_t cmd = {0};
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    int rc = -1;
    if (msr_remote_ssh_argv(l, i, &argv, &words, &cmd) != MSR_OK) {
        fprintf(stderr, "msrun: error: host %s: %s\n", p->host->name, msr_err_msg());
        return -1;
    }
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        fprintf(stderr, "msrun: error: host %s: pipe: %s\n", p->host->name, strerror(errno));
        goto out_pipes;
    }
    msr_spawn_options_t so = {
        .path = ssh_path,
        .argv = argv,
        .envp = envp,
        .stdio = {{MSR_SPAWN_FD, in[0]}, {MSR_SPAWN_FD, out[1]}, {MSR_SPAWN_FD, err[1]}},
        .extra_fd = -1,
        .new_group = 1, /* a terminal's Ctrl-C reaches the launcher only */
    };
    if (msr_spawn(&so, &p->pid) != MSR_OK) {
        fprintf(stderr, "msrun: error: host %s: %s\n", p->host->name, msr_err_msg());
        goto out_pipes;
    }
    l->running++;
    /* the token and its newline fit in the empty pipe: never blocks */
    size_t tn = strlen(l->token);
    l->token[tn] = '\n';
    msr_status_t st = msr_write_all(in[1], l->token, tn + 1);
    l->token[tn] = '\0';
    if (st != MSR_OK)
        fprintf(stderr, "msrun: error: host %s: cannot pass the token to ssh: %s\n", p->host->name,
                strerror(errno));
    p->in_fd = in[1];
    in[1] = -1;
    p->out = (remote_stream_t){out[0], 1, {0}};
    p->err = (remote_stream_t){err[0], 2, {0}};
    out[0] = err[0] = -1;
    msr_fd_set_nonblock(p->in_fd, 1);
    msr_fd_set_nonblock(p->out.fd, 1);
    msr_fd_set_nonblock(p->err.fd, 1);
    rc = st == MSR_OK ? 0 : -1;
out_pipes:
    for (int k = 0; k < 2; k++) {
        if (in[k] >= 0)
            close(in[k]);
        if (out[k] >= 0)
            close(out[k]);
        if (err[k] >= 0)
            close(err[k]);
    }
    msr_buf_cleanup(&cmd);
    msr_free(argv);
    msr_free(words);
    return rc;
}

/* --dry_run: what would run where, without the token; nothing starts. */
static int print_plan(remote_launch_t *l)
{
    int rank = 0, node = 0, unused = 0;
    const char *first_unused = NULL;
    for (int i = 0; i < l->hosts.count; i++) {
        const msr_remote_host_t *h = &l->hosts.v[i];
        if (h->workers == 0) {
            first_unused = unused++ ? first_unused : h->name;
            continue;
        }
        printf("host %s: node %d, %d worker%s (ranks %d..%d)\n", h->name, node++, h->workers,
               h->workers == 1 ? "" : "s", rank, rank + h->workers - 1);
        rank += h->workers;
    }
    if (unused)
        printf("%d host%s without workers, not started (the first: %s)\n", unused,
               unused == 1 ? "" : "s", first_unused);
    if (l->relays_k == 0)
        printf("relays: off (%s)\n", l->relays_why);
    for (int g = 0; l->relays_k && g * l->relays_k < l->nprocs; g++) {
        int first = g * l->relays_k, n = l->nprocs - first;
        n = n < l->relays_k ? n : l->relays_k;
        printf("relay-%d: served by node %d for nodes %d to %d on %s:%ld\n", g, first, first,
               first + n - 1, msr_remote_host_addr(l, first), msr_relays_port(l->o, g));
    }
    for (int i = 0; i < l->nprocs; i++) {
        char **argv = NULL, *words = NULL;
        msr_buf_t cmd = {0};
        if (msr_remote_ssh_argv(l, i, &argv, &words, &cmd) != MSR_OK) {
            fprintf(stderr, "msrun: error: %s\n", msr_err_msg());
            return 1;
        }
        printf("node %d:", l->procs[i].node);
        for (int k = 0; argv[k]; k++)
            printf(" %s", argv[k]);
        printf("\n");
        msr_buf_cleanup(&cmd);
        msr_free(argv);
        msr_free(words);
    }
    return 0;
}

/* ---- running ---- */

/* Passes whole lines of s on; at_eof: the rest too, ended by a newline. */
static void pass_lines(remote_stream_t *s, int at_eof)
{
    msr_buf_t *b = &s->line;
    size_t done = 0;
    for (;;) {
        char *nl = b->len > done ? memchr(b->data + done, '\n', b->len - done) : NULL;
        size_t n = nl ? (size_t)(nl - (b->data + done)) + 1 : 0;
        if (nl == NULL && b->len - done >= REMOTE_LINE_MAX)
            n = b->len - done;
        if (n == 0)
            break;
        (void)msr_write_all(s->to, b->data + done, n); /* a closed terminal: dropped */
        done += n;
    }
    if (at_eof && b->len > done) {
        b->data[b->len] = '\n'; /* the buffer keeps room for its NUL */
        (void)msr_write_all(s->to, b->data + done, b->len - done + 1);
        done = b->len;
    }
    msr_buf_consume(b, done);
}

static void stream_close(remote_stream_t *s)
{
    if (s->fd < 0)
        return;
    pass_lines(s, 1);
    close(s->fd);
    s->fd = -1;
    msr_buf_cleanup(&s->line);
}

static void stream_read(remote_stream_t *s)
{
    for (;;) {
        if (msr_buf_reserve(&s->line, 16384) != MSR_OK) {
            stream_close(s); /* out of memory: what is there is passed on */
            return;
        }
        ssize_t n = read(s->fd, s->line.data + s->line.len, 16384);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            stream_close(s);
            return;
        }
        s->line.len += (size_t)n;
        s->line.data[s->line.len] = '\0';
        pass_lines(s, 0);
    }
}

/* Tells every host to stop: their msruns see their stdin close. */
static void stop_all(remote_launch_t *l)
{
    if (l->stopping)
        return;
    l->stopping = 1;
    l->stop_ns = msr_now_ns();
    for (int i = 0; i < l->nprocs; i++)
        if (l->procs[i].in_fd >= 0) {
            close(l->procs[i].in_fd);
            l->procs[i].in_fd = -1;
        }
}

static void signal_ssh(remote_launch_t *l, int sig)
{
    for (int i = 0; i < l->nprocs; i++)
        if (l->procs[i].pid > 0)
            kill(-l->procs[i].pid, sig);
}

/* How a host's ssh ended, for messages, and its exit status. */
static int describe_exit(int status, char *how, size_t len)
{
    if (WIFSIGNALED(status)) {
        char name[32];
        snprintf(how, len, "ssh was killed by %s",
                 msr_signal_name(WTERMSIG(status), name, sizeof name));
        return 128 + WTERMSIG(status);
    }
    int code = WEXITSTATUS(status);
    if (code == 255)
        snprintf(how, len, "ssh failed or lost the connection (exit 255; ssh's message above)");
    else
        snprintf(how, len, "its msrun exited with status %d", code);
    return code;
}

static void on_exit_of(remote_launch_t *l, remote_proc_t *p)
{
    l->running--;
    if (p->in_fd >= 0) {
        close(p->in_fd);
        p->in_fd = -1;
    }
    if (WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0)
        return;
    if (l->failed || l->sig)
        return; /* stopped by the launcher, or after the first failure */
    char how[128];
    l->fail_code = describe_exit(p->status, how, sizeof how);
    l->failed = (int)(p - l->procs) + 1;
    fprintf(stderr, "msrun: error: host %s (node %d): %s; stopping the other hosts\n",
            p->host->name, p->node, how);
    stop_all(l);
}

static void reap(remote_launch_t *l)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        for (int i = 0; i < l->nprocs; i++)
            if (l->procs[i].pid == pid) {
                l->procs[i].pid = 0;
                l->procs[i].status = status;
                on_exit_of(l, &l->procs[i]);
            }
}

static void on_sig(remote_launch_t *l, int sig)
{
    if (sig == SIGCHLD) {
        reap(l);
        return;
    }
    char name[32];
    msr_signal_name(sig, name, sizeof name);
    if (l->interrupts++ > 0) { /* again: no more waiting */
        fprintf(stderr, "msrun: %s again: killing ssh to every host\n", name);
        signal_ssh(l, SIGKILL);
        l->term_sent = l->kill_sent = 1;
        stop_all(l);
        return;
    }
    if (!l->failed)
        l->sig = sig;
    fprintf(stderr, "msrun: %s: stopping the job on every host\n", name);
    stop_all(l);
}

/* The deadlines once stopping: SIGTERM to ssh, then SIGKILL. Returns the
 * poll timeout in ms (-1: none). */
static int stop_deadlines(remote_launch_t *l)
{
    if (!l->stopping || l->kill_sent)
        return -1;
    int64_t term_ms = l->o->grace_ms + REMOTE_STOP_SLACK_MS;
    int64_t kill_ms = term_ms + REMOTE_KILL_AFTER_MS;
    int64_t el = (int64_t)((msr_now_ns() - l->stop_ns) / 1000000);
    if (!l->term_sent && el >= term_ms) {
        fprintf(stderr, "msrun: the hosts did not stop within %lld ms: SIGTERM to their ssh\n",
                (long long)term_ms);
        signal_ssh(l, SIGTERM);
        l->term_sent = 1;
    }
    if (l->term_sent && el >= kill_ms) {
        signal_ssh(l, SIGKILL);
        l->kill_sent = 1;
        return -1;
    }
    int64_t next = (l->term_sent ? kill_ms : term_ms) - el;
    return next > INT_MAX ? INT_MAX : (int)(next < 1 ? 1 : next);
}

/* Puts the open streams in pfd/who (room for 2 per host); once every
 * ssh has exited for REMOTE_DRAIN_MS, closes those still open instead. */
static int streams_to_poll(remote_launch_t *l, uint64_t all_exited_ns, struct pollfd *pfd,
                           remote_stream_t **who)
{
    int n = 0;
    int drained = all_exited_ns && msr_now_ns() - all_exited_ns >= REMOTE_DRAIN_MS * 1000000ull;
    for (int i = 0; i < l->nprocs; i++) {
        remote_stream_t *s[2] = {&l->procs[i].out, &l->procs[i].err};
        for (int k = 0; k < 2; k++) {
            if (s[k]->fd >= 0 && drained)
                stream_close(s[k]); /* held open by a process ssh left behind */
            if (s[k]->fd < 0)
                continue;
            who[n] = s[k];
            pfd[n++] = (struct pollfd){s[k]->fd, POLLIN, 0};
        }
    }
    return n;
}

/* Runs until every ssh has exited and its streams are drained. pfd and
 * who have room for 2 per host and one more. */
static void loop(remote_launch_t *l, struct pollfd *pfd, remote_stream_t **who)
{
    uint64_t all_exited_ns = 0;
    for (;;) {
        if (l->running == 0 && all_exited_ns == 0)
            all_exited_ns = msr_now_ns();
        int timeout = stop_deadlines(l);
        int n = streams_to_poll(l, all_exited_ns, pfd, who);
        if (l->running == 0 && n == 0)
            break;
        if (all_exited_ns && (timeout < 0 || timeout > REMOTE_DRAIN_MS))
            timeout = REMOTE_DRAIN_MS;
        pfd[n] = (struct pollfd){sig_pipe[0], POLLIN, 0};
        int r = poll(pfd, (nfds_t)n + 1, timeout);
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "msrun: error: poll: %s\n", strerror(errno));
            break;
        }
        for (int k = 0; r > 0 && k < n; k++)
            if (pfd[k].revents)
                stream_read(who[k]);
        unsigned char sig[64];
        ssize_t got;
        while ((got = read(sig_pipe[0], sig, sizeof sig)) > 0)
            for (ssize_t k = 0; k < got; k++)
                on_sig(l, sig[k]);
    }
}

/* Installs the signal handlers (the signal pipe first). */
static int watch_signals(void)
{
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "msrun: error: pipe: %s\n", strerror(errno));
        return -1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < MSR_ARRAY_SIZE(sigs); i++)
        sigaction(sigs[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* Who the job is and where it runs; prints what is wrong (exit 2). */
static int prepare(remote_launch_t *l, int argc, char **argv)
{
    const msr_options_t *o = l->o;
    msr_status_t st = o->hostfile ? msr_remote_hosts_parse_file(o->hostfile, &l->hosts)
                                  : msr_remote_hosts_parse_list(o->hosts, &l->hosts);
    if (st == MSR_OK)
        st = msr_remote_hosts_assign(&l->hosts, o->given_worker_num ? o->worker_num : 0);
    if (st != MSR_OK) {
        fprintf(stderr, "msrun: error: %s\n", msr_err_msg());
        return 2;
    }
    if (msr_remote_split_args(l, argc, argv) != 0 ||
        (o->forward_env && msr_remote_check_forward_env(o->forward_env) != 0))
        return 2;
    l->procs = msr_calloc((size_t)l->hosts.count, sizeof *l->procs);
    if (l->procs == NULL) {
        fprintf(stderr, "msrun: error: out of memory\n");
        return 2;
    }
    for (int i = 0; i < l->hosts.count; i++)
        if (l->hosts.v[i].workers > 0) {
            remote_proc_t *p = &l->procs[l->nprocs];
            *p = (remote_proc_t){.host = &l->hosts.v[i], .node = l->nprocs, .in_fd = -1};
            p->out.fd = p->err.fd = -1;
            l->nprocs++;
            l->world += l->hosts.v[i].workers;
        }
    if (msr_remote_relays(l) != 0)
        return 2;
    ssize_t n = readlink("/proc/self/exe", l->self, sizeof l->self - 1);
    if (n <= 0 || getcwd(l->cwd, sizeof l->cwd) == NULL) {
        fprintf(stderr, "msrun: error: cannot find this msrun or the working directory: %s\n",
                strerror(errno));
        return 2;
    }
    l->self[n] = '\0';
    unsigned char rnd[4];
    msr_random_bytes(rnd, sizeof rnd);
    if (o->job_id)
        snprintf(l->job_id, sizeof l->job_id, "%s", o->job_id);
    else
        snprintf(l->job_id, sizeof l->job_id, "job-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
                 rnd[3]);
    if (o->token)
        snprintf(l->token, sizeof l->token, "%s", o->token);
    else if (msr_token_generate(l->token, sizeof l->token) != MSR_OK) {
        fprintf(stderr, "msrun: error: cannot generate a job token: %s\n", msr_err_msg());
        return 2;
    }
    return 0;
}

/* Starts ssh to every host; stops those started when one cannot start. */
static int start_all(remote_launch_t *l)
{
    const char *ssh = l->o->ssh ? l->o->ssh : "ssh";
    char prog[PATH_MAX];
    snprintf(prog, sizeof prog, "%.*s", (int)strcspn(ssh + strspn(ssh, " \t"), " \t"),
             ssh + strspn(ssh, " \t"));
    char *path = NULL;
    if (prog[0] == '\0') {
        msr_options_error("--ssh: no command given");
        return 2;
    }
    if (msr_options_find_program(prog, "--ssh's program", NULL, &path) != 0)
        return 2;
    /* ssh is never given the token in its environment */
    static const char *const drop[] = {"MSRUN_TOKEN", "MSR_TOKEN", NULL};
    char **envp = msr_spawn_env(NULL, drop, NULL);
    int rc = 0;
    if (envp == NULL) {
        fprintf(stderr, "msrun: error: out of memory\n");
        rc = 2;
    }
    fprintf(stderr, "msrun: job %s: %d worker%s on %d host%s over ssh, coordinator on %s:%d\n",
            l->job_id, l->world, l->world == 1 ? "" : "s", l->nprocs, l->nprocs == 1 ? "" : "s",
            l->procs[0].host->name, l->o->master_port);
    for (int i = 0; rc == 0 && i < l->nprocs; i++)
        if (start_one(l, i, path, envp) != 0) {
            l->failed = i + 1;
            l->fail_code = rc = 1;
            stop_all(l);
        }
    msr_spawn_env_free(envp);
    msr_free(path);
    return rc;
}

/* Room for 3 pipes a host: the soft limit of open files raised as far as
 * needed (and allowed). */
static int enough_files(const remote_launch_t *l)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)l->nprocs * 3 + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        fprintf(stderr,
                "msrun: error: %d hosts need %llu open files here, more than the limit of %llu "
                "(ulimit -Hn)\n",
                l->nprocs, (unsigned long long)need, (unsigned long long)rl.rlim_max);
        return -1;
    }
    rl.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        fprintf(stderr, "msrun: error: cannot raise the limit of open files to %llu: %s\n",
                (unsigned long long)need, strerror(errno));
        return -1;
    }
    return 0;
}

/* Starts the job and runs it to its end; returns the exit status. */
static int run_job(remote_launch_t *l)
{
    size_t cap = (size_t)l->nprocs * 2 + 1;
    struct pollfd *pfd = msr_calloc(cap, sizeof *pfd);
    remote_stream_t **who = msr_calloc(cap, sizeof *who);
    int rc = 2;
    if (pfd == NULL || who == NULL) {
        fprintf(stderr, "msrun: error: out of memory\n");
        goto out;
    }
    if (enough_files(l) != 0 || watch_signals() != 0 || start_all(l) == 2)
        goto out;
    loop(l, pfd, who);
    rc = l->failed ? l->fail_code : l->sig ? 128 + l->sig : 0;
    if (l->sig)
        fprintf(stderr, "msrun: the job was stopped on every host\n");
out:
    msr_free(pfd);
    msr_free(who);
    return rc;
}

int msr_remote_run(const msr_options_t *o, int argc, char **argv)
{
    remote_launch_t l;
    memset(&l, 0, sizeof l);
    l.o = o;
    int rc = prepare(&l, argc, argv);
    if (rc == 0)
        rc = o->dry_run ? print_plan(&l) : run_job(&l);
    for (int i = 0; i < l.nprocs; i++) {
        stream_close(&l.procs[i].out);
        stream_close(&l.procs[i].err);
    }
    memset(l.token, 0, sizeof l.token);
    msr_remote_hosts_free(&l.hosts);
    msr_free(l.procs);
    msr_free(l.fwd);
    return rc;
}
