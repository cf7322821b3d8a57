/* Causal attention on the tensor cores for --precision bf16 (gpt_cuda_pass.cu
 * includes this once, after kernels.cuh): the products of
 * attention_forward/backward in bf16 with fp32 sums, computed a tile of 64
 * queries by 64 keys at a time, so the (B, NH, T, T) scores and
 * probabilities never go to device memory.
 *
 * It rounds where the CPU's bf16 path rounds (model/layers_impl.h,
 * attention_gqa_forward and attention_backward_beta), and nowhere else:
 * q, k, v and dout are rounded as a tile is loaded, att before att V and
 * att^T dout, dpre before dpre K and dpre^T Q; scores, the softmax, its
 * gradient and every sum stay fp32. So each operand is the CPU's up to the
 * order of fp32 sums, and the test tolerance of the materialised bf16 path
 * (tests/parallel/cuda/test_cuda_gpt.c) holds unchanged:
 *
 *   forward, per query tile: pass 1 walks the key tiles for each row's
 *     max m and sum l = sum exp(s - m) (rescaled as m grows); pass 2
 *     computes the scores again, att = exp(s - m) * (1/l) exactly as the
 *     CPU's softmax does, rounds it and adds att V. It keeps m and 1/l.
 *   backward: dot_k, per query tile, rowsum(att * datt) with datt = dout
 *     V^T (the CPU's softmax-gradient dot); dkv_k, per key tile, walks the
 *     query tiles for dV += att^T dout and dK += dpre^T Q, dpre = att *
 *     (datt - dot); dq_k, per query tile, walks the key tiles for dQ +=
 *     dpre K. Each output has one writer: no atomics, the same bits every
 *     run.
 *
 * A block is four warps; warp w owns rows [16w, 16w + 16) of a tile's
 * scores. Head sizes 16, 32 and 64 (a multiple of the 16-wide fragments,
 * the tiles in shared memory); other shapes, and GPUs before sm_80, keep
 * the materialised path. */
#ifndef MSR_MODEL_CUDA_FLASH_CUH
#define MSR_MODEL_CUDA_FLASH_CUH

#include <mma.h>

#include <type_traits>

#define FA_TILE    64 /* queries and keys of a tile */
#define FA_THREADS (4 * WARP)
#define FA_LP      (FA_TILE + 8) /* a bf16 row of FA_TILE, padded by 16 bytes */
#define FA_LF      (FA_TILE + 4) /* an fp32 row of FA_TILE, padded by 16 bytes */
/* The softmax's exp: the multi-function unit's (a few fp32 ulps from
 * expf, as the CPU's own exp is; within the order-of-sums differences the
 * tolerance allows), a third of the forward's instructions with expf. */
#define FA_EXP(x)  __expf(x)

/* What every kernel reads: qkv (B, T, 3C) as [q | k | v], dout/out (B, T,
 * C), head h at column h * HS of each part. */
typedef struct fa_shape {
    int T, C, NH;
    float scale;
} fa_shape_t;

/* The shared memory of a kernel with nh bf16 tiles of (FA_TILE, HS), np of
 * (FA_TILE, FA_TILE) and nf fp32 ones of (FA_TILE, FA_TILE): each a
 * multiple of 32 bytes, as wmma's loads need. */
