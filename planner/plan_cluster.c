/* The cluster file of the time model (plan.h "the cluster", docs/plan.md
 * "Time model"): the default cluster, the file's keys, and its parser and
 * writer. Pure: no I/O, no allocation. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan.h"

/* ---- the cluster ---- */

void msr_plan_cluster_default(msr_plan_cluster_t *c)
{
    /* Narayanan et al. (2021): DGX A100 80 GB nodes, 8 GPUs joined by
     * NVLink/NVSwitch (300 GB/s per GPU each way), 8 HDR InfiniBand
     * adapters per node (25 GB/s per GPU), 312 TFLOP/s bf16 peak per GPU,
     * HBM2e at about 2 TB/s. */
    c->ranks_per_node = 8;
    c->mem_gib = 80;
    c->peak_tflops = 312;
    c->intra_gbs = 300;
    c->inter_gbs = 25;
    c->latency_us = 5;
    c->mem_gbs = 2000;
    c->kernel_us = 5;
    c->cores_per_node = 0;
    c->act_gbs = 0;
    c->mm_rows = 0;
    c->mm_rows_half = 0;
    c->attn_tflops = 0;
    c->ring_tflops = 0;
    c->ring_chunk = 0;
    c->ring_chunk_half = 0;
    c->cold_ms_per_mib = 0;
    c->cold_from_mib = 0;
    c->cold_full_mib = 0;
    c->idle_lend = 1;
    c->ring_step_us = 0;
    /* a DGX A100's four NVMe drives in RAID 0, about 25 GB/s read and 12
     * GB/s write for the node, shared by its 8 ranks */
    c->disk_read_gbs = 3;
    c->disk_write_gbs = 1.5;
}

/* The cluster file's keys, in the order it is written: where each sits in
 * msr_plan_cluster_t, an int (a count) or a double; whether it may be 0
 * (its term off, or one rank per core) where the model never divides by
 * it; a double's largest value. */
#define REAL_MAX 1e12

typedef struct cluster_key {
    const char *name;
    size_t off;
    int is_int;
    int zero_ok;
    double max;
} cluster_key_t;

#define REAL(f, z)                                          \
    {                                                       \
#f, offsetof(msr_plan_cluster_t, f), 0, z, REAL_MAX \
    }
#define COUNT(f, z)                                        \
    {                                                      \
#f, offsetof(msr_plan_cluster_t, f), 1, z, 1 << 20 \
    }
static const cluster_key_t cluster_keys[] = {
    COUNT(ranks_per_node, 0),
    REAL(mem_gib, 0),
    REAL(peak_tflops, 0),
    REAL(intra_gbs, 0),
    REAL(inter_gbs, 0),
    REAL(latency_us, 1),
    REAL(mem_gbs, 1),
    REAL(kernel_us, 1),
    COUNT(cores_per_node, 1),
    REAL(act_gbs, 1),
    REAL(mm_rows, 1),
    REAL(mm_rows_half, 1),
    REAL(attn_tflops, 1),
    REAL(ring_tflops, 1),
    REAL(ring_chunk, 1),
    REAL(ring_chunk_half, 1),
    REAL(cold_ms_per_mib, 1),
    REAL(cold_from_mib, 1),
    REAL(cold_full_mib, 1),
    {"idle_lend", offsetof(msr_plan_cluster_t, idle_lend), 0, 1, 1}, /* a share */
    REAL(ring_step_us, 1),
    REAL(disk_read_gbs, 0), /* the offloads' I/O divides by them */
    REAL(disk_write_gbs, 0),
};
#undef REAL
#undef COUNT
#define N_KEYS (sizeof cluster_keys / sizeof cluster_keys[0])

int msr_plan_cluster_real_key(size_t i, const char **name, size_t *offset)
{
    for (size_t k = 0; k < N_KEYS; k++) {
        if (cluster_keys[k].is_int)
            continue;
        if (i-- == 0) {
            *name = cluster_keys[k].name;
            *offset = cluster_keys[k].off;
            return 1;
        }
    }
    return 0;
}

