/* Data sets (a file's bytes or tokens, or the generated corpus) and the
 * sampler; token files' header and the epochs' order are in data_tokens.c. */
#include "model/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/status.h"
#include "base/util.h"
#include "model/data_impl.h"
#include "model/rng.h"

#define DATA_STREAM   0x64617461ULL /* the sampler's RNG stream */
#define CORPUS_STREAM 0x636f7270ULL /* the corpus generator's */

msr_status_t msr_dataset_load(const char *path, msr_dataset_t **ds_p)
{
    msr_status_t st;
    int fd;
    if ((st = msr_open_input(path, 0, &fd)) != MSR_OK) { /* a FIFO would block */
        if (errno == EINVAL) /* there, but not a regular file: a bad --data */
            st = MSR_ERR_INVALID_ARG;
        return msr_err_prefix(st, "data");
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = msr_err(msr_status_from_errno(errno), "data: cannot stat %s: %s", path,
                     strerror(errno));
        goto err_close;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size < 2) {
        st = msr_err(MSR_ERR_INVALID_ARG, "data: %s is not a regular file of at least 2 bytes",
                     path);
        goto err_close;
    }
    msr_dataset_t *ds = msr_calloc(1, sizeof *ds);
    if (ds == NULL) {
        st = msr_err(MSR_ERR_NO_MEMORY, "data: out of memory opening %s", path);
        goto err_close;
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        st = msr_err(msr_status_from_errno(errno), "data: cannot map %s (%lld bytes): %s", path,
                     (long long)sb.st_size, strerror(errno));
        goto err_free;
    }
    close(fd);
    ds->map = map;
    ds->mapped = (size_t)sb.st_size;
    snprintf(ds->origin, sizeof ds->origin, "%s", path);
    ds->bytes = map;
    ds->size = ds->mapped;
    ds->width = 1;
    ds->vocab = 256;
    if (msr_data_is_tokens(map, ds->mapped) &&
        (st = msr_data_tokens_parse(path, map, ds->mapped, ds)) != MSR_OK) {
        msr_dataset_destroy(ds);
        return st;
    }
    *ds_p = ds;
    return MSR_OK;

err_free:
    msr_free(ds);
err_close:
    close(fd);
    return st;
}

/* ---- the generated corpus ---- */

static const char *const subjects[] = {
    "the cat",     "a dog",         "the old man", "my sister",   "the small bird", "a farmer",
    "the teacher", "our neighbour", "the child",   "a sailor",    "the baker",      "my friend",
    "the queen",   "a student",     "the fox",     "the captain",
};
static const char *const verbs[] = {
    "sees",  "likes", "finds",  "carries", "paints", "follows", "helps", "watches",
    "wants", "buys",  "builds", "moves",   "cleans", "draws",   "opens", "keeps",
};
static const char *const objects[] = {
    "a red ball",    "the green door",  "an apple",       "the river",
    "a tall tree",   "the blue box",    "a little boat",  "the garden",
    "a warm coat",   "the white house", "a new book",     "the long road",
    "a heavy stone", "the yellow cup",  "a wooden chair", "the market",
};
static const char *const places[] = {
    "in the morning", "every day",      "near the river", "after the rain", "with great care",
    "before dinner",  "in the evening", "at the market",  "on the hill",    "without a word",
};
static const char *const numbers[] = {"one", "two",   "three", "four", "five",
                                      "six", "seven", "eight", "nine", "ten"};

#define PICK(list, r) list[(r) % (sizeof(list) / sizeof((list)[0]))]

/* Appends the string s to out (capacity cap, *len filled), cut at cap. The
 * corpus is built from strings and small numbers with these two, not
 * vsnprintf: each worker of a run generates it at start (1 MiB by
 * default), and formatting it took about a quarter of a small model's
 * one-step run. The bytes are those the formatted lines made
 * (test_parallel_data pins them). */
static void append(char *out, size_t cap, size_t *len, const char *s)
{
    size_t m = MSR_MIN(strlen(s), cap - *len);
    memcpy(out + *len, s, m);
    *len += m;
}

