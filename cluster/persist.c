/* The coordinator's state file: a snapshot of the job (members, generation,
 * restart count, failure and failure history, store, recent writes' answers) followed by a log
 * of changes, each a framed record with its length, sequence number and CRCs. A save appends
 * what changed since the last one and fdatasyncs it (unless the config's
 * state_sync_process says the kernel is far enough); once the log has grown
 * past a few times the snapshot, the snapshot is rewritten atomically
 * (temporary file, fsync, rename, fsync of the directory). A coordinator
 * restarted on the same file reads the snapshot and replays the log. A
 * record torn or failing a CRC with nothing whole after it is a save cut
 * short by a crash, and is cut off; any other bad record (out of sequence,
 * not parsing, or with a whole record anywhere after it) is corruption: the
 * file is refused and left untouched, unless state_repair says to cut it
 * there. Waits in progress (barriers, allgathers, long polls) are not
 * kept: their clients retry.
 *
 * Layout (integers little-endian):
 *   "MSRSTAT3"                        8 bytes
 *   record: u32 length, u32 sequence number (the snapshot 0, then 1, 2, ...),
 *           u32 CRC-32 of the payload, u32 CRC-32 of the 12 bytes before,
 *           payload
 *   the first record's payload is a PersistedState, the others'
 *   PersistedChange (rendezvous/msrun.proto). The header's own CRC lets a
 *   reader find whole records after a bad one in one pass; the sequence
 *   number tells records swapped, dropped or repeated.
 * Files of the format before ("MSRSTAT2", records of u32 length and u32
 * CRC-32 of the payload) are read, and rewritten at the first save; etcd's
 * values (persist_etcd.c) are records of that older frame. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/crc32.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/coord_internal.h"

#define MAGIC      "MSRSTAT3"
#define MAGIC_V2   "MSRSTAT2"
#define MAGIC_LEN  8
#define FRAME_LEN  8          /* "MSRSTAT2" files and etcd values: length, CRC */
#define FRAME3_LEN 16         /* length, sequence number, payload CRC, header CRC */
#define RECORD_MAX (1u << 30) /* a longer record is corrupt */
#define FILE_MAX   (1ull << 32)
#define NODES_MAX  (1u << 20) /* members ever seen: joins are bounded by the job */
#define GEN_MAX    (1 << 30)

static const char *state_path(const msr_coord_t *c)
{
    const char *p = c->config.state_file;
    return p && *p ? p : NULL;
}

static int use_etcd(const msr_coord_t *c)
{
    return c->config.etcd_endpoints && *c->config.etcd_endpoints;
}

int msr_coord_persisting(const msr_coord_t *c)
{
    return state_path(c) != NULL || use_etcd(c);
}

int msr_coord_persist_pending(const msr_coord_t *c)
{
    if (!msr_coord_persisting(c))
        return 0;
    if (c->etcd_down) /* nothing waits for etcd while it is away; retried now and then */
        return msr_now_ns() >= c->etcd_retry_at;
    return c->dirty || c->dirty_keys.count || c->store_cleared || c->new_requests ||
           c->need_snapshot;
}

void msr_coord_persist_close(msr_coord_t *c)
{
    if (c->log_fd >= 0)
        close(c->log_fd);
    c->log_fd = -1;
    msr_coord_etcd_close(c);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Packs msg as one framed record after prefix bytes of room: the state
 * file's frame with sequence number seq, or for seq < 0 the older one (etcd's
 * values); *len_p gets the whole length. NULL when out of memory. */
static uint8_t *frame(const ProtobufCMessage *msg, size_t prefix, int64_t seq, size_t *len_p)
{
    size_t plen = protobuf_c_message_get_packed_size(msg);
    size_t hlen = seq < 0 ? FRAME_LEN : FRAME3_LEN;
    if (plen > RECORD_MAX)
        return NULL;
    uint8_t *buf = msr_malloc(prefix + hlen + plen);
    if (buf == NULL)
        return NULL;
    uint8_t *h = buf + prefix, *payload = h + hlen;
    protobuf_c_message_pack(msg, payload);
    put_u32(h, (uint32_t)plen);
    if (seq < 0) {
        put_u32(h + 4, msr_crc32(0, payload, plen));
    } else {
        put_u32(h + 4, (uint32_t)seq);
        put_u32(h + 8, msr_crc32(0, payload, plen));
        put_u32(h + 12, msr_crc32(0, h, 12));
    }
    *len_p = prefix + hlen + plen;
    return buf;
}

/* ---- building records ---- */

/* The job's part of a PersistedState, pointing into c (valid until c
 * changes); job_free releases what it allocated. */
typedef struct job_msg {
    Msr__Failure failure;
    Msr__Failure history[MSR_FAILURE_HISTORY];
    Msr__Failure *hptrs[MSR_FAILURE_HISTORY];
    Msr__PersistedNode *nodes;
    Msr__PersistedNode **nptrs;
    int32_t *done;
} job_msg_t;

static void job_free(job_msg_t *j)
{
    msr_free(j->nodes);
    msr_free(j->nptrs);
    msr_free(j->done);
}

