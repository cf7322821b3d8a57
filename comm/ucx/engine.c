/* The UCX engine: a UCP context and worker, the worker addresses of the
 * group (exchanged through the store), endpoints made on first use, peer
 * liveness, and the progress loop that spins briefly and then sleeps on the
 * worker's event fd. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/lprof.h"
#include "base/time.h"
#include "base/util.h"
#include "comm/ucx/ucx_impl.h"
#include "base/err.h"
#include "base/hash.h"

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

/* ---- transports ---- */

/* Whether process_vm_readv (UCX's cma) can work between the workers of this
 * node: seccomp may refuse the call, and Yama's ptrace_scope 1 allows it
 * only to ancestors unless a process opts in, which we then do. */
static int cma_usable(char *why, size_t len)
{
    char src = 42, dst = 0;
    struct iovec l = {&dst, 1}, r = {&src, 1};
    if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != 1 || dst != 42) {
        snprintf(why, len, "process_vm_readv refused (%s)", strerror(errno));
        return 0;
    }
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    if (f == NULL)
        return 1;
    int scope = 0;
    if (fscanf(f, "%d", &scope) != 1)
        scope = 0;
    fclose(f);
    if (scope == 0)
        return 1;
    if (scope == 1 && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0)
        return 1;
    snprintf(why, len, "yama ptrace_scope is %d", scope);
    return 0;
}

/* posix shared memory lives in /dev/shm, which containers often keep small
 * (Docker: 64 MB) or read-only. */
static int posix_shm_usable(char *why, size_t len)
{
    struct statvfs st;
    if (statvfs("/dev/shm", &st) != 0 || access("/dev/shm", W_OK) != 0) {
        snprintf(why, len, "/dev/shm is not writable (%s)", strerror(errno));
        return 0;
    }
    unsigned long long avail = (unsigned long long)st.f_bavail * st.f_frsize;
    if (avail < (64ull << 20)) {
        snprintf(why, len, "/dev/shm has %llu MiB free", avail >> 20);
        return 0;
    }
    return 1;
}

static int sysv_shm_usable(char *why, size_t len)
{
    int id = shmget(IPC_PRIVATE, 4 << 20, IPC_CREAT | 0600);
    if (id < 0) {
        snprintf(why, len, "shmget refused (%s)", strerror(errno));
        return 0;
    }
    shmctl(id, IPC_RMID, NULL);
    return 1;
}

/* Leaves out the shared-memory transports this machine refuses, unless the
 * user chose UCX_TLS. */
static void choose_transports(ucp_config_t *cfg)
{
    const char *user = getenv("UCX_TLS");
    if (user && *user) {
        MSR_DEBUG("comm: UCX_TLS=%s set by the user", user);
        return;
    }
    char tls[64] = "", why[160];
    if (!cma_usable(why, sizeof why)) {
        MSR_DEBUG("comm: not using cma: %s", why);
        strcat(tls, ",cma");
    }
    if (!posix_shm_usable(why, sizeof why)) {
        MSR_DEBUG("comm: not using posix shared memory: %s", why);
        strcat(tls, ",posix");
    }
    if (!sysv_shm_usable(why, sizeof why)) {
        MSR_DEBUG("comm: not using sysv shared memory: %s", why);
        strcat(tls, ",sysv");
    }
    if (tls[0]) {
        tls[0] = '^'; /* "^cma,posix": everything but these */
        if (ucp_config_modify(cfg, "TLS", tls) != UCS_OK)
            MSR_WARN("comm: cannot set UCX_TLS=%s", tls);
        else
            MSR_DEBUG("comm: UCX_TLS=%s", tls);
    }
}

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
static void rebuild_pollfds(ucx_engine_t *e);

/* This process's PID namespace (0 when unknown). */
static uint64_t pid_namespace(void)
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
    rebuild_pollfds(e);
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

/* ---- the engine ---- */

