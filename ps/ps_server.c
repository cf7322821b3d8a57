/* The parameter server's loop: a server rank answers its workers' pulls and
 * pushes and applies the optimizer to its shard (docs/ps.md). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "ps/ps_impl.h"

msr_status_t ps_table_alloc_shard(msr_ps_t *ps, ps_table_t *t)
{
    uint64_t S = (uint64_t)ps->servers, me = (uint64_t)ps->role_rank;
    uint64_t n = t->cfg.rows > me ? (t->cfg.rows - me + S - 1) / S : 0;
    size_t w = t->cfg.width;
    size_t cells = n ? n * w : 1;
    t->local_rows = n;
    t->w = msr_malloc(cells * sizeof *t->w);
    t->slot = msr_malloc((n ? n : 1) * sizeof *t->slot);
    t->clock = msr_calloc((size_t)ps->workers, sizeof *t->clock);
    t->base = msr_calloc((size_t)ps->workers, sizeof *t->base);
    int ok = t->w && t->slot && t->clock && t->base;
    if (ok && t->cfg.optim != MSR_PS_SGD)
        ok = (t->s1 = msr_calloc(cells, sizeof *t->s1)) != NULL;
    if (ok && t->cfg.optim == MSR_PS_ADAM)
        ok = (t->s2 = msr_calloc(cells, sizeof *t->s2)) != NULL &&
             (t->steps = msr_calloc(n ? n : 1, sizeof *t->steps)) != NULL;
    if (!ok) {
        ps_table_free_shard(t);
        return msr_err(MSR_ERR_NO_MEMORY, "msr_ps_table_create: no memory for %llu rows of %zu",
                       (unsigned long long)n, w);
    }
    for (uint64_t i = 0; i < n; i++)
        t->slot[i] = PS_NO_SLOT;
    for (uint64_t i = 0; i < n; i++)
        for (size_t c = 0; c < w; c++)
            t->w[i * w + c] =
                msr_ps_init_value(t->cfg.seed, i * S + me, (uint32_t)c, t->cfg.init_scale);
    return MSR_OK;
}

void ps_table_free_shard(ps_table_t *t)
{
    msr_free(t->w);
    msr_free(t->s1);
    msr_free(t->s2);
    msr_free(t->steps);
    msr_free(t->acc);
    msr_free(t->slot);
    msr_free(t->order);
    msr_free(t->clock);
    msr_free(t->base);
    t->base = NULL;
    t->w = t->s1 = t->s2 = NULL;
    t->steps = NULL;
    t->acc = NULL;
    t->slot = NULL;
    t->order = NULL;
    t->clock = NULL;
}

/* ---- the optimizer, on one local row with gradient g (width floats) ---- */

static void apply_row(ps_table_t *t, uint64_t i, const double *g)
{
    const msr_ps_table_config_t *c = &t->cfg;
    size_t w = c->width;
    float *p = t->w + i * w;
    switch (c->optim) {
    case MSR_PS_SGD:
        for (size_t k = 0; k < w; k++)
            p[k] = (float)(p[k] - c->lr * g[k]);
        break;
    case MSR_PS_ADAGRAD: {
        float *h = t->s1 + i * w;
        for (size_t k = 0; k < w; k++) {
            h[k] = (float)(h[k] + g[k] * g[k]);
            p[k] = (float)(p[k] - c->lr * g[k] / (sqrt((double)h[k]) + c->eps));
        }
        break;
    }
    case MSR_PS_ADAM: {
        float *m = t->s1 + i * w, *v = t->s2 + i * w;
        uint32_t step = ++t->steps[i]; /* lazy: this row's own step count */
        double b1 = c->beta1, b2 = c->beta2;
        double c1 = 1.0 - pow(b1, step), c2 = 1.0 - pow(b2, step);
        for (size_t k = 0; k < w; k++) {
            m[k] = (float)(b1 * m[k] + (1.0 - b1) * g[k]);
            v[k] = (float)(b2 * v[k] + (1.0 - b2) * g[k] * g[k]);
            double mh = m[k] / c1, vh = v[k] / c2;
            p[k] = (float)(p[k] - c->lr * mh / (sqrt(vh) + c->eps));
        }
        break;
    }
    }
}

