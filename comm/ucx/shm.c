/* The shared-memory paths of a group whose members are all on this node:
 * one segment per communicator with, per member, a sequence word on its own
 * cache line and two data slots for small collectives and barriers
 * (shm_slots.c runs them), two lined areas where vectors of 17 to
 * 128 bytes travel with the operation's number in every line (shm_impl.h),
 * a ring of such lines for broadcasts of up to 56 bytes, and an area for the tiled path of larger
 * collectives (shm_tiles.c runs it). This file makes and maps the segment.
 * An allreduce
 * copies its input into its slot, publishes the operation's number, waits
 * until every member has published it, and folds the slots in rank order
 * (so every rank gets the same bits, as with the direct algorithm). No
 * message, no matching: the latency is a few cache-line transfers.
 *
 * Slots alternate between operations. Rank r writes slot (k & 1) for
 * operation k only after it finished operation k-1 itself and saw every
 * member publish k-1; a member publishes k-1 only after it finished
 * operation k-2, that is read the slots k shares: so nobody still reads the
 * slot being written. Several operations may be in flight (non-blocking
 * calls): each waits its turn in this order. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/ucx/shm_impl.h"
#include "comm/ucx/ucx_impl.h"

#define SHM_MAGIC 0x6d73626cu /* "msbl": with the lined, broadcast and tiled areas */

typedef struct shm_hdr {
    uint32_t magic;
    int32_t n;
    uint64_t slot;
    uint64_t lined;
    uint64_t bcast; /* lines of the lined broadcasts' rings (0: none) */
    uint64_t tile;
    uint64_t depth;
} shm_hdr_t;

/* /msr-<job>-g<generation>-<engine>-<comm id>-<first member>-<nonce>: the
 * nonce, random and chosen by the first member, makes the name unique among
 * jobs that share a job id (and hard to guess for anyone who would take it
 * first); job ids are cut down to safe characters. */
static void shm_name(const ucx_comm_t *uc, uint64_t nonce, char *buf, size_t len)
{
    char job[48];
    const char *j = msr_job_id(uc->engine->ctx);
    size_t k = 0;
    for (; j && *j && k + 1 < sizeof job; j++)
        if ((*j >= 'a' && *j <= 'z') || (*j >= 'A' && *j <= 'Z') || (*j >= '0' && *j <= '9') ||
            *j == '-' || *j == '_')
            job[k++] = *j;
    job[k] = '\0';
    snprintf(buf, len, "/msr-%s-g%d-%s-%u-%d-%016llx", job, msr_generation(uc->engine->ctx),
             uc->engine->uid, uc->id, uc->comm->world_ranks[0], (unsigned long long)nonce);
}

/* The last step, on every member whatever its own outcome: whether each
 * mapped the segment (*ok_io, agreed MIN) and whether each has its state
 * (s, allocated before, so that this agreement carries it: a member out of
 * memory fails every member at once, naming it, instead of going on alone
 * without the segment the others use). */
static msr_status_t shm_agree(ucx_comm_t *uc, const struct ucx_shm *s, int64_t *ok_io)
{
    msr_status_t mine = MSR_OK, worst = MSR_OK;
    int who = 0;
    if (*ok_io && s == NULL)
        mine = msr_err(MSR_ERR_NO_MEMORY, "comm %u: out of memory for its shared-memory segment",
                       uc->id);
    msr_status_t st = ucx_comm_agree_min(uc->comm, mine, ok_io, &worst, &who);
    if (st != MSR_OK || mine != MSR_OK)
        return st != MSR_OK ? st : mine;
    if (worst != MSR_OK)
        return msr_err(worst,
                       "comm %u: rank %d of the communicator (job rank %d) failed to set up its "
                       "shared-memory segment (%s)",
                       uc->id, who, uc->comm->world_ranks[who], msr_status_str(worst));
    return MSR_OK;
}

/* Members of several nodes share memory when every node is on this
 * machine (and PID namespace): agree on that first (the least and the
 * greatest machine), then watch the other nodes' members as this node's
 * (pidfds) before sharing a segment with them. Sets *usable_p. */