static void rebuild_pollfds(ucx_engine_t *e)
{
    e->n_pfds = 1;
    e->pfds[0] = (struct pollfd){.fd = e->efd, .events = POLLIN};
    e->pfd_peer[0] = -1;
    for (int i = 0; i < e->world_size; i++) {
        ucx_peer_t *p = &e->peers[i];
        if (p->member && p->pidfd >= 0 && !p->dead) {
            e->pfds[e->n_pfds] = (struct pollfd){.fd = p->pidfd, .events = POLLIN};
            e->pfd_peer[e->n_pfds] = i;
            e->n_pfds++;
        }
    }
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
        return MSR_ERR_NO_MEMORY;
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
        return MSR_ERR_NO_MEMORY;
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

/* The address exchange (docs/comm.md): each member publishes its worker
 * address as entry `index` of the engine's name (the node's proxy sends a
 * node's members up as one call), and a member fetches a peer's address
 * when it first needs an endpoint to it (ucx_engine_ep): nobody receives
 * every member's address. What each member needs of every other up front
 * is known without the network: its node (job ranks are contiguous per
 * node, local_size each). This node's members are fetched at once, in one
 * call: their pids watch their liveness, and shared memory needs them all. */
static msr_status_t exchange_addresses(ucx_engine_t *e, int n, const int *world_ranks, int index,
                                       const void *addr, size_t addr_len)
{
    msr_status_t st = MSR_ERR_NO_MEMORY;
    size_t len = sizeof(addr_head_t) + addr_len;
    unsigned char *mine = msr_malloc(len);
    ucx_peer_t **local_peers = msr_malloc((size_t)n * sizeof *local_peers);
    if (mine == NULL || local_peers == NULL)
        goto err_free;
    addr_head_t head = {ADDR_MAGIC,  (uint32_t)getpid(), e->my_node,
                        e->my_world, e->my_host,         e->my_pidns};
    my_cpus(head.cpus);
    memcpy(e->node_cpus, head.cpus, sizeof e->node_cpus);
    memcpy(mine, &head, sizeof head);
    memcpy(mine + sizeof head, addr, addr_len);
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
        if (other_nodes)
            st = count_host_ranks(e, n, index, local, first_local);
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

/* Waiting: poll for spin_ns, then poll and sched_yield until yield_ns, then
 * sleep on the event fd. With a core per rank, yielding only hands the core
 * to unrelated work and sleeping costs a scheduler wake-up (milliseconds on
 * a busy machine): poll for long. With more ranks on this machine than cores
 * (counting every msrun "node" the machine runs), the core is what the peers
 * need: yield at once, sleep soon. With more than two ranks a core, sleep at
 * once: the scheduler keeps a yielding rank's fair share of the core, so
 * yielding costs the ranks that compute about what polling would
 * (docs/comm.md, "Progress and waiting"). */
static int set_waiting(ucx_engine_t *e)
{
    int ranks = e->host_ranks > e->local_size ? e->host_ranks : e->local_size;
    int cpus = ucx_engine_cpus(e);
    int oversubscribed = ranks > cpus, crowded = ranks > 2 * cpus;
    e->spin_ns =
        (uint64_t)msr_env_i64("MSR_COMM_SPIN_US", oversubscribed ? 0 : 20000, 0, INT32_MAX) * 1000;
    e->yield_ns = (uint64_t)msr_env_i64("MSR_COMM_YIELD_US", oversubscribed && !crowded ? 1000 : 0,
                                        0, INT32_MAX) *
                  1000;
    e->yield_ns += e->spin_ns; /* the yield phase follows the spin phase */
    /* Shared-memory operations cannot wake a sleeper (a nap is a blind
     * millisecond), and their waits are short hand-offs between members
     * that time-share the cores: yield longer before napping. */
    e->shm_yield_ns =
        (uint64_t)msr_env_i64("MSR_COMM_SHM_YIELD_US", oversubscribed ? 5000 : 0, 0, INT32_MAX) *
            1000 +
        e->spin_ns;
    if (e->shm_yield_ns < e->yield_ns)
        e->shm_yield_ns = e->yield_ns;
    return ranks;
}

/* Frees what engine_new made. */
static void engine_free_bare(ucx_engine_t *e)
{
    msr_free(e->pfd_peer);
    msr_free(e->pfds);
    msr_free(e->peers);
    msr_free(e->uid);
    msr_free(e);
}

/* An engine of n members with its peers' table and lock, without UCX
 * yet; NULL when out of memory. */
static ucx_engine_t *engine_new(msr_ctx_t *ctx, const char *uid, int n)
{
    ucx_engine_t *e = msr_calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    e->ctx = ctx;
    e->efd = -1;
    e->world_size = msr_world_size(ctx);
    e->my_world = msr_rank(ctx);
    e->my_node = msr_node_rank(ctx);
    e->my_host = msr_host_id();
    e->my_pidns = pid_namespace();
    e->host_shm = (int)msr_env_i64("MSR_COMM_HOST_SHM", 1, 0, 1);
    e->local_size = msr_local_world_size(ctx);
    e->next_comm_id = 1;
    msr_list_init(&e->active);
    msr_list_init(&e->comms);
    msr_list_init(&e->free_reqs);
    e->uid = msr_strdup(uid);
    e->peers = msr_calloc((size_t)e->world_size, sizeof *e->peers);
    e->pfds = msr_calloc((size_t)n + 1, sizeof *e->pfds);
    e->pfd_peer = msr_calloc((size_t)n + 1, sizeof *e->pfd_peer);
    if (e->uid == NULL || e->peers == NULL || e->pfds == NULL || e->pfd_peer == NULL ||
        pthread_mutex_init(&e->lock, NULL) != 0) {
        engine_free_bare(e);
        return NULL;
    }
    for (int i = 0; i < e->world_size; i++) {
        e->peers[i].engine = e;
        e->peers[i].world_rank = i;
        e->peers[i].pidfd = -1;
        e->peers[i].node = i / e->local_size;
    }
    return e;
}

static msr_status_t ucs_failed(const char *what, ucs_status_t us)
{
    msr_err_set("comm: %s: %s", what, ucs_status_string(us));
    return MSR_ERR_BACKEND;
}

/* UCX's context and this engine's worker, with its event descriptor; on
 * failure nothing of them is left. */
static msr_status_t ucx_open(ucx_engine_t *e, int n)
{
    uint64_t t0 = msr_now_ns();
    ucp_config_t *cfg = NULL;
    ucs_status_t us = ucp_config_read(NULL, NULL, &cfg);
    if (us != UCS_OK)
        return ucs_failed("ucp_config_read", us);
    choose_transports(cfg);
    ucp_params_t prm = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_ESTIMATED_NUM_PPN,
        .features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP,
        .mt_workers_shared = 0,
        .estimated_num_eps = (size_t)n,
        .estimated_num_ppn = (size_t)e->local_size,
    };
    us = ucp_init(&prm, cfg, &e->context);
    ucp_config_release(cfg);
    if (us != UCS_OK)
        return ucs_failed("ucp_init", us);
    msr_lprof_note(MSR_LPROF_UCX_CONTEXT, t0);
    t0 = msr_now_ns();
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED, /* our lock serializes every call */
    };
    us = ucp_worker_create(e->context, &wp, &e->worker);
    if (us != UCS_OK) {
        ucp_cleanup(e->context);
        return ucs_failed("ucp_worker_create", us);
    }
    us = ucp_worker_get_efd(e->worker, &e->efd);
    if (us != UCS_OK) {
        ucp_worker_destroy(e->worker);
        ucp_cleanup(e->context);
        return ucs_failed("ucp_worker_get_efd", us);
    }
    msr_lprof_note(MSR_LPROF_UCX_WORKER, t0);
    return MSR_OK;
}

