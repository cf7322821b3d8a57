/* Tensor, sequence and pipeline parallel under the real msrun (mp_check.sh
 * starts it): the rule that proves it, checked on every rank.
 *
 *   mp_worker LAYOUT...
 *
 * A LAYOUT is "dp,pp,tp,sp,schedule,chunks,recompute,zero[,split][,cpN]",
 * e.g. "2,2,2,1,1f1b,1,full,1", where split, when given, is the layers of
 * each virtual stage separated by ':' (train_gpt's --pp-layers, e.g.
 * "1,4,1,0,1f1b,1,none,0,1:3:3:1") and cpN the context-parallel degree
 * (e.g. "1,1,2,1,1f1b,1,none,0,cp2": 4 ranks); then ",hcN" runs the head
 * N vocabulary rows at a time (train_gpt --head-chunk); a last ",llama" makes the
 * model a Llama (FFN 64, 2 kv heads: grouped-query attention; learning
 * rate 1e-3). For each, the first
 * dp x pp x cp x tp ranks of the job form a mesh (the others wait for the
 * next layout) and train a tiny
 * GPT (L = 8, C = 32, NH = 4, T = 16) for 10 steps on a global batch of 8
 * sequences (micro-batches of 2: grad-accum = 4 / dp micro-batches per dp
 * rank, the pipeline's micro-batches). Every step's loss must equal the
 * loss of one process training the same global batch within 1e-5
 * relative, and the gradient norm (the whole model's: tensor-parallel
 * replicated parameters counted once, the tied embedding once) within 1e-5.
 * The model runs its kernels through a table that counts them
 * (count_kernels.h: the CPU's kernels): every kernel a rank's blocks need
 * in the layout (the products, the norms, GELU, the residual adds, the
 * causal attention or, under cp, the ring's four kernels, and under tp
 * the row-parallel biases; a Llama's RMSNorm, SwiGLU, rotary positions and
 * grouped-query attention, under cp the ring's fold of the repeated kv
 * heads' gradients) and, where one stage holds both ends, every
 * kernel of the ends split over tp or cp (the position rows, the
 * embedding's gradient rows, the softmax over the split vocabulary) must
 * have gone through it.
 *
 * Exits 0 when every check passed; prints what failed, with the rank. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "msrun/comm.h"
#include "msrun/msrun.h"
#include "layout/layout.h"
#include "parallel/train.h"
#include "tests/parallel/count_kernels.h"

enum { STEPS = 10, GLOBAL = 8, MICRO = 2 };

static int g_rank = -1;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mp_worker rank %d: FAIL: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

#define CHECK(cond, ...)       \
    do {                       \
        if (!(cond))           \
            fail(__VA_ARGS__); \
    } while (0)
#define CHECK_OK(expr)                                                         \
    do {                                                                       \
        msr_err_clear();                                                       \
        msr_status_t st_ = (expr);                                             \
        /* model/ and parallel/ set this program's error text, libmsrun its    \
         * own (msr_last_error) */                                             \
        if (st_ != MSR_OK)                                                     \
            fail("%s: %s: %s", #expr, msr_status_str(st_),                     \
                 msr_err_msg()[0] != '\0' ? msr_err_msg() : msr_last_error()); \
    } while (0)

typedef struct layout {
    int dp, pp, tp, sp, chunks, zero, cp, llama;
    int schedule, recompute;
    int hc; /* the head's chunk of vocabulary rows (train_gpt --head-chunk); 0: whole */
    int split[64], split_n; /* the uneven split; split_n 0: the even one */
} layout_t;

static int parse_layout(const char *arg, layout_t *l)
{
    char sched[16], rc[16], split[256] = "", more[256] = "", s[512];
    snprintf(s, sizeof s, "%s", arg);
    size_t len = strlen(s);
    l->llama = len > 6 && strcmp(s + len - 6, ",llama") == 0;
    if (l->llama)
        s[len - 6] = '\0';
    l->hc = 0;
    char *last = strrchr(s, ',');
    if (last != NULL && strncmp(last, ",hc", 3) == 0) {
        char *end;
        long hc = strtol(last + 3, &end, 10);
        if (*end != '\0' || hc < 1 || hc > 1 << 20)
            return -1;
        l->hc = (int)hc;
        *last = '\0';
    }
    int n = sscanf(s, "%d,%d,%d,%d,%15[^,],%d,%15[^,],%d,%255[^,],%255s", &l->dp, &l->pp, &l->tp,
                   &l->sp, sched, &l->chunks, rc, &l->zero, split, more);
    if (n < 8)
        return -1;
    l->cp = 1;
    const char *cp = n == 9 && strncmp(split, "cp", 2) == 0 ? split : n == 10 ? more : NULL;
    if (cp != NULL && (sscanf(cp, "cp%d", &l->cp) != 1 || l->cp < 1))
        return -1;
    if (cp == split)
        n = 8;
    l->split_n = 0;
    for (char *p = split; *p != '\0'; p++)
        if (*p == ':')
            *p = ',';
    if (n == 9 && msr_layout_split_parse(split, l->split, 64, &l->split_n) != MSR_OK)
        return -1;
    l->schedule = msr_mp_schedule_parse(sched);
    l->recompute = msr_mp_recompute_parse(rc);
    return l->schedule < 0 || l->recompute < 0 || l->dp < 1 || l->pp < 1 || l->tp < 1 ? -1 : 0;
}

