/* The bodies of the float LayerNorm and RMSNorm (model/norm.c), written
 * once for one path: model/simd_paths.h includes this file once per path,
 * with vec, NV, PATH and TARGET defined as it says. Lane l of the 16 is
 * lane l % W of vector l / W, so every path adds the same elements in the
 * same order.
 *
 * No include guard: meant to be included more than once. */

#define W (LANES / NV)

/* acc[0..NV) = 0 */
#define ZERO(acc)                  \
    for (int j = 0; j < NV; j++) { \
        (acc)[j] = (vec){0};       \
    }

/* out = (x - mean) * rstd * weight + bias, one row */
TARGET BODY void PATH(layernorm_forward_row)(float *o, float *mean, float *rstd, const float *x,
                                             const float *weight, const float *bias, int C)
{
    int cv = body_len(C);
    vec acc[NV], v, w, b;
    ZERO(acc);
    for (int c = 0; c < cv; c += LANES) {
        for (int j = 0; j < NV; j++) {
            LOAD(v, x + c + j * W);
            acc[j] += v;
        }
    }
    float m = fold(acc);
    for (int c = cv; c < C; c++)
        m += x[c];
    m = m / (float)C;
    ZERO(acc);
    for (int c = 0; c < cv; c += LANES) {
        for (int j = 0; j < NV; j++) {
            LOAD(v, x + c + j * W);
            v -= m;
            acc[j] += v * v;
        }
    }
    float var = fold(acc);
    for (int c = cv; c < C; c++) {
        float d = x[c] - m;
        var += d * d;
    }
    var = var / (float)C;
    float s = 1.0f / sqrtf(var + (float)MSR_LAYERNORM_EPS);
    for (int c = 0; c < cv; c += W) {
        LOAD(v, x + c);
        LOAD(w, weight + c);
        LOAD(b, bias + c);
        v = (v - m) * s * w + b;
        STORE(o + c, v);
    }
    for (int c = cv; c < C; c++)
        o[c] = (x[c] - m) * s * weight[c] + bias[c];
    *mean = m;
    *rstd = s;
}

/* With xhat = (x - mean) * rstd and g = dout * weight:
 * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); one row, dweight and
 * dbias += its share. */
TARGET BODY void PATH(layernorm_backward_row)(float *dx, float *dweight, float *dbias,
                                              const float *d, const float *x, const float *weight,
                                              float m, float s, int C)
{
    int cv = body_len(C);
    vec ga[NV], gxa[NV], v, dv, w, g, xhat, t;
    ZERO(ga);
    ZERO(gxa);
    for (int c = 0; c < cv; c += LANES) {
        for (int j = 0; j < NV; j++) {
            LOAD(v, x + c + j * W);
            LOAD(dv, d + c + j * W);
            LOAD(w, weight + c + j * W);
            xhat = (v - m) * s;
            g = dv * w;
            ga[j] += g;
            gxa[j] += g * xhat;
        }
    }
    float gmean = fold(ga), gxmean = fold(gxa);
    for (int c = cv; c < C; c++) {
        float xh = (x[c] - m) * s, gc = d[c] * weight[c];
        gmean += gc;
        gxmean += gc * xh;
    }
    gmean = gmean / (float)C;
    gxmean = gxmean / (float)C;
    for (int c = 0; c < cv; c += W) {
        LOAD(v, x + c);
        LOAD(dv, d + c);
        LOAD(w, weight + c);
        xhat = (v - m) * s;
        g = dv * w;
        LOAD(t, dbias + c);
        t += dv;
        STORE(dbias + c, t);
        LOAD(t, dweight + c);
        t += xhat * dv;
        STORE(dweight + c, t);
        LOAD(t, dx + c);
        t += s * (g - gmean - xhat * gxmean);
        STORE(dx + c, t);
    }
    for (int c = cv; c < C; c++) {
        float xh = (x[c] - m) * s, gc = d[c] * weight[c];
        dbias[c] += d[c];
        dweight[c] += xh * d[c];
        dx[c] += s * (gc - gmean - xh * gxmean);
    }
}

