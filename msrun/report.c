/* Workers' exits reported to the coordinator (through the node's relay
 * while it answers), each kept until it is acknowledged: a coordinator that restarts meanwhile
 * still hears of it. Retries are due times the agent's one timer serves (msr_reports_cron). */
#include "launcher/report.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "base/util.h"

#define NS_PER_MS 1000000ull

typedef struct report {
    msr_reports_t *rs;
    msr_list_t link;   /* in rs->pending */
    uint64_t retry_at; /* 0 while a call is in flight */
    int64_t backoff_ms;
    int generation, rank, pid, exit_code, signal;
    double time;
    char reason[128];
    int after_peer_lost;
    int via_relay; /* the call in flight went to the node's relay */
    char *tail[MSR_TAIL_LINES];
    int ntail;
} report_t;

static void report_free(report_t *r)
{
    msr_list_remove(&r->link);
    for (int i = 0; i < r->ntail; i++)
        msr_free(r->tail[i]);
    msr_free(r);
}

/* A delay between ms/2 and ms, so that many nodes retrying at once spread. */
static uint64_t jittered_ns(int64_t ms)
{
    uint32_t x;
    msr_random_bytes(&x, sizeof x);
    return (uint64_t)(ms / 2 + (int64_t)(x % (uint32_t)(ms / 2 + 1))) * NS_PER_MS;
}

static void report_done(msr_rpc_async_t *as, void *arg)
{
    report_t *r = arg;
    msr_reports_t *rs = r->rs;
    if (r->via_relay && as->status != MSR_OK && as->status != MSR_ERR_NOT_FOUND &&
        !rs->node->finished) {
        /* the relay is gone, cannot reach the coordinator or does not
         * serve this node: this report and the node's calls from now on
         * go to the coordinator */
        if (!*rs->relay_failed)
            MSR_WARN("no answer from the relay to the report of rank %d's exit (%s): calling the "
                     "coordinator directly",
                     r->rank, as->err);
        *rs->relay_failed = 1;
        r->retry_at = msr_now_ns();
        rs->retry_armed(rs->arg);
        return;
    }
    if (as->status == MSR_OK || rs->node->finished || as->status == MSR_ERR_NOT_FOUND ||
        as->status == MSR_ERR_CANCELED) {
        if (as->status != MSR_OK && !rs->node->finished)
            MSR_WARN("the report of rank %d's exit was not taken: %s", r->rank, as->err);
        report_free(r);
        return;
    }
    /* the coordinator is away: try again, it may be restarting */
    r->retry_at = msr_now_ns() + jittered_ns(r->backoff_ms);
    r->backoff_ms = r->backoff_ms * 2 > 1000 ? 1000 : r->backoff_ms * 2;
    rs->retry_armed(rs->arg);
}

static void report_send(report_t *r)
{
    msr_reports_t *rs = r->rs;
    Msr__Failure f = MSR__FAILURE__INIT;
    f.node_rank = rs->node->node_rank;
    f.host = (char *)rs->host;
    f.rank = r->rank;
    f.pid = r->pid;
    f.exit_code = r->exit_code;
    f.signal = r->signal;
    f.time = r->time;
    f.generation = r->generation;
    f.reason = r->reason;
    f.after_peer_lost = r->after_peer_lost;
    f.n_stderr_tail = (size_t)r->ntail;
    f.stderr_tail = r->tail;
    Msr__ReportRequest req = MSR__REPORT_REQUEST__INIT;
    req.node_id = (char *)rs->node_id;
    req.generation = r->generation;
    req.exit = &f;
    r->retry_at = 0;
    r->via_relay = rs->relay != NULL && !*rs->relay_failed;
    if (msr_link_call(r->via_relay ? rs->relay : rs->link, MSR_RPC_REPORT, &req.base, 5000, 1,
                      report_done, r) != MSR_OK)
        r->retry_at = msr_now_ns() + 200 * NS_PER_MS;
}

void msr_reports_init(msr_reports_t *rs, const msr_node_t *node, const char *node_id,
                      const char *host, void (*retry_armed)(void *arg), void *arg)
{
    memset(rs, 0, sizeof *rs);
    msr_list_init(&rs->pending);
    rs->node = node;
    rs->node_id = node_id;
    rs->host = host;
    rs->retry_armed = retry_armed;
    rs->arg = arg;
}

