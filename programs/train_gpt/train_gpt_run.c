/* train_gpt's run (train_gpt.h): the step loop, checkpoint saving and
 * resume, whatever the device, and the CPU run's trace (its report:
 * train_gpt_report.c). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "layout/layout.h"
#include "model/err_call.h"
#include "parallel/ckpt.h"
#include "model/moe.h"
#include "programs/train_gpt/train_gpt.h"

static msr_status_t cpu_step(void *tr, double *loss_p)
{
    return msr_trainer_step(tr, loss_p);
}

static msr_status_t cpu_snapshot(void *tr, const char *meta, void **buf_p, size_t *len_p)
{
    return msr_trainer_snapshot(tr, meta, buf_p, len_p);
}

static uint64_t cpu_steps(const void *tr)
{
    return ((const msr_trainer_t *)tr)->step;
}

static double cpu_grad_norm(const void *tr)
{
    return ((const msr_trainer_t *)tr)->last_grad_norm;
}

const trainer_ops_t train_gpt_cpu_ops = {cpu_step, cpu_snapshot, train_gpt_cpu_restore, cpu_steps,
                                         cpu_grad_norm};

/* The text a resume must match: the settings that decide the numbers
 * (whatever the device, so CPU and GPU runs resume each other; not the
 * layout: a checkpoint holds the whole model's tensors, parallel/ckpt.h,
 * and loads into any layout of the same global batch). */
void train_gpt_meta(char *meta, size_t len, const msr_train_config_t *cfg, uint64_t G,
                    const msr_dataset_t *data)
{
    snprintf(meta, len,
             "layers %d channels %d heads %d seq %d vocab %d; global batch %llu; seed %llu; "
             "lr %.9g warmup %d weight-decay %.9g grad-clip %.9g; data %s (%zu tokens)",
             cfg->model.layers, cfg->model.channels, cfg->model.heads, cfg->model.max_seq,
             cfg->model.vocab, (unsigned long long)G, (unsigned long long)cfg->seed,
             (double)cfg->lr, cfg->warmup, cfg->adamw.weight_decay, (double)cfg->grad_clip,
             data->origin, data->size);
    if (data->epochs) { /* the sampler's order (model/data.h) */
        size_t used = strlen(meta);
        snprintf(meta + used, len - used, "; epochs");
    }
    if (cfg->model.arch == MSR_GPT_ARCH_LLAMA) { /* a Llama resumes only as the same Llama */
        size_t used = strlen(meta);
        snprintf(meta + used, len - used, "; arch llama ffn %d kv-heads %d rope-theta %.9g",
                 cfg->model.ffn, cfg->model.kv_heads, cfg->model.rope_theta);
    }
    if (cfg->model.moe.experts > 0) { /* the MoE blocks (not ep: any ep resumes) */
        const msr_gpt_moe_t *m = &cfg->model.moe;
        size_t used = strlen(meta);
        snprintf(meta + used, len - used,
                 "; experts %d top-k %d moe-every %d capacity-factor %.9g aux-loss %.9g",
                 m->experts, m->top_k, m->every, m->capacity_factor, m->aux_loss);
    }
}

/* The run's checkpoints: with --ckpt-async the one a thread is writing
 * (at most one: the next save waits for it), and what saving cost the
 * steps. Only the thread that runs the steps calls the saver_ functions;
 * the writer thread touches the fields from step to write_ns while
 * running is set, and copied under mu. On the CPU trainer (its
 * parameters not offloaded) the writer also makes the copy
 * (msr_trainer_snap_copy) while the next step computes, and the step's
 * update waits for it (saver_gate); with the moments offloaded it writes
 * the save a piece at a time from the trainer and their file instead
 * (msr_trainer_snap_save), and the update waits for its last piece's
 * read. */
