/* Private status helpers shared by every module. */
#ifndef MSR_BASE_STATUS_H
#define MSR_BASE_STATUS_H

#include "msrun/base.h"

/* Converts an errno value to the closest status (MSR_ERR_SYSTEM otherwise). */
msr_status_t msr_status_from_errno(int err);

#define MSR_UNUSED(x)     ((void)(x))
#define MSR_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MSR_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define MSR_MAX(a, b)     ((a) > (b) ? (a) : (b))

#endif
