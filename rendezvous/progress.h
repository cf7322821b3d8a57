/* Progress reports (docs/observe.md): a step's number, its time and named
 * scalars, gathered per rank between two sends. The same accumulator serves
 * a worker's libmsrun (msr_report, sent to its node's msrun), the node's
 * proxy (every local worker's reports, sent to the coordinator as one call
 * per interval) and the agent (the "msrun:metric" lines its workers print).
 * Pure: no I/O, no threads; the caller serialises the calls on one batch. */
#ifndef MSR_RENDEZVOUS_PROGRESS_H
#define MSR_RENDEZVOUS_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "rendezvous/rpc.h"

/* Most scalars one report (and one rank) carries, and the longest name. */
#define MSR_PROGRESS_SCALARS   16
#define MSR_PROGRESS_NAME_MAX  63
/* Step times kept per rank between two sends (the most recent). */
#define MSR_PROGRESS_TIMES     64
/* Most ranks one batch holds (a node's workers; the coordinator's world). */
#define MSR_PROGRESS_RANKS_MAX (1 << 20)

typedef struct msr_progress_scalar {
    char name[MSR_PROGRESS_NAME_MAX + 1];
    double value;
} msr_progress_scalar_t;

/* One rank's reports since the last take, and its latest values. */
typedef struct msr_progress_rank {
    int rank;
    int pending;                      /* reported since the last take */
    int64_t step;                     /* the latest */
    double step_time;                 /* seconds; 0 unknown */
    double time;                      /* wall-clock seconds of the latest report */
    uint32_t steps;                   /* reports since the last take */
    double times[MSR_PROGRESS_TIMES]; /* their step times, a ring */
    uint32_t ntimes, next;
    msr_progress_scalar_t scalars[MSR_PROGRESS_SCALARS];
    uint32_t nscalars;
    int has_prev; /* a report came before: step times can be derived */
} msr_progress_rank_t;

typedef struct msr_progress_batch {
    msr_progress_rank_t *ranks; /* by order of first report */
    size_t n, cap;
    uint64_t dropped; /* reports refused (bad names, out of memory) */
} msr_progress_batch_t;

/* A scalar's name: 1..MSR_PROGRESS_NAME_MAX of [A-Za-z0-9_.:/-], not
 * starting with a digit (so it reads as a label value and a JSON key). */
int msr_progress_name_valid(const char *name, size_t len);

void msr_progress_batch_init(msr_progress_batch_t *b);
void msr_progress_batch_cleanup(msr_progress_batch_t *b);

/* Records one step of rank. step_time < 0: derived from the previous
 * report's time and step (0 when there is none, or the step did not
 * advance). Scalars replace those of the same name; new names past
 * MSR_PROGRESS_SCALARS are dropped. MSR_ERR_INVALID_ARG for a negative
 * rank or step, or a bad name (the whole report is refused and counted in
 * dropped); MSR_ERR_NO_MEMORY. */
msr_status_t msr_progress_batch_add(msr_progress_batch_t *b, int rank, int64_t step,
                                    double step_time, double time, const char *const *names,
                                    const double *values, size_t n);

/* Merges a rank's report as another batch took it (a worker's, at the
 * proxy): its step times are appended, its steps counted, its latest
 * values replace these. Bad names are skipped. */
msr_status_t msr_progress_batch_merge(msr_progress_batch_t *b, const Msr__StepReport *r);

/* Whether any rank reported since the last take. */
int msr_progress_batch_pending(const msr_progress_batch_t *b);

/* Moves what is pending into req->steps (allocated here; free with
 * msr_progress_request_cleanup) and clears it; req's other fields are the
 * caller's. With nothing pending req->n_steps is 0. MSR_ERR_NO_MEMORY
 * leaves the batch as it was. */
msr_status_t msr_progress_batch_take(msr_progress_batch_t *b, Msr__ProgressRequest *req);
void msr_progress_request_cleanup(Msr__ProgressRequest *req);

/* The metric line a program prints when it does not link libmsrun:
 *   msrun:metric step=12 loss=2.31 tok_s=5120
 * "msrun:metric" at the start of the line, then space-separated NAME=VALUE
 * pairs: step (an integer >= 0) is required; step_time (seconds) is
 * optional; every other NAME is a scalar (msr_progress_name_valid) with a
 * finite decimal VALUE. Any other line, or a line with a bad pair, a
 * repeated name or more than MSR_PROGRESS_SCALARS scalars, is not one
 * (returns 0). */
typedef struct msr_metric_line {
    int64_t step;
    double step_time; /* -1 when not given */
    size_t n;
    char names[MSR_PROGRESS_SCALARS][MSR_PROGRESS_NAME_MAX + 1];
    double values[MSR_PROGRESS_SCALARS];
} msr_metric_line_t;

#define MSR_METRIC_PREFIX "msrun:metric"

int msr_metric_line_parse(const char *line, size_t len, msr_metric_line_t *out);

#endif
