/* Monotonic time and deadlines. */
#include "base/time.h"

#include <errno.h>
#include <time.h>

uint64_t msr_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double msr_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t msr_deadline_in_ms(int64_t ms)
{
    if (ms < 0)
        return MSR_DEADLINE_NEVER;
    uint64_t now = msr_now_ns();
    uint64_t add = (uint64_t)ms * 1000000ull;
    if (ms > (int64_t)(UINT64_MAX / 2000000ull) || now + add < now)
        return MSR_DEADLINE_NEVER;
    return now + add;
}

int64_t msr_deadline_left_ms(uint64_t deadline)
{
    if (deadline == MSR_DEADLINE_NEVER)
        return INT64_MAX;
    uint64_t now = msr_now_ns();
    if (now >= deadline)
        return 0;
    return (int64_t)((deadline - now + 999999ull) / 1000000ull);
}

int msr_deadline_passed(uint64_t deadline)
{
    return deadline != MSR_DEADLINE_NEVER && msr_now_ns() >= deadline;
}

void msr_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

struct timespec msr_realtime_in_ms(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (ms % 1000) * 1000000;
    ts.tv_sec += (time_t)(ms / 1000 + ns / 1000000000);
    ts.tv_nsec = ns % 1000000000;
    return ts;
}
