/* --bind-to's placement (msrun/cpus.c) on machines this one is not:
 * synthetic topologies of NUMA nodes, cores and hardware threads, with
 * allowed sets as taskset or a cgroup leaves them. */
#include <stdlib.h>
#include <string.h>

#include "launcher/cpus.h"
#include "tests/runner.h"

#define MAX_CORES 256

/* A machine of nnuma nodes x per cores x threads hardware threads, numbered
 * as Linux numbers them: core c's thread h is CPU c + h * (all cores). */
typedef struct machine {
    msr_topo_core_t cores[MAX_CORES];
    msr_topo_t t;
} machine_t;

static void machine_make(machine_t *m, int nnuma, int per, int threads)
{
    memset(m, 0, sizeof *m);
    int n = nnuma * per;
    CPU_ZERO(&m->t.allowed);
    for (int c = 0; c < n; c++) {
        m->cores[c].numa = c / per;
        CPU_ZERO(&m->cores[c].pus);
        for (int h = 0; h < threads; h++) {
            CPU_SET(c + h * n, &m->cores[c].pus);
            CPU_SET(c + h * n, &m->t.allowed);
        }
    }
    m->t.nnuma = nnuma;
    m->t.ncores = n;
    m->t.cores = m->cores;
}

/* Takes core c's threads (all, or thread h only when h >= 0) out of allowed. */
static void disallow(machine_t *m, int c, int h)
{
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &m->cores[c].pus) && (h < 0 || i == c + h * m->t.ncores))
            CPU_CLR(i, &m->t.allowed);
}

/* Whether worker p has exactly core c's allowed threads among its CPUs. */
static int has_core(const machine_t *m, const msr_cpu_place_t *p, int c)
{
    cpu_set_t want, got;
    CPU_AND(&want, &m->cores[c].pus, &m->t.allowed);
    CPU_AND(&got, &want, &p->cpus);
    return CPU_COUNT(&want) > 0 && CPU_EQUAL(&got, &want);
}

/* Checks that worker r holds exactly cores [first, first + n). */
static void check_cores(const machine_t *m, const msr_cpu_place_t *p, int r, int first, int n)
{
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = first; c < first + n; c++) {
        MSR_CHECK_MSG(has_core(m, &p[r], c), "worker %d lacks core %d", r, c);
        cpu_set_t mine;
        CPU_AND(&mine, &m->cores[c].pus, &m->t.allowed);
        CPU_OR(&all, &all, &mine);
    }
    MSR_CHECK_MSG(CPU_EQUAL(&all, &p[r].cpus), "worker %d holds more than cores %d..%d", r, first,
                  first + n - 1);
    MSR_CHECK_EQ(p[r].cores, n);
    MSR_CHECK_EQ(p[r].numa, m->cores[first].numa);
}

static int place(const machine_t *m, msr_bind_t how, int nranks, const int *near,
                 msr_cpu_place_t *p, int *over)
{
    *over = -1;
    return msr_cpu_place(&m->t, how, nranks, near, p, over);
}

/* 2 NUMA nodes x 4 cores x 2 threads: shares of whole cores of one node */
static void test_two_numa_whole_cores(void)
{
    machine_t m;
    msr_cpu_place_t p[8];
    int over;
    machine_make(&m, 2, 4, 2);
    /* 2 workers: a node each, with both threads of its 4 cores */
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 2, NULL, p, &over), 0);
    MSR_CHECK_EQ(over, 0);
    check_cores(&m, p, 0, 0, 4);
    check_cores(&m, p, 1, 4, 4);
    MSR_CHECK_EQ(CPU_COUNT(&p[0].cpus), 8);
    MSR_CHECK(CPU_ISSET(0, &p[0].cpus) && CPU_ISSET(8, &p[0].cpus)); /* core 0's two threads */
    /* 4 workers: two per node */
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 4, NULL, p, &over), 0);
    for (int r = 0; r < 4; r++)
        check_cores(&m, p, r, 2 * r, 2);
    /* 8 workers: a core each */
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 8, NULL, p, &over), 0);
    MSR_CHECK_EQ(over, 0);
    for (int r = 0; r < 8; r++)
        check_cores(&m, p, r, r, 1);
    /* 3 workers: 8 / 3 = 2 cores each, node 0 filled first, none straddles */
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 3, NULL, p, &over), 0);
    check_cores(&m, p, 0, 0, 2);
    check_cores(&m, p, 1, 2, 2);
    check_cores(&m, p, 2, 4, 2);
    /* 1 worker: one node's cores, not both nodes' */
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 1, NULL, p, &over), 0);
    check_cores(&m, p, 0, 0, 4);
}

