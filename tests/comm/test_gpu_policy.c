/* The device communicators' policy, without a GPU: which device a local
 * rank uses, when ranks share a GPU, the backend a group gets (and when it
 * is refused), MSR_COMM_GPU's values, and what a build without CUDA
 * answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "comm/nccl/gpu_impl.h"
#include "tests/runner.h"

static void test_pick_device(void)
{
    MSR_CHECK_EQ(gpu_pick_device(0, 1), 0);
    MSR_CHECK_EQ(gpu_pick_device(3, 1), 0);
    MSR_CHECK_EQ(gpu_pick_device(3, 4), 3);
    MSR_CHECK_EQ(gpu_pick_device(5, 4), 1);
    MSR_CHECK_EQ(gpu_pick_device(7, 8), 7);
    MSR_CHECK_EQ(gpu_pick_device(0, 0), -1);
    MSR_CHECK_EQ(gpu_pick_device(-1, 2), -1);
    /* every device gets local_size / count ranks, give or take one */
    int per[3] = {0};
    for (int lr = 0; lr < 8; lr++)
        per[gpu_pick_device(lr, 3)]++;
    MSR_CHECK(per[0] == 3 && per[1] == 3 && per[2] == 2);
}

static void test_node_shared(void)
{
    MSR_CHECK(gpu_node_shared(2, 1));
    MSR_CHECK(!gpu_node_shared(1, 1));
    MSR_CHECK(!gpu_node_shared(8, 8));
    MSR_CHECK(gpu_node_shared(9, 8));
    MSR_CHECK(!gpu_node_shared(4, 0)); /* no device: nothing to share */
}

