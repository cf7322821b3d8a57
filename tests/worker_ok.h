/* OK(expr), the status check of the test workers: tests/worker_fail.h's
 * programs and the comm workers whose pieces share one fail
 * (tests/comm/comm_worker.h, tests/comm/gpu_fake_worker.h). The includer
 * declares fail(FMT, ...), which reports and does not return. */
#ifndef MSRUN_TESTS_WORKER_OK_H
#define MSRUN_TESTS_WORKER_OK_H

#include "msrun/msrun.h"

/* Fails unless expr returns MSR_OK, naming it and its status. */
#define OK(expr)                                         \
    do {                                                 \
        msr_status_t st_ = (expr);                       \
        if (st_ != MSR_OK)                               \
            fail("%s: %s", #expr, msr_status_name(st_)); \
    } while (0)

#endif
