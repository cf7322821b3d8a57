/* The UCX engine: a UCP context and worker, the worker addresses of the
 * group (exchanged through the store), endpoints made on first use, peer
 * liveness, and the progress loop that spins briefly and then sleeps on the
 * worker's event fd.
 *
 * This file holds the context, the worker and the engine's life; the
 * peers, their endpoints and the address exchange are in engine_peers.c,
 * failures and liveness in engine_fail.c, progress and waiting in
 * engine_progress.c (what they share: engine_impl.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/lprof.h"
#include "base/time.h"
#include "base/util.h"
#include "comm/ucx/engine_impl.h"
#include "base/err.h"
#include "base/hash.h"

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
 * user chose UCX_TLS. With node_only (every member on this node: a pair
 * of msr_comm_pairs) the worker gets shared memory alone: one mm transport
 * (posix, else sysv) and cma where usable, no network interface. Each
 * transport's interface costs the worker's creation CPU time (the mm ones
 * their receive queue), and a pair's endpoint uses only one. */
static void choose_transports(ucp_config_t *cfg, int node_only)
{
    const char *user = getenv("UCX_TLS");
    if (user && *user) {
        MSR_DEBUG("comm: UCX_TLS=%s set by the user", user);
        return;
    }
    char tls[64] = "", why[160];
    int cma = cma_usable(why, sizeof why);
    if (!cma) {
        MSR_DEBUG("comm: not using cma: %s", why);
        strcat(tls, ",cma");
    }
    int posix = posix_shm_usable(why, sizeof why);
    if (!posix) {
        MSR_DEBUG("comm: not using posix shared memory: %s", why);
        strcat(tls, ",posix");
    }
    int sysv = sysv_shm_usable(why, sizeof why);
    if (!sysv) {
        MSR_DEBUG("comm: not using sysv shared memory: %s", why);
        strcat(tls, ",sysv");
    }
    if (node_only && (posix || sysv)) {
        snprintf(tls, sizeof tls, "self,%s%s", posix ? "posix" : "sysv", cma ? ",cma" : "");
        if (ucp_config_modify(cfg, "TLS", tls) != UCS_OK)
            MSR_WARN("comm: cannot set UCX_TLS=%s", tls);
        return;
    }
    if (tls[0]) {
        tls[0] = '^'; /* "^cma,posix": everything but these */
        if (ucp_config_modify(cfg, "TLS", tls) != UCS_OK)
            MSR_WARN("comm: cannot set UCX_TLS=%s", tls);
        else
            MSR_DEBUG("comm: UCX_TLS=%s", tls);
    }
}

/* ---- the engine ---- */

