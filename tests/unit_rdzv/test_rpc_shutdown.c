/* gRPC's shutdown at the end of every process (rendezvous/rpc.c): abseil's
 * measurement of the CPU's frequency, by sleeping, is made early in a
 * thread of its own, not in the shutdown. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/time.h"
#include "base/status.h"
#include "rendezvous/rpc.h"
#include "tests/runner.h"

/* Whether a thread of this process has this name. */
static int thread_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    MSR_CHECK(d != NULL);
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)) != NULL) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
        if (f && fgets(comm, sizeof comm, f))
            found = strncmp(comm, name, strlen(name)) == 0 && comm[strlen(name)] == '\n';
        if (f)
            fclose(f);
    }
    closedir(d);
    return found;
}

/* Once the library is started and its measuring thread is done, asking
 * abseil for the frequency (as gRPC's shutdown does) no longer sleeps:
 * measuring takes two sleeps (1 ms, 2 ms) at least. */
static void test_frequency_measured_early(void)
{
    static const char *const names[] = {
        "_ZN4absl7debian313base_internal19NominalCPUFrequencyEv",
        "_ZN4absl7debian213base_internal19NominalCPUFrequencyEv",
        "_ZN4absl7debian413base_internal19NominalCPUFrequencyEv",
        "_ZN4absl13base_internal19NominalCPUFrequencyEv",
    };
    msr_rpc_library_ref(); /* gRPC loads abseil */
    void *sym = NULL;
    for (size_t i = 0; sym == NULL && i < MSR_ARRAY_SIZE(names); i++)
        sym = dlsym(RTLD_DEFAULT, names[i]);
    if (sym == NULL) {
        printf("skip: this abseil does not export NominalCPUFrequency\n");
        msr_rpc_library_unref();
        return;
    }
    uint64_t deadline = msr_deadline_in_ms(10000);
    while (thread_named(MSR_RPC_FREQ_THREAD) && !msr_deadline_passed(deadline))
        msr_sleep_ms(1);
    MSR_CHECK_MSG(!thread_named(MSR_RPC_FREQ_THREAD), "the measuring thread still runs");
    double (*frequency)(void);
    memcpy(&frequency, &sym, sizeof frequency);
    /* a measurement sleeps: this thread gives up the CPU; a preemption
     * (a loaded machine) is an involuntary switch, not counted */
    struct rusage before, after;
    MSR_CHECK(getrusage(RUSAGE_THREAD, &before) == 0);
    uint64_t t0 = msr_now_ns();
    double hz = frequency();
    uint64_t ns = msr_now_ns() - t0;
    MSR_CHECK(getrusage(RUSAGE_THREAD, &after) == 0);
    long slept = after.ru_nvcsw - before.ru_nvcsw;
    MSR_CHECK_MSG(slept == 0, "the frequency (%.0f Hz) was measured now: %ld sleeps, %.2f ms", hz,
                  slept, (double)ns / 1e6);
    msr_rpc_library_unref();
}

static const msr_test_t tests[] = {
    {"frequency_measured_early", test_frequency_measured_early, 20},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
