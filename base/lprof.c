/* The launch timeline's phases, a worker's recording and its file. */
#include "base/lprof.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/time.h"

static const struct {
    const char *name;
    int worker;
} phases[MSR_LPROF_COUNT] = {
#define MSR_LPROF_ROW(id, name, worker) {name, worker},
    MSR_LPROF_PHASES(MSR_LPROF_ROW)
#undef MSR_LPROF_ROW
};

const char *msr_lprof_name(msr_lprof_phase_t ph)
{
    return (unsigned)ph < MSR_LPROF_COUNT ? phases[ph].name : "?";
}

int msr_lprof_is_worker(msr_lprof_phase_t ph)
{
    return (unsigned)ph < MSR_LPROF_COUNT && phases[ph].worker;
}

void msr_lprof_mark(msr_lprof_t *p, msr_lprof_phase_t ph, uint64_t start_ns, uint64_t end_ns)
{
    if (p == NULL || (unsigned)ph >= MSR_LPROF_COUNT || p->end[ph] != 0)
        return;
    p->start[ph] = start_ns;
    p->end[ph] = end_ns < start_ns ? start_ns : end_ns;
}

/* The once-only state: read from the environment on the first call. */
static pthread_once_t self_once = PTHREAD_ONCE_INIT;
static char self_prefix[MSR_LPROF_PREFIX_MAX + 1];
static msr_lprof_t self_prof;
static int self_on;

static void self_init(void)
{
    const char *v = getenv(MSR_LPROF_ENV);
    if (v == NULL || *v == '\0' || strlen(v) > MSR_LPROF_PREFIX_MAX)
        return;
    snprintf(self_prefix, sizeof self_prefix, "%s", v);
    self_on = 1;
}

msr_lprof_t *msr_lprof_self(void)
{
    pthread_once(&self_once, self_init);
    return self_on ? &self_prof : NULL;
}

int msr_lprof_wants(msr_lprof_phase_t ph)
{
    msr_lprof_t *p = msr_lprof_self();
    return p != NULL && (unsigned)ph < MSR_LPROF_COUNT && p->end[ph] == 0;
}

void msr_lprof_note(msr_lprof_phase_t ph, uint64_t start_ns)
{
    msr_lprof_t *p = msr_lprof_self();
    if (p)
        msr_lprof_mark(p, ph, start_ns, msr_now_ns());
}

msr_status_t msr_lprof_save(int rank)
{
    msr_lprof_t *p = msr_lprof_self();
    if (p == NULL)
        return MSR_OK;
    char path[MSR_LPROF_PREFIX_MAX + 16];
    snprintf(path, sizeof path, "%s.%d", self_prefix, rank);
    FILE *f = fopen(path, "we");
    if (f == NULL) {
        msr_err_set("launch profile: cannot write %s: %s", path, strerror(errno));
        return MSR_ERR_IO;
    }
    for (int i = 0; i < MSR_LPROF_COUNT; i++)
        if (p->end[i])
            fprintf(f, "%s %" PRIu64 " %" PRIu64 "\n", phases[i].name, p->start[i], p->end[i]);
    if (fclose(f) != 0) {
        msr_err_set("launch profile: cannot write %s: %s", path, strerror(errno));
        return MSR_ERR_IO;
    }
    return MSR_OK;
}

static int phase_by_name(const char *name)
{
    for (int i = 0; i < MSR_LPROF_COUNT; i++)
        if (strcmp(phases[i].name, name) == 0)
            return i;
    return -1;
}

msr_status_t msr_lprof_load(const char *prefix, int rank, msr_lprof_t *p_out)
{
    char path[MSR_LPROF_PREFIX_MAX + 16];
    snprintf(path, sizeof path, "%s.%d", prefix, rank);
    memset(p_out, 0, sizeof *p_out);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return MSR_ERR_NOT_FOUND;
    char name[64];
    uint64_t s, e;
    msr_status_t st = MSR_OK;
    int n;
    while ((n = fscanf(f, "%63s %" SCNu64 " %" SCNu64, name, &s, &e)) == 3) {
        int ph = phase_by_name(name);
        if (ph < 0 || e < s) {
            st = MSR_ERR_PROTOCOL;
            break;
        }
        p_out->start[ph] = s;
        p_out->end[ph] = e;
    }
    if (st == MSR_OK && n != EOF)
        st = MSR_ERR_PROTOCOL;
    if (st != MSR_OK)
        msr_err_set("launch profile: %s: a line is not \"phase start end\"", path);
    fclose(f);
    return st;
}
