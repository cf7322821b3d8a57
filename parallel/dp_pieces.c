/* Data parallel's checkpoint pieces (see dp.h): the units this rank owns,
 * to save, and a restore that takes what this rank needs from any saved
 * rank's pieces, checks that all of it was found, and rebuilds the
 * replicated state from the shards. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/time.h"
#include "model/err_call.h"
#include "parallel/dp_impl.h"

#define COVER_PARAMS  1u
#define COVER_MOMENTS 2u

/* ---- checkpoints ---- */

int msr_dp_num_owned(const msr_dp_t *dp)
{
    int n = 0;
    for (int k = 0; k < dp->num_units; k++)
        n += dp->units[k].own_n > 0;
    return n;
}

void msr_dp_owned(const msr_dp_t *dp, int k, msr_dp_piece_t *piece)
{
    int i = -1;
    for (int u = 0; u < dp->num_units; u++) {
        if (dp->units[u].own_n > 0 && ++i == k) {
            const msr_dp_unit_t *un = &dp->units[u];
            size_t mo = msr_dp_moment_off(dp, un);
            int held = dp->opt->m != NULL; /* else in the offload's file */
            *piece = (msr_dp_piece_t){un->own_lo,
                                      un->own_n,
                                      msr_dp_param_at(dp, un),
                                      held ? dp->opt->m + mo : NULL,
                                      held ? dp->opt->v + mo : NULL,
                                      mo};
            return;
        }
    }
    *piece = (msr_dp_piece_t){0, 0, NULL, NULL, NULL, 0};
}

/* A range of flat elements a load found one part of (COVER_*). A load
 * keeps ranges, not a flag per element: marking is one append per piece
 * and unit, and load_end's check a search of the sorted ranges. */
typedef struct msr_dp_mark {
    size_t lo, n;
    unsigned bit;
} msr_dp_mark_t;

struct msr_dp_cover {
    size_t n, cap;
    int no_memory;      /* a mark could not be kept: the load fails */
    msr_status_t io_st; /* writing moments to the offload's file failed */
    msr_dp_mark_t r[];
};

#define COVER_FIRST_CAP 64

msr_status_t msr_dp_load_begin(msr_dp_t *dp)
{
    msr_free(dp->cover);
    dp->cover = msr_malloc(sizeof *dp->cover + COVER_FIRST_CAP * sizeof(msr_dp_mark_t));
    if (dp->cover == NULL) {
        return msr_err(MSR_ERR_NO_MEMORY, "dp: out of memory loading a checkpoint");
    }
    *dp->cover = (struct msr_dp_cover){0, COVER_FIRST_CAP, 0, MSR_OK};
    return MSR_OK;
}

/* Marks flat [lo, lo + n) found for bit: extends the last range when this
 * one continues it (a piece's units follow one another), else appends. */
static void mark(msr_dp_t *dp, size_t lo, size_t n, unsigned bit)
{
    struct msr_dp_cover *c = dp->cover;
    if (c == NULL || c->no_memory)
        return;
    for (size_t j = c->n; j > 0 && j + 2 >= c->n; j--) { /* the last two: params, moments */
        msr_dp_mark_t *l = &c->r[j - 1];
        if (l->bit == bit && l->lo + l->n == lo) {
            l->n += n;
            return;
        }
    }
    if (c->n == c->cap) {
        size_t cap = 2 * c->cap;
        struct msr_dp_cover *g = msr_realloc(c, sizeof *c + cap * sizeof(msr_dp_mark_t));
        if (g == NULL) {
            msr_err_set("dp: out of memory for %zu marks loading a checkpoint", cap);
            c->no_memory = 1;
            return;
        }
        g->cap = cap;
        dp->cover = c = g;
    }
    c->r[c->n++] = (msr_dp_mark_t){lo, n, bit};
}

/* Copies the part of src (a piece's array starting at flat element
 * piece->lo) that falls in flat [lo, lo + n) to dst (element lo), and marks
 * it found (bit 0: copied only). */