static msr_status_t shm_across_nodes(ucx_comm_t *uc, int *usable_p)
{
    msr_comm_t *comm = uc->comm;
    ucx_engine_t *e = uc->engine;
    int n = comm->size;
    *usable_p = 0;
    if (!e->host_shm)
        return MSR_OK;
    int64_t where = ucx_engine_machine(e), mine[2] = {where, -where}, all2[2];
    msr_status_t st = msr_comm_allreduce(comm, mine, all2, 2, MSR_DTYPE_I64, MSR_OP_MIN);
    uc->one_host = st == MSR_OK && all2[0] == -all2[1];
    if (!uc->one_host)
        return st;
    ucx_peer_t **others = msr_calloc((size_t)n, sizeof *others);
    int no = 0;
    for (int i = 0; others != NULL && i < n; i++)
        if (uc->peer[i]->node != e->my_node)
            others[no++] = uc->peer[i];
    int32_t watched = others != NULL && ucx_engine_watch_host(e, others, no), every = 0;
    msr_free(others);
    st = msr_comm_allreduce(comm, &watched, &every, 1, MSR_DTYPE_I32, MSR_OP_MIN);
    *usable_p = st == MSR_OK && every;
    return st;
}

/* More ranks on this machine than CPUs they may run on. A broadcast through the
 * slots waits for every member before each operation's root may write
 * (the slot's last readers must be done); when members time-share cores,
 * that is a round of context switches per broadcast, where the tree's
 * eager messages let the root run ahead (docs/performance.md, "Small
 * messages"). A group of two's lined vectors keep SHM_LINED_MAX there:
 * their lines cost more CPU than the slots' one copy, and members taking
 * turns on a core have no transfers for them to overlap. */
static int machine_crowded(const ucx_engine_t *e)
{
    int ranks = e->host_ranks > e->local_size ? e->host_ranks : e->local_size;
    return ranks > ucx_engine_cpus(e);
}

/* The segment's shape: slots of shm_max bytes, smaller in large groups
 * (the slots take at most MSR_COMM_SHM_SEGMENT bytes); lined areas for
 * vectors up to a slot or SHM_LINED_MAX (a group of two with a CPU for
 * each rank: MSR_COMM_SHM_LINED_PAIR, by default SHM_LINED_PAIR), whichever
 * is less; the lined broadcasts' ring
 * where there are slots; the tiled path's n
 * stages and a result of depth tiles each, smaller tiles in large groups
 * (the same limit), none when a tile would leave a member less than a
 * line. */
static shm_hdr_t shm_shape(const ucx_comm_t *uc, size_t *len_p)
{
    int n = uc->comm->size;
    size_t slot = uc->tune.shm_max;
    if (slot > uc->tune.shm_segment / (2 * (size_t)n))
        slot = uc->tune.shm_segment / (2 * (size_t)n);
    slot = slot / LINE * LINE;
    size_t most = n == 2 && !machine_crowded(uc->engine) ? uc->tune.shm_lined_pair : SHM_LINED_MAX;
    size_t lined = slot < most ? slot : most;
    if (lined <= SHM_INLINE)
        lined = 0;
    size_t tile = uc->tune.shm_tile / LINE * LINE;
    uint64_t depth = (uint64_t)uc->tune.shm_depth;
    while (tile && (size_t)(n + 1) * depth * tile > uc->tune.shm_segment)
        tile = tile / 2 / LINE * LINE;
    if (tile < (size_t)n * LINE)
        tile = 0;
    uint64_t bcast = slot ? (uint64_t)SHM_BCAST_WIDTH * SHM_BCAST_LINES : 0;
    *len_p = LINE + (size_t)n * sizeof(shm_ctl_t) + (size_t)n * 2 * slot +
             (size_t)n * 2 * shm_lines(lined) * LINE + (size_t)bcast * LINE +
             (tile ? (size_t)(n + 1) * depth * tile : 0);
    return (shm_hdr_t){SHM_MAGIC, n, slot, lined, bcast, tile, depth};
}

/* The first member makes the segment, its pages reserved now (a full
 * /dev/shm refuses here, not with a SIGBUS on first touch in the middle
 * of an operation) and its header written. MAP_FAILED when it cannot. */
static void *shm_make(const ucx_comm_t *uc, const char *name, size_t len, const shm_hdr_t *h)
{
    void *base = MAP_FAILED;
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    int err = 0;
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0 ||
        (err = posix_fallocate(fd, 0, (off_t)len)) != 0 ||
        (base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        if (err)
            errno = err;
        MSR_DEBUG("comm %u: no shared-memory segment %s: %s", uc->id, name, strerror(errno));
        base = MAP_FAILED;
    } else {
        memcpy(base, h, sizeof *h);
    }
    if (fd >= 0)
        close(fd);
    return base;
}

/* The others map it; *ok_p: it has the size and header this member
 * expects. */
