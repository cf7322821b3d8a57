/* A growable byte buffer. */
#ifndef MSR_BASE_BUF_H
#define MSR_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "msrun/base.h"

typedef struct msr_buf {
    char *data; /* NUL-terminated when non-NULL (the NUL is not counted) */
    size_t len;
    size_t cap;
} msr_buf_t;

#define MSR_BUF_INIT \
    {                \
        NULL, 0, 0   \
    }

/* Makes room for len + extra bytes (plus the terminating NUL). */
msr_status_t msr_buf_reserve(msr_buf_t *buf, size_t extra);
msr_status_t msr_buf_append(msr_buf_t *buf, const void *data, size_t len);
msr_status_t msr_buf_printf(msr_buf_t *buf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
msr_status_t msr_buf_vprintf(msr_buf_t *buf, const char *fmt, va_list ap);
/* Appends s as a JSON string literal, quotes included. */
msr_status_t msr_buf_json_string(msr_buf_t *buf, const char *s, size_t len);
/* Removes the first n bytes. */
void msr_buf_consume(msr_buf_t *buf, size_t n);
void msr_buf_clear(msr_buf_t *buf);
void msr_buf_cleanup(msr_buf_t *buf);

#endif
