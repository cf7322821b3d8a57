/* The attack clients' shared parts (flood_util.h). */
#include "tests/integration/flood_util.h"

#include <string.h>

long msr_flood_proc_kib(long pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    size_t n = strlen(field);
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            kib = strtol(line + n + 1, NULL, 10);
    if (f != NULL)
        fclose(f);
    CHECK(kib >= 0, "cannot read %s of pid %ld", field, pid);
    return kib;
}
