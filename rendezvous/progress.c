/* Progress reports gathered per rank between two sends, and the metric line
 * parser (progress.h). */
#include "rendezvous/progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

int msr_progress_name_valid(const char *name, size_t len)
{
    if (len == 0 || len > MSR_PROGRESS_NAME_MAX || (name[0] >= '0' && name[0] <= '9'))
        return 0;
    for (size_t i = 0; i < len; i++) {
        char ch = name[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '.' || ch == ':' || ch == '/' || ch == '-';
        if (!ok)
            return 0;
    }
    return 1;
}

void msr_progress_batch_init(msr_progress_batch_t *b)
{
    memset(b, 0, sizeof *b);
}

void msr_progress_batch_cleanup(msr_progress_batch_t *b)
{
    msr_free(b->ranks);
    memset(b, 0, sizeof *b);
}

/* rank's record, made on its first report; NULL when out of memory or full */
static msr_progress_rank_t *rank_get(msr_progress_batch_t *b, int rank)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->ranks[i].rank == rank)
            return &b->ranks[i];
    if (b->n == MSR_PROGRESS_RANKS_MAX)
        return NULL;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8;
        msr_progress_rank_t *nr = msr_realloc_array(b->ranks, cap, sizeof *nr);
        if (nr == NULL)
            return NULL;
        b->ranks = nr;
        b->cap = cap;
    }
    msr_progress_rank_t *r = &b->ranks[b->n++];
    memset(r, 0, sizeof *r);
    r->rank = rank;
    return r;
}

static void time_push(msr_progress_rank_t *r, double t)
{
    r->times[r->next] = t;
    r->next = (r->next + 1) % MSR_PROGRESS_TIMES;
    if (r->ntimes < MSR_PROGRESS_TIMES)
        r->ntimes++;
}

static void scalar_set(msr_progress_rank_t *r, const char *name, size_t len, double value)
{
    for (uint32_t i = 0; i < r->nscalars; i++) {
        if (strlen(r->scalars[i].name) == len && memcmp(r->scalars[i].name, name, len) == 0) {
            r->scalars[i].value = value;
            return;
        }
    }
    if (r->nscalars == MSR_PROGRESS_SCALARS)
        return;
    memcpy(r->scalars[r->nscalars].name, name, len);
    r->scalars[r->nscalars].name[len] = '\0';
    r->scalars[r->nscalars].value = value;
    r->nscalars++;
}

msr_status_t msr_progress_batch_add(msr_progress_batch_t *b, int rank, int64_t step,
                                    double step_time, double time, const char *const *names,
                                    const double *values, size_t n)
{
    int ok = rank >= 0 && step >= 0 && !isnan(step_time) && (n == 0 || (names && values));
    for (size_t i = 0; ok && i < n; i++)
        ok = names[i] && msr_progress_name_valid(names[i], strlen(names[i]));
    if (!ok) {
        b->dropped++;
        return MSR_ERR_INVALID_ARG;
    }
    msr_progress_rank_t *r = rank_get(b, rank);
    if (r == NULL) {
        b->dropped++;
        return MSR_ERR_NO_MEMORY;
    }
    if (step_time < 0) {
        step_time = 0;
        if (r->has_prev && step > r->step && time > r->time)
            step_time = (time - r->time) / (double)(step - r->step);
    }
    if (!isfinite(step_time))
        step_time = 0;
    r->step = step;
    r->step_time = step_time;
    r->time = time;
    r->has_prev = 1;
    r->pending = 1;
    r->steps++;
    if (step_time > 0)
        time_push(r, step_time);
    for (size_t i = 0; i < n; i++)
        if (isfinite(values[i]))
            scalar_set(r, names[i], strlen(names[i]), values[i]);
    return MSR_OK;
}

msr_status_t msr_progress_batch_merge(msr_progress_batch_t *b, const Msr__StepReport *s)
{
    if (s->rank < 0 || s->step < 0) {
        b->dropped++;
        return MSR_ERR_INVALID_ARG;
    }
    msr_progress_rank_t *r = rank_get(b, s->rank);
    if (r == NULL) {
        b->dropped++;
        return MSR_ERR_NO_MEMORY;
    }
    size_t first = s->n_step_times > MSR_PROGRESS_TIMES ? s->n_step_times - MSR_PROGRESS_TIMES : 0;
    for (size_t i = first; i < s->n_step_times; i++)
        if (isfinite(s->step_times[i]) && s->step_times[i] > 0)
            time_push(r, s->step_times[i]);
    r->step = s->step;
    r->step_time = isfinite(s->step_time) && s->step_time > 0 ? s->step_time : 0;
    r->time = isfinite(s->time) ? s->time : 0;
    r->steps += s->steps ? s->steps : 1;
    r->has_prev = 1;
    r->pending = 1;
    for (size_t i = 0; i < s->n_scalars; i++) {
        const Msr__Scalar *sc = s->scalars[i];
        if (sc->name && msr_progress_name_valid(sc->name, strlen(sc->name)) && isfinite(sc->value))
            scalar_set(r, sc->name, strlen(sc->name), sc->value);
    }
    return MSR_OK;
}

int msr_progress_batch_pending(const msr_progress_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->ranks[i].pending)
            return 1;
    return 0;
}

