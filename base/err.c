/* The one error channel (err.h): a thread-local message beside the status. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ERR_TEXT_MAX MSR_ERR_TEXT_MAX
/* this thread's text: one buffer wherever it is taken from (err_store.c) */
#define err_text     (msr_err_buffer())

/* Formatted apart first: an argument may be this thread's text itself
 * (msr_err_set("...: %s", msr_err_msg())), which vsnprintf must not both
 * read and write. */
static void err_vset(const char *fmt, va_list ap)
{
    char text[ERR_TEXT_MAX];
    vsnprintf(text, sizeof text, fmt, ap);
    memcpy(err_text, text, sizeof text);
}

msr_status_t msr_err(msr_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vset(fmt, ap);
    va_end(ap);
    return st;
}

void msr_err_set(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vset(fmt, ap);
    va_end(ap);
}

msr_status_t msr_err_prefix(msr_status_t st, const char *fmt, ...)
{
    char context[ERR_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    if (err_text[0] == '\0') {
        snprintf(err_text, (size_t)ERR_TEXT_MAX, "%s", context);
    } else {
        /* context, ": ", then as much of the old text as fits */
        char old[ERR_TEXT_MAX];
        memcpy(old, err_text, sizeof old);
        size_t n = strlen(context);
        if (n > (size_t)ERR_TEXT_MAX - 3)
            n = (size_t)ERR_TEXT_MAX - 3;
        memcpy(err_text, context, n);
        memcpy(err_text + n, ": ", 2);
        size_t room = (size_t)ERR_TEXT_MAX - n - 3;
        size_t m = strnlen(old, room);
        memcpy(err_text + n + 2, old, m);
        err_text[n + 2 + m] = '\0';
    }
    return st;
}

const char *msr_err_msg(void)
{
    return err_text;
}

const char *msr_err_msg_or(msr_status_t st)
{
    return err_text[0] != '\0' ? err_text : msr_status_str(st);
}

void msr_err_clear(void)
{
    err_text[0] = '\0';
}
