/* The error text's storage (err.h: msr_err_buffer) in an object of its
 * own. An executable that links a static module besides libmsrun pulls
 * err.o out of libmsrun_base.a but finds msr_err_buffer already defined
 * by libmsrun (which comes first on its link line): its module's errors
 * and libmsrun's then share libmsrun's text. Alone (no libmsrun), the
 * archive gives this object. */
#include "base/err.h"

char *msr_err_buffer(void)
{
    static _Thread_local char text[MSR_ERR_TEXT_MAX];
    return text;
}
