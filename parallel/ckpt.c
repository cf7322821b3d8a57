/* The checkpoint format: shards and manifests (see ckpt.h). */
#include "parallel/ckpt.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/status.h"
#include "parallel/ckpt_io.h"

#define SHARD_MAGIC    "MSRCKPT1"
#define SHARD_VERSION  1
#define MANIFEST_NAME  "MANIFEST"
#define MANIFEST_MAGIC "msrun-checkpoint 1"
#define MAX_WORLD      (1u << 20)

/* The fixed part of the header: magic, 2 x u32, 9 x u64, 3 x u32. */
#define SHARD_FIXED (8 + 2 * 4 + 9 * 8 + 3 * 4)

/* The whole header: the fixed part, meta, at least one NUL, padded to 8
 * bytes so the floats after it are aligned in a malloc'd buffer. */
static size_t shard_head_len(size_t meta_len)
{
    return (SHARD_FIXED + meta_len + 1 + 7) & ~(size_t)7;
}

#define HASH_INIT  0xcbf29ce484222325ULL
#define HASH_PRIME 0x100000001b3ULL

void msr_tckpt_hash_init(msr_tckpt_hasher_t *hs)
{
    hs->h = HASH_INIT;
    hs->npart = 0;
}

static uint64_t hash_word(uint64_t h, const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * HASH_PRIME;
    return h ^ (h >> 29);
}

void msr_tckpt_hash_update(msr_tckpt_hasher_t *hs, const void *data, size_t len)
{
    const unsigned char *p = data;
    while (len > 0 && hs->npart > 0) { /* finish the word begun by the last piece */
        hs->part[hs->npart++] = *p++;
        len--;
        if (hs->npart == 8) {
            hs->h = hash_word(hs->h, hs->part);
            hs->npart = 0;
        }
    }
    for (; len >= 8; p += 8, len -= 8)
        hs->h = hash_word(hs->h, p);
    if (len > 0) {
        memcpy(hs->part + hs->npart, p, len);
        hs->npart += len;
    }
}

uint64_t msr_tckpt_hash_final(const msr_tckpt_hasher_t *hs)
{
    uint64_t h = hs->h;
    for (size_t i = 0; i < hs->npart; i++)
        h = (h ^ hs->part[i]) * HASH_PRIME;
    return h;
}

uint64_t msr_tckpt_hash(const void *data, size_t len)
{
    msr_tckpt_hasher_t hs;
    msr_tckpt_hash_init(&hs);
    msr_tckpt_hash_update(&hs, data, len);
    return msr_tckpt_hash_final(&hs);
}

msr_status_t msr_tckpt_step_dir(const char *dir, uint64_t step, char *out, size_t out_len)
{
    int n = snprintf(out, out_len, "%s/step_%08llu", dir, (unsigned long long)step);
    if (n < 0 || (size_t)n >= out_len) {
        MSR_ERROR("checkpoint: directory name too long under %s", dir);
        return MSR_ERR_INVALID_ARG;
    }
    return MSR_OK;
}

/* "<step_dir>/<name>" into out (PATH_MAX bytes). */
static msr_status_t join_path(char *out, const char *step_dir, const char *name)
{
    int n = snprintf(out, PATH_MAX, "%s/%s", step_dir, name);
    if (n < 0 || n >= PATH_MAX) {
        MSR_ERROR("checkpoint: path too long under %s", step_dir);
        return MSR_ERR_INVALID_ARG;
    }
    return MSR_OK;
}

/* ---- writing a shard ---- */

static void put_u32(unsigned char **p, uint32_t v)
{
    memcpy(*p, &v, 4);
    *p += 4;
}

static void put_u64(unsigned char **p, uint64_t v)
{
    memcpy(*p, &v, 8);
    *p += 8;
}

