/* msrun --profile_launch: the launch timeline of this node, this msrun's
 * phases and its workers', printed on stderr when the job ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/time.h"
#include "launcher/agent_impl.h"

/* Workers listed one by one up to this many; past it, min/median/max. */
#define PROF_LIST_MAX 4

int msr_agent_prof_start(agent_t *a)
{
    if (!a->o->profile_launch) {
        unsetenv(MSR_LPROF_ENV); /* a worker records only when asked by this msrun */
        return 0;
    }
    /* one more: a node may run no worker (its coordinator only) */
    a->prof.workers = msr_calloc((size_t)a->local.count + 1, sizeof *a->prof.workers);
    snprintf(a->prof.prefix, sizeof a->prof.prefix, "%s/profile", a->job.dir);
    if (a->prof.workers == NULL || setenv(MSR_LPROF_ENV, a->prof.prefix, 1) != 0) {
        fprintf(stderr, "msrun: error: --profile_launch: out of memory\n");
        return 1;
    }
    a->prof.on = 1;
    return 0;
}

void msr_agent_prof_mark(agent_t *a, msr_lprof_phase_t ph, uint64_t start_ns)
{
    if (a->prof.on)
        msr_lprof_mark(&a->prof.self, ph, start_ns, msr_now_ns());
}

void msr_agent_prof_cleanup(agent_t *a)
{
    msr_free(a->prof.workers);
    a->prof.workers = NULL;
    a->prof.on = 0;
}

static double ms_since(uint64_t t0, uint64_t t)
{
    return t > t0 ? (double)(t - t0) / 1e6 : 0.0;
}

static void row(const char *phase, const char *who, double start, double dur)
{
    fprintf(stderr, "  %-14s %-10s %10.3f %10.3f\n", phase, who, start, dur);
}

/* A worker's timeline: its file's phases, with what only the agent saw
 * (fork, exec up to msr_init, exit up to the reaping). */
static void worker_merge(agent_t *a, int i, msr_lprof_t *w)
{
    int rank = a->node.rank_offset + i;
    const msr_lprof_t *seen = &a->prof.workers[i];
    msr_status_t st = msr_lprof_load(a->prof.prefix, rank, w);
    if (st != MSR_OK && st != MSR_ERR_NOT_FOUND)
        MSR_WARN("%s", msr_err_msg());
    w->start[MSR_LPROF_FORK] = seen->start[MSR_LPROF_FORK];
    w->end[MSR_LPROF_FORK] = seen->end[MSR_LPROF_FORK];
    uint64_t forked = seen->end[MSR_LPROF_FORK];
    if (w->end[MSR_LPROF_STORE] && forked) { /* a libmsrun program */
        w->start[MSR_LPROF_EXEC] = forked;
        w->end[MSR_LPROF_EXEC] = w->start[MSR_LPROF_STORE];
    }
    uint64_t last = forked;
    for (int ph = MSR_LPROF_EXEC; ph < MSR_LPROF_EXIT; ph++)
        if (w->end[ph] > last)
            last = w->end[ph];
    if (seen->end[MSR_LPROF_EXIT] && last) {
        w->start[MSR_LPROF_EXIT] = last;
        w->end[MSR_LPROF_EXIT] = seen->end[MSR_LPROF_EXIT];
    }
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Past PROF_LIST_MAX workers: one row per phase, min/median/max. */
static void rows_summary(agent_t *a, const msr_lprof_t *ws, int n, double *s, double *d)
{
    uint64_t t0 = a->o->start_ns;
    for (int ph = 0; ph < MSR_LPROF_COUNT; ph++) {
        if (!msr_lprof_is_worker((msr_lprof_phase_t)ph))
            continue;
        int k = 0;
        for (int i = 0; i < n; i++)
            if (ws[i].end[ph]) {
                s[k] = ms_since(t0, ws[i].start[ph]);
                d[k++] = ms_since(ws[i].start[ph], ws[i].end[ph]);
            }
        if (k == 0)
            continue;
        qsort(s, (size_t)k, sizeof *s, cmp_double);
        qsort(d, (size_t)k, sizeof *d, cmp_double);
        fprintf(stderr, "  %-14s %3d ranks  start %.3f/%.3f/%.3f  duration %.3f/%.3f/%.3f\n",
                msr_lprof_name((msr_lprof_phase_t)ph), k, s[0], s[k / 2], s[k - 1], d[0], d[k / 2],
                d[k - 1]);
    }
}

void msr_agent_prof_print(agent_t *a)
{
    if (!a->prof.on)
        return;
    uint64_t t0 = a->o->start_ns, now = msr_now_ns();
    int n = a->local.count;
    msr_lprof_t *ws = msr_calloc((size_t)n + 1, sizeof *ws);
    double *s = msr_calloc((size_t)n + 1, sizeof *s), *d = msr_calloc((size_t)n + 1, sizeof *d);
    if (ws == NULL || s == NULL || d == NULL) {
        fprintf(stderr, "msrun: --profile_launch: out of memory for the table\n");
        goto out;
    }
    fprintf(stderr, "msrun: launch timeline, ms from msrun's start, node %d, %d worker%s\n",
            a->node.node_rank, n, n == 1 ? "" : "s");
    fprintf(stderr, "  %-14s %-10s %10s %10s\n", "phase", "process", "start", "duration");
    const msr_lprof_t *me = &a->prof.self;
    for (int ph = 0; ph < MSR_LPROF_COUNT; ph++)
        if (!msr_lprof_is_worker((msr_lprof_phase_t)ph) && me->end[ph])
            row(msr_lprof_name((msr_lprof_phase_t)ph), "msrun", ms_since(t0, me->start[ph]),
                ms_since(me->start[ph], me->end[ph]));
    for (int i = 0; i < n; i++)
        worker_merge(a, i, &ws[i]);
    if (n > PROF_LIST_MAX) {
        rows_summary(a, ws, n, s, d);
    } else {
        for (int i = 0; i < n; i++) {
            char who[32];
            snprintf(who, sizeof who, "rank %d", a->node.rank_offset + i);
            for (int ph = 0; ph < MSR_LPROF_COUNT; ph++)
                if (msr_lprof_is_worker((msr_lprof_phase_t)ph) && ws[i].end[ph])
                    row(msr_lprof_name((msr_lprof_phase_t)ph), who, ms_since(t0, ws[i].start[ph]),
                        ms_since(ws[i].start[ph], ws[i].end[ph]));
        }
    }
    row("total", "msrun", 0.0, ms_since(t0, now));
out:
    msr_free(ws);
    msr_free(s);
    msr_free(d);
}
