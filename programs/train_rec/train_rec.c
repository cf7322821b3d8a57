/* train_rec: trains the recommendation model of rec.h through the parameter
 * server, under msrun --ps_servers N (docs/ps.md): the servers hold the
 * embedding tables and the MLP, the workers pull, compute and push; worker
 * 0 prints the loss, samples/s, and at the end the AUC on held-out samples
 * beside the generating model's own. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/optparse.h"
#include "base/status.h"
#include "msrun/msrun.h"
#include "rec.h"

typedef struct args {
    int steps, batch, fields, dim, hidden, eval, log_every;
    int64_t rows, vocab;
    int64_t seed;
    double lr;
    int optim;           /* msr_ps_optim_t */
    int staleness;       /* -1: synchronous; -2: the launcher's */
    int mode;            /* 0: the parameter server; rec_dp_mode_t: a baseline */
    const char *durable; /* the servers' checkpoint and log directory; NULL: none */
    int fsync;           /* --durable's log synced every N records; 0: never */
} args_t;

static const char *const optims[] = {"sgd", "adagrad", "adam", NULL};
/* --mode's values, in the order of args_t.mode */
static const char *const modes[] = {"ps", "dense", "touched", NULL};

#define D(field) MSR_OPT_DEST(args_t, field)
#define INT(n, field, lo, hi, mv, h)                                                           \
    {                                                                                          \
        .name = n, .kind = MSR_OPT_INT, .min = lo, .max = hi, .dest = D(field), .metavar = mv, \
        .help = h                                                                              \
    }
/* clang-format off */
static const msr_opt_t opts[] = {
    INT("steps", steps, 1, 1 << 30, "N", "training steps of each worker (default 300)"),
    INT("batch", batch, 1, 1 << 16, "B", "samples per step and worker (default 64)"),
    INT("fields", fields, 1, REC_FIELDS_MAX, "F", "categorical fields, a table each (default 4)"),
    INT("dim", dim, 1, 256, "D", "embedding width (default 8)"),
    INT("hidden", hidden, 1, 256, "H", "the MLP's hidden width (default 16)"),
    INT("rows", rows, 1, INT64_MAX / 2, "R", "rows of each table (default 100000)"),
    INT("vocab", vocab, 1, INT64_MAX / 2, "V", "distinct values of a field in the log (default "
        "100000)"),
    INT("eval", eval, 2, 1 << 24, "N", "held-out samples for the AUC (default 8192)"),
    INT("log_every", log_every, 1, 1 << 30, "N", "print the loss every N steps (default 50)"),
    INT("seed", seed, 0, INT64_MAX, "S", "the log's and the tables' seed (default 1)"),
    INT("staleness", staleness, -2, 1 << 20, "K",
        "-1: synchronous; K >= 0: asynchronous, a worker at most K pushes ahead of the "
        "slowest; -2 (default): msrun --ps_staleness's (MSR_PS_STALENESS; unset: -1)"),
    {.name = "lr", .kind = MSR_OPT_REAL, .real_min = 0, .real_max = 100,
     .flags = MSR_OPT_MIN_OPEN, .dest = D(lr), .metavar = "LR",
     .help = "learning rate (default 0.05)"},
    {.name = "optim", .kind = MSR_OPT_ENUM, .choices = optims, .dest = D(optim),
     .metavar = "sgd|adagrad|adam", .help = "the servers' optimizer (default adagrad)"},
    {.name = "mode", .kind = MSR_OPT_ENUM, .choices = modes, .dest = D(mode),
     .metavar = "ps|dense|touched",
     .help = "ps: the parameter server (msrun --ps_servers); dense: no servers, every rank "
             "holds the tables and allreduces their whole gradients; touched: no servers, the "
             "touched rows' gradients allgathered (the baselines take --optim sgd)"},
    {.name = "durable", .kind = MSR_OPT_TEXT, .dest = D(durable), .metavar = "DIR",
     .help = "the servers keep their shards durable in DIR (a checkpoint every 10000 updates "
             "and a log of the updates since: pushes, or synchronous steps), restored on start "
             "(resharded when the servers or workers are not the ones that wrote it): with msrun "
             "--max_restarts a killed server comes back with every acknowledged update"},
    INT("fsync", fsync, 0, 1 << 30, "N",
        "with --durable: sync the log to disk every N records (1: before each acknowledgement; "
        "default 0: never, it survives the process, not the machine)"),
    {.name = "help", .kind = MSR_OPT_HELP, .help = "this text"},
};
/* clang-format on */
static const msr_optset_t opt_set = {"train_rec", opts, MSR_ARRAY_SIZE(opts), 0,
                                     MSR_OPTS_USAGE_COLUMNS};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(msr_status_t st, const char *what)
{
    fprintf(stderr, "train_rec: error: %s: %s: %s\n", what, msr_status_name(st), msr_last_error());
    return 1;
}

