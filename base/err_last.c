/* msr_last_error (msrun/base.h) in an object of its own. An executable
 * that links a static module (parallel/) besides libmsrun pulls err.o out
 * of libmsrun_base.a for msr_err, but takes msr_last_error from libmsrun:
 * so it reads libmsrun's error text after a libmsrun call, and never holds
 * (and exports) a copy of its own that libmsrun's calls would bind to. */
#include "base/err.h"

const char *msr_last_error(void)
{
    return msr_err_msg();
}