/* Applies the summed gradients of the touched rows, divided by divisor
 * (the number of workers; in a synchronous step, of the workers that
 * pushed in it), and clears them. */
static void apply_step(ps_table_t *t, int divisor)
{
    size_t w = t->cfg.width;
    for (uint64_t j = 0; j < t->ntouched; j++) {
        uint64_t i = t->order[j];
        double *g = t->acc + j * w;
        for (size_t k = 0; k < w; k++)
            g[k] /= divisor;
        apply_row(t, i, g);
        t->slot[i] = PS_NO_SLOT;
    }
    t->ntouched = 0;
}

/* ---- requests ---- */

/* Why the server refuses req with these keys (MSR_OK: it does not), the
 * reason in msg. */
static msr_status_t check_request(msr_ps_t *ps, const ps_req_t *req, const int64_t *keys, char *msg)
{
    if (req->table < 0 || req->table >= ps->ntables) {
        snprintf(msg, PS_MSG_MAX, "unknown table %lld (%d tables)", (long long)req->table,
                 ps->ntables);
        return MSR_ERR_INVALID_ARG;
    }
    const ps_table_t *t = &ps->tables[req->table];
    if (req->width != (int64_t)t->cfg.width) {
        snprintf(msg, PS_MSG_MAX, "table %lld has rows of width %u, not %lld",
                 (long long)req->table, t->cfg.width, (long long)req->width);
        return MSR_ERR_INVALID_ARG;
    }
    for (int64_t i = 0; i < req->nkeys; i++)
        if (keys[i] < 0 || (uint64_t)keys[i] >= t->cfg.rows ||
            keys[i] % ps->servers != ps->role_rank) {
            snprintf(msg, PS_MSG_MAX, "key %lld out of range of table %lld (%llu rows)%s",
                     (long long)keys[i], (long long)req->table, (unsigned long long)t->cfg.rows,
                     keys[i] >= 0 && (uint64_t)keys[i] < t->cfg.rows ? " or not this server's"
                                                                     : "");
            return MSR_ERR_INVALID_ARG;
        }
    return MSR_OK;
}

static msr_status_t send_rep(msr_ps_t *ps, int worker, msr_status_t status, const char *msg)
{
    ps_rep_t rep;
    memset(&rep, 0, sizeof rep);
    rep.status = status;
    if (msg)
        snprintf(rep.msg, sizeof rep.msg, "%s", msg);
    ps->sent += sizeof rep;
    int peer;
    msr_comm_t *c = ps_link(ps, worker, &peer);
    return msr_comm_send(c, &rep, sizeof rep, MSR_DTYPE_U8, peer, PS_TAG_REP);
}

/* Answers a pull: its status, then its rows (zeros when refused). */
static msr_status_t answer_pull(msr_ps_t *ps, int worker, const ps_req_t *req, const int64_t *keys,
                                msr_status_t status, const char *msg)
{
    msr_status_t st = send_rep(ps, worker, status, msg);
    if (st != MSR_OK || req->nkeys == 0)
        return st;
    size_t w = (size_t)req->width, n = (size_t)req->nkeys;
    float *rows = msr_calloc(n * w, sizeof *rows);
    if (rows == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "parameter server: no memory for a pull of %zu rows", n);
    if (status == MSR_OK) {
        const ps_table_t *t = &ps->tables[req->table];
        for (size_t i = 0; i < n; i++)
            memcpy(rows + i * w, t->w + (uint64_t)keys[i] / ps->servers * w, w * sizeof *rows);
    }
    ps->sent += n * w * sizeof *rows;
    int peer;
    msr_comm_t *c = ps_link(ps, worker, &peer);
    st = msr_comm_send(c, rows, n * w, MSR_DTYPE_F32, peer, PS_TAG_ROWS);
    msr_free(rows);
    return st;
}

/* A pull may be answered once every worker has pushed the table at least
 * (its pushes - staleness) times; synchronous pushes return only once their
 * step is applied, so there a pull never waits. */