static size_t fa_smem(int HS, int nh, int np, int nf)
{
    return (size_t)nh * FA_TILE * (HS + 8) * 2 + (size_t)np * FA_TILE * FA_LP * 2 +
           (size_t)nf * FA_TILE * FA_LF * 4;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define FA_ARCH 1 /* bf16 fragments: sm_80 on */
#endif

/* A tile of (FA_TILE, HS) fp32 in flight in a thread's registers: its
 * part of rows [r0, r0 + FA_TILE) of a (T, HS) view, 16 bytes at a time.
 * fa_fetch issues every load before any is used, so a tile costs one
 * memory latency, and the loops fetch the next tile before computing on
 * this one; fa_put rounds it into shared memory (FA_TILE, HS + 8). */
template <int HS> struct fa_regs {
    float4 x[FA_TILE * HS / 4 / FA_THREADS];
};

template <int HS>
__device__ static void fa_fetch(fa_regs<HS> &f, const float *g, size_t ld, int r0, int T)
{
#pragma unroll
    for (int u = 0; u < FA_TILE * HS / 4 / FA_THREADS; u++) {
        int e = (int)threadIdx.x + u * FA_THREADS, r = e / (HS / 4), d = 4 * (e % (HS / 4));
        f.x[u] = r0 + r < T ? *(const float4 *)(g + (size_t)(r0 + r) * ld + d)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

/* rows past T are zero */
template <int HS> __device__ static void fa_put(__nv_bfloat16 *s, const fa_regs<HS> &f)
{
#pragma unroll
    for (int u = 0; u < FA_TILE * HS / 4 / FA_THREADS; u++) {
        int e = (int)threadIdx.x + u * FA_THREADS, r = e / (HS / 4), d = 4 * (e % (HS / 4));
        __nv_bfloat162 *o = (__nv_bfloat162 *)(s + r * (HS + 8) + d);
        o[0] = __floats2bfloat162_rn(f.x[u].x, f.x[u].y);
        o[1] = __floats2bfloat162_rn(f.x[u].z, f.x[u].w);
    }
}

/* One tile straight into shared memory. */
template <int HS>
__device__ static void fa_load(__nv_bfloat16 *s, const float *g, size_t ld, int r0, int T)
{
    fa_regs<HS> f;
    fa_fetch<HS>(f, g, ld, r0, T);
    fa_put<HS>(s, f);
}

/* A loop's step to its next tile pair: the pair in flight in a and b
 * put into sa and sb (after every warp is done with the last pair), then
 * tile `next` of ga and gb fetched behind them (next < 0: none). */
template <int HS>
__device__ static void fa_advance(__nv_bfloat16 *sa, __nv_bfloat16 *sb, fa_regs<HS> &a,
                                  fa_regs<HS> &b, const float *ga, size_t lda, const float *gb,
                                  size_t ldb, int next, int T)
{
    __syncthreads();
    fa_put<HS>(sa, a);
    fa_put<HS>(sb, b);
    __syncthreads();
    if (next >= 0) {
        fa_fetch<HS>(a, ga, lda, next * FA_TILE, T);
        fa_fetch<HS>(b, gb, ldb, next * FA_TILE, T);
    }
}

#ifdef FA_ARCH
/* Warp w's rows of S (FA_TILE, FA_LF) = A B^T, A and B (FA_TILE, HS + 8)
 * tiles: rows [16w, 16w + 16) of A against every row of B. */
template <int HS>
__device__ static void fa_abt(float *S, const __nv_bfloat16 *A, const __nv_bfloat16 *Bt, int w)
{
    using namespace nvcuda;
    const int LH = HS + 8;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[HS / 16];
#pragma unroll
    for (int k = 0; k < HS / 16; k++)
        wmma::load_matrix_sync(a[k], A + 16 * w * LH + 16 * k, LH);
#pragma unroll
    for (int n = 0; n < FA_TILE / 16; n++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int k = 0; k < HS / 16; k++) {
            /* B^T's (d, j) is B's (j, d): B read column-major */
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
            wmma::load_matrix_sync(b, Bt + 16 * n * LH + 16 * k, LH);
            wmma::mma_sync(acc, a[k], b, acc);
        }
        wmma::store_matrix_sync(S + 16 * w * FA_LF + 16 * n, acc, FA_LF, wmma::mem_row_major);
    }
}

typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> fa_acc_t;

/* acc[n] (16, 16 each: 16 rows of HS) += P's 16 rows (16, FA_TILE) at p,
 * row stride FA_LP, times X (FA_TILE, HS + 8); P read transposed
 * (column-major) when trans. */
template <int HS, bool trans>
__device__ static void fa_pv(fa_acc_t *acc, const __nv_bfloat16 *p, const __nv_bfloat16 *X)
{
    using namespace nvcuda;
    typedef typename std::conditional<trans, wmma::col_major, wmma::row_major>::type layout;
#pragma unroll
    for (int k = 0; k < FA_TILE / 16; k++) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, layout> a;
        wmma::load_matrix_sync(a, trans ? p + 16 * k * FA_LP : p + 16 * k, FA_LP);
#pragma unroll
        for (int n = 0; n < HS / 16; n++) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
            wmma::load_matrix_sync(b, X + 16 * k * (HS + 8) + 16 * n, HS + 8);
            wmma::mma_sync(acc[n], a, b, acc[n]);
        }
    }
}

