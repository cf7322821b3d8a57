/* The GPU table of a build without CUDA: there is none, so the device
 * communicators answer MSR_ERR_UNSUPPORTED (everything above the table still
 * builds, and its tests run with a fake table). */
#include "comm/nccl/gpu_api.h"

const msr_gpu_api_t *msr_gpu_api_cuda(void)
{
    return NULL;
}

const char *msr_gpu_api_why(void)
{
    return "libmsrun was built without CUDA";
}
