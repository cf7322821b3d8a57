/* Straggler detection: a rank's windowed mean against the ranks' median. */
#include "cluster/straggler.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

void msr_step_window_push(msr_step_window_t *w, int64_t step, double seconds)
{
    if (w->n > 0 && step <= msr_step_window_last(w))
        w->n = w->next = 0;
    w->t[w->next] = seconds;
    w->step[w->next] = step;
    w->next = (w->next + 1) % MSR_STEP_RING;
    if (w->n < MSR_STEP_RING)
        w->n++;
}

int64_t msr_step_window_last(const msr_step_window_t *w)
{
    return w->n > 0 ? w->step[(w->next + MSR_STEP_RING - 1) % MSR_STEP_RING] : -1;
}

double msr_step_window_mean(const msr_step_window_t *w)
{
    if (w->n < MSR_STRAGGLER_WINDOW)
        return 0;
    double sum = 0;
    for (uint32_t k = 1; k <= MSR_STRAGGLER_WINDOW; k++)
        sum += w->t[(w->next + MSR_STEP_RING - k) % MSR_STEP_RING];
    return sum / MSR_STRAGGLER_WINDOW;
}

double msr_step_window_mean_at(const msr_step_window_t *w, int64_t last)
{
    double sum = 0;
    uint32_t found = 0;
    for (uint32_t k = 1; k <= w->n; k++) {
        uint32_t i = (w->next + MSR_STEP_RING - k) % MSR_STEP_RING;
        if (w->step[i] <= last && w->step[i] > last - MSR_STRAGGLER_WINDOW) {
            sum += w->t[i];
            found++;
        }
    }
    return found == MSR_STRAGGLER_WINDOW ? sum / found : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double msr_straggler_median(const double *means, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += means[i] > 0;
    if (k < 2)
        return 0;
    double small[64], *v = k <= 64 ? small : msr_malloc(k * sizeof *v);
    if (v == NULL)
        return 0;
    k = 0;
    for (size_t i = 0; i < n; i++)
        if (means[i] > 0)
            v[k++] = means[i];
    qsort(v, k, sizeof *v, cmp_double);
    double m = v[(k - 1) / 2];
    if (v != small)
        msr_free(v);
    return m;
}

size_t msr_stragglers_find(const double *means, size_t n, double factor, uint8_t *slow,
                           double *median_p)
{
    double median = msr_straggler_median(means, n);
    size_t found = 0;
    for (size_t i = 0; i < n; i++) {
        slow[i] = factor > 1 && median >= MSR_STRAGGLER_MIN_SECONDS && means[i] >= factor * median;
        found += slow[i];
    }
    *median_p = median;
    return found;
}