msr_status_t msr_tckpt_shard_write(const char *dir, const msr_tckpt_shard_t *shard,
                                   msr_tckpt_entry_t *entry_p)
{
    const msr_tckpt_shard_t *s = shard;
    size_t meta_len = s->meta != NULL ? strlen(s->meta) : 0;
    if (meta_len >= MSR_TCKPT_META_MAX || s->params_lo > s->params_hi ||
        s->params_hi > s->num_params || s->opt_lo > s->opt_hi || s->opt_hi > s->num_params ||
        s->world == 0 || s->rank >= s->world || s->world > MAX_WORLD) {
        MSR_ERROR("checkpoint: inconsistent shard (rank %u of %u, params [%" PRIu64 ", %" PRIu64
                  "), moments [%" PRIu64 ", %" PRIu64 ") of %" PRIu64 ", meta %zu bytes)",
                  s->rank, s->world, s->params_lo, s->params_hi, s->opt_lo, s->opt_hi,
                  s->num_params, meta_len);
        return MSR_ERR_INVALID_ARG;
    }
    char step_dir[PATH_MAX], path[PATH_MAX];
    msr_status_t st = msr_tckpt_step_dir(dir, s->step, step_dir, sizeof step_dir);
    if (st != MSR_OK)
        return st;
    if ((st = msr_tckpt_io_mkdirs(step_dir)) != MSR_OK)
        return st;
    msr_tckpt_entry_t e;
    memset(&e, 0, sizeof e); /* no stray bytes when the entry travels to rank 0 */
    snprintf(e.name, sizeof e.name, "rank_%05u.bin", s->rank);
    if ((st = join_path(path, step_dir, e.name)) != MSR_OK)
        return st;

    unsigned char head[SHARD_FIXED];
    static const unsigned char zeros[8];
    size_t head_len = shard_head_len(meta_len);
    unsigned char *p = head;
    memcpy(p, SHARD_MAGIC, 8);
    p += 8;
    put_u32(&p, SHARD_VERSION);
    put_u32(&p, (uint32_t)head_len);
    put_u64(&p, s->step);
    put_u64(&p, s->adam_t);
    put_u64(&p, s->data_seed);
    put_u64(&p, s->data_position);
    put_u64(&p, s->num_params);
    put_u64(&p, s->params_lo);
    put_u64(&p, s->params_hi);
    put_u64(&p, s->opt_lo);
    put_u64(&p, s->opt_hi);
    put_u32(&p, s->rank);
    put_u32(&p, s->world);
    put_u32(&p, (uint32_t)meta_len);

    size_t np = (size_t)(s->params_hi - s->params_lo) * sizeof(float);
    size_t no = (size_t)(s->opt_hi - s->opt_lo) * sizeof(float);
    msr_tckpt_piece_t pieces[7] = {
        {head, sizeof head}, {s->meta, meta_len}, {zeros, head_len - SHARD_FIXED - meta_len},
        {s->params, np},     {s->m, no},          {s->v, no},
    };
    msr_tckpt_hasher_t hs;
    msr_tckpt_hash_init(&hs);
    for (int i = 0; i < 6; i++)
        msr_tckpt_hash_update(&hs, pieces[i].data, pieces[i].len);
    uint64_t h = msr_tckpt_hash_final(&hs);
    pieces[6] = (msr_tckpt_piece_t){&h, sizeof h};
    if ((st = msr_tckpt_io_write(path, pieces, 7)) != MSR_OK)
        return st;
    e.size = head_len + np + 2 * no + sizeof h;
    msr_tckpt_hash_update(&hs, &h, sizeof h);
    e.hash = msr_tckpt_hash_final(&hs);
    *entry_p = e;
    return MSR_OK;
}

/* ---- the manifest ---- */

msr_status_t msr_tckpt_manifest_write(const char *dir, uint64_t step, uint32_t world,
                                      const msr_tckpt_entry_t *entries)
{
    char step_dir[PATH_MAX], path[PATH_MAX];
    msr_status_t st = msr_tckpt_step_dir(dir, step, step_dir, sizeof step_dir);
    if (st != MSR_OK)
        return st;
    if ((st = join_path(path, step_dir, MANIFEST_NAME)) != MSR_OK)
        return st;
    msr_buf_t b = MSR_BUF_INIT;
    st = msr_buf_printf(&b, "%s\nstep %llu\nworld %u\n", MANIFEST_MAGIC, (unsigned long long)step,
                        world);
    for (uint32_t r = 0; r < world && st == MSR_OK; r++)
        st = msr_buf_printf(&b, "shard %u %s %llu %016llx\n", r, entries[r].name,
                            (unsigned long long)entries[r].size,
                            (unsigned long long)entries[r].hash);
    if (st == MSR_OK)
        st = msr_buf_printf(&b, "end\n");
    if (st != MSR_OK) {
        MSR_ERROR("checkpoint: out of memory for a manifest of %u shards", world);
        goto err_buf;
    }
    msr_tckpt_piece_t piece = {b.data, b.len};
    st = msr_tckpt_io_write(path, &piece, 1);

err_buf:
    msr_buf_cleanup(&b);
    return st;
}

/* A parsed manifest. */
typedef struct manifest {
    uint64_t step;
    uint32_t world;
    msr_tckpt_entry_t *entries; /* [world] */
} manifest_t;

