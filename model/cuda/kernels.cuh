/* The CUDA model's kernels (gpt_cuda_pass.cu includes this once): each the
 * CPU kernel of the same name in model/layers_impl.h, one thread per
 * element or one warp per row. Needs WARP and GRID_STRIDE from
 * gpt_cuda_impl.cuh. */
#ifndef MSR_PARALLEL_CUDA_KERNELS_CUH
#define MSR_PARALLEL_CUDA_KERNELS_CUH

/* Rows handled by one warp each, grid-stride. */
#define WARP_ROWS(row, rows)                                                                \
    for (size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP; row < (rows); \
         row += (size_t)gridDim.x * blockDim.x / WARP)

__device__ static float warp_sum(float x)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__device__ static float warp_max(float x)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* ---- kernels (each the CPU kernel of the same name in layers_impl.h) ---- */

/* dst[i] = src[i] rounded to bf16 (nearest, ties to even), as the CPU's
 * msr_bf16_from_f32_n: a product's operand under --precision bf16 */
__global__ static void round_bf16_k(__nv_bfloat16 *dst, const float *src, size_t n)
{
    GRID_STRIDE(i, n)
    dst[i] = __float2bfloat16_rn(src[i]);
}

/* out (N,C) = wte[inp[n]] + wpe[n % T] */
__global__ static void encoder_forward_k(float *out, const int *inp, const float *wte,
                                         const float *wpe, size_t N, int T, int C)
{
    GRID_STRIDE(i, N * (size_t)C)
    {
        size_t n = i / (size_t)C, c = i % (size_t)C, t = n % (size_t)T;
        out[i] = wte[(size_t)inp[n] * C + c] + wpe[t * C + c];
    }
}

/* dwte (V,C) += the rows of dout (N,C) by token, the positions grouped by
 * token (pos, start, id: gpt_cuda_pass.cu's group_tokens): one thread per
 * distinct token and channel, adding that token's rows in order of
 * position, so each element sees the CPU's additions in the CPU's order. */
__global__ static void encoder_backward_wte_k(float *dwte, const float *dout, const int *pos,
                                              const int *start, const int *id, size_t U, int C)
{
    GRID_STRIDE(i, U * (size_t)C)
    {
        size_t u = i / (size_t)C, c = i % (size_t)C;
        float *g = dwte + (size_t)id[u] * C + c;
        float acc = *g;
        for (int p = start[u]; p < start[u + 1]; p++)
            acc += dout[(size_t)pos[p] * C + c];
        *g = acc;
    }
}

/* out[n, j] = bias[j]: a matmul's starting value (then += the product) */
__global__ static void bias_fill_k(float *out, const float *bias, size_t N, int OC)
{
    GRID_STRIDE(i, N * (size_t)OC)
    out[i] = bias[i % (size_t)OC];
}

/* One warp per row: mean, rstd, out = (x - mean) * rstd * w + b. */
__global__ static void layernorm_forward_k(float *out, float *mean, float *rstd, const float *inp,
                                           const float *weight, const float *bias, size_t N, int C)
{
    int lane = threadIdx.x % WARP;
    WARP_ROWS(n, N)
    {
        const float *x = inp + n * C;
        float *o = out + n * C;
        float s = 0.0f;
        for (int c = lane; c < C; c += WARP)
            s += x[c];
        float m = warp_sum(s) / (float)C;
        float v = 0.0f;
        for (int c = lane; c < C; c += WARP) {
            float d = x[c] - m;
            v += d * d;
        }
        v = warp_sum(v) / (float)C;
        float r = 1.0f / sqrtf(v + (float)MSR_LAYERNORM_EPS);
        for (int c = lane; c < C; c += WARP)
            o[c] = (x[c] - m) * r * weight[c] + bias[c];
        if (lane == 0) {
            mean[n] = m;
            rstd[n] = r;
        }
    }
}

/* One warp per row: dinp (N,C) += rstd * (g - mean(g) - xhat * mean(g xhat)),
 * g = dout * w; tmp (N,C) = xhat * dout (summed over rows by the caller for
 * the weight's gradient). */