/* Warp w's 16 rows of acc (HS wide) through its rows of S: g[row i] =
 * (add ? g[i] : 0) + alpha * acc, for rows r0 + 16w + r < T; g's rows ld
 * apart. */
template <int HS>
__device__ static void fa_store(float *g, size_t ld, int r0, int T, fa_acc_t *acc, float *S, int w,
                                float alpha)
{
    using namespace nvcuda;
    int lane = threadIdx.x % WARP;
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::store_matrix_sync(S + 16 * w * FA_LF + 16 * n, acc[n], FA_LF, wmma::mem_row_major);
    __syncwarp();
    for (int r = 0; r < 16; r++) {
        int i = r0 + 16 * w + r;
        if (i >= T)
            break;
        for (int d = lane; d < HS; d += WARP)
            g[(size_t)i * ld + d] += alpha * S[(16 * w + r) * FA_LF + d];
    }
    __syncwarp();
}
#endif

/* The first element of batch row b, head h, in qkv's q part and in dout. */
#define FA_QKV(qkv, sh, b, h) \
    ((qkv) + (size_t)(b) * (sh).T * 3 * (sh).C + (size_t)(h) * ((sh).C / (sh).NH))
#define FA_OUT(out, sh, b, h) \
    ((out) + (size_t)(b) * (sh).T * (sh).C + (size_t)(h) * ((sh).C / (sh).NH))

/* Row ops: warp w's 16 rows of a tile two threads a row, lane l on row
 * 16w + l/2 and columns 2t + (l & 1), t < 32 (a 2-way bank conflict on
 * the fp32 rows at most); the pair's partial max and sums meet in one
 * shuffle. */
#define FA_ROW(w, lane) (16 * (w) + (lane) / 2)
#define FA_COL(lane, t) (2 * (t) + ((lane)&1))

/* Forward: grid (query tiles, B * NH), the last (longest) tile first;
 * out written, stats (B * NH, T, 2) = m, 1/l. */
template <int HS>
__global__ static void __launch_bounds__(FA_THREADS, 3)
    fa_forward_k(float *out, float *stats, const float *qkv, fa_shape_t sh)
{
#ifdef FA_ARCH
    extern __shared__ __align__(128) unsigned char fa_mem[];
    const int LH = HS + 8, T = sh.T;
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)fa_mem, *sK = sQ + FA_TILE * LH, *sV = sK + FA_TILE * LH;
    __nv_bfloat16 *sP = sV + FA_TILE * LH;
    float *sS = (float *)(sP + FA_TILE * FA_LP);
    int nt = (T + FA_TILE - 1) / FA_TILE, qt = nt - 1 - (int)blockIdx.x;
    int bh = blockIdx.y, b = bh / sh.NH, h = bh % sh.NH;
    int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, r0 = qt * FA_TILE;
    int row = FA_ROW(w, lane), i = r0 + row;
    size_t C3 = 3 * (size_t)sh.C;
    const float *q = FA_QKV(qkv, sh, b, h), *k = q + sh.C, *v = q + 2 * (size_t)sh.C;
    fa_regs<HS> fk, fv;
    fa_fetch<HS>(fk, k, C3, 0, T);
    fa_load<HS>(sQ, q, C3, r0, T);
    /* pass 1: each row's max m and sum l, rescaled as m grows */
    float m = -INFINITY, l = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        fa_put<HS>(sK, fk);
        __syncthreads();
        fa_fetch<HS>(fk, k, C3, kt < qt ? (kt + 1) * FA_TILE : 0, T);
        fa_abt<HS>(sS, sQ, sK, w);
        __syncwarp();
        const float *srow = sS + row * FA_LF;
        int lim = i - kt * FA_TILE; /* columns <= lim are the row's keys */
        float mx = -INFINITY;