static msr_status_t job_fill(msr_coord_t *c, Msr__PersistedState *ps, job_msg_t *j)
{
    memset(j, 0, sizeof *j);
    ps->version = 1;
    ps->job_id = c->job_id ? c->job_id : "";
    ps->worker_num = c->worker_num;
    ps->local_worker_num = c->local_worker_num;
    ps->max_restarts = c->max_restarts;
    ps->min_nodes = c->min_nodes;
    ps->max_nodes = c->max_nodes;
    ps->state = (Msr__JobState)c->state;
    ps->generation = c->generation;
    ps->restart_count = c->restart_count;
    ps->message = c->message;
    ps->master_addr = c->master_addr;
    ps->master_port = c->master_port;
    ps->node_count = c->node_count;
    if (c->failure.set) {
        msr_failure_to_msg(&c->failure, &j->failure);
        ps->failure = &j->failure;
    }
    for (int i = 0; i < c->nhistory; i++) {
        msr_failure_to_msg(&c->history[i], &j->history[i]);
        j->hptrs[i] = &j->history[i];
    }
    ps->n_failures = (size_t)c->nhistory;
    ps->failures = j->hptrs;
    size_t nn = c->nnodes;
    j->nodes = msr_calloc(nn ? nn : 1, sizeof *j->nodes);
    j->nptrs = msr_calloc(nn ? nn : 1, sizeof *j->nptrs);
    j->done = msr_calloc(c->worker_num > 0 ? (size_t)c->worker_num : 1, sizeof *j->done);
    if (j->nodes == NULL || j->nptrs == NULL || j->done == NULL) {
        job_free(j);
        return MSR_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < nn; i++) {
        const node_t *n = c->nodes[i];
        Msr__PersistedNode *pn = &j->nodes[i];
        msr__persisted_node__init(pn);
        pn->node_id = (char *)n->id;
        pn->host = n->host;
        pn->pid = n->pid;
        pn->local_worker_num = n->local_worker_num;
        pn->free_port = n->free_port;
        pn->wanted_rank = n->wanted_rank;
        pn->rank = n->rank;
        pn->ready_generation = n->ready_generation;
        pn->alive = n->alive;
        j->nptrs[i] = pn;
    }
    ps->n_nodes = nn;
    ps->nodes = j->nptrs;
    size_t nd = 0;
    for (int r = 0; c->rank_done && r < c->worker_num; r++)
        if (c->rank_done[r])
            j->done[nd++] = r;
    ps->n_done_ranks = nd;
    ps->done_ranks = j->done;
    return MSR_OK;
}

typedef struct kv_collect {
    msr_coord_t *c;
    Msr__PersistedKey *keys;
    Msr__PersistedKey **ptrs;
    char **deleted;
    size_t n, ndeleted;
} kv_collect_t;

static void collect_key(const char *key, const msr_store_value_t *v, void *arg)
{
    kv_collect_t *k = arg;
    msr__persisted_key__init(&k->keys[k->n]);
    k->keys[k->n].key = (char *)key;
    k->keys[k->n].value.data = (uint8_t *)v->data;
    k->keys[k->n].value.len = v->len;
    k->ptrs[k->n] = &k->keys[k->n];
    k->n++;
}

/* A changed key: its value now, or its deletion. */
static void collect_dirty(const char *key, void *value, void *arg)
{
    (void)value;
    kv_collect_t *k = arg;
    const msr_store_value_t *v = msr_store_core_value(k->c->store, key);
    if (v)
        collect_key(key, v, arg);
    else
        k->deleted[k->ndeleted++] = (char *)key;
}

typedef struct req_collect {
    Msr__PersistedRequest *reqs;
    Msr__PersistedRequest **ptrs;
    size_t n;
} req_collect_t;

/* The records to save: all, or the unsaved ones, which are the newest (a
 * save marks every record saved; new ones are added at the end). */
static msr_list_t *requests_first(msr_coord_t *c, int unsaved_only, size_t *n_p)
{
    size_t n = 0;
    msr_list_t *first = &c->requests;
    for (msr_list_t *p = c->requests.prev; p != &c->requests; p = p->prev) {
        if (unsaved_only && MSR_CONTAINER_OF(p, request_rec_t, link)->saved)
            break;
        first = p;
        n++;
    }
    *n_p = n;
    return first;
}

static msr_status_t collect_requests(msr_coord_t *c, int unsaved_only, req_collect_t *rc)
{
    size_t n = 0;
    msr_list_t *first = requests_first(c, unsaved_only, &n);
    rc->n = 0;
    rc->reqs = msr_calloc(n ? n : 1, sizeof *rc->reqs);
    rc->ptrs = msr_calloc(n ? n : 1, sizeof *rc->ptrs);
    if (rc->reqs == NULL || rc->ptrs == NULL) {
        msr_free(rc->reqs);
        msr_free(rc->ptrs);
        return MSR_ERR_NO_MEMORY;
    }
    for (msr_list_t *pos = first; pos != &c->requests && rc->n < n; pos = pos->next) {
        request_rec_t *r = MSR_CONTAINER_OF(pos, request_rec_t, link);
        Msr__PersistedRequest *p = &rc->reqs[rc->n];
        msr__persisted_request__init(p);
        p->client_id = r->client_id;
        p->request_id = r->request_id;
        p->method = r->method;
        p->response.data = r->response;
        p->response.len = r->len;
        rc->ptrs[rc->n++] = p;
    }
    return MSR_OK;
}

