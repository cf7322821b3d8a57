/* What the attack clients against a real coordinator (store_flood,
 * held_flood) share: a check that ends the client on a broken promise, and
 * a reading of the coordinator's memory from /proc. */
#ifndef MSR_TESTS_FLOOD_UTIL_H
#define MSR_TESTS_FLOOD_UTIL_H

#include <stdio.h>
#include <stdlib.h>

/* Says where and what failed on stderr and exits 1 when cond is false. */
#define CHECK(cond, ...)                                         \
    do {                                                         \
        if (!(cond)) {                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                        \
            fprintf(stderr, "\n");                               \
            exit(1);                                             \
        }                                                        \
    } while (0)

/* A field of /proc/PID/status in KiB ("VmRSS", "VmHWM"); a field that
 * cannot be read fails the check (exit 1). */
long msr_flood_proc_kib(long pid, const char *field);

#endif