/* Copies the JSON string at p (after its opening quote) into out (len),
 * unescaped, up to its end or the first line's end; \uXXXX becomes '?'
 * outside ASCII. */
static void json_string_line(const char *p, char *out, size_t len)
{
    size_t n = 0;
    for (; *p && *p != '"' && n + 1 < len; p++) {
        char c = *p;
        if (c == '\\' && p[1]) {
            c = *++p;
            if (c == 'n' || c == 'r')
                break;
            if (c == 't')
                c = ' ';
            else if (c == 'u') {
                unsigned v = 0;
                for (int i = 0; i < 4 && isxdigit((unsigned char)p[1]); i++, p++)
                    v = v * 16 + (unsigned)(isdigit((unsigned char)p[1]) ? p[1] - '0'
                                                                         : (p[1] | 32) - 'a' + 10);
                c = v >= 32 && v < 127 ? (char)v : '?';
            } else if (c != '"' && c != '\\' && c != '/')
                c = '?';
        } else if ((unsigned char)c < 32) {
            break;
        }
        out[n++] = c;
    }
    out[n] = '\0';
}

/* The exception torch's @record wrote to the worker's error file
 * (TORCHELASTIC_ERROR_FILE): {"message": {"message": "TYPE: TEXT", ...}}
 * or {"message": "TEXT"}; its first line into out, "" without one. */
static void read_error_file(const char *path, char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = path[0] ? fopen(path, "re") : NULL;
    if (f == NULL)
        return;
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strstr(buf, "\"message\"");
    for (int depth = 0; p && depth < 2; depth++) {
        p += strlen("\"message\"");
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ':')
            p++;
        if (*p == '"') {
            json_string_line(p + 1, out, len);
            return;
        }
        p = *p == '{' ? strstr(p, "\"message\"") : NULL;
    }
}

void msr_report_exit(msr_reports_t *rs, const msr_worker_t *w, const msr_node_action_t *act,
                     int after_peer_lost)
{
    report_t *r = msr_calloc(1, sizeof *r);
    if (r == NULL) {
        MSR_ERROR("out of memory: rank %d's exit is not reported", w->rank);
        return;
    }
    r->rs = rs;
    r->backoff_ms = 50;
    msr_list_push_back(&rs->pending, &r->link);
    r->generation = act->generation;
    r->rank = w->rank;
    r->pid = (int)w->pid;
    r->exit_code = act->exit_code;
    r->signal = act->sig;
    r->time = w->exit_time;
    snprintf(r->reason, sizeof r->reason, "%s", act->text);
    char raised[96];
    if (r->exit_code != 0 && r->signal == 0 && strcmp(act->text, "exited") == 0) {
        read_error_file(w->error_file, raised, sizeof raised);
        if (raised[0]) /* "rank 1 on node 0 (...) raised ValueError: x, exited with code 1" */
            snprintf(r->reason, sizeof r->reason, "raised %s, exited", raised);
    }
    r->after_peer_lost = after_peer_lost;
    if (r->exit_code != 0 || r->signal) {
        int start = w->tail_count < MSR_TAIL_LINES ? 0 : w->tail_next;
        for (int i = 0; i < w->tail_count; i++) {
            r->tail[r->ntail] = msr_strdup(w->tail[(start + i) % MSR_TAIL_LINES]);
            if (r->tail[r->ntail])
                r->ntail++;
        }
    }
    report_send(r);
}

uint64_t msr_reports_cron(msr_reports_t *rs, uint64_t now)
{
    uint64_t next = 0;
    msr_list_t *it = rs->pending.next;
    while (it != &rs->pending) {
        report_t *r = MSR_CONTAINER_OF(it, report_t, link);
        it = it->next;
        if (r->retry_at && now >= r->retry_at)
            report_send(r);
        if (r->retry_at && (next == 0 || r->retry_at < next))
            next = r->retry_at;
    }
    return next;
}

void msr_reports_free(msr_reports_t *rs)
{
    while (!msr_list_empty(&rs->pending))
        report_free(MSR_CONTAINER_OF(rs->pending.next, report_t, link));
}
