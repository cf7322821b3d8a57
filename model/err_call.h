/* The error text of a failed libmsrun call, carried into this module's. */
#ifndef MSR_MODEL_ERR_CALL_H
#define MSR_MODEL_ERR_CALL_H

#include "base/err.h"

/* A libmsrun call (a communicator's) failed with st. libmsrun keeps its
 * error text in its own copy (msr_last_error), apart from the text of a
 * program that links model/ and parallel/ statically (base/err.h's): sets
 * the latter to "<context>: <libmsrun's text>" (the status' sentence when
 * libmsrun set none) and returns st, so the caller passes st on and the
 * handler logs the whole text once. Either copy may be the same one. */
msr_status_t msr_err_call(msr_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