/* A step's (or an evaluation batch's) buffers. */
typedef struct batch_bufs {
    rec_sample_t *samples; /* (B) */
    int64_t *keys;         /* (F, B) field f's keys at f * B */
    float *rows;           /* (F, B, D) the pulled rows */
    float *grows;          /* (F, B, D) their gradients */
    float *x, *gx;         /* (F*D) one sample's input and its gradient */
    float *mlp, *gmlp;     /* (mlp) */
} batch_bufs_t;

static int bufs_alloc(const rec_shape_t *s, int B, batch_bufs_t *b)
{
    size_t fd = (size_t)s->fields * s->dim, m = (size_t)rec_mlp_size(s);
    b->samples = calloc((size_t)B, sizeof *b->samples);
    b->keys = calloc((size_t)s->fields * B, sizeof *b->keys);
    b->rows = calloc(fd * B, sizeof *b->rows);
    b->grows = calloc(fd * B, sizeof *b->grows);
    b->x = calloc(fd, sizeof *b->x);
    b->gx = calloc(fd, sizeof *b->gx);
    b->mlp = calloc(m, sizeof *b->mlp);
    b->gmlp = calloc(m, sizeof *b->gmlp);
    return b->samples && b->keys && b->rows && b->grows && b->x && b->gx && b->mlp && b->gmlp ? 0
                                                                                              : -1;
}

static void bufs_free(batch_bufs_t *b)
{
    free(b->samples);
    free(b->keys);
    free(b->rows);
    free(b->grows);
    free(b->x);
    free(b->gx);
    free(b->mlp);
    free(b->gmlp);
}

/* Where the parameters are: the parameter server, or a baseline's
 * replicated tables. */
typedef struct trainer {
    msr_ps_t *ps;
    rec_dp_t *dp;
    rec_shape_t s;
    const args_t *a;
} trainer_t;

/* Draws samples first .. first+B-1 and fetches their rows and the MLP. */
static msr_status_t pull_batch(const trainer_t *tr, uint64_t first, int B, batch_bufs_t *b)
{
    const rec_shape_t *s = &tr->s;
    for (int i = 0; i < B; i++) {
        rec_sample(s, first + (uint64_t)i, &b->samples[i]);
        for (int f = 0; f < s->fields; f++)
            b->keys[f * B + i] = rec_key(s, f, b->samples[i].value[f]);
    }
    if (tr->dp) {
        rec_dp_fetch(tr->dp, b->keys, B, b->rows, b->mlp);
        return MSR_OK;
    }
    msr_status_t st = MSR_OK;
    for (int f = 0; f < s->fields && st == MSR_OK; f++)
        st = msr_ps_pull(tr->ps, f, b->keys + (size_t)f * B, (uint64_t)B,
                         b->rows + (size_t)f * B * s->dim, (uint32_t)s->dim);
    if (st == MSR_OK)
        st = msr_ps_pull_dense(tr->ps, s->fields, b->mlp);
    return st;
}

