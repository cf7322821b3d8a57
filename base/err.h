/* The one error channel: a status travels as the return value, its message
 * in this thread's error text. A function that fails sets the text where the
 * failure is first seen (msr_err) and returns the status; callers that only
 * pass the status on leave the text alone or add their context in front
 * (msr_err_prefix); the place that handles the error logs it once
 * (msr_err_msg). msr_last_error() (public, msrun/base.h) reads the same
 * text. */
#ifndef MSR_BASE_ERR_H
#define MSR_BASE_ERR_H

#include "msrun/base.h"

/* Sets this thread's error text and returns st, so a failure reads
 *   return msr_err(MSR_ERR_IO, "open %s: %s", path, strerror(errno)); */
msr_status_t msr_err(msr_status_t st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets this thread's error text without a status. */
void msr_err_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Puts "<context>: " in front of the current text (or sets it to the
 * context alone, when empty) and returns st. */
msr_status_t msr_err_prefix(msr_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* This thread's error text; "" when none is set. Never NULL. */
const char *msr_err_msg(void);

/* This thread's error text, or the status' own sentence when none is set. */
const char *msr_err_msg_or(msr_status_t st);

void msr_err_clear(void);

/* This thread's text itself (MSR_ERR_TEXT_MAX bytes), for err.c alone. It
 * is in an object of its own (err_store.c) and exported from libmsrun, so
 * that a program that links a static module (model/, parallel/) besides
 * libmsrun takes libmsrun's: the module's failures and libmsrun's are then
 * one text, and msr_last_error() names what the module last said. */
#define MSR_ERR_TEXT_MAX 512
MSR_API char *msr_err_buffer(void);

#endif
