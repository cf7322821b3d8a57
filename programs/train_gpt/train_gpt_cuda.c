/* train_gpt --device cuda: the CUDA trainer (parallel/cuda), loaded with
 * dlopen only for a CUDA run, driven by the same loop as the CPU one. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/util.h"
#include "msrun/msrun.h"
#include "parallel/train.h"
#include "parallel/cuda/train_cuda.h"
#include "programs/train_gpt/train_gpt.h"

#ifdef MSR_HAVE_CUDA_TRAIN
/* The CUDA trainer's functions, looked up in the module (libmsrun_train_cuda.so,
 * parallel/CMakeLists.txt) only for --device cuda: linking it would map cuBLAS
 * into every CPU run. */
typedef struct cuda_api {
    void *handle;
    void (*log_init)(const char *prog, int node, int rank);
    msr_status_t (*create)(const msr_train_config_t *cfg, const msr_dataset_t *data,
                           msr_comm_t *comm, msr_cuda_trainer_t **tr_p);
    void (*destroy)(msr_cuda_trainer_t *tr);
    msr_status_t (*step)(msr_cuda_trainer_t *tr, double *loss_p);
    msr_status_t (*snapshot)(msr_cuda_trainer_t *tr, const char *meta, void **buf_p, size_t *len_p);
    msr_status_t (*restore)(msr_cuda_trainer_t *tr, const char *meta, int world,
                            msr_trainer_fetch_t fetch, void *arg);
} cuda_api_t;

/* Loads the module: $MSRUN_CUDA_TRAINER when set, else ../lib/<module> next
 * to this executable's directory (build/bin and build/lib). Returns 0, or -1
 * with the reason printed; the table is filled only on success. */
static int cuda_api_load(cuda_api_t *api, int rank)
{
    char path[PATH_MAX + 64];
    const char *env = getenv("MSRUN_CUDA_TRAINER");
    if (env != NULL && env[0] != '\0') {
        snprintf(path, sizeof path, "%s", env);
    } else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) {
            fprintf(stderr,
                    "train_gpt: --device cuda: cannot find this executable "
                    "(/proc/self/exe): %s; set MSRUN_CUDA_TRAINER to %s\n",
                    strerror(errno), MSR_CUDA_TRAINER_NAME);
            return -1;
        }
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL)
            *slash = '\0';
        snprintf(path, sizeof path, "%s/../lib/%s", exe, MSR_CUDA_TRAINER_NAME);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr,
                "train_gpt: --device cuda: cannot load the CUDA trainer: %s "
                "(MSRUN_CUDA_TRAINER names another path)\n",
                dlerror());
        return -1;
    }
    cuda_api_t a = {.handle = h};
    static const char *const names[] = {"msr_cuda_trainer_log_init", "msr_cuda_trainer_create",
                                        "msr_cuda_trainer_destroy",  "msr_cuda_trainer_step",
                                        "msr_cuda_trainer_snapshot", "msr_cuda_trainer_restore"};
    void *fn[6];
    for (int i = 0; i < 6; i++) {
        dlerror();
        if ((fn[i] = dlsym(h, names[i])) == NULL) {
            const char *why = dlerror();
            fprintf(stderr, "train_gpt: --device cuda: %s: no %s: %s\n", path, names[i],
                    why != NULL ? why : "null symbol");
            dlclose(h);
            return -1;
        }
    }
    /* POSIX allows converting dlsym's void * to a function pointer; memcpy
     * keeps -Wpedantic quiet about it */
    memcpy(&a.log_init, &fn[0], sizeof fn[0]);
    memcpy(&a.create, &fn[1], sizeof fn[1]);
    memcpy(&a.destroy, &fn[2], sizeof fn[2]);
    memcpy(&a.step, &fn[3], sizeof fn[3]);
    memcpy(&a.snapshot, &fn[4], sizeof fn[4]);
    memcpy(&a.restore, &fn[5], sizeof fn[5]);
    a.log_init("train_gpt", -1, rank);
    *api = a;
    return 0;
}

/* The GPU trainer behind trainer_ops_t: the module's functions and the
 * trainer they drive. */
typedef struct cuda_run {
    const cuda_api_t *api;
    msr_cuda_trainer_t *tr;
} cuda_run_t;

static msr_status_t cuda_step(void *arg, double *loss_p)
{
    cuda_run_t *c = arg;
    return c->api->step(c->tr, loss_p);
}

