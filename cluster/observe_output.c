/* A rank's last output lines for /api/output (docs/observe.md): asked of
 * the node that holds the rank with its held heartbeat, kept for a few
 * ranks at a time, rendered as JSON. Part of the core: the core's thread
 * only. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/time.h"
#include "cluster/coord_internal.h"

/* A JSON string of bytes that may be anything: UTF-8 sequences as they are,
 * control characters escaped, every byte that is not part of a valid
 * sequence as U+FFFD (so the answer is valid UTF-8 JSON whatever a program
 * printed). */
static void json_bytes(msr_buf_t *b, const uint8_t *s, size_t len)
{
    msr_buf_append(b, "\"", 1);
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        size_t n = c < 0x80             ? 1
                   : (c & 0xe0) == 0xc0 ? 2
                   : (c & 0xf0) == 0xe0 ? 3
                   : (c & 0xf8) == 0xf0 ? 4
                                        : 0;
        int ok = n > 0 && i + n <= len;
        for (size_t k = 1; ok && k < n; k++)
            ok = (s[i + k] & 0xc0) == 0x80;
        if (ok && n > 1) { /* no overlong forms, surrogates or code points past U+10FFFF */
            uint32_t cp = c & (0x7f >> n);
            for (size_t k = 1; k < n; k++)
                cp = cp << 6 | (s[i + k] & 0x3f);
            ok = !(n == 2 && cp < 0x80) && !(n == 3 && cp < 0x800) &&
                 !(n == 4 && (cp < 0x10000 || cp > 0x10ffff)) && !(cp >= 0xd800 && cp <= 0xdfff);
        }
        if (!ok) {
            msr_buf_append(b, "\\ufffd", 6);
            i++;
        } else if (n == 1) {
            if (c == '"' || c == '\\')
                msr_buf_printf(b, "\\%c", c);
            else if (c < 0x20 || c == 0x7f)
                msr_buf_printf(b, "\\u%04x", c);
            else
                msr_buf_append(b, (const char *)s + i, 1);
            i++;
        } else {
            msr_buf_append(b, (const char *)s + i, n);
            i += n;
        }
    }
    msr_buf_append(b, "\"", 1);
}

/* The node that holds rank in the running generation (alive), or NULL. */
static node_t *node_of_rank(const msr_coord_t *c, int rank)
{
    if (c->local_worker_num <= 0)
        return NULL;
    int node_rank = rank / c->local_worker_num;
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i]->alive && c->nodes[i]->rank == node_rank)
            return c->nodes[i];
    return NULL;
}

/* Frees the record kept longest without an ask pending, to make room. */
static void out_evict(msr_obs_t *o)
{
    size_t victim = o->nouts;
    for (size_t i = 0; i < o->nouts; i++) {
        rank_out_t *r = o->outs[i];
        if (r && !r->asked && (victim == o->nouts || r->got < o->outs[victim]->got))
            victim = i;
    }
    if (victim == o->nouts)
        return;
    msr_buf_cleanup(&o->outs[victim]->lines);
    msr_free(o->outs[victim]);
    o->outs[victim] = NULL;
    o->outs_kept--;
}

/* rank's record, made if needed (NULL when out of memory or, all records
 * having an ask pending, out of room). */
static rank_out_t *out_get(msr_coord_t *c, int rank)
{
    msr_obs_t *o = &c->obs;
    if ((size_t)rank >= o->nouts) {
        size_t n = o->nouts ? o->nouts : 8;
        while (n <= (size_t)rank)
            n *= 2;
        rank_out_t **outs = msr_realloc(o->outs, n * sizeof *outs);
        if (outs == NULL)
            return NULL;
        memset(outs + o->nouts, 0, (n - o->nouts) * sizeof *outs);
        o->outs = outs;
        o->nouts = n;
    }
    if (o->outs[rank] == NULL) {
        if (o->outs_kept >= MSR_OUTPUT_KEPT_MAX)
            out_evict(o);
        if (o->outs_kept >= MSR_OUTPUT_KEPT_MAX)
            return NULL;
        if ((o->outs[rank] = msr_calloc(1, sizeof *o->outs[rank])) == NULL)
            return NULL;
        o->outs[rank]->node_rank = -1;
        o->outs_kept++;
    }
    return o->outs[rank];
}

static void ask_done(msr_obs_t *o, rank_out_t *r)
{
    if (r->asked) {
        r->asked = 0;
        o->asks--;
    }
}

/* The records of node n's ranks (those of its place in the running
 * generation: an ask is made of the node that holds the rank) into
 * [*lo, *hi). */
static void node_ranks(const msr_coord_t *c, const node_t *n, size_t *lo, size_t *hi)
{
    *lo = *hi = 0;
    if (n->rank < 0 || c->local_worker_num <= 0)
        return;
    *lo = (size_t)n->rank * (size_t)c->local_worker_num;
    *hi = *lo + (size_t)c->local_worker_num;
    if (*hi > c->obs.nouts)
        *hi = c->obs.nouts;
}

int msr_coord_output_unsent(const msr_coord_t *c, const node_t *n)
{
    const msr_obs_t *o = &c->obs;
    if (o->asks == 0)
        return 0; /* nobody asks: costs nothing */
    size_t lo, hi;
    node_ranks(c, n, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        const rank_out_t *r = o->outs[i];
        if (r && r->asked && !r->sent && strcmp(r->ask_node, n->id) == 0)
            return 1;
    }
    return 0;
}