msr_status_t ucx_engine_create(msr_ctx_t *ctx, const char *uid, int n, const int *world_ranks,
                               ucx_engine_t **engine_p)
{
    ucx_engine_t *e = engine_new(ctx, uid, n);
    if (e == NULL)
        return MSR_ERR_NO_MEMORY;
    msr_status_t st = ucx_open(e, n);
    if (st != MSR_OK)
        goto err_bare;
    ucp_address_t *addr = NULL;
    size_t addr_len = 0;
    ucs_status_t us = ucp_worker_get_address(e->worker, &addr, &addr_len);
    if (us != UCS_OK) {
        st = ucs_failed("ucp_worker_get_address", us);
        goto err_ucx;
    }
    int index = -1;
    for (int i = 0; i < n; i++)
        if (world_ranks[i] == e->my_world)
            index = i;
    st = exchange_addresses(e, n, world_ranks, index, addr, addr_len);
    ucp_worker_release_address(e->worker, addr);
    if (st != MSR_OK)
        goto err_peers;
    rebuild_pollfds(e);
    e->refs = 1;
    int ranks = set_waiting(e);
    MSR_DEBUG("comm: engine %s: %d members, %d ranks on this machine's %d cores: a wait polls "
              "%llu us, yields until %llu us (%llu us in shared memory), then sleeps",
              e->uid, n, ranks, ucx_engine_cpus(e), (unsigned long long)(e->spin_ns / 1000),
              (unsigned long long)(e->yield_ns / 1000),
              (unsigned long long)(e->shm_yield_ns / 1000));
    *engine_p = e;
    return MSR_OK;

err_peers:
    for (int i = 0; i < e->world_size; i++) {
        if (e->peers[i].pidfd >= 0)
            close(e->peers[i].pidfd);
        msr_free(e->peers[i].addr);
    }
err_ucx:
    ucp_worker_destroy(e->worker);
    ucp_cleanup(e->context);
err_bare:
    pthread_mutex_destroy(&e->lock);
    engine_free_bare(e);
    return st;
}

