/* The CPU's vector extensions, detected once at start (cpuid and xgetbv),
 * less those MSRUN_CPU_DISABLE masks off.
 *
 * An extension counts as present only where the CPU has it AND the
 * operating system saves its registers (XCR0): a kernel that does not
 * enable AVX-512 state makes avx512f absent even on a CPU that has it.
 * Kernels choose their path from msr_cpu_features_get(), never from the
 * compiler's flags, so one build runs on every x86-64 CPU without SIGILL.
 *
 * MSRUN_CPU_DISABLE: a comma-separated list of the names below (or "all")
 * to treat as absent, for tests that force a path and for users who must
 * avoid one. It is read once, at the first call. */
#ifndef MSR_BASE_CPU_FEATURES_H
#define MSR_BASE_CPU_FEATURES_H

#include <stddef.h>

#include "msrun/base.h"

typedef enum msr_cpu_feature {
    MSR_CPU_AVX2 = 1u << 0,        /* "avx2" */
    MSR_CPU_FMA = 1u << 1,         /* "fma" (FMA3) */
    MSR_CPU_F16C = 1u << 2,        /* "f16c" */
    MSR_CPU_AVX512F = 1u << 3,     /* "avx512f" */
    MSR_CPU_AVX512_BF16 = 1u << 4, /* "avx512_bf16" (vdpbf16ps) */
    MSR_CPU_AMX_BF16 = 1u << 5,    /* "amx_bf16" (tile state enabled in XCR0) */
    MSR_CPU_PCLMUL = 1u << 6,      /* "pclmul" (PCLMULQDQ with SSE4.1: the CRC-32) */
} msr_cpu_feature_t;

#define MSR_CPU_ALL 0x7fu

/* What the CPU and the OS support, without the environment's mask: cpuid
 * on every call (for tests and the one-line description). 0 off x86-64. */
unsigned msr_cpu_features_detect(void);

/* Parses a MSRUN_CPU_DISABLE value ("avx2,fma", "all", "" or NULL: none)
 * into a mask of msr_cpu_feature_t bits. MSR_ERR_INVALID_ARG for a name
 * it does not know (*mask_p then untouched). */
msr_status_t msr_cpu_features_parse(const char *text, unsigned *mask_p);

/* The features kernels may use: detected, less MSRUN_CPU_DISABLE's mask.
 * Computed once (thread-safe); later calls return the same. A malformed
 * MSRUN_CPU_DISABLE is logged once and returns MSR_ERR_INVALID_ARG on
 * every call (*features_p untouched): a path the user asked to avoid is
 * never taken by mistake. */
msr_status_t msr_cpu_features_get(unsigned *features_p);

/* The name of one feature bit ("avx2"), "?" for anything else. */
const char *msr_cpu_feature_name(unsigned feature);

/* One line for a program's start-up or --version output, e.g.
 * "cpu: avx2 f16c pclmul (masked off: fma) (absent: avx512f avx512_bf16 amx_bf16)".
 * Writes at most len bytes, always terminated; returns the length it
 * needed (as snprintf). */
size_t msr_cpu_features_describe(char *buf, size_t len);

#endif
