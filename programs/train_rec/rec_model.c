/* train_rec's interaction MLP: concatenated embeddings (F*D) -> ReLU (H)
 * -> a logit, forward and backward for one sample. */
#include <math.h>
#include <string.h>

#include "rec.h"

int rec_mlp_size(const rec_shape_t *s)
{
    int in = s->fields * s->dim;
    return s->hidden * in + s->hidden + s->hidden + 1;
}

float rec_forward(const rec_shape_t *s, const float *mlp, const float *x, float label, float scale,
                  float *gmlp, float *gx, double *loss_p)
{
    int in = s->fields * s->dim, H = s->hidden;
    const float *W1 = mlp, *b1 = W1 + H * in, *w2 = b1 + H, *b2 = w2 + H; /* (H, in) (H) (H) (1) */
    float h[256];                                                         /* (H) */
    float z = b2[0];
    for (int j = 0; j < H; j++) {
        float a = b1[j];
        for (int i = 0; i < in; i++)
            a += W1[j * in + i] * x[i];
        h[j] = a > 0 ? a : 0;
        z += w2[j] * h[j];
    }
    float p = 1.0f / (1.0f + expf(-z));
    /* log(1 + e^-z) for a click, log(1 + e^z) for none: stable for any z */
    double lz = label > 0.5f ? -z : z;
    *loss_p += lz > 0 ? lz + log1p(exp(-lz)) : log1p(exp(lz));
    if (gmlp == NULL)
        return p;
    float dz = (p - label) * scale;
    float *gW1 = gmlp, *gb1 = gW1 + H * in, *gw2 = gb1 + H, *gb2 = gw2 + H;
    gb2[0] += dz;
    memset(gx, 0, (size_t)in * sizeof *gx);
    for (int j = 0; j < H; j++) {
        gw2[j] += dz * h[j];
        if (h[j] <= 0)
            continue;
        float dh = dz * w2[j];
        gb1[j] += dh;
        for (int i = 0; i < in; i++) {
            gW1[j * in + i] += dh * x[i];
            gx[i] += dh * W1[j * in + i];
        }
    }
    return p;
}

uint64_t rec_table_seed(uint64_t seed, int table)
{
    return seed * 131 + (uint64_t)table;
}

float rec_init_scale(const rec_shape_t *s, int table)
{
    /* embeddings small; the MLP's first layer He-like */
    return table < s->fields ? 0.05f : (float)sqrt(2.0 / (s->fields * s->dim));
}
