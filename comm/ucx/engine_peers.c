/* The UCX engine's peers: the exchange of the group's worker addresses
 * (and what each member says of itself: node, machine, PID namespace,
 * CPUs) through the store, endpoints made on first use, and the pidfds
 * that watch the peers on this machine. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/ucx/engine_impl.h"
#include "base/err.h"
#include "base/hash.h"
#include <ucs/debug/log_def.h>

#define ADDR_MAGIC 0x6d737563u /* "msuc" */

/* What each member contributes to the address exchange. */
typedef struct addr_head {
    uint32_t magic;
    uint32_t pid;
    int32_t node;
    int32_t world;
    uint64_t host;                /* which machine: several msrun "nodes" may share one */
    uint64_t pidns;               /* its PID namespace (0: unknown): pids mean the same there */
    uint64_t cpus[UCX_CPU_WORDS]; /* the CPUs it may run on (its affinity) */
} addr_head_t;
/* Logs the lanes UCX picked for ep (debug level only). */
static void log_lanes(ucp_ep_h ep, const ucx_peer_t *p)
{
    if (msr_log_level_ < MSR_LOG_DEBUG)
        return;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return;
    ucp_ep_print_info(ep, f);
    fclose(f);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *lane = strstr(line, "lane[");
        if (lane)
            MSR_DEBUG("comm: to job rank %d (%s node): %s", p->world_rank,
                      p->node == p->engine->my_node ? "same" : "other", lane);
    }
    free(text);
}

/* ---- peers ---- */

static msr_status_t fetch_addresses(ucx_engine_t *e, ucx_peer_t **peers, uint32_t n);

/* This process's PID namespace (0 when unknown). */
uint64_t ucx_engine_pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static int pidfd_open_(int pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* Watches p, a member of another node on this machine, through a pidfd as
 * this node's members are: 1 once it is watched. Lock held. */
static int watch_host_peer(ucx_engine_t *e, ucx_peer_t *p)
{
    if (p->pidfd >= 0)
        return 1;
    p->pidfd = pidfd_open_(p->pid);
    if (p->pidfd < 0) {
        MSR_DEBUG("comm: no pidfd for job rank %d on this machine (%s): through the network",
                  p->world_rank, strerror(errno));
        return 0;
    }
    ucx_engine_rebuild_pollfds(e);
    return 1;
}

static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucx_peer_t *p = arg;
    (void)ep;
    if (!p->dead)
        MSR_DEBUG("comm: UCX reports job rank %d lost: %s", p->world_rank,
                  ucs_status_string(status));
    p->dead = 1;
    p->engine->dead_pending = 1;
}

ucp_ep_h ucx_engine_ep(ucx_engine_t *e, ucx_peer_t *p)
{
    if (p->ep)
        return p->ep;
    if (p->addr == NULL) {
        /* first use: fetch its address (the node's proxy answers from what
         * it fetched for another rank of this node, or asks once for all) */
        ucx_peer_t *one[1] = {p};
        msr_status_t st = fetch_addresses(e, one, 1);
        if (st != MSR_OK) {
            MSR_WARN("comm: no address for job rank %d: %s", p->world_rank, msr_err_msg());
            return NULL;
        }
    }
    int same_node = p->node == e->my_node;
    /* A member of another msrun node on this machine (and PID namespace)
     * is reached like one of this node: through shared memory, its
     * liveness watched through a pidfd. */
    int host_shm = !same_node && p->same_host && e->host_shm && watch_host_peer(e, p);
    const char *mode = getenv("MSR_COMM_UCX_ERR_MODE");
    int peer_mode = !(same_node || host_shm) || (mode && strcmp(mode, "peer") == 0);
    p->peer_mode = peer_mode;
    ucp_ep_params_t prm = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)p->addr,
        /* On one machine, error handling PEER would make UCX 1.13 drop
         * shared memory for TCP; there the pidfds tell us of a lost peer
         * instead. */
        .err_mode = peer_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE,
        .err_handler = {.cb = ep_error_cb, .arg = p},
    };
    ucs_status_t st = ucp_ep_create(e->worker, &prm, &p->ep);
    if (st != UCS_OK) {
        /* the caller fails the operation saying which rank; UCX's reason
         * is for debugging */
        MSR_DEBUG("comm: cannot connect to job rank %d: %s", p->world_rank, ucs_status_string(st));
        p->ep = NULL;
        return NULL;
    }
    log_lanes(p->ep, p);
    return p->ep;
}