__attribute__((format(printf, 4, 5))) static void set_why(char *why, size_t len, int line,
                                                          const char *fmt, ...)
{
    if (why == NULL || len == 0)
        return;
    int n = snprintf(why, len, "line %d: ", line);
    if (n >= 0 && (size_t)n < len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why + n, len - (size_t)n, fmt, ap);
        va_end(ap);
    }
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* "unknown key 'KEY' (every key, comma-separated)" after "line N: " */
static void unknown_key(char *why, size_t len, int line, const char *key)
{
    char list[512];
    size_t at = 0;
    list[0] = '\0';
    for (size_t k = 0; k < N_KEYS && at < sizeof list; k++) {
        int n = snprintf(list + at, sizeof list - at, "%s%s", k ? ", " : "", cluster_keys[k].name);
        if (n < 0)
            break;
        at += (size_t)n;
    }
    set_why(why, len, line, "unknown key '%s' (%s)", key, list);
}

int msr_plan_cluster_parse(const char *text, msr_plan_cluster_t *c, char *why, size_t why_len)
{
    msr_plan_cluster_t out = *c;
    int seen[N_KEYS] = {0};
    int line = 0;
    const char *p = text;
    while (*p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);
        line++;
        char buf[512];
        if (n >= sizeof buf) {
            set_why(why, why_len, line, "longer than 511 bytes");
            return -1;
        }
        memcpy(buf, p, n);
        buf[n] = '\0';
        p += n + (nl != NULL ? 1 : 0);
        char *hash = strchr(buf, '#');
        if (hash != NULL)
            *hash = '\0';
        char *s = trim(buf);
        if (*s == '\0')
            continue;
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            set_why(why, why_len, line, "'%s' is not key = value", s);
            return -1;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        size_t k = 0;
        while (k < N_KEYS && strcmp(cluster_keys[k].name, key) != 0)
            k++;
        if (k == N_KEYS) {
            unknown_key(why, why_len, line, key);
            return -1;
        }
        const cluster_key_t *ck = &cluster_keys[k];
        if (seen[k]) {
            set_why(why, why_len, line, "'%s' given twice", key);
            return -1;
        }
        seen[k] = 1;
        char *end = NULL;
        double v = strtod(val, &end);
        if (end == val || *end != '\0' || !isfinite(v)) {
            set_why(why, why_len, line, "'%s' is not a number", val);
            return -1;
        }
        char *field = (char *)&out + ck->off;
        if (ck->is_int) {
            int lo = !ck->zero_ok;
            if (v < lo || v > ck->max || v != floor(v)) {
                set_why(why, why_len, line, "%s %s: not an integer in [%d, %.0f]", key, val, lo,
                        ck->max);
                return -1;
            }
            *(int *)field = (int)v;
            continue;
        }
        if (ck->max < REAL_MAX && v > ck->max) {
            set_why(why, why_len, line, "%s %s: a share, from 0 to %g", key, val, ck->max);
            return -1;
        }
        if (v < 0 || (v == 0 && !ck->zero_ok) || v > REAL_MAX) {
            set_why(why, why_len, line, "%s: must be %s (and at most 1e12)", key,
                    ck->zero_ok ? "0 or more" : "more than 0");
            return -1;
        }
        *(double *)field = v;
    }
    *c = out;
    return 0;
}

int msr_plan_cluster_format(const msr_plan_cluster_t *c, char *buf, size_t len)
{
    size_t at = 0;
    int total = 0;
    for (size_t k = 0; k < N_KEYS; k++) {
        const cluster_key_t *ck = &cluster_keys[k];
        const char *field = (const char *)c + ck->off;
        char *dst = at < len ? buf + at : NULL;
        size_t room = at < len ? len - at : 0;
        int n = ck->is_int ? snprintf(dst, room, "%s = %d\n", ck->name, *(const int *)field)
                           : snprintf(dst, room, "%s = %.6g\n", ck->name, *(const double *)field);
        if (n < 0)
            return n;
        total += n;
        at += (size_t)n;
    }
    return total;
}
