/* The shared-memory path for small collectives of a group whose members are
 * all on this node: one segment per communicator with, per member, a
 * sequence word on its own cache line and two data slots. An allreduce
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
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "comm/reduce.h"
#include "comm/ucx/ucx_impl.h"

#define SHM_MAGIC 0x6d737368u /* "mssh" */
#define LINE      64

typedef struct shm_hdr {
    uint32_t magic;
    int32_t n;
    uint64_t slot;
} shm_hdr_t;

typedef struct shm_ctl {
    _Atomic uint64_t seq; /* the last operation this member published */
    char pad[LINE - sizeof(uint64_t)];
} shm_ctl_t;

struct ucx_shm {
    void *base;
    size_t len;
    shm_ctl_t *ctl;
    char *slots;
    size_t slot;
    int n;
};

static char *slot_of(const struct ucx_shm *s, int rank, uint64_t k)
{
    return s->slots + ((size_t)rank * 2 + (size_t)(k & 1)) * s->slot;
}

/* /msr-<job>-<engine>-<comm id>-<first member>: unique in the job and
 * generation; job ids are cut down to safe characters. */
static void shm_name(const ucx_comm_t *uc, char *buf, size_t len)
{
    char job[48];
    const char *j = msr_job_id(uc->engine->ctx);
    size_t k = 0;
    for (; j && *j && k + 1 < sizeof job; j++)
        if ((*j >= 'a' && *j <= 'z') || (*j >= 'A' && *j <= 'Z') || (*j >= '0' && *j <= '9') ||
            *j == '-' || *j == '_')
            job[k++] = *j;
    job[k] = '\0';
    snprintf(buf, len, "/msr-%s-g%d-%s-%u-%d", job, msr_generation(uc->engine->ctx),
             uc->engine->uid, uc->id, uc->comm->world_ranks[0]);
}

/* Every member's ok, agreed (MIN) over the communicator's UCX path. */
static msr_status_t agree(ucx_comm_t *uc, int32_t ok, int32_t *all_p)
{
    return msr_comm_allreduce(uc->comm, &ok, all_p, 1, MSR_DTYPE_I32, MSR_OP_MIN);
}

msr_status_t ucx_shm_setup(ucx_comm_t *uc)
{
    msr_comm_t *comm = uc->comm;
    ucx_engine_t *e = uc->engine;
    int n = comm->size, me = comm->rank;
    uc->shm = NULL;
    if (n < 2 || uc->tune.shm_max == 0)
        return MSR_OK;
    for (int i = 0; i < n; i++)
        if (uc->peer[i]->node != e->my_node)
            return MSR_OK; /* the same answer on every member */
    /* Slots of shm_max bytes, smaller in large groups: a segment holds at
     * most MSR_COMM_SHM_SEGMENT bytes of slots. */
    size_t slot = uc->tune.shm_max;
    if (slot > uc->tune.shm_segment / (2 * (size_t)n))
        slot = uc->tune.shm_segment / (2 * (size_t)n);
    slot = slot / LINE * LINE;
    if (slot < LINE)
        return MSR_OK;
    size_t len = LINE + (size_t)n * sizeof(shm_ctl_t) + (size_t)n * 2 * slot;
    char name[160];
    shm_name(uc, name, sizeof name);

    int32_t ok = 1, all = 0;
    void *base = MAP_FAILED;
    if (me == 0) {
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 || ftruncate(fd, (off_t)len) != 0 ||
            (base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
            MSR_DEBUG("comm %u: no shared-memory segment %s: %s", uc->id, name, strerror(errno));
            ok = 0;
        } else {
            shm_hdr_t h = {SHM_MAGIC, n, slot};
            memcpy(base, &h, sizeof h);
        }
        if (fd >= 0)
            close(fd);
    }
    msr_status_t st = agree(uc, ok, &all);
    if (st == MSR_OK && all && me != 0) {
        int fd = shm_open(name, O_RDWR, 0);
        struct stat sb;
        shm_hdr_t h;
        if (fd < 0 || fstat(fd, &sb) != 0 || (size_t)sb.st_size != len ||
            (base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
            MSR_DEBUG("comm %u: cannot map %s: %s", uc->id, name, strerror(errno));
            ok = 0;
        } else {
            memcpy(&h, base, sizeof h);
            ok = h.magic == SHM_MAGIC && h.n == n && h.slot == slot;
        }
        if (fd >= 0)
            close(fd);
    }
    if (st == MSR_OK && all)
        st = agree(uc, ok, &all);
    if (me == 0 && base != MAP_FAILED)
        shm_unlink(name); /* everyone has it mapped (or gave up): no file left */
    struct ucx_shm *s = NULL;
    if (st == MSR_OK && all) {
        s = msr_calloc(1, sizeof *s);
        if (s == NULL)
            all = 0;
    }
    if (st != MSR_OK || !all) {
        if (base != MAP_FAILED)
            munmap(base, len);
        return st; /* MSR_OK: the UCX algorithms serve this communicator */
    }
    s->base = base;
    s->len = len;
    s->ctl = (shm_ctl_t *)((char *)base + LINE);
    s->slots = (char *)base + LINE + (size_t)n * sizeof(shm_ctl_t);
    s->slot = slot;
    s->n = n;
    uc->shm = s;
    uc->shm_slot = slot;
    MSR_DEBUG("comm %u: %d ranks share a %zu-byte segment (slots of %zu bytes)", uc->id, n, len,
              slot);
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

/* u[0]: this operation's number; u[1]: the first member not yet seen. */
msr_status_t ucx_shm_step(ucx_req_t *r)
{
    const struct ucx_shm *s = r->uc->shm;
    const msr_coll_args_t *a = &r->pub.args;
    const uint64_t k = r->u[0];
    if (r->pc == 0) {
        /* our turn: operation k-1 finished here and published everywhere */
        if (r->uc->shm_done != k - 1)
            return MSR_IN_PROGRESS;
        for (int j = (int)r->u[1]; j < r->n; j++) {
            if (atomic_load_explicit(&s->ctl[j].seq, memory_order_acquire) < k - 1) {
                r->u[1] = (uint64_t)j;
                return MSR_IN_PROGRESS;
            }
        }
        r->u[1] = 0;
        if (r->bytes)
            memcpy(slot_of(s, r->me, k), a->sendbuf, r->bytes);
        atomic_store_explicit(&s->ctl[r->me].seq, k, memory_order_release);
        r->pc = 1;
    }
    for (int j = (int)r->u[1]; j < r->n; j++) {
        if (atomic_load_explicit(&s->ctl[j].seq, memory_order_acquire) < k) {
            r->u[1] = (uint64_t)j;
            return MSR_IN_PROGRESS;
        }
    }
    if (a->coll == MSR_COLL_ALLREDUCE && r->bytes) {
        msr_reduce(a->op, a->dtype, a->recvbuf, slot_of(s, 0, k), slot_of(s, 1, k), a->count);
        for (int j = 2; j < r->n; j++)
            msr_reduce(a->op, a->dtype, a->recvbuf, a->recvbuf, slot_of(s, j, k), a->count);
        msr_reduce_finish(a->op, a->dtype, a->recvbuf, a->count, r->n);
    }
    r->uc->shm_done = k;
    return MSR_OK;
}