void ucx_engine_orphan(ucx_engine_t *e, void *ucp_req)
{
    if (e->n_orphans == e->cap_orphans) {
        size_t cap = e->cap_orphans ? 2 * e->cap_orphans : 16;
        void **p = msr_realloc_array(e->orphans, cap, sizeof *p);
        if (p == NULL) {
            /* Cannot track it: let UCX free it whenever it finishes. */
            ucp_request_free(ucp_req);
            return;
        }
        e->orphans = p;
        e->cap_orphans = cap;
    }
    e->orphans[e->n_orphans++] = ucp_req;
}

void ucx_engine_bury(ucx_engine_t *e, void *mem)
{
    if (mem == NULL)
        return;
    if (e->n_graveyard == e->cap_graveyard) {
        size_t cap = e->cap_graveyard ? 2 * e->cap_graveyard : 16;
        void **p = msr_realloc_array(e->graveyard, cap, sizeof *p);
        if (p == NULL)
            return; /* leaked rather than freed under a transfer */
        e->graveyard = p;
        e->cap_graveyard = cap;
    }
    e->graveyard[e->n_graveyard++] = mem;
}

static void reap_orphans(ucx_engine_t *e)
{
    size_t k = 0;
    for (size_t i = 0; i < e->n_orphans; i++) {
        if (ucp_request_check_status(e->orphans[i]) != UCS_INPROGRESS)
            ucp_request_free(e->orphans[i]);
        else
            e->orphans[k++] = e->orphans[i];
    }
    e->n_orphans = k;
}

/* Receives and drops the notices (left, abort) that arrived for
 * communicators already gone, so that UCX has no unmatched message to warn
 * about when the worker goes. */
static void drain_notices(ucx_engine_t *e)
{
    ucp_tag_recv_info_t info;
    int64_t sink[2];
    ucp_request_param_t prm = {.op_attr_mask = 0};
    for (int i = 0; i < 1 << 16; i++) {
        ucp_tag_message_h m =
            ucp_tag_probe_nb(e->worker, ucx_tag(UCX_TAG_CTRL, 0, 0, 0), ~0ull << 62, 1, &info);
        if (m == NULL)
            return;
        void *h = ucp_tag_msg_recv_nbx(e->worker, sink, sizeof sink, m, &prm);
        if (UCS_PTR_IS_ERR(h))
            return;
        uint64_t deadline = msr_deadline_in_ms(100);
        while (h != NULL && ucp_request_check_status(h) == UCS_INPROGRESS &&
               !msr_deadline_passed(deadline))
            ucp_worker_progress(e->worker);
        if (h != NULL) {
            if (ucp_request_check_status(h) == UCS_INPROGRESS)
                return; /* leave it to ucp_worker_destroy */
            ucp_request_free(h);
        }
    }
}

/* Closes the endpoints: flushed to live peers, by force to lost peers where
 * UCX allows it (error mode PEER), never waiting past a short bound. The
 * endpoints of lost peers on this node (error mode NONE) are left to
 * ucp_worker_destroy. */