static void requests_saved(msr_coord_t *c)
{
    for (msr_list_t *p = c->requests.prev; p != &c->requests; p = p->prev) {
        request_rec_t *r = MSR_CONTAINER_OF(p, request_rec_t, link);
        if (r->saved)
            break; /* and every one before it */
        r->saved = 1;
    }
    c->new_requests = 0;
}

/* ---- writing ---- */

static msr_status_t sys_fail(const char *what, const char *path)
{
    int e = errno;
    return msr_err(msr_status_from_errno(e),
                   "the coordinator could not save its state file: %s %s: %s", what, path,
                   strerror(e));
}

/* Syncs the directory holding path, so that a rename in it survives a
 * crash (best effort: some file systems refuse to sync directories). */
static void sync_dir(const char *path)
{
    char *copy = msr_strdup(path);
    if (copy == NULL)
        return;
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0)
            MSR_DEBUG("cannot fsync the directory of %s: %s", path, strerror(errno));
        close(dfd);
    }
    msr_free(copy);
}

/* The whole state as one framed record after prefix bytes of room (the
 * frame as for frame()). */
static uint8_t *snapshot_record(msr_coord_t *c, size_t prefix, int64_t seq, size_t *len_p)
{
    Msr__PersistedState ps = MSR__PERSISTED_STATE__INIT;
    job_msg_t j;
    req_collect_t rc = {0};
    size_t nk = msr_store_core_keys(c->store) ? msr_store_core_keys(c->store) : 1;
    kv_collect_t kc = {c, NULL, NULL, NULL, 0, 0};
    uint8_t *buf = NULL;
    if (job_fill(c, &ps, &j) != MSR_OK)
        return NULL;
    if (collect_requests(c, 0, &rc) != MSR_OK)
        goto out_job;
    kc.keys = msr_calloc(nk, sizeof *kc.keys);
    kc.ptrs = msr_calloc(nk, sizeof *kc.ptrs);
    if (kc.keys == NULL || kc.ptrs == NULL)
        goto out;
    msr_store_core_foreach(c->store, collect_key, &kc);
    ps.n_store = kc.n;
    ps.store = kc.ptrs;
    ps.n_requests = rc.n;
    ps.requests = rc.ptrs;
    buf = frame(&ps.base, prefix, seq, len_p);
out:
    msr_free(kc.keys);
    msr_free(kc.ptrs);
    msr_free(rc.reqs);
    msr_free(rc.ptrs);
out_job:
    job_free(&j);
    return buf;
}

uint8_t *msr_coord_persist_snapshot_record(msr_coord_t *c, size_t *len_p)
{
    return snapshot_record(c, 0, -1, len_p);
}

/* Writes the whole state as a new file and renames it over the old one;
 * changes are then appended to the new file. */
static msr_status_t write_snapshot(msr_coord_t *c)
{
    const char *path = state_path(c);
    char *tmp = NULL;
    size_t len = 0;
    msr_err_set("the coordinator could not save its state file: out of memory");
    msr_status_t st = MSR_ERR_NO_MEMORY;
    uint8_t *buf = snapshot_record(c, MAGIC_LEN, 0, &len);
    size_t plen = strlen(path) + 8;
    tmp = msr_malloc(plen);
    if (buf == NULL || tmp == NULL)
        goto out;
    memcpy(buf, MAGIC, MAGIC_LEN);
    snprintf(tmp, plen, "%s.tmp", path);
    /* A file of our own, never one planted under the name (O_EXCL,
     * O_NOFOLLOW), readable by its owner only. */
    if (unlink(tmp) != 0 && errno != ENOENT) {
        st = sys_fail("cannot remove", tmp);
        goto out;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        st = sys_fail("cannot create", tmp);
        goto out;
    }
    if (msr_write_all(fd, buf, len) != MSR_OK) {
        st = sys_fail("cannot write", tmp);
        goto err_file;
    }
    if (!c->config.state_sync_process && fsync(fd) != 0) {
        st = sys_fail("cannot fsync", tmp);
        goto err_file;
    }
    if (rename(tmp, path) != 0) {
        st = sys_fail("cannot rename it to", path);
        goto err_file;
    }
    if (!c->config.state_sync_process)
        sync_dir(path);
    msr_coord_persist_close(c);
    c->log_fd = fd; /* now the state file itself */
    c->log_end = len;
    c->snapshot_len = len;
    c->log_seq = 1;
    st = MSR_OK;
    goto out;

err_file:
    close(fd);
    unlink(tmp);
out:
    msr_free(tmp);
    msr_free(buf);
    return st;
}

/* Packs what changed since the last save as one framed record (the frame
 * as for frame()). */
