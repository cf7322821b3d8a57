/* Deterministic random numbers (see rng.h). */
#include "model/rng.h"

#include <math.h>

double msr_rng_normal(uint64_t seed, uint64_t stream, uint64_t counter)
{
    double u1 = msr_rng_open01(msr_rng_u64(seed, stream, 2 * counter));
    double u2 = msr_rng_open01(msr_rng_u64(seed, stream, 2 * counter + 1));
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