/* n (below 1000) in decimal, as %u writes it */
static void append_uint(char *out, size_t cap, size_t *len, unsigned n)
{
    char digits[4];
    size_t k = sizeof digits - 1;
    digits[k] = '\0';
    do {
        digits[--k] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0 && k > 0);
    append(out, cap, len, digits + k);
}

msr_status_t msr_dataset_generate(uint64_t seed, size_t size, msr_dataset_t **ds_p)
{
    if (size < 2) {
        return msr_err(MSR_ERR_INVALID_ARG,
                       "data: a generated corpus needs at least 2 bytes, not %zu", size);
    }
    msr_dataset_t *ds = msr_calloc(1, sizeof *ds);
    char *text = msr_malloc(size);
    if (ds == NULL || text == NULL) {
        msr_free(text);
        msr_free(ds);
        return msr_err(MSR_ERR_NO_MEMORY, "data: out of memory for a %zu-byte corpus", size);
    }
    size_t len = 0;
    uint64_t k = 0;
    while (len < size) {
        uint64_t r = msr_rng_u64(seed, CORPUS_STREAM, k++);
        unsigned kind = (unsigned)(r % 8);
        r >>= 3;
        if (kind < 5) { /* a sentence, sometimes with a place or time */
            append(text, size, &len, PICK(subjects, r & 0xff));
            append(text, size, &len, " ");
            append(text, size, &len, PICK(verbs, (r >> 8) & 0xff));
            append(text, size, &len, " ");
            append(text, size, &len, PICK(objects, (r >> 16) & 0xff));
            if (kind < 3) {
                append(text, size, &len, " ");
                append(text, size, &len, PICK(places, (r >> 24) & 0xff));
            }
            append(text, size, &len, ". ");
        } else if (kind < 7) { /* a sum of two small numbers */
            unsigned a = (unsigned)(r % 50), b = (unsigned)((r >> 8) % 50);
            append_uint(text, size, &len, a);
            append(text, size, &len, " plus ");
            append_uint(text, size, &len, b);
            append(text, size, &len, " is ");
            append_uint(text, size, &len, a + b);
            append(text, size, &len, ". ");
        } else { /* counting, then the end of a paragraph */
            unsigned n = 3 + (unsigned)((r >> 8) % 5), from = (unsigned)(r % (11 - n));
            for (unsigned i = 0; i < n; i++) {
                append(text, size, &len, numbers[from + i]);
                append(text, size, &len, i + 1 < n ? " " : ".\n");
            }
        }
    }
    ds->owned = text;
    ds->bytes = (const uint8_t *)text;
    ds->size = size;
    ds->width = 1;
    ds->vocab = 256;
    snprintf(ds->origin, sizeof ds->origin, "generated corpus (seed %llu, %zu bytes)",
             (unsigned long long)seed, size);
    *ds_p = ds;
    return MSR_OK;
}

void msr_dataset_destroy(msr_dataset_t *ds)
{
    if (ds == NULL)
        return;
    if (ds->mapped > 0)
        munmap(ds->map, ds->mapped);
    msr_free(ds->owned);
    msr_free(ds);
}

/* ---- the sampler ---- */

size_t msr_sampler_offset(const msr_sampler_t *s, size_t ds_size, int T, uint64_t k)
{
    return (size_t)msr_rng_below(msr_rng_u64(s->seed, DATA_STREAM, k), ds_size - (size_t)T);
}

void msr_sampler_fill(const msr_sampler_t *s, const msr_dataset_t *ds, int T, uint64_t first, int n,
                      int *inputs, int *targets)
{
    for (int r = 0; r < n; r++) {
        size_t o = msr_sampler_start(s, ds, T, s->position + first + (uint64_t)r);
        int *in = inputs + (size_t)r * T, *tg = targets + (size_t)r * T;
        if (ds->width == 1) {                 /* bytes: the common case, read directly */
            const uint8_t *w = ds->bytes + o; /* (T + 1) */
            for (int t = 0; t < T; t++) {
                in[t] = w[t];
                tg[t] = w[t + 1];
            }
            continue;
        }
        for (int t = 0; t < T; t++) {
            in[t] = msr_dataset_token(ds, o + (size_t)t);
            tg[t] = msr_dataset_token(ds, o + (size_t)t + 1);
        }
    }
}