static void close_endpoints(ucx_engine_t *e)
{
    void **reqs = msr_calloc((size_t)e->world_size, sizeof *reqs);
    uint64_t deadline = msr_deadline_in_ms(msr_env_i64("MSR_COMM_CLOSE_MS", 1000, 0, 600000));
    for (int i = 0; i < e->world_size; i++) {
        ucx_peer_t *p = &e->peers[i];
        if (p->ep == NULL || (p->dead && !p->peer_mode))
            continue;
        /* After a failure, requests may be stuck on live peers too (a peer
         * that gave up never answers): a PEER-mode endpoint is then closed
         * by force, which completes them; UCX would assert on destroying an
         * endpoint with requests still queued. */
        int force = p->dead || (e->saw_failure && p->peer_mode);
        ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                   .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
        void *h = ucp_ep_close_nbx(p->ep, &prm);
        p->ep = NULL;
        if (!UCS_PTR_IS_PTR(h))
            continue;
        if (reqs)
            reqs[i] = h;
        else
            ucx_engine_orphan(e, h);
    }
    int pending = reqs != NULL;
    while (pending && !msr_deadline_passed(deadline)) {
        ucp_worker_progress(e->worker);
        pending = 0;
        for (int i = 0; i < e->world_size; i++) {
            if (reqs[i] && ucp_request_check_status(reqs[i]) != UCS_INPROGRESS) {
                ucp_request_free(reqs[i]);
                reqs[i] = NULL;
            }
            pending |= reqs[i] != NULL;
        }
    }
    for (int i = 0; reqs && i < e->world_size; i++)
        if (reqs[i])
            ucp_request_free(reqs[i]); /* UCX lets go of it when it ends */
    msr_free(reqs);
}

void ucx_engine_unref(ucx_engine_t *e)
{
    ucx_engine_lock(e);
    int last = --e->refs == 0;
    ucx_engine_unlock(e);
    if (!last)
        return;
    MSR_DEBUG("comm: engine %s: %llu waits, %llu sleeps (%llu ended by the timer), %.1f ms "
              "asleep",
              e->uid, (unsigned long long)e->stat_waits, (unsigned long long)e->stat_sleeps,
              (unsigned long long)e->stat_sleep_timeouts, (double)e->stat_slept_ns / 1e6);
    reap_orphans(e);
    close_endpoints(e);
    drain_notices(e);
    for (size_t i = 0; i < e->n_orphans; i++)
        ucp_request_free(e->orphans[i]);
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &e->free_reqs)
    {
        msr_list_remove(pos);
        ucx_req_t *r = MSR_CONTAINER_OF(pos, ucx_req_t, link);
        msr_free(r);
    }
    ucp_worker_destroy(e->worker);
    ucp_cleanup(e->context);
    for (size_t i = 0; i < e->n_graveyard; i++)
        msr_free(e->graveyard[i]);
    for (int i = 0; i < e->world_size; i++) {
        if (e->peers[i].pidfd >= 0)
            close(e->peers[i].pidfd);
        msr_free(e->peers[i].addr);
    }
    pthread_mutex_destroy(&e->lock);
    msr_free(e->graveyard);
    msr_free(e->orphans);
    msr_free(e->pfd_peer);
    msr_free(e->pfds);
    msr_free(e->peers);
    msr_free(e->uid);
    msr_free(e);
}

/* ---- failures ---- */

/* Did the member with this job rank say it left the communicator? */
static int has_left(const ucx_comm_t *uc, int world_rank)
{
    for (int i = 0; i < uc->comm->size; i++)
        if (uc->comm->world_ranks[i] == world_rank)
            return uc->left[i];
    return 0;
}

static int is_member(const ucx_comm_t *uc, int world_rank)
{
    for (int i = 0; i < uc->comm->size; i++)
        if (uc->comm->world_ranks[i] == world_rank)
            return 1;
    return 0;
}

/* What every request does when it leaves the running list. */
static void req_leave(ucx_req_t *r)
{
    msr_list_remove(&r->link);
    if (r->shm) {
        r->shm = 0;
        r->uc->engine->shm_active--;
    }
}

void ucx_req_done(ucx_req_t *r)
{
    req_leave(r);
}

