/* train_rec: a recommendation model trained through the parameter server
 * (docs/ps.md): hashed categorical features into embedding tables, a dense
 * interaction MLP, binary cross-entropy, on a synthetic click log drawn
 * from a known model so that the held-out AUC means something. */
#ifndef MSR_PROGRAMS_TRAIN_REC_REC_H
#define MSR_PROGRAMS_TRAIN_REC_REC_H

#include <stdint.h>

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

#endif