static msr_status_t cuda_snapshot(void *arg, const char *meta, void **buf_p, size_t *len_p)
{
    cuda_run_t *c = arg;
    return c->api->snapshot(c->tr, meta, buf_p, len_p);
}

static msr_status_t cuda_restore(void *arg, const char *meta, int world, msr_trainer_fetch_t fetch,
                                 void *farg)
{
    cuda_run_t *c = arg;
    return c->api->restore(c->tr, meta, world, fetch, farg);
}

static uint64_t cuda_steps(const void *arg)
{
    return ((const cuda_run_t *)arg)->tr->step;
}

static double cuda_grad_norm(const void *arg)
{
    return ((const cuda_run_t *)arg)->tr->last_grad_norm;
}

static const trainer_ops_t cuda_ops = {cuda_step, cuda_snapshot, cuda_restore, cuda_steps,
                                       cuda_grad_norm};

/* Trains on the GPU (parallel/cuda/train_cuda.h): every rank of a job
 * through a device communicator over the world (even a world of one, so
 * NCCL's path runs), a process alone on device 0; the step loop,
 * checkpoints and resume are the CPU run's (train). Returns the exit
 * status. */
int train_gpt_run_cuda(const options_t *o, const msr_train_config_t *cfg, const msr_dataset_t *data,
                       const job_t *job, FILE *loss_log)
{
    msr_comm_t *comm = NULL;
    msr_cuda_trainer_t *tr = NULL;
    cuda_api_t cuda;
    int rc = 1;
    msr_status_t st;
    if (cuda_api_load(&cuda, job->ctx != NULL ? job->rank : -1) != 0)
        return 1;
    const cuda_api_t *api = &cuda;
    if (job->ctx != NULL && (st = msr_comm_world(job->ctx, &comm)) != MSR_OK) {
        fprintf(stderr, "train_gpt: cannot make the communicator: %s: %s\n", msr_status_str(st),
                msr_last_error());
        goto out;
    }
    msr_err_clear(); /* what is printed below is this call's */
    if ((st = api->create(cfg, data, comm, &tr)) != MSR_OK) {
        fprintf(stderr, "train_gpt: --device cuda: cannot start on the GPU: %s: %s\n",
                msr_status_str(st), msr_err_msg_or(st));
        goto out;
    }
    uint64_t G = (uint64_t)o->micro_batch * (uint64_t)o->grad_accum * (uint64_t)o->dp;
    if (job->rank == 0)
        fprintf(stderr,
                "train_gpt: model of %zu parameters (layers %d channels %d heads %d seq %d); "
                "batch %llu = micro %d x accum %d x dp %d; on GPU %d%s%s%s%s%s%s; %.1f MB of "
                "device memory for the model; data: %s; loss in nats per byte\n",
                train_gpt_model_params(cfg), cfg->model.layers, cfg->model.channels,
                cfg->model.heads, cfg->model.max_seq, (unsigned long long)G, cfg->micro_batch,
                cfg->grad_accum, cfg->dp, tr->device, tr->dcomm != NULL ? ", gradients over " : "",
                tr->dcomm != NULL ? msr_comm_backend(tr->dcomm) : "",
                tr->hopt != NULL ? "; AdamW on the host (its moments and master parameters in "
                                   "host memory)"
                                 : "",
                tr->hgrads != NULL ? "; the blocks' parameters and gradients in host memory, two "
                                     "on the GPU at a time"
                                   : "",
                cfg->precision == MSR_PRECISION_BF16
                    ? "; bf16 products on cuBLAS (operands rounded to bf16, fp32 sums)"
                    : "",
                tr->fused_attention ? "; attention fused on the tensor cores (bf16, fp32 sums)"
                                    : "",
                (double)tr->device_bytes / 1e6, data->origin);
    char meta[MSR_TCKPT_META_MAX];
    train_gpt_meta(meta, sizeof meta, cfg, G, data);
    cuda_run_t run = {api, tr};
    trainer_t t = {&cuda_ops, &run, NULL};
    rc = train_gpt_run(&t, job, o, meta, comm, G * (uint64_t)o->seq, loss_log);
out:
    api->destroy(tr);
    msr_comm_destroy(comm);
    /* the module stays mapped: the CUDA runtime and NCCL may keep threads
     * and exit handlers in it until the process ends */
    return rc;
}
#endif
