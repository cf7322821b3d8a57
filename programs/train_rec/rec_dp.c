/* train_rec's baselines without servers: replicated tables, updated by an
 * allreduce of their whole gradients or an allgather of the touched rows
 * (docs/ps.md's side-by-side table). */
#include <stdlib.h>
#include <string.h>

#include "msrun/ps.h"
#include "rec.h"

struct rec_dp {
    rec_shape_t s;
    rec_dp_mode_t mode;
    float lr;
    msr_comm_t *comm;
    int W;
    float **tables; /* (F) each (rows, D) */
    float *mlp;     /* (M) */
    float *gfull;   /* DENSE: (F, rows, D) the whole tables' gradients */
    int64_t *akeys; /* TOUCHED: (W, F, B) every rank's keys */
    float *agrads;  /* TOUCHED: (W, F, B, D) their gradients */
    int cap_b;      /* B the gathers are sized for */
    float *gm;      /* (M) the MLP's gradient, averaged */
    uint64_t sent;
};

void rec_dp_destroy(rec_dp_t *dp)
{
    if (dp == NULL)
        return;
    for (int f = 0; dp->tables && f < dp->s.fields; f++)
        free(dp->tables[f]);
    free(dp->tables);
    free(dp->mlp);
    free(dp->gfull);
    free(dp->akeys);
    free(dp->agrads);
    free(dp->gm);
    free(dp);
}

static void init_table(const rec_shape_t *s, int t, float *v, size_t rows, size_t width)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < width; c++)
            v[r * width + c] =
                msr_ps_init_value(rec_table_seed(s->seed, t), r, (uint32_t)c, rec_init_scale(s, t));
}

msr_status_t rec_dp_create(const rec_shape_t *s, rec_dp_mode_t mode, float lr, msr_comm_t *comm,
                           rec_dp_t **dp_p)
{
    rec_dp_t *dp = calloc(1, sizeof *dp);
    if (dp == NULL)
        return MSR_ERR_NO_MEMORY;
    dp->s = *s;
    dp->mode = mode;
    dp->lr = lr;
    dp->comm = comm;
    dp->W = msr_comm_size(comm);
    size_t rd = (size_t)s->rows * s->dim, M = (size_t)rec_mlp_size(s);
    dp->tables = calloc((size_t)s->fields, sizeof *dp->tables);
    dp->mlp = malloc(M * sizeof *dp->mlp);
    dp->gm = malloc(M * sizeof *dp->gm);
    int ok = dp->tables && dp->mlp && dp->gm;
    for (int f = 0; ok && f < s->fields; f++)
        ok = (dp->tables[f] = malloc(rd * sizeof **dp->tables)) != NULL;
    if (ok && mode == REC_DP_DENSE)
        ok = (dp->gfull = malloc((size_t)s->fields * rd * sizeof *dp->gfull)) != NULL;
    if (!ok) {
        rec_dp_destroy(dp);
        return MSR_ERR_NO_MEMORY;
    }
    for (int f = 0; f < s->fields; f++)
        init_table(s, f, dp->tables[f], (size_t)s->rows, (size_t)s->dim);
    init_table(s, s->fields, dp->mlp, 1, M);
    *dp_p = dp;
    return MSR_OK;
}

void rec_dp_fetch(const rec_dp_t *dp, const int64_t *keys, int B, float *rows, float *mlp)
{
    size_t D = (size_t)dp->s.dim;
    for (int f = 0; f < dp->s.fields; f++)
        for (int i = 0; i < B; i++)
            memcpy(rows + ((size_t)f * B + i) * D, dp->tables[f] + keys[f * B + i] * D,
                   D * sizeof *rows);
    memcpy(mlp, dp->mlp, (size_t)rec_mlp_size(&dp->s) * sizeof *mlp);
}

/* The whole tables' gradients, summed over the ranks, then SGD on every row. */
static msr_status_t update_dense(rec_dp_t *dp, const int64_t *keys, int B, const float *grows)
{
    size_t D = (size_t)dp->s.dim, rd = (size_t)dp->s.rows * D, n = (size_t)dp->s.fields * rd;
    memset(dp->gfull, 0, n * sizeof *dp->gfull);
    for (int f = 0; f < dp->s.fields; f++)
        for (int i = 0; i < B; i++)
            for (size_t k = 0; k < D; k++)
                dp->gfull[f * rd + keys[f * B + i] * D + k] += grows[((size_t)f * B + i) * D + k];
    msr_status_t st =
        msr_comm_allreduce(dp->comm, MSR_IN_PLACE, dp->gfull, n, MSR_DTYPE_F32, MSR_OP_SUM);
    if (st != MSR_OK)
        return st;
    dp->sent += 2 * (uint64_t)(dp->W - 1) * n * sizeof(float) / (uint64_t)dp->W;
    float scale = dp->lr / dp->W;
    for (int f = 0; f < dp->s.fields; f++)
        for (size_t j = 0; j < rd; j++)
            dp->tables[f][j] -= scale * dp->gfull[f * rd + j];
    return MSR_OK;
}

/* Every rank's keys and row gradients, gathered; SGD on those rows. */
static msr_status_t update_touched(rec_dp_t *dp, const int64_t *keys, int B, const float *grows)
{
    size_t D = (size_t)dp->s.dim, FB = (size_t)dp->s.fields * B;
    if (B > dp->cap_b) {
        free(dp->akeys);
        free(dp->agrads);
        dp->akeys = malloc((size_t)dp->W * FB * sizeof *dp->akeys);
        dp->agrads = malloc((size_t)dp->W * FB * D * sizeof *dp->agrads);
        dp->cap_b = dp->akeys && dp->agrads ? B : 0;
        if (dp->cap_b == 0)
            return MSR_ERR_NO_MEMORY;
    }
    msr_status_t st = msr_comm_allgather(dp->comm, keys, dp->akeys, FB, MSR_DTYPE_I64);
    if (st == MSR_OK)
        st = msr_comm_allgather(dp->comm, grows, dp->agrads, FB * D, MSR_DTYPE_F32);
    if (st != MSR_OK)
        return st;
    dp->sent += (uint64_t)(dp->W - 1) * FB * (sizeof(int64_t) + D * sizeof(float));
    float scale = dp->lr / dp->W;
    for (int r = 0; r < dp->W; r++)
        for (int f = 0; f < dp->s.fields; f++)
            for (int i = 0; i < B; i++) {
                size_t at = (size_t)r * FB + (size_t)f * B + i;
                float *row = dp->tables[f] + dp->akeys[at] * D;
                for (size_t k = 0; k < D; k++)
                    row[k] -= scale * dp->agrads[at * D + k];
            }
    return MSR_OK;
}

msr_status_t rec_dp_update(rec_dp_t *dp, const int64_t *keys, int B, const float *grows,
                           const float *gmlp)
{
    msr_status_t st = dp->mode == REC_DP_DENSE ? update_dense(dp, keys, B, grows)
                                               : update_touched(dp, keys, B, grows);
    size_t M = (size_t)rec_mlp_size(&dp->s);
    if (st == MSR_OK)
        st = msr_comm_allreduce(dp->comm, gmlp, dp->gm, M, MSR_DTYPE_F32, MSR_OP_SUM);
    if (st != MSR_OK)
        return st;
    dp->sent += 2 * (uint64_t)(dp->W - 1) * M * sizeof(float) / (uint64_t)dp->W;
    for (size_t j = 0; j < M; j++)
        dp->mlp[j] -= dp->lr / dp->W * dp->gm[j];
    return MSR_OK;
}

uint64_t rec_dp_sent(const rec_dp_t *dp)
{
    return dp->sent;
}
