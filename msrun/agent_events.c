/* The agent's handlers of what happens outside the node's machine: the
 * election through etcd (the coordinator moved, won or lost), signals,
 * child exits (the coordinator's child and the workers) and stdin closed.
 * Each feeds the machine and runs it (msr_agent_run_node). Event-loop
 * thread only. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/time.h"
#include "base/util.h"
#include "launcher/agent_impl.h"

/* ---- the election through etcd ---- */

/* The coordinator is now at target (elected through etcd): the link and
 * the proxy follow. */
void msr_agent_on_coord_moved(void *arg, const char *target)
{
    agent_t *a = arg;
    if (strcmp(target, a->coord.target) == 0)
        return;
    if (msr_link_retarget(a->link, target) != MSR_OK ||
        (a->proxy && msr_proxy_retarget(a->proxy, target) != MSR_OK)) {
        MSR_ERROR("cannot reach the new coordinator at %s: %s", target, msr_err_msg());
        return;
    }
    MSR_WARN("the coordinator is now at %s", target);
    snprintf(a->coord.target, sizeof a->coord.target, "%s", target);
    msr_node_on_coord_moved(&a->node, msr_now_ns());
    msr_agent_run_node(a);
}

void msr_agent_on_elect(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    agent_t *a = arg;
    msr_elect_event_t ev;
    while (msr_elect_next(a->coord.elect, &ev) != MSR_ELECT_NONE) {
        switch (ev.kind) {
        case MSR_ELECT_WON:
            if (!a->node.finished)
                msr_coord_child_takeover(&a->coord);
            break;
        case MSR_ELECT_LEADER:
            msr_agent_on_coord_moved(a, ev.addr);
            break;
        case MSR_ELECT_LOST:
            MSR_WARN("this node's etcd lease expired: its coordinator stops, another is elected");
            msr_coord_child_kill(&a->coord);
            break;
        case MSR_ELECT_NONE:
            break;
        }
    }
}

/* ---- signals and child exits ---- */

static void on_child(agent_t *a, pid_t pid, int status)
{
    if (pid == a->coord.pid) {
        a->coord.pid = 0;
        char how[64];
        if (WIFSIGNALED(status))
            msr_signal_name(WTERMSIG(status), how, sizeof how);
        else
            snprintf(how, sizeof how, "code %d", WEXITSTATUS(status));
        int job_over = WIFEXITED(status) && WEXITSTATUS(status) <= 1;
        if (msr_coord_child_exited(&a->coord, how))
            msr_node_on_coord_exit(&a->node, msr_now_ns(), how, job_over);
        return;
    }
    for (int i = 0; i < a->local.count; i++) {
        msr_worker_t *w = &a->local.workers[i];
        if (!w->running || w->pid != pid)
            continue;
        w->running = 0;
        w->status = status;
        w->exit_time = msr_wall_time();
        if (a->prof.on) { /* the exit's end, and the workers' while they last */
            uint64_t now = msr_now_ns();
            a->prof.workers[i].end[MSR_LPROF_EXIT] = now;
            a->prof.self.start[MSR_LPROF_WAIT] = a->prof.workers[0].start[MSR_LPROF_FORK];
            a->prof.self.end[MSR_LPROF_WAIT] = now;
        }
        msr_worker_drain(w);
        msr_node_on_worker_exit(&a->node, i, WIFSIGNALED(status) ? -1 : WEXITSTATUS(status),
                                WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        return;
    }
}

void msr_agent_reap(agent_t *a)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        on_child(a, pid, status);
        msr_agent_run_node(a);
    }
}

void msr_agent_on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    agent_t *a = arg;
    if (sig == SIGCHLD)
        msr_agent_reap(a);
    else
        msr_node_on_signal(&a->node, msr_now_ns(), (int)sig);
    msr_agent_run_node(a);
}

/* --exit_on_stdin_eof: stdin closed (the launcher's ssh ended) stops the
 * job as SIGTERM does; anything read is dropped. */
void msr_agent_on_stdin(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    agent_t *a = arg;
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN)))
        return;
    event_del(a->loop.stdin_ev);
    MSR_INFO("standard input closed: stopping the job");
    msr_node_on_signal(&a->node, msr_now_ns(), SIGTERM);
    msr_agent_run_node(a);
}
