/* rdzv_scale --dashboard: the coordinator's dashboard under the job.
 * Every node sends rounds of Progress calls while /api/job and /metrics
 * are fetched over HTTP with the job's token; one line gives their sizes
 * and median times, idle and with a round in flight. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/time.h"
#include "rdzv_scale_impl.h"

/* A TCP port free on loopback now (for the dashboard). */
int rdzv_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* GET path from the dashboard with the token; *bytes_p gets the body's
 * size. Returns the milliseconds it took, or -1 (not 200, or a failure). */
static double http_get(int port, const char *path, size_t *bytes_p)
{
    uint64_t t0 = msr_now_ns();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[256];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                     "Connection: close\r\n\r\n",
                     path, RDZV_TOKEN);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    size_t total = 0, head = 0;
    char buf[65536], first[16] = "";
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 30000) <= 0)
            break;
        ssize_t k = read(fd, buf, sizeof buf);
        if (k <= 0)
            break;
        if (total == 0)
            memcpy(first, buf, k < 15 ? (size_t)k : 15);
        if (head == 0) {
            char *e = memmem(buf, (size_t)k, "\r\n\r\n", 4);
            if (e != NULL)
                head = total + (size_t)(e - buf) + 4;
        }
        total += (size_t)k;
    }
    close(fd);
    *bytes_p = total > head ? total - head : 0;
    if (strncmp(first, "HTTP/1.1 200", 12) != 0)
        return -1;
    return (double)(msr_now_ns() - t0) / 1e6;
}

int rdzv_progress_round(sim_t *s, int64_t step, rdzv_send_t send, void *arg)
{
    enum { W = 20 };
    static double times[W];
    for (int k = 0; k < W; k++)
        times[k] = 0.1;
    int R = s->ranks;
    Msr__StepReport *reps = calloc((size_t)R, sizeof *reps);
    Msr__StepReport **repp = calloc((size_t)R, sizeof *repp);
    Msr__Scalar *loss = calloc((size_t)R, sizeof *loss);
    Msr__Scalar **lossp = calloc((size_t)R, sizeof *lossp);
    int rc = reps && repp && loss && lossp ? 0 : -1;
    for (int n = 0; rc == 0 && n < s->nodes; n++) {
        for (int i = 0; i < R; i++) {
            msr__step_report__init(&reps[i]);
            msr__scalar__init(&loss[i]);
            loss[i].name = "loss";
            loss[i].value = 10.0 / (double)(step + 1);
            lossp[i] = &loss[i];
            reps[i].rank = n * R + i;
            reps[i].step = step;
            reps[i].step_time = 0.1;
            reps[i].steps = W;
            reps[i].n_step_times = W;
            reps[i].step_times = times;
            reps[i].n_scalars = 1;
            reps[i].scalars = &lossp[i];
            repp[i] = &reps[i];
        }
        Msr__ProgressRequest req = MSR__PROGRESS_REQUEST__INIT;
        req.node_id = s->ids[n];
        req.generation = 0;
        req.n_steps = (size_t)R;
        req.steps = repp;
        /* the request is packed when the call starts: the arrays are reused */
        rc = send ? send(s, n, &req.base, arg)
                  : rdzv_start_op(s, s->direct ? n * R : n, n, MSR_RPC_PROGRESS, &req.base);
    }
    free(reps);
    free(repp);
    free(loss);
    free(lossp);
    return rc;
}

static int cmp_ms(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The dashboard under the job: a few Progress rounds, then /api/job and
 * /metrics fetched 5 times each idle, and 5 times each while a round is
 * in flight; prints their sizes and median times. */
int rdzv_dashboard_phase(sim_t *s, int port)
{
    int64_t step = 19;
    for (int r = 0; r < 3; r++, step += 20)
        if (rdzv_progress_round(s, step, NULL, NULL) != 0 || rdzv_drain(s) != 0)
            return -1;
    const char *paths[2] = {"/api/job", "/metrics"};
    double idle[2][5], busy[2][5];
    size_t bytes[2] = {0, 0};
    for (int p = 0; p < 2; p++) {
        /* a quarter of a second apart: each request waits for a snapshot the
         * coordinator renders for it (one younger than 200 ms is reused) */
        for (int k = 0; k < 5; k++) {
            usleep(250000);
            if ((idle[p][k] = http_get(port, paths[p], &bytes[p])) < 0)
                return -1;
        }
        for (int k = 0; k < 5; k++, step += 20) {
            usleep(250000);
            if (rdzv_progress_round(s, step, NULL, NULL) != 0)
                return -1;
            /* the calls are sent as the loop polls: start them, then ask */
            msr_rpc_loop_poll(s->loop, msr_deadline_in_ms(0));
            if ((busy[p][k] = http_get(port, paths[p], &bytes[p])) < 0 || rdzv_drain(s) != 0)
                return -1;
        }
        qsort(idle[p], 5, sizeof(double), cmp_ms);
        qsort(busy[p], 5, sizeof(double), cmp_ms);
    }
    printf("nodes=%-5d ranks=%-6d dashboard: api_job_KiB=%-8.1f api_job_ms=%-7.1f "
           "api_job_busy_ms=%-7.1f metrics_KiB=%-8.1f metrics_ms=%-7.1f metrics_busy_ms=%.1f\n",
           s->nodes, s->nodes * s->ranks, (double)bytes[0] / 1024, idle[0][2], busy[0][2],
           (double)bytes[1] / 1024, idle[1][2], busy[1][2]);
    fflush(stdout);
    return 0;
}