static void take(msr_dp_t *dp, const msr_dp_piece_t *piece, const float *src, size_t lo, size_t n,
                 float *dst, unsigned bit)
{
    size_t a = MSR_MAX(lo, piece->lo), e = MSR_MIN(lo + n, piece->lo + piece->n);
    if (a >= e)
        return;
    memcpy(dst + (a - lo), src + (a - piece->lo), (e - a) * sizeof(float));
    if (bit != 0)
        mark(dp, a, e - a, bit);
}

/* take for the moments: shard elements from mo, in opt->m and opt->v, or
 * with the moments offloaded and not held, written into their file a chunk
 * at a time (the first failure is kept for load_end; later pieces are
 * skipped). */
static void take_moments(msr_dp_t *dp, const msr_dp_piece_t *piece, size_t lo, size_t n, size_t mo)
{
    if (dp->opt->m != NULL) {
        take(dp, piece, piece->m, lo, n, dp->opt->m + mo, 0);
        take(dp, piece, piece->v, lo, n, dp->opt->v + mo, COVER_MOMENTS);
        return;
    }
    size_t a = MSR_MAX(lo, piece->lo), e = MSR_MIN(lo + n, piece->lo + piece->n);
    if (a >= e || dp->cover == NULL || dp->cover->io_st != MSR_OK)
        return;
    msr_status_t st = msr_offload_put(dp->offload, mo + (a - lo), e - a, piece->m + (a - piece->lo),
                                      piece->v + (a - piece->lo));
    if (st != MSR_OK)
        dp->cover->io_st = st;
    else
        mark(dp, a, e - a, COVER_MOMENTS);
}

/* take for the parameters below ZeRO-3: into the flat buffer, or with the
 * parameters' blocks offloaded, those a block at a time through their
 * file (msr_dp_params_load; the first failure kept as take_moments'). */
static void take_params(msr_dp_t *dp, const msr_dp_piece_t *piece, size_t lo, size_t n)
{
    if (dp->pload_buf == NULL) {
        take(dp, piece, piece->params, lo, n, dp->model->params + lo, COVER_PARAMS);
        return;
    }
    size_t a = MSR_MAX(lo, piece->lo), e = MSR_MIN(lo + n, piece->lo + piece->n);
    if (a >= e || dp->cover == NULL || dp->cover->io_st != MSR_OK)
        return;
    msr_status_t st = msr_dp_params_load(dp, a, e - a, piece->params + (a - piece->lo));
    if (st != MSR_OK)
        dp->cover->io_st = st;
    else
        mark(dp, a, e - a, COVER_PARAMS);
}

/* take for ZeRO-3's parameters with the blocks' shares offloaded: unit
 * u's owned elements, a block's share at a time through its file
 * (msr_dp_params_load_shard; the first failure kept as take_moments'). */
static void take_shard(msr_dp_t *dp, const msr_dp_piece_t *piece, const msr_dp_unit_t *u)
{
    size_t a = MSR_MAX(u->own_lo, piece->lo),
           e = MSR_MIN(u->own_lo + u->own_n, piece->lo + piece->n);
    if (a >= e || dp->cover == NULL || dp->cover->io_st != MSR_OK)
        return;
    msr_status_t st = msr_dp_params_load_shard(dp, u->shard_off + (a - u->own_lo), e - a,
                                               piece->params + (a - piece->lo));
    if (st != MSR_OK)
        dp->cover->io_st = st;
    else
        mark(dp, a, e - a, COVER_PARAMS);
}

void msr_dp_load_piece(msr_dp_t *dp, const msr_dp_piece_t *piece)
{
    for (int k = 0; k < dp->num_units; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        if (u->lo >= piece->lo + piece->n || u->lo + u->n <= piece->lo)
            continue;
        if (dp->cfg.zero <= 2)
            take_params(dp, piece, u->lo, u->n);
        else if (dp->pload_buf != NULL)
            take_shard(dp, piece, u);
        else
            take(dp, piece, piece->params, u->own_lo, u->own_n, dp->pshard + u->shard_off,
                 COVER_PARAMS);
        size_t lo = dp->cfg.zero == 0 ? u->lo : u->own_lo;
        size_t n = dp->cfg.zero == 0 ? u->n : u->own_n;
        size_t mo = dp->cfg.zero == 0 ? u->lo : u->shard_off;
        take_moments(dp, piece, lo, n, mo);
    }
}