static int pull_ready(const msr_ps_t *ps, const ps_req_t *req)
{
    if (ps->staleness == MSR_PS_SYNC || req->table < 0 || req->table >= ps->ntables)
        return 1;
    const ps_table_t *t = &ps->tables[req->table];
    for (int w = 0; w < ps->workers; w++)
        if (t->clock[w] < req->clock - ps->staleness)
            return 0;
    return 1;
}

static msr_status_t hold(ps_loop_t *l, int worker, const ps_req_t *req, int64_t *keys,
                         msr_status_t status, const char *msg)
{
    if (l->nheld == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        ps_held_t *h = msr_realloc_array(l->held, cap, sizeof *h);
        if (h == NULL)
            return msr_err(MSR_ERR_NO_MEMORY, "parameter server: out of memory");
        l->held = h;
        l->cap = cap;
    }
    ps_held_t *h = &l->held[l->nheld++];
    h->worker = worker;
    h->req = *req;
    h->keys = keys;
    h->status = status;
    snprintf(h->msg, sizeof h->msg, "%s", msg ? msg : "");
    return MSR_OK;
}

/* Adds a push's gradients to its table's sums (duplicate keys add up);
 * MSR_ERR_NO_MEMORY when the sums cannot grow (nothing added then). */
static msr_status_t accumulate(msr_ps_t *ps, ps_table_t *t, const int64_t *keys, const float *g,
                               int64_t n)
{
    size_t w = t->cfg.width;
    if (t->ntouched + (uint64_t)n > t->cap) { /* room for every key new */
        uint64_t cap = t->cap ? t->cap : 64;
        while (cap < t->ntouched + (uint64_t)n)
            cap *= 2;
        double *acc = msr_realloc_array(t->acc, cap * w, sizeof *acc);
        if (acc != NULL)
            t->acc = acc;
        uint64_t *order = msr_realloc_array(t->order, cap, sizeof *order);
        if (order != NULL)
            t->order = order;
        if (acc == NULL || order == NULL || cap >= PS_NO_SLOT)
            return msr_err(MSR_ERR_NO_MEMORY, "parameter server: no memory to sum %llu rows",
                           (unsigned long long)cap);
        t->cap = cap;
    }
    for (int64_t j = 0; j < n; j++) {
        uint64_t i = (uint64_t)keys[j] / ps->servers;
        if (t->slot[i] == PS_NO_SLOT) {
            t->slot[i] = (uint32_t)t->ntouched;
            t->order[t->ntouched] = i;
            memset(t->acc + t->ntouched * w, 0, w * sizeof *t->acc);
            t->ntouched++;
        }
        double *sum = t->acc + (size_t)t->slot[i] * w;
        for (size_t k = 0; k < w; k++)
            sum[k] += g[j * w + k];
    }
    return MSR_OK;
}

msr_status_t ps_apply_push(msr_ps_t *ps, ps_table_t *t, const int64_t *keys, const float *g,
                           int64_t n)
{
    msr_status_t st = accumulate(ps, t, keys, g, n);
    if (st == MSR_OK)
        apply_step(t, ps->workers);
    return st;
}

msr_status_t ps_apply_sums(msr_ps_t *ps, ps_table_t *t, const int64_t *keys, const double *sums,
                           int64_t n, int divisor)
{
    size_t w = t->cfg.width;
    double *g = msr_malloc(w * sizeof *g);
    if (g == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "parameter server: out of memory");
    for (int64_t j = 0; j < n; j++) { /* as apply_step */
        for (size_t k = 0; k < w; k++)
            g[k] = sums[(size_t)j * w + k] / divisor;
        apply_row(t, (uint64_t)keys[j] / ps->servers, g);
    }
    msr_free(g);
    return MSR_OK;
}

/* Synchronous: once every worker still there has pushed table ti this
 * step, applies the step (durable: logged first) and answers its held
 * pushes. */
