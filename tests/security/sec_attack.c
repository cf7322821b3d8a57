/* Attacks on a real coordinator over loopback by clients that do not know
 * the job's token: huge Set requests (the coordinator must refuse them
 * before reading their bodies, so its memory stays flat and valid calls
 * stay fast) and thousands of idle connections (the coordinator must still
 * accept valid calls while they are held and after they are gone). */
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
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "cluster/server.h"
#include "rendezvous/rpc.h"
#include "tests/runner.h"

#define TOKEN "sec-attack-token"

/* ---- the coordinator, in a child process of its own ---- */

static volatile sig_atomic_t coord_stop;

static void on_term(int sig)
{
    (void)sig;
    coord_stop = 1;
}

typedef struct coord_proc {
    pid_t pid;
    int port;
    char target[64];
    char log[64]; /* the coordinator's stderr */
} coord_proc_t;

/* Starts a coordinator for a job of nodes nodes (one worker each) in a
 * child process; with nofile > 0 its soft descriptor limit starts there (a
 * Debian default is 1024). Call before this process uses gRPC. */
static void coord_start(coord_proc_t *cp, int nodes, rlim_t nofile)
{
    snprintf(cp->log, sizeof cp->log, "/tmp/sec_attack.%d.log", (int)getpid());
    int log = open(cp->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    MSR_CHECK(log >= 0);
    int fds[2];
    MSR_CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    MSR_CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(fds[0]);
        dup2(log, STDERR_FILENO);
        msr_log_init("coordinator", -1, -1);
        msr_log_set_level(MSR_LOG_DEBUG);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term;
        sigaction(SIGTERM, &sa, NULL);
        if (nofile > 0) {
            struct rlimit rl;
            getrlimit(RLIMIT_NOFILE, &rl);
            rl.rlim_cur = nofile < rl.rlim_max ? nofile : rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        msr_coord_config_t cfg = {.token = TOKEN,
                                  .job_id = "attack",
                                  .worker_num = nodes,
                                  .local_worker_num = 1,
                                  .max_restarts = 0,
                                  .join_timeout_ms = 600000,
                                  .node_timeout_ms = 600000};
        msr_coord_server_t *s = NULL;
        int port = 0;
        if (msr_coord_server_create("127.0.0.1:0", &cfg, &port, &s) != MSR_OK)
            _exit(3);
        if (write(fds[1], &port, sizeof port) != (ssize_t)sizeof port)
            _exit(4);
        close(fds[1]);
        msr_coord_server_run(s, &coord_stop, 0);
        msr_coord_server_destroy(s);
        _exit(0);
    }
    close(fds[1]);
    close(log);
    int port = 0;
    ssize_t n = read(fds[0], &port, sizeof port);
    close(fds[0]);
    MSR_CHECK_MSG(n == (ssize_t)sizeof port && port > 0, "the coordinator did not start");
    cp->pid = pid;
    cp->port = port;
    snprintf(cp->target, sizeof cp->target, "127.0.0.1:%d", port);
}

static void coord_end(coord_proc_t *cp)
{
    kill(cp->pid, SIGTERM);
    int status = 0;
    waitpid(cp->pid, &status, 0);
}

/* Lines of the coordinator's log that contain what. */
static int log_lines(const coord_proc_t *cp, const char *what)
{
    FILE *f = fopen(cp->log, "r");
    MSR_CHECK(f != NULL);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

/* A line of /proc/PID/status in kB ("VmHWM", "VmRSS"). */
static long proc_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    MSR_CHECK(f != NULL);
    long kb = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, fl) == 0 && line[fl] == ':')
            kb = strtol(line + fl + 1, NULL, 10);
    fclose(f);
    MSR_CHECK(kb >= 0);
    return kb;
}

/* ---- a valid client measuring small Sets ---- */