void ucx_req_fail(ucx_req_t *r, msr_status_t st, const char *fmt, ...)
{
    if (r->pub.status != MSR_IN_PROGRESS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->pub.error, sizeof r->pub.error, fmt, ap);
    va_end(ap);
    ucx_engine_t *e = r->uc->engine;
    /* Operations in flight may still be read or written by UCX: receives are
     * canceled, every handle is kept until UCX is done with it, and so is
     * scratch memory they may touch. */
    int orphaned = 0;
    for (int i = 0; i < r->nops; i++) {
        ucx_op_t *op = &r->ops[i];
        if (op->h == NULL)
            continue;
        if (op->recv)
            ucp_request_cancel(e->worker, op->h);
        ucx_engine_orphan(e, op->h);
        op->h = NULL;
        orphaned = 1;
    }
    r->nops = 0;
    if (orphaned && r->scratch_from == 2) {
        ucx_engine_bury(e, r->scratch);
        r->scratch = NULL;
        r->scratch_from = 0;
    } else if (orphaned && r->scratch_from == 1) {
        /* the comm's cache block: leave it to the graveyard, the comm forgets it */
        ucx_engine_bury(e, r->scratch);
        r->uc->cache = NULL;
        r->uc->cache_len = 0;
        r->uc->cache_busy = 0;
        r->scratch = NULL;
        r->scratch_from = 0;
    }
    r->pub.status = st;
    req_leave(r);
    if (st != MSR_ERR_CANCELED && st != MSR_ERR_INVALID_ARG && st != MSR_ERR_TRUNCATED)
        ucx_comm_fail(r->uc, st, -1, "%s", r->pub.error);
}

/* Tells the other members that this communicator failed, so that they stop
 * waiting for this rank. Fire and forget: the sends become orphans. */
static void send_aborts(ucx_comm_t *uc, msr_status_t st, int culprit)
{
    ucx_engine_t *e = uc->engine;
    int64_t *msg = msr_malloc(2 * sizeof(int64_t));
    if (msg == NULL)
        return;
    msg[0] = st;
    msg[1] = culprit;
    ucx_engine_bury(e, msg);
    for (int i = 0; i < uc->comm->size; i++) {
        ucx_peer_t *p = uc->peer[i];
        if (i == uc->comm->rank || p->dead)
            continue;
        ucp_ep_h ep = ucx_engine_ep(e, p);
        if (ep == NULL)
            continue;
        ucp_request_param_t prm = {.op_attr_mask = 0};
        void *h = ucp_tag_send_nbx(ep, msg, 2 * sizeof(int64_t),
                                   ucx_tag(UCX_TAG_CTRL, uc->id, uc->comm->rank, 0), &prm);
        if (UCS_PTR_IS_PTR(h))
            ucx_engine_orphan(e, h);
    }
}

void ucx_comm_say_left(ucx_comm_t *uc)
{
    if (uc->comm->size > 1)
        send_aborts(uc, MSR_OK, uc->comm->rank);
}

void ucx_comm_fail(ucx_comm_t *uc, msr_status_t st, int culprit, const char *fmt, ...)
{
    if (st != MSR_ERR_CANCELED)
        uc->engine->saw_failure = 1;
    if (!msr_comm_break(uc->comm, st))
        return; /* broken before: the first failure did the rest */
    char why[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (uc->closed)
        return;
    MSR_DEBUG("comm %u: broken: %s", uc->id, why);
    if (st != MSR_ERR_CANCELED)
        send_aborts(uc, st, culprit);
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &uc->engine->active)
    {
        ucx_req_t *r = MSR_CONTAINER_OF(pos, ucx_req_t, link);
        if (r->uc == uc) /* the message says which operation it ended */
            ucx_req_fail(r, st, "%s: %s", r->algo ? r->algo : "comm", why);
    }
}

/* A death noticed by a callback or a pidfd reaches every communicator that
 * has the peer as a member. */
static void handle_deaths(ucx_engine_t *e)
{
    e->dead_pending = 0;
    int changed = 0;
    for (int i = 0; i < e->world_size; i++) {
        ucx_peer_t *p = &e->peers[i];
        if (!p->dead || p->dead_noted)
            continue;
        p->dead_noted = 1;
        changed = 1;
        MSR_DEBUG("comm: job rank %d (pid %d) is lost", p->world_rank, p->pid);
        msr_list_t *pos, *tmp;
        msr_list_for_each_safe(pos, tmp, &e->comms)
        {
            ucx_comm_t *uc = MSR_CONTAINER_OF(pos, ucx_comm_t, link);
            if (is_member(uc, p->world_rank) && !has_left(uc, p->world_rank))
                ucx_comm_fail(uc, MSR_ERR_PEER_LOST, p->world_rank,
                              "peer lost: job rank %d (pid %d) died or disconnected", p->world_rank,
                              p->pid);
        }
    }
    if (changed)
        rebuild_pollfds(e);
}

