/* Straggler detection (docs/observe.md): each rank's mean step time over
 * its last MSR_STRAGGLER_WINDOW steps against the median of those means.
 * Pure functions, for the coordinator and its tests. */
#ifndef MSR_CLUSTER_STRAGGLER_H
#define MSR_CLUSTER_STRAGGLER_H

#include <stddef.h>
#include <stdint.h>

/* Steps a rank's window holds; a rank is compared once it is full. */
#define MSR_STRAGGLER_WINDOW 20
/* The default --straggler_factor. */
#define MSR_STRAGGLER_FACTOR 1.5

/* A rank's last step times, a ring. */
typedef struct msr_step_window {
    double t[MSR_STRAGGLER_WINDOW];
    uint32_t n, next;
} msr_step_window_t;

void msr_step_window_push(msr_step_window_t *w, double seconds);
/* The mean of a full window, or 0 while it is not full. */
double msr_step_window_mean(const msr_step_window_t *w);

/* The lower median of the positive values among means[0..n) (0 when fewer
 * than two are positive: one rank alone is compared with nobody). A rank
 * whose mean is at least factor times that median is a straggler; with an
 * even count the lower middle is taken, so that in a job of two the slow
 * rank is compared with the fast one. */
double msr_straggler_median(const double *means, size_t n);

/* Fills slow[i] with 1 for each straggler among means (0 otherwise) and
 * returns how many there are; *median_p gets the median. factor <= 1 finds
 * none. */
size_t msr_stragglers_find(const double *means, size_t n, double factor, uint8_t *slow,
                           double *median_p);

#endif