static uint8_t *change_record(msr_coord_t *c, int64_t seq, size_t *len_p)
{
    Msr__PersistedChange ch = MSR__PERSISTED_CHANGE__INIT;
    Msr__PersistedState ps = MSR__PERSISTED_STATE__INIT;
    job_msg_t j;
    int have_job = 0;
    req_collect_t rc = {0};
    size_t nk = c->dirty_keys.count ? c->dirty_keys.count : 1;
    kv_collect_t kc = {c,
                       msr_calloc(nk, sizeof *kc.keys),
                       msr_calloc(nk, sizeof *kc.ptrs),
                       msr_calloc(nk, sizeof *kc.deleted),
                       0,
                       0};
    uint8_t *buf = NULL;
    if (kc.keys == NULL || kc.ptrs == NULL || kc.deleted == NULL)
        goto out;
    if (c->dirty) {
        if (job_fill(c, &ps, &j) != MSR_OK)
            goto out;
        have_job = 1;
        ch.job = &ps;
    }
    if (collect_requests(c, 1, &rc) != MSR_OK)
        goto out;
    msr_map_foreach(&c->dirty_keys, collect_dirty, &kc);
    ch.store_cleared = c->store_cleared;
    ch.n_set = kc.n;
    ch.set = kc.ptrs;
    ch.n_deleted = kc.ndeleted;
    ch.deleted = kc.deleted;
    ch.n_requests = rc.n;
    ch.requests = rc.ptrs;
    buf = frame(&ch.base, 0, seq, len_p);
out:
    if (have_job)
        job_free(&j);
    msr_free(rc.reqs);
    msr_free(rc.ptrs);
    msr_free(kc.keys);
    msr_free(kc.ptrs);
    msr_free(kc.deleted);
    return buf;
}

uint8_t *msr_coord_persist_change_record(msr_coord_t *c, size_t *len_p)
{
    return change_record(c, -1, len_p);
}

void msr_coord_persist_saved(msr_coord_t *c)
{
    c->dirty = 0;
    c->store_cleared = 0;
    c->need_snapshot = 0;
    msr_map_cleanup(&c->dirty_keys, NULL);
    requests_saved(c);
    if (c->save_failures)
        MSR_INFO("the state %s%s is saved again (after %d failed saves)",
                 use_etcd(c) ? "in etcd at " : "file ",
                 use_etcd(c) ? c->config.etcd_prefix : state_path(c), c->save_failures);
    c->save_failures = 0;
}

msr_status_t msr_coord_persist_save(msr_coord_t *c)
{
    if (!msr_coord_persist_pending(c))
        return MSR_OK;
    if (use_etcd(c))
        return msr_coord_etcd_save(c);
    msr_status_t st;
    uint64_t log_len = c->log_end - c->snapshot_len;
    uint64_t limit = (uint64_t)MSR_LOG_COMPACT_FACTOR * c->snapshot_len;
    if (limit < MSR_LOG_COMPACT_MIN)
        limit = MSR_LOG_COMPACT_MIN;
    if (c->log_fd < 0 || c->need_snapshot || log_len >= limit) {
        st = write_snapshot(c);
    } else {
        size_t len = 0;
        uint8_t *rec = change_record(c, c->log_seq, &len);
        if (rec == NULL) {
            st = msr_err(MSR_ERR_NO_MEMORY,
                         "the coordinator could not save its state file: out of memory");
        } else {
            ssize_t n = pwrite(c->log_fd, rec, len, (off_t)c->log_end);
            if (n != (ssize_t)len) {
                if (n >= 0)
                    errno = ENOSPC; /* a short write: the disk is full */
                st = sys_fail("cannot append to", state_path(c));
            } else if (!c->config.state_sync_process && fdatasync(c->log_fd) != 0) {
                st = sys_fail("cannot fdatasync", state_path(c));
            } else {
                st = MSR_OK;
                c->log_end += len;
                c->log_seq++;
            }
            if (st != MSR_OK && ftruncate(c->log_fd, (off_t)c->log_end) != 0)
                MSR_DEBUG("cannot cut %s back to %" PRIu64 " bytes: %s", state_path(c), c->log_end,
                          strerror(errno));
            msr_free(rec);
        }
    }
    if (st == MSR_OK) {
        msr_coord_persist_saved(c);
        return MSR_OK;
    }
    /* Whatever reached the file, the next save rewrites all of it. */
    c->need_snapshot = 1;
    c->dirty = 0;
    c->store_cleared = 0;
    msr_map_cleanup(&c->dirty_keys, NULL);
    if (c->save_failures++ == 0)
        MSR_ERROR("%s; the writes it carried are failed, and it is tried again", msr_err_msg());
    return st;
}

/* ---- reading ---- */

/* Whether a job record's counts fit together, so that nothing sized from
 * one of them is indexed by another (node_count by report ranks, node
 * ranks by the assignment). */
static int job_unconfigured(const Msr__PersistedState *ps)
{
    return ps->worker_num == 0 && ps->local_worker_num == 0 && ps->node_count == 0 &&
           ps->n_nodes == 0 && ps->n_done_ranks == 0 && ps->generation == 0;
}

