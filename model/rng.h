/* Deterministic random numbers: a counter-based hash (any element of a
 * stream can be drawn without drawing the ones before it, so a shard or a
 * resumed run gets the same numbers as one process from the start). */
#ifndef MSR_MODEL_RNG_H
#define MSR_MODEL_RNG_H

#include <stdint.h>

/* A 64-bit mix of x (splitmix64's finaliser): a bijection whose output bits
 * all depend on all input bits. */
static inline uint64_t msr_hash64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The counter-th 64-bit number of stream (seed, stream). */
static inline uint64_t msr_rng_u64(uint64_t seed, uint64_t stream, uint64_t counter)
{
    return msr_hash64(msr_hash64(seed ^ msr_hash64(stream)) + counter);
}

/* A number in [0, n), n >= 1, from a 64-bit random value (multiply-shift:
 * the bias is below n / 2^64). */
static inline uint64_t msr_rng_below(uint64_t r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)r * n) >> 64);
}

/* A uniform double in (0, 1): never 0, so log() of it is finite. */
static inline double msr_rng_open01(uint64_t r)
{
    return ((double)(r >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* The counter-th standard normal of stream (seed, stream) (Box-Muller on two
 * draws of the stream). */
double msr_rng_normal(uint64_t seed, uint64_t stream, uint64_t counter);

#endif