/* One StepReport with its arrays, allocated as one block (the request
 * owes nothing to the batch once taken). */
typedef struct step_block {
    Msr__StepReport rep;
    Msr__Scalar scalars[MSR_PROGRESS_SCALARS];
    Msr__Scalar *scalarp[MSR_PROGRESS_SCALARS];
    char names[MSR_PROGRESS_SCALARS][MSR_PROGRESS_NAME_MAX + 1];
    double times[MSR_PROGRESS_TIMES];
} step_block_t;

msr_status_t msr_progress_batch_take(msr_progress_batch_t *b, Msr__ProgressRequest *req)
{
    size_t np = 0;
    for (size_t i = 0; i < b->n; i++)
        np += b->ranks[i].pending != 0;
    req->n_steps = 0;
    req->steps = NULL;
    if (np == 0)
        return MSR_OK;
    Msr__StepReport **steps = msr_calloc(np, sizeof *steps);
    step_block_t *blocks = msr_calloc(np, sizeof *blocks);
    if (steps == NULL || blocks == NULL) {
        msr_free(steps);
        msr_free(blocks);
        return MSR_ERR_NO_MEMORY;
    }
    size_t k = 0;
    for (size_t i = 0; i < b->n; i++) {
        msr_progress_rank_t *r = &b->ranks[i];
        if (!r->pending)
            continue;
        step_block_t *sb = &blocks[k];
        msr__step_report__init(&sb->rep);
        sb->rep.rank = r->rank;
        sb->rep.step = r->step;
        sb->rep.step_time = r->step_time;
        sb->rep.time = r->time;
        sb->rep.steps = r->steps;
        for (uint32_t j = 0; j < r->nscalars; j++) {
            msr__scalar__init(&sb->scalars[j]);
            memcpy(sb->names[j], r->scalars[j].name, sizeof sb->names[j]);
            sb->scalars[j].name = sb->names[j];
            sb->scalars[j].value = r->scalars[j].value;
            sb->scalarp[j] = &sb->scalars[j];
        }
        sb->rep.n_scalars = r->nscalars;
        sb->rep.scalars = sb->scalarp;
        /* oldest first */
        uint32_t start = (r->next + MSR_PROGRESS_TIMES - r->ntimes) % MSR_PROGRESS_TIMES;
        for (uint32_t j = 0; j < r->ntimes; j++)
            sb->times[j] = r->times[(start + j) % MSR_PROGRESS_TIMES];
        sb->rep.n_step_times = r->ntimes;
        sb->rep.step_times = sb->times;
        steps[k++] = &sb->rep;
        r->pending = 0;
        r->steps = 0;
        r->ntimes = r->next = 0;
    }
    req->n_steps = k;
    req->steps = steps;
    return MSR_OK;
}

void msr_progress_request_cleanup(Msr__ProgressRequest *req)
{
    if (req->n_steps)
        msr_free(req->steps[0]); /* the first block's address is the blocks' */
    msr_free(req->steps);
    req->steps = NULL;
    req->n_steps = 0;
}

/* ---- the metric line ---- */

int msr_metric_line_parse(const char *line, size_t len, msr_metric_line_t *out)
{
    size_t plen = sizeof MSR_METRIC_PREFIX - 1;
    if (len < plen || memcmp(line, MSR_METRIC_PREFIX, plen) != 0)
        return 0;
    if (len > plen && line[plen] != ' ' && line[plen] != '\t')
        return 0;
    msr_metric_line_t m;
    memset(&m, 0, sizeof m);
    m.step = -1;
    m.step_time = -1;
    int have_time = 0;
    size_t i = plen;
    while (i < len) {
        while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
            i++;
        if (i == len)
            break;
        size_t start = i;
        while (i < len && line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
            i++;
        const char *tok = line + start, *eq = memchr(tok, '=', i - start);
        if (eq == NULL)
            return 0;
        size_t nlen = (size_t)(eq - tok), vlen = i - start - nlen - 1;
        char value[64];
        if (vlen == 0 || vlen >= sizeof value)
            return 0;
        memcpy(value, eq + 1, vlen);
        value[vlen] = '\0';
        char *end;
        if (nlen == 4 && memcmp(tok, "step", 4) == 0) {
            if (m.step >= 0 || value[0] < '0' || value[0] > '9')
                return 0;
            long long s = strtoll(value, &end, 10);
            if (*end != '\0' || s < 0)
                return 0;
            m.step = s;
            continue;
        }
        double v = strtod(value, &end);
        if (*end != '\0' || !isfinite(v))
            return 0;
        if (nlen == 9 && memcmp(tok, "step_time", 9) == 0) {
            if (have_time || v < 0)
                return 0;
            have_time = 1;
            m.step_time = v;
            continue;
        }
        if (!msr_progress_name_valid(tok, nlen) || m.n == MSR_PROGRESS_SCALARS)
            return 0;
        for (size_t j = 0; j < m.n; j++)
            if (strlen(m.names[j]) == nlen && memcmp(m.names[j], tok, nlen) == 0)
                return 0;
        memcpy(m.names[m.n], tok, nlen);
        m.names[m.n][nlen] = '\0';
        m.values[m.n++] = v;
    }
    if (m.step < 0)
        return 0;
    *out = m;
    return 1;
}
