/* Element types and the local reduction kernels the algorithms combine
 * buffers with. */
#ifndef MSR_COMM_REDUCE_H
#define MSR_COMM_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "msrun/comm.h"

/* dst[i] = a[i] op b[i] for i < count. dst may be a or b (exactly), but may
 * not overlap them otherwise. a is the operand from the lower ranks: the
 * algorithms always pass operands in the same order, so that results do not
 * depend on timing. MSR_OP_AVG combines as a sum (msr_reduce_finish divides).
 * f16 and bf16 are computed in f32 and rounded to nearest even. */
void msr_reduce(msr_op_t op, msr_dtype_t dtype, void *dst, const void *a, const void *b,
                size_t count);

/* The few elements a short call folds without msr_reduce's dispatch: a
 * 64-byte vector of floats (the slots' lined lines hold 14 of them). */
#define MSR_REDUCE_FEW 16

/* msr_reduce's sum (and average) of float32 or float64 vectors of at most
 * MSR_REDUCE_FEW elements, inline: the same additions in the same order,
 * so the same bits. Returns 0, having done nothing, for anything else
 * (the caller then calls msr_reduce). */
static inline int msr_reduce_few(msr_op_t op, msr_dtype_t dtype, void *dst, const void *a,
                                 const void *b, size_t count)
{
    if ((op != MSR_OP_SUM && op != MSR_OP_AVG) || count > MSR_REDUCE_FEW)
        return 0;
    if (dtype == MSR_DTYPE_F32) {
        float *d = dst;
        const float *x = a, *y = b;
        for (size_t i = 0; i < count; i++)
            d[i] = x[i] + y[i];
        return 1;
    }
    if (dtype == MSR_DTYPE_F64) {
        double *d = dst;
        const double *x = a, *y = b;
        for (size_t i = 0; i < count; i++)
            d[i] = x[i] + y[i];
        return 1;
    }
    return 0;
}

/* The last step of a reduction over n ranks: divides buf by n for
 * MSR_OP_AVG, does nothing for the other ops. */
void msr_reduce_finish(msr_op_t op, msr_dtype_t dtype, void *buf, size_t count, int n);

/* IEEE binary16 conversions used by the kernels (round to nearest even,
 * NaN stays NaN); bf16's are base/bf16.h's. */
float msr_f16_to_f32(uint16_t h);
uint16_t msr_f32_to_f16(float f);

#endif