static void test_mode_parse(void)
{
    gpu_mode_t m = GPU_MODE_STAGED;
    MSR_CHECK_OK(gpu_mode_parse(NULL, &m));
    MSR_CHECK_EQ(m, GPU_MODE_AUTO);
    m = GPU_MODE_STAGED;
    MSR_CHECK_OK(gpu_mode_parse("", &m));
    MSR_CHECK_EQ(m, GPU_MODE_AUTO);
    MSR_CHECK_OK(gpu_mode_parse("NCCL", &m));
    MSR_CHECK_EQ(m, GPU_MODE_NCCL);
    MSR_CHECK_OK(gpu_mode_parse("Staged", &m));
    MSR_CHECK_EQ(m, GPU_MODE_STAGED);
    MSR_CHECK_OK(gpu_mode_parse("auto", &m));
    MSR_CHECK_EQ(m, GPU_MODE_AUTO);
    m = GPU_MODE_NCCL;
    MSR_CHECK_STATUS(gpu_mode_parse("nccl ", &m), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(gpu_mode_parse("ucx", &m), MSR_ERR_INVALID_ARG);
    MSR_CHECK_EQ(m, GPU_MODE_NCCL); /* untouched on failure */
    MSR_CHECK_STR(gpu_mode_name(GPU_MODE_STAGED), "staged");
    MSR_CHECK_STR(gpu_mode_name((gpu_mode_t)9), "?");
}

static gpu_member_t member(uint64_t host, int device, int with_uuid)
{
    gpu_member_t m;
    memset(&m, 0, sizeof m);
    m.magic = GPU_MEMBER_MAGIC;
    m.host = host;
    m.device = device;
    m.local_size = 4;
    m.device_count = 2;
    if (with_uuid) {
        m.uuid[0] = 0xab;
        m.uuid[1] = (unsigned char)device;
        m.uuid[15] = (unsigned char)(host & 0xff);
    }
    return m;
}

static void test_find_shared(void)
{
    gpu_member_t m[8];
    int a = -1, b = -1;
    /* two machines, two GPUs each, a rank per GPU */
    m[0] = member(1, 0, 1);
    m[1] = member(1, 1, 1);
    m[2] = member(2, 0, 1);
    m[3] = member(2, 1, 1);
    MSR_CHECK(!gpu_find_shared(m, 4, &a, &b));
    MSR_CHECK(a == -1 && b == -1); /* untouched */
    /* a third rank on machine 2's GPU 1 */
    m[4] = member(2, 1, 1);
    MSR_CHECK(gpu_find_shared(m, 5, &a, &b));
    MSR_CHECK_EQ(a, 3);
    MSR_CHECK_EQ(b, 4);
    /* the same UUID on another machine is another GPU */
    m[4] = member(3, 1, 1);
    memcpy(m[4].uuid, m[3].uuid, MSR_GPU_UUID_BYTES);
    MSR_CHECK(!gpu_find_shared(m, 5, &a, &b));
    /* the UUID decides, not the ordinal (CUDA_VISIBLE_DEVICES renumbers) */
    m[4] = member(1, 5, 1);
    memcpy(m[4].uuid, m[0].uuid, MSR_GPU_UUID_BYTES);
    MSR_CHECK(gpu_find_shared(m, 5, &a, &b));
    MSR_CHECK(a == 0 && b == 4);
    m[4] = member(1, 0, 1);
    m[4].uuid[7] = 9; /* ordinal 0, another UUID */
    MSR_CHECK(!gpu_find_shared(m, 5, &a, &b));
    /* without UUIDs, the ordinal; a member without one against one with */
    m[0] = member(1, 0, 0);
    m[1] = member(1, 1, 0);
    MSR_CHECK(!gpu_find_shared(m, 2, &a, &b));
    m[1] = member(1, 0, 1);
    MSR_CHECK(gpu_find_shared(m, 2, &a, &b));
    MSR_CHECK(a == 0 && b == 1);
    /* several pairs: the lowest first member, then the lowest second */
    for (int i = 0; i < 8; i++)
        m[i] = member(7, i, 1);
    m[6] = member(7, 2, 1);
    m[7] = member(7, 1, 1);
    m[5] = member(7, 1, 1);
    MSR_CHECK(gpu_find_shared(m, 8, &a, &b));
    MSR_CHECK(a == 1 && b == 5);
}

static void test_find_shared_large(void)
{
    enum { N = 4096 };
    gpu_member_t *m = calloc(N, sizeof *m);
    MSR_CHECK(m != NULL);
    for (int i = 0; i < N; i++)
        m[i] = member((uint64_t)(i / 8 + 100), i % 8, 1); /* 512 machines of 8 GPUs */
    int a, b;
    MSR_CHECK(!gpu_find_shared(m, N, &a, &b));
    m[3001] = m[17];
    MSR_CHECK(gpu_find_shared(m, N, &a, &b));
    MSR_CHECK(a == 17 && b == 3001);
    free(m);
}

/* Out of memory for the sort: the pairwise comparison gives the same. */
static void test_find_shared_no_memory(void)
{
    gpu_member_t m[6];
    for (int i = 0; i < 6; i++)
        m[i] = member(1, i, 1);
    m[4] = member(1, 2, 1);
    int a = -1, b = -1;
    msr_alloc_fail_at(0);
    int found = gpu_find_shared(m, 6, &a, &b);
    int failed = msr_alloc_failed();
    msr_alloc_fail_at(-1);
    MSR_CHECK(failed);
    MSR_CHECK(found && a == 2 && b == 4);
}

static void test_decide(void)
{
    gpu_member_t m[4];
    gpu_kind_t k = (gpu_kind_t)7;
    char why[256];
    for (int i = 0; i < 4; i++)
        m[i] = member(1, i, 1);
    MSR_CHECK_OK(gpu_decide(m, 4, &k, why, sizeof why));
    MSR_CHECK_EQ(k, GPU_KIND_NCCL);
    MSR_CHECK(strstr(why, "nccl") != NULL);
    MSR_CHECK_OK(gpu_decide(m, 1, &k, why, sizeof why));
    MSR_CHECK_EQ(k, GPU_KIND_NCCL);
    /* ranks 1 and 3 on one GPU: staged, and the log says who */
    m[3] = member(1, 1, 1);
    MSR_CHECK_OK(gpu_decide(m, 4, &k, why, sizeof why));
    MSR_CHECK_EQ(k, GPU_KIND_STAGED);
    MSR_CHECK(strstr(why, "members 1 and 3") != NULL);
    MSR_CHECK(strstr(why, "4 ranks on 2 GPUs") != NULL);
    /* nccl forced: refused */
    for (int i = 0; i < 4; i++)
        m[i].mode = GPU_MODE_NCCL;
    k = (gpu_kind_t)7;
    MSR_CHECK_STATUS(gpu_decide(m, 4, &k, why, sizeof why), MSR_ERR_UNSUPPORTED);
    MSR_CHECK_EQ((int)k, 7); /* untouched on failure */
    MSR_CHECK(strstr(why, "NCCL refuses") != NULL);
    /* staged forced, by the environment or the flag, even with a GPU each */
    for (int i = 0; i < 4; i++) {
        m[i] = member(1, i, 1);
        m[i].mode = GPU_MODE_STAGED;
    }
    MSR_CHECK_OK(gpu_decide(m, 4, &k, why, sizeof why));
    MSR_CHECK_EQ(k, GPU_KIND_STAGED);
    for (int i = 0; i < 4; i++) {
        m[i].mode = GPU_MODE_AUTO;
        m[i].flags = MSR_COMM_STAGED;
    }
    k = GPU_KIND_NCCL;
    MSR_CHECK_OK(gpu_decide(m, 4, &k, why, sizeof why));
    MSR_CHECK_EQ(k, GPU_KIND_STAGED);
    /* members that disagree */
    m[2].flags = 0;
    MSR_CHECK_STATUS(gpu_decide(m, 4, &k, why, sizeof why), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(why, "member 2") != NULL);
    m[2].flags = MSR_COMM_STAGED;
    m[3].mode = GPU_MODE_NCCL;
    MSR_CHECK_STATUS(gpu_decide(m, 4, &k, why, sizeof why), MSR_ERR_INVALID_ARG);
    MSR_CHECK(strstr(why, "MSR_COMM_GPU") != NULL && strstr(why, "member 3 has nccl") != NULL);
}

/* The real table exists exactly in CUDA builds; a build without CUDA
 * answers the public calls with MSR_ERR_UNSUPPORTED. */
static void test_build(void)
{
#if MSRUN_TEST_HAVE_CUDA
    MSR_CHECK(msr_gpu_api_cuda() != NULL);
    MSR_CHECK_STR(msr_gpu_api_cuda()->name, "cuda");
#else
    MSR_CHECK(msr_gpu_api_cuda() == NULL);
    int dev = -1;
    /* any non-NULL context: the call stops at the missing table */
    MSR_CHECK_STATUS(msr_gpu_select((msr_ctx_t *)&dev, &dev), MSR_ERR_UNSUPPORTED);
    MSR_CHECK_EQ(dev, -1);
    msr_comm_t *d = NULL;
    MSR_CHECK_STATUS(msr_comm_device_world((msr_ctx_t *)&dev, 0, &d), MSR_ERR_UNSUPPORTED);
    MSR_CHECK(d == NULL);
    MSR_CHECK(strstr(msr_last_error(), "without CUDA") != NULL);
#endif
    MSR_CHECK_STATUS(msr_gpu_select(NULL, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_comm_set_stream(NULL, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK_STATUS(msr_comm_wait_stream(NULL, NULL), MSR_ERR_INVALID_ARG);
    MSR_CHECK(msr_comm_stream(NULL) == NULL);
    MSR_CHECK_EQ(msr_comm_gpu(NULL), -1);
}

static const msr_test_t tests[] = {
    {"pick_device", test_pick_device, 10},
    {"node_shared", test_node_shared, 10},
    {"mode_parse", test_mode_parse, 10},
    {"find_shared", test_find_shared, 10},
    {"find_shared_large", test_find_shared_large, 30},
    {"find_shared_no_memory", test_find_shared_no_memory, 10},
    {"decide", test_decide, 10},
    {"build", test_build, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