typedef struct latency {
    double ms[20000];
    int n;
    int failed;
} latency_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void latency_row(const char *phase, latency_t *l)
{
    qsort(l->ms, (size_t)l->n, sizeof l->ms[0], cmp_double);
    if (l->n == 0) {
        printf("%-14s %6d %8s %8s %8s %6d\n", phase, 0, "-", "-", "-", l->failed);
        return;
    }
    printf("%-14s %6d %8.3f %8.3f %8.3f %6d\n", phase, l->n, l->ms[l->n / 2],
           l->ms[(l->n * 99) / 100], l->ms[l->n - 1], l->failed);
}

static void small_set(msr_rpc_channel_t *ch, latency_t *l)
{
    uint8_t value[100] = {0};
    Msr__SetRequest r = MSR__SET_REQUEST__INIT;
    r.key = "small";
    r.value.data = value;
    r.value.len = sizeof value;
    ProtobufCMessage *resp = NULL;
    uint64_t t0 = msr_now_ns();
    msr_status_t st = msr_rpc_call(ch, MSR_RPC_SET, &r.base, msr_deadline_in_ms(30000), 1, &resp);
    double ms = (double)(msr_now_ns() - t0) / 1e6;
    msr_rpc_message_free(resp);
    if (st != MSR_OK) {
        fprintf(stderr, "valid Set failed: %s\n", msr_err_msg());
        l->failed++;
    } else if (l->n < (int)MSR_ARRAY_SIZE(l->ms)) {
        l->ms[l->n++] = ms;
    }
}

typedef struct prober {
    msr_rpc_channel_t *ch;
    latency_t lat;
    atomic_int stop;
} prober_t;

static void *probe_loop(void *arg)
{
    prober_t *p = arg;
    while (!atomic_load(&p->stop)) {
        small_set(p->ch, &p->lat);
        usleep(2000);
    }
    return NULL;
}

/* ---- the attacker: huge Sets without the token ---- */

#define ATTACK_SLOTS 6

/* The most the coordinator's peak memory may grow under the attack (it
 * grew by 1.5 GB when bodies were read before the token was checked).
 * AddressSanitizer keeps freed memory in a quarantine of 256 MiB. */
#if defined(__SANITIZE_ADDRESS__)
#define GROWTH_LIMIT_KB ((64 + 448) * 1024)
#else
#define GROWTH_LIMIT_KB (64 * 1024)
#endif

typedef struct attack_call {
    grpc_call *call;
    grpc_metadata_array init_md, trail_md;
    grpc_status_code code;
    grpc_slice details;
    grpc_byte_buffer *bb;
    int pending; /* batches not yet completed */
} attack_call_t;

static void attack_start(grpc_channel *ch, grpc_completion_queue *cq, attack_call_t *ac,
                         grpc_slice body, int tag)
{
    memset(ac, 0, sizeof *ac);
    ac->call = grpc_channel_create_call(
        ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, grpc_slice_from_static_string("/msr.Store/Set"),
        NULL, gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(60, GPR_TIMESPAN)),
        NULL);
    MSR_CHECK(ac->call != NULL);
    ac->bb = grpc_raw_byte_buffer_create(&body, 1); /* references the body: no copy */
    grpc_metadata_array_init(&ac->init_md);
    grpc_metadata_array_init(&ac->trail_md);
    grpc_metadata wrong = {grpc_slice_from_static_string(MSR_TOKEN_METADATA),
                           grpc_slice_from_static_string("a-guess"),
                           {{NULL, NULL, NULL, NULL}}};
    /* Sending may fail once the server has answered: the status comes in a
     * batch of its own. */
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (tag % 2) { /* half send a wrong token, half none */
        ops[0].data.send_initial_metadata.count = 1;
        ops[0].data.send_initial_metadata.metadata = &wrong;
    }
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = ac->bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    MSR_CHECK(grpc_call_start_batch(ac->call, ops, 3, ac, NULL) == GRPC_CALL_OK);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[0].data.recv_initial_metadata.recv_initial_metadata = &ac->init_md;
    ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[1].data.recv_status_on_client.trailing_metadata = &ac->trail_md;
    ops[1].data.recv_status_on_client.status = &ac->code;
    ops[1].data.recv_status_on_client.status_details = &ac->details;
    MSR_CHECK(grpc_call_start_batch(ac->call, ops, 2, ac, NULL) == GRPC_CALL_OK);
    ac->pending = 2;
}

