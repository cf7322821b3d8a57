/* libmsrun: everything a worker needs, in one include. Call msr_init() first
 * (store.h); the communicators are in comm.h. */
#ifndef MSRUN_MSRUN_H
#define MSRUN_MSRUN_H

#include "msrun/base.h"
#include "msrun/store.h"
#include "msrun/checkpoint.h"
#include "msrun/comm.h"
#include "msrun/device.h"
#include "msrun/ps.h"

#endif
