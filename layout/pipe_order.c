/* The pipeline schedules' orders (see pipe_order.h). */
#include "layout/pipe_order.h"

/* Every schedule is warm-up forwards, then a forward and a backward in
 * turn, then the remaining backwards, over `total` forwards: the k-th op is
 * forward or backward number i of the rank's sequence. */
static void phases(int schedule, int M, int p, int r, int v, int *total_p, int *warm_p)
{
    if (schedule == MSR_PIPE_GPIPE) {
        *total_p = M;
        *warm_p = M;
    } else if (schedule == MSR_PIPE_1F1B || v == 1) {
        *total_p = M;
        *warm_p = p - r - 1 < M ? p - r - 1 : M;
    } else {
        int w = (p - r - 1) * 2 + (v - 1) * p, total = M * v;
        *total_p = total;
        *warm_p = M == p ? total : (w < total ? w : total);
    }
}

msr_pipe_op_t msr_pipe_op_at(int schedule, int micros, int pp, int r, int chunks, int k)
{
    int M = micros, p = pp, v = chunks, total, warm, bwd, i;
    phases(schedule, M, p, r, v, &total, &warm);
    if (k < warm) {
        bwd = 0;
        i = k;
    } else if (k < warm + 2 * (total - warm)) {
        bwd = (k - warm) % 2;
        i = bwd ? (k - warm) / 2 : warm + (k - warm) / 2;
    } else {
        bwd = 1;
        i = k - warm - (total - warm);
    }
    if (total == M) /* one chunk */
        return (msr_pipe_op_t){(uint8_t)bwd, i, 0};
    /* interleaved: groups of p micro-batches through chunk 0, then chunk
     * 1, ...; backward runs the chunks the other way */
    int m = (i / (p * v)) * p + i % p, c = (i % (p * v)) / p;
    return (msr_pipe_op_t){(uint8_t)bwd, m, bwd ? v - 1 - c : c};
}

int msr_pipe_ops_to_peak(int schedule, int micros, int pp, int r, int chunks)
{
    int total, warm;
    phases(schedule, micros, pp, r, chunks, &total, &warm);
    /* a forward and a backward in turn: forward i runs chunk (i mod pv) /
     * p and backward i its mirror, so any pv forwards in a row open each
     * chunk p times and any pv backwards close each p times, and the live
     * frames repeat every pv pairs (every pair with one chunk) */
    int per = total == micros ? 1 : pp * chunks;
    int steady = total - warm < per ? total - warm : per;
    return warm + 2 * steady;
}

int msr_pipe_order(int schedule, int micros, int pp, int r, int chunks, msr_pipe_op_t *ops)
{
    int n = 2 * micros * chunks;
    for (int k = 0; k < n; k++)
        ops[k] = msr_pipe_op_at(schedule, micros, pp, r, chunks, k);
    return n;
}