static void handle_aborts(ucx_engine_t *e)
{
    e->abort_pending = 0;
    msr_list_t *pos, *tmp;
    msr_list_for_each_safe(pos, tmp, &e->comms)
    {
        ucx_comm_t *uc = MSR_CONTAINER_OF(pos, ucx_comm_t, link);
        if (!uc->abort_arrived)
            continue;
        uc->abort_arrived = 0;
        msr_status_t st = (msr_status_t)uc->abort_in[0];
        if (st == MSR_OK) {
            /* a member destroyed the communicator cleanly: its exit is not
             * a failure here; listen for the next notice */
            int64_t who = uc->abort_in[1];
            if (who >= 0 && who < uc->comm->size)
                uc->left[who] = 1;
            ucp_request_free(uc->abort_req);
            uc->abort_req = NULL;
            if (!uc->closed && ucx_post_abort_recv(uc) != MSR_OK)
                MSR_DEBUG("comm %u: cannot post the abort receive again", uc->id);
            continue;
        }
        if (st >= 0 || st == MSR_ERR_CANCELED)
            st = MSR_ERR_PEER_LOST;
        ucx_comm_fail(uc, st, (int)uc->abort_in[1],
                      "a member gave up on the communicator (%s%s%lld)", msr_status_str(st),
                      uc->abort_in[1] >= 0 ? ", lost job rank " : "",
                      uc->abort_in[1] >= 0 ? (long long)uc->abort_in[1] : 0ll);
    }
}

/* Polls the pidfds of the local members without blocking. */
static void check_liveness(ucx_engine_t *e)
{
    if (e->n_pfds <= 1)
        return;
    int n = poll(e->pfds + 1, (nfds_t)(e->n_pfds - 1), 0);
    if (n <= 0)
        return;
    for (int i = 1; i < e->n_pfds; i++)
        if (e->pfds[i].revents) {
            e->peers[e->pfd_peer[i]].dead = 1;
            e->dead_pending = 1;
        }
}

/* Peers without a pidfd (old kernels) are polled with kill(pid, 0). */
static void check_liveness_slow(ucx_engine_t *e)
{
    for (int i = 0; i < e->world_size; i++) {
        ucx_peer_t *p = &e->peers[i];
        if (p->member && !p->dead && p->pidfd < 0 && p->node == e->my_node && i != e->my_world &&
            kill(p->pid, 0) != 0 && errno == ESRCH) {
            p->dead = 1;
            e->dead_pending = 1;
        }
    }
}

/* ---- progress ---- */

/* One round: UCX's progress, news of failures, then every running request.
 * Returns nonzero when anything happened. Called with the lock held. */
static int progress_all(ucx_engine_t *e)
{
    /* One call: as soon as something moved, the steps look at it (the wait
     * loop comes back for more). */
    int events = (int)ucp_worker_progress(e->worker);
    /* UCX requests only finish inside ucp_worker_progress (or inside the
     * step that posts them, which then carries on by itself): with nothing
     * progressed, the steps have nothing new to see. */
    if (events == 0 && !e->dead_pending && !e->abort_pending && !e->shm_active)
        return 0;
    /* notices first: a member that said it left and then exited is not lost */
    if (e->abort_pending)
        handle_aborts(e);
    if (e->dead_pending)
        handle_deaths(e);
    /* A request that ends leaves the list, and one that fails may take
     * others of its communicator with it: start over after each. */
    msr_list_t *pos;
restart:
    for (pos = e->active.next; pos != &e->active; pos = pos->next) {
        ucx_req_t *r = MSR_CONTAINER_OF(pos, ucx_req_t, link);
        msr_status_t st = r->step(r);
        if (st == MSR_IN_PROGRESS)
            continue;
        events++;
        if (st == MSR_OK) {
            r->pub.status = MSR_OK;
            ucx_req_done(r);
        } else {
            ucx_req_fail(r, st, "%s: %s", r->algo,
                         r->pub.error[0] ? r->pub.error : msr_status_str(st));
        }
        goto restart;
    }
    if (e->n_orphans)
        reap_orphans(e);
    /* tiled shared-memory operations that moved are busy, not idle */
    events += e->shm_moved;
    e->shm_moved = 0;
    return events;
}

void ucx_engine_progress(ucx_engine_t *e)
{
    progress_all(e);
    uint64_t now = msr_now_ns();
    if (now >= e->next_liveness_ns) {
        e->next_liveness_ns = now + 50000000ull;
        check_liveness(e);
        check_liveness_slow(e);
        if (e->dead_pending)
            progress_all(e);
    }
}