/* 2 nodes x 5 cores, 3 workers: 10 / 3 = 3 would straddle, so 2 each */
static void test_no_straddle(void)
{
    machine_t m;
    msr_cpu_place_t p[3];
    int over;
    machine_make(&m, 2, 5, 1);
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 3, NULL, p, &over), 0);
    check_cores(&m, p, 0, 0, 2);
    check_cores(&m, p, 1, 2, 2);
    check_cores(&m, p, 2, 5, 2);
}

/* allowed sets with holes, as taskset or a cgroup's cpuset leave them */
static void test_uneven_allowed(void)
{
    machine_t m;
    msr_cpu_place_t p[4];
    int over;
    /* node 0 keeps one core (3): both workers go to node 1, 2 cores each */
    machine_make(&m, 2, 4, 2);
    disallow(&m, 0, -1);
    disallow(&m, 1, -1);
    disallow(&m, 2, -1);
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 2, NULL, p, &over), 0);
    check_cores(&m, p, 0, 4, 2);
    check_cores(&m, p, 1, 6, 2);
    /* 3 workers: core 3 holds one, node 1 the other two (2 cores would not fit) */
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 3, NULL, p, &over), 0);
    check_cores(&m, p, 0, 3, 1);
    check_cores(&m, p, 1, 4, 1);
    check_cores(&m, p, 2, 5, 1);
    /* one thread of a core allowed: the worker gets that thread, the core counts once */
    machine_make(&m, 1, 2, 2);
    disallow(&m, 0, 1); /* CPU 2 */
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 2, NULL, p, &over), 0);
    check_cores(&m, p, 0, 0, 1);
    MSR_CHECK_EQ(CPU_COUNT(&p[0].cpus), 1);
    MSR_CHECK(CPU_ISSET(0, &p[0].cpus));
    check_cores(&m, p, 1, 1, 1);
    MSR_CHECK_EQ(CPU_COUNT(&p[1].cpus), 2);
}

/* more workers than cores: round-robin over the cores, and said */
static void test_oversubscribed(void)
{
    machine_t m;
    msr_cpu_place_t p[7];
    int over;
    machine_make(&m, 1, 1, 2); /* 1 core, 2 threads */
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 4, NULL, p, &over), 0);
    MSR_CHECK_EQ(over, 1);
    for (int r = 0; r < 4; r++)
        check_cores(&m, p, r, 0, 1);
    machine_make(&m, 2, 1, 1); /* 2 nodes of 1 core */
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 4, NULL, p, &over), 0);
    MSR_CHECK_EQ(over, 1);
    for (int r = 0; r < 4; r++)
        check_cores(&m, p, r, r % 2, 1);
    machine_make(&m, 1, 3, 1);
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 7, NULL, p, &over), 0);
    MSR_CHECK_EQ(over, 1);
    for (int r = 0; r < 7; r++)
        check_cores(&m, p, r, r % 3, 1);
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 3, NULL, p, &over), 0);
    MSR_CHECK_EQ(over, 0);
}