static int job_valid(const Msr__PersistedState *ps)
{
    const char *bad = NULL;
    if (ps->version == 1 && job_unconfigured(ps))
        return 1; /* saved before the first node joined: nothing to check */
    if (ps->version != 1)
        bad = "version";
    else if (ps->worker_num <= 0 || ps->worker_num > (1 << 24) || ps->local_worker_num <= 0 ||
             ps->worker_num % ps->local_worker_num != 0)
        bad = "worker_num / local_worker_num";
    else if (ps->node_count < 0 || ps->node_count > ps->worker_num / ps->local_worker_num)
        bad = "node_count";
    else if (ps->state < MSR__JOB_STATE__JOB_WAITING || ps->state > MSR__JOB_STATE__JOB_FAILED)
        bad = "state";
    else if (ps->generation < 0 || ps->restart_count < 0)
        bad = "generation / restart count";
    else if (ps->n_nodes > NODES_MAX)
        bad = "node list";
    else if (ps->n_done_ranks > (size_t)ps->worker_num)
        bad = "done ranks";
    for (size_t i = 0; bad == NULL && i < ps->n_nodes; i++) {
        const Msr__PersistedNode *n = ps->nodes[i];
        int nodes = ps->worker_num / ps->local_worker_num;
        if (n->rank < -1 || n->rank >= nodes || n->wanted_rank < -1 || n->wanted_rank >= nodes ||
            n->ready_generation < -1 || n->local_worker_num != ps->local_worker_num ||
            n->host == NULL)
            bad = "a node's rank, generation or worker count";
    }
    if (bad)
        msr_err_set("%s out of range", bad);
    return bad == NULL;
}

static void nodes_clear(msr_coord_t *c)
{
    for (size_t i = 0; i < c->nnodes; i++) {
        msr_free(c->nodes[i]->host);
        msr_free(c->nodes[i]);
    }
    c->nnodes = 0;
}

static msr_status_t job_apply(msr_coord_t *c, const Msr__PersistedState *ps)
{
    if (job_unconfigured(ps))
        return MSR_OK; /* the store and requests only */
    char *job = msr_strdup(ps->job_id ? ps->job_id : "");
    if (job == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_free(c->job_id);
    c->job_id = job;
    c->worker_num = ps->worker_num;
    c->local_worker_num = ps->local_worker_num;
    c->max_restarts = ps->max_restarts;
    c->min_nodes = ps->min_nodes;
    c->max_nodes = ps->max_nodes;
    msr_free(c->rank_done); /* sized again from this record's worker_num */
    c->rank_done = NULL;
    msr_status_t st = msr_coord_settings_valid(c);
    if (st != MSR_OK)
        return st;
    c->configured = 1;
    c->state = (msr_job_state_t)ps->state;
    c->generation = ps->generation;
    c->restart_count = ps->restart_count;
    c->node_count = ps->node_count > 0 ? ps->node_count : c->node_count;
    snprintf(c->message, sizeof c->message, "%s", ps->message ? ps->message : "");
    snprintf(c->master_addr, sizeof c->master_addr, "%s", ps->master_addr ? ps->master_addr : "");
    c->master_port = ps->master_port;
    if (ps->failure)
        msr_failure_from_msg(&c->failure, ps->failure);
    /* the history's last MSR_FAILURE_HISTORY; a record from before there
     * was one has only the last failure */
    c->nhistory = 0;
    size_t nh = ps->n_failures, first = nh > MSR_FAILURE_HISTORY ? nh - MSR_FAILURE_HISTORY : 0;
    for (size_t i = first; i < nh; i++) {
        msr_failure_t f;
        memset(&f, 0, sizeof f);
        msr_failure_from_msg(&f, ps->failures[i]);
        msr_coord_history_add(c, &f);
        msr_failure_clear(&f);
    }
    if (nh == 0 && c->failure.set)
        msr_coord_history_add(c, &c->failure);
    c->ndone = 0;
    for (size_t i = 0; i < ps->n_done_ranks; i++) {
        int r = ps->done_ranks[i];
        if (r >= 0 && r < c->worker_num && !c->rank_done[r]) {
            c->rank_done[r] = 1;
            c->ndone++;
        }
    }
    nodes_clear(c);
    uint64_t now = msr_now_ns();
    for (size_t i = 0; i < ps->n_nodes; i++) {
        const Msr__PersistedNode *pn = ps->nodes[i];
        node_t *n = msr_coord_node_add(c, pn->host);
        if (n == NULL)
            return MSR_ERR_NO_MEMORY;
        snprintf(n->id, sizeof n->id, "%s", pn->node_id ? pn->node_id : "");
        n->pid = pn->pid;
        n->local_worker_num = pn->local_worker_num;
        n->free_port = pn->free_port;
        n->wanted_rank = pn->wanted_rank;
        n->rank = pn->rank;
        n->ready_generation = pn->ready_generation;
        n->alive = pn->alive;
        n->last_seen = now; /* every node gets a full timeout to come back */
    }
    return MSR_OK;
}

static msr_status_t key_apply(msr_coord_t *c, const Msr__PersistedKey *k)
{
    msr_status_t st = msr_store_core_load_set(c->store, k->key, k->value.data, k->value.len);
    return st == MSR_ERR_INVALID_ARG ? MSR_ERR_CORRUPT : st;
}

static msr_status_t requests_apply(msr_coord_t *c, Msr__PersistedRequest **reqs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const Msr__PersistedRequest *r = reqs[i];
        if (r->client_id == 0 || r->request_id == 0 || r->method >= MSR_RPC_METHOD_COUNT)
            return MSR_ERR_CORRUPT;
        msr_status_t st = msr_coord_request_add(c, r->client_id, r->request_id, r->method,
                                                r->response.data, r->response.len, 1);
        if (st != MSR_OK)
            return st == MSR_ERR_INVALID_ARG ? MSR_ERR_CORRUPT : st;
    }
    return MSR_OK;
}

