/* The error text of a failed libmsrun call (see err_call.h). */
#include "model/err_call.h"

#include <stdarg.h>
#include <stdio.h>

msr_status_t msr_err_call(msr_status_t st, const char *fmt, ...)
{
    char context[256], why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    /* copied first: when both copies are one, msr_err writes over it */
    const char *last = msr_last_error();
    snprintf(why, sizeof why, "%s", last[0] != '\0' ? last : msr_status_str(st));
    return msr_err(st, "%s: %s", context, why);
}