void ucx_engine_rebuild_pollfds(ucx_engine_t *e)
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
    /* A rank whose calls wait on a thread of their own while another of
     * its threads computes (the torch backend's worker beside the
     * backward) takes its own core from that computation by polling long:
     * with a core per rank it polls 1 ms (a small call's answer comes
     * within it) and then yields, until the 20 ms it would have polled
     * (docs/comm.md, "Progress and waiting"). */
    int beside = !oversubscribed && msr_env_i64("MSR_COMM_BESIDE_COMPUTE", 0, 0, 1);
    int64_t spin_us = oversubscribed ? 0 : beside ? 1000 : 20000;
    int64_t yield_us = beside ? 19000 : oversubscribed && !crowded ? 1000 : 0;
    int64_t shm_yield_us = beside ? 19000 : oversubscribed ? 5000 : 0;
    e->spin_ns = (uint64_t)msr_env_i64("MSR_COMM_SPIN_US", spin_us, 0, INT32_MAX) * 1000;
    e->yield_ns = (uint64_t)msr_env_i64("MSR_COMM_YIELD_US", yield_us, 0, INT32_MAX) * 1000;
    e->yield_ns += e->spin_ns; /* the yield phase follows the spin phase */
    /* Shared-memory operations cannot wake a sleeper (a nap is a blind
     * millisecond), and their waits are short hand-offs between members
     * that time-share the cores: yield longer before napping. */
    e->shm_yield_ns =
        (uint64_t)msr_env_i64("MSR_COMM_SHM_YIELD_US", shm_yield_us, 0, INT32_MAX) * 1000 +
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
    e->my_pidns = ucx_engine_pid_namespace();
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
static msr_status_t ucx_open(ucx_engine_t *e, int n, int node_only)
{
    uint64_t t0 = msr_now_ns();
    ucp_config_t *cfg = NULL;
    ucs_status_t us = ucp_config_read(NULL, NULL, &cfg);
    if (us != UCS_OK)
        return ucs_failed("ucp_config_read", us);
    choose_transports(cfg, node_only);
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

msr_status_t ucx_engine_open(msr_ctx_t *ctx, const char *uid, int n, int node_only,
                             ucx_engine_t **engine_p)
{
    ucx_engine_t *e = engine_new(ctx, uid, n);
    if (e == NULL)
        return msr_err(MSR_ERR_NO_MEMORY, "comm: out of memory for an engine of %d members", n);
    msr_status_t st = ucx_open(e, n, node_only);
    if (st != MSR_OK) {
        pthread_mutex_destroy(&e->lock);
        engine_free_bare(e);
        return st;
    }
    *engine_p = e;
    return MSR_OK;
}

void ucx_engine_ready(ucx_engine_t *e, int n)
{
    ucx_engine_rebuild_pollfds(e);
    e->refs = 1;
    int ranks = set_waiting(e);
    MSR_DEBUG("comm: engine %s: %d members, %d ranks on this machine's %d cores: a wait polls "
              "%llu us, yields until %llu us (%llu us in shared memory), then sleeps",
              e->uid, n, ranks, ucx_engine_cpus(e), (unsigned long long)(e->spin_ns / 1000),
              (unsigned long long)(e->yield_ns / 1000),
              (unsigned long long)(e->shm_yield_ns / 1000));
}

void ucx_engine_discard(ucx_engine_t *e)
{
    if (e == NULL)
        return;
    for (int i = 0; i < e->world_size; i++) {
        if (e->peers[i].pidfd >= 0)
            close(e->peers[i].pidfd);
        msr_free(e->peers[i].addr);
    }
    ucp_worker_destroy(e->worker);
    ucp_cleanup(e->context);
    pthread_mutex_destroy(&e->lock);
    engine_free_bare(e);
}

msr_status_t ucx_engine_create(msr_ctx_t *ctx, const char *uid, int n, const int *world_ranks,
                               ucx_engine_t **engine_p)
{
    ucx_engine_t *e = NULL;
    msr_status_t st = ucx_engine_open(ctx, uid, n, 0, &e);
    if (st != MSR_OK)
        return st;
    ucp_address_t *addr = NULL;
    size_t addr_len = 0;
    ucs_status_t us = ucp_worker_get_address(e->worker, &addr, &addr_len);
    if (us != UCS_OK) {
        st = ucs_failed("ucp_worker_get_address", us);
        goto err_engine;
    }
    int index = -1;
    for (int i = 0; i < n; i++)
        if (world_ranks[i] == e->my_world)
            index = i;
    st = ucx_engine_exchange_addresses(e, n, world_ranks, index, addr, addr_len);
    ucp_worker_release_address(e->worker, addr);
    if (st != MSR_OK)
        goto err_engine;
    ucx_engine_ready(e, n);
    *engine_p = e;
    return MSR_OK;

err_engine:
    ucx_engine_discard(e);
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

void ucx_engine_reap_orphans(ucx_engine_t *e)
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

/* The most of a message the drain at close copies: a longer one is
 * received truncated, which takes it off UCX's queue just the same without
 * moving its data (a rendezvous is answered at once, whatever its sender's
 * state). */
#define DRAIN_MAX_BYTES 4096

/* Receives one probed message into a buffer of its own and waits for it
 * until the deadline; a receive still running then is left to UCX (its
 * request an orphan, its buffer in the graveyard). 0 when out of memory. */
static int drain_one(ucx_engine_t *e, ucp_tag_message_h m, size_t len, uint64_t deadline)
{
    ucp_request_param_t prm = {.op_attr_mask = 0};
    if (len > DRAIN_MAX_BYTES)
        len = DRAIN_MAX_BYTES;
    /* on the heap: a receive UCX still holds writes to it after we go */
    void *buf = msr_malloc(len ? len : 1);
    if (buf == NULL)
        return 0;
    void *h = ucp_tag_msg_recv_nbx(e->worker, buf, len, m, &prm);
    while (UCS_PTR_IS_PTR(h) && ucp_request_check_status(h) == UCS_INPROGRESS &&
           !msr_deadline_passed(deadline))
        ucp_worker_progress(e->worker);
    if (UCS_PTR_IS_PTR(h) && ucp_request_check_status(h) == UCS_INPROGRESS) {
        ucx_engine_orphan(e, h); /* freed before ucp_worker_destroy */
        ucx_engine_bury(e, buf); /* freed after it */
        return 1;
    }
    if (UCS_PTR_IS_PTR(h))
        ucp_request_free(h);
    msr_free(buf);
    return 1;
}

/* The longest message a member sends whole (eager) whatever UCX's
 * rendezvous threshold: its receive touches no endpoint. */
#define DRAIN_EAGER_BYTES 1024

/* 1 when a message with this tag and length is one the drain leaves to
 * UCX: a rendezvous-sized one once the endpoints are CLOSED, or from a
 * member lost to a communicator that broke on it (dead, or its operation
 * failed in UCX's transport). */
static int leave_it(const ucx_engine_t *e, uint64_t tag, size_t length, int closed)
{
    if (length <= DRAIN_EAGER_BYTES)
        return 0;
    if (closed)
        return 1;
    unsigned id = (unsigned)(tag >> 46) & UCX_MAX_COMM_ID;
    int src = ucx_tag_src(tag);
    for (size_t i = 0; i < e->n_lost_comms; i++) {
        const ucx_lost_comm_t *lc = &e->lost_comms[i];
        if (lc->id != id)
            continue;
        if (src >= lc->size)
            return 0;
        const ucx_peer_t *p = &e->peers[lc->world_ranks[src]];
        return p->dead || p->broke;
    }
    return 0;
}

/* The bits a message's sender is told by: class, communicator, sender. */
#define DRAIN_KEY_MASK (~0ull << UCX_TAG_SRC_SHIFT)

/* Receives and drops the messages left for this engine's communicators,
 * all closed by now, whose tags match TAG under MASK, so that UCX has none
 * to warn about when the worker goes ("unexpected tag-receive descriptor
 * ... was not matched"): notices (left, abort) that came after their
 * receive was gone, and the messages of operations that a failure ended
 * before this member received them (a broken communicator's collective,
 * its peers' parts already sent). The worker is progressed before each
 * probe: a message still in a transport's queue (shared memory's FIFO) is
 * in UCX's unexpected queue, where the probe looks, only after that; a
 * probe without it missed those, and the next progress (a receive of the
 * drain) brought them in too late for the probes before it. A probed
 * message is off UCX's queue whatever its receive's outcome, so a failed
 * receive ends only that one.
 *
 * Some messages are left to UCX (it drops them as the worker goes, with a
 * warning): those longer than a member surely sends whole, which may be a
 * rendezvous, once the endpoints are CLOSED, or from a lost member (see
 * leave_it). Receiving a rendezvous message makes UCX answer through an
 * endpoint it finds by the id the message carries: closed, that is freed
 * memory (with error mode NONE the id is its address), and a lost
 * member's may be one UCX let go of itself (seen after a ring's sender was
 * killed: rank 0's receive from it failed in CMA, and UCX asserted in the
 * drain's receive of the sender's next part). A probe can look without
 * taking, but a mask cannot leave one sender out, so where the first
 * message is one to leave the range is split on the next bit of its
 * sender's key and each half drained alone: the search goes down that
 * sender's key (38 bits) and takes everything beside it. Counts into
 * *NOTICES and *OTHERS; bounded by DEADLINE; 0 when out of memory. */
static int drain_messages(ucx_engine_t *e, uint64_t tag, uint64_t mask, int closed,
                          uint64_t deadline, int *notices, int *others)
{
    ucp_tag_recv_info_t info;
    for (int k = 0; k < 1 << 20 && !msr_deadline_passed(deadline); k++) {
        int spins = 0;
        while (spins++ < 1024 && ucp_worker_progress(e->worker) != 0)
            continue;
        if (ucp_tag_probe_nb(e->worker, tag, mask, 0, &info) == NULL)
            return 1;
        if (leave_it(e, info.sender_tag, info.length, closed)) {
            uint64_t open = DRAIN_KEY_MASK & ~mask;
            if (open == 0)
                return 1; /* only that sender's messages are here */
            uint64_t bit = 1ull << (63 - __builtin_clzll(open));
            return drain_messages(e, tag & ~bit, mask | bit, closed, deadline, notices, others) &&
                   drain_messages(e, tag | bit, mask | bit, closed, deadline, notices, others);
        }
        /* the same message: nothing progressed since the look */
        ucp_tag_message_h m = ucp_tag_probe_nb(e->worker, tag, mask, 1, &info);
        if (!drain_one(e, m, info.length, deadline))
            return 0; /* out of memory at exit: UCX warns of what is left */
        if ((info.sender_tag >> 62) == UCX_TAG_CTRL)
            (*notices)++;
        else
            (*others)++;
    }
    return 1;
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
    MSR_DEBUG("comm: engine %s: %llu waits, %llu idle rounds held the core, %llu yielded it, "
              "%llu sleeps (%llu ended by the timer), %.1f ms asleep",
              e->uid, (unsigned long long)e->stat_waits, (unsigned long long)e->stat_held,
              (unsigned long long)e->stat_yields, (unsigned long long)e->stat_sleeps,
              (unsigned long long)e->stat_sleep_timeouts, (double)e->stat_slept_ns / 1e6);
    ucx_engine_reap_orphans(e);
    /* Messages are drained while the endpoints stand (drain_messages says
     * why), the members' liveness looked at first so that the drain knows
     * who is lost; after the close, those a peer sent as it left, small
     * enough to come whole. */
    uint64_t t0 = msr_now_ns();
    uint64_t deadline = msr_deadline_in_ms(msr_env_i64("MSR_COMM_CLOSE_MS", 1000, 0, 600000));
    int notices = 0, others = 0;
    ucx_engine_lock(e);
    ucx_engine_check_liveness(e);
    ucx_engine_check_liveness_slow(e);
    ucx_engine_unlock(e);
    drain_messages(e, 0, 0, e->saw_loss, deadline, &notices, &others);
    close_endpoints(e);
    drain_messages(e, 0, 0, 1, deadline, &notices, &others);
    MSR_DEBUG("comm: engine %s: %d notices drained at its close (and %d messages of operations "
              "that ended without them) in %.3f ms",
              e->uid, notices, others, (double)(msr_now_ns() - t0) / 1e6);
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
    for (size_t i = 0; i < e->n_lost_comms; i++)
        msr_free(e->lost_comms[i].world_ranks);
    msr_free(e->lost_comms);
    msr_free(e->pfd_peer);
    msr_free(e->pfds);
    msr_free(e->peers);
    msr_free(e->uid);
    msr_free(e);
}
