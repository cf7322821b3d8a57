/* The node's state machine, its end (node.h): signals from the user, the
 * embedded coordinator's exit, finishing with the job's code, and the
 * outcome printed at the end. Split from node.c, whose private helpers it
 * shares through node_impl.h. */
#include "launcher/node.h"
#include "launcher/node_impl.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"

void msr_node_on_signal(msr_node_t *n, uint64_t now, int sig)
{
    char name[32];
    msr_signal_name(sig, name, sizeof name);
    if (n->finished)
        return;
    if (sig == SIGUSR1 || sig == SIGUSR2) {
        MSR_INFO("forwarding %s to the workers", name);
        if (n->nrunning > 0)
            msr_node_signal_workers(n, -1, sig);
        return;
    }
    /* SIGINT, SIGTERM, SIGHUP */
    if (n->interrupted > 0) {
        MSR_WARN("%s again: killing the workers now", name);
        if (n->nrunning > 0)
            msr_node_signal_workers(n, -1, SIGKILL);
        return;
    }
    n->interrupted = sig;
    /* "node ?" before the coordinator gave this node its rank */
    char rank[16] = "?";
    if (n->node_rank >= 0)
        snprintf(rank, sizeof rank, "%d", n->node_rank);
    snprintf(n->message, sizeof n->message, "msrun on node %s was interrupted by %s", rank, name);
    if (n->nrunning > 0) {
        MSR_WARN("interrupted by %s: stopping the workers (SIGKILL after %.1f s)", name,
                 (double)n->cfg.grace_ms / 1000.0);
        msr_node_stop_workers(n, now, sig == SIGHUP ? SIGTERM : sig);
    } else {
        msr_node_finish(n, 128 + sig, NULL);
    }
}

void msr_node_on_coord_exit(msr_node_t *n, uint64_t now, const char *how, int job_over)
{
    if (n->finished)
        return;
    if (job_over && !n->joined) {
        /* it ended the job (its message said why) before this node was in:
         * a restarted one would only read the same end from its state */
        snprintf(n->error, sizeof n->error,
                 "the embedded coordinator ended the job before this node joined (%s)", how);
        msr_node_finish(n, MSR_EXIT_NOT_FORMED, n->error);
        return;
    }
    if (job_over && n->coord_ended) {
        /* It exits by itself only once no node is left in the job: this
         * node was declared lost (its heartbeats unheard for the node
         * timeout: msrun stopped, or its machine too loaded), and a
         * restarted one read the same end from its state without answering
         * this node once. Restarting it again would only repeat that until
         * the coordinator timeout, which would then hide the cause. */
        snprintf(n->message, sizeof n->message,
                 "the coordinator declared this node lost (no heartbeat heard within "
                 "--node_timeout) and the job ended without it (the embedded coordinator "
                 "exited with %s, again after a restart)",
                 how);
        msr_node_give_up(n, now);
        return;
    }
    /* The workers keep running: a coordinator restarted on the same port
     * and state file resumes the job. One that ended the job with this node
     * still in was perhaps stopped by a signal (it exits 1 then too): it is
     * restarted once. */
    n->coord_ended = job_over;
    snprintf(msr_node_push(n, MSR_NODE_ACT_COORD_RESTART)->text, sizeof n->acts[0].text, "%s", how);
}

/* The end: leave (once joined; after the loop, with the workers gone), stop
 * the embedded coordinator, exit. error, if any, is for stderr. */
void msr_node_finish(msr_node_t *n, int code, const char *error)
{
    if (n->finished)
        return;
    n->finished = 1;
    n->exit_code = code;
    n->retry_at = n->kill_at = n->stuck_at = n->hang_at = 0;
    if (n->joined) {
        if (n->interrupted != 0)
            snprintf(n->leave_reason, sizeof n->leave_reason, "%s", n->message);
        else
            snprintf(n->leave_reason, sizeof n->leave_reason, "finished (exit status %d)", code);
        msr_node_push(n, MSR_NODE_ACT_LEAVE)->long_text = n->leave_reason;
    }
    msr_node_push(n, MSR_NODE_ACT_COORD_STOP);
    msr_node_action_t *a = msr_node_push(n, MSR_NODE_ACT_EXIT);
    a->code = code;
    a->long_text = error;
}

void msr_node_print_outcome(const msr_node_t *n)
{
    if (n->state == MSR_JOB_FAILED && n->interrupted == 0 && n->exit_code != 0) {
        char what[700];
        const msr_failure_t *c = &n->cause;
        if (c->set) {
            msr_failure_describe(c, what, sizeof what);
            MSR_ERROR("job failed (generation %d): %s", c->generation, what);
            if (n->max_restarts > 0)
                MSR_ERROR("restarts used: %d of %d", n->restart_count, n->max_restarts);
            if (c->ntail > 0) {
                MSR_ERROR("last lines rank %d wrote to stderr:", c->rank);
                for (size_t i = 0; i < c->ntail; i++)
                    MSR_ERROR("  | %s", c->tail[i]);
            }
        } else {
            MSR_ERROR("job failed: %s", n->message);
        }
    } else if (n->interrupted != 0 && n->exit_code != 0) {
        MSR_ERROR("%s", n->message[0] ? n->message : "stopped");
    }
}