/* Set while this thread connects for a notice: UCX's messages are then
 * debug lines of ours, not errors on the job's output. */
static _Thread_local int quiet_connect;
static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

static ucs_log_func_rc_t quiet_log(const char *file, unsigned line, const char *function,
                                   ucs_log_level_t level, const ucs_log_component_config_t *conf,
                                   const char *fmt, va_list ap)
{
    (void)file;
    (void)line;
    (void)function;
    (void)level;
    (void)conf;
    if (!quiet_connect)
        return UCS_LOG_FUNC_RC_CONTINUE; /* ap untouched for the next handler */
    char msg[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    MSR_DEBUG("comm: UCX, connecting for a notice: %s", msg);
    return UCS_LOG_FUNC_RC_STOP;
}

static void quiet_install(void)
{
    ucs_log_push_handler(quiet_log); /* process-wide; idle unless this thread asks */
}

ucp_ep_h ucx_engine_ep_quiet(ucx_engine_t *e, ucx_peer_t *p)
{
    if (p->ep)
        return p->ep;
    pthread_once(&quiet_once, quiet_install);
    quiet_connect = 1;
    ucp_ep_h ep = ucx_engine_ep(e, p);
    quiet_connect = 0;
    return ep;
}

int64_t ucx_engine_machine(const ucx_engine_t *e)
{
    if (!e->host_shm)
        return e->my_node;
    return (int64_t)((e->my_host ^ (e->my_pidns * 0x9e3779b97f4a7c15ull)) >> 2);
}

int ucx_engine_watch_host(ucx_engine_t *e, ucx_peer_t **peers, int n)
{
    ucx_engine_lock(e);
    /* the addresses not known yet, in one call */
    int missing = 0;
    for (int i = 0; i < n; i++)
        if (peers[i]->addr == NULL) {
            ucx_peer_t *t = peers[missing];
            peers[missing++] = peers[i];
            peers[i] = t;
        }
    int ok = missing == 0 || fetch_addresses(e, peers, (uint32_t)missing) == MSR_OK;
    if (!ok)
        MSR_DEBUG("comm: no addresses of this machine's other nodes: %s", msr_err_msg());
    for (int i = 0; i < n && ok; i++)
        ok = peers[i]->same_host && watch_host_peer(e, peers[i]);
    ucx_engine_unlock(e);
    return ok;
}

/* The CPUs this process may run on, as words of bits (all zero when the
 * kernel does not say). */
static void my_cpus(uint64_t *words)
{
    cpu_set_t set;
    memset(words, 0, UCX_CPU_WORDS * sizeof *words);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return;
    for (int c = 0; c < UCX_CPU_WORDS * 64 && c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            words[c / 64] |= 1ull << (c % 64);
}

/* The CPUs this machine's members may run on: the union of this node's
 * members' affinities (a launcher that binds each rank to a core of its
 * own gives each its core, which this process's mask alone would call
 * crowded). The same answer on every member of the node; with several
 * nodes on the machine (their masks unknown here), the CPUs online. */
int ucx_engine_cpus(const ucx_engine_t *e)
{
    int n = 0;
    for (int w = 0; w < UCX_CPU_WORDS && e->host_ranks <= e->local_size; w++)
        n += __builtin_popcountll(e->node_cpus[w]);
    if (n > 0)
        return n;
    long on = sysconf(_SC_NPROCESSORS_ONLN);
    return on > 0 ? (int)on : 1;
}

/* Reads and checks one member's published record (addr_head_t, then its
 * UCX address) into p. */
static msr_status_t take_record(ucx_peer_t *p, const unsigned char *rec, size_t len,
                                addr_head_t *head_p)
{
    addr_head_t h;
    if (len <= sizeof h) {
        msr_err_set("comm: job rank %d published a %zu-byte address", p->world_rank, len);
        return MSR_ERR_PROTOCOL;
    }
    memcpy(&h, rec, sizeof h);
    if (h.magic != ADDR_MAGIC || h.world != p->world_rank || h.node != p->node) {
        msr_err_set("comm: job rank %d published a malformed address", p->world_rank);
        return MSR_ERR_PROTOCOL;
    }
    unsigned char *addr = msr_malloc(len - sizeof h);
    if (addr == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "comm: out of memory for job rank %d's address",
                       p->world_rank);
    memcpy(addr, rec + sizeof h, len - sizeof h);
    msr_free(p->addr);
    p->addr = addr;
    p->addr_len = len - sizeof h;
    p->pid = (int)h.pid;
    *head_p = h;
    return MSR_OK;
}

/* Fetches the addresses of the members peers[0..n) (none of them known
 * yet) in one call, waiting at most the context's timeout for them. */
static msr_status_t fetch_addresses(ucx_engine_t *e, ucx_peer_t **peers, uint32_t n)
{
    uint32_t *idx = msr_malloc((n ? n : 1) * sizeof *idx);
    if (idx == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "comm: out of memory for %u addresses", n);
    for (uint32_t i = 0; i < n; i++)
        idx[i] = peers[i]->index;
    msr_gather_result_t *res = NULL;
    msr_status_t st = msr_store_fetch(e->ctx, e->addr_key, n, idx, -1, &res);
    msr_free(idx);
    if (st != MSR_OK)
        return st;
    for (uint32_t i = 0; i < n && st == MSR_OK; i++) {
        addr_head_t h = {0};
        st = take_record(peers[i], res->data + res->offsets[i], res->lengths[i], &h);
        peers[i]->same_host = h.host == e->my_host && h.pidns != 0 && h.pidns == e->my_pidns;
        if (st == MSR_OK && peers[i]->node == e->my_node && h.host != e->my_host) {
            msr_err_set("comm: job rank %d of this node runs on another machine",
                        peers[i]->world_rank);
            st = MSR_ERR_PROTOCOL;
        }
        if (st == MSR_OK && peers[i]->node == e->my_node)
            for (int w = 0; w < UCX_CPU_WORDS; w++)
                e->node_cpus[w] |= h.cpus[w];
    }
    msr_gather_result_free(res);
    return st;
}

/* Counts the members on this machine (several msrun nodes may share it):
 * the lowest member of each node adds its node's count under the
 * machine's slot, every member waits at a barrier, then reads its slot
 * (through the node's proxy: one upstream read per node). Only tunes how
 * waits spin (set_waiting); a slot shared by two machines overcounts. */
static msr_status_t count_host_ranks(ucx_engine_t *e, int n, int index, uint32_t local,
                                     int first_local)
{
    uint64_t host = msr_host_id();
    uint32_t slot = (uint32_t)(host ^ (host >> 32));
    char name[300], key[320];
    snprintf(name, sizeof name, "%s/hosts", e->addr_key);
    snprintf(key, sizeof key, "%s/%u", name, slot);
    msr_status_t st = MSR_OK;
    if (index == first_local)
        st = msr_store_add(e->ctx, key, (int64_t)local, NULL);
    char bname[300];
    snprintf(bname, sizeof bname, "%s/ready", e->addr_key);
    if (st == MSR_OK)
        st = msr_store_barrier(e->ctx, bname, (uint32_t)n, local, -1);
    msr_gather_result_t *res = NULL;
    if (st == MSR_OK)
        st = msr_store_fetch(e->ctx, name, 1, &slot, -1, &res);
    if (st != MSR_OK)
        return st;
    char text[32];
    size_t len = res->lengths[0] < sizeof text - 1 ? res->lengths[0] : sizeof text - 1;
    memcpy(text, res->data, len);
    text[len] = '\0';
    msr_gather_result_free(res);
    int64_t v = 0;
    if (msr_parse_i64(text, 1, INT32_MAX, &v) != MSR_OK) {
        msr_err_set("comm: the count of ranks on this machine reads '%s'", text);
        return MSR_ERR_PROTOCOL;
    }
    e->host_ranks = (int)v;
    return MSR_OK;
}

/* This member's record: its head, then addr; NULL when out of memory.
 * Sets the engine's CPUs to this process's own (its node's others are
 * added as their records come). */
static unsigned char *make_record(ucx_engine_t *e, const void *addr, size_t addr_len)
{
    unsigned char *rec = msr_malloc(sizeof(addr_head_t) + addr_len);
    if (rec == NULL)
        return NULL;
    addr_head_t head = {ADDR_MAGIC,  (uint32_t)getpid(), e->my_node,
                        e->my_world, e->my_host,         e->my_pidns};
    my_cpus(head.cpus);
    memcpy(e->node_cpus, head.cpus, sizeof e->node_cpus);
    memcpy(rec, &head, sizeof head);
    memcpy(rec + sizeof head, addr, addr_len);
    return rec;
}

msr_status_t ucx_engine_record(ucx_engine_t *e, unsigned char **rec_p, size_t *len_p)
{
    ucp_address_t *addr = NULL;
    size_t addr_len = 0;
    ucs_status_t us = ucp_worker_get_address(e->worker, &addr, &addr_len);
    if (us != UCS_OK) {
        msr_err_set("comm: ucp_worker_get_address: %s", ucs_status_string(us));
        return MSR_ERR_BACKEND;
    }
    unsigned char *rec = make_record(e, addr, addr_len);
    ucp_worker_release_address(e->worker, addr);
    if (rec == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "comm: out of memory for this engine's address");
    *rec_p = rec;
    *len_p = sizeof(addr_head_t) + addr_len;
    return MSR_OK;
}

/* Takes one member's record (handed over without the store) into p: its
 * address, pid and machine (*host_p); a peer of this node adds its CPUs
 * and is watched through a pidfd. */
static msr_status_t take_peer(ucx_engine_t *e, ucx_peer_t *p, const unsigned char *rec, size_t len,
                              uint64_t *host_p)
{
    addr_head_t h = {0};
    msr_status_t st = take_record(p, rec, len, &h);
    *host_p = h.host;
    if (st != MSR_OK)
        return st;
    p->same_host = h.host == e->my_host && h.pidns != 0 && h.pidns == e->my_pidns;
    if (p->node == e->my_node && h.host != e->my_host) {
        msr_err_set("comm: job rank %d of this node runs on another machine", p->world_rank);
        return MSR_ERR_PROTOCOL;
    }
    if (p->node != e->my_node)
        return MSR_OK;
    for (int w = 0; w < UCX_CPU_WORDS; w++)
        e->node_cpus[w] |= h.cpus[w];
    p->pidfd = pidfd_open_(p->pid);
    if (p->pidfd < 0)
        MSR_DEBUG("comm: no pidfd for pid %d (%s): liveness by polling", p->pid, strerror(errno));
    return MSR_OK;
}

msr_status_t ucx_engine_take_pair(ucx_engine_t *e, const int ranks[2], int index,
                                  const unsigned char *rec, size_t len, int host_ranks)
{
    for (int i = 0; i < 2; i++) {
        e->peers[ranks[i]].member = 1;
        e->peers[ranks[i]].index = (uint32_t)i;
    }
    e->host_ranks = host_ranks;
    uint64_t host = 0;
    return take_peer(e, &e->peers[ranks[1 - index]], rec, len, &host);
}

msr_status_t ucx_engine_take_all(ucx_engine_t *e, int n, const int *world_ranks, int index,
                                 const unsigned char *recs, size_t stride)
{
    for (int i = 0; i < n; i++) {
        e->peers[world_ranks[i]].member = 1;
        e->peers[world_ranks[i]].index = (uint32_t)i;
    }
    e->host_ranks = 1;
    for (int i = 0; i < n; i++) {
        if (i == index)
            continue;
        const unsigned char *rec = recs + (size_t)i * stride;
        uint64_t len = 0;
        memcpy(&len, rec, sizeof len);
        if (len > stride - sizeof len) {
            msr_err_set("comm: job rank %d handed over a %llu-byte address", world_ranks[i],
                        (unsigned long long)len);
            return MSR_ERR_PROTOCOL;
        }
        uint64_t host = 0;
        msr_status_t st =
            take_peer(e, &e->peers[world_ranks[i]], rec + sizeof len, (size_t)len, &host);
        if (st != MSR_OK)
            return st;
        e->host_ranks += host == e->my_host;
    }
    return MSR_OK;
}

/* The address exchange (docs/comm.md): each member publishes its worker
 * address as entry `index` of the engine's name (the node's proxy sends a
 * node's members up as one call), and a member fetches a peer's address
 * when it first needs an endpoint to it (ucx_engine_ep): nobody receives
 * every member's address. What each member needs of every other up front
 * is known without the network: its node (job ranks are contiguous per
 * node, local_size each). This node's members are fetched at once, in one
 * call: their pids watch their liveness, and shared memory needs them all. */
msr_status_t ucx_engine_exchange_addresses(ucx_engine_t *e, int n, const int *world_ranks,
                                           int index, const void *addr, size_t addr_len)
{
    msr_status_t st = MSR_ERR_NO_MEMORY;
    size_t len = sizeof(addr_head_t) + addr_len;
    unsigned char *mine = make_record(e, addr, addr_len);
    ucx_peer_t **local_peers = msr_malloc((size_t)n * sizeof *local_peers);
    if (mine == NULL || local_peers == NULL) {
        msr_err_set("comm: out of memory for the addresses of %d members", n);
        goto err_free;
    }
    uint32_t local = 0, nlp = 0;
    int first_local = -1, other_nodes = 0;
    for (int i = 0; i < n; i++) {
        ucx_peer_t *p = &e->peers[world_ranks[i]];
        p->member = 1;
        p->index = (uint32_t)i;
        if (p->node != e->my_node) {
            other_nodes = 1;
            continue;
        }
        if (first_local < 0)
            first_local = i;
        local++;
        if (i != index)
            local_peers[nlp++] = p;
    }
    snprintf(e->addr_key, sizeof e->addr_key, "msr/comm/%s/ucx-address", e->uid);
    st = msr_store_publish(e->ctx, e->addr_key, (uint32_t)index, local, mine, len);
    if (st == MSR_OK && nlp > 0)
        st = fetch_addresses(e, local_peers, nlp);
    if (st == MSR_OK) {
        e->host_ranks = (int)local;
        /* the world's count on this machine came with the generation:
         * msrun's coordinator counted it (every member has it or none) */
        int64_t told = 0;
        if (other_nodes && n == e->world_size)
            told = msr_env_i64("MSR_MACHINE_RANKS", 0, 0, INT32_MAX);
        if (told >= (int64_t)local) {
            e->host_ranks = (int)told;
            MSR_DEBUG("comm: engine %s: %d ranks on this machine, as msrun's coordinator "
                      "counted them",
                      e->uid, e->host_ranks);
        } else if (other_nodes) {
            st = count_host_ranks(e, n, index, local, first_local);
            if (st == MSR_OK)
                MSR_DEBUG("comm: engine %s: %d ranks on this machine, counted through the store",
                          e->uid, e->host_ranks);
        }
    }
    if (st != MSR_OK) {
        st = msr_err_prefix(st, "comm: address exchange '%s'", e->addr_key);
        goto err_free;
    }
    for (uint32_t i = 0; i < nlp; i++) {
        ucx_peer_t *p = local_peers[i];
        p->pidfd = pidfd_open_(p->pid);
        if (p->pidfd < 0)
            MSR_DEBUG("comm: no pidfd for pid %d (%s): liveness by polling", p->pid,
                      strerror(errno));
    }
    st = MSR_OK;
err_free:
    msr_free(local_peers);
    msr_free(mine);
    return st;
}