/* Reads and checks the manifest of checkpoint `step`: well formed, ending
 * in "end", and every shard present with its listed size. Not complete
 * gives MSR_ERR_NOT_FOUND; *why says what is missing. */
static msr_status_t manifest_load(const char *dir, uint64_t step, manifest_t *m, const char **why)
{
    char step_dir[PATH_MAX], path[PATH_MAX];
    msr_status_t st = msr_tckpt_step_dir(dir, step, step_dir, sizeof step_dir);
    if (st != MSR_OK)
        return st;
    if ((st = join_path(path, step_dir, MANIFEST_NAME)) != MSR_OK)
        return st;
    char *text;
    size_t len;
    st = msr_tckpt_io_read(path, (void **)&text, &len);
    if (st != MSR_OK) {
        *why = "no manifest";
        return st == MSR_ERR_NOT_FOUND ? MSR_ERR_NOT_FOUND : st;
    }
    st = MSR_ERR_NOT_FOUND;
    *why = "malformed manifest";
    m->entries = NULL;
    unsigned long long mstep;
    unsigned world;
    int off = 0;
    if (sscanf(text, MANIFEST_MAGIC "\nstep %llu\nworld %u\n%n", &mstep, &world, &off) != 2 ||
        off == 0 || mstep != step || world == 0 || world > MAX_WORLD)
        goto err_text;
    m->entries = msr_calloc(world, sizeof *m->entries);
    if (m->entries == NULL) {
        st = MSR_ERR_NO_MEMORY;
        goto err_text;
    }
    const char *p = text + off;
    for (unsigned r = 0; r < world; r++) {
        unsigned rank;
        unsigned long long size, hash;
        char name[32];
        int n = 0;
        if (sscanf(p, "shard %u %31s %llu %llx\n%n", &rank, name, &size, &hash, &n) != 4 ||
            n == 0 || rank != r)
            goto err_entries;
        snprintf(m->entries[r].name, sizeof m->entries[r].name, "%s", name);
        m->entries[r].size = size;
        m->entries[r].hash = hash;
        p += n;
    }
    if (strcmp(p, "end\n") != 0)
        goto err_entries;
    *why = "a shard is missing or has the wrong size";
    for (unsigned r = 0; r < world; r++) {
        uint64_t size;
        if (strchr(m->entries[r].name, '/') != NULL)
            goto err_entries;
        if (join_path(path, step_dir, m->entries[r].name) != MSR_OK ||
            msr_tckpt_io_size(path, &size) != MSR_OK || size != m->entries[r].size)
            goto err_entries;
    }
    m->step = step;
    m->world = world;
    msr_free(text);
    return MSR_OK;

err_entries:
    msr_free(m->entries);
    m->entries = NULL;
err_text:
    msr_free(text);
    return st;
}

typedef struct scan {
    uint64_t *steps;
    size_t n, cap;
    int no_memory;
} scan_t;

static void scan_entry(void *arg, const char *name)
{
    scan_t *s = arg;
    unsigned long long step;
    int n = 0;
    if (sscanf(name, "step_%llu%n", &step, &n) != 1 || name[n] != '\0')
        return;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        uint64_t *steps = msr_realloc_array(s->steps, cap, sizeof *steps);
        if (steps == NULL) {
            s->no_memory = 1;
            return;
        }
        s->steps = steps;
        s->cap = cap;
    }
    s->steps[s->n++] = step;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

msr_status_t msr_tckpt_latest(const char *dir, uint64_t *step_p, uint32_t *world_p)
{
    scan_t s = {NULL, 0, 0, 0};
    msr_status_t st = msr_tckpt_io_list(dir, scan_entry, &s);
    if (st != MSR_OK)
        return st;
    if (s.no_memory) {
        msr_free(s.steps);
        return MSR_ERR_NO_MEMORY;
    }
    if (s.n > 1)
        qsort(s.steps, s.n, sizeof *s.steps, cmp_desc);
    st = MSR_ERR_NOT_FOUND;
    for (size_t i = 0; i < s.n; i++) {
        manifest_t m;
        const char *why = "";
        msr_status_t mst = manifest_load(dir, s.steps[i], &m, &why);
        if (mst == MSR_OK) {
            *step_p = m.step;
            *world_p = m.world;
            msr_free(m.entries);
            st = MSR_OK;
            break;
        }
        if (mst != MSR_ERR_NOT_FOUND) {
            st = mst;
            break;
        }
        MSR_INFO("checkpoint: skipping step %llu under %s: %s", (unsigned long long)s.steps[i], dir,
                 why);
    }
    msr_free(s.steps);
    return st;
}

