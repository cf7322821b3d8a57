/* The coordinator's state file: the job (members, generation, restart count,
 * failure, store) as one PersistedState message, written atomically
 * (temporary file, rename; fsync for the changes that matter most), and read
 * back by a coordinator restarted on the same file. Waits in progress
 * (barriers, allgathers, long polls) are not kept: their clients retry. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "base/util.h"
#include "cluster/coord_internal.h"

typedef struct kv_collect {
    Msr__PersistedKey *keys;
    Msr__PersistedKey **ptrs;
    size_t n;
} kv_collect_t;

static void collect_key(const char *key, void *value, void *arg)
{
    kv_collect_t *k = arg;
    kv_t *v = value;
    msr__persisted_key__init(&k->keys[k->n]);
    k->keys[k->n].key = (char *)key;
    k->keys[k->n].value.data = v->data;
    k->keys[k->n].value.len = v->len;
    k->ptrs[k->n] = &k->keys[k->n];
    k->n++;
}

msr_status_t msr_coord_persist_write(msr_coord_t *c, int sync)
{
    const char *path = c->config.state_file;
    if (path == NULL || *path == '\0')
        return MSR_OK;
    msr_status_t st = MSR_ERR_NO_MEMORY;
    Msr__PersistedState ps = MSR__PERSISTED_STATE__INIT;
    Msr__Failure f;
    ps.version = 1;
    ps.job_id = c->job_id ? c->job_id : "";
    ps.worker_num = c->worker_num;
    ps.local_worker_num = c->local_worker_num;
    ps.max_restarts = c->max_restarts;
    ps.min_nodes = c->min_nodes;
    ps.max_nodes = c->max_nodes;
    ps.state = c->state;
    ps.generation = c->generation;
    ps.restart_count = c->restart_count;
    ps.message = c->message;
    ps.master_addr = c->master_addr;
    ps.master_port = c->master_port;
    ps.node_count = c->node_count;
    if (c->failure.set) {
        msr_coord_failure_to_msg(&c->failure, &f);
        ps.failure = &f;
    }
    size_t nn = c->nnodes;
    Msr__PersistedNode *nodes = msr_calloc(nn ? nn : 1, sizeof *nodes);
    Msr__PersistedNode **nptrs = msr_calloc(nn ? nn : 1, sizeof *nptrs);
    kv_collect_t kc = {msr_calloc(c->store.count ? c->store.count : 1, sizeof *kc.keys),
                       msr_calloc(c->store.count ? c->store.count : 1, sizeof *kc.ptrs), 0};
    int32_t *done = msr_calloc(c->worker_num > 0 ? (size_t)c->worker_num : 1, sizeof *done);
    uint8_t *buf = NULL;
    char *tmp = NULL;
    int fd = -1;
    if (nodes == NULL || nptrs == NULL || kc.keys == NULL || kc.ptrs == NULL || done == NULL)
        goto out;
    for (size_t i = 0; i < nn; i++) {
        const node_t *n = c->nodes[i];
        msr__persisted_node__init(&nodes[i]);
        nodes[i].node_id = (char *)n->id;
        nodes[i].host = n->host;
        nodes[i].pid = n->pid;
        nodes[i].local_worker_num = n->local_worker_num;
        nodes[i].free_port = n->free_port;
        nodes[i].wanted_rank = n->wanted_rank;
        nodes[i].rank = n->rank;
        nodes[i].ready_generation = n->ready_generation;
        nodes[i].alive = n->alive;
        nptrs[i] = &nodes[i];
    }
    ps.n_nodes = nn;
    ps.nodes = nptrs;
    msr_map_foreach(&c->store, collect_key, &kc);
    ps.n_store = kc.n;
    ps.store = kc.ptrs;
    size_t nd = 0;
    for (int r = 0; c->rank_done && r < c->worker_num; r++)
        if (c->rank_done[r])
            done[nd++] = r;
    ps.n_done_ranks = nd;
    ps.done_ranks = done;

    size_t len = protobuf_c_message_get_packed_size(&ps.base);
    buf = msr_malloc(len ? len : 1);
    size_t plen = strlen(path) + 16;
    tmp = msr_malloc(plen);
    if (buf == NULL || tmp == NULL)
        goto out;
    protobuf_c_message_pack(&ps.base, buf);
    snprintf(tmp, plen, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        st = msr_status_from_errno(errno);
        MSR_ERROR("cannot write the state file %s: %s", tmp, strerror(errno));
        goto out;
    }
    st = msr_write_all(fd, buf, len);
    if (st == MSR_OK && sync && fsync(fd) != 0)
        st = msr_status_from_errno(errno);
    if (close(fd) != 0 && st == MSR_OK)
        st = msr_status_from_errno(errno);
    fd = -1;
    if (st == MSR_OK && rename(tmp, path) != 0)
        st = msr_status_from_errno(errno);
    if (st != MSR_OK) {
        MSR_ERROR("cannot write the state file %s: %s", path, strerror(errno));
        unlink(tmp);
    }
out:
    if (fd >= 0)
        close(fd);
    msr_free(tmp);
    msr_free(buf);
    msr_free(done);
    msr_free(kc.keys);
    msr_free(kc.ptrs);
    msr_free(nodes);
    msr_free(nptrs);
    return st;
}

msr_status_t msr_coord_persist_load(msr_coord_t *c)
{
    const char *path = c->config.state_file;
    if (path == NULL || *path == '\0')
        return MSR_ERR_NOT_FOUND;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? MSR_ERR_NOT_FOUND : msr_status_from_errno(errno);
    struct stat sb;
    msr_status_t st = MSR_ERR_IO;
    uint8_t *buf = NULL;
    Msr__PersistedState *ps = NULL;
    if (fstat(fd, &sb) != 0 || sb.st_size < 0 || sb.st_size > (1 << 30))
        goto out;
    buf = msr_malloc((size_t)sb.st_size + 1);
    if (buf == NULL) {
        st = MSR_ERR_NO_MEMORY;
        goto out;
    }
    st = msr_read_full(fd, buf, (size_t)sb.st_size);
    if (st != MSR_OK)
        goto out;
    ps = msr__persisted_state__unpack(&msr_rpc_pb_allocator, (size_t)sb.st_size, buf);
    if (ps == NULL || ps->version != 1 || ps->worker_num <= 0 || ps->local_worker_num <= 0 ||
        ps->worker_num % ps->local_worker_num != 0) {
        MSR_ERROR("the state file %s is corrupt or of another version", path);
        st = MSR_ERR_CORRUPT;
        goto out;
    }
    st = MSR_ERR_NO_MEMORY;
    char *job = msr_strdup(ps->job_id);
    if (job == NULL)
        goto out;
    msr_free(c->job_id);
    c->job_id = job;
    c->worker_num = ps->worker_num;
    c->local_worker_num = ps->local_worker_num;
    c->max_restarts = ps->max_restarts;
    c->min_nodes = ps->min_nodes;
    c->max_nodes = ps->max_nodes;
    msr_free(c->rank_done);
    c->rank_done = NULL;
    if (msr_coord_settings_valid(c) != MSR_OK)
        goto out;
    c->configured = 1;
    c->state = ps->state;
    c->generation = ps->generation;
    c->restart_count = ps->restart_count;
    c->node_count = ps->node_count > 0 ? ps->node_count : c->node_count;
    snprintf(c->message, sizeof c->message, "%s", ps->message ? ps->message : "");
    snprintf(c->master_addr, sizeof c->master_addr, "%s", ps->master_addr ? ps->master_addr : "");
    c->master_port = ps->master_port;
    if (ps->failure)
        msr_coord_failure_from_msg(&c->failure, ps->failure);
    c->ndone = 0;
    for (size_t i = 0; i < ps->n_done_ranks; i++) {
        int r = ps->done_ranks[i];
        if (r >= 0 && r < c->worker_num && !c->rank_done[r]) {
            c->rank_done[r] = 1;
            c->ndone++;
        }
    }
    uint64_t now = msr_now_ns();
    for (size_t i = 0; i < ps->n_nodes; i++) {
        const Msr__PersistedNode *pn = ps->nodes[i];
        node_t *n = msr_coord_node_add(c, pn->host);
        if (n == NULL)
            goto out;
        snprintf(n->id, sizeof n->id, "%s", pn->node_id);
        n->pid = pn->pid;
        n->local_worker_num = pn->local_worker_num;
        n->free_port = pn->free_port;
        n->wanted_rank = pn->wanted_rank;
        n->rank = pn->rank;
        n->ready_generation = pn->ready_generation;
        n->alive = pn->alive;
        n->last_seen = now; /* every node gets a full timeout to come back */
    }
    for (size_t i = 0; i < ps->n_store; i++) {
        const Msr__PersistedKey *k = ps->store[i];
        kv_t *v = msr_malloc(sizeof *v + k->value.len);
        if (v == NULL)
            goto out;
        v->len = k->value.len;
        if (v->len)
            memcpy(v->data, k->value.data, v->len);
        void *old = NULL;
        if (msr_map_put(&c->store, k->key, v, &old) != MSR_OK) {
            msr_free(v);
            goto out;
        }
        msr_free(old);
    }
    st = MSR_OK;
    MSR_INFO("resumed job %s from %s: generation %d, %zu nodes, %zu keys, restarts %d of %d",
             c->job_id, path, c->generation, ps->n_nodes, ps->n_store, c->restart_count,
             c->max_restarts);
out:
    msr__persisted_state__free_unpacked(ps, &msr_rpc_pb_allocator);
    msr_free(buf);
    close(fd);
    return st;
}
