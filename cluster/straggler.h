/* Straggler detection (docs/observe.md): each rank's mean step time over
 * MSR_STRAGGLER_WINDOW steps against the median of those means. The ranks
 * are compared over the same steps where they have them (the last window
 * that every rank has finished): nodes report at different moments, and a
 * window of the latest steps of one node against an older one of another
 * compares two moments of the machine, not two ranks (in a synchronous job
 * every rank takes the same time for the same step). A rank so far ahead
 * that it no longer holds those steps is compared over its own last
 * window. Pure functions, for the coordinator and its tests. */
#ifndef MSR_CLUSTER_STRAGGLER_H
#define MSR_CLUSTER_STRAGGLER_H

#include <stddef.h>
#include <stdint.h>

/* Steps a rank's window holds; a rank is compared once it is full. */
#define MSR_STRAGGLER_WINDOW      20
/* The default --straggler_factor. */
#define MSR_STRAGGLER_FACTOR      1.5
/* The shortest median step time (seconds) against which a rank is
 * compared: below a millisecond a step's time is mostly the clock's and the
 * scheduler's noise, so a ratio of two such times names no slow rank (and
 * the warning would read "61.6x slower (0.000 s a step, median 0.000 s)"). */
#define MSR_STRAGGLER_MIN_SECONDS 0.001

/* Steps whose times a rank's ring keeps. */
#define MSR_STEP_RING 64

/* A rank's last step times with their steps, a ring. */
typedef struct msr_step_window {
    double t[MSR_STEP_RING];
    int64_t step[MSR_STEP_RING];
    uint32_t n, next;
} msr_step_window_t;

/* Records step's time (a step at or before the latest, as after a resume
 * from a checkpoint, starts the ring over). */
void msr_step_window_push(msr_step_window_t *w, int64_t step, double seconds);
/* The latest step recorded (-1: none). */
int64_t msr_step_window_last(const msr_step_window_t *w);
/* The mean over the last MSR_STRAGGLER_WINDOW steps recorded, or 0 while
 * there are fewer. */
double msr_step_window_mean(const msr_step_window_t *w);
/* The mean over steps (last - MSR_STRAGGLER_WINDOW, last], or 0 unless
 * the ring holds every one of them. */
double msr_step_window_mean_at(const msr_step_window_t *w, int64_t last);

/* The lower median of the positive values among means[0..n) (0 when fewer
 * than two are positive: one rank alone is compared with nobody). A rank
 * whose mean is at least factor times that median is a straggler; with an
 * even count the lower middle is taken, so that in a job of two the slow
 * rank is compared with the fast one. */
double msr_straggler_median(const double *means, size_t n);

/* Fills slow[i] with 1 for each straggler among means (0 otherwise) and
 * returns how many there are; *median_p gets the median. factor <= 1 finds
 * none, nor does a median below MSR_STRAGGLER_MIN_SECONDS. */
size_t msr_stragglers_find(const double *means, size_t n, double factor, uint8_t *slow,
                           double *median_p);

#endif