/* Whether a job record is of the job this coordinator was started for:
 * with --job_id, a record naming another job is not (without it, or in a
 * record saved before any job id was known, the file's id is taken). */
static int job_id_ok(const msr_coord_t *c, const Msr__PersistedState *ps)
{
    const char *mine = c->config.job_id ? c->config.job_id : "";
    const char *file = ps->job_id ? ps->job_id : "";
    if (mine[0] == '\0' || file[0] == '\0' || strcmp(mine, file) == 0)
        return 1;
    msr_err_set("it holds job %s, not job %s (--job_id)", file, mine);
    return 0;
}

/* On failure msr_err_msg() says what is wrong (or nothing, for memory):
 * MSR_ERR_CONFLICT for another job's state. */
static msr_status_t snapshot_apply(msr_coord_t *c, const Msr__PersistedState *ps)
{
    if (!job_id_ok(c, ps))
        return MSR_ERR_CONFLICT;
    if (!job_valid(ps))
        return MSR_ERR_CORRUPT;
    msr_status_t st = job_apply(c, ps);
    for (size_t i = 0; st == MSR_OK && i < ps->n_store; i++)
        st = key_apply(c, ps->store[i]);
    if (st == MSR_OK)
        st = requests_apply(c, ps->requests, ps->n_requests);
    if (st == MSR_ERR_CORRUPT)
        msr_err_set("a bad key or request record");
    return st;
}

/* Checks a whole change before applying any of it. */
static msr_status_t change_apply(msr_coord_t *c, const Msr__PersistedChange *ch)
{
    if (ch->job && (!job_id_ok(c, ch->job) || !job_valid(ch->job)))
        return MSR_ERR_CORRUPT;
    for (size_t i = 0; i < ch->n_set; i++)
        if (!msr_rpc_key_valid(ch->set[i]->key))
            return MSR_ERR_CORRUPT;
    for (size_t i = 0; i < ch->n_requests; i++)
        if (ch->requests[i]->client_id == 0 || ch->requests[i]->request_id == 0 ||
            ch->requests[i]->method >= MSR_RPC_METHOD_COUNT)
            return MSR_ERR_CORRUPT;
    if (ch->store_cleared) {
        msr_store_core_load_clear(c->store);
        msr_coord_requests_clear(c);
    }
    msr_status_t st = ch->job ? job_apply(c, ch->job) : MSR_OK;
    for (size_t i = 0; st == MSR_OK && i < ch->n_deleted; i++)
        msr_store_core_load_delete(c->store, ch->deleted[i] ? ch->deleted[i] : "");
    for (size_t i = 0; st == MSR_OK && i < ch->n_set; i++)
        st = key_apply(c, ch->set[i]);
    if (st == MSR_OK)
        st = requests_apply(c, ch->requests, ch->n_requests);
    return st;
}

/* Reads a record at off of a file of len bytes: its payload and length, or
 * 0 when it is torn or corrupt. */
static int record_at(const uint8_t *buf, uint64_t len, uint64_t off, const uint8_t **payload_p,
                     size_t *plen_p)
{
    if (len - off < FRAME_LEN)
        return 0;
    uint32_t plen = get_u32(buf + off);
    uint32_t crc = get_u32(buf + off + 4);
    if (plen > RECORD_MAX || plen > len - off - FRAME_LEN)
        return 0;
    if (msr_crc32(0, buf + off + FRAME_LEN, plen) != crc)
        return 0;
    *payload_p = buf + off + FRAME_LEN;
    *plen_p = plen;
    return 1;
}

msr_status_t msr_coord_persist_apply(msr_coord_t *c, const uint8_t *rec, size_t len, int snapshot)
{
    const uint8_t *payload;
    size_t plen;
    msr_err_clear();
    if (!record_at(rec, len, 0, &payload, &plen) || FRAME_LEN + plen != len) {
        msr_err_set("a record is torn or fails its CRC");
        return MSR_ERR_CORRUPT;
    }
    msr_status_t st;
    if (snapshot) {
        Msr__PersistedState *ps =
            msr__persisted_state__unpack(&msr_rpc_pb_allocator, plen, payload);
        st = ps ? snapshot_apply(c, ps) : MSR_ERR_CORRUPT;
        msr__persisted_state__free_unpacked(ps, &msr_rpc_pb_allocator);
    } else {
        Msr__PersistedChange *ch =
            msr__persisted_change__unpack(&msr_rpc_pb_allocator, plen, payload);
        st = ch ? change_apply(c, ch) : MSR_ERR_CORRUPT;
        msr__persisted_change__free_unpacked(ch, &msr_rpc_pb_allocator);
    }
    if (st == MSR_ERR_CORRUPT && msr_err_msg()[0] == '\0')
        msr_err_set("a record does not parse");
    return st;
}

/* Reads the open state file fd at path whole into *buf_p (one byte more
 * than *len_p, msr_free'd by the caller). MSR_ERR_CORRUPT when it is not a
 * regular file of at most FILE_MAX bytes, MSR_ERR_NO_MEMORY, or the read's
 * error; logged here but for memory. */
