/* A growable byte buffer. */
#include "base/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

msr_status_t msr_buf_reserve(msr_buf_t *buf, size_t extra)
{
    if (extra > SIZE_MAX - buf->len - 1)
        return MSR_ERR_OVERFLOW;
    size_t need = buf->len + extra + 1;
    if (need <= buf->cap)
        return MSR_OK;
    size_t cap = buf->cap ? buf->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *d = msr_realloc(buf->data, cap);
    if (d == NULL)
        return MSR_ERR_NO_MEMORY;
    buf->data = d;
    buf->cap = cap;
    return MSR_OK;
}

msr_status_t msr_buf_append(msr_buf_t *buf, const void *data, size_t len)
{
    msr_status_t st = msr_buf_reserve(buf, len);
    if (st != MSR_OK)
        return st;
    if (len)
        memcpy(buf->data + buf->len, data, len);
    buf->len += len;
    buf->data[buf->len] = '\0';
    return MSR_OK;
}

msr_status_t msr_buf_vprintf(msr_buf_t *buf, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return MSR_ERR_INVALID_ARG;
    msr_status_t st = msr_buf_reserve(buf, (size_t)n);
    if (st != MSR_OK)
        return st;
    vsnprintf(buf->data + buf->len, (size_t)n + 1, fmt, ap);
    buf->len += (size_t)n;
    return MSR_OK;
}

msr_status_t msr_buf_printf(msr_buf_t *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    msr_status_t st = msr_buf_vprintf(buf, fmt, ap);
    va_end(ap);
    return st;
}

msr_status_t msr_buf_json_string(msr_buf_t *buf, const char *s, size_t len)
{
    msr_status_t st = msr_buf_append(buf, "\"", 1);
    for (size_t i = 0; i < len && st == MSR_OK; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"':
            st = msr_buf_append(buf, "\\\"", 2);
            break;
        case '\\':
            st = msr_buf_append(buf, "\\\\", 2);
            break;
        case '\n':
            st = msr_buf_append(buf, "\\n", 2);
            break;
        case '\r':
            st = msr_buf_append(buf, "\\r", 2);
            break;
        case '\t':
            st = msr_buf_append(buf, "\\t", 2);
            break;
        default:
            if (c < 0x20 || c == 0x7f)
                st = msr_buf_printf(buf, "\\u%04x", c);
            else
                st = msr_buf_append(buf, &s[i], 1);
        }
    }
    if (st == MSR_OK)
        st = msr_buf_append(buf, "\"", 1);
    return st;
}

void msr_buf_consume(msr_buf_t *buf, size_t n)
{
    if (n >= buf->len) {
        msr_buf_clear(buf);
        return;
    }
    memmove(buf->data, buf->data + n, buf->len - n);
    buf->len -= n;
    buf->data[buf->len] = '\0';
}

void msr_buf_clear(msr_buf_t *buf)
{
    buf->len = 0;
    if (buf->data)
        buf->data[0] = '\0';
}

void msr_buf_cleanup(msr_buf_t *buf)
{
    msr_free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}
