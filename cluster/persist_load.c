/* The coordinator's state file, read back: the snapshot checked and applied,
 * the log of changes replayed, a torn tail cut off and corruption refused
 * (the format: persist_impl.h). */
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

#define FILE_MAX  (1ull << 32)
#define NODES_MAX (1u << 20) /* members ever seen: joins are bounded by the job */

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
        else if (n->machine_ranks < 0 || n->machine_ranks > ps->worker_num)
            bad = "a node's count of its machine's ranks";
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
    msr_map_cleanup(&c->node_ids, NULL);
    msr_coord_recount(c);
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
    c->join_wall_ns = ps->join_wall_ns;
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
        /* a coordinator elected or restarted on this state tells the
         * generation's nodes the same count of their machine's ranks */
        n->machine = pn->machine;
        n->machine_ranks = pn->machine_ranks;
        n->last_seen = now; /* every node gets a full timeout to come back */
        if (n->id[0] && msr_coord_node_index(c, n) != MSR_OK)
            return MSR_ERR_NO_MEMORY;
    }
    msr_coord_recount(c);
    msr_coord_join_restore(c);
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