#pragma unroll 8
        for (int t = 0; t < FA_TILE / 2; t++) {
            int c = FA_COL(lane, t);
            if (c <= lim)
                mx = fmaxf(mx, srow[c] * sh.scale);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float mn = fmaxf(m, mx), e = 0.0f;
        if (i < T) {
#pragma unroll 8
            for (int t = 0; t < FA_TILE / 2; t++) {
                int c = FA_COL(lane, t);
                if (c <= lim)
                    e += FA_EXP(srow[c] * sh.scale - mn);
            }
        }
        e += __shfl_xor_sync(0xffffffffu, e, 1);
        if (i < T) {
            l = l * FA_EXP(m - mn) + e;
            m = mn;
        }
    }
    /* pass 2: att = exp(s - m) * (1/l) as the CPU's softmax, rounded,
     * times V */
    float inv = i < T ? 1.0f / l : 0.0f;
    fa_acc_t o[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        nvcuda::wmma::fill_fragment(o[n], 0.0f);
    fa_fetch<HS>(fv, v, C3, 0, T); /* fk holds key tile 0 again: pass 1's last fetch */
    for (int kt = 0; kt <= qt; kt++) {
        fa_advance<HS>(sK, sV, fk, fv, k, C3, v, C3, kt < qt ? kt + 1 : -1, T);
        fa_abt<HS>(sS, sQ, sK, w);
        __syncwarp();
        const float *srow = sS + row * FA_LF;
        __nv_bfloat16 *prow = sP + row * FA_LP;
        int lim = i < T ? i - kt * FA_TILE : -1;
#pragma unroll 8
        for (int t = 0; t < FA_TILE / 2; t++) {
            int c = FA_COL(lane, t);
            float p = c <= lim ? FA_EXP(srow[c] * sh.scale - m) * inv : 0.0f;
            prow[c] = __float2bfloat16_rn(p);
        }
        __syncwarp();
        fa_pv<HS, false>(o, sP + 16 * w * FA_LP, sV);
    }
    float *og = FA_OUT(out, sh, b, h);
    /* out is written, not added to: zeroed here, then the store's add */
    for (int r = 0; r < 16; r++) {
        int ir = r0 + 16 * w + r;
        if (ir >= T)
            break;
        for (int d = lane; d < HS; d += WARP)
            og[(size_t)ir * sh.C + d] = 0.0f;
    }
    if ((lane & 1) == 0 && i < T) {
        float *st = stats + ((size_t)bh * T + i) * 2;
        st[0] = m;
        st[1] = inv;
    }
    __syncwarp();
    fa_store<HS>(og, (size_t)sh.C, r0, T, o, sS, w, 1.0f);
#endif
}

#ifdef FA_ARCH
/* Warp w's rows of a tile's att and datt in S and A (query tile at r0, key
 * tile at k0): att = exp(s - m) * (1/l) as the forward's, dpre = att *
 * (datt - dot); each rounded into P and D (FA_TILE, FA_LP) where given (0
 * for the masked keys and the rows past T); where dots is given, each
 * row's rowsum(att * datt) is added to it instead. */
__device__ static void fa_rows(const float *S, const float *A, __nv_bfloat16 *P, __nv_bfloat16 *D,
                               float *dots, const float *stats, const float *dot, int r0, int k0,
                               int T, float scale, int w)
{
    int lane = threadIdx.x % WARP, row = FA_ROW(w, lane), i = r0 + row;
    float m = 0.0f, inv = 0.0f, dt = 0.0f, sum = 0.0f;
    int lim = -1; /* columns <= lim are the row's keys */
    if (i < T) {
        m = stats[(size_t)i * 2];
        inv = stats[(size_t)i * 2 + 1];
        if (dot != NULL)
            dt = dot[i];
        lim = i - k0;
    }
    const float *srow = S + row * FA_LF, *arow = A + row * FA_LF;
#pragma unroll 8
    for (int t = 0; t < FA_TILE / 2; t++) {
        int c = FA_COL(lane, t);
        float att = 0.0f, dp = 0.0f;
        if (c <= lim) {
            att = FA_EXP(srow[c] * scale - m) * inv;
            float da = arow[c];
            sum += att * da;
            dp = att * (da - dt);
        }
        if (P != NULL)
            P[row * FA_LP + c] = __float2bfloat16_rn(att);
        if (D != NULL)
            D[row * FA_LP + c] = __float2bfloat16_rn(dp);
    }
    if (dots != NULL) {
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        if ((lane & 1) == 0 && i < T)
            dots[i] += sum;
    }
}
#endif