/* Sleeps on the worker's event fd and the local members' pidfds, at most
 * until deadline. Called with the lock held; drops it while asleep. */
static void sleep_once(ucx_engine_t *e, uint64_t deadline)
{
    ucs_status_t us = ucp_worker_arm(e->worker);
    if (us == UCS_ERR_BUSY)
        return; /* events arrived meanwhile: progress again */
    if (us != UCS_OK) {
        MSR_DEBUG("comm: ucp_worker_arm: %s", ucs_status_string(us));
        return;
    }
    int64_t ms = msr_deadline_left_ms(deadline);
    /* With other threads in wait, one of them may take our wake-up, and
     * shared-memory operations wake nobody: nap briefly. Peers without
     * pidfds are checked every 100 ms. */
    int64_t cap = e->waiters > 1 || e->shm_active ? 1 : 100;
    if (ms > cap)
        ms = cap;
    int nfds = e->n_pfds;
    struct pollfd fds[nfds > 0 ? nfds : 1];
    int peer_of[nfds > 0 ? nfds : 1];
    memcpy(fds, e->pfds, (size_t)nfds * sizeof *fds);
    memcpy(peer_of, e->pfd_peer, (size_t)nfds * sizeof *peer_of);
    ucx_engine_unlock(e);
    uint64_t t0 = msr_now_ns();
    int n = poll(fds, (nfds_t)nfds, (int)ms);
    uint64_t slept = msr_now_ns() - t0;
    ucx_engine_lock(e);
    e->stat_sleeps++;
    e->stat_slept_ns += slept;
    if (n == 0)
        e->stat_sleep_timeouts++;
    if (n > 0)
        for (int i = 1; i < nfds; i++)
            if (fds[i].revents) {
                e->peers[peer_of[i]].dead = 1;
                e->dead_pending = 1;
            }
}

msr_status_t ucx_engine_wait(ucx_engine_t *e, ucx_req_t *r)
{
    ucx_engine_lock(e);
    msr_status_t st = ucx_engine_wait_locked(e, r);
    ucx_engine_unlock(e);
    return st;
}

msr_status_t ucx_engine_wait_locked(ucx_engine_t *e, ucx_req_t *r)
{
    e->waiters++;
    e->stat_waits++;
    uint64_t idle_since = 0; /* when the current stretch without events began */
    unsigned iter = 0;
    int yielding = 0; /* in the second phase of the current idle stretch */
    while (r->pub.status == MSR_IN_PROGRESS) {
        int events = progress_all(e);
        if (r->pub.status != MSR_IN_PROGRESS)
            break;
        /* The clock is read every 16 rounds (a short wait never reads it). */
        if ((++iter & 15) != 0) {
            if (events)
                idle_since = 0;
            else if (idle_since != 0 && yielding)
                sched_yield();
            continue;
        }
        uint64_t now = msr_now_ns();
        if (r->pub.deadline == MSR_DEADLINE_LAZY)
            r->pub.deadline = msr_deadline_in_ms(atomic_load(&r->uc->comm->timeout_ms));
        if (now >= r->pub.deadline) {
            ucx_req_fail(r, MSR_ERR_TIMEOUT, "%s: deadline passed after %lld ms", r->algo,
                         (long long)atomic_load(&r->uc->comm->timeout_ms));
            break;
        }
        if (now >= e->next_liveness_ns) {
            e->next_liveness_ns = now + 50000000ull;
            check_liveness(e);
            check_liveness_slow(e);
        }
        if (atomic_load_explicit(&e->contenders, memory_order_relaxed) > 0) {
            /* another thread wants the engine: let it post its work */
            ucx_engine_unlock(e);
            sched_yield();
            ucx_engine_lock(e);
        }
        if (events) {
            idle_since = 0;
            yielding = 0;
            continue;
        }
        if (idle_since == 0)
            idle_since = now;
        uint64_t idle = now - idle_since;
        if (idle >= (e->shm_active ? e->shm_yield_ns : e->yield_ns)) {
            sleep_once(e, r->pub.deadline);
            idle_since = 0;
            yielding = 0;
        } else {
            yielding = idle >= e->spin_ns; /* phase two: let the core go */
            if (yielding)
                sched_yield();
        }
    }
    e->waiters--;
    return r->pub.status;
}
