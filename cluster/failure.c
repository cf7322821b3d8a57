/* The root cause and the job's states (failure.h). */
#include "cluster/failure.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/util.h"
#include "rendezvous/rpc.h"

_Static_assert(MSR_JOB_WAITING == (int)MSR__JOB_STATE__JOB_WAITING &&
                   MSR_JOB_RUNNING == (int)MSR__JOB_STATE__JOB_RUNNING &&
                   MSR_JOB_RESTARTING == (int)MSR__JOB_STATE__JOB_RESTARTING &&
                   MSR_JOB_DONE == (int)MSR__JOB_STATE__JOB_DONE &&
                   MSR_JOB_FAILED == (int)MSR__JOB_STATE__JOB_FAILED,
               "msr_job_state_t is numbered as the wire's JobState");

void msr_failure_clear(msr_failure_t *f)
{
    for (size_t i = 0; i < f->ntail; i++)
        msr_free(f->tail[i]);
    memset(f, 0, sizeof *f);
}

void msr_failure_from_msg(msr_failure_t *f, const Msr__Failure *m)
{
    msr_failure_clear(f);
    f->set = 1;
    f->node_rank = m->node_rank;
    snprintf(f->host, sizeof f->host, "%s", m->host ? m->host : "");
    f->rank = m->rank;
    f->pid = m->pid;
    f->exit_code = m->exit_code;
    f->signal = m->signal;
    f->time = m->time;
    f->generation = m->generation;
    snprintf(f->reason, sizeof f->reason, "%s", m->reason ? m->reason : "");
    f->after_peer_lost = m->after_peer_lost;
    size_t n = m->n_stderr_tail < MSR_FAILURE_TAIL ? m->n_stderr_tail : MSR_FAILURE_TAIL;
    for (size_t i = 0; i < n; i++) {
        f->tail[f->ntail] = msr_strndup(m->stderr_tail[i], 4096);
        if (f->tail[f->ntail])
            f->ntail++;
    }
}

void msr_failure_to_msg(const msr_failure_t *f, Msr__Failure *m)
{
    msr__failure__init(m);
    m->node_rank = f->node_rank;
    m->host = (char *)f->host;
    m->rank = f->rank;
    m->pid = f->pid;
    m->exit_code = f->exit_code;
    m->signal = f->signal;
    m->time = f->time;
    m->n_stderr_tail = f->ntail;
    m->stderr_tail = (char **)f->tail;
    m->generation = f->generation;
    m->reason = (char *)f->reason;
    m->after_peer_lost = f->after_peer_lost;
}

void msr_failure_describe(const msr_failure_t *f, char *out, size_t len)
{
    char sig[32];
    if (f->rank >= 0 && strncmp(f->reason, "hung", 4) == 0)
        snprintf(out, len, "rank %d on node %d (%s, pid %d) %s and was killed", f->rank,
                 f->node_rank, f->host, f->pid, f->reason);
    else if (f->rank < 0)
        snprintf(out, len, "node %d (%s, pid %d) %s", f->node_rank, f->host, f->pid, f->reason);
    else if (f->signal > 0)
        snprintf(out, len, "rank %d on node %d (%s, pid %d) was killed by %s", f->rank,
                 f->node_rank, f->host, f->pid, msr_signal_name(f->signal, sig, sizeof sig));
    else
        snprintf(out, len, "rank %d on node %d (%s, pid %d) %s with code %d%s", f->rank,
                 f->node_rank, f->host, f->pid, f->reason[0] ? f->reason : "exited", f->exit_code,
                 f->after_peer_lost ? " after losing a communication peer" : "");
}

int msr_failure_exit_code(const msr_failure_t *f)
{
    if (!f->set)
        return 1;
    if (f->signal > 0)
        return 128 + f->signal;
    return f->exit_code > 0 && f->exit_code < 256 ? f->exit_code : 1;
}

const char *msr_job_state_name(int s)
{
    switch (s) {
    case MSR_JOB_WAITING:
        return "waiting";
    case MSR_JOB_RUNNING:
        return "running";
    case MSR_JOB_RESTARTING:
        return "restarting";
    case MSR_JOB_DONE:
        return "done";
    case MSR_JOB_FAILED:
        return "failed";
    default:
        return "unknown";
    }
}
