/* train_rec's synthetic click log: values drawn with a heavy head (a few
 * values in most samples, as item and user ids are), labels drawn from a
 * known logistic model with one interaction of two fields; and the AUC. */
#include <math.h>
#include <stdlib.h>

#include "rec.h"

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit(uint64_t z)
{
    return (double)(mix(z) >> 11) / (double)(1ull << 53);
}

/* The generating model's weight of a (field, value) and of a pair. */
static double weight(uint64_t seed, uint64_t f, uint64_t v)
{
    return 3.0 * unit(seed ^ mix(f * 0x1000193u + v * 0x100000001B3ull)) - 1.5;
}

void rec_sample(const rec_shape_t *s, uint64_t idx, rec_sample_t *out)
{
    uint64_t base = mix(s->seed * 0x51ED27u + idx);
    double logit = -0.5;
    for (int f = 0; f < s->fields; f++) {
        /* v = vocab^u - 1: value v has about 1/(v+1) of the mass */
        double u = unit(base + (uint64_t)f);
        int64_t v = (int64_t)floor(pow((double)s->vocab, u)) - 1;
        out->value[f] = v < 0 ? 0 : v >= s->vocab ? s->vocab - 1 : v;
        logit += weight(s->seed, (uint64_t)f, (uint64_t)out->value[f]);
    }
    if (s->fields >= 2) /* the interaction the MLP must find */
        logit += weight(s->seed, 99, (uint64_t)out->value[0] * 1000003u + (uint64_t)out->value[1]);
    out->truth = (float)logit;
    out->label = unit(base + 1000) < 1.0 / (1.0 + exp(-logit)) ? 1.0f : 0.0f;
}

int64_t rec_key(const rec_shape_t *s, int f, int64_t v)
{
    return (int64_t)(mix(((uint64_t)f << 48) ^ (uint64_t)v) % (uint64_t)s->rows);
}

typedef struct scored {
    float score, label;
} scored_t;

static int by_score(const void *a, const void *b)
{
    float x = ((const scored_t *)a)->score, y = ((const scored_t *)b)->score;
    return x < y ? -1 : x > y;
}

double rec_auc(const float *score, const float *label, int n)
{
    scored_t *v = malloc((size_t)n * sizeof *v);
    if (v == NULL)
        return -1;
    for (int i = 0; i < n; i++)
        v[i] = (scored_t){score[i], label[i]};
    qsort(v, (size_t)n, sizeof *v, by_score);
    /* the rank-sum (Mann-Whitney) form, ties sharing their mean rank */
    double pos = 0, rank_sum = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && v[j].score == v[i].score)
            j++;
        double mean_rank = (i + 1 + j) / 2.0;
        for (int k = i; k < j; k++)
            if (v[k].label > 0.5f) {
                pos++;
                rank_sum += mean_rank;
            }
        i = j;
    }
    free(v);
    double neg = n - pos;
    if (pos == 0 || neg == 0)
        return -1;
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}
