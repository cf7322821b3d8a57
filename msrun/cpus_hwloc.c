/* --bind-to on the real machine: hwloc describes it, msr_cpu_place places
 * the workers (see cpus.h). Without CUDA here, a GPU is found as an NVIDIA
 * display controller on hwloc's PCI bus, CUDA device i being the i-th in
 * PCI bus order (CUDA's order when CUDA_DEVICE_ORDER=PCI_BUS_ID; its default,
 * fastest first, usually agrees on machines of identical GPUs). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "base/alloc.h"
#include "base/log.h"
#include "launcher/cpus.h"

#define NVIDIA_VENDOR 0x10de
#define MAX_GPUS      64

static const char *bind_name(msr_bind_t how)
{
    return how == MSR_BIND_NUMA ? "numa" : "core";
}

static void cpuset_from_bitmap(hwloc_const_bitmap_t b, cpu_set_t *set)
{
    CPU_ZERO(set);
    for (int i = hwloc_bitmap_first(b); i >= 0; i = hwloc_bitmap_next(b, i))
        if (i < CPU_SETSIZE)
            CPU_SET(i, set);
}

/* The NUMA node (logical index) that holds most of cpuset b; 0 if none. */
static int numa_of(hwloc_topology_t topo, hwloc_const_bitmap_t b)
{
    int best = 0, best_w = 0;
    int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    hwloc_bitmap_t both = hwloc_bitmap_alloc();
    for (int i = 0; i < n && both; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        hwloc_bitmap_and(both, node->cpuset, b);
        int w = hwloc_bitmap_weight(both);
        if (w > best_w) {
            best = i;
            best_w = w;
        }
    }
    hwloc_bitmap_free(both);
    return best;
}

static int pci_before(const hwloc_obj_t a, const hwloc_obj_t b)
{
    const struct hwloc_pcidev_attr_s *x = &a->attr->pcidev, *y = &b->attr->pcidev;
    if (x->domain != y->domain)
        return x->domain < y->domain;
    if (x->bus != y->bus)
        return x->bus < y->bus;
    if (x->dev != y->dev)
        return x->dev < y->dev;
    return x->func < y->func;
}

/* The NUMA node of each worker's GPU into near[0..nworkers), or 0 when no
 * GPU's place is known (no NVIDIA GPU on the bus, CUDA_VISIBLE_DEVICES empty
 * or naming devices by UUID, which needs NVML). */
static int gpu_nodes(hwloc_topology_t topo, int nworkers, int *near)
{
    hwloc_obj_t gpus[MAX_GPUS];
    int ngpus = 0;
    for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, NULL); o && ngpus < MAX_GPUS;
         o = hwloc_get_next_pcidev(topo, o)) {
        if (o->attr->pcidev.vendor_id != NVIDIA_VENDOR || (o->attr->pcidev.class_id >> 8) != 0x03)
            continue; /* display controllers (VGA 0x0300, 3D 0x0302) only */
        int i = ngpus++;
        for (; i > 0 && pci_before(o, gpus[i - 1]); i--)
            gpus[i] = gpus[i - 1];
        gpus[i] = o;
    }
    if (ngpus == 0)
        return 0;
    int visible[MAX_GPUS], nvisible = 0;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd == NULL) {
        for (int i = 0; i < ngpus; i++)
            visible[nvisible++] = i;
    } else {
        for (const char *p = cvd; *p && nvisible < MAX_GPUS;) {
            char *end;
            errno = 0;
            long d = strtol(p, &end, 10);
            if (end == p || errno || d < 0 || d >= ngpus || (*end != ',' && *end != '\0')) {
                MSR_DEBUG("--bind_to: CUDA_VISIBLE_DEVICES=%s does not name GPUs by index among "
                          "the %d on the PCI bus: placing workers without their GPUs",
                          cvd, ngpus);
                return 0;
            }
            visible[nvisible++] = (int)d;
            p = *end ? end + 1 : end;
        }
    }
    if (nvisible == 0)
        return 0;
    for (int r = 0; r < nworkers; r++) {
        hwloc_obj_t gpu = gpus[visible[r % nvisible]];
        hwloc_obj_t at = hwloc_get_non_io_ancestor_obj(topo, gpu);
        near[r] = at && at->cpuset ? numa_of(topo, at->cpuset) : -1;
    }
    return 1;
}

