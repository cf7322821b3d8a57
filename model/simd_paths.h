/* The one way model/'s float kernels get their SIMD width paths: a kernel
 * file defines SIMD_IMPL (its body's header, written once with GCC's
 * generic vectors) and includes this file, which compiles the body once per
 * path, with
 *   vec       a GCC vector of W floats, the path's register width;
 *   veci      the int32_t vector of the same width (masks, exponents);
 *   NV        16 / W, the vectors that hold 16 lanes;
 *   PATH(f)   f's name for the path (f_base, f_avx2, f_avx512);
 *   TARGET    the function attributes that enable its instructions;
 * and gives simd_path_ok / simd_widest to choose among them at run time.
 * Paths: SIMD_BASE for any CPU (4 lanes: SSE2 on x86-64), SIMD_AVX2 (8)
 * and SIMD_AVX512 (16, avx512f) on x86-64. The bodies use IEEE adds,
 * multiplies, divides and integer moves lane by lane, and the files that
 * include this are compiled without contracting a multiply and an add
 * into a fused one (model/CMakeLists.txt), so every path gives the same
 * bits. Include it once per file, after defining SIMD_IMPL. */
#ifndef MSR_MODEL_SIMD_PATHS_H
#define MSR_MODEL_SIMD_PATHS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/cpu_features.h"

/* unaligned loads and stores of a vector v (rows start anywhere) */
#define LOAD(v, p)  memcpy(&(v), (p), sizeof(v))
#define STORE(p, v) memcpy((p), &(v), sizeof(v))

#define BODY static inline __attribute__((always_inline))

enum { SIMD_BASE, SIMD_AVX2, SIMD_AVX512 };

/* Whether this CPU, less MSRUN_CPU_DISABLE, runs path p (a malformed
 * MSRUN_CPU_DISABLE, already logged, leaves the base path only). */
static inline bool simd_path_ok(int p)
{
    unsigned f = 0;
    if (p == SIMD_BASE)
        return true;
#if defined(__x86_64__)
    if (msr_cpu_features_get(&f) != MSR_OK)
        return false;
    if (p == SIMD_AVX2)
        return (f & MSR_CPU_AVX2) != 0;
    if (p == SIMD_AVX512)
        return (f & MSR_CPU_AVX512F) != 0;
#endif
    (void)f;
    return false;
}

/* The widest path simd_path_ok allows */
static inline int simd_widest(void)
{
    return simd_path_ok(SIMD_AVX512) ? SIMD_AVX512
           : simd_path_ok(SIMD_AVX2) ? SIMD_AVX2
                                     : SIMD_BASE;
}

typedef float simd_v4f __attribute__((vector_size(4 * sizeof(float))));
typedef int32_t simd_v4i __attribute__((vector_size(4 * sizeof(int32_t))));
#define vec     simd_v4f
#define veci    simd_v4i
#define NV      4
#define PATH(f) f##_base
#define TARGET
#include SIMD_IMPL
#undef vec
#undef veci
#undef NV
#undef PATH
#undef TARGET

#if defined(__x86_64__)
typedef float simd_v8f __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t simd_v8i __attribute__((vector_size(8 * sizeof(int32_t))));
#define vec     simd_v8f
#define veci    simd_v8i
#define NV      2
#define PATH(f) f##_avx2
#define TARGET  __attribute__((target("avx2")))
#include SIMD_IMPL
#undef vec
#undef veci
#undef NV
#undef PATH
#undef TARGET

typedef float simd_v16f __attribute__((vector_size(16 * sizeof(float))));
typedef int32_t simd_v16i __attribute__((vector_size(16 * sizeof(int32_t))));
#define vec     simd_v16f
#define veci    simd_v16i
#define NV      1
#define PATH(f) f##_avx512
#define TARGET  __attribute__((target("avx512f")))
#include SIMD_IMPL
#undef vec
#undef veci
#undef NV
#undef PATH
#undef TARGET
#endif

#endif