static msr_status_t end_round(msr_ps_t *ps, ps_loop_t *l, int ti)
{
    ps_table_t *t = &ps->tables[ti];
    if (t->round_pushes == 0 || t->round_pushes < ps->workers - l->ndone)
        return MSR_OK;
    msr_status_t st = MSR_OK;
    if (ps->durable && t->ntouched > 0 &&
        (st = ps_durable_log_step(ps, ti, t->round_pushes)) != MSR_OK)
        return st;
    apply_step(t, t->round_pushes);
    t->round_pushes = 0;
    if (ps->durable && (st = ps_durable_ckpt_due(ps)) != MSR_OK)
        return st;
    size_t keep = 0;
    for (size_t i = 0; i < l->nheld; i++) {
        ps_held_t *h = &l->held[i];
        if (st == MSR_OK && h->req.op == PS_OP_PUSH && h->req.table == ti)
            st = send_rep(ps, h->worker, h->status, h->msg);
        else
            l->held[keep++] = *h;
    }
    l->nheld = keep;
    return st;
}

/* A push: counted; applied now (asynchronous) or with the step's last push
 * (synchronous: every held push of the step is answered then). */
static msr_status_t on_push(msr_ps_t *ps, ps_loop_t *l, int worker, const ps_req_t *req,
                            const int64_t *keys, const float *g, msr_status_t status,
                            const char *msg)
{
    ps_table_t *t = req->table >= 0 && req->table < ps->ntables ? &ps->tables[req->table] : NULL;
    if (t && status == MSR_OK) {
        msr_status_t st = accumulate(ps, t, keys, g, req->nkeys);
        if (st != MSR_OK)
            return st;
    }
    if (t)
        t->clock[worker]++;
    if (t == NULL || ps->staleness != MSR_PS_SYNC) {
        if (t)
            apply_step(t, ps->workers);
        /* durable: logged before it is acknowledged (ps_durable.c) */
        if (t && status == MSR_OK && ps->durable && req->nkeys > 0) {
            msr_status_t st = ps_durable_log(ps, req, keys, g);
            if (st == MSR_OK)
                st = ps_durable_ckpt_due(ps);
            if (st != MSR_OK)
                return st;
        }
        return send_rep(ps, worker, status, msg);
    }
    msr_status_t st = hold(l, worker, req, NULL, status, msg);
    t->round_pushes++;
    return st == MSR_OK ? end_round(ps, l, (int)req->table) : st;
}

/* Answers the held pulls that the pushes so far let through. */
static msr_status_t release_pulls(msr_ps_t *ps, ps_loop_t *l)
{
    size_t keep = 0;
    msr_status_t st = MSR_OK;
    for (size_t i = 0; i < l->nheld; i++) {
        ps_held_t *h = &l->held[i];
        if (st == MSR_OK && h->req.op == PS_OP_PULL && pull_ready(ps, &h->req)) {
            st = answer_pull(ps, h->worker, &h->req, h->keys, MSR_OK, NULL);
            msr_free(h->keys);
        } else {
            l->held[keep++] = *h;
        }
    }
    l->nheld = keep;
    return st;
}

/* A worker is done: it bounds nobody's staleness and no synchronous step
 * waits for it any more (the steps it left are applied with the others'
 * pushes), then its goodbye is answered. */
static msr_status_t on_fin(msr_ps_t *ps, ps_loop_t *l, int worker)
{
    l->done[worker] = 1;
    l->ndone++;
    msr_status_t st = MSR_OK;
    for (int i = 0; i < ps->ntables; i++)
        ps->tables[i].clock[worker] = INT64_MAX;
    for (int i = 0; i < ps->ntables && st == MSR_OK && ps->staleness == MSR_PS_SYNC; i++)
        st = end_round(ps, l, i);
    if (st == MSR_OK)
        st = release_pulls(ps, l);
    return st == MSR_OK ? send_rep(ps, worker, MSR_OK, NULL) : st;
}

/* Receives the rest of worker's request (its header is in l->hdr) and
 * answers or holds it. */