typedef struct saver {
    msr_ctx_t *ctx;
    const char *dir;
    int keep;
    int running; /* a thread is writing step */
    pthread_t thread;
    int64_t step;
    msr_trainer_snap_t *snap; /* the state to copy first, or NULL */
    void *buf;                /* the staged state, freed by the writer */
    size_t len;
    msr_status_t st;   /* the writer's outcome ... */
    char err[512];     /* ... and its msr_last_error() */
    uint64_t write_ns; /* writing in the background (the copy included) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int copied;        /* the state is in buf (or its copy failed) */
    uint64_t stall_ns; /* in the steps: the copy, or the whole save ... */
    uint64_t wait_ns;  /* ... of which waiting for the write before */
    uint64_t one_ns;   /* the latest save's part of stall_ns ... */
    uint64_t most_ns;  /* ... and the most of one before it */
    int saves;
} saver_t;

static void saver_copied(saver_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->copied = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void saver_read_done(void *arg)
{
    saver_copied(arg);
}

static void *saver_thread(void *arg)
{
    saver_t *s = arg;
    uint64_t t0 = msr_now_ns();
    s->st = MSR_OK;
    if (msr_trainer_snap_streamed(s->snap)) {
        /* moments or parameters in their files: written a piece at a
         * time, the update waiting until the last piece is read
         * (saver_read_done) */
        s->st =
            msr_trainer_snap_save(s->snap, s->ctx, s->dir, s->step, s->keep, saver_read_done, s);
    } else {
        if (s->snap != NULL) { /* the training thread's update waits for this */
            s->st = msr_trainer_snap_copy(s->snap, &s->buf, &s->len);
            saver_copied(s);
        }
        if (s->st == MSR_OK)
            s->st = msr_tckpt_seal(s->buf, s->len); /* the CRCs the copy left out */
        if (s->st == MSR_OK)
            s->st = msr_ckpt_save(s->ctx, s->dir, s->step, s->buf, s->len, s->keep);
        else /* still in the save's agreement, so that no rank waits for this one */
            s->st = msr_ckpt_save_fail(s->ctx, s->dir, s->step, s->st);
    }
    if (s->st != MSR_OK)
        snprintf(s->err, sizeof s->err, "%s", msr_last_error());
    s->write_ns += msr_now_ns() - t0;
    msr_free(s->buf);
    s->buf = NULL;
    return NULL;
}

/* msr_trainer_t's state_gate: before a step's update writes the state, the
 * copy the writer makes of it is finished (its wait counted in the save's
 * stall). */
static void saver_gate(void *arg)
{
    saver_t *s = arg;
    if (!s->running || s->snap == NULL)
        return;
    uint64_t t0 = msr_now_ns();
    pthread_mutex_lock(&s->mu);
    while (!s->copied)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    uint64_t dt = msr_now_ns() - t0;
    s->stall_ns += dt;
    s->one_ns += dt;
}

/* Waits for the checkpoint being written in the background, if any, and
 * reports its failure (the checkpoint before it stays the latest). */
static msr_status_t saver_wait(saver_t *s)
{
    if (!s->running)
        return MSR_OK;
    pthread_join(s->thread, NULL);
    s->running = 0;
    msr_trainer_snap_free(s->snap);
    s->snap = NULL;
    if (s->st != MSR_OK)
        fprintf(stderr,
                "train_gpt: checkpoint of step %lld under %s (written in the background): %s: "
                "%s\n",
                (long long)s->step, s->dir, msr_status_str(s->st), s->err);
    return s->st;
}

/* Starts the writer of step's checkpoint: the payload buf (len bytes)
 * copied already, or snap's copied by the writer first. Returns 0, or -1
 * when no thread starts (snap, buf and len are then the caller's). */
static int saver_start(saver_t *s, int64_t step, msr_trainer_snap_t *snap, void *buf, size_t len)
{
    s->step = step;
    s->snap = snap;
    s->buf = buf;
    s->len = len;
    s->copied = 0;
    if (pthread_create(&s->thread, NULL, saver_thread, s) != 0) {
        s->snap = NULL;
        s->buf = NULL;
        return -1;
    }
    s->running = 1;
    return 0;
}

/* --ckpt-async on the CPU trainer: the writer copies the state, or
 * streams it with the moments or the parameters offloaded, while the next
 * step computes (its update waits at saver_gate). Returns 1 when started
 * so, 0 when the step is to copy it (no thread), -1 when taking the
 * snapshot failed (*st_p). */
static int save_deferred(const trainer_t *t, const char *meta, saver_t *s, uint64_t step,
                         msr_status_t *st_p)
{
    msr_trainer_snap_t *snap = NULL;
    if (t->cpu == NULL)
        return 0;
    if ((*st_p = msr_trainer_snap_take(t->cpu, meta, &snap)) != MSR_OK)
        return -1;
    t->cpu->state_gate = saver_gate;
    t->cpu->state_gate_arg = s;
    if (saver_start(s, (int64_t)step, snap, NULL, 0) == 0)
        return 1;
    msr_trainer_snap_free(snap);
    return 0;
}

/* Writes checkpoint tr->step through libmsrun: every rank its shard; the
 * step counts once every rank's is durable (msr_ckpt_save waits for all).
 * The CPU trainer writes its shard a piece at a time (msr_trainer_save:
 * the payload is never whole in memory, as under a memory limit with
 * offload); the GPU's copies it to the host whole first. With
 * --ckpt-async a thread writes it, the CPU trainer's state copied by that
 * thread before the next step's update (else by the step); a save first
 * waits for the one before. */
static msr_status_t save_checkpoint(const trainer_t *t, const job_t *job, const options_t *o,
                                    const char *meta, saver_t *s)
{
    void *buf;
    size_t len;
    uint64_t step = t->ops->steps(t->tr), t0 = msr_now_ns();
    s->most_ns = MSR_MAX(s->most_ns, s->one_ns);
    msr_status_t st = saver_wait(s);
    s->wait_ns += msr_now_ns() - t0;
    s->one_ns = 0;
    if (st != MSR_OK)
        return st;
    msr_err_clear();                        /* what is printed below is this call's */
    if (!o->ckpt_async && t->cpu != NULL) { /* written a piece at a time, never whole */
        s->saves++;
        st =
            msr_trainer_save(t->cpu, meta, job->ctx, o->ckpt_dir, (int64_t)step, (int)o->ckpt_keep);
        if (st != MSR_OK)
            fprintf(stderr, "train_gpt: checkpoint of step %llu under %s: %s: %s\n",
                    (unsigned long long)step, o->ckpt_dir, msr_status_str(st), msr_last_error());
        s->one_ns = msr_now_ns() - t0;
        s->stall_ns += s->one_ns;
        return st;
    }
    int deferred = o->ckpt_async ? save_deferred(t, meta, s, step, &st) : 0;
    if (deferred == 0)
        st = t->ops->snapshot(t->tr, meta, &buf, &len);
    if (st != MSR_OK) { /* still in the save's agreement: no rank waits for this one */
        st = msr_ckpt_save_fail(job->ctx, o->ckpt_dir, (int64_t)step, st);
        fprintf(stderr, "train_gpt: checkpoint of step %llu: %s: %s\n", (unsigned long long)step,
                msr_status_str(st), msr_err_msg_or(st));
        return st;
    }
    s->saves++;
    if (deferred == 0 && o->ckpt_async && saver_start(s, (int64_t)step, NULL, buf, len) == 0)
        deferred = 1;
    if (deferred) {
        s->one_ns = msr_now_ns() - t0;
        s->stall_ns += s->one_ns;
        return MSR_OK;
    }
    if (o->ckpt_async && (st = msr_tckpt_seal(buf, len)) != MSR_OK) { /* no thread: here */
        msr_free(buf);
        return msr_ckpt_save_fail(job->ctx, o->ckpt_dir, (int64_t)step, st);
    }
    st = msr_ckpt_save(job->ctx, o->ckpt_dir, (int64_t)step, buf, len, (int)o->ckpt_keep);
    if (st != MSR_OK)
        fprintf(stderr, "train_gpt: checkpoint of step %llu under %s: %s: %s\n",
                (unsigned long long)step, o->ckpt_dir, msr_status_str(st), msr_last_error());
    msr_free(buf);
    s->one_ns = msr_now_ns() - t0;
    s->stall_ns += s->one_ns;
    return st;
}

/* Says that the loss went bad, and what the run resumed from if it did: a
 * NaN right after a resume points at the checkpoint, not at --lr. */
static void report_bad_loss(uint64_t step, double loss, int64_t resumed_from, const char *dir)
{
    if (resumed_from >= 0)
        fprintf(stderr,
                "train_gpt: the loss of step %llu is %f, after resuming from the checkpoint of "
                "step %lld under %s (%s/step-%lld): that checkpoint may hold bad values, or "
                "lower --lr\n",
                (unsigned long long)step, loss, (long long)resumed_from, dir, dir,
                (long long)resumed_from);
    else
        fprintf(stderr, "train_gpt: the loss of step %llu is %f; lower --lr\n",
                (unsigned long long)step, loss);
}

/* Writes the traced step of every rank as Chrome-trace JSON (chrome://tracing,
 * Perfetto): rank 0 receives the others' spans over the world and writes
 * the file; one process per rank, compute on thread 0, communication on 1. */
static msr_status_t write_trace(msr_trainer_t *tr, msr_comm_t *world, const job_t *job,
                                const char *path)
{
    int n = 0;
    const msr_mp_span_t *mine = msr_mp_spans(tr->mp, &n);
    msr_status_t st = MSR_OK;
    if (job->rank != 0) {
        int64_t cnt = n;
        st = msr_comm_send(world, &cnt, 1, MSR_DTYPE_I64, 0, 1);
        if (st == MSR_OK && n > 0)
            st = msr_comm_send(world, mine, (uint64_t)n * sizeof *mine, MSR_DTYPE_U8, 0, 2);
        if (st != MSR_OK)
            fprintf(stderr, "train_gpt: sending the trace to rank 0: %s: %s\n", msr_status_str(st),
                    msr_last_error());
        return st;
    }
    FILE *f = fopen(path, "w");
    if (f == NULL)
        fprintf(stderr, "train_gpt: --trace %s: %s\n", path, strerror(errno));
    if (f != NULL)
        fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    int first = 1;
    for (int r = 0; r < job->world; r++) {
        msr_mp_span_t *buf = NULL;
        const msr_mp_span_t *sp = mine;
        int64_t cnt = n;
        if (r > 0) {
            if ((st = msr_comm_recv(world, &cnt, 1, MSR_DTYPE_I64, r, 1)) != MSR_OK)
                break;
            if (cnt < 0 || cnt > (1 << 24) ||
                (buf = msr_calloc((size_t)cnt + 1, sizeof *buf)) == NULL) {
                st = MSR_ERR_NO_MEMORY;
                break;
            }
            if (cnt > 0 && (st = msr_comm_recv(world, buf, (uint64_t)cnt * sizeof *buf,
                                               MSR_DTYPE_U8, r, 2)) != MSR_OK) {
                msr_free(buf);
                break;
            }
            sp = buf;
        }
        for (int64_t k = 0; k < cnt && f != NULL; k++) {
            char name[sizeof sp[k].name + 1];
            memcpy(name, sp[k].name, sizeof sp[k].name);
            name[sizeof sp[k].name] = '\0';
            fprintf(f,
                    "%s{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, "
                    "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}",
                    first ? "" : ",\n", name, sp[k].comm ? "comm" : "compute", r, sp[k].comm,
                    1e-3 * (double)sp[k].start_ns, 1e-3 * (double)sp[k].dur_ns);
            first = 0;
        }
        msr_free(buf);
    }
    if (f != NULL) {
        for (int r = 0; r < job->world; r++)
            fprintf(f,
                    "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": "
                    "{\"name\": \"rank %d (dp %d pp %d cp %d tp %d)\"}}",
                    first && r == 0 ? "" : ",\n", r, r,
                    r / (tr->mesh->tp * tr->mesh->cp * tr->mesh->pp),
                    r / (tr->mesh->tp * tr->mesh->cp) % tr->mesh->pp,
                    r / tr->mesh->tp % tr->mesh->cp, r % tr->mesh->tp);
        fprintf(f, "\n]}\n");
        if (fclose(f) != 0 && st == MSR_OK) {
            fprintf(stderr, "train_gpt: --trace %s: %s\n", path, strerror(errno));
            st = MSR_ERR_IO;
        }
    } else if (st == MSR_OK) {
        st = MSR_ERR_IO;
    }
    if (st != MSR_OK && st != MSR_ERR_IO)
        fprintf(stderr, "train_gpt: collecting the trace: %s: %s\n", msr_status_str(st),
                msr_last_error());
    return st;
}

/* o->resume: restores the latest checkpoint, if any; *resumed_from_p gets
 * its step (-1: none). Returns the exit status (0: go on). */
static int start_from_checkpoint(const trainer_t *t, const job_t *job, const options_t *o,
                                 const char *meta, int64_t *resumed_from_p)
{
    int resumed = 0;
    *resumed_from_p = -1;
    if (!o->resume)
        return 0;
    msr_status_t st = train_gpt_resume(t, job, o, meta, &resumed);
    if (st != MSR_OK)
        return msr_tckpt_exit_status(st); /* 2: the checkpoint's fault, 1: the machine's */
    if (!resumed && job->rank == 0)
        fprintf(stderr, "train_gpt: no complete checkpoint under %s, starting at step 0\n",
                o->ckpt_dir);
    /* the parameters a resume would have written (ZeRO-3's, left unset
     * at create: train_config) are set now that none was */
    if (!resumed && t->cpu != NULL && (st = msr_trainer_init_params(t->cpu)) != MSR_OK) {
        fprintf(stderr, "train_gpt: initialising the parameters: %s: %s\n", msr_status_str(st),
                msr_last_error());
        return 1;
    }
    *resumed_from_p = resumed ? (int64_t)t->ops->steps(t->tr) : -1;
    return 0;
}

/* One step, timed into *dt_p (seconds); --trace records the last step's
 * spans and writes them (model parallel on the CPU). */
static msr_status_t timed_step(const trainer_t *t, const job_t *job, const options_t *o,
                               msr_comm_t *comm, double *loss_p, double *dt_p)
{
    uint64_t step = t->ops->steps(t->tr) + 1, t0 = msr_now_ns();
    int traced = t->cpu != NULL && o->trace != NULL && step == (uint64_t)o->steps;
    if (traced)
        msr_mp_trace(t->cpu->mp, 1);
    msr_err_clear();
    msr_status_t st = t->ops->step(t->tr, loss_p);
    *dt_p = (double)(msr_now_ns() - t0) * 1e-9;
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: step %llu failed: %s: %s\n", (unsigned long long)step,
                msr_status_str(st), msr_err_msg_or(st));
        return st;
    }
    if (traced) {
        msr_mp_trace(t->cpu->mp, 0);
        st = write_trace(t->cpu, comm, job, o->trace);
    }
    return st;
}