size_t msr_coord_output_ranks(msr_coord_t *c, const node_t *n, int32_t *ranks, size_t max)
{
    msr_obs_t *o = &c->obs;
    if (o->asks == 0)
        return 0;
    size_t lo, hi, k = 0;
    node_ranks(c, n, &lo, &hi);
    for (size_t i = lo; i < hi && k < max; i++) {
        rank_out_t *r = o->outs[i];
        if (r && r->asked && !r->sent && strcmp(r->ask_node, n->id) == 0) {
            r->sent = 1;
            ranks[k++] = (int32_t)i;
        }
    }
    return k;
}

void msr_coord_output_take(msr_coord_t *c, const node_t *n, const Msr__HeartbeatRequest *req)
{
    msr_obs_t *o = &c->obs;
    uint64_t now = msr_now_ns();
    for (size_t i = 0; i < req->n_outputs; i++) {
        const Msr__RankOutput *m = req->outputs[i];
        if (m->rank < 0 || (size_t)m->rank >= o->nouts || o->outs[m->rank] == NULL)
            continue; /* nobody asked */
        rank_out_t *r = o->outs[m->rank];
        if (!r->asked || !r->sent || strcmp(r->ask_node, n->id) != 0)
            continue; /* not asked of this node */
        msr_buf_clear(&r->lines);
        msr_buf_append(&r->lines, "[", 1);
        size_t bytes = 0, first = m->n_lines > MSR_OUTPUT_LINES ? m->n_lines - MSR_OUTPUT_LINES : 0;
        for (size_t k = first; k < m->n_lines; k++) {
            size_t len =
                m->lines[k].len < MSR_OUTPUT_LINE_MAX ? m->lines[k].len : MSR_OUTPUT_LINE_MAX;
            if (bytes + len > MSR_OUTPUT_BYTES)
                break;
            bytes += len;
            if (k > first)
                msr_buf_append(&r->lines, ",", 1);
            json_bytes(&r->lines, m->lines[k].data, len);
        }
        msr_buf_append(&r->lines, "]", 1);
        r->got = now;
        r->time = m->time;
        r->total_lines = m->total_lines;
        r->node_rank = n->rank;
        snprintf(r->host, sizeof r->host, "%s", n->host ? n->host : "");
    }
}

/* The lines known, with how old they are and, when stale, why. */
static void output_json(msr_buf_t *b, int rank, const rank_out_t *r, uint64_t now,
                        const char *stale)
{
    msr_buf_printf(b, "{\"rank\":%d,\"node\":%d,\"host\":", rank, r->node_rank);
    msr_buf_json_string(b, r->host, strlen(r->host));
    if (r->got) {
        msr_buf_printf(b, ",\"time\":%.3f,\"age_s\":%.3f,\"total_lines\":%llu,\"lines\":", r->time,
                       (double)(now - r->got) / 1e9, (unsigned long long)r->total_lines);
        msr_buf_append(b, r->lines.data, r->lines.len);
    } else {
        msr_buf_printf(b, ",\"time\":null,\"age_s\":null,\"total_lines\":0,\"lines\":[]");
    }
    if (stale) {
        msr_buf_printf(b, ",\"stale\":");
        msr_buf_json_string(b, stale, strlen(stale));
    }
    msr_buf_printf(b, "}\n");
}

int msr_coord_render_output(msr_coord_t *c, int rank, uint64_t now, msr_buf_t *b)
{
    msr_obs_t *o = &c->obs;
    int world = c->node_count * c->local_worker_num;
    if (rank < 0 || rank >= world) {
        msr_buf_printf(b, "{\"error\":\"no rank %d in this job (world size %d)\"}\n", rank, world);
        return 404;
    }
    rank_out_t *r = out_get(c, rank);
    if (r == NULL) {
        msr_buf_printf(b, "{\"error\":\"too many ranks' output asked for at once (%d)\"}\n",
                       MSR_OUTPUT_KEPT_MAX);
        return 503;
    }
    if (r->asked && r->got >= r->asked) { /* arrived */
        ask_done(o, r);
        output_json(b, rank, r, now, NULL);
        return 200;
    }
    node_t *n = node_of_rank(c, rank);
    if (n == NULL || (r->asked && strcmp(r->ask_node, n->id) != 0)) {
        char why[96];
        snprintf(why, sizeof why, "node %d of rank %d is gone", rank / c->local_worker_num, rank);
        ask_done(o, r);
        output_json(b, rank, r, now, why);
        return 200;
    }
    if (r->asked && now - r->asked > (uint64_t)MSR_OUTPUT_WAIT_MS * 1000000ull) {
        char why[96];
        snprintf(why, sizeof why, "node %d did not send the lines within %d s", n->rank,
                 MSR_OUTPUT_WAIT_MS / 1000);
        ask_done(o, r);
        output_json(b, rank, r, now, why);
        return 200;
    }
    if (!r->asked) {
        if (o->asks >= MSR_OUTPUT_ASKS_MAX) {
            msr_buf_printf(b, "{\"error\":\"too many ranks' output asked for at once (%d)\"}\n",
                           MSR_OUTPUT_ASKS_MAX);
            return 503;
        }
        r->asked = now ? now : 1;
        r->sent = 0;
        snprintf(r->ask_node, sizeof r->ask_node, "%s", n->id);
        o->asks++;
        msr_coord_wake_node(c, n); /* its held heartbeat carries the ask */
    }
    msr_buf_printf(b, "{\"rank\":%d,\"node\":%d,\"pending\":true,\"asked_s\":%.3f}\n", rank,
                   n->rank, (double)(now - r->asked) / 1e9);
    return 202;
}
