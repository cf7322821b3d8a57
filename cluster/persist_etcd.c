/* The coordinator's state in etcd: the records of the state file
 * (persist.c), each a value of its own. The snapshot is <prefix>/state, the
 * changes since it <prefix>/log/<number>, numbered in order. A save puts
 * one change, or when the log has grown past a few times the snapshot (or
 * after a failure, or at start), rewrites the snapshot and deletes the log
 * in one transaction. Its answers are released only once etcd has
 * acknowledged the write (etcd acknowledges what a majority of its members
 * have on disk). Every write is guarded by the job's leader key: a
 * coordinator that lost its lease (another node took over) writes nothing.
 * A bad change in the log (etcd writes each whole, so never a torn save) is
 * corruption: the coordinator refuses to start unless state_repair drops it
 * and the changes after it.
 *
 * When etcd cannot be reached, the job runs on: answers are released
 * without waiting, saves are tried again every second, and the first that
 * gets through writes a whole snapshot. Failover needs etcd meanwhile. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "cluster/coord_internal.h"
#include "rendezvous/etcd.h"

/* How long one save may wait for etcd, and how often a lost etcd is tried. */
#define SAVE_MS  3000
#define RETRY_MS 1000

static msr_status_t ensure_client(msr_coord_t *c)
{
    if (c->etcd)
        return MSR_OK;
    return msr_etcd_create(c->config.etcd_endpoints, &c->etcd);
}

void msr_coord_etcd_close(msr_coord_t *c)
{
    msr_etcd_destroy(c->etcd);
    c->etcd = NULL;
}

static void key_of(const msr_coord_t *c, const char *what, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%s", c->config.etcd_prefix ? c->config.etcd_prefix : "", what);
}

/* Writes ops guarded by the leader key; MSR_ERR_STALE when this coordinator
 * no longer holds it. */
static msr_status_t write_ops(msr_coord_t *c, const msr_etcd_op_t *ops, size_t n)
{
    char leader[600];
    key_of(c, "leader", leader, sizeof leader);
    int applied = 1;
    msr_status_t st =
        msr_etcd_txn(c->etcd, c->config.etcd_lease ? leader : NULL, c->config.etcd_lease, ops, n,
                     msr_deadline_in_ms(SAVE_MS), &applied);
    if (st == MSR_OK && !applied)
        st = msr_err(MSR_ERR_STALE, "this coordinator no longer holds the job's lease in etcd "
                                    "(another node runs the coordinator now)");
    return st;
}