static void attack_finish(attack_call_t *ac)
{
    grpc_call_unref(ac->call);
    grpc_byte_buffer_destroy(ac->bb);
    grpc_metadata_array_destroy(&ac->init_md);
    grpc_metadata_array_destroy(&ac->trail_md);
    grpc_slice_unref(ac->details);
}

/* A packed SetRequest whose value has len bytes. */
static grpc_slice set_body(size_t len)
{
    uint8_t *value = calloc(1, len);
    MSR_CHECK(value != NULL);
    Msr__SetRequest r = MSR__SET_REQUEST__INIT;
    r.key = "attack";
    r.value.data = value;
    r.value.len = len;
    size_t n = protobuf_c_message_get_packed_size(&r.base);
    uint8_t *packed = malloc(n);
    MSR_CHECK(packed != NULL);
    protobuf_c_message_pack(&r.base, packed);
    free(value);
    return grpc_slice_new(packed, n, free);
}

/* The attack's gRPC channels, one per slot (no limit on what they send),
 * and the completion queue of their calls. */
typedef struct attack {
    grpc_completion_queue *cq;
    grpc_channel *chans[ATTACK_SLOTS];
    attack_call_t calls[ATTACK_SLOTS];
    int started, done, denied;
    double seconds;
} attack_t;

static void attack_open(attack_t *at, const char *target)
{
    memset(at, 0, sizeof *at);
    at->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_arg args[] = {
        {GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = -1}},
        {GRPC_ARG_INTEGER, GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, {.integer = 1}},
    };
    grpc_channel_args cargs = {MSR_ARRAY_SIZE(args), args};
    char gtarget[80];
    snprintf(gtarget, sizeof gtarget, "ipv4:%s", target);
    for (int i = 0; i < ATTACK_SLOTS; i++) {
        grpc_channel_credentials *creds = grpc_insecure_credentials_create();
        at->chans[i] = grpc_channel_create(gtarget, creds, &cargs);
        grpc_channel_credentials_release(creds);
    }
}

