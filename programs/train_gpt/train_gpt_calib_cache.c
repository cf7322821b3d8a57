/* train_gpt's calibration cache (docs/plan.md "The calibration cache"):
 * a measured cluster kept per machine and model shape, so that the next
 * --plan or --auto of the same shape on the same machine need not measure
 * again. One file per key under $XDG_CACHE_HOME/msrun (else
 * ~/.cache/msrun), named by the key's hash, its first line the key itself:
 *
 *   # msrun calibration v2; msrun 0.1.0; cpu <model>; cores 2; ranks 4,
 *     4 per node; layers 4 channels 32 heads 4 seq 16 micro-batch 2 threads 0;
 *     offload-dir none (or: device 259:1, the --offload-dir's st_dev, whose
 *     disk rates the calibration measured)
 *   # noise 0.031
 *   ...the cluster file's lines (train_gpt_calibrate_text)...
 *
 * Written atomically (a temporary file of mode 0600 renamed over it); a
 * file whose key differs (foreign) or that does not parse (corrupt) is
 * ignored with a warning and replaced by the next calibration. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/util.h"
#include "msrun/base.h"
#include "programs/train_gpt/train_gpt_calib.h"

#define CACHE_FILE_MAX (64 * 1024)

/* The CPU's model name from /proc/cpuinfo ("unknown" where there is none). */
static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || colon == NULL)
            continue;
        colon += 1 + strspn(colon + 1, " \t");
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, len, "%s", colon);
        break;
    }
    fclose(f);
}

int calib_cache_init(calib_cache_t *cc, const options_t *o, int ranks, int ranks_per_node)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg != NULL && xdg[0] == '/')
        n = snprintf(cc->dir, sizeof cc->dir, "%s/msrun", xdg);
    else if (home != NULL && home[0] == '/')
        n = snprintf(cc->dir, sizeof cc->dir, "%s/.cache/msrun", home);
    else
        return -1; /* nowhere to keep it */
    if (n < 0 || (size_t)n >= sizeof cc->dir)
        return -1;
    char cpu[256], disk[64] = "none";
    cpu_model(cpu, sizeof cpu);
    /* the disk rates are the offload directory's: its device names them */
    struct stat sb;
    if (o->offload_dir != NULL && stat(o->offload_dir, &sb) != 0)
        return -1;
    if (o->offload_dir != NULL) {
        snprintf(disk, sizeof disk, "device %u:%u", (unsigned)major(sb.st_dev),
                 (unsigned)minor(sb.st_dev));
    }
    snprintf(cc->key, sizeof cc->key,
             "# msrun calibration v2; msrun %s; cpu %s; cores %ld; ranks %d, %d per node; layers "
             "%" PRId64 " channels %" PRId64 " heads %" PRId64 " seq %" PRId64
             " micro-batch %" PRId64 " threads %" PRId64 "; offload-dir %s",
             MSR_VERSION_STRING, cpu, sysconf(_SC_NPROCESSORS_ONLN), ranks, ranks_per_node,
             o->layers, o->channels, o->heads, o->seq, o->micro_batch, o->threads, disk);
    /* a Llama's kernels are others at other shapes: its own key (a GPT's
     * is as it was, so its cached files stay valid) */
    size_t kl = strlen(cc->key);
    if (strcmp(o->arch, "llama") == 0 && kl < sizeof cc->key)
        snprintf(cc->key + kl, sizeof cc->key - kl,
                 "; arch llama ffn %" PRId64 " kv-heads %" PRId64 " rope-theta %.17g", o->ffn,
                 o->kv_heads, o->rope_theta);
    uint64_t h = msr_fnv1a_str(MSR_FNV1A_INIT, cc->key);
    n = snprintf(cc->path, sizeof cc->path, "%s/calibration-%016" PRIx64, cc->dir, h);
    return n < 0 || (size_t)n >= sizeof cc->path ? -1 : 0;
}

