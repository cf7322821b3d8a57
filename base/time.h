/* Monotonic time and deadlines. Every wait in msrun is bounded by one. */
#ifndef MSR_BASE_TIME_H
#define MSR_BASE_TIME_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on the monotonic clock. */
uint64_t msr_now_ns(void);

/* Seconds since the Unix epoch, as a double, for reports. */
double msr_wall_time(void);

/* A deadline is an absolute msr_now_ns() value; MSR_DEADLINE_NEVER never
 * passes. msr_deadline_in_ms(ms) with ms < 0 gives MSR_DEADLINE_NEVER. */
#define MSR_DEADLINE_NEVER UINT64_MAX
uint64_t msr_deadline_in_ms(int64_t ms);

/* Milliseconds left until the deadline, 0 once it has passed, INT64_MAX for
 * MSR_DEADLINE_NEVER. */
int64_t msr_deadline_left_ms(uint64_t deadline);

int msr_deadline_passed(uint64_t deadline);

/* The CLOCK_REALTIME time ms milliseconds from now, as pthread_cond_timedwait
 * takes it. */
struct timespec msr_realtime_in_ms(int64_t ms);

/* Sleeps for ms milliseconds (restarting after signals). */
void msr_sleep_ms(int64_t ms);

#endif
