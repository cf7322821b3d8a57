/* What the parameter server tests count in /proc/self/maps: the
 * shared-memory segments of msrun's communicators (/dev/shm/msr-*,
 * unlinked once every member mapped them: "(deleted)") and UCX's
 * shared-memory receive queues (the other /dev/shm mappings: each engine,
 * a UCX worker, maps its own where UCX uses posix shared memory). */
#ifndef MSRUN_TESTS_PS_MAPS_H
#define MSRUN_TESTS_PS_MAPS_H

#include <stdio.h>
#include <string.h>

/* The mappings of this process whose line holds `has` and not `but_not`
 * (NULL: no exclusion); -1 when /proc/self/maps cannot be read. */
static inline int maps_count(const char *has, const char *but_not)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, has) != NULL && (but_not == NULL || strstr(line, but_not) == NULL);
    fclose(f);
    return n;
}

/* msrun's communicator segments mapped here; -1: unreadable. */
static inline int maps_msr_segments(void)
{
    return maps_count("/dev/shm/msr-", NULL);
}

/* UCX's shared-memory queues mapped here; -1: unreadable. */
static inline int maps_ucx_queues(void)
{
    return maps_count("/dev/shm/", "/dev/shm/msr-");
}

#endif