__global__ static void layernorm_backward_k(float *dinp, float *tmp, const float *dout,
                                            const float *inp, const float *weight,
                                            const float *mean, const float *rstd, size_t N, int C)
{
    int lane = threadIdx.x % WARP;
    WARP_ROWS(n, N)
    {
        const float *x = inp + n * C, *d = dout + n * C;
        float *dx = dinp + n * C, *t = tmp + n * C;
        float m = mean[n], s = rstd[n];
        float gm = 0.0f, gxm = 0.0f;
        for (int c = lane; c < C; c += WARP) {
            float xhat = (x[c] - m) * s;
            float g = d[c] * weight[c];
            gm += g;
            gxm += g * xhat;
        }
        gm = warp_sum(gm) / (float)C;
        gxm = warp_sum(gxm) / (float)C;
        for (int c = lane; c < C; c += WARP) {
            float xhat = (x[c] - m) * s;
            float g = d[c] * weight[c];
            t[c] = xhat * d[c];
            dx[c] += s * (g - gm - xhat * gxm);
        }
    }
}

/* Causal softmax of rows (rows, T) of att in place, row r being query
 * r % T: entries j <= i normalised, the rest 0. One warp per row. */
__global__ static void softmax_causal_k(float *att, size_t rows, int T)
{
    int lane = threadIdx.x % WARP;
    WARP_ROWS(r, rows)
    {
        float *row = att + r * T;
        int i = (int)(r % (size_t)T);
        float mx = -INFINITY;
        for (int j = lane; j <= i; j += WARP)
            mx = fmaxf(mx, row[j]);
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int j = lane; j <= i; j += WARP) {
            float e = expf(row[j] - mx);
            row[j] = e;
            sum += e;
        }
        float inv = 1.0f / warp_sum(sum);
        for (int j = lane; j <= i; j += WARP)
            row[j] *= inv;
        for (int j = i + 1 + lane; j < T; j += WARP)
            row[j] = 0.0f;
    }
}

/* Softmax backward on rows of (att, datt): datt = att * (datt - rowsum(att *
 * datt)) for j <= i, 0 above. One warp per row. */
__global__ static void softmax_causal_backward_k(float *datt, const float *att, size_t rows, int T)
{
    int lane = threadIdx.x % WARP;
    WARP_ROWS(r, rows)
    {
        const float *a = att + r * T;
        float *d = datt + r * T;
        int i = (int)(r % (size_t)T);
        float dot = 0.0f;
        for (int j = lane; j <= i; j += WARP)
            dot += a[j] * d[j];
        dot = warp_sum(dot);
        for (int j = lane; j <= i; j += WARP)
            d[j] = a[j] * (d[j] - dot);
        for (int j = i + 1 + lane; j < T; j += WARP)
            d[j] = 0.0f;
    }
}

#define GELU_S 0.7978845608028654f
#define GELU_A 0.044715f

__global__ static void gelu_forward_k(float *out, const float *inp, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = inp[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        out[i] = x / (1.0f + expf(-2.0f * u));
    }
}

__global__ static void gelu_backward_k(float *dinp, const float *inp, const float *dout, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float x = inp[i];
        float u = GELU_S * (x + GELU_A * x * x * x);
        float s = 1.0f / (1.0f + expf(-2.0f * u));
        float du = GELU_S * (1.0f + 3.0f * GELU_A * x * x);
        float g = s + 2.0f * x * s * (1.0f - s) * du;
        dinp[i] += g * dout[i];
    }
}

__global__ static void residual_forward_k(float *out, const float *a, const float *b, size_t n)
{
    GRID_STRIDE(i, n)
    out[i] = a[i] + b[i];
}

/* One warp per row: probs = softmax(logits), loss = max + log(sum) - l[t]. */
__global__ static void crossentropy_forward_k(float *losses, float *probs, const float *logits,
                                              const int *targets, size_t N, int V)
{
    int lane = threadIdx.x % WARP;
    WARP_ROWS(n, N)
    {
        const float *l = logits + n * V;
        float *p = probs + n * V;
        float mx = -INFINITY;
        for (int i = lane; i < V; i += WARP)
            mx = fmaxf(mx, l[i]);
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int i = lane; i < V; i += WARP) {
            float e = expf(l[i] - mx);
            p[i] = e;
            sum += e;
        }
        sum = warp_sum(sum);
        float inv = 1.0f / sum;
        for (int i = lane; i < V; i += WARP)
            p[i] *= inv;
        if (lane == 0)
            losses[n] = mx + logf(sum) - l[targets[n]];
    }
}

/* dlogits += probs * dloss, then -= dloss at the target (two roundings, as
 * the CPU kernel). */
__global__ static void crossentropy_backward_k(float *dlogits, const float *probs,
                                               const int *targets, float dloss, size_t N, int V)
{
    GRID_STRIDE(i, N * (size_t)V)
    {
        size_t n = i / (size_t)V;
        int j = (int)(i % (size_t)V);
        float d = dlogits[i] + probs[i] * dloss;
        if (j == targets[n])
            d -= dloss;
        dlogits[i] = d;
    }
}

#endif
