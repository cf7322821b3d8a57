/* --bind-to (and --bind_core): which of this node's allowed CPUs each local
 * worker is bound to. msr_cpu_place is pure (a topology in, CPU sets out) so
 * that it is tested on machines this one is not; msr_cpu_plan describes the
 * real machine with hwloc (cpus_hwloc.c) and calls it. */
#ifndef MSR_MSRUN_CPUS_H
#define MSR_MSRUN_CPUS_H

#include <sched.h>

/* The values of --bind-to, in the order of its choices (options.c). */
typedef enum msr_bind {
    MSR_BIND_NONE = 0,
    MSR_BIND_CORE = 1,
    MSR_BIND_NUMA = 2,
} msr_bind_t;

/* One physical core. */
typedef struct msr_topo_core {
    int numa;      /* its NUMA node, 0..nnuma-1 */
    cpu_set_t pus; /* its hardware threads (processing units) */
} msr_topo_core_t;

/* What placement needs to know of a machine. Cores are handed out in the
 * order listed (within a NUMA node). A core is usable when one of its
 * hardware threads is allowed; a worker gets a usable core's allowed threads
 * (all of them, unless msrun itself was restricted to fewer). */
typedef struct msr_topo {
    int nnuma; /* NUMA nodes (1 on a machine without NUMA) */
    int ncores;
    const msr_topo_core_t *cores;
    cpu_set_t allowed; /* the hardware threads msrun may run on */
} msr_topo_t;

/* Where one local worker runs. */
typedef struct msr_cpu_place {
    cpu_set_t cpus; /* the hardware threads it is bound to */
    int cores;      /* physical cores it may use alone: its OMP_NUM_THREADS */
    int numa;       /* the NUMA node they belong to */
} msr_cpu_place_t;

/* Places nranks local workers on t's usable cores:
 * - MSR_BIND_CORE: each worker gets k whole cores of one NUMA node, the
 *   largest k (at most usable cores / nranks) for which the NUMA nodes hold
 *   nranks shares of k without a share straddling two nodes; nodes are filled
 *   in order, each share the next k cores of its node. A worker with near[r]
 *   >= 0 (the NUMA node of its GPU) goes to that node while it has room.
 *   More workers than usable cores: worker r gets the (r mod n)-th usable core
 *   (nodes in order) and *oversubscribed_p is set.
 * - MSR_BIND_NUMA: worker r gets all usable cores of its GPU's node (near[r])
 *   or else of the (r mod m)-th node that has any; cores is that node's core
 *   count divided among the workers sharing the node (at least 1).
 *   *oversubscribed_p is set when workers outnumber the usable cores.
 * near may be NULL (no GPU locality known); entries out of range count as
 * unknown. Writes places[0..nranks) and *oversubscribed_p and returns 0; or
 * returns -1 with nothing written when there is no usable core, nranks < 1,
 * how is MSR_BIND_NONE, or memory runs out. */
int msr_cpu_place(const msr_topo_t *t, msr_bind_t how, int nranks, const int *near,
                  msr_cpu_place_t *places, int *oversubscribed_p);

/* The places of this node's nworkers workers under how, on this machine as
 * hwloc describes it, restricted to the CPUs msrun may run on
 * (sched_getaffinity). GPU workers (NVIDIA GPUs hwloc sees on the PCI bus,
 * the worker's device being local rank modulo CUDA_VISIBLE_DEVICES) go near
 * their GPU. Logs oversubscription once (a warning) and each worker's place
 * (debug). Returns an array of nworkers the caller frees with msr_free, or
 * NULL (logged as a warning: workers then run unbound). Call on msrun's main
 * thread before workers start. */
msr_cpu_place_t *msr_cpu_plan(msr_bind_t how, int nworkers);

#endif