/* Backward 1: dot (B * NH, T) = rowsum(att * datt); grid as the forward. */
template <int HS>
__global__ static void __launch_bounds__(FA_THREADS, 3)
    fa_dot_k(float *dot, const float *stats, const float *qkv, const float *dout, fa_shape_t sh)
{
#ifdef FA_ARCH
    extern __shared__ __align__(128) unsigned char fa_mem[];
    const int LH = HS + 8, T = sh.T;
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)fa_mem, *sO = sQ + FA_TILE * LH, *sK = sO + FA_TILE * LH;
    __nv_bfloat16 *sV = sK + FA_TILE * LH;
    float *sS = (float *)(sV + FA_TILE * LH), *sA = sS + FA_TILE * FA_LF;
    int nt = (T + FA_TILE - 1) / FA_TILE, qt = nt - 1 - (int)blockIdx.x;
    int bh = blockIdx.y, b = bh / sh.NH, h = bh % sh.NH;
    int w = threadIdx.x / WARP, r0 = qt * FA_TILE;
    size_t C3 = 3 * (size_t)sh.C;
    const float *q = FA_QKV(qkv, sh, b, h), *k = q + sh.C, *v = q + 2 * (size_t)sh.C;
    float *dt = dot + (size_t)bh * T;
    fa_regs<HS> fk, fv;
    fa_fetch<HS>(fk, k, C3, 0, T);
    fa_fetch<HS>(fv, v, C3, 0, T);
    fa_load<HS>(sQ, q, C3, r0, T);
    fa_load<HS>(sO, FA_OUT(dout, sh, b, h), (size_t)sh.C, r0, T);
    for (int i = r0 + (int)threadIdx.x; i < r0 + FA_TILE && i < T; i += FA_THREADS)
        dt[i] = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        fa_advance<HS>(sK, sV, fk, fv, k, C3, v, C3, kt < qt ? kt + 1 : -1, T);
        fa_abt<HS>(sS, sQ, sK, w);
        fa_abt<HS>(sA, sO, sV, w); /* datt = dout V^T */
        __syncwarp();
        fa_rows(sS, sA, NULL, NULL, dt, stats + (size_t)bh * T * 2, NULL, r0, kt * FA_TILE, T,
                sh.scale, w);
    }
#endif
}

/* Backward 2: dK += scale dpre^T Q, dV += att^T dout for one key tile;
 * grid (key tiles, B * NH), the first (longest) tile first. */
