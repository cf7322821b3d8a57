/* Unit tests of the dashboard's server (cluster/http.c) that need no
 * client: how it starts and fails to start. */
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/status.h"
#include "cluster/http.h"
#include "tests/runner.h"

/* A start that fails for want of descriptors (one, two or three short of
 * what it takes: its last steps fail) closes none but its own: descriptor
 * 0, open here, stays open. (Fewer make libevent's own setup exit.) */
static void test_start_failure_keeps_fds(void)
{
    if (fcntl(0, F_GETFD) == -1) /* stdin closed: /dev/null on it */
        MSR_CHECK(open("/dev/null", O_RDONLY) == 0);
    int first = dup(0); /* the lowest free descriptor */
    MSR_CHECK(first > 0);
    close(first);
    msr_http_config_t cfg = {.addr = "127.0.0.1", .token = "t"};
    msr_http_t *h = NULL;
    int port = 0;
    MSR_CHECK_OK(msr_http_start(&cfg, &port, &h));
    int next = dup(0);
    MSR_CHECK(next > first);
    close(next);
    msr_http_stop(h);
    struct rlimit old, lim;
    MSR_CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
    /* from a limit with room to spare down, one at a time: the first that
     * fails is one short, whatever else this process holds open */
    int fails = 0;
    for (int limit = next + 8; limit > first && fails < 3; limit--) {
        lim = old;
        lim.rlim_cur = (rlim_t)limit;
        MSR_CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0);
        h = NULL;
        msr_status_t st = msr_http_start(&cfg, &port, &h);
        MSR_CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);
        if (st == MSR_OK) {
            MSR_CHECK_MSG(fails == 0, "started under a limit of %d after failing above it", limit);
            msr_http_stop(h);
            continue;
        }
        fails++;
        MSR_CHECK_MSG(fcntl(0, F_GETFD) != -1,
                      "a start %d descriptors short (%s) closed descriptor 0", fails,
                      msr_status_str(st));
    }
    MSR_CHECK_EQ(fails, 3);
}

static const msr_test_t tests[] = {
    {"start_failure_keeps_fds", test_start_failure_keeps_fds, 10},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