/* Nanoseconds the CPU trainer has waited for other ranks so far: data
 * parallel's gradient buckets and ZeRO-3's gathers, the pipeline's
 * receives (0 for the GPU trainer). */
static uint64_t waited_ns(const trainer_t *t)
{
    if (t->cpu == NULL)
        return 0;
    uint64_t ns = 0;
    if (t->cpu->dp != NULL)
        ns += t->cpu->dp->stats.wait_ns + t->cpu->dp->stats.gather_ns;
    if (t->cpu->mp != NULL)
        ns += msr_mp_stats(t->cpu->mp)->recv_wait_ns;
    return ns;
}

static void print_step(uint64_t step, double loss, double norm, double tok_s, FILE *loss_log)
{
    printf("step %llu loss %.6f tok/s %.0f\n", (unsigned long long)step, loss, tok_s);
    fflush(stdout);
    if (loss_log != NULL) {
        fprintf(loss_log, "step %llu loss %a norm %a\n", (unsigned long long)step, loss, norm);
        fflush(loss_log);
    }
}

/* ---- an elastic job growing (train_gpt_elastic.c) ---- */

/* A node waits to join: the checkpoint of this step (unless just saved),
 * written through, then rank 0 tells the coordinator that it may re-form
 * the job, which stops these workers; every rank waits for that, beating.
 * Returns 0 (not stopped within the job's timeout: training goes on) or
 * the exit status. */