static void attack_close(attack_t *at)
{
    for (int i = 0; i < ATTACK_SLOTS; i++)
        grpc_channel_destroy(at->chans[i]);
    grpc_completion_queue_shutdown(at->cq);
    while (grpc_completion_queue_next(at->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(at->cq);
}

/* Sends body as Set calls, one in flight per slot, back to back: at
 * least min_calls and for at least 3 s, but no new call after 20 s;
 * counts the calls done and those refused with PERMISSION_DENIED. */
static void attack_run(attack_t *at, grpc_slice body, int min_calls)
{
    uint64_t t0 = msr_now_ns(), stop_starting = msr_deadline_in_ms(20000);
    uint64_t min_end = msr_deadline_in_ms(3000);
    int in_flight = 0;
    for (int i = 0; i < ATTACK_SLOTS; i++) {
        attack_start(at->chans[i], at->cq, &at->calls[i], body, i);
        at->started++;
        in_flight++;
    }
    while (in_flight > 0) {
        grpc_event ev = grpc_completion_queue_next(
            at->cq,
            gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(90, GPR_TIMESPAN)),
            NULL);
        MSR_CHECK_MSG(ev.type == GRPC_OP_COMPLETE, "attack calls did not finish in 90 s");
        attack_call_t *ac = ev.tag;
        int slot = (int)(ac - at->calls);
        if (--ac->pending > 0)
            continue;
        if (ac->code == GRPC_STATUS_PERMISSION_DENIED)
            at->denied++;
        else
            fprintf(stderr, "attack call %d ended with status %d\n", at->done, (int)ac->code);
        attack_finish(ac);
        at->done++;
        in_flight--;
        uint64_t now = msr_now_ns();
        if ((at->started < min_calls || now < min_end) && now < stop_starting) {
            attack_start(at->chans[slot], at->cq, ac, body, at->started);
            at->started++;
            in_flight++;
        }
    }
    at->seconds = (double)(msr_now_ns() - t0) / 1e9;
}

static void test_big_unauthenticated_sets(void)
{
    coord_proc_t cp;
    coord_start(&cp, 2, 0);
    msr_rpc_library_ref();
    prober_t pr;
    memset(&pr, 0, sizeof pr);
    MSR_CHECK_OK(msr_rpc_channel_create(cp.target, TOKEN, &pr.ch));
    latency_t *before = calloc(1, sizeof *before);
    for (int i = 0; i < 300; i++)
        small_set(pr.ch, before);
    MSR_CHECK_EQ(before->failed, 0);
    long hwm0 = proc_kb(cp.pid, "VmHWM"), rss0 = proc_kb(cp.pid, "VmRSS");

    /* Six attackers, each on a connection of its own, send 256 MiB Sets
     * back to back: at least 24 calls (6 GiB) and for at least 3 s, but no
     * new call after 20 s. */
    const size_t value_len = (size_t)256 << 20;
    grpc_slice body = set_body(value_len);
    static attack_t at;
    attack_open(&at, cp.target);
    pthread_t th;
    MSR_CHECK(pthread_create(&th, NULL, probe_loop, &pr) == 0);
    attack_run(&at, body, 24);
    atomic_store(&pr.stop, 1);
    pthread_join(th, NULL);
    long hwm1 = proc_kb(cp.pid, "VmHWM"), rss1 = proc_kb(cp.pid, "VmRSS");

    printf("attack: %d unauthenticated Set calls of %zu MiB (%d at a time) in %.1f s, "
           "%d refused with PERMISSION_DENIED\n",
           at.done, value_len >> 20, ATTACK_SLOTS, at.seconds, at.denied);
    printf("coordinator memory: VmHWM %ld -> %ld kB (+%ld), VmRSS %ld -> %ld kB\n", hwm0, hwm1,
           hwm1 - hwm0, rss0, rss1);
    printf("valid 100-byte Set latency (ms):\n%-14s %6s %8s %8s %8s %6s\n", "phase", "sets", "p50",
           "p99", "max", "failed");
    latency_row("idle", before);
    latency_row("under attack", &pr.lat);

    attack_close(&at);
    grpc_slice_unref(body);
    msr_rpc_channel_destroy(pr.ch);
    free(before);
    coord_end(&cp);

    int refusal_lines = log_lines(&cp, "missing or wrong job token");
    printf("refusals logged in %d lines\n", refusal_lines);
    unlink(cp.log);
    MSR_CHECK_EQ(at.denied, at.done);
    MSR_CHECK_EQ(pr.lat.failed, 0);
    /* one line for the first refusal of a host, then one every 5 s */
    MSR_CHECK_MSG(refusal_lines >= 1 && refusal_lines <= 2 + (int)(at.seconds / 5),
                  "%d log lines for %d refused calls in %.1f s", refusal_lines, at.done,
                  at.seconds);
    MSR_CHECK_MSG(hwm1 - hwm0 < GROWTH_LIMIT_KB,
                  "the coordinator's peak memory grew by %ld kB under the attack", hwm1 - hwm0);
    msr_rpc_library_unref();
}

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
           from, proc_kb(cp->pid, "VmRSS"));
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
    coord_start(&cp, 8, 1024);
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
    coord_end(&cp);
    unlink(cp.log);
    msr_rpc_library_unref();
    MSR_CHECK_MSG(failed == 0, "valid calls failed, or idle connections stayed open");
}

/* ---- a valid client that cancels its calls mid-send ---- */

/* The next event of cq, waiting 30 s at most. */
static grpc_event next_event(grpc_completion_queue *cq)
{
    return grpc_completion_queue_next(
        cq, gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(30, GPR_TIMESPAN)),
        NULL);
}