msr_status_t msr_coord_etcd_save(msr_coord_t *c)
{
    msr_status_t st = ensure_client(c);
    uint64_t log_len = c->log_end - c->snapshot_len;
    uint64_t limit = (uint64_t)MSR_LOG_COMPACT_FACTOR * c->snapshot_len;
    if (limit < MSR_LOG_COMPACT_MIN)
        limit = MSR_LOG_COMPACT_MIN;
    int snapshot = c->log_end == 0 || c->need_snapshot || c->etcd_down || log_len >= limit;
    size_t len = 0;
    uint8_t *rec = NULL;
    if (st == MSR_OK) {
        rec = snapshot ? msr_coord_persist_snapshot_record(c, &len)
                       : msr_coord_persist_change_record(c, &len);
        if (rec == NULL)
            st = msr_err(MSR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == MSR_OK) {
        char state[600], log[640];
        key_of(c, "state", state, sizeof state);
        if (snapshot) {
            key_of(c, "log/", log, sizeof log);
            msr_etcd_op_t ops[2] = {{.key = state, .value = rec, .len = len},
                                    {.key = log, .prefix = 1}};
            st = write_ops(c, ops, 2);
        } else {
            char seq[32];
            snprintf(seq, sizeof seq, "log/%020" PRIu64, c->etcd_seq);
            key_of(c, seq, log, sizeof log);
            msr_etcd_op_t op = {.key = log, .value = rec, .len = len};
            st = write_ops(c, &op, 1);
        }
    }
    msr_free(rec);
    if (st == MSR_OK) {
        if (snapshot) {
            c->snapshot_len = len;
            c->log_end = len;
        } else {
            c->log_end += len;
            c->etcd_seq++;
        }
        if (c->etcd_down)
            MSR_INFO("etcd at %s answers again: the job's state is saved there",
                     msr_etcd_endpoint(c->etcd));
        c->etcd_down = 0;
        msr_coord_persist_saved(c);
        return MSR_OK;
    }
    /* Whatever reached etcd, the next save rewrites all of it. */
    c->need_snapshot = 1;
    c->dirty = 0;
    c->store_cleared = 0;
    msr_map_cleanup(&c->dirty_keys, NULL);
    if (st == MSR_ERR_UNREACHABLE) {
        /* etcd is away: the job runs on without it (no failover meanwhile) */
        if (!c->etcd_down)
            MSR_INFO("%s; running on without saving the state (no failover until it returns)",
                     msr_err_msg());
        c->etcd_down = 1;
        c->etcd_retry_at = msr_now_ns() + (uint64_t)RETRY_MS * 1000000u;
        return MSR_OK;
    }
    if (c->save_failures++ == 0)
        MSR_ERROR("the coordinator could not save its state in etcd: %s; the writes it carried "
                  "are failed",
                  msr_err_msg());
    return st;
}

typedef struct load_ctx {
    msr_coord_t *c;
    size_t n;          /* changes applied */
    uint64_t next_seq; /* the number the next change's key must have */
    char bad_key[640]; /* the first bad change's key; "" while none */
    char why[300];     /* what is wrong with it */
    size_t dropped;    /* changes from the bad one on */
} load_ctx_t;

/* Applies the log's changes in order up to the first bad one (failing its
 * CRC, not a valid change, or numbered out of sequence), and counts the
 * changes from it on. etcd writes each value whole, so a bad change is
 * corruption wherever it is, never a save cut short. */
static msr_status_t apply_log(const char *key, const uint8_t *value, size_t len, void *arg)
{
    load_ctx_t *l = arg;
    if (l->bad_key[0]) {
        l->dropped++;
        return MSR_OK;
    }
    const char *num = strrchr(key, '/');
    uint64_t seq = num ? strtoull(num + 1, NULL, 10) : 0;
    msr_status_t st = MSR_ERR_CORRUPT;
    if (l->n > 0 && seq != l->next_seq)
        msr_err_set("out of sequence (a change missing or repeated before it)");
    else
        st = msr_coord_persist_apply(l->c, value, len, 0);
    if (st == MSR_ERR_NO_MEMORY)
        return st;
    if (st != MSR_OK) {
        snprintf(l->bad_key, sizeof l->bad_key, "%s", key);
        snprintf(l->why, sizeof l->why, "%s", msr_err_msg());
        l->dropped = 1;
        return MSR_OK;
    }
    l->n++;
    l->next_seq = seq + 1;
    return MSR_OK;
}

/* After a bad change (l->dropped of them from it on): MSR_ERR_CORRUPT,
 * etcd left as it is, unless state_repair drops them (the first save then
 * writes a snapshot and deletes the log). Logged here. */
static msr_status_t log_bad(const msr_coord_t *c, const load_ctx_t *l)
{
    if (!c->config.state_repair) {
        MSR_ERROR("the job's state in etcd (%s) is corrupt: the change at key %s is %s, and %zu "
                  "changes follow it: acknowledged writes would be lost. It is left as it is; "
                  "--state_repair drops them",
                  c->config.etcd_prefix, l->bad_key, l->why, l->dropped - 1);
        return MSR_ERR_CORRUPT;
    }
    MSR_WARN("the job's state in etcd (%s): the change at key %s is %s; --state_repair: dropping "
             "%zu changes (that one and the %zu after it)",
             c->config.etcd_prefix, l->bad_key, l->why, l->dropped, l->dropped - 1);
    return MSR_OK;
}

msr_status_t msr_coord_etcd_load(msr_coord_t *c)
{
    msr_status_t st = ensure_client(c);
    if (st != MSR_OK) {
        MSR_ERROR("%s", msr_err_msg());
        return st;
    }
    char state[600], log[640];
    key_of(c, "state", state, sizeof state);
    key_of(c, "log/", log, sizeof log);
    msr_etcd_kv_t kv;
    st = msr_etcd_get(c->etcd, state, msr_deadline_in_ms(SAVE_MS), &kv);
    if (st != MSR_OK) {
        MSR_ERROR("cannot read the job's state from etcd: %s", msr_err_msg());
        return st;
    }
    if (!kv.found)
        return MSR_ERR_NOT_FOUND;
    st = msr_coord_persist_apply(c, kv.value, kv.len, 1);
    msr_etcd_kv_free(&kv);
    if (st != MSR_OK) {
        MSR_ERROR("the job's state in etcd (%s) is corrupt or of another version: %s", state,
                  msr_err_msg());
        return st == MSR_ERR_NO_MEMORY ? st : MSR_ERR_CORRUPT;
    }
    load_ctx_t l = {.c = c};
    st = msr_etcd_get_prefix(c->etcd, log, msr_deadline_in_ms(SAVE_MS), apply_log, &l);
    if (st == MSR_ERR_NO_MEMORY)
        return st;
    if (st != MSR_OK) {
        MSR_ERROR("cannot read the job's state log from etcd: %s", msr_err_msg());
        return st;
    }
    if (l.dropped && log_bad(c, &l) != MSR_OK)
        return MSR_ERR_CORRUPT;
    c->etcd_seq = l.next_seq;
    /* The first save writes a fresh snapshot and deletes the log. */
    c->need_snapshot = 1;
    c->dirty = 0;
    MSR_INFO("resumed job %s from etcd (%s): generation %d, %zu nodes, %zu keys, %zu changes "
             "replayed, restarts %d of %d",
             c->job_id, c->config.etcd_prefix, c->generation, c->nnodes,
             msr_store_core_keys(c->store), l.n, c->restart_count, c->max_restarts);
    return MSR_OK;
}
