/* Attacks on a real coordinator over loopback by clients that do not know
 * the job's token. This file holds what the attacks share (sec_attack.h):
 * the coordinator in a child process of its own, a valid client measuring
 * small Sets, an unauthenticated Set call, and the one table of every
 * attack's tests; the attacks live in sec_attack_sets.c (huge Sets, and
 * calls cancelled mid-send) and sec_attack_idle.c (idle connections). */
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
#include "tests/security/sec_attack.h"

/* ---- the coordinator, in a child process of its own ---- */

static volatile sig_atomic_t coord_stop;

static void on_term(int sig)
{
    (void)sig;
    coord_stop = 1;
}

/* Starts a coordinator for a job of nodes nodes (one worker each) in a
 * child process; with nofile > 0 its soft descriptor limit starts there (a
 * Debian default is 1024). Call before this process uses gRPC. */
void sa_coord_start(coord_proc_t *cp, int nodes, rlim_t nofile)
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

void sa_coord_end(coord_proc_t *cp)
{
    kill(cp->pid, SIGTERM);
    int status = 0;
    waitpid(cp->pid, &status, 0);
}

/* Lines of the coordinator's log that contain what. */
int sa_log_lines(const coord_proc_t *cp, const char *what)
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
long sa_proc_kb(pid_t pid, const char *field)
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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void sa_latency_row(const char *phase, latency_t *l)
{
    qsort(l->ms, (size_t)l->n, sizeof l->ms[0], cmp_double);
    if (l->n == 0) {
        printf("%-14s %6d %8s %8s %8s %6d\n", phase, 0, "-", "-", "-", l->failed);
        return;
    }
    printf("%-14s %6d %8.3f %8.3f %8.3f %6d\n", phase, l->n, l->ms[l->n / 2],
           l->ms[(l->n * 99) / 100], l->ms[l->n - 1], l->failed);
}

void sa_small_set(msr_rpc_channel_t *ch, latency_t *l)
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

void *sa_probe_loop(void *arg)
{
    prober_t *p = arg;
    while (!atomic_load(&p->stop)) {
        sa_small_set(p->ch, &p->lat);
        usleep(2000);
    }
    return NULL;
}

void sa_attack_start(grpc_channel *ch, grpc_completion_queue *cq, attack_call_t *ac,
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

void sa_attack_finish(attack_call_t *ac)
{
    grpc_call_unref(ac->call);
    grpc_byte_buffer_destroy(ac->bb);
    grpc_metadata_array_destroy(&ac->init_md);
    grpc_metadata_array_destroy(&ac->trail_md);
    grpc_slice_unref(ac->details);
}

/* A packed SetRequest whose value has len bytes. */
grpc_slice sa_set_body(size_t len)
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

/* Every piece's tests, run as one table. */
static const msr_test_piece_t *const pieces[] = {&sa_sets_tests, &sa_idle_tests};

int main(int argc, char **argv)
{
    return msr_test_main_pieces(argc, argv, pieces, sizeof pieces / sizeof pieces[0]);
}
