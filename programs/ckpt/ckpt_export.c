/* `msrun ckpt export DIR [--step N] --safetensors FILE`: the whole model's
 * weights of a train_gpt checkpoint as one safetensors file. The checkpoint
 * is checked as `inspect` checks it, then loaded by the code that resumes
 * training: train_gpt (next to this program) runs as one process under
 * msrun with the model and training settings the checkpoint's settings
 * text records, `--resume --steps 0 --export-safetensors FILE`, so the
 * resharding load and the exporter are the ones training uses and the file
 * is byte for byte what such a resume exports (docs/checkpoint.md, "msrun
 * ckpt export"). It reads the checkpoint through a private folder holding
 * only a link to step-N, so it picks that step and never writes into DIR. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt.h"
#include "model/gpt.h"

#define EXIT_BAD 2
#define MAX_ARGS 64

/* The command line of the export run: pointers into text. */
typedef struct args {
    char *v[MAX_ARGS + 1];
    int n;
    char text[12288];
    size_t used;
} args_t;

static void add(args_t *a, const char *fmt, ...)
{
    va_list ap;
    size_t room = sizeof a->text - a->used;
    va_start(ap, fmt);
    int k = vsnprintf(a->text + a->used, room, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= room || a->n >= MAX_ARGS) {
        a->n = -1; /* too long: settings() refuses */
        return;
    }
    if (a->n >= 0)
        a->v[a->n++] = a->text + a->used;
    a->used += (size_t)k + 1;
}

/* A Llama's "; arch llama ffn F kv-heads K rope-theta X" in data (before
 * "; experts", if any: *len_p ends there) as train_gpt's options, and
 * *len_p cut to the data's origin before it. 0, or -1 when malformed. */
static int llama_settings(const char *data, size_t *len_p, args_t *a)
{
    const char *arch = strstr(data, "; arch ");
    if (arch == NULL || (size_t)(arch - data) >= *len_p)
        return 0;
    int ffn, kv;
    char theta[32];
    if (sscanf(arch, "; arch llama ffn %d kv-heads %d rope-theta %31[^;]", &ffn, &kv, theta) != 3)
        return -1;
    *len_p = (size_t)(arch - data);
    add(a, "--arch=llama");
    add(a, "--ffn=%d", ffn);
    add(a, "--kv-heads=%d", kv);
    add(a, "--rope-theta=%s", theta);
    return 0;
}

/* train_gpt's options for the model and training settings of meta (the
 * text train_gpt_meta writes); 0, or -1 when meta is not such a text. */
static int settings(const char *meta, args_t *a)
{
    int layers, channels, heads, seq, vocab, warmup, at = 0;
    unsigned long long G, seed, cseed;
    char lr[32], wd[32], gc[32];
    if (sscanf(meta,
               "layers %d channels %d heads %d seq %d vocab %d; global batch %llu; seed %llu; "
               "lr %31s warmup %d weight-decay %31s grad-clip %31[^;]; data %n",
               &layers, &channels, &heads, &seq, &vocab, &G, &seed, lr, &warmup, wd, gc,
               &at) != 11 ||
        at == 0 || vocab != MSR_GPT_VOCAB)
        return -1;
    add(a, "--layers=%d", layers);
    add(a, "--channels=%d", channels);
    add(a, "--heads=%d", heads);
    add(a, "--seq=%d", seq);
    add(a, "--global-batch=%llu", G); /* one process: micro 1 x accum G */
    add(a, "--micro-batch=1");
    add(a, "--seed=%llu", seed);
    add(a, "--lr=%s", lr);
    add(a, "--warmup=%d", warmup);
    add(a, "--weight-decay=%s", wd);
    add(a, "--grad-clip=%s", gc);
    const char *data = meta + at, *moe = strstr(data, "; experts ");
    size_t len = moe != NULL ? (size_t)(moe - data) : strlen(data), p;
    if (llama_settings(data, &len, a) != 0) /* a Llama's (train_gpt_meta) */
        return -1;
    p = len;
    while (p > 1 && !(data[p - 1] == '(' && data[p - 2] == ' '))
        p--; /* data is "ORIGIN (N bytes)" */
    if (p <= 1 || data[len - 1] != ')')
        return -1;
    size_t bytes;
    if (sscanf(data, "generated corpus (seed %llu, %zu bytes)", &cseed, &bytes) == 2)
        add(a, "--corpus-bytes=%zu", bytes);
    else
        add(a, "--data=%.*s", (int)(p - 2), data);
    if (moe != NULL) {
        int e, k, every;
        char cf[32], aux[32];
        if (sscanf(moe, "; experts %d top-k %d moe-every %d capacity-factor %31s aux-loss %31s", &e,
                   &k, &every, cf, aux) != 5)
            return -1;
        add(a, "--experts=%d", e);
        add(a, "--top-k=%d", k);
        add(a, "--moe-every=%d", every);
        add(a, "--capacity-factor=%s", cf);
        add(a, "--aux-loss=%s", aux);
    }
    return a->n < 0 ? -1 : 0;
}