static msr_train_config_t config(const layout_t *l, int dp_rank)
{
    msr_train_config_t c = {
        .model = {MSR_GPT_VOCAB, 16, 8, 4, 32},
        .micro_batch = MICRO,
        .grad_accum = GLOBAL / (MICRO * l->dp),
        .dp = l->dp,
        .dp_rank = dp_rank,
        .seed = 11,
        .lr = 3e-3f,
        .warmup = 2,
        .grad_clip = 1.0f,
        .adamw = {0.9, 0.95, 1e-8, 0.1},
    };
    msr_train_config_defaults(&c);
    if (l->llama) {
        c.model.arch = MSR_GPT_ARCH_LLAMA;
        c.model.ffn = 64;
        c.model.kv_heads = 2;
        c.model.rope_theta = 10000.0;
        /* at 3e-3 the Llama's norm at step 8 moves by 7e-6 with the
         * order of dp's sums alone: a slower rate keeps the bound's
         * meaning */
        c.lr = 1e-3f;
    }
    c.par.zero = l->zero;
    c.par.bucket_bytes = 4000; /* buckets cut through the layers */
    c.par.zero_min_bytes = 1024;
    c.tp = l->tp;
    c.pp = l->pp;
    c.cp = l->cp;
    c.mp.sp = l->sp;
    c.mp.schedule = (msr_mp_schedule_t)l->schedule;
    c.mp.chunks = l->chunks;
    c.mp.recompute = (msr_mp_recompute_t)l->recompute;
    c.mp.stage_layers = l->split_n > 0 ? l->split : NULL;
    c.mp.head_chunk = l->hc;
    c.kernels = count_kernels();
    return c;
}

/* Every kernel this rank's blocks need in layout l went through the
 * model's table since the counts were zeroed. */
static void check_table(const char *what, const layout_t *l)
{
    int need[K_N] = {0};
    need[K_MMF] = need[K_MMB] = need[K_RES] = 1;
    if (l->llama)
        need[K_RMSF] = need[K_RMSB] = need[K_SWIF] = need[K_SWIB] = need[K_ROPE] = 1;
    else
        need[K_LNF] = need[K_LNB] = need[K_GELUF] = need[K_GELUB] = 1;
    if (l->cp > 1)
        need[K_RINGF] = need[K_RINGFIN] = need[K_RINGD] = need[K_RINGB] = need[K_ADDROWS] = 1;
    else if (l->llama)
        need[K_GQAF] = need[K_GQAB] = 1;
    else
        need[K_ATTF] = need[K_ATTB] = 1;
    if (l->cp > 1 && l->llama) /* 2 kv heads for 4 query heads */
        need[K_RINGFOLD] = 1;
    if (l->tp > 1 && !l->llama) /* a Llama has no biases */
        need[K_BIAS] = need[K_COLSUM] = 1;
    if ((l->tp > 1 || l->cp > 1) && l->pp == 1 && !l->llama) /* split ends on every rank */
        need[K_POSF] = need[K_POSB] = need[K_EMBBR] = 1;
    if ((l->tp > 1 || l->hc > 0) && l->pp == 1) /* the softmax over a split vocabulary */
        need[K_VMAX] = need[K_VEXP] = need[K_VLOSS] = need[K_VXENTB] = 1;
    if (l->hc > 0 && l->pp == 1) /* the chunks' online softmax */
        need[K_VFOLD] = 1;
    if (l->hc > 0 && l->pp == 1) /* the chunks' products, not one of (N, V/tp) */
        need[K_XENTF] = need[K_XENTB] = -1;
    for (int k = 0; k < K_N; k++) {
        CHECK(need[k] <= 0 || count_kernel_calls[k] > 0, "%s: no %s through the model's table",
              what, count_kernel_names[k]);
        CHECK(need[k] >= 0 || count_kernel_calls[k] == 0,
              "%s: %s ran %ld times (the chunked head's)", what, count_kernel_names[k],
              count_kernel_calls[k]);
    }
}

