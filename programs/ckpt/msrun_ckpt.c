/* msrun-ckpt: what a train_gpt checkpoint holds, read by `msrun ckpt`
 * (msrun executes this program, so the launcher links nothing of the
 * runtime). `msrun ckpt inspect DIR [--step N]` prints the step, who wrote
 * it, every tensor with its shape and bytes, and checks every piece's CRC
 * and that every element of the model is present (docs/checkpoint.md).
 * Exit 0: whole and intact; 2: bad input (the file and tensor named); 1:
 * the machine failed (an I/O error, memory: msr_tckpt_exit_status). */
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "ckpt.h"
#include "base/err.h"
#include "model/gpt.h"
#include "model/moe.h"
#include "msrun/checkpoint.h"
#include "parallel/ckpt.h"

#define EXIT_BAD 2

static int quiet; /* ckpt_check: only the errors */

static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (!quiet)
        vprintf(fmt, ap);
    va_end(ap);
}

/* The newest step-N folder of dir with a MANIFEST (a complete save); -1
 * when none. */
long long ckpt_newest_step(const char *dir)
{
    long long best = -1;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        char *end, path[4200];
        struct stat sb;
        long long s = strncmp(e->d_name, "step-", 5) == 0 ? strtoll(e->d_name + 5, &end, 10) : -1;
        if (s < 0 || *end != '\0' || s <= best)
            continue;
        snprintf(path, sizeof path, "%s/%s/MANIFEST", dir, e->d_name);
        if (stat(path, &sb) == 0)
            best = s;
    }
    if (d != NULL)
        closedir(d);
    return best;
}

/* One rank's payload header and range table (ckpt.h), read in part. */
typedef struct shard {
    void *head;
    msr_tckpt_header_t h;
    msr_tckpt_range_t *r;
    uint32_t n;
} shard_t;

static void shard_free(shard_t *s)
{
    msr_free(s->r);
    msr_free(s->head);
    memset(s, 0, sizeof *s);
}

/* When the file path (named what) is shorter than its index says, where
 * the cut falls (msr_tckpt_cut_say; the piece's tensor of model m, or
 * none when m is NULL) into out; else out is "". */
static void cut_said(const char *path, const char *what, const msr_gpt_t *m, char *out, size_t len)
{
    struct stat sb;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    out[0] = '\0';
    if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
        !msr_tckpt_explain_cut((void *)m, fd, (uint64_t)sb.st_size, what, out, len))
        out[0] = '\0';
    if (fd >= 0)
        close(fd);
}

/* Reads rank's shard's index into s: 0, or the exit status with the
 * error on stderr (a file cut short: where, its tensor of model m when
 * not NULL). */
static int shard_read(const char *dir, long long step, int rank, const msr_gpt_t *m, shard_t *s)
{
    unsigned char fixed[MSR_TCKPT_PREFIX_LEN];
    uint64_t total = 0;
    size_t hl = 0;
    char what[4300];
    memset(s, 0, sizeof *s);
    snprintf(what, sizeof what, "%s/step-%lld/rank-%d.bin", dir, step, rank);
    msr_status_t st = msr_ckpt_read_rank(NULL, dir, step, rank, 0, fixed, sizeof fixed, &total);
    if (st == MSR_OK && (st = msr_tckpt_head_len(fixed, sizeof fixed, &hl)) == MSR_OK &&
        (hl < sizeof fixed || hl > total))
        st = msr_err(MSR_ERR_CORRUPT, "%s: a header of %zu bytes in %llu", what, hl,
                     (unsigned long long)total);
    if (st == MSR_OK && (s->head = msr_malloc(hl)) == NULL)
        st = msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    if (st == MSR_OK)
        st = msr_ckpt_read_rank(NULL, dir, step, rank, 0, s->head, hl, NULL);
    if (st == MSR_OK)
        st = msr_tckpt_decode_head(s->head, hl, (size_t)total, what, &s->h, &s->r, &s->n);
    if (st != MSR_OK) {
        char cut[4600] = "", was[MSR_ERR_TEXT_MAX];
        snprintf(was, sizeof was, "%s", msr_err_msg_or(st)); /* it names the file */
        if (st == MSR_ERR_CORRUPT)
            cut_said(what, what, m, cut, sizeof cut);
        fprintf(stderr, "msrun ckpt: %s%s%s\n", was, cut[0] != '\0' ? ": " : "", cut);
        shard_free(s);
        return msr_tckpt_exit_status(st);
    }
    return 0;
}

