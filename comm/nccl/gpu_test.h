/* The device communicators' entry points with the GPU table as an argument:
 * what msr_gpu_select and msr_comm_device call with the real table, and what
 * the tests call with a fake one (tests/comm/gpu_fake.c). Same contracts as
 * the public calls in msrun/comm.h. */
#ifndef MSR_COMM_NCCL_GPU_TEST_H
#define MSR_COMM_NCCL_GPU_TEST_H

#include "comm/nccl/gpu_api.h"

msr_status_t msr_gpu_select_with(msr_ctx_t *ctx, const msr_gpu_api_t *api, int *device_p);
msr_status_t msr_gpu_comm_create(msr_comm_t *comm, unsigned flags, const msr_gpu_api_t *api,
                                 msr_comm_t **dcomm_p);

#endif