static double rel(double a, double b)
{
    return fabs(a - b) / fmax(fabs(b), 1e-30);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mp_worker LAYOUT... (under msrun; see the source)\n");
        return 2;
    }
    msr_ctx_t *ctx = NULL;
    msr_comm_t *world = NULL;
    CHECK_OK(msr_init(&ctx));
    g_rank = msr_rank(ctx);
    CHECK_OK(msr_comm_world(ctx, &world));
    int size = msr_comm_size(world), rank = msr_comm_rank(world);
    msr_dataset_t *ds = NULL;
    CHECK_OK(msr_dataset_generate(5, 1 << 16, &ds));

    /* one process alone, the whole global batch as micro-batches: the
     * GPT's and the Llama's */
    double wants[2][STEPS], want_norms[2][STEPS];
    for (int arch = 0; arch < 2; arch++) {
        layout_t one = {1, 1, 1, 0, 1, 0, 1, arch, MSR_MP_1F1B, MSR_MP_RECOMPUTE_NONE};
        msr_train_config_t rc = config(&one, 0);
        msr_trainer_t *ref = NULL;
        CHECK_OK(msr_trainer_create(&rc, ds, NULL, &ref));
        for (int i = 0; i < STEPS; i++) {
            CHECK_OK(msr_trainer_step(ref, &wants[arch][i]));
            want_norms[arch][i] = ref->last_grad_norm;
        }
        msr_trainer_destroy(ref);
    }

    for (int a = 1; a < argc; a++) {
        layout_t l;
        CHECK(parse_layout(argv[a], &l) == 0, "bad layout '%s'", argv[a]);
        CHECK(l.split_n == 0 || l.split_n == l.pp * l.chunks,
              "layout %s: the split has %d entries for pp %d x %d chunks", argv[a], l.split_n, l.pp,
              l.chunks);
        int n = l.dp * l.pp * l.cp * l.tp;
        CHECK(n <= size, "layout %s needs %d ranks, the job has %d", argv[a], n, size);
        msr_comm_t *sub = NULL;
        CHECK_OK(msr_comm_split(world, rank < n ? 0 : MSR_COMM_NO_COLOR, rank, &sub));
        if (sub == NULL)
            continue; /* not in this layout */
        const double *want = wants[l.llama], *want_norm = want_norms[l.llama];
        msr_mesh_t *mesh = NULL;
        CHECK_OK(msr_mesh_create(sub, l.dp, l.pp, l.cp, l.tp, &mesh));
        msr_train_config_t c = config(&l, mesh->dp_rank);
        msr_trainer_t *tr = NULL;
        CHECK_OK(msr_trainer_create_mesh(&c, ds, mesh, &tr));
        for (int k = 0; k < l.split_n && k < l.chunks; k++) { /* the split is the one asked */
            int j = k * l.pp + mesh->pp_rank;
            CHECK(tr->model->chunk_hi[k] - tr->model->chunk_lo[k] == l.split[j],
                  "%s: rank %d chunk %d holds %d layers, not %d", argv[a], rank, k,
                  tr->model->chunk_hi[k] - tr->model->chunk_lo[k], l.split[j]);
        }
        double worst = 0.0, worst_norm = 0.0;
        memset(count_kernel_calls, 0, sizeof count_kernel_calls);
        for (int i = 0; i < STEPS; i++) {
            double loss;
            CHECK_OK(msr_trainer_step(tr, &loss));
            double e = rel(loss, want[i]), en = rel(tr->last_grad_norm, want_norm[i]);
            CHECK(e <= 1e-5, "%s: step %d loss %.9f, one process %.9f (%.1e relative)", argv[a],
                  i + 1, loss, want[i], e);
            CHECK(en <= 1e-5, "%s: step %d gradient norm %.9f, one process %.9f (%.1e relative)",
                  argv[a], i + 1, tr->last_grad_norm, want_norm[i], en);
            worst = fmax(worst, e);
            worst_norm = fmax(worst_norm, en);
        }
        check_table(argv[a], &l);
        if (tr->mp != NULL) {
            const msr_mp_stats_t *s = msr_mp_stats(tr->mp);
            CHECK(s->acts_peak > 0, "%s: no activations counted", argv[a]);
        }
        if (rank == 0)
            printf("layout %s: %d steps, losses within %.1e, norms within %.1e of one process\n",
                   argv[a], STEPS, worst, worst_norm);
        msr_trainer_destroy(tr);
        msr_mesh_destroy(mesh);
        msr_comm_destroy(sub);
    }
    msr_dataset_destroy(ds);
    CHECK_OK(msr_comm_barrier(world)); /* no rank leaves while a peer still receives */
    msr_comm_destroy(world);
    msr_finalize(ctx);
    if (rank == 0)
        printf("mp_worker: %d layouts: all checks passed\n", argc - 1);
    return 0;
}
