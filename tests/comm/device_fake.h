/* A fake GPU table whose queued work is deferred (device_fake.c). */
#ifndef MSR_TESTS_COMM_DEVICE_FAKE_H
#define MSR_TESTS_COMM_DEVICE_FAKE_H

#include "comm/nccl/gpu_api.h"

/* The table; one process's state, for one thread. */
const msr_gpu_api_t *msr_test_device_fake_api(void);

#endif