/* Fills t (cores allocated into *cores_p) from topo and allowed. */
static int describe(hwloc_topology_t topo, const cpu_set_t *allowed, msr_topo_t *t,
                    msr_topo_core_t **cores_p)
{
    /* a machine hwloc shows without cores (some VMs): each PU is one */
    hwloc_obj_type_t unit =
        hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    int n = hwloc_get_nbobjs_by_type(topo, unit);
    int nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    if (n <= 0)
        return -1;
    msr_topo_core_t *cores = msr_calloc((size_t)n, sizeof *cores);
    if (cores == NULL)
        return -1;
    for (int i = 0; i < n; i++) {
        hwloc_obj_t c = hwloc_get_obj_by_type(topo, unit, (unsigned)i);
        cpuset_from_bitmap(c->cpuset, &cores[i].pus);
        cores[i].numa = nnuma > 0 ? numa_of(topo, c->cpuset) : 0;
    }
    cpu_set_t hw_allowed;
    cpuset_from_bitmap(hwloc_topology_get_allowed_cpuset(topo), &hw_allowed);
    t->nnuma = nnuma > 0 ? nnuma : 1;
    t->ncores = n;
    t->cores = cores;
    CPU_AND(&t->allowed, allowed, &hw_allowed);
    *cores_p = cores;
    return 0;
}

static void log_places(msr_bind_t how, int nworkers, const msr_cpu_place_t *p)
{
    if (MSR_LOG_DEBUG > msr_log_level_)
        return; /* the lists are only for debug lines */
    for (int r = 0; r < nworkers; r++) {
        char list[512];
        size_t len = 0;
        int first = -1;
        list[0] = '\0';
        for (int c = 0; c <= CPU_SETSIZE && len < sizeof list - 16; c++) {
            int in = c < CPU_SETSIZE && CPU_ISSET(c, &p[r].cpus);
            if (in && first < 0)
                first = c;
            if (!in && first >= 0) {
                len += (size_t)snprintf(list + len, sizeof list - len,
                                        c - 1 > first ? "%s%d-%d" : "%s%d", len ? "," : "", first,
                                        c - 1);
                first = -1;
            }
        }
        MSR_DEBUG("--bind_to %s: local rank %d on cpus %s (%d core%s, NUMA node %d)",
                  bind_name(how), r, list, p[r].cores, p[r].cores == 1 ? "" : "s", p[r].numa);
    }
}

msr_cpu_place_t *msr_cpu_plan(msr_bind_t how, int nworkers)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
        MSR_WARN("--bind_to %s: cannot read msrun's CPUs (%s): workers run unbound", bind_name(how),
                 strerror(errno));
        return NULL;
    }
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) {
        MSR_WARN("--bind_to %s: hwloc cannot start: workers run unbound", bind_name(how));
        return NULL;
    }
    msr_cpu_place_t *places = NULL;
    msr_topo_core_t *cores = NULL;
    int *near = NULL;
    msr_topo_t t;
    /* PCI devices, for the GPUs' locality, read from sysfs by hwloc's linux
     * component: its "pci" plugin (libpciaccess) finds the same devices
     * but leaks memory on every load, which a leak checker reports */
    hwloc_topology_set_type_filter(topo, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
    if (hwloc_topology_load(topo) != 0 || describe(topo, &allowed, &t, &cores) != 0) {
        MSR_WARN("--bind_to %s: hwloc cannot describe this machine: workers run unbound",
                 bind_name(how));
        goto out;
    }
    near = msr_calloc((size_t)nworkers, sizeof *near);
    places = msr_calloc((size_t)nworkers, sizeof *places);
    int over = 0;
    if (near == NULL || places == NULL) {
        MSR_WARN("--bind_to %s: out of memory: workers run unbound", bind_name(how));
        goto err_places;
    }
    int gpus = gpu_nodes(topo, nworkers, near);
    if (msr_cpu_place(&t, how, nworkers, gpus ? near : NULL, places, &over) != 0) {
        MSR_WARN("--bind_to %s: none of msrun's %d CPUs can be placed: workers run unbound",
                 bind_name(how), CPU_COUNT(&allowed));
        goto err_places;
    }
    if (over) {
        int usable = 0;
        for (int c = 0; c < t.ncores; c++) {
            cpu_set_t p;
            CPU_AND(&p, &t.cores[c].pus, &t.allowed);
            usable += CPU_COUNT(&p) > 0;
        }
        MSR_WARN("--bind_to %s: %d workers on %d core%s: oversubscribed, workers share %s",
                 bind_name(how), nworkers, usable, usable == 1 ? "" : "s",
                 how == MSR_BIND_NUMA ? "their NUMA node's cores" : "cores round-robin");
    }
    log_places(how, nworkers, places);
    goto out;

err_places:
    msr_free(places);
    places = NULL;
out:
    msr_free(near);
    msr_free(cores);
    hwloc_topology_destroy(topo);
    return places;
}