static void *shm_map(const ucx_comm_t *uc, const char *name, size_t len, const shm_hdr_t *want,
                     int32_t *ok_p)
{
    void *base = MAP_FAILED;
    int fd = shm_open(name, O_RDWR, 0);
    struct stat sb;
    *ok_p = 0;
    if (fd < 0 || fstat(fd, &sb) != 0 || (size_t)sb.st_size != len ||
        (base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        MSR_DEBUG("comm %u: cannot map %s: %s", uc->id, name, strerror(errno));
        base = MAP_FAILED;
    } else {
        shm_hdr_t h;
        memcpy(&h, base, sizeof h);
        *ok_p = h.magic == want->magic && h.n == want->n && h.slot == want->slot &&
                h.lined == want->lined && h.bcast == want->bcast && h.tile == want->tile &&
                h.depth == want->depth;
    }
    if (fd >= 0)
        close(fd);
    return base;
}

msr_status_t ucx_shm_setup(ucx_comm_t *uc)
{
    msr_comm_t *comm = uc->comm;
    ucx_engine_t *e = uc->engine;
    int n = comm->size, me = comm->rank;
    uc->shm = NULL;
    uc->one_host = 0;
    if (n < 2 || (uc->tune.shm_max == 0 && uc->tune.shm_tile == 0))
        return MSR_OK;
    int spans = 0;
    for (int i = 0; i < n; i++)
        spans |= uc->peer[i]->node != e->my_node; /* the same answer on every member */
    if (spans) {
        int usable;
        msr_status_t st = shm_across_nodes(uc, &usable);
        if (st != MSR_OK || !usable)
            return st;
    }
    size_t len;
    shm_hdr_t shape = shm_shape(uc, &len);
    char name[200];
    /* offer[0]: whether the first member made the segment, offer[1]: the
     * nonce in its name; broadcast to the others, who then open it */
    int64_t offer[2] = {0, 0};
    int32_t ok = 1, all = 0;
    void *base = MAP_FAILED;
    if (me == 0) {
        uint64_t nonce;
        msr_random_bytes(&nonce, sizeof nonce);
        offer[1] = (int64_t)nonce;
        shm_name(uc, nonce, name, sizeof name);
        base = shm_make(uc, name, len, &shape);
        ok = base != MAP_FAILED;
    }
    offer[0] = ok;
    msr_status_t st = msr_comm_broadcast(comm, offer, 2, MSR_DTYPE_I64, 0);
    all = st == MSR_OK && offer[0] == 1;
    if (st == MSR_OK && all && me != 0) {
        shm_name(uc, (uint64_t)offer[1], name, sizeof name);
        base = shm_map(uc, name, len, &shape, &ok);
    }
    struct ucx_shm *s = NULL;
    if (st == MSR_OK && all) {
        s = msr_calloc(1, sizeof *s);
        int64_t every = ok;
        st = shm_agree(uc, s, &every);
        all = every == 1;
    }
    if (me == 0 && base != MAP_FAILED)
        shm_unlink(name); /* everyone has it mapped (or gave up): no file left */
    if (st != MSR_OK || !all) {
        msr_free(s);
        if (base != MAP_FAILED)
            munmap(base, len);
        return st; /* MSR_OK: the UCX algorithms serve this communicator */
    }
    size_t slot = shape.slot, tile = shape.tile;
    uint64_t depth = shape.depth;
    s->base = base;
    s->len = len;
    s->ctl = (shm_ctl_t *)((char *)base + LINE);
    s->slots = (char *)base + LINE + (size_t)n * sizeof(shm_ctl_t);
    s->slot = slot;
    s->lined = s->slots + (size_t)n * 2 * slot;
    s->lined_max = shape.lined;
    s->lined_area = shm_lines(shape.lined) * LINE;
    s->bcast = shape.bcast ? s->lined + (size_t)n * 2 * s->lined_area : NULL;
    s->stage = s->lined + (size_t)n * 2 * s->lined_area + (size_t)shape.bcast * LINE;
    s->result = s->stage + (size_t)n * depth * tile;
    s->tile = tile;
    s->depth = depth;
    s->n = n;
    uc->shm = s;
    uc->shm_slot = slot;
    uc->shm_own_cpus = !machine_crowded(e);
    uc->shm_tile = tile;
    MSR_DEBUG("comm %u: %d ranks share a %zu-byte segment (slots of %zu bytes, %llu tiles of "
              "%zu bytes)",
              uc->id, n, len, slot, (unsigned long long)depth, tile);
    return MSR_OK;
}

void ucx_shm_free(ucx_comm_t *uc)
{
    if (uc->shm == NULL)
        return;
    munmap(uc->shm->base, uc->shm->len);
    msr_free(uc->shm);
    uc->shm = NULL;
}