static msr_status_t on_request(msr_ps_t *ps, ps_loop_t *l, int worker)
{
    ps_req_t req = l->hdr[worker];
    char msg[PS_MSG_MAX] = "";
    if (req.op == PS_OP_FIN)
        return on_fin(ps, l, worker);
    if (req.table >= 0 && req.table < ps->ntables) /* a replacement's clock: past its join */
        req.clock += ps->tables[req.table].base[worker];
    if ((req.op != PS_OP_PULL && req.op != PS_OP_PUSH) || req.nkeys < 0 || req.width <= 0 ||
        req.width > MSR_PS_WIDTH_MAX || req.nkeys > PS_CALL_ELEMS_MAX / req.width)
        return msr_err(MSR_ERR_PROTOCOL, "parameter server: malformed request from worker %d",
                       worker);
    size_t n = (size_t)req.nkeys, w = (size_t)req.width;
    int64_t *keys = msr_calloc(n ? n : 1, sizeof *keys);
    float *g = req.op == PS_OP_PUSH ? msr_calloc(n ? n * w : 1, sizeof *g) : NULL;
    if (keys == NULL || (req.op == PS_OP_PUSH && g == NULL)) {
        msr_free(keys);
        msr_free(g);
        return msr_err(MSR_ERR_NO_MEMORY, "parameter server: no memory for %zu keys", n);
    }
    msr_status_t st = MSR_OK;
    int peer;
    msr_comm_t *c = ps_link(ps, worker, &peer);
    if (n > 0)
        st = msr_comm_recv(c, keys, n, MSR_DTYPE_I64, peer, PS_TAG_KEYS);
    if (st == MSR_OK && g && n > 0)
        st = msr_comm_recv(c, g, n * w, MSR_DTYPE_F32, peer, PS_TAG_VALS);
    ps->received += sizeof req + n * sizeof *keys + (g ? n * w * sizeof *g : 0);
    if (st != MSR_OK)
        goto out;
    msr_status_t verdict = check_request(ps, &req, keys, msg);
    if (req.op == PS_OP_PUSH) {
        st = on_push(ps, l, worker, &req, keys, g, verdict, msg);
        if (st == MSR_OK)
            st = release_pulls(ps, l);
    } else if (verdict != MSR_OK || pull_ready(ps, &req)) {
        st = answer_pull(ps, worker, &req, keys, verdict, msg);
    } else if ((st = hold(l, worker, &req, keys, MSR_OK, NULL)) == MSR_OK) {
        keys = NULL; /* the held pull's now */
    }
out:
    msr_free(keys);
    msr_free(g);
    return st;
}

void ps_loop_free(ps_loop_t *l)
{
    for (size_t i = 0; i < l->nheld; i++)
        msr_free(l->held[i].keys);
    msr_free(l->held);
    msr_free(l->hdr);
    msr_free(l->recv);
    msr_free(l->done);
}

/* Asynchronous: a worker gone without its goodbye (killed, crashed) is
 * taken as left, as on_fin does, and the others go on: it bounds nobody's
 * staleness, its held pulls are dropped, and what it sent before is kept
 * (a push applied but not acknowledged stays applied). */
msr_status_t ps_on_lost(msr_ps_t *ps, ps_loop_t *l, int worker)
{
    l->done[worker] = 1;
    l->ndone++;
    if (l->recv[worker]) /* failed with its communicator: freed here */
        (void)msr_comm_test(&l->recv[worker]);
    for (int i = 0; i < ps->ntables; i++)
        ps->tables[i].clock[worker] = INT64_MAX;
    size_t keep = 0;
    for (size_t i = 0; i < l->nheld; i++) {
        if (l->held[i].worker == worker)
            msr_free(l->held[i].keys);
        else
            l->held[keep++] = l->held[i];
    }
    l->nheld = keep;
    MSR_WARN("parameter server %d: worker %d lost without a goodbye; going on with the %d left",
             ps->role_rank, worker, ps->workers - l->ndone);
    return release_pulls(ps, l);
}

/* After st failed the loop: asynchronous, every worker whose link broke
 * with a lost peer (the worker: its link has no other member) is taken as
 * lost and the loop goes on (MSR_OK); any other failure is st. */