/* Sends a step's gradients: pushes, or the baseline's collectives. */
static msr_status_t push_batch(const trainer_t *tr, int B, batch_bufs_t *b)
{
    const rec_shape_t *s = &tr->s;
    if (tr->dp)
        return rec_dp_update(tr->dp, b->keys, B, b->grows, b->gmlp);
    msr_status_t st = MSR_OK;
    for (int f = 0; f < s->fields && st == MSR_OK; f++)
        st = msr_ps_push(tr->ps, f, b->keys + (size_t)f * B, (uint64_t)B,
                         b->grows + (size_t)f * B * s->dim, (uint32_t)s->dim);
    if (st == MSR_OK)
        st = msr_ps_push_dense(tr->ps, s->fields, b->gmlp);
    return st;
}

/* Bytes this worker sent and received so far. */
static void traffic(const trainer_t *tr, uint64_t *sent, uint64_t *received)
{
    if (tr->dp) {
        *sent = *received = rec_dp_sent(tr->dp); /* a ring receives what it sends */
        return;
    }
    msr_ps_traffic(tr->ps, sent, received);
}

/* Sample i's input: its F rows side by side. */
static void gather_x(const rec_shape_t *s, const batch_bufs_t *b, int B, int i)
{
    for (int f = 0; f < s->fields; f++)
        memcpy(b->x + f * s->dim, b->rows + ((size_t)f * B + i) * s->dim,
               (size_t)s->dim * sizeof *b->x);
}

/* One training step of B samples from first: the batch's mean loss. */
static msr_status_t train_step(const trainer_t *tr, uint64_t first, int B, batch_bufs_t *b,
                               double *loss_p)
{
    const rec_shape_t *s = &tr->s;
    msr_status_t st = pull_batch(tr, first, B, b);
    if (st != MSR_OK)
        return st;
    memset(b->gmlp, 0, (size_t)rec_mlp_size(s) * sizeof *b->gmlp);
    double loss = 0;
    for (int i = 0; i < B; i++) {
        gather_x(s, b, B, i);
        rec_forward(s, b->mlp, b->x, b->samples[i].label, 1.0f / B, b->gmlp, b->gx, &loss);
        for (int f = 0; f < s->fields; f++)
            memcpy(b->grows + ((size_t)f * B + i) * s->dim, b->gx + f * s->dim,
                   (size_t)s->dim * sizeof *b->gx);
    }
    *loss_p = loss / B;
    return push_batch(tr, B, b);
}

/* Held-out samples start here, far past any training sample. */
#define EVAL_FIRST (1ull << 50)

/* Worker 0: the AUC and loss on a.eval held-out samples, and the AUC of
 * the generating model's own logits on them (the best any model does). */
static msr_status_t evaluate(const trainer_t *tr)
{
    const rec_shape_t *s = &tr->s;
    int n = tr->a->eval, B = 1024;
    float *score = malloc((size_t)n * sizeof *score), *truth = malloc((size_t)n * sizeof *truth);
    float *label = malloc((size_t)n * sizeof *label);
    batch_bufs_t b = {0};
    msr_status_t st = MSR_ERR_NO_MEMORY;
    if (!score || !truth || !label || bufs_alloc(s, B, &b) != 0)
        goto out;
    double loss = 0;
    st = MSR_OK;
    for (int at = 0; at < n && st == MSR_OK; at += B) {
        int m = n - at < B ? n - at : B;
        st = pull_batch(tr, EVAL_FIRST + (uint64_t)at, m, &b);
        for (int i = 0; i < m && st == MSR_OK; i++) {
            gather_x(s, &b, m, i);
            score[at + i] = rec_forward(s, b.mlp, b.x, b.samples[i].label, 0, NULL, NULL, &loss);
            truth[at + i] = b.samples[i].truth;
            label[at + i] = b.samples[i].label;
        }
    }
    if (st == MSR_OK)
        printf("eval: %d held-out samples: auc %.4f (the generating model's %.4f), loss %.4f\n", n,
               rec_auc(score, label, n), rec_auc(truth, label, n), loss / n);
out:
    bufs_free(&b);
    free(score);
    free(truth);
    free(label);
    return st;
}