template <int HS>
__global__ static void __launch_bounds__(FA_THREADS)
    fa_dkv_k(float *dqkv, const float *stats, const float *dot, const float *qkv, const float *dout,
             fa_shape_t sh)
{
#ifdef FA_ARCH
    extern __shared__ __align__(128) unsigned char fa_mem[];
    const int LH = HS + 8, T = sh.T;
    __nv_bfloat16 *sK = (__nv_bfloat16 *)fa_mem, *sV = sK + FA_TILE * LH, *sQ = sV + FA_TILE * LH;
    __nv_bfloat16 *sO = sQ + FA_TILE * LH, *sP = sO + FA_TILE * LH, *sD = sP + FA_TILE * FA_LP;
    float *sS = (float *)(sD + FA_TILE * FA_LP), *sA = sS + FA_TILE * FA_LF;
    int nt = (T + FA_TILE - 1) / FA_TILE, kt = (int)blockIdx.x;
    int bh = blockIdx.y, b = bh / sh.NH, h = bh % sh.NH;
    int w = threadIdx.x / WARP, k0 = kt * FA_TILE;
    size_t C3 = 3 * (size_t)sh.C;
    const float *q = FA_QKV(qkv, sh, b, h), *k = q + sh.C, *v = q + 2 * (size_t)sh.C;
    const float *d = FA_OUT(dout, sh, b, h);
    fa_regs<HS> fq, fo;
    fa_fetch<HS>(fq, q, C3, k0, T);
    fa_fetch<HS>(fo, d, (size_t)sh.C, k0, T);
    fa_load<HS>(sK, k, C3, k0, T);
    fa_load<HS>(sV, v, C3, k0, T);
    fa_acc_t dk[HS / 16], dv[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) {
        nvcuda::wmma::fill_fragment(dk[n], 0.0f);
        nvcuda::wmma::fill_fragment(dv[n], 0.0f);
    }
    for (int qt = kt; qt < nt; qt++) {
        fa_advance<HS>(sQ, sO, fq, fo, q, C3, d, (size_t)sh.C, qt + 1 < nt ? qt + 1 : -1, T);
        fa_abt<HS>(sS, sQ, sK, w);
        fa_abt<HS>(sA, sO, sV, w);
        __syncwarp();
        fa_rows(sS, sA, sP, sD, NULL, stats + (size_t)bh * T * 2, dot + (size_t)bh * T,
                qt * FA_TILE, k0, T, sh.scale, w);
        __syncthreads(); /* warp w now reads key columns [16w, 16w + 16) of every row */
        fa_pv<HS, true>(dv, sP + 16 * w, sO);
        fa_pv<HS, true>(dk, sD + 16 * w, sQ);
    }
    float *dk_g = dqkv + (k - qkv), *dv_g = dqkv + (v - qkv);
    fa_store<HS>(dk_g, C3, k0, T, dk, sS, w, sh.scale);
    fa_store<HS>(dv_g, C3, k0, T, dv, sS, w, 1.0f);
#endif
}

/* Backward 3: dQ += scale dpre K for one query tile; grid as the forward. */
template <int HS>
__global__ static void __launch_bounds__(FA_THREADS)
    fa_dq_k(float *dqkv, const float *stats, const float *dot, const float *qkv, const float *dout,
            fa_shape_t sh)
{
#ifdef FA_ARCH
    extern __shared__ __align__(128) unsigned char fa_mem[];
    const int LH = HS + 8, T = sh.T;
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)fa_mem, *sO = sQ + FA_TILE * LH, *sK = sO + FA_TILE * LH;
    __nv_bfloat16 *sV = sK + FA_TILE * LH, *sD = sV + FA_TILE * LH;
    float *sS = (float *)(sD + FA_TILE * FA_LP), *sA = sS + FA_TILE * FA_LF;
    int nt = (T + FA_TILE - 1) / FA_TILE, qt = nt - 1 - (int)blockIdx.x;
    int bh = blockIdx.y, b = bh / sh.NH, h = bh % sh.NH;
    int w = threadIdx.x / WARP, r0 = qt * FA_TILE;
    size_t C3 = 3 * (size_t)sh.C;
    const float *q = FA_QKV(qkv, sh, b, h), *k = q + sh.C, *v = q + 2 * (size_t)sh.C;
    fa_regs<HS> fk, fv;
    fa_fetch<HS>(fk, k, C3, 0, T);
    fa_fetch<HS>(fv, v, C3, 0, T);
    fa_load<HS>(sQ, q, C3, r0, T);
    fa_load<HS>(sO, FA_OUT(dout, sh, b, h), (size_t)sh.C, r0, T);
    fa_acc_t dq[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        nvcuda::wmma::fill_fragment(dq[n], 0.0f);
    for (int kt = 0; kt <= qt; kt++) {
        fa_advance<HS>(sK, sV, fk, fv, k, C3, v, C3, kt < qt ? kt + 1 : -1, T);
        fa_abt<HS>(sS, sQ, sK, w);
        fa_abt<HS>(sA, sO, sV, w);
        __syncwarp();
        fa_rows(sS, sA, NULL, sD, NULL, stats + (size_t)bh * T * 2, dot + (size_t)bh * T, r0,
                kt * FA_TILE, T, sh.scale, w);
        __syncwarp();
        fa_pv<HS, false>(dq, sD + 16 * w * FA_LP, sK);
    }
    fa_store<HS>(dqkv + (q - qkv), C3, r0, T, dq, sS, w, sh.scale);
#endif
}

#endif