/* workers go to their GPU's node while it has room */
static void test_gpu_near(void)
{
    machine_t m;
    msr_cpu_place_t p[4];
    int over;
    machine_make(&m, 2, 4, 2);
    static const int swapped[] = {1, 0};
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 2, swapped, p, &over), 0);
    check_cores(&m, p, 0, 4, 4);
    check_cores(&m, p, 1, 0, 4);
    /* both GPUs on node 1: only one share fits there */
    static const int both1[] = {1, 1};
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 2, both1, p, &over), 0);
    check_cores(&m, p, 0, 4, 4);
    check_cores(&m, p, 1, 0, 4);
    /* 4 workers, GPUs 0..3 on nodes 1,1,0,0; unknown nodes are ignored */
    static const int four[] = {1, 1, 0, 0};
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 4, four, p, &over), 0);
    check_cores(&m, p, 0, 4, 2);
    check_cores(&m, p, 1, 6, 2);
    check_cores(&m, p, 2, 0, 2);
    check_cores(&m, p, 3, 2, 2);
    static const int unknown[] = {-1, 7};
    MSR_CHECK_EQ(place(&m, MSR_BIND_CORE, 2, unknown, p, &over), 0);
    check_cores(&m, p, 0, 0, 4);
    check_cores(&m, p, 1, 4, 4);
    /* numa: the GPU's node */
    MSR_CHECK_EQ(place(&m, MSR_BIND_NUMA, 2, both1, p, &over), 0);
    for (int r = 0; r < 2; r++) {
        MSR_CHECK_EQ(p[r].numa, 1);
        MSR_CHECK_EQ(CPU_COUNT(&p[r].cpus), 8);
        MSR_CHECK_EQ(p[r].cores, 2); /* node 1's 4 cores shared by 2 workers */
    }
}

static void test_numa(void)
{
    machine_t m;
    msr_cpu_place_t p[5];
    int over;
    /* 3 workers on 2 nodes: 0 and 2 share node 0 */
    machine_make(&m, 2, 4, 2);
    MSR_CHECK_EQ(place(&m, MSR_BIND_NUMA, 3, NULL, p, &over), 0);
    MSR_CHECK_EQ(over, 0);
    for (int r = 0; r < 3; r++) {
        MSR_CHECK_EQ(p[r].numa, r % 2);
        MSR_CHECK_EQ(CPU_COUNT(&p[r].cpus), 8);
        for (int c = 0; c < 4; c++)
            MSR_CHECK(has_core(&m, &p[r], 4 * (r % 2) + c));
    }
    MSR_CHECK_EQ(p[0].cores, 2);
    MSR_CHECK_EQ(p[1].cores, 4);
    MSR_CHECK_EQ(p[2].cores, 2);
    /* a node without allowed cores is skipped */
    for (int c = 0; c < 4; c++)
        disallow(&m, c, -1);
    MSR_CHECK_EQ(place(&m, MSR_BIND_NUMA, 2, NULL, p, &over), 0);
    MSR_CHECK_EQ(p[0].numa, 1);
    MSR_CHECK_EQ(p[1].numa, 1);
    /* one node (this machine): all its cores, the count shared */
    machine_make(&m, 1, 2, 1);
    MSR_CHECK_EQ(place(&m, MSR_BIND_NUMA, 2, NULL, p, &over), 0);
    MSR_CHECK_EQ(over, 0);
    MSR_CHECK(CPU_EQUAL(&p[0].cpus, &m.t.allowed) && CPU_EQUAL(&p[1].cpus, &m.t.allowed));
    MSR_CHECK_EQ(p[0].cores, 1);
    MSR_CHECK_EQ(place(&m, MSR_BIND_NUMA, 5, NULL, p, &over), 0);
    MSR_CHECK_EQ(over, 1);
    MSR_CHECK_EQ(p[4].cores, 1);
}

/* Random machines and allowed sets: every worker's CPUs are allowed, whole
 * (allowed) cores of one node, as many as it is told; shares are equal and
 * disjoint unless oversubscribed, and as large as fits. */
