/* The model-parallel runtime on the device interface (parallel/mp.c): the
 * CPU device named or left NULL trains to the same losses and parameters,
 * bitwise, in every recompute mode and at ZeRO 0-2 (the work space, the
 * frames and the head's buffers come from the device); a device whose
 * memory is not host memory is refused with its name, before anything is
 * allocated on it; every allocation of a runtime on the named CPU device
 * failed in turn is a status, never a crash. */
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "comm/device_impl.h"
#include "parallel/mp_impl.h"
#include "parallel/train.h"
#include "tests/parallel/mp_small.h"
#include "tests/runner.h"

static msr_train_config_t small_config(int zero, int rc, const msr_device_t *dev)
{
    msr_train_config_t c = mp_small_config(3, zero);
    c.mp.recompute = (msr_mp_recompute_t)rc;
    c.mp.schedule = rc == 1 ? MSR_MP_GPIPE : MSR_MP_1F1B;
    c.mp.device = dev;
    c.mp_always = 1;
    return c;
}

/* A runtime trainer alone (tp = pp = 1) on dev; NULL on failure, its
 * status in *st_p. */
static msr_trainer_t *runtime(const msr_train_config_t *c, msr_dataset_t *ds, msr_mesh_t **mesh_p,
                              msr_status_t *st_p)
{
    msr_trainer_t *tr = NULL;
    *mesh_p = NULL;
    *st_p = msr_mesh_create(NULL, 1, 1, 1, 1, mesh_p);
    if (*st_p == MSR_OK)
        *st_p = msr_trainer_create_mesh(c, ds, *mesh_p, &tr);
    return tr;
}

/* The CPU device, named or by default: four steps give the same losses
 * and parameters, bitwise, in each recompute mode at ZeRO 0-2, and the
 * runtime holds the device it was given (the default: the CPU's). */
static void test_cpu_named(void)
{
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_generate(3, 1 << 15, &ds));
    for (int zero = 0; zero <= 2; zero++) {
        for (int rc = 0; rc < 3; rc++) {
            msr_train_config_t ca = small_config(zero, rc, NULL);
            msr_train_config_t cb = small_config(zero, rc, msr_device_cpu());
            msr_mesh_t *ma = NULL, *mb = NULL;
            msr_status_t sa, sb;
            msr_trainer_t *a = runtime(&ca, ds, &ma, &sa), *b = runtime(&cb, ds, &mb, &sb);
            MSR_CHECK_OK(sa);
            MSR_CHECK_OK(sb);
            MSR_CHECK(a->mp != NULL && b->mp != NULL);
            MSR_CHECK(a->mp->dev == msr_device_cpu() && b->mp->dev == msr_device_cpu());
            for (int i = 0; i < 4; i++) {
                double la, lb;
                MSR_CHECK_OK(msr_trainer_step(a, &la));
                MSR_CHECK_OK(msr_trainer_step(b, &lb));
                MSR_CHECK_MSG(memcmp(&la, &lb, sizeof la) == 0,
                              "zero %d recompute %d step %d: %.17g != %.17g", zero, rc, i + 1, la,
                              lb);
            }
            MSR_CHECK_EQ(
                memcmp(a->model->params, b->model->params, a->model->num_params * sizeof(float)),
                0);
            msr_trainer_destroy(b);
            msr_trainer_destroy(a);
            msr_mesh_destroy(mb);
            msr_mesh_destroy(ma);
        }
    }
    msr_dataset_destroy(ds);
}

/* A device whose memory the host cannot read: the runtime is refused with
 * the device named. No entry of its table is called (they are all NULL: a
 * call would crash), so nothing was allocated on it. */
static void test_device_memory_refused(void)
{
    static const msr_device_ops_t none = {0};
    msr_device_t gpu = {.ops = &none, .name = "gpu:7", .is_host = 0};
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_generate(3, 1 << 15, &ds));
    for (int rc = 0; rc < 3; rc++) {
        msr_train_config_t c = small_config(1, rc, &gpu);
        msr_mesh_t *mesh = NULL;
        msr_status_t st;
        msr_trainer_t *tr = runtime(&c, ds, &mesh, &st);
        MSR_CHECK_STATUS(st, MSR_ERR_UNSUPPORTED);
        MSR_CHECK(tr == NULL);
        MSR_CHECK_MSG(strstr(msr_last_error(), "mp: device gpu:7") != NULL, "got '%s'",
                      msr_last_error());
        msr_mesh_destroy(mesh);
    }
    msr_dataset_destroy(ds);
}

/* Every allocation of a runtime on the named CPU device (full recompute,
 * ZeRO-2) and of two steps failed in turn: NO_MEMORY comes back, nothing
 * leaks (the sanitizer build checks), and the run with none failed
 * completes. */
static void test_alloc_failures(void)
{
    msr_dataset_t *ds = NULL;
    MSR_CHECK_OK(msr_dataset_generate(3, 1 << 15, &ds));
    msr_train_config_t c = small_config(2, MSR_MP_RECOMPUTE_FULL, msr_device_cpu());
    long i = 0;
    for (;; i++) {
        int failed;
        msr_status_t st = mp_small_alloc_round(&c, ds, i, 0, &failed);
        if (!failed) {
            MSR_CHECK_OK(st);
            break;
        }
        MSR_CHECK_MSG(st == MSR_ERR_NO_MEMORY, "allocation %ld failed: %s (%s)", i,
                      msr_status_name(st), msr_last_error());
        MSR_CHECK(i < 100000);
    }
    printf("alloc_failures: %ld allocations failed in turn\n", i);
    MSR_CHECK(i > 20);
    msr_dataset_destroy(ds);
}

static const msr_test_t tests[] = {
    {"cpu_named", test_cpu_named, 60},
    {"device_memory_refused", test_device_memory_refused, 30},
    {"alloc_failures", test_alloc_failures, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