static msr_status_t take_losses(msr_ps_t *ps, ps_loop_t *l, msr_status_t st)
{
    if (ps->links == NULL || st != MSR_ERR_PEER_LOST)
        return st;
    int found = 0;
    for (int w = 0; w < ps->workers; w++)
        if (!l->done[w] && msr_comm_status(ps->links[w]) == MSR_ERR_PEER_LOST) {
            found = 1;
            msr_status_t lst = ps_on_lost(ps, l, w);
            if (lst != MSR_OK)
                return take_losses(ps, l, lst); /* a release to another lost one */
        }
    return found ? MSR_OK : st;
}

/* Polls every worker's header receive once; *busy_p is set when one came. */
static msr_status_t poll_workers(msr_ps_t *ps, ps_loop_t *l, int *busy_p)
{
    for (int w = 0; w < ps->workers; w++) {
        if (l->done[w])
            continue;
        msr_status_t st = MSR_OK;
        int peer;
        msr_comm_t *c = ps_link(ps, w, &peer);
        if (l->recv[w] == NULL)
            st = msr_comm_irecv(c, &l->hdr[w], sizeof l->hdr[w], MSR_DTYPE_U8, peer, PS_TAG_REQ,
                                &l->recv[w]);
        if (st == MSR_OK)
            st = msr_comm_test(&l->recv[w]);
        if (st == MSR_IN_PROGRESS)
            continue;
        *busy_p = 1;
        if (st == MSR_OK)
            st = on_request(ps, l, w);
        if (st != MSR_OK && (st = take_losses(ps, l, st)) != MSR_OK)
            return st;
    }
    return MSR_OK;
}

/* The longest pause of an idle server between two polls of its workers:
 * the most a request waits on a quiet server before it is looked at. */
#define PS_IDLE_MAX_NS 200000L

msr_status_t msr_ps_serve(msr_ps_t *ps)
{
    if (ps == NULL || ps->role != MSR_PS_SERVER)
        return msr_err(MSR_ERR_STATE, "msr_ps_serve: not a server");
    ps_loop_t l;
    memset(&l, 0, sizeof l);
    l.hdr = msr_calloc((size_t)ps->workers, sizeof *l.hdr);
    l.recv = msr_calloc((size_t)ps->workers, sizeof *l.recv);
    l.done = msr_calloc((size_t)ps->workers, sizeof *l.done);
    if (!l.hdr || !l.recv || !l.done) {
        ps_loop_free(&l);
        return msr_err(MSR_ERR_NO_MEMORY, "msr_ps_serve: out of memory");
    }
    ps->serving = 1;
    msr_status_t st = MSR_OK;
    long idle_ns = 0;
    while (st == MSR_OK && l.ndone < ps->workers) {
        int busy = 0;
        st = poll_workers(ps, &l, &busy);
        if (st == MSR_OK && ps->ctx && ps->links)
            st = ps_take_joins(ps, &l);
        /* nothing came: back off, doubling from 1 us up to PS_IDLE_MAX_NS,
         * so that servers sharing cores with workers leave them the CPU */
        idle_ns =
            busy ? 0
                 : (idle_ns ? (idle_ns * 2 > PS_IDLE_MAX_NS ? PS_IDLE_MAX_NS : idle_ns * 2) : 1000);
        if (!busy && st == MSR_OK)
            nanosleep(&(struct timespec){0, idle_ns}, NULL);
    }
    if (st == MSR_OK && l.nheld > 0)
        st = msr_err(MSR_ERR_STATE,
                     "msr_ps_serve: %zu requests still held when the last "
                     "worker left",
                     l.nheld);
    if (st != MSR_OK)
        ps->broken = st;
    ps->serving = 0;
    int posted = 0;
    for (int w = 0; w < ps->workers; w++)
        posted |= l.recv[w] != NULL;
    if (!posted) {
        ps_loop_free(&l);
        return st;
    }
    /* receives still posted (only after a failure) end with the
     * communicator: msr_ps_destroy finishes them, then frees their buffers */
    ps->left = msr_malloc(sizeof l);
    if (ps->left)
        *ps->left = l;
    return st;
}
