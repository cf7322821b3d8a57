/* Thousands of idle connections on a real coordinator: it must still
 * accept valid calls while they are held and after they are gone, and
 * close them within its bounds (sec_attack.h). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include "base/err.h"
#include "base/time.h"
#include "tests/security/sec_attack.h"

/* ---- the attacker: thousands of idle connections ---- */

/* Opens up to want TCP connections from address from to port and sends
 * nothing on them; returns how many were established within 10 s (their
 * fds in fds). */
static int open_idle(const char *from, int port, int want, int *fds)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct sockaddr_in src = {.sin_family = AF_INET};
    MSR_CHECK(inet_pton(AF_INET, from, &src.sin_addr) == 1);
    int n = 0;
    uint64_t deadline = msr_deadline_in_ms(10000);
    /* in batches, so a listener that stopped accepting costs bounded time */
    while (n < want && msr_now_ns() < deadline) {
        int batch = want - n < 256 ? want - n : 256;
        struct pollfd pfd[256];
        int nb = 0;
        for (int i = 0; i < batch; i++) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fd < 0)
                break;
            if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0) {
                close(fd);
                break;
            }
            if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
                close(fd);
                break;
            }
            pfd[nb++] = (struct pollfd){fd, POLLOUT, 0};
        }
        int pending = nb;
        while (pending > 0 && msr_now_ns() < deadline) {
            int r = poll(pfd, (nfds_t)nb, (int)msr_deadline_left_ms(deadline));
            if (r <= 0)
                break;
            for (int i = 0; i < nb; i++) {
                if (pfd[i].fd < 0 || pfd[i].revents == 0)
                    continue;
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(pfd[i].fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err == 0)
                    fds[n++] = pfd[i].fd;
                else
                    close(pfd[i].fd);
                pfd[i].fd = -1;
                pending--;
            }
        }
        for (int i = 0; i < nb; i++)
            if (pfd[i].fd >= 0)
                close(pfd[i].fd); /* never completed */
        if (nb < batch || pending > 0)
            break;
    }
    return n;
}

/* How many of fds the other side closed within ms (all polled at once). */
static int closed_by_peer(const int *fds, int n, int ms)
{
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    MSR_CHECK(p != NULL);
    for (int i = 0; i < n; i++)
        p[i] = (struct pollfd){fds[i], POLLIN | POLLRDHUP, 0};
    int closed = 0;
    uint64_t deadline = msr_deadline_in_ms(ms);
    while (closed < n && !msr_deadline_passed(deadline)) {
        int r = poll(p, (nfds_t)n, (int)msr_deadline_left_ms(deadline));
        if (r <= 0)
            break;
        for (int i = 0; i < n; i++) {
            if (p[i].fd < 0 || p[i].revents == 0)
                continue;
            char b;
            ssize_t got = recv(p[i].fd, &b, 1, MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno != EAGAIN)) {
                closed++;
                p[i].fd = -1; /* poll skips it */
            }
        }
    }
    free(p);
    return closed;
}

/* A Join and a Status call with a valid token; 0 when both succeeded. */
static int valid_calls(const char *target, const char *when)
{
    msr_rpc_channel_t *ch = NULL;
    MSR_CHECK_OK(msr_rpc_channel_create_own(target, TOKEN, &ch));
    Msr__JoinRequest j = MSR__JOIN_REQUEST__INIT;
    j.protocol_version = MSR_PROTOCOL_VERSION;
    j.job_id = "attack";
    j.host = "127.0.0.1";
    j.pid = getpid();
    j.worker_num = 8;
    j.local_worker_num = 1;
    j.node_rank = -1;
    j.free_port = 5000;
    ProtobufCMessage *resp = NULL;
    uint64_t t0 = msr_now_ns();
    msr_status_t js = msr_rpc_call(ch, MSR_RPC_JOIN, &j.base, msr_deadline_in_ms(20000), 1, &resp);
    double join_ms = (double)(msr_now_ns() - t0) / 1e6;
    msr_rpc_message_free(resp);
    if (js != MSR_OK)
        fprintf(stderr, "Join %s: %s\n", when, msr_err_msg());
    Msr__StatusRequest s = MSR__STATUS_REQUEST__INIT;
    resp = NULL;
    t0 = msr_now_ns();
    msr_status_t ss =
        msr_rpc_call(ch, MSR_RPC_STATUS, &s.base, msr_deadline_in_ms(20000), 1, &resp);
    double status_ms = (double)(msr_now_ns() - t0) / 1e6;
    msr_rpc_message_free(resp);
    if (ss != MSR_OK)
        fprintf(stderr, "Status %s: %s\n", when, msr_err_msg());
    printf("%-34s Join %-8s %8.1f ms   Status %-8s %8.1f ms\n", when, msr_status_name(js), join_ms,
           msr_status_name(ss), status_ms);
    msr_rpc_channel_destroy(ch);
    return js != MSR_OK || ss != MSR_OK;
}

/* Holds want idle connections from address from, makes valid calls while
 * they are held and after they closed; returns the failures. */
static int idle_attack(const coord_proc_t *cp, const char *from, int want)
{
    int *fds = calloc((size_t)want, sizeof *fds);
    MSR_CHECK(fds != NULL);
    int open = open_idle(from, cp->port, want, fds);
    printf("%d of %d idle connections from %s established; coordinator holds %ld kB\n", open, want,
           from, sa_proc_kb(cp->pid, "VmRSS"));
    char when[64];
    snprintf(when, sizeof when, "while %s holds them:", from);
    int failed = valid_calls(cp->target, when);
    /* The coordinator closes what it took beyond its bounds at once and the
     * rest after its grace period for unauthenticated connections. */
    int closed = closed_by_peer(fds, open, 15000);
    printf("%d of %d closed by the coordinator within 15 s\n", closed, open);
    for (int i = 0; i < open; i++)
        close(fds[i]);
    free(fds);
    snprintf(when, sizeof when, "after %s closed them:", from);
    failed += valid_calls(cp->target, when);
    return failed + (closed != open);
}

static void test_idle_connections(void)
{
    /* The coordinator starts with Debian's default soft limit (1024). */
    coord_proc_t cp;
    sa_coord_start(&cp, 8, 1024);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    int want = 5000;
    if ((rlim_t)want + 64 > rl.rlim_cur) {
        want = (int)rl.rlim_cur - 64;
        printf("this process may open only %d connections (descriptor limit %llu)\n", want,
               (unsigned long long)rl.rlim_cur);
    }
    msr_rpc_library_ref();
    /* from another address than the valid client's (127.0.0.1), then from
     * the same one */
    int failed = idle_attack(&cp, "127.0.0.2", want);
    failed += idle_attack(&cp, "127.0.0.1", want);
    sa_coord_end(&cp);
    unlink(cp.log);
    msr_rpc_library_unref();
    MSR_CHECK_MSG(failed == 0, "valid calls failed, or idle connections stayed open");
}

static const msr_test_t tests[] = {
    {"idle_connections", test_idle_connections, 90},
};

const msr_test_piece_t sa_idle_tests = MSR_TEST_PIECE(tests);