static int join_save(const trainer_t *t, const job_t *job, const options_t *o, const char *meta,
                     saver_t *s, int saved)
{
    uint64_t step = t->ops->steps(t->tr);
    if (job->rank == 0)
        fprintf(stderr,
                "train_gpt: a node waits to join: saving step %llu, then the job re-forms\n",
                (unsigned long long)step);
    if ((!saved && save_checkpoint(t, job, o, meta, s) != MSR_OK) || saver_wait(s) != MSR_OK)
        return 1;
    msr_status_t st = job->rank == 0 ? msr_store_set(job->ctx, MSR_KEY_JOIN_READY, "1", 1) : MSR_OK;
    if (st != MSR_OK) {
        fprintf(stderr, "train_gpt: telling msrun that step %llu is saved: %s: %s\n",
                (unsigned long long)step, msr_status_str(st), msr_last_error());
        return 0;
    }
    int64_t ms = msr_timeout(job->ctx) > 0 ? msr_timeout(job->ctx) : 60000;
    uint64_t until = msr_now_ns() + (uint64_t)ms * 1000000ull;
    while (msr_now_ns() < until) { /* msrun stops us at the re-form */
        msr_heartbeat(job->ctx);
        msr_sleep_ms(20);
    }
    if (job->rank == 0)
        fprintf(stderr,
                "train_gpt: the job did not re-form within %lld ms of step %llu's checkpoint: "
                "training on\n",
                (long long)ms, (unsigned long long)step);
    return 0;
}