/* Connects ch: one call without the token, refused. */
static void warm_up(grpc_channel *ch, grpc_completion_queue *cq)
{
    attack_call_t warm;
    grpc_slice tiny = set_body(8);
    attack_start(ch, cq, &warm, tiny, 0);
    while (warm.pending > 0) {
        grpc_event ev = next_event(cq);
        MSR_CHECK(ev.type == GRPC_OP_COMPLETE);
        warm.pending--;
    }
    MSR_CHECK_EQ(warm.code, GRPC_STATUS_PERMISSION_DENIED);
    attack_finish(&warm);
    grpc_slice_unref(tiny);
}

/* A Set call with the token, its parts and what it ends with. */
typedef struct set_call {
    grpc_call *call;
    grpc_metadata token;
    grpc_byte_buffer *body, *resp;
    grpc_metadata_array md, trail;
    grpc_status_code code;
    grpc_slice details;
} set_call_t;

static void set_call_create(set_call_t *c, grpc_channel *ch, grpc_completion_queue *cq,
                            grpc_slice *body)
{
    memset(c, 0, sizeof *c);
    c->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                       grpc_slice_from_static_string("/msr.Store/Set"), NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    c->body = grpc_raw_byte_buffer_create(body, 1);
    c->token = (grpc_metadata){grpc_slice_from_static_string(MSR_TOKEN_METADATA),
                               grpc_slice_from_static_string(TOKEN),
                               {{NULL, NULL, NULL, NULL}}};
    grpc_metadata_array_init(&c->md);
    grpc_metadata_array_init(&c->trail);
    c->code = GRPC_STATUS_OK;
    c->details = grpc_empty_slice();
}

static void set_call_destroy(set_call_t *c)
{
    grpc_call_unref(c->call);
    grpc_byte_buffer_destroy(c->body);
    if (c->resp)
        grpc_byte_buffer_destroy(c->resp);
    grpc_metadata_array_destroy(&c->md);
    grpc_metadata_array_destroy(&c->trail);
    grpc_slice_unref(c->details);
}

/* The big call's headers (tag 1), sent and waited for, its status asked
 * for (tag 2), then its body on the way (tag 4). */
static void big_start(set_call_t *c, grpc_completion_queue *cq, int k)
{
    grpc_op ops[1];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &c->token;
    MSR_CHECK(grpc_call_start_batch(c->call, ops, 1, (void *)1, NULL) == GRPC_CALL_OK);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &c->md;
    ops[0].data.recv_status_on_client.status = &c->code;
    ops[0].data.recv_status_on_client.status_details = &c->details;
    MSR_CHECK(grpc_call_start_batch(c->call, ops, 1, (void *)2, NULL) == GRPC_CALL_OK);
    grpc_event ev = next_event(cq);
    MSR_CHECK_MSG(ev.type == GRPC_OP_COMPLETE && ev.tag == (void *)1 && ev.success,
                  "call %d: its headers were not sent", k);
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_MESSAGE;
    ops[0].data.send_message.send_message = c->body;
    MSR_CHECK(grpc_call_start_batch(c->call, ops, 1, (void *)4, NULL) == GRPC_CALL_OK);
}

/* The small Set whole, in one batch (tag 3). */
static void probe_start(set_call_t *c)
{
    c->code = GRPC_STATUS_UNKNOWN;
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &c->token;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = c->body;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &c->resp;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &c->trail;
    ops[5].data.recv_status_on_client.status = &c->code;
    ops[5].data.recv_status_on_client.status_details = &c->details;
    MSR_CHECK(grpc_call_start_batch(c->call, ops, 6, (void *)3, NULL) == GRPC_CALL_OK);
}

/* Call k: a big Set cancelled once the coordinator has it and is reading
 * its body (see test_cancelled_mid_send); 1 when it ended cancelled, 0
 * when it ended before its cancel. */
