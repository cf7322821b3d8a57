/* The CPU's vector extensions: cpuid, xgetbv and the environment's mask. */
#include "base/cpu_features.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define MSR_CPU_X86 1
#endif

static const char *const feature_names[] = {"avx2",        "fma",      "f16c",  "avx512f",
                                            "avx512_bf16", "amx_bf16", "pclmul"};

const char *msr_cpu_feature_name(unsigned feature)
{
    for (unsigned i = 0; i < sizeof feature_names / sizeof feature_names[0]; i++)
        if (feature == 1u << i)
            return feature_names[i];
    return "?";
}

#ifdef MSR_CPU_X86
/* XCR0: the register state the OS saves (xgetbv needs OSXSAVE, checked). */
static unsigned long long xcr0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

unsigned msr_cpu_features_detect(void)
{
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    unsigned fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    /* PCLMULQDQ and SSE4.1 use only the SSE registers, which every x86-64
     * OS saves: no AVX needed */
    f |= ((c >> 1) & 1) && ((c >> 19) & 1) ? MSR_CPU_PCLMUL : 0;
    if (!osxsave || !avx)
        return f;
    unsigned long long x = xcr0();
    int ymm = (x & 0x6) == 0x6;           /* SSE and AVX state */
    int zmm = (x & 0xe6) == 0xe6;         /* and opmask, ZMM_Hi256, Hi16_ZMM */
    int tiles = (x & 0x60000) == 0x60000; /* XTILECFG and XTILEDATA */
    if (!ymm)
        return f;
    f |= fma ? MSR_CPU_FMA : 0;
    f |= f16c ? MSR_CPU_F16C : 0;
    if (__get_cpuid_max(0, NULL) < 7)
        return f;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned max_sub = a;
    f |= (b >> 5) & 1 ? MSR_CPU_AVX2 : 0;
    f |= zmm && ((b >> 16) & 1) ? MSR_CPU_AVX512F : 0;
    f |= tiles && ((d >> 22) & 1) && ((d >> 24) & 1) ? MSR_CPU_AMX_BF16 : 0;
    if (max_sub >= 1 && (f & MSR_CPU_AVX512F)) {
        __cpuid_count(7, 1, a, b, c, d);
        f |= (a >> 5) & 1 ? MSR_CPU_AVX512_BF16 : 0;
    }
    return f;
}
#else
unsigned msr_cpu_features_detect(void)
{
    return 0;
}
#endif

msr_status_t msr_cpu_features_parse(const char *text, unsigned *mask_p)
{
    unsigned mask = 0;
    const char *p = text != NULL ? text : "";
    while (*p != '\0') {
        size_t n = strcspn(p, ",");
        unsigned bit = 0;
        if (n == 3 && strncmp(p, "all", 3) == 0)
            bit = MSR_CPU_ALL;
        for (unsigned i = 0; bit == 0 && i < sizeof feature_names / sizeof feature_names[0]; i++)
            if (strlen(feature_names[i]) == n && strncmp(p, feature_names[i], n) == 0)
                bit = 1u << i;
        if (bit == 0 && n > 0)
            return MSR_ERR_INVALID_ARG;
        mask |= bit;
        p += n;
        if (*p == ',')
            p++;
    }
    *mask_p = mask;
    return MSR_OK;
}

static pthread_once_t features_once = PTHREAD_ONCE_INIT;
static unsigned features_usable, features_masked;
static msr_status_t features_status;

static void features_init(void)
{
    const char *env = getenv("MSRUN_CPU_DISABLE");
    unsigned mask = 0;
    features_status = msr_cpu_features_parse(env, &mask);
    if (features_status != MSR_OK) {
        MSR_ERROR("MSRUN_CPU_DISABLE=\"%s\": unknown feature (known: avx2, fma, f16c, avx512f, "
                  "avx512_bf16, amx_bf16, pclmul, all)",
                  env);
        return;
    }
    unsigned detected = msr_cpu_features_detect();
    features_masked = detected & mask;
    features_usable = detected & ~mask;
}

msr_status_t msr_cpu_features_get(unsigned *features_p)
{
    pthread_once(&features_once, features_init);
    if (features_status != MSR_OK)
        return features_status;
    *features_p = features_usable;
    return MSR_OK;
}

/* Appends the names of the bits in set to buf at *at (snprintf-style). */
static void append_names(char *buf, size_t len, size_t *at, unsigned set, const char *sep0)
{
    const char *sep = sep0;
    for (unsigned i = 0; i < sizeof feature_names / sizeof feature_names[0]; i++) {
        if (!(set & (1u << i)))
            continue;
        size_t room = *at < len ? len - *at : 0;
        int n = snprintf(room ? buf + *at : NULL, room, "%s%s", sep, feature_names[i]);
        *at += n > 0 ? (size_t)n : 0;
        sep = " ";
    }
}

size_t msr_cpu_features_describe(char *buf, size_t len)
{
    unsigned usable = 0, detected = msr_cpu_features_detect();
    int bad = msr_cpu_features_get(&usable) != MSR_OK;
    unsigned masked = bad ? 0 : features_masked;
    size_t at = (size_t)snprintf(buf, len, "cpu:");
    size_t room = at < len ? len - at : 0;
    if (bad)
        at += (size_t)snprintf(room ? buf + at : NULL, room, " (MSRUN_CPU_DISABLE invalid)");
    else if (usable == 0)
        at += (size_t)snprintf(room ? buf + at : NULL, room, " none");
    append_names(buf, len, &at, usable, " ");
    if (masked) {
        append_names(buf, len, &at, masked, " (masked off: ");
        room = at < len ? len - at : 0;
        at += (size_t)snprintf(room ? buf + at : NULL, room, ")");
    }
    if (MSR_CPU_ALL & ~detected) {
        append_names(buf, len, &at, MSR_CPU_ALL & ~detected, " (absent: ");
        room = at < len ? len - at : 0;
        at += (size_t)snprintf(room ? buf + at : NULL, room, ")");
    }
    return at;
}
