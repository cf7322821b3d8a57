/* train_rec: a recommendation model trained through the parameter server
 * (docs/ps.md): hashed categorical features into embedding tables, a dense
 * interaction MLP, binary cross-entropy, on a synthetic click log drawn
 * from a known model so that the held-out AUC means something. */
#ifndef MSR_PROGRAMS_TRAIN_REC_REC_H
#define MSR_PROGRAMS_TRAIN_REC_REC_H

#include <stdint.h>

#include "msrun/comm.h"

/* The model's and the log's shape. */
typedef struct rec_shape {
    int fields;    /* F categorical fields, one embedding table each */
    int dim;       /* D: an embedding row's width */
    int hidden;    /* H: the MLP's hidden width */
    int64_t rows;  /* rows of each table (feature ids hash into them) */
    int64_t vocab; /* distinct values of a field in the log */
    uint64_t seed; /* the log's generating model */
} rec_shape_t;

/* A sample: its F values and its label. */
typedef struct rec_sample {
    int64_t value[16]; /* value[f] in [0, vocab) */
    float label;       /* 0 or 1 */
    float truth;       /* the generating model's logit */
} rec_sample_t;
#define REC_FIELDS_MAX 16

/* rec_data.c: sample idx of the log (train samples and held-out ones are
 * disjoint ranges of idx), drawn from the generating model. */
void rec_sample(const rec_shape_t *s, uint64_t idx, rec_sample_t *out);
/* The table row of field f's value v (a hash, as production systems do). */
int64_t rec_key(const rec_shape_t *s, int f, int64_t v);
/* Area under the ROC curve of scores against labels (n of each); sorts a
 * copy. -1 when out of memory or one class is missing. */
double rec_auc(const float *score, const float *label, int n);

/* rec_model.c: the MLP's parameters in one flat vector (a dense table of
 * one row): W1 (H, F*D), b1 (H), w2 (H), b2 (1). */
int rec_mlp_size(const rec_shape_t *s);
/* One sample through the MLP: x (F*D) its embedding rows in field order;
 * returns the click probability and adds the binary cross-entropy to
 * *loss_p. With gmlp non-NULL also the backward pass of the loss times
 * scale (1 / batch for a batch's mean): adds the MLP's gradients into gmlp
 * and writes x's into gx (F*D). */
float rec_forward(const rec_shape_t *s, const float *mlp, const float *x, float label, float scale,
                  float *gmlp, float *gx, double *loss_p);

/* The tables' seeds and initial scales, the same in every mode (the
 * parameter server's tables and the replicated ones start alike). Table f
 * < fields is field f's embedding, table fields the MLP. */
uint64_t rec_table_seed(uint64_t seed, int table);
float rec_init_scale(const rec_shape_t *s, int table);

/* rec_dp.c: the baselines of docs/ps.md's side-by-side table, no servers:
 * every rank holds every table (replicated) and either allreduces the
 * whole tables' gradients (REC_DP_DENSE: data parallel as for a dense
 * model) or allgathers the touched rows' keys and gradients
 * (REC_DP_TOUCHED); SGD applied on every rank to the mean. */
typedef enum rec_dp_mode {
    REC_DP_DENSE = 1,
    REC_DP_TOUCHED = 2,
} rec_dp_mode_t;
typedef struct rec_dp rec_dp_t;
/* Allocates and initializes the tables; MSR_ERR_NO_MEMORY. comm stays the
 * caller's and must outlive *dp_p. */
msr_status_t rec_dp_create(const rec_shape_t *s, rec_dp_mode_t mode, float lr, msr_comm_t *comm,
                           rec_dp_t **dp_p);
void rec_dp_destroy(rec_dp_t *dp);
/* rows (F, B, D) gets the keys' (F, B) rows, mlp the MLP. */
void rec_dp_fetch(const rec_dp_t *dp, const int64_t *keys, int B, float *rows, float *mlp);
/* One step's gradients (as for msr_ps_push), averaged over the ranks and
 * applied; collective. */
msr_status_t rec_dp_update(rec_dp_t *dp, const int64_t *keys, int B, const float *grows,
                           const float *gmlp);
/* Bytes this rank sent so far (a ring's: the allreduce of n bytes sends
 * 2 (W-1)/W n, the allgather of n bytes a rank (W-1) n). */
uint64_t rec_dp_sent(const rec_dp_t *dp);

#endif