/* The steps of train_gpt_run, saving through s. */
static int run_steps(const trainer_t *t, const job_t *job, const options_t *o, const char *meta,
                     msr_comm_t *comm, uint64_t tokens, FILE *loss_log, saver_t *s)
{
    int64_t resumed_from;
    int rc = start_from_checkpoint(t, job, o, meta, &resumed_from);
    if (rc != 0)
        return rc;
    train_gpt_join_announce(job, o);
    int every = 0; /* steps between looks for a joining node (join_every; 0: none) */
    uint64_t first_step = t->ops->steps(t->tr), step = first_step, timed = 0;
    double timed_s = 0.0;
    while (step < (uint64_t)o->steps) {
        double loss, dt;
        uint64_t waited = waited_ns(t);
        if (timed_step(t, job, o, comm, &loss, &dt) != MSR_OK)
            return 1;
        step = t->ops->steps(t->tr);
        msr_heartbeat(job->ctx);
        /* every rank's progress to msrun's dashboard (never waits): as the
         * step's time, the time it computed, its wall time less what it
         * waited for the other ranks, so that a slow rank stands out in
         * this synchronous job (docs/observe.md); the wall time as step_s */
        double busy = dt - (double)(waited_ns(t) - waited) * 1e-9;
        msr_scalar_t scalars[3] = {{"loss", loss}, {"tok_s", (double)tokens / dt}, {"step_s", dt}};
        msr_report(job->ctx, (int64_t)step, busy > 0 ? busy : dt, scalars, 3);
        if (!isfinite(loss)) {
            report_bad_loss(step, loss, resumed_from, o->ckpt_dir);
            return 1;
        }
        if (step > first_step + 1) {
            timed++;
            timed_s += dt;
        }
        if (job->rank == 0)
            print_step(step, loss, t->ops->grad_norm(t->tr), (double)tokens / dt, loss_log);
        if (train_gpt_validate(t, job, o, step, step == (uint64_t)o->steps, loss_log) != 0)
            return 1;
        msr_status_t st = MSR_OK;
        msr_err_clear();
        if (o->report && o->experts > 0 && t->cpu != NULL &&
            (st = train_gpt_moe_report(t->cpu, job, step)) != MSR_OK) {
            fprintf(stderr, "train_gpt: the router statistics of step %llu: %s: %s\n",
                    (unsigned long long)step, msr_status_str(st), msr_err_msg_or(st));
            return 1;
        }
        int due = o->ckpt_dir != NULL &&
                  ((o->ckpt_every > 0 && step % o->ckpt_every == 0) || step == (uint64_t)o->steps);
        if (due && save_checkpoint(t, job, o, meta, s) != MSR_OK)
            return 1;
        if (o->ckpt_dir != NULL && step == first_step + 1)
            every = train_gpt_join_every(job, comm, dt);
        if (every > 0 && (step - first_step) % (uint64_t)every == 0 && step < (uint64_t)o->steps &&
            train_gpt_join_waiting(job, comm) && (rc = join_save(t, job, o, meta, s, due)) != 0)
            return rc;
    }
    if (step == first_step && train_gpt_validate(t, job, o, step, 1, loss_log) != 0)
        return 1; /* no step ran: the end is now */
    if (job->rank == 0 && timed > 0)
        fprintf(stderr, "train_gpt: %llu steps; after the first: %.1f ms/step, %.0f tok/s\n",
                (unsigned long long)(step - first_step), 1e3 * timed_s / (double)timed,
                (double)tokens * (double)timed / timed_s);
    return 0;
}

