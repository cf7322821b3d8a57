/* The body of the float GELU (model/gelu.c), forward and backward with
 * its exp, and the softmax's exponentials and their sum, written once for
 * one path: model/simd_paths.h includes this
 * file once per path, with vec, veci, NV, PATH and TARGET defined as it
 * says. Each lane repeats msr_gelu_exp and the scalar loops operation for
 * operation (IEEE multiplies, adds, divides; the same grouping), and the
 * elements past the last whole vector go to the scalar loops, so every
 * path gives the scalar loop's bits at every position.
 *
 * No include guard: meant to be included more than once. */

#define GW (16 / NV) /* floats a vector */

/* every lane c (no constant here is -0, which 0 + c would turn to +0) */
#define SPLAT(c) ((vec){0} + (c))

/* m ? a : b lane by lane, m a comparison's lanes (all ones or zero) */
TARGET BODY vec PATH(select)(veci m, vec a, vec b)
{
    return (vec)((m & (veci)a) | (~m & (veci)b));
}

/* msr_gelu_exp on each lane, the same operations in the same order */
TARGET BODY vec PATH(exp_v)(vec x)
{
    vec c = PATH(select)(x < EXP_HI, x, SPLAT(EXP_HI));
    c = PATH(select)(c > EXP_LO, c, SPLAT(EXP_LO));
    vec n = (c * EXP_LOG2E + EXP_SHIFTER) - EXP_SHIFTER;
    vec r = c - n * EXP_LN2_HI;
    r = r - n * EXP_LN2_LO;
    vec p = SPLAT(EXP_P0);
    p = p * r + EXP_P1;
    p = p * r + EXP_P2;
    p = p * r + EXP_P3;
    p = p * r + EXP_P4;
    p = p * r + EXP_P5;
    p = (p * (r * r) + r) + 1.0f;
    /* n is an integer in [-151, 129]: truncation is exact, and n1 + 127
     * and ni - n1 + 127 are normal exponents */
    veci ni = __builtin_convertvector(n, veci), n1 = ni >> 1; /* arithmetic: floor(n / 2) */
    vec e = (p * (vec)((n1 + 127) << 23)) * (vec)((ni - n1 + 127) << 23);
    return PATH(select)(x != x, x, e); /* a NaN comes back as itself */
}

/* exp(-2u), u = S (x + A x^3), as the scalar loops group it */
TARGET BODY vec PATH(exp_m2u)(vec x)
{
    vec u = GELU_S * (x + GELU_A * x * x * x);
    return PATH(exp_v)(-2.0f * u);
}

TARGET static void PATH(gelu_forward)(float *out, const float *inp, size_t n)
{
    size_t i = 0;
    vec x;
    for (; i + GW <= n; i += GW) {
        LOAD(x, inp + i);
        vec y = x / (1.0f + PATH(exp_m2u)(x));
        STORE(out + i, y);
    }
    msr_gelu_forward_scalar(out + i, inp + i, n - i);
}

TARGET static void PATH(gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n)
{
    size_t i = 0;
    vec x, d, dy;
    for (; i + GW <= n; i += GW) {
        LOAD(x, inp + i);
        vec s = 1.0f / (1.0f + PATH(exp_m2u)(x));
        vec du = GELU_S * (1.0f + GELU_3A * x * x);
        vec g = s + 2.0f * x * s * (1.0f - s) * du;
        LOAD(d, dinp + i);
        LOAD(dy, dout + i);
        d = d + g * dy;
        STORE(dinp + i, d);
    }
    msr_gelu_backward_scalar(dinp + i, inp + i, dout + i, n - i);
}

/* msr_softmax_exp_sum: the 16 running sums of the scalar form are NV
 * vectors here (lane l of vector k is sum k * GW + l), each adding its
 * elements' exps in the same order; the tail's exps are taken on a
 * block of 16 padded with zeros (exp_v's lanes are msr_gelu_exp's bits),
 * and the fold is the scalar form's own (exp_sum_fold) */
TARGET static float PATH(softmax_exp_sum)(float *x, float mx, size_t n)
{
    vec acc[NV], e;
    for (int k = 0; k < NV; k++)
        acc[k] = SPLAT(0.0f);
    size_t i = 0;
    for (; i + EXP_SUM_LANES <= n; i += EXP_SUM_LANES) {
        for (int k = 0; k < NV; k++) {
            LOAD(e, x + i + (size_t)k * GW);
            e = PATH(exp_v)(e - mx);
            STORE(x + i + (size_t)k * GW, e);
            acc[k] = acc[k] + e;
        }
    }
    if (i < n) {
        float pad[EXP_SUM_LANES] = {0};
        memcpy(pad, x + i, (n - i) * sizeof *x);
        for (int k = 0; k < NV; k++) {
            LOAD(e, pad + k * GW);
            e = PATH(exp_v)(e - mx);
            STORE(pad + k * GW, e);
        }
        memcpy(x + i, pad, (n - i) * sizeof *x);
    }
    float lane[EXP_SUM_LANES];
    for (int k = 0; k < NV; k++)
        STORE(lane + k * GW, acc[k]);
    return exp_sum_fold(lane, x + i, n - i);
}

/* msr_swiglu_forward and _backward: each row's whole vectors, then its
 * tail through the scalar rows; the lanes repeat them operation for
 * operation */
TARGET static void PATH(swiglu_forward)(float *out, const float *inp, int N, int F)
{
    vec a, u;
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *up = g + F;
        float *o = out + (size_t)n * F;
        size_t i = 0;
        for (; i + GW <= (size_t)F; i += GW) {
            LOAD(a, g + i);
            LOAD(u, up + i);
            vec y = a / (1.0f + PATH(exp_v)(-a)) * u;
            STORE(o + i, y);
        }
        swiglu_forward_row(o + i, g + i, up + i, (size_t)F - i);
    }
}

TARGET static void PATH(swiglu_backward)(float *dinp, const float *inp, const float *dout, int N,
                                         int F)
{
    vec a, u, d, da, du;
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *up = g + F, *dy = dout + (size_t)n * F;
        float *dg = dinp + (size_t)n * 2 * F, *dup = dg + F;
        size_t i = 0;
        for (; i + GW <= (size_t)F; i += GW) {
            LOAD(a, g + i);
            LOAD(u, up + i);
            LOAD(d, dy + i);
            LOAD(da, dg + i);
            LOAD(du, dup + i);
            vec s = 1.0f / (1.0f + PATH(exp_v)(-a));
            da = da + d * u * s * (1.0f + a * (1.0f - s));
            du = du + d * a * s;
            STORE(dg + i, da);
            STORE(dup + i, du);
        }
        swiglu_backward_row(dg + i, dup + i, g + i, up + i, dy + i, (size_t)F - i);
    }
}

static const gelu_kernels_t PATH(kernels) = {PATH(gelu_forward), PATH(gelu_backward),
                                             PATH(softmax_exp_sum), PATH(swiglu_forward),
                                             PATH(swiglu_backward)};

#undef SPLAT
#undef GW