/* This program's own folder, where msrun and train_gpt lie too. */
static int own_dir(char *dir, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", dir, len - 1);
    if (n <= 0)
        return -1;
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (slash != NULL)
        *slash = '\0';
    return 0;
}

extern char **environ;

/* Runs a's command with stdout to /dev/null and stderr to log, without
 * the MSRUN_ and MSR_ variables (msrun's options and a job's worker
 * environment, which would make the one-process run part of another job);
 * its exit status, or -1. */
static int run(args_t *a, const char *log)
{
    pid_t pid = fork();
    if (pid == 0) {
        int out = open("/dev/null", O_WRONLY), err = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        size_t n = 0, k = 0;
        while (environ[n] != NULL)
            n++;
        char **env = calloc(n + 1, sizeof *env);
        for (size_t i = 0; env != NULL && i < n; i++)
            if (strncmp(environ[i], "MSRUN_", 6) != 0 && strncmp(environ[i], "MSR_", 4) != 0)
                env[k++] = environ[i];
        if (env != NULL && out >= 0 && err >= 0 && dup2(out, 1) >= 0 && dup2(err, 2) >= 0)
            execve(a->v[0], a->v, env);
        fprintf(stderr, "msrun ckpt: cannot run %s: %s\n", a->v[0], strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (pid < 0)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Copies file f to stderr (the export run's messages, on failure). */
static void show(const char *f)
{
    char line[4096];
    FILE *in = fopen(f, "r");
    while (in != NULL && fgets(line, sizeof line, in) != NULL)
        fputs(line, stderr);
    if (in != NULL)
        fclose(in);
}

/* The export run in the private folder tmp: 0, or its exit status (2: bad
 * input, 1: the machine failed, as train_gpt's) with its messages. */
static int export_run(const char *dir, long long step, const char *meta, const char *file,
                      const char *tmp)
{
    char self[PATH_MAX], real[PATH_MAX], link[PATH_MAX + 64], log[PATH_MAX + 16];
    args_t a = {.n = 0, .used = 0};
    if (own_dir(self, sizeof self) != 0 || realpath(dir, real) == NULL) {
        fprintf(stderr, "msrun ckpt: cannot resolve %s: %s\n", dir, strerror(errno));
        return EXIT_BAD;
    }
    snprintf(link, sizeof link, "%s/step-%lld", tmp, step);
    snprintf(log, sizeof log, "%s/log", tmp);
    add(&a, "%s/msrun", self);
    add(&a, "--worker_num=1");
    add(&a, "--local_worker_num=1");
    add(&a, "--job_id=ckpt-export-%ld", (long)getpid());
    add(&a, "%s/train_gpt", self);
    if (settings(meta, &a) != 0) {
        fprintf(stderr,
                "msrun ckpt: %s/step-%lld/rank-0.bin: not the settings of a train_gpt run "
                "(settings: %s)\n",
                dir, step, meta);
        return EXIT_BAD;
    }
    add(&a, "--steps=0");
    add(&a, "--resume");
    add(&a, "--ckpt-dir=%s", tmp);
    add(&a, "--export-safetensors=%s", file);
    char target[PATH_MAX + 32];
    snprintf(target, sizeof target, "%s/step-%lld", real, step);
    int rc = a.n < 0 ? -1 : symlink(target, link) != 0 ? -2 : run(&a, log);
    if (rc != 0) {
        show(log);
        fprintf(stderr, "msrun ckpt: exporting step %lld of %s to %s failed (%s %d)\n", step, dir,
                file, rc == -2 ? "cannot link the step:" : "train_gpt under msrun exited",
                rc == -2 ? errno : rc);
    }
    unlink(log);
    unlink(link);
    return rc == 0 ? 0 : rc == 1 ? 1 : EXIT_BAD;
}

int ckpt_export(const char *dir, long long step, const char *file)
{
    char meta[4096], tmp[PATH_MAX];
    struct stat sb;
    int rc = ckpt_check(dir, step);
    if (rc != 0)
        return rc;
    if (step < 0)
        step = ckpt_newest_step(dir);
    if ((rc = ckpt_settings(dir, step, meta, sizeof meta)) != 0)
        return rc;
    if (stat(file, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "msrun ckpt: cannot write %s: it is a directory\n", file);
        return EXIT_BAD;
    }
    /* the private folder next to FILE: FILE's folder must be writable */
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.export-XXXXXX", file) >= sizeof tmp ||
        mkdtemp(tmp) == NULL) {
        fprintf(stderr, "msrun ckpt: cannot write %s: %s\n", file, strerror(errno));
        return EXIT_BAD;
    }
    rc = export_run(dir, step, meta, file, tmp);
    rmdir(tmp);
    if (rc == 0)
        printf("exported the weights of step %lld of %s to %s\n", step, dir, file);
    return rc;
}