/* The file's text (NUL-terminated, the caller frees), NULL when it cannot
 * be read: *absent_p 1 when there is no file. */
static char *cache_read(const char *path, int *absent_p)
{
    *absent_p = 0;
    FILE *f = msr_fopen_input(path, 0); /* never blocks on a FIFO */
    if (f == NULL) {
        *absent_p = errno == ENOENT;
        return NULL;
    }
    char *text = msr_malloc(CACHE_FILE_MAX + 1);
    size_t n = text != NULL ? fread(text, 1, CACHE_FILE_MAX + 1, f) : 0;
    int bad = text == NULL || ferror(f) || n > CACHE_FILE_MAX || memchr(text, '\0', n) != NULL;
    fclose(f);
    if (bad) {
        msr_free(text);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

int calib_cache_load(const calib_cache_t *cc, msr_plan_cluster_t *c, double *noise_p)
{
    int absent;
    char *text = cache_read(cc->path, &absent);
    if (text == NULL && absent)
        return 1;
    const char *why;
    char reason[512];
    size_t kl = strlen(cc->key);
    msr_plan_cluster_t cl;
    msr_plan_cluster_default(&cl);
    double noise = -1;
    if (text == NULL)
        why = "cannot be read, or not a cache file";
    else if (strncmp(text, cc->key, kl) != 0 || text[kl] != '\n')
        why = "made for another machine, model shape or msrun version";
    else if (sscanf(text + kl + 1, "# noise %lf", &noise) != 1 || !(noise >= 0 && noise < 100))
        why = "corrupt (no noise line)";
    else if (msr_plan_cluster_parse(text, &cl, reason, sizeof reason) != 0)
        why = "corrupt (its cluster lines do not parse)";
    else
        why = NULL;
    msr_free(text);
    if (why == NULL) {
        *c = cl;
        *noise_p = noise;
        return 0;
    }
    fprintf(stderr,
            "train_gpt: warning: the calibration cache %s is ignored: %s; measuring again\n",
            cc->path, why);
    return -1;
}

/* Writes text to path through a temporary file of mode 0600 in the same
 * directory, renamed over it. Returns 0, or -1 with errno. */
static int write_atomic(const char *path, const char *text, size_t n)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    size_t at = 0;
    while (at < n) {
        ssize_t w = write(fd, text + at, n - at);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        at += (size_t)w;
    }
    int ok = at == n && fsync(fd) == 0;
    int err = errno;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return 0;
    err = ok ? errno : err;
    unlink(tmp);
    errno = err;
    return -1;
}

int calib_cache_store(const calib_cache_t *cc, const options_t *o, const calib_t *k)
{
    char *text = msr_malloc(CACHE_FILE_MAX);
    if (text == NULL) {
        fprintf(stderr, "train_gpt: warning: the calibration is not cached: out of memory\n");
        return -1;
    }
    int n = snprintf(text, CACHE_FILE_MAX, "%s\n# noise %.6g\n", cc->key, k->noise);
    int body = train_gpt_calibrate_text(o, k, text + n, CACHE_FILE_MAX - (size_t)n);
    /* the directory: ~/.cache may not exist yet; ours is the user's alone */
    char parent[sizeof cc->dir];
    snprintf(parent, sizeof parent, "%s", cc->dir);
    char *slash = strrchr(parent, '/');
    if (slash != NULL && slash != parent) {
        *slash = '\0';
        (void)mkdir(parent, 0700); /* EEXIST, or the next mkdir says why */
    }
    int rc = -1;
    if (body < 0)
        errno = ENOSPC;
    else if ((mkdir(cc->dir, 0700) == 0 || errno == EEXIST) &&
             write_atomic(cc->path, text, (size_t)(n + body)) == 0)
        rc = 0;
    if (rc != 0)
        fprintf(stderr, "train_gpt: warning: the calibration is not cached in %s: %s\n", cc->path,
                strerror(errno));
    msr_free(text);
    return rc;
}