static msr_status_t file_read(int fd, const char *path, uint8_t **buf_p, uint64_t *len_p)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 0 ||
        (uint64_t)sb.st_size > FILE_MAX) {
        MSR_ERROR("the state file %s is not a regular file of at most %llu bytes", path,
                  (unsigned long long)FILE_MAX);
        return MSR_ERR_CORRUPT;
    }
    uint64_t len = (uint64_t)sb.st_size;
    uint8_t *buf = msr_malloc(len + 1);
    if (buf == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_status_t st = msr_read_full(fd, buf, len);
    if (st != MSR_OK) {
        MSR_ERROR("cannot read the state file %s: %s", path, msr_status_str(st));
        msr_free(buf);
        return st;
    }
    *buf_p = buf;
    *len_p = len;
    return MSR_OK;
}

/* A state file read whole, and its frame. */
typedef struct state_log {
    const char *path;
    const uint8_t *buf;
    uint64_t len;
    int v3; /* "MSRSTAT3": frames carry a sequence number and a header CRC */
} state_log_t;

/* Whether a whole, self-consistent record starts at off: its frame fits,
 * and its CRCs match (an older file's frame: a length of 0, which a save
 * never writes, is not taken, so that a zeroed tail holds no records).
 * *seq_p (0 in an older file), *payload_p, *plen_p: its parts. */
static int frame_at(const state_log_t *lg, uint64_t off, uint32_t *seq_p, const uint8_t **payload_p,
                    size_t *plen_p)
{
    if (!lg->v3) {
        *seq_p = 0;
        return record_at(lg->buf, lg->len, off, payload_p, plen_p) && *plen_p > 0;
    }
    const uint8_t *h = lg->buf + off;
    if (lg->len - off < FRAME3_LEN || msr_crc32(0, h, 12) != get_u32(h + 12))
        return 0;
    uint32_t plen = get_u32(h);
    if (plen > RECORD_MAX || plen > lg->len - off - FRAME3_LEN ||
        msr_crc32(0, h + FRAME3_LEN, plen) != get_u32(h + 8))
        return 0;
    *seq_p = get_u32(h + 4);
    *payload_p = h + FRAME3_LEN;
    *plen_p = plen;
    return 1;
}

/* The whole records anywhere after a bad one at off (their count, and the
 * offset of the first, else lg->len): one past a bad record, the next
 * offset where a frame holds together is taken as the next record. */
static size_t records_after(const state_log_t *lg, uint64_t off, uint64_t *first_p)
{
    size_t n = 0;
    uint32_t seq;
    const uint8_t *payload;
    size_t plen;
    size_t hlen = lg->v3 ? FRAME3_LEN : FRAME_LEN;
    *first_p = lg->len;
    for (uint64_t o = off + 1; o < lg->len;) {
        if (!frame_at(lg, o, &seq, &payload, &plen)) {
            o++;
            continue;
        }
        if (n++ == 0)
            *first_p = o;
        o += hlen + plen;
    }
    return n;
}

/* The record at off is bad (why: what is wrong with it; whole: its frame
 * and CRCs are intact). Torn and with nothing whole after it, it is a save
 * cut short by a crash: cut off, and MSR_OK. Whole (no crash leaves that),
 * or with records after it, it is corruption: MSR_ERR_CORRUPT, the file left
 * as it is (logged here), unless state_repair asks to cut it there. */