/* Prints step's loss (the window's mean), samples/s and bytes per step. */
static void report(const trainer_t *tr, int step, double loss, double dt, int W)
{
    uint64_t sent, received;
    traffic(tr, &sent, &received);
    int B = tr->a->batch;
    printf("step %d: loss %.4f, %.0f samples/s (all workers), %.0f bytes sent and %.0f received "
           "per step and worker\n",
           step, loss, dt > 0 ? (double)(step - 1) * B * W / dt : 0.0, (double)sent / step,
           (double)received / step);
}

static msr_status_t train(const trainer_t *tr, int me, int W)
{
    const args_t *a = tr->a;
    int B = a->batch;
    batch_bufs_t b = {0};
    if (bufs_alloc(&tr->s, B, &b) != 0)
        return MSR_ERR_NO_MEMORY;
    msr_status_t st = MSR_OK;
    /* samples/s from the end of the first step: that one waits for the
     * servers to make their tables */
    double t0 = now_s(), window = 0;
    for (int step = 0; step < a->steps && st == MSR_OK; step++) {
        double loss = 0;
        st = train_step(tr, ((uint64_t)step * W + me) * B, B, &b, &loss);
        window += loss;
        if (step == 0)
            t0 = now_s();
        if (me == 0 && st == MSR_OK && ((step + 1) % a->log_every == 0 || step + 1 == a->steps)) {
            int k = (step + 1) % a->log_every ? (step + 1) % a->log_every : a->log_every;
            report(tr, step + 1, window / k, now_s() - t0, W);
            window = 0;
        }
    }
    bufs_free(&b);
    if (st == MSR_OK && me == 0)
        st = evaluate(tr);
    return st;
}

/* Every member makes the same tables: one per field, then the MLP. */
static msr_status_t make_tables(msr_ps_t *ps, const rec_shape_t *s, const args_t *a)
{
    msr_status_t st = MSR_OK;
    int t;
    for (int f = 0; f <= s->fields && st == MSR_OK; f++) {
        msr_ps_table_config_t c = {.rows = (uint64_t)s->rows,
                                   .width = (uint32_t)s->dim,
                                   .optim = (msr_ps_optim_t)a->optim,
                                   .lr = (float)a->lr,
                                   .init_scale = rec_init_scale(s, f),
                                   .seed = rec_table_seed(s->seed, f)};
        if (f == s->fields) { /* the MLP: one row */
            c.rows = 1;
            c.width = (uint32_t)rec_mlp_size(s);
        }
        st = msr_ps_table_create(ps, &c, &t);
    }
    return st;
}

static int parse(int argc, char **argv, args_t *a)
{
    *a = (args_t){.steps = 300,
                  .batch = 64,
                  .fields = 4,
                  .dim = 8,
                  .hidden = 16,
                  .rows = 100000,
                  .vocab = 100000,
                  .eval = 8192,
                  .log_every = 50,
                  .seed = 1,
                  .lr = 0.05,
                  .optim = MSR_PS_ADAGRAD,
                  .staleness = MSR_PS_STALENESS_ENV};
    unsigned char seen[MSR_ARRAY_SIZE(opts)];
    int next;
    switch (msr_opts_parse(&opt_set, argc - 1, argv + 1, a, seen, &next)) {
    case MSR_OPTS_OK:
        if (a->fsync == 0 || a->durable)
            return -1;
        fprintf(stderr, "train_rec: error: --fsync takes --durable\n");
        return 2;
    case MSR_OPTS_HELP:
        printf("usage: msrun --ps_servers N ... train_rec [options]\n");
        msr_opts_usage(&opt_set, stdout);
        return 0;
    case MSR_OPTS_VERSION:
    case MSR_OPTS_BAD:
        break;
    }
    msr_opts_print_error(&opt_set);
    return 2;
}