/* fn's part of [lo, lo + n) in [a, a + an), if any. */
static void need(msr_dp_need_fn fn, void *arg, int moments, size_t lo, size_t n, size_t a,
                 size_t an)
{
    size_t x = MSR_MAX(lo, a), e = MSR_MIN(lo + n, a + an);
    if (x < e)
        fn(arg, moments, x, e - x);
}

void msr_dp_load_needs(const msr_dp_t *dp, size_t lo, size_t n, msr_dp_need_fn fn, void *arg)
{
    for (int k = 0; k < dp->num_units; k++) { /* as msr_dp_load_piece takes */
        const msr_dp_unit_t *u = &dp->units[k];
        if (u->lo >= lo + n || u->lo + u->n <= lo)
            continue;
        if (dp->cfg.zero <= 2)
            need(fn, arg, 0, lo, n, u->lo, u->n);
        else
            need(fn, arg, 0, lo, n, u->own_lo, u->own_n);
        if (dp->cfg.zero == 0)
            need(fn, arg, 1, lo, n, u->lo, u->n);
        else
            need(fn, arg, 1, lo, n, u->own_lo, u->own_n);
    }
}

int msr_dp_load_dest(const msr_dp_t *dp, size_t lo, size_t n, float **params_p, float **m_p,
                     float **v_p)
{
    float *at[3] = {NULL, NULL, NULL}; /* where the next element goes, in each */
    size_t next = lo;
    if (dp->opt->m == NULL || dp->pload_buf != NULL) /* offloaded: load_piece writes them */
        return 0;
    /* a ZeRO 0 replica holds every element of its units, each at its flat
     * index in the parameters and both moments; a shard, its own */
    int all = dp->cfg.zero == 0;
    for (int k = 0; k < dp->num_units && next < lo + n; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        size_t ulo = all ? u->lo : u->own_lo, un = all ? u->n : u->own_n;
        if (un == 0 || next < ulo || next >= ulo + un)
            continue;
        float *p = dp->model->params + next, *m = dp->opt->m + next, *v = dp->opt->v + next;
        if (!all) {
            size_t in = next - u->own_lo, mo = msr_dp_moment_off(dp, u);
            p = msr_dp_param_at(dp, u) + in, m = dp->opt->m + mo + in, v = dp->opt->v + mo + in;
        }
        if (next > lo && (p != at[0] || m != at[1] || v != at[2]))
            return 0; /* units not side by side in the buffers */
        size_t take = MSR_MIN(lo + n, ulo + un) - next;
        at[0] = p + take, at[1] = m + take, at[2] = v + take;
        next += take;
    }
    if (next != lo + n || n == 0)
        return 0;
    *params_p = at[0] - n;
    *m_p = at[1] - n;
    *v_p = at[2] - n;
    return 1;
}

void msr_dp_load_mark(msr_dp_t *dp, size_t lo, size_t n)
{
    mark(dp, lo, n, COVER_PARAMS);
    mark(dp, lo, n, COVER_MOMENTS);
}

static int mark_cmp(const void *a, const void *b)
{
    const msr_dp_mark_t *x = a, *y = b;
    if (x->bit != y->bit)
        return x->bit < y->bit ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts the marks by part, then start, and merges those that overlap or
 * touch: each part's ranges are then disjoint and apart. */
static void cover_merge(struct msr_dp_cover *c)
{
    qsort(c->r, c->n, sizeof c->r[0], mark_cmp);
    size_t w = 0;
    for (size_t i = 0; i < c->n; i++) {
        msr_dp_mark_t *l = w > 0 ? &c->r[w - 1] : NULL;
        if (l != NULL && l->bit == c->r[i].bit && c->r[i].lo <= l->lo + l->n)
            l->n = MSR_MAX(l->n, c->r[i].lo + c->r[i].n - l->lo);
        else
            c->r[w++] = c->r[i];
    }
    c->n = w;
}

/* The first element of flat [lo, lo + n) that lacks bit (in the merged
 * marks), or lo + n. */
static size_t first_missing_bit(const struct msr_dp_cover *c, size_t lo, size_t n, unsigned bit)
{
    size_t a = 0, b = c->n; /* the last range of bit starting at or before lo */
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        const msr_dp_mark_t *m = &c->r[mid];
        if (m->bit < bit || (m->bit == bit && m->lo <= lo))
            a = mid + 1;
        else
            b = mid;
    }
    if (a == 0 || c->r[a - 1].bit != bit || c->r[a - 1].lo + c->r[a - 1].n <= lo)
        return lo;
    return MSR_MIN(c->r[a - 1].lo + c->r[a - 1].n, lo + n);
}