/* The run, whatever the device: resumes when asked, steps to o->steps
 * (printing each step's loss on rank 0), saves the checkpoints that are due
 * (waiting at the end for one written in the background) and says the
 * speed after the first step (which warms caches, the GPU and libraries
 * up) and what saving cost the steps. tokens: a step's global tokens.
 * Returns the exit status. */
int train_gpt_run(const trainer_t *t, const job_t *job, const options_t *o, const char *meta,
                  msr_comm_t *comm, uint64_t tokens, FILE *loss_log)
{
    saver_t s = {.ctx = job->ctx, .dir = o->ckpt_dir, .keep = (int)o->ckpt_keep};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    if (t->cpu != NULL) /* the writer thread computes the pieces' CRCs */
        t->cpu->unsealed_snapshots = o->ckpt_async;
    int rc = run_steps(t, job, o, meta, comm, tokens, loss_log, &s);
    if (saver_wait(&s) != MSR_OK && rc == 0)
        rc = 1;
    if (t->cpu != NULL)
        t->cpu->state_gate = NULL;
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    if (job->rank == 0 && s.saves > 0 && rc == 0) {
        fprintf(stderr, "train_gpt: %d checkpoints: %.1f ms in the steps, %.1f ms at most for one",
                s.saves, (double)s.stall_ns * 1e-6, (double)MSR_MAX(s.most_ns, s.one_ns) * 1e-6);
        if (o->ckpt_async)
            fprintf(stderr,
                    " (%.1f of them waiting for the write before), %.1f ms written in the "
                    "background",
                    (double)s.wait_ns * 1e-6, (double)s.write_ns * 1e-6);
        fprintf(stderr, "\n");
    }
    return rc;
}
