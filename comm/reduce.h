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

/* The last step of a reduction over n ranks: divides buf by n for
 * MSR_OP_AVG, does nothing for the other ops. */
void msr_reduce_finish(msr_op_t op, msr_dtype_t dtype, void *buf, size_t count, int n);

/* IEEE binary16 conversions used by the kernels (round to nearest even,
 * NaN stays NaN); bf16's are base/bf16.h's. */
float msr_f16_to_f32(uint16_t h);
uint16_t msr_f32_to_f16(float f);

#endif
