/* The one hash and the one machine identity (hash.h). */
#include "base/hash.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define FNV1A_PRIME 1099511628211ull

uint64_t msr_fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * FNV1A_PRIME;
    return h;
}

uint64_t msr_fnv1a_str(uint64_t h, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * FNV1A_PRIME;
    return h;
}

uint64_t msr_host_id(void)
{
    char buf[256 + 64] = "";
    if (gethostname(buf, 255) != 0)
        buf[0] = '\0';
    buf[255] = '\0';
    size_t n = strlen(buf);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
        if (fgets(buf + n, (int)(sizeof buf - n), f) == NULL)
            buf[n] = '\0';
        fclose(f);
    }
    return msr_fnv1a_str(MSR_FNV1A_INIT, buf);
}
