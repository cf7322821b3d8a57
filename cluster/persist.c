/* The coordinator's state file, written: records built from the job and
 * saved as a snapshot and a log of changes (the format: persist_impl.h). */
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
#include "cluster/persist_impl.h"

#define GEN_MAX (1 << 30)

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
    ps->join_wall_ns = c->join_wall_ns;
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
        pn->machine = n->machine;
        pn->machine_ranks = n->machine_ranks;
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