/* The first element of flat [lo, lo + n) that lacks bits, or lo + n. */
static size_t first_missing(const msr_dp_t *dp, size_t lo, size_t n, unsigned bits)
{
    size_t first = lo + n;
    if (n == 0)
        return first;
    if (bits & COVER_PARAMS)
        first = MSR_MIN(first, first_missing_bit(dp->cover, lo, n, COVER_PARAMS));
    if (bits & COVER_MOMENTS)
        first = MSR_MIN(first, first_missing_bit(dp->cover, lo, n, COVER_MOMENTS));
    return first;
}

msr_status_t msr_dp_load_end(msr_dp_t *dp, int gather, int failed)
{
    size_t missing = SIZE_MAX;
    int no_memory = dp->cover != NULL && dp->cover->no_memory;
    msr_status_t io_st = dp->cover != NULL ? dp->cover->io_st : MSR_OK;
    if (no_memory || io_st != MSR_OK)
        failed = 1; /* the error was set where it happened */
    if (dp->cover != NULL && !failed)
        cover_merge(dp->cover);
    for (int k = 0; k < dp->num_units && missing == SIZE_MAX && !failed && dp->cover != NULL; k++) {
        const msr_dp_unit_t *u = &dp->units[k];
        size_t i = first_missing(dp, u->own_lo, u->own_n, COVER_PARAMS | COVER_MOMENTS);
        if (i < u->own_lo + u->own_n)
            missing = i;
        if (gather || missing != SIZE_MAX)
            continue;
        /* what this rank holds beyond its own elements */
        unsigned bits =
            (dp->cfg.zero <= 2 ? COVER_PARAMS : 0u) | (dp->cfg.zero == 0 ? COVER_MOMENTS : 0u);
        if (bits != 0 && (i = first_missing(dp, u->lo, u->n, bits)) < u->lo + u->n)
            missing = i;
    }
    if (missing != SIZE_MAX)
        msr_err_set("dp: the checkpoint lacks flat element %zu of the %zu parameters (or its "
                    "moments)",
                    missing, dp->model->num_params);
    /* every rank learns whether all found what they need */
    int32_t ok = missing == SIZE_MAX && !failed && dp->cover != NULL;
    msr_free(dp->cover);
    dp->cover = NULL;
    if (dp->comm != NULL) {
        msr_status_t st =
            msr_comm_allreduce(dp->comm, MSR_IN_PLACE, &ok, 1, MSR_DTYPE_I32, MSR_OP_MIN);
        if (st != MSR_OK)
            return msr_dp_comm_failed("agreement on a checkpoint load, rank", dp->rank, st);
    }
    if (!ok) {
        if (missing == SIZE_MAX && !failed)
            msr_err_set("dp: another rank could not load its part of the checkpoint");
        return no_memory ? MSR_ERR_NO_MEMORY : io_st != MSR_OK ? io_st : MSR_ERR_CORRUPT;
    }
    if (!gather)
        return MSR_OK;
    msr_status_t st = MSR_OK;
    if (dp->cfg.zero <= 2 && dp->pload_buf != NULL) /* the blocks one at a time */
        st = msr_dp_params_load_gather(dp);
    else if (dp->cfg.zero <= 2)
        st = msr_dp_allgather_flat(dp, dp->model->params);
    if (st == MSR_OK && dp->cfg.zero == 0)
        st = msr_dp_allgather_flat(dp, dp->opt->m);
    if (st == MSR_OK && dp->cfg.zero == 0)
        st = msr_dp_allgather_flat(dp, dp->opt->v);
    return st;
}
