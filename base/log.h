/* Logging: one macro that checks the level before formatting anything. */
#ifndef MSR_BASE_LOG_H
#define MSR_BASE_LOG_H

#include <stdarg.h>
#include <stddef.h>

#include "msrun/base.h"

/* The process-wide level; read by MSR_LOG before any formatting. Set once at
 * start (msr_log_init or msr_log_set_level), read by every thread. */
extern msr_log_level_t msr_log_level_;

/* Reads MSR_LOG_LEVEL once and sets the identity every line starts with:
 * "<prog>[node N rank R]". node or rank < 0 leaves that part out. Call before
 * threads start; safe to call again to change the identity (e.g. once the
 * node rank is known). */
void msr_log_init(const char *prog, int node, int rank);

/* Parses "error", "warn", "info", "debug", "trace" (or 0..4); -1 if unknown. */
int msr_log_level_parse(const char *text);

/* Writes one line "<identity> <level>: <message>\n" to stderr with a single
 * write(2), so lines from many processes do not interleave mid-line. */
void msr_log_write(msr_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Where lines go instead of stderr (NULL: stderr again): msrun's progress
 * board puts them above its rows. sink gets the whole line, newline
 * included, from any thread. */
void msr_log_set_sink(void (*sink)(void *arg, const char *line, size_t len), void *arg);

#define MSR_LOG(level, ...)                      \
    do {                                         \
        if ((level) <= msr_log_level_)           \
            msr_log_write((level), __VA_ARGS__); \
    } while (0)

#define MSR_ERROR(...) MSR_LOG(MSR_LOG_ERROR, __VA_ARGS__)
#define MSR_WARN(...)  MSR_LOG(MSR_LOG_WARN, __VA_ARGS__)
#define MSR_INFO(...)  MSR_LOG(MSR_LOG_INFO, __VA_ARGS__)
#define MSR_DEBUG(...) MSR_LOG(MSR_LOG_DEBUG, __VA_ARGS__)
#define MSR_TRACE(...) MSR_LOG(MSR_LOG_TRACE, __VA_ARGS__)

#endif