/* The model's shape from a checkpoint's settings text (train_gpt's meta). */
static int shape_of(const char *meta, msr_gpt_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    if (sscanf(meta, "layers %d channels %d heads %d seq %d vocab %d", &cfg->layers, &cfg->channels,
               &cfg->heads, &cfg->max_seq, &cfg->vocab) != 5)
        return -1;
    const char *x = strstr(meta, "; experts ");
    msr_gpt_moe_t *m = &cfg->moe;
    if (x != NULL &&
        sscanf(x, "; experts %d top-k %d moe-every %d capacity-factor %lf aux-loss %lf",
               &m->experts, &m->top_k, &m->every, &m->capacity_factor, &m->aux_loss) != 5)
        return -1;
    const char *arch = strstr(meta, "; arch "); /* a Llama's (train_gpt_meta) */
    if (arch != NULL) {
        if (sscanf(arch, "; arch llama ffn %d kv-heads %d rope-theta %lf", &cfg->ffn,
                   &cfg->kv_heads, &cfg->rope_theta) != 3)
            return -1;
        cfg->arch = MSR_GPT_ARCH_LLAMA;
    }
    return msr_gpt_config_check(cfg) == MSR_OK ? 0 : -1;
}

/* Reads and checks every piece of shard s (rank's), marking its elements
 * in have (one bit each): 0, or the exit status with the piece named. */
static int shard_check(const char *dir, long long step, int rank, const shard_t *s,
                       const msr_gpt_t *m, unsigned char *have, float *buf)
{
    for (uint32_t k = 0; k < s->n; k++) {
        msr_tckpt_range_t r = s->r[k];
        size_t bytes = 12 * (size_t)r.n;
        if (s->h.version < 3 && bytes > 12 * (size_t)MSR_TCKPT_PIECE_MAX) {
            fprintf(stderr,
                    "msrun ckpt: step-%lld/rank-%d.bin: a version 2 piece of %llu "
                    "elements: not checked\n",
                    step, rank, (unsigned long long)r.n);
            continue;
        }
        msr_status_t st = msr_ckpt_read_rank(NULL, dir, step, rank, r.offset, buf, bytes, NULL);
        r.params = buf;
        r.m = buf + r.n;
        r.v = buf + 2 * r.n;
        if (st != MSR_OK || !msr_tckpt_piece_ok(&s->h, &r)) {
            fprintf(stderr,
                    "msrun ckpt: %s/step-%lld/rank-%d.bin: the piece of tensor %s (elements "
                    "[%llu, %llu) of the whole model) %s\n",
                    dir, step, rank, msr_tckpt_tensor_name(m, r.lo), (unsigned long long)r.lo,
                    (unsigned long long)(r.lo + r.n),
                    st != MSR_OK ? msr_err_msg_or(st) : "does not match its CRC");
            return st != MSR_OK ? msr_tckpt_exit_status(st) : EXIT_BAD;
        }
        for (uint64_t i = r.lo; i < r.lo + r.n; i++)
            have[i / 8] |= (unsigned char)(1u << (i % 8));
    }
    return 0;
}

/* Prints every tensor with its shape and bytes (parameters, m and v:
 * 12 per element), and the first element no shard holds, if any. */
static int report(const msr_gpt_t *m, size_t experts, const unsigned char *have)
{
    size_t P = m->num_params, total = P + experts;
    for (int k = 0; k < m->num_tensors; k++) {
        const msr_gpt_tensor_t *t = &m->tensors[k];
        char shape[48];
        if (t->ndim == 1)
            snprintf(shape, sizeof shape, "(%d)", t->shape[0]);
        else
            snprintf(shape, sizeof shape, "(%d, %d)", t->shape[0], t->shape[1]);
        say("  %-14s %-14s %12zu bytes\n", t->name, shape, 12 * t->count);
    }
    if (experts > 0)
        say("  %-14s %-14zu %12zu bytes\n", "experts", experts, 12 * experts);
    for (size_t i = 0; i < total; i++) {
        if (!(have[i / 8] & (1u << (i % 8)))) {
            fprintf(stderr, "msrun ckpt: no shard holds element %zu (tensor %s)\n", i,
                    msr_tckpt_tensor_name(m, i));
            return -1;
        }
    }
    return 0;
}

