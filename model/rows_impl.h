/* The softmax rows' kernels of the layer kernels (model/layers_impl.h,
 * which includes this once per scalar type `real`, LAYER naming the
 * functions for it): the attention's rows and the loss's.
 *
 * No include guard: meant to be included more than once. */

/* Attention's softmax rows, a block of ATT_LANES elements at a time in a
 * loop of a fixed length over arrays that do not overlap, which the
 * compiler turns into vector instructions (as bias_backward's sums):
 * row_max gives what the loop m = x[j] > m ? x[j] : m from m = x[0] gives
 * (a NaN x[0] stays, a later NaN is passed over), in ATT_LANES running
 * maxima folded the same way; the one difference, the sign of a zero
 * maximum, x - m does not see (x - 0 and x - (-0) are equal, but for x
 * a zero, where exp gives 1 either way). row_scale and row_softmax_grad
 * are elementwise: the plain loops' bits; row_exp_sum and row_dot add in
 * lanes (below), their own fixed order. */
#define ATT_LANES 16
static real LAYER(row_max)(const real *restrict x, int n)
{
    real lane[ATT_LANES];
    for (int l = 0; l < ATT_LANES; l++)
        lane[l] = x[0];
    int J = n - n % ATT_LANES;
    for (int j0 = 0; j0 < J; j0 += ATT_LANES)
        for (int l = 0; l < ATT_LANES; l++)
            lane[l] = x[j0 + l] > lane[l] ? x[j0 + l] : lane[l];
    real m = x[0];
    for (int l = 0; l < ATT_LANES; l++)
        m = lane[l] > m ? lane[l] : m;
    for (int j = J; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

/* x (n) *= s */
static void LAYER(row_scale)(real *restrict x, real s, int n)
{
    int J = n - n % ATT_LANES;
    for (int j0 = 0; j0 < J; j0 += ATT_LANES)
        for (int l = 0; l < ATT_LANES; l++)
            x[j0 + l] *= s;
    for (int j = J; j < n; j++)
        x[j] *= s;
}

/* x (n) = exp(x - m), returning their sum: in float the model's own exp
 * and 16 running sums on the CPU's vectors (msr_softmax_exp_sum, model/
 * gelu.c), in double the plain loop */
static real LAYER(row_exp_sum)(real *restrict x, real m, int n)
{
#ifdef LAYERS_OWN_GELU
    return msr_softmax_exp_sum(x, m, (size_t)n);
#else
    real sum = 0;
    for (int j = 0; j < n; j++) {
        x[j] = exp(x[j] - m);
        sum += x[j];
    }
    return sum;
#endif
}

/* sum over j < n of a[j] b[j], in ATT_LANES running sums (lane l takes
 * the elements l, l + ATT_LANES, ... of the whole blocks) added in lane
 * order, then the rest in order */
static real LAYER(row_dot)(const real *restrict a, const real *restrict b, int n)
{
    real lane[ATT_LANES] = {0};
    int J = n - n % ATT_LANES;
    for (int j0 = 0; j0 < J; j0 += ATT_LANES)
        for (int l = 0; l < ATT_LANES; l++)
            lane[l] += a[j0 + l] * b[j0 + l];
    real dot = 0;
    for (int l = 0; l < ATT_LANES; l++)
        dot += lane[l];
    for (int j = J; j < n; j++)
        dot += a[j] * b[j];
    return dot;
}

/* d (n) = a (n) * (d - dot), the softmax backward of a row */
static void LAYER(row_softmax_grad)(real *restrict d, const real *restrict a, real dot, int n)
{
    int J = n - n % ATT_LANES;
    for (int j0 = 0; j0 < J; j0 += ATT_LANES)
        for (int l = 0; l < ATT_LANES; l++)
            d[j0 + l] = a[j0 + l] * (d[j0 + l] - dot);
    for (int j = J; j < n; j++)
        d[j] = a[j] * (d[j] - dot);
}
#undef ATT_LANES