static void test_random_machines(void)
{
    srand(15);
    for (int iter = 0; iter < 2000; iter++) {
        machine_t m;
        int nnuma = 1 + rand() % 4, per = 1 + rand() % 8, threads = 1 + rand() % 2;
        machine_make(&m, nnuma, per, threads);
        for (int c = 0; c < m.t.ncores; c++)
            if (rand() % 4 == 0)
                disallow(&m, c, rand() % 3 == 0 ? -1 : rand() % threads);
        int usable = 0;
        for (int c = 0; c < m.t.ncores; c++) {
            cpu_set_t x;
            CPU_AND(&x, &m.cores[c].pus, &m.t.allowed);
            usable += CPU_COUNT(&x) > 0;
        }
        int nranks = 1 + rand() % 12;
        msr_cpu_place_t p[12];
        int over;
        int rc = place(&m, MSR_BIND_CORE, nranks, NULL, p, &over);
        if (usable == 0) {
            MSR_CHECK_EQ(rc, -1);
            continue;
        }
        MSR_CHECK_EQ(rc, 0);
        MSR_CHECK_EQ(over, nranks > usable);
        cpu_set_t seen;
        CPU_ZERO(&seen);
        for (int r = 0; r < nranks; r++) {
            cpu_set_t out;
            CPU_XOR(&out, &p[r].cpus, &m.t.allowed);
            CPU_AND(&out, &out, &p[r].cpus);
            MSR_CHECK_MSG(CPU_COUNT(&out) == 0, "iter %d: worker %d got a CPU not allowed", iter,
                          r);
            int cores = 0;
            for (int c = 0; c < m.t.ncores; c++) {
                cpu_set_t x;
                CPU_AND(&x, &m.cores[c].pus, &p[r].cpus);
                if (CPU_COUNT(&x) == 0)
                    continue;
                MSR_CHECK_MSG(has_core(&m, &p[r], c), "iter %d: worker %d has part of core %d",
                              iter, r, c);
                MSR_CHECK_MSG(m.cores[c].numa == p[r].numa, "iter %d: worker %d straddles", iter,
                              r);
                cores++;
            }
            MSR_CHECK_EQ(cores, p[r].cores);
            MSR_CHECK_EQ(p[r].cores, p[0].cores);
            if (!over) {
                cpu_set_t both;
                CPU_AND(&both, &seen, &p[r].cpus);
                MSR_CHECK_MSG(CPU_COUNT(&both) == 0, "iter %d: worker %d shares a core", iter, r);
                CPU_OR(&seen, &seen, &p[r].cpus);
            }
        }
        if (!over) {
            /* one more core each would not have fitted in the nodes */
            int k = p[0].cores + 1, fit = 0;
            for (int n = 0; n < nnuma; n++) {
                int un = 0;
                for (int c = n * per; c < (n + 1) * per; c++) {
                    cpu_set_t x;
                    CPU_AND(&x, &m.cores[c].pus, &m.t.allowed);
                    un += CPU_COUNT(&x) > 0;
                }
                fit += un / k;
            }
            MSR_CHECK_MSG(fit < nranks || k * nranks > usable, "iter %d: shares of %d fit", iter,
                          k);
        }
    }
}

static void test_bad_arguments(void)
{
    machine_t m;
    msr_cpu_place_t p[2], before;
    int over = 7;
    machine_make(&m, 1, 2, 1);
    memset(&before, 0x5a, sizeof before);
    p[0] = before;
    MSR_CHECK_EQ(msr_cpu_place(&m.t, MSR_BIND_CORE, 0, NULL, p, &over), -1);
    MSR_CHECK_EQ(msr_cpu_place(&m.t, MSR_BIND_NONE, 1, NULL, p, &over), -1);
    MSR_CHECK_EQ(msr_cpu_place(&m.t, (msr_bind_t)9, 1, NULL, p, &over), -1);
    CPU_ZERO(&m.t.allowed); /* nothing usable */
    MSR_CHECK_EQ(msr_cpu_place(&m.t, MSR_BIND_CORE, 1, NULL, p, &over), -1);
    MSR_CHECK_EQ(msr_cpu_place(&m.t, MSR_BIND_NUMA, 1, NULL, p, &over), -1);
    MSR_CHECK_EQ(over, 7);
    MSR_CHECK(memcmp(&p[0], &before, sizeof before) == 0);
}

static const msr_test_t tests[] = {
    {"two_numa_whole_cores", test_two_numa_whole_cores, 10},
    {"no_straddle", test_no_straddle, 10},
    {"uneven_allowed", test_uneven_allowed, 10},
    {"oversubscribed", test_oversubscribed, 10},
    {"gpu_near", test_gpu_near, 10},
    {"numa", test_numa, 10},
    {"random_machines", test_random_machines, 30},
    {"bad_arguments", test_bad_arguments, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