static msr_status_t log_bad(const msr_coord_t *c, const state_log_t *lg, uint64_t off,
                            const char *why, int whole)
{
    uint64_t first;
    size_t after = records_after(lg, off, &first);
    char follow[200];
    if (after > 0)
        snprintf(follow, sizeof follow,
                 "and %zu whole records follow it (the first at byte %" PRIu64 "; %" PRIu64
                 " bytes from it to the end)",
                 after, first, lg->len - off);
    else
        snprintf(follow, sizeof follow, "though whole (a crash leaves no whole record bad)");
    if ((whole || after > 0) && !c->config.state_repair) {
        MSR_ERROR("the state file %s is corrupt: the record at byte %" PRIu64 " is %s, %s: "
                  "acknowledged writes would be lost. The file is left as it is; "
                  "--state_repair cuts it at byte %" PRIu64 ", dropping them",
                  lg->path, off, why, follow, off);
        return MSR_ERR_CORRUPT;
    }
    if (whole || after > 0)
        MSR_WARN("state file %s: the record at byte %" PRIu64 " is %s; --state_repair: cutting "
                 "the file there, dropping %zu record%s (that one and %zu whole ones after it, "
                 "%" PRIu64 " bytes)",
                 lg->path, off, why, after + 1, after ? "s" : "", after, lg->len - off);
    else
        /* Everything before it was saved whole, nothing after it was
         * answered. */
        MSR_WARN("state file %s: the record at byte %" PRIu64 " is %s; cutting off its last "
                 "%" PRIu64 " bytes",
                 lg->path, off, why, lg->len - off);
    int wfd = open(lg->path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (wfd < 0 || ftruncate(wfd, (off_t)off) != 0 || fdatasync(wfd) != 0)
        MSR_WARN("cannot cut %s: %s (the next save rewrites it)", lg->path, strerror(errno));
    if (wfd >= 0)
        close(wfd);
    return MSR_OK;
}

/* Replays the log of changes from off, up to its first bad record (see
 * log_bad()). *nchanges_p: the changes replayed. MSR_OK, MSR_ERR_CORRUPT
 * (logged) or MSR_ERR_NO_MEMORY. */
static msr_status_t log_replay(msr_coord_t *c, const state_log_t *lg, uint64_t off,
                               size_t *nchanges_p)
{
    const uint8_t *payload;
    size_t plen;
    uint32_t seq;
    size_t hlen = lg->v3 ? FRAME3_LEN : FRAME_LEN;
    for (uint32_t want = 1; off < lg->len; want++) {
        Msr__PersistedChange *ch = NULL;
        const char *why = "torn or fails its CRC";
        int whole = frame_at(lg, off, &seq, &payload, &plen);
        if (whole) {
            why = "out of sequence (a record swapped, dropped or repeated)";
            if (!lg->v3 || seq == want) {
                why = "not a valid change";
                ch = msr__persisted_change__unpack(&msr_rpc_pb_allocator, plen, payload);
            }
        }
        msr_status_t st = ch ? change_apply(c, ch) : MSR_ERR_CORRUPT;
        msr__persisted_change__free_unpacked(ch, &msr_rpc_pb_allocator);
        if (st == MSR_ERR_NO_MEMORY)
            return st;
        if (st != MSR_OK)
            return log_bad(c, lg, off, why, whole);
        off += hlen + plen;
        (*nchanges_p)++;
    }
    return MSR_OK;
}

/* Applies a snapshot of plen bytes at payload; on failure msr_err_msg()
 * may say what is wrong. */
static msr_status_t snapshot_read(msr_coord_t *c, const uint8_t *payload, size_t plen)
{
    Msr__PersistedState *ps = msr__persisted_state__unpack(&msr_rpc_pb_allocator, plen, payload);
    msr_err_clear();
    msr_status_t st = ps ? snapshot_apply(c, ps) : MSR_ERR_CORRUPT;
    msr__persisted_state__free_unpacked(ps, &msr_rpc_pb_allocator);
    return st;
}

msr_status_t msr_coord_persist_load(msr_coord_t *c)
{
    if (use_etcd(c))
        return msr_coord_etcd_load(c);
    const char *path = state_path(c);
    if (path == NULL)
        return MSR_ERR_NOT_FOUND;
    int fd;
    msr_status_t ost = msr_open_input(path, O_NOFOLLOW, &fd); /* a FIFO would block */
    if (ost != MSR_OK) {
        if (ost == MSR_ERR_NOT_FOUND)
            return MSR_ERR_NOT_FOUND;
        int not_regular = errno == EINVAL;
        MSR_ERROR("the state file: %s", msr_err_msg());
        return not_regular ? MSR_ERR_CORRUPT : ost;
    }
    uint8_t *buf = NULL;
    uint64_t len = 0;
    size_t nchanges = 0;
    msr_status_t st = file_read(fd, path, &buf, &len);
    if (st != MSR_OK)
        goto out;
    const uint8_t *payload;
    size_t plen;
    uint32_t seq;
    state_log_t lg = {path, buf, len, len >= MAGIC_LEN && memcmp(buf, MAGIC, MAGIC_LEN) == 0};
    if (!lg.v3 && (len < MAGIC_LEN || memcmp(buf, MAGIC_V2, MAGIC_LEN) != 0)) {
        /* The format before the log: one PersistedState. Read it, and write
         * the new format at the first save. */
        st = snapshot_read(c, buf, (size_t)len);
        if (st != MSR_OK)
            goto bad;
        goto done;
    }
    if (!frame_at(&lg, MAGIC_LEN, &seq, &payload, &plen) || seq != 0) {
        msr_err_set("its snapshot (the record at byte %d) is torn, fails its CRC or is out of "
                    "sequence",
                    MAGIC_LEN);
        st = MSR_ERR_CORRUPT;
        goto bad;
    }
    st = snapshot_read(c, payload, plen);
    if (st != MSR_OK)
        goto bad;
    st = log_replay(c, &lg, MAGIC_LEN + (lg.v3 ? FRAME3_LEN : FRAME_LEN) + plen, &nchanges);
    if (st != MSR_OK)
        goto out;
done:
    /* The first save writes a fresh snapshot: the log starts empty. */
    c->need_snapshot = 1;
    c->dirty = 0;
    MSR_INFO("resumed job %s from %s: generation %d, %zu nodes, %zu keys, %zu changes replayed, "
             "restarts %d of %d",
             c->job_id, path, c->generation, c->nnodes, msr_store_core_keys(c->store), nchanges,
             c->restart_count, c->max_restarts);
    goto out;
bad:
    if (st == MSR_ERR_NO_MEMORY)
        goto out;
    if (st == MSR_ERR_CONFLICT) {
        MSR_ERROR("the state file %s is another job's: %s; it is left as it is", path,
                  msr_err_msg());
        goto out;
    }
    MSR_ERROR("the state file %s is corrupt or of another version%s%s", path,
              msr_err_msg()[0] ? ": " : "", msr_err_msg());
    st = MSR_ERR_CORRUPT;
out:
    msr_free(buf);
    close(fd);
    return st;
}
