/* --bind_core's shares (msrun/cpus.c) on allowed sets larger than this
 * machine's: several workers with several cores each get disjoint sets of
 * the documented size, consecutive in the allowed order; more workers than
 * cores go round-robin. */
#include <string.h>

#include "msrun/cpus.h"
#include "tests/runner.h"

static cpu_set_t set_of(const int *cpus, int n)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    for (int i = 0; i < n; i++)
        CPU_SET(cpus[i], &s);
    return s;
}

/* Checks the shares of `workers` among the allowed cpus[0..n). */
static void check_shares(const int *cpus, int n, int workers)
{
    cpu_set_t allowed = set_of(cpus, n), seen;
    CPU_ZERO(&seen);
    int share = n / workers;
    for (int w = 0; w < workers; w++) {
        cpu_set_t got;
        MSR_CHECK_EQ(msr_cpu_share(&allowed, w, workers, &got), 0);
        cpu_set_t outside;
        CPU_XOR(&outside, &got, &allowed);
        CPU_AND(&outside, &outside, &got);
        MSR_CHECK_MSG(CPU_COUNT(&outside) == 0, "worker %d of %d got a core not allowed", w,
                      workers);
        if (share == 0) {
            MSR_CHECK_EQ(CPU_COUNT(&got), 1);
            MSR_CHECK_MSG(CPU_ISSET(cpus[w % n], &got), "worker %d of %d on %d cores", w, workers,
                          n);
            continue;
        }
        MSR_CHECK_MSG(CPU_COUNT(&got) == share, "worker %d of %d got %d cores, want %d", w, workers,
                      CPU_COUNT(&got), share);
        for (int i = 0; i < share; i++)
            MSR_CHECK_MSG(CPU_ISSET(cpus[w * share + i], &got),
                          "worker %d of %d lacks core %d of its share", w, workers,
                          cpus[w * share + i]);
        cpu_set_t both;
        CPU_AND(&both, &got, &seen);
        MSR_CHECK_MSG(CPU_COUNT(&both) == 0, "worker %d of %d shares a core with another", w,
                      workers);
        CPU_OR(&seen, &seen, &got);
    }
    if (share > 0)
        MSR_CHECK_EQ(CPU_COUNT(&seen), share * workers);
}

static void test_several_cores_each(void)
{
    int contiguous[16];
    for (int i = 0; i < 16; i++)
        contiguous[i] = i;
    /* gaps, as under taskset or a cgroup's cpuset */
    static const int gaps[] = {1, 2, 5, 6, 7, 9, 12, 13, 20, 21, 40, 63};
    for (int w = 1; w <= 16; w++) {
        check_shares(contiguous, 16, w);
        check_shares(gaps, (int)(sizeof gaps / sizeof gaps[0]), w);
    }
}

static void test_more_workers_than_cores(void)
{
    static const int three[] = {3, 8, 11};
    check_shares(three, 3, 4);
    check_shares(three, 3, 7);
    static const int one[] = {0};
    check_shares(one, 1, 5);
}

static void test_bad_arguments(void)
{
    cpu_set_t empty, got;
    CPU_ZERO(&empty);
    MSR_CHECK_EQ(msr_cpu_share(&empty, 0, 1, &got), -1);
    static const int two[] = {0, 1};
    cpu_set_t allowed = set_of(two, 2);
    MSR_CHECK_EQ(msr_cpu_share(&allowed, 2, 2, &got), -1);
    MSR_CHECK_EQ(msr_cpu_share(&allowed, -1, 2, &got), -1);
    MSR_CHECK_EQ(msr_cpu_share(&allowed, 0, 0, &got), -1);
}

static const msr_test_t tests[] = {
    {"several_cores_each", test_several_cores_each, 10},
    {"more_workers_than_cores", test_more_workers_than_cores, 10},
    {"bad_arguments", test_bad_arguments, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
