/* The CPU's kernels of a MoE layer's routing and combine (layers.h): the
 * arithmetic between the router's product and the experts' MLPs, and
 * back, behind the model's table (kernels.h) like the block's. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "model/layers.h"

/* Mixtral's gates: the K chosen probabilities over their sum, which is
 * the softmax of the K chosen logits. */
static void normalise_gates(float *gate, int K)
{
    double sum = 0.0;
    for (int j = 0; j < K; j++)
        sum += gate[j];
    for (int j = 0; j < K; j++)
        gate[j] = (float)(gate[j] / sum);
}

void msr_moe_route(float *probs, int *choice, float *gate, int N, int E, int K, int renorm)
{
    for (int t = 0; t < N; t++) {
        float *p = probs + (size_t)t * E;
        int *ch = choice + (size_t)t * K;
        float mx = p[0];
        for (int e = 1; e < E; e++)
            mx = p[e] > mx ? p[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < E; e++) {
            p[e] = expf(p[e] - mx);
            sum += p[e];
        }
        for (int e = 0; e < E; e++)
            p[e] = (float)(p[e] / sum);
        for (int j = 0; j < K; j++) { /* the j-th most probable, ties: lower index */
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++)
                    taken |= ch[i] == e;
                if (!taken && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            ch[j] = best;
            gate[(size_t)t * K + j] = p[best];
        }
        if (renorm)
            normalise_gates(gate + (size_t)t * K, K);
    }
}

void msr_moe_prob_sums(double *P, const float *probs, int N, int E)
{
    for (int e = 0; e < E; e++) {
        P[e] = 0.0;
        for (int t = 0; t < N; t++)
            P[e] += probs[(size_t)t * E + e];
    }
}

void msr_moe_dispatch(float *send, const float *x, const int *row, int N, int K, int C)
{
    for (size_t tj = 0; tj < (size_t)N * (size_t)K; tj++)
        if (row[tj] >= 0)
            memcpy(send + (size_t)row[tj] * C, x + tj / (size_t)K * C, (size_t)C * sizeof(float));
}

void msr_moe_dispatch_backward(float *dx, const float *dsend, const int *row, int N, int K, int C)
{
    for (size_t t = 0; t < (size_t)N; t++) {
        float *d = dx + t * C;
        for (size_t j = 0; j < (size_t)K; j++) {
            int r = row[t * K + j];
            if (r < 0)
                continue;
            const float *s = dsend + (size_t)r * C;
            for (int c = 0; c < C; c++)
                d[c] += s[c];
        }
    }
}

void msr_moe_combine(float *y, const float *comb, const int *row, const float *gate, int N, int K,
                     int C)
{
    for (size_t t = 0; t < (size_t)N; t++) {
        float *o = y + t * C;
        memset(o, 0, (size_t)C * sizeof(float));
        for (size_t j = 0; j < (size_t)K; j++) {
            int r = row[t * K + j];
            if (r < 0)
                continue;
            const float *s = comb + (size_t)r * C;
            float g = gate[t * K + j];
            for (int c = 0; c < C; c++)
                o[c] += g * s[c];
        }
    }
}

void msr_moe_combine_backward(float *dcomb, float *dgate, const float *dy, const float *comb,
                              const int *row, const float *gate, int N, int K, int C)
{
    for (size_t t = 0; t < (size_t)N; t++) {
        const float *d = dy + t * C;
        for (size_t j = 0; j < (size_t)K; j++) {
            size_t tj = t * K + j;
            int r = row[tj];
            dgate[tj] = 0.0f;
            if (r < 0)
                continue;
            const float *o = comb + (size_t)r * C;
            float *dc = dcomb + (size_t)r * C, gt = gate[tj], dg = 0.0f;
            for (int c = 0; c < C; c++) {
                dg += d[c] * o[c];
                dc[c] = gt * d[c];
            }
            dgate[tj] = dg;
        }
    }
}

/* Mixtral's renormalisation backward, in place: gate_j = p_j / S, S the
 * sum of the K chosen p, so dp_j = (dgate_j - sum_i dgate_i gate_i) / S. */
static void gates_backward(float *dgate, const float *gate, const float *probs, const int *choice,
                           int K)
{
    double S = 0.0, dot = 0.0;
    for (int j = 0; j < K; j++) {
        S += probs[choice[j]];
        dot += (double)dgate[j] * gate[j];
    }
    for (int j = 0; j < K; j++)
        dgate[j] = (float)((dgate[j] - dot) / S);
}

void msr_moe_route_backward(float *dprobs, float *dgate, const float *probs, const float *gate,
                            const int *choice, const double *frac, double daux, int N, int E, int K,
                            int renorm)
{
    for (size_t t = 0; t < (size_t)N; t++) {
        float *dp = dprobs + t * E;
        const float *pr = probs + t * E;
        for (int e = 0; e < E; e++)
            dp[e] = (float)(daux * frac[e]);
        if (renorm)
            gates_backward(dgate + t * K, gate + t * K, pr, choice + t * K, K);
        for (size_t j = 0; j < (size_t)K; j++)
            dp[choice[t * K + j]] += dgate[t * K + j];
        double dot = 0.0;
        for (int e = 0; e < E; e++)
            dot += (double)pr[e] * dp[e];
        for (int e = 0; e < E; e++)
            dp[e] = pr[e] * (float)(dp[e] - dot);
    }
}
