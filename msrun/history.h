/* The run's history: every progress report of this node's ranks, one JSON
 * line each, in history.jsonl of the run's directory in --log_dir, kept
 * for `msrun board DIR` after the job (docs/usage.md). The file is bounded
 * as the workers' logs are: past max_bytes it rotates to history.jsonl.1
 * (the one before that is dropped), so a run keeps at most twice the
 * bound. A write that fails is said once and the history stops; the job
 * goes on. Any thread (a mutex inside). */
#ifndef MSR_MSRUN_HISTORY_H
#define MSR_MSRUN_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/base.h"
#include "rendezvous/progress.h"

typedef struct msr_history msr_history_t;

/* The file's name in the run's directory, and its rotated copy's. */
#define MSR_HISTORY_FILE      "history.jsonl"
#define MSR_HISTORY_FILE_OLD  "history.jsonl.1"
/* The bound without --log_max_bytes. */
#define MSR_HISTORY_MAX_BYTES (64ll * 1024 * 1024)

/* One report: a rank's step, the step's time (seconds; <= 0 unknown),
 * when it was reported (seconds since the epoch) and its named scalars. */
typedef struct msr_history_rec {
    int generation, node_rank, rank;
    int64_t step;
    double step_time, time;
    size_t n;
    const char *const *names;
    const double *values;
} msr_history_rec_t;

/* Opens (appending: a restarted agent goes on) dir_fd's MSR_HISTORY_FILE,
 * mode 0600, never through a link; max_bytes <= 0: MSR_HISTORY_MAX_BYTES.
 * MSR_ERR_IO (msr_err_msg() says why); *history_p written only on
 * success. */
msr_status_t msr_history_open(int dir_fd, int64_t max_bytes, msr_history_t **history_p);

/* Appends r as one line: {"t":..,"gen":..,"node":..,"rank":..,"step":..,
 * "step_ms":..,"scalars":{..}} (step_ms null when unknown; scalars that
 * are not finite left out). A line that would take the file past its
 * bound goes to a new file, the full one renamed MSR_HISTORY_FILE_OLD.
 * NULL history does nothing. */
void msr_history_add(msr_history_t *history, const msr_history_rec_t *r);

/* Lines written, and rotations made, so far. */
uint64_t msr_history_lines(msr_history_t *history);
uint64_t msr_history_rotations(msr_history_t *history);

/* Closes and frees; NULL does nothing. */
void msr_history_close(msr_history_t *history);

#endif