static int inspect(const char *dir, long long step)
{
    shard_t s0;
    msr_gpt_config_t cfg;
    msr_gpt_t *m = NULL;
    msr_gpt_part_t whole = {1, 0, 1, 0, 1, NULL};
    if (step < 0 && (step = ckpt_newest_step(dir)) < 0) {
        fprintf(stderr,
                "msrun ckpt: no complete checkpoint (a step-N folder with a MANIFEST) "
                "under %s\n",
                dir);
        return EXIT_BAD;
    }
    int rc = shard_read(dir, step, 0, NULL, &s0);
    if (rc != 0)
        return rc;
    if (shape_of(s0.h.meta, &cfg) != 0 ||
        msr_gpt_create_part(&cfg, &whole, MSR_GPT_NO_PARAMS | MSR_GPT_NO_GRADS, &m) != MSR_OK ||
        m->num_params + msr_moe_num_params(&cfg) != s0.h.num_params) {
        fprintf(stderr,
                "msrun ckpt: %s/step-%lld/rank-0.bin: not a train_gpt model's "
                "checkpoint (settings: %s)\n",
                dir, step, s0.h.meta);
        msr_gpt_destroy(m);
        shard_free(&s0);
        return EXIT_BAD;
    }
    say("step %llu (optimizer step %llu, %llu samples drawn), saved by %u ranks, ZeRO %u\n",
        (unsigned long long)s0.h.step, (unsigned long long)s0.h.adam_t,
        (unsigned long long)s0.h.data_position, s0.h.world, s0.h.zero);
    if (s0.h.tp > 0 && s0.h.pp > 0 && s0.h.cp > 0)
        say("layout: dp %u x pp %u x cp %u x tp %u%s, %u virtual stages per rank, ep %u\n",
            s0.h.world / (s0.h.tp * s0.h.pp * s0.h.cp), s0.h.pp, s0.h.cp, s0.h.tp,
            s0.h.sp ? " with sp" : "", s0.h.chunks, s0.h.ep);
    else
        say("layout: not recorded\n");
    say("settings: %s\n", s0.h.meta);
    size_t total = s0.h.num_params;
    unsigned char *have = msr_calloc(total / 8 + 1, 1);
    float *buf = msr_malloc(12 * (size_t)MSR_TCKPT_PIECE_MAX);
    uint64_t pieces = 0;
    if (have == NULL || buf == NULL) {
        fprintf(stderr, "msrun ckpt: out of memory to check a model of %zu elements\n", total);
        rc = 1; /* the machine's, not the checkpoint's */
    }
    for (uint32_t r = 0; r < s0.h.world && rc == 0; r++) {
        shard_t s;
        if ((rc = shard_read(dir, step, (int)r, m, &s)) != 0)
            break;
        if (s.h.step != s0.h.step || s.h.world != s0.h.world || s.h.rank != r ||
            strcmp(s.h.meta, s0.h.meta) != 0) {
            fprintf(stderr, "msrun ckpt: %s/step-%lld/rank-%u.bin is not of rank 0's checkpoint\n",
                    dir, step, r);
            rc = EXIT_BAD;
        } else {
            rc = shard_check(dir, step, (int)r, &s, m, have, buf);
        }
        pieces += s.n;
        shard_free(&s);
    }
    if (rc == 0) {
        say("%d tensors:\n", m->num_tensors + (total > m->num_params));
        rc = report(m, total - m->num_params, have) != 0 ? EXIT_BAD : 0;
    }
    if (rc == 0)
        say("%u shards, %llu pieces: every checksum matches, every element present\n", s0.h.world,
            (unsigned long long)pieces);
    msr_free(buf);
    msr_free(have);
    msr_gpt_destroy(m);
    shard_free(&s0);
    return rc;
}

int ckpt_settings(const char *dir, long long step, char *meta, size_t len)
{
    shard_t s0;
    int rc = shard_read(dir, step, 0, NULL, &s0);
    if (rc != 0)
        return rc;
    snprintf(meta, len, "%s", s0.h.meta);
    shard_free(&s0);
    return 0;
}

int ckpt_check(const char *dir, long long step)
{
    quiet = 1;
    int rc = inspect(dir, step);
    quiet = 0;
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: msrun ckpt inspect DIR [--step N]\n"
               "       msrun ckpt export DIR [--step N] --safetensors FILE\n"
               "  inspect: prints the newest complete checkpoint under DIR (or step N): the\n"
               "  step, the world that saved it, every tensor with its shape and bytes; checks\n"
               "  every piece's CRC and that every element is present (exit 2 if not:\n"
               "  bad input; exit 1 when the machine fails, an I/O error or memory)\n"
               "  export: checks it as inspect does, then writes the whole model's weights\n"
               "  (F32, docs/checkpoint.md's names) to the safetensors file FILE, loaded by\n"
               "  train_gpt as one process under msrun (exit 2 on bad input, 1 when the\n"
               "  machine fails, as inspect)\n");
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    long long step = -1;
    const char *st = NULL;
    int bad = argc < 3 || (strcmp(argv[1], "inspect") != 0 && strcmp(argv[1], "export") != 0);
    for (int i = 3; i < argc && !bad; i += 2) {
        char *end = NULL;
        if (i + 1 >= argc)
            bad = 1;
        else if (strcmp(argv[i], "--step") == 0 && step < 0)
            bad = (step = strtoll(argv[i + 1], &end, 10)) < 0 || end == argv[i + 1] || *end != '\0';
        else if (strcmp(argv[i], "--safetensors") == 0 && st == NULL && argv[1][0] == 'e')
            bad = *(st = argv[i + 1]) == '\0';
        else
            bad = 1;
    }
    if (bad || (argv[1][0] == 'e' && st == NULL)) {
        usage(stderr);
        return EXIT_BAD;
    }
    return argv[1][0] == 'e' ? ckpt_export(argv[2], step, st) : inspect(argv[2], step);
}