static int cancel_mid_send(grpc_channel *ch, grpc_completion_queue *cq, grpc_slice *body,
                           grpc_slice *small, int k)
{
    set_call_t big, probe;
    set_call_create(&big, ch, cq, body);
    big_start(&big, cq, k);
    /* the small Set, after it on the same connection */
    set_call_create(&probe, ch, cq, small);
    probe_start(&probe);
    int big_left = 2, probe_left = 1, cancelled = 0;
    while (big_left > 0 || probe_left > 0) {
        if (probe_left == 0 && !cancelled) {
            MSR_CHECK_MSG(probe.code == GRPC_STATUS_OK, "the small Set: status %d",
                          (int)probe.code);
            grpc_call_cancel(big.call, NULL);
            cancelled = 1;
        }
        grpc_event ev = next_event(cq);
        MSR_CHECK_MSG(ev.type == GRPC_OP_COMPLETE, "call %d: no event in 30 s", k);
        if (ev.tag == (void *)3)
            probe_left--;
        else
            big_left--;
    }
    int ended_cancelled = big.code == GRPC_STATUS_CANCELLED;
    if (!ended_cancelled)
        printf("call %d ended with status %d before its cancel\n", k, (int)big.code);
    set_call_destroy(&probe);
    set_call_destroy(&big);
    return ended_cancelled;
}

/* A valid client that cancels its calls while their bodies are on the way
 * is logged as having cancelled them, not as sending malformed requests. */
static void test_cancelled_mid_send(void)
{
    coord_proc_t cp;
    coord_start(&cp, 2, 0);
    msr_rpc_library_ref();
    grpc_slice body = set_body((size_t)48 << 20);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_arg args[] = {{GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = -1}}};
    grpc_channel_args cargs = {MSR_ARRAY_SIZE(args), args};
    char gtarget[80];
    snprintf(gtarget, sizeof gtarget, "ipv4:%s", cp.target);
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(gtarget, creds, &cargs);
    grpc_channel_credentials_release(creds);
    warm_up(ch, cq); /* connect first: a refused call */
    /* Each big call is cancelled once the coordinator has it and is reading
     * its body: a small valid Set on the same connection, started once the
     * big call's headers are on their way (its stream comes after), has
     * been answered (the coordinator takes calls in the order of their
     * streams), and 48 MiB take far longer to arrive than that answer. A
     * call that ended before its cancel is not counted as cancelled. */
    grpc_slice small = set_body(8);
    const int calls = 5;
    int cancelled_sent = 0;
    for (int k = 0; k < calls; k++)
        cancelled_sent += cancel_mid_send(ch, cq, &body, &small, k);
    grpc_slice_unref(small);
    /* a valid call after them: the coordinator has handled the cancels */
    msr_rpc_channel_t *good = NULL;
    MSR_CHECK_OK(msr_rpc_channel_create(cp.target, TOKEN, &good));
    latency_t *l = calloc(1, sizeof *l);
    small_set(good, l);
    MSR_CHECK_EQ(l->failed, 0);
    free(l);
    msr_rpc_channel_destroy(good);
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    grpc_slice_unref(body);
    coord_end(&cp);
    int malformed = log_lines(&cp, "malformed"), cancelled = log_lines(&cp, "cancelled");
    printf("%d of %d calls cancelled mid-send: %d log lines say cancelled, %d say malformed\n",
           cancelled_sent, calls, cancelled, malformed);
    if (getenv("SEC_KEEP_LOG"))
        printf("log: %s\n", cp.log);
    else
        unlink(cp.log);
    msr_rpc_library_unref();
    MSR_CHECK_EQ(malformed, 0);
    MSR_CHECK(cancelled_sent >= 1);
    MSR_CHECK(cancelled >= 1);
}

static const msr_test_t tests[] = {
    {"big_unauthenticated_sets", test_big_unauthenticated_sets, 150},
    {"idle_connections", test_idle_connections, 90},
    {"cancelled_mid_send", test_cancelled_mid_send, 60},
};

int main(int argc, char **argv)
{
    return MSR_TEST_MAIN(argc, argv, tests);
}