/* out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps), one row */
TARGET BODY void PATH(rmsnorm_forward_row)(float *o, float *rstd, const float *x,
                                           const float *weight, int C)
{
    int cv = body_len(C);
    vec acc[NV], v, w;
    ZERO(acc);
    for (int c = 0; c < cv; c += LANES) {
        for (int j = 0; j < NV; j++) {
            LOAD(v, x + c + j * W);
            acc[j] += v * v;
        }
    }
    float ss = fold(acc);
    for (int c = cv; c < C; c++)
        ss += x[c] * x[c];
    float s = 1.0f / sqrtf(ss / (float)C + (float)MSR_RMSNORM_EPS);
    for (int c = 0; c < cv; c += W) {
        LOAD(v, x + c);
        LOAD(w, weight + c);
        v = v * s * w;
        STORE(o + c, v);
    }
    for (int c = cv; c < C; c++)
        o[c] = x[c] * s * weight[c];
    *rstd = s;
}

/* With xhat = x * rstd and g = dout * weight:
 * dx = rstd * (g - xhat * mean(g * xhat)); one row, dweight += its share. */
TARGET BODY void PATH(rmsnorm_backward_row)(float *dx, float *dweight, const float *d,
                                            const float *x, const float *weight, float s, int C)
{
    int cv = body_len(C);
    vec acc[NV], v, dv, w, xhat, t;
    ZERO(acc);
    for (int c = 0; c < cv; c += LANES) {
        for (int j = 0; j < NV; j++) {
            LOAD(v, x + c + j * W);
            LOAD(dv, d + c + j * W);
            LOAD(w, weight + c + j * W);
            acc[j] += dv * w * v * s;
        }
    }
    float gx = fold(acc);
    for (int c = cv; c < C; c++)
        gx += d[c] * weight[c] * x[c] * s;
    gx = gx / (float)C;
    for (int c = 0; c < cv; c += W) {
        LOAD(v, x + c);
        LOAD(dv, d + c);
        LOAD(w, weight + c);
        xhat = v * s;
        LOAD(t, dweight + c);
        t += xhat * dv;
        STORE(dweight + c, t);
        LOAD(t, dx + c);
        t += s * (dv * w - xhat * gx);
        STORE(dx + c, t);
    }
    for (int c = cv; c < C; c++) {
        float xh = x[c] * s;
        dweight[c] += xh * d[c];
        dx[c] += s * (d[c] * weight[c] - xh * gx);
    }
}

/* ---- the four kernels over N rows ---- */

TARGET static void PATH(layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                                           const float *weight, const float *bias, int N, int C)
{
    for (int n = 0; n < N; n++) {
        size_t r = (size_t)n * (size_t)C;
        PATH(layernorm_forward_row)(out + r, mean + n, rstd + n, inp + r, weight, bias, C);
    }
}

TARGET static void PATH(layernorm_backward)(float *dinp, float *dweight, float *dbias,
                                            const float *dout, const float *inp,
                                            const float *weight, const float *mean,
                                            const float *rstd, int N, int C)
{
    for (int n = 0; n < N; n++) {
        size_t r = (size_t)n * (size_t)C;
        PATH(layernorm_backward_row)
        (dinp + r, dweight, dbias, dout + r, inp + r, weight, mean[n], rstd[n], C);
    }
}

TARGET static void PATH(rmsnorm_forward)(float *out, float *rstd, const float *inp,
                                         const float *weight, int N, int C)
{
    for (int n = 0; n < N; n++) {
        size_t r = (size_t)n * (size_t)C;
        PATH(rmsnorm_forward_row)(out + r, rstd + n, inp + r, weight, C);
    }
}

TARGET static void PATH(rmsnorm_backward)(float *dinp, float *dweight, const float *dout,
                                          const float *inp, const float *weight, const float *rstd,
                                          int N, int C)
{
    for (int n = 0; n < N; n++) {
        size_t r = (size_t)n * (size_t)C;
        PATH(rmsnorm_backward_row)(dinp + r, dweight, dout + r, inp + r, weight, rstd[n], C);
    }
}

static const msr_norm_kernels_t PATH(kernels) = {
    PATH(layernorm_forward),
    PATH(layernorm_backward),
    PATH(rmsnorm_forward),
    PATH(rmsnorm_backward),
};

#undef ZERO
#undef W