/* The parameter server's roles: servers serve, workers train. */
static msr_status_t run_ps(msr_ctx_t *ctx, trainer_t *tr)
{
    const args_t *a = tr->a;
    msr_status_t st = msr_ps_join(ctx, 0, a->staleness, &tr->ps);
    if (st == MSR_OK)
        st = make_tables(tr->ps, &tr->s, a);
    if (st != MSR_OK)
        return st;
    msr_ps_t *ps = tr->ps;
    if (msr_ps_my_role(ps) == MSR_PS_WORKER)
        return train(tr, msr_ps_role_rank(ps), msr_ps_workers(ps));
    if (a->durable) {
        uint64_t restored;
        double t0 = now_s();
        if ((st = msr_ps_durable(ps, a->durable, 0, &restored)) != MSR_OK ||
            (st = msr_ps_durable_fsync(ps, (uint64_t)a->fsync)) != MSR_OK)
            return st;
        printf("server %d: restored %llu updates from %s in %.3f s\n", msr_ps_role_rank(ps),
               (unsigned long long)restored, a->durable, now_s() - t0);
    }
    printf("server %d: %d tables of %lld rows, %lld of each here\n", msr_ps_role_rank(ps),
           a->fields, (long long)a->rows,
           (long long)((a->rows + msr_ps_servers(ps) - 1) / msr_ps_servers(ps)));
    return msr_ps_serve(ps);
}

/* A baseline: every rank a worker with the whole tables. */
static msr_status_t run_dp(msr_ctx_t *ctx, msr_comm_t *world, trainer_t *tr)
{
    const args_t *a = tr->a;
    msr_ps_role_t role;
    int workers;
    msr_status_t st = msr_ps_role(ctx, &role, NULL, &workers);
    if (st == MSR_OK && (role == MSR_PS_SERVER || workers != msr_world_size(ctx)))
        st = msr_err(MSR_ERR_INVALID_ARG, "--mode %s has no servers: run it without --ps_servers",
                     modes[a->mode]);
    if (st == MSR_OK && a->optim != MSR_PS_SGD)
        st = msr_err(MSR_ERR_INVALID_ARG, "--mode %s takes --optim sgd only", modes[a->mode]);
    if (st == MSR_OK)
        st = rec_dp_create(&tr->s, (rec_dp_mode_t)a->mode, (float)a->lr, world, &tr->dp);
    if (st == MSR_OK)
        st = train(tr, msr_comm_rank(world), msr_comm_size(world));
    return st;
}

int main(int argc, char **argv)
{
    args_t a;
    int rc = parse(argc, argv, &a);
    if (rc >= 0)
        return rc;
    trainer_t tr = {.s = {.fields = a.fields,
                          .dim = a.dim,
                          .hidden = a.hidden,
                          .rows = a.rows,
                          .vocab = a.vocab,
                          .seed = (uint64_t)a.seed},
                    .a = &a};
    msr_ctx_t *ctx;
    msr_comm_t *world = NULL;
    msr_status_t st = msr_init(&ctx);
    if (st != MSR_OK)
        return fail(st, "msr_init");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (a.mode == 0) /* a replaced worker has no world: msr_ps_join */
        st = run_ps(ctx, &tr);
    else if ((st = msr_comm_world(ctx, &world)) == MSR_OK)
        st = run_dp(ctx, world, &tr);
    rc = st == MSR_OK ? 0 : fail(st, modes[a.mode]);
    msr_ps_destroy(tr.ps);
    rec_dp_destroy(tr.dp);
    msr_comm_destroy(world);
    msr_finalize(ctx);
    return rc;
}