/* ---- reading a shard ---- */

static uint32_t get_u32(const unsigned char **p)
{
    uint32_t v;
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}

static uint64_t get_u64(const unsigned char **p)
{
    uint64_t v;
    memcpy(&v, *p, 8);
    *p += 8;
    return v;
}

msr_status_t msr_tckpt_shard_read(const char *dir, uint64_t step, uint32_t rank,
                                  msr_tckpt_shard_t *shard_p, void **buf_p)
{
    manifest_t m;
    const char *why = "";
    msr_status_t st = manifest_load(dir, step, &m, &why);
    if (st != MSR_OK) {
        if (st == MSR_ERR_NOT_FOUND)
            MSR_ERROR("checkpoint: step %llu under %s is not complete: %s",
                      (unsigned long long)step, dir, why);
        return st;
    }
    if (rank >= m.world) {
        MSR_ERROR("checkpoint: step %llu under %s has %u shards, none for rank %u",
                  (unsigned long long)step, dir, m.world, rank);
        st = MSR_ERR_NOT_FOUND;
        goto err_manifest;
    }
    char step_dir[PATH_MAX], path[PATH_MAX];
    unsigned char *buf;
    if ((st = msr_tckpt_step_dir(dir, step, step_dir, sizeof step_dir)) != MSR_OK ||
        (st = join_path(path, step_dir, m.entries[rank].name)) != MSR_OK)
        goto err_manifest;
    size_t len;
    if ((st = msr_tckpt_io_read(path, (void **)&buf, &len)) != MSR_OK) {
        if (st == MSR_ERR_NOT_FOUND)
            MSR_ERROR("checkpoint: %s vanished", path);
        goto err_manifest;
    }
    st = MSR_ERR_CORRUPT;
    if (len != m.entries[rank].size || msr_tckpt_hash(buf, len) != m.entries[rank].hash) {
        MSR_ERROR("checkpoint: %s does not match its manifest (size or hash)", path);
        goto err_buf;
    }
    if (len < SHARD_FIXED + 8 || memcmp(buf, SHARD_MAGIC, 8) != 0) {
        MSR_ERROR("checkpoint: %s is not a shard file", path);
        goto err_buf;
    }
    uint64_t trailer;
    memcpy(&trailer, buf + len - 8, 8);
    if (msr_tckpt_hash(buf, len - 8) != trailer) {
        MSR_ERROR("checkpoint: %s fails its own hash", path);
        goto err_buf;
    }
    const unsigned char *p = buf + 8;
    msr_tckpt_shard_t s;
    uint32_t version = get_u32(&p), head_len = get_u32(&p);
    s.step = get_u64(&p);
    s.adam_t = get_u64(&p);
    s.data_seed = get_u64(&p);
    s.data_position = get_u64(&p);
    s.num_params = get_u64(&p);
    s.params_lo = get_u64(&p);
    s.params_hi = get_u64(&p);
    s.opt_lo = get_u64(&p);
    s.opt_hi = get_u64(&p);
    s.rank = get_u32(&p);
    s.world = get_u32(&p);
    uint32_t meta_len = get_u32(&p);
    if (version != SHARD_VERSION || meta_len >= MSR_TCKPT_META_MAX ||
        head_len != shard_head_len(meta_len) || (size_t)head_len + 8 > len ||
        buf[SHARD_FIXED + meta_len] != '\0' || s.num_params > len / sizeof(float) ||
        s.step != step || s.rank != rank || s.world != m.world || s.params_lo > s.params_hi ||
        s.params_hi > s.num_params || s.opt_lo > s.opt_hi || s.opt_hi > s.num_params ||
        len != (size_t)head_len +
                   ((s.params_hi - s.params_lo) + 2 * (s.opt_hi - s.opt_lo)) * sizeof(float) + 8) {
        MSR_ERROR("checkpoint: %s has an inconsistent header (version %u, step %llu, rank %u of "
                  "%u)",
                  path, version, (unsigned long long)s.step, s.rank, s.world);
        goto err_buf;
    }
    s.meta = (const char *)buf + SHARD_FIXED;         /* NUL-terminated by the padding */
    const float *f = (const float *)(buf + head_len); /* aligned: head_len % 8 == 0 */
    s.params = f;
    s.m = f + (s.params_hi - s.params_lo);
    s.v = s.m + (s.opt_hi - s.opt_lo);
    msr_free(m.entries);
    *shard_p = s;
    *buf_p = buf;
    return MSR_OK;

err_buf:
    msr_free(buf);
err_manifest:
    msr_free(m.entries);
    return st;
}
